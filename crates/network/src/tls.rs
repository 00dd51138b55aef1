//! TLS for the SSL and SASL_SSL listeners, with rustls: a certificate chain and key from PEM
//! files, optionally client certificates checked against a CA bundle (mTLS, the client's
//! certificate subject becoming its principal), and the files read again when they change, so
//! that certificates are renewed without a restart. Connections already open keep the
//! configuration they started with.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    None,
    /// Asked for; a client without one is anonymous, one with a bad one is refused.
    Requested,
    /// A client without a certificate signed by the CA is refused.
    Required,
}

impl ClientAuth {
    pub fn from_name(s: &str) -> Option<ClientAuth> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "" => Some(ClientAuth::None),
            "requested" => Some(ClientAuth::Requested),
            "required" => Some(ClientAuth::Required),
            _ => None,
        }
    }
}

/// Where the TLS material is.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// PEM: the server's certificate, then its chain.
    pub certificate: PathBuf,
    /// PEM: the server's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM: the CAs client certificates must chain to (needed unless client auth is `None`).
    pub client_ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{0}")]
    Config(String),
}

/// A listener's TLS configuration, as last loaded.
pub struct Tls {
    files: TlsFiles,
    current: RwLock<(Arc<ServerConfig>, Vec<Option<SystemTime>>)>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

impl Tls {
    /// Loads the files; fails with what is wrong with them.
    pub fn load(files: TlsFiles) -> Result<Tls, TlsError> {
        let stamps = stamps(&files);
        let config = build(&files)?;
        Ok(Tls {
            files,
            current: RwLock::new((config, stamps)),
        })
    }

    /// The configuration new connections use.
    pub fn config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()).0)
    }

    /// Loads the files again if any changed since the last load; whether it did. On an error
    /// the configuration in use stays (a half-written renewal does not stop the listener).
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let now = stamps(&self.files);
        if self.current.read().unwrap_or_else(|e| e.into_inner()).1 == now {
            return Ok(false);
        }
        let config = build(&self.files)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = (config, now);
        Ok(true)
    }
}

/// The modification times of the files, to notice a renewal.
fn stamps(files: &TlsFiles) -> Vec<Option<SystemTime>> {
    [
        Some(&files.certificate),
        Some(&files.key),
        files.client_ca.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
    .collect()
}

fn file_error(path: &Path, e: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in it"));
    }
    Ok(certs)
}

fn build(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let chain = certificates(&files.certificate)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| file_error(&files.key, e))?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match files.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        auth => {
            let ca = files.client_ca.as_ref().ok_or_else(|| {
                TlsError::Config(
                    "client authentication needs a CA file (ssl_truststore_location)".into(),
                )
            })?;
            let mut roots = RootCertStore::empty();
            for c in certificates(ca)? {
                roots.add(c).map_err(|e| file_error(ca, e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Config(format!("client certificate verifier: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(format!("certificate and key: {e}")))?;
    Ok(Arc::new(config))
}
