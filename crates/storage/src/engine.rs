//! The engine: streams on a WAL, a log cache and object storage.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use bytes::Bytes;
use object_store::ObjectStore;
use tokio::sync::{oneshot, watch, Notify};
use weir_meta::MetaStore;
use weir_wal::{Wal, WalError, WalRecord};

use crate::config::{Retention, StorageConfig};
use crate::error::{Result, StorageError};
use crate::format::Frame;
use crate::objstore::{MeteredStore, ObjectMeters};
use crate::reader::ObjectReader;
use crate::stream::{frame, CachedBatch, Stream};
use crate::StorageMeters;

/// What an append got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: u64,
    pub end_offset: u64,
}

/// How long closing a stream keeps retrying failed uploads.
const CLOSE_UPLOAD_PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// An append that has its offsets and is on its way to the WAL.
pub struct PendingAppend {
    pub appended: Appended,
    started: Instant,
    rx: oneshot::Receiver<Result<(), WalError>>,
    meters: Arc<StorageMeters>,
}

impl PendingAppend {
    /// Resolves once the batch is durable, or fails if its WAL write failed (the stream then
    /// rewinds to its last durable offset).
    pub async fn wait(self) -> Result<Appended> {
        match self.rx.await {
            Ok(Ok(())) => {
                self.meters.appends.inc();
                self.meters.append_latency.record(self.started.elapsed());
                Ok(self.appended)
            }
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(StorageError::Closed),
        }
    }
}

/// What a read returns: whole batches as they were appended, and the stream's bounds.
#[derive(Debug, Clone)]
pub struct ReadResult {
    pub batches: Vec<Frame>,
    pub start_offset: u64,
    /// One past the last durable offset: readers never see beyond it.
    pub high_watermark: u64,
}

/// A stream's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamInfo {
    pub epoch: u64,
    pub start_offset: u64,
    pub high_watermark: u64,
    /// One past the last offset in object storage.
    pub committed_end: u64,
}

pub(crate) struct EngineInner {
    pub config: StorageConfig,
    pub wal: Arc<dyn Wal>,
    pub meta: Arc<dyn MetaStore>,
    pub store: Arc<dyn ObjectStore>,
    pub reader: ObjectReader,
    pub streams: RwLock<HashMap<u64, Arc<Stream>>>,
    pub meters: Arc<StorageMeters>,
    pub object_meters: Arc<ObjectMeters>,
    /// Bytes of payload in the log cache, all streams.
    pub cached_bytes: AtomicU64,
    /// Durable or pending bytes not yet in object storage, all streams.
    pub uncommitted_bytes: AtomicU64,
    /// When the oldest data not yet uploaded arrived (`None` when there is none).
    pub oldest_uncommitted: Mutex<Option<Instant>>,
    /// Committed batches in commit order, oldest first: what the log cache evicts.
    pub evictable: Mutex<VecDeque<(u64, u64)>>,
    /// Serialises uploads, so that each stream's ranges are committed in order.
    pub upload_lock: tokio::sync::Mutex<()>,
    pub upload_wanted: Notify,
    /// Bandwidth budget of compaction.
    pub background: crate::budget::Budget,
    pub shutdown: watch::Sender<bool>,
    pub closed: AtomicBool,
}

/// The storage engine. Cheap to clone; all clones share one engine.
#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<EngineInner>,
    tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Engine {
    /// Opens the engine: recovers what the WAL holds, uploads it, and starts the uploader and the
    /// maintenance task. Streams are opened separately, by their leader.
    pub async fn open(
        config: StorageConfig,
        wal: Arc<dyn Wal>,
        meta: Arc<dyn MetaStore>,
        store: Arc<dyn ObjectStore>,
    ) -> Result<Engine> {
        let metered = MeteredStore::new(store);
        let object_meters = metered.meters();
        let store: Arc<dyn ObjectStore> = Arc::new(metered);
        let meters = Arc::new(StorageMeters::default());
        let reader = ObjectReader::new(
            Arc::clone(&store),
            Arc::clone(&meta),
            Arc::clone(&meters),
            config.block_bytes,
            config.block_cache_bytes,
            config.readahead_max_bytes,
            crate::budget::Budget::new(config.catchup_bytes_per_sec),
        );
        let background = crate::budget::Budget::new(config.background_bytes_per_sec);
        let inner = Arc::new(EngineInner {
            config,
            wal,
            meta,
            store,
            reader,
            streams: RwLock::new(HashMap::new()),
            meters,
            object_meters,
            cached_bytes: AtomicU64::new(0),
            uncommitted_bytes: AtomicU64::new(0),
            oldest_uncommitted: Mutex::new(None),
            evictable: Mutex::new(VecDeque::new()),
            upload_lock: tokio::sync::Mutex::new(()),
            upload_wanted: Notify::new(),
            background,
            shutdown: watch::channel(false).0,
            closed: AtomicBool::new(false),
        });
        inner.recover().await?;
        let engine = Engine {
            tasks: Arc::new(Mutex::new(vec![
                tokio::spawn(Arc::clone(&inner).upload_loop()),
                tokio::spawn(Arc::clone(&inner).maintenance_loop()),
            ])),
            inner,
        };
        Ok(engine)
    }

    /// Opens a stream as its leader at `epoch`. A stream already open here at a lower epoch is
    /// flushed to object storage first.
    pub async fn open_stream(&self, stream_id: u64, epoch: u64) -> Result<StreamInfo> {
        let inner = &self.inner;
        inner.check_open()?;
        if let Some(s) = inner.stream(stream_id) {
            let current = s.lock().epoch;
            if current == epoch {
                return Ok(inner.info(&s));
            }
            if current > epoch {
                return Err(StorageError::Fenced {
                    stream_id,
                    epoch,
                    current,
                });
            }
            self.close_stream(stream_id).await?;
        }
        let m = inner.meta.open_stream(stream_id, epoch).await?;
        let s = Arc::new(Stream::new(
            stream_id,
            m.epoch,
            m.start_offset,
            m.end_offset,
        ));
        let info = inner.info(&s);
        inner.streams_write().insert(stream_id, s);
        tracing::debug!(
            stream_id,
            epoch,
            start = m.start_offset,
            end = m.end_offset,
            "stream opened"
        );
        Ok(info)
    }

    /// Stops appends to a stream, uploads what it holds and forgets it.
    pub async fn close_stream(&self, stream_id: u64) -> Result<()> {
        let inner = &self.inner;
        let Some(s) = inner.stream(stream_id) else {
            return Ok(());
        };
        s.lock().closing = true;
        let started = Instant::now();
        let mut backoff = std::time::Duration::from_millis(100);
        // Pending appends complete (or fail) on the WAL thread; wait until none is left.
        loop {
            let (pending, uncommitted) = {
                let st = s.lock();
                (
                    st.next_offset > st.durable_end,
                    st.committed_end < st.durable_end && st.fenced_by.is_none(),
                )
            };
            if !pending && !uncommitted {
                break;
            }
            if pending {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            } else if let Err(e) = inner.upload().await {
                // The data is safe in the WAL; keep trying for a while before giving up, as
                // an object store that fails now and then should not fail a clean shutdown.
                if !e.is_retriable() || started.elapsed() > CLOSE_UPLOAD_PATIENCE {
                    return Err(e);
                }
                tracing::warn!(stream_id, error = %e, "upload while closing failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
            }
        }
        inner.streams_write().remove(&stream_id);
        let freed = s.lock().cached_bytes;
        inner.cached_bytes.fetch_sub(freed, Ordering::Relaxed);
        Ok(())
    }

    /// Appends one batch of `record_count` records. `build` makes the payload for the base offset
    /// the batch gets (the Kafka layer writes it into the batch header); it may be called again
    /// if the append has to wait for WAL space. Returns once the batch is durable.
    pub async fn append(
        &self,
        stream_id: u64,
        epoch: u64,
        record_count: u32,
        max_timestamp: i64,
        mut build: impl FnMut(u64) -> Bytes,
    ) -> Result<Appended> {
        let deadline = Instant::now() + self.inner.config.wal_full_wait;
        loop {
            match self.try_append(stream_id, epoch, record_count, max_timestamp, &mut build) {
                Ok(pending) => return pending.wait().await,
                Err(StorageError::Wal(WalError::Full { .. })) if Instant::now() < deadline => {
                    self.wait_for_wal_space(deadline).await;
                }
                Err(e) => {
                    if matches!(e, StorageError::Wal(WalError::Full { .. })) {
                        self.inner.meters.wal_full_failures.inc();
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Assigns the batch its offsets and hands it to the WAL, without waiting: appends to one
    /// stream are ordered by the calls to this function. The returned [`PendingAppend`] resolves
    /// once the batch is durable. Fails at once with [`WalError::Full`] when the WAL has no
    /// room; see [`Engine::wait_for_wal_space`].
    pub fn try_append(
        &self,
        stream_id: u64,
        epoch: u64,
        record_count: u32,
        max_timestamp: i64,
        build: impl FnOnce(u64) -> Bytes,
    ) -> Result<PendingAppend> {
        let inner = &self.inner;
        inner.check_open()?;
        debug_assert!(record_count > 0, "empty batch");
        let s = inner
            .stream(stream_id)
            .ok_or(StorageError::NotOpen(stream_id))?;
        let mut st = s.lock();
        if let Some(current) = st.fenced_by {
            return Err(StorageError::Fenced {
                stream_id,
                epoch,
                current,
            });
        }
        if st.epoch != epoch {
            return Err(StorageError::Fenced {
                stream_id,
                epoch,
                current: st.epoch,
            });
        }
        if st.closing {
            return Err(StorageError::NotOpen(stream_id));
        }
        let base = st.next_offset;
        let end = base + u64::from(record_count);
        let payload = build(base);
        let record = WalRecord {
            stream_id,
            epoch,
            base_offset: base,
            record_count,
            max_timestamp,
            payload: payload.clone(),
        };
        let (tx, rx) = oneshot::channel();
        let done = completion(Arc::clone(inner), Arc::clone(&s), base, end, tx);
        let seq = inner.wal.append(record, done)?;
        let len = payload.len() as u64;
        st.next_offset = end;
        st.cached_bytes += len;
        st.batches.push_back(CachedBatch {
            frame: frame(base, record_count, max_timestamp, payload),
            seq,
        });
        st.check_invariants();
        drop(st);
        inner.cached_bytes.fetch_add(len, Ordering::Relaxed);
        if inner.uncommitted_bytes.fetch_add(len, Ordering::Relaxed) == 0 {
            let mut oldest = inner
                .oldest_uncommitted
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            oldest.get_or_insert_with(Instant::now);
        }
        inner.maybe_wake_uploader();
        Ok(PendingAppend {
            appended: Appended {
                base_offset: base,
                end_offset: end,
            },
            started: Instant::now(),
            rx,
            meters: Arc::clone(&inner.meters),
        })
    }

    /// Waits (until `deadline` at most) for the WAL to have room, asking the uploader to hurry.
    pub async fn wait_for_wal_space(&self, deadline: Instant) {
        self.inner.upload_wanted.notify_one();
        self.inner
            .wal
            .wait_for_space(deadline.saturating_duration_since(Instant::now()))
            .await;
    }

    /// Reads whole batches from `from`, up to about `max_bytes` (at least one batch if any).
    pub async fn read(&self, stream_id: u64, from: u64, max_bytes: usize) -> Result<ReadResult> {
        let inner = &self.inner;
        let s = inner
            .stream(stream_id)
            .ok_or(StorageError::NotOpen(stream_id))?;
        let (start, hw, committed) = {
            let st = s.lock();
            if from < st.start_offset || from > st.durable_end {
                return Err(StorageError::OffsetOutOfRange {
                    stream_id,
                    offset: from,
                    start: st.start_offset,
                    end: st.durable_end,
                });
            }
            if let Some(batches) = st.read_cached(from, max_bytes) {
                inner.meters.log_cache_hits.inc();
                return Ok(ReadResult {
                    batches,
                    start_offset: st.start_offset,
                    high_watermark: st.durable_end,
                });
            }
            (st.start_offset, st.durable_end, st.committed_end)
        };
        inner.meters.log_cache_misses.inc();
        let mut batches = inner
            .reader
            .read(stream_id, from, committed, max_bytes)
            .await?;
        let got: usize = batches.iter().map(|b| b.payload.len()).sum();
        let next = batches.last().map_or(from, |b| b.end_offset());
        if next >= committed && got < max_bytes {
            // Caught up with the objects: go on from the cache.
            if let Some(more) = s.lock().read_cached(next, max_bytes - got) {
                let mut bytes = got;
                for f in more {
                    if !batches.is_empty() && bytes + f.payload.len() > max_bytes {
                        break;
                    }
                    bytes += f.payload.len();
                    batches.push(f);
                }
            }
        }
        Ok(ReadResult {
            batches,
            start_offset: start,
            high_watermark: hw,
        })
    }

    /// The first batch at or after the start offset whose max timestamp is at least `timestamp`
    /// (ListOffsets by time); `None` if every batch is older.
    pub async fn find_by_timestamp(&self, stream_id: u64, timestamp: i64) -> Result<Option<Frame>> {
        let inner = &self.inner;
        let s = inner
            .stream(stream_id)
            .ok_or(StorageError::NotOpen(stream_id))?;
        let (start, committed) = {
            let st = s.lock();
            (st.start_offset, st.committed_end)
        };
        // Ranges carry their max timestamp, so whole ranges are skipped without reading them.
        let mut from = start;
        while from < committed {
            let ranges = inner.meta.ranges(stream_id, from, 64).await?;
            let Some(r) = ranges.iter().find(|r| r.max_timestamp >= timestamp) else {
                match ranges.last() {
                    Some(last) => {
                        from = last.end_offset;
                        continue;
                    }
                    None => break,
                }
            };
            let mut next = from.max(r.start_offset);
            while next < r.end_offset {
                let frames = inner
                    .reader
                    .read(stream_id, next, r.end_offset, 1 << 20)
                    .await?;
                let Some(last) = frames.last() else { break };
                next = last.end_offset();
                if let Some(f) = frames
                    .into_iter()
                    .find(|f| f.max_timestamp >= timestamp && f.end_offset() > start)
                {
                    return Ok(Some(f));
                }
            }
            from = r.end_offset;
        }
        let st = s.lock();
        let i = st
            .batches
            .partition_point(|b| b.end_offset() <= committed.max(st.start_offset));
        Ok(st
            .batches
            .range(i..)
            .take_while(|b| b.end_offset() <= st.durable_end)
            .find(|b| b.frame.max_timestamp >= timestamp)
            .map(|b| b.frame.clone()))
    }

    /// The largest max timestamp of any batch from the start offset on (ListOffsets
    /// MAX_TIMESTAMP); the batch holding it is then found with [`Engine::find_by_timestamp`].
    pub async fn max_timestamp(&self, stream_id: u64) -> Result<Option<i64>> {
        let inner = &self.inner;
        let s = inner
            .stream(stream_id)
            .ok_or(StorageError::NotOpen(stream_id))?;
        let (start, committed) = {
            let st = s.lock();
            (st.start_offset, st.committed_end)
        };
        let mut max: Option<i64> = None;
        let mut from = start;
        while from < committed {
            let ranges = inner.meta.ranges(stream_id, from, 1024).await?;
            let Some(last) = ranges.last() else { break };
            from = last.end_offset;
            for r in &ranges {
                max = Some(max.map_or(r.max_timestamp, |m| m.max(r.max_timestamp)));
            }
        }
        let st = s.lock();
        let i = st
            .batches
            .partition_point(|b| b.end_offset() <= committed.max(st.start_offset));
        for b in st
            .batches
            .range(i..)
            .take_while(|b| b.end_offset() <= st.durable_end)
        {
            max = Some(max.map_or(b.frame.max_timestamp, |m| m.max(b.frame.max_timestamp)));
        }
        Ok(max)
    }

    /// The stream's offsets, if it is open here.
    pub fn stream_info(&self, stream_id: u64) -> Option<StreamInfo> {
        self.inner.stream(stream_id).map(|s| self.inner.info(&s))
    }

    /// A receiver of the stream's high watermark, for readers that wait for new data.
    pub fn watch_high_watermark(&self, stream_id: u64) -> Option<watch::Receiver<u64>> {
        self.inner.stream(stream_id).map(|s| s.end_tx.subscribe())
    }

    /// Moves the start offset forward (DeleteRecords); never beyond the high watermark.
    pub async fn trim(&self, stream_id: u64, start_offset: u64) -> Result<u64> {
        let s = self
            .inner
            .stream(stream_id)
            .ok_or(StorageError::NotOpen(stream_id))?;
        {
            let st = s.lock();
            if start_offset > st.durable_end {
                return Err(StorageError::OffsetOutOfRange {
                    stream_id,
                    offset: start_offset,
                    start: st.start_offset,
                    end: st.durable_end,
                });
            }
        }
        self.inner.trim_stream(&s, start_offset).await
    }

    pub fn set_retention(&self, stream_id: u64, retention: Retention) -> Result<()> {
        let s = self
            .inner
            .stream(stream_id)
            .ok_or(StorageError::NotOpen(stream_id))?;
        s.lock().retention = retention;
        Ok(())
    }

    /// Uploads everything durable now, and trims the WAL.
    pub async fn flush(&self) -> Result<()> {
        self.inner.upload().await
    }

    /// Compacts every open stream that needs it now, as the maintenance task does; returns the
    /// number of objects written.
    pub async fn compact(&self) -> Result<usize> {
        self.inner.compact().await
    }

    /// Runs retention and deletes what has become deletable now, as the maintenance task does.
    pub async fn run_maintenance(&self) -> Result<()> {
        self.inner.maintain().await
    }

    /// Closes every stream (uploading what they hold), stops the background tasks and the WAL.
    pub async fn close(&self) -> Result<()> {
        let ids: Vec<u64> = self.inner.streams_read().keys().copied().collect();
        let mut result = Ok(());
        for id in ids {
            if let Err(e) = self.close_stream(id).await {
                tracing::error!(stream_id = id, error = %e, "could not upload a stream while closing");
                result = Err(e);
            }
        }
        self.inner.closed.store(true, Ordering::SeqCst);
        self.inner.shutdown.send_replace(true);
        let tasks: Vec<_> =
            std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in tasks {
            let _ = t.await;
        }
        self.inner.wal.close().await;
        result
    }

    pub fn meters(&self) -> &StorageMeters {
        &self.inner.meters
    }

    pub fn object_meters(&self) -> &ObjectMeters {
        &self.inner.object_meters
    }

    pub fn wal(&self) -> &Arc<dyn Wal> {
        &self.inner.wal
    }

    /// Bytes of payload in the log cache.
    pub fn log_cache_bytes(&self) -> u64 {
        self.inner.cached_bytes.load(Ordering::Relaxed)
    }
}

/// What the WAL thread runs when a batch is durable or failed: advance the stream in WAL order.
fn completion(
    inner: Arc<EngineInner>,
    s: Arc<Stream>,
    base: u64,
    end: u64,
    tx: oneshot::Sender<Result<(), WalError>>,
) -> weir_wal::Completion {
    Box::new(move |res| {
        let res = res.map(|_| ());
        {
            let mut st = s.lock();
            match &res {
                Ok(()) => {
                    debug_assert_eq!(
                        st.durable_end, base,
                        "stream {} completes out of order",
                        s.id
                    );
                    st.durable_end = end;
                    s.end_tx.send_replace(end);
                }
                Err(e) => {
                    // Later pending batches of this stream fail too (the WAL fails everything
                    // queued behind a failed write); the first failure rewinds the stream.
                    if st.next_offset > base {
                        tracing::warn!(stream_id = s.id, offset = base, error = %e, "append failed; stream rewinds to its last durable offset");
                        let freed = st.truncate_pending(base);
                        inner.cached_bytes.fetch_sub(freed, Ordering::Relaxed);
                        inner.uncommitted_bytes.fetch_sub(freed, Ordering::Relaxed);
                    }
                }
            }
            st.check_invariants();
        }
        let _ = tx.send(res);
    })
}

impl EngineInner {
    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            Err(StorageError::Closed)
        } else {
            Ok(())
        }
    }

    pub fn streams_read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<u64, Arc<Stream>>> {
        self.streams.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn streams_write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<u64, Arc<Stream>>> {
        self.streams.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn stream(&self, id: u64) -> Option<Arc<Stream>> {
        self.streams_read().get(&id).cloned()
    }

    pub fn all_streams(&self) -> Vec<Arc<Stream>> {
        let mut v: Vec<_> = self.streams_read().values().cloned().collect();
        v.sort_by_key(|s| s.id);
        v
    }

    fn info(&self, s: &Stream) -> StreamInfo {
        let st = s.lock();
        StreamInfo {
            epoch: st.epoch,
            start_offset: st.start_offset,
            high_watermark: st.durable_end,
            committed_end: st.committed_end,
        }
    }

    fn maybe_wake_uploader(&self) {
        let wal = self.wal.usage();
        if self.uncommitted_bytes.load(Ordering::Relaxed) >= self.config.upload_bytes
            || wal.used * 2 >= wal.capacity
        {
            self.upload_wanted.notify_one();
        }
    }

    /// Evicts the oldest committed batches while the log cache is over its budget.
    pub fn evict(&self) {
        let budget = self.config.log_cache_bytes + self.uncommitted_bytes.load(Ordering::Relaxed);
        while self.cached_bytes.load(Ordering::Relaxed) > budget {
            let next = self
                .evictable
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front();
            let Some((stream_id, upto)) = next else { break };
            if let Some(s) = self.stream(stream_id) {
                let freed = s.lock().evict_until(upto);
                self.cached_bytes.fetch_sub(freed, Ordering::Relaxed);
                self.meters.log_cache_evicted_bytes.add(freed);
            }
        }
    }
}
