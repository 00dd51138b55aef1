//! DeleteAcls: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use weir_auth::acl::{Acl, AclFilter};
use weir_meta::{AclBinding, Acls};

use crate::acls::{acls_changed, binding, stored_acls, unavailable, NO_AUTHORIZER};
use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, Check, Gate};
use crate::{str, Broker, Reply};
use weir_auth::acl::Operation;

/// DeleteAcls.
pub(crate) struct DeleteAcls;

impl Api for DeleteAcls {
    type Request = DeleteAclsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DeleteAcls)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::DeleteAcls(
            DeleteAclsResponse::default().with_filter_results(
                request
                    .filters
                    .iter()
                    .map(|_| DeleteAclsFilterResult::default().with_error_code(code))
                    .collect(),
            ),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        cluster(check, Operation::Alter, RequestKind::DeleteAcls(r), v)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::DeleteAcls(
            delete_acls(broker, request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "a filter that matches and one that does not decode",
            R::DeleteAcls(DeleteAclsRequest::default().with_filters(vec![
                delete_acls_request::DeleteAclsFilter::default()
                    .with_resource_type_filter(2)
                    .with_resource_name_filter(Some(s("t")))
                    .with_pattern_type_filter(3)
                    .with_operation(1)
                    .with_permission_type(1),
                delete_acls_request::DeleteAclsFilter::default()
                    .with_resource_type_filter(99)
                    .with_pattern_type_filter(3)
                    .with_operation(1)
                    .with_permission_type(1),
            ])),
        )]
    }
}

async fn delete_acls(broker: &Broker, r: DeleteAclsRequest, v: i16) -> DeleteAclsResponse {
    if !broker.authz.enabled() {
        let off = DeleteAclsFilterResult::default()
            .with_error_code(ResponseError::SecurityDisabled.code())
            .with_error_message(Some(str(NO_AUTHORIZER)));
        return DeleteAclsResponse::default().with_filter_results(vec![off; r.filters.len()]);
    }
    let acls = match stored_acls(broker).await {
        Ok(a) => a,
        Err((e, why)) => {
            let failed = DeleteAclsFilterResult::default()
                .with_error_code(e.code())
                .with_error_message(Some(str(&why)));
            return DeleteAclsResponse::default()
                .with_filter_results(vec![failed; r.filters.len()]);
        }
    };
    let mut doomed: Vec<AclBinding> = Vec::new();
    let mut results = Vec::with_capacity(r.filters.len());
    for f in &r.filters {
        let pattern = if v == 0 { 3 } else { f.pattern_type_filter };
        let filter = match AclFilter::new(
            f.resource_type_filter,
            f.resource_name_filter.as_deref(),
            pattern,
            f.principal_filter.as_deref(),
            f.host_filter.as_deref(),
            f.operation,
            f.permission_type,
        ) {
            Ok(filter) => filter,
            Err(why) => {
                results.push(
                    DeleteAclsFilterResult::default()
                        .with_error_code(ResponseError::InvalidRequest.code())
                        .with_error_message(Some(str(&why))),
                );
                continue;
            }
        };
        let matching: Vec<&Acl> = acls.iter().filter(|a| filter.matches(a)).collect();
        doomed.extend(matching.iter().map(|a| binding(a)));
        results.push(
            DeleteAclsFilterResult::default().with_matching_acls(
                matching
                    .into_iter()
                    .map(|a| {
                        DeleteAclsMatchingAcl::default()
                            .with_resource_type(a.resource_type.code())
                            .with_resource_name(str(&a.name))
                            .with_pattern_type(a.pattern.code())
                            .with_principal(str(&a.principal))
                            .with_host(str(&a.host))
                            .with_operation(a.operation.code())
                            .with_permission_type(a.permission.code())
                    })
                    .collect(),
            ),
        );
    }
    if !doomed.is_empty() {
        doomed.sort();
        doomed.dedup();
        if let Err(e) = Acls::delete_acls(&*broker.meta, doomed).await {
            let (code, why) = unavailable(e);
            for res in &mut results {
                if res.error_code == 0 {
                    res.error_code = code.code();
                    res.error_message = Some(str(&why));
                    res.matching_acls.clear();
                }
            }
        } else {
            tracing::info!("ACLs deleted");
            acls_changed(broker).await;
        }
    }
    DeleteAclsResponse::default().with_filter_results(results)
}
