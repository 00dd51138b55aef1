//! What the transaction APIs share (each is served from its module in `apis/`): the errors of
//! each version, the partitions a transaction added through this broker, the verification of
//! a produce's transactional batches (KIP-890), and the writing of markers: in partitions led
//! here directly, in others through their leader's internal listener.
//!
//! The coordinator itself is [`weir_txn::TxnCoordinator`]; this module turns requests into its
//! calls and its errors into each version's codes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use weir_meta::TxnState;
use weir_partition::{Lookup, Topic, TxnCheck};
use weir_txn::{MarkerWriter, Markers};
use weir_zone::wire::{self, TxnMarkers};

use crate::Broker;

/// Each partition of `topics` with the code `codes(topic, partition)` gives it (also the error
/// response's shape, `errors.rs`).
pub(crate) fn add_partitions_results(
    topics: &[add_partitions_to_txn_request::AddPartitionsToTxnTopic],
    codes: &dyn Fn(&str, i32) -> i16,
) -> Vec<add_partitions_to_txn_response::AddPartitionsToTxnTopicResult> {
    use add_partitions_to_txn_response::*;
    topics
        .iter()
        .map(|t| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|&p| {
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(p)
                                .with_partition_error_code(codes(t.name.0.as_str(), p))
                        })
                        .collect(),
                )
        })
        .collect()
}

/// PRODUCER_FENCED exists for clients of these versions and later (KIP-588); older ones are
/// told INVALID_PRODUCER_EPOCH, which they treat the same way.
pub(crate) fn fenced_for(e: ResponseError, version: i16, since: i16) -> ResponseError {
    if e == ResponseError::ProducerFenced && version < since {
        ResponseError::InvalidProducerEpoch
    } else {
        e
    }
}

pub(crate) fn code(r: Result<(), ResponseError>) -> i16 {
    r.err().map_or(0, |e| e.code())
}

/// The partitions this broker added to one transactional id's current transaction. Under
/// Transactions V2 a producer id and epoch is one transaction (the epoch moves on when it
/// ends), so a write under another pair starts afresh and this never vouches for the next one.
#[derive(Default)]
pub(crate) struct AddedTo {
    producer: (i64, i16),
    partitions: HashMap<String, HashSet<i32>>,
    /// By partition, the lowest base sequence of a batch refused because its partition could
    /// not join the transaction. The client sends that batch again; until it (or one below
    /// it) joins, the producer's later batches for the partition are refused as out of order,
    /// or one of them would be appended first and the retried batch would never fit after it
    /// (the partition knows no earlier sequence of a producer's first write there). Kafka's
    /// verification entry keeps the same lowest sequence (KIP-890).
    refused: HashMap<String, HashMap<i32, i32>>,
}

/// A partition of a produce that must join its transaction, with its batch's base sequence.
type Joining = (String, i32, i32);

impl AddedTo {
    fn holds(&self, producer: (i64, i16), topic: &str, partition: i32) -> bool {
        self.producer == producer
            && self
                .partitions
                .get(topic)
                .is_some_and(|ps| ps.contains(&partition))
    }

    /// Whether a batch at `seq` would overtake an earlier refused batch of the producer.
    fn overtakes(&self, producer: (i64, i16), topic: &str, partition: i32, seq: i32) -> bool {
        self.producer == producer
            && self
                .refused
                .get(topic)
                .and_then(|ps| ps.get(&partition))
                .is_some_and(|&lowest| seq > lowest)
    }

    fn start(&mut self, producer: (i64, i16)) {
        if self.producer != producer {
            self.producer = producer;
            self.partitions.clear();
            self.refused.clear();
        }
    }

    fn record(&mut self, producer: (i64, i16), joined: Vec<Joining>) {
        self.start(producer);
        for (t, p, seq) in joined {
            if let Some(ps) = self.refused.get_mut(&t) {
                if ps.get(&p).is_some_and(|&lowest| seq <= lowest) {
                    ps.remove(&p);
                }
            }
            self.partitions.entry(t).or_default().insert(p);
        }
    }

    fn refuse(&mut self, producer: (i64, i16), refused: &[Joining]) {
        self.start(producer);
        for (t, p, seq) in refused {
            let lowest = self
                .refused
                .entry(t.clone())
                .or_default()
                .entry(*p)
                .or_insert(*seq);
            *lowest = (*lowest).min(*seq);
        }
    }
}

impl Broker {
    /// Transactions V2 (Produce v12+): adds to their transactions the partitions of a
    /// produce whose batches are transactional, before they are written here or forwarded to
    /// their leader (which then verifies them as for any transactional write). `topics` is the
    /// request's topics as resolved by the caller. Returns the partitions that could not be
    /// added, with the error to answer them with.
    pub(crate) async fn add_produce_partitions(
        &self,
        transactional_id: &str,
        topic_data: &[produce_request::TopicProduceData],
        topics: &[Option<Arc<Topic>>],
    ) -> BTreeMap<(String, i32), ResponseError> {
        // Grouped by producer id and epoch: one transaction each (normally just one).
        let mut by_producer: BTreeMap<(i64, i16), Vec<Joining>> = BTreeMap::new();
        let mut refused = BTreeMap::new();
        {
            let added = self.txn_added.lock().unwrap_or_else(|e| e.into_inner());
            let added = added.get(transactional_id);
            for (t, topic) in topic_data.iter().zip(topics) {
                let Some(topic) = topic else { continue };
                for p in &t.partition_data {
                    let header = p
                        .records
                        .as_ref()
                        .and_then(|r| weir_partition::batch::BatchHeader::parse(r));
                    let Some(h) = header.filter(|h| h.is_transactional()) else {
                        continue;
                    };
                    let producer = (h.producer_id, h.producer_epoch);
                    if added.is_some_and(|a| {
                        a.overtakes(producer, &topic.name, p.index, h.base_sequence)
                    }) {
                        refused.insert(
                            (topic.name.clone(), p.index),
                            ResponseError::OutOfOrderSequenceNumber,
                        );
                        continue;
                    }
                    let known = added.is_some_and(|a| a.holds(producer, &topic.name, p.index));
                    if !known
                        && !matches!(self.topics.lookup(&topic.name, p.index), Lookup::Unknown)
                    {
                        by_producer.entry(producer).or_default().push((
                            topic.name.clone(),
                            p.index,
                            h.base_sequence,
                        ));
                    }
                }
            }
        }
        for ((pid, epoch), joining) in by_producer {
            let partitions: Vec<(String, i32)> =
                joining.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
            let result = self
                .txns
                .add_implicitly(transactional_id, pid, epoch, &partitions, None)
                .await;
            let mut added = self.txn_added.lock().unwrap_or_else(|e| e.into_inner());
            if added.len() >= 10_000 && !added.contains_key(transactional_id) {
                added.clear();
            }
            let to = added.entry(transactional_id.to_string()).or_default();
            match result {
                Ok(()) => to.record((pid, epoch), joining),
                Err(e) => {
                    let e = match e {
                        ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
                        // Retriable for every producer: the add is tried again with the batch.
                        ResponseError::ConcurrentTransactions
                        | ResponseError::NotCoordinator
                        | ResponseError::CoordinatorNotAvailable
                        | ResponseError::CoordinatorLoadInProgress => {
                            ResponseError::NotEnoughReplicas
                        }
                        e => e,
                    };
                    // Only a batch the client sends again can be overtaken (and a fenced
                    // producer's refusal must not reset the current producer's entry).
                    if e == ResponseError::NotEnoughReplicas {
                        to.refuse((pid, epoch), &joining);
                    }
                    for p in partitions {
                        refused.insert(p, e);
                    }
                }
            }
        }
        refused
    }

    /// KIP-890: for each partition of a transactional produce led here whose producer has no
    /// transaction open in it, checks with the transaction's state that the partition was
    /// added, under a guard that a marker arriving meanwhile revokes. `None`: refuse the
    /// partition's batches with the error.
    pub(crate) async fn verify_txn_produce(
        &self,
        transactional_id: &str,
        partition: &weir_partition::Partition,
        records: &bytes::Bytes,
    ) -> Result<TxnCheck, ResponseError> {
        let Some(h) = weir_partition::batch::BatchHeader::parse(records) else {
            // Not a batch: validation refuses it with the right error.
            return Ok(TxnCheck::None);
        };
        if !h.is_transactional() {
            return Ok(TxnCheck::None);
        }
        let Some(guard) = partition.verification_guard(h.producer_id) else {
            return Ok(TxnCheck::None);
        };
        let record = self
            .meta
            .load_transaction(transactional_id)
            .await
            .map_err(|_| ResponseError::KafkaStorageError)?;
        let key = (partition.topic.clone(), partition.index);
        let refused = match record {
            Some(t)
                if t.producer_id == h.producer_id
                    && t.producer_epoch == h.producer_epoch
                    && t.state == TxnState::Ongoing
                    && t.partitions.contains(&key) =>
            {
                return Ok(TxnCheck::Guard {
                    guard,
                    version: t.version,
                });
            }
            Some(t) if t.producer_id != h.producer_id => ResponseError::InvalidProducerIdMapping,
            Some(t) if t.producer_epoch > h.producer_epoch => ResponseError::InvalidProducerEpoch,
            Some(t) if t.state.is_preparing() => ResponseError::ConcurrentTransactions,
            _ => {
                tracing::debug!(transactional_id, topic = %key.0, partition = key.1, "a transactional write to a partition not in its transaction was refused");
                ResponseError::InvalidTxnState
            }
        };
        partition.drop_guard(h.producer_id);
        Err(refused)
    }

    /// Writes markers in partitions led here; the answer once each is durable.
    pub(crate) async fn write_local_markers(&self, m: &TxnMarkers) -> Vec<i16> {
        // A broker whose session lapsed may be replaced at any moment: it writes nothing.
        let may_acknowledge = self.cluster.may_acknowledge();
        let started: Vec<_> = m
            .partitions
            .iter()
            .map(|(t, p)| match self.topics.lookup(t, *p) {
                Lookup::Local(_) if !may_acknowledge => Err(ResponseError::NotLeaderOrFollower),
                Lookup::Local(part) => part.start_marker(
                    m.producer_id,
                    m.producer_epoch,
                    m.commit,
                    m.coordinator_epoch,
                ),
                Lookup::NotHere => Err(ResponseError::NotLeaderOrFollower),
                Lookup::Unknown => Err(ResponseError::UnknownTopicOrPartition),
            })
            .collect();
        let mut codes = Vec::with_capacity(started.len());
        for s in started {
            codes.push(match s {
                Ok(Some(ticket)) => code(ticket.wait().await.map(|_| ())),
                Ok(None) => 0,
                Err(e) => e.code(),
            });
        }
        codes
    }
}

#[async_trait::async_trait]
impl MarkerWriter for Broker {
    async fn write_markers(&self, m: Markers) -> Vec<Result<(), ResponseError>> {
        // Partitions by the broker that leads them now: this one, others, or none yet.
        let view = self.cluster.view();
        let me = self.cluster.node_id();
        let mut by_leader: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
        let mut out: Vec<Result<(), ResponseError>> = vec![Ok(()); m.partitions.len()];
        for (i, (t, p)) in m.partitions.iter().enumerate() {
            let leader = match self.topics.lookup(t, *p) {
                Lookup::Local(_) => Some(me),
                Lookup::Unknown => {
                    out[i] = Err(ResponseError::UnknownTopicOrPartition);
                    continue;
                }
                Lookup::NotHere => u32::try_from(*p)
                    .ok()
                    .and_then(|i| view.assignment(t, i))
                    .and_then(|a| a.leader),
            };
            match leader {
                Some(l) => by_leader.entry(l).or_default().push(i),
                None => out[i] = Err(ResponseError::NotLeaderOrFollower),
            }
        }
        let sends = by_leader.into_iter().map(|(leader, idx)| {
            let msg = TxnMarkers {
                producer_id: m.producer_id,
                producer_epoch: m.producer_epoch,
                commit: m.commit,
                coordinator_epoch: m.coordinator_epoch,
                partitions: idx.iter().map(|&i| m.partitions[i].clone()).collect(),
            };
            let peer = view.broker(leader).cloned();
            async move {
                let codes = if leader == me {
                    self.write_local_markers(&msg).await
                } else {
                    match (peer, &self.zones) {
                        (Some(b), Some(zones)) => {
                            let answer = zones
                                .peers
                                .send(
                                    weir_zone::Peer {
                                        node_id: b.node_id,
                                        internal_addr: &b.internal_addr,
                                        zone: &b.zone,
                                    },
                                    weir_zone::Channel::Feed,
                                    wire::TXN_MARKERS,
                                    msg.encode(),
                                )
                                .await;
                            match answer.ok().and_then(|a| wire::decode_codes(a).ok()) {
                                Some(c) if c.len() == msg.partitions.len() => c,
                                _ => vec![
                                    ResponseError::NotLeaderOrFollower.code();
                                    msg.partitions.len()
                                ],
                            }
                        }
                        _ => vec![ResponseError::NotLeaderOrFollower.code(); msg.partitions.len()],
                    }
                };
                (idx, codes)
            }
        });
        for (idx, codes) in futures::future::join_all(sends).await {
            for (i, c) in idx.into_iter().zip(codes) {
                out[i] = match c {
                    0 => Ok(()),
                    c => Err(ResponseError::try_from_code(c)
                        .unwrap_or(ResponseError::UnknownServerError)),
                };
            }
        }
        // A partition unknown here or at its leader counts as gone (its marker is not needed)
        // only if the catalog, read again, says so: a topic created a moment ago is not yet
        // known everywhere.
        if out.contains(&Err(ResponseError::UnknownTopicOrPartition)) {
            if let Err(e) = self.topics.refresh().await {
                tracing::debug!(error = %e, "reading topics failed");
            }
            for (i, (t, p)) in m.partitions.iter().enumerate() {
                if out[i] == Err(ResponseError::UnknownTopicOrPartition)
                    && !matches!(self.topics.lookup(t, *p), Lookup::Unknown)
                {
                    out[i] = Err(ResponseError::NotLeaderOrFollower);
                }
            }
        }
        out
    }
}
