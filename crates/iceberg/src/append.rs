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
use iceberg::{Catalog, Result};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::progress::{Progress, PROPERTY};

/// Data files roll over at this size: large enough for a query engine to read efficiently
/// (Iceberg's own default is 512 MiB; Athena and Trino do well from about 128 MiB), small enough
/// that a translator's batch (bounded by the topic's target lag) rarely makes more than one.
pub const TARGET_FILE_BYTES: usize = 128 << 20;

/// Writes `batch` (of the table's current schema, in Arrow form) as data files named
/// `<prefix>-<n>.parquet` under the table's data location, split by its partition spec.
pub async fn write_files(table: &Table, batch: RecordBatch, prefix: &str) -> Result<Vec<DataFile>> {
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
        w.write(batch).await?;
        return w.close().await;
    }
    let splitter = RecordBatchPartitionSplitter::try_new_with_computed_values(schema, spec)?;
    let mut fanout = FanoutWriter::new(files);
    for (key, part) in splitter.split(&batch)? {
        fanout.write(key, part).await?;
    }
    fanout.close().await
}

/// Commits `files` to `table` in one fast append whose snapshot carries `progress` (its
/// `parent` must be the table's current snapshot: see [`crate::catalog`]).
pub async fn commit(
    catalog: &dyn Catalog,
    table: &Table,
    files: Vec<DataFile>,
    progress: &Progress,
) -> Result<Table> {
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
    append.apply(tx)?.commit(catalog).await
}
