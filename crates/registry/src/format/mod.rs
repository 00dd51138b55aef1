//! The schema formats the registry serves: each parses a schema with its references, gives its
//! canonical text, says why one version cannot read another's data, and decodes a payload.
//!
//! - [`avro`]: Avro (apache-avro).

pub mod avro;

pub use avro::AvroSchema;
