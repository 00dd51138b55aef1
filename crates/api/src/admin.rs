//! What the topic and config APIs share (each is served from its module in `apis/`): resource
//! types, config sources, errors, setting a topic's configs.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;
use weir_partition::AdminError;

use crate::{str, Broker};

pub(crate) const RESOURCE_TOPIC: i8 = 2;
pub(crate) const RESOURCE_BROKER: i8 = 4;
/// Kafka 4's group configs (`ConfigResource.Type.GROUP`).
pub(crate) const RESOURCE_GROUP: i8 = 32;
/// DescribeConfigs config sources.
pub(crate) const SOURCE_DYNAMIC_TOPIC: i8 = 1;
pub(crate) const SOURCE_STATIC_BROKER: i8 = 4;
pub(crate) const SOURCE_DEFAULT: i8 = 5;
pub(crate) const SOURCE_GROUP: i8 = 8;

/// An admin error as an error code and message.
pub(crate) fn err_parts(e: &AdminError) -> (i16, Option<kafka_protocol::protocol::StrBytes>) {
    (e.0.code(), Some(str(&e.1)))
}

/// Sets a topic's configs (AlterConfigs, IncrementalAlterConfigs); other resources are refused.
pub(crate) async fn set_topic_configs(
    broker: &Broker,
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
    broker
        .topics
        .set_configs(name, configs, validate_only)
        .await
}
