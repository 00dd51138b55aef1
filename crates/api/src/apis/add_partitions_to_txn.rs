//! AddPartitionsToTxn: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

/// AddPartitionsToTxn.
pub(crate) struct AddPartitionsToTxn;

impl Api for AddPartitionsToTxn {
    type Request = AddPartitionsToTxnRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::AddPartitionsToTxn)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, version: i16, code: i16) -> ResponseKind {
        let topics = |ts| crate::txn::add_partitions_results(ts, &|_, _| code);
        ResponseKind::AddPartitionsToTxn(if version <= 3 {
            AddPartitionsToTxnResponse::default()
                .with_results_by_topic_v3_and_below(topics(&request.v3_and_below_topics))
        } else {
            AddPartitionsToTxnResponse::default().with_error_code(code)
        })
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::AddPartitionsToTxn(
            broker.add_partitions_to_txn(request, v).await,
        ))
    }
}
