//! Who may use the schema registry: HTTP Basic credentials checked against the broker's SCRAM
//! users, as a SASL PLAIN login is (the same remembered verdicts and per-address budgets), so
//! that one store of users serves the Kafka listeners and the registry.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use base64::Engine;
use weir_auth::{acl, Principal};
use weir_registry::http::{Gate, Operation, Resource};
use weir_registry::RegistryError;

pub struct BasicGate {
    pub broker: Arc<weir_api::Broker>,
}

/// `Basic <base64 of user:password>`: the user and the password.
fn credentials(authorization: Option<&str>) -> Option<(String, String)> {
    let (scheme, encoded) = authorization?.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

#[async_trait::async_trait]
impl Gate for BasicGate {
    async fn authenticate(
        &self,
        authorization: Option<&str>,
        peer: Option<SocketAddr>,
    ) -> Result<String, RegistryError> {
        let Some((user, password)) = credentials(authorization) else {
            return Err(RegistryError::unauthorized());
        };
        let ip = peer.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |p| p.ip());
        match self
            .broker
            .sasl
            .check_password(&*self.broker.meta, &user, &password, ip)
            .await
        {
            Ok(user) => Ok(format!("User:{user}")),
            Err(e) => {
                tracing::info!(%ip, %user, error = %e, "schema registry: authentication failed");
                Err(RegistryError::unauthorized())
            }
        }
    }

    /// As the broker's ACLs say (the registry's resource types, SUBJECT and REGISTRY); with no
    /// authorizer configured every authenticated user may do everything, as on the Kafka
    /// listeners.
    fn allowed(&self, principal: &str, host: &str, op: Operation, resource: &Resource) -> bool {
        let Some(authorizer) = self.broker.authz.current() else {
            return true;
        };
        let who = match principal.split_once(':') {
            Some((kind, name)) => Principal {
                kind: kind.to_string(),
                name: name.to_string(),
            },
            None => Principal::user(principal),
        };
        let (kind, name) = resource_of(resource);
        let allowed = authorizer.authorize(&who, host, operation_of(op), kind, name);
        if !allowed {
            tracing::debug!(%principal, %host, ?op, ?resource, "schema registry: denied");
        }
        allowed
    }
}

fn operation_of(op: Operation) -> acl::Operation {
    match op {
        Operation::Read => acl::Operation::Read,
        Operation::Write => acl::Operation::Write,
        Operation::Delete => acl::Operation::Delete,
        Operation::Describe => acl::Operation::Describe,
        Operation::DescribeConfigs => acl::Operation::DescribeConfigs,
        Operation::AlterConfigs => acl::Operation::AlterConfigs,
    }
}

fn resource_of(resource: &Resource) -> (acl::ResourceType, &str) {
    match resource {
        Resource::Subject(s) => (acl::ResourceType::Subject, s),
        Resource::Registry => (acl::ResourceType::Registry, acl::REGISTRY_NAME),
    }
}

#[cfg(test)]
mod tests {
    use super::credentials;

    #[test]
    fn basic_credentials_are_read_from_the_header() {
        // "alice:s3cr:t" (a password may hold a colon).
        let h = "Basic YWxpY2U6czNjcjp0";
        assert_eq!(
            credentials(Some(h)),
            Some(("alice".to_string(), "s3cr:t".to_string()))
        );
        assert_eq!(
            credentials(Some("basic YWxpY2U6czNjcjp0")).map(|c| c.0),
            Some("alice".into())
        );
        assert_eq!(credentials(Some("Bearer abc")), None);
        assert_eq!(credentials(Some("Basic !!!")), None);
        assert_eq!(credentials(None), None);
    }
}
