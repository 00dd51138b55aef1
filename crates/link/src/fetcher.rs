//! Mirroring from one source broker: the partitions this broker leads whose source leader it
//! is, fetched as a consumer would (read_uncommitted, so that aborted batches and markers come
//! too) from each mirror partition's own end, and appended at the source's offsets.
//!
//! Where to fetch from is never stored apart: a mirror partition holds the source's offsets, so
//! its end is the link's position. A broker that takes the partition over after a move or a
//! failover starts from what the partition holds, and batches fetched again are left out by
//! [`Partition::start_mirror`]: no gap, no duplicate.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use uuid::Uuid;
use weir_partition::{Partition, ProduceTicket};

use crate::conn::{error_of, Conn, ConnOptions};
use crate::meters::{LinkMeters, PartitionProgress};
use crate::source::{self, EARLIEST, LATEST};
use crate::{LinkError, Shared};

/// Appends of one partition waiting to be durable before the next fetch of it waits for the
/// oldest: enough to keep the source busy while the WAL syncs, few enough to bound memory.
const PIPELINE: usize = 4;

/// A mirror partition this broker leads, and where its source is.
#[derive(Clone)]
pub struct Assigned {
    pub topic: String,
    pub topic_id: Uuid,
    pub partition: Arc<Partition>,
}

impl Assigned {
    fn key(&self) -> (String, i32) {
        (self.topic.clone(), self.partition.index)
    }
}

/// What the fetcher of one source broker is told: its partitions (replaced as a whole).
pub type Assignment = Arc<Vec<Assigned>>;

/// Why a fetcher asks its link to look at the source's metadata again.
pub type Stale = Arc<tokio::sync::Notify>;

struct PartState {
    assigned: Assigned,
    /// The offset to fetch from next; `None`: read it from the partition (after an append
    /// failed, once every append of it in flight has finished).
    next: Option<i64>,
    /// The offset the fetch in flight asked for: the source's answer covers its log from there.
    fetching: i64,
    /// After the source said its log starts beyond `next`: the partition's end then, from where
    /// the next answer covers the source's log (there is nothing before its start).
    jumped_from: Option<i64>,
    pending: VecDeque<ProduceTicket>,
    /// Fetched nothing that could be appended (a batch bigger than the fetch size asked for):
    /// ask for more next time.
    max_bytes: i32,
    /// Stopped: the source no longer has what this mirror follows from (see `out_of_range`).
    failed: bool,
}

/// Mirrors the partitions it is assigned from the source broker at `addr`, until the
/// assignment is closed.
pub async fn run(
    shared: Arc<Shared>,
    addr: String,
    opts: ConnOptions,
    mut assignment: watch::Receiver<Assignment>,
    stale: Stale,
    meters: LinkMeters,
) {
    let mut conn: Option<Conn> = None;
    let mut parts: HashMap<(String, i32), PartState> = HashMap::new();
    let mut delays = RECONNECT.delays();
    loop {
        let wanted = assignment.borrow_and_update().clone();
        sync_parts(&mut parts, &wanted, shared.spec_partition_bytes());
        if parts.values().all(|p| p.failed) {
            if assignment.changed().await.is_err() {
                break;
            }
            continue;
        }
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match Conn::connect(&addr, &opts).await {
                Ok(c) => {
                    delays = RECONNECT.delays();
                    conn.insert(c)
                }
                Err(e) => {
                    meters.source_error(&e);
                    tracing::warn!(link = %shared.name, source = %addr, error = %e, "source broker unreachable; retrying");
                    stale.notify_one();
                    if wait_or_changed(&mut assignment, delays.next_delay()).await {
                        break;
                    }
                    continue;
                }
            },
        };
        match round(&shared, c, &mut parts, &meters).await {
            Ok(Round { stale: true }) => {
                // A leader moved at the source: the link looks at its metadata again and hands
                // the partition to another fetcher; not a round per millisecond meanwhile.
                stale.notify_one();
                if wait_or_changed(&mut assignment, Duration::from_millis(100)).await {
                    break;
                }
            }
            Ok(_) => {}
            Err(e) => {
                meters.source_error(&e);
                tracing::warn!(link = %shared.name, source = %addr, error = %e, "fetch from the source failed; reconnecting");
                conn = None;
                stale.notify_one();
                if wait_or_changed(&mut assignment, delays.next_delay()).await {
                    break;
                }
            }
        }
        if assignment.has_changed().is_err() {
            break;
        }
    }
    for p in parts.values_mut() {
        drain(p).await;
    }
}

/// Between reconnections to a source broker.
const RECONNECT: weir_retry::Backoff =
    weir_retry::Backoff::new(Duration::from_millis(200), Duration::from_secs(10));

/// Waits `d`, or less if the assignment changes; `true` if it was closed.
async fn wait_or_changed(a: &mut watch::Receiver<Assignment>, d: Duration) -> bool {
    tokio::select! {
        r = a.changed() => r.is_err(),
        () = tokio::time::sleep(d) => false,
    }
}

fn sync_parts(parts: &mut HashMap<(String, i32), PartState>, wanted: &[Assigned], max_bytes: i32) {
    parts.retain(|k, p| {
        wanted
            .iter()
            .any(|a| &a.key() == k && Arc::ptr_eq(&a.partition, &p.assigned.partition))
    });
    for a in wanted {
        parts.entry(a.key()).or_insert_with(|| PartState {
            assigned: a.clone(),
            next: None,
            fetching: 0,
            jumped_from: None,
            pending: VecDeque::new(),
            max_bytes,
            failed: false,
        });
    }
}

struct Round {
    /// Some partition's source leader moved: the link should look at metadata again.
    stale: bool,
}

/// One fetch of every partition, and what it brought appended.
async fn round(
    shared: &Shared,
    conn: &mut Conn,
    parts: &mut HashMap<(String, i32), PartState>,
    meters: &LinkMeters,
) -> Result<Round, LinkError> {
    for p in parts.values_mut() {
        settle(p).await;
    }
    let spec = shared.spec();
    let mut by_topic: HashMap<(String, Uuid), Vec<FetchPartition>> = HashMap::new();
    for p in parts.values_mut().filter(|p| !p.failed) {
        let Some(next) = p.next else { continue };
        p.fetching = next;
        by_topic
            .entry((p.assigned.topic.clone(), p.assigned.topic_id))
            .or_default()
            .push(
                FetchPartition::default()
                    .with_partition(p.assigned.partition.index)
                    .with_current_leader_epoch(-1)
                    .with_last_fetched_epoch(-1)
                    .with_fetch_offset(next)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(p.max_bytes),
            );
    }
    if by_topic.is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
        return Ok(Round { stale: false });
    }
    let v = conn.version::<FetchRequest>()?;
    let topics = by_topic
        .into_iter()
        .map(|((name, id), ps)| {
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(name)))
                .with_topic_id(id)
                .with_partitions(ps)
        })
        .collect();
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_replica_state(
            ReplicaState::default()
                .with_replica_id(BrokerId(-1))
                .with_replica_epoch(-1),
        )
        .with_max_wait_ms(spec.fetch_max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(spec.fetch_max_bytes)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(topics);
    let (_, resp) = conn.send(&req).await?;
    if let Some(e) = error_of(resp.error_code) {
        return Err(LinkError::Kafka {
            addr: conn.addr().to_string(),
            what: "Fetch".into(),
            error: e.to_string(),
        });
    }
    let names: HashMap<Uuid, String> = parts
        .values()
        .map(|p| (p.assigned.topic_id, p.assigned.topic.clone()))
        .collect();
    let mut stale = false;
    let mut out_of_range = Vec::new();
    for t in resp.responses {
        let topic = if v >= 13 {
            names.get(&t.topic_id).cloned()
        } else {
            Some(t.topic.0.to_string())
        };
        let Some(topic) = topic else { continue };
        for pd in t.partitions {
            let Some(p) = parts.get_mut(&(topic.clone(), pd.partition_index)) else {
                continue;
            };
            match error_of(pd.error_code) {
                None => {
                    let records = pd.records.unwrap_or_default();
                    append(shared, p, records, pd.high_watermark, meters)?;
                }
                Some(ResponseError::OffsetOutOfRange) => out_of_range.push(p.assigned.key()),
                Some(e) => {
                    // NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID,
                    // FENCED_LEADER_EPOCH...: the leader moved or the topic changed.
                    tracing::debug!(link = %shared.name, topic = %topic, partition = pd.partition_index, error = %e, "source partition not fetched");
                    stale = true;
                }
            }
        }
    }
    if !out_of_range.is_empty() {
        handle_out_of_range(shared, conn, parts, &out_of_range, meters).await?;
    }
    Ok(Round { stale })
}

/// Appends what a fetch brought for one partition.
fn append(
    shared: &Shared,
    p: &mut PartState,
    records: Bytes,
    source_end: i64,
    meters: &LinkMeters,
) -> Result<(), LinkError> {
    let whole = whole_batches(&records);
    let progress = |next: i64| PartitionProgress {
        topic: p.assigned.topic.clone(),
        partition: p.assigned.partition.index,
        mirrored_end: next,
        source_end,
    };
    if whole.is_empty() {
        if !records.is_empty() {
            // Not even one whole batch fitted: ask for more (Kafka sends at least one whole
            // batch from 0.10.1 on, so this is a source that does not).
            p.max_bytes = p.max_bytes.saturating_mul(2);
        }
        if let Some(next) = p.next {
            meters.progress(progress(next));
        }
        return Ok(());
    }
    let end = batches_end(&whole).unwrap_or(0);
    let from = p.jumped_from.take().unwrap_or(p.fetching);
    match p.assigned.partition.start_mirror(&whole, from) {
        Ok(Some(ticket)) => {
            meters.bytes.add(whole.len() as u64);
            p.pending.push_back(ticket);
        }
        Ok(None) => {}
        Err(ResponseError::OffsetOutOfRange) => {
            // An append failed and the partition went back: fetch again from its end.
            p.next = None;
            return Ok(());
        }
        Err(e) => {
            // The partition moved away (NOT_LEADER...) or the source sent what does not follow
            // on from the mirror: the link's supervisor finds out which at its next look.
            tracing::warn!(link = %shared.name, topic = %p.assigned.topic, partition = p.assigned.partition.index, error = %e, "mirrored batches not appended");
            p.next = None;
            return Ok(());
        }
    }
    p.next = Some(end.max(p.next.unwrap_or(0)));
    meters.progress(progress(end));
    Ok(())
}

/// Waits for appends beyond the pipeline's depth; once one failed (or the partition refused a
/// fetch as beyond its end), waits for all and reads the partition's end again.
async fn settle(p: &mut PartState) {
    while p.pending.len() > PIPELINE {
        let Some(t) = p.pending.pop_front() else {
            break;
        };
        if t.wait().await.is_err() {
            p.next = None;
        }
    }
    if p.next.is_none() {
        drain(p).await;
        let (_, end) = p.assigned.partition.offsets();
        p.next = Some(end);
    }
}

async fn drain(p: &mut PartState) {
    while let Some(t) = p.pending.pop_front() {
        let _ = t.wait().await;
    }
}

/// Partitions whose fetch offset the source no longer has. Behind its log start (its retention
/// removed records before the mirror got them, or the mirror is new and empty): the mirror goes
/// on from the source's start, and the records skipped are counted. Beyond its end (the source
/// lost records the mirror holds): the partition stops, with the reason in the log.
async fn handle_out_of_range(
    shared: &Shared,
    conn: &mut Conn,
    parts: &mut HashMap<(String, i32), PartState>,
    keys: &[(String, i32)],
    meters: &LinkMeters,
) -> Result<(), LinkError> {
    let earliest = source::list_offsets(conn, keys, EARLIEST).await?;
    let latest = source::list_offsets(conn, keys, LATEST).await?;
    for k in keys {
        let Some(p) = parts.get_mut(k) else { continue };
        let (Some(&start), Some(&end), Some(next)) = (earliest.get(k), latest.get(k), p.next)
        else {
            continue;
        };
        if next < start {
            if next > 0 {
                meters.skipped.add((start - next) as u64);
                tracing::warn!(link = %shared.name, topic = %k.0, partition = k.1, from = next, to = start,
                    "the source no longer has records the mirror did not get (its retention removed them): going on from its start");
            }
            p.jumped_from = Some(next);
            p.next = Some(start);
        } else if next > end {
            tracing::error!(link = %shared.name, topic = %k.0, partition = k.1, mirrored = next, source_end = end,
                "the mirror holds records the source does not (the source lost them, or is another cluster): this partition is no longer mirrored");
            meters.failed_partitions.inc();
            p.failed = true;
        }
    }
    Ok(())
}

/// The prefix of `records` made of whole batches (a fetch may end inside a batch).
pub fn whole_batches(records: &Bytes) -> Bytes {
    let mut at = 0usize;
    while records.len() >= at + 12 {
        let len = i32::from_be_bytes([
            records[at + 8],
            records[at + 9],
            records[at + 10],
            records[at + 11],
        ]);
        let Ok(len) = usize::try_from(len) else { break };
        if records.len() < at + 12 + len {
            break;
        }
        at += 12 + len;
    }
    records.slice(..at)
}

/// One past the last offset of the last batch in `records`.
fn batches_end(records: &Bytes) -> Option<i64> {
    weir_partition::batch::headers(records)
        .last()
        .map(|(_, _, end)| end as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_batch_at_the_end_is_left_for_the_next_fetch() {
        let mut b = Vec::new();
        for (base, n) in [(0i64, 3i32), (3, 2)] {
            let mut batch = vec![0u8; 61 + 10];
            batch[0..8].copy_from_slice(&base.to_be_bytes());
            let len = (batch.len() - 12) as i32;
            batch[8..12].copy_from_slice(&len.to_be_bytes());
            batch[16] = 2;
            batch[23..27].copy_from_slice(&(n - 1).to_be_bytes());
            b.extend_from_slice(&batch);
        }
        let all = Bytes::from(b);
        assert_eq!(whole_batches(&all).len(), all.len());
        assert_eq!(batches_end(&all), Some(5));
        let cut = all.slice(..all.len() - 5);
        assert_eq!(whole_batches(&cut).len(), 71);
        assert_eq!(batches_end(&whole_batches(&cut)), Some(3));
        assert!(whole_batches(&all.slice(..20)).is_empty());
    }
}
