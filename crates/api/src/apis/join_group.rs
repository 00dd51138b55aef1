//! JoinGroup: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

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
}
