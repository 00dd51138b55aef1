//! DescribeClientQuotas: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, Check, Gate};
use crate::quotas::decode;
use crate::{str, Broker, Reply};
use weir_auth::acl::Operation;
use weir_meta::Quotas;

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
            describe(broker, request).await,
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

/// The stored quotas whose entities match the request's components.
async fn describe(broker: &Broker, r: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse {
    use describe_client_quotas_response::{EntityData, EntryData, ValueData};
    let stored = match Quotas::client_quotas(&*broker.meta).await {
        Ok(q) => q,
        Err(e) => {
            tracing::warn!(error = %e, "reading client quotas");
            return DescribeClientQuotasResponse::default()
                .with_error_code(kafka_protocol::ResponseError::UnknownServerError.code())
                .with_error_message(Some(str("the metadata store is unavailable")));
        }
    };
    for c in &r.components {
        if c.match_type == 0 && c._match.is_none() || !(0..=2).contains(&c.match_type) {
            return DescribeClientQuotasResponse::default()
                .with_error_code(kafka_protocol::ResponseError::InvalidRequest.code())
                .with_error_message(Some(str("Invalid match type or missing match")));
        }
    }
    let mut by_entity: std::collections::BTreeMap<String, Vec<ValueData>> = Default::default();
    for q in stored {
        by_entity.entry(q.entity).or_default().push(
            ValueData::default()
                .with_key(str(&q.key))
                .with_value(q.value),
        );
    }
    let entries = by_entity
        .into_iter()
        .filter_map(|(entity, values)| {
            let parts = decode(&entity);
            let matches = r.components.iter().all(|c| {
                parts.iter().any(|(t, n)| {
                    t == c.entity_type.as_str()
                        && match c.match_type {
                            0 => n.as_deref() == c._match.as_deref(),
                            1 => n.is_none(),
                            _ => true,
                        }
                })
            });
            let strict_ok = !r.strict
                || parts
                    .iter()
                    .all(|(t, _)| r.components.iter().any(|c| c.entity_type.as_str() == t));
            (matches && strict_ok).then(|| {
                EntryData::default()
                    .with_entity(
                        parts
                            .into_iter()
                            .map(|(t, n)| {
                                EntityData::default()
                                    .with_entity_type(str(&t))
                                    .with_entity_name(n.as_deref().map(str))
                            })
                            .collect(),
                    )
                    .with_values(values)
            })
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}
