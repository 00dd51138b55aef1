//! ShareAcknowledge (KIP-932): the versions Weir serves, its error response, what it must be
//! authorized for, and its handler: acknowledgements without a fetch, on the member's share
//! session (epoch -1 closes it and releases what the member still holds).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::share_acknowledge_response::{
    PartitionData, ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;
use weir_share::partition::AckBatch;
use weir_share::session::{Part, Step};

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::share_fetch::{acknowledge, group_and_member, session_error};
use crate::apis::{Api, Cx};
use crate::authz::{refuse, serve, Check, Gate};
use crate::{str, Broker, Reply};

/// ShareAcknowledge.
pub(crate) struct ShareAcknowledge;

impl Api for ShareAcknowledge {
    type Request = ShareAcknowledgeRequest;

    /// Versions 1-2, as Kafka 4.4 serves (2: RENEW acknowledgements, the lock duration in the
    /// response).
    fn versions() -> (i16, i16) {
        (1, 2)
    }

    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::ShareAcknowledge(ShareAcknowledgeResponse::default().with_error_code(code))
    }

    /// READ on the group (topics per partition, by the handler).
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        match &r.group_id {
            Some(g) if !check.group(Operation::Read, g) => refuse(
                &RequestKind::ShareAcknowledge(r),
                E::GroupAuthorizationFailed,
                v,
            ),
            _ => serve(RequestKind::ShareAcknowledge(r)),
        }
    }

    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, r: Self::Request) -> Reply {
        let refused = |e: E, message: String| {
            now(ResponseKind::ShareAcknowledge(
                ShareAcknowledgeResponse::default()
                    .with_error_code(e.code())
                    .with_error_message((!message.is_empty()).then(|| str(&message))),
            ))
        };
        let (group, member) = match group_and_member(r.group_id.as_ref(), r.member_id.as_ref()) {
            Ok(gm) => gm,
            Err((e, m)) => return refused(e, m),
        };
        if r.share_session_epoch == 0 {
            return refused(E::InvalidShareSessionEpoch, String::new());
        }
        let step =
            match broker
                .shares
                .step(&group, &member, r.share_session_epoch, cx.conn.id, &[], &[])
            {
                Ok(step) => step,
                Err(e) => return refused(session_error(e), String::new()),
            };
        let check = broker.check_for(cx.conn);
        let renew = cx.v >= 2 && r.is_renew_ack;
        let mut results: BTreeMap<Part, i16> = BTreeMap::new();
        let mut messages: BTreeMap<Part, String> = BTreeMap::new();
        for t in &r.topics {
            for p in &t.partitions {
                let part = (*t.topic_id.as_bytes(), p.partition_index);
                let batches: Vec<AckBatch> = p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| AckBatch {
                        first_offset: b.first_offset,
                        last_offset: b.last_offset,
                        types: b.acknowledge_types.clone(),
                    })
                    .collect();
                let outcome = acknowledge(
                    broker,
                    check.as_ref(),
                    &group,
                    &member,
                    part,
                    &batches,
                    renew,
                )
                .await;
                results.insert(part, outcome.as_ref().map_or_else(|(e, _)| e.code(), |_| 0));
                if let Err((_, m)) = outcome {
                    messages.insert(part, m);
                }
            }
        }
        if let Step::Closed { parts } = step {
            broker.shares.release(&group, &member, &parts).await;
        }
        let mut topics: BTreeMap<[u8; 16], Vec<PartitionData>> = BTreeMap::new();
        for (part, code) in results {
            let message = messages.remove(&part).filter(|m| !m.is_empty());
            topics.entry(part.0).or_default().push(
                PartitionData::default()
                    .with_partition_index(part.1)
                    .with_error_code(code)
                    .with_error_message(message.map(|m| str(&m))),
            );
        }
        let lock_ms = broker.shares.configs().get(&group).await.limits.lock_ms;
        now(ResponseKind::ShareAcknowledge(
            ShareAcknowledgeResponse::default()
                .with_acquisition_lock_timeout_ms(lock_ms.min(i32::MAX as u64) as i32)
                .with_responses(
                    topics
                        .into_iter()
                        .map(|(id, partitions)| {
                            ShareAcknowledgeTopicResponse::default()
                                .with_topic_id(uuid::Uuid::from_bytes(id))
                                .with_partitions(partitions)
                        })
                        .collect(),
                ),
        ))
    }

    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use RequestKind as R;
        vec![
            (
                "no session",
                R::ShareAcknowledge(
                    ShareAcknowledgeRequest::default()
                        .with_group_id(Some(GroupId(s("sg-versions"))))
                        .with_member_id(Some(s("member-3")))
                        .with_share_session_epoch(2),
                ),
            ),
            (
                "no group",
                R::ShareAcknowledge(ShareAcknowledgeRequest::default()),
            ),
        ]
    }
}
