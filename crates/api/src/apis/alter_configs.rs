//! AlterConfigs: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::admin::{err_parts, set_topic_configs};
use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{configs, Check, Gate};
use crate::{Broker, Reply};

/// AlterConfigs.
pub(crate) struct AlterConfigs;

impl Api for AlterConfigs {
    type Request = AlterConfigsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::AlterConfigs)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use alter_configs_response::AlterConfigsResourceResponse;
        ResponseKind::AlterConfigs(
            AlterConfigsResponse::default().with_responses(
                request
                    .resources
                    .iter()
                    .map(|res| {
                        AlterConfigsResourceResponse::default()
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
        configs!(AlterConfigs, AlterConfigsRequest, r, AlterConfigs, check, v)
    }

    // What `authorize` took out comes back in the response's `responses`.
    crate::authz::joins_denied!(AlterConfigs.responses);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::AlterConfigs(
            alter_configs(broker, request).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let res = |ty: i8, name: &str, k: &str, val: &str| {
            alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(ty)
                .with_resource_name(s(name))
                .with_configs(vec![alter_configs_request::AlterableConfig::default()
                    .with_name(s(k))
                    .with_value(Some(s(val)))])
        };
        vec![(
            "resources",
            R::AlterConfigs(AlterConfigsRequest::default().with_resources(vec![
                res(2, TOPIC, "retention.ms", "86400000"),
                res(2, TOPIC, "retention.ms", "not a number"),
                res(2, MISSING, "retention.ms", "1"),
                res(4, "1", "log.retention.ms", "1"),
            ])),
        )]
    }
}

async fn alter_configs(broker: &Broker, r: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut out = Vec::with_capacity(r.resources.len());
    for res in r.resources {
        let configs: BTreeMap<String, String> = res
            .configs
            .iter()
            .filter_map(|c| {
                c.value
                    .as_ref()
                    .map(|v| (c.name.to_string(), v.to_string()))
            })
            .collect();
        let result = set_topic_configs(
            broker,
            res.resource_type,
            res.resource_name.as_str(),
            configs,
            r.validate_only,
        )
        .await;
        let resp = alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(res.resource_type)
            .with_resource_name(res.resource_name);
        out.push(match result {
            Ok(()) => resp,
            Err(e) => {
                let (code, msg) = err_parts(&e);
                resp.with_error_code(code).with_error_message(msg)
            }
        });
    }
    AlterConfigsResponse::default().with_responses(out)
}
