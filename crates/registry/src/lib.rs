//! Weir's schema registry: Confluent Schema Registry's REST API, served by every broker over the
//! metadata store they share, and the check a producer's records pass when a topic asks for it.
//!
//! - [`format`]: the schema formats (parsing with references, canonical text, compatibility
//!   rules, payload decoding).
//! - [`service`]: the registry's rules (modes, compatibility levels, registration, deletes)
//!   over the store's [`weir_meta::Schemas`] part.
//! - [`http`]: the REST API (axum), with Confluent's bodies and error codes.
//! - [`validate`]: schemas enforced on produce (Confluent's topic configs).
//! - [`error`]: Confluent's error codes.
//! - [`meters`]: requests, latency, cache.

pub mod error;
pub mod format;
pub mod http;
pub mod meters;
pub mod service;
pub mod validate;

pub use error::RegistryError;
pub use service::Registry;
