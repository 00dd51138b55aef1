//! DescribeAcls: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use weir_auth::acl::AclFilter;

use crate::acls::{stored_acls, NO_AUTHORIZER};
use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, Check, Gate};
use crate::{str, Broker, Reply};
use weir_auth::acl::Operation;

/// DescribeAcls.
pub(crate) struct DescribeAcls;

impl Api for DescribeAcls {
    type Request = DescribeAclsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DescribeAcls)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::DescribeAcls(DescribeAclsResponse::default().with_error_code(code))
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        cluster(check, Operation::Describe, RequestKind::DescribeAcls(r), v)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::DescribeAcls(
            describe_acls(broker, request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "every binding",
            R::DescribeAcls(
                DescribeAclsRequest::default()
                    .with_resource_type_filter(1)
                    .with_pattern_type_filter(if v >= 1 { 1 } else { 3 })
                    .with_operation(1)
                    .with_permission_type(1),
            ),
        )]
    }
}

async fn describe_acls(broker: &Broker, r: DescribeAclsRequest, v: i16) -> DescribeAclsResponse {
    if !broker.authz.enabled() {
        return DescribeAclsResponse::default()
            .with_error_code(ResponseError::SecurityDisabled.code())
            .with_error_message(Some(str(NO_AUTHORIZER)));
    }
    // v0 has no pattern type: it describes LITERAL bindings.
    let pattern = if v == 0 { 3 } else { r.pattern_type_filter };
    let filter = match AclFilter::new(
        r.resource_type_filter,
        r.resource_name_filter.as_deref(),
        pattern,
        r.principal_filter.as_deref(),
        r.host_filter.as_deref(),
        r.operation,
        r.permission_type,
    ) {
        Ok(f) => f,
        Err(why) => {
            return DescribeAclsResponse::default()
                .with_error_code(ResponseError::InvalidRequest.code())
                .with_error_message(Some(str(&why)))
        }
    };
    let acls = match stored_acls(broker).await {
        Ok(a) => a,
        Err((e, why)) => {
            return DescribeAclsResponse::default()
                .with_error_code(e.code())
                .with_error_message(Some(str(&why)))
        }
    };
    let mut by_resource: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for a in acls.iter().filter(|a| filter.matches(a)) {
        by_resource
            .entry((a.resource_type.code(), a.name.clone(), a.pattern.code()))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(str(&a.principal))
                    .with_host(str(&a.host))
                    .with_operation(a.operation.code())
                    .with_permission_type(a.permission.code()),
            );
    }
    DescribeAclsResponse::default().with_resources(
        by_resource
            .into_iter()
            .map(|((kind, name, pattern), acls)| {
                DescribeAclsResource::default()
                    .with_resource_type(kind)
                    .with_resource_name(str(&name))
                    .with_pattern_type(pattern)
                    .with_acls(acls)
            })
            .collect(),
    )
}
