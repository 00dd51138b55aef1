//! [`ObjectIndex`] on SQLite: streams, objects, ranges.

use std::time::Duration;

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::{backend, drop_ranges_below_start, i, now_ms, read_stream, SqliteMetaStore};
use crate::{
    KeyFn, MetaError, ObjectCommit, ObjectId, ObjectIndex, ObjectInfo, RangeInfo, Result,
    StreamMeta,
};

/// A stream's ranges from an offset on, in order (the primary key's). The caller's limit is
/// applied by reading no further rows, not as `LIMIT ?`: SQLite's planner looks at a bound
/// LIMIT's value, so that each new binding expires the cached statement and every call parsed
/// and planned the query again (a sixth of an idle broker's CPU at 10,000 partitions, whose
/// maintenance looks at every stream's ranges).
pub(super) const RANGES_QUERY: &str =
    "SELECT r.stream_id, r.start_offset, r.end_offset, r.object_id, o.key, o.size,
            r.position, r.size, r.max_timestamp
     FROM ranges r JOIN objects o ON o.object_id = r.object_id
     WHERE r.stream_id = ?1 AND r.end_offset > ?2
     ORDER BY r.start_offset";

#[async_trait::async_trait]
impl ObjectIndex for SqliteMetaStore {
    async fn open_stream(&self, stream_id: u64, epoch: u64) -> Result<StreamMeta> {
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            let meta = match read_stream(&tx, stream_id)? {
                // Every leader has an epoch of its own: two brokers that both read epoch e and
                // open at e + 1 must not both lead.
                Some(s) if s.epoch >= epoch => {
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
                None if stream_deleted(&tx, stream_id)? => {
                    return Err(MetaError::UnknownStream(stream_id));
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
                // A commit repeated after it landed (its answer was lost) finds its object
                // live with exactly these ranges: it is done already.
                if committed_before(&tx, o)? {
                    continue;
                }
                mark_live(&tx, o.object_id, o.size, now)?;
                for r in &o.ranges {
                    // An empty or inverted range would move the end offset back.
                    if r.start_offset >= r.end_offset || r.end_offset > i64::MAX as u64 {
                        return Err(MetaError::InvalidRange {
                            stream_id: r.stream_id,
                            start: r.start_offset,
                            end: r.end_offset,
                        });
                    }
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
                .prepare_cached(RANGES_QUERY)
                .map_err(backend("preparing a range query"))?;
            let rows = stmt
                .query_map(params![i(stream_id), i(from_offset)], |row| {
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
            rows.take(limit)
                .collect::<rusqlite::Result<Vec<_>>>()
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
        let now = now_ms();
        let cutoff = now.saturating_sub(grace.as_millis().try_into().unwrap_or(i64::MAX));
        let orphan_cutoff =
            now.saturating_sub(orphan_grace.as_millis().try_into().unwrap_or(i64::MAX));
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            // Claimed in the transaction that finds them: a commit of a prepared object either
            // lands before (the object is live and not claimed) or is refused after.
            tx.execute(
                "UPDATE objects SET state = 'deleting', since_ms = ?3
                 WHERE (state = 'unreferenced' AND since_ms <= ?1)
                    OR (state = 'prepared' AND since_ms <= ?2)",
                params![cutoff, orphan_cutoff, now],
            )
            .map_err(backend("claiming objects for deletion"))?;
            let found = {
                let mut stmt = tx
                    .prepare_cached(
                        "SELECT object_id, key FROM objects WHERE state = 'deleting' ORDER BY object_id",
                    )
                    .map_err(backend("preparing a query"))?;
                let rows = stmt
                    .query_map([], |row| {
                        Ok(ObjectInfo {
                            object_id: row.get::<_, i64>(0)? as u64,
                            key: row.get(1)?,
                        })
                    })
                    .map_err(backend("querying deletable objects"))?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(backend("reading deletable objects"))?
            };
            tx.commit().map_err(backend("commit"))?;
            Ok(found)
        })
        .await
    }

    async fn forget_objects(&self, ids: &[ObjectId]) -> Result<()> {
        let ids = ids.to_vec();
        self.with(move |c| {
            let tx = c.transaction().map_err(backend("begin"))?;
            for id in ids {
                // Only claimed objects may go: nothing references them, nothing can commit them.
                tx.execute(
                    "DELETE FROM objects WHERE object_id = ?1 AND state = 'deleting'",
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
            mark_live(&tx, object.object_id, object.size, now_ms())?;
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

    async fn sparse_ranges(&self, limit: usize) -> Result<Vec<(u64, ObjectId)>> {
        let limit = limit.min(i64::MAX as usize) as i64;
        self.with(move |c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT r.stream_id, r.object_id FROM ranges r
                 JOIN (SELECT x.object_id FROM ranges x
                       JOIN objects o ON o.object_id = x.object_id AND o.state = 'live'
                       GROUP BY x.object_id, o.size
                       HAVING 2 * SUM(x.size) < o.size) s ON s.object_id = r.object_id
                 ORDER BY r.object_id, r.stream_id
                 LIMIT ?1",
                )
                .map_err(backend("finding sparse objects"))?;
            let rows = stmt
                .query_map(params![limit], |row| {
                    Ok((row.get::<_, i64>(0)? as u64, row.get::<_, i64>(1)? as u64))
                })
                .map_err(backend("finding sparse objects"))?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(backend("finding sparse objects"))
        })
        .await
    }
}

/// A prepared object becomes live (its ranges are being committed); any other state is an error.
fn mark_live(c: &rusqlite::Connection, object_id: u64, size: u64, now: i64) -> Result<()> {
    let n = c
        .execute(
            "UPDATE objects SET state = 'live', size = ?2, since_ms = ?3 WHERE object_id = ?1 AND state = 'prepared'",
            params![i(object_id), i(size), now],
        )
        .map_err(backend("committing an object"))?;
    if n != 1 {
        return Err(MetaError::UnknownObject(object_id));
    }
    Ok(())
}

/// Whether `o` is committed already: live, with each of its ranges in place. Only the commit
/// that prepared the object can have put them there.
fn committed_before(c: &rusqlite::Connection, o: &ObjectCommit) -> Result<bool> {
    let live = c
        .query_row(
            "SELECT 1 FROM objects WHERE object_id = ?1 AND state = 'live'",
            params![i(o.object_id)],
            |_| Ok(()),
        )
        .optional()
        .map_err(backend("reading an object"))?
        .is_some();
    if !live {
        return Ok(false);
    }
    for r in &o.ranges {
        let found = c
            .query_row(
                "SELECT 1 FROM ranges WHERE object_id = ?1 AND stream_id = ?2
                 AND start_offset = ?3 AND end_offset = ?4",
                params![
                    i(o.object_id),
                    i(r.stream_id),
                    i(r.start_offset),
                    i(r.end_offset)
                ],
                |_| Ok(()),
            )
            .optional()
            .map_err(backend("reading a range"))?
            .is_some();
        if !found {
            return Ok(false);
        }
    }
    Ok(!o.ranges.is_empty())
}

fn stream_deleted(c: &rusqlite::Connection, stream_id: u64) -> Result<bool> {
    c.query_row(
        "SELECT 1 FROM deleted_streams WHERE stream_id = ?1",
        params![i(stream_id)],
        |_| Ok(()),
    )
    .optional()
    .map(|r| r.is_some())
    .map_err(backend("reading deleted streams"))
}
