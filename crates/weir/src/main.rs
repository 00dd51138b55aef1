//! `weir`: the broker binary. `weir serve` starts a broker; with no configuration it listens on
//! 127.0.0.1:9092, keeps everything under ./data and serves admin HTTP on 127.0.0.1:9644.

mod acls;
mod admin;
mod admin_acls;
mod admin_client;
mod cloud;
mod cluster_admin;
mod config;
mod drain;
mod iceberg;
mod link;
mod link_groups;
mod listeners;
mod registry_gate;
mod schemas;
mod serve;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::config::Config;

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main`; the environment variable `_RJEM_MALLOC_CONF` adds to
/// them. `thp:never`: no transparent huge pages for the heap. With them, a quarter of the
/// broker's CPU at 20 MiB/s went to the kernel zeroing fresh 2 MiB pages under the log cache's
/// batch copies, and the maximum rate was no higher without them. `background_thread` returns
/// memory freed after a burst (a catch-up, a rebalance) to the kernel while the broker is idle,
/// instead of at its next allocations. `percpu_arena:percpu` (one arena per CPU, not
/// jemalloc's four) and `dirty_decay_ms:1000` (freed pages go back after about a second, not
/// ten) keep the resident memory near what is allocated under a long mixed load: with
/// jemalloc's defaults the two-hour soak's brokers kept 3-8 times their live bytes resident.
/// See `docs/decisions/allocator-jemalloc.md`.
#[export_name = "_rjem_malloc_conf"]
static JEMALLOC_CONF: &u8 =
    &b"thp:never,background_thread:true,percpu_arena:percpu,dirty_decay_ms:1000\0"[0];

/// The version and the commit it was built from (`build.rs`).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("WEIR_COMMIT"), ")");

#[derive(Parser)]
#[command(
    name = "weir",
    version = VERSION,
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
    /// Cluster links: mirror another Kafka cluster's topics at its offsets, then promote them.
    Link(link::LinkArgs),
    /// ACL bindings: the schema registry's subjects and global config (which Kafka's tools
    /// cannot name), and Kafka's topics and groups.
    Acls(acls::AclsArgs),
    /// The schema registry: list its subjects, or import another registry's schemas with their
    /// ids.
    Schemas(schemas::SchemasArgs),
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
    /// The broker's zone (clients with that client.rack are served in it); `auto`: found from
    /// the node's topology.kubernetes.io/zone label in a pod, else the cloud's instance metadata
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
                match rt.block_on(serve::serve(config.clone()))? {
                    serve::Exit::Stopped => return Ok(()),
                    serve::Exit::Replaced => {
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
        Command::Link(args) => link::run(args),
        Command::Acls(args) => acls::run(args),
        Command::Schemas(args) => schemas::run(args),
    }
}
