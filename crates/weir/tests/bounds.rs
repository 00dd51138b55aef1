//! The real `weir serve` binary against clients that ask for more than it allows, and clients
//! of older protocol versions: `fetch.max.bytes`, `max.connections`, the queued request bytes
//! of a connection flooding produce requests while the WAL is full, and ListOffsets at every
//! version it advertises.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Broker;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

fn start(env: &[(&str, String)]) -> Broker {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Broker::start(&env)
}

fn metric(b: &Broker, name: &str) -> u64 {
    b.metric(name)
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn frame(key: ApiKey, v: i16, correlation_id: i32, body: &RequestKind) -> Vec<u8> {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(v)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(s("bounds-test")))
        .encode(&mut buf, key.request_header_version(v))
        .expect("header");
    body.encode(&mut buf, v).expect("body");
    let mut out = (buf.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&buf);
    out
}

/// Reads one response; `None` if the connection closed.
fn recv(c: &mut TcpStream, key: ApiKey, v: i16) -> Option<ResponseKind> {
    let mut len = [0u8; 4];
    c.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    c.read_exact(&mut body).ok()?;
    let mut b = Bytes::from(body);
    ResponseHeader::decode(&mut b, key.response_header_version(v)).expect("response header");
    let r = ResponseKind::decode(key, &mut b, v).expect("response");
    assert!(!b.has_remaining());
    Some(r)
}

fn connect(b: &Broker) -> TcpStream {
    let c = TcpStream::connect(("127.0.0.1", b.port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    c
}

fn call(c: &mut TcpStream, key: ApiKey, v: i16, body: RequestKind) -> Option<ResponseKind> {
    c.write_all(&frame(key, v, 1, &body)).ok()?;
    recv(c, key, v)
}

/// One record batch of `n` records of `size` bytes.
fn batch(n: usize, size: usize) -> Bytes {
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32 - 1,
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::from(vec![b'x'; size])),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encode a batch");
    buf.freeze()
}

fn create_topic(c: &mut TcpStream, name: &str, partitions: i32) {
    let r = call(
        c,
        ApiKey::CreateTopics,
        5,
        RequestKind::CreateTopics(CreateTopicsRequest::default().with_topics(vec![
            create_topics_request::CreatableTopic::default()
                .with_name(TopicName(s(name)))
                .with_num_partitions(partitions)
                .with_replication_factor(1),
        ])),
    );
    let Some(ResponseKind::CreateTopics(r)) = r else {
        panic!("{r:?}")
    };
    assert_eq!(r.topics[0].error_code, 0, "{r:?}");
}

fn produce_request(topic: &str, records: Bytes) -> RequestKind {
    produce_request_acks(topic, records, -1)
}

fn produce_request_acks(topic: &str, records: Bytes, acks: i16) -> RequestKind {
    use produce_request::{PartitionProduceData, TopicProduceData};
    RequestKind::Produce(
        ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(s(topic)))
                .with_partition_data(vec![
                    PartitionProduceData::default().with_records(Some(records))
                ])]),
    )
}

#[test]
fn list_offsets_is_answered_at_every_advertised_version() {
    let b = start(&[]);
    let mut c = connect(&b);
    create_topic(&mut c, "lo", 1);
    let r = call(
        &mut c,
        ApiKey::Produce,
        9,
        produce_request("lo", batch(3, 10)),
    );
    assert!(matches!(r, Some(ResponseKind::Produce(_))), "{r:?}");
    let (min, max) = weir_api::supported_versions(ApiKey::ListOffsets).expect("advertised");
    for v in min..=max {
        for ts in [-1, -2] {
            let r = call(
                &mut c,
                ApiKey::ListOffsets,
                v,
                RequestKind::ListOffsets(ListOffsetsRequest::default().with_topics(vec![
                    list_offsets_request::ListOffsetsTopic::default()
                        .with_name(TopicName(s("lo")))
                        .with_partitions(vec![
                            list_offsets_request::ListOffsetsPartition::default()
                                .with_timestamp(ts),
                        ]),
                ])),
            );
            let Some(ResponseKind::ListOffsets(r)) = r else {
                panic!("ListOffsets v{v}: {r:?}")
            };
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0, "v{v}");
            assert_eq!(p.offset, if ts == -1 { 3 } else { 0 }, "v{v}");
        }
    }
    assert_eq!(metric(&b, "weir_response_encode_errors_total"), 0);
}

#[test]
fn fetch_returns_at_most_fetch_max_bytes() {
    let cap = 1usize << 20;
    let b = start(&[("WEIR_BROKER_FETCH_MAX_BYTES", cap.to_string())]);
    let mut c = connect(&b);
    create_topic(&mut c, "big", 1);
    let one = batch(4, 50_000);
    for _ in 0..10 {
        let r = call(
            &mut c,
            ApiKey::Produce,
            9,
            produce_request("big", one.clone()),
        );
        let Some(ResponseKind::Produce(r)) = r else {
            panic!("{r:?}")
        };
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    // A client that asks for 1 GiB (and 1 GiB per partition) gets fetch.max.bytes at most.
    let r = call(
        &mut c,
        ApiKey::Fetch,
        12,
        RequestKind::Fetch(
            FetchRequest::default()
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 30)
                .with_topics(vec![fetch_request::FetchTopic::default()
                    .with_topic(TopicName(s("big")))
                    .with_partitions(vec![
                        fetch_request::FetchPartition::default().with_partition_max_bytes(1 << 30)
                    ])]),
        ),
    );
    let Some(ResponseKind::Fetch(r)) = r else {
        panic!("{r:?}")
    };
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    let got = p.records.as_ref().map_or(0, |r| r.len());
    assert_eq!(
        got,
        cap / one.len() * one.len(),
        "as many whole batches as fit"
    );
    assert!(got <= cap);
}

#[test]
fn connections_over_max_connections_are_refused() {
    let b = start(&[("WEIR_BROKER_MAX_CONNECTIONS", "2".to_string())]);
    let hello = || RequestKind::ApiVersions(ApiVersionsRequest::default());
    let mut first = connect(&b);
    let mut second = connect(&b);
    assert!(call(&mut first, ApiKey::ApiVersions, 3, hello()).is_some());
    assert!(call(&mut second, ApiKey::ApiVersions, 3, hello()).is_some());
    let mut third = connect(&b);
    assert!(
        call(&mut third, ApiKey::ApiVersions, 3, hello()).is_none(),
        "the connection over the limit is closed"
    );
    assert_eq!(metric(&b, "weir_connections_refused_total"), 1);
    assert!(call(&mut first, ApiKey::ApiVersions, 3, hello()).is_some());
    // A freed slot is taken again.
    drop(second);
    let t = Instant::now();
    while metric(&b, "weir_connections_closed_total") < 1 {
        assert!(t.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut fourth = connect(&b);
    assert!(call(&mut fourth, ApiKey::ApiVersions, 3, hello()).is_some());
}

#[test]
fn a_connection_flooding_produce_into_a_full_wal_stops_being_read() {
    flood(-1);
}

/// acks=0 produce used to be spawned off and forgotten: its bytes were released at once, so a
/// client flooding acks=0 requests into a full WAL was never slowed down.
#[test]
fn a_connection_flooding_acks_0_produce_into_a_full_wal_stops_being_read() {
    flood(0);
}

fn flood(acks: i16) {
    // Uploads hang (latency on a memory store), so the small WAL fills and produce requests
    // wait for space, holding their bytes.
    let cap = 4usize << 20;
    let b = start(&[
        ("WEIR_WAL_CAPACITY", (4u64 << 20).to_string()),
        ("WEIR_WAL_FULL_WAIT_MS", "600000".to_string()),
        ("WEIR_OBJECT_STORE_URL", "memory://".to_string()),
        ("WEIR_OBJECT_STORE_FAULT_LATENCY_MS", "600000".to_string()),
        (
            "WEIR_BROKER_QUEUED_MAX_REQUEST_BYTES_PER_CONNECTION",
            cap.to_string(),
        ),
    ]);
    let mut c = connect(&b);
    create_topic(&mut c, "flood", 1);
    let request = frame(
        ApiKey::Produce,
        9,
        2,
        &produce_request_acks("flood", batch(1, 500_000), acks),
    );
    // 64 requests, 32 MB, written from a thread: once the broker stops reading, the writes
    // block on full socket buffers.
    let mut w = c.try_clone().expect("clone the stream");
    let writer = std::thread::spawn(move || {
        for _ in 0..64 {
            if w.write_all(&request).is_err() {
                return;
            }
        }
    });
    let t = Instant::now();
    while metric(&b, "weir_connection_read_pauses_total") < 1 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the connection never paused; held {} bytes",
            metric(&b, "weir_queued_request_bytes")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Requests written to the WAL before it filled up release their bytes as they complete,
    // which a loaded machine may do only after the pause: wait for the held bytes to settle.
    let t = Instant::now();
    loop {
        let held = metric(&b, "weir_queued_request_bytes") as usize;
        assert!(held <= cap, "{held} bytes held, over the bound of {cap}");
        if held > cap / 2 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{held} bytes held: requests are waiting"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(b);
    let _ = writer.join();
}
