//! The uploader: log cache -> objects -> metadata -> WAL trim, and then the hand-off of appends
//! that waited for WAL room. Recovery is in `recovery.rs`, retention and garbage collection in
//! `maintenance.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_retry::Backoff;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{PutMultipartOptions, PutOptions, PutPayload};
use weir_meta::{MetaError, ObjectCommit, RangeCommit, RangeInfo};

use crate::engine::EngineInner;
use crate::error::{Result, StorageError};
use crate::format::{Frame, ObjectBuilder};
use crate::objstore::object_key;
use crate::stream::{payload_bytes, Failure, Stream};

/// One stream's data in an upload.
pub(crate) struct Part {
    pub stream_id: u64,
    pub epoch: u64,
    pub frames: Vec<Frame>,
}

/// Attempts of a PUT of the uploader and of compaction, whose data is safe meanwhile.
pub(crate) const PUT_ATTEMPTS: u32 = 8;

/// How long preparing an object is retried while the metadata store fails (it is down, or the
/// connections it broke when it restarted are still pooled) before the upload fails. For the
/// object WAL a failure fails its producers' appends, which makes them retry and librdkafka bump
/// its producer epoch: worth avoiding for a blip.
const PREPARE_PATIENCE: Duration = Duration::from_secs(10);

/// The delays between those prepares.
const STORE_RETRY: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));

/// The delays between the attempts of one object's PUT.
const PUT_RETRY: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));

/// The delays between failed uploads of the upload loop. At most a second (two with jitter):
/// an attempt while the metadata store or the object store is down fails fast and costs one
/// connection attempt, while a longer back-off would keep the WAL full for that long after the
/// store is back.
const UPLOAD_LOOP_RETRY: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));

impl EngineInner {
    /// Uploads every stream's durable, uncommitted data, commits it, then trims the WAL and
    /// hands waiting appends to it. A commit refused because of one stream (a newer leader
    /// fenced it, or its topic was deleted meanwhile) is retried without that stream, so that
    /// one stream can never hold back the others.
    pub async fn upload(&self) -> Result<()> {
        let _turn = self.upload_lock.lock().await;
        self.upload_locked(None).await
    }

    /// Uploads and commits one stream's durable, uncommitted data only: a partition that moves
    /// to another broker hands over after writing its own data, however full the WAL is with
    /// other partitions' data, so the move takes as long as that partition's tail, not the WAL's.
    /// Requests that queue up behind an upload in progress (a broker moving many partitions at
    /// once) are served together by the next one, not one after another.
    pub async fn upload_stream(&self, stream_id: u64) -> Result<()> {
        self.lock_flush_requests().insert(stream_id);
        let _turn = self.upload_lock.lock().await;
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
        for s in self.all_streams() {
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
            let culprit = match self.commit_parts(&parts).await {
                Ok(()) => break,
                Err(StorageError::Meta(e)) => {
                    match self.refused_stream(&e, |id| streams.get(&id)) {
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
            self.evictable
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back((p.stream_id, end));
        }
        if !parts.is_empty() {
            let left = self.totals.uncommitted.load(Ordering::Relaxed);
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
        self.submit_all_waiting();
        self.evict();
        Ok(())
    }

    /// A commit the metadata store refused because of one stream: a newer leader fenced it
    /// (its uncommitted data is not ours to keep), someone else committed to it (only a newer
    /// leader can have: it is fenced too), or its topic was deleted (it is dropped). Returns
    /// that stream, for the caller to retry the commit without it; `None` for other errors.
    /// The uploader and the object WAL both commit this way.
    pub(crate) fn refused_stream<'a>(
        &self,
        e: &MetaError,
        stream: impl Fn(u64) -> Option<&'a Arc<Stream>>,
    ) -> Option<u64> {
        match *e {
            MetaError::Fenced {
                stream_id, current, ..
            } => {
                tracing::warn!(
                    stream_id,
                    current,
                    "stream fenced by a newer leader; dropping its uncommitted data"
                );
                if let Some(s) = stream(stream_id) {
                    s.lock().fence(current);
                }
                Some(stream_id)
            }
            MetaError::Discontinuity {
                stream_id,
                expected,
                got,
            } => {
                tracing::error!(
                    stream_id,
                    expected,
                    got,
                    "the metadata store's end offset moved under this leader; fencing the stream"
                );
                if let Some(s) = stream(stream_id) {
                    let mut st = s.lock();
                    let current = st.epoch() + 1;
                    st.fence(current);
                }
                Some(stream_id)
            }
            MetaError::UnknownStream(stream_id) => {
                tracing::warn!(
                    stream_id,
                    "stream no longer exists in the metadata store; dropping it"
                );
                if let Some(s) = self.forget(stream_id) {
                    s.lock().release(Failure::Dropped);
                }
                Some(stream_id)
            }
            _ => None,
        }
    }

    /// Builds objects from `parts` (a stream-set object, and stream objects for large streams),
    /// writes them and commits them in one metadata transaction.
    pub(crate) async fn commit_parts(&self, parts: &[Part]) -> Result<()> {
        let commits = self
            .put_parts(parts, PUT_ATTEMPTS, self.wal_backlogged())
            .await?;
        let bytes: u64 = commits.iter().map(|c| c.size).sum();
        let count = commits.len() as u64;
        let committing = std::time::Instant::now();
        self.meta.commit_objects(commits.clone()).await?;
        self.meters.commit_latency.record(committing.elapsed());
        self.remember_ranges(&commits);
        self.meters.uploads.inc();
        self.meters.objects_uploaded.add(count);
        self.meters.upload_bytes.add(bytes);
        Ok(())
    }

    /// Keeps the ranges just committed with their streams (the index a leader feeds to brokers
    /// serving its streams in other zones).
    pub(crate) fn remember_ranges(&self, commits: &[ObjectCommit]) {
        for c in commits {
            for r in &c.ranges {
                let Some(s) = self.stream(r.stream_id) else {
                    continue;
                };
                let mut recent = s.recent.lock().unwrap_or_else(|e| e.into_inner());
                if recent
                    .back()
                    .is_some_and(|last| last.end_offset != r.start_offset)
                {
                    // Not contiguous (a range committed by someone else in between): start over.
                    recent.clear();
                }
                recent.push_back(RangeInfo {
                    stream_id: r.stream_id,
                    start_offset: r.start_offset,
                    end_offset: r.end_offset,
                    object_id: c.object_id,
                    object_key: object_key(c.object_id),
                    object_size: c.size,
                    position: r.position,
                    size: r.size,
                    max_timestamp: r.max_timestamp,
                });
                while recent.len() > crate::stream::RECENT_RANGES {
                    recent.pop_front();
                }
            }
        }
    }

    /// Builds objects from `parts` (a stream-set object, and stream objects for large streams)
    /// and writes them; returns what commits them.
    ///
    /// `urgent`: something waits for these objects (producers: the object WAL, or an upload
    /// the WAL is behind on); they are built and written at the broker's priority, else below
    /// it.
    pub(crate) async fn put_parts(
        &self,
        parts: &[Part],
        attempts: u32,
        urgent: bool,
    ) -> Result<Vec<ObjectCommit>> {
        // Built off the broker's worker threads, and below the produce path unless something
        // waits for it ([`crate::catchup`]); the frames are shared, not copied.
        let backlogged = self.wal_backlogged();
        let block = self.config.block_bytes as usize;
        let stream_object_bytes = self.config.stream_object_bytes;
        let mut sorted: Vec<(u64, Vec<Frame>)> = parts
            .iter()
            .map(|p| (p.stream_id, p.frames.clone()))
            .collect();
        sorted.sort_by_key(|(id, _)| *id);
        let build = move || {
            let mut set = ObjectBuilder::new(block);
            let mut builders = Vec::new();
            for (stream_id, frames) in &sorted {
                if payload_bytes(frames) >= stream_object_bytes {
                    let mut b = ObjectBuilder::new(block);
                    b.add_stream(*stream_id, frames);
                    builders.push(b);
                } else {
                    set.add_stream(*stream_id, frames);
                }
            }
            if !set.is_empty() {
                builders.push(set);
            }
            builders
                .into_iter()
                .map(ObjectBuilder::finish)
                .collect::<Vec<_>>()
        };
        let built = if urgent {
            crate::catchup::compute_now(build).await?
        } else {
            self.catchup.compute(build).await?
        };
        let epochs: HashMap<u64, u64> = parts.iter().map(|p| (p.stream_id, p.epoch)).collect();
        let epochs = &epochs;
        let puts = built
            .into_iter()
            .map(|(data, size, placements)| async move {
                let id = self.prepare_patiently().await?;
                self.put_with_retry(&object_key(id), data, size, attempts, backlogged, urgent)
                    .await?;
                Ok::<_, StorageError>(ObjectCommit {
                    object_id: id,
                    size,
                    ranges: placements
                        .into_iter()
                        .map(|p| RangeCommit {
                            stream_id: p.stream_id,
                            epoch: epochs[&p.stream_id],
                            start_offset: p.start_offset,
                            end_offset: p.end_offset,
                            position: p.position,
                            size: p.size,
                            max_timestamp: p.max_timestamp,
                        })
                        .collect(),
                })
            });
        futures::future::try_join_all(puts).await
    }

    /// Allocates an object id, retrying while the metadata store fails for up to
    /// [`PREPARE_PATIENCE`]. A prepare whose answer was lost leaves an orphan, collected as one.
    async fn prepare_patiently(&self) -> Result<u64> {
        let started = Instant::now();
        let mut delays = STORE_RETRY.delays();
        loop {
            match self.meta.prepare_object(object_key).await {
                Err(e @ MetaError::Backend { .. }) if started.elapsed() < PREPARE_PATIENCE => {
                    tracing::warn!(error = %e, "preparing an object failed; retrying");
                    delays.wait().await;
                }
                r => return Ok(r?),
            }
        }
    }

    /// Whether uploads are behind: the WAL holds more than a quarter of its capacity, or more
    /// than two uploads' worth (`upload_bytes`; at a steady rate it holds about one). Then
    /// uploads ask for throughput over the latency of the WAL's own writes
    /// ([`crate::local::Backlogged`]).
    pub(crate) fn wal_backlogged(&self) -> bool {
        let u = self.wal.usage();
        let behind = (u.capacity / 4).min(self.config.upload_bytes.saturating_mul(2));
        u.capacity > 0 && u.used >= behind
    }

    /// `backlogged`: the WAL waits for this upload ([`Self::wal_backlogged`]); `urgent`:
    /// something waits for it (as for [`Self::put_parts`]).
    pub(crate) async fn put_with_retry(
        &self,
        key: &str,
        data: Vec<Bytes>,
        size: u64,
        attempts: u32,
        backlogged: bool,
        urgent: bool,
    ) -> Result<()> {
        let path = Path::from(key);
        let mut delays = PUT_RETRY.delays();
        let mut attempt = 1;
        let part_bytes = self.config.multipart_part_bytes.max(5 << 20) as usize;
        loop {
            let put = put_object(
                Arc::clone(&self.store),
                path.clone(),
                data.clone(),
                size,
                part_bytes,
                backlogged,
            );
            // A PUT nothing waits for (compaction's, an upload while the WAL has room) runs
            // below the produce path, as catch-up reads do ([`crate::catchup`]): writing a
            // 128 MiB object into a local directory kept a thread busy for 200-400 ms, and
            // appends meanwhile waited 2-8 ms to be scheduled; against S3 the HTTP client's
            // work is the same kind. One producers wait for keeps the broker's priority.
            let put = if urgent {
                put.await
            } else {
                self.catchup.run(async move { Ok(put.await) }).await?
            };
            match put {
                Ok(()) => return Ok(()),
                Err(e) if attempt < attempts => {
                    self.meters.upload_errors.inc();
                    tracing::warn!(key, attempt, error = %e, "object upload failed; retrying");
                    delays.wait().await;
                    attempt += 1;
                }
                Err(e) => {
                    self.meters.upload_errors.inc();
                    return Err(e.into());
                }
            }
        }
    }

    /// Trims the WAL up to the first record any open stream has not committed yet.
    async fn trim_wal(&self) -> Result<()> {
        // Read before the scan: an append that registers after the scan passed its stream got a
        // sequence number at or above this one.
        let mut upto = self.wal.next_seq();
        for s in self.all_streams() {
            if let Some(seq) = s.lock().first_uncommitted_seq() {
                upto = upto.min(seq);
            }
        }
        self.wal.trim(upto).await?;
        Ok(())
    }

    pub async fn upload_loop(self: Arc<Self>) {
        // Appends that wait for WAL room are handed on after every upload; this loop's tick
        // also fails those that waited too long while nothing could be uploaded.
        let mut shutdown = self.shutdown.subscribe();
        let tick = Duration::from_millis(100).min(self.config.upload_interval);
        let mut delays = UPLOAD_LOOP_RETRY.delays();
        loop {
            // A task first polled after close() sent the signal would never see it change.
            if *shutdown.borrow_and_update() {
                return;
            }
            tokio::select! {
                _ = self.upload_wanted.notified() => {}
                _ = tokio::time::sleep(tick) => {}
                _ = shutdown.changed() => return,
            }
            let wal = self.wal.usage();
            let oldest = *self
                .oldest_uncommitted
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.submit_all_waiting();
            let due = self.totals.uncommitted.load(Ordering::Relaxed) >= self.config.upload_bytes
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

/// One PUT, or a multipart upload for objects of more than two parts. Payloads are sliced,
/// not copied, into parts.
async fn put_object(
    store: Arc<dyn object_store::ObjectStore>,
    path: Path,
    data: Vec<Bytes>,
    size: u64,
    part_bytes: usize,
    backlogged: bool,
) -> object_store::Result<()> {
    let mut extensions = object_store::Extensions::new();
    if backlogged {
        extensions.insert(crate::local::Backlogged);
    }
    if size <= 2 * part_bytes as u64 {
        let opts = PutOptions {
            extensions,
            ..Default::default()
        };
        store
            .put_opts(&path, data.iter().cloned().collect::<PutPayload>(), opts)
            .await?;
        return Ok(());
    }
    let opts = PutMultipartOptions {
        extensions,
        ..Default::default()
    };
    let mut upload = store.put_multipart_opts(&path, opts).await?;
    let mut parts = Vec::new();
    let mut chunk: Vec<Bytes> = Vec::new();
    let mut filled = 0usize;
    for b in &data {
        let mut b = b.clone();
        while !b.is_empty() {
            let take = (part_bytes - filled).min(b.len());
            chunk.push(b.split_to(take));
            filled += take;
            if filled == part_bytes {
                parts.push(upload.put_part(std::mem::take(&mut chunk).into_iter().collect()));
                filled = 0;
            }
        }
    }
    if !chunk.is_empty() {
        parts.push(upload.put_part(chunk.into_iter().collect()));
    }
    match futures::future::try_join_all(parts).await {
        Ok(_) => upload.complete().await.map(|_| ()),
        Err(e) => {
            let _ = upload.abort().await;
            Err(e)
        }
    }
}
