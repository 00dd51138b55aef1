//! The durability conformance suite (`conformance::durability`) against both ways of making
//! batches durable: the WAL file and the object WAL.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{open_engine, small_config};
use weir_storage::{Engine, StorageConfig, WalKind};

fn config() -> StorageConfig {
    StorageConfig {
        // Never upload by itself: what a crash leaves is what the WAL kind made durable.
        upload_bytes: u64::MAX,
        upload_interval: Duration::from_secs(3600),
        object_wal_linger: Duration::from_millis(5),
        object_wal_bytes: 64 << 10,
        ..small_config()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_file_keeps_what_it_acknowledged() {
    weir_storage::conformance::durability(WalKind::File, |dir| async move {
        open_engine(&dir, config(), 4 << 20).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_object_wal_keeps_what_it_acknowledged() {
    weir_storage::conformance::durability(WalKind::Object, |dir| async move {
        let store =
            weir_storage::objstore::from_url(&format!("file://{}", dir.join("objects").display()))
                .expect("object store");
        let meta = weir_meta::SqliteMetaStore::open(&dir.join("meta.sqlite")).expect("meta");
        Engine::open_without_wal(config(), Arc::new(meta), store)
            .await
            .expect("engine")
    })
    .await;
}
