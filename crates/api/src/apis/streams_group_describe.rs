//! StreamsGroupDescribe (KIP-1071): the versions Weir serves, its error response, what it must
//! be authorized for, and its handler. The group logic is `weir_group::streams`.

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

/// StreamsGroupDescribe.
pub(crate) struct StreamsGroupDescribe;

impl Api for StreamsGroupDescribe {
    type Request = StreamsGroupDescribeRequest;

    /// v0 and v1 (Kafka 4.4: the topology description and the assignor's name).
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::StreamsGroupDescribe)
    }

    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use streams_group_describe_response::DescribedGroup;
        ResponseKind::StreamsGroupDescribe(
            StreamsGroupDescribeResponse::default().with_groups(
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

    /// DESCRIBE on each group; the others come back GROUP_AUTHORIZATION_FAILED.
    fn authorize(_broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        let (ok, no) = split(std::mem::take(&mut r.group_ids), |g| {
            check.group(Operation::Describe, g)
        });
        let any = !no.is_empty();
        r.group_ids = ok;
        partly(
            RequestKind::StreamsGroupDescribe(r),
            RequestKind::StreamsGroupDescribe(
                StreamsGroupDescribeRequest::default().with_group_ids(no),
            ),
            any,
            E::GroupAuthorizationFailed,
            v,
        )
        .telling(check)
    }

    fn put_back(
        _broker: &Broker,
        response: ResponseKind,
        denied: Option<ResponseKind>,
        filter: Option<&Check>,
    ) -> ResponseKind {
        let ResponseKind::StreamsGroupDescribe(mut r) = response else {
            return response;
        };
        if let Some(ResponseKind::StreamsGroupDescribe(d)) = denied {
            r.groups.extend(d.groups);
        }
        if let Some(check) = filter {
            for g in &mut r.groups {
                if g.error_code == 0 && g.authorized_operations != i32::MIN {
                    g.authorized_operations = check.group_operations(&g.group_id);
                }
            }
        }
        ResponseKind::StreamsGroupDescribe(r)
    }

    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::StreamsGroupDescribe(
            broker.groups.streams_group_describe(request, cx.v).await,
        ))
    }

    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use RequestKind as R;
        vec![(
            "known and unknown",
            R::StreamsGroupDescribe(
                StreamsGroupDescribeRequest::default()
                    .with_group_ids(vec![GroupId(s("stg-versions")), GroupId(s("nope"))])
                    .with_include_authorized_operations(true),
            ),
        )]
    }
}
