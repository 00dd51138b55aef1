//! Heartbeat: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{group, Check, Gate};
use crate::{Broker, Reply};
use weir_auth::acl::Operation;

/// Heartbeat.
pub(crate) struct Heartbeat;

impl Api for Heartbeat {
    type Request = HeartbeatRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::Heartbeat)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code))
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        group(
            check,
            Operation::Read,
            &r.group_id.clone(),
            RequestKind::Heartbeat(r),
            v,
        )
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::Heartbeat(
            broker.groups.heartbeat(request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, GROUP};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "unknown member",
            R::Heartbeat(
                HeartbeatRequest::default()
                    .with_group_id(GroupId(s(GROUP)))
                    .with_generation_id(3)
                    .with_member_id(s("m-1")),
            ),
        )]
    }
}
