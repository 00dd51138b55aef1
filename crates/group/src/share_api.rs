//! The share group APIs (KIP-932) on [`GroupCoordinator`]: ShareGroupHeartbeat and
//! ShareGroupDescribe. The group logic is [`crate::share`]; this keeps share groups apart from
//! classic and consumer groups (a group id names one kind), and stores a share group when it
//! is created or its epoch moves, so that the next coordinator goes on from a higher epoch.

use kafka_protocol::messages::share_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member, TopicPartitions as DescribedTopic,
};
use kafka_protocol::messages::share_group_heartbeat_response::{
    Assignment as HeartbeatAssignment, TopicPartitions,
};
use kafka_protocol::messages::{
    ShareGroupDescribeRequest, ShareGroupDescribeResponse, ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::assignor::Assignment;
use crate::codes::*;
use crate::consumer::Topics;
use crate::share::{ShareAnswer, ShareHeartbeat};
use crate::{GroupCoordinator, Write, GROUP_AUTHORIZED_OPERATIONS};

fn heartbeat_error(error: i16, message: impl Into<String>) -> ShareGroupHeartbeatResponse {
    let mut resp = ShareGroupHeartbeatResponse::default();
    resp.error_code = error;
    let message = message.into();
    resp.error_message = (!message.is_empty()).then(|| StrBytes::from_string(message));
    resp.member_epoch = -1;
    resp
}

impl GroupCoordinator {
    /// One ShareGroupHeartbeat. `topics` is the catalog now (names, ids, partition counts).
    pub async fn share_group_heartbeat(
        &self,
        req: ShareGroupHeartbeatRequest,
        client_id: &str,
        client_host: &str,
        topics: &Topics,
    ) -> ShareGroupHeartbeatResponse {
        let group_id = req.group_id.to_string();
        if group_id.is_empty() {
            return heartbeat_error(INVALID_REQUEST, "GroupId can't be empty.");
        }
        let hb = ShareHeartbeat {
            member_id: req.member_id.to_string(),
            member_epoch: req.member_epoch,
            rack_id: req.rack_id.as_ref().map(|s| s.to_string()),
            subscribed: req
                .subscribed_topic_names
                .as_ref()
                .map(|ns| ns.iter().map(|n| n.to_string()).collect()),
            client_id: client_id.to_string(),
            client_host: client_host.to_string(),
        };
        if let Err((error, message)) = hb.validate() {
            return heartbeat_error(error, message);
        }
        if let Err(error) = self.inner.load(&group_id).await {
            return heartbeat_error(error, "");
        }
        let member_id = hb.member_id.clone();
        let answer = match self.apply_share_heartbeat(&group_id, hb, topics) {
            Ok(answer) => answer,
            Err((error, message)) => return heartbeat_error(error, message),
        };
        if !self.inner.persist(&group_id).await {
            return heartbeat_error(COORDINATOR_NOT_AVAILABLE, "");
        }
        let mut resp = ShareGroupHeartbeatResponse::default();
        resp.member_id = Some(StrBytes::from_string(member_id));
        resp.member_epoch = answer.member_epoch;
        resp.heartbeat_interval_ms = self.inner.config.share_heartbeat_interval.as_millis() as i32;
        resp.assignment = answer.assignment.map(|a| {
            let mut out = HeartbeatAssignment::default();
            out.topic_partitions = a
                .into_iter()
                .map(|(t, ps)| {
                    let mut tp = TopicPartitions::default();
                    tp.topic_id = uuid::Uuid::from_bytes(t);
                    tp.partitions = ps.into_iter().collect();
                    tp
                })
                .collect();
            out
        });
        resp
    }

    /// Applies a heartbeat under the coordinator's lock; queues the group's stored form when
    /// its epoch moved.
    fn apply_share_heartbeat(
        &self,
        group_id: &str,
        hb: ShareHeartbeat,
        topics: &Topics,
    ) -> Result<ShareAnswer, (i16, String)> {
        let now_ms = self.inner.now_ms();
        let session_ms = self.inner.config.share_session_timeout.as_millis() as i64;
        let max = self.inner.config.share_max_size;
        let mut state = self.inner.lock();
        if !state.owns(group_id) {
            return Err((NOT_COORDINATOR, String::new()));
        }
        if state.groups.contains_key(group_id)
            || state.consumers.contains_key(group_id)
            || state.streams.contains_key(group_id)
        {
            return Err((
                GROUP_ID_NOT_FOUND,
                format!("Group {group_id} is not a share group."),
            ));
        }
        let exists = state.shares.contains_key(group_id);
        if !exists && hb.member_epoch != 0 {
            return Err((
                GROUP_ID_NOT_FOUND,
                format!("Share group {group_id} not found."),
            ));
        }
        let mut group = state.shares.get(group_id).cloned().unwrap_or_default();
        if hb.member_epoch == 0 && !group.admits(&hb.member_id, max) {
            return Err((
                GROUP_MAX_SIZE_REACHED,
                format!("The share group has reached its maximum capacity of {max} members."),
            ));
        }
        let epoch = group.group_epoch;
        let answer = group.heartbeat(hb, topics, now_ms, session_ms)?;
        if !exists || group.group_epoch != epoch {
            state.queue(group_id, Write::Save(group.encode()));
        }
        state.absent.remove(group_id);
        state.shares.insert(group_id.to_string(), group);
        Ok(answer)
    }

    /// Whether `group_id` is a share group this coordinator knows (loading it first).
    pub async fn is_share_group(&self, group_id: &str) -> bool {
        if self.inner.load(group_id).await.is_err() {
            return false;
        }
        self.inner.lock().shares.contains_key(group_id)
    }

    /// ShareGroupDescribe. `topics` is the catalog, for topic names.
    pub async fn share_group_describe(
        &self,
        req: ShareGroupDescribeRequest,
        topics: &Topics,
    ) -> ShareGroupDescribeResponse {
        let names = crate::consumer::topic_names(topics);
        let described_assignment = |a: &Assignment| {
            let mut out = DescribedAssignment::default();
            out.topic_partitions = a
                .iter()
                .map(|(t, ps)| {
                    let mut tp = DescribedTopic::default();
                    tp.topic_id = uuid::Uuid::from_bytes(*t);
                    tp.topic_name = TopicName(StrBytes::from_string(
                        names.get(t).cloned().unwrap_or_default(),
                    ));
                    tp.partitions = ps.iter().copied().collect();
                    tp
                })
                .collect();
            out
        };
        let now_ms = self.inner.now_ms();
        let mut resp = ShareGroupDescribeResponse::default();
        for group_id in req.group_ids {
            let id = group_id.to_string();
            let mut d = DescribedGroup::default();
            d.group_id = group_id;
            let loaded = self.inner.load(&id).await;
            let mut state = self.inner.lock();
            let error = match loaded {
                Err(error) => Some((error, String::new())),
                Ok(()) if !state.owns(&id) => Some((NOT_COORDINATOR, String::new())),
                Ok(()) if state.shares.contains_key(&id) => None,
                Ok(())
                    if state.groups.contains_key(&id)
                        || state.consumers.contains_key(&id)
                        || state.streams.contains_key(&id) =>
                {
                    Some((
                        GROUP_ID_NOT_FOUND,
                        format!("Group {id} is not a share group."),
                    ))
                }
                Ok(()) => Some((GROUP_ID_NOT_FOUND, format!("Group {id} not found."))),
            };
            if let Some((error, message)) = error {
                d.error_code = error;
                d.error_message = (!message.is_empty()).then(|| StrBytes::from_string(message));
                d.group_state = StrBytes::from_static_str("Dead");
                resp.groups.push(d);
                continue;
            }
            let Some(g) = state.shares.get_mut(&id) else {
                continue;
            };
            if g.expire(now_ms) {
                let stored = g.encode();
                state.queue(&id, Write::Save(stored));
            }
            let g = &state.shares[&id];
            d.group_state = StrBytes::from_static_str(g.state_name());
            d.group_epoch = g.group_epoch;
            d.assignment_epoch = g.assignment_epoch;
            d.assignor_name = StrBytes::from_static_str("simple");
            if req.include_authorized_operations {
                d.authorized_operations = GROUP_AUTHORIZED_OPERATIONS;
            }
            d.members = g
                .members
                .values()
                .map(|m| {
                    let mut out = Member::default();
                    out.member_id = StrBytes::from_string(m.member_id.clone());
                    out.rack_id = m.rack_id.clone().map(StrBytes::from_string);
                    out.member_epoch = m.epoch;
                    out.client_id = StrBytes::from_string(m.client_id.clone());
                    out.client_host = StrBytes::from_string(m.client_host.clone());
                    out.subscribed_topic_names = m
                        .subscribed
                        .iter()
                        .map(|n| TopicName(StrBytes::from_string(n.clone())))
                        .collect();
                    out.assignment = described_assignment(&m.assigned);
                    out
                })
                .collect();
            resp.groups.push(d);
        }
        self.inner.persist_later();
        resp
    }

    /// The share groups' state names this coordinator lists (ListGroups), by group id.
    pub(crate) fn share_listing(
        state: &mut crate::State,
        now_ms: i64,
    ) -> Vec<(String, &'static str)> {
        let mut out = Vec::new();
        let ids: Vec<String> = state.shares.keys().cloned().collect();
        for id in ids {
            if !state.owns(&id) {
                continue;
            }
            let Some(g) = state.shares.get_mut(&id) else {
                continue;
            };
            let expired = g.expire(now_ms);
            let name = g.state_name();
            let stored = expired.then(|| g.encode());
            if let Some(stored) = stored {
                state.queue(&id, Write::Save(stored));
            }
            out.push((id, name));
        }
        out
    }

    /// Removes an empty share group (DeleteGroups): `NON_EMPTY_GROUP` if it has members.
    /// `None` if `group_id` is not a share group.
    pub(crate) fn delete_share_group(
        state: &mut crate::State,
        group_id: &str,
        now_ms: i64,
    ) -> Option<i16> {
        let g = state.shares.get_mut(group_id)?;
        g.expire(now_ms);
        if !g.members.is_empty() {
            return Some(NON_EMPTY_GROUP);
        }
        state.shares.remove(group_id);
        state.unloads += 1;
        state.queue(group_id, Write::Delete);
        state.mark_absent(group_id);
        Some(NONE)
    }
}

/// What a share group admin request found of its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareGroupLookup {
    /// A share group with this many members.
    Share { members: usize },
    /// A classic or consumer group of that id.
    OtherKind,
    /// No group of that id.
    Absent,
}

impl GroupCoordinator {
    /// Finds `group_id` for the share group admin APIs (offsets), loading it first; the error
    /// when this broker does not coordinate it (or cannot load it).
    pub async fn share_group_lookup(&self, group_id: &str) -> Result<ShareGroupLookup, i16> {
        self.inner.load(group_id).await?;
        let now_ms = self.inner.now_ms();
        let mut state = self.inner.lock();
        if !state.owns(group_id) {
            return Err(NOT_COORDINATOR);
        }
        if let Some(g) = state.shares.get_mut(group_id) {
            if g.expire(now_ms) {
                let stored = g.encode();
                state.queue(group_id, Write::Save(stored));
            }
            let members = state.shares.get(group_id).map_or(0, |g| g.members.len());
            return Ok(ShareGroupLookup::Share { members });
        }
        if state.groups.contains_key(group_id)
            || state.consumers.contains_key(group_id)
            || state.streams.contains_key(group_id)
        {
            return Ok(ShareGroupLookup::OtherKind);
        }
        Ok(ShareGroupLookup::Absent)
    }

    /// Creates `group_id` as an empty share group if there is no group of that id
    /// (AlterShareGroupOffsets creates the group, as Kafka's does), and stores it.
    pub async fn create_share_group(&self, group_id: &str) -> Result<(), i16> {
        self.inner.load(group_id).await?;
        {
            let mut state = self.inner.lock();
            if !state.owns(group_id) {
                return Err(NOT_COORDINATOR);
            }
            if state.shares.contains_key(group_id) {
                return Ok(());
            }
            if state.groups.contains_key(group_id)
                || state.consumers.contains_key(group_id)
                || state.streams.contains_key(group_id)
            {
                return Err(GROUP_ID_NOT_FOUND);
            }
            let g = crate::share::ShareGroup::default();
            state.queue(group_id, Write::Save(g.encode()));
            state.absent.remove(group_id);
            state.shares.insert(group_id.to_string(), g);
        }
        if self.inner.persist(group_id).await {
            Ok(())
        } else {
            Err(COORDINATOR_NOT_AVAILABLE)
        }
    }
}
