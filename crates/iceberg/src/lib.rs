//! Topics as Iceberg tables: what turns records into a table that Spark, Trino, pyiceberg and
//! the other engines read, exactly once.
//!
//! - [`storage`]: Iceberg's file IO on the broker's object store client, rooted at the
//!   warehouse.
//! - [`catalog`]: an Iceberg SQL catalog in Weir's metadata store (the JDBC catalogs' tables),
//!   whose commits are compare-and-set and never silently rebased.
//! - [`rest`]: the REST catalog (iceberg-rust's client), with OAuth2 and TLS.
//! - [`progress`]: the record, in each snapshot's summary, of how far the table has each
//!   partition of the topic: what makes translation exactly once.
//! - [`key_value`]: the layout that keeps every record as it is (key, value, headers, partition,
//!   offset, timestamp).
//! - [`typed`]: the layouts whose value is decoded with its schema from the registry (Avro,
//!   Protobuf, JSON Schema), and how a table's columns evolve with it.
//! - [`records`]: a partition's record batches into rows, as a `read_committed` consumer sees
//!   them.
//! - [`append`]: records to Parquet data files, committed with their progress in one append.
//! - [`expire`]: snapshots older than a topic's limit expired, never the one that says how far
//!   the table has the topic.
//! - [`translator`]: the loop on each broker that appends the partitions it leads to their
//!   topics' tables; [`meters`], what it did and how far behind each table is.
//!
//! Built on the `iceberg` crate (apache/iceberg-rust): its table metadata, transactions, Arrow
//! conversion and Parquet writers. No other crate of the workspace writes Arrow or Parquet (the
//! binary only wires the translator up, with iceberg's catalog and file IO types).

pub mod append;
pub mod catalog;
pub mod expire;
pub mod key_value;
pub mod meters;
pub mod progress;
pub mod records;
pub mod rest;
pub mod storage;
pub mod translator;
pub mod typed;
