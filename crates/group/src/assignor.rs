//! Server-side assignors of the consumer group protocol (KIP-848): `uniform` (Kafka's default)
//! and `range`, pure functions from the members' subscriptions and the topics' partition counts
//! to a target assignment.
//!
//! `uniform` spreads every subscribed partition so that members' counts differ by at most one
//! among members with the same subscription, and keeps each partition with its current owner
//! where that stays within the balance (stickiness: a rebalance moves as few partitions as it
//! can). `range` gives each member of a topic a contiguous range of its partitions, members in
//! order of their ids, the first ones one partition more, as Kafka's range assignor does.

use std::collections::{BTreeMap, BTreeSet};

/// A topic, by its id (as the protocol names topics) and name.
pub type TopicId = [u8; 16];

/// Partitions by topic.
pub type Assignment = BTreeMap<TopicId, BTreeSet<i32>>;

/// What an assignor knows of a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSpec {
    pub member_id: String,
    /// The topics it subscribes to (resolved: names and patterns already matched).
    pub topics: BTreeSet<TopicId>,
    /// What it owns now (for stickiness).
    pub current: Assignment,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignor {
    Uniform,
    Range,
}

impl Assignor {
    pub fn by_name(name: &str) -> Option<Assignor> {
        match name {
            "uniform" => Some(Assignor::Uniform),
            "range" => Some(Assignor::Range),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }

    /// The target assignment of `members` over topics of `partitions` partitions each (a topic
    /// unknown there gets nothing). Every member appears in the result, if only with nothing.
    pub fn assign(
        self,
        members: &[MemberSpec],
        partitions: &BTreeMap<TopicId, i32>,
    ) -> BTreeMap<String, Assignment> {
        match self {
            Assignor::Uniform => uniform(members, partitions),
            Assignor::Range => range(members, partitions),
        }
    }
}

fn range(
    members: &[MemberSpec],
    partitions: &BTreeMap<TopicId, i32>,
) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = members
        .iter()
        .map(|m| (m.member_id.clone(), Assignment::new()))
        .collect();
    for (&topic, &count) in partitions {
        let mut subscribers: Vec<&str> = members
            .iter()
            .filter(|m| m.topics.contains(&topic))
            .map(|m| m.member_id.as_str())
            .collect();
        if subscribers.is_empty() || count <= 0 {
            continue;
        }
        subscribers.sort_unstable();
        let n = subscribers.len() as i32;
        let (each, extra) = (count / n, count % n);
        let mut next = 0;
        for (i, m) in subscribers.iter().enumerate() {
            let take = each + i32::from((i as i32) < extra);
            if take > 0 {
                if let Some(a) = out.get_mut(*m) {
                    a.entry(topic).or_default().extend(next..next + take);
                }
            }
            next += take;
        }
    }
    out
}

fn uniform(
    members: &[MemberSpec],
    partitions: &BTreeMap<TopicId, i32>,
) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = members
        .iter()
        .map(|m| (m.member_id.clone(), Assignment::new()))
        .collect();
    // Members with the same subscription share its partitions evenly; a partition whose topic
    // several subscriptions include goes to the least loaded subscriber.
    let mut load: BTreeMap<&str, usize> =
        members.iter().map(|m| (m.member_id.as_str(), 0)).collect();
    let all: Vec<(TopicId, i32)> = partitions
        .iter()
        .filter(|(t, _)| members.iter().any(|m| m.topics.contains(*t)))
        .flat_map(|(&t, &n)| (0..n.max(0)).map(move |p| (t, p)))
        .collect();
    // The most each member may hold: what a balanced assignment without stickiness gives it
    // (partitions with the fewest possible owners first, each to the least loaded of them), so
    // that members with different subscriptions are balanced too.
    let quotas: BTreeMap<&str, usize> = {
        let mut order = all.clone();
        order.sort_by_key(|(t, p)| {
            (
                members.iter().filter(|m| m.topics.contains(t)).count(),
                *t,
                *p,
            )
        });
        let mut q: BTreeMap<&str, usize> =
            members.iter().map(|m| (m.member_id.as_str(), 0)).collect();
        for (t, _) in &order {
            if let Some(m) = members
                .iter()
                .filter(|m| m.topics.contains(t))
                .min_by_key(|m| (q[m.member_id.as_str()], m.member_id.as_str()))
            {
                *q.get_mut(m.member_id.as_str())
                    .expect("every member has a quota") += 1;
            }
        }
        q
    };
    let mut free: Vec<(TopicId, i32)> = Vec::new();
    // Sticky first: a partition stays with its current owner while the owner is under quota.
    let owner_of = |t: &TopicId, p: i32| -> Option<&MemberSpec> {
        members
            .iter()
            .find(|m| m.topics.contains(t) && m.current.get(t).is_some_and(|s| s.contains(&p)))
    };
    for &(t, p) in &all {
        match owner_of(&t, p) {
            Some(m) if load[m.member_id.as_str()] < quotas[m.member_id.as_str()] => {
                *load
                    .get_mut(m.member_id.as_str())
                    .expect("every member has a load") += 1;
                if let Some(a) = out.get_mut(&m.member_id) {
                    a.entry(t).or_default().insert(p);
                }
            }
            _ => free.push((t, p)),
        }
    }
    for (t, p) in free {
        let best = members
            .iter()
            .filter(|m| m.topics.contains(&t))
            .min_by_key(|m| (load[m.member_id.as_str()], m.member_id.as_str()));
        if let Some(m) = best {
            *load
                .get_mut(m.member_id.as_str())
                .expect("every member has a load") += 1;
            if let Some(a) = out.get_mut(&m.member_id) {
                a.entry(t).or_default().insert(p);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u8) -> TopicId {
        [n; 16]
    }

    fn member(id: &str, topics: &[u8]) -> MemberSpec {
        MemberSpec {
            member_id: id.into(),
            topics: topics.iter().map(|&n| t(n)).collect(),
            current: Assignment::new(),
        }
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    /// Every partition of a subscribed topic is assigned exactly once, to a subscriber.
    fn check_complete(
        members: &[MemberSpec],
        partitions: &BTreeMap<TopicId, i32>,
        out: &BTreeMap<String, Assignment>,
    ) {
        for (&topic, &n) in partitions {
            let subscribed = members.iter().any(|m| m.topics.contains(&topic));
            for p in 0..n {
                let owners: Vec<&String> = out
                    .iter()
                    .filter(|(_, a)| a.get(&topic).is_some_and(|s| s.contains(&p)))
                    .map(|(m, _)| m)
                    .collect();
                assert_eq!(
                    owners.len(),
                    usize::from(subscribed),
                    "{topic:?}-{p}: {owners:?}"
                );
                for o in owners {
                    let m = members.iter().find(|m| &m.member_id == o).expect("member");
                    assert!(
                        m.topics.contains(&topic),
                        "{o} does not subscribe to {topic:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn uniform_balances_and_sticks() {
        let partitions = BTreeMap::from([(t(1), 7), (t(2), 5)]);
        let mut members = vec![
            member("a", &[1, 2]),
            member("b", &[1, 2]),
            member("c", &[1, 2]),
        ];
        let out = Assignor::Uniform.assign(&members, &partitions);
        check_complete(&members, &partitions, &out);
        let counts: Vec<usize> = out.values().map(count).collect();
        assert!(
            counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1,
            "{counts:?}"
        );
        // A fourth member joins: the others keep what they can, and only the surplus moves.
        for m in members.iter_mut() {
            m.current = out[&m.member_id].clone();
        }
        members.push(member("d", &[1, 2]));
        let next = Assignor::Uniform.assign(&members, &partitions);
        check_complete(&members, &partitions, &next);
        let moved: usize = ["a", "b", "c"]
            .iter()
            .map(|m| {
                count(&out[*m])
                    - out[*m]
                        .iter()
                        .map(|(t, s)| {
                            s.intersection(next[*m].get(t).unwrap_or(&BTreeSet::new()))
                                .count()
                        })
                        .sum::<usize>()
            })
            .sum();
        assert_eq!(
            moved,
            count(&next["d"]),
            "only what the newcomer takes moves"
        );
        assert_eq!(count(&next["d"]), 3);
    }

    #[test]
    fn uniform_with_different_subscriptions() {
        let partitions = BTreeMap::from([(t(1), 4), (t(2), 4), (t(3), 2)]);
        let members = vec![
            member("a", &[1]),
            member("b", &[1, 2]),
            member("c", &[2]),
            member("d", &[]),
        ];
        let out = Assignor::Uniform.assign(&members, &partitions);
        check_complete(&members, &partitions, &out);
        assert!(out["d"].is_empty());
        assert!(
            out.values().all(|a| !a.contains_key(&t(3))),
            "nobody subscribes to topic 3"
        );
    }

    #[test]
    fn range_gives_contiguous_ranges_in_member_order() {
        let partitions = BTreeMap::from([(t(1), 7)]);
        let members = vec![member("b", &[1]), member("a", &[1]), member("c", &[1])];
        let out = Assignor::Range.assign(&members, &partitions);
        check_complete(&members, &partitions, &out);
        assert_eq!(out["a"][&t(1)], BTreeSet::from([0, 1, 2]));
        assert_eq!(out["b"][&t(1)], BTreeSet::from([3, 4]));
        assert_eq!(out["c"][&t(1)], BTreeSet::from([5, 6]));
        assert_eq!(Assignor::by_name("range"), Some(Assignor::Range));
        assert_eq!(Assignor::by_name("sticky"), None);
    }
}
