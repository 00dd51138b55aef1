//! Metadata of a topic created just now: it appears whole, every partition with a leader, or
//! not yet (retriable), never with some partitions led and others not. librdkafka 2.16, shown a
//! half-placed topic, took it as known and did not ask again for minutes: a client that looked
//! right after the creation could not find the partitions it had seen without a leader.

mod common;

use std::time::{Duration, Instant};

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use common::{call, env, s};

async fn metadata_of(e: &common::Env, topic: &str) -> MetadataResponse {
    let r = MetadataRequest::default()
        .with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(TopicName(s(topic))))
        ]))
        .with_allow_auto_topic_creation(false);
    match call(e, ApiKey::Metadata, 12, RequestKind::Metadata(r)).await {
        ResponseKind::Metadata(m) => m,
        other => panic!("not a Metadata answer: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_topic_appears_whole_or_not_yet() {
    let e = env().await;
    for round in 0..5 {
        let name = format!("fresh-{round}");
        e.topics
            .create(&name, 16, Default::default(), false)
            .await
            .expect("create");
        let t0 = Instant::now();
        let mut not_ready = 0;
        loop {
            let m = metadata_of(&e, &name).await;
            let t = &m.topics[0];
            if t.error_code == ResponseError::LeaderNotAvailable.code() {
                assert!(
                    t.partitions.is_empty(),
                    "{name}: not ready, yet partitions shown: {t:?}"
                );
                not_ready += 1;
            } else {
                assert_eq!(t.error_code, 0, "{name}: {t:?}");
                assert_eq!(t.partitions.len(), 16, "{name}: {t:?}");
                let unled: Vec<i32> = t
                    .partitions
                    .iter()
                    .filter(|p| p.error_code != 0 || p.leader_id.0 < 0)
                    .map(|p| p.partition_index)
                    .collect();
                assert!(unled.is_empty(), "{name}: partitions {unled:?} shown without a leader (after {not_ready} not-ready answers)");
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{name} never placed"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}
