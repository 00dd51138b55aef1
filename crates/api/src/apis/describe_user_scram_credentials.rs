//! DescribeUserScramCredentials: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.
//!
//! SCRAM users (KIP-554), as `kafka-configs --entity-type users --describe` lists them: names
//! and mechanisms with their iterations, never a key.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use weir_auth::scram::Mechanism;
use weir_meta::Credentials;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, Check, Gate};
use crate::{str, Broker, Reply};
use weir_auth::acl::Operation;

/// DescribeUserScramCredentials.
pub(crate) struct DescribeUserScramCredentials;

impl Api for DescribeUserScramCredentials {
    type Request = DescribeUserScramCredentialsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DescribeUserScramCredentials)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::DescribeUserScramCredentials(
            DescribeUserScramCredentialsResponse::default().with_error_code(code),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        cluster(
            check,
            Operation::Describe,
            RequestKind::DescribeUserScramCredentials(r),
            v,
        )
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::DescribeUserScramCredentials(
            describe_user_scram_credentials(broker, request).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![
            (
                "every user",
                R::DescribeUserScramCredentials(DescribeUserScramCredentialsRequest::default()),
            ),
            (
                "a missing user, named twice",
                R::DescribeUserScramCredentials(
                    DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
                        describe_user_scram_credentials_request::UserName::default()
                            .with_name(s("nobody")),
                        describe_user_scram_credentials_request::UserName::default()
                            .with_name(s("nobody")),
                    ])),
                ),
            ),
        ]
    }
}

async fn describe_user_scram_credentials(
    broker: &Broker,
    r: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let response = DescribeUserScramCredentialsResponse::default();
    let named: Option<Vec<String>> = r
        .users
        .filter(|u| !u.is_empty())
        .map(|u| u.iter().map(|n| n.name.to_string()).collect());
    let stored = match Credentials::scram_credentials(&*broker.meta, named.as_deref()).await {
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
            let duplicated: HashSet<&String> = names.iter().filter(|n| !seen.insert(*n)).collect();
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
