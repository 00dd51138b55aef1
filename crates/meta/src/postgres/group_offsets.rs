//! [`GroupOffsets`] on PostgreSQL.

use super::{backend, in_tx, PostgresMetaStore};
use crate::{GroupOffset, GroupOffsets, Result};

#[async_trait::async_trait]
impl GroupOffsets for PostgresMetaStore {
    async fn commit_offsets(&self, group: &str, offsets: Vec<GroupOffset>) -> Result<()> {
        in_tx!(self, |tx| {
            for o in &offsets {
                tx.execute(
                    "INSERT INTO group_offsets
                       (group_id, topic, partition, commit_offset, leader_epoch, metadata, commit_ms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (group_id, topic, partition) DO UPDATE SET
                       commit_offset = excluded.commit_offset, leader_epoch = excluded.leader_epoch,
                       metadata = excluded.metadata, commit_ms = excluded.commit_ms",
                    &[
                        &group,
                        &o.topic,
                        &partition(o.partition),
                        &o.offset,
                        &o.leader_epoch,
                        &o.metadata,
                        &o.commit_ms,
                    ],
                )
                .await
                .map_err(backend("committing an offset"))?;
            }
            Ok(())
        })
    }

    async fn fetch_offsets(&self, group: &str) -> Result<Vec<GroupOffset>> {
        let c = self.client().await?;
        let rows = c
            .query(
                "SELECT topic, partition, commit_offset, leader_epoch, metadata, commit_ms
                 FROM group_offsets WHERE group_id = $1 ORDER BY topic, partition",
                &[&group],
            )
            .await
            .map_err(backend("fetching offsets"))?;
        Ok(rows
            .iter()
            .map(|r| GroupOffset {
                topic: r.get(0),
                partition: r.get::<_, i32>(1) as u32,
                offset: r.get(2),
                leader_epoch: r.get(3),
                metadata: r.get(4),
                commit_ms: r.get(5),
            })
            .collect())
    }

    async fn delete_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, u32)>>,
    ) -> Result<()> {
        in_tx!(self, |tx| {
            match &partitions {
                None => {
                    tx.execute("DELETE FROM group_offsets WHERE group_id = $1", &[&group])
                        .await
                        .map_err(backend("deleting offsets"))?;
                }
                Some(ps) => {
                    for (topic, p) in ps {
                        tx.execute(
                            "DELETE FROM group_offsets
                             WHERE group_id = $1 AND topic = $2 AND partition = $3",
                            &[&group, topic, &partition(*p)],
                        )
                        .await
                        .map_err(backend("deleting offsets"))?;
                    }
                }
            }
            Ok(())
        })
    }

    async fn offset_groups(&self) -> Result<Vec<String>> {
        let c = self.client().await?;
        let rows = c
            .query(
                "SELECT DISTINCT group_id FROM group_offsets ORDER BY group_id",
                &[],
            )
            .await
            .map_err(backend("listing groups"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}

/// Partition numbers are Kafka int32s, stored as INTEGER; a u32 above i32::MAX never comes
/// from the protocol, and is stored as its bit pattern so that it round-trips.
fn partition(p: u32) -> i32 {
    p as i32
}
