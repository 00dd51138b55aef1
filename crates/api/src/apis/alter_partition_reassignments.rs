//! AlterPartitionReassignments: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, Check, Gate};
use crate::{Broker, Reply};
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
            broker.alter_partition_reassignments(request).await,
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
