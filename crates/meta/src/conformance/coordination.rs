//! [`Coordination`]: membership and sessions, the controller lease, partition leadership.
//! Leadership rows follow topics, so these checks need the catalog too: they run on a whole store.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{
    AssignmentChange, BrokerInfo, BrokerRegistration, BrokerState, Coordination, ListenerEndpoint,
    MetaError, MetaStore, WalRegistration, WalState,
};

/// Runs every check of the part, each against a fresh, empty store from `open`.
pub async fn run(open: impl Fn() -> Box<dyn MetaStore>) {
    registration_incarnations_and_sessions(&*open()).await;
    expired_brokers_are_fenced(&*open()).await;
    one_controller_at_a_time(&*open()).await;
    placement_and_hand_over(&*open()).await;
    changes_are_announced(&*open()).await;
    wal_claims_and_recovery(&*open()).await;
    brokers_without_a_wal_release_their_partitions_when_fenced(&*open()).await;
    load_reports(&*open()).await;
    listeners_are_registered_in_order(&*open()).await;
}

/// A registration's listeners come back in the broker's order (not by name), each broker with
/// its own; a registration replaces them all, and one that fails changes none.
pub async fn listeners_are_registered_in_order(m: &dyn Coordination) {
    let first = vec![
        listener("SASL_SSL", "b1.example", 9094),
        listener("PLAINTEXT", "10.0.0.1", 9092),
        listener("EXTERNAL", "b1.public.example", 19094),
    ];
    let b1 = m
        .register_broker(
            &BrokerRegistration {
                listeners: first.clone(),
                ..with_wal(1, "w1")
            },
            LONG,
        )
        .await
        .expect("register");
    assert_eq!(b1.listeners, first);
    let b2 = m
        .register_broker(&reg(Some(2)), LONG)
        .await
        .expect("register");
    assert!(b2.listeners.is_empty());
    let third = vec![
        listener("PLAINTEXT", "10.0.0.3", 9092),
        listener("CONTROLLER", "10.0.0.3", 9093),
    ];
    m.register_broker(
        &BrokerRegistration {
            listeners: third.clone(),
            ..reg(Some(3))
        },
        LONG,
    )
    .await
    .expect("register");
    let listeners = |all: &[BrokerInfo]| {
        all.iter()
            .map(|b| (b.node_id, b.listeners.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        listeners(&m.brokers().await.expect("brokers")),
        vec![(1, first.clone()), (2, Vec::new()), (3, third.clone())]
    );

    // A restart with other listeners: the new set, whole, in its order.
    let second = vec![
        listener("PLAINTEXT", "10.0.0.9", 9192),
        listener("INTERNAL", "10.0.0.9", 9193),
    ];
    let again = m
        .register_broker(
            &BrokerRegistration {
                listeners: second.clone(),
                ..with_wal(1, "w1")
            },
            LONG,
        )
        .await
        .expect("register again");
    assert_eq!((again.incarnation, &again.listeners), (2, &second));
    assert_eq!(
        listeners(&m.brokers().await.expect("brokers")),
        vec![(1, second.clone()), (2, Vec::new()), (3, third.clone())]
    );

    // A registration refused (its previous WAL is not recovered) leaves the listeners as they
    // were: they change in the registration's transaction.
    let refused = m
        .register_broker(
            &BrokerRegistration {
                listeners: vec![listener("PLAINTEXT", "elsewhere", 1)],
                ..with_wal(1, "w2")
            },
            LONG,
        )
        .await;
    assert!(
        matches!(refused, Err(MetaError::WalMissing { .. })),
        "{refused:?}"
    );
    // Registering without listeners drops them: the broker no longer names any.
    m.register_broker(&reg(Some(3)), LONG)
        .await
        .expect("register");
    assert_eq!(
        listeners(&m.brokers().await.expect("brokers")),
        vec![(1, second), (2, Vec::new()), (3, Vec::new())]
    );
}

/// Brokers' load reports: the last one of each broker, aged by the store's clock; only the
/// current incarnation reports.
pub async fn load_reports(m: &dyn Coordination) {
    use crate::{BrokerLoad, PartitionLoad};
    assert!(m.loads().await.expect("loads").is_empty());
    m.register_broker(&reg(Some(1)), LONG)
        .await
        .expect("register");
    m.register_broker(&reg(Some(2)), LONG)
        .await
        .expect("register");
    let load = |node_id, partitions: Vec<PartitionLoad>| BrokerLoad {
        node_id,
        age_ms: 12_345,
        cpu: 0.5,
        partitions,
    };
    let p = |stream_id, bytes_in, bytes_out| PartitionLoad {
        stream_id,
        bytes_in,
        bytes_out,
        requests: 12.5,
    };
    m.report_load(1, load(1, vec![p(1, 1000.0, 2000.0), p(4, 0.0, 7.0)]))
        .await
        .expect("report");
    m.report_load(1, load(2, Vec::new())).await.expect("report");
    // A newer report replaces the older.
    m.report_load(1, load(1, vec![p(1, 1500.0, 2500.0)]))
        .await
        .expect("report");
    let all = m.loads().await.expect("loads");
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!((all[0].node_id, all[1].node_id), (1, 2));
    assert_eq!(all[0].partitions, vec![p(1, 1500.0, 2500.0)]);
    assert!(all[1].partitions.is_empty());
    assert!((all[0].cpu - 0.5).abs() < 1e-9);
    assert!(
        (0..5_000).contains(&all[0].age_ms),
        "aged by the store's clock, not the reporter's: {}",
        all[0].age_ms
    );
    // A zombie incarnation cannot report.
    m.register_broker(&reg(Some(1)), LONG)
        .await
        .expect("register");
    assert!(matches!(
        m.report_load(1, load(1, Vec::new())).await,
        Err(MetaError::BrokerFenced { .. })
    ));
}

fn reg(node_id: Option<i32>) -> BrokerRegistration {
    BrokerRegistration {
        node_id,
        zone: "z1".into(),
        host: "127.0.0.1".into(),
        port: 9092,
        listeners: Vec::new(),
        internal_addr: "127.0.0.1:19092".into(),
        wal: None,
    }
}

fn listener(name: &str, host: &str, port: i32) -> ListenerEndpoint {
    ListenerEndpoint {
        name: name.into(),
        host: host.into(),
        port,
    }
}

fn with_wal(node_id: i32, wal_id: &str) -> BrokerRegistration {
    BrokerRegistration {
        wal: Some(WalRegistration {
            wal_id: wal_id.into(),
            path: format!("/wal/{node_id}"),
        }),
        ..reg(Some(node_id))
    }
}

const LONG: Duration = Duration::from_secs(60);

pub async fn registration_incarnations_and_sessions(m: &dyn Coordination) {
    let a = m
        .register_broker(&reg(Some(1)), LONG)
        .await
        .expect("register");
    assert_eq!(
        (a.node_id, a.incarnation, a.state),
        (1, 1, BrokerState::Running)
    );
    m.renew_session(1, 1, LONG).await.expect("renew");
    // The same node id registers again (a restart): a new incarnation, the old one is a zombie.
    let a2 = m
        .register_broker(&reg(Some(1)), LONG)
        .await
        .expect("register");
    assert_eq!(a2.incarnation, 2);
    assert!(matches!(
        m.renew_session(1, 1, LONG).await,
        Err(MetaError::BrokerFenced {
            node_id: 1,
            incarnation: 1
        })
    ));
    m.renew_session(1, 2, LONG)
        .await
        .expect("renew the new incarnation");
    assert!(matches!(
        m.set_broker_state(1, 1, BrokerState::ShuttingDown).await,
        Err(MetaError::BrokerFenced { .. })
    ));
    assert!(matches!(
        m.renew_session(7, 1, LONG).await,
        Err(MetaError::BrokerFenced { .. }) | Err(MetaError::UnknownBroker(7))
    ));
    // Allocated ids stay clear of configured ones and never repeat.
    let x = m.register_broker(&reg(None), LONG).await.expect("register");
    let y = m.register_broker(&reg(None), LONG).await.expect("register");
    assert!(x.node_id > 1000 && y.node_id > x.node_id, "{x:?} {y:?}");
    m.set_broker_state(1, 2, BrokerState::ShuttingDown)
        .await
        .expect("state");
    let all = m.brokers().await.expect("brokers");
    assert_eq!(
        all.iter().map(|b| b.node_id).collect::<Vec<_>>(),
        vec![1, x.node_id, y.node_id]
    );
    assert!(all.iter().all(|b| b.alive));
    assert_eq!(all[0].state, BrokerState::ShuttingDown);
    assert!(
        !all[0].is_live(),
        "a broker shutting down takes no partitions"
    );
    assert_eq!(all[0].internal_addr, "127.0.0.1:19092");
}

pub async fn expired_brokers_are_fenced(m: &dyn Coordination) {
    m.register_broker(&reg(Some(1)), LONG)
        .await
        .expect("register");
    m.register_broker(&reg(Some(2)), Duration::from_millis(1))
        .await
        .expect("register");
    tokio::time::sleep(Duration::from_millis(30)).await;
    let all = m.brokers().await.expect("brokers");
    assert!(all[0].alive && !all[1].alive, "{all:?}");
    let lease = m
        .acquire_controller(1, LONG)
        .await
        .expect("acquire")
        .expect("free lease");
    assert_eq!(
        m.fence_expired_brokers(lease, Duration::ZERO)
            .await
            .expect("fence"),
        vec![2]
    );
    assert_eq!(
        m.fence_expired_brokers(lease, Duration::ZERO)
            .await
            .expect("fence"),
        Vec::<i32>::new()
    );
    assert_eq!(
        m.brokers().await.expect("brokers")[1].state,
        BrokerState::Fenced
    );
    assert!(matches!(
        m.renew_session(2, 1, LONG).await,
        Err(MetaError::BrokerFenced { .. })
    ));
    // A fenced broker comes back by registering again.
    let back = m
        .register_broker(&reg(Some(2)), LONG)
        .await
        .expect("register");
    assert_eq!(back.incarnation, 2);
    assert!(m.brokers().await.expect("brokers")[1].is_live());
}

pub async fn one_controller_at_a_time(m: &dyn Coordination) {
    assert_eq!(m.controller().await.expect("controller"), None);
    let l1 = m
        .acquire_controller(1, LONG)
        .await
        .expect("acquire")
        .expect("free lease");
    assert_eq!(l1.node_id, 1);
    assert_eq!(m.acquire_controller(2, LONG).await.expect("acquire"), None);
    // Renewing keeps the epoch.
    assert_eq!(
        m.acquire_controller(1, LONG).await.expect("renew"),
        Some(l1)
    );
    assert_eq!(m.controller().await.expect("controller"), Some(l1));
    m.resign_controller(l1).await.expect("resign");
    assert_eq!(m.controller().await.expect("controller"), None);
    let l2 = m
        .acquire_controller(2, Duration::from_millis(1))
        .await
        .expect("acquire")
        .expect("free lease");
    assert!(l2.epoch > l1.epoch);
    // The old controller's decisions are refused.
    assert!(matches!(
        m.change_assignments(l1, &[]).await,
        Err(MetaError::NotController { .. })
    ));
    // An expired lease is free for another, at a higher epoch, and refused to its old holder.
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(matches!(
        m.change_assignments(l2, &[]).await,
        Err(MetaError::NotController { .. })
    ));
    let l3 = m
        .acquire_controller(3, LONG)
        .await
        .expect("acquire")
        .expect("expired lease");
    assert!(l3.epoch > l2.epoch);
    m.change_assignments(l3, &[]).await.expect("current lease");
}

pub async fn placement_and_hand_over(m: &dyn MetaStore) {
    let a = m
        .register_broker(&reg(Some(1)), LONG)
        .await
        .expect("register");
    m.register_broker(&reg(Some(2)), LONG)
        .await
        .expect("register");
    let t = m
        .create_topic("t", [1; 16], 2, BTreeMap::new())
        .await
        .expect("create");
    let all = m.assignments().await.expect("assignments");
    assert_eq!(all.len(), 2);
    assert!(all.iter().all(|x| x.leader.is_none() && x.target.is_none()));
    assert_eq!((all[1].topic.as_str(), all[1].partition), ("t", 1));
    assert_eq!(all[1].stream_id, t.streams[1]);
    let lease = m
        .acquire_controller(1, LONG)
        .await
        .expect("acquire")
        .expect("free");
    let (s0, s1) = (t.streams[0], t.streams[1]);
    m.change_assignments(
        lease,
        &[
            AssignmentChange::Place {
                stream_id: s0,
                leader: 1,
            },
            AssignmentChange::Place {
                stream_id: s1,
                leader: 2,
            },
        ],
    )
    .await
    .expect("place");
    // Placing a placed partition changes nothing: only moves change a leader.
    m.change_assignments(
        lease,
        &[AssignmentChange::Place {
            stream_id: s0,
            leader: 2,
        }],
    )
    .await
    .expect("place");
    let all = m.assignments().await.expect("assignments");
    assert_eq!((all[0].leader, all[1].leader), (Some(1), Some(2)));
    m.change_assignments(
        lease,
        &[AssignmentChange::Move {
            stream_id: s0,
            target: Some(2),
        }],
    )
    .await
    .expect("move");
    assert_eq!(
        m.assignments().await.expect("assignments")[0].target,
        Some(2)
    );
    // Only the leader hands over, and only its current incarnation.
    assert_eq!(m.hand_over(s0, 2, 1).await.expect("not the leader"), None);
    assert!(matches!(
        m.hand_over(s0, 1, a.incarnation + 1).await,
        Err(MetaError::BrokerFenced { .. })
    ));
    assert_eq!(
        m.hand_over(s0, 1, a.incarnation).await.expect("hand over"),
        Some(2)
    );
    let all = m.assignments().await.expect("assignments");
    assert_eq!((all[0].leader, all[0].target), (Some(2), None));
    assert_eq!(
        m.hand_over(s0, 1, a.incarnation).await.expect("again"),
        None
    );
    // The epoch is the stream's: a new leader opening the stream moves it.
    m.open_stream(s0, 5).await.expect("open");
    assert_eq!(m.assignments().await.expect("assignments")[0].epoch, 5);
    // An operator's request sets a target without the lease, on placed partitions only.
    assert!(m.request_move(s0, Some(1)).await.expect("request"));
    assert_eq!(
        m.assignments().await.expect("assignments")[0].target,
        Some(1)
    );
    assert!(m.request_move(s0, None).await.expect("cancel"));
    // A cancelled move leaves the leader.
    m.change_assignments(
        lease,
        &[AssignmentChange::Move {
            stream_id: s1,
            target: Some(1),
        }],
    )
    .await
    .expect("move");
    m.change_assignments(
        lease,
        &[AssignmentChange::Move {
            stream_id: s1,
            target: None,
        }],
    )
    .await
    .expect("cancel");
    let all = m.assignments().await.expect("assignments");
    assert_eq!((all[1].leader, all[1].target), (Some(2), None));
    // A deleted topic's partitions are gone from the assignments.
    m.delete_topic("t").await.expect("delete");
    assert!(m.assignments().await.expect("assignments").is_empty());
}

pub async fn changes_are_announced(m: &dyn Coordination) {
    let mut rx = m.cluster_changes();
    rx.borrow_and_update();
    m.register_broker(&reg(Some(1)), LONG)
        .await
        .expect("register");
    assert!(rx.has_changed().expect("open"), "registration is announced");
    rx.borrow_and_update();
    m.notify_cluster().await.expect("notify");
    tokio::time::timeout(Duration::from_secs(10), rx.changed())
        .await
        .expect("announced")
        .expect("open");
}

/// A broker's WAL through its life: claimed by its registration; assigned to a peer for
/// recovery (the owner may not claim it meanwhile); given back when the peer cannot open it;
/// finished (sealed, the owner's partitions released); the owner then starts on a new WAL, and
/// may not switch WALs while one holds data not yet recovered.
pub async fn wal_claims_and_recovery(m: &dyn MetaStore) {
    let a = m
        .register_broker(&with_wal(1, "A"), LONG)
        .await
        .expect("register with a WAL");
    let b = m
        .register_broker(&with_wal(2, "B"), LONG)
        .await
        .expect("register");
    let wals = m.wals().await.expect("wals");
    assert_eq!(wals.len(), 2);
    assert_eq!(
        (
            wals[0].wal_id.as_str(),
            wals[0].node_id,
            wals[0].incarnation,
            wals[0].path.as_str(),
            wals[0].state
        ),
        ("A", 1, a.incarnation, "/wal/1", WalState::Open)
    );
    let t = m
        .create_topic("t", [1; 16], 2, BTreeMap::new())
        .await
        .expect("create");
    let lease = m
        .acquire_controller(2, LONG)
        .await
        .expect("acquire")
        .expect("free");
    m.change_assignments(
        lease,
        &[
            AssignmentChange::Place {
                stream_id: t.streams[0],
                leader: 1,
            },
            AssignmentChange::Place {
                stream_id: t.streams[1],
                leader: 2,
            },
        ],
    )
    .await
    .expect("place");

    // A WAL whose owner holds a live session under the claiming incarnation is never handed to
    // a peer, whatever the controller's (possibly older) view says: the chaos suite once saw a
    // broker's fresh WAL sealed right after it came back, because the controller planned from a
    // list of brokers read before the new registration.
    assert!(
        !m.assign_wal_recovery(lease, "A", 2, None)
            .await
            .expect("assign while the owner lives"),
        "the WAL of a live broker was assigned for recovery"
    );
    m.register_broker(&with_wal(1, "A"), Duration::from_millis(1))
        .await
        .expect("register with a short session");
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(
        m.fence_expired_brokers(lease, Duration::ZERO)
            .await
            .expect("fence"),
        vec![1]
    );
    // Its partitions wait for the recovery of its WAL, which may hold acknowledged data.
    let led: Vec<_> = m
        .assignments()
        .await
        .expect("assignments")
        .into_iter()
        .map(|a| a.leader)
        .collect();
    assert_eq!(led, vec![Some(1), Some(2)]);
    assert!(m
        .assign_wal_recovery(lease, "A", 2, None)
        .await
        .expect("assign"));
    assert!(
        !m.assign_wal_recovery(lease, "A", 2, None)
            .await
            .expect("assign twice"),
        "already assigned"
    );
    let state = |w: Vec<crate::WalInfo>, id: &str| {
        w.into_iter()
            .find(|x| x.wal_id == id)
            .map(|x| (x.state, x.tried))
    };
    assert_eq!(
        state(m.wals().await.expect("wals"), "A"),
        Some((WalState::Recovering { node_id: 2 }, vec![]))
    );
    match m.register_broker(&with_wal(1, "A"), LONG).await {
        Err(MetaError::WalRecovering { wal_id, node_id: 2 }) if wal_id == "A" => {}
        other => panic!("the owner claimed a WAL under recovery: {other:?}"),
    }
    // The peer cannot open it: back to open, tried by 2; the controller may clear that.
    m.wal_unreachable("A", 2, b.incarnation)
        .await
        .expect("unreachable");
    assert_eq!(
        state(m.wals().await.expect("wals"), "A"),
        Some((WalState::Open, vec![2]))
    );
    assert!(matches!(
        m.wal_unreachable("A", 2, b.incarnation).await,
        Err(MetaError::NotRecovering(_))
    ));
    m.retry_wal(lease, "A").await.expect("retry");
    assert_eq!(
        state(m.wals().await.expect("wals"), "A"),
        Some((WalState::Open, vec![]))
    );
    // A recoverer that died is replaced only if it is still the one named.
    assert!(m
        .assign_wal_recovery(lease, "A", 3, None)
        .await
        .expect("assign"));
    assert!(!m
        .assign_wal_recovery(lease, "A", 2, Some(5))
        .await
        .expect("not the stale recoverer"));
    assert!(m
        .assign_wal_recovery(lease, "A", 2, Some(3))
        .await
        .expect("replace the stale recoverer"));
    assert!(matches!(
        m.finish_wal_recovery("A", 3, 1).await,
        Err(MetaError::UnknownBroker(3)) | Err(MetaError::NotRecovering(_))
    ));
    let released = m
        .finish_wal_recovery("A", 2, b.incarnation)
        .await
        .expect("finish");
    assert_eq!(released, vec![t.streams[0]]);
    let all = m.assignments().await.expect("assignments");
    assert_eq!(
        all.iter().map(|x| x.leader).collect::<Vec<_>>(),
        vec![None, Some(2)]
    );
    assert_eq!(
        state(m.wals().await.expect("wals"), "A"),
        Some((WalState::Sealed, vec![]))
    );
    assert!(matches!(
        m.finish_wal_recovery("A", 2, b.incarnation).await,
        Err(MetaError::NotRecovering(_))
    ));
    // The owner comes back: its WAL was recovered, so it starts on a new one.
    match m.register_broker(&with_wal(1, "A"), LONG).await {
        Err(MetaError::WalSealed { wal_id }) if wal_id == "A" => {}
        other => panic!("a sealed WAL was claimed: {other:?}"),
    }
    m.register_broker(&with_wal(1, "A2"), LONG)
        .await
        .expect("a new WAL");
    let ids: Vec<String> = m
        .wals()
        .await
        .expect("wals")
        .into_iter()
        .map(|w| w.wal_id)
        .collect();
    assert_eq!(ids, vec!["A2", "B"], "the sealed WAL is forgotten");
    // A2 holds data nobody recovered: switching to yet another WAL is refused.
    match m.register_broker(&with_wal(1, "A3"), LONG).await {
        Err(MetaError::WalMissing {
            node_id: 1,
            wal_id,
            path,
        }) => {
            assert_eq!((wal_id.as_str(), path.as_str()), ("A2", "/wal/1"))
        }
        other => panic!("a second WAL replaced one not recovered: {other:?}"),
    }
    // Registering again with the same WAL (a restart) claims it for the new incarnation.
    let again = m
        .register_broker(&with_wal(1, "A2"), LONG)
        .await
        .expect("restart");
    let a2 = m
        .wals()
        .await
        .expect("wals")
        .into_iter()
        .find(|w| w.wal_id == "A2")
        .expect("A2");
    assert_eq!(a2.incarnation, again.incarnation);
}

/// A broker without a WAL file (its partitions on the object WAL) holds nothing acknowledged that
/// is not committed: fencing it frees its partitions at once, in the same transaction.
pub async fn brokers_without_a_wal_release_their_partitions_when_fenced(m: &dyn MetaStore) {
    m.register_broker(&reg(Some(1)), Duration::from_millis(1))
        .await
        .expect("register without a WAL");
    m.register_broker(&with_wal(2, "B"), Duration::from_millis(1))
        .await
        .expect("register with a WAL");
    m.register_broker(&reg(Some(3)), LONG)
        .await
        .expect("register");
    let t = m
        .create_topic("t", [1; 16], 3, BTreeMap::new())
        .await
        .expect("create");
    let lease = m
        .acquire_controller(3, LONG)
        .await
        .expect("acquire")
        .expect("free");
    m.change_assignments(
        lease,
        &[
            AssignmentChange::Place {
                stream_id: t.streams[0],
                leader: 1,
            },
            AssignmentChange::Place {
                stream_id: t.streams[1],
                leader: 2,
            },
            AssignmentChange::Place {
                stream_id: t.streams[2],
                leader: 3,
            },
        ],
    )
    .await
    .expect("place");
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(
        m.fence_expired_brokers(lease, Duration::ZERO)
            .await
            .expect("fence"),
        vec![1, 2]
    );
    let led: Vec<_> = m
        .assignments()
        .await
        .expect("assignments")
        .into_iter()
        .map(|a| a.leader)
        .collect();
    assert_eq!(
        led,
        vec![None, Some(2), Some(3)],
        "the WAL-less broker's partition is free, the other dead broker's waits for its WAL"
    );
}
