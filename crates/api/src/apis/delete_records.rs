//! DeleteRecords: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{sift, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// DeleteRecords.
pub(crate) struct DeleteRecords;

impl Api for DeleteRecords {
    type Request = DeleteRecordsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DeleteRecords)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
        ResponseKind::DeleteRecords(
            DeleteRecordsResponse::default().with_topics(
                request
                    .topics
                    .iter()
                    .map(|t| {
                        DeleteRecordsTopicResult::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        DeleteRecordsPartitionResult::default()
                                            .with_partition_index(p.partition_index)
                                            .with_low_watermark(-1)
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
            DeleteRecords,
            DeleteRecordsRequest,
            r.topics,
            |t| { check.topic(Operation::Delete, &t.name) },
            E::TopicAuthorizationFailed
        )
    }

    // What `authorize` took out comes back in the response's `topics`.
    crate::authz::joins_denied!(DeleteRecords.topics);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::DeleteRecords(
            delete_records(broker, request).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{topic, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "existing and missing",
            R::DeleteRecords(DeleteRecordsRequest::default().with_topics(vec![
                delete_records_request::DeleteRecordsTopic::default()
                    .with_name(topic(TOPIC))
                    .with_partitions(vec![
                        delete_records_request::DeleteRecordsPartition::default()
                            .with_partition_index(1)
                            .with_offset(0),
                        delete_records_request::DeleteRecordsPartition::default()
                            .with_partition_index(0)
                            .with_offset(1_000_000),
                    ]),
                delete_records_request::DeleteRecordsTopic::default()
                    .with_name(topic(MISSING))
                    .with_partitions(vec![
                        delete_records_request::DeleteRecordsPartition::default()
                            .with_partition_index(0)
                            .with_offset(0),
                    ]),
            ])),
        )]
    }
}

async fn delete_records(broker: &Broker, r: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let mut topics = Vec::with_capacity(r.topics.len());
    for t in r.topics {
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let res =
                DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
            parts.push(
                match broker
                    .topics
                    .partition(t.name.0.as_str(), p.partition_index)
                {
                    None => res
                        .with_error_code(
                            broker
                                .topics
                                .missing_error(t.name.0.as_str(), p.partition_index)
                                .code(),
                        )
                        .with_low_watermark(-1),
                    Some(part) => match part.delete_records(p.offset).await {
                        Ok(low) => res.with_low_watermark(low),
                        Err(e) => res.with_error_code(e.code()).with_low_watermark(-1),
                    },
                },
            );
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(parts),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}
