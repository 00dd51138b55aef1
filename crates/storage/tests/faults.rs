//! Produce load while the object store fails half its PUTs and answers every request 200 ms
//! late: every acknowledged append is read back; uploads get through in the end; producers are
//! slowed by a full WAL (backpressure), not failed, while the WAL drains.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{check_payload, open_engine_with_store, payload, read_all, small_config};
use weir_storage::objstore::{from_url_with, FaultConfig, StoreOptions};
use weir_storage::StorageConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_slow_store_loses_nothing_and_applies_backpressure() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("objects").display());
    let options = StoreOptions {
        faults: FaultConfig {
            put_error_rate: 0.5,
            get_error_rate: 0.0,
            latency: Duration::from_millis(200),
            ..Default::default()
        },
        max_concurrent_requests: 8,
        ..Default::default()
    };
    let store = from_url_with(&url, &options).unwrap();
    let config = StorageConfig {
        upload_bytes: 256 << 10,
        upload_interval: Duration::from_millis(200),
        // Appends wait this long for WAL space: longer than uploads take even with faults.
        wal_full_wait: Duration::from_secs(30),
        ..small_config()
    };
    // A 2 MiB WAL fills in a fraction of a second at this rate: producers must wait for it.
    let engine = open_engine_with_store(dir.path(), config.clone(), 2 << 20, store).await;
    for s in 0..4 {
        engine.open_stream(s, 1).await.unwrap();
    }
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            let s = t % 4;
            let mut acked = Vec::new();
            for i in 0..150u64 {
                let msg = t * 1000 + i;
                match engine
                    .append(s, 1, 1, 0, |b| payload(s, b, msg, 8000))
                    .await
                {
                    Ok(_) => acked.push(msg),
                    Err(e) => panic!("append failed while the WAL could still drain: {e}"),
                }
            }
            (s, acked)
        }));
    }
    let mut acked_per_stream = vec![Vec::new(); 4];
    for t in tasks {
        let (s, acked) = t.await.unwrap();
        acked_per_stream[s as usize].extend(acked);
    }
    let wal_waits = engine.wal().meters().full_rejections.get();
    let upload_errors = engine.meters().upload_errors.get();
    assert!(
        wal_waits > 0,
        "the WAL never filled: no backpressure was exercised"
    );
    assert!(upload_errors > 0, "no injected PUT failure was hit");
    engine.close().await.unwrap();

    // Everything acknowledged is in object storage: read it back through a store without faults.
    let clean = from_url_with(&url, &StoreOptions::default()).unwrap();
    let engine = open_engine_with_store(dir.path(), config, 2 << 20, clean).await;
    for s in 0..4u64 {
        engine.open_stream(s, 2).await.unwrap();
        let mut got: Vec<u64> = read_all(&engine, s, 0)
            .await
            .iter()
            .map(|f| check_payload(&f.payload).2)
            .collect();
        got.sort();
        let mut want = acked_per_stream[s as usize].clone();
        want.sort();
        assert_eq!(got, want, "stream {s}");
    }
    assert!(engine.object_meters().gets.get() > 0);
    engine.close().await.unwrap();
    let _ = Arc::new(());
}
