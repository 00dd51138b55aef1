//! ConsumerGroupHeartbeat: the versions Weir serves and its error response.

use kafka_protocol::messages::*;

/// The versions Weir serves: versions newer than Apache Kafka 4.1 speaks are left out: clients that
/// know them were tested against nothing.
pub(crate) fn versions() -> (i16, i16) {
    super::capped(ApiKey::ConsumerGroupHeartbeat, 1)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    _request: &ConsumerGroupHeartbeatRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    ResponseKind::ConsumerGroupHeartbeat(
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(code)
            .with_member_epoch(-1),
    )
}
