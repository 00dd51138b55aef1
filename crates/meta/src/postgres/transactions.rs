//! [`Transactions`] on PostgreSQL.
//!
//! A record is written with a compare-and-set on its version (an INSERT that does nothing when
//! a row exists, or an UPDATE naming the version read), so two brokers that both believe they
//! coordinate an id cannot both write it. Staging offsets holds a share lock on the record for
//! the rest of its database transaction, so a coordinator ending the transaction waits for it,
//! and then drops or commits what it staged.

use tokio_postgres::Transaction;

use super::{backend, in_tx, PostgresMetaStore};
use crate::{GroupOffset, MetaError, Result, Transactions, TxnRecord};

fn version(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

async fn save(tx: &Transaction<'_>, record: &TxnRecord) -> Result<u64> {
    let id = record.transactional_id.as_str();
    let data = record.encode();
    let written = if record.version == 0 {
        tx.execute(
            "INSERT INTO transactions (transactional_id, version, data) VALUES ($1, 1, $2)
             ON CONFLICT (transactional_id) DO NOTHING",
            &[&id, &data],
        )
        .await
    } else {
        tx.execute(
            "UPDATE transactions SET version = version + 1, data = $3
             WHERE transactional_id = $1 AND version = $2",
            &[&id, &version(record.version), &data],
        )
        .await
    }
    .map_err(backend("saving a transaction"))?;
    if written != 1 {
        return Err(MetaError::TxnConflict(id.to_string()));
    }
    Ok(record.version + 1)
}

#[async_trait::async_trait]
impl Transactions for PostgresMetaStore {
    async fn load_transaction(&self, transactional_id: &str) -> Result<Option<TxnRecord>> {
        let c = self.client().await?;
        let row = c
            .query_opt(
                "SELECT version, data FROM transactions WHERE transactional_id = $1",
                &[&transactional_id],
            )
            .await
            .map_err(backend("loading a transaction"))?;
        row.map(|r| {
            TxnRecord::decode(
                transactional_id,
                r.get::<_, i64>(0) as u64,
                r.get::<_, &[u8]>(1),
            )
        })
        .transpose()
    }

    async fn save_transaction(&self, record: &TxnRecord) -> Result<u64> {
        in_tx!(self, |tx| { save(&tx, record).await })
    }

    async fn list_transactions(&self) -> Result<Vec<TxnRecord>> {
        let c = self.client().await?;
        let rows = c
            .query(
                "SELECT transactional_id, version, data FROM transactions
                 ORDER BY transactional_id COLLATE \"C\"",
                &[],
            )
            .await
            .map_err(backend("listing transactions"))?;
        rows.iter()
            .map(|r| {
                TxnRecord::decode(
                    r.get::<_, &str>(0),
                    r.get::<_, i64>(1) as u64,
                    r.get::<_, &[u8]>(2),
                )
            })
            .collect()
    }

    async fn stage_txn_offsets(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
        offsets: Vec<GroupOffset>,
    ) -> Result<()> {
        in_tx!(self, |tx| {
            let row = tx
                .query_opt(
                    "SELECT version, data FROM transactions WHERE transactional_id = $1 FOR SHARE",
                    &[&transactional_id],
                )
                .await
                .map_err(backend("reading a transaction"))?;
            let accepts = match row {
                Some(r) => TxnRecord::decode(
                    transactional_id,
                    r.get::<_, i64>(0) as u64,
                    r.get::<_, &[u8]>(1),
                )?
                .accepts_offsets(producer_id, epoch, group),
                None => false,
            };
            if !accepts {
                return Err(MetaError::TxnConflict(transactional_id.to_string()));
            }
            for o in &offsets {
                tx.execute(
                    "INSERT INTO txn_offsets (transactional_id, group_id, topic, partition,
                       commit_offset, leader_epoch, metadata, commit_ms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                     ON CONFLICT (transactional_id, group_id, topic, partition) DO UPDATE SET
                       commit_offset = excluded.commit_offset, leader_epoch = excluded.leader_epoch,
                       metadata = excluded.metadata, commit_ms = excluded.commit_ms",
                    &[
                        &transactional_id,
                        &group,
                        &o.topic,
                        &(o.partition as i32),
                        &o.offset,
                        &o.leader_epoch,
                        &o.metadata,
                        &o.commit_ms,
                    ],
                )
                .await
                .map_err(backend("staging an offset"))?;
            }
            Ok(())
        })
    }

    async fn complete_transaction(&self, record: &TxnRecord, commit: bool) -> Result<u64> {
        let id = record.transactional_id.as_str();
        in_tx!(self, |tx| {
            let v = save(&tx, record).await?;
            if commit {
                tx.execute(
                    "INSERT INTO group_offsets
                       (group_id, topic, partition, commit_offset, leader_epoch, metadata, commit_ms)
                     SELECT group_id, topic, partition, commit_offset, leader_epoch, metadata, commit_ms
                     FROM txn_offsets WHERE transactional_id = $1
                     ON CONFLICT (group_id, topic, partition) DO UPDATE SET
                       commit_offset = excluded.commit_offset, leader_epoch = excluded.leader_epoch,
                       metadata = excluded.metadata, commit_ms = excluded.commit_ms",
                    &[&id],
                )
                .await
                .map_err(backend("committing staged offsets"))?;
            }
            tx.execute(
                "DELETE FROM txn_offsets WHERE transactional_id = $1",
                &[&id],
            )
            .await
            .map_err(backend("dropping staged offsets"))?;
            Ok(v)
        })
    }

    async fn staged_offsets(&self, group: &str) -> Result<Vec<(String, u32)>> {
        let c = self.client().await?;
        let rows = c
            .query(
                "SELECT DISTINCT topic, partition FROM txn_offsets WHERE group_id = $1
                 ORDER BY topic, partition",
                &[&group],
            )
            .await
            .map_err(backend("reading staged offsets"))?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get::<_, i32>(1) as u32))
            .collect())
    }

    async fn delete_transaction(&self, transactional_id: &str, version_read: u64) -> Result<()> {
        in_tx!(self, |tx| {
            let n = tx
                .execute(
                    "DELETE FROM transactions WHERE transactional_id = $1 AND version = $2",
                    &[&transactional_id, &version(version_read)],
                )
                .await
                .map_err(backend("deleting a transaction"))?;
            if n != 1 {
                return Err(MetaError::TxnConflict(transactional_id.to_string()));
            }
            tx.execute(
                "DELETE FROM txn_offsets WHERE transactional_id = $1",
                &[&transactional_id],
            )
            .await
            .map_err(backend("deleting a transaction"))?;
            Ok(())
        })
    }
}
