//! Produce: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::Cx;
use crate::{Broker, Reply};

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::Produce)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(request: &ProduceRequest, _version: i16, code: i16) -> ResponseKind {
    use produce_response::{PartitionProduceResponse, TopicProduceResponse};
    ResponseKind::Produce(
        ProduceResponse::default().with_responses(
            request
                .topic_data
                .iter()
                .map(|t| {
                    TopicProduceResponse::default()
                        .with_name(t.name.clone())
                        .with_topic_id(t.topic_id)
                        .with_partition_responses(
                            t.partition_data
                                .iter()
                                .map(|p| {
                                    PartitionProduceResponse::default()
                                        .with_index(p.index)
                                        .with_error_code(code)
                                        .with_base_offset(-1)
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    )
}

/// Serves an authorized request.
pub(crate) async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: ProduceRequest) -> Reply {
    let Cx {
        v, zone, listener, ..
    } = *cx;
    broker.produce(request, v, zone, listener).await
}
