//! Consumer groups (KIP-848) through the coordinator: heartbeats as clients send them, the
//! group stored and taken over by another coordinator, offsets checked against member epochs,
//! conversions between classic and consumer groups, expiry under tokio's paused clock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use weir_meta::{GroupStore, SqliteMetaStore};

use super::codes::*;
use super::consumer::Topics;
use super::{GroupConfig, GroupCoordinator};

const GROUP: &str = "cg";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn config() -> GroupConfig {
    GroupConfig {
        consumer_session_timeout: Duration::from_secs(10),
        consumer_heartbeat_interval: Duration::from_secs(1),
        ..GroupConfig::default()
    }
}

/// A coordinator on an in-memory store that knows [`catalog`].
fn coordinator() -> Arc<GroupCoordinator> {
    let co = GroupCoordinator::new(
        Arc::new(SqliteMetaStore::in_memory().expect("store")),
        config(),
    );
    co.set_catalog(Arc::new(catalog));
    co
}

fn catalog() -> Topics {
    BTreeMap::from([
        ("orders".to_string(), ([1; 16], 4)),
        ("payments".to_string(), ([2; 16], 2)),
        ("audit".to_string(), ([3; 16], 1)),
    ])
}

type Owned = BTreeMap<[u8; 16], Vec<i32>>;

fn join_req(member: &str, topics: &[&str]) -> ConsumerGroupHeartbeatRequest {
    let mut req = ConsumerGroupHeartbeatRequest::default();
    req.group_id = GroupId(s(GROUP));
    req.member_id = s(member);
    req.member_epoch = 0;
    req.rebalance_timeout_ms = 30_000;
    req.subscribed_topic_names = Some(topics.iter().map(|t| TopicName(s(t))).collect());
    req.topic_partitions = Some(Vec::new());
    req
}

fn beat_req(member: &str, epoch: i32, owned: &Owned) -> ConsumerGroupHeartbeatRequest {
    let mut req = ConsumerGroupHeartbeatRequest::default();
    req.group_id = GroupId(s(GROUP));
    req.member_id = s(member);
    req.member_epoch = epoch;
    req.rebalance_timeout_ms = -1;
    req.topic_partitions = Some(
        owned
            .iter()
            .map(|(t, ps)| {
                let mut tp = TopicPartitions::default();
                tp.topic_id = uuid::Uuid::from_bytes(*t);
                tp.partitions = ps.clone();
                tp
            })
            .collect(),
    );
    req
}

fn owned_of(resp: &ConsumerGroupHeartbeatResponse) -> Option<Owned> {
    resp.assignment.as_ref().map(|a| {
        a.topic_partitions
            .iter()
            .map(|tp| (*tp.topic_id.as_bytes(), tp.partitions.clone()))
            .collect()
    })
}

fn count(o: &Owned) -> usize {
    o.values().map(Vec::len).sum()
}

async fn hb(
    co: &GroupCoordinator,
    req: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    co.consumer_group_heartbeat(req, 1, "client", "/127.0.0.1", &catalog())
        .await
}

/// A member as a client keeps it: its epoch and what it owns.
struct Client {
    id: String,
    epoch: i32,
    owned: Owned,
}

impl Client {
    async fn join(co: &GroupCoordinator, id: &str, topics: &[&str]) -> Client {
        let r = hb(co, join_req(id, topics)).await;
        assert_eq!(r.error_code, NONE, "{:?}", r.error_message);
        Client {
            id: id.to_string(),
            epoch: r.member_epoch,
            owned: owned_of(&r).expect("a join gets its assignment"),
        }
    }

    /// One heartbeat: takes what it is told (releasing at once what it is no longer given).
    async fn beat(&mut self, co: &GroupCoordinator) -> i16 {
        let r = hb(co, beat_req(&self.id, self.epoch, &self.owned)).await;
        if r.error_code == NONE {
            self.epoch = r.member_epoch;
            if let Some(o) = owned_of(&r) {
                self.owned = o;
            }
        }
        r.error_code
    }
}

async fn settle(co: &GroupCoordinator, clients: &mut [Client]) {
    for _ in 0..4 {
        for c in clients.iter_mut() {
            assert_eq!(c.beat(co).await, NONE);
        }
    }
}

fn commit_req(member: &str, epoch: i32) -> OffsetCommitRequest {
    let mut p = OffsetCommitRequestPartition::default();
    p.partition_index = 0;
    p.committed_offset = 42;
    let mut t = OffsetCommitRequestTopic::default();
    t.name = TopicName(s("orders"));
    t.partitions = vec![p];
    let mut req = OffsetCommitRequest::default();
    req.group_id = GroupId(s(GROUP));
    req.member_id = s(member);
    req.generation_id_or_member_epoch = epoch;
    req.topics = vec![t];
    req
}

async fn commit(co: &GroupCoordinator, member: &str, epoch: i32, version: i16) -> i16 {
    let exists = |_: &str, _: i32| true;
    let r = co
        .offset_commit(commit_req(member, epoch), version, &exists)
        .await;
    r.topics[0].partitions[0].error_code
}

#[tokio::test(start_paused = true)]
async fn members_share_the_partitions_and_a_new_coordinator_takes_the_group_over() {
    let store: Arc<dyn GroupStore> = Arc::new(SqliteMetaStore::in_memory().expect("store"));
    let co = GroupCoordinator::new(Arc::clone(&store), config());
    let a = Client::join(&co, "a", &["orders", "payments"]).await;
    assert_eq!((a.epoch, count(&a.owned)), (1, 6));
    let b = Client::join(&co, "b", &["orders", "payments"]).await;
    let mut clients = [a, b];
    settle(&co, &mut clients).await;
    let [a, b] = &clients;
    assert_eq!((count(&a.owned), count(&b.owned)), (3, 3));
    assert_eq!(a.epoch, b.epoch);

    // Described as Kafka describes it.
    let mut req = ConsumerGroupDescribeRequest::default();
    req.group_ids = vec![GroupId(s(GROUP)), GroupId(s("nobody"))];
    let d = co.consumer_group_describe(req, 1, &catalog()).await;
    let g = &d.groups[0];
    assert_eq!((g.error_code, g.group_state.as_str()), (NONE, "Stable"));
    assert_eq!((g.group_epoch, g.assignment_epoch), (a.epoch, a.epoch));
    assert_eq!(g.assignor_name.as_str(), "uniform");
    assert_eq!(g.members.len(), 2);
    assert!(g.members.iter().all(|m| m.member_type == 1
        && m.client_id.as_str() == "client"
        && m.assignment
            .topic_partitions
            .iter()
            .all(|tp| !tp.topic_name.is_empty())));
    assert_eq!(d.groups[1].error_code, GROUP_ID_NOT_FOUND);

    // Another coordinator (the first one's broker died) reads the group back: members carry on
    // with their epochs and keep their partitions.
    let epoch = a.epoch;
    co.shutdown();
    drop(co);
    let co2 = GroupCoordinator::new(Arc::clone(&store), config());
    for c in clients.iter_mut() {
        let before = c.owned.clone();
        assert_eq!(c.beat(&co2).await, NONE, "{} carries on", c.id);
        assert_eq!((c.epoch, &c.owned), (epoch, &before));
    }
    // A third member: the others give up a share before it gets one.
    let c = Client::join(&co2, "c", &["orders", "payments"]).await;
    assert_eq!(count(&c.owned), 0, "nothing is free until released");
    let [a, b] = clients;
    let mut clients = [a, b, c];
    settle(&co2, &mut clients).await;
    let counts: Vec<usize> = clients.iter().map(|c| count(&c.owned)).collect();
    assert_eq!(counts, vec![2, 2, 2]);
}

#[tokio::test(start_paused = true)]
async fn offsets_are_committed_at_the_member_epoch_only() {
    let co = coordinator();
    let mut a = Client::join(&co, "a", &["orders"]).await;
    assert_eq!(commit(&co, "a", a.epoch, 9).await, NONE);
    assert_eq!(commit(&co, "a", a.epoch - 1, 9).await, STALE_MEMBER_EPOCH);
    assert_eq!(commit(&co, "a", a.epoch + 1, 9).await, STALE_MEMBER_EPOCH);
    assert_eq!(commit(&co, "x", a.epoch, 9).await, UNKNOWN_MEMBER_ID);
    assert_eq!(commit(&co, "a", a.epoch, 8).await, UNSUPPORTED_VERSION);
    // Not a member: only while the group is empty.
    assert_eq!(commit(&co, "", -1, 9).await, UNKNOWN_MEMBER_ID);
    let mut leave = beat_req("a", -1, &Owned::new());
    leave.topic_partitions = None;
    assert_eq!(hb(&co, leave).await.member_epoch, -1);
    assert_eq!(commit(&co, "", -1, 9).await, NONE);
    // A stale fetch is refused the same way.
    let mut g = kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup::default();
    g.group_id = GroupId(s(GROUP));
    g.member_id = Some(s("a"));
    g.member_epoch = 3;
    let mut req = OffsetFetchRequest::default();
    req.groups = vec![g];
    let r = co.offset_fetch(req, 9).await;
    assert_eq!(r.groups[0].error_code, UNKNOWN_MEMBER_ID, "a left");
    assert_eq!(a.beat(&co).await, UNKNOWN_MEMBER_ID);
}

#[tokio::test(start_paused = true)]
async fn a_silent_member_expires_and_one_that_does_not_revoke_is_removed() {
    let co = coordinator();
    let mut a = Client::join(&co, "a", &["orders"]).await;
    let mut b = Client::join(&co, "b", &["orders"]).await;
    // a never heartbeats again: after its session it is gone, and b gets everything.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(b.beat(&co).await, NONE);
    }
    assert_eq!(count(&b.owned), 4);
    assert_eq!(a.beat(&co).await, UNKNOWN_MEMBER_ID);

    // c joins; b heartbeats but never releases what it must give up (it keeps reporting all
    // four): after its rebalance timeout it is removed, and c gets its partitions.
    let mut c = Client::join(&co, "c", &["orders"]).await;
    let all = b.owned.clone();
    let mut req = beat_req("b", b.epoch, &all);
    req.rebalance_timeout_ms = 3_000;
    assert_eq!(hb(&co, req).await.error_code, NONE);
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let _ = hb(&co, beat_req("b", b.epoch, &all)).await;
        assert_eq!(c.beat(&co).await, NONE);
    }
    assert_eq!(
        hb(&co, beat_req("b", b.epoch, &all)).await.error_code,
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(c.beat(&co).await, NONE);
    assert_eq!(count(&c.owned), 4);
}

#[tokio::test(start_paused = true)]
async fn a_pattern_subscription_takes_in_topics_created_later() {
    let co = coordinator();
    let mut req = join_req("a", &[]);
    req.subscribed_topic_names = None;
    req.subscribed_topic_regex = Some(s("pay.*|aud.t"));
    let r = hb(&co, req).await;
    assert_eq!(r.error_code, NONE, "{:?}", r.error_message);
    assert_eq!(
        count(&owned_of(&r).expect("assignment")),
        3,
        "payments and audit"
    );
    let epoch = r.member_epoch;
    // A matching topic appears: the next heartbeat brings a new epoch and its partitions.
    let mut more = catalog();
    more.insert("payments-eu".to_string(), ([4; 16], 2));
    more.insert("not-payments".to_string(), ([5; 16], 2));
    let owned = owned_of(&r).expect("assignment");
    let r = co
        .consumer_group_heartbeat(beat_req("a", epoch, &owned), 1, "c", "h", &more)
        .await;
    assert_eq!(r.member_epoch, epoch + 1);
    assert_eq!(
        count(&owned_of(&r).expect("changed")),
        5,
        "a whole-name match"
    );
    // A bad pattern is refused, and leaves nothing behind.
    let mut bad = join_req("z", &[]);
    bad.subscribed_topic_names = None;
    bad.subscribed_topic_regex = Some(s("(unclosed"));
    assert_eq!(hb(&co, bad).await.error_code, INVALID_REGULAR_EXPRESSION);
}

#[tokio::test(start_paused = true)]
async fn empty_groups_convert_between_the_protocols_and_busy_ones_do_not() {
    let co = coordinator();
    // A consumer group with a member: a classic join whose metadata is not the consumer
    // protocol's is refused.
    let a = Client::join(&co, "a", &["orders"]).await;
    let mut join = JoinGroupRequest::default();
    join.group_id = GroupId(s(GROUP));
    join.session_timeout_ms = 10_000;
    join.rebalance_timeout_ms = 5_000;
    join.protocol_type = s("consumer");
    let mut protocol =
        kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol::default();
    protocol.name = s("range");
    protocol.metadata = bytes::Bytes::from_static(&[0, 1, 0, 0, 0, 0]);
    join.protocols = vec![protocol];
    let r = co.join_group(join.clone(), 3, "c", "h").await;
    assert_eq!(r.error_code, INCONSISTENT_GROUP_PROTOCOL);
    // Listed and described as a consumer group.
    let mut list = ListGroupsRequest::default();
    list.types_filter = vec![s("consumer")];
    let l = co.list_groups(list, 5).await;
    assert_eq!(l.groups.len(), 1);
    assert_eq!(
        (
            l.groups[0].group_type.as_str(),
            l.groups[0].protocol_type.as_str()
        ),
        ("consumer", "consumer")
    );
    let mut describe = DescribeGroupsRequest::default();
    describe.groups = vec![GroupId(s(GROUP))];
    assert_eq!(
        co.describe_groups(describe, 6).await.groups[0].error_code,
        GROUP_ID_NOT_FOUND
    );
    // Deleting it needs it empty.
    let mut del = DeleteGroupsRequest::default();
    del.groups_names = vec![GroupId(s(GROUP))];
    assert_eq!(
        co.delete_groups(del, 2).await.results[0].error_code,
        NON_EMPTY_GROUP
    );
    // Once empty, a classic member turns it into a classic group.
    let mut leave = beat_req(&a.id, -1, &Owned::new());
    leave.topic_partitions = None;
    hb(&co, leave).await;
    let r = co.join_group(join, 3, "c", "h").await;
    assert_eq!(
        r.error_code, NONE,
        "an empty consumer group becomes classic"
    );
    // A classic group with a member is not converted ...
    let r2 = hb(&co, join_req("b", &["orders"])).await;
    assert_eq!(r2.error_code, GROUP_ID_NOT_FOUND);
    // ... until it is empty again.
    let mut lg = LeaveGroupRequest::default();
    lg.group_id = GroupId(s(GROUP));
    lg.member_id = r.member_id.clone();
    assert_eq!(co.leave_group(lg, 0).await.error_code, NONE);
    let r3 = hb(&co, join_req("b", &["orders"])).await;
    assert_eq!(r3.error_code, NONE);
    assert_eq!(count(&owned_of(&r3).expect("assignment")), 4);
}

#[tokio::test(start_paused = true)]
async fn heartbeats_kafka_refuses_are_refused() {
    let co = coordinator();
    let mut no_subscription = join_req("a", &[]);
    no_subscription.subscribed_topic_names = None;
    assert_eq!(hb(&co, no_subscription).await.error_code, INVALID_REQUEST);
    let mut owns_on_join = join_req("a", &["orders"]);
    owns_on_join.topic_partitions = None;
    assert_eq!(hb(&co, owns_on_join).await.error_code, INVALID_REQUEST);
    let mut assignor = join_req("a", &["orders"]);
    assignor.server_assignor = Some(s("sticky"));
    assert_eq!(hb(&co, assignor).await.error_code, UNSUPPORTED_ASSIGNOR);
    // An unknown group for a member that thinks it has an epoch.
    assert_eq!(
        hb(&co, beat_req("a", 3, &Owned::new())).await.error_code,
        GROUP_ID_NOT_FOUND
    );
    // v0 names new members for them.
    let mut v0 = join_req("", &["orders"]);
    v0.member_id = s("");
    let r = co
        .consumer_group_heartbeat(v0, 0, "c", "h", &catalog())
        .await;
    assert_eq!(r.error_code, NONE);
    assert!(r.member_id.is_some_and(|m| !m.is_empty()));
    // A member fenced by a newer epoch it never had.
    let a = Client::join(&co, "a", &["orders"]).await;
    assert_eq!(
        hb(&co, beat_req("a", a.epoch + 5, &a.owned))
            .await
            .error_code,
        FENCED_MEMBER_EPOCH
    );
    // An empty subscription list is a subscription to nothing yet (a Java consumer's pattern
    // that matched nothing so far): the member joins, with nothing.
    let r = hb(&co, join_req("e", &[])).await;
    assert_eq!((r.error_code, r.member_epoch), (NONE, a.epoch + 1));
    assert_eq!(owned_of(&r).map(|o| count(&o)), Some(0));
}

mod migration {
    use bytes::{Buf, BufMut, Bytes, BytesMut};
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedTopic;
    use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as OwnedTopic;
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use kafka_protocol::protocol::{Decodable, Encodable};

    use super::*;

    /// A classic consumer as the Java client is one: cooperative, so it reports what it owns.
    struct ClassicClient {
        id: String,
        generation: i32,
        owned: Vec<i32>,
    }

    fn subscription(owned: &[i32]) -> Bytes {
        let mut sub = ConsumerProtocolSubscription::default();
        sub.topics = vec![s("orders")];
        let mut t = OwnedTopic::default();
        t.topic = TopicName(s("orders"));
        t.partitions = owned.to_vec();
        sub.owned_partitions = if owned.is_empty() { vec![] } else { vec![t] };
        let mut buf = BytesMut::new();
        buf.put_i16(1);
        sub.encode(&mut buf, 1).expect("encode");
        buf.freeze()
    }

    fn assignment(partitions: &[i32]) -> Bytes {
        let mut a = ConsumerProtocolAssignment::default();
        let mut t = AssignedTopic::default();
        t.topic = TopicName(s("orders"));
        t.partitions = partitions.to_vec();
        a.assigned_partitions = vec![t];
        let mut buf = BytesMut::new();
        buf.put_i16(1);
        a.encode(&mut buf, 1).expect("encode");
        buf.freeze()
    }

    fn partitions_of(bytes: &Bytes) -> Vec<i32> {
        let mut b = bytes.clone();
        if b.is_empty() {
            return Vec::new();
        }
        let v = b.get_i16();
        let a = ConsumerProtocolAssignment::decode(&mut b, v).expect("decode");
        let mut ps: Vec<i32> = a
            .assigned_partitions
            .into_iter()
            .flat_map(|t| t.partitions)
            .collect();
        ps.sort();
        ps
    }

    fn join(member: &str, owned: &[i32]) -> JoinGroupRequest {
        let mut req = JoinGroupRequest::default();
        req.group_id = GroupId(s(GROUP));
        req.member_id = s(member);
        req.session_timeout_ms = 10_000;
        req.rebalance_timeout_ms = 5_000;
        req.protocol_type = s("consumer");
        let mut p = JoinGroupRequestProtocol::default();
        p.name = s("cooperative-sticky");
        p.metadata = subscription(owned);
        req.protocols = vec![p];
        req
    }

    fn sync(member: &str, generation: i32, assignments: &[(&str, &[i32])]) -> SyncGroupRequest {
        let mut req = SyncGroupRequest::default();
        req.group_id = GroupId(s(GROUP));
        req.member_id = s(member);
        req.generation_id = generation;
        req.protocol_type = Some(s("consumer"));
        req.protocol_name = Some(s("cooperative-sticky"));
        req.assignments = assignments
            .iter()
            .map(|(m, ps)| {
                let mut a = SyncGroupRequestAssignment::default();
                a.member_id = s(m);
                a.assignment = assignment(ps);
                a
            })
            .collect();
        req
    }

    fn heartbeat_req(member: &str, generation: i32) -> HeartbeatRequest {
        let mut req = HeartbeatRequest::default();
        req.group_id = GroupId(s(GROUP));
        req.member_id = s(member);
        req.generation_id = generation;
        req
    }

    impl ClassicClient {
        /// Rejoins and syncs as a cooperative consumer does, keeping what it is given.
        async fn rejoin(&mut self, co: &GroupCoordinator) {
            let j = co
                .join_group(join(&self.id, &self.owned), 3, "c", "h")
                .await;
            assert_eq!(j.error_code, NONE, "{} rejoins", self.id);
            assert!(j.leader.is_empty() || j.leader.as_str() != self.id);
            self.generation = j.generation_id;
            let sr = co.sync_group(sync(&self.id, self.generation, &[]), 3).await;
            assert_eq!(sr.error_code, NONE, "{} syncs", self.id);
            self.owned = partitions_of(&sr.assignment);
        }

        async fn beat(&mut self, co: &GroupCoordinator) -> i16 {
            co.heartbeat(heartbeat_req(&self.id, self.generation), 3)
                .await
                .error_code
        }
    }

    /// A classic group of two members is upgraded by a consumer-protocol member: the classic
    /// members go on with JoinGroup/SyncGroup/Heartbeat, the three converge to a split of the
    /// partitions that never gives one partition to two of them, and offsets are committed at
    /// the classic generation. When the consumer-protocol member leaves, the group is classic
    /// again and rebalances between the other two.
    #[tokio::test(start_paused = true)]
    async fn a_classic_group_upgrades_online_and_downgrades_when_the_last_new_member_leaves() {
        let co = coordinator();
        // A classic group: x leads, x and y split orders 2/2.
        let jx = co.join_group(join("", &[]), 3, "c", "h").await;
        let x_id = jx.member_id.to_string();
        let s1 = co
            .sync_group(
                sync(&x_id, jx.generation_id, &[(&x_id, &[0, 1, 2, 3][..])]),
                3,
            )
            .await;
        assert_eq!(s1.error_code, NONE);
        // y first: its join starts the rebalance that x's rejoin completes.
        let jy = co.join_group(join("", &[]), 3, "c", "h");
        let jx2 = co.join_group(join(&x_id, &[0, 1, 2, 3]), 3, "c", "h");
        let (jy, jx2) = tokio::join!(jy, jx2);
        assert_eq!((jx2.error_code, jy.error_code), (NONE, NONE));
        assert_eq!(jx2.leader, jx2.member_id);
        let y_id = jy.member_id.to_string();
        let generation = jx2.generation_id;
        let (sx, sy) = tokio::join!(
            co.sync_group(
                sync(
                    &x_id,
                    generation,
                    &[(&x_id, &[0, 1][..]), (&y_id, &[2, 3][..])]
                ),
                3
            ),
            co.sync_group(sync(&y_id, generation, &[]), 3)
        );
        assert_eq!((sx.error_code, sy.error_code), (NONE, NONE));
        let mut x = ClassicClient {
            id: x_id,
            generation,
            owned: partitions_of(&sx.assignment),
        };
        let mut y = ClassicClient {
            id: y_id,
            generation,
            owned: partitions_of(&sy.assignment),
        };
        assert_eq!((x.owned.clone(), y.owned.clone()), (vec![0, 1], vec![2, 3]));

        // z joins with the consumer protocol: the group converts, z waits for a share.
        let mut z = Client::join(&co, "z", &["orders"]).await;
        assert_eq!(count(&z.owned), 0, "x and y still hold everything");
        let mut list = ListGroupsRequest::default();
        list.types_filter = vec![s("consumer")];
        assert_eq!(co.list_groups(list, 5).await.groups.len(), 1);
        // Classic members are told to rejoin; they do, give up what moves, and z gets it.
        for _ in 0..4 {
            for c in [&mut x, &mut y] {
                match c.beat(&co).await {
                    NONE => {}
                    REBALANCE_IN_PROGRESS => c.rejoin(&co).await,
                    e => panic!("{}: heartbeat error {e}", c.id),
                }
            }
            assert_eq!(z.beat(&co).await, NONE);
            let mut all: Vec<i32> = x.owned.iter().chain(&y.owned).copied().collect();
            all.extend(z.owned.values().flatten());
            let n = all.len();
            all.sort();
            all.dedup();
            assert_eq!(all.len(), n, "a partition held twice: {all:?}");
        }
        // The uniform assignor's target: 2, 1, 1 in some order, everything held.
        let mut counts = vec![x.owned.len(), y.owned.len(), count(&z.owned)];
        counts.sort();
        assert_eq!(counts, vec![1, 1, 2]);
        // A classic member commits at its generation (its member epoch), with an old version.
        assert_eq!(commit(&co, &x.id, x.generation, 7).await, NONE);
        assert_eq!(
            commit(&co, &x.id, x.generation - 1, 7).await,
            ILLEGAL_GENERATION
        );

        // z leaves: only classic members are left, and the group is classic again.
        let mut leave = beat_req("z", z.epoch, &Owned::new());
        leave.member_epoch = -1;
        leave.topic_partitions = None;
        assert_eq!(hb(&co, leave).await.error_code, NONE);
        let mut list = ListGroupsRequest::default();
        list.types_filter = vec![s("classic")];
        assert_eq!(co.list_groups(list, 5).await.groups.len(), 1);
        assert_eq!(x.beat(&co).await, REBALANCE_IN_PROGRESS);
        // The classic rebalance: both rejoin, the leader assigns, everything is held again.
        let jx = co.join_group(join(&x.id, &x.owned), 3, "c", "h");
        let jy = co.join_group(join(&y.id, &y.owned), 3, "c", "h");
        let (jx, jy) = tokio::join!(jx, jy);
        assert_eq!((jx.error_code, jy.error_code), (NONE, NONE));
        assert_eq!(jx.generation_id, jy.generation_id);
        let leader = if jx.leader == jx.member_id { &x } else { &y };
        assert_eq!(jx.leader.as_str(), leader.id, "a classic leader again");
    }

    /// The lock-outs a review found: a classic member handed an id with MEMBER_ID_REQUIRED
    /// joins with it; a static member moves between the protocols under a new member id; a
    /// refused first heartbeat (a bad pattern) leaves a classic group as it was; a stale epoch
    /// in a transactional offset commit is ILLEGAL_GENERATION, which producers understand.
    #[tokio::test(start_paused = true)]
    async fn classic_members_are_never_locked_out_of_a_consumer_group() {
        let co = coordinator();
        // A classic group with one member, x.
        let jx = co.join_group(join("", &[]), 3, "c", "h").await;
        let x_id = jx.member_id.to_string();
        let sx = co
            .sync_group(
                sync(&x_id, jx.generation_id, &[(&x_id, &[0, 1, 2, 3][..])]),
                3,
            )
            .await;
        assert_eq!(sx.error_code, NONE);
        // A consumer-protocol join with a bad pattern is refused and converts nothing.
        let mut bad = join_req("z", &[]);
        bad.subscribed_topic_names = None;
        bad.subscribed_topic_regex = Some(s("(unclosed"));
        assert_eq!(hb(&co, bad).await.error_code, INVALID_REGULAR_EXPRESSION);
        let mut list = ListGroupsRequest::default();
        list.types_filter = vec![s("classic")];
        assert_eq!(
            co.list_groups(list, 5).await.groups.len(),
            1,
            "still classic"
        );
        assert_eq!(
            co.heartbeat(heartbeat_req(&x_id, jx.generation_id), 3)
                .await
                .error_code,
            NONE
        );
        // Now a good one converts it.
        let z = Client::join(&co, "z", &["orders"]).await;
        // A new classic member (v4+: MEMBER_ID_REQUIRED first) joins the consumer group.
        let first = co.join_group(join("", &[]), 5, "c", "h").await;
        assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
        let second = co
            .join_group(join(first.member_id.as_str(), &[]), 5, "c", "h")
            .await;
        assert_eq!(second.error_code, NONE, "joins with the id it was given");
        // Described with its protocol: classic members are type 0.
        let mut req = ConsumerGroupDescribeRequest::default();
        req.group_ids = vec![GroupId(s(GROUP))];
        let d = co.consumer_group_describe(req, 1, &catalog()).await;
        let types: BTreeMap<String, i8> = d.groups[0]
            .members
            .iter()
            .map(|m| (m.member_id.to_string(), m.member_type))
            .collect();
        assert_eq!(types.get("z"), Some(&1));
        assert_eq!(types.get(&x_id), Some(&0));
        // A transactional commit at a stale epoch.
        assert_eq!(
            co.validate_txn_offset_commit(GROUP, "z", None, z.epoch + 7, &[])
                .await,
            Err(ILLEGAL_GENERATION)
        );
        assert_eq!(
            co.validate_txn_offset_commit(GROUP, "z", None, z.epoch, &[])
                .await,
            Ok(())
        );
    }

    /// A static member restarted with the other protocol (same group.instance.id, new member
    /// id) takes its own place over, partitions included, in both directions.
    #[tokio::test(start_paused = true)]
    async fn a_static_member_changes_protocol_in_place() {
        let co = coordinator();
        let mut req = join_req("n1", &["orders"]);
        req.instance_id = Some(s("instance-1"));
        let r = hb(&co, req).await;
        assert_eq!(r.error_code, NONE);
        let held = owned_of(&r).map(|o| count(&o));
        assert_eq!(held, Some(4));
        let other = Client::join(&co, "other", &["orders"]).await;
        // instance-1 restarts as a classic static member: it replaces n1.
        let mut j = join("", &[]);
        j.group_instance_id = Some(s("instance-1"));
        let r = co.join_group(j, 5, "c", "h").await;
        assert_eq!(
            r.error_code, NONE,
            "a classic static member replaces its old self"
        );
        let c_id = r.member_id.to_string();
        // And back: a consumer-protocol member with the same instance replaces the classic one.
        let mut req = join_req("n2", &["orders"]);
        req.instance_id = Some(s("instance-1"));
        let r = hb(&co, req).await;
        assert_eq!(r.error_code, NONE, "{:?}", r.error_message);
        assert_eq!(
            co.heartbeat(heartbeat_req(&c_id, 1), 3).await.error_code,
            UNKNOWN_MEMBER_ID,
            "the replaced classic member is gone"
        );
        drop(other);
    }
}

/// A group store whose state writes fail while `down` is set (the rest works).
struct FlakyStore {
    inner: SqliteMetaStore,
    down: std::sync::atomic::AtomicBool,
}

impl FlakyStore {
    fn is_down(&self) -> bool {
        self.down.load(std::sync::atomic::Ordering::SeqCst)
    }
}

fn flaky() -> weir_meta::MetaError {
    weir_meta::MetaError::Backend {
        context: "test",
        source: "writes fail".into(),
    }
}

#[async_trait::async_trait]
impl weir_meta::GroupOffsets for FlakyStore {
    async fn commit_offsets(
        &self,
        g: &str,
        o: Vec<weir_meta::GroupOffset>,
    ) -> weir_meta::Result<()> {
        self.inner.commit_offsets(g, o).await
    }
    async fn fetch_offsets(&self, g: &str) -> weir_meta::Result<Vec<weir_meta::GroupOffset>> {
        self.inner.fetch_offsets(g).await
    }
    async fn delete_offsets(
        &self,
        g: &str,
        p: Option<Vec<(String, u32)>>,
    ) -> weir_meta::Result<()> {
        self.inner.delete_offsets(g, p).await
    }
    async fn offset_groups(&self) -> weir_meta::Result<Vec<String>> {
        self.inner.offset_groups().await
    }
}

#[async_trait::async_trait]
impl weir_meta::GroupStates for FlakyStore {
    async fn save_group_state(&self, g: &str, d: Vec<u8>) -> weir_meta::Result<()> {
        if self.is_down() {
            return Err(flaky());
        }
        self.inner.save_group_state(g, d).await
    }
    async fn load_group_state(&self, g: &str) -> weir_meta::Result<Option<Vec<u8>>> {
        self.inner.load_group_state(g).await
    }
    async fn delete_group_state(&self, g: &str) -> weir_meta::Result<()> {
        if self.is_down() {
            return Err(flaky());
        }
        self.inner.delete_group_state(g).await
    }
    async fn group_state_ids(&self) -> weir_meta::Result<Vec<String>> {
        self.inner.group_state_ids().await
    }
}

/// A heartbeat is never answered with a group state the store does not hold: while writes
/// fail, the join that changed the group and its retry (which changes nothing more) are both
/// told COORDINATOR_NOT_AVAILABLE; once writes work, the retry succeeds and a coordinator
/// reading the store knows the member. (A retry used to be answered from memory: a new
/// coordinator could then give the member's partitions to another.)
#[tokio::test(start_paused = true)]
async fn no_heartbeat_is_answered_with_state_the_store_does_not_hold() {
    let store = Arc::new(FlakyStore {
        inner: SqliteMetaStore::in_memory().expect("store"),
        down: std::sync::atomic::AtomicBool::new(false),
    });
    let co = GroupCoordinator::new(Arc::clone(&store) as Arc<dyn GroupStore>, config());
    let a = Client::join(&co, "a", &["orders"]).await;
    store.down.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        hb(&co, join_req("b", &["orders"])).await.error_code,
        COORDINATOR_NOT_AVAILABLE
    );
    assert_eq!(
        hb(&co, join_req("b", &["orders"])).await.error_code,
        COORDINATOR_NOT_AVAILABLE,
        "the retry sees the same unstored state"
    );
    store.down.store(false, std::sync::atomic::Ordering::SeqCst);
    let r = hb(&co, join_req("b", &["orders"])).await;
    assert_eq!(r.error_code, NONE);
    // Another coordinator over the same store knows b at the epoch b was told.
    let co2 = GroupCoordinator::new(Arc::clone(&store) as Arc<dyn GroupStore>, config());
    let mut req = ConsumerGroupDescribeRequest::default();
    req.group_ids = vec![GroupId(s(GROUP))];
    let d = co2.consumer_group_describe(req, 1, &catalog()).await;
    let b = d.groups[0]
        .members
        .iter()
        .find(|m| m.member_id.as_str() == "b")
        .expect("b is stored");
    assert_eq!(b.member_epoch, r.member_epoch);
    drop(a);
}

/// `group.consumer.max.size`: a new member beyond it is refused GROUP_MAX_SIZE_REACHED and the
/// group is unchanged; members already in keep heartbeating; a static member coming back under
/// a new id still gets in; once one leaves, a new one may join.
#[tokio::test]
async fn a_consumer_group_takes_no_more_than_its_max_size() {
    let co = GroupCoordinator::new(
        Arc::new(SqliteMetaStore::in_memory().expect("store")),
        GroupConfig {
            consumer_max_size: 2,
            ..config()
        },
    );
    co.set_catalog(Arc::new(catalog));
    let mut a = Client::join(&co, "a", &["orders"]).await;
    let mut static_req = join_req("b", &["orders"]);
    static_req.instance_id = Some(s("instance-b"));
    assert_eq!(hb(&co, static_req).await.error_code, NONE);
    let r = hb(&co, join_req("c", &["orders"])).await;
    assert_eq!(
        r.error_code, GROUP_MAX_SIZE_REACHED,
        "{:?}",
        r.error_message
    );
    assert_eq!(a.beat(&co).await, NONE, "a member already in goes on");
    // The static member leaves for now (epoch -2) and comes back under a new id: admitted.
    let mut leave = beat_req("b", 1, &Owned::new());
    leave.member_epoch = -2;
    leave.instance_id = Some(s("instance-b"));
    hb(&co, leave).await;
    let mut back = join_req("b2", &["orders"]);
    back.instance_id = Some(s("instance-b"));
    let r = hb(&co, back).await;
    assert_eq!(r.error_code, NONE, "{:?}", r.error_message);
    // a leaves: c gets in.
    let mut gone = beat_req("a", a.epoch, &a.owned);
    gone.member_epoch = -1;
    assert_eq!(hb(&co, gone).await.error_code, NONE);
    let r = hb(&co, join_req("c", &["orders"])).await;
    assert_eq!(r.error_code, NONE, "{:?}", r.error_message);
}
