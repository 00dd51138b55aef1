//! ConsumerGroupDescribe: the versions Weir serves and its error response.

use kafka_protocol::messages::*;

/// The versions Weir serves: versions newer than Apache Kafka 4.1 speaks are left out: clients that
/// know them were tested against nothing.
pub(crate) fn versions() -> (i16, i16) {
    super::capped(ApiKey::ConsumerGroupDescribe, 1)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    request: &ConsumerGroupDescribeRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    use consumer_group_describe_response::DescribedGroup;
    ResponseKind::ConsumerGroupDescribe(
        ConsumerGroupDescribeResponse::default().with_groups(
            request
                .group_ids
                .iter()
                .map(|id| {
                    DescribedGroup::default()
                        .with_group_id(id.clone())
                        .with_error_code(code)
                })
                .collect(),
        ),
    )
}
