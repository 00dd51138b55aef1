//! SyncGroup: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

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

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        let groups = Arc::clone(&broker.groups);
        Reply::Later(Box::pin(async move {
            ResponseKind::SyncGroup(groups.sync_group(request, v).await)
        }))
    }
}
