//! Produce: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{refuse, sift, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

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

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        if let Some(id) = &r.transactional_id {
            if !check.txn(Operation::Write, id) {
                return refuse(
                    &RequestKind::Produce(r),
                    E::TransactionalIdAuthorizationFailed,
                    v,
                );
            }
        }
        sift!(
            v,
            Produce,
            ProduceRequest,
            r.topic_data,
            |t| { check.topic(Operation::Write, &broker.topic_name(&t.name, &t.topic_id)) },
            E::TopicAuthorizationFailed
        )
    }

    // What `authorize` took out comes back in the response's `responses`.
    crate::authz::joins_denied!(Produce.responses);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx {
            v, zone, listener, ..
        } = *cx;
        broker.produce(request, v, zone, listener).await
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{batch, s, topic, MISSING, TOPIC};
        use bytes::Bytes;
        use kafka_protocol::messages::*;
        use uuid::Uuid;
        use RequestKind as R;
        let t = |name: &str, id: Uuid, parts: Vec<i32>| {
            let t = produce_request::TopicProduceData::default().with_partition_data(
                parts
                    .into_iter()
                    .map(|i| {
                        produce_request::PartitionProduceData::default()
                            .with_index(i)
                            .with_records(Some(batch(2)))
                    })
                    .collect(),
            );
            if v >= 13 {
                t.with_topic_id(id)
            } else {
                t.with_name(topic(name))
            }
        };
        let req = |topics| {
            ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(5000)
                .with_topic_data(topics)
        };
        vec![
            (
                "existing and missing partitions",
                R::Produce(req(vec![
                    t(TOPIC, e.topic_id, vec![0, 1, 7]),
                    t(MISSING, Uuid::new_v4(), vec![0]),
                ])),
            ),
            (
                "transactional",
                R::Produce(
                    req(vec![t(TOPIC, e.topic_id, vec![0])])
                        .with_transactional_id(Some(TransactionalId(s("tx")))),
                ),
            ),
            (
                "corrupt batch",
                R::Produce(req(vec![{
                    let t = produce_request::TopicProduceData::default().with_partition_data(vec![
                        produce_request::PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(Bytes::from_static(&[0u8; 70]))),
                    ]);
                    if v >= 13 {
                        t.with_topic_id(e.topic_id)
                    } else {
                        t.with_name(topic(TOPIC))
                    }
                }])),
            ),
        ]
    }
}
