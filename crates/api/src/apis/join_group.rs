//! JoinGroup: the versions Weir serves and its error response.

use kafka_protocol::messages::*;

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::JoinGroup)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    _request: &JoinGroupRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    ResponseKind::JoinGroup(
        JoinGroupResponse::default()
            .with_error_code(code)
            .with_generation_id(-1),
    )
}
