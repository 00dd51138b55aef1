//! `weir perf` against a real broker: the load generator's phases and its JSON results.

mod common;

use std::process::Command;

use common::Broker;

fn perf(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("perf")
        .args(args)
        .output()
        .expect("run weir perf")
}

/// `--settle` waits after the warm-up until the consumers read every partition written to and
/// are within a second of production, reports how long that took, and measures after it.
#[test]
fn settle_waits_for_the_consumers_then_measures() {
    let broker = Broker::start(&[]);
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("r.json");
    let bootstrap = broker.bootstrap();
    let run = perf(&[
        "--bootstrap-servers",
        &bootstrap,
        "--topic-prefix",
        "settle",
        "--partitions",
        "8",
        "--rate",
        "400",
        "--record-size",
        "256",
        "--warmup",
        "1s",
        "--settle",
        "60s",
        "--duration",
        "3s",
        "--quiet",
        "--output",
        out.to_str().expect("utf-8 path"),
    ]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "weir perf failed: {stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.contains("Consumers caught up after the warm-up in"),
        "{stdout}"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("results")).expect("JSON");
    let settle = &r["settle"];
    assert_eq!(settle["caught_up"], true, "{settle}");
    let waited = settle["seconds"].as_f64().expect("seconds");
    assert!((0.0..60.0).contains(&waited), "{settle}");
    let phases: Vec<&str> = r["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .filter_map(|p| p["phase"].as_str())
        .collect();
    assert_eq!(phases, ["warmup", "settle", "measure"]);
    // The measured period starts once the consumers caught up: what was produced in it was
    // read (a second of production may still be on its way at the end).
    let s = &r["summary"];
    let produced = s["produce"]["records"].as_u64().expect("produced");
    let consumed = s["consume"]["records"].as_u64().expect("consumed");
    assert!(produced > 0, "{s}");
    assert!(consumed + 400 >= produced, "{s}");
    broker.assert_no_panic();
}

#[test]
fn settle_is_refused_without_consumers_or_in_catch_up_mode() {
    for extra in [&["--groups", "0"][..], &["--backlog", "5s"][..]] {
        let mut args = vec!["--bootstrap-servers", "127.0.0.1:1", "--settle", "10s"];
        args.extend_from_slice(extra);
        let run = perf(&args);
        assert!(!run.status.success(), "{extra:?}");
        assert!(
            String::from_utf8_lossy(&run.stderr).contains("--settle needs consumer groups"),
            "{extra:?}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
}

/// `weir cost --metrics-url` against a broker under `weir perf`'s load: the rates and the
/// broker's CPU per GiB come from its meters, and compute is sized from them.
#[test]
fn cost_sizes_compute_from_a_scraped_brokers_cpu() {
    let broker = Broker::start(&[]);
    let bootstrap = broker.bootstrap();
    let load = std::thread::spawn(move || {
        perf(&[
            "--bootstrap-servers",
            &bootstrap,
            "--topic-prefix",
            "cost",
            "--partitions",
            "4",
            "--rate",
            "2000",
            "--record-size",
            "1024",
            "--warmup",
            "0s",
            "--duration",
            "8s",
            "--quiet",
        ])
    });
    std::thread::sleep(std::time::Duration::from_secs(2));
    let cost = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "cost",
            "--metrics-url",
            &format!("http://127.0.0.1:{}/metrics", broker.admin),
            "--window",
            "3s",
        ])
        .output()
        .expect("run weir cost");
    let run = load.join().expect("weir perf");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let out = String::from_utf8_lossy(&cost.stdout);
    assert!(
        cost.status.success(),
        "weir cost failed: {out}\n{}",
        String::from_utf8_lossy(&cost.stderr)
    );
    let weir = out
        .lines()
        .find(|l| l.trim_start().starts_with("Weir:"))
        .unwrap_or_else(|| panic!("no sizing of Weir's brokers in\n{out}"));
    assert!(weir.contains("(the broker's meters)"), "{weir}");
    let cpu: f64 = weir
        .trim_start()
        .trim_start_matches("Weir: ")
        .split(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no CPU per GiB in {weir}"));
    assert!(cpu > 0.0, "{weir}");
    assert!(out.contains("3 x r6in.large"), "{out}");
    broker.assert_no_panic();
}
