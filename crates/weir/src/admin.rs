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
    /// Every meter of the broker, registered by its components at start.
    pub meters: Arc<weir_metrics::Registry>,
    pub broker: Arc<weir_api::Broker>,
    pub network: Arc<weir_network::NetworkMeters>,
    /// The cluster layer; `None` where there is none (the `/v1` routes answer 503).
    pub cluster: Option<Arc<dyn ClusterAdmin>>,
    /// The run-time fault switch, when `broker.fault_switch` is on.
    pub faults: Option<Arc<FaultSwitch>>,
    /// `broker.admin_token`: every route but `/healthz` and `/readyz` wants
    /// `Authorization: Bearer <token>`.
    pub token: Option<Arc<str>>,
    /// Cluster links (`/v1/links`).
    pub links: Option<Arc<weir_link::LinkService>>,
    /// What the Iceberg translator did and how far each table is behind (`/v1/iceberg`).
    pub iceberg: Option<weir_iceberg::meters::IcebergMeters>,
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
    /// Every meter, as `/metrics` encodes it.
    meters: Arc<weir_metrics::Registry>,
    cluster: Option<Arc<dyn ClusterAdmin>>,
    faults: Option<Arc<FaultSwitch>>,
    /// The broker, for the zone routes (`None` in tests of the HTTP layer alone).
    broker: Option<Arc<weir_api::Broker>>,
    token: Option<Arc<str>>,
    /// Requests in flight: the broker is not ready while any is stuck (`None` in tests of the
    /// HTTP layer alone).
    network: Option<Arc<weir_network::NetworkMeters>>,
    links: Option<Arc<weir_link::LinkService>>,
    iceberg: Option<weir_iceberg::meters::IcebergMeters>,
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
        links: state.links,
        iceberg: state.iceberg,
        meters: state.meters,
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
        .route("/v1/meters", get(meters))
        .route("/v1/cluster", get(cluster))
        .route("/v1/partitions", get(partitions))
        .route(
            "/v1/reassignments",
            get(reassignments).post(start_reassignments),
        )
        .route("/v1/brokers/{id}/drain", post(drain))
        .route("/v1/faults", get(show_faults).put(switch_faults))
        .route("/v1/zones/cidrs", get(show_cidrs).put(set_cidrs))
        .route("/v1/links", get(list_links).post(create_link))
        .route("/v1/links/{name}", get(show_link).delete(delete_link))
        .route("/v1/links/{name}/promote", post(promote_link))
        .route("/v1/schemas", get(schemas))
        .route(
            "/v1/acls",
            get(list_acls).post(create_acls).delete(delete_acls),
        )
        .route("/v1/iceberg", get(iceberg))
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
    text(
        StatusCode::OK,
        "text/plain; version=0.0.4",
        app.meters.encode(),
    )
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

/// `GET /v1/schemas`: the schema registry's subjects (their versions, the latest's id and type).
async fn schemas(Shared(app): Shared<App>) -> Response {
    let Some(broker) = &app.broker else {
        return json(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({"error": "no broker"}),
        );
    };
    match broker.schemas.registry().summary().await {
        Ok(v) => json(StatusCode::OK, &v),
        Err(e) => json(
            StatusCode::INTERNAL_SERVER_ERROR,
            &serde_json::json!({"error": e.message}),
        ),
    }
}

/// `GET /v1/iceberg`: the translator's totals on this broker, and each table's lag (of the
/// partitions this broker leads).
async fn iceberg(Shared(app): Shared<App>) -> Response {
    let Some(m) = &app.iceberg else {
        return json_error(503, "no Iceberg translator on this broker (no warehouse)");
    };
    let paused = m.paused();
    let topics: serde_json::Map<String, serde_json::Value> = m
        .lags()
        .into_iter()
        .map(|(t, l)| {
            let mut v = serde_json::json!({"lag_records": l.records, "lag_seconds": l.seconds});
            if let Some(reason) = paused.get(&t) {
                v["paused"] = serde_json::Value::from(reason.as_str());
            }
            (t, v)
        })
        .collect();
    json(
        StatusCode::OK,
        &serde_json::json!({
            "records": m.records.get(),
            "files": m.files.get(),
            "file_bytes": m.file_bytes.get(),
            "commits": m.commits.get(),
            "commit_conflicts": m.conflicts.get(),
            "errors": m.errors.get(),
            "skipped_records": m.skipped.get(),
            "dead_letter_records": m.dead_letters.get(),
            "dropped_records": m.invalid_dropped.get(),
            "schema_evolutions": m.evolutions.get(),
            "topics": topics,
        }),
    )
}

fn no_broker() -> Response {
    json_error(503, "no broker")
}

fn acl_error(e: weir_api::AclError) -> Response {
    match e {
        weir_api::AclError::NoAuthorizer => json_error(400, e.to_string()),
        weir_api::AclError::Store(_) => json_error(503, e.to_string()),
    }
}

/// `GET /v1/acls`: every binding in force, the schema registry's included.
async fn list_acls(Shared(app): Shared<App>) -> Response {
    let Some(broker) = &app.broker else {
        return no_broker();
    };
    match weir_api::all_acls(broker).await {
        Ok(acls) => {
            let list: Vec<_> = acls.iter().map(crate::admin_acls::AclJson::of).collect();
            json(StatusCode::OK, &serde_json::json!({ "acls": list }))
        }
        Err(e) => acl_error(e),
    }
}

/// The bindings of a request's body, or the response that says why there are none.
async fn acls_of_body(request: Request) -> Result<Vec<weir_auth::acl::Acl>, Response> {
    let body = body_bytes(request).await?;
    crate::admin_acls::parse_body(&body).map_err(|why| json_error(400, why))
}

/// `POST /v1/acls`: adds one binding or a list of them.
async fn create_acls(Shared(app): Shared<App>, request: Request) -> Response {
    let Some(broker) = app.broker.clone() else {
        return no_broker();
    };
    let acls = match acls_of_body(request).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    match weir_api::add_acls(&broker, &acls).await {
        Ok(()) => json(
            StatusCode::CREATED,
            &serde_json::json!({ "created": acls.len() }),
        ),
        Err(e) => acl_error(e),
    }
}

/// `DELETE /v1/acls`: removes exactly the bindings of the body; 404 when none of them was there.
async fn delete_acls(Shared(app): Shared<App>, request: Request) -> Response {
    let Some(broker) = app.broker.clone() else {
        return no_broker();
    };
    let acls = match acls_of_body(request).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    match weir_api::remove_acls(&broker, &acls).await {
        Ok(0) => json_error(404, "no such ACL binding"),
        Ok(n) => json(StatusCode::OK, &serde_json::json!({ "deleted": n })),
        Err(e) => acl_error(e),
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

fn no_links() -> Response {
    json_error(503, "cluster links are not served by this broker")
}

/// A link error as HTTP: the definition (400), no such link (404), a conflict (409), the
/// source (502), the metadata store (503).
fn link_error(e: weir_link::LinkError) -> Response {
    use weir_link::LinkError as L;
    let status = match &e {
        L::Config(_) => 400,
        L::NotFound(_) => 404,
        L::Conflict(_) => 409,
        L::Meta(_) => 503,
        L::Io { .. }
        | L::Timeout { .. }
        | L::Unsupported { .. }
        | L::Protocol(_)
        | L::Auth(_)
        | L::Kafka { .. } => 502,
    };
    json_error(status, e.to_string())
}

fn to_json(v: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

async fn list_links(Shared(app): Shared<App>) -> Response {
    let Some(links) = &app.links else {
        return no_links();
    };
    match links.status(None).await {
        Ok(all) => json(
            StatusCode::OK,
            &serde_json::json!({ "links": to_json(&all) }),
        ),
        Err(e) => link_error(e),
    }
}

async fn show_link(Shared(app): Shared<App>, Path(name): Path<String>) -> Response {
    let Some(links) = &app.links else {
        return no_links();
    };
    match links.status(Some(&name)).await {
        Ok(mut one) => json(StatusCode::OK, &to_json(&one.pop())),
        Err(e) => link_error(e),
    }
}

/// Defines a link from the JSON body (`weir link create`); the source must answer first.
async fn create_link(Shared(app): Shared<App>, request: Request) -> Response {
    let Some(links) = app.links.clone() else {
        return no_links();
    };
    let body = match body_bytes(request).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return json_error(400, "the link definition is not UTF-8");
    };
    match links.create(text).await {
        Ok(status) => {
            tracing::info!(link = %status.name, "admin: link created");
            json(StatusCode::CREATED, &to_json(&status))
        }
        Err(e) => link_error(e),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct PromoteBody {
    /// The topics to promote; none: every topic the link mirrors.
    topics: Vec<String>,
    /// How long the mirror may take to reach the source's end (default two minutes).
    timeout_ms: Option<u64>,
}

/// Starts promoting a link's topics (`weir link promote`): answers at once with the targets;
/// the topics' states say when they are writable.
async fn promote_link(
    Shared(app): Shared<App>,
    Path(name): Path<String>,
    request: Request,
) -> Response {
    let Some(links) = app.links.clone() else {
        return no_links();
    };
    let body = match body_bytes(request).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let parsed: PromoteBody = if body.is_empty() {
        PromoteBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => return json_error(400, format!("a promote body: {e}")),
        }
    };
    let timeout = Duration::from_millis(parsed.timeout_ms.unwrap_or(120_000));
    match links.promote(&name, &parsed.topics, timeout).await {
        Ok(status) => {
            tracing::info!(link = %name, topics = ?parsed.topics, "admin: promotion started");
            json(StatusCode::ACCEPTED, &to_json(&status))
        }
        Err(e) => link_error(e),
    }
}

async fn delete_link(Shared(app): Shared<App>, Path(name): Path<String>, uri: Uri) -> Response {
    let Some(links) = &app.links else {
        return no_links();
    };
    let force = uri
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "force=true"));
    match links.delete(&name, force).await {
        Ok(()) => json(StatusCode::OK, &serde_json::json!({ "deleted": name })),
        Err(e) => link_error(e),
    }
}

/// Declares what the process holds (Linux's /proc; absent elsewhere) and the runtime's live
/// tasks: what a soak watches for growth without bound.
pub fn register_process_meters(r: &mut weir_metrics::Registry) {
    if let Ok(h) = tokio::runtime::Handle::try_current() {
        r.gauge_read(
            "runtime_tasks_alive",
            "Tasks alive on the broker's main runtime.",
            move || h.metrics().num_alive_tasks() as u64,
        );
    }
    r.process_gauge(
        "process_resident_memory_bytes",
        "Resident memory of the broker process.",
        || proc_status("VmRSS:").map(|kib| kib * 1024),
    );
    // For CPU seconds per GiB (`weir cost` sizes brokers with it).
    r.process_counter(
        "process_cpu_seconds",
        "CPU time the broker process has used, user and system, in seconds.",
        process_cpu_seconds,
    );
    // What the allocator says: live allocations against what it keeps resident (a soak's
    // growing RSS is a leak only if the first grows too).
    r.process_gauge(
        "weir_allocator_allocated_bytes",
        "Bytes the broker has allocated and not freed (jemalloc's stats.allocated).",
        || jemalloc_stat(tikv_jemalloc_ctl::stats::allocated::read),
    );
    r.process_gauge(
        "weir_allocator_resident_bytes",
        "Bytes of memory the allocator keeps resident, free pages it has not returned included (jemalloc's stats.resident).",
        || jemalloc_stat(tikv_jemalloc_ctl::stats::resident::read),
    );
    r.gauges_read(
        "build_info",
        "1, labelled with the version and the commit the broker was built from (during a rolling upgrade, which brokers run which).",
        || {
            let labels = vec![
                ("version", env!("CARGO_PKG_VERSION").to_string()),
                ("commit", env!("WEIR_COMMIT").to_string()),
            ];
            vec![(labels, 1i64)]
        },
    );
    r.process_gauge("process_threads", "Threads of the broker process.", || {
        proc_status("Threads:")
    });
    r.process_gauge(
        "process_open_fds",
        "File descriptors the broker process holds open.",
        || {
            std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|d| d.count() as u64)
        },
    );
}

/// One of jemalloc's statistics, as of now (they are refreshed by advancing its epoch).
fn jemalloc_stat(read: fn() -> tikv_jemalloc_ctl::Result<usize>) -> Option<u64> {
    tikv_jemalloc_ctl::epoch::advance().ok()?;
    read().ok().map(|v| v as u64)
}

/// A number from `/proc/self/status` (`None` where there is none).
/// User and system CPU time of the whole process (every thread), in seconds.
fn process_cpu_seconds() -> Option<f64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes a whole rusage into the pointer it is given, and nothing else.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: getrusage returned 0, so it filled `usage`.
    let usage = unsafe { usage.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(secs(usage.ru_utime) + secs(usage.ru_stime))
}

fn proc_status(name: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].split_whitespace().next()?.parse().ok()
}

/// The list of meters (`GET /v1/meters`): name, type and help of each, as `/metrics` names them.
async fn meters(Shared(app): Shared<App>) -> Response {
    let list: Vec<serde_json::Value> = app
        .meters
        .meters()
        .iter()
        .map(|m| serde_json::json!({"name": m.name, "type": m.kind, "help": m.help}))
        .collect();
    json(StatusCode::OK, &serde_json::json!({ "meters": list }))
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
            meters: {
                let mut r = weir_metrics::Registry::new();
                let x = weir_metrics::Counter::default();
                x.add(7);
                r.counter("x", "A count.", &x);
                Arc::new(r)
            },
            cluster,
            faults: None,
            broker: None,
            links: None,
            iceberg: None,
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
        assert_eq!(
            a.body,
            "# HELP weir_x_total A count.\n# TYPE weir_x_total counter\nweir_x_total 7\n"
        );
        let a = call(s.port, "GET", "/v1/meters", "").await;
        assert_eq!(
            a.json()["meters"],
            serde_json::json!([{"name": "weir_x_total", "type": "counter", "help": "A count."}])
        );
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
