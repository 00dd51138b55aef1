//! DescribeClientQuotas: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

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

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::DescribeClientQuotas(
            broker.describe_client_quotas(request).await,
        ))
    }
}
