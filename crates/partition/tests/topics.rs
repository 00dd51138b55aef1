//! The catalog's look-ups for requests that name many partitions, and its producer snapshots,
//! on a real engine (file WAL, SQLite, an in-memory object store).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::{Compression, Record, TimestampType};
use weir_meta::{ProducerSnapshots, SqliteMetaStore};
use weir_partition::{Lookup, TopicDefaults, Topics};

mod common;

struct Setup {
    _dir: tempfile::TempDir,
    meta: Arc<SqliteMetaStore>,
    topics: Arc<Topics>,
}

async fn setup() -> Setup {
    let common::Stack { dir, meta, engine } = common::stack().await;
    let topics = Topics::open(engine, meta.clone(), TopicDefaults::default())
        .await
        .expect("topics");
    Setup {
        _dir: dir,
        meta,
        topics,
    }
}

/// One batch of `n` records of an idempotent producer, its first sequence number `first`.
fn batch(producer_id: i64, first: i32, n: usize) -> Bytes {
    batch_of(producer_id, first, n, false)
}

fn batch_of(producer_id: i64, first: i32, n: usize, transactional: bool) -> Bytes {
    let rs: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: first + i as i32,
            timestamp: 1,
            key: None,
            value: Some(Bytes::from_static(b"v")),
            headers: Default::default(),
        })
        .collect();
    common::encode(&rs, Compression::None)
}

#[tokio::test]
async fn many_partitions_are_looked_up_together() {
    let s = setup().await;
    let t = s
        .topics
        .create("t", 4, BTreeMap::new(), false)
        .await
        .expect("create");
    for i in [0usize, 2] {
        s.topics.open_partition(t.streams[i]).await.expect("open");
    }
    let found = s.topics.lookup_in(&t, [0, 1, 2, 3, 7, -1]);
    let kinds: Vec<&str> = found
        .iter()
        .map(|l| match l {
            Lookup::Local(_) => "local",
            Lookup::NotHere => "not here",
            Lookup::Unknown => "unknown",
        })
        .collect();
    assert_eq!(
        kinds,
        ["local", "not here", "local", "not here", "unknown", "unknown"]
    );
    if let Lookup::Local(p) = &found[2] {
        assert_eq!((p.index, p.stream_id), (2, t.streams[2]));
    }
    // Positions in the request, partitions that exist but are elsewhere only.
    assert_eq!(s.topics.not_here_in(&t, [3, 0, 1, 9, 2]), vec![0, 2]);
    assert!(s.topics.not_here_in(&t, [0, 2]).is_empty());
}

#[tokio::test]
async fn producer_snapshots_of_partitions_with_new_data_are_saved_together() {
    let s = setup().await;
    let n = weir_partition::topics::SNAPSHOTS_PER_COMMIT + 5;
    let t = s
        .topics
        .create("t", n as i32, BTreeMap::new(), false)
        .await
        .expect("create");
    let mut parts = Vec::new();
    for &stream in &t.streams {
        parts.push(s.topics.open_partition(stream).await.expect("open"));
    }
    // Data in the first and the last partition (the last is in the second commit), none in
    // the others.
    for (k, p) in [(0, &parts[0]), (1, &parts[n - 1])] {
        p.produce(&batch(1_000 + k, 0, 3)).await.expect("produce");
    }
    s.topics.snapshot_producers().await;
    for (i, p) in parts.iter().enumerate() {
        let saved = s
            .meta
            .load_producer_snapshot(p.stream_id)
            .await
            .expect("load");
        if i == 0 || i == n - 1 {
            let (offset, data) = saved.expect("a snapshot of a partition with data");
            assert_eq!(offset, 3);
            assert!(!data.is_empty());
            assert!(!p.snapshot_behind());
        } else {
            assert_eq!(saved, None, "partition {i} has nothing to save");
        }
    }
    // New data in one partition: the next round saves that one again.
    parts[0]
        .produce(&batch(1_000, 3, 2))
        .await
        .expect("produce");
    assert!(parts[0].snapshot_behind());
    s.topics.snapshot_producers().await;
    let saved = s.meta.load_producer_snapshot(parts[0].stream_id).await;
    assert_eq!(saved.expect("load").map(|(o, _)| o), Some(5));
}

#[tokio::test]
async fn the_last_stable_offset_stops_at_an_open_transaction_until_its_marker() {
    // Fetches read a partition's last stable offset without its producer state's lock (the
    // first open transaction's offset is published when the lock is let go): it must stop at
    // a transaction's first offset from the moment that transaction's batch is appended, and
    // move on once its marker is.
    let s = setup().await;
    let t = s
        .topics
        .create("txn", 1, BTreeMap::new(), false)
        .await
        .expect("create");
    let p = s.topics.open_partition(t.streams[0]).await.expect("open");
    p.produce(&batch(7, 0, 3)).await.expect("idempotent batch");
    assert_eq!(p.offsets_and_lso(), (0, 3, 3), "nothing open");

    let guard = p.verification_guard(8).expect("not open yet");
    let ticket = p
        .start_produce_checked(
            &batch_of(8, 0, 2, true),
            weir_partition::TxnCheck::Guard { guard, version: 0 },
        )
        .expect("transactional batch");
    // Appended, maybe not yet durable: whatever the high watermark, the LSO is at most 3.
    let (_, hw, lso) = p.offsets_and_lso();
    assert_eq!(
        lso,
        hw.min(3),
        "the transaction's first offset bounds the LSO at once"
    );
    ticket.wait().await.expect("durable");
    assert_eq!(p.offsets_and_lso(), (0, 5, 3), "open transaction");
    p.produce(&batch(7, 3, 1))
        .await
        .expect("idempotent batch after it");
    assert_eq!(p.offsets_and_lso(), (0, 6, 3), "still open");

    // Reopened (a new leader): the transaction found again in the log bounds the LSO as
    // soon as the partition is open.
    s.topics.close_partition(t.streams[0]).await.expect("close");
    let p = s.topics.open_partition(t.streams[0]).await.expect("reopen");
    assert_eq!(p.offsets_and_lso(), (0, 6, 3), "still open after reopening");

    let marker = p.start_marker(8, 0, true, 0).expect("marker");
    marker
        .expect("a ticket")
        .wait()
        .await
        .expect("marker durable");
    assert_eq!(p.offsets_and_lso(), (0, 7, 7), "committed");
}

/// Two brokers (two catalogs on one metadata store) alter one topic's configs at once, each
/// alter an increment of `segment.ms` (a read, a change, a write): every increment counts. Each
/// alter is a compare-and-set; without the compare, a write from a read taken before the other
/// broker's write undid it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_alters_through_two_brokers_lose_nothing() {
    let common::Stack {
        dir: _dir,
        meta,
        engine,
    } = common::stack().await;
    let a = Topics::open(engine.clone(), meta.clone(), TopicDefaults::default())
        .await
        .expect("topics");
    let b = Topics::open(engine, meta.clone(), TopicDefaults::default())
        .await
        .expect("topics");
    let start: BTreeMap<String, String> = [("segment.ms".to_string(), "1000".to_string())].into();
    a.create("t", 1, start, false).await.expect("create");
    const EACH: u64 = 25;
    let mut tasks = tokio::task::JoinSet::new();
    for topics in [a, b] {
        for _ in 0..EACH {
            let topics = Arc::clone(&topics);
            tasks.spawn(async move {
                topics
                    .alter_configs(
                        "t",
                        |old| {
                            let n: u64 = old["segment.ms"].parse().expect("a number");
                            let mut new = old.clone();
                            new.insert("segment.ms".into(), (n + 1).to_string());
                            Ok(new)
                        },
                        false,
                    )
                    .await
            });
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("task").expect("alter");
    }
    let stored = weir_meta::Catalog::list_topics(&*meta)
        .await
        .expect("list")
        .into_iter()
        .find(|t| t.name == "t")
        .expect("topic")
        .configs;
    assert_eq!(stored["segment.ms"], (1000 + 2 * EACH).to_string());
}

#[test]
fn the_iceberg_topic_configs_are_checked() {
    use weir_partition::topics::validate_config;
    for (name, ok) in [
        ("weir.iceberg.mode", "value_schema_id_prefix"),
        ("weir.iceberg.mode", "value_schema_latest"),
        (
            "weir.iceberg.mode",
            "value_schema_latest:subject=orders-value",
        ),
        ("weir.iceberg.invalid.record.action", "drop"),
        ("weir.iceberg.invalid.record.action", "dlq_table"),
        ("weir.iceberg.snapshot.max.age.ms", "0"),
        ("weir.iceberg.snapshot.max.age.ms", "60000"),
    ] {
        assert!(validate_config(name, ok).is_ok(), "{name}={ok}");
    }
    for (name, bad) in [
        ("weir.iceberg.mode", "value_schema_latest:subject="),
        ("weir.iceberg.mode", "typed"),
        ("weir.iceberg.invalid.record.action", "skip"),
        ("weir.iceberg.snapshot.max.age.ms", "59999"),
        ("weir.iceberg.snapshot.max.age.ms", "-1"),
    ] {
        let e = validate_config(name, bad).expect_err("refused");
        assert!(e.1.contains("must be"), "{name}={bad}: {}", e.1);
    }
}
