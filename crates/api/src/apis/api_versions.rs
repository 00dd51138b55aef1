//! ApiVersions: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::Cx;
use crate::{Broker, Reply};

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::ApiVersions)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    _request: &ApiVersionsRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    ResponseKind::ApiVersions(crate::cluster::api_versions(code))
}

/// Serves an authorized request.
pub(crate) async fn handle(
    _broker: &Arc<Broker>,
    _cx: &Cx<'_>,
    _request: ApiVersionsRequest,
) -> Reply {
    now(ResponseKind::ApiVersions(crate::cluster::api_versions(0)))
}
