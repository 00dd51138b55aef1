//! [`Schemas`] on SQLite.

use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};

use super::{backend, SqliteMetaStore};
use crate::schemas::{
    plan_delete, plan_registration, RegisterReads, Registered, RegistrySetting, SchemaContent,
    SchemaDeleted, SchemaReference, SchemaRegistration, Schemas, StoredSchema, SubjectVersion,
};
use crate::Result;

fn immediate(c: &mut Connection) -> Result<Transaction<'_>> {
    c.transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend("begin"))
}

/// Raises the registry's version (every write does, in its transaction).
fn bump(tx: &Transaction) -> Result<()> {
    tx.execute(
        "UPDATE registry_state SET version = version + 1 WHERE one = 1",
        [],
    )
    .map_err(backend("raising the registry version"))?;
    Ok(())
}

fn live_same_content(
    tx: &Transaction,
    subject: &str,
    fingerprint: &str,
) -> Result<Option<(u32, u32)>> {
    tx.query_row(
        "SELECT v.schema_id, v.version FROM subject_versions v JOIN schemas s ON s.id = v.schema_id
         WHERE v.subject = ?1 AND NOT v.deleted AND s.fingerprint = ?2
         ORDER BY v.version LIMIT 1",
        params![subject, fingerprint],
        |r| Ok((r.get::<_, u32>(0)?, r.get::<_, u32>(1)?)),
    )
    .optional()
    .map_err(backend("looking up a subject's schema"))
}

fn reads(tx: &Transaction, r: &SchemaRegistration) -> Result<RegisterReads> {
    let max_version: u32 = tx
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM subject_versions WHERE subject = ?1",
            params![r.subject],
            |row| row.get(0),
        )
        .map_err(backend("reading a subject's versions"))?;
    let fingerprint_of_id = |id: u32| {
        tx.query_row(
            "SELECT fingerprint FROM schemas WHERE id = ?1",
            params![id],
            |row| row.get::<_, String>(0),
        )
        .optional()
        .map_err(backend("reading a schema"))
    };
    let (import_version_fingerprint, import_id_fingerprint) = match r.import {
        Some((id, version)) => (
            tx.query_row(
                "SELECT s.fingerprint FROM subject_versions v JOIN schemas s ON s.id = v.schema_id
                 WHERE v.subject = ?1 AND v.version = ?2",
                params![r.subject, version],
                |row| row.get::<_, String>(0),
            )
            .optional()
            .map_err(backend("reading a subject version"))?,
            fingerprint_of_id(id)?,
        ),
        None => (None, None),
    };
    let same_content_id = tx
        .query_row(
            "SELECT MIN(id) FROM schemas WHERE fingerprint = ?1",
            params![r.content.fingerprint],
            |row| row.get::<_, Option<u32>>(0),
        )
        .map_err(backend("looking up a schema"))?;
    let max_id: u32 = tx
        .query_row(
            "SELECT max_id FROM registry_state WHERE one = 1",
            [],
            |row| row.get(0),
        )
        .map_err(backend("reading the registry state"))?;
    Ok(RegisterReads {
        max_version,
        import_version_fingerprint,
        import_id_fingerprint,
        same_content_id,
        max_id,
    })
}

fn insert_schema(tx: &Transaction, id: u32, c: &SchemaContent) -> Result<()> {
    tx.execute(
        "INSERT INTO schemas (id, schema_type, schema, metadata, rule_set, fingerprint)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            id,
            c.schema_type,
            c.schema,
            c.metadata,
            c.rule_set,
            c.fingerprint
        ],
    )
    .map_err(backend("inserting a schema"))?;
    for (position, r) in c.references.iter().enumerate() {
        tx.execute(
            "INSERT INTO schema_refs (schema_id, position, name, subject, version)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![id, position as i64, r.name, r.subject, r.version],
        )
        .map_err(backend("inserting a schema reference"))?;
    }
    tx.execute(
        "UPDATE registry_state SET max_id = MAX(max_id, ?1) WHERE one = 1",
        params![id],
    )
    .map_err(backend("raising the highest schema id"))?;
    Ok(())
}

fn register(tx: &Transaction, r: &SchemaRegistration) -> Result<Registered> {
    if let Some((id, version)) = live_same_content(tx, &r.subject, &r.content.fingerprint)? {
        return Ok(Registered::Existing { id, version });
    }
    let plan = match plan_registration(r, &reads(tx, r)?) {
        Ok(plan) => plan,
        Err(refused) => return Ok(refused),
    };
    if plan.new_content {
        insert_schema(tx, plan.id, &r.content)?;
    }
    tx.execute(
        "INSERT INTO subject_versions (subject, version, schema_id, deleted)
         VALUES (?1, ?2, ?3, 0)",
        params![r.subject, plan.version, plan.id],
    )
    .map_err(backend("inserting a subject version"))?;
    bump(tx)?;
    Ok(Registered::New {
        id: plan.id,
        version: plan.version,
    })
}

fn version_row(r: &rusqlite::Row) -> rusqlite::Result<SubjectVersion> {
    Ok(SubjectVersion {
        subject: r.get(0)?,
        version: r.get(1)?,
        schema_id: r.get(2)?,
        deleted: r.get(3)?,
    })
}

fn referenced_by(c: &Connection, subject: &str, version: u32) -> Result<Vec<u32>> {
    let mut stmt = c
        .prepare_cached(
            "SELECT DISTINCT r.schema_id FROM schema_refs r
             WHERE r.subject = ?1 AND r.version = ?2 AND EXISTS (
                 SELECT 1 FROM subject_versions v WHERE v.schema_id = r.schema_id AND NOT v.deleted)
             ORDER BY r.schema_id",
        )
        .map_err(backend("reading references"))?;
    let rows = stmt
        .query_map(params![subject, version], |r| r.get(0))
        .map_err(backend("reading references"))?;
    rows.collect::<rusqlite::Result<_>>()
        .map_err(backend("reading references"))
}

fn delete(
    tx: &Transaction,
    subject: &str,
    version: Option<u32>,
    permanent: bool,
) -> Result<SchemaDeleted> {
    let exists: bool = tx
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM subject_versions WHERE subject = ?1)",
            params![subject],
            |r| r.get(0),
        )
        .map_err(backend("reading a subject"))?;
    let rows: Vec<(u32, bool)> = {
        let mut stmt = tx
            .prepare_cached(
                "SELECT version, deleted FROM subject_versions
                 WHERE subject = ?1 AND (?2 IS NULL OR version = ?2) ORDER BY version",
            )
            .map_err(backend("reading a subject's versions"))?;
        let rows = stmt
            .query_map(params![subject, version], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(backend("reading a subject's versions"))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(backend("reading a subject's versions"))?
    };
    let targets = match plan_delete(exists, version, &rows, permanent) {
        Ok(t) => t,
        Err(refused) => return Ok(refused),
    };
    if !permanent {
        let mut referencing = Vec::new();
        for v in &targets {
            referencing.extend(referenced_by(tx, subject, *v)?);
        }
        if !referencing.is_empty() {
            referencing.sort_unstable();
            referencing.dedup();
            return Ok(SchemaDeleted::Referenced(referencing));
        }
    }
    for v in &targets {
        let sql = if permanent {
            "DELETE FROM subject_versions WHERE subject = ?1 AND version = ?2"
        } else {
            "UPDATE subject_versions SET deleted = 1 WHERE subject = ?1 AND version = ?2"
        };
        tx.execute(sql, params![subject, v])
            .map_err(backend("deleting a subject version"))?;
    }
    if permanent {
        // Schemas no version names any more go, with their references; their ids stay given.
        tx.execute(
            "DELETE FROM schema_refs WHERE schema_id NOT IN (SELECT schema_id FROM subject_versions)",
            [],
        )
        .map_err(backend("deleting unused references"))?;
        tx.execute(
            "DELETE FROM schemas WHERE id NOT IN (SELECT schema_id FROM subject_versions)",
            [],
        )
        .map_err(backend("deleting unused schemas"))?;
    }
    bump(tx)?;
    Ok(SchemaDeleted::Done(targets))
}

#[async_trait::async_trait]
impl Schemas for SqliteMetaStore {
    async fn register_schema(&self, r: SchemaRegistration) -> Result<Registered> {
        self.with(move |c| {
            let tx = immediate(c)?;
            let done = register(&tx, &r)?;
            tx.commit().map_err(backend("commit"))?;
            Ok(done)
        })
        .await
    }

    async fn schema(&self, id: u32) -> Result<Option<StoredSchema>> {
        self.with(move |c| {
            let row = c
                .query_row(
                    "SELECT schema_type, schema, metadata, rule_set, fingerprint FROM schemas
                     WHERE id = ?1",
                    params![id],
                    |r| {
                        Ok(SchemaContent {
                            schema_type: r.get(0)?,
                            schema: r.get(1)?,
                            references: Vec::new(),
                            metadata: r.get(2)?,
                            rule_set: r.get(3)?,
                            fingerprint: r.get(4)?,
                        })
                    },
                )
                .optional()
                .map_err(backend("reading a schema"))?;
            let Some(mut content) = row else {
                return Ok(None);
            };
            let mut stmt = c
                .prepare_cached(
                    "SELECT name, subject, version FROM schema_refs WHERE schema_id = ?1
                     ORDER BY position",
                )
                .map_err(backend("reading a schema's references"))?;
            let refs = stmt
                .query_map(params![id], |r| {
                    Ok(SchemaReference {
                        name: r.get(0)?,
                        subject: r.get(1)?,
                        version: r.get(2)?,
                    })
                })
                .map_err(backend("reading a schema's references"))?;
            content.references = refs
                .collect::<rusqlite::Result<_>>()
                .map_err(backend("reading a schema's references"))?;
            Ok(Some(StoredSchema { id, content }))
        })
        .await
    }

    async fn subject_versions(&self, subject: &str) -> Result<Vec<SubjectVersion>> {
        let subject = subject.to_string();
        self.with(move |c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT subject, version, schema_id, deleted FROM subject_versions
                     WHERE subject = ?1 ORDER BY version",
                )
                .map_err(backend("reading a subject's versions"))?;
            let rows = stmt
                .query_map(params![subject], version_row)
                .map_err(backend("reading a subject's versions"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("reading a subject's versions"))
        })
        .await
    }

    async fn subjects(&self) -> Result<Vec<(String, bool)>> {
        self.with(|c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT subject, MAX(NOT deleted) FROM subject_versions
                     GROUP BY subject ORDER BY subject",
                )
                .map_err(backend("listing subjects"))?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(backend("listing subjects"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("listing subjects"))
        })
        .await
    }

    async fn schema_usages(&self, id: u32) -> Result<Vec<SubjectVersion>> {
        self.with(move |c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT subject, version, schema_id, deleted FROM subject_versions
                     WHERE schema_id = ?1 ORDER BY subject, version",
                )
                .map_err(backend("reading a schema's subjects"))?;
            let rows = stmt
                .query_map(params![id], version_row)
                .map_err(backend("reading a schema's subjects"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("reading a schema's subjects"))
        })
        .await
    }

    async fn referenced_by(&self, subject: &str, version: u32) -> Result<Vec<u32>> {
        let subject = subject.to_string();
        self.with(move |c| referenced_by(c, &subject, version))
            .await
    }

    async fn delete_schema_version(
        &self,
        subject: &str,
        version: Option<u32>,
        permanent: bool,
    ) -> Result<SchemaDeleted> {
        let subject = subject.to_string();
        self.with(move |c| {
            let tx = immediate(c)?;
            let done = delete(&tx, &subject, version, permanent)?;
            tx.commit().map_err(backend("commit"))?;
            Ok(done)
        })
        .await
    }

    async fn registry_setting(
        &self,
        kind: RegistrySetting,
        subject: &str,
    ) -> Result<Option<String>> {
        let subject = subject.to_string();
        self.with(move |c| {
            c.query_row(
                "SELECT value FROM registry_settings WHERE kind = ?1 AND subject = ?2",
                params![kind.key(), subject],
                |r| r.get(0),
            )
            .optional()
            .map_err(backend("reading a registry setting"))
        })
        .await
    }

    async fn set_registry_setting(
        &self,
        kind: RegistrySetting,
        subject: &str,
        value: Option<&str>,
    ) -> Result<Option<String>> {
        let subject = subject.to_string();
        let value = value.map(str::to_string);
        self.with(move |c| {
            let tx = immediate(c)?;
            let old: Option<String> = tx
                .query_row(
                    "SELECT value FROM registry_settings WHERE kind = ?1 AND subject = ?2",
                    params![kind.key(), subject],
                    |r| r.get(0),
                )
                .optional()
                .map_err(backend("reading a registry setting"))?;
            match &value {
                Some(v) => tx.execute(
                    "INSERT INTO registry_settings (kind, subject, value) VALUES (?1, ?2, ?3)
                     ON CONFLICT (kind, subject) DO UPDATE SET value = excluded.value",
                    params![kind.key(), subject, v],
                ),
                None => tx.execute(
                    "DELETE FROM registry_settings WHERE kind = ?1 AND subject = ?2",
                    params![kind.key(), subject],
                ),
            }
            .map_err(backend("writing a registry setting"))?;
            bump(&tx)?;
            tx.commit().map_err(backend("commit"))?;
            Ok(old)
        })
        .await
    }

    async fn registry_version(&self) -> Result<u64> {
        self.with(|c| {
            c.query_row(
                "SELECT version FROM registry_state WHERE one = 1",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|v| v as u64)
            .map_err(backend("reading the registry version"))
        })
        .await
    }
}
