//! ConsumerGroupHeartbeat: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

/// ConsumerGroupHeartbeat.
pub(crate) struct ConsumerGroupHeartbeat;

impl Api for ConsumerGroupHeartbeat {
    type Request = ConsumerGroupHeartbeatRequest;

    /// The versions Weir serves: versions newer than Apache Kafka 4.1 speaks are left out: clients that
    /// know them were tested against nothing.
    fn versions() -> (i16, i16) {
        super::capped(ApiKey::ConsumerGroupHeartbeat, 1)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default()
                .with_error_code(code)
                .with_member_epoch(-1),
        )
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx {
            v,
            client_id,
            client_host,
            ..
        } = *cx;
        let topics = broker.group_catalog();
        now(ResponseKind::ConsumerGroupHeartbeat(
            broker
                .groups
                .consumer_group_heartbeat(request, v, client_id, client_host, &topics)
                .await,
        ))
    }
}
