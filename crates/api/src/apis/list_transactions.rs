//! ListTransactions: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;
use weir_meta::TxnState;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{Check, Gate};
use crate::{str, Broker, Reply};
use weir_auth::acl::Operation;

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

    /// Puts back what `authorize` took out (`denied`: the error response of those parts), and
    /// leaves out what the principal may not see (`filter`).
    fn put_back(
        _broker: &Broker,
        response: ResponseKind,
        denied: Option<ResponseKind>,
        filter: Option<&Check>,
    ) -> ResponseKind {
        let ResponseKind::ListTransactions(mut r) = response else {
            return response;
        };
        if denied.is_some() {
            tracing::error!("a denied part of a request has no place in its response");
        }
        if let Some(check) = filter {
            let r = &mut r;
            r.transaction_states
                .retain(|t| check.txn(Operation::Describe, &t.transactional_id));
        }
        ResponseKind::ListTransactions(r)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::ListTransactions(
            list_transactions(broker, request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let r = ListTransactionsRequest::default()
            .with_state_filters(vec![s("Ongoing"), s("NoSuchState")]);
        let r = if v >= 1 {
            r.with_duration_filter(-1)
        } else {
            r
        };
        vec![("filters", R::ListTransactions(r))]
    }
}

async fn list_transactions(
    broker: &Broker,
    r: ListTransactionsRequest,
    version: i16,
) -> ListTransactionsResponse {
    use list_transactions_response::TransactionState as Listed;
    const STATES: [&str; 6] = [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
    ];
    let unknown: Vec<_> = r
        .state_filters
        .iter()
        .filter(|s| !STATES.contains(&s.as_str()) && s.as_str() != "Dead")
        .cloned()
        .collect();
    let all = match broker.txns.list().await {
        Ok(all) => all,
        Err(e) => return ListTransactionsResponse::default().with_error_code(e.code()),
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let listed = all
        .into_iter()
        .filter(|t| {
            r.state_filters.is_empty()
                || r.state_filters.iter().any(|s| s.as_str() == t.state.name())
        })
        .filter(|t| {
            r.producer_id_filters.is_empty()
                || r.producer_id_filters.contains(&ProducerId(t.producer_id))
        })
        .filter(|t| {
            version < 1
                || r.duration_filter < 0
                || (t.state == TxnState::Ongoing && now - t.start_ms >= r.duration_filter)
        })
        .map(|t| {
            Listed::default()
                .with_transactional_id(TransactionalId(str(&t.transactional_id)))
                .with_producer_id(ProducerId(t.producer_id))
                .with_transaction_state(str(t.state.name()))
        })
        .collect();
    ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown)
        .with_transaction_states(listed)
}
