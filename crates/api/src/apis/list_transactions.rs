//! ListTransactions: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::authz::{Check, Gate};
use crate::{Broker, Reply};

/// ListTransactions.
pub(crate) struct ListTransactions;

impl Api for ListTransactions {
    type Request = ListTransactionsRequest;

    /// The versions Weir serves: v2 filters by a regular expression (KIP-1152), which Weir does not
    /// evaluate yet.
    fn versions() -> (i16, i16) {
        super::capped(ApiKey::ListTransactions, 1)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::ListTransactions(ListTransactionsResponse::default().with_error_code(code))
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, _v: i16) -> Gate {
        Gate::Serve {
            request: RequestKind::ListTransactions(r),
            denied: None,
            filter: Some(check.clone()),
        }
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::ListTransactions(
            broker.list_transactions(request, v).await,
        ))
    }
}
