//! The object WAL: appends acknowledged once their object is PUT and committed, several objects
//! in flight committed in order, failures that rewind, stale leaders refused, and streams of
//! both kinds (and switching between them) in one engine.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    check_payload, open_engine_with_store, payload, read_all, small_config, thread_nice,
    HintedStore,
};
use weir_meta::{MetaStore, SqliteMetaStore};
use weir_storage::objstore::{FaultConfig, FaultyStore};
use weir_storage::{Engine, StorageConfig, StorageError, StreamOptions, WalKind};

fn object_config() -> StorageConfig {
    StorageConfig {
        object_wal_linger: Duration::from_millis(5),
        object_wal_bytes: 64 << 10,
        object_wal_max_in_flight: 4,
        ..small_config()
    }
}

fn slow_store(put_ms: u64) -> FaultyStore {
    FaultyStore::new(
        Arc::new(object_store::memory::InMemory::new()),
        FaultConfig {
            put_latency: Duration::from_millis(put_ms),
            ..Default::default()
        },
    )
}

async fn diskless(
    meta: Arc<dyn MetaStore>,
    store: Arc<dyn object_store::ObjectStore>,
    config: StorageConfig,
) -> Engine {
    Engine::open_without_wal(config, meta, store)
        .await
        .expect("open engine")
}

fn sqlite(dir: &std::path::Path) -> Arc<dyn MetaStore> {
    Arc::new(SqliteMetaStore::open(&dir.join("meta.sqlite")).expect("open meta"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_append_is_already_committed_and_survives_a_new_engine() {
    let dir = tempfile::tempdir().unwrap();
    let meta = sqlite(dir.path());
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(slow_store(0));
    let engine = diskless(Arc::clone(&meta), Arc::clone(&store), object_config()).await;
    for s in 1..=3 {
        engine.open_stream(s, 1).await.unwrap();
    }
    for i in 0..60u64 {
        let s = 1 + i % 3;
        let a = engine
            .append(s, 1, 2, i as i64, |base| payload(s, base, i, 700))
            .await
            .unwrap();
        // Durable means committed: the metadata store has it before the caller hears.
        let m = meta.get_stream(s).await.unwrap().unwrap();
        assert!(
            m.end_offset >= a.end_offset,
            "acked {a:?} but committed {m:?}"
        );
        let info = engine.stream_info(s).unwrap();
        assert_eq!(info.committed_end, info.high_watermark);
    }
    assert!(engine.meters().object_wal_objects.get() > 0);
    // The uploader never uploads these streams: the object WAL's objects are the data objects.
    assert_eq!(engine.meters().uploads.get(), 0);
    // Dropped without a clean close, as a crash would: another engine (another broker) opens
    // the streams at a higher epoch and reads everything, with nothing to recover.
    drop(engine);
    let other = diskless(Arc::clone(&meta), store, object_config()).await;
    for s in 1..=3 {
        let info = other.open_stream(s, 2).await.unwrap();
        assert_eq!(info.high_watermark, 40);
        let gets = other.object_meters().gets.get();
        let frames = read_all(&other, s, 0).await;
        // One GET per small object: its tail holds its index and its blocks.
        let objects = meta.ranges(s, 0, 1000).await.unwrap().len() as u64;
        assert_eq!(other.object_meters().gets.get() - gets, objects);
        assert_eq!(frames.len(), 20);
        for f in &frames {
            let (stream, base, _) = check_payload(&f.payload);
            assert_eq!((stream, base), (s, f.base_offset));
        }
    }
    other.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_in_flight_together_span_several_objects_and_commit_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let meta = sqlite(dir.path());
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(slow_store(40));
    let engine = diskless(Arc::clone(&meta), store, object_config()).await;
    engine.open_stream(1, 1).await.unwrap();
    // A producer with many requests in flight: none waits for the previous one's object.
    let mut pending = Vec::new();
    for i in 0..40u64 {
        let p = engine
            .append_with(1, 1, |base, _| {
                Some(weir_storage::NewBatch {
                    record_count: 1,
                    max_timestamp: i as i64,
                    payload: payload(1, base, i, 600),
                })
            })
            .unwrap()
            .unwrap();
        pending.push(p);
        if i % 8 == 7 {
            // Let the linger seal an object now and then, so that several are in flight.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let mut last = 0;
    for p in pending {
        let a = p.wait().await.unwrap();
        assert_eq!(a.base_offset, last);
        last = a.end_offset;
    }
    // The ranges, one per object, are contiguous in the index, in offset order.
    let ranges = meta.ranges(1, 0, 1000).await.unwrap();
    assert!(
        ranges.len() >= 3,
        "only {} objects for 40 appends sent over 50 ms",
        ranges.len()
    );
    let mut next = 0;
    for r in &ranges {
        assert_eq!(r.start_offset, next);
        next = r.end_offset;
    }
    assert_eq!(next, 40);
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_put_fails_the_append_and_the_stream_takes_its_offset_again() {
    let dir = tempfile::tempdir().unwrap();
    let meta = sqlite(dir.path());
    let faulty = slow_store(0);
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(faulty.clone());
    let engine = diskless(meta, store, object_config()).await;
    engine.open_stream(1, 1).await.unwrap();
    engine
        .append(1, 1, 1, 0, |b| payload(1, b, 0, 100))
        .await
        .unwrap();
    faulty.set_faults(FaultConfig {
        put_error_rate: 1.0,
        ..Default::default()
    });
    let e = engine
        .append(1, 1, 1, 0, |b| payload(1, b, 1, 100))
        .await
        .unwrap_err();
    assert!(e.is_retriable(), "{e}");
    assert!(engine.meters().object_wal_failures.get() >= 1);
    faulty.set_faults(FaultConfig::default());
    let a = engine
        .append(1, 1, 1, 0, |b| payload(1, b, 2, 100))
        .await
        .unwrap();
    assert_eq!(
        a.base_offset, 1,
        "the failed append's offset is taken again"
    );
    let frames = read_all(&engine, 1, 0).await;
    let msgs: Vec<u64> = frames.iter().map(|f| check_payload(&f.payload).2).collect();
    assert_eq!(msgs, vec![0, 2]);
    engine.close().await.unwrap();
}

/// A PUT that hangs (a store that accepts and never answers, or answers slower than anyone
/// waits) fails its append retriably within `object_wal_put_timeout`, however many attempts
/// and client retries were left; the stream takes the offset again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_that_hangs_fails_the_append_within_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let meta = sqlite(dir.path());
    let faulty = slow_store(0);
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(faulty.clone());
    let config = StorageConfig {
        object_wal_put_timeout: Duration::from_millis(500),
        ..object_config()
    };
    let engine = diskless(meta, store, config).await;
    engine.open_stream(1, 1).await.unwrap();
    faulty.set_faults(FaultConfig {
        put_latency: Duration::from_secs(600),
        ..Default::default()
    });
    let started = std::time::Instant::now();
    let e = tokio::time::timeout(
        Duration::from_secs(60),
        engine.append(1, 1, 1, 0, |b| payload(1, b, 0, 100)),
    )
    .await
    .expect("the append did not end")
    .unwrap_err();
    assert!(e.is_retriable(), "{e}");
    assert!(
        e.to_string().contains("did not finish within 500 ms"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    faulty.set_faults(FaultConfig::default());
    let a = engine
        .append(1, 1, 1, 0, |b| payload(1, b, 1, 100))
        .await
        .unwrap();
    assert_eq!(
        a.base_offset, 0,
        "the failed append's offset is taken again"
    );
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_leader_cannot_acknowledge() {
    let dir = tempfile::tempdir().unwrap();
    let meta = sqlite(dir.path());
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(slow_store(0));
    let old = diskless(Arc::clone(&meta), Arc::clone(&store), object_config()).await;
    old.open_stream(1, 1).await.unwrap();
    old.append(1, 1, 1, 0, |b| payload(1, b, 0, 100))
        .await
        .unwrap();
    // A paused broker's partition taken over elsewhere: the new leader opens it at epoch 2.
    let new = diskless(Arc::clone(&meta), store, object_config()).await;
    new.open_stream(1, 2).await.unwrap();
    let e = old
        .append(1, 1, 1, 0, |b| payload(1, b, 1, 100))
        .await
        .unwrap_err();
    assert!(matches!(e, StorageError::Fenced { .. }), "{e}");
    let a = new
        .append(1, 2, 1, 0, |b| payload(1, b, 2, 100))
        .await
        .unwrap();
    assert_eq!(a.base_offset, 1);
    let msgs: Vec<u64> = read_all(&new, 1, 0)
        .await
        .iter()
        .map(|f| check_payload(&f.payload).2)
        .collect();
    assert_eq!(msgs, vec![0, 2]);
    new.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_engine_runs_both_kinds_and_a_stream_switches_between_them() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(slow_store(0));
    // No upload by time: the file WAL's stream must still be waiting for one below, however
    // slowly a loaded machine runs the appends (at 500 ms one came first under load).
    let config = StorageConfig {
        upload_interval: Duration::from_secs(3600),
        ..object_config()
    };
    let engine = open_engine_with_store(dir.path(), config, 8 << 20, store).await;
    engine.open_stream(1, 1).await.unwrap();
    engine
        .open_stream_with(
            2,
            1,
            StreamOptions {
                wal_kind: WalKind::Object,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    for i in 0..10u64 {
        for s in [1, 2] {
            engine
                .append(s, 1, 1, 0, |b| payload(s, b, i, 200))
                .await
                .unwrap();
        }
    }
    let file = engine.stream_info(1).unwrap();
    let object = engine.stream_info(2).unwrap();
    // The file WAL's stream waits for the uploader; the object WAL's is committed.
    assert_eq!((file.high_watermark, file.committed_end), (10, 0));
    assert_eq!((object.high_watermark, object.committed_end), (10, 10));

    // Stream 1 moves to the object WAL while a producer goes on: what the WAL file holds is
    // uploaded first, then its appends are committed directly.
    let producer = {
        let engine = engine.clone();
        tokio::spawn(async move {
            for i in 10..40u64 {
                engine
                    .append(1, 1, 1, 0, |b| payload(1, b, i, 200))
                    .await
                    .unwrap();
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    engine.set_wal_kind(1, WalKind::Object).await.unwrap();
    producer.await.unwrap();
    let info = engine.stream_info(1).unwrap();
    assert_eq!((info.high_watermark, info.committed_end), (40, 40));
    // And back to the file WAL.
    engine.set_wal_kind(1, WalKind::File).await.unwrap();
    engine
        .append(1, 1, 1, 0, |b| payload(1, b, 40, 200))
        .await
        .unwrap();
    assert_eq!(engine.stream_info(1).unwrap().committed_end, 40);
    engine.flush().await.unwrap();
    let msgs: Vec<u64> = read_all(&engine, 1, 0)
        .await
        .iter()
        .map(|f| check_payload(&f.payload).2)
        .collect();
    assert_eq!(msgs, (0..41).collect::<Vec<_>>());
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_failed_while_they_waited_for_their_object_are_left_out_of_it() {
    // The chaos suite found this: an object's PUT fails and its stream rewinds while a later
    // batch of the stream waits in the next object; the stream then hands over a new batch at
    // the rewound offset, which joins the same object behind the failed one.
    let dir = tempfile::tempdir().unwrap();
    let meta = sqlite(dir.path());
    let faulty = slow_store(0);
    faulty.set_faults(FaultConfig {
        put_error_rate: 1.0,
        ..Default::default()
    });
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(faulty.clone());
    let config = StorageConfig {
        object_wal_linger: Duration::from_millis(600),
        ..object_config()
    };
    let engine = diskless(meta, store, config).await;
    engine.open_stream(1, 1).await.unwrap();
    let append = |msg: u64| {
        engine
            .append_with(1, 1, |base, _| {
                Some(weir_storage::NewBatch {
                    record_count: 1,
                    max_timestamp: 0,
                    payload: payload(1, base, msg, 100),
                })
            })
            .unwrap()
            .unwrap()
    };
    let first = append(0);
    // Sealed with the first object? No: it arrives after that object was sealed, and waits
    // in the next one.
    tokio::time::sleep(Duration::from_millis(650)).await;
    let second = append(1);
    assert_eq!(second.appended.base_offset, 1);
    assert!(first.wait().await.is_err(), "the failing PUT acknowledged");
    faulty.set_faults(FaultConfig::default());
    // The rewind failed the second batch too; a new one takes offset 0 and joins its object.
    let third = append(2);
    assert_eq!(third.appended.base_offset, 0);
    assert!(second.wait().await.is_err());
    let a = tokio::time::timeout(Duration::from_secs(20), third.wait())
        .await
        .expect("the new batch was never acknowledged (its object did not commit)")
        .unwrap();
    assert_eq!((a.base_offset, a.end_offset), (0, 1));
    let msgs: Vec<u64> = read_all(&engine, 1, 0)
        .await
        .iter()
        .map(|f| check_payload(&f.payload).2)
        .collect();
    assert_eq!(msgs, vec![2]);
    engine.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_sharing_small_objects_are_read_with_one_get_per_object() {
    // Compaction reads the streams of the object WAL's small objects one after another: the
    // first read of an object keeps every stream's blocks, so the next stream costs no GET.
    let dir = tempfile::tempdir().unwrap();
    let meta = sqlite(dir.path());
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(slow_store(0));
    let engine = diskless(Arc::clone(&meta), Arc::clone(&store), object_config()).await;
    for s in 1..=4 {
        engine.open_stream(s, 1).await.unwrap();
    }
    for i in 0..10u64 {
        let pending: Vec<_> = (1..=4)
            .map(|s| {
                engine
                    .append_with(s, 1, |base, _| {
                        Some(weir_storage::NewBatch {
                            record_count: 1,
                            max_timestamp: 0,
                            payload: payload(s, base, i, 300),
                        })
                    })
                    .unwrap()
                    .unwrap()
            })
            .collect();
        for p in pending {
            p.wait().await.unwrap();
        }
    }
    drop(engine);
    let other = diskless(Arc::clone(&meta), store, object_config()).await;
    let mut objects = std::collections::HashSet::new();
    for s in 1..=4 {
        other.open_stream(s, 2).await.unwrap();
        for r in meta.ranges(s, 0, 1000).await.unwrap() {
            objects.insert(r.object_id);
        }
    }
    assert!(
        objects.len() < 40,
        "the four streams never shared an object"
    );
    let gets = other.object_meters().gets.get();
    for s in 1..=4 {
        assert_eq!(read_all(&other, s, 0).await.len(), 10);
    }
    assert_eq!(
        other.object_meters().gets.get() - gets,
        objects.len() as u64,
        "an object shared by several streams was fetched more than once"
    );
    other.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_handed_to_a_slow_object_wal_are_bounded_and_the_rest_wait() {
    let dir = tempfile::tempdir().unwrap();
    let meta = sqlite(dir.path());
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(slow_store(50));
    // One object of 1 KiB in flight: at most 2 KiB handed over at a time.
    let config = StorageConfig {
        object_wal_bytes: 1 << 10,
        object_wal_max_in_flight: 1,
        wal_full_wait: Duration::from_secs(30),
        ..object_config()
    };
    let engine = diskless(meta, store, config).await;
    engine.open_stream(1, 1).await.unwrap();
    let pending: Vec<_> = (0..20u64)
        .map(|i| {
            engine
                .append_with(1, 1, |base, _| {
                    Some(weir_storage::NewBatch {
                        record_count: 1,
                        max_timestamp: 0,
                        payload: payload(1, base, i, 600),
                    })
                })
                .unwrap()
                .unwrap()
        })
        .collect();
    let handed = engine
        .meters()
        .object_wal_pending_bytes
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        handed <= (2 << 10) + 600,
        "{handed} bytes handed to the object WAL at once, of 12,000 appended"
    );
    for (i, p) in pending.into_iter().enumerate() {
        assert_eq!(p.wait().await.unwrap().base_offset, i as u64);
    }
    // The count drops once each object's writer finishes, just after its waiters are answered.
    let left = || {
        engine
            .meters()
            .object_wal_pending_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while left() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(left(), 0, "bytes still counted as handed over");
    engine.close().await.unwrap();
}

/// The recent index a leader feeds to brokers of other zones: each commit's ranges are kept
/// with the stream, contiguous; a read through them asks the metadata store nothing; a read
/// through ranges whose object is gone (compaction replaced and deleted it) is done again
/// through the metadata store and returns the same batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fed_ranges_spare_the_metadata_store_and_a_stale_one_falls_back_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let meta = sqlite(dir.path());
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(slow_store(0));
    let engine = diskless(Arc::clone(&meta), Arc::clone(&store), object_config()).await;
    engine.open_stream(1, 1).await.unwrap();
    for i in 0..20u64 {
        engine
            .append(1, 1, 2, i as i64, |base| payload(1, base, i, 500))
            .await
            .unwrap();
    }
    let end = engine.stream_info(1).unwrap().committed_end;
    assert_eq!(end, 40);
    let ranges = engine.ranges_since(1, 0);
    assert_eq!(ranges.first().map(|r| r.start_offset), Some(0));
    assert_eq!(ranges.last().map(|r| r.end_offset), Some(end));
    assert!(ranges
        .windows(2)
        .all(|w| w[0].end_offset == w[1].start_offset));
    assert!(engine.ranges_since(1, 30).iter().all(|r| r.end_offset > 30));
    // As the metadata store says them.
    let stored = meta.ranges(1, 0, 1000).await.unwrap();
    assert_eq!(ranges, stored);

    let expected = engine.read_objects(1, 0, end, 1 << 20, &[]).await.unwrap();
    assert_eq!(expected.last().map(|f| f.end_offset()), Some(end));
    let lookups = engine.meters().index_lookups.get();
    let through_fed = engine
        .read_objects(1, 0, end, 1 << 20, &ranges)
        .await
        .unwrap();
    assert_eq!(through_fed, expected);
    assert_eq!(
        engine.meters().index_lookups.get(),
        lookups,
        "the metadata store was asked"
    );

    // Ranges naming objects that are not there any more.
    let stale: Vec<_> = ranges
        .iter()
        .map(|r| weir_meta::RangeInfo {
            object_id: r.object_id + 1_000_000,
            object_key: format!("gone/{}", r.object_id),
            ..r.clone()
        })
        .collect();
    let fallback = engine
        .read_objects(1, 0, end, 1 << 20, &stale)
        .await
        .unwrap();
    assert_eq!(fallback, expected);
    assert!(engine.meters().index_lookups.get() > lookups);

    // A stream remembers its last 64 ranges, no more: one object per append here.
    for i in 20..100u64 {
        engine
            .append(1, 1, 2, i as i64, |base| payload(1, base, i, 500))
            .await
            .unwrap();
    }
    let recent = engine.ranges_since(1, 0);
    assert_eq!(recent.len(), 64);
    assert_eq!(recent.last().map(|r| r.end_offset), Some(200));
    assert!(recent
        .windows(2)
        .all(|w| w[0].end_offset == w[1].start_offset));
}

/// PostgreSQL down under the object WAL: an append waits while the store is down for less than
/// the patience of preparing an object (10 s; a restarted store also leaves dead connections in
/// the pool), and fails, retriable, once that is spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_waits_out_a_short_store_outage_and_fails_after_the_patience() {
    use weir_meta::testing::PgServer;
    let pg = PgServer::start().expect("postgres");
    let url = pg.create_database().await.expect("database");
    let meta: Arc<dyn MetaStore> = Arc::new(
        weir_meta::PostgresMetaStore::connect(&url)
            .await
            .expect("connect"),
    );
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(slow_store(0));
    let engine = diskless(meta, store, object_config()).await;
    engine.open_stream(1, 1).await.unwrap();
    engine
        .append(1, 1, 1, 0, |b| payload(1, b, 0, 100))
        .await
        .unwrap();

    pg.stop().expect("stop");
    let waiting = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.append(1, 1, 1, 0, |b| payload(1, b, 1, 100)).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!waiting.is_finished(), "the append failed at once");
    pg.start_again().expect("start");
    let a = waiting
        .await
        .unwrap()
        .expect("the append rode out the outage");
    assert_eq!(a.base_offset, 1);
    assert_eq!(engine.meters().object_wal_failures.get(), 0);

    pg.stop().expect("stop");
    let started = std::time::Instant::now();
    let e = engine
        .append(1, 1, 1, 0, |b| payload(1, b, 2, 100))
        .await
        .unwrap_err();
    assert!(e.is_retriable(), "{e}");
    assert!(
        started.elapsed() >= Duration::from_secs(9),
        "failed after {:?}, before the patience was spent",
        started.elapsed()
    );
    assert_eq!(engine.meters().object_wal_failures.get(), 1);
    pg.start_again().expect("start");
    let frames = read_all(&engine, 1, 0).await;
    let msgs: Vec<u64> = frames.iter().map(|f| check_payload(&f.payload).2).collect();
    assert_eq!(msgs, vec![0, 1]);
    engine.close().await.unwrap();
}

/// Producers wait for the object WAL's PUTs: they run at the broker's priority, not on the niced
/// threads of uploads nothing waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_object_wal_puts_at_the_brokers_priority() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(HintedStore::new());
    let config = StorageConfig {
        catchup_nice: 5,
        ..object_config()
    };
    let own = thread_nice();
    let engine = diskless(sqlite(dir.path()), store.clone(), config).await;
    engine.open_stream(1, 1).await.unwrap();
    for i in 0..20u64 {
        engine
            .append(1, 1, 1, i as i64, |base| payload(1, base, i, 700))
            .await
            .unwrap();
    }
    let puts = store.take();
    assert!(!puts.is_empty());
    assert!(
        puts.iter().all(|&(_, nice)| nice == own),
        "object WAL PUTs on niced threads: {puts:?} (the broker's nice is {own})"
    );
    assert_eq!(read_all(&engine, 1, 0).await.len(), 20);
    engine.close().await.unwrap();
}

/// A PUT budget: a trickle of appends, each alone longer than the linger, makes an object per
/// append without a budget; with one, objects wait for their turn and batches join them, so the
/// count follows the budget, and nothing is lost or reordered. An object that fills is sealed
/// at once, budget or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_budget_bounds_the_objects_of_a_trickle_but_not_of_a_flood() {
    async fn objects_for(budget: f64, appends: u64, size: usize, pause_ms: u64) -> (u64, Engine) {
        let dir = tempfile::tempdir().unwrap();
        let meta = sqlite(dir.path());
        let store: Arc<dyn object_store::ObjectStore> = Arc::new(slow_store(0));
        let config = StorageConfig {
            object_wal_max_puts_per_sec: budget,
            ..object_config()
        };
        let engine = Arc::new(diskless(meta, store, config).await);
        engine.open_stream(1, 1).await.unwrap();
        // Producers with many appends in flight: each waits for its object, the next goes on.
        let mut tasks = Vec::new();
        for i in 0..appends {
            let e = Arc::clone(&engine);
            tasks.push(tokio::spawn(async move {
                e.append(1, 1, 1, i as i64, |b| payload(1, b, i, size))
                    .await
            }));
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let objects = engine.meters().object_wal_objects.get();
        let mut msgs: Vec<u64> = read_all(&engine, 1, 0)
            .await
            .iter()
            .map(|f| check_payload(&f.payload).2)
            .collect();
        if pause_ms == 0 {
            // Appends spawned at once reach the engine in the order the tasks happen to run:
            // each exactly once is what can be asserted.
            msgs.sort_unstable();
        }
        assert_eq!(msgs, (0..appends).collect::<Vec<_>>());
        (objects, Arc::into_inner(engine).expect("one engine"))
    }
    // 60 appends 10 ms apart (600 ms), linger 5 ms: one object each without a budget.
    let (unbounded, e) = objects_for(0.0, 60, 100, 10).await;
    e.close().await.unwrap();
    assert!(unbounded >= 40, "{unbounded} objects without a budget");
    // At 5 objects a second: the first at once, then one per 200 ms.
    let (budgeted, e) = objects_for(5.0, 60, 100, 10).await;
    e.close().await.unwrap();
    assert!(
        budgeted <= 6,
        "{budgeted} objects at a budget of 5/s over 600 ms"
    );
    // 40 KiB appends fill a 64 KiB object every second append: sealed on size, not held.
    let (flood, e) = objects_for(1.0, 40, 40 << 10, 0).await;
    e.close().await.unwrap();
    assert!(flood >= 15, "{flood} objects of a flood at a budget of 1/s");
}
