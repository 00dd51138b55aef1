//! Weir's Kafka API layer: one handler per API key.
//!
//! [`Broker::handle`] takes a decoded request and returns a [`Reply`]: most handlers answer at
//! once; Produce (waiting for durability) and Fetch (long polling) may answer later, so that the
//! network layer can go on reading the connection's next request while they wait, and still
//! send responses in order.
//!
//! - `apis/`: a module per API key with everything about it: the versions Weir serves, what it
//!   must be authorized for (and how refused parts come back), its error response, its handler
//!   and its sample requests for the every-version test. Its one list makes the dispatch,
//!   [`supported_versions`] (what ApiVersions advertises) and [`error_response_for`].
//! - [`Broker::handle_on`] is the pipeline every request goes through: count, client zone, wait
//!   for opening, authorize (`authz.rs`), handle (`apis/`), throttle (`quotas.rs`), put refused
//!   parts back.
//! - The services handlers take what they need from, as fields of [`Broker`]: topics and
//!   partitions ([`weir_partition`]), groups ([`weir_group::GroupCoordinator`]), transactions
//!   ([`weir_txn::TxnCoordinator`]), the cluster ([`weir_cluster::Cluster`]), the metadata store,
//!   zones (`zones.rs`), quotas (`quotas.rs`), SASL (`sasl.rs`, on [`weir_auth`]) and fetch
//!   sessions (`fetch_session.rs`, KIP-227).
//! - What several APIs share stays beside them: `fetch.rs` (a fetch's reads), `txn.rs`
//!   (KIP-890 verification, markers), `admin.rs`, `acls.rs`, `cluster.rs`, `surface.rs`
//!   (`__consumer_offsets` as Metadata lists it); `internal.rs`: the internal API leaders answer
//!   for brokers of other zones (forwarded produces, offsets). Who a connection is lives in its
//!   [`Conn`]; the network layer serves nothing else until it has authenticated.
//! - `frame.rs`: [`encode_response`]'s result, a [`ResponseFrame`] of chunks: a Fetch
//!   response's record batches are kept by reference, not copied into the response.

mod acls;
mod admin;
mod apis;
mod authz;
mod cluster;
mod conn;
mod fetch;
mod fetch_session;
mod frame;
pub mod group_configs;
mod internal;
mod opening;
pub mod quotas;
mod sasl;
pub mod share;
mod surface;
mod txn;
mod zones;

pub use acls::{add_acls, all_acls, remove_acls, AclError};
pub use cluster::txn_key;
pub use conn::{Conn, ListenerSecurity};
pub use fetch_session::{FetchSessions, SessionMeters};
pub use frame::ResponseFrame;
pub use internal::InternalReply;
pub use zones::{ZoneMeters, ZoneServices};

use std::sync::Arc;

use bytes::BytesMut;
use futures::future::BoxFuture;
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Encodable, StrBytes};
use weir_cluster::Cluster;
use weir_group::GroupCoordinator;
use weir_meta::MetaStore;
use weir_metrics::{Counter, Histogram};
use weir_partition::Topics;

/// The ApiVersions response: every implemented API and its versions.
pub fn api_versions_response(error_code: i16) -> kafka_protocol::messages::ApiVersionsResponse {
    apis::api_versions(error_code)
}

pub use apis::{error_response_for, supported_versions};
#[cfg(feature = "testing")]
pub use apis::{samples, samples_of};

/// The answer to `request` when its handler failed or its response would not encode: the API's
/// response with UNKNOWN_SERVER_ERROR wherever it carries an error code, at the request's version.
/// `None` for APIs Weir does not implement.
pub fn error_response(header: &RequestHeader, request: &RequestKind) -> Option<ResponseKind> {
    error_response_for(
        request,
        header.request_api_version,
        kafka_protocol::ResponseError::UnknownServerError,
    )
}

/// A response now, or one that is still being worked out (durability, long polling).
pub enum Reply {
    Now(Box<ResponseKind>),
    Later(BoxFuture<'static, ResponseKind>),
    /// Produce with acks=0: nothing goes back, but the connection holds the request (its bytes
    /// and its place) until the future is done, so acks=0 produce is bounded like any other.
    Silent(BoxFuture<'static, ()>),
    /// An API Weir decodes but does not implement (nor advertise).
    Unsupported,
}

/// Broker settings the API layer needs.
#[derive(Debug, Clone)]
pub struct BrokerIdentity {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    pub cluster_id: String,
    /// What DescribeLogDirs names this broker's one log directory.
    pub log_dir: String,
}

/// Bounds the API layer puts on what clients ask for.
#[derive(Debug, Clone)]
pub struct ApiLimits {
    /// `fetch.max.bytes`: record bytes of one Fetch response at most, whatever the request
    /// asks (the first partition with data still returns one whole batch, KIP-74).
    pub fetch_max_bytes: usize,
    /// `max.incremental.fetch.session.cache.slots`: fetch sessions (KIP-227) open at once; 0
    /// turns them off.
    pub fetch_session_slots: usize,
    /// `group.share.max.share.sessions`: share sessions (KIP-932) open at once.
    pub share_sessions: usize,
}

impl Default for ApiLimits {
    fn default() -> Self {
        // Kafka's defaults: 55 MiB, 1,000 sessions.
        ApiLimits {
            fetch_max_bytes: 55 << 20,
            fetch_session_slots: 1000,
            share_sessions: 2000,
        }
    }
}

/// Requests, errors and latencies by API.
#[derive(Debug)]
pub struct ApiMeters {
    /// Requests by API key.
    pub requests: Vec<Counter>,
    pub produce_latency: Histogram,
    pub fetch_latency: Histogram,
    pub produce_bytes: Counter,
    pub fetch_bytes: Counter,
    pub unsupported: Counter,
    /// Requests refused whole, or in part, by the ACLs.
    pub authorization_denied: Counter,
}

impl ApiMeters {
    /// Declares the request path's meters.
    pub fn register(&self, r: &mut weir_metrics::Registry) {
        let requests = self.requests.clone();
        r.counters_read("requests", "Kafka requests by API key.", move || {
            requests
                .iter()
                .enumerate()
                .filter(|(_, c)| c.get() > 0)
                .map(|(key, c)| (vec![("api_key", key.to_string())], c.get()))
                .collect()
        });
        r.counter(
            "unsupported_requests",
            "Requests for an API this broker does not serve (answered with an error, or the connection closed).",
            &self.unsupported,
        );
        r.histogram(
            "produce_latency",
            "Produce request latency, to durable.",
            &self.produce_latency,
        );
        r.histogram(
            "fetch_latency",
            "Fetch request latency, long polls included.",
            &self.fetch_latency,
        );
        r.counter(
            "produce_bytes",
            "Record bytes received by Produce.",
            &self.produce_bytes,
        );
        r.counter(
            "fetch_bytes",
            "Record bytes returned by Fetch.",
            &self.fetch_bytes,
        );
        r.counter(
            "authorization_denied",
            "Requests refused whole, or in part (some topics, groups or ids), by the ACLs.",
            &self.authorization_denied,
        );
    }
}

impl Default for ApiMeters {
    fn default() -> Self {
        ApiMeters {
            requests: (0..100).map(|_| Counter::default()).collect(),
            produce_latency: Histogram::default(),
            fetch_latency: Histogram::default(),
            produce_bytes: Counter::default(),
            fetch_bytes: Counter::default(),
            unsupported: Counter::default(),
            authorization_denied: Counter::default(),
        }
    }
}

pub struct Broker {
    pub identity: BrokerIdentity,
    pub cluster: Arc<Cluster>,
    pub topics: Arc<Topics>,
    pub groups: Arc<GroupCoordinator>,
    pub meta: Arc<dyn MetaStore>,
    pub limits: ApiLimits,
    pub meters: ApiMeters,
    /// Zone routing; `None` in tests that build a broker without it.
    pub zones: Option<Arc<ZoneServices>>,
    /// The transaction coordinator (and the producer ids of every producer).
    pub txns: Arc<weir_txn::TxnCoordinator>,
    /// Transactions V2: the partitions this broker added to each transactional id's current
    /// transaction, so that only a transaction's first write to a partition costs a metadata
    /// store round trip.
    txn_added: std::sync::Mutex<std::collections::HashMap<String, txn::AddedTo>>,
    /// SASL: failed authentications by address, and the meters.
    pub sasl: sasl::Guard,
    /// ACLs, when an authorizer is configured ([`authz::Authz::enable`]).
    pub authz: authz::Authz,
    /// Client quotas and the rates measured against them.
    pub quotas: Arc<quotas::QuotaManager>,
    /// Incremental fetch sessions (KIP-227).
    pub fetch_sessions: fetch_session::FetchSessions,
    /// Share groups' share-partitions and sessions on this broker (KIP-932), and group configs.
    pub shares: Arc<share::ShareService>,
    /// The schema registry over the metadata store, and the produce path's schema checks.
    pub schemas: Arc<weir_registry::validate::SchemaChecks>,
}

impl Broker {
    fn group_catalog(&self) -> weir_group::consumer::Topics {
        group_catalog(&self.topics)
    }

    /// Declares the meters of the request path and of every service the broker holds (its
    /// cluster membership included).
    pub fn register_meters(self: &Arc<Self>, r: &mut weir_metrics::Registry) {
        self.meters.register(r);
        let b = Arc::clone(self);
        fetch_session::SessionMeters::register(
            move || b.fetch_sessions.len(),
            &self.fetch_sessions.meters,
            r,
        );
        let b = Arc::clone(self);
        share::ShareMeters::register(move || b.shares.sessions(), &self.shares.meters, r);
        self.quotas.meters.register(r);
        self.sasl.meters.register(r);
        self.schemas.meters.register(r);
        self.schemas.registry().meters.register(r);
        self.groups.meters().register(r);
        self.txns.meters.register(r);
        self.topics.cleaner.register(r);
        self.topics.register_partition_meters(r);
        self.cluster.register_meters(r);
        if let Some(z) = &self.zones {
            weir_zone::meters::NetMeters::register(&z.net, r);
            z.meters.register(r);
            z.forwarder.meters.register(r);
        }
    }
}

/// The catalog as consumer groups see it: every topic's id and partition count, by name.
fn group_catalog(topics: &Topics) -> weir_group::consumer::Topics {
    topics
        .list()
        .iter()
        .map(|t| (t.name.clone(), (t.id, t.partition_count() as i32)))
        .collect()
}

/// Where clients of `listener` reach broker `b`: its endpoint of that name, or its one address
/// if it registered no listeners. `None`: `b` has no such listener (Kafka leaves it out).
pub(crate) fn endpoint<'a>(b: &'a weir_meta::BrokerInfo, listener: &str) -> Option<(&'a str, i32)> {
    if b.listeners.is_empty() {
        return Some((&b.host, b.port));
    }
    b.listeners
        .iter()
        .find(|l| l.name == listener)
        .map(|l| (l.host.as_str(), l.port))
}

pub(crate) fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

impl Broker {
    pub fn new(
        identity: BrokerIdentity,
        cluster: Arc<Cluster>,
        topics: Arc<Topics>,
        groups: Arc<GroupCoordinator>,
        meta: Arc<dyn MetaStore>,
        limits: ApiLimits,
    ) -> Arc<Broker> {
        Self::with_zones(identity, cluster, topics, groups, meta, limits, None)
    }

    pub fn with_zones(
        identity: BrokerIdentity,
        cluster: Arc<Cluster>,
        topics: Arc<Topics>,
        groups: Arc<GroupCoordinator>,
        meta: Arc<dyn MetaStore>,
        limits: ApiLimits,
        zones: Option<Arc<ZoneServices>>,
    ) -> Arc<Broker> {
        let txns = weir_txn::TxnCoordinator::new(Arc::clone(&meta), weir_txn::TxnConfig::default());
        let catalog = Arc::clone(&topics);
        groups.set_catalog(Arc::new(move || group_catalog(&catalog)));
        let fetch_sessions = fetch_session::FetchSessions::new(limits.fetch_session_slots);
        let shares = share::ShareService::new(Arc::clone(&meta), limits.share_sessions);
        let registry = weir_registry::Registry::new(
            Arc::clone(&meta) as Arc<dyn weir_meta::Schemas>,
            weir_registry::meters::RegistryMeters::default(),
        );
        let schemas = Arc::new(weir_registry::validate::SchemaChecks::new(Arc::new(
            registry,
        )));
        let broker = Arc::new(Broker {
            schemas,
            fetch_sessions,
            shares,
            identity,
            cluster,
            topics,
            groups,
            meta,
            limits,
            zones,
            meters: ApiMeters::default(),
            txns,
            txn_added: Default::default(),
            sasl: Default::default(),
            authz: Default::default(),
            quotas: Default::default(),
        });
        let writer: std::sync::Weak<dyn weir_txn::MarkerWriter> =
            Arc::downgrade(&(Arc::clone(&broker) as Arc<dyn weir_txn::MarkerWriter>));
        broker.txns.set_marker_writer(writer);
        broker
    }

    /// Handles one request. `client_host` is the peer's address, for group membership.
    pub async fn handle(
        self: &Arc<Self>,
        header: &RequestHeader,
        request: RequestKind,
        client_host: &str,
    ) -> Reply {
        self.handle_on(header, request, &Conn::from_host(client_host))
            .await
    }

    /// Handles one request that arrived on `conn`, in these steps: count it, find the client's
    /// zone, wait while the broker is still opening what the request needs, authorize (whole or in
    /// parts), handle, throttle by the client's quotas, and put the refused parts back.
    pub async fn handle_on(
        self: &Arc<Self>,
        header: &RequestHeader,
        request: RequestKind,
        conn: &Conn,
    ) -> Reply {
        let v = header.request_api_version;
        self.count(header);
        let client_id = header.client_id.as_ref().map_or("", |c| c.as_str());
        let zone = self.client_zone(conn, client_id, &request);
        self.wait_for_opening(&request, v).await;
        let (request, refused) = match self.authorize(conn, request, v) {
            Ok(authorized) => authorized,
            Err(refusal) => return refusal,
        };
        let produced = match &request {
            RequestKind::Produce(r) => Some(quotas::produce_bytes(r)),
            _ => None,
        };
        let cx = apis::Cx {
            header,
            conn,
            v,
            client_id,
            client_host: conn.host.as_str(),
            zone: zone.as_deref(),
            listener: conn.listener.name.as_str(),
        };
        let handling = std::time::Instant::now();
        let reply = self.serve(request, cx).await;
        let reply = self.quotas.throttle(
            reply,
            header.request_api_key,
            conn,
            client_id,
            produced,
            handling.elapsed(),
        );
        self.put_back(reply, refused)
    }

    /// Counts a request by its API.
    fn count(&self, header: &RequestHeader) {
        let counter = usize::try_from(header.request_api_key)
            .ok()
            .and_then(|k| self.meters.requests.get(k));
        if let Some(c) = counter {
            c.inc();
        }
    }

    /// The request as it may be served, and what of it was refused; or the refusal of all of it.
    /// Connections of the internal listener are not checked.
    fn authorize(
        &self,
        conn: &Conn,
        request: RequestKind,
        v: i16,
    ) -> Result<(RequestKind, Refused), Reply> {
        let Some(check) = self.check_for(conn) else {
            return Ok((request, Refused::default()));
        };
        match self.gate(&check, request, v) {
            authz::Gate::Refuse(r) => Err(Reply::Now(Box::new(r))),
            authz::Gate::Serve {
                request,
                denied,
                filter,
            } => Ok((request, Refused { denied, filter })),
        }
    }

    /// Joins the refused parts' errors to the response, and leaves out of listings what the
    /// principal may not describe.
    fn put_back(self: &Arc<Self>, reply: Reply, refused: Refused) -> Reply {
        let Refused { denied, filter } = refused;
        if denied.is_none() && filter.is_none() {
            return reply;
        }
        match reply {
            Reply::Now(r) => Reply::Now(Box::new(self.after_gate(*r, denied, filter.as_ref()))),
            Reply::Later(f) => {
                let this = Arc::clone(self);
                Reply::Later(Box::pin(async move {
                    let r = f.await;
                    this.after_gate(r, denied, filter.as_ref())
                }))
            }
            other => other,
        }
    }

    /// Dispatches a request (authorized) to its handler.
    async fn serve(self: &Arc<Self>, request: RequestKind, cx: apis::Cx<'_>) -> Reply {
        match apis::handle(self, request, &cx).await {
            Ok(reply) => reply,
            Err(other) => {
                self.meters.unsupported.inc();
                tracing::debug!(
                    api_key = cx.header.request_api_key,
                    version = cx.v,
                    "API not implemented"
                );
                match refusal(&other) {
                    Some(r) => Reply::Now(Box::new(r)),
                    None => Reply::Unsupported,
                }
            }
        }
    }
}

/// What authorization took out of a request: the error response of the denied parts, and the
/// checks that filter listings.
#[derive(Default)]
struct Refused {
    denied: Option<ResponseKind>,
    filter: Option<authz::Check>,
}

/// An error response for an API Weir knows but does not implement (and does not advertise), for
/// the APIs whose response has a top-level error code. Others close the connection.
fn refusal(request: &RequestKind) -> Option<ResponseKind> {
    use kafka_protocol::messages::*;
    use kafka_protocol::ResponseError::{UnsupportedSaslMechanism, UnsupportedVersion};
    let code = UnsupportedVersion.code();
    macro_rules! refuse {
        ($($kind:ident => $resp:ident),* $(,)?) => {
            match request {
                RequestKind::SaslHandshake(_) => Some(ResponseKind::SaslHandshake(
                    SaslHandshakeResponse::default().with_error_code(UnsupportedSaslMechanism.code()),
                )),
                $(RequestKind::$kind(_) => Some(ResponseKind::$kind($resp::default().with_error_code(code))),)*
                _ => None,
            }
        };
    }
    refuse!(
        AlterPartitionReassignments => AlterPartitionReassignmentsResponse,
        ListPartitionReassignments => ListPartitionReassignmentsResponse,
        GetTelemetrySubscriptions => GetTelemetrySubscriptionsResponse,
        PushTelemetry => PushTelemetryResponse,
        CreateDelegationToken => CreateDelegationTokenResponse,
        RenewDelegationToken => RenewDelegationTokenResponse,
        ExpireDelegationToken => ExpireDelegationTokenResponse,
        DescribeDelegationToken => DescribeDelegationTokenResponse,
    )
}

/// Encodes a response with its header and length prefix, for the request's API key and
/// version. A Fetch response's record batches stay where they are (see [`ResponseFrame`]).
pub fn encode_response(
    header: &RequestHeader,
    response: &ResponseKind,
) -> anyhow_free::Result<ResponseFrame> {
    let key = ApiKey::try_from(header.request_api_key)
        .map_err(|_| anyhow_free::Error("unknown API key".into()))?;
    let version = header.request_api_version;
    let rh = ResponseHeader::default().with_correlation_id(header.correlation_id);
    fn err(e: impl std::fmt::Display) -> anyhow_free::Error {
        anyhow_free::Error(e.to_string())
    }
    if let ResponseKind::Fetch(fetch) = response {
        let batches: std::collections::VecDeque<bytes::Bytes> = fetch
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter_map(|p| p.records.clone())
            .filter(|r| r.len() >= frame::SPLICE_MIN)
            .collect();
        let parts: usize = fetch.responses.iter().map(|t| t.partitions.len()).sum();
        let mut buf = frame::SplicingBuf::new(64 + 64 * parts, batches);
        rh.encode(&mut buf, key.response_header_version(version))
            .map_err(err)?;
        fetch.encode(&mut buf, version).map_err(err)?;
        return Ok(buf.finish());
    }
    let mut buf = BytesMut::with_capacity(256);
    buf.extend_from_slice(&[0, 0, 0, 0]);
    rh.encode(&mut buf, key.response_header_version(version))
        .map_err(err)?;
    response.encode(&mut buf, version).map_err(err)?;
    let len = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(ResponseFrame::from(buf))
}

/// Errors of encoding, without pulling `anyhow` into the library's signatures.
pub mod anyhow_free {
    #[derive(Debug)]
    pub struct Error(pub String);

    impl std::fmt::Display for Error {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Error {}

    pub type Result<T> = std::result::Result<T, Error>;
}

/// The error for a request that names leader epoch `client` (-1: none) of a partition at epoch
/// `current`, as Kafka answers (KIP-320): an older epoch is fenced, a newer one unknown.
pub(crate) fn epoch_mismatch(client: i32, current: i32) -> Option<kafka_protocol::ResponseError> {
    use kafka_protocol::ResponseError::{FencedLeaderEpoch, UnknownLeaderEpoch};
    match client {
        c if c < 0 || c == current => None,
        c if c < current => Some(FencedLeaderEpoch),
        _ => Some(UnknownLeaderEpoch),
    }
}

/// Where a client should send requests for a partition this broker does not lead (KIP-951).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaderHint {
    pub node_id: i32,
    pub epoch: i32,
    pub host: String,
    pub port: i32,
    pub rack: String,
}

impl Broker {
    /// The broker that leads, or is about to lead, `topic`-`partition`: a move's target (at the
    /// epoch it will open with), else the leader in this broker's view if that is another
    /// broker. `None` when there is nothing better to say than "refresh your metadata".
    ///
    /// A client of a zone is named the broker that serves the partition to its zone (the same
    /// id and address Metadata gives it), never the leader's id with another address: a client
    /// that gets a hint naming a broker it cannot map back strands the partition (AutoMQ
    /// #3546, franz-go).
    pub(crate) fn leader_hint(
        &self,
        zone: Option<&str>,
        listener: &str,
        topic: &str,
        partition: i32,
    ) -> Option<LeaderHint> {
        let view = self.cluster.view();
        let index = u32::try_from(partition).ok()?;
        let a = view.assignment(topic, index)?;
        let (node, epoch) = match (a.target, a.leader) {
            (Some(t), _) => (t, a.epoch + 1),
            (None, Some(l)) if l != self.cluster.node_id() => (l, a.epoch),
            _ => return None,
        };
        let mut b = view.reachable_brokers().find(|b| b.node_id == node)?;
        if let Some(zone) = zone {
            if self.routing_by_name(topic) == weir_zone::Routing::InZone
                && !b.zone.is_empty()
                && b.zone != zone
            {
                if let Some(z) = weir_zone::in_zone_broker(&view, zone, topic, index) {
                    b = z;
                }
            }
        }
        let (host, port) = endpoint(b, listener)?;
        Some(LeaderHint {
            node_id: b.node_id,
            epoch: i32::try_from(epoch).unwrap_or(i32::MAX),
            host: host.to_string(),
            port,
            rack: b.zone.clone(),
        })
    }
}

/// How long topic creation waits for the new partitions to get leaders.
const LEADERS_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Broker {
    /// Waits (a few seconds at most) until every partition of `topic` has a leader and those
    /// led here are open, as Kafka's CreateTopics waits for leaders: a client that produces
    /// right after creating a topic is not turned away. The controller places partitions
    /// within milliseconds of hearing of the topic.
    pub(crate) async fn wait_for_leaders(&self, topic: &str) {
        let me = self.cluster.node_id();
        let mut views = self.cluster.watch();
        let deadline = tokio::time::Instant::now() + LEADERS_WAIT;
        loop {
            let ready = {
                let view = views.borrow_and_update().clone();
                let count = self.topics.get(topic).map_or(0, |t| t.partition_count());
                (0..count as u32).all(|i| match view.assignment(topic, i) {
                    Some(a) => match a.leader {
                        Some(l) if l == me => self.topics.partition(topic, i as i32).is_some(),
                        Some(_) => true,
                        None => false,
                    },
                    None => false,
                })
            };
            if ready {
                return;
            }
            // Opening here happens after the view changes: poll briefly as well.
            let tick = tokio::time::sleep(std::time::Duration::from_millis(5));
            tokio::select! {
                _ = views.changed() => {}
                _ = tick => {}
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(topic, "partitions have no leader yet; clients will retry");
                    return;
                }
            }
        }
    }
}
