//! CreateTopics: the versions Weir serves, its error response, what it must be authorized for, and its
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
            broker.create_topics(request, v).await,
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
