//! The `file://` object store: `object_store`'s `LocalFileSystem`, with writes of our own.
//!
//! A local object is the only copy of its data once the WAL is trimmed past it, so a write must
//! reach the disk before it returns. Writing a whole object into the page cache and syncing it at
//! the end would hand the disk tens of MiB at once, and the WAL's small synced writes, on the same
//! disk, would queue behind them: that was most of the produce tail latency. So an object is
//! written in small steps, each handed to the disk (`sync_file_range`) before the next is
//! written, which keeps at most two steps in the device queue ahead of the WAL. Then
//! `fdatasync`, rename into place, and a sync of the directory.
//!
//! Multipart uploads collect their parts (the engine's parts are slices of buffers it holds
//! anyway) and write them the same way on completion. Reads, lists, deletes and copies are
//! `LocalFileSystem`'s, with its `fsync` on.

use std::fmt;
use std::io::Write;
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
    let location = location.to_string();
    tokio::task::spawn_blocking(move || {
        let r = write_paced(&dest, &staging, &payload);
        if r.is_err() {
            let _ = std::fs::remove_file(&staging);
        }
        r
    })
    .await
    .map_err(|e| generic(&location, e.to_string()))?
    .map_err(|e| generic(&location, e.to_string()))?;
    Ok(PutResult {
        e_tag: None,
        version: None,
        extensions: Default::default(),
    })
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
    let ctx = |what: &'static str| {
        move |e: std::io::Error| std::io::Error::new(e.kind(), format!("{what}: {e}"))
    };
    let parent = dest
        .parent()
        .ok_or_else(|| std::io::Error::other("object path has no parent"))?;
    if !parent.exists() {
        std::fs::create_dir_all(parent).map_err(ctx("creating its directory"))?;
        if let Some(grandparent) = parent.parent() {
            sync_dir(grandparent).map_err(ctx("syncing the directory"))?;
        }
    }
    let mut file = std::fs::File::create(staging).map_err(ctx("creating"))?;
    let mut written = 0u64;
    let mut unflushed = 0usize;
    let mut previous: Option<(u64, u64)> = None;
    for buf in payload {
        let mut buf = &buf[..];
        while !buf.is_empty() {
            let n = (STEP - unflushed).min(buf.len());
            file.write_all(&buf[..n]).map_err(ctx("writing"))?;
            buf = &buf[n..];
            unflushed += n;
            written += n as u64;
            if unflushed == STEP {
                let step = (written - STEP as u64, STEP as u64);
                hand_to_disk(&file, step, previous).map_err(ctx("writing back"))?;
                previous = Some(step);
                unflushed = 0;
            }
        }
    }
    file.sync_data().map_err(ctx("syncing"))?;
    drop(file);
    std::fs::rename(staging, dest).map_err(ctx("renaming into place"))?;
    sync_dir(parent).map_err(ctx("syncing the directory"))
}

/// Starts write-back of `step` and waits for `previous` to be written.
fn hand_to_disk(
    file: &std::fs::File,
    step: (u64, u64),
    previous: Option<(u64, u64)>,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let range = |(off, len): (u64, u64)| {
        (
            libc::off64_t::try_from(off).unwrap_or(libc::off64_t::MAX),
            libc::off64_t::try_from(len).unwrap_or(0),
        )
    };
    let (off, len) = range(step);
    // SAFETY: plain syscalls on a valid descriptor.
    if unsafe { libc::sync_file_range(fd, off, len, libc::SYNC_FILE_RANGE_WRITE) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if let Some(p) = previous {
        let (off, len) = range(p);
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        // SAFETY: as above.
        if unsafe { libc::sync_file_range(fd, off, len, flags) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
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
        Ok(Box::new(LocalUpload {
            inner: Arc::clone(&self.inner),
            location: location.clone(),
            parts: Vec::new(),
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

/// Parts are kept in the order `put_part` was called (their order in the object) and written
/// on completion.
#[derive(Debug)]
struct LocalUpload {
    inner: Arc<LocalFileSystem>,
    location: Path,
    parts: Vec<Bytes>,
}

#[async_trait]
impl MultipartUpload for LocalUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.parts.extend(data);
        Box::pin(futures::future::ready(Ok(())))
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let parts = std::mem::take(&mut self.parts);
        write(&self.inner, &self.location, parts).await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.parts.clear();
        Ok(())
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
        let got = object_store::ObjectStoreExt::get(&store, &path)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("body");
        assert_eq!(&got[..], &data[..]);
        let names: Vec<_> = std::fs::read_dir(dir.path().join("ab"))
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("obj")]);
    }
}
