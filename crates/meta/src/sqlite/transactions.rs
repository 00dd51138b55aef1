//! [`Transactions`] on SQLite.

use rusqlite::{params, OptionalExtension, Transaction};

use super::{backend, SqliteMetaStore};
use crate::{GroupOffset, MetaError, Result, Transactions, TxnRecord};

fn stored_version(tx: &Transaction<'_>, id: &str) -> Result<Option<(u64, Vec<u8>)>> {
    tx.query_row(
        "SELECT version, data FROM transactions WHERE transactional_id = ?1",
        params![id],
        |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?)),
    )
    .optional()
    .map_err(backend("reading a transaction"))
}

/// Writes `record` if the stored version is still `record.version`; returns the new version.
fn save(tx: &Transaction<'_>, record: &TxnRecord) -> Result<u64> {
    let id = record.transactional_id.as_str();
    let current = stored_version(tx, id)?.map_or(0, |(v, _)| v);
    if current != record.version {
        return Err(MetaError::TxnConflict(id.to_string()));
    }
    let next = current + 1;
    tx.execute(
        "INSERT INTO transactions (transactional_id, version, data) VALUES (?1, ?2, ?3)
         ON CONFLICT (transactional_id) DO UPDATE SET version = excluded.version, data = excluded.data",
        params![id, next as i64, record.encode()],
    )
    .map_err(backend("saving a transaction"))?;
    Ok(next)
}

#[async_trait::async_trait]
impl Transactions for SqliteMetaStore {
    async fn load_transaction(&self, transactional_id: &str) -> Result<Option<TxnRecord>> {
        let id = transactional_id.to_string();
        self.with(move |c| {
            let row = c
                .query_row(
                    "SELECT version, data FROM transactions WHERE transactional_id = ?1",
                    params![id],
                    |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, Vec<u8>>(1)?)),
                )
                .optional()
                .map_err(backend("loading a transaction"))?;
            row.map(|(v, d)| TxnRecord::decode(&id, v, &d)).transpose()
        })
        .await
    }

    async fn save_transaction(&self, record: &TxnRecord) -> Result<u64> {
        let record = record.clone();
        self.with(move |c| {
            let tx = c.transaction().map_err(backend("begin"))?;
            let v = save(&tx, &record)?;
            tx.commit().map_err(backend("commit"))?;
            Ok(v)
        })
        .await
    }

    async fn list_transactions(&self) -> Result<Vec<TxnRecord>> {
        self.with(move |c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT transactional_id, version, data FROM transactions ORDER BY transactional_id",
                )
                .map_err(backend("listing transactions"))?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)? as u64,
                        r.get::<_, Vec<u8>>(2)?,
                    ))
                })
                .map_err(backend("listing transactions"))?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(backend("listing transactions"))?;
            rows.iter()
                .map(|(id, v, d)| TxnRecord::decode(id, *v, d))
                .collect()
        })
        .await
    }

    async fn stage_txn_offsets(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
        offsets: Vec<GroupOffset>,
    ) -> Result<()> {
        let (id, group) = (transactional_id.to_string(), group.to_string());
        self.with(move |c| {
            let tx = c.transaction().map_err(backend("begin"))?;
            let accepts = match stored_version(&tx, &id)? {
                Some((v, d)) => TxnRecord::decode(&id, v, &d)?.accepts_offsets(producer_id, epoch, &group),
                None => false,
            };
            if !accepts {
                return Err(MetaError::TxnConflict(id));
            }
            for o in offsets {
                tx.execute(
                    "INSERT INTO txn_offsets (transactional_id, group_id, topic, partition, offset, leader_epoch, metadata, commit_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                     ON CONFLICT (transactional_id, group_id, topic, partition) DO UPDATE SET
                       offset = excluded.offset, leader_epoch = excluded.leader_epoch,
                       metadata = excluded.metadata, commit_ms = excluded.commit_ms",
                    params![id, group, o.topic, o.partition, o.offset, o.leader_epoch, o.metadata, o.commit_ms],
                )
                .map_err(backend("staging an offset"))?;
            }
            tx.commit().map_err(backend("commit"))
        })
        .await
    }

    async fn complete_transaction(&self, record: &TxnRecord, commit: bool) -> Result<u64> {
        let record = record.clone();
        self.with(move |c| {
            let tx = c.transaction().map_err(backend("begin"))?;
            let v = save(&tx, &record)?;
            if commit {
                tx.execute(
                    "INSERT INTO group_offsets (group_id, topic, partition, offset, leader_epoch, metadata, commit_ms)
                     SELECT group_id, topic, partition, offset, leader_epoch, metadata, commit_ms
                     FROM txn_offsets WHERE transactional_id = ?1 AND true
                     ON CONFLICT (group_id, topic, partition) DO UPDATE SET
                       offset = excluded.offset, leader_epoch = excluded.leader_epoch,
                       metadata = excluded.metadata, commit_ms = excluded.commit_ms",
                    params![record.transactional_id],
                )
                .map_err(backend("committing staged offsets"))?;
            }
            tx.execute(
                "DELETE FROM txn_offsets WHERE transactional_id = ?1",
                params![record.transactional_id],
            )
            .map_err(backend("dropping staged offsets"))?;
            tx.commit().map_err(backend("commit"))?;
            Ok(v)
        })
        .await
    }

    async fn staged_offsets(&self, group: &str) -> Result<Vec<(String, u32)>> {
        let group = group.to_string();
        self.with(move |c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT DISTINCT topic, partition FROM txn_offsets WHERE group_id = ?1
                     ORDER BY topic, partition",
                )
                .map_err(backend("reading staged offsets"))?;
            let rows = stmt
                .query_map(params![group], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(backend("reading staged offsets"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("reading staged offsets"))
        })
        .await
    }

    async fn delete_transaction(&self, transactional_id: &str, version: u64) -> Result<()> {
        let id = transactional_id.to_string();
        self.with(move |c| {
            let tx = c.transaction().map_err(backend("begin"))?;
            if stored_version(&tx, &id)?.map(|(v, _)| v) != Some(version) {
                return Err(MetaError::TxnConflict(id));
            }
            tx.execute(
                "DELETE FROM transactions WHERE transactional_id = ?1",
                params![id],
            )
            .map_err(backend("deleting a transaction"))?;
            tx.execute(
                "DELETE FROM txn_offsets WHERE transactional_id = ?1",
                params![id],
            )
            .map_err(backend("deleting a transaction"))?;
            tx.commit().map_err(backend("commit"))
        })
        .await
    }
}
