//! Requests being handled, so that one that never ends is seen and acted on.
//!
//! Every Kafka request is registered when its handler starts and leaves when its answer is
//! ready (or its connection closes). Each has a bound: `broker.request_stuck_ms`, or twice the
//! wait the request itself asks for where that is longer (a fetch's `max_wait_ms`, a produce's
//! `timeout_ms`, a join's rebalance timeout). A request past its bound is stuck: it is logged
//! at WARN once, counted, and while any is stuck the broker is not ready (`/readyz`), so an
//! orchestrator replaces it and its partitions fail over as after a crash. The age of the
//! oldest request of each API is a gauge.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, RequestKind};
use weir_metrics::Counter;

use crate::NetworkMeters;

/// The wait a SyncGroup may legitimately have: until its group's leader syncs, bounded by the
/// rebalance timeout of the join before it, which the SyncGroup does not carry (Kafka's
/// default `max.poll.interval.ms`, the rebalance timeout clients send).
const SYNC_GROUP_WAIT: Duration = Duration::from_secs(300);

#[derive(Debug)]
struct Entry {
    api: ApiKey,
    since: Instant,
    bound: Duration,
    peer: SocketAddr,
    /// The header's client id, shared (no copy per request).
    client_id: Option<kafka_protocol::protocol::StrBytes>,
    correlation_id: i32,
    /// Logged as stuck already.
    warned: bool,
}

/// The registry of requests in flight; see the module documentation.
#[derive(Debug, Default)]
pub struct InFlight {
    next: AtomicU64,
    entries: Mutex<HashMap<u64, Entry>>,
    /// Requests past their bound at the last [`InFlight::watch`].
    stuck_now: AtomicUsize,
    /// Requests that went past their bound, ever.
    pub stuck_total: Counter,
}

/// A request's place in the registry (in the meters it belongs to); dropping it takes the
/// request out.
pub struct Registered {
    meters: Arc<NetworkMeters>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.meters.in_flight.lock().remove(&self.id);
    }
}

/// The wait a request asks for itself, if any.
fn own_wait(request: &RequestKind) -> Duration {
    let ms = |v: i32| Duration::from_millis(u64::try_from(v).unwrap_or(0));
    match request {
        RequestKind::Fetch(r) => ms(r.max_wait_ms),
        RequestKind::ShareFetch(r) => ms(r.max_wait_ms),
        RequestKind::Produce(r) => ms(r.timeout_ms),
        RequestKind::JoinGroup(r) => ms(r.rebalance_timeout_ms.max(r.session_timeout_ms)),
        RequestKind::SyncGroup(_) => SYNC_GROUP_WAIT,
        _ => Duration::ZERO,
    }
}

/// Oldest request in flight per API.
pub type Oldest = Vec<(ApiKey, Duration)>;

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a request whose handling starts now.
    pub(crate) fn register(
        meters: &Arc<NetworkMeters>,
        api: ApiKey,
        request: &RequestKind,
        stuck_after: Duration,
        peer: SocketAddr,
        client_id: Option<kafka_protocol::protocol::StrBytes>,
        correlation_id: i32,
    ) -> Registered {
        let registry = &meters.in_flight;
        let id = registry.next.fetch_add(1, Ordering::Relaxed);
        let bound = stuck_after.max(own_wait(request).saturating_mul(2));
        registry.lock().insert(
            id,
            Entry {
                api,
                since: Instant::now(),
                bound,
                peer,
                client_id,
                correlation_id,
                warned: false,
            },
        );
        Registered {
            meters: Arc::clone(meters),
            id,
        }
    }

    /// Requests in flight now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Requests past their bound at the last watch.
    pub fn stuck(&self) -> usize {
        self.stuck_now.load(Ordering::Relaxed)
    }

    /// The age of the oldest request in flight, per API with any in flight.
    pub fn oldest(&self, now: Instant) -> Oldest {
        let mut by_api: HashMap<ApiKey, Duration> = HashMap::new();
        for e in self.lock().values() {
            let age = now.saturating_duration_since(e.since);
            let slot = by_api.entry(e.api).or_default();
            *slot = (*slot).max(age);
        }
        let mut out: Oldest = by_api.into_iter().collect();
        out.sort_by_key(|(api, _)| *api as i16);
        out
    }

    /// Looks for requests past their bound: logs each one once at WARN and counts it, and
    /// remembers how many there are (`stuck`). Returns that number.
    pub fn watch(&self, now: Instant) -> usize {
        let mut stuck = 0;
        for e in self.lock().values_mut() {
            let age = now.saturating_duration_since(e.since);
            if age <= e.bound {
                continue;
            }
            stuck += 1;
            if !std::mem::replace(&mut e.warned, true) {
                self.stuck_total.inc();
                tracing::warn!(
                    api = ?e.api,
                    peer = %e.peer,
                    client_id = e.client_id.as_deref().unwrap_or(""),
                    correlation_id = e.correlation_id,
                    age_ms = age.as_millis() as u64,
                    bound_ms = e.bound.as_millis() as u64,
                    "a request is stuck: not answered within its bound; the broker reports not ready until it is"
                );
            }
        }
        self.stuck_now.store(stuck, Ordering::Relaxed);
        stuck
    }
}

/// Watches `meters`' requests in flight every `every` until `shutdown` turns true.
pub async fn watch_stuck(
    meters: Arc<NetworkMeters>,
    every: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.changed() => return,
        }
        meters.in_flight.watch(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{FetchRequest, JoinGroupRequest, ListGroupsRequest};

    fn peer() -> SocketAddr {
        "127.0.0.1:9".parse().expect("address")
    }

    #[test]
    fn a_request_is_stuck_past_its_bound_once_and_leaves_when_dropped() {
        let meters = Arc::new(NetworkMeters::default());
        let f = &meters.in_flight;
        let list = RequestKind::ListGroups(ListGroupsRequest::default());
        // A fetch that asks to wait 30 s may: its bound is twice that.
        let fetch = RequestKind::Fetch(FetchRequest::default().with_max_wait_ms(30_000));
        let join =
            RequestKind::JoinGroup(JoinGroupRequest::default().with_rebalance_timeout_ms(-1));
        let bound = Duration::from_secs(10);
        let a = InFlight::register(&meters, ApiKey::ListGroups, &list, bound, peer(), None, 1);
        let _b = InFlight::register(&meters, ApiKey::Fetch, &fetch, bound, peer(), None, 2);
        let _c = InFlight::register(&meters, ApiKey::JoinGroup, &join, bound, peer(), None, 3);
        assert_eq!(f.len(), 3);
        let start = Instant::now();
        assert_eq!(f.watch(start + Duration::from_secs(5)), 0);
        // Past 10 s, the ListGroups and the JoinGroup (a negative timeout asks for nothing).
        let later = start + Duration::from_secs(11);
        assert_eq!(f.watch(later), 2);
        assert_eq!(f.watch(later), 2, "still stuck");
        assert_eq!(f.stuck_total.get(), 2, "each counted (and logged) once");
        let oldest = f.oldest(later);
        assert_eq!(oldest.len(), 3);
        assert!(oldest
            .iter()
            .all(|(_, age)| *age >= Duration::from_secs(11)));
        drop(a);
        assert_eq!(f.watch(later), 1);
        assert_eq!(
            f.watch(start + Duration::from_secs(61)),
            2,
            "the fetch, past 60 s"
        );
        assert_eq!(f.stuck(), 2);
    }
}
