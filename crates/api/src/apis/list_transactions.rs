//! ListTransactions: the versions Weir serves and its error response.

use kafka_protocol::messages::*;

/// The versions Weir serves: v2 filters by a regular expression (KIP-1152), which Weir does not
/// evaluate yet.
pub(crate) fn versions() -> (i16, i16) {
    super::capped(ApiKey::ListTransactions, 1)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    _request: &ListTransactionsRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    ResponseKind::ListTransactions(ListTransactionsResponse::default().with_error_code(code))
}
