//! Who may use the schema registry: HTTP Basic credentials checked against the broker's SCRAM
//! users, as a SASL PLAIN login is (the same remembered verdicts and per-address budgets), so
//! that one store of users serves the Kafka listeners and the registry.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use base64::Engine;
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

    /// Every authenticated user may do everything (ACLs on subjects are not built yet).
    fn allowed(&self, _principal: &str, _op: Operation, _resource: &Resource) -> bool {
        true
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
