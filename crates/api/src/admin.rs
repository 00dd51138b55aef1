//! Topics, partitions, configs and DeleteRecords.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use uuid::Uuid;
use weir_partition::AdminError;

use crate::{str, Broker};

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// DescribeConfigs config sources.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

fn err_parts(e: &AdminError) -> (i16, Option<kafka_protocol::protocol::StrBytes>) {
    (e.0.code(), Some(str(&e.1)))
}

impl Broker {
    pub(crate) async fn create_topics(
        &self,
        r: CreateTopicsRequest,
        version: i16,
    ) -> CreateTopicsResponse {
        let mut results = Vec::with_capacity(r.topics.len());
        for t in r.topics {
            let name = t.name.0.to_string();
            let partitions = if t.assignments.is_empty() {
                t.num_partitions
            } else {
                t.assignments.len() as i32
            };
            let mut configs = BTreeMap::new();
            for c in &t.configs {
                if let Some(v) = &c.value {
                    configs.insert(c.name.to_string(), v.to_string());
                }
            }
            let res = CreatableTopicResult::default().with_name(t.name.clone());
            if name == crate::surface::OFFSETS_TOPIC {
                // Kafka's internal offsets topic always exists (see `surface.rs`).
                results.push(
                    res.with_error_code(ResponseError::TopicAlreadyExists.code())
                        .with_error_message(Some(crate::str(
                            "__consumer_offsets is internal: offsets live in the metadata store",
                        ))),
                );
                continue;
            }
            let replication = if t.replication_factor == -1 {
                1
            } else {
                t.replication_factor
            };
            results.push(
                match self
                    .topics
                    .create(&name, partitions, configs, r.validate_only)
                    .await
                {
                    Ok(topic) => {
                        if !r.validate_only {
                            self.wait_for_leaders(&topic.name).await;
                        }
                        let mut res = res
                            .with_topic_id(Uuid::from_bytes(topic.id))
                            .with_num_partitions(if r.validate_only {
                                if partitions == -1 {
                                    self.topics.defaults().num_partitions as i32
                                } else {
                                    partitions
                                }
                            } else {
                                topic.partition_count() as i32
                            })
                            .with_replication_factor(replication);
                        if version >= 5 {
                            res = res.with_configs(Some(
                                self.topics
                                    .describe_configs(&topic)
                                    .into_iter()
                                    .map(|e| {
                                        CreatableTopicConfigs::default()
                                            .with_name(str(&e.name))
                                            .with_value(Some(str(&e.value)))
                                            .with_config_source(if e.is_default {
                                                SOURCE_DEFAULT
                                            } else {
                                                SOURCE_DYNAMIC_TOPIC
                                            })
                                    })
                                    .collect(),
                            ));
                        }
                        res
                    }
                    Err(e) => {
                        let (code, msg) = err_parts(&e);
                        res.with_error_code(code)
                            .with_error_message(msg)
                            .with_num_partitions(-1)
                            .with_replication_factor(-1)
                    }
                },
            );
        }
        CreateTopicsResponse::default().with_topics(results)
    }

    pub(crate) async fn delete_topics(
        &self,
        r: DeleteTopicsRequest,
        version: i16,
    ) -> DeleteTopicsResponse {
        let targets: Vec<(Option<String>, Uuid)> = if version >= 6 {
            r.topics
                .into_iter()
                .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
                .collect()
        } else {
            r.topic_names
                .into_iter()
                .map(|n| (Some(n.0.to_string()), Uuid::nil()))
                .collect()
        };
        let mut out = Vec::with_capacity(targets.len());
        for (name, id) in targets {
            let name = match name {
                Some(n) => Some(n),
                None => self.topics.get_by_id(id.as_bytes()).map(|t| t.name.clone()),
            };
            let res = DeletableTopicResult::default()
                .with_name(name.as_deref().map(|n| TopicName(str(n))))
                .with_topic_id(id);
            out.push(match name {
                None => res.with_error_code(ResponseError::UnknownTopicId.code()),
                Some(n) => match self.topics.delete(&n).await {
                    Ok(id) => res.with_topic_id(Uuid::from_bytes(id)),
                    Err(e) => {
                        let (code, msg) = err_parts(&e);
                        res.with_error_code(code).with_error_message(msg)
                    }
                },
            });
        }
        DeleteTopicsResponse::default().with_responses(out)
    }

    pub(crate) async fn create_partitions(
        &self,
        r: CreatePartitionsRequest,
    ) -> CreatePartitionsResponse {
        let mut results = Vec::with_capacity(r.topics.len());
        for t in r.topics {
            let res = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            results.push(
                match self
                    .topics
                    .add_partitions(t.name.0.as_str(), t.count, r.validate_only)
                    .await
                {
                    Ok(()) => {
                        if !r.validate_only {
                            self.wait_for_leaders(t.name.0.as_str()).await;
                        }
                        res
                    }
                    Err(e) => {
                        let (code, msg) = err_parts(&e);
                        res.with_error_code(code).with_error_message(msg)
                    }
                },
            );
        }
        CreatePartitionsResponse::default().with_results(results)
    }

    pub(crate) async fn describe_configs(
        &self,
        r: DescribeConfigsRequest,
        _version: i16,
    ) -> DescribeConfigsResponse {
        // Topic configs as the metadata store holds them: this broker's catalog catches up with
        // a change made through another broker within a second, but the client that made it
        // may ask here next and must see what it was told is done.
        if r.resources
            .iter()
            .any(|res| res.resource_type == RESOURCE_TOPIC)
        {
            if let Err(e) = self.topics.refresh().await {
                tracing::warn!(error = %e, "reading the catalog before describing configs");
            }
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
                    RESOURCE_TOPIC
                        if res.resource_name.as_str() == crate::surface::OFFSETS_TOPIC =>
                    {
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
                    RESOURCE_TOPIC => match self.topics.get(res.resource_name.as_str()) {
                        None => out
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                            .with_error_message(Some(str(&format!(
                                "Topic '{}' does not exist.",
                                res.resource_name.as_str()
                            )))),
                        Some(t) => out.with_configs(
                            self.topics
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
                        let d = self.topics.defaults();
                        let configs = [
                            ("auto.create.topics.enable", d.auto_create.to_string()),
                            ("num.partitions", d.num_partitions.to_string()),
                            ("message.max.bytes", d.max_message_bytes.to_string()),
                            ("log.retention.ms", d.retention_ms.to_string()),
                            ("log.retention.bytes", d.retention_bytes.to_string()),
                            ("broker.id", self.identity.node_id.to_string()),
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
                    _ => out
                        .with_error_code(ResponseError::InvalidRequest.code())
                        .with_error_message(Some(str(
                            "Weir describes topic and broker configs only",
                        ))),
                }
            })
            .collect();
        DescribeConfigsResponse::default().with_results(results)
    }

    pub(crate) async fn alter_configs(&self, r: AlterConfigsRequest) -> AlterConfigsResponse {
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
            let result = self
                .set_topic_configs(
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

    pub(crate) async fn incremental_alter_configs(
        &self,
        r: IncrementalAlterConfigsRequest,
    ) -> IncrementalAlterConfigsResponse {
        let mut out = Vec::with_capacity(r.resources.len());
        for res in r.resources {
            let name = res.resource_name.as_str();
            // The changes apply to the configs as the metadata store holds them, with a
            // compare-and-set: a change made through another broker meanwhile is neither
            // undone by this broker's stale copy nor overwritten.
            let result = if res.resource_type == RESOURCE_TOPIC {
                self.topics
                    .alter_configs(name, |old| incremental(old, &res.configs), r.validate_only)
                    .await
            } else {
                Err((
                    ResponseError::InvalidRequest,
                    "Weir alters topic configs only".to_string(),
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

    async fn set_topic_configs(
        &self,
        resource_type: i8,
        name: &str,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(), AdminError> {
        if resource_type != RESOURCE_TOPIC {
            return Err((
                ResponseError::InvalidRequest,
                "Weir alters topic configs only".to_string(),
            ));
        }
        self.topics.set_configs(name, configs, validate_only).await
    }

    pub(crate) async fn delete_records(&self, r: DeleteRecordsRequest) -> DeleteRecordsResponse {
        let mut topics = Vec::with_capacity(r.topics.len());
        for t in r.topics {
            let mut parts = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let res =
                    DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
                parts.push(
                    match self.topics.partition(t.name.0.as_str(), p.partition_index) {
                        None => res
                            .with_error_code(
                                self.topics
                                    .missing_error(t.name.0.as_str(), p.partition_index)
                                    .code(),
                            )
                            .with_low_watermark(-1),
                        Some(part) => match part.delete_records(p.offset).await {
                            Ok(low) => res.with_low_watermark(low),
                            Err(e) => res.with_error_code(e.code()).with_low_watermark(-1),
                        },
                    },
                );
            }
            topics.push(
                DeleteRecordsTopicResult::default()
                    .with_name(t.name)
                    .with_partitions(parts),
            );
        }
        DeleteRecordsResponse::default().with_topics(topics)
    }
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
