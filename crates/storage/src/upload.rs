//! The uploader: log cache -> objects -> metadata -> WAL trim, and then the hand-off of appends
//! that waited for WAL room. Recovery is in `recovery.rs`, retention and garbage collection in
//! `maintenance.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_retry::Backoff;

use std::sync::Mutex;

use tokio::sync::{watch, Notify};
use weir_wal::Wal;

use crate::error::{Result, StorageError};
use crate::intake::Intake;
use crate::log_cache::LogCache;
use crate::objects::{Objects, Part};
use crate::stream::Stream;
use crate::streams::Streams;
use crate::StorageConfig;

/// The delays between failed uploads of the upload loop. At most a second (two with jitter):
/// an attempt while the metadata store or the object store is down fails fast and costs one
/// connection attempt, while a longer back-off would keep the WAL full for that long after the
/// store is back.
const UPLOAD_LOOP_RETRY: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));

/// The uploader's part of the engine: its turn, what waits for it, and what it works with.
pub(crate) struct Uploader {
    config: StorageConfig,
    wal: Arc<dyn Wal>,
    /// Whether `wal` is a WAL file; `false` for a broker without a disk.
    has_wal_file: bool,
    streams: Arc<Streams>,
    objects: Arc<Objects>,
    log_cache: Arc<LogCache>,
    backlog: Arc<Backlog>,
    /// Where batches that waited for WAL room go on, after an upload trimmed it.
    intake: Arc<Intake>,
    /// Serialises uploads, so that each stream's ranges are committed in order.
    lock: tokio::sync::Mutex<()>,
    /// Streams whose one-stream uploads wait for `lock`: the next holder uploads them all.
    flush_requests: Mutex<HashSet<u64>>,
    /// Wakes the upload loop, which also hands waiting batches on.
    wanted: Arc<Notify>,
    /// When the oldest data not yet uploaded arrived (`None` when there is none).
    oldest_uncommitted: Mutex<Option<Instant>>,
}

impl Uploader {
    pub fn new(
        shared: &crate::shared::Shared,
        wal: Arc<dyn Wal>,
        has_wal_file: bool,
        intake: Arc<Intake>,
        wanted: Arc<Notify>,
    ) -> Uploader {
        Uploader {
            config: shared.config.clone(),
            wal,
            has_wal_file,
            streams: Arc::clone(&shared.streams),
            objects: Arc::clone(&shared.objects),
            log_cache: Arc::clone(&shared.log_cache),
            backlog: Arc::clone(&shared.backlog),
            intake,
            lock: tokio::sync::Mutex::new(()),
            flush_requests: Mutex::new(HashSet::new()),
            wanted,
            oldest_uncommitted: Mutex::new(None),
        }
    }

    /// A batch arrived; `was_idle`: nothing was waiting for an upload before it. Wakes the
    /// upload loop once an upload is due by size or by the WAL's use.
    pub fn arrived(&self, was_idle: bool) {
        if was_idle {
            let mut oldest = self
                .oldest_uncommitted
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            oldest.get_or_insert_with(Instant::now);
        }
        let wal = self.wal.usage();
        if self.log_cache.totals.uncommitted.load(Ordering::Relaxed) >= self.config.upload_bytes
            || (self.has_wal_file && wal.used * 2 >= wal.capacity)
        {
            self.wanted.notify_one();
        }
    }

    /// Streams the next upload of one stream uploads too.
    pub fn flush_later(&self, stream_ids: &[u64]) {
        self.lock_flush_requests()
            .extend(stream_ids.iter().copied());
    }

    /// Uploads every stream's durable, uncommitted data, commits it, then trims the WAL and
    /// hands waiting appends to it. A commit refused because of one stream (a newer leader
    /// fenced it, or its topic was deleted meanwhile) is retried without that stream, so that
    /// one stream can never hold back the others.
    pub async fn upload(&self) -> Result<()> {
        let _turn = self.lock.lock().await;
        self.upload_locked(None).await
    }

    /// Uploads and commits one stream's durable, uncommitted data only: a partition that moves
    /// to another broker hands over after writing its own data, however full the WAL is with
    /// other partitions' data, so the move takes as long as that partition's tail, not the WAL's.
    /// Requests that queue up behind an upload in progress (a broker moving many partitions at
    /// once) are served together by the next one, not one after another.
    pub async fn upload_stream(&self, stream_id: u64) -> Result<()> {
        self.lock_flush_requests().insert(stream_id);
        let _turn = self.lock.lock().await;
        let mut only = std::mem::take(&mut *self.lock_flush_requests());
        only.insert(stream_id);
        self.upload_locked(Some(&only)).await
    }

    fn lock_flush_requests(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.flush_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The upload, with `upload_lock` held: of every stream, or of the streams in `only`.
    async fn upload_locked(&self, only: Option<&HashSet<u64>>) -> Result<()> {
        let snapshot_time = Instant::now();
        let mut parts = Vec::new();
        let mut streams: HashMap<u64, Arc<Stream>> = HashMap::new();
        for s in self.streams.all() {
            if only.is_some_and(|o| !o.contains(&s.id)) {
                continue;
            }
            let st = s.lock();
            if st.fenced_by().is_some() {
                continue;
            }
            let frames = st.uncommitted_durable();
            if !frames.is_empty() {
                parts.push(Part {
                    stream_id: s.id,
                    epoch: st.epoch(),
                    frames,
                });
                streams.insert(s.id, Arc::clone(&s));
            }
        }
        while !parts.is_empty() {
            let culprit = match self
                .objects
                .commit_parts(&parts, self.backlog.is_behind())
                .await
            {
                Ok(()) => break,
                Err(StorageError::Meta(e)) => {
                    match self.objects.refused_stream(&e, |id| streams.get(&id)) {
                        Some(culprit) => culprit,
                        None => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e),
            };
            parts.retain(|p| p.stream_id != culprit);
            streams.remove(&culprit);
        }
        for p in &parts {
            let Some(s) = streams.get(&p.stream_id) else {
                continue;
            };
            let end = p.frames[p.frames.len() - 1].end_offset();
            let mut st = s.lock();
            if st.fenced_by().is_some() {
                continue;
            }
            st.committed(p.frames[0].base_offset, end);
            st.check_invariants();
            drop(st);
            s.committed_tx.send_replace(end);
            self.log_cache.committed(p.stream_id, end);
        }
        if !parts.is_empty() {
            let left = self.log_cache.totals.uncommitted.load(Ordering::Relaxed);
            let mut oldest = self
                .oldest_uncommitted
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if left == 0 {
                *oldest = None;
            } else if only.is_none() {
                *oldest = Some(snapshot_time);
            }
            // After an upload of some streams, the others' data is as old as it was.
        }
        self.trim_wal().await?;
        self.intake.submit_all_waiting();
        self.log_cache.evict();
        Ok(())
    }

    /// Trims the WAL up to the first record any open stream has not committed yet.
    async fn trim_wal(&self) -> Result<()> {
        // Read before the scan: an append that registers after the scan passed its stream got a
        // sequence number at or above this one.
        let mut upto = self.wal.next_seq();
        for s in self.streams.all() {
            if let Some(seq) = s.lock().first_uncommitted_seq() {
                upto = upto.min(seq);
            }
        }
        self.wal.trim(upto).await?;
        Ok(())
    }

    /// Uploads when due (by size, by age, by the WAL's use), until `shutdown`.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        // Appends that wait for WAL room are handed on after every upload; this loop's tick
        // also fails those that waited too long while nothing could be uploaded.
        let tick = Duration::from_millis(100).min(self.config.upload_interval);
        let mut delays = UPLOAD_LOOP_RETRY.delays();
        loop {
            // A task first polled after close() sent the signal would never see it change.
            if *shutdown.borrow_and_update() {
                return;
            }
            tokio::select! {
                _ = self.wanted.notified() => {}
                _ = tokio::time::sleep(tick) => {}
                _ = shutdown.changed() => return,
            }
            let wal = self.wal.usage();
            let oldest = *self
                .oldest_uncommitted
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.intake.submit_all_waiting();
            let due = self.log_cache.totals.uncommitted.load(Ordering::Relaxed)
                >= self.config.upload_bytes
                || oldest.is_some_and(|t| t.elapsed() >= self.config.upload_interval)
                || (self.has_wal_file && wal.used * 2 >= wal.capacity);
            if !due {
                continue;
            }
            match self.upload().await {
                Ok(()) => delays = UPLOAD_LOOP_RETRY.delays(),
                Err(e) => {
                    tracing::warn!(error = %e, "upload failed; data stays in the WAL and is retried");
                    delays.wait().await;
                }
            }
        }
    }
}

/// How far uploads are behind the WAL file.
pub(crate) struct Backlog {
    pub wal: Arc<dyn weir_wal::Wal>,
    pub upload_bytes: u64,
}

impl Backlog {
    /// Whether uploads are behind: the WAL holds more than a quarter of its capacity, or more
    /// than two uploads' worth (`upload_bytes`; at a steady rate it holds about one). Then
    /// uploads ask for throughput over the latency of the WAL's own writes
    /// ([`crate::local::Backlogged`]).
    pub fn is_behind(&self) -> bool {
        let u = self.wal.usage();
        let behind = (u.capacity / 4).min(self.upload_bytes.saturating_mul(2));
        u.capacity > 0 && u.used >= behind
    }
}
