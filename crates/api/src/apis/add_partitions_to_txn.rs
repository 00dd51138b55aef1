//! AddPartitionsToTxn: the versions Weir serves and its error response.

use kafka_protocol::messages::*;

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::AddPartitionsToTxn)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    request: &AddPartitionsToTxnRequest,
    version: i16,
    code: i16,
) -> ResponseKind {
    let topics = |ts| crate::txn::add_partitions_results(ts, &|_, _| code);
    ResponseKind::AddPartitionsToTxn(if version <= 3 {
        AddPartitionsToTxnResponse::default()
            .with_results_by_topic_v3_and_below(topics(&request.v3_and_below_topics))
    } else {
        AddPartitionsToTxnResponse::default().with_error_code(code)
    })
}
