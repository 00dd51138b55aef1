//! Fetch: whole batches as stored, with long polling on `fetch.min.bytes`/`fetch.max.wait.ms`.
//!
//! The record bytes of a response are capped at the request's `max_bytes` and the broker's
//! `fetch.max.bytes`, whichever is smaller, with KIP-74's exception: the first partition that
//! has data returns at least one whole batch, so that a consumer makes progress past a batch
//! larger than its limits.
//!
//! A partition led in another zone, fetched by a client of this broker's zone, is served here
//! from object storage (and the block cache), up to the end its leader says is committed, with
//! the leader's high watermark and epoch (`weir_zone::Feed`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt;
use kafka_protocol::messages::fetch_response::{
    FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use uuid::Uuid;
use weir_partition::{Lookup, Partition, Topics};
use weir_zone::wire::Offsets;

use crate::{str, Broker, Reply};

/// How long a fetch of a partition served for another zone's leader waits for the leader's
/// first word on its offsets.
const FIRST_OFFSETS_WAIT: Duration = Duration::from_secs(2);

/// Where a wanted partition is read from.
enum Source {
    Local(Arc<Partition>),
    /// Led in another zone: read from object storage with the leader's offsets.
    Remote {
        topic: String,
        stream_id: u64,
        offsets: watch::Receiver<Option<Offsets>>,
        /// For the ranges the leader fed.
        feed: Arc<weir_zone::Feed>,
        /// For the aborted transactions of `read_committed` reads.
        leader: weir_zone::Leader,
        peers: Arc<weir_zone::Peers>,
    },
}

impl Source {
    /// (start, end of what can be read now, high watermark, leader epoch); an error when the
    /// leader says so or has not said anything yet. A `read_committed` fetch (`committed`) can
    /// read up to the last stable offset.
    ///
    /// For a partition led in another zone, everything comes from one answer of its leader
    /// (the feed may change under a read that awaits), with, last, the end of its aborted
    /// transactions (0 for a partition led here, whose reads know them).
    fn bounds(&self, committed: bool) -> Result<(i64, i64, i64, i32, i64), ResponseError> {
        match self {
            Source::Local(p) => {
                let (start, hw) = p.offsets();
                let readable = if committed {
                    p.last_stable_offset()
                } else {
                    hw
                };
                Ok((start, readable, hw, p.leader_epoch, 0))
            }
            Source::Remote { offsets, .. } => match *offsets.borrow() {
                Some(o) if o.error == 0 => {
                    let readable = if committed {
                        o.committed.min(o.last_stable)
                    } else {
                        o.committed
                    };
                    Ok((
                        o.start,
                        readable,
                        o.high_watermark,
                        o.epoch,
                        o.aborted_until,
                    ))
                }
                Some(o) => Err(ResponseError::try_from_code(o.error)
                    .unwrap_or(ResponseError::NotLeaderOrFollower)),
                None => Err(ResponseError::NotLeaderOrFollower),
            },
        }
    }
}

/// One partition a fetch asks for.
struct Wanted {
    partition_index: i32,
    partition: Result<Source, ResponseError>,
    offset: i64,
    max_bytes: i32,
    current_leader_epoch: i32,
    /// `read_committed`: up to the last stable offset, with the aborted transactions.
    committed: bool,
    /// KIP-392: a broker of the client's zone to fetch from instead (this broker leads the
    /// partition in another zone), told to clients placed by their RackId only.
    preferred: Option<i32>,
}

struct WantedTopic {
    name: TopicName,
    id: Uuid,
    partitions: Vec<Wanted>,
}

impl Broker {
    pub(crate) async fn fetch(
        self: &Arc<Self>,
        r: FetchRequest,
        version: i16,
        zone: Option<&str>,
    ) -> Reply {
        let started = Instant::now();
        let committed = version >= 4 && r.isolation_level == 1;
        let zone_owned = zone.map(|z| z.to_string());
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
                            partition: match topic
                                .as_ref()
                                .map(|t| (t, self.topics.lookup(&t.name, p.partition)))
                            {
                                Some((_, Lookup::Local(p))) => Ok(Source::Local(p)),
                                Some((t, Lookup::NotHere)) => {
                                    self.remote_source(zone, &t.name, p.partition)
                                }
                                _ => Err(missing),
                            },
                            offset: p.fetch_offset,
                            max_bytes: p.partition_max_bytes,
                            current_leader_epoch: p.current_leader_epoch,
                            committed,
                            preferred: match (&topic, version >= 11) {
                                (Some(t), true) => {
                                    self.preferred_replica(zone, &t.name, p.partition)
                                }
                                _ => None,
                            },
                        })
                        .collect(),
                }
            })
            .collect();
        let asked = if r.max_bytes <= 0 {
            i32::MAX
        } else {
            r.max_bytes
        } as usize;
        // As Kafka does: the broker's cap wins, and a minimum above the maximum is the maximum
        // (or the long poll could never be satisfied).
        let max_bytes = asked.min(self.limits.fetch_max_bytes.max(1));
        let min_bytes = (r.min_bytes.max(1) as usize).min(max_bytes);
        if let Some(zones) = &self.zones {
            first_offsets(&wanted, &zones.feed).await;
        }
        let topics = Arc::clone(&self.topics);
        let (response, bytes, errors) = fetch_round(&topics, &wanted, max_bytes, min_bytes).await;
        let waits = r.max_wait_ms > 0 && bytes < min_bytes && !errors;
        if !waits {
            self.meters.fetch_bytes.add(bytes as u64);
            self.meters.fetch_latency.record(started.elapsed());
            let response = self.with_leader_hints(response, zone);
            return Reply::Now(Box::new(ResponseKind::Fetch(response)));
        }
        let deadline = started + Duration::from_millis(r.max_wait_ms as u64);
        let this = Arc::clone(self);
        Reply::Later(Box::pin(async move {
            let mut hws: Vec<_> = Vec::new();
            let mut remotes: Vec<_> = Vec::new();
            for w in wanted.iter().flat_map(|t| t.partitions.iter()) {
                match &w.partition {
                    Ok(Source::Local(p)) => hws.extend(p.watch_high_watermark()),
                    Ok(Source::Remote { offsets, .. }) => remotes.push(offsets.clone()),
                    Err(_) => {}
                }
            }
            let (mut response, mut bytes) = (response, bytes);
            loop {
                if hws.is_empty() && remotes.is_empty() {
                    tokio::time::sleep_until(deadline.into()).await;
                    break;
                }
                let woke = {
                    let changed = futures::future::select_all(
                        hws.iter_mut()
                            .map(|rx| rx.changed().boxed())
                            .chain(remotes.iter_mut().map(|rx| rx.changed().boxed())),
                    );
                    tokio::time::timeout_at(deadline.into(), changed)
                        .await
                        .is_ok()
                };
                if !woke {
                    break;
                }
                let (r2, b2, e2) = fetch_round(&topics, &wanted, max_bytes, min_bytes).await;
                (response, bytes) = (r2, b2);
                if e2 || bytes >= min_bytes || Instant::now() >= deadline {
                    break;
                }
            }
            if Instant::now() >= deadline && bytes < min_bytes {
                // The deadline passed: answer with what there is now.
                let (r2, b2, _) = fetch_round(&topics, &wanted, max_bytes, min_bytes).await;
                (response, bytes) = (r2, b2);
            }
            this.meters.fetch_bytes.add(bytes as u64);
            this.meters.fetch_latency.record(started.elapsed());
            ResponseKind::Fetch(this.with_leader_hints(response, zone_owned.as_deref()))
        }))
    }

    /// For a partition led here and fetched by a client of another zone: the broker of the
    /// client's zone that serves it, if the topic routes in-zone.
    fn preferred_replica(&self, zone: Option<&str>, topic: &str, partition: i32) -> Option<i32> {
        let zones = self.zones.as_ref()?;
        let zone = zone?;
        if zones.zone.is_empty() || zone == zones.zone {
            return None;
        }
        if self.routing_by_name(topic) != weir_zone::Routing::InZone {
            return None;
        }
        if !matches!(self.topics.lookup(topic, partition), Lookup::Local(_)) {
            return None;
        }
        let view = self.cluster.view();
        let b = weir_zone::in_zone_broker(&view, zone, topic, u32::try_from(partition).ok()?)?;
        (b.node_id != self.cluster.node_id()).then_some(b.node_id)
    }

    /// A partition not led here: served from object storage when this broker serves it to
    /// the client's zone, else NOT_LEADER_OR_FOLLOWER.
    fn remote_source(
        &self,
        zone: Option<&str>,
        topic: &str,
        partition: i32,
    ) -> Result<Source, ResponseError> {
        let (Some(zones), Some(remote)) = (&self.zones, self.remote(zone, topic, partition)) else {
            return Err(ResponseError::NotLeaderOrFollower);
        };
        zones.meters.remote_fetches.inc();
        Ok(Source::Remote {
            topic: topic.to_string(),
            stream_id: remote.stream_id,
            feed: Arc::clone(&zones.feed),
            offsets: zones.feed.offsets(topic, partition, &remote.leader),
            leader: remote.leader,
            peers: Arc::clone(&zones.peers),
        })
    }

    /// KIP-951: partitions answered NOT_LEADER_OR_FOLLOWER name the new leader (v12+), and the
    /// response carries its endpoint (v16+), so consumers re-route without a metadata request.
    fn with_leader_hints(&self, mut response: FetchResponse, zone: Option<&str>) -> FetchResponse {
        let mut endpoints: Vec<NodeEndpoint> = Vec::new();
        for t in &mut response.responses {
            let name = if t.topic_id.is_nil() {
                Some(t.topic.0.to_string())
            } else {
                self.topics
                    .get_by_id(t.topic_id.as_bytes())
                    .map(|t| t.name.clone())
            };
            let Some(name) = name else { continue };
            for p in &mut t.partitions {
                if p.error_code != ResponseError::NotLeaderOrFollower.code() {
                    continue;
                }
                let Some(h) = self.leader_hint(zone, &name, p.partition_index) else {
                    continue;
                };
                p.current_leader = LeaderIdAndEpoch::default()
                    .with_leader_id(BrokerId(h.node_id))
                    .with_leader_epoch(h.epoch);
                if !endpoints.iter().any(|e| e.node_id.0 == h.node_id) {
                    endpoints.push(
                        NodeEndpoint::default()
                            .with_node_id(BrokerId(h.node_id))
                            .with_host(str(&h.host))
                            .with_port(h.port)
                            .with_rack((!h.rack.is_empty()).then(|| str(&h.rack))),
                    );
                }
            }
        }
        response.node_endpoints = endpoints;
        response
    }
}

/// Reads every wanted partition once. Returns the response, its record bytes, and whether any
/// partition had an error (which answers at once, as Kafka does).
/// Waits (a little, once) for the leader's first word on the offsets of partitions served
/// for another zone's leader, subscribed to just now; and asks the leader again for a
/// partition fetched beyond the high watermark known here, which may only be late (the client
/// read further elsewhere): OFFSET_OUT_OF_RANGE is for offsets beyond the leader's.
async fn first_offsets(wanted: &[WantedTopic], feed: &Arc<weir_zone::Feed>) {
    for w in wanted.iter().flat_map(|t| t.partitions.iter()) {
        if let Ok(Source::Remote { topic, offsets, .. }) = &w.partition {
            let mut rx = offsets.clone();
            let _ = tokio::time::timeout(FIRST_OFFSETS_WAIT, rx.wait_for(|o| o.is_some())).await;
            let beyond = matches!(*rx.borrow_and_update(), Some(o) if o.error == 0 && w.offset > o.high_watermark);
            if beyond {
                feed.refresh(topic, w.partition_index);
                let _ = tokio::time::timeout(FIRST_OFFSETS_WAIT, rx.changed()).await;
            }
        }
    }
}

/// One round of reads: first without waiting for object storage; if that gives less than
/// `min_bytes` while some partition's data is still being fetched from it, again, waiting. So a
/// catch-up read of many partitions answers with those whose blocks are cached (the read-ahead
/// keeps fetching the others) rather than wait for the slowest GET, and a read that finds
/// nothing cached waits as before.
async fn fetch_round(
    topics: &Topics,
    wanted: &[WantedTopic],
    max_bytes: usize,
    min_bytes: usize,
) -> (FetchResponse, usize, bool) {
    let (response, bytes, errors, pending) = fetch_once(topics, wanted, max_bytes, false).await;
    if errors || bytes >= min_bytes || !pending {
        return (response, bytes, errors);
    }
    let (response, bytes, errors, _) = fetch_once(topics, wanted, max_bytes, true).await;
    (response, bytes, errors)
}

/// Reads every wanted partition once; unless `wait`, without waiting for object storage. The
/// last value says whether a partition's read stopped at data still being fetched.
async fn fetch_once(
    topics: &Topics,
    wanted: &[WantedTopic],
    max_bytes: usize,
    wait: bool,
) -> (FetchResponse, usize, bool, bool) {
    // Partitions are read concurrently, so a catch-up read of many partitions waits for one
    // round of object GETs rather than one per partition. Each partition that has data gets its
    // share of the total up front, in request order (its own limit, while the total lasts), so
    // what is read stays within `max_bytes`; partitions with nothing to read take no share, so
    // that caught-up partitions early in the request do not starve later ones.
    let mut reserved = 0usize;
    let mut first = true;
    let mut reads = Vec::with_capacity(wanted.len());
    for t in wanted {
        let mut parts = Vec::with_capacity(t.partitions.len());
        for w in &t.partitions {
            let (has_data, in_range) = match w.partition.as_ref().map(|s| s.bounds(w.committed)) {
                Ok(Ok((start, readable, hw, _, _))) => (
                    w.offset >= start && w.offset < readable && w.preferred.is_none(),
                    (start..=hw).contains(&w.offset),
                ),
                _ => (false, true),
            };
            let budget = if has_data {
                (w.max_bytes.max(0) as usize).min(max_bytes.saturating_sub(reserved))
            } else {
                0
            };
            reserved += budget;
            let at_least_one = has_data && first;
            first &= !has_data;
            // Nothing to read at the end of the log or once the total is spent; an offset out
            // of range is still read, for its error.
            let read = (budget > 0 || at_least_one || !in_range).then_some(budget.max(1));
            parts.push(async move {
                let (pd, bytes, outcome) = fetch_partition(topics, w, read, wait).await;
                let error = outcome == Outcome::Error;
                let pending = outcome == Outcome::Incomplete;
                // A partition's first batch may be larger than its share; only the first
                // partition with data may send one whole (KIP-74), the others cut to their
                // share, so that the response stays within `max_bytes`.
                if at_least_one || bytes <= budget {
                    return (pd, bytes, error, pending);
                }
                let records = pd.records.as_ref().map(|r| whole_batches(r, budget));
                let bytes = records.as_ref().map_or(0, |r| r.len());
                (pd.with_records(records), bytes, error, pending)
            });
        }
        reads.push(futures::future::join_all(parts));
    }
    let mut total = 0usize;
    let mut errors = false;
    let mut pending = false;
    let mut topics = Vec::with_capacity(wanted.len());
    for (t, parts) in wanted.iter().zip(futures::future::join_all(reads).await) {
        let parts = parts
            .into_iter()
            .map(|(pd, bytes, error, waiting)| {
                total += bytes;
                errors |= error;
                pending |= waiting;
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
        pending,
    )
}

/// The longest prefix of `records` (record batches: base offset, length, then `length` bytes)
/// that is whole batches within `limit` bytes.
fn whole_batches(records: &Bytes, limit: usize) -> Bytes {
    let mut end = 0usize;
    while let Some(header) = records.get(end..end + 12) {
        let len = i32::from_be_bytes([header[8], header[9], header[10], header[11]]);
        let next = end + 12 + len.max(0) as usize;
        if next > limit || next > records.len() {
            break;
        }
        end = next;
    }
    records.slice(..end)
}

/// How one partition's part of a fetch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Done,
    Error,
    /// A read that did not wait stopped at data being fetched from object storage.
    Incomplete,
}

/// One partition's part of a fetch: its data (up to about `read` bytes, at least one batch;
/// none if `None`), the bytes of it, and how it ended.
async fn fetch_partition(
    topics: &Topics,
    w: &Wanted,
    read: Option<usize>,
    wait: bool,
) -> (PartitionData, usize, Outcome) {
    let pd = PartitionData::default()
        .with_partition_index(w.partition_index)
        .with_preferred_read_replica(BrokerId(-1));
    let bounds = w
        .partition
        .as_ref()
        .map_err(|e| *e)
        .and_then(|s| s.bounds(w.committed).map(|b| (s, b)));
    let (source, (start, readable, hw, epoch, aborted_until)) = match bounds {
        Ok(b) => b,
        Err(e) => {
            let pd = pd
                .with_error_code(e.code())
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1);
            return (pd, 0, Outcome::Error);
        }
    };
    let lso = match source {
        Source::Local(p) => p.last_stable_offset(),
        Source::Remote { .. } if w.committed => readable,
        Source::Remote { .. } => hw,
    };
    let pd = pd
        .with_high_watermark(hw)
        .with_last_stable_offset(lso)
        .with_log_start_offset(start);
    if let Some(e) = crate::epoch_mismatch(w.current_leader_epoch, epoch) {
        return (pd.with_error_code(e.code()), 0, Outcome::Error);
    }
    if let Some(id) = w.preferred {
        // As Kafka answers a fetch that should go to a follower: no records, the replica.
        let pd = pd
            .with_preferred_read_replica(BrokerId(id))
            .with_records(Some(Default::default()));
        return (pd, 0, Outcome::Done);
    }
    let Some(budget) = read else {
        return (pd.with_records(Some(Default::default())), 0, Outcome::Done);
    };
    let p = match source {
        Source::Local(p) => p,
        Source::Remote {
            topic,
            stream_id,
            feed,
            leader,
            peers,
            ..
        } => {
            if w.offset < start || w.offset > hw {
                let e = ResponseError::OffsetOutOfRange;
                return (pd.with_error_code(e.code()), 0, Outcome::Error);
            }
            let known = feed.ranges(topic, w.partition_index, w.offset);
            let records = match topics
                .read_remote(*stream_id, w.offset, readable, budget, &known)
                .await
            {
                Ok(records) => records,
                Err(e) => return (pd.with_error_code(e.code()), 0, Outcome::Error),
            };
            if !w.committed {
                let bytes = records.len();
                return (pd.with_records(Some(records)), bytes, Outcome::Done);
            }
            // read_committed: up to the last stable offset, with the aborted transactions
            // among what was read, which the leader knows (asked only when it has any).
            let records =
                weir_partition::partition::batches_below(&records, readable.max(0) as u64);
            // Whether the read may hold aborted records, from the same answer of the leader
            // as the last stable offset it stopped at.
            let has_aborted = w.offset < aborted_until;
            let mut aborted = Vec::new();
            if has_aborted && !records.is_empty() {
                // Asked of the leader at the epoch these offsets came from, so that the list
                // goes with the last stable offset the read stopped at.
                let q = weir_zone::wire::AbortedTxns {
                    topic: topic.clone(),
                    partition: w.partition_index,
                    epoch,
                    from: w.offset,
                    to: readable,
                };
                let answer = peers
                    .send(
                        weir_zone::Peer {
                            node_id: leader.node_id,
                            internal_addr: &leader.internal_addr,
                            zone: &leader.zone,
                        },
                        weir_zone::Channel::Feed,
                        weir_zone::wire::ABORTED_TXNS,
                        q.encode(),
                    )
                    .await;
                match answer.map(weir_zone::wire::decode_aborted) {
                    Ok(Ok((0, list))) => aborted = list,
                    _ => {
                        let e = ResponseError::NotLeaderOrFollower;
                        return (pd.with_error_code(e.code()), 0, Outcome::Error);
                    }
                }
            }
            tracing::debug!(topic = %topic, partition = w.partition_index, offset = w.offset, readable, epoch, has_aborted, aborted = aborted.len(), bytes = records.len(), "in-zone read_committed fetch");
            let aborted = aborted
                .into_iter()
                .map(|(pid, first)| {
                    fetch_response::AbortedTransaction::default()
                        .with_producer_id(ProducerId(pid))
                        .with_first_offset(first)
                })
                .collect();
            let bytes = records.len();
            let pd = pd
                .with_aborted_transactions(Some(aborted))
                .with_records(Some(records));
            return (pd, bytes, Outcome::Done);
        }
    };
    match p.fetch_with(w.offset, budget, w.committed, wait).await {
        Ok(data) => {
            let bytes = data.records.len();
            let aborted = w.committed.then(|| {
                data.aborted
                    .iter()
                    .map(|a| {
                        fetch_response::AbortedTransaction::default()
                            .with_producer_id(ProducerId(a.producer_id))
                            .with_first_offset(a.first_offset as i64)
                    })
                    .collect()
            });
            let pd = pd
                .with_high_watermark(data.high_watermark)
                .with_last_stable_offset(data.last_stable_offset)
                .with_log_start_offset(data.log_start_offset)
                .with_aborted_transactions(aborted)
                .with_records(Some(data.records));
            let outcome = if data.incomplete {
                Outcome::Incomplete
            } else {
                Outcome::Done
            };
            (pd, bytes, outcome)
        }
        Err(e) => (pd.with_error_code(e.code()), 0, Outcome::Error),
    }
}
