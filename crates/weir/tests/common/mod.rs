//! The one harness of the binary's integration tests: starts the real `weir serve` on free
//! ports with a small WAL, waits until it is ready, reads its admin endpoints, and stops it with
//! SIGTERM (checking that it exits cleanly) or kills it when dropped.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

/// A loopback port for a broker (see `weir_meta::testing::free_port` for how it is picked).
pub fn free_port() -> u16 {
    weir_meta::testing::free_port().expect("a free port")
}

/// One GET on the admin port: (status, body), or `None` if the broker does not answer.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let code = out.get(9..12)?.parse().ok()?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

/// A running `weir serve`. Killed when dropped.
pub struct Broker {
    pub child: Child,
    pub port: u16,
    pub admin: u16,
    log: PathBuf,
    /// The data directory when the broker owns it (removed with it).
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Broker {
    /// A broker on a fresh data directory of its own, with `env` on top of the defaults.
    pub fn start(env: &[(&str, &str)]) -> Broker {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut b = Broker::start_in(dir.path(), "broker", env);
        b._dir = Some(dir);
        b
    }

    /// A broker on `dir`, which outlives it (tests restart brokers on it); its log is
    /// `dir/<run>.log`.
    pub fn start_in(dir: &Path, run: &str, env: &[(&str, &str)]) -> Broker {
        Broker::start_on(dir, run, free_port(), free_port(), &[], env)
    }

    /// A broker on `dir` with its Kafka listener on `port` and admin HTTP on `admin` (fixed, so
    /// that a restarted broker keeps its address), `args` added to `weir serve`'s flags.
    pub fn start_on(
        dir: &Path,
        run: &str,
        port: u16,
        admin: u16,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Broker {
        let log = dir.join(format!("{run}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["serve", "--data-dir"])
            .arg(dir.join("data"))
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--admin-listen",
                &format!("127.0.0.1:{admin}"),
            ])
            .args(args)
            // Tests get a small WAL, not the 2 GiB default.
            .env("WEIR_WAL_CAPACITY", (64u64 << 20).to_string())
            .env("WEIR_WAL_FORMAT", "false")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start weir");
        let mut b = Broker {
            child,
            port,
            admin,
            log,
            _dir: None,
        };
        let t = Instant::now();
        while http_get(admin, "/readyz").map(|r| r.0) != Some(200) {
            if let Some(status) = b.child.try_wait().expect("child status") {
                panic!(
                    "broker exited with {status} while starting: {}",
                    b.log_text()
                );
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "broker did not become ready: {}",
                b.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        b
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn assert_no_panic(&self) {
        let log = self.log_text();
        assert!(!log.contains("panicked"), "the broker panicked: {log}");
    }

    /// An unlabelled metric's value from /metrics.
    pub fn metric(&self, name: &str) -> u64 {
        let (_, body) = http_get(self.admin, "/metrics").expect("/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name}"))
    }

    /// SIGTERM: the broker uploads what the WAL holds and must exit 0.
    pub fn stop(mut self) {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("child status") {
                break s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "no exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            status.success(),
            "exit status {status}: {}",
            self.log_text()
        );
    }
}

/// The value of record `i` in the tests' topics.
pub fn value(i: u64) -> String {
    format!("record-{i:06}-{}", "x".repeat((i % 97) as usize))
}

/// Produces `n` records (values [`value`]) to partition 0 and waits until every one is acknowledged.
pub fn produce(bootstrap: &str, topic: &str, n: u64) {
    let producer: ThreadedProducer<_> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    for i in 0..n {
        let v = value(i);
        let mut record = BaseRecord::<(), String>::to(topic).partition(0).payload(&v);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((e, r)) => {
                    // Queue full: let deliveries drain.
                    assert!(
                        matches!(
                            e,
                            rdkafka::error::KafkaError::MessageProduction(
                                rdkafka::types::RDKafkaErrorCode::QueueFull
                            )
                        ),
                        "send failed: {e}"
                    );
                    record = r;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
    producer
        .flush(Duration::from_secs(60))
        .expect("every record acknowledged");
}

/// Reads partition 0 from the beginning until `n` records came, or gives up after a minute.
pub fn consume(bootstrap: &str, topic: &str, n: u64) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "weir-test")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .expect("partition");
    consumer.assign(&tpl).expect("assign");
    let mut got = Vec::new();
    let t = Instant::now();
    while (got.len() as u64) < n && t.elapsed() < Duration::from_secs(60) {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => got.push(String::from_utf8_lossy(m.payload().unwrap_or(&[])).into()),
            Some(Err(e)) => eprintln!("consumer: {e}"),
            None => {}
        }
    }
    got
}

/// Where the tests find `s3s-fs`: `$S3S_FS`, else `~/.cargo/bin/s3s-fs`, else `$PATH`.
fn s3s_fs_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("S3S_FS") {
        return PathBuf::from(p);
    }
    let cargo_bin =
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo/bin/s3s-fs");
    if cargo_bin.exists() {
        return cargo_bin;
    }
    PathBuf::from("s3s-fs")
}

/// A private S3 server (`s3s-fs`) on a free loopback port, serving a temporary directory with
/// one bucket. Killed and removed when dropped.
pub struct S3sFs {
    child: Child,
    pub port: u16,
    _root: tempfile::TempDir,
}

impl S3sFs {
    pub const BUCKET: &'static str = "weir-test";
    const ACCESS_KEY: &'static str = "weir-access";
    const SECRET_KEY: &'static str = "weir-secret";

    pub fn start() -> S3sFs {
        let root = tempfile::Builder::new()
            .prefix("weir-s3-")
            .tempdir()
            .expect("temp dir");
        // s3s-fs serves the directories under its root as buckets.
        std::fs::create_dir_all(root.path().join(Self::BUCKET)).expect("bucket directory");
        let port = free_port();
        let child = Command::new(s3s_fs_binary())
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", Self::ACCESS_KEY, "--secret-key", Self::SECRET_KEY])
            .arg(root.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start s3s-fs ({e}); install it: cargo install s3s-fs@0.14.1 --features binary --locked, or set S3S_FS")
            });
        let mut s = S3sFs {
            child,
            port,
            _root: root,
        };
        let t = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = s.child.try_wait().expect("s3s-fs status") {
                panic!("s3s-fs exited with {status} while starting (port {port} taken?)");
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "s3s-fs did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    /// The files the server keeps under `s3://BUCKET/prefix`.
    pub fn files(&self, prefix: &str) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push(p);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self._root.path().join(Self::BUCKET).join(prefix), &mut out);
        out
    }

    /// `s3://BUCKET/PREFIX`
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", Self::BUCKET)
    }

    /// The variables the `object_store` crate reads (`AmazonS3Builder::from_env`) to reach this
    /// server: path-style requests over plain HTTP with its keys.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", format!("http://127.0.0.1:{}", self.port)),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", Self::ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", Self::SECRET_KEY.into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false".into()),
        ]
    }
}

impl Drop for S3sFs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One broker of a [`Cluster`]: its identity and addresses stay the same across restarts.
struct Node {
    id: i32,
    port: u16,
    admin: u16,
    dir: PathBuf,
    starts: u32,
    broker: Option<Broker>,
}

/// Brokers on one machine sharing a private PostgreSQL (a fresh database on
/// [`PgServer::shared`]) and one `s3s-fs`, each with its own node id, ports and data directory,
/// started with the flags a user gives (`--node-id`, `--listen`, `--advertised`,
/// `--admin-listen`, `--data-dir`, `--metadata-url`, `--object-store-url`). Dropping it kills
/// every broker and removes their directories.
pub struct Cluster {
    // Dropped in this order: the brokers before the stores they use.
    nodes: Vec<Node>,
    s3: S3sFs,
    pg: std::sync::Arc<weir_meta::testing::PgServer>,
    metadata_url: String,
    env: Vec<(String, String)>,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Where the brokers keep objects in the bucket.
    pub const PREFIX: &'static str = "weir";

    /// `n` brokers, node ids 1..=n, each ready (`/readyz`) when this returns.
    pub fn new(n: usize) -> Cluster {
        Cluster::with_env(n, &[])
    }

    /// [`Cluster::new`] with `env` (`WEIR_<SECTION>_<KEY>` settings) for every broker.
    pub fn with_env(n: usize, env: &[(&str, &str)]) -> Cluster {
        let pg = weir_meta::testing::PgServer::shared().expect("a private PostgreSQL");
        let metadata_url = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(pg.create_database())
            .expect("a database for the cluster");
        let s3 = S3sFs::start();
        let dir = tempfile::Builder::new()
            .prefix("weir-cluster-")
            .tempdir()
            .expect("temp dir");
        let mut env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.extend(s3.env().into_iter().map(|(k, v)| (k.to_string(), v)));
        let mut c = Cluster {
            nodes: Vec::new(),
            s3,
            pg,
            metadata_url,
            env,
            dir,
        };
        for _ in 0..n {
            c.add_broker();
        }
        c
    }

    /// Starts a broker with the next node id; returns its index.
    pub fn add_broker(&mut self) -> usize {
        let id = self.nodes.iter().map(|n| n.id).max().unwrap_or(0) + 1;
        let dir = self.dir.path().join(format!("node-{id}"));
        std::fs::create_dir_all(&dir).expect("node directory");
        self.nodes.push(Node {
            id,
            port: free_port(),
            admin: free_port(),
            dir,
            starts: 0,
            broker: None,
        });
        let i = self.nodes.len() - 1;
        self.start(i);
        i
    }

    /// Starts broker `i` (stopped or killed before) on its data directory and ports, and waits
    /// until it is ready.
    pub fn start(&mut self, i: usize) {
        let url = self.object_store_url();
        let node = &mut self.nodes[i];
        assert!(node.broker.is_none(), "broker {} is running", node.id);
        node.starts += 1;
        let args = [
            "--node-id".to_string(),
            node.id.to_string(),
            "--advertised".to_string(),
            format!("127.0.0.1:{}", node.port),
            "--metadata-url".to_string(),
            self.metadata_url.clone(),
            "--object-store-url".to_string(),
            url,
        ];
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        node.broker = Some(Broker::start_on(
            &node.dir,
            &format!("start-{}", node.starts),
            node.port,
            node.admin,
            &args,
            &env,
        ));
    }

    /// SIGTERM to broker `i`; it must exit 0 within a minute.
    pub fn stop(&mut self, i: usize) {
        self.nodes[i]
            .broker
            .take()
            .unwrap_or_else(|| panic!("broker {} is not running", self.nodes[i].id))
            .stop();
    }

    /// SIGKILL to broker `i`, and waits until it is gone.
    pub fn kill(&mut self, i: usize) {
        let b = self.nodes[i].broker.take();
        assert!(b.is_some(), "broker {} is not running", self.nodes[i].id);
        drop(b);
    }

    /// Sends `signal` to broker `i` (SIGSTOP and SIGCONT pause and resume it: a zombie).
    pub fn signal(&self, i: usize, signal: i32) {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.broker(i).child.id() as i32, signal) };
    }

    /// The running broker `i`.
    pub fn broker(&self, i: usize) -> &Broker {
        self.nodes[i]
            .broker
            .as_ref()
            .unwrap_or_else(|| panic!("broker {} is not running", self.nodes[i].id))
    }

    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].broker.is_some()
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn node_id(&self, i: usize) -> i32 {
        self.nodes[i].id
    }

    /// Broker `i`'s Kafka port (the same while it is stopped).
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    pub fn admin_port(&self, i: usize) -> u16 {
        self.nodes[i].admin
    }

    /// `http://127.0.0.1:<admin port>` of broker `i`.
    pub fn admin_url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.nodes[i].admin)
    }

    /// Every broker's address, stopped ones included (clients skip those they cannot reach).
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn metadata_url(&self) -> &str {
        &self.metadata_url
    }

    pub fn object_store_url(&self) -> String {
        self.s3.url(Self::PREFIX)
    }

    /// The object store's server.
    pub fn s3(&self) -> &S3sFs {
        &self.s3
    }

    /// Broker `i`'s data directory (WAL, and nothing else on PostgreSQL).
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.nodes[i].dir.join("data")
    }

    /// The private PostgreSQL (to read the cluster's tables, or to restart it).
    pub fn postgres(&self) -> &weir_meta::testing::PgServer {
        &self.pg
    }

    /// Every running broker's log, for assertion messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .filter_map(|n| {
                let b = n.broker.as_ref()?;
                Some(format!("---- broker {} ----\n{}", n.id, b.log_text()))
            })
            .collect()
    }

    /// No running broker's log shows a panic.
    pub fn assert_no_panic(&self) {
        for n in &self.nodes {
            if let Some(b) = &n.broker {
                b.assert_no_panic();
            }
        }
    }
}
