//! Zones: no data byte crosses a zone, and every byte that does is metered.
//!
//! Clients are placed in a zone (`client.rs`: `client.id` tags, then `client.rack`, the
//! listener, a CIDR map). Each partition has, per zone, one broker that serves it to that zone's
//! clients (`route.rs`: the leader if it is in the zone, else rendezvous hashing over the zone's
//! live brokers), and Metadata, leader hints and FindCoordinator name it, id and address alike.
//! That broker does not lead the partition: it writes produced bytes to object storage and
//! forwards a reference to the leader (`handoff.rs`), and serves fetches from object storage
//! with the offsets the leader feeds it (`feed.rs`). Brokers talk over their internal listeners
//! (`wire.rs`, the messages; `peer.rs`, the connections). Bytes are counted per zone pair and
//! kind (`meters.rs`).

pub mod client;
pub mod feed;
pub mod handoff;
pub mod meters;
pub mod peer;
pub mod route;
pub mod wire;

pub use client::{parse_cidr_map, zone_from_client_id, zone_of_address, CidrZone, CIDR_MAP_KEY};
pub use feed::Feed;
pub use handoff::{Forwarder, HandoffConfig, Leader};
pub use meters::{Kind, NetMeters, UNKNOWN_ZONE};
pub use peer::{Channel, Peer, PeerError, Peers};
pub use route::{in_zone_broker, route, Route, Routing};
