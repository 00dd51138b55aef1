//! ListOffsets and OffsetForLeaderEpoch.

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::{epoch_mismatch, Broker};

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

impl Broker {
    pub(crate) async fn list_offsets(
        &self,
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
                let Some(partition) = self.topics.partition(t.name.0.as_str(), p.partition_index)
                else {
                    let (topic, index) = (t.name.0.as_str(), p.partition_index);
                    if let Some((remote, offsets)) = self.remote_offsets(zone, topic, index).await {
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
                                self.remote_offset_for_time(&remote, topic, index, ts).await
                            }
                            _ => Err(ResponseError::InvalidRequest),
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
                    let e = self
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
                    _ => Err(ResponseError::InvalidRequest),
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

    /// Weir never truncates acknowledged data, so every epoch a client knows ends at the high
    /// watermark: answering so tells a client that validates its position after a leader change
    /// that nothing it read was lost.
    pub(crate) async fn offset_for_leader_epoch(
        &self,
        r: OffsetForLeaderEpochRequest,
        zone: Option<&str>,
    ) -> OffsetForLeaderEpochResponse {
        let mut topics = Vec::with_capacity(r.topics.len());
        for t in r.topics {
            let mut parts = Vec::with_capacity(t.partitions.len());
            for p in &t.partitions {
                let (topic, index) = (t.topic.0.as_str(), p.partition);
                // (leader epoch, high watermark): of the partition led here, or, for one
                // served here for a leader in another zone, that leader's from the feed.
                let current = match self.topics.partition(topic, index) {
                    Some(part) => Ok((part.leader_epoch, part.offsets().1)),
                    None => match self.remote_offsets(zone, topic, index).await {
                        Some((_, o)) => o.map(|o| (o.epoch, o.high_watermark)),
                        None => Err(self.topics.missing_error(topic, index)),
                    },
                };
                let e = EpochEndOffset::default().with_partition(index);
                let fail = |err: ResponseError| {
                    e.clone()
                        .with_error_code(err.code())
                        .with_leader_epoch(-1)
                        .with_end_offset(-1)
                };
                parts.push(match current {
                    Err(err) => fail(err),
                    Ok((epoch, hw)) => match epoch_mismatch(p.current_leader_epoch, epoch) {
                        Some(err) => fail(err),
                        None if p.leader_epoch > epoch => {
                            e.with_leader_epoch(-1).with_end_offset(-1)
                        }
                        None => e.with_leader_epoch(p.leader_epoch).with_end_offset(hw),
                    },
                });
            }
            topics.push(
                OffsetForLeaderTopicResult::default()
                    .with_topic(t.topic)
                    .with_partitions(parts),
            );
        }
        OffsetForLeaderEpochResponse::default().with_topics(topics)
    }
}
