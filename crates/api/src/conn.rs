//! What the API layer knows of a connection: its peer, the zone of the client on it, the
//! listener it came in on and who it authenticated as.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use weir_auth::{Principal, SaslMechanism, SecurityProtocol};

/// What a listener asks of the connections it accepts.
#[derive(Debug, Clone)]
pub struct ListenerSecurity {
    /// The listener's name, as `listeners` and Metadata's endpoints name it.
    pub name: String,
    pub protocol: SecurityProtocol,
    /// `sasl.enabled.mechanisms`.
    pub mechanisms: Vec<SaslMechanism>,
    /// `connections.max.reauth.ms` (KIP-368): a SASL session lasts this long, then the client
    /// must authenticate again on the connection or have it closed (0: sessions do not end).
    pub reauth_ms: u64,
    /// The internal listener of a cluster with `cluster.internal_secret`: a peer is served once
    /// its hello proves it holds the secret.
    pub peer_secret: Option<Arc<[u8]>>,
    /// `cluster.legacy_peer_hello`: a peer's hello without a challenge (earlier versions') is
    /// accepted, while a cluster is upgraded from them.
    pub legacy_peer_hello: bool,
}

impl Default for ListenerSecurity {
    fn default() -> Self {
        ListenerSecurity {
            name: "PLAINTEXT".into(),
            protocol: SecurityProtocol::Plaintext,
            mechanisms: Vec::new(),
            reauth_ms: 0,
            peer_secret: None,
            legacy_peer_hello: false,
        }
    }
}

/// Where a connection's SASL exchange is.
#[derive(Debug, Default)]
pub(crate) enum Sasl {
    /// Nothing yet (or the last exchange ended).
    #[default]
    Idle,
    /// SaslHandshake chose a mechanism: SaslAuthenticate comes next.
    Chosen(SaslMechanism),
    /// SCRAM: the server's first message went out; the client's proof comes next.
    ScramProof(Box<weir_auth::scram::AwaitingProof>),
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// One client (or peer broker) connection, shared by the network layer and the handlers.
#[derive(Debug)]
pub struct Conn {
    pub peer: SocketAddr,
    /// The peer's address, as group membership reports it.
    pub host: String,
    /// Accepted on the internal listener: a peer broker, which may send internal API keys.
    pub internal: bool,
    /// The zone of the listener it connected to, if the listener has one.
    pub listener_zone: Option<String>,
    /// The listener it connected to.
    pub listener: Arc<ListenerSecurity>,
    state: Mutex<State>,
    auth: Mutex<Auth>,
    /// A quota was exceeded: read no request before then (KIP-219's muted channel). Shared
    /// with answers that come later (a long-polled fetch).
    throttle: Arc<Mutex<Option<Instant>>>,
    /// Resolves once the appends of the last forwarded produce read on this connection have
    /// started: the next one's start after them, whatever order their reads finish in.
    pub(crate) forward_tail: Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
    /// Unique among this process's connections.
    pub id: u64,
    /// Run when the connection is dropped (its share sessions end with it).
    on_close: Mutex<Vec<CloseHook>>,
}

/// Something to do when a connection goes away.
struct CloseHook(Box<dyn FnOnce() + Send>);

impl std::fmt::Debug for CloseHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CloseHook")
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let hooks = std::mem::take(self.on_close.get_mut().unwrap_or_else(|e| e.into_inner()));
        for hook in hooks {
            (hook.0)();
        }
    }
}

/// Who the connection is and how far its authentication got.
#[derive(Debug, Default)]
pub(crate) struct Auth {
    /// Authenticated (SASL), or given by the listener (a client certificate, or anonymous).
    pub(crate) principal: Option<Principal>,
    /// The mechanism the principal authenticated with: a re-authentication must use it too.
    pub(crate) mechanism: Option<SaslMechanism>,
    pub(crate) sasl: Sasl,
    /// When the SASL session ends (KIP-368).
    pub(crate) expires: Option<Instant>,
    /// Close the connection once the responses so far are written (a failed authentication).
    pub(crate) close: bool,
}

#[derive(Debug, Default)]
struct State {
    /// The RackId of the client's fetches (KIP-392).
    rack: Option<String>,
    /// The zone last resolved, and the client.id it was resolved with.
    resolved: Option<(String, Option<Arc<str>>)>,
    /// A peer broker's zone, from its hello.
    peer_zone: Option<Arc<str>>,
    /// The nonce a peer broker was challenged with, until its hello answers it.
    challenge: Option<[u8; 32]>,
}

impl Conn {
    pub fn new(peer: SocketAddr, internal: bool, listener_zone: Option<String>) -> Conn {
        Conn::on_listener(peer, internal, listener_zone, Arc::default())
    }

    /// A connection accepted on a listener with `security`.
    pub fn on_listener(
        peer: SocketAddr,
        internal: bool,
        listener_zone: Option<String>,
        listener: Arc<ListenerSecurity>,
    ) -> Conn {
        // Without SASL, who the client is is settled at accept (by its certificate, if it has
        // one: see `set_principal`).
        let principal = (!listener.protocol.sasl() && listener.peer_secret.is_none())
            .then(Principal::anonymous);
        Conn {
            peer,
            host: peer.ip().to_string(),
            internal,
            listener_zone,
            listener,
            state: Mutex::new(State::default()),
            auth: Mutex::new(Auth {
                principal,
                ..Auth::default()
            }),
            forward_tail: Mutex::new(None),
            throttle: Arc::default(),
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            on_close: Mutex::new(Vec::new()),
        }
    }

    /// Runs `hook` when the connection goes away.
    pub(crate) fn on_close(&self, hook: impl FnOnce() + Send + 'static) {
        self.on_close
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(CloseHook(Box::new(hook)));
    }

    pub(crate) fn auth(&self) -> std::sync::MutexGuard<'_, Auth> {
        self.auth.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets who the connection is before any request (the subject of a TLS client
    /// certificate).
    pub fn set_principal(&self, principal: Principal) {
        self.auth().principal = Some(principal);
    }

    /// Who the connection is; `None` until a SASL listener's client has authenticated.
    pub fn principal(&self) -> Option<Principal> {
        self.auth().principal.clone()
    }

    /// Whether requests other than ApiVersions and the SASL ones may be served: the client
    /// has authenticated (if the listener asks for it) and its session has not ended.
    pub fn may_serve(&self, now: Instant) -> bool {
        let a = self.auth();
        a.principal.is_some() && a.expires.is_none_or(|e| now < e)
    }

    /// Until when the connection reads no request, if a quota holds it back.
    pub fn throttled_until(&self) -> Option<Instant> {
        *self.throttle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Mutes the connection until `until` (later answers use the handle).
    pub(crate) fn throttle_handle(&self) -> Arc<Mutex<Option<Instant>>> {
        Arc::clone(&self.throttle)
    }

    /// Whether the connection is to be closed once its responses so far are written.
    pub fn closing(&self) -> bool {
        self.auth().close
    }

    /// A connection that is only a host name (tests, and callers without a socket).
    pub fn from_host(host: &str) -> Conn {
        let mut c = Conn::new(SocketAddr::from(([0, 0, 0, 0], 0)), false, None);
        c.host = host.to_string();
        c
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn rack(&self) -> Option<String> {
        self.state().rack.clone()
    }

    /// Records the RackId a fetch carries; returns whether it changed.
    pub(crate) fn set_rack(&self, rack: &str) -> bool {
        let mut s = self.state();
        if s.rack.as_deref() == Some(rack) {
            return false;
        }
        s.rack = Some(rack.to_string());
        s.resolved = None;
        true
    }

    /// The zone resolved for `client_id`, if it was resolved with that id.
    pub(crate) fn cached_zone(&self, client_id: &str) -> Option<Option<Arc<str>>> {
        match &self.state().resolved {
            Some((id, z)) if id == client_id => Some(z.clone()),
            _ => None,
        }
    }

    pub(crate) fn cache_zone(&self, client_id: &str, zone: Option<Arc<str>>) {
        self.state().resolved = Some((client_id.to_string(), zone));
    }

    pub(crate) fn set_challenge(&self, nonce: [u8; 32]) {
        self.state().challenge = Some(nonce);
    }

    /// The challenge this connection's peer was given, once (a hello answers it only once).
    pub(crate) fn take_challenge(&self) -> Option<[u8; 32]> {
        self.state().challenge.take()
    }

    pub(crate) fn set_peer_zone(&self, zone: &str) {
        self.state().peer_zone = Some(Arc::from(zone));
    }

    /// The zone of the other end, as last resolved: the client's (`None`: not known), or a
    /// peer broker's. The network layer labels the connection's bytes with it.
    pub fn zone(&self) -> Option<Arc<str>> {
        let s = self.state();
        if self.internal {
            return s.peer_zone.clone();
        }
        s.resolved.as_ref().and_then(|(_, z)| z.clone())
    }
}
