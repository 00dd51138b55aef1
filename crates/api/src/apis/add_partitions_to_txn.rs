//! AddPartitionsToTxn: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
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

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, topic, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        let topics = vec![
            add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(topic(TOPIC))
                .with_partitions(vec![0, 1]),
            add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(topic(MISSING))
                .with_partitions(vec![0]),
        ];
        let r = if v <= 3 {
            AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(TransactionalId(s("tx")))
                .with_v3_and_below_producer_id(ProducerId(7))
                .with_v3_and_below_producer_epoch(0)
                .with_v3_and_below_topics(topics)
        } else {
            AddPartitionsToTxnRequest::default().with_transactions(vec![
                add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                    .with_transactional_id(TransactionalId(s("tx")))
                    .with_producer_id(ProducerId(7))
                    .with_verify_only(true)
                    .with_topics(topics),
            ])
        };
        vec![(
            "unknown producer, a missing topic",
            R::AddPartitionsToTxn(r),
        )]
    }
}
