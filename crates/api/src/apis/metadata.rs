//! Metadata: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

/// Metadata.
pub(crate) struct Metadata;

impl Api for Metadata {
    type Request = MetadataRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::Metadata)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use metadata_response::MetadataResponseTopic;
        ResponseKind::Metadata(
            MetadataResponse::default().with_topics(
                request
                    .topics
                    .iter()
                    .flatten()
                    .map(|t| {
                        MetadataResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                            .with_error_code(code)
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
        now(ResponseKind::Metadata(
            broker.metadata(request, v, zone, listener).await,
        ))
    }
}
