//! TxnOffsetCommit: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use crate::txn::fenced_for;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use weir_meta::{GroupOffset, MetaError};
use weir_partition::Lookup;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{refuse, sift, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// TxnOffsetCommit.
pub(crate) struct TxnOffsetCommit;

impl Api for TxnOffsetCommit {
    type Request = TxnOffsetCommitRequest;

    /// The versions Weir serves: up to 5 (Kafka 4.4's v6 names topics by id, KIP-1319: not yet).
    fn versions() -> (i16, i16) {
        super::capped(ApiKey::TxnOffsetCommit, 5)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use txn_offset_commit_response::*;
        ResponseKind::TxnOffsetCommit(
            TxnOffsetCommitResponse::default().with_topics(
                request
                    .topics
                    .iter()
                    .map(|t| {
                        TxnOffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        TxnOffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        if !check.txn(Operation::Write, &r.transactional_id) {
            return refuse(
                &RequestKind::TxnOffsetCommit(r),
                E::TransactionalIdAuthorizationFailed,
                v,
            );
        }
        if !check.group(Operation::Read, &r.group_id) {
            return refuse(
                &RequestKind::TxnOffsetCommit(r),
                E::GroupAuthorizationFailed,
                v,
            );
        }
        sift!(
            v,
            TxnOffsetCommit,
            TxnOffsetCommitRequest,
            r.topics,
            |t| { check.topic(Operation::Read, &t.name) },
            E::TopicAuthorizationFailed
        )
    }

    // What `authorize` took out comes back in the response's `topics`.
    crate::authz::joins_denied!(TxnOffsetCommit.topics);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::TxnOffsetCommit(
            txn_offset_commit(broker, request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, topic, GROUP, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "no such transaction",
            R::TxnOffsetCommit(
                TxnOffsetCommitRequest::default()
                    .with_transactional_id(TransactionalId(s("tx")))
                    .with_group_id(GroupId(s(GROUP)))
                    .with_producer_id(ProducerId(7))
                    .with_generation_id_or_member_epoch(-1)
                    .with_topics(vec![
                        txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                            .with_name(topic(TOPIC))
                            .with_partitions(vec![
                                txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                                    .with_partition_index(0)
                                    .with_committed_offset(1),
                            ]),
                    ]),
            ),
        )]
    }
}

/// TxnOffsetCommit: checked against the group (this broker must coordinate it), then staged
/// in the metadata store with the transaction, which commits or drops them when it ends.
async fn txn_offset_commit(
    broker: &Broker,
    r: TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    use txn_offset_commit_response::*;
    let partitions: Vec<(String, i32)> = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.to_string(), p.partition_index))
        })
        .collect();
    let group_error = broker
        .groups
        .validate_txn_offset_commit(
            &r.group_id,
            &r.member_id,
            r.group_instance_id.as_deref(),
            r.generation_id_or_member_epoch,
            &partitions,
        )
        .await
        .err();
    let commit_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut staged = Vec::new();
    let mut unknown = Vec::new();
    for t in &r.topics {
        for p in &t.partitions {
            if p.partition_index < 0
                || matches!(
                    broker.topics.lookup(&t.name, p.partition_index),
                    Lookup::Unknown
                )
            {
                unknown.push((t.name.to_string(), p.partition_index));
                continue;
            }
            staged.push(GroupOffset {
                topic: t.name.to_string(),
                partition: p.partition_index as u32,
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                commit_ms,
            });
        }
    }
    // v5+: Transactions V2, the group joins the transaction here (no AddOffsetsToTxn).
    let group_error = match group_error {
        None if version >= 5 && !staged.is_empty() => broker
            .txns
            .add_implicitly(
                &r.transactional_id,
                r.producer_id.0,
                r.producer_epoch,
                &[],
                Some(&r.group_id),
            )
            .await
            .err()
            .map(|e| match e {
                ResponseError::ConcurrentTransactions | ResponseError::NotCoordinator => {
                    ResponseError::CoordinatorLoadInProgress.code()
                }
                e => fenced_for(e, version, 3).code(),
            }),
        other => other,
    };
    let error = match group_error {
        Some(e) => e,
        None if staged.is_empty() => 0,
        None => match broker
            .meta
            .stage_txn_offsets(
                &r.transactional_id,
                r.producer_id.0,
                r.producer_epoch,
                &r.group_id,
                staged,
            )
            .await
        {
            Ok(()) => 0,
            Err(MetaError::TxnConflict(_)) => txn_offset_refusal(
                broker,
                &r.transactional_id,
                r.producer_id.0,
                r.producer_epoch,
            )
            .await
            .map_or(0, |e| fenced_for(e, version, 3).code()),
            Err(e) => {
                tracing::warn!(error = %e, "staging transactional offsets failed");
                ResponseError::CoordinatorNotAvailable.code()
            }
        },
    };
    let topics = r
        .topics
        .iter()
        .map(|t| {
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            let c = if unknown.iter().any(|(n, i)| {
                                n.as_str() == t.name.0.as_str() && *i == p.partition_index
                            }) {
                                ResponseError::UnknownTopicOrPartition.code()
                            } else {
                                error
                            };
                            TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(c)
                        })
                        .collect(),
                )
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

/// Why the transaction refused offsets: its producer was fenced, or the group was not added
/// (or the transaction is not open).
async fn txn_offset_refusal(
    broker: &Broker,
    id: &str,
    pid: i64,
    epoch: i16,
) -> Option<ResponseError> {
    match broker.meta.load_transaction(id).await {
        Ok(Some(t)) if t.producer_id == pid && t.producer_epoch > epoch => {
            Some(ResponseError::ProducerFenced)
        }
        Ok(Some(t)) if t.producer_id != pid => Some(ResponseError::InvalidProducerIdMapping),
        Ok(_) => Some(ResponseError::InvalidTxnState),
        Err(_) => Some(ResponseError::CoordinatorNotAvailable),
    }
}
