//! Transactions as one partition sees them: which producers have a transaction open here (and
//! from which offset), which transactions were aborted (for `read_committed` fetches), and the
//! last stable offset that follows from both.
//!
//! It lives in the producer state ([`crate::producer::ProducerStates`]) and changes with it,
//! under the stream's lock, when a batch or a marker gets its offsets: a rewind takes back what
//! the failed appends did (a marker that failed leaves its transaction open again), and a
//! snapshot says what was true at its offset, not what is true now.
//!
//! Verification (KIP-890): before a producer's first transactional batch of a transaction is
//! appended, the leader checks with the transaction's state that the partition was added to it.
//! That check takes time, and the transaction may end meanwhile; so the leader first takes a
//! *guard* for the producer, any marker for that producer drops it, and the append is accepted
//! only while the guard it was verified with is still there. A late write of a finished
//! transaction therefore can never open a transaction that nobody will end (a hanging
//! transaction).

use std::collections::{BTreeSet, HashMap, VecDeque};

use bytes::{Buf, BufMut};

/// A transaction that ended with an abort marker: its records in `[first, marker)` are
/// skipped by `read_committed` consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: u64,
    /// The offset of its abort marker.
    pub last_offset: u64,
}

/// A transaction ended by a marker that may still be rewound or lie beyond a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ended {
    producer_id: i64,
    first_offset: u64,
    marker: u64,
    version: u64,
}

/// A producer's open transaction here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Open {
    first: u64,
    /// The version of the transaction's record its first write here was verified against: a
    /// marker decided at an older version belongs to an earlier transaction of the producer
    /// (a stale coordinator's late retry) and must not end this one. 0: unknown (rebuilt from
    /// the log), any marker ends it.
    version: u64,
}

#[derive(Debug, Clone, Default)]
pub struct TxnIndex {
    /// Producer id -> its open transaction here.
    open: HashMap<i64, Open>,
    /// The same, by first offset: the smallest bounds the last stable offset.
    by_first: BTreeSet<(u64, i64)>,
    /// Aborted transactions in marker order.
    aborted: VecDeque<AbortedTxn>,
    /// Transactions ended by markers not yet known durable, in marker order.
    ended: VecDeque<Ended>,
    /// Verification guards by producer id.
    guards: HashMap<i64, u64>,
    next_guard: u64,
}

impl TxnIndex {
    /// Whether producer `pid` has a transaction open here.
    pub fn is_open(&self, pid: i64) -> bool {
        self.open.contains_key(&pid)
    }

    /// The producers with a transaction open here.
    pub fn open_producers(&self) -> Vec<i64> {
        let mut pids: Vec<i64> = self.open.keys().copied().collect();
        pids.sort_unstable();
        pids
    }

    /// The first offset of producer `pid`'s open transaction here, if it has one.
    pub fn first_offset(&self, pid: i64) -> Option<u64> {
        self.open.get(&pid).map(|o| o.first)
    }

    /// Starts a verification for `pid`: returns the guard an append must show.
    pub fn guard(&mut self, pid: i64) -> u64 {
        self.next_guard += 1;
        self.guards.insert(pid, self.next_guard);
        self.next_guard
    }

    /// Whether `guard` is still the valid verification of `pid`.
    pub fn verified(&self, pid: i64, guard: u64) -> bool {
        self.guards.get(&pid) == Some(&guard)
    }

    /// A transactional batch of `pid` got offset `base`: it opens a transaction unless one is
    /// open.
    pub fn begin(&mut self, pid: i64, base: u64) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.open.entry(pid) {
            e.insert(Open {
                first: base,
                version: 0,
            });
            self.by_first.insert((base, pid));
        }
        self.guards.remove(&pid);
    }

    /// The open transaction of `pid` was verified against its record at `version`.
    pub fn verified_at(&mut self, pid: i64, version: u64) {
        if let Some(o) = self.open.get_mut(&pid) {
            o.version = o.version.max(version);
        }
    }

    /// Whether a marker decided at record `version` is older than the open transaction of
    /// `pid` here (it ended an earlier transaction, and is a late retry).
    pub fn stale_marker(&self, pid: i64, version: u64) -> bool {
        self.open.get(&pid).is_some_and(|o| version < o.version)
    }

    /// A marker of `pid` got offset `marker`: it ends the producer's open transaction here, if
    /// any. Returns whether one was open.
    pub fn end(&mut self, pid: i64, marker: u64, commit: bool) -> bool {
        self.guards.remove(&pid);
        let Some(Open { first, version }) = self.open.remove(&pid) else {
            return false;
        };
        debug_assert!(first < marker, "a marker follows its transaction's records");
        self.by_first.remove(&(first, pid));
        self.ended.push_back(Ended {
            producer_id: pid,
            first_offset: first,
            marker,
            version,
        });
        if !commit {
            self.aborted.push_back(AbortedTxn {
                producer_id: pid,
                first_offset: first,
                last_offset: marker,
            });
        }
        true
    }

    /// Drops the guard of `pid` (its epoch moved on: what it verified no longer holds).
    pub fn drop_guard(&mut self, pid: i64) {
        self.guards.remove(&pid);
    }

    /// One past the marker of the last aborted transaction (0: none): reads from here on meet
    /// no aborted records.
    pub fn aborted_until(&self) -> u64 {
        self.aborted.back().map_or(0, |a| a.last_offset + 1)
    }

    /// The first offset of the earliest open transaction, if any.
    pub fn first_open(&self) -> Option<u64> {
        self.by_first.first().map(|&(f, _)| f)
    }

    /// The last stable offset: the first offset of the oldest open transaction, at most `hw`.
    pub fn last_stable_offset(&self, hw: u64) -> u64 {
        self.first_open().map_or(hw, |f| f.min(hw))
    }

    /// Aborted transactions with records in `[from, to)`.
    pub fn aborted_between(&self, from: u64, to: u64) -> Vec<AbortedTxn> {
        // In marker order, so those ending before `from` come first.
        self.aborted
            .iter()
            .skip_while(|a| a.last_offset < from)
            .filter(|a| a.first_offset < to)
            .copied()
            .collect()
    }

    /// Takes back what appends at or after `offset` did (they failed).
    pub fn rewind(&mut self, offset: u64) {
        // Transactions opened by the failed appends go first: a producer may have one of those
        // and, before it, a transaction whose marker failed, which opens again below.
        let gone: Vec<(u64, i64)> = self.by_first.range((offset, i64::MIN)..).copied().collect();
        for (first, pid) in gone {
            self.by_first.remove(&(first, pid));
            self.open.remove(&pid);
        }
        while let Some(e) = self.ended.back().copied().filter(|e| e.marker >= offset) {
            self.ended.pop_back();
            if e.first_offset < offset {
                debug_assert!(!self.open.contains_key(&e.producer_id));
                self.open.insert(
                    e.producer_id,
                    Open {
                        first: e.first_offset,
                        version: e.version,
                    },
                );
                self.by_first.insert((e.first_offset, e.producer_id));
            }
        }
        while self.aborted.back().is_some_and(|a| a.last_offset >= offset) {
            self.aborted.pop_back();
        }
        debug_assert_eq!(self.open.len(), self.by_first.len());
    }

    /// Everything below `offset` is durable: ended transactions need not be remembered for a
    /// rewind any more.
    pub fn settle(&mut self, offset: u64) {
        while self.ended.front().is_some_and(|e| e.marker < offset) {
            self.ended.pop_front();
        }
    }

    /// Forgets aborted transactions wholly below the log start offset.
    pub fn trim(&mut self, start: u64) {
        while self.aborted.front().is_some_and(|a| a.last_offset < start) {
            self.aborted.pop_front();
        }
    }

    /// The first offset of `pid`'s open transaction as of `offset` (records from `offset` on
    /// left out).
    fn open_as_of(&self, pid: i64, offset: u64) -> Option<Open> {
        if let Some(&o) = self.open.get(&pid) {
            if o.first < offset {
                return Some(o);
            }
        }
        self.ended
            .iter()
            .rev()
            .find(|e| e.producer_id == pid && e.first_offset < offset && e.marker >= offset)
            .map(|e| Open {
                first: e.first_offset,
                version: e.version,
            })
    }

    /// Producers with a transaction open as of `offset`.
    fn producers_open_as_of(&self, offset: u64) -> BTreeSet<i64> {
        let mut out: BTreeSet<i64> = self
            .open
            .iter()
            .filter(|(_, o)| o.first < offset)
            .map(|(&p, _)| p)
            .collect();
        out.extend(
            self.ended
                .iter()
                .filter(|e| e.first_offset < offset && e.marker >= offset)
                .map(|e| e.producer_id),
        );
        out
    }

    /// The index as of `offset`, for the producer snapshot.
    pub fn encode_until(&self, offset: u64, out: &mut Vec<u8>) {
        let open = self.producers_open_as_of(offset);
        out.put_u32(open.len() as u32);
        for pid in open {
            let o = self.open_as_of(pid, offset).unwrap_or(Open {
                first: 0,
                version: 0,
            });
            out.put_i64(pid);
            out.put_u64(o.first);
            out.put_u64(o.version);
        }
        let aborted: Vec<&AbortedTxn> = self
            .aborted
            .iter()
            .filter(|a| a.last_offset < offset)
            .collect();
        out.put_u32(aborted.len() as u32);
        for a in aborted {
            out.put_i64(a.producer_id);
            out.put_u64(a.first_offset);
            out.put_u64(a.last_offset);
        }
    }

    pub fn decode(b: &mut &[u8]) -> Option<TxnIndex> {
        let mut t = TxnIndex::default();
        let n = b.try_get_u32().ok()?;
        for _ in 0..n {
            let pid = b.try_get_i64().ok()?;
            let first = b.try_get_u64().ok()?;
            let version = b.try_get_u64().ok()?;
            t.open.insert(pid, Open { first, version });
            t.by_first.insert((first, pid));
        }
        let n = b.try_get_u32().ok()?;
        for _ in 0..n {
            t.aborted.push_back(AbortedTxn {
                producer_id: b.try_get_i64().ok()?,
                first_offset: b.try_get_u64().ok()?,
                last_offset: b.try_get_u64().ok()?,
            });
        }
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_stable_offset_stops_at_the_oldest_open_transaction() {
        let mut t = TxnIndex::default();
        assert_eq!(t.last_stable_offset(10), 10);
        t.begin(1, 3);
        t.begin(2, 5);
        t.begin(1, 7); // already open: stays at 3
        assert_eq!(t.last_stable_offset(10), 3);
        assert_eq!(t.last_stable_offset(2), 2);
        assert!(t.end(1, 8, true));
        assert_eq!(t.last_stable_offset(10), 5);
        assert!(t.end(2, 9, false));
        assert_eq!(t.last_stable_offset(10), 10);
        assert!(!t.end(2, 11, false), "nothing open: a marker ends nothing");
        assert_eq!(
            t.aborted_between(0, 10),
            vec![AbortedTxn {
                producer_id: 2,
                first_offset: 5,
                last_offset: 9
            }]
        );
        assert!(t.aborted_between(10, 20).is_empty());
        assert!(t.aborted_between(0, 5).is_empty());
        assert_eq!(t.aborted_between(9, 10).len(), 1);
    }

    #[test]
    fn a_rewind_reopens_transactions_whose_markers_failed() {
        let mut t = TxnIndex::default();
        t.begin(1, 0);
        t.end(1, 4, false);
        t.begin(2, 5);
        t.rewind(4);
        // The abort marker at 4 failed: producer 1's transaction is open again, nothing is
        // aborted, and producer 2's batch at 5 is gone.
        assert!(t.is_open(1));
        assert!(!t.is_open(2));
        assert_eq!(t.last_stable_offset(100), 0);
        assert!(t.aborted_between(0, 100).is_empty());
        // Settled markers are not taken back by a later rewind.
        t.end(1, 4, true);
        t.settle(5);
        t.rewind(5);
        assert!(!t.is_open(1));
    }

    #[test]
    fn a_rewind_past_a_failed_marker_and_a_newer_transaction_of_the_producer_stays_whole() {
        // Producer 1: a transaction at 5 ended by a marker at 8, a new one opened at 10; the
        // appends from 7 on fail.
        let mut t = TxnIndex::default();
        t.begin(1, 5);
        t.end(1, 8, true);
        t.begin(1, 10);
        t.rewind(7);
        assert!(
            t.is_open(1),
            "the transaction whose marker failed is open again"
        );
        assert_eq!(t.last_stable_offset(100), 5);
        // Its marker, written again, ends it: nothing is left open.
        assert!(t.end(1, 7, true));
        assert_eq!(t.last_stable_offset(100), 100);
    }

    #[test]
    fn a_marker_older_than_the_open_transaction_is_stale() {
        let mut t = TxnIndex::default();
        t.begin(1, 0);
        t.verified_at(1, 7);
        assert!(t.stale_marker(1, 6), "an earlier transaction's marker");
        assert!(!t.stale_marker(1, 9));
        assert!(!t.stale_marker(2, 1), "nothing open: nothing to protect");
        let mut b = Vec::new();
        t.encode_until(1, &mut b);
        let d = TxnIndex::decode(&mut &b[..]).expect("decode");
        assert!(d.stale_marker(1, 6), "the version survives a snapshot");
    }

    #[test]
    fn a_snapshot_says_what_was_true_at_its_offset() {
        let mut t = TxnIndex::default();
        t.begin(1, 0);
        t.begin(2, 2);
        t.end(2, 3, false);
        t.end(1, 6, true);
        t.begin(3, 7);
        let mut b = Vec::new();
        t.encode_until(5, &mut b);
        let d = TxnIndex::decode(&mut &b[..]).expect("decode");
        // At offset 5: producer 1's transaction was open (its marker lies beyond), producer 3's
        // had not begun, producer 2's was aborted.
        assert!(d.is_open(1) && !d.is_open(2) && !d.is_open(3));
        assert_eq!(d.last_stable_offset(5), 0);
        assert_eq!(d.aborted_between(0, 5).len(), 1);
    }

    #[test]
    fn a_guard_holds_until_a_marker_or_the_transaction_begins() {
        let mut t = TxnIndex::default();
        let g = t.guard(1);
        assert!(t.verified(1, g));
        t.end(1, 0, false);
        assert!(
            !t.verified(1, g),
            "a marker drops the guard: the transaction ended"
        );
        let g = t.guard(1);
        let g2 = t.guard(1);
        assert!(!t.verified(1, g) && t.verified(1, g2));
        t.begin(1, 1);
        assert!(!t.verified(1, g2));
    }
}
