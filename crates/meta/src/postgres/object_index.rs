//! [`ObjectIndex`] on PostgreSQL: streams, objects, ranges.

use std::time::Duration;

use tokio_postgres::GenericClient;

use super::{
    backend, drop_ranges_below_start, i, in_tx, lock_objects, lock_stream, mark_unreferenced,
    read_stream, PostgresMetaStore, NOW_MS,
};
use crate::{
    KeyFn, MetaError, ObjectCommit, ObjectId, ObjectIndex, ObjectInfo, RangeInfo, Result,
    StreamMeta,
};

#[async_trait::async_trait]
impl ObjectIndex for PostgresMetaStore {
    async fn open_stream(&self, stream_id: u64, epoch: u64) -> Result<StreamMeta> {
        in_tx!(self, |tx| {
            let mut current = lock_stream(&tx, stream_id).await?;
            let mut created = false;
            if current.is_none() {
                if stream_deleted(&tx, stream_id).await? {
                    return Err(MetaError::UnknownStream(stream_id));
                }
                // Another broker may create it at the same time: whoever comes second finds it
                // and goes through the epoch check below.
                created = tx
                    .execute(
                        "INSERT INTO streams (stream_id, epoch, start_offset, end_offset)
                         VALUES ($1, $2, 0, 0) ON CONFLICT (stream_id) DO NOTHING",
                        &[&i(stream_id), &i(epoch)],
                    )
                    .await
                    .map_err(backend("creating a stream"))?
                    == 1;
                current = lock_stream(&tx, stream_id).await?;
            }
            let s = current.ok_or(MetaError::UnknownStream(stream_id))?;
            // Every leader has an epoch of its own: two brokers that both read epoch e and open
            // at e + 1 must not both lead. (A stream created just now is at `epoch`, unless
            // another broker created it first.)
            if s.epoch > epoch || (s.epoch == epoch && !created) {
                return Err(MetaError::Fenced {
                    stream_id,
                    epoch,
                    current: s.epoch,
                });
            }
            tx.execute(
                "UPDATE streams SET epoch = $2 WHERE stream_id = $1",
                &[&i(stream_id), &i(epoch)],
            )
            .await
            .map_err(backend("updating the epoch"))?;
            Ok(StreamMeta { epoch, ..s })
        })
    }

    async fn get_stream(&self, stream_id: u64) -> Result<Option<StreamMeta>> {
        let c = self.client().await?;
        read_stream(&*c, stream_id).await
    }

    async fn prepare_object(&self, key: KeyFn) -> Result<ObjectId> {
        in_tx!(self, |tx| {
            let id: i64 = tx
                .query_one(
                    &format!(
                        "INSERT INTO objects (key, state, since_ms) VALUES ('', 'prepared', {NOW_MS})
                         RETURNING object_id"
                    ),
                    &[],
                )
                .await
                .map_err(backend("preparing an object"))?
                .get(0);
            let id = id as u64;
            tx.execute(
                "UPDATE objects SET key = $2 WHERE object_id = $1",
                &[&i(id), &key(id)],
            )
            .await
            .map_err(backend("naming an object"))?;
            Ok(id)
        })
    }

    async fn commit_objects(&self, objects: Vec<ObjectCommit>) -> Result<()> {
        // Streams are locked in id order before anything else (see the module's lock order).
        let mut streams: Vec<u64> = objects
            .iter()
            .flat_map(|o| o.ranges.iter().map(|r| r.stream_id))
            .collect();
        streams.sort_unstable();
        streams.dedup();
        in_tx!(self, |tx| {
            for &s in &streams {
                lock_stream(&tx, s).await?;
            }
            for o in &objects {
                // A commit repeated after it landed (its answer was lost with the connection)
                // finds its object live with exactly these ranges: it is done already.
                if committed_before(&tx, o).await? {
                    continue;
                }
                mark_live(&tx, o.object_id, o.size).await?;
                for r in &o.ranges {
                    // An empty or inverted range would move the end offset back.
                    if r.start_offset >= r.end_offset || r.end_offset > i64::MAX as u64 {
                        return Err(MetaError::InvalidRange {
                            stream_id: r.stream_id,
                            start: r.start_offset,
                            end: r.end_offset,
                        });
                    }
                    let s = read_stream(&tx, r.stream_id)
                        .await?
                        .ok_or(MetaError::UnknownStream(r.stream_id))?;
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
                    insert_range(&tx, o.object_id, r).await?;
                    tx.execute(
                        "UPDATE streams SET end_offset = $2 WHERE stream_id = $1",
                        &[&i(r.stream_id), &i(r.end_offset)],
                    )
                    .await
                    .map_err(backend("advancing the end offset"))?;
                }
                // Data committed below a start offset that already moved past it (DeleteRecords
                // racing an upload) is dropped at once.
                for r in &o.ranges {
                    drop_ranges_below_start(&tx, r.stream_id).await?;
                }
            }
            Ok(())
        })
    }

    async fn ranges(
        &self,
        stream_id: u64,
        from_offset: u64,
        limit: usize,
    ) -> Result<Vec<RangeInfo>> {
        let c = self.client().await?;
        let rows = c
            .query(
                "SELECT r.stream_id, r.start_offset, r.end_offset, r.object_id, o.key, o.size,
                        r.position, r.size, r.max_timestamp
                 FROM ranges r JOIN objects o ON o.object_id = r.object_id
                 WHERE r.stream_id = $1 AND r.end_offset > $2
                 ORDER BY r.start_offset LIMIT $3",
                &[
                    &i(stream_id),
                    &i(from_offset),
                    &i64::try_from(limit).unwrap_or(i64::MAX),
                ],
            )
            .await
            .map_err(backend("querying ranges"))?;
        Ok(rows
            .iter()
            .map(|row| RangeInfo {
                stream_id: row.get::<_, i64>(0) as u64,
                start_offset: row.get::<_, i64>(1) as u64,
                end_offset: row.get::<_, i64>(2) as u64,
                object_id: row.get::<_, i64>(3) as u64,
                object_key: row.get(4),
                object_size: row.get::<_, i64>(5) as u64,
                position: row.get::<_, i64>(6) as u64,
                size: row.get::<_, i64>(7) as u64,
                max_timestamp: row.get(8),
            })
            .collect())
    }

    async fn trim_stream(&self, stream_id: u64, start_offset: u64) -> Result<StreamMeta> {
        in_tx!(self, |tx| {
            let s = lock_stream(&tx, stream_id)
                .await?
                .ok_or(MetaError::UnknownStream(stream_id))?;
            if start_offset > s.start_offset {
                tx.execute(
                    "UPDATE streams SET start_offset = $2 WHERE stream_id = $1",
                    &[&i(stream_id), &i(start_offset)],
                )
                .await
                .map_err(backend("moving the start offset"))?;
                drop_ranges_below_start(&tx, stream_id).await?;
            }
            read_stream(&tx, stream_id)
                .await?
                .ok_or(MetaError::UnknownStream(stream_id))
        })
    }

    async fn deletable_objects(
        &self,
        grace: Duration,
        orphan_grace: Duration,
    ) -> Result<Vec<ObjectInfo>> {
        let grace = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        let orphan_grace = i64::try_from(orphan_grace.as_millis()).unwrap_or(i64::MAX);
        in_tx!(self, |tx| {
            // Claimed in the transaction that finds them: a commit of a prepared object either
            // lands before (the object is live and not claimed) or is refused after. The state
            // condition is re-checked on the row a concurrent commit leaves.
            tx.execute(
                &format!(
                    "UPDATE objects SET state = 'deleting', since_ms = {NOW_MS}
                     WHERE (state = 'unreferenced' AND since_ms <= {NOW_MS} - $1)
                        OR (state = 'prepared' AND since_ms <= {NOW_MS} - $2)"
                ),
                &[&grace, &orphan_grace],
            )
            .await
            .map_err(backend("claiming objects for deletion"))?;
            let rows = tx
                .query(
                    "SELECT object_id, key FROM objects WHERE state = 'deleting' ORDER BY object_id",
                    &[],
                )
                .await
                .map_err(backend("querying deletable objects"))?;
            Ok(rows
                .iter()
                .map(|row| ObjectInfo {
                    object_id: row.get::<_, i64>(0) as u64,
                    key: row.get(1),
                })
                .collect())
        })
    }

    async fn forget_objects(&self, ids: &[ObjectId]) -> Result<()> {
        let ids: Vec<i64> = ids.iter().map(|&id| i(id)).collect();
        let c = self.client().await?;
        // Only claimed objects may go: nothing references them, nothing can commit them.
        c.execute(
            "DELETE FROM objects WHERE object_id = ANY($1) AND state = 'deleting'",
            &[&ids],
        )
        .await
        .map_err(backend("forgetting objects"))?;
        Ok(())
    }

    async fn replace_ranges(&self, object: ObjectCommit) -> Result<()> {
        let [r] = object.ranges.as_slice() else {
            return Err(MetaError::Backend {
                context: "replacing ranges",
                source: "a compacted object holds exactly one range".into(),
            });
        };
        in_tx!(self, |tx| {
            let s = lock_stream(&tx, r.stream_id)
                .await?
                .ok_or(MetaError::UnknownStream(r.stream_id))?;
            if s.epoch != r.epoch {
                return Err(MetaError::Fenced {
                    stream_id: r.stream_id,
                    epoch: r.epoch,
                    current: s.epoch,
                });
            }
            // The old ranges must tile [start, end) exactly.
            let old: Vec<(i64, i64, i64)> = tx
                .query(
                    "SELECT start_offset, end_offset, object_id FROM ranges
                     WHERE stream_id = $1 AND start_offset >= $2 AND start_offset < $3
                     ORDER BY start_offset",
                    &[&i(r.stream_id), &i(r.start_offset), &i(r.end_offset)],
                )
                .await
                .map_err(backend("reading ranges"))?
                .iter()
                .map(|row| (row.get(0), row.get(1), row.get(2)))
                .collect();
            let mut expected = i(r.start_offset);
            for (start, end, _) in &old {
                if *start != expected {
                    break;
                }
                expected = *end;
            }
            if old.is_empty() || old[0].0 != i(r.start_offset) || expected != i(r.end_offset) {
                return Err(MetaError::Discontinuity {
                    stream_id: r.stream_id,
                    expected: r.start_offset,
                    got: old.first().map_or(0, |o| o.0 as u64),
                });
            }
            mark_live(&tx, object.object_id, object.size).await?;
            let mut replaced: Vec<i64> = old.iter().map(|o| o.2).collect();
            lock_objects(&tx, &mut replaced).await?;
            tx.execute(
                "DELETE FROM ranges WHERE stream_id = $1 AND start_offset >= $2 AND start_offset < $3",
                &[&i(r.stream_id), &i(r.start_offset), &i(r.end_offset)],
            )
            .await
            .map_err(backend("dropping replaced ranges"))?;
            insert_range(&tx, object.object_id, r).await?;
            mark_unreferenced(&tx, &replaced).await
        })
    }

    async fn object_count(&self, stream_id: u64) -> Result<u64> {
        let c = self.client().await?;
        let n: i64 = c
            .query_one(
                "SELECT COUNT(DISTINCT object_id) FROM ranges WHERE stream_id = $1",
                &[&i(stream_id)],
            )
            .await
            .map_err(backend("counting objects"))?
            .get(0);
        Ok(n as u64)
    }

    async fn sparse_ranges(&self, limit: usize) -> Result<Vec<(u64, ObjectId)>> {
        let c = self.client().await?;
        let rows = c
            .query(
                "SELECT r.stream_id, r.object_id FROM ranges r
                 JOIN (SELECT x.object_id FROM ranges x
                       JOIN objects o ON o.object_id = x.object_id AND o.state = 'live'
                       GROUP BY x.object_id, o.size
                       HAVING 2 * SUM(x.size) < o.size) s ON s.object_id = r.object_id
                 ORDER BY r.object_id, r.stream_id
                 LIMIT $1",
                &[&(limit.min(i64::MAX as usize) as i64)],
            )
            .await
            .map_err(backend("finding sparse objects"))?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64))
            .collect())
    }
}

/// A prepared object becomes live (its ranges are being committed); any other state is an error.
async fn mark_live(c: &impl GenericClient, object_id: u64, size: u64) -> Result<()> {
    let n = c
        .execute(
            &format!(
                "UPDATE objects SET state = 'live', size = $2, since_ms = {NOW_MS}
                 WHERE object_id = $1 AND state = 'prepared'"
            ),
            &[&i(object_id), &i(size)],
        )
        .await
        .map_err(backend("committing an object"))?;
    if n != 1 {
        return Err(MetaError::UnknownObject(object_id));
    }
    Ok(())
}

/// Whether `o` is committed already: live, with each of its ranges in place. Only the commit
/// that prepared the object can have put them there.
async fn committed_before(c: &impl GenericClient, o: &ObjectCommit) -> Result<bool> {
    let live = c
        .query_opt(
            "SELECT 1 FROM objects WHERE object_id = $1 AND state = 'live'",
            &[&i(o.object_id)],
        )
        .await
        .map_err(backend("reading an object"))?
        .is_some();
    if !live {
        return Ok(false);
    }
    for r in &o.ranges {
        let found = c
            .query_opt(
                "SELECT 1 FROM ranges WHERE object_id = $1 AND stream_id = $2
                 AND start_offset = $3 AND end_offset = $4",
                &[
                    &i(o.object_id),
                    &i(r.stream_id),
                    &i(r.start_offset),
                    &i(r.end_offset),
                ],
            )
            .await
            .map_err(backend("reading a range"))?
            .is_some();
        if !found {
            return Ok(false);
        }
    }
    Ok(!o.ranges.is_empty())
}

async fn insert_range(
    c: &impl GenericClient,
    object_id: ObjectId,
    r: &crate::RangeCommit,
) -> Result<()> {
    c.execute(
        "INSERT INTO ranges (stream_id, start_offset, end_offset, object_id, position, size, max_timestamp)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[
            &i(r.stream_id),
            &i(r.start_offset),
            &i(r.end_offset),
            &i(object_id),
            &i(r.position),
            &i(r.size),
            &r.max_timestamp,
        ],
    )
    .await
    .map_err(backend("inserting a range"))?;
    Ok(())
}

async fn stream_deleted(c: &impl GenericClient, stream_id: u64) -> Result<bool> {
    c.query_opt(
        "SELECT 1 FROM deleted_streams WHERE stream_id = $1",
        &[&i(stream_id)],
    )
    .await
    .map(|r| r.is_some())
    .map_err(backend("reading deleted streams"))
}
