//! [`Transactions`]: transactional ids' state and staged group offsets.

use crate::{GroupOffset, GroupOffsets, MetaError, Transactions, TxnRecord, TxnState};

/// What the checks need: the part itself and the committed offsets staged ones move into.
pub trait TxnStore: Transactions + GroupOffsets {}

impl<T: Transactions + GroupOffsets + ?Sized> TxnStore for T {}

/// Runs every check of the part, each against a fresh, empty store from `open`.
pub async fn run<S: TxnStore + ?Sized>(open: impl Fn() -> Box<S>) {
    records_are_written_by_version(&*open()).await;
    offsets_are_staged_then_committed_or_dropped(&*open()).await;
    staging_needs_the_ongoing_transaction(&*open()).await;
}

fn record(id: &str) -> TxnRecord {
    TxnRecord {
        transactional_id: id.to_string(),
        producer_id: 1000,
        producer_epoch: 0,
        last_producer_id: -1,
        last_producer_epoch: -1,
        state: TxnState::Empty,
        timeout_ms: 60_000,
        start_ms: 0,
        update_ms: 1,
        partitions: vec![],
        groups: vec![],
        next_producer_id: -1,
        version: 0,
    }
}

fn offset(topic: &str, partition: u32, offset: i64) -> GroupOffset {
    GroupOffset {
        topic: topic.to_string(),
        partition,
        offset,
        leader_epoch: -1,
        metadata: Some(String::new()),
        commit_ms: 7,
    }
}

pub async fn records_are_written_by_version<S: TxnStore + ?Sized>(m: &S) {
    assert!(m.load_transaction("a").await.expect("load").is_none());
    let mut a = record("a");
    a.version = m.save_transaction(&a).await.expect("insert");
    assert_eq!(a.version, 1);
    assert_eq!(
        m.load_transaction("a").await.expect("load"),
        Some(a.clone())
    );
    // A second insert (another coordinator that read nothing) loses.
    assert!(matches!(
        m.save_transaction(&record("a")).await,
        Err(MetaError::TxnConflict(_))
    ));
    let mut b = record("b");
    b.state = TxnState::Ongoing;
    b.partitions = vec![("t".into(), 0), ("u".into(), 3)];
    b.groups = vec!["g".into()];
    b.version = m.save_transaction(&b).await.expect("insert b");
    // An update names the version it read; a stale one loses and changes nothing.
    let stale = a.clone();
    a.producer_epoch = 1;
    a.version = m.save_transaction(&a).await.expect("update");
    assert_eq!(a.version, 2);
    assert!(matches!(
        m.save_transaction(&stale).await,
        Err(MetaError::TxnConflict(_))
    ));
    assert_eq!(
        m.load_transaction("a").await.expect("load"),
        Some(a.clone())
    );
    assert_eq!(
        m.list_transactions().await.expect("list"),
        vec![a.clone(), b]
    );
    assert!(matches!(
        m.delete_transaction("a", 1).await,
        Err(MetaError::TxnConflict(_))
    ));
    m.delete_transaction("a", a.version).await.expect("delete");
    assert!(m.load_transaction("a").await.expect("load").is_none());
}

pub async fn offsets_are_staged_then_committed_or_dropped<S: TxnStore + ?Sized>(m: &S) {
    m.commit_offsets("g", vec![offset("t", 0, 5), offset("t", 1, 5)])
        .await
        .expect("commit");
    let mut r = record("tx");
    r.state = TxnState::Ongoing;
    r.groups = vec!["g".into()];
    r.version = m.save_transaction(&r).await.expect("save");
    m.stage_txn_offsets("tx", 1000, 0, "g", vec![offset("t", 0, 10)])
        .await
        .expect("stage");
    m.stage_txn_offsets(
        "tx",
        1000,
        0,
        "g",
        vec![offset("t", 0, 12), offset("t", 2, 3)],
    )
    .await
    .expect("stage again");
    // Staged offsets are not committed ones, and say which partitions are unstable.
    assert_eq!(
        m.fetch_offsets("g").await.expect("fetch"),
        vec![offset("t", 0, 5), offset("t", 1, 5)]
    );
    assert_eq!(
        m.staged_offsets("g").await.expect("staged"),
        vec![("t".to_string(), 0), ("t".to_string(), 2)]
    );
    assert!(m.staged_offsets("h").await.expect("staged").is_empty());

    r.state = TxnState::CompleteCommit;
    r.version = m.complete_transaction(&r, true).await.expect("commit");
    assert_eq!(
        m.fetch_offsets("g").await.expect("fetch"),
        vec![offset("t", 0, 12), offset("t", 1, 5), offset("t", 2, 3)]
    );
    assert!(m.staged_offsets("g").await.expect("staged").is_empty());

    // An aborted transaction's offsets are dropped.
    r.state = TxnState::Ongoing;
    r.version = m.save_transaction(&r).await.expect("save");
    m.stage_txn_offsets("tx", 1000, 0, "g", vec![offset("t", 1, 99)])
        .await
        .expect("stage");
    r.state = TxnState::CompleteAbort;
    let stale = r.clone();
    r.version = m.complete_transaction(&r, false).await.expect("abort");
    assert_eq!(
        m.fetch_offsets("g").await.expect("fetch"),
        vec![offset("t", 0, 12), offset("t", 1, 5), offset("t", 2, 3)]
    );
    assert!(m.staged_offsets("g").await.expect("staged").is_empty());
    // A stale completion changes nothing.
    assert!(matches!(
        m.complete_transaction(&stale, true).await,
        Err(MetaError::TxnConflict(_))
    ));
}

pub async fn staging_needs_the_ongoing_transaction<S: TxnStore + ?Sized>(m: &S) {
    let refused = |r: Result<(), MetaError>| matches!(r, Err(MetaError::TxnConflict(_)));
    // No record at all.
    assert!(refused(
        m.stage_txn_offsets("tx", 1000, 0, "g", vec![offset("t", 0, 1)])
            .await
    ));
    let mut r = record("tx");
    r.groups = vec!["g".into()];
    r.version = m.save_transaction(&r).await.expect("save");
    // Not ongoing.
    assert!(refused(
        m.stage_txn_offsets("tx", 1000, 0, "g", vec![offset("t", 0, 1)])
            .await
    ));
    r.state = TxnState::Ongoing;
    r.version = m.save_transaction(&r).await.expect("save");
    // Another producer, an older epoch, a group not added.
    assert!(refused(
        m.stage_txn_offsets("tx", 1001, 0, "g", vec![offset("t", 0, 1)])
            .await
    ));
    r.producer_epoch = 1;
    r.version = m.save_transaction(&r).await.expect("save");
    assert!(refused(
        m.stage_txn_offsets("tx", 1000, 0, "g", vec![offset("t", 0, 1)])
            .await
    ));
    assert!(refused(
        m.stage_txn_offsets("tx", 1000, 1, "h", vec![offset("t", 0, 1)])
            .await
    ));
    m.stage_txn_offsets("tx", 1000, 1, "g", vec![offset("t", 0, 1)])
        .await
        .expect("stage");
    assert!(m.staged_offsets("h").await.expect("staged").is_empty());
    assert_eq!(m.staged_offsets("g").await.expect("staged").len(), 1);
}
