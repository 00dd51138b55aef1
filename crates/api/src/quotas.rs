//! Client quotas as Kafka has them (KIP-13, KIP-55, KIP-546): byte rates of produce and fetch
//! per user and client id, set with AlterClientQuotas (`kafka-configs --entity-type users
//! --add-config producer_byte_rate=...`), read with DescribeClientQuotas, kept in the metadata
//! store (so every broker of a cluster enforces the same ones, each reading them again within a
//! second).
//!
//! A connection's quota is the most specific one set, in Kafka's order: user and client id;
//! user and default client id; user; default user and client id; default user and default
//! client id; default user; client id; default client id. Its usage is counted per matched
//! entity with the names filled in (every user under a default user quota has a rate of its
//! own), over Kafka's window (11 samples of a second). A request that takes the rate over the
//! quota is answered at once with a `throttle_time_ms` of `(rate - quota) / quota x window`,
//! as Kafka computes it (KIP-219), and its connection reads nothing more until that time has
//! passed, so that a client which ignores the hint is held to the rate all the same. A
//! throttled fetch comes back empty (its bytes are not counted), as in Kafka.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use kafka_protocol::messages::*;
use weir_meta::Quotas;
use weir_metrics::Counter;

pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
/// Time spent handling the client's requests, in percent of one thread (Kafka counts its
/// request-handler and network threads' time; Weir, the time its handlers take before they
/// answer or hand the answer to a later future). Counted in microseconds.
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
/// Keys Kafka accepts for users and client ids. The byte rates and the request percentage are
/// enforced; `controller_mutation_rate` is stored and described.
const USER_CLIENT_KEYS: [&str; 4] = [
    PRODUCER_BYTE_RATE,
    CONSUMER_BYTE_RATE,
    "request_percentage",
    "controller_mutation_rate",
];
const IP_KEYS: [&str; 1] = ["connection_creation_rate"];

/// Kafka's quota window (`quota.window.num` samples of `quota.window.size.seconds`).
#[derive(Debug, Clone, Copy)]
pub struct QuotaWindow {
    pub samples: u32,
    pub sample: Duration,
}

impl Default for QuotaWindow {
    fn default() -> Self {
        QuotaWindow {
            samples: 11,
            sample: Duration::from_secs(1),
        }
    }
}

impl QuotaWindow {
    fn length(&self) -> Duration {
        self.sample * self.samples
    }
}

/// One component of an entity: its type (`user`, `client-id`, `ip`) and its name (`None`: the
/// default).
pub(crate) type Component = (String, Option<String>);

fn escape(s: &str) -> String {
    s.replace('%', "%25")
        .replace(',', "%2C")
        .replace('=', "%3D")
}

fn unescape(s: &str) -> String {
    s.replace("%2C", ",")
        .replace("%3D", "=")
        .replace("%25", "%")
}

/// The entity as stored: components sorted by type, `type=name` or `type` for the default.
pub(crate) fn encode(entity: &[Component]) -> String {
    let mut parts: Vec<&Component> = entity.iter().collect();
    parts.sort();
    parts
        .iter()
        .map(|(t, n)| match n {
            Some(n) => format!("{}={}", escape(t), escape(n)),
            None => escape(t),
        })
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn decode(entity: &str) -> Vec<Component> {
    entity
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((t, n)) => (unescape(t), Some(unescape(n))),
            None => (unescape(p), None),
        })
        .collect()
}

/// A windowed rate.
#[derive(Debug)]
struct Rate {
    /// (start of the sample, amount in it), oldest first.
    samples: Vec<(Instant, f64)>,
}

impl Rate {
    fn record(&mut self, w: QuotaWindow, now: Instant, amount: f64) {
        match self.samples.last_mut() {
            Some((start, v)) if now.duration_since(*start) < w.sample => *v += amount,
            _ => self.samples.push((now, amount)),
        }
        let horizon = w.length();
        self.samples
            .retain(|(start, _)| now.duration_since(*start) < horizon);
    }

    /// Per second, over the window so far (at least the window less one sample, as Kafka's
    /// `Rate` measures, so that a first burst is not divided by almost nothing).
    fn per_second(&self, w: QuotaWindow, now: Instant) -> f64 {
        let Some((first, _)) = self.samples.first() else {
            return 0.0;
        };
        let elapsed = now
            .duration_since(*first)
            .max(w.sample * w.samples.saturating_sub(1).max(1));
        let total: f64 = self.samples.iter().map(|(_, v)| v).sum();
        total / elapsed.as_secs_f64()
    }
}

#[derive(Debug, Default)]
pub struct QuotaMeters {
    /// Produce requests answered with a throttle time.
    pub produce_throttled: Counter,
    /// Requests whose handling time took their client over `request_percentage` (the
    /// connection was muted).
    pub request_throttled: Counter,
    /// Fetch requests answered empty with a throttle time.
    pub fetch_throttled: Counter,
    /// Milliseconds of throttle time given, all requests together.
    pub throttle_ms: Counter,
}

impl QuotaMeters {
    /// Declares the client quotas' meters.
    pub fn register(&self, r: &mut weir_metrics::Registry) {
        r.counter(
            "quota_produce_throttled",
            "Produce requests over their client quota, answered with a throttle time.",
            &self.produce_throttled,
        );
        r.counter(
            "quota_fetch_throttled",
            "Fetch requests over their client quota, answered empty with a throttle time.",
            &self.fetch_throttled,
        );
        r.counter(
            "quota_request_throttled",
            "Requests whose handling time took their client over request_percentage (the connection was muted).",
            &self.request_throttled,
        );
        r.counter(
            "quota_throttle_ms",
            "Milliseconds of throttle time given to clients over their quotas.",
            &self.throttle_ms,
        );
    }
}

/// The quotas in force and the rates measured against them.
#[derive(Debug, Default)]
pub struct QuotaManager {
    /// entity (stored form) → key → value.
    config: RwLock<Arc<HashMap<String, HashMap<String, f64>>>>,
    rates: Mutex<HashMap<(&'static str, String), Rate>>,
    window: RwLock<QuotaWindow>,
    pub meters: QuotaMeters,
}

impl QuotaManager {
    pub fn set_window(&self, w: QuotaWindow) {
        *self.window.write().unwrap_or_else(|e| e.into_inner()) = QuotaWindow {
            samples: w.samples.max(1),
            sample: w.sample.max(Duration::from_millis(1)),
        };
    }

    fn window(&self) -> QuotaWindow {
        *self.window.read().unwrap_or_else(|e| e.into_inner())
    }

    /// No quota is set: nothing to count.
    pub(crate) fn is_empty(&self) -> bool {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    fn set(&self, quotas: Vec<weir_meta::ClientQuota>) {
        let mut map: HashMap<String, HashMap<String, f64>> = HashMap::new();
        for q in quotas {
            map.entry(q.entity).or_default().insert(q.key, q.value);
        }
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(map);
    }

    /// The quota of `key` for `user` and `client_id`, and the entity its usage counts under.
    fn resolve(&self, key: &str, user: &str, client_id: &str) -> Option<(f64, String)> {
        let config = Arc::clone(&self.config.read().unwrap_or_else(|e| e.into_inner()));
        if config.is_empty() {
            return None;
        }
        let u = |n: Option<&str>| ("user".to_string(), n.map(str::to_string));
        let c = |n: Option<&str>| ("client-id".to_string(), n.map(str::to_string));
        let (user, client) = (Some(user), Some(client_id));
        // Kafka's order, most specific first; each with the entity its rate is kept under.
        let order: [(Vec<Component>, Vec<Component>); 8] = [
            (vec![u(user), c(client)], vec![u(user), c(client)]),
            (vec![u(user), c(None)], vec![u(user), c(client)]),
            (vec![u(user)], vec![u(user)]),
            (vec![u(None), c(client)], vec![u(user), c(client)]),
            (vec![u(None), c(None)], vec![u(user), c(client)]),
            (vec![u(None)], vec![u(user)]),
            (vec![c(client)], vec![c(client)]),
            (vec![c(None)], vec![c(client)]),
        ];
        order.into_iter().find_map(|(configured, counted)| {
            let v = config.get(&encode(&configured))?.get(key)?;
            Some((*v, encode(&counted)))
        })
    }

    /// Counts `bytes` of `key` for the connection's user and client id; the throttle time they
    /// earn (zero within the quota).
    pub(crate) fn record(
        &self,
        key: &'static str,
        user: &str,
        client_id: &str,
        bytes: u64,
    ) -> Duration {
        let Some((quota, entity)) = self.resolve(key, user, client_id) else {
            return Duration::ZERO;
        };
        // A percentage of one thread's time, in the microseconds per second it is counted in.
        let quota = if key == REQUEST_PERCENTAGE {
            quota * 10_000.0
        } else {
            quota
        };
        let now = Instant::now();
        let w = self.window();
        let mut rates = self.rates.lock().unwrap_or_else(|e| e.into_inner());
        let rate = rates.entry((key, entity)).or_insert_with(|| Rate {
            samples: Vec::new(),
        });
        rate.record(w, now, bytes as f64);
        let observed = rate.per_second(w, now);
        if observed <= quota || quota <= 0.0 {
            return Duration::ZERO;
        }
        w.length()
            .mul_f64((observed - quota) / quota)
            .min(w.length())
    }

    /// Takes back bytes recorded for a request that is answered without them (a throttled
    /// fetch).
    pub(crate) fn unrecord(&self, key: &'static str, user: &str, client_id: &str, bytes: u64) {
        let Some((_, entity)) = self.resolve(key, user, client_id) else {
            return;
        };
        let mut rates = self.rates.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = rates.get_mut(&(key, entity)) {
            r.record(self.window(), Instant::now(), -(bytes as f64));
        }
    }
}

pub(crate) fn valid_key(entity: &[Component], key: &str) -> bool {
    if entity.iter().any(|(t, _)| t == "ip") {
        IP_KEYS.contains(&key)
    } else {
        USER_CLIENT_KEYS.contains(&key)
    }
}

pub(crate) fn check_entity(entity: &[Component]) -> Result<(), String> {
    if entity.is_empty() {
        return Err("Invalid empty client quota entity".into());
    }
    let mut seen = std::collections::HashSet::new();
    for (t, _) in entity {
        if !matches!(t.as_str(), "user" | "client-id" | "ip") {
            return Err(format!("Unhandled client quota entity type: {t}"));
        }
        if !seen.insert(t.as_str()) {
            return Err(format!("Duplicate {t} entity type in the request"));
        }
    }
    if seen.contains("ip") && seen.len() > 1 {
        return Err("Invalid quota entity combination: ip with user or client-id".into());
    }
    Ok(())
}

impl QuotaManager {
    /// Reads the quotas again from the metadata store.
    pub async fn refresh(
        &self,
        meta: &dyn weir_meta::MetaStore,
    ) -> Result<(), weir_meta::MetaError> {
        let q = Quotas::client_quotas(meta).await?;
        self.set(q);
        Ok(())
    }
}

/// The record bytes of a produce request, what its quota counts.
pub(crate) fn produce_bytes(r: &ProduceRequest) -> u64 {
    r.topic_data
        .iter()
        .flat_map(|t| &t.partition_data)
        .map(|p| p.records.as_ref().map_or(0, |b| b.len() as u64))
        .sum()
}

fn fetch_bytes(r: &FetchResponse) -> u64 {
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| p.records.as_ref().map_or(0, |b| b.len() as u64))
        .sum()
}

/// Sets `throttle_time_ms` (unless larger already) in a response that has it: every API Weir
/// serves but the two SASL ones.
pub(crate) fn set_throttle_time(r: &mut ResponseKind, ms: i32) {
    macro_rules! set {
        ($($kind:ident),* $(,)?) => {
            match r {
                $(ResponseKind::$kind(x) => x.throttle_time_ms = x.throttle_time_ms.max(ms),)*
                _ => {}
            }
        };
    }
    set!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        DescribeConfigs,
        AlterConfigs,
        CreatePartitions,
        DeleteGroups,
        IncrementalAlterConfigs,
        OffsetDelete,
        DescribeCluster,
        AlterPartitionReassignments,
        ListPartitionReassignments,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        TxnOffsetCommit,
        DescribeTransactions,
        ListTransactions,
        DescribeLogDirs,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
        DescribeProducers,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        CreateAcls,
        DescribeAcls,
        DeleteAcls,
        DescribeClientQuotas,
        AlterClientQuotas,
    );
}

/// Mutes a connection until `until`, unless it is muted longer already.
fn mute(handle: &Mutex<Option<Instant>>, until: Instant) {
    let mut t = handle.lock().unwrap_or_else(|e| e.into_inner());
    if t.is_none_or(|t| t < until) {
        *t = Some(until);
    }
}

impl QuotaManager {
    /// Counts a request against the client's quotas once handled: its handling time against
    /// `request_percentage`, a produce's bytes against `producer_byte_rate` (`produced`), a
    /// fetch's against `consumer_byte_rate`. Over a quota, the response carries a throttle time
    /// and the connection reads nothing more for that long, as in Kafka.
    pub(crate) fn throttle(
        self: &Arc<Self>,
        reply: crate::Reply,
        api_key: i16,
        conn: &crate::Conn,
        client_id: &str,
        produced: Option<u64>,
        spent: Duration,
    ) -> crate::Reply {
        let reply = self.throttle_request_time(reply, conn, client_id, spent);
        match produced {
            Some(bytes) => self.throttle_produce(reply, conn, client_id, bytes),
            None if api_key == ApiKey::Fetch as i16 => self.throttle_fetch(reply, conn, client_id),
            None => reply,
        }
    }

    fn user_of(conn: &crate::Conn) -> String {
        conn.principal()
            .map_or_else(|| "ANONYMOUS".into(), |p| p.name)
    }

    /// Counts a request's handling time against `request_percentage`; over it, the connection
    /// reads nothing more for the throttle time, and the response says so.
    fn throttle_request_time(
        &self,
        reply: crate::Reply,
        conn: &crate::Conn,
        client_id: &str,
        spent: Duration,
    ) -> crate::Reply {
        if conn.internal || self.is_empty() {
            return reply;
        }
        let t = self.record(
            REQUEST_PERCENTAGE,
            &Self::user_of(conn),
            client_id,
            spent.as_micros() as u64,
        );
        if t.is_zero() {
            return reply;
        }
        self.meters.request_throttled.inc();
        self.meters.throttle_ms.add(t.as_millis() as u64);
        mute(&conn.throttle_handle(), Instant::now() + t);
        let ms = i32::try_from(t.as_millis()).unwrap_or(i32::MAX);
        match reply {
            crate::Reply::Now(mut r) => {
                set_throttle_time(&mut r, ms);
                crate::Reply::Now(r)
            }
            crate::Reply::Later(f) => crate::Reply::Later(Box::pin(async move {
                let mut r = f.await;
                set_throttle_time(&mut r, ms);
                r
            })),
            other => other,
        }
    }

    /// Counts a produce against its quota; a throttle time in its response (and the
    /// connection muted) if it went over.
    fn throttle_produce(
        self: &Arc<Self>,
        reply: crate::Reply,
        conn: &crate::Conn,
        client_id: &str,
        bytes: u64,
    ) -> crate::Reply {
        if conn.internal || self.is_empty() {
            return reply;
        }
        let t = self.record(PRODUCER_BYTE_RATE, &Self::user_of(conn), client_id, bytes);
        if t.is_zero() {
            return reply;
        }
        self.meters.produce_throttled.inc();
        self.meters.throttle_ms.add(t.as_millis() as u64);
        mute(&conn.throttle_handle(), Instant::now() + t);
        let ms = i32::try_from(t.as_millis()).unwrap_or(i32::MAX);
        let set = move |r: ResponseKind| match r {
            ResponseKind::Produce(p) => ResponseKind::Produce(p.with_throttle_time_ms(ms)),
            other => other,
        };
        match reply {
            crate::Reply::Now(r) => crate::Reply::Now(Box::new(set(*r))),
            crate::Reply::Later(f) => crate::Reply::Later(Box::pin(async move { set(f.await) })),
            other => other,
        }
    }

    /// Counts a fetch's bytes against its quota; over it, the response goes out empty with a
    /// throttle time (its bytes not counted) and the connection is muted, as in Kafka.
    fn throttle_fetch(
        self: &Arc<Self>,
        reply: crate::Reply,
        conn: &crate::Conn,
        client_id: &str,
    ) -> crate::Reply {
        if conn.internal || self.is_empty() {
            return reply;
        }
        let user = Self::user_of(conn);
        let client_id = client_id.to_string();
        let this = Arc::clone(self);
        let handle = conn.throttle_handle();
        let apply = move |r: ResponseKind| match r {
            ResponseKind::Fetch(mut f) => {
                let bytes = fetch_bytes(&f);
                let t = this.record(CONSUMER_BYTE_RATE, &user, &client_id, bytes);
                if !t.is_zero() {
                    this.unrecord(CONSUMER_BYTE_RATE, &user, &client_id, bytes);
                    this.meters.fetch_throttled.inc();
                    this.meters.throttle_ms.add(t.as_millis() as u64);
                    for p in f.responses.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                        p.records = None;
                    }
                    f.throttle_time_ms = i32::try_from(t.as_millis()).unwrap_or(i32::MAX);
                    mute(&handle, Instant::now() + t);
                }
                ResponseKind::Fetch(f)
            }
            other => other,
        };
        match reply {
            crate::Reply::Now(r) => crate::Reply::Now(Box::new(apply(*r))),
            crate::Reply::Later(f) => crate::Reply::Later(Box::pin(async move { apply(f.await) })),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(entity: &str, key: &str, value: f64) -> weir_meta::ClientQuota {
        weir_meta::ClientQuota {
            entity: entity.into(),
            key: key.into(),
            value,
        }
    }

    #[test]
    fn entities_round_trip_with_defaults_and_odd_names() {
        let e = vec![
            ("user".to_string(), Some("a,b=c%".to_string())),
            ("client-id".to_string(), None),
        ];
        let s = encode(&e);
        assert_eq!(s, "client-id,user=a%2Cb%3Dc%25");
        let mut back = decode(&s);
        back.sort();
        let mut e = e;
        e.sort();
        assert_eq!(back, e);
    }

    #[test]
    fn the_most_specific_quota_applies_in_kafkas_order() {
        let m = QuotaManager::default();
        m.set(vec![
            quota("client-id", PRODUCER_BYTE_RATE, 8.0),
            quota("user", PRODUCER_BYTE_RATE, 6.0),
            quota("user=alice", PRODUCER_BYTE_RATE, 3.0),
            quota("client-id=app,user=alice", PRODUCER_BYTE_RATE, 1.0),
        ]);
        let r = |u: &str, c: &str| m.resolve(PRODUCER_BYTE_RATE, u, c);
        assert_eq!(
            r("alice", "app"),
            Some((1.0, "client-id=app,user=alice".into()))
        );
        assert_eq!(r("alice", "other"), Some((3.0, "user=alice".into())));
        // A default user quota is counted per user.
        assert_eq!(r("bob", "x"), Some((6.0, "user=bob".into())));
        assert_eq!(m.resolve(CONSUMER_BYTE_RATE, "alice", "app"), None);
        let only_clients = QuotaManager::default();
        only_clients.set(vec![quota("client-id", CONSUMER_BYTE_RATE, 5.0)]);
        assert_eq!(
            only_clients.resolve(CONSUMER_BYTE_RATE, "ANONYMOUS", "c1"),
            Some((5.0, "client-id=c1".into()))
        );
    }

    #[test]
    fn throttle_time_grows_with_the_excess_over_the_quota() {
        let m = QuotaManager::default();
        m.set(vec![quota("user=alice", PRODUCER_BYTE_RATE, 1000.0)]);
        // 10 KB within the window's first second: 10000 / 10 s = 1000/s, at the quota.
        assert_eq!(
            m.record(PRODUCER_BYTE_RATE, "alice", "c", 10_000),
            Duration::ZERO
        );
        // 10 KB more: 2000/s, twice the quota: (2000 - 1000) / 1000 x 11 s, capped at 11 s.
        let t = m.record(PRODUCER_BYTE_RATE, "alice", "c", 10_000);
        assert_eq!(t, Duration::from_secs(11));
        // Another user is not held to alice's quota.
        assert_eq!(
            m.record(PRODUCER_BYTE_RATE, "bob", "c", 1 << 30),
            Duration::ZERO
        );
        m.unrecord(PRODUCER_BYTE_RATE, "alice", "c", 15_000);
        assert_eq!(
            m.record(PRODUCER_BYTE_RATE, "alice", "c", 0),
            Duration::ZERO
        );
    }
}
