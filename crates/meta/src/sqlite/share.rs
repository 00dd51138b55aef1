//! [`ShareStates`] on SQLite.

use rusqlite::{params, OptionalExtension, Transaction};

use super::{backend, SqliteMetaStore};
use crate::share::{decode, Claim, ShareState, ShareStates};
use crate::{MetaError, Result};

/// The state of one share-partition, read inside `tx`.
fn read(tx: &Transaction, group: &str, topic: &str, partition: i32) -> Result<Option<ShareState>> {
    let row = tx
        .query_row(
            "SELECT state_epoch, leader_epoch, start_offset, batches FROM share_states
             WHERE group_id = ?1 AND topic = ?2 AND partition = ?3",
            params![group, topic, partition],
            |r| {
                Ok((
                    r.get::<_, i32>(0)?,
                    r.get::<_, i32>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Vec<u8>>(3)?,
                ))
            },
        )
        .optional()
        .map_err(backend("reading a share state"))?;
    row.map(|(state_epoch, leader_epoch, start_offset, batches)| {
        decode(state_epoch, leader_epoch, start_offset, &batches)
    })
    .transpose()
}

fn put(tx: &Transaction, group: &str, topic: &str, partition: i32, s: &ShareState) -> Result<()> {
    tx.execute(
        "INSERT INTO share_states
             (group_id, topic, partition, state_epoch, leader_epoch, start_offset, batches)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (group_id, topic, partition) DO UPDATE SET
             state_epoch = excluded.state_epoch, leader_epoch = excluded.leader_epoch,
             start_offset = excluded.start_offset, batches = excluded.batches",
        params![
            group,
            topic,
            partition,
            s.state_epoch,
            s.leader_epoch,
            s.start_offset,
            s.encode_batches()
        ],
    )
    .map_err(backend("writing a share state"))?;
    Ok(())
}

#[async_trait::async_trait]
impl ShareStates for SqliteMetaStore {
    async fn claim_share_state(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        leader_epoch: i32,
        start_offset: i64,
    ) -> Result<Claim> {
        let (group, topic) = (group.to_string(), topic.to_string());
        self.with(move |c| {
            let tx = c.transaction().map_err(backend("begin"))?;
            let claim = match read(&tx, &group, &topic, partition)? {
                Some(s) if s.leader_epoch > leader_epoch => Claim::Fenced {
                    leader_epoch: s.leader_epoch,
                },
                found => {
                    let s = ShareState {
                        leader_epoch,
                        ..found.unwrap_or_else(|| crate::share::fresh(start_offset))
                    };
                    put(&tx, &group, &topic, partition, &s)?;
                    Claim::Claimed(s)
                }
            };
            tx.commit().map_err(backend("commit"))?;
            Ok(claim)
        })
        .await
    }

    async fn write_share_state(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        state: &ShareState,
    ) -> Result<bool> {
        state.check().map_err(MetaError::InvalidShareState)?;
        let (group, topic, state) = (group.to_string(), topic.to_string(), state.clone());
        self.with(move |c| {
            let tx = c.transaction().map_err(backend("begin"))?;
            let current = read(&tx, &group, &topic, partition)?;
            let ok = current.is_some_and(|s| crate::share::may_replace(&s, &state));
            if ok {
                put(&tx, &group, &topic, partition, &state)?;
            }
            tx.commit().map_err(backend("commit"))?;
            Ok(ok)
        })
        .await
    }

    async fn read_share_state(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Option<ShareState>> {
        let (group, topic) = (group.to_string(), topic.to_string());
        self.with(move |c| {
            let tx = c.transaction().map_err(backend("begin"))?;
            read(&tx, &group, &topic, partition)
        })
        .await
    }

    async fn reset_share_state(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        start_offset: i64,
    ) -> Result<ShareState> {
        let (group, topic) = (group.to_string(), topic.to_string());
        self.with(move |c| {
            let tx = c.transaction().map_err(backend("begin"))?;
            let s = crate::share::reset(read(&tx, &group, &topic, partition)?, start_offset);
            put(&tx, &group, &topic, partition, &s)?;
            tx.commit().map_err(backend("commit"))?;
            Ok(s)
        })
        .await
    }

    async fn share_states(&self, group: &str) -> Result<Vec<(String, i32, ShareState)>> {
        let group = group.to_string();
        self.with(move |c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT topic, partition, state_epoch, leader_epoch, start_offset, batches
                     FROM share_states WHERE group_id = ?1 ORDER BY topic, partition",
                )
                .map_err(backend("listing share states"))?;
            let rows = stmt
                .query_map(params![group], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i32>(1)?,
                        r.get::<_, i32>(2)?,
                        r.get::<_, i32>(3)?,
                        r.get::<_, i64>(4)?,
                        r.get::<_, Vec<u8>>(5)?,
                    ))
                })
                .map_err(backend("listing share states"))?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(backend("listing share states"))?;
            rows.into_iter()
                .map(|(topic, p, se, le, start, b)| Ok((topic, p, decode(se, le, start, &b)?)))
                .collect()
        })
        .await
    }

    async fn delete_share_states(&self, group: &str, topic: Option<&str>) -> Result<u64> {
        let (group, topic) = (group.to_string(), topic.map(str::to_string));
        self.with(move |c| {
            let n = match topic {
                Some(t) => c.execute(
                    "DELETE FROM share_states WHERE group_id = ?1 AND topic = ?2",
                    params![group, t],
                ),
                None => c.execute(
                    "DELETE FROM share_states WHERE group_id = ?1",
                    params![group],
                ),
            }
            .map_err(backend("deleting share states"))?;
            Ok(n as u64)
        })
        .await
    }
}
