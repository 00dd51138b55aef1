//! A mirror partition (a link's copy of a source cluster's partition) on a real engine: batches
//! are kept at the source's offsets and as the source stored them (compression, producer ids
//! and sequences, control batches, the gaps of a compacted source), what is already here is
//! left out, producer and transaction state follow, and all of it survives a reopen.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder, TimestampType};
use kafka_protocol::ResponseError;
use weir_meta::SqliteMetaStore;
use weir_partition::{batch, Partition};
use weir_storage::Engine;

mod common;

struct Setup {
    dir: tempfile::TempDir,
    meta: Arc<SqliteMetaStore>,
    engine: Engine,
    partition: Arc<Partition>,
}

async fn open(engine: &Engine, meta: &SqliteMetaStore) -> Arc<Partition> {
    Partition::open(
        engine.clone(),
        meta,
        "mirror",
        0,
        1,
        1 << 20,
        weir_storage::WalKind::File,
    )
    .await
    .expect("open")
}

async fn setup() -> Setup {
    let common::Stack { dir, meta, engine } = common::stack().await;
    let partition = open(&engine, &meta).await;
    Setup {
        dir,
        meta,
        engine,
        partition,
    }
}

/// A batch as a source cluster stores it: records at `offsets` (gaps allowed, as its cleaner
/// leaves them), of producer `pid` from sequence `seq`, with its leader epoch 7.
fn source_batch(
    offsets: &[i64],
    pid: i64,
    seq: i32,
    transactional: bool,
    compression: Compression,
) -> Bytes {
    let records: Vec<Record> = offsets
        .iter()
        .map(|&o| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 7,
            producer_id: pid,
            producer_epoch: if pid < 0 { -1 } else { 0 },
            timestamp_type: TimestampType::Creation,
            offset: o,
            // The encoder keeps records in one batch while offset - sequence stays the same;
            // without a producer the batch's base sequence comes out as -1.
            sequence: if pid < 0 {
                (o - offsets[0]) as i32 - 1
            } else {
                seq + (o - offsets[0]) as i32
            },
            timestamp: 1_700_000_000_000 + o,
            key: Some(Bytes::from(format!("k{o}"))),
            value: Some(Bytes::from(format!("v{o}"))),
            headers: Default::default(),
        })
        .collect();
    common::encode(&records, compression)
}

/// A transaction marker as the source's coordinator wrote it, at `offset`.
fn source_marker(offset: i64, pid: i64, commit: bool) -> Bytes {
    let m = batch::marker(pid, 0, commit, 3, 1_700_000_100_000);
    let mut b = BytesMut::from(&m[..]);
    (&mut b[0..8]).put_i64(offset);
    (&mut b[12..16]).put_i32(7);
    b.freeze()
}

fn cat(parts: &[&Bytes]) -> Bytes {
    Bytes::from(
        parts
            .iter()
            .flat_map(|p| p.iter().copied())
            .collect::<Vec<u8>>(),
    )
}

/// Mirrors `records` as a fetch from the partition's end would bring them.
async fn mirror(p: &Arc<Partition>, records: &Bytes) -> Option<i64> {
    let (_, end) = p.offsets();
    match p.start_mirror(records, end).expect("mirror") {
        Some(t) => Some(t.wait().await.expect("durable").base_offset),
        None => None,
    }
}

/// Every batch from `from` on, as stored: (base offset, bytes).
async fn stored_batches(p: &Partition, from: i64) -> Vec<(i64, Bytes)> {
    let (_, hw) = p.offsets();
    let mut out: Vec<(i64, Bytes)> = Vec::new();
    let mut at = from;
    while at < hw {
        let d = p.fetch(at, 1 << 20, false).await.expect("fetch");
        assert!(!d.records.is_empty(), "nothing read at {at} below {hw}");
        for b in batch::split(&d.records) {
            let h = batch::BatchHeader::parse(&b).expect("header");
            at = at.max(h.base_offset + i64::from(h.last_offset_delta) + 1);
            if out.last().is_none_or(|(o, _)| *o < h.base_offset) {
                out.push((h.base_offset, b));
            }
        }
    }
    out
}

/// The record offsets in stored batches.
fn record_offsets(batches: &[(i64, Bytes)]) -> Vec<i64> {
    let mut out = Vec::new();
    for (_, b) in batches {
        let mut b = b.clone();
        let set = RecordBatchDecoder::decode(&mut b).expect("decode");
        out.extend(set.records.iter().filter(|r| !r.control).map(|r| r.offset));
    }
    out
}

/// The batch as the source sent it, but for the leader epoch the mirror writes in.
fn as_mirrored(source: &Bytes, epoch: i32) -> Bytes {
    let mut b = BytesMut::from(&source[..]);
    (&mut b[12..16]).put_i32(epoch);
    b.freeze()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrored_batches_keep_their_offsets_bytes_and_gaps() {
    let s = setup().await;
    let p = &s.partition;
    let a = source_batch(&[0, 1, 2], -1, -1, false, Compression::None);
    // Compacted at the source: records 10 and 14 left of 10..=14, and 3..10 gone entirely.
    let b = source_batch(&[10, 14], 5, 10, false, Compression::Gzip);
    let c = source_batch(&[15, 16, 17, 18], 5, 15, false, Compression::Zstd);
    assert_eq!(mirror(p, &cat(&[&a, &b])).await, Some(0));
    assert_eq!(mirror(p, &c).await, Some(15));
    assert_eq!(p.offsets(), (0, 19));
    let stored = stored_batches(p, 0).await;
    let epoch = p.leader_epoch;
    assert_eq!(
        stored,
        vec![
            (0, as_mirrored(&a, epoch)),
            (10, as_mirrored(&b, epoch)),
            (15, as_mirrored(&c, epoch)),
        ],
        "every batch byte for byte at its source offset, the leader epoch aside"
    );
    assert_eq!(
        record_offsets(&stored),
        vec![0, 1, 2, 10, 14, 15, 16, 17, 18]
    );
    // A read inside a gap returns the batch after it, as the source's would.
    let d = p.fetch(5, 1 << 20, false).await.expect("fetch in the gap");
    let first = batch::split(&d.records).next().expect("a batch");
    assert!(
        [0, 10].contains(
            &batch::BatchHeader::parse(&first)
                .expect("header")
                .base_offset
        ),
        "a read at 5 starts with a batch holding or following offset 5"
    );
    // The producer's state came along: its next sequence after 18 is 19, a retry of its last
    // batch is a duplicate answered with the source's offset, and a gap is refused.
    let retry = source_batch(&[0, 1, 2, 3], 5, 15, false, Compression::None);
    let dup = p.produce(&retry).await.expect("a duplicate is answered");
    assert_eq!(dup.base_offset, 15);
    let gap = source_batch(&[0], 5, 21, false, Compression::None);
    assert_eq!(
        p.produce(&gap).await.expect_err("out of order").to_string(),
        ResponseError::OutOfOrderSequenceNumber.to_string()
    );
    let next = source_batch(&[0], 5, 19, false, Compression::None);
    assert_eq!(p.produce(&next).await.expect("in order").base_offset, 19);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_already_here_are_left_out() {
    let s = setup().await;
    let p = &s.partition;
    let a = source_batch(&[0, 1, 2], -1, -1, false, Compression::None);
    let b = source_batch(&[3, 4], -1, -1, false, Compression::None);
    let c = source_batch(&[8], -1, -1, false, Compression::None);
    assert_eq!(mirror(p, &a).await, Some(0));
    // A link resuming from what the partition holds may fetch again what it wrote.
    assert_eq!(mirror(p, &a).await, None);
    assert_eq!(mirror(p, &cat(&[&a, &b])).await, Some(3));
    assert_eq!(mirror(p, &cat(&[&b, &c])).await, Some(5));
    assert_eq!(p.offsets(), (0, 9));
    assert_eq!(
        record_offsets(&stored_batches(p, 0).await),
        vec![0, 1, 2, 3, 4, 8]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_is_not_a_continuation_is_refused_and_nothing_written() {
    let s = setup().await;
    let p = &s.partition;
    mirror(
        p,
        &source_batch(&[0, 1, 2], -1, -1, false, Compression::None),
    )
    .await;
    // Starts inside what is here: not the log this mirror followed.
    let inside = source_batch(&[2, 3], -1, -1, false, Compression::None);
    assert_eq!(
        p.start_mirror(&inside, 3).err(),
        Some(ResponseError::CorruptMessage)
    );
    // Offsets that go back within one fetch.
    let later = source_batch(&[10], -1, -1, false, Compression::None);
    let earlier = source_batch(&[5], -1, -1, false, Compression::None);
    assert_eq!(
        p.start_mirror(&cat(&[&later, &earlier]), 3).err(),
        Some(ResponseError::CorruptMessage)
    );
    let mut damaged = BytesMut::from(&later[..]);
    let at = damaged.len() - 1;
    damaged[at] ^= 1;
    assert_eq!(
        p.start_mirror(&damaged.freeze(), 3).err(),
        Some(ResponseError::CorruptMessage)
    );
    // A fetch from beyond the partition's end: offsets 3..10 would be missing.
    assert_eq!(
        p.start_mirror(&later, 10).err(),
        Some(ResponseError::OffsetOutOfRange)
    );
    // The source's log starts at 10 (nothing before it there): the mirror may jump.
    p.start_mirror(&later, 3)
        .expect("a jump the source made")
        .expect("appended")
        .wait()
        .await
        .expect("durable");
    assert_eq!(
        record_offsets(&stored_batches(p, 0).await),
        vec![0, 1, 2, 10],
        "nothing of a refused fetch is written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_end_where_the_source_ended_them() {
    let s = setup().await;
    let p = &s.partition;
    let committed = source_batch(&[0, 1], 7, 0, true, Compression::None);
    let aborted = source_batch(&[2, 3], 8, 0, true, Compression::Lz4);
    mirror(p, &cat(&[&committed, &aborted])).await;
    assert_eq!(
        p.offsets_and_lso(),
        (0, 4, 0),
        "both open: stable up to the first"
    );
    mirror(p, &source_marker(4, 7, true)).await;
    assert_eq!(
        p.last_stable_offset(),
        2,
        "pid 7 committed, pid 8 still open"
    );
    mirror(p, &source_marker(5, 8, false)).await;
    assert_eq!(p.last_stable_offset(), 6);
    let aborted_txns = p.aborted_between(0, 6);
    assert_eq!(aborted_txns.len(), 1, "{aborted_txns:?}");
    assert_eq!(
        (aborted_txns[0].producer_id, aborted_txns[0].first_offset),
        (8, 2)
    );
    let stored = stored_batches(p, 0).await;
    assert_eq!(stored.len(), 4);
    assert_eq!(
        stored[2].1,
        as_mirrored(&source_marker(4, 7, true), p.leader_epoch)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_mirror_has_its_offsets_and_producer_state_and_goes_on() {
    let s = setup().await;
    let a = source_batch(&[0, 1, 2], 5, 0, false, Compression::None);
    let b = source_batch(&[20, 21], 5, 3, false, Compression::None);
    let t = source_batch(&[22], 9, 0, true, Compression::None);
    mirror(&s.partition, &cat(&[&a, &b, &t])).await;
    s.partition.close(&*s.meta).await.expect("close");
    drop(s.partition);
    let p = open(&s.engine, &s.meta).await;
    assert_eq!(
        p.offsets_and_lso(),
        (0, 23, 22),
        "pid 9's transaction still open"
    );
    // The link goes on from the high watermark; what it fetches again is left out.
    assert_eq!(mirror(&p, &cat(&[&b, &t])).await, None);
    mirror(&p, &source_marker(23, 9, true)).await;
    assert_eq!(p.last_stable_offset(), 24);
    let dup = p.produce(&b).await.expect("a duplicate after the reopen");
    assert_eq!(dup.base_offset, 20);
    let next = source_batch(&[0], 5, 5, false, Compression::None);
    assert_eq!(p.produce(&next).await.expect("in order").base_offset, 24);
    assert_eq!(
        record_offsets(&stored_batches(&p, 0).await),
        vec![0, 1, 2, 20, 21, 22, 24]
    );
    drop(s.dir);
}
