//! A broker's links: the definitions in the metadata store, looked at every second; for each
//! link, a supervisor that mirrors the mirror partitions this broker leads (one fetcher per
//! source broker), and on the controller the link's topic upkeep; and the admin operations.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{watch, Notify};
use weir_meta::MetaStore;
use weir_partition::{Partition, Topics, MIRROR_LINK_CONFIG};

use crate::conn::{Conn, ConnOptions};
use crate::fetcher::{self, Assigned, Assignment};
use crate::groups::{self, GroupStatus, GroupTarget};
use crate::meters::{self, AllMeters, Lag, LinkMeters};
use crate::model::{LinkBody, MirrorTopic, Promotion, TopicState};
use crate::source::{self, SourceMetadata};
use crate::{controller, LinkError, LinkSpec, Shared};

/// How often each broker reads the links' definitions, and how often a link's supervisor looks
/// at which mirror partitions this broker leads.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// How often a broker with no link defined reads the definitions when no change is announced.
const IDLE_LOOK_EVERY: Duration = Duration::from_secs(30);

/// Between attempts to reach a source that did not answer.
const SOURCE_RETRY: weir_retry::Backoff =
    weir_retry::Backoff::new(Duration::from_millis(500), Duration::from_secs(30));

/// Whether this broker is the cluster's controller now.
pub type IsController = Arc<dyn Fn() -> bool + Send + Sync>;

pub struct LinkService {
    meta: Arc<dyn MetaStore>,
    topics: Arc<Topics>,
    is_controller: IsController,
    /// This cluster's consumer groups, for the groups links copy (`None`: none copied).
    groups: Option<Arc<dyn GroupTarget>>,
    meters: AllMeters,
    running: Mutex<HashMap<String, Running>>,
    /// Each link's record as last read (every second), for the supervisors.
    records: crate::meters::Records,
}

/// The tasks of one link on this broker; dropping it stops them.
struct Running {
    spec: LinkSpec,
    stop: watch::Sender<bool>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// A link as the admin API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct LinkStatus {
    pub name: String,
    /// The definition, with the password hidden.
    pub spec: LinkSpec,
    pub topics: BTreeMap<String, MirrorTopic>,
    /// The mirror partitions this broker leads, with their lag.
    pub partitions: Vec<PartitionStatus>,
    /// The groups this broker copies (those it coordinates), as the last round left them.
    pub groups: BTreeMap<String, GroupStatus>,
    /// Requests to the source that failed on this broker (each retried with backoff), and the
    /// last one's error: a source outage shows here and in `weir_link_source_errors_total`.
    pub source_errors: u64,
    pub last_source_error: Option<crate::meters::SourceError>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PartitionStatus {
    pub topic: String,
    pub partition: i32,
    pub mirrored_end: i64,
    pub source_end: i64,
    pub lag_records: i64,
    pub lag_seconds: f64,
}

impl From<Lag> for PartitionStatus {
    fn from(l: Lag) -> Self {
        PartitionStatus {
            topic: l.topic,
            partition: l.partition,
            mirrored_end: l.mirrored_end,
            source_end: l.source_end,
            lag_records: l.records,
            lag_seconds: l.seconds,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl LinkService {
    pub fn new(
        meta: Arc<dyn MetaStore>,
        topics: Arc<Topics>,
        is_controller: IsController,
        groups: Option<Arc<dyn GroupTarget>>,
    ) -> Arc<Self> {
        Arc::new(LinkService {
            meta,
            topics,
            is_controller,
            groups,
            meters: AllMeters::default(),
            running: Mutex::new(HashMap::new()),
            records: Default::default(),
        })
    }

    pub fn register(&self, r: &mut weir_metrics::Registry) {
        meters::register(r, &self.meters, &self.records);
    }

    /// Looks at the links until `stop` is set, starting and stopping their tasks: every second
    /// while any link is defined, otherwise when a change is announced (a link's creation is)
    /// or every `IDLE_LOOK_EVERY`.
    pub fn start(self: &Arc<Self>, mut stop: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
        let svc = Arc::clone(self);
        let mut changes = self.meta.cluster_changes();
        tokio::spawn(async move {
            loop {
                changes.borrow_and_update();
                let any = match svc.reconcile().await {
                    Ok(any) => any,
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the cluster links");
                        true
                    }
                };
                let wait = if any { LOOK_EVERY } else { IDLE_LOOK_EVERY };
                tokio::select! {
                    _ = stop.changed() => break,
                    () = tokio::time::sleep(wait) => {}
                    _ = changes.changed(), if !any => {}
                }
                if *stop.borrow() {
                    break;
                }
            }
            lock(&svc.running).clear();
        })
    }

    /// Starts and stops the links' tasks as their definitions say; whether any link is defined.
    async fn reconcile(self: &Arc<Self>) -> Result<bool, LinkError> {
        let mut defined = BTreeMap::new();
        let mut records = HashMap::new();
        for r in self.meta.links().await? {
            match LinkBody::decode(&r.body) {
                Ok(b) => {
                    defined.insert(r.name.clone(), b.spec.clone());
                    records.insert(r.name, (b, r.version));
                }
                Err(e) => tracing::warn!(link = %r.name, error = %e, "link record left alone"),
            }
        }
        let any = !records.is_empty();
        *lock(&self.records) = records;
        let mut running = lock(&self.running);
        running.retain(|name, r| defined.get(name) == Some(&r.spec));
        lock(&self.meters).retain(|name, _| defined.contains_key(name));
        for (name, spec) in defined {
            if running.contains_key(&name) {
                continue;
            }
            let config = match spec.clone().check() {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(link = %name, error = %e, "link not started");
                    continue;
                }
            };
            let shared = Arc::new(Shared {
                name: name.clone(),
                config,
            });
            let (tx, rx) = watch::channel(false);
            let meters = lock(&self.meters).entry(name.clone()).or_default().clone();
            tokio::spawn(supervise(
                Arc::clone(self),
                Arc::clone(&shared),
                rx.clone(),
                meters.clone(),
            ));
            if let (Some(target), false) = (&self.groups, shared.spec().groups.is_empty()) {
                tokio::spawn(sync_groups(
                    Arc::clone(self),
                    Arc::clone(&shared),
                    Arc::clone(target),
                    rx.clone(),
                    meters.clone(),
                ));
            }
            tokio::spawn(control(Arc::clone(self), shared, rx, meters));
            tracing::info!(link = %name, "link started here");
            running.insert(name, Running { spec, stop: tx });
        }
        Ok(any)
    }

    /// The mirror partitions of link `name` this broker leads.
    fn local_mirrors(&self, name: &str) -> Vec<Arc<Partition>> {
        self.topics
            .local_partitions()
            .into_iter()
            .filter(|p| {
                p.is_mirror()
                    && self.topics.get(&p.topic).is_some_and(|t| {
                        t.configs.get(MIRROR_LINK_CONFIG).map(String::as_str) == Some(name)
                    })
            })
            .collect()
    }

    /// Defines a link, once its source answered.
    pub async fn create(&self, json: &str) -> Result<LinkStatus, LinkError> {
        let config = LinkSpec::from_json(json)?;
        let shared = Shared {
            name: config.spec.name.clone(),
            config,
        };
        let opts = shared.conn_options()?;
        let mut conn = source::connect_any(&shared.config.bootstrap, &opts).await?;
        source::metadata(&mut conn, Some(&[])).await?;
        let body = LinkBody {
            spec: shared.config.spec.clone(),
            topics: BTreeMap::new(),
        };
        if !self.meta.create_link(&shared.name, &body.encode()).await? {
            return Err(LinkError::Conflict(format!(
                "a link named {} exists",
                shared.name
            )));
        }
        tracing::info!(link = %shared.name, source = %shared.config.spec.bootstrap_servers, "link created");
        self.status_of(&shared.name).await
    }

    /// Every link (`None`) or one.
    pub async fn status(&self, name: Option<&str>) -> Result<Vec<LinkStatus>, LinkError> {
        let mut out = Vec::new();
        for r in self.meta.links().await? {
            if name.is_some_and(|n| n != r.name) {
                continue;
            }
            let body = LinkBody::decode(&r.body)?;
            let meters = lock(&self.meters).get(&r.name).cloned().unwrap_or_default();
            let partitions = meters
                .lags()
                .into_iter()
                .map(PartitionStatus::from)
                .collect();
            out.push(LinkStatus {
                name: r.name,
                spec: body.spec.redacted(),
                topics: body.topics,
                partitions,
                groups: meters.groups(),
                source_errors: meters.source_errors(),
                last_source_error: meters.last_source_error(),
            });
        }
        if let (Some(n), true) = (name, out.is_empty()) {
            return Err(LinkError::NotFound(n.to_string()));
        }
        Ok(out)
    }

    async fn status_of(&self, name: &str) -> Result<LinkStatus, LinkError> {
        self.status(Some(name))
            .await?
            .pop()
            .ok_or_else(|| LinkError::NotFound(name.to_string()))
    }

    /// Starts promoting `topics` of link `name` (every topic it mirrors if empty): each
    /// partition's target is the source's end now; once the mirror has it, the controller makes
    /// the topic writable. Gives up after `timeout` (the topic goes on mirroring, with the
    /// partitions left in its reason). Returns the targets' status at once; `weir link promote`
    /// waits for the outcome.
    pub async fn promote(
        &self,
        name: &str,
        topics: &[String],
        timeout: Duration,
    ) -> Result<LinkStatus, LinkError> {
        let record = self
            .meta
            .links()
            .await?
            .into_iter()
            .find(|r| r.name == name)
            .ok_or_else(|| LinkError::NotFound(name.to_string()))?;
        let mut body = LinkBody::decode(&record.body)?;
        let chosen: Vec<String> = if topics.is_empty() {
            body.topics
                .iter()
                .filter(|(_, t)| t.state == TopicState::Mirroring)
                .map(|(n, _)| n.clone())
                .collect()
        } else {
            topics.to_vec()
        };
        for t in &chosen {
            match body.topics.get(t).map(|m| m.state) {
                Some(TopicState::Mirroring) => {}
                Some(s) => {
                    return Err(LinkError::Conflict(format!("topic {t} is {}", s.name())));
                }
                None => return Err(LinkError::NotFound(format!("{name}'s topic {t}"))),
            }
        }
        if chosen.is_empty() {
            return Err(LinkError::Conflict(format!(
                "link {name} mirrors no topic to promote"
            )));
        }
        let config = body.spec.clone().check()?;
        let shared = Shared {
            name: name.to_string(),
            config,
        };
        let targets = source_ends(&shared, &chosen).await?;
        let deadline_ms = now_ms() + timeout.as_millis() as i64;
        for t in &chosen {
            let targets = targets.get(t).cloned().unwrap_or_default();
            tracing::info!(link = %name, topic = %t, ?targets, "promotion started");
            body.topics.insert(
                t.clone(),
                MirrorTopic {
                    state: TopicState::Promoting,
                    reason: None,
                    promotion: Some(Promotion {
                        targets,
                        reached: BTreeMap::new(),
                        deadline_ms,
                    }),
                },
            );
        }
        if self
            .meta
            .update_link(name, &body.encode(), record.version)
            .await?
            .is_none()
        {
            return Err(LinkError::Conflict(format!(
                "link {name} changed meanwhile: promote again"
            )));
        }
        self.status_of(name).await
    }

    /// Removes a link. Refused while it still mirrors topics, unless `force`: they then stay
    /// as they are and become ordinary, writable topics.
    pub async fn delete(&self, name: &str, force: bool) -> Result<(), LinkError> {
        let record = self
            .meta
            .links()
            .await?
            .into_iter()
            .find(|r| r.name == name)
            .ok_or_else(|| LinkError::NotFound(name.to_string()))?;
        let body = LinkBody::decode(&record.body)?;
        let mirrored: Vec<&String> = body
            .topics
            .iter()
            .filter(|(_, t)| matches!(t.state, TopicState::Mirroring | TopicState::Promoting))
            .map(|(n, _)| n)
            .collect();
        if !mirrored.is_empty() && !force {
            return Err(LinkError::Conflict(format!(
                "link {name} still mirrors {} topic(s) ({}): promote them first, or delete with \
                 force, which stops mirroring and leaves them as ordinary, writable topics where \
                 they stand",
                mirrored.len(),
                mirrored
                    .iter()
                    .take(5)
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        for t in mirrored {
            controller::release(&self.topics, name, t).await?;
        }
        self.meta.delete_link(name).await?;
        tracing::info!(link = %name, force, "link deleted");
        Ok(())
    }
}

/// Mirrors the partitions of one link this broker leads, until told to stop.
async fn supervise(
    svc: Arc<LinkService>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    meters: LinkMeters,
) {
    let opts = match shared.conn_options() {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(link = %shared.name, error = %e, "link cannot run");
            return;
        }
    };
    let stale = Arc::new(Notify::new());
    let mut fetchers: HashMap<String, watch::Sender<Assignment>> = HashMap::new();
    let mut md: Option<(SourceMetadata, Instant)> = None;
    let mut conn: Option<Conn> = None;
    let mut delays = SOURCE_RETRY.delays();
    let refresh = Duration::from_millis(shared.spec().metadata_refresh_ms);
    while !*stop.borrow() {
        let local = svc.local_mirrors(&shared.name);
        meters.retain(|t, i| local.iter().any(|p| p.topic == t && p.index == i));
        let mut wait = LOOK_EVERY;
        if local.is_empty() {
            fetchers.clear();
        } else {
            if md.as_ref().is_none_or(|(_, at)| at.elapsed() >= refresh) {
                let mut names: Vec<String> = local.iter().map(|p| p.topic.clone()).collect();
                names.sort();
                names.dedup();
                match look(&shared, &opts, &mut conn, &names, md.as_ref().map(|m| &m.0)).await {
                    Ok(m) => {
                        md = Some((m, Instant::now()));
                        delays = SOURCE_RETRY.delays();
                    }
                    Err(e) => {
                        meters.source_error(&e);
                        conn = None;
                        wait = delays.next_delay();
                        tracing::warn!(link = %shared.name, error = %e, retry_in_ms = wait.as_millis() as u64, "source metadata not read");
                    }
                }
            }
            if let Some((m, _)) = &md {
                assign(&shared, &opts, &local, m, &mut fetchers, &stale, &meters);
            }
            if let Err(e) = report_reached(&svc, &shared.name, &local).await {
                tracing::debug!(link = %shared.name, error = %e, "promotion progress not recorded; next round");
            }
        }
        tokio::select! {
            () = stale.notified() => {
                // A leader moved at the source: look again (not more often than every 100 ms).
                md = None;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            () = tokio::time::sleep(wait) => {}
            _ = stop.changed() => {}
        }
    }
}

/// The source's metadata of `names`, through the connection kept (made again from the
/// bootstrap servers and the brokers last seen when it broke).
async fn look(
    shared: &Shared,
    opts: &ConnOptions,
    conn: &mut Option<Conn>,
    names: &[String],
    last: Option<&SourceMetadata>,
) -> Result<SourceMetadata, LinkError> {
    if conn.is_none() {
        let mut addrs = shared.config.bootstrap.clone();
        if let Some(m) = last {
            addrs.extend(m.brokers.values().cloned());
        }
        *conn = Some(source::connect_any(&addrs, opts).await?);
    }
    let c = conn
        .as_mut()
        .ok_or_else(|| LinkError::Config("no connection".into()))?;
    source::metadata(c, Some(names)).await
}

/// Hands each partition to the fetcher of its source leader's broker.
fn assign(
    shared: &Arc<Shared>,
    opts: &ConnOptions,
    local: &[Arc<Partition>],
    md: &SourceMetadata,
    fetchers: &mut HashMap<String, watch::Sender<Assignment>>,
    stale: &Arc<Notify>,
    meters: &LinkMeters,
) {
    let mut by_addr: HashMap<String, Vec<Assigned>> = HashMap::new();
    for p in local {
        let Some(t) = md.topics.get(&p.topic) else {
            continue;
        };
        let Some(addr) = md
            .leader_of(&p.topic, p.index)
            .and_then(|l| md.brokers.get(&l))
        else {
            continue;
        };
        by_addr.entry(addr.clone()).or_default().push(Assigned {
            topic: p.topic.clone(),
            topic_id: t.id,
            partition: Arc::clone(p),
        });
    }
    fetchers.retain(|addr, _| by_addr.contains_key(addr));
    for (addr, parts) in by_addr {
        let same = |a: &Assignment| {
            a.len() == parts.len()
                && a.iter().zip(&parts).all(|(x, y)| {
                    x.topic == y.topic
                        && x.topic_id == y.topic_id
                        && Arc::ptr_eq(&x.partition, &y.partition)
                })
        };
        match fetchers.get(&addr) {
            Some(tx) => {
                tx.send_if_modified(|cur| {
                    if same(cur) {
                        return false;
                    }
                    *cur = Arc::new(parts.clone());
                    true
                });
            }
            None => {
                let (tx, rx) = watch::channel(Arc::new(parts));
                tokio::spawn(fetcher::run(
                    Arc::clone(shared),
                    addr.clone(),
                    opts.clone(),
                    rx,
                    Arc::clone(stale),
                    meters.clone(),
                ));
                fetchers.insert(addr, tx);
            }
        }
    }
}

/// On the controller: the link's topics kept as the source's, every `metadata.refresh.ms`.
async fn control(
    svc: Arc<LinkService>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    meters: LinkMeters,
) {
    let opts = match shared.conn_options() {
        Ok(o) => o,
        Err(_) => return,
    };
    let every = Duration::from_millis(shared.spec().metadata_refresh_ms);
    let mut conn: Option<Conn> = None;
    let mut delays = SOURCE_RETRY.delays();
    let mut wait = Duration::ZERO;
    loop {
        tokio::select! {
            _ = stop.changed() => {}
            () = tokio::time::sleep(wait) => {}
        }
        if *stop.borrow() {
            return;
        }
        wait = every;
        if !(svc.is_controller)() {
            conn = None;
            continue;
        }
        if let Err(e) = control_once(&svc, &shared, &opts, &mut conn).await {
            meters.source_error(&e);
            conn = None;
            wait = delays.next_delay().max(every);
            tracing::warn!(link = %shared.name, error = %e, "link's topics not looked at; retrying");
        } else {
            delays = SOURCE_RETRY.delays();
        }
    }
}

async fn control_once(
    svc: &LinkService,
    shared: &Shared,
    opts: &ConnOptions,
    conn: &mut Option<Conn>,
) -> Result<(), LinkError> {
    // The record as this broker's last look read it (every second): a stale version only
    // loses the compare-and-set below, and the next round tries again.
    let Some((body, version)) = lock(&svc.records).get(&shared.name).cloned() else {
        return Ok(());
    };
    if conn.is_none() {
        *conn = Some(source::connect_any(&shared.config.bootstrap, opts).await?);
    }
    let c = conn
        .as_mut()
        .ok_or_else(|| LinkError::Config("no connection".into()))?;
    let next = controller::tick(shared, c, &svc.topics, &body).await?;
    let next = controller::promotions(shared, &svc.topics, &next, now_ms()).await;
    if next != body
        && svc
            .meta
            .update_link(&shared.name, &next.encode(), version)
            .await?
            .is_none()
    {
        tracing::debug!(link = %shared.name, "link record changed meanwhile; next round");
    }
    Ok(())
}

/// Copies the committed offsets of the link's groups that this broker coordinates, every
/// `groups.sync.ms`.
async fn sync_groups(
    svc: Arc<LinkService>,
    shared: Arc<Shared>,
    target: Arc<dyn GroupTarget>,
    mut stop: watch::Receiver<bool>,
    meters: LinkMeters,
) {
    let Ok(opts) = shared.conn_options() else {
        return;
    };
    let every = Duration::from_millis(shared.spec().groups_sync_ms);
    let mut conn: Option<Conn> = None;
    let mut pool: HashMap<String, Conn> = HashMap::new();
    let mut delays = SOURCE_RETRY.delays();
    let mut wait = Duration::ZERO;
    loop {
        tokio::select! {
            _ = stop.changed() => {}
            () = tokio::time::sleep(wait) => {}
        }
        if *stop.borrow() {
            return;
        }
        wait = every;
        match sync_once(
            &svc, &shared, &*target, &opts, &mut conn, &mut pool, &meters,
        )
        .await
        {
            Ok(()) => delays = SOURCE_RETRY.delays(),
            Err(e) => {
                meters.source_error(&e);
                conn = None;
                pool.clear();
                wait = delays.next_delay().max(every);
                tracing::warn!(link = %shared.name, error = %e, "group offsets not copied; retrying");
            }
        }
    }
}

async fn sync_once(
    svc: &LinkService,
    shared: &Shared,
    target: &dyn GroupTarget,
    opts: &ConnOptions,
    conn: &mut Option<Conn>,
    pool: &mut HashMap<String, Conn>,
    meters: &LinkMeters,
) -> Result<(), LinkError> {
    if conn.is_none() {
        *conn = Some(source::connect_any(&shared.config.bootstrap, opts).await?);
    }
    let c = conn
        .as_mut()
        .ok_or_else(|| LinkError::Config("no connection".into()))?;
    let md = source::metadata(c, Some(&[])).await?;
    let name = shared.name.as_str();
    let wanted = |g: &str| shared.config.groups.matches(g) && target.coordinates(g);
    let mirrored = |t: &str| {
        svc.topics
            .get(t)
            .is_some_and(|x| x.configs.get(MIRROR_LINK_CONFIG).map(String::as_str) == Some(name))
    };
    let offsets = groups::source_offsets(c, &md.brokers, opts, pool, &wanted, &mirrored).await?;
    let mut statuses = BTreeMap::new();
    for (group, offsets) in offsets {
        if offsets.is_empty() {
            continue;
        }
        match groups::copy_group(target, &group, &offsets).await {
            Ok(s) => {
                meters.groups_copied.add(s.copied as u64);
                statuses.insert(group, s);
            }
            Err(e) => {
                tracing::warn!(link = %name, group = %group, error = %e, "group offsets not copied")
            }
        }
    }
    meters.set_groups(statuses);
    Ok(())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The source's end of each partition of `topics` now: `topic -> partition -> offset`.
async fn source_ends(
    shared: &Shared,
    topics: &[String],
) -> Result<BTreeMap<String, BTreeMap<i32, i64>>, LinkError> {
    let opts = shared.conn_options()?;
    let mut conn = source::connect_any(&shared.config.bootstrap, &opts).await?;
    let md = source::metadata(&mut conn, Some(topics)).await?;
    let mut by_leader: BTreeMap<i32, Vec<(String, i32)>> = BTreeMap::new();
    for t in topics {
        let st = md
            .topics
            .get(t)
            .ok_or_else(|| LinkError::NotFound(format!("topic {t} at the source")))?;
        for p in &st.partitions {
            if p.leader < 0 {
                return Err(LinkError::Conflict(format!(
                    "{t}-{} has no leader at the source now: promote again",
                    p.index
                )));
            }
            by_leader
                .entry(p.leader)
                .or_default()
                .push((t.clone(), p.index));
        }
    }
    let mut out: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
    for (leader, parts) in by_leader {
        let addr = md.brokers.get(&leader).ok_or_else(|| {
            LinkError::Protocol(format!("source broker {leader} is not in its metadata"))
        })?;
        let mut c = Conn::connect(addr, &opts).await?;
        let ends = source::list_offsets(&mut c, &parts, source::LATEST).await?;
        for (t, i) in parts {
            let end = ends.get(&(t.clone(), i)).copied().ok_or_else(|| {
                LinkError::Conflict(format!(
                    "the source did not say where {t}-{i} ends: promote again"
                ))
            })?;
            out.entry(t).or_default().insert(i, end);
        }
    }
    Ok(out)
}

/// Records, in the link's record, the partitions of topics being promoted that this broker
/// leads and whose mirror has everything up to the promotion's target (durable here).
async fn report_reached(
    svc: &LinkService,
    name: &str,
    local: &[Arc<Partition>],
) -> Result<(), LinkError> {
    let Some((body, version)) = lock(&svc.records).get(name).cloned() else {
        return Ok(());
    };
    let mut next = body.clone();
    for p in local {
        let Some(t) = next.topics.get_mut(&p.topic) else {
            continue;
        };
        let Some(promo) = t.promotion.as_mut() else {
            continue;
        };
        let Some(&target) = promo.targets.get(&p.index) else {
            continue;
        };
        let (_, end) = p.offsets();
        if end >= target && !promo.reached.contains_key(&p.index) {
            promo.reached.insert(p.index, end);
        }
    }
    if next != body {
        match svc.meta.update_link(name, &next.encode(), version).await? {
            Some(v) => {
                lock(&svc.records).insert(name.to_string(), (next, v));
            }
            None => {
                return Err(LinkError::Conflict(
                    "the link record changed meanwhile".into(),
                ))
            }
        }
    }
    Ok(())
}
