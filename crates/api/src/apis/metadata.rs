//! Metadata: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use uuid::Uuid;
use weir_cluster::ClusterView;
use weir_partition::topics::validate_topic_name;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{partly, split, Check, Gate};
use crate::cluster::{controller_id, metadata_brokers, CLUSTER_OPERATIONS};
use crate::{str, Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// Metadata.
pub(crate) struct Metadata;

impl Api for Metadata {
    type Request = MetadataRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::Metadata)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use metadata_response::MetadataResponseTopic;
        ResponseKind::Metadata(
            MetadataResponse::default().with_topics(
                request
                    .topics
                    .iter()
                    .flatten()
                    .map(|t| {
                        MetadataResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        )
    }

    /// What the request must be authorized for, and the parts of it refused. The response
    /// tells the principal what it may do: `put_back` always gets its checks.
    fn authorize(broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        authorize_topics(broker, check, r, v).telling(check)
    }

    /// Puts back what `authorize` took out (`denied`: the error response of those parts), and
    /// leaves out what the principal may not see (`filter`).
    fn put_back(
        broker: &Broker,
        response: ResponseKind,
        denied: Option<ResponseKind>,
        filter: Option<&Check>,
    ) -> ResponseKind {
        let ResponseKind::Metadata(mut r) = response else {
            return response;
        };
        if let Some(ResponseKind::Metadata(d)) = denied {
            r.topics.extend(d.topics);
        }
        if let Some(check) = filter {
            let r = &mut r;
            // Topics refused by name keep their error; the others need DESCRIBE.
            let refused = E::TopicAuthorizationFailed.code();
            r.topics.retain(|t| {
                let name = t.name.as_ref().map_or("", |n| n.as_str());
                t.error_code == refused
                    || check.topic(Operation::Describe, &broker.topic_name(name, &t.topic_id))
            });
            for t in &mut r.topics {
                if t.topic_authorized_operations != i32::MIN && t.error_code != refused {
                    let name = t.name.as_ref().map_or("", |n| n.as_str());
                    t.topic_authorized_operations =
                        check.topic_operations(&broker.topic_name(name, &t.topic_id));
                }
            }
            if r.cluster_authorized_operations != i32::MIN {
                r.cluster_authorized_operations = check.cluster_operations();
            }
        }
        ResponseKind::Metadata(r)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx {
            v, zone, listener, ..
        } = *cx;
        now(ResponseKind::Metadata(
            metadata(broker, request, v, zone, listener).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{topic, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use uuid::Uuid;
        use RequestKind as R;
        let auto = format!("auto-created-{v}");
        let named = |names: &[&str]| {
            Some(
                names
                    .iter()
                    .map(|n| {
                        metadata_request::MetadataRequestTopic::default().with_name(Some(topic(n)))
                    })
                    .collect(),
            )
        };
        let base = || {
            let r = MetadataRequest::default();
            let r = if v >= 4 {
                r.with_allow_auto_topic_creation(false)
            } else {
                r
            };
            if (8..=10).contains(&v) {
                r.with_include_cluster_authorized_operations(true)
                    .with_include_topic_authorized_operations(true)
            } else if v >= 8 {
                r.with_include_topic_authorized_operations(true)
            } else {
                r
            }
        };
        let mut out = vec![
            (
                "all topics",
                R::Metadata(base().with_topics(if v >= 1 { None } else { Some(vec![]) })),
            ),
            (
                "existing, missing, invalid",
                // v0-3 create what they name: not the topic that other APIs expect missing.
                R::Metadata(base().with_topics(named(&[
                    TOPIC,
                    if v >= 4 { MISSING } else { &auto },
                    "bad name!",
                ]))),
            ),
        ];
        if v >= 10 {
            out.push((
                "by id",
                R::Metadata(
                    base().with_topics(Some(
                        [e.topic_id, Uuid::new_v4()]
                            .into_iter()
                            .map(|id| {
                                metadata_request::MetadataRequestTopic::default().with_topic_id(id)
                            })
                            .collect(),
                    )),
                ),
            ));
        }
        out
    }
}

/// Metadata of the topics the principal may describe; the others are answered
/// TOPIC_AUTHORIZATION_FAILED.
fn authorize_topics(broker: &Broker, check: &Check, mut r: MetadataRequest, v: i16) -> Gate {
    let Some(topics) = r.topics.take() else {
        // Every topic: those the principal may not describe are left out.
        return Gate::Serve {
            request: RequestKind::Metadata(r),
            denied: None,
            filter: Some(check.clone()),
        };
    };
    let (ok, no) = split(topics, |t| {
        let name = t.name.as_ref().map_or("", |n| n.as_str());
        check.topic(Operation::Describe, &broker.topic_name(name, &t.topic_id))
    });
    // Auto-creation needs CREATE on the cluster or on the topic; a missing topic the
    // principal may not create is answered TOPIC_AUTHORIZATION_FAILED, as Kafka does.
    let (ok, no) = if r.allow_auto_topic_creation && !check.cluster(Operation::Create) {
        let (ok, mut more) = split(ok, |t| {
            t.name
                .as_ref()
                .is_none_or(|n| broker.topics.get(n).is_some() || check.topic(Operation::Create, n))
        });
        more.extend(no);
        (ok, more)
    } else {
        (ok, no)
    };
    let any = !no.is_empty();
    r.topics = Some(ok);
    partly(
        RequestKind::Metadata(r),
        RequestKind::Metadata(MetadataRequest::default().with_topics(Some(no))),
        any,
        E::TopicAuthorizationFailed,
        v,
    )
}

/// Bits of the operations a client may do on a topic, for `include_topic_authorized_operations`
/// (no ACLs yet: everything is allowed).
const TOPIC_OPERATIONS: i32 =
    (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11);

async fn metadata(
    broker: &Broker,
    r: MetadataRequest,
    version: i16,
    zone: Option<&str>,
    listener: &str,
) -> MetadataResponse {
    // Auto-creation as Kafka does it: from Metadata requests that allow it (v0-3 always do).
    // Decoded as true below v4 (those versions always auto-create); the authorizer turns it
    // off for a principal without CREATE.
    let _ = version;
    let allow_create = r.allow_auto_topic_creation;
    let wanted: Option<Vec<(Option<String>, Uuid)>> = r.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
            .collect()
    });
    let view = broker.cluster.view();
    let topics = match wanted {
        None => broker
            .topics
            .list()
            .into_iter()
            .map(|t| topic_metadata(broker, &t, &view, zone))
            .chain(std::iter::once(broker.offsets_topic_metadata(&view)))
            .collect(),
        Some(wanted) => {
            let mut out = Vec::with_capacity(wanted.len());
            for (name, id) in wanted {
                // A topic asked for by id (Java sends an empty name beside it) is looked up by
                // id and never created.
                let name = if id.is_nil() { name } else { None };
                if name.as_deref() == Some(crate::surface::OFFSETS_TOPIC) {
                    out.push(broker.offsets_topic_metadata(&view));
                    continue;
                }
                let found = match &name {
                    Some(n) if allow_create => {
                        let existed = broker.topics.get(n).is_some();
                        let t = broker.topics.get_or_create(n).await;
                        if !existed && t.is_some() {
                            broker.wait_for_leaders(n).await;
                        }
                        t
                    }
                    Some(n) => match broker.topics.get(n) {
                        Some(t) => Some(t),
                        // Created through another broker a moment ago, before the
                        // announcement reached this one: read the catalog, not "unknown".
                        None => {
                            if let Err(e) = broker.topics.refresh().await {
                                tracing::debug!(error = %e, "reading topics failed");
                            }
                            broker.topics.get(n)
                        }
                    },
                    None => broker.topics.get_by_id(id.as_bytes()),
                };
                out.push(match (found, name) {
                    (Some(t), _) => topic_metadata(broker, &t, &broker.cluster.view(), zone),
                    (None, Some(n)) => {
                        let code = if validate_topic_name(&n).is_err() {
                            ResponseError::InvalidTopicException
                        } else {
                            ResponseError::UnknownTopicOrPartition
                        };
                        MetadataResponseTopic::default()
                            .with_name(Some(TopicName(str(&n))))
                            .with_error_code(code.code())
                    }
                    (None, None) => MetadataResponseTopic::default()
                        .with_topic_id(id)
                        .with_error_code(ResponseError::UnknownTopicId.code()),
                });
            }
            out
        }
    };
    let topics = topics
        .into_iter()
        .map(|t| {
            if r.include_topic_authorized_operations {
                t.with_topic_authorized_operations(TOPIC_OPERATIONS)
            } else {
                t
            }
        })
        .collect();
    // A topic created just now may have been placed since the view was taken.
    let view = broker.cluster.view();
    MetadataResponse::default()
        .with_brokers(metadata_brokers(broker, &view, listener))
        .with_cluster_id(Some(str(&broker.identity.cluster_id)))
        .with_controller_id(controller_id(broker, &view))
        .with_topics(topics)
        .with_cluster_authorized_operations(if r.include_cluster_authorized_operations {
            CLUSTER_OPERATIONS
        } else {
            i32::MIN
        })
}

/// A topic's partitions as a client of `zone` sees them: each names the broker that serves
/// it to that zone (its leader, or a broker of the zone that forwards to it).
fn topic_metadata(
    broker: &Broker,
    t: &weir_partition::Topic,
    view: &ClusterView,
    zone: Option<&str>,
) -> MetadataResponseTopic {
    let routing = broker.routing(t);
    let local_epochs = broker.topics.local_leader_epochs(t);
    let topic = MetadataResponseTopic::default()
        .with_name(Some(TopicName(str(&t.name))))
        .with_topic_id(Uuid::from_bytes(t.id))
        .with_topic_authorized_operations(i32::MIN);
    // A topic appears whole, as Kafka's metadata image shows it: while the controller has not
    // yet given every partition its first leader, the topic is not ready (retriable). Shown
    // with some partitions led and others not, librdkafka (2.16) took the topic as known and
    // asked again only after minutes, so a client that looked right after the creation could
    // not find the partitions that had no leader at first.
    let mut never_placed = false;
    let partitions = (0..t.partition_count() as u32)
        .map(|i| {
            let p = MetadataResponsePartition::default().with_partition_index(i as i32);
            // A partition led here reports its own epoch, which the view learns of only after
            // the store announces it.
            let local_epoch = local_epochs
                .get(i as usize)
                .copied()
                .flatten()
                .map(|e| e as u64);
            match weir_zone::route(view, zone, routing, &t.name, i) {
                Some(route) => {
                    let epoch = local_epoch.unwrap_or(route.epoch);
                    let id = BrokerId(route.broker.node_id);
                    p.with_leader_id(id)
                        .with_leader_epoch(epoch as i32)
                        .with_replica_nodes(vec![id])
                        .with_isr_nodes(vec![id])
                }
                // Its broker is gone (clients retry), or it never had a leader (above).
                None => {
                    never_placed |= view
                        .assignment(&t.name, i)
                        .is_none_or(|a| a.leader.is_none() && a.epoch == 0);
                    p.with_error_code(ResponseError::LeaderNotAvailable.code())
                        .with_leader_id(BrokerId(-1))
                        .with_leader_epoch(-1)
                }
            }
        })
        .collect();
    if never_placed {
        return topic.with_error_code(ResponseError::LeaderNotAvailable.code());
    }
    topic.with_partitions(partitions)
}
