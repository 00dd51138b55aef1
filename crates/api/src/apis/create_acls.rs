//! CreateAcls: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
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

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "a valid binding and an invalid one",
            R::CreateAcls(CreateAclsRequest::default().with_creations(vec![
                create_acls_request::AclCreation::default()
                    .with_resource_type(2)
                    .with_resource_name(s("t"))
                    .with_resource_pattern_type(3)
                    .with_principal(s("User:alice"))
                    .with_host(s("*"))
                    .with_operation(3)
                    .with_permission_type(3),
                create_acls_request::AclCreation::default()
                    .with_resource_type(0)
                    .with_resource_name(s("t"))
                    .with_resource_pattern_type(3)
                    .with_principal(s("alice"))
                    .with_host(s("*"))
                    .with_operation(3)
                    .with_permission_type(3),
            ])),
        )]
    }
}
