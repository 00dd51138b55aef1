//! One streams group (KIP-1071): the Kafka Streams application's topology, its members (one per
//! StreamThread) and the tasks each runs. Pure, given the time and the topic catalog by its
//! caller.
//!
//! The broker, not a client, decides who runs what. A task is `(subtopology, partition)`: the
//! partition of every source and repartition-source topic of the subtopology. From the
//! topology the group works out how many tasks each subtopology has and which internal topics
//! (repartition topics, changelogs) must exist with how many partitions ([`configure`]); the
//! caller creates the missing ones. The assignor ([`assign`], Kafka's `sticky` in spirit)
//! spreads the tasks over the members; reconciliation ([`StreamsGroup::heartbeat`]) moves a
//! task to its new owner only after its old owner stopped listing it (or left), so no two
//! members ever run one active task.
//!
//! Epochs as Kafka 4.4's: a new group starts at group epoch 1 and assignment epoch 1, so a
//! member that joined is never answered epoch 0 (its next heartbeat would be a join without a
//! topology). A member's epoch moves to the assignment's only once it has given up what it
//! must revoke; each active task carries the epoch it was granted at, which offset commits made
//! with an older epoch are checked against (the commit made while revoking).

use std::collections::{BTreeMap, BTreeSet};

use crate::codes::*;
use crate::consumer::Topics;

/// The first byte of a stored streams group (see [`StreamsGroup::encode`]); share groups' is
/// [`crate::share::FORMAT`].
pub const FORMAT: u8 = 0x92;

/// A task: (subtopology id, partition).
pub type TaskId = (String, i32);

/// Status codes of a StreamsGroupHeartbeat response.
pub mod status {
    pub const STALE_TOPOLOGY: i8 = 0;
    pub const MISSING_SOURCE_TOPICS: i8 = 1;
    pub const INCORRECTLY_PARTITIONED_TOPICS: i8 = 2;
    pub const MISSING_INTERNAL_TOPICS: i8 = 3;
    pub const SHUTDOWN_APPLICATION: i8 = 4;
    pub const ASSIGNMENT_DELAYED: i8 = 5;
}

/// Kafka's STREAMS_INVALID_TOPOLOGY.
pub const STREAMS_INVALID_TOPOLOGY: i16 = 130;

/// Tasks by role.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tasks {
    pub active: BTreeSet<TaskId>,
    pub standby: BTreeSet<TaskId>,
    pub warmup: BTreeSet<TaskId>,
}

impl Tasks {
    pub fn is_empty(&self) -> bool {
        self.active.is_empty() && self.standby.is_empty() && self.warmup.is_empty()
    }

    fn all(&self) -> impl Iterator<Item = &TaskId> {
        self.active
            .iter()
            .chain(self.standby.iter())
            .chain(self.warmup.iter())
    }
}

/// An internal topic as the topology names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    /// 0: decided by the group.
    pub partitions: i32,
    /// 0 or -1: the broker's default.
    pub replication_factor: i16,
    pub configs: Vec<(String, String)>,
}

/// Topics that must have as many partitions as each other (indexes into the subtopology's
/// `source_topics` and `repartition_source_topics`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopartitionGroup {
    pub source_topics: Vec<i16>,
    pub repartition_source_topics: Vec<i16>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subtopology {
    pub id: String,
    /// External source topics (repartition topics are not among them).
    pub source_topics: Vec<String>,
    pub repartition_sink_topics: Vec<String>,
    pub state_changelog_topics: Vec<TopicInfo>,
    pub repartition_source_topics: Vec<TopicInfo>,
    pub copartition_groups: Vec<CopartitionGroup>,
}

impl Subtopology {
    /// The topics whose partitions make its tasks.
    pub fn input_topics(&self) -> impl Iterator<Item = &String> {
        self.source_topics
            .iter()
            .chain(self.repartition_source_topics.iter().map(|t| &t.name))
    }

    fn stateful(&self) -> bool {
        !self.state_changelog_topics.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    pub epoch: i32,
    pub subtopologies: Vec<Subtopology>,
}

/// The topology set against the catalog: ready (every topic there, with the right partition
/// counts) with its tasks, or a status saying what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Configured {
    /// Tasks per subtopology.
    Ready(BTreeMap<String, i32>),
    NotReady {
        status: i8,
        detail: String,
        /// Internal topics to create, with their partition counts decided.
        to_create: Vec<TopicInfo>,
    },
}

/// Works out the partition counts of the internal topics and the tasks of each subtopology,
/// as Kafka's `InternalTopicManager.configureTopics` does. `Err` is a topology that can never
/// work (STREAMS_INVALID_TOPOLOGY).
pub fn configure(topology: &Topology, topics: &Topics) -> Result<Configured, String> {
    let count = |name: &str| topics.get(name).map(|(_, n)| *n);
    let missing: Vec<&String> = topology
        .subtopologies
        .iter()
        .flat_map(|s| &s.source_topics)
        .filter(|t| count(t).is_none())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if !missing.is_empty() {
        return Ok(not_ready(
            status::MISSING_SOURCE_TOPICS,
            format!("Source topics {} are missing.", join(&missing)),
        ));
    }
    let mut decided = repartition_counts(topology, &count)?;
    if let Some(problem) = copartition(topology, &count, &mut decided)? {
        return Ok(not_ready(status::INCORRECTLY_PARTITIONED_TOPICS, problem));
    }
    let mut tasks = BTreeMap::new();
    let mut internal = Vec::new();
    for s in &topology.subtopologies {
        let n = s
            .source_topics
            .iter()
            .filter_map(|t| count(t))
            .chain(
                s.repartition_source_topics
                    .iter()
                    .filter_map(|t| decided.get(&t.name).copied()),
            )
            .max()
            .unwrap_or(0);
        tasks.insert(s.id.clone(), n);
        for t in &s.repartition_source_topics {
            let partitions = decided.get(&t.name).copied().unwrap_or(n);
            internal.push(TopicInfo {
                partitions,
                ..t.clone()
            });
        }
        for t in &s.state_changelog_topics {
            internal.push(TopicInfo {
                partitions: n,
                ..t.clone()
            });
        }
    }
    let mut to_create = Vec::new();
    for t in internal {
        match count(&t.name) {
            Some(found) if found != t.partitions => {
                return Ok(not_ready(
                    status::INCORRECTLY_PARTITIONED_TOPICS,
                    format!(
                    "Existing topic {} has different number of partitions: expected {}, found {}.",
                    t.name, t.partitions, found
                ),
                ))
            }
            Some(_) => {}
            None if !to_create.iter().any(|c: &TopicInfo| c.name == t.name) => to_create.push(t),
            None => {}
        }
    }
    if !to_create.is_empty() {
        let names: Vec<&String> = to_create.iter().map(|t| &t.name).collect();
        return Ok(Configured::NotReady {
            status: status::MISSING_INTERNAL_TOPICS,
            detail: format!("Internal topics are missing: [{}]", join(&names)),
            to_create,
        });
    }
    Ok(Configured::Ready(tasks))
}

fn not_ready(status: i8, detail: String) -> Configured {
    Configured::NotReady {
        status,
        detail,
        to_create: Vec::new(),
    }
}

fn join(names: &[&String]) -> String {
    names
        .iter()
        .map(|n| n.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The partition counts of the repartition topics: those the topology fixes, then, until
/// nothing changes, each sink of a subtopology whose inputs are all known gets the largest of
/// their counts.
fn repartition_counts(
    topology: &Topology,
    count: &dyn Fn(&str) -> Option<i32>,
) -> Result<BTreeMap<String, i32>, String> {
    let mut decided: BTreeMap<String, i32> = topology
        .subtopologies
        .iter()
        .flat_map(|s| &s.repartition_source_topics)
        .filter(|t| t.partitions > 0)
        .map(|t| (t.name.clone(), t.partitions))
        .collect();
    let wanted: BTreeSet<&String> = topology
        .subtopologies
        .iter()
        .flat_map(|s| s.repartition_source_topics.iter().map(|t| &t.name))
        .collect();
    let sinks: BTreeSet<&String> = topology
        .subtopologies
        .iter()
        .flat_map(|s| &s.repartition_sink_topics)
        .collect();
    if let Some(orphan) = wanted
        .iter()
        .find(|t| !sinks.contains(*t) && !decided.contains_key(**t))
    {
        return Err(format!(
            "Repartition source topic {orphan} is not written by any subtopology."
        ));
    }
    loop {
        let mut progress = false;
        for s in &topology.subtopologies {
            let inputs: Vec<Option<i32>> = s
                .source_topics
                .iter()
                .map(|t| count(t))
                .chain(
                    s.repartition_source_topics
                        .iter()
                        .map(|t| decided.get(&t.name).copied()),
                )
                .collect();
            if inputs.iter().any(Option::is_none) {
                continue;
            }
            let n = inputs.into_iter().flatten().max().unwrap_or(0);
            for sink in &s.repartition_sink_topics {
                if wanted.contains(sink) && !decided.contains_key(sink) && n > 0 {
                    decided.insert(sink.clone(), n);
                    progress = true;
                }
            }
        }
        if wanted.iter().all(|t| decided.contains_key(*t)) {
            return Ok(decided);
        }
        if !progress {
            return Err(
                "The partition counts of the repartition topics cannot be worked out (a cycle?)."
                    .into(),
            );
        }
    }
}

/// Applies the copartition groups: external topics of a group must have one partition count,
/// which its repartition topics take. `Ok(Some(problem))`: INCORRECTLY_PARTITIONED_TOPICS.
fn copartition(
    topology: &Topology,
    count: &dyn Fn(&str) -> Option<i32>,
    decided: &mut BTreeMap<String, i32>,
) -> Result<Option<String>, String> {
    for s in &topology.subtopologies {
        for g in &s.copartition_groups {
            let external: Vec<(&String, i32)> = g
                .source_topics
                .iter()
                .filter_map(|i| s.source_topics.get(*i as usize))
                .filter_map(|t| count(t).map(|n| (t, n)))
                .collect();
            let repartition: Vec<&TopicInfo> = g
                .repartition_source_topics
                .iter()
                .filter_map(|i| s.repartition_source_topics.get(*i as usize))
                .collect();
            let counts: BTreeSet<i32> = external.iter().map(|(_, n)| *n).collect();
            if counts.len() > 1 {
                let listed: Vec<String> =
                    external.iter().map(|(t, n)| format!("{t}={n}")).collect();
                return Ok(Some(format!(
                    "Following topics do not have the same number of partitions: [{{{}}}]",
                    listed.join(", ")
                )));
            }
            let target = match counts.into_iter().next() {
                Some(n) => n,
                None => {
                    let fixed: BTreeSet<i32> = repartition
                        .iter()
                        .filter(|t| t.partitions > 0)
                        .map(|t| t.partitions)
                        .collect();
                    if fixed.len() > 1 {
                        return Err(format!(
                            "Copartitioned repartition topics of subtopology {} have different fixed partition counts.",
                            s.id
                        ));
                    }
                    match fixed.into_iter().next() {
                        Some(n) => n,
                        None => repartition
                            .iter()
                            .filter_map(|t| decided.get(&t.name).copied())
                            .max()
                            .unwrap_or(0),
                    }
                }
            };
            for t in repartition {
                if t.partitions > 0 && t.partitions != target {
                    return Ok(Some(format!(
                        "Following topics do not have the same number of partitions: [{{{}={}, ...={target}}}]",
                        t.name, t.partitions
                    )));
                }
                decided.insert(t.name.clone(), target);
            }
        }
    }
    Ok(None)
}

/// Where a member stands in handing over tasks (Kafka's `MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    Stable,
    /// It must stop running some tasks before it moves to the new epoch.
    UnrevokedTasks,
    /// Some of its target tasks are still run by others.
    UnreleasedTasks,
}

#[derive(Debug, Clone)]
pub struct StreamsMember {
    pub member_id: String,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub state: MemberState,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// The KafkaStreams instance; its threads share it.
    pub process_id: String,
    pub user_endpoint: Option<(String, u16)>,
    pub client_tags: Vec<(String, String)>,
    pub rebalance_timeout_ms: i32,
    pub topology_epoch: i32,
    /// Active tasks with the epoch each was granted at; standby and warm-up tasks.
    pub active: BTreeMap<TaskId, i32>,
    pub standby: BTreeSet<TaskId>,
    pub warmup: BTreeSet<TaskId>,
    /// Tasks it must stop running (it still runs them until a heartbeat no longer lists them).
    pub revoking: Tasks,
    /// When its session ends unless it heartbeats (ms on the coordinator's clock).
    pub deadline_ms: i64,
    /// When it is removed if it still has not revoked what it must.
    pub revoke_deadline_ms: Option<i64>,
    /// Changelog offset sums per task, as last reported (for Describe and standby ranking).
    pub task_offsets: Vec<(TaskId, i64)>,
    pub task_end_offsets: Vec<(TaskId, i64)>,
}

impl StreamsMember {
    fn new(member_id: &str) -> StreamsMember {
        StreamsMember {
            member_id: member_id.to_string(),
            epoch: 0,
            previous_epoch: -1,
            state: MemberState::Stable,
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            process_id: String::new(),
            user_endpoint: None,
            client_tags: Vec::new(),
            rebalance_timeout_ms: 300_000,
            topology_epoch: -1,
            active: BTreeMap::new(),
            standby: BTreeSet::new(),
            warmup: BTreeSet::new(),
            revoking: Tasks::default(),
            deadline_ms: 0,
            revoke_deadline_ms: None,
            task_offsets: Vec::new(),
            task_end_offsets: Vec::new(),
        }
    }

    /// Its tasks now (revoking ones not included).
    pub fn assigned(&self) -> Tasks {
        Tasks {
            active: self.active.keys().cloned().collect(),
            standby: self.standby.clone(),
            warmup: self.warmup.clone(),
        }
    }
}

/// One StreamsGroupHeartbeat, as the group applies it. Lists that are `None` are unchanged.
#[derive(Debug, Clone, Default)]
pub struct StreamsHeartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub topology: Option<Topology>,
    /// The tasks the member runs now: all three lists or none.
    pub owned: Option<Tasks>,
    pub process_id: Option<String>,
    pub user_endpoint: Option<(String, u16)>,
    pub client_tags: Option<Vec<(String, String)>>,
    pub task_offsets: Option<Vec<(TaskId, i64)>>,
    pub task_end_offsets: Option<Vec<(TaskId, i64)>>,
    pub shutdown_application: bool,
    pub client_id: String,
    pub client_host: String,
}

impl StreamsHeartbeat {
    /// Kafka's checks of the request's fields: `(error, message)` when it is malformed.
    pub fn validate(&self) -> Result<(), (i16, String)> {
        let bad = |m: &str| Err((INVALID_REQUEST, m.to_string()));
        if self.member_id.is_empty() {
            return bad("MemberId can't be empty.");
        }
        if self.instance_id.as_deref() == Some("") {
            return bad("InstanceId can't be empty.");
        }
        if self.rack_id.as_deref() == Some("") {
            return bad("RackId can't be empty.");
        }
        if self.member_epoch < -2 {
            return bad("MemberEpoch is invalid.");
        }
        if self.member_epoch == -2 && self.instance_id.is_none() {
            return bad("InstanceId can't be null when MemberEpoch is -2.");
        }
        if self.member_epoch == 0 {
            if self.rebalance_timeout_ms == -1 {
                return bad("RebalanceTimeoutMs must be provided in first request.");
            }
            if self.owned.as_ref().is_some_and(|t| !t.is_empty()) {
                return bad(
                    "ActiveTasks, StandbyTasks and WarmupTasks must be empty when (re-)joining.",
                );
            }
            if self.topology.is_none() {
                return bad("Topology must be non-null when (re-)joining.");
            }
        } else if self.topology.is_some() {
            return bad("Topology can only be provided when (re-)joining.");
        }
        if let Some(t) = &self.topology {
            if t.subtopologies
                .iter()
                .flat_map(|s| &s.state_changelog_topics)
                .any(|c| c.partitions != 0)
            {
                return Err((
                    STREAMS_INVALID_TOPOLOGY,
                    "Changelog topics must not have a fixed number of partitions.".into(),
                ));
            }
        }
        Ok(())
    }
}

/// What a heartbeat gets back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamsAnswer {
    pub member_epoch: i32,
    /// The member's tasks, when they are new to it (`None`: unchanged).
    pub tasks: Option<Tasks>,
    /// `(code, detail)`, in Kafka's order.
    pub status: Vec<(i8, String)>,
    /// Internal topics the caller should create (the group is not ready without them).
    pub to_create: Vec<TopicInfo>,
    /// The group's endpoint epoch (it moves when a member's endpoint or an endpoint's tasks
    /// change).
    pub endpoint_epoch: i32,
}

/// A group's own settings (its `streams.*` group configs), over the broker's.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamsOverrides {
    pub session_ms: Option<i64>,
    pub heartbeat_ms: Option<i64>,
    pub num_standby: Option<usize>,
    pub initial_delay_ms: Option<i64>,
}

/// Settings the group runs with (broker config, or the group's own).
#[derive(Debug, Clone, Copy)]
pub struct StreamsSettings {
    pub session_ms: i64,
    pub num_standby: usize,
    pub initial_delay_ms: i64,
    pub assignment_interval_ms: i64,
    pub max_size: usize,
}

#[derive(Debug, Clone)]
pub struct StreamsGroup {
    pub group_epoch: i32,
    /// The epoch the target assignment was computed at.
    pub assignment_epoch: i32,
    pub topology: Option<Topology>,
    /// The topology against the catalog, as last worked out.
    pub configured: Option<Configured>,
    pub members: BTreeMap<String, StreamsMember>,
    /// Each member's tasks at `assignment_epoch`.
    pub target: BTreeMap<String, Tasks>,
    /// When the assignor last ran (ms on the coordinator's clock); 0: never, or the group
    /// emptied, so the next assignment is not held back by the interval.
    last_assigned_ms: i64,
    /// Until then the first assignment of the group waits for more members.
    initial_delay_until_ms: Option<i64>,
    /// The member that asked the whole application to shut down, until the group is empty.
    pub shutdown_requester: Option<String>,
    pub endpoint_epoch: i32,
    /// Standby replicas per stateful task the target was computed with: a change recomputes it.
    num_standby: usize,
}

impl Default for StreamsGroup {
    fn default() -> Self {
        StreamsGroup {
            group_epoch: 1,
            assignment_epoch: 1,
            topology: None,
            configured: None,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            last_assigned_ms: 0,
            initial_delay_until_ms: None,
            shutdown_requester: None,
            endpoint_epoch: 0,
            num_standby: 0,
        }
    }
}

impl StreamsGroup {
    /// Kafka's group states: Empty, NotReady, Assigning, Reconciling, Stable.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if !matches!(self.configured, Some(Configured::Ready(_))) {
            "NotReady"
        } else if self.group_epoch > self.assignment_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| m.state != MemberState::Stable || m.epoch != self.assignment_epoch)
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// Whether `member_id` may join: the group is not full, or it is a member already.
    pub fn admits(&self, member_id: &str, max: usize) -> bool {
        self.members.contains_key(member_id) || self.members.len() < max
    }

    /// Applies one heartbeat of a member (epoch 0 and up; -1 and -2 leave).
    pub fn heartbeat(
        &mut self,
        hb: StreamsHeartbeat,
        topics: &Topics,
        now_ms: i64,
        settings: StreamsSettings,
    ) -> Result<StreamsAnswer, (i16, String)> {
        self.expire(now_ms);
        if hb.member_epoch < 0 {
            return self.leave(&hb);
        }
        let joining = hb.member_epoch == 0;
        self.check_epoch(&hb)?;
        if joining && !self.admits(&hb.member_id, settings.max_size) {
            return Err((
                GROUP_MAX_SIZE_REACHED,
                format!(
                    "The streams group has reached its maximum capacity of {} members.",
                    settings.max_size
                ),
            ));
        }
        let mut recompute = self.update_topology(&hb)?;
        recompute |= self.update_member(&hb, now_ms, settings.session_ms);
        recompute |= self.reconfigure(topics)?;
        recompute |=
            std::mem::replace(&mut self.num_standby, settings.num_standby) != settings.num_standby;
        if recompute {
            self.group_epoch += 1;
            if self.members.len() == 1
                && self.last_assigned_ms == 0
                && settings.initial_delay_ms > 0
            {
                self.initial_delay_until_ms = Some(now_ms + settings.initial_delay_ms);
            }
        }
        let delayed = self.maybe_assign(now_ms, settings);
        let before = self.members.get(&hb.member_id).map(StreamsMember::assigned);
        self.reconcile(&hb.member_id, hb.owned.as_ref(), now_ms);
        let member = self
            .members
            .get(&hb.member_id)
            .ok_or((UNKNOWN_MEMBER_ID, String::new()))?;
        let after = member.assigned();
        // New to the member: it joined, its tasks changed, or it says it runs others (a response
        // it never got).
        let told = hb.owned.as_ref().is_some_and(|o| *o != after);
        let changed = joining || told || before.as_ref() != Some(&after);
        let endpoint_changed = changed && member.user_endpoint.is_some();
        if endpoint_changed {
            self.endpoint_epoch += 1;
        }
        let member = &self.members[&hb.member_id];
        Ok(StreamsAnswer {
            member_epoch: member.epoch,
            tasks: changed.then_some(after),
            status: self.status(delayed),
            to_create: match &self.configured {
                Some(Configured::NotReady { to_create, .. }) => to_create.clone(),
                _ => Vec::new(),
            },
            endpoint_epoch: self.endpoint_epoch,
        })
    }

    /// A leave (-1), or a static member leaving for now (-2, treated as a leave here).
    fn leave(&mut self, hb: &StreamsHeartbeat) -> Result<StreamsAnswer, (i16, String)> {
        if !self.members.contains_key(&hb.member_id) {
            return Err((
                UNKNOWN_MEMBER_ID,
                format!("Member {} is not a member of group.", hb.member_id),
            ));
        }
        if hb.shutdown_application {
            self.shutdown_requester = Some(hb.member_id.clone());
        }
        self.remove(&hb.member_id);
        Ok(StreamsAnswer {
            member_epoch: hb.member_epoch,
            tasks: None,
            status: Vec::new(),
            to_create: Vec::new(),
            endpoint_epoch: self.endpoint_epoch,
        })
    }

    /// Removes a member (left, fenced, or timed out): its tasks go to the others.
    fn remove(&mut self, member_id: &str) {
        let Some(gone) = self.members.remove(member_id) else {
            return;
        };
        if gone.user_endpoint.is_some() {
            // The others' view of who serves which partitions (interactive queries) changed.
            self.endpoint_epoch += 1;
        }
        self.target.remove(member_id);
        self.group_epoch += 1;
        if self.members.is_empty() {
            self.assignment_epoch = self.group_epoch;
            self.last_assigned_ms = 0;
            self.initial_delay_until_ms = None;
            self.shutdown_requester = None;
            self.target.clear();
        }
    }

    /// Kafka's epoch check of a member's heartbeat.
    fn check_epoch(&self, hb: &StreamsHeartbeat) -> Result<(), (i16, String)> {
        let joining = hb.member_epoch == 0;
        let Some(m) = self.members.get(&hb.member_id) else {
            if joining {
                return Ok(());
            }
            return Err((
                UNKNOWN_MEMBER_ID,
                format!("Member {} is not a member of group.", hb.member_id),
            ));
        };
        if joining || hb.member_epoch == m.epoch {
            return Ok(());
        }
        // A lost response: the member is one epoch behind and runs only tasks it still has.
        let lost_response = hb.member_epoch == m.previous_epoch
            && hb
                .owned
                .as_ref()
                .is_some_and(|t| t.active.iter().all(|task| m.active.contains_key(task)));
        if hb.member_epoch < m.epoch && lost_response {
            return Ok(());
        }
        Err((
            FENCED_MEMBER_EPOCH,
            format!(
                "The streams group member has a {} member epoch ({}) than the one known by the group coordinator ({}).",
                if hb.member_epoch > m.epoch { "greater" } else { "smaller" },
                hb.member_epoch,
                m.epoch
            ),
        ))
    }

    /// Takes the join's topology: the group's first, or a new one while no other member runs
    /// the old. Returns whether the group must be assigned again.
    fn update_topology(&mut self, hb: &StreamsHeartbeat) -> Result<bool, (i16, String)> {
        let Some(t) = &hb.topology else {
            return Ok(false);
        };
        match &self.topology {
            Some(current) if current == t => Ok(false),
            Some(current) if t.epoch < current.epoch => Ok(false),
            Some(_) if self.members.keys().any(|m| *m != hb.member_id) => Err((
                INVALID_REQUEST,
                "Topology updates are not supported yet.".into(),
            )),
            _ => {
                self.topology = Some(t.clone());
                self.configured = None;
                Ok(true)
            }
        }
    }

    /// Applies the member's fields; whether anything the assignor uses changed.
    fn update_member(&mut self, hb: &StreamsHeartbeat, now_ms: i64, session_ms: i64) -> bool {
        let mut changed = !self.members.contains_key(&hb.member_id);
        let topology_epoch = self.topology.as_ref().map_or(-1, |t| t.epoch);
        let m = self
            .members
            .entry(hb.member_id.clone())
            .or_insert_with(|| StreamsMember::new(&hb.member_id));
        m.deadline_ms = now_ms + session_ms;
        m.client_id = hb.client_id.clone();
        m.client_host = hb.client_host.clone();
        if hb.instance_id.is_some() {
            m.instance_id = hb.instance_id.clone();
        }
        if hb.rack_id.is_some() && m.rack_id != hb.rack_id {
            m.rack_id = hb.rack_id.clone();
            changed = true;
        }
        if hb.rebalance_timeout_ms > 0 {
            m.rebalance_timeout_ms = hb.rebalance_timeout_ms;
        }
        if let Some(p) = &hb.process_id {
            changed |= m.process_id != *p;
            m.process_id = p.clone();
        }
        if let Some(tags) = &hb.client_tags {
            changed |= m.client_tags != *tags;
            m.client_tags = tags.clone();
        }
        if hb.member_epoch == 0 {
            if m.user_endpoint != hb.user_endpoint {
                self.endpoint_epoch += 1;
            }
            m.user_endpoint = hb.user_endpoint.clone();
            changed |= m.topology_epoch != topology_epoch;
            m.topology_epoch = topology_epoch;
        } else if hb.user_endpoint.is_some() && m.user_endpoint != hb.user_endpoint {
            m.user_endpoint = hb.user_endpoint.clone();
            self.endpoint_epoch += 1;
        }
        if let Some(o) = &hb.task_offsets {
            m.task_offsets = o.clone();
        }
        if let Some(o) = &hb.task_end_offsets {
            m.task_end_offsets = o.clone();
        }
        if hb.shutdown_application {
            self.shutdown_requester.get_or_insert(hb.member_id.clone());
        }
        changed
    }

    /// Sets the topology against the catalog; whether the tasks changed (the group must be
    /// assigned again). `Err`: STREAMS_INVALID_TOPOLOGY.
    fn reconfigure(&mut self, topics: &Topics) -> Result<bool, (i16, String)> {
        let Some(topology) = &self.topology else {
            return Ok(false);
        };
        let configured = configure(topology, topics).map_err(|m| (STREAMS_INVALID_TOPOLOGY, m))?;
        if self.configured.as_ref() == Some(&configured) {
            return Ok(false);
        }
        self.configured = Some(configured);
        Ok(true)
    }

    /// Runs the assignor if the group epoch moved and nothing holds it back; why the assignment
    /// is delayed, if it is.
    fn maybe_assign(&mut self, now_ms: i64, settings: StreamsSettings) -> Option<&'static str> {
        if self.assignment_epoch >= self.group_epoch {
            return None;
        }
        if self.initial_delay_until_ms.is_some_and(|t| now_ms < t) {
            return Some("Assignment delayed due to the configured initial rebalance delay.");
        }
        if self.last_assigned_ms > 0
            && now_ms < self.last_assigned_ms + settings.assignment_interval_ms
        {
            return Some("Assignment delayed due to the configured assignment interval.");
        }
        self.initial_delay_until_ms = None;
        self.target = match &self.configured {
            Some(Configured::Ready(tasks)) => {
                let stateful = self.stateful_subtopologies();
                assign(&self.members, tasks, &stateful, settings.num_standby)
            }
            _ => self
                .members
                .keys()
                .map(|m| (m.clone(), Tasks::default()))
                .collect(),
        };
        self.assignment_epoch = self.group_epoch;
        self.last_assigned_ms = now_ms.max(1);
        None
    }

    fn stateful_subtopologies(&self) -> BTreeSet<String> {
        self.topology
            .iter()
            .flat_map(|t| &t.subtopologies)
            .filter(|s| s.stateful())
            .map(|s| s.id.clone())
            .collect()
    }

    /// Moves `member_id` toward its target (Kafka's `CurrentAssignmentBuilder`).
    fn reconcile(&mut self, member_id: &str, owned: Option<&Tasks>, now_ms: i64) {
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let epoch = self.assignment_epoch;
        let (held_active, held_standby) = self.held_elsewhere(member_id);
        let Some(m) = self.members.get_mut(member_id) else {
            return;
        };
        if m.state == MemberState::UnrevokedTasks {
            let still_runs =
                owned.is_none_or(|o| o.all().any(|t| m.revoking.all().any(|r| r == t)));
            if still_runs {
                return;
            }
            m.revoking = Tasks::default();
            m.revoke_deadline_ms = None;
            m.state = MemberState::Stable;
        }
        if m.state == MemberState::Stable && m.epoch == epoch {
            return;
        }
        let revoking = Tasks {
            active: m
                .active
                .keys()
                .filter(|t| !target.active.contains(*t))
                .cloned()
                .collect(),
            standby: m.standby.difference(&target.standby).cloned().collect(),
            warmup: m.warmup.difference(&target.warmup).cloned().collect(),
        };
        if !revoking.is_empty() {
            m.active.retain(|t, _| target.active.contains(t));
            m.standby.retain(|t| target.standby.contains(t));
            m.warmup.retain(|t| target.warmup.contains(t));
            m.revoking = revoking;
            m.state = MemberState::UnrevokedTasks;
            m.revoke_deadline_ms = Some(now_ms + m.rebalance_timeout_ms as i64);
            return;
        }
        let mut unreleased = false;
        for t in &target.active {
            if m.active.contains_key(t) {
                continue;
            }
            if held_active.contains(t) {
                unreleased = true;
            } else {
                m.active.insert(t.clone(), epoch);
            }
        }
        for t in &target.standby {
            if m.standby.contains(t) {
                continue;
            }
            if held_standby.contains(t) {
                unreleased = true;
            } else {
                m.standby.insert(t.clone());
            }
        }
        m.warmup = target.warmup.clone();
        debug_assert!(m.active.keys().all(|t| !m.standby.contains(t)));
        m.previous_epoch = m.epoch;
        m.epoch = epoch;
        m.state = if unreleased {
            MemberState::UnreleasedTasks
        } else {
            MemberState::Stable
        };
    }

    /// The tasks `member_id` may not take yet (Kafka's unreleased tasks): active tasks any other
    /// member still runs or revokes, or another thread of its process runs as a standby or
    /// warm-up (they share the process's state directory); standby tasks another thread of its
    /// process runs in any role.
    fn held_elsewhere(&self, member_id: &str) -> (BTreeSet<TaskId>, BTreeSet<TaskId>) {
        let process = self.members.get(member_id).map(|m| m.process_id.as_str());
        let mut active = BTreeSet::new();
        let mut standby = BTreeSet::new();
        for m in self.members.values().filter(|m| m.member_id != member_id) {
            active.extend(m.active.keys().cloned());
            active.extend(m.revoking.active.iter().cloned());
            if Some(m.process_id.as_str()) == process {
                let passive = m
                    .standby
                    .iter()
                    .chain(&m.warmup)
                    .chain(&m.revoking.standby)
                    .chain(&m.revoking.warmup);
                active.extend(passive.clone().cloned());
                standby.extend(passive.cloned());
                standby.extend(m.active.keys().cloned());
                standby.extend(m.revoking.active.iter().cloned());
            }
        }
        (active, standby)
    }

    /// The statuses a member is told, in Kafka's order.
    fn status(&self, delayed: Option<&str>) -> Vec<(i8, String)> {
        let mut out = Vec::new();
        if let Some(why) = delayed {
            out.push((status::ASSIGNMENT_DELAYED, why.to_string()));
        }
        if let Some(Configured::NotReady { status, detail, .. }) = &self.configured {
            out.push((*status, detail.clone()));
        }
        if let Some(requester) = &self.shutdown_requester {
            out.push((
                status::SHUTDOWN_APPLICATION,
                format!("Streams group member {requester} encountered a fatal error and requested a shutdown for the entire application."),
            ));
        }
        out
    }

    /// Removes the members whose session ended, or who did not revoke in time; whether any
    /// was.
    pub fn expire(&mut self, now_ms: i64) -> bool {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                m.deadline_ms <= now_ms || m.revoke_deadline_ms.is_some_and(|d| d <= now_ms)
            })
            .map(|m| m.member_id.clone())
            .collect();
        for id in &gone {
            self.remove(id);
        }
        !gone.is_empty()
    }

    /// Checks an offset commit's member epoch (OffsetCommit, TxnOffsetCommit): the member's
    /// epoch, or an older one for partitions of active tasks it was granted at or before that
    /// epoch (the commit made while revoking). `partitions`: the committed (topic, partition)s.
    pub fn validate_commit(
        &self,
        member_id: &str,
        epoch: i32,
        partitions: &[(String, i32)],
    ) -> Result<(), i16> {
        if epoch < 0 && self.members.is_empty() {
            return Ok(());
        }
        let m = self.members.get(member_id).ok_or(UNKNOWN_MEMBER_ID)?;
        if epoch == m.epoch {
            return Ok(());
        }
        if epoch > m.epoch {
            return Err(STALE_MEMBER_EPOCH);
        }
        let owns = |topic: &str, p: i32| {
            self.subtopology_of(topic).is_some_and(|s| {
                let task = (s.to_string(), p);
                m.active.get(&task).is_some_and(|granted| *granted <= epoch)
                    || m.revoking.active.contains(&task)
            })
        };
        if partitions.iter().all(|(t, p)| owns(t, *p)) {
            Ok(())
        } else {
            Err(STALE_MEMBER_EPOCH)
        }
    }

    /// Checks an OffsetFetch's member epoch: an admin (no member id, negative epoch), or the
    /// member at its epoch.
    pub fn validate_fetch(&self, member_id: Option<&str>, epoch: i32) -> Result<(), i16> {
        let Some(member_id) = member_id else {
            return Ok(());
        };
        if epoch < 0 && member_id.is_empty() {
            return Ok(());
        }
        let m = self.members.get(member_id).ok_or(UNKNOWN_MEMBER_ID)?;
        if m.epoch == epoch {
            Ok(())
        } else {
            Err(STALE_MEMBER_EPOCH)
        }
    }

    /// The subtopology reading `topic` (a source or repartition source).
    fn subtopology_of(&self, topic: &str) -> Option<&str> {
        self.topology
            .iter()
            .flat_map(|t| &t.subtopologies)
            .find(|s| s.input_topics().any(|t| t == topic))
            .map(|s| s.id.as_str())
    }

    /// Whether offsets of `topic` belong to the running application (OffsetDelete refuses
    /// them while the group has members).
    pub fn reads_topic(&self, topic: &str) -> bool {
        !self.members.is_empty() && self.subtopology_of(topic).is_some()
    }

    /// The group as stored: its epoch only. Members are not stored: after a coordinator change
    /// they are told UNKNOWN_MEMBER_ID, give up their tasks and join again with their member
    /// ids and the topology; the higher epoch fences commits made under the old coordinator.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT, 1];
        out.extend_from_slice(&self.group_epoch.to_be_bytes());
        out
    }

    pub fn decode(data: &[u8]) -> Option<StreamsGroup> {
        match data {
            [FORMAT, 1, a, b, c, d] => {
                let epoch = i32::from_be_bytes([*a, *b, *c, *d]);
                Some(StreamsGroup {
                    group_epoch: epoch,
                    assignment_epoch: epoch,
                    ..StreamsGroup::default()
                })
            }
            _ => None,
        }
    }
}

/// The task assignor (Kafka's `sticky` in spirit): every active task to one member, at most
/// ⌈tasks / members⌉ each (the quota shrinks as members fill up, so counts differ by one at
/// most); a task stays with its previous owner while that one is under the quota, else goes to
/// a previous standby, else to the least loaded process (members of one process share its
/// load). Standby replicas of stateful tasks go to members of other processes.
pub fn assign(
    members: &BTreeMap<String, StreamsMember>,
    tasks: &BTreeMap<String, i32>,
    stateful: &BTreeSet<String>,
    num_standby: usize,
) -> BTreeMap<String, Tasks> {
    let mut out: BTreeMap<String, Tasks> = members
        .keys()
        .map(|m| (m.clone(), Tasks::default()))
        .collect();
    if members.is_empty() {
        return out;
    }
    let mut all: Vec<TaskId> = tasks
        .iter()
        .flat_map(|(s, n)| (0..*n).map(move |p| (s.clone(), p)))
        .collect();
    let mut pool = Quota::new(members, all.len());
    // Sticky first, by (partition, subtopology).
    all.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    let mut left = Vec::new();
    for t in all {
        let previous = members
            .values()
            .find(|m| m.active.contains_key(&t) || m.revoking.active.contains(&t))
            .map(|m| m.member_id.clone())
            .filter(|m| pool.open(m));
        let standby = || {
            members
                .values()
                .filter(|m| m.standby.contains(&t) && pool.open(&m.member_id))
                .min_by_key(|m| pool.count(&m.member_id))
                .map(|m| m.member_id.clone())
        };
        match previous.or_else(standby) {
            Some(m) => {
                pool.take(&m);
                if let Some(tasks) = out.get_mut(&m) {
                    tasks.active.insert(t);
                }
            }
            None => left.push(t),
        }
    }
    left.sort();
    for t in left {
        let m = pool.least_loaded(members);
        pool.take(&m);
        if let Some(tasks) = out.get_mut(&m) {
            tasks.active.insert(t);
        }
    }
    if num_standby > 0 {
        assign_standbys(members, &mut out, stateful, num_standby);
    }
    out
}

/// Members' task counts against the active quota. A member whose count reaches the quota leaves
/// the pool, and the quota is worked out again over the tasks and members left (so it only
/// shrinks, and members already at the new quota leave too): counts end within one of each
/// other wherever stickiness allows.
struct Quota {
    counts: BTreeMap<String, usize>,
    open: BTreeSet<String>,
    quota: usize,
    /// Tasks not given to members that left the pool.
    remaining: usize,
    process: BTreeMap<String, String>,
    /// Per process: (members, tasks given to them).
    process_load: BTreeMap<String, (usize, usize)>,
}

impl Quota {
    fn new(members: &BTreeMap<String, StreamsMember>, tasks: usize) -> Quota {
        let mut process_load: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for m in members.values() {
            process_load.entry(m.process_id.clone()).or_default().0 += 1;
        }
        Quota {
            counts: members.keys().map(|m| (m.clone(), 0)).collect(),
            open: members.keys().cloned().collect(),
            quota: tasks.div_ceil(members.len().max(1)),
            remaining: tasks,
            process: members
                .values()
                .map(|m| (m.member_id.clone(), m.process_id.clone()))
                .collect(),
            process_load,
        }
    }

    fn open(&self, m: &str) -> bool {
        self.open.contains(m)
    }

    fn count(&self, m: &str) -> usize {
        self.counts.get(m).copied().unwrap_or(0)
    }

    fn take(&mut self, m: &str) {
        *self.counts.entry(m.to_string()).or_default() += 1;
        if let Some(p) = self.process.get(m) {
            if let Some(load) = self.process_load.get_mut(p) {
                load.1 += 1;
            }
        }
        self.close_full();
    }

    /// Takes members at the quota out of the pool, working the quota out again until none is.
    fn close_full(&mut self) {
        loop {
            let full: Vec<String> = self
                .open
                .iter()
                .filter(|m| self.count(m) >= self.quota)
                .cloned()
                .collect();
            if full.is_empty() || self.open.len() == full.len() {
                return;
            }
            for m in full {
                self.open.remove(&m);
                self.remaining = self.remaining.saturating_sub(self.count(&m));
            }
            self.quota = self.remaining.div_ceil(self.open.len());
        }
    }

    /// The open member of the least loaded process (tasks per member), fewest tasks first;
    /// the member with the fewest tasks if every one is full.
    fn least_loaded(&self, members: &BTreeMap<String, StreamsMember>) -> String {
        let load = |m: &str| {
            let p = self.process.get(m).map(String::as_str).unwrap_or("");
            self.process_load
                .get(p)
                .map_or(0, |(n, tasks)| tasks * 1000 / (*n).max(1))
        };
        let key = |m: &String| (load(m), self.count(m), m.clone());
        let pick = if self.open.is_empty() {
            members.keys().min_by_key(|m| key(m))
        } else {
            self.open.iter().min_by_key(|m| key(m))
        };
        pick.cloned().unwrap_or_default()
    }
}

/// Standby replicas: each stateful task, `num_standby` times, to a member of a process that
/// does not hold it yet, previous holders first, then the member with the fewest tasks.
fn assign_standbys(
    members: &BTreeMap<String, StreamsMember>,
    out: &mut BTreeMap<String, Tasks>,
    stateful: &BTreeSet<String>,
    num_standby: usize,
) {
    let process = |m: &str| {
        members
            .get(m)
            .map(|m| m.process_id.clone())
            .unwrap_or_default()
    };
    let actives: Vec<TaskId> = out
        .values()
        .flat_map(|t| t.active.iter().cloned())
        .filter(|t| stateful.contains(&t.0))
        .collect();
    for task in actives {
        for _ in 0..num_standby {
            let holders: BTreeSet<String> = out
                .iter()
                .filter(|(_, t)| t.active.contains(&task) || t.standby.contains(&task))
                .map(|(m, _)| process(m))
                .collect();
            let load = |m: &String| out.get(m).map_or(0, |t| t.active.len() + t.standby.len());
            let pick = members
                .values()
                .filter(|m| !holders.contains(&m.process_id))
                .min_by_key(|m| {
                    // Where the task's state is already: its standby, then its previous owner.
                    let warm = if m.standby.contains(&task) {
                        0
                    } else if m.active.contains_key(&task) {
                        1
                    } else {
                        2
                    };
                    (warm, load(&m.member_id), m.member_id.clone())
                })
                .map(|m| m.member_id.clone());
            let Some(m) = pick else {
                break;
            };
            if let Some(t) = out.get_mut(&m) {
                t.standby.insert(task.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests;
