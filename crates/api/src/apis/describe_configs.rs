//! DescribeConfigs: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{configs, Check, Gate};
use crate::{Broker, Reply};

/// DescribeConfigs.
pub(crate) struct DescribeConfigs;

impl Api for DescribeConfigs {
    type Request = DescribeConfigsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DescribeConfigs)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use describe_configs_response::DescribeConfigsResult;
        ResponseKind::DescribeConfigs(
            DescribeConfigsResponse::default().with_results(
                request
                    .resources
                    .iter()
                    .map(|res| {
                        DescribeConfigsResult::default()
                            .with_resource_type(res.resource_type)
                            .with_resource_name(res.resource_name.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        configs!(
            DescribeConfigs,
            DescribeConfigsRequest,
            r,
            DescribeConfigs,
            check,
            v
        )
    }

    // What `authorize` took out comes back in the response's `results`.
    crate::authz::joins_denied!(DescribeConfigs.results);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::DescribeConfigs(
            broker.describe_configs(request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use kafka_protocol::protocol::StrBytes;
        use RequestKind as R;
        let res = |ty: i8, name: &str, keys: Option<Vec<StrBytes>>| {
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(ty)
                .with_resource_name(s(name))
                .with_configuration_keys(keys)
        };
        let r = DescribeConfigsRequest::default()
            .with_include_synonyms(true)
            .with_resources(vec![
                res(2, TOPIC, None),
                res(2, TOPIC, Some(vec![s("retention.ms")])),
                res(2, MISSING, None),
                res(4, "1", None),
                res(8, "x", None),
            ]);
        let r = if v >= 3 {
            r.with_include_documentation(true)
        } else {
            r
        };
        vec![("resources", R::DescribeConfigs(r))]
    }
}
