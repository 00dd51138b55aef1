//! Records into a table: Parquet data files, split by the table's partition spec, committed in
//! one fast append whose snapshot carries the progress record.

use std::collections::HashMap;

use arrow_array::RecordBatch;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::{DataFile, DataFileFormat};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::partitioning::PartitioningWriter;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use iceberg::{
    Catalog, ErrorKind, Namespace, NamespaceIdent, Result, TableCommit, TableCreation, TableIdent,
};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::progress::{Progress, PROPERTY};

/// Data files roll over at this size: large enough for a query engine to read efficiently
/// (Iceberg's own default is 512 MiB; Athena and Trino do well from about 128 MiB), small enough
/// that a translator's batch (bounded by the topic's target lag) rarely makes more than one.
pub const TARGET_FILE_BYTES: usize = 128 << 20;

/// Writes `batches` (of the table's current schema, in Arrow form, made one at a time so a
/// cycle's rows are never all in Arrow form at once) as data files named `<prefix>-<n>.parquet`
/// under the table's data location, split by its partition spec.
pub async fn write_files(
    table: &Table,
    batches: impl Iterator<Item = Result<RecordBatch>>,
    prefix: &str,
) -> Result<Vec<DataFile>> {
    let mut batches = batches.peekable();
    if batches.peek().is_none() {
        return Ok(Vec::new());
    }
    let metadata = table.metadata();
    let schema = metadata.current_schema().clone();
    let parquet = ParquetWriterBuilder::new(
        WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build(),
        schema.clone(),
    );
    let rolling = RollingFileWriterBuilder::new(
        parquet,
        TARGET_FILE_BYTES,
        table.file_io().clone(),
        DefaultLocationGenerator::new(metadata)?,
        DefaultFileNameGenerator::new(prefix.to_string(), None, DataFileFormat::Parquet),
    );
    let files = DataFileWriterBuilder::new(rolling);
    let spec = metadata.default_partition_spec().clone();
    if spec.is_unpartitioned() {
        let mut w = files.build(None).await?;
        for batch in batches {
            w.write(batch?).await?;
        }
        return w.close().await;
    }
    let splitter = RecordBatchPartitionSplitter::try_new_with_computed_values(schema, spec)?;
    let mut fanout = FanoutWriter::new(files);
    for batch in batches {
        for (key, part) in splitter.split(&batch?)? {
            fanout.write(key, part).await?;
        }
    }
    fanout.close().await
}

/// Commits `files` to `table` in one fast append whose snapshot carries `progress`, on
/// `table` as it is here: if the catalog's table moved since, the commit is refused
/// (`CatalogCommitConflicts`), never rebased (see [`Pinned`]).
pub async fn commit(
    catalog: &dyn Catalog,
    table: &Table,
    files: Vec<DataFile>,
    progress: &Progress,
) -> Result<Table> {
    let pinned = Pinned {
        inner: catalog,
        table,
    };
    let tx = Transaction::new(table);
    let append = tx
        .fast_append()
        // Weir never adds a file twice (its names are unique), and the check reads every
        // manifest of the table at each commit.
        .with_check_duplicate(false)
        .set_snapshot_properties(HashMap::from([(
            PROPERTY.to_string(),
            progress.to_property(),
        )]))
        .add_data_files(files);
    append.apply(tx)?.commit(&pinned).await
}

/// A catalog that answers `table` when the transaction reloads it, and whose conflicts are not
/// retried.
///
/// iceberg's `Transaction::commit` reloads the table before it commits and, when the table
/// moved, builds the append again on the newer table, with the same snapshot properties: the
/// progress record, read from the older table, would then be committed over records another
/// translator already appended. Pinned, the append's requirements name the snapshot the
/// offsets were read from, so any catalog (the metadata store's, a REST server) refuses it if
/// the table moved; the translator reads the table again.
#[derive(Debug)]
struct Pinned<'a> {
    inner: &'a dyn Catalog,
    table: &'a Table,
}

#[async_trait::async_trait]
impl Catalog for Pinned<'_> {
    async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        if ident == self.table.identifier() {
            return Ok(self.table.clone());
        }
        self.inner.load_table(ident).await
    }

    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        self.inner.update_table(commit).await.map_err(|e| {
            if e.kind() == ErrorKind::CatalogCommitConflicts {
                e.with_retryable(false)
            } else {
                e
            }
        })
    }

    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(parent).await
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        self.inner.create_namespace(namespace, properties).await
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        self.inner.get_namespace(namespace).await
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        self.inner.namespace_exists(namespace).await
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        self.inner.update_namespace(namespace, properties).await
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        self.inner.drop_namespace(namespace).await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        self.inner.list_tables(namespace).await
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        self.inner.create_table(namespace, creation).await
    }

    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        self.inner.drop_table(table).await
    }

    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        self.inner.purge_table(table).await
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        self.inner.table_exists(table).await
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        self.inner.rename_table(src, dest).await
    }

    async fn register_table(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        self.inner.register_table(table, metadata_location).await
    }
}
