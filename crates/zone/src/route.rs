//! Which broker serves a partition to the clients of a zone.

use weir_cluster::{rendezvous_weight, ClusterView};
use weir_meta::BrokerInfo;

/// How a topic's clients outside its leader's zone are served (topic config
/// `weir.zone.routing`, broker default `zones.routing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Routing {
    /// Through a broker in the client's zone: produced bytes go to object storage there and the
    /// leader gets a reference; fetches are served there from objects. No data byte crosses a
    /// zone; clients outside the leader's zone see object-store latency.
    #[default]
    InZone,
    /// Straight to the leader, as Kafka does: disk latency, and the bytes cross zones.
    Leader,
}

impl Routing {
    pub fn parse(s: &str) -> Option<Routing> {
        match s.trim() {
            "in-zone" => Some(Routing::InZone),
            "leader" => Some(Routing::Leader),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Routing::InZone => "in-zone",
            Routing::Leader => "leader",
        }
    }
}

/// Where a client of some zone is sent for a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route<'a> {
    /// The broker named to the client as the partition's leader.
    pub broker: &'a BrokerInfo,
    /// The partition's real leader.
    pub leader: &'a BrokerInfo,
    pub epoch: u64,
}

impl Route<'_> {
    /// Whether the client is served by a broker other than the leader.
    pub fn proxied(&self) -> bool {
        self.broker.node_id != self.leader.node_id
    }
}

/// The rendezvous key of a partition.
fn key(topic: &str, partition: u32) -> String {
    format!("{topic}\u{0}{partition}")
}

/// The serving broker of `zone` (running, not fenced) that serves `topic`-`partition` to that zone's clients: the leader
/// when it is in the zone, else the one with the highest rendezvous weight. Every broker
/// computes the same answer from the same membership, the answer does not change while the
/// zone's membership does not, and a broker leaving moves only its own partitions.
pub fn in_zone_broker<'a>(
    view: &'a ClusterView,
    zone: &str,
    topic: &str,
    partition: u32,
) -> Option<&'a BrokerInfo> {
    let key = key(topic, partition);
    view.serving_brokers()
        .filter(|b| b.zone == zone)
        .max_by_key(|b| (rendezvous_weight(&key, b.node_id), b.node_id))
}

/// The broker a client in `zone` (if known) is sent to for `topic`-`partition`, with the
/// partition's leader and epoch; `None` when the partition has no reachable leader. Clients in
/// no zone, in the leader's zone, of a topic routed to the leader, or of a zone without a live
/// broker go to the leader.
pub fn route<'a>(
    view: &'a ClusterView,
    zone: Option<&str>,
    routing: Routing,
    topic: &str,
    partition: u32,
) -> Option<Route<'a>> {
    let (leader, epoch) = view.leader(topic, partition)?;
    let direct = Route {
        broker: leader,
        leader,
        epoch,
    };
    let Some(zone) = zone else {
        return Some(direct);
    };
    if routing == Routing::Leader || leader.zone.is_empty() || leader.zone == zone {
        return Some(direct);
    }
    Some(match in_zone_broker(view, zone, topic, partition) {
        Some(b) => Route {
            broker: b,
            leader,
            epoch,
        },
        None => direct,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use weir_meta::{Assignment, BrokerState};

    fn broker(node_id: i32, zone: &str) -> BrokerInfo {
        BrokerInfo {
            node_id,
            incarnation: 1,
            zone: zone.into(),
            host: "127.0.0.1".into(),
            port: 9000 + node_id,
            listeners: Vec::new(),
            internal_addr: String::new(),
            state: BrokerState::Running,
            alive: true,
        }
    }

    fn view(brokers: Vec<BrokerInfo>, partitions: u32, leader: i32) -> ClusterView {
        let assignments = (0..partitions)
            .map(|p| Assignment {
                topic: "t".into(),
                partition: p,
                stream_id: u64::from(p),
                leader: Some(leader),
                target: None,
                epoch: 3,
            })
            .collect();
        ClusterView::new(brokers, None, assignments)
    }

    fn six() -> Vec<BrokerInfo> {
        (1..=6)
            .map(|i| broker(i, ["a", "b", "c"][(i as usize - 1) % 3]))
            .collect()
    }

    #[test]
    fn clients_go_to_a_broker_of_their_zone_spread_by_partition() {
        let v = view(six(), 600, 1);
        let mut counts: HashMap<i32, usize> = HashMap::new();
        for p in 0..600 {
            for zone in ["a", "b", "c"] {
                let r = route(&v, Some(zone), Routing::InZone, "t", p).unwrap();
                assert_eq!(r.broker.zone, zone);
                assert_eq!((r.leader.node_id, r.epoch), (1, 3));
                if zone == "a" {
                    assert_eq!(
                        r.broker.node_id, 1,
                        "the leader's own zone goes to the leader"
                    );
                    assert!(!r.proxied());
                } else {
                    *counts.entry(r.broker.node_id).or_default() += 1;
                }
            }
        }
        for (node, n) in counts {
            assert!((240..360).contains(&n), "broker {node} serves {n} of 600");
        }
    }

    #[test]
    fn no_zone_a_leader_route_or_an_empty_zone_go_to_the_leader() {
        let v = view(six(), 1, 2);
        let to = |zone, routing| route(&v, zone, routing, "t", 0).map(|r| r.broker.node_id);
        assert_eq!(to(None, Routing::InZone), Some(2));
        assert_eq!(to(Some("c"), Routing::Leader), Some(2));
        assert_eq!(to(Some("nowhere"), Routing::InZone), Some(2));
        assert!(matches!(to(Some("c"), Routing::InZone), Some(3 | 6)));
        assert_eq!(route(&v, Some("c"), Routing::InZone, "t", 1), None);
    }

    #[test]
    fn only_a_leaving_brokers_partitions_change_broker() {
        let before = view(six(), 300, 1);
        let mut brokers = six();
        brokers[4].state = weir_meta::BrokerState::Fenced; // node 5, zone b
        let after = view(brokers, 300, 1);
        for p in 0..300 {
            let b = route(&before, Some("b"), Routing::InZone, "t", p)
                .unwrap()
                .broker
                .node_id;
            let a = route(&after, Some("b"), Routing::InZone, "t", p)
                .unwrap()
                .broker
                .node_id;
            if b != 5 {
                assert_eq!(a, b, "partition {p} moved though its broker stayed");
            } else {
                assert_eq!(a, 2);
            }
        }
    }

    #[test]
    fn routing_names_parse() {
        assert_eq!(Routing::parse("in-zone"), Some(Routing::InZone));
        assert_eq!(Routing::parse("leader"), Some(Routing::Leader));
        assert_eq!(Routing::parse("zone"), None);
        assert_eq!(Routing::InZone.as_str(), "in-zone");
    }
}
