//! SaslHandshake: the versions Weir serves and its error response.

use kafka_protocol::messages::*;

/// The versions Weir serves: v0 is followed by raw SASL tokens instead of SaslAuthenticate
/// requests; every client of this decade speaks v1.
pub(crate) fn versions() -> (i16, i16) {
    (1, super::valid(ApiKey::SaslHandshake).1)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    _request: &SaslHandshakeRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    ResponseKind::SaslHandshake(SaslHandshakeResponse::default().with_error_code(code))
}
