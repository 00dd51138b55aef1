//! How far a table has a topic: each commit's snapshot carries, in its summary, the next offset
//! of every partition of the topic it has (all of them, carried forward from the snapshot it
//! was made on), the cluster and topic they are of, and the snapshot they were read from.
//!
//! That is the exactly-once record. A translator reads it from the table (the newest snapshot
//! with one for this cluster and topic: another writer, a compaction or Spark may add snapshots
//! without it), writes the records from those offsets on, and commits with the offsets moved
//! past them and `parent` set to the snapshot it read. A commit whose `parent` is not the
//! table's current snapshot when it lands is refused (the catalog checks it, see
//! `crate::catalog`): someone else committed since, so the offsets may be stale, and the
//! translator reads them again instead of writing records twice.

use std::collections::BTreeMap;

use iceberg::spec::{SnapshotRef, TableMetadataRef};
use serde::{Deserialize, Serialize};

/// The snapshot summary property.
pub const PROPERTY: &str = "weir.commit";

/// One commit's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// The Kafka cluster id.
    pub cluster: String,
    /// The topic's id (a topic deleted and created again under its name is another topic).
    pub topic_id: String,
    /// The snapshot the offsets were read from (`None`: the table had none).
    pub parent: Option<i64>,
    /// Partition -> the first offset not in the table.
    pub offsets: BTreeMap<i32, i64>,
}

impl Progress {
    /// The record of `snapshot`, if it has one (one that does not parse is not ours).
    pub fn of(snapshot: &SnapshotRef) -> Option<Progress> {
        let text = snapshot.summary().additional_properties.get(PROPERTY)?;
        serde_json::from_str(text).ok()
    }

    /// The summary property's value.
    pub fn to_property(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// What the table has of the topic: the newest record of `cluster` and `topic_id` among the
/// current snapshot and its ancestors (empty offsets: none), and the current snapshot, which
/// the next commit names as its parent.
pub fn committed(metadata: &TableMetadataRef, cluster: &str, topic_id: &str) -> Progress {
    let current = metadata.current_snapshot_id();
    let found = current.and_then(|id| {
        iceberg::util::snapshot::ancestors_of(metadata, id)
            .filter_map(|s| Progress::of(&s))
            .find(|p| p.cluster == cluster && p.topic_id == topic_id)
    });
    Progress {
        cluster: cluster.to_string(),
        topic_id: topic_id.to_string(),
        parent: current,
        offsets: found.map(|p| p.offsets).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_through_its_property() {
        let p = Progress {
            cluster: "c".into(),
            topic_id: "t".into(),
            parent: Some(7),
            offsets: BTreeMap::from([(0, 10), (3, 4)]),
        };
        let text = p.to_property();
        assert!(text.contains(r#""offsets":{"0":10,"3":4}"#), "{text}");
        assert_eq!(serde_json::from_str::<Progress>(&text).expect("parse"), p);
    }
}
