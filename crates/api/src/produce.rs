//! Produce: validate, append through each partition's leader, answer once durable.
//!
//! A partition led in another zone, produced by a client of this broker's zone, is forwarded
//! (`weir_zone::Forwarder`): its bytes go to object storage and the leader appends them. It
//! is handed over here, in request order, like the appends of partitions led here.

use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::produce_response::{
    LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use tokio::sync::oneshot;
use weir_partition::{Lookup, ProduceTicket, Produced, Topic};
use weir_zone::handoff::Outcome;

use crate::{str, Broker, Reply};

/// A partition's produce, started.
enum Started {
    Local(ProduceTicket),
    Forwarded(oneshot::Receiver<Outcome>),
}

impl Started {
    async fn wait(self) -> Result<Produced, ResponseError> {
        match self {
            Started::Local(t) => t.wait().await,
            Started::Forwarded(rx) => match rx.await {
                Ok(Ok(r)) if r.error == 0 => Ok(Produced {
                    base_offset: r.base_offset,
                    log_start_offset: r.log_start_offset,
                }),
                Ok(Ok(r)) => Err(error_of(r.error)),
                Ok(Err(code)) => Err(error_of(code)),
                Err(_) => Err(ResponseError::NotLeaderOrFollower),
            },
        }
    }
}

fn error_of(code: i16) -> ResponseError {
    ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError)
}

impl Broker {
    pub(crate) async fn produce(
        self: &Arc<Self>,
        r: ProduceRequest,
        version: i16,
        zone: Option<&str>,
        listener: &str,
    ) -> Reply {
        let started = Instant::now();
        let transactional_id = r
            .transactional_id
            .as_ref()
            .map(|t| t.to_string())
            .filter(|t| !t.is_empty());
        let acks = r.acks;
        // Offsets are assigned here, in request order, before the next request on this
        // connection is read; durability is awaited in the reply.
        let mut started_parts = Vec::new();
        // A broker whose session lapsed may be replaced at any moment: refuse before writing
        // (the WAL would refuse to acknowledge anyway).
        let may_acknowledge = self.cluster.may_acknowledge();
        let topics: Vec<Option<Arc<Topic>>> = r
            .topic_data
            .iter()
            .map(|t| {
                if version >= 13 {
                    self.topics.get_by_id(t.topic_id.as_bytes())
                } else {
                    self.topics.get(t.name.0.as_str())
                }
            })
            .collect();
        // Transactions V2: the request's transactional partitions join their transaction
        // first (the client sends no AddPartitionsToTxn).
        let refused = match &transactional_id {
            Some(id) if version >= 12 => {
                self.add_produce_partitions(id, &r.topic_data, &topics)
                    .await
            }
            _ => Default::default(),
        };
        for (t, topic) in r.topic_data.into_iter().zip(topics) {
            let mut ps = Vec::with_capacity(t.partition_data.len());
            for p in t.partition_data {
                let lookup = match &topic {
                    Some(t) => self.topics.lookup(&t.name, p.index),
                    None => Lookup::Unknown,
                };
                let records = p.records.unwrap_or_default();
                self.meters.produce_bytes.add(records.len() as u64);
                let not_added = match &topic {
                    Some(t) if !refused.is_empty() => refused.get(&(t.name.clone(), p.index)),
                    _ => None,
                };
                let ticket = match lookup {
                    _ if not_added.is_some() => Err(*not_added.expect("checked")),
                    Lookup::Local(_) if !may_acknowledge => Err(ResponseError::NotLeaderOrFollower),
                    Lookup::Local(partition) => {
                        // KIP-890: a transaction's first write here is checked against its
                        // state first. This waits before the next request of the connection
                        // is read, so the connection's order holds.
                        let check = match &transactional_id {
                            Some(id) => self.verify_txn_produce(id, &partition, &records).await,
                            None => Ok(weir_partition::TxnCheck::None),
                        };
                        check
                            .and_then(|c| partition.start_produce_checked(&records, c))
                            .map(Started::Local)
                    }
                    Lookup::NotHere => match (&topic, &self.zones) {
                        (Some(t), Some(zones)) => match self.remote(zone, &t.name, p.index) {
                            Some(remote) => {
                                zones.meters.forwarded_partitions.inc();
                                Ok(Started::Forwarded(zones.forwarder.submit_transactional(
                                    remote.leader,
                                    &t.name,
                                    p.index,
                                    records,
                                    transactional_id.as_deref().unwrap_or(""),
                                )))
                            }
                            None => Err(ResponseError::NotLeaderOrFollower),
                        },
                        _ => Err(ResponseError::NotLeaderOrFollower),
                    },
                    Lookup::Unknown if version >= 13 => Err(ResponseError::UnknownTopicId),
                    Lookup::Unknown => Err(ResponseError::UnknownTopicOrPartition),
                };
                ps.push((p.index, ticket));
            }
            let name = topic.as_ref().map(|t| t.name.clone());
            started_parts.push((t.name, t.topic_id, name, ps));
        }
        let this = Arc::clone(self);
        let zone = zone.map(|z| z.to_string());
        let listener = listener.to_string();
        let reply = async move {
            let mut responses = Vec::new();
            let mut endpoints: Vec<NodeEndpoint> = Vec::new();
            for (name, id, topic_name, parts) in started_parts {
                let mut prs = Vec::new();
                for (index, ticket) in parts {
                    let result = match ticket {
                        Ok(t) => t.wait().await,
                        Err(e) => Err(e),
                    };
                    let pr = PartitionProduceResponse::default()
                        .with_index(index)
                        .with_log_append_time_ms(-1);
                    let hint = match (&result, &topic_name) {
                        (Err(ResponseError::NotLeaderOrFollower), Some(t)) => {
                            this.leader_hint(zone.as_deref(), &listener, t, index)
                        }
                        _ => None,
                    };
                    let pr = match result {
                        Ok(ok) => pr
                            .with_base_offset(ok.base_offset)
                            .with_log_start_offset(ok.log_start_offset),
                        Err(e) => pr
                            .with_error_code(e.code())
                            .with_base_offset(-1)
                            .with_log_start_offset(-1)
                            .with_error_message(Some(str(&e.to_string()))),
                    };
                    // KIP-951: the new leader in the response, so the client re-routes without
                    // a metadata round trip (v10+; older versions drop these fields).
                    prs.push(match hint {
                        Some(h) => {
                            if !endpoints.iter().any(|e| e.node_id.0 == h.node_id) {
                                endpoints.push(
                                    NodeEndpoint::default()
                                        .with_node_id(BrokerId(h.node_id))
                                        .with_host(str(&h.host))
                                        .with_port(h.port)
                                        .with_rack((!h.rack.is_empty()).then(|| str(&h.rack))),
                                );
                            }
                            pr.with_current_leader(
                                LeaderIdAndEpoch::default()
                                    .with_leader_id(BrokerId(h.node_id))
                                    .with_leader_epoch(h.epoch),
                            )
                        }
                        None => pr,
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
            ResponseKind::Produce(
                ProduceResponse::default()
                    .with_responses(responses)
                    .with_node_endpoints(endpoints),
            )
        };
        if acks == 0 {
            return Reply::Silent(Box::pin(async move {
                let _ = reply.await;
            }));
        }
        Reply::Later(Box::pin(reply))
    }
}
