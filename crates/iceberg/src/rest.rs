//! The REST catalog: iceberg-rust's client of the Iceberg REST protocol (Polaris, Unity, Glue's
//! and S3 Tables' endpoints), with OAuth2 client credentials or a token, over TLS with the
//! broker's rustls provider and the system's roots. Files go through the warehouse's storage,
//! as with the SQL catalog: the tables the server places must be under `iceberg.warehouse`.
//!
//! Exactly once does not depend on the server: an append is committed on the table it read its
//! progress from (`crate::append`'s pinned commit), so the server's own requirement check
//! refuses it if the table moved.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use iceberg::io::StorageFactory;
use iceberg::{CatalogBuilder, Error, ErrorKind, Result};
use iceberg_catalog_rest::{RestCatalog, RestCatalogBuilder};

/// The broker's REST catalog settings (`iceberg.rest_*`); empty strings are unset.
#[derive(Debug, Clone, Default)]
pub struct RestSettings {
    pub uri: String,
    pub credential: String,
    pub token: String,
    pub oauth2_server_uri: String,
    pub scope: String,
    pub warehouse: String,
    /// How long a request to the catalog (or its token endpoint) may take; `None`:
    /// [`REQUEST_TIMEOUT`].
    pub timeout: Option<Duration>,
}

/// A request to a REST catalog that takes longer fails (the cycle is tried again later): a
/// server that stopped answering must not hold a topic's translation for ever.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

impl RestSettings {
    /// The catalog properties, by the names iceberg-rust (and the other clients) use.
    fn properties(&self) -> HashMap<String, String> {
        [
            ("uri", &self.uri),
            ("credential", &self.credential),
            ("token", &self.token),
            ("oauth2-server-uri", &self.oauth2_server_uri),
            ("scope", &self.scope),
            ("warehouse", &self.warehouse),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
    }
}

/// An HTTP client with TLS by the broker's crypto provider and the system's trusted roots.
fn http_client(timeout: Duration) -> Result<reqwest::Client> {
    let unexpected = |what: &str, e: &dyn std::fmt::Display| {
        Error::new(ErrorKind::Unexpected, format!("{what}: {e}"))
    };
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        tracing::warn!(errors = ?found.errors, "iceberg: no trusted root certificates found: an https REST catalog will be refused");
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| unexpected("TLS versions", &e))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(timeout)
        .connect_timeout(timeout)
        .build()
        .map_err(|e| unexpected("the REST catalog's HTTP client", &e))
}

/// The catalog `name` at `settings.uri`; nothing is asked of the server until it is used.
pub fn catalog(
    name: &str,
    settings: &RestSettings,
    storage: Arc<dyn StorageFactory>,
) -> Result<RestCatalog> {
    if settings.uri.is_empty() {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            "iceberg.rest_uri is required with iceberg.catalog = \"rest\"",
        ));
    }
    RestCatalogBuilder::default()
        .with_client(http_client(settings.timeout.unwrap_or(REQUEST_TIMEOUT))?)
        .with_storage_factory(storage)
        .load(name, settings.properties())
        // The builder's future is ready at once (it only checks the settings).
        .now_or_never()
        .unwrap_or_else(|| {
            Err(Error::new(
                ErrorKind::Unexpected,
                "the REST catalog's builder did not finish",
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::Catalog;

    #[tokio::test]
    async fn a_catalog_that_never_answers_is_an_error_not_a_wait() {
        // Accepts connections and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let _silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        let storage = crate::storage::WarehouseStorage::new(
            "s3://bucket/warehouse",
            Arc::new(object_store::memory::InMemory::new()),
        );
        let settings = RestSettings {
            uri: format!("http://{addr}"),
            timeout: Some(Duration::from_millis(200)),
            ..RestSettings::default()
        };
        let c = catalog(
            "weir",
            &settings,
            Arc::new(crate::storage::WarehouseStorageFactory::new(storage)),
        )
        .expect("catalog");
        // A liveness bound, not a measurement: without the request timeout this never ends.
        let got = tokio::time::timeout(Duration::from_secs(60), c.list_namespaces(None))
            .await
            .expect("the request ended");
        assert!(got.is_err(), "{got:?}");
    }
}
