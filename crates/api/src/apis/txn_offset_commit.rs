//! TxnOffsetCommit: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

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

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::TxnOffsetCommit)
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
            broker.txn_offset_commit(request, v).await,
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
                    .with_generation_id(-1)
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
