//! What every object-store backend must do for Weir, as one suite each backend's tests run:
//! the requests the engine makes (PUT, multipart PUT, ranged GET, HEAD, DELETE, LIST) and an
//! engine round trip over the store (append, upload, restart, read back from objects only).
//!
//! And what every way of making batches durable must do (`durability.rs`: the WAL file and the
//! object WAL), as one suite ([`durability`]) each kind's tests run.

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::{Engine, StorageConfig, WalKind};

fn data(n: usize, seed: u8) -> Bytes {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

/// Runs every check against `store`. Keys are made under a fresh prefix, so a shared bucket is
/// fine.
pub async fn run_all(store: Arc<dyn ObjectStore>) {
    let prefix = format!("conformance-{}", std::process::id());
    requests(&*store, &prefix).await;
    multipart(&*store, &prefix).await;
    engine_round_trip(Arc::clone(&store)).await;
    compaction_round_trip(store).await;
}

pub async fn requests(store: &dyn ObjectStore, prefix: &str) {
    let p = Path::from(format!("{prefix}/a/object"));
    let body = data(100_000, 1);
    store.put(&p, body.clone().into()).await.expect("PUT");
    assert_eq!(
        store
            .get(&p)
            .await
            .expect("GET")
            .bytes()
            .await
            .expect("body"),
        body
    );
    assert_eq!(
        store.get_range(&p, 10..20).await.expect("ranged GET"),
        body.slice(10..20)
    );
    assert_eq!(
        store
            .get_range(&p, 99_990..100_000)
            .await
            .expect("tail GET"),
        body.slice(99_990..)
    );
    let ranges = store
        .get_ranges(&p, &[0..5, 50_000..50_010])
        .await
        .expect("GET ranges");
    assert_eq!(ranges, vec![body.slice(0..5), body.slice(50_000..50_010)]);
    assert_eq!(store.head(&p).await.expect("HEAD").size, 100_000);

    let other = data(10, 2);
    store
        .put(&p, other.clone().into())
        .await
        .expect("overwrite");
    assert_eq!(
        store
            .get(&p)
            .await
            .expect("GET")
            .bytes()
            .await
            .expect("body"),
        other
    );

    let q = Path::from(format!("{prefix}/b/other"));
    store.put(&q, data(1, 3).into()).await.expect("PUT");
    let mut listed: Vec<String> =
        futures::TryStreamExt::try_collect::<Vec<_>>(store.list(Some(&Path::from(prefix))))
            .await
            .expect("LIST")
            .into_iter()
            .map(|m| m.location.to_string())
            .collect();
    listed.sort();
    assert_eq!(listed, vec![p.to_string(), q.to_string()]);

    store.delete(&p).await.expect("DELETE");
    store.delete(&q).await.expect("DELETE");
    match store.get(&p).await {
        Err(object_store::Error::NotFound { .. }) => {}
        other => panic!("GET of a deleted object: {:?}", other.map(|_| ())),
    }
}

pub async fn multipart(store: &dyn ObjectStore, prefix: &str) {
    let p = Path::from(format!("{prefix}/multipart"));
    let part = 5 << 20;
    let body = data(2 * part + 12_345, 7);
    let mut upload = store.put_multipart(&p).await.expect("start multipart");
    let parts = vec![
        upload.put_part(body.slice(0..part).into()),
        upload.put_part(body.slice(part..2 * part).into()),
        upload.put_part(body.slice(2 * part..).into()),
    ];
    futures::future::try_join_all(parts).await.expect("parts");
    upload.complete().await.expect("complete");
    assert_eq!(store.head(&p).await.expect("HEAD").size, body.len() as u64);
    // A range across a part boundary.
    let r = (part - 100) as u64..(part + 100) as u64;
    assert_eq!(
        store.get_range(&p, r).await.expect("GET"),
        body.slice(part - 100..part + 100)
    );
    store.delete(&p).await.expect("DELETE");
}

/// An engine on `store` with its WAL (64 MiB) and SQLite metadata in `dir`, which it finds again
/// when opened anew.
async fn open_engine(
    dir: &std::path::Path,
    config: StorageConfig,
    store: Arc<dyn ObjectStore>,
) -> Engine {
    let wal = weir_wal::FileWal::open(weir_wal::FileWalConfig {
        capacity: 64 << 20,
        ..weir_wal::FileWalConfig::new(dir.join("wal"))
    })
    .expect("WAL");
    let meta = weir_meta::SqliteMetaStore::open(&dir.join("meta.sqlite")).expect("meta");
    Engine::open(config, Arc::new(wal), Arc::new(meta), store)
        .await
        .expect("engine")
}

/// Appends through an engine on `store`, uploads (a stream object of 16 MiB, one PUT: an upload
/// is in memory), restarts the engine with an empty cache and reads everything back through
/// ranged GETs.
pub async fn engine_round_trip(store: Arc<dyn ObjectStore>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = StorageConfig {
        upload_bytes: u64::MAX,
        upload_interval: std::time::Duration::from_secs(3600),
        stream_object_bytes: 8 << 20,
        block_bytes: 256 << 10,
        multipart_part_bytes: 5 << 20,
        ..StorageConfig::default()
    };
    let open = |store: Arc<dyn ObjectStore>| open_engine(dir.path(), config.clone(), store);
    let engine = open(Arc::clone(&store)).await;
    engine.open_stream(1, 1).await.expect("open");
    engine.open_stream(2, 1).await.expect("open");
    // Stream 1: 16 MiB, a stream object; stream 2: small, a stream-set object.
    for i in 0..256u64 {
        engine
            .append(1, 1, 1, i as i64, |_| data(64 << 10, i as u8))
            .await
            .expect("append");
    }
    for i in 0..10u64 {
        engine
            .append(2, 1, 1, i as i64, |_| data(1000, i as u8))
            .await
            .expect("append");
    }
    engine.close().await.expect("close");
    let engine = open(store).await;
    engine.open_stream(1, 2).await.expect("reopen");
    engine.open_stream(2, 2).await.expect("reopen");
    let gets = engine.object_meters().gets.get();
    for (stream, n, size) in [(1u64, 256u64, 64usize << 10), (2, 10, 1000)] {
        let mut next = 0;
        while next < n {
            let r = engine.read(stream, next, 1 << 20).await.expect("read");
            assert!(!r.batches.is_empty(), "stream {stream} stops at {next}");
            for b in r.batches {
                assert_eq!(b.base_offset, next);
                assert_eq!(
                    b.payload,
                    data(size, next as u8),
                    "stream {stream} offset {next}"
                );
                next = b.end_offset();
            }
        }
    }
    assert!(
        engine.object_meters().gets.get() > gets,
        "reads came from GETs"
    );
    engine.close().await.expect("close");
}

/// Compacts a stream's run of more than two parts (uploaded as it is read, in parts), restarts
/// and reads every batch back from the compacted object.
pub async fn compaction_round_trip(store: Arc<dyn ObjectStore>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = StorageConfig {
        upload_bytes: u64::MAX,
        upload_interval: std::time::Duration::from_secs(3600),
        block_bytes: 256 << 10,
        multipart_part_bytes: 5 << 20,
        compaction_target_bytes: 64 << 20,
        compaction_min_ranges: 4,
        background_bytes_per_sec: 0,
        ..StorageConfig::default()
    };
    let open = || open_engine(dir.path(), config.clone(), Arc::clone(&store));
    // Six uploads of 2 MiB: six small ranges, 12 MiB in all.
    const BATCHES: u64 = 6 * 32;
    let engine = open().await;
    engine.open_stream(1, 1).await.expect("open");
    for i in 0..BATCHES {
        engine
            .append(1, 1, 1, i as i64, |_| data(64 << 10, i as u8))
            .await
            .expect("append");
        if i % 32 == 31 {
            engine.flush().await.expect("upload");
        }
    }
    let parts = engine.object_meters().multipart_parts.get();
    engine.run_maintenance().await.expect("compaction");
    assert_eq!(engine.meters().compactions.get(), 1, "one run compacted");
    assert!(
        engine.object_meters().multipart_parts.get() >= parts + 2,
        "the run was uploaded in parts"
    );
    engine.close().await.expect("close");

    let engine = open().await;
    engine.open_stream(1, 2).await.expect("reopen");
    let mut next = 0;
    while next < BATCHES {
        let r = engine.read(1, next, 4 << 20).await.expect("read");
        assert!(!r.batches.is_empty(), "the stream stops at {next}");
        for b in r.batches {
            assert_eq!(b.base_offset, next);
            assert_eq!(b.payload, data(64 << 10, next as u8), "offset {next}");
            next = b.end_offset();
        }
    }
    engine.close().await.expect("close");
}

/// The durability checks every WAL kind must pass: `open` opens an engine on a directory (its
/// WAL file, if it has one, its metadata store and its objects all live there; opened again on
/// the same directory, it is the same broker restarted), and streams opened with `kind` make
/// their batches durable that way. The engine must not upload by itself (an upload interval of
/// hours), so that what a crash leaves is only what the kind made durable.
pub async fn durability<F, Fut>(kind: WalKind, open: F)
where
    F: Fn(std::path::PathBuf) -> Fut,
    Fut: std::future::Future<Output = Engine>,
{
    acknowledged_in_offset_order(kind, &open).await;
    acknowledged_batches_survive_a_crash(kind, &open).await;
    acknowledged_batches_survive_a_clean_stop(kind, &open).await;
}

fn opened(kind: WalKind) -> crate::StreamOptions {
    crate::StreamOptions {
        wal_kind: kind,
        ..Default::default()
    }
}

/// A payload that names its stream and offset.
fn named(stream: u64, offset: u64, size: usize) -> Bytes {
    let mut v = format!("stream {stream} offset {offset} ").into_bytes();
    v.resize(size.max(v.len()), (offset % 251) as u8);
    v.into()
}

/// Appends `n` batches of two offsets to each of `streams`, interleaved, all in flight at once;
/// returns what was acknowledged, by stream: `(base offset, payload)` in offset order.
async fn append_many(engine: &Engine, streams: &[u64], n: u64) -> Vec<Vec<(u64, Bytes)>> {
    let mut pending = Vec::new();
    for i in 0..n {
        for &s in streams {
            let size = 100 + (i as usize * 37) % 3000;
            let p = engine
                .append_with(s, 1, |base, _| {
                    Some(crate::NewBatch {
                        record_count: 2,
                        max_timestamp: i as i64,
                        payload: named(s, base, size),
                    })
                })
                .expect("append")
                .expect("admitted");
            pending.push((s, p));
        }
    }
    let mut acked: Vec<Vec<(u64, Bytes)>> = vec![Vec::new(); streams.len()];
    for (s, p) in pending {
        let a = p.wait().await.expect("acknowledged");
        // An acknowledged batch is durable with everything before it.
        let info = engine.stream_info(s).expect("open");
        assert!(
            info.high_watermark >= a.end_offset,
            "stream {s}: batch {a:?} acknowledged, high watermark {}",
            info.high_watermark
        );
        let i = streams.iter().position(|x| *x == s).expect("a stream");
        let size = 100 + ((acked[i].len() as u64 * 37) % 3000) as usize;
        acked[i].push((a.base_offset, named(s, a.base_offset, size)));
    }
    acked
}

/// Reads every batch of `stream` from its start and checks it is `acked`, in order.
async fn read_back(engine: &Engine, stream: u64, acked: &[(u64, Bytes)]) {
    let mut next = 0;
    let mut got = Vec::new();
    loop {
        let r = engine.read(stream, next, 1 << 20).await.expect("read");
        if r.batches.is_empty() {
            break;
        }
        for b in r.batches {
            assert_eq!(
                b.base_offset, next,
                "stream {stream}: batches are contiguous"
            );
            next = b.end_offset();
            got.push((b.base_offset, b.payload));
        }
    }
    assert_eq!(got.len(), acked.len(), "stream {stream}: batches read back");
    assert!(
        got == acked,
        "stream {stream}: the batches read back are those acknowledged"
    );
}

/// Batches in flight at once are given consecutive offsets in the order they were appended, and
/// each is acknowledged only once every batch before it in its stream is durable too.
pub async fn acknowledged_in_offset_order<F, Fut>(kind: WalKind, open: &F)
where
    F: Fn(std::path::PathBuf) -> Fut,
    Fut: std::future::Future<Output = Engine>,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = open(dir.path().to_path_buf()).await;
    for s in [1, 2] {
        engine
            .open_stream_with(s, 1, opened(kind))
            .await
            .expect("open");
    }
    let acked = append_many(&engine, &[1, 2], 100).await;
    for (i, a) in acked.iter().enumerate() {
        assert!(
            a.iter()
                .enumerate()
                .all(|(n, (base, _))| *base == 2 * n as u64),
            "stream {}: offsets in append order",
            i + 1
        );
    }
    read_back(&engine, 1, &acked[0]).await;
    read_back(&engine, 2, &acked[1]).await;
    engine.close().await.expect("close");
}

/// What was acknowledged is read back by the next engine on the same directory (the broker
/// restarted after a crash), at a higher epoch, and nothing else is.
pub async fn acknowledged_batches_survive_a_crash<F, Fut>(kind: WalKind, open: &F)
where
    F: Fn(std::path::PathBuf) -> Fut,
    Fut: std::future::Future<Output = Engine>,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = open(dir.path().to_path_buf()).await;
    for s in [1, 2, 3] {
        engine
            .open_stream_with(s, 1, opened(kind))
            .await
            .expect("open");
    }
    let acked = append_many(&engine, &[1, 2, 3], 60).await;
    // No close, no upload: gone as a killed process is (its tasks idle on).
    std::mem::forget(engine);
    let engine = open(dir.path().to_path_buf()).await;
    for (i, s) in [1u64, 2, 3].into_iter().enumerate() {
        engine
            .open_stream_with(s, 2, opened(kind))
            .await
            .expect("reopen");
        read_back(&engine, s, &acked[i]).await;
    }
    engine.close().await.expect("close");
}

/// A clean stop keeps what was acknowledged too, and the next engine appends after it.
pub async fn acknowledged_batches_survive_a_clean_stop<F, Fut>(kind: WalKind, open: &F)
where
    F: Fn(std::path::PathBuf) -> Fut,
    Fut: std::future::Future<Output = Engine>,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = open(dir.path().to_path_buf()).await;
    engine
        .open_stream_with(1, 1, opened(kind))
        .await
        .expect("open");
    let mut acked = append_many(&engine, &[1], 40).await.remove(0);
    engine.close().await.expect("close");
    let engine = open(dir.path().to_path_buf()).await;
    let info = engine
        .open_stream_with(1, 2, opened(kind))
        .await
        .expect("reopen");
    assert_eq!(info.high_watermark, 80, "the stream ends where it stopped");
    let a = engine
        .append(1, 2, 2, 0, |base| named(1, base, 500))
        .await
        .expect("append after the restart");
    assert_eq!(a.base_offset, 80);
    acked.push((80, named(1, 80, 500)));
    read_back(&engine, 1, &acked).await;
    engine.close().await.expect("close");
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn memory() {
        super::run_all(crate::objstore::from_url("memory://").expect("store")).await;
    }

    #[tokio::test]
    async fn local_filesystem() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store =
            crate::objstore::from_url(&format!("file://{}", dir.path().display())).expect("store");
        super::run_all(store).await;
    }
}
