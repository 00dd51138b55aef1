use weir_meta::MetaError;
use weir_wal::WalError;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("stream {0} is not open on this broker")]
    NotOpen(u64),
    #[error("stream {stream_id}: epoch {epoch} is fenced by epoch {current}")]
    Fenced {
        stream_id: u64,
        epoch: u64,
        current: u64,
    },
    #[error("stream {stream_id}: offset {offset} is outside [{start}, {end}]")]
    OffsetOutOfRange {
        stream_id: u64,
        offset: u64,
        start: u64,
        end: u64,
    },
    #[error("WAL: {0}")]
    Wal(#[from] WalError),
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error("object store: {0}")]
    Object(#[from] object_store::Error),
    /// An error of a GET that several reads waited for.
    #[error("{0}")]
    Shared(std::sync::Arc<StorageError>),
    #[error("object {key} is corrupt: {reason}")]
    Corrupt { key: String, reason: String },
    #[error("storage engine is closed")]
    Closed,
    /// A bug: a read's task panicked.
    #[error("internal error: {0}")]
    Internal(String),
    #[error("stream {stream_id}: an append must take at least one offset")]
    EmptyBatch { stream_id: u64 },
    #[error(
        "WAL recovery found a gap in stream {stream_id}: expected offset {expected}, found {got}; \
         the WAL is left untouched (nothing was dropped) and the broker cannot open until it is \
         repaired"
    )]
    RecoveryGap {
        stream_id: u64,
        expected: u64,
        got: u64,
    },
}

impl StorageError {
    /// Whether the caller may retry the same request (Kafka's retriable errors).
    pub fn is_retriable(&self) -> bool {
        match self {
            StorageError::Wal(e) => e.is_retriable(),
            StorageError::Object(_) | StorageError::Meta(MetaError::Backend { .. }) => true,
            StorageError::Shared(e) => e.is_retriable(),
            _ => false,
        }
    }
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;
