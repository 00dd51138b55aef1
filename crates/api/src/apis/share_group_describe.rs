//! ShareGroupDescribe (KIP-932): the versions Weir serves, its error response, what it must be
//! authorized for, and its handler.

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

/// ShareGroupDescribe.
pub(crate) struct ShareGroupDescribe;

impl Api for ShareGroupDescribe {
    type Request = ShareGroupDescribeRequest;

    /// Version 1, as Kafka 4.4 serves.
    fn versions() -> (i16, i16) {
        (1, 1)
    }

    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use share_group_describe_response::DescribedGroup;
        ResponseKind::ShareGroupDescribe(
            ShareGroupDescribeResponse::default().with_groups(
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
            RequestKind::ShareGroupDescribe(r),
            RequestKind::ShareGroupDescribe(
                ShareGroupDescribeRequest::default().with_group_ids(no),
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
        let ResponseKind::ShareGroupDescribe(mut r) = response else {
            return response;
        };
        if let Some(ResponseKind::ShareGroupDescribe(d)) = denied {
            r.groups.extend(d.groups);
        }
        if let Some(check) = filter {
            for g in &mut r.groups {
                if g.error_code == 0 && g.authorized_operations != i32::MIN {
                    g.authorized_operations = check.group_operations(&g.group_id);
                }
            }
        }
        ResponseKind::ShareGroupDescribe(r)
    }

    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        let topics = broker.group_catalog();
        now(ResponseKind::ShareGroupDescribe(
            broker.groups.share_group_describe(request, &topics).await,
        ))
    }

    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use RequestKind as R;
        vec![(
            "known and unknown",
            R::ShareGroupDescribe(
                ShareGroupDescribeRequest::default()
                    .with_group_ids(vec![GroupId(s("sg-versions")), GroupId(s("nope"))])
                    .with_include_authorized_operations(true),
            ),
        )]
    }
}
