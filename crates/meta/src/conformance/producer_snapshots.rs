//! [`ProducerSnapshots`]: each stream's idempotent-producer state.

use crate::ProducerSnapshots;

/// Runs every check of the part, each against a fresh, empty store from `open`.
pub async fn run(open: impl Fn() -> Box<dyn ProducerSnapshots>) {
    snapshots_replace_each_other(&*open()).await;
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
