//! [`Links`] on SQLite.

use rusqlite::{params, OptionalExtension};

use super::{backend, SqliteMetaStore};
use crate::{LinkRecord, Links, Result};

#[async_trait::async_trait]
impl Links for SqliteMetaStore {
    async fn create_link(&self, name: &str, body: &str) -> Result<bool> {
        let (name, body) = (name.to_string(), body.to_string());
        let created = self
            .with(move |c| {
                c.execute(
                    "INSERT INTO links (name, body, version) VALUES (?1, ?2, 1)
                     ON CONFLICT (name) DO NOTHING",
                    params![name, body],
                )
                .map_err(backend("creating a link"))
            })
            .await?;
        if created > 0 {
            self.changed();
        }
        Ok(created > 0)
    }

    async fn update_link(&self, name: &str, body: &str, version: u64) -> Result<Option<u64>> {
        let (name, body) = (name.to_string(), body.to_string());
        let next = version as i64 + 1;
        let updated = self
            .with(move |c| {
                c.query_row(
                    "UPDATE links SET body = ?2, version = ?4 WHERE name = ?1 AND version = ?3
                     RETURNING version",
                    params![name, body, version as i64, next],
                    |r| r.get::<_, i64>(0),
                )
                .optional()
                .map_err(backend("updating a link"))
            })
            .await?;
        if updated.is_some() {
            self.changed();
        }
        Ok(updated.map(|v| v as u64))
    }

    async fn delete_link(&self, name: &str) -> Result<bool> {
        let name = name.to_string();
        let deleted = self
            .with(move |c| {
                c.execute("DELETE FROM links WHERE name = ?1", params![name])
                    .map_err(backend("deleting a link"))
            })
            .await?;
        if deleted > 0 {
            self.changed();
        }
        Ok(deleted > 0)
    }

    async fn links(&self) -> Result<Vec<LinkRecord>> {
        self.with(|c| {
            let mut stmt = c
                .prepare_cached("SELECT name, body, version FROM links ORDER BY name")
                .map_err(backend("listing links"))?;
            let rows = stmt
                .query_map([], |r| {
                    Ok(LinkRecord {
                        name: r.get(0)?,
                        body: r.get(1)?,
                        version: r.get::<_, i64>(2)? as u64,
                    })
                })
                .map_err(backend("listing links"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("listing links"))
        })
        .await
    }
}
