//! DescribeTransactions: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::Cx;
use crate::{Broker, Reply};

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::DescribeTransactions)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    request: &DescribeTransactionsRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    use describe_transactions_response::TransactionState;
    ResponseKind::DescribeTransactions(
        DescribeTransactionsResponse::default().with_transaction_states(
            request
                .transactional_ids
                .iter()
                .map(|id| {
                    TransactionState::default()
                        .with_transactional_id(id.clone())
                        .with_error_code(code)
                })
                .collect(),
        ),
    )
}

/// Serves an authorized request.
pub(crate) async fn handle(
    broker: &Arc<Broker>,
    _cx: &Cx<'_>,
    request: DescribeTransactionsRequest,
) -> Reply {
    now(ResponseKind::DescribeTransactions(
        broker.describe_transactions(request).await,
    ))
}
