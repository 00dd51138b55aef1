//! The controller: whichever broker holds the lease fences expired brokers, applies the
//! placement plan and, every `balancer.interval`, the balancer's moves (`balance.rs`). Every
//! broker runs this loop; all but one find the lease taken.
//!
//! A broker's session can only be judged by a controller that has been able to reach the
//! metadata store for a whole session timeout (failures shorter than a heartbeat interval do not
//! count): after the store was down (a PostgreSQL restart or fail-over), every session looks
//! expired although no broker failed, since none could renew. Fencing them all then would restart
//! every broker's membership at once; instead the controller waits a session timeout from the
//! moment the store answers again, which gives every live broker time to renew. A controller that
//! reached the store all along (also while another broker held the lease) fences at once, so a
//! controller change does not delay fencing.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_meta::{AssignmentChange, ControllerLease, MetaError};

use crate::balance::{self, Goal};
use crate::{placement, Cluster, ClusterView};

impl Cluster {
    pub(crate) async fn controller_loop(self: Arc<Self>) {
        let mut changes = self.meta.cluster_changes();
        let mut stop = self.stop.subscribe();
        let mut held: Option<ControllerLease> = None;
        // Since when the store has answered without a long break, and when it last did.
        let mut reachable_since: Option<Instant> = None;
        let mut last_ok: Option<Instant> = None;
        let mut reads = ViewReads::default();
        loop {
            let change = *changes.borrow_and_update();
            let may_fence =
                reachable_since.is_some_and(|t| t.elapsed() >= self.config.session_timeout);
            match self.control_once(may_fence, held, change, &mut reads).await {
                Ok(lease) => {
                    last_ok = Some(Instant::now());
                    reachable_since.get_or_insert_with(Instant::now);
                    if lease != held {
                        match lease {
                            Some(l) => {
                                tracing::info!(epoch = l.epoch, "this broker is now the controller")
                            }
                            None if held.is_some() => {
                                tracing::info!("this broker is no longer the controller")
                            }
                            None => {}
                        }
                        held = lease;
                    }
                }
                Err(e) => {
                    // A failure now and then (one transaction refused) leaves brokers able to
                    // renew; failing for longer than a heartbeat may not have.
                    if last_ok.is_none_or(|t| t.elapsed() > self.config.heartbeat_interval) {
                        reachable_since = None;
                    }
                    tracing::warn!(error = %e, "controller round failed");
                }
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep(self.config.controller_interval) => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// One round: take or renew the lease; if held, fence (when `may_fence`) and, when
    /// something may have changed (`reads`), read the cluster and place.
    async fn control_once(
        &self,
        may_fence: bool,
        held: Option<ControllerLease>,
        change: u64,
        reads: &mut ViewReads,
    ) -> Result<Option<ControllerLease>, MetaError> {
        let Some(lease) = self
            .meta
            .acquire_controller(self.node_id, self.config.controller_lease)
            .await?
        else {
            return Ok(None);
        };
        let fenced = if may_fence {
            self.meta
                .fence_expired_brokers(lease, self.config.clock_drift_margin)
                .await?
        } else {
            Vec::new()
        };
        if !fenced.is_empty() {
            tracing::warn!(brokers = ?fenced, "fenced brokers that missed their session; their WALs are to be recovered");
        }
        let balance_due = may_fence
            && self.config.balancer.enabled
            && self
                .balancing
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .due(self.config.balancer.interval);
        let new_lease = held != Some(lease);
        if !reads.due(change, new_lease || !fenced.is_empty() || balance_due) {
            return Ok(Some(lease));
        }
        let view = ClusterView::new(
            self.meta.brokers().await?,
            Some(lease),
            self.meta.assignments().await?,
        )
        .with_wals(self.meta.wals().await?)
        .with_draining(crate::draining(&*self.meta).await?);
        // Recoveries first: they release partitions, which placement then gives to live brokers
        // (in the next round, which their release announces).
        let recovering = may_fence && self.control_recoveries(lease, &view).await?;
        let changes = placement::plan(&view);
        if !changes.is_empty() {
            tracing::info!(changes = ?changes, "controller: assignment changes");
            self.meta.change_assignments(lease, &changes).await?;
        } else if may_fence && self.config.balancer.enabled {
            // Placement first; balancing only on a store reached long enough to trust the
            // brokers' reports (the same condition as fencing).
            self.balance_round(lease, &view).await?;
        }
        // Until recoveries and placement are done, every round reads again (a recovery's retry
        // is due by time, not announced); then only what is announced, or the safety read.
        reads.done(change, recovering || !changes.is_empty() || !may_fence);
        Ok(Some(lease))
    }

    /// One balancing round, when one is due: reads every broker's load, plans the moves and
    /// asks for them. Every decision is logged with its reason and counted by goal.
    async fn balance_round(
        &self,
        lease: ControllerLease,
        view: &ClusterView,
    ) -> Result<(), MetaError> {
        let config = &self.config.balancer;
        let cooling: HashSet<u64> = {
            let mut b = self.balancing.lock().unwrap_or_else(|e| e.into_inner());
            if b.last.is_some_and(|t| t.elapsed() < config.interval) {
                return Ok(());
            }
            b.last = Some(Instant::now());
            b.note_moves(view, Instant::now());
            b.moved.retain(|_, t| t.elapsed() < config.cooldown);
            b.moved.keys().copied().collect()
        };
        let mut loads = self.meta.loads().await?;
        // Partition loads remembered from earlier rounds, for partitions no report has a rate
        // for now (they just moved); forgotten after the stale bound.
        {
            let mut b = self.balancing.lock().unwrap_or_else(|e| e.into_inner());
            let stale = i64::try_from(config.stale_after.as_millis()).unwrap_or(i64::MAX);
            let now = Instant::now();
            for l in loads.iter().filter(|l| l.age_ms <= stale) {
                for p in &l.partitions {
                    b.known.insert(p.stream_id, (*p, now));
                }
            }
            b.known
                .retain(|_, (_, at)| at.elapsed() < config.stale_after);
            let remembered = b.known.values().map(|(p, _)| *p).collect();
            loads.insert(
                0,
                weir_meta::BrokerLoad {
                    node_id: balance::REMEMBERED,
                    age_ms: 0,
                    cpu: 0.0,
                    partitions: remembered,
                },
            );
        }
        let m = &self.balancer_meters;
        m.rounds.inc();
        let before = balance::imbalance(view, &loads, config);
        m.imbalance_in_permille
            .store((before.bytes_in * 1000.0) as u64, Ordering::Relaxed);
        m.imbalance_out_permille
            .store((before.bytes_out * 1000.0) as u64, Ordering::Relaxed);
        m.cluster_bytes_per_sec
            .store(before.total_bytes_per_sec as u64, Ordering::Relaxed);
        let capacity = config.capacity_bytes_per_sec * before.brokers as f64;
        m.cluster_load_permille.store(
            if capacity > 0.0 {
                (before.total_bytes_per_sec / capacity * 1000.0) as u64
            } else {
                0
            },
            Ordering::Relaxed,
        );
        let decisions = balance::plan(view, &loads, &cooling, config);
        if decisions.is_empty() {
            return Ok(());
        }
        let changes: Vec<AssignmentChange> = decisions
            .iter()
            .map(|d| AssignmentChange::Move {
                stream_id: d.stream_id,
                target: Some(d.to),
            })
            .collect();
        self.meta.change_assignments(lease, &changes).await?;
        let mut b = self.balancing.lock().unwrap_or_else(|e| e.into_inner());
        for d in &decisions {
            tracing::info!(decision = %d, "balancer: moving a partition");
            b.moved.insert(d.stream_id, Instant::now());
            match d.goal {
                Goal::Capacity => m.moves_capacity.inc(),
                Goal::BytesIn => m.moves_bytes_in.inc(),
                Goal::BytesOut => m.moves_bytes_out.inc(),
                Goal::Count => m.moves_count.inc(),
                Goal::Zones => m.moves_zones.inc(),
            }
        }
        Ok(())
    }
}

/// How often the controller reads the whole cluster when nothing is announced: a bound on how
/// long a lost announcement can delay a decision.
const FULL_READ_EVERY: Duration = Duration::from_secs(5);

/// When the controller reads the whole cluster (brokers, every assignment, WALs) and plans:
/// reading 10,000 assignments four times a second cost PostgreSQL 0.15 cores on an idle
/// cluster. It reads when a change was announced (the store's change count moved), when its
/// lease is new, when it fenced a broker, when the balancer is due, while work it started is
/// unfinished, and at least every `FULL_READ_EVERY`.
#[derive(Debug, Default)]
pub(crate) struct ViewReads {
    /// The change count the last full read began at, and when it ended.
    change: Option<u64>,
    at: Option<Instant>,
    /// The last full read left work to finish.
    busy: bool,
}

impl ViewReads {
    fn due(&self, change: u64, forced: bool) -> bool {
        forced
            || self.busy
            || self.change != Some(change)
            || self.at.is_none_or(|t| t.elapsed() >= FULL_READ_EVERY)
    }

    fn done(&mut self, change: u64, busy: bool) {
        self.change = Some(change);
        self.at = Some(Instant::now());
        self.busy = busy;
    }
}

/// The controller's memory between balancing rounds: when the last ran and when partitions
/// moved (for their cooldown). Each broker keeps its own; a new controller starts without the
/// cooldowns of the one before, which at worst moves a partition a little early.
#[derive(Debug, Default)]
pub(crate) struct Balancing {
    last: Option<Instant>,
    moved: HashMap<u64, Instant>,
    /// The last rate measured for each partition, and when.
    known: HashMap<u64, (weir_meta::PartitionLoad, Instant)>,
    /// Each partition's leader when the last round looked.
    leaders: HashMap<u64, Option<i32>>,
}

impl Balancing {
    /// Whether a balancing round is due.
    fn due(&self, interval: Duration) -> bool {
        self.last.is_none_or(|t| t.elapsed() >= interval)
    }

    /// Partitions that moved since the last round by any hand (an operator's reassignment, a
    /// drain, a failover), or are moving now, cool down like the balancer's own moves: the
    /// balancer does not move back, within seconds, what someone else just moved.
    fn note_moves(&mut self, view: &ClusterView, now: Instant) {
        for a in &view.assignments {
            let before = self.leaders.insert(a.stream_id, a.leader);
            let changed = before.is_some_and(|b| b != a.leader);
            if changed || a.target.is_some() {
                self.moved.insert(a.stream_id, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_meta::Assignment;

    fn view(leaders: &[(u64, Option<i32>, Option<i32>)]) -> ClusterView {
        ClusterView::new(
            Vec::new(),
            None,
            leaders
                .iter()
                .map(|&(stream_id, leader, target)| Assignment {
                    topic: "t".into(),
                    partition: stream_id as u32,
                    stream_id,
                    leader,
                    target,
                    epoch: 1,
                })
                .collect(),
        )
    }

    #[test]
    fn partitions_moved_by_anyone_cool_down() {
        let mut b = Balancing::default();
        let now = Instant::now();
        b.note_moves(
            &view(&[(1, Some(1), None), (2, Some(1), None), (3, Some(2), None)]),
            now,
        );
        assert!(b.moved.is_empty(), "the first look notes nothing");
        // Stream 1 was moved by an operator, stream 3 is being moved.
        b.note_moves(
            &view(&[
                (1, Some(2), None),
                (2, Some(1), None),
                (3, Some(2), Some(1)),
            ]),
            now,
        );
        let mut cooling: Vec<u64> = b.moved.keys().copied().collect();
        cooling.sort_unstable();
        assert_eq!(cooling, vec![1, 3]);
    }
}
