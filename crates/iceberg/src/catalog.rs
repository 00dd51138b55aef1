//! An Iceberg SQL catalog on Weir's metadata store ([`weir_meta::IcebergCatalog`]: the JDBC
//! catalogs' two tables), with files in the warehouse. iceberg-rust's own SQL catalog cannot be
//! used: it brings sqlx, whose SQLite library clashes with the store's (one `links = "sqlite3"`
//! per build), and a second connection pool beside the store's.
//!
//! What differs from the JDBC catalogs: a commit that conflicts is not retryable. iceberg's
//! `Transaction::commit` retries a retryable conflict by applying the same actions, with the
//! same snapshot properties, to the table as it is now; for a translator's commit those
//! properties are offsets read from the table as it was (see [`crate::progress`]). So a commit
//! whose snapshot names, in its progress record, a parent that is not the table's current
//! snapshot is refused too, even when the transaction rebased it silently on a newer table.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::spec::{TableMetadata, TableMetadataBuilder};
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Result, Runtime,
    TableCommit, TableCreation, TableIdent, TableUpdate,
};
use weir_meta::{IcebergCatalog, NamespaceDrop, TableRename};

use crate::progress::Progress;

/// The namespace property that places a namespace's tables somewhere else than under the
/// warehouse.
const LOCATION_PROPERTY: &str = "location";

/// A catalog named `name` (what clients call it: `SqlCatalog("weir", ...)`).
pub struct SqlCatalog {
    name: String,
    store: Arc<dyn IcebergCatalog>,
    file_io: FileIO,
    warehouse: String,
}

impl std::fmt::Debug for SqlCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlCatalog")
            .field("name", &self.name)
            .field("warehouse", &self.warehouse)
            .finish_non_exhaustive()
    }
}

fn meta_error(e: weir_meta::MetaError) -> Error {
    Error::new(ErrorKind::Unexpected, format!("the metadata store: {e}"))
        .with_retryable(true)
        .with_source(e)
}

fn no_namespace(namespace: &NamespaceIdent) -> Error {
    Error::new(
        ErrorKind::NamespaceNotFound,
        format!("no such namespace: {namespace}"),
    )
}

fn no_table(ident: &TableIdent) -> Error {
    Error::new(ErrorKind::TableNotFound, format!("no such table: {ident}"))
}

fn joined(namespace: &NamespaceIdent) -> String {
    namespace.join(".")
}

impl SqlCatalog {
    pub fn new(
        name: &str,
        store: Arc<dyn IcebergCatalog>,
        file_io: FileIO,
        warehouse: &str,
    ) -> SqlCatalog {
        SqlCatalog {
            name: name.to_string(),
            store,
            file_io,
            warehouse: warehouse.trim_end_matches('/').to_string(),
        }
    }

    pub fn file_io(&self) -> &FileIO {
        &self.file_io
    }

    fn table(
        &self,
        ident: &TableIdent,
        location: String,
        metadata: TableMetadata,
    ) -> Result<Table> {
        Table::builder()
            .file_io(self.file_io.clone())
            .identifier(ident.clone())
            .metadata_location(location)
            .metadata(metadata)
            .runtime(Runtime::try_current()?)
            .build()
    }

    /// The table's row, or TableNotFound.
    async fn row(&self, ident: &TableIdent) -> Result<weir_meta::IcebergTableRow> {
        self.store
            .iceberg_table(&self.name, &joined(ident.namespace()), ident.name())
            .await
            .map_err(meta_error)?
            .ok_or_else(|| no_table(ident))
    }

    async fn require_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        if self.namespace_exists(namespace).await? {
            Ok(())
        } else {
            Err(no_namespace(namespace))
        }
    }
}

/// Refuses a commit whose progress record was read from another snapshot than the one it
/// lands on (see the module's doc).
impl SqlCatalog {
    /// Deletes the metadata files a commit took out of the table's log, if the table asks for
    /// it (`write.metadata.delete-after-commit.enabled`, as Java's catalogs do): the log keeps
    /// `write.metadata.previous-versions-max` of them.
    async fn drop_old_metadata(&self, before: &TableMetadata, base: &str, after: &TableMetadata) {
        let enabled = after
            .properties()
            .get("write.metadata.delete-after-commit.enabled")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if !enabled {
            return;
        }
        let kept: std::collections::HashSet<&str> = after
            .metadata_log()
            .iter()
            .map(|l| l.metadata_file.as_str())
            .collect();
        let old = before
            .metadata_log()
            .iter()
            .map(|l| l.metadata_file.as_str())
            .chain([base]);
        for file in old.filter(|f| !kept.contains(f)) {
            if let Err(e) = self.file_io.delete(file).await {
                tracing::debug!(%file, error = %e, "iceberg: an old metadata file not deleted");
            }
        }
    }
}

fn check_progress(current: &TableMetadata, updates: &[TableUpdate]) -> Result<()> {
    for u in updates {
        let TableUpdate::AddSnapshot { snapshot } = u else {
            continue;
        };
        let Some(p) = Progress::of(&Arc::new(snapshot.clone())) else {
            continue;
        };
        if p.parent != current.current_snapshot_id() {
            return Err(Error::new(
                ErrorKind::CatalogCommitConflicts,
                format!(
                    "the table moved since its offsets were read (read at snapshot {:?}, now at {:?})",
                    p.parent,
                    current.current_snapshot_id()
                ),
            )
            .with_retryable(false));
        }
    }
    Ok(())
}

#[async_trait]
impl Catalog for SqlCatalog {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        let all = self
            .store
            .iceberg_namespaces(&self.name)
            .await
            .map_err(meta_error)?;
        let depth = parent.map_or(0, |p| p.len());
        let mut out: Vec<Vec<String>> = Vec::new();
        for ns in all {
            let levels: Vec<String> = ns.split('.').map(str::to_string).collect();
            let under = parent.is_none_or(|p| levels.len() > depth && levels[..depth] == p[..]);
            if under && levels.len() > depth {
                let child = levels[..=depth].to_vec();
                if !out.contains(&child) {
                    out.push(child);
                }
            }
        }
        out.into_iter().map(NamespaceIdent::from_vec).collect()
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        let sorted: BTreeMap<String, String> = properties.clone().into_iter().collect();
        let created = self
            .store
            .iceberg_create_namespace(&self.name, &joined(namespace), &sorted)
            .await
            .map_err(meta_error)?;
        if !created {
            return Err(Error::new(
                ErrorKind::NamespaceAlreadyExists,
                format!("namespace {namespace} exists"),
            ));
        }
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        let props = self
            .store
            .iceberg_namespace_properties(&self.name, &joined(namespace))
            .await
            .map_err(meta_error)?
            .ok_or_else(|| no_namespace(namespace))?;
        Ok(Namespace::with_properties(
            namespace.clone(),
            props.into_iter().collect(),
        ))
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        Ok(self
            .store
            .iceberg_namespace_properties(&self.name, &joined(namespace))
            .await
            .map_err(meta_error)?
            .is_some())
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        let set: BTreeMap<String, String> = properties.into_iter().collect();
        let updated = self
            .store
            .iceberg_update_namespace(&self.name, &joined(namespace), &set, &[])
            .await
            .map_err(meta_error)?;
        if !updated {
            return Err(no_namespace(namespace));
        }
        Ok(())
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        match self
            .store
            .iceberg_drop_namespace(&self.name, &joined(namespace))
            .await
            .map_err(meta_error)?
        {
            NamespaceDrop::Dropped => Ok(()),
            NamespaceDrop::NotFound => Err(no_namespace(namespace)),
            NamespaceDrop::NotEmpty => Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!("namespace {namespace} still has tables"),
            )),
        }
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        self.require_namespace(namespace).await?;
        let names = self
            .store
            .iceberg_tables(&self.name, &joined(namespace))
            .await
            .map_err(meta_error)?;
        Ok(names
            .into_iter()
            .map(|n| TableIdent::new(namespace.clone(), n))
            .collect())
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        let ns = self.get_namespace(namespace).await?;
        let ident = TableIdent::new(namespace.clone(), creation.name.clone());
        let location = match &creation.location {
            Some(l) => l.clone(),
            None => {
                let base = ns
                    .properties()
                    .get(LOCATION_PROPERTY)
                    .map(|l| l.trim_end_matches('/').to_string())
                    .unwrap_or_else(|| format!("{}/{}", self.warehouse, namespace.join("/")));
                format!("{base}/{}", ident.name())
            }
        };
        let creation = TableCreation {
            location: Some(location.clone()),
            ..creation
        };
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let at = MetadataLocation::new_with_metadata(location, &metadata);
        metadata.write_to(&self.file_io, &at).await?;
        let at = at.to_string();
        let created = self
            .store
            .iceberg_create_table(&self.name, &joined(namespace), ident.name(), &at)
            .await
            .map_err(meta_error)?;
        if !created {
            // The metadata file written above is left behind, as the JDBC catalogs leave it.
            return Err(Error::new(
                ErrorKind::TableAlreadyExists,
                format!("table {ident} exists"),
            ));
        }
        self.table(&ident, at, metadata)
    }

    async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        let row = self.row(ident).await?;
        let metadata = TableMetadata::read_from(&self.file_io, &row.metadata_location).await?;
        self.table(ident, row.metadata_location, metadata)
    }

    async fn drop_table(&self, ident: &TableIdent) -> Result<()> {
        let dropped = self
            .store
            .iceberg_drop_table(&self.name, &joined(ident.namespace()), ident.name())
            .await
            .map_err(meta_error)?;
        if !dropped {
            return Err(no_table(ident));
        }
        Ok(())
    }

    async fn purge_table(&self, ident: &TableIdent) -> Result<()> {
        let table = self.load_table(ident).await?;
        self.drop_table(ident).await?;
        iceberg::drop_table_data(&table).await
    }

    async fn table_exists(&self, ident: &TableIdent) -> Result<bool> {
        Ok(self
            .store
            .iceberg_table(&self.name, &joined(ident.namespace()), ident.name())
            .await
            .map_err(meta_error)?
            .is_some())
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        self.require_namespace(dest.namespace()).await?;
        let from = joined(src.namespace());
        let to = joined(dest.namespace());
        match self
            .store
            .iceberg_rename_table(&self.name, (&from, src.name()), (&to, dest.name()))
            .await
            .map_err(meta_error)?
        {
            TableRename::Renamed => Ok(()),
            TableRename::NotFound => Err(no_table(src)),
            TableRename::Exists => Err(Error::new(
                ErrorKind::TableAlreadyExists,
                format!("table {dest} exists"),
            )),
        }
    }

    async fn register_table(&self, ident: &TableIdent, metadata_location: String) -> Result<Table> {
        self.require_namespace(ident.namespace()).await?;
        let metadata = TableMetadata::read_from(&self.file_io, &metadata_location).await?;
        let created = self
            .store
            .iceberg_create_table(
                &self.name,
                &joined(ident.namespace()),
                ident.name(),
                &metadata_location,
            )
            .await
            .map_err(meta_error)?;
        if !created {
            return Err(Error::new(
                ErrorKind::TableAlreadyExists,
                format!("table {ident} exists"),
            ));
        }
        self.table(ident, metadata_location, metadata)
    }

    async fn update_table(&self, mut commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        let current = self.load_table(&ident).await?;
        let base = current.metadata_location_result()?.to_string();
        let requirements = commit.take_requirements();
        let updates = commit.take_updates();
        for r in &requirements {
            r.check(Some(current.metadata()))
                .map_err(|e| e.with_retryable(false))?;
        }
        check_progress(current.metadata(), &updates)?;
        let mut builder = current.metadata().clone().into_builder(Some(base.clone()));
        for u in updates {
            builder = u.apply(builder)?;
        }
        let metadata = builder.build()?.metadata;
        let at = MetadataLocation::from_str(&base)?
            .with_next_version()
            .with_new_metadata(&metadata);
        metadata.write_to(&self.file_io, &at).await?;
        let at = at.to_string();
        let moved = self
            .store
            .iceberg_commit(
                &self.name,
                &joined(ident.namespace()),
                ident.name(),
                &base,
                &at,
            )
            .await
            .map_err(meta_error)?;
        if !moved {
            return Err(Error::new(
                ErrorKind::CatalogCommitConflicts,
                format!("table {ident} changed while committing"),
            )
            .with_retryable(false));
        }
        self.drop_old_metadata(current.metadata(), &base, &metadata)
            .await;
        self.table(&ident, at, metadata)
    }
}
