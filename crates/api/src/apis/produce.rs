//! Produce: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler: validate, append through each partition's leader, answer once durable.
//!
//! A partition led in another zone, produced by a client of this broker's zone, is forwarded
//! (`weir_zone::Forwarder`): its bytes go to object storage and the leader appends them. It is
//! handed over here, in request order, like the appends of partitions led here.
//!
//! A topic with schema validation (`confluent.key.schema.validation`,
//! `confluent.value.schema.validation`) has each batch's records checked against the schema
//! registry before anything is appended (`weir_registry::validate`): a record that fails refuses
//! its partition's batch with INVALID_RECORD, the record's index and the reason.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::*;
use tokio::sync::oneshot;
use weir_partition::{Lookup, ProduceTicket, Produced, Topic};
use weir_zone::handoff::Outcome;

#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{refuse, sift, Check, Gate};
use crate::{str, Broker, LeaderHint, Reply};
use kafka_protocol::ResponseError as E;
use produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
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
    ///
    /// Offsets are assigned here, in request order, before the next request on this connection is
    /// read; durability is awaited in the reply.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let began = Instant::now();
        let acks = request.acks;
        let topics = start(broker, cx, request).await;
        let reply = answer(
            Arc::clone(broker),
            topics,
            cx.zone.map(str::to_string),
            cx.listener.to_string(),
            began,
        );
        if acks == 0 {
            return Reply::Silent(Box::pin(async move {
                let _ = reply.await;
            }));
        }
        Reply::Later(Box::pin(reply))
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

/// A partition's produce, started.
enum Started {
    Local(ProduceTicket),
    Forwarded(oneshot::Receiver<Outcome>),
}

impl Started {
    async fn wait(self) -> Result<Produced, E> {
        match self {
            Started::Local(t) => t.wait().await,
            Started::Forwarded(rx) => match rx.await {
                Ok(Ok(r)) if r.error == 0 => Ok(Produced {
                    base_offset: r.base_offset,
                    log_start_offset: r.log_start_offset,
                }),
                Ok(Ok(r)) => Err(error_of(r.error)),
                Ok(Err(code)) => Err(error_of(code)),
                Err(_) => Err(E::NotLeaderOrFollower),
            },
        }
    }
}

fn error_of(code: i16) -> E {
    E::try_from_code(code).unwrap_or(E::UnknownServerError)
}

/// One topic of the request, its partitions started in request order.
struct StartedTopic {
    /// The name and id as the request gave them.
    name: TopicName,
    id: uuid::Uuid,
    /// The topic's name, when it exists.
    known: Option<String>,
    parts: Vec<(i32, Result<Started, Refusal>)>,
}

/// Why a partition's batch was not appended: the error, and for a record refused by the
/// topic's schema validation, which record and why (produce v8+ show them to the producer).
struct Refusal {
    error: E,
    record: Option<weir_registry::validate::Invalid>,
}

impl From<E> for Refusal {
    fn from(error: E) -> Refusal {
        Refusal {
            error,
            record: None,
        }
    }
}

/// What every partition of one request shares while it is started.
struct Request<'a> {
    transactional_id: Option<String>,
    v: i16,
    zone: Option<&'a str>,
    /// A broker whose session lapsed may be replaced at any moment: it refuses before writing
    /// (the WAL would refuse to acknowledge anyway).
    may_acknowledge: bool,
    /// Transactional partitions that could not join their transaction.
    refused: BTreeMap<(String, i32), E>,
}

/// Starts every partition's produce, in request order.
async fn start(broker: &Arc<Broker>, cx: &Cx<'_>, r: ProduceRequest) -> Vec<StartedTopic> {
    let transactional_id = r
        .transactional_id
        .as_ref()
        .map(|t| t.to_string())
        .filter(|t| !t.is_empty());
    let topics: Vec<Option<Arc<Topic>>> = r
        .topic_data
        .iter()
        .map(|t| match cx.v >= 13 {
            true => broker.topics.get_by_id(t.topic_id.as_bytes()),
            false => broker.topics.get(t.name.0.as_str()),
        })
        .collect();
    // Transactions V2: the request's transactional partitions join their transaction first (the
    // client sends no AddPartitionsToTxn).
    let refused = match &transactional_id {
        Some(id) if cx.v >= 12 => {
            broker
                .add_produce_partitions(id, &r.topic_data, &topics)
                .await
        }
        _ => BTreeMap::new(),
    };
    let req = Request {
        transactional_id,
        v: cx.v,
        zone: cx.zone,
        may_acknowledge: broker.cluster.may_acknowledge(),
        refused,
    };
    let mut started = Vec::with_capacity(topics.len());
    for (t, topic) in r.topic_data.into_iter().zip(topics) {
        let mut parts = Vec::with_capacity(t.partition_data.len());
        for p in t.partition_data {
            let records = p.records.unwrap_or_default();
            broker.meters.produce_bytes.add(records.len() as u64);
            let part = match check_schemas(broker, topic.as_deref(), &records).await {
                Ok(()) => start_one(broker, &req, topic.as_deref(), p.index, records)
                    .await
                    .map_err(Refusal::from),
                Err(invalid) => Err(Refusal {
                    error: E::InvalidRecord,
                    record: Some(invalid),
                }),
            };
            parts.push((p.index, part));
        }
        started.push(StartedTopic {
            name: t.name,
            id: t.topic_id,
            known: topic.map(|t| t.name.clone()),
            parts,
        });
    }
    started
}

/// Checks a batch against its topic's schema validation, if the topic has any.
async fn check_schemas(
    broker: &Broker,
    topic: Option<&Topic>,
    records: &bytes::Bytes,
) -> Result<(), weir_registry::validate::Invalid> {
    let Some(topic) = topic else {
        return Ok(());
    };
    let Some(policy) = weir_registry::validate::SchemaPolicy::of(&topic.configs) else {
        return Ok(());
    };
    let Some(payloads) = weir_partition::clean::record_payloads(records) else {
        // What cannot be read cannot be checked: refused here, whatever the append would say.
        return Err(weir_registry::validate::Invalid {
            index: 0,
            message: "the batch cannot be read, so its records cannot be checked against the \
                      topic's schema validation"
                .to_string(),
        });
    };
    broker.schemas.check(&topic.name, &policy, &payloads).await
}

/// Starts one partition's produce: appended here, forwarded to its leader in another zone, or
/// refused.
async fn start_one(
    broker: &Broker,
    req: &Request<'_>,
    topic: Option<&Topic>,
    index: i32,
    records: bytes::Bytes,
) -> Result<Started, E> {
    let Some(topic) = topic else {
        return Err(match req.v >= 13 {
            true => E::UnknownTopicId,
            false => E::UnknownTopicOrPartition,
        });
    };
    if let Some(e) = req.refused.get(&(topic.name.clone(), index)) {
        return Err(*e);
    }
    match broker.topics.lookup(&topic.name, index) {
        Lookup::Local(_) if !req.may_acknowledge => Err(E::NotLeaderOrFollower),
        Lookup::Local(partition) => {
            // KIP-890: a transaction's first write here is checked against its state first.
            // This waits before the next request of the connection is read, so the
            // connection's order holds.
            let check = match &req.transactional_id {
                Some(id) => broker.verify_txn_produce(id, &partition, &records).await,
                None => Ok(weir_partition::TxnCheck::None),
            };
            check
                .and_then(|c| partition.start_produce_checked(&records, c))
                .map(Started::Local)
        }
        Lookup::NotHere => forward(broker, req, &topic.name, index, records),
        Lookup::Unknown if req.v >= 13 => Err(E::UnknownTopicId),
        Lookup::Unknown => Err(E::UnknownTopicOrPartition),
    }
}

/// Hands a partition led in another zone to the forwarder, where zones are in use.
fn forward(
    broker: &Broker,
    req: &Request<'_>,
    topic: &str,
    index: i32,
    records: bytes::Bytes,
) -> Result<Started, E> {
    let zones = broker.zones.as_ref().ok_or(E::NotLeaderOrFollower)?;
    let remote = broker
        .remote(req.zone, topic, index)
        .ok_or(E::NotLeaderOrFollower)?;
    zones.meters.forwarded_partitions.inc();
    Ok(Started::Forwarded(zones.forwarder.submit_transactional(
        remote.leader,
        topic,
        index,
        records,
        req.transactional_id.as_deref().unwrap_or(""),
    )))
}

/// Waits for every partition, in request order, and builds the response.
async fn answer(
    broker: Arc<Broker>,
    topics: Vec<StartedTopic>,
    zone: Option<String>,
    listener: String,
    began: Instant,
) -> ResponseKind {
    let mut responses = Vec::with_capacity(topics.len());
    let mut endpoints: Vec<NodeEndpoint> = Vec::new();
    for t in topics {
        let mut prs = Vec::with_capacity(t.parts.len());
        for (index, started) in t.parts {
            let result = match started {
                Ok(s) => s.wait().await.map_err(Refusal::from),
                Err(e) => Err(e),
            };
            let hint = match (&result, &t.known) {
                (
                    Err(Refusal {
                        error: E::NotLeaderOrFollower,
                        ..
                    }),
                    Some(name),
                ) => broker.leader_hint(zone.as_deref(), &listener, name, index),
                _ => None,
            };
            let pr = partition_response(index, result);
            prs.push(match hint {
                Some(h) => with_leader(pr, &h, &mut endpoints),
                None => pr,
            });
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(t.name)
                .with_topic_id(t.id)
                .with_partition_responses(prs),
        );
    }
    broker.meters.produce_latency.record(began.elapsed());
    ResponseKind::Produce(
        ProduceResponse::default()
            .with_responses(responses)
            .with_node_endpoints(endpoints),
    )
}

/// What a refused partition's answer says (v8+ show it to the producer).
fn error_message(e: E) -> String {
    match e {
        // The one policy of the produce path.
        E::PolicyViolation => "the topic is a mirror of a cluster link's source topic: it is \
                               read-only until the link promotes it (weir link promote)"
            .to_string(),
        e => e.to_string(),
    }
}

fn partition_response(index: i32, result: Result<Produced, Refusal>) -> PartitionProduceResponse {
    let pr = PartitionProduceResponse::default()
        .with_index(index)
        .with_log_append_time_ms(-1);
    match result {
        Ok(ok) => pr
            .with_base_offset(ok.base_offset)
            .with_log_start_offset(ok.log_start_offset),
        Err(Refusal {
            error,
            record: Some(invalid),
        }) => pr
            .with_error_code(error.code())
            .with_base_offset(-1)
            .with_log_start_offset(-1)
            .with_error_message(Some(str(&invalid.message)))
            .with_record_errors(vec![BatchIndexAndErrorMessage::default()
                .with_batch_index(i32::try_from(invalid.index).unwrap_or(i32::MAX))
                .with_batch_index_error_message(Some(str(&invalid.message)))]),
        Err(Refusal {
            error,
            record: None,
        }) => pr
            .with_error_code(error.code())
            .with_base_offset(-1)
            .with_log_start_offset(-1)
            .with_error_message(Some(str(&error_message(error)))),
    }
}

/// KIP-951: the new leader in the response, so the client re-routes without a metadata round trip
/// (v10+; older versions drop these fields).
fn with_leader(
    pr: PartitionProduceResponse,
    h: &LeaderHint,
    endpoints: &mut Vec<NodeEndpoint>,
) -> PartitionProduceResponse {
    if !endpoints.iter().any(|e| e.node_id.0 == h.node_id) {
        endpoints.push(
            NodeEndpoint::default()
                .with_node_id(BrokerId(h.node_id))
                .with_host(str(&h.host))
                .with_port(h.port)
                .with_rack((!h.rack.is_empty()).then(|| str(&h.rack))),
        );
    }
    pr.with_current_leader(
        LeaderIdAndEpoch::default()
            .with_leader_id(BrokerId(h.node_id))
            .with_leader_epoch(h.epoch),
    )
}
