//! DeleteTopics: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

/// DeleteTopics.
pub(crate) struct DeleteTopics;

impl Api for DeleteTopics {
    type Request = DeleteTopicsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DeleteTopics)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, version: i16, code: i16) -> ResponseKind {
        use delete_topics_response::DeletableTopicResult;
        let results = if version >= 6 {
            request
                .topics
                .iter()
                .map(|t| {
                    DeletableTopicResult::default()
                        .with_name(t.name.clone())
                        .with_topic_id(t.topic_id)
                        .with_error_code(code)
                })
                .collect()
        } else {
            request
                .topic_names
                .iter()
                .map(|n| {
                    DeletableTopicResult::default()
                        .with_name(Some(n.clone()))
                        .with_error_code(code)
                })
                .collect()
        };
        ResponseKind::DeleteTopics(DeleteTopicsResponse::default().with_responses(results))
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::DeleteTopics(
            broker.delete_topics(request, v).await,
        ))
    }
}
