//! Produce: validate, append through each partition's leader, answer once durable.

use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::{str, Broker, Reply};

impl Broker {
    pub(crate) async fn produce(self: &Arc<Self>, r: ProduceRequest, version: i16) -> Reply {
        let started = Instant::now();
        if r.transactional_id.is_some() {
            // Transactions are not implemented yet; say so per partition rather than hang up.
            let e = ResponseError::TransactionalIdAuthorizationFailed;
            return crate::errors::error_response_for(&RequestKind::Produce(r), version, e)
                .map_or(Reply::Unsupported, |response| {
                    Reply::Now(Box::new(response))
                });
        }
        let acks = r.acks;
        // Offsets are assigned here, in request order, before the next request on this
        // connection is read; durability is awaited in the reply.
        let mut started_parts = Vec::new();
        for t in r.topic_data {
            let topic = if version >= 13 {
                self.topics.get_by_id(t.topic_id.as_bytes())
            } else {
                self.topics.get(t.name.0.as_str())
            };
            let mut ps = Vec::with_capacity(t.partition_data.len());
            for p in t.partition_data {
                let partition = topic.as_ref().and_then(|t| {
                    usize::try_from(p.index)
                        .ok()
                        .and_then(|i| t.partitions.get(i).cloned())
                });
                let records = p.records.unwrap_or_default();
                self.meters.produce_bytes.add(records.len() as u64);
                let ticket = match partition {
                    Some(partition) => partition.start_produce(&records),
                    None if version >= 13 => Err(ResponseError::UnknownTopicId),
                    None => Err(ResponseError::UnknownTopicOrPartition),
                };
                ps.push((p.index, ticket));
            }
            started_parts.push((t.name, t.topic_id, ps));
        }
        let this = Arc::clone(self);
        let reply = async move {
            let mut responses = Vec::new();
            for (name, id, parts) in started_parts {
                let mut prs = Vec::new();
                for (index, ticket) in parts {
                    let result = match ticket {
                        Ok(t) => t.wait().await,
                        Err(e) => Err(e),
                    };
                    let pr = PartitionProduceResponse::default()
                        .with_index(index)
                        .with_log_append_time_ms(-1);
                    prs.push(match result {
                        Ok(ok) => pr
                            .with_base_offset(ok.base_offset)
                            .with_log_start_offset(ok.log_start_offset),
                        Err(e) => pr
                            .with_error_code(e.code())
                            .with_base_offset(-1)
                            .with_log_start_offset(-1)
                            .with_error_message(Some(str(&e.to_string()))),
                    });
                }
                responses.push(
                    TopicProduceResponse::default()
                        .with_name(name)
                        .with_topic_id(id)
                        .with_partition_responses(prs),
                );
            }
            this.meters.produce_latency.record(started.elapsed());
            ResponseKind::Produce(ProduceResponse::default().with_responses(responses))
        };
        if acks == 0 {
            return Reply::Silent(Box::pin(async move {
                let _ = reply.await;
            }));
        }
        Reply::Later(Box::pin(reply))
    }
}
