//! Online migration between the classic protocol and the consumer protocol (KIP-848), as Kafka
//! 4.1 does it by default (`group.consumer.migration.policy=bidirectional`), so that an
//! application's instances can be restarted one by one with `group.protocol=consumer`, and back:
//!
//! - Upgrade: the first ConsumerGroupHeartbeat to a classic group with members (of the
//!   `consumer` protocol type) turns it into a consumer group. Each classic member keeps its
//!   generation as its member epoch and its assignment as its target, and stays a *classic
//!   member* of the consumer group: it goes on with JoinGroup, SyncGroup and Heartbeat, which
//!   this module answers from the consumer group (a JoinGroup is a heartbeat with the
//!   subscription and owned partitions of its metadata; SyncGroup hands out the member's current
//!   assignment; Heartbeat says REBALANCE_IN_PROGRESS when the member must rejoin to move on).
//!   Classic members of a consumer group that still rebalance are told to rejoin.
//! - Downgrade: when the last member speaking the consumer protocol leaves (or expires) and
//!   classic members remain, the group becomes a classic group again, at the group epoch as its
//!   generation, and rebalances.
//! - Empty groups change kind on the first member of the other protocol (in [`crate`]).

use kafka_protocol::messages::JoinGroupRequest;
use tokio::time::Instant;

use crate::assignor::Assignment;
use crate::codes::*;
use crate::consumer::{
    topic_names, Answer, ClassicMember, ConsumerGroup, ConsumerMember, Heartbeat, MemberState,
    Topics,
};
use crate::embedded::{decode_assignment, decode_subscription, encode_assignment, versioned};
use crate::group::{Group, JoinOutcome, SyncOutcome};
use crate::snapshot::{GroupSnapshot, MemberSnapshot, StoredState};

fn by_id(parts: &[(String, Vec<i32>)], topics: &Topics) -> Assignment {
    let mut a = Assignment::new();
    for (name, ps) in parts {
        if let Some((id, count)) = topics.get(name) {
            let set = a.entry(*id).or_default();
            set.extend(ps.iter().copied().filter(|p| *p >= 0 && p < count));
        }
    }
    a.retain(|_, ps| !ps.is_empty());
    a
}

/// The consumer group a classic group with members becomes (None when its members' metadata
/// is not the consumer protocol's). Waiters in its JoinGroup or SyncGroup are the caller's to
/// answer.
pub(crate) fn upgrade(g: &Group, topics: &Topics, now_ms: i64) -> Option<ConsumerGroup> {
    if !g.uses_consumer_protocol() {
        return None;
    }
    let protocol = g.protocol_name.clone();
    let mut c = ConsumerGroup {
        group_epoch: g.generation,
        target_epoch: g.generation,
        ..ConsumerGroup::default()
    };
    for m in &g.members {
        let metadata = protocol
            .as_deref()
            .and_then(|p| m.metadata(p))
            .or_else(|| m.protocols.first().map(|(_, md)| md))?;
        let sub = decode_subscription(metadata)?;
        let assigned = by_id(&decode_assignment(&m.assignment)?, topics);
        c.target.insert(m.id.clone(), assigned.clone());
        c.members.insert(
            m.id.clone(),
            ConsumerMember {
                member_id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                rack_id: sub.rack_id,
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed: sub.topics.into_iter().collect(),
                subscribed_regex: None,
                server_assignor: None,
                rebalance_timeout_ms: m.rebalance_timeout.as_millis() as i32,
                epoch: g.generation,
                previous_epoch: g.generation,
                state: MemberState::Stable,
                assigned,
                revoking: Assignment::new(),
                last_heard_ms: now_ms,
                revoke_deadline_ms: None,
                left_static: false,
                classic: Some(ClassicMember {
                    session_timeout_ms: m.session_timeout.as_millis() as i32,
                    protocols: m.protocols.clone(),
                }),
            },
        );
    }
    // The metadata the last generation saw, so that only real changes move the epoch.
    c.metadata = c
        .members
        .values()
        .flat_map(|m| m.subscribed.iter())
        .filter_map(|n| topics.get(n).copied())
        .collect();
    debug_assert!(
        c.exclusive(),
        "a classic generation never assigns a partition twice"
    );
    Some(c)
}

/// The classic group a consumer group of classic members only becomes: Stable at their epoch
/// with their current assignments, for the caller to rebalance at once (the partitions
/// of the members that left are nobody's yet).
pub(crate) fn downgrade(
    id: &str,
    c: &ConsumerGroup,
    topics: &Topics,
    now: Instant,
) -> Option<Group> {
    let names = topic_names(topics);
    let first = c.members.values().next()?.classic.as_ref()?;
    let protocol = first.protocols.first()?.0.clone();
    let mut members = Vec::new();
    for m in c.members.values() {
        let classic = m.classic.as_ref()?;
        let version = classic
            .protocols
            .iter()
            .find(|(n, _)| *n == protocol)
            .and_then(|(_, md)| versioned(md))
            .map_or(0, |(v, _)| v);
        members.push(MemberSnapshot {
            id: m.member_id.clone(),
            instance_id: m.instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            session_timeout: std::time::Duration::from_millis(
                classic.session_timeout_ms.max(0) as u64
            ),
            rebalance_timeout: std::time::Duration::from_millis(
                m.rebalance_timeout_ms.max(0) as u64
            ),
            protocols: classic.protocols.clone(),
            assignment: encode_assignment(version, &m.assigned, &names),
        });
    }
    let snapshot = GroupSnapshot {
        state: StoredState::Stable,
        // The generation the members are at (the leave that brought the group here moved the
        // group epoch past it): their next heartbeat says REBALANCE_IN_PROGRESS, not
        // ILLEGAL_GENERATION.
        generation: c
            .members
            .values()
            .map(|m| m.epoch)
            .max()
            .unwrap_or(c.group_epoch),
        protocol_type: Some("consumer".to_string()),
        protocol_name: Some(protocol),
        leader: members.first().map(|m| m.id.clone()),
        members,
    };
    Some(Group::restore(id.to_string(), snapshot, now))
}

/// A classic member's JoinGroup to a consumer group: the heartbeat it amounts to.
pub(crate) fn join_heartbeat(
    req: &JoinGroupRequest,
    member_id: &str,
    client_id: &str,
    client_host: &str,
    topics: &Topics,
) -> Result<(Heartbeat, ClassicMember), i16> {
    if req.protocol_type.as_str() != "consumer" || req.protocols.is_empty() {
        return Err(INCONSISTENT_GROUP_PROTOCOL);
    }
    let sub = decode_subscription(&req.protocols[0].metadata).ok_or(INCONSISTENT_GROUP_PROTOCOL)?;
    let rebalance = if req.rebalance_timeout_ms > 0 {
        req.rebalance_timeout_ms
    } else {
        req.session_timeout_ms
    };
    let hb = Heartbeat {
        member_id: member_id.to_string(),
        member_epoch: 0,
        instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
        rack_id: sub.rack_id,
        rebalance_timeout_ms: rebalance,
        subscribed: Some(sub.topics),
        subscribed_regex: None,
        server_assignor: None,
        owned: Some(by_id(&sub.owned, topics)),
        client_id: client_id.to_string(),
        client_host: client_host.to_string(),
    };
    let classic = ClassicMember {
        session_timeout_ms: req.session_timeout_ms,
        protocols: req
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect(),
    };
    Ok((hb, classic))
}

/// The JoinGroup answer for a classic member of a consumer group: not the leader (the broker
/// assigns), its epoch as the generation, the first protocol it offered.
pub(crate) fn join_outcome(a: &Answer, classic: &ClassicMember) -> JoinOutcome {
    if a.error != NONE {
        return JoinOutcome::error(a.error, a.member_id.clone());
    }
    JoinOutcome {
        error: NONE,
        member_id: a.member_id.clone(),
        generation: a.member_epoch,
        protocol_type: Some("consumer".to_string()),
        protocol_name: classic.protocols.first().map(|(n, _)| n.clone()),
        leader: String::new(),
        members: Vec::new(),
    }
}

/// The SyncGroup answer for a classic member of a consumer group.
pub(crate) fn sync_outcome(
    c: &ConsumerGroup,
    member_id: &str,
    assigned: Result<Assignment, i16>,
    protocol_name: Option<&str>,
    topics: &Topics,
) -> SyncOutcome {
    let assigned = match assigned {
        Ok(a) => a,
        Err(e) => return SyncOutcome::error(e),
    };
    let Some(classic) = c.members.get(member_id).and_then(|m| m.classic.as_ref()) else {
        return SyncOutcome::error(UNKNOWN_MEMBER_ID);
    };
    let protocol = classic.protocols.first().map(|(n, _)| n.clone());
    if protocol_name.is_some_and(|p| Some(p) != protocol.as_deref()) {
        return SyncOutcome::error(INCONSISTENT_GROUP_PROTOCOL);
    }
    let version = classic
        .protocols
        .first()
        .and_then(|(_, md)| versioned(md))
        .map_or(0, |(v, _)| v);
    SyncOutcome {
        error: NONE,
        protocol_type: Some("consumer".to_string()),
        protocol_name: protocol,
        assignment: encode_assignment(version, &assigned, &topic_names(topics)),
    }
}

use crate::GroupCoordinator;

/// Classic requests to consumer groups. Each returns `None` when the group is not a consumer
/// group here (the classic path answers), else the answer.
impl GroupCoordinator {
    pub(crate) async fn join_consumer_group(
        &self,
        group_id: &str,
        req: &JoinGroupRequest,
        version: i16,
        client_id: &str,
        client_host: &str,
    ) -> Option<JoinOutcome> {
        let topics = self.inner.catalog();
        let outcome = {
            let now_ms = self.inner.now_ms();
            let mut state = self.inner.lock();
            if !state.owns(group_id) {
                return None;
            }
            let c = state.consumers.get_mut(group_id)?;
            if c.group.members.is_empty() {
                // An empty consumer group becomes a classic group on the classic path.
                return None;
            }
            let mut member_id = req.member_id.to_string();
            let max = self.inner.config.consumer_max_size;
            if !c
                .group
                .admits(&member_id, req.group_instance_id.as_deref(), max)
            {
                return Some(JoinOutcome::error(GROUP_MAX_SIZE_REACHED, member_id));
            }
            if member_id.is_empty() {
                member_id = format!("{client_id}-{}", crate::random_id());
                if version >= 4 && req.group_instance_id.is_none() {
                    return Some(JoinOutcome::error(MEMBER_ID_REQUIRED, member_id));
                }
            }
            // A member id the group does not know (one handed out with MEMBER_ID_REQUIRED, or
            // a member that expired) joins as a new classic member, as in Kafka.
            let (hb, classic) =
                match join_heartbeat(req, &member_id, client_id, client_host, &topics) {
                    Ok(x) => x,
                    Err(e) => return Some(JoinOutcome::error(e, member_id)),
                };
            let answer = c.group.classic_join(hb, classic.clone(), &topics, now_ms);
            state.settle_consumer(group_id);
            self.inner.rearm(&mut state, group_id);
            join_outcome(&answer, &classic)
        };
        // Answered once the state it saw is stored (as a consumer group heartbeat).
        if !self.inner.persist(group_id).await {
            return Some(JoinOutcome::error(
                COORDINATOR_NOT_AVAILABLE,
                outcome.member_id,
            ));
        }
        Some(outcome)
    }

    pub(crate) fn sync_consumer_group(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
        protocol_name: Option<&str>,
    ) -> Option<SyncOutcome> {
        let topics = self.inner.catalog();
        let now_ms = self.inner.now_ms();
        let mut state = self.inner.lock();
        if !state.owns(group_id) {
            return None;
        }
        let c = state.consumers.get_mut(group_id)?;
        let assigned = c.group.classic_check(member_id, generation, now_ms, true);
        let outcome = sync_outcome(&c.group, member_id, assigned, protocol_name, &topics);
        self.inner.rearm(&mut state, group_id);
        Some(outcome)
    }

    pub(crate) fn heartbeat_consumer_group(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
    ) -> Option<i16> {
        let now_ms = self.inner.now_ms();
        let mut state = self.inner.lock();
        if !state.owns(group_id) {
            return None;
        }
        let c = state.consumers.get_mut(group_id)?;
        let error = match c.group.classic_check(member_id, generation, now_ms, false) {
            Ok(_) => NONE,
            Err(e) => e,
        };
        self.inner.rearm(&mut state, group_id);
        Some(error)
    }

    /// LeaveGroup of classic members of a consumer group: one error per member.
    pub(crate) async fn leave_consumer_group(
        &self,
        group_id: &str,
        members: &[String],
    ) -> Option<Vec<i16>> {
        let errors = {
            let mut state = self.inner.lock();
            if !state.owns(group_id) {
                return None;
            }
            let c = state.consumers.get_mut(group_id)?;
            let errors: Vec<i16> = members.iter().map(|m| c.group.classic_leave(m)).collect();
            state.settle_consumer(group_id);
            self.inner.maybe_downgrade(&mut state, group_id);
            self.inner.rearm(&mut state, group_id);
            errors
        };
        if !self.inner.persist(group_id).await {
            return Some(
                errors
                    .into_iter()
                    .map(|e| {
                        if e == NONE {
                            COORDINATOR_NOT_AVAILABLE
                        } else {
                            e
                        }
                    })
                    .collect(),
            );
        }
        Some(errors)
    }
}
