//! The object-store conformance suite against a real S3-protocol server: `s3s-fs`, started here
//! on a free loopback port, serving a temporary directory. CI installs it
//! (`cargo install s3s-fs@0.14.1 --features binary --locked`); set `S3S_FS` to use another path.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weir_storage::objstore::{from_url_with, StoreOptions};

struct S3sFs {
    child: Child,
    port: u16,
    _root: tempfile::TempDir,
}

impl Drop for S3sFs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> PathBuf {
    if let Ok(p) = std::env::var("S3S_FS") {
        return PathBuf::from(p);
    }
    let home = std::env::var("HOME").unwrap_or_default();
    let cargo_bin = PathBuf::from(home).join(".cargo/bin/s3s-fs");
    if cargo_bin.exists() {
        return cargo_bin;
    }
    PathBuf::from("s3s-fs")
}

const BUCKET: &str = "weir-test";
const ACCESS_KEY: &str = "weir-access";
const SECRET_KEY: &str = "weir-secret";

fn start() -> S3sFs {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join(BUCKET)).unwrap();
    let port = weir_meta::testing::free_port().unwrap();
    let child = Command::new(binary())
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
        .arg(root.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start s3s-fs ({e}); install it: cargo install s3s-fs@0.14.1 --features binary --locked")
        });
    let server = S3sFs {
        child,
        port,
        _root: root,
    };
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "s3s-fs did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

fn options(port: u16) -> StoreOptions {
    let s = |k: &str, v: &str| (k.to_string(), v.to_string());
    StoreOptions {
        settings: vec![
            s("aws_endpoint", &format!("http://127.0.0.1:{port}")),
            s("aws_allow_http", "true"),
            s("aws_access_key_id", ACCESS_KEY),
            s("aws_secret_access_key", SECRET_KEY),
            s("aws_region", "us-east-1"),
            s("aws_virtual_hosted_style_request", "false"),
        ],
        max_concurrent_requests: 16,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_against_s3s_fs() {
    let server = start();
    let store = from_url_with(&format!("s3://{BUCKET}/weir"), &options(server.port)).unwrap();
    weir_storage::conformance::run_all(store).await;
}

/// The fault-latency switch (`object_store.fault_latency_ms`) slows every request without
/// breaking any, on S3 as on the other stores (see `tests/fault_switches.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_against_s3s_fs_with_fault_latency() {
    let server = start();
    let options = StoreOptions {
        faults: weir_storage::objstore::FaultConfig {
            latency: Duration::from_millis(2),
            ..Default::default()
        },
        ..options(server.port)
    };
    let store = from_url_with(&format!("s3://{BUCKET}/weir"), &options).unwrap();
    weir_storage::conformance::run_all(store).await;
}
