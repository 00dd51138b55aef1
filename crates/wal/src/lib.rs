//! Write-ahead logs for Weir.
//!
//! A WAL takes record batches at disk latency and keeps them until the storage engine has moved
//! them to object storage and trims them. Every kind implements the one [`Wal`] trait and passes
//! the one [`conformance`] suite:
//!
//! - [`file`]: a preallocated file or block device written with 4 KiB-aligned `O_DIRECT` writes,
//!   group-committed (many appends, one write, one `fdatasync`), reused as a ring.
//!
//! The contract every kind keeps:
//!
//! - [`Wal::append`] reserves a sequence number at once and calls the completion later, once the
//!   record is durable or has failed. Completions run strictly in sequence order, on the WAL's
//!   own thread, so a caller can advance its state in WAL order without further locking.
//! - When a write fails, the record of that write and every record queued behind it fail; the
//!   WAL writes the next record where the failed write began, so recovery never meets a hole.
//! - [`Wal::trim`] frees the records below a sequence number. Space is reused only after the
//!   trim point is itself durable, so recovery never scans into overwritten space.
//! - Recovery returns, in order, every record that was durable and not trimmed, and never a torn
//!   one.
//! - A record is acknowledged (its completion told `Ok`) only if, after it became durable, the
//!   WAL's [`AckGate`] still allowed it (the broker's session is valid) and, for a WAL that a
//!   peer may recover, no peer had sealed it. A refused record fails as a failed write does.
//!
//! Failover: the `file` WAL names itself (a random id in its superblock) so that a peer that takes
//! over a dead broker's WAL on shared storage can check it opened the right one, seal it
//! ([`FileWal::seal`]), then read what it holds ([`FileWal::read_sealed`]). The sealed WAL's
//! owner, if it was only paused, finds the seal after its next write and acknowledges nothing
//! more; when it starts again it begins empty ([`FileWal::start_empty`]).

mod aligned;
/// Compiled for tests only (feature `testing` for other crates' tests).
#[cfg(any(test, feature = "testing"))]
pub mod conformance;
pub mod file;
mod format;
mod v1;

use std::sync::Arc;

use bytes::Bytes;

pub use aligned::AlignedBuf;
pub use file::{FileWal, FileWalConfig, WalFault, WalFaults, WalIdentity};
pub use format::Seal;
pub use format::BLOCK;

/// Sequence number of a record in a WAL: increasing, not necessarily contiguous.
pub type Seq = u64;

/// One record: a batch of one stream, written by its leader at `epoch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalRecord {
    pub stream_id: u64,
    pub epoch: u64,
    pub base_offset: u64,
    pub record_count: u32,
    pub max_timestamp: i64,
    pub payload: Bytes,
}

impl WalRecord {
    /// Offset one past the last record of this batch.
    pub fn end_offset(&self) -> u64 {
        self.base_offset + u64::from(self.record_count)
    }
}

/// A record found by recovery, with the sequence number it was written at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredRecord {
    pub seq: Seq,
    pub record: WalRecord,
}

/// Called once per append, on the WAL's thread, in sequence order.
pub type Completion = Box<dyn FnOnce(Result<Seq, WalError>) + Send>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum WalError {
    #[error("WAL is full: {needed} bytes needed, {free} of {capacity} free; waiting for uploads to trim it")]
    Full {
        needed: u64,
        free: u64,
        capacity: u64,
    },
    #[error("record of {size} bytes is larger than the WAL allows ({max} bytes)")]
    TooLarge { size: u64, max: u64 },
    #[error("WAL write failed, append not durable: {0}")]
    WriteFailed(Arc<std::io::Error>),
    #[error("append rejected: an earlier WAL write failed and the WAL is resetting")]
    Resetting,
    #[error("WAL {path}: {context}: {source}")]
    Io {
        path: String,
        context: &'static str,
        source: Arc<std::io::Error>,
    },
    #[error("WAL {path} is not usable: {reason}")]
    Invalid { path: String, reason: String },
    #[error("WAL is closed")]
    Closed,
    #[error("WAL was sealed by broker {node_id} (incarnation {incarnation}), which recovered it; this broker was replaced and acknowledges nothing more")]
    Sealed { node_id: i32, incarnation: u64 },
    #[error("write not acknowledged: {0}")]
    Fenced(String),
    #[error("WAL {path} has id {found:032x}, not {expected:032x}: another WAL sits at that path")]
    WrongWal {
        path: String,
        expected: u128,
        found: u128,
    },
}

impl WalError {
    /// Whether the same append may succeed if tried again later.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            WalError::Full { .. } | WalError::WriteFailed(_) | WalError::Resetting
        )
    }
}

/// How much of a WAL is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalUsage {
    pub capacity: u64,
    /// Bytes written and not yet trimmed, plus an upper bound for queued records.
    pub used: u64,
}

/// Meters every WAL kind keeps.
#[derive(Debug, Default)]
pub struct WalMeters {
    pub appends: weir_metrics::Counter,
    pub bytes_written: weir_metrics::Counter,
    pub writes: weir_metrics::Counter,
    pub syncs: weir_metrics::Counter,
    pub write_errors: weir_metrics::Counter,
    pub full_rejections: weir_metrics::Counter,
    /// Time of one write plus its sync.
    pub sync_latency: weir_metrics::Histogram,
    /// Group writes that were durable but not acknowledged: the session had lapsed or a peer had
    /// sealed the WAL.
    pub refused_acks: weir_metrics::Counter,
}

impl WalMeters {
    /// Declares the WAL's meters, and its capacity and use read from `wal` when scraped.
    pub fn register(wal: &Arc<dyn Wal>, r: &mut weir_metrics::Registry) {
        let m = wal.meters();
        r.counter("wal_appends", "Records appended to the WAL.", &m.appends);
        r.counter(
            "wal_bytes_written",
            "Bytes written to the WAL device, padding included.",
            &m.bytes_written,
        );
        r.counter(
            "wal_writes",
            "Group writes to the WAL device (each holds the records queued meanwhile).",
            &m.writes,
        );
        r.counter(
            "wal_syncs",
            "WAL writes made durable (one per group commit).",
            &m.syncs,
        );
        r.counter("wal_write_errors", "Failed WAL writes.", &m.write_errors);
        r.counter(
            "wal_full_rejections",
            "Appends refused because the WAL was full.",
            &m.full_rejections,
        );
        r.histogram(
            "wal_sync_latency",
            "Time of one WAL write plus its sync.",
            &m.sync_latency,
        );
        r.counter(
            "wal_refused_acks",
            "WAL writes that were durable but not acknowledged: the broker's session had lapsed or a peer had sealed its WAL.",
            &m.refused_acks,
        );
        let w = Arc::clone(wal);
        r.gauge_read("wal_capacity_bytes", "WAL capacity.", move || {
            w.usage().capacity
        });
        let w = Arc::clone(wal);
        r.gauge_read("wal_used_bytes", "WAL bytes not yet trimmed.", move || {
            w.usage().used
        });
    }
}

/// Whether records that just became durable may be acknowledged. The broker's cluster membership
/// implements it: it refuses once the broker's session may have expired, since the controller may
/// then have handed the broker's partitions, and its WAL, to a peer.
pub trait AckGate: Send + Sync + std::fmt::Debug + 'static {
    fn check(&self) -> Result<(), String>;
}

#[async_trait::async_trait]
pub trait Wal: Send + Sync + 'static {
    /// Queues `record` and returns its sequence number; `done` is called once it is durable or
    /// has failed. Fails at once, without calling `done`, when the WAL is full, resetting after a
    /// failed write, or closed.
    fn append(&self, record: WalRecord, done: Completion) -> Result<Seq, WalError>;

    /// The sequence number the next append will get. Every later append gets a larger one.
    fn next_seq(&self) -> Seq;

    /// Frees every record with a sequence number below `seq`. Durable when it returns.
    async fn trim(&self, seq: Seq) -> Result<(), WalError>;

    /// Waits until a trim frees space, or until `timeout`.
    async fn wait_for_space(&self, timeout: std::time::Duration);

    /// The records recovery found when the WAL was opened, in order; empty after the first call.
    fn take_recovered(&self) -> Vec<RecoveredRecord>;

    fn usage(&self) -> WalUsage;

    fn meters(&self) -> &WalMeters;

    /// Stops the writer after the queued records are written.
    async fn close(&self);
}
