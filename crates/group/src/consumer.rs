//! One group of Kafka's consumer group protocol (KIP-848), without I/O: members heartbeat, the
//! group computes a target assignment with a server-side assignor, and each member converges to
//! its part of it, releasing partitions before anyone else is given them.
//!
//! Epochs: the *group epoch* grows whenever membership, a subscription or the partitions of a
//! subscribed topic change; the *target assignment* is recomputed when it lags the group epoch;
//! a member's *epoch* reaches the target's once it holds its whole target share. Reconciliation
//! follows Kafka's `CurrentAssignmentBuilder`:
//!
//! ```text
//!   Stable --target moved--> UnrevokedPartitions (keeps what stays, must give up the rest)
//!   UnrevokedPartitions --the member reports it gave them up--> next step
//!   next step: partitions still held by others -> UnreleasedPartitions (epoch = target's)
//!              otherwise                         -> Stable (epoch = target's)
//!   UnreleasedPartitions --others released them--> Stable
//! ```
//!
//! Subscriptions are topic names, a regular expression (Kafka 4.1's `SubscribedTopicRegex`,
//! matched against whole names), or both; they are resolved against the catalog the caller
//! passes with each heartbeat, so a topic created later that matches joins the subscription at
//! the next heartbeat (a new group epoch).
//!
//! [`crate::GroupCoordinator`] keeps these groups beside the classic ones, stores them
//! ([`ConsumerGroup::encode`]) whenever a heartbeat changed them, and expires members.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::assignor::{Assignment, Assignor, MemberSpec, TopicId};
use crate::codes::*;

/// Where a member is in converging to its target share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    Stable,
    UnrevokedPartitions,
    UnreleasedPartitions,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Topic names it subscribes to.
    pub subscribed: BTreeSet<String>,
    /// A regular expression whose matching topics it subscribes to as well.
    pub subscribed_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub state: MemberState,
    /// What it holds and may use.
    pub assigned: Assignment,
    /// What it holds but must give up.
    pub revoking: Assignment,
    /// When it was last heard from (milliseconds, the caller's clock).
    pub last_heard_ms: i64,
    /// While it gives up partitions: when its rebalance timeout runs out (it is removed then).
    pub revoke_deadline_ms: Option<i64>,
    /// A static member that left with epoch -2: it keeps its partitions for its session, for
    /// the same instance to take them back under a new member id without a rebalance.
    pub left_static: bool,
    /// A member speaking the classic protocol (JoinGroup, SyncGroup, Heartbeat) in this group:
    /// it was in the classic group this one was converted from, or joined since.
    pub classic: Option<ClassicMember>,
}

impl ConsumerMember {
    /// Its session timeout: its own for a classic member, the group's for the others.
    fn session_timeout_ms(&self, group_session_timeout_ms: i64) -> i64 {
        self.classic.as_ref().map_or(group_session_timeout_ms, |c| {
            i64::from(c.session_timeout_ms)
        })
    }
}

/// What the classic protocol needs of a member beyond the consumer protocol's view.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassicMember {
    pub session_timeout_ms: i32,
    /// The protocols it offered in its last JoinGroup, in its order, with their metadata.
    pub protocols: Vec<(String, bytes::Bytes)>,
}

/// One heartbeat, as the request says it (fields the client left null are `None`).
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    pub subscribed: Option<Vec<String>>,
    /// `Some("")` clears it.
    pub subscribed_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// What the member owns now, by its own account.
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
}

impl Heartbeat {
    /// Kafka's checks of a heartbeat's fields before it touches the group.
    pub fn validate(&self) -> Result<(), (i16, String)> {
        let invalid = |m: &str| Err((INVALID_REQUEST, m.to_string()));
        if self.instance_id.as_deref() == Some("") {
            return invalid("InstanceId can't be empty.");
        }
        if self.rack_id.as_deref() == Some("") {
            return invalid("RackId can't be empty.");
        }
        match self.member_epoch {
            0 => {
                if self.member_id.is_empty() {
                    return invalid("MemberId can't be empty.");
                }
                if self.rebalance_timeout_ms == -1 {
                    return invalid("RebalanceTimeoutMs must be provided in first request.");
                }
                if self.owned.as_ref().is_none_or(|o| !o.is_empty()) {
                    return invalid("TopicPartitions must be empty when (re-)joining.");
                }
                // An empty list is a subscription (to nothing yet): a Java consumer with a
                // pattern its metadata has not matched anything with yet joins with one.
                if self.subscribed.is_none() && self.subscribed_regex.is_none() {
                    return invalid(
                        "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                    );
                }
            }
            -2 if self.instance_id.is_none() => return invalid("InstanceId can't be null."),
            e if e > 0 || e == -1 || e == -2 => {
                if self.member_id.is_empty() {
                    return invalid("MemberId can't be empty.");
                }
            }
            _ => return invalid("MemberEpoch is invalid."),
        }
        if let Some(a) = &self.server_assignor {
            if Assignor::by_name(a).is_none() {
                return Err((
                    UNSUPPORTED_ASSIGNOR,
                    format!(
                        "ServerAssignor {a} is not supported. Supported assignors: uniform, range."
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A heartbeat with every field a member sends when it joins or recovers: it is answered
    /// with the whole assignment.
    fn is_full(&self) -> bool {
        self.member_epoch == 0
            || (self.rebalance_timeout_ms != -1
                && self.subscribed.is_some()
                && self.owned.is_some())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub error: i16,
    pub message: Option<String>,
    pub member_id: String,
    pub member_epoch: i32,
    /// The member's assignment (what it may hold now): sent when it changed, or to a full
    /// heartbeat, as Kafka does.
    pub assignment: Option<Assignment>,
}

impl Answer {
    fn error(member_id: &str, error: i16) -> Answer {
        Answer {
            error,
            message: None,
            member_id: member_id.to_string(),
            member_epoch: -1,
            assignment: None,
        }
    }

    fn error_with(member_id: &str, error: i16, message: String) -> Answer {
        Answer {
            message: Some(message),
            ..Answer::error(member_id, error)
        }
    }
}

/// Topics by name: id and partition count (the catalog, as the caller sees it now).
pub type Topics = BTreeMap<String, (TopicId, i32)>;

/// The names of the catalog's topics, by id (the protocol names topics by id).
pub fn topic_names(topics: &Topics) -> BTreeMap<TopicId, String> {
    topics
        .iter()
        .map(|(name, (id, _))| (*id, name.clone()))
        .collect()
}

#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    pub group_epoch: i32,
    pub target_epoch: i32,
    pub members: BTreeMap<String, ConsumerMember>,
    pub target: BTreeMap<String, Assignment>,
    /// The partition counts of subscribed topics the group epoch last saw.
    pub metadata: BTreeMap<TopicId, i32>,
    /// Compiled subscription patterns (not stored: compiled again when needed).
    pub(crate) regexes: HashMap<String, regex_lite::Regex>,
}

/// Compiles a subscription pattern: it must match a whole topic name, as Kafka matches them.
fn compile(pattern: &str) -> Result<regex_lite::Regex, String> {
    regex_lite::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| e.to_string())
}

fn without(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (t, ps) in a {
        let rest: BTreeSet<i32> = match b.get(t) {
            Some(bs) => ps.difference(bs).copied().collect(),
            None => ps.clone(),
        };
        if !rest.is_empty() {
            out.insert(*t, rest);
        }
    }
    out
}

fn intersect(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (t, ps) in a {
        if let Some(bs) = b.get(t) {
            let both: BTreeSet<i32> = ps.intersection(bs).copied().collect();
            if !both.is_empty() {
                out.insert(*t, both);
            }
        }
    }
    out
}

fn overlaps(a: &Assignment, b: &Assignment) -> bool {
    a.iter()
        .any(|(t, ps)| b.get(t).is_some_and(|bs| !ps.is_disjoint(bs)))
}

impl ConsumerGroup {
    /// Whether `member_id` (with `instance_id`) may join without taking the group past
    /// `max_size` members: a known member, or a static member coming back, always may.
    pub fn admits(&self, member_id: &str, instance_id: Option<&str>, max_size: usize) -> bool {
        self.members.len() < max_size
            || self.members.contains_key(member_id)
            || instance_id.is_some_and(|i| {
                self.members
                    .values()
                    .any(|m| m.instance_id.as_deref() == Some(i))
            })
    }

    /// The assignor the members ask for (the most common choice), else `uniform`.
    fn assignor(&self) -> Assignor {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = m.server_assignor.as_deref() {
                *votes.entry(a).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .and_then(|(a, _)| Assignor::by_name(a))
            .unwrap_or(Assignor::Uniform)
    }

    /// The compiled pattern member `m` subscribes with, if any.
    fn pattern(&self, m: &ConsumerMember) -> Option<&regex_lite::Regex> {
        m.subscribed_regex
            .as_ref()
            .and_then(|r| self.regexes.get(r))
    }

    /// Whether member `m` subscribes to topic `name`, by name or by pattern.
    fn subscribes(&self, m: &ConsumerMember, name: &str) -> bool {
        m.subscribed.contains(name) || self.pattern(m).is_some_and(|r| r.is_match(name))
    }

    /// The topics a member subscribes to, by name or by pattern, as they exist now. Only a
    /// pattern needs the whole catalog; names are looked up (this runs at every heartbeat).
    fn resolve<'t>(&self, m: &ConsumerMember, topics: &'t Topics) -> BTreeMap<&'t str, TopicId> {
        let entry = |(name, (id, _)): (&'t String, &'t (TopicId, i32))| (name.as_str(), *id);
        if self.pattern(m).is_none() {
            return m
                .subscribed
                .iter()
                .filter_map(|n| topics.get_key_value(n))
                .map(entry)
                .collect();
        }
        topics
            .iter()
            .filter(|(name, _)| self.subscribes(m, name))
            .map(entry)
            .collect()
    }

    /// The partition counts of the topics the members subscribe to.
    fn subscribed_metadata(&self, topics: &Topics) -> BTreeMap<TopicId, i32> {
        let mut out = BTreeMap::new();
        for m in self.members.values() {
            for name in self.resolve(m, topics).keys() {
                let (id, count) = topics[*name];
                out.insert(id, count);
            }
        }
        out
    }

    /// Compiles the patterns members subscribe with that are not compiled yet (after a group
    /// is read back from the store).
    fn compile_patterns(&mut self) {
        for m in self.members.values() {
            if let Some(r) = &m.subscribed_regex {
                if !self.regexes.contains_key(r) {
                    if let Ok(re) = compile(r) {
                        self.regexes.insert(r.clone(), re);
                    }
                }
            }
        }
        let used: BTreeSet<&String> = self
            .members
            .values()
            .filter_map(|m| m.subscribed_regex.as_ref())
            .collect();
        self.regexes.retain(|r, _| used.contains(r));
    }

    /// Kafka's group states: Empty, Assigning (the target lags the group epoch), Reconciling
    /// (some member is not at the target yet), Stable.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.target_epoch < self.group_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| m.epoch != self.target_epoch || m.state != MemberState::Stable)
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// The assignor the group uses now.
    pub fn assignor_name(&self) -> &'static str {
        self.assignor().name()
    }

    /// Whether some member subscribes to topic `name`, by name or by pattern.
    pub fn is_subscribed_to(&self, name: &str) -> bool {
        self.members.values().any(|m| self.subscribes(m, name))
    }

    /// Whether member `id` may commit or fetch offsets at `epoch` (OffsetCommit v9+,
    /// TxnOffsetCommit, OffsetFetch v9+): else Kafka's UNKNOWN_MEMBER_ID, or STALE_MEMBER_EPOCH
    /// for any other epoch than the member's.
    pub fn validate_member_epoch(&self, id: &str, epoch: i32) -> Result<(), i16> {
        let m = self.members.get(id).ok_or(UNKNOWN_MEMBER_ID)?;
        if m.left_static {
            return Err(UNKNOWN_MEMBER_ID);
        }
        if epoch == m.epoch {
            Ok(())
        } else if m.classic.is_some() {
            Err(ILLEGAL_GENERATION)
        } else {
            Err(STALE_MEMBER_EPOCH)
        }
    }

    /// Whether another member holds (or still gives up) the partition.
    fn held_by_other(&self, me: &str, topic: &TopicId, p: i32) -> bool {
        self.members.values().any(|m| {
            m.member_id != me
                && (m.assigned.get(topic).is_some_and(|s| s.contains(&p))
                    || m.revoking.get(topic).is_some_and(|s| s.contains(&p)))
        })
    }

    /// Handles one heartbeat at `now_ms` (already validated: [`Heartbeat::validate`]).
    pub fn heartbeat(&mut self, hb: Heartbeat, topics: &Topics, now_ms: i64) -> Answer {
        debug_assert!(hb.validate().is_ok(), "validated first");
        if self
            .members
            .get(&hb.member_id)
            .is_some_and(|m| m.classic.is_some())
        {
            // A classic member's id in a consumer group heartbeat.
            return Answer::error(&hb.member_id, UNKNOWN_MEMBER_ID);
        }
        self.apply(hb, topics, now_ms, None)
    }

    /// A JoinGroup of a classic member (new, or known by its id): its subscription and what it
    /// owns come from the JoinGroup's consumer protocol metadata. Answers with the member's
    /// epoch (its generation) and what it may hold now.
    pub fn classic_join(
        &mut self,
        hb: Heartbeat,
        classic: ClassicMember,
        topics: &Topics,
        now_ms: i64,
    ) -> Answer {
        debug_assert_eq!(hb.member_epoch, 0);
        if self
            .members
            .get(&hb.member_id)
            .is_some_and(|m| m.classic.is_none())
        {
            return Answer::error(&hb.member_id, UNKNOWN_MEMBER_ID);
        }
        let mut answer = self.apply(hb, topics, now_ms, Some(classic));
        if answer.error == NONE && answer.assignment.is_none() {
            answer.assignment = Some(self.members[&answer.member_id].assigned.clone());
        }
        answer
    }

    /// A classic member's SyncGroup (`Ok`: its assignment) or Heartbeat (`Ok` ignored): Kafka's
    /// checks, and REBALANCE_IN_PROGRESS when the member must rejoin to move on (the group
    /// moved to a new epoch, it must give partitions up, or partitions it waits for are free).
    pub fn classic_check(
        &mut self,
        member_id: &str,
        generation: i32,
        now_ms: i64,
        sync: bool,
    ) -> Result<Assignment, i16> {
        let Some(m) = self.members.get(member_id) else {
            return Err(UNKNOWN_MEMBER_ID);
        };
        if m.classic.is_none() {
            return Err(UNKNOWN_MEMBER_ID);
        }
        if generation != m.epoch {
            return Err(ILLEGAL_GENERATION);
        }
        let waiting = m.state == MemberState::UnreleasedPartitions && {
            let target = self.target.get(member_id).cloned().unwrap_or_default();
            without(&target, &m.assigned)
                .iter()
                .any(|(t, ps)| ps.iter().any(|p| self.held_by_other(member_id, t, *p)))
        };
        let rejoin = if sync {
            self.group_epoch > m.epoch && m.state != MemberState::UnrevokedPartitions
        } else {
            m.epoch < self.group_epoch
                || m.state == MemberState::UnrevokedPartitions
                || (m.state == MemberState::UnreleasedPartitions && !waiting)
        };
        let m = self.members.get_mut(member_id).expect("present");
        m.last_heard_ms = now_ms;
        if rejoin {
            return Err(REBALANCE_IN_PROGRESS);
        }
        Ok(m.assigned.clone())
    }

    /// A classic member's LeaveGroup.
    pub fn classic_leave(&mut self, member_id: &str) -> i16 {
        match self.members.get(member_id) {
            Some(m) if m.classic.is_some() => {
                self.members.remove(member_id);
                self.group_epoch += 1;
                NONE
            }
            _ => UNKNOWN_MEMBER_ID,
        }
    }

    /// Whether every member speaks the classic protocol (and there is one): the group goes back
    /// to being a classic group.
    pub fn only_classic_members(&self) -> bool {
        !self.members.is_empty() && self.members.values().all(|m| m.classic.is_some())
    }

    fn apply(
        &mut self,
        hb: Heartbeat,
        topics: &Topics,
        now_ms: i64,
        classic: Option<ClassicMember>,
    ) -> Answer {
        let id = hb.member_id.clone();
        let full = hb.is_full();
        if let Err(refused) = self.learn_regex(&hb) {
            return refused;
        }
        // One new group epoch per heartbeat, whatever it changed (a join with its subscription
        // is one change, as in Kafka).
        let joined = match hb.member_epoch {
            -1 => return self.leave(&id),
            -2 => return self.leave_for_now(&id, now_ms),
            0 => match self.join(&hb, classic.is_some(), now_ms) {
                Ok(joined) => joined,
                Err(refused) => return refused,
            },
            epoch => match self.check_epoch(&id, epoch, hb.owned.as_ref()) {
                Ok(()) => false,
                Err(refused) => return refused,
            },
        };
        let before = self.members[&id].assigned.clone();
        let updated = self.update_member(hb, classic, now_ms);
        self.advance(&id, topics, now_ms, joined || updated);
        let m = &self.members[&id];
        Answer {
            error: NONE,
            message: None,
            member_id: id.clone(),
            member_epoch: m.epoch,
            assignment: (full || m.assigned != before).then(|| m.assigned.clone()),
        }
    }

    /// Compiles a regular expression the group has not seen yet.
    fn learn_regex(&mut self, hb: &Heartbeat) -> Result<(), Answer> {
        let Some(r) = hb.subscribed_regex.as_deref().filter(|r| !r.is_empty()) else {
            return Ok(());
        };
        if self.regexes.contains_key(r) {
            return Ok(());
        }
        match compile(r) {
            Ok(re) => {
                self.regexes.insert(r.to_string(), re);
                Ok(())
            }
            Err(e) => Err(Answer::error_with(
                &hb.member_id,
                INVALID_REGULAR_EXPRESSION,
                format!("SubscribedTopicRegex `{r}` is not a valid regular expression: {e}."),
            )),
        }
    }

    /// Epoch -1: the member leaves.
    fn leave(&mut self, id: &str) -> Answer {
        if self.members.remove(id).is_some() {
            self.group_epoch += 1;
        }
        Answer {
            member_epoch: -1,
            ..Answer::error(id, NONE)
        }
    }

    /// Epoch -2: a static member leaving for now keeps its partitions for its session.
    fn leave_for_now(&mut self, id: &str, now_ms: i64) -> Answer {
        if let Some(m) = self.members.get_mut(id) {
            m.left_static = true;
            m.last_heard_ms = now_ms;
        }
        Answer {
            member_epoch: -2,
            ..Answer::error(id, NONE)
        }
    }

    /// Epoch 0: a member joins (or a static member comes back). Whether a member was added.
    fn join(&mut self, hb: &Heartbeat, joining_classic: bool, now_ms: i64) -> Result<bool, Answer> {
        let id = &hb.member_id;
        if let Some(instance) = &hb.instance_id {
            self.take_over_instance(id, instance, joining_classic)?;
        }
        if self.members.contains_key(id) {
            return Ok(false);
        }
        self.members.insert(
            id.clone(),
            ConsumerMember {
                member_id: id.clone(),
                instance_id: hb.instance_id.clone(),
                rack_id: hb.rack_id.clone(),
                client_id: hb.client_id.clone(),
                client_host: hb.client_host.clone(),
                subscribed: BTreeSet::new(),
                subscribed_regex: None,
                server_assignor: None,
                rebalance_timeout_ms: hb.rebalance_timeout_ms,
                epoch: 0,
                previous_epoch: -1,
                state: MemberState::Stable,
                assigned: Assignment::new(),
                revoking: Assignment::new(),
                last_heard_ms: now_ms,
                revoke_deadline_ms: None,
                left_static: false,
                classic: None,
            },
        );
        Ok(true)
    }

    /// The same instance back under a new id takes over the member (partitions and epoch) if the
    /// old one left for now, or if either side speaks the classic protocol, whose static members
    /// never say they leave (Kafka replaces them too).
    fn take_over_instance(
        &mut self,
        id: &str,
        instance: &str,
        joining_classic: bool,
    ) -> Result<(), Answer> {
        let holder = self
            .members
            .values()
            .find(|m| m.instance_id.as_deref() == Some(instance) && m.member_id != id)
            .map(|m| {
                let replace = m.left_static || m.classic.is_some() || joining_classic;
                (m.member_id.clone(), replace)
            });
        match holder {
            Some((old, true)) => {
                if let Some(mut m) = self.members.remove(&old) {
                    m.member_id = id.to_string();
                    m.left_static = false;
                    m.classic = None;
                    if let Some(t) = self.target.remove(&old) {
                        self.target.insert(id.to_string(), t);
                    }
                    self.members.insert(id.to_string(), m);
                }
                Ok(())
            }
            Some((_, false)) => Err(Answer::error_with(
                id,
                UNRELEASED_INSTANCE_ID,
                format!(
                    "Static member with unknown member id and instance id {instance} cannot replace an existing member that has not left."
                ),
            )),
            None => Ok(()),
        }
    }

    /// A known member's epoch: its current one, or the previous one from a member that holds no
    /// more than it is given now (the answer that moved it on may have been lost).
    fn check_epoch(&self, id: &str, epoch: i32, owned: Option<&Assignment>) -> Result<(), Answer> {
        let Some(m) = self.members.get(id).filter(|m| !m.left_static) else {
            return Err(Answer::error(id, UNKNOWN_MEMBER_ID));
        };
        let previous_ok =
            epoch == m.previous_epoch && owned.is_some_and(|o| without(o, &m.assigned).is_empty());
        if epoch != m.epoch && !previous_ok {
            return Err(Answer::error(id, FENCED_MEMBER_EPOCH));
        }
        Ok(())
    }

    /// The heartbeat's subscription and settings, on its member. Whether the subscription or the
    /// assignor changed.
    fn update_member(
        &mut self,
        hb: Heartbeat,
        classic: Option<ClassicMember>,
        now_ms: i64,
    ) -> bool {
        let Some(m) = self.members.get_mut(&hb.member_id) else {
            return false;
        };
        let mut changed = false;
        m.last_heard_ms = now_ms;
        if classic.is_some() {
            m.classic = classic;
        }
        m.client_id = hb.client_id;
        m.client_host = hb.client_host;
        if hb.rack_id.is_some() {
            m.rack_id = hb.rack_id;
        }
        if let Some(names) = hb.subscribed {
            let names: BTreeSet<String> = names.into_iter().collect();
            if names != m.subscribed {
                m.subscribed = names;
                changed = true;
            }
        }
        if let Some(r) = hb.subscribed_regex {
            let r = (!r.is_empty()).then_some(r);
            if r != m.subscribed_regex {
                m.subscribed_regex = r;
                changed = true;
            }
        }
        if hb.server_assignor.is_some() && hb.server_assignor != m.server_assignor {
            m.server_assignor = hb.server_assignor;
            changed = true;
        }
        if hb.rebalance_timeout_ms > 0 {
            m.rebalance_timeout_ms = hb.rebalance_timeout_ms;
        }
        if let Some(owned) = &hb.owned {
            // What it no longer owns, it has given up.
            m.revoking = intersect(&m.revoking, owned);
        }
        changed
    }

    /// A new group epoch if the members or their subscriptions `changed` or the subscribed
    /// topics' partitions did; a new target for it; the member `id` reconciled towards it, with
    /// a deadline for what it has yet to revoke.
    fn advance(&mut self, id: &str, topics: &Topics, now_ms: i64, mut changed: bool) {
        if changed {
            self.compile_patterns();
        }
        let metadata = self.subscribed_metadata(topics);
        if metadata != self.metadata {
            self.metadata = metadata;
            changed = true;
        }
        if changed {
            self.group_epoch += 1;
        }
        if self.target_epoch < self.group_epoch {
            self.compute_target(topics);
        }
        self.reconcile(id);
        if let Some(m) = self.members.get_mut(id) {
            if m.state == MemberState::UnrevokedPartitions {
                let timeout = i64::from(m.rebalance_timeout_ms.max(0));
                m.revoke_deadline_ms.get_or_insert(now_ms + timeout);
            } else {
                m.revoke_deadline_ms = None;
            }
        }
        debug_assert!(self.exclusive(), "a partition is never held by two members");
    }

    fn compute_target(&mut self, topics: &Topics) {
        let specs: Vec<MemberSpec> = self
            .members
            .values()
            .map(|m| MemberSpec {
                member_id: m.member_id.clone(),
                topics: self.resolve(m, topics).into_values().collect(),
                current: m.assigned.clone(),
            })
            .collect();
        self.target = self.assignor().assign(&specs, &self.metadata);
        self.target_epoch = self.group_epoch;
    }

    /// Moves member `id` one step towards its target share.
    fn reconcile(&mut self, id: &str) {
        let Some(m) = self.members.get(id) else {
            return;
        };
        let target = self.target.get(id).cloned().unwrap_or_default();
        match m.state {
            MemberState::UnrevokedPartitions if !m.revoking.is_empty() => return,
            MemberState::Stable if m.epoch == self.target_epoch => return,
            _ => {}
        }
        let m = &self.members[id];
        let keep = intersect(&m.assigned, &target);
        let give_up = without(&m.assigned, &target);
        if !give_up.is_empty() {
            // First release what goes elsewhere; the epoch stays until it is released.
            let m = self.members.get_mut(id).expect("present");
            m.assigned = keep;
            m.revoking = give_up;
            m.state = MemberState::UnrevokedPartitions;
            return;
        }
        // Take what is free of the rest.
        let wanted = without(&target, &keep);
        let mut assigned = keep;
        let mut unreleased = false;
        for (t, ps) in &wanted {
            for &p in ps {
                if self.held_by_other(id, t, p) {
                    unreleased = true;
                } else {
                    assigned.entry(*t).or_default().insert(p);
                }
            }
        }
        let epoch = self.target_epoch;
        let m = self.members.get_mut(id).expect("present");
        debug_assert!(m.revoking.is_empty());
        m.assigned = assigned;
        if m.epoch != epoch {
            m.previous_epoch = m.epoch;
            m.epoch = epoch;
        }
        m.state = if unreleased {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        };
    }

    /// Members not heard from within `session_timeout_ms`, or still giving up partitions after
    /// their rebalance timeout, are removed (a new group epoch each); returns them.
    pub fn expire(&mut self, now_ms: i64, session_timeout_ms: i64) -> Vec<String> {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                now_ms - m.last_heard_ms > m.session_timeout_ms(session_timeout_ms)
                    || m.revoke_deadline_ms.is_some_and(|d| now_ms > d)
            })
            .map(|m| m.member_id.clone())
            .collect();
        for id in &gone {
            self.members.remove(id);
            self.group_epoch += 1;
        }
        gone
    }

    /// When [`ConsumerGroup::expire`] has something to do next, if ever.
    pub fn next_deadline_ms(&self, session_timeout_ms: i64) -> Option<i64> {
        self.members
            .values()
            .map(|m| {
                let session = m.last_heard_ms + m.session_timeout_ms(session_timeout_ms) + 1;
                m.revoke_deadline_ms.map_or(session, |d| session.min(d + 1))
            })
            .min()
    }

    /// Whether no two members hold (or give up) the same partition: the invariant the
    /// reconciliation keeps.
    pub fn exclusive(&self) -> bool {
        let mut seen = Assignment::new();
        for m in self.members.values() {
            for a in [&m.assigned, &m.revoking] {
                if overlaps(a, &seen) {
                    return false;
                }
                for (t, ps) in a {
                    seen.entry(*t).or_default().extend(ps);
                }
            }
        }
        true
    }
}

pub use stored::FORMAT;

/// The stored form of a consumer group, so that another broker can take it over:
/// epochs, the metadata and target the group epoch saw, and each member with what it holds and
/// gives up. Sessions are not stored: a group read back restarts them.
mod stored {
    use bytes::{Buf, BufMut};

    use super::*;

    fn put_str(b: &mut Vec<u8>, s: &str) {
        b.put_u32(s.len() as u32);
        b.put_slice(s.as_bytes());
    }

    fn put_opt(b: &mut Vec<u8>, s: &Option<String>) {
        match s {
            Some(s) => {
                b.put_u8(1);
                put_str(b, s);
            }
            None => b.put_u8(0),
        }
    }

    fn put_assignment(b: &mut Vec<u8>, a: &Assignment) {
        b.put_u32(a.len() as u32);
        for (t, ps) in a {
            b.put_slice(t);
            b.put_u32(ps.len() as u32);
            for p in ps {
                b.put_i32(*p);
            }
        }
    }

    fn get_str(b: &mut &[u8]) -> Option<String> {
        let n = b.try_get_u32().ok()? as usize;
        if b.remaining() < n {
            return None;
        }
        let s = String::from_utf8(b[..n].to_vec()).ok()?;
        b.advance(n);
        Some(s)
    }

    fn get_opt(b: &mut &[u8]) -> Option<Option<String>> {
        match b.try_get_u8().ok()? {
            0 => Some(None),
            1 => get_str(b).map(Some),
            _ => None,
        }
    }

    fn get_topic(b: &mut &[u8]) -> Option<TopicId> {
        if b.remaining() < 16 {
            return None;
        }
        let mut t = [0u8; 16];
        b.copy_to_slice(&mut t);
        Some(t)
    }

    /// A count of items of at least `min` bytes each that the rest can hold (a bad count cannot
    /// make the reader allocate).
    fn get_count(b: &mut &[u8], min: usize) -> Option<usize> {
        let n = b.try_get_u32().ok()? as usize;
        (n.saturating_mul(min) <= b.remaining()).then_some(n)
    }

    fn get_assignment(b: &mut &[u8]) -> Option<Assignment> {
        let mut a = Assignment::new();
        for _ in 0..get_count(b, 20)? {
            let t = get_topic(b)?;
            let mut ps = BTreeSet::new();
            for _ in 0..get_count(b, 4)? {
                ps.insert(b.try_get_i32().ok()?);
            }
            a.insert(t, ps);
        }
        Some(a)
    }

    /// The first byte of the stored form: a classic group's stored state starts with its
    /// format version (1), so the two kinds never read each other's bytes.
    pub const FORMAT: u8 = 0x81;

    impl ConsumerGroup {
        pub fn encode(&self) -> Vec<u8> {
            let mut b = Vec::new();
            b.put_u8(FORMAT);
            b.put_i32(self.group_epoch);
            b.put_i32(self.target_epoch);
            b.put_u32(self.metadata.len() as u32);
            for (t, n) in &self.metadata {
                b.put_slice(t);
                b.put_i32(*n);
            }
            b.put_u32(self.members.len() as u32);
            for m in self.members.values() {
                put_str(&mut b, &m.member_id);
                put_opt(&mut b, &m.instance_id);
                put_opt(&mut b, &m.rack_id);
                put_str(&mut b, &m.client_id);
                put_str(&mut b, &m.client_host);
                b.put_u32(m.subscribed.len() as u32);
                for s in &m.subscribed {
                    put_str(&mut b, s);
                }
                put_opt(&mut b, &m.subscribed_regex);
                b.put_u8(u8::from(m.left_static));
                match &m.classic {
                    None => b.put_u8(0),
                    Some(c) => {
                        b.put_u8(1);
                        b.put_i32(c.session_timeout_ms);
                        b.put_u32(c.protocols.len() as u32);
                        for (name, metadata) in &c.protocols {
                            put_str(&mut b, name);
                            b.put_u32(metadata.len() as u32);
                            b.put_slice(metadata);
                        }
                    }
                }
                put_opt(&mut b, &m.server_assignor);
                b.put_i32(m.rebalance_timeout_ms);
                b.put_i32(m.epoch);
                b.put_i32(m.previous_epoch);
                b.put_u8(match m.state {
                    MemberState::Stable => 0,
                    MemberState::UnrevokedPartitions => 1,
                    MemberState::UnreleasedPartitions => 2,
                });
                put_assignment(&mut b, &m.assigned);
                put_assignment(&mut b, &m.revoking);
            }
            b.put_u32(self.target.len() as u32);
            for (id, a) in &self.target {
                put_str(&mut b, id);
                put_assignment(&mut b, a);
            }
            b
        }

        /// The group as stored; every member's session restarts at `now_ms`. `None` when the
        /// bytes are not a stored group this version reads.
        pub fn decode(mut b: &[u8], now_ms: i64) -> Option<ConsumerGroup> {
            let b = &mut b;
            if b.try_get_u8().ok()? != FORMAT {
                return None;
            }
            let mut g = ConsumerGroup {
                group_epoch: b.try_get_i32().ok()?,
                target_epoch: b.try_get_i32().ok()?,
                ..ConsumerGroup::default()
            };
            for _ in 0..get_count(b, 20)? {
                let t = get_topic(b)?;
                g.metadata.insert(t, b.try_get_i32().ok()?);
            }
            for _ in 0..get_count(b, 30)? {
                let member_id = get_str(b)?;
                let instance_id = get_opt(b)?;
                let rack_id = get_opt(b)?;
                let client_id = get_str(b)?;
                let client_host = get_str(b)?;
                let mut subscribed = BTreeSet::new();
                for _ in 0..get_count(b, 4)? {
                    subscribed.insert(get_str(b)?);
                }
                let subscribed_regex = get_opt(b)?;
                let left_static = match b.try_get_u8().ok()? {
                    0 => false,
                    1 => true,
                    _ => return None,
                };
                let classic = match b.try_get_u8().ok()? {
                    0 => None,
                    1 => {
                        let session_timeout_ms = b.try_get_i32().ok()?;
                        let mut protocols = Vec::new();
                        for _ in 0..get_count(b, 8)? {
                            let name = get_str(b)?;
                            let n = get_count(b, 1)?;
                            protocols.push((name, bytes::Bytes::copy_from_slice(&b[..n])));
                            b.advance(n);
                        }
                        Some(ClassicMember {
                            session_timeout_ms,
                            protocols,
                        })
                    }
                    _ => return None,
                };
                let server_assignor = get_opt(b)?;
                let rebalance_timeout_ms = b.try_get_i32().ok()?;
                let epoch = b.try_get_i32().ok()?;
                let previous_epoch = b.try_get_i32().ok()?;
                let state = match b.try_get_u8().ok()? {
                    0 => MemberState::Stable,
                    1 => MemberState::UnrevokedPartitions,
                    2 => MemberState::UnreleasedPartitions,
                    _ => return None,
                };
                let assigned = get_assignment(b)?;
                let revoking = get_assignment(b)?;
                g.members.insert(
                    member_id.clone(),
                    ConsumerMember {
                        member_id,
                        instance_id,
                        rack_id,
                        client_id,
                        client_host,
                        subscribed,
                        subscribed_regex,
                        server_assignor,
                        rebalance_timeout_ms,
                        epoch,
                        previous_epoch,
                        state,
                        assigned,
                        revoking,
                        last_heard_ms: now_ms,
                        // Whoever gives up partitions gets its whole rebalance timeout again.
                        revoke_deadline_ms: (state == MemberState::UnrevokedPartitions)
                            .then(|| now_ms + i64::from(rebalance_timeout_ms.max(0))),
                        left_static,
                        classic,
                    },
                );
            }
            for _ in 0..get_count(b, 8)? {
                let id = get_str(b)?;
                g.target.insert(id, get_assignment(b)?);
            }
            if b.has_remaining() {
                return None;
            }
            g.compile_patterns();
            Some(g)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_group_reads_back_whole_and_a_cut_one_not_at_all() {
        let mut g = ConsumerGroup::default();
        let t = topics();
        let a = g.heartbeat(join("a", &["t", "u"]), &t, 0);
        g.heartbeat(join("b", &["t"]), &t, 1);
        g.heartbeat(beat("a", a.member_epoch, &a.assignment.unwrap()), &t, 2);
        assert_eq!(
            g.members["a"].state,
            MemberState::UnrevokedPartitions,
            "a gives b a share"
        );
        // A classic member and a pattern subscription are stored too.
        if let Some(b) = g.members.get_mut("b") {
            b.classic = Some(ClassicMember {
                session_timeout_ms: 10_000,
                protocols: vec![("range".into(), bytes::Bytes::from_static(b"\0\x01meta"))],
            });
            b.subscribed_regex = Some("t.*".into());
        }
        let bytes = g.encode();
        let back = ConsumerGroup::decode(&bytes, 2).expect("decode");
        assert_eq!(back.group_epoch, g.group_epoch);
        assert_eq!(back.target_epoch, g.target_epoch);
        // Sessions restart when a group is read back.
        let mut members = g.members.clone();
        for m in members.values_mut() {
            m.last_heard_ms = 2;
        }
        assert_eq!(back.members, members);
        assert_eq!(back.target, g.target);
        assert_eq!(back.metadata, g.metadata);
        for cut in 0..bytes.len() {
            assert!(
                ConsumerGroup::decode(&bytes[..cut], 0).is_none(),
                "cut at {cut}"
            );
        }
    }

    fn topics() -> Topics {
        BTreeMap::from([
            ("t".to_string(), ([1; 16], 6)),
            ("u".to_string(), ([2; 16], 2)),
        ])
    }

    fn join(id: &str, subs: &[&str]) -> Heartbeat {
        Heartbeat {
            member_id: id.into(),
            member_epoch: 0,
            rebalance_timeout_ms: 30_000,
            subscribed: Some(subs.iter().map(|s| s.to_string()).collect()),
            owned: Some(Assignment::new()),
            ..Heartbeat::default()
        }
    }

    fn beat(id: &str, epoch: i32, owned: &Assignment) -> Heartbeat {
        Heartbeat {
            member_id: id.into(),
            member_epoch: epoch,
            owned: Some(owned.clone()),
            ..Heartbeat::default()
        }
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    #[test]
    fn a_second_member_gets_partitions_only_once_the_first_gave_them_up() {
        let mut g = ConsumerGroup::default();
        let t = topics();
        let a = g.heartbeat(join("a", &["t"]), &t, 0);
        assert_eq!((a.error, a.member_epoch), (NONE, 1));
        let a_owned = a.assignment.clone().expect("assignment");
        assert_eq!(count(&a_owned), 6);
        // b joins: the target splits 3/3, but a still holds everything.
        let b = g.heartbeat(join("b", &["t"]), &t, 1);
        assert_eq!(b.member_epoch, 2);
        assert_eq!(
            count(b.assignment.as_ref().expect("b")),
            0,
            "nothing is free yet"
        );
        assert_eq!(g.members["b"].state, MemberState::UnreleasedPartitions);
        assert!(g.exclusive());
        // a heartbeats: told to keep 3 (its epoch stays until it gives up the others).
        let a = g.heartbeat(beat("a", 1, &a_owned), &t, 2);
        assert_eq!(
            (a.member_epoch, count(a.assignment.as_ref().unwrap())),
            (1, 3)
        );
        assert_eq!(g.members["a"].state, MemberState::UnrevokedPartitions);
        // b again: still nothing free (a has not confirmed), so nothing new to tell it.
        let b = g.heartbeat(beat("b", 2, &Assignment::new()), &t, 3);
        assert_eq!(b.assignment, None, "unchanged: not sent again");
        assert_eq!(count(&g.members["b"].assigned), 0);
        // a confirms it owns only its 3 now: it moves to the new epoch, and b gets the rest.
        let kept = a.assignment.clone().unwrap();
        let a = g.heartbeat(beat("a", 1, &kept), &t, 4);
        assert_eq!(a.member_epoch, 2);
        let b = g.heartbeat(beat("b", 2, &Assignment::new()), &t, 5);
        assert_eq!(count(b.assignment.as_ref().unwrap()), 3);
        assert_eq!(g.members["b"].state, MemberState::Stable);
        assert!(g.exclusive());
    }

    /// Members that join, leave, resubscribe and heartbeat in a random order (a fixed seed),
    /// each reporting what it was last told: no partition is ever held by two members, and once
    /// everyone has heartbeated a few times in a quiet period, every member holds its target
    /// share at the group's epoch.
    #[test]
    fn random_membership_changes_keep_partitions_exclusive_and_converge() {
        let t = topics();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let names = ["a", "b", "c", "d", "e"];
        let subs: [&[&str]; 3] = [&["t"], &["t", "u"], &["u"]];
        let mut g = ConsumerGroup::default();
        // What each member was last told: (epoch, assignment).
        let mut told: BTreeMap<&str, (i32, Assignment)> = BTreeMap::new();
        for step in 0..2_000i64 {
            let who = names[next(names.len() as u64) as usize];
            let answer = match (told.get(who), next(20)) {
                (None, _) => g.heartbeat(join(who, subs[next(3) as usize]), &t, step),
                (Some(_), 0) => {
                    told.remove(who);
                    g.heartbeat(beat(who, -1, &Assignment::new()), &t, step);
                    continue;
                }
                (Some((epoch, owned)), 1) => {
                    let mut hb = beat(who, *epoch, owned);
                    hb.subscribed = Some(
                        subs[next(3) as usize]
                            .iter()
                            .map(|s| s.to_string())
                            .collect(),
                    );
                    g.heartbeat(hb, &t, step)
                }
                (Some((epoch, owned)), _) => g.heartbeat(beat(who, *epoch, owned), &t, step),
            };
            assert_eq!(answer.error, NONE, "step {step}: {who}");
            // No assignment in the answer: the one it was told last still holds.
            let last = told.get(who).map(|(_, a)| a.clone()).unwrap_or_default();
            told.insert(
                who,
                (answer.member_epoch, answer.assignment.unwrap_or(last)),
            );
            assert!(g.exclusive(), "step {step}");
        }
        // Quiet: everyone heartbeats with what it was told until nothing changes.
        for round in 0..6 {
            for who in told.keys().copied().collect::<Vec<_>>() {
                let (epoch, owned) = told[who].clone();
                let a = g.heartbeat(beat(who, epoch, &owned), &t, 10_000 + round);
                told.insert(who, (a.member_epoch, a.assignment.unwrap_or(owned)));
            }
        }
        for (who, (epoch, owned)) in &told {
            assert_eq!(*epoch, g.target_epoch, "{who} reached the target epoch");
            assert_eq!(owned, &g.target[*who], "{who} holds its target share");
            assert_eq!(g.members[*who].state, MemberState::Stable);
        }
    }

    #[test]
    fn epochs_fence_and_unknown_members_are_told() {
        let mut g = ConsumerGroup::default();
        let t = topics();
        g.heartbeat(join("a", &["t", "u"]), &t, 0);
        assert_eq!(
            g.heartbeat(beat("a", 7, &Assignment::new()), &t, 1).error,
            FENCED_MEMBER_EPOCH
        );
        assert_eq!(
            g.heartbeat(beat("x", 1, &Assignment::new()), &t, 1).error,
            UNKNOWN_MEMBER_ID
        );
        // A leave removes it and moves the group epoch.
        let e = g.group_epoch;
        let left = g.heartbeat(beat("a", -1, &Assignment::new()), &t, 2);
        assert_eq!((left.error, left.member_epoch), (NONE, -1));
        assert!(g.members.is_empty() && g.group_epoch == e + 1);
    }

    #[test]
    fn new_partitions_and_expired_members_move_the_group_epoch() {
        let mut g = ConsumerGroup::default();
        let mut t = topics();
        let a = g.heartbeat(join("a", &["t"]), &t, 0);
        let owned = a.assignment.unwrap();
        t.insert("t".into(), ([1; 16], 8));
        let a = g.heartbeat(beat("a", a.member_epoch, &owned), &t, 1);
        assert_eq!(count(a.assignment.as_ref().unwrap()), 8);
        g.heartbeat(join("b", &["t"]), &t, 10_000);
        assert_eq!(g.expire(50_000, 45_000), vec!["a".to_string()]);
        let b = g.heartbeat(
            beat("b", g.members["b"].epoch, &Assignment::new()),
            &t,
            50_001,
        );
        assert_eq!(
            count(b.assignment.as_ref().unwrap()),
            8,
            "a's partitions are free"
        );
        assert!(g.exclusive());
    }
}
