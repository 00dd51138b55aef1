//! The translator against a source of record batches (the broker's partitions stand-in) and a
//! real SQL catalog on SQLite: tables created on first use, each record once across cycles and
//! across brokers, records lost to retention counted, lag reported.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use weir_iceberg::meters::IcebergMeters;
use weir_iceberg::progress;
use weir_iceberg::translator::{
    Cycle, Fetched, Mode, Schemas, Settings, Source, TopicSpec, Translator,
};
use weir_meta::SqliteMetaStore;
use weir_registry::format::{Parsed, SchemaType};

mod common;

/// A partition's log start, and its one-record batches (offset, batch bytes).
type Log = (i64, Vec<(i64, Bytes)>);

/// Partitions by number.
#[derive(Default)]
struct Partitions {
    logs: Mutex<BTreeMap<i32, Log>>,
    /// What the translator said the table has, by partition.
    held: Mutex<BTreeMap<i32, i64>>,
    /// The topic's target lag (zero: due at every tick).
    target_lag: Duration,
    /// The topic's layout (`None`: key_value).
    mode: Option<Mode>,
}

impl Partitions {
    fn produce(&self, partition: i32, n: usize) {
        self.produce_values(partition, n, |offset| format!("p{partition}-{offset}"));
    }

    /// `n` records whose values `value` gives for each offset.
    fn produce_values(&self, partition: i32, n: usize, value: impl Fn(i64) -> String) {
        let mut logs = self.logs.lock().expect("logs");
        let (_, log) = logs.entry(partition).or_default();
        for _ in 0..n {
            let offset = log.last().map_or(0, |(o, _)| o + 1);
            let r = Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset,
                sequence: -1,
                timestamp: 1_700_000_000_000 + offset,
                key: Some(Bytes::from(format!("k{offset}"))),
                value: Some(Bytes::from(value(offset))),
                headers: Default::default(),
            };
            let mut buf = BytesMut::new();
            RecordBatchEncoder::encode(
                &mut buf,
                [r].iter(),
                &RecordEncodeOptions {
                    version: 2,
                    compression: Compression::None,
                },
            )
            .expect("encode");
            log.push((offset, buf.freeze()));
        }
    }

    /// Retention: every record below `start` is gone.
    fn trim(&self, partition: i32, start: i64) {
        let mut logs = self.logs.lock().expect("logs");
        let (log_start, log) = logs.entry(partition).or_default();
        *log_start = start;
        log.retain(|(o, _)| *o >= start);
    }
}

#[async_trait]
impl Source for Partitions {
    fn topics(&self) -> Vec<TopicSpec> {
        vec![TopicSpec {
            name: "orders.v1".into(),
            topic_id: "topic-1".into(),
            mode: self.mode.clone().unwrap_or(Mode::KeyValue),
            target_lag: self.target_lag,
            partition_spec: String::new(),
            invalid: Default::default(),
            snapshot_max_age: None,
            partitions: vec![0, 1],
        }]
    }

    async fn read(
        &self,
        _topic: &str,
        partition: i32,
        from: i64,
        max_bytes: usize,
    ) -> Result<Fetched, String> {
        let logs = self.logs.lock().expect("logs");
        let Some((log_start, log)) = logs.get(&partition) else {
            return Ok(Fetched::default());
        };
        let mut records = BytesMut::new();
        // Two batches a read at most: a partition takes several reads in one cycle.
        for (_, b) in log.iter().filter(|(o, _)| *o >= from).take(2) {
            if !records.is_empty() && records.len() + b.len() > max_bytes {
                break;
            }
            records.extend_from_slice(b);
        }
        Ok(Fetched {
            records: records.freeze(),
            aborted: vec![],
            log_start: *log_start,
            stable_end: log.last().map_or(*log_start, |(o, _)| o + 1),
        })
    }

    fn table_has(&self, _topic: &str, partition: i32, offset: i64) {
        self.held.lock().expect("held").insert(partition, offset);
    }
}

fn translator(
    meta: &Arc<SqliteMetaStore>,
    store: &Arc<dyn object_store::ObjectStore>,
    source: Arc<dyn Source>,
    broker: i32,
) -> Translator {
    translator_reading(meta, store, source, broker, 1 << 20)
}

fn translator_reading(
    meta: &Arc<SqliteMetaStore>,
    store: &Arc<dyn object_store::ObjectStore>,
    source: Arc<dyn Source>,
    broker: i32,
    max_bytes_per_partition: usize,
) -> Translator {
    let catalog = Arc::new(common::catalog(meta, store));
    Translator::new(
        source,
        catalog,
        Settings {
            namespace: NamespaceIdent::new("kafka".into()),
            cluster: "cluster-1".into(),
            broker,
            max_bytes_per_partition,
            // A few records per batch, so every test writes a cycle in many batches.
            batch_bytes: 64,
        },
        IcebergMeters::default(),
    )
}

async fn rows_of(
    meta: &Arc<SqliteMetaStore>,
    store: &Arc<dyn object_store::ObjectStore>,
) -> Vec<(i32, i64)> {
    let c = common::catalog(meta, store);
    let table = c
        .load_table(&TableIdent::from_strs(["kafka", "orders_v1"]).expect("ident"))
        .await
        .expect("the table, named after the topic with its dot replaced");
    common::scanned(&table).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_once_across_cycles_and_brokers() {
    let meta = Arc::new(SqliteMetaStore::in_memory().expect("meta"));
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let source = Arc::new(Partitions::default());
    source.produce(0, 5);
    source.produce(1, 2);
    let a = translator(&meta, &store, Arc::clone(&source) as _, 1);
    let spec = &source.topics()[0];
    assert_eq!(
        a.cycle(spec).await.expect("cycle"),
        Cycle::Committed { records: 7 }
    );
    assert_eq!(a.cycle(spec).await.expect("cycle"), Cycle::Idle);
    assert_eq!(a.meters().records.get(), 7);
    assert_eq!(
        *source.held.lock().expect("held"),
        BTreeMap::from([(0, 5), (1, 2)]),
        "retention may delete what the table has"
    );
    assert_eq!(a.meters().lag("orders.v1").map(|l| l.records), Some(0));

    // Another broker takes the partitions over: it starts where the table is.
    source.produce(0, 2);
    let b = translator(&meta, &store, Arc::clone(&source) as _, 2);
    assert_eq!(
        b.cycle(spec).await.expect("cycle"),
        Cycle::Committed { records: 2 }
    );
    // The former leader, still running a cycle, finds nothing left to do.
    assert_eq!(a.cycle(spec).await.expect("cycle"), Cycle::Idle);

    let mut want: Vec<(i32, i64)> = (0..7).map(|o| (0, o)).collect();
    want.extend([(1, 0), (1, 1)]);
    want.sort();
    assert_eq!(rows_of(&meta, &store).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_retention_deleted_first_are_counted_and_skipped() {
    let meta = Arc::new(SqliteMetaStore::in_memory().expect("meta"));
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let source = Arc::new(Partitions::default());
    source.produce(0, 4);
    source.trim(0, 3);
    let t = translator(&meta, &store, Arc::clone(&source) as _, 1);
    let spec = &source.topics()[0];
    assert_eq!(
        t.cycle(spec).await.expect("cycle"),
        Cycle::Committed { records: 1 }
    );
    assert_eq!(t.meters().skipped.get(), 3);
    assert_eq!(rows_of(&meta, &store).await, vec![(0, 3)]);

    let c = common::catalog(&meta, &store);
    let table = c
        .load_table(&TableIdent::from_strs(["kafka", "orders_v1"]).expect("ident"))
        .await
        .expect("load");
    let p = progress::committed(&table.metadata_ref(), "cluster-1", "topic-1");
    assert_eq!(p.offsets, BTreeMap::from([(0, 4), (1, 0)]));
}

/// A source whose reads never end (an object store that stopped answering).
struct Stuck {
    reading: tokio::sync::Notify,
}

#[async_trait]
impl Source for Stuck {
    fn topics(&self) -> Vec<TopicSpec> {
        Partitions::default().topics()
    }

    async fn read(&self, _: &str, _: i32, _: i64, _: usize) -> Result<Fetched, String> {
        self.reading.notify_one();
        futures::future::pending().await
    }

    fn table_has(&self, _: &str, _: i32, _: i64) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_ends_a_cycle_under_way() {
    let meta = Arc::new(SqliteMetaStore::in_memory().expect("meta"));
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let stuck = Arc::new(Stuck {
        reading: tokio::sync::Notify::new(),
    });
    let t = Arc::new(translator(&meta, &store, Arc::clone(&stuck) as _, 1));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(t.run(Duration::from_millis(10), stopped));
    stuck.reading.notified().await;
    stop.send_replace(true);
    // A liveness bound, not a measurement: without the stop the task never ends.
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("the translator stopped")
        .expect("without a panic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_snapshots_and_metadata_files_go_and_the_progress_stays() {
    use futures::TryStreamExt;
    let meta = Arc::new(SqliteMetaStore::in_memory().expect("meta"));
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let source = Arc::new(Partitions::default());
    let t = translator(&meta, &store, Arc::clone(&source) as _, 1);
    let mut spec = source.topics()[0].clone();
    spec.snapshot_max_age = Some(Duration::from_millis(20));
    let commits = 25;
    for i in 0..commits {
        source.produce(i % 2, 1);
        assert_eq!(
            t.cycle(&spec).await.expect("cycle"),
            Cycle::Committed { records: 1 }
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(t.meters().expired_snapshots.get() > 0, "none expired");
    let c = common::catalog(&meta, &store);
    let table = c
        .load_table(&TableIdent::from_strs(["kafka", "orders_v1"]).expect("ident"))
        .await
        .expect("load");
    let snapshots = table.metadata().snapshots().count();
    assert!(snapshots < 25, "{snapshots} snapshots kept of 25");
    // The newest snapshot still says how far the table is: every record once, a new one next.
    let p = progress::committed(&table.metadata_ref(), "cluster-1", "topic-1");
    assert_eq!(p.offsets, BTreeMap::from([(0, 13), (1, 12)]));
    source.produce(0, 1);
    assert_eq!(
        t.cycle(&spec).await.expect("cycle"),
        Cycle::Committed { records: 1 }
    );
    let mut want: Vec<(i32, i64)> = (0..14).map(|o| (0, o)).collect();
    want.extend((0..12).map(|o| (1, o)));
    want.sort();
    assert_eq!(rows_of(&meta, &store).await, want);
    // Metadata files: the current one and the log's 20 (write.metadata.previous-versions-max).
    let metadata_files = store
        .list(None)
        .try_filter(|o| futures::future::ready(o.location.as_ref().ends_with(".metadata.json")))
        .try_collect::<Vec<_>>()
        .await
        .expect("list")
        .len();
    assert!(metadata_files <= 21, "{metadata_files} metadata files");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_with_more_than_a_cycle_reads_is_due_again_at_once() {
    let meta = Arc::new(SqliteMetaStore::in_memory().expect("meta"));
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    // An hour's target lag: without more to read, the topic is due every half hour.
    let source = Arc::new(Partitions {
        target_lag: Duration::from_secs(3600),
        ..Partitions::default()
    });
    source.produce(0, 3);
    // A byte a cycle: each reads one batch (one record) of the partition.
    let t = translator_reading(&meta, &store, Arc::clone(&source) as _, 1, 1);
    for _ in 0..3 {
        t.due_cycles().await;
    }
    assert_eq!(
        t.meters().records.get(),
        3,
        "the backlog waited for the target lag"
    );
    t.due_cycles().await;
    assert_eq!(t.meters().commits.get(), 3, "nothing left, nothing due");
    assert_eq!(rows_of(&meta, &store).await.len(), 3);
}

/// One JSON Schema for every subject.
struct OneSchema(Arc<Parsed>);

#[async_trait]
impl Schemas for OneSchema {
    async fn by_id(&self, _id: u32) -> Result<Arc<Parsed>, String> {
        Ok(Arc::clone(&self.0))
    }

    async fn latest(&self, _subject: &str) -> Result<(u32, Arc<Parsed>), String> {
        Ok((1, Arc::clone(&self.0)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_values_written_batch_by_batch_with_bad_ones_in_the_dead_letter_table() {
    let meta = Arc::new(SqliteMetaStore::in_memory().expect("meta"));
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let source = Arc::new(Partitions {
        mode: Some(Mode::SchemaLatest { subject: None }),
        ..Default::default()
    });
    let bad = [7, 23, 24];
    // Many batches of a few records each (the translator's batch_bytes is 64 here), and bad
    // records in some: the first, the middle and the last of one.
    source.produce_values(0, 40, |o| {
        if bad.contains(&o) {
            format!("not json {o}")
        } else {
            format!("{{\"n\": {o}}}")
        }
    });
    source.produce_values(1, 3, |o| format!("{{\"n\": {o}}}"));
    let schema = Parsed::parse(
        SchemaType::Json,
        r#"{"type": "object", "properties": {"n": {"type": "integer"}}}"#,
        &[],
    )
    .expect("schema");
    let t = translator(&meta, &store, Arc::clone(&source) as _, 1)
        .with_schemas(Arc::new(OneSchema(Arc::new(schema))));
    let spec = &source.topics()[0];
    assert_eq!(
        t.cycle(spec).await.expect("cycle"),
        Cycle::Committed { records: 43 }
    );
    assert_eq!(t.cycle(spec).await.expect("cycle"), Cycle::Idle);
    let mut want: Vec<(i32, i64)> = (0..40)
        .filter(|o| !bad.contains(o))
        .map(|o| (0, o))
        .collect();
    want.extend([(1, 0), (1, 1), (1, 2)]);
    assert_eq!(rows_of(&meta, &store).await, want);
    let c = common::catalog(&meta, &store);
    let dlq = c
        .load_table(&TableIdent::from_strs(["kafka", "orders_v1_dlq"]).expect("ident"))
        .await
        .expect("the dead-letter table");
    assert_eq!(
        common::scanned(&dlq).await,
        bad.iter().map(|o| (0, *o)).collect::<Vec<_>>()
    );
    assert_eq!(t.meters().dead_letters.get(), 3);
    assert_eq!(t.meters().records.get(), 40 + 3);
}
