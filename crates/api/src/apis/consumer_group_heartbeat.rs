//! ConsumerGroupHeartbeat: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{refuse, serve, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// ConsumerGroupHeartbeat.
pub(crate) struct ConsumerGroupHeartbeat;

impl Api for ConsumerGroupHeartbeat {
    type Request = ConsumerGroupHeartbeatRequest;

    /// The versions Weir serves: versions newer than Apache Kafka 4.1 speaks are left out: clients that
    /// know them were tested against nothing.
    fn versions() -> (i16, i16) {
        super::capped(ApiKey::ConsumerGroupHeartbeat, 1)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default()
                .with_error_code(code)
                .with_member_epoch(-1),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        let denied_topic = r
            .subscribed_topic_names
            .iter()
            .flatten()
            .any(|t| !check.topic(Operation::Describe, t));
        if !check.group(Operation::Read, &r.group_id) {
            refuse(
                &RequestKind::ConsumerGroupHeartbeat(r),
                E::GroupAuthorizationFailed,
                v,
            )
        } else if denied_topic {
            // Kafka 4 (KAFKA-18813): no subscription to topics the member may not
            // describe.
            Gate::Refuse(ResponseKind::ConsumerGroupHeartbeat(
                ConsumerGroupHeartbeatResponse::default()
                    .with_error_code(E::TopicAuthorizationFailed.code())
                    .with_error_message(Some(crate::str(
                        "The group has subscribed to topics that are not authorized.",
                    )))
                    .with_member_epoch(-1),
            ))
        } else {
            serve(RequestKind::ConsumerGroupHeartbeat(r))
        }
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx {
            v,
            client_id,
            client_host,
            ..
        } = *cx;
        let topics = broker.group_catalog();
        now(ResponseKind::ConsumerGroupHeartbeat(
            broker
                .groups
                .consumer_group_heartbeat(request, v, client_id, client_host, &topics)
                .await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, topic, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let join = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("cg-versions")))
            .with_member_id(s(if v >= 1 { "member-1" } else { "" }))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(vec![topic(TOPIC)]))
            .with_topic_partitions(Some(Vec::new()));
        vec![
            ("join", R::ConsumerGroupHeartbeat(join)),
            (
                "unknown member",
                R::ConsumerGroupHeartbeat(
                    ConsumerGroupHeartbeatRequest::default()
                        .with_group_id(GroupId(s("cg-versions")))
                        .with_member_id(s("nobody"))
                        .with_member_epoch(5)
                        .with_rebalance_timeout_ms(-1),
                ),
            ),
            (
                "invalid",
                R::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest::default()),
            ),
        ]
    }
}
