//! DescribeConfigs: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::Cx;
use crate::{Broker, Reply};

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::DescribeConfigs)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    request: &DescribeConfigsRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    use describe_configs_response::DescribeConfigsResult;
    ResponseKind::DescribeConfigs(
        DescribeConfigsResponse::default().with_results(
            request
                .resources
                .iter()
                .map(|res| {
                    DescribeConfigsResult::default()
                        .with_resource_type(res.resource_type)
                        .with_resource_name(res.resource_name.clone())
                        .with_error_code(code)
                })
                .collect(),
        ),
    )
}

/// Serves an authorized request.
pub(crate) async fn handle(
    broker: &Arc<Broker>,
    cx: &Cx<'_>,
    request: DescribeConfigsRequest,
) -> Reply {
    let Cx { v, .. } = *cx;
    now(ResponseKind::DescribeConfigs(
        broker.describe_configs(request, v).await,
    ))
}
