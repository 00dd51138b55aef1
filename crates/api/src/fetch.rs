//! The reads of a Fetch (its handler is `apis/fetch.rs`): whole batches as stored, from partitions
//! led here or, for another zone's leader, from object storage.
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
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use uuid::Uuid;
use weir_partition::{Partition, Topics};
use weir_zone::wire::Offsets;

/// How long a fetch of a partition served for another zone's leader waits for the leader's
/// first word on its offsets.
const FIRST_OFFSETS_WAIT: Duration = Duration::from_secs(2);

/// Where a wanted partition is read from.
pub(crate) enum Source {
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
    /// Its offsets now; an error when the leader says so or has not said anything yet. A
    /// `read_committed` fetch (`committed`) can read up to the last stable offset.
    ///
    /// For a partition led in another zone, everything comes from one answer of its leader
    /// (the feed may change under a read that awaits).
    fn bounds(&self, committed: bool) -> Result<Bounds, ResponseError> {
        match self {
            // Closed or dropped meanwhile (moved away, deleted): its offsets would read as
            // nothing; the consumer must look for its new leader.
            Source::Local(p) if p.is_gone() => Err(ResponseError::NotLeaderOrFollower),
            Source::Local(p) => {
                let (start, hw, lso) = p.offsets_and_lso();
                Ok(Bounds {
                    start,
                    readable: if committed { lso } else { hw },
                    hw,
                    lso,
                    epoch: p.leader_epoch,
                    aborted_until: 0,
                })
            }
            Source::Remote { offsets, .. } => match *offsets.borrow() {
                Some(o) if o.error == 0 => {
                    let readable = if committed {
                        o.committed.min(o.last_stable)
                    } else {
                        o.committed
                    };
                    Ok(Bounds {
                        start: o.start,
                        readable,
                        hw: o.high_watermark,
                        lso: if committed {
                            readable
                        } else {
                            o.high_watermark
                        },
                        epoch: o.epoch,
                        aborted_until: o.aborted_until,
                    })
                }
                Some(o) => Err(ResponseError::try_from_code(o.error)
                    .unwrap_or(ResponseError::NotLeaderOrFollower)),
                None => Err(ResponseError::NotLeaderOrFollower),
            },
        }
    }
}

/// A partition's offsets as a fetch sees them.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    start: i64,
    /// The end of what the fetch can read now (the high watermark, or the last stable offset
    /// for `read_committed`).
    readable: i64,
    hw: i64,
    /// The last stable offset the response reports.
    lso: i64,
    epoch: i32,
    /// One past the last aborted transaction's marker, for a partition led in another zone
    /// (0 for one led here, whose reads know them).
    aborted_until: i64,
}

/// One partition a fetch asks for.
pub(crate) struct Wanted {
    pub(crate) partition_index: i32,
    pub(crate) partition: Result<Source, ResponseError>,
    pub(crate) offset: i64,
    pub(crate) max_bytes: i32,
    pub(crate) current_leader_epoch: i32,
    /// `read_committed`: up to the last stable offset, with the aborted transactions.
    pub(crate) committed: bool,
    /// KIP-392: a broker of the client's zone to fetch from instead (this broker leads the
    /// partition in another zone), told to clients placed by their RackId only.
    pub(crate) preferred: Option<i32>,
}

pub(crate) struct WantedTopic {
    pub(crate) name: TopicName,
    pub(crate) id: Uuid,
    pub(crate) partitions: Vec<Wanted>,
}

/// Waits (a little, once) for the leader's first word on the offsets of partitions served
/// for another zone's leader, subscribed to just now; and asks the leader again for a
/// partition fetched beyond the high watermark known here, which may only be late (the client
/// read further elsewhere): OFFSET_OUT_OF_RANGE is for offsets beyond the leader's.
pub(crate) async fn first_offsets(wanted: &[WantedTopic], feed: &Arc<weir_zone::Feed>) {
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

/// Reads every wanted partition once. Returns the response, its record bytes, and whether any
/// partition had an error (which answers at once, as Kafka does).
///
/// One round of reads: first without waiting for object storage; if that gives less than
/// `min_bytes` while some partition's data is still being fetched from it, again, waiting. So a
/// catch-up read of many partitions answers with those whose blocks are cached (the read-ahead
/// keeps fetching the others) rather than wait for the slowest GET, and a read that finds
/// nothing cached waits as before.
pub(crate) async fn fetch_round(
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
    // Reads that do not wait (the first pass) of partitions led here are done one after the
    // other, in request order, each taking from the total what it read (its own limit, while
    // the total lasts), as Kafka does: a consumer of thousands of partitions with a little new
    // data each gets all of it in one fetch; a read that stopped at a block not cached takes
    // the bytes of the GET it started for it. Reads that wait for object storage, and reads for
    // another zone's leader, run concurrently, so that a catch-up of many partitions waits for
    // one round of GETs rather than one per partition; each of those gets its share of the total
    // up front. Partitions with nothing to read take no share, so that caught-up partitions
    // early in the request do not starve later ones.
    let mut reserved = 0usize;
    let mut first = true;
    // Partitions with nothing to read are answered here, without a future: a consumer of
    // thousands of partitions sends all of them in every fetch (librdkafka has no fetch
    // sessions), and few have new data each time.
    //
    // Each partition's answer is written once, where the response keeps it: a consumer of
    // 10,000 partitions gets 10,000 of them in every response, and moving them from one vector
    // into another copied megabytes into fresh pages per fetch (with the kernel zeroing those
    // pages, a seventh of the broker's CPU). A read that runs concurrently leaves a
    // placeholder, filled in when it is done.
    let mut answers: Vec<Vec<PartitionData>> = Vec::with_capacity(wanted.len());
    let (mut total, mut errors, mut pending) = (0usize, false, false);
    let mut tally = |(pd, bytes, outcome): Answer| {
        total += bytes;
        errors |= outcome == Outcome::Error;
        pending |= matches!(outcome, Outcome::Incomplete(_));
        pd
    };
    let mut reads = Vec::new();
    for (ti, t) in wanted.iter().enumerate() {
        let mut parts = Vec::with_capacity(t.partitions.len());
        for (pi, w) in t.partitions.iter().enumerate() {
            let bounds = w
                .partition
                .as_ref()
                .map_err(|e| *e)
                .and_then(|s| s.bounds(w.committed).map(|b| (s, b)));
            let (has_data, in_range) = match &bounds {
                Ok((s, b)) => (
                    w.offset >= b.start && w.offset < b.readable && w.preferred.is_none(),
                    // A cluster link's mirror is behind its source for a moment: an offset past
                    // its end (a group offset copied from the source) is waited for, not
                    // out of range, so that a consumer moved to it does not reset.
                    (b.start..=b.hw).contains(&w.offset)
                        || (w.offset > b.hw && is_mirror(topics, s)),
                ),
                _ => (false, true),
            };
            let budget = if has_data {
                (w.max_bytes.max(0) as usize).min(max_bytes.saturating_sub(reserved))
            } else {
                0
            };
            // A read that does not wait, of a partition led here, is done at once, in request
            // order, and takes from the total what it read, as Kafka's reads do; the others run
            // concurrently, each with its whole share set aside.
            let inline = !wait && matches!(&bounds, Ok((Source::Local(_), _)));
            if !inline {
                reserved += budget;
            }
            let at_least_one = has_data && first;
            first &= !has_data;
            // Nothing to read at the end of the log or once the total is spent; an offset out
            // of range is still read, for its error.
            let read = (budget > 0 || at_least_one || !in_range).then_some(budget.max(1));
            match prepare(w, bounds, read) {
                Prepared::Answer(a) => parts.push(tally(a)),
                Prepared::Read {
                    pd,
                    source,
                    bounds,
                    read,
                } => {
                    let reading = async move {
                        let (pd, bytes, outcome) =
                            read_partition(topics, w, pd, source, bounds, read, wait).await;
                        // A partition's first batch may be larger than its share; only the
                        // first partition with data may send one whole (KIP-74), the others cut
                        // to their share, so that the response stays within `max_bytes`.
                        let (pd, bytes) = if at_least_one || bytes <= budget {
                            (pd, bytes)
                        } else {
                            let records = pd.records.as_ref().map(|r| whole_batches(r, budget));
                            let bytes = records.as_ref().map_or(0, |r| r.len());
                            (pd.with_records(records), bytes)
                        };
                        (ti, pi, (pd, bytes, outcome))
                    };
                    if inline {
                        let (_, _, a) = reading.await;
                        // A GET the read started takes room as the bytes would have: they are
                        // for the next fetch, which carries no more than this one. Without this,
                        // a fetch of thousands of partitions behind started a GET for each, far
                        // more than the block cache holds, and the blocks were evicted before
                        // the next fetch came for them (at 10,000 partitions, the lagging ones
                        // got nothing for tens of seconds while the broker fetched 1.9 GB/s from
                        // objects and evicted it unread).
                        let fetching = match a.2 {
                            Outcome::Incomplete(bytes) => bytes as usize,
                            _ => 0,
                        };
                        reserved += a.1 + fetching;
                        parts.push(tally(a));
                    } else {
                        parts.push(PartitionData::default());
                        reads.push(reading.boxed());
                    }
                }
            }
        }
        answers.push(parts);
    }
    for (ti, pi, a) in futures::future::join_all(reads).await {
        answers[ti][pi] = tally(a);
    }
    let mut topics = Vec::with_capacity(wanted.len());
    for (t, parts) in wanted.iter().zip(answers) {
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

/// Whether the partition is a cluster link's mirror ([`weir_partition::MIRROR_LINK_CONFIG`]).
fn is_mirror(topics: &Topics, s: &Source) -> bool {
    match s {
        Source::Local(p) => p.is_mirror(),
        Source::Remote { topic, .. } => topics
            .get(topic)
            .is_some_and(|t| t.configs.contains_key(weir_partition::MIRROR_LINK_CONFIG)),
    }
}

/// How one partition's part of a fetch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Done,
    Error,
    /// A read that did not wait stopped at data being fetched from object storage; the bytes
    /// of the GET it started there.
    Incomplete(u64),
}

/// What a partition's part of a fetch needs: nothing more than its offsets (an error, no
/// records), or a read.
enum Prepared<'a> {
    Answer(Answer),
    Read {
        pd: PartitionData,
        source: &'a Source,
        bounds: Bounds,
        read: usize,
    },
}

/// One partition's part of a response, its record bytes, and how it ended.
type Answer = (PartitionData, usize, Outcome);

/// One partition's part of a fetch, as far as it goes without reading: its offsets and errors,
/// and whether it reads (up to about `read` bytes, at least one batch; none if `None`).
fn prepare<'a>(
    w: &Wanted,
    bounds: Result<(&'a Source, Bounds), ResponseError>,
    read: Option<usize>,
) -> Prepared<'a> {
    let pd = PartitionData::default()
        .with_partition_index(w.partition_index)
        .with_preferred_read_replica(BrokerId(-1));
    let (source, b) = match bounds {
        Ok(b) => b,
        Err(e) => {
            let pd = pd
                .with_error_code(e.code())
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1);
            return Prepared::Answer((pd, 0, Outcome::Error));
        }
    };
    let pd = pd
        .with_high_watermark(b.hw)
        .with_last_stable_offset(b.lso)
        .with_log_start_offset(b.start);
    if let Some(e) = crate::epoch_mismatch(w.current_leader_epoch, b.epoch) {
        return Prepared::Answer((pd.with_error_code(e.code()), 0, Outcome::Error));
    }
    if let Some(id) = w.preferred {
        // As Kafka answers a fetch that should go to a follower: no records, the replica.
        let pd = pd
            .with_preferred_read_replica(BrokerId(id))
            .with_records(Some(Default::default()));
        return Prepared::Answer((pd, 0, Outcome::Done));
    }
    match read {
        None => Prepared::Answer((pd.with_records(Some(Default::default())), 0, Outcome::Done)),
        Some(read) => Prepared::Read {
            pd,
            source,
            bounds: b,
            read,
        },
    }
}

/// Reads a partition's records for a fetch, `pd` being its answer so far ([`prepare`]).
async fn read_partition(
    topics: &Topics,
    w: &Wanted,
    pd: PartitionData,
    source: &Source,
    b: Bounds,
    budget: usize,
    wait: bool,
) -> Answer {
    let Bounds {
        start,
        readable,
        hw,
        epoch,
        aborted_until,
        ..
    } = b;
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
                Outcome::Incomplete(data.fetching)
            } else {
                Outcome::Done
            };
            (pd, bytes, outcome)
        }
        Err(e) => (pd.with_error_code(e.code()), 0, Outcome::Error),
    }
}
