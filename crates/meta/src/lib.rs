//! Weir's metadata store.
//!
//! The one component that holds durable cluster state. It is off the per-record path: the storage
//! engine calls it when it opens a stream, commits uploaded objects, moves a start offset and
//! deletes objects; the Kafka layer when topics, group offsets or producer ids change.
//!
//! It has fourteen parts, one trait each, so that a backend can be built and tested part by part,
//! and a caller that needs one part takes only that trait:
//!
//! - [`ObjectIndex`]: streams (leader epoch, start offset, committed end offset), the objects in
//!   object storage and the ranges of streams each holds; commits, retention's trims,
//!   compaction's swaps, and the life of an object until its bytes are deleted. The storage
//!   engine's part.
//! - [`Catalog`]: topics, their partitions (a stream each) and configs, id counters and
//!   write-once keys (the cluster id).
//! - [`GroupOffsets`]: consumer groups' committed offsets.
//! - [`GroupStates`]: consumer groups' membership (generation, members, assignments), as opaque
//!   bytes the group coordinator encodes, so that another broker can take a group over.
//! - [`ProducerSnapshots`]: each stream's idempotent-producer state, valid up to an offset.
//! - [`Coordination`]: the cluster: brokers and their sessions, the controller lease, which
//!   broker leads each partition, and change notifications.
//! - [`Transactions`]: each transactional id's state (producer id and epoch, the partitions and
//!   groups of its transaction, where the transaction is), and the group offsets a transaction
//!   stages until it commits.
//! - [`Credentials`]: users' SCRAM credentials (salt, keys, iterations; never a password), for
//!   SASL/SCRAM authentication.
//! - [`Acls`]: the cluster's ACL bindings (CreateAcls, DeleteAcls), as Kafka's codes, for the
//!   broker's authorizer.
//! - [`Quotas`]: client quotas (AlterClientQuotas, DescribeClientQuotas): a value per entity
//!   and quota key.
//! - [`Links`]: cluster links (mirroring from another Kafka cluster), changed by compare-and-set.
//! - [`ShareStates`]: share groups' share-partitions (KIP-932): start offset, and the records
//!   above it acknowledged, archived or available again with their delivery counts; fenced by
//!   leader epoch and state epoch.
//! - [`Schemas`]: the schema registry: schemas by id, subjects' versions, compatibility configs
//!   and modes; ids and versions given in one transaction, so every broker can register.
//! - [`IcebergCatalog`]: an Iceberg SQL catalog, in the JDBC catalogs' own tables, so that
//!   Spark, pyiceberg and iceberg-rust read the tables Weir writes from the same database; a
//!   commit is a compare-and-set of a table's metadata location.
//!
//! [`GroupStore`] is the two group parts, what the group coordinator takes. [`MetaStore`] is all
//! of them together, implemented for every type that implements them, so a
//! broker holds one `Arc<dyn MetaStore>` and hands each component the part it uses. The parts
//! share one database: deleting a topic (a [`Catalog`] call) drops its streams, frees their
//! objects, and drops their producer snapshots and group offsets in the same transaction (a group's
//! state stays: it names no topic the store knows of).
//!
//! Every backend passes the [`conformance`] suites, one per part plus one for the effects that
//! cross parts:
//!
//! - [`sqlite`]: a file in the data directory, the embedded single-node default.
//! - [`postgres`]: a PostgreSQL database, shared by the brokers of a cluster.
//!
//! [`testing`] (feature `testing`) starts a private PostgreSQL for tests.
//!
//! # Objects
//!
//! An object's row goes through these states, each change in one transaction:
//!
//! ```text
//! prepared ──commit──> live ──last range gone──> unreferenced
//!     │                                               │ grace
//!     │ orphan grace (never committed)                v
//!     └────────────────────────────────────────────> deleting ──bytes deleted, forget──> (gone)
//! ```
//!
//! [`ObjectIndex::deletable_objects`] moves rows to `deleting` in the transaction that selects
//! them, and a commit accepts only `prepared` objects: so orphan collection and a late commit of
//! the same object cannot both win, and a committed object never loses its bytes.
//!
//! # Invariants
//!
//! A backend enforces these in every build, in one transaction per call, and fails the call
//! otherwise:
//!
//! - a commit's ranges are non-empty, continue exactly at each stream's committed end offset, and
//!   carry the stream's current leader epoch (a stale leader cannot commit); so the committed end
//!   offset only grows;
//! - an epoch never goes backwards, and a deleted stream cannot be opened again (it would come
//!   back at a lower epoch);
//! - a start offset never goes backwards, and ranges wholly below it are dropped; an object
//!   without ranges left becomes unreferenced, and is deleted only after a grace period;
//! - only a `prepared` object can be committed, and only a `deleting` one forgotten.

/// Compiled for tests only (feature `testing` for other crates' tests).
#[cfg(any(test, feature = "testing"))]
pub mod conformance;
mod iceberg;
pub mod postgres;
mod schemas;
mod share;
pub mod sqlite;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod txn;

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::watch;

pub use iceberg::{IcebergCatalog, IcebergTableRow, NamespaceDrop, TableRename};
pub use postgres::PostgresMetaStore;
pub use schemas::{
    Registered, RegistrySetting, SchemaContent, SchemaDeleted, SchemaReference, SchemaRegistration,
    Schemas, StoredSchema, SubjectVersion,
};
pub use share::{Claim, DeliveryState, ShareBatch, ShareState, ShareStates};
pub use sqlite::SqliteMetaStore;
pub use txn::{Transactions, TxnRecord, TxnState};

pub type ObjectId = u64;

/// Makes an object's key from its id.
pub type KeyFn = fn(ObjectId) -> String;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamMeta {
    pub stream_id: u64,
    pub epoch: u64,
    /// First offset still readable (retention and DeleteRecords move it).
    pub start_offset: u64,
    /// One past the last offset committed to object storage.
    pub end_offset: u64,
}

/// One stream's contiguous data in an object being committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeCommit {
    pub stream_id: u64,
    pub epoch: u64,
    pub start_offset: u64,
    pub end_offset: u64,
    pub position: u64,
    pub size: u64,
    pub max_timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectCommit {
    pub object_id: ObjectId,
    pub size: u64,
    pub ranges: Vec<RangeCommit>,
}

/// A committed range and the object that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeInfo {
    pub stream_id: u64,
    pub start_offset: u64,
    pub end_offset: u64,
    pub object_id: ObjectId,
    pub object_key: String,
    pub object_size: u64,
    pub position: u64,
    pub size: u64,
    pub max_timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub object_id: ObjectId,
    pub key: String,
}

/// A topic and the streams of its partitions (index = partition number).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMeta {
    pub name: String,
    pub topic_id: [u8; 16],
    pub streams: Vec<u64>,
    pub configs: BTreeMap<String, String>,
}

/// A consumer group's committed offset for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    pub topic: String,
    pub partition: u32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub commit_ms: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("topic {0} already exists")]
    TopicExists(String),
    #[error("topic {0} does not exist")]
    UnknownTopic(String),
    #[error("topic {topic} has {current} partitions; cannot go to {requested}")]
    InvalidPartitions {
        topic: String,
        current: u32,
        requested: u32,
    },
    #[error("stream {stream_id}: epoch {epoch} is stale, the stream is at epoch {current}")]
    Fenced {
        stream_id: u64,
        epoch: u64,
        current: u64,
    },
    #[error(
        "stream {stream_id}: range starts at {got} but the committed end offset is {expected}"
    )]
    Discontinuity {
        stream_id: u64,
        expected: u64,
        got: u64,
    },
    #[error("stream {0} does not exist")]
    UnknownStream(u64),
    #[error("object {0} is not prepared: already committed, or claimed for deletion")]
    UnknownObject(ObjectId),
    #[error("stream {stream_id}: range [{start}, {end}) is empty or out of bounds")]
    InvalidRange {
        stream_id: u64,
        start: u64,
        end: u64,
    },
    #[error("broker {node_id} incarnation {incarnation} is fenced: its session expired or a newer incarnation registered")]
    BrokerFenced { node_id: i32, incarnation: u64 },
    #[error("the controller lease (epoch {epoch}) is no longer held")]
    NotController { epoch: u64 },
    #[error("broker {0} is not registered")]
    UnknownBroker(i32),
    #[error(
        "WAL {wal_id} is being recovered by broker {node_id}; its owner waits until that is done"
    )]
    WalRecovering { wal_id: String, node_id: i32 },
    #[error("WAL {wal_id} was recovered by a peer and sealed; its owner starts empty")]
    WalSealed { wal_id: String },
    #[error("broker {node_id}'s previous WAL {wal_id} at {path} holds data that is not yet recovered: put it back at that path (a peer then recovers it) rather than start with another WAL")]
    WalMissing {
        node_id: i32,
        wal_id: String,
        path: String,
    },
    #[error("WAL {0} is not being recovered by this broker")]
    NotRecovering(String),
    #[error("transactional id {0}: its state changed since it was read (another coordinator wrote it, or the transaction is no longer the one named)")]
    TxnConflict(String),
    #[error("metadata store: {0} does not decode")]
    Corrupt(String),
    #[error("share state refused: {0}")]
    InvalidShareState(String),
    #[error("metadata store: {context}: {source}")]
    Backend {
        context: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

pub type Result<T, E = MetaError> = std::result::Result<T, E>;

/// Streams, objects and ranges: what the storage engine reads and writes.
#[async_trait::async_trait]
pub trait ObjectIndex: Send + Sync + 'static {
    /// Opens a stream as its leader at `epoch`, creating it (empty, at offset 0) if it never
    /// existed. Fails with [`MetaError::Fenced`] if the stream is already at that epoch or a
    /// higher one (each leader has an epoch of its own), and
    /// with [`MetaError::UnknownStream`] if it was deleted.
    async fn open_stream(&self, stream_id: u64, epoch: u64) -> Result<StreamMeta>;

    async fn get_stream(&self, stream_id: u64) -> Result<Option<StreamMeta>>;

    /// Allocates an object id and remembers the object as uploaded-but-uncommitted, so that an
    /// object whose commit never happens is found and deleted.
    async fn prepare_object(&self, key: KeyFn) -> Result<ObjectId>;

    /// Commits prepared objects and their ranges, all or nothing. Repeating a commit that
    /// landed (the caller never heard: the connection broke during COMMIT) succeeds and changes
    /// nothing: an object live with exactly the ranges given is done already, whatever happened
    /// to its streams since. Fails with [`MetaError::UnknownObject`] for an object that is not
    /// prepared (committed with other ranges, or claimed for deletion as an orphan),
    /// [`MetaError::Fenced`] for a range of another epoch,
    /// [`MetaError::Discontinuity`] for a range that does not start at its stream's committed end
    /// offset and [`MetaError::InvalidRange`] for an empty one.
    async fn commit_objects(&self, objects: Vec<ObjectCommit>) -> Result<()>;

    /// Committed ranges of a stream that end after `from_offset`, in offset order, at most
    /// `limit` of them.
    async fn ranges(
        &self,
        stream_id: u64,
        from_offset: u64,
        limit: usize,
    ) -> Result<Vec<RangeInfo>>;

    /// Moves the start offset forward (never back) and drops ranges wholly below it. Returns the
    /// stream as it now is.
    async fn trim_stream(&self, stream_id: u64, start_offset: u64) -> Result<StreamMeta>;

    /// Claims the objects to delete from object storage now, and returns them: those unreferenced
    /// for longer than `grace`, and those prepared and never committed for longer than
    /// `orphan_grace` (which must outlast the slowest upload). Claimed objects are `deleting`:
    /// no commit can take them any more, and this returns them again, whatever the graces, until
    /// they are forgotten (so a failed deletion is retried).
    async fn deletable_objects(
        &self,
        grace: Duration,
        orphan_grace: Duration,
    ) -> Result<Vec<ObjectInfo>>;

    /// Forgets objects whose bytes are gone from object storage. Only claimed (`deleting`)
    /// objects are forgotten; other ids are ignored.
    async fn forget_objects(&self, ids: &[ObjectId]) -> Result<()>;

    /// Compaction: replaces the stream's ranges that exactly cover `[start, end)` with the one
    /// range of the prepared object `object` (committing it), in one transaction. Objects left
    /// without ranges become unreferenced. Fails with [`MetaError::Fenced`] for a stale epoch,
    /// [`MetaError::Discontinuity`] if the ranges no longer cover exactly `[start, end)` (retention
    /// or another compaction got there first) and [`MetaError::UnknownObject`] as
    /// [`ObjectIndex::commit_objects`] does.
    async fn replace_ranges(&self, object: ObjectCommit) -> Result<()>;

    /// Number of committed, referenced objects that hold data of `stream_id`.
    async fn object_count(&self, stream_id: u64) -> Result<u64>;

    /// The ranges, as `(stream_id, object_id)`, that live in sparse objects: committed objects
    /// whose ranges hold less than half of their bytes (the rest was trimmed by retention,
    /// deleted with a topic or moved out by compaction), at most `limit` of them. Compaction
    /// moves such ranges out, so that an object kept alive by a few ranges frees the space of
    /// the others.
    async fn sparse_ranges(&self, limit: usize) -> Result<Vec<(u64, ObjectId)>>;
}

/// Topics and the streams of their partitions, id counters, write-once keys.
#[async_trait::async_trait]
pub trait Catalog: Send + Sync + 'static {
    /// Creates a topic with `partitions` new streams (at epoch 0, empty). Stream ids are never
    /// reused.
    async fn create_topic(
        &self,
        name: &str,
        topic_id: [u8; 16],
        partitions: u32,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta>;

    async fn list_topics(&self) -> Result<Vec<TopicMeta>>;

    /// Deletes a topic and its streams: their objects become unreferenced, their producer
    /// snapshots and the groups' offsets of the topic are dropped, and the streams cannot be
    /// opened again.
    async fn delete_topic(&self, name: &str) -> Result<TopicMeta>;

    /// Grows a topic to `total` partitions.
    async fn add_partitions(&self, name: &str, total: u32) -> Result<TopicMeta>;

    /// Replaces a topic's configs.
    async fn set_topic_configs(&self, name: &str, configs: BTreeMap<String, String>) -> Result<()>;

    /// Replaces a topic's configs if they are still `expected` (a compare-and-set): `Ok(false)`
    /// if another writer changed them first, so that two incremental alters of one topic
    /// through two brokers cannot undo each other.
    async fn replace_topic_configs(
        &self,
        name: &str,
        expected: &BTreeMap<String, String>,
        configs: BTreeMap<String, String>,
    ) -> Result<bool>;

    /// Allocates `count` consecutive ids from the named counter; returns the first.
    async fn allocate_ids(&self, counter: &str, count: u64) -> Result<u64>;

    /// Returns the value stored under `key`, storing `default` first if there is none.
    async fn get_or_init(&self, key: &str, default: &str) -> Result<String>;

    /// The value stored under `key`, if any.
    async fn get_value(&self, key: &str) -> Result<Option<String>>;

    /// Stores `value` under `key`, replacing what was there.
    async fn set_value(&self, key: &str, value: &str) -> Result<()>;
}

/// Consumer groups' committed offsets.
#[async_trait::async_trait]
pub trait GroupOffsets: Send + Sync + 'static {
    /// Commits offsets of a group; a later commit of a partition replaces an earlier one.
    async fn commit_offsets(&self, group: &str, offsets: Vec<GroupOffset>) -> Result<()>;

    /// A group's offsets, by topic and partition.
    async fn fetch_offsets(&self, group: &str) -> Result<Vec<GroupOffset>>;

    /// Deletes a group's offsets: those of the given partitions, or all of them.
    async fn delete_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, u32)>>,
    ) -> Result<()>;

    /// Groups that have committed offsets.
    async fn offset_groups(&self) -> Result<Vec<String>>;
}

/// Each stream's idempotent-producer state.
#[async_trait::async_trait]
pub trait ProducerSnapshots: Send + Sync + 'static {
    /// Stores the idempotent-producer state of a stream, valid up to `offset`, replacing the
    /// previous one unless that one is valid up to a later offset (snapshots never go back).
    async fn save_producer_snapshot(
        &self,
        stream_id: u64,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()>;

    /// [`ProducerSnapshots::save_producer_snapshot`] of many streams in one transaction: a
    /// broker leading 10,000 partitions saves them all every interval, and a durable commit
    /// each was 10,000 syncs of the store's log. The stream ids are distinct.
    async fn save_producer_snapshots(&self, snapshots: Vec<ProducerSnapshot>) -> Result<()> {
        for s in snapshots {
            self.save_producer_snapshot(s.stream_id, s.offset, s.data)
                .await?;
        }
        Ok(())
    }

    async fn load_producer_snapshot(&self, stream_id: u64) -> Result<Option<(u64, Vec<u8>)>>;
}

/// A stream's idempotent-producer state, valid up to `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerSnapshot {
    pub stream_id: u64,
    pub offset: u64,
    pub data: Vec<u8>,
}

/// Where a broker is in its life, as the cluster sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerState {
    /// Serving; takes partitions.
    Running,
    /// Stopping (controlled shutdown): its partitions are moved away, it takes no new ones.
    ShuttingDown,
    /// Its session expired and the controller fenced it; it must register again.
    Fenced,
}

impl BrokerState {
    pub fn as_str(self) -> &'static str {
        match self {
            BrokerState::Running => "running",
            BrokerState::ShuttingDown => "shutting_down",
            BrokerState::Fenced => "fenced",
        }
    }

    pub fn parse(s: &str) -> BrokerState {
        match s {
            "running" => BrokerState::Running,
            "shutting_down" => BrokerState::ShuttingDown,
            _ => BrokerState::Fenced,
        }
    }
}

/// What a broker says about itself when it joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    /// `None`: the store allocates one (above 1000, as Kafka's generated broker ids are).
    pub node_id: Option<i32>,
    pub zone: String,
    /// Advertised Kafka address.
    pub host: String,
    pub port: i32,
    /// Every Kafka listener with its advertised address, in the broker's order (names unique).
    /// Empty for a broker that names none: callers then use `host` and `port`.
    pub listeners: Vec<ListenerEndpoint>,
    /// Internal listener, `host:port`, for broker-to-broker calls.
    pub internal_addr: String,
    /// The WAL the broker writes, claimed for this incarnation by the registration.
    pub wal: Option<WalRegistration>,
}

/// One Kafka listener of a broker, as clients are told to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerEndpoint {
    /// The listener's name (e.g. "PLAINTEXT", "SASL_SSL", "EXTERNAL").
    pub name: String,
    pub host: String,
    pub port: i32,
}

/// A broker's WAL: its id (from the WAL's superblock) and where peers can open it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalRegistration {
    pub wal_id: String,
    pub path: String,
}

/// Where a WAL is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalState {
    /// Written by its owner (or waiting for a recovery, once the owner is fenced).
    Open,
    /// A peer is recovering it: sealing it, uploading what it holds.
    Recovering { node_id: i32 },
    /// Recovered: what it held is in object storage; its owner starts empty.
    Sealed,
}

/// A WAL as the cluster knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalInfo {
    pub wal_id: String,
    /// The broker that writes it, and the incarnation that claimed it.
    pub node_id: i32,
    pub incarnation: u64,
    pub path: String,
    pub state: WalState,
    /// Brokers that could not open it since it was last assigned (sorted).
    pub tried: Vec<i32>,
    /// Milliseconds since its state (or `tried`) last changed, by the store's clock.
    pub since_ms: i64,
}

/// A registered broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub node_id: i32,
    /// Grows with every registration of the node id: a process that registered earlier under
    /// the same id is a zombie, and its session renewals fail.
    pub incarnation: u64,
    pub zone: String,
    pub host: String,
    pub port: i32,
    /// Every Kafka listener with its advertised address, in the broker's order; empty for a
    /// broker registered before listeners were recorded (callers then use `host` and `port`).
    pub listeners: Vec<ListenerEndpoint>,
    pub internal_addr: String,
    pub state: BrokerState,
    /// Its session has not expired, by the store's clock.
    pub alive: bool,
}

impl BrokerInfo {
    /// Serving and within its session: may lead partitions and coordinate groups.
    pub fn is_live(&self) -> bool {
        self.alive && self.state == BrokerState::Running
    }
}

/// One partition's measured load, as its leader reports it: bytes per second produced to it
/// (in) and fetched from it (out), and produce and fetch requests per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartitionLoad {
    pub stream_id: u64,
    pub bytes_in: f64,
    pub bytes_out: f64,
    pub requests: f64,
}

/// A broker's last load report (`Coordination::report_load`).
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerLoad {
    pub node_id: i32,
    /// How long ago the report was made, by the store's clock, when it was read.
    pub age_ms: i64,
    /// CPU seconds the broker's process used per second (1.0: one core busy).
    pub cpu: f64,
    pub partitions: Vec<PartitionLoad>,
}

impl BrokerLoad {
    /// The partitions' loads as one text column: `stream:in:out:requests` joined by `;`.
    pub fn encode_partitions(&self) -> String {
        let mut s = String::new();
        for (i, p) in self.partitions.iter().enumerate() {
            if i > 0 {
                s.push(';');
            }
            s.push_str(&format!(
                "{}:{:.0}:{:.0}:{:.1}",
                p.stream_id, p.bytes_in, p.bytes_out, p.requests
            ));
        }
        s
    }

    /// The inverse of [`BrokerLoad::encode_partitions`]; malformed entries are skipped.
    pub fn decode_partitions(s: &str) -> Vec<PartitionLoad> {
        s.split(';')
            .filter_map(|e| {
                let mut f = e.split(':');
                Some(PartitionLoad {
                    stream_id: f.next()?.parse().ok()?,
                    bytes_in: f.next()?.parse().ok()?,
                    bytes_out: f.next()?.parse().ok()?,
                    requests: f.next().and_then(|r| r.parse().ok()).unwrap_or(0.0),
                })
            })
            .collect()
    }
}

/// The controller lease as one broker holds it. `epoch` grows each time the lease changes hands:
/// the store refuses changes made under an older one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerLease {
    pub node_id: i32,
    pub epoch: u64,
}

/// Which broker leads a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub topic: String,
    pub partition: u32,
    pub stream_id: u64,
    /// The broker that leads (or is to lead) the partition; `None` until the controller places it.
    pub leader: Option<i32>,
    /// A move under way: the leader hands the partition to this broker.
    pub target: Option<i32>,
    /// The stream's epoch: the partition's leader epoch.
    pub epoch: u64,
}

/// A controller's change to who leads a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignmentChange {
    /// Gives a partition that has no leader its first one. Ignored if it has one by then.
    Place { stream_id: u64, leader: i32 },
    /// Asks the partition's leader to hand it over to `target` (`None` cancels a move).
    Move { stream_id: u64, target: Option<i32> },
}

/// A WAL row as both backends read it for a claim: id, state, recoverer, path.
pub(crate) type WalRow = (String, String, Option<i32>, String);

/// Whether `node_id` may claim the WAL `wal_id`, given the rows of that WAL and of the node's
/// other WALs; see [`Coordination::register_broker`]. The same rule on every backend.
pub(crate) fn check_wal_claim(node_id: i32, wal_id: &str, rows: Vec<WalRow>) -> Result<()> {
    for (id, state, recoverer, path) in rows {
        match state.as_str() {
            "recovering" => {
                return Err(MetaError::WalRecovering {
                    wal_id: id,
                    node_id: recoverer.unwrap_or(-1),
                })
            }
            "sealed" if id == wal_id => return Err(MetaError::WalSealed { wal_id: id }),
            "open" if id != wal_id => {
                return Err(MetaError::WalMissing {
                    node_id,
                    wal_id: id,
                    path,
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// A WAL row's state column (and recoverer) as a [`WalState`].
pub(crate) fn wal_state(state: &str, recoverer: Option<i32>) -> WalState {
    match state {
        "recovering" => WalState::Recovering {
            node_id: recoverer.unwrap_or(-1),
        },
        "sealed" => WalState::Sealed,
        _ => WalState::Open,
    }
}

/// A WAL row's `tried` column (comma-separated node ids), sorted and without repeats.
pub(crate) fn tried_list(s: &str) -> Vec<i32> {
    let mut v: Vec<i32> = s.split(',').filter_map(|x| x.parse().ok()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Brokers read with their listeners, one row per listener (a broker without any: one row with
/// `None`), in node id then listener order, as both backends' outer joins return them.
pub(crate) fn group_listeners(
    rows: impl IntoIterator<Item = (BrokerInfo, Option<ListenerEndpoint>)>,
) -> Vec<BrokerInfo> {
    let mut brokers: Vec<BrokerInfo> = Vec::new();
    for (broker, listener) in rows {
        match brokers.last_mut() {
            Some(last) if last.node_id == broker.node_id => last.listeners.extend(listener),
            _ => brokers.push(BrokerInfo {
                listeners: listener.into_iter().collect(),
                ..broker
            }),
        }
    }
    brokers
}

/// The cluster's coordination: membership with sessions, the controller lease, partition
/// leadership, and notifications of changes. Every change is one transaction; times are the
/// store's clock, so brokers' clocks need not agree.
#[async_trait::async_trait]
pub trait Coordination: Send + Sync + 'static {
    /// Registers a broker under a new incarnation, `Running`, with a session of `session`.
    /// A registration of a node id that is already registered replaces it (a restarted broker),
    /// listeners included.
    ///
    /// With a WAL, the registration also claims it for the new incarnation, in the same
    /// transaction, and fails if it may not: [`MetaError::WalRecovering`] while a peer recovers
    /// it (try again later), [`MetaError::WalSealed`] once one has (start it empty, register the
    /// new id), [`MetaError::WalMissing`] if the node's previous WAL holds data not yet recovered.
    async fn register_broker(
        &self,
        reg: &BrokerRegistration,
        session: Duration,
    ) -> Result<BrokerInfo>;

    /// Extends the session of `node_id` at `incarnation` to `session` from now. Fails with
    /// [`MetaError::BrokerFenced`] if that incarnation was replaced or fenced.
    async fn renew_session(&self, node_id: i32, incarnation: u64, session: Duration) -> Result<()>;

    /// Changes the state of `node_id` at `incarnation` (e.g. to `ShuttingDown`). Fails as
    /// [`Coordination::renew_session`] does.
    async fn set_broker_state(
        &self,
        node_id: i32,
        incarnation: u64,
        state: BrokerState,
    ) -> Result<()>;

    /// Every registered broker, in node id order.
    async fn brokers(&self) -> Result<Vec<BrokerInfo>>;

    /// Takes or renews the controller lease for `ttl`. Returns the lease if `node_id` holds it
    /// after the call; `None` if another broker holds an unexpired one.
    async fn acquire_controller(
        &self,
        node_id: i32,
        ttl: Duration,
    ) -> Result<Option<ControllerLease>>;

    /// The holder of the unexpired controller lease, if any.
    async fn controller(&self) -> Result<Option<ControllerLease>>;

    /// Gives up the lease now (a controller that stops), if it is still this one.
    async fn resign_controller(&self, lease: ControllerLease) -> Result<()>;

    /// Fences the brokers whose session expired at least `margin` ago (the clock-drift margin:
    /// a broker stops acknowledging by its own clock); returns their node ids. Controller only.
    async fn fence_expired_brokers(
        &self,
        lease: ControllerLease,
        margin: Duration,
    ) -> Result<Vec<i32>>;

    /// Every partition of every topic and who leads it, by topic and partition.
    async fn assignments(&self) -> Result<Vec<Assignment>>;

    /// Applies a controller's changes in one transaction. Fails with
    /// [`MetaError::NotController`] if `lease` is no longer the current one.
    async fn change_assignments(
        &self,
        lease: ControllerLease,
        changes: &[AssignmentChange],
    ) -> Result<()>;

    /// An operator's request (AlterPartitionReassignments, the admin API) to move a placed
    /// partition to `target` (`None` cancels): sets the move target without the controller
    /// lease; the controller redirects a target that is not a live broker. Returns false if the
    /// partition has no leader yet.
    async fn request_move(&self, stream_id: u64, target: Option<i32>) -> Result<bool>;

    /// The leader's half of a move: if `node_id` at `incarnation` leads the stream and a move
    /// target is set, the target becomes the leader. Returns the new leader, or `None` when
    /// there was nothing to hand over (no move, or not the leader). Fails with
    /// [`MetaError::BrokerFenced`] for a replaced incarnation.
    async fn hand_over(
        &self,
        stream_id: u64,
        node_id: i32,
        incarnation: u64,
    ) -> Result<Option<i32>>;

    /// Tells every broker that something in the cluster changed (the store's own changes do
    /// this already; topic changes call it).
    async fn notify_cluster(&self) -> Result<()>;

    /// Every WAL that is not sealed, and the sealed ones of the last hour, by id.
    async fn wals(&self) -> Result<Vec<WalInfo>>;

    /// The controller assigns the recovery of an open WAL (or one whose recoverer is `stale`,
    /// no longer live) to `recoverer`. Returns false if the WAL is no longer in that state (its
    /// owner claimed it back) or if the broker that claimed it is live under that claim: the
    /// store decides that, not the controller's view, which may predate a new registration.
    /// Fails with [`MetaError::NotController`] for a stale lease.
    async fn assign_wal_recovery(
        &self,
        lease: ControllerLease,
        wal_id: &str,
        recoverer: i32,
        stale: Option<i32>,
    ) -> Result<bool>;

    /// The recoverer could not open the WAL (not at that path on this broker, or another WAL
    /// is there): it goes back to `Open`, with the broker added to `tried`.
    async fn wal_unreachable(&self, wal_id: &str, node_id: i32, incarnation: u64) -> Result<()>;

    /// The controller forgets who tried a WAL, so that every live broker tries again (a mount
    /// may have come back).
    async fn retry_wal(&self, lease: ControllerLease, wal_id: &str) -> Result<()>;

    /// The recoverer is done: what the WAL held is committed (the streams' epochs were raised
    /// first). In one transaction: the WAL becomes `Sealed` and every partition its owner leads
    /// loses its leader, for the controller to place on live brokers. Returns those streams.
    /// Fails with [`MetaError::NotRecovering`] unless `node_id` at `incarnation` is its
    /// recoverer.
    async fn finish_wal_recovery(
        &self,
        wal_id: &str,
        node_id: i32,
        incarnation: u64,
    ) -> Result<Vec<u64>>;

    /// Replaces broker `load.node_id`'s load report (its `age_ms` is ignored: the report is
    /// stamped with the store's clock). Fails with [`MetaError::BrokerFenced`] unless
    /// `incarnation` is the broker's current, unfenced one.
    async fn report_load(&self, incarnation: u64, load: BrokerLoad) -> Result<()>;

    /// Every broker's last load report, with its age by the store's clock.
    async fn loads(&self) -> Result<Vec<BrokerLoad>>;

    /// A counter that moves whenever the store learns of a change, from this process or
    /// another; a broker re-reads the cluster when it does.
    fn cluster_changes(&self) -> watch::Receiver<u64>;
}

/// Consumer groups' membership, so that a group survives its coordinator moving to another
/// broker (or restarting).
#[async_trait::async_trait]
pub trait GroupStates: Send + Sync + 'static {
    /// Stores a group's state, replacing the previous one. The bytes are the group coordinator's
    /// own encoding; the store does not look into them.
    async fn save_group_state(&self, group: &str, data: Vec<u8>) -> Result<()>;

    async fn load_group_state(&self, group: &str) -> Result<Option<Vec<u8>>>;

    /// Forgets a group's state; a group without one is not an error.
    async fn delete_group_state(&self, group: &str) -> Result<()>;

    /// Groups that have a stored state, in byte order of their ids.
    async fn group_state_ids(&self) -> Result<Vec<String>>;
}

/// A user's SCRAM credential for one mechanism (RFC 5802): what the broker needs to check a
/// SCRAM exchange, never the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredential {
    /// "SCRAM-SHA-256" or "SCRAM-SHA-512" (the store does not interpret it).
    pub mechanism: String,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

/// Users' SCRAM credentials, one per user and mechanism.
#[async_trait::async_trait]
pub trait Credentials: Send + Sync + 'static {
    /// Sets `user`'s credential for `credential.mechanism`, replacing any earlier one of that
    /// mechanism.
    async fn upsert_scram_credential(&self, user: &str, credential: ScramCredential) -> Result<()>;

    /// Deletes `user`'s credential for `mechanism`; whether there was one.
    async fn delete_scram_credential(&self, user: &str, mechanism: &str) -> Result<bool>;

    /// `user`'s credential for `mechanism`, if any.
    async fn scram_credential(
        &self,
        user: &str,
        mechanism: &str,
    ) -> Result<Option<ScramCredential>>;

    /// Every user's credentials (`None`), or those of the named users, ordered by user then
    /// mechanism (in byte order).
    async fn scram_credentials(
        &self,
        users: Option<&[String]>,
    ) -> Result<Vec<(String, ScramCredential)>>;
}

/// One ACL binding, as Kafka's CreateAcls carries it (the numbers are Kafka's codes: resource
/// type 2 TOPIC, 3 GROUP, 4 CLUSTER, 5 TRANSACTIONAL_ID...; pattern type 3 LITERAL, 4 PREFIXED;
/// operation 2 ALL, 3 READ, ...; permission 2 DENY, 3 ALLOW). The store does not interpret them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    /// "User:alice", "User:*".
    pub principal: String,
    /// "*" or an address.
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
}

/// The cluster's ACL bindings. Creating and deleting each run in one transaction, and announce
/// a change (see [`Coordination::cluster_changes`]) when they change any binding, so that every
/// broker learns of it.
#[async_trait::async_trait]
pub trait Acls: Send + Sync + 'static {
    /// Adds bindings; one that exists already is left as it is (creating is idempotent, as in Kafka).
    async fn create_acls(&self, bindings: Vec<AclBinding>) -> Result<()>;

    /// Removes exactly these bindings (those that exist); how many were removed.
    async fn delete_acls(&self, bindings: Vec<AclBinding>) -> Result<u64>;

    /// Every binding, in the order of the struct's fields (Ord).
    async fn acls(&self) -> Result<Vec<AclBinding>>;
}

/// One client quota: an entity (canonical text the API layer builds, e.g. "user=alice",
/// "user=alice,client-id=app", "client-id=" for the default client id; the store does not
/// interpret it), a quota key ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
/// ...) and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientQuota {
    pub entity: String,
    pub key: String,
    pub value: f64,
}

/// Client quotas, one value per entity and key. Altering runs in one transaction, and announces
/// a change (see [`Coordination::cluster_changes`]) when it changes any quota, so that every
/// broker learns of it.
#[async_trait::async_trait]
pub trait Quotas: Send + Sync + 'static {
    /// Applies changes in one transaction: `Some(v)` sets entity's key to v (replacing), `None`
    /// removes it (absent: nothing to do). A key named more than once: the last change wins.
    async fn alter_client_quotas(&self, changes: Vec<(String, String, Option<f64>)>) -> Result<()>;

    /// Every quota, ordered by entity then key (byte order).
    async fn client_quotas(&self) -> Result<Vec<ClientQuota>>;
}

/// Changes to client quotas as both backends apply them: one per entity and key, the last one
/// named, in entity then key order (the order PostgreSQL locks their rows in).
pub(crate) fn quota_changes(
    changes: Vec<(String, String, Option<f64>)>,
) -> BTreeMap<(String, String), Option<f64>> {
    changes
        .into_iter()
        .map(|(entity, key, value)| ((entity, key), value))
        .collect()
}

/// A cluster link's record: its definition and state as the link layer encodes them (the store
/// does not interpret the body), and a version that every change raises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkRecord {
    pub name: String,
    pub body: String,
    pub version: u64,
}

/// Cluster links (mirroring from another Kafka cluster): one record per link, changed by
/// compare-and-set on its version, so that the controller and an admin call changing one link
/// at once never lose either change. Every change announces a cluster change (see
/// [`Coordination::cluster_changes`]), so that every broker learns of it.
#[async_trait::async_trait]
pub trait Links: Send + Sync + 'static {
    /// Creates link `name` at version 1; `false` (nothing changed) if one of that name exists.
    async fn create_link(&self, name: &str, body: &str) -> Result<bool>;

    /// Replaces the body of link `name` if it is still at `version`: the new version, or `None`
    /// when the link changed since or is gone (nothing changed).
    async fn update_link(&self, name: &str, body: &str, version: u64) -> Result<Option<u64>>;

    /// Removes link `name`; whether it was there.
    async fn delete_link(&self, name: &str) -> Result<bool>;

    /// Every link, by name (byte order).
    async fn links(&self) -> Result<Vec<LinkRecord>>;
}

/// The parts the group coordinator uses: committed offsets and membership.
pub trait GroupStore: GroupOffsets + GroupStates {}

impl<T: GroupOffsets + GroupStates + ?Sized> GroupStore for T {}

/// The whole metadata store: every part, over one database. (Its group parts are spelled as
/// [`GroupStore`], so that an `Arc<dyn MetaStore>` upcasts to the `Arc<dyn GroupStore>` the group
/// coordinator takes.)
pub trait MetaStore:
    ObjectIndex
    + Catalog
    + GroupStore
    + ProducerSnapshots
    + Coordination
    + Transactions
    + Credentials
    + Acls
    + Quotas
    + Links
    + ShareStates
    + Schemas
    + IcebergCatalog
{
}

impl<
        T: ObjectIndex
            + Catalog
            + GroupOffsets
            + GroupStates
            + ProducerSnapshots
            + Coordination
            + Transactions
            + Credentials
            + Acls
            + Quotas
            + Links
            + ShareStates
            + Schemas
            + IcebergCatalog,
    > MetaStore for T
{
}
