//! [`Schemas`]: the schema registry's state. Ids and versions given in one transaction, never
//! reused; a registration refused when the subject moved; deletes soft then permanent, refused
//! while a live schema references the version; settings; the registry version raised by writes.

use crate::{
    Registered, RegistrySetting, SchemaContent, SchemaDeleted, SchemaReference, SchemaRegistration,
    Schemas,
};

/// Runs every check of the part, each against a fresh, empty store from `open`.
pub async fn run(open: impl Fn() -> Box<dyn Schemas>) {
    an_empty_registry_has_nothing(&*open()).await;
    versions_count_up_and_ids_are_shared_by_content(&*open()).await;
    a_registration_after_another_is_refused_until_checked_again(&*open()).await;
    references_are_kept_in_order_and_protect_what_they_name(&*open()).await;
    deletes_are_soft_then_permanent_and_ids_are_never_given_again(&*open()).await;
    an_import_keeps_ids_and_versions_and_later_ids_go_above(&*open()).await;
    settings_are_per_subject_and_global(&*open()).await;
    every_write_raises_the_registry_version(&*open()).await;
}

fn content(text: &str) -> SchemaContent {
    SchemaContent {
        schema_type: "AVRO".to_string(),
        schema: text.to_string(),
        references: Vec::new(),
        metadata: None,
        rule_set: None,
        fingerprint: format!("fp:{text}"),
    }
}

fn registration(subject: &str, text: &str, after_version: u32) -> SchemaRegistration {
    SchemaRegistration {
        subject: subject.to_string(),
        content: content(text),
        after_version,
        import: None,
    }
}

async fn register(m: &dyn Schemas, subject: &str, text: &str, after: u32) -> Registered {
    m.register_schema(registration(subject, text, after))
        .await
        .expect("register")
}

pub async fn an_empty_registry_has_nothing(m: &dyn Schemas) {
    assert_eq!(m.schema(1).await.expect("schema"), None);
    assert!(m.subjects().await.expect("subjects").is_empty());
    assert!(m.subject_versions("s").await.expect("versions").is_empty());
    assert!(m.schema_usages(1).await.expect("usages").is_empty());
    assert_eq!(
        m.delete_schema_version("s", None, false)
            .await
            .expect("delete"),
        SchemaDeleted::NoSubject
    );
    assert_eq!(
        m.registry_setting(RegistrySetting::Config, "")
            .await
            .expect("setting"),
        None
    );
}

pub async fn versions_count_up_and_ids_are_shared_by_content(m: &dyn Schemas) {
    assert_eq!(
        register(m, "a", "x", 0).await,
        Registered::New { id: 1, version: 1 }
    );
    // The same content again: the version it is, nothing written.
    assert_eq!(
        register(m, "a", "x", 1).await,
        Registered::Existing { id: 1, version: 1 }
    );
    assert_eq!(
        register(m, "a", "y", 1).await,
        Registered::New { id: 2, version: 2 }
    );
    // Another subject, content known: its id; new content there: the next id.
    assert_eq!(
        register(m, "b", "x", 0).await,
        Registered::New { id: 1, version: 1 }
    );
    assert_eq!(
        register(m, "b", "z", 1).await,
        Registered::New { id: 3, version: 2 }
    );
    let s = m.schema(2).await.expect("schema").expect("id 2");
    assert_eq!(s.content, content("y"));
    let versions = m.subject_versions("a").await.expect("versions");
    let got: Vec<_> = versions
        .iter()
        .map(|v| (v.version, v.schema_id, v.deleted))
        .collect();
    assert_eq!(got, vec![(1, 1, false), (2, 2, false)]);
    let usages: Vec<_> = m
        .schema_usages(1)
        .await
        .expect("usages")
        .into_iter()
        .map(|v| (v.subject, v.version))
        .collect();
    assert_eq!(usages, vec![("a".to_string(), 1), ("b".to_string(), 1)]);
    assert_eq!(
        m.subjects().await.expect("subjects"),
        vec![("a".to_string(), true), ("b".to_string(), true)]
    );
}

pub async fn a_registration_after_another_is_refused_until_checked_again(m: &dyn Schemas) {
    register(m, "s", "v1", 0).await;
    // Checked against version 1, but version 2 came first.
    register(m, "s", "v2", 1).await;
    assert_eq!(register(m, "s", "v3", 1).await, Registered::Raced);
    assert_eq!(
        register(m, "s", "v3", 2).await,
        Registered::New { id: 3, version: 3 }
    );
}

pub async fn references_are_kept_in_order_and_protect_what_they_name(m: &dyn Schemas) {
    register(m, "dep", "d", 0).await;
    register(m, "dep2", "e", 0).await;
    let mut r = registration("top", "t", 0);
    r.content.references = vec![
        SchemaReference {
            name: "second".to_string(),
            subject: "dep2".to_string(),
            version: 1,
        },
        SchemaReference {
            name: "first".to_string(),
            subject: "dep".to_string(),
            version: 1,
        },
    ];
    let Registered::New { id, .. } = m.register_schema(r.clone()).await.expect("register") else {
        panic!("top registered");
    };
    let stored = m.schema(id).await.expect("schema").expect("top");
    assert_eq!(stored.content.references, r.content.references);
    assert_eq!(m.referenced_by("dep", 1).await.expect("refs"), vec![id]);
    assert_eq!(
        m.delete_schema_version("dep", Some(1), false)
            .await
            .expect("delete"),
        SchemaDeleted::Referenced(vec![id])
    );
    assert_eq!(
        m.delete_schema_version("dep", None, false)
            .await
            .expect("delete"),
        SchemaDeleted::Referenced(vec![id])
    );
    // Once the referring version is deleted, the reference protects nothing.
    m.delete_schema_version("top", Some(1), false)
        .await
        .expect("delete top");
    assert!(m.referenced_by("dep", 1).await.expect("refs").is_empty());
    assert_eq!(
        m.delete_schema_version("dep", Some(1), false)
            .await
            .expect("delete"),
        SchemaDeleted::Done(vec![1])
    );
}

pub async fn deletes_are_soft_then_permanent_and_ids_are_never_given_again(m: &dyn Schemas) {
    register(m, "s", "a", 0).await;
    register(m, "s", "b", 1).await;
    let del = |v, p| m.delete_schema_version("s", v, p);
    assert_eq!(
        del(Some(9), false).await.expect("d"),
        SchemaDeleted::NoVersion
    );
    assert_eq!(
        del(Some(2), true).await.expect("d"),
        SchemaDeleted::NotSoftDeleted
    );
    assert_eq!(
        del(Some(2), false).await.expect("d"),
        SchemaDeleted::Done(vec![2])
    );
    assert_eq!(
        del(Some(2), false).await.expect("d"),
        SchemaDeleted::AlreadySoftDeleted
    );
    // A new version after a soft delete takes the next number, not the deleted one's.
    assert_eq!(
        register(m, "s", "c", 2).await,
        Registered::New { id: 3, version: 3 }
    );
    assert_eq!(
        del(None, true).await.expect("d"),
        SchemaDeleted::NotSoftDeleted
    );
    assert_eq!(
        del(None, false).await.expect("d"),
        SchemaDeleted::Done(vec![1, 3])
    );
    assert_eq!(
        del(None, false).await.expect("d"),
        SchemaDeleted::AlreadySoftDeleted
    );
    // Soft-deleted: still there, listed as having no live version.
    assert!(m.schema(1).await.expect("schema").is_some());
    assert_eq!(
        m.subjects().await.expect("subjects"),
        vec![("s".to_string(), false)]
    );
    assert_eq!(
        del(None, true).await.expect("d"),
        SchemaDeleted::Done(vec![1, 2, 3])
    );
    assert!(m.subjects().await.expect("subjects").is_empty());
    assert_eq!(m.schema(1).await.expect("schema"), None);
    // The ids of permanently deleted schemas are not given again, even to their content.
    assert_eq!(
        register(m, "s", "a", 0).await,
        Registered::New { id: 4, version: 1 }
    );
}

pub async fn an_import_keeps_ids_and_versions_and_later_ids_go_above(m: &dyn Schemas) {
    let import = |subject: &str, text: &str, id, version| {
        let mut r = registration(subject, text, 0);
        r.import = Some((id, version));
        m.register_schema(r)
    };
    assert_eq!(
        import("s", "a", 100, 3).await.expect("import"),
        Registered::New {
            id: 100,
            version: 3
        }
    );
    assert_eq!(
        import("t", "b", 50, 1).await.expect("import"),
        Registered::New { id: 50, version: 1 }
    );
    // An id that names another content, a version that exists: refused.
    assert_eq!(
        import("u", "c", 100, 1).await.expect("import"),
        Registered::IdTaken
    );
    assert_eq!(
        import("s", "d", 101, 3).await.expect("import"),
        Registered::VersionTaken
    );
    // The same content under its id in another subject.
    assert_eq!(
        import("u", "a", 100, 7).await.expect("import"),
        Registered::New {
            id: 100,
            version: 7
        }
    );
    // Ordinary registrations go on above the highest id imported.
    assert_eq!(
        register(m, "s", "e", 3).await,
        Registered::New {
            id: 101,
            version: 4
        }
    );
}

pub async fn settings_are_per_subject_and_global(m: &dyn Schemas) {
    let (config, mode) = (RegistrySetting::Config, RegistrySetting::Mode);
    assert_eq!(
        m.set_registry_setting(config, "", Some("FULL"))
            .await
            .expect("set"),
        None
    );
    assert_eq!(
        m.set_registry_setting(config, "s", Some("NONE"))
            .await
            .expect("set"),
        None
    );
    assert_eq!(
        m.set_registry_setting(mode, "s", Some("READONLY"))
            .await
            .expect("set"),
        None
    );
    assert_eq!(
        m.set_registry_setting(config, "s", Some("FORWARD"))
            .await
            .expect("set"),
        Some("NONE".to_string())
    );
    let get = |k, s: &'static str| m.registry_setting(k, s);
    assert_eq!(get(config, "").await.expect("g"), Some("FULL".to_string()));
    assert_eq!(
        get(config, "s").await.expect("g"),
        Some("FORWARD".to_string())
    );
    assert_eq!(
        get(mode, "s").await.expect("g"),
        Some("READONLY".to_string())
    );
    assert_eq!(get(mode, "").await.expect("g"), None);
    assert_eq!(
        m.set_registry_setting(config, "s", None).await.expect("rm"),
        Some("FORWARD".to_string())
    );
    assert_eq!(get(config, "s").await.expect("g"), None);
    assert_eq!(
        get(mode, "s").await.expect("g"),
        Some("READONLY".to_string())
    );
}

pub async fn every_write_raises_the_registry_version(m: &dyn Schemas) {
    let mut last = m.registry_version().await.expect("version");
    let mut raised = |now: u64, what: &str| {
        assert!(now > last, "{what}: the version stayed at {last}");
        last = now;
    };
    register(m, "s", "a", 0).await;
    raised(m.registry_version().await.expect("v"), "a registration");
    m.set_registry_setting(RegistrySetting::Mode, "", Some("READONLY"))
        .await
        .expect("set");
    raised(m.registry_version().await.expect("v"), "a setting");
    m.delete_schema_version("s", Some(1), false)
        .await
        .expect("delete");
    raised(m.registry_version().await.expect("v"), "a delete");
    // Reads and a registration that writes nothing leave it.
    let before = m.registry_version().await.expect("v");
    m.subjects().await.expect("subjects");
    assert_eq!(register(m, "s", "b", 0).await, Registered::Raced);
    assert_eq!(m.registry_version().await.expect("v"), before);
}
