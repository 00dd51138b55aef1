//! ShareGroupHeartbeat (KIP-932): the versions Weir serves, its error response, what it must be
//! authorized for, and its handler. The group logic is `weir_group::share`.

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

/// ShareGroupHeartbeat.
pub(crate) struct ShareGroupHeartbeat;

impl Api for ShareGroupHeartbeat {
    type Request = ShareGroupHeartbeatRequest;

    /// Version 1, as Kafka 4.4 serves (version 0 was 4.0's early access, removed in 4.1).
    fn versions() -> (i16, i16) {
        (1, 1)
    }

    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::ShareGroupHeartbeat(
            ShareGroupHeartbeatResponse::default()
                .with_error_code(code)
                .with_member_epoch(-1),
        )
    }

    /// READ on the group; DESCRIBE on every topic subscribed to (as for consumer groups).
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        let denied_topic = r
            .subscribed_topic_names
            .iter()
            .flatten()
            .any(|t| !check.topic(Operation::Describe, t));
        if !check.group(Operation::Read, &r.group_id) {
            refuse(
                &RequestKind::ShareGroupHeartbeat(r),
                E::GroupAuthorizationFailed,
                v,
            )
        } else if denied_topic {
            refuse(
                &RequestKind::ShareGroupHeartbeat(r),
                E::TopicAuthorizationFailed,
                v,
            )
        } else {
            serve(RequestKind::ShareGroupHeartbeat(r))
        }
    }

    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let topics = broker.group_catalog();
        now(ResponseKind::ShareGroupHeartbeat(
            broker
                .groups
                .share_group_heartbeat(request, cx.client_id, cx.client_host, &topics)
                .await,
        ))
    }

    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, topic, TOPIC};
        use RequestKind as R;
        let join = ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("sg-versions")))
            .with_member_id(s("member-1"))
            .with_member_epoch(0)
            .with_subscribed_topic_names(Some(vec![topic(TOPIC)]));
        vec![
            ("join", R::ShareGroupHeartbeat(join)),
            (
                "unknown member",
                R::ShareGroupHeartbeat(
                    ShareGroupHeartbeatRequest::default()
                        .with_group_id(GroupId(s("sg-versions")))
                        .with_member_id(s("nobody"))
                        .with_member_epoch(5),
                ),
            ),
            (
                "invalid",
                R::ShareGroupHeartbeat(ShareGroupHeartbeatRequest::default()),
            ),
        ]
    }
}
