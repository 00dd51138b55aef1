//! DeleteAcls: the versions Weir serves, its error response, what it must be authorized for, and its
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

/// DeleteAcls.
pub(crate) struct DeleteAcls;

impl Api for DeleteAcls {
    type Request = DeleteAclsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DeleteAcls)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use delete_acls_response::DeleteAclsFilterResult;
        ResponseKind::DeleteAcls(
            DeleteAclsResponse::default().with_filter_results(
                request
                    .filters
                    .iter()
                    .map(|_| DeleteAclsFilterResult::default().with_error_code(code))
                    .collect(),
            ),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        cluster(check, Operation::Alter, RequestKind::DeleteAcls(r), v)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::DeleteAcls(
            broker.delete_acls(request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "a filter that matches and one that does not decode",
            R::DeleteAcls(DeleteAclsRequest::default().with_filters(vec![
                delete_acls_request::DeleteAclsFilter::default()
                    .with_resource_type_filter(2)
                    .with_resource_name_filter(Some(s("t")))
                    .with_pattern_type_filter(3)
                    .with_operation(1)
                    .with_permission_type(1),
                delete_acls_request::DeleteAclsFilter::default()
                    .with_resource_type_filter(99)
                    .with_pattern_type_filter(3)
                    .with_operation(1)
                    .with_permission_type(1),
            ])),
        )]
    }
}
