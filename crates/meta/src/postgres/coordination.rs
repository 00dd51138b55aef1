//! [`Coordination`] on PostgreSQL: brokers, the controller lease and partition leadership, as
//! rows changed in one transaction each; times from the server's clock; changes announced with
//! `NOTIFY weir_cluster` and heard by every broker's listening connection.
//!
//! Lock order, on top of the store's (topic, streams, objects): the controller row, then broker
//! rows, then WAL rows, then assignment rows. Broker listener rows are written only by a
//! registration, which holds the brokers table.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_postgres::{AsyncMessage, Config, GenericClient};
use weir_retry::Backoff;

use super::{backend, i, in_tx, PostgresMetaStore, NOW_MS};
use crate::{check_wal_claim, group_listeners, tried_list, wal_state};
use crate::{
    Assignment, AssignmentChange, BrokerInfo, BrokerLoad, BrokerRegistration, BrokerState,
    ControllerLease, Coordination, ListenerEndpoint, MetaError, Result, WalInfo, WalRegistration,
};

/// The channel cluster changes are NOTIFYed on.
const CHANNEL: &str = "weir_cluster";

/// Reconnecting the LISTEN connection (from the first delay again once it is up).
const LISTEN_RETRY: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Announces a change to every broker's listener (when the caller's transaction commits).
pub(super) async fn notify(c: &impl GenericClient) -> Result<()> {
    c.execute("SELECT pg_notify($1, '')", &[&CHANNEL])
        .await
        .map_err(backend("notifying the cluster"))?;
    Ok(())
}

/// Fails unless `node_id` is registered at `incarnation` and not fenced; holds its row.
async fn check_incarnation(c: &impl GenericClient, node_id: i32, incarnation: u64) -> Result<()> {
    let row = c
        .query_opt(
            "SELECT incarnation, state FROM brokers WHERE node_id = $1 FOR UPDATE",
            &[&node_id],
        )
        .await
        .map_err(backend("reading a broker"))?;
    match row {
        Some(r) if r.get::<_, i64>(0) as u64 == incarnation && r.get::<_, &str>(1) != "fenced" => {
            Ok(())
        }
        Some(_) => Err(MetaError::BrokerFenced {
            node_id,
            incarnation,
        }),
        None => Err(MetaError::UnknownBroker(node_id)),
    }
}

/// Fails unless `lease` is the current, unexpired controller lease; holds the row, so that the
/// lease cannot change hands before the caller's transaction ends.
async fn check_lease(c: &impl GenericClient, lease: ControllerLease) -> Result<()> {
    match locked_lease(c).await? {
        Some((node_id, epoch, true)) if node_id == lease.node_id && epoch as u64 == lease.epoch => {
            Ok(())
        }
        _ => Err(MetaError::NotController { epoch: lease.epoch }),
    }
}

/// The lease row (holder, epoch, unexpired by the server's clock), locked until the caller's
/// transaction ends; `None` before any broker has bid for it.
async fn locked_lease(c: &impl GenericClient) -> Result<Option<(i32, i64, bool)>> {
    let row = c
        .query_opt(
            &format!(
                "SELECT node_id, epoch, expires_ms > {NOW_MS} FROM controller WHERE id = 1
                 FOR UPDATE"
            ),
            &[],
        )
        .await
        .map_err(backend("reading the controller lease"))?;
    Ok(row.map(|r| (r.get(0), r.get(1), r.get(2))))
}

impl PostgresMetaStore {
    /// Announces a change to this process's subscribers at once (others hear the NOTIFY).
    pub(super) fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Whether the lease is known to be another broker's now, without reading it: it was read
    /// valid, its expiry has not come by this process's clock, and no cluster change was heard
    /// since (a resignation is announced). Only while this process listens for changes.
    fn lease_held_elsewhere(&self, node_id: i32) -> bool {
        if !self.listening.is_completed() {
            return false;
        }
        let seen = self.lease_seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.as_ref().is_some_and(|s| {
            s.holder != node_id
                && std::time::Instant::now() < s.until
                && *self.changes.borrow() == s.changes
        })
    }

    fn remember_lease(&self, seen: Option<LeaseSeen>) {
        *self.lease_seen.lock().unwrap_or_else(|e| e.into_inner()) = seen;
    }
}

/// The controller lease as last read, held by another broker.
#[derive(Debug, Clone, Copy)]
pub(super) struct LeaseSeen {
    holder: i32,
    /// When it can expire at the earliest, by this process's clock.
    until: std::time::Instant,
    /// The cluster-change count when it was read.
    changes: u64,
}

/// Keeps a connection that LISTENs on the cluster channel, reconnecting when it drops, and
/// moves `changes` on every notification and every (re)connection (changes may have been
/// missed while it was down). Ends when the store is gone.
async fn listen(config: Config, changes: Arc<watch::Sender<u64>>) {
    let bump = |c: &watch::Sender<u64>| c.send_modify(|n| *n = n.wrapping_add(1));
    let mut delays = LISTEN_RETRY.delays();
    while Arc::strong_count(&changes) > 1 {
        let (client, mut conn) = match super::open(&config).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "metadata store: cannot listen for cluster changes; retrying");
                delays.wait().await;
                continue;
            }
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let driver = tokio::spawn(async move {
            while let Some(m) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                match m {
                    Ok(AsyncMessage::Notification(_)) => {
                        if tx.send(()).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "metadata store: listening connection failed");
                        return;
                    }
                }
            }
        });
        if let Err(e) = client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
            tracing::warn!(error = %e, "metadata store: LISTEN failed; retrying");
            driver.abort();
            delays.wait().await;
            continue;
        }
        delays = LISTEN_RETRY.delays();
        bump(&changes);
        loop {
            tokio::select! {
                m = rx.recv() => match m {
                    Some(()) => bump(&changes),
                    None => break,
                },
                _ = tokio::time::sleep(Duration::from_secs(1)) => {
                    if Arc::strong_count(&changes) == 1 {
                        driver.abort();
                        return;
                    }
                }
            }
        }
    }
}

/// Claims `wal` for `node_id` at `incarnation` (in the registration's transaction), or says why
/// not; see [`Coordination::register_broker`].
async fn claim_wal(
    c: &impl GenericClient,
    node_id: i32,
    incarnation: i64,
    wal: &WalRegistration,
) -> Result<()> {
    let rows = c
        .query(
            "SELECT wal_id, state, recoverer, path FROM wals
             WHERE node_id = $1 OR wal_id = $2 ORDER BY wal_id FOR UPDATE",
            &[&node_id, &wal.wal_id],
        )
        .await
        .map_err(backend("reading WALs"))?;
    let rows = rows
        .iter()
        .map(|r| (r.get(0), r.get::<_, String>(1), r.get(2), r.get(3)))
        .collect();
    check_wal_claim(node_id, &wal.wal_id, rows)?;
    // The node's sealed WALs are done with: it starts on this one.
    c.execute(
        "DELETE FROM wals WHERE node_id = $1 AND wal_id != $2 AND state = 'sealed'",
        &[&node_id, &wal.wal_id],
    )
    .await
    .map_err(backend("forgetting sealed WALs"))?;
    c.execute(
        &format!(
            "INSERT INTO wals (wal_id, node_id, incarnation, path, state, recoverer, tried, since_ms)
             VALUES ($1, $2, $3, $4, 'open', NULL, '', {NOW_MS})
             ON CONFLICT (wal_id) DO UPDATE SET node_id = $2, incarnation = $3, path = $4,
               state = 'open', recoverer = NULL, tried = '', since_ms = {NOW_MS}"
        ),
        &[&wal.wal_id, &node_id, &incarnation, &wal.path],
    )
    .await
    .map_err(backend("claiming the WAL"))?;
    Ok(())
}

fn wal_row(r: &tokio_postgres::Row) -> WalInfo {
    WalInfo {
        wal_id: r.get(0),
        node_id: r.get(1),
        incarnation: r.get::<_, i64>(2) as u64,
        path: r.get(3),
        state: wal_state(r.get(4), r.get(5)),
        tried: tried_list(r.get(6)),
        since_ms: r.get(7),
    }
}

/// A row of the brokers query: the broker, and one of its listeners if it has any.
fn broker_row(r: &tokio_postgres::Row) -> (BrokerInfo, Option<ListenerEndpoint>) {
    let broker = BrokerInfo {
        node_id: r.get(0),
        incarnation: r.get::<_, i64>(1) as u64,
        zone: r.get(2),
        host: r.get(3),
        port: r.get(4),
        listeners: Vec::new(),
        internal_addr: r.get(5),
        state: BrokerState::parse(r.get(6)),
        alive: r.get(7),
    };
    let listener = r.get::<_, Option<String>>(8).map(|name| ListenerEndpoint {
        name,
        host: r.get(9),
        port: r.get(10),
    });
    (broker, listener)
}

/// Replaces `node_id`'s listeners with `listeners`, keeping their order. Only a registration
/// writes them, under its lock of the brokers table.
async fn replace_listeners(
    c: &impl GenericClient,
    node_id: i32,
    listeners: &[ListenerEndpoint],
) -> Result<()> {
    c.execute(
        "DELETE FROM broker_listeners WHERE node_id = $1",
        &[&node_id],
    )
    .await
    .map_err(backend("replacing a broker's listeners"))?;
    for (ordinal, l) in (0i32..).zip(listeners) {
        c.execute(
            "INSERT INTO broker_listeners (node_id, name, ordinal, host, port)
             VALUES ($1, $2, $3, $4, $5)",
            &[&node_id, &l.name, &ordinal, &l.host, &l.port],
        )
        .await
        .map_err(backend("replacing a broker's listeners"))?;
    }
    Ok(())
}

/// Frees the partitions of fenced brokers that have no WAL left to recover (brokers without a
/// WAL file, `wal.kind = "object"`): nothing of theirs can be acknowledged and not committed, so
/// their partitions go to live brokers at once, in the transaction that fences them.
const RELEASE_WITHOUT_WAL: &str = "UPDATE assignments SET leader = NULL, target = NULL
     WHERE leader = ANY($1)
       AND NOT EXISTS (SELECT 1 FROM wals w WHERE w.node_id = assignments.leader
                                             AND w.state != 'sealed')";

#[async_trait::async_trait]
impl Coordination for PostgresMetaStore {
    async fn register_broker(
        &self,
        reg: &BrokerRegistration,
        session: Duration,
    ) -> Result<BrokerInfo> {
        let info = in_tx!(self, |tx| {
            // One registration at a time: node id allocation reads the maximum.
            tx.batch_execute("LOCK TABLE brokers IN SHARE ROW EXCLUSIVE MODE")
                .await
                .map_err(backend("locking brokers"))?;
            let node_id: i32 = match reg.node_id {
                Some(n) => n,
                None => tx
                    .query_one(
                        "SELECT COALESCE(MAX(node_id), 1000) + 1 FROM brokers WHERE node_id > 1000",
                        &[],
                    )
                    .await
                    .map_err(backend("allocating a node id"))?
                    .get(0),
            };
            let row = tx
                .query_one(
                    &format!(
                        "INSERT INTO brokers
                         (node_id, incarnation, zone, host, port, internal_addr, state, expires_ms)
                         VALUES ($1, 1, $2, $3, $4, $5, 'running', {NOW_MS} + $6)
                         ON CONFLICT (node_id) DO UPDATE SET
                           incarnation = brokers.incarnation + 1, zone = $2, host = $3,
                           port = $4, internal_addr = $5, state = 'running',
                           expires_ms = {NOW_MS} + $6
                         RETURNING incarnation"
                    ),
                    &[
                        &node_id,
                        &reg.zone,
                        &reg.host,
                        &reg.port,
                        &reg.internal_addr,
                        &ms(session),
                    ],
                )
                .await
                .map_err(backend("registering a broker"))?;
            replace_listeners(&tx, node_id, &reg.listeners).await?;
            if let Some(wal) = &reg.wal {
                claim_wal(&tx, node_id, row.get::<_, i64>(0), wal).await?;
            }
            notify(&tx).await?;
            Ok(BrokerInfo {
                node_id,
                incarnation: row.get::<_, i64>(0) as u64,
                zone: reg.zone.clone(),
                host: reg.host.clone(),
                port: reg.port,
                listeners: reg.listeners.clone(),
                internal_addr: reg.internal_addr.clone(),
                state: BrokerState::Running,
                alive: true,
            })
        })?;
        self.changed();
        Ok(info)
    }

    async fn renew_session(&self, node_id: i32, incarnation: u64, session: Duration) -> Result<()> {
        let c = self.client().await?;
        let n = c
            .execute(
                &format!(
                    "UPDATE brokers SET expires_ms = {NOW_MS} + $3
                     WHERE node_id = $1 AND incarnation = $2 AND state != 'fenced'"
                ),
                &[&node_id, &i(incarnation), &ms(session)],
            )
            .await
            .map_err(backend("renewing a session"))?;
        if n == 0 {
            return Err(MetaError::BrokerFenced {
                node_id,
                incarnation,
            });
        }
        Ok(())
    }

    async fn set_broker_state(
        &self,
        node_id: i32,
        incarnation: u64,
        state: BrokerState,
    ) -> Result<()> {
        in_tx!(self, |tx| {
            check_incarnation(&tx, node_id, incarnation).await?;
            tx.execute(
                "UPDATE brokers SET state = $2 WHERE node_id = $1",
                &[&node_id, &state.as_str()],
            )
            .await
            .map_err(backend("changing a broker's state"))?;
            notify(&tx).await
        })?;
        self.changed();
        Ok(())
    }

    async fn brokers(&self) -> Result<Vec<BrokerInfo>> {
        let c = self.client().await?;
        // One statement, one snapshot: a registration committing meanwhile cannot pair a
        // broker's row with another incarnation's listeners.
        let rows = c
            .query(
                &format!(
                    "SELECT b.node_id, b.incarnation, b.zone, b.host, b.port, b.internal_addr,
                            b.state, b.expires_ms > {NOW_MS}, l.name, l.host, l.port
                     FROM brokers b LEFT JOIN broker_listeners l ON l.node_id = b.node_id
                     ORDER BY b.node_id, l.ordinal"
                ),
                &[],
            )
            .await
            .map_err(backend("listing brokers"))?;
        Ok(group_listeners(rows.iter().map(broker_row)))
    }

    async fn acquire_controller(
        &self,
        node_id: i32,
        ttl: Duration,
    ) -> Result<Option<ControllerLease>> {
        // Every broker bids at each controller round: those that find the lease taken must cost
        // (almost) nothing. Known to be held elsewhere: no statement; otherwise one read, and the
        // transaction only to take or renew it.
        if self.lease_held_elsewhere(node_id) {
            return Ok(None);
        }
        let changes = *self.changes.borrow();
        let sent = std::time::Instant::now();
        // One statement renews the lease if this broker holds it, or else reads it.
        let row = self
            .client()
            .await?
            .query_opt(
                &format!(
                    "WITH renewed AS (
                         UPDATE controller SET expires_ms = {NOW_MS} + $2
                         WHERE id = 1 AND node_id = $1 AND epoch > 0 AND expires_ms > {NOW_MS}
                         RETURNING node_id, epoch, expires_ms - {NOW_MS})
                     SELECT * FROM renewed
                     UNION ALL
                     SELECT node_id, epoch, expires_ms - {NOW_MS} FROM controller
                     WHERE id = 1 AND NOT EXISTS (SELECT 1 FROM renewed)"
                ),
                &[&node_id, &ms(ttl)],
            )
            .await
            .map_err(backend("renewing or reading the controller lease"))?;
        if let Some(r) = row {
            let (holder, epoch, left_ms): (i32, i64, i64) = (r.get(0), r.get(1), r.get(2));
            if holder == node_id && epoch > 0 && left_ms > 0 {
                self.remember_lease(None);
                return Ok(Some(ControllerLease {
                    node_id,
                    epoch: epoch as u64,
                }));
            }
            if holder != node_id && epoch > 0 && left_ms > 0 {
                self.remember_lease(Some(LeaseSeen {
                    holder,
                    until: sent + Duration::from_millis(left_ms as u64),
                    changes,
                }));
                return Ok(None);
            }
        }
        self.remember_lease(None);
        let (lease, changed) = in_tx!(self, |tx| {
            // The first controller inserts the row; later ones find it and lock it.
            tx.execute(
                "INSERT INTO controller (id, node_id, epoch, expires_ms) VALUES (1, $1, 0, 0)
                 ON CONFLICT (id) DO NOTHING",
                &[&node_id],
            )
            .await
            .map_err(backend("creating the controller lease"))?;
            let (holder, epoch, valid) =
                locked_lease(&tx).await?.ok_or_else(|| MetaError::Backend {
                    context: "reading the controller lease",
                    source: "the row inserted just before is missing".into(),
                })?;
            let (epoch, changed) = if holder == node_id && epoch > 0 && valid {
                (epoch, false)
            } else if valid && epoch > 0 {
                return Ok((None, false));
            } else {
                (epoch + 1, true)
            };
            tx.execute(
                &format!(
                    "UPDATE controller SET node_id = $1, epoch = $2, expires_ms = {NOW_MS} + $3
                     WHERE id = 1"
                ),
                &[&node_id, &epoch, &ms(ttl)],
            )
            .await
            .map_err(backend("taking the controller lease"))?;
            if changed {
                notify(&tx).await?;
            }
            Ok((
                Some(ControllerLease {
                    node_id,
                    epoch: epoch as u64,
                }),
                changed,
            ))
        })?;
        if changed {
            self.changed();
        }
        Ok(lease)
    }

    async fn controller(&self) -> Result<Option<ControllerLease>> {
        let c = self.client().await?;
        let row = c
            .query_opt(
                &format!(
                    "SELECT node_id, epoch FROM controller
                     WHERE id = 1 AND epoch > 0 AND expires_ms > {NOW_MS}"
                ),
                &[],
            )
            .await
            .map_err(backend("reading the controller lease"))?;
        Ok(row.map(|r| ControllerLease {
            node_id: r.get(0),
            epoch: r.get::<_, i64>(1) as u64,
        }))
    }

    async fn resign_controller(&self, lease: ControllerLease) -> Result<()> {
        in_tx!(self, |tx| {
            tx.execute(
                "UPDATE controller SET expires_ms = 0 WHERE id = 1 AND node_id = $1 AND epoch = $2",
                &[&lease.node_id, &i(lease.epoch)],
            )
            .await
            .map_err(backend("resigning the controller lease"))?;
            notify(&tx).await
        })?;
        self.changed();
        Ok(())
    }

    async fn fence_expired_brokers(
        &self,
        lease: ControllerLease,
        margin: Duration,
    ) -> Result<Vec<i32>> {
        // Called at every controller round: one read finds whether any session has lapsed,
        // and only then does the transaction fence.
        let due = self
            .client()
            .await?
            .query_one(
                &format!(
                    "SELECT EXISTS (SELECT 1 FROM brokers
                     WHERE expires_ms + $1 <= {NOW_MS} AND state != 'fenced')"
                ),
                &[&ms(margin)],
            )
            .await
            .map_err(backend("looking for lapsed sessions"))?
            .get::<_, bool>(0);
        if !due {
            return Ok(Vec::new());
        }
        let fenced: Vec<i32> = in_tx!(self, |tx| {
            check_lease(&tx, lease).await?;
            let rows = tx
                .query(
                    &format!(
                        "UPDATE brokers SET state = 'fenced'
                         WHERE expires_ms + $1 <= {NOW_MS} AND state != 'fenced'
                         RETURNING node_id"
                    ),
                    &[&ms(margin)],
                )
                .await
                .map_err(backend("fencing brokers"))?;
            let mut ids: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
            ids.sort_unstable();
            if !ids.is_empty() {
                tx.execute(RELEASE_WITHOUT_WAL, &[&ids])
                    .await
                    .map_err(backend("releasing the partitions of brokers without a WAL"))?;
                notify(&tx).await?;
            }
            Ok(ids)
        })?;
        if !fenced.is_empty() {
            self.changed();
        }
        Ok(fenced)
    }

    async fn assignments(&self) -> Result<Vec<Assignment>> {
        let c = self.client().await?;
        let rows = c
            .query(
                "SELECT p.topic, p.partition, p.stream_id, a.leader, a.target,
                        COALESCE(s.epoch, 0)
                 FROM partitions p
                 LEFT JOIN assignments a ON a.stream_id = p.stream_id
                 LEFT JOIN streams s ON s.stream_id = p.stream_id
                 ORDER BY p.topic, p.partition",
                &[],
            )
            .await
            .map_err(backend("listing assignments"))?;
        Ok(rows
            .iter()
            .map(|r| Assignment {
                topic: r.get(0),
                partition: r.get::<_, i32>(1) as u32,
                stream_id: r.get::<_, i64>(2) as u64,
                leader: r.get(3),
                target: r.get(4),
                epoch: r.get::<_, i64>(5) as u64,
            })
            .collect())
    }

    async fn change_assignments(
        &self,
        lease: ControllerLease,
        changes: &[AssignmentChange],
    ) -> Result<()> {
        let mut sorted = changes.to_vec();
        // Assignment rows are locked in stream id order, as every other writer does.
        sorted.sort_by_key(|c| match *c {
            AssignmentChange::Place { stream_id, .. }
            | AssignmentChange::Move { stream_id, .. } => stream_id,
        });
        in_tx!(self, |tx| {
            check_lease(&tx, lease).await?;
            for ch in &sorted {
                match *ch {
                    AssignmentChange::Place { stream_id, leader } => {
                        tx.execute(
                            "INSERT INTO assignments (stream_id, leader, target) VALUES ($1, $2, NULL)
                             ON CONFLICT (stream_id) DO UPDATE SET leader = $2
                             WHERE assignments.leader IS NULL",
                            &[&i(stream_id), &leader],
                        )
                        .await
                        .map_err(backend("placing a partition"))?;
                    }
                    AssignmentChange::Move { stream_id, target } => {
                        tx.execute(
                            "UPDATE assignments SET target = $2
                             WHERE stream_id = $1 AND leader IS NOT NULL",
                            &[&i(stream_id), &target],
                        )
                        .await
                        .map_err(backend("moving a partition"))?;
                    }
                }
            }
            notify(&tx).await
        })?;
        self.changed();
        Ok(())
    }

    async fn request_move(&self, stream_id: u64, target: Option<i32>) -> Result<bool> {
        let n = in_tx!(self, |tx| {
            let n = tx
                .execute(
                    "UPDATE assignments SET target = $2 WHERE stream_id = $1 AND leader IS NOT NULL",
                    &[&i(stream_id), &target],
                )
                .await
                .map_err(backend("requesting a move"))?;
            if n > 0 {
                notify(&tx).await?;
            }
            Ok(n)
        })?;
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
        let to = in_tx!(self, |tx| {
            check_incarnation(&tx, node_id, incarnation).await?;
            let row = tx
                .query_opt(
                    "UPDATE assignments SET leader = target, target = NULL
                     WHERE stream_id = $1 AND leader = $2 AND target IS NOT NULL
                     RETURNING leader",
                    &[&i(stream_id), &node_id],
                )
                .await
                .map_err(backend("handing a partition over"))?;
            let to: Option<i32> = row.map(|r| r.get(0));
            if to.is_some() {
                notify(&tx).await?;
            }
            Ok(to)
        })?;
        if to.is_some() {
            self.changed();
        }
        Ok(to)
    }

    async fn notify_cluster(&self) -> Result<()> {
        let c = self.client().await?;
        notify(&*c).await?;
        self.changed();
        Ok(())
    }

    async fn wals(&self) -> Result<Vec<WalInfo>> {
        let c = self.client().await?;
        let rows = c
            .query(
                &format!(
                    "SELECT wal_id, node_id, incarnation, path, state, recoverer, tried,
                            {NOW_MS} - since_ms
                     FROM wals WHERE state != 'sealed' OR since_ms > {NOW_MS} - 3600000
                     ORDER BY wal_id"
                ),
                &[],
            )
            .await
            .map_err(backend("listing WALs"))?;
        Ok(rows.iter().map(wal_row).collect())
    }

    async fn assign_wal_recovery(
        &self,
        lease: ControllerLease,
        wal_id: &str,
        recoverer: i32,
        stale: Option<i32>,
    ) -> Result<bool> {
        let n = in_tx!(self, |tx| {
            check_lease(&tx, lease).await?;
            let n = tx
                .execute(
                    &format!(
                        "UPDATE wals SET state = 'recovering', recoverer = $2, since_ms = {NOW_MS}
                         WHERE wal_id = $1 AND ((state = 'open' AND $3::INTEGER IS NULL)
                               OR (state = 'recovering' AND recoverer = $3))
                           AND NOT EXISTS (SELECT 1 FROM brokers b
                                WHERE b.node_id = wals.node_id
                                  AND b.incarnation = wals.incarnation
                                  AND b.state != 'fenced')"
                    ),
                    &[&wal_id, &recoverer, &stale],
                )
                .await
                .map_err(backend("assigning a WAL recovery"))?;
            if n > 0 {
                notify(&tx).await?;
            }
            Ok(n)
        })?;
        if n > 0 {
            self.changed();
        }
        Ok(n > 0)
    }

    async fn wal_unreachable(&self, wal_id: &str, node_id: i32, incarnation: u64) -> Result<()> {
        in_tx!(self, |tx| {
            check_incarnation(&tx, node_id, incarnation).await?;
            let n = tx
                .execute(
                    &format!(
                        "UPDATE wals SET state = 'open', recoverer = NULL,
                           tried = CASE WHEN tried = '' THEN $2::TEXT ELSE tried || ',' || $2::TEXT END,
                           since_ms = {NOW_MS}
                         WHERE wal_id = $1 AND state = 'recovering' AND recoverer = $3"
                    ),
                    &[&wal_id, &node_id.to_string(), &node_id],
                )
                .await
                .map_err(backend("giving a WAL recovery back"))?;
            if n == 0 {
                return Err(MetaError::NotRecovering(wal_id.to_string()));
            }
            notify(&tx).await
        })?;
        self.changed();
        Ok(())
    }

    async fn retry_wal(&self, lease: ControllerLease, wal_id: &str) -> Result<()> {
        in_tx!(self, |tx| {
            check_lease(&tx, lease).await?;
            tx.execute(
                &format!(
                    "UPDATE wals SET tried = '', since_ms = {NOW_MS}
                     WHERE wal_id = $1 AND state = 'open'"
                ),
                &[&wal_id],
            )
            .await
            .map_err(backend("retrying a WAL"))?;
            notify(&tx).await
        })?;
        self.changed();
        Ok(())
    }

    async fn finish_wal_recovery(
        &self,
        wal_id: &str,
        node_id: i32,
        incarnation: u64,
    ) -> Result<Vec<u64>> {
        let streams = in_tx!(self, |tx| {
            check_incarnation(&tx, node_id, incarnation).await?;
            let owner: Option<i32> = tx
                .query_opt(
                    &format!(
                        "UPDATE wals SET state = 'sealed', recoverer = NULL, since_ms = {NOW_MS}
                         WHERE wal_id = $1 AND state = 'recovering' AND recoverer = $2
                         RETURNING node_id"
                    ),
                    &[&wal_id, &node_id],
                )
                .await
                .map_err(backend("sealing a WAL"))?
                .map(|r| r.get(0));
            let Some(owner) = owner else {
                return Err(MetaError::NotRecovering(wal_id.to_string()));
            };
            let rows = tx
                .query(
                    "UPDATE assignments SET leader = NULL, target = NULL
                     WHERE leader = $1 RETURNING stream_id",
                    &[&owner],
                )
                .await
                .map_err(backend("releasing a dead broker's partitions"))?;
            let mut streams: Vec<u64> = rows.iter().map(|r| r.get::<_, i64>(0) as u64).collect();
            streams.sort_unstable();
            notify(&tx).await?;
            Ok(streams)
        })?;
        self.changed();
        Ok(streams)
    }

    async fn report_load(&self, incarnation: u64, load: BrokerLoad) -> Result<()> {
        let partitions = load.encode_partitions();
        in_tx!(self, |tx| {
            check_incarnation(&tx, load.node_id, incarnation).await?;
            tx.execute(
                &format!(
                    "INSERT INTO broker_loads (node_id, at_ms, cpu, partitions)
                     VALUES ($1, {NOW_MS}, $2, $3)
                     ON CONFLICT (node_id) DO UPDATE
                     SET at_ms = EXCLUDED.at_ms, cpu = EXCLUDED.cpu, partitions = EXCLUDED.partitions"
                ),
                &[&load.node_id, &load.cpu, &partitions],
            )
            .await
            .map_err(backend("reporting a load"))?;
            Ok(())
        })
    }

    async fn loads(&self) -> Result<Vec<BrokerLoad>> {
        let c = self.client().await?;
        let rows = c
            .query(
                &format!(
                    "SELECT node_id, {NOW_MS} - at_ms, cpu, partitions FROM broker_loads
                     ORDER BY node_id"
                ),
                &[],
            )
            .await
            .map_err(backend("reading loads"))?;
        Ok(rows
            .iter()
            .map(|r| BrokerLoad {
                node_id: r.get(0),
                age_ms: r.get(1),
                cpu: r.get(2),
                partitions: BrokerLoad::decode_partitions(r.get(3)),
            })
            .collect())
    }

    fn cluster_changes(&self) -> watch::Receiver<u64> {
        let rx = self.changes.subscribe();
        self.listening.call_once(|| {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(listen(self.config.clone(), Arc::clone(&self.changes)));
            }
        });
        rx
    }
}
