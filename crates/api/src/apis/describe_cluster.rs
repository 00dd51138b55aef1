//! DescribeCluster: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
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

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, listener, .. } = *cx;
        now(ResponseKind::DescribeCluster(
            broker.describe_cluster(request, v, listener),
        ))
    }
}
