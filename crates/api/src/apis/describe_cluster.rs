//! DescribeCluster: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::authz::{Check, Gate};
use crate::{Broker, Reply};

/// DescribeCluster.
pub(crate) struct DescribeCluster;

impl Api for DescribeCluster {
    type Request = DescribeClusterRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DescribeCluster)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::DescribeCluster(
            DescribeClusterResponse::default()
                .with_error_code(code)
                .with_endpoint_type(request.endpoint_type),
        )
    }

    /// Kafka serves DescribeCluster to everyone; what the principal may do on the
    /// cluster is what its authorized operations say.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, _v: i16) -> Gate {
        Gate::Serve {
            request: RequestKind::DescribeCluster(r),
            denied: None,
            filter: Some(check.clone()),
        }
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, listener, .. } = *cx;
        now(ResponseKind::DescribeCluster(
            broker.describe_cluster(request, v, listener),
        ))
    }
}
