//! Writing objects: what the uploader, the object WAL, recovery and compaction share. Batches of
//! streams are built into objects in the [`crate::format`] (a stream-set object for small
//! streams, stream objects for large ones), PUT with retries, and their ranges committed to the
//! metadata store in one transaction; the ranges just committed are kept with their streams.
//! Which commits the store refuses because of one stream (fenced, or gone) is decided here too.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, PutMultipartOptions, PutOptions, PutPayload};
use weir_meta::{MetaError, MetaStore, ObjectCommit, RangeCommit, RangeInfo};
use weir_retry::Backoff;

use crate::catchup::CatchupRuntime;
use crate::error::{Result, StorageError};
use crate::format::{Frame, ObjectBuilder};
use crate::objstore::object_key;
use crate::stream::{payload_bytes, Failure, Stream};
use crate::streams::Streams;
use crate::StorageMeters;

/// One stream's data in an upload.
pub struct Part {
    pub stream_id: u64,
    pub epoch: u64,
    pub frames: Vec<Frame>,
}

/// Attempts of a PUT of the uploader and of compaction, whose data is safe meanwhile.
pub const PUT_ATTEMPTS: u32 = 8;

/// How long preparing an object is retried while the metadata store fails (it is down, or the
/// connections it broke when it restarted are still pooled) before the upload fails. For the
/// object WAL a failure fails its producers' appends, which makes them retry and librdkafka bump
/// its producer epoch: worth avoiding for a blip.
const PREPARE_PATIENCE: Duration = Duration::from_secs(10);

/// The delays between those prepares.
const STORE_RETRY: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));

/// The delays between the attempts of one object's PUT.
const PUT_RETRY: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));

/// The sizes objects are built to.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub block_bytes: u64,
    /// A stream with at least this much data gets a stream object of its own.
    pub stream_object_bytes: u64,
    pub multipart_part_bytes: u64,
}

/// The object writer.
pub struct Objects {
    pub store: Arc<dyn ObjectStore>,
    pub meta: Arc<dyn MetaStore>,
    /// Where work nothing waits for runs (below the produce path).
    pub catchup: Arc<CatchupRuntime>,
    pub meters: Arc<StorageMeters>,
    pub sizes: Sizes,
    /// The open streams, for the ranges they keep and the ones a refusal fences or drops.
    pub streams: Arc<Streams>,
}

impl Objects {
    /// A commit the metadata store refused because of one stream: a newer leader fenced it
    /// (its uncommitted data is not ours to keep), someone else committed to it (only a newer
    /// leader can have: it is fenced too), or its topic was deleted (it is dropped). Returns
    /// that stream, for the caller to retry the commit without it; `None` for other errors.
    /// The uploader and the object WAL both commit this way.
    pub fn refused_stream<'a>(
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
                if let Some(s) = self.streams.forget(stream_id) {
                    s.lock().release(Failure::Dropped);
                }
                Some(stream_id)
            }
            _ => None,
        }
    }

    /// Builds objects from `parts` (a stream-set object, and stream objects for large streams),
    /// writes them and commits them in one metadata transaction.
    ///
    /// `backlogged`: the WAL waits for these objects ([`crate::local::Backlogged`]); they are
    /// then also written at the broker's priority.
    pub async fn commit_parts(&self, parts: &[Part], backlogged: bool) -> Result<()> {
        let commits = self
            .put_parts(parts, PUT_ATTEMPTS, backlogged, backlogged)
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
    pub fn remember_ranges(&self, commits: &[ObjectCommit]) {
        for c in commits {
            for r in &c.ranges {
                let Some(s) = self.streams.get(r.stream_id) else {
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
    ///
    /// `backlogged`: uploads are behind the WAL ([`crate::local::Backlogged`]).
    pub async fn put_parts(
        &self,
        parts: &[Part],
        attempts: u32,
        urgent: bool,
        backlogged: bool,
    ) -> Result<Vec<ObjectCommit>> {
        // Built off the broker's worker threads, and below the produce path unless something
        // waits for it ([`crate::catchup`]); the frames are shared, not copied.
        let block = self.sizes.block_bytes as usize;
        let stream_object_bytes = self.sizes.stream_object_bytes;
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
    pub async fn prepare_patiently(&self) -> Result<u64> {
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

    /// Writes one object, retrying up to `attempts` times. `backlogged`: the WAL waits for this
    /// upload; `urgent`: something waits for it (as for [`Self::put_parts`]).
    pub async fn put_with_retry(
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
        let part_bytes = self.sizes.multipart_part_bytes.max(5 << 20) as usize;
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
}

/// The largest object S3 takes in one PUT.
const SINGLE_PUT_MAX_BYTES: u64 = 5 << 30;

/// One PUT, or a multipart upload for an object of more than two parts while uploads are
/// behind the WAL (`backlogged`). The data is in memory either way, and a PUT costs as much as
/// a part: an upload of 128 MiB in 16 MiB parts was 10 requests (start, parts, complete) where
/// one does. Parts in parallel are faster, which matters only while the WAL waits.
/// Payloads are sliced, not copied, into parts.
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
    if size <= 2 * part_bytes as u64 || (!backlogged && size <= SINGLE_PUT_MAX_BYTES) {
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
