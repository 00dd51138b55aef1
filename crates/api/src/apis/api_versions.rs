//! ApiVersions: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::authz::{serve, Check, Gate};
use crate::{Broker, Reply};

/// ApiVersions.
pub(crate) struct ApiVersions;

impl Api for ApiVersions {
    type Request = ApiVersionsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::ApiVersions)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::ApiVersions(crate::cluster::api_versions(code))
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, _check: &Check, r: Self::Request, _v: i16) -> Gate {
        serve(RequestKind::ApiVersions(r))
    }

    /// Serves an authorized request.
    async fn handle(_broker: &Arc<Broker>, _cx: &Cx<'_>, _request: Self::Request) -> Reply {
        now(ResponseKind::ApiVersions(crate::cluster::api_versions(0)))
    }
}
