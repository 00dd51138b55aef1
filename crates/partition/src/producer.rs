//! Idempotent-producer state of one partition: per producer id, its epoch and the sequence
//! ranges of its last five batches, as Kafka keeps them.
//!
//! A batch is a duplicate if it matches one of those five (the producer retried it); it is out
//! of order if its first sequence does not follow the last one. A producer the partition does
//! not know (new, or its state expired) may start at any sequence, as in Kafka.
//!
//! The sequence a producer must go on with is kept apart from the five batches: a rewind may
//! remove all of them, and the producer must then still go on where the failed batches began.
//! A client takes a later batch's success as proof that the earlier ones were written
//! (librdkafka acknowledges them implicitly), so accepting a batch over a gap loses records.
//!
//! The state runs ahead of durability: a batch is recorded when it gets its offsets, with the
//! outcome of its append. A retry that matches a batch still on its way answers only once that
//! append is durable, and fails if it failed. When an append fails, the stream rewinds and
//! tells [`ProducerStates::rewind`] in the same critical section, so no check ever sees a batch
//! that is no longer in the stream.
//!
//! Producers that have not written for `producer.id.expiration.ms` are forgotten
//! ([`ProducerStates::expire`]), as Kafka forgets them, so the state stays bounded.

use std::collections::{HashMap, VecDeque};

use bytes::{Buf, BufMut};
use kafka_protocol::ResponseError;
use weir_storage::AppendOutcome;

use crate::batch::BatchHeader;
use crate::txn::TxnIndex;

/// Batches remembered per producer: Kafka's max.in.flight.requests.per.connection bound.
const KEPT_BATCHES: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: u64,
    pub end_offset: u64,
}

/// A recorded batch and, while it is on its way to durability, its append's outcome.
#[derive(Clone)]
struct Recorded {
    meta: BatchMeta,
    outcome: Option<AppendOutcome>,
}

#[derive(Clone, Default)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<Recorded>,
    /// The first sequence of the producer's next new batch; `None` while unknown (a producer
    /// read back from a snapshot that kept none of its batches), when any sequence is taken.
    next_seq: Option<i32>,
    /// Wall-clock time of the producer's last write, for expiration.
    last_write_ms: i64,
}

/// What a batch is, as far as its producer's state says.
#[derive(Clone)]
pub enum Check {
    /// Append it.
    New,
    /// Already appended at these offsets: answer with them once `outcome` (if any) is durable.
    Duplicate(BatchMeta, Option<AppendOutcome>),
}

/// A producer as DescribeProducers reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveProducer {
    pub producer_id: i64,
    pub epoch: i16,
    /// The last sequence number it wrote here; -1: none known.
    pub last_sequence: i32,
    /// When it last wrote here (milliseconds since the epoch).
    pub last_write_ms: i64,
    /// The first offset of its open transaction here; -1: none.
    pub txn_start_offset: i64,
}

#[derive(Clone, Default)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
    /// Open and aborted transactions, which change with the producers' batches and markers.
    pub(crate) txns: TxnIndex,
}

fn after(last: i32) -> i32 {
    if last == i32::MAX {
        0
    } else {
        last + 1
    }
}

impl ProducerStates {
    pub fn check(&self, h: &BatchHeader) -> Result<Check, ResponseError> {
        if h.producer_id < 0 {
            return Ok(Check::New);
        }
        let Some(e) = self.producers.get(&h.producer_id) else {
            return Ok(Check::New);
        };
        if h.producer_epoch < e.epoch {
            return Err(ResponseError::InvalidProducerEpoch);
        }
        if h.producer_epoch > e.epoch {
            // A bumped epoch starts its sequences over.
            return if h.base_sequence == 0 {
                Ok(Check::New)
            } else {
                Err(ResponseError::OutOfOrderSequenceNumber)
            };
        }
        if let Some(b) = e
            .batches
            .iter()
            .find(|b| b.meta.first_seq == h.base_sequence && b.meta.last_seq == h.last_sequence())
        {
            return Ok(Check::Duplicate(b.meta, b.outcome.clone()));
        }
        match e.next_seq {
            Some(next) if next != h.base_sequence => Err(ResponseError::OutOfOrderSequenceNumber),
            _ => Ok(Check::New),
        }
    }

    /// Records a batch that got the offsets `[base_offset, end_offset)`; `outcome` is its
    /// append's, `None` for batches already durable (replayed from the log).
    pub fn record(
        &mut self,
        h: &BatchHeader,
        base_offset: u64,
        end_offset: u64,
        outcome: Option<AppendOutcome>,
        now_ms: i64,
    ) {
        if h.producer_id < 0 {
            return;
        }
        let e = self.producers.entry(h.producer_id).or_default();
        if h.producer_epoch != e.epoch {
            e.epoch = h.producer_epoch;
            e.batches.clear();
        }
        debug_assert!(
            e.batches
                .back()
                .is_none_or(|b| b.meta.end_offset <= base_offset),
            "producer batches must be recorded in offset order"
        );
        e.last_write_ms = e.last_write_ms.max(now_ms);
        e.next_seq = Some(after(h.last_sequence()));
        if h.is_transactional() {
            self.txns.begin(h.producer_id, base_offset);
        }
        e.batches.push_back(Recorded {
            meta: BatchMeta {
                first_seq: h.base_sequence,
                last_seq: h.last_sequence(),
                base_offset,
                end_offset,
            },
            outcome,
        });
        while e.batches.len() > KEPT_BATCHES {
            e.batches.pop_front();
        }
    }

    /// A transaction marker of producer `pid` at `epoch` got offset `marker`: it ends the
    /// producer's open transaction here. A marker at an older epoch than the producer's is
    /// refused (a stale coordinator); one at a newer epoch fences the producer's older batches.
    /// Returns whether a transaction was open.
    pub fn end_txn(
        &mut self,
        pid: i64,
        epoch: i16,
        marker: u64,
        commit: bool,
        now_ms: i64,
    ) -> Result<bool, ResponseError> {
        if let Some(e) = self.producers.get_mut(&pid) {
            if epoch < e.epoch {
                return Err(ResponseError::InvalidProducerEpoch);
            }
            if epoch > e.epoch {
                e.epoch = epoch;
                e.batches.clear();
                e.next_seq = None;
            }
            e.last_write_ms = e.last_write_ms.max(now_ms);
        }
        Ok(self.txns.end(pid, marker, commit))
    }

    /// The epoch the partition knows producer `pid` at.
    pub fn epoch(&self, pid: i64) -> Option<i16> {
        self.producers.get(&pid).map(|e| e.epoch)
    }

    /// Forgets every producer (not the transactions' index): a mirror's producers were the
    /// source cluster's, and ids this cluster hands out may be the same numbers.
    pub fn forget_producers(&mut self) {
        self.producers.clear();
    }

    /// Every producer this partition knows (DescribeProducers), by producer id.
    pub fn active(&self) -> Vec<ActiveProducer> {
        let mut out: Vec<ActiveProducer> = self
            .producers
            .iter()
            .map(|(&pid, e)| ActiveProducer {
                producer_id: pid,
                epoch: e.epoch,
                last_sequence: e
                    .batches
                    .back()
                    .map(|b| b.meta.last_seq)
                    .or_else(|| e.next_seq.map(|n| if n == 0 { i32::MAX } else { n - 1 }))
                    .unwrap_or(-1),
                last_write_ms: e.last_write_ms,
                txn_start_offset: self.txns.first_offset(pid).map_or(-1, |o| o as i64),
            })
            .collect();
        out.sort_by_key(|p| p.producer_id);
        out
    }

    /// A marker read back from the log (rebuilding the state on open): it was checked when it
    /// was written, so it ends the producer's open transaction whatever epoch the snapshot
    /// says (a snapshot keeps each producer's latest epoch, which may come from batches after
    /// its offset, and so after this marker).
    pub fn replay_marker(&mut self, pid: i64, epoch: i16, marker: u64, commit: bool, now_ms: i64) {
        if let Some(e) = self.producers.get_mut(&pid) {
            if epoch > e.epoch {
                e.epoch = epoch;
                e.batches.clear();
                e.next_seq = None;
            }
            e.last_write_ms = e.last_write_ms.max(now_ms);
        }
        self.txns.end(pid, marker, commit);
    }

    /// Forgets batches at or after `offset`: their append failed and the partition rewound.
    /// Each producer goes on from the first sequence it lost, even when none of its batches is
    /// left to say so.
    pub fn rewind(&mut self, offset: u64) {
        self.txns.rewind(offset);
        for e in self.producers.values_mut() {
            while let Some(b) = e.batches.back().filter(|b| b.meta.base_offset >= offset) {
                e.next_seq = Some(b.meta.first_seq);
                e.batches.pop_back();
            }
            debug_assert!(
                e.batches
                    .back()
                    .is_none_or(|b| Some(after(b.meta.last_seq)) == e.next_seq),
                "after a rewind a producer goes on right after its last kept batch"
            );
        }
    }

    /// Forgets producers that have not written since `now_ms - expiration_ms` and have no
    /// batch on its way; returns how many were forgotten.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        let txns = &self.txns;
        self.producers.retain(|pid, e| {
            now_ms.saturating_sub(e.last_write_ms) < expiration_ms
                || e.batches.iter().any(|b| b.outcome.is_some())
                || txns.is_open(*pid)
        });
        before - self.producers.len()
    }

    /// Producers known.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Marks the batches that end at or below `offset` as durable: their outcomes are no longer
    /// needed.
    pub fn settle(&mut self, offset: u64) {
        for e in self.producers.values_mut() {
            for b in e.batches.iter_mut() {
                if b.meta.end_offset <= offset {
                    b.outcome = None;
                }
            }
        }
    }

    /// The state as of `offset`: batches at or after it are left out (they are replayed from
    /// the log when a snapshot is loaded). Each producer's next sequence as of `offset` goes
    /// with it, for a producer whose batches all lie beyond `offset`: if those are lost with a
    /// failed leader, the next leader must still refuse a batch that skips them.
    pub fn encode_until(&self, offset: u64) -> Vec<u8> {
        let mut out = Vec::new();
        out.put_u8(4);
        out.put_u32(self.producers.len() as u32);
        for (pid, e) in &self.producers {
            let kept: Vec<&BatchMeta> = e
                .batches
                .iter()
                .map(|b| &b.meta)
                .filter(|b| b.end_offset <= offset)
                .collect();
            let next_seq = match kept.last() {
                Some(b) => Some(after(b.last_seq)),
                None => e.batches.front().map(|b| b.meta.first_seq).or(e.next_seq),
            };
            out.put_i64(*pid);
            out.put_i16(e.epoch);
            out.put_i64(e.last_write_ms);
            match next_seq {
                Some(n) => {
                    out.put_u8(1);
                    out.put_i32(n);
                }
                None => out.put_u8(0),
            }
            out.put_u8(kept.len() as u8);
            for b in kept {
                out.put_i32(b.first_seq);
                out.put_i32(b.last_seq);
                out.put_u64(b.base_offset);
                out.put_u64(b.end_offset);
            }
        }
        self.txns.encode_until(offset, &mut out);
        out
    }

    /// Decodes a snapshot. Version 1 snapshots have no write times; their producers count as
    /// written at `now_ms`. Before version 3 the next sequence is the one after the last batch.
    /// Before version 4 there are no transactions.
    pub fn decode(mut b: &[u8], now_ms: i64) -> Option<ProducerStates> {
        if b.remaining() < 5 {
            return None;
        }
        let version = b.get_u8();
        if !(1..=4).contains(&version) {
            return None;
        }
        let n = b.get_u32();
        let mut producers = HashMap::new();
        for _ in 0..n {
            if b.remaining() < 11 + if version >= 2 { 8 } else { 0 } {
                return None;
            }
            let pid = b.get_i64();
            let epoch = b.get_i16();
            let last_write_ms = if version >= 2 { b.get_i64() } else { now_ms };
            let mut stored_next = None;
            if version >= 3 && b.try_get_u8().ok()? == 1 {
                stored_next = Some(b.try_get_i32().ok()?);
            }
            let count = b.try_get_u8().ok()?;
            let mut batches = VecDeque::new();
            for _ in 0..count {
                if b.remaining() < 24 {
                    return None;
                }
                batches.push_back(Recorded {
                    meta: BatchMeta {
                        first_seq: b.get_i32(),
                        last_seq: b.get_i32(),
                        base_offset: b.get_u64(),
                        end_offset: b.get_u64(),
                    },
                    outcome: None,
                });
            }
            let next_seq = if version >= 3 {
                stored_next
            } else {
                batches.back().map(|b| after(b.meta.last_seq))
            };
            producers.insert(
                pid,
                ProducerEntry {
                    epoch,
                    batches,
                    next_seq,
                    last_write_ms,
                },
            );
        }
        let txns = if version >= 4 {
            let mut rest: &[u8] = b;
            TxnIndex::decode(&mut rest)?
        } else {
            TxnIndex::default()
        };
        Some(ProducerStates { producers, txns })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pid: i64, epoch: i16, seq: i32, n: i32) -> BatchHeader {
        BatchHeader {
            base_offset: 0,
            attributes: 0,
            last_offset_delta: n - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: n,
        }
    }

    fn is_new(c: Result<Check, ResponseError>) -> bool {
        matches!(c, Ok(Check::New))
    }

    fn duplicate(c: Result<Check, ResponseError>) -> Option<BatchMeta> {
        match c {
            Ok(Check::Duplicate(m, _)) => Some(m),
            _ => None,
        }
    }

    fn error(c: Result<Check, ResponseError>) -> Option<ResponseError> {
        c.err()
    }

    #[test]
    fn sequences_duplicates_and_epochs() {
        let mut s = ProducerStates::default();
        // Unknown producers may start anywhere.
        assert!(is_new(s.check(&h(1, 0, 7, 3))));
        s.record(&h(1, 0, 7, 3), 0, 3, None, 0);
        assert!(is_new(s.check(&h(1, 0, 10, 2))));
        s.record(&h(1, 0, 10, 2), 3, 5, None, 0);
        assert_eq!(
            duplicate(s.check(&h(1, 0, 7, 3))),
            Some(BatchMeta {
                first_seq: 7,
                last_seq: 9,
                base_offset: 0,
                end_offset: 3
            })
        );
        assert_eq!(
            error(s.check(&h(1, 0, 13, 1))),
            Some(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(
            error(s.check(&h(1, 0, 11, 1))),
            Some(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(
            error(s.check(&h(1, 1, 5, 1))),
            Some(ResponseError::OutOfOrderSequenceNumber)
        );
        assert!(is_new(s.check(&h(1, 1, 0, 1))));
        s.record(&h(1, 1, 0, 1), 5, 6, None, 0);
        assert_eq!(
            error(s.check(&h(1, 0, 12, 1))),
            Some(ResponseError::InvalidProducerEpoch)
        );
        // Non-idempotent batches are never checked.
        assert!(is_new(s.check(&h(-1, -1, -1, 1))));
    }

    #[test]
    fn keeps_five_batches_and_rewinds() {
        let mut s = ProducerStates::default();
        for i in 0..8 {
            s.record(&h(1, 0, i, 1), i as u64, i as u64 + 1, None, 0);
        }
        assert_eq!(
            error(s.check(&h(1, 0, 2, 1))),
            Some(ResponseError::OutOfOrderSequenceNumber)
        );
        assert!(duplicate(s.check(&h(1, 0, 3, 1))).is_some());
        s.rewind(6);
        assert!(is_new(s.check(&h(1, 0, 6, 1))));
    }

    #[test]
    fn a_rewind_that_empties_the_window_keeps_the_next_sequence() {
        let mut s = ProducerStates::default();
        s.record(&h(1, 0, 0, 3), 0, 3, None, 0);
        s.rewind(0);
        assert_eq!(
            error(s.check(&h(1, 0, 3, 2))),
            Some(ResponseError::OutOfOrderSequenceNumber),
            "the batch behind the failed one must wait for its retry"
        );
        assert!(is_new(s.check(&h(1, 0, 0, 3))));
        // Five kept batches, all rewound: the sequence still follows the one before them.
        for i in 0..6 {
            s.record(&h(1, 0, i, 1), i as u64, i as u64 + 1, None, 0);
        }
        s.rewind(1);
        assert_eq!(
            error(s.check(&h(1, 0, 6, 1))),
            Some(ResponseError::OutOfOrderSequenceNumber)
        );
        assert!(is_new(s.check(&h(1, 0, 1, 1))));
    }

    #[test]
    fn snapshot_roundtrip_leaves_out_later_batches() {
        let mut s = ProducerStates::default();
        s.record(&h(1, 2, 0, 2), 0, 2, None, 100);
        s.record(&h(1, 2, 2, 2), 2, 4, None, 100);
        s.record(&h(9, 0, 0, 1), 4, 5, None, 100);
        let d = ProducerStates::decode(&s.encode_until(4), 0).unwrap();
        assert!(duplicate(d.check(&h(1, 2, 2, 2))).is_some());
        assert!(is_new(d.check(&h(9, 0, 0, 1))));
        assert!(ProducerStates::decode(&[3], 0).is_none());
        // Write times survive the snapshot: nothing expires before its time.
        let mut d = d;
        assert_eq!(d.expire(150, 100), 0);
    }

    #[test]
    fn a_snapshot_keeps_the_next_sequence_of_a_producer_whose_batches_lie_beyond_it() {
        let mut s = ProducerStates::default();
        s.record(&h(1, 0, 0, 2), 0, 2, None, 0);
        // Five batches in flight after the snapshot's offset; the one at 0..2 leaves the window.
        for i in 0..5 {
            let seq = 2 + i;
            s.record(&h(1, 0, seq, 1), 2 + i as u64, 3 + i as u64, None, 0);
        }
        // The leader dies with those five undecided: its successor loads the snapshot, and the
        // log beyond offset 2 holds none of them.
        let d = ProducerStates::decode(&s.encode_until(2), 0).unwrap();
        assert_eq!(
            error(d.check(&h(1, 0, 5, 1))),
            Some(ResponseError::OutOfOrderSequenceNumber),
            "a batch that skips the lost ones must be refused"
        );
        assert!(is_new(d.check(&h(1, 0, 2, 1))));
        // A version 2 snapshot (no next sequence) goes on after its last batch.
        let mut v2 = vec![2];
        v2.put_u32(1);
        v2.put_i64(1);
        v2.put_i16(0);
        v2.put_i64(0);
        v2.put_u8(1);
        v2.put_i32(0);
        v2.put_i32(1);
        v2.put_u64(0);
        v2.put_u64(2);
        let d = ProducerStates::decode(&v2, 0).unwrap();
        assert!(is_new(d.check(&h(1, 0, 2, 1))));
        assert!(error(d.check(&h(1, 0, 5, 1))).is_some());
    }

    #[test]
    fn a_marker_replayed_after_a_snapshot_with_a_later_epoch_still_ends_its_transaction() {
        // Producer 1's transaction (epoch 0) at 0, its abort marker at 2, then a batch at epoch 1
        // at 3; the snapshot is taken at 1 but keeps the producer's latest epoch (1).
        let mut s = ProducerStates::default();
        let mut t = h(1, 0, 0, 2);
        t.attributes = 0x10;
        s.record(&t, 0, 2, None, 0);
        let snap = s.encode_until(1);
        let mut d = ProducerStates::decode(&snap, 0).expect("decode");
        d.producers.get_mut(&1).expect("producer").epoch = 1;
        assert!(d.txns.is_open(1));
        // Rebuilding from the log: the marker at 2 was written at epoch 0.
        assert_eq!(
            d.clone().end_txn(1, 0, 2, false, 0),
            Err(ResponseError::InvalidProducerEpoch),
            "a new marker at an old epoch is refused"
        );
        d.replay_marker(1, 0, 2, false, 0);
        assert!(!d.txns.is_open(1), "a replayed one ends the transaction");
        assert_eq!(d.txns.last_stable_offset(10), 10);
    }

    #[test]
    fn idle_producers_expire_and_busy_ones_stay() {
        let mut s = ProducerStates::default();
        s.record(&h(1, 0, 0, 1), 0, 1, None, 1_000);
        s.record(&h(2, 0, 0, 1), 1, 2, None, 5_000);
        assert_eq!(s.expire(6_000, 4_500), 1, "producer 1 idle for 5 s expires");
        assert_eq!(s.len(), 1);
        // An expired producer is unknown again: it may start at any sequence, as in Kafka.
        assert!(is_new(s.check(&h(1, 0, 77, 1))));
        assert!(duplicate(s.check(&h(2, 0, 0, 1))).is_some());
        assert_eq!(s.expire(100_000, 4_500), 1);
        assert!(s.is_empty());
    }
}
