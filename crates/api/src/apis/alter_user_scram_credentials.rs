//! AlterUserScramCredentials: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.
//!
//! SCRAM users (KIP-554), as `kafka-configs --entity-type users --alter --add-config
//! 'SCRAM-SHA-256=[password=...]'` manages them. The client salts and hashes the password; the
//! broker keeps the stored and server keys derived from it, never the salted password itself.
//!
//! Validation follows Kafka's `ScramControlManager`: an empty name, an unknown mechanism, an
//! iteration count outside 4096..=16384, a credential named twice in one request, or the
//! deletion of one that does not exist fails that user's whole part of the request; other
//! users' parts go on.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use weir_auth::scram::{Credential, Mechanism, MAX_ITERATIONS, MIN_ITERATIONS};
use weir_meta::{Credentials, ScramCredential};

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, Check, Gate};
use crate::{str, Broker, Reply};
use weir_auth::acl::Operation;

/// AlterUserScramCredentials.
pub(crate) struct AlterUserScramCredentials;

impl Api for AlterUserScramCredentials {
    type Request = AlterUserScramCredentialsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::AlterUserScramCredentials)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        let mut users: Vec<_> = request
            .deletions
            .iter()
            .map(|d| &d.name)
            .chain(request.upsertions.iter().map(|u| &u.name))
            .collect();
        users.sort();
        users.dedup();
        ResponseKind::AlterUserScramCredentials(
            AlterUserScramCredentialsResponse::default().with_results(
                users
                    .into_iter()
                    .map(|u| {
                        AlterUserScramCredentialsResult::default()
                            .with_user(u.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        cluster(
            check,
            Operation::Alter,
            RequestKind::AlterUserScramCredentials(r),
            v,
        )
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::AlterUserScramCredentials(
            alter_user_scram_credentials(broker, request).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use bytes::Bytes;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "an upsertion and a deletion that fails",
            R::AlterUserScramCredentials(
                AlterUserScramCredentialsRequest::default()
                    .with_upsertions(vec![
                        alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                            .with_name(s("alice"))
                            .with_mechanism(1)
                            .with_iterations(4096)
                            .with_salt(Bytes::from_static(b"salt"))
                            .with_salted_password(Bytes::from_static(&[7; 32])),
                    ])
                    .with_deletions(vec![
                        alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                            .with_name(s("nobody"))
                            .with_mechanism(2),
                    ]),
            ),
        )]
    }
}

/// One user's changes, checked.
#[derive(Default)]
struct Changes {
    deletions: Vec<Mechanism>,
    upsertions: Vec<(Mechanism, ScramCredential)>,
    error: Option<(ResponseError, String)>,
}

impl Changes {
    fn fail(&mut self, e: ResponseError, message: &str) {
        if self.error.is_none() {
            self.error = Some((e, message.to_string()));
        }
    }
}

async fn alter_user_scram_credentials(
    broker: &Broker,
    r: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let mut users: BTreeMap<String, Changes> = BTreeMap::new();
    let mut named = HashSet::new();
    for d in &r.deletions {
        let user = d.name.to_string();
        let c = users.entry(user.clone()).or_default();
        match Mechanism::from_kafka_type(d.mechanism) {
            None => c.fail(
                ResponseError::UnsupportedSaslMechanism,
                "Unknown SCRAM mechanism",
            ),
            Some(m) if !named.insert((user.clone(), m)) => c.fail(
                ResponseError::DuplicateResource,
                "A user credential cannot be altered twice in the same request",
            ),
            Some(m) => c.deletions.push(m),
        }
    }
    for u in r.upsertions {
        let user = u.name.to_string();
        let c = users.entry(user.clone()).or_default();
        let Some(m) = Mechanism::from_kafka_type(u.mechanism) else {
            c.fail(
                ResponseError::UnsupportedSaslMechanism,
                "Unknown SCRAM mechanism",
            );
            continue;
        };
        if !named.insert((user.clone(), m)) {
            c.fail(
                ResponseError::DuplicateResource,
                "A user credential cannot be altered twice in the same request",
            );
            continue;
        }
        let iterations = u.iterations;
        if iterations < MIN_ITERATIONS as i32 {
            c.fail(ResponseError::UnacceptableCredential, "Too few iterations");
            continue;
        }
        if iterations > MAX_ITERATIONS as i32 {
            c.fail(ResponseError::UnacceptableCredential, "Too many iterations");
            continue;
        }
        if u.salt.is_empty() || u.salted_password.is_empty() {
            c.fail(
                ResponseError::UnacceptableCredential,
                "Salt and salted password must not be empty",
            );
            continue;
        }
        let k = Credential::from_salted_password(
            m,
            &u.salted_password,
            u.salt.to_vec(),
            iterations as u32,
        );
        c.upsertions.push((
            m,
            ScramCredential {
                mechanism: m.name().to_string(),
                salt: k.salt,
                stored_key: k.stored_key,
                server_key: k.server_key,
                iterations,
            },
        ));
    }
    let mut results = Vec::with_capacity(users.len());
    for (user, mut c) in users {
        if user.is_empty() {
            c.fail(
                ResponseError::UnacceptableCredential,
                "Username must not be empty",
            );
        }
        let outcome = match c.error.take() {
            Some(e) => Err(e),
            None => apply_scram_changes(broker, &user, c).await,
        };
        let result = AlterUserScramCredentialsResult::default().with_user(str(&user));
        results.push(match outcome {
            Ok(()) => result,
            Err((e, message)) => result
                .with_error_code(e.code())
                .with_error_message(Some(str(&message))),
        });
    }
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// Applies one user's checked changes: deletions first (each must exist), then upsertions.
async fn apply_scram_changes(
    broker: &Broker,
    user: &str,
    c: Changes,
) -> Result<(), (ResponseError, String)> {
    let store = |e: weir_meta::MetaError| {
        tracing::warn!(error = %e, user, "changing SCRAM credentials");
        (
            ResponseError::UnknownServerError,
            "the metadata store is unavailable".to_string(),
        )
    };
    // Every deletion must name a credential that exists, or none of the user's changes apply.
    for m in &c.deletions {
        if Credentials::scram_credential(&*broker.meta, user, m.name())
            .await
            .map_err(store)?
            .is_none()
        {
            return Err((
                ResponseError::ResourceNotFound,
                "Attempt to delete a user credential that does not exist".into(),
            ));
        }
    }
    for m in c.deletions {
        Credentials::delete_scram_credential(&*broker.meta, user, m.name())
            .await
            .map_err(store)?;
    }
    for (_, credential) in c.upsertions {
        Credentials::upsert_scram_credential(&*broker.meta, user, credential)
            .await
            .map_err(store)?;
    }
    tracing::info!(user, "SCRAM credentials changed");
    Ok(())
}
