//! The metadata store going away and coming back (a PostgreSQL restart) on real PostgreSQL.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_cluster::{Cluster, ClusterConfig};
use weir_meta::testing::PgServer;
use weir_meta::{BrokerRegistration, Coordination, MetaStore, PostgresMetaStore};

fn config() -> ClusterConfig {
    ClusterConfig {
        session_timeout: Duration::from_millis(1500),
        heartbeat_interval: Duration::from_millis(500),
        controller_lease: Duration::from_secs(1),
        controller_interval: Duration::from_millis(100),
        shutdown_timeout: Duration::from_secs(5),
        ..ClusterConfig::default()
    }
}

async fn join(url: &str, node_id: i32) -> Arc<Cluster> {
    let meta: Arc<dyn MetaStore> =
        Arc::new(PostgresMetaStore::connect(url).await.expect("connect"));
    Cluster::join(
        meta,
        BrokerRegistration {
            node_id: Some(node_id),
            zone: String::new(),
            host: "127.0.0.1".into(),
            port: 9000 + node_id,
            listeners: Vec::new(),
            internal_addr: format!("127.0.0.1:{}", 9100 + node_id),
            wal: None,
        },
        config(),
    )
    .await
    .expect("join")
}

/// While PostgreSQL is down no broker can renew its session, so when it comes back every session
/// has expired by its clock. The controller must not fence brokers for that: they did not fail.
/// A broker that really stops renewing afterwards is still fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_restart_fences_no_live_broker() {
    let pg = PgServer::start().expect("private PostgreSQL");
    let url = pg.create_database().await.expect("database");
    let a = join(&url, 1).await;
    let b = join(&url, 2).await;
    // Let one of them become the controller and reach the store for a whole session timeout.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = (a.incarnation(), b.incarnation());

    pg.stop().expect("stop PostgreSQL");
    tokio::time::sleep(Duration::from_secs(3)).await;
    pg.start_again().expect("start PostgreSQL again");
    tokio::time::sleep(Duration::from_secs(4)).await;

    assert_eq!(
        (a.incarnation(), b.incarnation()),
        before,
        "a broker was fenced (and registered again) because the store had been down"
    );
    let meta = PostgresMetaStore::connect(&url).await.expect("connect");
    let brokers = meta.brokers().await.expect("brokers");
    assert!(
        brokers.iter().all(|b| b.is_live()),
        "both brokers are live: {brokers:?}"
    );

    // Fencing still works: broker 2 stops renewing (its tasks stop) and is fenced.
    b.stop().await;
    let t = Instant::now();
    loop {
        let brokers = meta.brokers().await.expect("brokers");
        let two = brokers.iter().find(|b| b.node_id == 2).expect("broker 2");
        if two.state == weir_meta::BrokerState::Fenced {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "broker 2 stopped renewing but was not fenced: {two:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.stop().await;
}
