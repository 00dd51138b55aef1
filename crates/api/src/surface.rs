//! Parts of Kafka's surface that Weir answers without Kafka's machinery behind them:
//! `__consumer_offsets` as Metadata lists it, and DescribeLogDirs.
//!
//! Weir keeps committed offsets in the metadata store, not in a topic; but tools and clients
//! expect Kafka's internal offsets topic to be listed (with `is_internal`, so that they leave it
//! out of what they show and subscribe to by pattern), and `kafka-log-dirs` expects each broker
//! to describe its log directories.

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
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

/// Kafka's "unknown" for a volume's total and usable bytes.
const UNKNOWN_BYTES: i64 = -1;

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

    /// DescribeLogDirs: one directory per broker, holding the partitions it leads, each with the
    /// bytes it has in object storage.
    pub(crate) async fn describe_log_dirs(
        &self,
        r: DescribeLogDirsRequest,
    ) -> DescribeLogDirsResponse {
        let wanted = |topic: &str, p: i32| match &r.topics {
            None => true,
            Some(ts) => ts
                .iter()
                .any(|t| t.topic.0.as_str() == topic && t.partitions.contains(&p)),
        };
        let mut by_topic: std::collections::BTreeMap<String, Vec<DescribeLogDirsPartition>> =
            Default::default();
        let mut partitions = self.topics.local_partitions();
        partitions.sort_by(|a, b| (&a.topic, a.index).cmp(&(&b.topic, b.index)));
        for p in partitions {
            if !wanted(&p.topic, p.index) {
                continue;
            }
            let (start, _) = p.offsets();
            let size = match self
                .meta
                .ranges(p.stream_id, start.max(0) as u64, usize::MAX >> 1)
                .await
            {
                Ok(ranges) => ranges.iter().map(|r| r.size as i64).sum(),
                Err(e) => {
                    tracing::debug!(error = %e, "reading a partition's ranges failed");
                    -1
                }
            };
            by_topic.entry(p.topic.clone()).or_default().push(
                DescribeLogDirsPartition::default()
                    .with_partition_index(p.index)
                    .with_partition_size(size)
                    .with_offset_lag(0),
            );
        }
        let topics = by_topic
            .into_iter()
            .map(|(name, ps)| {
                DescribeLogDirsTopic::default()
                    .with_name(TopicName(str(&name)))
                    .with_partitions(ps)
            })
            .collect();
        DescribeLogDirsResponse::default().with_results(vec![DescribeLogDirsResult::default()
            .with_log_dir(str(&self.identity.log_dir))
            .with_topics(topics)
            .with_total_bytes(UNKNOWN_BYTES)
            .with_usable_bytes(UNKNOWN_BYTES)])
    }
}
