//! A real engine for the partition layer's tests: a file WAL and SQLite in a temporary
//! directory, objects in memory.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};
use weir_meta::SqliteMetaStore;
use weir_storage::{Engine, StorageConfig};

pub struct Stack {
    pub dir: tempfile::TempDir,
    pub meta: Arc<SqliteMetaStore>,
    pub engine: Engine,
}

pub async fn stack() -> Stack {
    let dir = tempfile::tempdir().expect("temp dir");
    let wal = weir_wal::FileWal::open(weir_wal::FileWalConfig {
        capacity: 16 << 20,
        direct_io: false,
        format: false,
        ..weir_wal::FileWalConfig::new(dir.path().join("wal"))
    })
    .expect("open WAL");
    let meta = Arc::new(SqliteMetaStore::open(&dir.path().join("meta.sqlite")).expect("meta"));
    let store = weir_storage::objstore::from_url("memory://").expect("store");
    let engine = Engine::open(StorageConfig::default(), Arc::new(wal), meta.clone(), store)
        .await
        .expect("engine");
    Stack { dir, meta, engine }
}

/// `records` as one record batch (format v2).
pub fn encode(records: &[Record], compression: Compression) -> Bytes {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("encode");
    buf.freeze()
}
