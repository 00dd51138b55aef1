//! Fetch: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;
use weir_partition::Lookup;

#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{now, Api, Cx};
use crate::authz::{serve, Check, Gate};
use crate::fetch::{fetch_round, first_offsets, Source, Wanted, WantedTopic};
use crate::fetch_session::Context;
use crate::{str, Broker, Reply};

/// Fetch.
pub(crate) struct Fetch;

impl Api for Fetch {
    type Request = FetchRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::Fetch)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, version: i16, code: i16) -> ResponseKind {
        use fetch_response::{FetchableTopicResponse, PartitionData};
        let response = FetchResponse::default().with_responses(
            request
                .topics
                .iter()
                .map(|t| {
                    FetchableTopicResponse::default()
                        .with_topic(t.topic.clone())
                        .with_topic_id(t.topic_id)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    PartitionData::default()
                                        .with_partition_index(p.partition)
                                        .with_error_code(code)
                                        .with_high_watermark(-1)
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
        ResponseKind::Fetch(if version >= 7 {
            response.with_error_code(code)
        } else {
            response
        })
    }

    /// Fetch checks READ itself (`wanted` below): a fetch in a session reads partitions its
    /// request does not name.
    fn authorize(_broker: &Broker, _check: &Check, r: Self::Request, _v: i16) -> Gate {
        serve(RequestKind::Fetch(r))
    }

    // What `authorize` took out comes back in the response's `responses`.
    crate::authz::joins_denied!(Fetch.responses);

    /// Serves an authorized request: reads once and answers at once when that is enough (or a
    /// partition has an error); otherwise the reply waits for new data or `max_wait_ms`.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, mut request: Self::Request) -> Reply {
        let began = Instant::now();
        // An incremental fetch reads its session's partitions (the request names only those
        // that changed) and answers those with something to tell.
        let session = broker.fetch_sessions.begin(&mut request, cx.v);
        if let Context::Refused(e) = session {
            broker.meters.fetch_latency.record(began.elapsed());
            return now(ResponseKind::Fetch(
                FetchResponse::default().with_error_code(e.code()),
            ));
        }
        let committed = cx.v >= 4 && request.isolation_level == 1;
        let check = broker.check_for(cx.conn);
        let wanted = wanted(broker, cx, request.topics, check.as_ref(), committed);
        let (max_bytes, min_bytes) = limits(broker, request.max_bytes, request.min_bytes);
        if let Some(zones) = &broker.zones {
            first_offsets(&wanted, &zones.feed).await;
        }
        let (response, bytes, errors) =
            fetch_round(&broker.topics, &wanted, max_bytes, min_bytes).await;
        let poll = Poll {
            broker: Arc::clone(broker),
            wanted,
            max_bytes,
            min_bytes,
            session,
            began,
            zone: cx.zone.map(str::to_string),
            listener: cx.listener.to_string(),
        };
        if request.max_wait_ms <= 0 || bytes >= min_bytes || errors {
            return now(ResponseKind::Fetch(poll.finish(response, bytes)));
        }
        let deadline = began + Duration::from_millis(request.max_wait_ms as u64);
        Reply::Later(Box::pin(async move {
            let (response, bytes) = poll.wait(response, bytes, deadline).await;
            ResponseKind::Fetch(poll.finish(response, bytes))
        }))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{topic, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use uuid::Uuid;
        use RequestKind as R;
        let t = |name: &str, id: Uuid, parts: Vec<(i32, i64, i32)>| {
            let t = fetch_request::FetchTopic::default().with_partitions(
                parts
                    .into_iter()
                    .map(|(p, offset, epoch)| {
                        fetch_request::FetchPartition::default()
                            .with_partition(p)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(1 << 20)
                            .with_current_leader_epoch(if v >= 9 { epoch } else { -1 })
                    })
                    .collect(),
            );
            if v >= 13 {
                t.with_topic_id(id)
            } else {
                t.with_topic(topic(name))
            }
        };
        let req = |topics| {
            FetchRequest::default()
                .with_max_wait_ms(0)
                .with_min_bytes(1)
                .with_max_bytes(1 << 20)
                .with_topics(topics)
        };
        vec![
            (
                "data, empty, out of range, unknown partition",
                R::Fetch(req(vec![t(
                    TOPIC,
                    e.topic_id,
                    vec![(0, 0, -1), (1, 0, -1), (0, 1000, -1), (9, 0, -1)],
                )])),
            ),
            (
                "missing topic",
                R::Fetch(req(vec![t(MISSING, Uuid::new_v4(), vec![(0, 0, -1)])])),
            ),
            (
                "unknown leader epoch",
                R::Fetch(req(vec![t(TOPIC, e.topic_id, vec![(0, 0, 1000)])])),
            ),
            (
                "long poll",
                R::Fetch(
                    req(vec![t(TOPIC, e.topic_id, vec![(1, 0, -1)])])
                        .with_max_wait_ms(10)
                        .with_min_bytes(1 << 20),
                ),
            ),
        ]
    }
}

/// The partitions a fetch asks for, each found here, at another zone's leader, or refused.
///
/// READ on each topic is checked here rather than at the gate: a session's fetch names only what
/// changed, and a topic whose READ was taken away since must be refused in every fetch.
fn wanted(
    broker: &Broker,
    cx: &Cx<'_>,
    topics: Vec<fetch_request::FetchTopic>,
    check: Option<&Check>,
    committed: bool,
) -> Vec<WantedTopic> {
    let mut any_refused = false;
    let wanted = topics
        .into_iter()
        .map(|t| {
            let (w, refused) = wanted_topic(broker, cx, t, check, committed);
            any_refused |= refused;
            w
        })
        .collect();
    if let Some(c) = check.filter(|_| any_refused) {
        c.denied("topics of a fetch", &broker.meters.authorization_denied);
    }
    wanted
}

/// One topic's wanted partitions, and whether READ on it was refused. A name the principal may
/// not read is refused whether it exists or not (as Kafka does); an unknown id stays
/// UNKNOWN_TOPIC_ID.
fn wanted_topic(
    broker: &Broker,
    cx: &Cx<'_>,
    t: fetch_request::FetchTopic,
    check: Option<&Check>,
    committed: bool,
) -> (WantedTopic, bool) {
    let by_id = cx.v >= 13;
    let topic = match by_id {
        true => broker.topics.get_by_id(t.topic_id.as_bytes()),
        false => broker.topics.get(t.topic.0.as_str()),
    };
    let name = match (&topic, by_id) {
        (Some(tp), true) => Some(tp.name.as_str()),
        (None, true) => None,
        (_, false) => Some(t.topic.0.as_str()),
    };
    let refused = match (check, name) {
        (Some(c), Some(n)) => !c.topic(Operation::Read, n),
        _ => false,
    };
    // One look at the open partitions for the whole topic.
    let mut found = topic
        .as_ref()
        .map(|tp| {
            broker
                .topics
                .lookup_in(tp, t.partitions.iter().map(|p| p.partition))
        })
        .unwrap_or_default()
        .into_iter();
    let missing = match by_id {
        true => E::UnknownTopicId,
        false => E::UnknownTopicOrPartition,
    };
    let partitions = t
        .partitions
        .into_iter()
        .map(|p| {
            let partition = match topic.as_ref().zip(found.next()) {
                _ if refused => Err(E::TopicAuthorizationFailed),
                Some((_, Lookup::Local(p))) => Ok(Source::Local(p)),
                Some((t, Lookup::NotHere)) => remote_source(broker, cx.zone, &t.name, p.partition),
                _ => Err(missing),
            };
            let preferred = match (&topic, cx.v >= 11) {
                (Some(t), true) if !refused => {
                    preferred_replica(broker, cx.zone, &t.name, p.partition)
                }
                _ => None,
            };
            Wanted {
                partition_index: p.partition,
                partition,
                offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes,
                current_leader_epoch: p.current_leader_epoch,
                committed,
                preferred,
            }
        })
        .collect();
    let w = WantedTopic {
        name: t.topic,
        id: t.topic_id,
        partitions,
    };
    (w, refused)
}

/// The response's byte limits `(max, min)`. As Kafka does: the broker's cap wins, and a minimum
/// above the maximum is the maximum (or the long poll could never be satisfied).
fn limits(broker: &Broker, max_bytes: i32, min_bytes: i32) -> (usize, usize) {
    let asked = if max_bytes <= 0 { i32::MAX } else { max_bytes } as usize;
    let max = asked.min(broker.limits.fetch_max_bytes.max(1));
    (max, (min_bytes.max(1) as usize).min(max))
}

/// A fetch's long poll: what it reads again when its partitions change.
struct Poll {
    broker: Arc<Broker>,
    wanted: Vec<WantedTopic>,
    max_bytes: usize,
    min_bytes: usize,
    session: Context,
    began: Instant,
    zone: Option<String>,
    listener: String,
}

impl Poll {
    /// Reads again whenever a partition's high watermark (or a remote leader's offsets) moves,
    /// until `min_bytes` are there, a partition has an error, or `deadline`; then answers with
    /// what there is.
    async fn wait(
        &self,
        mut response: FetchResponse,
        mut bytes: usize,
        deadline: Instant,
    ) -> (FetchResponse, usize) {
        let mut hws: Vec<_> = Vec::new();
        let mut remotes: Vec<_> = Vec::new();
        for w in self.wanted.iter().flat_map(|t| t.partitions.iter()) {
            match &w.partition {
                Ok(Source::Local(p)) => hws.extend(p.watch_high_watermark()),
                Ok(Source::Remote { offsets, .. }) => remotes.push(offsets.clone()),
                Err(_) => {}
            }
        }
        loop {
            if hws.is_empty() && remotes.is_empty() {
                tokio::time::sleep_until(deadline.into()).await;
                break;
            }
            let changed = futures::future::select_all(
                hws.iter_mut()
                    .map(|rx| rx.changed().boxed())
                    .chain(remotes.iter_mut().map(|rx| rx.changed().boxed())),
            );
            if tokio::time::timeout_at(deadline.into(), changed)
                .await
                .is_err()
            {
                break;
            }
            let errors;
            (response, bytes, errors) = self.round().await;
            if errors || bytes >= self.min_bytes || Instant::now() >= deadline {
                break;
            }
        }
        if Instant::now() >= deadline && bytes < self.min_bytes {
            // The deadline passed: answer with what there is now.
            (response, bytes, _) = self.round().await;
        }
        (response, bytes)
    }

    async fn round(&self) -> (FetchResponse, usize, bool) {
        fetch_round(
            &self.broker.topics,
            &self.wanted,
            self.max_bytes,
            self.min_bytes,
        )
        .await
    }

    /// Counts the answer, adds leader hints and the session's part.
    fn finish(&self, response: FetchResponse, bytes: usize) -> FetchResponse {
        let b = &self.broker;
        b.meters.fetch_bytes.add(bytes as u64);
        b.meters.fetch_latency.record(self.began.elapsed());
        let mut response = with_leader_hints(b, response, self.zone.as_deref(), &self.listener);
        self.session.finish(&mut response);
        response
    }
}

/// For a partition led here and fetched by a client of another zone: the broker of the client's
/// zone that serves it, if the topic routes in-zone.
fn preferred_replica(
    broker: &Broker,
    zone: Option<&str>,
    topic: &str,
    partition: i32,
) -> Option<i32> {
    let zones = broker.zones.as_ref()?;
    let zone = zone?;
    if zones.zone.is_empty() || zone == zones.zone {
        return None;
    }
    if broker.routing_by_name(topic) != weir_zone::Routing::InZone {
        return None;
    }
    if !matches!(broker.topics.lookup(topic, partition), Lookup::Local(_)) {
        return None;
    }
    let view = broker.cluster.view();
    let b = weir_zone::in_zone_broker(&view, zone, topic, u32::try_from(partition).ok()?)?;
    (b.node_id != broker.cluster.node_id()).then_some(b.node_id)
}

/// A partition not led here: served from object storage when this broker serves it to the
/// client's zone, else NOT_LEADER_OR_FOLLOWER.
fn remote_source(
    broker: &Broker,
    zone: Option<&str>,
    topic: &str,
    partition: i32,
) -> Result<Source, E> {
    let (Some(zones), Some(remote)) = (&broker.zones, broker.remote(zone, topic, partition)) else {
        return Err(E::NotLeaderOrFollower);
    };
    zones.meters.remote_fetches.inc();
    Ok(Source::Remote {
        topic: topic.to_string(),
        stream_id: remote.stream_id,
        feed: Arc::clone(&zones.feed),
        offsets: zones.feed.offsets(topic, partition, &remote.leader),
        leader: remote.leader,
        peers: Arc::clone(&zones.peers),
    })
}

/// KIP-951: partitions answered NOT_LEADER_OR_FOLLOWER name the new leader (v12+), and the
/// response carries its endpoint (v16+), so consumers re-route without a metadata request.
fn with_leader_hints(
    broker: &Broker,
    mut response: FetchResponse,
    zone: Option<&str>,
    listener: &str,
) -> FetchResponse {
    use fetch_response::{LeaderIdAndEpoch, NodeEndpoint};
    let mut endpoints: Vec<NodeEndpoint> = Vec::new();
    for t in &mut response.responses {
        let name = match t.topic_id.is_nil() {
            true => Some(t.topic.0.to_string()),
            false => broker
                .topics
                .get_by_id(t.topic_id.as_bytes())
                .map(|t| t.name.clone()),
        };
        let Some(name) = name else { continue };
        for p in &mut t.partitions {
            if p.error_code != E::NotLeaderOrFollower.code() {
                continue;
            }
            let Some(h) = broker.leader_hint(zone, listener, &name, p.partition_index) else {
                continue;
            };
            p.current_leader = LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(h.node_id))
                .with_leader_epoch(h.epoch);
            if !endpoints.iter().any(|e| e.node_id.0 == h.node_id) {
                endpoints.push(
                    NodeEndpoint::default()
                        .with_node_id(BrokerId(h.node_id))
                        .with_host(str(&h.host))
                        .with_port(h.port)
                        .with_rack((!h.rack.is_empty()).then(|| str(&h.rack))),
                );
            }
        }
    }
    response.node_endpoints = endpoints;
    response
}
