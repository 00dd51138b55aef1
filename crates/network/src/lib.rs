//! Weir's Kafka listener.
//!
//! One task per connection. A reader task cuts the byte stream into frames (rejecting any over
//! `socket.request.max.bytes`) and hands them on; the connection task decodes each request,
//! hands it to the API layer ([`weir_api::Broker::handle`]) in arrival order, and writes the
//! responses in that same order, while responses that wait (produce durability, fetch long
//! polls, group joins) let later requests proceed. What cannot be decoded closes the
//! connection with a log line, as Kafka does; the broker goes on serving everyone else.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseKind};
use kafka_protocol::protocol::Decodable;
use kafka_protocol::ResponseError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use weir_api::{encode_response, supported_versions, Broker, Reply};
use weir_metrics::Counter;

#[derive(Debug, Clone)]
pub struct NetworkConfig {
    /// `socket.request.max.bytes`: larger frames close the connection.
    pub max_request_bytes: usize,
    /// Responses a connection may have outstanding before it stops reading.
    pub max_in_flight: usize,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            max_request_bytes: 100 << 20,
            max_in_flight: 64,
        }
    }
}

#[derive(Debug, Default)]
pub struct NetworkMeters {
    pub connections_opened: Counter,
    pub connections_closed: Counter,
    pub bytes_in: Counter,
    pub bytes_out: Counter,
    pub rejected_frames: Counter,
}

/// Accepts connections until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    config: NetworkConfig,
    meters: Arc<NetworkMeters>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    meters.connections_opened.inc();
                    let (broker, config, meters) = (Arc::clone(&broker), config.clone(), Arc::clone(&meters));
                    let shutdown = shutdown.clone();
                    tokio::spawn(async move {
                        if let Err(e) = connection(stream, peer, broker, config, &meters, shutdown).await {
                            tracing::debug!(%peer, error = %e, "connection ended");
                        }
                        meters.connections_closed.inc();
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            },
            _ = shutdown.changed() => return,
        }
    }
}

/// Why a connection was closed on purpose.
#[derive(Debug)]
enum Close {
    Io(std::io::Error),
    Protocol(String),
}

impl std::fmt::Display for Close {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Close::Io(e) => write!(f, "{e}"),
            Close::Protocol(m) => f.write_str(m),
        }
    }
}

impl From<std::io::Error> for Close {
    fn from(e: std::io::Error) -> Self {
        Close::Io(e)
    }
}

async fn read_frames(
    mut rd: tokio::net::tcp::OwnedReadHalf,
    tx: mpsc::Sender<Result<Bytes, String>>,
    max: usize,
    meters: Arc<NetworkMeters>,
) {
    loop {
        let mut len = [0u8; 4];
        if rd.read_exact(&mut len).await.is_err() {
            return;
        }
        let n = i32::from_be_bytes(len);
        if n < 0 || n as usize > max {
            meters.rejected_frames.inc();
            let _ = tx
                .send(Err(format!(
                    "request of {n} bytes is over socket.request.max.bytes ({max}); closing the connection"
                )))
                .await;
            return;
        }
        let mut buf = BytesMut::zeroed(n as usize);
        if rd.read_exact(&mut buf).await.is_err() {
            return;
        }
        meters.bytes_in.add(4 + n as u64);
        if tx.send(Ok(buf.freeze())).await.is_err() {
            return;
        }
    }
}

type Pending = BoxFuture<'static, Option<Result<BytesMut, String>>>;

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    broker: Arc<Broker>,
    config: NetworkConfig,
    meters: &Arc<NetworkMeters>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), Close> {
    let (rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::channel(config.max_in_flight.max(1));
    let reader = tokio::spawn(read_frames(
        rd,
        tx,
        config.max_request_bytes,
        Arc::clone(meters),
    ));
    let _stop_reader = AbortOnDrop(reader);
    let host = peer.ip().to_string();
    let mut pending: FuturesOrdered<Pending> = FuturesOrdered::new();
    let mut reading = true;
    loop {
        tokio::select! {
            biased;
            Some(out) = pending.next(), if !pending.is_empty() => match out {
                Some(Ok(bytes)) => {
                    meters.bytes_out.add(bytes.len() as u64);
                    wr.write_all(&bytes).await?;
                }
                Some(Err(e)) => return Err(Close::Protocol(e)),
                None => {}
            },
            frame = rx.recv(), if reading && pending.len() < config.max_in_flight => match frame {
                Some(Ok(frame)) => match request(&broker, frame, &host).await {
                    Ok(Some(p)) => pending.push_back(p),
                    Ok(None) => {}
                    Err(Close::Protocol(msg)) => {
                        meters.rejected_frames.inc();
                        tracing::warn!(%peer, "{msg}");
                        return Ok(());
                    }
                    Err(e) => return Err(e),
                },
                Some(Err(msg)) => {
                    tracing::warn!(%peer, "{msg}");
                    reading = false;
                }
                None => reading = false,
            },
            _ = shutdown.changed() => return Ok(()),
            else => return Ok(()),
        }
        if !reading && pending.is_empty() {
            return Ok(());
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A frame, decoded.
#[derive(Debug)]
pub enum Decoded {
    /// A request Weir implements, at a version it supports.
    Request(Box<RequestHeader>, Box<RequestKind>),
    /// An ApiVersions request of a version Weir does not know: answered with v0 and
    /// UNSUPPORTED_VERSION, as Kafka does, so that the client can pick a version.
    UnknownApiVersions { correlation_id: i32 },
}

/// Decodes one frame (without its length prefix). Anything that cannot be decoded, or that Weir
/// does not implement at that version, is an error: the connection is closed, as Kafka does.
/// Never panics and never allocates more than the frame's size allows, whatever the bytes:
/// the `decoder` fuzz target and `tests/decode_fuzz.rs` hold it to that.
pub fn decode_request(frame: Bytes) -> Result<Decoded, String> {
    if frame.len() < 8 {
        return Err(format!(
            "request of {} bytes is too short for a header",
            frame.len()
        ));
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let Ok(key) = ApiKey::try_from(api_key) else {
        return Err(format!("unknown API key {api_key}"));
    };
    let in_range = |(min, max): (i16, i16)| (min..=max).contains(&version);
    let defined = key.valid_versions();
    match supported_versions(key) {
        Some(range) if in_range(range) => {}
        _ if key == ApiKey::ApiVersions => {
            return Ok(Decoded::UnknownApiVersions { correlation_id })
        }
        // APIs Weir does not implement are decoded (at versions Kafka defines) so that the API
        // layer can refuse them with an error code.
        None if in_range((defined.min, defined.max)) => {}
        _ => {
            return Err(format!(
                "{key:?} version {version} is not supported (see ApiVersions)"
            ))
        }
    }
    let mut buf = frame;
    let header = RequestHeader::decode(&mut buf, key.request_header_version(version))
        .map_err(|e| format!("malformed {key:?} v{version} request header: {e}"))?;
    let body = RequestKind::decode(key, &mut buf, version)
        .map_err(|e| format!("malformed {key:?} v{version} request: {e}"))?;
    if buf.has_remaining() {
        tracing::debug!(
            ?key,
            version,
            extra = buf.remaining(),
            "request has trailing bytes"
        );
    }
    Ok(Decoded::Request(Box::new(header), Box::new(body)))
}

/// Decodes and dispatches one request; the returned future yields its encoded response.
async fn request(broker: &Arc<Broker>, frame: Bytes, host: &str) -> Result<Option<Pending>, Close> {
    let (header, body) = match decode_request(frame)
        .map_err(|e| Close::Protocol(format!("{e}; closing the connection")))?
    {
        Decoded::Request(header, body) => (*header, *body),
        Decoded::UnknownApiVersions { correlation_id } => {
            let header = RequestHeader::default()
                .with_request_api_key(ApiKey::ApiVersions as i16)
                .with_request_api_version(0)
                .with_correlation_id(correlation_id);
            let response = ResponseKind::ApiVersions(weir_api_versions(
                ResponseError::UnsupportedVersion.code(),
            ));
            let bytes =
                encode_response(&header, &response).map_err(|e| Close::Protocol(e.to_string()))?;
            return Ok(Some(futures::future::ready(Some(Ok(bytes))).boxed()));
        }
    };
    let key = ApiKey::try_from(header.request_api_key)
        .map_err(|_| Close::Protocol("unknown API key".into()))?;
    let encode = move |header: RequestHeader,
                       r: ResponseKind|
          -> Option<Result<BytesMut, String>> {
        Some(encode_response(&header, &r).map_err(|e| format!("encoding a {key:?} response: {e}")))
    };
    Ok(match broker.handle(&header, body, host).await {
        Reply::Now(r) => Some(futures::future::ready(encode(header, *r)).boxed()),
        Reply::Later(f) => Some(f.map(move |r| encode(header, r)).boxed()),
        Reply::Nothing => None,
        Reply::Unsupported => {
            return Err(Close::Protocol(format!(
                "{key:?} is not implemented by Weir; closing the connection"
            )))
        }
    })
}

fn weir_api_versions(code: i16) -> kafka_protocol::messages::ApiVersionsResponse {
    weir_api::api_versions_response(code)
}
