//! What a link shows: per mirror partition this broker leads, how far the mirror is behind its
//! source in records and in seconds; per link, bytes mirrored, source errors, records the
//! source removed before the mirror got them, partitions stopped. Read by `/metrics` and by
//! the admin API's status.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use weir_metrics::{Counter, Labels, Registry};

use crate::groups::GroupStatus;

/// The meters of one link on this broker. Clones share them.
#[derive(Clone, Default)]
pub struct LinkMeters {
    pub bytes: Counter,
    /// Counted by [`LinkMeters::source_error`], which also keeps the last one.
    source_errors: Counter,
    pub skipped: Counter,
    pub failed_partitions: Counter,
    pub groups_copied: Counter,
    progress: Arc<Mutex<BTreeMap<(String, i32), Progress>>>,
    /// The last error talking to the source, and when: an outage is shown, not only counted.
    last_source_error: Arc<Mutex<Option<SourceError>>>,
    /// The groups this broker copies, as the last round left them.
    groups: Arc<Mutex<BTreeMap<String, GroupStatus>>>,
}

/// The last error a link's source gave this broker.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SourceError {
    pub error: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: i64,
}

/// Where one mirror partition stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionProgress {
    pub topic: String,
    pub partition: i32,
    /// One past the last offset mirrored.
    pub mirrored_end: i64,
    /// The source's high watermark, as its last answer said.
    pub source_end: i64,
}

#[derive(Debug, Clone)]
struct Progress {
    mirrored_end: i64,
    source_end: i64,
    /// When the mirror last had everything the source had.
    caught_up: Instant,
}

/// One partition's lag, as shown.
#[derive(Debug, Clone, PartialEq)]
pub struct Lag {
    pub topic: String,
    pub partition: i32,
    pub mirrored_end: i64,
    pub source_end: i64,
    pub records: i64,
    /// Seconds since the mirror last had every record the source had (0 while it has).
    pub seconds: f64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl LinkMeters {
    pub fn progress(&self, p: PartitionProgress) {
        let now = Instant::now();
        let mut map = lock(&self.progress);
        let e = map.entry((p.topic, p.partition)).or_insert(Progress {
            mirrored_end: p.mirrored_end,
            source_end: p.source_end,
            caught_up: now,
        });
        e.mirrored_end = p.mirrored_end;
        e.source_end = p.source_end.max(0);
        if e.mirrored_end >= e.source_end {
            e.caught_up = now;
        }
    }

    /// Keeps only the partitions `keep` says this broker still mirrors.
    pub fn retain(&self, keep: impl Fn(&str, i32) -> bool) {
        lock(&self.progress).retain(|(t, p), _| keep(t, *p));
    }

    /// A request to the source failed (it is retried with backoff by whoever sent it).
    pub fn source_error(&self, e: &dyn std::fmt::Display) {
        self.source_errors.inc();
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        *lock(&self.last_source_error) = Some(SourceError {
            error: e.to_string(),
            at_ms,
        });
    }

    pub fn last_source_error(&self) -> Option<SourceError> {
        lock(&self.last_source_error).clone()
    }

    pub fn source_errors(&self) -> u64 {
        self.source_errors.get()
    }

    pub fn set_groups(&self, groups: BTreeMap<String, GroupStatus>) {
        *lock(&self.groups) = groups;
    }

    pub fn groups(&self) -> BTreeMap<String, GroupStatus> {
        lock(&self.groups).clone()
    }

    pub fn lags(&self) -> Vec<Lag> {
        let now = Instant::now();
        lock(&self.progress)
            .iter()
            .map(|((topic, partition), p)| {
                let records = (p.source_end - p.mirrored_end).max(0);
                Lag {
                    topic: topic.clone(),
                    partition: *partition,
                    mirrored_end: p.mirrored_end,
                    source_end: p.source_end,
                    records,
                    seconds: if records == 0 {
                        0.0
                    } else {
                        now.duration_since(p.caught_up).as_secs_f64()
                    },
                }
            })
            .collect()
    }
}

/// Every link's record (body and version) as this broker last read it, by name.
pub type Records = Arc<Mutex<HashMap<String, (crate::model::LinkBody, u64)>>>;

/// The links of this broker, by name, for `/metrics`.
pub type AllMeters = Arc<Mutex<BTreeMap<String, LinkMeters>>>;

fn each_link<V>(all: &AllMeters, f: impl Fn(&LinkMeters) -> V) -> Vec<(Labels, V)> {
    lock(all)
        .iter()
        .map(|(name, m)| (vec![("link", name.clone())], f(m)))
        .collect()
}

fn each_partition<V>(all: &AllMeters, f: impl Fn(&Lag) -> V) -> Vec<(Labels, V)> {
    let mut out = Vec::new();
    for (name, m) in lock(all).iter() {
        for lag in m.lags() {
            out.push((
                vec![
                    ("link", name.clone()),
                    ("topic", lag.topic.clone()),
                    ("partition", lag.partition.to_string()),
                ],
                f(&lag),
            ));
        }
    }
    out
}

/// Registers the link meters of this broker.
pub fn register(r: &mut Registry, all: &AllMeters, records: &Records) {
    let a = Arc::clone(all);
    r.counters_read(
        "link_mirrored_bytes",
        "Bytes of record batches mirrored from each link's source and appended here.",
        move || each_link(&a, |m| m.bytes.get()),
    );
    let a = Arc::clone(all);
    r.counters_read(
        "link_source_errors",
        "Requests to each link's source that failed (unreachable, timed out, refused); retried with backoff.",
        move || each_link(&a, |m| m.source_errors.get()),
    );
    let a = Arc::clone(all);
    r.counters_read(
        "link_skipped_records",
        "Offsets each link skipped because the source's retention removed them before the mirror got them.",
        move || each_link(&a, |m| m.skipped.get()),
    );
    let a = Arc::clone(all);
    r.counters_read(
        "link_failed_partitions",
        "Mirror partitions stopped because the source no longer had what the mirror held (see the log).",
        move || each_link(&a, |m| m.failed_partitions.get()),
    );
    let a = Arc::clone(all);
    r.counters_read(
        "link_group_offsets_copied",
        "Committed offsets of consumer groups copied from each link's source to the groups this broker coordinates.",
        move || each_link(&a, |m| m.groups_copied.get()),
    );
    let a = Arc::clone(all);
    r.gauges_read(
        "link_groups_in_sync",
        "Groups this broker copies whose every committed offset here is the source's (a consumer moved now resumes exactly where it stopped).",
        move || {
            each_link(&a, |m| {
                m.groups()
                    .values()
                    .filter(|g| g.in_sync == g.partitions)
                    .count() as i64
            })
        },
    );
    let records = Arc::clone(records);
    r.gauges_read(
        "link_topic_state",
        "1 for each mirror topic's state (mirroring, promoting, promoted, failed; the reason is in the link's status), as the link's record last read said.",
        move || {
            let mut out = Vec::new();
            for (name, (body, _)) in lock(&records).iter() {
                for (topic, m) in &body.topics {
                    let labels = vec![
                        ("link", name.clone()),
                        ("topic", topic.clone()),
                        ("state", m.state.name().to_string()),
                    ];
                    out.push((labels, 1i64));
                }
            }
            out
        },
    );
    let a = Arc::clone(all);
    r.gauges_read(
        "link_lag_records",
        "Records the source has that its mirror partition here has not yet (source high watermark minus mirror end).",
        move || each_partition(&a, |l| l.records),
    );
    let a = Arc::clone(all);
    r.gauges_read(
        "link_lag_seconds",
        "Seconds since each mirror partition here last had every record its source had (0 while it has).",
        move || each_partition(&a, |l| l.seconds),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_the_source_end_minus_the_mirror_end_and_resets_when_caught_up() {
        let m = LinkMeters::default();
        let at = |mirrored_end, source_end| PartitionProgress {
            topic: "t".into(),
            partition: 0,
            mirrored_end,
            source_end,
        };
        m.progress(at(10, 10));
        assert_eq!(m.lags()[0].records, 0);
        assert_eq!(m.lags()[0].seconds, 0.0);
        m.progress(at(10, 25));
        std::thread::sleep(std::time::Duration::from_millis(20));
        let lag = &m.lags()[0];
        assert_eq!(lag.records, 15);
        assert!(lag.seconds >= 0.02, "{lag:?}");
        m.progress(at(25, 25));
        assert_eq!(m.lags()[0].seconds, 0.0);
        m.retain(|_, _| false);
        assert!(m.lags().is_empty());
    }
}
