//! CreateAcls: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use weir_auth::acl::Acl;
use weir_meta::{AclBinding, Acls};

use crate::acls::{acls_changed, binding, unavailable, NO_AUTHORIZER};
use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, Check, Gate};
use crate::{str, Broker, Reply};
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
        now(ResponseKind::CreateAcls(create_acls(broker, request).await))
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

async fn create_acls(broker: &Broker, r: CreateAclsRequest) -> CreateAclsResponse {
    if !broker.authz.enabled() {
        return CreateAclsResponse::default().with_results(
            r.creations
                .iter()
                .map(|_| {
                    AclCreationResult::default()
                        .with_error_code(ResponseError::SecurityDisabled.code())
                        .with_error_message(Some(str(NO_AUTHORIZER)))
                })
                .collect(),
        );
    }
    let checked: Vec<Result<Acl, String>> = r
        .creations
        .iter()
        .map(|c| {
            Acl::from_kafka(
                c.resource_type,
                &c.resource_name,
                c.resource_pattern_type,
                &c.principal,
                &c.host,
                c.operation,
                c.permission_type,
            )
        })
        .collect();
    let valid: Vec<AclBinding> = checked.iter().flatten().map(binding).collect();
    let stored = if valid.is_empty() {
        Ok(())
    } else {
        Acls::create_acls(&*broker.meta, valid)
            .await
            .map_err(unavailable)
    };
    if stored.is_ok() {
        acls_changed(broker).await;
    }
    let results = checked
        .into_iter()
        .map(|c| {
            let result = AclCreationResult::default();
            match (c, &stored) {
                (Err(why), _) => result
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(str(&why))),
                (Ok(_), Err((e, why))) => result
                    .with_error_code(e.code())
                    .with_error_message(Some(str(why))),
                (Ok(acl), Ok(())) => {
                    tracing::info!(?acl, "ACL created");
                    result
                }
            }
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}
