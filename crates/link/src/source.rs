//! The source cluster as a link sees it: its brokers, its topics (ids, partitions and their
//! leaders), their configs, and offsets, asked of whichever broker answers.

use std::collections::{BTreeMap, HashMap};

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    BrokerId, DescribeConfigsRequest, ListOffsetsRequest, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::conn::{error_of, Conn, ConnOptions};
use crate::LinkError;

/// Kafka's resource type of a topic in DescribeConfigs.
const TOPIC_RESOURCE: i8 = 2;
/// A config set on the topic itself (not a broker's or Kafka's default): `DYNAMIC_TOPIC_CONFIG`.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;

/// ListOffsets' timestamps for the log's start and end.
pub const EARLIEST: i64 = -2;
pub const LATEST: i64 = -1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePartition {
    pub index: i32,
    /// -1: no leader right now.
    pub leader: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceTopic {
    pub name: String,
    pub id: Uuid,
    pub internal: bool,
    pub partitions: Vec<SourcePartition>,
}

/// What a Metadata request told of the source.
#[derive(Debug, Clone, Default)]
pub struct SourceMetadata {
    /// Broker id -> `host:port`.
    pub brokers: HashMap<i32, String>,
    pub topics: BTreeMap<String, SourceTopic>,
}

impl SourceMetadata {
    pub fn leader_of(&self, topic: &str, index: i32) -> Option<i32> {
        let p = self
            .topics
            .get(topic)?
            .partitions
            .iter()
            .find(|p| p.index == index)?;
        (p.leader >= 0).then_some(p.leader)
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Connects to any of `addrs`, in turn: the first that answers.
pub async fn connect_any(addrs: &[String], opts: &ConnOptions) -> Result<Conn, LinkError> {
    let mut last = None;
    for a in addrs {
        match Conn::connect(a, opts).await {
            Ok(c) => return Ok(c),
            Err(e) => {
                tracing::debug!(addr = %a, error = %e, "source broker did not answer");
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| LinkError::Config("no source broker to connect to".into())))
}

/// Every topic of the source (`topics` `None`), or those named.
pub async fn metadata(
    conn: &mut Conn,
    topics: Option<&[String]>,
) -> Result<SourceMetadata, LinkError> {
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(false)
        .with_topics(topics.map(|names| {
            names
                .iter()
                .map(|n| {
                    kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                        .with_name(Some(TopicName(s(n))))
                })
                .collect()
        }));
    let (_, r) = conn.send(&req).await?;
    let brokers = r
        .brokers
        .iter()
        .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
        .collect();
    let mut out = BTreeMap::new();
    for t in &r.topics {
        let Some(name) = &t.name else { continue };
        if error_of(t.error_code).is_some() {
            // Unknown here or being created: looked at again at the next refresh.
            continue;
        }
        let mut partitions: Vec<SourcePartition> = t
            .partitions
            .iter()
            .map(|p| SourcePartition {
                index: p.partition_index,
                leader: p.leader_id.0,
            })
            .collect();
        partitions.sort_by_key(|p| p.index);
        out.insert(
            name.0.to_string(),
            SourceTopic {
                name: name.0.to_string(),
                id: t.topic_id,
                internal: t.is_internal,
                partitions,
            },
        );
    }
    Ok(SourceMetadata {
        brokers,
        topics: out,
    })
}

/// The configs set on each of `topics` at the source (not defaults), by topic.
pub async fn topic_configs(
    conn: &mut Conn,
    topics: &[String],
) -> Result<BTreeMap<String, BTreeMap<String, String>>, LinkError> {
    if topics.is_empty() {
        return Ok(BTreeMap::new());
    }
    let req = DescribeConfigsRequest::default().with_resources(
        topics
            .iter()
            .map(|t| {
                DescribeConfigsResource::default()
                    .with_resource_type(TOPIC_RESOURCE)
                    .with_resource_name(s(t))
                    .with_configuration_keys(None)
            })
            .collect(),
    );
    let (_, r) = conn.send(&req).await?;
    let mut out = BTreeMap::new();
    for res in &r.results {
        if let Some(e) = error_of(res.error_code) {
            tracing::debug!(topic = %res.resource_name, error = %e, "source topic configs not read");
            continue;
        }
        let configs = res
            .configs
            .iter()
            .filter(|c| c.config_source == DYNAMIC_TOPIC_CONFIG && !c.is_sensitive)
            .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
            .collect();
        out.insert(res.resource_name.to_string(), configs);
    }
    Ok(out)
}

/// The offsets at `timestamp` ([`EARLIEST`], [`LATEST`]) of partitions led by the broker of
/// `conn`: `(topic, partition) -> offset`; partitions that answered with an error are left out.
pub async fn list_offsets(
    conn: &mut Conn,
    parts: &[(String, i32)],
    timestamp: i64,
) -> Result<HashMap<(String, i32), i64>, LinkError> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in parts {
        by_topic.entry(t).or_default().push(*p);
    }
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(
            by_topic
                .iter()
                .map(|(t, ps)| {
                    ListOffsetsTopic::default()
                        .with_name(TopicName(s(t)))
                        .with_partitions(
                            ps.iter()
                                .map(|&p| {
                                    ListOffsetsPartition::default()
                                        .with_partition_index(p)
                                        .with_current_leader_epoch(-1)
                                        .with_timestamp(timestamp)
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    let (_, r) = conn.send(&req).await?;
    let mut out = HashMap::new();
    for t in &r.topics {
        for p in &t.partitions {
            if error_of(p.error_code).is_none() {
                out.insert((t.name.0.to_string(), p.partition_index), p.offset);
            }
        }
    }
    Ok(out)
}
