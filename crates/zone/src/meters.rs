//! Bytes on sockets, by zone pair and kind: `weir_net_bytes_total{src_zone,dst_zone,kind}`.
//!
//! Every byte is counted once in the cluster: on a client's connection the broker counts both
//! directions (the client counts nothing); on a connection between brokers each side counts
//! only what it sends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use weir_metrics::Counter;

/// The zone label of a client whose zone is not known.
pub const UNKNOWN_ZONE: &str = "unknown";

/// What the bytes carry. `Produce` and `Fetch` are data; the rest is small.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Produce requests and their responses.
    Produce,
    /// Fetch requests and their responses.
    Fetch,
    /// Every other client request: metadata, groups, offsets, admin.
    Control,
    /// Between brokers: references to produced bytes in object storage, and their answers.
    Forward,
    /// Between brokers: the offsets feed and other small calls.
    Feed,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Produce,
        Kind::Fetch,
        Kind::Control,
        Kind::Forward,
        Kind::Feed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Produce => "produce",
            Kind::Fetch => "fetch",
            Kind::Control => "control",
            Kind::Forward => "forward",
            Kind::Feed => "feed",
        }
    }

    /// Bytes of records: what must not cross a zone.
    pub fn is_data(self) -> bool {
        matches!(self, Kind::Produce | Kind::Fetch)
    }
}

type Key = (String, String, Kind);

/// The counters, created on first use of a (source, destination, kind).
#[derive(Debug, Default)]
pub struct NetMeters {
    counters: Mutex<HashMap<Key, Arc<Counter>>>,
}

impl NetMeters {
    /// The counter of bytes from `src` to `dst` of `kind`. Callers keep it (a connection keeps
    /// its own), so the map is looked up once per connection and zone, not per byte.
    pub fn counter(&self, src: &str, dst: &str, kind: Kind) -> Arc<Counter> {
        let label = |z: &str| {
            if z.is_empty() {
                UNKNOWN_ZONE.to_string()
            } else {
                z.to_string()
            }
        };
        let mut map = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(map.entry((label(src), label(dst), kind)).or_default())
    }

    /// Declares the bytes by zone pair (read from `net` when scraped).
    pub fn register(net: &std::sync::Arc<NetMeters>, r: &mut weir_metrics::Registry) {
        let all = std::sync::Arc::clone(net);
        r.counters_read(
            "net_bytes",
            "Bytes on sockets by source zone, destination zone and kind (produce and fetch are data; a client's bytes are counted by its broker both ways, bytes between brokers by their sender).",
            move || {
                all.snapshot()
                    .into_iter()
                    .map(|(src, dst, kind, bytes)| {
                        let labels = vec![
                            ("src_zone", src),
                            ("dst_zone", dst),
                            ("kind", kind.as_str().to_string()),
                        ];
                        (labels, bytes)
                    })
                    .collect()
            },
        );
        let cross = std::sync::Arc::clone(net);
        r.counters_read(
            "net_cross_zone_bytes",
            "Bytes of weir_net_bytes_total whose source and destination are known zones that differ (what a cloud bills as cross-zone transfer), by kind. A selector cannot compare two labels, so dashboards and alerts read this.",
            move || {
                // Every kind, at 0 until bytes cross: "nothing crossed" is a figure too.
                let mut by_kind: std::collections::BTreeMap<&str, u64> = Kind::ALL
                    .iter()
                    .map(|k| (k.as_str(), 0))
                    .collect();
                for (src, dst, kind, bytes) in cross.snapshot() {
                    if src != dst && src != UNKNOWN_ZONE && dst != UNKNOWN_ZONE {
                        *by_kind.entry(kind.as_str()).or_insert(0) += bytes;
                    }
                }
                by_kind
                    .into_iter()
                    .map(|(kind, bytes)| (vec![("kind", kind.to_string())], bytes))
                    .collect()
            },
        );
    }

    /// Every counter: (source zone, destination zone, kind, bytes), sorted.
    pub fn snapshot(&self) -> Vec<(String, String, Kind, u64)> {
        let map = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<_> = map
            .iter()
            .map(|((s, d, k), c)| (s.clone(), d.clone(), *k, c.get()))
            .collect();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_shared_per_pair_and_kind() {
        let m = NetMeters::default();
        m.counter("a", "b", Kind::Produce).add(10);
        m.counter("a", "b", Kind::Produce).add(5);
        m.counter("", "b", Kind::Fetch).add(1);
        assert_eq!(
            m.snapshot(),
            vec![
                ("a".into(), "b".into(), Kind::Produce, 15),
                ("unknown".into(), "b".into(), Kind::Fetch, 1),
            ]
        );
        assert!(Kind::Fetch.is_data() && !Kind::Forward.is_data());
    }

    #[test]
    fn cross_zone_bytes_are_those_between_known_zones_that_differ() {
        let m = Arc::new(NetMeters::default());
        m.counter("a", "b", Kind::Produce).add(10);
        m.counter("a", "a", Kind::Produce).add(100);
        m.counter("", "b", Kind::Fetch).add(1000);
        m.counter("b", "c", Kind::Feed).add(7);
        m.counter("c", "a", Kind::Feed).add(1);
        let mut r = weir_metrics::Registry::new();
        NetMeters::register(&m, &mut r);
        let page = r.encode();
        for (kind, bytes) in [
            ("produce", 10),
            ("fetch", 0),
            ("control", 0),
            ("forward", 0),
            ("feed", 8),
        ] {
            let line = format!("weir_net_cross_zone_bytes_total{{kind=\"{kind}\"}} {bytes}\n");
            assert!(page.contains(&line), "{line:?} not in:\n{page}");
        }
    }
}
