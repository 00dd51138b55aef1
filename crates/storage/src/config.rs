//! The storage engine's settings.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct StorageConfig {
    /// Upload when this much durable data waits in the log cache.
    pub upload_bytes: u64,
    /// Upload when the oldest durable data has waited this long.
    pub upload_interval: Duration,
    /// A stream with at least this much data in one upload gets an object of its own.
    pub stream_object_bytes: u64,
    /// Target size of a data block in an object.
    pub block_bytes: u64,
    /// Memory for recent data, uploaded or not: the oldest uploaded data is evicted to keep the
    /// total within it. Data not yet uploaded stays in memory regardless (the WAL's capacity
    /// bounds it), so the cache exceeds this only while more than this waits for an upload.
    pub log_cache_bytes: u64,
    /// Memory for blocks read from objects.
    pub block_cache_bytes: u64,
    /// Memory for the indexes of objects read (about 56 bytes per block of an object).
    pub index_cache_bytes: u64,
    /// Largest read-ahead of a reader going on sequentially.
    pub readahead_max_bytes: u64,
    /// How long an append waits for WAL space before it fails.
    pub wal_full_wait: Duration,
    /// How long an object no longer referenced stays, so that reads in flight finish.
    pub delete_grace: Duration,
    /// How long an uploaded but uncommitted object may take to be committed before it counts as
    /// an orphan.
    pub orphan_grace: Duration,
    /// How often retention and deletion run.
    pub maintenance_interval: Duration,
    /// Part size of multipart uploads (S3 wants at least 5 MiB a part): compaction's runs of
    /// more than two parts, and uploads of more than two parts while the WAL waits for them
    /// (other uploads are one PUT).
    pub multipart_part_bytes: u64,
    /// Compaction writes stream objects of up to this size.
    pub compaction_target_bytes: u64,
    /// A stream is compacted once it has this many small ranges (below 4 MiB, or below half the
    /// target if that is less).
    pub compaction_min_ranges: usize,
    /// Bytes per second compaction may read and write (0: unlimited).
    pub background_bytes_per_sec: u64,
    /// Bytes per second catch-up reads may fetch from object storage (0: unlimited).
    pub catchup_bytes_per_sec: u64,
    /// How many nice steps below the broker's other threads consumers' reads from object
    /// storage run, and the building and writing of objects the WAL does not wait for (0: on
    /// the broker's own threads).
    pub catchup_nice: i32,
    /// The object WAL seals an object once its first batch has waited this long...
    pub object_wal_linger: Duration,
    /// ...or once it holds this many bytes, whichever comes first.
    pub object_wal_bytes: u64,
    /// The object WAL's budget of objects per second (0: none). Below it an object is sealed on
    /// `object_wal_linger`; at it, an object waits for its turn while batches join it, so that
    /// objects are sealed on `object_wal_bytes` instead: a quiet broker costs at most this many
    /// PUTs a second (and a stream object per large stream), a busy one `bytes/s /
    /// object_wal_bytes`. Appends wait up to `1 / budget` longer.
    pub object_wal_max_puts_per_sec: f64,
    /// Objects of the object WAL being written (PUT, then commit) at once. Commits still happen
    /// in the order the objects were sealed, so a partition's batches are acknowledged in order.
    pub object_wal_max_in_flight: usize,
    /// The longest an object WAL object's PUT may take, its attempts and the object-store
    /// client's own retries included, before its batches fail (retriably): producers wait for
    /// it, and their own request timeout is 30 s by default.
    pub object_wal_put_timeout: Duration,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            upload_bytes: 128 << 20,
            upload_interval: Duration::from_secs(30),
            stream_object_bytes: 16 << 20,
            block_bytes: 1 << 20,
            log_cache_bytes: 512 << 20,
            block_cache_bytes: 256 << 20,
            index_cache_bytes: 32 << 20,
            readahead_max_bytes: 16 << 20,
            wal_full_wait: Duration::from_secs(5),
            delete_grace: Duration::from_secs(60),
            orphan_grace: Duration::from_secs(3600),
            maintenance_interval: Duration::from_secs(10),
            multipart_part_bytes: 16 << 20,
            compaction_target_bytes: 256 << 20,
            compaction_min_ranges: 8,
            background_bytes_per_sec: 64 << 20,
            catchup_bytes_per_sec: 0,
            catchup_nice: 10,
            object_wal_linger: Duration::from_millis(5),
            object_wal_bytes: 8 << 20,
            object_wal_max_puts_per_sec: 0.0,
            object_wal_put_timeout: Duration::from_secs(30),
            object_wal_max_in_flight: 8,
        }
    }
}

/// How long a stream keeps data; `None` keeps it forever.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    pub ms: Option<u64>,
    pub bytes: Option<u64>,
}

/// Which write-ahead log a stream's appends go through before they are acknowledged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum WalKind {
    /// The broker's WAL file: acknowledged at disk latency, uploaded later.
    #[default]
    File,
    /// Object storage itself: batches are collected into an object, which is PUT and committed
    /// to the metadata store before they are acknowledged. Nothing is kept on the broker.
    Object,
}

impl WalKind {
    /// The name users write (`wal.kind`, the topic config `weir.wal.kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            WalKind::File => "file",
            WalKind::Object => "object",
        }
    }
}

impl std::str::FromStr for WalKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "file" => Ok(WalKind::File),
            "object" => Ok(WalKind::Object),
            other => Err(format!(
                "unknown WAL kind {other:?}: expected \"file\" or \"object\""
            )),
        }
    }
}

impl std::fmt::Display for WalKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
