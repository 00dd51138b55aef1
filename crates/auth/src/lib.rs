//! Weir's authentication: the server's side of the SASL mechanisms Kafka clients speak, and the
//! credentials behind them. No I/O: the API layer reads credentials from the metadata store and
//! drives the exchanges over SaslHandshake and SaslAuthenticate; the network layer runs TLS.
//!
//! - [`scram`]: SCRAM-SHA-256 and SCRAM-SHA-512 (salted credentials, the two round trips).
//! - [`oauth`]: OAUTHBEARER: JWTs checked against a JWKS (signature, expiry, issuer, audience).
//! - [`plain`]: SASL/PLAIN, checked against the same SCRAM credentials, so that one store of
//!   users serves every mechanism.
//! - [`checks`]: what checking PLAIN passwords may cost (remembered verdicts, budgets per
//!   address and per broker), never refusing a right password.
//! - [`peer`]: brokers proving to each other that they hold the cluster's internal secret.
//! - [`x509`]: the subject of a client certificate, the principal of an mTLS connection.
//! - [`acl`]: ACL bindings, filters, and the decision for one request ([`acl::Authorizer`]).
//! - [`Principal`]: who a connection is, as ACLs name it (`User:alice`).
//! - [`SecurityProtocol`]: what a listener asks of its clients (TLS, SASL, both, neither).

pub mod acl;
pub mod checks;
pub mod oauth;
pub mod peer;
pub mod plain;
pub mod scram;
pub mod x509;

/// Why an authentication failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// The client's message does not follow the mechanism.
    #[error("{0}")]
    Malformed(String),
    /// Wrong credentials or an exchange the server refuses; the text is the client's error
    /// message.
    #[error("{0}")]
    Failed(String),
    #[error("internal error: {0}")]
    Internal(&'static str),
}

/// The SASL mechanisms Weir offers, by Kafka's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SaslMechanism {
    Plain,
    Scram(scram::Mechanism),
    OAuthBearer,
}

impl SaslMechanism {
    pub const ALL: [SaslMechanism; 4] = [
        SaslMechanism::Plain,
        SaslMechanism::Scram(scram::Mechanism::Sha256),
        SaslMechanism::Scram(scram::Mechanism::Sha512),
        SaslMechanism::OAuthBearer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::Scram(m) => m.name(),
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    pub fn from_name(name: &str) -> Option<SaslMechanism> {
        SaslMechanism::ALL.into_iter().find(|m| m.name() == name)
    }
}

impl std::fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Who is on a connection, as Kafka's `KafkaPrincipal` prints it (`User:alice`; `User:ANONYMOUS`
/// on a listener without authentication).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    pub kind: String,
    pub name: String,
}

impl Principal {
    pub fn user(name: impl Into<String>) -> Principal {
        Principal {
            kind: "User".into(),
            name: name.into(),
        }
    }

    pub fn anonymous() -> Principal {
        Principal::user("ANONYMOUS")
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind, self.name)
    }
}

/// A listener's security protocol, by Kafka's names (`listener.security.protocol.map`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    pub fn from_name(name: &str) -> Option<SecurityProtocol> {
        SecurityProtocol::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl std::fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
