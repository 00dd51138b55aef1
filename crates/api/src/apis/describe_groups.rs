//! DescribeGroups: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{sift, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// DescribeGroups.
pub(crate) struct DescribeGroups;

impl Api for DescribeGroups {
    type Request = DescribeGroupsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DescribeGroups)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use describe_groups_response::DescribedGroup;
        ResponseKind::DescribeGroups(
            DescribeGroupsResponse::default().with_groups(
                request
                    .groups
                    .iter()
                    .map(|g| {
                        DescribedGroup::default()
                            .with_group_id(g.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        )
    }

    /// What the request must be authorized for, and the parts of it refused. The response
    /// tells the principal what it may do: `put_back` always gets its checks.
    fn authorize(_broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        sift!(
            v,
            DescribeGroups,
            DescribeGroupsRequest,
            r.groups,
            |g| check.group(Operation::Describe, g),
            E::GroupAuthorizationFailed
        )
        .telling(check)
    }

    /// Puts back what `authorize` took out (`denied`: the error response of those parts), and
    /// leaves out what the principal may not see (`filter`).
    fn put_back(
        _broker: &Broker,
        response: ResponseKind,
        denied: Option<ResponseKind>,
        filter: Option<&Check>,
    ) -> ResponseKind {
        let ResponseKind::DescribeGroups(mut r) = response else {
            return response;
        };
        if let Some(ResponseKind::DescribeGroups(d)) = denied {
            r.groups.extend(d.groups);
        }
        if let Some(check) = filter {
            let r = &mut r;
            for g in &mut r.groups {
                if g.authorized_operations != i32::MIN && g.error_code == 0 {
                    g.authorized_operations = check.group_operations(&g.group_id);
                }
            }
        }
        ResponseKind::DescribeGroups(r)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::DescribeGroups(
            broker.groups.describe_groups(request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, GROUP};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let r = DescribeGroupsRequest::default().with_groups(vec![
            GroupId(s(GROUP)),
            GroupId(s("join-0")),
            GroupId(s("nope")),
        ]);
        let r = if v >= 3 {
            r.with_include_authorized_operations(true)
        } else {
            r
        };
        vec![("groups", R::DescribeGroups(r))]
    }
}
