//! Snapshot expiry: a table committed to every few seconds gains thousands of snapshots a day,
//! each listed in every later metadata file, so the translator expires those older than the
//! topic's `weir.iceberg.snapshot.max.age.ms` (one hour unless set) after its commits.
//!
//! The snapshots from the current one back to the newest that carries this topic's progress
//! (see [`crate::progress`]) are never expired, whatever their age: without that record, the
//! next translator would not know where the table is. An expired snapshot's manifest list is
//! deleted; its manifests and data files are not, since every snapshot of an append-only
//! table still lists them (a rewrite by another engine leaves files only that engine's
//! orphan-file removal knows are unused).

use std::time::Duration;

use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, Result};

use crate::progress::Progress;

/// Expiry runs once the oldest snapshot is this much older than the age limit (in tenths of
/// it): a tenth of the snapshots at a time, not one per commit.
const SLACK_TENTHS: u32 = 1;

/// The snapshots of `table` to expire now: older than `max_age` (at `now_ms`), none of those
/// protected; empty until the oldest is past the limit by a tenth of it.
pub fn due(
    table: &Table,
    cluster: &str,
    topic_id: &str,
    max_age: Duration,
    now_ms: i64,
) -> Vec<i64> {
    let metadata = table.metadata();
    let Some(current) = metadata.current_snapshot_id() else {
        return Vec::new();
    };
    let age = i64::try_from(max_age.as_millis()).unwrap_or(i64::MAX);
    let cutoff = now_ms.saturating_sub(age);
    let slack = i64::try_from((max_age * SLACK_TENTHS / 10).as_millis()).unwrap_or(i64::MAX);
    let oldest = metadata.snapshots().map(|s| s.timestamp_ms()).min();
    if oldest.is_none_or(|o| o >= cutoff.saturating_sub(slack)) {
        return Vec::new();
    }
    // The main branch's history, newest first: what is past the newest progress record of
    // this topic and older than the cutoff goes. Snapshots off that history (other branches'
    // and tags') are the engine's business.
    let mut past_progress = false;
    let mut out = Vec::new();
    for s in iceberg::util::snapshot::ancestors_of(&table.metadata_ref(), current) {
        if past_progress && s.timestamp_ms() < cutoff {
            out.push(s.snapshot_id());
        }
        if Progress::of(&s).is_some_and(|p| p.cluster == cluster && p.topic_id == topic_id) {
            past_progress = true;
        }
    }
    out
}

/// Expires `ids` of `table` and deletes their manifest lists; the table after.
pub async fn expire(catalog: &dyn Catalog, table: &Table, ids: Vec<i64>) -> Result<Table> {
    let lists: Vec<String> = ids
        .iter()
        .filter_map(|id| table.metadata().snapshot_by_id(*id))
        .map(|s| s.manifest_list().to_string())
        .collect();
    let tx = Transaction::new(table);
    // Only the ids given: no age of the action's own (a cutoff before every snapshot).
    let action = tx
        .expire_snapshots()
        .expire_snapshot_ids(ids)
        .expire_older_than_ms(0)
        .retain_last(1);
    let after = action.apply(tx)?.commit(catalog).await?;
    for l in lists {
        if let Err(e) = after.file_io().delete(&l).await {
            tracing::debug!(file = %l, error = %e, "iceberg: an expired manifest list not deleted");
        }
    }
    Ok(after)
}
