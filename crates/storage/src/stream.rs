//! One stream's in-memory state: its offsets, its part of the log cache, and the appends that
//! wait for the WAL. The state changes only through the methods here, which keep the byte
//! accounting (the stream's and the engine's totals) and the invariants together.
//!
//! Offsets of a stream, in order:
//!
//! ```text
//! start <= [ committed ) [ durable: in the WAL ) [ in flight to the WAL ) [ waiting for room )
//!          ^committed_end ^                     ^durable_end              ^submitted_end     ^next_offset
//! ```
//!
//! `durable_end` is the high watermark: readers never see beyond it. The cached batches are one
//! contiguous run ending at `next_offset` that always holds everything from `committed_end` on;
//! committed batches at its front may be evicted.
//!
//! Appends are ordered by offset, and offsets by the order of the calls that assigned them:
//! a batch reaches the WAL only after every batch before it in the stream did, so a batch that
//! waits for WAL room holds back every later one (Kafka never reorders the requests of one
//! connection, and neither does a partition here). When a write fails, or a waiting batch runs
//! out of time, the stream rewinds to that batch's offset: it and every later batch fail, at
//! once and under the stream's lock, and the rewind hook (the partition's producer state) is
//! told in the same critical section.

use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{watch, Notify};
use weir_wal::{Seq, WalError};

use crate::config::{Retention, WalKind};
use crate::format::Frame;

/// Why an append failed after it was given its offsets.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    Wal(WalError),
    Fenced { current: u64 },
    Dropped,
}

pub(crate) type Outcome = Result<(), Failure>;

/// Where an append's outcome lands, once: awaited by the request that made it and by retries of
/// it. One allocation per append, and no lock on the way unless someone waits.
#[derive(Debug, Default)]
pub(crate) struct OutcomeCell {
    result: std::sync::OnceLock<Outcome>,
    notify: Notify,
}

impl OutcomeCell {
    pub fn set(&self, outcome: Outcome) {
        if self.result.set(outcome).is_ok() {
            self.notify.notify_waiters();
        }
    }

    pub async fn wait(&self) -> Outcome {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Registered before the check, so a `set` in between still wakes this waiter.
            notified.as_mut().enable();
            if let Some(r) = self.result.get() {
                return r.clone();
            }
            notified.await;
        }
    }
}

/// Told when a stream rewinds to an offset: everything from it on is gone. Runs under the
/// stream's lock, so it must not call back into the engine.
pub type RewindHook = Arc<dyn Fn(u64) + Send + Sync>;

/// `seq` of a batch not handed to the WAL yet.
const UNSUBMITTED: Seq = Seq::MAX;

#[derive(Debug)]
pub(crate) struct CachedBatch {
    pub frame: Frame,
    /// The WAL record holding this batch, until it is committed; [`UNSUBMITTED`] while it waits
    /// for WAL room.
    pub seq: Seq,
    /// Which append this is, so that a late WAL completion finds its own batch or none.
    pub id: u64,
    /// Told once the batch is durable or has failed.
    pub done: Option<Arc<OutcomeCell>>,
    /// While waiting for WAL room: when the append gives up.
    pub deadline: Option<Instant>,
}

impl CachedBatch {
    pub fn end_offset(&self) -> u64 {
        self.frame.end_offset()
    }
}

impl Drop for CachedBatch {
    /// A batch that leaves the stream undecided failed: its waiters must not wait forever.
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done.set(Err(Failure::Dropped));
        }
    }
}

/// Byte totals over all streams, kept by the streams as their batches come and go.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    /// Payload bytes in the log cache.
    pub cached: AtomicU64,
    /// Payload bytes appended and not yet in object storage.
    pub uncommitted: AtomicU64,
    /// Batches of all streams waiting for WAL room: while there are none, the uploader's tick
    /// has no stream to look at (at 10,000 partitions, looking at each ten times a second was
    /// the largest part of an idle broker's work).
    pub waiting: AtomicU64,
}

pub(crate) struct StreamState {
    epoch: u64,
    start_offset: u64,
    committed_end: u64,
    durable_end: u64,
    /// One past the last batch handed to the WAL.
    submitted_end: u64,
    next_offset: u64,
    batches: VecDeque<CachedBatch>,
    /// Batches at the end of `batches` waiting for WAL room.
    waiting: usize,
    /// Batches before those, in flight to the WAL.
    in_flight: usize,
    cached_bytes: u64,
    next_id: u64,
    /// Set when a newer leader took over: no more appends, uncommitted data dropped.
    fenced_by: Option<u64>,
    /// Set while the stream is being closed: no more appends.
    closing: bool,
    retention: Retention,
    /// Retention moves the start offset no further than this: what a consumer of the stream
    /// that is not a client (a topic's Iceberg table) has not read yet.
    retention_hold: Option<u64>,
    /// The WAL the stream's appends go through.
    wal_kind: WalKind,
    /// Set while the stream moves to another WAL: no batch is handed to either until the
    /// batches in flight on the old one are durable (and, for the object WAL, committed).
    switching: bool,
    rewind_hook: Option<RewindHook>,
    totals: Arc<Totals>,
    /// Appends made durable under the lock held now, told when it is let go, once the offsets
    /// are published ([`StateGuard`]): an acknowledged append's offsets are what any reader
    /// sees from then on.
    durable_waiters: Vec<Arc<OutcomeCell>>,
}

impl StreamState {
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn start_offset(&self) -> u64 {
        self.start_offset
    }

    /// One past the last offset in object storage.
    pub fn committed_end(&self) -> u64 {
        self.committed_end
    }

    /// The high watermark.
    pub fn durable_end(&self) -> u64 {
        self.durable_end
    }

    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    pub fn fenced_by(&self) -> Option<u64> {
        self.fenced_by
    }

    pub fn closing(&self) -> bool {
        self.closing
    }

    pub fn retention(&self) -> Retention {
        self.retention
    }

    pub fn retention_hold(&self) -> Option<u64> {
        self.retention_hold
    }

    pub fn set_retention_hold(&mut self, hold: Option<u64>) {
        self.retention_hold = hold;
    }

    pub fn wal_kind(&self) -> WalKind {
        self.wal_kind
    }

    pub fn switching(&self) -> bool {
        self.switching
    }

    /// Holds new batches back from the WAL while the stream moves to another.
    pub fn begin_switch(&mut self) {
        self.switching = true;
    }

    /// Ends a switch; the stream's batches go to `kind` from now on. Only with nothing in
    /// flight: completions of the old WAL would otherwise interleave with the new one's.
    pub fn end_switch(&mut self, kind: WalKind) {
        invariant!(
            !self.switching || self.in_flight == 0 || self.wal_kind == kind,
            "WAL switch of a stream with {} batches in flight",
            self.in_flight
        );
        self.wal_kind = kind;
        self.switching = false;
    }

    /// Batches handed to the WAL and not yet durable.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// No more appends: the stream is being closed.
    pub fn close(&mut self) {
        self.closing = true;
    }

    pub fn set_retention(&mut self, retention: Retention) {
        self.retention = retention;
    }

    /// Moves the start offset forward (retention, DeleteRecords); never back.
    pub fn move_start(&mut self, offset: u64) {
        self.start_offset = self.start_offset.max(offset);
    }

    /// The offsets' order, checked in release builds too: a stream whose offsets disagree would
    /// acknowledge or upload the wrong data, so the broker stops instead (the WAL and the
    /// metadata store then recover it from durable state).
    pub fn check_invariants(&self) {
        debug_assert!(
            self.totals.waiting.load(Ordering::Acquire) >= self.waiting as u64,
            "{} batches of this stream wait for WAL room, more than all streams' count",
            self.waiting
        );
        invariant!(
            self.committed_end <= self.durable_end
                && self.durable_end <= self.submitted_end
                && self.submitted_end <= self.next_offset,
            "stream offsets out of order: committed {} durable {} submitted {} next {}",
            self.committed_end,
            self.durable_end,
            self.submitted_end,
            self.next_offset
        );
        invariant!(
            self.batches
                .front()
                .map_or(self.committed_end == self.next_offset, |b| b
                    .frame
                    .base_offset
                    <= self.committed_end),
            "uncommitted data missing from the cache (committed {}, next {})",
            self.committed_end,
            self.next_offset
        );
        invariant!(
            self.batches
                .back()
                .is_none_or(|b| b.end_offset() == self.next_offset),
            "cache does not end at the next offset {}",
            self.next_offset
        );
        invariant!(
            self.waiting + self.in_flight <= self.batches.len()
                && (self.waiting == 0) == (self.submitted_end == self.next_offset)
                && (self.in_flight == 0) == (self.durable_end == self.submitted_end),
            "{} waiting and {} in flight disagree with offsets durable {} submitted {} next {}",
            self.waiting,
            self.in_flight,
            self.durable_end,
            self.submitted_end,
            self.next_offset
        );
    }

    /// Adds a batch at `next_offset`, not yet handed to the WAL; returns its id.
    pub fn push(&mut self, frame: Frame, done: Arc<OutcomeCell>, deadline: Instant) -> u64 {
        invariant!(
            frame.base_offset == self.next_offset && frame.record_count > 0,
            "append at {} ({} records) but the next offset is {}",
            frame.base_offset,
            frame.record_count,
            self.next_offset
        );
        let len = frame.payload.len() as u64;
        let id = self.next_id;
        self.next_id += 1;
        self.next_offset = frame.end_offset();
        self.cached_bytes += len;
        self.totals.cached.fetch_add(len, Ordering::Relaxed);
        self.totals.uncommitted.fetch_add(len, Ordering::Relaxed);
        self.waiting += 1;
        self.totals.waiting.fetch_add(1, Ordering::AcqRel);
        self.batches.push_back(CachedBatch {
            frame,
            seq: UNSUBMITTED,
            id,
            done: Some(done),
            deadline: Some(deadline),
        });
        id
    }

    /// The first batch waiting to be handed to the WAL. The waiting batches are the last
    /// `waiting` of the cache, the ones in flight the `in_flight` before them: every lookup on
    /// the append path is O(1), however many batches the cache holds.
    pub fn first_unsubmitted(&self) -> Option<&CachedBatch> {
        if self.waiting == 0 {
            return None;
        }
        self.batches.get(self.batches.len() - self.waiting)
    }

    /// Records that the first waiting batch went to the WAL as record `seq`.
    pub fn submitted(&mut self, seq: Seq) {
        let i = self.batches.len() - self.waiting;
        let Some(b) = self.batches.get_mut(i) else {
            invariant!(false, "submitted a batch the stream does not have");
            return;
        };
        invariant!(
            b.frame.base_offset == self.submitted_end,
            "submitting offset {} but the WAL has the stream up to {}",
            b.frame.base_offset,
            self.submitted_end
        );
        b.seq = seq;
        b.deadline = None;
        self.submitted_end = b.end_offset();
        self.waiting -= 1;
        self.totals.waiting.fetch_sub(1, Ordering::AcqRel);
        self.in_flight += 1;
    }

    /// The first batch in flight to the WAL, if it is `(base, id)`: WAL completions come in
    /// order, so a completion's batch is that one or gone (a rewind failed it already).
    fn first_in_flight(&mut self, base: u64, id: u64) -> Option<&mut CachedBatch> {
        if self.in_flight == 0 {
            return None;
        }
        let i = self.batches.len() - self.waiting - self.in_flight;
        self.batches
            .get_mut(i)
            .filter(|b| b.frame.base_offset == base && b.id == id)
    }

    /// A WAL write of the batch `(base, id)` is durable. `false` if that batch is gone (a rewind
    /// failed it already), in which case nothing changes.
    pub fn durable(&mut self, base: u64, id: u64) -> bool {
        let Some(b) = self.first_in_flight(base, id) else {
            return false;
        };
        let end = b.end_offset();
        let done = b.done.take();
        invariant!(
            self.durable_end == base && end <= self.submitted_end,
            "WAL completed offset {base} but the stream is durable up to {} (WAL order broken)",
            self.durable_end
        );
        self.durable_end = end;
        self.in_flight -= 1;
        self.durable_waiters.extend(done);
        true
    }

    /// Whether the batch `(base, id)` is the first in flight to the WAL (its write failed: is it
    /// still there to fail?).
    pub fn in_flight_first(&mut self, base: u64, id: u64) -> bool {
        self.first_in_flight(base, id).is_some()
    }

    /// Whether the batch `(base, id)` is still in flight to the WAL (no rewind or fence has
    /// failed it since it was handed over).
    pub fn holds_in_flight(&self, base: u64, id: u64) -> bool {
        if base < self.durable_end || base >= self.submitted_end {
            return false;
        }
        let i = self.batches.partition_point(|b| b.frame.base_offset < base);
        self.batches
            .get(i)
            .is_some_and(|b| b.frame.base_offset == base && b.id == id)
    }

    /// Whether the batch `(base, id)` is the last the stream holds (the one just appended).
    pub fn holds_last(&self, base: u64, id: u64) -> bool {
        self.batches
            .back()
            .is_some_and(|b| b.frame.base_offset == base && b.id == id)
    }

    /// Fails every batch from `offset` on, which must not be durable yet, and goes back to it:
    /// the next append gets `offset` again. The rewind hook is told.
    pub fn rewind(&mut self, offset: u64, why: Failure) {
        invariant!(
            offset >= self.durable_end && offset <= self.next_offset,
            "rewind to {offset} outside the pending range [{}, {}]",
            self.durable_end,
            self.next_offset
        );
        if offset == self.next_offset {
            return;
        }
        self.drop_from(offset, &why);
        self.submitted_end = self.submitted_end.min(offset);
        self.next_offset = offset;
        if let Some(hook) = &self.rewind_hook {
            hook(offset);
        }
    }

    /// A newer leader owns the stream: everything not yet in object storage is dropped, and
    /// nothing more is appended.
    pub fn fence(&mut self, current: u64) {
        self.fenced_by = Some(current);
        let committed = self.committed_end;
        self.drop_from(committed, &Failure::Fenced { current });
        self.durable_end = committed;
        self.submitted_end = committed;
        self.next_offset = committed;
        if let Some(hook) = &self.rewind_hook {
            hook(committed);
        }
    }

    fn drop_from(&mut self, offset: u64, why: &Failure) {
        let mut freed = 0;
        while let Some(b) = self.batches.back() {
            if b.frame.base_offset < offset {
                break;
            }
            let mut b = self.batches.pop_back().expect("checked above");
            if b.seq == UNSUBMITTED {
                self.waiting -= 1;
                self.totals.waiting.fetch_sub(1, Ordering::AcqRel);
            } else if b.end_offset() > self.durable_end {
                self.in_flight -= 1;
            }
            freed += b.frame.payload.len() as u64;
            if let Some(done) = b.done.take() {
                done.set(Err(why.clone()));
            }
        }
        self.cached_bytes -= freed;
        self.totals.cached.fetch_sub(freed, Ordering::Relaxed);
        self.totals.uncommitted.fetch_sub(freed, Ordering::Relaxed);
    }

    /// The first offset the log cache holds, if it holds any.
    pub fn cache_start(&self) -> Option<u64> {
        self.batches.front().map(|b| b.frame.base_offset)
    }

    /// Batches from `from` on, below the high watermark, up to about `max_bytes` (at least one).
    /// `None` if the cache does not reach back to `from`.
    pub fn read_cached(&self, from: u64, max_bytes: usize) -> Option<Vec<Frame>> {
        let first = self.batches.front()?;
        if first.frame.base_offset > from {
            return None;
        }
        let i = self.batches.partition_point(|b| b.end_offset() <= from);
        let mut out = Vec::new();
        let mut bytes = 0;
        for b in self.batches.range(i..) {
            if b.end_offset() > self.durable_end
                || (!out.is_empty() && bytes + b.frame.payload.len() > max_bytes)
            {
                break;
            }
            bytes += b.frame.payload.len();
            out.push(b.frame.clone());
        }
        Some(out)
    }

    /// Durable batches from `from` on (at or above the committed end), oldest first.
    pub fn durable_from(&self, from: u64) -> impl Iterator<Item = &Frame> {
        let from = from.max(self.committed_end.min(self.durable_end));
        let i = self.batches.partition_point(|b| b.end_offset() <= from);
        self.batches
            .range(i..)
            .take_while(|b| b.end_offset() <= self.durable_end)
            .map(|b| &b.frame)
    }

    /// Durable batches not yet committed, for an upload.
    pub fn uncommitted_durable(&self) -> Vec<Frame> {
        self.durable_from(self.committed_end).cloned().collect()
    }

    /// WAL sequence number of the first batch not yet committed ([`Seq::MAX`] if it has not
    /// reached the WAL yet: the WAL may be trimmed past everything it holds of this stream).
    /// `None` for a stream on the object WAL, which holds nothing in the WAL file.
    pub fn first_uncommitted_seq(&self) -> Option<Seq> {
        if self.wal_kind == WalKind::Object {
            return None;
        }
        let i = self
            .batches
            .partition_point(|b| b.end_offset() <= self.committed_end);
        self.batches.get(i).map(|b| b.seq)
    }

    /// Records that everything below `end` is in object storage.
    pub fn committed(&mut self, from: u64, end: u64) {
        invariant!(
            self.committed_end == from && end <= self.durable_end,
            "commit of [{from}, {end}) but the stream is committed up to {} and durable up to {}",
            self.committed_end,
            self.durable_end
        );
        let i = self.batches.partition_point(|b| b.end_offset() <= from);
        let bytes: u64 = self
            .batches
            .range(i..)
            .take_while(|b| b.end_offset() <= end)
            .map(|b| b.frame.payload.len() as u64)
            .sum();
        self.committed_end = end;
        self.totals.uncommitted.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Drops committed batches that end at or below `upto`; returns the bytes freed.
    pub fn evict_until(&mut self, upto: u64) -> u64 {
        let limit = upto.min(self.committed_end);
        let mut freed = 0;
        while let Some(b) = self.batches.front() {
            if b.end_offset() > limit {
                break;
            }
            freed += b.frame.payload.len() as u64;
            self.batches.pop_front();
        }
        self.cached_bytes -= freed;
        self.totals.cached.fetch_sub(freed, Ordering::Relaxed);
        freed
    }

    /// Forgets everything the stream holds (it is closed or dropped): the engine's totals no
    /// longer count it. Batches still pending fail with `why`.
    pub fn release(&mut self, why: Failure) {
        let pending_from = self.durable_end;
        self.drop_from(pending_from, &why);
        self.next_offset = self.durable_end;
        self.submitted_end = self.durable_end;
        let uncommitted: u64 = self
            .batches
            .iter()
            .skip_while(|b| b.end_offset() <= self.committed_end)
            .map(|b| b.frame.payload.len() as u64)
            .sum();
        self.totals
            .uncommitted
            .fetch_sub(uncommitted, Ordering::Relaxed);
        self.totals
            .cached
            .fetch_sub(self.cached_bytes, Ordering::Relaxed);
        self.cached_bytes = 0;
        self.batches.clear();
        self.committed_end = self.durable_end;
    }
}

impl Drop for StreamState {
    fn drop(&mut self) {
        // A stream forgotten with batches still waiting (the engine closing) takes them out
        // of the count.
        if self.waiting > 0 {
            self.totals
                .waiting
                .fetch_sub(self.waiting as u64, Ordering::AcqRel);
        }
    }
}

pub(crate) struct Stream {
    pub id: u64,
    state: Mutex<StreamState>,
    /// The high watermark, for readers that wait for new data.
    pub end_tx: watch::Sender<u64>,
    /// The end of what is in object storage, for brokers that serve the stream from there.
    pub committed_tx: watch::Sender<u64>,
    /// The last ranges committed for the stream, oldest first (at most [`RECENT_RANGES`]): the
    /// index a leader feeds to brokers that serve the stream in other zones.
    pub recent: Mutex<VecDeque<weir_meta::RangeInfo>>,
    /// Held while the stream's ranges are rewritten (merged into stream objects, or cleaned):
    /// two rewrites of the same ranges would each swap in their own copy, and the cleaner's
    /// work could be undone by a merge of the frames as they were.
    pub rewrite: tokio::sync::Mutex<()>,
    /// The committed end at compaction's last look that found nothing to merge (`u64::MAX`:
    /// none yet): until more is uploaded there is nothing new to merge, and no reason to read
    /// the stream's ranges again (at 10,000 partitions, 10,000 metadata reads a round).
    pub compaction_looked_at: std::sync::atomic::AtomicU64,
    /// Where compaction's next look starts: every range below it was large at the last look,
    /// and compaction leaves large ranges alone unless their object is sparse (looked for at
    /// reclaim rounds, which read from the start). 0 after a rewrite, which may shrink ranges.
    pub compaction_from: std::sync::atomic::AtomicU64,
    /// Its offsets as of the state's last unlock, and whether it is forgotten: what
    /// [`Stream::info`] reads without the lock.
    published: Published,
}

/// A stream's offsets, copied out of its state each time the state's lock is let go
/// ([`StateGuard`]), and read without the lock.
///
/// A consumer of 10,000 partitions asks for every one of them in each fetch (librdkafka has no
/// fetch sessions), and a fetch reads each one's offsets. Taking each stream's lock for that
/// made the reads one after the other, each a miss in the CPU's caches that the lock's atomic
/// instruction waited for: a sixth of the broker's CPU. Loads alone overlap, and all of these
/// share one cache line.
///
/// Not one snapshot: each value is read on its own. The order of the stores (the high
/// watermark first) and of the loads (it last) keeps what readers rely on: the start and the
/// committed end a reader sees are never beyond the high watermark it sees, as both only
/// move forward and never past it.
#[repr(C, align(64))]
struct Published {
    /// Fixed: a stream opened at a newer epoch is a new stream.
    epoch: u64,
    start_offset: AtomicU64,
    committed_end: AtomicU64,
    durable_end: AtomicU64,
    /// A word the layer above keeps here, in the offsets' cache line ([`Stream::aux`]).
    aux: AtomicU64,
    /// Set once the engine has closed or dropped the stream (taken it out of its map): a
    /// [`crate::StreamHandle`] its partition still holds reads no offsets from it, as a look-up
    /// in the map would find none.
    forgotten: AtomicBool,
}

impl Published {
    fn new(st: &StreamState) -> Self {
        let p = Published {
            epoch: st.epoch,
            start_offset: AtomicU64::new(0),
            committed_end: AtomicU64::new(0),
            durable_end: AtomicU64::new(0),
            aux: AtomicU64::new(u64::MAX),
            forgotten: AtomicBool::new(false),
        };
        p.publish(st);
        p
    }

    fn publish(&self, st: &StreamState) {
        debug_assert_eq!(self.epoch, st.epoch);
        self.durable_end.store(st.durable_end, Ordering::Release);
        self.committed_end
            .store(st.committed_end, Ordering::Release);
        self.start_offset.store(st.start_offset, Ordering::Release);
    }
}

/// The stream's state, locked; on the way out it publishes the offsets ([`Published`]).
pub(crate) struct StateGuard<'a> {
    guard: MutexGuard<'a, StreamState>,
    published: &'a Published,
}

impl Deref for StateGuard<'_> {
    type Target = StreamState;

    fn deref(&self) -> &StreamState {
        &self.guard
    }
}

impl DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut StreamState {
        &mut self.guard
    }
}

impl StateGuard<'_> {
    /// Publishes the offsets now, before telling readers that wait (a watch of the high
    /// watermark) that they moved; letting the lock go does it too.
    pub fn publish(&self) {
        self.published.publish(&self.guard);
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        self.published.publish(&self.guard);
        for done in self.guard.durable_waiters.drain(..) {
            done.set(Ok(()));
        }
    }
}

/// Ranges a stream remembers for brokers that read it in other zones.
pub(crate) const RECENT_RANGES: usize = 64;

impl Stream {
    pub fn new(
        id: u64,
        epoch: u64,
        start_offset: u64,
        end_offset: u64,
        totals: Arc<Totals>,
        wal_kind: WalKind,
        rewind_hook: Option<RewindHook>,
    ) -> Stream {
        let state = StreamState {
            epoch,
            start_offset,
            committed_end: end_offset,
            durable_end: end_offset,
            submitted_end: end_offset,
            next_offset: end_offset,
            batches: VecDeque::new(),
            waiting: 0,
            in_flight: 0,
            cached_bytes: 0,
            next_id: 0,
            fenced_by: None,
            closing: false,
            retention: Retention::default(),
            retention_hold: None,
            wal_kind,
            switching: false,
            rewind_hook,
            totals,
            durable_waiters: Vec::new(),
        };
        Stream {
            id,
            published: Published::new(&state),
            state: Mutex::new(state),
            end_tx: watch::channel(end_offset).0,
            committed_tx: watch::channel(end_offset).0,
            recent: Mutex::new(VecDeque::new()),
            rewrite: tokio::sync::Mutex::new(()),
            compaction_looked_at: std::sync::atomic::AtomicU64::new(u64::MAX),
            compaction_from: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Its offsets as of the state's last unlock, without the lock ([`Published`]).
    pub fn info(&self) -> crate::StreamInfo {
        let p = &self.published;
        // The high watermark last: see `Published`.
        let start_offset = p.start_offset.load(Ordering::Acquire);
        let committed_end = p.committed_end.load(Ordering::Acquire);
        crate::StreamInfo {
            epoch: p.epoch,
            start_offset,
            committed_end,
            high_watermark: p.durable_end.load(Ordering::Acquire),
        }
    }

    /// A word the layer above keeps in the cache line of the stream's published offsets
    /// (`u64::MAX` until it stores one), for a value its readers take with them: a partition
    /// keeps the first offset of its earliest open transaction here, read with the high
    /// watermark for the last stable offset. In its own allocation that value was a second
    /// miss in the CPU's caches per partition of a fetch (11% of the broker's CPU with a
    /// consumer of 10,000 partitions, session 31).
    pub fn aux(&self) -> &AtomicU64 {
        &self.published.aux
    }

    /// Whether the engine has closed or dropped the stream.
    pub fn is_forgotten(&self) -> bool {
        self.published.forgotten.load(Ordering::Acquire)
    }

    /// Marks the stream closed or dropped: its handles read nothing more from it. Fetches
    /// waiting on its high watermark are woken, so that they learn at once that it left (a
    /// partition moved away answers NOT_LEADER_OR_FOLLOWER now, not at the end of the
    /// consumer's `fetch.max.wait.ms`).
    pub fn set_forgotten(&self) {
        self.published.forgotten.store(true, Ordering::Release);
        self.end_tx.send_modify(|_| {});
    }

    pub fn lock(&self) -> StateGuard<'_> {
        StateGuard {
            guard: self.state.lock().unwrap_or_else(|e| e.into_inner()),
            published: &self.published,
        }
    }
}

/// Total of a slice of frames' payloads.
pub(crate) fn payload_bytes(frames: &[Frame]) -> u64 {
    frames.iter().map(|f| f.payload.len() as u64).sum()
}

pub(crate) fn frame(
    base_offset: u64,
    record_count: u32,
    max_timestamp: i64,
    payload: Bytes,
) -> Frame {
    Frame {
        base_offset,
        record_count,
        max_timestamp,
        payload,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_waiting_for_wal_room_are_counted_across_streams() {
        let totals = Arc::new(Totals::default());
        let waiting = || totals.waiting.load(Ordering::Acquire);
        let new = |id| Stream::new(id, 1, 0, 0, Arc::clone(&totals), WalKind::File, None);
        let (a, b) = (new(1), new(2));
        let push = |s: &Stream, base: u64| {
            let f = frame(base, 1, 0, Bytes::from_static(b"x"));
            let deadline = Instant::now() + std::time::Duration::from_secs(1);
            s.lock().push(f, Arc::default(), deadline);
        };
        push(&a, 0);
        push(&a, 1);
        push(&b, 0);
        assert_eq!(waiting(), 3);
        a.lock().submitted(7);
        assert_eq!(waiting(), 2, "handed to the WAL");
        a.lock().check_invariants();
        a.lock().rewind(0, Failure::Dropped);
        assert_eq!(waiting(), 1, "failed while waiting");
        drop(b);
        assert_eq!(waiting(), 0, "forgotten with a batch waiting");
    }
}
