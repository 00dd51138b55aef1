//! CreateTopics: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::admin::{err_parts, SOURCE_DEFAULT, SOURCE_DYNAMIC_TOPIC};
use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{partly, split, Check, Gate};
use crate::{str, Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

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

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        let cluster_create = check.cluster(Operation::Create);
        let (ok, no) = split(std::mem::take(&mut r.topics), |t| {
            cluster_create || check.topic(Operation::Create, &t.name)
        });
        let any = !no.is_empty();
        r.topics = ok;
        let mut gate = partly(
            RequestKind::CreateTopics(r),
            RequestKind::CreateTopics(CreateTopicsRequest::default().with_topics(no)),
            any,
            E::TopicAuthorizationFailed,
            v,
        );
        // The created topics' configs are shown only with DESCRIBE_CONFIGS.
        if let Gate::Serve { filter, .. } = &mut gate {
            *filter = Some(check.clone());
        }
        gate
    }

    /// Puts back what `authorize` took out (`denied`: the error response of those parts), and
    /// leaves out what the principal may not see (`filter`).
    fn put_back(
        _broker: &Broker,
        response: ResponseKind,
        denied: Option<ResponseKind>,
        filter: Option<&Check>,
    ) -> ResponseKind {
        let ResponseKind::CreateTopics(mut r) = response else {
            return response;
        };
        if let Some(ResponseKind::CreateTopics(d)) = denied {
            r.topics.extend(d.topics);
        }
        if let Some(check) = filter {
            let r = &mut r;
            for t in &mut r.topics {
                if t.error_code == 0 && !check.topic(Operation::DescribeConfigs, &t.name) {
                    t.topic_config_error_code = E::TopicAuthorizationFailed.code();
                    t.configs = None;
                    t.num_partitions = -1;
                    t.replication_factor = -1;
                }
            }
        }
        ResponseKind::CreateTopics(r)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::CreateTopics(
            create_topics(broker, request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let t = |name: String, n: i32| {
            create_topics_request::CreatableTopic::default()
                .with_name(TopicName(s(&name)))
                .with_num_partitions(n)
                .with_replication_factor(1)
                .with_configs(vec![create_topics_request::CreatableTopicConfig::default()
                    .with_name(s("retention.ms"))
                    .with_value(Some(s("60000")))])
        };
        vec![
            (
                "new, existing, invalid",
                R::CreateTopics(CreateTopicsRequest::default().with_topics(vec![
                    t(format!("created-{v}"), 2),
                    t(TOPIC.into(), 1),
                    t("bad name!".into(), 1),
                    t(format!("zero-{v}"), 0),
                ])),
            ),
            (
                "validate only",
                R::CreateTopics(
                    CreateTopicsRequest::default()
                        .with_topics(vec![t(format!("validated-{v}"), -1)])
                        .with_validate_only(true),
                ),
            ),
        ]
    }
}

async fn create_topics(
    broker: &Broker,
    r: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let mut results = Vec::with_capacity(r.topics.len());
    for t in r.topics {
        let name = t.name.0.to_string();
        let partitions = if t.assignments.is_empty() {
            t.num_partitions
        } else {
            t.assignments.len() as i32
        };
        let mut configs = BTreeMap::new();
        for c in &t.configs {
            if let Some(v) = &c.value {
                configs.insert(c.name.to_string(), v.to_string());
            }
        }
        let res = CreatableTopicResult::default().with_name(t.name.clone());
        if name == crate::surface::OFFSETS_TOPIC {
            // Kafka's internal offsets topic always exists (see `surface.rs`).
            results.push(
                res.with_error_code(ResponseError::TopicAlreadyExists.code())
                    .with_error_message(Some(crate::str(
                        "__consumer_offsets is internal: offsets live in the metadata store",
                    ))),
            );
            continue;
        }
        let replication = if t.replication_factor == -1 {
            1
        } else {
            t.replication_factor
        };
        results.push(
            match broker
                .topics
                .create(&name, partitions, configs, r.validate_only)
                .await
            {
                Ok(topic) => {
                    if !r.validate_only {
                        broker.wait_for_leaders(&topic.name).await;
                    }
                    let mut res = res
                        .with_topic_id(Uuid::from_bytes(topic.id))
                        .with_num_partitions(if r.validate_only {
                            if partitions == -1 {
                                broker.topics.defaults().num_partitions as i32
                            } else {
                                partitions
                            }
                        } else {
                            topic.partition_count() as i32
                        })
                        .with_replication_factor(replication);
                    if version >= 5 {
                        res = res.with_configs(Some(
                            broker
                                .topics
                                .describe_configs(&topic)
                                .into_iter()
                                .map(|e| {
                                    CreatableTopicConfigs::default()
                                        .with_name(str(&e.name))
                                        .with_value(Some(str(&e.value)))
                                        .with_config_source(if e.is_default {
                                            SOURCE_DEFAULT
                                        } else {
                                            SOURCE_DYNAMIC_TOPIC
                                        })
                                })
                                .collect(),
                        ));
                    }
                    res
                }
                Err(e) => {
                    let (code, msg) = err_parts(&e);
                    res.with_error_code(code)
                        .with_error_message(msg)
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                }
            },
        );
    }
    CreateTopicsResponse::default().with_topics(results)
}
