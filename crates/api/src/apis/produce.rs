//! Produce: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

/// Produce.
pub(crate) struct Produce;

impl Api for Produce {
    type Request = ProduceRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::Produce)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
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
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx {
            v, zone, listener, ..
        } = *cx;
        broker.produce(request, v, zone, listener).await
    }
}
