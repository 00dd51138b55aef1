//! IncrementalAlterConfigs: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use weir_partition::AdminError;

use crate::admin::{err_parts, RESOURCE_GROUP, RESOURCE_TOPIC};
use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{configs, Check, Gate};
use crate::{Broker, Reply};

/// IncrementalAlterConfigs.
pub(crate) struct IncrementalAlterConfigs;

impl Api for IncrementalAlterConfigs {
    type Request = IncrementalAlterConfigsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::IncrementalAlterConfigs)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use incremental_alter_configs_response::AlterConfigsResourceResponse;
        ResponseKind::IncrementalAlterConfigs(
            IncrementalAlterConfigsResponse::default().with_responses(
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
        configs!(
            IncrementalAlterConfigs,
            IncrementalAlterConfigsRequest,
            r,
            AlterConfigs,
            check,
            v
        )
    }

    // What `authorize` took out comes back in the response's `responses`.
    crate::authz::joins_denied!(IncrementalAlterConfigs.responses);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::IncrementalAlterConfigs(
            incremental_alter_configs(broker, request).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let res = |ty: i8, name: &str, op: i8, val: Option<&str>| {
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(ty)
                .with_resource_name(s(name))
                .with_configs(vec![
                    incremental_alter_configs_request::AlterableConfig::default()
                        .with_name(s("retention.ms"))
                        .with_config_operation(op)
                        .with_value(val.map(s)),
                ])
        };
        vec![(
            "resources",
            R::IncrementalAlterConfigs(IncrementalAlterConfigsRequest::default().with_resources(
                vec![
                    res(2, TOPIC, 0, Some("3600000")),
                    res(2, TOPIC, 9, None),
                    res(2, MISSING, 0, Some("1")),
                    res(4, "1", 0, Some("1")),
                ],
            )),
        )]
    }
}

async fn incremental_alter_configs(
    broker: &Broker,
    r: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut out = Vec::with_capacity(r.resources.len());
    for res in r.resources {
        let name = res.resource_name.as_str();
        // The changes apply to the configs as the metadata store holds them, with a
        // compare-and-set: a change made through another broker meanwhile is neither
        // undone by this broker's stale copy nor overwritten.
        let result = if res.resource_type == RESOURCE_TOPIC {
            broker
                .topics
                .alter_configs(name, |old| incremental(old, &res.configs), r.validate_only)
                .await
        } else if res.resource_type == RESOURCE_GROUP {
            broker
                .shares
                .configs()
                .alter(name, |old| incremental(old, &res.configs), r.validate_only)
                .await
        } else {
            Err((
                ResponseError::InvalidRequest,
                "Weir alters topic and group configs only".to_string(),
            ))
        };
        let resp = incremental_alter_configs_response::AlterConfigsResourceResponse::default()
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
    IncrementalAlterConfigsResponse::default().with_responses(out)
}

/// IncrementalAlterConfigs' operations (SET, DELETE, APPEND, SUBTRACT) applied to `configs`.
fn incremental(
    configs: &BTreeMap<String, String>,
    ops: &[incremental_alter_configs_request::AlterableConfig],
) -> Result<BTreeMap<String, String>, AdminError> {
    let mut configs = configs.clone();
    for c in ops {
        let key = c.name.to_string();
        let value = c.value.as_ref().map(|v| v.to_string());
        match (c.config_operation, value) {
            (0, Some(v)) => {
                configs.insert(key, v);
            }
            (1, _) => {
                configs.remove(&key);
            }
            (2, Some(v)) => {
                let merged = match configs.get(&key) {
                    Some(old) if !old.is_empty() => format!("{old},{v}"),
                    _ => v,
                };
                configs.insert(key, merged);
            }
            (3, Some(v)) => {
                if let Some(old) = configs.get(&key) {
                    let kept: Vec<&str> = old.split(',').filter(|x| x.trim() != v).collect();
                    configs.insert(key, kept.join(","));
                }
            }
            (op, _) => {
                return Err((
                    ResponseError::InvalidRequest,
                    format!("invalid operation {op} for {key}"),
                ))
            }
        }
    }
    Ok(configs)
}
