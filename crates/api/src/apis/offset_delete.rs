//! OffsetDelete: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{refuse, sift, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// OffsetDelete.
pub(crate) struct OffsetDelete;

impl Api for OffsetDelete {
    type Request = OffsetDeleteRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::OffsetDelete)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
        ResponseKind::OffsetDelete(
            OffsetDeleteResponse::default()
                .with_error_code(code)
                .with_topics(
                    request
                        .topics
                        .iter()
                        .map(|t| {
                            OffsetDeleteResponseTopic::default()
                                .with_name(t.name.clone())
                                .with_partitions(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            OffsetDeleteResponsePartition::default()
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
        if !check.group(Operation::Delete, &r.group_id) {
            return refuse(
                &RequestKind::OffsetDelete(r),
                E::GroupAuthorizationFailed,
                v,
            );
        }
        sift!(
            v,
            OffsetDelete,
            OffsetDeleteRequest,
            r.topics,
            |t| { check.topic(Operation::Read, &t.name) },
            E::TopicAuthorizationFailed
        )
    }

    // What `authorize` took out comes back in the response's `topics`.
    crate::authz::joins_denied!(OffsetDelete.topics);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::OffsetDelete(
            broker.groups.offset_delete(request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, topic, GROUP, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let t = |name: &str| {
            offset_delete_request::OffsetDeleteRequestTopic::default()
                .with_name(topic(name))
                .with_partitions(vec![
                    offset_delete_request::OffsetDeleteRequestPartition::default()
                        .with_partition_index(0),
                ])
        };
        vec![
            (
                "existing group",
                R::OffsetDelete(
                    OffsetDeleteRequest::default()
                        .with_group_id(GroupId(s(GROUP)))
                        .with_topics(vec![t(TOPIC), t(MISSING)]),
                ),
            ),
            (
                "missing group",
                R::OffsetDelete(
                    OffsetDeleteRequest::default()
                        .with_group_id(GroupId(s("nope")))
                        .with_topics(vec![t(TOPIC)]),
                ),
            ),
        ]
    }
}
