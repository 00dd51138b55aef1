//! SyncGroup: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{group, Check, Gate};
use crate::{Broker, Reply};
use weir_auth::acl::Operation;

/// SyncGroup.
pub(crate) struct SyncGroup;

impl Api for SyncGroup {
    type Request = SyncGroupRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::SyncGroup)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(code))
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        group(
            check,
            Operation::Read,
            &r.group_id.clone(),
            RequestKind::SyncGroup(r),
            v,
        )
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        let groups = Arc::clone(&broker.groups);
        Reply::Later(Box::pin(async move {
            ResponseKind::SyncGroup(groups.sync_group(request, v).await)
        }))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, GROUP};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let r = SyncGroupRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_generation_id(1)
            .with_member_id(s("m-1"));
        let r = if v >= 5 {
            r.with_protocol_type(Some(s("consumer")))
                .with_protocol_name(Some(s("range")))
        } else {
            r
        };
        vec![("unknown member", R::SyncGroup(r))]
    }
}
