//! Consumer groups follow: the committed offsets of the groups a link names are copied from the
//! source as they are committed there, unchanged (a mirror keeps the source's offsets, so
//! nothing is translated), into the groups of the same name here. Each broker copies the
//! groups it coordinates.
//!
//! A group's offsets here are written only while the group has no members here: once its
//! consumers run against this cluster, its offsets are theirs. An offset never goes back: a
//! group that consumed here and stopped is not sent back by an older offset of the source.

use std::collections::{BTreeMap, HashMap};

use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, OffsetFetchRequest};
use kafka_protocol::protocol::StrBytes;
use serde::Serialize;

use crate::conn::{error_of, Conn, ConnOptions};
use crate::LinkError;

/// One committed offset of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

/// What copying to a group here did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copied {
    Committed,
    /// The group has members here: its offsets are theirs now.
    HasMembers,
}

/// The groups of this cluster, as the link writes to them (implemented by the broker over its
/// group coordinator).
#[async_trait::async_trait]
pub trait GroupTarget: Send + Sync + 'static {
    /// Whether this broker coordinates `group` now.
    fn coordinates(&self, group: &str) -> bool;
    /// The group's committed offsets here.
    async fn committed(&self, group: &str) -> Result<Vec<GroupOffset>, String>;
    /// Commits `offsets` for `group` as an admin tool does (no member, no generation): refused
    /// while the group has members.
    async fn commit(&self, group: &str, offsets: &[GroupOffset]) -> Result<Copied, String>;
}

/// Where one group stands, as the link's status shows it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct GroupStatus {
    /// Partitions of mirror topics with a committed offset at the source.
    pub partitions: usize,
    /// Of those, partitions whose offset here is the source's.
    pub in_sync: usize,
    /// The group has members here: not written any more.
    pub moved: bool,
    /// Offsets written by the last round.
    #[serde(skip)]
    pub copied: usize,
}

/// The groups a link copies, with their committed offsets at the source (only partitions of
/// `topics`), asked of each group's coordinator there.
pub async fn source_offsets(
    conn: &mut Conn,
    brokers: &HashMap<i32, String>,
    opts: &ConnOptions,
    pool: &mut HashMap<String, Conn>,
    wanted: &(dyn Fn(&str) -> bool + Sync),
    topics: &(dyn Fn(&str) -> bool + Sync),
) -> Result<BTreeMap<String, Vec<GroupOffset>>, LinkError> {
    // ListGroups is answered by each broker for the groups it coordinates.
    let mut groups = Vec::new();
    for addr in brokers.values() {
        let c = pooled(pool, addr, opts).await?;
        let (_, r) = c.send(&ListGroupsRequest::default()).await?;
        if let Some(e) = error_of(r.error_code) {
            return Err(LinkError::Kafka {
                addr: addr.clone(),
                what: "ListGroups".into(),
                error: e.to_string(),
            });
        }
        groups.extend(
            r.groups
                .iter()
                .map(|g| g.group_id.0.to_string())
                .filter(|g| wanted(g)),
        );
    }
    groups.sort();
    groups.dedup();
    let mut out = BTreeMap::new();
    if groups.is_empty() {
        return Ok(out);
    }
    for (addr, gs) in coordinators(conn, &groups).await? {
        let c = pooled(pool, &addr, opts).await?;
        for (g, offsets) in fetch_offsets(c, &gs).await? {
            let offsets: Vec<GroupOffset> =
                offsets.into_iter().filter(|o| topics(&o.topic)).collect();
            out.insert(g, offsets);
        }
    }
    Ok(out)
}

async fn pooled<'a>(
    pool: &'a mut HashMap<String, Conn>,
    addr: &str,
    opts: &ConnOptions,
) -> Result<&'a mut Conn, LinkError> {
    if !pool.contains_key(addr) {
        let c = Conn::connect(addr, opts).await?;
        pool.insert(addr.to_string(), c);
    }
    pool.get_mut(addr)
        .ok_or_else(|| LinkError::Config("no connection".into()))
}

/// Each group's coordinator at the source: `host:port` -> its groups.
async fn coordinators(
    conn: &mut Conn,
    groups: &[String],
) -> Result<BTreeMap<String, Vec<String>>, LinkError> {
    let v = conn.version::<FindCoordinatorRequest>()?;
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let keys: Vec<Vec<String>> = if v >= 4 {
        vec![groups.to_vec()]
    } else {
        groups.iter().map(|g| vec![g.clone()]).collect()
    };
    for batch in keys {
        let req = if v >= 4 {
            FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(
                    batch
                        .iter()
                        .map(|g| StrBytes::from_string(g.clone()))
                        .collect(),
                )
        } else {
            FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_key(StrBytes::from_string(batch[0].clone()))
        };
        let (_, r) = conn.send(&req).await?;
        if v >= 4 {
            for c in &r.coordinators {
                if error_of(c.error_code).is_none() {
                    out.entry(format!("{}:{}", c.host, c.port))
                        .or_default()
                        .push(c.key.to_string());
                }
            }
        } else if error_of(r.error_code).is_none() {
            out.entry(format!("{}:{}", r.host, r.port))
                .or_default()
                .push(batch[0].clone());
        }
    }
    Ok(out)
}

/// The committed offsets of `groups`, asked of their coordinator.
async fn fetch_offsets(
    conn: &mut Conn,
    groups: &[String],
) -> Result<Vec<(String, Vec<GroupOffset>)>, LinkError> {
    let v = conn.version::<OffsetFetchRequest>()?;
    let mut out = Vec::new();
    if v >= 8 {
        let req = OffsetFetchRequest::default().with_groups(
            groups
                .iter()
                .map(|g| {
                    OffsetFetchRequestGroup::default()
                        .with_group_id(GroupId(StrBytes::from_string(g.clone())))
                        .with_member_epoch(-1)
                        .with_topics(None)
                })
                .collect(),
        );
        let (_, r) = conn.send(&req).await?;
        for g in r.groups {
            if error_of(g.error_code).is_some() {
                continue;
            }
            let offsets = g
                .topics
                .iter()
                .flat_map(|t| {
                    t.partitions.iter().filter_map(|p| {
                        committed(
                            &t.name.0,
                            p.partition_index,
                            p.committed_offset,
                            p.committed_leader_epoch,
                            p.metadata.as_ref(),
                            p.error_code,
                        )
                    })
                })
                .collect();
            out.push((g.group_id.0.to_string(), offsets));
        }
        return Ok(out);
    }
    for g in groups {
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(g.clone())))
            .with_topics(None);
        let (_, r) = conn.send(&req).await?;
        if error_of(r.error_code).is_some() {
            continue;
        }
        let offsets = r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().filter_map(|p| {
                    committed(
                        &t.name.0,
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata.as_ref(),
                        p.error_code,
                    )
                })
            })
            .collect();
        out.push((g.clone(), offsets));
    }
    Ok(out)
}

/// One partition of an OffsetFetch answer (whose versions spell it as two types), if it has
/// an offset committed.
fn committed(
    topic: &StrBytes,
    partition: i32,
    offset: i64,
    leader_epoch: i32,
    metadata: Option<&StrBytes>,
    error_code: i16,
) -> Option<GroupOffset> {
    (offset >= 0 && error_of(error_code).is_none()).then(|| GroupOffset {
        topic: topic.to_string(),
        partition,
        offset,
        leader_epoch,
        metadata: metadata.map(|m| m.to_string()).unwrap_or_default(),
    })
}

/// Copies one group's source offsets here: those that moved forward. Returns its status.
pub async fn copy_group(
    target: &dyn GroupTarget,
    group: &str,
    source: &[GroupOffset],
) -> Result<GroupStatus, String> {
    let here: HashMap<(String, i32), i64> = target
        .committed(group)
        .await?
        .into_iter()
        .map(|o| ((o.topic, o.partition), o.offset))
        .collect();
    let ahead: Vec<GroupOffset> = source
        .iter()
        .filter(|o| {
            here.get(&(o.topic.clone(), o.partition))
                .is_none_or(|&h| h < o.offset)
        })
        .cloned()
        .collect();
    let mut status = GroupStatus {
        partitions: source.len(),
        in_sync: source.len() - ahead.len(),
        moved: false,
        copied: 0,
    };
    if ahead.is_empty() {
        return Ok(status);
    }
    match target.commit(group, &ahead).await? {
        Copied::Committed => {
            status.in_sync = source.len();
            status.copied = ahead.len();
        }
        Copied::HasMembers => status.moved = true,
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Fake {
        offsets: Mutex<HashMap<(String, i32), i64>>,
        members: bool,
    }

    #[async_trait::async_trait]
    impl GroupTarget for Fake {
        fn coordinates(&self, _: &str) -> bool {
            true
        }
        async fn committed(&self, _: &str) -> Result<Vec<GroupOffset>, String> {
            Ok(self
                .offsets
                .lock()
                .unwrap()
                .iter()
                .map(|((t, p), o)| at(t, *p, *o))
                .collect())
        }
        async fn commit(&self, _: &str, offsets: &[GroupOffset]) -> Result<Copied, String> {
            if self.members {
                return Ok(Copied::HasMembers);
            }
            let mut m = self.offsets.lock().unwrap();
            for o in offsets {
                m.insert((o.topic.clone(), o.partition), o.offset);
            }
            Ok(Copied::Committed)
        }
    }

    fn at(t: &str, p: i32, o: i64) -> GroupOffset {
        GroupOffset {
            topic: t.into(),
            partition: p,
            offset: o,
            leader_epoch: -1,
            metadata: String::new(),
        }
    }

    #[tokio::test]
    async fn offsets_are_copied_forward_only_and_never_over_members() {
        let f = Fake::default();
        let s = copy_group(&f, "g", &[at("t", 0, 10), at("t", 1, 5)])
            .await
            .unwrap();
        assert_eq!((s.partitions, s.in_sync, s.moved), (2, 2, false));
        // Consumed further here, then stopped: an older source offset does not send it back.
        f.offsets.lock().unwrap().insert(("t".into(), 0), 50);
        let s = copy_group(&f, "g", &[at("t", 0, 20), at("t", 1, 7)])
            .await
            .unwrap();
        assert_eq!(f.offsets.lock().unwrap()[&("t".to_string(), 0)], 50);
        assert_eq!(f.offsets.lock().unwrap()[&("t".to_string(), 1)], 7);
        assert_eq!(s.in_sync, 2);
        let busy = Fake {
            members: true,
            ..Fake::default()
        };
        let s = copy_group(&busy, "g", &[at("t", 0, 10)]).await.unwrap();
        assert!(s.moved);
        assert!(busy.offsets.lock().unwrap().is_empty());
    }
}
