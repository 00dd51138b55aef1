//! DescribeUserScramCredentials: the versions Weir serves, its error response, what it must be authorized for, and its
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
            broker.describe_user_scram_credentials(request).await,
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
