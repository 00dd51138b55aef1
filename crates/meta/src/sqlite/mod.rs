//! The SQLite metadata store: one file in the data directory, for a single node.
//!
//! One connection behind a mutex, used from blocking threads; every call is one transaction.
//! `synchronous=FULL` in WAL journal mode: a commit is durable when it returns, which the storage
//! engine relies on before it trims its WAL.
//!
//! One [`SqliteMetaStore`] implements every part of the store, one module each, all on the same
//! connection and schema; this module holds what they share.

mod acls;
pub(crate) mod catalog;
mod coordination;
mod credentials;
mod group_offsets;
mod group_states;
mod iceberg;
mod links;
mod object_index;
mod producer_snapshots;
mod quotas;
mod schemas;
pub(crate) mod share;
mod transactions;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OptionalExtension};

use crate::{MetaError, Result, StreamMeta};

/// The schema's version, kept in the file (`PRAGMA user_version`; 0 in files of 0.1.0, which
/// had this schema). Raise it with any change to `SCHEMA` that an earlier release could not run
/// on: a file of a later version is refused, not used.
const SCHEMA_VERSION: i32 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS streams (
    stream_id    INTEGER PRIMARY KEY,
    epoch        INTEGER NOT NULL,
    start_offset INTEGER NOT NULL,
    end_offset   INTEGER NOT NULL
);
-- state: 'prepared' (id taken, upload under way), 'live' (committed, referenced by ranges),
-- 'unreferenced' (no ranges left, waiting out the grace period), 'deleting' (claimed for
-- deletion: never committed again; the row goes once the bytes are gone). since_ms: when it
-- entered that state.
CREATE TABLE IF NOT EXISTS objects (
    object_id INTEGER PRIMARY KEY AUTOINCREMENT,
    key       TEXT NOT NULL,
    size      INTEGER NOT NULL DEFAULT 0,
    state     TEXT NOT NULL,
    since_ms  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS ranges (
    stream_id     INTEGER NOT NULL,
    start_offset  INTEGER NOT NULL,
    end_offset    INTEGER NOT NULL,
    object_id     INTEGER NOT NULL REFERENCES objects(object_id),
    position      INTEGER NOT NULL,
    size          INTEGER NOT NULL,
    max_timestamp INTEGER NOT NULL,
    PRIMARY KEY (stream_id, start_offset)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ranges_by_object ON ranges(object_id);
CREATE TABLE IF NOT EXISTS topics (
    name     TEXT PRIMARY KEY,
    topic_id BLOB NOT NULL UNIQUE,
    configs  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS partitions (
    topic     TEXT NOT NULL REFERENCES topics(name),
    partition INTEGER NOT NULL,
    stream_id INTEGER NOT NULL UNIQUE,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE IF NOT EXISTS group_offsets (
    group_id     TEXT NOT NULL,
    topic        TEXT NOT NULL,
    partition    INTEGER NOT NULL,
    offset       INTEGER NOT NULL,
    leader_epoch INTEGER NOT NULL,
    metadata     TEXT,
    commit_ms    INTEGER NOT NULL,
    PRIMARY KEY (group_id, topic, partition)
);
-- A group's membership, encoded by the group coordinator.
CREATE TABLE IF NOT EXISTS group_states (
    group_id TEXT PRIMARY KEY,
    data     BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS producer_snapshots (
    stream_id INTEGER PRIMARY KEY,
    offset    INTEGER NOT NULL,
    data      BLOB NOT NULL
);
-- Streams of deleted topics, so that they are never opened again (at a lower epoch).
CREATE TABLE IF NOT EXISTS deleted_streams (
    stream_id INTEGER PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS kv (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS objects_by_state ON objects(state, since_ms);
-- The cluster (a single broker on SQLite, but the same rows as on PostgreSQL).
CREATE TABLE IF NOT EXISTS brokers (
    node_id       INTEGER PRIMARY KEY,
    incarnation   INTEGER NOT NULL,
    zone          TEXT NOT NULL,
    host          TEXT NOT NULL,
    port          INTEGER NOT NULL,
    internal_addr TEXT NOT NULL,
    state         TEXT NOT NULL,
    expires_ms    INTEGER NOT NULL
);
-- A broker's Kafka listeners, replaced by each registration; ordinal keeps the broker's order.
CREATE TABLE IF NOT EXISTS broker_listeners (
    node_id INTEGER NOT NULL,
    name    TEXT NOT NULL,
    ordinal INTEGER NOT NULL,
    host    TEXT NOT NULL,
    port    INTEGER NOT NULL,
    PRIMARY KEY (node_id, name)
);
CREATE TABLE IF NOT EXISTS controller (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    node_id    INTEGER NOT NULL,
    epoch      INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS assignments (
    stream_id INTEGER PRIMARY KEY,
    leader    INTEGER,
    target    INTEGER
);
CREATE TABLE IF NOT EXISTS wals (
    wal_id      TEXT PRIMARY KEY,
    node_id     INTEGER NOT NULL,
    incarnation INTEGER NOT NULL,
    path        TEXT NOT NULL,
    state       TEXT NOT NULL,
    recoverer   INTEGER,
    tried       TEXT NOT NULL DEFAULT '',
    since_ms    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS broker_loads (
    node_id    INTEGER PRIMARY KEY,
    at_ms      INTEGER NOT NULL,
    cpu        REAL NOT NULL,
    partitions TEXT NOT NULL
);
-- Each transactional id's state, encoded by weir_meta::TxnRecord; version grows by one a write.
CREATE TABLE IF NOT EXISTS transactions (
    transactional_id TEXT PRIMARY KEY,
    version          INTEGER NOT NULL,
    data             BLOB NOT NULL
);
-- Group offsets a transaction commits, staged until it ends.
CREATE TABLE IF NOT EXISTS txn_offsets (
    transactional_id TEXT NOT NULL,
    group_id         TEXT NOT NULL,
    topic            TEXT NOT NULL,
    partition        INTEGER NOT NULL,
    offset           INTEGER NOT NULL,
    leader_epoch     INTEGER NOT NULL,
    metadata         TEXT,
    commit_ms        INTEGER NOT NULL,
    PRIMARY KEY (transactional_id, group_id, topic, partition)
);
CREATE INDEX IF NOT EXISTS txn_offsets_by_group ON txn_offsets(group_id);
-- Users' SCRAM credentials, one per mechanism (RFC 5802's stored and server keys, not passwords).
CREATE TABLE IF NOT EXISTS scram_credentials (
    user_name  TEXT NOT NULL,
    mechanism  TEXT NOT NULL,
    salt       BLOB NOT NULL,
    stored_key BLOB NOT NULL,
    server_key BLOB NOT NULL,
    iterations INTEGER NOT NULL,
    PRIMARY KEY (user_name, mechanism)
);
-- ACL bindings, as Kafka's codes (resource type, pattern type, operation, permission type); the
-- whole binding is the key.
CREATE TABLE IF NOT EXISTS acls (
    resource_type   INTEGER NOT NULL,
    resource_name   TEXT NOT NULL,
    pattern_type    INTEGER NOT NULL,
    principal       TEXT NOT NULL,
    host            TEXT NOT NULL,
    operation       INTEGER NOT NULL,
    permission_type INTEGER NOT NULL,
    PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation,
                 permission_type)
) WITHOUT ROWID;
-- Client quotas: a value per entity (the API layer's canonical text, e.g.
-- 'user=alice,client-id=app'; the store does not interpret it) and quota key.
CREATE TABLE IF NOT EXISTS client_quotas (
    entity    TEXT NOT NULL,
    quota_key TEXT NOT NULL,
    value     REAL NOT NULL,
    PRIMARY KEY (entity, quota_key)
) WITHOUT ROWID;
-- Cluster links: each link's definition and state (the link layer's JSON), and a version
-- that every change raises.
CREATE TABLE IF NOT EXISTS links (
    name    TEXT PRIMARY KEY,
    body    TEXT NOT NULL,
    version INTEGER NOT NULL
) WITHOUT ROWID;
-- Share groups' share-partitions (KIP-932): the start offset and the batches above it, as
-- the share module encodes them; fenced by leader epoch and state epoch.
CREATE TABLE IF NOT EXISTS share_states (
    group_id     TEXT NOT NULL,
    topic        TEXT NOT NULL,
    partition    INTEGER NOT NULL,
    state_epoch  INTEGER NOT NULL,
    leader_epoch INTEGER NOT NULL,
    start_offset INTEGER NOT NULL,
    batches      BLOB NOT NULL,
    PRIMARY KEY (group_id, topic, partition)
) WITHOUT ROWID;
-- The schema registry: schemas by id (the canonical text, and a fingerprint of the whole
-- content, its identity), the references each makes, subjects' versions (soft-deleted ones
-- kept), settings (compatibility configs and modes; subject '' is the global one), and one
-- row with the registry's version (raised by every write) and the highest id ever given.
CREATE TABLE IF NOT EXISTS schemas (
    id          INTEGER PRIMARY KEY,
    schema_type TEXT NOT NULL,
    schema      TEXT NOT NULL,
    metadata    TEXT,
    rule_set    TEXT,
    fingerprint TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS schemas_fingerprint ON schemas (fingerprint);
CREATE TABLE IF NOT EXISTS schema_refs (
    schema_id INTEGER NOT NULL,
    position  INTEGER NOT NULL,
    name      TEXT NOT NULL,
    subject   TEXT NOT NULL,
    version   INTEGER NOT NULL,
    PRIMARY KEY (schema_id, position)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS schema_refs_target ON schema_refs (subject, version);
CREATE TABLE IF NOT EXISTS subject_versions (
    subject   TEXT NOT NULL,
    version   INTEGER NOT NULL,
    schema_id INTEGER NOT NULL,
    deleted   BOOLEAN NOT NULL,
    PRIMARY KEY (subject, version)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS subject_versions_schema ON subject_versions (schema_id);
CREATE TABLE IF NOT EXISTS registry_settings (
    kind    TEXT NOT NULL,
    subject TEXT NOT NULL,
    value   TEXT NOT NULL,
    PRIMARY KEY (kind, subject)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS registry_state (
    one     INTEGER PRIMARY KEY CHECK (one = 1),
    version INTEGER NOT NULL,
    max_id  INTEGER NOT NULL
);
INSERT OR IGNORE INTO registry_state (one, version, max_id) VALUES (1, 0, 0);
-- The Iceberg SQL catalog, as the JDBC catalogs lay it out (pyiceberg's SqlCatalog, Iceberg's
-- JdbcCatalog and iceberg-rust read these two tables by these names and columns): a table's row
-- points at its current metadata file; a commit is a compare-and-set of metadata_location.
CREATE TABLE IF NOT EXISTS iceberg_tables (
    catalog_name VARCHAR(255) NOT NULL,
    table_namespace VARCHAR(255) NOT NULL,
    table_name VARCHAR(255) NOT NULL,
    metadata_location VARCHAR(1000),
    previous_metadata_location VARCHAR(1000),
    iceberg_type VARCHAR(5),
    PRIMARY KEY (catalog_name, table_namespace, table_name)
);
CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
    catalog_name VARCHAR(255) NOT NULL,
    namespace VARCHAR(255) NOT NULL,
    property_key VARCHAR(255) NOT NULL,
    property_value VARCHAR(1000) NOT NULL,
    PRIMARY KEY (catalog_name, namespace, property_key)
);
";

pub struct SqliteMetaStore {
    /// Taken before a blocking thread is: calls wait for the one connection here, not each on
    /// a thread of its own (a burst of calls, one per partition, held hundreds of threads).
    conn: Arc<tokio::sync::Mutex<Connection>>,
    #[cfg(test)]
    blocking: Arc<Blocking>,
    /// Moves on every cluster change: one process uses a SQLite store, so no one else changes it.
    changes: tokio::sync::watch::Sender<u64>,
    /// The last answer of `assignments()` and the [`CatalogVersion::version`] it was read at.
    assignments: Arc<std::sync::Mutex<Option<KeptAssignments>>>,
    catalog: CatalogVersion,
}

/// An answer of `assignments()` and the [`CatalogVersion::version`] it was read at.
type KeptAssignments = (u64, Vec<crate::Assignment>);

/// Counts changes to the tables an assignment is read from (partitions, assignments and
/// streams, whose epochs it reports), from SQLite's update hook on the one connection: the
/// controller reads every assignment four times a second and the cluster view once, which at
/// 10,000 partitions was a tenth of a loaded broker's CPU, though they rarely change. One
/// process uses a SQLite store, so every change goes through this connection; a change rolled
/// back still counts (one read more, never a stale one).
#[derive(Clone, Default)]
struct CatalogVersion {
    version: Arc<std::sync::atomic::AtomicU64>,
    /// Full reads of the assignments, for tests.
    #[cfg(test)]
    reads: Arc<std::sync::atomic::AtomicU64>,
}

impl CatalogVersion {
    fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::Acquire)
    }

    fn watch(&self, conn: &Connection) -> Result<()> {
        let version = Arc::clone(&self.version);
        conn.update_hook(Some(
            move |_: rusqlite::hooks::Action, _: &str, table: &str, _: i64| {
                if matches!(table, "assignments" | "partitions" | "streams") {
                    version.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                }
            },
        ))
        .map_err(backend("setting the update hook"))
    }
}

fn backend(context: &'static str) -> impl FnOnce(rusqlite::Error) -> MetaError {
    move |e| MetaError::Backend {
        context,
        source: Box::new(e),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// SQLite integers are signed 64-bit. Ids, epochs and offsets stay far below 2^63, but a value
/// above saturates rather than wraps, so that SQL comparisons keep their order (a start offset
/// past every offset stays past every offset). Commits check their offsets exactly.
fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn stream_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StreamMeta> {
    Ok(StreamMeta {
        stream_id: row.get::<_, i64>(0)? as u64,
        epoch: row.get::<_, i64>(1)? as u64,
        start_offset: row.get::<_, i64>(2)? as u64,
        end_offset: row.get::<_, i64>(3)? as u64,
    })
}

fn read_stream(conn: &Connection, stream_id: u64) -> Result<Option<StreamMeta>> {
    conn.query_row(
        "SELECT stream_id, epoch, start_offset, end_offset FROM streams WHERE stream_id = ?1",
        params![i(stream_id)],
        stream_row,
    )
    .optional()
    .map_err(backend("reading a stream"))
}

impl SqliteMetaStore {
    pub fn open(path: &Path) -> Result<SqliteMetaStore> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir).map_err(|e| MetaError::Backend {
                    context: "creating the metadata directory",
                    source: Box::new(e),
                })?;
            }
        }
        let conn = Connection::open(path).map_err(backend("opening the SQLite file"))?;
        Self::init(conn)
    }

    /// A private in-memory database, for unit tests.
    pub fn in_memory() -> Result<SqliteMetaStore> {
        Self::init(Connection::open_in_memory().map_err(backend("opening SQLite"))?)
    }

    fn init(conn: Connection) -> Result<SqliteMetaStore> {
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(backend("setting journal_mode"))?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(backend("setting synchronous"))?;
        conn.busy_timeout(Duration::from_secs(10))
            .map_err(backend("setting busy_timeout"))?;
        check_schema_version(&conn)?;
        conn.execute_batch(SCHEMA)
            .map_err(backend("creating the schema"))?;
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(backend("recording the schema version"))?;
        let catalog = CatalogVersion::default();
        catalog.watch(&conn)?;
        Ok(SqliteMetaStore {
            conn: Arc::new(tokio::sync::Mutex::new(conn)),
            #[cfg(test)]
            blocking: Arc::default(),
            changes: tokio::sync::watch::Sender::new(0),
            assignments: Arc::default(),
            catalog,
        })
    }

    /// Runs `f` on the connection on a blocking thread.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let mut c = Arc::clone(&self.conn).lock_owned().await;
        #[cfg(test)]
        let blocking = Arc::clone(&self.blocking);
        tokio::task::spawn_blocking(move || {
            #[cfg(test)]
            let _inside = Inside::enter(blocking);
            f(&mut c)
        })
        .await
        .map_err(|e| MetaError::Backend {
            context: "metadata task",
            source: Box::new(e),
        })?
    }
}

/// Calls inside a blocking thread at once, and the most seen (tests).
#[cfg(test)]
#[derive(Default)]
struct Blocking {
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

/// A call inside a blocking thread, counted while it lasts.
#[cfg(test)]
struct Inside(Arc<Blocking>);

#[cfg(test)]
impl Inside {
    fn enter(counts: Arc<Blocking>) -> Self {
        use std::sync::atomic::Ordering::SeqCst;
        let now = counts.now.fetch_add(1, SeqCst) + 1;
        counts.most.fetch_max(now, SeqCst);
        Inside(counts)
    }
}

#[cfg(test)]
impl Drop for Inside {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Drops ranges wholly below their stream's start offset and marks objects left without ranges.
fn drop_ranges_below_start(
    tx: &rusqlite::Transaction<'_>,
    streams: impl Iterator<Item = u64>,
    now: i64,
) -> Result<()> {
    for stream_id in streams {
        tx.execute(
            "CREATE TEMP TABLE IF NOT EXISTS touched (object_id INTEGER PRIMARY KEY)",
            [],
        )
        .map_err(backend("temp table"))?;
        tx.execute(
            "INSERT OR IGNORE INTO touched SELECT object_id FROM ranges
             WHERE stream_id = ?1 AND end_offset <= (SELECT start_offset FROM streams WHERE stream_id = ?1)",
            params![i(stream_id)],
        )
        .map_err(backend("finding ranges below the start"))?;
        tx.execute(
            "DELETE FROM ranges WHERE stream_id = ?1
             AND end_offset <= (SELECT start_offset FROM streams WHERE stream_id = ?1)",
            params![i(stream_id)],
        )
        .map_err(backend("dropping ranges below the start"))?;
        tx.execute(
            "UPDATE objects SET state = 'unreferenced', since_ms = ?1
             WHERE state = 'live' AND object_id IN (SELECT object_id FROM touched)
             AND NOT EXISTS (SELECT 1 FROM ranges r WHERE r.object_id = objects.object_id)",
            params![now],
        )
        .map_err(backend("marking unreferenced objects"))?;
        tx.execute("DELETE FROM touched", [])
            .map_err(backend("temp table"))?;
    }
    Ok(())
}

/// Refuses a file written by a later release (its schema version above this broker's).
fn check_schema_version(conn: &Connection) -> Result<()> {
    let version: i32 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(backend("reading the schema version"))?;
    if version <= SCHEMA_VERSION {
        return Ok(());
    }
    Err(MetaError::Backend {
        context: "opening the metadata file",
        source: format!(
            "its schema is at version {version}, newer than this broker's {SCHEMA_VERSION}: \
             a later Weir release wrote it; run that release or a later one (a downgrade of a \
             SQLite metadata file is not possible)"
        )
        .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;
    use crate::ObjectIndex;

    /// The file records its schema version, and a broker refuses a file from a later release
    /// rather than running on a schema it does not know.
    #[test]
    fn a_file_of_a_later_schema_is_refused_and_left_as_it_is() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("meta.db");
        drop(SqliteMetaStore::open(&path).expect("open"));
        let version = |p: &Path| -> i32 {
            Connection::open(p)
                .expect("open")
                .pragma_query_value(None, "user_version", |r| r.get(0))
                .expect("user_version")
        };
        assert_eq!(version(&path), SCHEMA_VERSION);
        Connection::open(&path)
            .expect("open")
            .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .expect("a later release's file");
        let refused = SqliteMetaStore::open(&path)
            .err()
            .expect("refused")
            .to_string();
        let want = format!(
            "schema is at version {}, newer than this broker's {SCHEMA_VERSION}",
            SCHEMA_VERSION + 1
        );
        assert!(refused.contains(&want), "{refused}");
        assert_eq!(version(&path), SCHEMA_VERSION + 1);
    }

    fn store() -> SqliteMetaStore {
        SqliteMetaStore::in_memory().expect("open")
    }

    /// A burst of calls (one per partition, as a new leader's or the balancer's) waits for the
    /// connection without taking a blocking thread each: before, 200 calls held up to 200
    /// threads, each waiting for the connection's lock, kept alive by the runtime afterwards.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_calls_waits_for_the_connection_not_on_threads() {
        let s = Arc::new(store());
        let mut calls = tokio::task::JoinSet::new();
        for stream in 0..200u64 {
            let s = Arc::clone(&s);
            calls.spawn(async move { s.ranges(stream, 0, 10).await });
        }
        while let Some(r) = calls.join_next().await {
            assert!(r.expect("task").expect("ranges").is_empty());
        }
        assert_eq!(s.blocking.most.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// The range query stays prepared from call to call: with the limit a bound `LIMIT ?`,
    /// every new binding expired the cached statement and each call parsed it again.
    #[tokio::test]
    async fn the_range_query_is_not_prepared_again_on_every_call() {
        let s = store();
        for call in 0..40u64 {
            s.ranges(call % 7, call, 1 + call as usize % 5)
                .await
                .expect("ranges");
        }
        let c = s.conn.lock().await;
        let stmt = c
            .prepare_cached(object_index::RANGES_QUERY)
            .expect("cached");
        assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0);
    }

    #[tokio::test]
    async fn assignments_are_read_again_only_after_a_change() {
        use crate::{AssignmentChange, Catalog as _, Coordination as _, ProducerSnapshots as _};
        use std::sync::atomic::Ordering;
        let s = store();
        let reads = || s.catalog.reads.load(Ordering::Relaxed);
        let t = s
            .create_topic("t", [1; 16], 2, Default::default())
            .await
            .expect("create");
        let first = s.assignments().await.expect("assignments");
        assert_eq!(first.len(), 2);
        assert_eq!(s.assignments().await.expect("assignments"), first);
        assert_eq!(reads(), 1, "nothing changed: no second read");
        // Writes to other tables change nothing here.
        s.save_producer_snapshot(t.streams[0], 1, vec![1])
            .await
            .expect("snapshot");
        s.assignments().await.expect("assignments");
        assert_eq!(reads(), 1);
        // Each table the answer comes from: read again, and the change is in the answer.
        let lease = s
            .acquire_controller(1, Duration::from_secs(60))
            .await
            .expect("acquire")
            .expect("free");
        let place = AssignmentChange::Place {
            stream_id: t.streams[1],
            leader: 1,
        };
        s.change_assignments(lease, &[place]).await.expect("place");
        let placed = s.assignments().await.expect("assignments");
        assert_eq!(placed[1].leader, Some(1));
        assert_eq!(reads(), 2);
        s.open_stream(t.streams[1], 4).await.expect("open");
        assert_eq!(s.assignments().await.expect("assignments")[1].epoch, 4);
        assert_eq!(reads(), 3);
        s.add_partitions("t", 3).await.expect("grow");
        assert_eq!(s.assignments().await.expect("assignments").len(), 3);
        s.delete_topic("t").await.expect("delete");
        assert!(s.assignments().await.expect("assignments").is_empty());
        assert_eq!(reads(), 5);
    }

    // Each part alone, through its own trait, then the whole.
    #[tokio::test]
    async fn conformance_object_index() {
        conformance::object_index::run(|| Box::new(store())).await;
    }

    #[tokio::test]
    async fn conformance_schemas() {
        conformance::schemas::run(|| Box::new(store())).await;
    }

    #[tokio::test]
    async fn conformance_iceberg() {
        conformance::iceberg::run(|| Box::new(store())).await;
    }

    #[tokio::test]
    async fn conformance_catalog() {
        conformance::catalog::run(|| Box::new(store())).await;
    }

    #[tokio::test]
    async fn conformance_group_offsets() {
        conformance::group_offsets::run(|| Box::new(store())).await;
    }

    #[tokio::test]
    async fn conformance_group_states() {
        conformance::group_states::run(|| Box::new(store())).await;
    }

    #[tokio::test]
    async fn conformance_producer_snapshots() {
        conformance::producer_snapshots::run(|| Box::new(store())).await;
    }

    #[tokio::test]
    async fn conformance_coordination() {
        conformance::coordination::run(|| Box::new(store())).await;
    }

    #[tokio::test]
    async fn conformance_transactions() {
        conformance::transactions::run(|| {
            Box::new(store()) as Box<dyn conformance::transactions::TxnStore>
        })
        .await;
    }

    #[tokio::test]
    async fn conformance_credentials() {
        conformance::credentials::run(|| Box::new(store())).await;
    }

    #[tokio::test]
    async fn conformance_acls() {
        conformance::acls::run(|| Box::new(store())).await;
    }

    #[tokio::test]
    async fn conformance_quotas() {
        conformance::quotas::run(|| Box::new(store())).await;
    }

    #[tokio::test]
    async fn conformance_links() {
        conformance::links::run(|| Box::new(store())).await;
    }

    #[tokio::test]
    async fn conformance_share_states() {
        conformance::share::run(|| Box::new(store())).await;
    }

    #[tokio::test]
    async fn conformance_whole_store() {
        conformance::whole_store::run(|| Box::new(store())).await;
    }

    #[tokio::test]
    async fn conformance_all_through_the_umbrella_trait() {
        conformance::run_all(|| Box::new(store())).await;
    }

    #[tokio::test]
    async fn survives_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("meta.sqlite");
        {
            let m = SqliteMetaStore::open(&path).expect("open");
            m.open_stream(1, 3).await.expect("open stream");
        }
        let m = SqliteMetaStore::open(&path).expect("reopen");
        let s = m.get_stream(1).await.expect("get").expect("exists");
        assert_eq!(s.epoch, 3);
    }
}
