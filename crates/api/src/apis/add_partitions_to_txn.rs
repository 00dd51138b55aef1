//! AddPartitionsToTxn: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use crate::txn::{add_partitions_results, fenced_for};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;
use weir_partition::Lookup;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, partly, refuse, split, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// AddPartitionsToTxn.
pub(crate) struct AddPartitionsToTxn;

impl Api for AddPartitionsToTxn {
    type Request = AddPartitionsToTxnRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::AddPartitionsToTxn)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, version: i16, code: i16) -> ResponseKind {
        let topics = |ts| crate::txn::add_partitions_results(ts, &|_, _| code);
        ResponseKind::AddPartitionsToTxn(if version <= 3 {
            AddPartitionsToTxnResponse::default()
                .with_results_by_topic_v3_and_below(topics(&request.v3_and_below_topics))
        } else {
            AddPartitionsToTxnResponse::default().with_error_code(code)
        })
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        if v >= 4 {
            // Batched, from brokers verifying transactions.
            return cluster(
                check,
                Operation::ClusterAction,
                RequestKind::AddPartitionsToTxn(r),
                v,
            );
        }
        if !check.txn(Operation::Write, &r.v3_and_below_transactional_id) {
            return refuse(
                &RequestKind::AddPartitionsToTxn(r),
                E::TransactionalIdAuthorizationFailed,
                v,
            );
        }
        let (ok, no) = split(std::mem::take(&mut r.v3_and_below_topics), |t| {
            check.topic(Operation::Write, &t.name)
        });
        let any = !no.is_empty();
        r.v3_and_below_topics = ok;
        partly(
            RequestKind::AddPartitionsToTxn(r),
            RequestKind::AddPartitionsToTxn(
                AddPartitionsToTxnRequest::default().with_v3_and_below_topics(no),
            ),
            any,
            E::TopicAuthorizationFailed,
            v,
        )
    }

    /// Puts back what `authorize` took out (`denied`: the error response of those parts), and
    /// leaves out what the principal may not see (`filter`).
    fn put_back(
        _broker: &Broker,
        response: ResponseKind,
        denied: Option<ResponseKind>,
        _filter: Option<&Check>,
    ) -> ResponseKind {
        let ResponseKind::AddPartitionsToTxn(mut r) = response else {
            return response;
        };
        if let Some(ResponseKind::AddPartitionsToTxn(d)) = denied {
            r.results_by_topic_v3_and_below
                .extend(d.results_by_topic_v3_and_below);
        }
        ResponseKind::AddPartitionsToTxn(r)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::AddPartitionsToTxn(
            add_partitions_to_txn(broker, request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, topic, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let topics = vec![
            add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(topic(TOPIC))
                .with_partitions(vec![0, 1]),
            add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(topic(MISSING))
                .with_partitions(vec![0]),
        ];
        let r = if v <= 3 {
            AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(TransactionalId(s("tx")))
                .with_v3_and_below_producer_id(ProducerId(7))
                .with_v3_and_below_producer_epoch(0)
                .with_v3_and_below_topics(topics)
        } else {
            AddPartitionsToTxnRequest::default().with_transactions(vec![
                add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                    .with_transactional_id(TransactionalId(s("tx")))
                    .with_producer_id(ProducerId(7))
                    .with_verify_only(true)
                    .with_topics(topics),
            ])
        };
        vec![(
            "unknown producer, a missing topic",
            R::AddPartitionsToTxn(r),
        )]
    }
}

async fn add_partitions_to_txn(
    broker: &Broker,
    r: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    use add_partitions_to_txn_response::*;
    if version <= 3 {
        let topics = &r.v3_and_below_topics;
        let outcome = add_partitions(
            broker,
            &r.v3_and_below_transactional_id,
            r.v3_and_below_producer_id.0,
            r.v3_and_below_producer_epoch,
            topics,
            false,
        )
        .await;
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(
            add_partitions_results(topics, &|t, p| outcome(t, p, version)),
        );
    }
    let mut out = Vec::with_capacity(r.transactions.len());
    for t in &r.transactions {
        let outcome = add_partitions(
            broker,
            &t.transactional_id,
            t.producer_id.0,
            t.producer_epoch,
            &t.topics,
            t.verify_only,
        )
        .await;
        out.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id.clone())
                .with_topic_results(add_partitions_results(&t.topics, &|n, p| {
                    outcome(n, p, version)
                })),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(out)
}

/// Adds (or with `verify_only`, checks) partitions of one transaction; returns each
/// partition's code, given the request's version.
async fn add_partitions(
    broker: &Broker,
    id: &TransactionalId,
    pid: i64,
    epoch: i16,
    topics: &[add_partitions_to_txn_request::AddPartitionsToTxnTopic],
    verify_only: bool,
) -> impl Fn(&str, i32, i16) -> i16 {
    let wanted: Vec<(String, i32)> = topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|&p| (t.name.to_string(), p)))
        .collect();
    let unknown: Vec<(String, i32)> = wanted
        .iter()
        .filter(|(t, p)| matches!(broker.topics.lookup(t, *p), Lookup::Unknown))
        .cloned()
        .collect();
    // As Kafka: if any partition is unknown, none is added.
    let verdict: Result<BTreeMap<(String, i32), i16>, ResponseError> = if !unknown.is_empty() {
        Ok(BTreeMap::new())
    } else if verify_only {
        broker
            .txns
            .verify_partitions(id, pid, epoch, &wanted)
            .await
            .map(|ok| {
                wanted
                    .iter()
                    .cloned()
                    .zip(ok)
                    .map(|(p, ok)| {
                        let c = if ok {
                            0
                        } else {
                            ResponseError::InvalidTxnState.code()
                        };
                        (p, c)
                    })
                    .collect()
            })
    } else {
        broker
            .txns
            .add_partitions(id, pid, epoch, &wanted)
            .await
            .map(|()| BTreeMap::new())
    };
    move |t: &str, p: i32, version: i16| -> i16 {
        let key = (t.to_string(), p);
        if !unknown.is_empty() {
            return if unknown.contains(&key) {
                ResponseError::UnknownTopicOrPartition.code()
            } else {
                ResponseError::OperationNotAttempted.code()
            };
        }
        match &verdict {
            Ok(codes) => codes.get(&key).copied().unwrap_or(0),
            Err(e) => fenced_for(*e, version, 2).code(),
        }
    }
}
