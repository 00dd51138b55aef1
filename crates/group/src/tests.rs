//! The coordinator driven as real clients drive it: concurrent members joining, syncing,
//! heartbeating, committing; timeouts under tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, Message, StrBytes};
use weir_meta::{GroupStore, SqliteMetaStore};

use super::codes::*;
use super::snapshot::{GroupSnapshot, StoredState};
use super::{GroupConfig, GroupCoordinator};

const GROUP: &str = "g";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn store() -> Arc<dyn GroupStore> {
    Arc::new(SqliteMetaStore::in_memory().expect("in-memory store"))
}

fn config() -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay: Duration::ZERO,
        min_session_timeout: Duration::from_millis(100),
        max_session_timeout: Duration::from_secs(300),
        ..GroupConfig::default()
    }
}

fn coordinator(delay: Duration) -> Arc<GroupCoordinator> {
    GroupCoordinator::new(
        store(),
        GroupConfig {
            initial_rebalance_delay: delay,
            ..config()
        },
    )
}

/// ConsumerProtocolSubscription metadata, as a Java consumer sends it.
fn subscription(topics: &[&str]) -> Bytes {
    let mut sub = ConsumerProtocolSubscription::default();
    sub.topics = topics.iter().map(|t| s(t)).collect();
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&1i16.to_be_bytes());
    sub.encode(&mut buf, 1).expect("encode subscription");
    buf.freeze()
}

fn protocols(names: &[&str], topics: &[&str]) -> Vec<(String, Bytes)> {
    names
        .iter()
        .map(|n| (n.to_string(), subscription(topics)))
        .collect()
}

fn join_req(member_id: &str, protocols: &[(String, Bytes)]) -> JoinGroupRequest {
    let mut req = JoinGroupRequest::default();
    req.group_id = GroupId(s(GROUP));
    req.session_timeout_ms = 10_000;
    req.rebalance_timeout_ms = 5_000;
    req.member_id = s(member_id);
    req.protocol_type = s("consumer");
    req.protocols = protocols
        .iter()
        .map(|(name, metadata)| {
            let mut p = JoinGroupRequestProtocol::default();
            p.name = s(name);
            p.metadata = metadata.clone();
            p
        })
        .collect();
    req
}

/// A consumer's view of its membership.
#[derive(Clone, Debug)]
struct Joined {
    member_id: String,
    generation: i32,
    leader: String,
    protocol: String,
    members: Vec<String>,
}

impl Joined {
    fn is_leader(&self) -> bool {
        self.member_id == self.leader
    }
}

fn joined(resp: &JoinGroupResponse) -> Joined {
    assert_eq!(resp.error_code, NONE, "join failed: {resp:?}");
    Joined {
        member_id: resp.member_id.to_string(),
        generation: resp.generation_id,
        leader: resp.leader.to_string(),
        protocol: resp
            .protocol_name
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        members: resp
            .members
            .iter()
            .map(|m| m.member_id.to_string())
            .collect(),
    }
}

/// JoinGroup as a v4+ client does it: MEMBER_ID_REQUIRED, then again with the given id.
async fn join_new(co: &GroupCoordinator, client_id: &str, protocols: &[(String, Bytes)]) -> Joined {
    let first = co
        .join_group(join_req("", protocols), 9, client_id, "/10.0.0.1")
        .await;
    assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
    assert!(
        first.member_id.starts_with(&format!("{client_id}-")),
        "{:?}",
        first.member_id
    );
    let resp = co
        .join_group(
            join_req(&first.member_id, protocols),
            9,
            client_id,
            "/10.0.0.1",
        )
        .await;
    joined(&resp)
}

async fn rejoin(co: &GroupCoordinator, member_id: &str, protocols: &[(String, Bytes)]) -> Joined {
    joined(
        &co.join_group(join_req(member_id, protocols), 9, "client", "/10.0.0.1")
            .await,
    )
}

fn sync_req(member_id: &str, generation: i32, assignments: &[(&str, &str)]) -> SyncGroupRequest {
    let mut req = SyncGroupRequest::default();
    req.group_id = GroupId(s(GROUP));
    req.member_id = s(member_id);
    req.generation_id = generation;
    req.assignments = assignments
        .iter()
        .map(|(m, a)| {
            let mut x = SyncGroupRequestAssignment::default();
            x.member_id = s(m);
            x.assignment = Bytes::copy_from_slice(a.as_bytes());
            x
        })
        .collect();
    req
}

/// SyncGroup as a client does it; the leader assigns "A-<member>" to every member.
async fn sync(co: &GroupCoordinator, j: &Joined) -> SyncGroupResponse {
    let assignments: Vec<(String, String)> = j
        .members
        .iter()
        .map(|m| (m.clone(), format!("A-{m}")))
        .collect();
    let refs: Vec<(&str, &str)> = assignments
        .iter()
        .map(|(m, a)| (m.as_str(), a.as_str()))
        .collect();
    co.sync_group(sync_req(&j.member_id, j.generation, &refs), 5)
        .await
}

fn assigned(j: &Joined) -> Bytes {
    Bytes::from(format!("A-{}", j.member_id))
}

async fn heartbeat(co: &GroupCoordinator, member_id: &str, generation: i32) -> i16 {
    let mut req = HeartbeatRequest::default();
    req.group_id = GroupId(s(GROUP));
    req.member_id = s(member_id);
    req.generation_id = generation;
    co.heartbeat(req, 4).await.error_code
}

async fn describe(
    co: &GroupCoordinator,
    group: &str,
    version: i16,
) -> describe_groups_response::DescribedGroup {
    let mut req = DescribeGroupsRequest::default();
    req.groups = vec![GroupId(s(group))];
    let mut resp = co.describe_groups(req, version).await;
    assert_eq!(resp.groups.len(), 1);
    resp.groups.remove(0)
}

/// Two members join (within the initial delay) and sync: one leader, one generation, and each
/// gets its own assignment.
async fn two_stable_members(co: &Arc<GroupCoordinator>) -> (Joined, Joined) {
    let p = protocols(&["range"], &["t1"]);
    let (a, b) = tokio::join!(join_new(co, "a", &p), join_new(co, "b", &p));
    assert_eq!(a.generation, b.generation);
    assert_eq!(a.leader, b.leader);
    assert!(a.is_leader() != b.is_leader(), "exactly one leader");
    let (leader, follower) = if a.is_leader() { (&a, &b) } else { (&b, &a) };
    assert_eq!(leader.members.len(), 2);
    assert!(follower.members.is_empty());
    assert_eq!(a.protocol, "range");

    // The follower syncs first and waits for the leader's assignment.
    let f = {
        let co = Arc::clone(co);
        let follower = follower.clone();
        tokio::spawn(async move { sync(&co, &follower).await })
    };
    tokio::task::yield_now().await;
    let l = sync(co, leader).await;
    let f = f.await.expect("follower sync");
    assert_eq!(l.error_code, NONE);
    assert_eq!(f.error_code, NONE);
    assert_eq!(l.assignment, assigned(leader));
    assert_eq!(f.assignment, assigned(follower));
    assert_eq!(l.protocol_name.as_deref(), Some("range"));
    assert_eq!(l.protocol_type.as_deref(), Some("consumer"));
    (a, b)
}

#[tokio::test(start_paused = true)]
async fn two_members_join_sync_and_a_third_triggers_a_rebalance() {
    let co = coordinator(Duration::from_millis(500));
    let (a, b) = two_stable_members(&co).await;
    assert_eq!(a.generation, 1);
    assert_eq!(describe(&co, GROUP, 5).await.group_state.as_str(), "Stable");
    assert_eq!(heartbeat(&co, &a.member_id, 1).await, NONE);

    // A third member joins: the group prepares a rebalance and the others learn it by heartbeat.
    let p = protocols(&["range"], &["t1"]);
    let c = {
        let co = Arc::clone(&co);
        let p = p.clone();
        tokio::spawn(async move { join_new(&co, "c", &p).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        describe(&co, GROUP, 5).await.group_state.as_str(),
        "PreparingRebalance"
    );
    assert_eq!(heartbeat(&co, &a.member_id, 1).await, REBALANCE_IN_PROGRESS);
    assert_eq!(heartbeat(&co, &b.member_id, 1).await, REBALANCE_IN_PROGRESS);
    // Commits of the old generation are still accepted while the group prepares (Kafka's
    // consumers commit in onPartitionsRevoked before rejoining).
    let commit = co
        .offset_commit(
            commit_req(GROUP, &a.member_id, 1, &[("t1", 0, 5)]),
            8,
            &|_, _| true,
        )
        .await;
    assert_eq!(commit.topics[0].partitions[0].error_code, NONE);

    let (a2, b2) = tokio::join!(rejoin(&co, &a.member_id, &p), rejoin(&co, &b.member_id, &p));
    let c2 = c.await.expect("c joins");
    assert_eq!(a2.generation, 2);
    assert_eq!(b2.generation, 2);
    assert_eq!(c2.generation, 2);
    let old_leader = if a.is_leader() { &a } else { &b };
    assert_eq!(
        a2.leader, old_leader.member_id,
        "the old leader stays leader"
    );
    let leader = [&a2, &b2, &c2]
        .into_iter()
        .find(|j| j.is_leader())
        .cloned()
        .expect("a leader");
    assert_eq!(leader.members.len(), 3);
    for j in [&a2, &b2, &c2] {
        if !j.is_leader() {
            assert!(j.members.is_empty());
        }
    }

    // Old generation is fenced now; the new one syncs.
    assert_eq!(heartbeat(&co, &a.member_id, 1).await, ILLEGAL_GENERATION);
    assert_eq!(heartbeat(&co, &a.member_id, 2).await, NONE);
    let followers: Vec<Joined> = [&a2, &b2, &c2]
        .into_iter()
        .filter(|j| !j.is_leader())
        .cloned()
        .collect();
    let waiting: Vec<_> = followers
        .iter()
        .cloned()
        .map(|f| {
            let co = Arc::clone(&co);
            tokio::spawn(async move { (sync(&co, &f).await, f) })
        })
        .collect();
    tokio::task::yield_now().await;
    let l = sync(&co, &leader).await;
    assert_eq!(l.assignment, assigned(&leader));
    for w in waiting {
        let (resp, f) = w.await.expect("follower sync");
        assert_eq!(resp.error_code, NONE);
        assert_eq!(resp.assignment, assigned(&f));
    }
    let d = describe(&co, GROUP, 5).await;
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(d.members.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn initial_delay_waits_for_more_members_and_extends() {
    let co = coordinator(Duration::from_secs(3));
    let p = protocols(&["range"], &["t1"]);
    let start = tokio::time::Instant::now();
    let a = {
        let co = Arc::clone(&co);
        let p = p.clone();
        tokio::spawn(async move { join_new(&co, "a", &p).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let b = join_new(&co, "b", &p).await;
    let a = a.await.expect("a joins");
    // 3 s, then extended because b came in during the delay, by 3 s or what is left of the
    // 5 s rebalance timeout, whichever is less.
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert_eq!(a.generation, 1);
    assert_eq!(b.generation, 1);
}

#[tokio::test(start_paused = true)]
async fn a_silent_member_expires_and_the_group_rebalances_without_it() {
    let co = coordinator(Duration::ZERO);
    let (a, b) = sequential_pair(&co).await;
    // a heartbeats, b says nothing; b's 10 s session runs out.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(heartbeat(&co, &a.member_id, a.generation).await, NONE);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let d = describe(&co, GROUP, 5).await;
    assert_eq!(d.group_state.as_str(), "PreparingRebalance");
    assert_eq!(d.members.len(), 1);
    assert_eq!(
        heartbeat(&co, &b.member_id, b.generation).await,
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        heartbeat(&co, &a.member_id, a.generation).await,
        REBALANCE_IN_PROGRESS
    );
    let p = protocols(&["range"], &["t1"]);
    let a2 = rejoin(&co, &a.member_id, &p).await;
    assert_eq!(a2.generation, a.generation + 1);
    assert!(a2.is_leader());
    assert_eq!(a2.members, vec![a.member_id.clone()]);
}

#[tokio::test(start_paused = true)]
async fn the_rebalance_timeout_ends_a_join_phase_without_the_members_that_did_not_rejoin() {
    let co = coordinator(Duration::ZERO);
    let (a, b) = sequential_pair(&co).await;
    let p = protocols(&["range", "roundrobin"], &["t1"]);
    // a rejoins with new metadata; b keeps heartbeating but never rejoins.
    let start = tokio::time::Instant::now();
    let a_join = {
        let co = Arc::clone(&co);
        let (id, p) = (a.member_id.clone(), p.clone());
        tokio::spawn(async move { rejoin(&co, &id, &p).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        heartbeat(&co, &b.member_id, b.generation).await,
        REBALANCE_IN_PROGRESS
    );
    // Only the timer task can end this join phase: nobody calls in any more.
    let a2 = a_join.await.expect("a rejoins");
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(5),
        "the rebalance timeout"
    );
    assert_eq!(a2.generation, a.generation + 1);
    assert_eq!(a2.members, vec![a.member_id.clone()]);
    assert_eq!(
        heartbeat(&co, &b.member_id, b.generation).await,
        UNKNOWN_MEMBER_ID
    );
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_never_syncs_is_removed_and_waiting_followers_rejoin() {
    let co = coordinator(Duration::from_millis(100));
    let p = protocols(&["range"], &["t1"]);
    let (a, b) = tokio::join!(join_new(&co, "a", &p), join_new(&co, "b", &p));
    let follower = if a.is_leader() { b } else { a };
    let start = tokio::time::Instant::now();
    let resp = sync(&co, &follower).await;
    assert_eq!(resp.error_code, REBALANCE_IN_PROGRESS);
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(5),
        "the rebalance timeout"
    );
    let again = rejoin(&co, &follower.member_id, &p).await;
    assert!(again.is_leader());
    assert_eq!(again.members.len(), 1);
}

/// a joins alone, then b joins and a rejoins: a stable pair at generation 2.
async fn sequential_pair(co: &Arc<GroupCoordinator>) -> (Joined, Joined) {
    let p = protocols(&["range"], &["t1"]);
    let a = join_new(co, "a", &p).await;
    assert_eq!(a.generation, 1);
    assert!(a.is_leader());
    assert_eq!(sync(co, &a).await.error_code, NONE);
    let b = {
        let co = Arc::clone(co);
        let p = p.clone();
        tokio::spawn(async move { join_new(&co, "b", &p).await })
    };
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(heartbeat(co, &a.member_id, 1).await, REBALANCE_IN_PROGRESS);
    let a = rejoin(co, &a.member_id, &p).await;
    let b = b.await.expect("b joins");
    assert_eq!((a.generation, b.generation), (2, 2));
    assert!(a.is_leader());
    let f = {
        let co = Arc::clone(co);
        let b = b.clone();
        tokio::spawn(async move { sync(&co, &b).await })
    };
    tokio::task::yield_now().await;
    assert_eq!(sync(co, &a).await.error_code, NONE);
    assert_eq!(f.await.expect("b syncs").assignment, assigned(&b));
    (a, b)
}

#[tokio::test(start_paused = true)]
async fn leaving_rebalances_and_the_last_one_out_empties_the_group() {
    let co = coordinator(Duration::ZERO);
    let (a, b) = sequential_pair(&co).await;

    // v3+: a batch, with per-member errors.
    let mut req = LeaveGroupRequest::default();
    req.group_id = GroupId(s(GROUP));
    req.members = [b.member_id.as_str(), "nobody"]
        .iter()
        .map(|m| {
            let mut id = MemberIdentity::default();
            id.member_id = s(m);
            id
        })
        .collect();
    let resp = co.leave_group(req, 5).await;
    assert_eq!(resp.error_code, NONE);
    let errors: Vec<i16> = resp.members.iter().map(|m| m.error_code).collect();
    assert_eq!(errors, vec![NONE, UNKNOWN_MEMBER_ID]);
    assert_eq!(heartbeat(&co, &a.member_id, 2).await, REBALANCE_IN_PROGRESS);

    // v0-2: one member, its error at the top.
    let mut req = LeaveGroupRequest::default();
    req.group_id = GroupId(s(GROUP));
    req.member_id = s(&a.member_id);
    assert_eq!(co.leave_group(req.clone(), 1).await.error_code, NONE);
    assert_eq!(co.leave_group(req, 1).await.error_code, UNKNOWN_MEMBER_ID);

    let d = describe(&co, GROUP, 5).await;
    assert_eq!(d.group_state.as_str(), "Empty");
    assert!(d.members.is_empty());
    assert_eq!(d.protocol_type.as_str(), "consumer");

    // An unknown group: every member is unknown.
    let mut req = LeaveGroupRequest::default();
    req.group_id = GroupId(s("other"));
    let mut id = MemberIdentity::default();
    id.member_id = s("x");
    req.members = vec![id];
    let resp = co.leave_group(req, 4).await;
    assert_eq!(resp.error_code, NONE);
    assert_eq!(resp.members[0].error_code, UNKNOWN_MEMBER_ID);

    // Rejoining an Empty group starts over with a new generation.
    let p = protocols(&["range"], &["t1"]);
    let c = join_new(&co, "c", &p).await;
    assert_eq!(c.generation, 4);
}

#[tokio::test]
async fn member_id_required_only_from_v4() {
    let co = coordinator(Duration::ZERO);
    let p = protocols(&["range"], &["t1"]);
    for version in [0i16, 1, 2, 3] {
        let mut req = join_req("", &p);
        req.group_id = GroupId(s(&format!("old-{version}")));
        let resp = co.join_group(req, version, "old", "/h").await;
        assert_eq!(resp.error_code, NONE, "v{version}");
        assert!(resp.member_id.starts_with("old-"));
        assert_eq!(resp.generation_id, 1);
        assert_eq!(resp.protocol_type, None, "no protocol type before v7");
    }
    let first = co.join_group(join_req("", &p), 4, "new", "/h").await;
    assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
    assert_eq!(first.generation_id, -1);
    // The client rejoins with the id it was given.
    let j = rejoin(&co, &first.member_id, &p).await;
    assert_eq!(j.generation, 1);
    let resp = co
        .join_group(join_req(&j.member_id, &p), 7, "new", "/h")
        .await;
    assert_eq!(
        resp.protocol_type.as_deref(),
        Some("consumer"),
        "v7+ names the protocol type"
    );
}

#[tokio::test]
async fn errors_for_unknown_members_generations_and_protocols() {
    let co = coordinator(Duration::ZERO);
    let p = protocols(&["range"], &["t1"]);
    // Unknown group with a member id.
    let resp = co.join_group(join_req("ghost", &p), 9, "c", "/h").await;
    assert_eq!(resp.error_code, UNKNOWN_MEMBER_ID);
    assert_eq!(heartbeat(&co, "ghost", 1).await, UNKNOWN_MEMBER_ID);
    assert_eq!(
        co.sync_group(sync_req("ghost", 1, &[]), 3).await.error_code,
        UNKNOWN_MEMBER_ID
    );

    let a = join_new(&co, "a", &p).await;
    // Known group, unknown member.
    assert_eq!(
        co.join_group(join_req("ghost", &p), 9, "c", "/h")
            .await
            .error_code,
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        heartbeat(&co, "ghost", a.generation).await,
        UNKNOWN_MEMBER_ID
    );
    // Wrong generation.
    assert_eq!(
        heartbeat(&co, &a.member_id, a.generation + 1).await,
        ILLEGAL_GENERATION
    );
    assert_eq!(
        co.sync_group(sync_req(&a.member_id, a.generation + 1, &[]), 3)
            .await
            .error_code,
        ILLEGAL_GENERATION
    );
    // SyncGroup v5 checks the protocol type and name.
    let mut req = sync_req(&a.member_id, a.generation, &[]);
    req.protocol_type = Some(s("connect"));
    assert_eq!(
        co.sync_group(req, 5).await.error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    let mut req = sync_req(&a.member_id, a.generation, &[]);
    req.protocol_name = Some(s("roundrobin"));
    assert_eq!(
        co.sync_group(req, 5).await.error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    // Heartbeats are fine while the group completes its rebalance.
    assert_eq!(heartbeat(&co, &a.member_id, a.generation).await, NONE);
    // A commit with the new generation before the assignment: REBALANCE_IN_PROGRESS.
    let commit = co
        .offset_commit(
            commit_req(GROUP, &a.member_id, a.generation, &[("t1", 0, 1)]),
            8,
            &|_, _| true,
        )
        .await;
    assert_eq!(
        commit.topics[0].partitions[0].error_code,
        REBALANCE_IN_PROGRESS
    );
    assert_eq!(sync(&co, &a).await.error_code, NONE);

    // No common protocol, or another protocol type.
    let other = protocols(&["roundrobin"], &["t1"]);
    let resp = co.join_group(join_req("", &other), 9, "c", "/h").await;
    assert_eq!(resp.error_code, INCONSISTENT_GROUP_PROTOCOL);
    let mut req = join_req("", &p);
    req.protocol_type = s("connect");
    assert_eq!(
        co.join_group(req, 9, "c", "/h").await.error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    let resp = co
        .join_group(join_req(&a.member_id, &[]), 9, "c", "/h")
        .await;
    assert_eq!(resp.error_code, INCONSISTENT_GROUP_PROTOCOL);

    // Session timeout bounds, group id.
    let mut req = join_req("", &p);
    req.session_timeout_ms = 10;
    assert_eq!(
        co.join_group(req, 9, "c", "/h").await.error_code,
        INVALID_SESSION_TIMEOUT
    );
    let mut req = join_req("", &p);
    req.session_timeout_ms = 301_000;
    assert_eq!(
        co.join_group(req, 9, "c", "/h").await.error_code,
        INVALID_SESSION_TIMEOUT
    );
    let mut req = join_req("", &p);
    req.group_id = GroupId(s(""));
    assert_eq!(
        co.join_group(req, 9, "c", "/h").await.error_code,
        INVALID_GROUP_ID
    );
    let mut req = HeartbeatRequest::default();
    req.member_id = s(&a.member_id);
    assert_eq!(co.heartbeat(req, 4).await.error_code, INVALID_GROUP_ID);

    // Commits: wrong generation, unknown member, a simple commit to an active group, and a
    // generation for a group that does not exist.
    let commit =
        |member: &str, generation: i32| commit_req(GROUP, member, generation, &[("t1", 0, 1)]);
    let code = |r: OffsetCommitResponse| r.topics[0].partitions[0].error_code;
    let all = |_: &str, _: i32| true;
    assert_eq!(
        code(co.offset_commit(commit(&a.member_id, 7), 8, &all).await),
        ILLEGAL_GENERATION
    );
    assert_eq!(
        code(
            co.offset_commit(commit("ghost", a.generation), 8, &all)
                .await
        ),
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        code(co.offset_commit(commit("", -1), 8, &all).await),
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        code(
            co.offset_commit(commit(&a.member_id, a.generation), 8, &all)
                .await
        ),
        NONE
    );
    let missing = |v: i16| {
        let co = Arc::clone(&co);
        async move {
            code(
                co.offset_commit(commit_req("nope", "m", 3, &[("t1", 0, 1)]), v, &all)
                    .await,
            )
        }
    };
    assert_eq!(missing(9).await, GROUP_ID_NOT_FOUND);
    assert_eq!(missing(8).await, ILLEGAL_GENERATION);
}

#[tokio::test]
async fn protocol_selection_prefers_what_members_prefer_among_common_protocols() {
    let co = coordinator(Duration::ZERO);
    let a = join_new(
        &co,
        "a",
        &protocols(&["sticky", "range", "roundrobin"], &["t1"]),
    )
    .await;
    assert_eq!(a.protocol, "sticky");
    let p_b = protocols(&["roundrobin", "range"], &["t1"]);
    let b = {
        let co = Arc::clone(&co);
        tokio::spawn(async move { join_new(&co, "b", &p_b).await })
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    let a = rejoin(
        &co,
        &a.member_id,
        &protocols(&["range", "roundrobin"], &["t1"]),
    )
    .await;
    let b = b.await.expect("b joins");
    // Common: range, roundrobin; one vote each; the leader's preference breaks the tie.
    assert_eq!(a.protocol, "range");
    assert_eq!(b.protocol, "range");
}

fn commit_req(
    group: &str,
    member: &str,
    generation: i32,
    offsets: &[(&str, i32, i64)],
) -> OffsetCommitRequest {
    let mut req = OffsetCommitRequest::default();
    req.group_id = GroupId(s(group));
    req.member_id = s(member);
    req.generation_id_or_member_epoch = generation;
    let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
    for (topic, partition, offset) in offsets {
        let mut p = OffsetCommitRequestPartition::default();
        p.partition_index = *partition;
        p.committed_offset = *offset;
        p.committed_leader_epoch = 3;
        p.committed_metadata = Some(s(&format!("m{offset}")));
        match topics.iter_mut().find(|t| t.name.as_str() == *topic) {
            Some(t) => t.partitions.push(p),
            None => {
                let mut t = OffsetCommitRequestTopic::default();
                t.name = TopicName(s(topic));
                t.partitions.push(p);
                topics.push(t);
            }
        }
    }
    req.topics = topics;
    req
}

fn fetch_req(group: &str, topics: Option<&[(&str, &[i32])]>, version: i16) -> OffsetFetchRequest {
    let mut req = OffsetFetchRequest::default();
    if version >= 8 {
        let mut g = OffsetFetchRequestGroup::default();
        g.group_id = GroupId(s(group));
        g.topics = topics.map(|ts| {
            ts.iter()
                .map(|(name, ps)| {
                    let mut t = OffsetFetchRequestTopics::default();
                    t.name = TopicName(s(name));
                    t.partition_indexes = ps.to_vec();
                    t
                })
                .collect()
        });
        req.groups = vec![g];
    } else {
        req.group_id = GroupId(s(group));
        req.topics = topics.map(|ts| {
            ts.iter()
                .map(|(name, ps)| {
                    let mut t = OffsetFetchRequestTopic::default();
                    t.name = TopicName(s(name));
                    t.partition_indexes = ps.to_vec();
                    t
                })
                .collect()
        });
    }
    req
}

/// (topic, partition, offset, leader epoch, metadata, error) of every partition in a response.
fn fetched(resp: &OffsetFetchResponse, version: i16) -> Vec<(String, i32, i64, i32, String, i16)> {
    let mut out = Vec::new();
    if version >= 8 {
        for g in &resp.groups {
            for t in &g.topics {
                for p in &t.partitions {
                    let m = p
                        .metadata
                        .as_ref()
                        .map(|m| m.to_string())
                        .unwrap_or_default();
                    out.push((
                        t.name.to_string(),
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        m,
                        p.error_code,
                    ));
                }
            }
        }
    } else {
        for t in &resp.topics {
            for p in &t.partitions {
                let m = p
                    .metadata
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default();
                out.push((
                    t.name.to_string(),
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    m,
                    p.error_code,
                ));
            }
        }
    }
    out
}

#[tokio::test]
async fn offsets_commit_fetch_and_survive_a_new_coordinator() {
    let meta = store();
    let co = GroupCoordinator::new(Arc::clone(&meta), config());
    let exists = |topic: &str, partition: i32| topic == "t1" && partition < 2;
    // A simple consumer (no membership) commits to a group that does not exist yet.
    let resp = co
        .offset_commit(
            commit_req(
                "simple",
                "",
                -1,
                &[("t1", 0, 10), ("t1", 1, 20), ("t1", 7, 1), ("nope", 0, 1)],
            ),
            9,
            &exists,
        )
        .await;
    let codes: Vec<Vec<i16>> = resp
        .topics
        .iter()
        .map(|t| t.partitions.iter().map(|p| p.error_code).collect())
        .collect();
    assert_eq!(
        codes,
        vec![
            vec![NONE, NONE, UNKNOWN_TOPIC_OR_PARTITION],
            vec![UNKNOWN_TOPIC_OR_PARTITION]
        ]
    );
    assert_eq!(resp.topics[1].name.as_str(), "nope");

    // Metadata over offset.metadata.max.bytes.
    let mut big = commit_req("simple", "", -1, &[("t1", 0, 11)]);
    big.topics[0].partitions[0].committed_metadata = Some(StrBytes::from_string("x".repeat(5000)));
    let resp = co.offset_commit(big, 9, &exists).await;
    assert_eq!(
        resp.topics[0].partitions[0].error_code,
        OFFSET_METADATA_TOO_LARGE
    );

    for version in [1i16, 2, 5, 7, 8, 9] {
        let resp = co
            .offset_fetch(
                fetch_req("simple", Some(&[("t1", &[0, 1, 5])]), version),
                version,
            )
            .await;
        let epoch = if version >= 5 { 3 } else { -1 };
        assert_eq!(
            fetched(&resp, version),
            vec![
                ("t1".into(), 0, 10, epoch, "m10".into(), NONE),
                ("t1".into(), 1, 20, epoch, "m20".into(), NONE),
                ("t1".into(), 5, -1, -1, "".into(), NONE),
            ],
            "v{version}"
        );
        if version >= 8 {
            assert_eq!(resp.groups[0].group_id.as_str(), "simple");
            assert!(resp.topics.is_empty());
        } else {
            assert!(resp.groups.is_empty());
        }
        // Null topics: everything committed.
        let resp = co
            .offset_fetch(fetch_req("simple", None, version), version)
            .await;
        assert_eq!(fetched(&resp, version).len(), 2, "v{version}");
        // A group nobody knows: -1 for what is asked, nothing for "all".
        let resp = co
            .offset_fetch(
                fetch_req("unknown", Some(&[("t1", &[0])]), version),
                version,
            )
            .await;
        assert_eq!(fetched(&resp, version)[0].2, -1);
        let resp = co
            .offset_fetch(fetch_req("unknown", None, version), version)
            .await;
        assert!(fetched(&resp, version).is_empty());
    }
    co.shutdown();
    drop(co);

    // A new coordinator on the same store: offsets are still there, the group is listed.
    let co = GroupCoordinator::new(meta, config());
    let resp = co.offset_fetch(fetch_req("simple", None, 9), 9).await;
    assert_eq!(
        fetched(&resp, 9),
        vec![
            ("t1".into(), 0, 10, 3, "m10".into(), NONE),
            ("t1".into(), 1, 20, 3, "m20".into(), NONE)
        ]
    );
    let listed = co.list_groups(ListGroupsRequest::default(), 5).await;
    assert_eq!(listed.groups.len(), 1);
    assert_eq!(listed.groups[0].group_id.as_str(), "simple");
    assert_eq!(listed.groups[0].group_state.as_str(), "Empty");
    assert_eq!(
        describe(&co, "simple", 5).await.group_state.as_str(),
        "Empty"
    );
    // Members of a generation from before the restart must rejoin.
    let resp = co
        .offset_commit(commit_req("simple", "m-1", 4, &[("t1", 0, 12)]), 8, &exists)
        .await;
    assert_eq!(resp.topics[0].partitions[0].error_code, ILLEGAL_GENERATION);
}

#[tokio::test]
async fn describe_list_delete_and_offset_delete() {
    let co = coordinator(Duration::ZERO);
    let p = protocols(&["range"], &["t1", "t2"]);
    let a = join_new(&co, "client-a", &p).await;
    assert_eq!(sync(&co, &a).await.error_code, NONE);
    let all = |_: &str, _: i32| true;
    let resp = co
        .offset_commit(
            commit_req(
                GROUP,
                &a.member_id,
                a.generation,
                &[("t1", 0, 1), ("t3", 0, 3)],
            ),
            9,
            &all,
        )
        .await;
    assert!(resp
        .topics
        .iter()
        .all(|t| t.partitions.iter().all(|p| p.error_code == NONE)));
    let resp = co
        .offset_commit(commit_req("other", "", -1, &[("t1", 0, 1)]), 9, &all)
        .await;
    assert_eq!(resp.topics[0].partitions[0].error_code, NONE);

    // Describe a stable group: members with client id, host, metadata and assignment.
    let d = describe(&co, GROUP, 5).await;
    assert_eq!(d.error_code, NONE);
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(d.protocol_type.as_str(), "consumer");
    assert_eq!(d.protocol_data.as_str(), "range");
    assert_eq!(d.members.len(), 1);
    let m = &d.members[0];
    assert_eq!(m.member_id.as_str(), a.member_id);
    assert_eq!(m.client_id.as_str(), "client-a");
    assert_eq!(m.client_host.as_str(), "/10.0.0.1");
    assert_eq!(m.member_metadata, subscription(&["t1", "t2"]));
    assert_eq!(m.member_assignment, assigned(&a));
    // Unknown groups: Dead without an error before v6, GROUP_ID_NOT_FOUND from v6.
    let d = describe(&co, "missing", 5).await;
    assert_eq!((d.group_state.as_str(), d.error_code), ("Dead", NONE));
    let d = describe(&co, "missing", 6).await;
    assert_eq!(
        (d.group_state.as_str(), d.error_code),
        ("Dead", GROUP_ID_NOT_FOUND)
    );

    // List, with state and type filters.
    let list = |states: &[&str], types: &[&str], version: i16| {
        let mut req = ListGroupsRequest::default();
        req.states_filter = states.iter().map(|x| s(x)).collect();
        req.types_filter = types.iter().map(|x| s(x)).collect();
        let co = Arc::clone(&co);
        async move {
            let resp = co.list_groups(req, version).await;
            assert_eq!(resp.error_code, NONE);
            resp.groups
                .iter()
                .map(|g| {
                    (
                        g.group_id.to_string(),
                        g.protocol_type.to_string(),
                        g.group_state.to_string(),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        list(&[], &[], 5).await,
        vec![
            (GROUP.into(), "consumer".into(), "Stable".into()),
            ("other".into(), "".into(), "Empty".into())
        ]
    );
    assert_eq!(
        list(&["stable"], &[], 4).await,
        vec![(GROUP.into(), "consumer".into(), "Stable".into())]
    );
    assert_eq!(list(&[], &["Classic"], 5).await.len(), 2);
    assert!(list(&[], &["consumer"], 5).await.is_empty());
    assert_eq!(
        list(&["stable"], &[], 3).await.len(),
        2,
        "no state filter before v4"
    );
    assert_eq!(list(&[], &[], 2).await[0].2, "", "no state before v4");

    // Offsets of a topic the active member subscribes to stay; others can go.
    let mut req = OffsetDeleteRequest::default();
    req.group_id = GroupId(s(GROUP));
    req.topics = ["t1", "t3"]
        .iter()
        .map(|t| {
            let mut topic = OffsetDeleteRequestTopic::default();
            topic.name = TopicName(s(t));
            let mut p = OffsetDeleteRequestPartition::default();
            p.partition_index = 0;
            topic.partitions.push(p);
            topic
        })
        .collect();
    let resp = co.offset_delete(req.clone(), 0).await;
    assert_eq!(resp.error_code, NONE);
    let codes: Vec<i16> = resp
        .topics
        .iter()
        .map(|t| t.partitions[0].error_code)
        .collect();
    assert_eq!(codes, vec![GROUP_SUBSCRIBED_TO_TOPIC, NONE]);
    let left = co.offset_fetch(fetch_req(GROUP, None, 9), 9).await;
    assert_eq!(
        fetched(&left, 9)
            .iter()
            .map(|f| f.0.as_str())
            .collect::<Vec<_>>(),
        vec!["t1"]
    );
    let mut missing = req.clone();
    missing.group_id = GroupId(s("missing"));
    assert_eq!(
        co.offset_delete(missing, 0).await.error_code,
        GROUP_ID_NOT_FOUND
    );

    // Delete: not while members are in; unknown groups are not found.
    let mut req = DeleteGroupsRequest::default();
    req.groups_names = vec![
        GroupId(s(GROUP)),
        GroupId(s("missing")),
        GroupId(s("other")),
    ];
    let resp = co.delete_groups(req.clone(), 2).await;
    let codes: Vec<i16> = resp.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, vec![NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, NONE]);
    assert!(fetched(&co.offset_fetch(fetch_req("other", None, 9), 9).await, 9).is_empty());

    // Once empty, the group and its offsets can go.
    let mut leave = LeaveGroupRequest::default();
    leave.group_id = GroupId(s(GROUP));
    leave.member_id = s(&a.member_id);
    assert_eq!(co.leave_group(leave, 0).await.error_code, NONE);
    // An Empty group: offsets of any topic can be deleted.
    let mut req2 = OffsetDeleteRequest::default();
    req2.group_id = GroupId(s(GROUP));
    let mut topic = OffsetDeleteRequestTopic::default();
    topic.name = TopicName(s("t1"));
    topic
        .partitions
        .push(OffsetDeleteRequestPartition::default());
    req2.topics.push(topic);
    assert_eq!(
        co.offset_delete(req2, 0).await.topics[0].partitions[0].error_code,
        NONE
    );
    let resp = co.delete_groups(req, 2).await;
    let codes: Vec<i16> = resp.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, vec![NONE, GROUP_ID_NOT_FOUND, GROUP_ID_NOT_FOUND]);
    assert!(list(&[], &[], 5).await.is_empty());
    assert_eq!(describe(&co, GROUP, 5).await.group_state.as_str(), "Dead");
}

#[tokio::test]
async fn static_members_are_fenced_by_their_replacement() {
    let co = coordinator(Duration::ZERO);
    let p = protocols(&["range"], &["t1"]);
    let mut req = join_req("", &p);
    req.group_instance_id = Some(s("instance-1"));
    // A static member gets its id at once: no MEMBER_ID_REQUIRED round.
    let first = joined(&co.join_group(req.clone(), 9, "c", "/h").await);
    assert!(first.member_id.starts_with("instance-1-"));
    assert_eq!(sync(&co, &first).await.error_code, NONE);

    // The instance restarts and joins with an empty member id: the old id is fenced.
    let second = joined(&co.join_group(req, 9, "c", "/h").await);
    assert_ne!(second.member_id, first.member_id);
    assert_eq!(second.generation, first.generation + 1);
    let mut hb = HeartbeatRequest::default();
    hb.group_id = GroupId(s(GROUP));
    hb.member_id = s(&first.member_id);
    hb.generation_id = second.generation;
    hb.group_instance_id = Some(s("instance-1"));
    assert_eq!(co.heartbeat(hb, 4).await.error_code, FENCED_INSTANCE_ID);

    // Leaving by instance id, as admin tools do (no member id).
    let mut leave = LeaveGroupRequest::default();
    leave.group_id = GroupId(s(GROUP));
    let mut id = MemberIdentity::default();
    id.group_instance_id = Some(s("instance-1"));
    leave.members = vec![id];
    let resp = co.leave_group(leave, 5).await;
    assert_eq!(resp.members[0].error_code, NONE);
    assert_eq!(describe(&co, GROUP, 5).await.group_state.as_str(), "Empty");
}

/// Every response the coordinator builds encodes at every version of its message.
#[tokio::test]
async fn responses_encode_at_every_version() {
    fn check<M: Encodable + Message + std::fmt::Debug>(resp: &M, version: i16) {
        let mut buf = BytesMut::new();
        resp.encode(&mut buf, version)
            .unwrap_or_else(|e| panic!("v{version} {resp:?}: {e}"));
    }
    let co = coordinator(Duration::ZERO);
    let p = protocols(&["range"], &["t1"]);
    let all = |_: &str, _: i32| true;
    for v in JoinGroupRequest::VERSIONS.min..=JoinGroupRequest::VERSIONS.max {
        let mut req = join_req("", &p);
        req.group_id = GroupId(s(&format!("enc-{v}")));
        let resp = co.join_group(req.clone(), v, "c", "/h").await;
        check(&resp, v);
        let resp = if resp.error_code == MEMBER_ID_REQUIRED {
            req.member_id = resp.member_id.clone();
            co.join_group(req.clone(), v, "c", "/h").await
        } else {
            resp
        };
        assert_eq!(resp.error_code, NONE);
        check(&resp, v);
        req.group_id = GroupId(s(""));
        check(&co.join_group(req, v, "c", "/h").await, v);
    }
    let a = join_new(&co, "a", &p).await;
    for v in SyncGroupRequest::VERSIONS.min..=SyncGroupRequest::VERSIONS.max {
        check(&sync(&co, &a).await, v);
        check(&co.sync_group(sync_req("ghost", 1, &[]), v).await, v);
    }
    for v in HeartbeatRequest::VERSIONS.min..=HeartbeatRequest::VERSIONS.max {
        let mut req = HeartbeatRequest::default();
        req.group_id = GroupId(s(GROUP));
        req.member_id = s(&a.member_id);
        req.generation_id = 99;
        check(&co.heartbeat(req, v).await, v);
    }
    for v in OffsetCommitRequest::VERSIONS.min..=OffsetCommitRequest::VERSIONS.max {
        let resp = co
            .offset_commit(
                commit_req(GROUP, &a.member_id, a.generation, &[("t1", 0, 1)]),
                v,
                &all,
            )
            .await;
        assert_eq!(resp.topics[0].partitions[0].error_code, NONE);
        check(&resp, v);
    }
    for v in OffsetFetchRequest::VERSIONS.min..=OffsetFetchRequest::VERSIONS.max {
        check(&co.offset_fetch(fetch_req(GROUP, None, v), v).await, v);
        check(
            &co.offset_fetch(fetch_req(GROUP, Some(&[("t1", &[0, 1])]), v), v)
                .await,
            v,
        );
    }
    for v in DescribeGroupsRequest::VERSIONS.min..=DescribeGroupsRequest::VERSIONS.max {
        let mut req = DescribeGroupsRequest::default();
        req.groups = vec![GroupId(s(GROUP)), GroupId(s("missing"))];
        req.include_authorized_operations = v >= 3;
        check(&co.describe_groups(req, v).await, v);
    }
    for v in ListGroupsRequest::VERSIONS.min..=ListGroupsRequest::VERSIONS.max {
        check(&co.list_groups(ListGroupsRequest::default(), v).await, v);
    }
    for v in OffsetDeleteRequest::VERSIONS.min..=OffsetDeleteRequest::VERSIONS.max {
        let mut req = OffsetDeleteRequest::default();
        req.group_id = GroupId(s(GROUP));
        let mut t = OffsetDeleteRequestTopic::default();
        t.name = TopicName(s("t1"));
        t.partitions.push(OffsetDeleteRequestPartition::default());
        req.topics.push(t);
        check(&co.offset_delete(req, v).await, v);
    }
    for v in LeaveGroupRequest::VERSIONS.min..=LeaveGroupRequest::VERSIONS.max {
        let mut req = LeaveGroupRequest::default();
        req.group_id = GroupId(s(GROUP));
        if v >= 3 {
            let mut id = MemberIdentity::default();
            id.member_id = s("ghost");
            req.members = vec![id];
        } else {
            req.member_id = s("ghost");
        }
        check(&co.leave_group(req, v).await, v);
    }
    for v in DeleteGroupsRequest::VERSIONS.min..=DeleteGroupsRequest::VERSIONS.max {
        let mut req = DeleteGroupsRequest::default();
        req.groups_names = vec![GroupId(s(GROUP)), GroupId(s("missing"))];
        check(&co.delete_groups(req, v).await, v);
    }
}

/// The API layer runs these futures on a multi-threaded runtime.
#[allow(dead_code)]
fn futures_are_send(co: &GroupCoordinator) {
    fn send<T: Send>(_: T) {}
    let exists = |_: &str, _: i32| true;
    send(co.join_group(JoinGroupRequest::default(), 9, "c", "h"));
    send(co.sync_group(SyncGroupRequest::default(), 5));
    send(co.heartbeat(HeartbeatRequest::default(), 4));
    send(co.leave_group(LeaveGroupRequest::default(), 5));
    send(co.offset_commit(OffsetCommitRequest::default(), 9, &exists));
    send(co.offset_fetch(OffsetFetchRequest::default(), 9));
    send(co.describe_groups(DescribeGroupsRequest::default(), 6));
    send(co.list_groups(ListGroupsRequest::default(), 5));
    send(co.delete_groups(DeleteGroupsRequest::default(), 2));
    send(co.offset_delete(OffsetDeleteRequest::default(), 0));
}

#[tokio::test(start_paused = true)]
async fn failed_joins_and_pending_members_that_never_return_leave_no_group_behind() {
    let co = coordinator(Duration::ZERO);
    let names = |co: Arc<GroupCoordinator>| async move {
        let resp = co.list_groups(ListGroupsRequest::default(), 5).await;
        resp.groups
            .iter()
            .map(|g| g.group_id.to_string())
            .collect::<Vec<_>>()
    };
    let resp = co.join_group(join_req("", &[]), 9, "c", "/h").await;
    assert_eq!(resp.error_code, INCONSISTENT_GROUP_PROTOCOL);
    assert!(names(Arc::clone(&co)).await.is_empty());

    let p = protocols(&["range"], &["t1"]);
    let first = co.join_group(join_req("", &p), 9, "c", "/h").await;
    assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
    assert_eq!(names(Arc::clone(&co)).await, vec![GROUP.to_string()]);
    // The pending member id lives as long as a session.
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert!(names(Arc::clone(&co)).await.is_empty());
    let resp = co
        .join_group(join_req(&first.member_id, &p), 9, "c", "/h")
        .await;
    assert_eq!(resp.error_code, UNKNOWN_MEMBER_ID);
}

// ---- coordinators moving between brokers ----

fn everything_elsewhere() -> super::Ownership {
    Arc::new(|_: &str| false)
}

fn everything_here() -> super::Ownership {
    Arc::new(|_: &str| true)
}

/// The group's state as the store holds it.
async fn stored(meta: &Arc<dyn GroupStore>) -> Option<GroupSnapshot> {
    meta.load_group_state(GROUP)
        .await
        .expect("load")
        .map(|data| GroupSnapshot::decode(&data).expect("stored state decodes"))
}

fn list_req(states: &[&str]) -> ListGroupsRequest {
    let mut req = ListGroupsRequest::default();
    req.states_filter = states.iter().map(|st| s(st)).collect();
    req
}

/// (group, protocol type, state) of every listed group.
async fn listed(co: &GroupCoordinator) -> Vec<(String, String, String)> {
    let resp = co.list_groups(list_req(&[]), 5).await;
    assert_eq!(resp.error_code, NONE);
    resp.groups
        .iter()
        .map(|g| {
            (
                g.group_id.to_string(),
                g.protocol_type.to_string(),
                g.group_state.to_string(),
            )
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_stable_group_moves_to_another_coordinator_without_a_rebalance() {
    let meta = store();
    let first = GroupCoordinator::new(Arc::clone(&meta), config());
    let (a, b) = sequential_pair(&first).await;
    assert_eq!(a.generation, 2);
    // Stored when the leader's SyncGroup made generation 2 Stable.
    let s2 = stored(&meta).await.expect("stored");
    assert_eq!((s2.state, s2.generation), (StoredState::Stable, 2));
    assert_eq!(s2.leader.as_deref(), Some(a.member_id.as_str()));
    assert_eq!(s2.members.len(), 2);

    // The group moves: the first coordinator gives it up.
    first.set_ownership(everything_elsewhere());
    assert_eq!(heartbeat(&first, &a.member_id, 2).await, NOT_COORDINATOR);

    // Nine seconds later (sessions are 10 s) the members find the new coordinator, which loads
    // the group: Stable, listed as such before any member calls in.
    tokio::time::sleep(Duration::from_secs(9)).await;
    let second = GroupCoordinator::new(Arc::clone(&meta), config());
    assert_eq!(
        listed(&second).await,
        vec![(
            GROUP.to_string(),
            "consumer".to_string(),
            "Stable".to_string()
        )]
    );
    assert_eq!(heartbeat(&second, &a.member_id, 2).await, NONE);
    // Six more seconds: b was last heard 15 s ago by the first coordinator, but its session
    // restarted when the group was loaded.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(heartbeat(&second, &b.member_id, 2).await, NONE);
    assert_eq!(heartbeat(&second, &a.member_id, 2).await, NONE);
    // SyncGroup of generation 2 answers each member its assignment.
    for m in [&a, &b] {
        let resp = second.sync_group(sync_req(&m.member_id, 2, &[]), 5).await;
        assert_eq!(resp.error_code, NONE);
        assert_eq!(resp.assignment, assigned(m));
        assert_eq!(resp.protocol_name.as_deref(), Some("range"));
        assert_eq!(resp.protocol_type.as_deref(), Some("consumer"));
    }
    let d = describe(&second, GROUP, 5).await;
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(d.protocol_data.as_str(), "range");
    let mut members: Vec<(String, Bytes)> = d
        .members
        .iter()
        .map(|m| (m.member_id.to_string(), m.member_assignment.clone()))
        .collect();
    members.sort();
    let mut expected = vec![
        (a.member_id.clone(), assigned(&a)),
        (b.member_id.clone(), assigned(&b)),
    ];
    expected.sort();
    assert_eq!(members, expected);
    // Commits of generation 2 are taken.
    let all = |_: &str, _: i32| true;
    let resp = second
        .offset_commit(commit_req(GROUP, &b.member_id, 2, &[("t1", 0, 7)]), 8, &all)
        .await;
    assert_eq!(resp.topics[0].partitions[0].error_code, NONE);
    // A follower rejoining with the same protocols gets generation 2 back: no rebalance.
    let p = protocols(&["range"], &["t1"]);
    let again = rejoin(&second, &b.member_id, &p).await;
    assert_eq!(again.generation, 2);
    assert_eq!(heartbeat(&second, &a.member_id, 2).await, NONE);

    // b never calls again: its session runs out and the group rebalances without it.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(heartbeat(&second, &a.member_id, 2).await, NONE);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        heartbeat(&second, &a.member_id, 2).await,
        REBALANCE_IN_PROGRESS
    );
    let a3 = rejoin(&second, &a.member_id, &p).await;
    assert_eq!(a3.generation, 3);
    assert_eq!(a3.members, vec![a.member_id.clone()]);
    assert_eq!(sync(&second, &a3).await.error_code, NONE);
    let s3 = stored(&meta).await.expect("stored");
    assert_eq!((s3.state, s3.generation), (StoredState::Stable, 3));
    assert_eq!(s3.members.len(), 1);
}

#[tokio::test]
async fn requests_for_a_group_coordinated_elsewhere_get_not_coordinator() {
    let meta = store();
    let co = GroupCoordinator::new(Arc::clone(&meta), config());
    let all = |_: &str, _: i32| true;
    // Offsets of an owned group and of GROUP, committed while this broker still had both.
    for group in [GROUP, "mine"] {
        let resp = co
            .offset_commit(commit_req(group, "", -1, &[("t1", 0, 1)]), 8, &all)
            .await;
        assert_eq!(resp.topics[0].partitions[0].error_code, NONE);
    }
    co.set_ownership(Arc::new(|g: &str| g != GROUP));
    let p = protocols(&["range"], &["t1"]);

    let resp = co.join_group(join_req("", &p), 9, "c", "/h").await;
    assert_eq!(resp.error_code, NOT_COORDINATOR);
    let resp = co.join_group(join_req("m-1", &p), 5, "c", "/h").await;
    assert_eq!(resp.error_code, NOT_COORDINATOR);
    let resp = co.sync_group(sync_req("m-1", 1, &[]), 5).await;
    assert_eq!(resp.error_code, NOT_COORDINATOR);
    assert_eq!(heartbeat(&co, "m-1", 1).await, NOT_COORDINATOR);
    // LeaveGroup: at the top, whatever the version.
    for version in [1i16, 3, 5] {
        let mut req = LeaveGroupRequest::default();
        req.group_id = GroupId(s(GROUP));
        req.member_id = s("m-1");
        let mut id = MemberIdentity::default();
        id.member_id = s("m-1");
        req.members = vec![id];
        let resp = co.leave_group(req, version).await;
        assert_eq!(resp.error_code, NOT_COORDINATOR, "v{version}");
        assert!(resp.members.is_empty());
    }
    // OffsetCommit: every partition, even one of an unknown topic; nothing is committed.
    let exists = |topic: &str, _: i32| topic == "t1";
    let resp = co
        .offset_commit(
            commit_req(GROUP, "", -1, &[("t1", 0, 5), ("nope", 0, 5)]),
            8,
            &exists,
        )
        .await;
    let codes: Vec<i16> = resp
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect();
    assert_eq!(codes, vec![NOT_COORDINATOR, NOT_COORDINATOR]);
    assert_eq!(meta.fetch_offsets(GROUP).await.expect("fetch")[0].offset, 1);
    // OffsetFetch: per partition in v1, for the group from v2.
    let resp = co
        .offset_fetch(fetch_req(GROUP, Some(&[("t1", &[0])]), 1), 1)
        .await;
    assert_eq!(fetched(&resp, 1)[0].5, NOT_COORDINATOR);
    assert_eq!(fetched(&resp, 1)[0].2, -1);
    for version in [2i16, 7] {
        let resp = co
            .offset_fetch(fetch_req(GROUP, None, version), version)
            .await;
        assert_eq!(resp.error_code, NOT_COORDINATOR, "v{version}");
        assert!(fetched(&resp, version).is_empty());
    }
    let resp = co.offset_fetch(fetch_req(GROUP, None, 8), 8).await;
    assert_eq!(resp.groups[0].error_code, NOT_COORDINATOR);
    let resp = co.offset_fetch(fetch_req("mine", None, 8), 8).await;
    assert_eq!(resp.groups[0].error_code, NONE);
    assert_eq!(fetched(&resp, 8)[0].2, 1);
    // DescribeGroups and DeleteGroups: per group.
    let mut req = DescribeGroupsRequest::default();
    req.groups = vec![GroupId(s(GROUP)), GroupId(s("mine"))];
    let resp = co.describe_groups(req, 5).await;
    let codes: Vec<(String, i16)> = resp
        .groups
        .iter()
        .map(|g| (g.group_id.to_string(), g.error_code))
        .collect();
    assert_eq!(
        codes,
        vec![(GROUP.into(), NOT_COORDINATOR), ("mine".into(), NONE)]
    );
    assert_eq!(resp.groups[1].group_state.as_str(), "Empty");
    let mut req = DeleteGroupsRequest::default();
    req.groups_names = vec![GroupId(s(GROUP))];
    let resp = co.delete_groups(req, 2).await;
    assert_eq!(resp.results[0].error_code, NOT_COORDINATOR);
    assert!(!meta.fetch_offsets(GROUP).await.expect("fetch").is_empty());
    // OffsetDelete: at the top.
    let mut req = OffsetDeleteRequest::default();
    req.group_id = GroupId(s(GROUP));
    let mut t = OffsetDeleteRequestTopic::default();
    t.name = TopicName(s("t1"));
    let mut part = OffsetDeleteRequestPartition::default();
    part.partition_index = 0;
    t.partitions.push(part);
    req.topics.push(t);
    let resp = co.offset_delete(req, 0).await;
    assert_eq!(resp.error_code, NOT_COORDINATOR);
    assert!(resp.topics.is_empty());
    assert!(!meta.fetch_offsets(GROUP).await.expect("fetch").is_empty());
    // ListGroups: only the groups coordinated here.
    assert_eq!(
        listed(&co).await,
        vec![("mine".to_string(), String::new(), "Empty".to_string())]
    );

    // Given back, the group is served again.
    co.set_ownership(everything_here());
    let j = join_new(&co, "c", &p).await;
    assert_eq!(j.generation, 1);
}

#[tokio::test(start_paused = true)]
async fn giving_a_group_up_answers_its_parked_requests_not_coordinator_and_writes_nothing() {
    let meta = store();
    let co = GroupCoordinator::new(
        Arc::clone(&meta),
        GroupConfig {
            initial_rebalance_delay: Duration::from_millis(500),
            ..config()
        },
    );
    let p = protocols(&["range"], &["t1"]);

    // A JoinGroup parked in the initial delay of a new group.
    let first = co.join_group(join_req("", &p), 9, "a", "/h").await;
    assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
    let parked = {
        let co = Arc::clone(&co);
        let req = join_req(&first.member_id, &p);
        tokio::spawn(async move { co.join_group(req, 9, "a", "/h").await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!parked.is_finished());
    co.set_ownership(everything_elsewhere());
    let resp = parked.await.expect("join");
    assert_eq!(resp.error_code, NOT_COORDINATOR);
    assert_eq!(stored(&meta).await, None);

    // A follower's SyncGroup parked until the leader's; meanwhile generation 1 is stored.
    co.set_ownership(everything_here());
    let (a, b) = two_stable_members(&co).await;
    assert_eq!(stored(&meta).await.map(|s| s.generation), Some(1));
    let (leader, follower) = if a.is_leader() { (a, b) } else { (b, a) };
    let c = {
        let co = Arc::clone(&co);
        let p = p.clone();
        tokio::spawn(async move {
            let first = co.join_group(join_req("", &p), 9, "c", "/h").await;
            co.join_group(join_req(&first.member_id, &p), 9, "c", "/h")
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let leader = rejoin(&co, &leader.member_id, &p);
    let follower_join = rejoin(&co, &follower.member_id, &p);
    let (leader, follower) = tokio::join!(leader, follower_join);
    assert_eq!(leader.generation, 2);
    let parked_sync = {
        let co = Arc::clone(&co);
        let follower = follower.clone();
        tokio::spawn(async move { sync(&co, &follower).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!parked_sync.is_finished());
    co.set_ownership(everything_elsewhere());
    assert_eq!(parked_sync.await.expect("sync").error_code, NOT_COORDINATOR);
    assert_eq!(c.await.expect("c joins").error_code, NONE);
    // Generation 2 never became Stable here, and giving the group up wrote nothing.
    let s1 = stored(&meta).await.expect("stored");
    assert_eq!((s1.state, s1.generation), (StoredState::Stable, 1));
    assert_eq!(s1.members.len(), 2);
    assert_eq!(
        meta.group_state_ids().await.expect("ids"),
        vec![GROUP.to_string()]
    );
}

#[tokio::test]
async fn an_empty_group_keeps_its_generation_and_delete_groups_deletes_its_state() {
    let meta = store();
    let first = GroupCoordinator::new(Arc::clone(&meta), config());
    let (a, b) = sequential_pair(&first).await;
    let mut req = LeaveGroupRequest::default();
    req.group_id = GroupId(s(GROUP));
    req.members = [&a.member_id, &b.member_id]
        .iter()
        .map(|m| {
            let mut id = MemberIdentity::default();
            id.member_id = s(m);
            id
        })
        .collect();
    assert_eq!(first.leave_group(req, 5).await.error_code, NONE);
    let s3 = stored(&meta).await.expect("stored");
    assert_eq!((s3.state, s3.generation), (StoredState::Empty, 3));
    assert_eq!(s3.protocol_type.as_deref(), Some("consumer"));
    first.set_ownership(everything_elsewhere());

    // Another coordinator knows the group as Empty, of the consumer protocol.
    let second = GroupCoordinator::new(Arc::clone(&meta), config());
    let d = describe(&second, GROUP, 5).await;
    assert_eq!(d.group_state.as_str(), "Empty");
    assert_eq!(d.protocol_type.as_str(), "consumer");
    // Its next generation follows the stored one.
    let p = protocols(&["range"], &["t1"]);
    let c = join_new(&second, "c", &p).await;
    assert_eq!(c.generation, 4);
    assert_eq!(sync(&second, &c).await.error_code, NONE);
    let mut req = LeaveGroupRequest::default();
    req.group_id = GroupId(s(GROUP));
    req.member_id = s(&c.member_id);
    assert_eq!(second.leave_group(req, 1).await.error_code, NONE);
    assert_eq!(stored(&meta).await.map(|s| s.generation), Some(5));

    // DeleteGroups deletes the state with the offsets.
    let mut req = DeleteGroupsRequest::default();
    req.groups_names = vec![GroupId(s(GROUP))];
    let resp = second.delete_groups(req.clone(), 2).await;
    assert_eq!(resp.results[0].error_code, NONE);
    assert_eq!(stored(&meta).await, None);
    assert!(meta.group_state_ids().await.expect("ids").is_empty());
    assert_eq!(
        second.delete_groups(req, 2).await.results[0].error_code,
        GROUP_ID_NOT_FOUND
    );
    let third = GroupCoordinator::new(Arc::clone(&meta), config());
    assert!(listed(&third).await.is_empty());
    let d = join_new(&third, "d", &p).await;
    assert_eq!(d.generation, 1);
}

#[tokio::test]
async fn a_stored_state_this_broker_cannot_read_is_ignored_and_offsets_stay() {
    let meta = store();
    // A state from a newer broker (unknown version), and the group's offsets.
    meta.save_group_state(GROUP, vec![200, 1, 2, 3])
        .await
        .expect("save");
    let co = GroupCoordinator::new(Arc::clone(&meta), config());
    let all = |_: &str, _: i32| true;
    let resp = co
        .offset_commit(commit_req(GROUP, "", -1, &[("t1", 0, 42)]), 8, &all)
        .await;
    assert_eq!(resp.topics[0].partitions[0].error_code, NONE);
    assert_eq!(describe(&co, GROUP, 5).await.group_state.as_str(), "Empty");
    // The group starts over; its offsets are intact.
    let p = protocols(&["range"], &["t1"]);
    let a = join_new(&co, "a", &p).await;
    assert_eq!(a.generation, 1);
    assert_eq!(sync(&co, &a).await.error_code, NONE);
    let resp = co.offset_fetch(fetch_req(GROUP, None, 8), 8).await;
    assert_eq!(fetched(&resp, 8)[0].2, 42);
    // Its first Stable generation replaces the unreadable state.
    let s1 = stored(&meta).await.expect("stored");
    assert_eq!((s1.state, s1.generation), (StoredState::Stable, 1));
}

#[tokio::test(start_paused = true)]
async fn a_group_emptied_by_the_timer_is_stored_empty() {
    let meta = store();
    let co = GroupCoordinator::new(Arc::clone(&meta), config());
    let (a, _) = sequential_pair(&co).await;
    // Nobody calls in: both sessions (10 s) run out, then the join phase (5 s) ends empty; only
    // the timer task sees it, and stores the state in the background.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(co.store_states().await);
    let s = stored(&meta).await.expect("stored");
    assert_eq!((s.state, s.generation), (StoredState::Empty, 3));
    assert!(s.members.is_empty());
    assert_eq!(heartbeat(&co, &a.member_id, 2).await, UNKNOWN_MEMBER_ID);
}

/// Two brokers, each with its own connections to one PostgreSQL database: the group moves from
/// one to the other and its members carry on at their generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stable_group_moves_between_brokers_on_postgresql() {
    let server = weir_meta::testing::PgServer::shared().expect("start PostgreSQL");
    let url = server.create_database().await.expect("create database");
    let connect = || async {
        let m: Arc<dyn GroupStore> = Arc::new(
            weir_meta::PostgresMetaStore::connect(&url)
                .await
                .expect("connect"),
        );
        m
    };
    let (meta_a, meta_b) = (connect().await, connect().await);
    let first = GroupCoordinator::new(meta_a, config());
    // a alone at generation 1, then b joins and a rejoins: generation 2 (in real time, so b's
    // join is waited for rather than slept for).
    let p = protocols(&["range"], &["t1"]);
    let a = join_new(&first, "a", &p).await;
    assert_eq!(sync(&first, &a).await.error_code, NONE);
    let b = {
        let co = Arc::clone(&first);
        let p = p.clone();
        tokio::spawn(async move { join_new(&co, "b", &p).await })
    };
    while describe(&first, GROUP, 5).await.group_state.as_str() != "PreparingRebalance" {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let a = rejoin(&first, &a.member_id, &p).await;
    let b = b.await.expect("b joins");
    assert_eq!((a.generation, b.generation), (2, 2));
    let follower = {
        let co = Arc::clone(&first);
        let b = b.clone();
        tokio::spawn(async move { sync(&co, &b).await })
    };
    assert_eq!(sync(&first, &a).await.error_code, NONE);
    assert_eq!(follower.await.expect("b syncs").error_code, NONE);
    let all = |_: &str, _: i32| true;
    let resp = first
        .offset_commit(commit_req(GROUP, &a.member_id, 2, &[("t1", 0, 9)]), 8, &all)
        .await;
    assert_eq!(resp.topics[0].partitions[0].error_code, NONE);
    first.set_ownership(everything_elsewhere());

    let second = GroupCoordinator::new(Arc::clone(&meta_b), config());
    for m in [&a, &b] {
        assert_eq!(heartbeat(&second, &m.member_id, 2).await, NONE);
        let resp = second.sync_group(sync_req(&m.member_id, 2, &[]), 5).await;
        assert_eq!(resp.error_code, NONE);
        assert_eq!(resp.assignment, assigned(m));
    }
    let resp = second.offset_fetch(fetch_req(GROUP, None, 8), 8).await;
    assert_eq!(fetched(&resp, 8)[0].2, 9);
    assert_eq!(heartbeat(&first, &a.member_id, 2).await, NOT_COORDINATOR);
}

/// A group store that is down (PostgreSQL restarting): every call fails.
struct DownStore;

fn down() -> weir_meta::MetaError {
    weir_meta::MetaError::Backend {
        context: "test",
        source: "the metadata store is down".into(),
    }
}

#[async_trait::async_trait]
impl weir_meta::GroupOffsets for DownStore {
    async fn commit_offsets(
        &self,
        _: &str,
        _: Vec<weir_meta::GroupOffset>,
    ) -> weir_meta::Result<()> {
        Err(down())
    }
    async fn fetch_offsets(&self, _: &str) -> weir_meta::Result<Vec<weir_meta::GroupOffset>> {
        Err(down())
    }
    async fn delete_offsets(
        &self,
        _: &str,
        _: Option<Vec<(String, u32)>>,
    ) -> weir_meta::Result<()> {
        Err(down())
    }
    async fn offset_groups(&self) -> weir_meta::Result<Vec<String>> {
        Err(down())
    }
}

#[async_trait::async_trait]
impl weir_meta::GroupStates for DownStore {
    async fn save_group_state(&self, _: &str, _: Vec<u8>) -> weir_meta::Result<()> {
        Err(down())
    }
    async fn load_group_state(&self, _: &str) -> weir_meta::Result<Option<Vec<u8>>> {
        Err(down())
    }
    async fn delete_group_state(&self, _: &str) -> weir_meta::Result<()> {
        Err(down())
    }
    async fn group_state_ids(&self) -> weir_meta::Result<Vec<String>> {
        Err(down())
    }
}

/// OffsetFetch while the store is down answers COORDINATOR_LOAD_IN_PROGRESS, which every client
/// retries. NOT_COORDINATOR sends librdkafka to look for the coordinator without fetching again,
/// and its consumer then leaves those partitions unfetched until the next rebalance (seen by
/// the chaos suite after a PostgreSQL restart: 40 s without a record).
#[tokio::test]
async fn offset_fetch_while_the_store_is_down_is_retried_by_clients() {
    let co = GroupCoordinator::new(Arc::new(DownStore), config());
    let load = kafka_protocol::error::ResponseError::CoordinatorLoadInProgress.code();
    let resp = co
        .offset_fetch(fetch_req(GROUP, Some(&[("t1", &[0])]), 1), 1)
        .await;
    assert_eq!(fetched(&resp, 1)[0].5, load);
    for version in [2i16, 7, 8] {
        let resp = co
            .offset_fetch(fetch_req(GROUP, None, version), version)
            .await;
        let code = if version >= 8 {
            resp.groups[0].error_code
        } else {
            resp.error_code
        };
        assert_eq!(code, load, "v{version}");
    }
}

/// `group.classic.max.size`: a new member beyond it (pending members count) is refused
/// GROUP_MAX_SIZE_REACHED, without a rebalance; the members in are untouched.
#[tokio::test]
async fn a_classic_group_takes_no_more_than_its_max_size() {
    let co = GroupCoordinator::new(
        store(),
        GroupConfig {
            classic_max_size: 2,
            initial_rebalance_delay: Duration::from_millis(500),
            ..config()
        },
    );
    let (a, _b) = two_stable_members(&co).await;
    let p = protocols(&["range"], &["t1"]);
    let third = co.join_group(join_req("", &p), 9, "c", "/10.0.0.1").await;
    assert_eq!(third.error_code, GROUP_MAX_SIZE_REACHED);
    assert_eq!(describe(&co, GROUP, 5).await.group_state.as_str(), "Stable");
    assert_eq!(heartbeat(&co, &a.member_id, 1).await, NONE);
}
