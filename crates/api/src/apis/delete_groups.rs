//! DeleteGroups: the versions Weir serves and its error response.

use kafka_protocol::messages::*;

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::DeleteGroups)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    request: &DeleteGroupsRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
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
