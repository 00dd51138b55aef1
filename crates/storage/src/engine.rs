//! The engine: streams on a WAL, a log cache and object storage.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use object_store::ObjectStore;
use tokio::sync::{watch, Notify};
use weir_meta::MetaStore;
use weir_wal::{Wal, WalError, WalRecord};

use crate::config::{Retention, StorageConfig, WalKind};
use crate::error::{Result, StorageError};
use crate::format::Frame;
use crate::objstore::ObjectMeters;
use crate::reader::Purpose;
use crate::stream::{frame, Failure, OutcomeCell, RewindHook, Stream};
use crate::StorageMeters;

/// How a stream is opened.
#[derive(Clone, Default)]
pub struct StreamOptions {
    /// Told whenever the stream rewinds (an append failed and every append from its offset on
    /// is gone), under the stream's lock: the partition layer keeps its producer state in step
    /// with the stream through it.
    pub rewind_hook: Option<RewindHook>,
    /// The WAL its appends go through. An engine without a WAL file puts every stream on the
    /// object WAL.
    pub wal_kind: WalKind,
}

/// What an append got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: u64,
    pub end_offset: u64,
}

/// What a caller appends, decided under the stream's lock once it knows the base offset.
#[derive(Debug, Clone)]
pub struct NewBatch {
    /// Offsets the batch takes, from the base offset on.
    pub record_count: u32,
    pub max_timestamp: i64,
    pub payload: Bytes,
}

/// How long closing a stream keeps retrying failed uploads.
const CLOSE_UPLOAD_PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// The delays between those uploads.
const CLOSE_UPLOAD_RETRY: weir_retry::Backoff = weir_retry::Backoff::new(
    std::time::Duration::from_millis(100),
    std::time::Duration::from_secs(5),
);

/// The outcome of one append, which any number of waiters can share: the request that made it,
/// and retries of it that arrive before it is durable (they must not answer before it does,
/// nor succeed if it fails).
#[derive(Clone)]
pub struct AppendOutcome {
    stream_id: u64,
    epoch: u64,
    cell: Arc<OutcomeCell>,
}

impl AppendOutcome {
    /// Resolves once the append is durable, or fails if it failed (the stream then rewound to
    /// it: nothing of it, and nothing after it, was kept).
    pub async fn wait(self) -> Result<()> {
        match self.cell.wait().await {
            Ok(()) => Ok(()),
            Err(Failure::Wal(e)) => Err(e.into()),
            Err(Failure::Fenced { current }) => Err(StorageError::Fenced {
                stream_id: self.stream_id,
                epoch: self.epoch,
                current,
            }),
            Err(Failure::Dropped) => Err(StorageError::NotOpen(self.stream_id)),
        }
    }
}

/// An append that has its offsets and is on its way to the WAL (or waiting for room in it).
pub struct PendingAppend {
    pub appended: Appended,
    outcome: AppendOutcome,
    started: Instant,
    meters: Arc<StorageMeters>,
}

impl PendingAppend {
    /// Resolves once the batch is durable, or fails if its WAL write failed or it waited for WAL
    /// room longer than `wal_full_wait` (the stream then rewinds to it).
    pub async fn wait(self) -> Result<Appended> {
        self.outcome.wait().await?;
        self.meters.appends.inc();
        self.meters.append_latency.record(self.started.elapsed());
        Ok(self.appended)
    }
}

/// What a read returns: whole batches as they were appended, and the stream's bounds.
#[derive(Debug, Clone)]
pub struct ReadResult {
    pub batches: Vec<Frame>,
    pub start_offset: u64,
    /// One past the last durable offset: readers never see beyond it.
    pub high_watermark: u64,
    /// A read that did not wait stopped at data being fetched from object storage: there is
    /// more before the high watermark than it returned.
    pub incomplete: bool,
    /// Bytes of the GET that such a read started, for a later read to find cached (0 if it
    /// found the data already being fetched).
    pub fetching: u64,
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

/// A stream open on this engine, held by the partition that opened it, which reads its offsets
/// through it rather than by a look-up in the engine's map of streams: a consumer of 10,000
/// partitions names every one of them in every fetch (librdkafka has no fetch sessions).
#[derive(Clone)]
pub struct StreamHandle(Arc<Stream>);

impl StreamHandle {
    /// Its offsets; `None` once the engine has closed or dropped it, as
    /// [`Engine::stream_info`] answers then.
    pub fn info(&self) -> Option<StreamInfo> {
        (!self.0.is_forgotten()).then(|| self.0.info())
    }

    /// A word kept in the cache line of its offsets for the layer above (`u64::MAX` until
    /// stored; see `Stream::aux`).
    pub fn aux(&self) -> &std::sync::atomic::AtomicU64 {
        self.0.aux()
    }

    /// A receiver of its high watermark; `None` once the engine has closed or dropped it.
    pub fn watch_high_watermark(&self) -> Option<watch::Receiver<u64>> {
        (!self.0.is_forgotten()).then(|| self.0.end_tx.subscribe())
    }
}

/// The engine's parts, and what they share. Only `Engine` reaches into it; each part is given
/// what it works with when the engine opens.
struct EngineInner {
    /// What the parts share: settings, stores, reader, open streams, log cache, meters.
    shared: crate::shared::Shared,
    wal: Arc<dyn Wal>,
    /// Whether `wal` is a WAL file; `false` for a broker without a disk, whose streams all go
    /// through the object WAL.
    has_wal_file: bool,
    /// Hands streams' batches to the WAL file or the object WAL.
    intake: Arc<crate::intake::Intake>,
    /// Uploads what the WAL file made durable, and trims it.
    uploader: Arc<crate::upload::Uploader>,
    /// Rewrites streams' small ranges into stream objects, and streams through a transform.
    compactor: Arc<crate::compaction::Compactor>,
    /// Retention, compaction and the deletion of objects, in the background.
    maintenance: Arc<crate::maintenance::Maintenance>,
    shutdown: watch::Sender<bool>,
    /// Set by `stop_background` (the first thing `close` and a broker's shutdown do): background
    /// work that can be done again later (compaction, the cleaner's rewrites) stops at once
    /// instead of holding the shutdown up.
    stopping: watch::Sender<bool>,
    closed: AtomicBool,
}

/// The storage engine. Cheap to clone; all clones share one engine.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
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
        Self::open_inner(config, wal, true, meta, store).await
    }

    /// Opens an engine with no WAL file, for a broker without a disk: every stream goes through
    /// the object WAL, and there is nothing to recover.
    pub async fn open_without_wal(
        config: StorageConfig,
        meta: Arc<dyn MetaStore>,
        store: Arc<dyn ObjectStore>,
    ) -> Result<Engine> {
        Self::open_inner(config, Arc::new(NoWal::default()), false, meta, store).await
    }

    async fn open_inner(
        config: StorageConfig,
        wal: Arc<dyn Wal>,
        has_wal_file: bool,
        meta: Arc<dyn MetaStore>,
        store: Arc<dyn ObjectStore>,
    ) -> Result<Engine> {
        let shared = crate::shared::Shared::new(config, &wal, meta, store)?;
        let upload_wanted = Arc::new(Notify::new());
        let stopping = watch::channel(false).0;
        let compactor = Arc::new(crate::compaction::Compactor::new(
            &shared,
            stopping.subscribe(),
        ));
        let maintenance = Arc::new(crate::maintenance::Maintenance::new(
            &shared,
            Arc::clone(&compactor),
            stopping.subscribe(),
        ));
        let object_wal = Arc::new(crate::object_wal::ObjectWal::new(
            &shared.config,
            Arc::clone(&shared.objects),
            Arc::clone(&shared.log_cache),
            Arc::clone(&shared.backlog),
            Arc::clone(&upload_wanted),
        ));
        let intake = Arc::new(crate::intake::Intake {
            wal_file: crate::durability::WalFile {
                wal: Arc::clone(&wal),
                upload_wanted: Arc::clone(&upload_wanted),
            },
            object_wal,
            streams: Arc::clone(&shared.streams),
            totals: Arc::clone(&shared.log_cache.totals),
            meters: Arc::clone(&shared.meters),
        });
        let uploader = Arc::new(crate::upload::Uploader::new(
            &shared,
            Arc::clone(&wal),
            has_wal_file,
            Arc::clone(&intake),
            upload_wanted,
        ));
        let inner = Arc::new(EngineInner {
            shared,
            wal,
            has_wal_file,
            intake,
            uploader,
            compactor,
            maintenance,
            shutdown: watch::channel(false).0,
            stopping,
            closed: AtomicBool::new(false),
        });
        crate::recovery::recover(
            &*inner.wal,
            &inner.shared.objects,
            inner.wal_backlogged(),
            &inner.shared.meters,
        )
        .await?;
        let engine = Engine {
            tasks: Arc::new(Mutex::new(vec![
                tokio::spawn(Arc::clone(&inner.uploader).run(inner.shutdown.subscribe())),
                tokio::spawn(Arc::clone(&inner.maintenance).run(inner.shutdown.subscribe())),
                tokio::spawn(Arc::clone(&inner.intake.object_wal).run(inner.shutdown.subscribe())),
            ])),
            inner,
        };
        Ok(engine)
    }

    /// Recovers a dead broker's `file` WAL at `path` (the WAL `seal.wal_id`), as the peer
    /// `seal` names: seals it first, so that its owner, if it still runs, acknowledges nothing
    /// written after this point, then reads it. For each stream with data beyond its committed end
    /// written at the stream's current epoch (by the dead leader), raises the epoch by one, so
    /// that a late commit by the old leader is refused, and commits that data at the new epoch.
    /// Nothing of the WAL is trimmed or changed otherwise. Safe to run again (an interrupted
    /// recovery): what was committed is skipped.
    pub async fn recover_peer_wal(
        &self,
        path: &std::path::Path,
        seal: weir_wal::Seal,
    ) -> std::result::Result<crate::PeerRecovery, crate::PeerRecoveryError> {
        let inner = &self.inner;
        inner.check_open()?;
        let backlogged = inner.wal_backlogged();
        crate::recovery::recover_peer(
            path,
            seal,
            &inner.shared.objects,
            backlogged,
            &inner.shared.meters,
        )
        .await
    }

    /// Opens a stream as its leader at `epoch`. A stream already open here at a lower epoch is
    /// flushed to object storage first.
    pub async fn open_stream(&self, stream_id: u64, epoch: u64) -> Result<StreamInfo> {
        self.open_stream_with(stream_id, epoch, StreamOptions::default())
            .await
    }

    /// [`Engine::open_stream`] with options: the WAL kind, and a hook told of rewinds. A stream
    /// already open here at the same epoch keeps the options it was opened with.
    pub async fn open_stream_with(
        &self,
        stream_id: u64,
        epoch: u64,
        options: StreamOptions,
    ) -> Result<StreamInfo> {
        let inner = &self.inner;
        inner.check_open()?;
        if let Some(s) = inner.shared.streams.get(stream_id) {
            let current = s.lock().epoch();
            if current == epoch {
                return Ok(s.info());
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
        let m = inner.shared.meta.open_stream(stream_id, epoch).await?;
        let wal_kind = if inner.has_wal_file {
            options.wal_kind
        } else {
            WalKind::Object
        };
        let s = Arc::new(Stream::new(
            stream_id,
            m.epoch,
            m.start_offset,
            m.end_offset,
            Arc::clone(&inner.shared.log_cache.totals),
            wal_kind,
            options.rewind_hook,
        ));
        let info = s.info();
        if let Some(old) = inner.shared.streams.write().insert(stream_id, s) {
            // Opened twice at once: the first's handles see it gone, as a look-up would.
            old.set_forgotten();
        }
        tracing::debug!(
            stream_id,
            epoch,
            start = m.start_offset,
            end = m.end_offset,
            wal = %wal_kind,
            "stream opened"
        );
        Ok(info)
    }

    /// Moves a stream to another WAL while it takes appends. New appends wait in the stream while
    /// the batches in flight on the old WAL complete; a move to the object WAL also uploads what
    /// the WAL file holds of the stream first, because the object WAL commits ranges directly and
    /// they must continue the committed ones. An engine without a WAL file keeps every stream on
    /// the object WAL.
    pub async fn set_wal_kind(&self, stream_id: u64, kind: WalKind) -> Result<()> {
        let inner = &self.inner;
        let s = inner
            .shared
            .streams
            .get(stream_id)
            .ok_or(StorageError::NotOpen(stream_id))?;
        {
            let mut st = s.lock();
            if st.wal_kind() == kind || !inner.has_wal_file || st.switching() {
                return Ok(());
            }
            st.begin_switch();
        }
        let started = Instant::now();
        let outcome = loop {
            let (in_flight, uncommitted, gone) = {
                let st = s.lock();
                (
                    st.in_flight() > 0,
                    st.committed_end() < st.durable_end(),
                    st.fenced_by().is_some() || st.closing(),
                )
            };
            if gone {
                break Err(StorageError::NotOpen(stream_id));
            }
            if !in_flight && (kind == WalKind::File || !uncommitted) {
                break Ok(());
            }
            if started.elapsed() > inner.shared.config.wal_full_wait {
                break Err(StorageError::Wal(WalError::Resetting));
            }
            if in_flight {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            } else if let Err(e) = inner.uploader.upload_stream(stream_id).await {
                tracing::warn!(stream_id, error = %e, "upload before a WAL switch failed; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        };
        let mut st = s.lock();
        let old = st.wal_kind();
        let kind = if outcome.is_ok() { kind } else { old };
        st.end_switch(kind);
        let submitted = inner.intake.submit_waiting(&s, &mut st);
        st.check_invariants();
        drop(st);
        if outcome.is_ok() {
            tracing::info!(stream_id, from = %old, to = %kind, "stream moved to another WAL");
        }
        outcome.and(submitted)
    }

    /// Stops appends to a stream, uploads what it holds (and nothing of other streams) and
    /// forgets it.
    pub async fn close_stream(&self, stream_id: u64) -> Result<()> {
        let inner = &self.inner;
        let Some(s) = inner.shared.streams.get(stream_id) else {
            return Ok(());
        };
        s.lock().close();
        let started = Instant::now();
        let mut delays = CLOSE_UPLOAD_RETRY.delays();
        // Pending appends complete (or fail) on the WAL thread; wait until none is left.
        loop {
            let (pending, uncommitted) = {
                let st = s.lock();
                (
                    st.next_offset() > st.durable_end(),
                    st.committed_end() < st.durable_end() && st.fenced_by().is_none(),
                )
            };
            if !pending && !uncommitted {
                break;
            }
            if pending {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            } else if let Err(e) = inner.uploader.upload_stream(stream_id).await {
                // The data is safe in the WAL; keep trying for a while before giving up, as
                // an object store that fails now and then should not fail a clean shutdown.
                if !e.is_retriable() || started.elapsed() > CLOSE_UPLOAD_PATIENCE {
                    return Err(e);
                }
                tracing::warn!(stream_id, error = %e, "upload while closing failed; retrying");
                delays.wait().await;
            }
        }
        inner.shared.streams.forget(stream_id);
        s.lock().release(Failure::Dropped);
        Ok(())
    }

    /// Forgets a stream at once, without uploading what it holds: its topic is being deleted.
    /// Appends in flight fail; the WAL is trimmed past its records at the next upload.
    pub fn drop_stream(&self, stream_id: u64) {
        if let Some(s) = self.inner.shared.streams.forget(stream_id) {
            let mut st = s.lock();
            st.close();
            st.release(Failure::Dropped);
            tracing::debug!(stream_id, "stream dropped");
        }
    }

    /// The one append path. Under the stream's lock, `admit` is given the base offset the batch
    /// will get and the outcome it will have, and returns what to append, or `None` to append
    /// nothing. Batches of a stream reach the WAL in the order of these calls: when the WAL has
    /// no room, the batch waits in the stream (and every later batch behind it) until an upload
    /// frees some, or fails after `wal_full_wait`. Returns at once; the [`PendingAppend`]
    /// resolves once the batch is durable.
    ///
    /// `admit` runs under the stream's lock and must not call the engine. The stream's rewind
    /// hook may run inside this call (a synchronous failure) and on the WAL's thread.
    pub fn append_with(
        &self,
        stream_id: u64,
        epoch: u64,
        admit: impl FnOnce(u64, &AppendOutcome) -> Option<NewBatch>,
    ) -> Result<Option<PendingAppend>> {
        let inner = &self.inner;
        inner.check_open()?;
        let s = inner
            .shared
            .streams
            .get(stream_id)
            .ok_or(StorageError::NotOpen(stream_id))?;
        let mut st = s.lock();
        if let Some(current) = st.fenced_by() {
            return Err(StorageError::Fenced {
                stream_id,
                epoch,
                current,
            });
        }
        if st.epoch() != epoch {
            return Err(StorageError::Fenced {
                stream_id,
                epoch,
                current: st.epoch(),
            });
        }
        if st.closing() {
            return Err(StorageError::NotOpen(stream_id));
        }
        let base = st.next_offset();
        let cell = Arc::new(OutcomeCell::default());
        let outcome = AppendOutcome {
            stream_id,
            epoch,
            cell: Arc::clone(&cell),
        };
        let Some(batch) = admit(base, &outcome) else {
            return Ok(None);
        };
        if batch.record_count == 0 {
            // Offsets are what a batch takes; one that takes none cannot be placed.
            return Err(StorageError::EmptyBatch { stream_id });
        }
        let end = base + u64::from(batch.record_count);
        let deadline = Instant::now() + inner.shared.config.wal_full_wait;
        let was_idle = inner
            .shared
            .log_cache
            .totals
            .uncommitted
            .load(Ordering::Relaxed)
            == 0;
        let id = st.push(
            frame(base, batch.record_count, batch.max_timestamp, batch.payload),
            cell,
            deadline,
        );
        let submitted = inner.intake.submit_waiting(&s, &mut st);
        st.check_invariants();
        let kept = st.holds_last(base, id);
        drop(st);
        if !kept {
            // Failed at once (the WAL refused it): the caller hears it now.
            return Err(submitted.err().unwrap_or(StorageError::NotOpen(stream_id)));
        }
        inner.uploader.arrived(was_idle);
        // Data arriving between uploads must not come on top of the log cache's budget.
        inner.shared.log_cache.evict();
        Ok(Some(PendingAppend {
            appended: Appended {
                base_offset: base,
                end_offset: end,
            },
            outcome,
            started: Instant::now(),
            meters: Arc::clone(&inner.shared.meters),
        }))
    }

    /// Appends one batch of `record_count` offsets, whose payload `build` makes for the base
    /// offset it gets, and waits until it is durable: [`Engine::append_with`] for callers that
    /// have nothing to decide under the stream's lock.
    pub async fn append(
        &self,
        stream_id: u64,
        epoch: u64,
        record_count: u32,
        max_timestamp: i64,
        build: impl FnOnce(u64) -> Bytes,
    ) -> Result<Appended> {
        let pending = self.append_with(stream_id, epoch, |base, _| {
            Some(NewBatch {
                record_count,
                max_timestamp,
                payload: build(base),
            })
        })?;
        match pending {
            Some(p) => p.wait().await,
            None => Err(StorageError::NotOpen(stream_id)),
        }
    }

    /// Reads whole batches from `from`, up to about `max_bytes` (at least one batch if any):
    /// the broker's own reads (a producer state rebuilt, the cleaner's key map), which read
    /// from objects without the read-ahead of consumers ([`Engine::read_with`]).
    pub async fn read(&self, stream_id: u64, from: u64, max_bytes: usize) -> Result<ReadResult> {
        self.read_for(stream_id, from, max_bytes, true, Purpose::Lookup)
            .await
    }

    /// A consumer's read ([`Engine::read`] with read-ahead); unless `wait`, a read from object storage returns what is cached (in
    /// the log cache or the block cache), maybe nothing, instead of waiting for a GET: the GET
    /// is started, so that a later read finds the data. A fetch of many partitions answers with
    /// those that are ready rather than wait for the slowest.
    pub async fn read_with(
        &self,
        stream_id: u64,
        from: u64,
        max_bytes: usize,
        wait: bool,
    ) -> Result<ReadResult> {
        self.read_for(stream_id, from, max_bytes, wait, Purpose::Fetch)
            .await
    }

    async fn read_for(
        &self,
        stream_id: u64,
        from: u64,
        max_bytes: usize,
        wait: bool,
        purpose: Purpose,
    ) -> Result<ReadResult> {
        let inner = &self.inner;
        let s = inner
            .shared
            .streams
            .get(stream_id)
            .ok_or(StorageError::NotOpen(stream_id))?;
        let (start, hw, committed) = {
            let st = s.lock();
            if from < st.start_offset() || from > st.durable_end() {
                return Err(StorageError::OffsetOutOfRange {
                    stream_id,
                    offset: from,
                    start: st.start_offset(),
                    end: st.durable_end(),
                });
            }
            if let Some(batches) = st.read_cached(from, max_bytes) {
                inner.shared.meters.log_cache_hits.inc();
                return Ok(ReadResult {
                    batches,
                    start_offset: st.start_offset(),
                    high_watermark: st.durable_end(),
                    incomplete: false,
                    fetching: 0,
                });
            }
            // Objects are read up to where the log cache starts (it may hold data that is also
            // in objects): neither the read nor its read-ahead fetch what the cache has.
            let objects_until = st
                .cache_start()
                .map_or(st.committed_end(), |c| c.min(st.committed_end()));
            (st.start_offset(), st.durable_end(), objects_until)
        };
        inner.shared.meters.log_cache_misses.inc();
        let reader = inner.shared.reader.clone();
        let read = async move {
            reader
                .read_with(stream_id, from, committed, max_bytes, &[], purpose, wait)
                .await
        };
        let reading = if purpose == Purpose::Fetch {
            inner.shared.catchup.run(read).await?
        } else {
            read.await?
        };
        let (incomplete, fetching) = (reading.incomplete, reading.fetching);
        let mut batches = reading.frames;
        let got: usize = batches.iter().map(|b| b.payload.len()).sum();
        let next = batches.last().map_or(from, |b| b.end_offset());
        if !incomplete && next >= committed && got < max_bytes {
            // Caught up with the objects: go on from the cache.
            if let Some(more) = s.lock().read_cached(next, max_bytes - got) {
                let mut bytes = got;
                for f in more {
                    if bytes > 0 && bytes + f.payload.len() > max_bytes {
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
            incomplete,
            fetching,
        })
    }

    /// The first batch at or after the start offset whose max timestamp is at least `timestamp`
    /// (ListOffsets by time); `None` if every batch is older.
    pub async fn find_by_timestamp(&self, stream_id: u64, timestamp: i64) -> Result<Option<Frame>> {
        let inner = &self.inner;
        let s = inner
            .shared
            .streams
            .get(stream_id)
            .ok_or(StorageError::NotOpen(stream_id))?;
        let (start, committed) = {
            let st = s.lock();
            (st.start_offset(), st.committed_end())
        };
        // Ranges carry their max timestamp, so whole ranges are skipped without reading them.
        let mut from = start;
        while from < committed {
            let ranges = inner.shared.meta.ranges(stream_id, from, 64).await?;
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
                    .shared
                    .reader
                    .read(stream_id, next, r.end_offset, 1 << 20, Purpose::Lookup)
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
        let from = committed.max(st.start_offset());
        let found = st
            .durable_from(from)
            .find(|f| f.max_timestamp >= timestamp && f.end_offset() > from)
            .cloned();
        Ok(found)
    }

    /// The largest max timestamp of any batch from the start offset on (ListOffsets
    /// MAX_TIMESTAMP); the batch holding it is then found with [`Engine::find_by_timestamp`].
    pub async fn max_timestamp(&self, stream_id: u64) -> Result<Option<i64>> {
        let inner = &self.inner;
        let s = inner
            .shared
            .streams
            .get(stream_id)
            .ok_or(StorageError::NotOpen(stream_id))?;
        let (start, committed) = {
            let st = s.lock();
            (st.start_offset(), st.committed_end())
        };
        let mut max: Option<i64> = None;
        let mut from = start;
        while from < committed {
            let ranges = inner.shared.meta.ranges(stream_id, from, 1024).await?;
            let Some(last) = ranges.last() else { break };
            from = last.end_offset;
            for r in &ranges {
                max = Some(max.map_or(r.max_timestamp, |m| m.max(r.max_timestamp)));
            }
        }
        let st = s.lock();
        for f in st.durable_from(committed.max(st.start_offset())) {
            max = Some(max.map_or(f.max_timestamp, |m| m.max(f.max_timestamp)));
        }
        Ok(max)
    }

    /// A handle on the stream, if it is open here: its offsets without a look-up by id.
    pub fn stream_handle(&self, stream_id: u64) -> Option<StreamHandle> {
        self.inner.shared.streams.get(stream_id).map(StreamHandle)
    }

    /// The stream's offsets, if it is open here.
    pub fn stream_info(&self, stream_id: u64) -> Option<StreamInfo> {
        self.inner.shared.streams.get(stream_id).map(|s| s.info())
    }

    /// A receiver of the end of what the stream has in object storage, for a leader that feeds
    /// brokers serving the stream in other zones.
    pub fn watch_committed(&self, stream_id: u64) -> Option<watch::Receiver<u64>> {
        self.inner
            .shared
            .streams
            .get(stream_id)
            .map(|s| s.committed_tx.subscribe())
    }

    /// Frames of any stream, open here or not, from `from` up to `until` (an end the stream's
    /// leader says is committed), up to about `max_bytes` (at least one frame if any): what a
    /// broker serving the stream in another zone than its leader's reads. Only object storage
    /// is read.
    ///
    /// `known` are ranges of the stream its leader fed (its recent index): where they cover
    /// the read, the metadata store is not asked. A read through them that fails (compaction
    /// replaced an object and it is gone) is done again through the metadata store.
    pub async fn read_objects(
        &self,
        stream_id: u64,
        from: u64,
        until: u64,
        max_bytes: usize,
        known: &[weir_meta::RangeInfo],
    ) -> Result<Vec<Frame>> {
        if from >= until {
            return Ok(Vec::new());
        }
        let reader = self.inner.shared.reader.clone();
        let known = known.to_vec();
        let read = async move {
            if !known.is_empty() {
                match reader
                    .read_with(
                        stream_id,
                        from,
                        until,
                        max_bytes,
                        &known,
                        Purpose::Fetch,
                        true,
                    )
                    .await
                {
                    Ok(r) => return Ok(r.frames),
                    Err(e) => {
                        tracing::debug!(stream_id, error = %e, "a read through fed ranges failed; reading through the metadata store");
                    }
                }
            }
            reader
                .read(stream_id, from, until, max_bytes, Purpose::Fetch)
                .await
        };
        self.inner.shared.catchup.run(read).await
    }

    /// The ranges committed for a stream led here that end after `from`, oldest first, as far
    /// as the stream remembers them (its recent index): what its leader feeds to brokers that
    /// serve it in other zones.
    pub fn ranges_since(&self, stream_id: u64, from: u64) -> Vec<weir_meta::RangeInfo> {
        let Some(s) = self.inner.shared.streams.get(stream_id) else {
            return Vec::new();
        };
        let recent = s.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent
            .iter()
            .filter(|r| r.end_offset > from)
            .cloned()
            .collect()
    }

    /// Uploads the durable data of these streams now (one upload for all of them).
    pub async fn flush_streams(&self, stream_ids: &[u64]) -> Result<()> {
        let Some((&first, rest)) = stream_ids.split_first() else {
            return Ok(());
        };
        self.inner.uploader.flush_later(rest);
        self.inner.uploader.upload_stream(first).await
    }

    /// Moves the start offset forward (DeleteRecords); never beyond the high watermark.
    pub async fn trim(&self, stream_id: u64, start_offset: u64) -> Result<u64> {
        let s = self
            .inner
            .shared
            .streams
            .get(stream_id)
            .ok_or(StorageError::NotOpen(stream_id))?;
        {
            let st = s.lock();
            if start_offset > st.durable_end() {
                return Err(StorageError::OffsetOutOfRange {
                    stream_id,
                    offset: start_offset,
                    start: st.start_offset(),
                    end: st.durable_end(),
                });
            }
        }
        crate::maintenance::trim_stream(&*self.inner.shared.meta, &s, start_offset).await
    }

    /// The open stream `stream_id`.
    fn opened(&self, stream_id: u64) -> Result<Arc<Stream>> {
        self.inner
            .shared
            .streams
            .get(stream_id)
            .ok_or(StorageError::NotOpen(stream_id))
    }

    /// Keeps retention from moving the stream's start offset past `hold` (`None`: no hold);
    /// DeleteRecords is not held.
    pub fn set_retention_hold(&self, stream_id: u64, hold: Option<u64>) -> Result<()> {
        self.opened(stream_id)?.lock().set_retention_hold(hold);
        Ok(())
    }

    /// The stream's retention hold (`None` also for a stream not open here).
    pub fn retention_hold(&self, stream_id: u64) -> Option<u64> {
        self.opened(stream_id).ok()?.lock().retention_hold()
    }

    pub fn set_retention(&self, stream_id: u64, retention: Retention) -> Result<()> {
        self.opened(stream_id)?.lock().set_retention(retention);
        Ok(())
    }

    /// Uploads everything durable now, and trims the WAL.
    pub async fn flush(&self) -> Result<()> {
        self.inner.uploader.upload().await
    }

    /// Uploads one stream's durable data now (and nothing of other streams), while it keeps
    /// taking appends.
    pub async fn flush_stream(&self, stream_id: u64) -> Result<()> {
        self.inner.uploader.upload_stream(stream_id).await
    }

    /// Rewrites the stream's frames that end at or below `until` through `transform` (the
    /// cleaner of compacted topics), a run of ranges at a time (see `compaction.rs`).
    pub async fn rewrite_stream(
        &self,
        stream_id: u64,
        until: u64,
        transform: &(dyn Fn(&Frame) -> Frame + Sync),
    ) -> Result<crate::compaction::Rewritten> {
        self.inner
            .compactor
            .rewrite_stream(stream_id, until, transform)
            .await
    }

    /// Compacts every open stream that needs it now, as the maintenance task does; returns the
    /// number of objects written.
    pub async fn compact(&self) -> Result<usize> {
        self.inner.compactor.compact().await
    }

    /// Runs retention and deletes what has become deletable now, as the maintenance task does.
    pub async fn run_maintenance(&self) -> Result<()> {
        self.inner.maintenance.maintain().await
    }

    /// Stops background work that can be done again later (compaction, the rewrites of the
    /// cleaner of compacted topics) at once: a run under way aborts its upload and fails with
    /// [`StorageError::Closed`]. Appends, uploads and reads go on; `close` calls it first.
    pub fn stop_background(&self) {
        self.inner.stopping.send_replace(true);
    }

    /// Whether [`Engine::stop_background`] (or `close`) was called.
    pub fn is_stopping(&self) -> bool {
        self.inner.is_stopping()
    }

    /// Closes every stream (uploading what they hold), stops the background tasks and the WAL.
    pub async fn close(&self) -> Result<()> {
        self.stop_background();
        let ids: Vec<u64> = self.inner.shared.streams.read().keys().copied().collect();
        // One upload for every stream first: closing them one by one would write an object per
        // stream. What is still in flight now is uploaded per stream below.
        for s in self.inner.shared.streams.all() {
            s.lock().close();
        }
        if let Err(e) = self.inner.uploader.upload().await {
            tracing::warn!(error = %e, "upload while closing failed; retrying per stream");
        }
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
        &self.inner.shared.meters
    }

    /// The object store as the engine uses it (its requests counted in the engine's meters),
    /// for other writers of objects (zone routing's hand-off objects).
    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        Arc::clone(&self.inner.shared.store)
    }

    pub fn object_meters(&self) -> &ObjectMeters {
        &self.inner.shared.object_meters
    }

    pub fn wal(&self) -> &Arc<dyn Wal> {
        &self.inner.wal
    }

    /// Bytes of payload in the log cache.
    pub fn log_cache_bytes(&self) -> u64 {
        self.inner
            .shared
            .log_cache
            .totals
            .cached
            .load(Ordering::Relaxed)
    }

    /// Declares the meters of the engine, its WAL and its object store.
    pub fn register_meters(&self, r: &mut weir_metrics::Registry) {
        weir_wal::WalMeters::register(self.wal(), r);
        self.meters().register(r);
        let engine = self.clone();
        r.gauge_read("log_cache_bytes", "Bytes in the log cache.", move || {
            engine.log_cache_bytes()
        });
        self.object_meters().register(r);
    }
}

impl EngineInner {
    pub fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            Err(StorageError::Closed)
        } else {
            Ok(())
        }
    }

    /// Whether uploads are behind ([`crate::upload::Backlog::is_behind`]).
    pub(crate) fn wal_backlogged(&self) -> bool {
        self.shared.backlog.is_behind()
    }
}

/// The WAL of an engine without a WAL file: it holds nothing and takes nothing (the engine puts
/// every stream on the object WAL, so nothing is ever offered to it).
#[derive(Default)]
struct NoWal {
    meters: weir_wal::WalMeters,
}

#[async_trait::async_trait]
impl Wal for NoWal {
    fn append(
        &self,
        _: WalRecord,
        _: weir_wal::Completion,
    ) -> std::result::Result<weir_wal::Seq, WalError> {
        Err(WalError::Invalid {
            path: "(none)".into(),
            reason: "this broker has no WAL file (wal.kind = \"object\")".into(),
        })
    }

    fn next_seq(&self) -> weir_wal::Seq {
        0
    }

    async fn trim(&self, _: weir_wal::Seq) -> std::result::Result<(), WalError> {
        Ok(())
    }

    async fn wait_for_space(&self, timeout: std::time::Duration) {
        tokio::time::sleep(timeout).await;
    }

    fn take_recovered(&self) -> Vec<weir_wal::RecoveredRecord> {
        Vec::new()
    }

    fn usage(&self) -> weir_wal::WalUsage {
        weir_wal::WalUsage {
            capacity: 0,
            used: 0,
        }
    }

    fn meters(&self) -> &weir_wal::WalMeters {
        &self.meters
    }

    async fn close(&self) {}
}
