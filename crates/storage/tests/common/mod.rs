//! Helpers shared by the storage engine's integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use weir_meta::SqliteMetaStore;
use weir_storage::{Engine, StorageConfig};
use weir_wal::{FileWal, FileWalConfig};

/// Small thresholds, so that tests exercise uploads, eviction and the WAL ring quickly.
pub fn small_config() -> StorageConfig {
    StorageConfig {
        upload_bytes: 256 << 10,
        upload_interval: Duration::from_millis(500),
        stream_object_bytes: 128 << 10,
        block_bytes: 16 << 10,
        log_cache_bytes: 256 << 10,
        block_cache_bytes: 1 << 20,
        readahead_max_bytes: 256 << 10,
        wal_full_wait: Duration::from_millis(500),
        delete_grace: Duration::ZERO,
        orphan_grace: Duration::from_secs(3600),
        maintenance_interval: Duration::from_secs(3600),
        multipart_part_bytes: 5 << 20,
        ..StorageConfig::default()
    }
}

pub async fn open_engine(dir: &Path, config: StorageConfig, wal_capacity: u64) -> Engine {
    let store =
        weir_storage::objstore::from_url(&format!("file://{}", dir.join("objects").display()))
            .expect("open object store");
    open_engine_with_store(dir, config, wal_capacity, store).await
}

pub async fn open_engine_with_store(
    dir: &Path,
    config: StorageConfig,
    wal_capacity: u64,
    store: Arc<dyn object_store::ObjectStore>,
) -> Engine {
    let wal = FileWal::open(FileWalConfig {
        capacity: wal_capacity,
        ..FileWalConfig::new(dir.join("wal"))
    })
    .expect("open WAL");
    let meta = SqliteMetaStore::open(&dir.join("meta.sqlite")).expect("open meta");
    Engine::open(config, Arc::new(wal), Arc::new(meta), store)
        .await
        .expect("open engine")
}

/// A payload that names its stream, offset and a message id, and can be checked for damage.
pub fn payload(stream_id: u64, base_offset: u64, msg: u64, size: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(size.max(32));
    b.put_u64_le(stream_id);
    b.put_u64_le(base_offset);
    b.put_u64_le(msg);
    let mut x = msg.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while b.len() < size.max(32) - 8 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.put_u8(x as u8);
    }
    let sum = crc32c::crc32c(&b) as u64;
    b.put_u64_le(sum);
    b.freeze()
}

/// Checks a payload made by [`payload`]; returns (stream, base offset, message id).
pub fn check_payload(p: &[u8]) -> (u64, u64, u64) {
    assert!(p.len() >= 32, "payload too short");
    let n = p.len() - 8;
    let sum = u64::from_le_bytes(p[n..].try_into().expect("8 bytes"));
    assert_eq!(crc32c::crc32c(&p[..n]) as u64, sum, "payload damaged");
    let f = |i: usize| u64::from_le_bytes(p[i..i + 8].try_into().expect("8 bytes"));
    (f(0), f(8), f(16))
}

/// Reads a whole stream from `from` to its high watermark.
pub async fn read_all(engine: &Engine, stream_id: u64, from: u64) -> Vec<weir_storage::Frame> {
    let mut out = Vec::new();
    let mut next = from;
    loop {
        // A consumer's read (with read-ahead), waiting for object storage.
        let r = engine
            .read_with(stream_id, next, 64 << 10, true)
            .await
            .expect("read");
        if r.batches.is_empty() {
            assert_eq!(
                next, r.high_watermark,
                "read stopped short of the high watermark"
            );
            return out;
        }
        for b in r.batches {
            assert_eq!(b.base_offset, next, "batches must be contiguous");
            next = b.end_offset();
            out.push(b);
        }
    }
}

/// A store that notes, for each PUT and multipart upload, whether it came with the hint that
/// the WAL waits for it, and the nice value of the thread that started it.
#[derive(Debug)]
pub struct HintedStore {
    inner: object_store::memory::InMemory,
    /// One entry per put: whether it was backlogged, and its thread's nice value.
    puts: std::sync::Mutex<Vec<(bool, i32)>>,
}

/// The calling thread's own nice value (Linux: per thread).
pub fn thread_nice() -> i32 {
    // SAFETY: `gettid` and `getpriority` take and return plain integers.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
}

impl std::fmt::Display for HintedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hinted({})", self.inner)
    }
}

impl HintedStore {
    pub fn new() -> Self {
        HintedStore {
            inner: object_store::memory::InMemory::new(),
            puts: Default::default(),
        }
    }

    fn note(&self, ext: &object_store::Extensions) {
        let backlogged = ext.get::<weir_storage::local::Backlogged>().is_some();
        self.puts.lock().unwrap().push((backlogged, thread_nice()));
    }

    pub fn take(&self) -> Vec<(bool, i32)> {
        std::mem::take(&mut *self.puts.lock().unwrap())
    }
}

#[async_trait::async_trait]
impl object_store::ObjectStore for HintedStore {
    async fn put_opts(
        &self,
        location: &object_store::path::Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.note(&opts.extensions);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &object_store::path::Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.note(&opts.extensions);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &object_store::path::Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<
            'static,
            object_store::Result<object_store::path::Path>,
        >,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
