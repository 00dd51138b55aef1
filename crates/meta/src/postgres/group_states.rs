//! [`GroupStates`] on PostgreSQL.

use super::{backend, PostgresMetaStore};
use crate::{GroupStates, Result};

#[async_trait::async_trait]
impl GroupStates for PostgresMetaStore {
    async fn save_group_state(&self, group: &str, data: Vec<u8>) -> Result<()> {
        let c = self.client().await?;
        c.execute(
            "INSERT INTO group_states (group_id, data) VALUES ($1, $2)
             ON CONFLICT (group_id) DO UPDATE SET data = excluded.data",
            &[&group, &data],
        )
        .await
        .map_err(backend("saving a group state"))?;
        Ok(())
    }

    async fn load_group_state(&self, group: &str) -> Result<Option<Vec<u8>>> {
        let c = self.client().await?;
        let row = c
            .query_opt(
                "SELECT data FROM group_states WHERE group_id = $1",
                &[&group],
            )
            .await
            .map_err(backend("loading a group state"))?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn delete_group_state(&self, group: &str) -> Result<()> {
        let c = self.client().await?;
        c.execute("DELETE FROM group_states WHERE group_id = $1", &[&group])
            .await
            .map_err(backend("deleting a group state"))?;
        Ok(())
    }

    async fn group_state_ids(&self) -> Result<Vec<String>> {
        let c = self.client().await?;
        let rows = c
            .query(
                "SELECT group_id FROM group_states ORDER BY group_id COLLATE \"C\"",
                &[],
            )
            .await
            .map_err(backend("listing group states"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}
