//! `weir serve`: a broker's life in the order it happens, one function per step: open the
//! stores, join the cluster (its WAL claimed for this incarnation), open storage and the
//! topics, start the group and transaction coordinators, zone routing and what is read again
//! while running, listen, and stop (on a signal, or starting again after being replaced).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::{admin, cluster_admin, listeners};

/// How `serve` ended.
pub enum Exit {
    /// A signal: the broker shut down.
    Stopped,
    /// A peer recovered this broker's WAL while its session had lapsed (it was paused or cut
    /// off): it must start again, empty.
    Replaced,
}

/// Hands the cluster session's validity to the WAL, which checks it after every write.
#[derive(Debug)]
struct SessionGate(Arc<weir_cluster::SessionLease>);

impl weir_wal::AckGate for SessionGate {
    fn check(&self) -> Result<(), String> {
        self.0.check()
    }
}

/// Registers the broker and claims its WAL for this incarnation: the WAL is created first if
/// there is none; if a peer is recovering it, this waits until it is done; if a peer recovered
/// it, it starts empty under a new id (its data is in object storage and its partitions led
/// elsewhere). A WAL sealed by a peer that then gave up is unsealed once claimed back.
async fn join_with_wal(
    meta: &Arc<dyn weir_meta::MetaStore>,
    registration: weir_meta::BrokerRegistration,
    cluster_config: weir_cluster::ClusterConfig,
    wal_config: &weir_wal::FileWalConfig,
) -> anyhow::Result<Arc<weir_cluster::Cluster>> {
    let path = &wal_config.path;
    // A WAL an earlier release wrote is rewritten first: its identity is read in the current
    // format.
    weir_wal::FileWal::upgrade_format(wal_config)
        .context("rewriting the WAL in the current format")?;
    let mut waiting_since: Option<std::time::Instant> = None;
    loop {
        let Some(ident) = weir_wal::FileWal::identity(path).context("reading the WAL")? else {
            let created = weir_wal::FileWal::open(weir_wal::FileWalConfig {
                faults: Default::default(),
                ack_gate: None,
                ..wal_config.clone()
            })
            .context("creating the WAL")?;
            weir_wal::Wal::close(&created).await;
            continue;
        };
        let reg = weir_meta::BrokerRegistration {
            wal: Some(weir_meta::WalRegistration {
                wal_id: format!("{:032x}", ident.wal_id),
                path: path.display().to_string(),
            }),
            ..registration.clone()
        };
        match weir_cluster::Cluster::join(Arc::clone(meta), reg, cluster_config.clone()).await {
            Ok(cluster) => {
                if ident.sealed.is_some() {
                    tracing::warn!(path = %path.display(), "the WAL was sealed by a peer that did not recover it; claimed back");
                    weir_wal::FileWal::clear_seal(path).context("unsealing the WAL")?;
                }
                return Ok(cluster);
            }
            Err(e) => match e.meta() {
                Some(weir_meta::MetaError::WalRecovering { node_id, .. }) => {
                    if waiting_since.is_none() {
                        tracing::warn!(
                            recoverer = node_id,
                            "a peer is recovering this broker's WAL; waiting until it is done"
                        );
                    }
                    let since = *waiting_since.get_or_insert_with(std::time::Instant::now);
                    if since.elapsed() > Duration::from_secs(600) {
                        bail!("broker {node_id} has been recovering this broker's WAL for 10 minutes; giving up");
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Some(weir_meta::MetaError::WalSealed { .. }) => {
                    tracing::warn!(path = %path.display(), "a peer recovered this broker's WAL while it was away: starting empty");
                    weir_wal::FileWal::start_empty(path).context("emptying the recovered WAL")?;
                }
                _ => return Err(e).context("joining the cluster"),
            },
        }
    }
}

/// Runs a broker until it stops or is replaced.
pub async fn serve(mut config: Config) -> anyhow::Result<Exit> {
    // First of all: a SIGTERM that arrives while the broker starts (an orchestrator stopping a
    // pod it has just started) must wait for the controlled shutdown, not kill the process
    // half-started or be lost between `/readyz` turning ready and the wait for it.
    let signals = Signals::install()?;
    resolve_zone(&mut config).await?;
    let stores = open_stores(&config).await?;
    let joined = join(&config, &stores).await?;
    let storage = open_storage(&config, &stores, &joined).await?;
    let topics = open_topics(&config, &stores, &joined.cluster, storage.engine.clone()).await?;
    let groups = start_groups(&config, &stores.meta, &joined.cluster);
    let zones = start_zones(&config, &joined, &storage.engine);
    let broker = make_broker(&config, &stores, &joined, &topics, &groups, &zones);
    start_refreshers(&config, &broker, &stores.meta, &zones).await?;
    let running = listen(&config, joined, storage, &topics, &broker).await?;
    run_until_stopped(&config, signals, running, &topics, &groups).await
}

/// `broker.zone = "auto"` replaced by the zone found where the broker runs.
async fn resolve_zone(config: &mut Config) -> anyhow::Result<()> {
    crate::cloud::check(&config.cloud)?;
    if config.broker.zone != crate::cloud::AUTO {
        return Ok(());
    }
    let env = crate::cloud::Env::of_process();
    let found = crate::cloud::discover_zone(&config.cloud, &env).await?;
    tracing::info!(zone = %found.zone, source = found.source, "broker.zone = auto: zone found");
    config.broker.zone = found.zone;
    Ok(())
}

/// The stores a broker keeps its state in, opened.
struct Stores {
    meta: Arc<dyn weir_meta::MetaStore>,
    meta_url: String,
    /// The metadata URL as logs and errors show it: never the password.
    meta_shown: String,
    store: Arc<dyn object_store::ObjectStore>,
    store_url: String,
    store_options: weir_storage::objstore::StoreOptions,
    /// The object store's fault switch (`broker.fault_switch`).
    store_faults: Option<weir_storage::objstore::FaultyStore>,
    cluster_id: String,
    wal_kind: weir_storage::WalKind,
    zone_routing: weir_zone::Routing,
}

/// Creates the data directory and opens the metadata store and the object store.
async fn open_stores(config: &Config) -> anyhow::Result<Stores> {
    let data_dir = &config.broker.data_dir;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating data dir {}", data_dir.display()))?;
    let meta_url = config.metadata_url();
    let meta_shown = weir_meta::postgres::redact_password(&meta_url);
    let meta = open_metadata(&meta_url, &meta_shown).await?;
    let store_url = config.object_store_url()?;
    let store_options = config.store_options();
    if store_options.faults.is_on() {
        tracing::warn!(faults = ?store_options.faults, "object-store fault injection is ON");
    }
    let (store, store_faults) =
        weir_storage::objstore::from_url_with_switch(&store_url, &store_options)
            .map_err(anyhow::Error::msg)?;
    let cluster_id = meta
        .get_or_init("cluster.id", &uuid::Uuid::new_v4().simple().to_string())
        .await
        .context("reading the cluster id")?;
    let wal_kind = config.wal_kind().map_err(anyhow::Error::msg)?;
    let zone_routing = config.zone_routing().map_err(anyhow::Error::msg)?;
    Ok(Stores {
        meta,
        meta_url,
        meta_shown,
        store,
        store_url,
        store_options,
        store_faults,
        cluster_id,
        wal_kind,
        zone_routing,
    })
}

/// Opens the metadata store `url` names: `sqlite://PATH` or `postgres://...`.
async fn open_metadata(url: &str, shown: &str) -> anyhow::Result<Arc<dyn weir_meta::MetaStore>> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        return Ok(Arc::new(
            weir_meta::SqliteMetaStore::open(std::path::Path::new(path))
                .context("opening the metadata store")?,
        ));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Arc::new(
            weir_meta::PostgresMetaStore::connect(url)
                .await
                .with_context(|| format!("opening the metadata store {shown}"))?,
        ));
    }
    bail!(
        "metadata url {shown:?}: expected sqlite://PATH or postgres://USER:PASSWORD@HOST:PORT/DB"
    );
}

/// A broker that has joined the cluster, with what it listens on (bound, not yet served).
struct Joined {
    cluster: Arc<weir_cluster::Cluster>,
    specs: Vec<listeners::ListenerSpec>,
    /// The address registered for the broker: its first listener's (peers and older readers
    /// of the registry use it; clients are told the address of the listener they came in on).
    host: String,
    port: i32,
    ssl_tls: Option<Arc<weir_network::Tls>>,
    sasl_ssl_tls: Option<Arc<weir_network::Tls>>,
    internal_listener: TcpListener,
    internal_port: u16,
    /// The file WAL's settings (unused with `wal.kind = "object"`).
    wal_config: weir_wal::FileWalConfig,
}

/// Reads the listeners and their TLS files, binds the internal listener, and registers the
/// broker (with its WAL, claimed for this incarnation); one broker on SQLite is a cluster of
/// one.
async fn join(config: &Config, stores: &Stores) -> anyhow::Result<Joined> {
    let specs = listeners::listeners(config).map_err(anyhow::Error::msg)?;
    let (host, port) = (specs[0].advertised_host.clone(), specs[0].advertised_port);
    // TLS files are read before joining, so that a bad certificate stops the broker at once.
    let ssl_tls = load_tls(config, &specs, weir_auth::SecurityProtocol::Ssl)?;
    let sasl_ssl_tls = load_tls(config, &specs, weir_auth::SecurityProtocol::SaslSsl)?;
    let internal_listen = config.internal_listen();
    let internal_listener = TcpListener::bind(&internal_listen)
        .await
        .with_context(|| format!("binding the internal listener {internal_listen}"))?;
    let internal_port = internal_listener
        .local_addr()
        .context("reading the internal listener's address")?
        .port();
    let node_id_file = config.broker.data_dir.join("node_id");
    let node_id = node_id(config, &stores.meta_url, &node_id_file)?;
    let registration = weir_meta::BrokerRegistration {
        node_id,
        zone: config.broker.zone.clone(),
        host: host.clone(),
        port,
        listeners: specs
            .iter()
            .map(|l| weir_meta::ListenerEndpoint {
                name: l.name.clone(),
                host: l.advertised_host.clone(),
                port: l.advertised_port,
            })
            .collect(),
        internal_addr: if config.cluster.internal_advertised.is_empty() {
            format!("{host}:{internal_port}")
        } else {
            config.cluster.internal_advertised.clone()
        },
        wal: None,
    };
    let wal_config = file_wal_config(config)?;
    let cluster_config = config.cluster();
    // Without a WAL file (`wal.kind = "object"`) there is nothing to claim, recover or seal:
    // the broker registers without one, and its partitions move at once when it dies.
    let cluster = match stores.wal_kind {
        weir_storage::WalKind::File => {
            join_with_wal(&stores.meta, registration, cluster_config, &wal_config).await?
        }
        weir_storage::WalKind::Object => {
            weir_cluster::Cluster::join(Arc::clone(&stores.meta), registration, cluster_config)
                .await
                .context("joining the cluster")?
        }
    };
    if node_id.is_none() {
        std::fs::write(&node_id_file, format!("{}\n", cluster.node_id()))
            .with_context(|| format!("saving the node id in {}", node_id_file.display()))?;
    }
    Ok(Joined {
        cluster,
        specs,
        host,
        port,
        ssl_tls,
        sasl_ssl_tls,
        internal_listener,
        internal_port,
        wal_config,
    })
}

/// The TLS files of the listeners of `protocol`, if there are any. Client certificates are
/// asked for on SSL listeners only: SASL_SSL clients prove who they are with SASL (KIP-684:
/// `ssl.client.auth` is not applied to SASL_SSL listeners).
fn load_tls(
    config: &Config,
    specs: &[listeners::ListenerSpec],
    protocol: weir_auth::SecurityProtocol,
) -> anyhow::Result<Option<Arc<weir_network::Tls>>> {
    if !specs.iter().any(|l| l.protocol == protocol) {
        return Ok(None);
    }
    let mut files = listeners::tls_files(config).map_err(anyhow::Error::msg)?;
    if protocol == weir_auth::SecurityProtocol::SaslSsl {
        files.client_auth = weir_network::ClientAuth::None;
    }
    let tls = weir_network::Tls::load(files)
        .with_context(|| format!("loading the TLS files of the {protocol} listeners"))?;
    Ok(Some(Arc::new(tls)))
}

/// The configured node id, or the one allocated to this data directory before (kept in
/// `node_id_file`, as Kafka keeps broker.id in meta.properties, so that a restarted broker
/// finds its partitions again); `None`: the cluster allocates one. On SQLite it is 1.
fn node_id(config: &Config, meta_url: &str, node_id_file: &Path) -> anyhow::Result<Option<i32>> {
    if let Some(id) = config.broker.node_id {
        return Ok(Some(id));
    }
    if meta_url.starts_with("sqlite://") {
        return Ok(Some(1));
    }
    match std::fs::read_to_string(node_id_file) {
        Ok(s) => Ok(Some(s.trim().parse().with_context(|| {
            format!("reading the node id in {}", node_id_file.display())
        })?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", node_id_file.display())),
    }
}

/// The file WAL's settings; its path made absolute, since peers open a dead broker's WAL at
/// the path it registered.
fn file_wal_config(config: &Config) -> anyhow::Result<weir_wal::FileWalConfig> {
    let wal_faults = config.wal_faults();
    if wal_faults.is_on() {
        tracing::warn!(faults = ?wal_faults, "WAL fault injection is ON");
    }
    let wal_path = std::path::absolute(config.wal_path())
        .with_context(|| format!("resolving the WAL path {}", config.wal_path().display()))?;
    Ok(weir_wal::FileWalConfig {
        capacity: config.wal.capacity,
        direct_io: config.wal.direct_io,
        format: config.wal.format,
        faults: wal_faults,
        // Where a peer may recover this WAL, the broker reads the seal after every write.
        seal_check: config.cluster().fence_acks,
        ..weir_wal::FileWalConfig::new(wal_path)
    })
}

/// The storage engine, and the switch that injects faults at run time.
struct Storage {
    engine: weir_storage::Engine,
    fault_switch: Option<Arc<admin::FaultSwitch>>,
}

/// Opens the WAL (once this incarnation owns it; what it holds is uploaded) and the engine.
async fn open_storage(
    config: &Config,
    stores: &Stores,
    joined: &Joined,
) -> anyhow::Result<Storage> {
    let meta_shown = &stores.meta_shown;
    let store_url = &stores.store_url;
    let (engine, file_wal) = match stores.wal_kind {
        weir_storage::WalKind::File => {
            let mut wal_config = joined.wal_config.clone();
            if wal_config.seal_check {
                // Acknowledgements are fenced (a peer may recover this WAL): the WAL checks
                // the cluster session after every write.
                wal_config.ack_gate = Some(Arc::new(SessionGate(joined.cluster.session_lease())));
            }
            let wal_path = wal_config.path.clone();
            let wal = Arc::new(weir_wal::FileWal::open(wal_config).context("opening the WAL")?);
            tracing::info!(wal = %wal_path.display(), metadata = %meta_shown, objects = %store_url, "opening storage");
            let engine = weir_storage::Engine::open(
                config.storage(),
                Arc::clone(&wal) as Arc<dyn weir_wal::Wal>,
                Arc::clone(&stores.meta),
                Arc::clone(&stores.store),
            )
            .await
            .context("opening the storage engine")?;
            (engine, Some(wal))
        }
        weir_storage::WalKind::Object => {
            tracing::info!(wal = "object", metadata = %meta_shown, objects = %store_url, "opening storage without a WAL file");
            let engine = weir_storage::Engine::open_without_wal(
                config.storage(),
                Arc::clone(&stores.meta),
                Arc::clone(&stores.store),
            )
            .await
            .context("opening the storage engine")?;
            (engine, None)
        }
    };
    let fault_switch = match (config.broker.fault_switch, stores.store_faults.clone()) {
        (true, Some(store)) => {
            tracing::warn!("the fault switch is ON: PUT /v1/faults injects faults");
            Some(Arc::new(admin::FaultSwitch::new(
                file_wal,
                store,
                config.wal_faults(),
                stores.store_options.faults.clone(),
            )))
        }
        _ => None,
    };
    Ok(Storage {
        engine,
        fault_switch,
    })
}

/// Opens the topics and the partitions the controller assigns here, before taking clients.
async fn open_topics(
    config: &Config,
    stores: &Stores,
    cluster: &Arc<weir_cluster::Cluster>,
    engine: weir_storage::Engine,
) -> anyhow::Result<Arc<weir_partition::Topics>> {
    let defaults = weir_partition::TopicDefaults {
        num_partitions: config.broker.num_partitions.max(1),
        auto_create: config.broker.auto_create_topics,
        max_message_bytes: config.broker.message_max_bytes,
        retention_ms: config.broker.log_retention_ms,
        retention_bytes: config.broker.log_retention_bytes,
        producer_id_expiration_ms: config.broker.producer_id_expiration_ms,
        wal_kind: stores.wal_kind,
        zone_routing: stores.zone_routing.as_str().to_string(),
    };
    let topics = weir_partition::Topics::open(engine, Arc::clone(&stores.meta), defaults)
        .await
        .context("opening topics")?;
    cluster.start_leadership(Arc::clone(&topics) as Arc<dyn weir_cluster::PartitionHost>);
    cluster.start_recovery(Arc::clone(&topics) as Arc<dyn weir_cluster::WalRecoverer>);
    cluster.start_load_reports(Arc::clone(&topics) as Arc<dyn weir_cluster::load::LoadSource>);
    if !cluster
        .wait_until_serving(&*topics, Duration::from_secs(30))
        .await
    {
        tracing::warn!("some partitions assigned to this broker are not open yet; serving anyway");
    }
    Ok(topics)
}

/// The group coordinator. Each group is coordinated by one live broker (the same rendezvous
/// hash FindCoordinator answers with); groups that move away are given up, and loaded from the
/// store by the broker they move to.
fn start_groups(
    config: &Config,
    meta: &Arc<dyn weir_meta::MetaStore>,
    cluster: &Arc<weir_cluster::Cluster>,
) -> Arc<weir_group::GroupCoordinator> {
    let b = &config.broker;
    let groups = weir_group::GroupCoordinator::new(
        meta.clone(),
        weir_group::GroupConfig {
            initial_rebalance_delay: Duration::from_millis(b.group_initial_rebalance_delay_ms),
            consumer_session_timeout: Duration::from_millis(b.group_consumer_session_timeout_ms),
            consumer_heartbeat_interval: Duration::from_millis(
                b.group_consumer_heartbeat_interval_ms,
            ),
            classic_max_size: b.group_classic_max_size.max(1),
            consumer_max_size: b.group_consumer_max_size.max(1),
            share_max_size: b.group_share_max_size.max(1),
            streams_session_timeout: Duration::from_millis(b.group_streams_session_timeout_ms),
            streams_heartbeat_interval: Duration::from_millis(
                b.group_streams_heartbeat_interval_ms,
            ),
            streams_initial_rebalance_delay: Duration::from_millis(
                b.group_streams_initial_rebalance_delay_ms,
            ),
            streams_num_standby_replicas: b.group_streams_num_standby_replicas,
            streams_max_size: b.group_streams_max_size.max(1),
            ..weir_group::GroupConfig::default()
        },
    );
    let view_cluster = Arc::clone(cluster);
    let me = cluster.node_id();
    groups.set_ownership(Arc::new(move |g: &str| {
        view_cluster.view().coordinator(g).map(|b| b.node_id) == Some(me)
    }));
    let watched = Arc::clone(&groups);
    let mut views = cluster.watch();
    tokio::spawn(async move {
        while views.changed().await.is_ok() {
            watched.ownership_changed();
        }
    });
    groups
}

/// Zone routing: connections to peers (proving the internal secret), and the forwarder of
/// produces to leaders in other zones, whose hand-off objects go to the engine's store (its
/// requests are metered with the engine's); a previous run's leftovers are deleted first.
fn start_zones(
    config: &Config,
    joined: &Joined,
    engine: &weir_storage::Engine,
) -> Arc<weir_api::ZoneServices> {
    let node_id = joined.cluster.node_id();
    let zone_net = Arc::new(weir_zone::NetMeters::default());
    let zone_peers = weir_zone::Peers::new(node_id, &config.broker.zone, Arc::clone(&zone_net));
    if let Some(secret) = peer_secret(config) {
        zone_peers.set_secret(&secret, config.cluster.legacy_peer_hello);
    }
    let forwarder = weir_zone::Forwarder::start(
        node_id,
        engine.object_store(),
        Arc::clone(&zone_peers),
        config.handoff(),
    );
    let sweeper = Arc::clone(&forwarder);
    tokio::spawn(async move {
        let n = sweeper.sweep().await;
        if n > 0 {
            tracing::info!(
                objects = n,
                "deleted hand-off objects left by the previous run"
            );
        }
    });
    Arc::new(weir_api::ZoneServices::new(
        &config.broker.zone,
        engine.object_store(),
        zone_peers,
        forwarder,
        zone_net,
    ))
}

/// `cluster.internal_secret`, which peers' hellos prove.
fn peer_secret(config: &Config) -> Option<Arc<[u8]>> {
    (!config.cluster.internal_secret.is_empty())
        .then(|| Arc::from(config.cluster.internal_secret.as_bytes()))
}

/// The Kafka API layer, with the transaction coordinator started: each transactional id is
/// coordinated by one serving broker, as groups are; its state is in the metadata store, so
/// the broker it moves to goes on from there.
fn make_broker(
    config: &Config,
    stores: &Stores,
    joined: &Joined,
    topics: &Arc<weir_partition::Topics>,
    groups: &Arc<weir_group::GroupCoordinator>,
    zones: &Arc<weir_api::ZoneServices>,
) -> Arc<weir_api::Broker> {
    let data_dir = &config.broker.data_dir;
    let cluster = &joined.cluster;
    let broker = weir_api::Broker::with_zones(
        weir_api::BrokerIdentity {
            node_id: cluster.node_id(),
            host: joined.host.clone(),
            port: joined.port,
            rack: (!config.broker.zone.is_empty()).then(|| config.broker.zone.clone()),
            cluster_id: stores.cluster_id.clone(),
            log_dir: std::fs::canonicalize(data_dir)
                .unwrap_or_else(|_| data_dir.clone())
                .display()
                .to_string(),
        },
        Arc::clone(cluster),
        Arc::clone(topics),
        Arc::clone(groups),
        Arc::clone(&stores.meta),
        weir_api::ApiLimits {
            fetch_max_bytes: config.broker.fetch_max_bytes,
            fetch_session_slots: config.broker.fetch_session_cache_slots,
            share_sessions: config.broker.group_share_max_share_sessions.max(1),
        },
        Some(Arc::clone(zones)),
    );
    let view_cluster = Arc::clone(cluster);
    let me = cluster.node_id();
    broker.txns.set_ownership(Arc::new(move |id: &str| {
        view_cluster
            .view()
            .coordinator(&weir_api::txn_key(id))
            .map(|b| b.node_id)
            == Some(me)
    }));
    broker.txns.start();
    broker
}

/// What the broker reads again while it runs: the zones' CIDR map, the ACLs, the OAuth keys,
/// the client quotas. The ACLs and quotas are read once before the first client is served.
async fn start_refreshers(
    config: &Config,
    broker: &Arc<weir_api::Broker>,
    meta: &Arc<dyn weir_meta::MetaStore>,
    zones: &Arc<weir_api::ZoneServices>,
) -> anyhow::Result<()> {
    tokio::spawn(refresh_cidr_map(Arc::clone(zones), Arc::clone(meta)));
    if !config.broker.zone.is_empty() {
        broker.start_remote_read_uploads(Duration::from_millis(
            config.zones.remote_upload_interval_ms.max(10),
        ));
    }
    let acl_every = Duration::from_millis(config.security.acl_refresh_interval_ms.max(10));
    if let Some(super_users) = listeners::authorizer(config).map_err(anyhow::Error::msg)? {
        broker.authz.enable(
            super_users,
            config.security.allow_everyone_if_no_acl_found,
            Vec::new(),
        );
        // In force before the first client is served; changes made through other brokers are
        // seen within the interval.
        broker.refresh_acls().await.context("reading the ACLs")?;
        let broker = Arc::clone(broker);
        tokio::spawn(again_every(
            acl_every,
            meta.cluster_changes(),
            "ACLs",
            move || {
                let broker = Arc::clone(&broker);
                async move { broker.refresh_acls().await }
            },
        ));
    }
    broker.quotas.set_window(weir_api::quotas::QuotaWindow {
        samples: config.security.quota_window_num,
        sample: Duration::from_secs(config.security.quota_window_size_seconds),
    });
    if let Some(path) = listeners::jwks_path(config).map_err(anyhow::Error::msg)? {
        let v = listeners::oauth_validator(config, &path).map_err(anyhow::Error::msg)?;
        broker.sasl.set_oauth_validator(v);
        tokio::spawn(reload_jwks(Arc::clone(broker), config.clone(), path));
    }
    // Client quotas apply with or without an authorizer.
    broker
        .quotas
        .refresh(&*broker.meta)
        .await
        .context("reading the client quotas")?;
    let broker = Arc::clone(broker);
    tokio::spawn(again_every(
        acl_every,
        meta.cluster_changes(),
        "client quotas",
        move || {
            let broker = Arc::clone(&broker);
            async move { broker.quotas.refresh(&*broker.meta).await }
        },
    ));
    Ok(())
}

/// Reads `what` again whenever a cluster change is announced and at least every `period`, for
/// as long as the broker runs; a failed read keeps the ones in force.
async fn again_every<F, Fut>(
    period: Duration,
    mut changes: tokio::sync::watch::Receiver<u64>,
    what: &'static str,
    read: F,
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), weir_meta::MetaError>>,
{
    loop {
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            r = changes.changed() => {
                if r.is_err() {
                    tokio::time::sleep(period).await;
                }
            }
        }
        changes.borrow_and_update();
        if let Err(e) = read().await {
            tracing::warn!(error = %e, what, "reading again failed; the ones in force stay");
        }
    }
}

/// Reads the CIDR map (PUT /v1/zones/cidrs on any broker) every few seconds.
async fn refresh_cidr_map(zones: Arc<weir_api::ZoneServices>, meta: Arc<dyn weir_meta::MetaStore>) {
    let mut last: Option<String> = None;
    loop {
        match meta.get_value(weir_zone::CIDR_MAP_KEY).await {
            Ok(v) if v != last => {
                match weir_zone::parse_cidr_map(v.as_deref().unwrap_or("")) {
                    Ok(map) => zones.set_cidrs(map),
                    Err(e) => {
                        tracing::warn!(error = %e, "the stored CIDR map does not parse; keeping the previous one")
                    }
                }
                last = v;
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "reading the CIDR map failed"),
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// Reads the JWKS file again when it changes: the identity provider rotates its keys.
async fn reload_jwks(broker: Arc<weir_api::Broker>, config: Config, path: std::path::PathBuf) {
    let every = Duration::from_millis(config.security.ssl_reload_interval_ms.max(100));
    let stamp = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let mut last = stamp(&path);
    loop {
        tokio::time::sleep(every).await;
        let now = stamp(&path);
        if now == last {
            continue;
        }
        match listeners::oauth_validator(&config, &path) {
            Ok(v) => {
                broker.sasl.set_oauth_validator(v);
                last = now;
                tracing::info!(path = %path.display(), "JWKS changed: loaded again");
            }
            Err(e) => {
                tracing::warn!(error = %e, "JWKS changed but does not load; keeping the keys in use")
            }
        }
    }
}

/// A serving broker: its tasks, and what stops them.
struct Running {
    cluster: Arc<weir_cluster::Cluster>,
    engine: weir_storage::Engine,
    /// The Kafka listeners' tasks and the TLS reloader.
    network: Vec<JoinHandle<()>>,
    internal: JoinHandle<()>,
    admin: JoinHandle<()>,
    /// Producer-state snapshots and the cleaner of compacted topics.
    background: Vec<JoinHandle<()>>,
    ready: Arc<AtomicBool>,
    shutdown: watch::Sender<bool>,
}

/// Binds the Kafka and admin listeners and serves them, the internal listener and the
/// background tasks that stop with them; the broker is ready once this returns.
async fn listen(
    config: &Config,
    joined: Joined,
    storage: Storage,
    topics: &Arc<weir_partition::Topics>,
    broker: &Arc<weir_api::Broker>,
) -> anyhow::Result<Running> {
    let kafka_listeners = bind_kafka_listeners(config, &joined).await?;
    let admin_listener = TcpListener::bind(&config.broker.admin_listen)
        .await
        .with_context(|| format!("binding the admin listener {}", config.broker.admin_listen))?;
    warn_if_admin_is_open(config, &admin_listener);
    let (shutdown, shutdown_rx) = watch::channel(false);
    let net_meters = Arc::new(weir_network::NetworkMeters::default());
    let ready = Arc::new(AtomicBool::new(false));
    let net_config = network_config(config);
    // Requests that never end are looked for every second (`weir_network::inflight`).
    tokio::spawn(weir_network::watch_stuck(
        Arc::clone(&net_meters),
        Duration::from_secs(1).min(net_config.stuck_after),
        shutdown_rx.clone(),
    ));
    let mut network = Vec::new();
    for (socket, security, tls) in kafka_listeners {
        network.push(tokio::spawn(weir_network::serve(
            socket,
            Arc::clone(broker),
            weir_network::NetworkConfig {
                listener: security,
                tls,
                ..net_config.clone()
            },
            Arc::clone(&net_meters),
            shutdown_rx.clone(),
        )));
    }
    let tls: Vec<_> = joined
        .ssl_tls
        .into_iter()
        .chain(joined.sasl_ssl_tls)
        .collect();
    if !tls.is_empty() {
        let every = Duration::from_millis(config.security.ssl_reload_interval_ms.max(100));
        network.push(tokio::spawn(reload_tls(tls, every, shutdown_rx.clone())));
    }
    // Broker-to-broker traffic: Kafka framing on its own port, with the internal API keys.
    let internal = tokio::spawn(weir_network::serve(
        joined.internal_listener,
        Arc::clone(broker),
        weir_network::NetworkConfig {
            internal: true,
            zone: None,
            listener: Arc::new(weir_api::ListenerSecurity {
                name: "INTERNAL".into(),
                peer_secret: peer_secret(config),
                legacy_peer_hello: config.cluster.legacy_peer_hello,
                ..Default::default()
            }),
            ..net_config
        },
        Arc::clone(&net_meters),
        shutdown_rx.clone(),
    ));
    let links = weir_link::LinkService::new(
        Arc::clone(joined.cluster.meta()),
        Arc::clone(topics),
        is_controller(&joined.cluster),
        Some(Arc::new(crate::link_groups::Groups(Arc::clone(broker)))),
    );
    let links_task = links.start(shutdown_rx.clone());
    let iceberg_meters = weir_iceberg::meters::IcebergMeters::default();
    let iceberg_task =
        crate::iceberg::start(config, broker, iceberg_meters.clone(), shutdown_rx.clone())?;
    let registry = Arc::clone(broker.schemas.registry());
    if let Some(task) = serve_registry(config, broker, &registry, shutdown_rx.clone()).await? {
        network.push(task);
    }
    let admin = tokio::spawn(admin::serve(
        admin_listener,
        admin::State {
            ready: Arc::clone(&ready),
            meters: meters(
                &storage.engine,
                broker,
                &net_meters,
                &links,
                &iceberg_meters,
            ),
            links: Some(links),
            iceberg: iceberg_task.is_some().then(|| iceberg_meters.clone()),
            broker: Arc::clone(broker),
            network: Arc::clone(&net_meters),
            cluster: Some(Arc::new(cluster_admin::Admin(Arc::clone(&joined.cluster)))),
            faults: storage.fault_switch,
            token: (!config.broker.admin_token.is_empty())
                .then(|| Arc::from(config.broker.admin_token.as_str())),
        },
        shutdown_rx.clone(),
    ));
    let mut background = background_tasks(config, topics, &broker.groups, shutdown_rx);
    background.push(links_task);
    background.extend(iceberg_task);
    ready.store(true, Ordering::SeqCst);
    log_serving(
        config,
        &joined.specs,
        joined.cluster.node_id(),
        joined.internal_port,
    );
    Ok(Running {
        cluster: joined.cluster,
        engine: storage.engine,
        network,
        internal,
        admin,
        background,
        ready,
        shutdown,
    })
}

/// Every meter of the broker, each declared by the component that counts it.
/// Whether this broker holds the controller's lease now (a cluster link's topic upkeep runs
/// there only).
fn is_controller(cluster: &Arc<weir_cluster::Cluster>) -> weir_link::service::IsController {
    let cluster = Arc::clone(cluster);
    Arc::new(move || {
        cluster
            .view()
            .controller
            .as_ref()
            .is_some_and(|c| c.node_id == cluster.node_id())
    })
}

fn meters(
    engine: &weir_storage::Engine,
    broker: &Arc<weir_api::Broker>,
    network: &Arc<weir_network::NetworkMeters>,
    links: &weir_link::LinkService,
    iceberg: &weir_iceberg::meters::IcebergMeters,
) -> Arc<weir_metrics::Registry> {
    let mut r = weir_metrics::Registry::new();
    engine.register_meters(&mut r);
    broker.register_meters(&mut r);
    network.register(&mut r);
    links.register(&mut r);
    iceberg.register(&mut r);
    admin::register_process_meters(&mut r);
    Arc::new(r)
}

/// Binds the schema registry's listener (unless `schema_registry.listen` is empty) and serves
/// it until shutdown.
async fn serve_registry(
    config: &Config,
    broker: &Arc<weir_api::Broker>,
    registry: &Arc<weir_registry::Registry>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Option<JoinHandle<()>>> {
    let section = &config.schema_registry;
    if section.listen.is_empty() {
        return Ok(None);
    }
    // Read before binding: a bad certificate stops the broker at once.
    let tls = if section.tls {
        let mut files = listeners::tls_files(config).map_err(anyhow::Error::msg)?;
        files.client_auth = weir_network::ClientAuth::None;
        let tls = Arc::new(
            weir_network::Tls::load(files).context("loading the schema registry's TLS files")?,
        );
        let every = Duration::from_millis(config.security.ssl_reload_interval_ms.max(100));
        tokio::spawn(reload_tls(vec![Arc::clone(&tls)], every, shutdown.clone()));
        let source: weir_registry::http::TlsSource = Arc::new(move || tls.config());
        Some(source)
    } else {
        None
    };
    let listener = TcpListener::bind(&section.listen)
        .await
        .with_context(|| format!("binding the schema registry listener {}", section.listen))?;
    let bound = listener
        .local_addr()
        .context("the schema registry listener's address")?;
    let basic = section.authentication == "basic";
    tracing::info!(schema_registry = %bound, tls = section.tls, authentication = %section.authentication, "schema registry listening");
    if !bound.ip().is_loopback() && !basic {
        tracing::warn!(
            schema_registry = %bound,
            "the schema registry listens beyond loopback and asks for no credentials: anyone who reaches it can register and delete schemas (schema_registry.authentication = \"basic\")"
        );
    }
    if basic && !section.tls {
        tracing::warn!(
            "the schema registry takes passwords over plain HTTP (schema_registry.tls = true)"
        );
    }
    let gate: Option<Arc<dyn weir_registry::http::Gate>> = basic.then(|| {
        Arc::new(crate::registry_gate::BasicGate {
            broker: Arc::clone(broker),
        }) as Arc<dyn weir_registry::http::Gate>
    });
    let router = weir_registry::http::router(Arc::clone(registry), gate);
    Ok(Some(tokio::spawn(weir_registry::http::serve(
        listener,
        router,
        tls,
        shutdown,
        Duration::from_secs(5),
    ))))
}

/// The admin API moves partitions and drains brokers: reachable beyond this machine, it wants a
/// token (the container image listens on every address, for probes and scrapes).
fn warn_if_admin_is_open(config: &Config, admin: &TcpListener) {
    let open = admin.local_addr().is_ok_and(|a| !a.ip().is_loopback());
    if open && config.broker.admin_token.is_empty() {
        tracing::warn!(
            admin = %config.broker.admin_listen,
            "the admin API listens beyond loopback without broker.admin_token: anyone who reaches it can move partitions and drain brokers"
        );
    }
}

/// Binds the Kafka listeners, each with its security and TLS.
async fn bind_kafka_listeners(
    config: &Config,
    joined: &Joined,
) -> anyhow::Result<Vec<KafkaListener>> {
    let mut bound = Vec::new();
    for spec in &joined.specs {
        let socket = TcpListener::bind(&spec.bind)
            .await
            .with_context(|| format!("binding the Kafka listener {} ({})", spec.name, spec.bind))?;
        let security = listeners::security(config, spec).map_err(anyhow::Error::msg)?;
        let tls = match spec.protocol {
            weir_auth::SecurityProtocol::Ssl => joined.ssl_tls.clone(),
            weir_auth::SecurityProtocol::SaslSsl => joined.sasl_ssl_tls.clone(),
            _ => None,
        };
        bound.push((socket, security, tls));
    }
    Ok(bound)
}

/// A bound Kafka listener: its socket, who may connect and how, its TLS.
type KafkaListener = (
    TcpListener,
    Arc<weir_api::ListenerSecurity>,
    Option<Arc<weir_network::Tls>>,
);

/// The tasks that stop with the listeners: producer-state snapshots, the cleaner of
/// compacted topics, and the read of committed offsets for their meter.
fn background_tasks(
    config: &Config,
    topics: &Arc<weir_partition::Topics>,
    groups: &Arc<weir_group::GroupCoordinator>,
    shutdown_rx: watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = vec![
        every(
            Duration::from_millis(config.broker.producer_snapshot_interval_ms.max(100)),
            shutdown_rx.clone(),
            {
                let topics = Arc::clone(topics);
                move || {
                    let topics = Arc::clone(&topics);
                    async move { topics.snapshot_producers().await }
                }
            },
        ),
        every(
            Duration::from_millis(config.broker.log_cleaner_backoff_ms.max(100)),
            shutdown_rx.clone(),
            {
                let topics = Arc::clone(topics);
                move || {
                    let topics = Arc::clone(&topics);
                    async move {
                        topics.clean_compacted().await;
                    }
                }
            },
        ),
    ];
    let offsets_every = config.broker.group_offsets_meter_interval_ms;
    if offsets_every > 0 {
        let groups = Arc::clone(groups);
        let read = move || {
            let groups = Arc::clone(&groups);
            async move {
                if let Err(e) = groups.refresh_committed_offsets().await {
                    tracing::warn!(error = %e, "reading committed offsets for their meter failed");
                }
            }
        };
        let period = Duration::from_millis(offsets_every.max(100));
        tasks.push(every(period, shutdown_rx, read));
    }
    tasks
}

fn log_serving(
    config: &Config,
    specs: &[listeners::ListenerSpec],
    node_id: i32,
    internal_port: u16,
) {
    let listening: Vec<String> = specs
        .iter()
        .map(|l| {
            format!(
                "{}://{} ({}, advertised {}:{})",
                l.name, l.bind, l.protocol, l.advertised_host, l.advertised_port
            )
        })
        .collect();
    tracing::info!(version = crate::VERSION, node_id, listeners = ?listening, internal_port, admin = %config.broker.admin_listen, "Weir is serving");
}

/// The network layer's settings shared by every listener.
fn network_config(config: &Config) -> weir_network::NetworkConfig {
    let b = &config.broker;
    weir_network::NetworkConfig {
        max_request_bytes: b.max_request_bytes,
        max_connections: b.max_connections,
        queued_max_request_bytes: b.queued_max_request_bytes,
        queued_max_request_bytes_per_connection: b.queued_max_request_bytes_per_connection,
        zone: (!config.zones.listener_zone.is_empty()).then(|| config.zones.listener_zone.clone()),
        stuck_after: Duration::from_millis(b.request_stuck_ms.max(1)),
        ..Default::default()
    }
}

/// Runs `f` every `period` until the shutdown.
fn every<F, Fut>(period: Duration, mut shutdown: watch::Receiver<bool>, f: F) -> JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(period) => f().await,
                _ = shutdown.changed() => return,
            }
        }
    })
}

/// Picks up renewed certificates without a restart.
async fn reload_tls(
    tls: Vec<Arc<weir_network::Tls>>,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.changed() => return,
        }
        for tls in &tls {
            match tls.reload_if_changed() {
                Ok(true) => tracing::info!(?tls, "TLS files changed: loaded again"),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "TLS files changed but do not load; keeping the ones in use")
                }
            }
        }
    }
}

/// Serves until a signal (then a controlled shutdown) or until the broker is replaced (then
/// a bounded teardown, and the caller starts it again).
async fn run_until_stopped(
    config: &Config,
    mut signals: Signals,
    running: Running,
    topics: &Arc<weir_partition::Topics>,
    groups: &Arc<weir_group::GroupCoordinator>,
) -> anyhow::Result<Exit> {
    let mut replaced = running.cluster.replaced();
    tokio::select! {
        () = signals.recv() => {}
        notice = crate::cloud::interruption(config.cloud.clone()) => {
            tracing::warn!(
                cloud = ?notice.cloud,
                notice = %notice.what,
                "the cloud is taking this machine back: leaving as on SIGTERM"
            );
        }
        _ = replaced.wait_for(|r| *r) => {
            tear_down_replaced(running, groups).await;
            return Ok(Exit::Replaced);
        }
    }
    let Running {
        cluster,
        engine,
        network,
        internal,
        admin,
        background,
        ready,
        shutdown,
    } = running;
    ready.store(false, Ordering::SeqCst);
    bound_the_shutdown(
        Duration::from_millis(config.broker.shutdown_deadline_ms),
        signals,
    );
    // Controlled shutdown: while still serving, let the controller move this broker's
    // partitions to the others (clients are redirected with retriable errors).
    tracing::info!("shutting down: moving partitions to other brokers");
    cluster.leave().await;
    tracing::info!("shutting down: uploading what the WAL holds");
    // Compaction and the cleaner's rewrites stop at once rather than finish a round first (at
    // the maximum produce rate a round of compaction held the shutdown up for 30 s).
    engine.stop_background();
    shutdown.send_replace(true);
    for task in network {
        let _ = task.await;
    }
    let _ = internal.await;
    for task in background {
        let _ = task.await;
    }
    if !groups.store_states().await {
        tracing::warn!("some group states were not stored; their members will rejoin");
    }
    groups.shutdown();
    cluster.stop().await;
    topics.close().await;
    engine.close().await.context("closing the storage engine")?;
    let _ = admin.await;
    tracing::info!("stopped");
    Ok(Exit::Stopped)
}

/// After being replaced: nothing here may be uploaded or handed over (its partitions and its
/// WAL are another broker's now). Stops listening; each step is bounded, and what is left when
/// one runs out is dropped with the runtime (the process starts again anyway).
async fn tear_down_replaced(running: Running, groups: &Arc<weir_group::GroupCoordinator>) {
    running.ready.store(false, Ordering::SeqCst);
    running.shutdown.send_replace(true);
    let (network, internal, admin) = (running.network, running.internal, running.admin);
    bounded("the listeners", async {
        for task in network {
            let _ = task.await;
        }
        let _ = internal.await;
        let _ = admin.await;
    })
    .await;
    groups.shutdown();
    bounded("the cluster's tasks", running.cluster.stop()).await;
}

/// How long each step of the teardown after being replaced may take.
const REPLACED_STEP_BOUND: Duration = Duration::from_secs(15);

/// Waits for one step of the teardown after being replaced, at most [`REPLACED_STEP_BOUND`];
/// says which step ran out.
async fn bounded(step: &str, f: impl std::future::Future<Output = ()>) {
    if tokio::time::timeout(REPLACED_STEP_BOUND, f).await.is_err() {
        tracing::warn!(
            step,
            bound_s = REPLACED_STEP_BOUND.as_secs(),
            "after being replaced: a step of the teardown did not finish in time; what is left of it is dropped with the runtime"
        );
    }
}

/// Ends the process if the shutdown under way is not done within `bound` (0: no bound), or at
/// a second signal. A thread of its own, not a task: whatever holds the shutdown up (a
/// metadata store that does not answer, a wedged request) must not hold this up too. Exiting
/// here is a crash for the cluster: what was not handed over fails over, and what the WAL
/// acknowledged is read back by whoever takes over (or by this broker when it starts again).
fn bound_the_shutdown(bound: Duration, mut signals: Signals) {
    let started = std::time::Instant::now();
    let spawned = std::thread::Builder::new()
        .name("weir-shutdown-bound".into())
        .spawn(move || {
            if bound.is_zero() {
                return;
            }
            std::thread::sleep(bound);
            tracing::error!(
                bound_ms = bound.as_millis() as u64,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "shutdown not done within broker.shutdown_deadline_ms: exiting now; partitions not handed over fail over as after a crash"
            );
            std::process::exit(2);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "could not start the shutdown bound's thread; shutdown is unbounded");
    }
    // A second SIGTERM or SIGINT: the operator wants out now.
    tokio::spawn(async move {
        signals.recv().await;
        tracing::error!("a second signal during shutdown: exiting now");
        std::process::exit(2);
    });
}

/// SIGTERM and SIGINT, caught from the moment this is made: one that arrives before anyone
/// waits is kept for the first `recv`.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
