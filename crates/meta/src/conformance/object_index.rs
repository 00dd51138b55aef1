//! [`ObjectIndex`]: streams, commits, ranges, trims, compaction and the life of objects.

use std::time::Duration;

use super::{commit, key, range};
use crate::{MetaError, ObjectCommit, ObjectIndex, RangeCommit};

/// Runs every check of the part, each against a fresh, empty store from `open`.
pub async fn run(open: impl Fn() -> Box<dyn ObjectIndex>) {
    epochs_fence_stale_leaders(&*open()).await;
    epochs_never_go_back(&*open()).await;
    commits_must_be_contiguous(&*open()).await;
    commits_must_be_at_the_current_epoch(&*open()).await;
    commits_refuse_empty_ranges(&*open()).await;
    commits_are_atomic(&*open()).await;
    ranges_are_found_by_offset(&*open()).await;
    trimming_drops_ranges_and_frees_objects(&*open()).await;
    start_offset_never_goes_back(&*open()).await;
    orphans_are_found(&*open()).await;
    compaction_replaces_ranges(&*open()).await;
    objects_being_deleted_cannot_be_committed(&*open()).await;
    deletion_is_retried_until_forgotten(&*open()).await;
    sparse_objects_are_found(&*open()).await;
}

/// Orphan collection and a late commit race for the same prepared object: whichever comes first
/// wins, and the loser is refused, so a committed object never loses its bytes.
pub async fn objects_being_deleted_cannot_be_committed(m: &dyn ObjectIndex) {
    m.open_stream(1, 1).await.expect("open");
    let obj = |id, start, end| ObjectCommit {
        object_id: id,
        size: 100,
        ranges: vec![range(1, 1, start, end)],
    };
    // Collection first: the object is listed for deletion, so its commit must fail.
    let orphan = m.prepare_object(key).await.expect("prepare");
    let listed = m
        .deletable_objects(Duration::ZERO, Duration::ZERO)
        .await
        .expect("deletable");
    assert_eq!(
        listed.iter().map(|o| o.object_id).collect::<Vec<_>>(),
        vec![orphan]
    );
    assert!(matches!(
        m.commit_objects(vec![obj(orphan, 0, 10)]).await,
        Err(MetaError::UnknownObject(id)) if id == orphan
    ));
    assert_eq!(
        m.get_stream(1).await.expect("get").map(|s| s.end_offset),
        Some(0)
    );
    assert!(m.ranges(1, 0, 10).await.expect("ranges").is_empty());
    // Nor may compaction commit it.
    commit(m, vec![range(1, 1, 0, 10)]).await.expect("commit");
    let late = m.prepare_object(key).await.expect("prepare");
    m.deletable_objects(Duration::ZERO, Duration::ZERO)
        .await
        .expect("deletable");
    assert!(matches!(
        m.replace_ranges(obj(late, 0, 10)).await,
        Err(MetaError::UnknownObject(id)) if id == late
    ));
    // Commit first: the object is live and never listed, however old.
    let committed = m.prepare_object(key).await.expect("prepare");
    m.commit_objects(vec![obj(committed, 10, 20)])
        .await
        .expect("commit");
    let listed = m
        .deletable_objects(Duration::ZERO, Duration::ZERO)
        .await
        .expect("deletable");
    assert!(listed.iter().all(|o| o.object_id != committed));
    m.forget_objects(&[committed]).await.expect("forget");
    assert_eq!(
        m.ranges(1, 10, 10).await.expect("ranges")[0].object_id,
        committed
    );
}

pub async fn compaction_replaces_ranges(m: &dyn ObjectIndex) {
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

pub async fn epochs_fence_stale_leaders(m: &dyn ObjectIndex) {
    let s = m.open_stream(1, 5).await.expect("open");
    assert_eq!((s.epoch, s.start_offset, s.end_offset), (5, 0, 0));
    assert!(matches!(
        m.open_stream(1, 4).await,
        Err(MetaError::Fenced { current: 5, .. })
    ));
    m.open_stream(1, 6).await.expect("newer epoch");
    // A second opener at the same epoch (it read the epoch before the first one opened) is
    // fenced: two leaders never share an epoch.
    assert!(matches!(
        m.open_stream(1, 6).await,
        Err(MetaError::Fenced { current: 6, .. })
    ));
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

pub async fn commits_must_be_contiguous(m: &dyn ObjectIndex) {
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

pub async fn commits_are_atomic(m: &dyn ObjectIndex) {
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
    // The same commit again (its first answer was lost with the connection) succeeds and
    // changes nothing, even after the stream moved on and its leader changed.
    commit(m, vec![range(1, 1, 10, 15)]).await.expect("commit");
    m.open_stream(1, 2).await.expect("open");
    m.commit_objects(vec![o.clone()])
        .await
        .expect("a repeated commit is done already");
    assert_eq!(
        m.get_stream(1).await.expect("get").map(|s| s.end_offset),
        Some(15)
    );
    assert_eq!(m.ranges(1, 0, 10).await.expect("ranges").len(), 2);
    // Anything else of a committed object is refused.
    let other = ObjectCommit {
        ranges: vec![range(1, 2, 15, 20)],
        ..o
    };
    assert!(matches!(
        m.commit_objects(vec![other]).await,
        Err(MetaError::UnknownObject(_))
    ));
}

pub async fn ranges_are_found_by_offset(m: &dyn ObjectIndex) {
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

pub async fn trimming_drops_ranges_and_frees_objects(m: &dyn ObjectIndex) {
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
    // Not before the grace period.
    assert!(m
        .deletable_objects(Duration::from_secs(3600), Duration::from_secs(3600))
        .await
        .expect("deletable")
        .is_empty());
    let mut gone: Vec<u64> = m
        .deletable_objects(Duration::ZERO, Duration::from_secs(3600))
        .await
        .expect("deletable")
        .iter()
        .map(|o| o.object_id)
        .collect();
    gone.sort();
    assert_eq!(gone, vec![shared, own]);
    m.forget_objects(&gone).await.expect("forget");
    assert!(m
        .deletable_objects(Duration::ZERO, Duration::from_secs(3600))
        .await
        .expect("deletable")
        .is_empty());
    assert_eq!(m.ranges(1, 0, 10).await.expect("ranges").len(), 1);
}

pub async fn orphans_are_found(m: &dyn ObjectIndex) {
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

pub async fn epochs_never_go_back(m: &dyn ObjectIndex) {
    m.open_stream(1, 5).await.expect("open");
    // The same epoch is another leader's (it read the epoch before this one opened), and a
    // lower one a stale leader's: both are fenced and leave the stream as it was.
    for stale in [0, 1, 4, 5] {
        assert!(matches!(
            m.open_stream(1, stale).await,
            Err(MetaError::Fenced {
                stream_id: 1,
                current: 5,
                ..
            })
        ));
    }
    assert_eq!(
        m.get_stream(1).await.expect("get").map(|s| s.epoch),
        Some(5)
    );
    // Committed data stays across a new epoch.
    commit(m, vec![range(1, 5, 0, 10)]).await.expect("commit");
    let s = m.open_stream(1, 9).await.expect("newer epoch");
    assert_eq!((s.epoch, s.start_offset, s.end_offset), (9, 0, 10));
    assert!(matches!(
        m.open_stream(1, 8).await,
        Err(MetaError::Fenced { current: 9, .. })
    ));
}

pub async fn commits_must_be_at_the_current_epoch(m: &dyn ObjectIndex) {
    m.open_stream(1, 3).await.expect("open");
    // Neither an older nor a newer epoch than the stream's commits.
    for epoch in [2, 4] {
        assert!(matches!(
            commit(m, vec![range(1, epoch, 0, 10)]).await,
            Err(MetaError::Fenced { current: 3, .. })
        ));
    }
    assert_eq!(
        m.get_stream(1).await.expect("get").map(|s| s.end_offset),
        Some(0)
    );
    commit(m, vec![range(1, 3, 0, 10)]).await.expect("commit");
}

pub async fn commits_refuse_empty_ranges(m: &dyn ObjectIndex) {
    m.open_stream(1, 1).await.expect("open");
    commit(m, vec![range(1, 1, 0, 10)]).await.expect("commit");
    let bad = |start, end| RangeCommit {
        stream_id: 1,
        epoch: 1,
        start_offset: start,
        end_offset: end,
        position: 0,
        size: 10,
        max_timestamp: 0,
    };
    // Starting at the end offset but ending at or before it would move the end offset back or
    // leave an empty range; past 2^63 an offset does not fit every backend.
    for (start, end) in [(10, 10), (10, 5), (10, u64::MAX)] {
        assert!(
            matches!(
                commit(m, vec![bad(start, end)]).await,
                Err(MetaError::InvalidRange { stream_id: 1, .. })
            ),
            "range [{start}, {end}) accepted"
        );
    }
    assert_eq!(
        m.get_stream(1).await.expect("get").map(|s| s.end_offset),
        Some(10)
    );
    assert_eq!(m.ranges(1, 0, 10).await.expect("ranges").len(), 1);
    commit(m, vec![range(1, 1, 10, 11)]).await.expect("commit");
}

pub async fn start_offset_never_goes_back(m: &dyn ObjectIndex) {
    m.open_stream(1, 1).await.expect("open");
    commit(m, vec![range(1, 1, 0, 10)]).await.expect("commit");
    assert_eq!(m.trim_stream(1, 4).await.expect("trim").start_offset, 4);
    for earlier in [0, 3, 4] {
        assert_eq!(
            m.trim_stream(1, earlier).await.expect("trim").start_offset,
            4
        );
    }
    // A new epoch keeps it.
    assert_eq!(m.open_stream(1, 2).await.expect("open").start_offset, 4);
    // Past the committed end (DeleteRecords up to data still in the WAL): the range goes, the
    // end offset stays, and data committed later below the start is dropped at once.
    let s = m.trim_stream(1, 15).await.expect("trim");
    assert_eq!((s.start_offset, s.end_offset), (15, 10));
    assert!(m.ranges(1, 0, 10).await.expect("ranges").is_empty());
    commit(m, vec![range(1, 2, 10, 15)]).await.expect("commit");
    assert!(m.ranges(1, 0, 10).await.expect("ranges").is_empty());
    commit(m, vec![range(1, 2, 15, 20)]).await.expect("commit");
    let s = m.get_stream(1).await.expect("get").expect("stream");
    assert_eq!((s.start_offset, s.end_offset), (15, 20));
    // However far it goes, it stays past everything and is never read back lower.
    let far = m.trim_stream(1, u64::MAX).await.expect("trim").start_offset;
    assert!(far >= 20);
    assert_eq!(m.trim_stream(1, 30).await.expect("trim").start_offset, far);
    assert!(m.ranges(1, 0, 10).await.expect("ranges").is_empty());
    assert!(matches!(
        m.trim_stream(7, 1).await,
        Err(MetaError::UnknownStream(7))
    ));
}

/// A deletion that failed (the store was down, the broker died) is retried: claimed objects keep
/// being returned until they are forgotten, and only claimed objects can be forgotten.
pub async fn deletion_is_retried_until_forgotten(m: &dyn ObjectIndex) {
    m.open_stream(1, 1).await.expect("open");
    let a = m.prepare_object(key).await.expect("prepare");
    let ids = |v: Vec<crate::ObjectInfo>| v.into_iter().map(|o| o.object_id).collect::<Vec<_>>();
    assert_eq!(
        ids(m
            .deletable_objects(Duration::ZERO, Duration::ZERO)
            .await
            .expect("deletable")),
        vec![a]
    );
    let b = m.prepare_object(key).await.expect("prepare");
    // Forgetting an object not claimed does nothing: `b` is still an upload under way.
    m.forget_objects(&[b]).await.expect("forget");
    assert_eq!(
        ids(m
            .deletable_objects(Duration::from_secs(3600), Duration::from_secs(3600))
            .await
            .expect("deletable")),
        vec![a],
        "a claimed object is returned again whatever the grace"
    );
    m.forget_objects(&[a]).await.expect("forget");
    assert!(m
        .deletable_objects(Duration::from_secs(3600), Duration::from_secs(3600))
        .await
        .expect("deletable")
        .is_empty());
    // `b` was never claimed, so it still commits.
    m.commit_objects(vec![ObjectCommit {
        object_id: b,
        size: 10,
        ranges: vec![range(1, 1, 0, 10)],
    }])
    .await
    .expect("commit");
}

/// An object whose ranges hold less than half its bytes is sparse: its remaining ranges are
/// found, those of fuller objects are not, and an object with no range left is no one's.
pub async fn sparse_objects_are_found(m: &dyn ObjectIndex) {
    for s in 1..=3 {
        m.open_stream(s, 1).await.expect("open");
    }
    // Every object is 1,000 bytes; a range of n offsets holds 10 n of them.
    let shared = commit(m, vec![range(1, 1, 0, 30), range(2, 1, 0, 40)])
        .await
        .expect("shared");
    commit(m, vec![range(1, 1, 30, 90)]).await.expect("own");
    commit(m, vec![range(3, 1, 0, 80)]).await.expect("gone");
    assert!(m.sparse_ranges(100).await.expect("sparse").is_empty());

    // Stream 2 trims its 400 bytes away: 300 of 1,000 are left in the shared object.
    m.trim_stream(2, 40).await.expect("trim");
    // Stream 3 trims all of its object: no range is left to move.
    m.trim_stream(3, 80).await.expect("trim");
    assert_eq!(
        m.sparse_ranges(100).await.expect("sparse"),
        vec![(1, shared)]
    );
    assert!(m.sparse_ranges(0).await.expect("sparse").is_empty());
}
