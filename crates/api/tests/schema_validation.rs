//! Schemas enforced on produce: a topic with `confluent.value.schema.validation=true` refuses a
//! batch with a record whose value carries no schema id registered under `<topic>-value`, with
//! INVALID_RECORD, the record's index and the reason in the response (KIP-467), and appends
//! nothing of it.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::*;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use kafka_protocol::ResponseError;

mod common;

use common::*;

/// The records, in one batch or several (the encoder starts a new batch where offset minus
/// sequence changes, as it does here): every record of each is checked.
fn batch_of_values(values: &[Option<Bytes>]) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: -1,
            timestamp: 1_700_000_000_000,
            key: None,
            value: v.clone(),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::Lz4,
        },
    )
    .expect("encode");
    buf.freeze()
}

async fn set_config(e: &Env, name: &str, value: &str) {
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(TOPIC))
            .with_configs(vec![AlterableConfig::default()
                .with_name(s(name))
                .with_value(Some(s(value)))
                .with_config_operation(0)]),
    ]);
    let ResponseKind::IncrementalAlterConfigs(r) = call(
        e,
        ApiKey::IncrementalAlterConfigs,
        1,
        RequestKind::IncrementalAlterConfigs(request),
    )
    .await
    else {
        panic!("not an IncrementalAlterConfigs answer");
    };
    assert_eq!(
        r.responses[0].error_code, 0,
        "{:?}",
        r.responses[0].error_message
    );
}

async fn produce(e: &Env, records: Bytes) -> produce_response::PartitionProduceResponse {
    let r = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(topic(TOPIC))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(records)),
            ])]);
    let ResponseKind::Produce(r) = call(e, ApiKey::Produce, 9, RequestKind::Produce(r)).await
    else {
        panic!("not a Produce answer");
    };
    r.responses[0].partition_responses[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_without_a_registered_id_refuses_its_batch_and_says_which_and_why() {
    let e = env().await;
    open_partition(&e.topics, TOPIC, 0).await;
    let req = weir_registry::service::SchemaRequest {
        schema: Some(r#"{"type":"record","name":"R","fields":[{"name":"n","type":"int"}]}"#.into()),
        ..Default::default()
    };
    let (id, _, _) = e
        .broker
        .schemas
        .registry()
        .register(&format!("{TOPIC}-value"), &req, false)
        .await
        .expect("register");
    let mut good = vec![0u8];
    good.extend_from_slice(&id.to_be_bytes());
    good.push(2);
    let good = Some(Bytes::from(good));

    // Before the topic asks for validation, anything goes.
    let plain = Some(Bytes::from_static(b"no schema id here"));
    let before = produce(&e, batch_of_values(std::slice::from_ref(&plain))).await;
    assert_eq!(before.error_code, 0);

    set_config(&e, "confluent.value.schema.validation", "true").await;
    for _ in 0..500 {
        let configs = e.topics.get(TOPIC).expect("topic").configs.clone();
        if configs.contains_key("confluent.value.schema.validation") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let refused = produce(&e, batch_of_values(&[good.clone(), plain, None])).await;
    assert_eq!(refused.error_code, ResponseError::InvalidRecord.code());
    let message = refused
        .error_message
        .as_deref()
        .map(|m| m.to_string())
        .unwrap_or_default();
    assert!(message.contains("record 1"), "{message}");
    assert!(
        message.contains("does not start with a schema id"),
        "{message}"
    );
    assert_eq!(refused.record_errors.len(), 1);
    assert_eq!(refused.record_errors[0].batch_index, 1);

    // Nothing of the refused batch was appended: the next one follows the first.
    let ok = produce(&e, batch_of_values(&[good, None])).await;
    assert_eq!(ok.error_code, 0, "{:?}", ok.error_message);
    assert_eq!(ok.base_offset, before.base_offset + 1);
    assert_eq!(e.broker.schemas.meters.refused_batches.get(), 1);
}
