//! CreateAcls: the versions Weir serves and its error response.

use kafka_protocol::messages::*;

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::CreateAcls)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    request: &CreateAclsRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    use create_acls_response::AclCreationResult;
    ResponseKind::CreateAcls(
        CreateAclsResponse::default().with_results(
            request
                .creations
                .iter()
                .map(|_| AclCreationResult::default().with_error_code(code))
                .collect(),
        ),
    )
}
