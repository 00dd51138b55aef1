//! Maintenance, in the background: retention moves start offsets, compaction rewrites small
//! ranges, and garbage collection deletes objects that no range refers to any more (after a grace
//! period, so that reads in flight finish) and orphans of uploads that were never committed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use object_store::path::Path;
use object_store::ObjectStoreExt;

use object_store::ObjectStore;
use tokio::sync::watch;
use weir_meta::MetaStore;

use crate::compaction::Compactor;
use crate::error::Result;
use crate::reader::ObjectReader;
use crate::stream::Stream;
use crate::streams::Streams;
use crate::{Retention, StorageConfig, StorageMeters};

/// What a stream's last retention check saw: while none of it changes, the check's answer can
/// change only with time, at `due_ms`. The object index is read again only then, so an idle
/// broker does not read every stream's ranges at every maintenance round (10,000 partitions made
/// 1,000 statements a second of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Checked {
    retention: Retention,
    start: u64,
    committed_end: u64,
    hold: Option<u64>,
}

/// When retention by time would next move a start offset: the first range left's newest
/// record reaching the age limit. Never, without an age limit or with no range left.
fn due_ms(ranges: &[weir_meta::RangeInfo], start: u64, retention: Retention) -> i64 {
    match retention.ms {
        Some(ms) => ranges
            .iter()
            .find(|r| r.end_offset > start)
            .map_or(i64::MAX, |r| r.max_timestamp.saturating_add(ms as i64)),
        None => i64::MAX,
    }
}

/// Ranges a retention check by time reads at once: it needs those expired and the first kept,
/// not all of a stream's (a week of 8 MiB ranges is some 100,000, now that compaction leaves
/// large ranges where they are).
const RETENTION_PAGE: usize = 256;

/// Maintenance's part of the engine.
pub(crate) struct Maintenance {
    pub config: StorageConfig,
    pub meta: Arc<dyn MetaStore>,
    pub store: Arc<dyn ObjectStore>,
    /// Forgets the objects deleted.
    pub reader: Arc<ObjectReader>,
    pub streams: Arc<Streams>,
    pub compactor: Arc<Compactor>,
    pub meters: Arc<StorageMeters>,
    /// True once the engine stops its background work.
    pub stopping: watch::Receiver<bool>,
    /// Each stream's last retention check and when its answer may change (`due_ms`); only the
    /// maintenance task uses it, never across an await.
    checked: Mutex<HashMap<u64, (Checked, i64)>>,
}

impl Maintenance {
    pub fn new(
        shared: &crate::shared::Shared,
        compactor: Arc<Compactor>,
        stopping: watch::Receiver<bool>,
    ) -> Maintenance {
        Maintenance {
            config: shared.config.clone(),
            meta: Arc::clone(&shared.meta),
            store: Arc::clone(&shared.store),
            reader: Arc::clone(&shared.reader),
            streams: Arc::clone(&shared.streams),
            compactor,
            meters: Arc::clone(&shared.meters),
            stopping,
            checked: Mutex::new(HashMap::new()),
        }
    }

    /// Maintains every `maintenance_interval` until `shutdown`.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            // A task first polled after close() sent the signal would never see it change.
            if *shutdown.borrow_and_update() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(self.config.maintenance_interval) => {}
                _ = shutdown.changed() => return,
            }
            if let Err(e) = self.maintain().await {
                tracing::warn!(error = %e, "maintenance failed; will retry");
            }
        }
    }

    /// Applies retention, then deletes objects that are unreferenced or orphaned.
    pub async fn maintain(&self) -> Result<()> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let streams = self.streams.all();
        let ids: std::collections::HashSet<u64> = streams.iter().map(|s| s.id).collect();
        self.checked().retain(|id, _| ids.contains(id));
        for s in streams {
            self.apply_retention(&s, now_ms).await;
        }

        self.compactor.compact().await?;
        if *self.stopping.borrow() {
            return Ok(());
        }

        let deletable = self
            .meta
            .deletable_objects(self.config.delete_grace, self.config.orphan_grace)
            .await?;
        let mut deleted = Vec::new();
        for o in deletable {
            match self.store.delete(&Path::from(o.key.as_str())).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                    self.reader.forget(o.object_id);
                    deleted.push(o.object_id);
                }
                Err(e) => {
                    tracing::warn!(key = %o.key, error = %e, "could not delete an object; will retry")
                }
            }
        }
        if !deleted.is_empty() {
            self.meta.forget_objects(&deleted).await?;
            self.meters.objects_deleted.add(deleted.len() as u64);
        }
        Ok(())
    }

    fn checked(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (Checked, i64)>> {
        self.checked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A stream's ranges from `start` that retention by time drops, and the first it keeps: read
    /// a page at a time, not the whole stream.
    async fn expired_ranges(
        &self,
        stream_id: u64,
        start: u64,
        retention: Retention,
        now_ms: i64,
    ) -> weir_meta::Result<Vec<weir_meta::RangeInfo>> {
        let cutoff = retention
            .ms
            .map_or(i64::MIN, |ms| now_ms.saturating_sub(ms as i64));
        let mut out: Vec<weir_meta::RangeInfo> = Vec::new();
        let mut from = start;
        loop {
            let page = self.meta.ranges(stream_id, from, RETENTION_PAGE).await?;
            let full = page.len() == RETENTION_PAGE;
            let kept = page.iter().any(|r| r.max_timestamp >= cutoff);
            from = page.last().map_or(from, |r| r.end_offset);
            out.extend(page);
            if kept || !full {
                return Ok(out);
            }
        }
    }

    /// Moves a stream's start offset as its retention asks, reading its ranges only when
    /// something the answer depends on changed or its time came.
    async fn apply_retention(&self, s: &Stream, now_ms: i64) {
        let seen = {
            let st = s.lock();
            Checked {
                retention: st.retention(),
                start: st.start_offset(),
                committed_end: st.committed_end(),
                hold: st.retention_hold(),
            }
        };
        let Checked {
            retention,
            start,
            hold,
            ..
        } = seen;
        if retention.ms.is_none() && retention.bytes.is_none() {
            return;
        }
        if seen.committed_end <= start {
            // Nothing in the object index to let go of.
            return;
        }
        if self
            .checked()
            .get(&s.id)
            .is_some_and(|(c, due)| *c == seen && now_ms < *due)
        {
            return;
        }
        self.meters.retention_checks.inc();
        let read = match retention.bytes {
            // The limit in bytes needs the size of all that is left.
            Some(_) => self.meta.ranges(s.id, start, usize::MAX >> 1).await,
            None => self.expired_ranges(s.id, start, retention, now_ms).await,
        };
        let ranges = match read {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(stream_id = s.id, error = %e, "retention could not read ranges; will retry");
                return;
            }
        };
        let mut new_start = start;
        if let Some(ms) = retention.ms {
            let cutoff = now_ms.saturating_sub(ms as i64);
            for r in ranges.iter().take_while(|r| r.max_timestamp < cutoff) {
                new_start = new_start.max(r.end_offset);
            }
        }
        if let Some(limit) = retention.bytes {
            // As Kafka does with segments: drop the oldest range while what remains is still
            // at least the limit.
            let mut total: u64 = ranges.iter().map(|r| r.size).sum();
            for r in &ranges {
                if total - r.size < limit {
                    break;
                }
                total -= r.size;
                new_start = new_start.max(r.end_offset);
            }
        }
        if let Some(hold) = hold {
            if new_start > hold {
                tracing::debug!(stream_id = s.id, due = new_start, hold, "retention held");
            }
            new_start = new_start.min(hold.max(start));
        }
        if new_start > start {
            tracing::debug!(
                stream_id = s.id,
                from = start,
                to = new_start,
                "retention moves the start offset"
            );
            if let Err(e) = trim_stream(&*self.meta, s, new_start).await {
                // The stream may be gone (its topic deleted) since the list was taken.
                tracing::warn!(stream_id = s.id, error = %e, "retention could not move the start offset; will retry");
            }
            // The start moved (or failed to): the next round checks again.
            self.checked().remove(&s.id);
            return;
        }
        let due = due_ms(&ranges, start, retention);
        self.checked().insert(s.id, (seen, due));
    }
}

/// Moves a stream's start offset forward (retention, DeleteRecords) in the metadata store, then
/// in the stream, whose log cache lets go of what is below it; the new start.
pub(crate) async fn trim_stream(
    meta: &dyn MetaStore,
    s: &Stream,
    start_offset: u64,
) -> Result<u64> {
    let m = meta.trim_stream(s.id, start_offset).await?;
    let mut st = s.lock();
    st.move_start(m.start_offset.max(start_offset));
    let start = st.start_offset();
    st.evict_until(start);
    Ok(start)
}
