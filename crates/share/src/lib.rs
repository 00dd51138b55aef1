//! Share groups (KIP-932, "queues for Kafka"): consumers of one share group read the same
//! partitions together, each record delivered to one consumer at a time and acknowledged one by
//! one, instead of each consumer owning partitions and committing an offset.
//!
//! - [`partition`]: one share-partition (a share group's view of one topic partition): which
//!   records are available, acquired (by which member, until when), acknowledged or archived,
//!   how often each was delivered, and the start offset below which everything is done with.
//!   Pure and synchronous, given the time by its caller; it turns to and from the state the
//!   metadata store keeps ([`weir_meta::ShareState`]), so that another leader takes it over.
//! - [`session`]: share sessions, the partitions a member fetches from a broker and the epoch
//!   its next request must carry.

pub mod partition;
pub mod session;
