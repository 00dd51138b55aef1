//! Requests that reach a partition's new leader before it has opened the partition.
//!
//! During a move the old leader answers NOT_LEADER_OR_FOLLOWER naming the new leader (KIP-951),
//! and clients come here at once, often before the new leader has heard of the hand-over and
//! opened the partition. Answering them NOT_LEADER_OR_FOLLOWER too would send them into their
//! error back-off (librdkafka's `fetch.error.backoff.ms` is 500 ms), which would be most of a
//! move's unavailability. Instead the request waits, briefly and bounded, for the partition to
//! open here. Waiting in the handler holds the connection's next request too, so a producer's
//! batches keep their order.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::RequestKind;
use weir_partition::{Lookup, Topic};

use crate::Broker;

/// How long a request waits for a partition that is being opened here. A move takes a few
/// hundred milliseconds at most; past this the client gets NOT_LEADER_OR_FOLLOWER as before.
const OPENING_WAIT: Duration = Duration::from_secs(2);

/// How often the wait looks at the cluster view again, which changes without waking it.
const OPENING_POLL: Duration = Duration::from_millis(10);

/// A partition a request names: topic, index, and the leader epoch the client knows (-1 if it
/// does not say).
type Named = (String, i32, i32);

impl Broker {
    /// Waits until no partition of `request` is about to be opened here, or [`OPENING_WAIT`]
    /// has passed. Costs one look-up per partition when every partition is open here.
    pub(crate) async fn wait_for_opening(&self, request: &RequestKind, version: i16) {
        let mut named = self.not_open_here(request, version);
        if named.is_empty() {
            return;
        }
        let deadline = tokio::time::Instant::now() + OPENING_WAIT;
        loop {
            let opened = self.topics.partition_opened();
            named.retain(|n| self.coming_here(n));
            if named.is_empty() {
                return;
            }
            tokio::select! {
                _ = opened => {}
                _ = tokio::time::sleep(OPENING_POLL) => {}
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::debug!(partitions = ?named, "partitions did not open here in time");
                    return;
                }
            }
        }
    }

    /// Whether the partition is not open here but will be: the view makes this broker its
    /// leader or a move's target, or the client knows a newer leader epoch than this broker's
    /// view (the old leader's hint got to the client before the change got here).
    fn coming_here(&self, (topic, index, client_epoch): &Named) -> bool {
        if !matches!(self.topics.lookup(topic, *index), Lookup::NotHere)
            || self.topics.failed_to_open(topic, *index)
        {
            return false;
        }
        let Ok(index) = u32::try_from(*index) else {
            return false;
        };
        let view = self.cluster.view();
        let Some(a) = view.assignment(topic, index) else {
            return false;
        };
        let me = Some(self.cluster.node_id());
        match a.target {
            Some(_) => a.target == me,
            // Not while this broker is handing it over: then clients must go elsewhere now.
            None => a.leader == me || u64::try_from(*client_epoch).is_ok_and(|e| e > a.epoch),
        }
    }

    /// The partitions of a Produce, Fetch, ListOffsets or OffsetForLeaderEpoch request that
    /// exist but are not open here.
    fn not_open_here(&self, request: &RequestKind, version: i16) -> Vec<Named> {
        let mut named = Vec::new();
        let by_name = |name: &str| self.topics.get(name);
        let by_id = |id: &uuid::Uuid| self.topics.get_by_id(id.as_bytes());
        match request {
            RequestKind::Produce(r) => {
                for t in &r.topic_data {
                    let topic = if version >= 13 {
                        by_id(&t.topic_id)
                    } else {
                        by_name(&t.name.0)
                    };
                    let parts = t.partition_data.iter().map(|p| (p.index, -1));
                    self.not_here(topic, parts, &mut named);
                }
            }
            RequestKind::Fetch(r) => {
                for t in &r.topics {
                    let topic = if version >= 13 {
                        by_id(&t.topic_id)
                    } else {
                        by_name(&t.topic.0)
                    };
                    let parts = t
                        .partitions
                        .iter()
                        .map(|p| (p.partition, p.current_leader_epoch));
                    self.not_here(topic, parts, &mut named);
                }
            }
            RequestKind::ListOffsets(r) => {
                for t in &r.topics {
                    let parts = t
                        .partitions
                        .iter()
                        .map(|p| (p.partition_index, p.current_leader_epoch));
                    self.not_here(by_name(&t.name.0), parts, &mut named);
                }
            }
            RequestKind::OffsetForLeaderEpoch(r) => {
                for t in &r.topics {
                    let parts = t
                        .partitions
                        .iter()
                        .map(|p| (p.partition, p.current_leader_epoch));
                    self.not_here(by_name(&t.topic.0), parts, &mut named);
                }
            }
            _ => {}
        }
        named
    }

    /// Adds to `named` the partitions of `topic` among `parts` (index, the leader epoch the
    /// client knows) that exist but are not open here; one look for the whole topic, and no
    /// copy of its name for a partition open here (a fetch names thousands).
    fn not_here(
        &self,
        topic: Option<Arc<Topic>>,
        parts: impl Iterator<Item = (i32, i32)> + Clone,
        named: &mut Vec<Named>,
    ) {
        let Some(t) = topic else { return };
        let at = self
            .topics
            .not_here_in(&t, parts.clone().map(|(index, _)| index));
        let mut at = at.into_iter().peekable();
        for (k, (index, epoch)) in parts.enumerate() {
            if at.peek() == Some(&k) {
                at.next();
                named.push((t.name.clone(), index, epoch));
            }
        }
    }
}
