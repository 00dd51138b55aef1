//! DeleteTopics: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{partly, split, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

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

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        let (ok, no) = split(std::mem::take(&mut r.topic_names), |t| {
            check.topic(Operation::Delete, t)
        });
        let (ok6, no6) = split(std::mem::take(&mut r.topics), |t| {
            let name = t.name.as_ref().map_or("", |n| n.as_str());
            check.topic(Operation::Delete, &broker.topic_name(name, &t.topic_id))
        });
        let any = !no.is_empty() || !no6.is_empty();
        r.topic_names = ok;
        r.topics = ok6;
        partly(
            RequestKind::DeleteTopics(r),
            RequestKind::DeleteTopics(
                DeleteTopicsRequest::default()
                    .with_topic_names(no)
                    .with_topics(no6),
            ),
            any,
            E::TopicAuthorizationFailed,
            v,
        )
    }

    // What `authorize` took out comes back in the response's `responses`.
    crate::authz::joins_denied!(DeleteTopics.responses);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::DeleteTopics(
            broker.delete_topics(request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, topic, MISSING};
        use kafka_protocol::messages::*;
        use uuid::Uuid;
        use RequestKind as R;
        let doomed = format!("doomed-{v}");
        e.topics
            .create(&doomed, 1, Default::default(), false)
            .await
            .expect("create a topic to delete");
        let r = if v >= 6 {
            DeleteTopicsRequest::default().with_topics(vec![
                delete_topics_request::DeleteTopicState::default()
                    .with_name(Some(TopicName(s(&doomed)))),
                delete_topics_request::DeleteTopicState::default().with_name(Some(topic(MISSING))),
                delete_topics_request::DeleteTopicState::default().with_topic_id(Uuid::new_v4()),
            ])
        } else {
            DeleteTopicsRequest::default()
                .with_topic_names(vec![TopicName(s(&doomed)), topic(MISSING)])
        };
        vec![("existing and missing", R::DeleteTopics(r))]
    }
}
