//! [`Quotas`] on PostgreSQL.
//!
//! Altering takes the changes in entity then key order, one per key, so that two brokers
//! changing the same quotas at once lock their rows in one order rather than deadlock.

use super::coordination::notify;
use super::{backend, in_tx, PostgresMetaStore};
use crate::{quota_changes, ClientQuota, Quotas, Result};

#[async_trait::async_trait]
impl Quotas for PostgresMetaStore {
    async fn alter_client_quotas(&self, changes: Vec<(String, String, Option<f64>)>) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let changes = quota_changes(changes);
        let changed = in_tx!(self, |tx| {
            // Setting a key to the value it has changes nothing.
            let set = tx
                .prepare(
                    "INSERT INTO client_quotas (entity, quota_key, value) VALUES ($1, $2, $3)
                     ON CONFLICT (entity, quota_key) DO UPDATE SET value = EXCLUDED.value
                     WHERE client_quotas.value <> EXCLUDED.value",
                )
                .await
                .map_err(backend("setting client quotas"))?;
            let remove = tx
                .prepare("DELETE FROM client_quotas WHERE entity = $1 AND quota_key = $2")
                .await
                .map_err(backend("removing client quotas"))?;
            let mut changed = 0u64;
            for ((entity, key), value) in &changes {
                changed += match value {
                    Some(v) => tx
                        .execute(&set, &[entity, key, v])
                        .await
                        .map_err(backend("setting client quotas"))?,
                    None => tx
                        .execute(&remove, &[entity, key])
                        .await
                        .map_err(backend("removing client quotas"))?,
                };
            }
            if changed > 0 {
                notify(&tx).await?;
            }
            Ok(changed)
        })?;
        if changed > 0 {
            self.changed();
        }
        Ok(())
    }

    async fn client_quotas(&self) -> Result<Vec<ClientQuota>> {
        let c = self.client().await?;
        // Byte order for the names, as on SQLite and as `String`'s `Ord`, whatever the
        // database's collation.
        let rows = c
            .query(
                "SELECT entity, quota_key, value FROM client_quotas
                 ORDER BY entity COLLATE \"C\", quota_key COLLATE \"C\"",
                &[],
            )
            .await
            .map_err(backend("listing client quotas"))?;
        Ok(rows
            .iter()
            .map(|r| ClientQuota {
                entity: r.get(0),
                key: r.get(1),
                value: r.get(2),
            })
            .collect())
    }
}
