use super::*;

fn catalog(topics: &[(&str, i32)]) -> Topics {
    topics
        .iter()
        .enumerate()
        .map(|(i, (n, c))| (n.to_string(), ([i as u8; 16], *c)))
        .collect()
}

fn info(name: &str, partitions: i32) -> TopicInfo {
    TopicInfo {
        name: name.into(),
        partitions,
        replication_factor: -1,
        configs: vec![("cleanup.policy".into(), "compact".into())],
    }
}

/// Word count: subtopology 0 reads `input` and writes a repartition topic, subtopology 1
/// reads it and keeps a count store.
fn word_count() -> Topology {
    Topology {
        epoch: 0,
        subtopologies: vec![
            Subtopology {
                id: "0".into(),
                source_topics: vec!["input".into()],
                repartition_sink_topics: vec!["app-counts-repartition".into()],
                ..Default::default()
            },
            Subtopology {
                id: "1".into(),
                repartition_source_topics: vec![info("app-counts-repartition", 0)],
                state_changelog_topics: vec![info("app-counts-changelog", 0)],
                ..Default::default()
            },
        ],
    }
}

const SETTINGS: StreamsSettings = StreamsSettings {
    session_ms: 45_000,
    num_standby: 0,
    initial_delay_ms: 0,
    assignment_interval_ms: 0,
    max_size: 100,
};

fn join(member: &str, process: &str) -> StreamsHeartbeat {
    StreamsHeartbeat {
        member_id: member.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 300_000,
        topology: Some(word_count()),
        owned: Some(Tasks::default()),
        process_id: Some(process.into()),
        ..Default::default()
    }
}

fn beat(member: &str, epoch: i32, owned: Option<Tasks>) -> StreamsHeartbeat {
    StreamsHeartbeat {
        member_id: member.into(),
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        owned,
        ..Default::default()
    }
}

#[test]
fn configure_works_out_internal_topics_and_tasks() {
    let t = word_count();
    match configure(&t, &catalog(&[])).unwrap() {
        Configured::NotReady { status, detail, .. } => {
            assert_eq!(status, status::MISSING_SOURCE_TOPICS);
            assert!(detail.contains("input"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    match configure(&t, &catalog(&[("input", 3)])).unwrap() {
        Configured::NotReady {
            status, to_create, ..
        } => {
            assert_eq!(status, status::MISSING_INTERNAL_TOPICS);
            let counts: Vec<(&str, i32)> = to_create
                .iter()
                .map(|t| (t.name.as_str(), t.partitions))
                .collect();
            assert_eq!(
                counts,
                vec![("app-counts-repartition", 3), ("app-counts-changelog", 3)]
            );
            assert_eq!(to_create[1].configs[0].1, "compact");
        }
        other => panic!("{other:?}"),
    }
    let all = catalog(&[
        ("input", 3),
        ("app-counts-repartition", 3),
        ("app-counts-changelog", 3),
    ]);
    assert_eq!(
        configure(&t, &all).unwrap(),
        Configured::Ready([("0".to_string(), 3), ("1".to_string(), 3)].into())
    );
    let wrong = catalog(&[
        ("input", 3),
        ("app-counts-repartition", 3),
        ("app-counts-changelog", 5),
    ]);
    match configure(&t, &wrong).unwrap() {
        Configured::NotReady { status, detail, .. } => {
            assert_eq!(status, status::INCORRECTLY_PARTITIONED_TOPICS);
            assert!(detail.contains("expected 3, found 5"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn copartitioned_sources_must_agree() {
    let t = Topology {
        epoch: 0,
        subtopologies: vec![Subtopology {
            id: "0".into(),
            source_topics: vec!["left".into(), "right".into()],
            copartition_groups: vec![CopartitionGroup {
                source_topics: vec![0, 1],
                repartition_source_topics: vec![],
            }],
            ..Default::default()
        }],
    };
    match configure(&t, &catalog(&[("left", 2), ("right", 3)])).unwrap() {
        Configured::NotReady { status, detail, .. } => {
            assert_eq!(status, status::INCORRECTLY_PARTITIONED_TOPICS);
            assert!(detail.contains("left=2"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        configure(&t, &catalog(&[("left", 3), ("right", 3)])).unwrap(),
        Configured::Ready(_)
    ));
}

#[test]
fn a_repartition_topic_nobody_writes_is_an_invalid_topology() {
    let mut t = word_count();
    t.subtopologies[0].repartition_sink_topics.clear();
    assert!(configure(&t, &catalog(&[("input", 1)])).is_err());
}

fn member(id: &str, process: &str, active: &[(&str, i32)]) -> StreamsMember {
    let mut m = StreamsMember::new(id);
    m.process_id = process.into();
    m.active = active
        .iter()
        .map(|(s, p)| ((s.to_string(), *p), 1))
        .collect();
    m
}

fn active_counts(out: &BTreeMap<String, Tasks>) -> Vec<usize> {
    out.values().map(|t| t.active.len()).collect()
}

#[test]
fn the_assignor_balances_and_keeps_tasks_where_they_are() {
    let tasks: BTreeMap<String, i32> = [("0".to_string(), 4), ("1".to_string(), 3)].into();
    let mut members = BTreeMap::new();
    members.insert(
        "a".to_string(),
        member(
            "a",
            "p1",
            &[
                ("0", 0),
                ("0", 1),
                ("0", 2),
                ("0", 3),
                ("1", 0),
                ("1", 1),
                ("1", 2),
            ],
        ),
    );
    members.insert("b".to_string(), member("b", "p2", &[]));
    members.insert("c".to_string(), member("c", "p3", &[]));
    let out = assign(&members, &tasks, &BTreeSet::new(), 0);
    let mut counts = active_counts(&out);
    counts.sort();
    assert_eq!(counts, vec![2, 2, 3]);
    let every: Vec<&TaskId> = out.values().flat_map(|t| &t.active).collect();
    assert_eq!(every.len(), 7);
    assert_eq!(
        every.iter().collect::<BTreeSet<_>>().len(),
        7,
        "a task given twice"
    );
    // a keeps what it can (3 of its 7), the others take the rest.
    assert_eq!(out["a"].active.len(), 3);
    assert!(out["a"]
        .active
        .iter()
        .all(|t| members["a"].active.contains_key(t)));
    // Assigning again changes nothing.
    let mut again = members.clone();
    for (id, t) in &out {
        if let Some(m) = again.get_mut(id) {
            m.active = t.active.iter().map(|t| (t.clone(), 2)).collect();
        }
    }
    assert_eq!(assign(&again, &tasks, &BTreeSet::new(), 0), out);
}

#[test]
fn the_quota_shrinks_as_members_fill_up() {
    let tasks: BTreeMap<String, i32> = [("0".to_string(), 4)].into();
    let mut members = BTreeMap::new();
    members.insert("a".to_string(), member("a", "p1", &[("0", 0), ("0", 1)]));
    members.insert("b".to_string(), member("b", "p2", &[("0", 2), ("0", 3)]));
    members.insert("c".to_string(), member("c", "p3", &[]));
    let mut counts = active_counts(&assign(&members, &tasks, &BTreeSet::new(), 0));
    counts.sort();
    assert_eq!(counts, vec![1, 1, 2]);
}

#[test]
fn standbys_go_to_other_processes_only() {
    let tasks: BTreeMap<String, i32> = [("0".to_string(), 2)].into();
    let stateful: BTreeSet<String> = ["0".to_string()].into();
    let mut members = BTreeMap::new();
    members.insert("a1".to_string(), member("a1", "p1", &[]));
    members.insert("a2".to_string(), member("a2", "p1", &[]));
    let out = assign(&members, &tasks, &stateful, 1);
    assert!(
        out.values().all(|t| t.standby.is_empty()),
        "one process: no standby"
    );
    members.insert("b".to_string(), member("b", "p2", &[]));
    let out = assign(&members, &tasks, &stateful, 1);
    for task in [("0".to_string(), 0), ("0".to_string(), 1)] {
        let active = out
            .iter()
            .find(|(_, t)| t.active.contains(&task))
            .unwrap()
            .0;
        let standby = out
            .iter()
            .find(|(_, t)| t.standby.contains(&task))
            .unwrap()
            .0;
        assert_ne!(members[active].process_id, members[standby].process_id);
    }
}

fn ready_catalog() -> Topics {
    catalog(&[
        ("input", 4),
        ("app-counts-repartition", 4),
        ("app-counts-changelog", 4),
    ])
}

#[test]
fn a_joined_member_is_never_told_epoch_zero_and_waits_for_internal_topics() {
    let mut g = StreamsGroup::default();
    let a = g
        .heartbeat(join("a", "p1"), &catalog(&[("input", 4)]), 0, SETTINGS)
        .unwrap();
    assert!(a.member_epoch > 0);
    assert_eq!(a.tasks, Some(Tasks::default()));
    assert_eq!(a.status[0].0, status::MISSING_INTERNAL_TOPICS);
    assert_eq!(a.to_create.len(), 2);
    assert_eq!(g.state_name(), "NotReady");
    // The topics are created: the next heartbeat gets every task, and no status.
    let a = g
        .heartbeat(
            beat("a", a.member_epoch, None),
            &ready_catalog(),
            100,
            SETTINGS,
        )
        .unwrap();
    assert!(a.status.is_empty(), "{:?}", a.status);
    assert_eq!(a.tasks.unwrap().active.len(), 8);
    assert_eq!(g.state_name(), "Stable");
}

#[test]
fn the_initial_delay_holds_the_first_assignment() {
    let settings = StreamsSettings {
        initial_delay_ms: 3000,
        ..SETTINGS
    };
    let mut g = StreamsGroup::default();
    let a = g
        .heartbeat(join("a", "p1"), &ready_catalog(), 0, settings)
        .unwrap();
    assert_eq!(a.member_epoch, 1);
    assert_eq!(a.status[0].0, status::ASSIGNMENT_DELAYED);
    let b = g
        .heartbeat(join("b", "p2"), &ready_catalog(), 1000, settings)
        .unwrap();
    assert_eq!(b.status[0].0, status::ASSIGNMENT_DELAYED);
    let a = g
        .heartbeat(
            beat("a", 1, Some(Tasks::default())),
            &ready_catalog(),
            3500,
            settings,
        )
        .unwrap();
    assert!(a.status.is_empty());
    assert_eq!(a.tasks.unwrap().active.len(), 4, "half of 8 tasks");
}

/// Every member's active tasks, with the tasks they are revoking: no task twice.
fn assert_exclusive(g: &StreamsGroup) {
    let mut seen = BTreeSet::new();
    for m in g.members.values() {
        for t in m.active.keys().chain(m.revoking.active.iter()) {
            assert!(seen.insert(t.clone()), "task {t:?} run by two members");
        }
    }
}

#[test]
fn a_task_moves_only_after_its_owner_gave_it_up() {
    let cat = ready_catalog();
    let mut g = StreamsGroup::default();
    let a = g.heartbeat(join("a", "p1"), &cat, 0, SETTINGS).unwrap();
    let a_tasks = a.tasks.clone().unwrap();
    assert_eq!(a_tasks.active.len(), 8);
    // b joins: the group wants 4 tasks moved from a to b, but a still runs them.
    let b = g.heartbeat(join("b", "p2"), &cat, 10, SETTINGS).unwrap();
    assert_exclusive(&g);
    assert!(b.tasks.unwrap().active.is_empty());
    assert_eq!(g.state_name(), "Reconciling");
    // a is told to keep 4 (same epoch, unrevoked).
    let a2 = g
        .heartbeat(beat("a", a.member_epoch, None), &cat, 20, SETTINGS)
        .unwrap();
    assert_eq!(a2.member_epoch, a.member_epoch);
    let kept = a2.tasks.unwrap();
    assert_eq!(kept.active.len(), 4);
    assert_exclusive(&g);
    // b still gets nothing: a has not acknowledged yet.
    let b2 = g
        .heartbeat(
            beat("b", b.member_epoch, Some(Tasks::default())),
            &cat,
            30,
            SETTINGS,
        )
        .unwrap();
    assert_eq!(b2.tasks, None);
    assert_exclusive(&g);
    // a acknowledges (lists only what it kept) and moves to the new epoch.
    let a3 = g
        .heartbeat(
            beat("a", a.member_epoch, Some(kept.clone())),
            &cat,
            40,
            SETTINGS,
        )
        .unwrap();
    assert!(a3.member_epoch > a.member_epoch);
    // b gets the released tasks.
    let b3 = g
        .heartbeat(
            beat("b", b2.member_epoch, Some(Tasks::default())),
            &cat,
            50,
            SETTINGS,
        )
        .unwrap();
    assert_eq!(b3.tasks.unwrap().active.len(), 4);
    assert_exclusive(&g);
    assert_eq!(g.state_name(), "Stable");
    // A commit a made while revoking, with its old epoch, is accepted for tasks it held.
    let task = kept.active.iter().next().unwrap().clone();
    let topic = if task.0 == "0" {
        "input"
    } else {
        "app-counts-repartition"
    };
    assert_eq!(
        g.validate_commit("a", a.member_epoch, &[(topic.into(), task.1)]),
        Ok(())
    );
    assert_eq!(
        g.validate_commit("a", a3.member_epoch + 1, &[(topic.into(), task.1)]),
        Err(STALE_MEMBER_EPOCH)
    );
    assert_eq!(g.validate_commit("x", 1, &[]), Err(UNKNOWN_MEMBER_ID));
}

#[test]
fn a_member_that_leaves_or_times_out_frees_its_tasks() {
    let cat = ready_catalog();
    let mut g = StreamsGroup::default();
    let a = g.heartbeat(join("a", "p1"), &cat, 0, SETTINGS).unwrap();
    let _b = g.heartbeat(join("b", "p2"), &cat, 0, SETTINGS).unwrap();
    let b_epoch = g.members["b"].epoch;
    g.heartbeat(
        beat("b", b_epoch, Some(Tasks::default())),
        &cat,
        30_000,
        SETTINGS,
    )
    .unwrap();
    // a never heartbeats again: after its session, b gets every task.
    let b_epoch = g.members["b"].epoch;
    let b = g
        .heartbeat(
            beat("b", b_epoch, Some(Tasks::default())),
            &cat,
            46_000,
            SETTINGS,
        )
        .unwrap();
    assert!(!g.members.contains_key("a"));
    assert_eq!(b.tasks.unwrap().active.len(), 8);
    // a comes back with its old epoch: fenced, and welcome to join again.
    let err = g
        .heartbeat(
            beat("a", a.member_epoch, Some(Tasks::default())),
            &cat,
            46_100,
            SETTINGS,
        )
        .unwrap_err();
    assert_eq!(err.0, UNKNOWN_MEMBER_ID);
    let left = g
        .heartbeat(beat("b", -1, None), &cat, 46_200, SETTINGS)
        .unwrap();
    assert_eq!(left.member_epoch, -1);
    assert_eq!(g.state_name(), "Empty");
}

#[test]
fn malformed_heartbeats_are_refused() {
    let mut hb = join("a", "p1");
    hb.topology = None;
    assert_eq!(hb.validate().unwrap_err().0, INVALID_REQUEST);
    let mut hb = beat("a", 3, None);
    hb.topology = Some(word_count());
    assert_eq!(hb.validate().unwrap_err().0, INVALID_REQUEST);
    let mut hb = join("a", "p1");
    if let Some(t) = hb.topology.as_mut() {
        t.subtopologies[1].state_changelog_topics[0].partitions = 3;
    }
    assert_eq!(hb.validate().unwrap_err().0, STREAMS_INVALID_TOPOLOGY);
    assert!(join("a", "p1").validate().is_ok());
}

#[test]
fn a_changed_topology_is_refused_while_others_run_the_old_one() {
    let cat = ready_catalog();
    let mut g = StreamsGroup::default();
    g.heartbeat(join("a", "p1"), &cat, 0, SETTINGS).unwrap();
    let mut other = join("b", "p2");
    if let Some(t) = other.topology.as_mut() {
        t.subtopologies.pop();
    }
    assert_eq!(
        g.heartbeat(other.clone(), &cat, 0, SETTINGS).unwrap_err().0,
        INVALID_REQUEST
    );
    g.heartbeat(beat("a", -1, None), &cat, 0, SETTINGS).unwrap();
    assert!(
        g.heartbeat(other, &cat, 0, SETTINGS).is_ok(),
        "alone, a new topology is taken"
    );
}

/// Random joins, leaves, heartbeats and time passing never let two members run one active
/// task, and once everyone heartbeats with what it was told, every task runs.
#[test]
fn random_churn_keeps_active_tasks_exclusive() {
    let cat = ready_catalog();
    let mut seed: u64 = 0x5eed;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut g = StreamsGroup::default();
    // What each live member was last told (its epoch and tasks).
    let mut told: BTreeMap<String, (i32, Tasks)> = BTreeMap::new();
    let mut now = 0;
    for _ in 0..2000 {
        now += next(500) as i64;
        let id = format!("m{}", next(5));
        match (told.get(&id).cloned(), next(10)) {
            (None, _) => {
                if let Ok(a) = g.heartbeat(join(&id, &format!("p{}", next(3))), &cat, now, SETTINGS)
                {
                    told.insert(id, (a.member_epoch, a.tasks.unwrap_or_default()));
                }
            }
            (Some(_), 0) => {
                g.heartbeat(beat(&id, -1, None), &cat, now, SETTINGS)
                    .unwrap();
                told.remove(&id);
            }
            (Some((epoch, tasks)), _) => {
                match g.heartbeat(beat(&id, epoch, Some(tasks.clone())), &cat, now, SETTINGS) {
                    Ok(a) => {
                        let tasks = a.tasks.unwrap_or(tasks);
                        told.insert(id, (a.member_epoch, tasks));
                    }
                    Err(_) => {
                        told.remove(&id);
                    }
                }
            }
        }
        assert_exclusive(&g);
        // What members were told they run is exclusive too.
        let mut seen = BTreeSet::new();
        for (id, (_, t)) in &told {
            if g.members.contains_key(id) {
                for task in &t.active {
                    assert!(seen.insert(task.clone()), "{task:?} told to two members");
                }
            }
        }
    }
    // Members whose last heartbeat failed leave (a client would join again).
    let gone: Vec<String> = g
        .members
        .keys()
        .filter(|m| !told.contains_key(*m))
        .cloned()
        .collect();
    for id in gone {
        g.heartbeat(beat(&id, -1, None), &cat, now, SETTINGS)
            .unwrap();
    }
    // Settle: everyone heartbeats with what it was told, a few rounds.
    for _ in 0..6 {
        now += 10;
        for id in told.keys().cloned().collect::<Vec<_>>() {
            let (epoch, tasks) = told[&id].clone();
            let a = g
                .heartbeat(beat(&id, epoch, Some(tasks.clone())), &cat, now, SETTINGS)
                .unwrap();
            told.insert(id, (a.member_epoch, a.tasks.unwrap_or(tasks)));
        }
    }
    if !told.is_empty() {
        let running: usize = told.values().map(|(_, t)| t.active.len()).sum();
        assert_eq!(running, 8, "every task runs once the group settles");
        assert_eq!(g.state_name(), "Stable");
    }
}

#[test]
fn a_member_that_missed_a_response_is_told_its_tasks_again() {
    let cat = ready_catalog();
    let mut g = StreamsGroup::default();
    let a = g.heartbeat(join("a", "p1"), &cat, 0, SETTINGS).unwrap();
    let tasks = a.tasks.clone().unwrap();
    assert_eq!(tasks.active.len(), 8);
    // The member says it runs nothing (the answer with its tasks never reached it): it is told
    // its tasks again, not "unchanged".
    let again = g
        .heartbeat(
            beat("a", a.member_epoch, Some(Tasks::default())),
            &cat,
            10,
            SETTINGS,
        )
        .unwrap();
    assert_eq!(again.tasks, Some(tasks.clone()));
    // Once it lists them, nothing more is sent.
    let quiet = g
        .heartbeat(beat("a", a.member_epoch, Some(tasks)), &cat, 20, SETTINGS)
        .unwrap();
    assert_eq!(quiet.tasks, None);
}

#[test]
fn counts_stay_within_one_when_the_quota_shrinks() {
    // 9 tasks on two members (5 and 4, interleaved), two new members: Kafka's sticky assignor
    // gives 3/2/2/2; a member left in the pool at the shrunk quota would get one too many.
    let tasks: BTreeMap<String, i32> = [("0".to_string(), 9)].into();
    let mut members = BTreeMap::new();
    members.insert(
        "x".to_string(),
        member(
            "x",
            "p1",
            &[("0", 0), ("0", 2), ("0", 4), ("0", 6), ("0", 8)],
        ),
    );
    members.insert(
        "y".to_string(),
        member("y", "p2", &[("0", 1), ("0", 3), ("0", 5), ("0", 7)]),
    );
    members.insert("z".to_string(), member("z", "p3", &[]));
    members.insert("w".to_string(), member("w", "p4", &[]));
    let mut counts = active_counts(&assign(&members, &tasks, &BTreeSet::new(), 0));
    counts.sort();
    assert_eq!(counts, vec![2, 2, 2, 3]);
}

#[test]
fn an_active_task_waits_for_its_standby_on_another_thread_of_the_process() {
    let mut g = StreamsGroup::default();
    let task: TaskId = ("1".into(), 0);
    let mut a1 = member("a1", "p1", &[]);
    a1.standby.insert(task.clone());
    g.members.insert("a1".into(), a1);
    g.members.insert("a2".into(), member("a2", "p1", &[]));
    g.members.insert("b".into(), member("b", "p2", &[]));
    assert!(
        g.held_elsewhere("a2").0.contains(&task),
        "same process: wait"
    );
    assert!(
        !g.held_elsewhere("b").0.contains(&task),
        "another process: no wait"
    );
}

/// Many members on processes of four threads: every member gets its share.
#[test]
fn a_large_group_is_balanced() {
    let tasks: BTreeMap<String, i32> = (0..10).map(|s| (s.to_string(), 100)).collect();
    let members: BTreeMap<String, StreamsMember> = (0..500)
        .map(|i| {
            let id = format!("m{i:03}");
            let m = member(&id, &format!("p{}", i / 4), &[]);
            (id, m)
        })
        .collect();
    let out = assign(&members, &tasks, &BTreeSet::new(), 0);
    let mut counts = active_counts(&out);
    counts.sort();
    assert_eq!((counts[0], counts[counts.len() - 1]), (2, 2));
}

mod coordinator {
    use std::sync::Arc;

    use kafka_protocol::messages::streams_group_heartbeat_request::{Subtopology, Topology};
    use kafka_protocol::messages::{GroupId, StreamsGroupHeartbeatRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use weir_meta::SqliteMetaStore;

    use crate::codes::*;
    use crate::streams::StreamsOverrides;
    use crate::{GroupConfig, GroupCoordinator};

    fn s(v: &str) -> StrBytes {
        StrBytes::from_string(v.to_owned())
    }

    fn catalog() -> crate::consumer::Topics {
        [("input".to_string(), ([1; 16], 2))].into()
    }

    fn coordinator() -> Arc<GroupCoordinator> {
        GroupCoordinator::new(
            Arc::new(SqliteMetaStore::in_memory().expect("store")),
            GroupConfig::default(),
        )
    }

    fn heartbeat(member: &str, epoch: i32) -> StreamsGroupHeartbeatRequest {
        let mut r = StreamsGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("app")))
            .with_member_id(s(member))
            .with_member_epoch(epoch);
        if epoch == 0 {
            r = r
                .with_rebalance_timeout_ms(30_000)
                .with_process_id(Some(s("p1")))
                .with_active_tasks(Some(vec![]))
                .with_standby_tasks(Some(vec![]))
                .with_warmup_tasks(Some(vec![]))
                .with_topology(Some(Topology::default().with_subtopologies(vec![
                    Subtopology::default()
                        .with_subtopology_id(s("0"))
                        .with_source_topics(vec![TopicName(s("input"))]),
                ])));
        }
        r
    }

    #[tokio::test]
    async fn a_member_of_a_group_the_coordinator_lost_is_sent_to_join_again() {
        let co = coordinator();
        let o = StreamsOverrides::default();
        let r = co
            .streams_group_heartbeat(heartbeat("m1", 3), 1, "c", "h", &catalog(), &o)
            .await;
        // Not GROUP_ID_NOT_FOUND, which is fatal to a Kafka Streams client.
        assert_eq!(r.response.error_code, UNKNOWN_MEMBER_ID);
        let r = co
            .streams_group_heartbeat(heartbeat("m1", 0), 1, "c", "h", &catalog(), &o)
            .await;
        assert_eq!(r.response.error_code, NONE);
        assert!(r.response.member_epoch > 0);
    }

    #[tokio::test]
    async fn a_refused_join_leaves_an_empty_classic_group_as_it_was() {
        let co = coordinator();
        let o = StreamsOverrides::default();
        co.create_empty_classic_group_for_tests("app");
        // A repartition topic nobody writes: refused after the group was looked at.
        let mut bad = heartbeat("m1", 0);
        if let Some(t) = bad.topology.as_mut() {
            t.subtopologies[0].repartition_source_topics = vec![
                kafka_protocol::messages::streams_group_heartbeat_request::TopicInfo::default()
                    .with_name(TopicName(s("orphan"))),
            ];
        }
        let r = co
            .streams_group_heartbeat(bad, 1, "c", "h", &catalog(), &o)
            .await;
        assert_eq!(
            r.response.error_code,
            crate::streams::STREAMS_INVALID_TOPOLOGY
        );
        assert!(co.has_classic_group_for_tests("app"));
        let r = co
            .streams_group_heartbeat(heartbeat("m1", 0), 1, "c", "h", &catalog(), &o)
            .await;
        assert_eq!(r.response.error_code, NONE);
        assert!(!co.has_classic_group_for_tests("app"));
    }
}

#[test]
fn a_leave_of_an_unknown_member_is_refused_and_an_endpoint_leaving_moves_the_endpoint_epoch() {
    let cat = ready_catalog();
    let mut g = StreamsGroup::default();
    let mut a = join("a", "p1");
    a.user_endpoint = Some(("host-a".into(), 8080));
    g.heartbeat(a, &cat, 0, SETTINGS).unwrap();
    g.heartbeat(join("b", "p2"), &cat, 0, SETTINGS).unwrap();
    assert_eq!(
        g.heartbeat(beat("nobody", -1, None), &cat, 0, SETTINGS)
            .unwrap_err()
            .0,
        UNKNOWN_MEMBER_ID
    );
    let before = g.endpoint_epoch;
    g.heartbeat(beat("a", -1, None), &cat, 0, SETTINGS).unwrap();
    assert!(g.endpoint_epoch > before);
}

#[test]
fn a_standby_goes_back_to_where_the_state_is() {
    // c ran both tasks; with three members it keeps one, the other moves, and c (whose disk
    // has that task's state) gets its standby rather than the idle member.
    let tasks: BTreeMap<String, i32> = [("0".to_string(), 2)].into();
    let stateful: BTreeSet<String> = ["0".to_string()].into();
    let mut members = BTreeMap::new();
    members.insert("a".to_string(), member("a", "p1", &[]));
    members.insert("b".to_string(), member("b", "p2", &[]));
    members.insert("c".to_string(), member("c", "p3", &[("0", 0), ("0", 1)]));
    let out = assign(&members, &tasks, &stateful, 1);
    assert_eq!(out["c"].active.len(), 1);
    let moved = [("0".to_string(), 0), ("0".to_string(), 1)]
        .into_iter()
        .find(|t| !out["c"].active.contains(t))
        .unwrap();
    assert!(out["c"].standby.contains(&moved), "{out:?}");
}
