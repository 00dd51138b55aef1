//! The produce path when WAL writes fail, on a scripted WAL that holds, completes or fails
//! writes on command: idempotent retries never answer with another batch's offsets, the
//! producer state rewinds with the stream even when the client has gone, and a request's
//! batches for a partition are durable or failed together.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use weir_meta::SqliteMetaStore;
use weir_storage::{Engine, StorageConfig};
use weir_wal::{Completion, RecoveredRecord, Seq, Wal, WalError, WalMeters, WalRecord, WalUsage};

use crate::batch::tests::make_batch;
use crate::batch::{headers, BatchHeader};
use crate::Partition;

type Rule = Box<dyn Fn(&WalRecord) -> bool + Send>;

enum Cmd {
    Append(Seq, WalRecord, Completion),
    Hold(bool),
    /// Completes the oldest held write: Ok, or failed (with every write queued behind it).
    Release(bool),
    FailIf(Option<Rule>),
    /// Answers once every earlier command has been carried out.
    Sync(mpsc::Sender<()>),
}

/// A WAL whose writes complete on a thread of their own, in order, as a real one's do; held
/// while told to, and failed by command or by rule.
struct ScriptedWal {
    tx: std::sync::Mutex<mpsc::Sender<Cmd>>,
    next: AtomicU64,
    meters: WalMeters,
}

fn failed() -> WalError {
    WalError::WriteFailed(Arc::new(std::io::Error::other("injected write failure")))
}

impl ScriptedWal {
    fn new() -> Arc<ScriptedWal> {
        let (tx, rx) = mpsc::channel::<Cmd>();
        std::thread::spawn(move || {
            let mut held: VecDeque<(Seq, WalRecord, Completion)> = VecDeque::new();
            let mut hold = false;
            let mut rule: Option<Rule> = None;
            let fail_all = |held: &mut VecDeque<(Seq, WalRecord, Completion)>| {
                for (_, _, done) in held.drain(..) {
                    done(Err(failed()));
                }
            };
            while let Ok(cmd) = rx.recv() {
                match cmd {
                    Cmd::Append(seq, r, done) => held.push_back((seq, r, done)),
                    Cmd::Hold(h) => hold = h,
                    Cmd::FailIf(r) => rule = r,
                    Cmd::Sync(ack) => {
                        let _ = ack.send(());
                    }
                    Cmd::Release(ok) => {
                        if let Some((seq, _, done)) = held.pop_front() {
                            if ok {
                                done(Ok(seq));
                            } else {
                                done(Err(failed()));
                                fail_all(&mut held);
                            }
                        }
                    }
                }
                if hold {
                    continue;
                }
                while let Some((seq, r, done)) = held.pop_front() {
                    if rule.as_ref().is_some_and(|f| f(&r)) {
                        done(Err(failed()));
                        fail_all(&mut held);
                    } else {
                        done(Ok(seq));
                    }
                }
            }
        });
        Arc::new(ScriptedWal {
            tx: std::sync::Mutex::new(tx),
            next: AtomicU64::new(0),
            meters: WalMeters::default(),
        })
    }

    fn send(&self, cmd: Cmd) {
        let _ = self.tx.lock().unwrap().send(cmd);
    }

    /// Carries out `cmd` and waits until it is done (completions included).
    fn now(&self, cmd: Cmd) {
        self.send(cmd);
        let (tx, rx) = mpsc::channel();
        self.send(Cmd::Sync(tx));
        let _ = rx.recv_timeout(Duration::from_secs(5));
    }
}

#[async_trait::async_trait]
impl Wal for ScriptedWal {
    fn append(&self, record: WalRecord, done: Completion) -> Result<Seq, WalError> {
        let seq = self.next.fetch_add(1, Ordering::SeqCst);
        self.send(Cmd::Append(seq, record, done));
        Ok(seq)
    }
    fn next_seq(&self) -> Seq {
        self.next.load(Ordering::SeqCst)
    }
    async fn trim(&self, _seq: Seq) -> Result<(), WalError> {
        Ok(())
    }
    async fn wait_for_space(&self, timeout: Duration) {
        tokio::time::sleep(timeout.min(Duration::from_millis(10))).await;
    }
    fn take_recovered(&self) -> Vec<RecoveredRecord> {
        Vec::new()
    }
    fn usage(&self) -> WalUsage {
        WalUsage {
            capacity: 1 << 30,
            used: 0,
        }
    }
    fn meters(&self) -> &WalMeters {
        &self.meters
    }
    async fn close(&self) {}
}

struct Setup {
    _dir: tempfile::TempDir,
    wal: Arc<ScriptedWal>,
    partition: Arc<Partition>,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let wal = ScriptedWal::new();
    let meta = Arc::new(SqliteMetaStore::open(&dir.path().join("meta.sqlite")).unwrap());
    let store = weir_storage::objstore::from_url("memory://").unwrap();
    let engine = Engine::open(StorageConfig::default(), wal.clone(), meta.clone(), store)
        .await
        .unwrap();
    let partition = Partition::open(
        engine,
        &*meta,
        "t",
        0,
        1,
        1 << 20,
        weir_storage::WalKind::File,
    )
    .await
    .unwrap();
    Setup {
        _dir: dir,
        wal,
        partition,
    }
}

/// (producer id, base timestamp, base offset) of every batch in the partition.
async fn contents(p: &Partition) -> Vec<(i64, i64, i64)> {
    let data = p.fetch(0, 1 << 20, false).await.unwrap();
    headers(&data.records)
        .map(|(h, _, _): (BatchHeader, u64, u64)| (h.producer_id, h.base_timestamp, h.base_offset))
        .collect()
}

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    within_secs(5, f).await
}

async fn within_secs<T>(secs: u64, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .unwrap_or_else(|_| panic!("did not finish within {secs} s"))
}

#[tokio::test]
async fn a_retry_waits_for_its_original_and_fails_with_it() {
    let s = setup().await;
    let p = &s.partition;
    let a = make_batch(1, 1000, 7, 0, 0);
    s.wal.send(Cmd::Hold(true));
    let original = tokio::spawn(p.start_produce(&a).unwrap().wait());
    let retry = tokio::spawn(p.start_produce(&a).unwrap().wait());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !retry.is_finished(),
        "a retry must not answer before its original is durable"
    );
    s.wal.now(Cmd::Release(false));
    assert_eq!(
        within(original).await.unwrap(),
        Err(ResponseError::KafkaStorageError)
    );
    // Another producer's batch now takes offset 0, where the failed batch was.
    s.wal.now(Cmd::Hold(false));
    let other = within(p.produce(&make_batch(1, 2000, 8, 0, 0)))
        .await
        .unwrap();
    assert_eq!(other.base_offset, 0);
    let retried = within(retry).await.unwrap();
    assert!(
        retried.is_err(),
        "the retry of a failed batch was acknowledged with offset {:?}, which holds another producer's batch",
        retried.map(|r| r.base_offset)
    );
    // The next retry is appended anew, once.
    let again = within(p.produce(&a)).await.unwrap();
    assert_eq!(again.base_offset, 1);
    assert_eq!(contents(p).await, vec![(8, 2000, 0), (7, 1000, 1)]);
}

/// librdkafka takes a later batch's success as proof that every earlier batch of the producer
/// was written (`rd_kafka_dr_implicit_ack`). So after a failed append, a pipelined batch that
/// follows it in sequence must be refused until the failed one is retried: accepting it over
/// the gap has the client report the failed batch delivered, and its records are lost. (Seen in
/// CI: three acknowledged records missing after injected WAL errors.)
#[tokio::test]
async fn a_batch_behind_a_failed_one_is_refused_until_the_failed_one_is_retried() {
    let s = setup().await;
    let p = &s.partition;
    // The producer's first batch on this partition, and one pipelined behind it.
    let first = make_batch(3, 1000, 7, 0, 0);
    let second = make_batch(2, 2000, 7, 0, 3);
    s.wal.send(Cmd::Hold(true));
    let failed = tokio::spawn(p.start_produce(&first).unwrap().wait());
    s.wal.now(Cmd::Release(false));
    assert_eq!(
        within(failed).await.unwrap(),
        Err(ResponseError::KafkaStorageError)
    );
    s.wal.now(Cmd::Hold(false));
    // The second request was on the wire when the first failed: it arrives now.
    let early = p.start_produce(&second).map(|_| ());
    assert_eq!(
        early.err(),
        Some(ResponseError::OutOfOrderSequenceNumber),
        "a batch that skips the failed batch's sequences must be refused"
    );
    // The client retries in order; both land once, in sequence.
    assert_eq!(within(p.produce(&first)).await.unwrap().base_offset, 0);
    assert_eq!(within(p.produce(&second)).await.unwrap().base_offset, 3);
    assert_eq!(contents(p).await, vec![(7, 1000, 0), (7, 2000, 3)]);
}

/// The same with a producer the partition knew before: five batches in flight, the window
/// Kafka keeps, all failed by one WAL error, leave no batch to check the next sequence against.
#[tokio::test]
async fn a_rewind_of_every_kept_batch_still_holds_the_producers_sequence() {
    let s = setup().await;
    let p = &s.partition;
    within(p.produce(&make_batch(1, 500, 7, 0, 0)))
        .await
        .unwrap();
    s.wal.send(Cmd::Hold(true));
    let in_flight: Vec<_> = (1..=5)
        .map(|seq| {
            tokio::spawn(
                p.start_produce(&make_batch(1, 1000 + i64::from(seq), 7, 0, seq))
                    .unwrap()
                    .wait(),
            )
        })
        .collect();
    s.wal.now(Cmd::Release(false));
    for r in futures_join(in_flight).await {
        assert_eq!(r, Err(ResponseError::KafkaStorageError));
    }
    s.wal.now(Cmd::Hold(false));
    assert_eq!(
        p.start_produce(&make_batch(1, 2000, 7, 0, 6))
            .map(|_| ())
            .err(),
        Some(ResponseError::OutOfOrderSequenceNumber),
        "sequence 6 skips the failed 1..=5"
    );
    assert_eq!(
        within(p.produce(&make_batch(1, 1001, 7, 0, 1)))
            .await
            .unwrap()
            .base_offset,
        1
    );
}

#[tokio::test]
async fn a_failed_append_rolls_back_even_when_its_client_is_gone() {
    let s = setup().await;
    let p = &s.partition;
    let a = make_batch(1, 1000, 7, 0, 0);
    s.wal.send(Cmd::Hold(true));
    drop(p.start_produce(&a).unwrap()); // the client disconnected: nobody waits for it
    s.wal.now(Cmd::Release(false));
    s.wal.now(Cmd::Hold(false));
    let retried = within(p.produce(&a))
        .await
        .expect("the retry must be appended, not taken for a duplicate of the failed batch");
    assert_eq!(retried.base_offset, 0);
    assert_eq!(contents(p).await, vec![(7, 1000, 0)]);
}

#[tokio::test]
async fn a_requests_batches_are_durable_or_failed_together() {
    let s = setup().await;
    let p = &s.partition;
    let first = make_batch(2, 1000, -1, -1, -1);
    let second = make_batch(3, 777_777, -1, -1, -1);
    let request = Bytes::from([&first[..], &second[..]].concat());
    // Every write that holds the second batch fails.
    s.wal.send(Cmd::FailIf(Some(Box::new(|r: &WalRecord| {
        headers(&r.payload).any(|(h, _, _)| h.base_timestamp == 777_777)
    }))));
    assert_eq!(
        within(p.produce(&request)).await,
        Err(ResponseError::KafkaStorageError)
    );
    assert_eq!(
        p.offsets().1,
        0,
        "a failed request must leave none of its batches behind"
    );
    s.wal.send(Cmd::FailIf(None));
    // A non-idempotent producer retries the whole request: each batch must be there once.
    let retried = within(p.produce(&request)).await.unwrap();
    assert_eq!(retried.base_offset, 0);
    assert_eq!(contents(p).await, vec![(-1, 1000, 0), (-1, 777_777, 2)]);
}

/// Idempotent producers with five requests in flight, on the real file WAL with write and sync
/// errors injected: each failure fails the appends in it and behind it, the partition and the
/// producer state rewind, and the producers resend from their first unacknowledged batch, as
/// librdkafka and the Java client do. Every batch ends up in the partition exactly once, in
/// sequence order, at the offset it was acknowledged at.
#[tokio::test]
async fn idempotent_producers_retrying_through_wal_errors_land_exactly_once_in_order() {
    use weir_wal::{FileWal, FileWalConfig, WalFaults};
    const BATCHES: usize = 150;
    const IN_FLIGHT: usize = 5;

    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(
        FileWal::open(FileWalConfig {
            capacity: 16 << 20,
            faults: WalFaults {
                write_error_rate: 0.05,
                sync_error_rate: 0.05,
                latency: Duration::ZERO,
                seed: 42,
            },
            ..FileWalConfig::new(dir.path().join("wal"))
        })
        .unwrap(),
    );
    let meta = Arc::new(SqliteMetaStore::open(&dir.path().join("meta.sqlite")).unwrap());
    let store = weir_storage::objstore::from_url("memory://").unwrap();
    let engine = Engine::open(StorageConfig::default(), wal.clone(), meta.clone(), store)
        .await
        .unwrap();
    let partition = Partition::open(
        engine,
        &*meta,
        "t",
        0,
        1,
        1 << 20,
        weir_storage::WalKind::File,
    )
    .await
    .unwrap();

    let producer = |pid: i64| {
        let p = Arc::clone(&partition);
        tokio::spawn(async move {
            let mut acked: Vec<Option<i64>> = vec![None; BATCHES];
            let mut next = 0usize;
            let mut inflight = VecDeque::new();
            let mut errors = 0;
            loop {
                while inflight.len() < IN_FLIGHT && next < BATCHES {
                    let b = make_batch(1, 1000 + next as i64, pid, 0, next as i32);
                    let t = p.start_produce(&b);
                    inflight.push_back((
                        next,
                        tokio::spawn(async move {
                            match t {
                                Ok(t) => t.wait().await,
                                Err(e) => Err(e),
                            }
                        }),
                    ));
                    next += 1;
                }
                let Some((seq, h)) = inflight.pop_front() else {
                    break;
                };
                match h.await.unwrap() {
                    Ok(r) => {
                        assert!(acked[seq].is_none(), "P{pid}-{seq} acknowledged twice");
                        acked[seq] = Some(r.base_offset);
                    }
                    Err(_) => {
                        // Drain what is in flight, then resend from the first batch not
                        // acknowledged.
                        errors += 1;
                        for (s, h) in inflight.drain(..) {
                            if let Ok(r) = h.await.unwrap() {
                                acked[s] = Some(r.base_offset);
                            }
                        }
                        next = acked.iter().position(Option::is_none).unwrap_or(BATCHES);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
            }
            (pid, acked, errors)
        })
    };
    let results = within_secs(
        60,
        futures_join(vec![producer(1), producer(2), producer(3)]),
    )
    .await;
    assert!(
        wal.meters().write_errors.get() > 0,
        "the fault switch injected no WAL error"
    );
    let data = {
        let mut out = Vec::new();
        let mut from = 0;
        loop {
            let d = partition.fetch(from, 1 << 20, false).await.unwrap();
            let hs: Vec<_> = headers(&d.records).collect();
            if hs.is_empty() {
                break;
            }
            from = hs.last().unwrap().2 as i64;
            out.extend(hs);
            if from >= d.high_watermark {
                break;
            }
        }
        out
    };
    let mut errors = 0;
    for (pid, acked, e) in results {
        errors += e;
        let mine: Vec<(i32, i64)> = data
            .iter()
            .filter(|(h, _, _)| h.producer_id == pid)
            .map(|(h, base, _)| (h.base_sequence, *base as i64))
            .collect();
        let want: Vec<(i32, i64)> = acked
            .iter()
            .enumerate()
            .map(|(seq, o)| (seq as i32, o.expect("every batch acknowledged in the end")))
            .collect();
        assert_eq!(
            mine, want,
            "producer {pid}: exactly once, in order, at the acked offsets"
        );
    }
    assert!(errors > 0, "no producer saw an error");
}

async fn futures_join<T>(hs: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for h in hs {
        out.push(h.await.unwrap());
    }
    out
}

/// Idle idempotent producers are forgotten (`producer.id.expiration.ms`), so the state a
/// partition keeps is bounded by the producers active within that time, not by every producer
/// that ever wrote.
#[tokio::test]
async fn idle_producers_expire_from_the_partition() {
    let s = setup().await;
    let p = &s.partition;
    for pid in 0..50 {
        within(p.produce(&make_batch(1, 1000, 100 + pid, 0, 0)))
            .await
            .unwrap();
    }
    assert_eq!(p.producer_count(), 50);
    assert_eq!(p.expire_producers(86_400_000), 0, "none idle for a day");
    assert_eq!(p.expire_producers(0), 50, "all idle for 0 ms");
    assert_eq!(p.producer_count(), 0);
    // A forgotten producer is unknown again: its next batch is accepted at any sequence.
    let r = within(p.produce(&make_batch(1, 1000, 100, 0, 7)))
        .await
        .unwrap();
    assert_eq!(r.base_offset, 50);
}
