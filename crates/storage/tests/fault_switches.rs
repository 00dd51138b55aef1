//! The object store's fault switches (`object_store.fault_*`) on every kind of store: latency
//! must slow requests down, never break them (the chaos tests run with it on), and injected GET
//! errors must reach the reader as errors.

mod common;

use std::time::Duration;

use common::{check_payload, open_engine_with_store, payload, read_all, small_config};
use weir_storage::objstore::{from_url_with, FaultConfig, StoreOptions};
use weir_storage::StorageError;

fn with_faults(faults: FaultConfig) -> StoreOptions {
    StoreOptions {
        faults,
        max_concurrent_requests: 8,
        ..Default::default()
    }
}

fn latency(ms: u64) -> FaultConfig {
    FaultConfig {
        latency: Duration::from_millis(ms),
        ..Default::default()
    }
}

/// Appends `n` batches to stream 1 and closes the engine, which uploads them all.
async fn write_and_upload(dir: &std::path::Path, url: &str, n: u64) {
    let store = from_url_with(url, &StoreOptions::default()).expect("store");
    let engine = open_engine_with_store(dir, small_config(), 8 << 20, store).await;
    engine.open_stream(1, 1).await.expect("open stream");
    for i in 0..n {
        engine
            .append(1, 1, 1, 0, |b| payload(1, b, i, 3000))
            .await
            .expect("append");
    }
    engine.close().await.expect("close uploads everything");
}

/// The reproduction of issue 9: with the latency switch on a `file://` store, every read from an
/// object panicked inside `object_store`'s `ThrottledStore` (it cannot wrap a GET whose payload
/// is a local file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_switch_reads_back_from_a_local_store_after_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}", dir.path().join("objects").display());
    write_and_upload(dir.path(), &url, 200).await;

    let store = from_url_with(&url, &with_faults(latency(5))).expect("store");
    let engine = open_engine_with_store(dir.path(), small_config(), 8 << 20, store).await;
    engine.open_stream(1, 2).await.expect("reopen stream");
    let got: Vec<u64> = read_all(&engine, 1, 0)
        .await
        .iter()
        .map(|f| check_payload(&f.payload).2)
        .collect();
    assert_eq!(got, (0..200).collect::<Vec<_>>());
    assert!(
        engine.object_meters().gets.get() > 0,
        "the reads came from objects"
    );
    engine.close().await.expect("close");
}

/// Every request the engine makes (PUT, multipart, ranged GET, GET ranges, HEAD, LIST, DELETE,
/// and an engine round trip through a restart) works through the latency switch, on a local
/// directory and in memory. (`tests/s3.rs` does the same against s3s-fs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_switch_passes_the_store_conformance_suite_on_a_local_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}", dir.path().display());
    let store = from_url_with(&url, &with_faults(latency(2))).expect("store");
    weir_storage::conformance::run_all(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_switch_passes_the_store_conformance_suite_in_memory() {
    let store = from_url_with("memory://", &with_faults(latency(2))).expect("store");
    weir_storage::conformance::run_all(store).await;
}

/// With every GET failing, a read of data that is only in objects fails with a retriable object
/// store error (the Kafka layer answers KAFKA_STORAGE_ERROR), and the engine goes on serving:
/// the same read through a store without faults succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_error_switch_fails_reads_from_objects_with_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}", dir.path().join("objects").display());
    write_and_upload(dir.path(), &url, 50).await;

    let failing = FaultConfig {
        get_error_rate: 1.0,
        ..latency(1)
    };
    let store = from_url_with(&url, &with_faults(failing)).expect("store");
    let engine = open_engine_with_store(dir.path(), small_config(), 8 << 20, store).await;
    let info = engine.open_stream(1, 2).await.expect("reopen stream");
    assert_eq!(info.high_watermark, 50);
    for _ in 0..3 {
        match engine.read(1, 0, 64 << 10).await {
            Err(e @ StorageError::Object(_)) => assert!(e.is_retriable(), "{e}"),
            Err(e) => panic!("expected an object store error, got {e}"),
            Ok(r) => panic!(
                "a read from a store whose GETs all fail returned {} batches",
                r.batches.len()
            ),
        }
    }
    engine.close().await.expect("close");

    let store = from_url_with(&url, &StoreOptions::default()).expect("store");
    let engine = open_engine_with_store(dir.path(), small_config(), 8 << 20, store).await;
    engine.open_stream(1, 3).await.expect("reopen stream");
    assert_eq!(read_all(&engine, 1, 0).await.len(), 50);
    engine.close().await.expect("close");
}
