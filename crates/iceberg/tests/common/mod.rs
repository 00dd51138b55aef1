//! What the Iceberg tests share: a catalog on a metadata store and an object store, and a
//! table's rows as (partition, offset).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use futures::TryStreamExt;
use iceberg::io::FileIOBuilder;
use iceberg::table::Table;
use weir_iceberg::catalog::SqlCatalog;
use weir_iceberg::storage::{WarehouseStorage, WarehouseStorageFactory};
use weir_meta::SqliteMetaStore;

pub const WAREHOUSE: &str = "s3://bucket/warehouse";

/// The catalog `weir` on `meta`, its warehouse in `store`.
pub fn catalog(
    meta: &Arc<SqliteMetaStore>,
    store: &Arc<dyn object_store::ObjectStore>,
) -> SqlCatalog {
    let storage = WarehouseStorage::new(WAREHOUSE, Arc::clone(store));
    let io = FileIOBuilder::new(Arc::new(WarehouseStorageFactory::new(storage))).build();
    SqlCatalog::new("weir", Arc::clone(meta) as _, io, WAREHOUSE)
}

/// (partition, offset) of every row of the table, by iceberg's own scan, sorted.
pub async fn scanned(table: &Table) -> Vec<(i32, i64)> {
    let batches: Vec<_> = table
        .scan()
        .select_all()
        .build()
        .expect("scan")
        .to_arrow()
        .await
        .expect("arrow")
        .try_collect()
        .await
        .expect("read");
    let mut out = Vec::new();
    for b in batches {
        let p = b.column(0).as_primitive::<Int32Type>();
        let o = b.column(1).as_primitive::<Int64Type>();
        out.extend((0..b.num_rows()).map(|i| (p.value(i), o.value(i))));
    }
    out.sort();
    out
}
