//! OffsetForLeaderEpoch: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{sift, Check, Gate};
use crate::{epoch_mismatch, Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// OffsetForLeaderEpoch.
pub(crate) struct OffsetForLeaderEpoch;

impl Api for OffsetForLeaderEpoch {
    type Request = OffsetForLeaderEpochRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::OffsetForLeaderEpoch)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::OffsetForLeaderEpoch(
            OffsetForLeaderEpochResponse::default().with_topics(
                request
                    .topics
                    .iter()
                    .map(|t| {
                        OffsetForLeaderTopicResult::default()
                            .with_topic(t.topic.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        EpochEndOffset::default()
                                            .with_partition(p.partition)
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
        sift!(
            v,
            OffsetForLeaderEpoch,
            OffsetForLeaderEpochRequest,
            r.topics,
            |t| { check.topic(Operation::Describe, &t.topic) },
            E::TopicAuthorizationFailed
        )
    }

    // What `authorize` took out comes back in the response's `topics`.
    crate::authz::joins_denied!(OffsetForLeaderEpoch.topics);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { zone, .. } = *cx;
        now(ResponseKind::OffsetForLeaderEpoch(
            offset_for_leader_epoch(broker, request, zone).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{topic, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let p = |epoch: i32, current: i32| {
            offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                .with_partition(0)
                .with_leader_epoch(epoch)
                .with_current_leader_epoch(current)
        };
        let r = OffsetForLeaderEpochRequest::default().with_topics(vec![
            offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                .with_topic(topic(TOPIC))
                .with_partitions(vec![p(0, -1), p(1000, -1), p(0, 1000)]),
            offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                .with_topic(topic(MISSING))
                .with_partitions(vec![p(0, -1)]),
        ]);
        let r = if v >= 3 {
            r.with_replica_id(BrokerId(-1))
        } else {
            r
        };
        vec![("epochs", R::OffsetForLeaderEpoch(r))]
    }
}

/// Weir never truncates acknowledged data, so every epoch a client knows ends at the high
/// watermark: answering so tells a client that validates its position after a leader change
/// that nothing it read was lost.
async fn offset_for_leader_epoch(
    broker: &Broker,
    r: OffsetForLeaderEpochRequest,
    zone: Option<&str>,
) -> OffsetForLeaderEpochResponse {
    let mut topics = Vec::with_capacity(r.topics.len());
    for t in r.topics {
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let (topic, index) = (t.topic.0.as_str(), p.partition);
            // (leader epoch, high watermark): of the partition led here, or, for one
            // served here for a leader in another zone, that leader's from the feed.
            let current = match broker.topics.partition(topic, index) {
                Some(part) => Ok((part.leader_epoch, part.offsets().1)),
                None => match broker.remote_offsets(zone, topic, index).await {
                    Some((_, o)) => o.map(|o| (o.epoch, o.high_watermark)),
                    None => Err(broker.topics.missing_error(topic, index)),
                },
            };
            let e = EpochEndOffset::default().with_partition(index);
            let fail = |err: E| {
                e.clone()
                    .with_error_code(err.code())
                    .with_leader_epoch(-1)
                    .with_end_offset(-1)
            };
            parts.push(match current {
                Err(err) => fail(err),
                Ok((epoch, hw)) => match epoch_mismatch(p.current_leader_epoch, epoch) {
                    Some(err) => fail(err),
                    None if p.leader_epoch > epoch => e.with_leader_epoch(-1).with_end_offset(-1),
                    None => e.with_leader_epoch(p.leader_epoch).with_end_offset(hw),
                },
            });
        }
        topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(parts),
        );
    }
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
