//! The streams group APIs (KIP-1071) on [`GroupCoordinator`]: StreamsGroupHeartbeat and
//! StreamsGroupDescribe. The group logic is [`crate::streams`]; this turns requests into its
//! types and its answers into responses, keeps a group id to one kind of group, and stores a
//! streams group when its epoch moves, so that the next coordinator goes on from a higher one.

use std::collections::BTreeMap;

use kafka_protocol::messages::streams_group_describe_response as describe;
use kafka_protocol::messages::streams_group_heartbeat_request as req;
use kafka_protocol::messages::streams_group_heartbeat_response as resp;
use kafka_protocol::messages::{
    GroupId, StreamsGroupDescribeRequest, StreamsGroupDescribeResponse,
    StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::codes::*;
use crate::consumer::Topics;
use crate::streams::{
    Configured, CopartitionGroup, StreamsAnswer, StreamsGroup, StreamsHeartbeat, StreamsOverrides,
    StreamsSettings, Subtopology, TaskId, Tasks, TopicInfo, Topology,
};
use crate::{GroupCoordinator, Write, GROUP_AUTHORIZED_OPERATIONS};

/// How often members report their tasks' changelog offsets (Kafka's
/// `group.streams.task.offset.interval.ms` default).
const TASK_OFFSET_INTERVAL_MS: i32 = 60_000;

/// Kafka's `group.streams.acceptable.recovery.lag` default, echoed to members (no warm-up tasks
/// are assigned, so nothing here uses it).
const ACCEPTABLE_RECOVERY_LAG: i64 = 10_000;

/// What a heartbeat asks of the broker besides its response: internal topics to create.
pub struct StreamsHeartbeatOutcome {
    pub response: StreamsGroupHeartbeatResponse,
    pub to_create: Vec<TopicInfo>,
}

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn heartbeat_error(error: i16, message: impl Into<String>) -> StreamsHeartbeatOutcome {
    let mut r = StreamsGroupHeartbeatResponse::default();
    r.error_code = error;
    let message = message.into();
    r.error_message = (!message.is_empty()).then(|| s(message));
    r.member_epoch = -1;
    StreamsHeartbeatOutcome {
        response: r,
        to_create: Vec::new(),
    }
}

fn topic_info(t: &req::TopicInfo) -> TopicInfo {
    TopicInfo {
        name: t.name.to_string(),
        partitions: t.partitions,
        replication_factor: t.replication_factor,
        configs: t
            .topic_configs
            .iter()
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect(),
    }
}

fn topology(t: &req::Topology) -> Result<Topology, (i16, String)> {
    let mut out = Topology {
        epoch: t.epoch,
        subtopologies: Vec::with_capacity(t.subtopologies.len()),
    };
    for st in &t.subtopologies {
        let regex = !st.source_topic_regex.is_empty()
            || st
                .copartition_groups
                .iter()
                .any(|g| !g.source_topic_regex.is_empty());
        if regex {
            return Err((
                INVALID_REQUEST,
                "Regular expressions for source topics are not supported yet.".into(),
            ));
        }
        out.subtopologies.push(Subtopology {
            id: st.subtopology_id.to_string(),
            source_topics: st.source_topics.iter().map(|n| n.to_string()).collect(),
            repartition_sink_topics: st
                .repartition_sink_topics
                .iter()
                .map(|n| n.to_string())
                .collect(),
            state_changelog_topics: st.state_changelog_topics.iter().map(topic_info).collect(),
            repartition_source_topics: st
                .repartition_source_topics
                .iter()
                .map(topic_info)
                .collect(),
            copartition_groups: st
                .copartition_groups
                .iter()
                .map(|g: &req::CopartitionGroup| CopartitionGroup {
                    source_topics: g.source_topics.clone(),
                    repartition_source_topics: g.repartition_source_topics.clone(),
                })
                .collect(),
        });
    }
    Ok(out)
}

fn task_set(ids: &[req::TaskIds]) -> std::collections::BTreeSet<TaskId> {
    ids.iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.subtopology_id.to_string(), *p))
        })
        .collect()
}

fn offsets(o: &Option<Vec<req::TaskOffset>>) -> Option<Vec<(TaskId, i64)>> {
    o.as_ref().map(|v| {
        v.iter()
            .map(|t| ((t.subtopology_id.to_string(), t.partition), t.offset))
            .collect()
    })
}

fn heartbeat_of(
    r: &StreamsGroupHeartbeatRequest,
    client_id: &str,
    client_host: &str,
) -> Result<StreamsHeartbeat, (i16, String)> {
    let owned =
        match (&r.active_tasks, &r.standby_tasks, &r.warmup_tasks) {
            (Some(a), Some(st), Some(w)) => Some(Tasks {
                active: task_set(a),
                standby: task_set(st),
                warmup: task_set(w),
            }),
            (None, None, None) => None,
            _ => return Err((
                INVALID_REQUEST,
                "If one of ActiveTasks, StandbyTasks and WarmupTasks is null, all must be null."
                    .into(),
            )),
        };
    Ok(StreamsHeartbeat {
        member_id: r.member_id.to_string(),
        member_epoch: r.member_epoch,
        instance_id: r.instance_id.as_ref().map(|v| v.to_string()),
        rack_id: r.rack_id.as_ref().map(|v| v.to_string()),
        rebalance_timeout_ms: r.rebalance_timeout_ms,
        topology: r.topology.as_ref().map(topology).transpose()?,
        owned,
        process_id: r.process_id.as_ref().map(|v| v.to_string()),
        user_endpoint: r
            .user_endpoint
            .as_ref()
            .map(|e| (e.host.to_string(), e.port)),
        client_tags: r.client_tags.as_ref().map(|tags| {
            tags.iter()
                .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                .collect()
        }),
        task_offsets: offsets(&r.task_offsets),
        task_end_offsets: offsets(&r.task_end_offsets),
        shutdown_application: r.shutdown_application,
        client_id: client_id.to_string(),
        client_host: client_host.to_string(),
    })
}

/// Tasks as the heartbeat response lists them, by subtopology.
fn task_ids(tasks: &std::collections::BTreeSet<TaskId>) -> Vec<resp::TaskIds> {
    let mut by: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (sub, p) in tasks {
        by.entry(sub).or_default().push(*p);
    }
    by.into_iter()
        .map(|(sub, ps)| {
            let mut t = resp::TaskIds::default();
            t.subtopology_id = s(sub);
            t.partitions = ps;
            t
        })
        .collect()
}

fn described_task_ids(tasks: &std::collections::BTreeSet<TaskId>) -> Vec<describe::TaskIds> {
    task_ids(tasks)
        .into_iter()
        .map(|t| {
            let mut d = describe::TaskIds::default();
            d.subtopology_id = t.subtopology_id;
            d.partitions = t.partitions;
            d
        })
        .collect()
}

impl GroupCoordinator {
    /// The broker's streams settings, under the group's own.
    fn streams_settings(&self, o: &StreamsOverrides) -> StreamsSettings {
        let c = &self.inner.config;
        StreamsSettings {
            session_ms: o
                .session_ms
                .unwrap_or(c.streams_session_timeout.as_millis() as i64),
            num_standby: o.num_standby.unwrap_or(c.streams_num_standby_replicas),
            initial_delay_ms: o
                .initial_delay_ms
                .unwrap_or(c.streams_initial_rebalance_delay.as_millis() as i64),
            assignment_interval_ms: c.streams_assignment_interval.as_millis() as i64,
            max_size: c.streams_max_size,
        }
    }

    /// One StreamsGroupHeartbeat. `topics` is the catalog now, `overrides` the group's own
    /// settings. The outcome names the internal topics the group waits for: the caller creates
    /// them (as the client's principal).
    #[allow(clippy::too_many_arguments)]
    pub async fn streams_group_heartbeat(
        &self,
        r: StreamsGroupHeartbeatRequest,
        version: i16,
        client_id: &str,
        client_host: &str,
        topics: &Topics,
        overrides: &StreamsOverrides,
    ) -> StreamsHeartbeatOutcome {
        let group_id = r.group_id.to_string();
        if group_id.is_empty() {
            return heartbeat_error(INVALID_REQUEST, "GroupId can't be empty.");
        }
        let hb = match heartbeat_of(&r, client_id, client_host) {
            Ok(hb) => hb,
            Err((error, message)) => return heartbeat_error(error, message),
        };
        if let Err((error, message)) = hb.validate() {
            return heartbeat_error(error, message);
        }
        if let Err(error) = self.inner.load(&group_id).await {
            return heartbeat_error(error, "");
        }
        let member_id = hb.member_id.clone();
        let (answer, endpoints) = match self.apply_streams_heartbeat(
            &group_id,
            hb,
            r.endpoint_information_epoch,
            topics,
            overrides,
        ) {
            Ok(a) => a,
            Err((error, message)) => return heartbeat_error(error, message),
        };
        self.inner.persist_later();
        let c = &self.inner.config;
        let mut out = StreamsGroupHeartbeatResponse::default();
        out.member_id = s(member_id);
        out.member_epoch = answer.member_epoch;
        out.heartbeat_interval_ms = overrides
            .heartbeat_ms
            .unwrap_or(c.streams_heartbeat_interval.as_millis() as i64)
            as i32;
        out.task_offset_interval_ms = TASK_OFFSET_INTERVAL_MS;
        out.acceptable_recovery_lag = ACCEPTABLE_RECOVERY_LAG;
        out.status = Some(
            answer
                .status
                .iter()
                // MISSING_CLIENT_TAGS (6) exists from v1; v0 clients fail on codes they do not know.
                .filter(|(code, _)| version >= 1 || *code <= 5)
                .map(|(code, detail)| {
                    let mut st = resp::Status::default();
                    st.status_code = *code;
                    st.status_detail = s(detail.clone());
                    st
                })
                .collect(),
        );
        if let Some(t) = &answer.tasks {
            out.active_tasks = Some(task_ids(&t.active));
            out.standby_tasks = Some(task_ids(&t.standby));
            out.warmup_tasks = Some(task_ids(&t.warmup));
        }
        out.endpoint_information_epoch = answer.endpoint_epoch;
        out.partitions_by_user_endpoint = endpoints;
        StreamsHeartbeatOutcome {
            response: out,
            to_create: answer.to_create,
        }
    }

    /// Applies a heartbeat under the coordinator's lock; queues the group's stored form when
    /// its epoch moved. Also returns every member's endpoint and partitions when the member's
    /// view of them is out of date.
    #[allow(clippy::type_complexity)]
    fn apply_streams_heartbeat(
        &self,
        group_id: &str,
        hb: StreamsHeartbeat,
        endpoint_epoch: i32,
        topics: &Topics,
        overrides: &StreamsOverrides,
    ) -> Result<(StreamsAnswer, Option<Vec<resp::EndpointToPartitions>>), (i16, String)> {
        let now_ms = self.inner.now_ms();
        let settings = self.streams_settings(overrides);
        let mut state = self.inner.lock();
        if !state.owns(group_id) {
            return Err((NOT_COORDINATOR, String::new()));
        }
        if state.consumers.contains_key(group_id) || state.shares.contains_key(group_id) {
            return Err((
                GROUP_ID_NOT_FOUND,
                format!("Group {group_id} is not a streams group."),
            ));
        }
        // An empty classic group (offsets committed by an admin tool, a reset) becomes a
        // streams group when its application joins (once the join is taken); its offsets stay.
        let classic = state.groups.get(group_id).map(|g| g.is_active());
        if classic == Some(true) || (classic.is_some() && hb.member_epoch != 0) {
            return Err((
                GROUP_ID_NOT_FOUND,
                format!("Group {group_id} is not a streams group."),
            ));
        }
        let exists = state.streams.contains_key(group_id);
        if !exists && hb.member_epoch != 0 {
            // Kafka answers GROUP_ID_NOT_FOUND, which is fatal to the client; here a group can
            // be gone (only its epoch is stored, and a write not done when the coordinator
            // moved is lost), so its members are sent to join again.
            return Err((
                UNKNOWN_MEMBER_ID,
                format!("Streams group {group_id} not found: join again."),
            ));
        }
        let mut group = state.streams.get(group_id).cloned().unwrap_or_default();
        let before = group.group_epoch;
        let member_id = hb.member_id.clone();
        let answer = group.heartbeat(hb, topics, now_ms, settings)?;
        let endpoints = (answer.member_epoch >= 0 && endpoint_epoch != group.endpoint_epoch)
            .then(|| endpoints(&group, &member_id, topics));
        if classic.is_some() {
            tracing::info!(group = %group_id, "empty classic group converted to a streams group");
            state.groups.remove(group_id);
        }
        if !exists || group.group_epoch != before {
            state.queue(group_id, Write::Save(group.encode()));
            state.absent.remove(group_id);
        }
        state.streams.insert(group_id.to_string(), group);
        Ok((answer, endpoints))
    }

    /// StreamsGroupDescribe. `topics` is the catalog now.
    pub async fn streams_group_describe(
        &self,
        r: StreamsGroupDescribeRequest,
        _version: i16,
    ) -> StreamsGroupDescribeResponse {
        let mut out = StreamsGroupDescribeResponse::default();
        for id in r.group_ids {
            let d = self
                .describe_streams_group(
                    &id,
                    r.include_authorized_operations,
                    r.include_topology_description,
                )
                .await;
            out.groups.push(d);
        }
        self.inner.persist_later();
        out
    }

    async fn describe_streams_group(
        &self,
        id: &GroupId,
        operations: bool,
        description: bool,
    ) -> describe::DescribedGroup {
        let mut d = describe::DescribedGroup::default();
        d.group_id = id.clone();
        let dead = |mut d: describe::DescribedGroup, error: i16, message: String| {
            d.error_code = error;
            d.error_message = (!message.is_empty()).then(|| s(message));
            d.group_state = StrBytes::from_static_str("Dead");
            d
        };
        if id.is_empty() {
            return dead(d, INVALID_GROUP_ID, "Group id can't be empty.".into());
        }
        if let Err(error) = self.inner.load(id).await {
            return dead(d, error, String::new());
        }
        let now_ms = self.inner.now_ms();
        let mut state = self.inner.lock();
        if !state.owns(id) {
            return dead(d, NOT_COORDINATOR, String::new());
        }
        let Some(g) = state.streams.get_mut(id.as_str()) else {
            let other = state.groups.contains_key(id.as_str())
                || state.consumers.contains_key(id.as_str())
                || state.shares.contains_key(id.as_str());
            let message = if other {
                format!("Group {} is not a streams group.", id.as_str())
            } else {
                format!("Group {} not found.", id.as_str())
            };
            return dead(d, GROUP_ID_NOT_FOUND, message);
        };
        if g.expire(now_ms) {
            let stored = g.encode();
            state.queue(id, Write::Save(stored));
        }
        let g = &state.streams[id.as_str()];
        d.group_state = StrBytes::from_static_str(g.state_name());
        d.group_epoch = g.group_epoch;
        d.assignment_epoch = g.assignment_epoch;
        d.assignor_name = Some(StrBytes::from_static_str("sticky"));
        // No topology description plugin: NOT_REQUESTED, or NOT_STORED when asked for.
        d.topology_description_status = i8::from(description);
        if operations {
            d.authorized_operations = GROUP_AUTHORIZED_OPERATIONS;
        }
        d.topology = Some(described_topology(g));
        d.members = g
            .members
            .values()
            .map(|m| {
                let mut out = describe::Member::default();
                out.member_id = s(m.member_id.clone());
                out.member_epoch = m.epoch;
                out.instance_id = m.instance_id.clone().map(s);
                out.rack_id = m.rack_id.clone().map(s);
                out.client_id = s(m.client_id.clone());
                out.client_host = s(m.client_host.clone());
                out.topology_epoch = m.topology_epoch;
                out.process_id = s(m.process_id.clone());
                out.user_endpoint = m.user_endpoint.as_ref().map(|(h, p)| {
                    let mut e = describe::Endpoint::default();
                    e.host = s(h.clone());
                    e.port = *p;
                    e
                });
                out.client_tags = m
                    .client_tags
                    .iter()
                    .map(|(k, v)| {
                        let mut kv = describe::KeyValue::default();
                        kv.key = s(k.clone());
                        kv.value = s(v.clone());
                        kv
                    })
                    .collect();
                out.task_offsets = described_offsets(&m.task_offsets);
                out.task_end_offsets = described_offsets(&m.task_end_offsets);
                out.assignment = described_assignment(&m.assigned());
                out.target_assignment =
                    described_assignment(&g.target.get(&m.member_id).cloned().unwrap_or_default());
                out
            })
            .collect();
        d
    }

    /// The streams groups' state names this coordinator lists (ListGroups), by group id.
    pub(crate) fn streams_listing(
        state: &mut crate::State,
        now_ms: i64,
    ) -> Vec<(String, &'static str)> {
        let mut out = Vec::new();
        let ids: Vec<String> = state.streams.keys().cloned().collect();
        for id in ids {
            if !state.owns(&id) {
                continue;
            }
            let Some(g) = state.streams.get_mut(&id) else {
                continue;
            };
            let stored = g.expire(now_ms).then(|| g.encode());
            let name = g.state_name();
            if let Some(stored) = stored {
                state.queue(&id, Write::Save(stored));
            }
            out.push((id, name));
        }
        out
    }
}

fn described_assignment(t: &Tasks) -> describe::Assignment {
    let mut a = describe::Assignment::default();
    a.active_tasks = described_task_ids(&t.active);
    a.standby_tasks = described_task_ids(&t.standby);
    a.warmup_tasks = described_task_ids(&t.warmup);
    a
}

fn described_offsets(o: &[(TaskId, i64)]) -> Vec<describe::TaskOffset> {
    o.iter()
        .map(|((sub, p), off)| {
            let mut t = describe::TaskOffset::default();
            t.subtopology_id = s(sub.clone());
            t.partition = *p;
            t.offset = *off;
            t
        })
        .collect()
}

fn described_info(t: &TopicInfo, partitions: i32) -> describe::TopicInfo {
    let mut out = describe::TopicInfo::default();
    out.name = TopicName(s(t.name.clone()));
    out.partitions = partitions;
    out.replication_factor = t.replication_factor.max(0);
    out.topic_configs = t
        .configs
        .iter()
        .map(|(k, v)| {
            let mut kv = describe::KeyValue::default();
            kv.key = s(k.clone());
            kv.value = s(v.clone());
            kv
        })
        .collect();
    out
}

/// The topology as Describe shows it: with the decided partition counts when the group is
/// ready. Never null (the admin client fails a group without one).
fn described_topology(g: &StreamsGroup) -> describe::Topology {
    let mut out = describe::Topology::default();
    let Some(t) = &g.topology else {
        out.epoch = -1;
        out.subtopologies = Some(Vec::new());
        return out;
    };
    let tasks = match &g.configured {
        Some(Configured::Ready(tasks)) => Some(tasks),
        _ => None,
    };
    out.epoch = t.epoch;
    out.subtopologies = Some(
        t.subtopologies
            .iter()
            .map(|st| {
                let n = tasks.and_then(|m| m.get(&st.id).copied());
                let mut d = describe::Subtopology::default();
                d.subtopology_id = s(st.id.clone());
                d.source_topics = st
                    .source_topics
                    .iter()
                    .map(|n| TopicName(s(n.clone())))
                    .collect();
                d.repartition_sink_topics = st
                    .repartition_sink_topics
                    .iter()
                    .map(|n| TopicName(s(n.clone())))
                    .collect();
                d.state_changelog_topics = st
                    .state_changelog_topics
                    .iter()
                    .map(|c| described_info(c, n.unwrap_or(c.partitions)))
                    .collect();
                d.repartition_source_topics = st
                    .repartition_source_topics
                    .iter()
                    .map(|c| described_info(c, c.partitions))
                    .collect();
                d
            })
            .collect(),
    );
    out
}

/// Every member with an endpoint and the partitions it runs (active; standby and warm-up),
/// the asking member last, for interactive queries.
fn endpoints(g: &StreamsGroup, asking: &str, topics: &Topics) -> Vec<resp::EndpointToPartitions> {
    let partitions = |tasks: &std::collections::BTreeSet<TaskId>| {
        let mut by: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (sub, p) in tasks {
            let Some(st) = g
                .topology
                .iter()
                .flat_map(|t| &t.subtopologies)
                .find(|x| x.id == *sub)
            else {
                continue;
            };
            for topic in st.input_topics() {
                if topics.get(topic).is_some_and(|(_, n)| *p < *n) {
                    by.entry(topic.clone()).or_default().push(*p);
                }
            }
        }
        by.into_iter()
            .map(|(topic, ps)| {
                let mut tp = resp::TopicPartition::default();
                tp.topic = TopicName(s(topic));
                tp.partitions = ps;
                tp
            })
            .collect::<Vec<_>>()
    };
    let mut members: Vec<_> = g
        .members
        .values()
        .filter(|m| m.user_endpoint.is_some())
        .collect();
    members.sort_by_key(|m| m.member_id == asking);
    members
        .into_iter()
        .filter_map(|m| {
            let (host, port) = m.user_endpoint.clone()?;
            let tasks = m.assigned();
            let mut e = resp::EndpointToPartitions::default();
            e.user_endpoint.host = s(host);
            e.user_endpoint.port = port;
            e.active_partitions = partitions(&tasks.active);
            let standby = tasks.standby.union(&tasks.warmup).cloned().collect();
            e.standby_partitions = partitions(&standby);
            Some(e)
        })
        .collect()
}

impl GroupCoordinator {
    /// A classic member joins `group_id`: an empty streams group of that id becomes a classic
    /// group (its offsets stay), as in Kafka. False if a streams group with members has it.
    pub(crate) fn streams_to_classic(&self, group_id: &str) -> bool {
        let now_ms = self.inner.now_ms();
        let mut state = self.inner.lock();
        GroupCoordinator::expire_streams(&mut state, group_id, now_ms);
        let Some(g) = state.streams.get(group_id) else {
            return true;
        };
        if !g.members.is_empty() {
            return false;
        }
        tracing::info!(group = %group_id, "empty streams group converted to a classic group");
        state.streams.remove(group_id);
        state.queue(group_id, Write::Delete);
        true
    }

    /// Removes the members of streams group `group_id` whose session ended (and queues its
    /// stored form if its epoch moved).
    pub(crate) fn expire_streams(state: &mut crate::State, group_id: &str, now_ms: i64) {
        let Some(g) = state.streams.get_mut(group_id) else {
            return;
        };
        if g.expire(now_ms) {
            let stored = g.encode();
            state.queue(group_id, Write::Save(stored));
        }
    }

    /// Removes an empty streams group (DeleteGroups): `NON_EMPTY_GROUP` if it has members.
    /// `None` if `group_id` is not a streams group.
    pub(crate) fn delete_streams_group(
        state: &mut crate::State,
        group_id: &str,
        now_ms: i64,
    ) -> Option<i16> {
        GroupCoordinator::expire_streams(state, group_id, now_ms);
        if !state.streams.get(group_id)?.members.is_empty() {
            return Some(NON_EMPTY_GROUP);
        }
        state.streams.remove(group_id);
        state.unloads += 1;
        state.queue(group_id, Write::Delete);
        state.mark_absent(group_id);
        Some(NONE)
    }
}

#[cfg(test)]
impl GroupCoordinator {
    /// An empty classic group, as an admin's offset commit leaves one.
    pub(crate) fn create_empty_classic_group_for_tests(&self, group_id: &str) {
        self.inner.lock().groups.insert(
            group_id.to_string(),
            crate::group::Group::new(group_id.to_string()),
        );
    }

    pub(crate) fn has_classic_group_for_tests(&self, group_id: &str) -> bool {
        self.inner.lock().groups.contains_key(group_id)
    }
}
