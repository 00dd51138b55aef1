//! LeaveGroup: the versions Weir serves, its error response, what it must be authorized for, and its
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

/// LeaveGroup.
pub(crate) struct LeaveGroup;

impl Api for LeaveGroup {
    type Request = LeaveGroupRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::LeaveGroup)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(code))
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        group(
            check,
            Operation::Read,
            &r.group_id.clone(),
            RequestKind::LeaveGroup(r),
            v,
        )
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::LeaveGroup(
            broker.groups.leave_group(request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, GROUP};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let r = LeaveGroupRequest::default().with_group_id(GroupId(s(GROUP)));
        let r = if v >= 3 {
            r.with_members(vec![
                leave_group_request::MemberIdentity::default().with_member_id(s("m-1"))
            ])
        } else {
            r.with_member_id(s("m-1"))
        };
        vec![("unknown member", R::LeaveGroup(r))]
    }
}
