//! DescribeUserScramCredentials: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::Cx;
use crate::{Broker, Reply};

/// The versions Weir serves: all that `kafka-protocol` knows.
pub(crate) fn versions() -> (i16, i16) {
    super::valid(ApiKey::DescribeUserScramCredentials)
}

/// The response to `request` that carries `code` wherever it has an error code.
pub(crate) fn error_response(
    _request: &DescribeUserScramCredentialsRequest,
    _version: i16,
    code: i16,
) -> ResponseKind {
    ResponseKind::DescribeUserScramCredentials(
        DescribeUserScramCredentialsResponse::default().with_error_code(code),
    )
}

/// Serves an authorized request.
pub(crate) async fn handle(
    broker: &Arc<Broker>,
    _cx: &Cx<'_>,
    request: DescribeUserScramCredentialsRequest,
) -> Reply {
    now(ResponseKind::DescribeUserScramCredentials(
        broker.describe_user_scram_credentials(request).await,
    ))
}
