//! Three real brokers on one machine sharing a private PostgreSQL and one `s3s-fs`, started as
//! a user starts them (`--node-id`, `--advertised`, `--metadata-url`, `--object-store-url`):
//! the harness the cluster tests run on.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use common::{consume, http_get, produce, value, Cluster};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// One request on a new connection to `port`, and its decoded response.
fn call(port: u16, key: ApiKey, v: i16, body: RequestKind) -> ResponseKind {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(v)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("cluster-test")))
        .encode(&mut buf, key.request_header_version(v))
        .expect("header");
    body.encode(&mut buf, v).expect("body");
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    c.write_all(&(buf.len() as i32).to_be_bytes())
        .and_then(|()| c.write_all(&buf))
        .expect("send");
    let mut len = [0u8; 4];
    c.read_exact(&mut len).expect("response length");
    let mut resp = vec![0u8; i32::from_be_bytes(len) as usize];
    c.read_exact(&mut resp).expect("response");
    let mut b = Bytes::from(resp);
    let header =
        ResponseHeader::decode(&mut b, key.response_header_version(v)).expect("response header");
    assert_eq!(header.correlation_id, 7);
    let r = ResponseKind::decode(key, &mut b, v).expect("response body");
    assert!(!b.has_remaining(), "bytes left after the {key:?} response");
    r
}

/// Each broker answers ApiVersions and Metadata on its own Kafka port (naming itself with its
/// node id and advertised address) and /healthz on its admin port; stopped with SIGTERM, killed
/// and started again, it keeps its address; a fourth broker joins with the next node id.
#[test]
fn three_brokers_answer_on_their_own_ports() {
    let mut c = Cluster::new(3);
    assert_eq!(c.len(), 3);
    let ports: Vec<u16> = (0..3).map(|i| c.port(i)).collect();
    assert_eq!(
        c.bootstrap(),
        ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    );

    let check = |c: &Cluster, i: usize| {
        let ResponseKind::ApiVersions(r) = call(
            c.port(i),
            ApiKey::ApiVersions,
            3,
            RequestKind::ApiVersions(
                ApiVersionsRequest::default()
                    .with_client_software_name(StrBytes::from_static_str("cluster-test"))
                    .with_client_software_version(StrBytes::from_static_str("1")),
            ),
        ) else {
            panic!("not an ApiVersions response")
        };
        assert_eq!(r.error_code, 0, "ApiVersions of broker {}", c.node_id(i));
        assert!(
            r.api_keys
                .iter()
                .any(|k| k.api_key == ApiKey::Metadata as i16),
            "broker {} offers Metadata",
            c.node_id(i)
        );

        let ResponseKind::Metadata(m) = call(
            c.port(i),
            ApiKey::Metadata,
            12,
            RequestKind::Metadata(MetadataRequest::default().with_topics(None)),
        ) else {
            panic!("not a Metadata response")
        };
        let me = m
            .brokers
            .iter()
            .find(|b| b.node_id.0 == c.node_id(i))
            .unwrap_or_else(|| {
                panic!(
                    "broker {} is not in its own Metadata: {:?}",
                    c.node_id(i),
                    m.brokers
                )
            });
        assert_eq!(
            (me.host.as_str(), me.port),
            ("127.0.0.1", i32::from(c.port(i))),
            "broker {} advertises its own address",
            c.node_id(i)
        );

        let (code, body) = http_get(c.admin_port(i), "/healthz").expect("/healthz answers");
        assert_eq!(code, 200, "/healthz of broker {}: {body}", c.node_id(i));
    };
    for i in 0..3 {
        check(&c, i);
    }
    assert_eq!(
        (c.node_id(0), c.node_id(1), c.node_id(2)),
        (1, 2, 3),
        "node ids"
    );

    c.stop(1);
    assert!(!c.is_running(1));
    assert!(
        TcpStream::connect(("127.0.0.1", ports[1])).is_err(),
        "a stopped broker does not listen"
    );
    c.start(1);
    check(&c, 1);
    c.kill(2);
    c.start(2);
    check(&c, 2);
    assert_eq!(c.port(2), ports[2], "a restarted broker keeps its port");

    let i = c.add_broker();
    assert_eq!((i, c.node_id(i)), (3, 4), "the new broker's node id");
    check(&c, i);
    assert_eq!(c.bootstrap().split(',').count(), 4);
    c.assert_no_panic();
}

/// Records produced through one broker on PostgreSQL and s3s-fs are read back through it, also
/// after a clean restart (so from objects in s3s-fs, located through PostgreSQL).
#[test]
fn records_round_trip_through_postgres_and_s3s_fs() {
    let mut c = Cluster::new(3);
    const N: u64 = 500;
    let one = c.broker(0).bootstrap();
    produce(&one, "cluster-smoke", N);
    let want: Vec<String> = (0..N).map(value).collect();
    assert_eq!(consume(&one, "cluster-smoke", N), want);
    c.stop(0);
    assert!(
        !c.object_files(Cluster::PREFIX).is_empty(),
        "the stopped broker uploaded its records to s3s-fs"
    );
    assert!(
        !c.data_dir(0).join("meta.sqlite").exists(),
        "the metadata is in PostgreSQL, not in SQLite"
    );
    c.start(0);
    assert_eq!(consume(&one, "cluster-smoke", N), want, "after a restart");
    c.assert_no_panic();
}

// ---------------------------------------------------------------------------------------------
// The cluster at work: placement, clients through every broker, groups, joins, moves, SIGTERM.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn create_topic(port: u16, name: &str, partitions: i32) {
    let ResponseKind::CreateTopics(r) = call(
        port,
        ApiKey::CreateTopics,
        5,
        RequestKind::CreateTopics(
            CreateTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![create_topics_request::CreatableTopic::default()
                    .with_name(TopicName(s(name)))
                    .with_num_partitions(partitions)
                    .with_replication_factor(-1)]),
        ),
    ) else {
        panic!("not a CreateTopics response")
    };
    assert_eq!(r.topics[0].error_code, 0, "{:?}", r.topics[0].error_message);
}

/// (leader node id, leader epoch) of each partition of `topic`, as broker `port` sees it.
fn leaders(port: u16, topic: &str) -> Vec<(i32, i32)> {
    let ResponseKind::Metadata(m) = call(
        port,
        ApiKey::Metadata,
        12,
        RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default().with_name(Some(TopicName(s(topic)))),
        ]))),
    ) else {
        panic!("not a Metadata response")
    };
    let mut parts: Vec<_> = m.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.leader_id.0, p.leader_epoch))
        .collect();
    parts.sort();
    parts.into_iter().map(|(_, l, e)| (l, e)).collect()
}

/// Waits until `f` holds, or panics with `what` after `secs`.
fn eventually(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(secs), "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`eventually`] on cluster `c`: a timeout also shows the end of every broker's log.
fn eventually_in(c: &Cluster, secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        if t.elapsed() >= Duration::from_secs(secs) {
            panic!("{what} (not within {secs} s){}", c.log_tails(40));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Acknowledged records: (partition, offset) -> value.
#[derive(Clone, Default)]
struct Acks(
    Arc<Mutex<BTreeMap<(i32, i64), String>>>,
    Arc<Mutex<Vec<String>>>,
);

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(m) => {
                let v = String::from_utf8_lossy(m.payload().unwrap_or(&[])).to_string();
                self.0
                    .lock()
                    .unwrap()
                    .insert((m.partition(), m.offset()), v);
            }
            Err((e, _)) => self.1.lock().unwrap().push(e.to_string()),
        }
    }
}

fn idempotent_producer(bootstrap: &str) -> (ThreadedProducer<Acks>, Acks) {
    let acks = Acks::default();
    let p = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "2")
        .set("retry.backoff.ms", "20")
        .set("message.timeout.ms", "60000")
        .create_with_context(acks.clone())
        .expect("producer");
    (p, acks)
}

fn send(p: &ThreadedProducer<Acks>, topic: &str, partition: i32, v: &str) {
    let mut record = BaseRecord::<(), str>::to(topic)
        .partition(partition)
        .payload(v);
    loop {
        match p.send(record) {
            Ok(()) => return,
            Err((_, r)) => {
                record = r;
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

/// Reads every partition of `topic` from the start until the high watermarks; returns
/// (partition, offset) -> value.
fn read_all(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    expect: usize,
) -> BTreeMap<(i32, i64), String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "cluster-reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&tpl).expect("assign");
    let mut got = BTreeMap::new();
    let t = Instant::now();
    while got.len() < expect && t.elapsed() < Duration::from_secs(90) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            let v = String::from_utf8_lossy(m.payload().unwrap_or(&[])).to_string();
            let prev = got.insert((m.partition(), m.offset()), v);
            assert!(
                prev.is_none(),
                "offset {} of partition {} read twice",
                m.offset(),
                m.partition()
            );
        }
    }
    got
}

/// Partitions of a new topic are spread over the brokers (two each of six); every broker
/// lists all three and the same leaders; an idempotent producer and a consumer that know only
/// the bootstrap list write and read every partition through their leaders.
#[test]
fn partitions_spread_and_clients_use_every_broker() {
    let c = Cluster::new(3);
    create_topic(c.port(1), "spread", 6);
    // The broker that created the topic answered once every partition had a leader; another
    // broker's view may be a moment behind (Kafka's are too: clients retry on -1).
    // An empty answer is the topic not placed yet in broker 1's view (LEADER_NOT_AVAILABLE).
    eventually(10, "broker 1 learns the new topic's leaders", || {
        let seen = leaders(c.port(0), "spread");
        seen.len() == 6 && seen.iter().all(|&(l, _)| l >= 0)
    });
    let seen = leaders(c.port(0), "spread");
    let mut per_node: BTreeMap<i32, usize> = BTreeMap::new();
    for (l, _) in &seen {
        *per_node.entry(*l).or_default() += 1;
    }
    assert_eq!(
        per_node,
        BTreeMap::from([(1, 2), (2, 2), (3, 2)]),
        "{seen:?}"
    );
    eventually(10, "every broker reports the same leaders", || {
        (0..3).all(|i| leaders(c.port(i), "spread") == leaders(c.port(0), "spread"))
    });
    let ResponseKind::Metadata(m) = call(
        c.port(2),
        ApiKey::Metadata,
        12,
        RequestKind::Metadata(MetadataRequest::default().with_topics(Some(Vec::new()))),
    ) else {
        panic!("not a Metadata response")
    };
    assert_eq!(m.brokers.len(), 3, "{:?}", m.brokers);

    let (p, acks) = idempotent_producer(&c.bootstrap());
    for i in 0..600 {
        send(&p, "spread", i % 6, &format!("v{i}"));
    }
    p.flush(Duration::from_secs(60)).expect("flush");
    assert!(
        acks.1.lock().unwrap().is_empty(),
        "{:?}",
        acks.1.lock().unwrap()
    );
    let acked = acks.0.lock().unwrap().clone();
    assert_eq!(acked.len(), 600);
    assert_eq!(read_all(&c.bootstrap(), "spread", 6, 600), acked);
    c.assert_no_panic();
}

/// AlterPartitionReassignments of one partition to `replicas`, through broker `port`.
fn reassign(
    port: u16,
    topic: &str,
    partition: i32,
    replicas: &[i32],
) -> AlterPartitionReassignmentsResponse {
    use alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
    let ResponseKind::AlterPartitionReassignments(r) = call(
        port,
        ApiKey::AlterPartitionReassignments,
        0,
        RequestKind::AlterPartitionReassignments(
            AlterPartitionReassignmentsRequest::default().with_topics(vec![
                ReassignableTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(vec![ReassignablePartition::default()
                        .with_partition_index(partition)
                        .with_replicas(Some(replicas.iter().copied().map(BrokerId).collect()))]),
            ]),
        ),
    ) else {
        panic!("not an AlterPartitionReassignments response")
    };
    r
}

/// (controller id, broker ids) as broker `port` describes the cluster.
fn describe(port: u16) -> (i32, Vec<i32>) {
    let ResponseKind::DescribeCluster(d) = call(
        port,
        ApiKey::DescribeCluster,
        0,
        RequestKind::DescribeCluster(DescribeClusterRequest::default()),
    ) else {
        panic!("not a DescribeCluster response")
    };
    let mut ids: Vec<i32> = d.brokers.iter().map(|b| b.broker_id.0).collect();
    ids.sort_unstable();
    (d.controller_id.0, ids)
}

/// A topic config as broker `port` describes it.
fn topic_config(port: u16, topic: &str, key: &str) -> Option<String> {
    let ResponseKind::DescribeConfigs(r) = call(
        port,
        ApiKey::DescribeConfigs,
        4,
        RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s(topic))
                .with_configuration_keys(Some(vec![s(key)])),
        ])),
    ) else {
        panic!("not a DescribeConfigs response")
    };
    assert_eq!(
        r.results[0].error_code, 0,
        "{:?}",
        r.results[0].error_message
    );
    r.results[0]
        .configs
        .iter()
        .find(|c| c.name.as_str() == key)
        .and_then(|c| c.value.as_ref().map(|v| v.to_string()))
}

fn set_topic_config(port: u16, topic: &str, key: &str, value: &str) {
    let ResponseKind::IncrementalAlterConfigs(r) = call(
        port,
        ApiKey::IncrementalAlterConfigs,
        1,
        RequestKind::IncrementalAlterConfigs(
            IncrementalAlterConfigsRequest::default().with_resources(vec![
                incremental_alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s(topic))
                    .with_configs(vec![
                        incremental_alter_configs_request::AlterableConfig::default()
                            .with_name(s(key))
                            .with_config_operation(0)
                            .with_value(Some(s(value))),
                    ]),
            ]),
        ),
    ) else {
        panic!("not an IncrementalAlterConfigs response")
    };
    assert_eq!(
        r.responses[0].error_code, 0,
        "{:?}",
        r.responses[0].error_message
    );
}

/// A config change made through one broker is what every broker describes as soon as the
/// change is acknowledged: the brokers read configs from the metadata store they share, not
/// from a copy that catches up within a second (a client's next request may go elsewhere).
#[test]
fn every_broker_describes_a_config_change_once_it_is_acknowledged() {
    let c = Cluster::new(3);
    create_topic(c.port(0), "configs-everywhere", 3);
    for round in 0..12u64 {
        let value = (3_600_000 + round).to_string();
        set_topic_config(
            c.port(round as usize % 3),
            "configs-everywhere",
            "retention.ms",
            &value,
        );
        for i in 0..3 {
            assert_eq!(
                topic_config(c.port(i), "configs-everywhere", "retention.ms").as_deref(),
                Some(value.as_str()),
                "round {round}: broker {} describes what broker {} acknowledged",
                c.node_id(i),
                c.node_id(round as usize % 3)
            );
        }
    }
    c.assert_no_panic();
}

/// The controller is killed (-9): another broker takes the lease once it has expired, the dead
/// broker is fenced and leaves Metadata, and a topic created afterwards is placed on the live
/// brokers only and takes records.
#[test]
fn the_controller_role_passes_on_when_its_broker_dies() {
    let mut c = Cluster::new(3);
    let (controller, _) = describe(c.port(0));
    let dead = (0..3)
        .find(|&i| c.node_id(i) == controller)
        .expect("the controller is one of the brokers");
    let alive: Vec<usize> = (0..3).filter(|&i| i != dead).collect();
    c.kill(dead);
    let port = c.port(alive[0]);
    let live_ids: Vec<i32> = alive.iter().map(|&i| c.node_id(i)).collect();
    eventually(
        30,
        "another broker becomes the controller and the dead one leaves",
        || {
            let (now, ids) = describe(port);
            now != controller && live_ids.contains(&now) && ids == live_ids
        },
    );
    create_topic(port, "after-the-controller", 4);
    eventually(15, "the new topic's partitions have live leaders", || {
        leaders(port, "after-the-controller")
            .iter()
            .all(|(l, _)| live_ids.contains(l))
    });
    let bootstrap = alive
        .iter()
        .map(|&i| format!("127.0.0.1:{}", c.port(i)))
        .collect::<Vec<_>>()
        .join(",");
    produce(&bootstrap, "after-the-controller", 100);
    let want: Vec<String> = (0..100).map(value).collect();
    assert_eq!(consume(&bootstrap, "after-the-controller", 100), want);
    c.assert_no_panic();
}

/// A broker that joins takes partitions of the topics created after it.
#[test]
fn a_joining_broker_takes_new_partitions() {
    let mut c = Cluster::new(2);
    create_topic(c.port(0), "before", 4);
    assert!(leaders(c.port(0), "before")
        .iter()
        .all(|(l, _)| *l == 1 || *l == 2));
    let i = c.add_broker();
    let new = c.node_id(i);
    create_topic(c.port(0), "after", 3);
    // The new broker hears of the topic's placement a moment after the broker that created it.
    let mut after = Vec::new();
    eventually(10, "the new broker leads one of the new partitions", || {
        after = leaders(c.port(i), "after");
        after.iter().any(|(l, _)| *l == new)
    });
    assert!(
        after.iter().any(|(l, _)| *l == new),
        "the new broker {new} leads none of {after:?}"
    );
    produce(&c.broker(i).bootstrap(), "after", 50);
    assert_eq!(consume(&c.bootstrap(), "after", 50).len(), 50);
    c.assert_no_panic();
}

/// AlterPartitionReassignments moves a partition with data to another broker: the new leader
/// serves it at a higher leader epoch, with every record, and takes new ones; nothing was
/// copied between brokers (the data stays where it was, in s3s-fs).
#[test]
fn a_reassignment_moves_a_partition_and_keeps_its_records() {
    let c = Cluster::new(3);
    create_topic(c.port(0), "moving", 1);
    produce(&c.bootstrap(), "moving", 300);
    let (from, epoch) = leaders(c.port(0), "moving")[0];
    let to = if from == 3 { 1 } else { from + 1 };
    let r = reassign(c.port(2), "moving", 0, &[to]);
    assert_eq!(r.error_code, 0);
    assert_eq!(
        r.responses[0].partitions[0].error_code, 0,
        "{:?}",
        r.responses[0].partitions[0].error_message
    );
    // A client the old leader redirects (KIP-951, the new epoch) reaches the new leader before
    // it has opened the partition: the request waits for the opening instead of being turned
    // away into the client's error back-off.
    let target = (0..c.len())
        .find(|&i| c.node_id(i) == to)
        .expect("the target broker");
    let ResponseKind::Fetch(f) = call(
        c.port(target),
        ApiKey::Fetch,
        12,
        RequestKind::Fetch(
            FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 20)
                .with_topics(vec![fetch_request::FetchTopic::default()
                    .with_topic(TopicName(s("moving")))
                    .with_partitions(vec![fetch_request::FetchPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(epoch + 1)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(1 << 20)])]),
        ),
    ) else {
        panic!("not a Fetch response")
    };
    let p = &f.responses[0].partitions[0];
    assert_eq!(
        p.error_code, 0,
        "the new leader answers the redirected fetch"
    );
    assert_eq!(p.high_watermark, 300);
    assert!(p.records.as_ref().is_some_and(|r| !r.is_empty()));
    eventually(15, "the partition moves", || {
        let (l, e) = leaders(c.port(0), "moving")[0];
        l == to && e > epoch
    });
    let ResponseKind::ListPartitionReassignments(l) = call(
        c.port(0),
        ApiKey::ListPartitionReassignments,
        0,
        RequestKind::ListPartitionReassignments(ListPartitionReassignmentsRequest::default()),
    ) else {
        panic!("not a ListPartitionReassignments response")
    };
    assert!(l.topics.is_empty(), "the move is over: {:?}", l.topics);
    let want: Vec<String> = (0..300).map(value).collect();
    assert_eq!(consume(&c.bootstrap(), "moving", 300), want);
    // A reassignment naming two replicas is refused: a partition has one, its leader.
    let r = reassign(c.port(0), "moving", 0, &[1, 2]);
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        kafka_protocol::ResponseError::InvalidReplicationFactor.code()
    );
    c.assert_no_panic();
}

/// Two members of one group, each bootstrapped from a different broker, share the partitions
/// through the one coordinator FindCoordinator names, and together read every record.
#[test]
fn a_group_whose_members_connect_to_different_brokers() {
    let c = Cluster::new(3);
    create_topic(c.port(0), "grouped", 4);
    let member = |i: usize| -> BaseConsumer {
        let m: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", c.broker(i).bootstrap())
            .set("group.id", "spread-group")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", "10000")
            .create()
            .expect("consumer");
        m.subscribe(&["grouped"]).expect("subscribe");
        m
    };
    let (a, b) = (member(0), member(2));
    eventually(60, "both members get partitions", || {
        let _ = a.poll(Duration::from_millis(50));
        let _ = b.poll(Duration::from_millis(50));
        let n = |m: &BaseConsumer| m.assignment().map_or(0, |t| t.count());
        n(&a) > 0 && n(&b) > 0 && n(&a) + n(&b) == 4
    });
    let (p, acks) = idempotent_producer(&c.bootstrap());
    for i in 0..400 {
        send(&p, "grouped", i % 4, &format!("g{i}"));
    }
    p.flush(Duration::from_secs(60)).expect("flush");
    let acked: std::collections::BTreeSet<String> =
        acks.0.lock().unwrap().values().cloned().collect();
    assert_eq!(acked.len(), 400);
    let mut got = std::collections::BTreeSet::new();
    let (mut from_a, mut from_b) = (0, 0);
    let t = Instant::now();
    while got.len() < 400 && t.elapsed() < Duration::from_secs(60) {
        for (m, n) in [(&a, &mut from_a), (&b, &mut from_b)] {
            if let Some(Ok(r)) = m.poll(Duration::from_millis(20)) {
                got.insert(String::from_utf8_lossy(r.payload().unwrap_or(&[])).to_string());
                *n += 1;
            }
        }
    }
    assert_eq!(got, acked);
    assert!(from_a > 0 && from_b > 0, "a read {from_a}, b read {from_b}");
    c.assert_no_panic();
}

/// SIGTERM to a broker under idempotent produce load: its partitions move to the others
/// before it exits, producers see only retriable errors, and every acknowledged record is read
/// back once, in order, per partition.
#[test]
fn sigterm_hands_partitions_over_and_loses_nothing() {
    let mut c = Cluster::new(3);
    create_topic(c.port(0), "handover", 6);
    // Another broker learns of the new leaders from the metadata store, a moment later on a
    // loaded machine.
    eventually(
        10,
        "every partition has a leader on broker 2's view",
        || {
            let seen = leaders(c.port(1), "handover");
            seen.len() == 6 && seen.iter().all(|(l, _)| *l > 0)
        },
    );
    let before = leaders(c.port(1), "handover");
    assert!(before.iter().any(|(l, _)| *l == 1), "{before:?}");
    let w = Writer::start(&c.bootstrap(), "handover", 6);
    std::thread::sleep(Duration::from_millis(1500));
    c.stop(0);
    std::thread::sleep(Duration::from_millis(1500));
    let acked = w.finish();
    let after = leaders(c.port(1), "handover");
    assert!(
        after.iter().all(|(l, _)| *l != 1),
        "broker 1 still leads: {after:?}"
    );
    check_read_back(&c.broker(1).bootstrap(), "handover", 6, &acked);
    c.assert_no_panic();
}

/// An idempotent producer writing `topic`'s `partitions` round-robin from a thread until told
/// to stop; `finish` flushes it and returns how many records were sent.
struct Writer {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
    acks: Acks,
}

impl Writer {
    fn start(bootstrap: &str, topic: &'static str, partitions: i32) -> Writer {
        let (p, acks) = idempotent_producer(bootstrap);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    send(
                        &p,
                        topic,
                        (i % partitions as u64) as i32,
                        &format!("f{i:08}"),
                    );
                    i += 1;
                    if i.is_multiple_of(20) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                p.flush(Duration::from_secs(90)).expect("flush");
                i
            })
        };
        Writer { stop, thread, acks }
    }

    /// Stops, flushes, and checks that every record sent was acknowledged, none failed.
    fn finish(self) -> BTreeMap<(i32, i64), String> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let sent = self.thread.join().expect("writer");
        let failures = self.acks.1.lock().unwrap().clone();
        assert!(failures.is_empty(), "deliveries failed: {failures:?}");
        let acked = self.acks.0.lock().unwrap().clone();
        assert_eq!(acked.len() as u64, sent, "every record acknowledged");
        acked
    }
}

/// Every acknowledged record is read back, at its offset, once, and per partition in the order
/// it was sent.
fn check_read_back(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    acked: &BTreeMap<(i32, i64), String>,
) {
    let got = read_all(bootstrap, topic, partitions, acked.len());
    assert_eq!(got.len(), acked.len(), "records read back");
    assert_eq!(
        &got, acked,
        "every acknowledged record, at its offset, once"
    );
    for part in 0..partitions {
        let vals: Vec<&String> = got
            .iter()
            .filter(|((p, _), _)| *p == part)
            .map(|(_, v)| v)
            .collect();
        assert!(
            vals.windows(2).all(|w| w[0] < w[1]),
            "partition {part} out of order"
        );
    }
}

/// Sum of a metric over the running brokers among `live`.
fn metric_sum(c: &Cluster, live: &[usize], name: &str) -> u64 {
    live.iter().map(|&i| c.broker(i).metric(name)).sum()
}

/// Timings that keep failover tests short (the defaults give produce back in under 5 s).
const FAST_FAILOVER: &[(&str, &str)] = &[
    ("WEIR_CLUSTER_SESSION_TIMEOUT_MS", "2000"),
    ("WEIR_CLUSTER_HEARTBEAT_INTERVAL_MS", "250"),
    ("WEIR_CLUSTER_WAL_RETRY_INTERVAL_MS", "1000"),
    // Nothing is uploaded before the kill unless the WAL holds a lot: the recovery has work.
    ("WEIR_STORAGE_UPLOAD_INTERVAL_MS", "60000"),
];

/// `kill -9` of a leader under idempotent load: a peer recovers its WAL, its partitions are led
/// by live brokers at a higher epoch, producers resume without a failed delivery, and every
/// acknowledged record is read back once, in order. Started again, the killed broker finds its
/// WAL recovered and starts empty.
#[test]
fn a_killed_leaders_wal_is_recovered_by_a_peer_and_nothing_is_lost() {
    let mut c = Cluster::with_env(3, FAST_FAILOVER);
    create_topic(c.port(1), "failover", 6);
    let before = leaders(c.port(1), "failover");
    assert!(before.iter().any(|(l, _)| *l == 1), "{before:?}");
    let w = Writer::start(&c.bootstrap(), "failover", 6);
    std::thread::sleep(Duration::from_millis(1500));
    c.kill(0);
    eventually(
        30,
        "the killed broker's partitions led by live brokers",
        || {
            leaders(c.port(1), "failover")
                .iter()
                .all(|(l, _)| *l == 2 || *l == 3)
        },
    );
    let after = leaders(c.port(1), "failover");
    for ((l0, e0), (_, e1)) in before.iter().zip(&after) {
        if *l0 == 1 {
            assert!(e1 > e0, "epoch did not grow: {before:?} -> {after:?}");
        }
    }
    std::thread::sleep(Duration::from_millis(1500));
    let acked = w.finish();
    assert_eq!(metric_sum(&c, &[1, 2], "weir_wal_recoveries_total"), 1);
    check_read_back(&c.broker(1).bootstrap(), "failover", 6, &acked);

    c.start(0);
    let log = c.broker(0).log_text();
    assert!(log.contains("starting empty"), "{log}");
    c.assert_no_panic();
}

/// A leader paused (SIGSTOP) past its session timeout is replaced: a peer seals and recovers
/// its WAL. Resumed (SIGCONT), it acknowledges nothing it wrote after being replaced (every
/// acknowledged record is read back), finds out, and starts again empty in the same process.
#[test]
fn a_paused_leader_is_replaced_and_acknowledges_nothing_after() {
    let c = Cluster::with_env(3, FAST_FAILOVER);
    create_topic(c.port(1), "zombie", 6);
    let w = Writer::start(&c.bootstrap(), "zombie", 6);
    std::thread::sleep(Duration::from_millis(1500));
    c.signal(0, libc::SIGSTOP);
    eventually_in(
        &c,
        30,
        "the paused broker's partitions led by live brokers",
        || {
            leaders(c.port(1), "zombie")
                .iter()
                .all(|(l, _)| *l == 2 || *l == 3)
        },
    );
    std::thread::sleep(Duration::from_millis(500));
    c.signal(0, libc::SIGCONT);
    eventually_in(&c, 30, "the zombie starting again", || {
        c.broker(0)
            .log_text()
            .contains("starting again after being replaced")
    });
    eventually(30, "the restarted broker ready", || {
        http_get(c.admin_port(0), "/readyz").map(|r| r.0) == Some(200)
    });
    std::thread::sleep(Duration::from_millis(1000));
    let acked = w.finish();
    check_read_back(&c.broker(1).bootstrap(), "zombie", 6, &acked);
    assert!(c.is_running(0), "the replaced broker's process exited");
    c.assert_no_panic();
}

/// A dead broker's WAL that no live broker can open (here: moved away, as an unmounted disk):
/// its partitions wait for it (the controller reports them), nothing else is affected; once the
/// WAL is back at its path a peer recovers it and nothing acknowledged is lost.
#[test]
fn a_wal_no_peer_can_open_makes_its_partitions_wait() {
    let mut c = Cluster::with_env(3, FAST_FAILOVER);
    create_topic(c.port(1), "waiting", 6);
    let before = leaders(c.port(1), "waiting");
    let w = Writer::start(&c.bootstrap(), "waiting", 6);
    std::thread::sleep(Duration::from_millis(1500));
    let wal = c.data_dir(0).join("wal");
    let away = c.data_dir(0).join("wal.unmounted");
    c.kill(0);
    std::fs::rename(&wal, &away).expect("move the WAL away");
    eventually(30, "the controller reporting partitions that wait", || {
        metric_sum(&c, &[1, 2], "weir_partitions_waiting_for_wal") > 0
    });
    let waiting = metric_sum(&c, &[1, 2], "weir_partitions_waiting_for_wal");
    let led_by_dead = before.iter().filter(|(l, _)| *l == 1).count() as u64;
    assert_eq!(waiting, led_by_dead);
    // They stay with the dead broker while its WAL cannot be read.
    std::thread::sleep(Duration::from_millis(2500));
    let now = leaders(c.port(1), "waiting");
    for (b, n) in before.iter().zip(&now) {
        if b.0 == 1 {
            assert_ne!(n.0, 2, "moved without its WAL: {now:?}");
            assert_ne!(n.0, 3, "moved without its WAL: {now:?}");
        }
    }
    std::fs::rename(&away, &wal).expect("put the WAL back");
    eventually(30, "the WAL recovered once it is back", || {
        leaders(c.port(1), "waiting")
            .iter()
            .all(|(l, _)| *l == 2 || *l == 3)
    });
    let acked = w.finish();
    check_read_back(&c.broker(1).bootstrap(), "waiting", 6, &acked);
    assert!(metric_sum(&c, &[1, 2], "weir_wal_recoveries_unreachable_total") >= 2);
    c.assert_no_panic();
}
