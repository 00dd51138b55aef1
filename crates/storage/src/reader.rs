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

/// Ranges looked up in the metadata store at a time.
const RANGES_PER_LOOKUP: usize = 32;

/// Object indexes fetched at once by a read that goes through many small ranges.
const PREFETCH_CONCURRENCY: usize = 16;

/// What an object's cached index costs besides its entries: the map and age entries, the `Arc`
/// and the `Vec` header. An estimate; it keeps a cache of many tiny indexes bounded too.
const INDEX_OVERHEAD: u64 = 128;

/// Memory an object's index takes in the index cache.
fn index_cost(index: &[IndexEntry]) -> u64 {
    (std::mem::size_of_val(index) as u64) + INDEX_OVERHEAD
}

/// A least-recently-used map with a byte budget: each value is charged the bytes it is inserted
/// with, and the oldest values are evicted while the total exceeds the budget. A value larger
/// than the whole budget is not kept.
struct Lru<K, V> {
    budget: u64,
    bytes: u64,
    tick: u64,
    entries: HashMap<K, (V, u64, u64)>,
    by_age: BTreeMap<u64, K>,
}

impl<K: Copy + Eq + std::hash::Hash, V: Clone> Lru<K, V> {
    fn new(budget: u64) -> Self {
        Lru {
            budget,
            bytes: 0,
            tick: 0,
            entries: HashMap::new(),
            by_age: BTreeMap::new(),
        }
    }

    fn get(&mut self, key: &K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        let (value, _, t) = self.entries.get_mut(key)?;
        self.by_age.remove(t);
        *t = tick;
        self.by_age.insert(tick, *key);
        Some(value.clone())
    }

    fn insert(&mut self, key: K, value: V, bytes: u64) {
        self.remove(&key);
        if bytes > self.budget {
            return;
        }
        self.tick += 1;
        self.entries.insert(key, (value, bytes, self.tick));
        self.bytes += bytes;
        self.by_age.insert(self.tick, key);
        while self.bytes > self.budget {
            let Some((_, k)) = self.by_age.pop_first() else {
                break;
            };
            if let Some((_, b, _)) = self.entries.remove(&k) {
                self.bytes -= b;
            }
        }
    }

    fn remove(&mut self, key: &K) {
        if let Some((_, b, t)) = self.entries.remove(key) {
            self.bytes -= b;
            self.by_age.remove(&t);
        }
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// The contiguous ranges of `known` from the one holding `next` on (at most
/// [`RANGES_PER_LOOKUP`]); `None` if none holds it.
fn known_run(known: &[RangeInfo], stream_id: u64, next: u64) -> Option<Vec<RangeInfo>> {
    let i = known
        .iter()
        .position(|r| r.stream_id == stream_id && r.start_offset <= next && next < r.end_offset)?;
    let mut run = vec![known[i].clone()];
    for r in &known[i + 1..] {
        if run.len() >= RANGES_PER_LOOKUP
            || r.stream_id != stream_id
            || run
                .last()
                .is_some_and(|last| last.end_offset != r.start_offset)
        {
            break;
        }
        run.push(r.clone());
    }
    Some(run)
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
    blocks: Mutex<Lru<BlockKey, Bytes>>,
    /// Indexes of objects recently read, bounded in bytes (`storage.index_cache_bytes`): an
    /// object's index grows with its blocks, so a count would not bound memory.
    indexes: Mutex<Lru<ObjectId, Arc<Vec<IndexEntry>>>>,
    readahead: Mutex<HashMap<u64, ReadAhead>>,
    /// Bandwidth budget of reads from object storage.
    budget: crate::budget::Budget,
}

impl ObjectReader {
    #[allow(clippy::too_many_arguments)]
    pub fn with_index_cache(
        store: Arc<dyn ObjectStore>,
        meta: Arc<dyn MetaStore>,
        meters: Arc<StorageMeters>,
        block_bytes: u64,
        block_cache_bytes: u64,
        readahead_max: u64,
        budget: crate::budget::Budget,
        index_cache_bytes: u64,
    ) -> Self {
        ObjectReader {
            store,
            meta,
            meters,
            block_bytes,
            readahead_max: readahead_max.max(block_bytes),
            blocks: Mutex::new(Lru::new(block_cache_bytes)),
            indexes: Mutex::new(Lru::new(index_cache_bytes)),
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
        self.read_with(stream_id, from, until, max_bytes, &[]).await
    }

    /// [`ObjectReader::read`], taking the ranges from `known` (the stream's, in offset order)
    /// where they cover the offsets read, and from the metadata store elsewhere.
    pub async fn read_with(
        &self,
        stream_id: u64,
        from: u64,
        until: u64,
        max_bytes: usize,
        known: &[RangeInfo],
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
            let ranges = match known_run(known, stream_id, next) {
                Some(run) => run,
                None => {
                    self.meters.index_lookups.inc();
                    self.meta.ranges(stream_id, next, RANGES_PER_LOOKUP).await?
                }
            };
            if ranges.is_empty() {
                break;
            }
            self.prefetch_indexes(&ranges, max_bytes.saturating_sub(bytes))
                .await;
            for r in &ranges {
                if r.start_offset > next {
                    if next == from {
                        // Retention moved the start past `from` since the caller checked it.
                        return Err(StorageError::OffsetOutOfRange {
                            stream_id,
                            offset: from,
                            start: r.start_offset,
                            end: until,
                        });
                    }
                    // Ranges of a stream tile its offsets: a hole would skip acknowledged data.
                    return Err(StorageError::Corrupt {
                        key: r.object_key.clone(),
                        reason: format!(
                            "the ranges of stream {stream_id} have a gap: {next} to {}",
                            r.start_offset
                        ),
                    });
                }
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
                        // A frame the cleaner of a compacted topic emptied counts for
                        // nothing: the read goes on to one with data.
                        if f.base_offset >= until
                            || (bytes > 0 && bytes + f.payload.len() > max_bytes)
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

    /// Fetches, concurrently, the indexes of the ranges a read of `want` bytes will go through,
    /// that are not cached. A stream on the object WAL has a small range in each of many small
    /// objects until compaction merges them: one GET after another would make a read of them
    /// (a new leader rebuilding its producer state, a consumer catching up) take a round trip
    /// per range. Failures are left to the read itself, which fetches again and reports them.
    async fn prefetch_indexes(&self, ranges: &[RangeInfo], want: usize) {
        let mut needed = Vec::new();
        let mut bytes = 0u64;
        {
            let mut cache = self.indexes.lock().unwrap_or_else(|e| e.into_inner());
            for r in ranges {
                if bytes >= want as u64 && !needed.is_empty() {
                    break;
                }
                bytes += r.size;
                if cache.get(&r.object_id).is_none() {
                    needed.push(r);
                }
            }
        }
        if needed.len() < 2 {
            return;
        }
        for chunk in needed.chunks(PREFETCH_CONCURRENCY) {
            futures::future::join_all(chunk.iter().map(|r| self.index(r))).await;
        }
    }

    async fn index(&self, r: &RangeInfo) -> Result<Arc<Vec<IndexEntry>>> {
        if let Some(i) = self
            .indexes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&r.object_id)
        {
            return Ok(i);
        }
        let path = Path::from(r.object_key.as_str());
        let size = r.object_size;
        let bad = |reason: String| StorageError::Corrupt {
            key: r.object_key.clone(),
            reason,
        };
        if size < FOOTER_LEN as u64 {
            return Err(bad(format!("{size} bytes: shorter than a footer")));
        }
        let tail_start = size.saturating_sub(TAIL_GUESS);
        let tail = self.store.get_range(&path, tail_start..size).await?;
        let footer = format::decode_footer(&tail).map_err(|e| corrupt(r, e))?;
        let index_end = size - FOOTER_LEN as u64;
        let index_len = u64::from(footer.index_len);
        if footer.index_position.checked_add(index_len) != Some(index_end) {
            return Err(bad(format!(
                "index at {} of {index_len} bytes does not end at the footer ({index_end})",
                footer.index_position
            )));
        }
        let index_bytes = if footer.index_position >= tail_start {
            let at = (footer.index_position - tail_start) as usize;
            let end = at + footer.index_len as usize;
            if end > tail.len() {
                return Err(bad(format!(
                    "short read of the tail: {} of {} bytes",
                    tail.len(),
                    size - tail_start
                )));
            }
            tail.slice(at..end)
        } else {
            self.store
                .get_range(&path, footer.index_position..index_end)
                .await?
        };
        let index =
            Arc::new(format::decode_index(&footer, &index_bytes).map_err(|e| corrupt(r, e))?);
        if tail_start == 0 {
            // The tail was the whole object: keep its blocks, which a read of the range fetches
            // next anyway. Every stream's, not only this one's: a small object of the object WAL
            // holds a slice of many streams, which compaction (and catch-up readers) read one
            // stream after another; each would GET the same object again. Copied, so that the
            // cache does not pin the whole tail.
            let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
            for e in index.iter() {
                let (at, end) = (e.position as usize, e.position as usize + e.size as usize);
                if let Some(b) = tail.get(at..end) {
                    blocks.insert(
                        (r.object_id, e.position),
                        Bytes::copy_from_slice(b),
                        u64::from(e.size),
                    );
                }
            }
        }
        let mut cache = self.indexes.lock().unwrap_or_else(|e| e.into_inner());
        cache.insert(r.object_id, Arc::clone(&index), index_cost(&index));
        self.meters
            .object_index_cache_bytes
            .store(cache.bytes(), std::sync::atomic::Ordering::Relaxed);
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
                u64::from(e.size),
            );
        }
        let first = index[i].size as usize;
        Ok(data.slice(0..first))
    }

    /// Forgets a deleted object's index.
    pub fn forget(&self, object_id: ObjectId) {
        let mut cache = self.indexes.lock().unwrap_or_else(|e| e.into_inner());
        cache.remove(&object_id);
        self.meters
            .object_index_cache_bytes
            .store(cache.bytes(), std::sync::atomic::Ordering::Relaxed);
    }
}

fn corrupt(r: &RangeInfo, e: format::FormatError) -> StorageError {
    StorageError::Corrupt {
        key: r.object_key.clone(),
        reason: e.0,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use super::*;
    use crate::objstore::MeteredStore;
    use crate::{Engine, StorageConfig};

    #[test]
    fn lru_keeps_its_byte_budget_and_evicts_the_least_recently_used() {
        let mut lru: Lru<u32, u32> = Lru::new(100);
        for k in 0..4 {
            lru.insert(k, k, 30);
        }
        // 4 x 30 > 100: the oldest (0) went.
        assert_eq!(lru.bytes(), 90);
        assert_eq!(lru.get(&0), None);
        // 1 is used, so 2 is now the oldest.
        assert_eq!(lru.get(&1), Some(1));
        lru.insert(4, 4, 30);
        assert_eq!(lru.get(&2), None);
        assert!(lru.get(&1).is_some() && lru.get(&3).is_some() && lru.get(&4).is_some());
        // Replacing a key charges the new size only.
        lru.insert(4, 40, 10);
        assert_eq!(lru.bytes(), 70);
        assert_eq!(lru.get(&4), Some(40));
        // A value larger than the budget is not kept, and does not evict the others.
        lru.insert(9, 9, 101);
        assert_eq!((lru.get(&9), lru.bytes()), (None, 70));
        lru.remove(&1);
        assert_eq!(lru.bytes(), 40);
    }

    /// Many objects read through a reader whose index cache holds only a few of their indexes:
    /// the cache's bytes never exceed the bound, the most recent index is a hit, an evicted one
    /// is fetched again, and every read returns the right data.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn index_cache_stays_within_its_byte_bound() {
        const STREAMS: u64 = 40;
        const BATCHES: u64 = 12;
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let meta: Arc<dyn MetaStore> =
            Arc::new(weir_meta::SqliteMetaStore::in_memory().expect("meta"));
        let wal = weir_wal::FileWal::open(weir_wal::FileWalConfig {
            capacity: 4 << 20,
            ..weir_wal::FileWalConfig::new(dir.path().join("wal"))
        })
        .expect("WAL");
        let config = StorageConfig {
            upload_interval: Duration::from_secs(3600),
            block_bytes: 2048,
            ..StorageConfig::default()
        };
        let engine = Engine::open(config, Arc::new(wal), Arc::clone(&meta), Arc::clone(&store))
            .await
            .expect("engine");
        // One object per stream: each stream is closed (uploaded) before the next is written.
        for s in 0..STREAMS {
            engine.open_stream(s, 1).await.expect("open");
            for i in 0..BATCHES {
                engine
                    .append(s, 1, 1, 0, |_| Bytes::from(vec![(s * 31 + i) as u8; 1500]))
                    .await
                    .expect("append");
            }
            engine.close_stream(s).await.expect("close stream");
        }
        engine.close().await.expect("close");

        let metered = MeteredStore::new(store);
        let gets = metered.meters();
        let meters = Arc::new(StorageMeters::default());
        // Each object's index has one entry per batch (a batch fills a block).
        let one = BATCHES * std::mem::size_of::<IndexEntry>() as u64 + INDEX_OVERHEAD;
        let bound = 5 * one + one / 2;
        let reader = ObjectReader::with_index_cache(
            Arc::new(metered),
            meta,
            Arc::clone(&meters),
            2048,
            64 << 20,
            2048,
            crate::budget::Budget::new(0),
            bound,
        );
        let cached = || meters.object_index_cache_bytes.load(Ordering::Relaxed);
        let mut highest = 0;
        for s in 0..STREAMS {
            let frames = reader.read(s, 0, BATCHES, 1 << 20).await.expect("read");
            assert_eq!(frames.len() as u64, BATCHES, "stream {s}");
            for (i, f) in frames.iter().enumerate() {
                assert_eq!(f.base_offset, i as u64);
                assert!(f.payload.iter().all(|b| *b == (s * 31 + i as u64) as u8));
            }
            let now = cached();
            assert!(now <= bound, "index cache at {now} bytes, bound {bound}");
            assert_eq!(now, reader.indexes.lock().expect("lock").bytes());
            highest = highest.max(now);
        }
        assert_eq!(highest, 5 * one, "the cache filled up to what fits");

        // The last object's index is cached (and its blocks too): no GET at all.
        let before = gets.gets.get();
        reader
            .read(STREAMS - 1, 0, BATCHES, 1 << 20)
            .await
            .expect("read");
        assert_eq!(
            gets.gets.get(),
            before,
            "a cached index and blocks need no GET"
        );
        // The first one's was evicted: its tail is fetched again (its blocks are still cached).
        reader.read(0, 0, BATCHES, 1 << 20).await.expect("read");
        assert_eq!(
            gets.gets.get(),
            before + 1,
            "an evicted index is fetched again"
        );
        assert!(cached() <= bound);
        let first = reader.meta.ranges(0, 0, 1).await.expect("ranges")[0].object_id;
        reader.forget(first);
        assert_eq!(cached(), 4 * one, "a deleted object's index is forgotten");
    }
}
