//! One share group (KIP-932): its members, their subscriptions and the partitions each is
//! assigned. Pure, given the time by its caller.
//!
//! A share group differs from a consumer group in what an assignment means: members of a share
//! group do not own partitions, they fetch from them together (the partition's leader hands each
//! record to one member at a time), so an assignment only spreads the members over the
//! partitions. A partition may go to several members, and a member moved to other partitions
//! needs no revocation step: its records elsewhere are released when their locks expire or its
//! share session ends. So every heartbeat gets the member straight to the group's epoch and
//! its target assignment, as Kafka's share group coordinator does.
//!
//! The assignor is Kafka's `simple` one in spirit: for each topic, its subscribers in member id
//! order share its partitions round-robin when there are at least as many partitions as
//! subscribers; when there are more subscribers, each gets one partition, round-robin, so every
//! member has work and every partition a member.

use std::collections::{BTreeMap, BTreeSet};

use crate::assignor::{Assignment, TopicId};
use crate::codes::*;
use crate::consumer::Topics;

/// The first byte of a stored share group (see [`ShareGroup::encode`]); consumer groups'
/// is [`crate::consumer::FORMAT`], classic groups' a version number below both.
pub const FORMAT: u8 = 0x91;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareMember {
    pub member_id: String,
    pub epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: BTreeSet<String>,
    pub assigned: Assignment,
    /// When the member's session ends unless it heartbeats (ms on the coordinator's clock).
    pub deadline_ms: i64,
}

#[derive(Debug, Clone, Default)]
pub struct ShareGroup {
    pub group_epoch: i32,
    /// The epoch the members' assignments were computed at.
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ShareMember>,
    /// The subscribed topics as last assigned (name, id, partitions): a change (a topic
    /// created, deleted or grown) bumps the group epoch.
    seen_topics: Vec<(String, TopicId, i32)>,
    /// Each member's assignment at `assignment_epoch`; a member gets its own, and that epoch,
    /// at its next heartbeat.
    target: BTreeMap<String, Assignment>,
}

/// One ShareGroupHeartbeat, validated.
#[derive(Debug, Clone)]
pub struct ShareHeartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    /// `None`: unchanged.
    pub subscribed: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
}

/// What a heartbeat gets back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareAnswer {
    pub member_epoch: i32,
    /// The member's assignment, when it is new to the member (`None`: unchanged).
    pub assignment: Option<Assignment>,
}

impl ShareHeartbeat {
    /// Kafka's checks of the request's fields: `(error, message)` when it is malformed.
    pub fn validate(&self) -> Result<(), (i16, String)> {
        if self.member_id.is_empty() {
            return Err((INVALID_REQUEST, "MemberId can't be empty.".into()));
        }
        if self.member_id.len() > 36 {
            return Err((
                INVALID_REQUEST,
                "MemberId can't be longer than 36 characters.".into(),
            ));
        }
        if self.member_epoch < -1 {
            return Err((
                INVALID_REQUEST,
                format!(
                    "MemberEpoch is {}, it must be -1 or more.",
                    self.member_epoch
                ),
            ));
        }
        if self.member_epoch == 0 && self.subscribed.as_ref().is_none_or(|s| s.is_empty()) {
            return Err((
                INVALID_REQUEST,
                "SubscribedTopicNames must be set in first request.".into(),
            ));
        }
        Ok(())
    }
}

impl ShareGroup {
    /// "Empty" or "Stable": a share group never rebalances in steps.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    }

    /// Whether `member_id` may join: the group is not full, or it is a member already.
    pub fn admits(&self, member_id: &str, max: usize) -> bool {
        self.members.contains_key(member_id) || self.members.len() < max
    }

    /// Applies one heartbeat. `session_ms` is the session timeout.
    pub fn heartbeat(
        &mut self,
        hb: ShareHeartbeat,
        topics: &Topics,
        now_ms: i64,
        session_ms: i64,
    ) -> Result<ShareAnswer, (i16, String)> {
        self.expire(now_ms);
        if hb.member_epoch == -1 {
            if self.members.remove(&hb.member_id).is_some() {
                self.group_epoch += 1;
            }
            return Ok(ShareAnswer {
                member_epoch: -1,
                assignment: None,
            });
        }
        let joining = hb.member_epoch == 0;
        match self.members.get(&hb.member_id) {
            None if !joining => {
                return Err((
                    UNKNOWN_MEMBER_ID,
                    format!("Member {} is not a member of the group.", hb.member_id),
                ))
            }
            Some(m) if !joining && m.epoch != hb.member_epoch => {
                return Err((
                    FENCED_MEMBER_EPOCH,
                    format!(
                        "The share group member has a smaller member epoch ({}) than the one known by the group coordinator ({}).",
                        hb.member_epoch, m.epoch
                    ),
                ))
            }
            _ => {}
        }
        let before = self.members.get(&hb.member_id).cloned();
        let member = self
            .members
            .entry(hb.member_id.clone())
            .or_insert_with(|| ShareMember {
                member_id: hb.member_id.clone(),
                epoch: 0,
                rack_id: None,
                client_id: String::new(),
                client_host: String::new(),
                subscribed: BTreeSet::new(),
                assigned: Assignment::new(),
                deadline_ms: 0,
            });
        member.deadline_ms = now_ms + session_ms;
        member.client_id = hb.client_id;
        member.client_host = hb.client_host;
        if hb.rack_id.is_some() {
            member.rack_id = hb.rack_id;
        }
        let mut changed = before.is_none();
        if let Some(subscribed) = hb.subscribed {
            let subscribed: BTreeSet<String> = subscribed.into_iter().collect();
            changed |= subscribed != member.subscribed;
            member.subscribed = subscribed;
        }
        changed |= self.topics_changed(topics);
        if changed {
            self.group_epoch += 1;
        }
        if self.group_epoch != self.assignment_epoch {
            self.assign(topics);
        }
        let assigned = self.target.get(&hb.member_id).cloned().unwrap_or_default();
        let Some(m) = self.members.get_mut(&hb.member_id) else {
            return Err((UNKNOWN_MEMBER_ID, String::new()));
        };
        m.epoch = self.assignment_epoch;
        m.assigned = assigned;
        let new_to_member =
            joining || before.is_none_or(|b| b.epoch != m.epoch || b.assigned != m.assigned);
        Ok(ShareAnswer {
            member_epoch: m.epoch,
            assignment: new_to_member.then(|| m.assigned.clone()),
        })
    }

    /// Removes the members whose session ended by `now_ms`; whether any did.
    pub fn expire(&mut self, now_ms: i64) -> bool {
        let before = self.members.len();
        self.members.retain(|_, m| m.deadline_ms > now_ms);
        let expired = self.members.len() != before;
        if expired {
            self.group_epoch += 1;
        }
        expired
    }

    /// The earliest session deadline, if the group has members.
    pub fn next_deadline(&self) -> Option<i64> {
        self.members.values().map(|m| m.deadline_ms).min()
    }

    /// Whether the subscribed topics differ from those last assigned.
    fn topics_changed(&self, topics: &Topics) -> bool {
        self.subscribed_topics(topics) != self.seen_topics
    }

    fn subscribed_topics(&self, topics: &Topics) -> Vec<(String, TopicId, i32)> {
        let names: BTreeSet<&String> = self.members.values().flat_map(|m| &m.subscribed).collect();
        names
            .into_iter()
            .filter_map(|n| topics.get(n).map(|(id, count)| (n.clone(), *id, *count)))
            .collect()
    }

    /// Computes every member's assignment at the group epoch (see the module documentation).
    fn assign(&mut self, topics: &Topics) {
        self.seen_topics = self.subscribed_topics(topics);
        let mut target: BTreeMap<String, Assignment> = BTreeMap::new();
        for (name, id, count) in &self.seen_topics {
            let subscribers: Vec<&String> = self
                .members
                .values()
                .filter(|m| m.subscribed.contains(name))
                .map(|m| &m.member_id)
                .collect();
            let (n, p) = (subscribers.len(), (*count).max(0) as usize);
            if n == 0 || p == 0 {
                continue;
            }
            let mut give = |member: &String, partition: usize| {
                target
                    .entry(member.clone())
                    .or_default()
                    .entry(*id)
                    .or_default()
                    .insert(partition as i32);
            };
            if n <= p {
                for partition in 0..p {
                    give(subscribers[partition % n], partition);
                }
            } else {
                for (i, member) in subscribers.iter().enumerate() {
                    give(member, i % p);
                }
            }
        }
        self.target = target;
        self.assignment_epoch = self.group_epoch;
    }

    /// The group as stored: its epoch only. Members are not stored: after a coordinator change
    /// they are told UNKNOWN_MEMBER_ID and join again (at once, with their member ids), which
    /// costs a share group nothing, since it holds no partition ownership to hand over.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT, 1];
        out.extend_from_slice(&self.group_epoch.to_be_bytes());
        out
    }

    pub fn decode(data: &[u8]) -> Option<ShareGroup> {
        match data {
            [FORMAT, 1, a, b, c, d] => Some(ShareGroup {
                group_epoch: i32::from_be_bytes([*a, *b, *c, *d]),
                assignment_epoch: i32::from_be_bytes([*a, *b, *c, *d]),
                ..ShareGroup::default()
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics(list: &[(&str, u8, i32)]) -> Topics {
        list.iter()
            .map(|(n, id, count)| (n.to_string(), ([*id; 16], *count)))
            .collect()
    }

    fn join(member: &str, subscribed: &[&str]) -> ShareHeartbeat {
        ShareHeartbeat {
            member_id: member.into(),
            member_epoch: 0,
            rack_id: None,
            subscribed: Some(subscribed.iter().map(|s| s.to_string()).collect()),
            client_id: "c".into(),
            client_host: "h".into(),
        }
    }

    fn beat(member: &str, epoch: i32) -> ShareHeartbeat {
        ShareHeartbeat {
            member_epoch: epoch,
            subscribed: None,
            ..join(member, &[])
        }
    }

    fn partitions(a: &Assignment) -> Vec<i32> {
        a.values().flatten().copied().collect()
    }

    #[test]
    fn more_members_than_partitions_share_them_and_every_member_gets_one() {
        let t = topics(&[("t", 1, 2)]);
        let mut g = ShareGroup::default();
        for m in ["a", "b", "c"] {
            g.heartbeat(join(m, &["t"]), &t, 0, 45_000).expect("join");
        }
        assert_eq!(g.group_epoch, 3);
        for (m, epoch) in [("a", 1), ("b", 2), ("c", 3)] {
            g.heartbeat(beat(m, epoch), &t, 1, 45_000).expect("beat");
        }
        let got: Vec<Vec<i32>> = g
            .members
            .values()
            .map(|m| partitions(&m.assigned))
            .collect();
        assert_eq!(got, vec![vec![0], vec![1], vec![0]]);
        assert!(g.members.values().all(|m| m.epoch == 3));
    }

    #[test]
    fn fewer_members_than_partitions_split_them() {
        let t = topics(&[("t", 1, 5)]);
        let mut g = ShareGroup::default();
        let a = g.heartbeat(join("a", &["t"]), &t, 0, 45_000).expect("join");
        assert_eq!(
            a.assignment.as_ref().map(partitions),
            Some(vec![0, 1, 2, 3, 4])
        );
        g.heartbeat(join("b", &["t"]), &t, 0, 45_000).expect("join");
        // a learns its new assignment at its next heartbeat, straight at the new epoch.
        let a = g.heartbeat(beat("a", 1), &t, 1, 45_000).expect("beat");
        assert_eq!(a.member_epoch, 2);
        assert_eq!(a.assignment.as_ref().map(partitions), Some(vec![0, 2, 4]));
        let again = g.heartbeat(beat("a", 2), &t, 2, 45_000).expect("beat");
        assert_eq!(again.assignment, None, "unchanged");
    }

    #[test]
    fn stale_epochs_and_unknown_members_are_refused() {
        let t = topics(&[("t", 1, 1)]);
        let mut g = ShareGroup::default();
        g.heartbeat(join("a", &["t"]), &t, 0, 45_000).expect("join");
        g.heartbeat(join("b", &["t"]), &t, 0, 45_000).expect("join");
        assert_eq!(
            g.heartbeat(beat("a", 1), &t, 0, 45_000)
                .map(|a| a.member_epoch),
            Ok(2)
        );
        assert_eq!(
            g.heartbeat(beat("a", 1), &t, 0, 45_000).map_err(|e| e.0),
            Err(FENCED_MEMBER_EPOCH)
        );
        assert_eq!(
            g.heartbeat(beat("a", 3), &t, 0, 45_000).map_err(|e| e.0),
            Err(FENCED_MEMBER_EPOCH)
        );
        assert_eq!(
            g.heartbeat(beat("z", 1), &t, 0, 45_000).map_err(|e| e.0),
            Err(UNKNOWN_MEMBER_ID)
        );
        assert!(join("", &["t"]).validate().is_err());
        assert!(join("a", &[]).validate().is_err());
    }

    #[test]
    fn a_member_that_leaves_or_stops_heartbeating_is_gone_and_the_rest_take_over() {
        let t = topics(&[("t", 1, 2)]);
        let mut g = ShareGroup::default();
        g.heartbeat(join("a", &["t"]), &t, 0, 10).expect("join");
        g.heartbeat(join("b", &["t"]), &t, 5, 10).expect("join");
        assert_eq!(
            g.heartbeat(beat("b", 2), &t, 5, 10).map(|a| a.member_epoch),
            Ok(2)
        );
        // a's session ends at 10.
        let b = g.heartbeat(beat("b", 2), &t, 12, 10).expect("beat");
        assert_eq!(b.assignment.as_ref().map(partitions), Some(vec![0, 1]));
        assert_eq!(g.members.len(), 1);
        let left = g
            .heartbeat(beat("b", b.member_epoch), &t, 13, 10)
            .map(|_| ());
        assert_eq!(left, Ok(()));
        let mut leave = beat("b", -1);
        leave.member_epoch = -1;
        assert_eq!(
            g.heartbeat(leave, &t, 14, 10).map(|a| a.member_epoch),
            Ok(-1)
        );
        assert_eq!(g.state_name(), "Empty");
    }

    #[test]
    fn a_topic_growing_reassigns() {
        let mut g = ShareGroup::default();
        g.heartbeat(join("a", &["t"]), &topics(&[("t", 1, 1)]), 0, 45_000)
            .expect("join");
        let a = g
            .heartbeat(beat("a", 1), &topics(&[("t", 1, 3)]), 1, 45_000)
            .expect("beat");
        assert_eq!(a.member_epoch, 2);
        assert_eq!(a.assignment.as_ref().map(partitions), Some(vec![0, 1, 2]));
    }

    #[test]
    fn the_stored_form_keeps_the_epoch() {
        let mut g = ShareGroup::default();
        g.heartbeat(join("a", &["t"]), &topics(&[("t", 1, 1)]), 0, 45_000)
            .expect("join");
        let back = ShareGroup::decode(&g.encode()).expect("decodes");
        assert_eq!((back.group_epoch, back.members.len()), (1, 0));
        assert!(ShareGroup::decode(&[FORMAT, 2, 0, 0, 0, 1]).is_none());
    }
}
