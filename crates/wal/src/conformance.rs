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

/// Runs every check, each in a fresh directory. (Kinds that can inject write failures also run
/// [`failed_writes_leave_no_trace`].)
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

/// One stream written the way the storage engine writes it, for
/// [`failed_writes_leave_no_trace`]: offsets are assigned under its lock as records are
/// appended, and a failed completion rewinds it to its last durable offset.
#[derive(Default)]
struct Stream {
    next: u64,
    /// Durable appends in offset order, with their sequence numbers.
    durable: Vec<(Seq, WalRecord)>,
    failures: u64,
    attempts: u64,
}

/// The contract of failed writes, for a WAL that `open` makes fail some of its writes (write
/// and sync errors). One stream is written in waves of pipelined appends, rewinding when a write
/// fails (see [`Stream`]); each attempt's payload is distinct, so recovery can tell a durable
/// append from a failed attempt at the same offset.
///
/// Every durable completion continues the stream exactly where the last durable one ended (a
/// failure fails every record queued behind it). After reopening, recovery returns exactly the
/// appends whose completion said Ok, in order, with no hole: a failed append is absent, or
/// replaced by the later append at its offset. Trims along the way keep the check to what was
/// not trimmed.
pub async fn failed_writes_leave_no_trace(open: &impl Fn(&Path) -> Arc<dyn Wal>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open(dir.path());
    let stream = Arc::new(Mutex::new(Stream::default()));
    let mut waves = 0u64;
    loop {
        if stream.lock().expect("lock").durable.len() >= 400 {
            break;
        }
        waves += 1;
        assert!(waves < 10_000, "no progress: every write fails");
        let mut waiting = Vec::new();
        for _ in 0..8 {
            let mut st = stream.lock().expect("lock");
            st.attempts += 1;
            let attempt = st.attempts;
            let mut payload = attempt.to_le_bytes().to_vec();
            payload.resize(
                100 + (attempt as usize * 7919) % 6000,
                (attempt % 251) as u8,
            );
            let r = WalRecord {
                stream_id: 1,
                epoch: 1,
                base_offset: st.next,
                record_count: 1,
                max_timestamp: attempt as i64,
                payload: Bytes::from(payload),
            };
            let (tx, rx) = tokio::sync::oneshot::channel();
            let completed = Arc::clone(&stream);
            let record = r.clone();
            let appended = wal.append(
                r,
                Box::new(move |res| {
                    let mut st = completed.lock().expect("lock");
                    match &res {
                        Ok(seq) => {
                            assert_eq!(
                                record.base_offset,
                                st.durable.len() as u64,
                                "a durable append must continue the stream where the last one ended"
                            );
                            st.durable.push((*seq, record));
                        }
                        Err(WalError::WriteFailed(_)) => {
                            st.failures += 1;
                            st.next = st.durable.len() as u64;
                        }
                        Err(e) => panic!("unexpected completion error {e}"),
                    }
                    let _ = tx.send(());
                }),
            );
            match appended {
                Ok(_) => {
                    st.next += 1;
                    waiting.push(rx);
                }
                // Refused while the WAL delivers an earlier failure: the stream will rewind; the
                // rest of the wave is not sent.
                Err(WalError::Resetting) => break,
                Err(e) => panic!("append refused: {e}"),
            }
        }
        for rx in waiting {
            rx.await.expect("completion ran");
        }
        let cut = {
            let st = stream.lock().expect("lock");
            let n = st.durable.len();
            (n > 20 && waves.is_multiple_of(7)).then(|| st.durable[n - 20].0)
        };
        if let Some(cut) = cut {
            // Trim all but the last 20 durable appends.
            wal.trim(cut).await.expect("trim");
        }
    }
    let (want, failures) = {
        let st = stream.lock().expect("lock");
        assert!(
            st.durable.windows(2).all(|w| w[0].0 < w[1].0),
            "durable appends have increasing sequence numbers"
        );
        let want: Vec<WalRecord> = st.durable.iter().map(|(_, r)| r.clone()).collect();
        (want, st.failures)
    };
    assert!(failures > 0, "the WAL under test never failed a write");
    let wal = reopen(wal, open, dir.path()).await;
    let recovered: Vec<WalRecord> = wal.take_recovered().into_iter().map(|r| r.record).collect();
    assert!(
        recovered.len() >= 20 && want.ends_with(&recovered),
        "recovered {} records, not a suffix of the {} durable ones (first recovered offset {:?})",
        recovered.len(),
        want.len(),
        recovered.first().map(|r| r.base_offset)
    );
    wal.close().await;
}
