//! What Metadata, DescribeCluster, FindCoordinator and InitProducerId
//! share (each is served from its module in `apis/`): the brokers clients can reach, the
//! controller they are told of, the coordinators' keys.

use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::*;
use weir_cluster::ClusterView;

use crate::{endpoint, str, Broker};

/// Bits of the operations a client may do on the cluster (no ACLs: everything is allowed).
pub(crate) const CLUSTER_OPERATIONS: i32 =
    (1 << 4) | (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12);

/// A broker's rack, as clients see it: its zone, if it has one.
pub(crate) fn rack(zone: &str) -> Option<StrBytesAlias> {
    (!zone.is_empty()).then(|| str(zone))
}

type StrBytesAlias = kafka_protocol::protocol::StrBytes;

/// The key a transactional id's coordinator is chosen by: apart from the groups' keys, so that a
/// group and a transactional id of the same name need not share a broker.
pub fn txn_key(id: &str) -> String {
    format!("txn:{id}")
}

/// Every broker clients can reach, from this broker's view of the cluster.
pub(crate) fn metadata_brokers(
    _broker: &Broker,
    view: &ClusterView,
    listener: &str,
) -> Vec<MetadataResponseBroker> {
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
pub(crate) fn controller_id(broker: &Broker, view: &ClusterView) -> BrokerId {
    let controller = view
        .controller
        .map(|c| c.node_id)
        .filter(|&id| view.reachable_brokers().any(|b| b.node_id == id));
    BrokerId(controller.unwrap_or(broker.cluster.node_id()))
}
