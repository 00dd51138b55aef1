//! Produce through a broker in the client's zone: the bytes go to object storage, the leader
//! gets a reference.
//!
//! A produce's partitions led in another zone are handed to the [`Forwarder`] in request order.
//! It collects them from every connection into one *hand-off object* (sealed after `linger` or
//! at `max_bytes`), laid out leader by leader, PUTs it, and sends each leader a
//! [`ForwardProduce`] naming its span of the object. The leader reads its span (one ranged GET,
//! inside the region: no cross-zone charge) and appends every entry in order through its own
//! produce path, so it stays the only sequencer: offsets, epochs and idempotent producers work
//! as for its own clients. The acknowledgement comes back through this broker.
//!
//! Order: entries are laid out in submission order per leader, objects are sent in the order
//! they were sealed (each waits for the previous one to be *sent*, not answered), one connection
//! per leader carries them, and the leader starts each message's appends before it reads the
//! next. So a client connection's batches for a partition reach the leader in the order the
//! client sent them, as if it had sent them there itself.
//!
//! Once every leader has answered, the object is deleted: the leader's own WAL holds the data
//! from then on. Objects of a broker that died before deleting them are deleted when it starts
//! again ([`Forwarder::sweep`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tokio::sync::{oneshot, Notify, Semaphore};
use weir_metrics::{Counter, Histogram};

use crate::peer::{Channel, Peer, Peers};
use crate::wire::{self, ForwardEntry, ForwardProduce, ForwardResult};

/// Kafka's NOT_LEADER_OR_FOLLOWER: the leader could not be reached or no longer leads.
pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
/// Kafka's REQUEST_TIMED_OUT.
pub const REQUEST_TIMED_OUT: i16 = 7;
/// Kafka's KAFKA_STORAGE_ERROR: the hand-off object could not be written.
pub const KAFKA_STORAGE_ERROR: i16 = 56;

/// How long the leader has to answer a forwarded produce.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// PUT attempts for a hand-off object.
const PUT_ATTEMPTS: u32 = 3;

#[derive(Debug, Clone)]
pub struct HandoffConfig {
    /// How long the first entry of an object waits for others.
    pub linger: Duration,
    /// An object is sealed once it holds this many bytes.
    pub max_bytes: usize,
    /// Objects being written or waiting for their leaders at once.
    pub max_in_flight: usize,
    /// At most this many objects a second that are not full (0: no bound). A PUT costs the
    /// same whatever it holds, so at low rates a 5 ms linger writes hundreds of tiny objects a
    /// second; the bound lengthens the linger until the rate fits. Full objects (`max_bytes`)
    /// are never held back, so throughput is not bounded.
    pub max_puts_per_sec: f64,
}

impl Default for HandoffConfig {
    fn default() -> Self {
        HandoffConfig {
            linger: Duration::from_millis(5),
            max_bytes: 4 << 20,
            max_in_flight: 16,
            max_puts_per_sec: 20.0,
        }
    }
}

#[derive(Debug, Default)]
pub struct HandoffMeters {
    pub objects: Counter,
    pub bytes: Counter,
    pub entries: Counter,
    /// Entries that failed (a PUT, an unreachable leader, a timeout).
    pub failures: Counter,
    /// From sealing an object to the last leader's answer.
    pub latency: Histogram,
}

impl HandoffMeters {
    /// Declares the hand-off forwarder's meters.
    pub fn register(&self, r: &mut weir_metrics::Registry) {
        r.counter(
            "handoff_objects",
            "Hand-off objects written (produce forwarded to another zone's leader).",
            &self.objects,
        );
        r.counter(
            "handoff_bytes",
            "Record bytes written in hand-off objects.",
            &self.bytes,
        );
        r.counter(
            "handoff_entries",
            "Partitions' produces forwarded through hand-off objects.",
            &self.entries,
        );
        r.counter(
            "handoff_failures",
            "Forwarded produces that failed (a PUT, an unreachable leader, a timeout).",
            &self.failures,
        );
        r.histogram(
            "handoff",
            "From sealing a hand-off object to its leaders' answers.",
            &self.latency,
        );
    }
}

/// The leader an entry goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub node_id: i32,
    pub internal_addr: String,
    pub zone: String,
}

/// What a forwarded entry comes to: the leader's result, or a Kafka error code.
pub type Outcome = Result<ForwardResult, i16>;

struct Entry {
    leader: Leader,
    topic: String,
    partition: i32,
    records: Bytes,
    transactional_id: String,
    reply: oneshot::Sender<Outcome>,
}

#[derive(Default)]
struct Collecting {
    entries: Vec<Entry>,
    bytes: usize,
    since: Option<Instant>,
}

pub struct Forwarder {
    node_id: i32,
    store: Arc<dyn ObjectStore>,
    peers: Arc<Peers>,
    config: HandoffConfig,
    collecting: Mutex<Collecting>,
    wake: Notify,
    slots: Arc<Semaphore>,
    /// Resolves once the last sealed object's messages are sent.
    tail: Mutex<Option<oneshot::Receiver<()>>>,
    /// When the last object was sealed, for `max_puts_per_sec`.
    last_seal: Mutex<Option<Instant>>,
    pub meters: HandoffMeters,
}

fn prefix(node_id: i32) -> String {
    format!("handoff/{node_id}")
}

impl Forwarder {
    /// Starts the forwarder's task, which runs until the returned forwarder is dropped.
    pub fn start(
        node_id: i32,
        store: Arc<dyn ObjectStore>,
        peers: Arc<Peers>,
        config: HandoffConfig,
    ) -> Arc<Forwarder> {
        let f = Arc::new(Forwarder {
            node_id,
            store,
            peers,
            slots: Arc::new(Semaphore::new(config.max_in_flight.max(1))),
            config,
            collecting: Mutex::new(Collecting::default()),
            wake: Notify::new(),
            tail: Mutex::new(None),
            last_seal: Mutex::new(None),
            meters: HandoffMeters::default(),
        });
        let weak = Arc::downgrade(&f);
        tokio::spawn(async move {
            while let Some(f) = weak.upgrade() {
                f.seal_next().await;
            }
        });
        f
    }

    /// Deletes the hand-off objects a previous run of this broker left behind (it died before
    /// its leaders answered; clients retried what was not acknowledged).
    pub async fn sweep(&self) -> usize {
        let prefix = Path::from(prefix(self.node_id));
        let keys: Vec<Path> = self
            .store
            .list(Some(&prefix))
            .filter_map(|m| async move { m.ok().map(|m| m.location) })
            .collect()
            .await;
        let mut deleted = 0;
        for k in keys {
            if self.store.delete(&k).await.is_ok() {
                deleted += 1;
            }
        }
        deleted
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Collecting> {
        self.collecting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands one partition's records to `leader`; calls made in order reach the leader in
    /// order. Resolves with the leader's answer.
    pub fn submit(
        &self,
        leader: Leader,
        topic: &str,
        partition: i32,
        records: Bytes,
    ) -> oneshot::Receiver<Outcome> {
        self.submit_transactional(leader, topic, partition, records, "")
    }

    /// [`Forwarder::submit`] for a produce request with a transactional id ("" for none).
    pub fn submit_transactional(
        &self,
        leader: Leader,
        topic: &str,
        partition: i32,
        records: Bytes,
        transactional_id: &str,
    ) -> oneshot::Receiver<Outcome> {
        let (reply, outcome) = oneshot::channel();
        let (first, full) = {
            let mut c = self.lock();
            c.bytes += records.len();
            c.entries.push(Entry {
                leader,
                topic: topic.to_string(),
                partition,
                records,
                transactional_id: transactional_id.to_string(),
                reply,
            });
            let first = c.since.is_none();
            if first {
                c.since = Some(Instant::now());
            }
            (first, c.bytes >= self.config.max_bytes)
        };
        if first || full {
            self.wake.notify_one();
        }
        outcome
    }

    /// Waits for an object to fill or linger out, then ships it.
    async fn seal_next(self: &Arc<Self>) {
        let since = loop {
            let notified = self.wake.notified();
            if let Some(since) = self.lock().since {
                break since;
            }
            notified.await;
        };
        let mut deadline = since + self.config.linger;
        if self.config.max_puts_per_sec > 0.0 {
            let last = *self.last_seal.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(last) = last {
                let gap = Duration::from_secs_f64(1.0 / self.config.max_puts_per_sec);
                deadline = deadline.max(last + gap);
            }
        }
        loop {
            if self.lock().bytes >= self.config.max_bytes || Instant::now() >= deadline {
                break;
            }
            let notified = self.wake.notified();
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(deadline.into()) => break,
            }
        }
        let Ok(slot) = Arc::clone(&self.slots).acquire_owned().await else {
            return;
        };
        let batch = std::mem::take(&mut *self.lock());
        if batch.entries.is_empty() {
            return;
        }
        *self.last_seal.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let (sent_tx, sent_rx) = oneshot::channel();
        let previous = self
            .tail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(sent_rx);
        let this = Arc::clone(self);
        tokio::spawn(async move {
            this.ship(batch.entries, previous, sent_tx).await;
            drop(slot);
        });
    }

    /// Writes one object, sends its references in turn, and hands each entry its answer.
    async fn ship(
        &self,
        mut entries: Vec<Entry>,
        previous: Option<oneshot::Receiver<()>>,
        sent: oneshot::Sender<()>,
    ) {
        let started = Instant::now();
        // Leader by leader, each leader's entries in submission order: one span per leader.
        entries.sort_by_key(|e| e.leader.node_id);
        let total: usize = entries.iter().map(|e| e.records.len()).sum();
        let mut body = BytesMut::with_capacity(total);
        for e in &entries {
            body.extend_from_slice(&e.records);
        }
        let key = format!("{}/{}", prefix(self.node_id), uuid::Uuid::new_v4().simple());
        let path = Path::from(key.as_str());
        let body = body.freeze();
        let mut put = Err(String::new());
        for attempt in 1..=PUT_ATTEMPTS {
            put = self
                .store
                .put(&path, PutPayload::from(body.clone()))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string());
            if put.is_ok() {
                break;
            }
            tracing::debug!(attempt, error = ?put, "writing a hand-off object failed");
        }
        // The next object's messages go after this one's, even if this one failed.
        if let Some(p) = previous {
            let _ = p.await;
        }
        if let Err(e) = put {
            let _ = sent.send(());
            tracing::warn!(error = %e, entries = entries.len(), "writing a hand-off object failed; its produces fail (retriable)");
            self.meters.failures.add(entries.len() as u64);
            for e in entries {
                let _ = e.reply.send(Err(KAFKA_STORAGE_ERROR));
            }
            return;
        }
        self.meters.objects.inc();
        self.meters.bytes.add(total as u64);
        self.meters.entries.add(entries.len() as u64);
        // One message per leader, sent now and in this order.
        let mut position = 0u64;
        let mut calls = Vec::new();
        let mut rest = entries.into_iter().peekable();
        while let Some(first) = rest.next() {
            let leader = first.leader.clone();
            let mut group = vec![first];
            while rest
                .peek()
                .is_some_and(|e| e.leader.node_id == leader.node_id)
            {
                group.extend(rest.next());
            }
            let message = ForwardProduce {
                object_key: key.clone(),
                position,
                entries: group
                    .iter()
                    .map(|e| ForwardEntry {
                        topic: e.topic.clone(),
                        partition: e.partition,
                        len: e.records.len() as u32,
                        transactional_id: e.transactional_id.clone(),
                    })
                    .collect(),
            };
            position += message.span();
            let answer = self.peers.send(
                Peer {
                    node_id: leader.node_id,
                    internal_addr: &leader.internal_addr,
                    zone: &leader.zone,
                },
                Channel::Forward,
                wire::FORWARD_PRODUCE,
                message.encode(),
            );
            calls.push((group, answer));
        }
        let _ = sent.send(());
        let answers =
            futures::future::join_all(calls.into_iter().map(|(group, answer)| async move {
                let outcome = match tokio::time::timeout(ANSWER_TIMEOUT, answer).await {
                    Ok(Ok(body)) => match wire::decode_forward_results(body) {
                        Ok(r) if r.len() == group.len() => Ok(r),
                        Ok(_) | Err(_) => Err(NOT_LEADER_OR_FOLLOWER),
                    },
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "forwarding a produce failed");
                        Err(NOT_LEADER_OR_FOLLOWER)
                    }
                    Err(_) => Err(REQUEST_TIMED_OUT),
                };
                (group, outcome)
            }))
            .await;
        for (group, outcome) in answers {
            match outcome {
                Ok(results) => {
                    for (e, r) in group.into_iter().zip(results) {
                        if r.error != 0 {
                            self.meters.failures.inc();
                        }
                        let _ = e.reply.send(Ok(r));
                    }
                }
                Err(code) => {
                    self.meters.failures.add(group.len() as u64);
                    for e in group {
                        let _ = e.reply.send(Err(code));
                    }
                }
            }
        }
        self.meters.latency.record(started.elapsed());
        if let Err(e) = self.store.delete(&path).await {
            tracing::debug!(key, error = %e, "deleting a hand-off object failed");
        }
    }
}
