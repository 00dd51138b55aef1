//! [`IcebergCatalog`]: the JDBC catalogs' two tables; namespaces that exist while they have
//! rows or tables, tables created once, commits by compare-and-set of the metadata location.

use std::collections::BTreeMap;

use crate::iceberg::{IcebergCatalog, NamespaceDrop, TableRename, NAMESPACE_EXISTS_PROPERTY};

/// Runs every check of the part, each against a fresh, empty store from `open`.
pub async fn run(open: impl Fn() -> Box<dyn IcebergCatalog>) {
    an_empty_catalog_has_nothing(&*open()).await;
    a_namespace_is_created_once_with_its_properties(&*open()).await;
    namespace_properties_are_set_and_removed(&*open()).await;
    a_namespace_with_tables_is_not_dropped(&*open()).await;
    a_table_is_created_once(&*open()).await;
    a_commit_moves_only_from_the_location_it_read(&*open()).await;
    catalogs_do_not_see_each_others_rows(&*open()).await;
    like_wildcards_in_names_are_literal(&*open()).await;
    tables_are_renamed_and_dropped(&*open()).await;
}

fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub async fn an_empty_catalog_has_nothing(m: &dyn IcebergCatalog) {
    assert!(m.iceberg_namespaces("weir").await.expect("list").is_empty());
    assert_eq!(
        m.iceberg_namespace_properties("weir", "ns")
            .await
            .expect("props"),
        None
    );
    assert!(m
        .iceberg_tables("weir", "ns")
        .await
        .expect("tables")
        .is_empty());
    assert_eq!(
        m.iceberg_table("weir", "ns", "t").await.expect("table"),
        None
    );
    assert!(!m
        .iceberg_commit("weir", "ns", "t", "a", "b")
        .await
        .expect("commit nothing"));
    assert!(!m.iceberg_drop_table("weir", "ns", "t").await.expect("drop"));
    assert_eq!(
        m.iceberg_drop_namespace("weir", "ns").await.expect("drop"),
        NamespaceDrop::NotFound
    );
    assert!(!m
        .iceberg_update_namespace("weir", "ns", &props(&[("a", "b")]), &[])
        .await
        .expect("update nothing"));
}

pub async fn a_namespace_is_created_once_with_its_properties(m: &dyn IcebergCatalog) {
    assert!(m
        .iceberg_create_namespace("weir", "sales", &BTreeMap::new())
        .await
        .expect("create"));
    assert_eq!(
        m.iceberg_namespace_properties("weir", "sales")
            .await
            .expect("props"),
        Some(props(&[(NAMESPACE_EXISTS_PROPERTY, "true")])),
        "a namespace without properties gets the JDBC catalogs' row"
    );
    assert!(!m
        .iceberg_create_namespace("weir", "sales", &props(&[("owner", "x")]))
        .await
        .expect("create again"));
    assert!(m
        .iceberg_create_namespace("weir", "ops", &props(&[("location", "s3://b/ops")]))
        .await
        .expect("create with properties"));
    assert_eq!(
        m.iceberg_namespace_properties("weir", "ops")
            .await
            .expect("props"),
        Some(props(&[("location", "s3://b/ops")]))
    );
    assert_eq!(
        m.iceberg_namespaces("weir").await.expect("list"),
        vec!["ops".to_string(), "sales".to_string()]
    );
    // A level below an existing namespace makes the upper one exist.
    assert!(m
        .iceberg_create_namespace("weir", "lake.raw", &BTreeMap::new())
        .await
        .expect("create nested"));
    assert!(m
        .iceberg_namespace_properties("weir", "lake")
        .await
        .expect("props")
        .is_some());
    assert!(!m
        .iceberg_create_namespace("weir", "lake", &BTreeMap::new())
        .await
        .expect("exists through its child"));
}

pub async fn namespace_properties_are_set_and_removed(m: &dyn IcebergCatalog) {
    m.iceberg_create_namespace("weir", "ns", &props(&[("a", "1"), ("b", "2")]))
        .await
        .expect("create");
    assert!(m
        .iceberg_update_namespace(
            "weir",
            "ns",
            &props(&[("a", "10"), ("c", "3")]),
            &["b".into()]
        )
        .await
        .expect("update"));
    assert_eq!(
        m.iceberg_namespace_properties("weir", "ns")
            .await
            .expect("props"),
        Some(props(&[("a", "10"), ("c", "3")]))
    );
}

pub async fn a_namespace_with_tables_is_not_dropped(m: &dyn IcebergCatalog) {
    m.iceberg_create_namespace("weir", "ns", &BTreeMap::new())
        .await
        .expect("create");
    assert!(m
        .iceberg_create_table("weir", "ns.inner", "t", "s3://b/t/m1.json")
        .await
        .expect("table"));
    assert_eq!(
        m.iceberg_drop_namespace("weir", "ns").await.expect("drop"),
        NamespaceDrop::NotEmpty,
        "a table in a namespace below keeps it"
    );
    assert!(m
        .iceberg_drop_table("weir", "ns.inner", "t")
        .await
        .expect("drop"));
    assert_eq!(
        m.iceberg_drop_namespace("weir", "ns").await.expect("drop"),
        NamespaceDrop::Dropped
    );
    assert_eq!(
        m.iceberg_namespace_properties("weir", "ns")
            .await
            .expect("props"),
        None
    );
}

pub async fn a_table_is_created_once(m: &dyn IcebergCatalog) {
    assert!(m
        .iceberg_create_table("weir", "ns", "orders", "s3://b/orders/m1.json")
        .await
        .expect("create"));
    assert!(!m
        .iceberg_create_table("weir", "ns", "orders", "s3://b/orders/other.json")
        .await
        .expect("create again"));
    let row = m
        .iceberg_table("weir", "ns", "orders")
        .await
        .expect("read")
        .expect("there");
    assert_eq!(row.metadata_location, "s3://b/orders/m1.json");
    assert_eq!(row.previous_metadata_location, None);
    assert_eq!(
        m.iceberg_tables("weir", "ns").await.expect("list"),
        vec!["orders".to_string()]
    );
    assert_eq!(
        m.iceberg_namespaces("weir").await.expect("list"),
        vec!["ns".to_string()],
        "a table's namespace exists through it"
    );
}

pub async fn a_commit_moves_only_from_the_location_it_read(m: &dyn IcebergCatalog) {
    m.iceberg_create_table("weir", "ns", "t", "m1")
        .await
        .expect("create");
    assert!(m
        .iceberg_commit("weir", "ns", "t", "m1", "m2")
        .await
        .expect("commit"));
    // A second writer that read m1 loses.
    assert!(!m
        .iceberg_commit("weir", "ns", "t", "m1", "m2-other")
        .await
        .expect("stale commit"));
    let row = m
        .iceberg_table("weir", "ns", "t")
        .await
        .expect("read")
        .expect("there");
    assert_eq!(
        (
            row.metadata_location.as_str(),
            row.previous_metadata_location.as_deref()
        ),
        ("m2", Some("m1"))
    );
    assert!(m
        .iceberg_commit("weir", "ns", "t", "m2", "m3")
        .await
        .expect("commit"));
}

pub async fn catalogs_do_not_see_each_others_rows(m: &dyn IcebergCatalog) {
    m.iceberg_create_table("weir", "ns", "t", "m1")
        .await
        .expect("create");
    m.iceberg_create_namespace("other", "theirs", &BTreeMap::new())
        .await
        .expect("create");
    assert_eq!(
        m.iceberg_table("other", "ns", "t").await.expect("read"),
        None
    );
    assert!(!m
        .iceberg_commit("other", "ns", "t", "m1", "m2")
        .await
        .expect("commit"));
    assert_eq!(
        m.iceberg_namespaces("weir").await.expect("list"),
        vec!["ns".to_string()]
    );
    assert!(m
        .iceberg_create_table("other", "ns", "t", "x1")
        .await
        .expect("the same name in another catalog"));
}

pub async fn like_wildcards_in_names_are_literal(m: &dyn IcebergCatalog) {
    m.iceberg_create_table("weir", "my_ns.a", "t", "m1")
        .await
        .expect("create");
    assert_eq!(
        m.iceberg_namespace_properties("weir", "myXns")
            .await
            .expect("props"),
        None,
        "`_` is not a wildcard"
    );
    assert!(m
        .iceberg_namespace_properties("weir", "my_ns")
        .await
        .expect("props")
        .is_some());
}

pub async fn tables_are_renamed_and_dropped(m: &dyn IcebergCatalog) {
    m.iceberg_create_table("weir", "ns", "a", "ma")
        .await
        .expect("create");
    m.iceberg_create_table("weir", "ns", "b", "mb")
        .await
        .expect("create");
    assert_eq!(
        m.iceberg_rename_table("weir", ("ns", "a"), ("ns", "b"))
            .await
            .expect("rename"),
        TableRename::Exists
    );
    assert_eq!(
        m.iceberg_rename_table("weir", ("ns", "none"), ("ns", "c"))
            .await
            .expect("rename"),
        TableRename::NotFound
    );
    assert_eq!(
        m.iceberg_rename_table("weir", ("ns", "a"), ("other", "c"))
            .await
            .expect("rename"),
        TableRename::Renamed
    );
    let moved = m
        .iceberg_table("weir", "other", "c")
        .await
        .expect("read")
        .expect("there");
    assert_eq!(moved.metadata_location, "ma");
    assert_eq!(
        m.iceberg_table("weir", "ns", "a").await.expect("read"),
        None
    );
    assert!(m.iceberg_drop_table("weir", "ns", "b").await.expect("drop"));
    assert!(m
        .iceberg_tables("weir", "ns")
        .await
        .expect("list")
        .is_empty());
}
