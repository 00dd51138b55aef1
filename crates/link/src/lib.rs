//! Cluster links: a Weir cluster takes over topics, consumer groups and configs of another
//! Kafka cluster (the source) with the source's offsets kept, then promotes them so that
//! producers can move (a migration with no offset translation).
//!
//! - [`config`]: a link's definition (where the source is, how to connect, what to mirror).
//! - [`conn`]: a connection to a source broker, as a Kafka client makes one (TLS, SASL).
//! - `source`: the source's metadata, configs and offsets.
//! - `fetcher`: mirroring from one source broker into the mirror partitions this broker leads,
//!   at the source's offsets ([`weir_partition::Partition::start_mirror`]).
//! - `controller`: on the cluster's controller, mirror topics created, grown and configured as
//!   the source's are.
//! - [`groups`]: consumer groups' committed offsets copied from the source, unchanged.
//! - [`service`]: each broker's links: definitions read from the metadata store, fetchers
//!   started where partitions are led, the admin operations.
//! - [`meters`]: lag per mirror partition, bytes, errors.
//!
//! A mirror topic carries the config [`weir_partition::MIRROR_LINK_CONFIG`] (the link's name):
//! produce is refused while it is set, and the mirror's own end is the link's position, so a
//! broker that takes a partition over resumes where the partition ends.

pub mod config;
pub mod conn;
mod controller;
mod fetcher;
pub mod groups;
pub mod meters;
pub mod model;
pub mod service;
mod source;

pub use config::{LinkConfig, LinkSpec};
pub use model::{LinkBody, MirrorTopic, TopicState};
pub use service::{LinkService, LinkStatus};

/// What went wrong with a link.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("{0}")]
    Config(String),
    #[error("source broker {addr}: {source}")]
    Io {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("source broker {addr}: no answer to {what} in time")]
    Timeout { addr: String, what: String },
    #[error("source broker {addr} does not serve API {api} at a version this broker speaks")]
    Unsupported { addr: String, api: i16 },
    #[error("source: {0}")]
    Protocol(String),
    #[error("authenticating to the source: {0}")]
    Auth(String),
    #[error("source broker {addr}: {what} answered {error}")]
    Kafka {
        addr: String,
        what: String,
        error: String,
    },
    #[error("no link named {0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("metadata store: {0}")]
    Meta(#[from] weir_meta::MetaError),
}

/// What every task of one link on this broker shares: its name and checked definition.
pub struct Shared {
    pub name: String,
    pub config: LinkConfig,
}

impl Shared {
    pub fn spec(&self) -> &LinkSpec {
        &self.config.spec
    }

    pub fn spec_partition_bytes(&self) -> i32 {
        self.config.spec.max_partition_fetch_bytes
    }

    pub fn conn_options(&self) -> Result<conn::ConnOptions, LinkError> {
        Ok(conn::ConnOptions {
            tls: config::tls_config(&self.config.security)?,
            security: self.config.security.clone(),
            client_id: format!("weir-link-{}", self.name),
            timeout: self.config.request_timeout(),
        })
    }
}
