//! The broker's side of topics as Iceberg tables: the translator (`weir_iceberg::translator`)
//! reads the partitions this broker leads, as a `read_committed` fetch does, and writes to the
//! warehouse through a client of the broker's object store settings, in the catalog kept in
//! the metadata store.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use iceberg::io::FileIOBuilder;
use iceberg::NamespaceIdent;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use weir_iceberg::catalog::SqlCatalog;
use weir_iceberg::meters::IcebergMeters;
use weir_iceberg::storage::{WarehouseStorage, WarehouseStorageFactory};
use weir_iceberg::translator::{
    Fetched, InvalidAction, Mode, Schemas, Settings, Source, TopicSpec, Translator,
};
use weir_registry::format::Parsed;
use weir_registry::service::VersionSpec;
use weir_registry::Registry;

use crate::config::Config;

/// `weir.iceberg.target.lag.ms` when a topic does not set it.
const DEFAULT_TARGET_LAG: Duration = Duration::from_secs(60);

/// `weir.iceberg.snapshot.max.age.ms` when a topic does not set it: an hour of snapshots (120
/// at the default target lag) for time travel, and metadata files that stay small.
const DEFAULT_SNAPSHOT_MAX_AGE: Duration = Duration::from_secs(3600);

/// The partitions of this broker.
struct BrokerSource {
    topics: Arc<weir_partition::Topics>,
}

fn hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

#[async_trait]
impl Source for BrokerSource {
    fn topics(&self) -> Vec<TopicSpec> {
        let local = self.topics.local_partitions();
        self.topics
            .list()
            .into_iter()
            .filter_map(|t| {
                let mode = Mode::parse(t.configs.get("weir.iceberg.mode")?)?;
                let target_lag = t
                    .configs
                    .get("weir.iceberg.target.lag.ms")
                    .and_then(|v| v.parse::<u64>().ok())
                    .map_or(DEFAULT_TARGET_LAG, Duration::from_millis);
                let partitions = local
                    .iter()
                    .filter(|p| p.topic == t.name)
                    .map(|p| p.index)
                    .collect();
                Some(TopicSpec {
                    name: t.name.clone(),
                    topic_id: hex(&t.id),
                    mode,
                    target_lag,
                    partition_spec: t
                        .configs
                        .get("weir.iceberg.partition.spec")
                        .cloned()
                        .unwrap_or_default(),
                    invalid: t
                        .configs
                        .get("weir.iceberg.invalid.record.action")
                        .and_then(|v| InvalidAction::parse(v))
                        .unwrap_or_default(),
                    snapshot_max_age: match t
                        .configs
                        .get("weir.iceberg.snapshot.max.age.ms")
                        .and_then(|v| v.parse::<u64>().ok())
                    {
                        None => Some(DEFAULT_SNAPSHOT_MAX_AGE),
                        Some(0) => None,
                        Some(ms) => Some(Duration::from_millis(ms)),
                    },
                    partitions,
                })
            })
            .collect()
    }

    async fn read(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        max_bytes: usize,
    ) -> Result<Fetched, String> {
        let p = self
            .topics
            .partition(topic, partition)
            .ok_or_else(|| format!("{topic}-{partition} is not led here"))?;
        let (log_start, _, _) = p.stream_offsets();
        let data = p
            .fetch(from.max(log_start), max_bytes, true)
            .await
            .map_err(|e| format!("reading {topic}-{partition} at {from}: {e:?}"))?;
        Ok(Fetched {
            records: data.records,
            aborted: data
                .aborted
                .iter()
                .map(|a| (a.producer_id, a.first_offset as i64))
                .collect(),
            log_start: data.log_start_offset,
            stable_end: data.last_stable_offset,
        })
    }

    fn table_has(&self, topic: &str, partition: i32, offset: i64) {
        if let Some(p) = self.topics.partition(topic, partition) {
            p.set_retention_hold(Some(u64::try_from(offset).unwrap_or(0)));
        }
    }
}

/// The schema registry's schemas (the typed layouts).
struct RegistrySchemas(Arc<Registry>);

#[async_trait]
impl Schemas for RegistrySchemas {
    async fn by_id(&self, id: u32) -> Result<Arc<Parsed>, String> {
        let stored = self.0.schema_by_id(id).await.map_err(|e| e.message)?;
        self.0.parsed(&stored).await.map_err(|e| e.message)
    }

    async fn latest(&self, subject: &str) -> Result<(u32, Arc<Parsed>), String> {
        let v = self
            .0
            .version(subject, VersionSpec::Latest, false)
            .await
            .map_err(|e| e.message)?;
        let parsed = self.0.parsed(&v.schema).await.map_err(|e| e.message)?;
        Ok((v.schema.id, parsed))
    }
}

/// The warehouse of `config`: `iceberg.warehouse`, or `iceberg` under the object store's URL;
/// `None` where there can be none (a `memory://` store).
pub fn warehouse(config: &Config) -> anyhow::Result<Option<String>> {
    let set = config.iceberg.warehouse.trim_end_matches('/');
    if !set.is_empty() {
        return Ok(Some(set.to_string()));
    }
    let store = config.object_store_url()?;
    let store = store.trim_end_matches('/');
    if store.starts_with("memory:") {
        return Ok(None);
    }
    // Weir's own objects are named by a hash prefix of eight hex digits: `iceberg/` is apart.
    Ok(Some(format!("{store}/iceberg")))
}

/// Starts the translator, unless there is no warehouse.
pub fn start(
    config: &Config,
    broker: &Arc<weir_api::Broker>,
    meters: IcebergMeters,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Option<JoinHandle<()>>> {
    let section = &config.iceberg;
    if section.catalog != "sql" && section.catalog != "rest" {
        anyhow::bail!(
            "iceberg.catalog: {:?} is neither sql (the metadata store's catalog) nor rest",
            section.catalog
        );
    }
    let Some(warehouse) = warehouse(config)? else {
        tracing::info!(
            "iceberg: no warehouse (a memory:// object store): topics are not translated to tables"
        );
        return Ok(None);
    };
    let store = weir_storage::objstore::from_url(&warehouse)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("the Iceberg warehouse {warehouse}"))?;
    let storage = WarehouseStorage::new(&warehouse, store);
    let factory = Arc::new(WarehouseStorageFactory::new(storage));
    let catalog: Arc<dyn iceberg::Catalog> = if section.catalog == "rest" {
        let rest = weir_iceberg::rest::RestSettings {
            uri: section.rest_uri.clone(),
            credential: section.rest_credential.clone(),
            token: section.rest_token.clone(),
            oauth2_server_uri: section.rest_oauth2_server_uri.clone(),
            scope: section.rest_scope.clone(),
            warehouse: section.rest_warehouse.clone(),
            timeout: None,
        };
        Arc::new(
            weir_iceberg::rest::catalog(&section.catalog_name, &rest, factory)
                .with_context(|| format!("the REST catalog at {:?}", section.rest_uri))?,
        )
    } else {
        let io = FileIOBuilder::new(factory).build();
        let meta: Arc<dyn weir_meta::IcebergCatalog> = Arc::clone(&broker.meta) as _;
        Arc::new(SqlCatalog::new(&section.catalog_name, meta, io, &warehouse))
    };
    let namespace = NamespaceIdent::from_strs(section.namespace.split('.'))
        .with_context(|| format!("iceberg.namespace {:?}", section.namespace))?;
    let translator = Arc::new(
        Translator::new(
            Arc::new(BrokerSource {
                topics: Arc::clone(&broker.topics),
            }),
            catalog,
            Settings {
                namespace,
                cluster: broker.identity.cluster_id.clone(),
                broker: broker.identity.node_id,
                max_bytes_per_partition: usize::try_from(section.max_bytes_per_partition)
                    .unwrap_or(usize::MAX),
                batch_bytes: weir_iceberg::translator::BATCH_BYTES,
            },
            meters,
        )
        .with_schemas(Arc::new(RegistrySchemas(Arc::clone(
            broker.schemas.registry(),
        )))),
    );
    tracing::info!(%warehouse, catalog = %section.catalog_name, kind = %section.catalog, namespace = %section.namespace, "iceberg: translating topics with weir.iceberg.mode to tables");
    let tick = Duration::from_millis(section.interval_ms.max(100));
    // Translation is CPU-heavy (decoding, Arrow, zstd Parquet) and can wait: on a runtime of its
    // own, at the catch-up reads' lower priority, it never holds up a worker thread of the
    // produce path (docs/decisions/iceberg-translation-off-the-produce-path.md).
    let runtime =
        weir_storage::niced_runtime("weir-iceberg", 1, config.storage.catchup_nice.clamp(0, 19))
            .context("starting the Iceberg translator's runtime")?;
    let work = runtime.spawn(translator.run(tick, shutdown));
    Ok(Some(tokio::spawn(async move {
        // Owned here, so that it goes when this task ends or is aborted (without waiting: see
        // `BackgroundRuntime`).
        let _runtime = runtime;
        let _ = work.await;
    })))
}
