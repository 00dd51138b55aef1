//! SaslHandshake and SaslAuthenticate: a connection on a SASL listener proves who it is before
//! anything but ApiVersions is served (the network layer holds it to that), and again before
//! its session ends if `connections.max.reauth.ms` is set (KIP-368).
//!
//! PLAIN and SCRAM check the same store of users, SCRAM credentials in the metadata store
//! (AlterUserScramCredentials writes them): a PLAIN password is checked against the user's
//! SCRAM-SHA-256 credential, or else its SCRAM-SHA-512 one. A failed authentication is
//! answered with SASL_AUTHENTICATION_FAILED after a short delay (Kafka's
//! `connection.failed.authentication.delay.ms`) and the connection is closed. Nothing is ever
//! refused unchecked: what checking PLAIN passwords may cost is bounded by
//! [`weir_auth::checks`] (verdicts remembered, budgets per address and per broker), so that a
//! stale client failing after a password rotation never locks out the new password.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::ResponseError;
use weir_auth::scram::{self, Credential, Mechanism};
use weir_auth::{oauth, plain, AuthError, Principal, SaslMechanism};
use weir_meta::{Credentials, ScramCredential};
use weir_metrics::Counter;

use crate::conn::{Conn, Sasl};
use crate::str;

/// How long a failed authentication's answer waits (Kafka's
/// `connection.failed.authentication.delay.ms` default).
pub(crate) const FAILURE_DELAY: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
pub struct SaslMeters {
    pub succeeded: Counter,
    pub failed: Counter,
    /// Attempts failed because their address's budget of password checks was spent (a
    /// guesser's).
    pub refused: Counter,
    /// PLAIN passwords checked (a PBKDF2 derivation each), not answered from memory.
    pub password_checks: Counter,
}

impl SaslMeters {
    /// Declares the SASL guard's meters.
    pub fn register(&self, r: &mut weir_metrics::Registry) {
        r.counter(
            "sasl_authentications_succeeded",
            "SASL authentications (and re-authentications) that succeeded.",
            &self.succeeded,
        );
        r.counter(
            "sasl_authentications_failed",
            "SASL authentications that failed (wrong credentials, malformed exchanges); the connection was closed.",
            &self.failed,
        );
        r.counter(
            "sasl_authentications_refused",
            "PLAIN authentications failed unchecked: their address's budget of password checks was spent for the next 5 s.",
            &self.refused,
        );
        r.counter(
            "sasl_password_checks",
            "PLAIN passwords checked against a credential (a PBKDF2 derivation each), not answered from memory.",
            &self.password_checks,
        );
    }
}

/// The meters, what checking passwords may cost, and OAUTHBEARER's validator.
#[derive(Debug, Default)]
pub struct Guard {
    pub meters: SaslMeters,
    checks: weir_auth::checks::PasswordChecks,
    /// OAUTHBEARER's JWKS and expected claims, if configured.
    oauth: std::sync::RwLock<Option<std::sync::Arc<oauth::Validator>>>,
}

/// A SaslAuthenticate's message, parsed for the exchange's state.
enum Step {
    Plain(plain::Plain),
    OAuth(String),
    ScramFirst(scram::ClientFirst),
    ScramFinal(Box<scram::AwaitingProof>),
}

/// The outcome of one SaslAuthenticate.
pub(crate) struct Authenticated {
    pub response: SaslAuthenticateResponse,
    /// The answer waits this long (a failure).
    pub delay: Option<Duration>,
}

impl crate::Broker {
    /// Sets the keys and claims OAUTHBEARER tokens are checked against.
    pub fn set_oauth_validator(&self, v: oauth::Validator) {
        *self.sasl.oauth.write().unwrap_or_else(|e| e.into_inner()) = Some(std::sync::Arc::new(v));
    }

    fn oauth_validator(&self) -> Option<std::sync::Arc<oauth::Validator>> {
        self.sasl
            .oauth
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn sasl_handshake(
        &self,
        r: SaslHandshakeRequest,
        conn: &Conn,
    ) -> SaslHandshakeResponse {
        let listener = &conn.listener;
        let offered = listener.mechanisms.iter().map(|m| str(m.name())).collect();
        let response = SaslHandshakeResponse::default().with_mechanisms(offered);
        if !listener.protocol.sasl() {
            return response.with_error_code(ResponseError::IllegalSaslState.code());
        }
        let wanted = SaslMechanism::from_name(r.mechanism.as_str())
            .filter(|m| listener.mechanisms.contains(m));
        let mut auth = conn.auth();
        let Some(mechanism) = wanted else {
            tracing::info!(peer = %conn.peer, mechanism = %r.mechanism.as_str(), "SASL mechanism not enabled");
            return response.with_error_code(ResponseError::UnsupportedSaslMechanism.code());
        };
        // A re-authentication keeps its mechanism (as Kafka requires).
        if auth.mechanism.is_some_and(|m| m != mechanism) {
            auth.close = true;
            return response.with_error_code(ResponseError::IllegalSaslState.code());
        }
        auth.sasl = Sasl::Chosen(mechanism);
        response
    }

    pub(crate) async fn sasl_authenticate(
        &self,
        r: SaslAuthenticateRequest,
        version: i16,
        conn: &Conn,
    ) -> Authenticated {
        let now = Instant::now();
        let ip = conn.peer.ip();
        let state = std::mem::take(&mut conn.auth().sasl);
        let fail = |code: ResponseError, message: String| {
            self.sasl.meters.failed.inc();
            conn.auth().close = true;
            Authenticated {
                response: SaslAuthenticateResponse::default()
                    .with_error_code(code.code())
                    .with_error_message(Some(str(&message))),
                delay: Some(FAILURE_DELAY),
            }
        };
        if !conn.listener.protocol.sasl() || matches!(state, Sasl::Idle) {
            return fail(
                ResponseError::IllegalSaslState,
                "SaslAuthenticate without a SaslHandshake first".into(),
            );
        }
        let parsed = match state {
            Sasl::Idle => unreachable!("checked above"),
            Sasl::Chosen(SaslMechanism::Plain) => plain::parse(&r.auth_bytes).map(Step::Plain),
            Sasl::Chosen(SaslMechanism::Scram(m)) => {
                scram::client_first(m, &r.auth_bytes).map(Step::ScramFirst)
            }
            Sasl::ScramProof(awaiting) => Ok(Step::ScramFinal(awaiting)),
            Sasl::Chosen(SaslMechanism::OAuthBearer) => {
                oauth::bearer(&r.auth_bytes).map(|t| Step::OAuth(t.to_string()))
            }
        };
        let user = match &parsed {
            Ok(Step::Plain(p)) => p.user.clone(),
            Ok(Step::ScramFirst(f)) => f.user.clone(),
            Ok(Step::ScramFinal(a)) => a.user().to_string(),
            Ok(Step::OAuth(_)) | Err(_) => String::new(),
        };
        let mut token_expires: Option<i64> = None;
        let step = match parsed {
            Err(e) => Err(e),
            Ok(Step::Plain(p)) => self
                .plain(p, ip)
                .await
                .map(|user| (Vec::new(), Some((user, SaslMechanism::Plain)))),
            Ok(Step::ScramFirst(first)) => match self.scram_first(first).await {
                Ok((message, next)) => {
                    conn.auth().sasl = Sasl::ScramProof(Box::new(next));
                    Ok((message, None))
                }
                Err(e) => Err(e),
            },
            Ok(Step::ScramFinal(awaiting)) => {
                let m = awaiting.mechanism();
                awaiting
                    .client_final(&r.auth_bytes)
                    .map(|message| (message, Some((user.clone(), SaslMechanism::Scram(m)))))
            }
            Ok(Step::OAuth(token)) => match self.oauth_validator() {
                None => Err(AuthError::Failed(
                    "OAUTHBEARER has no JWKS to check tokens with on this broker".into(),
                )),
                Some(v) => {
                    let now_s = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs() as i64);
                    v.validate(&token, now_s).map(|t| {
                        token_expires = Some(t.expires_s - now_s);
                        (Vec::new(), Some((t.subject, SaslMechanism::OAuthBearer)))
                    })
                }
            },
        };
        let (message, done) = match step {
            Ok(s) => s,
            Err(e) => {
                tracing::info!(peer = %conn.peer, user, error = %e, "SASL authentication failed");
                return fail(ResponseError::SaslAuthenticationFailed, e.to_string());
            }
        };
        let mut response = SaslAuthenticateResponse::default().with_auth_bytes(message.into());
        if let Some((user, mechanism)) = done {
            let principal = Principal::user(user);
            let mut auth = conn.auth();
            if auth.principal.as_ref().is_some_and(|p| *p != principal) {
                drop(auth);
                return fail(
                    ResponseError::SaslAuthenticationFailed,
                    "Cannot change principals during re-authentication".into(),
                );
            }
            // A session ends at `connections.max.reauth.ms`, or when its token does, whichever
            // comes first; only for clients that can re-authenticate (SaslAuthenticate v1+).
            let reauth_ms = conn.listener.reauth_ms;
            let token_ms = token_expires.map(|s| (s.max(0) as u64).saturating_mul(1000));
            let lifetime = match (reauth_ms, token_ms) {
                (0, None) => None,
                (0, Some(t)) => Some(t),
                (r, None) => Some(r),
                (r, Some(t)) => Some(r.min(t)),
            };
            auth.expires = lifetime
                .filter(|_| version >= 1)
                .map(|ms| now + Duration::from_millis(ms));
            if let (Some(ms), true) = (lifetime, version >= 1) {
                response = response.with_session_lifetime_ms(ms as i64);
            }
            tracing::debug!(peer = %conn.peer, %principal, %mechanism, "authenticated");
            auth.principal = Some(principal);
            auth.mechanism = Some(mechanism);
            self.sasl.meters.succeeded.inc();
        }
        Authenticated {
            response,
            delay: None,
        }
    }

    /// Checks a PLAIN message against the user's SCRAM credentials; the user name. A verdict
    /// remembered for this very attempt is given again; otherwise the check waits for its turn
    /// in the budgets of `ip` and of the broker ([`weir_auth::checks`]).
    async fn plain(&self, p: plain::Plain, ip: IpAddr) -> Result<String, AuthError> {
        for m in Mechanism::ALL {
            let Some(c) = self.credential(&p.user, m).await? else {
                continue;
            };
            let checks = &self.sasl.checks;
            let fingerprint = checks.fingerprint(m, &p.user, &c, &p.password);
            let ok = match checks.remembered(&fingerprint) {
                Some(ok) => ok,
                None => {
                    let Some(wait) = checks.admit(ip, Instant::now()) else {
                        self.sasl.meters.refused.inc();
                        tracing::info!(%ip, user = %p.user, "PLAIN password checks from this address are over their budget");
                        return Err(AuthError::Failed(
                            "Too many password checks from this address; try again later".into(),
                        ));
                    };
                    tokio::time::sleep(wait).await;
                    self.sasl.meters.password_checks.inc();
                    // PBKDF2 takes milliseconds: off the runtime's threads.
                    let password = p.password.clone();
                    let ok = tokio::task::spawn_blocking(move || c.matches_password(m, &password))
                        .await
                        .map_err(|_| AuthError::Internal("password check"))?;
                    checks.remember(fingerprint, ok);
                    ok
                }
            };
            return if ok {
                Ok(p.user)
            } else {
                Err(plain::invalid())
            };
        }
        Err(plain::invalid())
    }

    async fn scram_first(
        &self,
        first: scram::ClientFirst,
    ) -> Result<(Vec<u8>, scram::AwaitingProof), AuthError> {
        let m = first.mechanism();
        let Some(credential) = self.credential(&first.user, m).await? else {
            return Err(scram::invalid(m));
        };
        first.server_first(credential)
    }

    async fn credential(&self, user: &str, m: Mechanism) -> Result<Option<Credential>, AuthError> {
        let found = Credentials::scram_credential(&*self.meta, user, m.name())
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "reading a SCRAM credential");
                AuthError::Failed(
                    "Authentication failed: the credential store is unavailable".into(),
                )
            })?;
        Ok(found.and_then(|c| credential_of(&c)))
    }
}

/// The exchange's view of a stored credential (`None` if it is not one Weir can use).
pub(crate) fn credential_of(c: &ScramCredential) -> Option<Credential> {
    Some(Credential {
        salt: c.salt.clone(),
        stored_key: c.stored_key.clone(),
        server_key: c.server_key.clone(),
        iterations: u32::try_from(c.iterations).ok()?,
    })
}
