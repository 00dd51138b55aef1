//! The produce path's schema checks over a real (SQLite, in memory) registry.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use weir_meta::SqliteMetaStore;

use super::{SchemaChecks, SchemaPolicy, Strategy};
use crate::meters::RegistryMeters;
use crate::service::{Registry, SchemaRequest, VersionSpec};

const USER: &str =
    r#"{"type":"record","name":"User","namespace":"acme","fields":[{"name":"age","type":"int"}]}"#;
const OTHER: &str = r#"{"type":"record","name":"Other","fields":[{"name":"s","type":"string"}]}"#;

fn checks() -> SchemaChecks {
    let store = SqliteMetaStore::in_memory().expect("sqlite");
    SchemaChecks::new(Arc::new(Registry::new(
        Arc::new(store),
        RegistryMeters::default(),
    )))
}

async fn register(c: &SchemaChecks, subject: &str, schema: &str) -> u32 {
    let req = SchemaRequest {
        schema: Some(schema.to_string()),
        ..SchemaRequest::default()
    };
    c.registry()
        .register(subject, &req, true)
        .await
        .expect("register")
        .0
}

/// The wire format: magic 0, the id, the payload.
fn framed(id: u32, payload: &[u8]) -> Option<Bytes> {
    let mut b = vec![0];
    b.extend_from_slice(&id.to_be_bytes());
    b.extend_from_slice(payload);
    Some(Bytes::from(b))
}

fn policy(configs: &[(&str, &str)]) -> SchemaPolicy {
    let configs: BTreeMap<String, String> = configs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    SchemaPolicy::of(&configs).expect("a policy")
}

#[test]
fn topic_configs_name_the_checks() {
    assert_eq!(SchemaPolicy::of(&BTreeMap::new()), None);
    let p = policy(&[("confluent.value.schema.validation", "true")]);
    assert_eq!(
        (p.key, p.value, p.full),
        (None, Some(Strategy::Topic), false)
    );
    let p = policy(&[
        ("confluent.key.schema.validation", "TRUE"),
        (
            "confluent.key.subject.name.strategy",
            "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy",
        ),
        ("weir.schema.validation", "full"),
    ]);
    assert_eq!(
        (p.key, p.value, p.full),
        (Some(Strategy::TopicRecord), None, true)
    );
}

#[tokio::test]
async fn records_need_an_id_registered_under_the_topics_subject() {
    let c = checks();
    let id = register(&c, "t-value", USER).await;
    let other = register(&c, "elsewhere-value", OTHER).await;
    let p = policy(&[("confluent.value.schema.validation", "true")]);
    // 21 zigzag-encoded.
    let good = (Some(Bytes::from_static(b"key")), framed(id, &[42]));
    assert_eq!(c.check("t", &p, std::slice::from_ref(&good)).await, Ok(()));
    // Tombstones and unchecked keys pass.
    assert_eq!(c.check("t", &p, &[(None, None)]).await, Ok(()));
    let cases = [
        (
            Some(Bytes::from_static(b"plain text")),
            "does not start with a schema id",
        ),
        (
            framed(999, &[42]),
            "names schema id 999, which is not registered",
        ),
        (
            framed(other, &[0]),
            "which is not registered under subject t-value",
        ),
    ];
    for (value, why) in cases {
        let e = c
            .check("t", &p, &[good.clone(), (None, value)])
            .await
            .expect_err(why);
        assert_eq!(e.index, 1);
        assert!(e.message.contains(why), "{}", e.message);
        assert!(e.message.contains("record 1"), "{}", e.message);
    }
    assert_eq!(c.meters.refused_batches.get(), 3);
    // A schema registered a moment ago validates at once (a miss reads the store).
    let new_topic = (None, framed(register(&c, "fresh-value", USER).await, &[42]));
    assert_eq!(c.check("fresh", &p, &[new_topic]).await, Ok(()));
}

#[tokio::test]
async fn a_soft_deleted_version_still_validates() {
    let c = checks();
    let id = register(&c, "t-value", USER).await;
    c.registry()
        .delete("t-value", Some(VersionSpec::Number(1)), false)
        .await
        .expect("soft delete");
    let p = policy(&[("confluent.value.schema.validation", "true")]);
    assert_eq!(c.check("t", &p, &[(None, framed(id, &[42]))]).await, Ok(()));
}

#[tokio::test]
async fn record_name_strategies_name_the_subject_from_the_schema() {
    let c = checks();
    let id = register(&c, "acme.User", USER).await;
    let both = register(&c, "t-acme.User", USER).await;
    assert_eq!(id, both);
    let record = policy(&[
        ("confluent.value.schema.validation", "true"),
        (
            "confluent.value.subject.name.strategy",
            "RecordNameStrategy",
        ),
    ]);
    assert_eq!(
        c.check("t", &record, &[(None, framed(id, &[42]))]).await,
        Ok(())
    );
    let topic_record = policy(&[
        ("confluent.value.schema.validation", "true"),
        (
            "confluent.value.subject.name.strategy",
            "TopicRecordNameStrategy",
        ),
    ]);
    assert_eq!(
        c.check("t", &topic_record, &[(None, framed(id, &[42]))])
            .await,
        Ok(())
    );
    let e = c
        .check("u", &topic_record, &[(None, framed(id, &[42]))])
        .await
        .expect_err("u-acme.User has nothing");
    assert!(e.message.contains("u-acme.User"), "{}", e.message);
}

#[tokio::test]
async fn full_validation_decodes_the_payload() {
    let c = checks();
    let id = register(&c, "t-key", USER).await;
    let p = policy(&[
        ("confluent.key.schema.validation", "true"),
        ("weir.schema.validation", "full"),
    ]);
    assert_eq!(c.check("t", &p, &[(framed(id, &[42]), None)]).await, Ok(()));
    let e = c
        .check("t", &p, &[(framed(id, &[]), None)])
        .await
        .expect_err("no int");
    assert!(
        e.message.contains("its key does not decode"),
        "{}",
        e.message
    );
    let e = c
        .check("t", &p, &[(framed(id, &[42, 1]), None)])
        .await
        .expect_err("a byte too many");
    assert!(e.message.contains("does not decode"), "{}", e.message);
    // Only the id is checked without `full`.
    let id_only = policy(&[("confluent.key.schema.validation", "true")]);
    assert_eq!(
        c.check("t", &id_only, &[(framed(id, &[]), None)]).await,
        Ok(())
    );
}
