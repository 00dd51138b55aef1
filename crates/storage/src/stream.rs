//! One stream's in-memory state: its offsets and its part of the log cache.
//!
//! Offsets of a stream, in order:
//!
//! ```text
//! start <= [ committed: in object storage ) [ durable: in the WAL ) [ pending: being written )
//!          ^start_offset                    ^committed_end          ^durable_end            ^next_offset
//! ```
//!
//! `durable_end` is the high watermark: readers never see beyond it. The cached batches are one
//! contiguous run ending at `next_offset` that always holds everything from `committed_end` on;
//! committed batches at its front may be evicted.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;
use tokio::sync::watch;
use weir_wal::Seq;

use crate::config::Retention;
use crate::format::Frame;

#[derive(Debug, Clone)]
pub(crate) struct CachedBatch {
    pub frame: Frame,
    /// The WAL record holding this batch, until it is committed.
    pub seq: Seq,
}

impl CachedBatch {
    pub fn end_offset(&self) -> u64 {
        self.frame.end_offset()
    }
}

pub(crate) struct StreamState {
    pub epoch: u64,
    pub start_offset: u64,
    pub committed_end: u64,
    pub durable_end: u64,
    pub next_offset: u64,
    pub batches: VecDeque<CachedBatch>,
    pub cached_bytes: u64,
    /// Set when a newer leader took over: no more appends, uncommitted data dropped.
    pub fenced_by: Option<u64>,
    /// Set while the stream is being closed: no more appends.
    pub closing: bool,
    pub retention: Retention,
}

impl StreamState {
    pub fn check_invariants(&self) {
        debug_assert!(
            self.committed_end <= self.durable_end,
            "committed beyond durable"
        );
        debug_assert!(
            self.durable_end <= self.next_offset,
            "durable beyond assigned"
        );
        debug_assert!(
            self.batches
                .front()
                .map_or(self.committed_end == self.next_offset, |b| b
                    .frame
                    .base_offset
                    <= self.committed_end),
            "uncommitted data missing from the cache"
        );
        debug_assert!(
            self.batches
                .back()
                .is_none_or(|b| b.end_offset() == self.next_offset),
            "cache does not end at the next offset"
        );
    }

    /// Batches from `from` on, below the high watermark, up to about `max_bytes` (at least one).
    /// `None` if the cache does not reach back to `from`.
    pub fn read_cached(&self, from: u64, max_bytes: usize) -> Option<Vec<Frame>> {
        let first = self.batches.front()?;
        if first.frame.base_offset > from {
            return None;
        }
        let i = self.batches.partition_point(|b| b.end_offset() <= from);
        let mut out = Vec::new();
        let mut bytes = 0;
        for b in self.batches.range(i..) {
            if b.end_offset() > self.durable_end
                || (!out.is_empty() && bytes + b.frame.payload.len() > max_bytes)
            {
                break;
            }
            bytes += b.frame.payload.len();
            out.push(b.frame.clone());
        }
        Some(out)
    }

    /// Durable batches not yet committed, for an upload.
    pub fn uncommitted_durable(&self) -> Vec<Frame> {
        let i = self
            .batches
            .partition_point(|b| b.end_offset() <= self.committed_end);
        self.batches
            .range(i..)
            .take_while(|b| b.end_offset() <= self.durable_end)
            .map(|b| b.frame.clone())
            .collect()
    }

    /// WAL sequence number of the first batch not yet committed.
    pub fn first_uncommitted_seq(&self) -> Option<Seq> {
        let i = self
            .batches
            .partition_point(|b| b.end_offset() <= self.committed_end);
        self.batches.get(i).map(|b| b.seq)
    }

    /// Drops committed batches that end at or below `upto`; returns the bytes freed.
    pub fn evict_until(&mut self, upto: u64) -> u64 {
        let limit = upto.min(self.committed_end);
        let mut freed = 0;
        while let Some(b) = self.batches.front() {
            if b.end_offset() > limit {
                break;
            }
            freed += b.frame.payload.len() as u64;
            self.batches.pop_front();
        }
        self.cached_bytes -= freed;
        freed
    }

    /// Drops pending batches from `offset` on after a failed WAL write; returns their bytes.
    pub fn truncate_pending(&mut self, offset: u64) -> u64 {
        debug_assert!(offset >= self.durable_end, "truncating durable data");
        let mut freed = 0;
        while let Some(b) = self.batches.back() {
            if b.frame.base_offset < offset {
                break;
            }
            freed += b.frame.payload.len() as u64;
            self.batches.pop_back();
        }
        self.cached_bytes -= freed;
        self.next_offset = offset;
        freed
    }
}

pub(crate) struct Stream {
    pub id: u64,
    state: Mutex<StreamState>,
    /// The high watermark, for readers that wait for new data.
    pub end_tx: watch::Sender<u64>,
}

impl Stream {
    pub fn new(id: u64, epoch: u64, start_offset: u64, end_offset: u64) -> Stream {
        Stream {
            id,
            state: Mutex::new(StreamState {
                epoch,
                start_offset,
                committed_end: end_offset,
                durable_end: end_offset,
                next_offset: end_offset,
                batches: VecDeque::new(),
                cached_bytes: 0,
                fenced_by: None,
                closing: false,
                retention: Retention::default(),
            }),
            end_tx: watch::channel(end_offset).0,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, StreamState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Total of a slice of frames' payloads.
pub(crate) fn payload_bytes(frames: &[Frame]) -> u64 {
    frames.iter().map(|f| f.payload.len() as u64).sum()
}

pub(crate) fn frame(
    base_offset: u64,
    record_count: u32,
    max_timestamp: i64,
    payload: Bytes,
) -> Frame {
    Frame {
        base_offset,
        record_count,
        max_timestamp,
        payload,
    }
}
