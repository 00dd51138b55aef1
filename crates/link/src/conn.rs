//! One connection to a broker of the source cluster, as a Kafka client makes it: TCP (and TLS),
//! ApiVersions to learn what the broker serves, SASL (PLAIN, SCRAM-SHA-256/512) when the link
//! has credentials, then requests one at a time, each at the highest version both sides know
//! and each bounded by the link's request timeout.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, OffsetFetchRequest, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use kafka_protocol::ResponseError;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_auth::scram::{client::Client as ScramClient, Mechanism};

use crate::config::{Sasl, SaslMechanism, Security};
use crate::LinkError;

/// The largest response read from a source: a fetch answers with at most the link's
/// `fetch_max_bytes` (50 MiB by default) plus headers.
const MAX_RESPONSE_BYTES: usize = 256 << 20;

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A connection to one source broker.
pub struct Conn {
    io: Box<dyn Io>,
    addr: String,
    next_id: i32,
    /// The versions the broker serves, by API key: (min, max).
    versions: HashMap<i16, (i16, i16)>,
    client_id: StrBytes,
    timeout: Duration,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("addr", &self.addr).finish()
    }
}

/// What a connection needs besides the address.
#[derive(Clone)]
pub struct ConnOptions {
    pub security: Security,
    /// Built once per link from `security` ([`crate::config::tls_config`]).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub client_id: String,
    pub timeout: Duration,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

impl Conn {
    /// Connects, learns the broker's versions and authenticates.
    pub async fn connect(addr: &str, opts: &ConnOptions) -> Result<Conn, LinkError> {
        let io_err = |e: std::io::Error| LinkError::Io {
            addr: addr.to_string(),
            source: e,
        };
        let tcp = tokio::time::timeout(opts.timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| LinkError::Timeout {
                addr: addr.to_string(),
                what: "connecting".into(),
            })?
            .map_err(io_err)?;
        tcp.set_nodelay(true).map_err(io_err)?;
        let io: Box<dyn Io> = match &opts.tls {
            Some(tls) => {
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let name = rustls_pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| LinkError::Config(format!("{host} is not a host name: {e}")))?;
                let connector = tokio_rustls::TlsConnector::from(Arc::clone(tls));
                let tls = tokio::time::timeout(opts.timeout, connector.connect(name, tcp))
                    .await
                    .map_err(|_| LinkError::Timeout {
                        addr: addr.to_string(),
                        what: "the TLS handshake".into(),
                    })?
                    .map_err(io_err)?;
                Box::new(tls)
            }
            None => Box::new(tcp),
        };
        let mut conn = Conn {
            io,
            addr: addr.to_string(),
            next_id: 1,
            versions: HashMap::new(),
            client_id: s(&opts.client_id),
            timeout: opts.timeout,
        };
        conn.negotiate().await?;
        if let Some(sasl) = opts.security.sasl() {
            conn.authenticate(sasl).await?;
        }
        Ok(conn)
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// ApiVersions v3 (every Kafka since 2.4 serves it).
    async fn negotiate(&mut self) -> Result<(), LinkError> {
        let req = ApiVersionsRequest::default()
            .with_client_software_name(s("weir-link"))
            .with_client_software_version(s(env!("CARGO_PKG_VERSION")));
        let resp: ApiVersionsResponse = self.call_at(&req, 3).await?;
        if resp.error_code != 0 {
            return Err(self.kafka(resp.error_code, "ApiVersions"));
        }
        self.versions = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(())
    }

    /// SaslHandshake v1, then SaslAuthenticate rounds.
    async fn authenticate(&mut self, sasl: &Sasl) -> Result<(), LinkError> {
        let mechanism = sasl.mechanism.name();
        let (_, hs) = self
            .send(&SaslHandshakeRequest::default().with_mechanism(s(mechanism)))
            .await?;
        if hs.error_code != 0 {
            let offered: Vec<String> = hs.mechanisms.iter().map(|m| m.to_string()).collect();
            return Err(LinkError::Auth(format!(
                "{} does not take SASL {mechanism} (it offers {})",
                self.addr,
                offered.join(", ")
            )));
        }
        match sasl.mechanism {
            SaslMechanism::Plain => {
                let token = format!("\0{}\0{}", sasl.username, sasl.password);
                self.sasl_round(token.into_bytes()).await?;
            }
            SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
                let m = if sasl.mechanism == SaslMechanism::ScramSha256 {
                    Mechanism::Sha256
                } else {
                    Mechanism::Sha512
                };
                let nonce = weir_auth::peer::nonce()
                    .map_err(|e| LinkError::Auth(format!("no nonce: {e}")))?;
                let client =
                    ScramClient::new(m, &sasl.username, &sasl.password, &B64.encode(nonce));
                let server_first = self.sasl_round(client.first()).await?;
                let (last, expected) = client
                    .last(&server_first)
                    .map_err(|e| LinkError::Auth(format!("{}: {e}", self.addr)))?;
                let server_final = self.sasl_round(last).await?;
                if server_final != expected {
                    return Err(LinkError::Auth(format!(
                        "{} did not prove it knows the SCRAM credential",
                        self.addr
                    )));
                }
            }
        }
        Ok(())
    }

    async fn sasl_round(&mut self, bytes: Vec<u8>) -> Result<Vec<u8>, LinkError> {
        let (_, r) = self
            .send(&SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes)))
            .await?;
        if r.error_code != 0 {
            return Err(LinkError::Auth(format!(
                "{}: {}",
                self.addr,
                r.error_message
                    .as_ref()
                    .map_or_else(|| format!("error {}", r.error_code), |m| m.to_string())
            )));
        }
        Ok(r.auth_bytes.to_vec())
    }

    /// The highest version of `R` both sides know and the link speaks (see [`link_max`]).
    pub fn version<R: Request>(&self) -> Result<i16, LinkError> {
        let (min, max) =
            self.versions
                .get(&R::KEY)
                .copied()
                .ok_or_else(|| LinkError::Unsupported {
                    addr: self.addr.clone(),
                    api: R::KEY,
                })?;
        let v = max.min(R::VERSIONS.max).min(link_max(R::KEY));
        if v < min.max(R::VERSIONS.min) {
            return Err(LinkError::Unsupported {
                addr: self.addr.clone(),
                api: R::KEY,
            });
        }
        Ok(v)
    }

    /// Sends `req` at the highest common version; that version and the answer.
    pub async fn send<R: Request>(&mut self, req: &R) -> Result<(i16, R::Response), LinkError> {
        let v = self.version::<R>()?;
        Ok((v, self.call_at(req, v).await?))
    }

    async fn call_at<R: Request>(&mut self, req: &R, v: i16) -> Result<R::Response, LinkError> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut buf = BytesMut::with_capacity(256);
        buf.put_i32(0);
        RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(v)
            .with_correlation_id(id)
            .with_client_id(Some(self.client_id.clone()))
            .encode(&mut buf, R::header_version(v))
            .map_err(|e| LinkError::Protocol(format!("encoding a request header: {e}")))?;
        req.encode(&mut buf, v)
            .map_err(|e| LinkError::Protocol(format!("encoding API {} v{v}: {e}", R::KEY)))?;
        let len = (buf.len() - 4) as i32;
        (&mut buf[0..4]).put_i32(len);
        let timeout = self.timeout;
        let addr = self.addr.clone();
        let mut body = tokio::time::timeout(timeout, self.exchange(&buf))
            .await
            .map_err(|_| LinkError::Timeout {
                addr: addr.clone(),
                what: format!("API {} v{v}", R::KEY),
            })??;
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(v))
            .map_err(|e| LinkError::Protocol(format!("{addr}: a response header: {e}")))?;
        if header.correlation_id != id {
            return Err(LinkError::Protocol(format!(
                "{addr}: answer {} to request {id}",
                header.correlation_id
            )));
        }
        R::Response::decode(&mut body, v)
            .map_err(|e| LinkError::Protocol(format!("{addr}: API {} v{v} answer: {e}", R::KEY)))
    }

    /// Writes one request frame and reads one response frame.
    async fn exchange(&mut self, frame: &[u8]) -> Result<Bytes, LinkError> {
        let addr = self.addr.clone();
        let io_err = |e: std::io::Error| LinkError::Io {
            addr: addr.clone(),
            source: e,
        };
        self.io.write_all(frame).await.map_err(io_err)?;
        self.io.flush().await.map_err(io_err)?;
        let mut len = [0u8; 4];
        self.io.read_exact(&mut len).await.map_err(io_err)?;
        let len = usize::try_from(i32::from_be_bytes(len))
            .ok()
            .filter(|&n| n <= MAX_RESPONSE_BYTES)
            .ok_or_else(|| {
                LinkError::Protocol(format!("{addr}: a response frame of {len:?} bytes"))
            })?;
        let mut body = vec![0u8; len];
        self.io.read_exact(&mut body).await.map_err(io_err)?;
        let mut b = Bytes::from(body);
        if b.remaining() < 4 {
            return Err(LinkError::Protocol(format!(
                "{addr}: a response without a header"
            )));
        }
        b = b.slice(..);
        Ok(b)
    }

    fn kafka(&self, code: i16, what: &str) -> LinkError {
        LinkError::Kafka {
            addr: self.addr.clone(),
            what: what.to_string(),
            error: ResponseError::try_from_code(code)
                .map_or_else(|| format!("error {code}"), |e| e.to_string()),
        }
    }
}

/// The error an answer's code names, `None` for 0.
pub fn error_of(code: i16) -> Option<ResponseError> {
    if code == 0 {
        None
    } else {
        Some(ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError))
    }
}

/// The highest version of an API the link sends, whatever the codec knows: versions that change
/// how the link must fill a request. OffsetFetch v10 (Kafka 4.4, KIP-848) names topics by id
/// only, and the link asks by name: sent as v10, a request with named topics is answered
/// with no offsets.
fn link_max(api: i16) -> i16 {
    match api {
        OffsetFetchRequest::KEY => 9,
        _ => i16::MAX,
    }
}
