//! DescribeConfigs: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::admin::{
    RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC, SOURCE_DEFAULT, SOURCE_DYNAMIC_TOPIC,
    SOURCE_GROUP, SOURCE_STATIC_BROKER,
};
use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{configs, Check, Gate};
use crate::{str, Broker, Reply};

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
            describe_configs(broker, request, v).await,
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

async fn describe_configs(
    broker: &Broker,
    r: DescribeConfigsRequest,
    _version: i16,
) -> DescribeConfigsResponse {
    // Topic configs as the metadata store holds them: this broker's catalog catches up with
    // a change made through another broker once it is announced, but the client that made it
    // may ask here next and must see what it was told is done.
    if r.resources
        .iter()
        .any(|res| res.resource_type == RESOURCE_TOPIC)
    {
        if let Err(e) = broker.topics.refresh().await {
            tracing::warn!(error = %e, "reading the catalog before describing configs");
        }
    }
    // Group configs are read from the store first (the rest is answered from memory).
    let mut groups = std::collections::HashMap::new();
    for res in r
        .resources
        .iter()
        .filter(|r| r.resource_type == RESOURCE_GROUP)
    {
        let name = res.resource_name.to_string();
        let described = broker.shares.configs().describe(&name).await;
        groups.insert(name, described);
    }
    let results = r
        .resources
        .into_iter()
        .map(|res| {
            let out = DescribeConfigsResult::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name.clone());
            let wanted = |name: &str| {
                res.configuration_keys
                    .as_ref()
                    .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
            };
            match res.resource_type {
                RESOURCE_TOPIC if res.resource_name.as_str() == crate::surface::OFFSETS_TOPIC => {
                    // Kafka's settings of its offsets topic (see `surface.rs`).
                    out.with_configs(
                        [
                            ("cleanup.policy", "compact"),
                            ("compression.type", "producer"),
                            ("segment.bytes", "104857600"),
                        ]
                        .into_iter()
                        .filter(|(k, _)| wanted(k))
                        .map(|(k, v)| {
                            DescribeConfigsResourceResult::default()
                                .with_name(str(k))
                                .with_value(Some(str(v)))
                                .with_read_only(true)
                                .with_config_source(SOURCE_DEFAULT)
                        })
                        .collect(),
                    )
                }
                RESOURCE_TOPIC => match broker.topics.get(res.resource_name.as_str()) {
                    None => out
                        .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        .with_error_message(Some(str(&format!(
                            "Topic '{}' does not exist.",
                            res.resource_name.as_str()
                        )))),
                    Some(t) => out.with_configs(
                        broker
                            .topics
                            .describe_configs(&t)
                            .into_iter()
                            .filter(|e| wanted(&e.name))
                            .map(|e| {
                                DescribeConfigsResourceResult::default()
                                    .with_name(str(&e.name))
                                    .with_value(Some(str(&e.value)))
                                    .with_config_source(if e.is_default {
                                        SOURCE_DEFAULT
                                    } else {
                                        SOURCE_DYNAMIC_TOPIC
                                    })
                            })
                            .collect(),
                    ),
                },
                RESOURCE_BROKER => {
                    let d = broker.topics.defaults();
                    let configs = [
                        ("auto.create.topics.enable", d.auto_create.to_string()),
                        ("num.partitions", d.num_partitions.to_string()),
                        ("message.max.bytes", d.max_message_bytes.to_string()),
                        ("log.retention.ms", d.retention_ms.to_string()),
                        ("log.retention.bytes", d.retention_bytes.to_string()),
                        ("broker.id", broker.identity.node_id.to_string()),
                    ];
                    out.with_configs(
                        configs
                            .into_iter()
                            .filter(|(k, _)| wanted(k))
                            .map(|(k, v)| {
                                DescribeConfigsResourceResult::default()
                                    .with_name(str(k))
                                    .with_value(Some(str(&v)))
                                    .with_read_only(true)
                                    .with_config_source(SOURCE_STATIC_BROKER)
                            })
                            .collect(),
                    )
                }
                RESOURCE_GROUP => match groups.remove(res.resource_name.as_str()) {
                    Some(Ok(entries)) => out.with_configs(
                        entries
                            .into_iter()
                            .filter(|e| wanted(e.name))
                            .map(|e| {
                                DescribeConfigsResourceResult::default()
                                    .with_name(str(e.name))
                                    .with_value(Some(str(&e.value)))
                                    .with_config_source(if e.is_default {
                                        SOURCE_DEFAULT
                                    } else {
                                        SOURCE_GROUP
                                    })
                            })
                            .collect(),
                    ),
                    Some(Err(e)) => out.with_error_code(e.code()),
                    None => out.with_error_code(ResponseError::UnknownServerError.code()),
                },
                _ => out
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(str(
                        "Weir describes topic, broker and group configs only",
                    ))),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}
