//! AddOffsetsToTxn: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use crate::txn::{code, fenced_for};
use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{refuse, serve, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// AddOffsetsToTxn.
pub(crate) struct AddOffsetsToTxn;

impl Api for AddOffsetsToTxn {
    type Request = AddOffsetsToTxnRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::AddOffsetsToTxn)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::AddOffsetsToTxn(AddOffsetsToTxnResponse::default().with_error_code(code))
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        if !check.txn(Operation::Write, &r.transactional_id) {
            refuse(
                &RequestKind::AddOffsetsToTxn(r),
                E::TransactionalIdAuthorizationFailed,
                v,
            )
        } else if !check.group(Operation::Read, &r.group_id) {
            refuse(
                &RequestKind::AddOffsetsToTxn(r),
                E::GroupAuthorizationFailed,
                v,
            )
        } else {
            serve(RequestKind::AddOffsetsToTxn(r))
        }
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::AddOffsetsToTxn(
            add_offsets_to_txn(broker, request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, GROUP};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "unknown producer",
            R::AddOffsetsToTxn(
                AddOffsetsToTxnRequest::default()
                    .with_transactional_id(TransactionalId(s("tx")))
                    .with_producer_id(ProducerId(7))
                    .with_group_id(GroupId(s(GROUP))),
            ),
        )]
    }
}

async fn add_offsets_to_txn(
    broker: &Broker,
    r: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let result = broker
        .txns
        .add_offsets(
            &r.transactional_id,
            r.producer_id.0,
            r.producer_epoch,
            &r.group_id,
        )
        .await
        .map_err(|e| fenced_for(e, version, 2));
    AddOffsetsToTxnResponse::default().with_error_code(code(result))
}
