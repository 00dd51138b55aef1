//! ApiVersions: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
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

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let r = ApiVersionsRequest::default();
        let r = if v >= 3 {
            r.with_client_software_name(s("weir-test"))
                .with_client_software_version(s("1.0"))
        } else {
            r
        };
        vec![("versions", R::ApiVersions(r))]
    }
}
