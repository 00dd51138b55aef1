//! The consumer protocol embedded in the classic group protocol: a consumer's subscription in
//! its JoinGroup metadata and its assignment in SyncGroup, each a version then that version's
//! fields (`ConsumerProtocolSubscription`, `ConsumerProtocolAssignment`). Classic groups read
//! subscriptions from it; classic members of consumer groups are answered in it.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedTopic;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::assignor::{Assignment, TopicId};

/// A classic member's consumer protocol subscription, as far as the group needs it.
pub(crate) struct Subscription {
    pub topics: Vec<String>,
    pub owned: Vec<(String, Vec<i32>)>,
    pub rack_id: Option<String>,
}

/// Splits consumer protocol bytes into their version and the rest.
pub(crate) fn versioned(bytes: &Bytes) -> Option<(i16, Bytes)> {
    let mut buf = bytes.clone();
    if buf.len() < 2 {
        return None;
    }
    let version = buf.get_i16();
    (version >= 0).then_some((version, buf))
}

/// A ConsumerProtocolSubscription (every version starts with the topic list, so newer versions
/// read as the newest this build knows).
pub(crate) fn decode_subscription(metadata: &Bytes) -> Option<Subscription> {
    let (version, mut buf) = versioned(metadata)?;
    let sub = ConsumerProtocolSubscription::decode(&mut buf, version.min(3)).ok()?;
    Some(Subscription {
        topics: sub.topics.into_iter().map(|t| t.to_string()).collect(),
        owned: sub
            .owned_partitions
            .into_iter()
            .map(|t| (t.topic.to_string(), t.partitions))
            .collect(),
        rack_id: sub.rack_id.map(|r| r.to_string()),
    })
}

pub(crate) fn decode_assignment(bytes: &Bytes) -> Option<Vec<(String, Vec<i32>)>> {
    if bytes.is_empty() {
        return Some(Vec::new());
    }
    let (version, mut buf) = versioned(bytes)?;
    let a = ConsumerProtocolAssignment::decode(&mut buf, version.min(3)).ok()?;
    Some(
        a.assigned_partitions
            .into_iter()
            .map(|t| (t.topic.to_string(), t.partitions))
            .collect(),
    )
}

/// A ConsumerProtocolAssignment at the version of the member's subscription (as Kafka).
pub(crate) fn encode_assignment(
    version: i16,
    a: &Assignment,
    names: &BTreeMap<TopicId, String>,
) -> Bytes {
    let version = version.clamp(0, 3);
    let mut out = ConsumerProtocolAssignment::default();
    out.assigned_partitions = a
        .iter()
        .filter_map(|(t, ps)| {
            let mut at = AssignedTopic::default();
            at.topic = TopicName(StrBytes::from_string(names.get(t)?.clone()));
            at.partitions = ps.iter().copied().collect();
            Some(at)
        })
        .collect();
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    if out.encode(&mut buf, version).is_err() {
        // Every field exists at every version: this does not happen.
        return Bytes::new();
    }
    buf.freeze()
}
