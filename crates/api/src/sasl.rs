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
use weir_meta::{Credentials, MetaStore, ScramCredential};
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

/// The connection's exchange state and the client's message, as the next step.
fn parse(state: Sasl, auth_bytes: &[u8]) -> Result<Step, AuthError> {
    match state {
        Sasl::Idle => Err(AuthError::Failed("no SASL mechanism chosen".into())),
        Sasl::Chosen(SaslMechanism::Plain) => plain::parse(auth_bytes).map(Step::Plain),
        Sasl::Chosen(SaslMechanism::Scram(m)) => {
            scram::client_first(m, auth_bytes).map(Step::ScramFirst)
        }
        Sasl::ScramProof(awaiting) => Ok(Step::ScramFinal(awaiting)),
        Sasl::Chosen(SaslMechanism::OAuthBearer) => {
            oauth::bearer(auth_bytes).map(|t| Step::OAuth(t.to_string()))
        }
    }
}

/// A step that succeeded.
struct StepDone {
    /// For the client (SCRAM's server messages).
    message: Vec<u8>,
    /// Who the client is, once the exchange is over.
    who: Option<(String, SaslMechanism)>,
    /// When an OAUTHBEARER token expires, in seconds from now.
    token_expires_s: Option<i64>,
}

/// The outcome of one SaslAuthenticate.
pub(crate) struct Authenticated {
    pub response: SaslAuthenticateResponse,
    /// The answer waits this long (a failure).
    pub delay: Option<Duration>,
}

impl Guard {
    /// Checks a user's password against its SCRAM credentials, as a SASL PLAIN login is
    /// checked (remembered verdicts, budgets per address): the user name, or why not. For
    /// logins that are not Kafka's (the schema registry's HTTP Basic).
    pub async fn check_password(
        &self,
        meta: &dyn MetaStore,
        user: &str,
        password: &str,
        ip: IpAddr,
    ) -> Result<String, AuthError> {
        let p = plain::Plain {
            user: user.to_string(),
            password: password.to_string(),
        };
        let result = self.plain(meta, p, ip).await;
        match &result {
            Ok(_) => self.meters.succeeded.inc(),
            Err(_) => self.meters.failed.inc(),
        }
        result
    }

    /// Sets the keys and claims OAUTHBEARER tokens are checked against.
    pub fn set_oauth_validator(&self, v: oauth::Validator) {
        *self.oauth.write().unwrap_or_else(|e| e.into_inner()) = Some(std::sync::Arc::new(v));
    }

    fn oauth_validator(&self) -> Option<std::sync::Arc<oauth::Validator>> {
        self.oauth.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Answers a SaslHandshake: the connection's mechanism is chosen, if its listener offers it.
    pub(crate) fn handshake(&self, r: SaslHandshakeRequest, conn: &Conn) -> SaslHandshakeResponse {
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

    /// Answers a SaslAuthenticate: one step of the chosen mechanism's exchange, credentials read
    /// from `meta`. A failure closes the connection after [`FAILURE_DELAY`].
    pub(crate) async fn authenticate(
        &self,
        meta: &dyn MetaStore,
        r: SaslAuthenticateRequest,
        version: i16,
        conn: &Conn,
    ) -> Authenticated {
        let now = Instant::now();
        let state = std::mem::take(&mut conn.auth().sasl);
        if !conn.listener.protocol.sasl() || matches!(state, Sasl::Idle) {
            return self.fail(
                conn,
                ResponseError::IllegalSaslState,
                "SaslAuthenticate without a SaslHandshake first".into(),
            );
        }
        let parsed = parse(state, &r.auth_bytes);
        let user = match &parsed {
            Ok(Step::Plain(p)) => p.user.clone(),
            Ok(Step::ScramFirst(f)) => f.user.clone(),
            Ok(Step::ScramFinal(a)) => a.user().to_string(),
            Ok(Step::OAuth(_)) | Err(_) => String::new(),
        };
        let step = match parsed {
            Err(e) => Err(e),
            Ok(step) => self.step(meta, step, &user, &r.auth_bytes, conn).await,
        };
        let done = match step {
            Ok(done) => done,
            Err(e) => {
                tracing::info!(peer = %conn.peer, user, error = %e, "SASL authentication failed");
                return self.fail(conn, ResponseError::SaslAuthenticationFailed, e.to_string());
            }
        };
        let response = SaslAuthenticateResponse::default().with_auth_bytes(done.message.into());
        let response = match done.who {
            None => response,
            Some(who) => match self.establish(conn, who, done.token_expires_s, version, now) {
                Ok(Some(ms)) => response.with_session_lifetime_ms(ms as i64),
                Ok(None) => response,
                Err(why) => {
                    return self.fail(conn, ResponseError::SaslAuthenticationFailed, why.into())
                }
            },
        };
        Authenticated {
            response,
            delay: None,
        }
    }

    /// A failed authentication: counted, answered after [`FAILURE_DELAY`], the connection closed.
    fn fail(&self, conn: &Conn, code: ResponseError, message: String) -> Authenticated {
        self.meters.failed.inc();
        conn.auth().close = true;
        Authenticated {
            response: SaslAuthenticateResponse::default()
                .with_error_code(code.code())
                .with_error_message(Some(str(&message))),
            delay: Some(FAILURE_DELAY),
        }
    }

    /// Runs one step of the exchange: the message for the client, and who it is once the last
    /// step succeeded.
    async fn step(
        &self,
        meta: &dyn MetaStore,
        step: Step,
        user: &str,
        auth_bytes: &[u8],
        conn: &Conn,
    ) -> Result<StepDone, AuthError> {
        let done = |message, who| StepDone {
            message,
            who,
            token_expires_s: None,
        };
        match step {
            Step::Plain(p) => {
                let user = self.plain(meta, p, conn.peer.ip()).await?;
                Ok(done(Vec::new(), Some((user, SaslMechanism::Plain))))
            }
            Step::ScramFirst(first) => {
                let (message, next) = self.scram_first(meta, first).await?;
                conn.auth().sasl = Sasl::ScramProof(Box::new(next));
                Ok(done(message, None))
            }
            Step::ScramFinal(awaiting) => {
                let m = awaiting.mechanism();
                let message = awaiting.client_final(auth_bytes)?;
                Ok(done(
                    message,
                    Some((user.to_string(), SaslMechanism::Scram(m))),
                ))
            }
            Step::OAuth(token) => self.oauth(&token),
        }
    }

    /// Checks an OAUTHBEARER token against the configured keys and claims.
    fn oauth(&self, token: &str) -> Result<StepDone, AuthError> {
        let Some(v) = self.oauth_validator() else {
            return Err(AuthError::Failed(
                "OAUTHBEARER has no JWKS to check tokens with on this broker".into(),
            ));
        };
        let now_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let t = v.validate(token, now_s)?;
        Ok(StepDone {
            message: Vec::new(),
            who: Some((t.subject, SaslMechanism::OAuthBearer)),
            token_expires_s: Some(t.expires_s - now_s),
        })
    }

    /// Records who the connection is after a successful exchange, and when its session ends: at
    /// `connections.max.reauth.ms`, or when its token does, whichever comes first; only for
    /// clients that can re-authenticate (SaslAuthenticate v1+). The session's lifetime in ms, if
    /// it has one; an error if a re-authentication names another principal.
    fn establish(
        &self,
        conn: &Conn,
        (user, mechanism): (String, SaslMechanism),
        token_expires_s: Option<i64>,
        version: i16,
        now: Instant,
    ) -> Result<Option<u64>, &'static str> {
        let principal = Principal::user(user);
        let mut auth = conn.auth();
        if auth.principal.as_ref().is_some_and(|p| *p != principal) {
            return Err("Cannot change principals during re-authentication");
        }
        let reauth_ms = conn.listener.reauth_ms;
        let token_ms = token_expires_s.map(|s| (s.max(0) as u64).saturating_mul(1000));
        let lifetime = match (reauth_ms, token_ms) {
            (0, None) => None,
            (0, Some(t)) => Some(t),
            (r, None) => Some(r),
            (r, Some(t)) => Some(r.min(t)),
        }
        .filter(|_| version >= 1);
        auth.expires = lifetime.map(|ms| now + Duration::from_millis(ms));
        tracing::debug!(peer = %conn.peer, %principal, %mechanism, "authenticated");
        auth.principal = Some(principal);
        auth.mechanism = Some(mechanism);
        self.meters.succeeded.inc();
        Ok(lifetime)
    }

    /// Checks a PLAIN message against the user's SCRAM credentials; the user name. A verdict
    /// remembered for this very attempt is given again; otherwise the check waits for its turn
    /// in the budgets of `ip` and of the broker ([`weir_auth::checks`]).
    async fn plain(
        &self,
        meta: &dyn MetaStore,
        p: plain::Plain,
        ip: IpAddr,
    ) -> Result<String, AuthError> {
        for m in Mechanism::ALL {
            let Some(c) = self.credential(meta, &p.user, m).await? else {
                continue;
            };
            let checks = &self.checks;
            let fingerprint = checks.fingerprint(m, &p.user, &c, &p.password);
            let ok = match checks.remembered(&fingerprint) {
                Some(ok) => ok,
                None => {
                    let Some(wait) = checks.admit(ip, Instant::now()) else {
                        self.meters.refused.inc();
                        tracing::info!(%ip, user = %p.user, "PLAIN password checks from this address are over their budget");
                        return Err(AuthError::Failed(
                            "Too many password checks from this address; try again later".into(),
                        ));
                    };
                    tokio::time::sleep(wait).await;
                    self.meters.password_checks.inc();
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
        meta: &dyn MetaStore,
        first: scram::ClientFirst,
    ) -> Result<(Vec<u8>, scram::AwaitingProof), AuthError> {
        let m = first.mechanism();
        let Some(credential) = self.credential(meta, &first.user, m).await? else {
            return Err(scram::invalid(m));
        };
        first.server_first(credential)
    }

    async fn credential(
        &self,
        meta: &dyn MetaStore,
        user: &str,
        m: Mechanism,
    ) -> Result<Option<Credential>, AuthError> {
        let found = Credentials::scram_credential(meta, user, m.name())
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
