//! The translator: on each broker, a loop that takes the records of the partitions it leads of
//! every topic with a table (`weir.iceberg.mode`) from storage, as a `read_committed` consumer
//! would read them, and appends them to the topic's table, exactly once.
//!
//! A cycle of a topic: load its table (created if missing), read its progress (see
//! [`crate::progress`]), read each partition led here from the offset the table has up to the
//! last stable offset (a bounded amount per cycle), write the rows as Parquet files, and commit
//! them with the progress moved past them. A commit refused because the table moved (another
//! broker committed its partitions, or a former leader of one of ours did) is dropped, files
//! and all, and the next cycle starts again from what the table then has: a record is in the
//! table once, whoever translated it. Nothing here is on the produce path: a slow catalog or a
//! failing commit delays the table, never a producer.
//!
//! A topic is translated every half of its target lag, so that a record is in the table within
//! about the target lag of being acknowledged.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use iceberg::spec::UnboundPartitionSpec;
use iceberg::table::Table;
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableCreation, TableIdent};

use crate::key_value::{self, Row};
use crate::meters::{IcebergMeters, Lag};
use crate::progress::{self, Progress};
use crate::{append, records};

/// How a topic's records become rows (`weir.iceberg.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Key and value as bytes, with headers, partition, offset and timestamp.
    KeyValue,
}

impl Mode {
    /// The topic config's value; `None` for `off` (and anything else, which the topic's
    /// config validation refuses before it gets here).
    pub fn parse(value: &str) -> Option<Mode> {
        match value {
            "key_value" => Some(Mode::KeyValue),
            _ => None,
        }
    }
}

/// A topic whose records go to a table, as the broker sees it now.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    pub name: String,
    /// The topic id (a topic created again under the name is another topic).
    pub topic_id: String,
    pub mode: Mode,
    pub target_lag: Duration,
    /// `weir.iceberg.partition.spec`, for a table not yet created.
    pub partition_spec: String,
    /// The partitions this broker leads.
    pub partitions: Vec<i32>,
}

/// Committed records of one partition, as a `read_committed` fetch returns them.
#[derive(Debug, Clone, Default)]
pub struct Fetched {
    /// Whole record batches from the offset asked (or from the log start, if it is above).
    pub records: Bytes,
    /// Aborted transactions among them: (producer id, first offset).
    pub aborted: Vec<(i64, i64)>,
    pub log_start: i64,
    /// The last stable offset: nothing at or above it is read.
    pub stable_end: i64,
}

/// Where records come from: the broker's partitions.
#[async_trait]
pub trait Source: Send + Sync + 'static {
    /// Topics with a table, and the partitions of each this broker leads.
    fn topics(&self) -> Vec<TopicSpec>;

    /// Batches of `topic`'s partition from `from`, about `max_bytes` of them at most (at least
    /// one batch if any is stable), below the last stable offset.
    async fn read(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        max_bytes: usize,
    ) -> Result<Fetched, String>;

    /// The table has the partition's records below `offset`: retention may delete them (and
    /// only them).
    fn table_has(&self, topic: &str, partition: i32, offset: i64);
}

/// The translator's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The namespace of the tables.
    pub namespace: NamespaceIdent,
    /// The Kafka cluster's id, in every progress record.
    pub cluster: String,
    /// Names the data files this broker writes (`<broker>-<uuid-ish>-<n>.parquet`).
    pub broker: i32,
    /// Record bytes read per partition in one cycle at most; the rest waits for the next.
    pub max_bytes_per_partition: usize,
}

/// The table name of a topic: Iceberg engines split names on dots, so dots become `_`.
pub fn table_name(topic: &str) -> String {
    topic.replace('.', "_")
}

/// A partition spec from `weir.iceberg.partition.spec`: empty or `hour(timestamp)` (the
/// default), `day(timestamp)`, `month(timestamp)`, `none`.
pub fn partition_spec(text: &str) -> Result<UnboundPartitionSpec, String> {
    use iceberg::spec::Transform;
    let transform = match text.trim() {
        "" | "hour(timestamp)" => Transform::Hour,
        "day(timestamp)" => Transform::Day,
        "month(timestamp)" => Transform::Month,
        "none" => return Ok(UnboundPartitionSpec::builder().build()),
        other => {
            return Err(format!(
                "unknown partition spec `{other}`: expected hour(timestamp), day(timestamp), month(timestamp) or none"
            ))
        }
    };
    let name = match transform {
        Transform::Day => "timestamp_day",
        Transform::Month => "timestamp_month",
        _ => "timestamp_hour",
    };
    UnboundPartitionSpec::builder()
        .add_partition_field(key_value::field::TIMESTAMP, name, transform)
        .map(|b| b.build())
        .map_err(|e| e.to_string())
}

/// What one cycle of a topic did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cycle {
    /// Nothing new to translate.
    Idle,
    /// Rows committed.
    Committed { records: usize },
    /// The table moved first; the rows were dropped, to be read again.
    Conflict,
}

pub struct Translator {
    source: Arc<dyn Source>,
    catalog: Arc<dyn Catalog>,
    settings: Settings,
    meters: IcebergMeters,
    /// When each topic was last translated.
    last: Mutex<HashMap<String, Instant>>,
    files: std::sync::atomic::AtomicU64,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Translator {
    pub fn new(
        source: Arc<dyn Source>,
        catalog: Arc<dyn Catalog>,
        settings: Settings,
        meters: IcebergMeters,
    ) -> Translator {
        Translator {
            source,
            catalog,
            settings,
            meters,
            last: Mutex::default(),
            files: Default::default(),
        }
    }

    pub fn meters(&self) -> &IcebergMeters {
        &self.meters
    }

    /// Runs cycles until `stop` turns true (or its sender is gone): every topic at half its
    /// target lag, checked every `tick`. A cycle under way then is dropped where it is (a
    /// shutdown does not wait for a slow catalog): what it wrote and did not commit is only
    /// files no snapshot names.
    pub async fn run(
        self: Arc<Self>,
        tick: Duration,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let stopped = |stop: &tokio::sync::watch::Receiver<bool>| {
            *stop.borrow() || stop.has_changed().is_err()
        };
        while !stopped(&stop) {
            tokio::select! {
                _ = self.due_cycles() => {}
                _ = stop.changed() => continue,
            }
            tokio::select! {
                _ = tokio::time::sleep(tick) => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// One cycle of every topic that is due.
    pub async fn due_cycles(&self) {
        let topics = self.source.topics();
        self.meters
            .keep_lag_of(&topics.iter().map(|t| t.name.clone()).collect::<Vec<_>>());
        for t in topics {
            if t.partitions.is_empty() {
                continue;
            }
            {
                let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
                let due = last
                    .get(&t.name)
                    .is_none_or(|at| at.elapsed() >= t.target_lag / 2);
                if !due {
                    continue;
                }
                last.insert(t.name.clone(), Instant::now());
            }
            if let Err(e) = self.cycle(&t).await {
                self.meters.errors.inc();
                tracing::warn!(topic = %t.name, error = %e, "iceberg: translation failed, retried later");
            }
        }
    }

    /// The topic's table, created if it is not there.
    async fn table(&self, t: &TopicSpec) -> Result<Table, String> {
        let ident = TableIdent::new(self.settings.namespace.clone(), table_name(&t.name));
        match self.catalog.load_table(&ident).await {
            Ok(table) => return Ok(table),
            Err(e) if e.kind() == ErrorKind::TableNotFound => {}
            Err(e) => return Err(format!("loading {ident}: {e}")),
        }
        match self
            .catalog
            .create_namespace(&self.settings.namespace, HashMap::new())
            .await
        {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NamespaceAlreadyExists => {}
            Err(e) => {
                return Err(format!(
                    "creating namespace {}: {e}",
                    self.settings.namespace
                ))
            }
        }
        let creation = TableCreation::builder()
            .name(ident.name().to_string())
            .schema(key_value::schema().map_err(|e| e.to_string())?)
            .partition_spec(partition_spec(&t.partition_spec)?)
            .properties(HashMap::from([(
                "write.parquet.compression-codec".to_string(),
                "zstd".to_string(),
            )]))
            .build();
        match self
            .catalog
            .create_table(&self.settings.namespace, creation)
            .await
        {
            Ok(table) => {
                tracing::info!(topic = %t.name, table = %ident, "iceberg: table created");
                Ok(table)
            }
            // Another broker created it first.
            Err(e) if e.kind() == ErrorKind::TableAlreadyExists => self
                .catalog
                .load_table(&ident)
                .await
                .map_err(|e| format!("loading {ident}: {e}")),
            Err(e) => Err(format!("creating {ident}: {e}")),
        }
    }

    /// Reads what the table lacks of the partitions led here: the rows, the offsets after them,
    /// and the lag before this cycle.
    async fn read(
        &self,
        t: &TopicSpec,
        had: &Progress,
    ) -> Result<(Vec<Row>, BTreeMap<i32, i64>, Lag), String> {
        let mut rows = Vec::new();
        let mut offsets = had.offsets.clone();
        let mut lag = Lag::default();
        let mut oldest: Option<i64> = None;
        for &p in &t.partitions {
            let mut from = had.offsets.get(&p).copied().unwrap_or(0);
            let mut read = 0usize;
            loop {
                let f = self
                    .source
                    .read(&t.name, p, from, self.settings.max_bytes_per_partition)
                    .await?;
                if from < f.log_start {
                    let lost = f.log_start - from;
                    self.meters.skipped.add(u64::try_from(lost).unwrap_or(0));
                    tracing::warn!(topic = %t.name, partition = p, from, log_start = f.log_start,
                        "iceberg: records deleted by retention before the table had them");
                    from = f.log_start;
                }
                if read == 0 {
                    lag.records += u64::try_from(f.stable_end - from).unwrap_or(0);
                }
                if from >= f.stable_end || f.records.is_empty() {
                    break;
                }
                let d = records::decode(p, &f.records, &f.aborted)
                    .map_err(|e| format!("partition {p}: {e}"))?;
                read += f.records.len();
                if let Some(first) = d.rows.first() {
                    oldest = Some(oldest.map_or(first.timestamp_ms, |o| o.min(first.timestamp_ms)));
                }
                rows.extend(d.rows.into_iter().filter(|r| r.offset >= from));
                match d.next_offset {
                    Some(next) if next > from => from = next,
                    _ => break,
                }
                if read >= self.settings.max_bytes_per_partition {
                    break;
                }
            }
            offsets.insert(p, from);
        }
        if let Some(ts) = oldest {
            lag.seconds = (now_ms() - ts).max(0) as f64 / 1000.0;
        }
        Ok((rows, offsets, lag))
    }

    /// One cycle of one topic.
    pub async fn cycle(&self, t: &TopicSpec) -> Result<Cycle, String> {
        let table = self.table(t).await?;
        let had = progress::committed(&table.metadata_ref(), &self.settings.cluster, &t.topic_id);
        self.release(t, &had);
        let (rows, offsets, lag) = self.read(t, &had).await?;
        if rows.is_empty() {
            // What is left is markers or aborted records, which the table never gets.
            self.meters.set_lag(&t.name, Lag::default());
            // Offsets that moved past markers or aborted records alone wait for rows to
            // commit with: an empty snapshot per cycle would only grow the table's history.
            return Ok(Cycle::Idle);
        }
        self.meters.set_lag(&t.name, lag);
        let started = Instant::now();
        let arrow = Arc::new(
            iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())
                .map_err(|e| e.to_string())?,
        );
        let batch = key_value::batch(&arrow, &rows).map_err(|e| e.to_string())?;
        let n = self
            .files
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let prefix = format!("{}-{}-{n}", self.settings.broker, now_ms());
        let files = append::write_files(&table, batch, &prefix)
            .await
            .map_err(|e| format!("writing data files: {e}"))?;
        let bytes: u64 = files.iter().map(|f| f.file_size_in_bytes()).sum();
        let paths: Vec<String> = files.iter().map(|f| f.file_path().to_string()).collect();
        let count = files.len();
        let now = Progress { offsets, ..had };
        match append::commit(&*self.catalog, &table, files, &now).await {
            Ok(_) => {
                self.release(t, &now);
                self.meters.commit_latency.record(started.elapsed());
                self.meters.commits.inc();
                self.meters.files.add(count as u64);
                self.meters.file_bytes.add(bytes);
                self.meters.records.add(rows.len() as u64);
                self.meters.set_lag(
                    &t.name,
                    Lag {
                        records: lag.records.saturating_sub(rows.len() as u64),
                        seconds: 0.0,
                    },
                );
                Ok(Cycle::Committed {
                    records: rows.len(),
                })
            }
            Err(e) => {
                self.drop_files(table, paths).await;
                if e.kind() == ErrorKind::CatalogCommitConflicts {
                    self.meters.conflicts.inc();
                    tracing::info!(topic = %t.name, error = %e, "iceberg: the table moved first; translating again");
                    Ok(Cycle::Conflict)
                } else {
                    Err(format!("committing: {e}"))
                }
            }
        }
    }

    /// Lets retention delete what the table has of the partitions led here.
    fn release(&self, t: &TopicSpec, has: &Progress) {
        for &p in &t.partitions {
            let offset = has.offsets.get(&p).copied().unwrap_or(0);
            self.source.table_has(&t.name, p, offset);
        }
    }

    /// Deletes data files no commit took (best effort: an orphan costs only storage).
    async fn drop_files(&self, table: Table, paths: Vec<String>) {
        for p in paths {
            if let Err(e) = table.file_io().delete(&p).await {
                tracing::debug!(file = %p, error = %e, "iceberg: an uncommitted data file not deleted");
            }
        }
    }
}
