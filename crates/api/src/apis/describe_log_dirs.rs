//! DescribeLogDirs: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, Check, Gate};
use crate::{Broker, Reply};
use weir_auth::acl::Operation;

/// DescribeLogDirs.
pub(crate) struct DescribeLogDirs;

impl Api for DescribeLogDirs {
    type Request = DescribeLogDirsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DescribeLogDirs)
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
            broker.describe_log_dirs(request).await,
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
