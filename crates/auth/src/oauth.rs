//! SASL/OAUTHBEARER (RFC 7628, KIP-255, KIP-768): the client sends a JWT as a bearer token;
//! the broker checks its signature against the keys of a JWKS file (the identity provider's
//! published keys, as Kafka's `sasl.oauthbearer.jwks.endpoint.url` with a `file:` URL), its
//! expiry, and, if configured, its issuer and audience. The principal is the token's `sub`
//! claim (or the configured one); the SASL session ends when the token does.
//!
//! Signatures: RS256/384/512 and PS256/384/512 (RSA keys), ES256 and ES384 (EC keys). A token
//! with `alg: none` is refused.

use std::collections::HashMap;

use aws_lc_rs::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;
use serde_json::Value;

use crate::AuthError;

/// One public key of the JWKS.
#[derive(Debug, Clone)]
enum Key {
    Rsa { n: Vec<u8>, e: Vec<u8> },
    Ec { curve: String, point: Vec<u8> },
}

/// The keys tokens may be signed with, and what a token must claim.
#[derive(Debug, Clone, Default)]
pub struct Validator {
    /// By `kid`; keys without one under "".
    keys: HashMap<String, Key>,
    /// `sasl.oauthbearer.expected.issuer`.
    pub issuer: Option<String>,
    /// `sasl.oauthbearer.expected.audience`: the token's `aud` must name one of these.
    pub audience: Vec<String>,
    /// `sasl.oauthbearer.sub.claim.name`.
    pub subject_claim: String,
    /// `sasl.oauthbearer.clock.skew.seconds`.
    pub clock_skew_s: i64,
}

/// A token that passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub subject: String,
    /// Seconds since the epoch.
    pub expires_s: i64,
}

fn b64(s: &str) -> Result<Vec<u8>, String> {
    B64URL
        .decode(s.trim_end_matches('='))
        .map_err(|_| "not base64url".to_string())
}

fn fail(why: impl Into<String>) -> AuthError {
    AuthError::Failed(format!("Invalid OAuth token: {}", why.into()))
}

impl Validator {
    /// Reads the keys of a JWKS document (`{"keys": [...]}`); keys of other kinds or uses are
    /// skipped.
    pub fn from_jwks(jwks: &str) -> Result<Validator, String> {
        let doc: Value =
            serde_json::from_str(jwks).map_err(|e| format!("JWKS is not JSON: {e}"))?;
        let list = doc["keys"].as_array().ok_or("JWKS has no \"keys\" array")?;
        let mut keys = HashMap::new();
        for k in list {
            if k["use"].as_str().is_some_and(|u| u != "sig") {
                continue;
            }
            let kid = k["kid"].as_str().unwrap_or("").to_string();
            let field = |name: &str| -> Result<Vec<u8>, String> {
                let v = k[name]
                    .as_str()
                    .ok_or(format!("key {kid:?} has no {name}"))?;
                b64(v).map_err(|e| format!("key {kid:?}: {name} is {e}"))
            };
            let key = match k["kty"].as_str() {
                Some("RSA") => {
                    // Big-endian without leading zeros, as the verifier wants them.
                    let strip = |v: Vec<u8>| v.into_iter().skip_while(|b| *b == 0).collect();
                    Key::Rsa {
                        n: strip(field("n")?),
                        e: strip(field("e")?),
                    }
                }
                Some("EC") => {
                    let curve = k["crv"].as_str().unwrap_or("").to_string();
                    let mut point = vec![4u8];
                    point.extend(field("x")?);
                    point.extend(field("y")?);
                    Key::Ec { curve, point }
                }
                _ => continue,
            };
            keys.insert(kid, key);
        }
        if keys.is_empty() {
            return Err("JWKS holds no RSA or EC signing key".into());
        }
        Ok(Validator {
            keys,
            subject_claim: "sub".into(),
            clock_skew_s: 30,
            ..Validator::default()
        })
    }

    /// Checks a JWT at `now_s` (seconds since the epoch).
    pub fn validate(&self, jwt: &str, now_s: i64) -> Result<Token, AuthError> {
        let mut parts = jwt.split('.');
        let (Some(h), Some(p), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(fail("not a JWS of three parts"));
        };
        let header: Value = serde_json::from_slice(&b64(h).map_err(fail)?)
            .map_err(|_| fail("the header is not JSON"))?;
        let claims: Value = serde_json::from_slice(&b64(p).map_err(fail)?)
            .map_err(|_| fail("the payload is not JSON"))?;
        let signature = b64(s).map_err(fail)?;
        let alg = header["alg"].as_str().unwrap_or("none");
        let kid = header["kid"].as_str().unwrap_or("");
        let key = self
            .keys
            .get(kid)
            .or_else(|| {
                (self.keys.len() == 1)
                    .then(|| self.keys.values().next())
                    .flatten()
            })
            .ok_or_else(|| fail(format!("no key with kid {kid:?} in the JWKS")))?;
        let signed = &jwt.as_bytes()[..h.len() + 1 + p.len()];
        let verified = match (alg, key) {
            (
                a @ ("RS256" | "RS384" | "RS512" | "PS256" | "PS384" | "PS512"),
                Key::Rsa { n, e },
            ) => {
                let params = match a {
                    "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
                    "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
                    "RS512" => &signature::RSA_PKCS1_2048_8192_SHA512,
                    "PS256" => &signature::RSA_PSS_2048_8192_SHA256,
                    "PS384" => &signature::RSA_PSS_2048_8192_SHA384,
                    _ => &signature::RSA_PSS_2048_8192_SHA512,
                };
                RsaPublicKeyComponents { n, e }
                    .verify(params, signed, &signature)
                    .is_ok()
            }
            ("ES256", Key::Ec { curve, point }) if curve == "P-256" => {
                UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(signed, &signature)
                    .is_ok()
            }
            ("ES384", Key::Ec { curve, point }) if curve == "P-384" => {
                UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_FIXED, point)
                    .verify(signed, &signature)
                    .is_ok()
            }
            (a, _) => return Err(fail(format!("algorithm {a} is not accepted for this key"))),
        };
        if !verified {
            return Err(fail("the signature does not verify"));
        }
        let time = |name: &str| {
            claims[name]
                .as_i64()
                .or_else(|| claims[name].as_f64().map(|f| f as i64))
        };
        let expires_s = time("exp").ok_or_else(|| fail("no exp claim"))?;
        if now_s > expires_s + self.clock_skew_s {
            return Err(fail("the token has expired"));
        }
        if let Some(nbf) = time("nbf") {
            if now_s + self.clock_skew_s < nbf {
                return Err(fail("the token is not valid yet"));
            }
        }
        if let Some(iss) = &self.issuer {
            if claims["iss"].as_str() != Some(iss) {
                return Err(fail("the issuer is not the expected one"));
            }
        }
        if !self.audience.is_empty() {
            let aud: Vec<&str> = match &claims["aud"] {
                Value::String(a) => vec![a.as_str()],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !aud.iter().any(|a| self.audience.iter().any(|x| x == a)) {
                return Err(fail("the audience is not an expected one"));
            }
        }
        let subject = claims[self.subject_claim.as_str()]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| fail(format!("no {} claim", self.subject_claim)))?
            .to_string();
        Ok(Token { subject, expires_s })
    }
}

/// The bearer token of a client's OAUTHBEARER message (`n,,\x01auth=Bearer <jwt>\x01\x01`).
pub fn bearer(message: &[u8]) -> Result<&str, AuthError> {
    let m = std::str::from_utf8(message)
        .map_err(|_| AuthError::Malformed("the OAUTHBEARER message is not UTF-8".into()))?;
    let (gs2, rest) = m.split_once('\x01').ok_or_else(|| {
        AuthError::Malformed("the OAUTHBEARER message has no key/value pairs".into())
    })?;
    if !gs2.starts_with("n,") && !gs2.starts_with("y,") {
        return Err(AuthError::Malformed(
            "the OAUTHBEARER message has no GS2 header".into(),
        ));
    }
    rest.split('\x01')
        .find_map(|kv| kv.strip_prefix("auth="))
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| AuthError::Malformed("the OAUTHBEARER message has no bearer token".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

    fn enc(v: &Value) -> String {
        B64URL.encode(serde_json::to_vec(v).expect("json"))
    }

    struct Issuer {
        key: EcdsaKeyPair,
    }

    impl Issuer {
        fn new() -> Issuer {
            let rng = SystemRandom::new();
            let pkcs8 =
                EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
            Issuer {
                key: EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref())
                    .expect("key"),
            }
        }

        fn jwks(&self, kid: &str) -> String {
            let p = self.key.public_key().as_ref();
            serde_json::json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
                "x": B64URL.encode(&p[1..33]), "y": B64URL.encode(&p[33..65])}]})
            .to_string()
        }

        fn token(&self, kid: &str, claims: Value) -> String {
            let head = enc(&serde_json::json!({"alg": "ES256", "kid": kid, "typ": "JWT"}));
            let body = enc(&claims);
            let signed = format!("{head}.{body}");
            let sig = self
                .key
                .sign(&SystemRandom::new(), signed.as_bytes())
                .expect("sign");
            format!("{signed}.{}", B64URL.encode(sig.as_ref()))
        }
    }

    #[test]
    fn a_signed_token_names_its_subject_until_it_expires() {
        let i = Issuer::new();
        let v = Validator::from_jwks(&i.jwks("k1")).expect("jwks");
        let t = i.token(
            "k1",
            serde_json::json!({"sub": "alice", "exp": 2000, "iat": 1000}),
        );
        assert_eq!(
            v.validate(&t, 1500),
            Ok(Token {
                subject: "alice".into(),
                expires_s: 2000
            })
        );
        assert!(v.validate(&t, 2031).is_err(), "expired beyond the skew");
        let msg = format!("n,,\x01auth=Bearer {t}\x01\x01");
        assert_eq!(bearer(msg.as_bytes()), Ok(t.as_str()));
    }

    #[test]
    fn forged_foreign_and_malformed_tokens_fail() {
        let i = Issuer::new();
        let other = Issuer::new();
        let v = Validator::from_jwks(&i.jwks("k1")).expect("jwks");
        let claims = serde_json::json!({"sub": "alice", "exp": 2000});
        // Another issuer's key, under the same kid.
        assert!(v
            .validate(&other.token("k1", claims.clone()), 1500)
            .is_err());
        // A payload changed after signing.
        let t = i.token("k1", claims.clone());
        let mut parts: Vec<&str> = t.split('.').collect();
        let forged = enc(&serde_json::json!({"sub": "admin", "exp": 2000}));
        parts[1] = &forged;
        assert!(v.validate(&parts.join("."), 1500).is_err());
        // alg none.
        let none = format!(
            "{}.{}.",
            enc(&serde_json::json!({"alg": "none"})),
            enc(&claims)
        );
        assert!(v.validate(&none, 1500).is_err());
        for bad in ["", "a.b", "a.b.c.d", "!!.??.##"] {
            assert!(v.validate(bad, 1500).is_err(), "{bad}");
        }
        assert!(
            v.validate(&i.token("k1", serde_json::json!({"sub": "a"})), 1500)
                .is_err(),
            "no exp"
        );
        for m in [
            &b""[..],
            b"n,,",
            b"n,,\x01\x01",
            b"n,,\x01auth=Basic x\x01\x01",
            b"\xff",
        ] {
            assert!(bearer(m).is_err(), "{m:?}");
        }
    }

    #[test]
    fn issuer_audience_and_subject_claim_are_checked_when_configured() {
        let i = Issuer::new();
        let mut v = Validator::from_jwks(&i.jwks("k")).expect("jwks");
        v.issuer = Some("https://idp".into());
        v.audience = vec!["kafka".into()];
        v.subject_claim = "client_id".into();
        let ok = serde_json::json!({"client_id": "svc", "exp": 2000, "iss": "https://idp", "aud": ["x", "kafka"]});
        assert_eq!(
            v.validate(&i.token("k", ok), 1000).map(|t| t.subject),
            Ok("svc".into())
        );
        for claims in [
            serde_json::json!({"client_id": "svc", "exp": 2000, "iss": "https://other", "aud": "kafka"}),
            serde_json::json!({"client_id": "svc", "exp": 2000, "iss": "https://idp", "aud": "web"}),
            serde_json::json!({"sub": "svc", "exp": 2000, "iss": "https://idp", "aud": "kafka"}),
            serde_json::json!({"client_id": "svc", "exp": 2000, "nbf": 1500, "iss": "https://idp", "aud": "kafka"}),
        ] {
            assert!(
                v.validate(&i.token("k", claims.clone()), 1000).is_err(),
                "{claims}"
            );
        }
    }
}
