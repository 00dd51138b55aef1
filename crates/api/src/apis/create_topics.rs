//! CreateTopics: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

/// CreateTopics.
pub(crate) struct CreateTopics;

impl Api for CreateTopics {
    type Request = CreateTopicsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::CreateTopics)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use create_topics_response::CreatableTopicResult;
        ResponseKind::CreateTopics(
            CreateTopicsResponse::default().with_topics(
                request
                    .topics
                    .iter()
                    .map(|t| {
                        CreatableTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        )
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::CreateTopics(
            broker.create_topics(request, v).await,
        ))
    }
}
