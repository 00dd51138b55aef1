//! ListPartitionReassignments: the versions Weir serves, its error response, what it must be authorized for, and its
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
            broker.list_partition_reassignments(request),
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
