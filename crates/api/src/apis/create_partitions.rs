//! CreatePartitions: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::*;

use crate::admin::err_parts;
use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{sift, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// CreatePartitions.
pub(crate) struct CreatePartitions;

impl Api for CreatePartitions {
    type Request = CreatePartitionsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::CreatePartitions)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use create_partitions_response::CreatePartitionsTopicResult;
        ResponseKind::CreatePartitions(
            CreatePartitionsResponse::default().with_results(
                request
                    .topics
                    .iter()
                    .map(|t| {
                        CreatePartitionsTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        sift!(
            v,
            CreatePartitions,
            CreatePartitionsRequest,
            r.topics,
            |t| { check.topic(Operation::Alter, &t.name) },
            E::TopicAuthorizationFailed
        )
    }

    // What `authorize` took out comes back in the response's `results`.
    crate::authz::joins_denied!(CreatePartitions.results);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::CreatePartitions(
            create_partitions(broker, request).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let grow = format!("grow-{v}");
        e.topics
            .create(&grow, 1, Default::default(), false)
            .await
            .expect("create a topic to grow");
        let t = |name: &str, n: i32| {
            create_partitions_request::CreatePartitionsTopic::default()
                .with_name(TopicName(s(name)))
                .with_count(n)
        };
        vec![(
            "grow, shrink, missing",
            R::CreatePartitions(CreatePartitionsRequest::default().with_topics(vec![
                t(&grow, 3),
                t(TOPIC, 1),
                t(MISSING, 4),
            ])),
        )]
    }
}

async fn create_partitions(
    broker: &Broker,
    r: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(r.topics.len());
    for t in r.topics {
        let res = CreatePartitionsTopicResult::default().with_name(t.name.clone());
        results.push(
            match broker
                .topics
                .add_partitions(t.name.0.as_str(), t.count, r.validate_only)
                .await
            {
                Ok(()) => {
                    if !r.validate_only {
                        broker.wait_for_leaders(t.name.0.as_str()).await;
                    }
                    res
                }
                Err(e) => {
                    let (code, msg) = err_parts(&e);
                    res.with_error_code(code).with_error_message(msg)
                }
            },
        );
    }
    CreatePartitionsResponse::default().with_results(results)
}
