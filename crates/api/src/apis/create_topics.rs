//! CreateTopics: the versions Weir serves and its error response.

use kafka_protocol::messages::*;

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::CreateTopics)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    request: &CreateTopicsRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    use create_topics_response::CreatableTopicResult;
    ResponseKind::CreateTopics(
        CreateTopicsResponse::default().with_topics(
            request
                .topics
                .iter()
                .map(|t| {
                    CreatableTopicResult::default()
                        .with_name(t.name.clone())
                        .with_error_code(code)
                })
                .collect(),
        ),
    )
}
