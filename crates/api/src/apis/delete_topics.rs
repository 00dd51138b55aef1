//! DeleteTopics: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::admin::err_parts;
use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{partly, split, Check, Gate};
use crate::{str, Broker, Reply};
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
            delete_topics(broker, request, v).await,
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

async fn delete_topics(
    broker: &Broker,
    r: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let targets: Vec<(Option<String>, Uuid)> = if version >= 6 {
        r.topics
            .into_iter()
            .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        r.topic_names
            .into_iter()
            .map(|n| (Some(n.0.to_string()), Uuid::nil()))
            .collect()
    };
    let mut out = Vec::with_capacity(targets.len());
    for (name, id) in targets {
        let name = match name {
            Some(n) => Some(n),
            None => broker
                .topics
                .get_by_id(id.as_bytes())
                .map(|t| t.name.clone()),
        };
        let res = DeletableTopicResult::default()
            .with_name(name.as_deref().map(|n| TopicName(str(n))))
            .with_topic_id(id);
        out.push(match name {
            None => res.with_error_code(ResponseError::UnknownTopicId.code()),
            Some(n) => match broker.topics.delete(&n).await {
                Ok(id) => res.with_topic_id(Uuid::from_bytes(id)),
                Err(e) => {
                    let (code, msg) = err_parts(&e);
                    res.with_error_code(code).with_error_message(msg)
                }
            },
        });
    }
    DeleteTopicsResponse::default().with_responses(out)
}
