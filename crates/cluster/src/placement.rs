//! The controller's decisions, as a pure function of the cluster's state: where new partitions
//! go, and where the partitions of a broker that shuts down move. Balancing load is a later
//! goal; here a broker's load is its number of partitions.

use std::collections::HashMap;

use weir_meta::{AssignmentChange, BrokerState};

use crate::ClusterView;

/// What the controller changes now.
///
/// - A partition without a leader goes to a live broker: the zone holding the fewest of the
///   topic's partitions, then the broker holding the fewest of them, then the fewest overall.
/// - A partition led by a broker that is shutting down moves to a live broker, chosen the same
///   way (the leader then uploads what it holds and hands it over).
/// - A move whose target is no longer live is sent to another live broker, or cancelled if the
///   leader itself is live.
/// - A partition whose leader died is left alone: its acknowledged data may be in that broker's
///   WAL only. A peer's recovery of that WAL releases it (no leader), and it is placed then. A
///   broker without a WAL file (`wal.kind = "object"`) has nothing to recover: the store
///   releases its partitions when it fences it.
pub fn plan(view: &ClusterView) -> Vec<AssignmentChange> {
    let live: Vec<(i32, &str)> = view
        .live_brokers()
        .map(|b| (b.node_id, b.zone.as_str()))
        .collect();
    if live.is_empty() {
        return Vec::new();
    }
    let is_live = |id: i32| live.iter().any(|&(n, _)| n == id);
    // Where each partition is, or is going.
    let destination = |a: &weir_meta::Assignment| a.target.or(a.leader);
    let mut load: HashMap<i32, usize> = live.iter().map(|&(n, _)| (n, 0)).collect();
    let mut topic_on: HashMap<(&str, i32), usize> = HashMap::new();
    for a in &view.assignments {
        if let Some(d) = destination(a) {
            *load.entry(d).or_default() += 1;
            *topic_on.entry((a.topic.as_str(), d)).or_default() += 1;
        }
    }
    let mut changes = Vec::new();
    for a in &view.assignments {
        let leader_state = a.leader.and_then(|l| view.broker(l));
        let wanted = match (a.leader, a.target) {
            (None, _) => true,
            (Some(_), Some(t)) if !is_live(t) => true,
            (Some(_), None) => {
                leader_state.is_some_and(|b| b.state == BrokerState::ShuttingDown && b.alive)
            }
            _ => false,
        };
        if !wanted {
            continue;
        }
        let avoid = a.leader;
        let Some(to) = choose(&live, &load, &topic_on, &a.topic, avoid) else {
            if a.target.is_some() {
                changes.push(AssignmentChange::Move {
                    stream_id: a.stream_id,
                    target: None,
                });
            }
            continue;
        };
        if let Some(old) = destination(a) {
            if let Some(n) = load.get_mut(&old) {
                *n = n.saturating_sub(1);
            }
            if let Some(n) = topic_on.get_mut(&(a.topic.as_str(), old)) {
                *n = n.saturating_sub(1);
            }
        }
        *load.entry(to).or_default() += 1;
        *topic_on.entry((a.topic.as_str(), to)).or_default() += 1;
        changes.push(match a.leader {
            None => AssignmentChange::Place {
                stream_id: a.stream_id,
                leader: to,
            },
            Some(_) if leader_state.is_some_and(|b| b.is_live()) && a.target.is_some() => {
                // A live leader whose move target left: it keeps the partition.
                AssignmentChange::Move {
                    stream_id: a.stream_id,
                    target: None,
                }
            }
            Some(_) => AssignmentChange::Move {
                stream_id: a.stream_id,
                target: Some(to),
            },
        });
    }
    changes
}

fn choose(
    live: &[(i32, &str)],
    load: &HashMap<i32, usize>,
    topic_on: &HashMap<(&str, i32), usize>,
    topic: &str,
    avoid: Option<i32>,
) -> Option<i32> {
    let in_zone = |zone: &str| -> usize {
        live.iter()
            .filter(|&&(_, z)| z == zone)
            .map(|&(n, _)| topic_on.get(&(topic, n)).copied().unwrap_or(0))
            .sum()
    };
    live.iter()
        .filter(|&&(n, _)| Some(n) != avoid)
        .min_by_key(|&&(n, z)| {
            (
                in_zone(z),
                topic_on.get(&(topic, n)).copied().unwrap_or(0),
                load.get(&n).copied().unwrap_or(0),
                n,
            )
        })
        .map(|&(n, _)| n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tests::broker;
    use weir_meta::{Assignment, BrokerState::*};

    fn part(topic: &str, p: u32, leader: Option<i32>, target: Option<i32>) -> Assignment {
        Assignment {
            topic: topic.into(),
            partition: p,
            stream_id: u64::from(p) + if topic == "a" { 0 } else { 100 },
            leader,
            target,
            epoch: 1,
        }
    }

    /// Applies changes as the store would, to check where things end up.
    fn apply(view: &ClusterView, changes: &[AssignmentChange]) -> Vec<(Option<i32>, Option<i32>)> {
        view.assignments
            .iter()
            .map(|a| {
                let mut r = (a.leader, a.target);
                for c in changes {
                    match *c {
                        AssignmentChange::Place { stream_id, leader }
                            if stream_id == a.stream_id =>
                        {
                            r.0 = r.0.or(Some(leader))
                        }
                        AssignmentChange::Move { stream_id, target }
                            if stream_id == a.stream_id =>
                        {
                            r.1 = target
                        }
                        _ => {}
                    }
                }
                r
            })
            .collect()
    }

    #[test]
    fn new_partitions_spread_over_brokers_and_zones() {
        let brokers = vec![
            broker(1, "z1", Running, true),
            broker(2, "z1", Running, true),
            broker(3, "z2", Running, true),
            broker(4, "z3", Running, true),
        ];
        let parts: Vec<_> = (0..6).map(|p| part("a", p, None, None)).collect();
        let view = ClusterView::new(brokers, None, parts);
        let placed = apply(&view, &plan(&view));
        let leaders: Vec<i32> = placed.iter().map(|r| r.0.expect("placed")).collect();
        let count = |ids: &[i32]| leaders.iter().filter(|l| ids.contains(l)).count();
        // Three zones, six partitions: two per zone; within z1 one per broker.
        assert_eq!(
            (count(&[1, 2]), count(&[3]), count(&[4])),
            (2, 2, 2),
            "{leaders:?}"
        );
        assert_eq!((count(&[1]), count(&[2])), (1, 1), "{leaders:?}");
    }

    #[test]
    fn a_new_broker_takes_new_partitions_first() {
        let brokers = vec![
            broker(1, "z", Running, true),
            broker(2, "z", Running, true),
            broker(3, "z", Running, true),
        ];
        let mut parts: Vec<_> = (0..4)
            .map(|p| part("a", p, Some(1 + (p as i32 % 2)), None))
            .collect();
        parts.push(part("b", 0, None, None));
        let view = ClusterView::new(brokers, None, parts);
        assert_eq!(
            plan(&view),
            vec![AssignmentChange::Place {
                stream_id: 100,
                leader: 3
            }]
        );
    }

    #[test]
    fn a_broker_shutting_down_hands_everything_to_live_ones() {
        let brokers = vec![
            broker(1, "z", ShuttingDown, true),
            broker(2, "z", Running, true),
            broker(3, "z", Running, true),
            broker(4, "z", Fenced, false),
        ];
        let parts = vec![
            part("a", 0, Some(1), None),
            part("a", 1, Some(1), None),
            part("a", 2, Some(2), None),
            part("a", 3, Some(4), None),
            part("a", 4, Some(1), Some(2)),
        ];
        let view = ClusterView::new(brokers, None, parts);
        let after = apply(&view, &plan(&view));
        // Broker 2 leads one and is receiving one: both go to broker 3, two each.
        assert_eq!(
            (after[0].1, after[1].1),
            (Some(3), Some(3)),
            "balanced: {after:?}"
        );
        assert_eq!(
            after[2],
            (Some(2), None),
            "a live leader keeps its partition"
        );
        assert_eq!(
            after[3],
            (Some(4), None),
            "a dead leader's partition waits for it"
        );
        assert_eq!(
            after[4],
            (Some(1), Some(2)),
            "a move under way is left alone"
        );
        // Nothing more to do once the moves are decided.
        let mut parts = view.assignments.clone();
        for (a, r) in parts.iter_mut().zip(&after) {
            a.target = r.1;
        }
        let view = ClusterView::new(view.brokers.clone(), None, parts);
        assert!(plan(&view).is_empty());
    }

    #[test]
    fn a_move_to_a_broker_that_left_is_redirected_or_cancelled() {
        let brokers = vec![
            broker(1, "z", Running, true),
            broker(2, "z", Running, false),
            broker(3, "z", ShuttingDown, true),
        ];
        let parts = vec![
            part("a", 0, Some(1), Some(2)),
            part("a", 1, Some(3), Some(2)),
        ];
        let view = ClusterView::new(brokers, None, parts);
        let after = apply(&view, &plan(&view));
        assert_eq!(after[0], (Some(1), None), "cancelled: the leader is live");
        assert_eq!(
            after[1],
            (Some(3), Some(1)),
            "redirected: the leader is leaving"
        );
    }

    #[test]
    fn nothing_is_placed_without_live_brokers() {
        let view = ClusterView::new(
            vec![broker(1, "z", ShuttingDown, true)],
            None,
            vec![part("a", 0, None, None), part("a", 1, Some(1), None)],
        );
        assert!(plan(&view).is_empty());
    }
}
