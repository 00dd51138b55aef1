//! Reads of data that has left the log cache: metadata index, object index, block cache, ranged
//! GETs with asynchronous read-ahead.
//!
//! A consumer that goes on where its last read ended doubles its read-ahead window, up to
//! `readahead_max_bytes` (less when many readers read at once: all windows together stay
//! within half of the block cache, so that what is fetched ahead is read before it is
//! evicted); one that jumps starts again at one block. A stream keeps a state for each of up
//! to `READERS_PER_STREAM` positions it is read at, so that consumer groups reading one
//! partition at different offsets each go on from their own last read. After each read a
//! background task keeps the window ahead of the reader fetched: once less than half of it
//! is, it starts ranged GETs for the rest, several at a time, each of adjacent blocks, so
//! that the next reads find their blocks in the cache instead of waiting for a round trip
//! each. A GET in flight is known by every block it covers: a read that needs one of them
//! waits for it instead of fetching it again.
//!
//! A reader going on keeps the ranges its last read went through and reads on through them:
//! it asks the metadata store once per run of ranges rather than at every read, and when
//! compaction replaces the objects it is reading (they stay for the delete grace period) it
//! does not fetch the same data again from the new ones. If a kept range's object is gone, the
//! read is done again through the metadata store.
//!
//! The block cache is a least-recently-used cache with one exception: a block a consumer has
//! read through (its read went on past the block's end) goes first when room is needed. Such a
//! block is not read again by that consumer, while the blocks fetched ahead of the readers
//! (up to half of the cache) are read soon; under plain LRU the block just read was the most
//! recently used, and blocks fetched ahead and not read yet were evicted before it and fetched
//! twice (15-20% more fetched than consumers read in a catch-up of 16 partitions). A second
//! consumer of the same data far behind the first fetches it again. A consumer's read stops
//! where the log cache starts (`until`): the blocks from there on are neither fetched nor
//! taken along in a GET of the blocks before them.
//!
//! Reads have a [`Purpose`]: compaction's ([`Purpose::Background`]) neither fill the block
//! cache nor touch the read-ahead state, and are counted apart, so that rewriting old data
//! neither evicts what consumers are about to read nor shrinks their windows.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
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

/// The largest GET of a background read (compaction reads a run of ranges in order).
const BACKGROUND_GET_BYTES: u64 = 8 << 20;

/// The largest GET of the read-ahead. Object stores serve one large GET more slowly than a few
/// smaller ones at once (S3 guides to 8-16 MiB ranges; s3s-fs on this machine served 4 MiB
/// GETs at 57 MiB/s one at a time and 250 MiB/s eight at a time), so a window is fetched as
/// several GETs in flight together.
pub(crate) const READAHEAD_GET_BYTES: u64 = 4 << 20;

/// Read-ahead GETs in flight at once, all streams together. More do not fetch faster from a
/// server that is already busy, they only queue there, and every read behind them waits longer:
/// on s3s-fs on this 2-core machine, 32 at once made some fetches wait 4 to 16 s and the
/// catch-up ran at 26 MiB/s; 8 at once caught up at 102 MiB/s.
const READAHEAD_GETS: usize = 8;

/// While consumers read from object storage, background work (compaction) moves its bytes this
/// many times more slowly than its budget allows (64 MiB/s by default: 4 MiB/s while they read).
/// Compaction is never urgent, and it competes with the readers for the store (and, on a small
/// machine, for the S3 server's CPU: s3s-fs spends about 10 ms of CPU per MiB PUT in parts and
/// 5 per MiB served). Unrestrained it took a third to a half of what s3s-fs served during a
/// catch-up on a 2-core machine; 4 times slower, the catch-up read 69-110 MiB/s, against 123
/// with compaction off (16 times slower: 91-104).
const YIELD_TO_READERS: u64 = 16;

/// How recently a consumer must have read from object storage for background work to yield.
const READERS_WITHIN: Duration = Duration::from_secs(3);

/// A stream that has not read for this long no longer counts as reading (for the share of the
/// block cache each window gets)...
const ACTIVE_FOR: Duration = Duration::from_secs(5);
/// ...and its read-ahead state (window, kept ranges) is dropped after this long.
const FORGET_AFTER: Duration = Duration::from_secs(60);

/// Memory an object's index takes in the index cache.
fn index_cost(index: &[IndexEntry]) -> u64 {
    (std::mem::size_of_val(index) as u64) + INDEX_OVERHEAD
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A least-recently-used map with a byte budget: each value is charged the bytes it is inserted
/// with, and the oldest values are evicted while the total exceeds the budget. A value larger
/// than the whole budget is not kept. A value can be demoted: it goes first when room is needed
/// (demoted values in the order they were demoted), which is where a block a consumer has read
/// through belongs, rather than ahead of the blocks fetched for it that it has not read yet.
struct Lru<K, V> {
    budget: u64,
    bytes: u64,
    /// Ages of values in use count up from `HOT`, of demoted ones from 0: all below.
    tick: u64,
    cold: u64,
    entries: HashMap<K, Entry<V>>,
    by_age: BTreeMap<u64, K>,
}

struct Entry<V> {
    value: V,
    bytes: u64,
    age: u64,
    /// Taken by a `get` since it was inserted.
    read: bool,
}

const HOT: u64 = 1 << 63;

impl<K: Copy + Eq + std::hash::Hash, V: Clone> Lru<K, V> {
    fn new(budget: u64) -> Self {
        Lru {
            budget,
            bytes: 0,
            tick: HOT,
            cold: 0,
            entries: HashMap::new(),
            by_age: BTreeMap::new(),
        }
    }

    fn get(&mut self, key: &K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        let e = self.entries.get_mut(key)?;
        self.by_age.remove(&e.age);
        e.age = tick;
        e.read = true;
        self.by_age.insert(tick, *key);
        Some(e.value.clone())
    }

    fn contains(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    /// Inserts `value`, evicting the oldest values while over the budget; returns the bytes
    /// evicted that no `get` had taken.
    fn insert(&mut self, key: K, value: V, bytes: u64) -> u64 {
        self.remove(&key);
        if bytes > self.budget {
            return 0;
        }
        self.tick += 1;
        self.entries.insert(
            key,
            Entry {
                value,
                bytes,
                age: self.tick,
                read: false,
            },
        );
        self.bytes += bytes;
        self.by_age.insert(self.tick, key);
        let mut unread = 0;
        while self.bytes > self.budget {
            let Some((_, k)) = self.by_age.pop_first() else {
                break;
            };
            if let Some(e) = self.entries.remove(&k) {
                self.bytes -= e.bytes;
                if !e.read {
                    unread += e.bytes;
                }
            }
        }
        debug_assert!(
            self.cold < HOT && self.tick >= HOT,
            "ages of demoted values stay below"
        );
        unread
    }

    /// Makes `key`'s value, which has been read, the next to go when room is needed (after
    /// those demoted before it).
    fn demote(&mut self, key: &K) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        e.read = true;
        if e.age < HOT {
            return;
        }
        self.by_age.remove(&e.age);
        self.cold += 1;
        e.age = self.cold;
        self.by_age.insert(self.cold, *key);
    }

    fn remove(&mut self, key: &K) {
        if let Some(e) = self.entries.remove(key) {
            self.bytes -= e.bytes;
            self.by_age.remove(&e.age);
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

/// What a read got.
pub(crate) struct Reading {
    pub frames: Vec<Frame>,
    /// The read stopped at a block that is being fetched (a read that does not wait): there is
    /// more to read than it returned.
    pub incomplete: bool,
    /// Bytes of the GET the read started there (0 if another read or the read-ahead had
    /// started it): what a later read will find cached.
    pub fetching: u64,
}

/// Why a read is made, which decides what it may do to the caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// A consumer (or a broker serving another zone) reading on: read-ahead, cached blocks.
    Fetch,
    /// A one-off look (a search by timestamp): cached blocks, no read-ahead.
    Lookup,
    /// Compaction and the cleaner: uses cached blocks and GETs in flight, but fills no cache,
    /// touches no read-ahead state, and is counted apart. Reads whole GETs: it stops at the
    /// first GET that would start once it has `max_bytes`, not within a block.
    Background,
}

/// A ranged GET in flight; its result is shared by every read waiting for one of its blocks.
type Fetch = Shared<BoxFuture<'static, std::result::Result<Bytes, Arc<StorageError>>>>;

/// A block being fetched: the GET, and where in it the block is.
#[derive(Clone)]
struct InFlight {
    fetch: Fetch,
    at: usize,
}

/// Readers of one stream that keep read-ahead states of their own: consumer groups reading a
/// partition at different offsets each go on from where their own last read ended. A read that
/// goes on from none of them takes a new state, or the least recently used one's place.
const READERS_PER_STREAM: usize = 4;

/// A reader's read-ahead state: one per position a stream is read at.
struct ReadAhead {
    /// Which state this is: a read, and the read-ahead task it starts, update only their own,
    /// even after it was taken over by another reader.
    id: u64,
    /// Where the last read started and ended: a read from `next_offset` goes on; one from
    /// between them reads again what the last one read (a fetch's second, waiting pass, a long
    /// poll's next round) and changes nothing.
    last_from: u64,
    next_offset: u64,
    window: u64,
    /// The ranges the last read went through, from the one holding `next_offset` on.
    ranges: Arc<Vec<RangeInfo>>,
    /// The stream offset up to which read-ahead GETs were started.
    ahead_to: u64,
    /// A read-ahead task of this stream is running.
    prefetching: bool,
    used: Instant,
}

/// The streams' read-ahead states, and how many readers read at the moment.
struct Readers {
    streams: HashMap<u64, Vec<ReadAhead>>,
    active: usize,
    counted: Instant,
    last_id: u64,
}

impl Readers {
    fn state(&mut self, stream_id: u64, id: u64) -> Option<&mut ReadAhead> {
        self.streams
            .get_mut(&stream_id)?
            .iter_mut()
            .find(|s| s.id == id)
    }
}

#[derive(Clone)]
pub(crate) struct ObjectReader {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn ObjectStore>,
    meta: Arc<dyn MetaStore>,
    meters: Arc<StorageMeters>,
    block_bytes: u64,
    block_cache_bytes: u64,
    readahead_max: u64,
    blocks: Mutex<Lru<BlockKey, Bytes>>,
    /// Indexes of objects recently read, bounded in bytes (`storage.index_cache_bytes`): an
    /// object's index grows with its blocks, so a count would not bound memory.
    indexes: Mutex<Lru<ObjectId, Arc<Vec<IndexEntry>>>>,
    in_flight: Mutex<HashMap<BlockKey, InFlight>>,
    readers: Mutex<Readers>,
    readahead_gets: Arc<tokio::sync::Semaphore>,
    /// Bandwidth budget of consumers' reads from object storage.
    budget: crate::budget::Budget,
    /// Bandwidth budget of background work (compaction's reads and writes).
    background: crate::budget::Budget,
    /// When a consumer last read from object storage (milliseconds since `born`).
    last_fetch_ms: std::sync::atomic::AtomicU64,
    born: Instant,
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
        background: crate::budget::Budget,
        index_cache_bytes: u64,
    ) -> Self {
        ObjectReader {
            inner: Arc::new(Inner {
                store,
                meta,
                meters,
                block_bytes,
                block_cache_bytes,
                readahead_max: readahead_max.max(block_bytes),
                blocks: Mutex::new(Lru::new(block_cache_bytes)),
                indexes: Mutex::new(Lru::new(index_cache_bytes)),
                in_flight: Mutex::new(HashMap::new()),
                readers: Mutex::new(Readers {
                    streams: HashMap::new(),
                    active: 0,
                    counted: Instant::now(),
                    last_id: 0,
                }),
                readahead_gets: Arc::new(tokio::sync::Semaphore::new(READAHEAD_GETS)),
                budget,
                background,
                last_fetch_ms: std::sync::atomic::AtomicU64::new(0),
                born: Instant::now(),
            }),
        }
    }

    /// Frames of `stream_id` from `from` on, below `until`, up to about `max_bytes` (at least one
    /// frame if there is one), read for `purpose`.
    pub async fn read(
        &self,
        stream_id: u64,
        from: u64,
        until: u64,
        max_bytes: usize,
        purpose: Purpose,
    ) -> Result<Vec<Frame>> {
        Ok(self
            .read_with(stream_id, from, until, max_bytes, &[], purpose, true)
            .await?
            .frames)
    }

    /// [`ObjectReader::read`], taking the ranges from `known` (the stream's, in offset order)
    /// where they cover the offsets read, and from the metadata store elsewhere. Unless `wait`,
    /// the read stops at the first block that is neither cached nor fetched yet (its GET is
    /// started, or already under way), with what it read until there, maybe nothing.
    #[allow(clippy::too_many_arguments)]
    pub async fn read_with(
        &self,
        stream_id: u64,
        from: u64,
        until: u64,
        max_bytes: usize,
        known: &[RangeInfo],
        purpose: Purpose,
        wait: bool,
    ) -> Result<Reading> {
        let inner = &self.inner;
        let (window, kept, reader) = match purpose {
            Purpose::Fetch => inner.start_fetch(stream_id, from),
            Purpose::Lookup => (inner.block_bytes, Arc::default(), 0),
            Purpose::Background => (BACKGROUND_GET_BYTES, Arc::default(), 0),
        };
        let mut read = inner
            .read_ranges(
                stream_id, from, until, max_bytes, known, &kept, window, purpose, wait,
            )
            .await;
        if read.is_err() && !kept.is_empty() {
            // A kept range's object may be gone (compaction replaced it, and the grace period
            // is over): once more, through the metadata store.
            read = inner
                .read_ranges(
                    stream_id,
                    from,
                    until,
                    max_bytes,
                    known,
                    &[],
                    window,
                    purpose,
                    wait,
                )
                .await;
        }
        let (frames, run, incomplete, fetching) = read?;
        if purpose == Purpose::Fetch {
            let bytes: usize = frames.iter().map(|f| f.payload.len()).sum();
            inner.meters.object_read_bytes.add(bytes as u64);
            let next = frames.last().map_or(from, |f| f.end_offset());
            inner.end_fetch(stream_id, reader, next, until, run);
        }
        Ok(Reading {
            frames,
            incomplete,
            fetching,
        })
    }

    /// Takes `bytes` of the background budget. While consumers read from object storage,
    /// background work moves its bytes [`YIELD_TO_READERS`] times more slowly than the budget
    /// allows: it shares the object store's bandwidth (and, on a small machine, the S3
    /// server's CPU) with them, and it is never urgent.
    pub async fn take_background(&self, bytes: u64) {
        self.inner.take_background(bytes).await;
    }

    /// Forgets a deleted object's index.
    pub fn forget(&self, object_id: ObjectId) {
        let inner = &self.inner;
        let mut cache = lock(&inner.indexes);
        cache.remove(&object_id);
        inner
            .meters
            .object_index_cache_bytes
            .store(cache.bytes(), std::sync::atomic::Ordering::Relaxed);
    }
}

impl Inner {
    async fn take_background(&self, bytes: u64) {
        let last = self
            .last_fetch_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        let now = self.born.elapsed().as_millis() as u64;
        let reading = last > 0 && now.saturating_sub(last) < READERS_WITHIN.as_millis() as u64;
        let bytes = if reading {
            bytes.saturating_mul(YIELD_TO_READERS)
        } else {
            bytes
        };
        self.background.take(bytes).await;
    }

    /// A consumer's read starts: its window, the ranges it may read through, and which
    /// read-ahead state is its.
    fn start_fetch(&self, stream_id: u64, from: u64) -> (u64, Arc<Vec<RangeInfo>>, u64) {
        let now = Instant::now();
        self.last_fetch_ms.store(
            (now.duration_since(self.born).as_millis() as u64).max(1),
            std::sync::atomic::Ordering::Relaxed,
        );
        let mut readers = lock(&self.readers);
        if now.duration_since(readers.counted) >= Duration::from_secs(1) {
            for states in readers.streams.values_mut() {
                states.retain(|s| now.duration_since(s.used) < FORGET_AFTER);
            }
            readers.streams.retain(|_, states| !states.is_empty());
            readers.active = readers
                .streams
                .values()
                .flatten()
                .filter(|s| now.duration_since(s.used) < ACTIVE_FOR)
                .count();
            readers.counted = now;
        }
        let cap = self.window_cap(readers.active.max(1));
        let block = self.block_bytes;
        let Readers {
            streams, last_id, ..
        } = &mut *readers;
        let states = streams.entry(stream_id).or_default();
        if let Some(s) = states.iter_mut().find(|s| s.next_offset == from) {
            s.used = now;
            s.window = (s.window * 2).min(cap);
            s.last_from = from;
            return (s.window, Arc::clone(&s.ranges), s.id);
        }
        if let Some(s) = states
            .iter_mut()
            .find(|s| s.last_from <= from && from < s.next_offset)
        {
            s.used = now;
            return (s.window, Arc::clone(&s.ranges), s.id);
        }
        // A reader that goes on from none of the states: a new one (another consumer group, or
        // one that jumped), starting again at one block.
        *last_id += 1;
        let id = *last_id;
        let fresh = ReadAhead {
            id,
            last_from: from,
            next_offset: from,
            window: block,
            ranges: Arc::default(),
            ahead_to: from,
            prefetching: false,
            used: now,
        };
        if states.len() < READERS_PER_STREAM {
            states.push(fresh);
        } else if let Some(oldest) = states.iter_mut().min_by_key(|s| s.used) {
            *oldest = fresh;
        }
        debug_assert!(states.len() <= READERS_PER_STREAM);
        (block, Arc::default(), id)
    }

    /// The largest window of a reader while `active` readers read: all of them together within
    /// half of the block cache, so that blocks read ahead are not evicted before they are read.
    fn window_cap(&self, active: usize) -> u64 {
        (self.block_cache_bytes / 2 / active as u64)
            .min(self.readahead_max)
            .max(self.block_bytes)
    }

    /// A consumer's read (of read-ahead state `reader`) ended at `next` after going through
    /// `run`: the state for the next read, and the read-ahead beyond it.
    fn end_fetch(
        self: &Arc<Self>,
        stream_id: u64,
        reader: u64,
        next: u64,
        until: u64,
        run: Vec<RangeInfo>,
    ) {
        let start = {
            let mut readers = lock(&self.readers);
            let Some(s) = readers.state(stream_id, reader) else {
                return;
            };
            if next < s.next_offset && s.last_from < s.next_offset {
                // A read again of what the last read read, ending before it did: the state
                // stays where the last one left it.
                return;
            }
            s.next_offset = next;
            s.ranges = Arc::new(run.into_iter().filter(|r| r.end_offset > next).collect());
            s.ahead_to = s.ahead_to.max(next);
            // The first read of a stream, or one after a jump, reads ahead only once the
            // reader shows it goes on (its window has grown).
            if s.prefetching || s.window <= self.block_bytes {
                None
            } else {
                s.prefetching = true;
                Some((s.window, Arc::clone(&s.ranges), s.ahead_to))
            }
        };
        let Some((window, ranges, ahead_to)) = start else {
            return;
        };
        if next >= until {
            if let Some(s) = lock(&self.readers).state(stream_id, reader) {
                s.prefetching = false;
            }
            return;
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let reached = this
                .read_ahead(stream_id, next, until, window, &ranges, ahead_to)
                .await;
            let mut readers = lock(&this.readers);
            if let Some(s) = readers.state(stream_id, reader) {
                s.prefetching = false;
                if let Some(to) = reached {
                    s.ahead_to = s.ahead_to.max(to);
                }
            }
        });
    }

    /// Starts GETs for the blocks of `stream_id` in the `window` bytes from `next` on (below
    /// `until`) that are
    /// neither cached nor being fetched, once less than half of the window is fetched (or
    /// started: `ahead_to`); returns the offset the started GETs reach. Errors end it early:
    /// the reads themselves fetch again and report them.
    async fn read_ahead(
        self: &Arc<Self>,
        stream_id: u64,
        next: u64,
        until: u64,
        window: u64,
        kept: &[RangeInfo],
        ahead_to: u64,
    ) -> Option<u64> {
        let mut at = next;
        let mut bytes = 0u64;
        let mut reached = None;
        let get_bytes = (window / 4).clamp(self.block_bytes, READAHEAD_GET_BYTES);
        // Blocks to fetch, gathered into one GET while they are adjacent in one object.
        let mut pending: Option<(RangeInfo, Vec<IndexEntry>)> = None;
        let mut decided = false;
        'ranges: while bytes < window && at < until {
            let ranges = match known_run(kept, stream_id, at) {
                Some(run) => run,
                None => {
                    self.meters.index_lookups.inc();
                    match self.meta.ranges(stream_id, at, RANGES_PER_LOOKUP).await {
                        Ok(r) if !r.is_empty() => r,
                        _ => break,
                    }
                }
            };
            for r in &ranges {
                if r.start_offset > at {
                    break 'ranges;
                }
                let Ok(index) = self.index(r).await else {
                    break 'ranges;
                };
                let first =
                    index.partition_point(|e| (e.stream_id, e.end_offset) <= (stream_id, at));
                for e in index[first..]
                    .iter()
                    .take_while(|e| e.stream_id == stream_id)
                {
                    if bytes >= window || e.start_offset >= until {
                        break 'ranges;
                    }
                    bytes += u64::from(e.size);
                    at = e.end_offset;
                    if e.end_offset <= ahead_to {
                        continue;
                    }
                    if !decided {
                        // Enough is ahead already: wait until the reader has used more of it.
                        if bytes - u64::from(e.size) >= window / 2 {
                            break 'ranges;
                        }
                        decided = true;
                    }
                    let key = (r.object_id, e.position);
                    let have = lock(&self.blocks).contains(&key)
                        || lock(&self.in_flight).contains_key(&key);
                    let adjacent = pending.as_ref().is_some_and(|(pr, blocks)| {
                        pr.object_id == r.object_id
                            && blocks
                                .last()
                                .is_some_and(|l| l.position + u64::from(l.size) == e.position)
                            && blocks.iter().map(|b| u64::from(b.size)).sum::<u64>()
                                + u64::from(e.size)
                                <= get_bytes
                    });
                    if have || !adjacent {
                        if let Some((pr, blocks)) = pending.take() {
                            self.start_read_ahead_get(&pr, &blocks).await;
                        }
                    }
                    if !have {
                        pending
                            .get_or_insert_with(|| (r.clone(), Vec::new()))
                            .1
                            .push(*e);
                    }
                    reached = Some(e.end_offset);
                }
                if at < r.end_offset {
                    break 'ranges;
                }
            }
        }
        if let Some((pr, blocks)) = pending.take() {
            self.start_read_ahead_get(&pr, &blocks).await;
        }
        reached
    }

    /// Starts a read-ahead GET once one of the [`READAHEAD_GETS`] is free.
    async fn start_read_ahead_get(self: &Arc<Self>, r: &RangeInfo, blocks: &[IndexEntry]) {
        let Ok(permit) = Arc::clone(&self.readahead_gets).acquire_owned().await else {
            return;
        };
        let fetches = {
            // Looked at again under the locks: while this waited for a permit, a read may have
            // started a GET for some of these blocks, or one may have brought them. The others
            // are fetched, each run of adjacent ones in one GET.
            let cache = lock(&self.blocks);
            let mut in_flight = lock(&self.in_flight);
            let mut runs: Vec<&[IndexEntry]> = Vec::new();
            let mut start = None;
            for (k, b) in blocks.iter().enumerate() {
                let key = (r.object_id, b.position);
                let have = cache.contains(&key) || in_flight.contains_key(&key);
                match (have, start) {
                    (false, None) => start = Some(k),
                    (true, Some(s)) => {
                        runs.push(&blocks[s..k]);
                        start = None;
                    }
                    _ => {}
                }
            }
            if let Some(s) = start {
                runs.push(&blocks[s..]);
            }
            drop(cache);
            runs.into_iter()
                .map(|run| {
                    let len: u64 = run.iter().map(|b| u64::from(b.size)).sum();
                    self.meters.readahead_bytes.add(len);
                    self.start_get_locked(&mut in_flight, r, run, Purpose::Fetch)
                })
                .collect::<Vec<_>>()
        };
        if fetches.is_empty() {
            return;
        }
        tokio::spawn(async move {
            futures::future::join_all(fetches).await;
            drop(permit);
        });
    }

    /// Reads through the ranges (from `known`, then `kept`, then the metadata store); returns
    /// the frames, the last run of ranges it went through, whether it stopped at a block not
    /// cached (unless `wait`), and the bytes of the GET it started for that block.
    #[allow(clippy::too_many_arguments)]
    async fn read_ranges(
        self: &Arc<Self>,
        stream_id: u64,
        from: u64,
        until: u64,
        max_bytes: usize,
        known: &[RangeInfo],
        kept: &[RangeInfo],
        window: u64,
        purpose: Purpose,
        wait: bool,
    ) -> Result<(Vec<Frame>, Vec<RangeInfo>, bool, u64)> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut next = from;
        let mut run = Vec::new();
        // The data of the last GET this read made or waited for: its next blocks come from it
        // (a background read caches nothing, and would GET them again).
        let mut held: Option<Held> = None;
        let mut incomplete = false;
        let mut fetching = 0;
        'ranges: while next < until {
            run = match known_run(known, stream_id, next)
                .or_else(|| known_run(kept, stream_id, next))
            {
                Some(run) => run,
                None => {
                    self.meters.index_lookups.inc();
                    self.meta.ranges(stream_id, next, RANGES_PER_LOOKUP).await?
                }
            };
            if run.is_empty() {
                break;
            }
            self.prefetch_indexes(&run, max_bytes.saturating_sub(bytes))
                .await;
            for r in &run {
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
                // Blocks from `until` on are neither read nor fetched along with the ones
                // before them: a consumer's read stops where the log cache starts, which has
                // them.
                let stop =
                    index.partition_point(|e| (e.stream_id, e.start_offset) < (stream_id, until));
                let index = &index[..stop];
                let first =
                    index.partition_point(|e| (e.stream_id, e.end_offset) <= (stream_id, next));
                let mut i = first;
                while i < index.len() && index[i].stream_id == stream_id {
                    if bytes > 0 && bytes >= max_bytes && purpose != Purpose::Background {
                        // Full: the next block is not fetched (or waited for) only to find that
                        // none of it fits.
                        break 'ranges;
                    }
                    let block = if let Some(b) = held.as_ref().and_then(|h| h.block(r, &index[i])) {
                        b
                    } else if purpose == Purpose::Background && bytes >= max_bytes {
                        // A background read takes whole GETs and stops where a new one would
                        // start: the next read of the run starts its GET there, and nothing is
                        // fetched twice.
                        break 'ranges;
                    } else if wait {
                        let h = self.block(r, index, i, window, purpose).await?;
                        let b = h.block(r, &index[i]).ok_or_else(|| StorageError::Corrupt {
                            key: r.object_key.clone(),
                            reason: "a GET did not hold the block it was made for".into(),
                        })?;
                        held = Some(h);
                        b
                    } else {
                        match self.block_ready(r, index, i, window) {
                            Ok(b) => b,
                            Err(started) => {
                                incomplete = true;
                                fetching = started;
                                break 'ranges;
                            }
                        }
                    };
                    let frames =
                        format::decode_block(&index[i], &block).map_err(|e| corrupt(r, e))?;
                    for f in frames {
                        if f.end_offset() <= next {
                            continue;
                        }
                        // A frame the cleaner of a compacted topic emptied counts for
                        // nothing: the read goes on to one with data.
                        if f.base_offset >= until
                            || (bytes > 0
                                && bytes + f.payload.len() > max_bytes
                                && purpose != Purpose::Background)
                        {
                            break 'ranges;
                        }
                        next = f.end_offset();
                        bytes += f.payload.len();
                        out.push(f);
                    }
                    if purpose == Purpose::Fetch {
                        // Read through: a consumer going on does not come back to it, and the
                        // blocks fetched ahead of it, not read yet, are what the cache is for.
                        lock(&self.blocks).demote(&(r.object_id, index[i].position));
                    }
                    i += 1;
                }
                if next >= until {
                    break 'ranges;
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
        Ok((out, run, incomplete, fetching))
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
            let mut cache = lock(&self.indexes);
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
        if let Some(i) = lock(&self.indexes).get(&r.object_id) {
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
            let mut blocks = lock(&self.blocks);
            for e in index.iter() {
                let (at, end) = (e.position as usize, e.position as usize + e.size as usize);
                if let Some(b) = tail.get(at..end) {
                    let unread = blocks.insert(
                        (r.object_id, e.position),
                        Bytes::copy_from_slice(b),
                        u64::from(e.size),
                    );
                    self.meters.block_cache_evicted_unread_bytes.add(unread);
                }
            }
            self.meters
                .block_cache_bytes
                .store(blocks.bytes(), std::sync::atomic::Ordering::Relaxed);
        }
        let mut cache = lock(&self.indexes);
        cache.insert(r.object_id, Arc::clone(&index), index_cost(&index));
        self.meters
            .object_index_cache_bytes
            .store(cache.bytes(), std::sync::atomic::Ordering::Relaxed);
        Ok(index)
    }

    /// Block `i` of `index`: from the cache, from a GET in flight, or fetched with the blocks
    /// of the same stream after it, up to `window` bytes in one GET; with the rest of what that
    /// GET fetched.
    async fn block(
        self: &Arc<Self>,
        r: &RangeInfo,
        index: &[IndexEntry],
        i: usize,
        window: u64,
        purpose: Purpose,
    ) -> Result<Held> {
        let position = index[i].position;
        if purpose == Purpose::Background {
            // Before the GET is known as in flight: a consumer that needs one of its blocks
            // must not wait out compaction's budget.
            let len = self.missing_len(r, index, i, window);
            if len > 0 {
                self.take_background(len).await;
            }
        }
        let (fetch, start) = match self.find(r, index, i, window, purpose) {
            Found::Cached(data) => {
                return Ok(Held {
                    object_id: r.object_id,
                    start: position,
                    data,
                })
            }
            Found::Coming(w) => {
                self.meters.block_in_flight_hits.inc();
                (w.fetch, position - w.at as u64)
            }
            Found::Started(fetch, _) => (fetch, position),
        };
        let data = fetch.await.map_err(StorageError::Shared)?;
        Ok(Held {
            object_id: r.object_id,
            start,
            data,
        })
    }

    /// Block `i` of `index` if it is cached; if not, starts its GET (with the blocks after it,
    /// as [`Inner::block`] does) unless one is under way, and returns the bytes it started
    /// fetching (0 if none).
    fn block_ready(
        self: &Arc<Self>,
        r: &RangeInfo,
        index: &[IndexEntry],
        i: usize,
        window: u64,
    ) -> std::result::Result<Bytes, u64> {
        match self.find(r, index, i, window, Purpose::Fetch) {
            Found::Cached(b) => Ok(b),
            Found::Coming(_) => Err(0),
            Found::Started(_, bytes) => Err(bytes),
        }
    }

    /// Block `i` of `index` from the cache, or the GET in flight that brings it, or a GET started
    /// for it and the stream's following blocks (adjacent, neither cached nor being fetched, up
    /// to `window` bytes). Looked up and started under the locks of both, so that two reads
    /// missing the same block at once make one GET.
    fn find(
        self: &Arc<Self>,
        r: &RangeInfo,
        index: &[IndexEntry],
        i: usize,
        window: u64,
        purpose: Purpose,
    ) -> Found {
        let key = (r.object_id, index[i].position);
        let mut blocks = lock(&self.blocks);
        if let Some(b) = blocks.get(&key) {
            self.meters.block_cache_hits.inc();
            return Found::Cached(b);
        }
        let mut in_flight = lock(&self.in_flight);
        if let Some(w) = in_flight.get(&key) {
            return Found::Coming(w.clone());
        }
        self.meters.block_cache_misses.inc();
        let j = missing_run(&blocks, &in_flight, r, index, i, window);
        drop(blocks);
        let bytes = index[i..j].iter().map(|e| u64::from(e.size)).sum();
        Found::Started(
            self.start_get_locked(&mut in_flight, r, &index[i..j], purpose),
            bytes,
        )
    }

    /// The bytes a GET for block `i` would fetch now (0 if it is cached or being fetched).
    fn missing_len(&self, r: &RangeInfo, index: &[IndexEntry], i: usize, window: u64) -> u64 {
        let blocks = lock(&self.blocks);
        let in_flight = lock(&self.in_flight);
        let key = (r.object_id, index[i].position);
        if blocks.contains(&key) || in_flight.contains_key(&key) {
            return 0;
        }
        let j = missing_run(&blocks, &in_flight, r, index, i, window);
        index[i..j].iter().map(|e| u64::from(e.size)).sum()
    }

    /// Starts a GET of `blocks` (adjacent, of one object), known in `in_flight` (the locked
    /// map) as in flight for each of them until it is done; it runs to its end even if nobody
    /// waits for it any more. A consumer's GET first takes its bytes from the catch-up budget
    /// (a background read took its own before). Fills the block cache unless it is a
    /// background read's.
    fn start_get_locked(
        self: &Arc<Self>,
        in_flight: &mut HashMap<BlockKey, InFlight>,
        r: &RangeInfo,
        blocks: &[IndexEntry],
        purpose: Purpose,
    ) -> Fetch {
        let start = blocks[0].position;
        let len: u64 = blocks.iter().map(|b| u64::from(b.size)).sum();
        let object_id = r.object_id;
        let key = r.object_key.clone();
        let entries: Vec<(u64, u32)> = blocks.iter().map(|b| (b.position, b.size)).collect();
        let this = Arc::clone(self);
        let registered = entries.clone();
        let fetch = async move {
            // A background read took its budget before (`Inner::block`).
            if purpose != Purpose::Background {
                this.budget.take(len).await;
            }
            let got = match this
                .store
                .get_range(&Path::from(key.as_str()), start..start + len)
                .await
            {
                Ok(data) if data.len() as u64 == len => Ok(data),
                Ok(data) => Err(StorageError::Corrupt {
                    key: key.clone(),
                    reason: format!("short read: {} of {len} bytes", data.len()),
                }),
                Err(e) => Err(StorageError::Object(e)),
            };
            if let Ok(data) = &got {
                if purpose == Purpose::Background {
                    this.meters.background_get_bytes.add(len);
                } else {
                    this.meters.block_cache_fill_bytes.add(len);
                    let mut cache = lock(&this.blocks);
                    for &(position, size) in &entries {
                        let at = (position - start) as usize;
                        let unread = cache.insert(
                            (object_id, position),
                            data.slice(at..at + size as usize),
                            u64::from(size),
                        );
                        this.meters.block_cache_evicted_unread_bytes.add(unread);
                    }
                    this.meters
                        .block_cache_bytes
                        .store(cache.bytes(), std::sync::atomic::Ordering::Relaxed);
                }
            }
            // After the cache is filled: a read that misses the cache and then finds no GET in
            // flight would fetch again.
            let mut in_flight = lock(&this.in_flight);
            for &(position, _) in &entries {
                in_flight.remove(&(object_id, position));
            }
            got.map_err(Arc::new)
        }
        .boxed()
        .shared();
        for &(position, _) in &registered {
            in_flight.insert(
                (object_id, position),
                InFlight {
                    fetch: fetch.clone(),
                    at: (position - start) as usize,
                },
            );
        }
        tokio::spawn(fetch.clone());
        fetch
    }
}

/// The end of the run of blocks from `i` on that one GET of at most `window` bytes fetches:
/// block `i` and the adjacent blocks of the same stream after it, neither cached nor being
/// fetched.
fn missing_run(
    blocks: &Lru<BlockKey, Bytes>,
    in_flight: &HashMap<BlockKey, InFlight>,
    r: &RangeInfo,
    index: &[IndexEntry],
    i: usize,
    window: u64,
) -> usize {
    let mut j = i + 1;
    let mut len = u64::from(index[i].size);
    while j < index.len()
        && index[j].stream_id == index[i].stream_id
        && index[j].position == index[j - 1].position + u64::from(index[j - 1].size)
        && len + u64::from(index[j].size) <= window
        && !blocks.contains(&(r.object_id, index[j].position))
        && !in_flight.contains_key(&(r.object_id, index[j].position))
    {
        len += u64::from(index[j].size);
        j += 1;
    }
    j
}

/// Bytes of an object from `start` on: what a GET fetched, or one cached block.
struct Held {
    object_id: ObjectId,
    start: u64,
    data: Bytes,
}

impl Held {
    /// The block `e` of the range `r`, if this holds it.
    fn block(&self, r: &RangeInfo, e: &IndexEntry) -> Option<Bytes> {
        let end = self.start + self.data.len() as u64;
        (self.object_id == r.object_id
            && e.position >= self.start
            && e.position + u64::from(e.size) <= end)
            .then(|| {
                let at = (e.position - self.start) as usize;
                self.data.slice(at..at + e.size as usize)
            })
    }
}

/// Where a block comes from.
enum Found {
    Cached(Bytes),
    Coming(InFlight),
    /// A GET started, of this many bytes.
    Started(Fetch, u64),
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

    /// An engine on an in-memory store and metadata, with a small WAL in `dir`, that uploads
    /// only when asked (or closed), in blocks of `block_bytes`.
    pub(super) async fn memory_engine(
        dir: &std::path::Path,
        block_bytes: u64,
    ) -> (Engine, Arc<dyn ObjectStore>, Arc<dyn MetaStore>) {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let meta: Arc<dyn MetaStore> =
            Arc::new(weir_meta::SqliteMetaStore::in_memory().expect("meta"));
        let wal = weir_wal::FileWal::open(weir_wal::FileWalConfig {
            capacity: 4 << 20,
            ..weir_wal::FileWalConfig::new(dir.join("wal"))
        })
        .expect("WAL");
        let config = StorageConfig {
            upload_interval: Duration::from_secs(3600),
            block_bytes,
            ..StorageConfig::default()
        };
        let engine = Engine::open(config, Arc::new(wal), Arc::clone(&meta), Arc::clone(&store))
            .await
            .expect("engine");
        (engine, store, meta)
    }

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

    #[test]
    fn lru_evicts_demoted_values_first_and_counts_what_went_unread() {
        let mut lru: Lru<u32, u32> = Lru::new(100);
        for k in 0..3 {
            assert_eq!(lru.insert(k, k, 30), 0);
        }
        // 0 and 1 are read, 2 is not. Reading 1 and 2 makes 0 the least recently used...
        assert!(lru.get(&0).is_some() && lru.get(&1).is_some());
        // ...but 1 and then 0 are demoted: 1 goes first, although 2 was used longest ago.
        lru.demote(&1);
        lru.demote(&0);
        assert_eq!(lru.insert(3, 3, 30), 0, "a read value went");
        assert_eq!(lru.get(&1), None);
        assert_eq!(lru.insert(4, 4, 30), 0, "a read value went");
        assert_eq!(lru.get(&0), None);
        // Now 2 (never read) is the oldest: evicting it is counted.
        assert_eq!(lru.insert(5, 5, 30), 30);
        assert_eq!(lru.get(&2), None);
        // A demoted value that is read again is in use again.
        lru.demote(&3);
        assert!(lru.get(&3).is_some());
        assert_eq!(lru.insert(6, 6, 30), 30, "4, never read, went");
        assert!(lru.get(&3).is_some() && lru.get(&4).is_none());
        lru.demote(&42);
        assert_eq!(lru.bytes(), 90);
    }

    /// Many objects read through a reader whose index cache holds only a few of their indexes:
    /// the cache's bytes never exceed the bound, the most recent index is a hit, an evicted one
    /// is fetched again, and every read returns the right data.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn index_cache_stays_within_its_byte_bound() {
        const STREAMS: u64 = 40;
        const BATCHES: u64 = 12;
        let dir = tempfile::tempdir().expect("tempdir");
        let (engine, store, meta) = memory_engine(dir.path(), 2048).await;
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
            crate::budget::Budget::new(0),
            bound,
        );
        let cached = || meters.object_index_cache_bytes.load(Ordering::Relaxed);
        let mut highest = 0;
        for s in 0..STREAMS {
            let frames = reader
                .read(s, 0, BATCHES, 1 << 20, Purpose::Lookup)
                .await
                .expect("read");
            assert_eq!(frames.len() as u64, BATCHES, "stream {s}");
            for (i, f) in frames.iter().enumerate() {
                assert_eq!(f.base_offset, i as u64);
                assert!(f.payload.iter().all(|b| *b == (s * 31 + i as u64) as u8));
            }
            let now = cached();
            assert!(now <= bound, "index cache at {now} bytes, bound {bound}");
            assert_eq!(now, reader.inner.indexes.lock().expect("lock").bytes());
            highest = highest.max(now);
        }
        assert_eq!(highest, 5 * one, "the cache filled up to what fits");

        // The last object's index is cached (and its blocks too): no GET at all.
        let before = gets.gets.get();
        reader
            .read(STREAMS - 1, 0, BATCHES, 1 << 20, Purpose::Lookup)
            .await
            .expect("read");
        assert_eq!(
            gets.gets.get(),
            before,
            "a cached index and blocks need no GET"
        );
        // The first one's was evicted: its tail is fetched again (its blocks are still cached).
        reader
            .read(0, 0, BATCHES, 1 << 20, Purpose::Lookup)
            .await
            .expect("read");
        assert_eq!(
            gets.gets.get(),
            before + 1,
            "an evicted index is fetched again"
        );
        assert!(cached() <= bound);
        let first = reader.inner.meta.ranges(0, 0, 1).await.expect("ranges")[0].object_id;
        reader.forget(first);
        assert_eq!(cached(), 4 * one, "a deleted object's index is forgotten");
    }
}

/// The read-ahead, GETs shared while in flight, background reads, reads that do not wait, and
/// readers that keep their ranges across a compaction.
#[cfg(test)]
mod readahead_tests {
    use std::time::Duration;

    use super::*;
    use crate::objstore::{FaultConfig, FaultyStore, MeteredStore, ObjectMeters};
    use crate::{Engine, StorageConfig};

    const BLOCK: u64 = 4096;
    const BATCHES: u64 = 64;

    /// One stream (id 1) of `BATCHES` batches of about a block each, in one object.
    async fn written() -> (Arc<dyn ObjectStore>, Arc<dyn MetaStore>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (engine, store, meta) = super::tests::memory_engine(dir.path(), BLOCK).await;
        engine.open_stream(1, 1).await.expect("open");
        for i in 0..BATCHES {
            engine
                .append(1, 1, 1, 0, |_| Bytes::from(vec![i as u8; 4000]))
                .await
                .expect("append");
        }
        engine.close().await.expect("close");
        (store, meta)
    }

    /// A reader over `store` whose GETs each take `latency`, and the store's meters.
    fn reader(
        store: Arc<dyn ObjectStore>,
        meta: Arc<dyn MetaStore>,
        latency: Duration,
    ) -> (ObjectReader, Arc<ObjectMeters>) {
        reader_sized(store, meta, latency, 4 << 20, 64 << 10)
    }

    /// [`reader`] with a block cache of `cache` bytes and windows of at most `readahead_max`.
    fn reader_sized(
        store: Arc<dyn ObjectStore>,
        meta: Arc<dyn MetaStore>,
        latency: Duration,
        cache: u64,
        readahead_max: u64,
    ) -> (ObjectReader, Arc<ObjectMeters>) {
        let slow = FaultyStore::new(
            store,
            FaultConfig {
                latency,
                ..Default::default()
            },
        );
        let metered = MeteredStore::new(Arc::new(slow));
        let gets = metered.meters();
        let reader = ObjectReader::with_index_cache(
            Arc::new(metered),
            meta,
            Arc::new(StorageMeters::default()),
            BLOCK,
            cache,
            readahead_max,
            crate::budget::Budget::new(0),
            crate::budget::Budget::new(0),
            1 << 20,
        );
        (reader, gets)
    }

    fn check(frames: &[Frame], from: u64) {
        for (k, f) in frames.iter().enumerate() {
            let i = from + k as u64;
            assert_eq!(f.base_offset, i);
            assert!(f.payload.iter().all(|b| *b == i as u8), "batch {i}");
        }
    }

    /// A consumer reading on, one block at a time, with time between its reads: once its window
    /// has grown, its blocks were fetched ahead (it waits for no GET), in fewer GETs than
    /// blocks, and nothing is fetched twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sequential_reader_finds_its_next_blocks_fetched_ahead() {
        let (store, meta) = written().await;
        let (reader, gets) = reader(store, meta, Duration::from_millis(20));
        let meters = Arc::clone(&reader.inner.meters);
        let mut next = 0;
        while next < BATCHES {
            let frames = reader
                .read(1, next, BATCHES, 4000, Purpose::Fetch)
                .await
                .expect("read");
            assert!(!frames.is_empty());
            check(&frames, next);
            next = frames.last().map(|f| f.end_offset()).expect("a frame");
            // Time for the read-ahead's GETs (20 ms each) to land, with a wide margin for a
            // loaded machine.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // GETs started by reads rather than by the read-ahead: the first read's block (the one
        // read that waits), and the next block each of the first two reads looked at before the
        // read-ahead began (started, not waited for).
        let misses = meters.block_cache_misses.get();
        assert!(misses <= 3, "{misses} GETs started by reads");
        assert_eq!(
            meters.block_in_flight_hits.get(),
            0,
            "a read waited for a GET"
        );
        assert!(meters.readahead_bytes.get() >= (BATCHES - 4) * 4000);
        assert!(
            gets.gets.get() < BATCHES / 2,
            "{} GETs for {BATCHES} blocks",
            gets.gets.get()
        );
        // The tail GET (index) is up to 64 KiB of the object; the blocks once each.
        let object = BATCHES * 4000;
        assert!(
            gets.get_bytes.get() <= object + TAIL_GUESS + 4096,
            "{} bytes fetched for an object of {object}",
            gets.get_bytes.get()
        );
        assert_eq!(meters.object_read_bytes.get(), BATCHES * 4000);
    }

    /// Two consumer groups reading one stream at different offsets, in turns: each goes on from
    /// where its own last read ended, so both windows grow and both find their next blocks
    /// fetched ahead. With one state per stream, each read looked like a jump after the other
    /// group's, the windows stayed at one block, and every read waited for its own GET.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn readers_at_different_offsets_each_keep_their_read_ahead() {
        let (store, meta) = written().await;
        let (reader, gets) = reader(store, meta, Duration::from_millis(20));
        let meters = Arc::clone(&reader.inner.meters);
        let mut next = [0, BATCHES / 2];
        let end = [BATCHES / 2, BATCHES];
        while next[0] < end[0] || next[1] < end[1] {
            for g in 0..2 {
                if next[g] >= end[g] {
                    continue;
                }
                let frames = reader
                    .read(1, next[g], end[g], 4000, Purpose::Fetch)
                    .await
                    .expect("read");
                assert!(!frames.is_empty());
                check(&frames, next[g]);
                next[g] = frames.last().map(|f| f.end_offset()).expect("a frame");
            }
            // Time for the read-ahead's GETs (20 ms each) to land.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // As for one reader (`a_sequential_reader_finds_its_next_blocks_fetched_ahead`), each
        // group's first reads start GETs of their own; none after.
        let misses = meters.block_cache_misses.get();
        assert!(misses <= 6, "{misses} GETs started by reads");
        assert_eq!(
            meters.block_in_flight_hits.get(),
            0,
            "a read waited for a GET"
        );
        assert!(
            gets.gets.get() < BATCHES * 3 / 4,
            "{} GETs for {BATCHES} blocks",
            gets.gets.get()
        );
        assert_eq!(lock(&reader.inner.readers).streams[&1].len(), 2);
    }

    /// A stream keeps at most `READERS_PER_STREAM` states: a reader beyond them takes the place
    /// of the one that read least recently, and the others go on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reader_beyond_the_states_kept_replaces_the_least_recent() {
        let (store, meta) = written().await;
        let (reader, _gets) = reader(store, meta, Duration::ZERO);
        let inner = &reader.inner;
        let mut ids = Vec::new();
        for k in 0..READERS_PER_STREAM as u64 {
            let (window, _, id) = inner.start_fetch(1, k * 10);
            assert_eq!(window, BLOCK);
            ids.push(id);
            std::thread::sleep(Duration::from_millis(2));
        }
        // The first goes on (its window doubles): now the second is the least recent.
        let (window, _, id) = inner.start_fetch(1, 0);
        assert_eq!((window, id), (2 * BLOCK, ids[0]));
        std::thread::sleep(Duration::from_millis(2));
        let (_, _, newcomer) = inner.start_fetch(1, 55);
        let kept: Vec<u64> = lock(&inner.readers).streams[&1]
            .iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(kept.len(), READERS_PER_STREAM);
        assert!(
            kept.contains(&newcomer) && !kept.contains(&ids[1]),
            "{kept:?}"
        );
        assert!(kept.contains(&ids[0]) && kept.contains(&ids[2]) && kept.contains(&ids[3]));
    }

    /// Two reads of the same block (the stream's last) at once: one GET, the second read waits
    /// for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_of_a_block_being_fetched_wait_for_its_get() {
        let (store, meta) = written().await;
        let (reader, gets) = reader(store, meta, Duration::from_millis(50));
        // The index first, so that both reads go for the block at once.
        let r = reader.inner.meta.ranges(1, 0, 1).await.expect("ranges")[0].clone();
        reader.inner.index(&r).await.expect("index");
        let before = gets.gets.get();
        let (a, b) = tokio::join!(
            reader.read(1, BATCHES - 1, BATCHES, 4000, Purpose::Lookup),
            reader.read(1, BATCHES - 1, BATCHES, 4000, Purpose::Lookup)
        );
        let (a, b) = (a.expect("read"), b.expect("read"));
        assert_eq!(a, b);
        assert_eq!(a.len(), 1);
        check(&a, BATCHES - 1);
        assert_eq!(gets.gets.get() - before, 1, "one GET for both reads");
        assert_eq!(reader.inner.meters.block_in_flight_hits.get(), 1);
    }

    /// A background read uses no cache and leaves the consumers' read-ahead as it was: a
    /// consumer going on after it is still going on (its window keeps growing).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn background_reads_fill_no_cache_and_leave_the_read_ahead_alone() {
        let (store, meta) = written().await;
        let (reader, gets) = reader(store, meta, Duration::ZERO);
        let meters = Arc::clone(&reader.inner.meters);
        let window = |r: &ObjectReader| lock(&r.inner.readers).streams[&1][0].window;
        let mut next = 0;
        for _ in 0..3 {
            let f = reader
                .read(1, next, BATCHES, 4000, Purpose::Fetch)
                .await
                .expect("read");
            next = f.last().map(|f| f.end_offset()).expect("a frame");
        }
        let grown = window(&reader);
        assert!(grown > BLOCK);
        // The read-ahead's GETs land.
        tokio::time::sleep(Duration::from_millis(200)).await;

        let cached = lock(&reader.inner.blocks).bytes();
        let frames = reader
            .read(1, 40, BATCHES, usize::MAX, Purpose::Background)
            .await
            .expect("background read");
        check(&frames, 40);
        assert_eq!(frames.len() as u64, BATCHES - 40);
        assert_eq!(lock(&reader.inner.blocks).bytes(), cached, "cache filled");
        // Each block once: the payload and a frame header per batch.
        let fetched = meters.background_get_bytes.get();
        let payload = (BATCHES - 40) * 4000;
        assert!(
            (payload..payload + (BATCHES - 40) * 64).contains(&fetched),
            "{fetched} bytes fetched for {payload} bytes of payload"
        );
        // Read again, the same blocks are fetched again: they were not cached.
        let before = gets.get_bytes.get();
        reader
            .read(1, 40, BATCHES, usize::MAX, Purpose::Background)
            .await
            .expect("background read");
        assert_eq!(gets.get_bytes.get() - before, fetched);

        let f = reader
            .read(1, next, BATCHES, 4000, Purpose::Fetch)
            .await
            .expect("read");
        check(&f, next);
        assert!(window(&reader) > grown, "the consumer's window was reset");
    }

    /// While a consumer reads from object storage, compaction's bytes cost it (at least) 16 times
    /// their size in its budget; otherwise they cost what they are.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn background_work_yields_to_consumers_reading_from_objects() {
        const RATE: u64 = 16 << 20;
        let (store, meta) = written().await;
        let reader = ObjectReader::with_index_cache(
            store,
            meta,
            Arc::new(StorageMeters::default()),
            BLOCK,
            4 << 20,
            64 << 10,
            crate::budget::Budget::new(0),
            crate::budget::Budget::new(RATE),
            1 << 20,
        );
        // No consumer yet: a second's burst, then bytes at the budget's rate.
        reader.take_background(RATE).await;
        let t = Instant::now();
        reader.take_background(RATE / 32).await;
        let alone = t.elapsed();
        assert!(
            alone < Duration::from_millis(400),
            "{alone:?} without readers"
        );

        reader
            .read(1, 0, BATCHES, 4000, Purpose::Fetch)
            .await
            .expect("read");
        let t = Instant::now();
        reader.take_background(RATE / 32).await;
        let beside = t.elapsed();
        // A 32nd of a second's budget, at a 16th of the budget: half a second at least.
        assert!(
            beside >= Duration::from_millis(450),
            "{beside:?} beside a reader"
        );
    }

    /// A read that does not wait returns nothing when its block is not cached, starts its GET
    /// and says how many bytes it fetches; a read meanwhile starts nothing more; once the GET
    /// is done, the same read finds the block without another GET.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_that_does_not_wait_starts_the_get_and_returns_what_is_cached() {
        let (store, meta) = written().await;
        let (reader, _) = reader(store, meta, Duration::from_millis(30));
        // The stream's last batch: the read has no next block to look at.
        let reader = &reader;
        let read = |wait| async move {
            let r = reader
                .read_with(1, BATCHES - 1, BATCHES, 4000, &[], Purpose::Fetch, wait)
                .await
                .expect("read");
            assert_eq!(r.incomplete, r.frames.is_empty());
            Ok::<_, StorageError>(r)
        };
        let meters = Arc::clone(&reader.inner.meters);
        let first = read(false).await.expect("read");
        assert!(first.frames.is_empty());
        assert_eq!(meters.block_cache_misses.get(), 1, "one GET started");
        assert!(
            (4000..=BLOCK).contains(&first.fetching),
            "the GET of one block: {} bytes",
            first.fetching
        );
        let again = read(false).await.expect("read");
        assert!(again.incomplete);
        assert_eq!(again.fetching, 0, "the GET under way was not this read's");
        assert_eq!(meters.block_cache_misses.get(), 1);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let r = read(false).await.expect("read");
        assert_eq!(r.fetching, 0);
        let frames = r.frames;
        assert_eq!(frames.len(), 1);
        check(&frames, BATCHES - 1);
        assert_eq!(meters.block_cache_misses.get(), 1, "no second GET");
        assert_eq!(meters.block_cache_hits.get(), 1);
    }

    /// A consumer that has read a stream's small ranges (their objects are small: their first
    /// GET brought them whole into the cache) goes on through them after compaction has
    /// replaced them with one object: it fetches nothing again from the new object, and asks
    /// the metadata store nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reader_going_on_keeps_its_ranges_across_a_compaction() {
        let dir = tempfile::tempdir().expect("tempdir");
        let metered = MeteredStore::new(Arc::new(object_store::memory::InMemory::new()));
        let gets = metered.meters();
        let meta: Arc<dyn MetaStore> =
            Arc::new(weir_meta::SqliteMetaStore::open(&dir.path().join("meta.db")).expect("meta"));
        let wal = weir_wal::FileWal::open(weir_wal::FileWalConfig {
            capacity: 4 << 20,
            ..weir_wal::FileWalConfig::new(dir.path().join("wal"))
        })
        .expect("WAL");
        let config = StorageConfig {
            upload_interval: Duration::from_secs(3600),
            block_bytes: BLOCK,
            log_cache_bytes: 0,
            readahead_max_bytes: 1 << 20,
            compaction_min_ranges: 4,
            background_bytes_per_sec: 0,
            ..StorageConfig::default()
        };
        let engine = Engine::open(config, Arc::new(wal), meta, Arc::new(metered))
            .await
            .expect("engine");
        // Two streams, so that each upload is one stream-set object holding a small range of
        // each: ten ranges of stream 1.
        engine.open_stream(1, 1).await.expect("open");
        engine.open_stream(2, 1).await.expect("open");
        for round in 0..10u64 {
            for i in 0..4u64 {
                let n = round * 4 + i;
                for s in [1, 2] {
                    engine
                        .append(s, 1, 1, 0, |_| Bytes::from(vec![n as u8; 4000]))
                        .await
                        .expect("append");
                }
            }
            engine.flush().await.expect("flush");
        }
        let meters = engine.meters();
        let mut next = 0;
        let read = |next: u64| {
            let engine = &engine;
            async move {
                let r = engine.read_with(1, next, 4000, true).await.expect("read");
                check(&r.batches, next);
                r.batches.last().map(|f| f.end_offset()).expect("a batch")
            }
        };
        for _ in 0..6 {
            next = read(next).await;
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        assert!(meters.log_cache_misses.get() >= 6, "reads from objects");
        assert!(engine.compact().await.expect("compact") >= 1);
        let (get_bytes, lookups) = (gets.get_bytes.get(), meters.index_lookups.get());
        while next < 40 {
            next = read(next).await;
        }
        assert_eq!(
            gets.get_bytes.get(),
            get_bytes,
            "read again from the compacted object"
        );
        assert_eq!(meters.index_lookups.get(), lookups);
        engine.close().await.expect("close");
    }

    /// A read that must stop at `until` (where the log cache starts) fetches nothing from there
    /// on: neither the block that starts there nor the ones a GET would take along.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_fetches_nothing_from_where_it_stops() {
        let (store, meta) = written().await;
        let (reader, gets) = reader(store, meta, Duration::ZERO);
        let meters = Arc::clone(&reader.inner.meters);
        const UNTIL: u64 = 20;
        let frames = reader
            .read(1, 0, UNTIL, 1 << 20, Purpose::Fetch)
            .await
            .expect("read");
        check(&frames, 0);
        assert_eq!(frames.len() as u64, UNTIL);
        // Blocks hold one batch each (4,000 bytes and a frame header, blocks of 4 KiB).
        let block = 4000 + format::FRAME_HEADER_LEN as u64;
        assert_eq!(meters.block_cache_fill_bytes.get(), UNTIL * block);
        // Going on, with a larger window: GETs of several blocks, none past the end either.
        let frames = reader
            .read(1, UNTIL, 2 * UNTIL, 1 << 20, Purpose::Fetch)
            .await
            .expect("read");
        check(&frames, UNTIL);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(meters.block_cache_fill_bytes.get(), 2 * UNTIL * block);
        assert!(gets.get_bytes.get() <= 2 * UNTIL * block + TAIL_GUESS);
    }

    /// Two consumers reading on, one of them pausing with blocks fetched ahead of it, while the
    /// other reads many blocks through a small block cache: the blocks the second has read
    /// through go before the first one's blocks that nobody has read yet, which are still
    /// cached when it comes back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocks_read_through_are_evicted_before_blocks_fetched_ahead_and_not_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (engine, store, meta) = super::tests::memory_engine(dir.path(), BLOCK).await;
        for s in [1, 2] {
            engine.open_stream(s, 1).await.expect("open");
            for i in 0..BATCHES {
                engine
                    .append(s, 1, 1, 0, |_| Bytes::from(vec![i as u8; 4000]))
                    .await
                    .expect("append");
            }
        }
        engine.close().await.expect("close");
        // Twelve blocks of cache; windows of at most four blocks.
        let (reader, _) =
            reader_sized(store, meta, Duration::from_millis(1), 12 * BLOCK, 4 * BLOCK);
        let meters = Arc::clone(&reader.inner.meters);
        let read = |s: u64, from: u64| {
            let reader = &reader;
            async move {
                let frames = reader
                    .read(s, from, BATCHES, 4000, Purpose::Fetch)
                    .await
                    .expect("read");
                check(&frames, from);
                // Time for the read-ahead's GETs to land.
                tokio::time::sleep(Duration::from_millis(50)).await;
                frames.last().map(|f| f.end_offset()).expect("a frame")
            }
        };
        // The first consumer reads two blocks: its window grows and blocks after them are
        // fetched ahead.
        let mut next1 = 0;
        while next1 < 2 {
            next1 = read(1, next1).await;
        }
        let ahead = meters.readahead_bytes.get();
        assert!(ahead > 0, "nothing was fetched ahead");
        // The second reads 30 blocks, more than twice the cache.
        let mut next2 = 0;
        while next2 < 30 {
            next2 = read(2, next2).await;
        }
        assert_eq!(
            meters.block_cache_evicted_unread_bytes.get(),
            0,
            "blocks fetched ahead were evicted before they were read"
        );
        // The gauge shows a full cache, within its budget.
        let cached = meters
            .block_cache_bytes
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            cached > 8 * BLOCK && cached <= 12 * BLOCK,
            "the block cache holds {cached} bytes"
        );
        // The first one's blocks are still there: it goes on without a GET of its own.
        let misses = meters.block_cache_misses.get();
        read(1, next1).await;
        assert_eq!(
            meters.block_cache_misses.get(),
            misses,
            "a block was fetched again"
        );
    }
}
