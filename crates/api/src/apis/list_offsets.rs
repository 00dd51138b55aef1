//! ListOffsets: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{sift, Check, Gate};
use crate::{epoch_mismatch, Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// ListOffsets.
pub(crate) struct ListOffsets;

impl Api for ListOffsets {
    type Request = ListOffsetsRequest;

    /// The versions Weir serves: up to 10 (Kafka 4.4's v11 lists the earliest pending upload
    /// offset, KIP-1023: not yet).
    fn versions() -> (i16, i16) {
        super::capped(ApiKey::ListOffsets, 10)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::ListOffsets(
            ListOffsetsResponse::default().with_topics(
                request
                    .topics
                    .iter()
                    .map(|t| {
                        ListOffsetsTopicResponse::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        ListOffsetsPartitionResponse::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        sift!(
            v,
            ListOffsets,
            ListOffsetsRequest,
            r.topics,
            |t| { check.topic(Operation::Describe, &t.name) },
            E::TopicAuthorizationFailed
        )
    }

    // What `authorize` took out comes back in the response's `topics`.
    crate::authz::joins_denied!(ListOffsets.topics);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, zone, .. } = *cx;
        now(ResponseKind::ListOffsets(
            list_offsets(broker, request, v, zone).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{topic, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let parts = |epoch: i32| {
            [-1i64, -2, -3, -4, -5, 0, 1_700_000_000_001, i64::MAX, -7]
                .into_iter()
                .map(|ts| {
                    list_offsets_request::ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(ts)
                        .with_current_leader_epoch(if v >= 4 { epoch } else { -1 })
                })
                .collect::<Vec<_>>()
        };
        let req = |topics| ListOffsetsRequest::default().with_topics(topics);
        vec![
            (
                "every timestamp kind, existing and missing",
                R::ListOffsets(req(vec![
                    list_offsets_request::ListOffsetsTopic::default()
                        .with_name(topic(TOPIC))
                        .with_partitions(parts(-1)),
                    list_offsets_request::ListOffsetsTopic::default()
                        .with_name(topic(MISSING))
                        .with_partitions(parts(-1)),
                ])),
            ),
            (
                "unknown leader epoch",
                R::ListOffsets(req(vec![list_offsets_request::ListOffsetsTopic::default()
                    .with_name(topic(TOPIC))
                    .with_partitions(parts(1000))])),
            ),
        ]
    }
}

/// The special timestamps of ListOffsets.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

async fn list_offsets(
    broker: &Broker,
    r: ListOffsetsRequest,
    version: i16,
    zone: Option<&str>,
) -> ListOffsetsResponse {
    // The leader epoch of an answer exists from v4 on; older clients must not be sent one.
    let epoch_of = |epoch: i32| if version >= 4 { epoch } else { -1 };
    // read_committed (v2+): the latest offset is the last stable offset, and lookups by
    // time find nothing at or beyond it, as in Kafka.
    let committed = version >= 2 && r.isolation_level == 1;
    let mut topics = Vec::with_capacity(r.topics.len());
    for t in r.topics {
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let resp = ListOffsetsPartitionResponse::default()
                .with_partition_index(p.partition_index)
                .with_timestamp(-1)
                .with_offset(-1)
                .with_leader_epoch(-1);
            let Some(partition) = broker
                .topics
                .partition(t.name.0.as_str(), p.partition_index)
            else {
                let (topic, index) = (t.name.0.as_str(), p.partition_index);
                if let Some((remote, offsets)) = broker.remote_offsets(zone, topic, index).await {
                    let o = match offsets {
                        Ok(o) => o,
                        Err(e) => {
                            parts.push(resp.with_error_code(e.code()));
                            continue;
                        }
                    };
                    if let Some(e) = epoch_mismatch(p.current_leader_epoch, o.epoch) {
                        parts.push(resp.with_error_code(e.code()));
                        continue;
                    }
                    let found = match p.timestamp {
                        LATEST if committed => Ok((o.last_stable, -1, o.epoch)),
                        LATEST | LATEST_TIERED => Ok((o.high_watermark, -1, o.epoch)),
                        EARLIEST | EARLIEST_LOCAL => Ok((o.start, -1, o.epoch)),
                        ts if ts >= 0 || ts == MAX_TIMESTAMP => {
                            broker
                                .remote_offset_for_time(&remote, topic, index, ts)
                                .await
                        }
                        _ => Err(E::InvalidRequest),
                    };
                    parts.push(match found {
                        Ok((-1, _, _)) => resp,
                        Ok((offset, ts, epoch)) => resp
                            .with_offset(offset)
                            .with_timestamp(ts)
                            .with_leader_epoch(epoch_of(epoch)),
                        Err(e) => resp.with_error_code(e.code()),
                    });
                    continue;
                }
                let e = broker
                    .topics
                    .missing_error(t.name.0.as_str(), p.partition_index);
                parts.push(resp.with_error_code(e.code()));
                continue;
            };
            if let Some(e) = epoch_mismatch(p.current_leader_epoch, partition.leader_epoch) {
                parts.push(resp.with_error_code(e.code()));
                continue;
            }
            let (start, hw) = partition.offsets();
            let end = if committed {
                partition.last_stable_offset()
            } else {
                hw
            };
            let found = match p.timestamp {
                LATEST => Ok(Some((end, -1))),
                EARLIEST | EARLIEST_LOCAL => Ok(Some((start, -1))),
                LATEST_TIERED => Ok(Some((hw, -1))),
                MAX_TIMESTAMP => partition.max_timestamp().await,
                ts if ts >= 0 => partition.offset_for_timestamp(ts).await,
                _ => Err(E::InvalidRequest),
            }
            .map(|f| {
                f.filter(|&(offset, _)| {
                    (p.timestamp < 0 && p.timestamp != MAX_TIMESTAMP) || offset < end
                })
            });
            parts.push(match found {
                Ok(Some((offset, ts))) => resp
                    .with_offset(offset)
                    .with_timestamp(ts)
                    .with_leader_epoch(epoch_of(partition.leader_epoch)),
                Ok(None) => resp,
                Err(e) => resp.with_error_code(e.code()),
            });
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(parts),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}
