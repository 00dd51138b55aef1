//! Metadata: the versions Weir serves, its error response, what it must be authorized for, and its
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

    /// What the request must be authorized for, and the parts of it refused. The response
    /// tells the principal what it may do: `put_back` always gets its checks.
    fn authorize(broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        authorize_topics(broker, check, r, v).telling(check)
    }

    /// Puts back what `authorize` took out (`denied`: the error response of those parts), and
    /// leaves out what the principal may not see (`filter`).
    fn put_back(
        broker: &Broker,
        response: ResponseKind,
        denied: Option<ResponseKind>,
        filter: Option<&Check>,
    ) -> ResponseKind {
        let ResponseKind::Metadata(mut r) = response else {
            return response;
        };
        if let Some(ResponseKind::Metadata(d)) = denied {
            r.topics.extend(d.topics);
        }
        if let Some(check) = filter {
            let r = &mut r;
            // Topics refused by name keep their error; the others need DESCRIBE.
            let refused = E::TopicAuthorizationFailed.code();
            r.topics.retain(|t| {
                let name = t.name.as_ref().map_or("", |n| n.as_str());
                t.error_code == refused
                    || check.topic(Operation::Describe, &broker.topic_name(name, &t.topic_id))
            });
            for t in &mut r.topics {
                if t.topic_authorized_operations != i32::MIN && t.error_code != refused {
                    let name = t.name.as_ref().map_or("", |n| n.as_str());
                    t.topic_authorized_operations =
                        check.topic_operations(&broker.topic_name(name, &t.topic_id));
                }
            }
            if r.cluster_authorized_operations != i32::MIN {
                r.cluster_authorized_operations = check.cluster_operations();
            }
        }
        ResponseKind::Metadata(r)
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

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{topic, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use uuid::Uuid;
        use RequestKind as R;
        let auto = format!("auto-created-{v}");
        let named = |names: &[&str]| {
            Some(
                names
                    .iter()
                    .map(|n| {
                        metadata_request::MetadataRequestTopic::default().with_name(Some(topic(n)))
                    })
                    .collect(),
            )
        };
        let base = || {
            let r = MetadataRequest::default();
            let r = if v >= 4 {
                r.with_allow_auto_topic_creation(false)
            } else {
                r
            };
            if (8..=10).contains(&v) {
                r.with_include_cluster_authorized_operations(true)
                    .with_include_topic_authorized_operations(true)
            } else if v >= 8 {
                r.with_include_topic_authorized_operations(true)
            } else {
                r
            }
        };
        let mut out = vec![
            (
                "all topics",
                R::Metadata(base().with_topics(if v >= 1 { None } else { Some(vec![]) })),
            ),
            (
                "existing, missing, invalid",
                // v0-3 create what they name: not the topic that other APIs expect missing.
                R::Metadata(base().with_topics(named(&[
                    TOPIC,
                    if v >= 4 { MISSING } else { &auto },
                    "bad name!",
                ]))),
            ),
        ];
        if v >= 10 {
            out.push((
                "by id",
                R::Metadata(
                    base().with_topics(Some(
                        [e.topic_id, Uuid::new_v4()]
                            .into_iter()
                            .map(|id| {
                                metadata_request::MetadataRequestTopic::default().with_topic_id(id)
                            })
                            .collect(),
                    )),
                ),
            ));
        }
        out
    }
}

/// Metadata of the topics the principal may describe; the others are answered
/// TOPIC_AUTHORIZATION_FAILED.
fn authorize_topics(broker: &Broker, check: &Check, mut r: MetadataRequest, v: i16) -> Gate {
    let Some(topics) = r.topics.take() else {
        // Every topic: those the principal may not describe are left out.
        return Gate::Serve {
            request: RequestKind::Metadata(r),
            denied: None,
            filter: Some(check.clone()),
        };
    };
    let (ok, no) = split(topics, |t| {
        let name = t.name.as_ref().map_or("", |n| n.as_str());
        check.topic(Operation::Describe, &broker.topic_name(name, &t.topic_id))
    });
    // Auto-creation needs CREATE on the cluster or on the topic; a missing topic the
    // principal may not create is answered TOPIC_AUTHORIZATION_FAILED, as Kafka does.
    let (ok, no) = if r.allow_auto_topic_creation && !check.cluster(Operation::Create) {
        let (ok, mut more) = split(ok, |t| {
            t.name
                .as_ref()
                .is_none_or(|n| broker.topics.get(n).is_some() || check.topic(Operation::Create, n))
        });
        more.extend(no);
        (ok, more)
    } else {
        (ok, no)
    };
    let any = !no.is_empty();
    r.topics = Some(ok);
    partly(
        RequestKind::Metadata(r),
        RequestKind::Metadata(MetadataRequest::default().with_topics(Some(no))),
        any,
        E::TopicAuthorizationFailed,
        v,
    )
}
