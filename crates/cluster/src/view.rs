//! A broker's picture of the cluster: brokers, the controller, who leads each partition. Read
//! from the metadata store whenever it announces a change, and shared read-only.

use std::collections::HashMap;

use weir_meta::{Assignment, BrokerInfo, BrokerState, ControllerLease, WalInfo};

#[derive(Debug, Default, Clone)]
pub struct ClusterView {
    pub brokers: Vec<BrokerInfo>,
    pub controller: Option<ControllerLease>,
    pub assignments: Vec<Assignment>,
    /// Brokers' WALs and their recoveries.
    pub wals: Vec<WalInfo>,
    /// Brokers being drained for removal (`Cluster::drain`): they take no partitions, from
    /// placement or from the balancer, until they register again.
    pub draining: Vec<i32>,
    /// Each topic's assignments by partition number (an index into `assignments`), looked up
    /// by `&str` without building a key: Metadata of a 10,000-partition topic does 10,000
    /// look-ups.
    by_topic: HashMap<String, Vec<Option<usize>>>,
}

impl ClusterView {
    pub fn new(
        brokers: Vec<BrokerInfo>,
        controller: Option<ControllerLease>,
        assignments: Vec<Assignment>,
    ) -> ClusterView {
        let mut by_topic: HashMap<String, Vec<Option<usize>>> = HashMap::new();
        for (i, a) in assignments.iter().enumerate() {
            let slots = by_topic.entry(a.topic.clone()).or_default();
            let at = a.partition as usize;
            if slots.len() <= at {
                slots.resize(at + 1, None);
            }
            slots[at] = Some(i);
        }
        ClusterView {
            brokers,
            controller,
            assignments,
            wals: Vec::new(),
            draining: Vec::new(),
            by_topic,
        }
    }

    pub fn with_draining(mut self, draining: Vec<i32>) -> ClusterView {
        self.draining = draining;
        self
    }

    pub fn with_wals(mut self, wals: Vec<WalInfo>) -> ClusterView {
        self.wals = wals;
        self
    }

    pub fn broker(&self, node_id: i32) -> Option<&BrokerInfo> {
        self.brokers.iter().find(|b| b.node_id == node_id)
    }

    /// Brokers clients may talk to: every broker the controller has not fenced (a broker
    /// shutting down still leads its partitions until they have moved).
    ///
    /// A session that looks expired does not remove a broker: only the controller's fencing
    /// does, and it waits until the store has been reachable for a whole session. An outage of
    /// the metadata store expires every session at once, and each broker reads its view back
    /// before its peers have renewed. Were those brokers left out of Metadata, clients would drop
    /// them: librdkafka (2.10 and later) tears down the connection to a broker that Metadata no
    /// longer names and fails its requests in flight as not persisted, although they are on
    /// their way to durability; after an epoch bump it then sends those records again under new
    /// sequence numbers, as duplicates. Kafka keeps a broker in Metadata until it is fenced too.
    pub fn reachable_brokers(&self) -> impl Iterator<Item = &BrokerInfo> {
        self.brokers
            .iter()
            .filter(|b| b.state != BrokerState::Fenced)
    }

    /// Brokers that serve clients' groups and zones: running and not fenced, whatever their
    /// session looks like now (see [`ClusterView::reachable_brokers`]). Every broker computes
    /// the same answer from the same states, which change only through the controller.
    pub fn serving_brokers(&self) -> impl Iterator<Item = &BrokerInfo> {
        self.brokers
            .iter()
            .filter(|b| b.state == BrokerState::Running)
    }

    /// Brokers that take partitions: running, within their session and not being drained
    /// (the controller's placement and balancing, moves and drains).
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerInfo> {
        self.brokers
            .iter()
            .filter(|b| b.is_live() && !self.draining.contains(&b.node_id))
    }

    pub fn assignment(&self, topic: &str, partition: u32) -> Option<&Assignment> {
        let i = (*self.by_topic.get(topic)?.get(partition as usize)?)?;
        Some(&self.assignments[i])
    }

    /// The partition's leader, if it has one that clients can reach, and its leader epoch.
    pub fn leader(&self, topic: &str, partition: u32) -> Option<(&BrokerInfo, u64)> {
        let a = self.assignment(topic, partition)?;
        let b = self.broker(a.leader?)?;
        (b.state != BrokerState::Fenced).then_some((b, a.epoch))
    }

    /// The broker that coordinates `key` (a group id): highest rendezvous weight among serving
    /// brokers, so every broker computes the same answer from the same membership, and a
    /// broker leaving moves only its own keys.
    pub fn coordinator(&self, key: &str) -> Option<&BrokerInfo> {
        self.serving_brokers()
            .max_by_key(|b| (rendezvous_weight(key, b.node_id), b.node_id))
    }
}

/// A hash of (key, node) that is the same in every process and every build (unlike std's).
pub fn rendezvous_weight(key: &str, node_id: i32) -> u64 {
    // FNV-1a over the key and the node id, then a final mix (splitmix64) to spread it.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes().chain(node_id.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn broker(node_id: i32, zone: &str, state: BrokerState, alive: bool) -> BrokerInfo {
        BrokerInfo {
            node_id,
            incarnation: 1,
            zone: zone.into(),
            host: "127.0.0.1".into(),
            port: 9000 + node_id,
            listeners: Vec::new(),
            internal_addr: String::new(),
            state,
            alive,
        }
    }

    #[test]
    fn coordinators_spread_and_only_a_leaving_brokers_keys_move() {
        let live = |ids: &[i32]| {
            ClusterView::new(
                ids.iter()
                    .map(|&i| broker(i, "z", BrokerState::Running, true))
                    .collect(),
                None,
                Vec::new(),
            )
        };
        let three = live(&[1, 2, 3]);
        let two = live(&[1, 3]);
        let mut counts = HashMap::new();
        for g in 0..3000 {
            let key = format!("group-{g}");
            let c = three.coordinator(&key).expect("live brokers").node_id;
            *counts.entry(c).or_insert(0) += 1;
            let after = two.coordinator(&key).expect("live brokers").node_id;
            if c != 2 {
                assert_eq!(after, c, "{key} moved though its coordinator stayed");
            }
        }
        for (node, n) in counts {
            assert!(
                (800..1200).contains(&n),
                "broker {node} coordinates {n} of 3000"
            );
        }
        assert!(ClusterView::default().coordinator("g").is_none());
    }

    #[test]
    fn leaders_are_only_reachable_brokers() {
        let a = |leader| Assignment {
            topic: "t".into(),
            partition: 0,
            stream_id: 1,
            leader,
            target: None,
            epoch: 4,
        };
        let brokers = vec![
            broker(1, "z", BrokerState::ShuttingDown, true),
            broker(2, "z", BrokerState::Fenced, false),
        ];
        let v = ClusterView::new(brokers.clone(), None, vec![a(Some(1))]);
        assert_eq!(v.leader("t", 0).map(|(b, e)| (b.node_id, e)), Some((1, 4)));
        assert!(
            v.coordinator("g").is_none(),
            "a broker shutting down coordinates nothing"
        );
        let v = ClusterView::new(brokers, None, vec![a(Some(2))]);
        assert!(v.leader("t", 0).is_none());
        assert!(v.leader("t", 1).is_none());
    }

    #[test]
    fn a_session_that_looks_expired_keeps_a_broker_until_it_is_fenced() {
        // After an outage of the metadata store every session has expired, and a broker reads
        // its view back before its peers renew: they must stay in Metadata, keep leading and
        // keep coordinating until the controller fences them.
        let a = |partition, leader| Assignment {
            topic: "t".into(),
            partition,
            stream_id: u64::from(partition) + 1,
            leader: Some(leader),
            target: None,
            epoch: 2,
        };
        let fresh = ClusterView::new(
            (1..=3)
                .map(|i| broker(i, "z", BrokerState::Running, true))
                .collect(),
            None,
            vec![a(0, 1), a(1, 2), a(2, 3)],
        );
        let after_outage = ClusterView::new(
            vec![
                broker(1, "z", BrokerState::Running, true),
                broker(2, "z", BrokerState::Running, false),
                broker(3, "z", BrokerState::Running, false),
            ],
            None,
            vec![a(0, 1), a(1, 2), a(2, 3)],
        );
        let ids = |v: &ClusterView| v.reachable_brokers().map(|b| b.node_id).collect::<Vec<_>>();
        assert_eq!(ids(&after_outage), vec![1, 2, 3]);
        for p in 0..3 {
            assert_eq!(
                after_outage.leader("t", p).map(|(b, _)| b.node_id),
                fresh.leader("t", p).map(|(b, _)| b.node_id)
            );
        }
        for g in 0..100 {
            let key = format!("group-{g}");
            assert_eq!(
                after_outage.coordinator(&key).map(|b| b.node_id),
                fresh.coordinator(&key).map(|b| b.node_id),
                "{key} moved"
            );
        }
        // Partitions are placed only on brokers within their session.
        assert_eq!(
            after_outage
                .live_brokers()
                .map(|b| b.node_id)
                .collect::<Vec<_>>(),
            vec![1]
        );
        // Fencing is what removes a broker.
        let fenced = ClusterView::new(
            vec![
                broker(1, "z", BrokerState::Running, true),
                broker(2, "z", BrokerState::Fenced, false),
            ],
            None,
            vec![a(1, 2)],
        );
        assert_eq!(ids(&fenced), vec![1]);
        assert!(fenced.leader("t", 1).is_none());
    }
}
