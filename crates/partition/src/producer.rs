//! Idempotent-producer state of one partition: per producer id, its epoch and the sequence
//! ranges of its last five batches, as Kafka keeps them.
//!
//! A batch is a duplicate if it matches one of those five (the producer retried it); it is out
//! of order if its first sequence does not follow the last one. A producer the partition does
//! not know (new, or its state expired) may start at any sequence, as in Kafka.

use std::collections::{HashMap, VecDeque};

use bytes::{Buf, BufMut};
use kafka_protocol::ResponseError;

use crate::batch::BatchHeader;

/// Batches remembered per producer: Kafka's max.in.flight.requests.per.connection bound.
const KEPT_BATCHES: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: u64,
    pub end_offset: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<BatchMeta>,
}

/// What a batch is, as far as its producer's state says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Append it.
    New,
    /// Already appended at these offsets: answer with them.
    Duplicate(BatchMeta),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
}

fn in_sequence(last: i32, next: i32) -> bool {
    next == if last == i32::MAX { 0 } else { last + 1 }
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
            .find(|b| b.first_seq == h.base_sequence && b.last_seq == h.last_sequence())
        {
            return Ok(Check::Duplicate(*b));
        }
        match e.batches.back() {
            Some(last) if !in_sequence(last.last_seq, h.base_sequence) => {
                Err(ResponseError::OutOfOrderSequenceNumber)
            }
            _ => Ok(Check::New),
        }
    }

    /// Records an appended batch.
    pub fn record(&mut self, h: &BatchHeader, base_offset: u64, end_offset: u64) {
        if h.producer_id < 0 {
            return;
        }
        let e = self.producers.entry(h.producer_id).or_default();
        if h.producer_epoch != e.epoch {
            e.epoch = h.producer_epoch;
            e.batches.clear();
        }
        debug_assert!(
            e.batches.back().is_none_or(|b| b.end_offset <= base_offset),
            "producer batches must be recorded in offset order"
        );
        e.batches.push_back(BatchMeta {
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            base_offset,
            end_offset,
        });
        while e.batches.len() > KEPT_BATCHES {
            e.batches.pop_front();
        }
    }

    /// Forgets batches at or after `offset`: their append failed and the partition rewound.
    pub fn rewind(&mut self, offset: u64) {
        for e in self.producers.values_mut() {
            while e.batches.back().is_some_and(|b| b.base_offset >= offset) {
                e.batches.pop_back();
            }
        }
    }

    /// The state as of `offset`: batches at or after it are left out (they are replayed from
    /// the log when a snapshot is loaded).
    pub fn encode_until(&self, offset: u64) -> Vec<u8> {
        let mut out = Vec::new();
        out.put_u8(1);
        out.put_u32(self.producers.len() as u32);
        for (pid, e) in &self.producers {
            let kept: Vec<&BatchMeta> = e
                .batches
                .iter()
                .filter(|b| b.end_offset <= offset)
                .collect();
            out.put_i64(*pid);
            out.put_i16(e.epoch);
            out.put_u8(kept.len() as u8);
            for b in kept {
                out.put_i32(b.first_seq);
                out.put_i32(b.last_seq);
                out.put_u64(b.base_offset);
                out.put_u64(b.end_offset);
            }
        }
        out
    }

    pub fn decode(mut b: &[u8]) -> Option<ProducerStates> {
        if b.remaining() < 5 || b.get_u8() != 1 {
            return None;
        }
        let n = b.get_u32();
        let mut producers = HashMap::new();
        for _ in 0..n {
            if b.remaining() < 11 {
                return None;
            }
            let pid = b.get_i64();
            let epoch = b.get_i16();
            let count = b.get_u8();
            let mut batches = VecDeque::new();
            for _ in 0..count {
                if b.remaining() < 24 {
                    return None;
                }
                batches.push_back(BatchMeta {
                    first_seq: b.get_i32(),
                    last_seq: b.get_i32(),
                    base_offset: b.get_u64(),
                    end_offset: b.get_u64(),
                });
            }
            producers.insert(pid, ProducerEntry { epoch, batches });
        }
        Some(ProducerStates { producers })
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

    #[test]
    fn sequences_duplicates_and_epochs() {
        let mut s = ProducerStates::default();
        // Unknown producers may start anywhere.
        assert_eq!(s.check(&h(1, 0, 7, 3)), Ok(Check::New));
        s.record(&h(1, 0, 7, 3), 0, 3);
        assert_eq!(s.check(&h(1, 0, 10, 2)), Ok(Check::New));
        s.record(&h(1, 0, 10, 2), 3, 5);
        assert_eq!(
            s.check(&h(1, 0, 7, 3)),
            Ok(Check::Duplicate(BatchMeta {
                first_seq: 7,
                last_seq: 9,
                base_offset: 0,
                end_offset: 3
            }))
        );
        assert_eq!(
            s.check(&h(1, 0, 13, 1)),
            Err(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(
            s.check(&h(1, 0, 11, 1)),
            Err(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(
            s.check(&h(1, 1, 5, 1)),
            Err(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(s.check(&h(1, 1, 0, 1)), Ok(Check::New));
        s.record(&h(1, 1, 0, 1), 5, 6);
        assert_eq!(
            s.check(&h(1, 0, 12, 1)),
            Err(ResponseError::InvalidProducerEpoch)
        );
        // Non-idempotent batches are never checked.
        assert_eq!(s.check(&h(-1, -1, -1, 1)), Ok(Check::New));
    }

    #[test]
    fn keeps_five_batches_and_rewinds() {
        let mut s = ProducerStates::default();
        for i in 0..8 {
            s.record(&h(1, 0, i, 1), i as u64, i as u64 + 1);
        }
        assert_eq!(
            s.check(&h(1, 0, 2, 1)),
            Err(ResponseError::OutOfOrderSequenceNumber)
        );
        assert!(matches!(s.check(&h(1, 0, 3, 1)), Ok(Check::Duplicate(_))));
        s.rewind(6);
        assert_eq!(s.check(&h(1, 0, 6, 1)), Ok(Check::New));
    }

    #[test]
    fn snapshot_roundtrip_leaves_out_later_batches() {
        let mut s = ProducerStates::default();
        s.record(&h(1, 2, 0, 2), 0, 2);
        s.record(&h(1, 2, 2, 2), 2, 4);
        s.record(&h(9, 0, 0, 1), 4, 5);
        let d = ProducerStates::decode(&s.encode_until(4)).unwrap();
        assert!(matches!(d.check(&h(1, 2, 2, 2)), Ok(Check::Duplicate(_))));
        assert_eq!(d.check(&h(9, 0, 0, 1)), Ok(Check::New));
        assert_eq!(ProducerStates::decode(&[2]), None);
    }
}
