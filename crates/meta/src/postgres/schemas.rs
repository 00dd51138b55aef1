//! [`Schemas`] on PostgreSQL. Every write locks the registry's one state row first (`FOR
//! UPDATE`): registry writes are rare, and one order for all of them means two brokers
//! registering at once cannot both take the same version or id.

use tokio_postgres::{GenericClient, Row, Transaction};

use super::{backend, in_tx, PostgresMetaStore};
use crate::schemas::{
    plan_delete, plan_registration, RegisterReads, Registered, RegistrySetting, SchemaContent,
    SchemaDeleted, SchemaReference, SchemaRegistration, Schemas, StoredSchema, SubjectVersion,
};
use crate::Result;

fn id(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn version(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// Locks the registry state row and returns the highest id given.
async fn lock(tx: &Transaction<'_>) -> Result<u32> {
    let row = tx
        .query_one(
            "SELECT max_id FROM registry_state WHERE one = 1 FOR UPDATE",
            &[],
        )
        .await
        .map_err(backend("locking the registry state"))?;
    Ok(id(row.get(0)))
}

async fn bump(tx: &Transaction<'_>) -> Result<()> {
    tx.execute(
        "UPDATE registry_state SET version = version + 1 WHERE one = 1",
        &[],
    )
    .await
    .map_err(backend("raising the registry version"))?;
    Ok(())
}

async fn reads(tx: &Transaction<'_>, r: &SchemaRegistration, max_id: u32) -> Result<RegisterReads> {
    let max_version: i32 = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM subject_versions WHERE subject = $1",
            &[&r.subject],
        )
        .await
        .map_err(backend("reading a subject's versions"))?
        .get(0);
    let (import_version_fingerprint, import_id_fingerprint) = match r.import {
        Some((import_id, import_version)) => {
            let v = tx
                .query_opt(
                    "SELECT s.fingerprint FROM subject_versions v JOIN schemas s ON s.id = v.schema_id
                     WHERE v.subject = $1 AND v.version = $2",
                    &[&r.subject, &(import_version as i32)],
                )
                .await
                .map_err(backend("reading a subject version"))?;
            let i = tx
                .query_opt(
                    "SELECT fingerprint FROM schemas WHERE id = $1",
                    &[&(import_id as i64)],
                )
                .await
                .map_err(backend("reading a schema"))?;
            (v.map(|r| r.get(0)), i.map(|r| r.get(0)))
        }
        None => (None, None),
    };
    let same: Option<i64> = tx
        .query_one(
            "SELECT MIN(id) FROM schemas WHERE fingerprint = $1",
            &[&r.content.fingerprint],
        )
        .await
        .map_err(backend("looking up a schema"))?
        .get(0);
    Ok(RegisterReads {
        max_version: version(max_version),
        import_version_fingerprint,
        import_id_fingerprint,
        same_content_id: same.map(id),
        max_id,
    })
}

async fn insert_schema(tx: &Transaction<'_>, schema_id: u32, c: &SchemaContent) -> Result<()> {
    let schema_id = schema_id as i64;
    tx.execute(
        "INSERT INTO schemas (id, schema_type, schema, metadata, rule_set, fingerprint)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &schema_id,
            &c.schema_type,
            &c.schema,
            &c.metadata,
            &c.rule_set,
            &c.fingerprint,
        ],
    )
    .await
    .map_err(backend("inserting a schema"))?;
    for (position, r) in c.references.iter().enumerate() {
        tx.execute(
            "INSERT INTO schema_refs (schema_id, position, name, subject, version)
             VALUES ($1, $2, $3, $4, $5)",
            &[
                &schema_id,
                &(position as i32),
                &r.name,
                &r.subject,
                &(r.version as i32),
            ],
        )
        .await
        .map_err(backend("inserting a schema reference"))?;
    }
    tx.execute(
        "UPDATE registry_state SET max_id = GREATEST(max_id, $1) WHERE one = 1",
        &[&schema_id],
    )
    .await
    .map_err(backend("raising the highest schema id"))?;
    Ok(())
}

async fn register(tx: &Transaction<'_>, r: &SchemaRegistration) -> Result<Registered> {
    let max_id = lock(tx).await?;
    let existing = tx
        .query_opt(
            "SELECT v.schema_id, v.version FROM subject_versions v JOIN schemas s ON s.id = v.schema_id
             WHERE v.subject = $1 AND NOT v.deleted AND s.fingerprint = $2
             ORDER BY v.version LIMIT 1",
            &[&r.subject, &r.content.fingerprint],
        )
        .await
        .map_err(backend("looking up a subject's schema"))?;
    if let Some(row) = existing {
        return Ok(Registered::Existing {
            id: id(row.get(0)),
            version: version(row.get(1)),
        });
    }
    let plan = match plan_registration(r, &reads(tx, r, max_id).await?) {
        Ok(plan) => plan,
        Err(refused) => return Ok(refused),
    };
    if plan.new_content {
        insert_schema(tx, plan.id, &r.content).await?;
    }
    tx.execute(
        "INSERT INTO subject_versions (subject, version, schema_id, deleted)
         VALUES ($1, $2, $3, false)",
        &[&r.subject, &(plan.version as i32), &(plan.id as i64)],
    )
    .await
    .map_err(backend("inserting a subject version"))?;
    bump(tx).await?;
    Ok(Registered::New {
        id: plan.id,
        version: plan.version,
    })
}

fn version_row(r: &Row) -> SubjectVersion {
    SubjectVersion {
        subject: r.get(0),
        version: version(r.get(1)),
        schema_id: id(r.get(2)),
        deleted: r.get(3),
    }
}

async fn referenced_by(c: &impl GenericClient, subject: &str, v: u32) -> Result<Vec<u32>> {
    let rows = c
        .query(
            "SELECT DISTINCT r.schema_id FROM schema_refs r
             WHERE r.subject = $1 AND r.version = $2 AND EXISTS (
                 SELECT 1 FROM subject_versions v WHERE v.schema_id = r.schema_id AND NOT v.deleted)
             ORDER BY r.schema_id",
            &[&subject, &(v as i32)],
        )
        .await
        .map_err(backend("reading references"))?;
    Ok(rows.iter().map(|r| id(r.get(0))).collect())
}

async fn delete(
    tx: &Transaction<'_>,
    subject: &str,
    v: Option<u32>,
    permanent: bool,
) -> Result<SchemaDeleted> {
    lock(tx).await?;
    let exists: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM subject_versions WHERE subject = $1)",
            &[&subject],
        )
        .await
        .map_err(backend("reading a subject"))?
        .get(0);
    let v32 = v.map(|v| v as i32);
    let rows: Vec<(u32, bool)> = tx
        .query(
            "SELECT version, deleted FROM subject_versions
             WHERE subject = $1 AND ($2::INTEGER IS NULL OR version = $2) ORDER BY version",
            &[&subject, &v32],
        )
        .await
        .map_err(backend("reading a subject's versions"))?
        .iter()
        .map(|r| (version(r.get(0)), r.get(1)))
        .collect();
    let targets = match plan_delete(exists, v, &rows, permanent) {
        Ok(t) => t,
        Err(refused) => return Ok(refused),
    };
    if !permanent {
        let mut referencing = Vec::new();
        for t in &targets {
            referencing.extend(referenced_by(tx, subject, *t).await?);
        }
        if !referencing.is_empty() {
            referencing.sort_unstable();
            referencing.dedup();
            return Ok(SchemaDeleted::Referenced(referencing));
        }
    }
    let sql = if permanent {
        "DELETE FROM subject_versions WHERE subject = $1 AND version = $2"
    } else {
        "UPDATE subject_versions SET deleted = true WHERE subject = $1 AND version = $2"
    };
    for t in &targets {
        tx.execute(sql, &[&subject, &(*t as i32)])
            .await
            .map_err(backend("deleting a subject version"))?;
    }
    if permanent {
        // Schemas no version names any more go, with their references; their ids stay given.
        tx.execute(
            "DELETE FROM schema_refs r WHERE NOT EXISTS (
                 SELECT 1 FROM subject_versions v WHERE v.schema_id = r.schema_id)",
            &[],
        )
        .await
        .map_err(backend("deleting unused references"))?;
        tx.execute(
            "DELETE FROM schemas s WHERE NOT EXISTS (
                 SELECT 1 FROM subject_versions v WHERE v.schema_id = s.id)",
            &[],
        )
        .await
        .map_err(backend("deleting unused schemas"))?;
    }
    bump(tx).await?;
    Ok(SchemaDeleted::Done(targets))
}

#[async_trait::async_trait]
impl Schemas for PostgresMetaStore {
    async fn register_schema(&self, r: SchemaRegistration) -> Result<Registered> {
        in_tx!(self, |tx| { register(&tx, &r).await })
    }

    async fn schema(&self, schema_id: u32) -> Result<Option<StoredSchema>> {
        let c = self.client().await?;
        let key = schema_id as i64;
        let Some(row) = c
            .query_opt(
                "SELECT schema_type, schema, metadata, rule_set, fingerprint FROM schemas
                 WHERE id = $1",
                &[&key],
            )
            .await
            .map_err(backend("reading a schema"))?
        else {
            return Ok(None);
        };
        let references = c
            .query(
                "SELECT name, subject, version FROM schema_refs WHERE schema_id = $1
                 ORDER BY position",
                &[&key],
            )
            .await
            .map_err(backend("reading a schema's references"))?
            .iter()
            .map(|r| SchemaReference {
                name: r.get(0),
                subject: r.get(1),
                version: version(r.get(2)),
            })
            .collect();
        Ok(Some(StoredSchema {
            id: schema_id,
            content: SchemaContent {
                schema_type: row.get(0),
                schema: row.get(1),
                references,
                metadata: row.get(2),
                rule_set: row.get(3),
                fingerprint: row.get(4),
            },
        }))
    }

    async fn subject_versions(&self, subject: &str) -> Result<Vec<SubjectVersion>> {
        let c = self.client().await?;
        let rows = c
            .query(
                "SELECT subject, version, schema_id, deleted FROM subject_versions
                 WHERE subject = $1 ORDER BY version",
                &[&subject],
            )
            .await
            .map_err(backend("reading a subject's versions"))?;
        Ok(rows.iter().map(version_row).collect())
    }

    async fn subjects(&self) -> Result<Vec<(String, bool)>> {
        let c = self.client().await?;
        let rows = c
            .query(
                "SELECT subject, bool_or(NOT deleted) FROM subject_versions
                 GROUP BY subject ORDER BY subject COLLATE \"C\"",
                &[],
            )
            .await
            .map_err(backend("listing subjects"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    async fn schema_usages(&self, schema_id: u32) -> Result<Vec<SubjectVersion>> {
        let c = self.client().await?;
        let rows = c
            .query(
                "SELECT subject, version, schema_id, deleted FROM subject_versions
                 WHERE schema_id = $1 ORDER BY subject COLLATE \"C\", version",
                &[&(schema_id as i64)],
            )
            .await
            .map_err(backend("reading a schema's subjects"))?;
        Ok(rows.iter().map(version_row).collect())
    }

    async fn referenced_by(&self, subject: &str, v: u32) -> Result<Vec<u32>> {
        let c = self.client().await?;
        referenced_by(&*c, subject, v).await
    }

    async fn delete_schema_version(
        &self,
        subject: &str,
        v: Option<u32>,
        permanent: bool,
    ) -> Result<SchemaDeleted> {
        in_tx!(self, |tx| { delete(&tx, subject, v, permanent).await })
    }

    async fn registry_setting(
        &self,
        kind: RegistrySetting,
        subject: &str,
    ) -> Result<Option<String>> {
        let c = self.client().await?;
        let row = c
            .query_opt(
                "SELECT value FROM registry_settings WHERE kind = $1 AND subject = $2",
                &[&kind.key(), &subject],
            )
            .await
            .map_err(backend("reading a registry setting"))?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn set_registry_setting(
        &self,
        kind: RegistrySetting,
        subject: &str,
        value: Option<&str>,
    ) -> Result<Option<String>> {
        in_tx!(self, |tx| {
            lock(&tx).await?;
            let old: Option<String> = tx
                .query_opt(
                    "SELECT value FROM registry_settings WHERE kind = $1 AND subject = $2",
                    &[&kind.key(), &subject],
                )
                .await
                .map_err(backend("reading a registry setting"))?
                .map(|r| r.get(0));
            let key = kind.key();
            match value {
                Some(v) => {
                    tx.execute(
                        "INSERT INTO registry_settings (kind, subject, value) VALUES ($1, $2, $3)
                         ON CONFLICT (kind, subject) DO UPDATE SET value = excluded.value",
                        &[&key, &subject, &v],
                    )
                    .await
                }
                None => {
                    tx.execute(
                        "DELETE FROM registry_settings WHERE kind = $1 AND subject = $2",
                        &[&key, &subject],
                    )
                    .await
                }
            }
            .map_err(backend("writing a registry setting"))?;
            bump(&tx).await?;
            Ok(old)
        })
    }

    async fn registry_version(&self) -> Result<u64> {
        let c = self.client().await?;
        let v: i64 = c
            .query_one("SELECT version FROM registry_state WHERE one = 1", &[])
            .await
            .map_err(backend("reading the registry version"))?
            .get(0);
        Ok(v as u64)
    }
}
