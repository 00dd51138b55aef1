//! The consumer group protocol's APIs (KIP-848) on [`GroupCoordinator`]: ConsumerGroupHeartbeat
//! and ConsumerGroupDescribe. The group logic is [`crate::consumer`]; this turns requests into
//! heartbeats, keeps consumer groups apart from classic ones, and stores a group before
//! answering a heartbeat that changed it, so that a coordinator taking over never hands out a
//! partition its predecessor told another member it holds.

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member, TopicPartitions as DescribedTopic,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment as HeartbeatAssignment, TopicPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::assignor::{Assignment, TopicId};
use crate::codes::*;
use crate::consumer::{Answer, ConsumerGroup, Heartbeat, Topics};
use crate::{Consumer, GroupCoordinator, GROUP_AUTHORIZED_OPERATIONS};

fn heartbeat_error(error: i16, message: impl Into<String>) -> ConsumerGroupHeartbeatResponse {
    let mut resp = ConsumerGroupHeartbeatResponse::default();
    resp.error_code = error;
    resp.error_message = Some(StrBytes::from_string(message.into()));
    resp.member_epoch = -1;
    resp
}

/// A heartbeat refused: its error code and message.
type Refusal = (i16, String);

fn refusal(error: i16, message: impl Into<String>) -> Refusal {
    (error, message.into())
}

/// The request as the group logic takes it.
fn heartbeat_of(
    req: ConsumerGroupHeartbeatRequest,
    version: i16,
    client_id: &str,
    client_host: &str,
) -> Heartbeat {
    let mut member_id = req.member_id.to_string();
    if version == 0 && req.member_epoch == 0 && member_id.is_empty() {
        // v0: the coordinator names new members (v1 clients name themselves).
        member_id = crate::random_id();
    }
    let owned = req.topic_partitions.as_ref().map(|tps| {
        let mut a = Assignment::new();
        for tp in tps {
            a.entry(*tp.topic_id.as_bytes())
                .or_default()
                .extend(tp.partitions.iter().copied());
        }
        a.retain(|_, ps| !ps.is_empty());
        a
    });
    Heartbeat {
        member_id,
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.as_ref().map(|s| s.to_string()),
        rack_id: req.rack_id.as_ref().map(|s| s.to_string()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed: req
            .subscribed_topic_names
            .as_ref()
            .map(|ns| ns.iter().map(|n| n.to_string()).collect()),
        subscribed_regex: req.subscribed_topic_regex.as_ref().map(|s| s.to_string()),
        server_assignor: req.server_assignor.as_ref().map(|s| s.to_string()),
        owned,
        client_id: client_id.to_string(),
        client_host: client_host.to_string(),
    }
}

/// The response to a heartbeat the group answered.
fn response_of(answer: Answer, heartbeat_interval_ms: i32) -> ConsumerGroupHeartbeatResponse {
    let mut resp = ConsumerGroupHeartbeatResponse::default();
    resp.error_code = answer.error;
    resp.error_message = answer.message.map(StrBytes::from_string);
    resp.member_epoch = answer.member_epoch;
    if answer.error != NONE {
        return resp;
    }
    resp.member_id = Some(StrBytes::from_string(answer.member_id));
    resp.heartbeat_interval_ms = heartbeat_interval_ms;
    resp.assignment = answer.assignment.map(|a| {
        let mut out = HeartbeatAssignment::default();
        out.topic_partitions = a
            .into_iter()
            .map(|(t, ps)| {
                let mut tp = TopicPartitions::default();
                tp.topic_id = uuid(t);
                tp.partitions = ps.into_iter().collect();
                tp
            })
            .collect();
        out
    });
    resp
}

impl GroupCoordinator {
    /// One ConsumerGroupHeartbeat. `topics` is the catalog now (names, ids, partition counts).
    pub async fn consumer_group_heartbeat(
        &self,
        req: ConsumerGroupHeartbeatRequest,
        version: i16,
        client_id: &str,
        client_host: &str,
        topics: &Topics,
    ) -> ConsumerGroupHeartbeatResponse {
        let group_id = req.group_id.to_string();
        if group_id.is_empty() {
            return heartbeat_error(INVALID_REQUEST, "GroupId can't be empty.");
        }
        let hb = heartbeat_of(req, version, client_id, client_host);
        if let Err((error, message)) = hb.validate() {
            return heartbeat_error(error, message);
        }
        if let Err(error) = self.inner.load(&group_id).await {
            return heartbeat_error(error, "");
        }
        let answer = match self.apply_heartbeat(&group_id, hb, topics) {
            Ok(answer) => answer,
            Err((error, message)) => return heartbeat_error(error, message),
        };
        // A heartbeat is answered once the group's state it saw is stored: one that changed it
        // (a join, a new epoch, a partition released or given) waits for the write, and so
        // does one that sees a change whose write has not succeeded yet (a retry after a failed
        // write must not be told what a new coordinator would not know). The others do not
        // wait for the store.
        if !self.inner.persist(&group_id).await {
            return heartbeat_error(COORDINATOR_NOT_AVAILABLE, "");
        }
        let interval_ms = self.inner.config.consumer_heartbeat_interval.as_millis() as i32;
        response_of(answer, interval_ms)
    }

    /// Applies a heartbeat to its group under the coordinator's lock: to the consumer group, or to
    /// the one it creates or converts from a classic group. A refusal leaves every group as it was.
    fn apply_heartbeat(
        &self,
        group_id: &str,
        hb: Heartbeat,
        topics: &Topics,
    ) -> Result<Answer, Refusal> {
        let now_ms = self.inner.now_ms();
        let mut state = self.inner.lock();
        if !state.owns(group_id) {
            return Err(refusal(NOT_COORDINATOR, ""));
        }
        let candidate = self.candidate(&mut state, group_id, &hb, topics, now_ms)?;
        let leaving = hb.member_epoch == -1;
        let max = self.inner.config.consumer_max_size;
        let group = candidate
            .as_ref()
            .or_else(|| state.consumers.get(group_id).map(|c| &c.group));
        if hb.member_epoch == 0
            && group.is_some_and(|g| !g.admits(&hb.member_id, hb.instance_id.as_deref(), max))
        {
            return Err(refusal(
                GROUP_MAX_SIZE_REACHED,
                format!("The consumer group has reached its maximum capacity of {max} members."),
            ));
        }
        let answer = match candidate {
            Some(mut group) => {
                let answer = group.heartbeat(hb, topics, now_ms);
                if answer.error != NONE {
                    return Err(refusal(answer.error, answer.message.unwrap_or_default()));
                }
                if let Some(g) = state.groups.remove(group_id) {
                    g.convert_out();
                }
                state.absent.remove(group_id);
                let stored = Vec::new();
                state
                    .consumers
                    .insert(group_id.to_string(), Consumer { group, stored });
                answer
            }
            None => match state.consumers.get_mut(group_id) {
                Some(c) => c.group.heartbeat(hb, topics, now_ms),
                None => return Err(refusal(GROUP_ID_NOT_FOUND, "")),
            },
        };
        state.settle_consumer(group_id);
        if leaving {
            self.inner.maybe_downgrade(&mut state, group_id);
        }
        self.inner.rearm(&mut state, group_id);
        Ok(answer)
    }

    /// The consumer group a heartbeat would create or convert (`None`: it goes to the existing
    /// consumer group). It becomes the group only if the heartbeat is accepted (a refused join
    /// leaves the group as it was, as in Kafka).
    fn candidate(
        &self,
        state: &mut crate::State,
        group_id: &str,
        hb: &Heartbeat,
        topics: &Topics,
        now_ms: i64,
    ) -> Result<Option<ConsumerGroup>, Refusal> {
        if let Some(g) = state.groups.get_mut(group_id) {
            g.poll(&self.inner.cx());
            let candidate = if hb.member_epoch != 0 {
                None
            } else if g.is_active() {
                // A classic group with members: they stay, as classic members of the consumer
                // group it becomes (Kafka's online upgrade).
                crate::migrate::upgrade(g, topics, now_ms)
            } else {
                // An empty classic group becomes a consumer group (its offsets stay).
                Some(ConsumerGroup::default())
            };
            return match candidate {
                Some(c) => Ok(Some(c)),
                None => Err(refusal(
                    GROUP_ID_NOT_FOUND,
                    format!("Group {group_id} is not a consumer group."),
                )),
            };
        }
        if state.consumers.contains_key(group_id) {
            return Ok(None);
        }
        if state.shares.contains_key(group_id) || state.streams.contains_key(group_id) {
            return Err(refusal(
                GROUP_ID_NOT_FOUND,
                format!("Group {group_id} is not a consumer group."),
            ));
        }
        if hb.member_epoch != 0 {
            return Err(refusal(
                GROUP_ID_NOT_FOUND,
                format!("Consumer group {group_id} not found."),
            ));
        }
        Ok(Some(ConsumerGroup::default()))
    }

    /// ConsumerGroupDescribe. `topics` is the catalog, for topic names.
    pub async fn consumer_group_describe(
        &self,
        req: ConsumerGroupDescribeRequest,
        version: i16,
        topics: &Topics,
    ) -> ConsumerGroupDescribeResponse {
        let names = crate::consumer::topic_names(topics);
        let described_assignment = |a: &Assignment| {
            let mut out = DescribedAssignment::default();
            out.topic_partitions = a
                .iter()
                .map(|(t, ps)| {
                    let mut tp = DescribedTopic::default();
                    tp.topic_id = uuid(*t);
                    tp.topic_name = TopicName(StrBytes::from_string(
                        names.get(t).cloned().unwrap_or_default(),
                    ));
                    tp.partitions = ps.iter().copied().collect();
                    tp
                })
                .collect();
            out
        };
        let mut resp = ConsumerGroupDescribeResponse::default();
        for group_id in req.group_ids {
            let id = group_id.to_string();
            let mut d = DescribedGroup::default();
            d.group_id = group_id;
            let loaded = self.inner.load(&id).await;
            let state = self.inner.lock();
            let error = match loaded {
                Err(error) => Some((error, String::new())),
                Ok(()) if !state.owns(&id) => Some((NOT_COORDINATOR, String::new())),
                Ok(()) => match state.consumers.get(&id) {
                    Some(_) => None,
                    None if state.groups.contains_key(&id)
                        || state.shares.contains_key(&id)
                        || state.streams.contains_key(&id) =>
                    {
                        Some((
                            GROUP_ID_NOT_FOUND,
                            format!("Group {id} is not a consumer group."),
                        ))
                    }
                    None => Some((GROUP_ID_NOT_FOUND, format!("Group {id} not found."))),
                },
            };
            if let Some((error, message)) = error {
                d.error_code = error;
                d.error_message = (!message.is_empty()).then(|| StrBytes::from_string(message));
                d.group_state = StrBytes::from_static_str("Dead");
                resp.groups.push(d);
                continue;
            }
            let g = &state.consumers[&id].group;
            d.group_state = StrBytes::from_static_str(g.state_name());
            d.group_epoch = g.group_epoch;
            d.assignment_epoch = g.target_epoch;
            d.assignor_name = StrBytes::from_static_str(g.assignor_name());
            if req.include_authorized_operations {
                d.authorized_operations = GROUP_AUTHORIZED_OPERATIONS;
            }
            d.members = g
                .members
                .values()
                .filter(|m| !m.left_static)
                .map(|m| {
                    let mut out = Member::default();
                    out.member_id = StrBytes::from_string(m.member_id.clone());
                    out.instance_id = m.instance_id.clone().map(StrBytes::from_string);
                    out.rack_id = m.rack_id.clone().map(StrBytes::from_string);
                    out.member_epoch = m.epoch;
                    out.client_id = StrBytes::from_string(m.client_id.clone());
                    out.client_host = StrBytes::from_string(m.client_host.clone());
                    out.subscribed_topic_names = m
                        .subscribed
                        .iter()
                        .map(|n| TopicName(StrBytes::from_string(n.clone())))
                        .collect();
                    out.subscribed_topic_regex =
                        m.subscribed_regex.clone().map(StrBytes::from_string);
                    out.assignment = described_assignment(&m.assigned);
                    out.target_assignment = described_assignment(
                        &g.target.get(&m.member_id).cloned().unwrap_or_default(),
                    );
                    if version >= 1 {
                        // 1: a member speaking the consumer protocol, 0: a classic one.
                        out.member_type = if m.classic.is_some() { 0 } else { 1 };
                    }
                    out
                })
                .collect();
            resp.groups.push(d);
        }
        resp
    }
}

fn uuid(t: TopicId) -> uuid::Uuid {
    uuid::Uuid::from_bytes(t)
}
