//! AddPartitionsToTxn: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::Cx;
use crate::{Broker, Reply};

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

/// Serves an authorized request.
pub(crate) async fn handle(
    broker: &Arc<Broker>,
    cx: &Cx<'_>,
    request: AddPartitionsToTxnRequest,
) -> Reply {
    let Cx { v, .. } = *cx;
    now(ResponseKind::AddPartitionsToTxn(
        broker.add_partitions_to_txn(request, v).await,
    ))
}
