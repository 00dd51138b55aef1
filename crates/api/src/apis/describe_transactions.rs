//! DescribeTransactions: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;
use std::collections::BTreeMap;
use weir_meta::TxnState;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{partly, split, Check, Gate};
use crate::{str, Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// DescribeTransactions.
pub(crate) struct DescribeTransactions;

impl Api for DescribeTransactions {
    type Request = DescribeTransactionsRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::DescribeTransactions)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use describe_transactions_response::TransactionState;
        ResponseKind::DescribeTransactions(
            DescribeTransactionsResponse::default().with_transaction_states(
                request
                    .transactional_ids
                    .iter()
                    .map(|id| {
                        TransactionState::default()
                            .with_transactional_id(id.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        let (ok, no) = split(std::mem::take(&mut r.transactional_ids), |t| {
            check.txn(Operation::Describe, t)
        });
        let any = !no.is_empty();
        r.transactional_ids = ok;
        partly(
            RequestKind::DescribeTransactions(r),
            RequestKind::DescribeTransactions(
                DescribeTransactionsRequest::default().with_transactional_ids(no),
            ),
            any,
            E::TransactionalIdAuthorizationFailed,
            v,
        )
    }

    // What `authorize` took out comes back in the response's `transaction_states`.
    crate::authz::joins_denied!(DescribeTransactions.transaction_states);

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, request: Self::Request) -> Reply {
        now(ResponseKind::DescribeTransactions(
            describe_transactions(broker, request).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::s;
        use kafka_protocol::messages::*;
        use RequestKind as R;
        vec![(
            "known and unknown ids",
            R::DescribeTransactions(
                DescribeTransactionsRequest::default().with_transactional_ids(vec![
                    TransactionalId(s("tx")),
                    TransactionalId(s("nope")),
                ]),
            ),
        )]
    }
}

async fn describe_transactions(
    broker: &Broker,
    r: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    use describe_transactions_response::*;
    let mut states = Vec::with_capacity(r.transactional_ids.len());
    for id in r.transactional_ids {
        let s = TransactionState::default().with_transactional_id(id.clone());
        states.push(match broker.txns.describe(&id).await {
            Ok(t) => {
                let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
                if t.state == TxnState::Ongoing || t.state.is_preparing() {
                    for (topic, p) in &t.partitions {
                        by_topic.entry(topic).or_default().push(*p);
                    }
                }
                s.with_transaction_state(str(t.state.name()))
                    .with_transaction_timeout_ms(t.timeout_ms)
                    .with_transaction_start_time_ms(t.start_ms)
                    .with_producer_id(ProducerId(t.producer_id))
                    .with_producer_epoch(t.producer_epoch)
                    .with_topics(
                        by_topic
                            .into_iter()
                            .map(|(topic, ps)| {
                                TopicData::default()
                                    .with_topic(TopicName(str(topic)))
                                    .with_partitions(ps)
                            })
                            .collect(),
                    )
            }
            Err(e) => s
                .with_error_code(e.code())
                .with_transaction_state(str(""))
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_transaction_start_time_ms(-1),
        });
    }
    DescribeTransactionsResponse::default().with_transaction_states(states)
}
