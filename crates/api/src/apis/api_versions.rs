//! ApiVersions: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{serve, Check, Gate};
use crate::{str, supported_versions, Broker, Reply};

/// ApiVersions.
pub(crate) struct ApiVersions;

impl Api for ApiVersions {
    type Request = ApiVersionsRequest;

    /// The versions Weir serves: up to 4 (Kafka 4.4's v5 checks the cluster id, KIP-1242: not
    /// yet; a v5 request is answered as Kafka answers an unknown version).
    fn versions() -> (i16, i16) {
        super::capped(ApiKey::ApiVersions, 4)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::ApiVersions(api_versions(code))
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, _check: &Check, r: Self::Request, _v: i16) -> Gate {
        serve(RequestKind::ApiVersions(r))
    }

    /// Serves an authorized request.
    async fn handle(_broker: &Arc<Broker>, _cx: &Cx<'_>, _request: Self::Request) -> Reply {
        now(ResponseKind::ApiVersions(api_versions(0)))
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

/// The answer to ApiVersions: every API Weir serves with its versions, and the feature levels.
pub(crate) fn api_versions(error_code: i16) -> ApiVersionsResponse {
    let api_keys = ApiKey::iter()
        .filter_map(|k| {
            supported_versions(k).map(|(min, max)| {
                ApiVersion::default()
                    .with_api_key(k as i16)
                    .with_min_version(min)
                    .with_max_version(max)
            })
        })
        .collect();
    // Feature levels clients read (ApiVersions v3+): Transactions V2 (KIP-890 part 2), which
    // Java and franz-go producers use once it is finalized, and the consumer group protocol.
    const FEATURES: [(&str, i16, i16); 2] =
        [("transaction.version", 0, 2), ("group.version", 0, 1)];
    let supported = FEATURES
        .iter()
        .map(|(name, min, max)| {
            api_versions_response::SupportedFeatureKey::default()
                .with_name(str(name))
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect();
    let finalized = FEATURES
        .iter()
        .map(|(name, _, max)| {
            api_versions_response::FinalizedFeatureKey::default()
                .with_name(str(name))
                .with_min_version_level(*max)
                .with_max_version_level(*max)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys)
        .with_supported_features(supported)
        .with_finalized_features(finalized)
        .with_finalized_features_epoch(1)
}
