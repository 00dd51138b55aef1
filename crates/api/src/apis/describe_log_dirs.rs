//! DescribeLogDirs: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, Check, Gate};
use crate::{str, Broker, Reply};
use weir_auth::acl::Operation;

/// Kafka's "unknown" for a volume's total and usable bytes.
const UNKNOWN_BYTES: i64 = -1;

/// DescribeLogDirs.
pub(crate) struct DescribeLogDirs;

impl Api for DescribeLogDirs {
    type Request = DescribeLogDirsRequest;

    /// The versions Weir serves: up to 4 (Kafka 4.4's v5 adds response fields: not yet).
    fn versions() -> (i16, i16) {
        super::capped(ApiKey::DescribeLogDirs, 4)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::DescribeLogDirs(
            // The top-level code exists from v3; before, each directory carries it.
            DescribeLogDirsResponse::default()
                .with_error_code(code)
                .with_results(vec![
                    describe_log_dirs_response::DescribeLogDirsResult::default()
                        .with_error_code(code),
                ]),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        cluster(
            check,
            Operation::Describe,
            RequestKind::DescribeLogDirs(r),
            v,
        )
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::DescribeLogDirs(
            describe_log_dirs(broker, request).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{topic, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![
            ("all", R::DescribeLogDirs(DescribeLogDirsRequest::default())),
            (
                "one topic",
                R::DescribeLogDirs(DescribeLogDirsRequest::default().with_topics(Some(vec![
                    describe_log_dirs_request::DescribableLogDirTopic::default()
                        .with_topic(topic(TOPIC))
                        .with_partitions(vec![0, 1]),
                ]))),
            ),
        ]
    }
}

/// DescribeLogDirs: one directory per broker, holding the partitions it leads, each with the
/// bytes it has in object storage.
async fn describe_log_dirs(broker: &Broker, r: DescribeLogDirsRequest) -> DescribeLogDirsResponse {
    let wanted = |topic: &str, p: i32| match &r.topics {
        None => true,
        Some(ts) => ts
            .iter()
            .any(|t| t.topic.0.as_str() == topic && t.partitions.contains(&p)),
    };
    let mut by_topic: std::collections::BTreeMap<String, Vec<DescribeLogDirsPartition>> =
        Default::default();
    let mut partitions = broker.topics.local_partitions();
    partitions.sort_by(|a, b| (&a.topic, a.index).cmp(&(&b.topic, b.index)));
    for p in partitions {
        if !wanted(&p.topic, p.index) {
            continue;
        }
        let (start, _) = p.offsets();
        let size = match broker
            .meta
            .ranges(p.stream_id, start.max(0) as u64, usize::MAX >> 1)
            .await
        {
            Ok(ranges) => ranges.iter().map(|r| r.size as i64).sum(),
            Err(e) => {
                tracing::debug!(error = %e, "reading a partition's ranges failed");
                -1
            }
        };
        by_topic.entry(p.topic.clone()).or_default().push(
            DescribeLogDirsPartition::default()
                .with_partition_index(p.index)
                .with_partition_size(size)
                .with_offset_lag(0),
        );
    }
    let topics = by_topic
        .into_iter()
        .map(|(name, ps)| {
            DescribeLogDirsTopic::default()
                .with_name(TopicName(str(&name)))
                .with_partitions(ps)
        })
        .collect();
    DescribeLogDirsResponse::default().with_results(vec![DescribeLogDirsResult::default()
        .with_log_dir(str(&broker.identity.log_dir))
        .with_topics(topics)
        .with_total_bytes(UNKNOWN_BYTES)
        .with_usable_bytes(UNKNOWN_BYTES)])
}
