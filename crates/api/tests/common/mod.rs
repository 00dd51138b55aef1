//! A broker on a real engine (file WAL in a temp dir, memory object store) for the API tests,
//! and record batches to produce.
#![allow(dead_code)]

use std::sync::Arc;

use kafka_protocol::messages::*;
use uuid::Uuid;
use weir_api::Broker;

#[allow(unused_imports)]
pub use weir_api::samples::{batch, batch_of, s, topic, GROUP, MISSING, TOPIC};

pub struct Env {
    pub broker: Arc<Broker>,
    pub topics: Arc<weir_partition::Topics>,
    pub engine: weir_storage::Engine,
    pub topic_id: Uuid,
    pub meta: Arc<dyn weir_meta::MetaStore>,
    _dir: tempfile::TempDir,
}

pub async fn env() -> Env {
    env_with(weir_api::ApiLimits::default()).await
}

pub async fn env_with(limits: weir_api::ApiLimits) -> Env {
    env_with_storage(limits, weir_storage::StorageConfig::default()).await
}

pub async fn env_with_storage(
    limits: weir_api::ApiLimits,
    storage: weir_storage::StorageConfig,
) -> Env {
    let dir = tempfile::tempdir().expect("temp dir");
    let wal = weir_wal::FileWal::open(weir_wal::FileWalConfig {
        capacity: 16 << 20,
        direct_io: false,
        format: false,
        ..weir_wal::FileWalConfig::new(dir.path().join("wal"))
    })
    .expect("open WAL");
    let meta: Arc<dyn weir_meta::MetaStore> = Arc::new(
        weir_meta::SqliteMetaStore::open(&dir.path().join("meta.sqlite")).expect("open meta"),
    );
    let store = weir_storage::objstore::from_url("memory://").expect("memory store");
    let engine = weir_storage::Engine::open(storage, Arc::new(wal), Arc::clone(&meta), store)
        .await
        .expect("open engine");
    let topics = weir_partition::Topics::open(
        engine.clone(),
        Arc::clone(&meta),
        weir_partition::TopicDefaults::default(),
    )
    .await
    .expect("open topics");
    let groups =
        weir_group::GroupCoordinator::new(meta.clone(), weir_group::GroupConfig::default());
    // A cluster of one, as `weir serve` runs on SQLite: the controller places partitions here.
    let cluster = weir_cluster::Cluster::join(
        Arc::clone(&meta),
        weir_meta::BrokerRegistration {
            node_id: Some(1),
            zone: "zone-a".into(),
            host: "127.0.0.1".into(),
            port: 9092,
            listeners: Vec::new(),
            internal_addr: String::new(),
            wal: None,
        },
        weir_cluster::ClusterConfig::default(),
    )
    .await
    .expect("join");
    cluster.start_leadership(Arc::clone(&topics) as Arc<dyn weir_cluster::PartitionHost>);
    let broker = Broker::new(
        weir_api::BrokerIdentity {
            node_id: 1,
            host: "127.0.0.1".into(),
            port: 9092,
            rack: Some("zone-a".into()),
            cluster_id: "versions-test".into(),
            log_dir: "/tmp/weir-test".into(),
        },
        Arc::clone(&cluster),
        Arc::clone(&topics),
        groups,
        Arc::clone(&meta),
        limits,
    );
    let t = topics
        .create(TOPIC, 2, Default::default(), false)
        .await
        .expect("create the test topic");
    // Data to read back, and a committed offset to fetch.
    open_partition(&topics, TOPIC, 1).await;
    let p = open_partition(&topics, TOPIC, 0).await;
    p.produce(&batch(3)).await.expect("produce a batch");
    Env {
        broker,
        topics,
        engine,
        topic_id: Uuid::from_bytes(t.id),
        meta,
        _dir: dir,
    }
}

/// The partition, once the cluster has placed and opened it here.
pub async fn open_partition(
    topics: &weir_partition::Topics,
    topic: &str,
    index: i32,
) -> Arc<weir_partition::Partition> {
    for _ in 0..500 {
        if let Some(p) = topics.partition(topic, index) {
            return p;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{topic}-{index} was not opened here within 5 s");
}

/// Sends `r` as `key` at `version` through the broker and waits for its answer.
pub async fn call(e: &Env, key: ApiKey, version: i16, r: RequestKind) -> ResponseKind {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_client_id(Some(s("api-test")));
    match e.broker.handle(&header, r, "127.0.0.1").await {
        weir_api::Reply::Now(r) => *r,
        weir_api::Reply::Later(f) => f.await,
        _ => panic!("no answer to {key:?}"),
    }
}

/// Sends `r` as a Fetch of `version` through the broker and waits for its answer.
pub async fn fetch_response(e: &Env, r: FetchRequest, version: i16) -> FetchResponse {
    let ResponseKind::Fetch(f) = call(e, ApiKey::Fetch, version, RequestKind::Fetch(r)).await
    else {
        panic!("not a fetch response");
    };
    f
}
