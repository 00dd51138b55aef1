//! AddPartitionsToTxn: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::authz::{cluster, partly, refuse, split, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// AddPartitionsToTxn.
pub(crate) struct AddPartitionsToTxn;

impl Api for AddPartitionsToTxn {
    type Request = AddPartitionsToTxnRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::AddPartitionsToTxn)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, version: i16, code: i16) -> ResponseKind {
        let topics = |ts| crate::txn::add_partitions_results(ts, &|_, _| code);
        ResponseKind::AddPartitionsToTxn(if version <= 3 {
            AddPartitionsToTxnResponse::default()
                .with_results_by_topic_v3_and_below(topics(&request.v3_and_below_topics))
        } else {
            AddPartitionsToTxnResponse::default().with_error_code(code)
        })
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        if v >= 4 {
            // Batched, from brokers verifying transactions.
            return cluster(
                check,
                Operation::ClusterAction,
                RequestKind::AddPartitionsToTxn(r),
                v,
            );
        }
        if !check.txn(Operation::Write, &r.v3_and_below_transactional_id) {
            return refuse(
                &RequestKind::AddPartitionsToTxn(r),
                E::TransactionalIdAuthorizationFailed,
                v,
            );
        }
        let (ok, no) = split(std::mem::take(&mut r.v3_and_below_topics), |t| {
            check.topic(Operation::Write, &t.name)
        });
        let any = !no.is_empty();
        r.v3_and_below_topics = ok;
        partly(
            RequestKind::AddPartitionsToTxn(r),
            RequestKind::AddPartitionsToTxn(
                AddPartitionsToTxnRequest::default().with_v3_and_below_topics(no),
            ),
            any,
            E::TopicAuthorizationFailed,
            v,
        )
    }

    /// Puts back what `authorize` took out (`denied`: the error response of those parts), and
    /// leaves out what the principal may not see (`filter`).
    fn put_back(
        _broker: &Broker,
        response: ResponseKind,
        denied: Option<ResponseKind>,
        _filter: Option<&Check>,
    ) -> ResponseKind {
        let ResponseKind::AddPartitionsToTxn(mut r) = response else {
            return response;
        };
        if let Some(ResponseKind::AddPartitionsToTxn(d)) = denied {
            r.results_by_topic_v3_and_below
                .extend(d.results_by_topic_v3_and_below);
        }
        ResponseKind::AddPartitionsToTxn(r)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::AddPartitionsToTxn(
            broker.add_partitions_to_txn(request, v).await,
        ))
    }
}
