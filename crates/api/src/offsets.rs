//! ListOffsets and OffsetForLeaderEpoch.

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::Broker;

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
                        if p.current_leader_epoch >= 0 && p.current_leader_epoch != o.epoch {
                            let e = if p.current_leader_epoch < o.epoch {
                                ResponseError::FencedLeaderEpoch
                            } else {
                                ResponseError::UnknownLeaderEpoch
                            };
                            parts.push(resp.with_error_code(e.code()));
                            continue;
                        }
                        let found = match p.timestamp {
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
                if p.current_leader_epoch >= 0 && p.current_leader_epoch != partition.leader_epoch {
                    let e = if p.current_leader_epoch < partition.leader_epoch {
                        ResponseError::FencedLeaderEpoch
                    } else {
                        ResponseError::UnknownLeaderEpoch
                    };
                    parts.push(resp.with_error_code(e.code()));
                    continue;
                }
                let (start, hw) = partition.offsets();
                let found = match p.timestamp {
                    LATEST => Ok(Some((hw, -1))),
                    EARLIEST | EARLIEST_LOCAL => Ok(Some((start, -1))),
                    LATEST_TIERED => Ok(Some((hw, -1))),
                    MAX_TIMESTAMP => partition.max_timestamp().await,
                    ts if ts >= 0 => partition.offset_for_timestamp(ts).await,
                    _ => Err(ResponseError::InvalidRequest),
                };
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
        // Partitions served here for a leader in another zone: that leader's epoch and high
        // watermark, from the offsets feed.
        let mut remote = std::collections::HashMap::new();
        for t in &r.topics {
            for p in &t.partitions {
                let (topic, index) = (t.topic.0.as_str(), p.partition);
                if self.topics.partition(topic, index).is_some() {
                    continue;
                }
                if let Some((_, o)) = self.remote_offsets(zone, topic, index).await {
                    remote.insert((topic.to_string(), index), o);
                }
            }
        }
        let topics = r
            .topics
            .into_iter()
            .map(|t| {
                let parts = t
                    .partitions
                    .iter()
                    .map(|p| {
                        let e = EpochEndOffset::default().with_partition(p.partition);
                        if let Some(o) = remote.get(&(t.topic.0.to_string(), p.partition)) {
                            return match o {
                                Err(err) => e
                                    .with_error_code(err.code())
                                    .with_leader_epoch(-1)
                                    .with_end_offset(-1),
                                Ok(o)
                                    if p.current_leader_epoch >= 0
                                        && p.current_leader_epoch != o.epoch =>
                                {
                                    let code = if p.current_leader_epoch < o.epoch {
                                        ResponseError::FencedLeaderEpoch
                                    } else {
                                        ResponseError::UnknownLeaderEpoch
                                    };
                                    e.with_error_code(code.code())
                                        .with_leader_epoch(-1)
                                        .with_end_offset(-1)
                                }
                                Ok(o) if p.leader_epoch > o.epoch => {
                                    e.with_leader_epoch(-1).with_end_offset(-1)
                                }
                                Ok(o) => e
                                    .with_leader_epoch(p.leader_epoch)
                                    .with_end_offset(o.high_watermark),
                            };
                        }
                        match self.topics.partition(t.topic.0.as_str(), p.partition) {
                            None => e
                                .with_error_code(
                                    self.topics
                                        .missing_error(t.topic.0.as_str(), p.partition)
                                        .code(),
                                )
                                .with_leader_epoch(-1)
                                .with_end_offset(-1),
                            Some(part)
                                if p.current_leader_epoch >= 0
                                    && p.current_leader_epoch != part.leader_epoch =>
                            {
                                let code = if p.current_leader_epoch < part.leader_epoch {
                                    ResponseError::FencedLeaderEpoch
                                } else {
                                    ResponseError::UnknownLeaderEpoch
                                };
                                e.with_error_code(code.code())
                                    .with_leader_epoch(-1)
                                    .with_end_offset(-1)
                            }
                            Some(part) if p.leader_epoch > part.leader_epoch => {
                                e.with_leader_epoch(-1).with_end_offset(-1)
                            }
                            Some(part) => {
                                let (_, hw) = part.offsets();
                                e.with_leader_epoch(p.leader_epoch).with_end_offset(hw)
                            }
                        }
                    })
                    .collect();
                OffsetForLeaderTopicResult::default()
                    .with_topic(t.topic)
                    .with_partitions(parts)
            })
            .collect();
        OffsetForLeaderEpochResponse::default().with_topics(topics)
    }
}
