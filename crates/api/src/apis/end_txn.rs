//! EndTxn: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

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

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        // Markers take a WAL write or two: answer later, so the connection keeps going.
        let this = Arc::clone(broker);
        Reply::Later(Box::pin(async move {
            ResponseKind::EndTxn(this.end_txn(request, v).await)
        }))
    }
}
