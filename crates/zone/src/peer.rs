//! Connections to other brokers' internal listeners.
//!
//! One connection per peer and [`Channel`], opened on first use and again after it fails.
//! Requests on a channel are written in the order [`Peers::send`] is called, which is what keeps
//! a client connection's produce order through a forwarding broker; answers are matched by
//! correlation id, so an answer nobody waits for any more is dropped. Long polls and forwarded
//! produces use different channels, so a poll never holds up an acknowledgement.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use weir_metrics::Counter;

use crate::meters::{Kind, NetMeters};

/// How long opening a connection to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The largest answer a peer may send (answers are small: offsets and results).
const MAX_ANSWER: usize = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// Forwarded produces.
    Forward,
    /// The offsets feed and other small calls.
    Feed,
}

impl Channel {
    fn kind(self) -> Kind {
        match self {
            Channel::Forward => Kind::Forward,
            Channel::Feed => Kind::Feed,
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum PeerError {
    #[error("broker {node} at {addr}: {reason}")]
    Connection {
        node: i32,
        addr: String,
        reason: String,
    },
}

struct Outgoing {
    key: i16,
    body: BytesMut,
    reply: oneshot::Sender<Result<Bytes, PeerError>>,
}

struct PeerConn {
    addr: String,
    tx: mpsc::UnboundedSender<Outgoing>,
    dead: Arc<AtomicBool>,
}

/// The peer a request goes to.
#[derive(Debug, Clone, Copy)]
pub struct Peer<'a> {
    pub node_id: i32,
    pub internal_addr: &'a str,
    pub zone: &'a str,
}

/// Connections to peers, shared by the broker's tasks.
pub struct Peers {
    node_id: i32,
    zone: String,
    /// `cluster.internal_secret`, proven in every hello, and whether hellos answer a challenge
    /// (`false`: `cluster.legacy_peer_hello`, an earlier version's hello, during an upgrade).
    secret: Mutex<Option<(Arc<[u8]>, bool)>>,
    meters: Arc<NetMeters>,
    conns: Mutex<HashMap<(i32, Channel), PeerConn>>,
}

impl Peers {
    /// `node_id` and `zone` are this broker's: peers learn them from the first frame, and the
    /// meters count what is sent from `zone`.
    pub fn new(node_id: i32, zone: &str, meters: Arc<NetMeters>) -> Arc<Peers> {
        Arc::new(Peers {
            node_id,
            zone: zone.to_string(),
            secret: Mutex::new(None),
            meters,
            conns: Mutex::new(HashMap::new()),
        })
    }

    /// Sets the cluster's internal secret, which every new connection's hello proves: by
    /// answering the listener's challenge, or (`legacy`) as earlier versions did.
    pub fn set_secret(&self, secret: &[u8], legacy: bool) {
        *self.secret.lock().unwrap_or_else(|e| e.into_inner()) = Some((Arc::from(secret), !legacy));
    }

    /// Queues a request to `peer` now (requests on one channel are written in the order of
    /// these calls) and returns its answer's body.
    pub fn send(
        &self,
        peer: Peer<'_>,
        channel: Channel,
        key: i16,
        body: BytesMut,
    ) -> impl std::future::Future<Output = Result<Bytes, PeerError>> + Send + 'static {
        let (reply, answer) = oneshot::channel();
        let mut out = Some(Outgoing { key, body, reply });
        {
            let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
            let slot = (peer.node_id, channel);
            let usable = conns
                .get(&slot)
                .is_some_and(|c| c.addr == peer.internal_addr && !c.dead.load(Ordering::Acquire));
            if !usable {
                let sent = self.meters.counter(&self.zone, peer.zone, channel.kind());
                let secret = self
                    .secret
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                let hello = Introduction {
                    node_id: self.node_id,
                    zone: self.zone.clone(),
                    secret,
                };
                conns.insert(slot, open(peer.node_id, peer.internal_addr, hello, sent));
            }
            if let Some(c) = conns.get(&slot) {
                if let Some(o) = out.take() {
                    if let Err(mpsc::error::SendError(o)) = c.tx.send(o) {
                        out = Some(o);
                    }
                }
            }
        }
        let (node, addr) = (peer.node_id, peer.internal_addr.to_string());
        if let Some(o) = out {
            let _ = o.reply.send(Err(PeerError::Connection {
                node,
                addr: addr.clone(),
                reason: "the connection closed".into(),
            }));
        }
        async move {
            answer.await.unwrap_or_else(|_| {
                Err(PeerError::Connection {
                    node,
                    addr,
                    reason: "the connection closed before the answer".into(),
                })
            })
        }
    }
}

type Pending = Arc<Mutex<HashMap<i32, oneshot::Sender<Result<Bytes, PeerError>>>>>;

/// Starts a connection's task; requests queue until it is open.
/// What a connection's first frames say: who calls, and the proof of the secret.
struct Introduction {
    node_id: i32,
    zone: String,
    /// The secret, and whether the listener's challenge is asked for first.
    secret: Option<(Arc<[u8]>, bool)>,
}

/// The longest wait for a listener's challenge.
const CHALLENGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Introduction {
    /// Asks for the listener's challenge (if the hello answers one) and makes the hello.
    async fn hello<R: AsyncReadExt + Unpin, W: AsyncWriteExt + Unpin>(
        &self,
        rd: &mut R,
        wr: &mut W,
        sent: &Counter,
    ) -> Result<crate::wire::Hello, String> {
        let secret = match &self.secret {
            None => return Ok(crate::wire::Hello::new(self.node_id, &self.zone, None)),
            Some((s, false)) => {
                return Ok(crate::wire::Hello::new(self.node_id, &self.zone, Some(s)))
            }
            Some((s, true)) => s,
        };
        let mut frame = BytesMut::with_capacity(12);
        frame.put_u32(8);
        frame.put_i16(crate::wire::HELLO_CHALLENGE);
        frame.put_i16(0);
        frame.put_i32(0);
        wr.write_all(&frame)
            .await
            .map_err(|e| format!("asking for the challenge: {e}"))?;
        sent.add(frame.len() as u64);
        let read = async {
            let mut len = [0u8; 4];
            rd.read_exact(&mut len).await?;
            let n = u32::from_be_bytes(len) as usize;
            if !(4..=4 + 64).contains(&n) {
                return Err(std::io::Error::other(format!("a challenge of {n} bytes")));
            }
            let mut buf = vec![0u8; n];
            rd.read_exact(&mut buf).await?;
            Ok(buf.split_off(4))
        };
        let nonce = tokio::time::timeout(CHALLENGE_TIMEOUT, read)
            .await
            .map_err(|_| "no challenge from the listener".to_string())?
            .map_err(|e| format!("reading the challenge (a peer of an earlier version closes the connection: set cluster.legacy_peer_hello during the upgrade): {e}"))?;
        Ok(crate::wire::Hello::challenged(
            self.node_id,
            &self.zone,
            secret,
            &nonce,
        ))
    }
}

fn open(node: i32, addr: &str, hello: Introduction, sent: Arc<Counter>) -> PeerConn {
    let (tx, rx) = mpsc::unbounded_channel();
    let dead = Arc::new(AtomicBool::new(false));
    let conn = PeerConn {
        addr: addr.to_string(),
        tx,
        dead: Arc::clone(&dead),
    };
    let addr = addr.to_string();
    tokio::spawn(async move {
        let pending: Pending = Arc::default();
        let reason = run(&addr, rx, &pending, hello, &sent).await;
        dead.store(true, Ordering::Release);
        tracing::debug!(node, %addr, %reason, "connection to a peer ended");
        let fail = |tx: oneshot::Sender<Result<Bytes, PeerError>>| {
            let _ = tx.send(Err(PeerError::Connection {
                node,
                addr: addr.clone(),
                reason: reason.clone(),
            }));
        };
        let waiting: Vec<_> = pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .collect();
        for (_, tx) in waiting {
            fail(tx);
        }
    });
    conn
}

/// Runs one connection until it fails; returns why.
async fn run(
    addr: &str,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    pending: &Pending,
    hello: Introduction,
    sent: &Counter,
) -> String {
    let stream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            fail_queued(&mut rx, &format!("connecting: {e}"));
            return format!("connecting: {e}");
        }
        Err(_) => {
            fail_queued(&mut rx, "connecting timed out");
            return "connecting timed out".into();
        }
    };
    let _ = stream.set_nodelay(true);
    if let Err(e) = notice_silence(&stream) {
        tracing::debug!(addr, error = %e, "setting TCP keepalives on a peer connection failed");
    }
    let (mut rd, mut wr) = stream.into_split();
    let hello = match hello.hello(&mut rd, &mut wr, sent).await {
        Ok(h) => h,
        Err(e) => {
            fail_queued(&mut rx, &e);
            return e;
        }
    };
    let reader = {
        let pending = Arc::clone(pending);
        async move {
            loop {
                let mut len = [0u8; 4];
                if let Err(e) = rd.read_exact(&mut len).await {
                    return format!("reading: {e}");
                }
                let n = u32::from_be_bytes(len) as usize;
                if !(4..=MAX_ANSWER).contains(&n) {
                    return format!("an answer of {n} bytes");
                }
                let mut buf = BytesMut::zeroed(n);
                if let Err(e) = rd.read_exact(&mut buf).await {
                    return format!("reading: {e}");
                }
                let mut buf = buf.freeze();
                let correlation = buf.get_i32();
                let waiter = pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&correlation);
                if let Some(w) = waiter {
                    let _ = w.send(Ok(buf));
                }
            }
        }
    };
    let writer = async {
        let hello = hello.encode();
        let mut frame = BytesMut::with_capacity(12 + hello.len());
        frame.put_u32((8 + hello.len()) as u32);
        frame.put_i16(crate::wire::HELLO);
        frame.put_i16(0);
        frame.put_i32(0);
        frame.extend_from_slice(&hello);
        if let Err(e) = wr.write_all(&frame).await {
            return format!("writing: {e}");
        }
        sent.add(frame.len() as u64);
        let mut correlation: i32 = 0;
        while let Some(o) = rx.recv().await {
            correlation = correlation.wrapping_add(1);
            let mut frame = BytesMut::with_capacity(12 + o.body.len());
            frame.put_u32((8 + o.body.len()) as u32);
            frame.put_i16(o.key);
            frame.put_i16(0);
            frame.put_i32(correlation);
            frame.extend_from_slice(&o.body);
            pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(correlation, o.reply);
            if let Err(e) = wr.write_all(&frame).await {
                return format!("writing: {e}");
            }
            sent.add(frame.len() as u64);
        }
        "closed".to_string()
    };
    tokio::select! {
        r = reader => r,
        w = writer => w,
    }
}

/// Makes the kernel close a connection whose peer went silent (a network partition drops
/// packets without a reset): keepalives after 10 s idle, 3 probes 5 s apart, and 20 s at most
/// for sent data to be acknowledged. Without them a connection that no longer reaches its
/// peer stays open for about 15 minutes (the kernel's retransmissions), and every request on
/// its channel waits out its caller's timeout in turn instead of opening a new connection.
fn notice_silence(stream: &TcpStream) -> std::io::Result<()> {
    let sock = socket2::SockRef::from(stream);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(3);
    sock.set_tcp_keepalive(&keepalive)?;
    sock.set_tcp_user_timeout(Some(Duration::from_secs(20)))
}

fn fail_queued(rx: &mut mpsc::UnboundedReceiver<Outgoing>, reason: &str) {
    rx.close();
    while let Ok(o) = rx.try_recv() {
        let _ = o.reply.send(Err(PeerError::Connection {
            node: -1,
            addr: String::new(),
            reason: reason.to_string(),
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener that accepts and never sends its challenge (a hung peer, or a proxy whose
    /// backend is gone) fails the request within the challenge's bound, with a reason that
    /// says so, instead of holding it and every request queued behind it.
    #[tokio::test]
    async fn a_listener_that_never_challenges_fails_the_request_in_bounded_time() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address").to_string();
        let held = tokio::spawn(async move {
            let mut conns = Vec::new();
            while let Ok((c, _)) = listener.accept().await {
                conns.push(c);
            }
        });
        let peers = Peers::new(1, "a", Arc::new(NetMeters::default()));
        peers.set_secret(b"secret", false);
        let peer = Peer {
            node_id: 2,
            internal_addr: &addr,
            zone: "a",
        };
        let answer = peers.send(peer, Channel::Feed, 1, BytesMut::from(&b"x"[..]));
        let r = tokio::time::timeout(CHALLENGE_TIMEOUT + Duration::from_secs(10), answer).await;
        held.abort();
        match r {
            Err(_) => panic!("a request to a silent listener did not end"),
            Ok(Ok(_)) => panic!("a silent listener answered"),
            Ok(Err(e)) => assert!(e.to_string().contains("no challenge"), "{e}"),
        }
    }

    /// Peer connections carry the kernel's bounds on silence (see `notice_silence`).
    #[tokio::test]
    async fn peer_connections_notice_a_silent_link() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let stream = TcpStream::connect(addr).await.expect("connect");
        notice_silence(&stream).expect("set the options");
        let sock = socket2::SockRef::from(&stream);
        assert!(sock.keepalive().expect("SO_KEEPALIVE"));
        assert_eq!(
            sock.tcp_keepalive_time().expect("idle"),
            Duration::from_secs(10)
        );
        assert_eq!(
            sock.tcp_user_timeout().expect("TCP_USER_TIMEOUT"),
            Some(Duration::from_secs(20))
        );
    }
}
