//! DescribeProducers: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use weir_partition::Lookup;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{sift, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// DescribeProducers.
pub(crate) struct DescribeProducers;

impl Api for DescribeProducers {
    type Request = DescribeProducersRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DescribeProducers)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use describe_producers_response::{PartitionResponse, TopicResponse};
        ResponseKind::DescribeProducers(
            DescribeProducersResponse::default().with_topics(
                request
                    .topics
                    .iter()
                    .map(|t| {
                        TopicResponse::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partition_indexes
                                    .iter()
                                    .map(|&p| {
                                        PartitionResponse::default()
                                            .with_partition_index(p)
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
            DescribeProducers,
            DescribeProducersRequest,
            r.topics,
            |t| { check.topic(Operation::Read, &t.name) },
            E::TopicAuthorizationFailed
        )
    }

    // What `authorize` took out comes back in the response's `topics`.
    crate::authz::joins_denied!(DescribeProducers.topics);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::DescribeProducers(describe_producers(
            broker, request,
        )))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{topic, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "a partition and an unknown topic",
            R::DescribeProducers(DescribeProducersRequest::default().with_topics(vec![
                describe_producers_request::TopicRequest::default()
                    .with_name(topic(TOPIC))
                    .with_partition_indexes(vec![0, 99]),
                describe_producers_request::TopicRequest::default()
                    .with_name(topic("no-such-topic"))
                    .with_partition_indexes(vec![0]),
            ])),
        )]
    }
}

/// DescribeProducers (`kafka-transactions describe-producers`, `find-hanging`): the
/// producers each partition led here knows, with their open transaction's first offset.
fn describe_producers(broker: &Broker, r: DescribeProducersRequest) -> DescribeProducersResponse {
    use describe_producers_response::*;
    let topics = r
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&index| {
                    let mut out = PartitionResponse::default().with_partition_index(index);
                    match broker.topics.lookup(&t.name, index) {
                        Lookup::Local(p) => {
                            out.active_producers = p
                                .describe_producers()
                                .into_iter()
                                .map(|a| {
                                    ProducerState::default()
                                        .with_producer_id(ProducerId(a.producer_id))
                                        .with_producer_epoch(i32::from(a.epoch))
                                        .with_last_sequence(a.last_sequence)
                                        .with_last_timestamp(a.last_write_ms)
                                        // Markers name the transaction record's version,
                                        // not a coordinator epoch: unknown here.
                                        .with_coordinator_epoch(-1)
                                        .with_current_txn_start_offset(a.txn_start_offset)
                                })
                                .collect();
                        }
                        Lookup::NotHere => {
                            out.error_code = ResponseError::NotLeaderOrFollower.code();
                        }
                        Lookup::Unknown => {
                            out.error_code = ResponseError::UnknownTopicOrPartition.code();
                        }
                    }
                    out
                })
                .collect();
            TopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}
