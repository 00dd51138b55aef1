//! AlterPartitionReassignments and ListPartitionReassignments: moving partitions between
//! brokers, as `kafka-reassign-partitions` and admin clients ask for it.
//!
//! A Weir partition has one replica, its leader (durability comes from the WAL and object
//! storage, not from copies), so a reassignment names exactly one broker: the new leader. The
//! move itself copies nothing (see `weir_cluster`): the old leader uploads what its WAL holds of
//! the partition and hands it over; the new one opens it at leader epoch + 1.

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use weir_cluster::ClusterError;

use crate::{str, Broker};

impl Broker {
    pub(crate) async fn alter_partition_reassignments(
        &self,
        r: AlterPartitionReassignmentsRequest,
    ) -> AlterPartitionReassignmentsResponse {
        let mut responses = Vec::with_capacity(r.topics.len());
        for t in r.topics {
            let mut parts = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let result = self
                    .reassign_one(t.name.0.as_str(), p.partition_index, p.replicas)
                    .await;
                let res = ReassignablePartitionResponse::default()
                    .with_partition_index(p.partition_index);
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
        &self,
        topic: &str,
        partition: i32,
        replicas: Option<Vec<BrokerId>>,
    ) -> Result<(), (ResponseError, String)> {
        let view = self.cluster.view();
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
        self.cluster
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

    pub(crate) fn list_partition_reassignments(
        &self,
        r: ListPartitionReassignmentsRequest,
    ) -> ListPartitionReassignmentsResponse {
        let view = self.cluster.view();
        let wanted = |topic: &str, p: u32| match &r.topics {
            None => true,
            Some(ts) => ts
                .iter()
                .any(|t| t.name.0.as_str() == topic && t.partition_indexes.contains(&(p as i32))),
        };
        let mut topics: Vec<OngoingTopicReassignment> = Vec::new();
        for a in &view.assignments {
            let (Some(leader), Some(target)) = (a.leader, a.target) else {
                continue;
            };
            if !wanted(&a.topic, a.partition) {
                continue;
            }
            let part = OngoingPartitionReassignment::default()
                .with_partition_index(a.partition as i32)
                .with_replicas(vec![BrokerId(leader), BrokerId(target)])
                .with_adding_replicas(vec![BrokerId(target)])
                .with_removing_replicas(vec![BrokerId(leader)]);
            match topics.last_mut() {
                Some(t) if t.name.0.as_str() == a.topic => t.partitions.push(part),
                _ => topics.push(
                    OngoingTopicReassignment::default()
                        .with_name(TopicName(str(&a.topic)))
                        .with_partitions(vec![part]),
                ),
            }
        }
        ListPartitionReassignmentsResponse::default().with_topics(topics)
    }
}
