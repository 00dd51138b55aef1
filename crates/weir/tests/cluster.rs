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
        !c.s3().files(Cluster::PREFIX).is_empty(),
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
