//! CreateAcls: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, Check, Gate};
use crate::{Broker, Reply};
use weir_auth::acl::Operation;

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

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        cluster(check, Operation::Alter, RequestKind::CreateAcls(r), v)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::CreateAcls(broker.create_acls(request).await))
    }
}
