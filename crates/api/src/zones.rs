//! Zone routing in the API layer: which zone a client is in, which broker Metadata and leader
//! hints name for it, and whether this broker serves a partition it does not lead to the
//! client's zone (then produces go through the [`weir_zone::Forwarder`] and fetches are served
//! from object storage with offsets from the [`weir_zone::Feed`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use kafka_protocol::messages::RequestKind;
use object_store::ObjectStore;
use weir_metrics::Counter;
use weir_zone::{CidrZone, Feed, Forwarder, Leader, NetMeters, Peers, Routing};

use crate::conn::Conn;
use crate::Broker;

/// How long a partition stays "read from another zone" after the last poll of its offsets.
const REMOTE_READER_IDLE: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub struct ZoneMeters {
    /// Client connections (or client ids) placed in no zone while this broker has one: they
    /// are routed as Kafka routes, to the leader.
    pub unknown_zone_clients: Counter,
    /// Partitions of produce requests forwarded to a leader in another zone.
    pub forwarded_partitions: Counter,
    /// Partitions of fetch requests served here for a leader in another zone.
    pub remote_fetches: Counter,
    /// Uploads started so that other zones can read a partition led here.
    pub remote_read_uploads: Counter,
}

impl ZoneMeters {
    /// Declares zone routing's meters.
    pub fn register(&self, r: &mut weir_metrics::Registry) {
        r.counter(
            "zone_unknown_clients",
            "Client connections (or client ids) placed in no zone while this broker has one; routed to leaders.",
            &self.unknown_zone_clients,
        );
        r.counter(
            "zone_forwarded_partitions",
            "Partitions of produce requests forwarded to a leader in another zone.",
            &self.forwarded_partitions,
        );
        r.counter(
            "zone_remote_fetches",
            "Partitions of fetch requests served here for a leader in another zone.",
            &self.remote_fetches,
        );
        r.counter(
            "zone_remote_read_uploads",
            "Uploads started so that other zones read partitions led here.",
            &self.remote_read_uploads,
        );
    }
}

/// What the broker needs for zone routing.
pub struct ZoneServices {
    /// This broker's zone ("" for none: zone routing is off).
    pub zone: String,
    pub store: Arc<dyn ObjectStore>,
    pub peers: Arc<Peers>,
    pub forwarder: Arc<Forwarder>,
    pub feed: Arc<Feed>,
    pub net: Arc<NetMeters>,
    /// The CIDR map, from the metadata store.
    pub cidrs: RwLock<Vec<CidrZone>>,
    pub meters: ZoneMeters,
    /// Streams led here that brokers of other zones serve, with when they last polled.
    remote_readers: Mutex<HashMap<u64, Instant>>,
}

impl ZoneServices {
    pub fn new(
        zone: &str,
        store: Arc<dyn ObjectStore>,
        peers: Arc<Peers>,
        forwarder: Arc<Forwarder>,
        net: Arc<NetMeters>,
    ) -> ZoneServices {
        ZoneServices {
            zone: zone.to_string(),
            store,
            feed: Feed::new(Arc::clone(&peers)),
            peers,
            forwarder,
            net,
            cidrs: RwLock::new(Vec::new()),
            meters: ZoneMeters::default(),
            remote_readers: Mutex::new(HashMap::new()),
        }
    }

    pub fn set_cidrs(&self, map: Vec<CidrZone>) {
        *self.cidrs.write().unwrap_or_else(|e| e.into_inner()) = map;
    }

    pub(crate) fn note_remote_reader(&self, stream_id: u64) {
        self.remote_readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(stream_id, Instant::now());
    }

    /// Streams other zones read now.
    pub fn remote_readers(&self) -> Vec<u64> {
        let mut r = self
            .remote_readers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        r.retain(|_, t| t.elapsed() < REMOTE_READER_IDLE);
        r.keys().copied().collect()
    }
}

/// A partition this broker serves to its zone for a leader elsewhere.
pub(crate) struct Remote {
    pub leader: Leader,
    pub stream_id: u64,
}

impl Broker {
    /// The zone of the client on `conn`: its `client.id` tag, its fetches' RackId, the
    /// listener's zone, the CIDR map; `None` when nothing places it (or this broker has no
    /// zone, so zones are not in use).
    pub(crate) fn client_zone(
        &self,
        conn: &Conn,
        client_id: &str,
        request: &RequestKind,
    ) -> Option<Arc<str>> {
        let zones = self.zones.as_ref()?;
        if zones.zone.is_empty() || conn.internal {
            return None;
        }
        if let RequestKind::Fetch(f) = request {
            if !f.rack_id.is_empty() {
                conn.set_rack(f.rack_id.as_str());
            }
        }
        if let Some(z) = conn.cached_zone(client_id) {
            return z;
        }
        let zone = weir_zone::zone_from_client_id(client_id)
            .map(str::to_string)
            .or_else(|| conn.rack())
            .or_else(|| conn.listener_zone.clone())
            .or_else(|| {
                let map = zones.cidrs.read().unwrap_or_else(|e| e.into_inner());
                weir_zone::zone_of_address(&map, conn.peer.ip()).map(str::to_string)
            })
            .map(Arc::<str>::from);
        if zone.is_none() {
            zones.meters.unknown_zone_clients.inc();
        }
        conn.cache_zone(client_id, zone.clone());
        zone
    }

    /// The routing of `topic`: its `weir.zone.routing`, else the broker's default.
    pub(crate) fn routing(&self, topic: &weir_partition::Topic) -> Routing {
        Routing::parse(self.topics.zone_routing(topic)).unwrap_or_default()
    }

    pub(crate) fn routing_by_name(&self, topic: &str) -> Routing {
        self.topics
            .get(topic)
            .map_or(Routing::Leader, |t| self.routing(&t))
    }

    /// For a partition not led here: its leader, when this broker serves it to `zone`'s
    /// clients (the client is in this broker's zone, the topic routes in-zone, and the leader
    /// is live in another zone). Any broker of the zone serves it correctly; Metadata sends
    /// each partition's clients to one of them, so that one cache holds it.
    pub(crate) fn remote(&self, zone: Option<&str>, topic: &str, partition: i32) -> Option<Remote> {
        let zones = self.zones.as_ref()?;
        let zone = zone?;
        if zones.zone.is_empty() || zone != zones.zone {
            return None;
        }
        if self.routing_by_name(topic) != Routing::InZone {
            return None;
        }
        let view = self.cluster.view();
        let p = u32::try_from(partition).ok()?;
        let a = view.assignment(topic, p)?;
        let (leader, _) = view.leader(topic, p)?;
        if leader.node_id == self.cluster.node_id()
            || leader.zone == zone
            || leader.internal_addr.is_empty()
        {
            return None;
        }
        Some(Remote {
            leader: Leader {
                node_id: leader.node_id,
                internal_addr: leader.internal_addr.clone(),
                zone: leader.zone.clone(),
            },
            stream_id: a.stream_id,
        })
    }

    /// The leader's offsets of a partition this broker serves to `zone` for a leader elsewhere
    /// (`None`: it does not), waiting a little for the first answer of a new subscription.
    pub(crate) async fn remote_offsets(
        &self,
        zone: Option<&str>,
        topic: &str,
        partition: i32,
    ) -> Option<(
        Remote,
        Result<weir_zone::wire::Offsets, kafka_protocol::ResponseError>,
    )> {
        use kafka_protocol::ResponseError;
        let zones = self.zones.as_ref()?;
        let remote = self.remote(zone, topic, partition)?;
        let mut rx = zones.feed.offsets(topic, partition, &remote.leader);
        let first = tokio::time::timeout(Duration::from_secs(2), rx.wait_for(|o| o.is_some()))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|o| *o));
        let offsets =
            match first {
                Some(o) if o.error == 0 => Ok(o),
                Some(o) => Err(ResponseError::try_from_code(o.error)
                    .unwrap_or(ResponseError::NotLeaderOrFollower)),
                None => Err(ResponseError::NotLeaderOrFollower),
            };
        Some((remote, offsets))
    }

    /// Asks a partition's leader in another zone for the offset of a timestamp (or of the
    /// largest timestamp, -3): (offset, timestamp, epoch), the offset -1 if none.
    pub(crate) async fn remote_offset_for_time(
        &self,
        remote: &Remote,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<(i64, i64, i32), kafka_protocol::ResponseError> {
        use kafka_protocol::ResponseError;
        use weir_zone::wire::{OffsetForTime, OffsetForTimeResult, OFFSET_FOR_TIME};
        let zones = self
            .zones
            .as_ref()
            .ok_or(ResponseError::NotLeaderOrFollower)?;
        let ask = OffsetForTime {
            topic: topic.to_string(),
            partition,
            timestamp,
        };
        let answer = zones.peers.send(
            weir_zone::Peer {
                node_id: remote.leader.node_id,
                internal_addr: &remote.leader.internal_addr,
                zone: &remote.leader.zone,
            },
            weir_zone::Channel::Feed,
            OFFSET_FOR_TIME,
            ask.encode(),
        );
        let r = tokio::time::timeout(Duration::from_secs(10), answer)
            .await
            .map_err(|_| ResponseError::RequestTimedOut)?
            .map_err(|_| ResponseError::NotLeaderOrFollower)?;
        let r = OffsetForTimeResult::decode(r).map_err(|_| ResponseError::NotLeaderOrFollower)?;
        if r.error != 0 {
            return Err(
                ResponseError::try_from_code(r.error).unwrap_or(ResponseError::UnknownServerError)
            );
        }
        Ok((r.offset, r.timestamp, r.epoch))
    }

    /// Uploads, every `interval`, what partitions led here that other zones read hold beyond
    /// object storage, so that those zones' consumers see it (their brokers read only objects).
    pub fn start_remote_read_uploads(self: &Arc<Self>, interval: Duration) {
        let Some(zones) = self.zones.clone() else {
            return;
        };
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(this) = weak.upgrade() else { return };
                let streams: Vec<u64> = zones
                    .remote_readers()
                    .into_iter()
                    .filter(|&s| {
                        this.topics.partition_by_stream(s).is_some_and(|p| {
                            let (_, committed, hw) = p.stream_offsets();
                            committed < hw
                        })
                    })
                    .collect();
                if streams.is_empty() {
                    continue;
                }
                zones.meters.remote_read_uploads.inc();
                if let Err(e) = this.topics.upload_streams(&streams).await {
                    tracing::debug!(error = %e, "uploading for other zones' readers failed");
                }
            }
        });
    }
}
