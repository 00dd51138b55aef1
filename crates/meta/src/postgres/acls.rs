//! [`Acls`] on PostgreSQL.
//!
//! Creating and deleting take the bindings in their order, without repeats, so that two brokers
//! changing the same bindings at once lock their keys in one order rather than deadlock.

use super::coordination::notify;
use super::{backend, in_tx, PostgresMetaStore};
use crate::{AclBinding, Acls, MetaError, Result};

const COLUMNS: &str =
    "resource_type, resource_name, pattern_type, principal, host, operation, permission_type";

/// Byte order for the names, as on SQLite and as `String`'s `Ord`, whatever the database's
/// collation.
const ORDER: &str = "ORDER BY resource_type, resource_name COLLATE \"C\", pattern_type,
     principal COLLATE \"C\", host COLLATE \"C\", operation, permission_type";

/// A code column (SMALLINT) back to Kafka's `i8`.
fn code(r: &tokio_postgres::Row, idx: usize) -> Result<i8> {
    let v: i16 = r.get(idx);
    i8::try_from(v).map_err(|_| MetaError::Corrupt(format!("ACL code {v}")))
}

fn acl_row(r: &tokio_postgres::Row) -> Result<AclBinding> {
    Ok(AclBinding {
        resource_type: code(r, 0)?,
        resource_name: r.get(1),
        pattern_type: code(r, 2)?,
        principal: r.get(3),
        host: r.get(4),
        operation: code(r, 5)?,
        permission_type: code(r, 6)?,
    })
}

/// Sorted, without repeats: the order rows are locked in.
fn ordered(mut bindings: Vec<AclBinding>) -> Vec<AclBinding> {
    bindings.sort_unstable();
    bindings.dedup();
    bindings
}

/// Runs `sql` once per binding (its columns as `$1`..`$7`) in one transaction, announcing the
/// change if any row changed; the rows changed in all.
async fn each_binding(
    store: &PostgresMetaStore,
    sql: &str,
    bindings: Vec<AclBinding>,
    context: &'static str,
) -> Result<u64> {
    if bindings.is_empty() {
        return Ok(0);
    }
    let bindings = ordered(bindings);
    let changed = in_tx!(store, |tx| {
        let stmt = tx.prepare(sql).await.map_err(backend(context))?;
        let mut changed = 0u64;
        for b in &bindings {
            changed += tx
                .execute(
                    &stmt,
                    &[
                        &i16::from(b.resource_type),
                        &b.resource_name,
                        &i16::from(b.pattern_type),
                        &b.principal,
                        &b.host,
                        &i16::from(b.operation),
                        &i16::from(b.permission_type),
                    ],
                )
                .await
                .map_err(backend(context))?;
        }
        if changed > 0 {
            notify(&tx).await?;
        }
        Ok(changed)
    })?;
    if changed > 0 {
        store.changed();
    }
    Ok(changed)
}

#[async_trait::async_trait]
impl Acls for PostgresMetaStore {
    async fn create_acls(&self, bindings: Vec<AclBinding>) -> Result<()> {
        each_binding(
            self,
            &format!(
                "INSERT INTO acls ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT DO NOTHING"
            ),
            bindings,
            "creating ACLs",
        )
        .await?;
        Ok(())
    }

    async fn delete_acls(&self, bindings: Vec<AclBinding>) -> Result<u64> {
        each_binding(
            self,
            "DELETE FROM acls WHERE resource_type = $1 AND resource_name = $2
             AND pattern_type = $3 AND principal = $4 AND host = $5 AND operation = $6
             AND permission_type = $7",
            bindings,
            "deleting ACLs",
        )
        .await
    }

    async fn acls(&self) -> Result<Vec<AclBinding>> {
        let c = self.client().await?;
        let rows = c
            .query(&format!("SELECT {COLUMNS} FROM acls {ORDER}"), &[])
            .await
            .map_err(backend("listing ACLs"))?;
        rows.iter().map(acl_row).collect()
    }
}
