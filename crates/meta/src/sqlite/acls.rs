//! [`Acls`] on SQLite.

use rusqlite::{params, TransactionBehavior};

use super::{backend, SqliteMetaStore};
use crate::{AclBinding, Acls, Result};

const COLUMNS: &str =
    "resource_type, resource_name, pattern_type, principal, host, operation, permission_type";

/// The whole binding: every column is part of the key.
const MATCH: &str = "resource_type = ?1 AND resource_name = ?2 AND pattern_type = ?3
     AND principal = ?4 AND host = ?5 AND operation = ?6 AND permission_type = ?7";

fn acl_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AclBinding> {
    Ok(AclBinding {
        resource_type: r.get(0)?,
        resource_name: r.get(1)?,
        pattern_type: r.get(2)?,
        principal: r.get(3)?,
        host: r.get(4)?,
        operation: r.get(5)?,
        permission_type: r.get(6)?,
    })
}

/// The binding's columns, in [`COLUMNS`] order, as statement parameters.
macro_rules! acl_params {
    ($b:expr) => {
        params![
            $b.resource_type,
            $b.resource_name,
            $b.pattern_type,
            $b.principal,
            $b.host,
            $b.operation,
            $b.permission_type
        ]
    };
}

/// Runs `sql` once per binding in one transaction; the rows it changed in all.
fn each_binding(
    c: &mut rusqlite::Connection,
    sql: &str,
    bindings: &[AclBinding],
    context: &'static str,
) -> Result<u64> {
    let tx = c
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend("begin"))?;
    let mut changed = 0u64;
    {
        let mut stmt = tx.prepare_cached(sql).map_err(backend(context))?;
        for b in bindings {
            changed += stmt.execute(acl_params!(b)).map_err(backend(context))? as u64;
        }
    }
    tx.commit().map_err(backend("commit"))?;
    Ok(changed)
}

#[async_trait::async_trait]
impl Acls for SqliteMetaStore {
    async fn create_acls(&self, bindings: Vec<AclBinding>) -> Result<()> {
        let created = self
            .with(move |c| {
                each_binding(
                    c,
                    &format!(
                        "INSERT INTO acls ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                         ON CONFLICT DO NOTHING"
                    ),
                    &bindings,
                    "creating ACLs",
                )
            })
            .await?;
        if created > 0 {
            self.changed();
        }
        Ok(())
    }

    async fn delete_acls(&self, bindings: Vec<AclBinding>) -> Result<u64> {
        let deleted = self
            .with(move |c| {
                each_binding(
                    c,
                    &format!("DELETE FROM acls WHERE {MATCH}"),
                    &bindings,
                    "deleting ACLs",
                )
            })
            .await?;
        if deleted > 0 {
            self.changed();
        }
        Ok(deleted)
    }

    async fn acls(&self) -> Result<Vec<AclBinding>> {
        self.with(|c| {
            let mut stmt = c
                .prepare_cached(&format!("SELECT {COLUMNS} FROM acls ORDER BY {COLUMNS}"))
                .map_err(backend("listing ACLs"))?;
            let rows = stmt
                .query_map([], acl_row)
                .map_err(backend("listing ACLs"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("listing ACLs"))
        })
        .await
    }
}
