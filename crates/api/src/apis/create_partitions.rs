//! CreatePartitions: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::Cx;
use crate::{Broker, Reply};

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::CreatePartitions)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    request: &CreatePartitionsRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    use create_partitions_response::CreatePartitionsTopicResult;
    ResponseKind::CreatePartitions(
        CreatePartitionsResponse::default().with_results(
            request
                .topics
                .iter()
                .map(|t| {
                    CreatePartitionsTopicResult::default()
                        .with_name(t.name.clone())
                        .with_error_code(code)
                })
                .collect(),
        ),
    )
}

/// Serves an authorized request.
pub(crate) async fn handle(
    broker: &Arc<Broker>,
    _cx: &Cx<'_>,
    request: CreatePartitionsRequest,
) -> Reply {
    now(ResponseKind::CreatePartitions(
        broker.create_partitions(request).await,
    ))
}
