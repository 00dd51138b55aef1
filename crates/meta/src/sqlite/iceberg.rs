//! [`IcebergCatalog`] on SQLite.

use std::collections::BTreeMap;

use rusqlite::{params, Connection, OptionalExtension};

use super::{backend, SqliteMetaStore};
use crate::iceberg::{
    below, IcebergCatalog, IcebergTableRow, NamespaceDrop, TableRename, NAMESPACE_EXISTS_PROPERTY,
};
use crate::Result;

/// Rows of type TABLE (a row without a type was written before views existed).
const IS_TABLE: &str = "(iceberg_type = 'TABLE' OR iceberg_type IS NULL)";

fn namespace_exists(c: &Connection, catalog: &str, namespace: &str) -> Result<bool> {
    let under = below(namespace);
    c.query_row(
        &format!(
            "SELECT EXISTS (SELECT 1 FROM iceberg_namespace_properties WHERE catalog_name = ?1
                 AND (namespace = ?2 OR namespace LIKE ?3 ESCAPE '\\'))
             OR EXISTS (SELECT 1 FROM iceberg_tables WHERE catalog_name = ?1 AND {IS_TABLE}
                 AND (table_namespace = ?2 OR table_namespace LIKE ?3 ESCAPE '\\'))"
        ),
        params![catalog, namespace, under],
        |r| r.get(0),
    )
    .map_err(backend("looking up an Iceberg namespace"))
}

fn set_properties(
    c: &Connection,
    catalog: &str,
    namespace: &str,
    set: &BTreeMap<String, String>,
) -> Result<()> {
    for (k, v) in set {
        c.execute(
            "INSERT INTO iceberg_namespace_properties
                 (catalog_name, namespace, property_key, property_value) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (catalog_name, namespace, property_key)
             DO UPDATE SET property_value = excluded.property_value",
            params![catalog, namespace, k, v],
        )
        .map_err(backend("setting an Iceberg namespace property"))?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl IcebergCatalog for SqliteMetaStore {
    async fn iceberg_create_namespace(
        &self,
        catalog: &str,
        namespace: &str,
        properties: &BTreeMap<String, String>,
    ) -> Result<bool> {
        let (catalog, namespace) = (catalog.to_string(), namespace.to_string());
        let mut properties = properties.clone();
        if properties.is_empty() {
            properties.insert(NAMESPACE_EXISTS_PROPERTY.into(), "true".into());
        }
        self.with(move |c| {
            let tx = c
                .transaction()
                .map_err(backend("creating an Iceberg namespace"))?;
            if namespace_exists(&tx, &catalog, &namespace)? {
                return Ok(false);
            }
            set_properties(&tx, &catalog, &namespace, &properties)?;
            tx.commit()
                .map_err(backend("creating an Iceberg namespace"))?;
            Ok(true)
        })
        .await
    }

    async fn iceberg_namespaces(&self, catalog: &str) -> Result<Vec<String>> {
        let catalog = catalog.to_string();
        self.with(move |c| {
            let mut stmt = c
                .prepare_cached(&format!(
                    "SELECT namespace FROM iceberg_namespace_properties WHERE catalog_name = ?1
                     UNION
                     SELECT table_namespace FROM iceberg_tables WHERE catalog_name = ?1
                         AND {IS_TABLE}
                     ORDER BY 1"
                ))
                .map_err(backend("listing Iceberg namespaces"))?;
            let rows = stmt
                .query_map(params![catalog], |r| r.get(0))
                .map_err(backend("listing Iceberg namespaces"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("listing Iceberg namespaces"))
        })
        .await
    }

    async fn iceberg_namespace_properties(
        &self,
        catalog: &str,
        namespace: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        let (catalog, namespace) = (catalog.to_string(), namespace.to_string());
        self.with(move |c| {
            if !namespace_exists(c, &catalog, &namespace)? {
                return Ok(None);
            }
            let mut stmt = c
                .prepare_cached(
                    "SELECT property_key, property_value FROM iceberg_namespace_properties
                     WHERE catalog_name = ?1 AND namespace = ?2",
                )
                .map_err(backend("reading Iceberg namespace properties"))?;
            let rows = stmt
                .query_map(params![catalog, namespace], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(backend("reading Iceberg namespace properties"))?;
            rows.collect::<rusqlite::Result<BTreeMap<_, _>>>()
                .map(Some)
                .map_err(backend("reading Iceberg namespace properties"))
        })
        .await
    }

    async fn iceberg_update_namespace(
        &self,
        catalog: &str,
        namespace: &str,
        set: &BTreeMap<String, String>,
        remove: &[String],
    ) -> Result<bool> {
        let (catalog, namespace) = (catalog.to_string(), namespace.to_string());
        let (set, remove) = (set.clone(), remove.to_vec());
        self.with(move |c| {
            let tx = c
                .transaction()
                .map_err(backend("updating an Iceberg namespace"))?;
            if !namespace_exists(&tx, &catalog, &namespace)? {
                return Ok(false);
            }
            for k in &remove {
                tx.execute(
                    "DELETE FROM iceberg_namespace_properties
                     WHERE catalog_name = ?1 AND namespace = ?2 AND property_key = ?3",
                    params![catalog, namespace, k],
                )
                .map_err(backend("removing an Iceberg namespace property"))?;
            }
            set_properties(&tx, &catalog, &namespace, &set)?;
            tx.commit()
                .map_err(backend("updating an Iceberg namespace"))?;
            Ok(true)
        })
        .await
    }

    async fn iceberg_drop_namespace(
        &self,
        catalog: &str,
        namespace: &str,
    ) -> Result<NamespaceDrop> {
        let (catalog, namespace) = (catalog.to_string(), namespace.to_string());
        self.with(move |c| {
            let tx = c
                .transaction()
                .map_err(backend("dropping an Iceberg namespace"))?;
            if !namespace_exists(&tx, &catalog, &namespace)? {
                return Ok(NamespaceDrop::NotFound);
            }
            let tables: bool = tx
                .query_row(
                    &format!(
                        "SELECT EXISTS (SELECT 1 FROM iceberg_tables WHERE catalog_name = ?1
                             AND {IS_TABLE}
                             AND (table_namespace = ?2 OR table_namespace LIKE ?3 ESCAPE '\\'))"
                    ),
                    params![catalog, namespace, below(&namespace)],
                    |r| r.get(0),
                )
                .map_err(backend("dropping an Iceberg namespace"))?;
            if tables {
                return Ok(NamespaceDrop::NotEmpty);
            }
            tx.execute(
                "DELETE FROM iceberg_namespace_properties WHERE catalog_name = ?1 AND namespace = ?2",
                params![catalog, namespace],
            )
            .map_err(backend("dropping an Iceberg namespace"))?;
            tx.commit()
                .map_err(backend("dropping an Iceberg namespace"))?;
            Ok(NamespaceDrop::Dropped)
        })
        .await
    }

    async fn iceberg_create_table(
        &self,
        catalog: &str,
        namespace: &str,
        name: &str,
        metadata_location: &str,
    ) -> Result<bool> {
        let row = [catalog, namespace, name, metadata_location].map(str::to_string);
        self.with(move |c| {
            c.execute(
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name,
                     metadata_location, previous_metadata_location, iceberg_type)
                 VALUES (?1, ?2, ?3, ?4, NULL, 'TABLE')
                 ON CONFLICT (catalog_name, table_namespace, table_name) DO NOTHING",
                params![row[0], row[1], row[2], row[3]],
            )
            .map(|n| n > 0)
            .map_err(backend("creating an Iceberg table"))
        })
        .await
    }

    async fn iceberg_table(
        &self,
        catalog: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<IcebergTableRow>> {
        let key = [catalog, namespace, name].map(str::to_string);
        self.with(move |c| {
            c.query_row(
                &format!(
                    "SELECT metadata_location, previous_metadata_location FROM iceberg_tables
                     WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3
                         AND {IS_TABLE} AND metadata_location IS NOT NULL"
                ),
                params![key[0], key[1], key[2]],
                |r| {
                    Ok(IcebergTableRow {
                        namespace: key[1].clone(),
                        name: key[2].clone(),
                        metadata_location: r.get(0)?,
                        previous_metadata_location: r.get(1)?,
                    })
                },
            )
            .optional()
            .map_err(backend("reading an Iceberg table"))
        })
        .await
    }

    async fn iceberg_tables(&self, catalog: &str, namespace: &str) -> Result<Vec<String>> {
        let (catalog, namespace) = (catalog.to_string(), namespace.to_string());
        self.with(move |c| {
            let mut stmt = c
                .prepare_cached(&format!(
                    "SELECT table_name FROM iceberg_tables
                     WHERE catalog_name = ?1 AND table_namespace = ?2 AND {IS_TABLE}
                     ORDER BY table_name"
                ))
                .map_err(backend("listing Iceberg tables"))?;
            let rows = stmt
                .query_map(params![catalog, namespace], |r| r.get(0))
                .map_err(backend("listing Iceberg tables"))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(backend("listing Iceberg tables"))
        })
        .await
    }

    async fn iceberg_commit(
        &self,
        catalog: &str,
        namespace: &str,
        name: &str,
        expected: &str,
        new_location: &str,
    ) -> Result<bool> {
        let row = [catalog, namespace, name, expected, new_location].map(str::to_string);
        self.with(move |c| {
            c.execute(
                &format!(
                    "UPDATE iceberg_tables
                     SET metadata_location = ?5, previous_metadata_location = ?4
                     WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3
                         AND metadata_location = ?4 AND {IS_TABLE}"
                ),
                params![row[0], row[1], row[2], row[3], row[4]],
            )
            .map(|n| n > 0)
            .map_err(backend("committing to an Iceberg table"))
        })
        .await
    }

    async fn iceberg_drop_table(&self, catalog: &str, namespace: &str, name: &str) -> Result<bool> {
        let key = [catalog, namespace, name].map(str::to_string);
        self.with(move |c| {
            c.execute(
                &format!(
                    "DELETE FROM iceberg_tables
                     WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3
                         AND {IS_TABLE}"
                ),
                params![key[0], key[1], key[2]],
            )
            .map(|n| n > 0)
            .map_err(backend("dropping an Iceberg table"))
        })
        .await
    }

    async fn iceberg_rename_table(
        &self,
        catalog: &str,
        from: (&str, &str),
        to: (&str, &str),
    ) -> Result<TableRename> {
        let key = [catalog, from.0, from.1, to.0, to.1].map(str::to_string);
        self.with(move |c| {
            let tx = c
                .transaction()
                .map_err(backend("renaming an Iceberg table"))?;
            let taken: bool = tx
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM iceberg_tables WHERE catalog_name = ?1
                         AND table_namespace = ?2 AND table_name = ?3)",
                    params![key[0], key[3], key[4]],
                    |r| r.get(0),
                )
                .map_err(backend("renaming an Iceberg table"))?;
            if taken {
                return Ok(TableRename::Exists);
            }
            let moved = tx
                .execute(
                    &format!(
                        "UPDATE iceberg_tables SET table_namespace = ?4, table_name = ?5
                         WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3
                             AND {IS_TABLE}"
                    ),
                    params![key[0], key[1], key[2], key[3], key[4]],
                )
                .map_err(backend("renaming an Iceberg table"))?;
            if moved == 0 {
                return Ok(TableRename::NotFound);
            }
            tx.commit().map_err(backend("renaming an Iceberg table"))?;
            Ok(TableRename::Renamed)
        })
        .await
    }
}
