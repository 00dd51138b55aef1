//! The hand-off forwarder against a stand-in leader (a TCP server speaking the internal wire)
//! and an in-memory object store: references reach the leader in submission order across
//! objects, each entry gets its own answer, objects are deleted once answered (and a restart
//! sweeps leftovers), and failures answer with the retriable Kafka errors: a PUT that fails,
//! a leader that cannot be reached, a leader that answers garbage.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use weir_zone::handoff::{KAFKA_STORAGE_ERROR, NOT_LEADER_OR_FOLLOWER};
use weir_zone::wire::{self, ForwardProduce, ForwardResult};
use weir_zone::{Forwarder, HandoffConfig, Leader, NetMeters, Peers};

/// What the stand-in leader received: (object key, topic, partition, records), in order.
type Seen = Arc<Mutex<Vec<(String, String, i32, Bytes)>>>;

/// A leader that reads each ForwardProduce's span from `store` and answers every entry with
/// consecutive offsets, as one partition's leader would; or, with `garbage`, answers bytes
/// that do not decode.
async fn stand_in_leader(store: Arc<dyn ObjectStore>, garbage: bool) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let seen: Seen = Arc::default();
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        let mut next_offset = 0i64;
        let (mut sock, _) = listener.accept().await.expect("accept");
        loop {
            let mut len = [0u8; 4];
            if sock.read_exact(&mut len).await.is_err() {
                return;
            }
            let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
            sock.read_exact(&mut frame).await.expect("frame");
            let mut frame = Bytes::from(frame);
            let key = frame.get_i16();
            let _version = frame.get_i16();
            let correlation = frame.get_i32();
            if key != wire::FORWARD_PRODUCE {
                continue; // the hello
            }
            let m = ForwardProduce::decode(frame).expect("a forward produce");
            let span = m.position..m.position + m.span();
            let data = store
                .get_range(&Path::from(m.object_key.as_str()), span)
                .await
                .expect("the span is in the object");
            let mut at = 0usize;
            let mut results = Vec::new();
            for e in &m.entries {
                let records = data.slice(at..at + e.len as usize);
                at += e.len as usize;
                record.lock().unwrap().push((
                    m.object_key.clone(),
                    e.topic.clone(),
                    e.partition,
                    records,
                ));
                results.push(ForwardResult {
                    error: 0,
                    base_offset: next_offset,
                    log_start_offset: 0,
                });
                next_offset += 1;
            }
            let body = if garbage {
                BytesMut::from(&b"\xff\xff\xff\xff"[..])
            } else {
                wire::encode_forward_results(&results)
            };
            let mut out = BytesMut::new();
            out.put_u32(4 + body.len() as u32);
            out.put_i32(correlation);
            out.extend_from_slice(&body);
            sock.write_all(&out).await.expect("answer");
        }
    });
    (addr, seen)
}

fn leader(addr: &str) -> Leader {
    Leader {
        node_id: 7,
        internal_addr: addr.to_string(),
        zone: "az1".into(),
    }
}

fn forwarder(store: Arc<dyn ObjectStore>, linger_ms: u64) -> Arc<Forwarder> {
    bounded_forwarder(store, linger_ms, 0.0)
}

/// A forwarder with 4 KiB objects, 4 in flight, and at most `puts_per_sec` objects a second
/// that are not full (0: no bound).
fn bounded_forwarder(
    store: Arc<dyn ObjectStore>,
    linger_ms: u64,
    puts_per_sec: f64,
) -> Arc<Forwarder> {
    let peers = Peers::new(3, "az2", Arc::new(NetMeters::default()));
    Forwarder::start(
        3,
        store,
        peers,
        HandoffConfig {
            linger: Duration::from_millis(linger_ms),
            max_bytes: 4 << 10,
            max_in_flight: 4,
            max_puts_per_sec: puts_per_sec,
        },
    )
}

async fn keys(store: &Arc<dyn ObjectStore>) -> Vec<Path> {
    store
        .list(None)
        .filter_map(|m| async move { m.ok().map(|m| m.location) })
        .collect()
        .await
}

#[tokio::test]
async fn references_reach_the_leader_in_submission_order_and_objects_are_deleted() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (addr, seen) = stand_in_leader(Arc::clone(&store), false).await;
    let f = forwarder(Arc::clone(&store), 1);
    // 300 entries of 100 bytes over three partitions: several objects (4 KiB each at most),
    // several in flight at once.
    let mut outcomes = Vec::new();
    for i in 0..300u32 {
        let records = Bytes::from(format!("{i:0100}").into_bytes());
        outcomes.push(f.submit(leader(&addr), "t", (i % 3) as i32, records));
        if i % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    for (i, o) in outcomes.into_iter().enumerate() {
        let r = o.await.expect("answered").expect("appended");
        assert_eq!(
            r.base_offset, i as i64,
            "entry {i} was appended out of order"
        );
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 300);
    for (i, (_, topic, partition, records)) in seen.iter().enumerate() {
        assert_eq!((topic.as_str(), *partition), ("t", (i % 3) as i32));
        assert_eq!(records, &Bytes::from(format!("{i:0100}").into_bytes()));
    }
    let objects: std::collections::BTreeSet<_> = seen.iter().map(|s| s.0.clone()).collect();
    // Several objects (4 KiB each, a little more when entries arrive while one is sealed),
    // so the order holds across objects, not only inside one.
    assert!(
        objects.len() >= 4,
        "{} objects for 30 KB at 4 KiB each",
        objects.len()
    );
    assert_eq!(f.meters.objects.get(), objects.len() as u64);
    // Deleted once answered (the delete follows the answers).
    for _ in 0..100 {
        if keys(&store).await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        keys(&store).await.is_empty(),
        "hand-off objects left behind"
    );
}

#[tokio::test]
async fn objects_that_are_not_full_are_bounded_per_second() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (addr, _) = stand_in_leader(Arc::clone(&store), false).await;
    let f = bounded_forwarder(Arc::clone(&store), 1, 10.0);
    // Small entries every 5 ms for a second: without the bound, an object each (about 200).
    let started = std::time::Instant::now();
    let mut outcomes = Vec::new();
    while started.elapsed() < Duration::from_secs(1) {
        outcomes.push(f.submit(leader(&addr), "t", 0, Bytes::from_static(b"small")));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for o in outcomes {
        o.await.expect("answered").expect("appended");
    }
    let small = f.meters.objects.get();
    assert!(
        (3..=12).contains(&small),
        "{small} objects in a second at 10 a second"
    );
}

#[tokio::test]
async fn full_objects_are_not_held_back_by_the_bound() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (addr, _) = stand_in_leader(Arc::clone(&store), false).await;
    // One object that is not full every 5 s.
    let f = bounded_forwarder(Arc::clone(&store), 1, 0.2);
    let first = f.submit(leader(&addr), "t", 0, Bytes::from_static(b"small"));
    first.await.expect("answered").expect("appended");
    // Ten full objects right after: none waits the 5 s a small one would.
    let started = std::time::Instant::now();
    let full: Vec<_> = (0..10)
        .map(|_| f.submit(leader(&addr), "t", 0, Bytes::from(vec![b'x'; 4 << 10])))
        .collect();
    for o in full {
        o.await.expect("answered").expect("appended");
    }
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "full objects waited for the bound: {:?}",
        started.elapsed()
    );
    // The burst arrived at once: one object or a few, sealed as soon as they were full.
    assert!(f.meters.objects.get() >= 2);
}

#[tokio::test]
async fn a_restart_sweeps_its_own_leftovers_only() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    for key in [
        "handoff/3/old-a",
        "handoff/3/old-b",
        "handoff/4/other",
        "objects/x",
    ] {
        store
            .put(&Path::from(key), Bytes::from_static(b"x").into())
            .await
            .expect("put");
    }
    let f = forwarder(Arc::clone(&store), 1);
    assert_eq!(f.sweep().await, 2);
    let left: Vec<String> = keys(&store).await.iter().map(|p| p.to_string()).collect();
    assert_eq!(left.len(), 2);
    assert!(
        left.iter().all(|k| !k.starts_with("handoff/3/")),
        "{left:?}"
    );
}

#[tokio::test]
async fn a_failed_put_answers_kafka_storage_error() {
    let options = weir_storage::objstore::StoreOptions {
        faults: weir_storage::objstore::FaultConfig {
            put_error_rate: 1.0,
            ..Default::default()
        },
        ..Default::default()
    };
    let (store, _) =
        weir_storage::objstore::from_url_with_switch("memory://", &options).expect("store");
    let (addr, seen) = stand_in_leader(Arc::clone(&store), false).await;
    let f = forwarder(store, 1);
    let o = f.submit(leader(&addr), "t", 0, Bytes::from_static(b"records"));
    assert_eq!(o.await.expect("answered"), Err(KAFKA_STORAGE_ERROR));
    assert!(
        seen.lock().unwrap().is_empty(),
        "the leader was sent a reference to nothing"
    );
    assert_eq!(f.meters.failures.get(), 1);
}

#[tokio::test]
async fn an_unreachable_or_garbled_leader_answers_not_leader_or_follower() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    // Nobody listens there.
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        l.local_addr().expect("addr").to_string()
    };
    let f = forwarder(Arc::clone(&store), 1);
    let o = f.submit(leader(&closed), "t", 0, Bytes::from_static(b"records"));
    assert_eq!(o.await.expect("answered"), Err(NOT_LEADER_OR_FOLLOWER));
    // A leader whose answer does not decode.
    let (addr, _) = stand_in_leader(Arc::clone(&store), true).await;
    let f = forwarder(Arc::clone(&store), 1);
    let o = f.submit(leader(&addr), "t", 0, Bytes::from_static(b"records"));
    assert_eq!(o.await.expect("answered"), Err(NOT_LEADER_OR_FOLLOWER));
}
