//! Admin HTTP: `/metrics` (Prometheus text format), `/healthz` (the process is up), `/readyz`
//! (the broker serves Kafka requests), and the cluster API under `/v1` (brokers, partitions,
//! partition moves, draining a broker), which answers JSON. With `broker.fault_switch` on (chaos
//! drills, tests), `PUT /v1/faults` switches the WAL's and the object store's fault injection.
//!
//! Served by axum over hyper: the `/v1` routes take request bodies (reassignments), and request
//! bodies are where hand-written HTTP goes wrong (framing, chunked encoding, size limits).
//! hyper is in the build anyway (the object-store client); axum adds the routing.
//!
//! Every response closes its connection, as the hand-written server did: the scrapers in this
//! repository (`weir cost`, the test harness) read a response to EOF, and admin traffic is a
//! few requests a minute, so keep-alive would buy nothing.

use std::fmt::Write as _;
use std::future::IntoFuture as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Request, State as Shared};
use axum::http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use tokio::net::TcpListener;
use weir_metrics::{Counter, Histogram, HistogramSnapshot, BUCKETS};

/// The largest request body taken (a reassignment of every partition of a large cluster fits
/// many times over).
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// How long shutdown waits for admin requests under way. hyper has no timer here, so a client
/// that sent half a request would otherwise hold the broker's exit forever.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What the admin API asks of the cluster layer (implemented by the broker's cluster wiring).
#[async_trait::async_trait]
pub trait ClusterAdmin: Send + Sync + 'static {
    /// Brokers and the controller, as JSON.
    async fn cluster(&self) -> serde_json::Value;
    /// Every partition: topic, partition, leader, leader epoch, target of a move under way.
    async fn partitions(&self) -> serde_json::Value;
    /// Starts moving `topic`-`partition` to broker `broker`. Err((http status, message)).
    async fn reassign(&self, topic: &str, partition: i32, broker: i32)
        -> Result<(), (u16, String)>;
    /// Moves under way.
    async fn reassignments(&self) -> serde_json::Value;
    /// Starts draining broker `broker` (moving all its partitions away). Err((status, message)).
    async fn drain(&self, broker: i32) -> Result<serde_json::Value, (u16, String)>;
}

#[derive(Clone)]
pub struct State {
    pub ready: Arc<AtomicBool>,
    pub engine: weir_storage::Engine,
    pub broker: Arc<weir_api::Broker>,
    pub network: Arc<weir_network::NetworkMeters>,
    /// The cluster layer; `None` where there is none (the `/v1` routes answer 503).
    pub cluster: Option<Arc<dyn ClusterAdmin>>,
    /// The run-time fault switch, when `broker.fault_switch` is on.
    pub faults: Option<Arc<FaultSwitch>>,
    /// `broker.admin_token`: every route but `/healthz` and `/readyz` wants
    /// `Authorization: Bearer <token>`.
    pub token: Option<Arc<str>>,
}

/// The run-time fault switch: `PUT /v1/faults` changes the faults injected into the WAL's group
/// writes and into object-store requests, `GET /v1/faults` shows them.
pub struct FaultSwitch {
    /// `None` on a broker without a WAL file (`wal.kind = "object"`).
    wal: Option<Arc<weir_wal::FileWal>>,
    store: weir_storage::objstore::FaultyStore,
    current: std::sync::Mutex<(weir_wal::WalFaults, weir_storage::objstore::FaultConfig)>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct WalFaultsBody {
    write_error_rate: f64,
    sync_error_rate: f64,
    latency_ms: u64,
    seed: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct StoreFaultsBody {
    put_error_rate: f64,
    get_error_rate: f64,
    latency_ms: u64,
    put_latency_ms: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct FaultsBody {
    wal: Option<WalFaultsBody>,
    object_store: Option<StoreFaultsBody>,
}

impl FaultSwitch {
    pub fn new(
        wal: Option<Arc<weir_wal::FileWal>>,
        store: weir_storage::objstore::FaultyStore,
        wal_faults: weir_wal::WalFaults,
        store_faults: weir_storage::objstore::FaultConfig,
    ) -> FaultSwitch {
        FaultSwitch {
            wal,
            store,
            current: std::sync::Mutex::new((wal_faults, store_faults)),
        }
    }

    fn show(&self) -> serde_json::Value {
        let c = self.current.lock().unwrap_or_else(|e| e.into_inner());
        serde_json::json!({
            "wal": {
                "write_error_rate": c.0.write_error_rate,
                "sync_error_rate": c.0.sync_error_rate,
                "latency_ms": c.0.latency.as_millis() as u64,
                "seed": c.0.seed,
            },
            "object_store": {
                "put_error_rate": c.1.put_error_rate,
                "get_error_rate": c.1.get_error_rate,
                "latency_ms": c.1.latency.as_millis() as u64,
                "put_latency_ms": c.1.put_latency.as_millis() as u64,
            },
        })
    }

    /// Applies the sections given (both checked before either changes).
    fn apply(&self, body: FaultsBody) -> Result<serde_json::Value, String> {
        let wal = body.wal.map(|w| weir_wal::WalFaults {
            write_error_rate: w.write_error_rate,
            sync_error_rate: w.sync_error_rate,
            latency: Duration::from_millis(w.latency_ms),
            seed: w.seed,
        });
        let store = body
            .object_store
            .map(|o| weir_storage::objstore::FaultConfig {
                put_error_rate: o.put_error_rate,
                get_error_rate: o.get_error_rate,
                latency: Duration::from_millis(o.latency_ms),
                put_latency: Duration::from_millis(o.put_latency_ms),
            });
        if let Some(w) = &wal {
            w.validate()?;
        }
        if let Some(o) = &store {
            o.validate()?;
        }
        {
            let mut c = self.current.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(w) = wal {
                tracing::warn!(faults = ?w, "WAL fault injection switched");
                if let Some(wal) = &self.wal {
                    wal.set_faults(w.clone());
                }
                c.0 = w;
            }
            if let Some(o) = store {
                tracing::warn!(faults = ?o, "object-store fault injection switched");
                self.store.set_faults(o.clone());
                c.1 = o;
            }
        }
        Ok(self.show())
    }
}

/// What the routes need: `State` narrowed to a metrics renderer, so that the unit tests serve
/// the routes without a storage engine.
#[derive(Clone)]
struct App {
    ready: Arc<AtomicBool>,
    metrics: Arc<dyn Fn() -> String + Send + Sync>,
    cluster: Option<Arc<dyn ClusterAdmin>>,
    faults: Option<Arc<FaultSwitch>>,
    /// The broker, for the zone routes (`None` in tests of the HTTP layer alone).
    broker: Option<Arc<weir_api::Broker>>,
    token: Option<Arc<str>>,
    /// Requests in flight: the broker is not ready while any is stuck (`None` in tests of the
    /// HTTP layer alone).
    network: Option<Arc<weir_network::NetworkMeters>>,
}

/// Serves admin HTTP on `listener` until `shutdown` turns true (or its sender goes away), then
/// lets requests under way finish, for [`SHUTDOWN_GRACE`] at most.
pub async fn serve(
    listener: TcpListener,
    state: State,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let app = App {
        ready: Arc::clone(&state.ready),
        cluster: state.cluster.clone(),
        faults: state.faults.clone(),
        broker: Some(Arc::clone(&state.broker)),
        token: state.token.clone(),
        network: Some(Arc::clone(&state.network)),
        metrics: Arc::new(move || render(&state)),
    };
    serve_app(listener, app, shutdown, SHUTDOWN_GRACE).await
}

async fn serve_app(
    listener: TcpListener,
    app: App,
    shutdown: tokio::sync::watch::Receiver<bool>,
    grace: Duration,
) {
    async fn stopped(mut shutdown: tokio::sync::watch::Receiver<bool>) {
        // An error means the sender is gone: nobody can ask for a stop any more, so stop.
        let _ = shutdown.wait_for(|stop| *stop).await;
    }
    let server = axum::serve(listener, router(app))
        .with_graceful_shutdown(stopped(shutdown.clone()))
        .into_future();
    tokio::select! {
        result = server => {
            if let Err(e) = result {
                tracing::warn!(error = %e, "admin HTTP server failed");
            }
        }
        _ = async {
            stopped(shutdown).await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(?grace, "admin HTTP requests still open at shutdown; not waiting for them");
        }
    }
}

fn router(app: App) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/cluster", get(cluster))
        .route("/v1/partitions", get(partitions))
        .route(
            "/v1/reassignments",
            get(reassignments).post(start_reassignments),
        )
        .route("/v1/brokers/{id}/drain", post(drain))
        .route("/v1/faults", get(show_faults).put(switch_faults))
        .route("/v1/zones/cidrs", get(show_cidrs).put(set_cidrs))
        // After the routes: it applies to those already added.
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(app.clone(), authorize))
        .layer(axum::middleware::map_response(close_connection))
        .with_state(app)
}

/// With `broker.admin_token` set, a request without it is answered 401: the probes
/// (`/healthz`, `/readyz`) stay open for orchestrators that cannot send headers.
async fn authorize(
    Shared(app): Shared<App>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(token) = &app.token else {
        return next.run(request).await;
    };
    if matches!(request.uri().path(), "/healthz" | "/readyz") {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // Compared in constant time: the token is a password.
    let ok = given.is_some_and(|g| {
        g.len() == token.len()
            && g.bytes()
                .zip(token.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    });
    if ok {
        next.run(request).await
    } else {
        let mut r = json_error(
            401,
            "this admin API wants Authorization: Bearer <broker.admin_token>",
        );
        r.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer"),
        );
        r
    }
}

async fn close_connection(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response {
    (status, [(CONTENT_TYPE, content_type)], body).into_response()
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response {
    let mut body = value.to_string();
    body.push('\n');
    (status, [(CONTENT_TYPE, "application/json")], body).into_response()
}

/// `{"error": message}` with `status` (500 if `status` is not an HTTP status).
fn json_error(status: u16, message: impl Into<String>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(status, &serde_json::json!({ "error": message.into() }))
}

async fn healthz() -> Response {
    text(StatusCode::OK, "text/plain", "ok\n".into())
}

async fn readyz(Shared(app): Shared<App>) -> Response {
    let stuck = app.network.as_ref().map_or(0, |n| n.in_flight.stuck());
    if stuck > 0 {
        // Stuck requests mean something in the broker waits for what will not happen: an
        // orchestrator should replace it (its partitions fail over as after a crash).
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            format!("not ready: {stuck} requests stuck (weir_requests_stuck)\n"),
        )
    } else if app.ready.load(Ordering::SeqCst) {
        text(StatusCode::OK, "text/plain", "ready\n".into())
    } else {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "not ready\n".into(),
        )
    }
}

async fn metrics(Shared(app): Shared<App>) -> Response {
    text(StatusCode::OK, "text/plain; version=0.0.4", (app.metrics)())
}

fn is_api(uri: &Uri) -> bool {
    uri.path() == "/v1" || uri.path().starts_with("/v1/")
}

async fn not_found(uri: Uri) -> Response {
    if is_api(&uri) {
        json_error(404, format!("no such route: {}", uri.path()))
    } else {
        text(StatusCode::NOT_FOUND, "text/plain", "not found\n".into())
    }
}

async fn method_not_allowed(uri: Uri) -> Response {
    if is_api(&uri) {
        json_error(405, "method not allowed")
    } else {
        text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n".into(),
        )
    }
}

fn no_cluster() -> Response {
    json_error(503, "this broker runs without a cluster layer")
}

async fn cluster(Shared(app): Shared<App>) -> Response {
    match &app.cluster {
        Some(c) => json(StatusCode::OK, &c.cluster().await),
        None => no_cluster(),
    }
}

async fn partitions(Shared(app): Shared<App>) -> Response {
    match &app.cluster {
        Some(c) => json(StatusCode::OK, &c.partitions().await),
        None => no_cluster(),
    }
}

async fn reassignments(Shared(app): Shared<App>) -> Response {
    match &app.cluster {
        Some(c) => json(StatusCode::OK, &c.reassignments().await),
        None => no_cluster(),
    }
}

/// `POST /v1/reassignments`: `{"partitions":[{"topic":"t","partition":0,"broker":2}, ...]}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReassignRequest {
    partitions: Vec<PartitionMove>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartitionMove {
    topic: String,
    partition: i32,
    broker: i32,
}

/// Starts each move in the body, in order, and answers
/// `{"partitions":[{"topic","partition","error": null | message}, ...]}` in the same order.
/// A request's body, at most [`MAX_BODY_BYTES`], or the error response.
async fn body_bytes(request: Request) -> Result<Bytes, Response> {
    // Refused before reading when the client says how long the body is: no point in reading
    // a megabyte to throw it away.
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(json_error(
            413,
            format!("request body over {MAX_BODY_BYTES} bytes"),
        ));
    }
    // Chunked bodies are cut at the same limit (DefaultBodyLimit) while they are read.
    Bytes::from_request(request, &())
        .await
        .map_err(|rejection| {
            let status = rejection.status();
            let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
                format!("request body over {MAX_BODY_BYTES} bytes")
            } else {
                rejection.body_text()
            };
            json_error(status.as_u16(), message)
        })
}

fn no_fault_switch() -> Response {
    json_error(
        404,
        "the fault switch is off: start the broker with broker.fault_switch = true (WEIR_BROKER_FAULT_SWITCH=true)",
    )
}

/// The CIDR map that places clients in zones, as stored: `CIDR ZONE` per line.
async fn show_cidrs(Shared(app): Shared<App>) -> Response {
    let Some(broker) = &app.broker else {
        return json_error(503, "no broker");
    };
    match broker.meta.get_value(weir_zone::CIDR_MAP_KEY).await {
        Ok(v) => text(StatusCode::OK, "text/plain", v.unwrap_or_default()),
        Err(e) => json_error(503, format!("reading the CIDR map: {e}")),
    }
}

/// Replaces the CIDR map (every broker reloads it within seconds). The body is `CIDR ZONE` per
/// line; a line that does not parse refuses the whole map.
async fn set_cidrs(Shared(app): Shared<App>, request: Request) -> Response {
    let Some(broker) = app.broker.clone() else {
        return json_error(503, "no broker");
    };
    let body = match body_bytes(request).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Ok(text_body) = std::str::from_utf8(&body) else {
        return json_error(400, "the CIDR map must be UTF-8 text");
    };
    let map = match weir_zone::parse_cidr_map(text_body) {
        Ok(m) => m,
        Err(e) => return json_error(400, format!("CIDR map: {e}")),
    };
    if let Err(e) = broker
        .meta
        .set_value(weir_zone::CIDR_MAP_KEY, text_body)
        .await
    {
        return json_error(503, format!("storing the CIDR map: {e}"));
    }
    if let Some(z) = &broker.zones {
        z.set_cidrs(map.clone());
    }
    tracing::info!(entries = map.len(), "admin: CIDR map replaced");
    json(StatusCode::OK, &serde_json::json!({ "entries": map.len() }))
}

async fn show_faults(Shared(app): Shared<App>) -> Response {
    match &app.faults {
        Some(f) => json(StatusCode::OK, &f.show()),
        None => no_fault_switch(),
    }
}

async fn switch_faults(Shared(app): Shared<App>, request: Request) -> Response {
    let Some(faults) = &app.faults else {
        return no_fault_switch();
    };
    let body = match body_bytes(request).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let parsed: FaultsBody = match serde_json::from_slice(&body) {
        Ok(p) => p,
        Err(e) => {
            return json_error(
                400,
                format!("expected {{\"wal\": {{\"write_error_rate\": 0.1, ...}}, \"object_store\": {{\"put_error_rate\": 0.1, ...}}}}: {e}"),
            )
        }
    };
    match faults.apply(parsed) {
        Ok(v) => json(StatusCode::OK, &v),
        Err(e) => json_error(400, e),
    }
}

async fn start_reassignments(Shared(app): Shared<App>, request: Request) -> Response {
    let body = match body_bytes(request).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let moves: ReassignRequest = match serde_json::from_slice(&body) {
        Ok(moves) => moves,
        Err(e) => {
            return json_error(
                400,
                format!(
                    "expected {{\"partitions\":[{{\"topic\":\"t\",\"partition\":0,\"broker\":2}}, ...]}}: {e}"
                ),
            )
        }
    };
    if moves.partitions.is_empty() {
        return json_error(400, "\"partitions\" is empty: nothing to move");
    }
    let Some(cluster) = &app.cluster else {
        return no_cluster();
    };
    let mut results = Vec::with_capacity(moves.partitions.len());
    for m in &moves.partitions {
        let error = match cluster.reassign(&m.topic, m.partition, m.broker).await {
            Ok(()) => {
                tracing::info!(topic = %m.topic, partition = m.partition, broker = m.broker, "admin: partition move started");
                None
            }
            Err((status, message)) => {
                tracing::info!(topic = %m.topic, partition = m.partition, broker = m.broker, status, %message, "admin: partition move refused");
                Some(message)
            }
        };
        results.push(serde_json::json!({
            "topic": m.topic,
            "partition": m.partition,
            "error": error,
        }));
    }
    json(
        StatusCode::OK,
        &serde_json::json!({ "partitions": results }),
    )
}

async fn drain(Shared(app): Shared<App>, id: Result<Path<i32>, PathRejection>) -> Response {
    let Path(id) = match id {
        Ok(id) => id,
        Err(rejection) => {
            return json_error(
                400,
                format!(
                    "the broker id must be an integer: {}",
                    rejection.body_text()
                ),
            )
        }
    };
    let Some(cluster) = &app.cluster else {
        return no_cluster();
    };
    match cluster.drain(id).await {
        Ok(value) => {
            tracing::info!(broker = id, "admin: drain started");
            json(StatusCode::OK, &value)
        }
        Err((status, message)) => json_error(status, message),
    }
}

fn counter(out: &mut String, name: &str, help: &str, labels: &str, c: &Counter) {
    let _ = writeln!(
        out,
        "# HELP weir_{name}_total {help}\n# TYPE weir_{name}_total counter"
    );
    let _ = writeln!(out, "weir_{name}_total{labels} {}", c.get());
}

fn gauge(out: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(
        out,
        "# HELP weir_{name} {help}\n# TYPE weir_{name} gauge\nweir_{name} {v}"
    );
}

fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram) {
    let s: HistogramSnapshot = h.snapshot();
    let _ = writeln!(
        out,
        "# HELP weir_{name}_seconds {help}\n# TYPE weir_{name}_seconds histogram"
    );
    let mut cumulative = 0;
    for (i, n) in s.buckets.iter().enumerate().take(BUCKETS - 1) {
        cumulative += n;
        let le = HistogramSnapshot::bucket_upper_micros(i) as f64 / 1e6;
        let _ = writeln!(
            out,
            "weir_{name}_seconds_bucket{{le=\"{le}\"}} {cumulative}"
        );
    }
    let _ = writeln!(out, "weir_{name}_seconds_bucket{{le=\"+Inf\"}} {}", s.count);
    let _ = writeln!(out, "weir_{name}_seconds_sum {}", s.sum_micros as f64 / 1e6);
    let _ = writeln!(out, "weir_{name}_seconds_count {}", s.count);
}

/// Load (this broker's and its partitions') and the balancer's rounds, moves and gauges.
fn render_txns(o: &mut String, m: &weir_txn::TxnMeters) {
    let _ = writeln!(
        o,
        "# HELP weir_transactions_total Transactions this broker coordinated, by what happened: begun, committed, aborted (by the producer, a new producer of the id, or a timeout), timed_out.\n# TYPE weir_transactions_total counter"
    );
    for (event, c) in [
        ("begun", &m.begun),
        ("committed", &m.committed),
        ("aborted", &m.aborted),
        ("timed_out", &m.timed_out),
    ] {
        let _ = writeln!(
            o,
            "weir_transactions_total{{event=\"{event}\"}} {}",
            c.get()
        );
    }
    counter(
        o,
        "transaction_markers",
        "Transaction markers written for transactions this broker coordinated.",
        "",
        &m.markers,
    );
}

fn render_cleaner(o: &mut String, m: &weir_partition::CleanerMeters) {
    counter(
        o,
        "cleaner_cleans",
        "Cleans of compacted partitions that rewrote data.",
        "",
        &m.cleans,
    );
    counter(
        o,
        "cleaner_records_removed",
        "Records the cleaner of compacted topics removed (superseded, deleted, aborted).",
        "",
        &m.records_removed,
    );
    counter(
        o,
        "cleaner_bytes_read",
        "Bytes of the ranges the cleaner rewrote.",
        "",
        &m.bytes_read,
    );
    counter(
        o,
        "cleaner_bytes_written",
        "Bytes the cleaner wrote in their place.",
        "",
        &m.bytes_written,
    );
    counter(
        o,
        "cleaner_failures",
        "Cleans that failed (retried at the next round).",
        "",
        &m.failures,
    );
}

fn render_balancer(o: &mut String, m: &weir_cluster::load::BalancerMeters) {
    use std::sync::atomic::Ordering::Relaxed;
    let _ = writeln!(
        o,
        "# HELP weir_balancer_moves_total Partition moves the balancer asked for (on the controller), by goal.\n# TYPE weir_balancer_moves_total counter"
    );
    for (goal, c) in [
        ("capacity", &m.moves_capacity),
        ("bytes_in", &m.moves_bytes_in),
        ("bytes_out", &m.moves_bytes_out),
        ("count", &m.moves_count),
        ("zones", &m.moves_zones),
    ] {
        let _ = writeln!(
            o,
            "weir_balancer_moves_total{{goal=\"{goal}\"}} {}",
            c.get()
        );
    }
    counter(
        o,
        "balancer_rounds",
        "Balancing rounds run (on the controller).",
        "",
        &m.rounds,
    );
    let ratio = |v: u64| v as f64 / 1000.0;
    let _ = writeln!(
        o,
        "# HELP weir_balancer_imbalance Controller: the largest deviation of a broker's bytes from the mean, relative to the mean, by direction.\n# TYPE weir_balancer_imbalance gauge\nweir_balancer_imbalance{{direction=\"in\"}} {}\nweir_balancer_imbalance{{direction=\"out\"}} {}",
        ratio(m.imbalance_in_permille.load(Relaxed)),
        ratio(m.imbalance_out_permille.load(Relaxed))
    );
    gauge(
        o,
        "cluster_bytes_per_sec",
        "Controller: bytes in plus out per second of the brokers that take partitions.",
        m.cluster_bytes_per_sec.load(Relaxed),
    );
    let _ = writeln!(
        o,
        "# HELP weir_cluster_load_ratio Controller: the cluster's bytes in plus out against the capacity of its brokers (balancer.capacity_bytes_per_sec each; 0 without one): scale out above about 0.8, in below about 0.3.\n# TYPE weir_cluster_load_ratio gauge\nweir_cluster_load_ratio {}",
        ratio(m.cluster_load_permille.load(Relaxed))
    );
    gauge(
        o,
        "broker_bytes_in_per_sec",
        "This broker's produce bytes per second, as last reported to the balancer.",
        m.bytes_in_per_sec.load(Relaxed),
    );
    gauge(
        o,
        "broker_bytes_out_per_sec",
        "This broker's fetch bytes per second, as last reported to the balancer.",
        m.bytes_out_per_sec.load(Relaxed),
    );
    gauge(
        o,
        "broker_requests_per_sec",
        "This broker's produce and fetch requests per second (per partition served), as last reported to the balancer.",
        m.requests_per_sec.load(Relaxed),
    );
    let _ = writeln!(
        o,
        "# HELP weir_broker_cpu This broker's CPU seconds per second, as last reported.\n# TYPE weir_broker_cpu gauge\nweir_broker_cpu {}",
        ratio(m.cpu_permille.load(Relaxed))
    );
    let rates = m.partition_rates();
    let _ = writeln!(
        o,
        "# HELP weir_partition_bytes_per_sec Bytes per second of each partition led here, by direction, as last reported.\n# TYPE weir_partition_bytes_per_sec gauge"
    );
    for r in &rates {
        for (dir, v) in [("in", r.bytes_in), ("out", r.bytes_out)] {
            let _ = writeln!(
                o,
                "weir_partition_bytes_per_sec{{topic=\"{}\",partition=\"{}\",direction=\"{dir}\"}} {v:.0}",
                r.topic, r.partition
            );
        }
    }
    let _ = writeln!(
        o,
        "# HELP weir_partition_requests_per_sec Produce and fetch requests per second of each partition led here, as last reported.\n# TYPE weir_partition_requests_per_sec gauge"
    );
    for r in &rates {
        let _ = writeln!(
            o,
            "weir_partition_requests_per_sec{{topic=\"{}\",partition=\"{}\"}} {:.1}",
            r.topic, r.partition, r.requests
        );
    }
}

/// Bytes per zone pair, and zone routing's counters.
fn render_zones(o: &mut String, z: &weir_api::ZoneServices) {
    let _ = writeln!(
        o,
        "# HELP weir_net_bytes_total Bytes on sockets by source zone, destination zone and kind (produce and fetch are data; a client's bytes are counted by its broker both ways, bytes between brokers by their sender).\n# TYPE weir_net_bytes_total counter"
    );
    for (src, dst, kind, bytes) in z.net.snapshot() {
        let _ = writeln!(
            o,
            "weir_net_bytes_total{{src_zone=\"{src}\",dst_zone=\"{dst}\",kind=\"{}\"}} {bytes}",
            kind.as_str()
        );
    }
    let m = &z.meters;
    counter(o, "zone_unknown_clients", "Client connections (or client ids) placed in no zone while this broker has one; routed to leaders.", "", &m.unknown_zone_clients);
    counter(
        o,
        "zone_forwarded_partitions",
        "Partitions of produce requests forwarded to a leader in another zone.",
        "",
        &m.forwarded_partitions,
    );
    counter(
        o,
        "zone_remote_fetches",
        "Partitions of fetch requests served here for a leader in another zone.",
        "",
        &m.remote_fetches,
    );
    counter(
        o,
        "zone_remote_read_uploads",
        "Uploads started so that other zones read partitions led here.",
        "",
        &m.remote_read_uploads,
    );
    let h = &z.forwarder.meters;
    counter(
        o,
        "handoff_objects",
        "Hand-off objects written (produce forwarded to another zone's leader).",
        "",
        &h.objects,
    );
    counter(
        o,
        "handoff_bytes",
        "Record bytes written in hand-off objects.",
        "",
        &h.bytes,
    );
    counter(
        o,
        "handoff_entries",
        "Partitions' produces forwarded through hand-off objects.",
        "",
        &h.entries,
    );
    counter(
        o,
        "handoff_failures",
        "Forwarded produces that failed (a PUT, an unreachable leader, a timeout).",
        "",
        &h.failures,
    );
    histogram(
        o,
        "handoff",
        "From sealing a hand-off object to its leaders' answers.",
        &h.latency,
    );
}

fn render(state: &State) -> String {
    let mut o = String::with_capacity(16 << 10);
    let w = state.engine.wal().meters();
    let usage = state.engine.wal().usage();
    counter(
        &mut o,
        "wal_appends",
        "Records appended to the WAL.",
        "",
        &w.appends,
    );
    counter(
        &mut o,
        "wal_bytes_written",
        "Bytes written to the WAL device, padding included.",
        "",
        &w.bytes_written,
    );
    counter(
        &mut o,
        "wal_syncs",
        "WAL writes made durable (one per group commit).",
        "",
        &w.syncs,
    );
    counter(
        &mut o,
        "wal_write_errors",
        "Failed WAL writes.",
        "",
        &w.write_errors,
    );
    counter(
        &mut o,
        "wal_full_rejections",
        "Appends refused because the WAL was full.",
        "",
        &w.full_rejections,
    );
    histogram(
        &mut o,
        "wal_sync_latency",
        "Time of one WAL write plus its sync.",
        &w.sync_latency,
    );
    counter(
        &mut o,
        "wal_refused_acks",
        "WAL writes that were durable but not acknowledged: the broker's session had lapsed or a peer had sealed its WAL.",
        "",
        &w.refused_acks,
    );
    let cluster = &state.broker.cluster;
    render_balancer(&mut o, &cluster.balancer_meters);
    render_txns(&mut o, &state.broker.txns.meters);
    render_cleaner(&mut o, &state.broker.topics.cleaner);
    let f = &cluster.failover;
    gauge(
        &mut o,
        "session_valid",
        "1 while this broker's cluster session is valid and it may acknowledge writes.",
        u64::from(cluster.may_acknowledge()),
    );
    counter(
        &mut o,
        "wal_recoveries",
        "WALs of fenced brokers this broker recovered.",
        "",
        &f.wal_recoveries,
    );
    counter(
        &mut o,
        "wal_recovery_failures",
        "WAL recoveries that failed part-way here (retried).",
        "",
        &f.wal_recovery_failures,
    );
    counter(
        &mut o,
        "wal_recoveries_unreachable",
        "WAL recoveries given back because this broker could not open the WAL.",
        "",
        &f.wals_unreachable,
    );
    gauge(
        &mut o,
        "wal_last_recovery_ms",
        "Milliseconds the last WAL recovery here took (seal, read, upload, commit).",
        f.last_recovery_ms
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    gauge(
        &mut o,
        "partitions_waiting_for_wal",
        "Controller: partitions of fenced brokers whose WAL no live broker can open; they wait for the broker to come back.",
        f.partitions_waiting_for_wal.load(std::sync::atomic::Ordering::Relaxed),
    );
    gauge(
        &mut o,
        "wals_awaiting_recovery",
        "Controller: WALs of fenced brokers not yet recovered.",
        f.wals_awaiting_recovery
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    gauge(
        &mut o,
        "wal_capacity_bytes",
        "WAL capacity.",
        usage.capacity,
    );
    gauge(
        &mut o,
        "wal_used_bytes",
        "WAL bytes not yet trimmed.",
        usage.used,
    );

    let s = state.engine.meters();
    counter(
        &mut o,
        "storage_appends",
        "Batches appended and durable.",
        "",
        &s.appends,
    );
    histogram(
        &mut o,
        "storage_append_latency",
        "Append latency: offset assignment to durable.",
        &s.append_latency,
    );
    counter(
        &mut o,
        "log_cache_hits",
        "Reads served from the log cache.",
        "",
        &s.log_cache_hits,
    );
    counter(
        &mut o,
        "log_cache_misses",
        "Reads that went to objects.",
        "",
        &s.log_cache_misses,
    );
    counter(
        &mut o,
        "index_lookups",
        "Look-ups of a stream's ranges in the metadata store by reads from object storage.",
        "",
        &s.index_lookups,
    );
    counter(
        &mut o,
        "log_cache_evicted_bytes",
        "Bytes evicted from the log cache.",
        "",
        &s.log_cache_evicted_bytes,
    );
    gauge(
        &mut o,
        "log_cache_bytes",
        "Bytes in the log cache.",
        state.engine.log_cache_bytes(),
    );
    counter(
        &mut o,
        "block_cache_hits",
        "Object blocks served from the block cache.",
        "",
        &s.block_cache_hits,
    );
    counter(
        &mut o,
        "block_cache_misses",
        "Object blocks fetched with ranged GETs.",
        "",
        &s.block_cache_misses,
    );
    counter(
        &mut o,
        "block_cache_fill_bytes",
        "Bytes fetched into the block cache.",
        "",
        &s.block_cache_fill_bytes,
    );
    counter(
        &mut o,
        "block_cache_evicted_unread_bytes",
        "Bytes of blocks evicted from the block cache before any read took them.",
        "",
        &s.block_cache_evicted_unread_bytes,
    );
    counter(
        &mut o,
        "block_in_flight_hits",
        "Object blocks a read found being fetched and waited for.",
        "",
        &s.block_in_flight_hits,
    );
    counter(
        &mut o,
        "readahead_bytes",
        "Bytes the read-ahead fetched from objects (also in block_cache_fill_bytes).",
        "",
        &s.readahead_bytes,
    );
    counter(
        &mut o,
        "object_read_bytes",
        "Payload bytes consumers' reads got from objects (through the block cache).",
        "",
        &s.object_read_bytes,
    );
    counter(
        &mut o,
        "background_get_bytes",
        "Bytes compaction and the cleaner fetched from objects (not cached).",
        "",
        &s.background_get_bytes,
    );
    gauge(
        &mut o,
        "block_cache_bytes",
        "Bytes held by the block cache.",
        s.block_cache_bytes
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    gauge(
        &mut o,
        "object_index_cache_bytes",
        "Bytes held by the cache of object indexes.",
        s.object_index_cache_bytes
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    counter(
        &mut o,
        "uploads",
        "Uploads (objects written and committed together).",
        "",
        &s.uploads,
    );
    histogram(
        &mut o,
        "metadata_commit",
        "Latency of committing an upload's objects to the metadata store (one transaction).",
        &s.commit_latency,
    );
    counter(
        &mut o,
        "objects_uploaded",
        "Objects written.",
        "",
        &s.objects_uploaded,
    );
    counter(
        &mut o,
        "upload_bytes",
        "Bytes of objects written.",
        "",
        &s.upload_bytes,
    );
    counter(
        &mut o,
        "upload_errors",
        "Failed object PUTs (retried).",
        "",
        &s.upload_errors,
    );
    counter(
        &mut o,
        "wal_full_failures",
        "Appends failed because the WAL stayed full longer than wal.full_wait_ms (KAFKA_STORAGE_ERROR, retriable).",
        "",
        &s.wal_full_failures,
    );
    counter(
        &mut o,
        "recovered_batches",
        "Batches read back from a WAL at recovery (this broker's own at start, or a failed peer's) and uploaded.",
        "",
        &s.recovered_batches,
    );
    counter(
        &mut o,
        "compactions",
        "Compaction runs that replaced small objects with one larger object.",
        "",
        &s.compactions,
    );
    counter(
        &mut o,
        "compacted_bytes",
        "Bytes written by compaction (the objects that replaced smaller ones).",
        "",
        &s.compacted_bytes,
    );
    counter(
        &mut o,
        "objects_deleted",
        "Objects deleted by retention and cleanup.",
        "",
        &s.objects_deleted,
    );
    counter(
        &mut o,
        "object_wal_objects",
        "Objects the object WAL wrote and committed (each holds the batches it acknowledged).",
        "",
        &s.object_wal_objects,
    );
    counter(
        &mut o,
        "object_wal_bytes",
        "Payload bytes acknowledged through the object WAL.",
        "",
        &s.object_wal_bytes,
    );
    counter(
        &mut o,
        "object_wal_object_bytes",
        "Bytes of the objects the object WAL wrote (payload and object format), before compaction.",
        "",
        &s.object_wal_object_bytes,
    );
    counter(
        &mut o,
        "object_wal_failures",
        "Objects of the object WAL whose PUT or commit failed (their appends failed and were retried by clients).",
        "",
        &s.object_wal_failures,
    );
    histogram(
        &mut o,
        "object_wal",
        "Object WAL: from an object's first batch to its commit (linger, PUT, commit).",
        &s.object_wal_latency,
    );
    gauge(
        &mut o,
        "object_wal_pending_bytes",
        "Payload bytes handed to the object WAL and not yet committed.",
        s.object_wal_pending_bytes
            .load(std::sync::atomic::Ordering::Relaxed),
    );

    let m = state.engine.object_meters();
    let _ = writeln!(o, "# HELP weir_object_requests_total Object-store requests by kind.\n# TYPE weir_object_requests_total counter");
    for (kind, c) in [
        ("put", &m.puts),
        ("get", &m.gets),
        ("delete", &m.deletes),
        ("list", &m.lists),
        ("multipart_part", &m.multipart_parts),
    ] {
        let _ = writeln!(
            o,
            "weir_object_requests_total{{kind=\"{kind}\"}} {}",
            c.get()
        );
    }
    let _ = writeln!(o, "# HELP weir_object_bytes_total Object-store bytes by direction.\n# TYPE weir_object_bytes_total counter");
    let _ = writeln!(
        o,
        "weir_object_bytes_total{{kind=\"put\"}} {}",
        m.put_bytes.get()
    );
    let _ = writeln!(
        o,
        "weir_object_bytes_total{{kind=\"get\"}} {}",
        m.get_bytes.get()
    );
    counter(
        &mut o,
        "object_errors",
        "Failed object-store requests.",
        "",
        &m.errors,
    );
    histogram(
        &mut o,
        "object_put_latency",
        "Object PUT latency.",
        &m.put_latency,
    );
    histogram(
        &mut o,
        "object_get_latency",
        "Object GET latency (to the first byte).",
        &m.get_latency,
    );

    let a = &state.broker.meters;
    let _ = writeln!(
        o,
        "# HELP weir_requests_total Kafka requests by API key.\n# TYPE weir_requests_total counter"
    );
    for (key, c) in a.requests.iter().enumerate() {
        if c.get() > 0 {
            let _ = writeln!(o, "weir_requests_total{{api_key=\"{key}\"}} {}", c.get());
        }
    }
    histogram(
        &mut o,
        "produce_latency",
        "Produce request latency, to durable.",
        &a.produce_latency,
    );
    histogram(
        &mut o,
        "fetch_latency",
        "Fetch request latency, long polls included.",
        &a.fetch_latency,
    );
    counter(
        &mut o,
        "produce_bytes",
        "Record bytes received by Produce.",
        "",
        &a.produce_bytes,
    );
    counter(
        &mut o,
        "fetch_bytes",
        "Record bytes returned by Fetch.",
        "",
        &a.fetch_bytes,
    );
    let fs = &state.broker.fetch_sessions;
    gauge(
        &mut o,
        "fetch_sessions",
        "Incremental fetch sessions (KIP-227) open.",
        fs.len() as u64,
    );
    counter(
        &mut o,
        "fetch_sessions_created",
        "Fetch sessions made.",
        "",
        &fs.meters.created,
    );
    counter(
        &mut o,
        "fetch_sessions_evicted",
        "Fetch sessions whose slot went to a new one (broker.fetch_session_cache_slots).",
        "",
        &fs.meters.evicted,
    );
    counter(
        &mut o,
        "fetch_incremental",
        "Fetches within a session: naming and answering only the partitions that changed.",
        "",
        &fs.meters.incremental,
    );
    counter(
        &mut o,
        "fetch_session_refused",
        "Fetches of an unknown session or a wrong epoch (the client starts a new session).",
        "",
        &fs.meters.refused,
    );
    if let Some(z) = &state.broker.zones {
        render_zones(&mut o, z);
    }
    let q = &state.broker.quotas.meters;
    counter(
        &mut o,
        "quota_produce_throttled",
        "Produce requests over their client quota, answered with a throttle time.",
        "",
        &q.produce_throttled,
    );
    counter(
        &mut o,
        "quota_fetch_throttled",
        "Fetch requests over their client quota, answered empty with a throttle time.",
        "",
        &q.fetch_throttled,
    );
    counter(
        &mut o,
        "quota_request_throttled",
        "Requests whose handling time took their client over request_percentage (the connection was muted).",
        "",
        &q.request_throttled,
    );
    counter(
        &mut o,
        "quota_throttle_ms",
        "Milliseconds of throttle time given to clients over their quotas.",
        "",
        &q.throttle_ms,
    );
    counter(
        &mut o,
        "authorization_denied",
        "Requests refused whole, or in part (some topics, groups or ids), by the ACLs.",
        "",
        &a.authorization_denied,
    );
    let g = state.broker.groups.meters();
    histogram(
        &mut o,
        "group_lock_wait",
        "Time to take the group coordinator's one lock for all groups.",
        &g.lock_wait,
    );
    histogram(
        &mut o,
        "group_lock_held",
        "Time the group coordinator's lock was held.",
        &g.lock_held,
    );
    let sasl = &state.broker.sasl.meters;
    counter(
        &mut o,
        "sasl_authentications_succeeded",
        "SASL authentications (and re-authentications) that succeeded.",
        "",
        &sasl.succeeded,
    );
    counter(
        &mut o,
        "sasl_authentications_failed",
        "SASL authentications that failed (wrong credentials, malformed exchanges); the connection was closed.",
        "",
        &sasl.failed,
    );
    counter(
        &mut o,
        "sasl_authentications_refused",
        "PLAIN authentications failed unchecked: their address's budget of password checks was spent for the next 5 s.",
        "",
        &sasl.refused,
    );
    counter(
        &mut o,
        "sasl_password_checks",
        "PLAIN passwords checked against a credential (a PBKDF2 derivation each), not answered from memory.",
        "",
        &sasl.password_checks,
    );

    let n = &state.network;
    counter(
        &mut o,
        "connections_opened",
        "Kafka connections accepted.",
        "",
        &n.connections_opened,
    );
    counter(
        &mut o,
        "connections_closed",
        "Kafka connections closed.",
        "",
        &n.connections_closed,
    );
    counter(
        &mut o,
        "network_bytes_in",
        "Bytes received on the Kafka listener.",
        "",
        &n.bytes_in,
    );
    counter(
        &mut o,
        "network_bytes_out",
        "Bytes sent on the Kafka listener.",
        "",
        &n.bytes_out,
    );
    counter(
        &mut o,
        "rejected_requests",
        "Requests that closed their connection (malformed, oversized, unsupported).",
        "",
        &n.rejected_frames,
    );
    counter(
        &mut o,
        "tls_handshake_failures",
        "TLS handshakes that failed or timed out (the connection was closed).",
        "",
        &n.tls_handshake_failures,
    );
    counter(
        &mut o,
        "unauthenticated_requests",
        "Requests before SASL authentication or after the session ended (the connection was closed).",
        "",
        &n.unauthenticated_requests,
    );
    counter(
        &mut o,
        "connections_refused",
        "Connections closed at accept because max.connections were open.",
        "",
        &n.connections_refused,
    );
    counter(
        &mut o,
        "response_encode_errors",
        "Responses that did not encode at their request's version (answered UNKNOWN_SERVER_ERROR).",
        "",
        &n.response_encode_errors,
    );
    counter(
        &mut o,
        "request_handler_panics",
        "Request handlers that panicked (answered UNKNOWN_SERVER_ERROR).",
        "",
        &n.handler_panics,
    );
    counter(
        &mut o,
        "connection_read_pauses",
        "Times a connection stopped reading at the queued request bytes bound.",
        "",
        &n.read_pauses,
    );
    gauge(
        &mut o,
        "queued_request_bytes",
        "Request bytes read and not yet answered.",
        n.queued_request_bytes
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    render_in_flight(&mut o, &n.in_flight);
    render_process(&mut o);
    o
}

/// What the process holds (Linux's /proc; absent elsewhere) and the runtime's live tasks: what
/// a soak watches for growth without bound.
fn render_process(o: &mut String) {
    if let Ok(h) = tokio::runtime::Handle::try_current() {
        gauge(
            o,
            "runtime_tasks_alive",
            "Tasks alive on the broker's main runtime.",
            h.metrics().num_alive_tasks() as u64,
        );
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        line[name.len()..].split_whitespace().next()?.parse().ok()
    };
    let mut raw = |name: &str, help: &str, v: u64| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
    };
    if let Some(kib) = field("VmRSS:") {
        raw(
            "process_resident_memory_bytes",
            "Resident memory of the broker process.",
            kib * 1024,
        );
    }
    if let Some(n) = field("Threads:") {
        raw("process_threads", "Threads of the broker process.", n);
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        raw(
            "process_open_fds",
            "File descriptors the broker process holds open.",
            fds.count() as u64,
        );
    }
}

/// The stuck-request watch's meters: the oldest request in flight per API, how many are stuck.
fn render_in_flight(o: &mut String, f: &weir_network::InFlight) {
    let _ = writeln!(
        o,
        "# HELP weir_request_oldest_seconds Age of the oldest request in flight, per API.\n\
         # TYPE weir_request_oldest_seconds gauge"
    );
    for (api, age) in f.oldest(std::time::Instant::now()) {
        let _ = writeln!(
            o,
            "weir_request_oldest_seconds{{api=\"{api:?}\"}} {:.3}",
            age.as_secs_f64()
        );
    }
    gauge(
        o,
        "requests_in_flight",
        "Kafka requests being handled.",
        f.len() as u64,
    );
    gauge(
        o,
        "requests_stuck",
        "Requests past their bound (broker.request_stuck_ms) now; /readyz fails while any is.",
        f.stuck() as u64,
    );
    counter(
        o,
        "stuck_requests",
        "Requests that went past their bound (broker.request_stuck_ms), each logged at WARN.",
        "",
        &f.stuck_total,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Answers fixed JSON and records what it was asked to do.
    #[derive(Default)]
    struct FakeCluster {
        moves: Mutex<Vec<(String, i32, i32)>>,
        drains: Mutex<Vec<i32>>,
        /// If set, `drain` says it was entered (first) and waits to be released (second).
        gate: Option<(tokio::sync::Notify, tokio::sync::Notify)>,
    }

    #[async_trait::async_trait]
    impl ClusterAdmin for FakeCluster {
        async fn cluster(&self) -> serde_json::Value {
            serde_json::json!({"controller": 1, "brokers": [{"id": 1}, {"id": 2}]})
        }
        async fn partitions(&self) -> serde_json::Value {
            serde_json::json!([{"topic": "t", "partition": 0, "leader": 1, "leader_epoch": 3}])
        }
        async fn reassign(
            &self,
            topic: &str,
            partition: i32,
            broker: i32,
        ) -> Result<(), (u16, String)> {
            self.moves
                .lock()
                .unwrap()
                .push((topic.to_string(), partition, broker));
            if topic == "missing" {
                return Err((404, format!("unknown topic {topic}")));
            }
            Ok(())
        }
        async fn reassignments(&self) -> serde_json::Value {
            serde_json::json!([{"topic": "t", "partition": 0, "target": 2}])
        }
        async fn drain(&self, broker: i32) -> Result<serde_json::Value, (u16, String)> {
            self.drains.lock().unwrap().push(broker);
            if let Some((entered, release)) = &self.gate {
                entered.notify_one();
                release.notified().await;
            }
            if broker == 9 {
                return Err((409, "broker 9 is the last one".into()));
            }
            Ok(serde_json::json!({"broker": broker, "moving": 4}))
        }
    }

    struct Server {
        port: u16,
        ready: Arc<AtomicBool>,
        stop: tokio::sync::watch::Sender<bool>,
        task: tokio::task::JoinHandle<()>,
    }

    async fn start(cluster: Option<Arc<dyn ClusterAdmin>>, grace: Duration) -> Server {
        start_with_token(cluster, grace, None).await
    }

    async fn start_with_token(
        cluster: Option<Arc<dyn ClusterAdmin>>,
        grace: Duration,
        token: Option<&str>,
    ) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let ready = Arc::new(AtomicBool::new(false));
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let app = App {
            ready: Arc::clone(&ready),
            metrics: Arc::new(|| "# TYPE weir_x_total counter\nweir_x_total 7\n".to_string()),
            cluster,
            faults: None,
            broker: None,
            token: token.map(Arc::from),
            network: None,
        };
        let task = tokio::spawn(serve_app(listener, app, stop_rx, grace));
        Server {
            port,
            ready,
            stop,
            task,
        }
    }

    struct Answer {
        status: u16,
        headers: String,
        body: String,
    }

    impl Answer {
        fn content_type(&self) -> Option<&str> {
            self.headers.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-type").then(|| v.trim())
            })
        }
        fn json(&self) -> serde_json::Value {
            assert_eq!(
                self.content_type(),
                Some("application/json"),
                "{}",
                self.body
            );
            serde_json::from_str(&self.body).unwrap()
        }
    }

    /// Sends `request` as is and reads the answer to EOF: the server must close the
    /// connection (no `Connection: close` is sent), as the scrapers expect.
    async fn raw(port: u16, request: &[u8]) -> Answer {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        s.write_all(request).await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        let out = String::from_utf8(out).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").expect("a full HTTP response");
        let (status_line, headers) = head.split_once("\r\n").unwrap_or((head, ""));
        assert!(status_line.starts_with("HTTP/1.1 "), "{status_line}");
        Answer {
            status: status_line[9..12].parse().unwrap(),
            headers: headers.to_string(),
            body: body.to_string(),
        }
    }

    async fn call(port: u16, method: &str, path: &str, body: &str) -> Answer {
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        raw(port, request.as_bytes()).await
    }

    #[tokio::test]
    async fn health_readiness_and_metrics_keep_their_bodies_and_types() {
        let s = start(None, SHUTDOWN_GRACE).await;
        let a = call(s.port, "GET", "/healthz", "").await;
        assert_eq!(
            (a.status, a.content_type(), a.body.as_str()),
            (200, Some("text/plain"), "ok\n")
        );
        let a = call(s.port, "GET", "/readyz", "").await;
        assert_eq!(
            (a.status, a.content_type(), a.body.as_str()),
            (503, Some("text/plain"), "not ready\n")
        );
        s.ready.store(true, Ordering::SeqCst);
        let a = call(s.port, "GET", "/readyz", "").await;
        assert_eq!((a.status, a.body.as_str()), (200, "ready\n"));
        let a = call(s.port, "GET", "/metrics", "").await;
        assert_eq!(a.status, 200);
        assert_eq!(a.content_type(), Some("text/plain; version=0.0.4"));
        assert_eq!(a.body, "# TYPE weir_x_total counter\nweir_x_total 7\n");
        assert!(
            a.headers.to_ascii_lowercase().contains("connection: close"),
            "{}",
            a.headers
        );
    }

    #[tokio::test]
    async fn with_a_token_only_the_probes_answer_without_it() {
        let s = start_with_token(
            Some(Arc::new(FakeCluster::default())),
            SHUTDOWN_GRACE,
            Some("s3cret"),
        )
        .await;
        s.ready.store(true, Ordering::SeqCst);
        assert_eq!(call(s.port, "GET", "/healthz", "").await.status, 200);
        assert_eq!(call(s.port, "GET", "/readyz", "").await.status, 200);
        for path in ["/metrics", "/v1/cluster", "/v1/partitions"] {
            let a = call(s.port, "GET", path, "").await;
            assert_eq!(a.status, 401, "{path}");
            assert!(
                a.headers.contains("www-authenticate: Bearer"),
                "{}",
                a.headers
            );
        }
        let with = |token: &str| {
            format!("GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: 0\r\n\r\n")
        };
        assert_eq!(raw(s.port, with("s3cret").as_bytes()).await.status, 200);
        assert_eq!(raw(s.port, with("s3cres").as_bytes()).await.status, 401);
        assert_eq!(
            raw(s.port, with("s3cret-and-more").as_bytes()).await.status,
            401
        );
    }

    #[tokio::test]
    async fn unknown_paths_are_404_and_wrong_methods_405() {
        let s = start(Some(Arc::new(FakeCluster::default())), SHUTDOWN_GRACE).await;
        let a = call(s.port, "GET", "/nope", "").await;
        assert_eq!((a.status, a.body.as_str()), (404, "not found\n"));
        let a = call(s.port, "POST", "/healthz", "").await;
        assert_eq!(a.status, 405);
        let a = call(s.port, "DELETE", "/v1/reassignments", "").await;
        assert_eq!(a.status, 405);
        assert!(a.json()["error"].is_string());
        let a = call(s.port, "GET", "/v1/brokers/1/drain", "").await;
        assert_eq!(a.status, 405);
        let a = call(s.port, "GET", "/v1/nope", "").await;
        assert_eq!(a.status, 404);
        assert!(a.json()["error"].as_str().unwrap().contains("/v1/nope"));
    }

    #[tokio::test]
    async fn cluster_routes_answer_what_the_cluster_layer_says() {
        let fake = Arc::new(FakeCluster::default());
        let s = start(Some(fake.clone()), SHUTDOWN_GRACE).await;
        let a = call(s.port, "GET", "/v1/cluster", "").await;
        assert_eq!(a.status, 200);
        assert_eq!(a.json(), fake.cluster().await);
        let a = call(s.port, "GET", "/v1/partitions", "").await;
        assert_eq!(a.status, 200);
        assert_eq!(a.json(), fake.partitions().await);
        let a = call(s.port, "GET", "/v1/reassignments", "").await;
        assert_eq!(a.status, 200);
        assert_eq!(a.json(), fake.reassignments().await);
    }

    #[tokio::test]
    async fn a_reassignment_body_reaches_the_cluster_layer() {
        let fake = Arc::new(FakeCluster::default());
        let s = start(Some(fake.clone()), SHUTDOWN_GRACE).await;
        let body = r#"{"partitions":[{"topic":"t","partition":0,"broker":2},
                                     {"topic":"missing","partition":5,"broker":3}]}"#;
        let a = call(s.port, "POST", "/v1/reassignments", body).await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(
            a.json(),
            serde_json::json!({"partitions": [
                {"topic": "t", "partition": 0, "error": null},
                {"topic": "missing", "partition": 5, "error": "unknown topic missing"},
            ]})
        );
        assert_eq!(
            *fake.moves.lock().unwrap(),
            [("t".to_string(), 0, 2), ("missing".to_string(), 5, 3)]
        );
    }

    #[tokio::test]
    async fn a_chunked_reassignment_body_is_read() {
        let fake = Arc::new(FakeCluster::default());
        let s = start(Some(fake.clone()), SHUTDOWN_GRACE).await;
        let body = r#"{"partitions":[{"topic":"t","partition":1,"broker":4}]}"#;
        let request = format!(
            "POST /v1/reassignments HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
             {:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        );
        let a = raw(s.port, request.as_bytes()).await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(*fake.moves.lock().unwrap(), [("t".to_string(), 1, 4)]);
    }

    #[tokio::test]
    async fn malformed_reassignment_bodies_are_400_and_move_nothing() {
        let fake = Arc::new(FakeCluster::default());
        let s = start(Some(fake.clone()), SHUTDOWN_GRACE).await;
        for body in [
            "",
            "not json",
            r#"{"partitions":[{"topic":"t","partition":0}]}"#,
            r#"{"partitions":[{"topic":"t","partition":"zero","broker":2}]}"#,
            r#"{"partitions":[{"topic":"t","partition":0,"replicas":[2]}]}"#,
            r#"{"partitions":[]}"#,
            r#"[{"topic":"t","partition":0,"broker":2}]"#,
        ] {
            let a = call(s.port, "POST", "/v1/reassignments", body).await;
            assert_eq!(a.status, 400, "{body}: {}", a.body);
            assert!(a.json()["error"].is_string(), "{body}");
        }
        assert!(fake.moves.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_body_over_one_mib_is_413_and_one_of_exactly_one_mib_is_read() {
        let fake = Arc::new(FakeCluster::default());
        let s = start(Some(fake.clone()), SHUTDOWN_GRACE).await;
        // The body itself is not sent: the declared length alone is refused.
        let request = format!(
            "POST /v1/reassignments HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY_BYTES + 1
        );
        let a = raw(s.port, request.as_bytes()).await;
        assert_eq!(a.status, 413);
        assert!(a.json()["error"].is_string());

        let valid = r#"{"partitions":[{"topic":"t","partition":0,"broker":2}]}"#;
        let body = format!("{valid}{}", " ".repeat(MAX_BODY_BYTES - valid.len()));
        let a = call(s.port, "POST", "/v1/reassignments", &body).await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(fake.moves.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn drain_passes_the_broker_id_and_the_cluster_layers_answer() {
        let fake = Arc::new(FakeCluster::default());
        let s = start(Some(fake.clone()), SHUTDOWN_GRACE).await;
        let a = call(s.port, "POST", "/v1/brokers/2/drain", "").await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.json(), serde_json::json!({"broker": 2, "moving": 4}));
        let a = call(s.port, "POST", "/v1/brokers/9/drain", "").await;
        assert_eq!(a.status, 409);
        assert_eq!(a.json()["error"], "broker 9 is the last one");
        let a = call(s.port, "POST", "/v1/brokers/two/drain", "").await;
        assert_eq!(a.status, 400);
        assert!(a.json()["error"].is_string());
        assert_eq!(*fake.drains.lock().unwrap(), [2, 9]);
    }

    #[tokio::test]
    async fn without_a_cluster_layer_the_v1_routes_are_503() {
        let s = start(None, SHUTDOWN_GRACE).await;
        for (method, path, body) in [
            ("GET", "/v1/cluster", ""),
            ("GET", "/v1/partitions", ""),
            ("GET", "/v1/reassignments", ""),
            (
                "POST",
                "/v1/reassignments",
                r#"{"partitions":[{"topic":"t","partition":0,"broker":2}]}"#,
            ),
            ("POST", "/v1/brokers/1/drain", ""),
        ] {
            let a = call(s.port, method, path, body).await;
            assert_eq!(a.status, 503, "{method} {path}");
            assert!(a.json()["error"].is_string());
        }
    }

    #[tokio::test]
    async fn shutdown_stops_serving_even_with_half_a_request_open() {
        let s = start(None, Duration::ZERO).await;
        // A client that never finishes its request: graceful shutdown alone would wait for it.
        let mut half = tokio::net::TcpStream::connect(("127.0.0.1", s.port))
            .await
            .unwrap();
        half.write_all(b"GET /healthz HTTP/1.1\r\nHost:")
            .await
            .unwrap();
        // Served, so the connection above has been accepted before the stop.
        assert_eq!(call(s.port, "GET", "/healthz", "").await.status, 200);
        s.stop.send_replace(true);
        s.task.await.unwrap();
        assert!(
            tokio::net::TcpStream::connect(("127.0.0.1", s.port))
                .await
                .is_err(),
            "the listener is closed"
        );
    }

    #[tokio::test]
    async fn shutdown_lets_a_request_under_way_finish() {
        let fake = Arc::new(FakeCluster {
            gate: Some(Default::default()),
            ..Default::default()
        });
        let s = start(Some(fake.clone()), SHUTDOWN_GRACE).await;
        let port = s.port;
        let drain =
            tokio::spawn(async move { call(port, "POST", "/v1/brokers/3/drain", "").await });
        let (entered, release) = fake.gate.as_ref().unwrap();
        entered.notified().await;
        s.stop.send_replace(true);
        // The listener closes once the stop is seen; the drain is still under way.
        let mut tries = 0;
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            tries += 1;
            assert!(tries < 1000, "the listener never closed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        release.notify_one();
        let a = drain.await.unwrap();
        assert_eq!(a.status, 200, "{}", a.body);
        s.task.await.unwrap();
    }
}
