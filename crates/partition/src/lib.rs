//! Kafka partitions on Weir's storage engine.
//!
//! - [`batch`]: `RecordBatch` v2 headers: validation (magic, lengths, CRC, size), and the base
//!   offset and leader epoch the leader writes into them.
//! - [`producer`]: idempotent-producer state (epochs, the last five sequence ranges per producer).
//! - [`txn`]: transactions as one partition sees them: open ones (the last stable offset),
//!   aborted ones (for `read_committed` fetches), verification guards (KIP-890).
//! - [`partition`]: the leader of one partition: produce (validate, check sequences, append
//!   through the engine in order, wait for durability), fetch, offsets by time, DeleteRecords.
//! - [`clean`]: the cleaner of compacted topics: the latest record of each key stays.
//! - [`topics`]: the topic catalog: topics, partitions (one stream each) and configs, kept in the
//!   metadata store.
//!
//! The Kafka API layer above turns requests into calls here; the storage engine below knows
//! nothing of Kafka.

pub mod batch;
pub mod clean;
pub mod partition;
pub mod producer;
pub mod topics;
pub mod txn;

#[cfg(test)]
mod rewind_tests;

pub use partition::{
    kafka_error, Cleaned, FetchData, Partition, ProduceTicket, Produced, TxnCheck,
};
pub use topics::{
    AdminError, CleanerMeters, ConfigEntry, Lookup, Topic, TopicDefaults, Topics,
    MIRROR_LINK_CONFIG, WAL_KIND_CONFIG, ZONE_ROUTING_CONFIG, ZONE_ROUTING_IN_ZONE,
    ZONE_ROUTING_LEADER,
};
