//! Fetch: whole batches as stored, with long polling on `fetch.min.bytes`/`fetch.max.wait.ms`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use uuid::Uuid;
use weir_partition::Partition;

use crate::{Broker, Reply};

/// One partition a fetch asks for.
struct Wanted {
    partition_index: i32,
    partition: Result<Arc<Partition>, ResponseError>,
    offset: i64,
    max_bytes: i32,
    current_leader_epoch: i32,
}

struct WantedTopic {
    name: TopicName,
    id: Uuid,
    partitions: Vec<Wanted>,
}

impl Broker {
    pub(crate) async fn fetch(self: &Arc<Self>, r: FetchRequest, version: i16) -> Reply {
        let started = Instant::now();
        let wanted: Vec<WantedTopic> = r
            .topics
            .into_iter()
            .map(|t| {
                let topic = if version >= 13 {
                    self.topics.get_by_id(t.topic_id.as_bytes())
                } else {
                    self.topics.get(t.topic.0.as_str())
                };
                let missing = if version >= 13 {
                    ResponseError::UnknownTopicId
                } else {
                    ResponseError::UnknownTopicOrPartition
                };
                WantedTopic {
                    name: t.topic,
                    id: t.topic_id,
                    partitions: t
                        .partitions
                        .into_iter()
                        .map(|p| Wanted {
                            partition_index: p.partition,
                            partition: topic
                                .as_ref()
                                .and_then(|t| {
                                    usize::try_from(p.partition)
                                        .ok()
                                        .and_then(|i| t.partitions.get(i).cloned())
                                })
                                .ok_or(missing),
                            offset: p.fetch_offset,
                            max_bytes: p.partition_max_bytes,
                            current_leader_epoch: p.current_leader_epoch,
                        })
                        .collect(),
                }
            })
            .collect();
        let max_bytes = if r.max_bytes <= 0 {
            i32::MAX
        } else {
            r.max_bytes
        } as usize;
        let (response, bytes, errors) = fetch_once(&wanted, max_bytes).await;
        let waits = r.max_wait_ms > 0 && bytes < r.min_bytes.max(1) as usize && !errors;
        if !waits {
            self.meters.fetch_bytes.add(bytes as u64);
            self.meters.fetch_latency.record(started.elapsed());
            return Reply::Now(Box::new(ResponseKind::Fetch(response)));
        }
        let deadline = started + Duration::from_millis(r.max_wait_ms as u64);
        let min_bytes = r.min_bytes.max(1) as usize;
        let this = Arc::clone(self);
        Reply::Later(Box::pin(async move {
            let mut receivers: Vec<_> = wanted
                .iter()
                .flat_map(|t| t.partitions.iter())
                .filter_map(|w| {
                    w.partition
                        .as_ref()
                        .ok()
                        .and_then(|p| p.watch_high_watermark())
                })
                .collect();
            let (mut response, mut bytes) = (response, bytes);
            loop {
                if receivers.is_empty() {
                    tokio::time::sleep_until(deadline.into()).await;
                    break;
                }
                let woke = {
                    let changed = futures::future::select_all(
                        receivers.iter_mut().map(|rx| rx.changed().boxed()),
                    );
                    tokio::time::timeout_at(deadline.into(), changed)
                        .await
                        .is_ok()
                };
                if !woke {
                    break;
                }
                let (r2, b2, e2) = fetch_once(&wanted, max_bytes).await;
                (response, bytes) = (r2, b2);
                if e2 || bytes >= min_bytes || Instant::now() >= deadline {
                    break;
                }
            }
            if Instant::now() >= deadline && bytes < min_bytes {
                // The deadline passed: answer with what there is now.
                let (r2, b2, _) = fetch_once(&wanted, max_bytes).await;
                (response, bytes) = (r2, b2);
            }
            this.meters.fetch_bytes.add(bytes as u64);
            this.meters.fetch_latency.record(started.elapsed());
            ResponseKind::Fetch(response)
        }))
    }
}

/// Reads every wanted partition once. Returns the response, its record bytes, and whether any
/// partition had an error (which answers at once, as Kafka does).
async fn fetch_once(wanted: &[WantedTopic], max_bytes: usize) -> (FetchResponse, usize, bool) {
    // Partitions are read concurrently, so a catch-up read of many partitions waits for one
    // round of object GETs rather than one per partition. Each partition gets its share of the
    // total up front (its own limit, while the total lasts), so the response stays within
    // `max_bytes`.
    let mut reserved = 0usize;
    let mut first = true;
    let mut reads = Vec::with_capacity(wanted.len());
    for t in wanted {
        let mut parts = Vec::with_capacity(t.partitions.len());
        for w in &t.partitions {
            let budget = (w.max_bytes.max(0) as usize).min(max_bytes.saturating_sub(reserved));
            reserved += budget;
            parts.push(fetch_partition(w, budget, first));
            first = false;
        }
        reads.push(futures::future::join_all(parts));
    }
    let mut total = 0usize;
    let mut errors = false;
    let mut topics = Vec::with_capacity(wanted.len());
    for (t, parts) in wanted.iter().zip(futures::future::join_all(reads).await) {
        let parts = parts
            .into_iter()
            .map(|(pd, bytes, error)| {
                total += bytes;
                errors |= error;
                pd
            })
            .collect();
        topics.push(
            FetchableTopicResponse::default()
                .with_topic(t.name.clone())
                .with_topic_id(t.id)
                .with_partitions(parts),
        );
    }
    (
        FetchResponse::default().with_responses(topics),
        total,
        errors,
    )
}

/// One partition's part of a fetch: its data, the bytes of it, and whether it is an error.
async fn fetch_partition(w: &Wanted, budget: usize, first: bool) -> (PartitionData, usize, bool) {
    let pd = PartitionData::default()
        .with_partition_index(w.partition_index)
        .with_preferred_read_replica(BrokerId(-1));
    let p = match &w.partition {
        Ok(p) => p,
        Err(e) => {
            let pd = pd
                .with_error_code(e.code())
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1);
            return (pd, 0, true);
        }
    };
    let (start, hw) = p.offsets();
    let pd = pd
        .with_high_watermark(hw)
        .with_last_stable_offset(hw)
        .with_log_start_offset(start);
    if w.current_leader_epoch >= 0 && w.current_leader_epoch != p.leader_epoch {
        let e = if w.current_leader_epoch < p.leader_epoch {
            ResponseError::FencedLeaderEpoch
        } else {
            ResponseError::UnknownLeaderEpoch
        };
        return (pd.with_error_code(e.code()), 0, true);
    }
    // The first partition always gets at least one batch, so that a consumer makes progress
    // past a batch larger than its limits.
    if budget == 0 && !first {
        return (pd.with_records(Some(Default::default())), 0, false);
    }
    match p.fetch(w.offset, budget.max(1)).await {
        Ok(data) => {
            let bytes = data.records.len();
            let pd = pd
                .with_high_watermark(data.high_watermark)
                .with_last_stable_offset(data.high_watermark)
                .with_log_start_offset(data.log_start_offset)
                .with_records(Some(data.records));
            (pd, bytes, false)
        }
        Err(e) => (pd.with_error_code(e.code()), 0, true),
    }
}
