//! The consumer groups a cluster link copies offsets into: this broker's group coordinator,
//! written to as an admin tool writes (no member, no generation), so that a group with members
//! refuses it.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{GroupId, OffsetCommitRequest, OffsetFetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use weir_link::groups::{Copied, GroupOffset, GroupTarget};

/// OffsetFetch v7: one group, every topic.
const FETCH_VERSION: i16 = 7;
/// OffsetCommit v8: the last before topic ids; a generation of -1 and no member is an admin's.
const COMMIT_VERSION: i16 = 8;

pub struct Groups(pub Arc<weir_api::Broker>);

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

#[async_trait::async_trait]
impl GroupTarget for Groups {
    fn coordinates(&self, group: &str) -> bool {
        let cluster = &self.0.cluster;
        cluster
            .view()
            .coordinator(group)
            .is_some_and(|b| b.node_id == cluster.node_id())
    }

    async fn committed(&self, group: &str) -> Result<Vec<GroupOffset>, String> {
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(None);
        let r = self.0.groups.offset_fetch(req, FETCH_VERSION).await;
        if let Some(e) = ResponseError::try_from_code(r.error_code) {
            return Err(format!("reading group {group}'s offsets here: {e}"));
        }
        Ok(r.topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.committed_offset >= 0)
                    .map(|p| GroupOffset {
                        topic: t.name.0.to_string(),
                        partition: p.partition_index,
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p
                            .metadata
                            .as_ref()
                            .map(|m| m.to_string())
                            .unwrap_or_default(),
                    })
            })
            .collect())
    }

    async fn commit(&self, group: &str, offsets: &[GroupOffset]) -> Result<Copied, String> {
        let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for o in offsets {
            by_topic.entry(&o.topic).or_default().push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(o.partition)
                    .with_committed_offset(o.offset)
                    .with_committed_leader_epoch(o.leader_epoch)
                    .with_committed_metadata(Some(s(&o.metadata))),
            );
        }
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id_or_member_epoch(-1)
            .with_member_id(s(""))
            .with_topics(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetCommitRequestTopic::default()
                            .with_name(TopicName(s(t)))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        let topics = Arc::clone(&self.0.topics);
        let exists =
            move |t: &str, p: i32| !matches!(topics.lookup(t, p), weir_partition::Lookup::Unknown);
        let r = self
            .0
            .groups
            .offset_commit(req, COMMIT_VERSION, &exists)
            .await;
        for t in &r.topics {
            for p in &t.partitions {
                match ResponseError::try_from_code(p.error_code) {
                    None => {}
                    // A member or a generation: the group runs here now.
                    Some(
                        ResponseError::UnknownMemberId
                        | ResponseError::IllegalGeneration
                        | ResponseError::RebalanceInProgress
                        | ResponseError::StaleMemberEpoch,
                    ) => return Ok(Copied::HasMembers),
                    Some(e) => {
                        return Err(format!(
                            "committing group {group}'s offset of {}-{}: {e}",
                            t.name.0, p.partition_index
                        ))
                    }
                }
            }
        }
        Ok(Copied::Committed)
    }
}
