//! The real `weir serve` binary: admin endpoints, refusals of APIs it does not implement, and a
//! clean SIGTERM.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Broker {
    child: Child,
    port: u16,
    admin: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http_get(port: u16, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out[9..12].parse().unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

fn start() -> Broker {
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--data-dir"])
        .arg(dir.path().join("data"))
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin}"),
        ])
        .env("WEIR_WAL_CAPACITY", (64u64 << 20).to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let b = Broker {
        child,
        port,
        admin,
        _dir: dir,
    };
    let t = Instant::now();
    loop {
        if TcpStream::connect(("127.0.0.1", admin)).is_ok() && http_get(admin, "/readyz").0 == 200 {
            return b;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "broker did not become ready"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends one request (header v1: key, version, correlation id, client id; then `body`) and
/// returns the response after its correlation id, or None if the connection closed.
fn roundtrip(port: u16, key: i16, version: i16, body: &[u8]) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = Vec::new();
    req.extend_from_slice(&key.to_be_bytes());
    req.extend_from_slice(&version.to_be_bytes());
    req.extend_from_slice(&42i32.to_be_bytes());
    req.extend_from_slice(&4i16.to_be_bytes());
    req.extend_from_slice(b"test");
    req.extend_from_slice(body);
    let mut frame = (req.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&req);
    s.write_all(&frame).unwrap();
    let mut len = [0u8; 4];
    if s.read_exact(&mut len).is_err() {
        return None;
    }
    let mut resp = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut resp).ok()?;
    assert_eq!(&resp[..4], &42i32.to_be_bytes(), "correlation id");
    Some(resp[4..].to_vec())
}

#[test]
fn admin_endpoints_refusals_and_clean_shutdown() {
    let mut b = start();
    assert_eq!(http_get(b.admin, "/healthz").0, 200);
    let (code, metrics) = http_get(b.admin, "/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("# TYPE weir_wal_syncs_total counter"),
        "{metrics}"
    );
    assert!(metrics.contains("weir_object_requests_total{kind=\"put\"}"));
    assert_eq!(http_get(b.admin, "/nope").0, 404);

    // SaslHandshake v1 (mechanism "PLAIN") on a listener without SASL: UNSUPPORTED_SASL_MECHANISM.
    let mut body = 5i16.to_be_bytes().to_vec();
    body.extend_from_slice(b"PLAIN");
    let resp = roundtrip(b.port, 17, 1, &body).expect("an answer, not a hang-up");
    assert_eq!(i16::from_be_bytes([resp[0], resp[1]]), 33);

    // DescribeAcls v1 (not implemented): UNSUPPORTED_VERSION in the response's error code.
    let mut body = vec![2u8]; // resource type filter: TOPIC
    body.extend_from_slice(&(-1i16).to_be_bytes()); // name filter null
    body.push(3); // pattern type: LITERAL
    body.extend_from_slice(&(-1i16).to_be_bytes()); // principal null
    body.extend_from_slice(&(-1i16).to_be_bytes()); // host null
    body.push(1); // operation ANY
    body.push(1); // permission ANY
    let resp = roundtrip(b.port, 29, 1, &body).expect("an answer");
    // throttle_time_ms, then error_code.
    assert_eq!(i16::from_be_bytes([resp[4], resp[5]]), 35);

    // An API key nobody knows closes the connection, and the broker goes on serving.
    assert!(roundtrip(b.port, 999, 0, &[]).is_none());
    let resp = roundtrip(b.port, 18, 0, &[]).expect("ApiVersions v0");
    assert_eq!(i16::from_be_bytes([resp[0], resp[1]]), 0);

    // SIGTERM: the broker uploads, stops, and exits 0.
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(b.child.id() as i32, libc::SIGTERM) };
    let t = Instant::now();
    let status = loop {
        if let Some(s) = b.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status {status}");
}
