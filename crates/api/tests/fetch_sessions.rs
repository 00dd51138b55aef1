//! Incremental fetch sessions (KIP-227) through the real Fetch handler: a full fetch at epoch 0
//! opens a session; the session's fetches name only the partitions whose position changed and
//! are answered with only the partitions that have something to tell, long polls included;
//! a wrong epoch or an unknown session is refused; forgotten partitions leave the session.

mod common;

use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use common::{env, topic, Env};

const PARTITIONS: i32 = 20;

struct Fetch<'a> {
    version: i16,
    session: (i32, i32),
    /// (partition, fetch offset) of the topic `many`.
    parts: &'a [(i32, i64)],
    forget: &'a [i32],
    max_wait_ms: i32,
    topic_id: Uuid,
}

async fn fetch(e: &Env, f: Fetch<'_>) -> FetchResponse {
    let mut t = FetchTopic::default().with_partitions(
        f.parts
            .iter()
            .map(|&(p, offset)| {
                FetchPartition::default()
                    .with_partition(p)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1 << 20)
            })
            .collect(),
    );
    let mut forgotten = ForgottenTopic::default().with_partitions(f.forget.to_vec());
    if f.version >= 13 {
        t.topic_id = f.topic_id;
        forgotten.topic_id = f.topic_id;
    } else {
        t.topic = topic("many");
        forgotten.topic = topic("many");
    }
    let r = FetchRequest::default()
        .with_max_wait_ms(f.max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(50 << 20)
        .with_session_id(f.session.0)
        .with_session_epoch(f.session.1)
        .with_topics(if f.parts.is_empty() { vec![] } else { vec![t] })
        .with_forgotten_topics_data(if f.forget.is_empty() {
            vec![]
        } else {
            vec![forgotten]
        });
    common::fetch_response(e, r, f.version).await
}

/// (partition, record bytes, high watermark) of every partition answered.
fn answered(f: &FetchResponse) -> Vec<(i32, usize, i64)> {
    f.responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| {
            assert_eq!(p.error_code, 0, "partition {}", p.partition_index);
            (
                p.partition_index,
                p.records.as_ref().map_or(0, |r| r.len()),
                p.high_watermark,
            )
        })
        .collect()
}

async fn produce(e: &Env, partition: i32) -> i64 {
    let p = e.topics.partition("many", partition).expect("partition");
    p.produce(&common::batch(2)).await.expect("produce");
    p.offsets().1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_names_and_answers_only_what_changed() {
    let e = env().await;
    e.topics
        .create("many", PARTITIONS, Default::default(), false)
        .await
        .expect("create");
    let topic_id = Uuid::from_bytes(e.topics.get("many").expect("topic").id);
    for i in 0..PARTITIONS {
        common::open_partition(&e.topics, "many", i).await;
        produce(&e, i).await;
    }
    let all: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, 0)).collect();
    let f = |session, parts, forget, max_wait_ms| Fetch {
        version: 12,
        session,
        parts,
        forget,
        max_wait_ms,
        topic_id,
    };

    // Epoch 0: a full fetch that opens a session, answered in full.
    let r = fetch(&e, f((0, 0), &all, &[], 0)).await;
    let id = r.session_id;
    assert_ne!(id, 0, "a session was made");
    let got = answered(&r);
    assert_eq!(got.len(), PARTITIONS as usize);
    assert!(
        got.iter().all(|&(_, bytes, hw)| bytes > 0 && hw == 2),
        "{got:?}"
    );

    // Epoch 1: every position moved to the end; nothing new, nothing to tell.
    let moved: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, 2)).collect();
    let r = fetch(&e, f((id, 1), &moved, &[], 0)).await;
    assert_eq!((r.error_code, r.session_id), (0, id));
    assert_eq!(answered(&r), vec![], "nothing changed");

    // Epoch 2 names nothing: the session still reads all of them, and answers the one with
    // new records.
    produce(&e, 7).await;
    let r = fetch(&e, f((id, 2), &[], &[], 0)).await;
    let got = answered(&r);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].0, got[0].2), (7, 4));
    assert!(got[0].1 > 0);

    // Epoch 3, a long poll: it waits for records, and answers only where they came.
    let producer = {
        let topics = std::sync::Arc::clone(&e.topics);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let p = topics.partition("many", 12).expect("partition");
            p.produce(&common::batch(2)).await.expect("produce");
        })
    };
    let started = Instant::now();
    let r = fetch(&e, f((id, 3), &[(7, 4)], &[], 10_000)).await;
    producer.await.expect("producer");
    let got = answered(&r);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].0, got[0].2), (12, 4));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woken by the records"
    );

    // A retried epoch is refused, and so is an unknown session; the session survives both.
    let r = fetch(&e, f((id, 3), &[], &[], 0)).await;
    assert_eq!(r.error_code, ResponseError::InvalidFetchSessionEpoch.code());
    assert!(r.responses.is_empty());
    let r = fetch(&e, f((id ^ 1, 4), &[], &[], 0)).await;
    assert_eq!(r.error_code, ResponseError::FetchSessionIdNotFound.code());

    // Forgotten partitions leave the session: new records there are not answered.
    produce(&e, 3).await;
    produce(&e, 5).await;
    let r = fetch(&e, f((id, 4), &[(12, 4)], &[3], 0)).await;
    let got: Vec<i32> = answered(&r).iter().map(|a| a.0).collect();
    assert_eq!(got, vec![5]);

    // A session of topic ids (v13) refuses a request of names on it.
    let r = fetch(
        &e,
        Fetch {
            version: 13,
            ..f((0, 0), &all, &[], 0)
        },
    )
    .await;
    let by_id = r.session_id;
    assert_ne!(by_id, 0);
    assert_eq!(answered(&r).len(), PARTITIONS as usize);
    let r = fetch(
        &e,
        Fetch {
            version: 13,
            ..f((by_id, 1), &moved, &[], 0)
        },
    )
    .await;
    let got: Vec<i32> = answered(&r).iter().map(|a| a.0).collect();
    // Partitions 3, 5, 7 and 12 have 4 records: their positions at 2 read the new ones.
    assert_eq!(got, vec![3, 5, 7, 12]);
    let r = fetch(&e, f((by_id, 2), &[], &[], 0)).await;
    assert_eq!(r.error_code, ResponseError::FetchSessionTopicIdError.code());

    // Epoch -1 closes the session and answers in full, without one.
    let r = fetch(&e, f((id, -1), &all, &[], 0)).await;
    assert_eq!(r.session_id, 0);
    assert_eq!(answered(&r).len(), PARTITIONS as usize);
    let r = fetch(&e, f((id, 5), &[], &[], 0)).await;
    assert_eq!(r.error_code, ResponseError::FetchSessionIdNotFound.code());
    assert_eq!(e.broker.fetch_sessions.len(), 1, "the v13 session is left");

    e.topics.close().await;
    e.engine.close().await.expect("close");
}

/// librdkafka fetches without a session (epoch -1): answered in full every time, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_without_a_session_is_answered_in_full() {
    let e = env().await;
    e.topics
        .create("many", 4, Default::default(), false)
        .await
        .expect("create");
    for i in 0..4 {
        common::open_partition(&e.topics, "many", i).await;
    }
    let parts: Vec<(i32, i64)> = (0..4).map(|p| (p, 0)).collect();
    for _ in 0..3 {
        let r = fetch(
            &e,
            Fetch {
                version: 12,
                session: (0, -1),
                parts: &parts,
                forget: &[],
                max_wait_ms: 0,
                topic_id: Uuid::nil(),
            },
        )
        .await;
        assert_eq!(r.session_id, 0);
        assert_eq!(answered(&r).len(), 4);
    }
    assert!(e.broker.fetch_sessions.is_empty());
    e.topics.close().await;
    e.engine.close().await.expect("close");
}

/// A fetch parked on a partition that leaves this broker (closed: moved to another broker) is
/// answered NOT_LEADER_OR_FOLLOWER as the partition leaves, not when its max wait runs out: the
/// consumer's gap in a partition move was the whole `fetch.max.wait.ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_on_a_partition_that_leaves_is_answered_as_it_leaves() {
    let e = env().await;
    e.topics
        .create("many", 1, Default::default(), false)
        .await
        .expect("create");
    common::open_partition(&e.topics, "many", 0).await;
    let end = produce(&e, 0).await;
    let stream = e.topics.get("many").expect("topic").streams[0];
    let f = Fetch {
        version: 12,
        session: (0, -1),
        parts: &[(0, end)],
        forget: &[],
        max_wait_ms: 30_000,
        topic_id: Uuid::nil(),
    };
    let started = Instant::now();
    let (answer, closed) = tokio::join!(fetch(&e, f), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        e.topics.close_partition(stream).await
    });
    closed.expect("close");
    let waited = started.elapsed();
    let p = &answer.responses[0].partitions[0];
    assert_eq!(p.error_code, ResponseError::NotLeaderOrFollower.code());
    assert!(
        waited < Duration::from_secs(10),
        "answered after {waited:?}, with a max wait of 30 s"
    );
}
