//! [`Catalog`]: topics, partitions, configs, counters and keys.

use std::collections::{BTreeMap, HashSet};

use crate::{Catalog, MetaError};

/// Runs every check of the part, each against a fresh, empty store from `open`.
pub async fn run(open: impl Fn() -> Box<dyn Catalog>) {
    topics_have_streams_and_configs(&*open()).await;
    deleted_topics_do_not_reuse_streams(&*open()).await;
    counters_and_keys(&*open()).await;
    configs_are_replaced_only_if_unchanged(&*open()).await;
}

/// Two writers that read the same configs: the first replace wins, the second learns that it
/// read stale configs (and must read again), and nothing it wrote is stored.
pub async fn configs_are_replaced_only_if_unchanged(m: &dyn Catalog) {
    let read: BTreeMap<String, String> = [("a".to_string(), "1".to_string())].into();
    m.create_topic("t", [9; 16], 1, read.clone())
        .await
        .expect("create");
    let mut first = read.clone();
    first.insert("b".into(), "2".into());
    let mut second = read.clone();
    second.insert("c".into(), "3".into());
    assert!(m
        .replace_topic_configs("t", &read, first.clone())
        .await
        .expect("first"));
    assert!(!m
        .replace_topic_configs("t", &read, second)
        .await
        .expect("second"));
    let stored =
        |ts: Vec<crate::TopicMeta>| ts.into_iter().find(|t| t.name == "t").map(|t| t.configs);
    assert_eq!(
        stored(m.list_topics().await.expect("list")),
        Some(first.clone())
    );
    // Read again, it goes through.
    let mut again = first.clone();
    again.insert("c".into(), "3".into());
    assert!(m
        .replace_topic_configs("t", &first, again.clone())
        .await
        .expect("again"));
    assert_eq!(stored(m.list_topics().await.expect("list")), Some(again));
    assert!(matches!(
        m.replace_topic_configs("nope", &BTreeMap::new(), BTreeMap::new())
            .await,
        Err(MetaError::UnknownTopic(_))
    ));
}

pub async fn topics_have_streams_and_configs(m: &dyn Catalog) {
    let configs: BTreeMap<String, String> = [
        ("retention.ms".to_string(), "1000".to_string()),
        ("odd".to_string(), "a=b\nc\\d".to_string()),
    ]
    .into();
    let a = m
        .create_topic("a", [1; 16], 3, configs.clone())
        .await
        .expect("create");
    assert_eq!(a.streams.len(), 3);
    assert_eq!(a.configs, configs);
    assert!(matches!(
        m.create_topic("a", [2; 16], 1, BTreeMap::new()).await,
        Err(MetaError::TopicExists(_))
    ));
    let b = m
        .create_topic("b", [2; 16], 1, BTreeMap::new())
        .await
        .expect("create");
    let all: Vec<u64> = a.streams.iter().chain(&b.streams).copied().collect();
    let unique: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(unique.len(), 4, "every partition has its own stream");
    let a2 = m.add_partitions("a", 5).await.expect("grow");
    assert_eq!(&a2.streams[..3], &a.streams[..]);
    assert_eq!(a2.streams.len(), 5);
    assert!(matches!(
        m.add_partitions("a", 2).await,
        Err(MetaError::InvalidPartitions { current: 5, .. })
    ));
    assert!(matches!(
        m.add_partitions("a", 5).await,
        Err(MetaError::InvalidPartitions { current: 5, .. })
    ));
    assert!(matches!(
        m.add_partitions("nope", 5).await,
        Err(MetaError::UnknownTopic(_))
    ));
    m.set_topic_configs("b", configs.clone())
        .await
        .expect("configs");
    assert!(matches!(
        m.set_topic_configs("nope", configs.clone()).await,
        Err(MetaError::UnknownTopic(_))
    ));
    let topics = m.list_topics().await.expect("list");
    assert_eq!(
        topics.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        vec!["a", "b"]
    );
    assert_eq!(topics[0].streams, a2.streams);
    assert_eq!(topics[1].configs, configs);
    assert_eq!(topics[1].topic_id, [2; 16]);
}

pub async fn deleted_topics_do_not_reuse_streams(m: &dyn Catalog) {
    let a = m
        .create_topic("a", [1; 16], 2, BTreeMap::new())
        .await
        .expect("create");
    assert_eq!(m.delete_topic("a").await.expect("delete"), a);
    assert!(matches!(
        m.delete_topic("a").await,
        Err(MetaError::UnknownTopic(_))
    ));
    assert!(m.list_topics().await.expect("list").is_empty());
    let again = m
        .create_topic("a", [3; 16], 2, BTreeMap::new())
        .await
        .expect("recreate");
    assert!(again.streams.iter().all(|s| !a.streams.contains(s)));
    assert_eq!(again.topic_id, [3; 16]);
}

pub async fn counters_and_keys(m: &dyn Catalog) {
    let a = m.allocate_ids("producer", 1000).await.expect("ids");
    let b = m.allocate_ids("producer", 1000).await.expect("ids");
    assert_eq!(b, a + 1000);
    // Counters are independent.
    let c = m.allocate_ids("other", 1).await.expect("ids");
    assert_eq!(m.allocate_ids("other", 1).await.expect("ids"), c + 1);
    assert_eq!(m.allocate_ids("producer", 1).await.expect("ids"), b + 1000);
    assert_eq!(m.get_or_init("cluster.id", "x").await.expect("kv"), "x");
    assert_eq!(m.get_or_init("cluster.id", "y").await.expect("kv"), "x");
    assert_eq!(m.get_or_init("other", "y").await.expect("kv"), "y");
    assert_eq!(m.get_value("unset").await.expect("kv"), None);
    m.set_value("zones.cidrs", "10.0.0.0/8 a")
        .await
        .expect("kv");
    m.set_value("zones.cidrs", "10.1.0.0/16 b")
        .await
        .expect("kv");
    assert_eq!(
        m.get_value("zones.cidrs").await.expect("kv").as_deref(),
        Some("10.1.0.0/16 b")
    );
    assert_eq!(
        m.get_value("cluster.id").await.expect("kv").as_deref(),
        Some("x")
    );
}
