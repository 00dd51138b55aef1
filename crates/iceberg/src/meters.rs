//! The translator's meters: what it wrote and committed, how long commits took, what it had to
//! give up on, and how far each table is behind its topic.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use weir_metrics::{Counter, Histogram, Labels, Registry};

/// How far one topic's table is behind, as the last cycle saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Lag {
    /// Records of the partitions led here that are stable and not in the table.
    pub records: u64,
    /// Age of the oldest of them (0: none).
    pub seconds: f64,
}

#[derive(Clone, Default)]
pub struct IcebergMeters {
    pub records: Counter,
    pub files: Counter,
    pub file_bytes: Counter,
    pub commits: Counter,
    pub commit_latency: Histogram,
    /// Commits refused because another writer committed first (the work is done again).
    pub conflicts: Counter,
    pub errors: Counter,
    /// Records deleted by retention before they reached the table.
    pub skipped: Counter,
    /// Records put in a dead-letter table.
    pub dead_letters: Counter,
    /// Records that did not fit their table, dropped (`weir.iceberg.invalid.record.action`).
    pub invalid_dropped: Counter,
    /// Schema updates (columns added) committed.
    pub evolutions: Counter,
    /// Snapshots expired (`weir.iceberg.snapshot.max.age.ms`).
    pub expired_snapshots: Counter,
    lag: Arc<Mutex<BTreeMap<String, Lag>>>,
    /// Topics whose translation is paused, and why.
    paused: Arc<Mutex<BTreeMap<String, String>>>,
}

impl IcebergMeters {
    pub fn set_lag(&self, topic: &str, lag: Lag) {
        self.lag
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(topic.to_string(), lag);
    }

    /// Forgets topics no longer translated here.
    pub fn keep_lag_of(&self, topics: &[String]) {
        self.lag
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|t, _| topics.contains(t));
        self.paused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|t, _| topics.contains(t));
    }

    /// Records why `topic`'s translation is paused (`None`: it is not); true if that changed.
    pub fn set_paused(&self, topic: &str, reason: Option<&str>) -> bool {
        let mut paused = self.paused.lock().unwrap_or_else(|e| e.into_inner());
        match reason {
            Some(r) => paused.insert(topic.to_string(), r.to_string()).as_deref() != Some(r),
            None => paused.remove(topic).is_some(),
        }
    }

    /// Why each paused topic is.
    pub fn paused(&self) -> BTreeMap<String, String> {
        self.paused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn lag(&self, topic: &str) -> Option<Lag> {
        self.lag
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .copied()
    }

    /// Every topic's lag.
    pub fn lags(&self) -> BTreeMap<String, Lag> {
        self.lag.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn register(&self, r: &mut Registry) {
        r.counter(
            "iceberg_records",
            "Records written to Iceberg tables (in commits that landed).",
            &self.records,
        );
        r.counter(
            "iceberg_files",
            "Parquet data files committed to Iceberg tables.",
            &self.files,
        );
        r.counter(
            "iceberg_file_bytes",
            "Bytes of Parquet data files committed to Iceberg tables.",
            &self.file_bytes,
        );
        r.counter(
            "iceberg_commits",
            "Commits to Iceberg tables.",
            &self.commits,
        );
        r.histogram(
            "iceberg_commit",
            "An Iceberg commit's time, from the first data file written to the catalog's answer.",
            &self.commit_latency,
        );
        r.counter(
            "iceberg_commit_conflicts",
            "Iceberg commits refused because the table moved first (translated again).",
            &self.conflicts,
        );
        r.counter(
            "iceberg_errors",
            "Translation cycles that failed (catalog, object store or records), retried later.",
            &self.errors,
        );
        r.counter(
            "iceberg_skipped_records",
            "Records deleted by retention before their topic's table had them.",
            &self.skipped,
        );
        r.counter(
            "iceberg_dead_letter_records",
            "Records that did not decode or fit their table, put in its dead-letter table (<table>_dlq).",
            &self.dead_letters,
        );
        r.counter(
            "iceberg_dropped_records",
            "Records that did not decode or fit their table, dropped (weir.iceberg.invalid.record.action=drop).",
            &self.invalid_dropped,
        );
        r.counter(
            "iceberg_schema_evolutions",
            "Iceberg schema updates committed (columns added for a new schema).",
            &self.evolutions,
        );
        r.counter(
            "iceberg_expired_snapshots",
            "Iceberg snapshots expired (older than their topic's weir.iceberg.snapshot.max.age.ms).",
            &self.expired_snapshots,
        );
        let paused = Arc::clone(&self.paused);
        r.gauges_read(
            "iceberg_paused",
            "1 for each topic whose translation is paused (a schema the table cannot take; the admin API's /v1/iceberg says why).",
            move || {
                paused
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .keys()
                    .map(|t| (vec![("topic", t.clone())] as Labels, 1u64))
                    .collect()
            },
        );
        let lag = Arc::clone(&self.lag);
        r.gauges_read(
            "iceberg_lag_records",
            "Stable records not yet in their topic's Iceberg table, per topic (partitions led here).",
            move || {
                lag.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .map(|(t, l)| (vec![("topic", t.clone())] as Labels, l.records))
                    .collect()
            },
        );
        let lag = Arc::clone(&self.lag);
        r.gauges_read(
            "iceberg_lag_seconds",
            "Age of the oldest record not yet in its topic's Iceberg table, per topic (partitions led here).",
            move || {
                lag.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .map(|(t, l)| (vec![("topic", t.clone())] as Labels, l.seconds))
                    .collect()
            },
        );
    }
}
