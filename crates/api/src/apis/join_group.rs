//! JoinGroup: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{group, Check, Gate};
use crate::{Broker, Reply};
use weir_auth::acl::Operation;

/// JoinGroup.
pub(crate) struct JoinGroup;

impl Api for JoinGroup {
    type Request = JoinGroupRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::JoinGroup)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::JoinGroup(
            JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        group(
            check,
            Operation::Read,
            &r.group_id.clone(),
            RequestKind::JoinGroup(r),
            v,
        )
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx {
            v,
            client_id,
            client_host,
            ..
        } = *cx;
        // Joins wait for the rebalance; answer later so the connection keeps serving.
        let groups = Arc::clone(&broker.groups);
        let (client_id, host) = (client_id.to_string(), client_host.to_string());
        Reply::Later(Box::pin(async move {
            ResponseKind::JoinGroup(groups.join_group(request, v, &client_id, &host).await)
        }))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use bytes::Bytes;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let r = JoinGroupRequest::default()
            // One group per version: a join at v0-3 completes a rebalance of its own.
            .with_group_id(GroupId(s(&format!("join-{v}"))))
            .with_session_timeout_ms(10_000)
            .with_member_id(s(""))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
            )
            .with_name(s("range"))
            .with_metadata(Bytes::from_static(&[0, 1, 0, 0, 0, 0]))]);
        let r = if v >= 1 {
            r.with_rebalance_timeout_ms(10_000)
        } else {
            r
        };
        let bad = JoinGroupRequest::default()
            .with_group_id(GroupId(s(&format!("join-bad-{v}"))))
            .with_session_timeout_ms(1)
            .with_member_id(s(""))
            .with_protocol_type(s("consumer"));
        vec![
            ("join", R::JoinGroup(r)),
            ("bad timeout", R::JoinGroup(bad)),
        ]
    }
}
