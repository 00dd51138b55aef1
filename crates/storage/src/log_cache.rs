//! The log cache's budget: the batches streams hold in memory, committed ones evicted oldest
//! first once the cache is over `log_cache_bytes`. Each stream keeps its own batches
//! (`stream.rs`); this keeps the order they were committed in and the totals' budget.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::stream::Totals;
use crate::streams::Streams;
use crate::StorageMeters;

pub struct LogCache {
    /// Bytes in the log cache and not yet in object storage, all streams; kept by the streams.
    pub totals: Arc<Totals>,
    /// Committed batches in commit order, oldest first: `(stream, end offset)`.
    evictable: Mutex<VecDeque<(u64, u64)>>,
    log_cache_bytes: u64,
    streams: Arc<Streams>,
    meters: Arc<StorageMeters>,
}

impl LogCache {
    pub fn new(
        log_cache_bytes: u64,
        streams: Arc<Streams>,
        meters: Arc<StorageMeters>,
    ) -> LogCache {
        LogCache {
            totals: Arc::new(Totals::default()),
            evictable: Mutex::new(VecDeque::new()),
            log_cache_bytes,
            streams,
            meters,
        }
    }

    /// A stream's batches below `end` are committed: evictable, after those committed before.
    pub fn committed(&self, stream_id: u64, end: u64) {
        self.evictable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back((stream_id, end));
    }

    /// The budget: `log_cache_bytes` for all the cache holds, uploaded or not. Data not yet
    /// uploaded cannot be evicted, so while more than that waits for an upload the cache holds
    /// just that (the WAL's capacity bounds it).
    fn budget(&self) -> u64 {
        self.log_cache_bytes
            .max(self.totals.uncommitted.load(Ordering::Relaxed))
    }

    /// Evicts the oldest committed batches while the log cache is over its budget.
    pub fn evict(&self) {
        let budget = self.budget();
        while self.totals.cached.load(Ordering::Relaxed) > budget {
            let next = self
                .evictable
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front();
            let Some((stream_id, upto)) = next else { break };
            if let Some(s) = self.streams.get(stream_id) {
                let freed = s.lock().evict_until(upto);
                self.meters.log_cache_evicted_bytes.add(freed);
            }
        }
    }
}
