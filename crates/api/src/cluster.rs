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
use weir_cluster::ClusterView;
use weir_partition::topics::validate_topic_name;

use crate::{endpoint, str, supported_versions, Broker};

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
    // Feature levels clients read (ApiVersions v3+): Transactions V2 (KIP-890 part 2), which
    // Java and franz-go producers use once it is finalized, and the consumer group protocol.
    const FEATURES: [(&str, i16, i16); 2] =
        [("transaction.version", 0, 2), ("group.version", 0, 1)];
    let supported = FEATURES
        .iter()
        .map(|(name, min, max)| {
            api_versions_response::SupportedFeatureKey::default()
                .with_name(str(name))
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect();
    let finalized = FEATURES
        .iter()
        .map(|(name, _, max)| {
            api_versions_response::FinalizedFeatureKey::default()
                .with_name(str(name))
                .with_min_version_level(*max)
                .with_max_version_level(*max)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys)
        .with_supported_features(supported)
        .with_finalized_features(finalized)
        .with_finalized_features_epoch(1)
}

fn rack(zone: &str) -> Option<StrBytesAlias> {
    (!zone.is_empty()).then(|| str(zone))
}

impl Broker {
    /// Every broker clients can reach, from this broker's view of the cluster.
    fn metadata_brokers(&self, view: &ClusterView, listener: &str) -> Vec<MetadataResponseBroker> {
        view.reachable_brokers()
            .filter_map(|b| {
                let (host, port) = endpoint(b, listener)?;
                Some(
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(b.node_id))
                        .with_host(str(host))
                        .with_port(port)
                        .with_rack(rack(&b.zone)),
                )
            })
            .collect()
    }

    /// The controller, or this broker while there is none: clients send admin requests to the
    /// id named here, and every Weir broker serves them (as KRaft brokers forward them), so the
    /// answer must always be a broker that is up.
    fn controller_id(&self, view: &ClusterView) -> BrokerId {
        let controller = view
            .controller
            .map(|c| c.node_id)
            .filter(|&id| view.reachable_brokers().any(|b| b.node_id == id));
        BrokerId(controller.unwrap_or(self.cluster.node_id()))
    }

    pub(crate) async fn metadata(
        &self,
        r: MetadataRequest,
        version: i16,
        zone: Option<&str>,
        listener: &str,
    ) -> MetadataResponse {
        // Auto-creation as Kafka does it: from Metadata requests that allow it (v0-3 always do).
        // Decoded as true below v4 (those versions always auto-create); the authorizer turns it
        // off for a principal without CREATE.
        let _ = version;
        let allow_create = r.allow_auto_topic_creation;
        let wanted: Option<Vec<(Option<String>, Uuid)>> = r.topics.map(|ts| {
            ts.into_iter()
                .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
                .collect()
        });
        let view = self.cluster.view();
        let topics = match wanted {
            None => self
                .topics
                .list()
                .into_iter()
                .map(|t| self.topic_metadata(&t, &view, zone))
                .chain(std::iter::once(self.offsets_topic_metadata(&view)))
                .collect(),
            Some(wanted) => {
                let mut out = Vec::with_capacity(wanted.len());
                for (name, id) in wanted {
                    // A topic asked for by id (Java sends an empty name beside it) is looked up by
                    // id and never created.
                    let name = if id.is_nil() { name } else { None };
                    if name.as_deref() == Some(crate::surface::OFFSETS_TOPIC) {
                        out.push(self.offsets_topic_metadata(&view));
                        continue;
                    }
                    let found = match &name {
                        Some(n) if allow_create => {
                            let existed = self.topics.get(n).is_some();
                            let t = self.topics.get_or_create(n).await;
                            if !existed && t.is_some() {
                                self.wait_for_leaders(n).await;
                            }
                            t
                        }
                        Some(n) => match self.topics.get(n) {
                            Some(t) => Some(t),
                            // Created through another broker a moment ago, before the
                            // announcement reached this one: read the catalog, not "unknown".
                            None => {
                                if let Err(e) = self.topics.refresh().await {
                                    tracing::debug!(error = %e, "reading topics failed");
                                }
                                self.topics.get(n)
                            }
                        },
                        None => self.topics.get_by_id(id.as_bytes()),
                    };
                    out.push(match (found, name) {
                        (Some(t), _) => self.topic_metadata(&t, &self.cluster.view(), zone),
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
        // A topic created just now may have been placed since the view was taken.
        let view = self.cluster.view();
        MetadataResponse::default()
            .with_brokers(self.metadata_brokers(&view, listener))
            .with_cluster_id(Some(str(&self.identity.cluster_id)))
            .with_controller_id(self.controller_id(&view))
            .with_topics(topics)
            .with_cluster_authorized_operations(if r.include_cluster_authorized_operations {
                CLUSTER_OPERATIONS
            } else {
                i32::MIN
            })
    }

    /// A topic's partitions as a client of `zone` sees them: each names the broker that serves
    /// it to that zone (its leader, or a broker of the zone that forwards to it).
    fn topic_metadata(
        &self,
        t: &weir_partition::Topic,
        view: &ClusterView,
        zone: Option<&str>,
    ) -> MetadataResponseTopic {
        let routing = self.routing(t);
        let local_epochs = self.topics.local_leader_epochs(t);
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(str(&t.name))))
            .with_topic_id(Uuid::from_bytes(t.id))
            .with_topic_authorized_operations(i32::MIN)
            .with_partitions(
                (0..t.partition_count() as u32)
                    .map(|i| {
                        let p = MetadataResponsePartition::default().with_partition_index(i as i32);
                        // A partition led here reports its own epoch, which the view learns
                        // of only after the store announces it.
                        let local_epoch = local_epochs
                            .get(i as usize)
                            .copied()
                            .flatten()
                            .map(|e| e as u64);
                        match weir_zone::route(view, zone, routing, &t.name, i) {
                            Some(route) => {
                                let epoch = local_epoch.unwrap_or(route.epoch);
                                let id = BrokerId(route.broker.node_id);
                                p.with_leader_id(id)
                                    .with_leader_epoch(epoch as i32)
                                    .with_replica_nodes(vec![id])
                                    .with_isr_nodes(vec![id])
                            }
                            // Not placed yet, or its broker is gone: clients retry (Kafka
                            // answers a new topic's partitions the same way).
                            None => p
                                .with_error_code(ResponseError::LeaderNotAvailable.code())
                                .with_leader_id(BrokerId(-1))
                                .with_leader_epoch(-1),
                        }
                    })
                    .collect(),
            )
    }

    pub(crate) fn describe_cluster(
        &self,
        r: DescribeClusterRequest,
        _version: i16,
        listener: &str,
    ) -> DescribeClusterResponse {
        let view = self.cluster.view();
        DescribeClusterResponse::default()
            .with_endpoint_type(r.endpoint_type)
            .with_cluster_id(str(&self.identity.cluster_id))
            .with_controller_id(self.controller_id(&view))
            .with_brokers(
                view.reachable_brokers()
                    .filter_map(|b| {
                        let (host, port) = endpoint(b, listener)?;
                        Some(
                            DescribeClusterBroker::default()
                                .with_broker_id(BrokerId(b.node_id))
                                .with_host(str(host))
                                .with_port(port)
                                .with_rack(rack(&b.zone))
                                .with_is_fenced(false),
                        )
                    })
                    .collect(),
            )
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
        listener: &str,
    ) -> FindCoordinatorResponse {
        // Each group and each transactional id has one coordinator among the serving brokers
        // (rendezvous hashing over the cluster's membership, so every broker gives the same
        // answer).
        let view = self.cluster.view();
        let answer = |key: StrBytesAlias| {
            let found = match r.key_type {
                0 => view.coordinator(key.as_str()).ok_or((
                    ResponseError::CoordinatorNotAvailable,
                    "no live broker to coordinate the group",
                )),
                1 => view.coordinator(&txn_key(key.as_str())).ok_or((
                    ResponseError::CoordinatorNotAvailable,
                    "no live broker to coordinate the transactional id",
                )),
                _ => Err((
                    ResponseError::InvalidRequest,
                    "unknown coordinator key type",
                )),
            };
            let c = Coordinator::default().with_key(key);
            match found {
                Ok(b) => {
                    let (host, port) = endpoint(b, listener).unwrap_or((&b.host, b.port));
                    c.with_node_id(BrokerId(b.node_id))
                        .with_host(str(host))
                        .with_port(port)
                }
                Err((code, msg)) => c
                    .with_node_id(BrokerId(-1))
                    .with_host(str(""))
                    .with_port(-1)
                    .with_error_code(code.code())
                    .with_error_message(Some(str(msg))),
            }
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
        version: i16,
    ) -> InitProducerIdResponse {
        let fail = |e: ResponseError| {
            InitProducerIdResponse::default()
                .with_error_code(e.code())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        };
        if let Some(id) = r.transactional_id.as_ref().filter(|t| !t.is_empty()) {
            let expected = (r.producer_id.0 >= 0 && r.producer_epoch >= 0)
                .then_some((r.producer_id.0, r.producer_epoch));
            return match self
                .txns
                .init_producer_id(id, r.transaction_timeout_ms, expected)
                .await
            {
                Ok((pid, epoch)) => InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(pid))
                    .with_producer_epoch(epoch),
                Err(ResponseError::ProducerFenced) if version < 4 => {
                    fail(ResponseError::InvalidProducerEpoch)
                }
                Err(e) => fail(e),
            };
        }
        // An idempotent producer that asks with its id and epoch gets the epoch bumped (KIP-360),
        // which resets its sequences; a new producer gets a new id.
        if r.producer_id.0 >= 0 && r.producer_epoch >= 0 && r.producer_epoch < i16::MAX - 1 {
            return InitProducerIdResponse::default()
                .with_producer_id(r.producer_id)
                .with_producer_epoch(r.producer_epoch + 1);
        }
        match self.txns.ids.next().await {
            Ok(id) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(id))
                .with_producer_epoch(0),
            Err(e) => {
                tracing::warn!(error = %e, "allocating a producer id failed");
                fail(ResponseError::CoordinatorNotAvailable)
            }
        }
    }
}

type StrBytesAlias = kafka_protocol::protocol::StrBytes;

/// The key a transactional id's coordinator is chosen by: apart from the groups' keys, so that a
/// group and a transactional id of the same name need not share a broker.
pub fn txn_key(id: &str) -> String {
    format!("txn:{id}")
}
