//! The real `weir serve` binary: admin endpoints, refusals of APIs it does not implement, and a
//! clean SIGTERM.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{consume, http_get, produce, Broker};

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
    let b = Broker::start(&[]);
    assert_eq!(http_get(b.admin, "/healthz").unwrap().0, 200);
    let (code, metrics) = http_get(b.admin, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(
        metrics.contains("# TYPE weir_wal_syncs_total counter"),
        "{metrics}"
    );
    assert!(metrics.contains("weir_object_requests_total{kind=\"put\"}"));
    assert_eq!(http_get(b.admin, "/nope").unwrap().0, 404);

    // SaslHandshake v1 (mechanism "PLAIN") on a listener without SASL: ILLEGAL_SASL_STATE, as
    // Kafka answers it.
    let mut body = 5i16.to_be_bytes().to_vec();
    body.extend_from_slice(b"PLAIN");
    let resp = roundtrip(b.port, 17, 1, &body).expect("an answer, not a hang-up");
    assert_eq!(i16::from_be_bytes([resp[0], resp[1]]), 34);

    // DescribeAcls v1 without an authorizer: SECURITY_DISABLED in the response's error code.
    let mut body = vec![2u8]; // resource type filter: TOPIC
    body.extend_from_slice(&(-1i16).to_be_bytes()); // name filter null
    body.push(3); // pattern type: LITERAL
    body.extend_from_slice(&(-1i16).to_be_bytes()); // principal null
    body.extend_from_slice(&(-1i16).to_be_bytes()); // host null
    body.push(1); // operation ANY
    body.push(1); // permission ANY
    let resp = roundtrip(b.port, 29, 1, &body).expect("an answer");
    // throttle_time_ms, then error_code.
    assert_eq!(i16::from_be_bytes([resp[4], resp[5]]), 54);

    // An API key nobody knows closes the connection, and the broker goes on serving.
    assert!(roundtrip(b.port, 999, 0, &[]).is_none());
    let resp = roundtrip(b.port, 18, 0, &[]).expect("ApiVersions v0");
    assert_eq!(i16::from_be_bytes([resp[0], resp[1]]), 0);

    // SIGTERM: the broker uploads, stops, and exits 0.
    b.stop();
}

/// The allocator's options, exported from `main.rs` under the name jemalloc reads before `main`,
/// take effect: its background purging threads (`background_thread:true`) run in the broker. A
/// misspelt or renamed symbol would leave jemalloc on its defaults without a word.
#[cfg(target_os = "linux")]
#[test]
fn the_allocator_runs_with_its_configuration() {
    let b = Broker::start(&[]);
    let tasks = std::path::PathBuf::from(format!("/proc/{}/task", b.pid));
    let names = || -> Vec<String> {
        std::fs::read_dir(&tasks)
            .map(|d| {
                d.filter_map(|t| t.ok())
                    .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                    .map(|n| n.trim().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut seen = names();
    while !seen.iter().any(|n| n.starts_with("jemalloc_bg_thd")) {
        assert!(
            std::time::Instant::now() < deadline,
            "no jemalloc background thread among the broker's threads: {seen:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
        seen = names();
    }
    b.stop();
}

/// A thread's name and nice value, from `/proc/<pid>/task/<tid>/stat`.
#[cfg(target_os = "linux")]
fn thread_nice(stat: &str) -> Option<(String, i64)> {
    let (head, rest) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_string();
    // `rest` starts at the third field (state); the nice value is the 19th.
    let nice = rest.split_whitespace().nth(16)?.parse().ok()?;
    Some((name, nice))
}

#[cfg(target_os = "linux")]
#[test]
fn catch_up_reads_run_on_threads_below_the_brokers_own() {
    let b = Broker::start(&[("WEIR_STORAGE_CATCHUP_NICE", "7")]);
    let tasks = std::path::PathBuf::from(format!("/proc/{}/task", b.pid));
    let threads: Vec<(String, i64)> = std::fs::read_dir(&tasks)
        .expect("the broker's threads")
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
        .filter_map(|s| thread_nice(&s))
        .collect();
    let nice_of = |name: &str| -> Vec<i64> {
        threads
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| *v)
            .collect()
    };
    let own = nice_of("weir");
    let catchup = nice_of("weir-catchup");
    assert!(!catchup.is_empty(), "no catch-up threads: {threads:?}");
    let base = *own.iter().min().expect("the broker's own threads");
    assert!(
        catchup.iter().all(|&n| n == (base + 7).min(19)),
        "catch-up threads not 7 below the broker's ({base}): {threads:?}"
    );
    b.stop();
}

/// A SIGTERM while the broker is still starting (here: once it has joined the cluster, before
/// it listens) is not lost and does not kill it: the broker finishes starting, then shuts down
/// as on any SIGTERM and exits 0. An orchestrator stopping a pod that has just started sends
/// exactly this; before the fix the process died of the signal.
#[cfg(target_os = "linux")]
#[test]
fn a_sigterm_while_starting_is_a_controlled_shutdown() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("broker.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--listen", &format!("127.0.0.1:{}", common::free_port())])
        .args([
            "--admin-listen",
            &format!("127.0.0.1:{}", common::free_port()),
        ])
        .env("WEIR_WAL_CAPACITY", (64u64 << 20).to_string())
        .env("WEIR_WAL_FORMAT", "false")
        .env("WEIR_SCHEMA_REGISTRY_LISTEN", "127.0.0.1:0")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start weir");
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    let t = std::time::Instant::now();
    while !text().contains("joined the cluster") {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "never joined: {}",
            text()
        );
        assert!(
            child.try_wait().expect("status").is_none(),
            "exited: {}",
            text()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("status") {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no exit after SIGTERM: {}",
            text()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = text();
    assert!(status.success(), "exit status {status}: {log}");
    assert!(log.contains("stopped"), "no controlled shutdown: {log}");
}

/// Every meter a component registers is on `/metrics` after a workload (produce, fetch, a
/// group), under the name, type and help `/v1/meters` lists; the meters once counted and never
/// exported among them.
/// A stand-in for AWS's instance metadata service (IMDSv2): a session token, then the zone id.
fn fake_aws_metadata(zone_id: &'static str) -> String {
    fake_aws_metadata_with_notice(zone_id).0
}

/// The same, with a spot interruption notice (`spot/instance-action`) once the flag is set.
fn fake_aws_metadata_with_notice(
    zone_id: &'static str,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicBool>) {
    let notice = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let given = std::sync::Arc::clone(&notice);
    use std::io::{BufRead, BufReader};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().expect("clone"));
            let mut head = Vec::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                head.push(line);
            }
            let first = head.first().cloned().unwrap_or_default();
            let has_token = head
                .iter()
                .any(|h| h.starts_with("x-aws-ec2-metadata-token: tok"));
            let action = r#"{"action": "terminate", "time": "2026-12-06T04:00:00Z"}"#;
            let body = if first.starts_with("PUT /latest/api/token ") {
                "tok"
            } else if first.starts_with("GET /latest/meta-data/placement/availability-zone-id ")
                && has_token
            {
                zone_id
            } else if first.starts_with("GET /latest/meta-data/spot/instance-action ")
                && has_token
                && given.load(std::sync::atomic::Ordering::SeqCst)
            {
                action
            } else {
                ""
            };
            let status = if body.is_empty() { 404 } else { 200 };
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, notice)
}

/// `--zone auto` on a cloud machine: the broker asks the instance metadata service and serves
/// in that zone; with nothing to ask, it does not start, and says why.
#[test]
fn a_broker_finds_its_zone_or_refuses_to_start() {
    let url = fake_aws_metadata("use1-az2");
    let b = Broker::start(&[
        ("WEIR_BROKER_ZONE", "auto"),
        ("WEIR_CLOUD_METADATA_URL", url.as_str()),
        ("NODE_NAME", ""),
    ]);
    let (code, cluster) = http_get(b.admin, "/v1/cluster").expect("/v1/cluster");
    assert_eq!(code, 200, "{cluster}");
    let cluster: serde_json::Value = serde_json::from_str(&cluster).expect("JSON");
    let zones: Vec<&str> = cluster["brokers"]
        .as_array()
        .expect("brokers")
        .iter()
        .filter_map(|b| b["zone"].as_str())
        .collect();
    assert_eq!(zones, ["use1-az2"], "{cluster}");
    b.stop();

    // Nothing answers: the broker exits with an error naming every source it tried.
    let dir = tempfile::tempdir().expect("dir");
    let closed = format!("http://127.0.0.1:{}", common::free_port());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["serve", "--zone", "auto", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", &format!("127.0.0.1:{}", common::free_port())])
        .args([
            "--admin-listen",
            &format!("127.0.0.1:{}", common::free_port()),
        ])
        .env("WEIR_CLOUD_METADATA_URL", &closed)
        .env("WEIR_CLOUD_REQUEST_TIMEOUT_MS", "300")
        .env("WEIR_SCHEMA_REGISTRY_LISTEN", "127.0.0.1:0")
        .env("WEIR_WAL_CAPACITY", (64u64 << 20).to_string())
        .env_remove("NODE_NAME")
        .output()
        .expect("run weir");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started without a zone: {said}");
    for part in ["broker.zone = auto found no zone", "aws:", "gcp:", "azure:"] {
        assert!(said.contains(part), "{part:?} not in {said}");
    }
}

/// A spot machine's interruption notice: the broker leaves as on SIGTERM while a producer
/// writes (its WAL uploaded, exit status 0), and every record it acknowledged is there when a
/// broker starts again on its stores.
#[test]
fn a_spot_notice_makes_the_broker_leave_losing_nothing() {
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
    use rdkafka::ClientConfig;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let (url, notice) = fake_aws_metadata_with_notice("use1-az1");
    let dir = tempfile::tempdir().expect("dir");
    let mut b = Broker::start_in(
        dir.path(),
        "spot",
        &[
            ("WEIR_CLOUD_METADATA_URL", url.as_str()),
            ("WEIR_CLOUD_INTERRUPTION_POLL_MS", "100"),
        ],
    );
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let producing = {
        let (bootstrap, acked, stop) = (b.bootstrap(), Arc::clone(&acked), Arc::clone(&stop));
        std::thread::spawn(move || {
            struct Acked(Arc<Mutex<Vec<String>>>);
            impl rdkafka::producer::ProducerContext for Acked {
                type DeliveryOpaque = ();
                fn delivery(&self, r: &rdkafka::message::DeliveryResult<'_>, _: ()) {
                    use rdkafka::Message;
                    if let Ok(m) = r {
                        let v = String::from_utf8_lossy(m.payload().unwrap_or(&[])).to_string();
                        self.0.lock().expect("acked").push(v);
                    }
                }
            }
            impl rdkafka::ClientContext for Acked {}
            let p: ThreadedProducer<Acked> = ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .set("enable.idempotence", "true")
                .set("linger.ms", "5")
                .set("message.timeout.ms", "5000")
                .create_with_context(Acked(acked))
                .expect("producer");
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let v = common::value(i);
                if p.send(
                    BaseRecord::<(), String>::to("spot")
                        .partition(0)
                        .payload(&v),
                )
                .is_ok()
                {
                    i += 1;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let _ = p.flush(Duration::from_secs(10));
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    let before = acked.lock().expect("acked").len();
    assert!(
        before > 100,
        "only {before} records acknowledged before the notice"
    );
    notice.store(true, Ordering::SeqCst);
    let noticed = std::time::Instant::now();
    let status = b
        .wait_for_exit(Duration::from_secs(60))
        .expect("the broker left");
    let left_in = noticed.elapsed();
    stop.store(true, Ordering::SeqCst);
    producing.join().expect("producer");
    assert!(status.success(), "exit status {status}: {}", b.log_text());
    assert!(
        b.log_text()
            .contains("the cloud is taking this machine back"),
        "{}",
        b.log_text()
    );
    let acked = acked.lock().expect("acked").clone();
    // Back on the same stores, with no notice to watch: every acknowledged record, once.
    let again = Broker::start_in(dir.path(), "after", &[]);
    let watermarks: rdkafka::consumer::BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", again.bootstrap())
        .create()
        .expect("consumer");
    let (_, end) = rdkafka::consumer::Consumer::fetch_watermarks(
        &watermarks,
        "spot",
        0,
        Duration::from_secs(10),
    )
    .expect("the end offset");
    let got = consume(&again.bootstrap(), "spot", end as u64);
    let got_set: std::collections::HashSet<&String> = got.iter().collect();
    assert_eq!(
        got_set.len(),
        got.len(),
        "duplicates among {} records",
        got.len()
    );
    let missing = acked.iter().filter(|v| !got_set.contains(v)).count();
    assert_eq!(
        missing,
        0,
        "{missing} of {} acknowledged records lost",
        acked.len()
    );
    eprintln!(
        "spot notice: left in {left_in:?}; {} records acknowledged, all read back ({} in the log)",
        acked.len(),
        got.len()
    );
    again.stop();
}

/// `weir --version` names the commit it was built from, and `/metrics` says the same
/// (`weir_build_info`: during a rolling upgrade, which brokers run which).
#[test]
fn the_version_names_its_commit_and_so_does_the_metrics_page() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("--version")
        .output()
        .expect("weir --version");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let (version, commit) = text
        .strip_prefix("weir ")
        .and_then(|t| t.split_once(" ("))
        .and_then(|(v, c)| Some((v, c.strip_suffix(')')?)))
        .unwrap_or_else(|| panic!("not `weir VERSION (COMMIT)`: {text:?}"));
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head {
        Some(head) => assert_eq!(commit, head, "built from another commit than HEAD"),
        None => assert_eq!(commit, "unknown"),
    }
    let b = Broker::start(&[]);
    let (_, page) = http_get(b.admin, "/metrics").expect("/metrics");
    let line = format!("weir_build_info{{version=\"{version}\",commit=\"{commit}\"}} 1\n");
    assert!(page.contains(&line), "{line:?} not on /metrics");
    b.stop();
}

/// A group's lag is on `/metrics` as Kafka's lag exporters show it: each partition's high
/// watermark from its leader, each group's committed offsets from its coordinator.
#[test]
fn a_groups_committed_offsets_and_its_partitions_ends_are_on_the_metrics_page() {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};

    let b = Broker::start(&[("WEIR_BROKER_GROUP_OFFSETS_METER_INTERVAL_MS", "200")]);
    produce(&b.bootstrap(), "lagged", 10);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("group.id", "lagging")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("lagged", 0, Offset::Offset(4))
        .expect("partition");
    consumer.commit(&tpl, CommitMode::Sync).expect("commit");
    let want = [
        "weir_partition_high_watermark{topic=\"lagged\",partition=\"0\"} 10\n",
        "weir_consumer_group_committed_offset{group=\"lagging\",topic=\"lagged\",partition=\"0\"} 4\n",
    ];
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, page) = http_get(b.admin, "/metrics").expect("/metrics");
        if want.iter().all(|w| page.contains(w)) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{want:?} not on /metrics:\n{}",
            page.lines()
                .filter(|l| l.contains("lagg"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    b.stop();
}

#[test]
fn every_meter_registered_is_on_the_metrics_page() {
    let b = Broker::start(&[]);
    produce(&b.bootstrap(), "metered", 200);
    assert_eq!(consume(&b.bootstrap(), "metered", 200).len(), 200);
    let (code, listed) = http_get(b.admin, "/v1/meters").expect("/v1/meters");
    assert_eq!(code, 200, "{listed}");
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("JSON");
    let meters = listed["meters"].as_array().expect("a list of meters");
    let (code, page) = http_get(b.admin, "/metrics").expect("/metrics");
    assert_eq!(code, 200);
    let mut names = Vec::new();
    for m in meters {
        let (name, kind, help) = (
            m["name"].as_str().expect("name"),
            m["type"].as_str().expect("type"),
            m["help"].as_str().expect("help"),
        );
        assert!(!help.is_empty(), "{name} has no help");
        let described = format!("# HELP {name} {help}\n# TYPE {name} {kind}\n");
        assert!(page.contains(&described), "{described:?} not on /metrics");
        names.push(name);
    }
    // What the broker counts (the storage engine, the WAL, the request path, the network, the
    // cluster, the process), and the meters once counted but left off the page.
    assert!(names.len() >= 100, "only {} meters: {names:?}", names.len());
    for name in [
        "weir_wal_full_failures_total",
        "weir_recovered_batches_total",
        "weir_compactions_total",
        "weir_compacted_bytes_total",
        "weir_wal_writes_total",
        "weir_unsupported_requests_total",
        "weir_session_valid",
        "weir_transactions_total",
        "weir_requests_in_flight",
        "process_resident_memory_bytes",
    ] {
        assert!(names.contains(&name), "{name} not registered");
    }
    // The workload shows in them.
    for name in [
        "weir_wal_appends_total",
        "weir_produce_bytes_total",
        "weir_fetch_bytes_total",
        "weir_connections_opened_total",
    ] {
        assert!(b.metric(name) > 0, "{name} is 0 after the workload");
    }
    assert!(
        page.contains("weir_requests_total{api_key=\"0\"}"),
        "no Produce requests counted"
    );
    b.assert_no_panic();
    b.stop();
}
