//! ListGroups: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::authz::{Check, Gate};
use crate::{Broker, Reply};
use weir_auth::acl::Operation;

/// ListGroups.
pub(crate) struct ListGroups;

impl Api for ListGroups {
    type Request = ListGroupsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::ListGroups)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::ListGroups(ListGroupsResponse::default().with_error_code(code))
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, _v: i16) -> Gate {
        Gate::Serve {
            request: RequestKind::ListGroups(r),
            denied: None,
            // With DESCRIBE on the cluster, every group; else the groups it may describe.
            filter: (!check.cluster(Operation::Describe)).then(|| check.clone()),
        }
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::ListGroups(
            broker.groups.list_groups(request, v).await,
        ))
    }
}
