//! The `file://` object store: `object_store`'s `LocalFileSystem`, with reads and writes of our
//! own.
//!
//! A local object is the only copy of its data once the WAL is trimmed past it, so a write must
//! reach the disk before it returns. Writing a whole object into the page cache and syncing it at
//! the end would hand the disk tens of MiB at once, and the WAL's small synced writes, on the same
//! disk, would queue behind them: that was most of the produce tail latency. So an object is
//! written in small steps, each handed to the disk once the one before it is written. Several
//! uploads run at once (parts of a multipart upload, compaction beside the uploader), so the
//! steps in the device queue are also bounded for the whole process ([`WRITEBACK_STEPS`]): with
//! two steps per upload and four uploads, 8 MiB could sit ahead of a WAL write, tens of
//! milliseconds on the bench machine's disk. Then `fdatasync`, rename into place, and a sync of
//! the directory.
//!
//! With direct I/O on, and where the filesystem allows it, steps are written with `O_DIRECT` from
//! an aligned buffer ([`DIRECT_STEP`] each): no copy into the page cache (a third of the broker's
//! CPU at its maximum produce rate) and no dirty pages for the kernel to write back in bursts;
//! the broker's own caches (log cache, block cache) hold what readers need. Elsewhere (tmpfs) steps go through
//! the page cache, each handed to the disk with `sync_file_range`. Reads of objects are direct
//! too, in chunks of [`READ_CHUNK`] with at most [`READ_CHUNKS`] in the device queue: a catch-up
//! reader asks for its whole read-ahead window at once, and the WAL's writes would wait behind it.
//! Direct I/O is off by default and `object_store.local_direct_io` turns it on: measured on the
//! bench machine it cut the produce tail at a steady rate and the CPU per byte, but a catch-up
//! then reads from the disk (348 MiB/s against 411 from the page cache).
//!
//! An upload the WAL waits for ([`Backlogged`], set by the uploader when the WAL fills) is
//! written directly whatever that setting says, in larger steps ([`DIRECT_STEP_BACKLOGGED`];
//! [`STEP_BACKLOGGED`] where the filesystem refuses `O_DIRECT`): at the maximum produce rate the
//! copy into the page cache was two thirds of the broker's CPU and the uploads fell behind, the
//! WAL filled, and the log cache with it. Data written then is read from the disk by a later
//! catch-up, the price of keeping up.
//!
//! A multipart upload writes each part into a staging file as it is put, at the part's place
//! (parts are put in their order in the object, so each one's offset is known then), paced the
//! same way; completion syncs and renames it. Holding the parts until completion would keep a
//! whole compacted object in memory (up to `compaction_target_bytes` per stream being compacted)
//! while the engine streams it out part by part. Lists, deletes, copies and the checks of a GET
//! (preconditions, range) are `LocalFileSystem`'s, with its `fsync` on.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, UploadPart,
};
use weir_wal::{AlignedBuf, BLOCK};

/// Bytes written before the previous step must be on the disk.
const STEP: usize = 1 << 20;

/// Bytes of one step of an upload that is behind ([`Backlogged`]), through the page cache: where
/// the filesystem refuses `O_DIRECT`, since such an upload is otherwise direct. With 1 MiB
/// steps, at the maximum produce rate (`weir perf --partitions 16 --rate 0`, about 350 MiB/s
/// here) the uploads wrote 236 MB/s, each object of about 60 MB took 1.2 s to put, and the WAL
/// filled (2 GiB, and the log cache with it, which holds what is not uploaded: RSS 2.5 GiB);
/// with 8 MiB steps 376 MiB/s was produced, puts took 0.45 s and the WAL held 300-700 MiB (RSS
/// under 1 GiB). The WAL's writes wait behind two of them then (16 MiB, 8 ms on that
/// disk), but producers are waiting for WAL room already.
const STEP_BACKLOGGED: usize = 8 << 20;

/// Bytes of one direct write. A WAL write queued behind two of them waits for 256 KiB of object
/// data; with 1 MiB steps, ProducerPerformance at 30,000 records/s of 1 KiB measured a p99 of
/// 290-299 ms against 180-185 with these, and 256 KiB 183-245 (the disk takes 128 KiB direct
/// writes at 400 MB/s, more than the broker produces).
const DIRECT_STEP: usize = 128 << 10;

/// Bytes of one direct write of an upload that is behind ([`Backlogged`]). At the maximum produce
/// rate, with 128 KiB steps the uploads fell behind the WAL (which filled, 2 GiB, and the log
/// cache with it: RSS 3.2 GiB); with 1 MiB steps the WAL held 289-561 MiB (RSS 1.3 GiB).
const DIRECT_STEP_BACKLOGGED: usize = 1 << 20;

/// A hint in a put's extensions (`PutOptions::extensions`, `PutMultipartOptions::extensions`):
/// the data waits for this upload (the WAL is filling), so its steps are larger, which lets the
/// disk take more object bytes per step at the cost of the latency of the WAL's writes queued
/// behind one. Stores other than this one ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backlogged;

/// Bytes of one step of a put, through the page cache and direct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Steps {
    buffered: usize,
    direct: usize,
}

/// Whether a put with these extensions is one the WAL waits for.
fn backlogged(extensions: &object_store::Extensions) -> bool {
    extensions.get::<Backlogged>().is_some()
}

/// The steps of a put with these extensions.
fn steps(extensions: &object_store::Extensions) -> Steps {
    if backlogged(extensions) {
        Steps {
            buffered: STEP_BACKLOGGED,
            direct: DIRECT_STEP_BACKLOGGED,
        }
    } else {
        Steps {
            buffered: STEP,
            direct: DIRECT_STEP,
        }
    }
}

/// Steps handed to the disk and not yet known written, over every upload of the process.
const WRITEBACK_STEPS: usize = 2;

/// The process-wide count of steps in the device queue (see the module doc).
struct Writeback {
    state: std::sync::Mutex<WritebackState>,
    freed: std::sync::Condvar,
    /// Operations in the device queue at most.
    bound: usize,
}

struct WritebackState {
    in_flight: usize,
    /// The most ever in flight at once (for the tests).
    peak: usize,
}

static WRITEBACK: Writeback = Writeback::new(WRITEBACK_STEPS);

impl Writeback {
    const fn new(bound: usize) -> Writeback {
        Writeback {
            state: std::sync::Mutex::new(WritebackState {
                in_flight: 0,
                peak: 0,
            }),
            freed: std::sync::Condvar::new(),
            bound,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WritebackState> {
        // Nothing is left half-done under this lock: a poisoned one is still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until a step may be handed to the disk. A caller holds at most one permit and
    /// never waits for one while holding another, so waiting always ends.
    fn acquire(&'static self) -> WritebackPermit {
        let mut st = self.lock();
        while st.in_flight >= self.bound {
            st = self.freed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.in_flight += 1;
        st.peak = st.peak.max(st.in_flight);
        debug_assert!(st.in_flight <= self.bound);
        WritebackPermit(self)
    }
}

/// One step's place in the device queue, given back when dropped.
struct WritebackPermit(&'static Writeback);

impl Drop for WritebackPermit {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        debug_assert!(
            st.in_flight > 0,
            "more writeback permits given back than taken"
        );
        st.in_flight = st.in_flight.saturating_sub(1);
        drop(st);
        self.0.freed.notify_one();
    }
}

/// See the module doc.
#[derive(Debug)]
pub struct LocalStore {
    inner: Arc<LocalFileSystem>,
    /// Objects written and read with `O_DIRECT` where the filesystem allows it.
    direct_io: bool,
}

/// Makes staging names unique within the process; the pid makes them unique across restarts
/// sharing the directory.
static STAGING: AtomicU64 = AtomicU64::new(0);

impl LocalStore {
    pub fn new(root: &str) -> object_store::Result<LocalStore> {
        Ok(LocalStore {
            inner: Arc::new(LocalFileSystem::new_with_prefix(root)?.with_fsync(true)),
            direct_io: false,
        })
    }

    /// Turns `O_DIRECT` on (off by default; see the module doc).
    pub fn with_direct_io(mut self, direct_io: bool) -> LocalStore {
        self.direct_io = direct_io;
        self
    }
}

/// A staging path next to `dest`. `LocalFileSystem` hides names ending in `#` and digits from
/// listings, so a write cut short by a crash is not seen as an object; its own multipart uploads
/// use the same convention.
fn staging_path(dest: &std::path::Path) -> PathBuf {
    let n = STAGING.fetch_add(1, Ordering::Relaxed);
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(format!("#{}{n:06}", std::process::id()));
    dest.with_file_name(name)
}

/// Writes `payload` as the object at `location`, paced and synced (see the module doc).
async fn write(
    inner: &LocalFileSystem,
    location: &Path,
    payload: Vec<Bytes>,
    direct_io: bool,
    steps: Steps,
) -> object_store::Result<PutResult> {
    let dest = inner.path_to_filesystem(location)?;
    let staging = staging_path(&dest);
    blocking(location.as_ref(), move || {
        or_remove(
            &staging,
            write_paced(&dest, &staging, &payload, direct_io, steps).map(drop),
        )
    })
    .await?;
    Ok(written())
}

/// Runs `f` on a blocking thread; its error, or the thread's, as one of writing `location`.
async fn blocking<T: Send + 'static>(
    location: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> object_store::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| generic(location, e.to_string()))?
        .map_err(|e| generic(location, e.to_string()))
}

/// `r`, the outcome of writing `staging`, with the staging file removed if it failed.
fn or_remove(staging: &std::path::Path, r: std::io::Result<()>) -> std::io::Result<()> {
    if r.is_err() {
        let _ = std::fs::remove_file(staging);
    }
    r
}

fn written() -> PutResult {
    PutResult {
        e_tag: None,
        version: None,
        extensions: Default::default(),
    }
}

fn generic(location: &str, msg: String) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalStore",
        source: format!("{location}: {msg}").into(),
    }
}

/// Writes `payload` into `staging` in `steps`, direct if asked for and allowed, and moves it to
/// `dest`. Returns the number of steps handed to the disk (see [`Pacer::finish`]).
fn write_paced(
    dest: &std::path::Path,
    staging: &std::path::Path,
    payload: &[Bytes],
    direct_io: bool,
    steps: Steps,
) -> std::io::Result<usize> {
    let (file, direct_file) = create_staging(dest, staging, direct_io)?;
    let mut pacer = Pacer::new(&file, direct_file.as_ref(), steps, 0);
    for buf in payload {
        pacer.write(buf)?;
    }
    let writes = pacer.finish()?;
    drop(direct_file);
    finish_staging(file, dest, staging)?;
    Ok(writes)
}

/// Adds `context` to an I/O error's message.
fn ctx(what: &'static str) -> impl Fn(std::io::Error) -> std::io::Error {
    move |e: std::io::Error| std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Creates `dest`'s directory if needed (synced into its parent) and the staging file; also
/// opens it for direct writes where the filesystem allows them.
fn create_staging(
    dest: &std::path::Path,
    staging: &std::path::Path,
    direct_io: bool,
) -> std::io::Result<(std::fs::File, Option<std::fs::File>)> {
    let parent = dest
        .parent()
        .ok_or_else(|| std::io::Error::other("object path has no parent"))?;
    if !parent.exists() {
        std::fs::create_dir_all(parent).map_err(ctx("creating its directory"))?;
        if let Some(grandparent) = parent.parent() {
            sync_dir(grandparent).map_err(ctx("syncing the directory"))?;
        }
    }
    let file = std::fs::File::create(staging).map_err(ctx("creating"))?;
    let direct = if direct_io {
        open_direct(staging)
    } else {
        None
    };
    Ok((file, direct))
}

/// `path` opened with `O_DIRECT` for writing, or `None` where the filesystem refuses it.
fn open_direct(path: &std::path::Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok()
}

/// Turns `O_DIRECT` on for an open descriptor of our own; false where the filesystem refuses it.
fn set_direct(file: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: plain syscalls on a valid descriptor.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_DIRECT) == 0
    }
}

/// Bytes of one direct read of an object; at most [`READ_CHUNKS`] are in the device queue at
/// once over the process. The catch-up from `file://` (1.95 GiB of backlog, by hand) read at
/// 386-416 MiB/s with 4 MiB chunks against 327-376 with 1 MiB (through the page cache, 370-411).
const READ_CHUNK: usize = 4 << 20;
const READ_CHUNKS: usize = 2;

/// The process-wide count of direct reads in the device queue: catch-up reads asked for many
/// MiB at once (a reader's whole read-ahead window), and the WAL's small synced writes waited
/// behind them.
static READS: Writeback = Writeback::new(READ_CHUNKS);

/// Reads `range` of `file` (opened with `O_DIRECT`) in chunks of [`READ_CHUNK`], into an
/// aligned buffer that the returned bytes keep.
fn read_direct(file: &std::fs::File, range: std::ops::Range<u64>) -> std::io::Result<Bytes> {
    use std::os::unix::fs::FileExt;
    let start = range.start / BLOCK * BLOCK;
    let len = usize::try_from(range.end.div_ceil(BLOCK) * BLOCK - start)
        .map_err(|_| std::io::Error::other("range too large"))?;
    let mut buf = AlignedBuf::zeroed(len);
    let mut done = 0usize;
    while start + (done as u64) < range.end {
        let n = READ_CHUNK.min(len - done);
        let permit = READS.acquire();
        let got = file.read_at(&mut buf[done..done + n], start + done as u64);
        drop(permit);
        match got.map_err(ctx("reading"))? {
            0 => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "object shorter than the range read",
                ))
            }
            got => done += got,
        }
    }
    let from = (range.start - start) as usize;
    let to = (range.end - start) as usize;
    Ok(Bytes::from_owner(buf).slice(from..to))
}

/// Aligned step buffers of direct writes (each of the larger step, [`DIRECT_STEP_BACKLOGGED`]),
/// kept for the next upload instead of allocated (and zeroed by the kernel) for each.
static STEP_BUFFERS: std::sync::Mutex<Vec<AlignedBuf>> = std::sync::Mutex::new(Vec::new());

/// Step buffers kept at most: one per upload or part being written at once, commonly.
const STEP_BUFFERS_KEPT: usize = 8;

/// A step's bytes gathered for one direct write.
struct DirectSteps<'a> {
    file: &'a std::fs::File,
    /// Bytes of one write.
    step: usize,
    buf: Option<AlignedBuf>,
    /// Bytes of `buf` filled.
    fill: usize,
    /// Direct writes made.
    writes: usize,
}

impl DirectSteps<'_> {
    fn buf(&mut self) -> &mut AlignedBuf {
        self.buf.get_or_insert_with(|| {
            let kept = STEP_BUFFERS.lock().unwrap_or_else(|e| e.into_inner()).pop();
            kept.unwrap_or_else(|| AlignedBuf::zeroed(DIRECT_STEP_BACKLOGGED))
        })
    }

    /// Writes the first `len` bytes of the buffer at `start`, holding a [`WRITEBACK`] permit
    /// while the disk takes them, and keeps the rest at the buffer's start.
    fn write_out(&mut self, start: u64, len: usize) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        debug_assert!(
            start.is_multiple_of(BLOCK) && (len as u64).is_multiple_of(BLOCK) && len <= self.fill
        );
        let fill = self.fill;
        let file = self.file;
        let buf = self.buf();
        let permit = WRITEBACK.acquire();
        let written = file.write_all_at(&buf[..len], start);
        drop(permit);
        written.map_err(ctx("writing"))?;
        buf.copy_within(len..fill, 0);
        self.fill -= len;
        self.writes += 1;
        Ok(())
    }
}

impl Drop for DirectSteps<'_> {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            let mut kept = STEP_BUFFERS.lock().unwrap_or_else(|e| e.into_inner());
            if kept.len() < STEP_BUFFERS_KEPT {
                kept.push(buf);
            }
        }
    }
}

/// Writes consecutive buffers from an offset on, each step ([`STEP`], or [`STEP_BACKLOGGED`])
/// handed to the disk once the one before it is written (steps run across buffers: many small
/// ones make few steps).
///
/// With a direct handle, each step is gathered into an aligned buffer and written with
/// `O_DIRECT`: the bytes go from that buffer to the disk without a copy into the page cache
/// (which cost the broker about a third of its CPU at its maximum produce rate) and without
/// dirty pages that the kernel writes back in bursts. A part that starts or ends inside a block
/// writes those partial blocks through the page cache; the file's sync covers both.
struct Pacer<'a> {
    file: &'a std::fs::File,
    /// Where the next byte goes.
    at: u64,
    /// Bytes written since the last step was handed to the disk.
    unflushed: usize,
    /// Bytes of one step through the page cache.
    step: usize,
    /// Steps handed to the disk through the page cache.
    handed: usize,
    /// The step in the device queue and its [`WRITEBACK`] permit. The last one is synced by
    /// whoever completes the file (or the file is removed); dropping the pacer gives it back.
    previous: Option<((u64, u64), WritebackPermit)>,
    direct: Option<DirectSteps<'a>>,
}

impl<'a> Pacer<'a> {
    /// `direct`: the file opened for direct writes, if it may be.
    fn new(
        file: &'a std::fs::File,
        direct: Option<&'a std::fs::File>,
        steps: Steps,
        at: u64,
    ) -> Self {
        debug_assert!(steps.buffered > 0);
        Pacer {
            file,
            at,
            unflushed: 0,
            step: steps.buffered,
            handed: 0,
            previous: None,
            direct: direct.map(|file| {
                let step = steps.direct;
                debug_assert!(
                    step > 0
                        && step <= DIRECT_STEP_BACKLOGGED
                        && (step as u64).is_multiple_of(BLOCK)
                );
                DirectSteps {
                    file,
                    step,
                    buf: None,
                    fill: 0,
                    writes: 0,
                }
            }),
        }
    }

    fn write(&mut self, mut buf: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let Some(d) = self.direct.as_mut() else {
            return self.write_buffered(buf);
        };
        while !buf.is_empty() {
            let misaligned = (self.at % BLOCK) as usize;
            if d.fill == 0 && misaligned != 0 {
                // A part that starts inside a block: up to the block's end through the page
                // cache, from there on aligned.
                let n = (BLOCK as usize - misaligned).min(buf.len());
                self.file
                    .write_all_at(&buf[..n], self.at)
                    .map_err(ctx("writing"))?;
                self.at += n as u64;
                buf = &buf[n..];
                continue;
            }
            let n = (d.step - d.fill).min(buf.len());
            let fill = d.fill;
            d.buf()[fill..fill + n].copy_from_slice(&buf[..n]);
            d.fill += n;
            self.at += n as u64;
            buf = &buf[n..];
            if d.fill == d.step {
                d.write_out(self.at - d.step as u64, d.step)?;
            }
        }
        Ok(())
    }

    /// Writes what is gathered and not written yet; the file's sync makes it durable. Returns
    /// the number of direct writes made, or without them the steps handed to the disk through
    /// the page cache (the last, partial one is left to the sync).
    fn finish(mut self) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let Some(d) = self.direct.as_mut() else {
            return Ok(self.handed);
        };
        let start = self.at - d.fill as u64;
        let aligned = d.fill / BLOCK as usize * BLOCK as usize;
        if aligned > 0 {
            d.write_out(start, aligned)?;
        }
        if d.fill > 0 {
            // The object's last partial block goes through the page cache.
            let fill = d.fill;
            let tail = &d.buf()[..fill];
            self.file
                .write_all_at(tail, start + aligned as u64)
                .map_err(ctx("writing"))?;
            d.fill = 0;
        }
        Ok(d.writes)
    }

    fn write_buffered(&mut self, mut buf: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        while !buf.is_empty() {
            let n = (self.step - self.unflushed).min(buf.len());
            self.file
                .write_all_at(&buf[..n], self.at)
                .map_err(ctx("writing"))?;
            buf = &buf[n..];
            self.at += n as u64;
            self.unflushed += n;
            if self.unflushed == self.step {
                let step = (self.at - self.step as u64, self.step as u64);
                // Our own step written first and its permit released; only then a permit for
                // the next (never waiting for a permit while holding one).
                if let Some((p, permit)) = self.previous.take() {
                    let written = wait_written(self.file, p);
                    drop(permit);
                    written.map_err(ctx("writing back"))?;
                }
                let permit = WRITEBACK.acquire();
                start_writeback(self.file, step).map_err(ctx("writing back"))?;
                self.previous = Some((step, permit));
                self.unflushed = 0;
                self.handed += 1;
            }
        }
        Ok(())
    }
}

/// Syncs the staging file, renames it to `dest` and syncs the directory.
fn finish_staging(
    file: std::fs::File,
    dest: &std::path::Path,
    staging: &std::path::Path,
) -> std::io::Result<()> {
    file.sync_data().map_err(ctx("syncing"))?;
    drop(file);
    std::fs::rename(staging, dest).map_err(ctx("renaming into place"))?;
    let parent = dest
        .parent()
        .ok_or_else(|| std::io::Error::other("object path has no parent"))?;
    sync_dir(parent).map_err(ctx("syncing the directory"))
}

fn file_range((off, len): (u64, u64)) -> (libc::off64_t, libc::off64_t) {
    (
        libc::off64_t::try_from(off).unwrap_or(libc::off64_t::MAX),
        libc::off64_t::try_from(len).unwrap_or(0),
    )
}

/// Starts write-back of `step`.
fn start_writeback(file: &std::fs::File, step: (u64, u64)) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (off, len) = file_range(step);
    // SAFETY: a plain syscall on a valid descriptor.
    if unsafe { libc::sync_file_range(file.as_raw_fd(), off, len, libc::SYNC_FILE_RANGE_WRITE) }
        != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Waits until `step` is written.
fn wait_written(file: &std::fs::File, step: (u64, u64)) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (off, len) = file_range(step);
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: a plain syscall on a valid descriptor.
    if unsafe { libc::sync_file_range(file.as_raw_fd(), off, len, flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn sync_dir(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

impl fmt::Display for LocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Local({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for LocalStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        // The engine only overwrites; conditional puts keep `LocalFileSystem`'s semantics.
        if !matches!(opts.mode, PutMode::Overwrite) || !opts.attributes.is_empty() {
            return self.inner.put_opts(location, payload, opts).await;
        }
        let steps = steps(&opts.extensions);
        let direct_io = self.direct_io || backlogged(&opts.extensions);
        let payload = payload.into_iter().collect();
        write(&self.inner, location, payload, direct_io, steps).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        if !opts.attributes.is_empty() {
            return self.inner.put_multipart_opts(location, opts).await;
        }
        let dest = self.inner.path_to_filesystem(location)?;
        let staging = staging_path(&dest);
        let name = location.to_string();
        let (file, direct) = {
            let (dest, staging) = (dest.clone(), staging.clone());
            let direct_io = self.direct_io || backlogged(&opts.extensions);
            blocking(&name, move || create_staging(&dest, &staging, direct_io)).await?
        };
        Ok(Box::new(LocalUpload {
            location: name,
            dest,
            staging,
            file: Some(Arc::new(file)),
            direct: direct.map(Arc::new),
            steps: steps(&opts.extensions),
            len: 0,
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        // `LocalFileSystem` checks the preconditions and the range and opens the file; the bytes
        // are then read directly where the filesystem allows it (see the module doc).
        let head = options.head;
        let mut got = self.inner.get_opts(location, options).await?;
        if head || !self.direct_io {
            return Ok(got);
        }
        let (file, path) = match got.payload {
            object_store::GetResultPayload::File(file, path) => (file, path),
            other => {
                got.payload = other;
                return Ok(got);
            }
        };
        let range = got.range.clone();
        let name = location.to_string();
        let read = blocking(&name, move || {
            if set_direct(&file) {
                read_direct(&file, range).map(Ok)
            } else {
                Ok(Err((file, path)))
            }
        })
        .await?;
        got.payload = match read {
            Ok(bytes) => object_store::GetResultPayload::Stream(Box::pin(futures::stream::once(
                futures::future::ready(Ok(bytes)),
            ))),
            Err((file, path)) => object_store::GetResultPayload::File(file, path),
        };
        Ok(got)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// An upload into a staging file beside the object: each part is written at its offset as it
/// is put (`put_part` is called in the parts' order), several at once if the caller awaits them
/// together; completion syncs the file and renames it into place.
#[derive(Debug)]
struct LocalUpload {
    location: String,
    dest: PathBuf,
    staging: PathBuf,
    /// `None` once completed or aborted.
    file: Option<Arc<std::fs::File>>,
    /// The same file opened for direct writes, where the filesystem allows them.
    direct: Option<Arc<std::fs::File>>,
    /// Bytes of each step.
    steps: Steps,
    /// Bytes put so far: where the next part goes.
    len: u64,
}

#[async_trait]
impl MultipartUpload for LocalUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let at = self.len;
        self.len += data.content_length() as u64;
        let Some(file) = self.file.clone() else {
            let e = generic(&self.location, "the upload is over".into());
            return Box::pin(futures::future::ready(Err(e)));
        };
        let direct = self.direct.clone();
        let steps = self.steps;
        let location = self.location.clone();
        Box::pin(async move {
            blocking(&location, move || {
                let mut pacer = Pacer::new(&file, direct.as_deref(), steps, at);
                data.iter().try_for_each(|buf| pacer.write(buf))?;
                pacer.finish().map(drop)
            })
            .await
        })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let file = self
            .file
            .take()
            .ok_or_else(|| generic(&self.location, "the upload is over".into()))?;
        self.direct = None;
        // Every part's write has returned (the caller awaited them), so this is the last handle.
        let file = Arc::try_unwrap(file).map_err(|_| {
            generic(
                &self.location,
                "completed with parts still being written".into(),
            )
        })?;
        let (dest, staging) = (self.dest.clone(), self.staging.clone());
        blocking(&self.location, move || {
            or_remove(&staging, finish_staging(file, &dest, &staging))
        })
        .await?;
        Ok(written())
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.direct = None;
        if self.file.take().is_some() {
            let staging = self.staging.clone();
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_file(staging)).await;
        }
        Ok(())
    }
}

impl Drop for LocalUpload {
    /// An upload dropped unfinished leaves no staging file behind (a crash can; listings hide
    /// staging names).
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.staging);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn large_objects_are_whole_and_staging_files_are_gone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = LocalStore::new(dir.path().to_str().expect("utf-8 path")).expect("store");
        let data: Vec<u8> = (0..(3 * STEP + 12345)).map(|i| (i % 251) as u8).collect();
        let path = Path::from("ab/obj");
        object_store::ObjectStoreExt::put(&store, &path, PutPayload::from(data.clone()))
            .await
            .expect("put");
        let got = read_back(&store, &path).await;
        assert_eq!(&got[..], &data[..]);
        assert_eq!(
            names(&dir.path().join("ab")),
            vec![std::ffi::OsString::from("obj")]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_uploads_keep_at_most_the_bound_of_steps_in_the_device_queue() {
        // Six uploads of 5 steps each at once: unbounded, each would keep up to two steps in
        // the device queue (twelve together).
        let dir = tempfile::tempdir().expect("tempdir");
        let store =
            Arc::new(LocalStore::new(dir.path().to_str().expect("utf-8 path")).expect("store"));
        let data = Bytes::from(
            (0..(5 * STEP + 99))
                .map(|i| (i % 241) as u8)
                .collect::<Vec<_>>(),
        );
        let puts = (0..6).map(|i| {
            let store = Arc::clone(&store);
            let data = data.clone();
            tokio::spawn(async move {
                let path = Path::from(format!("c/{i}"));
                object_store::ObjectStoreExt::put(&*store, &path, PutPayload::from(data))
                    .await
                    .expect("put");
                path
            })
        });
        let paths = futures::future::join_all(puts).await;
        for p in paths {
            let p = p.expect("task");
            assert_eq!(read_back(&store, &p).await, data, "{p}");
        }
        let st = WRITEBACK.lock();
        assert!(st.peak >= 1, "steps were handed to the disk");
        assert!(
            st.peak <= WRITEBACK_STEPS,
            "{} steps were in the device queue at once (bound {WRITEBACK_STEPS})",
            st.peak
        );
    }

    async fn read_back(store: &LocalStore, path: &Path) -> Bytes {
        object_store::ObjectStoreExt::get(store, path)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("body")
    }

    /// Whether files in `dir` can be opened with `O_DIRECT` (not on tmpfs); says so if not.
    fn direct_io_allowed(dir: &std::path::Path) -> bool {
        let probe = dir.join("probe");
        std::fs::File::create(&probe).expect("probe");
        let allowed = open_direct(&probe).is_some();
        std::fs::remove_file(&probe).expect("probe removed");
        if !allowed {
            eprintln!("skipped: no O_DIRECT on {}", dir.display());
        }
        allowed
    }

    fn names(dir: &std::path::Path) -> Vec<std::ffi::OsString> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        v.sort();
        v
    }

    /// Pages of `path` in the page cache, and the file's pages.
    fn resident_pages(path: &std::path::Path) -> (usize, usize) {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(path).expect("open");
        let len = file.metadata().expect("metadata").len() as usize;
        // SAFETY: plain syscall.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let pages = len.div_ceil(page);
        // SAFETY: a read-only shared mapping of a file we hold open, unmapped below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED, "mmap");
        let mut vec = vec![0u8; pages];
        // SAFETY: `vec` has one byte per page of the mapping.
        let rc = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(addr, len) };
        assert_eq!(rc, 0, "mincore");
        (vec.iter().filter(|b| *b & 1 == 1).count(), pages)
    }

    /// Objects are written with `O_DIRECT` where the filesystem allows it: nothing of them is
    /// left in the page cache but the partial block at the end. The copy into the page cache
    /// cost the broker CPU, and its dirty pages reached the disk in bursts ahead of the WAL's
    /// synced writes.
    #[tokio::test]
    async fn objects_are_written_around_the_page_cache() {
        let dir = tempfile::tempdir().expect("tempdir");
        if !direct_io_allowed(dir.path()) {
            return;
        }
        let store = LocalStore::new(dir.path().to_str().expect("utf-8 path"))
            .expect("store")
            .with_direct_io(true);
        let data: Vec<u8> = (0..(8 * STEP + 5)).map(|i| (i % 249) as u8).collect();
        let path = Path::from("ab/direct");
        object_store::ObjectStoreExt::put(&store, &path, PutPayload::from(data.clone()))
            .await
            .expect("put");
        let (resident, pages) = resident_pages(&dir.path().join("ab").join("direct"));
        assert!(
            resident <= 1,
            "{resident} of the object's {pages} pages are in the page cache"
        );
        assert!(read_back(&store, &path).await[..] == data[..]);
        // Reads go around the page cache too.
        let (resident, pages) = resident_pages(&dir.path().join("ab").join("direct"));
        assert!(
            resident <= 1,
            "{resident} of {pages} pages cached after reads"
        );
        assert!(READS.lock().peak <= READ_CHUNKS);
    }

    /// Direct reads take any range: starts and ends inside blocks, across chunks, up to the end.
    #[tokio::test]
    async fn ranges_read_directly_are_the_bytes_asked_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = LocalStore::new(dir.path().to_str().expect("utf-8 path"))
            .expect("store")
            .with_direct_io(true);
        let len = 2 * READ_CHUNK + 4321;
        let data: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
        let path = Path::from("r/obj");
        object_store::ObjectStoreExt::put(&store, &path, PutPayload::from(data.clone()))
            .await
            .expect("put");
        let l = len as u64;
        for r in [
            0..1,
            5..4096,
            4095..4097,
            1000..(READ_CHUNK as u64 + 3),
            7..l,
            (l - 10)..l,
            0..l,
        ] {
            let got = object_store::ObjectStoreExt::get_range(&store, &path, r.clone())
                .await
                .expect("ranged GET");
            assert!(got[..] == data[r.start as usize..r.end as usize], "{r:?}");
        }
        let past = object_store::ObjectStoreExt::get_range(&store, &path, l..l + 5).await;
        assert!(past.is_err(), "a range past the end is refused");
    }

    /// An upload the WAL waits for ([`Backlogged`]) writes in larger steps: at the maximum
    /// produce rate, with the small ones the uploads fell behind and the WAL filled.
    #[test]
    fn backlogged_uploads_write_larger_direct_steps() {
        let mut ext = object_store::Extensions::new();
        assert_eq!(steps(&ext).direct, DIRECT_STEP);
        ext.insert(Backlogged);
        assert_eq!(steps(&ext).direct, DIRECT_STEP_BACKLOGGED);
        const { assert!(DIRECT_STEP_BACKLOGGED > DIRECT_STEP) };

        let dir = tempfile::tempdir().expect("tempdir");
        if !direct_io_allowed(dir.path()) {
            return;
        }
        let len = 4 * DIRECT_STEP_BACKLOGGED + 5;
        let data: Vec<u8> = (0..len).map(|i| (i % 247) as u8).collect();
        // Unaligned pieces, as an object's frames are.
        let payload: Vec<Bytes> = data
            .chunks(DIRECT_STEP / 3 + 7)
            .map(Bytes::copy_from_slice)
            .collect();
        for (step, writes) in [
            (DIRECT_STEP, len / DIRECT_STEP),
            (DIRECT_STEP_BACKLOGGED, len / DIRECT_STEP_BACKLOGGED),
        ] {
            let dest = dir.path().join(format!("obj-{step}"));
            let steps = Steps {
                buffered: STEP,
                direct: step,
            };
            let made =
                write_paced(&dest, &staging_path(&dest), &payload, true, steps).expect("write");
            assert_eq!(made, writes, "direct writes of {step} bytes");
            assert!(std::fs::read(&dest).expect("read") == data, "{step}");
        }
    }

    /// Where `O_DIRECT` is refused (tmpfs), steps go through the page cache, handed to the disk
    /// one after the other.
    #[test]
    fn without_direct_writes_steps_go_through_the_page_cache() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("buffered");
        let file = std::fs::File::create(&path).expect("create");
        let data: Vec<u8> = (0..(3 * STEP + 17)).map(|i| (i % 239) as u8).collect();
        let mut pacer = Pacer::new(&file, None, steps(&Default::default()), 0);
        for chunk in data.chunks(STEP / 3 + 1) {
            pacer.write(chunk).expect("write");
        }
        pacer.finish().expect("finish");
        file.sync_data().expect("sync");
        assert!(std::fs::read(&path).expect("read") == data);
    }

    /// An upload the WAL waits for goes around the page cache even with direct I/O off (the
    /// default); other puts go through it.
    #[tokio::test]
    async fn backlogged_uploads_go_around_the_page_cache() {
        let dir = tempfile::tempdir().expect("tempdir");
        if !direct_io_allowed(dir.path()) {
            return;
        }
        let store = LocalStore::new(dir.path().to_str().expect("utf-8 path")).expect("store");
        let data: Vec<u8> = (0..(8 * STEP + 5)).map(|i| (i % 241) as u8).collect();
        for (name, hint) in [("plain", false), ("behind", true)] {
            let mut extensions = object_store::Extensions::new();
            if hint {
                extensions.insert(Backlogged);
            }
            let path = Path::from(format!("b/{name}"));
            let opts = PutOptions {
                extensions,
                ..Default::default()
            };
            store
                .put_opts(&path, PutPayload::from(data.clone()), opts)
                .await
                .expect("put");
            let (resident, pages) = resident_pages(&dir.path().join("b").join(name));
            if hint {
                assert!(resident <= 1, "{resident} of {pages} pages cached");
            } else {
                assert!(resident > pages / 2, "{resident} of {pages} pages cached");
            }
            assert!(read_back(&store, &path).await[..] == data[..]);
        }
        // The parts of a multipart upload the same way.
        let mut extensions = object_store::Extensions::new();
        extensions.insert(Backlogged);
        let opts = PutMultipartOptions {
            extensions,
            ..Default::default()
        };
        let path = Path::from("b/parts");
        let mut upload = store.put_multipart_opts(&path, opts).await.expect("start");
        for part in data.chunks(3 * STEP + 1) {
            upload
                .put_part(PutPayload::from(part.to_vec()))
                .await
                .expect("part");
        }
        upload.complete().await.expect("complete");
        let (resident, pages) = resident_pages(&dir.path().join("b").join("parts"));
        // Partial blocks at the parts' edges go through the page cache.
        assert!(resident <= 6, "{resident} of {pages} pages cached");
        assert!(read_back(&store, &path).await[..] == data[..]);
    }

    /// Where O_DIRECT is refused (tmpfs), an upload the WAL waits for hands the disk
    /// [`STEP_BACKLOGGED`] at a time through the page cache, others [`STEP`].
    #[test]
    fn backlogged_uploads_write_larger_steps_through_the_page_cache() {
        let mut ext = object_store::Extensions::new();
        assert_eq!(steps(&ext).buffered, STEP);
        ext.insert(Backlogged);
        assert_eq!(steps(&ext).buffered, STEP_BACKLOGGED);
        const { assert!(STEP_BACKLOGGED > STEP) };

        let dir = tempfile::tempdir().expect("tempdir");
        let len = 2 * STEP_BACKLOGGED + 5;
        let data: Vec<u8> = (0..len).map(|i| (i % 233) as u8).collect();
        let payload: Vec<Bytes> = data
            .chunks(STEP / 3 + 7)
            .map(Bytes::copy_from_slice)
            .collect();
        for (backlogged, step) in [(false, STEP), (true, STEP_BACKLOGGED)] {
            let mut ext = object_store::Extensions::new();
            if backlogged {
                ext.insert(Backlogged);
            }
            let dest = dir.path().join(format!("obj-{step}"));
            let made = write_paced(&dest, &staging_path(&dest), &payload, false, steps(&ext))
                .expect("write");
            assert_eq!(made, len / step, "steps of {step} bytes");
            assert!(std::fs::read(&dest).expect("read") == data, "{step}");
        }
    }

    /// The parts of a multipart upload go to the disk as they are put, not at completion: the
    /// engine streams a compacted object out in parts so as not to hold it whole.
    #[tokio::test]
    async fn multipart_parts_are_written_as_they_are_put() {
        parts_written_as_put(false).await;
    }

    /// The same with direct writes: parts start and end inside blocks.
    #[tokio::test]
    async fn multipart_parts_are_written_as_they_are_put_directly() {
        parts_written_as_put(true).await;
    }

    async fn parts_written_as_put(direct_io: bool) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = LocalStore::new(dir.path().to_str().expect("utf-8 path"))
            .expect("store")
            .with_direct_io(direct_io);
        let path = Path::from("ab/multi");
        let first: Vec<u8> = (0..(2 * STEP + 7)).map(|i| (i % 251) as u8).collect();
        let second: Vec<u8> = (0..(STEP + 3)).map(|i| (i % 13) as u8).collect();
        let mut up = object_store::ObjectStoreExt::put_multipart(&store, &path)
            .await
            .expect("start");
        up.put_part(PutPayload::from(first.clone()))
            .await
            .expect("part 1");
        // Written already, under a staging name (hidden from listings), not yet the object.
        let staged = names(&dir.path().join("ab"));
        assert_eq!(staged.len(), 1, "{staged:?}");
        assert_ne!(staged[0], std::ffi::OsString::from("multi"));
        let len = std::fs::metadata(dir.path().join("ab").join(&staged[0]))
            .expect("staging file")
            .len();
        assert_eq!(len, first.len() as u64, "the first part is on the disk");
        // Two parts put before either is awaited land at their own places.
        let a = up.put_part(PutPayload::from(second.clone()));
        let b = up.put_part(PutPayload::from(first.clone()));
        let (a, b) = futures::join!(a, b);
        a.expect("part 2");
        b.expect("part 3");
        up.complete().await.expect("complete");
        let got = read_back(&store, &path).await;
        let want: Vec<u8> = [&first[..], &second[..], &first[..]].concat();
        assert_eq!(got.len(), want.len());
        assert!(got[..] == want[..], "the parts in their order");
        assert_eq!(
            names(&dir.path().join("ab")),
            vec![std::ffi::OsString::from("multi")]
        );
    }

    #[tokio::test]
    async fn an_aborted_or_dropped_multipart_upload_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = LocalStore::new(dir.path().to_str().expect("utf-8 path")).expect("store");
        for (name, abort) in [("aborted", true), ("dropped", false)] {
            let path = Path::from(format!("ab/{name}"));
            let mut up = object_store::ObjectStoreExt::put_multipart(&store, &path)
                .await
                .expect("start");
            up.put_part(PutPayload::from(vec![7u8; STEP + 1]))
                .await
                .expect("part");
            if abort {
                up.abort().await.expect("abort");
            } else {
                drop(up);
            }
            assert!(names(&dir.path().join("ab")).is_empty(), "{name}");
        }
    }
}
