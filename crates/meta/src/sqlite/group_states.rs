//! [`GroupStates`] on SQLite.

use rusqlite::{params, OptionalExtension};

use super::{backend, SqliteMetaStore};
use crate::{GroupStates, Result};

#[async_trait::async_trait]
impl GroupStates for SqliteMetaStore {
    async fn save_group_state(&self, group: &str, data: Vec<u8>) -> Result<()> {
        let group = group.to_string();
        self.with(move |c| {
            c.execute(
                "INSERT INTO group_states (group_id, data) VALUES (?1, ?2)
                 ON CONFLICT (group_id) DO UPDATE SET data = excluded.data",
                params![group, data],
            )
            .map_err(backend("saving a group state"))?;
            Ok(())
        })
        .await
    }

    async fn load_group_state(&self, group: &str) -> Result<Option<Vec<u8>>> {
        let group = group.to_string();
        self.with(move |c| {
            c.query_row(
                "SELECT data FROM group_states WHERE group_id = ?1",
                params![group],
                |r| r.get(0),
            )
            .optional()
            .map_err(backend("loading a group state"))
        })
        .await
    }

    async fn delete_group_state(&self, group: &str) -> Result<()> {
        let group = group.to_string();
        self.with(move |c| {
            c.execute(
                "DELETE FROM group_states WHERE group_id = ?1",
                params![group],
            )
            .map_err(backend("deleting a group state"))?;
            Ok(())
        })
        .await
    }

    async fn group_state_ids(&self) -> Result<Vec<String>> {
        self.with(move |c| {
            let mut stmt = c
                .prepare_cached("SELECT group_id FROM group_states ORDER BY group_id")
                .map_err(backend("listing group states"))?;
            let rows = stmt
                .query_map([], |r| r.get(0))
                .map_err(backend("listing group states"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("listing group states"))
        })
        .await
    }
}
