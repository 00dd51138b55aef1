//! Compaction under steady load: many partitions, an upload every round (each a stream-set
//! object holding a slice of every partition), compaction now and then. The number of objects
//! per partition stays bounded, replaced objects are deleted, and every record is still
//! readable, in order, from objects alone after a restart.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{check_payload, payload, read_all, small_config};
use weir_meta::{ObjectIndex, SqliteMetaStore};
use weir_storage::{Engine, StorageConfig};
use weir_wal::{FileWal, FileWalConfig};

const STREAMS: u64 = 12;

async fn open(dir: &std::path::Path, config: StorageConfig) -> (Engine, Arc<SqliteMetaStore>) {
    let wal = FileWal::open(FileWalConfig {
        capacity: 32 << 20,
        ..FileWalConfig::new(dir.join("wal"))
    })
    .unwrap();
    let meta = Arc::new(SqliteMetaStore::open(&dir.join("meta.sqlite")).unwrap());
    let store =
        weir_storage::objstore::from_url(&format!("file://{}", dir.join("objects").display()))
            .unwrap();
    let engine = Engine::open(config, Arc::new(wal), meta.clone(), store)
        .await
        .unwrap();
    (engine, meta)
}

fn files(p: &std::path::Path) -> usize {
    std::fs::read_dir(p)
        .map(|rd| {
            rd.map(|e| {
                let e = e.unwrap();
                if e.file_type().unwrap().is_dir() {
                    files(&e.path())
                } else {
                    1
                }
            })
            .sum()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_count_stays_bounded_and_data_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        upload_bytes: u64::MAX,
        upload_interval: Duration::from_secs(3600),
        stream_object_bytes: u64::MAX,
        compaction_target_bytes: 256 << 10,
        compaction_min_ranges: 4,
        background_bytes_per_sec: 0,
        ..small_config()
    };
    let (engine, meta) = open(dir.path(), config.clone()).await;
    for s in 0..STREAMS {
        engine.open_stream(s, 1).await.unwrap();
    }
    let mut max_objects = 0;
    let mut msg = 0u64;
    for round in 0..40 {
        for s in 0..STREAMS {
            for _ in 0..3 {
                engine
                    .append(s, 1, 1, 0, |b| payload(s, b, msg, 2000))
                    .await
                    .unwrap();
                msg += 1;
            }
        }
        engine.flush().await.unwrap();
        if round % 5 == 4 {
            // Compaction, then deletion of what it replaced (grace period 0 here).
            engine.run_maintenance().await.unwrap();
        }
        for s in 0..STREAMS {
            max_objects = max_objects.max(meta.object_count(s).await.unwrap());
        }
    }
    engine.run_maintenance().await.unwrap();
    engine.run_maintenance().await.unwrap();
    // 40 uploads; without compaction each partition would have data in 40 objects.
    assert!(
        max_objects <= 10,
        "a partition reached {max_objects} objects"
    );
    for s in 0..STREAMS {
        let n = meta.object_count(s).await.unwrap();
        assert!(n <= 4, "stream {s} ends with {n} objects");
    }
    assert!(engine.meters().compactions.get() > 0);
    assert!(
        engine.meters().objects_deleted.get() > 30,
        "replaced stream-set objects are deleted"
    );
    let on_disk = files(&dir.path().join("objects"));
    assert!(
        on_disk <= 3 * STREAMS as usize,
        "{on_disk} objects left on disk"
    );
    engine.close().await.unwrap();

    // Everything is still there, in order, read from the compacted objects.
    let (engine, _) = open(dir.path(), config).await;
    let mut seen = 0;
    for s in 0..STREAMS {
        engine.open_stream(s, 2).await.unwrap();
        let frames = read_all(&engine, s, 0).await;
        assert_eq!(frames.len(), 40 * 3);
        let msgs: Vec<u64> = frames.iter().map(|f| check_payload(&f.payload).2).collect();
        assert!(
            msgs.windows(2).all(|w| w[0] < w[1]),
            "stream {s} out of order"
        );
        seen += frames.len();
    }
    assert_eq!(seen as u64, msg);
    engine.close().await.unwrap();
}

/// A run larger than two multipart parts is uploaded while it is read, a part at a time, so
/// compaction holds a few parts and not the whole run (up to `compaction_target_bytes`, 256
/// MiB by default, for each of several streams at once). Shown with a store that refuses
/// uploads: the compaction stops at its first upload, having read a part's worth at most, where
/// reading the whole run first would have fetched all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_run_is_uploaded_while_it_is_read() {
    use weir_storage::objstore::{FaultConfig, FaultyStore};
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        upload_bytes: u64::MAX,
        upload_interval: Duration::from_secs(3600),
        block_bytes: 256 << 10,
        multipart_part_bytes: 5 << 20,
        compaction_target_bytes: 256 << 20,
        compaction_min_ranges: 4,
        background_bytes_per_sec: 0,
        ..small_config()
    };
    let file = weir_storage::objstore::from_url(&format!(
        "file://{}",
        dir.path().join("objects").display()
    ))
    .unwrap();
    let faulty = Arc::new(FaultyStore::new(file, FaultConfig::default()));
    let engine = common::open_engine_with_store(dir.path(), config, 64 << 20, faulty.clone()).await;
    engine.open_stream(1, 1).await.unwrap();
    // Ten uploads of 3 MiB (small ranges: below 4 MiB): one run of 30 MiB.
    let mut msg = 0;
    for _ in 0..10 {
        for _ in 0..48 {
            engine
                .append(1, 1, 1, 0, |b| payload(1, b, msg, 64 << 10))
                .await
                .unwrap();
            msg += 1;
        }
        engine.flush().await.unwrap();
    }
    faulty.set_faults(FaultConfig {
        put_error_rate: 1.0,
        ..FaultConfig::default()
    });
    let read_before = engine.meters().background_get_bytes.get();
    let _ = engine.run_maintenance().await;
    let read = engine.meters().background_get_bytes.get() - read_before;
    assert_eq!(engine.meters().compactions.get(), 0);
    assert!(
        read <= 16 << 20,
        "compaction read {read} bytes of a 30 MiB run before its first upload"
    );

    // With uploads back, the run is compacted and reads back whole, in order.
    faulty.set_faults(FaultConfig::default());
    engine.run_maintenance().await.unwrap();
    assert_eq!(engine.meters().compactions.get(), 1);
    let frames = read_all(&engine, 1, 0).await;
    assert_eq!(frames.len() as u64, msg);
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(check_payload(&f.payload).2, i as u64);
    }
    engine.close().await.unwrap();
}

/// Each upload adds a small range to a stream; compaction must not rewrite the stream's whole
/// compacted prefix every time a few more arrive (that is quadratic: the two-hour soak's brokers
/// compacted 30 GB for 230 MB uploaded). A range is merged only with at least its own size of
/// other ranges, so it doubles each time it is rewritten, and each byte is rewritten a few
/// times, not once per round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_rewrites_each_byte_a_few_times_not_once_per_round() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        upload_bytes: u64::MAX,
        upload_interval: Duration::from_secs(3600),
        stream_object_bytes: u64::MAX,
        compaction_target_bytes: 8 << 20,
        compaction_min_ranges: 4,
        background_bytes_per_sec: 0,
        ..small_config()
    };
    let (engine, _meta) = open(dir.path(), config).await;
    engine.open_stream(0, 1).await.unwrap();
    let rounds = 300u64;
    for round in 0..rounds {
        for i in 0..3 {
            engine
                .append(0, 1, 1, 0, |b| payload(0, b, round * 3 + i, 2000))
                .await
                .unwrap();
        }
        engine.flush().await.unwrap();
        engine.run_maintenance().await.unwrap();
    }
    let uploaded = engine.meters().upload_bytes.get();
    let compacted = engine.meters().compacted_bytes.get();
    let ratio = compacted as f64 / uploaded as f64;
    eprintln!("uploaded {uploaded} bytes, compaction wrote {compacted} ({ratio:.1} times)");
    assert!(
        engine.meters().compactions.get() > 0,
        "nothing was compacted"
    );
    assert!(
        ratio <= 10.0,
        "compaction wrote {ratio:.1} times what was uploaded ({compacted} for {uploaded})"
    );
    let frames = read_all(&engine, 0, 0).await;
    assert_eq!(frames.len() as u64, rounds * 3);
    engine.close().await.unwrap();
}

/// Appends `mib` MiB to each of `streams` (64 KiB batches stamped `ts`), then uploads them as
/// one stream-set object.
async fn upload_round(
    engine: &Engine,
    streams: std::ops::Range<u64>,
    mib: u64,
    ts: i64,
    msg: &mut u64,
) {
    for s in streams {
        for _ in 0..mib * 16 {
            engine
                .append(s, 1, 1, ts, |b| payload(s, b, *msg, 64 << 10))
                .await
                .unwrap();
            *msg += 1;
        }
    }
    engine.flush().await.unwrap();
}

/// Ranges of 4 MiB or more stay in their stream-set objects: a consumer fetches them in GETs of
/// up to that size anyway, and rewriting them cost most of the PUTs of a busy broker. Once
/// other streams' ranges are gone and an object holds less than half of its bytes, the next
/// reclaim round (the first after a start, then every 30) moves the rest out, unless retention
/// drops them soon, and the object is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_ranges_stay_until_their_object_is_sparse() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        upload_bytes: u64::MAX,
        upload_interval: Duration::from_secs(3600),
        stream_object_bytes: u64::MAX,
        block_bytes: 256 << 10,
        compaction_min_ranges: 2,
        background_bytes_per_sec: 0,
        ..small_config()
    };
    let reopen = |epoch: u64| {
        let config = config.clone();
        let path = dir.path().to_path_buf();
        async move {
            let engine = common::open_engine(&path, config, 64 << 20).await;
            for s in 1..=3 {
                engine.open_stream(s, epoch).await.unwrap();
            }
            engine
        }
    };
    let engine = reopen(1).await;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut msg = 0;
    // Three uploads, each an object with 5 MiB of each of three streams.
    for _ in 0..3 {
        upload_round(&engine, 1..4, 5, now_ms, &mut msg).await;
    }
    let objects = files(&dir.path().join("objects"));
    engine.run_maintenance().await.unwrap();
    assert_eq!(engine.meters().compactions.get(), 0, "large ranges stay");

    // Streams 2 and 3 drop their data: each object holds a third of its bytes.
    for s in 2..=3 {
        let end = engine.stream_info(s).unwrap().committed_end;
        engine.trim(s, end).await.unwrap();
    }
    engine.run_maintenance().await.unwrap();
    assert_eq!(
        engine.meters().compactions.get(),
        0,
        "not before a reclaim round"
    );
    assert_eq!(files(&dir.path().join("objects")), objects);
    engine.close().await.unwrap();

    // A reclaim round leaves ranges that retention drops within 10 minutes.
    let engine = reopen(2).await;
    let five_minutes = weir_storage::Retention {
        ms: Some(5 * 60 * 1000),
        bytes: None,
    };
    engine.set_retention(1, five_minutes).unwrap();
    engine.run_maintenance().await.unwrap();
    assert_eq!(engine.meters().compactions.get(), 0, "about to expire");
    engine.close().await.unwrap();

    // Kept longer, stream 1's three ranges move into one object, and the sparse ones go.
    let engine = reopen(3).await;
    engine.run_maintenance().await.unwrap();
    assert_eq!(engine.meters().compactions.get(), 1);
    engine.run_maintenance().await.unwrap();
    assert_eq!(
        files(&dir.path().join("objects")),
        1,
        "the sparse objects are deleted"
    );
    let frames = read_all(&engine, 1, 0).await;
    assert_eq!(frames.len(), 3 * 5 * 16);
    let msgs: Vec<u64> = frames.iter().map(|f| check_payload(&f.payload).2).collect();
    assert!(
        msgs.windows(2).all(|w| w[0] < w[1]),
        "stream 1 out of order"
    );
    engine.close().await.unwrap();
}
