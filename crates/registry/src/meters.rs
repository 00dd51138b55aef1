//! The registry's meters: requests by endpoint and status, their latency, and the parsed-schema
//! cache's hits and misses.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir_metrics::{Counter, Histogram, Labels, Registry};

#[derive(Clone, Default)]
pub struct RegistryMeters {
    /// Requests by (endpoint pattern, HTTP status).
    requests: Arc<Mutex<BTreeMap<(&'static str, u16), u64>>>,
    pub latency: Histogram,
    pub cache_hits: Counter,
    pub cache_misses: Counter,
}

impl RegistryMeters {
    pub fn request(&self, endpoint: &'static str, status: u16, took: Duration) {
        *self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((endpoint, status))
            .or_default() += 1;
        self.latency.record(took);
    }

    pub fn cache(&self, hit: bool) {
        if hit {
            self.cache_hits.inc();
        } else {
            self.cache_misses.inc();
        }
    }

    /// Requests answered with `status` so far, over every endpoint (tests).
    pub fn requests_with(&self, status: u16) -> u64 {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|((_, s), _)| *s == status)
            .map(|(_, n)| n)
            .sum()
    }

    pub fn register(&self, r: &mut Registry) {
        let requests = Arc::clone(&self.requests);
        r.counters_read(
            "schema_registry_requests",
            "Schema registry HTTP requests, by endpoint (the route's pattern) and HTTP status.",
            move || {
                requests
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .map(|((endpoint, status), n)| {
                        let labels: Labels = vec![
                            ("endpoint", endpoint.to_string()),
                            ("code", status.to_string()),
                        ];
                        (labels, *n)
                    })
                    .collect()
            },
        );
        r.histogram(
            "schema_registry_request",
            "Schema registry HTTP requests' time, from routed to answered.",
            &self.latency,
        );
        r.counter(
            "schema_registry_cache_hits",
            "Schemas served parsed from the registry's cache (by content fingerprint).",
            &self.cache_hits,
        );
        r.counter(
            "schema_registry_cache_misses",
            "Schemas the registry parsed because its cache did not have them.",
            &self.cache_misses,
        );
    }
}
