//! [`Transactions`]: the state of each transactional id, and the offsets a transaction commits
//! for consumer groups, staged until it ends.
//!
//! The transaction coordinator is the only writer of a record, but in a cluster two brokers may
//! briefly both believe they coordinate an id (the view moves under them). Every write therefore
//! names the version it read and fails with [`MetaError::TxnConflict`] when the stored record has
//! moved on: of two coordinators, one wins and the other learns it is stale.

use bytes::{Buf, BufMut};

use crate::{GroupOffset, MetaError, Result};

/// Where a transaction is, as Kafka's coordinator names the states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    /// No transaction since the producer id was handed out.
    Empty,
    /// Partitions or groups were added; the producer may write.
    Ongoing,
    /// The producer asked to commit; markers are on their way. The decision is final.
    PrepareCommit,
    /// An abort was decided (the producer asked, or its timeout passed, or it was fenced).
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
}

impl TxnState {
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
        }
    }

    fn code(self) -> u8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
        }
    }

    fn from_code(c: u8) -> Option<TxnState> {
        Some(match c {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            _ => return None,
        })
    }

    /// Markers are being written: the transaction is decided but not finished.
    pub fn is_preparing(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// One transactional id's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnRecord {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The producer id and epoch before the last InitProducerId, so that a client retrying it
    /// (KIP-360) gets the same answer instead of being fenced by its own retry. -1: none.
    pub last_producer_id: i64,
    pub last_producer_epoch: i16,
    pub state: TxnState,
    pub timeout_ms: i32,
    /// When the current transaction began (its first partition or group), milliseconds.
    pub start_ms: i64,
    /// When the record last changed.
    pub update_ms: i64,
    /// The partitions the current (or last) transaction wrote to, in the order added.
    pub partitions: Vec<(String, i32)>,
    /// The consumer groups whose offsets it commits.
    pub groups: Vec<String>,
    /// Transactions V2 (KIP-890 part 2): the producer id that follows once the decided
    /// transaction completes, when its epoch bump exhausted the current one's epochs. -1: none.
    pub next_producer_id: i64,
    /// The stored version this record was read at (0: not stored yet). Writes name it.
    pub version: u64,
}

impl TxnRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Vec::new();
        w.put_u8(2);
        w.put_i64(self.producer_id);
        w.put_i16(self.producer_epoch);
        w.put_i64(self.last_producer_id);
        w.put_i16(self.last_producer_epoch);
        w.put_u8(self.state.code());
        w.put_i32(self.timeout_ms);
        w.put_i64(self.start_ms);
        w.put_i64(self.update_ms);
        w.put_u32(self.partitions.len() as u32);
        for (t, p) in &self.partitions {
            put_str(&mut w, t);
            w.put_i32(*p);
        }
        w.put_u32(self.groups.len() as u32);
        for g in &self.groups {
            put_str(&mut w, g);
        }
        w.put_i64(self.next_producer_id);
        w
    }

    pub fn decode(transactional_id: &str, version: u64, data: &[u8]) -> Result<TxnRecord> {
        let corrupt = || MetaError::Corrupt(format!("transaction state of {transactional_id}"));
        let mut r = data;
        let r = &mut r;
        let decoded = (|| {
            // Format 1 is format 2 without `next_producer_id`.
            let format = r.try_get_u8().ok()?;
            if format != 1 && format != 2 {
                return None;
            }
            let producer_id = r.try_get_i64().ok()?;
            let producer_epoch = r.try_get_i16().ok()?;
            let last_producer_id = r.try_get_i64().ok()?;
            let last_producer_epoch = r.try_get_i16().ok()?;
            let state = TxnState::from_code(r.try_get_u8().ok()?)?;
            let timeout_ms = r.try_get_i32().ok()?;
            let start_ms = r.try_get_i64().ok()?;
            let update_ms = r.try_get_i64().ok()?;
            let mut partitions = Vec::new();
            for _ in 0..r.try_get_u32().ok()? {
                let t = get_str(r)?;
                partitions.push((t, r.try_get_i32().ok()?));
            }
            let mut groups = Vec::new();
            for _ in 0..r.try_get_u32().ok()? {
                groups.push(get_str(r)?);
            }
            let next_producer_id = if format >= 2 {
                r.try_get_i64().ok()?
            } else {
                -1
            };
            Some(TxnRecord {
                transactional_id: transactional_id.to_string(),
                producer_id,
                producer_epoch,
                last_producer_id,
                last_producer_epoch,
                state,
                timeout_ms,
                start_ms,
                update_ms,
                partitions,
                groups,
                next_producer_id,
                version,
            })
        })();
        decoded.ok_or_else(corrupt)
    }

    /// Whether `group`'s offsets may be staged by producer `producer_id` at `epoch` now.
    pub fn accepts_offsets(&self, producer_id: i64, epoch: i16, group: &str) -> bool {
        self.producer_id == producer_id
            && self.producer_epoch == epoch
            && self.state == TxnState::Ongoing
            && self.groups.iter().any(|g| g == group)
    }
}

/// Transaction state and staged transactional offsets.
#[async_trait::async_trait]
pub trait Transactions: Send + Sync + 'static {
    async fn load_transaction(&self, transactional_id: &str) -> Result<Option<TxnRecord>>;

    /// Stores `record` if the stored one is still at `record.version` (0: none stored); returns
    /// the new version. [`MetaError::TxnConflict`] if another write came first.
    async fn save_transaction(&self, record: &TxnRecord) -> Result<u64>;

    /// Every stored record, in byte order of their ids.
    async fn list_transactions(&self) -> Result<Vec<TxnRecord>>;

    /// Stages `offsets` of `group` for the transaction of `transactional_id`, provided its
    /// record says producer `producer_id` at `epoch` has an ongoing transaction that includes
    /// `group` (checked in the same database transaction, so that an abort cannot slip in
    /// between). A later staging of a partition replaces an earlier one.
    /// [`MetaError::TxnConflict`] if the record does not say so.
    async fn stage_txn_offsets(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
        offsets: Vec<GroupOffset>,
    ) -> Result<()>;

    /// Stores `record` as [`Transactions::save_transaction`] does and, in the same database
    /// transaction, moves the offsets staged for `transactional_id` into the groups' committed
    /// offsets when `commit`, or drops them.
    async fn complete_transaction(&self, record: &TxnRecord, commit: bool) -> Result<u64>;

    /// The partitions of `group` that have offsets staged by a transaction not yet ended
    /// (OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT for them).
    async fn staged_offsets(&self, group: &str) -> Result<Vec<(String, u32)>>;

    /// Forgets a transactional id (expired), if still at `version`; its staged offsets go too.
    async fn delete_transaction(&self, transactional_id: &str, version: u64) -> Result<()>;
}

fn put_str(w: &mut Vec<u8>, s: &str) {
    w.put_u32(s.len() as u32);
    w.put_slice(s.as_bytes());
}

fn get_str(r: &mut &[u8]) -> Option<String> {
    let n = r.try_get_u32().ok()? as usize;
    if r.remaining() < n {
        return None;
    }
    let s = String::from_utf8(r[..n].to_vec()).ok()?;
    r.advance(n);
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips() {
        let r = TxnRecord {
            transactional_id: "tx".into(),
            producer_id: 7,
            producer_epoch: 3,
            last_producer_id: -1,
            last_producer_epoch: -1,
            state: TxnState::PrepareCommit,
            timeout_ms: 60_000,
            start_ms: 5,
            update_ms: 6,
            partitions: vec![("a".into(), 0), ("b.c".into(), 9)],
            groups: vec!["g".into()],
            next_producer_id: 8,
            version: 4,
        };
        assert_eq!(TxnRecord::decode("tx", 4, &r.encode()).expect("decode"), r);
        // Format 1 (before Transactions V2) reads as having no next producer id.
        let mut v1 = r.encode();
        v1[0] = 1;
        v1.truncate(v1.len() - 8);
        let back = TxnRecord::decode("tx", 4, &v1).expect("decode format 1");
        assert_eq!(back.next_producer_id, -1);
        assert_eq!(back.groups, r.groups);
        let mut cut = r.encode();
        cut.pop();
        assert!(TxnRecord::decode("tx", 4, &cut).is_err());
    }
}
