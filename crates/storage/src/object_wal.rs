//! The object WAL: streams whose appends are made durable by object storage itself.
//!
//! A batch of such a stream is handed here, in offset order, instead of to the WAL file. Batches
//! of all such streams are collected into one object until the first has waited
//! `object_wal_linger` or they hold `object_wal_bytes`; the object is built in the ordinary
//! object format (a stream-set object, plus stream objects for large streams), PUT, and its
//! ranges committed to the metadata store in one transaction. Only then are its batches durable,
//! and at the same moment committed: the WAL object *is* the data object, written once, and the
//! uploader finds nothing left to upload for these streams.
//!
//! Several objects are in flight at once (`object_wal_max_in_flight`): their PUTs overlap, but
//! their commits take turns in the order the objects were sealed, so each stream's ranges are
//! committed, and its appends acknowledged, in offset order. A producer with five requests in
//! flight is therefore held by the PUT's latency only once, not once per request.
//!
//! Faults:
//! - A PUT that fails after its retries, or a commit the metadata store keeps refusing, fails the
//!   object's batches: each stream rewinds to its first batch in the object (which fails every
//!   later batch of that stream too, including those in later objects: they are left out of
//!   those objects' commits). Clients retry; nothing acknowledged is lost.
//! - A commit refused for a stale epoch means a newer leader owns the stream: it is fenced, and
//!   nothing of it is acknowledged here. That is what stops a paused broker that wakes up after
//!   its partitions moved: it has no WAL a peer must seal, and its commit is refused.
//! - Bytes handed over and not yet committed are bounded (`max_in_flight + 1` objects' worth);
//!   beyond that batches wait in their stream, as they do for room in a full WAL file.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_retry::Backoff;

use tokio::sync::{oneshot, watch, Notify, OwnedSemaphorePermit};
use weir_meta::{MetaError, ObjectCommit};
use weir_wal::WalError;

use crate::collector::{Collector, Entry};
use crate::error::{Result, StorageError};
use crate::format::Frame;
use crate::log_cache::LogCache;
use crate::objects::{Objects, Part};
use crate::stream::{Failure, Stream};
use crate::upload::Backlog;
use crate::{StorageConfig, StorageMeters};

/// How long an object's commit is retried while the metadata store fails (it is down or
/// unreachable) before its batches fail. Later objects wait behind it meanwhile, as their
/// commits must come after it.
const COMMIT_PATIENCE: Duration = Duration::from_secs(10);

/// The delays between those commits.
const COMMIT_RETRY: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));

/// Attempts of an object's PUT. Few, and quickly: its producers wait meanwhile, and a failure
/// only makes them retry (the batches are still in their memory), where the uploader's data
/// would sit in the WAL.
const PUT_ATTEMPTS: u32 = 3;

/// One stream's batches in one object: what to check before its ranges are committed, and what
/// to mark durable (or fail) after.
struct StreamShare {
    stream: Arc<Stream>,
    /// `(base offset, append id)` of each batch, in order.
    batches: Vec<(u64, u64)>,
    /// Its `Part` of the object.
    part: usize,
}

/// The object WAL: what it collects and has in flight, and what it writes with.
pub(crate) struct ObjectWal {
    collector: Collector,
    /// An object is sealed once it holds this many bytes...
    object_bytes: u64,
    /// ...or its first batch has waited this long...
    linger: Duration,
    /// ...and, with a PUT budget, this long has passed since the last object was sealed.
    min_gap: Duration,
    /// The bound on one object's PUT, retries included.
    put_timeout: Duration,
    objects: Arc<Objects>,
    log_cache: Arc<LogCache>,
    meters: Arc<StorageMeters>,
    /// Whether the WAL file waits for uploads (a hint for the PUTs).
    backlog: Arc<Backlog>,
    /// Woken when an object is done: batches that waited for room go on (the engine's uploader
    /// hands them on).
    intake: Arc<Notify>,
}

impl crate::durability::Durability for ObjectWal {
    fn take(
        &self,
        s: &Arc<Stream>,
        epoch: u64,
        id: u64,
        frame: &Frame,
    ) -> crate::durability::Taken {
        match self.offer(s, epoch, id, frame) {
            // No place in the WAL file: any value but the one that marks a batch not handed over
            // yet (the WAL file is never trimmed by it: `first_uncommitted_seq` skips such
            // streams).
            true => crate::durability::Taken::Seq(0),
            // Waits in the stream; an object's end hands it on.
            false => crate::durability::Taken::NoRoom,
        }
    }
}

impl ObjectWal {
    pub fn new(
        config: &StorageConfig,
        objects: Arc<Objects>,
        log_cache: Arc<LogCache>,
        backlog: Arc<Backlog>,
        intake: Arc<Notify>,
    ) -> ObjectWal {
        ObjectWal {
            collector: Collector::new(config.object_wal_max_in_flight, config.object_wal_bytes),
            object_bytes: config.object_wal_bytes,
            linger: config.object_wal_linger,
            min_gap: if config.object_wal_max_puts_per_sec > 0.0 {
                Duration::from_secs_f64((1.0 / config.object_wal_max_puts_per_sec).min(3600.0))
            } else {
                Duration::ZERO
            },
            put_timeout: config.object_wal_put_timeout,
            meters: Arc::clone(&objects.meters),
            objects,
            log_cache,
            backlog,
            intake,
        }
    }

    /// Hands the stream's first waiting batch to the object WAL; called under the stream's lock,
    /// in offset order. `false` when the object WAL has no room: the batch waits in the stream.
    pub(crate) fn offer(&self, s: &Arc<Stream>, epoch: u64, id: u64, frame: &Frame) -> bool {
        let ow = &self.collector;
        let len = frame.payload.len() as u64;
        let pending = &self.meters.object_wal_pending_bytes;
        let before = pending.load(Ordering::Relaxed);
        // One batch is always let through, however large, so that a batch bigger than the
        // budget cannot wait forever.
        if before > 0 && before + len > ow.max_pending_bytes {
            return false;
        }
        pending.fetch_add(len, Ordering::Relaxed);
        let mut c = ow.lock();
        let first = c.entries.is_empty();
        c.entries.push(Entry {
            stream: Arc::clone(s),
            epoch,
            id,
            frame: frame.clone(),
        });
        c.bytes += len;
        if first {
            c.since = Some(Instant::now());
        }
        let full = c.bytes >= self.object_bytes;
        drop(c);
        if first || full {
            ow.wake.notify_one();
        }
        true
    }

    /// Seals objects as they fill or linger out, and sends each on its way (PUT, then commit in
    /// turn) while at most `object_wal_max_in_flight` are in flight.
    pub(crate) async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let linger = self.linger;
        // When the last object was sealed: with a PUT budget, the next one that is not full
        // waits `min_gap` after it.
        let mut sealed: Option<Instant> = None;
        loop {
            if *shutdown.borrow_and_update() {
                return;
            }
            let (since, full) = {
                let c = self.collector.lock();
                (c.since, c.bytes >= self.object_bytes)
            };
            let Some(since) = since else {
                tokio::select! {
                    _ = self.collector.wake.notified() => {}
                    _ = shutdown.changed() => return,
                }
                continue;
            };
            let due = sealed.map_or(since + linger, |t| (since + linger).max(t + self.min_gap));
            if !full && Instant::now() < due {
                tokio::select! {
                    _ = self.collector.wake.notified() => {}
                    _ = tokio::time::sleep_until(due.into()) => {}
                    _ = shutdown.changed() => return,
                }
                continue;
            }
            // Wait for a slot before sealing: meanwhile batches go on joining this object, so a
            // slow store makes objects larger rather than queues longer.
            let slot = tokio::select! {
                slot = Arc::clone(&self.collector.slots).acquire_owned() => match slot {
                    Ok(s) => s,
                    Err(_) => return,
                },
                _ = shutdown.changed() => return,
            };
            let entries = std::mem::take(&mut *self.collector.lock()).entries;
            if entries.is_empty() {
                continue;
            }
            sealed = Some(Instant::now());
            let (done_tx, done_rx) = oneshot::channel();
            let prev = self
                .collector
                .tail
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .replace(done_rx);
            tokio::spawn(Arc::clone(&self).write_object(entries, since, prev, done_tx, slot));
        }
    }

    /// Writes one object of the object WAL: PUT, then (after the previous object's commit)
    /// commit, then the batches are durable; or they fail.
    async fn write_object(
        self: Arc<Self>,
        entries: Vec<Entry>,
        since: Instant,
        prev: Option<oneshot::Receiver<()>>,
        done: oneshot::Sender<()>,
        _slot: OwnedSemaphorePermit,
    ) {
        let bytes: u64 = entries.iter().map(|e| e.frame.payload.len() as u64).sum();
        // Batches a rewind failed while they waited here are left out: after a rewind a stream
        // hands over new batches at the same offsets, which may have joined this object behind
        // the failed ones. What is left of each stream is one contiguous run.
        let entries: Vec<Entry> = entries
            .into_iter()
            .filter(|e| e.stream.lock().holds_in_flight(e.frame.base_offset, e.id))
            .collect();
        let mut parts: Vec<Part> = Vec::new();
        let mut shares: HashMap<u64, StreamShare> = HashMap::new();
        for e in entries {
            let id = e.stream.id;
            match shares.entry(id) {
                std::collections::hash_map::Entry::Occupied(mut o) => {
                    let share = o.get_mut();
                    let p = &mut parts[share.part];
                    invariant!(
                        p.epoch == e.epoch
                            && p.frames.last().map(Frame::end_offset) == Some(e.frame.base_offset),
                        "object WAL: stream {id} has batch {} at epoch {} after {:?} at epoch {}",
                        e.frame.base_offset,
                        e.epoch,
                        p.frames.last().map(Frame::end_offset),
                        p.epoch
                    );
                    share.batches.push((e.frame.base_offset, e.id));
                    p.frames.push(e.frame);
                }
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(StreamShare {
                        stream: Arc::clone(&e.stream),
                        batches: vec![(e.frame.base_offset, e.id)],
                        part: parts.len(),
                    });
                    parts.push(Part {
                        stream_id: id,
                        epoch: e.epoch,
                        frames: vec![e.frame],
                    });
                }
            }
        }
        let put = if parts.is_empty() {
            Ok(Vec::new())
        } else {
            // Producers wait for this PUT: at the broker's priority, and bounded as a whole (a
            // PUT abandoned here leaves a prepared object, collected as an orphan).
            let bound = self.put_timeout;
            let backlogged = self.backlog.is_behind();
            let put = self
                .objects
                .put_parts(&parts, PUT_ATTEMPTS, true, backlogged);
            match tokio::time::timeout(bound, put).await {
                Ok(put) => put,
                Err(_) => Err(StorageError::Object(object_store::Error::Generic {
                    store: "object WAL",
                    source: format!(
                        "an object's PUT did not finish within {} ms",
                        bound.as_millis()
                    )
                    .into(),
                })),
            }
        };
        if let Some(prev) = prev {
            // An error only means the previous writer is gone: its turn is over either way.
            let _ = prev.await;
        }
        let outcome = match put {
            Ok(commits) => self.commit_in_turn(commits, &mut shares).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => {
                self.meters.object_wal_objects.inc();
                self.meters.object_wal_bytes.add(bytes);
                self.meters.object_wal_latency.record(since.elapsed());
            }
            Err(e) => {
                self.meters.object_wal_failures.inc();
                tracing::warn!(error = %e, streams = shares.len(), "object WAL: object not written; its appends fail and their streams rewind");
                let failure = Failure::Wal(WalError::WriteFailed(Arc::new(std::io::Error::other(
                    format!("object WAL: {e}"),
                ))));
                for share in shares.values() {
                    let mut st = share.stream.lock();
                    let (base, id) = share.batches[0];
                    if st.in_flight_first(base, id) {
                        st.rewind(base, failure.clone());
                        st.check_invariants();
                    }
                }
            }
        }
        self.meters
            .object_wal_pending_bytes
            .fetch_sub(bytes, Ordering::Relaxed);
        drop(done);
        // Batches that waited for room go on now.
        self.intake.notify_one();
        self.log_cache.evict();
    }

    /// The commit of one object, in its turn. Streams whose batches are no longer in flight (a
    /// rewind or a fence failed them since) are left out; a stream the store fences is fenced
    /// here and left out; the rest are committed, then durable.
    async fn commit_in_turn(
        &self,
        mut commits: Vec<ObjectCommit>,
        shares: &mut HashMap<u64, StreamShare>,
    ) -> Result<()> {
        shares.retain(|_, share| {
            let (base, id) = share.batches[0];
            let mut st = share.stream.lock();
            st.fenced_by().is_none() && st.in_flight_first(base, id)
        });
        let started = Instant::now();
        let mut delays = COMMIT_RETRY.delays();
        loop {
            for c in &mut commits {
                c.ranges.retain(|r| shares.contains_key(&r.stream_id));
            }
            // An object left with no range is never committed: it is an orphan, and deleted as
            // one.
            commits.retain(|c| !c.ranges.is_empty());
            if commits.is_empty() {
                return Ok(());
            }
            let committing = Instant::now();
            let culprit = match self.objects.meta.commit_objects(commits.clone()).await {
                Ok(()) => {
                    self.meters.commit_latency.record(committing.elapsed());
                    self.meters
                        .object_wal_object_bytes
                        .add(commits.iter().map(|c| c.size).sum());
                    self.objects.remember_ranges(&commits);
                    break;
                }
                Err(e @ MetaError::Backend { .. }) if started.elapsed() < COMMIT_PATIENCE => {
                    tracing::warn!(error = %e, "object WAL: commit failed; retrying");
                    delays.wait().await;
                    continue;
                }
                Err(e) => match self
                    .objects
                    .refused_stream(&e, |id| shares.get(&id).map(|s| &s.stream))
                {
                    Some(culprit) => culprit,
                    None => return Err(e.into()),
                },
            };
            shares.remove(&culprit);
        }
        for share in shares.values() {
            let mut st = share.stream.lock();
            let first = share.batches[0].0;
            let mut end = first;
            for &(base, id) in &share.batches {
                if !st.durable(base, id) {
                    break;
                }
                end = st.durable_end();
            }
            if end > first {
                st.committed(first, end);
                st.publish();
                share.stream.committed_tx.send_replace(end);
                share.stream.end_tx.send_replace(st.durable_end());
            }
            st.check_invariants();
            drop(st);
            self.log_cache.committed(share.stream.id, end);
        }
        Ok(())
    }
}
