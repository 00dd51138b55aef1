//! CreateAcls, DescribeAcls and DeleteAcls (SECURITY_DISABLED without an authorizer, as in
//! Kafka): the bindings [`crate::authz`] enforces, kept in
//! the metadata store so that every broker of a cluster enforces the same ones (each reads
//! them again within a second; the broker that changed them at once).

use std::collections::BTreeMap;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use weir_auth::acl::{Acl, AclFilter};
use weir_meta::{AclBinding, Acls};

use crate::authz::acls_of;
use crate::str;

/// Kafka's words when the ACL APIs are called on a broker without an authorizer.
const NO_AUTHORIZER: &str = "No Authorizer is configured on the broker";

fn binding(a: &Acl) -> AclBinding {
    AclBinding {
        resource_type: a.resource_type.code(),
        resource_name: a.name.clone(),
        pattern_type: a.pattern.code(),
        principal: a.principal.clone(),
        host: a.host.clone(),
        operation: a.operation.code(),
        permission_type: a.permission.code(),
    }
}

fn unavailable(e: weir_meta::MetaError) -> (ResponseError, String) {
    tracing::warn!(error = %e, "ACLs in the metadata store");
    (
        ResponseError::UnknownServerError,
        "the metadata store is unavailable".into(),
    )
}

impl crate::Broker {
    async fn stored_acls(&self) -> Result<Vec<Acl>, (ResponseError, String)> {
        Ok(acls_of(Acls::acls(&*self.meta).await.map_err(unavailable)?))
    }

    /// Makes this broker's authorizer see a change at once (the others within a second).
    async fn acls_changed(&self) {
        if let Err(e) = self.refresh_acls().await {
            tracing::warn!(error = %e, "reading the ACLs after a change");
        }
    }

    pub(crate) async fn create_acls(&self, r: CreateAclsRequest) -> CreateAclsResponse {
        if !self.authz.enabled() {
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
                Acl::new(
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
            Acls::create_acls(&*self.meta, valid)
                .await
                .map_err(unavailable)
        };
        if stored.is_ok() {
            self.acls_changed().await;
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

    pub(crate) async fn describe_acls(
        &self,
        r: DescribeAclsRequest,
        v: i16,
    ) -> DescribeAclsResponse {
        if !self.authz.enabled() {
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
        let acls = match self.stored_acls().await {
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

    pub(crate) async fn delete_acls(&self, r: DeleteAclsRequest, v: i16) -> DeleteAclsResponse {
        if !self.authz.enabled() {
            let off = DeleteAclsFilterResult::default()
                .with_error_code(ResponseError::SecurityDisabled.code())
                .with_error_message(Some(str(NO_AUTHORIZER)));
            return DeleteAclsResponse::default().with_filter_results(vec![off; r.filters.len()]);
        }
        let acls = match self.stored_acls().await {
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
            if let Err(e) = Acls::delete_acls(&*self.meta, doomed).await {
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
                self.acls_changed().await;
            }
        }
        DeleteAclsResponse::default().with_filter_results(results)
    }
}
