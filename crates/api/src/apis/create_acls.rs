//! CreateAcls: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

/// CreateAcls.
pub(crate) struct CreateAcls;

impl Api for CreateAcls {
    type Request = CreateAclsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::CreateAcls)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use create_acls_response::AclCreationResult;
        ResponseKind::CreateAcls(
            CreateAclsResponse::default().with_results(
                request
                    .creations
                    .iter()
                    .map(|_| AclCreationResult::default().with_error_code(code))
                    .collect(),
            ),
        )
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::CreateAcls(broker.create_acls(request).await))
    }
}
