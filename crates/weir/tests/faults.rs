//! The fault switches through the real `weir serve` binary and a real client (librdkafka):
//! records are produced, uploaded by a clean shutdown, and read back from objects after a
//! restart with the object store's latency switch on (issue 9: every such read panicked on a
//! `file://` store); and with every GET failing, a Fetch is answered with KAFKA_STORAGE_ERROR,
//! not with an empty success, while the broker goes on serving.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{consume, produce, value, Broker};

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, Producer};

const TOPIC: &str = "faults";
const KAFKA_STORAGE_ERROR: i16 = 56;

#[test]
fn object_store_latency_switch_serves_reads_from_objects_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    const N: u64 = 5000;
    let b = Broker::start_in(dir.path(), "produce", &[]);
    produce(&b.bootstrap(), TOPIC, N);
    b.stop();

    let b = Broker::start_in(
        dir.path(),
        "read",
        &[("WEIR_OBJECT_STORE_FAULT_LATENCY_MS", "20")],
    );
    let got = consume(&b.bootstrap(), TOPIC, N);
    b.assert_no_panic();
    assert_eq!(
        got.len() as u64,
        N,
        "records read back through the latency switch"
    );
    for (i, v) in got.iter().enumerate() {
        assert_eq!(v, &value(i as u64), "record {i}");
    }
    // The switch applies to writes too: more records, uploaded through it at shutdown.
    produce(&b.bootstrap(), TOPIC, 10);
    b.stop();
    let b = Broker::start_in(dir.path(), "read-again", &[]);
    assert_eq!(consume(&b.bootstrap(), TOPIC, N + 10).len() as u64, N + 10);
    b.assert_no_panic();
}

/// Fetch v4 of partition 0 from `offset`; returns the partition's error code and record bytes.
fn fetch_v4(port: u16, offset: i64) -> (i16, usize) {
    let mut body = Vec::new();
    body.extend_from_slice(&(-1i32).to_be_bytes()); // replica id
    body.extend_from_slice(&0i32.to_be_bytes()); // max wait ms
    body.extend_from_slice(&1i32.to_be_bytes()); // min bytes
    body.extend_from_slice(&(1i32 << 20).to_be_bytes()); // max bytes
    body.push(0); // isolation level
    body.extend_from_slice(&1i32.to_be_bytes()); // one topic
    body.extend_from_slice(&(TOPIC.len() as i16).to_be_bytes());
    body.extend_from_slice(TOPIC.as_bytes());
    body.extend_from_slice(&1i32.to_be_bytes()); // one partition
    body.extend_from_slice(&0i32.to_be_bytes());
    body.extend_from_slice(&offset.to_be_bytes());
    body.extend_from_slice(&(1i32 << 20).to_be_bytes());

    let mut req = Vec::new();
    req.extend_from_slice(&1i16.to_be_bytes()); // Fetch
    req.extend_from_slice(&4i16.to_be_bytes());
    req.extend_from_slice(&7i32.to_be_bytes()); // correlation id
    req.extend_from_slice(&4i16.to_be_bytes());
    req.extend_from_slice(b"test");
    req.extend_from_slice(&body);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(&(req.len() as i32).to_be_bytes()).unwrap();
    s.write_all(&req).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len)
        .expect("a Fetch response, not a closed connection");
    let mut resp = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut resp).unwrap();

    // correlation id, throttle time, topics [name, partitions [index, error code, high
    // watermark, last stable offset, aborted transactions, records]].
    let mut r = &resp[..];
    let mut take = |n: usize| {
        let (a, b) = r.split_at(n);
        r = b;
        a.to_vec()
    };
    assert_eq!(take(4), 7i32.to_be_bytes(), "correlation id");
    take(4);
    assert_eq!(take(4), 1i32.to_be_bytes(), "one topic");
    let name_len = i16::from_be_bytes(take(2).try_into().unwrap()) as usize;
    assert_eq!(take(name_len), TOPIC.as_bytes());
    assert_eq!(take(4), 1i32.to_be_bytes(), "one partition");
    assert_eq!(take(4), 0i32.to_be_bytes(), "partition 0");
    let error = i16::from_be_bytes(take(2).try_into().unwrap());
    take(16);
    let aborted = i32::from_be_bytes(take(4).try_into().unwrap());
    take(16 * aborted.max(0) as usize);
    let records = i32::from_be_bytes(take(4).try_into().unwrap());
    (error, records.max(0) as usize)
}

#[test]
fn failed_object_reads_answer_fetch_with_kafka_storage_error() {
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start_in(dir.path(), "produce", &[]);
    produce(&b.bootstrap(), TOPIC, 200);
    let (error, bytes) = fetch_v4(b.port, 0);
    assert_eq!(error, 0);
    assert!(bytes > 0, "data before the restart");
    b.stop();

    let b = Broker::start_in(
        dir.path(),
        "read",
        &[("WEIR_OBJECT_STORE_FAULT_GET_ERROR_RATE", "1.0")],
    );
    for _ in 0..3 {
        let (error, bytes) = fetch_v4(b.port, 0);
        assert_eq!(
            (error, bytes),
            (KAFKA_STORAGE_ERROR, 0),
            "a failed object read must answer KAFKA_STORAGE_ERROR"
        );
    }
    b.assert_no_panic();
    // The broker goes on serving what needs no GET: new records, from the log cache.
    produce(&b.bootstrap(), TOPIC, 10);
    let (error, bytes) = fetch_v4(b.port, 200);
    assert_eq!((error, bytes > 0), (0, true));
    b.stop();
}

/// The WAL fault switch from the environment: with every sync failing, a produce is not
/// acknowledged, the WAL counts its failed writes, and the broker keeps serving; restarted
/// without the switch, it takes the same records.
#[test]
fn wal_fault_switch_from_the_environment_fails_writes() {
    let dir = tempfile::tempdir().unwrap();
    let b = Broker::start_in(
        dir.path(),
        "failing",
        &[("WEIR_WAL_FAULT_SYNC_ERROR_RATE", "1.0")],
    );
    let producer: rdkafka::producer::BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("acks", "all")
        .set("message.timeout.ms", "3000")
        .create()
        .expect("producer");
    let v = value(0);
    producer
        .send(BaseRecord::<(), String>::to(TOPIC).partition(0).payload(&v))
        .map_err(|(e, _)| e)
        .expect("queued");
    let _ = producer.flush(Duration::from_secs(10));
    assert_eq!(producer.in_flight_count(), 0);
    assert!(
        b.metric("weir_wal_write_errors_total") > 0,
        "the switch failed no WAL write"
    );
    assert_eq!(b.metric("weir_wal_syncs_total"), 0, "no write succeeded");
    b.assert_no_panic();
    b.stop();

    let b = Broker::start_in(dir.path(), "healthy", &[]);
    produce(&b.bootstrap(), TOPIC, 20);
    // Nothing of the failed produce is in the partition: it starts with the new records.
    let want: Vec<String> = (0..20).map(value).collect();
    assert_eq!(consume(&b.bootstrap(), TOPIC, 20), want);
    b.stop();
}
