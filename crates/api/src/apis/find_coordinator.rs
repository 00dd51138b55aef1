//! FindCoordinator: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{partly, refuse, serve, split, Check, Gate};
use crate::cluster::txn_key;
use crate::{endpoint, str, Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// FindCoordinator.
pub(crate) struct FindCoordinator;

impl Api for FindCoordinator {
    type Request = FindCoordinatorRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::FindCoordinator)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, version: i16, code: i16) -> ResponseKind {
        use find_coordinator_response::Coordinator;
        ResponseKind::FindCoordinator(if version >= 4 {
            FindCoordinatorResponse::default().with_coordinators(
                request
                    .coordinator_keys
                    .iter()
                    .map(|k| {
                        Coordinator::default()
                            .with_key(k.clone())
                            .with_node_id(BrokerId(-1))
                            .with_port(-1)
                            .with_error_code(code)
                    })
                    .collect(),
            )
        } else {
            FindCoordinatorResponse::default()
                .with_error_code(code)
                .with_node_id(BrokerId(-1))
                .with_port(-1)
        })
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        let allowed = |key: &str| match r.key_type {
            1 => check.txn(Operation::Describe, key),
            _ => check.group(Operation::Describe, key),
        };
        let error = if r.key_type == 1 {
            E::TransactionalIdAuthorizationFailed
        } else {
            E::GroupAuthorizationFailed
        };
        if v < 4 {
            return if allowed(&r.key) {
                serve(RequestKind::FindCoordinator(r))
            } else {
                refuse(&RequestKind::FindCoordinator(r), error, v)
            };
        }
        let (ok, no) = split(std::mem::take(&mut r.coordinator_keys), |k| allowed(k));
        let any = !no.is_empty();
        let denied = FindCoordinatorRequest::default()
            .with_key_type(r.key_type)
            .with_coordinator_keys(no);
        r.coordinator_keys = ok;
        partly(
            RequestKind::FindCoordinator(r),
            RequestKind::FindCoordinator(denied),
            any,
            error,
            v,
        )
    }

    // What `authorize` took out comes back in the response's `coordinators`.
    crate::authz::joins_denied!(FindCoordinator.coordinators);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, listener, .. } = *cx;
        now(ResponseKind::FindCoordinator(find_coordinator(
            broker, request, v, listener,
        )))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, GROUP};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let r = |key_type: i8| {
            let r = FindCoordinatorRequest::default();
            let r = if v >= 1 { r.with_key_type(key_type) } else { r };
            if v >= 4 {
                r.with_coordinator_keys(vec![s(GROUP), s("other")])
            } else {
                r.with_key(s(GROUP))
            }
        };
        let mut out = vec![("group", R::FindCoordinator(r(0)))];
        if v >= 1 {
            out.push(("transaction", R::FindCoordinator(r(1))));
        }
        out
    }
}

fn find_coordinator(
    broker: &Broker,
    r: FindCoordinatorRequest,
    version: i16,
    listener: &str,
) -> FindCoordinatorResponse {
    // Each group and each transactional id has one coordinator among the serving brokers
    // (rendezvous hashing over the cluster's membership, so every broker gives the same
    // answer).
    let view = broker.cluster.view();
    let answer = |key: kafka_protocol::protocol::StrBytes| {
        let found = match r.key_type {
            0 => view.coordinator(key.as_str()).ok_or((
                ResponseError::CoordinatorNotAvailable,
                "no live broker to coordinate the group",
            )),
            1 => view.coordinator(&txn_key(key.as_str())).ok_or((
                ResponseError::CoordinatorNotAvailable,
                "no live broker to coordinate the transactional id",
            )),
            _ => Err((
                ResponseError::InvalidRequest,
                "unknown coordinator key type",
            )),
        };
        let c = Coordinator::default().with_key(key);
        match found {
            Ok(b) => {
                let (host, port) = endpoint(b, listener).unwrap_or((&b.host, b.port));
                c.with_node_id(BrokerId(b.node_id))
                    .with_host(str(host))
                    .with_port(port)
            }
            Err((code, msg)) => c
                .with_node_id(BrokerId(-1))
                .with_host(str(""))
                .with_port(-1)
                .with_error_code(code.code())
                .with_error_message(Some(str(msg))),
        }
    };
    if version >= 4 {
        FindCoordinatorResponse::default()
            .with_coordinators(r.coordinator_keys.into_iter().map(answer).collect())
    } else {
        let c = answer(r.key);
        FindCoordinatorResponse::default()
            .with_error_code(c.error_code)
            .with_error_message(c.error_message)
            .with_node_id(c.node_id)
            .with_host(c.host)
            .with_port(c.port)
    }
}
