//! DeleteGroups: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

/// DeleteGroups.
pub(crate) struct DeleteGroups;

impl Api for DeleteGroups {
    type Request = DeleteGroupsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DeleteGroups)
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

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::DeleteGroups(
            broker.groups.delete_groups(request, v).await,
        ))
    }
}
