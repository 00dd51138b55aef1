//! Weir's Kafka listener.
//!
//! One task per connection. A reader task cuts the byte stream into frames (rejecting any over
//! `socket.request.max.bytes`) and hands them on; the connection task decodes each request,
//! hands it to the API layer ([`weir_api::Broker::handle`]) in arrival order, and writes the
//! responses in that same order, while responses that wait (produce durability, fetch long
//! polls, group joins) let later requests proceed. What cannot be decoded closes the
//! connection with a log line, as Kafka does; the broker goes on serving everyone else. A
//! handler that panics, or whose response does not encode at the request's version, is answered
//! with the API's error response (`UNKNOWN_SERVER_ERROR`), logged and counted.
//!
//! Bounds on what clients control: `max.connections` (more are closed at accept), and the bytes
//! of requests read but not yet answered, per connection and in total: a reader takes a
//! request's size from both budgets before reading its body and the budget comes back once the
//! response is written, so at a bound the connection stops reading and TCP pushes back.
//!
//! The internal listener (`NetworkConfig::internal`) also takes the internal API keys of
//! broker-to-broker calls ([`weir_zone::wire`]); their answers may go out in any order (they
//! carry correlation ids), so a long poll never holds up an acknowledgement. Every connection's
//! bytes are counted by zone pair and kind ([`weir_zone::NetMeters`]).
//!
//! Security, per listener ([`NetworkConfig::listener`]): on SSL and SASL_SSL listeners the
//! connection's task first runs the TLS handshake ([`tls`], bounded in time, so a client that
//! stalls or sends garbage holds nothing but its own task); a client certificate on an SSL
//! listener names the connection's principal. On SASL listeners nothing but ApiVersions,
//! SaslHandshake and SaslAuthenticate is served until the client has authenticated, nor after
//! its session ends (KIP-368): such a request closes the connection, as in Kafka. A failed
//! authentication's answer is written, then the connection is closed.

pub mod inflight;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
pub use inflight::{watch_stuck, InFlight};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseKind};
use kafka_protocol::protocol::Decodable;
use kafka_protocol::ResponseError;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore, TryAcquireError};
use weir_api::{
    encode_response, error_response, supported_versions, Broker, Conn, ListenerSecurity, Reply,
    ResponseFrame,
};
use weir_auth::{Principal, SecurityProtocol};
use weir_metrics::Counter;
use weir_zone::wire::INTERNAL_KEY_BASE;
use weir_zone::{Kind, NetMeters};

pub mod tls;

pub use tls::{ClientAuth, Tls, TlsError, TlsFiles};

/// How long a TLS handshake may take before the connection is closed.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// API keys served before a SASL client has authenticated: SaslHandshake, ApiVersions,
/// SaslAuthenticate.
const BEFORE_AUTHENTICATION: [i16; 3] = [17, 18, 36];

#[derive(Debug, Clone)]
pub struct NetworkConfig {
    /// `socket.request.max.bytes`: larger frames close the connection.
    pub max_request_bytes: usize,
    /// Requests other than produces a connection may have unanswered before it stops reading
    /// (a fetch's answer can be large, and answers wait behind earlier ones).
    pub max_in_flight: usize,
    /// Produces a connection may have unanswered before it stops reading. Many more: their
    /// answers are small, the bytes bounds below hold their requests, and on the object WAL
    /// each waits a PUT, so a client pipelining small requests (librdkafka sends one partition
    /// per request) needs hundreds in flight to keep up
    /// (`docs/decisions/requests-in-flight-per-connection.md`).
    pub max_produces_in_flight: usize,
    /// `max.connections`: connections accepted beyond this many are closed at once (0: no
    /// limit).
    pub max_connections: usize,
    /// `queued.max.request.bytes`: request bytes read but not yet answered, all connections
    /// together; a connection that would go over stops reading until answers free room (0: no
    /// limit).
    pub queued_max_request_bytes: usize,
    /// The same bound for one connection, so that one pipelining client cannot take the whole
    /// budget (0: no limit).
    pub queued_max_request_bytes_per_connection: usize,
    /// The internal listener: peers' internal API keys are accepted.
    pub internal: bool,
    /// The zone of the listener, for clients that nothing else places in a zone.
    pub zone: Option<String>,
    /// The listener's name, security protocol and SASL settings.
    pub listener: Arc<ListenerSecurity>,
    /// TLS (SSL and SASL_SSL listeners).
    pub tls: Option<Arc<Tls>>,
    /// `broker.request_stuck_ms`: a request in flight longer than this (or than twice the wait
    /// it asks for, if longer) is stuck ([`inflight`]).
    pub stuck_after: Duration,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            max_request_bytes: 100 << 20,
            max_in_flight: 64,
            max_produces_in_flight: 4096,
            max_connections: 10_000,
            queued_max_request_bytes: 256 << 20,
            queued_max_request_bytes_per_connection: 64 << 20,
            internal: false,
            zone: None,
            listener: Arc::default(),
            tls: None,
            stuck_after: Duration::from_secs(120),
        }
    }
}

#[derive(Debug, Default)]
pub struct NetworkMeters {
    pub connections_opened: Counter,
    pub connections_closed: Counter,
    /// Connections closed at accept because `max.connections` were open.
    pub connections_refused: Counter,
    pub bytes_in: Counter,
    pub bytes_out: Counter,
    pub rejected_frames: Counter,
    /// Responses that did not encode at their request's version (answered with the API's error
    /// response instead).
    pub response_encode_errors: Counter,
    /// Request handlers that panicked (answered with the API's error response).
    pub handler_panics: Counter,
    /// Times a connection stopped reading because its own or the total queued-bytes bound was
    /// reached.
    pub read_pauses: Counter,
    /// Request bytes read and not yet answered, now (a gauge).
    pub queued_request_bytes: weir_metrics::Gauge,
    /// TLS handshakes that failed or timed out (the connection was closed).
    pub tls_handshake_failures: Counter,
    /// Requests before authentication, or after a session ended (the connection was closed).
    pub unauthenticated_requests: Counter,
    /// Kafka requests being handled, for the stuck-request watch.
    pub in_flight: InFlight,
}

impl NetworkMeters {
    /// Declares the Kafka listeners' meters and the stuck-request watch's.
    pub fn register(self: &Arc<Self>, r: &mut weir_metrics::Registry) {
        r.counter(
            "connections_opened",
            "Kafka connections accepted.",
            &self.connections_opened,
        );
        r.counter(
            "connections_closed",
            "Kafka connections closed.",
            &self.connections_closed,
        );
        r.counter(
            "network_bytes_in",
            "Bytes received on the Kafka listener.",
            &self.bytes_in,
        );
        r.counter(
            "network_bytes_out",
            "Bytes sent on the Kafka listener.",
            &self.bytes_out,
        );
        r.counter(
            "rejected_requests",
            "Requests that closed their connection (malformed, oversized, unsupported).",
            &self.rejected_frames,
        );
        r.counter(
            "tls_handshake_failures",
            "TLS handshakes that failed or timed out (the connection was closed).",
            &self.tls_handshake_failures,
        );
        r.counter(
            "unauthenticated_requests",
            "Requests before SASL authentication or after the session ended (the connection was closed).",
            &self.unauthenticated_requests,
        );
        r.counter(
            "connections_refused",
            "Connections closed at accept because max.connections were open.",
            &self.connections_refused,
        );
        r.counter(
            "response_encode_errors",
            "Responses that did not encode at their request's version (answered UNKNOWN_SERVER_ERROR).",
            &self.response_encode_errors,
        );
        r.counter(
            "request_handler_panics",
            "Request handlers that panicked (answered UNKNOWN_SERVER_ERROR).",
            &self.handler_panics,
        );
        r.counter(
            "connection_read_pauses",
            "Times a connection stopped reading at the queued request bytes bound.",
            &self.read_pauses,
        );
        r.gauge(
            "queued_request_bytes",
            "Request bytes read and not yet answered.",
            &self.queued_request_bytes,
        );
        self.register_in_flight(r);
    }

    fn register_in_flight(self: &Arc<Self>, r: &mut weir_metrics::Registry) {
        let m = Arc::clone(self);
        r.gauges_read(
            "request_oldest_seconds",
            "Age of the oldest request in flight, per API.",
            move || {
                m.in_flight
                    .oldest(std::time::Instant::now())
                    .into_iter()
                    .map(|(api, age)| {
                        let secs = (age.as_secs_f64() * 1000.0).round() / 1000.0;
                        (vec![("api", format!("{api:?}"))], secs)
                    })
                    .collect()
            },
        );
        let m = Arc::clone(self);
        r.gauge_read(
            "requests_in_flight",
            "Kafka requests being handled.",
            move || m.in_flight.len() as u64,
        );
        let m = Arc::clone(self);
        r.gauge_read(
            "requests_stuck",
            "Requests past their bound (broker.request_stuck_ms) now; /readyz fails while any is.",
            move || m.in_flight.stuck() as u64,
        );
        r.counter(
            "stuck_requests",
            "Requests that went past their bound (broker.request_stuck_ms), each logged at WARN.",
            &self.in_flight.stuck_total,
        );
    }
}

/// What requests are dispatched to: [`Broker`], or a stand-in in tests.
pub trait Handler: Send + Sync + 'static {
    /// Handles one decoded request; see [`Broker::handle_on`].
    fn handle<'a>(
        self: &'a Arc<Self>,
        header: &'a RequestHeader,
        request: RequestKind,
        conn: &'a Conn,
    ) -> impl Future<Output = Reply> + Send + 'a;

    /// Handles one internal request (internal listener only); see
    /// [`Broker::handle_internal`]. `Err` closes the connection.
    fn handle_internal<'a>(
        self: &'a Arc<Self>,
        key: i16,
        body: Bytes,
        conn: &'a Conn,
    ) -> impl Future<Output = Result<weir_api::InternalReply, String>> + Send + 'a {
        let _ = (key, body, conn);
        async { Err("this listener has no internal API".to_string()) }
    }

    /// This broker's zone and the meters of bytes per zone pair, if it counts them.
    fn net_meters(&self) -> Option<(&str, &Arc<NetMeters>)> {
        None
    }
}

impl Handler for Broker {
    fn handle<'a>(
        self: &'a Arc<Self>,
        header: &'a RequestHeader,
        request: RequestKind,
        conn: &'a Conn,
    ) -> impl Future<Output = Reply> + Send + 'a {
        Broker::handle_on(self, header, request, conn)
    }

    fn handle_internal<'a>(
        self: &'a Arc<Self>,
        key: i16,
        body: Bytes,
        conn: &'a Conn,
    ) -> impl Future<Output = Result<weir_api::InternalReply, String>> + Send + 'a {
        Broker::handle_internal(self, key, body, conn)
    }

    fn net_meters(&self) -> Option<(&str, &Arc<NetMeters>)> {
        self.zones.as_ref().map(|z| (z.zone.as_str(), &z.net))
    }
}

/// A connection's counters of bytes by zone pair, looked up again only when the zone of the
/// other end changes.
struct ZoneCounters {
    zone: Option<Arc<str>>,
    counters: std::collections::HashMap<(Kind, bool), Arc<Counter>>,
}

impl ZoneCounters {
    fn new() -> Self {
        ZoneCounters {
            zone: None,
            counters: std::collections::HashMap::new(),
        }
    }

    /// Counts `n` bytes of `kind` received (`outbound` false) or sent on `conn`.
    fn count<H: Handler>(&mut self, handler: &H, conn: &Conn, kind: Kind, outbound: bool, n: u64) {
        let Some((mine, net)) = handler.net_meters() else {
            return;
        };
        let zone = conn.zone();
        if zone != self.zone {
            self.zone = zone;
            self.counters.clear();
        }
        let theirs = self.zone.as_deref().unwrap_or("");
        self.counters
            .entry((kind, outbound))
            .or_insert_with(|| {
                if outbound {
                    net.counter(mine, theirs, kind)
                } else {
                    net.counter(theirs, mine, kind)
                }
            })
            .add(n);
    }
}

/// The meters' kind of a request's bytes.
fn kind_of(api_key: i16) -> Kind {
    match api_key {
        0 => Kind::Produce,
        1 => Kind::Fetch,
        weir_zone::wire::FORWARD_PRODUCE => Kind::Forward,
        k if k >= INTERNAL_KEY_BASE => Kind::Feed,
        _ => Kind::Control,
    }
}

/// Produces (and zone-forwarded produces): small answers, many may be in flight.
fn is_produce(kind: Kind) -> bool {
    matches!(kind, Kind::Produce | Kind::Forward)
}

/// Byte budgets for queued requests: one per connection, one shared by all.
struct Budgets {
    total: Option<Arc<Semaphore>>,
    total_cap: usize,
    per_connection_cap: usize,
}

fn semaphore(cap: usize) -> Option<Arc<Semaphore>> {
    (cap > 0).then(|| Arc::new(Semaphore::new(cap.min(u32::MAX as usize))))
}

/// Accepts connections until `shutdown` turns true.
pub async fn serve<H: Handler>(
    listener: TcpListener,
    handler: Arc<H>,
    config: NetworkConfig,
    meters: Arc<NetworkMeters>,
    mut shutdown: watch::Receiver<bool>,
) {
    let connections = semaphore(config.max_connections);
    let budgets = Arc::new(Budgets {
        total: semaphore(config.queued_max_request_bytes),
        total_cap: config.queued_max_request_bytes,
        per_connection_cap: config.queued_max_request_bytes_per_connection,
    });
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let slot = match &connections {
                        None => None,
                        Some(s) => match Arc::clone(s).try_acquire_owned() {
                            Ok(slot) => Some(slot),
                            Err(_) => {
                                // Closing at once, rather than leaving the connection in the
                                // backlog, gives the client an immediate error to back off on.
                                meters.connections_refused.inc();
                                // Logged at the 1st, 2nd, 4th, 8th... refusal: seen, not a flood.
                                let refused = meters.connections_refused.get();
                                if refused.is_power_of_two() {
                                    tracing::warn!(%peer, max = config.max_connections, refused, "max.connections reached: closing new connections");
                                }
                                drop(stream);
                                continue;
                            }
                        },
                    };
                    let _ = stream.set_nodelay(true);
                    meters.connections_opened.inc();
                    let (handler, config, meters, budgets) = (Arc::clone(&handler), config.clone(), Arc::clone(&meters), Arc::clone(&budgets));
                    let shutdown = shutdown.clone();
                    tokio::spawn(async move {
                        let conn = Conn::on_listener(peer, config.internal, config.zone.clone(), Arc::clone(&config.listener));
                        let ended = match config.tls.clone() {
                            None => {
                                let (rd, wr) = stream.into_split();
                                connection(rd, wr, conn, handler, config, budgets, &meters, shutdown).await
                            }
                            Some(tls) => match handshake(stream, &tls).await {
                                Ok(stream) => {
                                    // On SSL, the certificate says who the client is; on
                                    // SASL_SSL, SASL does.
                                    if config.listener.protocol == SecurityProtocol::Ssl {
                                        if let Some(p) = certificate_principal(&stream) {
                                            conn.set_principal(p);
                                        }
                                    }
                                    let (rd, wr) = tokio::io::split(stream);
                                    connection(rd, wr, conn, handler, config, budgets, &meters, shutdown).await
                                }
                                Err(e) => {
                                    meters.tls_handshake_failures.inc();
                                    let failed = meters.tls_handshake_failures.get();
                                    // Logged at the 1st, 2nd, 4th... failure: seen, not a flood.
                                    if failed.is_power_of_two() {
                                        tracing::warn!(%peer, error = %e, failed, "TLS handshake failed; closing the connection");
                                    } else {
                                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                    }
                                    Ok(())
                                }
                            },
                        };
                        if let Err(e) = ended {
                            tracing::debug!(%peer, error = %e, "connection ended");
                        }
                        // The slot first: a client that sees the close counted may connect again.
                        drop(slot);
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

/// Runs the server's TLS handshake, within [`TLS_HANDSHAKE_TIMEOUT`].
async fn handshake(
    stream: TcpStream,
    tls: &Tls,
) -> std::io::Result<tokio_rustls::server::TlsStream<TcpStream>> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the TLS handshake took too long",
        )),
    }
}

/// `User:<subject>` of the client's certificate, if it sent one (Kafka's default
/// `ssl.principal.mapping.rules`).
fn certificate_principal(stream: &tokio_rustls::server::TlsStream<TcpStream>) -> Option<Principal> {
    let cert = stream.get_ref().1.peer_certificates()?.first()?;
    weir_auth::x509::subject_name(cert.as_ref()).map(Principal::user)
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

/// The bytes of one request, held from before it is read until its response is written: its
/// share of the connection's and of the total budget, and the gauge of queued bytes.
struct Held {
    bytes: u64,
    /// What the request (and so its answer) carries, for the zone meters.
    kind: Kind,
    meters: Arc<NetworkMeters>,
    _permits: [Option<OwnedSemaphorePermit>; 2],
}

impl Drop for Held {
    fn drop(&mut self) {
        self.meters
            .queued_request_bytes
            .fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Takes `want` permits of `sem`, counting a pause if they are not there at once. `None` if
/// the semaphore is closed (never, in practice).
async fn take(
    sem: &Option<Arc<Semaphore>>,
    want: usize,
    meters: &NetworkMeters,
) -> Option<Option<OwnedSemaphorePermit>> {
    let Some(sem) = sem else {
        return Some(None);
    };
    let want = want.min(u32::MAX as usize) as u32;
    match Arc::clone(sem).try_acquire_many_owned(want) {
        Ok(p) => Some(Some(p)),
        Err(TryAcquireError::Closed) => None,
        Err(TryAcquireError::NoPermits) => {
            meters.read_pauses.inc();
            Arc::clone(sem)
                .acquire_many_owned(want)
                .await
                .ok()
                .map(Some)
        }
    }
}

async fn read_frames<R: AsyncRead + Unpin>(
    mut rd: R,
    tx: mpsc::Sender<Result<(Bytes, Held), String>>,
    max: usize,
    budgets: Arc<Budgets>,
    meters: Arc<NetworkMeters>,
) {
    let own = semaphore(budgets.per_connection_cap);
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
        let n = n as usize;
        // Room for the request before it is read: a connection over its budget, or all of them
        // over theirs, stop reading (TCP pushes back on the client) until answers free room. A
        // request larger than a budget takes all of it rather than waiting forever.
        let Some(mine) = take(&own, n.min(budgets.per_connection_cap), &meters).await else {
            return;
        };
        let Some(shared) = take(&budgets.total, n.min(budgets.total_cap), &meters).await else {
            return;
        };
        meters
            .queued_request_bytes
            .fetch_add(n as u64, Ordering::Relaxed);
        let held = Held {
            bytes: n as u64,
            kind: Kind::Control,
            meters: Arc::clone(&meters),
            _permits: [mine, shared],
        };
        // Read into spare capacity: zeroing the buffer first (and faulting in its pages for
        // that) was a sixth of the broker's CPU at its maximum produce rate.
        let mut buf = BytesMut::with_capacity(n);
        while buf.len() < n {
            let want = n - buf.len();
            match rd.read_buf(&mut (&mut buf).limit(want)).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        meters.bytes_in.add(4 + n as u64);
        if tx.send(Ok((buf.freeze(), held))).await.is_err() {
            return;
        }
    }
}

/// An encoded response on its way (or `None`: nothing to send), with the request's bytes held
/// until it is written.
type Pending = BoxFuture<'static, (Option<Result<ResponseFrame, String>>, Held)>;

#[allow(clippy::too_many_arguments)]
async fn connection<H, R, W>(
    rd: R,
    mut wr: W,
    conn: Conn,
    handler: Arc<H>,
    config: NetworkConfig,
    budgets: Arc<Budgets>,
    meters: &Arc<NetworkMeters>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), Close>
where
    H: Handler,
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let (tx, mut rx) = mpsc::channel(config.max_in_flight.max(1));
    let reader = tokio::spawn(read_frames(
        rd,
        tx,
        config.max_request_bytes,
        budgets,
        Arc::clone(meters),
    ));
    let _stop_reader = AbortOnDrop(reader);
    let peer = conn.peer;
    let mut pending: FuturesOrdered<Pending> = FuturesOrdered::new();
    // Answers to internal requests, written as they come.
    let mut unordered: futures::stream::FuturesUnordered<Pending> =
        futures::stream::FuturesUnordered::new();
    let mut zone_bytes = ZoneCounters::new();
    let mut reading = true;
    // Unanswered requests that are not produces (the rest of `pending` and `unordered` are).
    let mut others = 0usize;
    loop {
        let produces = pending.len() + unordered.len() - others;
        // A client over its quota: no request is read until its throttle time has passed
        // (answers already under way still go out).
        let muted = conn.throttled_until().filter(|t| *t > Instant::now());
        tokio::select! {
            biased;
            Some((out, held)) = pending.next(), if !pending.is_empty() => {
                match out {
                    Some(Ok(mut frame)) => {
                        meters.bytes_out.add(frame.len() as u64);
                        zone_bytes.count(&*handler, &conn, held.kind, true, frame.len() as u64);
                        // One vectored write of the frame's chunks: records are not copied
                        // into a response buffer first.
                        wr.write_all_buf(&mut frame).await?;
                        // TLS holds records in its buffer until flushed (a no-op on TCP).
                        wr.flush().await?;
                    }
                    Some(Err(e)) => return Err(Close::Protocol(e)),
                    None => {}
                }
                others -= usize::from(!is_produce(held.kind));
                drop(held);
            }
            Some((out, held)) = unordered.next(), if !unordered.is_empty() => {
                if let Some(Ok(mut frame)) = out {
                    meters.bytes_out.add(frame.len() as u64);
                    zone_bytes.count(&*handler, &conn, held.kind, true, frame.len() as u64);
                    wr.write_all_buf(&mut frame).await?;
                    wr.flush().await?;
                }
                others -= usize::from(!is_produce(held.kind));
                drop(held);
            }
            _ = tokio::time::sleep_until(muted.unwrap_or_else(Instant::now).into()), if muted.is_some() => {}
            frame = rx.recv(), if reading && muted.is_none() && others < config.max_in_flight
                && produces < config.max_produces_in_flight => match frame {
                Some(Ok((frame, mut held))) => {
                    let key = frame.get(..2).map_or(-1, |k| i16::from_be_bytes([k[0], k[1]]));
                    held.kind = kind_of(key);
                    let size = 4 + frame.len() as u64;
                    let introduction = BEFORE_AUTHENTICATION.contains(&key)
                        || (conn.internal
                            && matches!(key, weir_zone::wire::HELLO | weir_zone::wire::HELLO_CHALLENGE));
                    if !introduction && !conn.may_serve(Instant::now()) {
                        meters.unauthenticated_requests.inc();
                        tracing::info!(%peer, api_key = key, listener = %conn.listener.name,
                            "a request before authentication, or after the session ended; closing the connection");
                        return Ok(());
                    }
                    let internal = conn.internal && key >= INTERNAL_KEY_BASE;
                    let started = if internal {
                        internal_request(&handler, frame, &conn, held).await.map(|p| p.map(|p| (p, true)))
                    } else {
                        request(&handler, frame, &conn, held, meters, config.stuck_after).await.map(|p| p.map(|p| (p, false)))
                    };
                    // Between brokers each side counts what it sends; a client's bytes are
                    // counted here both ways.
                    if !conn.internal {
                        zone_bytes.count(&*handler, &conn, kind_of(key), false, size);
                    }
                    let other = usize::from(!is_produce(kind_of(key)));
                    match started {
                    Ok(Some((p, false))) => {
                        others += other;
                        pending.push_back(p);
                        // A failed authentication: its answer is the last.
                        if BEFORE_AUTHENTICATION.contains(&key) && conn.closing() {
                            reading = false;
                        }
                    }
                    Ok(Some((p, true))) => {
                        others += other;
                        unordered.push(p);
                    }
                    Ok(None) => {}
                    Err(Close::Protocol(msg)) => {
                        meters.rejected_frames.inc();
                        tracing::warn!(%peer, "{msg}");
                        return Ok(());
                    }
                    Err(e) => return Err(e),
                    }
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
        if !reading && pending.is_empty() && unordered.is_empty() {
            return Ok(());
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

/// Runs an answer that waits (a produce's durability, a fetch's long poll, a group join) on a
/// task of its own, and gives back its outcome (`Err`: its panic, or its cancellation), so
/// that it progresses whether or not its connection's task is polling it. The connection's
/// task polls its waiting answers only between requests; left there, an answer handed a lock
/// (the metadata store's connection, a group's writer) while its connection waited inside the
/// next request for that same lock never moved again, and neither did anyone else who needed
/// it (the broker wedged on franz-go's transactional ETL test). Dropping the returned future
/// (the connection closed) cancels the task, as dropping the answer itself did.
fn detach<T: Send + 'static>(
    f: impl Future<Output = T> + Send + 'static,
) -> impl Future<Output = Result<T, Box<dyn std::any::Any + Send>>> + Send + 'static {
    struct Task<T>(tokio::task::JoinHandle<T>);
    impl<T> Drop for Task<T> {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let mut task = Task(tokio::spawn(f));
    async move {
        (&mut task.0).await.map_err(|e| match e.try_into_panic() {
            Ok(panic) => panic,
            Err(_) => Box::new("the task answering the request was cancelled")
                as Box<dyn std::any::Any + Send>,
        })
    }
}

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
        .map_err(|e| format!("malformed {key:?} v{version} request header: {e:#}"))?;
    let body = RequestKind::decode(key, &mut buf, version)
        .map_err(|e| format!("malformed {key:?} v{version} request: {e:#}"))?;
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
/// A handler that panics (now or in its later answer), or whose response does not encode at
/// the request's version, is answered with the API's error response, not a closed connection.
/// Dispatches one internal request: `length, key, version, correlation id, body`; the answer
/// is `length, correlation id, body`.
async fn internal_request<H: Handler>(
    handler: &Arc<H>,
    mut frame: Bytes,
    conn: &Conn,
    held: Held,
) -> Result<Option<Pending>, Close> {
    if frame.len() < 8 {
        return Err(Close::Protocol(
            "internal request too short for a header".into(),
        ));
    }
    let key = frame.get_i16();
    let _version = frame.get_i16();
    let correlation = frame.get_i32();
    let reply = handler
        .handle_internal(key, frame, conn)
        .await
        .map_err(|e| {
            Close::Protocol(format!(
                "internal request {key}: {e}; closing the connection"
            ))
        })?;
    Ok(Some(
        detach(reply)
            .map(move |r| {
                let out = match r {
                    Ok(Some(body)) => {
                        let mut b = BytesMut::with_capacity(8 + body.len());
                        b.extend_from_slice(&((4 + body.len()) as u32).to_be_bytes());
                        b.extend_from_slice(&correlation.to_be_bytes());
                        b.extend_from_slice(&body);
                        Some(Ok(ResponseFrame::from(b)))
                    }
                    Ok(None) => None,
                    Err(panic) => {
                        tracing::error!(key, panic = %panic_message(panic), "an internal request handler panicked; the peer's call fails");
                        None
                    }
                };
                (out, held)
            })
            .boxed(),
    ))
}

async fn request<H: Handler>(
    handler: &Arc<H>,
    frame: Bytes,
    conn: &Conn,
    held: Held,
    meters: &Arc<NetworkMeters>,
    stuck_after: Duration,
) -> Result<Option<Pending>, Close> {
    // The handler consumes the request; a failure answer is built from the frame again (a
    // reference, not a copy).
    let original = frame.clone();
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
            return Ok(Some(
                futures::future::ready((Some(Ok(bytes)), held)).boxed(),
            ));
        }
    };
    let key = ApiKey::try_from(header.request_api_key)
        .map_err(|_| Close::Protocol("unknown API key".into()))?;
    let registered = InFlight::register(
        meters,
        key,
        &body,
        stuck_after,
        conn.peer,
        header.client_id.clone(),
        header.correlation_id,
    );
    let reply = AssertUnwindSafe(handler.handle(&header, body, conn))
        .catch_unwind()
        .await;
    let meters = Arc::clone(meters);
    let reply = match reply {
        Ok(Reply::Silent(f)) => {
            return Ok(Some(
                detach(f)
                    .map(move |r| {
                        drop(registered);
                        if let Err(panic) = r {
                            meters.handler_panics.inc();
                            tracing::error!(api = ?key, panic = %panic_message(panic),
                                "a request handler without a response panicked");
                        }
                        (None, held)
                    })
                    .boxed(),
            ))
        }
        other => other,
    };
    let finish = move |outcome: Result<ResponseKind, String>| {
        (Some(answer(&header, key, outcome, original, &meters)), held)
    };
    Ok(match reply {
        Ok(Reply::Now(r)) => Some(futures::future::ready(finish(Ok(*r))).boxed()),
        Ok(Reply::Later(f)) => Some(
            detach(f)
                .map(move |r| {
                    drop(registered);
                    finish(r.map_err(panic_message))
                })
                .boxed(),
        ),
        Ok(Reply::Silent(_)) => None,
        Ok(Reply::Unsupported) => {
            return Err(Close::Protocol(format!(
                "{key:?} is not implemented by Weir; closing the connection"
            )))
        }
        Err(panic) => Some(futures::future::ready(finish(Err(panic_message(panic)))).boxed()),
    })
}

fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// The encoded answer to a request: its response, or if the handler panicked (`Err`) or the
/// response does not encode, the API's error response (UNKNOWN_SERVER_ERROR). `Err` only if
/// even that cannot be encoded, which closes the connection.
fn answer(
    header: &RequestHeader,
    key: ApiKey,
    outcome: Result<ResponseKind, String>,
    frame: Bytes,
    meters: &NetworkMeters,
) -> Result<ResponseFrame, String> {
    let version = header.request_api_version;
    match outcome {
        Ok(response) => match encode_response(header, &response) {
            Ok(bytes) => return Ok(bytes),
            Err(e) => {
                meters.response_encode_errors.inc();
                tracing::error!(api = ?key, api_key = key as i16, version, error = %e,
                    "a response does not encode at its request's version; answering UNKNOWN_SERVER_ERROR");
            }
        },
        Err(panic) => {
            meters.handler_panics.inc();
            tracing::error!(api = ?key, api_key = key as i16, version, panic = %panic,
                "a request handler panicked; answering UNKNOWN_SERVER_ERROR");
        }
    }
    let fallback = match decode_request(frame) {
        Ok(Decoded::Request(_, request)) => error_response(header, &request),
        _ => None,
    };
    let fallback = fallback.ok_or_else(|| {
        format!("{key:?} v{version} has no error response; closing the connection")
    })?;
    encode_response(header, &fallback).map_err(|e| {
        tracing::error!(api = ?key, version, error = %e, "the error response does not encode either; closing the connection");
        format!("encoding a {key:?} v{version} error response: {e}; closing the connection")
    })
}

fn weir_api_versions(code: i16) -> kafka_protocol::messages::ApiVersionsResponse {
    weir_api::api_versions_response(code)
}
