//! DescribeConfigs: the versions Weir serves and its error response.

use kafka_protocol::messages::*;

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::DescribeConfigs)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    request: &DescribeConfigsRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    use describe_configs_response::DescribeConfigsResult;
    ResponseKind::DescribeConfigs(
        DescribeConfigsResponse::default().with_results(
            request
                .resources
                .iter()
                .map(|res| {
                    DescribeConfigsResult::default()
                        .with_resource_type(res.resource_type)
                        .with_resource_name(res.resource_name.clone())
                        .with_error_code(code)
                })
                .collect(),
        ),
    )
}
