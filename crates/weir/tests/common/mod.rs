//! The one harness of the binary's integration tests: starts the real `weir serve` on free
//! ports with a small WAL, waits until it is ready, reads its admin endpoints, and stops it with
//! SIGTERM (checking that it exits cleanly) or kills it when dropped.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("address")
        .port()
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
        let (port, admin) = (free_port(), free_port());
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
