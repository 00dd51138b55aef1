//! [`ShareStates`]: share-partitions' states, claimed by leader epoch, written whole, reset by
//! state epoch.

use crate::{Claim, DeliveryState, MetaError, ShareBatch, ShareState, ShareStates};

/// Runs every check of the part, each against a fresh, empty store from `open`.
pub async fn run(open: impl Fn() -> Box<dyn ShareStates>) {
    a_first_claim_creates_the_state_at_the_start_offset(&*open()).await;
    a_write_round_trips_every_batch(&*open()).await;
    a_higher_leader_epoch_fences_the_older_leader(&*open()).await;
    a_reset_fences_writers_of_the_earlier_state_epoch(&*open()).await;
    the_start_offset_never_goes_back(&*open()).await;
    an_invalid_state_is_refused_and_writes_nothing(&*open()).await;
    nothing_is_written_to_a_state_that_was_never_claimed(&*open()).await;
    states_are_listed_and_deleted_by_group_and_topic(&*open()).await;
}

fn batch(first: i64, last: i64, state: DeliveryState, count: i16) -> ShareBatch {
    ShareBatch {
        first_offset: first,
        last_offset: last,
        state,
        delivery_count: count,
    }
}

async fn claimed(m: &dyn ShareStates, topic: &str, epoch: i32, start: i64) -> ShareState {
    match m
        .claim_share_state("g", topic, 0, epoch, start)
        .await
        .expect("claim")
    {
        Claim::Claimed(s) => s,
        other => panic!("claim at epoch {epoch}: {other:?}"),
    }
}

pub async fn a_first_claim_creates_the_state_at_the_start_offset(m: &dyn ShareStates) {
    assert_eq!(m.read_share_state("g", "t", 0).await.expect("read"), None);
    let s = claimed(m, "t", 3, 42).await;
    let want = ShareState {
        state_epoch: 0,
        leader_epoch: 3,
        start_offset: 42,
        batches: vec![],
    };
    assert_eq!(s, want);
    assert_eq!(
        m.read_share_state("g", "t", 0).await.expect("read"),
        Some(want)
    );
    // A later claim keeps the stored start offset: only the first one sets it.
    let again = claimed(m, "t", 4, 1000).await;
    assert_eq!((again.start_offset, again.leader_epoch), (42, 4));
}

pub async fn a_write_round_trips_every_batch(m: &dyn ShareStates) {
    let s = claimed(m, "t", 1, 0).await;
    let written = ShareState {
        start_offset: 10,
        batches: vec![
            batch(10, 19, DeliveryState::Acknowledged, 1),
            batch(20, 20, DeliveryState::Archived, 5),
            batch(25, 1 << 40, DeliveryState::Available, i16::MAX),
        ],
        ..s
    };
    assert!(m
        .write_share_state("g", "t", 0, &written)
        .await
        .expect("write"));
    assert_eq!(
        m.read_share_state("g", "t", 0).await.expect("read"),
        Some(written.clone())
    );
    // Other partitions, topics and groups are apart.
    assert_eq!(m.read_share_state("g", "t", 1).await.expect("read"), None);
    assert_eq!(m.read_share_state("h", "t", 0).await.expect("read"), None);
    assert_eq!(m.read_share_state("g", "u", 0).await.expect("read"), None);
}

pub async fn a_higher_leader_epoch_fences_the_older_leader(m: &dyn ShareStates) {
    let old = claimed(m, "t", 1, 0).await;
    let new = claimed(m, "t", 2, 0).await;
    let stale = ShareState {
        start_offset: 5,
        ..old
    };
    assert!(
        !m.write_share_state("g", "t", 0, &stale)
            .await
            .expect("stale write"),
        "a leader of epoch 1 writes after epoch 2 claimed the state"
    );
    assert_eq!(
        m.claim_share_state("g", "t", 0, 1, 0).await.expect("claim"),
        Claim::Fenced { leader_epoch: 2 }
    );
    assert_eq!(
        m.read_share_state("g", "t", 0).await.expect("read"),
        Some(new.clone()),
        "nothing changed"
    );
    let next = ShareState {
        start_offset: 7,
        ..new
    };
    assert!(m
        .write_share_state("g", "t", 0, &next)
        .await
        .expect("write"));
}

pub async fn a_reset_fences_writers_of_the_earlier_state_epoch(m: &dyn ShareStates) {
    let s = ShareState {
        start_offset: 10,
        batches: vec![batch(10, 12, DeliveryState::Acknowledged, 1)],
        ..claimed(m, "t", 1, 0).await
    };
    assert!(m.write_share_state("g", "t", 0, &s).await.expect("write"));
    let reset = m.reset_share_state("g", "t", 0, 3).await.expect("reset");
    assert_eq!(
        reset,
        ShareState {
            state_epoch: 1,
            leader_epoch: 1,
            start_offset: 3,
            batches: vec![],
        },
        "a reset may move the start back, drops the batches and keeps the leader epoch"
    );
    let late = ShareState {
        start_offset: 13,
        batches: vec![],
        ..s
    };
    assert!(
        !m.write_share_state("g", "t", 0, &late)
            .await
            .expect("late write"),
        "the leader's state of epoch 0 is out of date after the reset"
    );
    assert_eq!(
        m.read_share_state("g", "t", 0).await.expect("read"),
        Some(reset)
    );
    // A reset of a share-partition never seen creates it.
    let fresh = m.reset_share_state("g", "u", 2, 8).await.expect("reset");
    assert_eq!((fresh.state_epoch, fresh.start_offset), (0, 8));
}

pub async fn the_start_offset_never_goes_back(m: &dyn ShareStates) {
    let s = ShareState {
        start_offset: 10,
        ..claimed(m, "t", 1, 0).await
    };
    assert!(m.write_share_state("g", "t", 0, &s).await.expect("write"));
    let back = ShareState {
        start_offset: 9,
        ..s.clone()
    };
    assert!(!m
        .write_share_state("g", "t", 0, &back)
        .await
        .expect("write"));
    assert_eq!(
        m.read_share_state("g", "t", 0).await.expect("read"),
        Some(s)
    );
}

pub async fn an_invalid_state_is_refused_and_writes_nothing(m: &dyn ShareStates) {
    let s = claimed(m, "t", 1, 0).await;
    let cases = [
        vec![batch(5, 4, DeliveryState::Archived, 1)],
        vec![
            batch(0, 5, DeliveryState::Archived, 1),
            batch(5, 6, DeliveryState::Acknowledged, 1),
        ],
        vec![batch(0, 0, DeliveryState::Available, -1)],
    ];
    for batches in cases {
        let bad = ShareState {
            batches: batches.clone(),
            ..s.clone()
        };
        assert!(
            matches!(
                m.write_share_state("g", "t", 0, &bad).await,
                Err(MetaError::InvalidShareState(_))
            ),
            "{batches:?} was not refused"
        );
    }
    let below = ShareState {
        start_offset: 10,
        batches: vec![batch(9, 12, DeliveryState::Acknowledged, 1)],
        ..s.clone()
    };
    assert!(matches!(
        m.write_share_state("g", "t", 0, &below).await,
        Err(MetaError::InvalidShareState(_))
    ));
    assert_eq!(
        m.read_share_state("g", "t", 0).await.expect("read"),
        Some(s)
    );
}

pub async fn nothing_is_written_to_a_state_that_was_never_claimed(m: &dyn ShareStates) {
    let s = ShareState {
        state_epoch: 0,
        leader_epoch: 1,
        start_offset: 0,
        batches: vec![],
    };
    assert!(!m.write_share_state("g", "t", 0, &s).await.expect("write"));
    assert_eq!(m.read_share_state("g", "t", 0).await.expect("read"), None);
}

pub async fn states_are_listed_and_deleted_by_group_and_topic(m: &dyn ShareStates) {
    for (group, topic, partition) in [
        ("g", "b", 1),
        ("g", "b", 0),
        ("g", "a", 3),
        ("g", "B", 0),
        ("h", "a", 0),
    ] {
        m.claim_share_state(group, topic, partition, 0, partition as i64)
            .await
            .expect("claim");
    }
    let s = |t: &str, p: i32| (t.to_string(), p, p as i64);
    assert_eq!(
        listed(m, "g").await,
        vec![s("B", 0), s("a", 3), s("b", 0), s("b", 1)],
        "by topic in byte order, then partition"
    );
    assert_eq!(
        m.delete_share_states("g", Some("b")).await.expect("delete"),
        2
    );
    assert_eq!(listed(m, "g").await, vec![s("B", 0), s("a", 3)]);
    assert_eq!(m.delete_share_states("g", None).await.expect("delete"), 2);
    assert!(listed(m, "g").await.is_empty());
    assert_eq!(
        listed(m, "h").await,
        vec![s("a", 0)],
        "another group's stay"
    );
    assert_eq!(m.delete_share_states("x", None).await.expect("delete"), 0);
}

async fn listed(m: &dyn ShareStates, group: &str) -> Vec<(String, i32, i64)> {
    m.share_states(group)
        .await
        .expect("list")
        .into_iter()
        .map(|(t, p, s)| (t, p, s.start_offset))
        .collect()
}
