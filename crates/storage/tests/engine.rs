//! The storage engine end to end: a real file WAL, SQLite and a filesystem object store.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use std::sync::Arc;

use common::{
    check_payload, open_engine, open_engine_with_store, payload, read_all, small_config,
    thread_nice, HintedStore,
};
use weir_storage::objstore::{FaultConfig, FaultyStore};
use weir_storage::{Engine, Retention, StorageConfig, StorageError};

const WAL: u64 = 8 << 20;

#[tokio::test]
async fn appends_read_back_in_order_from_cache_and_objects() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open_engine(dir.path(), small_config(), WAL).await;
    engine.open_stream(1, 1).await.unwrap();
    engine.open_stream(2, 1).await.unwrap();
    for i in 0..400u64 {
        let stream = 1 + i % 2;
        let a = engine
            .append(stream, 1, 3, i as i64, |base| {
                payload(stream, base, i, 1000)
            })
            .await
            .unwrap();
        assert_eq!(a.base_offset, (i / 2) * 3);
        assert_eq!(a.end_offset, a.base_offset + 3);
    }
    engine.flush().await.unwrap();
    for stream in [1, 2] {
        let frames = read_all(&engine, stream, 0).await;
        assert_eq!(frames.len(), 200);
        for f in &frames {
            let (s, base, _) = check_payload(&f.payload);
            assert_eq!((s, base), (stream, f.base_offset));
        }
        // A read from the middle of a batch starts with that batch.
        let r = engine.read(stream, 4, 1).await.unwrap();
        assert_eq!(r.batches.len(), 1);
        assert_eq!(r.batches[0].base_offset, 3);
        assert_eq!(r.high_watermark, 600);
    }
    // The log cache (256 KiB) cannot hold 400 KB, so some reads had to come from objects.
    assert!(engine.meters().log_cache_misses.get() > 0);
    assert!(engine.object_meters().gets.get() > 0);
    engine.close().await.unwrap();
}

#[tokio::test]
async fn stale_epochs_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open_engine(dir.path(), small_config(), WAL).await;
    engine.open_stream(1, 5).await.unwrap();
    let e = engine
        .append(1, 4, 1, 0, |b| payload(1, b, 0, 64))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            StorageError::Fenced {
                epoch: 4,
                current: 5,
                ..
            }
        ),
        "{e}"
    );
    assert!(matches!(
        engine.open_stream(1, 4).await,
        Err(StorageError::Fenced { .. })
    ));
    engine
        .append(1, 5, 1, 0, |b| payload(1, b, 0, 64))
        .await
        .unwrap();
    // A newer epoch takes over with the data in place.
    let info = engine.open_stream(1, 6).await.unwrap();
    assert_eq!(
        (info.epoch, info.high_watermark, info.committed_end),
        (6, 1, 1)
    );
    assert!(engine
        .append(1, 5, 1, 0, |b| payload(1, b, 1, 64))
        .await
        .is_err());
    engine
        .append(1, 6, 1, 0, |b| payload(1, b, 1, 64))
        .await
        .unwrap();
    assert!(matches!(
        engine.append(9, 1, 1, 0, |b| payload(9, b, 0, 64)).await,
        Err(StorageError::NotOpen(9))
    ));
    engine.close().await.unwrap();
}

#[tokio::test]
async fn out_of_range_reads_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open_engine(dir.path(), small_config(), WAL).await;
    engine.open_stream(1, 1).await.unwrap();
    for i in 0..10 {
        engine
            .append(1, 1, 1, 0, |b| payload(1, b, i, 64))
            .await
            .unwrap();
    }
    assert!(engine.read(1, 10, 100).await.unwrap().batches.is_empty());
    assert!(matches!(
        engine.read(1, 11, 100).await,
        Err(StorageError::OffsetOutOfRange {
            offset: 11,
            start: 0,
            end: 10,
            ..
        })
    ));
    engine.trim(1, 4).await.unwrap();
    assert!(matches!(
        engine.read(1, 3, 100).await,
        Err(StorageError::OffsetOutOfRange { start: 4, .. })
    ));
    assert_eq!(
        engine.read(1, 4, 1).await.unwrap().batches[0].base_offset,
        4
    );
    assert!(engine.trim(1, 11).await.is_err());
    engine.close().await.unwrap();
}

/// The log cache's budget covers data not yet uploaded too: appends between uploads evict the
/// oldest uploaded batches, and only data that waits for an upload may exceed the budget.
#[tokio::test]
async fn the_log_cache_budget_covers_data_not_yet_uploaded() {
    const BATCH: usize = 16 << 10;
    const BUDGET: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        log_cache_bytes: BUDGET,
        // Uploads only when the test flushes.
        upload_bytes: 64 << 20,
        upload_interval: Duration::from_secs(3600),
        ..small_config()
    };
    let engine = open_engine(dir.path(), config, WAL).await;
    engine.open_stream(1, 1).await.unwrap();
    let mut msg = 0u64;
    let mut append = async |batches: u64| {
        for _ in 0..batches {
            let i = msg;
            engine
                .append(1, 1, 1, i as i64, |b| payload(1, b, i, BATCH))
                .await
                .unwrap();
            msg += 1;
        }
    };
    // 2 MiB uploaded, 256 KiB at a time.
    for _ in 0..8 {
        append(16).await;
        engine.flush().await.unwrap();
    }
    assert_eq!(engine.log_cache_bytes(), BUDGET);
    // 512 KiB more, not uploaded: the oldest uploaded data makes room for it.
    append(32).await;
    assert_eq!(
        engine.log_cache_bytes(),
        BUDGET,
        "data not yet uploaded came on top of the budget"
    );
    // 1 MiB more: 1.5 MiB waits for an upload, more than the budget, and is all the cache holds.
    append(64).await;
    assert_eq!(engine.log_cache_bytes(), 96 * BATCH as u64);
    // Everything reads back, from the cache and from objects.
    let frames = read_all(&engine, 1, 0).await;
    assert_eq!(frames.len() as u64, msg);
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(check_payload(&f.payload), (1, i as u64, i as u64));
    }
    assert!(engine.meters().log_cache_hits.get() > 0);
    assert!(engine.meters().log_cache_misses.get() > 0);
    engine.flush().await.unwrap();
    assert!(engine.log_cache_bytes() <= BUDGET);
    engine.close().await.unwrap();
}

/// After a restart the log cache is empty: reads must come from objects, through GETs.
#[tokio::test]
async fn restart_reads_from_objects_only() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = open_engine(dir.path(), small_config(), WAL).await;
        engine.open_stream(7, 1).await.unwrap();
        for i in 0..300u64 {
            engine
                .append(7, 1, 2, 1000 + i as i64, |b| payload(7, b, i, 2000))
                .await
                .unwrap();
        }
        engine.close().await.unwrap();
    }
    let engine = open_engine(dir.path(), small_config(), WAL).await;
    let info = engine.open_stream(7, 2).await.unwrap();
    assert_eq!((info.high_watermark, info.committed_end), (600, 600));
    assert_eq!(engine.log_cache_bytes(), 0);
    let gets_before = engine.object_meters().gets.get();
    let frames = read_all(&engine, 7, 0).await;
    assert_eq!(frames.len(), 300);
    for (i, f) in frames.iter().enumerate() {
        let (_, base, msg) = check_payload(&f.payload);
        assert_eq!((base, msg), (f.base_offset, i as u64));
        assert_eq!(f.max_timestamp, 1000 + i as i64);
    }
    let m = engine.meters();
    assert!(
        engine.object_meters().gets.get() > gets_before,
        "reads must issue GETs"
    );
    assert!(engine.object_meters().get_bytes.get() >= 600_000);
    assert_eq!(
        m.log_cache_hits.get(),
        0,
        "nothing can come from the log cache"
    );
    assert!(m.block_cache_misses.get() > 0);
    // Read-ahead: 600 KB in 16 KiB blocks is about 37 blocks; growing read-ahead needs far
    // fewer GETs than blocks.
    let gets = engine.object_meters().gets.get() - gets_before;
    assert!(
        gets < 30,
        "{gets} GETs for 37 blocks: read-ahead is not working"
    );
    // A second pass is served by the block cache, without GETs.
    let gets_before = engine.object_meters().gets.get();
    assert_eq!(read_all(&engine, 7, 0).await.len(), 300);
    assert_eq!(engine.object_meters().gets.get(), gets_before);
    engine.close().await.unwrap();
}

#[tokio::test]
async fn unclean_stop_recovers_from_the_wal_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        // Never upload by itself: everything stays in the WAL.
        upload_bytes: u64::MAX,
        upload_interval: Duration::from_secs(3600),
        ..small_config()
    };
    {
        let engine = open_engine(dir.path(), config.clone(), WAL).await;
        engine.open_stream(1, 1).await.unwrap();
        engine.open_stream(2, 1).await.unwrap();
        for i in 0..50u64 {
            engine
                .append(1, 1, 1, 0, |b| payload(1, b, i, 500))
                .await
                .unwrap();
            if i == 20 {
                // Part of the data is in objects already; recovery must not upload it again.
                engine.flush().await.unwrap();
            }
        }
        engine
            .append(2, 1, 4, 0, |b| payload(2, b, 0, 500))
            .await
            .unwrap();
        // Dropped without close: the WAL is all there is of what came after the flush.
        std::mem::forget(engine);
    }
    let engine = open_engine(dir.path(), config, WAL).await;
    assert_eq!(engine.meters().recovered_batches.get(), 30);
    engine.open_stream(1, 2).await.unwrap();
    engine.open_stream(2, 2).await.unwrap();
    let msgs: Vec<u64> = read_all(&engine, 1, 0)
        .await
        .iter()
        .map(|f| check_payload(&f.payload).2)
        .collect();
    assert_eq!(msgs, (0..50).collect::<Vec<_>>());
    assert_eq!(engine.stream_info(2).unwrap().high_watermark, 4);
    assert_eq!(
        engine.wal().usage().used,
        0,
        "recovered data was uploaded and trimmed"
    );
    engine.close().await.unwrap();
}

#[tokio::test]
async fn full_wal_fails_appends_retriably_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        upload_bytes: u64::MAX,
        upload_interval: Duration::from_secs(3600),
        wal_full_wait: Duration::from_millis(200),
        ..small_config()
    };
    // Every PUT fails until the object store comes back.
    let store = weir_storage::objstore::from_url(&format!(
        "file://{}",
        dir.path().join("objects").display()
    ))
    .unwrap();
    let faulty = Arc::new(FaultyStore::new(
        store,
        FaultConfig {
            put_error_rate: 1.0,
            ..Default::default()
        },
    ));
    let engine = open_engine_with_store(dir.path(), config, 1 << 20, faulty.clone()).await;
    engine.open_stream(1, 1).await.unwrap();
    let mut acked = 0u64;
    let err = loop {
        match engine
            .append(1, 1, 1, 0, |b| payload(1, b, acked, 30_000))
            .await
        {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, StorageError::Wal(weir_wal::WalError::Full { .. })),
        "{err}"
    );
    assert!(err.is_retriable());
    assert!(acked > 10);
    assert!(engine.meters().upload_errors.get() > 0);
    // Once uploads drain the WAL, appends go on, and nothing acknowledged is lost.
    faulty.set_faults(FaultConfig::default());
    engine.flush().await.unwrap();
    engine
        .append(1, 1, 1, 0, |b| payload(1, b, acked, 30_000))
        .await
        .unwrap();
    let msgs: Vec<u64> = read_all(&engine, 1, 0)
        .await
        .iter()
        .map(|f| check_payload(&f.payload).2)
        .collect();
    assert_eq!(msgs, (0..=acked).collect::<Vec<_>>());
    engine.close().await.unwrap();
}

#[tokio::test]
async fn retention_by_size_and_time_deletes_whole_objects() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        upload_bytes: u64::MAX,
        upload_interval: Duration::from_secs(3600),
        ..small_config()
    };
    let engine = open_engine(dir.path(), config, WAL).await;
    engine.open_stream(1, 1).await.unwrap();
    engine.open_stream(2, 1).await.unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    // Ten uploads of 10 KB each per stream; stream 2's first five are two hours old.
    for round in 0..10u64 {
        for j in 0..10u64 {
            let i = round * 10 + j;
            engine
                .append(1, 1, 1, now, |b| payload(1, b, i, 1000))
                .await
                .unwrap();
            let ts = if round < 5 { now - 7_200_000 } else { now };
            engine
                .append(2, 1, 1, ts, |b| payload(2, b, i, 1000))
                .await
                .unwrap();
        }
        engine.flush().await.unwrap();
    }
    let objects_before = engine.object_meters().deletes.get();
    engine
        .set_retention(
            1,
            Retention {
                ms: None,
                bytes: Some(35_000),
            },
        )
        .unwrap();
    engine
        .set_retention(
            2,
            Retention {
                ms: Some(3_600_000),
                bytes: None,
            },
        )
        .unwrap();
    engine.run_maintenance().await.unwrap();
    // Stream 1: about 10.2 KB per range; keeping at least 35 KB keeps the last four ranges.
    let s1 = engine.stream_info(1).unwrap();
    assert_eq!(s1.start_offset, 60);
    let s2 = engine.stream_info(2).unwrap();
    assert_eq!(s2.start_offset, 50);
    let msgs: Vec<u64> = read_all(&engine, 2, 50)
        .await
        .iter()
        .map(|f| check_payload(&f.payload).2)
        .collect();
    assert_eq!(msgs, (50..100).collect::<Vec<_>>());
    // Objects shared by both streams go once neither needs them: rounds 0..5.
    engine.run_maintenance().await.unwrap();
    assert_eq!(engine.object_meters().deletes.get() - objects_before, 5);
    let files = walk(&dir.path().join("objects"));
    assert_eq!(files, 5, "five objects left on disk");
    engine.close().await.unwrap();
}

fn walk(p: &std::path::Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(p).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            n += walk(&e.path());
        } else {
            n += 1;
        }
    }
    n
}

#[tokio::test]
async fn large_streams_get_objects_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        upload_bytes: u64::MAX,
        upload_interval: Duration::from_secs(3600),
        ..small_config()
    };
    let engine = open_engine(dir.path(), config, WAL).await;
    for s in 1..=4 {
        engine.open_stream(s, 1).await.unwrap();
    }
    for i in 0..200u64 {
        // Stream 1 gets 200 KB, over the 128 KiB stream-object threshold; the others 2 KB each.
        engine
            .append(1, 1, 1, 0, |b| payload(1, b, i, 1000))
            .await
            .unwrap();
        if i % 100 == 0 {
            for s in 2..=4 {
                engine
                    .append(s, 1, 1, 0, |b| payload(s, b, i, 1000))
                    .await
                    .unwrap();
            }
        }
    }
    engine.flush().await.unwrap();
    assert_eq!(
        engine.meters().objects_uploaded.get(),
        2,
        "one stream object and one stream-set object"
    );
    let ids: HashSet<u64> = (1..=4).collect();
    for s in ids {
        let n = read_all(&engine, s, 0).await.len();
        assert_eq!(n, if s == 1 { 200 } else { 2 });
    }
    engine.close().await.unwrap();
}

#[tokio::test]
async fn concurrent_appenders_keep_order_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open_engine(dir.path(), small_config(), WAL).await;
    for s in 0..4 {
        engine.open_stream(s, 1).await.unwrap();
    }
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            let s = t % 4;
            for i in 0..200u64 {
                let msg = t * 1000 + i;
                engine
                    .append(s, 1, 1, 0, |b| payload(s, b, msg, 700))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for s in 0..4 {
        let frames = read_all(&engine, s, 0).await;
        assert_eq!(frames.len(), 400);
        let mut per_writer: Vec<Vec<u64>> = vec![Vec::new(); 8];
        for f in &frames {
            let (stream, base, msg) = check_payload(&f.payload);
            assert_eq!((stream, base), (s, f.base_offset));
            per_writer[(msg / 1000) as usize].push(msg % 1000);
        }
        for w in per_writer.iter().filter(|w| !w.is_empty()) {
            assert_eq!(
                *w,
                (0..200).collect::<Vec<_>>(),
                "each writer's appends in its order"
            );
        }
    }
    engine.close().await.unwrap();
}

#[tokio::test]
async fn finds_batches_by_timestamp_in_objects_and_cache() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open_engine(dir.path(), small_config(), WAL).await;
    engine.open_stream(1, 1).await.unwrap();
    for i in 0..100u64 {
        engine
            .append(1, 1, 2, 1000 + 10 * i as i64, |b| payload(1, b, i, 500))
            .await
            .unwrap();
        if i == 59 {
            engine.flush().await.unwrap();
        }
    }
    let at = |ts| {
        let engine = engine.clone();
        async move {
            engine
                .find_by_timestamp(1, ts)
                .await
                .unwrap()
                .map(|f| f.base_offset)
        }
    };
    assert_eq!(at(0).await, Some(0));
    assert_eq!(at(1000).await, Some(0));
    assert_eq!(at(1001).await, Some(2));
    assert_eq!(at(1000 + 10 * 30).await, Some(60)); // in objects
    assert_eq!(at(1000 + 10 * 70 - 5).await, Some(140)); // in the cache
    assert_eq!(at(1000 + 10 * 99).await, Some(198));
    assert_eq!(at(1000 + 10 * 99 + 1).await, None);
    engine.close().await.unwrap();
}

/// No upload but the ones closing (or flushing) asks for, and one set object per upload.
fn uploads_only_on_close() -> StorageConfig {
    StorageConfig {
        upload_bytes: u64::MAX,
        upload_interval: Duration::from_secs(3600),
        stream_object_bytes: u64::MAX,
        ..small_config()
    }
}

#[tokio::test]
async fn closing_a_stream_uploads_that_stream_only() {
    // A partition that moves away writes its own tail, not every partition's: the move's time
    // must not follow how full the WAL is with other partitions' data.
    let dir = tempfile::tempdir().unwrap();
    let engine = open_engine(dir.path(), uploads_only_on_close(), WAL).await;
    engine.open_stream(1, 1).await.unwrap();
    engine.open_stream(2, 1).await.unwrap();
    for i in 0..40u64 {
        engine
            .append(1, 1, 1, i as i64, |b| payload(1, b, i, 1_000))
            .await
            .unwrap();
        engine
            .append(2, 1, 1, i as i64, |b| payload(2, b, i, 10_000))
            .await
            .unwrap();
    }
    assert_eq!(engine.meters().upload_bytes.get(), 0);
    engine.close_stream(1).await.unwrap();
    let moved = engine.meters().upload_bytes.get();
    assert!(
        moved > 40_000 && moved < 100_000,
        "closing stream 1 uploaded {moved} bytes; its own data is about 40 KB, the other stream's 400 KB"
    );
    // Stream 2 still has all its data uncommitted, and uploads it later.
    engine.flush().await.unwrap();
    assert!(engine.meters().upload_bytes.get() - moved > 400_000);
    assert_eq!(read_all(&engine, 2, 0).await.len(), 40);
    engine.open_stream(1, 2).await.unwrap();
    assert_eq!(read_all(&engine, 1, 0).await.len(), 40);
    engine.close().await.unwrap();
}

#[tokio::test]
async fn closing_many_streams_at_once_shares_uploads() {
    // A broker that moves all its partitions away closes them together: their one-stream
    // uploads, queued behind each other, are served together instead of one object each.
    let dir = tempfile::tempdir().unwrap();
    let engine = open_engine(dir.path(), uploads_only_on_close(), WAL).await;
    for s in 1..=20u64 {
        engine.open_stream(s, 1).await.unwrap();
        for i in 0..5u64 {
            engine
                .append(s, 1, 1, i as i64, |b| payload(s, b, i, 1_000))
                .await
                .unwrap();
        }
    }
    let closes = (1..=20u64).map(|s| engine.close_stream(s));
    for r in futures::future::join_all(closes).await {
        r.unwrap();
    }
    let uploads = engine.meters().uploads.get();
    assert!(
        (1..=4).contains(&uploads),
        "20 streams closed at once took {uploads} uploads"
    );
    for s in 1..=20u64 {
        engine.open_stream(s, 2).await.unwrap();
        assert_eq!(read_all(&engine, s, 0).await.len(), 5);
    }
    engine.close().await.unwrap();
}

/// Two engines on one metadata store and object store, each with its own WAL: a broker and its
/// peer. The broker's WAL reads its seal after every write.
async fn broker_and_peer(dir: &std::path::Path) -> (Engine, Engine) {
    let meta: Arc<dyn weir_meta::MetaStore> =
        Arc::new(weir_meta::SqliteMetaStore::open(&dir.join("meta.sqlite")).unwrap());
    let store =
        weir_storage::objstore::from_url(&format!("file://{}", dir.join("objects").display()))
            .unwrap();
    let open_wal = |name: &str| {
        weir_wal::FileWal::open(weir_wal::FileWalConfig {
            capacity: WAL,
            seal_check: true,
            ..weir_wal::FileWalConfig::new(dir.join(name).join("wal"))
        })
        .unwrap()
    };
    let broker = Engine::open(
        uploads_only_on_close(),
        Arc::new(open_wal("a")),
        Arc::clone(&meta),
        Arc::clone(&store),
    )
    .await
    .unwrap();
    let peer = Engine::open(
        uploads_only_on_close(),
        Arc::new(open_wal("b")),
        meta,
        store,
    )
    .await
    .unwrap();
    (broker, peer)
}

#[tokio::test]
async fn a_peer_recovers_a_dead_brokers_wal_under_a_raised_epoch() {
    // The broker acknowledged records it never uploaded, then stopped answering. The peer seals
    // its WAL, commits those records at epoch + 1, and a new leader reads them all; the old
    // leader can neither acknowledge nor commit anything more.
    let dir = tempfile::tempdir().unwrap();
    let (broker, peer) = broker_and_peer(dir.path()).await;
    let wal_path = dir.path().join("a").join("wal");
    let wal_id = weir_wal::FileWal::identity(&wal_path)
        .unwrap()
        .expect("a WAL")
        .wal_id;
    broker.open_stream(1, 1).await.unwrap();
    broker.open_stream(2, 1).await.unwrap();
    for i in 0..30u64 {
        broker
            .append(1, 1, 1, i as i64, |b| payload(1, b, i, 1_000))
            .await
            .unwrap();
    }
    // Stream 2's first records are in object storage already; only its tail is in the WAL.
    for i in 0..5u64 {
        broker
            .append(2, 1, 1, i as i64, |b| payload(2, b, i, 1_000))
            .await
            .unwrap();
    }
    broker.flush_stream(2).await.unwrap();
    for i in 5..8u64 {
        broker
            .append(2, 1, 1, i as i64, |b| payload(2, b, i, 1_000))
            .await
            .unwrap();
    }
    let seal = weir_wal::Seal {
        wal_id,
        node_id: 2,
        incarnation: 1,
    };
    let found = peer.recover_peer_wal(&wal_path, seal).await.unwrap();
    assert_eq!((found.uploaded, found.streams), (33, 2), "{found:?}");

    // The old leader: its next write is refused (sealed), and so is a commit at its epoch.
    match broker
        .append(1, 1, 1, 99, |b| payload(1, b, 99, 1_000))
        .await
    {
        Err(weir_storage::StorageError::Wal(weir_wal::WalError::Sealed { node_id: 2, .. })) => {}
        other => panic!("the sealed broker acknowledged an append: {other:?}"),
    }
    assert!(broker.flush().await.is_err(), "a stale leader committed");

    // A new leader opens at the next epoch and reads everything, once, in order.
    let info = peer.open_stream(1, 3).await.unwrap();
    assert_eq!(info.high_watermark, 30);
    let frames = read_all(&peer, 1, 0).await;
    let offsets: Vec<u64> = frames.iter().map(|f| f.base_offset).collect();
    assert_eq!(offsets, (0..30).collect::<Vec<_>>());
    peer.open_stream(2, 3).await.unwrap();
    assert_eq!(read_all(&peer, 2, 0).await.len(), 8);
    // Recovering again (an interrupted recovery retried) finds nothing left to upload.
    let again = peer.recover_peer_wal(&wal_path, seal).await.unwrap();
    assert_eq!(again.uploaded, 0);
    // Another WAL at that path is not recovered.
    let wrong = weir_wal::Seal {
        wal_id: wal_id ^ 1,
        ..seal
    };
    assert!(matches!(
        peer.recover_peer_wal(&wal_path, wrong).await,
        Err(weir_storage::PeerRecoveryError::Unreachable(_))
    ));
    assert!(matches!(
        peer.recover_peer_wal(&dir.path().join("nowhere"), seal)
            .await,
        Err(weir_storage::PeerRecoveryError::Unreachable(_))
    ));
    peer.close().await.unwrap();
}

/// Uploads say when the WAL waits for them (it holds more than a quarter of its capacity), so
/// that a local store writes them in larger steps, and not otherwise; what they write reads
/// back either way. An upload the WAL does not wait for runs on the niced threads of catch-up
/// reads, below the produce path; one it waits for keeps the broker's priority.
#[tokio::test]
async fn uploads_the_wal_waits_for_say_so_to_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(HintedStore::new());
    let config = StorageConfig {
        // Uploads only when flushed, one stream-set object each.
        upload_bytes: u64::MAX,
        upload_interval: Duration::from_secs(3600),
        stream_object_bytes: u64::MAX,
        catchup_nice: 5,
        ..small_config()
    };
    let own = thread_nice();
    let niced = (own + 5).min(19);
    let engine = open_engine_with_store(dir.path(), config, WAL, store.clone()).await;
    engine.open_stream(1, 1).await.unwrap();
    let mut msg = 0u64;
    let mut append = |n: u64| {
        let engine = &engine;
        let first = msg;
        msg += n;
        async move {
            for i in first..first + n {
                engine
                    .append(1, 1, 1, i as i64, |base| payload(1, base, i, 16 << 10))
                    .await
                    .unwrap();
            }
        }
    };
    // 512 KiB of an 8 MiB WAL: not behind.
    append(32).await;
    engine.flush().await.unwrap();
    assert_eq!(store.take(), vec![(false, niced)]);
    // 3 MiB: more than a quarter.
    append(192).await;
    engine.flush().await.unwrap();
    assert_eq!(store.take(), vec![(true, own)]);
    // Trimmed after the upload: not behind again.
    append(32).await;
    engine.flush().await.unwrap();
    assert_eq!(store.take(), vec![(false, niced)]);
    let frames = read_all(&engine, 1, 0).await;
    assert_eq!(frames.len(), 256);
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(check_payload(&f.payload).0, 1);
        assert_eq!(f.base_offset, i as u64);
    }
    engine.close().await.unwrap();
}

/// Uploads and compaction only when a test asks for them (a flush, `compact`), the latter at 4
/// small ranges of up to 64 MiB together, without a bandwidth budget.
fn by_hand_config() -> StorageConfig {
    StorageConfig {
        upload_bytes: u64::MAX,
        upload_interval: Duration::from_secs(3600),
        stream_object_bytes: u64::MAX,
        compaction_target_bytes: 64 << 20,
        compaction_min_ranges: 4,
        background_bytes_per_sec: 0,
        maintenance_interval: Duration::from_secs(3600),
        ..small_config()
    }
}

/// A stream of 12 MiB in four objects of 3 MiB (a run that compaction or a rewrite writes in
/// parts of 5 MiB) on a local store behind fault switches, written by an engine now closed;
/// and the settings it was written with ([`by_hand_config`]).
async fn four_objects(dir: &std::path::Path) -> (Arc<FaultyStore>, StorageConfig) {
    let objects = dir.join("objects");
    let store = weir_storage::objstore::from_url(&format!("file://{}", objects.display())).unwrap();
    let faulty = Arc::new(FaultyStore::new(store, FaultConfig::default()));
    let config = by_hand_config();
    let engine = open_engine_with_store(dir, config.clone(), 32 << 20, faulty.clone()).await;
    engine.open_stream(1, 1).await.unwrap();
    for i in 0..4 * 48u64 {
        engine
            .append(1, 1, 1, i as i64, |b| payload(1, b, i, 64 << 10))
            .await
            .unwrap();
        if i % 48 == 47 {
            engine.flush().await.unwrap();
        }
    }
    engine.close().await.unwrap();
    (faulty, config)
}

/// Parts put from now on take a minute each; returns once one is under way.
async fn slow_parts_under_way(engine: &Engine, faulty: &FaultyStore) {
    faulty.set_faults(FaultConfig {
        put_latency: Duration::from_secs(60),
        ..Default::default()
    });
    let started = std::time::Instant::now();
    while engine.object_meters().multipart_parts.get() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no part was put"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The four objects of [`four_objects`], whole and alone (nothing written beside them, no
/// staging file left), and stream 1 read back whole by an engine opened at `epoch`.
async fn four_objects_read_back(
    dir: &std::path::Path,
    faulty: Arc<FaultyStore>,
    config: StorageConfig,
    epoch: u64,
) {
    let names = object_names(&dir.join("objects"));
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(names.iter().all(|n| !n.contains('#')), "{names:?}");
    faulty.set_faults(FaultConfig::default());
    let engine = open_engine_with_store(dir, config, 32 << 20, faulty).await;
    engine.open_stream(1, epoch).await.unwrap();
    let frames = read_all(&engine, 1, 0).await;
    assert_eq!(frames.len(), 4 * 48);
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(check_payload(&f.payload), (1, i as u64, i as u64));
    }
    engine.close().await.unwrap();
}

/// Closing the engine does not wait for a compaction under way (at the maximum produce rate a
/// broker's shutdown waited 30 s for one): the compaction stops, its upload is aborted, and
/// every record reads back after a restart, from the objects it did not replace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_stops_a_compaction_under_way() {
    let dir = tempfile::tempdir().unwrap();
    let (faulty, config) = four_objects(dir.path()).await;
    // Again with maintenance every 100 ms: it compacts the four ranges.
    let compacting = StorageConfig {
        maintenance_interval: Duration::from_millis(100),
        ..config.clone()
    };
    let engine = open_engine_with_store(dir.path(), compacting, 32 << 20, faulty.clone()).await;
    engine.open_stream(1, 2).await.unwrap();
    slow_parts_under_way(&engine, &faulty).await;
    tokio::time::timeout(Duration::from_secs(30), engine.close())
        .await
        .expect("close waited for the compaction's parts")
        .unwrap();
    assert_eq!(engine.meters().compactions.get(), 0);
    drop(engine);
    four_objects_read_back(dir.path(), faulty, config, 3).await;
}

/// Compaction waits while uploads are behind (the WAL holds more than a quarter of its
/// capacity), and goes on once an upload drains the WAL: compaction can be done later, the
/// WAL's room cannot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_yields_to_uploads_the_wal_waits_for() {
    let dir = tempfile::tempdir().unwrap();
    let config = by_hand_config();
    let engine = open_engine(dir.path(), config, WAL).await;
    engine.open_stream(1, 1).await.unwrap();
    engine.open_stream(2, 1).await.unwrap();
    // Four small ranges of stream 1: compaction would merge them.
    for i in 0..16u64 {
        engine
            .append(1, 1, 1, i as i64, |b| payload(1, b, i, 16 << 10))
            .await
            .unwrap();
        if i % 4 == 3 {
            engine.flush().await.unwrap();
        }
    }
    // 3 MiB of stream 2 not uploaded: more than a quarter of the 8 MiB WAL.
    for i in 0..48u64 {
        engine
            .append(2, 1, 1, i as i64, |b| payload(2, b, i, 64 << 10))
            .await
            .unwrap();
    }
    let compacting = tokio::spawn({
        let engine = engine.clone();
        async move { engine.compact().await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !compacting.is_finished(),
        "compaction went on beside a full WAL"
    );
    assert_eq!(engine.meters().compactions.get(), 0);
    engine.flush().await.unwrap();
    let written = tokio::time::timeout(Duration::from_secs(30), compacting)
        .await
        .expect("compaction goes on once the WAL drains")
        .unwrap()
        .unwrap();
    assert_eq!(written, 1);
    for (stream, n) in [(1u64, 16usize), (2, 48)] {
        let frames = read_all(&engine, stream, 0).await;
        assert_eq!(frames.len(), n);
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(check_payload(&f.payload), (stream, i as u64, i as u64));
        }
    }
    engine.close().await.unwrap();
}

/// Objects under `dir`, by name.
fn object_names(dir: &std::path::Path) -> Vec<String> {
    let mut names = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                dirs.push(e.path());
            } else {
                names.push(e.file_name().to_string_lossy().into_owned());
            }
        }
    }
    names
}

/// `stop_background` (a broker's shutdown calls it first) ends a rewrite of the cleaner of
/// compacted topics under way: it fails with `Closed`, its upload aborted, nothing swapped in,
/// while appends, uploads and reads go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_background_work_ends_a_rewrite_under_way() {
    let dir = tempfile::tempdir().unwrap();
    let (faulty, config) = four_objects(dir.path()).await;
    let engine = open_engine_with_store(dir.path(), config.clone(), 32 << 20, faulty.clone()).await;
    engine.open_stream(1, 2).await.unwrap();
    let rewriting = tokio::spawn({
        let engine = engine.clone();
        async move {
            let same = |f: &weir_storage::Frame| f.clone();
            engine.rewrite_stream(1, u64::MAX, &same).await
        }
    });
    slow_parts_under_way(&engine, &faulty).await;
    engine.stop_background();
    let r = tokio::time::timeout(Duration::from_secs(30), rewriting)
        .await
        .expect("the rewrite went on after stop_background")
        .unwrap();
    assert!(matches!(r, Err(StorageError::Closed)), "{r:?}");
    assert_eq!(engine.meters().compactions.get(), 0);
    let names = object_names(&dir.path().join("objects"));
    assert_eq!(names.len(), 4, "{names:?}");
    // Appends, uploads and reads go on.
    faulty.set_faults(FaultConfig::default());
    let i = 4 * 48u64;
    engine
        .append(1, 2, 1, i as i64, |b| payload(1, b, i, 64 << 10))
        .await
        .unwrap();
    engine.flush().await.unwrap();
    let frames = read_all(&engine, 1, 0).await;
    assert_eq!(frames.len(), 4 * 48 + 1);
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(check_payload(&f.payload), (1, i as u64, i as u64));
    }
    engine.close().await.unwrap();
}

#[tokio::test]
async fn a_stream_handle_follows_its_stream_until_the_engine_forgets_it() {
    // A partition reads its offsets through the handle it took when it opened the stream; once
    // the stream is closed, dropped or opened again at a newer epoch, the handle must answer as
    // a look-up by id would (nothing), not with the old stream's offsets.
    let dir = tempfile::tempdir().unwrap();
    let engine = open_engine(dir.path(), small_config(), WAL).await;
    engine.open_stream(1, 1).await.unwrap();
    engine.open_stream(2, 1).await.unwrap();
    let h1 = engine.stream_handle(1).unwrap();
    let h2 = engine.stream_handle(2).unwrap();
    assert!(engine.stream_handle(3).is_none());
    for i in 0..5u64 {
        engine
            .append(1, 1, 1, i as i64, |b| payload(1, b, i, 100))
            .await
            .unwrap();
    }
    assert_eq!(h1.info(), engine.stream_info(1));
    assert_eq!(h1.info().unwrap().high_watermark, 5);
    assert_eq!(*h1.watch_high_watermark().unwrap().borrow(), 5);
    engine.close_stream(1).await.unwrap();
    assert_eq!(engine.stream_info(1), None);
    assert_eq!(h1.info(), None);
    assert!(h1.watch_high_watermark().is_none());
    engine.drop_stream(2);
    assert_eq!(h2.info(), None);
    // Opened again: a new handle sees it, the old one still does not.
    engine.open_stream(1, 2).await.unwrap();
    let again = engine.stream_handle(1).unwrap();
    assert_eq!(again.info().unwrap().high_watermark, 5);
    assert_eq!(h1.info(), None);
    // A newer epoch replaces the stream: the handle taken before sees it gone.
    engine.open_stream(1, 3).await.unwrap();
    assert_eq!(again.info(), None);
    assert_eq!(engine.stream_handle(1).unwrap().info().unwrap().epoch, 3);
    engine.close().await.unwrap();
}

#[tokio::test]
async fn a_fetch_waiting_on_a_stream_is_woken_when_the_stream_is_closed_or_dropped() {
    // A fetch parked on a partition's high watermark must learn at once that the partition
    // left (moved to another broker, deleted), so that it is answered NOT_LEADER_OR_FOLLOWER
    // and its consumer follows the partition, instead of waiting out fetch.max.wait.ms (the
    // consumer's gap of every move was 500 ms).
    let dir = tempfile::tempdir().unwrap();
    let engine = open_engine(dir.path(), small_config(), WAL).await;
    engine.open_stream(1, 1).await.unwrap();
    engine.open_stream(2, 1).await.unwrap();
    engine
        .append(1, 1, 1, 0, |b| payload(1, b, 0, 100))
        .await
        .unwrap();
    // Handles held, as the partitions that a fetch holds keep theirs.
    let (h1, h2) = (
        engine.stream_handle(1).unwrap(),
        engine.stream_handle(2).unwrap(),
    );
    let mut closed = h1.watch_high_watermark().unwrap();
    let mut dropped = h2.watch_high_watermark().unwrap();
    closed.borrow_and_update();
    dropped.borrow_and_update();
    let woken = Duration::from_secs(5);
    let close = engine.close_stream(1);
    let (changed, closing) = tokio::join!(tokio::time::timeout(woken, closed.changed()), close);
    closing.unwrap();
    assert!(
        changed.is_ok(),
        "a watcher of a closed stream was not woken"
    );
    engine.drop_stream(2);
    assert!(
        tokio::time::timeout(woken, dropped.changed()).await.is_ok(),
        "a watcher of a dropped stream was not woken"
    );
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_append_is_in_the_offsets_every_reader_sees() {
    // Readers take a stream's offsets without its lock (a fetch of 10,000 partitions reads
    // 10,000 of them): what they read must already include an append once it is acknowledged,
    // or a consumer told of a write, or a fetch woken by the high watermark's watch, would read
    // the offsets from before it. The WAL's thread completes appends; the waiter wakes on
    // another thread, so a window between the two shows within a few hundred appends.
    let dir = tempfile::tempdir().unwrap();
    let engine = open_engine(dir.path(), small_config(), WAL).await;
    engine.open_stream(1, 1).await.unwrap();
    let h = engine.stream_handle(1).unwrap();
    // A reader woken by the watch sees at least what the watch says.
    let mut watch = h.watch_high_watermark().unwrap();
    let reader = {
        let h = h.clone();
        tokio::spawn(async move {
            let mut behind = 0;
            while watch.changed().await.is_ok() {
                let told = *watch.borrow_and_update();
                if h.info().map_or(told, |i| i.high_watermark) < told {
                    behind += 1;
                }
                if told >= 2_000 {
                    break;
                }
            }
            behind
        })
    };
    for i in 0..2_000u64 {
        let appended = engine
            .append(1, 1, 1, i as i64, |b| payload(1, b, i, 100))
            .await
            .unwrap();
        let hw = h.info().unwrap().high_watermark;
        assert_eq!(
            hw,
            i + 1,
            "append {i} acknowledged ({appended:?}), high watermark {hw}"
        );
    }
    assert_eq!(
        reader.await.unwrap(),
        0,
        "times the watch ran ahead of the offsets"
    );
    engine.close().await.unwrap();
}

/// Retention reads a stream's ranges from the metadata store only when the stream changed or
/// its oldest data reached the age limit: an idle broker with many partitions does not read
/// every stream's ranges at every round.
#[tokio::test]
async fn retention_reads_ranges_only_when_a_stream_changed_or_its_time_came() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        upload_bytes: u64::MAX,
        upload_interval: Duration::from_secs(3600),
        ..small_config()
    };
    let engine = open_engine(dir.path(), config, WAL).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let hour = Retention {
        ms: Some(3_600_000),
        bytes: None,
    };
    // Stream 1 is empty; stream 2 holds fresh data; stream 3's oldest object reaches the hour's
    // limit three seconds from now.
    for id in 1..=3 {
        engine.open_stream(id, 1).await.unwrap();
        engine.set_retention(id, hour).unwrap();
    }
    let due_soon = now - 3_600_000 + 3_000;
    for (id, ts) in [(2, now), (3, due_soon), (3, now)] {
        engine
            .append(id, 1, 1, ts, |b| payload(id, b, 0, 1000))
            .await
            .unwrap();
        engine.flush().await.unwrap();
    }
    let checks = || engine.meters().retention_checks.get();
    engine.run_maintenance().await.unwrap();
    assert_eq!(checks(), 2, "the streams with data are read once");
    engine.run_maintenance().await.unwrap();
    assert_eq!(checks(), 2, "nothing changed, nothing is due: nothing read");

    // New data in stream 2, or a new setting, is checked again.
    engine
        .append(2, 1, 1, now, |b| payload(2, b, 1, 1000))
        .await
        .unwrap();
    engine.flush().await.unwrap();
    engine.run_maintenance().await.unwrap();
    assert_eq!(checks(), 3);
    engine
        .set_retention(
            2,
            Retention {
                ms: Some(3_600_000),
                bytes: Some(1_000),
            },
        )
        .unwrap();
    engine.run_maintenance().await.unwrap();
    assert_eq!(checks(), 4);
    assert_eq!(engine.stream_info(2).unwrap().start_offset, 1);

    // Stream 3's first object goes once its time has come, with no change to the stream.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    engine.run_maintenance().await.unwrap();
    assert_eq!(engine.stream_info(3).unwrap().start_offset, 1);
    engine.close().await.unwrap();
}

/// Retention by time reads a stream's ranges a page at a time (256), as far as the first range it
/// keeps, not the whole stream: here 280 ranges expired, over more than one page, then 20 kept.
#[tokio::test]
async fn retention_by_time_drops_expired_ranges_over_several_pages() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        upload_bytes: u64::MAX,
        upload_interval: Duration::from_secs(3600),
        ..small_config()
    };
    let engine = open_engine(dir.path(), config, WAL).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    engine.open_stream(1, 1).await.unwrap();
    for i in 0..300u64 {
        let ts = if i < 280 { now - 7_200_000 } else { now };
        engine
            .append(1, 1, 1, ts, |b| payload(1, b, i, 100))
            .await
            .unwrap();
        engine.flush().await.unwrap();
    }
    engine
        .set_retention(
            1,
            Retention {
                ms: Some(3_600_000),
                bytes: None,
            },
        )
        .unwrap();
    engine.run_maintenance().await.unwrap();
    assert_eq!(engine.stream_info(1).unwrap().start_offset, 280);
    let frames = read_all(&engine, 1, 280).await;
    assert_eq!(frames.len(), 20);
    engine.close().await.unwrap();
}

#[tokio::test]
async fn a_retention_hold_keeps_what_is_not_read_yet() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        upload_bytes: u64::MAX,
        upload_interval: Duration::from_secs(3600),
        ..small_config()
    };
    let engine = open_engine(dir.path(), config, WAL).await;
    engine.open_stream(1, 1).await.unwrap();
    let old = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 7_200_000;
    // Ten objects of ten records each, all two hours old: an hour's retention wants them all gone.
    for round in 0..10u64 {
        for j in 0..10u64 {
            engine
                .append(1, 1, 1, old, |b| payload(1, b, round * 10 + j, 1000))
                .await
                .unwrap();
        }
        engine.flush().await.unwrap();
    }
    engine
        .set_retention(
            1,
            Retention {
                ms: Some(3_600_000),
                bytes: None,
            },
        )
        .unwrap();
    // A reader (a table) has the first 35 records: retention stops at the object holding 35.
    engine.set_retention_hold(1, Some(35)).unwrap();
    engine.run_maintenance().await.unwrap();
    assert_eq!(engine.stream_info(1).unwrap().start_offset, 35);
    // Not below the start either: a hold under it changes nothing.
    engine.set_retention_hold(1, Some(10)).unwrap();
    engine.run_maintenance().await.unwrap();
    assert_eq!(engine.stream_info(1).unwrap().start_offset, 35);
    engine.set_retention_hold(1, None).unwrap();
    engine.run_maintenance().await.unwrap();
    assert_eq!(engine.stream_info(1).unwrap().start_offset, 100);
    engine.close().await.unwrap();
}
