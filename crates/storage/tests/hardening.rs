//! Findings of the hardening review, each as a test that failed before its fix: appends that
//! wait for WAL room keep their order, recovery never drops data after a gap, and a stream
//! that vanished from the metadata store does not hold back the others' uploads.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{open_engine_with_store, payload, small_config};
use weir_meta::SqliteMetaStore;
use weir_storage::objstore::{FaultConfig, FaultyStore};
use weir_storage::{Engine, StorageConfig};
use weir_wal::{FileWal, FileWalConfig, Wal, WalRecord};

const WAL: u64 = 1 << 20;

fn no_puts() -> FaultConfig {
    FaultConfig {
        put_error_rate: 1.0,
        ..FaultConfig::default()
    }
}

/// An engine whose WAL is nearly full (less than 300 KiB free) while every upload fails, so
/// nothing frees room until the test lifts the fault.
async fn nearly_full(wal_full_wait: Duration) -> (tempfile::TempDir, Engine, Arc<FaultyStore>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FaultyStore::new(
        Arc::new(object_store::memory::InMemory::new()),
        no_puts(),
    ));
    let config = StorageConfig {
        wal_full_wait,
        ..small_config()
    };
    let engine = open_engine_with_store(dir.path(), config, WAL, store.clone()).await;
    engine.open_stream(1, 1).await.unwrap();
    let mut i = 0;
    while engine.wal().usage().used + (300 << 10) < WAL {
        engine
            .append(1, 1, 1, 0, |b| payload(1, b, i, 60 << 10))
            .await
            .unwrap();
        i += 1;
    }
    (dir, engine, store)
}

/// A batch that must wait for WAL room is not overtaken by a later, smaller one that would fit:
/// Kafka never reorders the requests of one connection, and a partition appends in call order.
#[tokio::test]
async fn a_waiting_append_is_not_overtaken_by_a_smaller_one() {
    let (_dir, engine, store) = nearly_full(Duration::from_secs(60)).await;
    let big = {
        let e = engine.clone();
        tokio::spawn(async move {
            e.append(1, 1, 1, 0, |b| payload(1, b, 1000, 300 << 10))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!big.is_finished(), "the large append must wait for room");
    let small = {
        let e = engine.clone();
        tokio::spawn(async move { e.append(1, 1, 1, 0, |b| payload(1, b, 1001, 1000)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !small.is_finished(),
        "the small append must wait behind the large one, not overtake it"
    );
    store.set_faults(FaultConfig::default());
    let big = big.await.unwrap().expect("large append");
    let small = small.await.unwrap().expect("small append");
    assert!(
        big.base_offset < small.base_offset,
        "appended out of order: large at {}, small at {}",
        big.base_offset,
        small.base_offset
    );
    assert_eq!(small.base_offset, big.end_offset);
    engine.close().await.unwrap();
}

/// Appends that wait past `wal_full_wait` fail, with every append behind them, and the stream
/// goes back to the first of them: no hole, and the next append takes that offset.
#[tokio::test]
async fn waiting_appends_time_out_together_and_leave_no_hole() {
    let (_dir, engine, store) = nearly_full(Duration::from_millis(400)).await;
    let before = engine.stream_info(1).unwrap().high_watermark;
    let waiting: Vec<_> = (0..3)
        .map(|k| {
            let e = engine.clone();
            let size = if k == 0 { 300 << 10 } else { 1000 };
            tokio::spawn(async move {
                e.append(1, 1, 1, 0, |b| payload(1, b, 2000 + k, size))
                    .await
            })
        })
        .collect();
    for w in waiting {
        assert!(w.await.unwrap().is_err(), "a timed-out append must fail");
    }
    let info = engine.stream_info(1).unwrap();
    assert_eq!(info.high_watermark, before);
    store.set_faults(FaultConfig::default());
    let next = engine
        .append(1, 1, 1, 0, |b| payload(1, b, 3000, 1000))
        .await
        .unwrap();
    assert_eq!(
        next.base_offset, before,
        "the stream rewound to the first failed append"
    );
    engine.close().await.unwrap();
}

/// Recovery that meets a gap in a stream's WAL records stops with a clear error and leaves the
/// WAL as it is; it used to drop everything after the gap and trim the WAL.
#[tokio::test]
async fn recovery_refuses_a_gap_and_keeps_the_wal() {
    let dir = tempfile::tempdir().unwrap();
    let meta = SqliteMetaStore::open(&dir.path().join("meta.sqlite")).unwrap();
    weir_meta::ObjectIndex::open_stream(&meta, 1, 1)
        .await
        .unwrap();
    let wal_config = || FileWalConfig {
        capacity: 4 << 20,
        ..FileWalConfig::new(dir.path().join("wal"))
    };
    {
        let wal = FileWal::open(wal_config()).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for base in [0u64, 1, 5] {
            let tx = tx.clone();
            wal.append(
                WalRecord {
                    stream_id: 1,
                    epoch: 1,
                    base_offset: base,
                    record_count: 1,
                    max_timestamp: 0,
                    payload: payload(1, base, base, 100),
                },
                Box::new(move |r| {
                    let _ = tx.send(r.is_ok());
                }),
            )
            .unwrap();
        }
        for _ in 0..3 {
            assert_eq!(rx.recv().await, Some(true));
        }
        wal.close().await;
    }
    let store = weir_storage::objstore::from_url("memory://").unwrap();
    let wal = FileWal::open(wal_config()).unwrap();
    let opened = Engine::open(small_config(), Arc::new(wal), Arc::new(meta), store).await;
    let err = opened
        .err()
        .expect("the engine must not open over a gap in the WAL");
    let msg = err.to_string();
    assert!(msg.contains("gap"), "unclear error: {msg}");
    let wal = FileWal::open(wal_config()).unwrap();
    let kept: Vec<u64> = wal
        .take_recovered()
        .into_iter()
        .map(|r| r.record.base_offset)
        .collect();
    assert_eq!(kept, vec![0, 1, 5], "the WAL must be left untouched");
}

/// A stream whose metadata row is gone (its topic deleted while the engine still held it) used
/// to fail every later commit with UnknownStream, for every stream, until the WAL filled.
#[tokio::test]
async fn a_vanished_stream_does_not_block_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let meta = Arc::new(SqliteMetaStore::open(&dir.path().join("meta.sqlite")).unwrap());
    let topic = |name: &'static str, id: u8| {
        let meta = Arc::clone(&meta);
        async move {
            weir_meta::Catalog::create_topic(&*meta, name, [id; 16], 1, BTreeMap::new())
                .await
                .unwrap()
                .streams[0]
        }
    };
    let (a, b) = (topic("a", 1).await, topic("b", 2).await);
    let wal = FileWal::open(FileWalConfig {
        capacity: 4 << 20,
        ..FileWalConfig::new(dir.path().join("wal"))
    })
    .unwrap();
    let store = weir_storage::objstore::from_url("memory://").unwrap();
    let engine = Engine::open(small_config(), Arc::new(wal), meta.clone(), store)
        .await
        .unwrap();
    for s in [a, b] {
        engine.open_stream(s, 1).await.unwrap();
        engine
            .append(s, 1, 1, 0, |o| payload(s, o, 0, 1000))
            .await
            .unwrap();
    }
    weir_meta::Catalog::delete_topic(&*meta, "a").await.unwrap();
    engine
        .append(b, 1, 1, 0, |o| payload(b, o, 1, 1000))
        .await
        .unwrap();
    engine
        .flush()
        .await
        .expect("the other streams' upload must go through");
    let info = engine.stream_info(b).unwrap();
    assert_eq!(info.committed_end, info.high_watermark);
    assert!(
        engine.stream_info(a).is_none(),
        "the vanished stream is dropped"
    );
    engine
        .append(b, 1, 1, 0, |o| payload(b, o, 2, 1000))
        .await
        .unwrap();
    engine.flush().await.unwrap();
    assert_eq!(engine.stream_info(b).unwrap().committed_end, 3);
    engine.close().await.unwrap();
}

/// A failed WAL write fails the appends in it and behind it; each stream with such an append
/// rewinds exactly once (its rewind hook, the partition's producer state, is told once), the
/// next append takes the rewound offset, and only what was acknowledged is there, before and
/// after a restart.
#[tokio::test]
async fn a_failed_write_rewinds_each_affected_stream_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use weir_wal::{WalFault, WalFaults};

    let dir = tempfile::tempdir().unwrap();
    let wal_config = |latency| FileWalConfig {
        capacity: 8 << 20,
        faults: WalFaults {
            latency,
            ..WalFaults::default()
        },
        ..FileWalConfig::new(dir.path().join("wal"))
    };
    let open = |wal: Arc<FileWal>| {
        let meta = SqliteMetaStore::open(&dir.path().join("meta.sqlite")).unwrap();
        let store = weir_storage::objstore::from_url(&format!(
            "file://{}",
            dir.path().join("objects").display()
        ))
        .unwrap();
        Engine::open(small_config(), wal, Arc::new(meta), store)
    };
    // Latency before each group write, so that every append below is queued before the
    // failure is delivered.
    let wal = Arc::new(FileWal::open(wal_config(Duration::from_millis(30))).unwrap());
    let engine = open(wal.clone()).await.unwrap();
    let streams = [1u64, 2, 3, 4];
    let rewinds: Vec<Arc<AtomicUsize>> = streams.iter().map(|_| Arc::default()).collect();
    for (s, count) in streams.iter().zip(&rewinds) {
        let count = Arc::clone(count);
        let hook: weir_storage::RewindHook = Arc::new(move |_| {
            count.fetch_add(1, Ordering::SeqCst);
        });
        engine
            .open_stream_with(
                *s,
                1,
                weir_storage::StreamOptions {
                    rewind_hook: Some(hook),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        engine
            .append(*s, 1, 1, 0, |b| payload(*s, b, 0, 500))
            .await
            .unwrap();
    }
    wal.inject(0, WalFault::Write);
    let mut pending = Vec::new();
    for msg in 1..=3u64 {
        for &s in &streams {
            let p = engine
                .append_with(s, 1, |base, _| {
                    Some(weir_storage::NewBatch {
                        record_count: 1,
                        max_timestamp: 0,
                        payload: payload(s, base, msg, 500),
                    })
                })
                .unwrap()
                .unwrap();
            pending.push((s, msg, p));
        }
    }
    let mut acked: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new(); // stream -> (offset, msg)
    let mut failed: BTreeMap<u64, usize> = BTreeMap::new();
    for s in streams {
        acked.entry(s).or_default().push((0, 0));
    }
    for (s, msg, p) in pending {
        match p.wait().await {
            Ok(a) => acked.entry(s).or_default().push((a.base_offset, msg)),
            Err(_) => *failed.entry(s).or_default() += 1,
        }
    }
    assert!(!failed.is_empty(), "the injected failure failed no append");
    for (i, s) in streams.iter().enumerate() {
        let expected = usize::from(failed.contains_key(s));
        assert_eq!(
            rewinds[i].load(Ordering::SeqCst),
            expected,
            "stream {s}: {} failed appends",
            failed.get(s).copied().unwrap_or(0)
        );
        // No hole: the next append follows what was acknowledged. The WAL may still be
        // resetting after the failed write (a retriable error): retry as a client would.
        let hw = engine.stream_info(*s).unwrap().high_watermark;
        assert_eq!(hw, acked[s].len() as u64);
        let mut tries = 0;
        let a = loop {
            match engine.append(*s, 1, 1, 0, |b| payload(*s, b, 9, 500)).await {
                Err(weir_storage::StorageError::Wal(weir_wal::WalError::Resetting))
                    if tries < 100 =>
                {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                r => break r.unwrap(),
            }
        };
        assert_eq!(a.base_offset, hw);
        acked.get_mut(s).unwrap().push((a.base_offset, 9));
    }
    let check = |engine: Engine, acked: BTreeMap<u64, Vec<(u64, u64)>>| async move {
        for (s, want) in acked {
            let got: Vec<(u64, u64)> = common::read_all(&engine, s, 0)
                .await
                .into_iter()
                .map(|f| (f.base_offset, common::check_payload(&f.payload).2))
                .collect();
            assert_eq!(got, want, "stream {s}");
        }
    };
    check(engine.clone(), acked.clone()).await;
    engine.close().await.unwrap();
    drop(engine);
    drop(wal);
    let engine = open(Arc::new(FileWal::open(wal_config(Duration::ZERO)).unwrap()))
        .await
        .unwrap();
    for s in streams {
        engine.open_stream(s, 2).await.unwrap();
    }
    check(engine.clone(), acked).await;
    engine.close().await.unwrap();
}
