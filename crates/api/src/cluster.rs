//! ApiVersions, Metadata, DescribeCluster, FindCoordinator, InitProducerId.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use uuid::Uuid;
use weir_partition::topics::validate_topic_name;

use crate::{str, supported_versions, Broker};

/// Bits of the operations a client may do on a topic, for `include_topic_authorized_operations`
/// (no ACLs yet: everything is allowed).
const TOPIC_OPERATIONS: i32 =
    (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11);
const CLUSTER_OPERATIONS: i32 =
    (1 << 4) | (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12);

pub fn api_versions(error_code: i16) -> ApiVersionsResponse {
    let api_keys = ApiKey::iter()
        .filter_map(|k| {
            supported_versions(k).map(|(min, max)| {
                ApiVersion::default()
                    .with_api_key(k as i16)
                    .with_min_version(min)
                    .with_max_version(max)
            })
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys)
        .with_finalized_features_epoch(-1)
}

impl Broker {
    fn me(&self) -> MetadataResponseBroker {
        MetadataResponseBroker::default()
            .with_node_id(BrokerId(self.identity.node_id))
            .with_host(str(&self.identity.host))
            .with_port(self.identity.port)
            .with_rack(self.identity.rack.as_deref().map(str))
    }

    pub(crate) async fn metadata(&self, r: MetadataRequest, version: i16) -> MetadataResponse {
        // Auto-creation as Kafka does it: from Metadata requests that allow it (v0-3 always do).
        let allow_create = version < 4 || r.allow_auto_topic_creation;
        let wanted: Option<Vec<(Option<String>, Uuid)>> = r.topics.map(|ts| {
            ts.into_iter()
                .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
                .collect()
        });
        let topics = match wanted {
            None => self
                .topics
                .list()
                .into_iter()
                .map(|t| self.topic_metadata(&t))
                .collect(),
            Some(wanted) => {
                let mut out = Vec::with_capacity(wanted.len());
                for (name, id) in wanted {
                    // A topic asked for by id (Java sends an empty name beside it) is looked up by
                    // id and never created.
                    let name = if id.is_nil() { name } else { None };
                    let found = match &name {
                        Some(n) if allow_create => self.topics.get_or_create(n).await,
                        Some(n) => self.topics.get(n),
                        None => self.topics.get_by_id(id.as_bytes()),
                    };
                    out.push(match (found, name) {
                        (Some(t), _) => self.topic_metadata(&t),
                        (None, Some(n)) => {
                            let code = if validate_topic_name(&n).is_err() {
                                ResponseError::InvalidTopicException
                            } else {
                                ResponseError::UnknownTopicOrPartition
                            };
                            MetadataResponseTopic::default()
                                .with_name(Some(TopicName(str(&n))))
                                .with_error_code(code.code())
                        }
                        (None, None) => MetadataResponseTopic::default()
                            .with_topic_id(id)
                            .with_error_code(ResponseError::UnknownTopicId.code()),
                    });
                }
                out
            }
        };
        let topics = topics
            .into_iter()
            .map(|t| {
                if r.include_topic_authorized_operations {
                    t.with_topic_authorized_operations(TOPIC_OPERATIONS)
                } else {
                    t
                }
            })
            .collect();
        MetadataResponse::default()
            .with_brokers(vec![self.me()])
            .with_cluster_id(Some(str(&self.identity.cluster_id)))
            .with_controller_id(BrokerId(self.identity.node_id))
            .with_topics(topics)
            .with_cluster_authorized_operations(if r.include_cluster_authorized_operations {
                CLUSTER_OPERATIONS
            } else {
                i32::MIN
            })
    }

    fn topic_metadata(&self, t: &weir_partition::Topic) -> MetadataResponseTopic {
        let me = BrokerId(self.identity.node_id);
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(str(&t.name))))
            .with_topic_id(Uuid::from_bytes(t.id))
            .with_topic_authorized_operations(i32::MIN)
            .with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        MetadataResponsePartition::default()
                            .with_partition_index(p.index)
                            .with_leader_id(me)
                            .with_leader_epoch(p.leader_epoch)
                            .with_replica_nodes(vec![me])
                            .with_isr_nodes(vec![me])
                    })
                    .collect(),
            )
    }

    pub(crate) fn describe_cluster(
        &self,
        r: DescribeClusterRequest,
        _version: i16,
    ) -> DescribeClusterResponse {
        DescribeClusterResponse::default()
            .with_endpoint_type(r.endpoint_type)
            .with_cluster_id(str(&self.identity.cluster_id))
            .with_controller_id(BrokerId(self.identity.node_id))
            .with_brokers(vec![DescribeClusterBroker::default()
                .with_broker_id(BrokerId(self.identity.node_id))
                .with_host(str(&self.identity.host))
                .with_port(self.identity.port)
                .with_rack(self.identity.rack.as_deref().map(str))])
            .with_cluster_authorized_operations(if r.include_cluster_authorized_operations {
                CLUSTER_OPERATIONS
            } else {
                i32::MIN
            })
    }

    pub(crate) fn find_coordinator(
        &self,
        r: FindCoordinatorRequest,
        version: i16,
    ) -> FindCoordinatorResponse {
        // Group coordination lives on every broker of a single-node cluster; transactions are
        // not implemented yet.
        let answer = |key: StrBytesAlias| {
            let (code, msg) = if r.key_type == 0 {
                (0, None)
            } else {
                (
                    ResponseError::CoordinatorNotAvailable.code(),
                    Some(str("Weir does not implement transactions yet")),
                )
            };
            Coordinator::default()
                .with_key(key)
                .with_node_id(BrokerId(if code == 0 { self.identity.node_id } else { -1 }))
                .with_host(if code == 0 {
                    str(&self.identity.host)
                } else {
                    str("")
                })
                .with_port(if code == 0 { self.identity.port } else { -1 })
                .with_error_code(code)
                .with_error_message(msg)
        };
        if version >= 4 {
            FindCoordinatorResponse::default()
                .with_coordinators(r.coordinator_keys.into_iter().map(answer).collect())
        } else {
            let c = answer(r.key);
            FindCoordinatorResponse::default()
                .with_error_code(c.error_code)
                .with_error_message(c.error_message)
                .with_node_id(c.node_id)
                .with_host(c.host)
                .with_port(c.port)
        }
    }

    pub(crate) async fn init_producer_id(
        &self,
        r: InitProducerIdRequest,
    ) -> InitProducerIdResponse {
        let fail = |e: ResponseError| {
            InitProducerIdResponse::default()
                .with_error_code(e.code())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        };
        if r.transactional_id.is_some() {
            return fail(ResponseError::TransactionalIdAuthorizationFailed);
        }
        // An idempotent producer that asks with its id and epoch gets the epoch bumped (KIP-360),
        // which resets its sequences; a new producer gets a new id.
        if r.producer_id.0 >= 0 && r.producer_epoch >= 0 && r.producer_epoch < i16::MAX - 1 {
            return InitProducerIdResponse::default()
                .with_producer_id(r.producer_id)
                .with_producer_epoch(r.producer_epoch + 1);
        }
        match self.next_producer_id().await {
            Ok(id) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(id))
                .with_producer_epoch(0),
            Err(e) => {
                tracing::warn!(error = %e, "allocating a producer id failed");
                fail(ResponseError::CoordinatorNotAvailable)
            }
        }
    }

    async fn next_producer_id(&self) -> Result<i64, weir_meta::MetaError> {
        const BLOCK: u64 = 1000;
        loop {
            {
                let mut ids = self.producer_ids.lock().unwrap_or_else(|e| e.into_inner());
                if ids.0 < ids.1 {
                    ids.0 += 1;
                    return Ok(ids.0 - 1);
                }
            }
            let _refill = self.producer_id_refill.lock().await;
            let empty = {
                let ids = self.producer_ids.lock().unwrap_or_else(|e| e.into_inner());
                ids.0 >= ids.1
            };
            if empty {
                let first = self.meta.allocate_ids("producer", BLOCK).await? as i64;
                *self.producer_ids.lock().unwrap_or_else(|e| e.into_inner()) =
                    (first, first + BLOCK as i64);
            }
        }
    }
}

type StrBytesAlias = kafka_protocol::protocol::StrBytes;
