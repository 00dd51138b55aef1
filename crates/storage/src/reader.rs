//! Reads of data that has left the log cache: metadata index, object index, block cache, ranged
//! GETs with read-ahead.
//!
//! A reader that goes on where its last read ended doubles its read-ahead, up to
//! `readahead_max_bytes`; one that jumps starts again at one block. A miss fetches the missing
//! block and the following blocks of the same stream in the same object, up to the read-ahead,
//! in one ranged GET, and caches them all.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use weir_meta::{MetaStore, ObjectId, RangeInfo};

use crate::error::{Result, StorageError};
use crate::format::{self, Frame, IndexEntry, FOOTER_LEN};
use crate::StorageMeters;

/// How much of an object's tail the first GET fetches: footer plus, usually, the whole index.
const TAIL_GUESS: u64 = 64 << 10;

type BlockKey = (ObjectId, u64);

/// A least-recently-used cache of blocks with a byte budget.
struct BlockCache {
    budget: u64,
    bytes: u64,
    tick: u64,
    blocks: HashMap<BlockKey, (Bytes, u64)>,
    by_age: BTreeMap<u64, BlockKey>,
}

impl BlockCache {
    fn get(&mut self, key: &BlockKey) -> Option<Bytes> {
        self.tick += 1;
        let tick = self.tick;
        let (data, t) = self.blocks.get_mut(key)?;
        self.by_age.remove(t);
        *t = tick;
        self.by_age.insert(tick, *key);
        Some(data.clone())
    }

    fn insert(&mut self, key: BlockKey, data: Bytes) {
        if data.len() as u64 > self.budget {
            return;
        }
        self.tick += 1;
        if let Some((old, t)) = self.blocks.insert(key, (data.clone(), self.tick)) {
            self.bytes -= old.len() as u64;
            self.by_age.remove(&t);
        }
        self.bytes += data.len() as u64;
        self.by_age.insert(self.tick, key);
        while self.bytes > self.budget {
            let Some((_, k)) = self.by_age.pop_first() else {
                break;
            };
            if let Some((d, _)) = self.blocks.remove(&k) {
                self.bytes -= d.len() as u64;
            }
        }
    }
}

#[derive(Clone, Copy)]
struct ReadAhead {
    next_offset: u64,
    window: u64,
}

pub(crate) struct ObjectReader {
    store: Arc<dyn ObjectStore>,
    meta: Arc<dyn MetaStore>,
    meters: Arc<StorageMeters>,
    block_bytes: u64,
    readahead_max: u64,
    blocks: Mutex<BlockCache>,
    /// Indexes of objects recently read. Small (52 bytes an entry) and bounded by count.
    indexes: Mutex<HashMap<ObjectId, Arc<Vec<IndexEntry>>>>,
    readahead: Mutex<HashMap<u64, ReadAhead>>,
    /// Bandwidth budget of reads from object storage.
    budget: crate::budget::Budget,
}

const MAX_CACHED_INDEXES: usize = 4096;

impl ObjectReader {
    pub fn new(
        store: Arc<dyn ObjectStore>,
        meta: Arc<dyn MetaStore>,
        meters: Arc<StorageMeters>,
        block_bytes: u64,
        block_cache_bytes: u64,
        readahead_max: u64,
        budget: crate::budget::Budget,
    ) -> Self {
        ObjectReader {
            store,
            meta,
            meters,
            block_bytes,
            readahead_max: readahead_max.max(block_bytes),
            blocks: Mutex::new(BlockCache {
                budget: block_cache_bytes,
                bytes: 0,
                tick: 0,
                blocks: HashMap::new(),
                by_age: BTreeMap::new(),
            }),
            indexes: Mutex::new(HashMap::new()),
            readahead: Mutex::new(HashMap::new()),
            budget,
        }
    }

    /// Frames of `stream_id` from `from` on, below `until`, up to about `max_bytes` (at least one
    /// frame if there is one).
    pub async fn read(
        &self,
        stream_id: u64,
        from: u64,
        until: u64,
        max_bytes: usize,
    ) -> Result<Vec<Frame>> {
        let window = {
            let mut ra = self.readahead.lock().unwrap_or_else(|e| e.into_inner());
            let e = ra.entry(stream_id).or_insert(ReadAhead {
                next_offset: u64::MAX,
                window: self.block_bytes,
            });
            e.window = if e.next_offset == from {
                (e.window * 2).min(self.readahead_max)
            } else {
                self.block_bytes
            };
            e.window
        };
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut next = from;
        'ranges: while next < until {
            let ranges = self.meta.ranges(stream_id, next, 8).await?;
            if ranges.is_empty() {
                break;
            }
            for r in &ranges {
                debug_assert!(
                    r.start_offset <= next,
                    "gap in the ranges of stream {stream_id} at {next}"
                );
                let index = self.index(r).await?;
                let first =
                    index.partition_point(|e| (e.stream_id, e.end_offset) <= (stream_id, next));
                let mut i = first;
                while i < index.len() && index[i].stream_id == stream_id {
                    let block = self.block(r, &index, i, window).await?;
                    let frames =
                        format::decode_block(&index[i], &block).map_err(|e| corrupt(r, e))?;
                    for f in frames {
                        if f.end_offset() <= next {
                            continue;
                        }
                        if f.base_offset >= until
                            || (!out.is_empty() && bytes + f.payload.len() > max_bytes)
                        {
                            break 'ranges;
                        }
                        next = f.end_offset();
                        bytes += f.payload.len();
                        out.push(f);
                    }
                    i += 1;
                }
                if next < r.end_offset {
                    // The index ended before the range did: the object does not hold what the
                    // metadata says it does.
                    return Err(StorageError::Corrupt {
                        key: r.object_key.clone(),
                        reason: format!(
                            "stream {stream_id} ends at {next}, the range at {}",
                            r.end_offset
                        ),
                    });
                }
            }
        }
        let mut ra = self.readahead.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = ra.get_mut(&stream_id) {
            e.next_offset = next;
        }
        Ok(out)
    }

    async fn index(&self, r: &RangeInfo) -> Result<Arc<Vec<IndexEntry>>> {
        if let Some(i) = self
            .indexes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&r.object_id)
        {
            return Ok(Arc::clone(i));
        }
        let path = Path::from(r.object_key.as_str());
        let size = r.object_size;
        let tail_start = size.saturating_sub(TAIL_GUESS);
        let tail = self.store.get_range(&path, tail_start..size).await?;
        let footer = format::decode_footer(&tail).map_err(|e| corrupt(r, e))?;
        let index_end = size - FOOTER_LEN as u64;
        let index_bytes = if footer.index_position >= tail_start {
            let at = (footer.index_position - tail_start) as usize;
            tail.slice(at..at + footer.index_len as usize)
        } else {
            self.store
                .get_range(&path, footer.index_position..index_end)
                .await?
        };
        let index =
            Arc::new(format::decode_index(&footer, &index_bytes).map_err(|e| corrupt(r, e))?);
        let mut cache = self.indexes.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= MAX_CACHED_INDEXES {
            cache.clear();
        }
        cache.insert(r.object_id, Arc::clone(&index));
        Ok(index)
    }

    async fn block(
        &self,
        r: &RangeInfo,
        index: &[IndexEntry],
        i: usize,
        window: u64,
    ) -> Result<Bytes> {
        let key = (r.object_id, index[i].position);
        if let Some(b) = self
            .blocks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            self.meters.block_cache_hits.inc();
            return Ok(b);
        }
        self.meters.block_cache_misses.inc();
        // The missing block and the stream's following blocks, up to the read-ahead window.
        let mut j = i + 1;
        let mut len = u64::from(index[i].size);
        while j < index.len()
            && index[j].stream_id == index[i].stream_id
            && index[j].position == index[j - 1].position + u64::from(index[j - 1].size)
            && len + u64::from(index[j].size) <= window
        {
            len += u64::from(index[j].size);
            j += 1;
        }
        let start = index[i].position;
        self.budget.take(len).await;
        let data = self
            .store
            .get_range(&Path::from(r.object_key.as_str()), start..start + len)
            .await?;
        if data.len() as u64 != len {
            return Err(StorageError::Corrupt {
                key: r.object_key.clone(),
                reason: format!("short read: {} of {len} bytes", data.len()),
            });
        }
        self.meters.block_cache_fill_bytes.add(len);
        let mut cache = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        for e in &index[i..j] {
            let at = (e.position - start) as usize;
            cache.insert(
                (r.object_id, e.position),
                data.slice(at..at + e.size as usize),
            );
        }
        let first = index[i].size as usize;
        Ok(data.slice(0..first))
    }

    /// Forgets a deleted object's index.
    pub fn forget(&self, object_id: ObjectId) {
        self.indexes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&object_id);
    }
}

fn corrupt(r: &RangeInfo, e: format::FormatError) -> StorageError {
    StorageError::Corrupt {
        key: r.object_key.clone(),
        reason: e.0,
    }
}
