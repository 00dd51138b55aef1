//! ListGroups: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
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

    /// Puts back what `authorize` took out (`denied`: the error response of those parts), and
    /// leaves out what the principal may not see (`filter`).
    fn put_back(
        _broker: &Broker,
        response: ResponseKind,
        denied: Option<ResponseKind>,
        filter: Option<&Check>,
    ) -> ResponseKind {
        let ResponseKind::ListGroups(mut r) = response else {
            return response;
        };
        if denied.is_some() {
            tracing::error!("a denied part of a request has no place in its response");
        }
        if let Some(check) = filter {
            let r = &mut r;
            r.groups
                .retain(|g| check.group(Operation::Describe, &g.group_id));
        }
        ResponseKind::ListGroups(r)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::ListGroups(
            broker.groups.list_groups(request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let r = ListGroupsRequest::default();
        let r = if v >= 4 {
            r.with_states_filter(vec![s("Empty")])
        } else {
            r
        };
        let r = if v >= 5 {
            r.with_types_filter(vec![s("classic")])
        } else {
            r
        };
        vec![
            ("all", R::ListGroups(ListGroupsRequest::default())),
            ("filtered", R::ListGroups(r)),
        ]
    }
}
