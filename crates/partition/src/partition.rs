//! The leader of one partition: validates produced batches, checks producer sequences, assigns
//! offsets through the storage engine, and serves reads.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use kafka_protocol::ResponseError;
use weir_meta::{MetaStore, ProducerSnapshot};
use weir_storage::{
    AppendOutcome, Engine, NewBatch, RewindHook, StorageError, StreamHandle, StreamOptions, WalKind,
};

use crate::batch;
use crate::clean::{self, CleanerPolicy, OffsetMap, Removed, Rules};
use crate::producer::{Check, ProducerStates};
use crate::txn::AbortedTxn;

/// The Kafka error a storage error stands for.
pub fn kafka_error(e: &StorageError) -> ResponseError {
    match e {
        StorageError::NotOpen(_) | StorageError::Fenced { .. } | StorageError::Closed => {
            ResponseError::NotLeaderOrFollower
        }
        StorageError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        StorageError::EmptyBatch { .. } => ResponseError::InvalidRecord,
        StorageError::Wal(weir_wal::WalError::TooLarge { .. }) => ResponseError::MessageTooLarge,
        // The session lapsed or a peer took this broker's WAL over: another broker leads (or
        // will lead) the partition; the client refreshes its metadata.
        StorageError::Wal(weir_wal::WalError::Fenced(_) | weir_wal::WalError::Sealed { .. }) => {
            ResponseError::NotLeaderOrFollower
        }
        StorageError::Wal(_) | StorageError::Object(_) | StorageError::Corrupt { .. } => {
            ResponseError::KafkaStorageError
        }
        StorageError::Meta(_) | StorageError::RecoveryGap { .. } => {
            ResponseError::KafkaStorageError
        }
        StorageError::Shared(e) => kafka_error(e),
        StorageError::Internal(_) => ResponseError::UnknownServerError,
    }
}

/// The batches of `records` that begin below `limit` (a `read_committed` read stops at the last
/// stable offset).
pub fn batches_below(records: &Bytes, limit: u64) -> Bytes {
    let mut end = 0usize;
    for (h, _, _, bytes) in batch::batches(records) {
        if u64::try_from(h.base_offset).map_or(true, |b| b >= limit) {
            break;
        }
        end += bytes.len();
    }
    records.slice(..end)
}

/// The payloads of `frames`, one after the other.
pub(crate) fn concat(frames: &[weir_storage::Frame]) -> Bytes {
    match frames.len() {
        0 => Bytes::new(),
        1 => frames[0].payload.clone(),
        _ => {
            let mut b = BytesMut::with_capacity(frames.iter().map(|f| f.payload.len()).sum());
            for f in frames {
                b.extend_from_slice(&f.payload);
            }
            b.freeze()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced {
    pub base_offset: i64,
    pub log_start_offset: i64,
}

#[derive(Debug, Clone)]
pub struct FetchData {
    pub records: Bytes,
    pub high_watermark: i64,
    /// The first offset of the oldest open transaction, at most the high watermark: what a
    /// `read_committed` consumer may read up to.
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// For `read_committed` fetches: aborted transactions with records in what was read.
    pub aborted: Vec<AbortedTxn>,
    /// A fetch that did not wait stopped at data still being fetched from object storage.
    pub incomplete: bool,
    /// Bytes of the GET it started there ([`weir_storage::ReadResult::fetching`]).
    pub fetching: u64,
}

/// What one clean of a compacted partition did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cleaned {
    /// The new cleaner checkpoint: everything below it is clean.
    pub checkpoint: u64,
    /// Keys of the dirty part.
    pub keys: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub records_removed: u64,
}

/// How a produce request's transactional batches were checked against their transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnCheck {
    /// Not checked: a transactional batch is accepted only from a producer whose transaction
    /// is already open here.
    None,
    /// Verified with the transaction's record, read at `version`, under this guard
    /// ([`Partition::verification_guard`]).
    Guard { guard: u64, version: u64 },
}

/// A produce whose offsets are assigned (or that retries a batch already appended), on its
/// way to durability.
pub struct ProduceTicket {
    partition: Arc<Partition>,
    kind: TicketKind,
}

enum TicketKind {
    Appended(weir_storage::PendingAppend),
    /// A retry of a batch appended at `base`: answers with its offset once the original append
    /// is durable (`None`: it already is), and fails if that append failed.
    Duplicate {
        base: u64,
        original: Option<AppendOutcome>,
    },
}

impl ProduceTicket {
    /// Waits until the partition's records are durable. Returns the first batch's offset.
    pub async fn wait(self) -> Result<Produced, ResponseError> {
        let base = match self.kind {
            TicketKind::Appended(p) => p.wait().await.map_err(|e| kafka_error(&e))?.base_offset,
            TicketKind::Duplicate { base, original } => {
                if let Some(o) = original {
                    o.wait().await.map_err(|e| kafka_error(&e))?;
                }
                base
            }
        };
        let (log_start, _) = self.partition.offsets();
        Ok(Produced {
            base_offset: base as i64,
            log_start_offset: log_start,
        })
    }
}

pub struct Partition {
    pub topic: String,
    pub index: i32,
    pub stream_id: u64,
    pub leader_epoch: i32,
    engine: Engine,
    /// The stream this partition opened, for its offsets: a fetch of thousands of partitions
    /// reads every one's, and a look-up by id in the engine's map for each was most of the
    /// fetch's cost.
    stream: StreamHandle,
    /// Changed under the stream's lock only (the engine calls the admission and the rewind
    /// hook with it held), so it always agrees with the stream's offsets.
    producers: Arc<Producers>,
    max_message_bytes: AtomicUsize,
    /// Bytes appended to it and fetched from it here since it opened: the balancer's measure
    /// of its load.
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    /// Produce and fetch requests served for it here since it opened.
    requests: AtomicU64,
    /// `cleanup.policy` includes `compact`: records need keys, the cleaner runs.
    compacted: std::sync::atomic::AtomicBool,
    /// A cluster link's mirror ([`crate::MIRROR_LINK_CONFIG`] set): written by the link only,
    /// at the source's offsets; produce is refused until the link promotes the topic.
    mirror: std::sync::atomic::AtomicBool,
    /// The offset of the last producer snapshot saved (the cleaner stays below it).
    snapshot_at: AtomicU64,
    /// The end of what was in object storage when the cleaner last looked (`u64::MAX`: never).
    cleaner_looked_at: AtomicU64,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A partition's producer state, and what fetches read of it without its lock.
struct Producers {
    state: Mutex<ProducerStates>,
    /// The partition's stream, once opened: the first offset of the earliest open transaction
    /// (`u64::MAX`: none) is published in its [`StreamHandle::aux`] word as the state's lock is
    /// let go, beside the offsets a fetch reads with it (the last stable offset is that and
    /// the high watermark). A fetch of 10,000 partitions reads every one's; taking each one's
    /// lock for it serialised 10,000 misses in the CPU's caches, and a copy of its own took
    /// one more miss per partition than the offsets. Stored while the lock is still held, so
    /// a reader sees what one taking the lock after that unlock would (the high watermark
    /// read first, as before: a transaction's first offset is published when its batch is
    /// appended, before the high watermark can pass it). Before the stream is set there is no
    /// reader: the partition is still opening.
    stream: std::sync::OnceLock<StreamHandle>,
}

impl Producers {
    fn new(state: ProducerStates) -> Self {
        Producers {
            state: Mutex::new(state),
            stream: std::sync::OnceLock::new(),
        }
    }
}

/// The producer state, locked; on the way out it publishes the first open transaction's
/// offset ([`Producers::stream`]).
struct ProducersGuard<'a> {
    guard: MutexGuard<'a, ProducerStates>,
    stream: &'a std::sync::OnceLock<StreamHandle>,
}

impl std::ops::Deref for ProducersGuard<'_> {
    type Target = ProducerStates;

    fn deref(&self) -> &ProducerStates {
        &self.guard
    }
}

impl std::ops::DerefMut for ProducersGuard<'_> {
    fn deref_mut(&mut self) -> &mut ProducerStates {
        &mut self.guard
    }
}

impl Drop for ProducersGuard<'_> {
    fn drop(&mut self) {
        if let Some(stream) = self.stream.get() {
            let first = self.guard.txns.first_open().unwrap_or(u64::MAX);
            stream.aux().store(first, Ordering::Release);
        }
    }
}

fn lock(p: &Producers) -> ProducersGuard<'_> {
    ProducersGuard {
        guard: p.state.lock().unwrap_or_else(|e| e.into_inner()),
        stream: &p.stream,
    }
}

impl Partition {
    /// Takes leadership of the partition's stream with a new epoch and rebuilds the idempotent
    /// producer state: the last snapshot, then the batches written after it.
    pub async fn open(
        engine: Engine,
        meta: &dyn MetaStore,
        topic: &str,
        index: i32,
        stream_id: u64,
        max_message_bytes: usize,
        wal_kind: WalKind,
    ) -> Result<Arc<Partition>, StorageError> {
        let epoch = meta.get_stream(stream_id).await?.map_or(1, |s| s.epoch + 1);
        let producers = Arc::new(Producers::new(ProducerStates::default()));
        // Weak: the stream keeps the hook, and the producer state keeps the stream (for its
        // `aux` word); a strong reference would make the two keep each other alive after the
        // partition is closed. Once the partition is gone there is no state to rewind.
        let hook_state = Arc::downgrade(&producers);
        let hook: RewindHook = Arc::new(move |offset| {
            if let Some(p) = hook_state.upgrade() {
                lock(&p).rewind(offset);
            }
        });
        let info = engine
            .open_stream_with(
                stream_id,
                epoch,
                StreamOptions {
                    rewind_hook: Some(hook),
                    wal_kind,
                },
            )
            .await?;
        let now = now_ms();
        let (mut from, mut state) = match meta.load_producer_snapshot(stream_id).await? {
            Some((offset, data)) => match ProducerStates::decode(&data, now) {
                Some(p) => (offset, p),
                None => (0, ProducerStates::default()),
            },
            None => (0, ProducerStates::default()),
        };
        from = from.max(info.start_offset);
        while from < info.high_watermark {
            let r = engine.read(stream_id, from, 4 << 20).await?;
            let Some(last) = r.batches.last() else { break };
            from = last.end_offset();
            for f in &r.batches {
                // A stored frame holds one produce request's batches for the partition.
                for (h, base, end, bytes) in batch::batches(&f.payload) {
                    if h.is_control() {
                        if let Some(commit) = batch::marker_kind(bytes) {
                            // Checked when it was written: it ends what it ended then.
                            state.replay_marker(h.producer_id, h.producer_epoch, base, commit, now);
                        }
                    } else {
                        state.record(&h, base, end, None, now);
                    }
                }
            }
        }
        let stream = engine
            .stream_handle(stream_id)
            .ok_or(StorageError::NotOpen(stream_id))?;
        // From here on every unlock publishes the first open transaction, this one first.
        let _ = producers.stream.set(stream.clone());
        *lock(&producers) = state;
        Ok(Arc::new(Partition {
            topic: topic.to_string(),
            index,
            stream_id,
            leader_epoch: epoch as i32,
            engine,
            stream,
            producers,
            max_message_bytes: AtomicUsize::new(max_message_bytes),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            compacted: std::sync::atomic::AtomicBool::new(false),
            mirror: std::sync::atomic::AtomicBool::new(false),
            snapshot_at: AtomicU64::new(0),
            cleaner_looked_at: AtomicU64::new(u64::MAX),
        }))
    }

    /// (bytes appended, bytes fetched, produce and fetch requests) here since the partition
    /// opened.
    pub fn load_counters(&self) -> (u64, u64, u64) {
        (
            self.bytes_in.load(Ordering::Relaxed),
            self.bytes_out.load(Ordering::Relaxed),
            self.requests.load(Ordering::Relaxed),
        )
    }

    fn producers(&self) -> ProducersGuard<'_> {
        lock(&self.producers)
    }

    /// The producers this partition knows, as DescribeProducers reports them.
    pub fn describe_producers(&self) -> Vec<crate::producer::ActiveProducer> {
        self.producers().active()
    }

    pub fn set_max_message_bytes(&self, n: usize) {
        self.max_message_bytes.store(n, Ordering::Relaxed);
    }

    /// Whether the topic is compacted (`cleanup.policy` includes `compact`).
    pub fn set_compacted(&self, compacted: bool) {
        self.compacted.store(compacted, Ordering::Relaxed);
    }

    /// Sets whether the partition is a cluster link's mirror; whether it was one.
    pub fn set_mirror(&self, mirror: bool) -> bool {
        self.mirror.swap(mirror, Ordering::Relaxed)
    }

    /// A mirror becomes an ordinary partition (its link promoted it): transactions its source's
    /// producers left open are aborted here, as the source's coordinator would abort them once
    /// their timeout passed (nothing can end them here otherwise, and the last stable offset
    /// would stay behind them), and the source's producers are forgotten, so that producers
    /// of this cluster, whose ids may be the same numbers, start clean. A producer snapshot is
    /// then saved, so that a reopen does not rebuild the source's producers from the log.
    /// Returns the transactions aborted.
    pub async fn end_mirror(
        self: &Arc<Self>,
        meta: &dyn MetaStore,
    ) -> Result<usize, ResponseError> {
        let open: Vec<(i64, i16)> = {
            let p = self.producers();
            p.txns
                .open_producers()
                .into_iter()
                .map(|pid| (pid, p.epoch(pid).unwrap_or(0)))
                .collect()
        };
        for &(pid, epoch) in &open {
            if let Some(t) = self.start_marker(pid, epoch, false, 0)? {
                t.wait().await?;
            }
        }
        self.producers().forget_producers();
        self.snapshot_producers(meta)
            .await
            .map_err(|e| kafka_error(&e))?;
        Ok(open.len())
    }

    /// Whether the partition is a cluster link's mirror (read-only for clients).
    pub fn is_mirror(&self) -> bool {
        self.mirror.load(Ordering::Relaxed)
    }

    pub fn is_compacted(&self) -> bool {
        self.compacted.load(Ordering::Relaxed)
    }

    /// The end of what was in object storage (`stream_offsets().1`) when the cleaner last
    /// looked at the partition.
    pub fn cleaner_looked_at(&self) -> Option<i64> {
        let v = self.cleaner_looked_at.load(Ordering::Relaxed);
        (v != u64::MAX).then_some(v as i64)
    }

    pub fn set_cleaner_looked_at(&self, committed: i64) {
        self.cleaner_looked_at
            .store(u64::try_from(committed).unwrap_or(0), Ordering::Relaxed);
    }

    /// (log start offset, high watermark)
    /// Whether its stream was closed or dropped (the partition moved away or was deleted):
    /// nothing more is read from it here.
    pub fn is_gone(&self) -> bool {
        self.stream.info().is_none()
    }

    pub fn offsets(&self) -> (i64, i64) {
        self.stream
            .info()
            .map_or((0, 0), |i| (i.start_offset as i64, i.high_watermark as i64))
    }

    /// Appends a produce request's records for this partition; returns once they are durable.
    pub async fn produce(self: &Arc<Self>, records: &Bytes) -> Result<Produced, ResponseError> {
        self.start_produce(records)?.wait().await
    }

    /// Validates the batches, checks their producer sequences and assigns their offsets, all
    /// before it returns, so that requests are appended in the order this is called, whatever
    /// waits (a full WAL included). The ticket resolves once they are durable.
    ///
    /// A request's batches for the partition are one append: durable together or failed
    /// together, as a Kafka log append is, so that a failure never leaves part of a request
    /// behind for a retry to duplicate.
    pub fn start_produce(
        self: &Arc<Self>,
        records: &Bytes,
    ) -> Result<ProduceTicket, ResponseError> {
        self.start_produce_checked(records, TxnCheck::None)
    }

    /// Whether producer `pid`'s transactional batches need verifying before they are appended
    /// here (KIP-890): `Some(guard)` to verify under, `None` when its transaction is open here
    /// already.
    pub fn verification_guard(&self, pid: i64) -> Option<u64> {
        let mut producers = self.producers();
        (!producers.txns.is_open(pid)).then(|| producers.txns.guard(pid))
    }

    /// [`Partition::start_produce`] for a request whose transactional batches were checked as
    /// `txn` says. A transactional batch that would open a transaction here is refused with
    /// INVALID_TXN_STATE unless it was verified and no marker of its producer came since.
    pub fn start_produce_checked(
        self: &Arc<Self>,
        records: &Bytes,
        txn: TxnCheck,
    ) -> Result<ProduceTicket, ResponseError> {
        if self.is_mirror() {
            // Only the link writes here, at the source's offsets, until it promotes the topic.
            return Err(ResponseError::PolicyViolation);
        }
        let batches =
            batch::split_and_validate(records, self.max_message_bytes.load(Ordering::Relaxed))?;
        if self.is_compacted() && !batches.iter().all(|b| clean::all_records_keyed(&b.bytes)) {
            // Kafka: "Compacted topic cannot accept message without key".
            return Err(ResponseError::InvalidRecord);
        }
        let epoch = self.leader_epoch;
        let mut verdict: Result<Option<TicketKind>, ResponseError> = Ok(None);
        let appended = self
            .engine
            .append_with(self.stream_id, epoch as u64, |base, outcome| {
                // Under the stream's lock: the producer state and the stream's offsets change
                // together.
                let mut producers = self.producers();
                let now = now_ms();
                let mut next = base;
                // Each batch is checked after the ones before it are recorded, as Kafka does.
                let unverified = |p: &ProducerStates, h: &batch::BatchHeader| {
                    h.is_transactional()
                        && !p.txns.is_open(h.producer_id)
                        && !matches!(txn, TxnCheck::Guard { guard, .. } if p.txns.verified(h.producer_id, guard))
                };
                let refusal = batches
                    .iter()
                    .find_map(|b| match producers.check(&b.header) {
                        Ok(Check::New) if unverified(&producers, &b.header) => {
                            Some(Err(ResponseError::InvalidTxnState))
                        }
                        Ok(Check::New) => {
                            let end = next + u64::from(b.header.offset_count());
                            producers.record(&b.header, next, end, Some(outcome.clone()), now);
                            if let (true, TxnCheck::Guard { version, .. }) =
                                (b.header.is_transactional(), txn)
                            {
                                producers.txns.verified_at(b.header.producer_id, version);
                            }
                            next = end;
                            None
                        }
                        // As Kafka: the first duplicate answers for the request.
                        Ok(Check::Duplicate(meta, original)) => {
                            Some(Ok(Some(TicketKind::Duplicate {
                                base: meta.base_offset,
                                original,
                            })))
                        }
                        Err(e) => Some(Err(e)),
                    })
                    .or_else(|| {
                        u32::try_from(next - base)
                            .is_err()
                            .then_some(Err(ResponseError::InvalidRecord))
                    });
                if let Some(refusal) = refusal {
                    // Nothing is appended: forget what this request recorded.
                    producers.rewind(base);
                    verdict = refusal;
                    return None;
                }
                let record_count = (next - base) as u32;
                Some(NewBatch {
                    record_count,
                    max_timestamp: batches
                        .iter()
                        .map(|b| b.header.index_timestamp())
                        .max()
                        .unwrap_or(-1),
                    payload: batch::assign_all(&batches, base, epoch),
                })
            });
        let kind = match appended {
            Ok(Some(pending)) => {
                self.bytes_in
                    .fetch_add(records.len() as u64, Ordering::Relaxed);
                self.requests.fetch_add(1, Ordering::Relaxed);
                TicketKind::Appended(pending)
            }
            Ok(None) => verdict?.ok_or(ResponseError::UnknownServerError)?,
            Err(e) => {
                tracing::debug!(topic = %self.topic, partition = self.index, error = %e, "append failed");
                return Err(kafka_error(&e));
            }
        };
        Ok(ProduceTicket {
            partition: Arc::clone(self),
            kind,
        })
    }

    /// Appends batches fetched from a link's source cluster at the source's own offsets (a
    /// mirror topic), as the source stored them: compression, timestamps, producer ids and
    /// sequences, control batches and the gaps its cleaner left are kept; only the partition
    /// leader epoch (outside the CRC) becomes this partition's. Batches that end at or below
    /// the partition's next offset are already here (a link resuming from its stored position
    /// fetches again what it may have written) and are left out; `Ok(None)`: nothing was new.
    ///
    /// The producer state follows as when the log is read back on open: the source checked
    /// each batch's sequence and each marker's epoch when it took them, so nothing is refused
    /// here, and a later produce after promotion goes on from the source's producer state.
    /// `from` is where the source's answer starts to cover its log (the fetch's offset): the
    /// source holds nothing between it and the first batch. Refused: batches that do not
    /// parse, that start inside what is already here (the source's log is not the one this
    /// mirror followed: CORRUPT_MESSAGE), and a fetch from beyond this partition's end (an
    /// append failed and the partition went back: OFFSET_OUT_OF_RANGE, to fetch again from its
    /// end); appending them would leave a gap the source does not have.
    pub fn start_mirror(
        self: &Arc<Self>,
        records: &Bytes,
        from: i64,
    ) -> Result<Option<ProduceTicket>, ResponseError> {
        let batches =
            batch::split_mirrored(records, self.max_message_bytes.load(Ordering::Relaxed))?;
        let epoch = self.leader_epoch;
        let mut verdict: Result<(), ResponseError> = Ok(());
        let appended = self
            .engine
            .append_with(self.stream_id, epoch as u64, |base, outcome| {
                if (base as i64) < from {
                    verdict = Err(ResponseError::OffsetOutOfRange);
                    return None;
                }
                let new: Vec<&batch::ProducedBatch> = batches
                    .iter()
                    .filter(|b| {
                        b.header.base_offset as u64 + u64::from(b.header.offset_count()) > base
                    })
                    .collect();
                let first = new.first()?;
                if (first.header.base_offset as u64) < base {
                    verdict = Err(ResponseError::CorruptMessage);
                    return None;
                }
                let last = new.last()?;
                let end = last.header.base_offset as u64 + u64::from(last.header.offset_count());
                let Ok(record_count) = u32::try_from(end - base) else {
                    verdict = Err(ResponseError::InvalidRecord);
                    return None;
                };
                let mut producers = self.producers();
                let now = now_ms();
                for b in &new {
                    let h = &b.header;
                    let at = h.base_offset as u64;
                    if !h.is_control() {
                        producers.record(
                            h,
                            at,
                            at + u64::from(h.offset_count()),
                            Some(outcome.clone()),
                            now,
                        );
                    } else if let Some(commit) = batch::marker_kind(&b.bytes) {
                        producers.replay_marker(h.producer_id, h.producer_epoch, at, commit, now);
                    }
                }
                Some(NewBatch {
                    record_count,
                    max_timestamp: new
                        .iter()
                        .map(|b| b.header.index_timestamp())
                        .max()
                        .unwrap_or(-1),
                    payload: batch::relabel_all(&new, epoch),
                })
            });
        match appended {
            Ok(Some(pending)) => {
                self.bytes_in
                    .fetch_add(records.len() as u64, Ordering::Relaxed);
                Ok(Some(ProduceTicket {
                    partition: Arc::clone(self),
                    kind: TicketKind::Appended(pending),
                }))
            }
            Ok(None) => verdict.map(|()| None),
            Err(e) => Err(kafka_error(&e)),
        }
    }

    /// Writes a transaction marker for producer `pid` at `epoch` (a commit or an abort),
    /// ending its open transaction here, if any, and revoking any verification of a late
    /// write. The marker is appended even when nothing is open (as Kafka does), so that its
    /// answer means durable, in order behind an earlier marker of the same decision still on
    /// its way. Refused with INVALID_PRODUCER_EPOCH: a marker at an older epoch than the
    /// producer's, or one decided at an older version of the transaction's record than the
    /// open transaction was verified at (a late retry of a stale coordinator; nothing of it is
    /// written).
    pub fn start_marker(
        self: &Arc<Self>,
        pid: i64,
        epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
    ) -> Result<Option<ProduceTicket>, ResponseError> {
        let leader_epoch = self.leader_epoch;
        let marker = batch::marker(pid, epoch, commit, coordinator_epoch, now_ms());
        let mut verdict: Result<(), ResponseError> = Ok(());
        let appended =
            self.engine
                .append_with(self.stream_id, leader_epoch as u64, |base, _outcome| {
                    let mut producers = self.producers();
                    let version = u64::try_from(coordinator_epoch).unwrap_or(0);
                    if producers.txns.stale_marker(pid, version) {
                        verdict = Err(ResponseError::InvalidProducerEpoch);
                        return None;
                    }
                    match producers.end_txn(pid, epoch, base, commit, now_ms()) {
                        Ok(_) => Some(NewBatch {
                            record_count: 1,
                            max_timestamp: batch::BatchHeader::parse(&marker)
                                .map_or(-1, |h| h.max_timestamp),
                            payload: batch::assign(&marker, base, leader_epoch),
                        }),
                        Err(e) => {
                            verdict = Err(e);
                            None
                        }
                    }
                });
        match appended {
            Ok(Some(pending)) => Ok(Some(ProduceTicket {
                partition: Arc::clone(self),
                kind: TicketKind::Appended(pending),
            })),
            Ok(None) => verdict.map(|()| None),
            Err(e) => Err(kafka_error(&e)),
        }
    }

    /// Aborted transactions with records in `[from, to)`.
    pub fn aborted_between(&self, from: u64, to: u64) -> Vec<AbortedTxn> {
        self.producers().txns.aborted_between(from, to)
    }

    /// The last stable offset: where `read_committed` consumers stop (never below the log
    /// start: DeleteRecords may remove an open transaction's first records).
    pub fn last_stable_offset(&self) -> i64 {
        self.offsets_and_lso().2
    }

    /// Start, high watermark and last stable offset, from one look at the stream.
    pub fn offsets_and_lso(&self) -> (i64, i64, i64) {
        let (start, hw) = self.offsets();
        // After the high watermark (see `Producers::stream`).
        let first_open = self.stream.aux().load(Ordering::Acquire);
        let lso = (first_open.min(hw as u64) as i64).max(start);
        (start, hw, lso)
    }

    /// One past the marker of the last aborted transaction (0: none).
    pub fn aborted_until(&self) -> i64 {
        self.producers().txns.aborted_until() as i64
    }

    /// Drops a verification guard of `pid` (its verification failed).
    pub fn drop_guard(&self, pid: i64) {
        self.producers().txns.drop_guard(pid);
    }

    /// Batches from `offset`, up to about `max_bytes` (at least one whole batch if any). A
    /// `read_committed` fetch (`committed`) stops at the last stable offset and is told the
    /// aborted transactions among what it read.
    pub async fn fetch(
        &self,
        offset: i64,
        max_bytes: usize,
        committed: bool,
    ) -> Result<FetchData, ResponseError> {
        self.fetch_with(offset, max_bytes, committed, true).await
    }

    /// [`Partition::fetch`]; unless `wait`, what is in object storage and not cached is not
    /// waited for ([`weir_storage::Engine::read_with`]): the records may stop early, or be none.
    pub async fn fetch_with(
        &self,
        offset: i64,
        max_bytes: usize,
        committed: bool,
        wait: bool,
    ) -> Result<FetchData, ResponseError> {
        if offset < 0 {
            return Err(ResponseError::OffsetOutOfRange);
        }
        let lso = self.last_stable_offset();
        let r = self
            .engine
            .read_with(self.stream_id, offset as u64, max_bytes, wait)
            .await
            .map_err(|e| kafka_error(&e))?;
        let mut records = concat(&r.batches);
        let mut aborted = Vec::new();
        if committed {
            let limit = u64::try_from(lso).unwrap_or(0);
            records = batches_below(&records, limit);
            aborted = self.producers().txns.aborted_between(offset as u64, limit);
        }
        self.bytes_out
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        Ok(FetchData {
            records,
            high_watermark: r.high_watermark as i64,
            last_stable_offset: lso.min(r.high_watermark as i64),
            log_start_offset: r.start_offset as i64,
            aborted,
            incomplete: r.incomplete,
            fetching: r.fetching,
        })
    }

    /// (log start offset, end of what is in object storage, high watermark).
    pub fn stream_offsets(&self) -> (i64, i64, i64) {
        self.stream.info().map_or((0, 0, 0), |i| {
            (
                i.start_offset as i64,
                i.committed_end as i64,
                i.high_watermark as i64,
            )
        })
    }

    /// A receiver of the end of what is in object storage.
    pub fn watch_committed(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.engine.watch_committed(self.stream_id)
    }

    /// A receiver of the high watermark, for fetches that wait for data.
    pub fn watch_high_watermark(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.stream.watch_high_watermark()
    }

    /// The offset and timestamp of the first record with a timestamp at least `ts`.
    pub async fn offset_for_timestamp(&self, ts: i64) -> Result<Option<(i64, i64)>, ResponseError> {
        let f = self
            .engine
            .find_by_timestamp(self.stream_id, ts)
            .await
            .map_err(|e| kafka_error(&e))?;
        // A stored frame holds one request's batches: the first of them with a record at or
        // after `ts`.
        Ok(f.and_then(|f| {
            batch::split(&f.payload).find_map(|b| batch::first_record_at_or_after(&b, ts))
        }))
    }

    /// The largest timestamp and the offset of the first record that has it (ListOffsets with
    /// MAX_TIMESTAMP).
    pub async fn max_timestamp(&self) -> Result<Option<(i64, i64)>, ResponseError> {
        let max = self
            .engine
            .max_timestamp(self.stream_id)
            .await
            .map_err(|e| kafka_error(&e))?;
        match max {
            Some(ts) => self.offset_for_timestamp(ts).await,
            None => Ok(None),
        }
    }

    /// DeleteRecords: moves the log start offset; returns the new low watermark.
    pub async fn delete_records(&self, offset: i64) -> Result<i64, ResponseError> {
        let (start, hw) = self.offsets();
        let target = if offset == -1 { hw } else { offset };
        if target < 0 || target > hw {
            return Err(ResponseError::OffsetOutOfRange);
        }
        if target <= start {
            return Ok(start);
        }
        self.engine
            .trim(self.stream_id, target as u64)
            .await
            .map(|s| s as i64)
            .map_err(|e| kafka_error(&e))
    }

    /// Forgets producers idle for `expiration_ms` (`producer.id.expiration.ms`); returns how
    /// many were forgotten.
    pub fn expire_producers(&self, expiration_ms: i64) -> usize {
        // Ended transactions are settled up to what is in object storage only: a leader that
        // is fenced rewinds to there, and must then be able to reopen a transaction whose
        // marker was only in its WAL.
        let (start, committed, hw) = self.stream_offsets();
        let mut producers = self.producers();
        producers.settle(hw as u64);
        producers.txns.settle(committed as u64);
        producers.txns.trim(start as u64);
        producers.expire(now_ms(), expiration_ms)
    }

    /// Producers this partition remembers.
    pub fn producer_count(&self) -> usize {
        self.producers().len()
    }

    /// Whether the log moved since the last producer snapshot (a new one would say more).
    pub fn snapshot_behind(&self) -> bool {
        let (_, hw) = self.offsets();
        hw as u64 > self.snapshot_at.load(Ordering::Relaxed)
    }

    /// Saves the idempotent-producer state as of the high watermark.
    pub async fn snapshot_producers(&self, meta: &dyn MetaStore) -> Result<(), StorageError> {
        let snap = self.producer_snapshot();
        let offset = snap.offset;
        meta.save_producer_snapshot(snap.stream_id, snap.offset, snap.data)
            .await?;
        self.snapshot_saved(offset);
        Ok(())
    }

    /// The idempotent-producer state as of the high watermark, to save (with others: see
    /// [`crate::Topics::snapshot_producers`]); [`Partition::snapshot_saved`] once it is.
    pub fn producer_snapshot(&self) -> ProducerSnapshot {
        let (_, hw) = self.offsets();
        ProducerSnapshot {
            stream_id: self.stream_id,
            offset: hw as u64,
            data: self.producers().encode_until(hw as u64),
        }
    }

    /// A snapshot up to `offset` is saved: the cleaner may go up to it, and the next snapshot
    /// is due only once the log moves past it.
    pub fn snapshot_saved(&self, offset: u64) {
        self.snapshot_at.fetch_max(offset, Ordering::Relaxed);
    }

    /// Cleans the partition of a compacted topic once (see [`crate::clean`]): `None` when
    /// there is not enough to clean.
    pub async fn clean(
        &self,
        meta: &dyn MetaStore,
        policy: CleanerPolicy,
        now_ms: i64,
    ) -> Result<Option<Cleaned>, StorageError> {
        let key = format!("cleaner.{}", self.stream_id);
        let (start, committed, _) = self.stream_offsets();
        let (start, committed) = (start as u64, committed as u64);
        let checkpoint = meta
            .get_value(&key)
            .await?
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            .max(start);
        let ranges = meta.ranges(self.stream_id, start, usize::MAX >> 1).await?;
        // Never the last frame in object storage (Kafka never cleans the active segment): a
        // reader at any offset always finds a record ahead of it. Frames that end at or below
        // `until` are cleaned, so the one that ends at `committed` is not.
        let mut until = committed
            .saturating_sub(1)
            .min(self.last_stable_offset().max(0) as u64)
            .min(self.snapshot_at.load(Ordering::Relaxed));
        tracing::trace!(topic = %self.topic, partition = self.index, checkpoint, until, committed, snapshot = self.snapshot_at.load(Ordering::Relaxed), "cleaner: the cleanable part");
        if until <= checkpoint {
            return Ok(None);
        }
        // Bytes of the log and of its dirty part, below `until` (a range counts in proportion
        // to its offsets there).
        let size_in = |from: u64| -> f64 {
            ranges
                .iter()
                .map(|r| {
                    let (lo, hi) = (r.start_offset.max(from), r.end_offset.min(until));
                    let span = r.end_offset.saturating_sub(r.start_offset).max(1);
                    r.size as f64 * hi.saturating_sub(lo) as f64 / span as f64
                })
                .sum()
        };
        let (total, dirty) = (size_in(start), size_in(checkpoint));
        if total <= 0.0 || dirty < policy.min_cleanable_dirty_ratio * total {
            tracing::trace!(topic = %self.topic, partition = self.index, total, dirty, "cleaner: not enough dirty data");
            return Ok(None);
        }
        // The dirty part's keys, up to min.compaction.lag.ms and the map's bound.
        let aborted = self.producers().txns.aborted_between(start, until);
        let mut map = OffsetMap::new(&aborted);
        let young = now_ms.saturating_sub(policy.min_compaction_lag_ms);
        let mut from = checkpoint;
        'read: while from < until {
            let r = self.engine.read(self.stream_id, from, 4 << 20).await?;
            let Some(last) = r.batches.last() else { break };
            let next = last.end_offset();
            for f in &r.batches {
                let too_young = policy.min_compaction_lag_ms > 0 && f.max_timestamp > young;
                if f.end_offset() > until || too_young || map.len() >= clean::MAX_KEYS {
                    until = until.min(f.base_offset);
                    break 'read;
                }
                map.add(&f.payload);
            }
            from = next;
        }
        if until <= checkpoint {
            return Ok(None);
        }
        let rules = Rules {
            map: &map,
            cleaned: checkpoint,
            delete_before_ms: now_ms.saturating_sub(policy.delete_retention_ms),
        };
        let removed = std::sync::Mutex::new(Removed::default());
        let transform = |f: &weir_storage::Frame| {
            let mut r = removed.lock().unwrap_or_else(|e| e.into_inner());
            match rules.rewrite(&f.payload, &mut r) {
                Some(payload) => weir_storage::Frame {
                    payload,
                    ..f.clone()
                },
                None => f.clone(),
            }
        };
        let done = self
            .engine
            .rewrite_stream(self.stream_id, until, &transform)
            .await?;
        if done.runs == 0 || done.end <= checkpoint {
            tracing::trace!(topic = %self.topic, partition = self.index, ?done, until, "cleaner: nothing rewritten");
            return Ok(None);
        }
        meta.set_value(&key, &done.end.to_string()).await?;
        let removed = *removed.lock().unwrap_or_else(|e| e.into_inner());
        Ok(Some(Cleaned {
            checkpoint: done.end,
            keys: map.len(),
            bytes_before: done.bytes_before,
            bytes_after: done.bytes_after,
            records_removed: removed.records,
        }))
    }

    pub fn set_retention(&self, retention: weir_storage::Retention) {
        let _ = self.engine.set_retention(self.stream_id, retention);
    }

    /// Keeps retention below `hold` (the first offset a topic's Iceberg table lacks); `None`:
    /// retention as configured.
    pub fn set_retention_hold(&self, hold: Option<u64>) {
        let _ = self.engine.set_retention_hold(self.stream_id, hold);
    }

    pub fn retention_hold(&self) -> Option<u64> {
        self.engine.retention_hold(self.stream_id)
    }

    /// Uploads what the partition holds and gives up leadership.
    pub async fn close(&self, meta: &dyn MetaStore) -> Result<(), StorageError> {
        if let Err(e) = self.snapshot_producers(meta).await {
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "could not snapshot producer state; it will be rebuilt from the log");
        }
        self.engine.close_stream(self.stream_id).await
    }
}

/// The integration tests' engine stack, for the unit tests below.
#[cfg(test)]
#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::common;

    use crate::{TopicDefaults, Topics};

    /// The stream keeps its rewind hook and the producer state keeps the stream: the hook's
    /// reference must not keep the producer state (and the stream with it) alive once the
    /// partition is closed and dropped.
    #[tokio::test]
    async fn a_closed_partition_frees_its_producer_state() {
        let common::Stack {
            dir: _dir,
            meta,
            engine,
        } = common::stack().await;
        let topics = Topics::open(engine, meta, TopicDefaults::default())
            .await
            .expect("topics");
        let t = topics
            .create("t", 1, BTreeMap::new(), false)
            .await
            .expect("create");
        let p = topics.open_partition(t.streams[0]).await.expect("open");
        let producers = std::sync::Arc::downgrade(&p.producers);
        drop(p);
        topics.close_partition(t.streams[0]).await.expect("close");
        assert!(
            producers.upgrade().is_none(),
            "the producer state outlived its closed partition"
        );
        topics.close().await;
    }
}
