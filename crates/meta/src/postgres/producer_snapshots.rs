//! [`ProducerSnapshots`] on PostgreSQL.

use super::{backend, i, PostgresMetaStore};
use crate::{ProducerSnapshot, ProducerSnapshots, Result};

#[async_trait::async_trait]
impl ProducerSnapshots for PostgresMetaStore {
    async fn save_producer_snapshot(
        &self,
        stream_id: u64,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()> {
        let c = self.client().await?;
        c.execute(
            "INSERT INTO producer_snapshots (stream_id, snap_offset, data) VALUES ($1, $2, $3)
             ON CONFLICT (stream_id) DO UPDATE SET snap_offset = excluded.snap_offset, data = excluded.data
             WHERE producer_snapshots.snap_offset <= excluded.snap_offset",
            &[&i(stream_id), &i(offset), &data],
        )
        .await
        .map_err(backend("saving a producer snapshot"))?;
        Ok(())
    }

    async fn save_producer_snapshots(&self, snapshots: Vec<ProducerSnapshot>) -> Result<()> {
        if snapshots.is_empty() {
            return Ok(());
        }
        // One statement: the rows as arrays, unnested (one round trip, one commit).
        let ids: Vec<i64> = snapshots.iter().map(|s| i(s.stream_id)).collect();
        let offsets: Vec<i64> = snapshots.iter().map(|s| i(s.offset)).collect();
        let data: Vec<Vec<u8>> = snapshots.into_iter().map(|s| s.data).collect();
        let c = self.client().await?;
        c.execute(
            "INSERT INTO producer_snapshots (stream_id, snap_offset, data)
             SELECT * FROM UNNEST($1::BIGINT[], $2::BIGINT[], $3::BYTEA[])
             ON CONFLICT (stream_id) DO UPDATE SET snap_offset = excluded.snap_offset, data = excluded.data
             WHERE producer_snapshots.snap_offset <= excluded.snap_offset",
            &[&ids, &offsets, &data],
        )
        .await
        .map_err(backend("saving producer snapshots"))?;
        Ok(())
    }

    async fn load_producer_snapshot(&self, stream_id: u64) -> Result<Option<(u64, Vec<u8>)>> {
        let c = self.client().await?;
        let row = c
            .query_opt(
                "SELECT snap_offset, data FROM producer_snapshots WHERE stream_id = $1",
                &[&i(stream_id)],
            )
            .await
            .map_err(backend("loading a producer snapshot"))?;
        Ok(row.map(|r| (r.get::<_, i64>(0) as u64, r.get(1))))
    }
}
