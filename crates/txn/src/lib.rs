//! Weir's transaction coordinator: Kafka transactions (KIP-98) over the metadata store.
//!
//! Each transactional id has one record in the metadata store ([`weir_meta::TxnRecord`]): its
//! producer id and epoch, where its transaction is (Empty, Ongoing, PrepareCommit/Abort,
//! CompleteCommit/Abort), and the partitions and groups it touched. The record is the truth;
//! this coordinator keeps nothing that a restart or another broker could not read back, so a
//! transactional id's coordinator can move to any broker (rendezvous hashing over the serving
//! brokers, as groups) and go on where the last one stopped.
//!
//! How the parts fit:
//!
//! - The Kafka API layer turns InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
//!   DescribeTransactions and ListTransactions into calls on [`TxnCoordinator`], which answers
//!   with Kafka's errors. Requests for one id are serialised on this broker; across brokers,
//!   every write names the version it read, so a coordinator that lost the id learns it
//!   (`NOT_COORDINATOR`) instead of overwriting its successor.
//! - Ending a transaction is two-phase, as in Kafka: the decision (PrepareCommit or
//!   PrepareAbort) is stored first, and EndTxn is answered then; then a marker goes to every
//!   partition of the transaction through the [`MarkerWriter`] (the partition's leader, here or
//!   on another broker); then the record is completed, which in the same database transaction
//!   commits (or drops) the offsets the transaction staged for consumer groups. The producer's
//!   next transaction waits until then: its joins wait for the id's lock here, and on other
//!   brokers re-read a deciding record for a while before asking the client to retry. A
//!   decision once stored is carried out by whoever coordinates the id, even after a crash
//!   between the phases.
//! - A background task aborts transactions that outlive their timeout (bumping the epoch, so
//!   the producer's late writes are fenced), finishes decisions whose coordinator died midway,
//!   and forgets transactional ids idle for `transactional.id.expiration.ms`.
//! - [`ProducerIds`] hands out producer ids in blocks from the metadata store, for idempotent
//!   and transactional producers alike.

mod ids;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kafka_protocol::ResponseError;
use weir_meta::{MetaError, MetaStore, TxnRecord, TxnState};
use weir_metrics::{Counter, Histogram};

pub use ids::ProducerIds;

/// Settings, with Kafka's names and defaults.
#[derive(Debug, Clone)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`: the longest timeout a producer may ask for.
    pub max_timeout_ms: i32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`: how often timed-out
    /// transactions are looked for (Kafka: 10 s; shorter here, the check is one query).
    pub check_interval: Duration,
    /// `transactional.id.expiration.ms`: an id idle this long is forgotten.
    pub id_expiration_ms: i64,
    /// How long ending a transaction keeps trying to write its markers before it answers and
    /// leaves the rest to the background task.
    pub marker_patience: Duration,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            max_timeout_ms: 900_000,
            check_interval: Duration::from_secs(1),
            id_expiration_ms: 7 * 24 * 3600 * 1000,
            marker_patience: Duration::from_secs(10),
        }
    }
}

/// The markers that end one transaction in its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Markers {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
    pub partitions: Vec<(String, i32)>,
}

/// Writes transaction markers to the leaders of partitions.
#[async_trait::async_trait]
pub trait MarkerWriter: Send + Sync + 'static {
    /// One outcome per partition, in order: `Ok` once the marker is durable (or the producer
    /// had nothing open there), else the Kafka error (the coordinator retries the retriable
    /// ones).
    async fn write_markers(&self, markers: Markers) -> Vec<Result<(), ResponseError>>;
}

/// How long one round of marker writes may take before it counts as failed (and is retried).
const MARKER_TIMEOUT: Duration = Duration::from_secs(5);

/// The delays between rounds of marker writes (within `marker_patience`).
const MARKER_RETRY: weir_retry::Backoff =
    weir_retry::Backoff::new(Duration::from_millis(20), Duration::from_millis(500));

/// Says whether this broker coordinates a transactional id.
pub type Ownership = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Transactions started, committed, aborted (by the producer or by its timeout).
#[derive(Debug, Default)]
pub struct TxnMeters {
    pub begun: Counter,
    pub committed: Counter,
    pub aborted: Counter,
    pub timed_out: Counter,
    pub markers: Counter,
    pub add_conflicts: Counter,
    pub join_waits: Counter,
    /// EndTxn from the request to the answer.
    pub end_latency: Histogram,
    /// From a decision stored to its markers written and the transaction completed.
    pub markers_latency: Histogram,
}

impl TxnMeters {
    /// Declares the transaction coordinator's meters.
    pub fn register(&self, r: &mut weir_metrics::Registry) {
        r.counters(
            "transactions",
            "Transactions this broker coordinated, by what happened: begun, committed, aborted (by the producer, a new producer of the id, or a timeout), timed_out.",
            "event",
            &[
                ("begun", &self.begun),
                ("committed", &self.committed),
                ("aborted", &self.aborted),
                ("timed_out", &self.timed_out),
            ],
        );
        r.counter(
            "transaction_markers",
            "Transaction markers written for transactions this broker coordinated.",
            &self.markers,
        );
        r.counter(
            "transaction_add_conflicts",
            "Partitions' joins to their transaction (Transactions V2) that lost a compare-and-set on the transaction's record to another broker and were tried again.",
            &self.add_conflicts,
        );
        r.counter(
            "transaction_join_waits",
            "Partitions' joins to their producer's next transaction (Transactions V2) that waited for the markers of its last one (at most 1 s, then the client retries).",
            &self.join_waits,
        );
        r.histogram(
            "transaction_end",
            "EndTxn requests this broker coordinated, from the request to the answer (once the decision is stored; the markers follow).",
            &self.end_latency,
        );
        r.histogram(
            "transaction_completion",
            "Transactions this broker ended, from the decision stored to every marker written and the transaction completed; the producer's next transaction waits for this.",
            &self.markers_latency,
        );
    }
}

pub struct TxnCoordinator {
    meta: Arc<dyn MetaStore>,
    config: TxnConfig,
    pub ids: ProducerIds,
    owns: RwLock<Ownership>,
    writer: OnceLock<Weak<dyn MarkerWriter>>,
    /// Serialises the requests for one id on this broker.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    pub meters: TxnMeters,
    /// Wakes the background check when this broker saves an open or ending transaction: with
    /// none open anywhere, the check reads the records only every `IDLE_CHECK_EVERY`.
    wake: Arc<tokio::sync::Notify>,
}

/// How often the background check reads the transaction records while its last read found none
/// open or ending (Kafka's cleanup interval): expired ids, and open transactions of a broker
/// that failed before it saved anything here.
const IDLE_CHECK_EVERY: Duration = Duration::from_secs(10);

/// How many times a partition's join to its transaction is tried when other brokers' joins
/// keep winning the record's compare-and-set (one per leader of its partitions at most).
const IMPLICIT_ADD_ATTEMPTS: usize = 4;

/// How long a partition's join to a transaction (Transactions V2) waits for the markers of the
/// producer's last transaction, written by its coordinator on another broker, before asking the
/// client to retry (Kafka's leaders retry such joins for `add.partitions.to.txn.retry.backoff.max.ms`).
pub const JOIN_PATIENCE: Duration = Duration::from_secs(1);

/// The delays between reads of the record while a join waits for the markers.
const JOIN_RETRY: weir_retry::Backoff =
    weir_retry::Backoff::new(Duration::from_millis(2), Duration::from_millis(50));

/// A transaction the background check must watch: open (it may time out) or ending (its
/// markers may need writing).
fn open_or_ending(r: &TxnRecord) -> bool {
    r.state == TxnState::Ongoing || r.state.is_preparing()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The Kafka error for a metadata store failure: another coordinator wrote the record (this
/// one is stale), or the store is unreachable (retriable).
fn store_error(e: MetaError) -> ResponseError {
    match e {
        MetaError::TxnConflict(_) => ResponseError::NotCoordinator,
        e => {
            tracing::warn!(error = %e, "transaction state: metadata store failed");
            ResponseError::CoordinatorNotAvailable
        }
    }
}

impl TxnCoordinator {
    pub fn new(meta: Arc<dyn MetaStore>, config: TxnConfig) -> Arc<TxnCoordinator> {
        Arc::new(TxnCoordinator {
            ids: ProducerIds::new(Arc::clone(&meta)),
            meta,
            config,
            owns: RwLock::new(Arc::new(|_: &str| true)),
            writer: OnceLock::new(),
            locks: Mutex::new(HashMap::new()),
            meters: TxnMeters::default(),
            wake: Arc::new(tokio::sync::Notify::new()),
        })
    }

    /// Which ids this broker coordinates (by default all of them).
    pub fn set_ownership(&self, owns: Ownership) {
        *self.owns.write().unwrap_or_else(|e| e.into_inner()) = owns;
    }

    /// Where markers go; set once the broker exists.
    pub fn set_marker_writer(&self, writer: Weak<dyn MarkerWriter>) {
        let _ = self.writer.set(writer);
    }

    pub fn owns(&self, id: &str) -> bool {
        let owns = Arc::clone(&self.owns.read().unwrap_or_else(|e| e.into_inner()));
        owns(id)
    }

    async fn lock(&self, id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let m = {
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            if locks.len() > 1024 {
                locks.retain(|_, m| Arc::strong_count(m) > 1);
            }
            Arc::clone(locks.entry(id.to_string()).or_default())
        };
        m.lock_owned().await
    }

    /// Checks that this broker coordinates `id`, and takes its lock.
    async fn enter(&self, id: &str) -> Result<tokio::sync::OwnedMutexGuard<()>, ResponseError> {
        if id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        if !self.owns(id) {
            return Err(ResponseError::NotCoordinator);
        }
        Ok(self.lock(id).await)
    }

    async fn load(&self, id: &str) -> Result<Option<TxnRecord>, ResponseError> {
        self.meta.load_transaction(id).await.map_err(store_error)
    }

    /// The record of `id`, which producer `pid` at `epoch` must own.
    async fn load_for(&self, id: &str, pid: i64, epoch: i16) -> Result<TxnRecord, ResponseError> {
        let r = self
            .load(id)
            .await?
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        if r.next_producer_id == pid && r.state.is_preparing() {
            // Told its next producer id while the markers of its last transaction (under the
            // old id) are still being written: it retries until they are.
            return Err(ResponseError::ConcurrentTransactions);
        }
        if r.producer_id != pid {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        if r.producer_epoch != epoch {
            return Err(ResponseError::ProducerFenced);
        }
        Ok(r)
    }

    async fn save(&self, r: &mut TxnRecord) -> Result<(), ResponseError> {
        r.update_ms = now_ms();
        r.version = self.meta.save_transaction(r).await.map_err(store_error)?;
        if open_or_ending(r) {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// InitProducerId with a transactional id: the producer's id and a new epoch, which fences
    /// every older producer of the id. An open transaction of the id is aborted first (the
    /// answer is then CONCURRENT_TRANSACTIONS and the client asks again, as with Kafka).
    /// `expected`: the id and epoch the client already has (KIP-360), if any.
    pub async fn init_producer_id(
        &self,
        id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), ResponseError> {
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err(ResponseError::InvalidTransactionTimeout);
        }
        let _guard = self.enter(id).await?;
        let Some(mut r) = self.load(id).await? else {
            let pid = self
                .ids
                .next()
                .await
                .map_err(|_| ResponseError::CoordinatorNotAvailable)?;
            let mut r = TxnRecord {
                transactional_id: id.to_string(),
                producer_id: pid,
                producer_epoch: 0,
                last_producer_id: -1,
                last_producer_epoch: -1,
                state: TxnState::Empty,
                timeout_ms,
                start_ms: -1,
                update_ms: 0,
                partitions: vec![],
                groups: vec![],
                next_producer_id: -1,
                version: 0,
            };
            self.save(&mut r).await?;
            return Ok((pid, 0));
        };
        if let Some((pid, epoch)) = expected {
            let is_last = (pid, epoch) == (r.last_producer_id, r.last_producer_epoch);
            if is_last && r.state == TxnState::Empty {
                // A retry of the InitProducerId that made the current epoch.
                return Ok((r.producer_id, r.producer_epoch));
            }
            if !is_last && (pid, epoch) != (r.producer_id, r.producer_epoch) {
                return Err(ResponseError::ProducerFenced);
            }
        }
        match r.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                return Err(ResponseError::ConcurrentTransactions)
            }
            TxnState::Ongoing => {
                // Fence the producer of the open transaction and abort it; the client retries
                // and then gets an epoch of its own (this one is only the markers'). Only a
                // client that named its epoch may later be answered as a retry (KIP-360).
                (r.last_producer_id, r.last_producer_epoch) = match expected {
                    Some(_) => (r.producer_id, r.producer_epoch),
                    None => (-1, -1),
                };
                bump_epoch(&mut r);
                r.state = TxnState::PrepareAbort;
                self.save(&mut r).await?;
                self.meters.aborted.inc();
                tracing::info!(
                    transactional_id = id,
                    producer_id = r.producer_id,
                    epoch = r.producer_epoch,
                    "a new producer fenced an open transaction: aborting it"
                );
                if let Err(e) = self.complete(r).await {
                    tracing::debug!(transactional_id = id, error = %e, "aborting the fenced transaction goes on in the background");
                }
                return Err(ResponseError::ConcurrentTransactions);
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {}
        }
        let (last_pid, last_epoch) = (r.producer_id, r.producer_epoch);
        if r.producer_epoch >= i16::MAX - 1 {
            r.producer_id = self
                .ids
                .next()
                .await
                .map_err(|_| ResponseError::CoordinatorNotAvailable)?;
            r.producer_epoch = 0;
        } else {
            r.producer_epoch += 1;
        }
        // As Kafka: the previous epoch is kept only for a client that named it, so that its
        // retry gets the same answer; a new producer (no epoch) leaves none, and a zombie that
        // asks with the old epoch is fenced.
        (r.last_producer_id, r.last_producer_epoch) = match expected {
            Some(_) => (last_pid, last_epoch),
            None => (-1, -1),
        };
        r.state = TxnState::Empty;
        r.timeout_ms = timeout_ms;
        r.partitions.clear();
        r.groups.clear();
        r.start_ms = -1;
        self.save(&mut r).await?;
        Ok((r.producer_id, r.producer_epoch))
    }

    /// Opens the transaction (if it is not) and adds `partitions` and `group` to it.
    async fn add(
        &self,
        id: &str,
        pid: i64,
        epoch: i16,
        partitions: &[(String, i32)],
        group: Option<&str>,
    ) -> Result<(), ResponseError> {
        let _guard = self.enter(id).await?;
        self.add_locked(id, pid, epoch, partitions, group).await
    }

    /// Transactions V2 (KIP-890 part 2): a produce (v12+) or a TxnOffsetCommit (v5+) adds its
    /// partitions or group to the transaction itself, on whichever broker it arrives; the
    /// client sends no AddPartitionsToTxn or AddOffsetsToTxn. Any broker may do this: the
    /// write is a compare-and-set on the record's version, so it cannot overwrite what the
    /// coordinator decided meanwhile (it fails, and the client retries), and the epoch the
    /// coordinator bumps at every EndTxn keeps a late write of an ended transaction out.
    pub async fn add_implicitly(
        &self,
        id: &str,
        pid: i64,
        epoch: i16,
        partitions: &[(String, i32)],
        group: Option<&str>,
    ) -> Result<(), ResponseError> {
        if id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        let _guard = self.lock(id).await;
        // The leaders of a transaction's partitions add them at once when its first batches
        // arrive, each with a compare-and-set on the record: a lost race is read again and
        // tried again here rather than answered, which would cost the client a retry. So is a
        // record whose last transaction's markers are still being written (by its coordinator,
        // on another broker: here its lock would have held this join until they were).
        let mut attempts = 1;
        let deadline = tokio::time::Instant::now() + JOIN_PATIENCE;
        let mut delays = JOIN_RETRY.delays();
        let mut waited = false;
        loop {
            match self.add_locked(id, pid, epoch, partitions, group).await {
                Err(ResponseError::NotCoordinator) if attempts < IMPLICIT_ADD_ATTEMPTS => {
                    attempts += 1;
                    self.meters.add_conflicts.inc();
                }
                Err(ResponseError::ConcurrentTransactions)
                    if tokio::time::Instant::now() < deadline =>
                {
                    if !std::mem::replace(&mut waited, true) {
                        self.meters.join_waits.inc();
                    }
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    tokio::time::sleep(delays.next_delay().min(left)).await;
                }
                // Still losing to other brokers' writes: the client retries.
                Err(ResponseError::NotCoordinator) => {
                    return Err(ResponseError::ConcurrentTransactions)
                }
                other => return other,
            }
        }
    }

    async fn add_locked(
        &self,
        id: &str,
        pid: i64,
        epoch: i16,
        partitions: &[(String, i32)],
        group: Option<&str>,
    ) -> Result<(), ResponseError> {
        let mut r = self.load_for(id, pid, epoch).await?;
        match r.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                return Err(ResponseError::ConcurrentTransactions)
            }
            TxnState::Ongoing => {
                let known = partitions.iter().all(|p| r.partitions.contains(p))
                    && group.is_none_or(|g| r.groups.iter().any(|x| x == g));
                if known {
                    return Ok(());
                }
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                r.state = TxnState::Ongoing;
                r.start_ms = now_ms();
                r.partitions.clear();
                r.groups.clear();
                self.meters.begun.inc();
            }
        }
        for p in partitions {
            if !r.partitions.contains(p) {
                r.partitions.push(p.clone());
            }
        }
        if let Some(g) = group {
            if !r.groups.iter().any(|x| x == g) {
                r.groups.push(g.to_string());
            }
        }
        self.save(&mut r).await
    }

    /// AddPartitionsToTxn.
    pub async fn add_partitions(
        &self,
        id: &str,
        pid: i64,
        epoch: i16,
        partitions: &[(String, i32)],
    ) -> Result<(), ResponseError> {
        self.add(id, pid, epoch, partitions, None).await
    }

    /// AddPartitionsToTxn with `verify_only` (KIP-890): whether each partition is in the open
    /// transaction of `pid` at `epoch`.
    pub async fn verify_partitions(
        &self,
        id: &str,
        pid: i64,
        epoch: i16,
        partitions: &[(String, i32)],
    ) -> Result<Vec<bool>, ResponseError> {
        let r = self.load_for(id, pid, epoch).await?;
        Ok(partitions
            .iter()
            .map(|p| r.state == TxnState::Ongoing && r.partitions.contains(p))
            .collect())
    }

    /// AddOffsetsToTxn.
    pub async fn add_offsets(
        &self,
        id: &str,
        pid: i64,
        epoch: i16,
        group: &str,
    ) -> Result<(), ResponseError> {
        self.add(id, pid, epoch, &[], Some(group)).await
    }

    /// EndTxn: stores the decision and answers; the markers are written and the transaction
    /// completed after the answer, under the id's lock (as Kafka answers once PrepareCommit is
    /// in its log). A retry of a decision already made answers as the first did. `v2` (EndTxn v5+, Transactions V2):
    /// the decision bumps the producer's epoch, the markers carry the new one, and the answer
    /// is the producer id and epoch the client goes on with; otherwise the answer is the ones
    /// it sent.
    pub async fn end_txn(
        self: &Arc<Self>,
        id: &str,
        pid: i64,
        epoch: i16,
        commit: bool,
        v2: bool,
    ) -> Result<(i64, i16), ResponseError> {
        let began = std::time::Instant::now();
        let answer = self.end(id, pid, epoch, commit, v2).await;
        self.meters.end_latency.record(began.elapsed());
        answer
    }

    async fn end(
        self: &Arc<Self>,
        id: &str,
        pid: i64,
        epoch: i16,
        commit: bool,
        v2: bool,
    ) -> Result<(i64, i16), ResponseError> {
        let guard = self.enter(id).await?;
        let mut r = self
            .load(id)
            .await?
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        let same = |r: &TxnRecord| {
            matches!(
                (r.state, commit),
                (TxnState::CompleteCommit, true)
                    | (TxnState::CompleteAbort, false)
                    | (TxnState::PrepareCommit, true)
                    | (TxnState::PrepareAbort, false)
            )
        };
        if v2 && r.state != TxnState::Ongoing && r.state != TxnState::Empty {
            // A retry of the EndTxn that bumped the epoch (or moved to a new producer id when
            // the epochs ran out) is answered as the first one was.
            // Only the bump of an EndTxn counts: a fence (a new producer of the id, or a
            // timeout) also moves the epoch by one, and its victim must stay fenced.
            let retry = (r.producer_id == pid
                && r.producer_epoch == epoch.wrapping_add(1)
                && (r.last_producer_id, r.last_producer_epoch) == (pid, epoch))
                || (r.last_producer_id == pid && r.producer_epoch == 0 && epoch == i16::MAX - 1);
            if retry {
                return match r.state {
                    TxnState::CompleteCommit | TxnState::CompleteAbort if same(&r) => {
                        Ok((r.producer_id, r.producer_epoch))
                    }
                    s if s.is_preparing() && same(&r) => Err(ResponseError::ConcurrentTransactions),
                    _ => Err(ResponseError::InvalidTxnState),
                };
            }
        }
        if r.producer_id != pid {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        if r.producer_epoch != epoch {
            return Err(ResponseError::ProducerFenced);
        }
        match (r.state, commit) {
            (TxnState::Ongoing, _) => {}
            (TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort, false) if v2 => {
                // An abort with nothing added: the client wrote nothing that reached a
                // partition (every write adds its partition first). Only the epoch moves on, so
                // that anything of this transaction still on its way is refused.
                r.partitions.clear();
                r.groups.clear();
                self.bump_for_next(&mut r).await?;
                r.state = TxnState::CompleteAbort;
                move_to_next_id(&mut r);
                self.save(&mut r).await?;
                return Ok((r.producer_id, r.producer_epoch));
            }
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
                return Ok((pid, epoch))
            }
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                return Err(ResponseError::ConcurrentTransactions)
            }
            _ => return Err(ResponseError::InvalidTxnState),
        }
        r.state = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        if v2 {
            self.bump_for_next(&mut r).await?;
        }
        self.save(&mut r).await?;
        if commit {
            self.meters.committed.inc();
        } else {
            self.meters.aborted.inc();
        }
        // What the client goes on with: the bumped epoch, or the next producer id once the
        // markers are written (a retry gets it from the record then).
        let answer = if r.next_producer_id >= 0 {
            (r.next_producer_id, 0)
        } else {
            (r.producer_id, r.producer_epoch)
        };
        // The decision is stored: it stands, whatever happens to the markers from here on,
        // and the client need not wait for them (they queue behind its partitions' data).
        self.complete_later(guard, r);
        Ok(answer)
    }

    /// Writes the markers of a stored decision and completes it, holding the id's lock
    /// (`guard`) until then: this broker's requests for the id, the producer's next
    /// transaction's among them, wait for it. A failure leaves the decision to the background
    /// check.
    fn complete_later(self: &Arc<Self>, guard: tokio::sync::OwnedMutexGuard<()>, r: TxnRecord) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let _guard = guard;
            let began = std::time::Instant::now();
            let id = r.transactional_id.clone();
            match this.complete(r).await {
                Ok(_) => this.meters.markers_latency.record(began.elapsed()),
                Err(e) => {
                    tracing::info!(transactional_id = %id, error = %e, "the transaction is decided; the background check will finish its markers");
                }
            }
        });
    }

    /// Transactions V2: the epoch the markers of a decided transaction carry, one above the
    /// producer's, so that its late writes are refused; when that uses up the id's epochs, the
    /// producer goes on under a new id once the transaction completes.
    async fn bump_for_next(&self, r: &mut TxnRecord) -> Result<(), ResponseError> {
        if r.producer_epoch >= i16::MAX - 1 {
            r.next_producer_id = self
                .ids
                .next()
                .await
                .map_err(|_| ResponseError::CoordinatorNotAvailable)?;
        }
        r.last_producer_id = r.producer_id;
        r.last_producer_epoch = r.producer_epoch;
        r.producer_epoch = r.producer_epoch.saturating_add(1);
        Ok(())
    }

    /// Writes the markers of a decided transaction and completes it.
    async fn complete(&self, mut r: TxnRecord) -> Result<TxnRecord, ResponseError> {
        debug_assert!(
            r.state.is_preparing(),
            "only a decided transaction completes"
        );
        let commit = r.state == TxnState::PrepareCommit;
        let writer = self
            .writer
            .get()
            .and_then(Weak::upgrade)
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let deadline = tokio::time::Instant::now() + self.config.marker_patience;
        let mut pending = r.partitions.clone();
        let mut delays = MARKER_RETRY.delays();
        let mut first = true;
        while !pending.is_empty() {
            if !std::mem::take(&mut first) {
                // Another coordinator may have finished this decision meanwhile (the id moved):
                // its markers must not be followed by this one's late retries, which could end
                // the producer's next transaction.
                match self.meta.load_transaction(&r.transactional_id).await {
                    Ok(Some(now)) if now.version == r.version => {}
                    Ok(_) => return Err(ResponseError::NotCoordinator),
                    Err(e) => return Err(store_error(e)),
                }
            }
            let markers = Markers {
                producer_id: r.producer_id,
                producer_epoch: r.producer_epoch,
                commit,
                coordinator_epoch: (r.version & 0x7fff_ffff) as i32,
                partitions: pending.clone(),
            };
            // A leader that does not answer must not hold the id's lock for ever.
            let n = markers.partitions.len();
            let results = tokio::time::timeout(MARKER_TIMEOUT, writer.write_markers(markers))
                .await
                .unwrap_or_else(|_| vec![Err(ResponseError::RequestTimedOut); n]);
            let mut left = Vec::new();
            for (p, result) in pending.into_iter().zip(results) {
                match result {
                    Ok(()) => self.meters.markers.inc(),
                    // The partition is gone, or a newer epoch of the producer ended what it had
                    // there: nothing of this transaction is left open in it.
                    Err(
                        ResponseError::UnknownTopicOrPartition
                        | ResponseError::InvalidProducerEpoch
                        | ResponseError::ProducerFenced,
                    ) => {}
                    Err(e) => {
                        tracing::debug!(transactional_id = %r.transactional_id, topic = %p.0, partition = p.1, error = %e, "writing a marker failed; retrying");
                        left.push(p);
                    }
                }
            }
            pending = left;
            if pending.is_empty() {
                break;
            }
            let delay = delays.next_delay();
            if tokio::time::Instant::now() + delay > deadline {
                return Err(ResponseError::CoordinatorLoadInProgress);
            }
            tokio::time::sleep(delay).await;
        }
        r.state = if commit {
            TxnState::CompleteCommit
        } else {
            TxnState::CompleteAbort
        };
        move_to_next_id(&mut r);
        r.update_ms = now_ms();
        r.version = self
            .meta
            .complete_transaction(&r, commit)
            .await
            .map_err(store_error)?;
        Ok(r)
    }

    /// The record of `id` (DescribeTransactions).
    pub async fn describe(&self, id: &str) -> Result<TxnRecord, ResponseError> {
        if !self.owns(id) {
            return Err(ResponseError::NotCoordinator);
        }
        self.load(id)
            .await?
            .ok_or(ResponseError::TransactionalIdNotFound)
    }

    /// The ids this broker coordinates (ListTransactions: the admin client asks every broker).
    pub async fn list(&self) -> Result<Vec<TxnRecord>, ResponseError> {
        let all = self.meta.list_transactions().await.map_err(store_error)?;
        Ok(all
            .into_iter()
            .filter(|r| self.owns(&r.transactional_id))
            .collect())
    }

    /// Starts the background task: timeouts, unfinished decisions, expired ids. It checks every
    /// `check_interval` while a transaction is open or ending anywhere, and otherwise every
    /// `IDLE_CHECK_EVERY` or when this broker opens one.
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let this = Arc::downgrade(self);
        let interval = self.config.check_interval;
        let wake = Arc::clone(&self.wake);
        tokio::spawn(async move {
            let mut busy = true;
            loop {
                if busy {
                    tokio::time::sleep(interval).await;
                } else {
                    tokio::select! {
                        () = wake.notified() => {}
                        () = tokio::time::sleep(IDLE_CHECK_EVERY) => {}
                    }
                }
                let Some(this) = this.upgrade() else { return };
                busy = match this.check().await {
                    Ok(busy) => busy,
                    Err(e) => {
                        tracing::debug!(error = %e, "transaction check failed; trying again");
                        true
                    }
                };
            }
        })
    }

    /// One round of the background task; whether any transaction is open or ending.
    pub async fn check(&self) -> Result<bool, MetaError> {
        let now = now_ms();
        let mut busy = false;
        for r in self.meta.list_transactions().await? {
            busy |= open_or_ending(&r);
            if !self.owns(&r.transactional_id) {
                continue;
            }
            // One id's trouble (a conflict with another coordinator, a failing leader) must not
            // hold up the others.
            if let Err(e) = self.check_one(r, now).await {
                tracing::debug!(error = %e, "checking a transaction failed; trying again");
            }
        }
        Ok(busy)
    }

    /// [`TxnCoordinator::check`] of one record.
    async fn check_one(&self, r: TxnRecord, now: i64) -> Result<(), MetaError> {
        let stuck_after = 2 * self.config.check_interval.as_millis() as i64;
        {
            let timed_out =
                r.state == TxnState::Ongoing && now - r.start_ms > i64::from(r.timeout_ms);
            let stuck = r.state.is_preparing() && now - r.update_ms > stuck_after;
            let expired = matches!(
                r.state,
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            ) && now - r.update_ms > self.config.id_expiration_ms;
            if !(timed_out || stuck || expired) {
                return Ok(());
            }
            let id = r.transactional_id.clone();
            let _guard = self.lock(&id).await;
            // Read again under the lock: a request may have moved it on.
            let Some(mut r) = self.meta.load_transaction(&id).await? else {
                return Ok(());
            };
            if expired && r.state != TxnState::Ongoing && !r.state.is_preparing() {
                tracing::info!(transactional_id = %id, "transactional id expired");
                self.meta.delete_transaction(&id, r.version).await?;
                return Ok(());
            }
            if r.state == TxnState::Ongoing && now - r.start_ms > i64::from(r.timeout_ms) {
                // Kafka's timeout: fence the producer (its late writes are refused) and abort.
                bump_epoch(&mut r);
                r.state = TxnState::PrepareAbort;
                r.update_ms = now_ms();
                r.version = self.meta.save_transaction(&r).await?;
                self.meters.timed_out.inc();
                self.meters.aborted.inc();
                tracing::info!(transactional_id = %id, producer_id = r.producer_id, timeout_ms = r.timeout_ms, "transaction timed out: aborting it");
            }
            if r.state.is_preparing() {
                if let Err(e) = self.complete(r).await {
                    tracing::debug!(transactional_id = %id, error = %e, "completing a transaction failed; trying again");
                }
            }
        }
        Ok(())
    }
}

/// Transactions V2: once a transaction whose epoch bump used up its id's epochs has ended, the
/// producer goes on under the next id (the markers carried the old id's last epoch).
fn move_to_next_id(r: &mut TxnRecord) {
    if r.next_producer_id >= 0 {
        r.last_producer_id = r.producer_id;
        r.last_producer_epoch = r.producer_epoch;
        r.producer_id = std::mem::replace(&mut r.next_producer_id, -1);
        r.producer_epoch = 0;
    }
}

/// A fencing epoch bump (a new producer of the id, or a timeout): the old producer's requests
/// and late writes are refused from here on. Up to `i16::MAX`, which no producer is ever given
/// (the id moves on at `i16::MAX - 1`), so the bump always fences, as Kafka's does; under
/// Transactions V2 every producer id reaches `i16::MAX - 1` once.
fn bump_epoch(r: &mut TxnRecord) {
    r.producer_epoch = r.producer_epoch.saturating_add(1);
}

#[cfg(test)]
mod tests;
