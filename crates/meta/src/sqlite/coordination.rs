//! [`Coordination`] on SQLite: one broker's cluster, with the same rows and rules as PostgreSQL's,
//! so a single node runs the same controller and leadership code as a cluster.

use std::sync::Arc;
use std::time::Duration;

use rusqlite::{params, OptionalExtension, TransactionBehavior};
use tokio::sync::watch;

use super::{backend, i, now_ms, SqliteMetaStore};
use crate::{check_wal_claim, group_listeners, tried_list, wal_state, WalRow};
use crate::{
    Assignment, AssignmentChange, BrokerInfo, BrokerLoad, BrokerRegistration, BrokerState,
    ControllerLease, Coordination, ListenerEndpoint, MetaError, Result, WalInfo, WalRegistration,
};

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A row of [`BROKERS_QUERY`]: the broker, and one of its listeners if it has any.
fn broker_row(
    r: &rusqlite::Row<'_>,
    now: i64,
) -> rusqlite::Result<(BrokerInfo, Option<ListenerEndpoint>)> {
    let expires: i64 = r.get(7)?;
    let broker = BrokerInfo {
        node_id: r.get(0)?,
        incarnation: r.get::<_, i64>(1)? as u64,
        zone: r.get(2)?,
        host: r.get(3)?,
        port: r.get(4)?,
        listeners: Vec::new(),
        internal_addr: r.get(5)?,
        state: BrokerState::parse(&r.get::<_, String>(6)?),
        alive: expires > now,
    };
    let listener = match r.get::<_, Option<String>>(8)? {
        Some(name) => Some(ListenerEndpoint {
            name,
            host: r.get(9)?,
            port: r.get(10)?,
        }),
        None => None,
    };
    Ok((broker, listener))
}

/// Every broker with its listeners, one row per listener, in node id then listener order.
const BROKERS_QUERY: &str =
    "SELECT b.node_id, b.incarnation, b.zone, b.host, b.port, b.internal_addr, b.state,
            b.expires_ms, l.name, l.host, l.port
     FROM brokers b LEFT JOIN broker_listeners l ON l.node_id = b.node_id
     ORDER BY b.node_id, l.ordinal";

/// Replaces `node_id`'s listeners with `listeners`, keeping their order.
fn replace_listeners(
    tx: &rusqlite::Transaction<'_>,
    node_id: i32,
    listeners: &[ListenerEndpoint],
) -> Result<()> {
    tx.execute(
        "DELETE FROM broker_listeners WHERE node_id = ?1",
        params![node_id],
    )
    .map_err(backend("replacing a broker's listeners"))?;
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO broker_listeners (node_id, name, ordinal, host, port)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .map_err(backend("replacing a broker's listeners"))?;
    for (ordinal, l) in listeners.iter().enumerate() {
        insert
            .execute(params![node_id, l.name, ordinal as i64, l.host, l.port])
            .map_err(backend("replacing a broker's listeners"))?;
    }
    Ok(())
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

/// Claims `wal` for `node_id` at `incarnation`, or says why not (as PostgreSQL's `claim_wal`).
fn claim_wal(
    tx: &rusqlite::Transaction<'_>,
    node_id: i32,
    incarnation: i64,
    wal: &WalRegistration,
) -> Result<()> {
    let rows: Vec<WalRow> = {
        let mut stmt = tx
            .prepare(
                "SELECT wal_id, state, recoverer, path FROM wals
                 WHERE node_id = ?1 OR wal_id = ?2 ORDER BY wal_id",
            )
            .map_err(backend("reading WALs"))?;
        let rows = stmt
            .query_map(params![node_id, wal.wal_id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .map_err(backend("reading WALs"))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(backend("reading WALs"))?
    };
    check_wal_claim(node_id, &wal.wal_id, rows)?;
    tx.execute(
        "DELETE FROM wals WHERE node_id = ?1 AND wal_id != ?2 AND state = 'sealed'",
        params![node_id, wal.wal_id],
    )
    .map_err(backend("forgetting sealed WALs"))?;
    tx.execute(
        "INSERT OR REPLACE INTO wals
         (wal_id, node_id, incarnation, path, state, recoverer, tried, since_ms)
         VALUES (?1, ?2, ?3, ?4, 'open', NULL, '', ?5)",
        params![wal.wal_id, node_id, incarnation, wal.path, now_ms()],
    )
    .map_err(backend("claiming the WAL"))?;
    Ok(())
}

fn immediate(c: &mut rusqlite::Connection) -> Result<rusqlite::Transaction<'_>> {
    c.transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend("begin"))
}

impl SqliteMetaStore {
    /// Announces a change to this process's subscribers (the only ones a SQLite store has).
    pub(super) fn changed(&self) {
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
                replace_listeners(&tx, node_id, &reg.listeners)?;
                if let Some(wal) = &reg.wal {
                    claim_wal(&tx, node_id, incarnation, wal)?;
                }
                tx.commit().map_err(backend("commit"))?;
                Ok(BrokerInfo {
                    node_id,
                    incarnation: incarnation as u64,
                    zone: reg.zone,
                    host: reg.host,
                    port: reg.port,
                    listeners: reg.listeners,
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
                .prepare_cached(BROKERS_QUERY)
                .map_err(backend("listing brokers"))?;
            let rows = stmt
                .query_map([], |r| broker_row(r, now))
                .map_err(backend("listing brokers"))?;
            let rows = rows
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(backend("listing brokers"))?;
            Ok(group_listeners(rows))
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

    async fn fence_expired_brokers(
        &self,
        lease: ControllerLease,
        margin: Duration,
    ) -> Result<Vec<i32>> {
        let fenced: Vec<i32> = self
            .with(move |c| {
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(backend("begin"))?;
                let lease_now = now_ms();
                check_lease(&tx, lease, lease_now)?;
                // Expired at least `margin` ago.
                let now = lease_now.saturating_sub(ms(margin));
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
                // Brokers without a WAL left to recover (`wal.kind = "object"`) have nothing
                // acknowledged that is not committed: their partitions go to live brokers now.
                for id in &ids {
                    tx.execute(
                        "UPDATE assignments SET leader = NULL, target = NULL
                         WHERE leader = ?1
                           AND NOT EXISTS (SELECT 1 FROM wals w WHERE w.node_id = ?1
                                                                 AND w.state != 'sealed')",
                        params![id],
                    )
                    .map_err(backend("releasing the partitions of brokers without a WAL"))?;
                }
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
        let cache = Arc::clone(&self.assignments);
        let catalog = self.catalog.clone();
        self.with(move |c| {
            // Read with the connection held: no change can come between the version and
            // the rows.
            let version = catalog.version();
            let mut cached = cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((v, rows)) = &*cached {
                if *v == version {
                    return Ok(rows.clone());
                }
            }
            #[cfg(test)]
            catalog
                .reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
            let rows: Vec<Assignment> = rows
                .collect::<rusqlite::Result<_>>()
                .map_err(backend("listing assignments"))?;
            *cached = Some((version, rows.clone()));
            Ok(rows)
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

    async fn wals(&self) -> Result<Vec<WalInfo>> {
        self.with(move |c| {
            let now = now_ms();
            let mut stmt = c
                .prepare_cached(
                    "SELECT wal_id, node_id, incarnation, path, state, recoverer, tried, since_ms
                     FROM wals WHERE state != 'sealed' OR since_ms > ?1 ORDER BY wal_id",
                )
                .map_err(backend("listing WALs"))?;
            let rows = stmt
                .query_map(params![now - 3_600_000], |r| {
                    Ok(WalInfo {
                        wal_id: r.get(0)?,
                        node_id: r.get(1)?,
                        incarnation: r.get::<_, i64>(2)? as u64,
                        path: r.get(3)?,
                        state: wal_state(&r.get::<_, String>(4)?, r.get(5)?),
                        tried: tried_list(&r.get::<_, String>(6)?),
                        since_ms: now - r.get::<_, i64>(7)?,
                    })
                })
                .map_err(backend("listing WALs"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("listing WALs"))
        })
        .await
    }

    async fn assign_wal_recovery(
        &self,
        lease: ControllerLease,
        wal_id: &str,
        recoverer: i32,
        stale: Option<i32>,
    ) -> Result<bool> {
        let wal_id = wal_id.to_string();
        let n = self
            .with(move |c| {
                let tx = immediate(c)?;
                let now = now_ms();
                check_lease(&tx, lease, now)?;
                let n = tx
                    .execute(
                        "UPDATE wals SET state = 'recovering', recoverer = ?2, since_ms = ?4
                         WHERE wal_id = ?1 AND ((state = 'open' AND ?3 IS NULL)
                               OR (state = 'recovering' AND recoverer = ?3))
                           AND NOT EXISTS (SELECT 1 FROM brokers b
                                WHERE b.node_id = wals.node_id
                                  AND b.incarnation = wals.incarnation
                                  AND b.state != 'fenced')",
                        params![wal_id, recoverer, stale, now],
                    )
                    .map_err(backend("assigning a WAL recovery"))?;
                tx.commit().map_err(backend("commit"))?;
                Ok(n)
            })
            .await?;
        if n > 0 {
            self.changed();
        }
        Ok(n > 0)
    }

    async fn wal_unreachable(&self, wal_id: &str, node_id: i32, incarnation: u64) -> Result<()> {
        let wal_id = wal_id.to_string();
        self.with(move |c| {
            let tx = immediate(c)?;
            check_incarnation(&tx, node_id, incarnation)?;
            let n = tx
                .execute(
                    "UPDATE wals SET state = 'open', recoverer = NULL,
                       tried = CASE WHEN tried = '' THEN ?2 ELSE tried || ',' || ?2 END,
                       since_ms = ?3
                     WHERE wal_id = ?1 AND state = 'recovering' AND recoverer = ?4",
                    params![wal_id, node_id.to_string(), now_ms(), node_id],
                )
                .map_err(backend("giving a WAL recovery back"))?;
            if n == 0 {
                return Err(MetaError::NotRecovering(wal_id));
            }
            tx.commit().map_err(backend("commit"))
        })
        .await?;
        self.changed();
        Ok(())
    }

    async fn retry_wal(&self, lease: ControllerLease, wal_id: &str) -> Result<()> {
        let wal_id = wal_id.to_string();
        self.with(move |c| {
            let tx = immediate(c)?;
            let now = now_ms();
            check_lease(&tx, lease, now)?;
            tx.execute(
                "UPDATE wals SET tried = '', since_ms = ?2 WHERE wal_id = ?1 AND state = 'open'",
                params![wal_id, now],
            )
            .map_err(backend("retrying a WAL"))?;
            tx.commit().map_err(backend("commit"))
        })
        .await?;
        self.changed();
        Ok(())
    }

    async fn finish_wal_recovery(
        &self,
        wal_id: &str,
        node_id: i32,
        incarnation: u64,
    ) -> Result<Vec<u64>> {
        let wal_id = wal_id.to_string();
        let streams = self
            .with(move |c| {
                let tx = immediate(c)?;
                check_incarnation(&tx, node_id, incarnation)?;
                let owner: Option<i32> = tx
                    .query_row(
                        "SELECT node_id FROM wals
                         WHERE wal_id = ?1 AND state = 'recovering' AND recoverer = ?2",
                        params![wal_id, node_id],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(backend("reading a WAL"))?;
                let Some(owner) = owner else {
                    return Err(MetaError::NotRecovering(wal_id));
                };
                tx.execute(
                    "UPDATE wals SET state = 'sealed', recoverer = NULL, since_ms = ?2
                     WHERE wal_id = ?1",
                    params![wal_id, now_ms()],
                )
                .map_err(backend("sealing a WAL"))?;
                let mut streams: Vec<u64> = {
                    let mut stmt = tx
                        .prepare("SELECT stream_id FROM assignments WHERE leader = ?1")
                        .map_err(backend("reading assignments"))?;
                    let rows = stmt
                        .query_map(params![owner], |r| r.get::<_, i64>(0))
                        .map_err(backend("reading assignments"))?;
                    rows.map(|r| r.map(|s| s as u64))
                        .collect::<rusqlite::Result<_>>()
                        .map_err(backend("reading assignments"))?
                };
                streams.sort_unstable();
                tx.execute(
                    "UPDATE assignments SET leader = NULL, target = NULL WHERE leader = ?1",
                    params![owner],
                )
                .map_err(backend("releasing a dead broker's partitions"))?;
                tx.commit().map_err(backend("commit"))?;
                Ok(streams)
            })
            .await?;
        self.changed();
        Ok(streams)
    }

    async fn notify_cluster(&self) -> Result<()> {
        self.changed();
        Ok(())
    }

    async fn report_load(&self, incarnation: u64, load: BrokerLoad) -> Result<()> {
        let partitions = load.encode_partitions();
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            check_incarnation(&tx, load.node_id, incarnation)?;
            tx.execute(
                "INSERT INTO broker_loads (node_id, at_ms, cpu, partitions) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (node_id) DO UPDATE
                 SET at_ms = excluded.at_ms, cpu = excluded.cpu, partitions = excluded.partitions",
                params![load.node_id, now_ms(), load.cpu, partitions],
            )
            .map_err(backend("reporting a load"))?;
            tx.commit().map_err(backend("commit"))
        })
        .await
    }

    async fn loads(&self) -> Result<Vec<BrokerLoad>> {
        self.with(move |c| {
            let now = now_ms();
            let mut stmt = c
                .prepare_cached(
                    "SELECT node_id, at_ms, cpu, partitions FROM broker_loads ORDER BY node_id",
                )
                .map_err(backend("reading loads"))?;
            let rows = stmt
                .query_map([], |r| {
                    Ok(BrokerLoad {
                        node_id: r.get(0)?,
                        age_ms: now.saturating_sub(r.get::<_, i64>(1)?),
                        cpu: r.get(2)?,
                        partitions: BrokerLoad::decode_partitions(&r.get::<_, String>(3)?),
                    })
                })
                .map_err(backend("reading loads"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("reading loads"))
        })
        .await
    }

    fn cluster_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}
