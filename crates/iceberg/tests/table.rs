//! A table in the SQL catalog on a real metadata store (SQLite), files in an object store:
//! records appended with their progress, read back by iceberg's own scan, and commits made on a
//! table that moved refused, so no record is written twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use iceberg::table::Table;
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableCreation, TableIdent};
use weir_iceberg::append;
use weir_iceberg::catalog::SqlCatalog;
use weir_iceberg::key_value::{self, Row};
use weir_iceberg::progress::{self, Progress};
use weir_meta::SqliteMetaStore;

mod common;
use common::scanned;

fn catalog(meta: Arc<SqliteMetaStore>, store: Arc<dyn object_store::ObjectStore>) -> SqlCatalog {
    common::catalog(&meta, &store)
}

fn rows(partition: i32, offsets: std::ops::Range<i64>) -> Vec<Row> {
    offsets
        .map(|o| Row {
            partition,
            offset: o,
            // An hour apart: the hourly spec puts them in different partitions.
            timestamp_ms: 1_700_000_000_000 + o * 3_600_000,
            key: Some(Bytes::from(format!("k{o}"))),
            value: Some(Bytes::from(format!("v{partition}-{o}"))),
            headers: vec![("h".into(), Some(Bytes::from_static(b"x")))],
        })
        .collect()
}

async fn append_rows(
    c: &SqlCatalog,
    table: &Table,
    rows: &[Row],
    p: &Progress,
) -> iceberg::Result<Table> {
    let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(
        table.metadata().current_schema(),
    )?);
    let batch = key_value::batch(&arrow, rows)?;
    let files = append::write_files(
        table,
        std::iter::once(Ok(batch)),
        &format!("test-{}", next_prefix()),
    )
    .await?;
    append::commit(c, table, files, p).await
}

fn next_prefix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

async fn new_table(c: &SqlCatalog) -> Table {
    let ns = NamespaceIdent::new("weir".into());
    c.create_namespace(&ns, HashMap::new())
        .await
        .expect("namespace");
    c.create_table(
        &ns,
        TableCreation::builder()
            .name("orders".into())
            .schema(key_value::schema().expect("schema"))
            .partition_spec(key_value::hourly().expect("spec"))
            .build(),
    )
    .await
    .expect("table")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_appended_with_their_offsets_and_read_back() {
    let meta = Arc::new(SqliteMetaStore::in_memory().expect("meta"));
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let c = catalog(Arc::clone(&meta), store);
    let table = new_table(&c).await;
    assert!(table
        .metadata_location()
        .expect("location")
        .starts_with("s3://bucket/warehouse/weir/orders/metadata/"));

    let first = progress::committed(&table.metadata_ref(), "c1", "t1");
    assert_eq!(first.parent, None);
    assert!(first.offsets.is_empty());
    let mut rows0 = rows(0, 0..3);
    rows0.extend(rows(1, 0..2));
    let p = Progress {
        offsets: BTreeMap::from([(0, 3), (1, 2)]),
        ..first
    };
    append_rows(&c, &table, &rows0, &p).await.expect("append");

    let table = c
        .load_table(&TableIdent::from_strs(["weir", "orders"]).expect("ident"))
        .await
        .expect("load");
    let now = progress::committed(&table.metadata_ref(), "c1", "t1");
    assert_eq!(now.offsets, BTreeMap::from([(0, 3), (1, 2)]));
    assert_eq!(now.parent, table.metadata().current_snapshot_id());
    assert!(
        progress::committed(&table.metadata_ref(), "c1", "another-topic")
            .offsets
            .is_empty(),
        "another topic's progress is not this one's"
    );
    assert_eq!(
        scanned(&table).await,
        vec![(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    );
    let files: Vec<_> = table
        .scan()
        .build()
        .expect("scan")
        .plan_files()
        .await
        .expect("plan")
        .try_collect()
        .await
        .expect("files");
    assert_eq!(
        files.len(),
        3,
        "one file per hour: offsets 0, 1 and 2 are hours apart"
    );

    // The next batch, from the offsets the table has.
    let p = Progress {
        offsets: BTreeMap::from([(0, 5), (1, 2)]),
        ..now
    };
    let table = append_rows(&c, &table, &rows(0, 3..5), &p)
        .await
        .expect("append");
    assert_eq!(scanned(&table).await.len(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_from_offsets_read_before_another_commit_is_refused() {
    let meta = Arc::new(SqliteMetaStore::in_memory().expect("meta"));
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    // Two brokers (two catalogs on the same store): an old leader of partition 0 and its
    // successor, both reading the table's offsets before either commits.
    let old = catalog(Arc::clone(&meta), Arc::clone(&store));
    let new = catalog(Arc::clone(&meta), store);
    let table = new_table(&old).await;
    let read_by_old = progress::committed(&table.metadata_ref(), "c1", "t1");
    let read_by_new = read_by_old.clone();

    let p = Progress {
        offsets: BTreeMap::from([(0, 3)]),
        ..read_by_new
    };
    append_rows(&new, &table, &rows(0, 0..3), &p)
        .await
        .expect("the successor commits");

    let p = Progress {
        offsets: BTreeMap::from([(0, 2)]),
        ..read_by_old
    };
    // The old leader's table is stale: iceberg's transaction would reload it and apply the
    // append on the new snapshot; built on the table it read (pinned), the append's own
    // requirement fails at the catalog, and not as retryable.
    let e = append_rows(&old, &table, &rows(0, 0..2), &p)
        .await
        .expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::CatalogCommitConflicts, "{e}");
    assert!(!e.retryable());
    assert!(e.to_string().contains("Requirement failed"), "{e}");

    let table = new
        .load_table(&TableIdent::from_strs(["weir", "orders"]).expect("ident"))
        .await
        .expect("load");
    assert_eq!(
        scanned(&table).await,
        vec![(0, 0), (0, 1), (0, 2)],
        "each record once"
    );
    assert_eq!(
        progress::committed(&table.metadata_ref(), "c1", "t1").offsets,
        BTreeMap::from([(0, 3)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_errors_are_iceberg_kinds() {
    let meta = Arc::new(SqliteMetaStore::in_memory().expect("meta"));
    let c = catalog(meta, Arc::new(object_store::memory::InMemory::new()));
    let ns = NamespaceIdent::new("weir".into());
    let ident = TableIdent::new(ns.clone(), "none".into());
    assert_eq!(
        c.load_table(&ident).await.expect_err("none").kind(),
        ErrorKind::TableNotFound
    );
    assert_eq!(
        c.list_tables(&ns).await.expect_err("no namespace").kind(),
        ErrorKind::NamespaceNotFound
    );
    new_table(&c).await;
    assert_eq!(
        c.create_namespace(&ns, HashMap::new())
            .await
            .expect_err("twice")
            .kind(),
        ErrorKind::NamespaceAlreadyExists
    );
    let again = c
        .create_table(
            &ns,
            TableCreation::builder()
                .name("orders".into())
                .schema(key_value::schema().expect("schema"))
                .build(),
        )
        .await
        .expect_err("twice");
    assert_eq!(again.kind(), ErrorKind::TableAlreadyExists);
    assert_eq!(
        c.list_namespaces(None).await.expect("list"),
        vec![ns.clone()]
    );
    assert_eq!(
        c.list_tables(&ns).await.expect("list"),
        vec![TableIdent::new(ns.clone(), "orders".into())]
    );
    assert!(c.drop_namespace(&ns).await.is_err(), "it has a table");
}
