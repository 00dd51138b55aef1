//! [`ProducerSnapshots`]: each stream's idempotent-producer state.

use crate::{ProducerSnapshot, ProducerSnapshots};

/// Runs every check of the part, each against a fresh, empty store from `open`.
pub async fn run(open: impl Fn() -> Box<dyn ProducerSnapshots>) {
    snapshots_replace_each_other(&*open()).await;
    many_snapshots_save_together(&*open()).await;
}

pub async fn snapshots_replace_each_other(m: &dyn ProducerSnapshots) {
    assert_eq!(m.load_producer_snapshot(1).await.expect("load"), None);
    m.save_producer_snapshot(1, 100, vec![1, 2, 3])
        .await
        .expect("save");
    m.save_producer_snapshot(2, 7, Vec::new())
        .await
        .expect("save");
    m.save_producer_snapshot(1, 200, vec![4])
        .await
        .expect("save");
    assert_eq!(
        m.load_producer_snapshot(1).await.expect("load"),
        Some((200, vec![4]))
    );
    assert_eq!(
        m.load_producer_snapshot(2).await.expect("load"),
        Some((7, Vec::new()))
    );
    // A snapshot at a lower offset (a slow save, or a fenced leader's) replaces nothing: the
    // state a leader rebuilds from must not go back in the log.
    m.save_producer_snapshot(1, 150, vec![9])
        .await
        .expect("save");
    assert_eq!(
        m.load_producer_snapshot(1).await.expect("load"),
        Some((200, vec![4]))
    );
}

pub async fn many_snapshots_save_together(m: &dyn ProducerSnapshots) {
    m.save_producer_snapshots(Vec::new())
        .await
        .expect("save none");
    m.save_producer_snapshot(3, 50, vec![3])
        .await
        .expect("save");
    let snap = |stream_id, offset, data: Vec<u8>| ProducerSnapshot {
        stream_id,
        offset,
        data,
    };
    let mut many: Vec<_> = (100..1_100)
        .map(|s| snap(s, s * 10, s.to_be_bytes().to_vec()))
        .collect();
    // Beside new ones: one that replaces an older snapshot, one older than the stored one.
    many.push(snap(1, 10, vec![1]));
    many.push(snap(3, 40, vec![4]));
    m.save_producer_snapshot(1, 5, vec![0]).await.expect("save");
    m.save_producer_snapshots(many).await.expect("save many");
    for s in [100u64, 617, 1_099] {
        assert_eq!(
            m.load_producer_snapshot(s).await.expect("load"),
            Some((s * 10, s.to_be_bytes().to_vec())),
            "stream {s}"
        );
    }
    assert_eq!(m.load_producer_snapshot(1_100).await.expect("load"), None);
    assert_eq!(
        m.load_producer_snapshot(1).await.expect("load"),
        Some((10, vec![1]))
    );
    // Snapshots never go back, in a batch as alone.
    assert_eq!(
        m.load_producer_snapshot(3).await.expect("load"),
        Some((50, vec![3]))
    );
}
