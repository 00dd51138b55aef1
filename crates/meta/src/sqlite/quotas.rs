//! [`Quotas`] on SQLite.

use rusqlite::{params, TransactionBehavior};

use super::{backend, SqliteMetaStore};
use crate::{quota_changes, ClientQuota, Quotas, Result};

#[async_trait::async_trait]
impl Quotas for SqliteMetaStore {
    async fn alter_client_quotas(&self, changes: Vec<(String, String, Option<f64>)>) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let changes = quota_changes(changes);
        let changed = self
            .with(move |c| {
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(backend("begin"))?;
                let mut changed = 0usize;
                {
                    // Setting a key to the value it has changes nothing.
                    let mut set = tx
                        .prepare_cached(
                            "INSERT INTO client_quotas (entity, quota_key, value) VALUES (?1, ?2, ?3)
                             ON CONFLICT (entity, quota_key) DO UPDATE SET value = excluded.value
                             WHERE client_quotas.value <> excluded.value",
                        )
                        .map_err(backend("setting client quotas"))?;
                    let mut remove = tx
                        .prepare_cached(
                            "DELETE FROM client_quotas WHERE entity = ?1 AND quota_key = ?2",
                        )
                        .map_err(backend("removing client quotas"))?;
                    for ((entity, key), value) in &changes {
                        changed += match value {
                            Some(v) => set
                                .execute(params![entity, key, v])
                                .map_err(backend("setting client quotas"))?,
                            None => remove
                                .execute(params![entity, key])
                                .map_err(backend("removing client quotas"))?,
                        };
                    }
                }
                tx.commit().map_err(backend("commit"))?;
                Ok(changed)
            })
            .await?;
        if changed > 0 {
            self.changed();
        }
        Ok(())
    }

    async fn client_quotas(&self) -> Result<Vec<ClientQuota>> {
        self.with(|c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT entity, quota_key, value FROM client_quotas ORDER BY entity, quota_key",
                )
                .map_err(backend("listing client quotas"))?;
            let rows = stmt
                .query_map([], |r| {
                    Ok(ClientQuota {
                        entity: r.get(0)?,
                        key: r.get(1)?,
                        value: r.get(2)?,
                    })
                })
                .map_err(backend("listing client quotas"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("listing client quotas"))
        })
        .await
    }
}
