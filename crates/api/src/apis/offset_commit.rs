//! OffsetCommit: the versions Weir serves, its error response, what it must be authorized for, and its
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

/// OffsetCommit.
pub(crate) struct OffsetCommit;

impl Api for OffsetCommit {
    type Request = OffsetCommitRequest;

    /// The versions Weir serves: v10 names topics by id, which franz-go encodes in a way that does not
    /// decode here; Kafka 4.1 speaks up to 9.
    fn versions() -> (i16, i16) {
        super::capped(ApiKey::OffsetCommit, 9)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
        ResponseKind::OffsetCommit(
            OffsetCommitResponse::default().with_topics(
                request
                    .topics
                    .iter()
                    .map(|t| {
                        OffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        OffsetCommitResponsePartition::default()
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
        if !check.group(Operation::Read, &r.group_id) {
            return refuse(
                &RequestKind::OffsetCommit(r),
                E::GroupAuthorizationFailed,
                v,
            );
        }
        sift!(
            v,
            OffsetCommit,
            OffsetCommitRequest,
            r.topics,
            |t| { check.topic(Operation::Read, &t.name) },
            E::TopicAuthorizationFailed
        )
    }

    // What `authorize` took out comes back in the response's `topics`.
    crate::authz::joins_denied!(OffsetCommit.topics);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        let topics = Arc::clone(&broker.topics);
        // The partition may be led by another broker than the group's coordinator.
        let exists =
            move |t: &str, p: i32| !matches!(topics.lookup(t, p), weir_partition::Lookup::Unknown);
        now(ResponseKind::OffsetCommit(
            broker.groups.offset_commit(request, v, &exists).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, topic, GROUP, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let part = |p: i32| {
            offset_commit_request::OffsetCommitRequestPartition::default()
                .with_partition_index(p)
                .with_committed_offset(1)
                .with_committed_metadata(Some(s("m")))
        };
        vec![(
            "simple commit, existing and missing",
            R::OffsetCommit(
                OffsetCommitRequest::default()
                    .with_group_id(GroupId(s(GROUP)))
                    .with_generation_id_or_member_epoch(-1)
                    .with_topics(vec![
                        offset_commit_request::OffsetCommitRequestTopic::default()
                            .with_name(topic(TOPIC))
                            .with_partitions(vec![part(0), part(1), part(9)]),
                        offset_commit_request::OffsetCommitRequestTopic::default()
                            .with_name(topic(MISSING))
                            .with_partitions(vec![part(0)]),
                    ]),
            ),
        )]
    }
}
