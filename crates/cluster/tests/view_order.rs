//! The view of the cluster never goes back in time. Several tasks refresh it at once (the
//! refresh loop on notifications, the leadership loop after a hand-over, the admin API on a
//! move); a read that started before a change and published after a newer read once made a
//! broker see itself as the leader of a partition it had just handed over, open it again and
//! fence the new leader, whose acknowledged writes were then dropped (the two-hour soak of
//! 2026-12-05, `bench/results/soak-2026-12-05-1827.md`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir_cluster::{Cluster, ClusterConfig};
use weir_meta::{BrokerRegistration, MetaStore, SqliteMetaStore};

fn broker(node_id: i32) -> BrokerRegistration {
    BrokerRegistration {
        node_id: Some(node_id),
        zone: String::new(),
        host: "127.0.0.1".into(),
        port: 9000 + node_id,
        listeners: Vec::new(),
        internal_addr: format!("127.0.0.1:{}", 19000 + node_id),
        wal: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_refreshes_never_publish_an_older_view() {
    const BROKERS: i32 = 150;
    let meta: Arc<dyn MetaStore> = Arc::new(SqliteMetaStore::in_memory().expect("meta"));
    let cluster = Cluster::join(Arc::clone(&meta), broker(1), ClusterConfig::default())
        .await
        .expect("join");
    let done = Arc::new(AtomicBool::new(false));
    // Whoever refreshes the view: other components, all the time.
    let mut refreshers = Vec::new();
    for _ in 0..6 {
        let (cluster, done) = (Arc::clone(&cluster), Arc::clone(&done));
        refreshers.push(tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                let _ = cluster.refresh().await;
            }
        }));
    }
    // What every component sees: the number of brokers only grows, since they only register.
    let mut views = cluster.watch();
    let watcher = tokio::spawn(async move {
        let mut seen = 0;
        let mut backwards = Vec::new();
        while views.changed().await.is_ok() {
            let n = views.borrow_and_update().brokers.len();
            if n < seen {
                backwards.push((seen, n));
            }
            seen = seen.max(n);
            if n == BROKERS as usize {
                break;
            }
        }
        backwards
    });
    for id in 2..=BROKERS {
        meta.register_broker(&broker(id), Duration::from_secs(600))
            .await
            .expect("register");
        // Whoever made a change and refreshes sees it.
        let view = cluster.refresh().await.expect("refresh");
        assert!(
            view.brokers.len() >= id as usize,
            "broker {id} registered, yet the refresh after shows {} brokers",
            view.brokers.len()
        );
    }
    let backwards = tokio::time::timeout(Duration::from_secs(30), watcher)
        .await
        .expect("the watcher saw every broker")
        .expect("watcher");
    done.store(true, Ordering::SeqCst);
    for r in refreshers {
        r.await.expect("refresher");
    }
    assert!(
        backwards.is_empty(),
        "the view went back in time {} times (brokers seen, then fewer): {:?}",
        backwards.len(),
        &backwards[..backwards.len().min(10)]
    );
    cluster.stop().await;
}
