//! EndTxn: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use crate::txn::fenced_for;
use kafka_protocol::messages::*;

#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{refuse, serve, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// EndTxn.
pub(crate) struct EndTxn;

impl Api for EndTxn {
    type Request = EndTxnRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::EndTxn)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::EndTxn(
            EndTxnResponse::default()
                .with_error_code(code)
                .with_producer_id(request.producer_id)
                .with_producer_epoch(request.producer_epoch),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        if check.txn(Operation::Write, &r.transactional_id) {
            serve(RequestKind::EndTxn(r))
        } else {
            refuse(
                &RequestKind::EndTxn(r),
                E::TransactionalIdAuthorizationFailed,
                v,
            )
        }
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        // Markers take a WAL write or two: answer later, so the connection keeps going.
        let this = Arc::clone(broker);
        Reply::Later(Box::pin(async move {
            ResponseKind::EndTxn(end_txn(&this, request, v).await)
        }))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "unknown producer",
            R::EndTxn(
                EndTxnRequest::default()
                    .with_transactional_id(TransactionalId(s("tx")))
                    .with_producer_id(ProducerId(7))
                    .with_committed(true),
            ),
        )]
    }
}

async fn end_txn(broker: &Broker, r: EndTxnRequest, version: i16) -> EndTxnResponse {
    // v5+: Transactions V2, the epoch moves on at every end (the answer carries it).
    let result = broker
        .txns
        .end_txn(
            &r.transactional_id,
            r.producer_id.0,
            r.producer_epoch,
            r.committed,
            version >= 5,
        )
        .await
        .map_err(|e| fenced_for(e, version, 2));
    match result {
        Ok((pid, epoch)) => EndTxnResponse::default()
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch),
        Err(e) => EndTxnResponse::default()
            .with_error_code(e.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    }
}
