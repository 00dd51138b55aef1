//! AlterPartitionReassignments: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.
//!
//! A Weir partition has one replica, its leader (durability comes from the WAL and object
//! storage, not from copies), so a reassignment names exactly one broker: the new leader. The
//! move itself copies nothing (see `weir_cluster`): the old leader uploads what its WAL holds of
//! the partition and hands it over; the new one opens it at leader epoch + 1.

use std::sync::Arc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use weir_cluster::ClusterError;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, Check, Gate};
use crate::{str, Broker, Reply};
use weir_auth::acl::Operation;

/// AlterPartitionReassignments.
pub(crate) struct AlterPartitionReassignments;

impl Api for AlterPartitionReassignments {
    type Request = AlterPartitionReassignmentsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::AlterPartitionReassignments)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::AlterPartitionReassignments(
            AlterPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(Some(kafka_protocol::protocol::StrBytes::from_static_str(
                    "the request failed",
                ))),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        cluster(
            check,
            Operation::Alter,
            RequestKind::AlterPartitionReassignments(r),
            v,
        )
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::AlterPartitionReassignments(
            alter_partition_reassignments(broker, request).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{topic, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let part = |replicas: Option<Vec<BrokerId>>| {
            alter_partition_reassignments_request::ReassignablePartition::default()
                .with_partition_index(0)
                .with_replicas(replicas)
        };
        let topics = |name: &str, replicas| {
            vec![
                alter_partition_reassignments_request::ReassignableTopic::default()
                    .with_name(topic(name))
                    .with_partitions(vec![part(replicas)]),
            ]
        };
        vec![
            (
                "to its own broker",
                R::AlterPartitionReassignments(
                    AlterPartitionReassignmentsRequest::default()
                        .with_topics(topics(TOPIC, Some(vec![BrokerId(1)]))),
                ),
            ),
            (
                "missing topic and a cancel with nothing to cancel",
                R::AlterPartitionReassignments(
                    AlterPartitionReassignmentsRequest::default().with_topics(
                        topics(MISSING, Some(vec![BrokerId(1)]))
                            .into_iter()
                            .chain(topics(TOPIC, None))
                            .collect(),
                    ),
                ),
            ),
        ]
    }
}

async fn alter_partition_reassignments(
    broker: &Broker,
    r: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let mut responses = Vec::with_capacity(r.topics.len());
    for t in r.topics {
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let result =
                reassign_one(broker, t.name.0.as_str(), p.partition_index, p.replicas).await;
            let res =
                ReassignablePartitionResponse::default().with_partition_index(p.partition_index);
            parts.push(match result {
                Ok(()) => res,
                Err((e, msg)) => res
                    .with_error_code(e.code())
                    .with_error_message(Some(str(&msg))),
            });
        }
        responses.push(
            ReassignableTopicResponse::default()
                .with_name(t.name)
                .with_partitions(parts),
        );
    }
    AlterPartitionReassignmentsResponse::default().with_responses(responses)
}

async fn reassign_one(
    broker: &Broker,
    topic: &str,
    partition: i32,
    replicas: Option<Vec<BrokerId>>,
) -> Result<(), (ResponseError, String)> {
    let view = broker.cluster.view();
    let assignment = u32::try_from(partition)
        .ok()
        .and_then(|p| view.assignment(topic, p))
        .ok_or_else(|| {
            (
                ResponseError::UnknownTopicOrPartition,
                format!("Topic {topic} partition {partition} does not exist."),
            )
        })?;
    let target = match replicas {
        None => {
            if assignment.target.is_none() {
                return Err((
                    ResponseError::NoReassignmentInProgress,
                    format!("No reassignment of {topic}-{partition} is in progress."),
                ));
            }
            None
        }
        Some(r) if r.len() == 1 => Some(r[0].0),
        Some(r) => {
            return Err((
                ResponseError::InvalidReplicationFactor,
                format!(
                    "Weir partitions have one replica (their leader); the reassignment names {}.",
                    r.len()
                ),
            ))
        }
    };
    broker
        .cluster
        .reassign(topic, partition, target)
        .await
        .map_err(|e| match e {
            ClusterError::UnknownPartition(..) => {
                (ResponseError::UnknownTopicOrPartition, e.to_string())
            }
            ClusterError::UnknownBroker(_) => {
                (ResponseError::InvalidReplicaAssignment, e.to_string())
            }
            ClusterError::NotPlaced(..) => (ResponseError::LeaderNotAvailable, e.to_string()),
            ClusterError::Meta(_) => (ResponseError::UnknownServerError, e.to_string()),
        })
}
