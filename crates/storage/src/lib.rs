//! Weir's storage engine: ordered record batches per stream, on a write-ahead log, a log cache
//! and object storage. It knows nothing of Kafka; the partition layer above it does.
//!
//! How the parts fit:
//!
//! - [`Engine`] owns the parts below and gives each what it works with when it opens; no other
//!   module reaches into it. The open streams (`streams.rs`), the object writer (`objects.rs`)
//!   and the log cache's budget (`log_cache.rs`) are shared by the rest.
//! - [`Engine::append_with`] is the one way data enters a stream. Under the stream's lock it
//!   assigns the base offset, lets the caller decide what to append (the Kafka layer checks
//!   producer sequences there), puts the batch in the log cache and hands it on (`intake.rs`)
//!   to its stream's way of making it durable, behind one trait (`durability.rs`): the WAL file
//!   ([`weir_wal`]) or the object WAL; or keeps it waiting in the stream, behind every earlier
//!   batch, while that has no room. The kind calls back, in order, when the batch is durable;
//!   the stream's high watermark advances and the caller is answered. A failed write rewinds the stream
//!   (`stream.rs`, which owns a stream's offsets, cache and byte accounting).
//! - A stream on the object WAL (`object_wal.rs`; the topic config `weir.wal.kind`, or an
//!   engine opened without a WAL file) hands its batches to object storage instead: they are
//!   collected into an ordinary object, PUT and committed, and only then durable (and already
//!   committed). Several objects are in flight; their commits take turns, in order.
//! - The uploader (`upload.rs`) takes durable batches not yet in object storage; the object
//!   writer builds objects in the [`format`] (a stream-set object for small streams, stream
//!   objects for large ones), PUTs them and commits them to the metadata store ([`weir_meta`])
//!   in one transaction; the uploader trims the WAL and the intake hands waiting batches on.
//! - [`Engine::read`] serves from the log cache, or from objects through the block cache and
//!   ranged GETs with read-ahead (`reader.rs`); consumers' reads from objects run on niced
//!   threads of their own (`catchup.rs`), below the produce path.
//! - On open, whatever the WAL holds that the metadata store does not is uploaded before any
//!   stream opens (`recovery.rs`). A peer recovers a dead broker's WAL the same way
//!   ([`Engine::recover_peer_wal`]), after sealing it and raising the epochs of its streams.
//! - In the background (`maintenance.rs`): retention moves start offsets, compaction
//!   (`compaction.rs`) rewrites a stream's many small ranges into stream objects under a
//!   bandwidth budget (`budget.rs`), and unreferenced and orphaned objects are deleted.
//!
//! The invariants each stream keeps are stated in `stream.rs` and checked, in release builds
//! too, wherever its offsets move (`invariant.rs`).

#[macro_use]
pub mod invariant;
mod budget;
mod catchup;
mod collector;
mod compaction;
mod config;
/// Compiled for tests only (feature `testing`, which this crate's integration tests turn on).
#[cfg(any(test, feature = "testing"))]
pub mod conformance;
mod durability;
mod engine;
mod error;
pub mod format;
mod intake;
pub mod local;
mod log_cache;
mod maintenance;
mod object_wal;
mod objects;
pub mod objstore;
mod reader;
mod recovery;
mod shared;
mod stream;
mod streams;
mod upload;

pub use catchup::{niced_runtime, BackgroundRuntime};
pub use compaction::Rewritten;
pub use config::{Retention, StorageConfig, WalKind};
pub use engine::{
    AppendOutcome, Appended, Engine, NewBatch, PendingAppend, ReadResult, StreamHandle, StreamInfo,
    StreamOptions,
};
pub use error::{Result, StorageError};
pub use format::Frame;
pub use recovery::{PeerRecovery, PeerRecoveryError};
pub use stream::RewindHook;

use weir_metrics::{Counter, Gauge, Histogram, Registry};

/// What the engine counts.
#[derive(Debug, Default)]
pub struct StorageMeters {
    pub appends: Counter,
    pub append_latency: Histogram,
    pub log_cache_hits: Counter,
    pub log_cache_misses: Counter,
    pub log_cache_evicted_bytes: Counter,
    pub block_cache_hits: Counter,
    pub block_cache_misses: Counter,
    pub block_cache_fill_bytes: Counter,
    /// Bytes of blocks evicted from the block cache before any read took them: fetched for
    /// nothing (the read-ahead ran too far ahead of the reader, or the cache is too small for
    /// the readers' windows).
    pub block_cache_evicted_unread_bytes: Counter,
    /// Blocks a read found being fetched (by the read-ahead or another read) and waited for.
    pub block_in_flight_hits: Counter,
    /// Bytes of the GETs the read-ahead started (those that succeed are also in
    /// `block_cache_fill_bytes`).
    pub readahead_bytes: Counter,
    /// Payload bytes that consumers' reads (and other zones' brokers') got from object
    /// storage, through the block cache: what the bytes fetched for them are measured against.
    pub object_read_bytes: Counter,
    /// Bytes compaction and the cleaner fetched from object storage (not cached).
    pub background_get_bytes: Counter,
    /// Look-ups of a stream's ranges in the metadata store by reads from object storage
    /// (a broker serving another zone's leader makes one per read of new data).
    pub index_lookups: Counter,
    /// Bytes held by the cache of object indexes (a gauge; bounded by
    /// `StorageConfig::index_cache_bytes`).
    pub object_index_cache_bytes: Gauge,
    /// Bytes held by the block cache (a gauge; bounded by `StorageConfig::block_cache_bytes`).
    pub block_cache_bytes: Gauge,
    pub uploads: Counter,
    /// Latency of the metadata-store transaction that commits an upload's objects: the one
    /// place the write path touches the metadata store.
    pub commit_latency: Histogram,
    pub objects_uploaded: Counter,
    pub upload_bytes: Counter,
    pub upload_errors: Counter,
    pub wal_full_failures: Counter,
    pub objects_deleted: Counter,
    /// Retention checks that read a stream's ranges from the metadata store (a check whose
    /// stream has not changed since the last one, and whose time has not come, reads nothing).
    pub retention_checks: Counter,
    pub recovered_batches: Counter,
    pub compactions: Counter,
    pub compacted_bytes: Counter,
    /// Objects the object WAL wrote and committed, and the payload bytes in them.
    pub object_wal_objects: Counter,
    pub object_wal_bytes: Counter,
    /// Bytes of the objects the object WAL committed (payload plus object format): what it
    /// wrote to object storage, before compaction rewrites any of it.
    pub object_wal_object_bytes: Counter,
    /// Objects of the object WAL whose PUT or commit failed (their appends failed and rewound).
    pub object_wal_failures: Counter,
    /// From an object's first batch to its commit: what an append waits on the object WAL.
    pub object_wal_latency: Histogram,
    /// Payload bytes handed to the object WAL and not yet committed (a gauge).
    pub object_wal_pending_bytes: Gauge,
}

impl StorageMeters {
    /// Declares the engine's meters.
    pub fn register(&self, r: &mut Registry) {
        r.counter(
            "storage_appends",
            "Batches appended and durable.",
            &self.appends,
        );
        r.histogram(
            "storage_append_latency",
            "Append latency: offset assignment to durable.",
            &self.append_latency,
        );
        self.register_reads(r);
        self.register_uploads(r);
        self.register_object_wal(r);
    }

    fn register_reads(&self, r: &mut Registry) {
        r.counter(
            "log_cache_hits",
            "Reads served from the log cache.",
            &self.log_cache_hits,
        );
        r.counter(
            "log_cache_misses",
            "Reads that went to objects.",
            &self.log_cache_misses,
        );
        r.counter(
            "index_lookups",
            "Look-ups of a stream's ranges in the metadata store by reads from object storage.",
            &self.index_lookups,
        );
        r.counter(
            "log_cache_evicted_bytes",
            "Bytes evicted from the log cache.",
            &self.log_cache_evicted_bytes,
        );
        r.counter(
            "block_cache_hits",
            "Object blocks served from the block cache.",
            &self.block_cache_hits,
        );
        r.counter(
            "block_cache_misses",
            "Object blocks fetched with ranged GETs.",
            &self.block_cache_misses,
        );
        r.counter(
            "block_cache_fill_bytes",
            "Bytes fetched into the block cache.",
            &self.block_cache_fill_bytes,
        );
        r.counter(
            "block_cache_evicted_unread_bytes",
            "Bytes of blocks evicted from the block cache before any read took them.",
            &self.block_cache_evicted_unread_bytes,
        );
        r.counter(
            "block_in_flight_hits",
            "Object blocks a read found being fetched and waited for.",
            &self.block_in_flight_hits,
        );
        r.counter(
            "readahead_bytes",
            "Bytes the read-ahead fetched from objects (also in block_cache_fill_bytes).",
            &self.readahead_bytes,
        );
        r.counter(
            "object_read_bytes",
            "Payload bytes consumers' reads got from objects (through the block cache).",
            &self.object_read_bytes,
        );
        r.counter(
            "background_get_bytes",
            "Bytes compaction and the cleaner fetched from objects (not cached).",
            &self.background_get_bytes,
        );
        r.gauge(
            "block_cache_bytes",
            "Bytes held by the block cache.",
            &self.block_cache_bytes,
        );
        r.gauge(
            "object_index_cache_bytes",
            "Bytes held by the cache of object indexes.",
            &self.object_index_cache_bytes,
        );
    }

    fn register_uploads(&self, r: &mut Registry) {
        r.counter(
            "uploads",
            "Uploads (objects written and committed together).",
            &self.uploads,
        );
        r.histogram(
            "metadata_commit",
            "Latency of committing an upload's objects to the metadata store (one transaction).",
            &self.commit_latency,
        );
        r.counter(
            "objects_uploaded",
            "Objects written.",
            &self.objects_uploaded,
        );
        r.counter(
            "upload_bytes",
            "Bytes of objects written.",
            &self.upload_bytes,
        );
        r.counter(
            "upload_errors",
            "Failed object PUTs (retried).",
            &self.upload_errors,
        );
        r.counter(
            "wal_full_failures",
            "Appends failed because the WAL stayed full longer than wal.full_wait_ms (KAFKA_STORAGE_ERROR, retriable).",
            &self.wal_full_failures,
        );
        r.counter(
            "recovered_batches",
            "Batches read back from a WAL at recovery (this broker's own at start, or a failed peer's) and uploaded.",
            &self.recovered_batches,
        );
        r.counter(
            "compactions",
            "Compaction runs that replaced small objects with one larger object.",
            &self.compactions,
        );
        r.counter(
            "compacted_bytes",
            "Bytes written by compaction (the objects that replaced smaller ones).",
            &self.compacted_bytes,
        );
        r.counter(
            "objects_deleted",
            "Objects deleted by retention and cleanup.",
            &self.objects_deleted,
        );
        r.counter(
            "retention_checks",
            "Retention checks that read a stream's ranges from the metadata store: streams that \
             changed since their last check, or whose oldest data reached its age limit.",
            &self.retention_checks,
        );
    }

    fn register_object_wal(&self, r: &mut Registry) {
        r.counter(
            "object_wal_objects",
            "Objects the object WAL wrote and committed (each holds the batches it acknowledged).",
            &self.object_wal_objects,
        );
        r.counter(
            "object_wal_bytes",
            "Payload bytes acknowledged through the object WAL.",
            &self.object_wal_bytes,
        );
        r.counter(
            "object_wal_object_bytes",
            "Bytes of the objects the object WAL wrote (payload and object format), before compaction.",
            &self.object_wal_object_bytes,
        );
        r.counter(
            "object_wal_failures",
            "Objects of the object WAL whose PUT or commit failed (their appends failed and were retried by clients).",
            &self.object_wal_failures,
        );
        r.histogram(
            "object_wal",
            "Object WAL: from an object's first batch to its commit (linger, PUT, commit).",
            &self.object_wal_latency,
        );
        r.gauge(
            "object_wal_pending_bytes",
            "Payload bytes handed to the object WAL and not yet committed.",
            &self.object_wal_pending_bytes,
        );
    }
}
