//! Weir's group coordinator: Kafka's classic group protocol, its consumer group protocol
//! (KIP-848), share groups (KIP-932, [`share`]) and streams groups (KIP-1071, [`streams`]), and
//! the groups' committed offsets.
//!
//! The Kafka API layer hands each group request (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! ConsumerGroupHeartbeat, ConsumerGroupDescribe, ShareGroupHeartbeat, ShareGroupDescribe,
//! StreamsGroupHeartbeat, StreamsGroupDescribe, OffsetCommit, OffsetFetch, DescribeGroups,
//! ListGroups, DeleteGroups, OffsetDelete), already decoded, to [`GroupCoordinator`] and gets
//! the response back filled for the request's version.
//!
//! How the parts fit:
//!
//! - [`consumer`] holds one consumer group (KIP-848): epochs, the target assignment computed by
//!   an [`assignor`] (`uniform`, `range`), reconciliation that never gives a partition to two
//!   members; pure, given the time. `consumer_api` turns ConsumerGroupHeartbeat and
//!   ConsumerGroupDescribe into calls on it; `migrate` converts groups between the two
//!   protocols online and answers classic members of consumer groups.
//! - `group` holds one classic group's membership state machine (Empty, PreparingRebalance,
//!   CompletingRebalance, Stable): pure, synchronous, and given the time by its caller. A
//!   JoinGroup or SyncGroup that must wait for other members parks a oneshot sender in its
//!   member; the event that ends the wait answers it.
//! - [`GroupCoordinator`] keeps every group in memory under one mutex, turns requests into calls
//!   on the state machine and answers into versioned responses. It never holds the lock across an
//!   await.
//! - A background task sleeps until the earliest deadline of any group (a session timeout, the
//!   end of a join phase, a sync timeout, a pending member id) and lets the groups act on it.
//! - Committed offsets live in the metadata store ([`weir_meta::GroupOffsets`]), which is the truth
//!   across restarts and brokers. So does membership ([`weir_meta::GroupStates`], encoded by
//!   `snapshot`): each time a group becomes Stable (its generation synced) or Empty, its state is
//!   stored, off the lock; never on the heartbeat path. States reach the store in the order they
//!   were taken (one writer at a time, always the newest state of a group).
//!
//! # Coordinating some groups of a cluster
//!
//! In a cluster each group has one coordinator; the broker says which groups this one
//! coordinates ([`GroupCoordinator::set_ownership`], by default all of them) and calls
//! [`GroupCoordinator::ownership_changed`] when that changes. A request for a group coordinated
//! elsewhere gets NOT_COORDINATOR, as Kafka answers it, and the client looks its coordinator up
//! again. Groups given up are dropped from memory (whoever waits in a JoinGroup or SyncGroup is
//! told NOT_COORDINATOR), without writing anything for them: the new coordinator owns their state.
//!
//! A group that is not in memory is loaded from the store by the first request for it. A Stable
//! group comes back Stable at its generation, with its members and their assignments and their
//! sessions restarted, so that members that move along keep heartbeating without a rebalance,
//! and one that never comes back expires as usual. A state this broker cannot read (a newer
//! version) is logged and ignored: the group starts Empty, its offsets intact.

pub mod assignor;
pub mod committed;
pub mod consumer;
mod consumer_api;
mod embedded;
mod group;
mod migrate;
pub mod share;
mod share_api;
pub use share_api::ShareGroupLookup;
pub mod streams;
mod streams_api;
pub use streams_api::StreamsHeartbeatOutcome;
mod snapshot;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use weir_meta::{GroupOffset, GroupStore};

use crate::codes::*;
use crate::consumer::ConsumerGroup;
use crate::group::{
    Cx, Group, GroupState, JoinOutcome, JoinParams, Reply, SyncOutcome, SyncParams,
};
use crate::share::ShareGroup;
use crate::snapshot::GroupSnapshot;
use crate::streams::StreamsGroup;

/// Error codes, as Kafka numbers them.
mod codes {
    use kafka_protocol::ResponseError as E;

    pub const NONE: i16 = 0;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = E::UnknownTopicOrPartition.code();
    pub const OFFSET_METADATA_TOO_LARGE: i16 = E::OffsetMetadataTooLarge.code();
    pub const COORDINATOR_NOT_AVAILABLE: i16 = E::CoordinatorNotAvailable.code();
    pub const NOT_COORDINATOR: i16 = E::NotCoordinator.code();
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = E::CoordinatorLoadInProgress.code();
    pub const ILLEGAL_GENERATION: i16 = E::IllegalGeneration.code();
    pub const INCONSISTENT_GROUP_PROTOCOL: i16 = E::InconsistentGroupProtocol.code();
    pub const INVALID_GROUP_ID: i16 = E::InvalidGroupId.code();
    pub const UNKNOWN_MEMBER_ID: i16 = E::UnknownMemberId.code();
    pub const INVALID_SESSION_TIMEOUT: i16 = E::InvalidSessionTimeout.code();
    pub const REBALANCE_IN_PROGRESS: i16 = E::RebalanceInProgress.code();
    pub const NON_EMPTY_GROUP: i16 = E::NonEmptyGroup.code();
    pub const GROUP_ID_NOT_FOUND: i16 = E::GroupIdNotFound.code();
    pub const MEMBER_ID_REQUIRED: i16 = E::MemberIdRequired.code();
    pub const FENCED_INSTANCE_ID: i16 = E::FencedInstanceId.code();
    pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = E::GroupSubscribedToTopic.code();
    pub const FENCED_MEMBER_EPOCH: i16 = E::FencedMemberEpoch.code();
    pub const INVALID_REQUEST: i16 = E::InvalidRequest.code();
    pub const STALE_MEMBER_EPOCH: i16 = E::StaleMemberEpoch.code();
    pub const UNRELEASED_INSTANCE_ID: i16 = E::UnreleasedInstanceId.code();
    pub const GROUP_MAX_SIZE_REACHED: i16 = E::GroupMaxSizeReached.code();
    pub const UNSUPPORTED_ASSIGNOR: i16 = E::UnsupportedAssignor.code();
    pub const INVALID_REGULAR_EXPRESSION: i16 = E::InvalidRegularExpression.code();
    pub const UNSUPPORTED_VERSION: i16 = E::UnsupportedVersion.code();
}

/// At most this many group ids are remembered as having no stored state; past it the cache
/// starts over (group ids come from clients, and a cache miss costs only a read of the store).
const ABSENT_CACHE_MAX: usize = 65_536;

/// Kafka's `offset.metadata.max.bytes`.
const MAX_OFFSET_METADATA: usize = 4096;

/// Operations a group supports, as DescribeGroups v3+ reports them when asked (no ACLs: every
/// one is allowed): READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS.
const GROUP_AUTHORIZED_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11);

/// Members of one group at most, by default. Kafka's default is unbounded; every group's
/// members are scanned under the coordinator's one lock (a rebalance, an assignment), so a
/// runaway client (a member id per restart, never leaving) is stopped here. A member beyond a
/// group's partitions has nothing to consume, and few groups read a thousand partitions.
pub const DEFAULT_MAX_SIZE: usize = 1000;

#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// Kafka's `group.initial.rebalance.delay.ms`: how long the first rebalance of an empty group
    /// waits for more members (Kafka's default is 3 s; 0 here, which suits tests).
    pub initial_rebalance_delay: Duration,
    /// Kafka's `group.min.session.timeout.ms`.
    pub min_session_timeout: Duration,
    /// Kafka's `group.max.session.timeout.ms`.
    pub max_session_timeout: Duration,
    /// Kafka's `group.consumer.session.timeout.ms`: a consumer group member not heard from for
    /// this long is removed.
    pub consumer_session_timeout: Duration,
    /// Kafka's `group.consumer.heartbeat.interval.ms`, told to consumer group members.
    pub consumer_heartbeat_interval: Duration,
    /// Kafka's `group.classic.max.size`: members of a classic group at most (pending members,
    /// told MEMBER_ID_REQUIRED, count); a new member beyond is answered
    /// GROUP_MAX_SIZE_REACHED.
    pub classic_max_size: usize,
    /// Kafka's `group.consumer.max.size`: the same for consumer groups (KIP-848).
    pub consumer_max_size: usize,
    /// Kafka's `group.share.session.timeout.ms`: a share group member not heard from for this
    /// long is removed.
    pub share_session_timeout: Duration,
    /// Kafka's `group.share.heartbeat.interval.ms`, told to share group members.
    pub share_heartbeat_interval: Duration,
    /// Kafka's `group.share.max.size`: members of a share group at most.
    pub share_max_size: usize,
    /// Kafka's `group.streams.session.timeout.ms`: a streams group member not heard from for
    /// this long is removed, and its tasks go to the others.
    pub streams_session_timeout: Duration,
    /// Kafka's `group.streams.heartbeat.interval.ms`, told to streams group members.
    pub streams_heartbeat_interval: Duration,
    /// Kafka's `group.streams.max.size`.
    pub streams_max_size: usize,
    /// Kafka's `group.streams.num.standby.replicas`.
    pub streams_num_standby_replicas: usize,
    /// Kafka's `group.streams.initial.rebalance.delay.ms`: the first assignment of a group
    /// waits this long for more members.
    pub streams_initial_rebalance_delay: Duration,
    /// Kafka's `group.streams.assignment.interval.ms`: assignments at most this often.
    pub streams_assignment_interval: Duration,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            initial_rebalance_delay: Duration::ZERO,
            min_session_timeout: Duration::from_secs(6),
            max_session_timeout: Duration::from_secs(30 * 60),
            consumer_session_timeout: Duration::from_secs(45),
            consumer_heartbeat_interval: Duration::from_secs(5),
            classic_max_size: DEFAULT_MAX_SIZE,
            consumer_max_size: DEFAULT_MAX_SIZE,
            share_session_timeout: Duration::from_secs(45),
            share_heartbeat_interval: Duration::from_secs(5),
            share_max_size: 200,
            streams_session_timeout: Duration::from_secs(45),
            streams_heartbeat_interval: Duration::from_secs(5),
            streams_max_size: DEFAULT_MAX_SIZE,
            streams_num_standby_replicas: 0,
            streams_initial_rebalance_delay: Duration::from_secs(3),
            streams_assignment_interval: Duration::from_secs(1),
        }
    }
}

/// How the coordinator's one lock for all groups fares: whether it still holds under load is
/// read here (`weir_group_lock_wait_seconds`, `weir_group_lock_held_seconds`).
#[derive(Debug, Default)]
pub struct GroupMeters {
    /// From asking for the lock to having it.
    pub lock_wait: weir_metrics::Histogram,
    /// From having the lock to letting it go.
    pub lock_held: weir_metrics::Histogram,
    /// The committed offsets of the groups coordinated here, as last read
    /// ([`GroupCoordinator::refresh_committed_offsets`]).
    pub committed: committed::CommittedOffsets,
}

impl GroupMeters {
    /// Declares the group coordinator's meters.
    pub fn register(&self, r: &mut weir_metrics::Registry) {
        r.histogram(
            "group_lock_wait",
            "Time to take the group coordinator's one lock for all groups.",
            &self.lock_wait,
        );
        r.histogram(
            "group_lock_held",
            "Time the group coordinator's lock was held.",
            &self.lock_held,
        );
        self.committed.register(r);
    }
}

/// The coordinator's state, locked; how long it was held is recorded when it is let go.
struct Locked<'a> {
    guard: MutexGuard<'a, State>,
    taken: std::time::Instant,
    held: &'a weir_metrics::Histogram,
}

impl std::ops::Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.guard
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.guard
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.held.record(self.taken.elapsed());
    }
}

/// The classic group coordinator. See the crate documentation.
pub struct GroupCoordinator {
    inner: Arc<Inner>,
    timer: Mutex<Option<JoinHandle<()>>>,
}

/// Says whether this broker coordinates a group. Called under the coordinator's lock: it must be
/// quick and must not call into the coordinator.
pub type Ownership = Arc<dyn Fn(&str) -> bool + Send + Sync>;

struct Inner {
    meta: Arc<dyn GroupStore>,
    meters: GroupMeters,
    config: GroupConfig,
    state: Mutex<State>,
    /// Wakes the timer task when a deadline earlier than the one it sleeps to appears.
    wake: Notify,
    /// Held while writing group states to the store: one writer at a time, so that a group's
    /// states reach the store in the order they were taken.
    writer: tokio::sync::Mutex<()>,
    /// The origin of the millisecond clock consumer groups run on.
    base: Instant,
    /// The topics as the broker knows them, for classic members of consumer groups (their
    /// assignments name topics, consumer groups know them by id).
    catalog: std::sync::RwLock<Catalog>,
}

/// The broker's topic catalog: every topic's id and partition count, by name.
pub type Catalog = Arc<dyn Fn() -> consumer::Topics + Send + Sync>;

struct State {
    /// Classic groups.
    groups: HashMap<String, Group>,
    /// Consumer groups (KIP-848). A group id is in one of the three maps at most.
    consumers: HashMap<String, Consumer>,
    /// Share groups (KIP-932).
    shares: HashMap<String, ShareGroup>,
    /// Streams groups (KIP-1071).
    streams: HashMap<String, StreamsGroup>,
    /// The deadline the timer task sleeps until, if any.
    timer_at: Option<Instant>,
    owns: Ownership,
    /// Group states not yet in the store, the newest of each group. An entry stays until its
    /// write is done, so that a group loaded meanwhile is loaded as it will be stored.
    unsaved: HashMap<String, Unsaved>,
    /// Numbers the entries of `unsaved`, so that a writer removes only what it wrote.
    unsaved_seq: u64,
    /// An entry went into `unsaved` since the last flush started.
    flush_wanted: bool,
    /// Groups not in memory that have no state in the store (or one this broker cannot read):
    /// requests for a group known by its offsets only do not read the store every time.
    absent: HashSet<String>,
    /// Counts the times groups left memory other than as unused (deleted, or coordinated
    /// elsewhere now): a load that read the store before must read it again.
    unloads: u64,
}

struct Unsaved {
    seq: u64,
    write: Write,
}

/// A consumer group and the stored form of it last queued for the store.
struct Consumer {
    group: ConsumerGroup,
    stored: Vec<u8>,
}

#[derive(Clone)]
enum Write {
    Save(Vec<u8>),
    Delete,
}

impl State {
    fn owns(&self, group_id: &str) -> bool {
        (self.owns)(group_id)
    }

    /// Queues a write of a group's state.
    fn queue(&mut self, group_id: &str, write: Write) {
        self.unsaved_seq += 1;
        let seq = self.unsaved_seq;
        self.unsaved
            .insert(group_id.to_owned(), Unsaved { seq, write });
        self.flush_wanted = true;
    }

    /// After an operation on a group or a poll of it: queues its state if it became Stable or
    /// Empty, and forgets it if it holds nothing any more.
    fn settle(&mut self, group_id: &str) {
        let Some(g) = self.groups.get_mut(group_id) else {
            return;
        };
        let to_store = g.take_to_store();
        let unused = g.is_unused();
        if let Some(snapshot) = to_store {
            self.queue(group_id, Write::Save(snapshot.encode()));
        }
        if unused {
            // Never had a generation, so never stored: the store has nothing for it either.
            self.groups.remove(group_id);
        }
    }

    /// After a heartbeat or an expiry in a consumer group: queues its state if it changed.
    /// Returns whether it did.
    fn settle_consumer(&mut self, group_id: &str) -> bool {
        let Some(c) = self.consumers.get_mut(group_id) else {
            return false;
        };
        let bytes = c.group.encode();
        if bytes == c.stored {
            return false;
        }
        c.stored = bytes.clone();
        self.queue(group_id, Write::Save(bytes));
        true
    }

    /// [`State::settle`] for every group.
    fn settle_all(&mut self) {
        let ids: Vec<String> = self.groups.keys().cloned().collect();
        for id in ids {
            self.settle(&id);
        }
    }

    fn mark_absent(&mut self, group_id: &str) {
        if self.absent.len() >= ABSENT_CACHE_MAX {
            self.absent.clear();
        }
        self.absent.insert(group_id.to_owned());
    }

    /// Takes into memory a group's state read from the store (or from `unsaved`).
    fn restore(&mut self, group_id: &str, data: Option<&[u8]>, now: Instant, now_ms: i64) {
        let Some(data) = data else {
            self.mark_absent(group_id);
            return;
        };
        if data.first() == Some(&streams::FORMAT) {
            match StreamsGroup::decode(data) {
                Some(group) => {
                    tracing::info!(group = %group_id, epoch = group.group_epoch, "streams group loaded from the metadata store");
                    self.streams.insert(group_id.to_owned(), group);
                }
                None => {
                    tracing::warn!(group = %group_id, "stored streams group state ignored: the group starts empty");
                    self.mark_absent(group_id);
                }
            }
            return;
        }
        if data.first() == Some(&share::FORMAT) {
            match ShareGroup::decode(data) {
                Some(group) => {
                    tracing::info!(group = %group_id, epoch = group.group_epoch, "share group loaded from the metadata store");
                    self.shares.insert(group_id.to_owned(), group);
                }
                None => {
                    tracing::warn!(group = %group_id, "stored share group state ignored: the group starts empty");
                    self.mark_absent(group_id);
                }
            }
            return;
        }
        if data.first() == Some(&consumer::FORMAT) {
            match ConsumerGroup::decode(data, now_ms) {
                Some(group) => {
                    tracing::info!(
                        group = %group_id,
                        epoch = group.group_epoch,
                        state = group.state_name(),
                        members = group.members.len(),
                        "consumer group loaded from the metadata store"
                    );
                    let stored = data.to_vec();
                    self.consumers
                        .insert(group_id.to_owned(), Consumer { group, stored });
                }
                None => {
                    tracing::warn!(
                        group = %group_id,
                        "stored consumer group state ignored: the group starts empty (its offsets are kept)"
                    );
                    self.mark_absent(group_id);
                }
            }
            return;
        }
        match GroupSnapshot::decode(data) {
            Ok(snapshot) => {
                let g = Group::restore(group_id.to_owned(), snapshot, now);
                tracing::info!(
                    group = %group_id,
                    generation = g.generation,
                    state = g.state.as_str(),
                    members = g.members.len(),
                    "group loaded from the metadata store"
                );
                self.groups.insert(group_id.to_owned(), g);
            }
            Err(e) => {
                tracing::warn!(
                    group = %group_id,
                    error = %e,
                    "stored group state ignored: the group starts Empty (its offsets are kept)"
                );
                self.mark_absent(group_id);
            }
        }
    }
}

impl Inner {
    fn lock(&self) -> Locked<'_> {
        let asked = std::time::Instant::now();
        // A panic under the lock leaves the state as the panicking operation left it; a debug
        // assertion already reported the problem, and the broker keeps serving.
        let guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let taken = std::time::Instant::now();
        self.meters.lock_wait.record(taken - asked);
        Locked {
            guard,
            taken,
            held: &self.meters.lock_held,
        }
    }

    fn catalog(&self) -> consumer::Topics {
        let catalog = Arc::clone(&self.catalog.read().unwrap_or_else(|e| e.into_inner()));
        catalog()
    }

    /// After a consumer group lost a member: if only classic members remain, it becomes a
    /// classic group again and rebalances (Kafka's online downgrade).
    fn maybe_downgrade(&self, state: &mut State, group_id: &str) {
        let Some(c) = state.consumers.get(group_id) else {
            return;
        };
        if !c.group.only_classic_members() {
            return;
        }
        let Some(mut g) = migrate::downgrade(group_id, &c.group, &self.catalog(), Instant::now())
        else {
            return;
        };
        tracing::info!(group = %group_id, generation = g.generation, "consumer group converted to a classic group: only classic members are left");
        state.consumers.remove(group_id);
        // Stored as the Stable generation it starts from, then rebalanced.
        state.queue(group_id, Write::Save(g.snapshot().encode()));
        g.rebalance(&self.cx());
        state.groups.insert(group_id.to_owned(), g);
        state.settle(group_id);
        self.rearm(state, group_id);
    }

    /// Milliseconds on the consumer groups' clock.
    fn now_ms(&self) -> i64 {
        Instant::now().duration_since(self.base).as_millis() as i64
    }

    /// The instant of a time on the consumer groups' clock.
    fn instant_of(&self, ms: i64) -> Instant {
        self.base + Duration::from_millis(ms.max(0) as u64)
    }

    /// When a consumer group's next member expiry is due, if ever.
    fn consumer_group_deadline(&self, c: &Consumer) -> Option<Instant> {
        let session = self.config.consumer_session_timeout.as_millis() as i64;
        c.group
            .next_deadline_ms(session)
            .map(|ms| self.instant_of(ms))
    }

    fn cx(&self) -> Cx {
        Cx {
            now: Instant::now(),
            initial_rebalance_delay: self.config.initial_rebalance_delay,
            max_size: self.config.classic_max_size,
        }
    }

    /// After an operation on `group_id`: tells the timer task if the group now has a deadline
    /// earlier than the one it sleeps to.
    fn rearm(&self, state: &mut State, group_id: &str) {
        let classic = state.groups.get(group_id).and_then(Group::next_deadline);
        let consumer = state
            .consumers
            .get(group_id)
            .and_then(|c| self.consumer_group_deadline(c));
        let Some(deadline) = classic.into_iter().chain(consumer).min() else {
            return;
        };
        if state.timer_at.is_none_or(|at| deadline < at) {
            state.timer_at = Some(deadline);
            self.wake.notify_one();
        }
    }

    /// Runs `op` on a group (creating it if `create`), acting on due deadlines before and after.
    /// `Ok(None)` if there is no such group; `Err(NOT_COORDINATOR)` if it is not coordinated here.
    /// The caller has loaded the group ([`Inner::load`]).
    fn with_group<T>(
        &self,
        group_id: &str,
        create: bool,
        op: impl FnOnce(&mut Group, &Cx) -> T,
    ) -> Result<Option<T>, i16> {
        let cx = self.cx();
        let mut state = self.lock();
        if !state.owns(group_id) {
            return Err(NOT_COORDINATOR);
        }
        if let Some(c) = state.consumers.get(group_id) {
            // A consumer group: an empty one becomes a classic group when a classic member
            // joins (its offsets stay), as in Kafka; a classic request to a member of one that
            // is not empty finds no such member.
            if !create {
                return Ok(None);
            }
            if !c.group.members.is_empty() {
                return Err(INCONSISTENT_GROUP_PROTOCOL);
            }
            tracing::info!(group = %group_id, "empty consumer group converted to a classic group");
            state.consumers.remove(group_id);
            state.queue(group_id, Write::Delete);
        }
        if create && !state.groups.contains_key(group_id) {
            state
                .groups
                .insert(group_id.to_owned(), Group::new(group_id.to_owned()));
        }
        let Some(group) = state.groups.get_mut(group_id) else {
            return Ok(None);
        };
        group.poll(&cx);
        let out = op(group, &cx);
        group.poll(&cx);
        state.settle(group_id);
        self.rearm(&mut state, group_id);
        Ok(Some(out))
    }

    /// Brings a group coordinated here into memory from the store, if it is not there yet.
    /// `Err` is the error code for the request: NOT_COORDINATOR, or COORDINATOR_NOT_AVAILABLE if
    /// the store failed.
    async fn load(&self, group_id: &str) -> Result<(), i16> {
        loop {
            let unloads = {
                let mut state = self.lock();
                if !state.owns(group_id) {
                    return Err(NOT_COORDINATOR);
                }
                if state.groups.contains_key(group_id)
                    || state.consumers.contains_key(group_id)
                    || state.shares.contains_key(group_id)
                    || state.streams.contains_key(group_id)
                    || state.absent.contains(group_id)
                {
                    return Ok(());
                }
                if let Some(u) = state.unsaved.get(group_id) {
                    // A write not done yet: the store is about to hold this.
                    let data = match &u.write {
                        Write::Save(data) => Some(data.clone()),
                        Write::Delete => None,
                    };
                    state.restore(group_id, data.as_deref(), Instant::now(), self.now_ms());
                    self.rearm(&mut state, group_id);
                    return Ok(());
                }
                state.unloads
            };
            let loaded = self.meta.load_group_state(group_id).await;
            let mut state = self.lock();
            if !state.owns(group_id) {
                return Err(NOT_COORDINATOR);
            }
            if state.groups.contains_key(group_id)
                || state.consumers.contains_key(group_id)
                || state.shares.contains_key(group_id)
                || state.streams.contains_key(group_id)
            {
                // Another request loaded it (or created it after finding nothing) first.
                return Ok(());
            }
            if state.unloads != unloads {
                // Deleted or given up and perhaps taken back while we read: read again.
                continue;
            }
            return match loaded {
                Ok(data) => {
                    state.restore(group_id, data.as_deref(), Instant::now(), self.now_ms());
                    self.rearm(&mut state, group_id);
                    Ok(())
                }
                Err(e) => {
                    tracing::warn!(group = %group_id, error = %e, "loading a group's state failed");
                    Err(COORDINATOR_NOT_AVAILABLE)
                }
            };
        }
    }

    /// Writes the queued group states, and returns the groups whose write failed (they stay
    /// queued, for the next flush).
    async fn flush(&self) -> HashSet<String> {
        let mut failed = HashSet::new();
        if self.lock().unsaved.is_empty() {
            return failed;
        }
        let _writer = self.writer.lock().await;
        loop {
            let batch: Vec<(String, u64, Write)> = {
                let mut state = self.lock();
                state.flush_wanted = false;
                state
                    .unsaved
                    .iter()
                    .filter(|(id, _)| !failed.contains(*id))
                    .map(|(id, u)| (id.clone(), u.seq, u.write.clone()))
                    .collect()
            };
            if batch.is_empty() {
                return failed;
            }
            for (group_id, seq, write) in batch {
                {
                    let mut state = self.lock();
                    if !state.owns(&group_id) {
                        // Given up meanwhile: its new coordinator writes its state now.
                        if state.unsaved.get(&group_id).is_some_and(|u| u.seq == seq) {
                            state.unsaved.remove(&group_id);
                        }
                        continue;
                    }
                }
                let result = match write {
                    Write::Save(data) => self.meta.save_group_state(&group_id, data).await,
                    Write::Delete => self.meta.delete_group_state(&group_id).await,
                };
                let mut state = self.lock();
                match result {
                    Ok(()) => {
                        if state.unsaved.get(&group_id).is_some_and(|u| u.seq == seq) {
                            state.unsaved.remove(&group_id);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(group = %group_id, error = %e, "storing a group's state failed");
                        failed.insert(group_id);
                    }
                }
            }
        }
    }

    /// After an operation on `group_id` in a request that may wait for the store (JoinGroup,
    /// SyncGroup, LeaveGroup, DeleteGroups): writes the queued states if the group has one, and
    /// returns false if the group's could not be written.
    async fn persist(self: &Arc<Self>, group_id: &str) -> bool {
        let own = self.lock().unsaved.contains_key(group_id);
        if own {
            return !self.flush().await.contains(group_id);
        }
        self.persist_later();
        true
    }

    /// After an operation that must not wait for the store (heartbeats, commits, descriptions,
    /// the timer): writes queued states in a task of their own.
    fn persist_later(self: &Arc<Self>) {
        if std::mem::take(&mut self.lock().flush_wanted) {
            self.spawn_flush();
        }
    }

    fn spawn_flush(self: &Arc<Self>) {
        let inner = Arc::clone(self);
        tokio::spawn(async move {
            inner.flush().await;
        });
    }
}

/// The timer task: acts on every group's deadlines, then sleeps until the next one.
async fn run_timer(inner: Arc<Inner>) {
    loop {
        let notified = inner.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let next = {
            let cx = inner.cx();
            let mut state = inner.lock();
            for group in state.groups.values_mut() {
                group.poll(&cx);
            }
            state.settle_all();
            let now_ms = inner.now_ms();
            let session = inner.config.consumer_session_timeout.as_millis() as i64;
            let mut expired = Vec::new();
            for (id, c) in state.consumers.iter_mut() {
                for member in c.group.expire(now_ms, session) {
                    tracing::info!(group = %id, member = %member, "consumer group member removed: its session or rebalance timeout ran out");
                    expired.push(id.clone());
                }
            }
            for id in expired {
                state.settle_consumer(&id);
                inner.maybe_downgrade(&mut state, &id);
            }
            if std::mem::take(&mut state.flush_wanted) {
                // The timer never waits for the store.
                inner.spawn_flush();
            }
            let classic = state.groups.values().filter_map(Group::next_deadline).min();
            let consumer = state
                .consumers
                .values()
                .filter_map(|c| inner.consumer_group_deadline(c))
                .min();
            let next = classic.into_iter().chain(consumer).min();
            state.timer_at = next;
            next
        };
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = &mut notified => {}
                }
            }
            None => notified.await,
        }
    }
}

impl GroupCoordinator {
    /// How the coordinator's lock fares.
    pub fn meters(&self) -> &GroupMeters {
        &self.inner.meters
    }
}

impl GroupCoordinator {
    /// Spawns the background task that expires members whose session timed out and ends
    /// rebalances whose rebalance timeout passed. Needs a tokio runtime. Coordinates every group
    /// until told otherwise ([`GroupCoordinator::set_ownership`]).
    pub fn new(meta: Arc<dyn GroupStore>, config: GroupConfig) -> Arc<Self> {
        let inner = Arc::new(Inner {
            meta,
            config,
            state: Mutex::new(State {
                groups: HashMap::new(),
                consumers: HashMap::new(),
                shares: HashMap::new(),
                streams: HashMap::new(),
                timer_at: None,
                owns: Arc::new(|_: &str| true),
                unsaved: HashMap::new(),
                unsaved_seq: 0,
                flush_wanted: false,
                absent: HashSet::new(),
                unloads: 0,
            }),
            wake: Notify::new(),
            writer: tokio::sync::Mutex::new(()),
            meters: GroupMeters::default(),
            base: Instant::now(),
            catalog: std::sync::RwLock::new(Arc::new(consumer::Topics::new)),
        });
        let timer = tokio::spawn(run_timer(Arc::clone(&inner)));
        Arc::new(GroupCoordinator {
            inner,
            timer: Mutex::new(Some(timer)),
        })
    }

    /// Tells the coordinator where the topic catalog is (by default, empty): classic members
    /// of consumer groups name topics where consumer groups know them by id.
    pub fn set_catalog(&self, catalog: Catalog) {
        *self
            .inner
            .catalog
            .write()
            .unwrap_or_else(|e| e.into_inner()) = catalog;
    }

    /// Says which groups this broker coordinates from now on, and gives up those it no longer
    /// does (as [`GroupCoordinator::ownership_changed`]).
    pub fn set_ownership(&self, owns: Ownership) {
        self.inner.lock().owns = owns;
        self.ownership_changed();
    }

    /// The cluster changed: gives up the groups in memory this broker no longer coordinates.
    /// Whoever waits in their JoinGroup or SyncGroup gets NOT_COORDINATOR; nothing is written for
    /// them (their states not yet written are dropped): their new coordinator owns their state.
    pub fn ownership_changed(&self) {
        let mut state = self.inner.lock();
        let owns = Arc::clone(&state.owns);
        let given_up: Vec<String> = state
            .groups
            .keys()
            .filter(|id| !owns(id))
            .cloned()
            .collect();
        for id in &given_up {
            if let Some(g) = state.groups.remove(id) {
                g.unload();
            }
        }
        let consumers_before = state.consumers.len();
        state.consumers.retain(|id, _| owns(id));
        state.shares.retain(|id, _| owns(id));
        state.streams.retain(|id, _| owns(id));
        let consumers_given_up = consumers_before - state.consumers.len();
        state.unsaved.retain(|id, _| owns(id));
        // Groups coordinated elsewhere for a while may have gained a state there.
        state.absent.clear();
        state.unloads += 1;
        if !given_up.is_empty() || consumers_given_up > 0 {
            tracing::info!(
                groups = given_up.len() + consumers_given_up,
                "groups given up to other coordinators"
            );
        }
    }

    /// Writes the group states not stored yet (those whose writes run in the background), and
    /// says whether all of them were: for a broker about to stop.
    pub async fn store_states(&self) -> bool {
        self.inner.flush().await.is_empty()
    }

    /// Stops the background task.
    pub fn shutdown(&self) {
        let handle = self.timer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(handle) = handle {
            handle.abort();
        }
    }

    pub async fn join_group(
        &self,
        req: JoinGroupRequest,
        version: i16,
        client_id: &str,
        client_host: &str,
    ) -> JoinGroupResponse {
        let group_id = req.group_id.to_string();
        let member_id = req.member_id.to_string();
        if group_id.is_empty() {
            return join_response(version, JoinOutcome::error(INVALID_GROUP_ID, member_id));
        }
        let config = &self.inner.config;
        let session = req.session_timeout_ms;
        if session < 0
            || Duration::from_millis(session as u64) < config.min_session_timeout
            || Duration::from_millis(session as u64) > config.max_session_timeout
        {
            return join_response(
                version,
                JoinOutcome::error(INVALID_SESSION_TIMEOUT, member_id),
            );
        }
        if let Err(error) = self.inner.load(&group_id).await {
            return join_response(version, JoinOutcome::error(error, member_id));
        }
        if self.inner.lock().shares.contains_key(&group_id) || !self.streams_to_classic(&group_id) {
            // Kafka answers a classic member of a share group (or a running streams group) so.
            return join_response(
                version,
                JoinOutcome::error(INCONSISTENT_GROUP_PROTOCOL, member_id),
            );
        }
        if let Some(outcome) = self
            .join_consumer_group(&group_id, &req, version, client_id, client_host)
            .await
        {
            return join_response(version, outcome);
        }
        // v0 has no rebalance timeout: the session timeout serves as both.
        let rebalance = if version >= 1 && req.rebalance_timeout_ms > 0 {
            req.rebalance_timeout_ms
        } else {
            session
        };
        let params = JoinParams {
            member_id: member_id.clone(),
            instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
            client_id: client_id.to_owned(),
            client_host: client_host.to_owned(),
            session_timeout: Duration::from_millis(session as u64),
            rebalance_timeout: Duration::from_millis(rebalance as u64),
            protocol_type: req.protocol_type.to_string(),
            protocols: req
                .protocols
                .into_iter()
                .map(|p| (p.name.to_string(), p.metadata))
                .collect(),
            require_known_member_id: version >= 4,
        };
        if let Err(error) = self.inner.load(&group_id).await {
            return join_response(version, JoinOutcome::error(error, member_id));
        }
        // A group is created by its first member; a known member id needs an existing group.
        let create = member_id.is_empty();
        let reply = self
            .inner
            .with_group(&group_id, create, |g, cx| g.join(params, cx));
        self.inner.persist(&group_id).await;
        let outcome = match reply {
            Err(error) => JoinOutcome::error(error, member_id),
            Ok(None) => JoinOutcome::error(UNKNOWN_MEMBER_ID, member_id),
            Ok(Some(Reply::Now(outcome))) => outcome,
            Ok(Some(Reply::Later(rx))) => rx
                .await
                .unwrap_or_else(|_| JoinOutcome::error(UNKNOWN_MEMBER_ID, member_id)),
        };
        join_response(version, outcome)
    }

    pub async fn sync_group(&self, req: SyncGroupRequest, version: i16) -> SyncGroupResponse {
        let group_id = req.group_id.to_string();
        if group_id.is_empty() {
            return sync_response(version, SyncOutcome::error(INVALID_GROUP_ID));
        }
        let params = SyncParams {
            member_id: req.member_id.to_string(),
            instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
            generation: req.generation_id,
            protocol_type: req.protocol_type.as_ref().map(|s| s.to_string()),
            protocol_name: req.protocol_name.as_ref().map(|s| s.to_string()),
            assignments: req
                .assignments
                .into_iter()
                .map(|a| (a.member_id.to_string(), a.assignment))
                .collect(),
        };
        if let Err(error) = self.inner.load(&group_id).await {
            return sync_response(version, SyncOutcome::error(error));
        }
        if let Some(outcome) = self.sync_consumer_group(
            &group_id,
            &params.member_id,
            params.generation,
            params.protocol_name.as_deref(),
        ) {
            return sync_response(version, outcome);
        }
        let reply = self
            .inner
            .with_group(&group_id, false, |g, cx| g.sync(params, cx));
        // The leader's SyncGroup makes the generation Stable: its answer waits for the store.
        self.inner.persist(&group_id).await;
        let outcome = match reply {
            Err(error) => SyncOutcome::error(error),
            Ok(None) => SyncOutcome::error(UNKNOWN_MEMBER_ID),
            Ok(Some(Reply::Now(outcome))) => outcome,
            Ok(Some(Reply::Later(rx))) => rx
                .await
                .unwrap_or_else(|_| SyncOutcome::error(UNKNOWN_MEMBER_ID)),
        };
        sync_response(version, outcome)
    }

    pub async fn heartbeat(&self, req: HeartbeatRequest, version: i16) -> HeartbeatResponse {
        let _ = version;
        let group_id = req.group_id.to_string();
        let error = if group_id.is_empty() {
            INVALID_GROUP_ID
        } else if let Err(error) = self.inner.load(&group_id).await {
            error
        } else if let Some(error) =
            self.heartbeat_consumer_group(&group_id, &req.member_id, req.generation_id)
        {
            error
        } else {
            let instance_id = req.group_instance_id.as_ref().map(|s| s.to_string());
            let error = self
                .inner
                .with_group(&group_id, false, |g, cx| {
                    g.heartbeat(
                        &req.member_id,
                        instance_id.as_deref(),
                        req.generation_id,
                        cx,
                    )
                })
                .map_or_else(|e| e, |r| r.unwrap_or(UNKNOWN_MEMBER_ID));
            // A heartbeat never waits for the store.
            self.inner.persist_later();
            error
        };
        let mut resp = HeartbeatResponse::default();
        resp.error_code = error;
        resp
    }

    pub async fn leave_group(&self, req: LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
        let group_id = req.group_id.to_string();
        let leaving: Vec<(StrBytes, Option<StrBytes>)> = if version >= 3 {
            req.members
                .into_iter()
                .map(|m| (m.member_id, m.group_instance_id))
                .collect()
        } else {
            vec![(req.member_id, None)]
        };
        let mut resp = LeaveGroupResponse::default();
        if group_id.is_empty() {
            resp.error_code = INVALID_GROUP_ID;
            return resp;
        }
        if let Err(error) = self.inner.load(&group_id).await {
            // Kafka answers a coordinator error at the top, for every version.
            resp.error_code = error;
            return resp;
        }
        let ids: Vec<String> = leaving.iter().map(|(m, _)| m.to_string()).collect();
        let consumer = self.leave_consumer_group(&group_id, &ids).await;
        let errors = match consumer {
            Some(errors) => Ok(Some(errors)),
            None => self.inner.with_group(&group_id, false, |g, cx| {
                leaving
                    .iter()
                    .map(|(member_id, instance_id)| g.leave(member_id, instance_id.as_deref(), cx))
                    .collect::<Vec<i16>>()
            }),
        };
        let errors = match errors {
            Err(error) => {
                resp.error_code = error;
                return resp;
            }
            Ok(errors) => errors.unwrap_or_else(|| vec![UNKNOWN_MEMBER_ID; leaving.len()]),
        };
        self.inner.persist(&group_id).await;
        if version >= 3 {
            resp.members = leaving
                .into_iter()
                .zip(errors)
                .map(|((member_id, instance_id), error)| {
                    let mut m = MemberResponse::default();
                    m.member_id = member_id;
                    m.group_instance_id = instance_id;
                    m.error_code = error;
                    m
                })
                .collect();
        } else {
            // Old versions have one member and carry its error at the top.
            resp.error_code = errors.first().copied().unwrap_or(NONE);
        }
        resp
    }

    /// Checks a transactional offset commit against the group (coordinated here, the member
    /// and generation it names); the caller stages the offsets with the transaction. Returns
    /// the Kafka error code to answer every partition with.
    pub async fn validate_txn_offset_commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        partitions: &[(String, i32)],
    ) -> Result<(), i16> {
        self.inner.load(group_id).await?;
        let cx = self.inner.cx();
        let mut state = self.inner.lock();
        if !state.owns(group_id) {
            return Err(NOT_COORDINATOR);
        }
        GroupCoordinator::expire_streams(&mut state, group_id, self.inner.now_ms());
        if let Some(g) = state.streams.get(group_id) {
            if generation == -1 && member_id.is_empty() && instance_id.is_none() {
                return Ok(());
            }
            return g
                .validate_commit(member_id, generation, partitions)
                .map_err(for_producer);
        }
        if let Some(c) = state.consumers.get(group_id) {
            // The generation is the member epoch.
            if generation < 0 && c.group.members.is_empty() {
                return Ok(());
            }
            return c
                .group
                .validate_member_epoch(member_id, generation)
                .map_err(for_producer);
        }
        let result = match state.groups.get_mut(group_id) {
            Some(g) => {
                g.poll(&cx);
                g.validate_txn_offset_commit(member_id, instance_id, generation, &cx)
            }
            // A group without members (a producer committing for a "simple" consumer).
            None if generation < 0 && member_id.is_empty() => Ok(()),
            None => Err(UNKNOWN_MEMBER_ID),
        };
        state.settle(group_id);
        self.inner.rearm(&mut state, group_id);
        result
    }

    /// `partition_exists(topic, partition)` says whether a partition exists (else
    /// UNKNOWN_TOPIC_OR_PARTITION for it).
    pub async fn offset_commit(
        &self,
        req: OffsetCommitRequest,
        version: i16,
        partition_exists: &(dyn Fn(&str, i32) -> bool + Send + Sync),
    ) -> OffsetCommitResponse {
        let group_id = req.group_id.to_string();
        let generation = req.generation_id_or_member_epoch;
        let instance_id = req.group_instance_id.as_ref().map(|s| s.to_string());
        if let Err(error) = self.inner.load(&group_id).await {
            // Every partition gets a coordinator error, as Kafka answers it.
            return commit_error_response(&req, error);
        }
        let group_error: Option<i16> = {
            let cx = self.inner.cx();
            let mut state = self.inner.lock();
            if !state.owns(&group_id) {
                drop(state);
                return commit_error_response(&req, NOT_COORDINATOR);
            }
            // Members gone for good no longer hold the group (an admin's commit after a crash).
            GroupCoordinator::expire_streams(&mut state, &group_id, self.inner.now_ms());
            let streams = state.streams.get(&group_id).map(|g| {
                let committed: Vec<(String, i32)> = req
                    .topics
                    .iter()
                    .flat_map(|t| {
                        t.partitions
                            .iter()
                            .map(|p| (t.name.to_string(), p.partition_index))
                    })
                    .collect();
                let admin = generation < 0 && g.members.is_empty();
                match g.validate_commit(&req.member_id, generation, &committed) {
                    // Streams members commit with v9+ (their member epoch).
                    Ok(()) if version < 9 && !admin => Some(UNSUPPORTED_VERSION),
                    Ok(()) => None,
                    Err(e) => Some(e),
                }
            });
            let consumer = state.consumers.get(&group_id).map(|c| {
                if generation < 0 && c.group.members.is_empty() {
                    // An admin tool, or a consumer without group management.
                    None
                } else if !c.group.members.contains_key(req.member_id.as_str()) {
                    Some(UNKNOWN_MEMBER_ID)
                } else if version < 9 && c.group.members[req.member_id.as_str()].classic.is_none() {
                    // Members of consumer groups commit with v9+ (their member epoch); classic
                    // members commit as they always did (their generation is their epoch).
                    Some(UNSUPPORTED_VERSION)
                } else {
                    c.group
                        .validate_member_epoch(&req.member_id, generation)
                        .err()
                }
            });
            let consumer = streams.or(consumer);
            let error = match state.groups.get_mut(&group_id) {
                _ if consumer.is_some() => consumer.flatten(),
                Some(g) => {
                    g.poll(&cx);
                    g.validate_offset_commit(
                        &req.member_id,
                        instance_id.as_deref(),
                        generation,
                        &cx,
                    )
                    .err()
                }
                // A consumer without group management, or an admin tool: a "simple" group,
                // which exists through its offsets only.
                None if generation < 0 => None,
                // Kafka: GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before.
                None if version >= 9 => Some(GROUP_ID_NOT_FOUND),
                None => Some(ILLEGAL_GENERATION),
            };
            state.settle(&group_id);
            self.inner.rearm(&mut state, &group_id);
            error
        };
        self.inner.persist_later();

        let commit_ms = now_ms();
        let mut to_store = Vec::new();
        let mut topics = Vec::with_capacity(req.topics.len());
        for topic in &req.topics {
            let mut partitions = Vec::with_capacity(topic.partitions.len());
            for p in &topic.partitions {
                let error =
                    if p.partition_index < 0 || !partition_exists(&topic.name, p.partition_index) {
                        UNKNOWN_TOPIC_OR_PARTITION
                    } else if let Some(error) = group_error {
                        error
                    } else if p
                        .committed_metadata
                        .as_ref()
                        .is_some_and(|m| m.len() > MAX_OFFSET_METADATA)
                    {
                        OFFSET_METADATA_TOO_LARGE
                    } else {
                        to_store.push(GroupOffset {
                            topic: topic.name.to_string(),
                            partition: p.partition_index as u32,
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                            commit_ms,
                        });
                        NONE
                    };
                let mut rp = OffsetCommitResponsePartition::default();
                rp.partition_index = p.partition_index;
                rp.error_code = error;
                partitions.push(rp);
            }
            let mut rt = OffsetCommitResponseTopic::default();
            rt.name = topic.name.clone();
            rt.topic_id = topic.topic_id;
            rt.partitions = partitions;
            topics.push(rt);
        }

        if !to_store.is_empty() {
            if let Err(e) = self.inner.meta.commit_offsets(&group_id, to_store).await {
                tracing::warn!(group = %group_id, error = %e, "committing offsets failed");
                for rp in topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                    if rp.error_code == NONE {
                        rp.error_code = COORDINATOR_NOT_AVAILABLE;
                    }
                }
            }
        }
        let mut resp = OffsetCommitResponse::default();
        resp.topics = topics;
        resp
    }

    pub async fn offset_fetch(&self, req: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
        let mut resp = OffsetFetchResponse::default();
        if version >= 8 {
            for g in req.groups {
                let topics = g.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name, t.partition_indexes))
                        .collect()
                });
                // v9+: a consumer group member says who it is, and its epoch is checked.
                let member =
                    (version >= 9 && (g.member_id.is_some() || g.member_epoch >= 0)).then(|| {
                        (
                            g.member_id.as_ref().map_or("", |m| m.as_str()),
                            g.member_epoch,
                        )
                    });
                let fetched = self.fetch_group_offsets(&g.group_id, topics, member).await;
                let mut rg = OffsetFetchResponseGroup::default();
                rg.group_id = g.group_id;
                rg.error_code = fetched.error;
                rg.topics = fetched
                    .topics
                    .into_iter()
                    .map(|(name, partitions)| {
                        let mut rt = OffsetFetchResponseTopics::default();
                        rt.name = name;
                        rt.partitions = partitions
                            .into_iter()
                            .map(|p| {
                                let mut rp = OffsetFetchResponsePartitions::default();
                                rp.partition_index = p.partition;
                                rp.committed_offset = p.offset;
                                rp.committed_leader_epoch = p.leader_epoch;
                                rp.metadata = Some(StrBytes::from_string(p.metadata));
                                rp.error_code = p.error;
                                rp
                            })
                            .collect();
                        rt
                    })
                    .collect();
                resp.groups.push(rg);
            }
        } else {
            let topics = req.topics.map(|ts| {
                ts.into_iter()
                    .map(|t| (t.name, t.partition_indexes))
                    .collect()
            });
            let fetched = self.fetch_group_offsets(&req.group_id, topics, None).await;
            if version >= 2 {
                resp.error_code = fetched.error;
            }
            resp.topics = fetched
                .topics
                .into_iter()
                .map(|(name, partitions)| {
                    let mut rt = OffsetFetchResponseTopic::default();
                    rt.name = name;
                    rt.partitions = partitions
                        .into_iter()
                        .map(|p| {
                            let mut rp = OffsetFetchResponsePartition::default();
                            rp.partition_index = p.partition;
                            rp.committed_offset = p.offset;
                            if version >= 5 {
                                rp.committed_leader_epoch = p.leader_epoch;
                            }
                            rp.metadata = Some(StrBytes::from_string(p.metadata));
                            // v1 has no group-level error: it goes on every partition.
                            rp.error_code = if version < 2 && fetched.error != NONE {
                                fetched.error
                            } else {
                                p.error
                            };
                            rp
                        })
                        .collect();
                    rt
                })
                .collect();
        }
        resp
    }

    /// One group's committed offsets: all of them (`topics` None), or those asked for, with
    /// offset -1 where nothing is committed.
    async fn fetch_group_offsets(
        &self,
        group_id: &str,
        topics: Option<Vec<(TopicName, Vec<i32>)>>,
        member: Option<(&str, i32)>,
    ) -> FetchedGroup {
        if let Some((member_id, epoch)) = member {
            let checked = match self.inner.load(group_id).await {
                Err(error) => Err(error),
                Ok(()) => {
                    let state = self.inner.lock();
                    match (state.consumers.get(group_id), state.streams.get(group_id)) {
                        (Some(c), _) => c.group.validate_member_epoch(member_id, epoch),
                        (_, Some(g)) => g.validate_fetch(Some(member_id), epoch),
                        _ => Ok(()),
                    }
                }
            };
            if let Err(error) = checked {
                return FetchedGroup {
                    error,
                    topics: Vec::new(),
                };
            }
        }
        // Offsets do not need the group's membership: only that it is coordinated here.
        let owned = self.inner.lock().owns(group_id);
        let (stored, error) = if !owned {
            (Vec::new(), NOT_COORDINATOR)
        } else {
            match self.inner.meta.fetch_offsets(group_id).await {
                Ok(stored) => (stored, NONE),
                Err(e) => {
                    tracing::warn!(group = %group_id, error = %e, "fetching offsets failed");
                    // As Kafka while it loads a group's offsets: every client retries the fetch.
                    // (NOT_COORDINATOR makes librdkafka look for the coordinator again without
                    // fetching again: its consumer leaves those partitions unfetched until the
                    // next rebalance.)
                    (Vec::new(), COORDINATOR_LOAD_IN_PROGRESS)
                }
            }
        };
        let fetched = |o: &GroupOffset| FetchedPartition {
            partition: o.partition as i32,
            offset: o.offset,
            leader_epoch: o.leader_epoch,
            metadata: o.metadata.clone().unwrap_or_default(),
            error: NONE,
        };
        let topics = match topics {
            None => {
                if error != NONE {
                    return FetchedGroup {
                        error,
                        topics: Vec::new(),
                    };
                }
                let mut by_topic: BTreeMap<String, Vec<FetchedPartition>> = BTreeMap::new();
                for o in &stored {
                    by_topic
                        .entry(o.topic.clone())
                        .or_default()
                        .push(fetched(o));
                }
                by_topic
                    .into_iter()
                    .map(|(topic, mut partitions)| {
                        partitions.sort_by_key(|p| p.partition);
                        (TopicName(StrBytes::from_string(topic)), partitions)
                    })
                    .collect()
            }
            Some(topics) => {
                let index: HashMap<(&str, i32), &GroupOffset> = stored
                    .iter()
                    .map(|o| ((o.topic.as_str(), o.partition as i32), o))
                    .collect();
                topics
                    .into_iter()
                    .map(|(name, partitions)| {
                        let partitions = partitions
                            .into_iter()
                            .map(|p| match index.get(&(name.as_str(), p)) {
                                Some(o) => fetched(o),
                                None => FetchedPartition {
                                    partition: p,
                                    offset: -1,
                                    leader_epoch: -1,
                                    metadata: String::new(),
                                    error: NONE,
                                },
                            })
                            .collect();
                        (name, partitions)
                    })
                    .collect()
            }
        };
        FetchedGroup { error, topics }
    }

    pub async fn describe_groups(
        &self,
        req: DescribeGroupsRequest,
        version: i16,
    ) -> DescribeGroupsResponse {
        let mut described: Vec<Option<DescribedGroup>> = Vec::with_capacity(req.groups.len());
        for group_id in &req.groups {
            described.push(match self.inner.load(group_id).await {
                Ok(()) => None,
                Err(error) => Some(error_described(group_id, error)),
            });
        }
        let mut unknown = Vec::new();
        {
            let cx = self.inner.cx();
            let mut state = self.inner.lock();
            for (i, group_id) in req.groups.iter().enumerate() {
                if described[i].is_some() {
                    continue;
                }
                if !state.owns(group_id) {
                    described[i] = Some(error_described(group_id, NOT_COORDINATOR));
                    continue;
                }
                if state.consumers.contains_key(group_id.as_str())
                    || state.shares.contains_key(group_id.as_str())
                    || state.streams.contains_key(group_id.as_str())
                {
                    // As Kafka: DescribeGroups describes classic groups only (the admin client
                    // asks ConsumerGroupDescribe first).
                    let mut d = DescribedGroup::default();
                    d.group_id = group_id.clone();
                    d.group_state = StrBytes::from_static_str("Dead");
                    if version >= 6 {
                        d.error_code = GROUP_ID_NOT_FOUND;
                        d.error_message = Some(StrBytes::from_string(format!(
                            "Group {} is not a classic group.",
                            group_id.as_str()
                        )));
                    }
                    described[i] = Some(d);
                    continue;
                }
                match state.groups.get_mut(group_id.as_str()) {
                    Some(g) => {
                        g.poll(&cx);
                        described[i] = Some(describe(g, group_id.clone(), version));
                        state.settle(group_id);
                        self.inner.rearm(&mut state, group_id);
                    }
                    None => unknown.push(i),
                }
            }
        }
        self.inner.persist_later();
        for i in unknown {
            let group_id = req.groups[i].clone();
            let mut d = DescribedGroup::default();
            match self.inner.meta.fetch_offsets(&group_id).await {
                Ok(offsets) if !offsets.is_empty() => {
                    // Known by its offsets only (e.g. after a restart): an empty group.
                    d.group_state = StrBytes::from_static_str(GroupState::Empty.as_str());
                }
                Ok(_) => {
                    d.group_state = StrBytes::from_static_str("Dead");
                    if version >= 6 {
                        d.error_code = GROUP_ID_NOT_FOUND;
                        d.error_message = Some(StrBytes::from_string(format!(
                            "Group {} not found.",
                            group_id.as_str()
                        )));
                    }
                }
                Err(e) => {
                    tracing::warn!(group = %group_id.as_str(), error = %e, "describing a group failed");
                    d.error_code = COORDINATOR_NOT_AVAILABLE;
                }
            }
            d.group_id = group_id;
            described[i] = Some(d);
        }
        let mut resp = DescribeGroupsResponse::default();
        resp.groups = described.into_iter().flatten().collect();
        if version >= 3 && req.include_authorized_operations {
            for d in &mut resp.groups {
                if d.error_code == NONE {
                    d.authorized_operations = GROUP_AUTHORIZED_OPERATIONS;
                }
            }
        }
        resp
    }

    pub async fn list_groups(&self, req: ListGroupsRequest, version: i16) -> ListGroupsResponse {
        let states: HashSet<String> = if version >= 4 {
            req.states_filter
                .iter()
                .map(|s| s.trim().to_lowercase())
                .collect()
        } else {
            HashSet::new()
        };
        let types: HashSet<String> = if version >= 5 {
            req.types_filter
                .iter()
                .map(|s| s.trim().to_lowercase())
                .collect()
        } else {
            HashSet::new()
        };
        let type_ok = |t: &str| types.is_empty() || types.contains(t);

        let mut resp = ListGroupsResponse::default();
        // Groups stored but not in memory yet (this coordinator just took them over, or
        // restarted) are listed as they are: load them first.
        match self.inner.meta.group_state_ids().await {
            Ok(ids) => {
                for id in ids {
                    match self.inner.load(&id).await {
                        Ok(()) | Err(NOT_COORDINATOR) => {}
                        Err(error) => {
                            resp.error_code = error;
                            return resp;
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "listing stored groups failed");
                resp.error_code = COORDINATOR_NOT_AVAILABLE;
                return resp;
            }
        }
        #[allow(clippy::type_complexity)]
        let (mut listed, owns): (
            BTreeMap<String, (String, &'static str, &'static str)>,
            Ownership,
        ) = {
            let cx = self.inner.cx();
            let now_ms = self.inner.now_ms();
            let mut state = self.inner.lock();
            for g in state.groups.values_mut() {
                g.poll(&cx);
            }
            state.settle_all();
            let classic = state
                .groups
                .values()
                .filter(|g| state.owns(&g.id))
                .map(|g| {
                    (
                        g.id.clone(),
                        (
                            g.protocol_type.clone().unwrap_or_default(),
                            g.state.as_str(),
                            "classic",
                        ),
                    )
                });
            let consumer =
                state
                    .consumers
                    .iter()
                    .filter(|(id, _)| state.owns(id))
                    .map(|(id, c)| {
                        (
                            id.clone(),
                            ("consumer".to_string(), c.group.state_name(), "consumer"),
                        )
                    });
            let mut listed: BTreeMap<_, _> = classic.chain(consumer).collect();
            for (id, name) in GroupCoordinator::share_listing(&mut state, now_ms) {
                listed.insert(id, ("share".to_string(), name, "share"));
            }
            for (id, name) in GroupCoordinator::streams_listing(&mut state, now_ms) {
                listed.insert(id, ("streams".to_string(), name, "streams"));
            }
            (listed, Arc::clone(&state.owns))
        };
        self.inner.persist_later();
        match self.inner.meta.offset_groups().await {
            Ok(ids) => {
                // Called outside the lock here: ownership functions must not need it either way.
                for id in ids.into_iter().filter(|id| owns(id)) {
                    listed.entry(id).or_insert((
                        String::new(),
                        GroupState::Empty.as_str(),
                        "classic",
                    ));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "listing groups with offsets failed");
                resp.error_code = COORDINATOR_NOT_AVAILABLE;
                return resp;
            }
        }
        resp.groups = listed
            .into_iter()
            .filter(|(_, (_, state, kind))| {
                type_ok(kind) && (states.is_empty() || states.contains(&state.to_lowercase()))
            })
            .map(|(id, (protocol_type, state, kind))| {
                let mut g = ListedGroup::default();
                g.group_id = GroupId(StrBytes::from_string(id));
                g.protocol_type = StrBytes::from_string(protocol_type);
                if version >= 4 {
                    g.group_state = StrBytes::from_static_str(state);
                }
                if version >= 5 {
                    g.group_type = StrBytes::from_static_str(kind);
                }
                g
            })
            .collect();
        resp
    }

    pub async fn delete_groups(
        &self,
        req: DeleteGroupsRequest,
        version: i16,
    ) -> DeleteGroupsResponse {
        let _ = version;
        let mut resp = DeleteGroupsResponse::default();
        for group_id in req.groups_names {
            let error = self.delete_group(group_id.as_str()).await;
            let mut r = DeletableGroupResult::default();
            r.group_id = group_id;
            r.error_code = error;
            resp.results.push(r);
        }
        resp
    }

    async fn delete_group(&self, group_id: &str) -> i16 {
        if let Err(error) = self.inner.load(group_id).await {
            return error;
        }
        let share_or_streams = {
            let now_ms = self.inner.now_ms();
            let mut state = self.inner.lock();
            GroupCoordinator::delete_share_group(&mut state, group_id, now_ms)
                .or_else(|| GroupCoordinator::delete_streams_group(&mut state, group_id, now_ms))
        };
        if share_or_streams == Some(NONE) {
            // A streams group's offsets go with it (a share group has none here).
            if let Err(e) = self.inner.meta.delete_offsets(group_id, None).await {
                tracing::warn!(group = %group_id, error = %e, "deleting a group's offsets failed");
                return COORDINATOR_NOT_AVAILABLE;
            }
        }
        if let Some(error) = share_or_streams {
            if error == NONE && !self.inner.persist(group_id).await {
                return COORDINATOR_NOT_AVAILABLE;
            }
            return error;
        }
        // Take an Empty group out of memory first, so that a member joining meanwhile starts a
        // new group instead of finding a half-deleted one.
        let in_memory = {
            let cx = self.inner.cx();
            let mut state = self.inner.lock();
            if !state.owns(group_id) {
                return NOT_COORDINATOR;
            }
            let consumer = state
                .consumers
                .get(group_id)
                .map(|c| !c.group.members.is_empty());
            if consumer == Some(true) {
                return NON_EMPTY_GROUP;
            }
            if consumer.is_some() {
                state.consumers.remove(group_id);
            }
            let active = state
                .groups
                .get_mut(group_id)
                .map(|g| {
                    g.poll(&cx);
                    g.is_active()
                })
                .or(consumer);
            if active == Some(true) {
                state.settle(group_id);
                self.inner.rearm(&mut state, group_id);
                return NON_EMPTY_GROUP;
            }
            if active.is_some() {
                state.groups.remove(group_id);
                state.unloads += 1;
            }
            // Also for a group not in memory: a stored state this broker could not read goes too.
            state.queue(group_id, Write::Delete);
            state.mark_absent(group_id);
            active.is_some()
        };
        if !self.inner.persist(group_id).await {
            return COORDINATOR_NOT_AVAILABLE;
        }
        let meta = &self.inner.meta;
        if !in_memory {
            match meta.fetch_offsets(group_id).await {
                Ok(offsets) if offsets.is_empty() => return GROUP_ID_NOT_FOUND,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(group = %group_id, error = %e, "deleting a group failed");
                    return COORDINATOR_NOT_AVAILABLE;
                }
            }
        }
        match meta.delete_offsets(group_id, None).await {
            Ok(()) => {
                tracing::info!(group = %group_id, "group deleted");
                NONE
            }
            Err(e) => {
                tracing::warn!(group = %group_id, error = %e, "deleting a group's offsets failed");
                COORDINATOR_NOT_AVAILABLE
            }
        }
    }

    pub async fn offset_delete(
        &self,
        req: OffsetDeleteRequest,
        version: i16,
    ) -> OffsetDeleteResponse {
        let _ = version;
        let group_id = req.group_id.to_string();
        let mut resp = OffsetDeleteResponse::default();
        if group_id.is_empty() {
            resp.error_code = INVALID_GROUP_ID;
            return resp;
        }
        if let Err(error) = self.inner.load(&group_id).await {
            resp.error_code = error;
            return resp;
        }
        // Which topics must keep their offsets; None when the group is not in memory.
        let check = {
            let cx = self.inner.cx();
            let mut state = self.inner.lock();
            if !state.owns(&group_id) {
                resp.error_code = NOT_COORDINATOR;
                return resp;
            }
            let consumer = state.consumers.get(&group_id).map(|c| {
                req.topics
                    .iter()
                    .filter(|t| c.group.is_subscribed_to(&t.name))
                    .map(|t| t.name.to_string())
                    .collect::<HashSet<String>>()
            });
            GroupCoordinator::expire_streams(&mut state, &group_id, self.inner.now_ms());
            let streams = state.streams.get(&group_id).map(|g| {
                req.topics
                    .iter()
                    .filter(|t| g.reads_topic(&t.name))
                    .map(|t| t.name.to_string())
                    .collect::<HashSet<String>>()
            });
            let consumer = consumer.or(streams);
            let check = match state.groups.get_mut(&group_id) {
                _ if consumer.is_some() => consumer,
                Some(g) => {
                    g.poll(&cx);
                    if g.is_active() && !g.uses_consumer_protocol() {
                        resp.error_code = NON_EMPTY_GROUP;
                        return resp;
                    }
                    let subscribed = if g.is_active() {
                        g.subscribed_topics()
                    } else {
                        Some(HashSet::new())
                    };
                    let subscribed_to: HashSet<String> = req
                        .topics
                        .iter()
                        .filter(|t| g.is_active() && g.is_subscribed_to(&t.name, &subscribed))
                        .map(|t| t.name.to_string())
                        .collect();
                    Some(subscribed_to)
                }
                None => None,
            };
            state.settle(&group_id);
            self.inner.rearm(&mut state, &group_id);
            check
        };
        self.inner.persist_later();
        let subscribed_to = match check {
            Some(s) => s,
            None => match self.inner.meta.fetch_offsets(&group_id).await {
                Ok(offsets) if offsets.is_empty() => {
                    resp.error_code = GROUP_ID_NOT_FOUND;
                    return resp;
                }
                Ok(_) => HashSet::new(),
                Err(e) => {
                    tracing::warn!(group = %group_id, error = %e, "deleting offsets failed");
                    resp.error_code = COORDINATOR_NOT_AVAILABLE;
                    return resp;
                }
            },
        };
        let mut delete = Vec::new();
        for t in req.topics {
            let subscribed = subscribed_to.contains(t.name.as_str());
            let mut rt = OffsetDeleteResponseTopic::default();
            for p in t.partitions {
                let error = if subscribed {
                    GROUP_SUBSCRIBED_TO_TOPIC
                } else {
                    if p.partition_index >= 0 {
                        delete.push((t.name.to_string(), p.partition_index as u32));
                    }
                    NONE
                };
                let mut rp = OffsetDeleteResponsePartition::default();
                rp.partition_index = p.partition_index;
                rp.error_code = error;
                rt.partitions.push(rp);
            }
            rt.name = t.name;
            resp.topics.push(rt);
        }
        if !delete.is_empty() {
            if let Err(e) = self
                .inner
                .meta
                .delete_offsets(&group_id, Some(delete))
                .await
            {
                tracing::warn!(group = %group_id, error = %e, "deleting offsets failed");
                resp.error_code = COORDINATOR_NOT_AVAILABLE;
                resp.topics.clear();
            }
        }
        resp
    }
}

impl Drop for GroupCoordinator {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct FetchedGroup {
    error: i16,
    topics: Vec<(TopicName, Vec<FetchedPartition>)>,
}

struct FetchedPartition {
    partition: i32,
    offset: i64,
    leader_epoch: i32,
    metadata: String,
    error: i16,
}

/// An OffsetCommit answered with one error for every partition.
/// A member-epoch check's error as a transactional producer is told it: as Kafka, a stale
/// member epoch is ILLEGAL_GENERATION, which producers treat as an abortable failed commit (they
/// do not know STALE_MEMBER_EPOCH).
fn for_producer(error: i16) -> i16 {
    if error == STALE_MEMBER_EPOCH {
        ILLEGAL_GENERATION
    } else {
        error
    }
}

fn commit_error_response(req: &OffsetCommitRequest, error: i16) -> OffsetCommitResponse {
    let mut resp = OffsetCommitResponse::default();
    resp.topics = req
        .topics
        .iter()
        .map(|t| {
            let mut rt = OffsetCommitResponseTopic::default();
            rt.name = t.name.clone();
            rt.topic_id = t.topic_id;
            rt.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut rp = OffsetCommitResponsePartition::default();
                    rp.partition_index = p.partition_index;
                    rp.error_code = error;
                    rp
                })
                .collect();
            rt
        })
        .collect();
    resp
}

fn join_response(version: i16, o: JoinOutcome) -> JoinGroupResponse {
    let mut resp = JoinGroupResponse::default();
    resp.error_code = o.error;
    resp.generation_id = o.generation;
    if version >= 7 {
        resp.protocol_type = o.protocol_type.map(StrBytes::from_string);
        resp.protocol_name = o.protocol_name.map(StrBytes::from_string);
    } else {
        // Not nullable before v7.
        resp.protocol_name = Some(StrBytes::from_string(o.protocol_name.unwrap_or_default()));
    }
    resp.leader = StrBytes::from_string(o.leader);
    resp.member_id = StrBytes::from_string(o.member_id);
    resp.members = o
        .members
        .into_iter()
        .map(|m| {
            let mut rm = JoinGroupResponseMember::default();
            rm.member_id = StrBytes::from_string(m.member_id);
            if version >= 5 {
                rm.group_instance_id = m.instance_id.map(StrBytes::from_string);
            }
            rm.metadata = m.metadata;
            rm
        })
        .collect();
    resp
}

fn sync_response(version: i16, o: SyncOutcome) -> SyncGroupResponse {
    let mut resp = SyncGroupResponse::default();
    resp.error_code = o.error;
    if version >= 5 && o.error == NONE {
        resp.protocol_type = o.protocol_type.map(StrBytes::from_string);
        resp.protocol_name = o.protocol_name.map(StrBytes::from_string);
    }
    resp.assignment = o.assignment;
    resp
}

/// A group DescribeGroups cannot describe here: its id and the error only, as Kafka answers it.
fn error_described(group_id: &GroupId, error: i16) -> DescribedGroup {
    let mut d = DescribedGroup::default();
    d.group_id = group_id.clone();
    d.error_code = error;
    d
}

fn describe(g: &Group, group_id: GroupId, version: i16) -> DescribedGroup {
    let mut d = DescribedGroup::default();
    d.group_id = group_id;
    d.group_state = StrBytes::from_static_str(g.state.as_str());
    d.protocol_type = StrBytes::from_string(g.protocol_type.clone().unwrap_or_default());
    let stable = g.state == GroupState::Stable;
    let protocol = if stable {
        g.protocol_name.clone()
    } else {
        None
    };
    d.protocol_data = StrBytes::from_string(protocol.clone().unwrap_or_default());
    d.members = g
        .members
        .iter()
        .map(|m| {
            let mut dm = DescribedGroupMember::default();
            dm.member_id = StrBytes::from_string(m.id.clone());
            if version >= 4 {
                dm.group_instance_id = m.instance_id.clone().map(StrBytes::from_string);
            }
            dm.client_id = StrBytes::from_string(m.client_id.clone());
            dm.client_host = StrBytes::from_string(m.client_host.clone());
            // Metadata and assignment only once the group is Stable, as Kafka does.
            if let Some(protocol) = &protocol {
                dm.member_metadata = m.metadata(protocol).cloned().unwrap_or_default();
                dm.member_assignment = m.assignment.clone();
            }
            dm
        })
        .collect();
    d
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A random, UUID-shaped string for member ids (unique, not secret).
pub(crate) fn random_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    // RandomState is seeded from the OS once per thread, then varies per instance.
    let seed = std::collections::hash_map::RandomState::new();
    let mut h = seed.build_hasher();
    h.write_u64(n);
    h.write_u128(nanos);
    let a = h.finish();
    let mut h = seed.build_hasher();
    h.write_u64(a);
    h.write_u64(n.rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15);
    let b = h.finish();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        ((b >> 48) & 0x3fff) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod consumer_api_tests;
