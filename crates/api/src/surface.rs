//! `__consumer_offsets` as Metadata lists it: part of Kafka's surface that Weir answers without
//! Kafka's machinery behind it (DescribeLogDirs, the other part, is in its module in `apis/`).
//!
//! Weir keeps committed offsets in the metadata store, not in a topic; but tools and clients
//! expect Kafka's internal offsets topic to be listed (with `is_internal`, so that they leave it
//! out of what they show and subscribe to by pattern).

use kafka_protocol::messages::metadata_response::{
    MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::*;
use uuid::Uuid;
use weir_cluster::ClusterView;

use crate::{str, Broker};

/// Kafka's internal topic of committed offsets.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Kafka's default `offsets.topic.num.partitions`.
const OFFSETS_PARTITIONS: i32 = 50;

impl Broker {
    /// `__consumer_offsets` as Kafka lists it: internal, 50 partitions, each led by a serving
    /// broker. Its records cannot be read (offsets live in the metadata store): fetches answer
    /// UNKNOWN_TOPIC_OR_PARTITION.
    pub(crate) fn offsets_topic_metadata(&self, view: &ClusterView) -> MetadataResponseTopic {
        let mut brokers: Vec<i32> = view.serving_brokers().map(|b| b.node_id).collect();
        brokers.sort_unstable();
        // The same id on every broker and every restart: derived from the cluster id.
        let hash = |salt: u8| {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (salt, &self.identity.cluster_id, OFFSETS_TOPIC).hash(&mut h);
            h.finish()
        };
        let id = Uuid::from_u64_pair(hash(0), hash(1));
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(str(OFFSETS_TOPIC))))
            .with_topic_id(id)
            .with_is_internal(true)
            .with_topic_authorized_operations(i32::MIN)
            .with_partitions(
                (0..OFFSETS_PARTITIONS)
                    .map(|i| {
                        let p = MetadataResponsePartition::default().with_partition_index(i);
                        match brokers.get(i as usize % brokers.len().max(1)) {
                            Some(&b) => p
                                .with_leader_id(BrokerId(b))
                                .with_leader_epoch(0)
                                .with_replica_nodes(vec![BrokerId(b)])
                                .with_isr_nodes(vec![BrokerId(b)]),
                            None => p
                                .with_error_code(
                                    kafka_protocol::ResponseError::LeaderNotAvailable.code(),
                                )
                                .with_leader_id(BrokerId(-1)),
                        }
                    })
                    .collect(),
            )
    }
}
