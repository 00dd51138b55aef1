//! AlterClientQuotas: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, Check, Gate};
use crate::quotas::{check_entity, encode, valid_key, Component};
use crate::{str, Broker, Reply};
use kafka_protocol::ResponseError;
use weir_auth::acl::Operation;
use weir_meta::Quotas;

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
            alter(broker, request).await,
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

/// One stored quota's change: (entity, key, new value or `None` to remove it).
type Change = (String, String, Option<f64>);

/// Checks every entry, stores the valid ones' changes (unless `validate_only`) and reads the
/// quotas again; entries are answered one by one.
async fn alter(broker: &Broker, r: AlterClientQuotasRequest) -> AlterClientQuotasResponse {
    use alter_client_quotas_response::{EntityData, EntryData};
    let mut results = Vec::with_capacity(r.entries.len());
    let mut changes = Vec::new();
    for e in &r.entries {
        let result = EntryData::default().with_entity(
            e.entity
                .iter()
                .map(|c| {
                    EntityData::default()
                        .with_entity_type(c.entity_type.clone())
                        .with_entity_name(c.entity_name.clone())
                })
                .collect(),
        );
        results.push(match changes_of(e) {
            Ok(mine) => {
                changes.extend(mine);
                result
            }
            Err(why) => result
                .with_error_code(ResponseError::InvalidRequest.code())
                .with_error_message(Some(str(&why))),
        });
    }
    if r.validate_only || changes.is_empty() {
        return AlterClientQuotasResponse::default().with_entries(results);
    }
    if let Err(e) = Quotas::alter_client_quotas(&*broker.meta, changes).await {
        tracing::warn!(error = %e, "storing client quotas");
        for res in results.iter_mut().filter(|r| r.error_code == 0) {
            res.error_code = ResponseError::UnknownServerError.code();
            res.error_message = Some(str("the metadata store is unavailable"));
        }
    } else if let Err(e) = broker.quotas.refresh(&*broker.meta).await {
        tracing::warn!(error = %e, "reading client quotas after a change");
    }
    AlterClientQuotasResponse::default().with_entries(results)
}

/// One entry's changes, or why it is invalid (an entity Kafka refuses, a key that entity does not
/// have, a value that is not positive).
fn changes_of(e: &alter_client_quotas_request::EntryData) -> Result<Vec<Change>, String> {
    let entity: Vec<Component> = e
        .entity
        .iter()
        .map(|c| {
            (
                c.entity_type.to_string(),
                c.entity_name.as_ref().map(|n| n.to_string()),
            )
        })
        .collect();
    check_entity(&entity)?;
    let mut mine = Vec::with_capacity(e.ops.len());
    for op in &e.ops {
        if !valid_key(&entity, &op.key) {
            return Err(format!(
                "Unknown quota key {} for this entity",
                op.key.as_str()
            ));
        }
        if !(op.remove || op.value.is_finite() && op.value > 0.0) {
            return Err(format!(
                "Illegal value {} for quota {}: it must be positive",
                op.value,
                op.key.as_str()
            ));
        }
        mine.push((
            encode(&entity),
            op.key.to_string(),
            (!op.remove).then_some(op.value),
        ));
    }
    Ok(mine)
}
