//! One share-partition: a share group's view of one topic partition (KIP-932).
//!
//! Records from the share-partition start offset (SPSO) up to the end of what was ever fetched
//! form the in-flight window; each is available, acquired by a member until a deadline,
//! acknowledged or archived, and counts its deliveries. Records below the start offset are done
//! with; records at or past the end were never delivered. The window holds one entry per offset:
//! it is bounded by `max_record_locks` (2,000 by default, at most 10,000), so offsets are cheaper
//! to reason about than Kafka's batches and small enough to scan.
//!
//! The transitions, as Kafka's `SharePartition` makes them:
//!
//! ```text
//! available ──acquire (deliveries + 1)──> acquired ──accept──> acknowledged
//!     ^                                      │ ──reject, gap──> archived
//!     └──release, lock expired, member gone──┘   (archived instead once deliveries reach the limit)
//! ```
//!
//! Acknowledged and archived are final; the start offset moves past them as soon as they lead
//! the window. What is stored ([`SharePartition::to_state`]) is the start offset and every record
//! in the window whose fate or count is not the default; an acquired record is stored as
//! available with its deliveries counted, so that a delivery in progress when a leader changes
//! still counts towards the limit (Kafka stores the count of before the acquisition: a consumer
//! that crashes on a record is then allowed one more delivery than the limit after a failover).

use std::collections::VecDeque;
use std::sync::Arc;

use weir_meta::{DeliveryState, ShareBatch, ShareState};

/// The group's limits, read from its configs (or the broker's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long an acquired record stays locked to its member
    /// (`group.share.record.lock.duration.ms`, 30 s).
    pub lock_ms: u64,
    /// Deliveries after which a released or timed-out record is archived
    /// (`group.share.delivery.count.limit`, 5).
    pub delivery_limit: i16,
    /// The most records in flight, acknowledged ones included
    /// (`group.share.partition.max.record.locks`, 2,000).
    pub max_record_locks: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            lock_ms: 30_000,
            delivery_limit: 5,
            max_record_locks: 2_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Available,
    Acquired { member: Arc<str>, until_ms: u64 },
    Acknowledged,
    Archived,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    state: State,
    deliveries: i16,
}

impl Record {
    fn is_final(&self) -> bool {
        matches!(self.state, State::Acknowledged | State::Archived)
    }
}

/// Records `first_offset..=last_offset` handed to a member, each delivered `delivery_count`
/// times now (ShareFetch's AcquiredRecords).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_count: i16,
}

/// An acknowledgement type of ShareFetch and ShareAcknowledge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckType {
    /// An offset with no record (compacted away, a control record): archived.
    Gap,
    Accept,
    /// To be delivered again (archived at the delivery limit).
    Release,
    Reject,
    /// Keep the record acquired for another lock duration (ShareFetch/ShareAcknowledge v2,
    /// KIP-1222); nothing is stored.
    Renew,
}

impl AckType {
    /// The type of Kafka's code; `None` for codes Kafka does not know.
    pub fn from_code(code: i8) -> Option<Self> {
        match code {
            0 => Some(AckType::Gap),
            1 => Some(AckType::Accept),
            2 => Some(AckType::Release),
            3 => Some(AckType::Reject),
            4 => Some(AckType::Renew),
            _ => None,
        }
    }
}

/// One acknowledgement batch: offsets `first..=last`, with one type for all or one per offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub types: Vec<i8>,
}

/// Why acknowledgements were refused; nothing of the partition's acknowledgements is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckError {
    /// INVALID_REQUEST: the batches are malformed.
    InvalidRequest(String),
    /// INVALID_RECORD_STATE: a record is not acquired by this member.
    InvalidRecordState(String),
}

/// One share-partition's records; see the module's documentation.
#[derive(Debug, Clone)]
pub struct SharePartition {
    limits: Limits,
    state_epoch: i32,
    leader_epoch: i32,
    start: i64,
    /// The records at offsets `start..start + window.len()`.
    window: VecDeque<Record>,
}

impl SharePartition {
    /// The share-partition a stored state describes (claimed by this leader), nothing acquired.
    pub fn load(limits: Limits, stored: &ShareState) -> Self {
        let mut window = VecDeque::new();
        let mut next = stored.start_offset;
        for b in &stored.batches {
            if b.last_offset < next {
                continue;
            }
            for _ in next..b.first_offset {
                window.push_back(Record {
                    state: State::Available,
                    deliveries: 0,
                });
            }
            let state = match b.state {
                DeliveryState::Available => State::Available,
                DeliveryState::Acknowledged => State::Acknowledged,
                DeliveryState::Archived => State::Archived,
            };
            for _ in b.first_offset.max(next)..=b.last_offset {
                window.push_back(Record {
                    state: state.clone(),
                    deliveries: b.delivery_count,
                });
            }
            next = b.last_offset + 1;
        }
        let mut p = SharePartition {
            limits,
            state_epoch: stored.state_epoch,
            leader_epoch: stored.leader_epoch,
            start: stored.start_offset,
            window,
        };
        p.advance();
        p
    }

    /// The state to store: see the module's documentation.
    pub fn to_state(&self) -> ShareState {
        let mut batches: Vec<ShareBatch> = Vec::new();
        for (i, r) in self.window.iter().enumerate() {
            let offset = self.start + i as i64;
            let state = match r.state {
                State::Available | State::Acquired { .. } => DeliveryState::Available,
                State::Acknowledged => DeliveryState::Acknowledged,
                State::Archived => DeliveryState::Archived,
            };
            if state == DeliveryState::Available && r.deliveries == 0 {
                continue;
            }
            match batches.last_mut() {
                Some(b)
                    if b.last_offset + 1 == offset
                        && b.state == state
                        && b.delivery_count == r.deliveries =>
                {
                    b.last_offset = offset;
                }
                _ => batches.push(ShareBatch {
                    first_offset: offset,
                    last_offset: offset,
                    state,
                    delivery_count: r.deliveries,
                }),
            }
        }
        ShareState {
            state_epoch: self.state_epoch,
            leader_epoch: self.leader_epoch,
            start_offset: self.start,
            batches,
        }
    }

    /// The state epoch the state was loaded at (a reset raises it in the store).
    pub fn state_epoch(&self) -> i32 {
        self.state_epoch
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// The share-partition start offset: every record below it is done with.
    pub fn start_offset(&self) -> i64 {
        self.start
    }

    /// One past the last record ever fetched into the window.
    pub fn end_offset(&self) -> i64 {
        self.start + self.window.len() as i64
    }

    /// Records in flight (the window), acknowledged ones included, as Kafka counts them
    /// against `max_record_locks`.
    pub fn in_flight(&self) -> usize {
        self.window.len()
    }

    /// Records acknowledged or archived above the start offset (Kafka's delivery-complete count).
    pub fn completed(&self) -> usize {
        self.window.iter().filter(|r| r.is_final()).count()
    }

    /// Where the next fetch reads: the first available record of the window, or its end.
    pub fn next_fetch_offset(&self) -> i64 {
        let first = self.window.iter().position(|r| r.state == State::Available);
        first.map_or(self.end_offset(), |i| self.start + i as i64)
    }

    /// Whether a fetch could acquire anything: a record of the window is available, or the
    /// window has room for new ones.
    pub fn can_acquire(&self) -> bool {
        self.window.len() < self.limits.max_record_locks
            || self.window.iter().any(|r| r.state == State::Available)
    }

    /// The earliest lock deadline, if any record is acquired.
    pub fn next_deadline(&self) -> Option<u64> {
        self.window
            .iter()
            .filter_map(|r| match r.state {
                State::Acquired { until_ms, .. } => Some(until_ms),
                _ => None,
            })
            .min()
    }

    /// Acquires for `member` what it may take of the log batches read (each `(base offset, last
    /// offset)`, in order, as the log returned them from [`SharePartition::next_fetch_offset`]):
    /// available records of the window, and new records past its end while the window has room.
    /// Whole batches, until `max_records` are acquired (a soft limit: the last batch is taken
    /// whole, as Kafka's batch-optimized mode does). Offsets between batches past the end (no
    /// record in the log: compacted away) are archived as they are passed.
    pub fn acquire(
        &mut self,
        member: &Arc<str>,
        batches: &[(i64, i64)],
        max_records: usize,
        now_ms: u64,
    ) -> Vec<Acquired> {
        let all: Vec<(i64, i64, bool)> = batches.iter().map(|&(b, l)| (b, l, false)).collect();
        self.acquire_skipping(member, &all, max_records, now_ms)
    }

    /// [`SharePartition::acquire`], where batches marked `true` are archived instead of
    /// acquired: a `read_committed` share group's aborted transactions, never to be delivered
    /// (as Kafka's share-partition does with them).
    pub fn acquire_skipping(
        &mut self,
        member: &Arc<str>,
        batches: &[(i64, i64, bool)],
        max_records: usize,
        now_ms: u64,
    ) -> Vec<Acquired> {
        self.acquire_mode(member, batches, max_records, false, now_ms)
    }

    /// [`SharePartition::acquire_skipping`]; with `strict` (ShareFetch v2's record-limit acquire
    /// mode) at most `max_records` records, batches split where the limit falls.
    pub fn acquire_mode(
        &mut self,
        member: &Arc<str>,
        batches: &[(i64, i64, bool)],
        max_records: usize,
        strict: bool,
        now_ms: u64,
    ) -> Vec<Acquired> {
        let until_ms = now_ms.saturating_add(self.limits.lock_ms);
        let mut out: Vec<Acquired> = Vec::new();
        let mut taken = 0usize;
        for &(base, last, skip) in batches {
            if taken >= max_records {
                break;
            }
            if last < self.start || base > last {
                continue;
            }
            let end = self.end_offset();
            if last >= end && self.window.len() >= self.limits.max_record_locks {
                // The window is full: nothing new; what is inside was offered above.
                break;
            }
            while self.end_offset() < base {
                self.window.push_back(Record {
                    state: State::Archived,
                    deliveries: 0,
                });
            }
            for offset in base.max(self.start)..=last {
                let i = (offset - self.start) as usize;
                if i == self.window.len() {
                    self.window.push_back(Record {
                        state: State::Available,
                        deliveries: 0,
                    });
                }
                let r = &mut self.window[i];
                if r.state != State::Available {
                    continue;
                }
                if skip {
                    r.state = State::Archived;
                    continue;
                }
                if strict && taken >= max_records {
                    break;
                }
                r.deliveries = r.deliveries.saturating_add(1);
                r.state = State::Acquired {
                    member: Arc::clone(member),
                    until_ms,
                };
                taken += 1;
                push_range(&mut out, offset, r.deliveries);
            }
        }
        self.advance();
        out
    }

    /// Applies a member's acknowledgements of this partition, all or none: each offset must be
    /// acquired by `member` (offsets below the start offset are skipped: done with already).
    /// Whether anything changed.
    pub fn acknowledge(&mut self, member: &str, batches: &[AckBatch]) -> Result<bool, AckError> {
        self.acknowledge_at(member, batches, false, 0)
    }

    /// [`SharePartition::acknowledge`], where RENEW is allowed (`renew`: the request said
    /// IsRenewAck) and restarts the records' locks at `now_ms`. Whether anything to store changed
    /// (a renewal alone stores nothing).
    pub fn acknowledge_at(
        &mut self,
        member: &str,
        batches: &[AckBatch],
        renew: bool,
        now_ms: u64,
    ) -> Result<bool, AckError> {
        let mut plan: Vec<(usize, AckType)> = Vec::new();
        let mut previous_last = i64::MIN;
        for b in batches {
            let types = validate(b, previous_last)?;
            if !renew && types.contains(&AckType::Renew) {
                return Err(AckError::InvalidRequest(
                    "acknowledge type 4 (renew) needs IsRenewAck".into(),
                ));
            }
            previous_last = b.last_offset;
            for offset in b.first_offset..=b.last_offset {
                if offset < self.start {
                    continue;
                }
                let i = (offset - self.start) as usize;
                let Some(r) = self.window.get(i) else {
                    return Err(AckError::InvalidRequest(format!(
                        "offset {offset} was never acquired (the share-partition ends at {})",
                        self.end_offset()
                    )));
                };
                match &r.state {
                    State::Acquired { member: m, .. } if &**m == member => {}
                    State::Acquired { .. } => {
                        return Err(AckError::InvalidRecordState(format!(
                            "offset {offset} is acquired by another member"
                        )))
                    }
                    _ => {
                        return Err(AckError::InvalidRecordState(format!(
                            "offset {offset} is not acquired"
                        )))
                    }
                }
                let ty = if types.len() == 1 {
                    types[0]
                } else {
                    types[(offset - b.first_offset) as usize]
                };
                plan.push((i, ty));
            }
        }
        let until_ms = now_ms.saturating_add(self.limits.lock_ms);
        let mut stored = false;
        for &(i, ty) in &plan {
            let limit = self.limits.delivery_limit;
            let r = &mut self.window[i];
            r.state = match (ty, &r.state) {
                (AckType::Renew, State::Acquired { member, .. }) => State::Acquired {
                    member: Arc::clone(member),
                    until_ms,
                },
                (AckType::Renew, other) => other.clone(),
                (AckType::Accept, _) => State::Acknowledged,
                (AckType::Gap | AckType::Reject, _) => State::Archived,
                (AckType::Release, _) => back(r.deliveries, limit),
            };
            stored |= ty != AckType::Renew;
        }
        self.advance();
        Ok(stored)
    }

    /// Makes the records whose lock expired by `now_ms` available again (archived at the
    /// delivery limit). Whether any did.
    pub fn expire(&mut self, now_ms: u64) -> bool {
        self.put_back(
            |state| matches!(state, State::Acquired { until_ms, .. } if *until_ms <= now_ms),
        )
    }

    /// Makes every record `member` holds available again (archived at the limit): its share
    /// session closed or its connection went away. Whether it held any.
    pub fn release(&mut self, member: &str) -> bool {
        self.put_back(|state| matches!(state, State::Acquired { member: m, .. } if &**m == member))
    }

    /// The log start offset moved to `log_start` (retention, DeleteRecords): records below it
    /// are gone, so the share-partition starts there at the earliest. Whether it moved.
    pub fn move_log_start(&mut self, log_start: i64) -> bool {
        if log_start <= self.start {
            return false;
        }
        let gone = ((log_start - self.start) as usize).min(self.window.len());
        self.window.drain(..gone);
        self.start = log_start;
        self.advance();
        true
    }

    fn put_back(&mut self, which: impl Fn(&State) -> bool) -> bool {
        let limit = self.limits.delivery_limit;
        let mut changed = false;
        for r in self.window.iter_mut().filter(|r| which(&r.state)) {
            r.state = back(r.deliveries, limit);
            changed = true;
        }
        self.advance();
        changed
    }

    /// Moves the start offset past the final records that lead the window.
    fn advance(&mut self) {
        while self.window.front().is_some_and(Record::is_final) {
            self.window.pop_front();
            self.start += 1;
        }
        debug_assert!(self.window.front().is_none_or(|r| !r.is_final()));
    }
}

/// Where a record goes when it is given back: available, or archived once delivered `limit`
/// times.
fn back(deliveries: i16, limit: i16) -> State {
    if deliveries >= limit {
        State::Archived
    } else {
        State::Available
    }
}

/// Appends `offset`, delivered `count` times, to the ranges (extending the last one if it
/// continues it at the same count).
fn push_range(out: &mut Vec<Acquired>, offset: i64, count: i16) {
    match out.last_mut() {
        Some(a) if a.last_offset + 1 == offset && a.delivery_count == count => {
            a.last_offset = offset;
        }
        _ => out.push(Acquired {
            first_offset: offset,
            last_offset: offset,
            delivery_count: count,
        }),
    }
}

/// Checks one acknowledgement batch as Kafka's `validateAcknowledgementBatches` does; its types.
fn validate(b: &AckBatch, previous_last: i64) -> Result<Vec<AckType>, AckError> {
    let bad = |why: String| Err(AckError::InvalidRequest(why));
    if b.first_offset > b.last_offset {
        return bad(format!(
            "acknowledgement batch {}..={} is empty",
            b.first_offset, b.last_offset
        ));
    }
    if b.first_offset < previous_last {
        return bad(format!(
            "acknowledgement batch at {} overlaps the one before",
            b.first_offset
        ));
    }
    let span = (b.last_offset - b.first_offset) as u64 + 1;
    if b.types.is_empty() || (b.types.len() > 1 && b.types.len() as u64 != span) {
        return bad(format!(
            "acknowledgement batch {}..={} has {} types: one, or one per offset",
            b.first_offset,
            b.last_offset,
            b.types.len()
        ));
    }
    b.types
        .iter()
        .map(|&c| {
            AckType::from_code(c).ok_or_else(|| {
                AckError::InvalidRequest(format!("acknowledge type {c} is not known"))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
