//! Compaction: a stream's data scattered over many small ranges (its small slices of stream-set
//! objects, small stream objects) is rewritten into stream objects of up to
//! `compaction_target_bytes`, each step one metadata transaction
//! ([`weir_meta::MetaStore::replace_ranges`]); so a catch-up reader of one partition reads no
//! range smaller than a GET's worth, and the number of objects per partition stays bounded.
//! Ranges of [`LARGE_RANGE_BYTES`] or more stay where they are until their object is sparse
//! (less than half of it still referenced): then they move out too, and the object is deleted
//! (after the grace period) once no range refers to it.
//!
//! [`Compactor::rewrite_stream`] uses the same step to rewrite a stream's frames through a
//! caller's transform (the partition layer's cleaner of compacted topics drops superseded
//! records): each frame keeps its offsets, only its payload shrinks, so the ranges still tile
//! the stream and readers skip the removed offsets.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{MultipartUpload, ObjectStore, ObjectStoreExt, PutPayload};

use weir_meta::{MetaError, ObjectCommit, RangeCommit, RangeInfo};

use tokio::sync::watch;
use weir_meta::MetaStore;

use crate::error::{Result, StorageError};
use crate::format::{Frame, ObjectBuilder};
use crate::objects::Objects;
use crate::objstore::object_key;
use crate::reader::ObjectReader;
use crate::stream::Stream;
use crate::streams::Streams;
use crate::upload::Backlog;
use crate::{StorageConfig, StorageMeters};

/// What [`crate::Engine::rewrite_stream`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rewritten {
    /// Runs of ranges rewritten, each into one object.
    pub runs: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// The end of the last frame rewritten through the transform (0: none): everything
    /// below it went through it.
    pub end: u64,
}

/// Streams compacted at once.
const COMPACTION_CONCURRENCY: usize = 4;

/// Each read of a run being compacted: about this many bytes, in whole GETs (of 8 MiB).
const COMPACTION_READ_BYTES: usize = 8 << 20;

/// How often compaction that yields to uploads looks again.
const YIELD_CHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// Parts of one compaction's upload in flight at once.
const PARTS_IN_FLIGHT: usize = 2;

/// A range this large is left where it is, unless its object is sparse: a consumer's
/// read-ahead fetches it in GETs of up to this size, as many per byte as from any larger
/// object, so rewriting it would cost PUTs and save no GET. At 50 MiB/s on 16 partitions an
/// upload holds 8 MiB of each, and merging those into 256 MiB stream objects cost about 100
/// PUT-class requests per GiB produced, 12 times the uploads' own
/// (`docs/decisions/compaction-leaves-large-ranges.md`).
pub(crate) const LARGE_RANGE_BYTES: u64 = crate::reader::READAHEAD_GET_BYTES;

/// Every this many rounds (5 minutes at the default `maintenance_interval` of 10 s), the first
/// included, compaction looks for sparse objects: one query over the whole object index.
const RECLAIM_ROUNDS: u64 = 30;

/// Ranges of sparse objects looked at per reclaim round.
const SPARSE_LIMIT: usize = 100_000;

/// A range of a sparse object that retention drops within this long stays where it is: with
/// one retention for all topics, the ranges of an object expire within a maintenance round of
/// each other, and moving the last few would cost PUTs for data about to go.
const RECLAIM_HORIZON_MS: i64 = 10 * 60 * 1000;

/// Splits a run of consecutive small ranges so that no range is merged with less than its own
/// size of others: a range merged with a few small new ones would be rewritten whole, again at
/// every round that brings a few more (quadratic: the two-hour soak's brokers compacted 30 GB
/// for 230 MB uploaded). Here a range is rewritten only when the result is at least twice its
/// size, so each byte is rewritten about log2(target / upload) times at most. The largest range
/// of a run that outweighs the rest of it is left out, and the parts on its two sides are
/// split in turn; parts of fewer than two ranges are dropped.
fn tiered(run: Vec<&RangeInfo>) -> Vec<Vec<&RangeInfo>> {
    if run.len() < 2 {
        return Vec::new();
    }
    let total: u64 = run.iter().map(|r| r.size).sum();
    let (largest, size) = run
        .iter()
        .enumerate()
        .map(|(i, r)| (i, r.size))
        .max_by_key(|&(_, size)| size)
        .unwrap_or((0, 0));
    if size <= total - size {
        return vec![run];
    }
    let mut parts = tiered(run[..largest].to_vec());
    parts.extend(tiered(run[largest + 1..].to_vec()));
    parts
}

/// The runs of `ranges` (a stream's, in offset order) to rewrite, each into one object of up to
/// `target` bytes: consecutive small ranges, merged as [`tiered`] allows, and ranges of sparse
/// objects (`moved`), rewritten with the small ranges beside them, alone if need be.
fn runs<'a>(
    ranges: &'a [RangeInfo],
    target: u64,
    small: impl Fn(&RangeInfo) -> bool,
    moved: impl Fn(&RangeInfo) -> bool,
) -> Vec<Vec<&'a RangeInfo>> {
    let mut runs: Vec<Vec<&RangeInfo>> = Vec::new();
    let mut run: Vec<&RangeInfo> = Vec::new();
    let mut bytes = 0;
    let close = |run: Vec<&'a RangeInfo>, runs: &mut Vec<Vec<&'a RangeInfo>>| {
        if run.iter().any(|r| moved(r)) {
            runs.push(run);
        } else {
            runs.extend(tiered(run));
        }
    };
    for r in ranges {
        let movable = small(r) || moved(r);
        if movable && bytes + r.size <= target {
            run.push(r);
            bytes += r.size;
            continue;
        }
        close(std::mem::take(&mut run), &mut runs);
        bytes = 0;
        if movable {
            run.push(r);
            bytes = r.size;
        }
    }
    close(run, &mut runs);
    runs
}

/// A multipart upload fed as the object is built: full parts are uploaded (a few at once)
/// while the next ones are read.
struct PartUpload {
    /// The object being written (prepared in the metadata store).
    id: u64,
    upload: Box<dyn MultipartUpload>,
    /// Bytes not yet in a part.
    pending: Vec<Bytes>,
    pending_len: u64,
    in_flight: VecDeque<tokio::task::JoinHandle<object_store::Result<()>>>,
}

impl PartUpload {
    async fn start(store: &Arc<dyn ObjectStore>, id: u64) -> Result<Self> {
        let upload = store
            .put_multipart(&Path::from(object_key(id)))
            .await
            .map_err(StorageError::Object)?;
        Ok(PartUpload {
            id,
            upload,
            pending: Vec::new(),
            pending_len: 0,
            in_flight: VecDeque::new(),
        })
    }

    /// Adds `len` bytes of the object; uploads what is pending as a part once it reaches
    /// `part_bytes`.
    async fn add(
        &mut self,
        compactor: &Compactor,
        data: Vec<Bytes>,
        len: u64,
        part_bytes: u64,
    ) -> Result<()> {
        self.pending.extend(data);
        self.pending_len += len;
        if self.pending_len >= part_bytes {
            self.send(compactor).await?;
        }
        Ok(())
    }

    /// Uploads what is pending as one part (taken from compaction's budget first), with at
    /// most [`PARTS_IN_FLIGHT`] parts under way.
    async fn send(&mut self, compactor: &Compactor) -> Result<()> {
        if self.pending_len == 0 {
            return Ok(());
        }
        while self.in_flight.len() >= PARTS_IN_FLIGHT {
            self.wait_one().await?;
        }
        compactor.take_background(self.pending_len).await;
        let payload: PutPayload = std::mem::take(&mut self.pending).into_iter().collect();
        self.pending_len = 0;
        // Spawned: an S3 part is a request that only runs while polled.
        self.in_flight
            .push_back(tokio::spawn(self.upload.put_part(payload)));
        Ok(())
    }

    async fn wait_one(&mut self) -> Result<()> {
        let Some(part) = self.in_flight.pop_front() else {
            return Ok(());
        };
        match part.await {
            Ok(r) => r.map_err(StorageError::Object),
            Err(e) => Err(StorageError::Object(object_store::Error::Generic {
                store: "compaction",
                source: Box::new(e),
            })),
        }
    }

    /// Uploads the object's last bytes (`data`, its tail) and completes the upload; the caller
    /// aborts it on failure.
    async fn finish(&mut self, compactor: &Compactor, data: Vec<Bytes>) -> Result<()> {
        let len: u64 = data.iter().map(|d| d.len() as u64).sum();
        self.pending.extend(data);
        self.pending_len += len;
        self.send(compactor).await?;
        while !self.in_flight.is_empty() {
            self.wait_one().await?;
        }
        self.upload.complete().await.map_err(StorageError::Object)?;
        Ok(())
    }

    async fn abort(mut self) {
        for part in self.in_flight.drain(..) {
            part.abort();
        }
        if let Err(e) = self.upload.abort().await {
            tracing::debug!(error = %e, "aborting a compaction's multipart upload failed");
        }
    }
}

/// Compaction's part of the engine: what it reads, writes and yields to.
pub(crate) struct Compactor {
    pub config: StorageConfig,
    pub meta: Arc<dyn MetaStore>,
    pub store: Arc<dyn ObjectStore>,
    pub reader: Arc<ObjectReader>,
    pub streams: Arc<Streams>,
    pub objects: Arc<Objects>,
    /// Compaction yields while uploads are behind.
    pub backlog: Arc<Backlog>,
    pub meters: Arc<StorageMeters>,
    /// True once the engine stops its background work.
    pub stopping: watch::Receiver<bool>,
    /// Rounds of compaction so far (for [`RECLAIM_ROUNDS`]).
    rounds: std::sync::atomic::AtomicU64,
}

impl Compactor {
    pub fn new(shared: &crate::shared::Shared, stopping: watch::Receiver<bool>) -> Compactor {
        Compactor {
            config: shared.config.clone(),
            meta: Arc::clone(&shared.meta),
            store: Arc::clone(&shared.store),
            reader: Arc::clone(&shared.reader),
            streams: Arc::clone(&shared.streams),
            objects: Arc::clone(&shared.objects),
            backlog: Arc::clone(&shared.backlog),
            meters: Arc::clone(&shared.meters),
            stopping,
            rounds: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// At a reclaim round, the objects of each of this broker's streams that are sparse
    /// ([`weir_meta::ObjectIndex::sparse_ranges`]); none at other rounds.
    async fn sparse_objects(&self) -> Result<HashMap<u64, HashSet<u64>>> {
        let mut sparse: HashMap<u64, HashSet<u64>> = HashMap::new();
        if !self
            .rounds
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(RECLAIM_ROUNDS)
        {
            return Ok(sparse);
        }
        // Streams with nothing in objects (an idle cluster's empty partitions) have no range to
        // move: the query, which reads the whole index, is skipped.
        let holds_data = |s: &Arc<Stream>| {
            let st = s.lock();
            st.committed_end() > st.start_offset()
        };
        if !self.streams.all().iter().any(holds_data) {
            return Ok(sparse);
        }
        for (stream_id, object_id) in self.meta.sparse_ranges(SPARSE_LIMIT).await? {
            if self.streams.get(stream_id).is_some() {
                sparse.entry(stream_id).or_default().insert(object_id);
            }
        }
        Ok(sparse)
    }

    fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Returns once the engine stops its background work.
    async fn until_stopping(&self) {
        let mut rx = self.stopping.clone();
        let _ = rx.wait_for(|stopping| *stopping).await;
    }

    /// Compacts every open stream that has enough small ranges; returns the number of objects
    /// written.
    pub async fn compact(&self) -> Result<usize> {
        let mut written = 0;
        let sparse = self.sparse_objects().await?;
        // A few streams at a time: compacting a stream is mostly waiting for GETs of small
        // objects (a stream on the object WAL has a range in every object it wrote to), and one
        // stream after another did not keep up with the object WAL's rate on an S3 server.
        let streams = self.streams.all();
        for chunk in streams.chunks(COMPACTION_CONCURRENCY) {
            if self.is_stopping() {
                break;
            }
            let results = futures::future::join_all(
                chunk
                    .iter()
                    .map(|s| self.compact_stream(s, sparse.get(&s.id))),
            )
            .await;
            for (s, r) in chunk.iter().zip(results) {
                // One stream's trouble (e.g. its topic was just deleted) must not stop the others.
                match r {
                    Ok(n) => written += n,
                    Err(StorageError::Closed) => {}
                    Err(e) => {
                        tracing::warn!(stream_id = s.id, error = %e, "compaction of a stream failed; will retry")
                    }
                }
            }
        }
        Ok(written)
    }

    /// Compacts one stream: its runs of small ranges, and the ranges it has in the `sparse`
    /// objects a reclaim round found, if any.
    async fn compact_stream(&self, s: &Stream, sparse: Option<&HashSet<u64>>) -> Result<usize> {
        let _rewriting = s.rewrite.lock().await;
        let (epoch, start, fenced, committed, retention) = {
            let st = s.lock();
            (
                st.epoch(),
                st.start_offset(),
                st.fenced_by().is_some(),
                st.committed_end(),
                st.retention(),
            )
        };
        let reclaiming = sparse.is_some();
        // Nothing new since the last look, or nothing in the object index at all (a broker
        // that takes over 10,000 empty partitions reads none of their ranges).
        if fenced
            || committed <= start
            || (!reclaiming && s.compaction_looked_at.load(Ordering::Relaxed) == committed)
        {
            return Ok(0);
        }
        let target = self.config.compaction_target_bytes;
        let from = if reclaiming {
            start
        } else {
            start.max(s.compaction_from.load(Ordering::Relaxed))
        };
        let ranges = self.meta.ranges(s.id, from, usize::MAX >> 1).await?;
        let small = |r: &RangeInfo| r.size < (target / 2).min(LARGE_RANGE_BYTES);
        // Every range before the first small one is large, and stays so until a rewrite.
        let first_small = ranges.iter().find(|r| small(r)).map(|r| r.start_offset);
        s.compaction_from
            .store(first_small.unwrap_or(committed), Ordering::Relaxed);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let moved = |r: &RangeInfo| {
            !small(r)
                && 2 * r.size < r.object_size
                && sparse.is_some_and(|o| o.contains(&r.object_id))
                && retention.ms.is_none_or(|ms| {
                    r.max_timestamp.saturating_add(ms as i64) > now_ms + RECLAIM_HORIZON_MS
                })
        };
        let small_count = ranges.iter().filter(|r| small(r)).count();
        if small_count < self.config.compaction_min_ranges && !ranges.iter().any(moved) {
            s.compaction_looked_at.store(committed, Ordering::Relaxed);
            return Ok(0);
        }
        let mut written = 0;
        for run in runs(&ranges, target, small, moved) {
            if self.compact_run(s, epoch, &run).await? {
                written += 1;
            }
        }
        Ok(written)
    }

    /// Rewrites the frames of stream `stream_id` that end at or below `until` through
    /// `transform`, a run of consecutive ranges (up to the compaction target size) at a time,
    /// each run one object and one swap of ranges; frames of those ranges beyond `until` are
    /// copied as they are. A transform keeps each frame's base offset and offset count.
    pub async fn rewrite_stream(
        &self,
        stream_id: u64,
        until: u64,
        transform: &(dyn Fn(&Frame) -> Frame + Sync),
    ) -> Result<Rewritten> {
        let s = self
            .streams
            .get(stream_id)
            .ok_or(StorageError::NotOpen(stream_id))?;
        let _rewriting = s.rewrite.lock().await;
        // A rewrite may shrink ranges below the large size: compaction looks from the start.
        s.compaction_from.store(0, Ordering::Relaxed);
        let (epoch, start, fenced) = {
            let st = s.lock();
            (st.epoch(), st.start_offset(), st.fenced_by().is_some())
        };
        let mut out = Rewritten::default();
        if fenced {
            return Ok(out);
        }
        let target = self.config.compaction_target_bytes;
        let ranges = self.meta.ranges(stream_id, start, usize::MAX >> 1).await?;
        let mut runs: Vec<Vec<&RangeInfo>> = Vec::new();
        let mut run: Vec<&RangeInfo> = Vec::new();
        let mut bytes = 0;
        for r in ranges.iter().take_while(|r| r.start_offset < until) {
            if !run.is_empty() && bytes + r.size > target {
                runs.push(std::mem::take(&mut run));
                bytes = 0;
            }
            bytes += r.size;
            run.push(r);
        }
        if !run.is_empty() {
            runs.push(run);
        }
        let done = std::sync::atomic::AtomicU64::new(0);
        let below = |f: &Frame| {
            if f.end_offset() <= until {
                done.fetch_max(f.end_offset(), Ordering::Relaxed);
                transform(f)
            } else {
                f.clone()
            }
        };
        for run in runs {
            out.bytes_before += run.iter().map(|r| r.size).sum::<u64>();
            let before = done.load(Ordering::Relaxed);
            match self.compact_run_with(&s, epoch, &run, Some(&below)).await? {
                Some(size) => {
                    out.runs += 1;
                    out.bytes_after += size;
                    out.end = done.load(Ordering::Relaxed);
                }
                None => {
                    // Not swapped in: what this run transformed does not count.
                    done.store(before, Ordering::Relaxed);
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Reads the frames of `stream_id` from `start` to `end` into `b`, each through
    /// `transform` if any, a few GETs at a time, handing each piece built to `upload` if any;
    /// whether they were all there, contiguous.
    #[allow(clippy::too_many_arguments)]
    async fn read_run(
        &self,
        stream_id: u64,
        start: u64,
        end: u64,
        transform: Option<&(dyn Fn(&Frame) -> Frame + Sync)>,
        b: &mut ObjectBuilder,
        mut upload: Option<&mut PartUpload>,
        part_bytes: u64,
    ) -> Result<bool> {
        let mut next = start;
        while next < end {
            self.yield_to_uploads().await;
            let got = self
                .reader
                .read(
                    stream_id,
                    next,
                    end,
                    COMPACTION_READ_BYTES,
                    crate::reader::Purpose::Background,
                )
                .await?;
            let contiguous = got.first().is_some_and(|f| f.base_offset == next)
                && got
                    .windows(2)
                    .all(|w| w[0].end_offset() == w[1].base_offset);
            let Some(last) = got.last().filter(|_| contiguous) else {
                return Ok(false);
            };
            next = last.end_offset();
            match transform {
                Some(transform) => {
                    let changed: Vec<Frame> = got
                        .iter()
                        .map(|f| {
                            let t = transform(f);
                            debug_assert!(
                                t.base_offset == f.base_offset && t.record_count == f.record_count,
                                "a rewrite keeps each frame's offsets"
                            );
                            t
                        })
                        .collect();
                    b.extend_stream(stream_id, &changed);
                }
                None => b.extend_stream(stream_id, &got),
            }
            if let Some(u) = upload.as_deref_mut() {
                let (parts, len) = b.take_parts();
                u.add(self, parts, len, part_bytes).await?;
            }
        }
        Ok(next == end)
    }

    /// Reads the run from `start` to `end` of `stream_id` (through `transform`) and writes it as
    /// one object, part by part into `upload` if any, else with one PUT: the object's id, size
    /// and where the run is in it; `None` when the run was not whole.
    #[allow(clippy::too_many_arguments)]
    async fn write_run(
        &self,
        stream_id: u64,
        start: u64,
        end: u64,
        transform: Option<&(dyn Fn(&Frame) -> Frame + Sync)>,
        mut upload: Option<&mut PartUpload>,
        part_bytes: u64,
    ) -> Result<Option<(u64, u64, crate::format::Placement)>> {
        let mut b = ObjectBuilder::new(self.config.block_bytes as usize);
        let whole = self
            .read_run(
                stream_id,
                start,
                end,
                transform,
                &mut b,
                upload.as_deref_mut(),
                part_bytes,
            )
            .await?;
        if !whole {
            return Ok(None);
        }
        let (data, size, placements) = b.finish();
        let p = placements[0];
        debug_assert_eq!((p.start_offset, p.end_offset), (start, end));
        let id = match upload {
            Some(u) => {
                u.finish(self, data).await?;
                u.id
            }
            None => {
                let id = self.meta.prepare_object(object_key).await?;
                self.take_background(size).await;
                self.objects
                    .put_with_retry(
                        &object_key(id),
                        data,
                        size,
                        crate::objects::PUT_ATTEMPTS,
                        false,
                        false,
                    )
                    .await?;
                id
            }
        };
        Ok(Some((id, size, p)))
    }

    /// Takes `bytes` of compaction's bandwidth budget, yielding to consumers reading from
    /// object storage (as its reads do: [`crate::reader::ObjectReader::take_background`]) and
    /// to uploads the WAL waits for.
    async fn take_background(&self, bytes: u64) {
        self.yield_to_uploads().await;
        self.reader.take_background(bytes).await;
    }

    /// Waits while uploads are behind ([`Backlog::is_behind`]) or until the engine
    /// closes: compaction can be done later, the WAL's room cannot, and on one disk its reads
    /// and writes share the device with the uploads'.
    async fn yield_to_uploads(&self) {
        while self.backlog.is_behind() && !self.is_stopping() {
            tokio::time::sleep(YIELD_CHECK).await;
        }
    }

    /// Rewrites the ranges of `run` (consecutive, of one stream) into one stream object.
    async fn compact_run(&self, s: &Stream, epoch: u64, run: &[&RangeInfo]) -> Result<bool> {
        Ok(self.compact_run_with(s, epoch, run, None).await?.is_some())
    }

    /// [`Compactor::compact_run`], each frame through `transform` if any; the new object's
    /// size, or `None` when the ranges changed meanwhile.
    async fn compact_run_with(
        &self,
        s: &Stream,
        epoch: u64,
        run: &[&RangeInfo],
        transform: Option<&(dyn Fn(&Frame) -> Frame + Sync)>,
    ) -> Result<Option<u64>> {
        let (start, end) = (run[0].start_offset, run[run.len() - 1].end_offset);
        let run_bytes: u64 = run.iter().map(|r| r.size).sum();
        let part_bytes = self.config.multipart_part_bytes.max(5 << 20);
        // A run of more than two parts streams: read a few GETs' worth, build its blocks, upload
        // them as a part, drop them. So compaction holds a few parts per stream, not the run
        // twice over (its frames and the object built from them), whatever the target size; a
        // smaller run is one PUT.
        let mut upload = if run_bytes > 2 * part_bytes {
            let id = self.meta.prepare_object(object_key).await?;
            Some(PartUpload::start(&self.store, id).await?)
        } else {
            None
        };
        // Reading and writing the run stops when the engine closes: at the maximum produce rate
        // a round of compaction was tens of seconds of GETs and PUTs, and the shutdown waited
        // for it. What was written is an orphan then, collected as one; the commit below is
        // not cut short.
        let written = tokio::select! {
            w = self.write_run(s.id, start, end, transform, upload.as_mut(), part_bytes) => w,
            _ = self.until_stopping() => Err(StorageError::Closed),
        };
        let (id, size, p) = match written {
            Ok(Some(w)) => w,
            other => {
                if let Some(u) = upload {
                    u.abort().await;
                }
                // None: not whole (retention moved the start meanwhile, or the ranges changed):
                // try again later.
                return other.map(|_| None);
            }
        };
        let commit = ObjectCommit {
            object_id: id,
            size,
            ranges: vec![RangeCommit {
                stream_id: s.id,
                epoch,
                start_offset: start,
                end_offset: end,
                position: p.position,
                size: p.size,
                max_timestamp: p.max_timestamp,
            }],
        };
        match self.meta.replace_ranges(commit).await {
            Ok(()) => {
                self.meters.compactions.inc();
                self.meters.compacted_bytes.add(size);
                tracing::debug!(
                    stream_id = s.id,
                    start,
                    end,
                    replaced = run.len(),
                    "compacted"
                );
                if transform.is_some() {
                    // The log cache holds the frames as they were: readers of these offsets
                    // go to the rewritten object from now on.
                    s.lock().evict_until(end);
                }
                Ok(Some(size))
            }
            // Another writer (retention, a newer leader) changed the ranges, or the new object
            // took so long that orphan collection claimed it: it is an orphan now and is cleaned
            // up as one.
            Err(
                e @ (MetaError::Discontinuity { .. }
                | MetaError::Fenced { .. }
                | MetaError::UnknownObject(_)
                | MetaError::UnknownStream(_)),
            ) => {
                tracing::debug!(stream_id = s.id, error = %e, "compaction lost a race; skipped");
                Ok(None)
            }
            Err(e) => Err(StorageError::Meta(e)),
        }
    }
}
