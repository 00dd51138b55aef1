//! The listener with a stand-in handler: panics and unencodable responses get the API's error
//! response on a connection that stays open; connections over `max.connections` are closed at
//! accept; a connection (and all of them together) stop reading at their queued-bytes bounds
//! and go on once answers free room.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use weir_api::Reply;
use weir_network::{serve, Handler, NetworkConfig, NetworkMeters};

/// Answers ApiVersions; panics on Metadata (at once) and Heartbeat (in its later answer);
/// answers ListOffsets with a leader epoch, which versions below 4 cannot carry; holds Produce
/// requests until released. JoinGroup (in its later answer) and OffsetCommit (before it
/// answers) each take `store`, a lock shared by every request as a metadata store's one
/// connection is.
struct Stub {
    produces: AtomicUsize,
    joins: AtomicUsize,
    release: watch::Receiver<bool>,
    store: Arc<tokio::sync::Mutex<()>>,
}

impl Handler for Stub {
    async fn handle(
        self: &Arc<Self>,
        _header: &RequestHeader,
        request: RequestKind,
        _conn: &weir_api::Conn,
    ) -> Reply {
        match request {
            RequestKind::ApiVersions(_) => Reply::Now(Box::new(ResponseKind::ApiVersions(
                weir_api::api_versions_response(0),
            ))),
            RequestKind::Metadata(_) => panic!("injected panic in a handler"),
            RequestKind::Heartbeat(_) => Reply::Later(Box::pin(async {
                tokio::task::yield_now().await;
                panic!("injected panic in a later answer")
            })),
            RequestKind::ListOffsets(_) => Reply::Now(Box::new(ResponseKind::ListOffsets(
                ListOffsetsResponse::default().with_topics(vec![
                    ListOffsetsTopicResponse::default()
                        .with_name(TopicName(s("t")))
                        .with_partitions(vec![ListOffsetsPartitionResponse::default()
                            .with_offset(3)
                            .with_leader_epoch(5)]),
                ]),
            ))),
            RequestKind::JoinGroup(_) => {
                self.joins.fetch_add(1, Ordering::SeqCst);
                let store = Arc::clone(&self.store);
                Reply::Later(Box::pin(async move {
                    let _turn = store.lock().await;
                    ResponseKind::JoinGroup(JoinGroupResponse::default())
                }))
            }
            RequestKind::OffsetCommit(_) => {
                let _turn = self.store.lock().await;
                Reply::Now(Box::new(ResponseKind::OffsetCommit(
                    OffsetCommitResponse::default(),
                )))
            }
            RequestKind::Produce(_) => {
                self.produces.fetch_add(1, Ordering::SeqCst);
                let mut release = self.release.clone();
                Reply::Later(Box::pin(async move {
                    let _ = release.wait_for(|r| *r).await;
                    ResponseKind::Produce(ProduceResponse::default())
                }))
            }
            _ => Reply::Unsupported,
        }
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

struct Server {
    addr: SocketAddr,
    stub: Arc<Stub>,
    meters: Arc<NetworkMeters>,
    release: watch::Sender<bool>,
    _shutdown: watch::Sender<bool>,
}

async fn start(config: NetworkConfig) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let (release, release_rx) = watch::channel(false);
    let stub = Arc::new(Stub {
        produces: AtomicUsize::new(0),
        joins: AtomicUsize::new(0),
        release: release_rx,
        store: Arc::default(),
    });
    let meters = Arc::new(NetworkMeters::default());
    let (shutdown, shutdown_rx) = watch::channel(false);
    tokio::spawn(serve(
        listener,
        Arc::clone(&stub),
        config,
        Arc::clone(&meters),
        shutdown_rx,
    ));
    Server {
        addr,
        stub,
        meters,
        release,
        _shutdown: shutdown,
    }
}

fn frame(key: ApiKey, v: i16, correlation_id: i32, body: &RequestKind) -> Vec<u8> {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(v)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(s("dispatch-test")))
        .encode(&mut buf, key.request_header_version(v))
        .expect("header");
    body.encode(&mut buf, v).expect("body");
    let mut out = (buf.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&buf);
    out
}

/// Reads one response; `None` if the connection closed.
async fn recv(
    s: &mut (impl tokio::io::AsyncRead + Unpin),
    key: ApiKey,
    v: i16,
) -> Option<(i32, ResponseKind)> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).await.ok()?;
    let mut b = Bytes::from(body);
    let header = ResponseHeader::decode(&mut b, key.response_header_version(v)).expect("header");
    let r = ResponseKind::decode(key, &mut b, v).expect("response");
    assert!(!b.has_remaining(), "trailing bytes");
    Some((header.correlation_id, r))
}

/// Waits for `what` to hold (the broker works asynchronously); fails after a generous while.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..3000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

fn api_versions() -> RequestKind {
    RequestKind::ApiVersions(ApiVersionsRequest::default())
}

fn produce(payload: usize) -> RequestKind {
    use produce_request::{PartitionProduceData, TopicProduceData};
    RequestKind::Produce(
        ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(s("t")))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_records(Some(Bytes::from(vec![7u8; payload])))])]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_and_unencodable_responses_are_answered_with_error_codes() {
    let srv = start(NetworkConfig::default()).await;
    let mut c = TcpStream::connect(srv.addr).await.expect("connect");
    // Pipelined: a panic in one request must not take the others (or the connection) down.
    let metadata = RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
        metadata_request::MetadataRequestTopic::default().with_name(Some(TopicName(s("t")))),
    ])));
    let heartbeat = RequestKind::Heartbeat(
        HeartbeatRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_member_id(s("m")),
    );
    let list_offsets = RequestKind::ListOffsets(ListOffsetsRequest::default().with_topics(vec![
        list_offsets_request::ListOffsetsTopic::default()
            .with_name(TopicName(s("t")))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default().with_timestamp(-1),
            ]),
    ]));
    let mut bytes = frame(ApiKey::Metadata, 9, 1, &metadata);
    bytes.extend(frame(ApiKey::Heartbeat, 4, 2, &heartbeat));
    bytes.extend(frame(ApiKey::ListOffsets, 2, 3, &list_offsets));
    bytes.extend(frame(ApiKey::ApiVersions, 3, 4, &api_versions()));
    c.write_all(&bytes).await.expect("send");

    let unknown_server_error = -1;
    let (id, r) = recv(&mut c, ApiKey::Metadata, 9)
        .await
        .expect("metadata answer");
    let ResponseKind::Metadata(m) = r else {
        panic!("{r:?}")
    };
    assert_eq!(id, 1);
    assert_eq!(m.topics.len(), 1);
    assert_eq!(m.topics[0].error_code, unknown_server_error);

    let (id, r) = recv(&mut c, ApiKey::Heartbeat, 4)
        .await
        .expect("heartbeat answer");
    let ResponseKind::Heartbeat(h) = r else {
        panic!("{r:?}")
    };
    assert_eq!((id, h.error_code), (2, unknown_server_error));

    let (id, r) = recv(&mut c, ApiKey::ListOffsets, 2)
        .await
        .expect("list offsets answer");
    let ResponseKind::ListOffsets(l) = r else {
        panic!("{r:?}")
    };
    assert_eq!(id, 3);
    assert_eq!(
        l.topics[0].partitions[0].error_code, unknown_server_error,
        "{l:?}"
    );

    let (id, r) = recv(&mut c, ApiKey::ApiVersions, 3)
        .await
        .expect("api versions answer");
    let ResponseKind::ApiVersions(a) = r else {
        panic!("{r:?}")
    };
    assert_eq!((id, a.error_code), (4, 0));

    assert_eq!(srv.meters.handler_panics.get(), 2);
    assert_eq!(srv.meters.response_encode_errors.get(), 1);
    assert_eq!(srv.meters.connections_closed.get(), 0);
}

/// An answer that waits (a JoinGroup's) makes progress while its connection serves the next
/// request. Before, the waiting answers of a connection were polled only between requests:
/// the JoinGroup was handed the shared lock while its connection waited inside an
/// OffsetCommit for that same lock, and neither ever moved again, nor did anyone else who
/// needed it (the broker wedged, idle, on franz-go's transactional ETL test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_answer_progresses_while_its_connection_serves_the_next_request() {
    let srv = start(NetworkConfig::default()).await;
    let held = Arc::clone(&srv.stub.store).lock_owned().await;
    let mut c = TcpStream::connect(srv.addr).await.expect("connect");
    let join = RequestKind::JoinGroup(JoinGroupRequest::default());
    c.write_all(&frame(ApiKey::JoinGroup, 5, 1, &join))
        .await
        .expect("send");
    // The JoinGroup's answer queues for the lock first, then the OffsetCommit does.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let commit = RequestKind::OffsetCommit(OffsetCommitRequest::default());
    c.write_all(&frame(ApiKey::OffsetCommit, 8, 2, &commit))
        .await
        .expect("send");
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(held);
    let answers = async {
        let (id, _) = recv(&mut c, ApiKey::JoinGroup, 5)
            .await
            .expect("join answer");
        assert_eq!(id, 1);
        let (id, _) = recv(&mut c, ApiKey::OffsetCommit, 8)
            .await
            .expect("commit answer");
        assert_eq!(id, 2);
    };
    tokio::time::timeout(Duration::from_secs(10), answers)
        .await
        .expect("both answered: the connection is not wedged");
    // And the lock is free for everyone else.
    let _free = tokio::time::timeout(Duration::from_secs(1), srv.stub.store.lock())
        .await
        .expect("the lock is free");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_max_connections_are_closed_at_accept() {
    let srv = start(NetworkConfig {
        max_connections: 2,
        ..NetworkConfig::default()
    })
    .await;
    let hello = frame(ApiKey::ApiVersions, 3, 1, &api_versions());
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut c = TcpStream::connect(srv.addr).await.expect("connect");
        c.write_all(&hello).await.expect("send");
        recv(&mut c, ApiKey::ApiVersions, 3).await.expect("served");
        open.push(c);
    }
    // The third is accepted by the kernel, then closed by the broker without an answer.
    let mut third = TcpStream::connect(srv.addr).await.expect("connect");
    let _ = third.write_all(&hello).await;
    assert!(recv(&mut third, ApiKey::ApiVersions, 3).await.is_none());
    assert_eq!(srv.meters.connections_refused.get(), 1);
    // The two still work; when one goes, a new one is served.
    for c in &mut open {
        c.write_all(&hello).await.expect("send");
        recv(c, ApiKey::ApiVersions, 3).await.expect("still served");
    }
    drop(open.pop());
    let meters = Arc::clone(&srv.meters);
    eventually("the closed connection is counted", || {
        meters.connections_closed.get() == 1
    })
    .await;
    let mut c = TcpStream::connect(srv.addr).await.expect("connect");
    c.write_all(&hello).await.expect("send");
    recv(&mut c, ApiKey::ApiVersions, 3)
        .await
        .expect("served again");
    assert_eq!(srv.meters.connections_refused.get(), 1);
}

/// Sends `n` produce requests of `payload` bytes on `c` from a task (the writes block once the
/// broker stops reading); returns the frame size.
fn flood(mut c: tokio::net::tcp::OwnedWriteHalf, n: i32, payload: usize) -> usize {
    let one = frame(ApiKey::Produce, 9, 0, &produce(payload)).len();
    tokio::spawn(async move {
        for i in 0..n {
            if c.write_all(&frame(ApiKey::Produce, 9, i, &produce(payload)))
                .await
                .is_err()
            {
                return;
            }
        }
        // Keep the write half open until the test ends.
        std::future::pending::<()>().await;
    });
    one
}

/// Reads `n` answers in order (failing, not hanging, if they never come).
async fn answers(c: &mut tokio::net::tcp::OwnedReadHalf, n: i32) {
    tokio::time::timeout(Duration::from_secs(60), read_answers(c, n))
        .await
        .expect("answers never came");
}

async fn read_answers(c: &mut tokio::net::tcp::OwnedReadHalf, n: i32) {
    for i in 0..n {
        let mut len = [0u8; 4];
        c.read_exact(&mut len).await.expect("an answer");
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
        c.read_exact(&mut body).await.expect("an answer");
        assert_eq!(&body[..4], &i.to_be_bytes(), "answers in order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_stops_reading_at_its_queued_bytes_bound() {
    let cap = 256 << 10;
    let srv = start(NetworkConfig {
        queued_max_request_bytes_per_connection: cap,
        ..NetworkConfig::default()
    })
    .await;
    let (mut rd, wr) = TcpStream::connect(srv.addr)
        .await
        .expect("connect")
        .into_split();
    let f = flood(wr, 20, 64 << 10) - 4;
    let fit = cap / f;
    assert!((2..20).contains(&fit));

    // Requests are held unanswered: the connection reads what fits, then stops.
    let m = Arc::clone(&srv.meters);
    eventually("the connection pauses", || m.read_pauses.get() >= 1).await;
    let held = srv.meters.queued_request_bytes.load(Ordering::SeqCst) as usize;
    assert_eq!(held, fit * f, "bytes held are the requests that fit");
    assert!(held <= cap);
    let stub = Arc::clone(&srv.stub);
    eventually("the handler has what was read", || {
        stub.produces.load(Ordering::SeqCst) == fit
    })
    .await;
    assert_eq!(srv.meters.read_pauses.get(), 1);

    // Answers free room: everything is read and answered, in order.
    srv.release.send_replace(true);
    answers(&mut rd, 20).await;
    assert_eq!(srv.stub.produces.load(Ordering::SeqCst), 20);
    let m = Arc::clone(&srv.meters);
    eventually("nothing held", || {
        m.queued_request_bytes.load(Ordering::SeqCst) == 0
    })
    .await;
}

/// librdkafka sends one partition per produce request and, by default, up to a million requests
/// in flight; on the object WAL each waits a PUT (100 ms and more). A connection that stopped
/// reading at 64 unanswered requests capped such a producer at 64 requests per PUT, and its
/// queue grew to seconds (`docs/decisions/requests-in-flight-per-connection.md`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reads_hundreds_of_small_requests_while_none_is_answered() {
    let srv = start(NetworkConfig::default()).await;
    let (mut rd, wr) = TcpStream::connect(srv.addr)
        .await
        .expect("connect")
        .into_split();
    let n = 600;
    flood(wr, n, 4 << 10);
    let stub = Arc::clone(&srv.stub);
    eventually(
        "every request read and handed to the handler, none answered",
        || stub.produces.load(Ordering::SeqCst) == n as usize,
    )
    .await;
    assert_eq!(srv.meters.read_pauses.get(), 0, "under the bytes bound");
    srv.release.send_replace(true);
    answers(&mut rd, n).await;
}

/// Produces have a bound too (`max_produces_in_flight`): the connection stops reading at it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_stops_reading_at_its_bound_of_unanswered_produces() {
    let srv = start(NetworkConfig {
        max_produces_in_flight: 100,
        ..NetworkConfig::default()
    })
    .await;
    let (mut rd, wr) = TcpStream::connect(srv.addr)
        .await
        .expect("connect")
        .into_split();
    let n = 150;
    flood(wr, n, 1 << 10);
    let stub = Arc::clone(&srv.stub);
    eventually("100 produces read", || {
        stub.produces.load(Ordering::SeqCst) == 100
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        srv.stub.produces.load(Ordering::SeqCst),
        100,
        "no more read"
    );
    srv.release.send_replace(true);
    answers(&mut rd, n).await;
    assert_eq!(srv.stub.produces.load(Ordering::SeqCst), n as usize);
}

/// Other requests keep the bound of 64: a fetch's answer may be large, and answers wait behind
/// an earlier slow one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_stops_reading_at_64_unanswered_requests_other_than_produces() {
    let srv = start(NetworkConfig::default()).await;
    let held = Arc::clone(&srv.stub.store).lock_owned().await;
    let (mut rd, mut wr) = TcpStream::connect(srv.addr)
        .await
        .expect("connect")
        .into_split();
    let n = 100;
    let join = RequestKind::JoinGroup(JoinGroupRequest::default());
    tokio::spawn(async move {
        for i in 0..n {
            if wr
                .write_all(&frame(ApiKey::JoinGroup, 5, i, &join))
                .await
                .is_err()
            {
                return;
            }
        }
        std::future::pending::<()>().await;
    });
    let stub = Arc::clone(&srv.stub);
    eventually("64 joins read", || stub.joins.load(Ordering::SeqCst) == 64).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(srv.stub.joins.load(Ordering::SeqCst), 64, "no more read");
    drop(held);
    let all = async {
        for i in 0..n {
            let (id, _) = recv(&mut rd, ApiKey::JoinGroup, 5)
                .await
                .expect("an answer");
            assert_eq!(id, i, "answers in order");
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("every join answered once the lock is free");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_larger_than_the_bounds_is_still_served() {
    let srv = start(NetworkConfig {
        queued_max_request_bytes_per_connection: 64 << 10,
        queued_max_request_bytes: 96 << 10,
        ..NetworkConfig::default()
    })
    .await;
    srv.release.send_replace(true);
    let (mut rd, wr) = TcpStream::connect(srv.addr)
        .await
        .expect("connect")
        .into_split();
    flood(wr, 3, 1 << 20);
    answers(&mut rd, 3).await;
    assert_eq!(srv.stub.produces.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_connections_together_stop_reading_at_the_total_bound() {
    let (per, total) = (256 << 10, 384 << 10);
    let srv = start(NetworkConfig {
        queued_max_request_bytes_per_connection: per,
        queued_max_request_bytes: total,
        ..NetworkConfig::default()
    })
    .await;
    let mut readers = Vec::new();
    let mut f = 0;
    for _ in 0..2 {
        let (rd, wr) = TcpStream::connect(srv.addr)
            .await
            .expect("connect")
            .into_split();
        f = flood(wr, 10, 64 << 10) - 4;
        readers.push(rd);
    }
    let fit = total / f;
    assert!(
        fit > per / f,
        "the total binds before the two per-connection bounds"
    );
    let m = Arc::clone(&srv.meters);
    eventually("both connections pause", || m.read_pauses.get() >= 2).await;
    let stub = Arc::clone(&srv.stub);
    eventually("the handler has what was read", || {
        stub.produces.load(Ordering::SeqCst) == fit
    })
    .await;
    let held = srv.meters.queued_request_bytes.load(Ordering::SeqCst) as usize;
    assert_eq!(held, fit * f);
    assert!(held <= total);

    srv.release.send_replace(true);
    for rd in &mut readers {
        answers(rd, 10).await;
    }
    assert_eq!(srv.stub.produces.load(Ordering::SeqCst), 20);
}

/// Requests arriving a few bytes at a time, and several in one write: each is cut at its own
/// length (the body of one is never read into the next) and answered in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_split_across_reads_and_packed_into_one_are_each_read_whole() {
    let srv = start(NetworkConfig::default()).await;
    let mut c = TcpStream::connect(srv.addr).await.expect("connect");
    let list = RequestKind::ListOffsets(ListOffsetsRequest::default().with_topics(vec![
        list_offsets_request::ListOffsetsTopic::default()
            .with_name(TopicName(s("t")))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default().with_timestamp(-1),
            ]),
    ]));
    // Three requests, written as one stream of bytes in pieces of 7 bytes.
    let mut bytes = Vec::new();
    for id in 1..=3 {
        bytes.extend(frame(ApiKey::ListOffsets, 4, id, &list));
    }
    for piece in bytes.chunks(7) {
        c.write_all(piece).await.expect("write");
        c.flush().await.expect("flush");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Three more in one write.
    let mut packed = Vec::new();
    for id in 4..=6 {
        packed.extend(frame(ApiKey::ListOffsets, 4, id, &list));
    }
    c.write_all(&packed).await.expect("write");
    for id in 1..=6 {
        let (correlation, r) = recv(&mut c, ApiKey::ListOffsets, 4)
            .await
            .expect("an answer");
        assert_eq!(correlation, id);
        let ResponseKind::ListOffsets(r) = r else {
            panic!("not a ListOffsets response: {r:?}");
        };
        assert_eq!(r.topics[0].partitions[0].offset, 3);
    }
}
