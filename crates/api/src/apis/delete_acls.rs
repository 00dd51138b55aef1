//! DeleteAcls: the versions Weir serves and its error response.

use kafka_protocol::messages::*;

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::DeleteAcls)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    request: &DeleteAclsRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    use delete_acls_response::DeleteAclsFilterResult;
    ResponseKind::DeleteAcls(
        DeleteAclsResponse::default().with_filter_results(
            request
                .filters
                .iter()
                .map(|_| DeleteAclsFilterResult::default().with_error_code(code))
                .collect(),
        ),
    )
}
