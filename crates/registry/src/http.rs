//! The REST API: Confluent Schema Registry's endpoints, bodies and error codes, over
//! [`Registry`]. Query booleans are read in any case (clients send `True`), unknown query
//! parameters and body fields are ignored, and subjects arrive percent-encoded.

use std::collections::HashMap;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Map, Value};
use weir_meta::{SchemaContent, StoredSchema};

use crate::error::{RegistryError, Result};
use crate::format::SchemaType;
use crate::service::{Registry, SchemaRequest, VersionSpec, VersionView};

/// The content type of every answer.
pub const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// Request bodies above this are refused (Confluent's `schema.max.size` is far below; a
/// schema's text is what a body holds).
const MAX_BODY_BYTES: usize = 8 << 20;

/// Who may do what: checks a request's credentials and its right to an operation. The broker
/// gives one backed by its users and ACLs; `None` serves everyone.
#[async_trait::async_trait]
pub trait Gate: Send + Sync + 'static {
    /// The principal of `authorization` (the header, if any) from `peer`: `Err(401)` when it
    /// does not authenticate.
    async fn authenticate(
        &self,
        authorization: Option<&str>,
        peer: Option<SocketAddr>,
    ) -> Result<String>;

    /// Whether `principal`, connected from `host` (an address, as ACLs name hosts), may do
    /// `op` on `resource`.
    fn allowed(&self, principal: &str, host: &str, op: Operation, resource: &Resource) -> bool;
}

/// What a request does, as ACL operations name it (Redpanda's model: Kafka's operations on
/// two resource types of the registry's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Read,
    Write,
    Delete,
    Describe,
    DescribeConfigs,
    AlterConfigs,
}

/// What a request is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// A subject.
    Subject(String),
    /// The registry as a whole (the global config and mode).
    Registry,
}

#[derive(Clone)]
struct App {
    registry: Arc<Registry>,
    gate: Option<Arc<dyn Gate>>,
}

/// Where the TLS configuration comes from, read at each connection (so that a certificate
/// reloaded by the broker is used from the next connection on).
pub type TlsSource = Arc<dyn Fn() -> Arc<rustls::ServerConfig> + Send + Sync>;

/// Serves `router` on `listener` (over TLS with `tls`) until `shutdown` turns true, then lets
/// requests in flight finish for at most `grace`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    tls: Option<TlsSource>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    grace: std::time::Duration,
) {
    async fn stopped(mut shutdown: tokio::sync::watch::Receiver<bool>) {
        // An error means the sender is gone: nobody can ask for a stop any more, so stop.
        let _ = shutdown.wait_for(|stop| *stop).await;
    }
    if let Some(tls) = tls {
        serve_tls(listener, router, tls, stopped(shutdown)).await;
        return;
    }
    let server = axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(stopped(shutdown.clone()))
    .into_future();
    tokio::select! {
        result = server => {
            if let Err(e) = result {
                tracing::warn!(error = %e, "schema registry HTTP server failed");
            }
        }
        _ = async {
            stopped(shutdown).await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(?grace, "schema registry requests still open at shutdown; not waiting for them");
        }
    }
}

/// Bounds a TLS handshake: a client that opens a connection and says nothing is dropped.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// HTTPS: each connection's TLS handshake (bounded), then HTTP/1 on it, until `stopped`.
async fn serve_tls(
    listener: tokio::net::TcpListener,
    router: Router,
    tls: TlsSource,
    stopped: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stopped);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "schema registry: accepting a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stopped => return,
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(tls());
        let router = router.clone();
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "schema registry: TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let service = hyper::service::service_fn(
                move |mut req: hyper::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(ConnectInfo(peer));
                    let mut router = router.clone();
                    async move {
                        use tower::Service;
                        router.call(req.map(axum::body::Body::new)).await
                    }
                },
            );
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!(%peer, error = %e, "schema registry: connection ended");
            }
        });
    }
}

/// The router, for `axum::serve` on the registry's listener.
pub fn router(registry: Arc<Registry>, gate: Option<Arc<dyn Gate>>) -> Router {
    let app = App { registry, gate };
    Router::new()
        .route("/", get(root))
        .route("/contexts", get(contexts))
        .route("/schemas/types", get(schema_types))
        .route("/schemas/ids/{id}", get(schema_by_id))
        .route("/schemas/ids/{id}/schema", get(schema_text_by_id))
        .route("/schemas/ids/{id}/subjects", get(schema_subjects))
        .route("/schemas/ids/{id}/versions", get(schema_versions))
        .route("/subjects", get(subjects))
        .route("/subjects/{subject}", post(lookup).delete(delete_subject))
        .route("/subjects/{subject}/versions", get(versions).post(register))
        .route(
            "/subjects/{subject}/versions/{version}",
            get(version).delete(delete_version),
        )
        .route(
            "/subjects/{subject}/versions/{version}/schema",
            get(version_text),
        )
        .route(
            "/subjects/{subject}/versions/{version}/referencedby",
            get(referenced_by),
        )
        .route("/subjects/{subject}/metadata", get(latest_with_metadata))
        .route(
            "/config",
            get(get_global_config)
                .put(put_global_config)
                .delete(delete_global_config),
        )
        .route(
            "/config/{subject}",
            get(get_config).put(put_config).delete(delete_config),
        )
        .route(
            "/mode",
            get(get_global_mode)
                .put(put_global_mode)
                .delete(delete_global_mode),
        )
        .route(
            "/mode/{subject}",
            get(get_mode).put(put_mode).delete(delete_mode),
        )
        .route(
            "/compatibility/subjects/{subject}/versions",
            post(check_all),
        )
        .route(
            "/compatibility/subjects/{subject}/versions/{version}",
            post(check_version),
        )
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(app.clone(), observe))
        .with_state(app)
}

/// Authenticates the request (when a gate is set), and counts it by endpoint and status.
async fn observe(
    State(app): State<App>,
    mut request: Request,
    next: axum::middleware::Next,
) -> Response {
    let started = Instant::now();
    let endpoint = endpoint_of(request.method().as_str(), request.uri().path());
    let response = match &app.gate {
        Some(gate) => {
            let authorization = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok());
            let peer = request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0);
            match gate.authenticate(authorization, peer).await {
                Ok(name) => {
                    let host = peer.map_or_else(|| "*".to_string(), |p| p.ip().to_string());
                    request.extensions_mut().insert(Principal { name, host });
                    next.run(request).await
                }
                Err(e) => {
                    let mut r = error_response(e);
                    r.headers_mut().insert(
                        header::WWW_AUTHENTICATE,
                        HeaderValue::from_static("Basic realm=\"weir\""),
                    );
                    r
                }
            }
        }
        None => next.run(request).await,
    };
    app.registry
        .meters
        .request(endpoint, response.status().as_u16(), started.elapsed());
    response
}

/// The authenticated principal of a request, and the address it came from.
#[derive(Clone)]
struct Principal {
    name: String,
    host: String,
}

/// The route pattern of a request, for the meters (never the subject itself: the label set
/// stays bounded).
fn endpoint_of(method: &str, path: &str) -> &'static str {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        (_, [""]) => "/",
        (_, ["contexts"]) => "/contexts",
        (_, ["schemas", "types"]) => "/schemas/types",
        (_, ["schemas", "ids", _]) => "/schemas/ids/{id}",
        (_, ["schemas", "ids", _, rest]) => match *rest {
            "schema" => "/schemas/ids/{id}/schema",
            "subjects" => "/schemas/ids/{id}/subjects",
            _ => "/schemas/ids/{id}/versions",
        },
        (_, ["subjects"]) => "/subjects",
        ("POST", ["subjects", _]) => "POST /subjects/{subject}",
        (_, ["subjects", _]) => "DELETE /subjects/{subject}",
        ("POST", ["subjects", _, "versions"]) => "POST /subjects/{subject}/versions",
        (_, ["subjects", _, "versions"]) => "GET /subjects/{subject}/versions",
        (_, ["subjects", _, "metadata"]) => "/subjects/{subject}/metadata",
        ("DELETE", ["subjects", _, "versions", _]) => {
            "DELETE /subjects/{subject}/versions/{version}"
        }
        (_, ["subjects", _, "versions", _]) => "GET /subjects/{subject}/versions/{version}",
        (_, ["subjects", _, "versions", _, _]) => "/subjects/{subject}/versions/{version}/*",
        (_, ["config"]) => "/config",
        (_, ["config", _]) => "/config/{subject}",
        (_, ["mode"]) => "/mode",
        (_, ["mode", _]) => "/mode/{subject}",
        (_, ["compatibility", ..]) => "/compatibility",
        _ => "other",
    }
}

// ---------------------------------------------------------------------- answers

fn json_response(status: StatusCode, body: Value) -> Response {
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    r
}

fn ok(body: Value) -> Response {
    json_response(StatusCode::OK, body)
}

fn error_response(e: RegistryError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if status.is_server_error() {
        tracing::warn!(code = e.code, message = %e.message, "schema registry request failed");
    }
    json_response(status, json!({"error_code": e.code, "message": e.message}))
}

fn answer(r: Result<Value>) -> Response {
    match r {
        Ok(v) => ok(v),
        Err(e) => error_response(e),
    }
}

/// A query parameter as a boolean, in any case (`True`, `true`); absent: `false`.
fn flag(q: &HashMap<String, String>, name: &str) -> bool {
    q.get(name).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// The first of several names a parameter goes by (Confluent's and the Python client's).
fn param<'a>(q: &'a HashMap<String, String>, names: &[&str]) -> Option<&'a str> {
    names.iter().find_map(|n| q.get(*n).map(String::as_str))
}

fn parse_body(body: &Bytes) -> Result<Value> {
    if body.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    serde_json::from_slice(body)
        .map_err(|e| RegistryError::new(400, format!("Unrecognized request body: {e}")))
}

fn schema_request(body: &Bytes) -> Result<SchemaRequest> {
    serde_json::from_slice(body)
        .map_err(|e| RegistryError::new(42201, format!("Invalid schema request: {e}")))
}

fn schema_id(text: &str) -> Result<u32> {
    text.parse()
        .map_err(|_| RegistryError::new(40403, format!("Schema {text} not found")))
}

/// The fields every printed schema has: type, references, metadata, rule set, text.
fn schema_fields(content: &SchemaContent, out: &mut Map<String, Value>) {
    out.insert("schemaType".into(), content.schema_type.clone().into());
    if !content.references.is_empty() {
        let refs: Vec<Value> = content
            .references
            .iter()
            .map(|r| json!({"name": r.name, "subject": r.subject, "version": r.version}))
            .collect();
        out.insert("references".into(), Value::Array(refs));
    }
    for (key, raw) in [
        ("metadata", &content.metadata),
        ("ruleSet", &content.rule_set),
    ] {
        if let Some(v) = raw.as_deref().and_then(|r| serde_json::from_str(r).ok()) {
            out.insert(key.into(), v);
        }
    }
    out.insert("schema".into(), content.schema.clone().into());
}

fn view_json(v: &VersionView) -> Value {
    let mut out = Map::new();
    out.insert("subject".into(), v.subject.clone().into());
    out.insert("version".into(), v.version.into());
    out.insert("id".into(), v.schema.id.into());
    schema_fields(&v.schema.content, &mut out);
    if v.deleted {
        out.insert("deleted".into(), true.into());
    }
    Value::Object(out)
}

fn schema_json(s: &StoredSchema) -> Value {
    let mut out = Map::new();
    schema_fields(&s.content, &mut out);
    Value::Object(out)
}

fn raw_text(text: String) -> Response {
    let mut r = (StatusCode::OK, text).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    r
}

/// Answers 403 unless the request's principal may do `op` on `resource`.
fn authorize(
    app: &App,
    principal: Option<&Principal>,
    op: Operation,
    resource: Resource,
) -> Result<()> {
    match (&app.gate, principal) {
        (Some(gate), Some(p)) if !gate.allowed(&p.name, &p.host, op, &resource) => {
            let on = match &resource {
                Resource::Subject(s) => format!("Subject: {s}"),
                Resource::Registry => "the registry's global config and mode".to_string(),
            };
            Err(RegistryError::forbidden(
                &p.name,
                format_args!("operation {op:?} on {on}"),
            ))
        }
        _ => Ok(()),
    }
}

fn subject_res(s: &str) -> Resource {
    Resource::Subject(s.to_string())
}

type Q = Query<HashMap<String, String>>;
type P = Option<axum::Extension<Principal>>;

fn who(p: &P) -> Option<&Principal> {
    p.as_ref().map(|e| &e.0)
}

// ---------------------------------------------------------------------- handlers

async fn root() -> Response {
    ok(json!({}))
}

async fn contexts() -> Response {
    ok(json!(["."]))
}

async fn not_found() -> Response {
    error_response(RegistryError::new(404, "HTTP 404 Not Found"))
}

async fn schema_types() -> Response {
    let names: Vec<&str> = SchemaType::ALL.iter().map(|t| t.name()).collect();
    ok(json!(names))
}

/// Whether the principal may read some subject that uses schema `id` (Redpanda's rule: an id
/// is as readable as the subjects that use it); 40301 otherwise.
async fn may_read_schema(app: &App, principal: Option<&Principal>, id: u32) -> Result<()> {
    if app.gate.is_none() || principal.is_none() {
        return Ok(());
    }
    let usages = app.registry.usages(id, true).await?;
    if usages
        .iter()
        .any(|u| authorize(app, principal, Operation::Read, subject_res(&u.subject)).is_ok())
    {
        Ok(())
    } else {
        let who = principal.map_or("", |p| p.name.as_str());
        Err(RegistryError::forbidden(
            who,
            format_args!("operation Read on every subject that uses schema {id}"),
        ))
    }
}

async fn schema_by_id(
    State(app): State<App>,
    p: P,
    Path(id): Path<String>,
    Query(q): Q,
) -> Response {
    answer(
        async {
            let id = schema_id(&id)?;
            may_read_schema(&app, who(&p), id).await?;
            let mut schema = app.registry.schema_by_id(id).await?;
            schema.content.schema = app
                .registry
                .formatted(&schema, q.get("format").map(String::as_str))
                .await?;
            Ok(schema_json(&schema))
        }
        .await,
    )
}

async fn schema_text_by_id(State(app): State<App>, p: P, Path(id): Path<String>) -> Response {
    let r = async {
        let id = schema_id(&id)?;
        may_read_schema(&app, who(&p), id).await?;
        Ok(app.registry.schema_by_id(id).await?.content.schema)
    }
    .await;
    match r {
        Ok(t) => raw_text(t),
        Err(e) => error_response(e),
    }
}

async fn schema_subjects(
    State(app): State<App>,
    p: P,
    Path(id): Path<String>,
    Query(q): Q,
) -> Response {
    answer(
        async {
            let id = schema_id(&id)?;
            let mut subjects: Vec<String> = app
                .registry
                .usages(id, flag(&q, "deleted"))
                .await?
                .into_iter()
                .filter(|u| {
                    authorize(&app, who(&p), Operation::Read, subject_res(&u.subject)).is_ok()
                })
                .map(|u| u.subject)
                .collect();
            subjects.dedup();
            Ok(json!(subjects))
        }
        .await,
    )
}

async fn schema_versions(
    State(app): State<App>,
    p: P,
    Path(id): Path<String>,
    Query(q): Q,
) -> Response {
    answer(
        async {
            let id = schema_id(&id)?;
            let versions: Vec<Value> = app
                .registry
                .usages(id, flag(&q, "deleted"))
                .await?
                .into_iter()
                .filter(|u| {
                    authorize(&app, who(&p), Operation::Read, subject_res(&u.subject)).is_ok()
                })
                .map(|u| json!({"subject": u.subject, "version": u.version}))
                .collect();
            Ok(json!(versions))
        }
        .await,
    )
}

async fn subjects(State(app): State<App>, p: P, Query(q): Q) -> Response {
    answer(
        async {
            let prefix = param(&q, &["subjectPrefix", "subject"]).unwrap_or("");
            let prefix = if prefix == ":*:" { "" } else { prefix };
            let deleted_only = flag(&q, "deletedOnly") || flag(&q, "deleted_only");
            let subjects: Vec<String> = app
                .registry
                .subjects(prefix, flag(&q, "deleted"), deleted_only)
                .await?
                .into_iter()
                .filter(|s| authorize(&app, who(&p), Operation::Describe, subject_res(s)).is_ok())
                .collect();
            Ok(json!(page(subjects, &q)))
        }
        .await,
    )
}

/// `offset` and `limit` (-1: all).
fn page<T>(items: Vec<T>, q: &HashMap<String, String>) -> Vec<T> {
    let offset = q
        .get("offset")
        .and_then(|o| o.parse::<usize>().ok())
        .unwrap_or(0);
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<i64>().ok())
        .filter(|l| *l >= 0)
        .map_or(usize::MAX, |l| l as usize);
    items.into_iter().skip(offset).take(limit).collect()
}

async fn lookup(
    State(app): State<App>,
    p: P,
    Path(subject): Path<String>,
    Query(q): Q,
    body: Bytes,
) -> Response {
    answer(
        async {
            authorize(&app, who(&p), Operation::Read, subject_res(&subject))?;
            let req = schema_request(&body)?;
            let v = app
                .registry
                .lookup(&subject, &req, flag(&q, "deleted"))
                .await?;
            Ok(view_json(&v))
        }
        .await,
    )
}

async fn delete_subject(
    State(app): State<App>,
    p: P,
    Path(subject): Path<String>,
    Query(q): Q,
) -> Response {
    answer(
        async {
            authorize(&app, who(&p), Operation::Delete, subject_res(&subject))?;
            let versions = app
                .registry
                .delete(&subject, None, flag(&q, "permanent"))
                .await?;
            Ok(json!(versions))
        }
        .await,
    )
}

async fn versions(
    State(app): State<App>,
    p: P,
    Path(subject): Path<String>,
    Query(q): Q,
) -> Response {
    answer(
        async {
            authorize(&app, who(&p), Operation::Describe, subject_res(&subject))?;
            let deleted_only = flag(&q, "deletedOnly") || flag(&q, "deleted_only");
            let versions = app
                .registry
                .versions(&subject, flag(&q, "deleted"), deleted_only)
                .await?;
            Ok(json!(page(versions, &q)))
        }
        .await,
    )
}

async fn register(
    State(app): State<App>,
    p: P,
    Path(subject): Path<String>,
    Query(q): Q,
    body: Bytes,
) -> Response {
    answer(
        async {
            authorize(&app, who(&p), Operation::Write, subject_res(&subject))?;
            let req = schema_request(&body)?;
            let (id, version, content) = app
                .registry
                .register(&subject, &req, flag(&q, "force"))
                .await?;
            let mut out = Map::new();
            out.insert("id".into(), id.into());
            out.insert("version".into(), version.into());
            schema_fields(&content, &mut out);
            Ok(Value::Object(out))
        }
        .await,
    )
}

async fn version(
    State(app): State<App>,
    p: P,
    Path((subject, version)): Path<(String, String)>,
    Query(q): Q,
) -> Response {
    answer(
        async {
            authorize(&app, who(&p), Operation::Read, subject_res(&subject))?;
            let spec = VersionSpec::parse(&version)?;
            let mut v = app
                .registry
                .version(&subject, spec, flag(&q, "deleted"))
                .await?;
            v.schema.content.schema = app
                .registry
                .formatted(&v.schema, q.get("format").map(String::as_str))
                .await?;
            Ok(view_json(&v))
        }
        .await,
    )
}

async fn version_text(
    State(app): State<App>,
    p: P,
    Path((subject, version)): Path<(String, String)>,
    Query(q): Q,
) -> Response {
    let r = async {
        authorize(&app, who(&p), Operation::Read, subject_res(&subject))?;
        let spec = VersionSpec::parse(&version)?;
        Ok(app
            .registry
            .version(&subject, spec, flag(&q, "deleted"))
            .await?
            .schema
            .content
            .schema)
    }
    .await;
    match r {
        Ok(t) => raw_text(t),
        Err(e) => error_response(e),
    }
}

async fn referenced_by(
    State(app): State<App>,
    p: P,
    Path((subject, version)): Path<(String, String)>,
) -> Response {
    answer(
        async {
            authorize(&app, who(&p), Operation::Read, subject_res(&subject))?;
            let spec = VersionSpec::parse(&version)?;
            Ok(json!(app.registry.referenced_by(&subject, spec).await?))
        }
        .await,
    )
}

async fn delete_version(
    State(app): State<App>,
    p: P,
    Path((subject, version)): Path<(String, String)>,
    Query(q): Q,
) -> Response {
    answer(
        async {
            authorize(&app, who(&p), Operation::Delete, subject_res(&subject))?;
            let spec = VersionSpec::parse(&version)?;
            let deleted = app
                .registry
                .delete(&subject, Some(spec), flag(&q, "permanent"))
                .await?;
            Ok(json!(deleted.first().copied().unwrap_or_default()))
        }
        .await,
    )
}

async fn latest_with_metadata(
    State(app): State<App>,
    p: P,
    Path(subject): Path<String>,
    uri: axum::http::Uri,
) -> Response {
    answer(
        async {
            authorize(&app, who(&p), Operation::Read, subject_res(&subject))?;
            // `key=a&value=1&key=b&value=2`: repeated names, zipped into pairs.
            let pairs: Vec<(String, String)> =
                serde_urlencoded_pairs(uri.query().unwrap_or_default());
            let keys = pairs
                .iter()
                .filter(|(k, _)| k == "key")
                .map(|(_, v)| v.clone());
            let values = pairs
                .iter()
                .filter(|(k, _)| k == "value")
                .map(|(_, v)| v.clone());
            let wanted: Vec<(String, String)> = keys.zip(values).collect();
            let deleted = pairs
                .iter()
                .any(|(k, v)| k == "deleted" && v.eq_ignore_ascii_case("true"));
            Ok(view_json(
                &app.registry
                    .latest_with_metadata(&subject, &wanted, deleted)
                    .await?,
            ))
        }
        .await,
    )
}

fn serde_urlencoded_pairs(query: &str) -> Vec<(String, String)> {
    serde_urlencoded::from_str::<Vec<(String, String)>>(query).unwrap_or_default()
}

// ---------------------------------------------------------------------- config and mode

async fn get_global_config(State(app): State<App>, p: P, Query(q): Q) -> Response {
    answer(
        async {
            authorize(
                &app,
                who(&p),
                Operation::DescribeConfigs,
                Resource::Registry,
            )?;
            app.registry
                .get_config(None, flag(&q, "defaultToGlobal"))
                .await
        }
        .await,
    )
}

async fn put_global_config(State(app): State<App>, p: P, body: Bytes) -> Response {
    answer(
        async {
            authorize(&app, who(&p), Operation::AlterConfigs, Resource::Registry)?;
            app.registry.set_config(None, &parse_body(&body)?).await
        }
        .await,
    )
}

async fn delete_global_config(State(app): State<App>, p: P) -> Response {
    answer(
        async {
            authorize(&app, who(&p), Operation::AlterConfigs, Resource::Registry)?;
            app.registry.delete_config(None).await
        }
        .await,
    )
}

async fn get_config(
    State(app): State<App>,
    p: P,
    Path(subject): Path<String>,
    Query(q): Q,
) -> Response {
    answer(
        async {
            authorize(
                &app,
                who(&p),
                Operation::DescribeConfigs,
                subject_res(&subject),
            )?;
            app.registry
                .get_config(Some(&subject), flag(&q, "defaultToGlobal"))
                .await
        }
        .await,
    )
}

async fn put_config(
    State(app): State<App>,
    p: P,
    Path(subject): Path<String>,
    body: Bytes,
) -> Response {
    answer(
        async {
            authorize(
                &app,
                who(&p),
                Operation::AlterConfigs,
                subject_res(&subject),
            )?;
            app.registry
                .set_config(Some(&subject), &parse_body(&body)?)
                .await
        }
        .await,
    )
}

async fn delete_config(State(app): State<App>, p: P, Path(subject): Path<String>) -> Response {
    answer(
        async {
            authorize(
                &app,
                who(&p),
                Operation::AlterConfigs,
                subject_res(&subject),
            )?;
            app.registry.delete_config(Some(&subject)).await
        }
        .await,
    )
}

async fn get_global_mode(State(app): State<App>, p: P, Query(q): Q) -> Response {
    answer(
        async {
            authorize(
                &app,
                who(&p),
                Operation::DescribeConfigs,
                Resource::Registry,
            )?;
            app.registry
                .get_mode(None, flag(&q, "defaultToGlobal"))
                .await
        }
        .await,
    )
}

async fn put_global_mode(State(app): State<App>, p: P, Query(q): Q, body: Bytes) -> Response {
    answer(
        async {
            authorize(&app, who(&p), Operation::AlterConfigs, Resource::Registry)?;
            app.registry
                .set_mode(None, &parse_body(&body)?, flag(&q, "force"))
                .await
        }
        .await,
    )
}

async fn delete_global_mode(State(app): State<App>, p: P) -> Response {
    answer(
        async {
            authorize(&app, who(&p), Operation::AlterConfigs, Resource::Registry)?;
            app.registry.delete_mode(None).await
        }
        .await,
    )
}

async fn get_mode(
    State(app): State<App>,
    p: P,
    Path(subject): Path<String>,
    Query(q): Q,
) -> Response {
    answer(
        async {
            authorize(
                &app,
                who(&p),
                Operation::DescribeConfigs,
                subject_res(&subject),
            )?;
            app.registry
                .get_mode(Some(&subject), flag(&q, "defaultToGlobal"))
                .await
        }
        .await,
    )
}

async fn put_mode(
    State(app): State<App>,
    p: P,
    Path(subject): Path<String>,
    Query(q): Q,
    body: Bytes,
) -> Response {
    answer(
        async {
            authorize(
                &app,
                who(&p),
                Operation::AlterConfigs,
                subject_res(&subject),
            )?;
            app.registry
                .set_mode(Some(&subject), &parse_body(&body)?, flag(&q, "force"))
                .await
        }
        .await,
    )
}

async fn delete_mode(State(app): State<App>, p: P, Path(subject): Path<String>) -> Response {
    answer(
        async {
            authorize(
                &app,
                who(&p),
                Operation::AlterConfigs,
                subject_res(&subject),
            )?;
            app.registry.delete_mode(Some(&subject)).await
        }
        .await,
    )
}

// ---------------------------------------------------------------------- compatibility

async fn check_all(
    State(app): State<App>,
    p: P,
    Path(subject): Path<String>,
    Query(q): Q,
    body: Bytes,
) -> Response {
    check(app, p, subject, None, q, body).await
}

async fn check_version(
    State(app): State<App>,
    p: P,
    Path((subject, version)): Path<(String, String)>,
    Query(q): Q,
    body: Bytes,
) -> Response {
    match VersionSpec::parse(&version) {
        Ok(spec) => check(app, p, subject, Some(spec), q, body).await,
        Err(e) => error_response(e),
    }
}

async fn check(
    app: App,
    p: P,
    subject: String,
    spec: Option<VersionSpec>,
    q: HashMap<String, String>,
    body: Bytes,
) -> Response {
    answer(
        async {
            authorize(&app, who(&p), Operation::Read, subject_res(&subject))?;
            let verbose = flag(&q, "verbose");
            let req = schema_request(&body)?;
            let (compatible, messages) = match app.registry.check(&subject, spec, &req).await {
                // With `verbose`, an invalid schema is a reason, not an error.
                Err(e) if verbose && e.code == 42201 => (false, vec![e.message]),
                r => r?,
            };
            Ok(if verbose {
                json!({"is_compatible": compatible, "messages": messages})
            } else {
                json!({"is_compatible": compatible})
            })
        }
        .await,
    )
}
