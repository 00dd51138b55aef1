//! The `file://` object store: `object_store`'s `LocalFileSystem`, with writes of our own.
//!
//! A local object is the only copy of its data once the WAL is trimmed past it, so a write must
//! reach the disk before it returns. Writing a whole object into the page cache and syncing it at
//! the end would hand the disk tens of MiB at once, and the WAL's small synced writes, on the same
//! disk, would queue behind them: that was most of the produce tail latency. So an object is
//! written in small steps, each handed to the disk (`sync_file_range`) once the one before it is
//! written. Several uploads run at once (parts of a multipart upload, compaction beside the
//! uploader), so the steps in the device queue are also bounded for the whole process
//! ([`WRITEBACK_STEPS`]): with two steps per upload and four uploads, 8 MiB could sit ahead of a
//! WAL write, tens of milliseconds on the bench machine's disk, which was the tail of produce
//! latency with `file://` objects. Then `fdatasync`, rename into place, and a sync of the
//! directory.
//!
//! A multipart upload writes each part into a staging file as it is put, at the part's place
//! (parts are put in their order in the object, so each one's offset is known then), paced the
//! same way; completion syncs and renames it. Holding the parts until completion would keep a
//! whole compacted object in memory (up to `compaction_target_bytes` per stream being compacted)
//! while the engine streams it out part by part. Reads, lists, deletes and copies are
//! `LocalFileSystem`'s, with its `fsync` on.

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

/// Bytes written before the previous step must be on the disk.
const STEP: usize = 1 << 20;

/// Steps handed to the disk and not yet known written, over every upload of the process.
const WRITEBACK_STEPS: usize = 2;

/// The process-wide count of steps in the device queue (see the module doc).
struct Writeback {
    state: std::sync::Mutex<WritebackState>,
    freed: std::sync::Condvar,
}

struct WritebackState {
    in_flight: usize,
    /// The most ever in flight at once (for the tests).
    peak: usize,
}

static WRITEBACK: Writeback = Writeback {
    state: std::sync::Mutex::new(WritebackState {
        in_flight: 0,
        peak: 0,
    }),
    freed: std::sync::Condvar::new(),
};

impl Writeback {
    fn lock(&self) -> std::sync::MutexGuard<'_, WritebackState> {
        // Nothing is left half-done under this lock: a poisoned one is still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until a step may be handed to the disk. A caller holds at most one permit and
    /// never waits for one while holding another, so waiting always ends.
    fn acquire(&'static self) -> WritebackPermit {
        let mut st = self.lock();
        while st.in_flight >= WRITEBACK_STEPS {
            st = self.freed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.in_flight += 1;
        st.peak = st.peak.max(st.in_flight);
        debug_assert!(st.in_flight <= WRITEBACK_STEPS);
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
}

/// Makes staging names unique within the process; the pid makes them unique across restarts
/// sharing the directory.
static STAGING: AtomicU64 = AtomicU64::new(0);

impl LocalStore {
    pub fn new(root: &str) -> object_store::Result<LocalStore> {
        Ok(LocalStore {
            inner: Arc::new(LocalFileSystem::new_with_prefix(root)?.with_fsync(true)),
        })
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
) -> object_store::Result<PutResult> {
    let dest = inner.path_to_filesystem(location)?;
    let staging = staging_path(&dest);
    blocking(location.as_ref(), move || {
        or_remove(&staging, write_paced(&dest, &staging, &payload))
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
        source: format!("writing {location}: {msg}").into(),
    }
}

fn write_paced(
    dest: &std::path::Path,
    staging: &std::path::Path,
    payload: &[Bytes],
) -> std::io::Result<()> {
    let file = create_staging(dest, staging)?;
    let mut pacer = Pacer::new(&file, 0);
    for buf in payload {
        pacer.write(buf)?;
    }
    finish_staging(file, dest, staging)
}

/// Adds `context` to an I/O error's message.
fn ctx(what: &'static str) -> impl Fn(std::io::Error) -> std::io::Error {
    move |e: std::io::Error| std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Creates `dest`'s directory if needed (synced into its parent) and the staging file.
fn create_staging(
    dest: &std::path::Path,
    staging: &std::path::Path,
) -> std::io::Result<std::fs::File> {
    let parent = dest
        .parent()
        .ok_or_else(|| std::io::Error::other("object path has no parent"))?;
    if !parent.exists() {
        std::fs::create_dir_all(parent).map_err(ctx("creating its directory"))?;
        if let Some(grandparent) = parent.parent() {
            sync_dir(grandparent).map_err(ctx("syncing the directory"))?;
        }
    }
    std::fs::File::create(staging).map_err(ctx("creating"))
}

/// Writes consecutive buffers from an offset on, each [`STEP`] handed to the disk once the one
/// before it is written (steps run across buffers: many small ones make few steps).
struct Pacer<'a> {
    file: &'a std::fs::File,
    /// Where the next byte goes.
    at: u64,
    /// Bytes written since the last step was handed to the disk.
    unflushed: usize,
    /// The step in the device queue and its [`WRITEBACK`] permit. The last one is synced by
    /// whoever completes the file (or the file is removed); dropping the pacer gives it back.
    previous: Option<((u64, u64), WritebackPermit)>,
}

impl<'a> Pacer<'a> {
    fn new(file: &'a std::fs::File, at: u64) -> Self {
        Pacer {
            file,
            at,
            unflushed: 0,
            previous: None,
        }
    }

    fn write(&mut self, mut buf: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        while !buf.is_empty() {
            let n = (STEP - self.unflushed).min(buf.len());
            self.file
                .write_all_at(&buf[..n], self.at)
                .map_err(ctx("writing"))?;
            buf = &buf[n..];
            self.at += n as u64;
            self.unflushed += n;
            if self.unflushed == STEP {
                let step = (self.at - STEP as u64, STEP as u64);
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
        write(&self.inner, location, payload.into_iter().collect()).await
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
        let file = {
            let (dest, staging) = (dest.clone(), staging.clone());
            blocking(&name, move || create_staging(&dest, &staging)).await?
        };
        Ok(Box::new(LocalUpload {
            location: name,
            dest,
            staging,
            file: Some(Arc::new(file)),
            len: 0,
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
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
        let location = self.location.clone();
        Box::pin(async move {
            blocking(&location, move || {
                let mut pacer = Pacer::new(&file, at);
                data.iter().try_for_each(|buf| pacer.write(buf))
            })
            .await
        })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let file = self
            .file
            .take()
            .ok_or_else(|| generic(&self.location, "the upload is over".into()))?;
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

    fn names(dir: &std::path::Path) -> Vec<std::ffi::OsString> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        v.sort();
        v
    }

    /// The parts of a multipart upload go to the disk as they are put, not at completion: the
    /// engine streams a compacted object out in parts so as not to hold it whole.
    #[tokio::test]
    async fn multipart_parts_are_written_as_they_are_put() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = LocalStore::new(dir.path().to_str().expect("utf-8 path")).expect("store");
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
