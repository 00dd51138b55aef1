//! [`ProducerSnapshots`] on SQLite.

use rusqlite::{params, OptionalExtension};

use super::{backend, i, SqliteMetaStore};
use crate::{ProducerSnapshot, ProducerSnapshots, Result};

#[async_trait::async_trait]
impl ProducerSnapshots for SqliteMetaStore {
    async fn save_producer_snapshot(
        &self,
        stream_id: u64,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()> {
        self.with(move |c| {
            c.execute(
                "INSERT INTO producer_snapshots (stream_id, offset, data) VALUES (?1, ?2, ?3)
                 ON CONFLICT (stream_id) DO UPDATE SET offset = excluded.offset, data = excluded.data
                 WHERE producer_snapshots.offset <= excluded.offset",
                params![i(stream_id), i(offset), data],
            )
            .map_err(backend("saving a producer snapshot"))?;
            Ok(())
        })
        .await
    }

    async fn save_producer_snapshots(&self, snapshots: Vec<ProducerSnapshot>) -> Result<()> {
        if snapshots.is_empty() {
            return Ok(());
        }
        self.with(move |c| {
            let tx = c.transaction().map_err(backend("begin"))?;
            {
                let mut stmt = tx
                    .prepare_cached(
                        "INSERT INTO producer_snapshots (stream_id, offset, data) VALUES (?1, ?2, ?3)
                         ON CONFLICT (stream_id) DO UPDATE SET offset = excluded.offset, data = excluded.data
                         WHERE producer_snapshots.offset <= excluded.offset",
                    )
                    .map_err(backend("saving producer snapshots"))?;
                for s in &snapshots {
                    stmt.execute(params![i(s.stream_id), i(s.offset), s.data])
                        .map_err(backend("saving producer snapshots"))?;
                }
            }
            tx.commit().map_err(backend("commit"))
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
}
