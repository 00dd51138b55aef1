//! The cleaner of compacted topics on a real engine (file WAL, in-memory object store, SQLite):
//! the latest record of each key survives at its own offset, tombstones stay for
//! `delete.retention.ms` and then go, aborted transactions go, reads across removed offsets
//! skip them, and keyless records are refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder, TimestampType};
use kafka_protocol::ResponseError;
use weir_meta::SqliteMetaStore;
use weir_partition::clean::CleanerPolicy;
use weir_partition::Partition;
use weir_storage::Engine;

mod common;

struct Setup {
    _dir: tempfile::TempDir,
    meta: Arc<SqliteMetaStore>,
    engine: Engine,
    partition: Arc<Partition>,
}

async fn setup() -> Setup {
    let common::Stack { dir, meta, engine } = common::stack().await;
    let partition = Partition::open(
        engine.clone(),
        &*meta,
        "t",
        0,
        1,
        1 << 20,
        weir_storage::WalKind::File,
    )
    .await
    .expect("open");
    partition.set_compacted(true);
    Setup {
        _dir: dir,
        meta,
        engine,
        partition,
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// One batch of `(key, value)` records (value `None`: a tombstone), at time `ts`.
fn batch(records: &[(Option<&str>, Option<&str>)], ts: i64, compression: Compression) -> Bytes {
    let rs: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32 - 1,
            timestamp: ts,
            key: k.map(|k| Bytes::from(k.to_string())),
            value: v.map(|v| Bytes::from(v.to_string())),
            headers: Default::default(),
        })
        .collect();
    common::encode(&rs, compression)
}

/// Every record from `from` on: offset -> (key, value).
async fn read_all(p: &Partition, from: i64) -> BTreeMap<i64, (String, Option<String>)> {
    let mut out = BTreeMap::new();
    let mut at = from;
    let (_, hw) = p.offsets();
    while at < hw {
        let d = p.fetch(at, 1 << 20, false).await.expect("fetch");
        assert!(
            !d.records.is_empty(),
            "a read at {at} below the high watermark {hw} found nothing"
        );
        let mut b = d.records.clone();
        let mut last = at;
        while !b.is_empty() {
            let set = RecordBatchDecoder::decode(&mut b).expect("decode");
            for r in set.records {
                if r.control {
                    last = last.max(r.offset + 1);
                    continue;
                }
                let key =
                    String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
                let value = r.value.map(|v| String::from_utf8_lossy(&v).into_owned());
                out.insert(r.offset, (key, value));
                last = last.max(r.offset + 1);
            }
        }
        // The next read starts after the last batch returned (its last offset delta is kept).
        let mut ends = d.records.clone();
        while !ends.is_empty() {
            let base = i64::from_be_bytes(ends[0..8].try_into().expect("8 bytes"));
            let len = i32::from_be_bytes(ends[8..12].try_into().expect("4 bytes")) as usize;
            let delta = i32::from_be_bytes(ends[23..27].try_into().expect("4 bytes"));
            last = last.max(base + i64::from(delta) + 1);
            bytes::Buf::advance(&mut ends, 12 + len);
        }
        at = last;
    }
    out
}

async fn produce_round(
    s: &Setup,
    records: &[(Option<&str>, Option<&str>)],
    compression: Compression,
) -> i64 {
    let base = s
        .partition
        .produce(&batch(records, now_ms(), compression))
        .await
        .expect("produce")
        .base_offset;
    // One range per round: the cleaner works on what is in object storage.
    s.engine.flush().await.expect("flush");
    base
}

fn policy(delete_retention_ms: i64) -> CleanerPolicy {
    CleanerPolicy {
        delete_retention_ms,
        min_compaction_lag_ms: 0,
        min_cleanable_dirty_ratio: 0.0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latest_value_of_each_key_survives_at_its_offset() {
    for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
        let s = setup().await;
        let p = &s.partition;
        let v1: Vec<(String, String)> = (0..10)
            .map(|i| (format!("k{i}"), format!("v1-{i}")))
            .collect();
        let round1: Vec<(Option<&str>, Option<&str>)> = v1
            .iter()
            .map(|(k, v)| (Some(k.as_str()), Some(v.as_str())))
            .collect();
        produce_round(&s, &round1, compression).await; // offsets 0..10
        produce_round(
            &s,
            &[
                (Some("k0"), Some("v2-0")),
                (Some("k1"), Some("v2-1")),
                (Some("k5"), None),
                (Some("k6"), None),
            ],
            compression,
        )
        .await; // 10..14
        produce_round(&s, &[(Some("k2"), Some("v2-2"))], compression).await; // 14
                                                                             // The last range is never cleaned.
        produce_round(&s, &[(Some("k3"), Some("v2-3"))], compression).await; // 15
        let before = read_all(p, 0).await;
        assert_eq!(before.len(), 16);

        p.snapshot_producers(&*s.meta).await.expect("snapshot");
        let c = p
            .clean(&*s.meta, policy(86_400_000), now_ms())
            .await
            .expect("clean")
            .expect("something to clean");
        assert_eq!(c.checkpoint, 15, "{compression:?}");
        assert_eq!(
            c.records_removed, 5,
            "k0, k1, k2 superseded; k5, k6 deleted by tombstones"
        );
        let after = read_all(p, 0).await;
        let expected: BTreeMap<i64, (String, Option<String>)> = before
            .iter()
            .filter(|(o, _)| ![0, 1, 2, 5, 6].contains(*o))
            .map(|(o, r)| (*o, r.clone()))
            .collect();
        assert_eq!(
            after, expected,
            "{compression:?}: survivors keep their offsets"
        );
        // k3 at offset 3 stays: its newer value is in the last range, which is not cleaned.
        assert_eq!(after.get(&3).map(|r| r.1.as_deref()), Some(Some("v1-3")));
        // Tombstones stay (not yet past delete.retention.ms).
        assert_eq!(after.get(&12), Some(&("k5".to_string(), None)));
        // A read at a removed offset goes on to the next record.
        let d = p.fetch(0, 1 << 20, false).await.expect("fetch");
        assert!(!d.records.is_empty());

        // The next clean, with delete.retention.ms passed, drops the tombstones that an earlier
        // clean saw, and the superseded k3.
        produce_round(&s, &[(Some("k9"), Some("v2-9"))], compression).await; // 16
        produce_round(&s, &[(Some("k8"), Some("v2-8"))], compression).await; // 17
        p.snapshot_producers(&*s.meta).await.expect("snapshot");
        p.clean(&*s.meta, policy(0), now_ms() + 10)
            .await
            .expect("clean")
            .expect("something to clean");
        let after = read_all(p, 0).await;
        let keys: Vec<(i64, &str, Option<&str>)> = after
            .iter()
            .map(|(o, (k, v))| (*o, k.as_str(), v.as_deref()))
            .collect();
        assert_eq!(
            keys,
            vec![
                (4, "k4", Some("v1-4")),
                (7, "k7", Some("v1-7")),
                (8, "k8", Some("v1-8")),
                (10, "k0", Some("v2-0")),
                (11, "k1", Some("v2-1")),
                (14, "k2", Some("v2-2")),
                (15, "k3", Some("v2-3")),
                (16, "k9", Some("v2-9")),
                (17, "k8", Some("v2-8")),
            ],
            "{compression:?}: k8 at 8 stays (its newer value is in the last range), tombstones gone"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_topic_refuses_records_without_a_key() {
    let s = setup().await;
    let r = s
        .partition
        .produce(&batch(
            &[(Some("k"), Some("v")), (None, Some("v"))],
            1,
            Compression::None,
        ))
        .await;
    assert_eq!(r.err(), Some(ResponseError::InvalidRecord));
    s.partition
        .produce(&batch(&[(Some("k"), Some("v"))], 1, Compression::None))
        .await
        .expect("keyed records are taken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_enough_dirty_data_is_not_cleaned() {
    let s = setup().await;
    let p = &s.partition;
    for i in 0..3 {
        let k = format!("k{i}");
        produce_round(&s, &[(Some(k.as_str()), Some("v"))], Compression::None).await;
    }
    p.snapshot_producers(&*s.meta).await.expect("snapshot");
    let strict = CleanerPolicy {
        min_cleanable_dirty_ratio: 0.5,
        ..policy(0)
    };
    p.clean(&*s.meta, strict, now_ms())
        .await
        .expect("clean")
        .expect("all dirty: cleaned");
    // One new range: 1 dirty of 3 cleanable is under the ratio.
    produce_round(&s, &[(Some("k0"), Some("w"))], Compression::None).await;
    p.snapshot_producers(&*s.meta).await.expect("snapshot");
    assert!(p
        .clean(&*s.meta, strict, now_ms())
        .await
        .expect("clean")
        .is_none());
    // min.compaction.lag.ms keeps young records out.
    let young = CleanerPolicy {
        min_compaction_lag_ms: 3_600_000,
        ..policy(0)
    };
    assert!(p
        .clean(&*s.meta, young, now_ms())
        .await
        .expect("clean")
        .is_none());
}
