//! DescribeClientQuotas: the versions Weir serves, its error response, what it must be authorized for, and its
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

/// DescribeClientQuotas.
pub(crate) struct DescribeClientQuotas;

impl Api for DescribeClientQuotas {
    type Request = DescribeClientQuotasRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DescribeClientQuotas)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::DescribeClientQuotas(
            DescribeClientQuotasResponse::default().with_error_code(code),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        cluster(
            check,
            Operation::DescribeConfigs,
            RequestKind::DescribeClientQuotas(r),
            v,
        )
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::DescribeClientQuotas(
            broker.describe_client_quotas(request).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "every user",
            R::DescribeClientQuotas(DescribeClientQuotasRequest::default().with_components(vec![
                describe_client_quotas_request::ComponentData::default()
                    .with_entity_type(s("user"))
                    .with_match_type(2),
            ])),
        )]
    }
}
