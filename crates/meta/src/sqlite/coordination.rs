//! [`Coordination`] on SQLite: one broker's cluster, with the same rows and rules as PostgreSQL's,
//! so a single node runs the same controller and leadership code as a cluster.

use std::time::Duration;

use rusqlite::{params, OptionalExtension, TransactionBehavior};
use tokio::sync::watch;

use super::{backend, i, now_ms, SqliteMetaStore};
use crate::{
    Assignment, AssignmentChange, BrokerInfo, BrokerRegistration, BrokerState, ControllerLease,
    Coordination, MetaError, Result,
};

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn broker_row(r: &rusqlite::Row<'_>, now: i64) -> rusqlite::Result<BrokerInfo> {
    let expires: i64 = r.get(7)?;
    Ok(BrokerInfo {
        node_id: r.get(0)?,
        incarnation: r.get::<_, i64>(1)? as u64,
        zone: r.get(2)?,
        host: r.get(3)?,
        port: r.get(4)?,
        internal_addr: r.get(5)?,
        state: BrokerState::parse(&r.get::<_, String>(6)?),
        alive: expires > now,
    })
}

/// Fails unless `node_id` is registered at `incarnation` and not fenced.
fn check_incarnation(tx: &rusqlite::Transaction<'_>, node_id: i32, incarnation: u64) -> Result<()> {
    let row: Option<(i64, String)> = tx
        .query_row(
            "SELECT incarnation, state FROM brokers WHERE node_id = ?1",
            params![node_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(backend("reading a broker"))?;
    match row {
        Some((inc, state)) if inc as u64 == incarnation && state != "fenced" => Ok(()),
        Some(_) => Err(MetaError::BrokerFenced {
            node_id,
            incarnation,
        }),
        None => Err(MetaError::UnknownBroker(node_id)),
    }
}

/// The lease row: (holder, epoch, expiry in ms), if a controller was ever elected.
fn read_lease(c: &rusqlite::Connection) -> Result<Option<(i32, i64, i64)>> {
    c.query_row(
        "SELECT node_id, epoch, expires_ms FROM controller WHERE id = 1",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
    .optional()
    .map_err(backend("reading the controller lease"))
}

fn check_lease(tx: &rusqlite::Transaction<'_>, lease: ControllerLease, now: i64) -> Result<()> {
    let row = read_lease(tx)?;
    match row {
        Some((node, epoch, expires))
            if node == lease.node_id && epoch as u64 == lease.epoch && expires > now =>
        {
            Ok(())
        }
        _ => Err(MetaError::NotController { epoch: lease.epoch }),
    }
}

impl SqliteMetaStore {
    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

#[async_trait::async_trait]
impl Coordination for SqliteMetaStore {
    async fn register_broker(
        &self,
        reg: &BrokerRegistration,
        session: Duration,
    ) -> Result<BrokerInfo> {
        let reg = reg.clone();
        let info = self
            .with(move |c| {
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(backend("begin"))?;
                let node_id = match reg.node_id {
                    Some(n) => n,
                    None => tx
                        .query_row(
                            "SELECT COALESCE(MAX(node_id), 1000) + 1 FROM brokers WHERE node_id > 1000",
                            [],
                            |r| r.get(0),
                        )
                        .map_err(backend("allocating a node id"))?,
                };
                let incarnation: i64 = tx
                    .query_row(
                        "SELECT incarnation FROM brokers WHERE node_id = ?1",
                        params![node_id],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(backend("reading a broker"))?
                    .map_or(1, |n: i64| n + 1);
                let now = now_ms();
                tx.execute(
                    "INSERT OR REPLACE INTO brokers
                     (node_id, incarnation, zone, host, port, internal_addr, state, expires_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7)",
                    params![
                        node_id,
                        incarnation,
                        reg.zone,
                        reg.host,
                        reg.port,
                        reg.internal_addr,
                        now.saturating_add(ms(session))
                    ],
                )
                .map_err(backend("registering a broker"))?;
                tx.commit().map_err(backend("commit"))?;
                Ok(BrokerInfo {
                    node_id,
                    incarnation: incarnation as u64,
                    zone: reg.zone,
                    host: reg.host,
                    port: reg.port,
                    internal_addr: reg.internal_addr,
                    state: BrokerState::Running,
                    alive: true,
                })
            })
            .await?;
        self.changed();
        Ok(info)
    }

    async fn renew_session(&self, node_id: i32, incarnation: u64, session: Duration) -> Result<()> {
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            check_incarnation(&tx, node_id, incarnation)?;
            tx.execute(
                "UPDATE brokers SET expires_ms = ?2 WHERE node_id = ?1",
                params![node_id, now_ms().saturating_add(ms(session))],
            )
            .map_err(backend("renewing a session"))?;
            tx.commit().map_err(backend("commit"))
        })
        .await
    }

    async fn set_broker_state(
        &self,
        node_id: i32,
        incarnation: u64,
        state: BrokerState,
    ) -> Result<()> {
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            check_incarnation(&tx, node_id, incarnation)?;
            tx.execute(
                "UPDATE brokers SET state = ?2 WHERE node_id = ?1",
                params![node_id, state.as_str()],
            )
            .map_err(backend("changing a broker's state"))?;
            tx.commit().map_err(backend("commit"))
        })
        .await?;
        self.changed();
        Ok(())
    }

    async fn brokers(&self) -> Result<Vec<BrokerInfo>> {
        self.with(move |c| {
            let now = now_ms();
            let mut stmt = c
                .prepare_cached(
                    "SELECT node_id, incarnation, zone, host, port, internal_addr, state, expires_ms
                     FROM brokers ORDER BY node_id",
                )
                .map_err(backend("listing brokers"))?;
            let rows = stmt
                .query_map([], |r| broker_row(r, now))
                .map_err(backend("listing brokers"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("listing brokers"))
        })
        .await
    }

    async fn acquire_controller(
        &self,
        node_id: i32,
        ttl: Duration,
    ) -> Result<Option<ControllerLease>> {
        let (lease, changed) = self
            .with(move |c| {
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(backend("begin"))?;
                let now = now_ms();
                let row = read_lease(&tx)?;
                let expires = now.saturating_add(ms(ttl));
                let (epoch, changed) = match row {
                    Some((holder, epoch, _)) if holder == node_id => (epoch, false),
                    Some((_, _, until)) if until > now => return Ok((None, false)),
                    Some((_, epoch, _)) => (epoch + 1, true),
                    None => (1, true),
                };
                tx.execute(
                    "INSERT OR REPLACE INTO controller (id, node_id, epoch, expires_ms)
                     VALUES (1, ?1, ?2, ?3)",
                    params![node_id, epoch, expires],
                )
                .map_err(backend("taking the controller lease"))?;
                tx.commit().map_err(backend("commit"))?;
                Ok((
                    Some(ControllerLease {
                        node_id,
                        epoch: epoch as u64,
                    }),
                    changed,
                ))
            })
            .await?;
        if changed {
            self.changed();
        }
        Ok(lease)
    }

    async fn controller(&self) -> Result<Option<ControllerLease>> {
        self.with(move |c| {
            let now = now_ms();
            let row = read_lease(c)?;
            Ok(row
                .filter(|&(_, _, until)| until > now)
                .map(|(node_id, epoch, _)| ControllerLease {
                    node_id,
                    epoch: epoch as u64,
                }))
        })
        .await
    }

    async fn resign_controller(&self, lease: ControllerLease) -> Result<()> {
        self.with(move |c| {
            c.execute(
                "UPDATE controller SET expires_ms = 0 WHERE id = 1 AND node_id = ?1 AND epoch = ?2",
                params![lease.node_id, i(lease.epoch)],
            )
            .map_err(backend("resigning the controller lease"))?;
            Ok(())
        })
        .await?;
        self.changed();
        Ok(())
    }

    async fn fence_expired_brokers(&self, lease: ControllerLease) -> Result<Vec<i32>> {
        let fenced: Vec<i32> = self
            .with(move |c| {
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(backend("begin"))?;
                let now = now_ms();
                check_lease(&tx, lease, now)?;
                let ids: Vec<i32> = {
                    let mut stmt = tx
                        .prepare(
                            "SELECT node_id FROM brokers WHERE expires_ms <= ?1 AND state != 'fenced'
                             ORDER BY node_id",
                        )
                        .map_err(backend("finding expired brokers"))?;
                    let rows = stmt
                        .query_map(params![now], |r| r.get(0))
                        .map_err(backend("finding expired brokers"))?;
                    rows.collect::<rusqlite::Result<_>>()
                        .map_err(backend("finding expired brokers"))?
                };
                tx.execute(
                    "UPDATE brokers SET state = 'fenced' WHERE expires_ms <= ?1 AND state != 'fenced'",
                    params![now],
                )
                .map_err(backend("fencing brokers"))?;
                tx.commit().map_err(backend("commit"))?;
                Ok(ids)
            })
            .await?;
        if !fenced.is_empty() {
            self.changed();
        }
        Ok(fenced)
    }

    async fn assignments(&self) -> Result<Vec<Assignment>> {
        self.with(move |c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT p.topic, p.partition, p.stream_id, a.leader, a.target,
                            COALESCE(s.epoch, 0)
                     FROM partitions p
                     LEFT JOIN assignments a ON a.stream_id = p.stream_id
                     LEFT JOIN streams s ON s.stream_id = p.stream_id
                     ORDER BY p.topic, p.partition",
                )
                .map_err(backend("listing assignments"))?;
            let rows = stmt
                .query_map([], |r| {
                    Ok(Assignment {
                        topic: r.get(0)?,
                        partition: r.get::<_, i64>(1)? as u32,
                        stream_id: r.get::<_, i64>(2)? as u64,
                        leader: r.get(3)?,
                        target: r.get(4)?,
                        epoch: r.get::<_, i64>(5)? as u64,
                    })
                })
                .map_err(backend("listing assignments"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("listing assignments"))
        })
        .await
    }

    async fn change_assignments(
        &self,
        lease: ControllerLease,
        changes: &[AssignmentChange],
    ) -> Result<()> {
        let changes = changes.to_vec();
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            check_lease(&tx, lease, now_ms())?;
            for ch in &changes {
                match *ch {
                    AssignmentChange::Place { stream_id, leader } => {
                        tx.execute(
                            "INSERT INTO assignments (stream_id, leader, target) VALUES (?1, ?2, NULL)
                             ON CONFLICT (stream_id) DO UPDATE SET leader = ?2
                             WHERE assignments.leader IS NULL",
                            params![i(stream_id), leader],
                        )
                        .map_err(backend("placing a partition"))?;
                    }
                    AssignmentChange::Move { stream_id, target } => {
                        tx.execute(
                            "UPDATE assignments SET target = ?2
                             WHERE stream_id = ?1 AND leader IS NOT NULL",
                            params![i(stream_id), target],
                        )
                        .map_err(backend("moving a partition"))?;
                    }
                }
            }
            tx.commit().map_err(backend("commit"))
        })
        .await?;
        self.changed();
        Ok(())
    }

    async fn request_move(&self, stream_id: u64, target: Option<i32>) -> Result<bool> {
        let n = self
            .with(move |c| {
                c.execute(
                    "UPDATE assignments SET target = ?2 WHERE stream_id = ?1 AND leader IS NOT NULL",
                    params![i(stream_id), target],
                )
                .map_err(backend("requesting a move"))
            })
            .await?;
        if n > 0 {
            self.changed();
        }
        Ok(n > 0)
    }

    async fn hand_over(
        &self,
        stream_id: u64,
        node_id: i32,
        incarnation: u64,
    ) -> Result<Option<i32>> {
        let to = self
            .with(move |c| {
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(backend("begin"))?;
                check_incarnation(&tx, node_id, incarnation)?;
                let target: Option<i32> = tx
                    .query_row(
                        "SELECT target FROM assignments
                         WHERE stream_id = ?1 AND leader = ?2 AND target IS NOT NULL",
                        params![i(stream_id), node_id],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(backend("reading an assignment"))?;
                if let Some(t) = target {
                    tx.execute(
                        "UPDATE assignments SET leader = ?2, target = NULL WHERE stream_id = ?1",
                        params![i(stream_id), t],
                    )
                    .map_err(backend("handing a partition over"))?;
                }
                tx.commit().map_err(backend("commit"))?;
                Ok(target)
            })
            .await?;
        if to.is_some() {
            self.changed();
        }
        Ok(to)
    }

    async fn notify_cluster(&self) -> Result<()> {
        self.changed();
        Ok(())
    }

    fn cluster_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}
