//! What crosses the parts: the streams a topic creates are the object index's, deleting a topic
//! reaches into every part, and ACL and client quota changes are announced as cluster changes.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{commit, range};
use crate::{AclBinding, GroupOffset, MetaError, MetaStore};

/// Runs every check, each against a fresh, empty store from `open`.
pub async fn run(open: impl Fn() -> Box<dyn MetaStore>) {
    topic_streams_are_streams(&*open()).await;
    deleting_a_topic_reaches_every_part(&*open()).await;
    group_states_and_offsets_are_apart(&*open()).await;
    acl_changes_are_announced(&*open()).await;
    quota_changes_are_announced(&*open()).await;
}

pub async fn topic_streams_are_streams(m: &dyn MetaStore) {
    let t = m
        .create_topic("a", [1; 16], 2, BTreeMap::new())
        .await
        .expect("create");
    for &s in &t.streams {
        let meta = m.get_stream(s).await.expect("get").expect("stream exists");
        assert_eq!((meta.epoch, meta.start_offset, meta.end_offset), (0, 0, 0));
    }
    let s = t.streams[0];
    m.open_stream(s, 1).await.expect("open");
    commit(m, vec![range(s, 1, 0, 10)]).await.expect("commit");
    // Growing the topic leaves existing streams as they are.
    let t = m.add_partitions("a", 3).await.expect("grow");
    assert_eq!(t.streams[0], s);
    assert_eq!(
        m.get_stream(s).await.expect("get").map(|m| m.end_offset),
        Some(10)
    );
}

pub async fn deleting_a_topic_reaches_every_part(m: &dyn MetaStore) {
    let a = m
        .create_topic("a", [1; 16], 1, BTreeMap::new())
        .await
        .expect("create");
    let b = m
        .create_topic("b", [2; 16], 1, BTreeMap::new())
        .await
        .expect("create");
    let (sa, sb) = (a.streams[0], b.streams[0]);
    m.open_stream(sa, 5).await.expect("open");
    m.open_stream(sb, 1).await.expect("open");
    let own = commit(m, vec![range(sa, 5, 0, 10)]).await.expect("commit");
    let shared = commit(m, vec![range(sa, 5, 10, 20), range(sb, 1, 0, 10)])
        .await
        .expect("commit");
    m.save_producer_snapshot(sa, 20, vec![1])
        .await
        .expect("save");
    m.save_producer_snapshot(sb, 10, vec![2])
        .await
        .expect("save");
    let o = |topic: &str| GroupOffset {
        topic: topic.to_string(),
        partition: 0,
        offset: 3,
        leader_epoch: -1,
        metadata: None,
        commit_ms: 1,
    };
    m.commit_offsets("g", vec![o("a"), o("b")])
        .await
        .expect("commit offsets");
    m.save_group_state("g", vec![7]).await.expect("save state");
    for t in ["a", "b"] {
        m.claim_share_state("s", t, 0, 1, 0).await.expect("claim");
    }

    m.delete_topic("a").await.expect("delete");
    assert_eq!(m.get_stream(sa).await.expect("get"), None);
    assert!(m.ranges(sa, 0, 10).await.expect("ranges").is_empty());
    // Its own object is unreferenced; the shared one still holds b's data.
    let gone: Vec<u64> = m
        .deletable_objects(Duration::ZERO, Duration::from_secs(3600))
        .await
        .expect("deletable")
        .iter()
        .map(|o| o.object_id)
        .collect();
    assert_eq!(gone, vec![own]);
    assert_eq!(
        m.ranges(sb, 0, 10).await.expect("ranges")[0].object_id,
        shared
    );
    assert_eq!(m.load_producer_snapshot(sa).await.expect("load"), None);
    assert_eq!(
        m.load_producer_snapshot(sb).await.expect("load"),
        Some((10, vec![2]))
    );
    assert_eq!(m.fetch_offsets("g").await.expect("fetch"), vec![o("b")]);
    let share: Vec<String> = m
        .share_states("s")
        .await
        .expect("share states")
        .into_iter()
        .map(|(t, _, _)| t)
        .collect();
    assert_eq!(share, vec!["b".to_string()], "a's share state went with it");
    // A group's membership names no topic the store knows of: it stays.
    assert_eq!(m.load_group_state("g").await.expect("load"), Some(vec![7]));
    // The deleted stream cannot come back, at its old epoch or a lower one, nor take commits.
    for epoch in [1, 5, 6] {
        assert!(matches!(
            m.open_stream(sa, epoch).await,
            Err(MetaError::UnknownStream(s)) if s == sa
        ));
    }
    assert_eq!(m.get_stream(sa).await.expect("get"), None);
    assert!(matches!(
        commit(m, vec![range(sa, 5, 20, 30)]).await,
        Err(MetaError::UnknownStream(_))
    ));
    // Deleting the other topic frees the shared object too.
    m.delete_topic("b").await.expect("delete");
    let mut gone: Vec<u64> = m
        .deletable_objects(Duration::ZERO, Duration::from_secs(3600))
        .await
        .expect("deletable")
        .iter()
        .map(|o| o.object_id)
        .collect();
    gone.sort();
    assert_eq!(gone, vec![own, shared]);
}

/// A group's committed offsets and its membership are deleted each on their own (DeleteGroups
/// deletes both, OffsetDelete only offsets).
pub async fn group_states_and_offsets_are_apart(m: &dyn MetaStore) {
    let o = GroupOffset {
        topic: "t".to_string(),
        partition: 0,
        offset: 1,
        leader_epoch: -1,
        metadata: None,
        commit_ms: 1,
    };
    m.commit_offsets("g", vec![o.clone()])
        .await
        .expect("commit");
    m.save_group_state("g", vec![1]).await.expect("save");
    m.delete_offsets("g", None).await.expect("delete offsets");
    assert_eq!(m.load_group_state("g").await.expect("load"), Some(vec![1]));
    m.commit_offsets("g", vec![o.clone()])
        .await
        .expect("commit");
    m.delete_group_state("g").await.expect("delete state");
    assert_eq!(m.fetch_offsets("g").await.expect("fetch"), vec![o]);
    assert!(m.group_state_ids().await.expect("ids").is_empty());
    assert_eq!(
        m.offset_groups().await.expect("groups"),
        vec!["g".to_string()]
    );
}

/// Creating and deleting ACLs move the cluster's change counter, so that every broker re-reads
/// them.
pub async fn acl_changes_are_announced(m: &dyn MetaStore) {
    let binding = AclBinding {
        resource_type: 2,
        resource_name: "t".to_string(),
        pattern_type: 3,
        principal: "User:alice".to_string(),
        host: "*".to_string(),
        operation: 3,
        permission_type: 3,
    };
    let mut rx = m.cluster_changes();
    rx.borrow_and_update();
    m.create_acls(vec![binding.clone()]).await.expect("create");
    assert!(
        rx.has_changed().expect("open"),
        "creating ACLs is announced"
    );
    rx.borrow_and_update();
    assert_eq!(m.delete_acls(vec![binding]).await.expect("delete"), 1);
    assert!(
        rx.has_changed().expect("open"),
        "deleting ACLs is announced"
    );
}

/// Setting and removing client quotas move the cluster's change counter, so that every broker
/// re-reads them.
pub async fn quota_changes_are_announced(m: &dyn MetaStore) {
    let entity = "user=alice".to_string();
    let key = "producer_byte_rate".to_string();
    let mut rx = m.cluster_changes();
    rx.borrow_and_update();
    m.alter_client_quotas(vec![(entity.clone(), key.clone(), Some(1024.0))])
        .await
        .expect("set");
    assert!(
        rx.has_changed().expect("open"),
        "setting a quota is announced"
    );
    rx.borrow_and_update();
    m.alter_client_quotas(vec![(entity.clone(), key.clone(), Some(2048.0))])
        .await
        .expect("replace");
    assert!(
        rx.has_changed().expect("open"),
        "replacing a quota's value is announced"
    );
    rx.borrow_and_update();
    m.alter_client_quotas(vec![(entity, key, None)])
        .await
        .expect("remove");
    assert!(
        rx.has_changed().expect("open"),
        "removing a quota is announced"
    );
}
