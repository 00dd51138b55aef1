//! DeleteGroups: the versions Weir serves, its error response, what it must be authorized for, and its
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

/// DeleteGroups.
pub(crate) struct DeleteGroups;

impl Api for DeleteGroups {
    type Request = DeleteGroupsRequest;

    /// The versions Weir serves: up to 2 (Kafka 4.4's v3 adds an error message per group: not yet).
    fn versions() -> (i16, i16) {
        super::capped(ApiKey::DeleteGroups, 2)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use delete_groups_response::DeletableGroupResult;
        ResponseKind::DeleteGroups(
            DeleteGroupsResponse::default().with_results(
                request
                    .groups_names
                    .iter()
                    .map(|g| {
                        DeletableGroupResult::default()
                            .with_group_id(g.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        sift!(
            v,
            DeleteGroups,
            DeleteGroupsRequest,
            r.groups_names,
            |g| { check.group(Operation::Delete, g) },
            E::GroupAuthorizationFailed
        )
    }

    // What `authorize` took out comes back in the response's `results`.
    crate::authz::joins_denied!(DeleteGroups.results);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        let mut shares = Vec::new();
        for g in &request.groups_names {
            if broker.groups.is_share_group(g).await {
                shares.push(g.to_string());
            }
        }
        let response = broker.groups.delete_groups(request, v).await;
        // A share group deleted takes its share-partitions' states with it (KIP-932).
        for r in &response.results {
            if r.error_code == 0 && shares.iter().any(|g| g == r.group_id.as_str()) {
                if let Err(e) = broker.meta.delete_share_states(&r.group_id, None).await {
                    tracing::warn!(group = %r.group_id.as_str(), error = %e, "deleting a share group's states failed");
                }
            }
        }
        now(ResponseKind::DeleteGroups(response))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "existing and missing",
            R::DeleteGroups(
                DeleteGroupsRequest::default()
                    .with_groups_names(vec![GroupId(s("nope")), GroupId(s("join-0"))]),
            ),
        )]
    }
}
