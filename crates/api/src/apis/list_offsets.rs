//! ListOffsets: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{sift, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// ListOffsets.
pub(crate) struct ListOffsets;

impl Api for ListOffsets {
    type Request = ListOffsetsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::ListOffsets)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
        ResponseKind::ListOffsets(
            ListOffsetsResponse::default().with_topics(
                request
                    .topics
                    .iter()
                    .map(|t| {
                        ListOffsetsTopicResponse::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        ListOffsetsPartitionResponse::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        sift!(
            v,
            ListOffsets,
            ListOffsetsRequest,
            r.topics,
            |t| { check.topic(Operation::Describe, &t.name) },
            E::TopicAuthorizationFailed
        )
    }

    // What `authorize` took out comes back in the response's `topics`.
    crate::authz::joins_denied!(ListOffsets.topics);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, zone, .. } = *cx;
        now(ResponseKind::ListOffsets(
            broker.list_offsets(request, v, zone).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{topic, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let parts = |epoch: i32| {
            [-1i64, -2, -3, -4, -5, 0, 1_700_000_000_001, i64::MAX, -7]
                .into_iter()
                .map(|ts| {
                    list_offsets_request::ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(ts)
                        .with_current_leader_epoch(if v >= 4 { epoch } else { -1 })
                })
                .collect::<Vec<_>>()
        };
        let req = |topics| ListOffsetsRequest::default().with_topics(topics);
        vec![
            (
                "every timestamp kind, existing and missing",
                R::ListOffsets(req(vec![
                    list_offsets_request::ListOffsetsTopic::default()
                        .with_name(topic(TOPIC))
                        .with_partitions(parts(-1)),
                    list_offsets_request::ListOffsetsTopic::default()
                        .with_name(topic(MISSING))
                        .with_partitions(parts(-1)),
                ])),
            ),
            (
                "unknown leader epoch",
                R::ListOffsets(req(vec![list_offsets_request::ListOffsetsTopic::default()
                    .with_name(topic(TOPIC))
                    .with_partitions(parts(1000))])),
            ),
        ]
    }
}
