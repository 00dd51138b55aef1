//! The behaviour every WAL kind must show, as a suite each kind runs from its own tests.
//!
//! `open` opens (or reopens) the kind's WAL in a given directory; the suite reopens it to check
//! recovery, so it must find what an earlier instance in the same directory wrote. The suite
//! expects a small WAL (about 1 MiB) so that it can fill it and wrap around it quickly.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::{Seq, Wal, WalError, WalRecord};

pub fn record(stream_id: u64, base_offset: u64, size: usize) -> WalRecord {
    let fill = (base_offset % 251) as u8;
    WalRecord {
        stream_id,
        epoch: 1,
        base_offset,
        record_count: 1,
        max_timestamp: base_offset as i64,
        payload: Bytes::from(vec![fill; size]),
    }
}

/// Appends and waits until the record is durable.
pub async fn append_and_wait(wal: &dyn Wal, r: WalRecord) -> Result<Seq, WalError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    wal.append(
        r,
        Box::new(move |res| {
            let _ = tx.send(res);
        }),
    )?;
    rx.await.unwrap_or(Err(WalError::Closed))
}

/// Runs every check, each in a fresh directory.
pub async fn run_all(open: impl Fn(&Path) -> Arc<dyn Wal>) {
    recovers_in_order(&open).await;
    completions_run_in_order(&open).await;
    trimmed_records_are_not_recovered(&open).await;
    full_wal_rejects_then_recovers_after_trim(&open).await;
    wraps_around_many_times(&open).await;
    rejects_oversized_records(&open).await;
}

async fn reopen(
    wal: Arc<dyn Wal>,
    open: &impl Fn(&Path) -> Arc<dyn Wal>,
    dir: &Path,
) -> Arc<dyn Wal> {
    wal.close().await;
    drop(wal);
    open(dir)
}

pub async fn recovers_in_order(open: &impl Fn(&Path) -> Arc<dyn Wal>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open(dir.path());
    assert!(
        wal.take_recovered().is_empty(),
        "a new WAL recovers nothing"
    );
    let mut written = Vec::new();
    for i in 0..50u64 {
        let r = record(i % 3, i, 10 + (i as usize * 37) % 3000);
        append_and_wait(&*wal, r.clone()).await.expect("append");
        written.push(r);
    }
    let wal = reopen(wal, open, dir.path()).await;
    let recovered = wal.take_recovered();
    let records: Vec<WalRecord> = recovered.iter().map(|r| r.record.clone()).collect();
    assert_eq!(records, written);
    assert!(
        recovered.windows(2).all(|w| w[0].seq < w[1].seq),
        "sequence numbers increase"
    );
    assert!(wal.next_seq() > recovered[recovered.len() - 1].seq);
    assert!(
        wal.take_recovered().is_empty(),
        "recovered records are handed out once"
    );
    wal.close().await;
}

pub async fn completions_run_in_order(open: &impl Fn(&Path) -> Arc<dyn Wal>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open(dir.path());
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut rxs = Vec::new();
    let mut seqs = Vec::new();
    for i in 0..200u64 {
        let order = Arc::clone(&order);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let seq = wal
            .append(
                record(i % 5, i, 100),
                Box::new(move |res| {
                    if let Ok(seq) = res {
                        order.lock().expect("lock").push(seq);
                    }
                    let _ = tx.send(res.is_ok());
                }),
            )
            .expect("append");
        seqs.push(seq);
        rxs.push(rx);
    }
    for rx in rxs {
        assert!(rx.await.expect("completion"));
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(
        *order.lock().expect("lock"),
        seqs,
        "completions in sequence order"
    );
    wal.close().await;
}

pub async fn trimmed_records_are_not_recovered(open: &impl Fn(&Path) -> Arc<dyn Wal>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open(dir.path());
    let mut seqs = Vec::new();
    for i in 0..20u64 {
        seqs.push(
            append_and_wait(&*wal, record(1, i, 500))
                .await
                .expect("append"),
        );
    }
    wal.trim(seqs[12]).await.expect("trim");
    let wal = reopen(wal, open, dir.path()).await;
    let offsets: Vec<u64> = wal
        .take_recovered()
        .iter()
        .map(|r| r.record.base_offset)
        .collect();
    // A WAL may keep records below the trim point (it frees whole groups), never lose later ones.
    assert!(
        offsets.ends_with(&(12..20).collect::<Vec<_>>()),
        "got {offsets:?}"
    );
    assert!(offsets.len() <= 20);
    wal.trim(wal.next_seq()).await.expect("trim all");
    let wal = reopen(wal, open, dir.path()).await;
    assert!(wal.take_recovered().is_empty(), "everything was trimmed");
    wal.close().await;
}

pub async fn full_wal_rejects_then_recovers_after_trim(open: &impl Fn(&Path) -> Arc<dyn Wal>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open(dir.path());
    let mut last = None;
    let mut full = false;
    for i in 0..100_000u64 {
        match append_and_wait(&*wal, record(1, i, 8000)).await {
            Ok(seq) => last = Some(seq),
            Err(WalError::Full {
                needed,
                free,
                capacity,
            }) => {
                assert!(needed > free && free <= capacity);
                assert!(WalError::Full {
                    needed,
                    free,
                    capacity
                }
                .is_retriable());
                full = true;
                break;
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert!(full, "a WAL must fill up");
    let usage = wal.usage();
    assert!(usage.used <= usage.capacity);
    // Waiting does not free space by itself.
    wal.wait_for_space(Duration::from_millis(20)).await;
    assert!(matches!(
        append_and_wait(&*wal, record(1, 0, 8000)).await,
        Err(WalError::Full { .. })
    ));
    wal.trim(last.expect("some appends") + 1)
        .await
        .expect("trim");
    append_and_wait(&*wal, record(1, 999_999, 8000))
        .await
        .expect("room after trim");
    let wal = reopen(wal, open, dir.path()).await;
    let offsets: Vec<u64> = wal
        .take_recovered()
        .iter()
        .map(|r| r.record.base_offset)
        .collect();
    assert_eq!(offsets, vec![999_999]);
    wal.close().await;
}

pub async fn wraps_around_many_times(open: &impl Fn(&Path) -> Arc<dyn Wal>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut wal = open(dir.path());
    let mut kept: Vec<u64> = Vec::new();
    let mut seqs: Vec<(Seq, u64)> = Vec::new();
    // About 8 MiB through a WAL of about 1 MiB, trimming all but the last few records, with a
    // reopen every so often so that recovery runs from positions all around the ring.
    for i in 0..1000u64 {
        let size = 1000 + ((i * 7919) % 13_000) as usize;
        let seq = append_and_wait(&*wal, record(i % 4, i, size))
            .await
            .expect("append");
        seqs.push((seq, i));
        kept.push(i);
        if seqs.len() > 8 {
            let (cut, _) = seqs[seqs.len() - 8];
            wal.trim(cut).await.expect("trim");
        }
        if i % 97 == 96 {
            wal = reopen(wal, open, dir.path()).await;
            let got: Vec<u64> = wal
                .take_recovered()
                .iter()
                .map(|r| r.record.base_offset)
                .collect();
            let want = &kept[kept.len() - 8..];
            assert!(
                got.ends_with(want),
                "after {i}: got {got:?}, want a suffix {want:?}"
            );
            assert!(got.windows(2).all(|w| w[0] < w[1]));
        }
    }
    wal.close().await;
}

pub async fn rejects_oversized_records(open: &impl Fn(&Path) -> Arc<dyn Wal>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open(dir.path());
    let cap = wal.usage().capacity as usize;
    match append_and_wait(&*wal, record(1, 0, cap)).await {
        Err(e @ WalError::TooLarge { .. }) => assert!(!e.is_retriable()),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    append_and_wait(&*wal, record(1, 0, 10))
        .await
        .expect("still serving");
    wal.close().await;
}
