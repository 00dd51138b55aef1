//! The one harness of the binary's integration tests: starts the real `weir serve` on free
//! ports with a small WAL, waits until it is ready, reads its admin endpoints, and stops it with
//! SIGTERM (checking that it exits cleanly) or kills it when dropped.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
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

/// A running `weir serve`. Killed when dropped, if this harness started it (a cluster's brokers
/// are the cluster program's).
pub struct Broker {
    child: Option<Child>,
    pub pid: u32,
    pub port: u16,
    pub admin: u16,
    log: PathBuf,
    /// The data directory when the broker owns it (removed with it).
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
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
            // The schema registry on a free port: tests run brokers side by side.
            .env("WEIR_SCHEMA_REGISTRY_LISTEN", "127.0.0.1:0")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start weir");
        let pid = child.id();
        let mut b = Broker {
            child: Some(child),
            pid,
            port,
            admin,
            log,
            _dir: None,
        };
        let t = Instant::now();
        while http_get(admin, "/readyz").map(|r| r.0) != Some(200) {
            if let Some(status) = b.child_mut().try_wait().expect("child status") {
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

    fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("a broker this harness started")
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

    /// Waits up to `timeout` for the broker to exit by itself; its exit status.
    pub fn wait_for_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let t = Instant::now();
        while t.elapsed() < timeout {
            if let Some(s) = self.child_mut().try_wait().expect("child status") {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// SIGTERM: the broker uploads what the WAL holds and must exit 0.
    pub fn stop(mut self) {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        let t = Instant::now();
        let status = loop {
            if let Some(s) = self.child_mut().try_wait().expect("child status") {
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

/// A test cluster: PostgreSQL, s3s-fs and brokers started by the one test-cluster program every
/// language's harness uses (`python3 tests/harness/weir_harness cluster`, which owns the port rule
/// and how each part is started). It prints the cluster as one line of JSON and takes commands
/// on its standard input (`stop N`, `kill N`, `start N`, `add`, `describe`), each answered with
/// the cluster as JSON; when its standard input closes (this is dropped, or the test process
/// died) it stops everything.
pub struct Cluster {
    program: Child,
    /// `None` once closed.
    commands: Option<ChildStdin>,
    answers: BufReader<ChildStdout>,
    nodes: Vec<Broker>,
    /// Each broker's node id and data directory.
    ids: Vec<(i32, PathBuf)>,
    metadata_url: String,
    object_store_url: String,
    /// The program's directory (brokers' data, PostgreSQL's, s3s-fs's root).
    root: PathBuf,
    dir: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Closing its standard input stops the program; it stops the brokers, then the stores.
        drop(self.commands.take());
        let t = Instant::now();
        while self.program.try_wait().ok().flatten().is_none() {
            if t.elapsed() > Duration::from_secs(120) {
                let _ = self.program.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.program.wait();
    }
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
        let dir = tempfile::Builder::new()
            .prefix("weir-cluster-")
            .tempdir()
            .expect("temp dir");
        // PostgreSQL may run as another user, under this directory.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )
        .expect("cluster directory permissions");
        let root = dir.path().join("cluster");
        let program_path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/harness/weir_harness");
        let mut cmd = Command::new("python3");
        cmd.arg(program_path)
            .args(["cluster", "--brokers", &n.to_string(), "--keep", "--dir"])
            .arg(&root);
        for (k, v) in env {
            cmd.args(["--env", &format!("{k}={v}")]);
        }
        let log = std::fs::File::create(dir.path().join("harness.log")).expect("harness log");
        let mut program = cmd
            .env("WEIR_BIN", env!("CARGO_BIN_EXE_weir"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start the cluster program (python3 tests/harness/weir_harness)");
        let commands = program.stdin.take().expect("its stdin");
        let answers = BufReader::new(program.stdout.take().expect("its stdout"));
        let mut c = Cluster {
            program,
            commands: Some(commands),
            answers,
            nodes: Vec::new(),
            ids: Vec::new(),
            metadata_url: String::new(),
            object_store_url: String::new(),
            root,
            dir,
        };
        let d = c.answer();
        c.update(&d);
        c
    }

    /// The program's next answer; panics (with its log) on an error or if it exited.
    fn answer(&mut self) -> serde_json::Value {
        let mut line = String::new();
        let read = self
            .answers
            .read_line(&mut line)
            .expect("the cluster program's answer");
        let log =
            || std::fs::read_to_string(self.dir.path().join("harness.log")).unwrap_or_default();
        assert!(read > 0, "the cluster program exited:\n{}", log());
        let d: serde_json::Value = serde_json::from_str(&line).expect("the cluster as JSON");
        if let Some(e) = d.get("error") {
            panic!("the cluster program: {e}\n{}", self.logs());
        }
        d
    }

    /// Sends one command and takes in the cluster it answers with.
    fn act(&mut self, command: &str) {
        let commands = self.commands.as_mut().expect("the cluster program's stdin");
        writeln!(commands, "{command}").expect("a command to the cluster program");
        commands.flush().expect("a command to the cluster program");
        let d = self.answer();
        self.update(&d);
    }

    fn update(&mut self, d: &serde_json::Value) {
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        self.metadata_url = text(&d["metadata_url"]);
        self.object_store_url = text(&d["object_store_url"]);
        let described = d["brokers"].as_array().expect("brokers");
        self.ids = described
            .iter()
            .map(|b| {
                let id = b["node_id"].as_i64().expect("node id") as i32;
                (id, PathBuf::from(text(&b["data_dir"])))
            })
            .collect();
        self.nodes = described
            .iter()
            .map(|b| Broker {
                child: None,
                pid: b["pid"].as_u64().unwrap_or(0) as u32,
                port: b["port"].as_u64().expect("port") as u16,
                admin: b["admin_port"].as_u64().expect("admin port") as u16,
                log: PathBuf::from(text(&b["log"])),
                _dir: None,
            })
            .collect();
    }

    /// Starts a broker with the next node id; returns its index.
    pub fn add_broker(&mut self) -> usize {
        self.act("add");
        self.nodes.len() - 1
    }

    /// Starts broker `i` (stopped or killed before) on its data directory and ports, and waits
    /// until it is ready.
    pub fn start(&mut self, i: usize) {
        assert!(!self.is_running(i), "broker {} is running", self.node_id(i));
        self.act(&format!("start {i}"));
    }

    /// SIGTERM to broker `i`; it must exit 0.
    pub fn stop(&mut self, i: usize) {
        assert!(
            self.is_running(i),
            "broker {} is not running",
            self.node_id(i)
        );
        self.act(&format!("stop {i}"));
    }

    /// SIGKILL to broker `i`, and waits until it is gone.
    pub fn kill(&mut self, i: usize) {
        assert!(
            self.is_running(i),
            "broker {} is not running",
            self.node_id(i)
        );
        self.act(&format!("kill {i}"));
    }

    /// Sends `signal` to broker `i` (SIGSTOP and SIGCONT pause and resume it: a zombie).
    pub fn signal(&self, i: usize, signal: i32) {
        // SAFETY: signalling a process of this test's cluster.
        unsafe { libc::kill(self.broker(i).pid as i32, signal) };
    }

    /// The last `lines` lines of every broker's log, to tell what a wait that timed out was
    /// waiting for (the harness removes the logs with the cluster).
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for (i, b) in self.nodes.iter().enumerate() {
            let text = b.log_text();
            let all: Vec<&str> = text.lines().collect();
            let tail = &all[all.len().saturating_sub(lines)..];
            out.push_str(&format!(
                "\n--- broker {} (last {} lines) ---\n{}\n",
                self.node_id(i),
                tail.len(),
                tail.join("\n")
            ));
        }
        out
    }

    /// The running broker `i`.
    pub fn broker(&self, i: usize) -> &Broker {
        assert!(
            self.is_running(i),
            "broker {} is not running",
            self.node_id(i)
        );
        &self.nodes[i]
    }

    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].pid != 0
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn node_id(&self, i: usize) -> i32 {
        self.ids[i].0
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
            .map(|n| n.bootstrap())
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn metadata_url(&self) -> &str {
        &self.metadata_url
    }

    pub fn object_store_url(&self) -> String {
        self.object_store_url.clone()
    }

    /// The files s3s-fs holds under `prefix` of the bucket.
    pub fn object_files(&self, prefix: &str) -> Vec<PathBuf> {
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
        let bucket = self.object_store_url.trim_start_matches("s3://");
        let bucket = bucket.split('/').next().unwrap_or_default();
        let mut out = Vec::new();
        walk(&self.root.join("s3").join(bucket).join(prefix), &mut out);
        out
    }

    /// Broker `i`'s data directory (WAL, and nothing else on PostgreSQL).
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.ids[i].1.clone()
    }

    /// Every broker's log, for assertion messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, b)| format!("---- broker {} ----\n{}", self.node_id(i), b.log_text()))
            .collect()
    }

    /// No broker's log shows a panic.
    pub fn assert_no_panic(&self) {
        for b in &self.nodes {
            b.assert_no_panic();
        }
    }
}
