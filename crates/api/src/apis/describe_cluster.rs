//! DescribeCluster: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::Cx;
use crate::{Broker, Reply};

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::DescribeCluster)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    request: &DescribeClusterRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    ResponseKind::DescribeCluster(
        DescribeClusterResponse::default()
            .with_error_code(code)
            .with_endpoint_type(request.endpoint_type),
    )
}

/// Serves an authorized request.
pub(crate) async fn handle(
    broker: &Arc<Broker>,
    cx: &Cx<'_>,
    request: DescribeClusterRequest,
) -> Reply {
    let Cx { v, listener, .. } = *cx;
    now(ResponseKind::DescribeCluster(
        broker.describe_cluster(request, v, listener),
    ))
}
