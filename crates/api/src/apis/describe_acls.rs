//! DescribeAcls: the versions Weir serves, its error response, what it must be authorized for, and its
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

/// DescribeAcls.
pub(crate) struct DescribeAcls;

impl Api for DescribeAcls {
    type Request = DescribeAclsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DescribeAcls)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::DescribeAcls(DescribeAclsResponse::default().with_error_code(code))
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        cluster(check, Operation::Describe, RequestKind::DescribeAcls(r), v)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::DescribeAcls(
            broker.describe_acls(request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "every binding",
            R::DescribeAcls(
                DescribeAclsRequest::default()
                    .with_resource_type_filter(1)
                    .with_pattern_type_filter(if v >= 1 { 1 } else { 3 })
                    .with_operation(1)
                    .with_permission_type(1),
            ),
        )]
    }
}
