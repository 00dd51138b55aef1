//! [`Links`] on PostgreSQL.

use super::coordination::notify;
use super::{backend, in_tx, PostgresMetaStore};
use crate::{LinkRecord, Links, Result};

#[async_trait::async_trait]
impl Links for PostgresMetaStore {
    async fn create_link(&self, name: &str, body: &str) -> Result<bool> {
        let created = in_tx!(self, |tx| {
            let n = tx
                .execute(
                    "INSERT INTO links (name, body, version) VALUES ($1, $2, 1)
                     ON CONFLICT (name) DO NOTHING",
                    &[&name, &body],
                )
                .await
                .map_err(backend("creating a link"))?;
            if n > 0 {
                notify(&tx).await?;
            }
            Ok(n > 0)
        })?;
        if created {
            self.changed();
        }
        Ok(created)
    }

    async fn update_link(&self, name: &str, body: &str, version: u64) -> Result<Option<u64>> {
        let (from, to) = (version as i64, version as i64 + 1);
        let updated = in_tx!(self, |tx| {
            let n = tx
                .execute(
                    "UPDATE links SET body = $2, version = $4 WHERE name = $1 AND version = $3",
                    &[&name, &body, &from, &to],
                )
                .await
                .map_err(backend("updating a link"))?;
            if n > 0 {
                notify(&tx).await?;
            }
            Ok(n > 0)
        })?;
        if updated {
            self.changed();
        }
        Ok(updated.then_some(to as u64))
    }

    async fn delete_link(&self, name: &str) -> Result<bool> {
        let deleted = in_tx!(self, |tx| {
            let n = tx
                .execute("DELETE FROM links WHERE name = $1", &[&name])
                .await
                .map_err(backend("deleting a link"))?;
            if n > 0 {
                notify(&tx).await?;
            }
            Ok(n > 0)
        })?;
        if deleted {
            self.changed();
        }
        Ok(deleted)
    }

    async fn links(&self) -> Result<Vec<LinkRecord>> {
        let c = self.client().await?;
        let rows = c
            .query(
                "SELECT name, body, version FROM links ORDER BY name COLLATE \"C\"",
                &[],
            )
            .await
            .map_err(backend("listing links"))?;
        Ok(rows
            .iter()
            .map(|r| LinkRecord {
                name: r.get(0),
                body: r.get(1),
                version: r.get::<_, i64>(2) as u64,
            })
            .collect())
    }
}
