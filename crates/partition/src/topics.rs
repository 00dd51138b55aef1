//! The topic catalog: topics, their partitions (each a stream), and their configs, kept in the
//! metadata store and mirrored in memory for the request path.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use kafka_protocol::ResponseError;
use weir_meta::{MetaError, MetaStore, TopicMeta};
use weir_storage::{Engine, Retention, StorageError, WalKind};

use crate::clean::CleanerPolicy;
use crate::partition::Partition;

/// Broker-wide topic defaults (Kafka's broker configs of the same names).
#[derive(Debug, Clone)]
pub struct TopicDefaults {
    /// `num.partitions`
    pub num_partitions: u32,
    /// `auto.create.topics.enable`
    pub auto_create: bool,
    /// `message.max.bytes`
    pub max_message_bytes: usize,
    /// `log.retention.ms`
    pub retention_ms: i64,
    /// `log.retention.bytes`
    pub retention_bytes: i64,
    /// `producer.id.expiration.ms`: idempotent producers idle this long are forgotten.
    pub producer_id_expiration_ms: i64,
    /// `wal.kind`: the WAL of topics that do not set `weir.wal.kind`.
    pub wal_kind: WalKind,
    /// `zones.routing`: how topics that do not set `weir.zone.routing` serve clients outside
    /// their leader's zone (`in-zone` or `leader`).
    pub zone_routing: String,
}

impl Default for TopicDefaults {
    fn default() -> Self {
        TopicDefaults {
            num_partitions: 1,
            auto_create: true,
            max_message_bytes: 1_048_588,
            retention_ms: 604_800_000,
            retention_bytes: -1,
            producer_id_expiration_ms: 86_400_000,
            wal_kind: WalKind::File,
            zone_routing: ZONE_ROUTING_IN_ZONE.to_string(),
        }
    }
}

/// A topic config as DescribeConfigs reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: String,
    pub is_default: bool,
}

/// Producer snapshots saved in one metadata transaction: few enough that the transaction
/// (which holds SQLite's one connection) stays short, many enough that 10,000 partitions take
/// ten commits rather than 10,000.
pub const SNAPSHOTS_PER_COMMIT: usize = 1_000;

/// A topic as the catalog knows it. Its partitions may be led by any broker; those led here are
/// open in [`Topics`].
pub struct Topic {
    pub name: String,
    pub id: [u8; 16],
    /// The stream of each partition, by partition number.
    pub streams: Vec<u64>,
    pub configs: BTreeMap<String, String>,
}

impl Topic {
    pub fn partition_count(&self) -> usize {
        self.streams.len()
    }

    /// The stream of partition `index`, if the topic has it.
    pub fn stream(&self, index: i32) -> Option<u64> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.streams.get(i).copied())
    }

    fn from_meta(t: TopicMeta) -> Topic {
        Topic {
            name: t.name,
            id: t.topic_id,
            streams: t.streams,
            configs: t.configs,
        }
    }
}

/// Where a partition is served.
pub enum Lookup {
    /// Led by this broker and open.
    Local(Arc<Partition>),
    /// The partition exists but this broker does not lead it (now).
    NotHere,
    /// No such topic or partition.
    Unknown,
}

/// An error of an admin operation: the Kafka code and a message for the client.
pub type AdminError = (ResponseError, String);

fn meta_err(e: MetaError) -> AdminError {
    match e {
        MetaError::TopicExists(t) => (ResponseError::TopicAlreadyExists, format!("Topic '{t}' already exists.")),
        MetaError::UnknownTopic(t) => (ResponseError::UnknownTopicOrPartition, format!("Topic '{t}' does not exist.")),
        MetaError::InvalidPartitions { topic, current, requested } => (
            ResponseError::InvalidPartitions,
            format!("Topic {topic} has {current} partitions, which is higher than the requested {requested}."),
        ),
        e => (ResponseError::KafkaStorageError, e.to_string()),
    }
}

/// The topic catalog (every topic of the cluster) and the partitions this broker leads.
pub struct Topics {
    engine: Engine,
    meta: Arc<dyn MetaStore>,
    defaults: TopicDefaults,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// Partitions led here, by stream.
    local: RwLock<HashMap<u64, Arc<Partition>>>,
    /// Serialises changes to the catalog.
    changes: tokio::sync::Mutex<()>,
    /// Woken whenever a partition opens here, for requests that wait for one being moved here.
    opened: tokio::sync::Notify,
    /// Streams whose last attempt to open here failed: requests do not wait for them.
    open_failed: Mutex<HashSet<u64>>,
    /// What the cleaner of compacted topics did here.
    pub cleaner: CleanerMeters,
}

/// The cleaner of compacted topics, counted.
#[derive(Debug, Default)]
pub struct CleanerMeters {
    /// Cleans of a partition that rewrote something.
    pub cleans: weir_metrics::Counter,
    pub records_removed: weir_metrics::Counter,
    /// Bytes of the ranges rewritten, before and after.
    pub bytes_read: weir_metrics::Counter,
    pub bytes_written: weir_metrics::Counter,
    pub failures: weir_metrics::Counter,
}

impl CleanerMeters {
    /// Declares the cleaner's meters (compacted topics).
    pub fn register(&self, r: &mut weir_metrics::Registry) {
        r.counter(
            "cleaner_cleans",
            "Cleans of compacted partitions that rewrote data.",
            &self.cleans,
        );
        r.counter(
            "cleaner_records_removed",
            "Records the cleaner of compacted topics removed (superseded, deleted, aborted).",
            &self.records_removed,
        );
        r.counter(
            "cleaner_bytes_read",
            "Bytes of the ranges the cleaner rewrote.",
            &self.bytes_read,
        );
        r.counter(
            "cleaner_bytes_written",
            "Bytes the cleaner wrote in their place.",
            &self.bytes_written,
        );
        r.counter(
            "cleaner_failures",
            "Cleans that failed (retried at the next round).",
            &self.failures,
        );
    }
}

/// Kafka's rule for topic names.
pub fn validate_topic_name(name: &str) -> Result<(), AdminError> {
    let bad = |m: &str| Err((ResponseError::InvalidTopicException, m.to_string()));
    if name.is_empty() {
        return bad("Topic name is illegal, it can't be empty");
    }
    if name == "." || name == ".." {
        return bad("Topic name cannot be \".\" or \"..\"");
    }
    if name.len() > 249 {
        return bad("Topic name is illegal, it can't be longer than 249 characters");
    }
    if !name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_' || c == b'-')
    {
        return bad(&format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

impl Topics {
    /// Loads the catalog. No partition is open until the cluster assigns it here
    /// ([`Topics::open_partition`]).
    pub async fn open(
        engine: Engine,
        meta: Arc<dyn MetaStore>,
        defaults: TopicDefaults,
    ) -> Result<Arc<Topics>, StorageError> {
        let topics = Arc::new(Topics {
            engine,
            meta,
            defaults,
            topics: RwLock::new(BTreeMap::new()),
            local: RwLock::new(HashMap::new()),
            changes: tokio::sync::Mutex::new(()),
            opened: tokio::sync::Notify::new(),
            open_failed: Mutex::new(HashSet::new()),
            cleaner: CleanerMeters::default(),
        });
        topics.refresh().await?;
        Ok(topics)
    }

    /// Re-reads the catalog from the metadata store: topics created, changed or deleted by other
    /// brokers. Partitions of deleted topics are dropped (their data is gone with the topic).
    pub async fn refresh(&self) -> Result<(), StorageError> {
        let _change = self.changes.lock().await;
        let listed = self.meta.list_topics().await?;
        let mut fresh = BTreeMap::new();
        for t in listed {
            fresh.insert(t.name.clone(), Arc::new(Topic::from_meta(t)));
        }
        let old = std::mem::replace(&mut *self.write_topics(), fresh.clone());
        for (name, t) in &fresh {
            if old.get(name).is_some_and(|o| o.configs != t.configs) {
                self.apply_configs(t);
            }
        }
        let kept: std::collections::HashSet<u64> = fresh
            .values()
            .flat_map(|t| t.streams.iter().copied())
            .collect();
        let gone: Vec<u64> = self
            .read_local()
            .keys()
            .filter(|s| !kept.contains(s))
            .copied()
            .collect();
        for s in gone {
            self.write_local().remove(&s);
            self.engine.drop_stream(s);
        }
        Ok(())
    }

    fn write_topics(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<Topic>>> {
        self.topics.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read_local(&self) -> std::sync::RwLockReadGuard<'_, HashMap<u64, Arc<Partition>>> {
        self.local.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_local(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<u64, Arc<Partition>>> {
        self.local.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The topic and partition number of a stream.
    fn find_stream(&self, stream_id: u64) -> Option<(Arc<Topic>, i32)> {
        let topics = self.topics.read().unwrap_or_else(|e| e.into_inner());
        topics.values().find_map(|t| {
            t.streams
                .iter()
                .position(|&s| s == stream_id)
                .map(|i| (Arc::clone(t), i as i32))
        })
    }

    /// Takes leadership of a partition: opens its stream at a new leader epoch and rebuilds its
    /// producer state. The cluster calls this for the partitions it assigns here.
    pub async fn open_partition(&self, stream_id: u64) -> Result<Arc<Partition>, StorageError> {
        if let Some(p) = self.read_local().get(&stream_id) {
            return Ok(Arc::clone(p));
        }
        let found = match self.find_stream(stream_id) {
            Some(f) => Some(f),
            None => {
                self.refresh().await?;
                self.find_stream(stream_id)
            }
        };
        let Some((t, index)) = found else {
            return Err(StorageError::NotOpen(stream_id));
        };
        let p = Partition::open(
            self.engine.clone(),
            &*self.meta,
            &t.name,
            index,
            stream_id,
            self.max_message_bytes(&t.configs),
            self.wal_kind(&t.configs),
        )
        .await?;
        p.set_retention(self.retention(&t.configs));
        // An Iceberg topic's records stay until its table has them: held from the start until
        // the translator says how far the table is.
        if iceberg_mode(&t.configs) {
            p.set_retention_hold(Some(0));
        }
        p.set_compacted(Self::compacted(&t.configs));
        p.set_mirror(t.configs.contains_key(MIRROR_LINK_CONFIG));
        self.write_local().insert(stream_id, Arc::clone(&p));
        self.opened.notify_waiters();
        Ok(p)
    }

    /// Whether the last attempt to open the partition here failed (it is retried; meanwhile
    /// requests for it are refused at once rather than held).
    pub fn failed_to_open(&self, topic: &str, index: i32) -> bool {
        let Some(stream) = self.get(topic).and_then(|t| t.stream(index)) else {
            return false;
        };
        self.open_failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&stream)
    }

    /// Resolves the next time a partition opens here. Create it before looking a partition up,
    /// so that an opening between the look-up and the wait is not missed.
    pub fn partition_opened(&self) -> tokio::sync::futures::Notified<'_> {
        self.opened.notified()
    }

    /// Gives up leadership of a partition: new requests find it gone at once; what its WAL
    /// holds is uploaded and committed before this returns, so the next leader has it all.
    pub async fn close_partition(&self, stream_id: u64) -> Result<(), StorageError> {
        let p = self.write_local().remove(&stream_id);
        match p {
            Some(p) => p.close(&*self.meta).await,
            None => Ok(()),
        }
    }

    /// Streams of the partitions open here.
    pub fn local_streams(&self) -> Vec<u64> {
        self.read_local().keys().copied().collect()
    }

    /// Every partition open here.
    pub fn local_partitions(&self) -> Vec<Arc<Partition>> {
        self.read_local().values().cloned().collect()
    }

    /// Declares `weir_partition_high_watermark` for the partitions led here: each partition's
    /// leader exports it, so a group's lag (with `weir_consumer_group_committed_offset`, from its
    /// coordinator) needs no broker to know every partition's end.
    pub fn register_partition_meters(self: &Arc<Self>, r: &mut weir_metrics::Registry) {
        let topics = Arc::downgrade(self);
        r.gauges_read(
            "partition_high_watermark",
            "High watermark (the offset after the last record consumers may read) of each partition led here.",
            move || {
                let Some(topics) = topics.upgrade() else {
                    return Vec::new();
                };
                topics
                    .local_partitions()
                    .iter()
                    .filter(|p| !p.is_gone())
                    .map(|p| {
                        let labels = vec![
                            ("topic", p.topic.clone()),
                            ("partition", p.index.to_string()),
                        ];
                        (labels, p.offsets().1)
                    })
                    .collect()
            },
        );
    }

    /// A partition of a topic its cluster link promoted, led here: see
    /// [`Partition::end_mirror`]. In the background: it appends markers.
    fn end_mirror(&self, p: Arc<Partition>) {
        let meta = Arc::clone(&self.meta);
        tokio::spawn(async move {
            match p.end_mirror(&*meta).await {
                Ok(aborted) => tracing::info!(topic = %p.topic, partition = p.index, aborted,
                    "mirror promoted: writable now"),
                Err(e) => tracing::warn!(topic = %p.topic, partition = p.index, error = %e,
                    "ending a promoted mirror's source transactions failed"),
            }
        });
    }

    fn apply_configs(&self, t: &Topic) {
        let retention = self.retention(&t.configs);
        let max = self.max_message_bytes(&t.configs);
        let wal_kind = self.wal_kind(&t.configs);
        let local = self.read_local();
        for s in &t.streams {
            if let Some(p) = local.get(s) {
                p.set_retention(retention);
                match (iceberg_mode(&t.configs), p.retention_hold()) {
                    (true, None) => p.set_retention_hold(Some(0)),
                    (false, Some(_)) => p.set_retention_hold(None),
                    _ => {}
                }
                p.set_max_message_bytes(max);
                p.set_compacted(Self::compacted(&t.configs));
                let mirror = t.configs.contains_key(MIRROR_LINK_CONFIG);
                if p.set_mirror(mirror) && !mirror {
                    self.end_mirror(Arc::clone(p));
                }
                // Switching waits for the appends in flight on the old WAL (and, to the
                // object WAL, for the upload of what the WAL file holds): in the background.
                let (engine, stream_id, topic, index) =
                    (self.engine.clone(), *s, p.topic.clone(), p.index);
                tokio::spawn(async move {
                    if let Err(e) = engine.set_wal_kind(stream_id, wal_kind).await {
                        tracing::warn!(%topic, partition = index, wal = %wal_kind, error = %e, "switching the partition's WAL failed; it applies when the partition next opens");
                    }
                });
            }
        }
    }

    /// Tells the other brokers that the catalog changed.
    async fn announce(&self) {
        if let Err(e) = self.meta.notify_cluster().await {
            tracing::warn!(error = %e, "announcing a topic change failed; brokers see it within 10 s");
        }
    }

    fn insert(&self, t: Arc<Topic>) {
        self.write_topics().insert(t.name.clone(), t);
    }

    pub fn defaults(&self) -> &TopicDefaults {
        &self.defaults
    }

    pub fn get(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    pub fn get_by_id(&self, id: &[u8; 16]) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .find(|t| &t.id == id)
            .cloned()
    }

    pub fn list(&self) -> Vec<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The partition of `stream_id`, if this broker leads it.
    pub fn partition_by_stream(&self, stream_id: u64) -> Option<Arc<Partition>> {
        self.local
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&stream_id)
            .cloned()
    }

    /// The partition, if this broker leads it.
    pub fn partition(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        match self.lookup(topic, index) {
            Lookup::Local(p) => Some(p),
            _ => None,
        }
    }

    /// The leader epoch of each of `t`'s partitions that is open here, by partition number (one
    /// look at the open partitions for the whole topic).
    pub fn local_leader_epochs(&self, t: &Topic) -> Vec<Option<i32>> {
        let local = self.read_local();
        t.streams
            .iter()
            .map(|s| local.get(s).map(|p| p.leader_epoch))
            .collect()
    }

    /// The error for a request to a partition that [`Topics::partition`] did not find here:
    /// NOT_LEADER_OR_FOLLOWER if it exists on another broker (retriable: the client refreshes
    /// its metadata), else UNKNOWN_TOPIC_OR_PARTITION.
    pub fn missing_error(&self, topic: &str, index: i32) -> ResponseError {
        match self.lookup(topic, index) {
            Lookup::Unknown => ResponseError::UnknownTopicOrPartition,
            _ => ResponseError::NotLeaderOrFollower,
        }
    }

    /// [`Topics::lookup`] of each of `indices`, partitions of `t`, with one look at the open
    /// partitions for all of them: a fetch names thousands of partitions of one topic.
    pub fn lookup_in(&self, t: &Topic, indices: impl IntoIterator<Item = i32>) -> Vec<Lookup> {
        let local = self.read_local();
        indices
            .into_iter()
            .map(|index| {
                let Some(stream) = t.stream(index) else {
                    return Lookup::Unknown;
                };
                match local.get(&stream) {
                    Some(p) => Lookup::Local(Arc::clone(p)),
                    None => Lookup::NotHere,
                }
            })
            .collect()
    }

    /// Which of `indices` (their positions) name partitions of `t` that exist but are not open
    /// here, with one look at the open partitions and no copies.
    pub fn not_here_in(&self, t: &Topic, indices: impl IntoIterator<Item = i32>) -> Vec<usize> {
        let local = self.read_local();
        indices
            .into_iter()
            .enumerate()
            .filter(|(_, index)| t.stream(*index).is_some_and(|s| !local.contains_key(&s)))
            .map(|(at, _)| at)
            .collect()
    }

    pub fn lookup(&self, topic: &str, index: i32) -> Lookup {
        let Some(t) = self.get(topic) else {
            return Lookup::Unknown;
        };
        let Some(stream) = t.stream(index) else {
            return Lookup::Unknown;
        };
        match self.read_local().get(&stream) {
            Some(p) => Lookup::Local(Arc::clone(p)),
            None => Lookup::NotHere,
        }
    }

    /// The topic, created with the defaults if it does not exist and auto-creation is on.
    pub async fn get_or_create(&self, name: &str) -> Option<Arc<Topic>> {
        if let Some(t) = self.get(name) {
            return Some(t);
        }
        if !self.defaults.auto_create || validate_topic_name(name).is_err() {
            return None;
        }
        match self.create(name, -1, BTreeMap::new(), false).await {
            Ok(t) => Some(t),
            Err((ResponseError::TopicAlreadyExists, _)) => {
                // Created by another broker at the same moment: read it from the store.
                if self.get(name).is_none() {
                    let _ = self.refresh().await;
                }
                self.get(name)
            }
            Err((_, msg)) => {
                tracing::warn!(topic = name, error = %msg, "auto-creating a topic failed");
                None
            }
        }
    }

    pub async fn create(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Arc<Topic>, AdminError> {
        validate_topic_name(name)?;
        let count = match partitions {
            -1 => self.defaults.num_partitions,
            n if n > 0 && n <= 100_000 => n as u32,
            n => {
                return Err((
                    ResponseError::InvalidPartitions,
                    format!("Number of partitions must be larger than 0, got {n}."),
                ))
            }
        };
        for (k, v) in &configs {
            validate_config(k, v)?;
        }
        let _change = self.changes.lock().await;
        if self.get(name).is_some() {
            return Err((
                ResponseError::TopicAlreadyExists,
                format!("Topic '{name}' already exists."),
            ));
        }
        if validate_only {
            return Ok(Arc::new(Topic {
                name: name.to_string(),
                id: [0; 16],
                streams: vec![0; count as usize],
                configs,
            }));
        }
        let id = new_topic_id();
        let meta = self
            .meta
            .create_topic(name, id, count, configs)
            .await
            .map_err(meta_err)?;
        let topic = Arc::new(Topic::from_meta(meta));
        self.insert(Arc::clone(&topic));
        drop(_change);
        self.announce().await;
        tracing::info!(topic = name, partitions = count, "topic created");
        Ok(topic)
    }

    pub async fn delete(&self, name: &str) -> Result<[u8; 16], AdminError> {
        let _change = self.changes.lock().await;
        let t = self.get(name).ok_or_else(|| {
            (
                ResponseError::UnknownTopicOrPartition,
                format!("Topic '{name}' does not exist."),
            )
        })?;
        // The metadata store first: if it refuses, nothing has changed. Then the streams leave
        // the engine at once, uploading nothing; an upload that meets them before that drops
        // them itself, so a deleted topic never holds back the other streams' commits.
        self.meta.delete_topic(name).await.map_err(meta_err)?;
        self.write_topics().remove(name);
        for s in &t.streams {
            self.write_local().remove(s);
            self.engine.drop_stream(*s);
        }
        drop(_change);
        self.announce().await;
        tracing::info!(topic = name, "topic deleted");
        Ok(t.id)
    }

    pub async fn add_partitions(
        &self,
        name: &str,
        total: i32,
        validate_only: bool,
    ) -> Result<(), AdminError> {
        let _change = self.changes.lock().await;
        let t = self.get(name).ok_or_else(|| {
            (
                ResponseError::UnknownTopicOrPartition,
                format!("Topic '{name}' does not exist."),
            )
        })?;
        let current = t.partition_count() as i32;
        if total <= current {
            return Err((
                ResponseError::InvalidPartitions,
                format!("Topic currently has {current} partitions, which is higher than the requested {total}."),
            ));
        }
        if validate_only {
            return Ok(());
        }
        let meta = self
            .meta
            .add_partitions(name, total as u32)
            .await
            .map_err(meta_err)?;
        self.insert(Arc::new(Topic::from_meta(meta)));
        drop(_change);
        self.announce().await;
        Ok(())
    }

    /// Replaces a topic's configs (the API layer works out incremental changes).
    pub async fn set_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(), AdminError> {
        for (k, v) in &configs {
            validate_config(k, v)?;
        }
        let _change = self.changes.lock().await;
        let t = self.get(name).ok_or_else(|| {
            (
                ResponseError::UnknownTopicOrPartition,
                format!("Topic '{name}' does not exist."),
            )
        })?;
        if validate_only {
            return Ok(());
        }
        self.meta
            .set_topic_configs(name, configs.clone())
            .await
            .map_err(meta_err)?;
        self.publish_configs(&t, configs);
        drop(_change);
        self.announce().await;
        Ok(())
    }

    /// Puts `t` with its new (stored) `configs` in the catalog and applies them to its
    /// partitions. Called under the `changes` lock.
    fn publish_configs(&self, t: &Topic, configs: BTreeMap<String, String>) {
        let topic = Arc::new(Topic {
            name: t.name.clone(),
            id: t.id,
            streams: t.streams.clone(),
            configs,
        });
        self.apply_configs(&topic);
        self.insert(topic);
    }

    /// Changes a topic's configs by `change`, applied to the configs as the metadata store holds
    /// them, and stores the result only if they are still those (compare-and-set): a change
    /// made meanwhile through another broker is read again and `change` applied to it, never
    /// overwritten (IncrementalAlterConfigs).
    pub async fn alter_configs(
        &self,
        name: &str,
        change: impl Fn(&BTreeMap<String, String>) -> Result<BTreeMap<String, String>, AdminError>,
        validate_only: bool,
    ) -> Result<(), AdminError> {
        /// Rounds of read, change, compare-and-set before giving up: each lost round means
        /// another alter of the same topic succeeded meanwhile.
        const ROUNDS: usize = 8;
        for _ in 0..ROUNDS {
            self.refresh()
                .await
                .map_err(|e| (ResponseError::KafkaStorageError, e.to_string()))?;
            let _change = self.changes.lock().await;
            let t = self.get(name).ok_or_else(|| {
                (
                    ResponseError::UnknownTopicOrPartition,
                    format!("Topic '{name}' does not exist."),
                )
            })?;
            let configs = change(&t.configs)?;
            for (k, v) in &configs {
                validate_config(k, v)?;
            }
            if validate_only {
                return Ok(());
            }
            let stored = self
                .meta
                .replace_topic_configs(name, &t.configs, configs.clone())
                .await
                .map_err(meta_err)?;
            if !stored {
                tracing::debug!(
                    topic = name,
                    "topic configs changed meanwhile; reading them again"
                );
                continue;
            }
            self.publish_configs(&t, configs);
            drop(_change);
            self.announce().await;
            return Ok(());
        }
        Err((
            ResponseError::RequestTimedOut,
            format!("The configs of topic '{name}' kept changing while this alter was applied; try again."),
        ))
    }

    /// Every topic config with its value, default or set.
    pub fn describe_configs(&self, t: &Topic) -> Vec<ConfigEntry> {
        let mut out: Vec<ConfigEntry> = self
            .default_configs()
            .into_iter()
            .map(|(name, value)| match t.configs.get(&name) {
                Some(v) => ConfigEntry {
                    name,
                    value: v.clone(),
                    is_default: false,
                },
                None => ConfigEntry {
                    name,
                    value,
                    is_default: true,
                },
            })
            .collect();
        for (k, v) in &t.configs {
            if !out.iter().any(|e| &e.name == k) {
                out.push(ConfigEntry {
                    name: k.clone(),
                    value: v.clone(),
                    is_default: false,
                });
            }
        }
        out
    }

    fn default_configs(&self) -> BTreeMap<String, String> {
        let d = &self.defaults;
        [
            ("cleanup.policy", "delete".to_string()),
            ("compression.type", "producer".to_string()),
            ("delete.retention.ms", "86400000".to_string()),
            ("file.delete.delay.ms", "60000".to_string()),
            ("flush.messages", i64::MAX.to_string()),
            ("flush.ms", i64::MAX.to_string()),
            ("max.compaction.lag.ms", i64::MAX.to_string()),
            ("max.message.bytes", d.max_message_bytes.to_string()),
            ("message.timestamp.type", "CreateTime".to_string()),
            ("min.cleanable.dirty.ratio", "0.5".to_string()),
            ("min.compaction.lag.ms", "0".to_string()),
            ("min.insync.replicas", "1".to_string()),
            ("retention.bytes", d.retention_bytes.to_string()),
            ("retention.ms", d.retention_ms.to_string()),
            ("segment.bytes", "1073741824".to_string()),
            ("segment.ms", "604800000".to_string()),
            ("unclean.leader.election.enable", "false".to_string()),
            (WAL_KIND_CONFIG, d.wal_kind.to_string()),
            (ZONE_ROUTING_CONFIG, d.zone_routing.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    fn wal_kind(&self, configs: &BTreeMap<String, String>) -> WalKind {
        configs
            .get(WAL_KIND_CONFIG)
            .and_then(|v| v.parse().ok())
            .unwrap_or(self.defaults.wal_kind)
    }

    /// The topic's `weir.zone.routing`, or the broker's default.
    pub fn zone_routing<'a>(&'a self, t: &'a Topic) -> &'a str {
        t.configs
            .get(ZONE_ROUTING_CONFIG)
            .map_or(self.defaults.zone_routing.as_str(), String::as_str)
    }

    fn max_message_bytes(&self, configs: &BTreeMap<String, String>) -> usize {
        configs
            .get("max.message.bytes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(self.defaults.max_message_bytes)
    }

    /// `cleanup.policy` includes `compact`.
    fn compacted(configs: &BTreeMap<String, String>) -> bool {
        configs
            .get("cleanup.policy")
            .is_some_and(|p| p.split(',').any(|p| p.trim() == "compact"))
    }

    /// A compacted topic's cleaning settings.
    fn cleaner_policy(configs: &BTreeMap<String, String>) -> CleanerPolicy {
        let d = CleanerPolicy::default();
        let num = |k: &str, d: i64| {
            configs
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(d)
        };
        CleanerPolicy {
            delete_retention_ms: num("delete.retention.ms", d.delete_retention_ms),
            min_compaction_lag_ms: num("min.compaction.lag.ms", d.min_compaction_lag_ms),
            min_cleanable_dirty_ratio: configs
                .get("min.cleanable.dirty.ratio")
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(d.min_cleanable_dirty_ratio),
        }
    }

    /// Cleans every compacted partition led here that has enough to clean (see
    /// [`crate::clean`]); returns how many were cleaned. Each first saves its producer state,
    /// so that the cleaner may go up to the high watermark it is at.
    pub async fn clean_compacted(&self) -> usize {
        let mut cleaned = 0;
        for p in self.local_partitions() {
            if self.engine.is_stopping() {
                break;
            }
            if !p.is_compacted() {
                continue;
            }
            let Some(t) = self.get(&p.topic) else {
                continue;
            };
            let policy = Self::cleaner_policy(&t.configs);
            // Nothing new in object storage since the last look finds nothing new to clean
            // (unless records wait out min.compaction.lag.ms): no snapshot, no store reads.
            let (_, committed, _) = p.stream_offsets();
            if policy.min_compaction_lag_ms == 0 && p.cleaner_looked_at() == Some(committed) {
                continue;
            }
            if let Err(e) = p.snapshot_producers(&*self.meta).await {
                tracing::debug!(topic = %p.topic, partition = p.index, error = %e, "producer snapshot before cleaning failed");
                continue;
            }
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            let result = p.clean(&*self.meta, policy, now).await;
            if result.is_ok() {
                p.set_cleaner_looked_at(committed);
            }
            match result {
                Ok(Some(c)) => {
                    cleaned += 1;
                    self.cleaner.cleans.inc();
                    self.cleaner.records_removed.add(c.records_removed);
                    self.cleaner.bytes_read.add(c.bytes_before);
                    self.cleaner.bytes_written.add(c.bytes_after);
                    tracing::info!(topic = %p.topic, partition = p.index, checkpoint = c.checkpoint, keys = c.keys, records_removed = c.records_removed, bytes_before = c.bytes_before, bytes_after = c.bytes_after, "cleaned a compacted partition");
                }
                Ok(None) => {}
                Err(weir_storage::StorageError::Closed) => break,
                Err(e) => {
                    self.cleaner.failures.inc();
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "cleaning a compacted partition failed; will retry")
                }
            }
        }
        cleaned
    }

    fn retention(&self, configs: &BTreeMap<String, String>) -> Retention {
        let policy = configs
            .get("cleanup.policy")
            .map_or("delete", String::as_str);
        if !policy.split(',').any(|p| p.trim() == "delete") {
            return Retention::default();
        }
        let num = |k: &str, d: i64| {
            configs
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(d)
        };
        let ms = num("retention.ms", self.defaults.retention_ms);
        let bytes = num("retention.bytes", self.defaults.retention_bytes);
        Retention {
            ms: u64::try_from(ms).ok(),
            bytes: u64::try_from(bytes).ok(),
        }
    }

    /// Whole batches of a partition led by another broker, from `from` up to `until` (an end its
    /// leader says is in object storage), up to about `max_bytes` (at least one batch if any),
    /// read from object storage: what a broker serving the partition in its zone returns.
    pub async fn read_remote(
        &self,
        stream_id: u64,
        from: i64,
        until: i64,
        max_bytes: usize,
        known: &[weir_meta::RangeInfo],
    ) -> Result<bytes::Bytes, ResponseError> {
        let (Ok(from), Ok(until)) = (u64::try_from(from), u64::try_from(until)) else {
            return Err(ResponseError::OffsetOutOfRange);
        };
        let frames = self
            .engine
            .read_objects(stream_id, from, until, max_bytes, known)
            .await
            .map_err(|e| crate::partition::kafka_error(&e))?;
        Ok(crate::partition::concat(&frames))
    }

    /// The recent index of a stream led here: its ranges that end after `from` (see
    /// [`weir_storage::Engine::ranges_since`]).
    pub fn ranges_since(&self, stream_id: u64, from: u64) -> Vec<weir_meta::RangeInfo> {
        self.engine.ranges_since(stream_id, from)
    }

    /// Uploads these streams' durable data now, so that brokers serving them in other zones
    /// can read it.
    pub async fn upload_streams(&self, stream_ids: &[u64]) -> Result<(), StorageError> {
        self.engine.flush_streams(stream_ids).await
    }

    /// Forgets idle idempotent producers, then saves every partition's producer state, up to
    /// [`SNAPSHOTS_PER_COMMIT`] partitions' in one metadata transaction.
    pub async fn snapshot_producers(&self) {
        let expiration = self.defaults().producer_id_expiration_ms;
        let due: Vec<Arc<Partition>> = self
            .local_partitions()
            .into_iter()
            .filter(|p| {
                let expired = p.expire_producers(expiration);
                if expired > 0 {
                    tracing::debug!(topic = %p.topic, partition = p.index, expired, "idle producers expired");
                }
                // Nothing appended since the last one: the same snapshot again would be one
                // more metadata write per partition per interval (10,000 at 10,000 partitions).
                expired > 0 || p.snapshot_behind()
            })
            .collect();
        for chunk in due.chunks(SNAPSHOTS_PER_COMMIT) {
            let snaps: Vec<_> = chunk.iter().map(|p| p.producer_snapshot()).collect();
            let offsets: Vec<u64> = snaps.iter().map(|s| s.offset).collect();
            match self.meta.save_producer_snapshots(snaps).await {
                Ok(()) => {
                    for (p, offset) in chunk.iter().zip(offsets) {
                        p.snapshot_saved(offset);
                    }
                }
                Err(e) => {
                    tracing::warn!(partitions = chunk.len(), error = %e, "producer snapshots failed")
                }
            }
        }
    }

    /// Closes every partition: snapshots, uploads, gives up leadership.
    pub async fn close(&self) {
        let all: Vec<Arc<Partition>> = self.write_local().drain().map(|(_, p)| p).collect();
        // One upload for every partition first (closing them one by one would write an object
        // each); each close then writes only what was still in flight.
        if let Err(e) = self.engine.flush().await {
            tracing::warn!(error = %e, "upload before closing the partitions failed; each close retries");
        }
        for p in all {
            if let Err(e) = p.close(&*self.meta).await {
                tracing::error!(topic = %p.topic, partition = p.index, error = %e, "closing a partition failed");
            }
        }
    }
}

fn new_topic_id() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}

/// The topic config that chooses a topic's WAL: `file` (acknowledged at disk latency) or
/// `object` (acknowledged once in object storage; no disk).
pub const WAL_KIND_CONFIG: &str = "weir.wal.kind";

/// The topic config that chooses how clients outside the leader's zone are served: `in-zone`
/// (through a broker of their zone, by way of object storage: no data byte crosses a zone) or
/// `leader` (straight to the leader, as Kafka does).
pub const ZONE_ROUTING_CONFIG: &str = "weir.zone.routing";

/// The topic config that makes a topic a cluster link's mirror: the link's name. Set by the link
/// when it creates the topic and removed when it promotes it; while set, clients may read the
/// topic but not produce to it (POLICY_VIOLATION).
pub const MIRROR_LINK_CONFIG: &str = "weir.mirror.link";
pub const ZONE_ROUTING_IN_ZONE: &str = "in-zone";
pub const ZONE_ROUTING_LEADER: &str = "leader";

/// Checks a topic config against the names and values Kafka accepts.
/// The topic config that makes a topic an Iceberg table (`weir_iceberg`).
pub const ICEBERG_MODE_CONFIG: &str = "weir.iceberg.mode";

/// Whether a topic's records go to an Iceberg table.
fn iceberg_mode(configs: &BTreeMap<String, String>) -> bool {
    configs.get(ICEBERG_MODE_CONFIG).is_some_and(|m| m != "off")
}

pub fn validate_config(name: &str, value: &str) -> Result<(), AdminError> {
    let invalid = |why: &str| {
        Err((
            ResponseError::InvalidConfig,
            format!("Invalid value {value} for configuration {name}: {why}"),
        ))
    };
    let long_at_least = |min: i64| match value.parse::<i64>() {
        Ok(v) if v >= min => Ok(()),
        _ => invalid(&format!("must be a number at least {min}")),
    };
    match name {
        "retention.ms" | "retention.bytes" | "local.retention.ms" | "local.retention.bytes" => {
            long_at_least(-2)
        }
        "max.message.bytes"
        | "segment.bytes"
        | "min.insync.replicas"
        | "segment.index.bytes"
        | "index.interval.bytes" => long_at_least(0),
        "segment.ms"
        | "segment.jitter.ms"
        | "delete.retention.ms"
        | "file.delete.delay.ms"
        | "flush.messages"
        | "flush.ms"
        | "min.compaction.lag.ms"
        | "max.compaction.lag.ms"
        | "message.timestamp.difference.max.ms"
        | "message.timestamp.before.max.ms"
        | "message.timestamp.after.max.ms" => long_at_least(0),
        ZONE_ROUTING_CONFIG => match value {
            ZONE_ROUTING_IN_ZONE | ZONE_ROUTING_LEADER => Ok(()),
            _ => invalid("must be in-zone or leader"),
        },
        MIRROR_LINK_CONFIG if value.is_empty() => invalid("must name a cluster link"),
        MIRROR_LINK_CONFIG => Ok(()),
        WAL_KIND_CONFIG => match value.parse::<WalKind>() {
            Ok(_) => Ok(()),
            Err(why) => invalid(&why),
        },
        "cleanup.policy" => {
            if value
                .split(',')
                .all(|p| matches!(p.trim(), "delete" | "compact"))
            {
                Ok(())
            } else {
                invalid("must be a list of delete and compact")
            }
        }
        "compression.type" => match value {
            "producer" | "uncompressed" | "none" | "gzip" | "snappy" | "lz4" | "zstd" => Ok(()),
            _ => invalid("unknown compression type"),
        },
        "message.timestamp.type" => match value {
            "CreateTime" => Ok(()),
            "LogAppendTime" => invalid("LogAppendTime is not supported yet"),
            _ => invalid("must be CreateTime or LogAppendTime"),
        },
        "min.cleanable.dirty.ratio" => match value.parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => Ok(()),
            _ => invalid("must be between 0 and 1"),
        },
        "unclean.leader.election.enable"
        | "preallocate"
        | "message.downconversion.enable"
        | "remote.storage.enable" => match value {
            "true" | "false" => Ok(()),
            _ => invalid("must be true or false"),
        },
        "follower.replication.throttled.replicas" | "leader.replication.throttled.replicas" => {
            Ok(())
        }
        // Schemas enforced on produce (weir_registry::validate), by Confluent's names.
        "confluent.key.schema.validation" | "confluent.value.schema.validation" => {
            match value.to_ascii_lowercase().as_str() {
                "true" | "false" => Ok(()),
                _ => invalid("must be true or false"),
            }
        }
        "confluent.key.subject.name.strategy" | "confluent.value.subject.name.strategy" => {
            match value.rsplit('.').next().unwrap_or(value) {
                "TopicNameStrategy" | "RecordNameStrategy" | "TopicRecordNameStrategy" => Ok(()),
                _ => invalid(
                    "must be TopicNameStrategy, RecordNameStrategy or TopicRecordNameStrategy \
                     (io.confluent.kafka.serializers.subject.*)",
                ),
            }
        }
        "weir.schema.validation" => match value {
            "id" | "full" => Ok(()),
            _ => invalid(
                "must be id (the schema id is registered under the subject) or full \
                          (the payload decodes with it too)",
            ),
        },
        // The topic as an Iceberg table (weir_iceberg::translator).
        "weir.iceberg.mode" => match value {
            "off" | "key_value" | "value_schema_id_prefix" | "value_schema_latest" => Ok(()),
            v if v
                .strip_prefix("value_schema_latest:subject=")
                .is_some_and(|s| !s.is_empty()) =>
            {
                Ok(())
            }
            _ => invalid(
                "must be off, key_value, value_schema_id_prefix, value_schema_latest or \
                 value_schema_latest:subject=<subject>",
            ),
        },
        "weir.iceberg.snapshot.max.age.ms" => match value.parse::<i64>() {
            Ok(v) if v == 0 || (60_000..=i64::from(i32::MAX) * 1000).contains(&v) => Ok(()),
            _ => invalid("must be 0 (never expire) or a number of milliseconds from 60000"),
        },
        "weir.iceberg.invalid.record.action" => match value {
            "dlq_table" | "drop" => Ok(()),
            _ => invalid("must be dlq_table (the table's <table>_dlq) or drop"),
        },
        "weir.iceberg.target.lag.ms" => match value.parse::<i64>() {
            Ok(v) if (1_000..=86_400_000).contains(&v) => Ok(()),
            _ => invalid("must be a number of milliseconds from 1000 to 86400000"),
        },
        "weir.iceberg.partition.spec" => match value.trim() {
            "" | "hour(timestamp)" | "day(timestamp)" | "month(timestamp)" | "none" => Ok(()),
            _ => invalid("must be hour(timestamp), day(timestamp), month(timestamp) or none"),
        },
        _ => Err((
            ResponseError::InvalidConfig,
            format!("Unknown topic config name: {name}"),
        )),
    }
}

/// A peer's recovery of a dead broker's WAL, through this broker's storage engine.
#[async_trait::async_trait]
impl weir_cluster::WalRecoverer for Topics {
    async fn recover(
        &self,
        wal: &weir_meta::WalInfo,
        node_id: i32,
        incarnation: u64,
    ) -> Result<weir_cluster::RecoveredWal, weir_cluster::RecoveryError> {
        use weir_cluster::RecoveryError;
        let wal_id = u128::from_str_radix(&wal.wal_id, 16).map_err(|e| {
            RecoveryError::Unreachable(format!("WAL id {:?} is not hex: {e}", wal.wal_id))
        })?;
        let seal = weir_wal::Seal {
            wal_id,
            node_id,
            incarnation,
        };
        match self
            .engine
            .recover_peer_wal(std::path::Path::new(&wal.path), seal)
            .await
        {
            Ok(r) => Ok(weir_cluster::RecoveredWal {
                records: r.records,
                uploaded: r.uploaded,
                streams: r.streams,
            }),
            Err(weir_storage::PeerRecoveryError::Unreachable(e)) => {
                Err(RecoveryError::Unreachable(e.to_string()))
            }
            Err(weir_storage::PeerRecoveryError::Failed(e)) => {
                Err(RecoveryError::Failed(e.to_string()))
            }
        }
    }
}

/// The cluster opens and closes the partitions it assigns to this broker through the catalog.
#[async_trait::async_trait]
impl weir_cluster::PartitionHost for Topics {
    fn local_streams(&self) -> Vec<u64> {
        Topics::local_streams(self)
    }

    fn is_local(&self, stream_id: u64) -> bool {
        self.read_local().contains_key(&stream_id)
    }

    async fn refresh_catalog(&self) {
        if let Err(e) = self.refresh().await {
            tracing::warn!(error = %e, "reading topics failed");
        }
    }

    async fn open(&self, a: &weir_meta::Assignment) -> Result<(), String> {
        let result = self.open_partition(a.stream_id).await;
        let mut failed = self.open_failed.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(_) => {
                failed.remove(&a.stream_id);
                Ok(())
            }
            Err(e) => {
                failed.insert(a.stream_id);
                Err(e.to_string())
            }
        }
    }

    async fn flush(&self, stream_id: u64) -> Result<(), String> {
        self.engine
            .flush_stream(stream_id)
            .await
            .map_err(|e| e.to_string())
    }

    async fn close(&self, stream_id: u64) -> Result<(), String> {
        self.close_partition(stream_id)
            .await
            .map_err(|e| e.to_string())
    }
}

impl weir_cluster::load::LoadSource for Topics {
    fn partitions(&self) -> Vec<weir_cluster::load::PartitionCounters> {
        self.local_partitions()
            .into_iter()
            .map(|p| {
                let (bytes_in, bytes_out, requests) = p.load_counters();
                weir_cluster::load::PartitionCounters {
                    stream_id: p.stream_id,
                    topic: p.topic.clone(),
                    partition: u32::try_from(p.index).unwrap_or(0),
                    bytes_in,
                    bytes_out,
                    requests,
                }
            })
            .collect()
    }
}
