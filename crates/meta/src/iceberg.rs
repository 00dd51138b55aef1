//! An Iceberg SQL catalog in the metadata store: the two tables of the JDBC catalog
//! (`iceberg_tables`, `iceberg_namespace_properties`), with the columns and meanings that
//! Iceberg's Java `JdbcCatalog`, pyiceberg's `SqlCatalog` and iceberg-rust's SQL catalog share,
//! in the same database as the rest of the store. So a table Weir writes is read by any of
//! them pointed at the store's SQLite file or PostgreSQL database, with no catalog service.
//!
//! The store keeps the rows only; what a table is (its metadata file in object storage) is the
//! caller's. A commit is a compare-and-set of a table's `metadata_location`, as in every JDBC
//! catalog: it succeeds only if the table still points at the metadata the caller started from,
//! so two writers (two brokers, or Weir and Spark) never both win. Rows of other catalog names
//! are another catalog's and never seen.
//!
//! Namespaces are levels joined with `.`; a namespace exists while it has a property row or a
//! table in it or below it, as the JDBC catalogs decide. Tables are of type `TABLE` (rows of
//! type `VIEW` are another client's and not seen as tables).

use std::collections::BTreeMap;

use crate::Result;

/// One table's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcebergTableRow {
    pub namespace: String,
    pub name: String,
    /// The table's current metadata file.
    pub metadata_location: String,
    /// The one before (`None` for a table never committed to since its creation).
    pub previous_metadata_location: Option<String>,
}

/// What dropping a namespace did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespaceDrop {
    Dropped,
    NotFound,
    /// It still holds tables (or namespaces below it with tables).
    NotEmpty,
}

/// What renaming a table did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableRename {
    Renamed,
    /// No table of that name.
    NotFound,
    /// The new name is taken.
    Exists,
}

/// The property the JDBC catalogs write for a namespace created without properties, so that
/// it has a row.
pub const NAMESPACE_EXISTS_PROPERTY: &str = "exists";

/// The Iceberg SQL catalog's part of the store; `catalog` is the catalog's name as clients
/// configure it (`SqlCatalog("weir", ...)`, Spark's `spark.sql.catalog.weir`).
#[async_trait::async_trait]
pub trait IcebergCatalog: Send + Sync + 'static {
    /// Creates `namespace` with `properties` (none: the `exists = true` row); false if it
    /// exists already (nothing changed).
    async fn iceberg_create_namespace(
        &self,
        catalog: &str,
        namespace: &str,
        properties: &BTreeMap<String, String>,
    ) -> Result<bool>;

    /// Every namespace with a property row or a table, sorted (the levels a table's namespace
    /// implies are not listed unless they have rows of their own).
    async fn iceberg_namespaces(&self, catalog: &str) -> Result<Vec<String>>;

    /// A namespace's properties; `None` if it does not exist.
    async fn iceberg_namespace_properties(
        &self,
        catalog: &str,
        namespace: &str,
    ) -> Result<Option<BTreeMap<String, String>>>;

    /// Sets `set` and removes `remove` among a namespace's properties in one transaction;
    /// false if the namespace does not exist (nothing changed).
    async fn iceberg_update_namespace(
        &self,
        catalog: &str,
        namespace: &str,
        set: &BTreeMap<String, String>,
        remove: &[String],
    ) -> Result<bool>;

    /// Drops a namespace with no tables in it or below it.
    async fn iceberg_drop_namespace(&self, catalog: &str, namespace: &str)
        -> Result<NamespaceDrop>;

    /// Adds a table pointing at `metadata_location`; false if the name is taken (nothing
    /// changed). The caller wrote the metadata file first.
    async fn iceberg_create_table(
        &self,
        catalog: &str,
        namespace: &str,
        name: &str,
        metadata_location: &str,
    ) -> Result<bool>;

    /// A table's row, if it exists.
    async fn iceberg_table(
        &self,
        catalog: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<IcebergTableRow>>;

    /// The tables of a namespace (not of those below it), sorted.
    async fn iceberg_tables(&self, catalog: &str, namespace: &str) -> Result<Vec<String>>;

    /// Points the table at `new_location` if it still points at `expected`, keeping `expected`
    /// as the previous location; false if it moved or is gone (nothing changed).
    async fn iceberg_commit(
        &self,
        catalog: &str,
        namespace: &str,
        name: &str,
        expected: &str,
        new_location: &str,
    ) -> Result<bool>;

    /// Removes a table's row (its files are the caller's); false if there was none.
    async fn iceberg_drop_table(&self, catalog: &str, namespace: &str, name: &str) -> Result<bool>;

    /// Gives a table another namespace and name, keeping its metadata.
    async fn iceberg_rename_table(
        &self,
        catalog: &str,
        from: (&str, &str),
        to: (&str, &str),
    ) -> Result<TableRename>;
}

/// The LIKE pattern (escape `\`) of every namespace below `namespace`: its name, a dot, any
/// rest, with LIKE's wildcards in the name taken literally (topic names hold `_`).
pub(crate) fn below(namespace: &str) -> String {
    let mut p = String::with_capacity(namespace.len() + 2);
    for ch in namespace.chars() {
        if matches!(ch, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(ch);
    }
    p.push_str(".%");
    p
}

#[cfg(test)]
mod tests {
    #[test]
    fn namespaces_below_take_like_wildcards_literally() {
        assert_eq!(super::below("a"), "a.%");
        assert_eq!(super::below("my_ns.x%"), "my\\_ns.x\\%.%");
    }
}
