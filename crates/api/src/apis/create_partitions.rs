//! CreatePartitions: the versions Weir serves and its error response.

use kafka_protocol::messages::*;

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::CreatePartitions)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    request: &CreatePartitionsRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    use create_partitions_response::CreatePartitionsTopicResult;
    ResponseKind::CreatePartitions(
        CreatePartitionsResponse::default().with_results(
            request
                .topics
                .iter()
                .map(|t| {
                    CreatePartitionsTopicResult::default()
                        .with_name(t.name.clone())
                        .with_error_code(code)
                })
                .collect(),
        ),
    )
}
