//! Append benchmark: the engine's append throughput and latency, beside this machine's raw
//! `pwrite` + `fdatasync` latency for the same sizes, so the engine's overhead over the disk is
//! visible.
//!
//! `cargo bench -p weir-storage --bench append` (or `make bench-storage`). Environment:
//! `WEIR_BENCH_DIR` (default: a temporary directory under `target/`, on the same disk as the
//! checkout), `WEIR_BENCH_SECS` (per case, default 5).

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use weir_meta::SqliteMetaStore;
use weir_storage::{Engine, StorageConfig};
use weir_wal::{FileWal, FileWalConfig};

struct Row {
    case: String,
    ops: u64,
    secs: f64,
    bytes: u64,
    hist: Histogram<u64>,
}

impl Row {
    fn print(&self) {
        let q = |p: f64| self.hist.value_at_quantile(p) as f64 / 1000.0;
        println!(
            "| {:<44} | {:>9.0} | {:>8.1} | {:>7.3} | {:>7.3} | {:>7.3} | {:>7.3} |",
            self.case,
            self.ops as f64 / self.secs,
            self.bytes as f64 / self.secs / (1 << 20) as f64,
            q(0.5),
            q(0.99),
            q(0.999),
            self.hist.max() as f64 / 1000.0,
        );
    }
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram")
}

/// One O_DIRECT pwrite of `size` bytes (rounded up to 4 KiB, as the WAL does) and one fdatasync
/// at a time, over a preallocated file: the floor for a synchronous append.
fn raw_disk(dir: &Path, size: usize, secs: f64, prefill: bool) -> Row {
    let path = dir.join("raw.bin");
    let aligned = size.div_ceil(4096) * 4096;
    let span: u64 = 256 << 20;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .or_else(|_| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
        })
        .expect("open raw file");
    file.set_len(span).expect("size raw file");
    if prefill {
        // Written once, so that the timed writes do not pay for allocating blocks.
        let buf = aligned_buf(1 << 20);
        for off in (0..span).step_by(1 << 20) {
            file.write_all_at(buf, off).expect("prefill");
        }
    } else {
        // Allocated but unwritten, as a new WAL file is: the first write of each block also
        // converts its extent, which costs a journal commit inside fdatasync.
        // SAFETY: plain syscall on a valid descriptor.
        unsafe {
            libc::fallocate(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
                0,
                span as libc::off_t,
            )
        };
    }
    file.sync_all().expect("sync");
    let buf = aligned_buf(aligned);
    let mut h = hist();
    let mut ops = 0u64;
    let mut off = 0u64;
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < secs {
        let t = Instant::now();
        file.write_all_at(buf, off).expect("pwrite");
        file.sync_data().expect("fdatasync");
        h.record(t.elapsed().as_micros() as u64).ok();
        ops += 1;
        off = (off + aligned as u64) % (span - aligned as u64);
    }
    let _ = std::fs::remove_file(&path);
    Row {
        case: format!(
            "raw pwrite+fdatasync {} B, {}",
            size,
            if prefill {
                "written file"
            } else {
                "fallocated"
            }
        ),
        ops,
        secs: start.elapsed().as_secs_f64(),
        bytes: ops * size as u64,
        hist: h,
    }
}

fn aligned_buf(len: usize) -> &'static mut [u8] {
    let layout = std::alloc::Layout::from_size_align(len, 4096).expect("layout");
    // SAFETY: non-zero size; leaked on purpose, the benchmark is short-lived.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout);
        assert!(!p.is_null());
        std::slice::from_raw_parts_mut(p, len)
    }
}

async fn engine_case(dir: &Path, size: usize, inflight: usize, secs: f64) -> Row {
    let case_dir = dir.join(format!("engine-{size}-{inflight}"));
    let _ = std::fs::remove_dir_all(&case_dir);
    let wal = FileWal::open(FileWalConfig::new(case_dir.join("wal"))).expect("wal");
    let meta = SqliteMetaStore::open(&case_dir.join("meta.sqlite")).expect("meta");
    let store =
        weir_storage::objstore::from_url(&format!("file://{}", case_dir.join("objects").display()))
            .expect("store");
    let config = StorageConfig::default();
    let engine = Engine::open(config, Arc::new(wal), Arc::new(meta), store)
        .await
        .expect("engine");
    let streams = 4u64;
    for s in 0..streams {
        engine.open_stream(s, 1).await.expect("open");
    }
    let payload = Bytes::from(vec![7u8; size]);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..inflight {
        let engine = engine.clone();
        let payload = payload.clone();
        tasks.push(tokio::spawn(async move {
            let mut h = hist();
            let mut ops = 0u64;
            let s = t as u64 % streams;
            while Instant::now() < deadline {
                let t0 = Instant::now();
                engine
                    .append(s, 1, 1, 0, |_| payload.clone())
                    .await
                    .expect("append");
                h.record(t0.elapsed().as_micros() as u64).ok();
                ops += 1;
            }
            (ops, h)
        }));
    }
    let mut h = hist();
    let mut ops = 0;
    for t in tasks {
        let (n, th) = t.await.expect("task");
        ops += n;
        h.add(th).expect("merge");
    }
    let secs = start.elapsed().as_secs_f64();
    let syncs = engine.wal().meters().syncs.get();
    engine.close().await.expect("close");
    let _ = std::fs::remove_dir_all(&case_dir);
    Row {
        case: format!(
            "weir append {} B, {} in flight ({:.1}/sync)",
            size,
            inflight,
            ops as f64 / syncs.max(1) as f64
        ),
        ops,
        secs,
        bytes: ops * size as u64,
        hist: h,
    }
}

fn main() {
    // `cargo test --all-targets` runs benches without `--bench`: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("append benchmark: run it with `cargo bench -p weir-storage --bench append`");
        return;
    }
    let secs: f64 = std::env::var("WEIR_BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5.0);
    let base = std::env::var("WEIR_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-tmp")
        });
    std::fs::create_dir_all(&base).expect("bench dir");
    let dir = tempfile::tempdir_in(&base).expect("tempdir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    println!(
        "append benchmark: {secs} s per case, files in {}",
        dir.path().display()
    );
    println!();
    println!("| case                                         |    ops/s |    MiB/s | p50 ms  | p99 ms  | p99.9 ms| max ms  |");
    println!("|----------------------------------------------|---------:|---------:|--------:|--------:|--------:|--------:|");
    for size in [1024usize, 64 * 1024] {
        raw_disk(dir.path(), size, secs, true).print();
        raw_disk(dir.path(), size, secs, false).print();
        rt.block_on(engine_case(dir.path(), size, 1, secs)).print();
        rt.block_on(engine_case(dir.path(), size, 64, secs)).print();
    }
}
