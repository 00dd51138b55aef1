//! ListPartitionReassignments: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, Check, Gate};
use crate::{str, Broker, Reply};
use weir_auth::acl::Operation;

/// ListPartitionReassignments.
pub(crate) struct ListPartitionReassignments;

impl Api for ListPartitionReassignments {
    type Request = ListPartitionReassignmentsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::ListPartitionReassignments)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::ListPartitionReassignments(
            ListPartitionReassignmentsResponse::default()
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
            Operation::Describe,
            RequestKind::ListPartitionReassignments(r),
            v,
        )
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::ListPartitionReassignments(
            list_partition_reassignments(broker, request),
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{topic, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![
            (
                "all",
                R::ListPartitionReassignments(ListPartitionReassignmentsRequest::default()),
            ),
            (
                "one topic",
                R::ListPartitionReassignments(
                    ListPartitionReassignmentsRequest::default().with_topics(Some(vec![
                        list_partition_reassignments_request::ListPartitionReassignmentsTopics::default()
                            .with_name(topic(TOPIC))
                            .with_partition_indexes(vec![0]),
                    ])),
                ),
            ),
        ]
    }
}

fn list_partition_reassignments(
    broker: &Broker,
    r: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let view = broker.cluster.view();
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
