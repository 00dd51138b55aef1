//! AlterClientQuotas: the versions Weir serves, its error response, what it must be authorized for, and its
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

/// AlterClientQuotas.
pub(crate) struct AlterClientQuotas;

impl Api for AlterClientQuotas {
    type Request = AlterClientQuotasRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::AlterClientQuotas)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use alter_client_quotas_response::{EntityData, EntryData};
        ResponseKind::AlterClientQuotas(
            AlterClientQuotasResponse::default().with_entries(
                request
                    .entries
                    .iter()
                    .map(|e| {
                        EntryData::default().with_error_code(code).with_entity(
                            e.entity
                                .iter()
                                .map(|c| {
                                    EntityData::default()
                                        .with_entity_type(c.entity_type.clone())
                                        .with_entity_name(c.entity_name.clone())
                                })
                                .collect(),
                        )
                    })
                    .collect(),
            ),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        cluster(
            check,
            Operation::AlterConfigs,
            RequestKind::AlterClientQuotas(r),
            v,
        )
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::AlterClientQuotas(
            broker.alter_client_quotas(request).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "a quota set and a bad key",
            R::AlterClientQuotas(AlterClientQuotasRequest::default().with_entries(vec![
                alter_client_quotas_request::EntryData::default()
                    .with_entity(vec![alter_client_quotas_request::EntityData::default()
                        .with_entity_type(s("user"))
                        .with_entity_name(Some(s("alice")))])
                    .with_ops(vec![alter_client_quotas_request::OpData::default()
                        .with_key(s("producer_byte_rate"))
                        .with_value(1048576.0)]),
                alter_client_quotas_request::EntryData::default()
                    .with_entity(vec![alter_client_quotas_request::EntityData::default()
                        .with_entity_type(s("client-id"))
                        .with_entity_name(None)])
                    .with_ops(vec![alter_client_quotas_request::OpData::default()
                        .with_key(s("no_such_key"))
                        .with_value(1.0)]),
            ])),
        )]
    }
}
