//! DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): SCRAM users, as
//! `kafka-configs --entity-type users --alter --add-config 'SCRAM-SHA-256=[password=...]'`
//! manages them. The client salts and hashes the password; the broker keeps the stored and
//! server keys derived from it, never the salted password itself.
//!
//! Validation follows Kafka's `ScramControlManager`: an empty name, an unknown mechanism, an
//! iteration count outside 4096..=16384, a credential named twice in one request, or the
//! deletion of one that does not exist fails that user's whole part of the request; other
//! users' parts go on.

use std::collections::{BTreeMap, HashSet};

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::ResponseError;
use weir_auth::scram::{Credential, Mechanism, MAX_ITERATIONS, MIN_ITERATIONS};
use weir_meta::{Credentials, ScramCredential};

use crate::str;

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

impl crate::Broker {
    pub(crate) async fn describe_user_scram_credentials(
        &self,
        r: DescribeUserScramCredentialsRequest,
    ) -> DescribeUserScramCredentialsResponse {
        let response = DescribeUserScramCredentialsResponse::default();
        let named: Option<Vec<String>> = r
            .users
            .filter(|u| !u.is_empty())
            .map(|u| u.iter().map(|n| n.name.to_string()).collect());
        let stored = match Credentials::scram_credentials(&*self.meta, named.as_deref()).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "reading SCRAM credentials");
                return response
                    .with_error_code(ResponseError::UnknownServerError.code())
                    .with_error_message(Some(str("the metadata store is unavailable")));
            }
        };
        let mut by_user: BTreeMap<String, Vec<CredentialInfo>> = BTreeMap::new();
        for (user, c) in stored {
            if let Some(m) = Mechanism::from_name(&c.mechanism) {
                by_user.entry(user).or_default().push(
                    CredentialInfo::default()
                        .with_mechanism(m.kafka_type())
                        .with_iterations(c.iterations),
                );
            }
        }
        let results = match named {
            None => by_user
                .into_iter()
                .map(|(user, infos)| {
                    DescribeUserScramCredentialsResult::default()
                        .with_user(str(&user))
                        .with_credential_infos(infos)
                })
                .collect(),
            Some(names) => {
                let mut seen = HashSet::new();
                let duplicated: HashSet<&String> =
                    names.iter().filter(|n| !seen.insert(*n)).collect();
                let mut reported = HashSet::new();
                names
                    .iter()
                    .filter(|n| reported.insert(*n))
                    .map(|user| {
                        let result = DescribeUserScramCredentialsResult::default().with_user(str(user));
                        if duplicated.contains(user) {
                            return result
                                .with_error_code(ResponseError::DuplicateResource.code())
                                .with_error_message(Some(str(&format!(
                                    "Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
                                ))));
                        }
                        match by_user.remove(user) {
                            Some(infos) => result.with_credential_infos(infos),
                            None => result
                                .with_error_code(ResponseError::ResourceNotFound.code())
                                .with_error_message(Some(str(&format!(
                                    "Attempt to describe a user credential that does not exist: {user}"
                                )))),
                        }
                    })
                    .collect()
            }
        };
        response.with_results(results)
    }

    pub(crate) async fn alter_user_scram_credentials(
        &self,
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
                None => self.apply_scram_changes(&user, c).await,
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
        &self,
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
            if Credentials::scram_credential(&*self.meta, user, m.name())
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
            Credentials::delete_scram_credential(&*self.meta, user, m.name())
                .await
                .map_err(store)?;
        }
        for (_, credential) in c.upsertions {
            Credentials::upsert_scram_credential(&*self.meta, user, credential)
                .await
                .map_err(store)?;
        }
        tracing::info!(user, "SCRAM credentials changed");
        Ok(())
    }
}
