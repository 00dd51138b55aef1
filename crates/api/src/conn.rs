//! What the API layer knows of a connection: its peer, and the zone of the client on it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

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
    state: Mutex<State>,
    /// Resolves once the appends of the last forwarded produce read on this connection have
    /// started: the next one's start after them, whatever order their reads finish in.
    pub(crate) forward_tail: Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
}

#[derive(Debug, Default)]
struct State {
    /// The RackId of the client's fetches (KIP-392).
    rack: Option<String>,
    /// The zone last resolved, and the client.id it was resolved with.
    resolved: Option<(String, Option<Arc<str>>)>,
    /// A peer broker's zone, from its hello.
    peer_zone: Option<Arc<str>>,
}

impl Conn {
    pub fn new(peer: SocketAddr, internal: bool, listener_zone: Option<String>) -> Conn {
        Conn {
            peer,
            host: peer.ip().to_string(),
            internal,
            listener_zone,
            state: Mutex::new(State::default()),
            forward_tail: Mutex::new(None),
        }
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
