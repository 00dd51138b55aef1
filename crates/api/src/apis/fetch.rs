//! Fetch: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{serve, Check, Gate};
use crate::{Broker, Reply};

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

    /// Fetch checks READ itself (`Broker::fetch`): a fetch in a session reads partitions
    /// its request does not name.
    fn authorize(_broker: &Broker, _check: &Check, r: Self::Request, _v: i16) -> Gate {
        serve(RequestKind::Fetch(r))
    }

    // What `authorize` took out comes back in the response's `responses`.
    crate::authz::joins_denied!(Fetch.responses);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx {
            conn,
            v,
            zone,
            listener,
            ..
        } = *cx;
        broker
            .fetch(request, v, zone, listener, broker.check_for(conn))
            .await
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
