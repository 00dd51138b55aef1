//! [`GroupOffsets`] on SQLite.

use rusqlite::params;

use super::{backend, SqliteMetaStore};
use crate::{GroupOffset, GroupOffsets, Result};

#[async_trait::async_trait]
impl GroupOffsets for SqliteMetaStore {
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
}
