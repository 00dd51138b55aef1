//! Failover: a fenced broker's WAL recovered by a live peer, and the session lease that makes it
//! safe.
//!
//! The records a broker acknowledged and has not yet uploaded are in its WAL and nowhere else.
//! When the broker dies, its WAL (on shared storage: NFS, EFS, a multi-attach or regional disk)
//! is opened by a peer, which seals it, uploads and commits what it holds, and releases the
//! dead broker's partitions for the controller to place on live brokers. The steps:
//!
//! 1. The broker's session expires; the controller waits a clock-drift margin more and fences
//!    it (`Coordination::fence_expired_brokers`). By then the broker has stopped acknowledging
//!    by its own clock ([`SessionLease`]).
//! 2. The controller assigns the recovery of the broker's WAL to a live broker
//!    ([`plan_recoveries`]): the same zone first, then the least loaded.
//! 3. The recoverer ([`WalRecoverer`]) seals the WAL, reads it, raises the epoch of every stream
//!    it holds unuploaded data of (so a late commit by the old leader is refused), and commits
//!    that data; or reports that it cannot open the WAL, and the controller tries another
//!    broker, then waits and tries them all again.
//! 4. `Coordination::finish_wal_recovery` marks the WAL sealed and unplaces the dead broker's
//!    partitions in one transaction; the controller places them at once and their new leaders
//!    open them at the next epoch, with the recovered records and the producer state they carry.
//!
//! The argument for why nothing acknowledged is lost and no two leaders acknowledge at once is in
//! `docs/architecture.md` ("Failover").

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use weir_meta::{BrokerState, MetaError, WalInfo, WalState};
use weir_metrics::{Counter, Gauge, Registry};

use crate::{Cluster, ClusterView};

/// Nanoseconds of `CLOCK_BOOTTIME`: monotonic, and unlike `CLOCK_MONOTONIC` it also counts time
/// the machine was suspended, so a broker whose VM was frozen sees its session as expired when
/// it wakes up.
pub fn boottime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the struct it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        // CLOCK_BOOTTIME exists on every Linux since 2.6.39; the monotonic clock is the next best.
        // SAFETY: as above.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Until when this broker may acknowledge writes: the moment it *sent* its last successful
/// session renewal plus the session timeout, by its own clock. The store set the session's
/// expiry to the moment it *received* that renewal plus the same timeout, by the store's clock,
/// and the controller fences only a drift margin after that expiry: so, as long as this broker's
/// clock runs no slower than the store's by more than margin / timeout, it stops acknowledging
/// before the controller can hand its partitions and its WAL to a peer.
#[derive(Debug)]
pub struct SessionLease {
    /// Off for a broker no peer can replace (a single node on SQLite).
    enforced: bool,
    session_ns: u64,
    valid_until: AtomicU64,
    /// A peer recovered this broker's WAL: it acknowledges nothing more, ever.
    replaced: AtomicBool,
}

impl SessionLease {
    pub fn new(session: Duration, enforced: bool) -> SessionLease {
        SessionLease {
            enforced,
            session_ns: u64::try_from(session.as_nanos()).unwrap_or(u64::MAX),
            valid_until: AtomicU64::new(0),
            replaced: AtomicBool::new(false),
        }
    }

    /// A renewal (or registration) sent at `sent_ns` ([`boottime_ns`]) succeeded.
    pub fn renewed(&self, sent_ns: u64) {
        self.valid_until
            .fetch_max(sent_ns.saturating_add(self.session_ns), Ordering::SeqCst);
    }

    /// This broker was replaced: nothing it writes may be acknowledged any more.
    pub fn revoke(&self) {
        self.replaced.store(true, Ordering::SeqCst);
    }

    pub fn is_enforced(&self) -> bool {
        self.enforced
    }

    /// Whether writes made durable now may be acknowledged, and if not, why.
    pub fn check(&self) -> Result<(), String> {
        if !self.enforced {
            return Ok(());
        }
        if self.replaced.load(Ordering::SeqCst) {
            return Err("this broker was replaced: a peer recovered its WAL".into());
        }
        let now = boottime_ns();
        let until = self.valid_until.load(Ordering::SeqCst);
        if now < until {
            Ok(())
        } else {
            Err(format!(
                "this broker's cluster session lapsed {} ms ago (not renewed in time); it acknowledges nothing until it renews",
                (now - until) / 1_000_000
            ))
        }
    }

    pub fn is_valid(&self) -> bool {
        self.check().is_ok()
    }
}

/// What the failover counts, for `/metrics`.
#[derive(Debug, Default)]
pub struct FailoverMeters {
    /// WALs this broker recovered for dead peers.
    pub wal_recoveries: Counter,
    /// Recoveries that failed part-way (retried).
    pub wal_recovery_failures: Counter,
    /// Recoveries this broker gave back because it could not open the WAL.
    pub wals_unreachable: Counter,
    /// Milliseconds the last recovery here took (seal, read, upload, commit).
    pub last_recovery_ms: Gauge,
    /// Set by the controller: partitions whose leader is fenced and whose WAL no live broker can
    /// open; they wait for that broker to come back.
    pub partitions_waiting_for_wal: Gauge,
    /// Set by the controller: WALs of fenced brokers not yet recovered.
    pub wals_awaiting_recovery: Gauge,
}

impl FailoverMeters {
    /// Declares the meters of WAL recovery and the controller's failover gauges.
    pub fn register(&self, r: &mut Registry) {
        r.counter(
            "wal_recoveries",
            "WALs of fenced brokers this broker recovered.",
            &self.wal_recoveries,
        );
        r.counter(
            "wal_recovery_failures",
            "WAL recoveries that failed part-way here (retried).",
            &self.wal_recovery_failures,
        );
        r.counter(
            "wal_recoveries_unreachable",
            "WAL recoveries given back because this broker could not open the WAL.",
            &self.wals_unreachable,
        );
        r.gauge(
            "wal_last_recovery_ms",
            "Milliseconds the last WAL recovery here took (seal, read, upload, commit).",
            &self.last_recovery_ms,
        );
        r.gauge(
            "partitions_waiting_for_wal",
            "Controller: partitions of fenced brokers whose WAL no live broker can open; they wait for the broker to come back.",
            &self.partitions_waiting_for_wal,
        );
        r.gauge(
            "wals_awaiting_recovery",
            "Controller: WALs of fenced brokers not yet recovered.",
            &self.wals_awaiting_recovery,
        );
    }
}

/// A controller decision about a WAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalAction {
    /// Recover it on broker `to` (replacing `stale`, a recoverer that is no longer live).
    Assign {
        wal_id: String,
        to: i32,
        stale: Option<i32>,
    },
    /// Every live broker tried and failed a while ago: let them all try again.
    Retry { wal_id: String },
}

/// A fenced broker's WAL that no live broker can open: its partitions wait for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub wal_id: String,
    pub owner: i32,
    pub path: String,
    pub partitions: usize,
    pub tried: Vec<i32>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecoveryPlan {
    pub actions: Vec<WalAction>,
    pub waiting: Vec<Waiting>,
    /// WALs of fenced brokers not yet sealed (waiting or under way).
    pub pending: usize,
}

/// The controller's failover decisions, as a pure function of the cluster's state.
///
/// A WAL needs recovery once its owner is fenced (or registered again under another
/// incarnation without claiming it). It goes to a live broker that has not failed to open it:
/// in the owner's zone first (a zonal disk is more likely reachable there), then the broker
/// recovering the fewest WALs, then the one leading the fewest partitions. A recovery whose
/// recoverer is no longer live goes to another broker. When every live broker has tried, the
/// WAL waits, and after `retry_after` they all try again.
pub fn plan_recoveries(view: &ClusterView, retry_after: Duration) -> RecoveryPlan {
    let mut plan = RecoveryPlan::default();
    let live: Vec<_> = view.live_brokers().collect();
    let mut recovering: std::collections::HashMap<i32, usize> = view
        .wals
        .iter()
        .filter_map(|w| match w.state {
            WalState::Recovering { node_id } => Some((node_id, 1)),
            _ => None,
        })
        .fold(Default::default(), |mut m, (n, c)| {
            *m.entry(n).or_insert(0) += c;
            m
        });
    let led = |n: i32| {
        view.assignments
            .iter()
            .filter(|a| a.leader == Some(n))
            .count()
    };
    for w in &view.wals {
        if w.state == WalState::Sealed {
            continue;
        }
        let owner = view.broker(w.node_id);
        let dead =
            owner.is_none_or(|b| b.state == BrokerState::Fenced || b.incarnation != w.incarnation);
        if !dead {
            continue;
        }
        plan.pending += 1;
        let owner_zone = owner.map(|b| b.zone.as_str());
        let pick = |exclude: &[i32], recovering: &std::collections::HashMap<i32, usize>| {
            live.iter()
                .filter(|b| b.node_id != w.node_id && !exclude.contains(&b.node_id))
                .min_by_key(|b| {
                    (
                        Some(b.zone.as_str()) != owner_zone,
                        recovering.get(&b.node_id).copied().unwrap_or(0),
                        led(b.node_id),
                        b.node_id,
                    )
                })
                .map(|b| b.node_id)
        };
        match w.state {
            WalState::Recovering { node_id } if live.iter().any(|b| b.node_id == node_id) => {}
            WalState::Recovering { node_id } => {
                if let Some(to) = pick(&w.tried, &recovering) {
                    *recovering.entry(to).or_insert(0) += 1;
                    plan.actions.push(WalAction::Assign {
                        wal_id: w.wal_id.clone(),
                        to,
                        stale: Some(node_id),
                    });
                }
            }
            _ => match pick(&w.tried, &recovering) {
                Some(to) => {
                    *recovering.entry(to).or_insert(0) += 1;
                    plan.actions.push(WalAction::Assign {
                        wal_id: w.wal_id.clone(),
                        to,
                        stale: None,
                    });
                }
                None => {
                    if !w.tried.is_empty()
                        && Duration::from_millis(w.since_ms.max(0) as u64) >= retry_after
                    {
                        plan.actions.push(WalAction::Retry {
                            wal_id: w.wal_id.clone(),
                        });
                    }
                    plan.waiting.push(Waiting {
                        wal_id: w.wal_id.clone(),
                        owner: w.node_id,
                        path: w.path.clone(),
                        partitions: led(w.node_id),
                        tried: w.tried.clone(),
                    });
                }
            },
        }
    }
    plan
}

/// What a recovery found and committed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveredWal {
    /// Records the WAL held from its trim point.
    pub records: usize,
    /// Batches uploaded and committed (the rest were in object storage already).
    pub uploaded: usize,
    /// Streams whose epoch was raised to commit them.
    pub streams: usize,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum RecoveryError {
    /// This broker cannot open the WAL (not mounted here, or another WAL at that path): another
    /// broker may.
    #[error("cannot open the WAL here: {0}")]
    Unreachable(String),
    /// The recovery failed part-way (object store, metadata store): tried again.
    #[error("{0}")]
    Failed(String),
}

/// Recovers a dead broker's WAL: implemented by the partition layer over the storage engine.
#[async_trait::async_trait]
pub trait WalRecoverer: Send + Sync + 'static {
    /// Seals the WAL (as broker `node_id` at `incarnation`), reads it, and commits what it holds
    /// that object storage does not, under raised stream epochs.
    async fn recover(
        &self,
        wal: &WalInfo,
        node_id: i32,
        incarnation: u64,
    ) -> Result<RecoveredWal, RecoveryError>;
}

impl Cluster {
    /// Starts recovering the WALs the controller assigns to this broker.
    pub fn start_recovery(self: &Arc<Self>, recoverer: Arc<dyn WalRecoverer>) {
        let task = tokio::spawn(Arc::clone(self).recovery_loop(recoverer));
        self.tasks().push(("recovery", task));
    }

    async fn recovery_loop(self: Arc<Self>, recoverer: Arc<dyn WalRecoverer>) {
        let mut views = self.watch();
        let mut stop = self.stop.subscribe();
        let mut busy: HashSet<String> = HashSet::new();
        let mut running: JoinSet<String> = JoinSet::new();
        loop {
            let view = views.borrow_and_update().clone();
            for w in &view.wals {
                if w.state
                    != (WalState::Recovering {
                        node_id: self.node_id,
                    })
                    || !busy.insert(w.wal_id.clone())
                {
                    continue;
                }
                let cluster = Arc::clone(&self);
                let recoverer = Arc::clone(&recoverer);
                let w = w.clone();
                running.spawn(async move {
                    cluster.recover_one(&*recoverer, &w).await;
                    w.wal_id
                });
            }
            tokio::select! {
                r = views.changed() => {
                    if r.is_err() {
                        return;
                    }
                }
                Some(done) = running.join_next(), if !running.is_empty() => {
                    if let Ok(id) = done {
                        busy.remove(&id);
                    }
                }
                _ = stop.changed() => {
                    running.abort_all();
                    return;
                }
            }
        }
    }

    async fn recover_one(&self, recoverer: &dyn WalRecoverer, w: &WalInfo) {
        let started = tokio::time::Instant::now();
        let inc = self.incarnation();
        tracing::warn!(owner = w.node_id, wal = %w.wal_id, path = %w.path, "recovering the WAL of a fenced broker");
        match recoverer.recover(w, self.node_id, inc).await {
            Ok(found) => match self
                .meta
                .finish_wal_recovery(&w.wal_id, self.node_id, inc)
                .await
            {
                Ok(released) => {
                    let ms = started.elapsed().as_millis() as u64;
                    self.failover.wal_recoveries.inc();
                    self.failover.last_recovery_ms.store(ms, Ordering::Relaxed);
                    tracing::warn!(owner = w.node_id, wal = %w.wal_id, records = found.records, uploaded = found.uploaded, streams = found.streams, partitions = released.len(), ms, "recovered the WAL of a fenced broker; its partitions go to live brokers");
                    let _ = self.refresh().await;
                }
                Err(e) => {
                    self.failover.wal_recovery_failures.inc();
                    tracing::warn!(wal = %w.wal_id, error = %e, "finishing a WAL recovery failed");
                    if !matches!(e, MetaError::NotRecovering(_)) {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            },
            Err(RecoveryError::Unreachable(why)) => {
                self.failover.wals_unreachable.inc();
                tracing::warn!(owner = w.node_id, wal = %w.wal_id, path = %w.path, reason = %why, "cannot open a fenced broker's WAL here; giving its recovery back");
                if let Err(e) = self
                    .meta
                    .wal_unreachable(&w.wal_id, self.node_id, inc)
                    .await
                {
                    tracing::warn!(wal = %w.wal_id, error = %e, "giving a WAL recovery back failed");
                }
            }
            Err(RecoveryError::Failed(why)) => {
                self.failover.wal_recovery_failures.inc();
                tracing::error!(owner = w.node_id, wal = %w.wal_id, error = %why, "recovering a fenced broker's WAL failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }

    /// The controller's part: assign recoveries of fenced brokers' WALs, retry unreachable ones,
    /// and say which partitions wait. Returns whether it did anything (the recoveries under way
    /// announce their end; a retry comes due with time).
    pub(crate) async fn control_recoveries(
        &self,
        lease: weir_meta::ControllerLease,
        view: &ClusterView,
    ) -> Result<bool, MetaError> {
        let plan = plan_recoveries(view, self.config.wal_retry_interval);
        for a in &plan.actions {
            match a {
                WalAction::Assign { wal_id, to, stale } => {
                    if self
                        .meta
                        .assign_wal_recovery(lease, wal_id, *to, *stale)
                        .await?
                    {
                        tracing::warn!(wal = %wal_id, recoverer = to, replaces = ?stale, "controller: WAL of a fenced broker to be recovered");
                    }
                }
                WalAction::Retry { wal_id } => {
                    tracing::info!(wal = %wal_id, "controller: every broker failed to open this WAL a while ago; trying again");
                    self.meta.retry_wal(lease, wal_id).await?;
                }
            }
        }
        let waiting: u64 = plan.waiting.iter().map(|w| w.partitions as u64).sum();
        let before = self
            .failover
            .partitions_waiting_for_wal
            .swap(waiting, Ordering::Relaxed);
        self.failover
            .wals_awaiting_recovery
            .store(plan.pending as u64, Ordering::Relaxed);
        if waiting != before {
            for w in &plan.waiting {
                tracing::error!(owner = w.owner, wal = %w.wal_id, path = %w.path, partitions = w.partitions, tried = ?w.tried, "no live broker can open this fenced broker's WAL: its partitions wait for it to come back");
            }
        }
        Ok(!plan.actions.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tests::broker;
    use weir_meta::{Assignment, BrokerState::*};

    fn wal(id: &str, owner: i32, state: WalState, tried: Vec<i32>, since_ms: i64) -> WalInfo {
        WalInfo {
            wal_id: id.into(),
            node_id: owner,
            incarnation: 1,
            path: format!("/wal/{owner}"),
            state,
            tried,
            since_ms,
        }
    }

    fn led_by(leader: i32, stream_id: u64) -> Assignment {
        Assignment {
            topic: "t".into(),
            partition: stream_id as u32,
            stream_id,
            leader: Some(leader),
            target: None,
            epoch: 1,
        }
    }

    const RETRY: Duration = Duration::from_secs(5);

    #[test]
    fn a_fenced_brokers_wal_goes_to_a_live_broker_in_its_zone_first() {
        let view = ClusterView::new(
            vec![
                broker(1, "a", Fenced, false),
                broker(2, "b", Running, true),
                broker(3, "a", Running, true),
                broker(4, "a", Running, false), // in its session margin: not live
            ],
            None,
            vec![led_by(1, 1), led_by(3, 2)],
        )
        .with_wals(vec![
            wal("w1", 1, WalState::Open, vec![], 0),
            wal("w2", 2, WalState::Open, vec![], 0), // its owner is live: nothing to do
        ]);
        let plan = plan_recoveries(&view, RETRY);
        assert_eq!(
            plan.actions,
            vec![WalAction::Assign {
                wal_id: "w1".into(),
                to: 3,
                stale: None
            }]
        );
        assert_eq!(plan.pending, 1);
        assert!(plan.waiting.is_empty());
    }

    #[test]
    fn a_recovery_whose_recoverer_died_moves_and_one_under_way_stays() {
        let view = ClusterView::new(
            vec![
                broker(1, "a", Fenced, false),
                broker(2, "a", Fenced, false),
                broker(3, "a", Running, true),
                broker(4, "a", Fenced, false),
            ],
            None,
            vec![],
        )
        .with_wals(vec![
            wal("w1", 1, WalState::Recovering { node_id: 2 }, vec![], 0),
            wal("w4", 4, WalState::Recovering { node_id: 3 }, vec![], 0),
            wal("old", 1, WalState::Sealed, vec![], 0),
        ]);
        let plan = plan_recoveries(&view, RETRY);
        assert_eq!(
            plan.actions,
            vec![WalAction::Assign {
                wal_id: "w1".into(),
                to: 3,
                stale: Some(2)
            }]
        );
        assert_eq!(plan.pending, 2);
    }

    #[test]
    fn a_wal_no_live_broker_can_open_waits_then_is_retried() {
        let brokers = vec![
            broker(1, "a", Fenced, false),
            broker(2, "a", Running, true),
            broker(3, "b", Running, true),
        ];
        let assignments = vec![led_by(1, 1), led_by(1, 2), led_by(2, 3)];
        let tried = |since_ms| {
            ClusterView::new(brokers.clone(), None, assignments.clone()).with_wals(vec![wal(
                "w1",
                1,
                WalState::Open,
                vec![2, 3],
                since_ms,
            )])
        };
        let plan = plan_recoveries(&tried(1000), RETRY);
        assert!(plan.actions.is_empty());
        assert_eq!(
            plan.waiting,
            vec![Waiting {
                wal_id: "w1".into(),
                owner: 1,
                path: "/wal/1".into(),
                partitions: 2,
                tried: vec![2, 3]
            }]
        );
        let plan = plan_recoveries(&tried(6000), RETRY);
        assert_eq!(
            plan.actions,
            vec![WalAction::Retry {
                wal_id: "w1".into()
            }]
        );
        // One broker tried; the other has not: it gets it.
        let view = ClusterView::new(brokers.clone(), None, assignments.clone())
            .with_wals(vec![wal("w1", 1, WalState::Open, vec![2], 0)]);
        assert_eq!(
            plan_recoveries(&view, RETRY).actions,
            vec![WalAction::Assign {
                wal_id: "w1".into(),
                to: 3,
                stale: None
            }]
        );
    }

    #[test]
    fn the_session_lease_lapses_a_session_after_the_renewal_was_sent() {
        let lease = SessionLease::new(Duration::from_millis(50), true);
        assert!(lease.check().is_err(), "never renewed");
        lease.renewed(boottime_ns());
        assert!(lease.is_valid());
        std::thread::sleep(Duration::from_millis(60));
        let why = lease.check().expect_err("lapsed");
        assert!(why.contains("lapsed"), "{why}");
        lease.renewed(boottime_ns());
        assert!(lease.is_valid());
        lease.revoke();
        assert!(lease.check().expect_err("revoked").contains("replaced"));
        assert!(SessionLease::new(Duration::ZERO, false).is_valid());
    }
}
