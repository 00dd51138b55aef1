//! A link's definition as a user writes it (JSON through the admin API or `weir link create`)
//! and as the metadata store keeps it: where the source cluster is, how to connect to it, what
//! to mirror. Names follow the Kafka client settings a user already knows
//! (`bootstrap.servers`, `security.protocol`, `sasl.mechanism`...), and topic and group filters
//! are regular expressions matched against whole names, as MirrorMaker 2's `topics` and
//! `groups` are.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use regex_lite::Regex;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use serde::{Deserialize, Serialize};

use crate::LinkError;

/// The CA bundle used when a link names none (Debian's, also in Weir's container image).
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// A link, as defined.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// The link's name: letters, digits, `.`, `_` and `-`.
    pub name: String,
    /// `host:port` of one or more source brokers, comma-separated.
    #[serde(rename = "bootstrap.servers")]
    pub bootstrap_servers: String,
    /// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    #[serde(rename = "security.protocol", default = "plaintext")]
    pub security_protocol: String,
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with a SASL protocol).
    #[serde(
        rename = "sasl.mechanism",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub sasl_mechanism: Option<String>,
    #[serde(
        rename = "sasl.username",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub sasl_username: Option<String>,
    #[serde(
        rename = "sasl.password",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub sasl_password: Option<String>,
    /// PEM file of the CAs the source's certificates are checked against (default: the
    /// system's bundle).
    #[serde(
        rename = "ssl.ca.location",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ssl_ca_location: Option<PathBuf>,
    /// Topics to mirror: regular expressions, each matching whole names. New source topics
    /// that match are picked up.
    #[serde(default)]
    pub topics: Vec<String>,
    #[serde(rename = "topics.exclude", default)]
    pub topics_exclude: Vec<String>,
    /// Consumer groups whose committed offsets are copied (regular expressions).
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(rename = "groups.exclude", default)]
    pub groups_exclude: Vec<String>,
    /// Bytes a fetch from one source broker asks for at most.
    #[serde(rename = "fetch.max.bytes", default = "fetch_max_bytes")]
    pub fetch_max_bytes: i32,
    /// Bytes per partition a fetch asks for at most.
    #[serde(
        rename = "max.partition.fetch.bytes",
        default = "partition_fetch_bytes"
    )]
    pub max_partition_fetch_bytes: i32,
    /// How long a source broker may hold a fetch with nothing new.
    #[serde(rename = "fetch.max.wait.ms", default = "fetch_max_wait_ms")]
    pub fetch_max_wait_ms: i32,
    /// Bound of every request to the source.
    #[serde(rename = "request.timeout.ms", default = "request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// How often the source's topics, partitions and configs are looked at.
    #[serde(rename = "metadata.refresh.ms", default = "metadata_refresh_ms")]
    pub metadata_refresh_ms: u64,
    /// How often the chosen groups' committed offsets are copied.
    #[serde(rename = "groups.sync.ms", default = "groups_sync_ms")]
    pub groups_sync_ms: u64,
}

fn plaintext() -> String {
    "PLAINTEXT".into()
}
fn fetch_max_bytes() -> i32 {
    50 << 20
}
fn partition_fetch_bytes() -> i32 {
    4 << 20
}
fn fetch_max_wait_ms() -> i32 {
    500
}
fn request_timeout_ms() -> u64 {
    30_000
}
fn metadata_refresh_ms() -> u64 {
    5_000
}
fn groups_sync_ms() -> u64 {
    1_000
}

/// How a link connects to its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Security {
    pub tls: bool,
    pub ca: Option<PathBuf>,
    sasl: Option<Sasl>,
}

impl Security {
    pub fn sasl(&self) -> Option<&Sasl> {
        self.sasl.as_ref()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sasl {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// Names and patterns, matched against whole names.
#[derive(Debug, Clone)]
pub struct Filter {
    include: Vec<Regex>,
    exclude: Vec<Regex>,
}

impl Filter {
    fn new(what: &str, include: &[String], exclude: &[String]) -> Result<Filter, LinkError> {
        let compile = |p: &String| {
            Regex::new(&format!("^(?:{p})$"))
                .map_err(|e| LinkError::Config(format!("{what} pattern {p:?}: {e}")))
        };
        Ok(Filter {
            include: include.iter().map(compile).collect::<Result<_, _>>()?,
            exclude: exclude.iter().map(compile).collect::<Result<_, _>>()?,
        })
    }

    pub fn matches(&self, name: &str) -> bool {
        self.include.iter().any(|r| r.is_match(name))
            && !self.exclude.iter().any(|r| r.is_match(name))
    }
}

/// A link's definition, checked: what the mirroring runs with.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    pub spec: LinkSpec,
    pub bootstrap: Vec<String>,
    pub security: Security,
    pub topics: Filter,
    pub groups: Filter,
}

impl LinkConfig {
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.spec.request_timeout_ms)
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl LinkSpec {
    /// Parses a definition from JSON, with every setting checked.
    pub fn from_json(json: &str) -> Result<LinkConfig, LinkError> {
        let spec: LinkSpec = serde_json::from_str(json)
            .map_err(|e| LinkError::Config(format!("a link definition: {e}")))?;
        spec.check()
    }

    /// Checks every setting; what the mirroring runs with.
    pub fn check(self) -> Result<LinkConfig, LinkError> {
        let bad = |m: String| Err(LinkError::Config(m));
        if !valid_name(&self.name) {
            return bad(format!(
                "link name {:?}: use 1-200 letters, digits, '.', '_' or '-'",
                self.name
            ));
        }
        let bootstrap: Vec<String> = self
            .bootstrap_servers
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if bootstrap.is_empty() || bootstrap.iter().any(|b| !b.contains(':')) {
            return bad(format!(
                "bootstrap.servers {:?}: give host:port of one or more source brokers",
                self.bootstrap_servers
            ));
        }
        let (tls, sasl) = match self.security_protocol.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => (false, false),
            "SSL" => (true, false),
            "SASL_PLAINTEXT" => (false, true),
            "SASL_SSL" => (true, true),
            other => {
                return bad(format!(
                    "security.protocol {other:?}: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
                ))
            }
        };
        let sasl = if sasl {
            let mechanism = match self.sasl_mechanism.as_deref().unwrap_or("PLAIN") {
                "PLAIN" => SaslMechanism::Plain,
                "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
                "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
                other => {
                    return bad(format!(
                        "sasl.mechanism {other:?}: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
                    ))
                }
            };
            let (Some(username), Some(password)) = (&self.sasl_username, &self.sasl_password)
            else {
                return bad(format!(
                    "security.protocol {} needs sasl.username and sasl.password",
                    self.security_protocol
                ));
            };
            Some(Sasl {
                mechanism,
                username: username.clone(),
                password: password.clone(),
            })
        } else {
            None
        };
        if self.topics.is_empty() {
            return bad("topics: name at least one topic or pattern to mirror".into());
        }
        if self.fetch_max_bytes < 1024 || self.max_partition_fetch_bytes < 1024 {
            return bad("fetch.max.bytes and max.partition.fetch.bytes: at least 1024".into());
        }
        if !(0..=60_000).contains(&self.fetch_max_wait_ms) || self.request_timeout_ms < 1000 {
            return bad("fetch.max.wait.ms: 0 to 60000; request.timeout.ms: at least 1000".into());
        }
        if self.request_timeout_ms <= self.fetch_max_wait_ms as u64 {
            return bad("request.timeout.ms must be longer than fetch.max.wait.ms".into());
        }
        let topics = Filter::new("topics", &self.topics, &self.topics_exclude)?;
        let groups = Filter::new("groups", &self.groups, &self.groups_exclude)?;
        Ok(LinkConfig {
            bootstrap,
            security: Security {
                tls,
                ca: self.ssl_ca_location.clone(),
                sasl,
            },
            topics,
            groups,
            spec: self,
        })
    }

    /// The definition with its password hidden, for status answers and logs.
    pub fn redacted(&self) -> LinkSpec {
        let mut s = self.clone();
        if s.sasl_password.is_some() {
            s.sasl_password = Some("[hidden]".into());
        }
        s
    }
}

/// The TLS client configuration of a link (`None` without TLS).
pub fn tls_config(security: &Security) -> Result<Option<Arc<rustls::ClientConfig>>, LinkError> {
    if !security.tls {
        return Ok(None);
    }
    let path = security
        .ca
        .clone()
        .unwrap_or_else(|| PathBuf::from(SYSTEM_CA_BUNDLE));
    let mut roots = rustls::RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&path)
        .and_then(|i| i.collect::<Result<_, _>>())
        .map_err(|e| LinkError::Config(format!("ssl.ca.location {}: {e}", path.display())))?;
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(LinkError::Config(format!(
            "ssl.ca.location {}: no certificate in it",
            path.display()
        )));
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| LinkError::Config(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Some(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_definition_is_checked_and_defaults_filled() {
        let c = LinkSpec::from_json(
            r#"{"name":"from-kafka","bootstrap.servers":"k1:9092, k2:9092","topics":["orders","events\\..*"],"topics.exclude":["events\\.internal"],"groups":[".*"]}"#,
        )
        .expect("valid");
        assert_eq!(c.bootstrap, vec!["k1:9092", "k2:9092"]);
        assert!(c.topics.matches("orders") && c.topics.matches("events.a"));
        assert!(!c.topics.matches("orders2") && !c.topics.matches("events.internal"));
        assert!(c.groups.matches("anything"));
        assert_eq!(c.spec.fetch_max_bytes, 50 << 20);
        assert!(c.security.sasl().is_none() && !c.security.tls);
    }

    #[test]
    fn bad_definitions_say_what_is_wrong() {
        let cases = [
            (
                r#"{"name":"a b","bootstrap.servers":"k:1","topics":["t"]}"#,
                "link name",
            ),
            (
                r#"{"name":"a","bootstrap.servers":"k","topics":["t"]}"#,
                "bootstrap.servers",
            ),
            (
                r#"{"name":"a","bootstrap.servers":"k:1","topics":[]}"#,
                "topics",
            ),
            (
                r#"{"name":"a","bootstrap.servers":"k:1","topics":["("]}"#,
                "topics pattern",
            ),
            (
                r#"{"name":"a","bootstrap.servers":"k:1","topics":["t"],"security.protocol":"SASL_SSL"}"#,
                "sasl.username",
            ),
            (
                r#"{"name":"a","bootstrap.servers":"k:1","topics":["t"],"colour":"red"}"#,
                "unknown field",
            ),
        ];
        for (json, says) in cases {
            let e = LinkSpec::from_json(json).expect_err(json).to_string();
            assert!(e.contains(says), "{json}: {e}");
        }
    }

    #[test]
    fn the_password_is_hidden_from_status() {
        let c = LinkSpec::from_json(
            r#"{"name":"a","bootstrap.servers":"k:1","topics":["t"],"security.protocol":"SASL_PLAINTEXT","sasl.mechanism":"SCRAM-SHA-512","sasl.username":"u","sasl.password":"secret"}"#,
        )
        .expect("valid");
        assert_eq!(
            c.security.sasl().map(|s| s.mechanism),
            Some(SaslMechanism::ScramSha512)
        );
        let shown = serde_json::to_string(&c.spec.redacted()).expect("json");
        assert!(!shown.contains("secret"), "{shown}");
    }
}
