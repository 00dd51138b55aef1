//! The SQLite metadata store: one file in the data directory, for a single node.
//!
//! One connection behind a mutex, used from blocking threads; every call is one transaction.
//! `synchronous=FULL` in WAL journal mode: a commit is durable when it returns, which the storage
//! engine relies on before it trims its WAL.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use std::collections::BTreeMap;

use crate::{
    GroupOffset, KeyFn, MetaError, MetaStore, ObjectCommit, ObjectId, ObjectInfo, RangeInfo,
    Result, StreamMeta, TopicMeta,
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS streams (
    stream_id    INTEGER PRIMARY KEY,
    epoch        INTEGER NOT NULL,
    start_offset INTEGER NOT NULL,
    end_offset   INTEGER NOT NULL
);
-- state: 'prepared' (uploaded, not committed), 'live', 'unreferenced' (waiting out the grace
-- period before deletion). since_ms: when it entered that state.
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
CREATE TABLE IF NOT EXISTS producer_snapshots (
    stream_id INTEGER PRIMARY KEY,
    offset    INTEGER NOT NULL,
    data      BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS kv (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS objects_by_state ON objects(state, since_ms);
";

pub struct SqliteMetaStore {
    conn: Arc<Mutex<Connection>>,
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

// SQLite integers are signed 64-bit; offsets and ids stay far below 2^63.
fn i(v: u64) -> i64 {
    debug_assert!(
        v <= i64::MAX as u64,
        "value {v} does not fit SQLite's INTEGER"
    );
    v as i64
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
        conn.execute_batch(SCHEMA)
            .map_err(backend("creating the schema"))?;
        Ok(SqliteMetaStore {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Runs `f` on the connection on a blocking thread.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut c = conn.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut c)
        })
        .await
        .map_err(|e| MetaError::Backend {
            context: "metadata task",
            source: Box::new(e),
        })?
    }
}

#[async_trait::async_trait]
impl MetaStore for SqliteMetaStore {
    async fn open_stream(&self, stream_id: u64, epoch: u64) -> Result<StreamMeta> {
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            let meta = match read_stream(&tx, stream_id)? {
                Some(s) if s.epoch > epoch => {
                    return Err(MetaError::Fenced {
                        stream_id,
                        epoch,
                        current: s.epoch,
                    })
                }
                Some(s) => {
                    tx.execute(
                        "UPDATE streams SET epoch = ?2 WHERE stream_id = ?1",
                        params![i(stream_id), i(epoch)],
                    )
                    .map_err(backend("updating the epoch"))?;
                    StreamMeta { epoch, ..s }
                }
                None => {
                    tx.execute(
                        "INSERT INTO streams (stream_id, epoch, start_offset, end_offset) VALUES (?1, ?2, 0, 0)",
                        params![i(stream_id), i(epoch)],
                    )
                    .map_err(backend("creating a stream"))?;
                    StreamMeta {
                        stream_id,
                        epoch,
                        start_offset: 0,
                        end_offset: 0,
                    }
                }
            };
            tx.commit().map_err(backend("commit"))?;
            Ok(meta)
        })
        .await
    }

    async fn get_stream(&self, stream_id: u64) -> Result<Option<StreamMeta>> {
        self.with(move |c| read_stream(c, stream_id)).await
    }

    async fn prepare_object(&self, key: KeyFn) -> Result<ObjectId> {
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            tx.execute(
                "INSERT INTO objects (key, state, since_ms) VALUES ('', 'prepared', ?1)",
                params![now_ms()],
            )
            .map_err(backend("preparing an object"))?;
            let id = tx.last_insert_rowid() as u64;
            tx.execute(
                "UPDATE objects SET key = ?2 WHERE object_id = ?1",
                params![i(id), key(id)],
            )
            .map_err(backend("naming an object"))?;
            tx.commit().map_err(backend("commit"))?;
            Ok(id)
        })
        .await
    }

    async fn commit_objects(&self, objects: Vec<ObjectCommit>) -> Result<()> {
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            let now = now_ms();
            for o in &objects {
                let n = tx
                    .execute(
                        "UPDATE objects SET state = 'live', size = ?2, since_ms = ?3 WHERE object_id = ?1 AND state = 'prepared'",
                        params![i(o.object_id), i(o.size), now],
                    )
                    .map_err(backend("committing an object"))?;
                if n != 1 {
                    return Err(MetaError::UnknownObject(o.object_id));
                }
                for r in &o.ranges {
                    debug_assert!(r.start_offset < r.end_offset, "empty range {r:?}");
                    let s = read_stream(&tx, r.stream_id)?.ok_or(MetaError::UnknownStream(r.stream_id))?;
                    if s.epoch != r.epoch {
                        return Err(MetaError::Fenced {
                            stream_id: r.stream_id,
                            epoch: r.epoch,
                            current: s.epoch,
                        });
                    }
                    if s.end_offset != r.start_offset {
                        return Err(MetaError::Discontinuity {
                            stream_id: r.stream_id,
                            expected: s.end_offset,
                            got: r.start_offset,
                        });
                    }
                    tx.execute(
                        "INSERT INTO ranges (stream_id, start_offset, end_offset, object_id, position, size, max_timestamp)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                        params![
                            i(r.stream_id),
                            i(r.start_offset),
                            i(r.end_offset),
                            i(o.object_id),
                            i(r.position),
                            i(r.size),
                            r.max_timestamp
                        ],
                    )
                    .map_err(backend("inserting a range"))?;
                    tx.execute(
                        "UPDATE streams SET end_offset = ?2 WHERE stream_id = ?1",
                        params![i(r.stream_id), i(r.end_offset)],
                    )
                    .map_err(backend("advancing the end offset"))?;
                }
                // Data committed below a start offset that already moved past it (DeleteRecords
                // racing an upload) is dropped at once.
                drop_ranges_below_start(&tx, o.ranges.iter().map(|r| r.stream_id), now)?;
            }
            tx.commit().map_err(backend("commit"))
        })
        .await
    }

    async fn ranges(
        &self,
        stream_id: u64,
        from_offset: u64,
        limit: usize,
    ) -> Result<Vec<RangeInfo>> {
        self.with(move |c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT r.stream_id, r.start_offset, r.end_offset, r.object_id, o.key, o.size,
                            r.position, r.size, r.max_timestamp
                     FROM ranges r JOIN objects o ON o.object_id = r.object_id
                     WHERE r.stream_id = ?1 AND r.end_offset > ?2
                     ORDER BY r.start_offset LIMIT ?3",
                )
                .map_err(backend("preparing a range query"))?;
            let rows = stmt
                .query_map(params![i(stream_id), i(from_offset), limit as i64], |row| {
                    Ok(RangeInfo {
                        stream_id: row.get::<_, i64>(0)? as u64,
                        start_offset: row.get::<_, i64>(1)? as u64,
                        end_offset: row.get::<_, i64>(2)? as u64,
                        object_id: row.get::<_, i64>(3)? as u64,
                        object_key: row.get(4)?,
                        object_size: row.get::<_, i64>(5)? as u64,
                        position: row.get::<_, i64>(6)? as u64,
                        size: row.get::<_, i64>(7)? as u64,
                        max_timestamp: row.get(8)?,
                    })
                })
                .map_err(backend("querying ranges"))?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(backend("reading ranges"))
        })
        .await
    }

    async fn trim_stream(&self, stream_id: u64, start_offset: u64) -> Result<StreamMeta> {
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            let s = read_stream(&tx, stream_id)?.ok_or(MetaError::UnknownStream(stream_id))?;
            if start_offset > s.start_offset {
                tx.execute(
                    "UPDATE streams SET start_offset = ?2 WHERE stream_id = ?1",
                    params![i(stream_id), i(start_offset)],
                )
                .map_err(backend("moving the start offset"))?;
                drop_ranges_below_start(&tx, std::iter::once(stream_id), now_ms())?;
            }
            let s = read_stream(&tx, stream_id)?.ok_or(MetaError::UnknownStream(stream_id))?;
            tx.commit().map_err(backend("commit"))?;
            Ok(s)
        })
        .await
    }

    async fn deletable_objects(
        &self,
        grace: Duration,
        orphan_grace: Duration,
    ) -> Result<Vec<ObjectInfo>> {
        let cutoff = now_ms() - grace.as_millis() as i64;
        let orphan_cutoff = now_ms() - orphan_grace.as_millis() as i64;
        self.with(move |c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT object_id, key FROM objects
                     WHERE (state = 'unreferenced' AND since_ms <= ?1)
                        OR (state = 'prepared' AND since_ms <= ?2)
                     ORDER BY object_id",
                )
                .map_err(backend("preparing a query"))?;
            let rows = stmt
                .query_map(params![cutoff, orphan_cutoff], |row| {
                    Ok(ObjectInfo {
                        object_id: row.get::<_, i64>(0)? as u64,
                        key: row.get(1)?,
                    })
                })
                .map_err(backend("querying deletable objects"))?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(backend("reading deletable objects"))
        })
        .await
    }

    async fn forget_objects(&self, ids: &[ObjectId]) -> Result<()> {
        let ids = ids.to_vec();
        self.with(move |c| {
            let tx = c.transaction().map_err(backend("begin"))?;
            for id in ids {
                // Only objects nobody references may go.
                tx.execute(
                    "DELETE FROM objects WHERE object_id = ?1 AND state IN ('unreferenced', 'prepared')",
                    params![i(id)],
                )
                .map_err(backend("forgetting an object"))?;
            }
            tx.commit().map_err(backend("commit"))
        })
        .await
    }

    async fn replace_ranges(&self, object: ObjectCommit) -> Result<()> {
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            let [r] = object.ranges.as_slice() else {
                return Err(MetaError::Backend {
                    context: "replacing ranges",
                    source: "a compacted object holds exactly one range".into(),
                });
            };
            let s = read_stream(&tx, r.stream_id)?.ok_or(MetaError::UnknownStream(r.stream_id))?;
            if s.epoch != r.epoch {
                return Err(MetaError::Fenced {
                    stream_id: r.stream_id,
                    epoch: r.epoch,
                    current: s.epoch,
                });
            }
            // The old ranges must tile [start, end) exactly.
            let old: Vec<(i64, i64, i64)> = {
                let mut stmt = tx
                    .prepare_cached(
                        "SELECT start_offset, end_offset, object_id FROM ranges
                         WHERE stream_id = ?1 AND start_offset >= ?2 AND start_offset < ?3 ORDER BY start_offset",
                    )
                    .map_err(backend("reading ranges"))?;
                let rows = stmt
                    .query_map(params![i(r.stream_id), i(r.start_offset), i(r.end_offset)], |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                    })
                    .map_err(backend("reading ranges"))?;
                rows.collect::<rusqlite::Result<_>>().map_err(backend("reading ranges"))?
            };
            let mut expected = r.start_offset as i64;
            for (start, end, _) in &old {
                if *start != expected {
                    break;
                }
                expected = *end;
            }
            if old.is_empty() || old[0].0 != r.start_offset as i64 || expected != r.end_offset as i64 {
                return Err(MetaError::Discontinuity {
                    stream_id: r.stream_id,
                    expected: r.start_offset,
                    got: old.first().map_or(0, |o| o.0 as u64),
                });
            }
            let n = tx
                .execute(
                    "UPDATE objects SET state = 'live', size = ?2, since_ms = ?3 WHERE object_id = ?1 AND state = 'prepared'",
                    params![i(object.object_id), i(object.size), now_ms()],
                )
                .map_err(backend("committing an object"))?;
            if n != 1 {
                return Err(MetaError::UnknownObject(object.object_id));
            }
            tx.execute(
                "DELETE FROM ranges WHERE stream_id = ?1 AND start_offset >= ?2 AND start_offset < ?3",
                params![i(r.stream_id), i(r.start_offset), i(r.end_offset)],
            )
            .map_err(backend("dropping replaced ranges"))?;
            tx.execute(
                "INSERT INTO ranges (stream_id, start_offset, end_offset, object_id, position, size, max_timestamp)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    i(r.stream_id),
                    i(r.start_offset),
                    i(r.end_offset),
                    i(object.object_id),
                    i(r.position),
                    i(r.size),
                    r.max_timestamp
                ],
            )
            .map_err(backend("inserting the compacted range"))?;
            let now = now_ms();
            for (_, _, id) in old {
                tx.execute(
                    "UPDATE objects SET state = 'unreferenced', since_ms = ?2
                     WHERE object_id = ?1 AND state = 'live'
                     AND NOT EXISTS (SELECT 1 FROM ranges r WHERE r.object_id = objects.object_id)",
                    params![id, now],
                )
                .map_err(backend("marking replaced objects"))?;
            }
            tx.commit().map_err(backend("commit"))
        })
        .await
    }

    async fn object_count(&self, stream_id: u64) -> Result<u64> {
        self.with(move |c| {
            c.query_row(
                "SELECT COUNT(DISTINCT object_id) FROM ranges WHERE stream_id = ?1",
                params![i(stream_id)],
                |row| row.get::<_, i64>(0),
            )
            .map(|n| n as u64)
            .map_err(backend("counting objects"))
        })
        .await
    }

    async fn create_topic(
        &self,
        name: &str,
        topic_id: [u8; 16],
        partitions: u32,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta> {
        let name = name.to_string();
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            if read_topic(&tx, &name)?.is_some() {
                return Err(MetaError::TopicExists(name));
            }
            tx.execute(
                "INSERT INTO topics (name, topic_id, configs) VALUES (?1, ?2, ?3)",
                params![name, topic_id.to_vec(), encode_configs(&configs)],
            )
            .map_err(backend("creating a topic"))?;
            add_partitions_tx(&tx, &name, 0, partitions)?;
            let t = read_topic(&tx, &name)?.ok_or_else(|| MetaError::UnknownTopic(name.clone()))?;
            tx.commit().map_err(backend("commit"))?;
            Ok(t)
        })
        .await
    }

    async fn list_topics(&self) -> Result<Vec<TopicMeta>> {
        self.with(move |c| {
            let names: Vec<String> = {
                let mut stmt = c
                    .prepare_cached("SELECT name FROM topics ORDER BY name")
                    .map_err(backend("listing topics"))?;
                let rows = stmt
                    .query_map([], |r| r.get(0))
                    .map_err(backend("listing topics"))?;
                rows.collect::<rusqlite::Result<_>>()
                    .map_err(backend("listing topics"))?
            };
            let mut out = Vec::with_capacity(names.len());
            for n in names {
                if let Some(t) = read_topic(c, &n)? {
                    out.push(t);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn delete_topic(&self, name: &str) -> Result<TopicMeta> {
        let name = name.to_string();
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            let t = read_topic(&tx, &name)?.ok_or_else(|| MetaError::UnknownTopic(name.clone()))?;
            let now = now_ms();
            for &stream_id in &t.streams {
                // Moving the start past everything drops every range and frees the objects.
                tx.execute(
                    "UPDATE streams SET start_offset = 9223372036854775807 WHERE stream_id = ?1",
                    params![i(stream_id)],
                )
                .map_err(backend("dropping a stream"))?;
                drop_ranges_below_start(&tx, std::iter::once(stream_id), now)?;
                tx.execute(
                    "DELETE FROM streams WHERE stream_id = ?1",
                    params![i(stream_id)],
                )
                .map_err(backend("dropping a stream"))?;
                tx.execute(
                    "DELETE FROM producer_snapshots WHERE stream_id = ?1",
                    params![i(stream_id)],
                )
                .map_err(backend("dropping a snapshot"))?;
            }
            tx.execute("DELETE FROM partitions WHERE topic = ?1", params![name])
                .map_err(backend("deleting partitions"))?;
            tx.execute("DELETE FROM topics WHERE name = ?1", params![name])
                .map_err(backend("deleting a topic"))?;
            tx.execute("DELETE FROM group_offsets WHERE topic = ?1", params![name])
                .map_err(backend("deleting offsets"))?;
            tx.commit().map_err(backend("commit"))?;
            Ok(t)
        })
        .await
    }

    async fn add_partitions(&self, name: &str, total: u32) -> Result<TopicMeta> {
        let name = name.to_string();
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            let t = read_topic(&tx, &name)?.ok_or_else(|| MetaError::UnknownTopic(name.clone()))?;
            let current = t.streams.len() as u32;
            if total <= current {
                return Err(MetaError::InvalidPartitions {
                    topic: name,
                    current,
                    requested: total,
                });
            }
            add_partitions_tx(&tx, &name, current, total)?;
            let t = read_topic(&tx, &name)?.ok_or_else(|| MetaError::UnknownTopic(name.clone()))?;
            tx.commit().map_err(backend("commit"))?;
            Ok(t)
        })
        .await
    }

    async fn set_topic_configs(&self, name: &str, configs: BTreeMap<String, String>) -> Result<()> {
        let name = name.to_string();
        self.with(move |c| {
            let n = c
                .execute(
                    "UPDATE topics SET configs = ?2 WHERE name = ?1",
                    params![name, encode_configs(&configs)],
                )
                .map_err(backend("updating topic configs"))?;
            if n == 0 {
                return Err(MetaError::UnknownTopic(name));
            }
            Ok(())
        })
        .await
    }

    async fn commit_offsets(&self, group: &str, offsets: Vec<GroupOffset>) -> Result<()> {
        let group = group.to_string();
        self.with(move |c| {
            let tx = c.transaction().map_err(backend("begin"))?;
            for o in offsets {
                tx.execute(
                    "INSERT INTO group_offsets (group_id, topic, partition, offset, leader_epoch, metadata, commit_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                     ON CONFLICT (group_id, topic, partition) DO UPDATE SET
                       offset = excluded.offset, leader_epoch = excluded.leader_epoch,
                       metadata = excluded.metadata, commit_ms = excluded.commit_ms",
                    params![group, o.topic, o.partition, o.offset, o.leader_epoch, o.metadata, o.commit_ms],
                )
                .map_err(backend("committing an offset"))?;
            }
            tx.commit().map_err(backend("commit"))
        })
        .await
    }

    async fn fetch_offsets(&self, group: &str) -> Result<Vec<GroupOffset>> {
        let group = group.to_string();
        self.with(move |c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT topic, partition, offset, leader_epoch, metadata, commit_ms FROM group_offsets
                     WHERE group_id = ?1 ORDER BY topic, partition",
                )
                .map_err(backend("fetching offsets"))?;
            let rows = stmt
                .query_map(params![group], |r| {
                    Ok(GroupOffset {
                        topic: r.get(0)?,
                        partition: r.get(1)?,
                        offset: r.get(2)?,
                        leader_epoch: r.get(3)?,
                        metadata: r.get(4)?,
                        commit_ms: r.get(5)?,
                    })
                })
                .map_err(backend("fetching offsets"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("fetching offsets"))
        })
        .await
    }

    async fn delete_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, u32)>>,
    ) -> Result<()> {
        let group = group.to_string();
        self.with(move |c| {
            let tx = c.transaction().map_err(backend("begin"))?;
            match partitions {
                None => {
                    tx.execute("DELETE FROM group_offsets WHERE group_id = ?1", params![group])
                        .map_err(backend("deleting offsets"))?;
                }
                Some(ps) => {
                    for (topic, p) in ps {
                        tx.execute(
                            "DELETE FROM group_offsets WHERE group_id = ?1 AND topic = ?2 AND partition = ?3",
                            params![group, topic, p],
                        )
                        .map_err(backend("deleting offsets"))?;
                    }
                }
            }
            tx.commit().map_err(backend("commit"))
        })
        .await
    }

    async fn offset_groups(&self) -> Result<Vec<String>> {
        self.with(move |c| {
            let mut stmt = c
                .prepare_cached("SELECT DISTINCT group_id FROM group_offsets ORDER BY group_id")
                .map_err(backend("listing groups"))?;
            let rows = stmt
                .query_map([], |r| r.get(0))
                .map_err(backend("listing groups"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("listing groups"))
        })
        .await
    }

    async fn save_producer_snapshot(
        &self,
        stream_id: u64,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()> {
        self.with(move |c| {
            c.execute(
                "INSERT INTO producer_snapshots (stream_id, offset, data) VALUES (?1, ?2, ?3)
                 ON CONFLICT (stream_id) DO UPDATE SET offset = excluded.offset, data = excluded.data",
                params![i(stream_id), i(offset), data],
            )
            .map_err(backend("saving a producer snapshot"))?;
            Ok(())
        })
        .await
    }

    async fn load_producer_snapshot(&self, stream_id: u64) -> Result<Option<(u64, Vec<u8>)>> {
        self.with(move |c| {
            c.query_row(
                "SELECT offset, data FROM producer_snapshots WHERE stream_id = ?1",
                params![i(stream_id)],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?)),
            )
            .optional()
            .map_err(backend("loading a producer snapshot"))
        })
        .await
    }

    async fn allocate_ids(&self, counter: &str, count: u64) -> Result<u64> {
        let key = format!("counter.{counter}");
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            let first = next_id(&tx, &key, count)?;
            tx.commit().map_err(backend("commit"))?;
            Ok(first)
        })
        .await
    }

    async fn get_or_init(&self, key: &str, default: &str) -> Result<String> {
        let (key, default) = (key.to_string(), default.to_string());
        self.with(move |c| {
            c.execute(
                "INSERT INTO kv (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING",
                params![key, default],
            )
            .map_err(backend("initialising a key"))?;
            c.query_row("SELECT value FROM kv WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
            .map_err(backend("reading a key"))
        })
        .await
    }
}

/// Takes `count` ids from the counter stored under `key`.
fn next_id(tx: &rusqlite::Transaction<'_>, key: &str, count: u64) -> Result<u64> {
    let current: Option<String> = tx
        .query_row("SELECT value FROM kv WHERE key = ?1", params![key], |r| {
            r.get(0)
        })
        .optional()
        .map_err(backend("reading a counter"))?;
    let first = current.and_then(|v| v.parse::<u64>().ok()).unwrap_or(1);
    tx.execute(
        "INSERT INTO kv (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![key, (first + count).to_string()],
    )
    .map_err(backend("advancing a counter"))?;
    Ok(first)
}

fn add_partitions_tx(
    tx: &rusqlite::Transaction<'_>,
    topic: &str,
    from: u32,
    to: u32,
) -> Result<()> {
    for p in from..to {
        let stream_id = next_id(tx, "counter.stream", 1)?;
        tx.execute(
            "INSERT INTO streams (stream_id, epoch, start_offset, end_offset) VALUES (?1, 0, 0, 0)",
            params![i(stream_id)],
        )
        .map_err(backend("creating a stream"))?;
        tx.execute(
            "INSERT INTO partitions (topic, partition, stream_id) VALUES (?1, ?2, ?3)",
            params![topic, p, i(stream_id)],
        )
        .map_err(backend("creating a partition"))?;
    }
    Ok(())
}

fn read_topic(c: &Connection, name: &str) -> Result<Option<TopicMeta>> {
    let row: Option<(Vec<u8>, String)> = c
        .query_row(
            "SELECT topic_id, configs FROM topics WHERE name = ?1",
            params![name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(backend("reading a topic"))?;
    let Some((id, configs)) = row else {
        return Ok(None);
    };
    let mut stmt = c
        .prepare_cached("SELECT stream_id FROM partitions WHERE topic = ?1 ORDER BY partition")
        .map_err(backend("reading partitions"))?;
    let streams = stmt
        .query_map(params![name], |r| Ok(r.get::<_, i64>(0)? as u64))
        .map_err(backend("reading partitions"))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(backend("reading partitions"))?;
    let mut topic_id = [0u8; 16];
    if id.len() == 16 {
        topic_id.copy_from_slice(&id);
    }
    Ok(Some(TopicMeta {
        name: name.to_string(),
        topic_id,
        streams,
        configs: decode_configs(&configs),
    }))
}

/// Configs as `key=value` lines: keys are Kafka config names, which hold no `=` or newline.
fn encode_configs(configs: &BTreeMap<String, String>) -> String {
    configs
        .iter()
        .map(|(k, v)| format!("{k}={}\n", v.replace('\\', "\\\\").replace('\n', "\\n")))
        .collect()
}

fn decode_configs(s: &str) -> BTreeMap<String, String> {
    s.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.replace("\\n", "\n").replace("\\\\", "\\")))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn conformance_in_memory() {
        crate::conformance::run_all(|| Box::new(SqliteMetaStore::in_memory().expect("open"))).await;
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
