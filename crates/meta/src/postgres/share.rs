//! [`ShareStates`] on PostgreSQL. Each call is one transaction that locks the share-partition's
//! row (`FOR UPDATE`), so that a claim, a write and a reset of one share-partition never
//! interleave.

use tokio_postgres::Transaction;

use super::{backend, in_tx, PostgresMetaStore};
use crate::share::{decode, Claim, ShareState, ShareStates};
use crate::{MetaError, Result};

async fn locked(
    tx: &Transaction<'_>,
    group: &str,
    topic: &str,
    partition: i32,
) -> Result<Option<ShareState>> {
    let row = tx
        .query_opt(
            "SELECT state_epoch, leader_epoch, start_offset, batches FROM share_states
             WHERE group_id = $1 AND topic = $2 AND partition = $3 FOR UPDATE",
            &[&group, &topic, &partition],
        )
        .await
        .map_err(backend("reading a share state"))?;
    row.map(|r| decode(r.get(0), r.get(1), r.get(2), r.get::<_, &[u8]>(3)))
        .transpose()
}

async fn put(
    tx: &Transaction<'_>,
    group: &str,
    topic: &str,
    partition: i32,
    s: &ShareState,
) -> Result<()> {
    tx.execute(
        "INSERT INTO share_states
             (group_id, topic, partition, state_epoch, leader_epoch, start_offset, batches)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (group_id, topic, partition) DO UPDATE SET
             state_epoch = excluded.state_epoch, leader_epoch = excluded.leader_epoch,
             start_offset = excluded.start_offset, batches = excluded.batches",
        &[
            &group,
            &topic,
            &partition,
            &s.state_epoch,
            &s.leader_epoch,
            &s.start_offset,
            &s.encode_batches(),
        ],
    )
    .await
    .map_err(backend("writing a share state"))?;
    Ok(())
}

/// Makes sure the row exists (a fresh state at `start_offset` if not), so that it can be locked.
async fn ensure(
    tx: &Transaction<'_>,
    group: &str,
    topic: &str,
    partition: i32,
    start_offset: i64,
) -> Result<()> {
    let s = crate::share::fresh(start_offset);
    tx.execute(
        "INSERT INTO share_states
             (group_id, topic, partition, state_epoch, leader_epoch, start_offset, batches)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (group_id, topic, partition) DO NOTHING",
        &[
            &group,
            &topic,
            &partition,
            &s.state_epoch,
            &s.leader_epoch,
            &s.start_offset,
            &s.encode_batches(),
        ],
    )
    .await
    .map_err(backend("creating a share state"))?;
    Ok(())
}

#[async_trait::async_trait]
impl ShareStates for PostgresMetaStore {
    async fn claim_share_state(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        leader_epoch: i32,
        start_offset: i64,
    ) -> Result<Claim> {
        in_tx!(self, |tx| {
            ensure(&tx, group, topic, partition, start_offset).await?;
            let s = locked(&tx, group, topic, partition)
                .await?
                .ok_or_else(|| MetaError::Corrupt("a share state created just now".into()))?;
            if s.leader_epoch > leader_epoch {
                return Ok(Claim::Fenced {
                    leader_epoch: s.leader_epoch,
                });
            }
            let s = ShareState { leader_epoch, ..s };
            put(&tx, group, topic, partition, &s).await?;
            Ok(Claim::Claimed(s))
        })
    }

    async fn write_share_state(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        state: &ShareState,
    ) -> Result<bool> {
        state.check().map_err(MetaError::InvalidShareState)?;
        in_tx!(self, |tx| {
            let current = locked(&tx, group, topic, partition).await?;
            let ok = current.is_some_and(|s| crate::share::may_replace(&s, state));
            if ok {
                put(&tx, group, topic, partition, state).await?;
            }
            Ok(ok)
        })
    }

    async fn read_share_state(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Option<ShareState>> {
        let c = self.client().await?;
        let row = c
            .query_opt(
                "SELECT state_epoch, leader_epoch, start_offset, batches FROM share_states
                 WHERE group_id = $1 AND topic = $2 AND partition = $3",
                &[&group, &topic, &partition],
            )
            .await
            .map_err(backend("reading a share state"))?;
        row.map(|r| decode(r.get(0), r.get(1), r.get(2), r.get::<_, &[u8]>(3)))
            .transpose()
    }

    async fn reset_share_state(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        start_offset: i64,
    ) -> Result<ShareState> {
        in_tx!(self, |tx| {
            let current = locked(&tx, group, topic, partition).await?;
            let s = crate::share::reset(current, start_offset);
            put(&tx, group, topic, partition, &s).await?;
            Ok(s)
        })
    }

    async fn share_states(&self, group: &str) -> Result<Vec<(String, i32, ShareState)>> {
        let c = self.client().await?;
        let rows = c
            .query(
                "SELECT topic, partition, state_epoch, leader_epoch, start_offset, batches
                 FROM share_states WHERE group_id = $1 ORDER BY topic COLLATE \"C\", partition",
                &[&group],
            )
            .await
            .map_err(backend("listing share states"))?;
        rows.iter()
            .map(|r| {
                let s = decode(r.get(2), r.get(3), r.get(4), r.get::<_, &[u8]>(5))?;
                Ok((r.get::<_, String>(0), r.get::<_, i32>(1), s))
            })
            .collect()
    }

    async fn delete_share_states(&self, group: &str, topic: Option<&str>) -> Result<u64> {
        let c = self.client().await?;
        let n = match topic {
            Some(t) => {
                c.execute(
                    "DELETE FROM share_states WHERE group_id = $1 AND topic = $2",
                    &[&group, &t],
                )
                .await
            }
            None => {
                c.execute("DELETE FROM share_states WHERE group_id = $1", &[&group])
                    .await
            }
        }
        .map_err(backend("deleting share states"))?;
        Ok(n)
    }
}
