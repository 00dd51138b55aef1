//! Weir's metadata store.
//!
//! The one component that holds durable cluster state: which objects exist and which ranges of
//! which streams each holds, each stream's start offset, committed end offset and leader epoch.
//! It is off the per-record path: the storage engine calls it when it opens a stream, commits
//! uploaded objects, moves a start offset and deletes objects.
//!
//! Every backend implements [`MetaStore`] and passes the [`conformance`] suite:
//!
//! - [`sqlite`]: a file in the data directory, the embedded single-node default.
//!
//! The invariants a backend enforces, in one transaction per call:
//!
//! - a commit's ranges continue exactly at each stream's committed end offset, and carry the
//!   stream's current leader epoch (a stale leader cannot commit);
//! - an epoch never goes backwards;
//! - a start offset never goes backwards, and ranges wholly below it are dropped; an object
//!   without ranges left is marked for deletion, and deleted only after a grace period.

pub mod conformance;
pub mod sqlite;

use std::collections::BTreeMap;
use std::time::Duration;

pub use sqlite::SqliteMetaStore;

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
    #[error("object {0} was not prepared, or is already committed")]
    UnknownObject(ObjectId),
    #[error("metadata store: {context}: {source}")]
    Backend {
        context: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

pub type Result<T, E = MetaError> = std::result::Result<T, E>;

#[async_trait::async_trait]
pub trait MetaStore: Send + Sync + 'static {
    /// Opens a stream as its leader at `epoch`, creating it (empty, at offset 0) if it does not
    /// exist. Fails with [`MetaError::Fenced`] if the stream is already at a higher epoch.
    async fn open_stream(&self, stream_id: u64, epoch: u64) -> Result<StreamMeta>;

    async fn get_stream(&self, stream_id: u64) -> Result<Option<StreamMeta>>;

    /// Allocates an object id and remembers the object as uploaded-but-uncommitted, so that an
    /// object whose commit never happens is found and deleted.
    async fn prepare_object(&self, key: KeyFn) -> Result<ObjectId>;

    /// Commits prepared objects and their ranges, all or nothing.
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

    /// Objects that can be deleted from object storage now: unreferenced for longer than `grace`,
    /// or prepared and never committed for longer than `orphan_grace` (which must outlast the
    /// slowest upload).
    async fn deletable_objects(
        &self,
        grace: Duration,
        orphan_grace: Duration,
    ) -> Result<Vec<ObjectInfo>>;

    /// Forgets objects deleted from object storage.
    async fn forget_objects(&self, ids: &[ObjectId]) -> Result<()>;

    /// Compaction: replaces the stream's ranges that exactly cover `[start, end)` with the one
    /// range of the prepared object `object` (committing it), in one transaction. Objects left
    /// without ranges become unreferenced. Fails with [`MetaError::Fenced`] for a stale epoch and
    /// [`MetaError::Discontinuity`] if the ranges no longer cover exactly `[start, end)` (retention
    /// or another compaction got there first).
    async fn replace_ranges(&self, object: ObjectCommit) -> Result<()>;

    /// Number of committed, referenced objects that hold data of `stream_id`.
    async fn object_count(&self, stream_id: u64) -> Result<u64>;

    /// Creates a topic with `partitions` new streams.
    async fn create_topic(
        &self,
        name: &str,
        topic_id: [u8; 16],
        partitions: u32,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta>;

    async fn list_topics(&self) -> Result<Vec<TopicMeta>>;

    /// Deletes a topic and its streams; their objects become unreferenced.
    async fn delete_topic(&self, name: &str) -> Result<TopicMeta>;

    /// Grows a topic to `total` partitions.
    async fn add_partitions(&self, name: &str, total: u32) -> Result<TopicMeta>;

    /// Replaces a topic's configs.
    async fn set_topic_configs(&self, name: &str, configs: BTreeMap<String, String>) -> Result<()>;

    /// Commits offsets of a group; a later commit of a partition replaces an earlier one.
    async fn commit_offsets(&self, group: &str, offsets: Vec<GroupOffset>) -> Result<()>;

    async fn fetch_offsets(&self, group: &str) -> Result<Vec<GroupOffset>>;

    /// Deletes a group's offsets: those of the given partitions, or all of them.
    async fn delete_offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, u32)>>,
    ) -> Result<()>;

    /// Groups that have committed offsets.
    async fn offset_groups(&self) -> Result<Vec<String>>;

    /// Stores the idempotent-producer state of a stream, valid up to `offset`.
    async fn save_producer_snapshot(
        &self,
        stream_id: u64,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()>;

    async fn load_producer_snapshot(&self, stream_id: u64) -> Result<Option<(u64, Vec<u8>)>>;

    /// Allocates `count` consecutive ids from the named counter; returns the first.
    async fn allocate_ids(&self, counter: &str, count: u64) -> Result<u64>;

    /// Returns the value stored under `key`, storing `default` first if there is none.
    async fn get_or_init(&self, key: &str, default: &str) -> Result<String>;
}
