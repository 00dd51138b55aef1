//! `weir`: the broker binary. `weir serve` starts a broker; with no configuration it listens on
//! 127.0.0.1:9092, keeps everything under ./data and serves admin HTTP on 127.0.0.1:9644.

mod admin;
mod cluster_admin;
mod config;
mod drain;
mod listeners;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use tokio::net::TcpListener;

use crate::config::Config;

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main`; the environment variable `_RJEM_MALLOC_CONF` adds to
/// them. `thp:always` asks for transparent huge pages for the heap: without them the broker
/// produced about a fifth less at its maximum rate (the faults and TLB misses of 4 KiB pages
/// for every request buffer and batch copy). `background_thread` returns memory freed after a
/// burst (a catch-up, a rebalance) to the kernel while the broker is idle, instead of at its
/// next allocations.
#[export_name = "_rjem_malloc_conf"]
static JEMALLOC_CONF: &u8 = &b"thp:always,background_thread:true\0"[0];

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "A Kafka-compatible broker that keeps its data in object storage"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a broker.
    Serve(ServeArgs),
    /// Estimate the monthly cloud bill of a broker's workload (from its /metrics) or of a
    /// described workload, beside Apache Kafka's for the same.
    Cost(weir_cost::CostArgs),
    /// Load generator: produce and consume, report rates and latency percentiles.
    Perf(weir_perf::PerfArgs),
    /// Drain a broker for removal: move all its partitions away, wait until it leads none.
    Drain(drain::DrainArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// TOML configuration file; every key can also be set as WEIR_<SECTION>_<KEY>.
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long)]
    data_dir: Option<String>,
    /// Kafka listener, host:port.
    #[arg(long)]
    listen: Option<String>,
    /// Admin HTTP listener (/metrics, /healthz, /readyz), host:port.
    #[arg(long)]
    admin_listen: Option<String>,
    /// Address advertised to clients, host:port.
    #[arg(long)]
    advertised: Option<String>,
    #[arg(long)]
    node_id: Option<String>,
    #[arg(long)]
    zone: Option<String>,
    #[arg(long)]
    metadata_url: Option<String>,
    #[arg(long)]
    object_store_url: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Cost(args) => weir_cost::run(args),
        Command::Serve(args) => {
            let flags: Vec<(&str, &str, String)> = [
                ("broker", "data_dir", args.data_dir),
                ("broker", "listen", args.listen),
                ("broker", "admin_listen", args.admin_listen),
                ("broker", "advertised", args.advertised),
                ("broker", "node_id", args.node_id),
                ("broker", "zone", args.zone),
                ("metadata", "url", args.metadata_url),
                ("object_store", "url", args.object_store_url),
            ]
            .into_iter()
            .filter_map(|(s, k, v)| v.map(|v| (s, k, v)))
            .collect();
            let config = Config::load(args.config.as_deref(), std::env::vars(), &flags)?;
            loop {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .thread_name("weir")
                    .build()
                    .context("starting the runtime")?;
                match rt.block_on(serve(config.clone()))? {
                    Exit::Stopped => return Ok(()),
                    Exit::Replaced => {
                        // Everything this process held is another broker's now: drop it all
                        // (its WAL is sealed, its commits fenced) and start again, empty, on the
                        // same ports, as a supervisor would restart it.
                        rt.shutdown_timeout(Duration::from_secs(5));
                        tracing::warn!("starting again after being replaced");
                    }
                }
            }
        }
        Command::Perf(args) => weir_perf::run(args),
        Command::Drain(args) => drain::run(args),
    }
}

/// How `serve` ended.
enum Exit {
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

async fn serve(config: Config) -> anyhow::Result<Exit> {
    let data_dir = &config.broker.data_dir;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating data dir {}", data_dir.display()))?;

    let wal_faults = config.wal_faults();
    if wal_faults.is_on() {
        tracing::warn!(faults = ?wal_faults, "WAL fault injection is ON");
    }
    // Peers open a dead broker's WAL at the path it registered: make it absolute.
    let wal_path = std::path::absolute(config.wal_path())
        .with_context(|| format!("resolving the WAL path {}", config.wal_path().display()))?;
    let cluster_config = config.cluster();
    let mut wal_config = weir_wal::FileWalConfig {
        capacity: config.wal.capacity,
        direct_io: config.wal.direct_io,
        format: config.wal.format,
        faults: wal_faults,
        // Where a peer may recover this WAL, the broker reads the seal after every write.
        seal_check: cluster_config.fence_acks,
        ..weir_wal::FileWalConfig::new(wal_path.clone())
    };
    let meta_url = config.metadata_url();
    // What logs and errors show: never the password.
    let meta_shown = weir_meta::postgres::redact_password(&meta_url);
    let meta: Arc<dyn weir_meta::MetaStore> =
        if let Some(meta_path) = meta_url.strip_prefix("sqlite://") {
            Arc::new(
                weir_meta::SqliteMetaStore::open(std::path::Path::new(meta_path))
                    .context("opening the metadata store")?,
            )
        } else if meta_url.starts_with("postgres://") || meta_url.starts_with("postgresql://") {
            Arc::new(
                weir_meta::PostgresMetaStore::connect(&meta_url)
                    .await
                    .with_context(|| format!("opening the metadata store {meta_shown}"))?,
            )
        } else {
            bail!(
                "metadata url {meta_shown:?}: expected sqlite://PATH or \
                 postgres://USER:PASSWORD@HOST:PORT/DB"
            );
        };
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
    let defaults = weir_partition::TopicDefaults {
        num_partitions: config.broker.num_partitions.max(1),
        auto_create: config.broker.auto_create_topics,
        max_message_bytes: config.broker.message_max_bytes,
        retention_ms: config.broker.log_retention_ms,
        retention_bytes: config.broker.log_retention_bytes,
        producer_id_expiration_ms: config.broker.producer_id_expiration_ms,
        wal_kind,
        zone_routing: zone_routing.as_str().to_string(),
    };
    // Join the cluster (one broker on SQLite is a cluster of one): register, then open the
    // partitions the controller assigns here before taking clients.
    let specs = listeners::listeners(&config).map_err(anyhow::Error::msg)?;
    // The first listener's address is the broker's (peers and older readers of the registry
    // use it); clients are told the address of the listener they came in on.
    let (host, port) = (specs[0].advertised_host.clone(), specs[0].advertised_port);
    // TLS files are read before joining, so that a bad certificate stops the broker at once.
    // Client certificates are asked for on SSL listeners only: SASL_SSL clients prove who they
    // are with SASL (KIP-684: `ssl.client.auth` is not applied to SASL_SSL listeners).
    let load_tls =
        |protocol: weir_auth::SecurityProtocol| -> anyhow::Result<Option<Arc<weir_network::Tls>>> {
            if !specs.iter().any(|l| l.protocol == protocol) {
                return Ok(None);
            }
            let mut files = listeners::tls_files(&config).map_err(anyhow::Error::msg)?;
            if protocol == weir_auth::SecurityProtocol::SaslSsl {
                files.client_auth = weir_network::ClientAuth::None;
            }
            let tls = weir_network::Tls::load(files)
                .with_context(|| format!("loading the TLS files of the {protocol} listeners"))?;
            Ok(Some(Arc::new(tls)))
        };
    let ssl_tls = load_tls(weir_auth::SecurityProtocol::Ssl)?;
    let sasl_ssl_tls = load_tls(weir_auth::SecurityProtocol::SaslSsl)?;
    let internal_listen = config.internal_listen();
    let internal_listener = TcpListener::bind(&internal_listen)
        .await
        .with_context(|| format!("binding the internal listener {internal_listen}"))?;
    let internal_port = internal_listener
        .local_addr()
        .context("reading the internal listener's address")?
        .port();
    // An allocated node id is kept in the data directory (as Kafka keeps broker.id in
    // meta.properties), so that a restarted broker finds its partitions again.
    let node_id_file = data_dir.join("node_id");
    let node_id = match config.broker.node_id {
        Some(id) => Some(id),
        None if meta_url.starts_with("sqlite://") => Some(1),
        None => match std::fs::read_to_string(&node_id_file) {
            Ok(s) => {
                Some(s.trim().parse().with_context(|| {
                    format!("reading the node id in {}", node_id_file.display())
                })?)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading {}", node_id_file.display())),
        },
    };
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
    // Without a WAL file (`wal.kind = "object"`) there is nothing to claim, recover or seal:
    // the broker registers without one, and its partitions move at once when it dies.
    let cluster = match wal_kind {
        weir_storage::WalKind::File => {
            join_with_wal(&meta, registration, cluster_config.clone(), &wal_config).await?
        }
        weir_storage::WalKind::Object => {
            weir_cluster::Cluster::join(Arc::clone(&meta), registration, cluster_config.clone())
                .await
                .context("joining the cluster")?
        }
    };
    if node_id.is_none() {
        std::fs::write(&node_id_file, format!("{}\n", cluster.node_id()))
            .with_context(|| format!("saving the node id in {}", node_id_file.display()))?;
    }
    let (engine, file_wal) = match wal_kind {
        weir_storage::WalKind::File => {
            // The WAL is opened (and what it holds uploaded) only once this incarnation owns it.
            if cluster_config.fence_acks {
                wal_config.ack_gate = Some(Arc::new(SessionGate(cluster.session_lease())));
            }
            let wal = Arc::new(weir_wal::FileWal::open(wal_config).context("opening the WAL")?);
            tracing::info!(wal = %wal_path.display(), metadata = %meta_shown, objects = %store_url, "opening storage");
            let engine = weir_storage::Engine::open(
                config.storage(),
                Arc::clone(&wal) as Arc<dyn weir_wal::Wal>,
                Arc::clone(&meta),
                Arc::clone(&store),
            )
            .await
            .context("opening the storage engine")?;
            (engine, Some(wal))
        }
        weir_storage::WalKind::Object => {
            tracing::info!(wal = "object", metadata = %meta_shown, objects = %store_url, "opening storage without a WAL file");
            let engine = weir_storage::Engine::open_without_wal(
                config.storage(),
                Arc::clone(&meta),
                Arc::clone(&store),
            )
            .await
            .context("opening the storage engine")?;
            (engine, None)
        }
    };
    let fault_switch = match (config.broker.fault_switch, store_faults) {
        (true, Some(store)) => {
            tracing::warn!("the fault switch is ON: PUT /v1/faults injects faults");
            Some(Arc::new(admin::FaultSwitch::new(
                file_wal,
                store,
                config.wal_faults(),
                store_options.faults.clone(),
            )))
        }
        _ => None,
    };
    let topics = weir_partition::Topics::open(engine.clone(), Arc::clone(&meta), defaults)
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
    let groups = weir_group::GroupCoordinator::new(
        meta.clone(),
        weir_group::GroupConfig {
            initial_rebalance_delay: Duration::from_millis(
                config.broker.group_initial_rebalance_delay_ms,
            ),
            consumer_session_timeout: Duration::from_millis(
                config.broker.group_consumer_session_timeout_ms,
            ),
            consumer_heartbeat_interval: Duration::from_millis(
                config.broker.group_consumer_heartbeat_interval_ms,
            ),
            classic_max_size: config.broker.group_classic_max_size.max(1),
            consumer_max_size: config.broker.group_consumer_max_size.max(1),
            ..weir_group::GroupConfig::default()
        },
    );
    // Each group is coordinated by one live broker (the same rendezvous hash FindCoordinator
    // answers with); groups that move away are given up, and loaded from the store by the
    // broker they move to.
    {
        let view_cluster = Arc::clone(&cluster);
        let me = cluster.node_id();
        groups.set_ownership(Arc::new(move |g: &str| {
            view_cluster.view().coordinator(g).map(|b| b.node_id) == Some(me)
        }));
        let groups = Arc::clone(&groups);
        let mut views = cluster.watch();
        tokio::spawn(async move {
            while views.changed().await.is_ok() {
                groups.ownership_changed();
            }
        });
    }
    // Zone routing: hand-off objects go to the engine's store (its requests are metered with
    // the engine's), and a previous run's leftovers are deleted first.
    let zone_net = Arc::new(weir_zone::NetMeters::default());
    let zone_peers = weir_zone::Peers::new(
        cluster.node_id(),
        &config.broker.zone,
        Arc::clone(&zone_net),
    );
    let peer_secret: Option<Arc<[u8]>> = (!config.cluster.internal_secret.is_empty())
        .then(|| Arc::from(config.cluster.internal_secret.as_bytes()));
    if let Some(secret) = &peer_secret {
        zone_peers.set_secret(secret, config.cluster.legacy_peer_hello);
    }
    let forwarder = weir_zone::Forwarder::start(
        cluster.node_id(),
        engine.object_store(),
        Arc::clone(&zone_peers),
        config.handoff(),
    );
    {
        let forwarder = Arc::clone(&forwarder);
        tokio::spawn(async move {
            let n = forwarder.sweep().await;
            if n > 0 {
                tracing::info!(
                    objects = n,
                    "deleted hand-off objects left by the previous run"
                );
            }
        });
    }
    let zones = Arc::new(weir_api::ZoneServices::new(
        &config.broker.zone,
        engine.object_store(),
        zone_peers,
        forwarder,
        zone_net,
    ));
    let broker = weir_api::Broker::with_zones(
        weir_api::BrokerIdentity {
            node_id: cluster.node_id(),
            host,
            port,
            rack: (!config.broker.zone.is_empty()).then(|| config.broker.zone.clone()),
            cluster_id,
            log_dir: std::fs::canonicalize(data_dir)
                .unwrap_or_else(|_| data_dir.clone())
                .display()
                .to_string(),
        },
        Arc::clone(&cluster),
        Arc::clone(&topics),
        Arc::clone(&groups),
        Arc::clone(&meta),
        weir_api::ApiLimits {
            fetch_max_bytes: config.broker.fetch_max_bytes,
            fetch_session_slots: config.broker.fetch_session_cache_slots,
        },
        Some(Arc::clone(&zones)),
    );
    // Each transactional id is coordinated by one serving broker, as groups are; its state is
    // in the metadata store, so the broker it moves to goes on from there.
    {
        let view_cluster = Arc::clone(&cluster);
        let me = cluster.node_id();
        broker.txns.set_ownership(Arc::new(move |id: &str| {
            view_cluster
                .view()
                .coordinator(&weir_api::txn_key(id))
                .map(|b| b.node_id)
                == Some(me)
        }));
        broker.txns.start();
    }
    // The CIDR map (PUT /v1/zones/cidrs on any broker) is read every few seconds.
    {
        let (zones, meta) = (Arc::clone(&zones), Arc::clone(&meta));
        tokio::spawn(async move {
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
        });
    }
    if !config.broker.zone.is_empty() {
        broker.start_remote_read_uploads(Duration::from_millis(
            config.zones.remote_upload_interval_ms.max(10),
        ));
    }

    if let Some(super_users) = listeners::authorizer(&config).map_err(anyhow::Error::msg)? {
        broker.authz.enable(
            super_users,
            config.security.allow_everyone_if_no_acl_found,
            Vec::new(),
        );
        // The ACLs are in force before the first client is served...
        broker.refresh_acls().await.context("reading the ACLs")?;
        // ...and changes made through other brokers are seen within the interval.
        let broker = Arc::clone(&broker);
        let every = Duration::from_millis(config.security.acl_refresh_interval_ms.max(10));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Err(e) = broker.refresh_acls().await {
                    tracing::warn!(error = %e, "reading the ACLs failed; the ones in force stay");
                }
            }
        });
    }
    broker.quotas.set_window(weir_api::quotas::QuotaWindow {
        samples: config.security.quota_window_num,
        sample: Duration::from_secs(config.security.quota_window_size_seconds),
    });
    if let Some(path) = listeners::jwks_path(&config).map_err(anyhow::Error::msg)? {
        let v = listeners::oauth_validator(&config, &path).map_err(anyhow::Error::msg)?;
        broker.set_oauth_validator(v);
        // The identity provider rotates its keys: the file is read again when it changes.
        let (broker, config) = (Arc::clone(&broker), config.clone());
        let every = Duration::from_millis(config.security.ssl_reload_interval_ms.max(100));
        tokio::spawn(async move {
            let stamp = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
            let mut last = stamp(&path);
            loop {
                tokio::time::sleep(every).await;
                let now = stamp(&path);
                if now == last {
                    continue;
                }
                match listeners::oauth_validator(&config, &path) {
                    Ok(v) => {
                        broker.set_oauth_validator(v);
                        last = now;
                        tracing::info!(path = %path.display(), "JWKS changed: loaded again");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "JWKS changed but does not load; keeping the keys in use")
                    }
                }
            }
        });
    }
    // Client quotas apply with or without an authorizer: read now, then again each interval.
    broker
        .refresh_quotas()
        .await
        .context("reading the client quotas")?;
    {
        let broker = Arc::clone(&broker);
        let every = Duration::from_millis(config.security.acl_refresh_interval_ms.max(10));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Err(e) = broker.refresh_quotas().await {
                    tracing::warn!(error = %e, "reading the client quotas failed; the ones in force stay");
                }
            }
        });
    }
    let mut kafka_listeners = Vec::new();
    for spec in &specs {
        let socket = TcpListener::bind(&spec.bind)
            .await
            .with_context(|| format!("binding the Kafka listener {} ({})", spec.name, spec.bind))?;
        let security = listeners::security(&config, spec).map_err(anyhow::Error::msg)?;
        let tls = match spec.protocol {
            weir_auth::SecurityProtocol::Ssl => ssl_tls.clone(),
            weir_auth::SecurityProtocol::SaslSsl => sasl_ssl_tls.clone(),
            _ => None,
        };
        kafka_listeners.push((socket, security, tls));
    }
    let admin_listener = TcpListener::bind(&config.broker.admin_listen)
        .await
        .with_context(|| format!("binding the admin listener {}", config.broker.admin_listen))?;
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let net_meters = Arc::new(weir_network::NetworkMeters::default());
    let ready = Arc::new(AtomicBool::new(false));
    let net_config = weir_network::NetworkConfig {
        max_request_bytes: config.broker.max_request_bytes,
        max_connections: config.broker.max_connections,
        queued_max_request_bytes: config.broker.queued_max_request_bytes,
        queued_max_request_bytes_per_connection: config
            .broker
            .queued_max_request_bytes_per_connection,
        zone: (!config.zones.listener_zone.is_empty()).then(|| config.zones.listener_zone.clone()),
        stuck_after: Duration::from_millis(config.broker.request_stuck_ms.max(1)),
        ..Default::default()
    };
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
            Arc::clone(&broker),
            weir_network::NetworkConfig {
                listener: security,
                tls,
                ..net_config.clone()
            },
            Arc::clone(&net_meters),
            shutdown_rx.clone(),
        )));
    }
    let tls: Vec<_> = ssl_tls.into_iter().chain(sasl_ssl_tls).collect();
    if !tls.is_empty() {
        // Renewed certificates are picked up without a restart.
        let every = Duration::from_millis(config.security.ssl_reload_interval_ms.max(100));
        let mut shutdown = shutdown_rx.clone();
        network.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = shutdown.changed() => return,
                }
                for tls in &tls {
                    match tls.reload_if_changed() {
                        Ok(true) => tracing::info!(?tls, "TLS files changed: loaded again"),
                        Ok(false) => {}
                        Err(e) => tracing::warn!(error = %e, "TLS files changed but do not load; keeping the ones in use"),
                    }
                }
            }
        }));
    }
    // Broker-to-broker traffic: Kafka framing on its own port, with the internal API keys.
    let internal = tokio::spawn(weir_network::serve(
        internal_listener,
        Arc::clone(&broker),
        weir_network::NetworkConfig {
            internal: true,
            zone: None,
            listener: Arc::new(weir_api::ListenerSecurity {
                name: "INTERNAL".into(),
                peer_secret,
                legacy_peer_hello: config.cluster.legacy_peer_hello,
                ..Default::default()
            }),
            ..net_config
        },
        Arc::clone(&net_meters),
        shutdown_rx.clone(),
    ));
    let admin = tokio::spawn(admin::serve(
        admin_listener,
        admin::State {
            ready: Arc::clone(&ready),
            engine: engine.clone(),
            broker: Arc::clone(&broker),
            network: Arc::clone(&net_meters),
            cluster: Some(Arc::new(cluster_admin::Admin(Arc::clone(&cluster)))),
            faults: fault_switch,
            token: (!config.broker.admin_token.is_empty())
                .then(|| Arc::from(config.broker.admin_token.as_str())),
        },
        shutdown_rx.clone(),
    ));
    let snapshots = {
        let topics = Arc::clone(&topics);
        let every = Duration::from_millis(config.broker.producer_snapshot_interval_ms.max(100));
        let mut shutdown = shutdown_rx.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => topics.snapshot_producers().await,
                    _ = shutdown.changed() => return,
                }
            }
        })
    };
    // The cleaner of compacted topics.
    let cleaner = {
        let topics = Arc::clone(&topics);
        let every = Duration::from_millis(config.broker.log_cleaner_backoff_ms.max(100));
        let mut shutdown = shutdown_rx.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => { topics.clean_compacted().await; }
                    _ = shutdown.changed() => return,
                }
            }
        })
    };
    ready.store(true, Ordering::SeqCst);
    let listening: Vec<String> = specs
        .iter()
        .map(|l| {
            format!(
                "{}://{} ({}, advertised {}:{})",
                l.name, l.bind, l.protocol, l.advertised_host, l.advertised_port
            )
        })
        .collect();
    tracing::info!(node_id = cluster.node_id(), listeners = ?listening, internal_port, admin = %config.broker.admin_listen, "Weir is serving");

    let mut replaced = cluster.replaced();
    tokio::select! {
        r = wait_for_signal() => r?,
        _ = replaced.wait_for(|r| *r) => {
            // Nothing here may be uploaded or handed over: its partitions and its WAL are
            // another broker's now. Stop listening and start again.
            ready.store(false, Ordering::SeqCst);
            shutdown_tx.send_replace(true);
            // Each step is bounded: what is left when one runs out is dropped with the runtime
            // (the process starts again anyway). The chaos suite's PostgreSQL cut left a
            // replaced broker waiting here for ever, neither serving nor restarting.
            bounded("the listeners", async {
                for task in network {
                    let _ = task.await;
                }
                let _ = internal.await;
                let _ = admin.await;
            })
            .await;
            groups.shutdown();
            bounded("the cluster's tasks", cluster.stop()).await;
            return Ok(Exit::Replaced);
        }
    }
    ready.store(false, Ordering::SeqCst);
    bound_the_shutdown(Duration::from_millis(config.broker.shutdown_deadline_ms));
    // Controlled shutdown: while still serving, let the controller move this broker's
    // partitions to the others (clients are redirected with retriable errors).
    tracing::info!("shutting down: moving partitions to other brokers");
    cluster.leave().await;
    tracing::info!("shutting down: uploading what the WAL holds");
    // Compaction and the cleaner's rewrites stop at once rather than finish a round first (at
    // the maximum produce rate a round of compaction held the shutdown up for 30 s).
    engine.stop_background();
    shutdown_tx.send_replace(true);
    for task in network {
        let _ = task.await;
    }
    let _ = internal.await;
    let _ = snapshots.await;
    let _ = cleaner.await;
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
fn bound_the_shutdown(bound: Duration) {
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
    tokio::spawn(async {
        if wait_for_signal().await.is_ok() {
            tracing::error!("a second signal during shutdown: exiting now");
            std::process::exit(2);
        }
    });
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
