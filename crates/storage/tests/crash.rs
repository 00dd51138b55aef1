//! Crash test: a child process appends through the engine and is killed with SIGKILL at random
//! moments, over many rounds. After each restart every append that completed must be readable,
//! in order, exactly once, and no payload may be torn.
//!
//! The child is this test binary run again with `WEIR_CRASH_CHILD` set: see `crash_child`.
//! `WEIR_CRASH_ROUNDS` sets the number of rounds (default 12); `WEIR_CRASH_SEED` replays one.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{check_payload, open_engine, payload, read_all};
use weir_storage::StorageConfig;

const STREAMS: u64 = 4;
const WRITERS_PER_STREAM: u64 = 2;
const WAL_CAPACITY: u64 = 4 << 20;

fn config() -> StorageConfig {
    StorageConfig {
        // Uploads and WAL trims happen all the time, so kills land in the middle of them too.
        upload_bytes: 512 << 10,
        upload_interval: Duration::from_millis(200),
        stream_object_bytes: 256 << 10,
        block_bytes: 32 << 10,
        log_cache_bytes: 1 << 20,
        wal_full_wait: Duration::from_secs(2),
        ..common::small_config()
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The child: appends from several tasks to several streams until it is killed, recording each
/// completed append in `acked` (one `write` per line, so a line survives the process's death).
#[test]
fn crash_child() {
    let (Ok(dir), Ok(round)) = (
        std::env::var("WEIR_CRASH_CHILD"),
        std::env::var("WEIR_CRASH_ROUND"),
    ) else {
        return; // Not a child: nothing to do.
    };
    let round: u64 = round.parse().expect("round");
    let dir = PathBuf::from(dir);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let engine = open_engine(&dir, config(), WAL_CAPACITY).await;
        let epoch = round * 2 + 1;
        for s in 0..STREAMS {
            engine.open_stream(s, epoch).await.expect("open stream");
        }
        let acked = Arc::new(Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("acked"))
                .expect("acked file"),
        ));
        let mut tasks = Vec::new();
        for w in 0..STREAMS * WRITERS_PER_STREAM {
            let engine = engine.clone();
            let acked = Arc::clone(&acked);
            tasks.push(tokio::spawn(async move {
                let s = w % STREAMS;
                let mut rng = Rng(0x9E37_79B9 ^ (round << 20) ^ (w << 8) | 1);
                for i in 0u64.. {
                    let msg = (round << 40) | (w << 32) | i;
                    let size = 64 + rng.below(20_000) as usize;
                    match engine
                        .append(s, epoch, 1, 0, |b| payload(s, b, msg, size))
                        .await
                    {
                        Ok(a) => {
                            let line = format!("{s} {msg} {}\n", a.base_offset);
                            let mut f = acked.lock().expect("lock");
                            f.write_all(line.as_bytes()).expect("write acked");
                        }
                        Err(e) if e.is_retriable() => {
                            tokio::time::sleep(Duration::from_millis(5)).await
                        }
                        Err(e) => panic!("append failed: {e}"),
                    }
                }
            }));
        }
        std::fs::write(dir.join("ready"), b"1").expect("ready marker");
        for t in tasks {
            t.await.expect("writer");
        }
    });
}

fn read_acked(dir: &Path) -> HashMap<u64, Vec<(u64, u64)>> {
    let text = std::fs::read_to_string(dir.join("acked")).unwrap_or_default();
    let mut out: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    for line in text.lines() {
        let v: Vec<u64> = line
            .split(' ')
            .map(|x| x.parse().expect("number"))
            .collect();
        out.entry(v[0]).or_default().push((v[1], v[2]));
    }
    out
}

/// Opens the engine (running recovery), and checks every stream against what was acknowledged.
async fn verify(dir: &Path, epoch: u64) -> usize {
    let engine = open_engine(dir, config(), WAL_CAPACITY).await;
    let acked = read_acked(dir);
    let mut total = 0;
    for s in 0..STREAMS {
        engine.open_stream(s, epoch).await.expect("open stream");
        let frames = read_all(&engine, s, 0).await;
        let mut seen = HashSet::new();
        let mut last_per_writer: HashMap<u64, u64> = HashMap::new();
        let mut offset_of = HashMap::new();
        for f in &frames {
            let (stream, base, msg) = check_payload(&f.payload);
            assert_eq!(
                (stream, base),
                (s, f.base_offset),
                "payload names another place"
            );
            assert!(
                seen.insert(msg),
                "message {msg:#x} stored twice in stream {s}"
            );
            let writer = msg >> 32;
            if let Some(prev) = last_per_writer.insert(writer, msg) {
                assert!(prev < msg, "stream {s}: message {msg:#x} after {prev:#x}");
            }
            offset_of.insert(msg, f.base_offset);
        }
        for (msg, base) in acked.get(&s).map(Vec::as_slice).unwrap_or_default() {
            assert_eq!(
                offset_of.get(msg),
                Some(base),
                "stream {s}: acknowledged message {msg:#x} at offset {base} is missing or moved"
            );
        }
        total += frames.len();
    }
    engine.close().await.expect("close");
    total
}

#[test]
fn killed_appender_loses_nothing_acknowledged() {
    let rounds: u64 = std::env::var("WEIR_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let seed: u64 = std::env::var("WEIR_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    println!("crash test: {rounds} rounds, WEIR_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut verified_rounds = 0;
    for round in 0..rounds {
        let _ = std::fs::remove_file(dir.path().join("ready"));
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env("WEIR_CRASH_CHILD", dir.path())
            .env("WEIR_CRASH_ROUND", round.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child");
        // Wait for the child to start appending, then let it run for a random while.
        let started = Instant::now();
        while !dir.path().join("ready").exists() {
            if let Some(status) = child.try_wait().expect("wait") {
                panic!("child exited early in round {round}: {status}");
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "child did not start"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(20 + rng.below(700)));
        if let Some(status) = child.try_wait().expect("wait") {
            panic!("child died by itself in round {round}: {status}");
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");

        // Every other round the next child recovers the killed one's WAL by itself; the others
        // (and the last) are checked here.
        if round % 2 == 1 || round + 1 == rounds {
            let n = rt.block_on(verify(dir.path(), round * 2 + 2));
            verified_rounds += 1;
            println!("round {round}: {n} batches verified");
        }
    }
    let acked: usize = read_acked(dir.path()).values().map(Vec::len).sum();
    println!("crash test: {acked} acknowledged appends over {rounds} kills, all found");
    assert!(acked > 100, "too few appends to mean anything");
    assert!(verified_rounds >= rounds / 2);
}
