//! DescribeTransactions: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

/// DescribeTransactions.
pub(crate) struct DescribeTransactions;

impl Api for DescribeTransactions {
    type Request = DescribeTransactionsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DescribeTransactions)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
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
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::DescribeTransactions(
            broker.describe_transactions(request).await,
        ))
    }
}
