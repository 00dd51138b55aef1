//! Share groups' persisted state (KIP-932): for each share-partition (a group, a topic, a
//! partition), where consumption starts (the share-partition start offset, SPSO) and the records
//! above it whose fate is decided or counted: acknowledged, archived, or available again after
//! some deliveries. Acquisitions are never stored (Kafka does not store them either): after a
//! leader change, records that were acquired come back available with the delivery count last
//! stored.
//!
//! A share-partition's leader writes the whole state after each acknowledgement, release or
//! lock timeout, before it answers: the state is small (the in-flight window is bounded by
//! `group.share.partition.max.record.locks`, 2,000 records by default). Two epochs fence stale
//! writers:
//!
//! - the leader epoch: a leader claims the state with its partition leader epoch
//!   ([`ShareStates::claim_share_state`]); from then on a writer with a lower one is refused, so
//!   a broker that lost the partition cannot undo what the new leader wrote;
//! - the state epoch: raised when an administrator resets the start offset
//!   (AlterShareGroupOffsets, [`ShareStates::reset_share_state`]); a leader holding the state of
//!   an earlier epoch is refused and reads it again.

use crate::{MetaError, Result};

/// What became of a range of records, as stored (Kafka's `DeliveryState` of a state batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeliveryState {
    /// Released, or its lock expired: to be delivered again.
    Available,
    /// Accepted by a consumer.
    Acknowledged,
    /// Rejected, past the delivery limit, or a gap: never delivered again.
    Archived,
}

impl DeliveryState {
    /// Kafka's code: 0 available, 2 acknowledged, 4 archived.
    pub fn code(self) -> i8 {
        match self {
            DeliveryState::Available => 0,
            DeliveryState::Acknowledged => 2,
            DeliveryState::Archived => 4,
        }
    }

    pub fn from_code(code: i8) -> Option<Self> {
        match code {
            0 => Some(DeliveryState::Available),
            2 => Some(DeliveryState::Acknowledged),
            4 => Some(DeliveryState::Archived),
            _ => None,
        }
    }
}

/// Records `first..=last` in one state, delivered `delivery_count` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub state: DeliveryState,
    pub delivery_count: i16,
}

/// One share-partition's stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareState {
    /// Raised by each reset of the start offset.
    pub state_epoch: i32,
    /// The partition leader epoch of the leader that last claimed or wrote the state.
    pub leader_epoch: i32,
    /// The share-partition start offset: every record below it is done with.
    pub start_offset: i64,
    /// Sorted, non-overlapping ranges at or above `start_offset`. Offsets in no batch, between
    /// the start offset and the last batch, are available and never delivered.
    pub batches: Vec<ShareBatch>,
}

impl ShareState {
    /// Checks the invariants every stored state keeps; the reason when one does not hold.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.start_offset < 0 {
            return Err(format!("start offset {} is negative", self.start_offset));
        }
        let mut next = self.start_offset;
        for b in &self.batches {
            if b.first_offset > b.last_offset {
                return Err(format!(
                    "batch {}..={} is empty",
                    b.first_offset, b.last_offset
                ));
            }
            if b.first_offset < next {
                return Err(format!(
                    "batch {}..={} starts below {next} (the start offset or the previous batch)",
                    b.first_offset, b.last_offset
                ));
            }
            if b.delivery_count < 0 {
                return Err(format!(
                    "batch {}: delivery count is negative",
                    b.first_offset
                ));
            }
            next = b.last_offset.saturating_add(1);
        }
        Ok(())
    }

    /// The batches as stored: 19 bytes each (first, last, state, delivery count; big-endian).
    pub fn encode_batches(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.batches.len() * BATCH_BYTES);
        for b in &self.batches {
            out.extend_from_slice(&b.first_offset.to_be_bytes());
            out.extend_from_slice(&b.last_offset.to_be_bytes());
            out.push(b.state.code() as u8);
            out.extend_from_slice(&b.delivery_count.to_be_bytes());
        }
        out
    }

    /// The batches [`ShareState::encode_batches`] wrote; `None` if the bytes are not such.
    pub fn decode_batches(bytes: &[u8]) -> Option<Vec<ShareBatch>> {
        if !bytes.len().is_multiple_of(BATCH_BYTES) {
            return None;
        }
        bytes
            .chunks_exact(BATCH_BYTES)
            .map(|c| {
                Some(ShareBatch {
                    first_offset: i64::from_be_bytes(c[0..8].try_into().ok()?),
                    last_offset: i64::from_be_bytes(c[8..16].try_into().ok()?),
                    state: DeliveryState::from_code(c[16] as i8)?,
                    delivery_count: i16::from_be_bytes(c[17..19].try_into().ok()?),
                })
            })
            .collect()
    }
}

const BATCH_BYTES: usize = 19;

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The state, now claimed at the caller's leader epoch (created at the caller's start
    /// offset if there was none).
    Claimed(ShareState),
    /// A leader of a higher epoch claimed it: the caller no longer leads the partition.
    Fenced { leader_epoch: i32 },
}

/// Share-partitions' states, keyed by group, topic name and partition. Deleting a topic deletes
/// its share states with it (see [`crate::Catalog::delete_topic`]).
#[async_trait::async_trait]
pub trait ShareStates: Send + Sync + 'static {
    /// Takes the state of a share-partition for a leader at `leader_epoch`: creates it (state
    /// epoch 0, no batches, at `start_offset`) if there is none; raises its leader epoch to
    /// `leader_epoch` otherwise. Refused ([`Claim::Fenced`]) if a higher epoch claimed it.
    async fn claim_share_state(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        leader_epoch: i32,
        start_offset: i64,
    ) -> Result<Claim>;

    /// Replaces the state if it was claimed at `state.leader_epoch` or lower, is still at
    /// `state.state_epoch`, and the start offset does not go back: whether it was written
    /// (`false`: a newer leader or a reset came first, or the state is gone).
    /// An invalid state (see [`ShareState::check`]) is an error and writes nothing.
    async fn write_share_state(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        state: &ShareState,
    ) -> Result<bool>;

    async fn read_share_state(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Option<ShareState>>;

    /// Sets the start offset (AlterShareGroupOffsets): the state epoch goes up by one (0 for a
    /// new state), the batches are dropped, the leader epoch is kept. Returns the new state.
    async fn reset_share_state(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        start_offset: i64,
    ) -> Result<ShareState>;

    /// Every state of `group`: (topic, partition, state), by topic (byte order) and partition.
    async fn share_states(&self, group: &str) -> Result<Vec<(String, i32, ShareState)>>;

    /// Deletes `group`'s states, of one topic or of all; how many there were.
    async fn delete_share_states(&self, group: &str, topic: Option<&str>) -> Result<u64>;
}

/// The state a first claim creates.
pub(crate) fn fresh(start_offset: i64) -> ShareState {
    ShareState {
        state_epoch: 0,
        leader_epoch: -1,
        start_offset: start_offset.max(0),
        batches: Vec::new(),
    }
}

/// Whether `new` may replace `current` (see [`ShareStates::write_share_state`]).
pub(crate) fn may_replace(current: &ShareState, new: &ShareState) -> bool {
    new.leader_epoch >= current.leader_epoch
        && new.state_epoch == current.state_epoch
        && new.start_offset >= current.start_offset
}

/// The state a reset to `start_offset` leaves.
pub(crate) fn reset(current: Option<ShareState>, start_offset: i64) -> ShareState {
    match current {
        Some(s) => ShareState {
            state_epoch: s.state_epoch + 1,
            leader_epoch: s.leader_epoch,
            start_offset: start_offset.max(0),
            batches: Vec::new(),
        },
        None => fresh(start_offset),
    }
}

/// A stored row as a state; its batches must decode.
pub(crate) fn decode(
    state_epoch: i32,
    leader_epoch: i32,
    start_offset: i64,
    batches: &[u8],
) -> Result<ShareState> {
    let batches = ShareState::decode_batches(batches)
        .ok_or_else(|| MetaError::Corrupt("a share state's batches".into()))?;
    Ok(ShareState {
        state_epoch,
        leader_epoch,
        start_offset,
        batches,
    })
}
