//! FindCoordinator: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

/// FindCoordinator.
pub(crate) struct FindCoordinator;

impl Api for FindCoordinator {
    type Request = FindCoordinatorRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::FindCoordinator)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, version: i16, code: i16) -> ResponseKind {
        use find_coordinator_response::Coordinator;
        ResponseKind::FindCoordinator(if version >= 4 {
            FindCoordinatorResponse::default().with_coordinators(
                request
                    .coordinator_keys
                    .iter()
                    .map(|k| {
                        Coordinator::default()
                            .with_key(k.clone())
                            .with_node_id(BrokerId(-1))
                            .with_port(-1)
                            .with_error_code(code)
                    })
                    .collect(),
            )
        } else {
            FindCoordinatorResponse::default()
                .with_error_code(code)
                .with_node_id(BrokerId(-1))
                .with_port(-1)
        })
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, listener, .. } = *cx;
        now(ResponseKind::FindCoordinator(
            broker.find_coordinator(request, v, listener),
        ))
    }
}
