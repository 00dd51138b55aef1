//! ListGroups: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::Cx;
use crate::{Broker, Reply};

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::ListGroups)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    _request: &ListGroupsRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    ResponseKind::ListGroups(ListGroupsResponse::default().with_error_code(code))
}

/// Serves an authorized request.
pub(crate) async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: ListGroupsRequest) -> Reply {
    let Cx { v, .. } = *cx;
    now(ResponseKind::ListGroups(
        broker.groups.list_groups(request, v).await,
    ))
}
