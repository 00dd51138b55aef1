//! [`IcebergCatalog`] on PostgreSQL. Namespace changes take a transaction-scoped advisory lock
//! on the namespace, so that two brokers creating the same one do not both succeed; a commit is
//! one UPDATE, whose WHERE is checked again on the locked row.

use std::collections::BTreeMap;

use tokio_postgres::GenericClient;

use super::{backend, in_tx, PostgresMetaStore};
use crate::iceberg::{
    below, IcebergCatalog, IcebergTableRow, NamespaceDrop, TableRename, NAMESPACE_EXISTS_PROPERTY,
};
use crate::Result;

/// Rows of type TABLE (a row without a type was written before views existed).
const IS_TABLE: &str = "(iceberg_type = 'TABLE' OR iceberg_type IS NULL)";

async fn lock_namespace(c: &impl GenericClient, catalog: &str, namespace: &str) -> Result<()> {
    c.execute(
        "SELECT pg_advisory_xact_lock(hashtext('iceberg-namespace:' || $1 || ':' || $2))",
        &[&catalog, &namespace],
    )
    .await
    .map_err(backend("locking an Iceberg namespace"))?;
    Ok(())
}

async fn namespace_exists(c: &impl GenericClient, catalog: &str, namespace: &str) -> Result<bool> {
    let under = below(namespace);
    let row = c
        .query_one(
            &format!(
                "SELECT EXISTS (SELECT 1 FROM iceberg_namespace_properties WHERE catalog_name = $1
                     AND (namespace = $2 OR namespace LIKE $3 ESCAPE '\\'))
                 OR EXISTS (SELECT 1 FROM iceberg_tables WHERE catalog_name = $1 AND {IS_TABLE}
                     AND (table_namespace = $2 OR table_namespace LIKE $3 ESCAPE '\\'))"
            ),
            &[&catalog, &namespace, &under],
        )
        .await
        .map_err(backend("looking up an Iceberg namespace"))?;
    Ok(row.get(0))
}

async fn set_properties(
    c: &impl GenericClient,
    catalog: &str,
    namespace: &str,
    set: &BTreeMap<String, String>,
) -> Result<()> {
    for (k, v) in set {
        c.execute(
            "INSERT INTO iceberg_namespace_properties
                 (catalog_name, namespace, property_key, property_value) VALUES ($1, $2, $3, $4)
             ON CONFLICT (catalog_name, namespace, property_key)
             DO UPDATE SET property_value = excluded.property_value",
            &[&catalog, &namespace, k, v],
        )
        .await
        .map_err(backend("setting an Iceberg namespace property"))?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl IcebergCatalog for PostgresMetaStore {
    async fn iceberg_create_namespace(
        &self,
        catalog: &str,
        namespace: &str,
        properties: &BTreeMap<String, String>,
    ) -> Result<bool> {
        let mut properties = properties.clone();
        if properties.is_empty() {
            properties.insert(NAMESPACE_EXISTS_PROPERTY.into(), "true".into());
        }
        in_tx!(self, |tx| {
            lock_namespace(&tx, catalog, namespace).await?;
            if namespace_exists(&tx, catalog, namespace).await? {
                return Ok(false);
            }
            set_properties(&tx, catalog, namespace, &properties).await?;
            Ok(true)
        })
    }

    async fn iceberg_namespaces(&self, catalog: &str) -> Result<Vec<String>> {
        let c = self.client().await?;
        let rows = c
            .query(
                &format!(
                    "SELECT ns FROM (
                         SELECT namespace AS ns FROM iceberg_namespace_properties
                         WHERE catalog_name = $1
                         UNION
                         SELECT table_namespace FROM iceberg_tables WHERE catalog_name = $1
                             AND {IS_TABLE}
                     ) AS u ORDER BY ns COLLATE \"C\""
                ),
                &[&catalog],
            )
            .await
            .map_err(backend("listing Iceberg namespaces"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn iceberg_namespace_properties(
        &self,
        catalog: &str,
        namespace: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        let c = self.client().await?;
        if !namespace_exists(&*c, catalog, namespace).await? {
            return Ok(None);
        }
        let rows = c
            .query(
                "SELECT property_key, property_value FROM iceberg_namespace_properties
                 WHERE catalog_name = $1 AND namespace = $2",
                &[&catalog, &namespace],
            )
            .await
            .map_err(backend("reading Iceberg namespace properties"))?;
        Ok(Some(rows.iter().map(|r| (r.get(0), r.get(1))).collect()))
    }

    async fn iceberg_update_namespace(
        &self,
        catalog: &str,
        namespace: &str,
        set: &BTreeMap<String, String>,
        remove: &[String],
    ) -> Result<bool> {
        in_tx!(self, |tx| {
            lock_namespace(&tx, catalog, namespace).await?;
            if !namespace_exists(&tx, catalog, namespace).await? {
                return Ok(false);
            }
            for k in remove {
                tx.execute(
                    "DELETE FROM iceberg_namespace_properties
                     WHERE catalog_name = $1 AND namespace = $2 AND property_key = $3",
                    &[&catalog, &namespace, k],
                )
                .await
                .map_err(backend("removing an Iceberg namespace property"))?;
            }
            set_properties(&tx, catalog, namespace, set).await?;
            Ok(true)
        })
    }

    async fn iceberg_drop_namespace(
        &self,
        catalog: &str,
        namespace: &str,
    ) -> Result<NamespaceDrop> {
        in_tx!(self, |tx| {
            lock_namespace(&tx, catalog, namespace).await?;
            if !namespace_exists(&tx, catalog, namespace).await? {
                return Ok(NamespaceDrop::NotFound);
            }
            let row = tx
                .query_one(
                    &format!(
                        "SELECT EXISTS (SELECT 1 FROM iceberg_tables WHERE catalog_name = $1
                             AND {IS_TABLE}
                             AND (table_namespace = $2 OR table_namespace LIKE $3 ESCAPE '\\'))"
                    ),
                    &[&catalog, &namespace, &below(namespace)],
                )
                .await
                .map_err(backend("dropping an Iceberg namespace"))?;
            if row.get::<_, bool>(0) {
                return Ok(NamespaceDrop::NotEmpty);
            }
            tx.execute(
                "DELETE FROM iceberg_namespace_properties WHERE catalog_name = $1 AND namespace = $2",
                &[&catalog, &namespace],
            )
            .await
            .map_err(backend("dropping an Iceberg namespace"))?;
            Ok(NamespaceDrop::Dropped)
        })
    }

    async fn iceberg_create_table(
        &self,
        catalog: &str,
        namespace: &str,
        name: &str,
        metadata_location: &str,
    ) -> Result<bool> {
        let c = self.client().await?;
        let n = c
            .execute(
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name,
                     metadata_location, previous_metadata_location, iceberg_type)
                 VALUES ($1, $2, $3, $4, NULL, 'TABLE')
                 ON CONFLICT (catalog_name, table_namespace, table_name) DO NOTHING",
                &[&catalog, &namespace, &name, &metadata_location],
            )
            .await
            .map_err(backend("creating an Iceberg table"))?;
        Ok(n > 0)
    }

    async fn iceberg_table(
        &self,
        catalog: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<IcebergTableRow>> {
        let c = self.client().await?;
        let row = c
            .query_opt(
                &format!(
                    "SELECT metadata_location, previous_metadata_location FROM iceberg_tables
                     WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3
                         AND {IS_TABLE} AND metadata_location IS NOT NULL"
                ),
                &[&catalog, &namespace, &name],
            )
            .await
            .map_err(backend("reading an Iceberg table"))?;
        Ok(row.map(|r| IcebergTableRow {
            namespace: namespace.to_string(),
            name: name.to_string(),
            metadata_location: r.get(0),
            previous_metadata_location: r.get(1),
        }))
    }

    async fn iceberg_tables(&self, catalog: &str, namespace: &str) -> Result<Vec<String>> {
        let c = self.client().await?;
        let rows = c
            .query(
                &format!(
                    "SELECT table_name FROM iceberg_tables
                     WHERE catalog_name = $1 AND table_namespace = $2 AND {IS_TABLE}
                     ORDER BY table_name COLLATE \"C\""
                ),
                &[&catalog, &namespace],
            )
            .await
            .map_err(backend("listing Iceberg tables"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn iceberg_commit(
        &self,
        catalog: &str,
        namespace: &str,
        name: &str,
        expected: &str,
        new_location: &str,
    ) -> Result<bool> {
        let c = self.client().await?;
        let n = c
            .execute(
                &format!(
                    "UPDATE iceberg_tables
                     SET metadata_location = $5, previous_metadata_location = $4
                     WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3
                         AND metadata_location = $4 AND {IS_TABLE}"
                ),
                &[&catalog, &namespace, &name, &expected, &new_location],
            )
            .await
            .map_err(backend("committing to an Iceberg table"))?;
        Ok(n > 0)
    }

    async fn iceberg_drop_table(&self, catalog: &str, namespace: &str, name: &str) -> Result<bool> {
        let c = self.client().await?;
        let n = c
            .execute(
                &format!(
                    "DELETE FROM iceberg_tables
                     WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3
                         AND {IS_TABLE}"
                ),
                &[&catalog, &namespace, &name],
            )
            .await
            .map_err(backend("dropping an Iceberg table"))?;
        Ok(n > 0)
    }

    async fn iceberg_rename_table(
        &self,
        catalog: &str,
        from: (&str, &str),
        to: (&str, &str),
    ) -> Result<TableRename> {
        in_tx!(self, |tx| {
            let taken = tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM iceberg_tables WHERE catalog_name = $1
                         AND table_namespace = $2 AND table_name = $3)",
                    &[&catalog, &to.0, &to.1],
                )
                .await
                .map_err(backend("renaming an Iceberg table"))?;
            if taken.get::<_, bool>(0) {
                return Ok(TableRename::Exists);
            }
            let moved = tx
                .execute(
                    &format!(
                        "UPDATE iceberg_tables SET table_namespace = $4, table_name = $5
                         WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3
                             AND {IS_TABLE}"
                    ),
                    &[&catalog, &from.0, &from.1, &to.0, &to.1],
                )
                .await
                .map_err(backend("renaming an Iceberg table"))?;
            Ok(if moved == 0 {
                TableRename::NotFound
            } else {
                TableRename::Renamed
            })
        })
    }
}
