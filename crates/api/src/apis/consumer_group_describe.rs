//! ConsumerGroupDescribe: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{partly, split, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// ConsumerGroupDescribe.
pub(crate) struct ConsumerGroupDescribe;

impl Api for ConsumerGroupDescribe {
    type Request = ConsumerGroupDescribeRequest;

    /// The versions Weir serves: versions newer than Apache Kafka 4.1 speaks are left out: clients that
    /// know them were tested against nothing.
    fn versions() -> (i16, i16) {
        super::capped(ApiKey::ConsumerGroupDescribe, 1)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use consumer_group_describe_response::DescribedGroup;
        ResponseKind::ConsumerGroupDescribe(
            ConsumerGroupDescribeResponse::default().with_groups(
                request
                    .group_ids
                    .iter()
                    .map(|id| {
                        DescribedGroup::default()
                            .with_group_id(id.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        )
    }

    /// What the request must be authorized for, and the parts of it refused. The response
    /// tells the principal what it may do: `put_back` always gets its checks.
    fn authorize(_broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        let (ok, no) = split(std::mem::take(&mut r.group_ids), |g| {
            check.group(Operation::Describe, g)
        });
        let any = !no.is_empty();
        r.group_ids = ok;
        partly(
            RequestKind::ConsumerGroupDescribe(r),
            RequestKind::ConsumerGroupDescribe(
                ConsumerGroupDescribeRequest::default().with_group_ids(no),
            ),
            any,
            E::GroupAuthorizationFailed,
            v,
        )
        .telling(check)
    }

    /// Puts back what `authorize` took out (`denied`: the error response of those parts), and
    /// leaves out what the principal may not see (`filter`).
    fn put_back(
        _broker: &Broker,
        response: ResponseKind,
        denied: Option<ResponseKind>,
        filter: Option<&Check>,
    ) -> ResponseKind {
        let ResponseKind::ConsumerGroupDescribe(mut r) = response else {
            return response;
        };
        if let Some(ResponseKind::ConsumerGroupDescribe(d)) = denied {
            r.groups.extend(d.groups);
        }
        if let Some(check) = filter {
            let r = &mut r;
            // A group with topics the principal may not describe is described by its
            // error alone (KAFKA-18813).
            for g in &mut r.groups {
                let hidden = g.members.iter().any(|m| {
                    m.subscribed_topic_names
                        .iter()
                        .chain(m.assignment.topic_partitions.iter().map(|t| &t.topic_name))
                        .chain(
                            m.target_assignment
                                .topic_partitions
                                .iter()
                                .map(|t| &t.topic_name),
                        )
                        .any(|t| !t.is_empty() && !check.topic(Operation::Describe, t))
                });
                if g.error_code == 0 && hidden {
                    *g = consumer_group_describe_response::DescribedGroup::default()
                        .with_group_id(g.group_id.clone())
                        .with_error_code(E::TopicAuthorizationFailed.code())
                        .with_authorized_operations(i32::MIN);
                }
            }
            for g in &mut r.groups {
                if g.authorized_operations != i32::MIN && g.error_code == 0 {
                    g.authorized_operations = check.group_operations(&g.group_id);
                }
            }
        }
        ResponseKind::ConsumerGroupDescribe(r)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        let topics = broker.group_catalog();
        now(ResponseKind::ConsumerGroupDescribe(
            broker
                .groups
                .consumer_group_describe(request, v, &topics)
                .await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "known and unknown",
            R::ConsumerGroupDescribe(
                ConsumerGroupDescribeRequest::default()
                    .with_group_ids(vec![GroupId(s("cg-versions")), GroupId(s("nope"))])
                    .with_include_authorized_operations(true),
            ),
        )]
    }
}
