//! [`Transactions`]: the state of each transactional id, and the offsets a transaction commits
//! for consumer groups, staged until it ends.
//!
//! The transaction coordinator is the only writer of a record, but in a cluster two brokers may
//! briefly both believe they coordinate an id (the view moves under them). Every write therefore
//! names the version it read and fails with [`MetaError::TxnConflict`] when the stored record has
//! moved on: of two coordinators, one wins and the other learns it is stale.

use bytes_free::{Reader, Writer};

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
    /// The stored version this record was read at (0: not stored yet). Writes name it.
    pub version: u64,
}

impl TxnRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u8(1);
        w.i64(self.producer_id);
        w.i16(self.producer_epoch);
        w.i64(self.last_producer_id);
        w.i16(self.last_producer_epoch);
        w.u8(self.state.code());
        w.i32(self.timeout_ms);
        w.i64(self.start_ms);
        w.i64(self.update_ms);
        w.u32(self.partitions.len() as u32);
        for (t, p) in &self.partitions {
            w.str(t);
            w.i32(*p);
        }
        w.u32(self.groups.len() as u32);
        for g in &self.groups {
            w.str(g);
        }
        w.0
    }

    pub fn decode(transactional_id: &str, version: u64, data: &[u8]) -> Result<TxnRecord> {
        let corrupt = || MetaError::Corrupt(format!("transaction state of {transactional_id}"));
        let mut r = Reader(data);
        if r.u8().ok_or_else(corrupt)? != 1 {
            return Err(corrupt());
        }
        let producer_id = r.i64().ok_or_else(corrupt)?;
        let producer_epoch = r.i16().ok_or_else(corrupt)?;
        let last_producer_id = r.i64().ok_or_else(corrupt)?;
        let last_producer_epoch = r.i16().ok_or_else(corrupt)?;
        let state = r.u8().and_then(TxnState::from_code).ok_or_else(corrupt)?;
        let timeout_ms = r.i32().ok_or_else(corrupt)?;
        let start_ms = r.i64().ok_or_else(corrupt)?;
        let update_ms = r.i64().ok_or_else(corrupt)?;
        let n = r.u32().ok_or_else(corrupt)?;
        let mut partitions = Vec::new();
        for _ in 0..n {
            let t = r.str().ok_or_else(corrupt)?;
            partitions.push((t, r.i32().ok_or_else(corrupt)?));
        }
        let n = r.u32().ok_or_else(corrupt)?;
        let mut groups = Vec::new();
        for _ in 0..n {
            groups.push(r.str().ok_or_else(corrupt)?);
        }
        Ok(TxnRecord {
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
            version,
        })
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

/// Fixed-width big-endian fields and length-prefixed strings, without a bytes dependency.
mod bytes_free {
    #[derive(Default)]
    pub struct Writer(pub Vec<u8>);

    impl Writer {
        pub fn u8(&mut self, v: u8) {
            self.0.push(v);
        }
        pub fn i16(&mut self, v: i16) {
            self.0.extend_from_slice(&v.to_be_bytes());
        }
        pub fn i32(&mut self, v: i32) {
            self.0.extend_from_slice(&v.to_be_bytes());
        }
        pub fn u32(&mut self, v: u32) {
            self.0.extend_from_slice(&v.to_be_bytes());
        }
        pub fn i64(&mut self, v: i64) {
            self.0.extend_from_slice(&v.to_be_bytes());
        }
        pub fn str(&mut self, s: &str) {
            self.u32(s.len() as u32);
            self.0.extend_from_slice(s.as_bytes());
        }
    }

    pub struct Reader<'a>(pub &'a [u8]);

    impl Reader<'_> {
        fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
            let (head, rest) = self.0.split_first_chunk::<N>()?;
            self.0 = rest;
            Some(*head)
        }
        pub fn u8(&mut self) -> Option<u8> {
            self.take::<1>().map(|b| b[0])
        }
        pub fn i16(&mut self) -> Option<i16> {
            self.take().map(i16::from_be_bytes)
        }
        pub fn i32(&mut self) -> Option<i32> {
            self.take().map(i32::from_be_bytes)
        }
        pub fn u32(&mut self) -> Option<u32> {
            self.take().map(u32::from_be_bytes)
        }
        pub fn i64(&mut self) -> Option<i64> {
            self.take().map(i64::from_be_bytes)
        }
        pub fn str(&mut self) -> Option<String> {
            let n = self.u32()? as usize;
            if self.0.len() < n {
                return None;
            }
            let (s, rest) = self.0.split_at(n);
            self.0 = rest;
            String::from_utf8(s.to_vec()).ok()
        }
    }
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
            version: 4,
        };
        assert_eq!(TxnRecord::decode("tx", 4, &r.encode()).expect("decode"), r);
        let mut cut = r.encode();
        cut.pop();
        assert!(TxnRecord::decode("tx", 4, &cut).is_err());
    }
}
