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

use arrow_array::RecordBatch;
use async_trait::async_trait;
use bytes::Bytes;
use iceberg::spec::{DataFile, Schema, UnboundPartitionSpec};
use iceberg::table::Table;
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableCreation, TableIdent};
use weir_registry::format::Parsed;

use crate::key_value::{self, Row};
use crate::meters::{IcebergMeters, Lag};
use crate::progress::{self, Progress};
use crate::{append, expire, records};

mod typed_cycle;

/// How a topic's records become rows (`weir.iceberg.mode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Key and value as bytes, with headers, partition, offset and timestamp.
    KeyValue,
    /// The value decoded with the schema its wire-format prefix names.
    SchemaIdPrefix,
    /// The value, bare, decoded with the latest schema of a subject (`<topic>-value` unless
    /// the mode names one: `value_schema_latest:subject=NAME`).
    SchemaLatest { subject: Option<String> },
}

impl Mode {
    /// The topic config's value; `None` for `off` (and anything else, which the topic's
    /// config validation refuses before it gets here).
    pub fn parse(value: &str) -> Option<Mode> {
        match value.trim() {
            "key_value" => Some(Mode::KeyValue),
            "value_schema_id_prefix" => Some(Mode::SchemaIdPrefix),
            "value_schema_latest" => Some(Mode::SchemaLatest { subject: None }),
            other => {
                let subject = other
                    .strip_prefix("value_schema_latest:subject=")
                    .filter(|s| !s.is_empty())?;
                Some(Mode::SchemaLatest {
                    subject: Some(subject.to_string()),
                })
            }
        }
    }
}

/// What happens to a record whose value does not decode or fit the table
/// (`weir.iceberg.invalid.record.action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InvalidAction {
    /// Into `<table>_dlq`, in the `key_value` layout with the reason.
    #[default]
    DeadLetter,
    /// Counted and left out.
    Drop,
}

impl InvalidAction {
    pub fn parse(value: &str) -> Option<InvalidAction> {
        match value.trim() {
            "" | "dlq_table" => Some(InvalidAction::DeadLetter),
            "drop" => Some(InvalidAction::Drop),
            _ => None,
        }
    }
}

/// The schemas of the registry, for the typed layouts.
#[async_trait]
pub trait Schemas: Send + Sync + 'static {
    /// The schema registered with `id`.
    async fn by_id(&self, id: u32) -> Result<Arc<Parsed>, String>;
    /// The latest version of `subject`: its id and schema.
    async fn latest(&self, subject: &str) -> Result<(u32, Arc<Parsed>), String>;
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
    /// `weir.iceberg.invalid.record.action` (the typed layouts).
    pub invalid: InvalidAction,
    /// `weir.iceberg.snapshot.max.age.ms`: snapshots older are expired (`None`: never).
    pub snapshot_max_age: Option<Duration>,
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
    /// Rows are made into Arrow batches of about this many bytes of keys and values, one at a
    /// time: a cycle's rows in Arrow form at once would be hundreds of MiB of fresh pages (most
    /// of translation's CPU went to faulting them in); a few MiB, and the allocator reuses the
    /// same memory from one batch to the next. [`BATCH_BYTES`] unless a test wants many.
    pub batch_bytes: usize,
}

/// The default [`Settings::batch_bytes`].
pub const BATCH_BYTES: usize = 4 << 20;

/// The Arrow form of `table`'s current schema (its fields carry the Iceberg field ids the
/// Parquet writer needs).
fn arrow_schema(table: &Table) -> Result<arrow_schema::SchemaRef, String> {
    iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

/// The paths of `files`.
fn paths(files: &[DataFile]) -> Vec<String> {
    files.iter().map(|f| f.file_path().to_string()).collect()
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
        "none" => return Ok(UnboundPartitionSpec::builder().with_spec_id(0).build()),
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
    // The spec id, which Java's REST servers require in a create request.
    UnboundPartitionSpec::builder()
        .with_spec_id(0)
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
    /// The records cannot go to the table as it is (a schema changed a column's type): nothing
    /// was written, and the next cycle tries again.
    Paused { reason: String },
}

pub struct Translator {
    source: Arc<dyn Source>,
    catalog: Arc<dyn Catalog>,
    schemas: Option<Arc<dyn Schemas>>,
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
            schemas: None,
            settings,
            meters,
            last: Mutex::default(),
            files: Default::default(),
        }
    }

    /// The registry's schemas, for topics of the typed layouts (without them, such a topic's
    /// cycles fail).
    pub fn with_schemas(mut self, schemas: Arc<dyn Schemas>) -> Translator {
        self.schemas = Some(schemas);
        self
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
            match self.cycle(&t).await {
                Ok(Cycle::Paused { reason }) => {
                    if self.meters.set_paused(&t.name, Some(&reason)) {
                        tracing::error!(topic = %t.name, %reason, "iceberg: translation paused");
                    }
                }
                Ok(_) => {
                    self.meters.set_paused(&t.name, None);
                }
                Err(e) => {
                    self.meters.errors.inc();
                    tracing::warn!(topic = %t.name, error = %e, "iceberg: translation failed, retried later");
                }
            }
        }
    }

    fn ident(&self, name: &str) -> TableIdent {
        TableIdent::new(self.settings.namespace.clone(), name.to_string())
    }

    /// The table, if it exists.
    async fn load(&self, ident: &TableIdent) -> Result<Option<Table>, String> {
        match self.catalog.load_table(ident).await {
            Ok(table) => Ok(Some(table)),
            Err(e) if e.kind() == ErrorKind::TableNotFound => Ok(None),
            Err(e) => Err(format!("loading {ident}: {e}")),
        }
    }

    /// Creates a table of `schema` for topic `t` (or loads the one another broker created
    /// first).
    async fn create(
        &self,
        t: &TopicSpec,
        ident: &TableIdent,
        schema: Schema,
    ) -> Result<Table, String> {
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
            .schema(schema)
            .partition_spec(partition_spec(&t.partition_spec)?)
            .properties(HashMap::from([
                ("write.parquet.compression-codec".into(), "zstd".into()),
                // Each commit writes a metadata file: keep the last 20 (Java's catalogs
                // delete the rest on commit, as Weir's does with this property).
                (
                    "write.metadata.delete-after-commit.enabled".into(),
                    "true".into(),
                ),
                ("write.metadata.previous-versions-max".into(), "20".into()),
            ]))
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
                .load(ident)
                .await?
                .ok_or_else(|| format!("{ident} was created and is gone")),
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
        let mut capped = false;
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
                    capped = true;
                    break;
                }
            }
            offsets.insert(p, from);
        }
        if capped {
            // More is stable than a cycle reads: the topic is due again at the next tick, not
            // half a target lag later (a backlog, or a rate above what one cycle takes).
            self.last
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&t.name);
        }
        if let Some(ts) = oldest {
            lag.seconds = (now_ms() - ts).max(0) as f64 / 1000.0;
        }
        Ok((rows, offsets, lag))
    }

    /// One cycle of one topic.
    pub async fn cycle(&self, t: &TopicSpec) -> Result<Cycle, String> {
        let ident = self.ident(&table_name(&t.name));
        let table = self.load(&ident).await?;
        let had = match &table {
            Some(table) => {
                progress::committed(&table.metadata_ref(), &self.settings.cluster, &t.topic_id)
            }
            None => Progress {
                cluster: self.settings.cluster.clone(),
                topic_id: t.topic_id.clone(),
                parent: None,
                offsets: BTreeMap::new(),
            },
        };
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
        let n = rows.len();
        let now = Progress { offsets, ..had };
        let written = match t.mode {
            Mode::KeyValue => {
                let table = match table {
                    Some(table) => table,
                    None => {
                        self.create(t, &ident, key_value::schema().map_err(|e| e.to_string())?)
                            .await?
                    }
                };
                self.append(t, table, &rows, None, &now).await?
            }
            _ => match self.typed(t, &ident, table, rows, &now).await? {
                Ok(written) => written,
                Err(cycle) => return Ok(cycle),
            },
        };
        if !written {
            return Ok(Cycle::Conflict);
        }
        self.release(t, &now);
        self.meters.commit_latency.record(started.elapsed());
        self.meters.set_lag(
            &t.name,
            Lag {
                records: lag.records.saturating_sub(n as u64),
                seconds: 0.0,
            },
        );
        Ok(Cycle::Committed { records: n })
    }

    /// Writes `rows` (with their `reasons`, for a dead-letter table) and commits them with
    /// `progress`; `false`: the table moved first, and nothing was written. No rows: a commit
    /// of the progress alone.
    async fn append(
        &self,
        t: &TopicSpec,
        table: Table,
        rows: &[Row],
        reasons: Option<&[String]>,
        progress: &Progress,
    ) -> Result<bool, String> {
        let arrow = arrow_schema(&table)?;
        let batches = key_value::chunks(rows, self.settings.batch_bytes)
            .into_iter()
            .map(|range| {
                let reasons = reasons.map(|r| &r[range.clone()]);
                key_value::batch_with(&arrow, &rows[range], None, reasons)
            });
        let files = self.write(&table, batches).await?;
        self.commit(t, table, files, rows.len(), progress).await
    }

    /// Writes `batches` (of `table`'s current schema) as data files, not yet committed.
    async fn write(
        &self,
        table: &Table,
        batches: impl Iterator<Item = iceberg::Result<RecordBatch>> + Send,
    ) -> Result<Vec<DataFile>, String> {
        let n = self
            .files
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let prefix = format!("{}-{}-{n}", self.settings.broker, now_ms());
        append::write_files(table, batches, &prefix)
            .await
            .map_err(|e| format!("writing data files: {e}"))
    }

    /// Commits `files` (of `records` rows) to `table` with `progress`; `false`: the table moved
    /// first, and the files are deleted.
    async fn commit(
        &self,
        t: &TopicSpec,
        table: Table,
        files: Vec<DataFile>,
        records: usize,
        progress: &Progress,
    ) -> Result<bool, String> {
        let bytes: u64 = files.iter().map(|f| f.file_size_in_bytes()).sum();
        let paths = paths(&files);
        let count = files.len();
        match append::commit(&*self.catalog, &table, files, progress).await {
            Ok(after) => {
                self.meters.commits.inc();
                self.meters.files.add(count as u64);
                self.meters.file_bytes.add(bytes);
                self.meters.records.add(records as u64);
                if let Some(max_age) = t.snapshot_max_age {
                    self.expire(t, &after, max_age).await;
                }
                Ok(true)
            }
            Err(e) => {
                let ident = table.identifier().clone();
                self.drop_files(table, paths).await;
                if e.kind() == ErrorKind::CatalogCommitConflicts {
                    self.meters.conflicts.inc();
                    tracing::info!(table = %ident, error = %e, "iceberg: the table moved first; translating again");
                    Ok(false)
                } else {
                    Err(format!("committing: {e}"))
                }
            }
        }
    }

    /// Expires `table`'s snapshots older than `max_age`, if it is time (best effort: the next
    /// commit tries again).
    async fn expire(&self, t: &TopicSpec, table: &Table, max_age: Duration) {
        let ids = expire::due(
            table,
            &self.settings.cluster,
            &t.topic_id,
            max_age,
            now_ms(),
        );
        if ids.is_empty() {
            return;
        }
        let n = ids.len();
        match expire::expire(&*self.catalog, table, ids).await {
            Ok(_) => {
                self.meters.expired_snapshots.add(n as u64);
                tracing::debug!(table = %table.identifier(), snapshots = n, "iceberg: snapshots expired");
            }
            Err(e) => {
                tracing::info!(table = %table.identifier(), error = %e, "iceberg: snapshots not expired; tried again after a later commit");
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
