//! [`GroupOffsets`]: consumer groups' committed offsets.

use crate::{GroupOffset, GroupOffsets};

/// Runs every check of the part, each against a fresh, empty store from `open`.
pub async fn run(open: impl Fn() -> Box<dyn GroupOffsets>) {
    offsets_commit_fetch_and_delete(&*open()).await;
}

pub async fn offsets_commit_fetch_and_delete(m: &dyn GroupOffsets) {
    let o = |topic: &str, partition: u32, offset: i64| GroupOffset {
        topic: topic.to_string(),
        partition,
        offset,
        leader_epoch: -1,
        metadata: Some("m".into()),
        commit_ms: 5,
    };
    assert!(m.fetch_offsets("g").await.expect("fetch").is_empty());
    m.commit_offsets("g", vec![o("t", 1, 20), o("t", 0, 10)])
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
    let no_metadata = GroupOffset {
        metadata: None,
        leader_epoch: 7,
        ..o("u", 1, 2)
    };
    m.commit_offsets("h", vec![no_metadata.clone()])
        .await
        .expect("commit");
    assert_eq!(
        m.fetch_offsets("h").await.expect("fetch"),
        vec![o("u", 0, 1), no_metadata]
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
    assert_eq!(
        m.offset_groups().await.expect("groups"),
        vec!["h".to_string()]
    );
}
