//! One classic group's membership state machine, without I/O.
//!
//! Everything here runs under the coordinator's lock and never waits: a request either gets its
//! answer now ([`Reply::Now`]) or parks a oneshot sender in its member ([`Reply::Later`]), which a
//! later operation on the group (another member's join or sync, a leave, a timeout found by
//! [`Group::poll`]) completes. Time is passed in ([`Cx::now`]), so the whole machine is driven
//! by whoever calls it: the request handlers and the coordinator's timer task.
//!
//! States and transitions follow Kafka's classic group:
//!
//! ```text
//!   Empty --first join--> PreparingRebalance --all rejoined, or rebalance timeout--> CompletingRebalance
//!                           ^      |                                                     |
//!                           |      +--nobody left--> Empty        leader's SyncGroup --> Stable
//!                           |                                                            |
//!                           +-- a member joins, changes its metadata, leaves or expires -+
//!                               (from CompletingRebalance or Stable)
//! ```

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::codes::*;
use crate::snapshot::{GroupSnapshot, MemberSnapshot, StoredState};

/// A group's state, as Kafka names it. (Kafka's fifth state, Dead, is a group that is gone: here
/// such a group is simply not in the coordinator's map.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl GroupState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

/// Time and configuration an operation needs.
pub(crate) struct Cx {
    pub now: Instant,
    /// Kafka's `group.initial.rebalance.delay.ms`.
    pub initial_rebalance_delay: Duration,
    /// Kafka's `group.classic.max.size`.
    pub max_size: usize,
}

/// What a JoinGroup gets back, before it is shaped for the request's version.
#[derive(Debug, Clone)]
pub(crate) struct JoinOutcome {
    pub error: i16,
    pub member_id: String,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    /// Filled for the leader only: every member and its metadata for the chosen protocol.
    pub members: Vec<JoinedMember>,
}

#[derive(Debug, Clone)]
pub(crate) struct JoinedMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub metadata: Bytes,
}

impl JoinOutcome {
    pub(crate) fn error(error: i16, member_id: impl Into<String>) -> JoinOutcome {
        JoinOutcome {
            error,
            member_id: member_id.into(),
            generation: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            members: Vec::new(),
        }
    }
}

/// What a SyncGroup gets back.
#[derive(Debug, Clone)]
pub(crate) struct SyncOutcome {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncOutcome {
    pub(crate) fn error(error: i16) -> SyncOutcome {
        SyncOutcome {
            error,
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// An answer now, or one that a later event on the group will send.
pub(crate) enum Reply<T> {
    Now(T),
    Later(oneshot::Receiver<T>),
}

/// A JoinGroup request, decoded and validated (group id, session timeout).
pub(crate) struct JoinParams {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a new dynamic member first gets MEMBER_ID_REQUIRED with its id.
    pub require_known_member_id: bool,
}

/// A SyncGroup request.
pub(crate) struct SyncParams {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

pub(crate) struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    /// The protocols the member supports, in its order of preference, with their metadata.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    /// Last join, sync, heartbeat or commit.
    pub last_heard: Instant,
    join_waiter: Option<oneshot::Sender<JoinOutcome>>,
    sync_waiter: Option<oneshot::Sender<SyncOutcome>>,
}

impl Member {
    pub(crate) fn metadata(&self, protocol: &str) -> Option<&Bytes> {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m)
    }

    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(name, _)| name == protocol)
    }

    fn awaiting_join(&self) -> bool {
        self.join_waiter.is_some()
    }

    /// When the member expires if not heard from. A member waiting in a join or a sync is
    /// alive: the rebalance timeout bounds those waits instead.
    fn session_deadline(&self) -> Option<Instant> {
        if self.join_waiter.is_some() || self.sync_waiter.is_some() {
            None
        } else {
            Some(self.last_heard + self.session_timeout)
        }
    }

    fn same_protocols(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }

    fn answer_join(&mut self, outcome: JoinOutcome) {
        if let Some(tx) = self.join_waiter.take() {
            // The client may have gone; then nobody is waiting for this answer.
            let _ = tx.send(outcome);
        }
    }

    fn answer_sync(&mut self, outcome: SyncOutcome) {
        if let Some(tx) = self.sync_waiter.take() {
            let _ = tx.send(outcome);
        }
    }
}

/// Extra delay of the first rebalance of an Empty group (Kafka's InitialDelayedJoin).
#[derive(Debug, Clone, Copy)]
struct InitialDelay {
    delay: Duration,
    remaining: Duration,
}

pub(crate) struct Group {
    pub id: String,
    pub state: GroupState,
    pub generation: i32,
    /// Set by the first member of an Empty group; None for a group that only commits offsets.
    pub protocol_type: Option<String>,
    /// The protocol chosen for the current generation.
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    /// Members in the order they joined.
    pub members: Vec<Member>,
    /// Members told MEMBER_ID_REQUIRED that have not rejoined yet, with their deadline.
    pending_join: HashMap<String, Instant>,
    /// Members of the current generation that have not sent their SyncGroup yet.
    pending_sync: HashSet<String>,
    /// PreparingRebalance: when the join phase ends whoever has rejoined.
    join_deadline: Option<Instant>,
    /// Some during the first rebalance of an Empty group.
    initial_delay: Option<InitialDelay>,
    new_member_added: bool,
    /// CompletingRebalance/Stable: when members that have not synced are removed.
    sync_deadline: Option<Instant>,
    /// The group as it became Stable or Empty, for the coordinator to store; taken by it.
    to_store: Option<GroupSnapshot>,
}

impl Group {
    pub(crate) fn new(id: String) -> Group {
        Group {
            id,
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: Vec::new(),
            pending_join: HashMap::new(),
            pending_sync: HashSet::new(),
            join_deadline: None,
            initial_delay: None,
            new_member_added: false,
            sync_deadline: None,
            to_store: None,
        }
    }

    /// A group as a coordinator stored it: Stable at its generation with its members and their
    /// assignments, or Empty. Sessions start now, so that members that come back to this
    /// coordinator carry on heartbeating, and one that never does expires as usual.
    pub(crate) fn restore(id: String, s: GroupSnapshot, now: Instant) -> Group {
        let mut g = Group::new(id);
        g.state = match s.state {
            StoredState::Empty => GroupState::Empty,
            StoredState::Stable => GroupState::Stable,
        };
        g.generation = s.generation;
        g.protocol_type = s.protocol_type;
        g.protocol_name = s.protocol_name;
        g.leader = s.leader;
        g.members = s
            .members
            .into_iter()
            .map(|m| Member {
                id: m.id,
                instance_id: m.instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                session_timeout: m.session_timeout,
                rebalance_timeout: m.rebalance_timeout,
                protocols: m.protocols,
                assignment: m.assignment,
                last_heard: now,
                join_waiter: None,
                sync_waiter: None,
            })
            .collect();
        g.check_invariants();
        g
    }

    /// The group as it is now, to store. Meaningful when Stable or Empty (the states that are
    /// stored); in other states it records the group as Stable.
    pub(crate) fn snapshot(&self) -> GroupSnapshot {
        GroupSnapshot {
            state: if self.state == GroupState::Empty {
                StoredState::Empty
            } else {
                StoredState::Stable
            },
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone(),
            members: self
                .members
                .iter()
                .map(|m| MemberSnapshot {
                    id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout: m.session_timeout,
                    rebalance_timeout: m.rebalance_timeout,
                    protocols: m.protocols.clone(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// The state to store since the last call, if the group became Stable or Empty meanwhile
    /// (the latest such state if it did more than once).
    pub(crate) fn take_to_store(&mut self) -> Option<GroupSnapshot> {
        self.to_store.take()
    }

    /// This coordinator gives the group up (another broker coordinates it now): whoever waits
    /// in a JoinGroup or SyncGroup is told to find the new coordinator.
    pub(crate) fn unload(mut self) {
        tracing::info!(group = %self.id, generation = self.generation, state = self.state.as_str(), "group unloaded: not coordinated here any more");
        for m in &mut self.members {
            let id = m.id.clone();
            m.answer_join(JoinOutcome::error(NOT_COORDINATOR, id));
            m.answer_sync(SyncOutcome::error(NOT_COORDINATOR));
        }
    }

    /// The group becomes a consumer group (an online upgrade): whoever waits in a JoinGroup
    /// or SyncGroup rejoins, now as a classic member of the consumer group.
    pub(crate) fn convert_out(mut self) {
        tracing::info!(group = %self.id, generation = self.generation, "classic group converted to a consumer group");
        for m in &mut self.members {
            let id = m.id.clone();
            m.answer_join(JoinOutcome::error(REBALANCE_IN_PROGRESS, id));
            m.answer_sync(SyncOutcome::error(REBALANCE_IN_PROGRESS));
        }
    }

    /// Starts a rebalance now (a group just converted back from a consumer group: the
    /// partitions of the members that left are nobody's).
    pub(crate) fn rebalance(&mut self, cx: &Cx) {
        if self.state != GroupState::PreparingRebalance {
            self.prepare_rebalance(cx);
        }
    }

    fn index(&self, member_id: &str) -> Option<usize> {
        self.members.iter().position(|m| m.id == member_id)
    }

    pub(crate) fn static_member(&self, instance_id: &str) -> Option<&str> {
        self.members
            .iter()
            .find(|m| m.instance_id.as_deref() == Some(instance_id))
            .map(|m| m.id.as_str())
    }

    fn is_leader(&self, member_id: &str) -> bool {
        self.leader.as_deref() == Some(member_id)
    }

    /// The largest rebalance timeout of the members.
    fn rebalance_timeout(&self) -> Duration {
        self.members
            .iter()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or(Duration::ZERO)
    }

    fn has_all_members_joined(&self) -> bool {
        self.members.iter().all(Member::awaiting_join) && self.pending_join.is_empty()
    }

    pub(crate) fn is_active(&self) -> bool {
        self.state != GroupState::Empty
    }

    /// A group that holds nothing a request could observe: never had a generation, no members,
    /// nobody pending. The coordinator forgets such groups (a JoinGroup that failed, a pending
    /// member that never came back); offsets, if any, are in the store.
    pub(crate) fn is_unused(&self) -> bool {
        self.state == GroupState::Empty
            && self.generation == 0
            && self.members.is_empty()
            && self.pending_join.is_empty()
    }

    pub(crate) fn uses_consumer_protocol(&self) -> bool {
        self.protocol_type.as_deref() == Some("consumer")
    }

    /// Whether a member with these protocols can be in the group: in an Empty group any
    /// non-empty protocol type and list will do; otherwise the type must be the group's and one
    /// of the protocols must be supported by every other member.
    fn supports_protocols(
        &self,
        protocol_type: &str,
        names: &[&str],
        joining: Option<&str>,
    ) -> bool {
        if protocol_type.is_empty() || names.is_empty() {
            return false;
        }
        if self.state == GroupState::Empty {
            return true;
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        names.iter().any(|name| {
            self.members
                .iter()
                .filter(|m| Some(m.id.as_str()) != joining)
                .all(|m| m.supports(name))
        })
    }

    /// Kafka's vote: among the protocols every member supports, each member votes for the first
    /// in its own list; the most votes win (a tie goes to the leader's preference).
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.first()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| self.members.iter().all(|m| m.supports(name)))
            .collect();
        let mut votes: HashMap<&str, usize> = HashMap::new();
        for m in &self.members {
            if let Some((name, _)) = m
                .protocols
                .iter()
                .find(|(n, _)| candidates.contains(&n.as_str()))
            {
                *votes.entry(name.as_str()).or_default() += 1;
            }
        }
        let leader_order: Vec<&str> = self
            .leader
            .as_deref()
            .and_then(|l| self.members.iter().find(|m| m.id == l))
            .unwrap_or(first)
            .protocols
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        let rank = |name: &str| {
            leader_order
                .iter()
                .position(|n| *n == name)
                .unwrap_or(usize::MAX)
        };
        candidates
            .iter()
            .copied()
            .max_by(|a, b| {
                let (va, vb) = (
                    votes.get(a).copied().unwrap_or(0),
                    votes.get(b).copied().unwrap_or(0),
                );
                // More votes first; on a tie, the one the leader prefers (lower rank) wins.
                va.cmp(&vb).then_with(|| rank(b).cmp(&rank(a)))
            })
            .map(str::to_owned)
    }

    fn transition(&mut self, to: GroupState) {
        use GroupState::*;
        let valid = match to {
            Empty => self.state == PreparingRebalance,
            PreparingRebalance => matches!(self.state, Empty | Stable | CompletingRebalance),
            CompletingRebalance => self.state == PreparingRebalance,
            Stable => self.state == CompletingRebalance,
        };
        debug_assert!(valid, "group {}: {:?} -> {:?}", self.id, self.state, to);
        tracing::debug!(group = %self.id, from = self.state.as_str(), to = to.as_str(), "group state");
        self.state = to;
        if matches!(to, Empty | Stable) {
            self.to_store = Some(self.snapshot());
        }
    }

    // ---- JoinGroup ----

    /// Whether one more member (not one of the pending ones) would take the group past its
    /// size: members and pending members count, as in Kafka.
    fn full(&self, cx: &Cx) -> bool {
        self.members.len() + self.pending_join.len() >= cx.max_size
    }

    pub(crate) fn join(&mut self, p: JoinParams, cx: &Cx) -> Reply<JoinOutcome> {
        let names: Vec<&str> = p.protocols.iter().map(|(n, _)| n.as_str()).collect();
        if p.member_id.is_empty() {
            if !self.supports_protocols(&p.protocol_type, &names, None) {
                return Reply::Now(JoinOutcome::error(INCONSISTENT_GROUP_PROTOCOL, ""));
            }
            let returning = p
                .instance_id
                .as_deref()
                .is_some_and(|i| self.static_member(i).is_some());
            if !returning && self.full(cx) {
                return Reply::Now(JoinOutcome::error(GROUP_MAX_SIZE_REACHED, ""));
            }
            let prefix = p.instance_id.as_deref().unwrap_or(&p.client_id);
            let new_id = format!("{prefix}-{}", crate::random_id());
            if let Some(instance_id) = p.instance_id.clone() {
                // A static member restarting takes over its instance's place under a new id.
                if let Some(old_id) = self.static_member(&instance_id).map(str::to_owned) {
                    self.replace_member_id(&old_id, &new_id);
                    return self.update_member_and_rebalance(&new_id, p, cx);
                }
                return self.add_member_and_rebalance(new_id, p, cx);
            }
            if p.require_known_member_id {
                self.pending_join
                    .insert(new_id.clone(), cx.now + p.session_timeout);
                return Reply::Now(JoinOutcome::error(MEMBER_ID_REQUIRED, new_id));
            }
            return self.add_member_and_rebalance(new_id, p, cx);
        }

        let member_id = p.member_id.clone();
        if !self.supports_protocols(&p.protocol_type, &names, Some(&member_id)) {
            return Reply::Now(JoinOutcome::error(INCONSISTENT_GROUP_PROTOCOL, member_id));
        }
        if self.pending_join.contains_key(&member_id) {
            return self.add_member_and_rebalance(member_id, p, cx);
        }
        if let Some(instance_id) = &p.instance_id {
            if self
                .static_member(instance_id)
                .is_some_and(|id| id != member_id)
            {
                return Reply::Now(JoinOutcome::error(FENCED_INSTANCE_ID, member_id));
            }
        }
        let Some(i) = self.index(&member_id) else {
            return Reply::Now(JoinOutcome::error(UNKNOWN_MEMBER_ID, member_id));
        };
        match self.state {
            GroupState::PreparingRebalance => self.update_member_and_rebalance(&member_id, p, cx),
            GroupState::CompletingRebalance => {
                if self.members[i].same_protocols(&p.protocols) {
                    // The member probably missed its JoinGroup answer: send it again.
                    self.members[i].last_heard = cx.now;
                    Reply::Now(self.join_outcome(&member_id))
                } else {
                    self.update_member_and_rebalance(&member_id, p, cx)
                }
            }
            GroupState::Stable => {
                if self.is_leader(&member_id) || !self.members[i].same_protocols(&p.protocols) {
                    // The leader rejoins to have the assignment recomputed (e.g. new topics).
                    self.update_member_and_rebalance(&member_id, p, cx)
                } else {
                    self.members[i].last_heard = cx.now;
                    Reply::Now(self.join_outcome(&member_id))
                }
            }
            GroupState::Empty => Reply::Now(JoinOutcome::error(UNKNOWN_MEMBER_ID, member_id)),
        }
    }

    fn add_member_and_rebalance(
        &mut self,
        member_id: String,
        p: JoinParams,
        cx: &Cx,
    ) -> Reply<JoinOutcome> {
        let (tx, rx) = oneshot::channel();
        if self.members.is_empty() {
            self.protocol_type = Some(p.protocol_type.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(member_id.clone());
        }
        self.pending_join.remove(&member_id);
        tracing::info!(group = %self.id, member = %member_id, "member joins");
        self.members.push(Member {
            id: member_id,
            instance_id: p.instance_id,
            client_id: p.client_id,
            client_host: p.client_host,
            session_timeout: p.session_timeout,
            rebalance_timeout: p.rebalance_timeout,
            protocols: p.protocols,
            assignment: Bytes::new(),
            last_heard: cx.now,
            join_waiter: Some(tx),
            sync_waiter: None,
        });
        if self.state == GroupState::PreparingRebalance {
            self.new_member_added = true;
        }
        self.prepare_rebalance_or_complete_join(cx);
        Reply::Later(rx)
    }

    fn update_member_and_rebalance(
        &mut self,
        member_id: &str,
        p: JoinParams,
        cx: &Cx,
    ) -> Reply<JoinOutcome> {
        let Some(i) = self.index(member_id) else {
            return Reply::Now(JoinOutcome::error(UNKNOWN_MEMBER_ID, member_id));
        };
        let (tx, rx) = oneshot::channel();
        let m = &mut self.members[i];
        // A join replaced by a newer one from the same member: its client has given up on it.
        m.answer_join(JoinOutcome::error(REBALANCE_IN_PROGRESS, member_id));
        m.join_waiter = Some(tx);
        m.protocols = p.protocols;
        m.session_timeout = p.session_timeout;
        m.rebalance_timeout = p.rebalance_timeout;
        m.client_id = p.client_id;
        m.client_host = p.client_host;
        m.last_heard = cx.now;
        self.prepare_rebalance_or_complete_join(cx);
        Reply::Later(rx)
    }

    /// Gives a static member's place to a new member id; waiters of the old id are fenced.
    fn replace_member_id(&mut self, old_id: &str, new_id: &str) {
        let Some(i) = self.index(old_id) else { return };
        let m = &mut self.members[i];
        m.answer_join(JoinOutcome::error(FENCED_INSTANCE_ID, old_id));
        m.answer_sync(SyncOutcome::error(FENCED_INSTANCE_ID));
        m.id = new_id.to_owned();
        if self.is_leader(old_id) {
            self.leader = Some(new_id.to_owned());
        }
        if self.pending_sync.remove(old_id) {
            self.pending_sync.insert(new_id.to_owned());
        }
        tracing::info!(group = %self.id, old = %old_id, new = %new_id, "static member replaced");
    }

    fn prepare_rebalance_or_complete_join(&mut self, cx: &Cx) {
        match self.state {
            GroupState::PreparingRebalance => self.maybe_complete_join(cx),
            _ => self.prepare_rebalance(cx),
        }
    }

    fn prepare_rebalance(&mut self, cx: &Cx) {
        debug_assert!(self.state != GroupState::PreparingRebalance);
        if self.state == GroupState::CompletingRebalance {
            // Members waiting for their assignment must rejoin instead.
            for m in &mut self.members {
                m.assignment = Bytes::new();
                m.answer_sync(SyncOutcome::error(REBALANCE_IN_PROGRESS));
            }
        }
        self.pending_sync.clear();
        self.sync_deadline = None;
        self.new_member_added = false;
        let initial = self.state == GroupState::Empty;
        if initial {
            let delay = cx.initial_rebalance_delay;
            self.initial_delay = Some(InitialDelay {
                delay,
                remaining: self.rebalance_timeout().saturating_sub(delay),
            });
            self.join_deadline = Some(cx.now + delay);
        } else {
            self.initial_delay = None;
            self.join_deadline = Some(cx.now + self.rebalance_timeout());
        }
        tracing::info!(group = %self.id, generation = self.generation, "preparing rebalance");
        self.transition(GroupState::PreparingRebalance);
        if !initial {
            self.maybe_complete_join(cx);
        }
    }

    /// Ends the join phase early once every member has rejoined (never during the initial
    /// delay, which exists to let more members in).
    fn maybe_complete_join(&mut self, cx: &Cx) {
        if self.state == GroupState::PreparingRebalance
            && self.initial_delay.is_none()
            && self.has_all_members_joined()
        {
            self.complete_join(cx);
        }
    }

    fn complete_join(&mut self, cx: &Cx) {
        debug_assert_eq!(self.state, GroupState::PreparingRebalance);
        let gone: Vec<String> = self
            .members
            .iter()
            .filter(|m| !m.awaiting_join())
            .map(|m| m.id.clone())
            .collect();
        for id in gone {
            tracing::info!(group = %self.id, member = %id, "member did not rejoin in time; removed");
            self.remove_member(&id, UNKNOWN_MEMBER_ID);
        }
        let previous = self.generation;
        self.generation += 1;
        debug_assert!(self.generation > previous, "generation only grows");
        self.join_deadline = None;
        self.initial_delay = None;
        self.new_member_added = false;
        if self.members.is_empty() {
            self.protocol_name = None;
            self.transition(GroupState::Empty);
            tracing::info!(group = %self.id, generation = self.generation, "group is empty");
            return;
        }
        let protocol = self.select_protocol();
        debug_assert!(
            protocol.is_some(),
            "members of group {} share no protocol",
            self.id
        );
        self.protocol_name =
            protocol.or_else(|| self.members[0].protocols.first().map(|(n, _)| n.clone()));
        if self.leader.as_deref().and_then(|l| self.index(l)).is_none() {
            self.leader = Some(self.members[0].id.clone());
        }
        self.transition(GroupState::CompletingRebalance);
        self.pending_sync = self.members.iter().map(|m| m.id.clone()).collect();
        self.sync_deadline = Some(cx.now + self.rebalance_timeout());
        tracing::info!(
            group = %self.id,
            generation = self.generation,
            protocol = self.protocol_name.as_deref().unwrap_or(""),
            members = self.members.len(),
            "rebalance: join phase complete"
        );
        let ids: Vec<String> = self.members.iter().map(|m| m.id.clone()).collect();
        for id in ids {
            let outcome = self.join_outcome(&id);
            if let Some(i) = self.index(&id) {
                let m = &mut self.members[i];
                m.last_heard = cx.now;
                m.answer_join(outcome);
            }
        }
    }

    /// The current generation as a JoinGroup answer for `member_id`.
    fn join_outcome(&self, member_id: &str) -> JoinOutcome {
        let protocol = self.protocol_name.clone().unwrap_or_default();
        let members = if self.is_leader(member_id) {
            self.members
                .iter()
                .map(|m| JoinedMember {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    metadata: m.metadata(&protocol).cloned().unwrap_or_default(),
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinOutcome {
            error: NONE,
            member_id: member_id.to_owned(),
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            members,
        }
    }

    // ---- leaving and expiring ----

    /// Takes a member out, answering whatever it waits for with `error`.
    fn remove_member(&mut self, member_id: &str, error: i16) -> bool {
        let Some(i) = self.index(member_id) else {
            return false;
        };
        let mut m = self.members.remove(i);
        m.answer_join(JoinOutcome::error(error, member_id));
        m.answer_sync(SyncOutcome::error(error));
        if self.is_leader(member_id) {
            self.leader = self.members.first().map(|m| m.id.clone());
        }
        self.pending_sync.remove(member_id);
        true
    }

    /// Removes a member and lets the group react: a rebalance, or the end of one.
    fn remove_member_and_rebalance(&mut self, member_id: &str, cx: &Cx) {
        if !self.remove_member(member_id, UNKNOWN_MEMBER_ID) {
            return;
        }
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => self.prepare_rebalance(cx),
            GroupState::PreparingRebalance => self.maybe_complete_join(cx),
            GroupState::Empty => {}
        }
    }

    /// LeaveGroup for one member identity; returns its error code.
    pub(crate) fn leave(&mut self, member_id: &str, instance_id: Option<&str>, cx: &Cx) -> i16 {
        let target = match instance_id {
            Some(instance_id) => match self.static_member(instance_id) {
                None => return UNKNOWN_MEMBER_ID,
                Some(existing) if !member_id.is_empty() && existing != member_id => {
                    return FENCED_INSTANCE_ID
                }
                Some(existing) => existing.to_owned(),
            },
            None => {
                if self.pending_join.remove(member_id).is_some() {
                    self.maybe_complete_join(cx);
                    return NONE;
                }
                if self.index(member_id).is_none() {
                    return UNKNOWN_MEMBER_ID;
                }
                member_id.to_owned()
            }
        };
        tracing::info!(group = %self.id, member = %target, "member leaves");
        self.remove_member_and_rebalance(&target, cx);
        NONE
    }

    /// Acts on every deadline that has passed: expired pending members and sessions, the end
    /// of a join phase, members that never synced.
    pub(crate) fn poll(&mut self, cx: &Cx) {
        let expired: Vec<String> = self
            .pending_join
            .iter()
            .filter(|(_, deadline)| **deadline <= cx.now)
            .map(|(id, _)| id.clone())
            .collect();
        if !expired.is_empty() {
            for id in &expired {
                self.pending_join.remove(id);
            }
            self.maybe_complete_join(cx);
        }

        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.session_deadline().is_some_and(|d| d <= cx.now))
            .map(|m| m.id.clone())
            .collect();
        for id in expired {
            let still_expired = self
                .index(&id)
                .and_then(|i| self.members[i].session_deadline())
                .is_some_and(|d| d <= cx.now);
            if still_expired {
                tracing::info!(group = %self.id, member = %id, "member session expired");
                self.remove_member_and_rebalance(&id, cx);
            }
        }

        if self.state == GroupState::PreparingRebalance
            && self.join_deadline.is_some_and(|d| d <= cx.now)
        {
            match self.initial_delay {
                Some(init) if self.new_member_added && !init.remaining.is_zero() => {
                    // Members keep arriving: wait a little longer, within the rebalance timeout.
                    self.new_member_added = false;
                    let delay = cx.initial_rebalance_delay.min(init.remaining);
                    self.initial_delay = Some(InitialDelay {
                        delay,
                        remaining: init.remaining.saturating_sub(init.delay),
                    });
                    self.join_deadline = Some(cx.now + delay);
                }
                _ => {
                    self.initial_delay = None;
                    self.complete_join(cx);
                }
            }
        }

        if matches!(
            self.state,
            GroupState::CompletingRebalance | GroupState::Stable
        ) && self.sync_deadline.is_some_and(|d| d <= cx.now)
        {
            self.sync_deadline = None;
            if !self.pending_sync.is_empty() {
                let late: Vec<String> = self.pending_sync.drain().collect();
                for id in &late {
                    tracing::info!(group = %self.id, member = %id, "member did not sync in time; removed");
                    self.remove_member(id, UNKNOWN_MEMBER_ID);
                }
                self.prepare_rebalance(cx);
            }
        }
        self.check_invariants();
    }

    /// The earliest deadline [`Group::poll`] will act on.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let mut next = self.pending_join.values().copied().min();
        let mut consider = |d: Option<Instant>| {
            if let Some(d) = d {
                next = Some(next.map_or(d, |n: Instant| n.min(d)));
            }
        };
        for m in &self.members {
            consider(m.session_deadline());
        }
        if self.state == GroupState::PreparingRebalance {
            consider(self.join_deadline);
        }
        if matches!(
            self.state,
            GroupState::CompletingRebalance | GroupState::Stable
        ) {
            consider(self.sync_deadline);
        }
        next
    }

    // ---- SyncGroup, Heartbeat, OffsetCommit ----

    fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<usize, i16> {
        if let Some(instance_id) = instance_id {
            match self.static_member(instance_id) {
                None => return Err(UNKNOWN_MEMBER_ID),
                Some(existing) if existing != member_id => return Err(FENCED_INSTANCE_ID),
                Some(_) => {}
            }
        }
        self.index(member_id).ok_or(UNKNOWN_MEMBER_ID)
    }

    pub(crate) fn sync(&mut self, p: SyncParams, cx: &Cx) -> Reply<SyncOutcome> {
        let i = match self.validate_member(&p.member_id, p.instance_id.as_deref()) {
            Ok(i) => i,
            Err(e) => return Reply::Now(SyncOutcome::error(e)),
        };
        if p.generation != self.generation {
            return Reply::Now(SyncOutcome::error(ILLEGAL_GENERATION));
        }
        if p.protocol_type.is_some() && p.protocol_type != self.protocol_type {
            return Reply::Now(SyncOutcome::error(INCONSISTENT_GROUP_PROTOCOL));
        }
        if p.protocol_name.is_some() && p.protocol_name != self.protocol_name {
            return Reply::Now(SyncOutcome::error(INCONSISTENT_GROUP_PROTOCOL));
        }
        match self.state {
            GroupState::Empty => Reply::Now(SyncOutcome::error(UNKNOWN_MEMBER_ID)),
            GroupState::PreparingRebalance => Reply::Now(SyncOutcome::error(REBALANCE_IN_PROGRESS)),
            GroupState::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                let m = &mut self.members[i];
                m.answer_sync(SyncOutcome::error(REBALANCE_IN_PROGRESS));
                m.sync_waiter = Some(tx);
                m.last_heard = cx.now;
                self.pending_sync.remove(&p.member_id);
                if self.pending_sync.is_empty() {
                    self.sync_deadline = None;
                }
                if self.is_leader(&p.member_id) {
                    let assignments: HashMap<String, Bytes> = p.assignments.into_iter().collect();
                    for m in &mut self.members {
                        m.assignment = assignments.get(&m.id).cloned().unwrap_or_default();
                    }
                    self.transition(GroupState::Stable);
                    tracing::info!(group = %self.id, generation = self.generation, "rebalance complete: stable");
                    let outcome = SyncOutcome {
                        error: NONE,
                        protocol_type: self.protocol_type.clone(),
                        protocol_name: self.protocol_name.clone(),
                        assignment: Bytes::new(),
                    };
                    for m in &mut self.members {
                        if m.sync_waiter.is_some() {
                            m.last_heard = cx.now;
                            let assignment = m.assignment.clone();
                            m.answer_sync(SyncOutcome {
                                assignment,
                                ..outcome.clone()
                            });
                        }
                    }
                }
                Reply::Later(rx)
            }
            GroupState::Stable => {
                self.pending_sync.remove(&p.member_id);
                if self.pending_sync.is_empty() {
                    self.sync_deadline = None;
                }
                let m = &mut self.members[i];
                m.last_heard = cx.now;
                Reply::Now(SyncOutcome {
                    error: NONE,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol_name.clone(),
                    assignment: m.assignment.clone(),
                })
            }
        }
    }

    pub(crate) fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        cx: &Cx,
    ) -> i16 {
        let i = match self.validate_member(member_id, instance_id) {
            Ok(i) => i,
            Err(e) => return e,
        };
        if generation != self.generation {
            return ILLEGAL_GENERATION;
        }
        match self.state {
            GroupState::Empty => UNKNOWN_MEMBER_ID,
            GroupState::PreparingRebalance => {
                self.members[i].last_heard = cx.now;
                REBALANCE_IN_PROGRESS
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.members[i].last_heard = cx.now;
                NONE
            }
        }
    }

    /// Kafka's ClassicGroup.validateOffsetCommit; a valid member's commit also counts as a sign
    /// of life.
    pub(crate) fn validate_offset_commit(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        cx: &Cx,
    ) -> Result<(), i16> {
        if generation < 0 && self.state == GroupState::Empty {
            // Admin tools and consumers without group management commit to empty groups.
            return Ok(());
        }
        if generation >= 0 || !member_id.is_empty() || instance_id.is_some() {
            let i = self.validate_member(member_id, instance_id)?;
            if generation != self.generation {
                return Err(ILLEGAL_GENERATION);
            }
            self.members[i].last_heard = cx.now;
        } else if self.state != GroupState::Empty {
            return Err(UNKNOWN_MEMBER_ID);
        }
        if self.state == GroupState::CompletingRebalance {
            // The member has its new generation but not its assignment yet.
            return Err(REBALANCE_IN_PROGRESS);
        }
        Ok(())
    }

    /// Kafka's checks of a transactional offset commit (TxnOffsetCommit v3+, KIP-447): a
    /// member that names itself must be one, at the group's generation if it names one. No
    /// rebalance check: the transaction's commit or abort settles the offsets later.
    pub(crate) fn validate_txn_offset_commit(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        cx: &Cx,
    ) -> Result<(), i16> {
        if !member_id.is_empty() || instance_id.is_some() {
            let i = self.validate_member(member_id, instance_id)?;
            self.members[i].last_heard = cx.now;
        }
        if generation >= 0 && generation != self.generation {
            return Err(ILLEGAL_GENERATION);
        }
        Ok(())
    }

    /// Topics the members subscribe to, from their ConsumerProtocolSubscription metadata; None
    /// when unknown (not the consumer protocol, no protocol chosen yet, or metadata that does
    /// not parse).
    pub(crate) fn subscribed_topics(&self) -> Option<HashSet<String>> {
        if !self.uses_consumer_protocol() {
            return None;
        }
        if self.members.is_empty() {
            return Some(HashSet::new());
        }
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = HashSet::new();
        for m in &self.members {
            // A member that joined since the protocol was chosen may not offer it yet.
            let Some(metadata) = m.metadata(protocol) else {
                continue;
            };
            topics.extend(crate::embedded::decode_subscription(metadata)?.topics);
        }
        Some(topics)
    }

    /// Whether deleting the offsets of `topic` must be refused (Kafka's isSubscribedToTopic).
    pub(crate) fn is_subscribed_to(
        &self,
        topic: &str,
        subscribed: &Option<HashSet<String>>,
    ) -> bool {
        match subscribed {
            Some(topics) => topics.contains(topic),
            None => self.uses_consumer_protocol(),
        }
    }

    /// The invariants every operation leaves behind.
    pub(crate) fn check_invariants(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        let leader_is_member = self
            .leader
            .as_deref()
            .is_some_and(|l| self.index(l).is_some());
        debug_assert_eq!(
            leader_is_member,
            !self.members.is_empty(),
            "group {}: the leader is a member, and a group with members has one",
            self.id
        );
        debug_assert!(self.generation >= 0);
        match self.state {
            GroupState::Empty => debug_assert!(
                self.members.is_empty(),
                "group {}: Empty with members",
                self.id
            ),
            GroupState::CompletingRebalance | GroupState::Stable => {
                debug_assert!(
                    !self.members.is_empty(),
                    "group {}: {:?} without members",
                    self.id,
                    self.state
                );
                debug_assert!(
                    self.protocol_name.is_some(),
                    "group {}: no protocol",
                    self.id
                );
            }
            GroupState::PreparingRebalance => debug_assert!(self.join_deadline.is_some()),
        }
        for m in &self.members {
            debug_assert!(
                m.join_waiter.is_none() || self.state == GroupState::PreparingRebalance,
                "group {}: join waiter outside PreparingRebalance",
                self.id
            );
            debug_assert!(
                m.sync_waiter.is_none() || self.state == GroupState::CompletingRebalance,
                "group {}: sync waiter outside CompletingRebalance",
                self.id
            );
            if let Some(instance_id) = &m.instance_id {
                debug_assert_eq!(
                    self.static_member(instance_id),
                    Some(m.id.as_str()),
                    "one member per instance id"
                );
            }
        }
        debug_assert!(self.pending_sync.iter().all(|id| self.index(id).is_some()));
        debug_assert!(self.pending_join.keys().all(|id| self.index(id).is_none()));
    }
}
