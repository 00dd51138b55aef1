//! InitProducerId: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

/// InitProducerId.
pub(crate) struct InitProducerId;

impl Api for InitProducerId {
    type Request = InitProducerIdRequest;

    /// The versions Weir serves: versions newer than Apache Kafka 4.1 speaks are left out: clients that
    /// know them were tested against nothing.
    fn versions() -> (i16, i16) {
        super::capped(ApiKey::InitProducerId, 5)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::InitProducerId(
            InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::InitProducerId(
            broker.init_producer_id(request, v).await,
        ))
    }
}
