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
