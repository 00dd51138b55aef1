//! The behaviour every metadata backend must show, run by each backend's tests.

use std::time::Duration;

use crate::{MetaError, MetaStore, ObjectCommit, RangeCommit};

fn key(id: u64) -> String {
    format!("test/{id}")
}

fn range(stream_id: u64, epoch: u64, start: u64, end: u64) -> RangeCommit {
    RangeCommit {
        stream_id,
        epoch,
        start_offset: start,
        end_offset: end,
        position: start * 10,
        size: (end - start) * 10,
        max_timestamp: end as i64,
    }
}

async fn commit(m: &dyn MetaStore, ranges: Vec<RangeCommit>) -> Result<u64, MetaError> {
    let id = m.prepare_object(key).await?;
    m.commit_objects(vec![ObjectCommit {
        object_id: id,
        size: 1000,
        ranges,
    }])
    .await?;
    Ok(id)
}

/// Runs every check, each against a fresh, empty store from `open`.
pub async fn run_all(open: impl Fn() -> Box<dyn MetaStore>) {
    epochs_fence_stale_leaders(&*open()).await;
    commits_must_be_contiguous(&*open()).await;
    commits_are_atomic(&*open()).await;
    ranges_are_found_by_offset(&*open()).await;
    trimming_drops_ranges_and_frees_objects(&*open()).await;
    orphans_are_found(&*open()).await;
    topics_have_streams_and_configs(&*open()).await;
    group_offsets_and_snapshots(&*open()).await;
    compaction_replaces_ranges(&*open()).await;
}

pub async fn compaction_replaces_ranges(m: &dyn MetaStore) {
    m.open_stream(1, 1).await.expect("open");
    m.open_stream(2, 1).await.expect("open");
    let shared = commit(m, vec![range(1, 1, 0, 10), range(2, 1, 0, 10)])
        .await
        .expect("a");
    let own = commit(m, vec![range(1, 1, 10, 20)]).await.expect("b");
    commit(m, vec![range(1, 1, 20, 30)]).await.expect("c");
    let compacted = |start, end| async move {
        let id = m.prepare_object(key).await.expect("prepare");
        let r = ObjectCommit {
            object_id: id,
            size: 500,
            ranges: vec![RangeCommit {
                position: 0,
                ..range(1, 1, start, end)
            }],
        };
        (id, m.replace_ranges(r).await)
    };
    // Not a tiling of existing ranges: refused.
    assert!(matches!(
        compacted(5, 20).await.1,
        Err(MetaError::Discontinuity { .. })
    ));
    assert!(matches!(
        compacted(0, 25).await.1,
        Err(MetaError::Discontinuity { .. })
    ));
    let (id, r) = compacted(0, 20).await;
    r.expect("compaction");
    let ranges = m.ranges(1, 0, 10).await.expect("ranges");
    assert_eq!(
        ranges
            .iter()
            .map(|r| (r.start_offset, r.end_offset))
            .collect::<Vec<_>>(),
        vec![(0, 20), (20, 30)]
    );
    assert_eq!(ranges[0].object_id, id);
    // `own` is unreferenced now; `shared` still holds stream 2's data.
    let gone: Vec<u64> = m
        .deletable_objects(Duration::ZERO, Duration::from_secs(3600))
        .await
        .expect("deletable")
        .iter()
        .map(|o| o.object_id)
        .collect();
    assert_eq!(gone, vec![own]);
    assert!(!gone.contains(&shared));
    // A stale leader cannot compact.
    m.open_stream(1, 2).await.expect("new epoch");
    assert!(matches!(
        compacted(20, 30).await.1,
        Err(MetaError::Fenced { .. })
    ));
}

pub async fn topics_have_streams_and_configs(m: &dyn MetaStore) {
    use std::collections::BTreeMap;
    let configs: BTreeMap<String, String> =
        [("retention.ms".to_string(), "1000".to_string())].into();
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
    let unique: std::collections::HashSet<u64> = all.iter().copied().collect();
    assert_eq!(unique.len(), 4, "every partition has its own stream");
    let a2 = m.add_partitions("a", 5).await.expect("grow");
    assert_eq!(&a2.streams[..3], &a.streams[..]);
    assert_eq!(a2.streams.len(), 5);
    assert!(matches!(
        m.add_partitions("a", 2).await,
        Err(MetaError::InvalidPartitions { current: 5, .. })
    ));
    m.set_topic_configs("b", configs.clone())
        .await
        .expect("configs");
    let topics = m.list_topics().await.expect("list");
    assert_eq!(
        topics.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        vec!["a", "b"]
    );
    assert_eq!(topics[1].configs, configs);
    assert_eq!(topics[1].topic_id, [2; 16]);

    // Data of a deleted topic becomes deletable, and its stream ids are not reused.
    let s = a2.streams[0];
    m.open_stream(s, 1).await.expect("open");
    commit(m, vec![range(s, 1, 0, 10)]).await.expect("commit");
    m.delete_topic("a").await.expect("delete");
    assert!(matches!(
        m.delete_topic("a").await,
        Err(MetaError::UnknownTopic(_))
    ));
    assert_eq!(
        m.deletable_objects(Duration::ZERO, Duration::from_secs(3600))
            .await
            .expect("deletable")
            .len(),
        1
    );
    let c = m
        .create_topic("a", [3; 16], 1, BTreeMap::new())
        .await
        .expect("recreate");
    assert!(!a2.streams.contains(&c.streams[0]));
    assert_eq!(m.list_topics().await.expect("list").len(), 2);
}

pub async fn group_offsets_and_snapshots(m: &dyn MetaStore) {
    use crate::GroupOffset;
    let o = |topic: &str, partition: u32, offset: i64| GroupOffset {
        topic: topic.to_string(),
        partition,
        offset,
        leader_epoch: -1,
        metadata: Some("m".into()),
        commit_ms: 5,
    };
    m.commit_offsets("g", vec![o("t", 0, 10), o("t", 1, 20)])
        .await
        .expect("commit");
    m.commit_offsets("g", vec![o("t", 0, 15)])
        .await
        .expect("commit");
    m.commit_offsets("h", vec![o("u", 0, 1)])
        .await
        .expect("commit");
    assert_eq!(
        m.fetch_offsets("g").await.expect("fetch"),
        vec![o("t", 0, 15), o("t", 1, 20)]
    );
    assert_eq!(
        m.offset_groups().await.expect("groups"),
        vec!["g".to_string(), "h".to_string()]
    );
    m.delete_offsets("g", Some(vec![("t".into(), 1)]))
        .await
        .expect("delete");
    assert_eq!(
        m.fetch_offsets("g").await.expect("fetch"),
        vec![o("t", 0, 15)]
    );
    m.delete_offsets("g", None).await.expect("delete all");
    assert!(m.fetch_offsets("g").await.expect("fetch").is_empty());

    assert_eq!(m.load_producer_snapshot(1).await.expect("load"), None);
    m.save_producer_snapshot(1, 100, vec![1, 2, 3])
        .await
        .expect("save");
    m.save_producer_snapshot(1, 200, vec![4])
        .await
        .expect("save");
    assert_eq!(
        m.load_producer_snapshot(1).await.expect("load"),
        Some((200, vec![4]))
    );

    let a = m.allocate_ids("producer", 1000).await.expect("ids");
    let b = m.allocate_ids("producer", 1000).await.expect("ids");
    assert_eq!(b, a + 1000);
    assert_eq!(m.get_or_init("cluster.id", "x").await.expect("kv"), "x");
    assert_eq!(m.get_or_init("cluster.id", "y").await.expect("kv"), "x");
}

pub async fn epochs_fence_stale_leaders(m: &dyn MetaStore) {
    let s = m.open_stream(1, 5).await.expect("open");
    assert_eq!((s.epoch, s.start_offset, s.end_offset), (5, 0, 0));
    assert!(matches!(
        m.open_stream(1, 4).await,
        Err(MetaError::Fenced { current: 5, .. })
    ));
    m.open_stream(1, 6).await.expect("newer epoch");
    assert!(matches!(
        commit(m, vec![range(1, 5, 0, 10)]).await,
        Err(MetaError::Fenced {
            epoch: 5,
            current: 6,
            ..
        })
    ));
    commit(m, vec![range(1, 6, 0, 10)])
        .await
        .expect("current epoch commits");
    assert_eq!(
        m.get_stream(1).await.expect("get").map(|s| s.end_offset),
        Some(10)
    );
    assert_eq!(m.get_stream(99).await.expect("get"), None);
}

pub async fn commits_must_be_contiguous(m: &dyn MetaStore) {
    m.open_stream(1, 1).await.expect("open");
    commit(m, vec![range(1, 1, 0, 10)]).await.expect("first");
    assert!(matches!(
        commit(m, vec![range(1, 1, 11, 20)]).await,
        Err(MetaError::Discontinuity {
            expected: 10,
            got: 11,
            ..
        })
    ));
    assert!(matches!(
        commit(m, vec![range(1, 1, 5, 20)]).await,
        Err(MetaError::Discontinuity {
            expected: 10,
            got: 5,
            ..
        })
    ));
    commit(m, vec![range(1, 1, 10, 20)])
        .await
        .expect("contiguous");
    assert!(matches!(
        commit(m, vec![range(7, 1, 0, 1)]).await,
        Err(MetaError::UnknownStream(7))
    ));
}

pub async fn commits_are_atomic(m: &dyn MetaStore) {
    m.open_stream(1, 1).await.expect("open");
    m.open_stream(2, 1).await.expect("open");
    // The second range is bad, so the first must not stick either.
    assert!(commit(m, vec![range(1, 1, 0, 10), range(2, 1, 3, 10)])
        .await
        .is_err());
    assert_eq!(
        m.get_stream(1).await.expect("get").map(|s| s.end_offset),
        Some(0)
    );
    assert!(m.ranges(1, 0, 10).await.expect("ranges").is_empty());
    // A prepared object commits once.
    let id = m.prepare_object(key).await.expect("prepare");
    let o = ObjectCommit {
        object_id: id,
        size: 1,
        ranges: vec![range(1, 1, 0, 10)],
    };
    m.commit_objects(vec![o.clone()]).await.expect("commit");
    assert!(matches!(
        m.commit_objects(vec![o]).await,
        Err(MetaError::UnknownObject(_))
    ));
}

pub async fn ranges_are_found_by_offset(m: &dyn MetaStore) {
    m.open_stream(1, 1).await.expect("open");
    m.open_stream(2, 1).await.expect("open");
    let a = commit(m, vec![range(1, 1, 0, 10), range(2, 1, 0, 5)])
        .await
        .expect("a");
    let b = commit(m, vec![range(1, 1, 10, 30)]).await.expect("b");
    let r = m.ranges(1, 0, 10).await.expect("ranges");
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0].object_id, r[0].start_offset, r[0].end_offset),
        (a, 0, 10)
    );
    assert_eq!(r[0].object_key, key(a));
    assert_eq!((r[0].position, r[0].size, r[0].object_size), (0, 100, 1000));
    assert_eq!((r[1].object_id, r[1].start_offset), (b, 10));
    let r = m.ranges(1, 10, 10).await.expect("ranges");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].object_id, b);
    assert_eq!(
        m.ranges(1, 15, 1).await.expect("ranges")[0].start_offset,
        10
    );
    assert!(m.ranges(1, 30, 10).await.expect("ranges").is_empty());
    assert_eq!(m.ranges(1, 0, 1).await.expect("ranges").len(), 1);
    assert_eq!(m.object_count(1).await.expect("count"), 2);
    assert_eq!(m.object_count(2).await.expect("count"), 1);
}

pub async fn trimming_drops_ranges_and_frees_objects(m: &dyn MetaStore) {
    m.open_stream(1, 1).await.expect("open");
    m.open_stream(2, 1).await.expect("open");
    let shared = commit(m, vec![range(1, 1, 0, 10), range(2, 1, 0, 5)])
        .await
        .expect("a");
    let own = commit(m, vec![range(1, 1, 10, 20)]).await.expect("b");
    commit(m, vec![range(1, 1, 20, 30)]).await.expect("c");

    let s = m.trim_stream(1, 15).await.expect("trim");
    assert_eq!((s.start_offset, s.end_offset), (15, 30));
    // Range 0..10 is gone, 10..20 stays (it holds 15..20).
    let r = m.ranges(1, 0, 10).await.expect("ranges");
    assert_eq!(
        r.iter().map(|r| r.start_offset).collect::<Vec<_>>(),
        vec![10, 20]
    );
    // The shared object still holds stream 2's data.
    assert!(m
        .deletable_objects(Duration::ZERO, Duration::from_secs(3600))
        .await
        .expect("deletable")
        .is_empty());

    // Never backwards.
    assert_eq!(m.trim_stream(1, 5).await.expect("trim").start_offset, 15);

    m.trim_stream(1, 20).await.expect("trim");
    m.trim_stream(2, 5).await.expect("trim");
    let mut gone: Vec<u64> = m
        .deletable_objects(Duration::ZERO, Duration::from_secs(3600))
        .await
        .expect("deletable")
        .iter()
        .map(|o| o.object_id)
        .collect();
    gone.sort();
    assert_eq!(gone, vec![shared, own]);
    // Not before the grace period.
    assert!(m
        .deletable_objects(Duration::from_secs(3600), Duration::from_secs(3600))
        .await
        .expect("deletable")
        .is_empty());
    m.forget_objects(&gone).await.expect("forget");
    assert!(m
        .deletable_objects(Duration::ZERO, Duration::from_secs(3600))
        .await
        .expect("deletable")
        .is_empty());
    assert_eq!(m.ranges(1, 0, 10).await.expect("ranges").len(), 1);
}

pub async fn orphans_are_found(m: &dyn MetaStore) {
    m.open_stream(1, 1).await.expect("open");
    let orphan = m.prepare_object(key).await.expect("prepare");
    let live = commit(m, vec![range(1, 1, 0, 10)]).await.expect("commit");
    assert!(m
        .deletable_objects(Duration::ZERO, Duration::from_secs(3600))
        .await
        .expect("deletable")
        .is_empty());
    let found = m
        .deletable_objects(Duration::ZERO, Duration::ZERO)
        .await
        .expect("deletable");
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].object_id, found[0].key.clone()),
        (orphan, key(orphan))
    );
    // A live object is never forgotten, even if asked.
    m.forget_objects(&[orphan, live]).await.expect("forget");
    assert_eq!(m.ranges(1, 0, 10).await.expect("ranges")[0].object_id, live);
    assert!(m
        .deletable_objects(Duration::ZERO, Duration::ZERO)
        .await
        .expect("deletable")
        .is_empty());
}
