//! The broker's Kafka listeners, from `[security]` (Kafka's `listeners`,
//! `advertised.listeners`, `listener.security.protocol.map`) or, when that is empty, the one
//! PLAINTEXT listener of `broker.listen`; and what each asks of its clients (TLS files, SASL
//! mechanisms).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use weir_api::ListenerSecurity;
use weir_auth::{SaslMechanism, SecurityProtocol};
use weir_network::{ClientAuth, TlsFiles};

use crate::config::Config;

/// One Kafka listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    pub name: String,
    pub protocol: SecurityProtocol,
    /// host:port to bind.
    pub bind: String,
    /// Where clients are told to connect.
    pub advertised_host: String,
    pub advertised_port: i32,
}

/// `NAME://host:port` → (NAME, host:port).
fn parse_entry(entry: &str) -> Result<(String, String), String> {
    let (name, addr) = entry
        .split_once("://")
        .ok_or_else(|| format!("{entry:?} is not NAME://host:port"))?;
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!(
            "{entry:?}: a listener name is letters, digits, _ and -"
        ));
    }
    split(addr).map_err(|e| format!("{entry:?}: {e}"))?;
    Ok((name.to_ascii_uppercase(), addr.to_string()))
}

/// host:port → (host, port); `[v6]:port` and an empty host (every interface) too.
fn split(addr: &str) -> Result<(String, i32), String> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("{addr:?} is not host:port"))?;
    let port: u16 = port.parse().map_err(|_| format!("bad port in {addr:?}"))?;
    Ok((
        host.trim_matches(|c| c == '[' || c == ']').to_string(),
        i32::from(port),
    ))
}

fn entries(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|e| !e.is_empty())
}

/// The listeners, checked: names unique, protocols known, TLS listeners with a keystore, SASL
/// listeners with mechanisms.
pub fn listeners(config: &Config) -> Result<Vec<ListenerSpec>, String> {
    let sec = &config.security;
    if sec.listeners.trim().is_empty() {
        let (host, port) =
            split(config.advertised()).map_err(|e| format!("broker.advertised: {e}"))?;
        return Ok(vec![ListenerSpec {
            name: "PLAINTEXT".into(),
            protocol: SecurityProtocol::Plaintext,
            bind: config.broker.listen.clone(),
            advertised_host: host,
            advertised_port: port,
        }]);
    }
    let mut map = HashMap::new();
    for e in entries(&sec.listener_security_protocol_map) {
        let (name, protocol) = e
            .split_once(':')
            .ok_or_else(|| format!("listener_security_protocol_map: {e:?} is not NAME:PROTOCOL"))?;
        let protocol = SecurityProtocol::from_name(protocol.trim()).ok_or_else(|| {
            format!("listener_security_protocol_map: unknown protocol {protocol:?}")
        })?;
        map.insert(name.trim().to_ascii_uppercase(), protocol);
    }
    let mut advertised = HashMap::new();
    for e in entries(&sec.advertised_listeners) {
        let (name, addr) = parse_entry(e).map_err(|e| format!("advertised_listeners: {e}"))?;
        advertised.insert(name, addr);
    }
    let mut out: Vec<ListenerSpec> = Vec::new();
    for e in entries(&sec.listeners) {
        let (name, bind) = parse_entry(e).map_err(|e| format!("listeners: {e}"))?;
        if out.iter().any(|l| l.name == name) {
            return Err(format!("listeners: {name} is named twice"));
        }
        let protocol = map
            .get(&name)
            .copied()
            .or_else(|| SecurityProtocol::from_name(&name))
            .ok_or_else(|| {
                format!("listeners: {name} is not a protocol name and listener_security_protocol_map does not map it")
            })?;
        let addr = match advertised.remove(&name) {
            Some(a) => a,
            None if out.is_empty() && !config.broker.advertised.is_empty() => {
                config.broker.advertised.clone()
            }
            None => bind.clone(),
        };
        let (advertised_host, advertised_port) = split(&addr)?;
        out.push(ListenerSpec {
            name,
            protocol,
            bind,
            advertised_host,
            advertised_port,
        });
    }
    if let Some(name) = advertised.keys().next() {
        return Err(format!("advertised_listeners: {name} is not a listener"));
    }
    if out.is_empty() {
        return Err("listeners: no listener".into());
    }
    if out.iter().any(|l| l.protocol.tls()) {
        tls_files(config)?;
    }
    authorizer(config)?;
    if out.iter().any(|l| l.protocol.sasl()) && mechanisms(config)?.is_empty() {
        return Err("sasl_enabled_mechanisms: a SASL listener needs at least one".into());
    }
    Ok(out)
}

/// The TLS files of SSL and SASL_SSL listeners.
pub fn tls_files(config: &Config) -> Result<TlsFiles, String> {
    let sec = &config.security;
    if sec.ssl_keystore_location.is_empty() {
        return Err(
            "a TLS listener needs ssl_keystore_location (PEM certificate chain and key)".into(),
        );
    }
    let client_auth = ClientAuth::from_name(&sec.ssl_client_auth).ok_or_else(|| {
        format!(
            "ssl_client_auth: {:?} is not none, requested or required",
            sec.ssl_client_auth
        )
    })?;
    let client_ca = (!sec.ssl_truststore_location.is_empty())
        .then(|| PathBuf::from(&sec.ssl_truststore_location));
    if client_auth != ClientAuth::None && client_ca.is_none() {
        return Err("ssl_client_auth needs ssl_truststore_location (the clients' CA, PEM)".into());
    }
    let key = if sec.ssl_key_location.is_empty() {
        &sec.ssl_keystore_location
    } else {
        &sec.ssl_key_location
    };
    Ok(TlsFiles {
        certificate: PathBuf::from(&sec.ssl_keystore_location),
        key: PathBuf::from(key),
        client_ca,
        client_auth,
    })
}

/// `sasl_enabled_mechanisms`, checked.
pub fn mechanisms(config: &Config) -> Result<Vec<SaslMechanism>, String> {
    entries(&config.security.sasl_enabled_mechanisms)
        .map(|m| {
            SaslMechanism::from_name(&m.to_ascii_uppercase()).ok_or_else(|| {
                format!(
                    "sasl_enabled_mechanisms: {m:?} is not PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"
                )
            })
        })
        .collect()
}

/// Whether ACLs are enforced (`security.authorizer`), and the super users.
pub fn authorizer(config: &Config) -> Result<Option<HashSet<String>>, String> {
    let sec = &config.security;
    match sec.authorizer.trim() {
        "" => Ok(None),
        "acl"
        | "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        | "kafka.security.authorizer.AclAuthorizer" => {
            let mut supers = HashSet::new();
            for p in sec
                .super_users
                .split(';')
                .map(str::trim)
                .filter(|p| !p.is_empty())
            {
                if !p.contains(':') {
                    return Err(format!("super_users: {p:?} is not a principal (User:name)"));
                }
                supers.insert(p.to_string());
            }
            Ok(Some(supers))
        }
        other => Err(format!(
            "authorizer: {other:?} is not \"acl\" (or empty: no ACL checks)"
        )),
    }
}

/// OAUTHBEARER's JWKS file, if the mechanism is enabled on a SASL listener.
pub fn jwks_path(config: &Config) -> Result<Option<PathBuf>, String> {
    let url = config.security.sasl_oauthbearer_jwks_endpoint_url.trim();
    let sasl = listeners(config)?.iter().any(|l| l.protocol.sasl());
    if !sasl || !mechanisms(config)?.contains(&SaslMechanism::OAuthBearer) {
        return Ok(None);
    }
    if url.is_empty() {
        return Err("OAUTHBEARER needs sasl_oauthbearer_jwks_endpoint_url (a JWKS file)".into());
    }
    if url.starts_with("http://") || url.starts_with("https://") {
        return Err("sasl_oauthbearer_jwks_endpoint_url: only file URLs are read for now".into());
    }
    Ok(Some(PathBuf::from(
        url.strip_prefix("file://").unwrap_or(url),
    )))
}

/// Reads the JWKS file into a validator with the configured claims.
pub fn oauth_validator(
    config: &Config,
    path: &std::path::Path,
) -> Result<weir_auth::oauth::Validator, String> {
    let sec = &config.security;
    let jwks =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let mut v = weir_auth::oauth::Validator::from_jwks(&jwks)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    v.issuer = (!sec.sasl_oauthbearer_expected_issuer.is_empty())
        .then(|| sec.sasl_oauthbearer_expected_issuer.clone());
    v.audience = entries(&sec.sasl_oauthbearer_expected_audience)
        .map(str::to_string)
        .collect();
    v.subject_claim = sec.sasl_oauthbearer_sub_claim_name.clone();
    v.clock_skew_s = sec.sasl_oauthbearer_clock_skew_seconds.max(0);
    Ok(v)
}

/// What the network layer needs of a listener.
pub fn security(config: &Config, spec: &ListenerSpec) -> Result<Arc<ListenerSecurity>, String> {
    Ok(Arc::new(ListenerSecurity {
        name: spec.name.clone(),
        protocol: spec.protocol,
        mechanisms: if spec.protocol.sasl() {
            mechanisms(config)?
        } else {
            Vec::new()
        },
        reauth_ms: config.security.connections_max_reauth_ms,
        peer_secret: None,
        legacy_peer_hello: false,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<Vec<ListenerSpec>, String> {
        let mut c = Config::default();
        for (k, v) in pairs {
            let v = v.to_string();
            match *k {
                "listeners" => c.security.listeners = v,
                "advertised" => c.security.advertised_listeners = v,
                "map" => c.security.listener_security_protocol_map = v,
                "keystore" => c.security.ssl_keystore_location = v,
                "client_auth" => c.security.ssl_client_auth = v,
                "mechanisms" => c.security.sasl_enabled_mechanisms = v,
                "broker.advertised" => c.broker.advertised = v,
                _ => panic!("{k}"),
            }
        }
        listeners(&c)
    }

    #[test]
    fn without_listeners_the_broker_listen_address_is_one_plaintext_listener() {
        let l = config(&[]).expect("default");
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].name, "PLAINTEXT");
        assert_eq!(l[0].bind, "127.0.0.1:9092");
        assert_eq!(
            (l[0].advertised_host.as_str(), l[0].advertised_port),
            ("127.0.0.1", 9092)
        );
    }

    #[test]
    fn listeners_take_kafkas_form_with_protocols_mapped_and_addresses_advertised() {
        let l = config(&[
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092, external://0.0.0.0:9093",
            ),
            ("advertised", "EXTERNAL://broker1.example.com:19093"),
            ("map", "EXTERNAL:SASL_SSL"),
            ("keystore", "/k.pem"),
        ])
        .expect("listeners");
        assert_eq!(l[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(l[1].name, "EXTERNAL");
        assert_eq!(l[1].protocol, SecurityProtocol::SaslSsl);
        assert_eq!(l[1].bind, "0.0.0.0:9093");
        assert_eq!(
            (l[1].advertised_host.as_str(), l[1].advertised_port),
            ("broker1.example.com", 19093)
        );
        let l = config(&[
            ("listeners", "SASL_PLAINTEXT://[::1]:9094"),
            ("broker.advertised", "b:1"),
        ])
        .expect("v6");
        assert_eq!(l[0].bind, "[::1]:9094");
        assert_eq!(
            (l[0].advertised_host.as_str(), l[0].advertised_port),
            ("b", 1)
        );
    }

    #[test]
    fn bad_listener_settings_say_what_is_wrong() {
        for (pairs, words) in [
            (
                vec![("listeners", "PLAINTEXT://a:1,PLAINTEXT://a:2")],
                "named twice",
            ),
            (vec![("listeners", "OTHER://a:1")], "does not map it"),
            (vec![("listeners", "PLAINTEXT:/a:1")], "NAME://host:port"),
            (vec![("listeners", "PLAINTEXT://a:99999")], "bad port"),
            (vec![("listeners", "SSL://a:1")], "ssl_keystore_location"),
            (
                vec![
                    ("listeners", "SSL://a:1"),
                    ("keystore", "/k"),
                    ("client_auth", "required"),
                ],
                "ssl_truststore_location",
            ),
            (
                vec![
                    ("listeners", "SASL_PLAINTEXT://a:1"),
                    ("mechanisms", "GSSAPI"),
                ],
                "is not PLAIN",
            ),
            (
                vec![("listeners", "SASL_PLAINTEXT://a:1"), ("mechanisms", "")],
                "at least one",
            ),
            (
                vec![
                    ("listeners", "PLAINTEXT://a:1"),
                    ("advertised", "SSL://b:2"),
                ],
                "not a listener",
            ),
            (
                vec![("listeners", "PLAINTEXT://a:1"), ("map", "X:TLS")],
                "unknown protocol",
            ),
        ] {
            let e = config(&pairs).expect_err("refused");
            assert!(e.contains(words), "{pairs:?}: {e}");
        }
    }
}
