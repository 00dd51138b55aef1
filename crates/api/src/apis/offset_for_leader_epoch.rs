//! OffsetForLeaderEpoch: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{sift, Check, Gate};
use crate::{Broker, Reply};
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
        use offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
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
            broker.offset_for_leader_epoch(request, zone).await,
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
