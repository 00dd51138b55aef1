//! EndTxn: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

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
            ResponseKind::EndTxn(this.end_txn(request, v).await)
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
