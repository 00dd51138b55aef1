//! Weir's consumer group coordinator for Kafka's classic group protocol, on a single node.
//!
//! The Kafka API layer hands each group request (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete), already
//! decoded, to [`GroupCoordinator`] and gets the response back filled for the request's version.
//!
//! How the parts fit:
//!
//! - `group` holds one group's membership state machine (Empty, PreparingRebalance,
//!   CompletingRebalance, Stable): pure, synchronous, and given the time by its caller. A
//!   JoinGroup or SyncGroup that must wait for other members parks a oneshot sender in its
//!   member; the event that ends the wait answers it.
//! - [`GroupCoordinator`] keeps every group in memory under one mutex, turns requests into calls
//!   on the state machine and answers into versioned responses. It never holds the lock across an
//!   await.
//! - A background task sleeps until the earliest deadline of any group (a session timeout, the
//!   end of a join phase, a sync timeout, a pending member id) and lets the groups act on it.
//! - Committed offsets live in the metadata store ([`weir_meta::GroupOffsets`]), which is the truth
//!   across restarts. Membership is not persisted: after a restart, members rejoin (their
//!   heartbeats get UNKNOWN_MEMBER_ID) and groups known only by their offsets show as Empty.

mod group;

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
use weir_meta::{GroupOffset, GroupOffsets};

use crate::codes::*;
use crate::group::{
    Cx, Group, GroupState, JoinOutcome, JoinParams, Reply, SyncOutcome, SyncParams,
};

/// Error codes, as Kafka numbers them.
mod codes {
    use kafka_protocol::ResponseError as E;

    pub const NONE: i16 = 0;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = E::UnknownTopicOrPartition.code();
    pub const OFFSET_METADATA_TOO_LARGE: i16 = E::OffsetMetadataTooLarge.code();
    pub const COORDINATOR_NOT_AVAILABLE: i16 = E::CoordinatorNotAvailable.code();
    pub const NOT_COORDINATOR: i16 = E::NotCoordinator.code();
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
}

/// Kafka's `offset.metadata.max.bytes`.
const MAX_OFFSET_METADATA: usize = 4096;

/// Operations a group supports, as DescribeGroups v3+ reports them when asked (no ACLs: every
/// one is allowed): READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS.
const GROUP_AUTHORIZED_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11);

#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// Kafka's `group.initial.rebalance.delay.ms`: how long the first rebalance of an empty group
    /// waits for more members (Kafka's default is 3 s; 0 here, which suits tests).
    pub initial_rebalance_delay: Duration,
    /// Kafka's `group.min.session.timeout.ms`.
    pub min_session_timeout: Duration,
    /// Kafka's `group.max.session.timeout.ms`.
    pub max_session_timeout: Duration,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            initial_rebalance_delay: Duration::ZERO,
            min_session_timeout: Duration::from_secs(6),
            max_session_timeout: Duration::from_secs(30 * 60),
        }
    }
}

/// The classic group coordinator. See the crate documentation.
pub struct GroupCoordinator {
    inner: Arc<Inner>,
    timer: Mutex<Option<JoinHandle<()>>>,
}

struct Inner {
    meta: Arc<dyn GroupOffsets>,
    config: GroupConfig,
    state: Mutex<State>,
    /// Wakes the timer task when a deadline earlier than the one it sleeps to appears.
    wake: Notify,
}

struct State {
    groups: HashMap<String, Group>,
    /// The deadline the timer task sleeps until, if any.
    timer_at: Option<Instant>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic under the lock leaves the state as the panicking operation left it; a debug
        // assertion already reported the problem, and the broker keeps serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cx(&self) -> Cx {
        Cx {
            now: Instant::now(),
            initial_rebalance_delay: self.config.initial_rebalance_delay,
        }
    }

    /// After an operation on `group_id`: tells the timer task if the group now has a deadline
    /// earlier than the one it sleeps to.
    fn rearm(&self, state: &mut State, group_id: &str) {
        let Some(deadline) = state.groups.get(group_id).and_then(Group::next_deadline) else {
            return;
        };
        if state.timer_at.is_none_or(|at| deadline < at) {
            state.timer_at = Some(deadline);
            self.wake.notify_one();
        }
    }

    /// Runs `op` on a group (creating it if `create`), acting on due deadlines before and after.
    fn with_group<T>(
        &self,
        group_id: &str,
        create: bool,
        op: impl FnOnce(&mut Group, &Cx) -> T,
    ) -> Option<T> {
        let cx = self.cx();
        let mut state = self.lock();
        if create && !state.groups.contains_key(group_id) {
            state
                .groups
                .insert(group_id.to_owned(), Group::new(group_id.to_owned()));
        }
        let group = state.groups.get_mut(group_id)?;
        group.poll(&cx);
        let out = op(group, &cx);
        group.poll(&cx);
        if group.is_unused() {
            state.groups.remove(group_id);
        }
        self.rearm(&mut state, group_id);
        Some(out)
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
            state.groups.retain(|_, g| !g.is_unused());
            let next = state.groups.values().filter_map(Group::next_deadline).min();
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
    /// Spawns the background task that expires members whose session timed out and ends
    /// rebalances whose rebalance timeout passed. Needs a tokio runtime.
    pub fn new(meta: Arc<dyn GroupOffsets>, config: GroupConfig) -> Arc<Self> {
        let inner = Arc::new(Inner {
            meta,
            config,
            state: Mutex::new(State {
                groups: HashMap::new(),
                timer_at: None,
            }),
            wake: Notify::new(),
        });
        let timer = tokio::spawn(run_timer(Arc::clone(&inner)));
        Arc::new(GroupCoordinator {
            inner,
            timer: Mutex::new(Some(timer)),
        })
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
        // A group is created by its first member; a known member id needs an existing group.
        let create = member_id.is_empty();
        let reply = self
            .inner
            .with_group(&group_id, create, |g, cx| g.join(params, cx));
        let outcome = match reply {
            None => JoinOutcome::error(UNKNOWN_MEMBER_ID, member_id),
            Some(Reply::Now(outcome)) => outcome,
            Some(Reply::Later(rx)) => rx
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
        let reply = self
            .inner
            .with_group(&group_id, false, |g, cx| g.sync(params, cx));
        let outcome = match reply {
            None => SyncOutcome::error(UNKNOWN_MEMBER_ID),
            Some(Reply::Now(outcome)) => outcome,
            Some(Reply::Later(rx)) => rx
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
        } else {
            let instance_id = req.group_instance_id.as_ref().map(|s| s.to_string());
            self.inner
                .with_group(&group_id, false, |g, cx| {
                    g.heartbeat(
                        &req.member_id,
                        instance_id.as_deref(),
                        req.generation_id,
                        cx,
                    )
                })
                .unwrap_or(UNKNOWN_MEMBER_ID)
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
        let errors = self
            .inner
            .with_group(&group_id, false, |g, cx| {
                leaving
                    .iter()
                    .map(|(member_id, instance_id)| g.leave(member_id, instance_id.as_deref(), cx))
                    .collect::<Vec<i16>>()
            })
            .unwrap_or_else(|| vec![UNKNOWN_MEMBER_ID; leaving.len()]);
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
        let group_error: Option<i16> = {
            let cx = self.inner.cx();
            let mut state = self.inner.lock();
            let error = match state.groups.get_mut(&group_id) {
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
            self.inner.rearm(&mut state, &group_id);
            error
        };

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
                let fetched = self.fetch_group_offsets(&g.group_id, topics).await;
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
            let fetched = self.fetch_group_offsets(&req.group_id, topics).await;
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
    ) -> FetchedGroup {
        let (stored, error) = match self.inner.meta.fetch_offsets(group_id).await {
            Ok(stored) => (stored, NONE),
            Err(e) => {
                tracing::warn!(group = %group_id, error = %e, "fetching offsets failed");
                // NOT_COORDINATOR: the error every consumer version retries (Kafka does the same).
                (Vec::new(), NOT_COORDINATOR)
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
        let mut described = Vec::with_capacity(req.groups.len());
        let mut unknown = Vec::new();
        {
            let cx = self.inner.cx();
            let mut state = self.inner.lock();
            for (i, group_id) in req.groups.iter().enumerate() {
                match state.groups.get_mut(group_id.as_str()) {
                    Some(g) => {
                        g.poll(&cx);
                        described.push(Some(describe(g, group_id.clone(), version)));
                    }
                    None => {
                        described.push(None);
                        unknown.push(i);
                    }
                }
            }
        }
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
        // Every group here is a classic group.
        let type_ok = types.is_empty() || types.contains("classic");

        let mut listed: BTreeMap<String, (String, &'static str)> = {
            let cx = self.inner.cx();
            let mut state = self.inner.lock();
            for g in state.groups.values_mut() {
                g.poll(&cx);
            }
            state.groups.retain(|_, g| !g.is_unused());
            state
                .groups
                .values()
                .map(|g| {
                    (
                        g.id.clone(),
                        (
                            g.protocol_type.clone().unwrap_or_default(),
                            g.state.as_str(),
                        ),
                    )
                })
                .collect()
        };
        let mut resp = ListGroupsResponse::default();
        match self.inner.meta.offset_groups().await {
            Ok(ids) => {
                for id in ids {
                    listed
                        .entry(id)
                        .or_insert((String::new(), GroupState::Empty.as_str()));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "listing groups with offsets failed");
                resp.error_code = COORDINATOR_NOT_AVAILABLE;
                return resp;
            }
        }
        if !type_ok {
            return resp;
        }
        resp.groups = listed
            .into_iter()
            .filter(|(_, (_, state))| states.is_empty() || states.contains(&state.to_lowercase()))
            .map(|(id, (protocol_type, state))| {
                let mut g = ListedGroup::default();
                g.group_id = GroupId(StrBytes::from_string(id));
                g.protocol_type = StrBytes::from_string(protocol_type);
                if version >= 4 {
                    g.group_state = StrBytes::from_static_str(state);
                }
                if version >= 5 {
                    g.group_type = StrBytes::from_static_str("classic");
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
        // Take an Empty group out of memory first, so that a member joining meanwhile starts a
        // new group instead of finding a half-deleted one.
        let in_memory = {
            let cx = self.inner.cx();
            let mut state = self.inner.lock();
            match state.groups.get_mut(group_id) {
                Some(g) => {
                    g.poll(&cx);
                    if g.is_active() {
                        return NON_EMPTY_GROUP;
                    }
                    state.groups.remove(group_id);
                    true
                }
                None => false,
            }
        };
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
        // Which topics must keep their offsets; None when the group is not in memory.
        let check = {
            let cx = self.inner.cx();
            let mut state = self.inner.lock();
            match state.groups.get_mut(&group_id) {
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
            }
        };
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
