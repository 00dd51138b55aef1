//! What CreateAcls, DescribeAcls and DeleteAcls share (each is served from its module in
//! `apis/`; SECURITY_DISABLED without an authorizer, as in Kafka): the bindings
//! [`crate::authz`] enforces are kept in the metadata store so that every broker of a cluster
//! enforces the same ones (the others read them again when the change is announced; the broker
//! that changed them at once).

use kafka_protocol::ResponseError;
use weir_auth::acl::Acl;
use weir_meta::{AclBinding, Acls};

use crate::authz::acls_of;
use crate::Broker;

/// Kafka's words when the ACL APIs are called on a broker without an authorizer.
pub(crate) const NO_AUTHORIZER: &str = "No Authorizer is configured on the broker";

/// An ACL as the metadata store keeps it.
pub(crate) fn binding(a: &Acl) -> AclBinding {
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

/// The error the ACL APIs answer when the metadata store fails.
pub(crate) fn unavailable(e: weir_meta::MetaError) -> (ResponseError, String) {
    tracing::warn!(error = %e, "ACLs in the metadata store");
    (
        ResponseError::UnknownServerError,
        "the metadata store is unavailable".into(),
    )
}

/// The ACLs in the metadata store.
pub(crate) async fn stored_acls(broker: &Broker) -> Result<Vec<Acl>, (ResponseError, String)> {
    Ok(acls_of(
        Acls::acls(&*broker.meta).await.map_err(unavailable)?,
    ))
}

/// Makes this broker's authorizer see a change at once (the others when it is announced).
pub(crate) async fn acls_changed(broker: &Broker) {
    if let Err(e) = broker.refresh_acls().await {
        tracing::warn!(error = %e, "reading the ACLs after a change");
    }
}

/// Why an ACL could not be listed, added or removed outside the Kafka APIs (the admin API).
#[derive(Debug, thiserror::Error)]
pub enum AclError {
    #[error("{NO_AUTHORIZER} (set broker.authorizer)")]
    NoAuthorizer,
    #[error("the metadata store: {0}")]
    Store(#[from] weir_meta::MetaError),
}

/// Every binding in force, of every resource type (the registry's included), for the admin API.
pub async fn all_acls(broker: &Broker) -> Result<Vec<Acl>, AclError> {
    if !broker.authz.enabled() {
        return Err(AclError::NoAuthorizer);
    }
    Ok(acls_of(Acls::acls(&*broker.meta).await?))
}

/// Adds bindings (those that exist already are left as they are); this broker enforces them at
/// once, the others when the change is announced.
pub async fn add_acls(broker: &Broker, acls: &[Acl]) -> Result<(), AclError> {
    if !broker.authz.enabled() {
        return Err(AclError::NoAuthorizer);
    }
    Acls::create_acls(&*broker.meta, acls.iter().map(binding).collect()).await?;
    tracing::info!(?acls, "ACLs created through the admin API");
    acls_changed(broker).await;
    Ok(())
}

/// Removes exactly these bindings; how many there were.
pub async fn remove_acls(broker: &Broker, acls: &[Acl]) -> Result<u64, AclError> {
    if !broker.authz.enabled() {
        return Err(AclError::NoAuthorizer);
    }
    let removed = Acls::delete_acls(&*broker.meta, acls.iter().map(binding).collect()).await?;
    tracing::info!(?acls, removed, "ACLs deleted through the admin API");
    acls_changed(broker).await;
    Ok(removed)
}
