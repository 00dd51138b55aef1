//! InitProducerId: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{refuse, serve, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::{Operation, ResourceType};

/// InitProducerId.
pub(crate) struct InitProducerId;

impl Api for InitProducerId {
    type Request = InitProducerIdRequest;

    /// The versions Weir serves: versions newer than Apache Kafka 4.1 speaks are left out: clients that
    /// know them were tested against nothing.
    fn versions() -> (i16, i16) {
        super::capped(ApiKey::InitProducerId, 5)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::InitProducerId(
            InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        let allowed = match &r.transactional_id {
            Some(id) => check.txn(Operation::Write, id),
            // Idempotence: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic
            // (KIP-679).
            None => {
                check.cluster(Operation::IdempotentWrite)
                    || check.authorizer.authorize_any(
                        &check.principal,
                        &check.host,
                        Operation::Write,
                        ResourceType::Topic,
                    )
            }
        };
        match (allowed, r.transactional_id.is_some()) {
            (true, _) => serve(RequestKind::InitProducerId(r)),
            (false, true) => refuse(
                &RequestKind::InitProducerId(r),
                E::TransactionalIdAuthorizationFailed,
                v,
            ),
            (false, false) => refuse(
                &RequestKind::InitProducerId(r),
                E::ClusterAuthorizationFailed,
                v,
            ),
        }
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::InitProducerId(
            init_producer_id(broker, request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let mut out = vec![(
            "idempotent",
            R::InitProducerId(InitProducerIdRequest::default().with_transaction_timeout_ms(-1)),
        )];
        out.push((
            "transactional",
            R::InitProducerId(
                InitProducerIdRequest::default()
                    .with_transactional_id(Some(TransactionalId(s("tx"))))
                    .with_transaction_timeout_ms(60_000),
            ),
        ));
        if v >= 3 {
            out.push((
                "epoch bump",
                R::InitProducerId(
                    InitProducerIdRequest::default()
                        .with_transaction_timeout_ms(-1)
                        .with_producer_id(ProducerId(7))
                        .with_producer_epoch(2),
                ),
            ));
        }
        out
    }
}

async fn init_producer_id(
    broker: &Broker,
    r: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let fail = |e: ResponseError| {
        InitProducerIdResponse::default()
            .with_error_code(e.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    if let Some(id) = r.transactional_id.as_ref().filter(|t| !t.is_empty()) {
        let expected = (r.producer_id.0 >= 0 && r.producer_epoch >= 0)
            .then_some((r.producer_id.0, r.producer_epoch));
        return match broker
            .txns
            .init_producer_id(id, r.transaction_timeout_ms, expected)
            .await
        {
            Ok((pid, epoch)) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch),
            Err(ResponseError::ProducerFenced) if version < 4 => {
                fail(ResponseError::InvalidProducerEpoch)
            }
            Err(e) => fail(e),
        };
    }
    // An idempotent producer that asks with its id and epoch gets the epoch bumped (KIP-360),
    // which resets its sequences; a new producer gets a new id.
    if r.producer_id.0 >= 0 && r.producer_epoch >= 0 && r.producer_epoch < i16::MAX - 1 {
        return InitProducerIdResponse::default()
            .with_producer_id(r.producer_id)
            .with_producer_epoch(r.producer_epoch + 1);
    }
    match broker.txns.ids.next().await {
        Ok(id) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(e) => {
            tracing::warn!(error = %e, "allocating a producer id failed");
            fail(ResponseError::CoordinatorNotAvailable)
        }
    }
}
