//! The registry's rules over a real (SQLite, in memory) store.

use std::sync::Arc;

use weir_meta::SqliteMetaStore;

use super::{Registry, SchemaRequest, VersionSpec};
use crate::meters::RegistryMeters;
use serde_json::json;

fn registry() -> Registry {
    let store = SqliteMetaStore::in_memory().expect("sqlite");
    Registry::new(Arc::new(store), RegistryMeters::default())
}

fn avro(fields: &str) -> SchemaRequest {
    SchemaRequest {
        schema: Some(format!(
            r#"{{"type":"record","name":"User","fields":[{fields}]}}"#
        )),
        ..SchemaRequest::default()
    }
}

const NAME: &str = r#"{"name":"name","type":"string"}"#;
const AGE: &str = r#"{"name":"age","type":"int"}"#;
const AGE_DEFAULT: &str = r#"{"name":"age","type":"int","default":0}"#;

#[tokio::test]
async fn registering_again_returns_the_same_id_and_version() {
    let r = registry();
    let (id, v, _) = r
        .register("t-value", &avro(NAME), false)
        .await
        .expect("register");
    assert_eq!((id, v), (1, 1));
    // Whitespace and key order do not make a new schema.
    let same = SchemaRequest {
        schema: Some(
            r#"{ "fields": [ {"type":"string","name":"name"} ], "name":"User", "type":"record" }"#
                .into(),
        ),
        ..SchemaRequest::default()
    };
    let (id2, v2, _) = r.register("t-value", &same, false).await.expect("again");
    assert_eq!((id2, v2), (1, 1));
    // The same schema under another subject keeps its id.
    let (id3, v3, _) = r
        .register("u-value", &avro(NAME), false)
        .await
        .expect("other");
    assert_eq!((id3, v3), (1, 1));
    let found = r.lookup("t-value", &same, false).await.expect("lookup");
    assert_eq!((found.schema.id, found.version), (1, 1));
}

#[tokio::test]
async fn an_incompatible_schema_is_refused_with_the_reasons() {
    let r = registry();
    r.register("s", &avro(NAME), false).await.expect("v1");
    let e = r
        .register("s", &avro(&format!("{NAME},{AGE}")), false)
        .await
        .expect_err("a field without default under BACKWARD");
    assert_eq!(e.code, 409);
    assert!(
        e.message.contains("READER_FIELD_MISSING_DEFAULT_VALUE"),
        "{}",
        e.message
    );
    assert!(e.message.contains("{oldSchemaVersion: 1}"), "{}", e.message);
    assert!(
        e.message.contains("compatibility: 'BACKWARD'"),
        "{}",
        e.message
    );
    let (_, v, _) = r
        .register("s", &avro(&format!("{NAME},{AGE_DEFAULT}")), false)
        .await
        .expect("with a default");
    assert_eq!(v, 2);
    // `force` skips the check; NONE does too.
    r.set_config(Some("s"), &json!({"compatibility": "none"}))
        .await
        .expect("config");
    r.register("s", &avro(AGE), false)
        .await
        .expect("under NONE");
}

#[tokio::test]
async fn transitive_levels_check_every_live_version() {
    let r = registry();
    r.set_config(None, &json!({"compatibility": "BACKWARD"}))
        .await
        .expect("config");
    // v1: name; v2: name + age (default); v3: age with default only, dropping name.
    r.register("s", &avro(NAME), false).await.expect("v1");
    r.register("s", &avro(&format!("{NAME},{AGE_DEFAULT}")), false)
        .await
        .expect("v2");
    // Dropping age's default: BACKWARD against v2 only passes (v2 has age)...
    let next = avro(&format!("{NAME},{AGE}"));
    let (ok, _) = r.check("s", None, &next).await.expect("check");
    assert!(ok);
    // ...but not transitively, since v1 has no age.
    r.set_config(Some("s"), &json!({"compatibility": "BACKWARD_TRANSITIVE"}))
        .await
        .expect("config");
    let (ok, reasons) = r.check("s", None, &next).await.expect("check");
    assert!(!ok);
    assert!(
        reasons.iter().any(|m| m == "{oldSchemaVersion: 1}"),
        "{reasons:?}"
    );
    // A soft-deleted version is not checked.
    r.delete("s", Some(VersionSpec::Number(1)), false)
        .await
        .expect("delete v1");
    let (ok, _) = r.check("s", None, &next).await.expect("check");
    assert!(ok);
}

#[tokio::test]
async fn config_and_mode_answers_follow_confluent() {
    let r = registry();
    assert_eq!(
        r.get_config(None, false).await.expect("global"),
        json!({"compatibilityLevel": "BACKWARD"})
    );
    assert_eq!(
        r.get_config(Some("s"), false)
            .await
            .expect_err("unset")
            .code,
        40408
    );
    assert_eq!(
        r.get_config(Some("s"), true).await.expect("default"),
        json!({"compatibilityLevel": "BACKWARD"})
    );
    assert_eq!(
        r.set_config(Some("s"), &json!({"compatibility": "full"}))
            .await
            .expect("put"),
        json!({"compatibility": "FULL"})
    );
    assert_eq!(
        r.get_config(Some("s"), false).await.expect("get"),
        json!({"compatibilityLevel": "FULL"})
    );
    assert_eq!(
        r.set_config(Some("s"), &json!({"compatibility": "SIDEWAYS"}))
            .await
            .expect_err("bad")
            .code,
        42203
    );
    assert_eq!(
        r.delete_config(Some("s")).await.expect("delete"),
        json!({"compatibilityLevel": "FULL"})
    );
    assert_eq!(
        r.delete_config(Some("s")).await.expect_err("gone").code,
        40401
    );
    assert_eq!(
        r.get_mode(Some("s"), false).await.expect_err("unset").code,
        40409
    );
    assert_eq!(
        r.set_mode(None, &json!({"mode": "nope"}), false)
            .await
            .expect_err("bad")
            .code,
        42204
    );
    r.set_mode(Some("s"), &json!({"mode": "READONLY"}), false)
        .await
        .expect("readonly");
    assert_eq!(
        r.register("s", &avro(NAME), false)
            .await
            .expect_err("readonly")
            .code,
        42205
    );
    r.register("t", &avro(NAME), false)
        .await
        .expect("another subject is writable");
}

#[tokio::test]
async fn import_mode_keeps_ids_and_refuses_ordinary_registrations() {
    let r = registry();
    r.register("live", &avro(NAME), false).await.expect("live");
    // A registry with live subjects goes to IMPORT only when forced.
    assert_eq!(
        r.set_mode(None, &json!({"mode": "IMPORT"}), false)
            .await
            .expect_err("live")
            .code,
        42205
    );
    r.set_mode(None, &json!({"mode": "IMPORT"}), true)
        .await
        .expect("forced");
    assert_eq!(
        r.register("s", &avro(AGE), false)
            .await
            .expect_err("no id")
            .code,
        42205
    );
    let mut imported = avro(AGE);
    imported.id = Some(42);
    imported.version = Some(3);
    let (id, v, _) = r.register("s", &imported, false).await.expect("import");
    assert_eq!((id, v), (42, 3));
    // The id names another schema: refused.
    let mut clash = avro(&format!("{NAME},{AGE}"));
    clash.id = Some(42);
    assert_eq!(
        r.register("x", &clash, false)
            .await
            .expect_err("clash")
            .code,
        42205
    );
    r.set_mode(None, &json!({"mode": "READWRITE"}), false)
        .await
        .expect("back");
    let mut with_id = avro(NAME);
    with_id.id = Some(7);
    assert_eq!(
        r.register("y", &with_id, false)
            .await
            .expect_err("not import")
            .code,
        42205
    );
    let (id, v, _) = r
        .register("s", &avro(&format!("{AGE},{NAME}")), true)
        .await
        .expect("after the import");
    assert_eq!((id, v), (43, 4));
}

#[tokio::test]
async fn deletes_answer_with_confluents_codes() {
    let r = registry();
    r.register("s", &avro(NAME), false).await.expect("v1");
    r.register("s", &avro(&format!("{NAME},{AGE_DEFAULT}")), false)
        .await
        .expect("v2");
    let latest = Some(VersionSpec::Latest);
    assert_eq!(
        r.delete("nope", None, false).await.expect_err("none").code,
        40401
    );
    assert_eq!(
        r.delete("s", Some(VersionSpec::Number(9)), false)
            .await
            .expect_err("v9")
            .code,
        40402
    );
    assert_eq!(
        r.delete("s", latest, true)
            .await
            .expect_err("not soft")
            .code,
        40407
    );
    assert_eq!(r.delete("s", latest, false).await.expect("soft"), vec![2]);
    assert_eq!(
        r.delete("s", Some(VersionSpec::Number(2)), false)
            .await
            .expect_err("again")
            .code,
        40406
    );
    assert_eq!(
        r.delete("s", None, true).await.expect_err("v1 live").code,
        40405
    );
    assert_eq!(r.versions("s", false, false).await.expect("live"), vec![1]);
    assert_eq!(r.versions("s", true, false).await.expect("all"), vec![1, 2]);
    assert_eq!(
        r.versions("s", false, true).await.expect("deleted only"),
        vec![2]
    );
    assert_eq!(r.delete("s", None, false).await.expect("soft all"), vec![1]);
    assert_eq!(
        r.delete("s", None, false)
            .await
            .expect_err("soft again")
            .code,
        40404
    );
    // Soft-deleted: the id still resolves; the subject is listed only when asked for.
    assert!(r.schema_by_id(1).await.is_ok());
    assert!(r
        .subjects("", false, false)
        .await
        .expect("subjects")
        .is_empty());
    assert_eq!(
        r.subjects("", true, false).await.expect("subjects"),
        vec!["s".to_string()]
    );
    assert_eq!(
        r.delete("s", None, true).await.expect("permanent"),
        vec![1, 2]
    );
    assert_eq!(r.schema_by_id(1).await.expect_err("gone").code, 40403);
    assert_eq!(
        r.version("s", VersionSpec::Latest, true)
            .await
            .expect_err("gone")
            .code,
        40401
    );
}

#[tokio::test]
async fn references_resolve_and_protect_what_they_name() {
    let r = registry();
    let address = SchemaRequest {
        schema: Some(r#"{"type":"record","name":"Address","namespace":"acme","fields":[{"name":"city","type":"string"}]}"#.into()),
        ..SchemaRequest::default()
    };
    r.register("address", &address, false)
        .await
        .expect("address");
    let user: SchemaRequest = serde_json::from_value(json!({
        "schema": r#"{"type":"record","name":"User","namespace":"acme","fields":[{"name":"home","type":"acme.Address"}]}"#,
        "references": [{"name": "acme.Address", "subject": "address", "version": 1}]
    }))
    .expect("request");
    let (id, _, content) = r.register("user", &user, false).await.expect("user");
    assert_eq!(content.references.len(), 1);
    let stored = r.schema_by_id(id).await.expect("by id");
    r.parsed(&stored).await.expect("parses with its reference");
    assert_eq!(
        r.delete("address", Some(VersionSpec::Number(1)), false)
            .await
            .expect_err("referenced")
            .code,
        42206
    );
    let mut dangling = user.clone();
    dangling.references[0].version = 5;
    assert_eq!(
        r.register("user2", &dangling, false)
            .await
            .expect_err("dangling")
            .code,
        42201
    );
    assert_eq!(VersionSpec::parse("0").expect_err("zero").code, 42202);
    assert_eq!(
        VersionSpec::parse("LATEST").expect("latest"),
        VersionSpec::Latest
    );
}
