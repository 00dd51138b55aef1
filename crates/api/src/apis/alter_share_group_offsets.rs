//! AlterShareGroupOffsets (KIP-932): the versions Weir serves, its error response, what it must
//! be authorized for, and its handler: sets share-partitions' start offsets of an empty share
//! group (creating the group, as Kafka does). Each reset raises the share-partition's state
//! epoch in the metadata store, so its leader's copy is out of date: the leader finds out when a
//! member opens a session with it, or at its next write, and reads the state again.

use std::sync::Arc;

use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition as Partition,
    AlterShareGroupOffsetsResponseTopic as Topic,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::share_group_offsets::share_group;
use crate::apis::{Api, Cx};
use crate::authz::{refuse, serve, Check, Gate};
use crate::{str, Broker, Reply};

/// AlterShareGroupOffsets.
pub(crate) struct AlterShareGroupOffsets;

impl Api for AlterShareGroupOffsets {
    type Request = AlterShareGroupOffsetsRequest;

    /// Version 0, as Kafka 4.4 serves.
    fn versions() -> (i16, i16) {
        (0, 0)
    }

    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::AlterShareGroupOffsets(
            AlterShareGroupOffsetsResponse::default().with_error_code(code),
        )
    }

    /// READ on the group, READ on every topic named.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        if !check.group(Operation::Read, &r.group_id) {
            return refuse(
                &RequestKind::AlterShareGroupOffsets(r),
                E::GroupAuthorizationFailed,
                v,
            );
        }
        if r.topics
            .iter()
            .any(|t| !check.topic(Operation::Read, &t.topic_name))
        {
            return refuse(
                &RequestKind::AlterShareGroupOffsets(r),
                E::TopicAuthorizationFailed,
                v,
            );
        }
        serve(RequestKind::AlterShareGroupOffsets(r))
    }

    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, r: Self::Request) -> Reply {
        let group = r.group_id.to_string();
        let refused = |code: i16, message: String| {
            now(ResponseKind::AlterShareGroupOffsets(
                AlterShareGroupOffsetsResponse::default()
                    .with_error_code(code)
                    .with_error_message((!message.is_empty()).then(|| str(&message))),
            ))
        };
        if let Err(code) = broker.groups.create_share_group(&group).await {
            let message = match code {
                c if c == E::GroupIdNotFound.code() => {
                    format!("Group {group} is not a share group.")
                }
                _ => String::new(),
            };
            return refused(code, message);
        }
        if let Err((code, message)) = share_group(broker, &group, true).await {
            return refused(code, message);
        }
        let mut topics = Vec::with_capacity(r.topics.len());
        for t in r.topics {
            let topic = broker.topics.get(&t.topic_name);
            let mut partitions = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let out = Partition::default().with_partition_index(p.partition_index);
                let exists = topic
                    .as_ref()
                    .is_some_and(|tp| tp.stream(p.partition_index).is_some());
                let code = if !exists {
                    E::UnknownTopicOrPartition.code()
                } else if p.start_offset < 0 {
                    E::InvalidRequest.code()
                } else {
                    match broker
                        .meta
                        .reset_share_state(&group, &t.topic_name, p.partition_index, p.start_offset)
                        .await
                    {
                        Ok(_) => 0,
                        Err(e) => {
                            tracing::warn!(group, error = %e, "resetting a share-partition failed");
                            E::KafkaStorageError.code()
                        }
                    }
                };
                partitions.push(out.with_error_code(code));
            }
            topics.push(
                Topic::default()
                    .with_topic_name(t.topic_name)
                    .with_topic_id(
                        topic.map_or(uuid::Uuid::nil(), |tp| uuid::Uuid::from_bytes(tp.id)),
                    )
                    .with_partitions(partitions),
            );
        }
        broker.shares.forget(&group);
        now(ResponseKind::AlterShareGroupOffsets(
            AlterShareGroupOffsetsResponse::default().with_responses(topics),
        ))
    }

    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, topic, MISSING, TOPIC};
        use alter_share_group_offsets_request::*;
        use RequestKind as R;
        let t = |name: &str| {
            AlterShareGroupOffsetsRequestTopic::default()
                .with_topic_name(topic(name))
                .with_partitions(vec![AlterShareGroupOffsetsRequestPartition::default()
                    .with_partition_index(0)
                    .with_start_offset(0)])
        };
        vec![(
            "known and missing topics",
            R::AlterShareGroupOffsets(
                AlterShareGroupOffsetsRequest::default()
                    .with_group_id(GroupId(s("sg-offsets")))
                    .with_topics(vec![t(TOPIC), t(MISSING)]),
            ),
        )]
    }
}
