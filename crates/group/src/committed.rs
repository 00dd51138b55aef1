//! The committed offsets of the groups this broker coordinates, as a meter
//! (`weir_consumer_group_committed_offset{group, topic, partition}`): with each partition's
//! `weir_partition_high_watermark`, exported by its leader, a dashboard computes every group's
//! lag, as Kafka's lag exporters do from ListOffsets and OffsetFetch. Offsets live in the metadata
//! store, not in memory, so they are read again every interval (one read per group), not at
//! each scrape.

use std::sync::{Arc, RwLock};

use weir_meta::MetaError;

use crate::GroupCoordinator;

/// One group's committed offset of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub group: String,
    pub topic: String,
    pub partition: u32,
    pub offset: i64,
}

/// The offsets read last, shared with the meter that exports them.
#[derive(Debug, Default, Clone)]
pub struct CommittedOffsets(Arc<RwLock<Arc<Vec<CommittedOffset>>>>);

impl CommittedOffsets {
    /// The offsets read last.
    pub fn get(&self) -> Arc<Vec<CommittedOffset>> {
        Arc::clone(&self.0.read().unwrap_or_else(|e| e.into_inner()))
    }

    fn set(&self, offsets: Vec<CommittedOffset>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(offsets);
    }

    /// Declares `weir_consumer_group_committed_offset`.
    pub fn register(&self, r: &mut weir_metrics::Registry) {
        let offsets = self.clone();
        r.gauges_read(
            "consumer_group_committed_offset",
            "Committed offset of each partition of each group this broker coordinates, read from the metadata store every broker.group_offsets_meter_interval_ms; a group's lag is its partitions' weir_partition_high_watermark minus this.",
            move || {
                offsets
                    .get()
                    .iter()
                    .map(|o| {
                        let labels = vec![
                            ("group", o.group.clone()),
                            ("topic", o.topic.clone()),
                            ("partition", o.partition.to_string()),
                        ];
                        (labels, o.offset)
                    })
                    .collect()
            },
        );
    }
}

impl GroupCoordinator {
    /// Reads the committed offsets of every group this broker coordinates for
    /// `weir_consumer_group_committed_offset`; returns how many there are. Offsets stored
    /// without a group this broker owns are left to their coordinator.
    pub async fn refresh_committed_offsets(&self) -> Result<usize, MetaError> {
        let owns = Arc::clone(&self.inner.lock().owns);
        let mut read = Vec::new();
        for group in self.inner.meta.offset_groups().await? {
            if !owns(&group) {
                continue;
            }
            for o in self.inner.meta.fetch_offsets(&group).await? {
                read.push(CommittedOffset {
                    group: group.clone(),
                    topic: o.topic,
                    partition: o.partition,
                    offset: o.offset,
                });
            }
        }
        let n = read.len();
        self.inner.meters.committed.set(read);
        Ok(n)
    }
}
