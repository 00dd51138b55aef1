//! The leadership loop opening many partitions at once (a broker starting with thousands
//! assigned to it): it must not go over every assignment each time one partition opens.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_cluster::{Cluster, ClusterConfig, PartitionHost};
use weir_meta::{Assignment, BrokerRegistration, MetaStore, SqliteMetaStore};

/// Opens at once; counts the full listings of what is open.
#[derive(Default)]
struct Host {
    local: Mutex<HashSet<u64>>,
    listings: AtomicUsize,
}

#[async_trait::async_trait]
impl PartitionHost for Host {
    fn local_streams(&self) -> Vec<u64> {
        self.listings.fetch_add(1, Ordering::SeqCst);
        self.local.lock().unwrap().iter().copied().collect()
    }

    fn is_local(&self, stream_id: u64) -> bool {
        self.local.lock().unwrap().contains(&stream_id)
    }

    async fn refresh_catalog(&self) {}

    async fn open(&self, a: &Assignment) -> Result<(), String> {
        self.local.lock().unwrap().insert(a.stream_id);
        Ok(())
    }

    async fn flush(&self, _: u64) -> Result<(), String> {
        Ok(())
    }

    async fn close(&self, stream_id: u64) -> Result<(), String> {
        self.local.lock().unwrap().remove(&stream_id);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_many_partitions_does_not_go_over_all_of_them_for_each() {
    const PARTITIONS: usize = 3000;
    let meta: Arc<dyn MetaStore> = Arc::new(SqliteMetaStore::in_memory().expect("meta"));
    let cluster = Cluster::join(
        Arc::clone(&meta),
        BrokerRegistration {
            node_id: Some(1),
            zone: String::new(),
            host: "127.0.0.1".into(),
            port: 9092,
            listeners: Vec::new(),
            internal_addr: "127.0.0.1:9093".into(),
            wal: None,
        },
        ClusterConfig {
            controller_interval: Duration::from_millis(100),
            ..ClusterConfig::default()
        },
    )
    .await
    .expect("join");
    meta.create_topic("many", [7; 16], PARTITIONS as u32, Default::default())
        .await
        .expect("create");
    let host = Arc::new(Host::default());
    cluster.start_leadership(Arc::clone(&host) as Arc<dyn PartitionHost>);
    let t = Instant::now();
    while host.local.lock().unwrap().len() < PARTITIONS {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{} of {PARTITIONS} open after 60 s",
            host.local.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The loop hears of the last opens a little later.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let listings = host.listings.load(Ordering::SeqCst);
    assert!(
        listings < PARTITIONS / 10,
        "{listings} passes over every partition to open {PARTITIONS}"
    );
    cluster.stop().await;
}
