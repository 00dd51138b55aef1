//! Weir's control layer: the cluster of brokers, coordinated through the metadata store.
//!
//! There is no consensus protocol here: PostgreSQL (or, for one broker, SQLite) holds the
//! cluster's state, and every decision is a row changed by compare-and-set in one transaction
//! (see [`weir_meta::Coordination`]). This crate runs a broker's part in it:
//!
//! - **Membership** ([`Cluster::join`]): the broker registers (node id, a new incarnation, zone,
//!   Kafka and internal addresses) and renews its session; a broker that misses its session
//!   timeout is fenced by the controller and must register again.
//! - **View** (`view.rs`): brokers, the controller and every partition's leader, re-read from
//!   the store whenever it announces a change (LISTEN/NOTIFY on PostgreSQL), and at least every
//!   10 s. The Kafka API answers Metadata, leader hints and FindCoordinator from it.
//! - **Controller** (`controller.rs`): every broker tries to take or renew the lease; the holder
//!   fences expired brokers and applies [`placement::plan`]: new partitions placed, partitions of
//!   a broker that shuts down moved. Its changes carry the lease epoch and the store refuses
//!   them once the lease has passed to another broker, so two controllers never both decide.
//! - **Leadership** (`leadership.rs`): the broker opens the partitions assigned to it and, when
//!   one is to move, closes it (stop writes, upload and commit its WAL data), then hands it over
//!   in the store; the new leader opens it at leader epoch + 1. No data is copied between
//!   brokers, so a move takes the same time whatever the partition's size.
//! - **Failover** (`failover.rs`): a broker acknowledges writes only while its session is valid
//!   by its own clock ([`SessionLease`]); once the controller has fenced it, a live peer
//!   recovers its WAL and its partitions are placed on live brokers.
//! - **Balancing** (`load.rs`, `balance.rs`): each broker reports its partitions' bytes and
//!   requests per second and its CPU to the store; the controller's [`balance::plan`] moves
//!   partitions so that no broker is over capacity and bytes in and out stay near the mean.
//!   [`Cluster::drain`] empties a broker for removal.

pub mod balance;
mod controller;
pub mod failover;
mod leadership;
pub mod load;
pub mod placement;
mod view;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use weir_meta::{BrokerRegistration, BrokerState, MetaError, MetaStore};

pub use failover::{
    boottime_ns, FailoverMeters, RecoveredWal, RecoveryError, SessionLease, WalRecoverer,
};
pub use leadership::PartitionHost;
pub use view::{rendezvous_weight, ClusterView};

/// How long `Cluster::stop` waits for each background task, and for giving up the controller
/// lease, before it goes on without them (a task that does not stop is aborted).
const STOP_BOUND: Duration = Duration::from_secs(10);

/// Timings of the cluster protocol.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// A broker that has not renewed its session for this long is fenced.
    pub session_timeout: Duration,
    /// How often a broker renews its session.
    pub heartbeat_interval: Duration,
    /// How long the controller lease lasts without renewal: the longest a dead controller
    /// blocks decisions.
    pub controller_lease: Duration,
    /// How often the controller re-checks the cluster when nothing is announced.
    pub controller_interval: Duration,
    /// How long a controlled shutdown waits for the broker's partitions to move away.
    pub shutdown_timeout: Duration,
    /// How much longer than a session timeout the controller waits before it fences a broker
    /// and recovery begins: what the brokers' clocks may drift from the store's over a session.
    pub clock_drift_margin: Duration,
    /// After every live broker failed to open a fenced broker's WAL, how long until they all
    /// try again.
    pub wal_retry_interval: Duration,
    /// Whether the broker stops acknowledging writes when its session lapses. On in a cluster,
    /// where a peer may take its partitions over; off for a single node, which has no peer.
    pub fence_acks: bool,
    /// Load reports and the controller's balancer.
    pub balancer: balance::BalancerConfig,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        // Failover after a crash takes session timeout + margin + a controller round + the
        // recovery (well under a second): these defaults give produce back in under 5 s.
        ClusterConfig {
            session_timeout: Duration::from_millis(3000),
            heartbeat_interval: Duration::from_millis(500),
            // No longer than a session: a dead controller must not delay its own failover
            // (its lease has to pass before anyone fences it).
            controller_lease: Duration::from_millis(3000),
            controller_interval: Duration::from_millis(250),
            shutdown_timeout: Duration::from_secs(30),
            clock_drift_margin: Duration::from_millis(250),
            wal_retry_interval: Duration::from_secs(5),
            fence_acks: true,
            balancer: balance::BalancerConfig::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error("topic {0} partition {1} does not exist")]
    UnknownPartition(String, i32),
    #[error("broker {0} is not a live broker")]
    UnknownBroker(i32),
    #[error("topic {0} partition {1} has no leader yet")]
    NotPlaced(String, i32),
}

impl ClusterError {
    /// The metadata store's reason, if that is what failed.
    pub fn meta(&self) -> Option<&MetaError> {
        match self {
            ClusterError::Meta(e) => Some(e),
            _ => None,
        }
    }
}

/// The metadata store key listing the brokers being drained, comma-separated.
const DRAINING_KEY: &str = "cluster.draining";

/// The brokers being drained (`Cluster::drain`).
async fn draining(meta: &dyn MetaStore) -> Result<Vec<i32>, MetaError> {
    Ok(meta
        .get_value(DRAINING_KEY)
        .await?
        .map(|v| {
            v.split(',')
                .filter_map(|id| id.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default())
}

async fn set_draining(meta: &dyn MetaStore, ids: &[i32]) -> Result<(), MetaError> {
    let v: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    meta.set_value(DRAINING_KEY, &v.join(",")).await
}

/// How often the view is read again when no change is announced: changes are announced
/// (LISTEN/NOTIFY, and a reconnected listener counts as one), so this only bounds how long a
/// lost announcement goes unseen. Each read of 10,000 assignments costs PostgreSQL about 35 ms.
const VIEW_POLL: Duration = Duration::from_secs(10);

/// How long [`Cluster::refresh`] waits for the refresh loop's read (each of its statements is
/// bounded by the store; this bounds the caller whatever happens).
const REFRESH_BOUND: Duration = Duration::from_secs(30);

/// Reads of the view: asked for by [`Cluster::refresh`], done by the refresh loop.
#[derive(Default)]
struct Reads {
    /// Tickets handed out so far.
    asked: AtomicU64,
    /// Wakes the loop for a read.
    wake: tokio::sync::Notify,
    done: watch::Sender<ReadDone>,
}

/// The last read done: every ticket up to `covers` was asked before it began.
#[derive(Default, Clone)]
struct ReadDone {
    covers: u64,
    failed: Option<Arc<String>>,
}

/// This broker's membership of the cluster.
pub struct Cluster {
    meta: Arc<dyn MetaStore>,
    config: ClusterConfig,
    registration: BrokerRegistration,
    node_id: i32,
    incarnation: AtomicU64,
    view: watch::Sender<Arc<ClusterView>>,
    /// Reads of the view asked for ([`Cluster::refresh`]) and done (by the refresh loop, the
    /// view's one reader).
    reads: Reads,
    stop: watch::Sender<bool>,
    /// The background tasks, each with the name `stop` gives when it does not end.
    tasks: Mutex<Vec<(&'static str, JoinHandle<()>)>>,
    lease: Arc<SessionLease>,
    /// Set once this broker learns it was replaced (a peer recovered its WAL).
    replaced: watch::Sender<bool>,
    pub failover: FailoverMeters,
    pub balancer_meters: Arc<load::BalancerMeters>,
    /// The controller's balancing: when it last ran, and when partitions last moved.
    balancing: Mutex<controller::Balancing>,
}

impl Cluster {
    /// Registers the broker (claiming its WAL, if it names one) and starts its session, its view
    /// of the cluster and its bid for the controller lease.
    pub async fn join(
        meta: Arc<dyn MetaStore>,
        registration: BrokerRegistration,
        config: ClusterConfig,
    ) -> Result<Arc<Cluster>, ClusterError> {
        let lease = Arc::new(SessionLease::new(config.session_timeout, config.fence_acks));
        let sent = boottime_ns();
        let me = meta
            .register_broker(&registration, config.session_timeout)
            .await?;
        lease.renewed(sent);
        tracing::info!(node_id = me.node_id, incarnation = me.incarnation, zone = %me.zone, "joined the cluster");
        // A drained broker that registers again is a broker like any other.
        let marked = draining(&*meta).await?;
        if marked.contains(&me.node_id) {
            let rest: Vec<i32> = marked.into_iter().filter(|&n| n != me.node_id).collect();
            set_draining(&*meta, &rest).await?;
        }
        let cluster = Arc::new(Cluster {
            meta,
            config,
            registration: BrokerRegistration {
                node_id: Some(me.node_id),
                ..registration
            },
            node_id: me.node_id,
            incarnation: AtomicU64::new(me.incarnation),
            view: watch::Sender::new(Arc::new(ClusterView::default())),
            reads: Reads::default(),
            stop: watch::Sender::new(false),
            tasks: Mutex::new(Vec::new()),
            lease,
            replaced: watch::Sender::new(false),
            failover: FailoverMeters::default(),
            balancer_meters: Arc::new(load::BalancerMeters::default()),
            balancing: Mutex::new(controller::Balancing::default()),
        });
        // The refresh loop is not running yet: this read is the only one.
        cluster.read_view().await?;
        let tasks = [
            ("session", tokio::spawn(Arc::clone(&cluster).session_loop())),
            ("refresh", tokio::spawn(Arc::clone(&cluster).refresh_loop())),
            (
                "controller",
                tokio::spawn(Arc::clone(&cluster).controller_loop()),
            ),
        ];
        cluster.tasks().extend(tasks);
        Ok(cluster)
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, Vec<(&'static str, JoinHandle<()>)>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    pub fn incarnation(&self) -> u64 {
        self.incarnation.load(Ordering::SeqCst)
    }

    pub fn meta(&self) -> &Arc<dyn MetaStore> {
        &self.meta
    }

    /// Until when this broker may acknowledge writes (checked by its WAL after every write).
    pub fn session_lease(&self) -> Arc<SessionLease> {
        Arc::clone(&self.lease)
    }

    /// Declares the cluster layer's meters: the session, failover and the balancer.
    pub fn register_meters(self: &Arc<Self>, r: &mut weir_metrics::Registry) {
        let lease = self.session_lease();
        r.gauge_read(
            "session_valid",
            "1 while this broker's cluster session is valid and it may acknowledge writes.",
            move || u64::from(lease.is_valid()),
        );
        self.failover.register(r);
        self.balancer_meters.register(r);
    }

    /// Whether writes made durable now may be acknowledged (the session is valid).
    pub fn may_acknowledge(&self) -> bool {
        self.lease.is_valid()
    }

    /// Turns true when this broker learns it was replaced while it could not renew its session
    /// (a peer recovered its WAL): it must start again, empty.
    pub fn replaced(&self) -> watch::Receiver<bool> {
        self.replaced.subscribe()
    }

    /// The latest view of the cluster.
    pub fn view(&self) -> Arc<ClusterView> {
        Arc::clone(&self.view.borrow())
    }

    /// Changes of the view.
    pub fn watch(&self) -> watch::Receiver<Arc<ClusterView>> {
        self.view.subscribe()
    }

    /// Re-reads the cluster from the store and publishes it: returns a view read after the
    /// call began (so it shows every change the caller made before).
    ///
    /// The refresh loop does the reading, one read at a time, for every caller: two readers
    /// could publish out of order (a read that began before a hand-over published after a
    /// newer one), and a broker that saw such an older view opened the partition it had just
    /// handed over, fencing its new leader.
    pub async fn refresh(&self) -> Result<Arc<ClusterView>, MetaError> {
        if *self.stop.borrow() {
            // The loop has stopped (shutdown): nothing reads concurrently any more.
            return self.read_view().await;
        }
        let ticket = self.reads.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let mut done = self.reads.done.subscribe();
        self.reads.wake.notify_one();
        let answered =
            tokio::time::timeout(REFRESH_BOUND, done.wait_for(|d| d.covers >= ticket)).await;
        let read = match answered {
            Ok(Ok(read)) => read.clone(),
            _ => {
                return Err(MetaError::Backend {
                    context: "refreshing the view of the cluster",
                    source: format!("no read within {} s", REFRESH_BOUND.as_secs()).into(),
                })
            }
        };
        match read.failed {
            None => Ok(self.view()),
            Some(e) => Err(MetaError::Backend {
                context: "reading the cluster",
                source: e.as_str().into(),
            }),
        }
    }

    /// Reads the cluster from the store and publishes it. Only the refresh loop calls this once
    /// it runs (see [`Cluster::refresh`]).
    async fn read_view(&self) -> Result<Arc<ClusterView>, MetaError> {
        let brokers = self.meta.brokers().await?;
        let controller = self.meta.controller().await?;
        let assignments = self.meta.assignments().await?;
        let wals = self.meta.wals().await?;
        let draining = draining(&*self.meta).await?;
        // Published even when nothing in it changed: what watches it also re-reads what the view
        // does not hold (leadership re-reads the catalog, whose config changes are announced).
        let view = Arc::new(
            ClusterView::new(brokers, controller, assignments)
                .with_wals(wals)
                .with_draining(draining),
        );
        self.view.send_replace(Arc::clone(&view));
        Ok(view)
    }

    async fn session_loop(self: Arc<Self>) {
        let mut stop = self.stop.subscribe();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.config.heartbeat_interval) => {}
                _ = stop.changed() => return,
            }
            let inc = self.incarnation();
            let sent = boottime_ns();
            match self
                .meta
                .renew_session(self.node_id, inc, self.config.session_timeout)
                .await
            {
                Ok(()) => self.lease.renewed(sent),
                Err(MetaError::BrokerFenced { .. }) | Err(MetaError::UnknownBroker(_)) => {
                    // The controller fenced us (we missed our session) or another process
                    // registered our node id. Registering again claims our WAL back, unless a
                    // peer has started recovering it: then our partitions are going elsewhere
                    // and this process must start again, empty.
                    if self.registration.wal.is_none() {
                        // Without a WAL (`wal.kind = "object"`) fencing released every
                        // partition this broker led, in the same transaction: what it holds is
                        // another broker's now, as after a peer recovered its WAL.
                        self.lease.revoke();
                        tracing::error!(
                            node_id = self.node_id,
                            incarnation = inc,
                            "this broker's session was fenced and its partitions released: it acknowledges nothing more and starts again, empty"
                        );
                        self.replaced.send_replace(true);
                        return;
                    }
                    tracing::error!(
                        node_id = self.node_id,
                        incarnation = inc,
                        "this broker's session was fenced; registering again"
                    );
                    let sent = boottime_ns();
                    match self
                        .meta
                        .register_broker(&self.registration, self.config.session_timeout)
                        .await
                    {
                        Ok(me) => {
                            self.incarnation.store(me.incarnation, Ordering::SeqCst);
                            self.lease.renewed(sent);
                        }
                        Err(
                            e @ (MetaError::WalRecovering { .. } | MetaError::WalSealed { .. }),
                        ) => {
                            self.lease.revoke();
                            tracing::error!(reason = %e, "this broker was replaced while its session lapsed: it acknowledges nothing more and starts again, empty");
                            self.replaced.send_replace(true);
                            return;
                        }
                        Err(e) => tracing::warn!(error = %e, "registering again failed"),
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "renewing the broker session failed");
                }
            }
        }
    }

    async fn refresh_loop(self: Arc<Self>) {
        let mut changes = self.meta.cluster_changes();
        let mut stop = self.stop.subscribe();
        loop {
            tokio::select! {
                _ = changes.changed() => {}
                _ = self.reads.wake.notified() => {}
                _ = tokio::time::sleep(VIEW_POLL) => {}
                _ = stop.changed() => return,
            }
            changes.borrow_and_update();
            // Every read asked for until now is answered by this one, which begins after them.
            let covers = self.reads.asked.load(Ordering::SeqCst);
            let result = self.read_view().await;
            let failed = result.as_ref().err().map(|e| Arc::new(e.to_string()));
            self.reads.done.send_replace(ReadDone {
                covers,
                failed: failed.clone(),
            });
            if let Some(e) = failed {
                tracing::warn!(error = %e, "reading the cluster failed");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }

    /// Moves a partition to broker `target` (an operator's request): the controller and the
    /// leader do the rest. `None` cancels a move.
    pub async fn reassign(
        &self,
        topic: &str,
        partition: i32,
        target: Option<i32>,
    ) -> Result<(), ClusterError> {
        let view = self.refresh().await?;
        let a = u32::try_from(partition)
            .ok()
            .and_then(|p| view.assignment(topic, p))
            .ok_or_else(|| ClusterError::UnknownPartition(topic.to_string(), partition))?;
        if let Some(t) = target {
            if !view.live_brokers().any(|b| b.node_id == t) {
                return Err(ClusterError::UnknownBroker(t));
            }
        }
        // A move to where the partition already is: nothing to do (Kafka completes it at once).
        let target = target.filter(|&t| Some(t) != a.leader);
        if !self.meta.request_move(a.stream_id, target).await? {
            return Err(ClusterError::NotPlaced(topic.to_string(), partition));
        }
        Ok(())
    }

    /// Drains `broker` for removal: marks it as draining (placement and the balancer give it
    /// nothing from then on, until it registers again) and moves every partition it leads to
    /// the other live brokers (fewest partitions first). Returns how many moves were requested.
    pub async fn drain(&self, broker: i32) -> Result<usize, ClusterError> {
        let view = self.refresh().await?;
        if view.broker(broker).is_none() {
            return Err(ClusterError::UnknownBroker(broker));
        }
        // Marked first, so that neither placement nor the balancer gives it partitions back.
        let mut marked = draining(&*self.meta).await?;
        if !marked.contains(&broker) {
            marked.push(broker);
            set_draining(&*self.meta, &marked).await?;
            self.meta.notify_cluster().await?;
        }
        let mut load: std::collections::BTreeMap<i32, usize> = view
            .live_brokers()
            .filter(|b| b.node_id != broker)
            .map(|b| (b.node_id, 0))
            .collect();
        for a in &view.assignments {
            if let Some(n) = a.target.or(a.leader).and_then(|d| load.get_mut(&d)) {
                *n += 1;
            }
        }
        let mut moved = 0;
        for a in view.assignments.iter().filter(|a| a.leader == Some(broker)) {
            let Some((&to, _)) = load.iter().min_by_key(|&(&n, &c)| (c, n)) else {
                break;
            };
            if self.meta.request_move(a.stream_id, Some(to)).await? {
                *load.entry(to).or_default() += 1;
                moved += 1;
            }
        }
        Ok(moved)
    }

    /// Controlled shutdown: marks the broker as leaving, so that the controller moves its
    /// partitions to other brokers, and waits until it leads none (or no other broker can take
    /// them, or the timeout passes). The partitions still here are then closed by the caller.
    pub async fn leave(&self) {
        if let Err(e) = self
            .meta
            .set_broker_state(self.node_id, self.incarnation(), BrokerState::ShuttingDown)
            .await
        {
            tracing::warn!(error = %e, "could not announce the shutdown; partitions stay assigned here");
            return;
        }
        let started = tokio::time::Instant::now();
        let mut rx = self.watch();
        loop {
            let view = rx.borrow_and_update().clone();
            let mine = view
                .assignments
                .iter()
                .filter(|a| a.leader == Some(self.node_id))
                .count();
            let others = view.live_brokers().count();
            if mine == 0 || others == 0 {
                tracing::info!(
                    partitions_left = mine,
                    "controlled shutdown: partitions moved"
                );
                return;
            }
            let left = self
                .config
                .shutdown_timeout
                .saturating_sub(started.elapsed());
            if left.is_zero() {
                tracing::warn!(partitions_left = mine, "controlled shutdown timed out");
                return;
            }
            if tokio::time::timeout(left, rx.changed()).await.is_err() {
                continue;
            }
        }
    }

    /// Stops the background tasks and gives up the controller lease if this broker holds it.
    pub async fn stop(&self) {
        self.stop.send_replace(true);
        let tasks: Vec<_> = self.tasks().drain(..).collect();
        for (task, mut handle) in tasks {
            if tokio::time::timeout(STOP_BOUND, &mut handle).await.is_err() {
                tracing::warn!(
                    task,
                    bound_s = STOP_BOUND.as_secs(),
                    "a cluster task did not stop in time; aborted"
                );
                handle.abort();
            }
        }
        let resign = async {
            if let Ok(Some(lease)) = self.meta.controller().await {
                if lease.node_id == self.node_id {
                    let _ = self.meta.resign_controller(lease).await;
                }
            }
        };
        if tokio::time::timeout(STOP_BOUND, resign).await.is_err() {
            tracing::warn!(
                "giving up the controller lease did not finish in time; it expires instead"
            );
        }
    }
}
