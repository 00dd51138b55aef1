//! CreatePartitions: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

/// CreatePartitions.
pub(crate) struct CreatePartitions;

impl Api for CreatePartitions {
    type Request = CreatePartitionsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::CreatePartitions)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
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
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::CreatePartitions(
            broker.create_partitions(request).await,
        ))
    }
}
