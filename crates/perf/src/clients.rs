//! The Kafka clients: producer and consumer worker threads on librdkafka, and topic admin.
//!
//! A producer is a librdkafka `ThreadedProducer` (its own thread serves delivery reports) fed
//! by one sending thread that paces records to the target rate. Every record's value starts
//! with its send time (microseconds since the Unix epoch, little endian), which consumers use
//! for the end-to-end latency; the rest is random bytes, so compression, if configured, has
//! nothing to gain. A consumer is a `BaseConsumer` polled by its own thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use crate::stats::{ConsumerStats, ProducerStats};

/// Size of the timestamp at the start of every record value.
pub const TIMESTAMP_BYTES: usize = 8;

/// Wall-clock microseconds since the Unix epoch.
pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Client-level errors (connection failures and the like), shared by all clients of a run:
/// counted, and the first few of each kind printed.
#[derive(Default)]
pub struct ClientErrors {
    pub count: AtomicU64,
    seen: Mutex<HashMap<String, u64>>,
}

impl ClientErrors {
    fn report(&self, who: &str, error: &KafkaError, reason: &str) {
        self.count.fetch_add(1, Ordering::Relaxed);
        let key = format!("{who}: {error}");
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let n = seen.entry(key).or_insert(0);
        *n += 1;
        if *n <= 3 {
            eprintln!("weir perf: {who} error: {error}: {reason}");
        } else if *n == 4 {
            eprintln!("weir perf: {who} error: {error}: (repeats; not printed again)");
        }
    }
}

// ---------------------------------------------------------------- admin

fn base_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    c
}

fn block_on<F: std::future::Future>(f: F) -> anyhow::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a runtime for admin requests")?;
    Ok(rt.block_on(f))
}

/// Creates the topics (an existing one is used as it is, if its partition count matches) and
/// waits until metadata shows a leader for every partition.
pub fn create_topics(
    bootstrap: &str,
    names: &[String],
    partitions: i32,
    replication: i32,
) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = base_config(bootstrap)
        .create()
        .context("creating the admin client")?;
    let new: Vec<NewTopic> = names
        .iter()
        .map(|n| NewTopic::new(n, partitions, TopicReplication::Fixed(replication)))
        .collect();
    let opts = AdminOptions::new()
        .operation_timeout(Some(Duration::from_secs(30)))
        .request_timeout(Some(Duration::from_secs(30)));
    let results = block_on(admin.create_topics(&new, &opts))?
        .with_context(|| format!("CreateTopics to {bootstrap}"))?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => bail!("creating topic {name}: {code}"),
        }
    }
    wait_for_leaders(&admin, names, partitions)
}

fn wait_for_leaders(
    admin: &AdminClient<DefaultClientContext>,
    names: &[String],
    partitions: i32,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    for name in names {
        loop {
            let why = match admin
                .inner()
                .fetch_metadata(Some(name), Duration::from_secs(10))
            {
                Ok(md) => match md.topics().iter().find(|t| t.name() == name) {
                    None => "not in metadata".to_string(),
                    Some(t) if t.error().is_some() => format!("{:?}", t.error()),
                    Some(t) if t.partitions().len() as i32 != partitions => {
                        bail!(
                            "topic {name} exists with {} partitions, not {partitions}",
                            t.partitions().len()
                        )
                    }
                    Some(t) if t.partitions().iter().any(|p| p.leader() < 0) => {
                        "partitions without leader".to_string()
                    }
                    Some(_) => break,
                },
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                bail!("topic {name} not ready after 60 s: {why}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

pub fn delete_topics(bootstrap: &str, names: &[String]) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = base_config(bootstrap)
        .create()
        .context("creating the admin client")?;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = block_on(admin.delete_topics(&refs, &opts))?
        .with_context(|| format!("DeleteTopics to {bootstrap}"))?;
    for r in results {
        if let Err((name, code)) = r {
            bail!("deleting topic {name}: {code}");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- producer

struct ProducerCtx {
    stats: Arc<ProducerStats>,
    errors: Arc<ClientErrors>,
    epoch: Instant,
}

impl ClientContext for ProducerCtx {
    fn error(&self, error: KafkaError, reason: &str) {
        self.errors.report("producer", &error, reason);
    }
    fn log(&self, _: rdkafka::config::RDKafkaLogLevel, _: &str, _: &str) {}
}

impl ProducerContext for ProducerCtx {
    /// Send time, nanoseconds since `epoch`.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, sent_at: usize) {
        let now = self.epoch.elapsed().as_nanos() as u64;
        match result {
            Ok(m) => {
                self.stats.acked.fetch_add(1, Ordering::Relaxed);
                self.stats.acked_partitions.insert(m.partition());
                let len = m.payload().map_or(0, <[u8]>::len) as u64;
                self.stats.acked_bytes.fetch_add(len, Ordering::Relaxed);
                self.stats
                    .latency
                    .record_us(now.saturating_sub(sent_at as u64) / 1000);
            }
            Err((e, _)) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                self.errors.report("delivery", e, "record not acknowledged");
            }
        }
    }
}

/// What a producer thread needs.
pub struct ProducerSpec {
    pub bootstrap: String,
    pub topic: String,
    pub record_size: usize,
    /// Records/s of this producer; `None` is as fast as possible.
    pub rate: Option<f64>,
    pub config: Vec<(String, String)>,
    pub client_id: String,
    pub seed: u64,
    /// Values framed with this schema id (see `PerfArgs::schema_id`).
    pub schema_id: Option<u32>,
    /// Every value is these bytes (repeated or cut to `record_size`) but for the timestamp
    /// (`PerfArgs::payload`); random windows when `None`.
    pub payload: Option<Arc<Vec<u8>>>,
}

/// The bytes before the send timestamp in a value framed with a schema id: magic, id.
pub const SCHEMA_PREFIX_BYTES: usize = 5;

/// A framed value's header for `record_size` bytes in all: magic 0, the id, and after the
/// 8-byte timestamp the Avro length of the bytes that follow (zigzag varint): (prefix, length
/// bytes).
fn schema_frame(id: u32, record_size: usize) -> (Vec<u8>, Vec<u8>) {
    let mut prefix = vec![0u8];
    prefix.extend_from_slice(&id.to_be_bytes());
    let fixed = SCHEMA_PREFIX_BYTES + TIMESTAMP_BYTES;
    for vlen in 1..=10 {
        let data = record_size.saturating_sub(fixed + vlen) as u64;
        let mut z = data << 1;
        let mut len = Vec::new();
        loop {
            let b = (z & 0x7f) as u8;
            z >>= 7;
            if z == 0 {
                len.push(b);
                break;
            }
            len.push(b | 0x80);
        }
        if len.len() == vlen {
            return (prefix, len);
        }
    }
    (prefix, vec![0])
}

pub struct ProducerHandle {
    pub stats: Arc<ProducerStats>,
    thread: JoinHandle<()>,
}

impl ProducerHandle {
    pub fn join(self) {
        let _ = self.thread.join();
    }
}

/// Creates the producer client (so configuration errors surface here), then starts its sending
/// thread, which waits for `go` and sends until `stop`.
pub fn start_producer(
    spec: ProducerSpec,
    epoch: Instant,
    errors: Arc<ClientErrors>,
    go: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<ProducerHandle> {
    let stats = Arc::new(ProducerStats::default());
    let mut cfg = base_config(&spec.bootstrap);
    cfg.set("client.id", &spec.client_id)
        .set("acks", "all")
        .set("linger.ms", "1");
    for (k, v) in &spec.config {
        cfg.set(k, v);
    }
    let ctx = ProducerCtx {
        stats: stats.clone(),
        errors: errors.clone(),
        epoch,
    };
    let producer: ThreadedProducer<ProducerCtx> = cfg
        .create_with_context(ctx)
        .with_context(|| format!("creating producer {}", spec.client_id))?;
    // Learn the topic's partitions and leaders now, not on the first send.
    let _ = producer
        .client()
        .fetch_metadata(Some(&spec.topic), Duration::from_secs(10));
    let thread_stats = stats.clone();
    let thread = std::thread::Builder::new()
        .name(spec.client_id.clone())
        .spawn(move || send_loop(producer, spec, thread_stats, epoch, errors, go, stop))
        .context("spawning a producer thread")?;
    Ok(ProducerHandle { stats, thread })
}

/// Random bytes from a xorshift generator: incompressible enough for a load generator.
fn random_bytes(len: usize, mut seed: u64) -> Vec<u8> {
    seed |= 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn send_loop(
    producer: ThreadedProducer<ProducerCtx>,
    spec: ProducerSpec,
    stats: Arc<ProducerStats>,
    epoch: Instant,
    errors: Arc<ClientErrors>,
    go: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) {
    // Record values are windows into a random pool, so consecutive records differ.
    const POOL_EXTRA: usize = 4096;
    let pool = match &spec.payload {
        Some(p) => p
            .iter()
            .copied()
            .cycle()
            .take(spec.record_size + POOL_EXTRA)
            .collect(),
        None => random_bytes(spec.record_size + POOL_EXTRA, spec.seed),
    };
    // A payload file's bytes are sent as they are: no window moves over them.
    let step = if spec.payload.is_some() { 0 } else { 61 };
    let mut value = vec![0u8; spec.record_size];
    let mut window = 0usize;
    let frame = spec.schema_id.map(|id| schema_frame(id, spec.record_size));
    let ts_at = if frame.is_some() {
        SCHEMA_PREFIX_BYTES
    } else {
        0
    };

    while !go.load(Ordering::Acquire) {
        if stop.load(Ordering::Acquire) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let interval = spec.rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let mut due = Instant::now();
    'outer: while !stop.load(Ordering::Relaxed) {
        if let Some(interval) = interval {
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            } else if now - due > Duration::from_secs(1) {
                // More than a second behind (the client queue was full, or the machine was
                // busy): do not burst to catch up.
                due = now;
            }
            due += interval;
        }
        window = (window + step) % POOL_EXTRA;
        value.copy_from_slice(&pool[window..window + spec.record_size]);
        if let Some((prefix, len)) = &frame {
            let after = SCHEMA_PREFIX_BYTES + TIMESTAMP_BYTES;
            if spec.record_size >= after + len.len() {
                value[..SCHEMA_PREFIX_BYTES].copy_from_slice(prefix);
                value[after..after + len.len()].copy_from_slice(len);
            }
        }
        if spec.record_size >= ts_at + TIMESTAMP_BYTES {
            value[ts_at..ts_at + TIMESTAMP_BYTES].copy_from_slice(&now_micros().to_le_bytes());
        }
        let sent_at = epoch.elapsed().as_nanos() as usize;
        let mut record =
            BaseRecord::<(), [u8], usize>::with_opaque_to(&spec.topic, sent_at).payload(&value[..]);
        loop {
            match producer.send(record) {
                Ok(()) => {
                    stats.sent.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    // The client's queue is full: wait for deliveries to drain it.
                    if stop.load(Ordering::Relaxed) {
                        break 'outer;
                    }
                    std::thread::sleep(Duration::from_micros(500));
                    record = r;
                }
                Err((e, _)) => {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                    errors.report("send", &e, "record not sent");
                    break;
                }
            }
        }
    }
    // Records still in flight are not counted any more; give them a moment so the broker is
    // not left with half-sent requests, then drop the client.
    let _ = producer.flush(Duration::from_secs(5));
}

// ---------------------------------------------------------------- consumer

struct ConsumerCtx {
    stats: Arc<ConsumerStats>,
    errors: Arc<ClientErrors>,
}

impl ClientContext for ConsumerCtx {
    fn error(&self, error: KafkaError, reason: &str) {
        self.errors.report("consumer", &error, reason);
    }
    fn log(&self, _: rdkafka::config::RDKafkaLogLevel, _: &str, _: &str) {}
}

impl ConsumerContext for ConsumerCtx {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => self.stats.assigned.store(tpl.count(), Ordering::Release),
            Rebalance::Revoke(_) => self.stats.assigned.store(0, Ordering::Release),
            Rebalance::Error(e) => self.errors.report("rebalance", e, "consumer group"),
        }
    }
}

pub struct ConsumerSpec {
    pub bootstrap: String,
    pub topic: String,
    pub group: String,
    pub config: Vec<(String, String)>,
    pub client_id: String,
    /// Where the send timestamp starts in a value (after a schema id's frame).
    pub timestamp_at: usize,
}

pub struct ConsumerHandle {
    pub stats: Arc<ConsumerStats>,
    thread: JoinHandle<()>,
}

impl ConsumerHandle {
    pub fn join(self) {
        let _ = self.thread.join();
    }
}

/// Creates the consumer, subscribes, and polls on its own thread until `stop`.
pub fn start_consumer(
    spec: ConsumerSpec,
    errors: Arc<ClientErrors>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<ConsumerHandle> {
    let stats = Arc::new(ConsumerStats::default());
    let mut cfg = base_config(&spec.bootstrap);
    cfg.set("client.id", &spec.client_id)
        .set("group.id", &spec.group)
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false");
    for (k, v) in &spec.config {
        cfg.set(k, v);
    }
    let ctx = ConsumerCtx {
        stats: stats.clone(),
        errors: errors.clone(),
    };
    let consumer: BaseConsumer<ConsumerCtx> = cfg
        .create_with_context(ctx)
        .with_context(|| format!("creating consumer {}", spec.client_id))?;
    consumer
        .subscribe(&[&spec.topic])
        .with_context(|| format!("subscribing to {}", spec.topic))?;
    let thread_stats = stats.clone();
    let thread = std::thread::Builder::new()
        .name(spec.client_id.clone())
        .spawn(move || poll_loop(consumer, thread_stats, errors, stop, spec.timestamp_at))
        .context("spawning a consumer thread")?;
    Ok(ConsumerHandle { stats, thread })
}

fn poll_loop(
    consumer: BaseConsumer<ConsumerCtx>,
    stats: Arc<ConsumerStats>,
    errors: Arc<ClientErrors>,
    stop: Arc<AtomicBool>,
    timestamp_at: usize,
) {
    // Timestamps older than this are not ours (or not a timestamp at all).
    let plausible_after = now_micros().saturating_sub(24 * 3600 * 1_000_000);
    while !stop.load(Ordering::Relaxed) {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => {
                stats.partitions_read.insert(m.partition());
                let payload = m.payload().unwrap_or(&[]);
                stats.records.fetch_add(1, Ordering::Relaxed);
                stats
                    .bytes
                    .fetch_add(payload.len() as u64, Ordering::Relaxed);
                if let Some(ts) = payload.get(timestamp_at..timestamp_at + TIMESTAMP_BYTES) {
                    let mut b = [0u8; TIMESTAMP_BYTES];
                    b.copy_from_slice(ts);
                    let sent = u64::from_le_bytes(b);
                    let now = now_micros();
                    if sent > plausible_after && sent <= now + 1_000_000 {
                        stats.e2e.record_us(now.saturating_sub(sent));
                    }
                }
            }
            Some(Err(e)) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                errors.report("fetch", &e, "consumer poll");
            }
        }
    }
    // Dropping the consumer closes it and leaves the group.
}

#[cfg(test)]
mod frame_tests {
    use super::{schema_frame, SCHEMA_PREFIX_BYTES, TIMESTAMP_BYTES};

    #[test]
    fn a_framed_value_is_the_record_size_with_a_valid_avro_length() {
        for size in [20, 100, 1024, 70_000] {
            let (prefix, len) = schema_frame(7, size);
            assert_eq!(prefix, vec![0, 0, 0, 0, 7]);
            let data = size - SCHEMA_PREFIX_BYTES - TIMESTAMP_BYTES - len.len();
            let mut z = 0u64;
            for (i, b) in len.iter().enumerate() {
                z |= u64::from(b & 0x7f) << (7 * i);
            }
            assert_eq!(z >> 1, data as u64, "{size}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_bytes_have_the_length_and_vary() {
        let a = random_bytes(1000, 7);
        assert_eq!(a.len(), 1000);
        assert_ne!(a[..8], a[8..16]);
        assert_ne!(random_bytes(16, 1), random_bytes(16, 2));
    }
}
