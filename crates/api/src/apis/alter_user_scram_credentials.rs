//! AlterUserScramCredentials: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, Check, Gate};
use crate::{Broker, Reply};
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
        use alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
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
            broker.alter_user_scram_credentials(request).await,
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
