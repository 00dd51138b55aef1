//! The leader's side of the internal API (keys from [`weir_zone::wire::INTERNAL_KEY_BASE`], on
//! the internal listener only): produces forwarded by brokers of other zones, the offsets feed
//! they serve fetches with, and ListOffsets by time.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::FutureExt;
use kafka_protocol::ResponseError;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use weir_partition::{Lookup, ProduceTicket};
use weir_zone::wire::{
    self, ForwardProduce, ForwardResult, OffsetForTime, OffsetForTimeResult, Offsets,
};

use crate::conn::Conn;
use crate::Broker;

/// How long a poll of the offsets feed holds an answer whose only news is the high watermark.
const HIGH_WATERMARK_DELAY: Duration = Duration::from_millis(100);

/// The answer to an internal request, once it is known; `None`: the request has none.
pub type InternalReply = BoxFuture<'static, Option<BytesMut>>;

fn ready(b: Option<BytesMut>) -> InternalReply {
    futures::future::ready(b).boxed()
}

impl Broker {
    /// Handles one internal request. What must happen in arrival order (a forwarded produce's
    /// appends) happens before this returns; the answer may come later. `Err` closes the
    /// connection: a peer sent something that is not an internal request.
    pub async fn handle_internal(
        self: &Arc<Self>,
        key: i16,
        body: Bytes,
        conn: &Conn,
    ) -> Result<InternalReply, String> {
        match key {
            wire::HELLO_CHALLENGE => {
                let nonce = weir_auth::peer::nonce().map_err(|e| e.to_string())?;
                conn.set_challenge(nonce);
                Ok(ready(Some(BytesMut::from(&nonce[..]))))
            }
            wire::HELLO => {
                let hello = wire::Hello::decode(body).map_err(|e| e.to_string())?;
                if let Some(secret) = &conn.listener.peer_secret {
                    let checked = match conn.take_challenge() {
                        Some(nonce) => weir_auth::peer::verify_challenged(
                            secret,
                            hello.node_id,
                            &hello.zone,
                            &nonce,
                            &hello.proof,
                        ),
                        None if conn.listener.legacy_peer_hello => {
                            let now_ms = std::time::SystemTime::now()
                                .duration_since(std::time::UNIX_EPOCH)
                                .map_or(0, |d| d.as_millis() as i64);
                            weir_auth::peer::verify(
                                secret,
                                hello.node_id,
                                &hello.zone,
                                hello.timestamp_ms,
                                &hello.proof,
                                now_ms,
                            )
                        }
                        None => Err("a hello without a challenge (an earlier version's; \
                                     cluster.legacy_peer_hello accepts it during an upgrade)"
                            .to_string()),
                    };
                    checked.map_err(|e| format!("broker {} not admitted: {e}", hello.node_id))?;
                    conn.set_principal(weir_auth::Principal::user(format!(
                        "broker-{}",
                        hello.node_id
                    )));
                }
                conn.set_peer_zone(&hello.zone);
                Ok(ready(None))
            }
            wire::FORWARD_PRODUCE => {
                let m = ForwardProduce::decode(body).map_err(|e| e.to_string())?;
                Ok(self.forwarded_produce(m, conn))
            }
            wire::WATCH_OFFSETS => {
                let m = wire::WatchOffsets::decode(body).map_err(|e| e.to_string())?;
                Ok(self.watch_offsets(m))
            }
            wire::OFFSET_FOR_TIME => {
                let m = OffsetForTime::decode(body).map_err(|e| e.to_string())?;
                let this = Arc::clone(self);
                Ok(async move { Some(this.offset_for_time(m).await.encode()) }.boxed())
            }
            wire::ABORTED_TXNS => {
                let q = wire::AbortedTxns::decode(body).map_err(|e| e.to_string())?;
                let answer = match self.topics.lookup(&q.topic, q.partition) {
                    // Another epoch's index would not go with the asker's offsets (a leader
                    // that is handing the partition over still has it open).
                    Lookup::Local(p)
                        if p.leader_epoch != q.epoch || !self.cluster.may_acknowledge() =>
                    {
                        wire::encode_aborted(ResponseError::NotLeaderOrFollower.code(), &[])
                    }
                    Lookup::Local(p) => {
                        let list: Vec<(i64, i64)> = p
                            .aborted_between(q.from.max(0) as u64, q.to.max(0) as u64)
                            .iter()
                            .map(|a| (a.producer_id, a.first_offset as i64))
                            .collect();
                        wire::encode_aborted(0, &list)
                    }
                    Lookup::NotHere => {
                        wire::encode_aborted(ResponseError::NotLeaderOrFollower.code(), &[])
                    }
                    Lookup::Unknown => {
                        wire::encode_aborted(ResponseError::UnknownTopicOrPartition.code(), &[])
                    }
                };
                Ok(ready(Some(answer)))
            }
            wire::TXN_MARKERS => {
                let m = wire::TxnMarkers::decode(body).map_err(|e| e.to_string())?;
                let this = Arc::clone(self);
                Ok(
                    async move { Some(wire::encode_codes(&this.write_local_markers(&m).await)) }
                        .boxed(),
                )
            }
            other => Err(format!("unknown internal API key {other}")),
        }
    }

    /// Reads a forwarded produce's span of the hand-off object and starts each entry's append
    /// in order, as if a client had sent it here. The read starts at once, so the reads of
    /// several forwarded produces overlap; the appends start in the order the produces arrived
    /// on the connection (`Conn::forward_tail`), whatever order the reads finish in.
    fn forwarded_produce(self: &Arc<Self>, m: ForwardProduce, conn: &Conn) -> InternalReply {
        let fail_all = |e: ResponseError, n: usize| {
            let results: Vec<_> = (0..n)
                .map(|_| ForwardResult {
                    error: e.code(),
                    base_offset: -1,
                    log_start_offset: -1,
                })
                .collect();
            Some(wire::encode_forward_results(&results))
        };
        let Some(zones) = self.zones.as_ref() else {
            return ready(fail_all(
                ResponseError::NotLeaderOrFollower,
                m.entries.len(),
            ));
        };
        let span = m.span();
        let range = m.position..m.position + span;
        let read = {
            let (store, key) = (Arc::clone(&zones.store), Path::from(m.object_key.as_str()));
            tokio::spawn(async move { store.get_range(&key, range).await })
        };
        let (started, tail) = tokio::sync::oneshot::channel::<()>();
        let previous = conn
            .forward_tail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(tail);
        let this = Arc::clone(self);
        async move {
            let data = read.await;
            if let Some(p) = previous {
                let _ = p.await;
            }
            let data = match data {
                Ok(Ok(d)) if d.len() as u64 == span => d,
                Ok(Ok(d)) => {
                    tracing::warn!(key = %m.object_key, got = d.len(), span, "a hand-off object is shorter than its reference");
                    return fail_all(ResponseError::KafkaStorageError, m.entries.len());
                }
                Ok(Err(e)) => {
                    tracing::warn!(key = %m.object_key, error = %e, "reading a hand-off object failed");
                    return fail_all(ResponseError::KafkaStorageError, m.entries.len());
                }
                Err(e) => {
                    tracing::warn!(key = %m.object_key, error = %e, "reading a hand-off object failed");
                    return fail_all(ResponseError::KafkaStorageError, m.entries.len());
                }
            };
            let may_acknowledge = this.cluster.may_acknowledge();
            let mut at = 0usize;
            let mut tickets: Vec<Result<ProduceTicket, ResponseError>> = Vec::new();
            for e in &m.entries {
                let records = data.slice(at..at + e.len as usize);
                at += e.len as usize;
                this.meters.produce_bytes.add(records.len() as u64);
                tickets.push(match this.topics.lookup(&e.topic, e.partition) {
                    Lookup::Local(_) if !may_acknowledge => {
                        Err(ResponseError::NotLeaderOrFollower)
                    }
                    Lookup::Local(p) => {
                        // A transaction's batches are verified as a client's would be.
                        let check = if e.transactional_id.is_empty() {
                            Ok(weir_partition::TxnCheck::None)
                        } else {
                            this.verify_txn_produce(&e.transactional_id, &p, &records)
                                .await
                        };
                        check.and_then(|c| p.start_produce_checked(&records, c))
                    }
                    Lookup::NotHere => Err(ResponseError::NotLeaderOrFollower),
                    Lookup::Unknown => Err(ResponseError::UnknownTopicOrPartition),
                });
            }
            // The next forwarded produce of this connection may start its appends now.
            drop(started);
            let mut results = Vec::with_capacity(tickets.len());
            for t in tickets {
                let r = match t {
                    Ok(t) => t.wait().await,
                    Err(e) => Err(e),
                };
                results.push(match r {
                    Ok(p) => ForwardResult {
                        error: 0,
                        base_offset: p.base_offset,
                        log_start_offset: p.log_start_offset,
                    },
                    Err(e) => ForwardResult {
                        error: e.code(),
                        base_offset: -1,
                        log_start_offset: -1,
                    },
                });
            }
            Some(wire::encode_forward_results(&results))
        }
        .boxed()
    }

    /// The offsets a broker of another zone serves fetches with.
    fn offsets_of(&self, topic: &str, partition: i32) -> Offsets {
        match self.topics.lookup(topic, partition) {
            Lookup::Local(p) => {
                if let Some(zones) = &self.zones {
                    zones.note_remote_reader(p.stream_id);
                }
                let (start, committed, hw) = p.stream_offsets();
                Offsets {
                    error: 0,
                    epoch: p.leader_epoch,
                    start,
                    committed,
                    high_watermark: hw,
                    last_stable: p.last_stable_offset(),
                    aborted_until: p.aborted_until(),
                }
            }
            Lookup::NotHere => Offsets {
                error: ResponseError::NotLeaderOrFollower.code(),
                ..Offsets::default()
            },
            Lookup::Unknown => Offsets {
                error: ResponseError::UnknownTopicOrPartition.code(),
                ..Offsets::default()
            },
        }
    }

    /// Answers as soon as any partition's offsets differ from what the caller knows, or after
    /// the poll's wait, with the partitions whose offsets differ.
    fn watch_offsets(self: &Arc<Self>, m: wire::WatchOffsets) -> InternalReply {
        let this = Arc::clone(self);
        async move {
            let wait = Duration::from_millis(u64::from(m.max_wait_ms.min(5_000)));
            let deadline = tokio::time::Instant::now() + wait;
            // Receivers first, then the offsets: a change after the look is not missed.
            let mut receivers = Vec::new();
            for (t, p, _) in &m.partitions {
                if let Some(part) = this.topics.partition(t, *p) {
                    receivers.extend(part.watch_high_watermark());
                    receivers.extend(part.watch_committed());
                }
            }
            let started = tokio::time::Instant::now();
            loop {
                let now: Vec<_> = m
                    .partitions
                    .iter()
                    .map(|(t, p, _)| (t.clone(), *p, this.offsets_of(t, *p)))
                    .collect();
                // What the caller can serve (committed data, the start, the epoch, an error)
                // is answered at once; a high watermark that moved alone waits a little, so
                // that a partition on the file WAL, whose high watermark moves with every
                // produce, does not cost an answer each time.
                let significant = now.iter().zip(&m.partitions).any(|((_, _, o), (_, _, k))| {
                    (
                        o.error,
                        o.epoch,
                        o.start,
                        o.committed,
                        o.last_stable,
                        o.aborted_until,
                    ) != (
                        k.error,
                        k.epoch,
                        k.start,
                        k.committed,
                        k.last_stable,
                        k.aborted_until,
                    )
                });
                let watermark = now
                    .iter()
                    .zip(&m.partitions)
                    .any(|((_, _, o), (_, _, k))| o.high_watermark != k.high_watermark);
                let at = tokio::time::Instant::now();
                if significant
                    || (watermark && at >= started + HIGH_WATERMARK_DELAY)
                    || receivers.is_empty()
                    || at >= deadline
                {
                    // Only what changed: the caller keeps what it knows of the others. With the
                    // offsets go the ranges committed since the end the caller knew.
                    let changed: Vec<_> = now
                        .into_iter()
                        .zip(&m.partitions)
                        .filter(|((_, _, o), (_, _, known))| o != known)
                        .map(|((topic, partition, offsets), (_, _, known))| {
                            let ranges = match this.topics.partition(&topic, partition) {
                                Some(p)
                                    if offsets.error == 0
                                        && offsets.committed > known.committed =>
                                {
                                    let from = u64::try_from(known.committed.max(offsets.start))
                                        .unwrap_or(0);
                                    this.topics.ranges_since(p.stream_id, from)
                                }
                                _ => Vec::new(),
                            };
                            wire::Fed {
                                topic,
                                partition,
                                offsets,
                                ranges,
                            }
                        })
                        .collect();
                    return Some(wire::encode_fed(&changed));
                }
                let deadline = if watermark {
                    deadline.min(started + HIGH_WATERMARK_DELAY)
                } else {
                    deadline
                };
                let any = futures::future::select_all(
                    receivers.iter_mut().map(|rx| rx.changed().boxed()),
                );
                // A stream closed (the partition moved): answer with what is there now.
                let closed = matches!(
                    tokio::time::timeout_at(deadline, any).await,
                    Ok((Err(_), _, _))
                );
                if closed {
                    receivers.clear();
                }
            }
        }
        .boxed()
    }

    async fn offset_for_time(&self, m: OffsetForTime) -> OffsetForTimeResult {
        let Some(p) = self.topics.partition(&m.topic, m.partition) else {
            return OffsetForTimeResult {
                error: self.topics.missing_error(&m.topic, m.partition).code(),
                offset: -1,
                timestamp: -1,
                epoch: -1,
            };
        };
        let found = if m.timestamp == -3 {
            p.max_timestamp().await
        } else {
            p.offset_for_timestamp(m.timestamp).await
        };
        match found {
            Ok(Some((offset, timestamp))) => OffsetForTimeResult {
                error: 0,
                offset,
                timestamp,
                epoch: p.leader_epoch,
            },
            Ok(None) => OffsetForTimeResult {
                error: 0,
                offset: -1,
                timestamp: -1,
                epoch: p.leader_epoch,
            },
            Err(e) => OffsetForTimeResult {
                error: e.code(),
                offset: -1,
                timestamp: -1,
                epoch: -1,
            },
        }
    }
}
