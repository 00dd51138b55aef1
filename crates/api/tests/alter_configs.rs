//! IncrementalAlterConfigs in a cluster: the change applies to the topic's configs as the
//! metadata store holds them, not as this broker last heard of them, so that a change made
//! through another broker a moment before is not lost.

use std::collections::BTreeMap;

use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::*;
use weir_api::Reply;

mod common;

use common::{env, s, TOPIC};

#[tokio::test(flavor = "multi_thread")]
async fn a_delete_keeps_a_key_another_broker_set_a_moment_before() {
    let e = env().await;
    // Another broker sets max.message.bytes: the store has it, this broker's catalog does not
    // know yet (its change notification is still on the way).
    let mut configs: BTreeMap<String, String> = e
        .broker
        .meta
        .list_topics()
        .await
        .expect("list")
        .into_iter()
        .find(|t| t.name == TOPIC)
        .expect("topic")
        .configs;
    configs.insert("retention.ms".into(), "123456789".into());
    configs.insert("max.message.bytes".into(), "2000000".into());
    e.broker
        .meta
        .set_topic_configs(TOPIC, configs)
        .await
        .expect("set by another broker");
    // This broker deletes retention.ms.
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(TOPIC))
            .with_configs(vec![AlterableConfig::default()
                .with_name(s("retention.ms"))
                .with_config_operation(1)]),
    ]);
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::IncrementalAlterConfigs as i16)
        .with_request_api_version(1);
    let Reply::Now(r) = e
        .broker
        .handle(
            &header,
            RequestKind::IncrementalAlterConfigs(request),
            "127.0.0.1",
        )
        .await
    else {
        panic!("an answer now")
    };
    let ResponseKind::IncrementalAlterConfigs(r) = *r else {
        panic!("not an IncrementalAlterConfigs response")
    };
    assert_eq!(
        r.responses[0].error_code, 0,
        "{:?}",
        r.responses[0].error_message
    );
    let stored = e
        .broker
        .meta
        .list_topics()
        .await
        .expect("list")
        .into_iter()
        .find(|t| t.name == TOPIC)
        .expect("topic")
        .configs;
    assert_eq!(stored.get("retention.ms"), None, "deleted");
    assert_eq!(
        stored.get("max.message.bytes").map(String::as_str),
        Some("2000000"),
        "the other broker's change is kept"
    );
}
