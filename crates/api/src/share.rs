//! Share groups on the partitions this broker leads (KIP-932): the share-partitions
//! ([`weir_share::partition`]) of every share group that fetches here, their states in the
//! metadata store, and the share sessions of the members fetching here.
//!
//! A share-partition lives on its partition's leader: every acquisition and acknowledgement of
//! it is decided there, one request at a time (an async lock per share-partition), and the
//! outcome of every acknowledgement, release and lock expiry is written to the metadata store
//! ([`weir_meta::ShareStates`]) before the request that caused it is answered. The state is
//! claimed with the partition's leader epoch, so a broker that lost the partition can no longer
//! write it; a new leader (after a move, a failover or a restart) loads it and goes on, with
//! every record that was acquired available again and its delivery counted.
//!
//! Share consumers in another zone than the leader fetch from the leader (cross-zone): records
//! are handed to one consumer at a time by one decider, and a zone-local broker would need a
//! round trip to the leader for every acquisition anyway, so it would save no bytes the leader
//! does not already send. Regular consumers keep their zone-local reads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::ResponseError as E;
use weir_meta::{Claim, MetaStore, ShareState};
use weir_partition::Partition;
use weir_share::partition::{AckBatch, AckError, Acquired, Limits, SharePartition};
use weir_share::session::{Part, SessionError, Sessions, Step};

/// The share-partitions' key: group, topic id, partition.
type Key = (String, [u8; 16], i32);

/// A share group's settings (group configs `share.*`, or the broker's defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupConfig {
    pub limits: Limits,
    /// `share.auto.offset.reset`: where a share-partition seen for the first time starts.
    pub auto_offset_reset: OffsetReset,
    /// `share.isolation.level` is `read_committed`.
    pub read_committed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    Latest,
    Earliest,
}

impl Default for ShareGroupConfig {
    fn default() -> Self {
        ShareGroupConfig {
            limits: Limits::default(),
            auto_offset_reset: OffsetReset::Latest,
            read_committed: false,
        }
    }
}

/// One share-partition on this broker: loaded (claimed at `leader_epoch`) or not yet.
#[derive(Default)]
struct Slot {
    sp: Option<SharePartition>,
    leader_epoch: i32,
    /// The topic's name, as the store keys the state.
    topic: String,
}

/// What a fetch of one share-partition got.
#[derive(Debug, Default)]
pub struct Fetched {
    pub acquired: Vec<Acquired>,
    pub records: Bytes,
}

/// Share groups' meters on this broker.
#[derive(Debug, Default)]
pub struct ShareMeters {
    /// Records handed to members (each delivery once).
    pub acquired: weir_metrics::Counter,
    /// Records acknowledged (accepted, released, rejected, or gaps).
    pub acknowledged: weir_metrics::Counter,
    /// Share-partition states written to the metadata store, and how long each took.
    pub state_writes: weir_metrics::Counter,
    pub state_write_latency: weir_metrics::Histogram,
    /// Writes the store refused (a newer leader or a reset came first) or failed.
    pub state_write_failures: weir_metrics::Counter,
}

impl ShareMeters {
    /// Declares the meters, the open share sessions read from `sessions`.
    pub fn register(
        sessions: impl Fn() -> usize + Send + Sync + 'static,
        m: &Self,
        r: &mut weir_metrics::Registry,
    ) {
        r.gauge_read(
            "share_sessions",
            "Share sessions (KIP-932) open on this broker.",
            move || sessions() as u64,
        );
        r.counter(
            "share_records_acquired",
            "Records handed to share group members (each delivery once).",
            &m.acquired,
        );
        r.counter(
            "share_records_acknowledged",
            "Records share group members acknowledged (accepted, released, rejected, gaps).",
            &m.acknowledged,
        );
        r.counter(
            "share_state_writes",
            "Share-partition states written to the metadata store.",
            &m.state_writes,
        );
        r.histogram(
            "share_state_write_seconds",
            "Time to write a share-partition's state to the metadata store (an acknowledgement waits for it).",
            &m.state_write_latency,
        );
        r.counter(
            "share_state_write_failures",
            "Share-partition state writes the metadata store refused (a newer leader or a reset) or failed.",
            &m.state_write_failures,
        );
    }
}

/// What one read of a share fetch asks of the log at most; a fetch reads up to `READ_CHUNKS` of
/// them while it acquires less than the member asked for.
const READ_CHUNK: usize = 1 << 20;
const READ_CHUNKS: usize = 8;

/// Acquires for `member` what it may take of the batches `data` read: the acquired ranges, the
/// bytes of the batches from the first to the last holding acquired records (a slice of what was
/// read, not a copy), and the offset after the last batch read.
fn acquire_from(
    sp: &mut SharePartition,
    member: &Arc<str>,
    data: &weir_partition::FetchData,
    max_records: usize,
    strict: bool,
    now: u64,
) -> (Vec<Acquired>, Bytes, i64) {
    // read_committed: the batches of aborted transactions are archived, never delivered.
    let aborted = |h: &weir_partition::batch::BatchHeader, base: u64| {
        h.is_transactional()
            && !h.is_control()
            && data.aborted.iter().any(|a| {
                a.producer_id == h.producer_id && a.first_offset <= base && base < a.last_offset
            })
    };
    let start = data.records.as_ptr() as usize;
    let batches: Vec<(i64, i64, bool, usize, usize)> =
        weir_partition::batch::batches(&data.records)
            .map(|(h, base, end, bytes)| {
                let at = bytes.as_ptr() as usize - start;
                (
                    base as i64,
                    end as i64 - 1,
                    aborted(&h, base),
                    at,
                    at + bytes.len(),
                )
            })
            .collect();
    let end = batches.last().map_or(0, |b| b.1 + 1);
    let ranges: Vec<(i64, i64, bool)> = batches.iter().map(|b| (b.0, b.1, b.2)).collect();
    let acquired = sp.acquire_mode(member, &ranges, max_records, strict, now);
    let holds = |b: &&(i64, i64, bool, usize, usize)| {
        acquired
            .iter()
            .any(|a| a.first_offset <= b.1 && b.0 <= a.last_offset)
    };
    let first = batches.iter().find(holds).map(|b| b.3);
    let last = batches.iter().rev().find(holds).map(|b| b.4);
    let kept = match (first, last) {
        (Some(f), Some(l)) if f < l => data.records.slice(f..l),
        _ => Bytes::new(),
    };
    (acquired, kept, end)
}

/// See the module documentation.
pub struct ShareService {
    pub meters: ShareMeters,
    meta: Arc<dyn MetaStore>,
    sessions: Mutex<Sessions>,
    slots: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<Slot>>>>,
    configs: crate::group_configs::GroupConfigs,
    clock: Instant,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ShareService {
    /// At most `max_sessions` share sessions at once (`group.share.max.share.sessions`).
    pub fn new(meta: Arc<dyn MetaStore>, max_sessions: usize) -> Arc<Self> {
        Arc::new(ShareService {
            meters: ShareMeters::default(),
            configs: crate::group_configs::GroupConfigs::new(Arc::clone(&meta)),
            meta,
            sessions: Mutex::new(Sessions::new(max_sessions)),
            slots: Mutex::new(HashMap::new()),
            clock: Instant::now(),
        })
    }

    pub fn configs(&self) -> &crate::group_configs::GroupConfigs {
        &self.configs
    }

    fn now_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    /// Share sessions open on this broker.
    pub fn sessions(&self) -> usize {
        lock(&self.sessions).len()
    }

    /// One session step; see [`Sessions::step`].
    pub fn step(
        &self,
        group: &str,
        member: &str,
        epoch: i32,
        conn: u64,
        add: &[Part],
        forget: &[Part],
    ) -> Result<Step, SessionError> {
        lock(&self.sessions).step(group, member, epoch, conn, add, forget)
    }

    /// The sessions of a closed connection end; their members' records are released.
    pub fn disconnected(self: &Arc<Self>, conn: u64) {
        let gone = lock(&self.sessions).disconnected(conn);
        if gone.is_empty() {
            return;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            for (group, member, parts) in gone {
                me.release(&group, &member, &parts).await;
            }
        });
    }

    /// Drops what this broker loaded of `group`'s share-partitions (their states were reset or
    /// deleted): the next request reads them again.
    pub fn forget(&self, group: &str) {
        lock(&self.slots).retain(|(g, _, _), _| g != group);
    }

    /// A member opened a session: the share-partitions loaded here whose state epoch in the
    /// store moved on (AlterShareGroupOffsets through another broker) are read again.
    pub async fn revalidate(&self, group: &str, parts: &[Part]) {
        for &(topic_id, index) in parts {
            let slot = lock(&self.slots)
                .get(&(group.to_string(), topic_id, index))
                .cloned();
            let Some(slot) = slot else { continue };
            let mut slot = slot.lock().await;
            let Some(epoch) = slot.sp.as_ref().map(SharePartition::state_epoch) else {
                continue;
            };
            let topic = slot.topic.clone();
            match self.meta.read_share_state(group, &topic, index).await {
                Ok(Some(s)) if s.state_epoch == epoch => {}
                Ok(_) => slot.sp = None,
                Err(e) => {
                    tracing::warn!(group, topic, index, error = %e, "reading a share state failed")
                }
            }
        }
    }

    fn slot(&self, key: Key) -> Arc<tokio::sync::Mutex<Slot>> {
        Arc::clone(lock(&self.slots).entry(key).or_default())
    }

    /// The share-partition of `group` on `partition`, claimed for its current leader epoch
    /// (loaded from the store, or created at the group's `share.auto.offset.reset`).
    async fn ready<'a>(
        &self,
        slot: &'a mut Slot,
        group: &str,
        topic: &str,
        index: i32,
        partition: &Partition,
        config: &ShareGroupConfig,
    ) -> Result<&'a mut SharePartition, E> {
        let epoch = partition.leader_epoch;
        if slot.sp.is_none() || slot.leader_epoch != epoch {
            let (log_start, hw) = partition.offsets();
            let start = match config.auto_offset_reset {
                OffsetReset::Latest => hw,
                OffsetReset::Earliest => log_start,
            };
            let claim = self
                .meta
                .claim_share_state(group, topic, index, epoch, start)
                .await
                .map_err(|e| {
                    tracing::warn!(group, topic, index, error = %e, "claiming a share-partition failed");
                    E::KafkaStorageError
                })?;
            let state = match claim {
                Claim::Claimed(state) => state,
                Claim::Fenced { .. } => return Err(E::NotLeaderOrFollower),
            };
            let mut sp = SharePartition::load(config.limits, &state);
            sp.move_log_start(log_start);
            slot.sp = Some(sp);
            slot.leader_epoch = epoch;
            slot.topic = topic.to_string();
        }
        let sp = slot.sp.as_mut().ok_or(E::UnknownServerError)?;
        sp.set_limits(config.limits);
        Ok(sp)
    }

    /// Writes a share-partition's state. NOT_LEADER_OR_FOLLOWER when the store refused it (a
    /// newer leader or a reset came first): the caller drops its copy, to be read again.
    async fn write(
        &self,
        group: &str,
        topic: &str,
        index: i32,
        state: &ShareState,
    ) -> Result<(), E> {
        let began = Instant::now();
        let written = self
            .meta
            .write_share_state(group, topic, index, state)
            .await;
        self.meters.state_writes.inc();
        self.meters.state_write_latency.record(began.elapsed());
        if !matches!(written, Ok(true)) {
            self.meters.state_write_failures.inc();
        }
        match written {
            Ok(true) => Ok(()),
            Ok(false) => Err(E::NotLeaderOrFollower),
            Err(e) => {
                tracing::warn!(group, topic, index, error = %e, "writing a share-partition's state failed");
                Err(E::KafkaStorageError)
            }
        }
    }

    /// Acquires records of `partition` for `member`: at most about `max_records` (whole
    /// batches) and `max_bytes` of them.
    #[allow(clippy::too_many_arguments)]
    pub async fn fetch(
        &self,
        group: &str,
        member: &Arc<str>,
        topic: (&str, [u8; 16]),
        partition: &Partition,
        index: i32,
        max_records: usize,
        max_bytes: usize,
        strict: bool,
    ) -> Result<Fetched, E> {
        let config = self.configs.get(group).await;
        let slot = self.slot((group.to_string(), topic.1, index));
        let mut slot = slot.lock().await;
        let now = self.now_ms();
        let (log_start, hw) = partition.offsets();
        let moved = {
            let sp = self
                .ready(&mut slot, group, topic.0, index, partition, &config)
                .await?;
            (sp.expire(now) | sp.move_log_start(log_start)).then(|| sp.to_state())
        };
        if let Some(state) = moved {
            // A lock expired (or the log start moved): written now, as Kafka does, so that a
            // new leader counts the delivery. The change stands even if the write fails, unless
            // the store says another leader (or a reset) took the state over.
            if let Err(E::NotLeaderOrFollower) = self.write(group, topic.0, index, &state).await {
                slot.sp = None;
                return Err(E::NotLeaderOrFollower);
            }
        }
        let Some(sp) = slot.sp.as_mut() else {
            return Ok(Fetched::default());
        };
        let mut from = sp.next_fetch_offset();
        let (mut records_left, mut bytes_left) = (max_records, max_bytes);
        let mut out = Fetched::default();
        let mut chunks: Vec<Bytes> = Vec::new();
        // Read a chunk at a time (the log's batches are acquired whole until `max_records`),
        // and send only the batches that hold acquired records: a member asking for 500
        // records with a 50 MiB fetch size gets about 500 records' bytes, read and sent.
        for _ in 0..READ_CHUNKS {
            if !sp.can_acquire() || from >= hw || records_left == 0 || bytes_left == 0 {
                break;
            }
            let data = partition
                .fetch(from, bytes_left.min(READ_CHUNK), config.read_committed)
                .await?;
            let (acquired, kept, end) = acquire_from(sp, member, &data, records_left, strict, now);
            if end <= from {
                break;
            }
            from = end;
            let n: i64 = acquired
                .iter()
                .map(|a| a.last_offset - a.first_offset + 1)
                .sum();
            records_left = records_left.saturating_sub(n as usize);
            bytes_left = bytes_left.saturating_sub(kept.len());
            self.meters.acquired.add(n as u64);
            if !kept.is_empty() {
                chunks.push(kept);
            }
            out.acquired.extend(acquired);
        }
        out.records = match chunks.len() {
            0 => Bytes::new(),
            1 => chunks.pop().unwrap_or_default(),
            _ => Bytes::from(chunks.concat()),
        };
        Ok(out)
    }

    /// Applies `member`'s acknowledgements of one share-partition and stores the outcome; the
    /// partition's acknowledgement error, if any. Nothing changes unless the store took it.
    /// `renew`: the request said IsRenewAck (v2), so RENEW may be among the types.
    #[allow(clippy::too_many_arguments)]
    pub async fn acknowledge(
        &self,
        group: &str,
        member: &str,
        topic: (&str, [u8; 16]),
        partition: &Partition,
        index: i32,
        batches: &[AckBatch],
        renew: bool,
    ) -> Result<(), (E, String)> {
        let config = self.configs.get(group).await;
        let slot = self.slot((group.to_string(), topic.1, index));
        let mut slot = slot.lock().await;
        let sp = self
            .ready(&mut slot, group, topic.0, index, partition, &config)
            .await
            .map_err(|e| (e, String::new()))?;
        let mut next = sp.clone();
        let now = self.now_ms();
        let changed = next
            .acknowledge_at(member, batches, renew, now)
            .map_err(|e| match e {
                AckError::InvalidRequest(m) => (E::InvalidRequest, m),
                AckError::InvalidRecordState(m) => (E::InvalidRecordState, m),
            })?;
        if changed {
            if let Err(e) = self.write(group, topic.0, index, &next.to_state()).await {
                if e == E::NotLeaderOrFollower {
                    slot.sp = None;
                }
                return Err((e, String::new()));
            }
        }
        let n: i64 = batches
            .iter()
            .map(|b| b.last_offset - b.first_offset + 1)
            .sum();
        self.meters.acknowledged.add(n.max(0) as u64);
        slot.sp = Some(next);
        Ok(())
    }

    /// Releases what `member` holds of `parts` (its session closed) and stores it.
    pub async fn release(&self, group: &str, member: &str, parts: &[Part]) {
        for &(topic_id, index) in parts {
            let slot = lock(&self.slots)
                .get(&(group.to_string(), topic_id, index))
                .cloned();
            let Some(slot) = slot else { continue };
            let mut slot = slot.lock().await;
            let Some(sp) = slot.sp.as_mut() else {
                continue;
            };
            if !sp.release(member) {
                continue;
            }
            let state = sp.to_state();
            // The release stands even if the write fails (as a lock expiry does): the records
            // are offered again at once; the store learns of it with the next write.
            if let Err(E::NotLeaderOrFollower) = self.write(group, &slot.topic, index, &state).await
            {
                slot.sp = None;
            }
        }
    }
}
