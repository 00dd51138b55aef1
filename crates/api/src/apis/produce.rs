//! Produce: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::{Api, Cx};
use crate::authz::{refuse, sift, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

/// Produce.
pub(crate) struct Produce;

impl Api for Produce {
    type Request = ProduceRequest;

    /// The versions Weir serves: all that `kafka-protocol` knows.
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::Produce)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        use produce_response::{PartitionProduceResponse, TopicProduceResponse};
        ResponseKind::Produce(
            ProduceResponse::default().with_responses(
                request
                    .topic_data
                    .iter()
                    .map(|t| {
                        TopicProduceResponse::default()
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                            .with_partition_responses(
                                t.partition_data
                                    .iter()
                                    .map(|p| {
                                        PartitionProduceResponse::default()
                                            .with_index(p.index)
                                            .with_error_code(code)
                                            .with_base_offset(-1)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        )
    }

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        if let Some(id) = &r.transactional_id {
            if !check.txn(Operation::Write, id) {
                return refuse(
                    &RequestKind::Produce(r),
                    E::TransactionalIdAuthorizationFailed,
                    v,
                );
            }
        }
        sift!(
            v,
            Produce,
            ProduceRequest,
            r.topic_data,
            |t| { check.topic(Operation::Write, &broker.topic_name(&t.name, &t.topic_id)) },
            E::TopicAuthorizationFailed
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
        let ResponseKind::Produce(mut r) = response else {
            return response;
        };
        if let Some(ResponseKind::Produce(d)) = denied {
            r.responses.extend(d.responses);
        }
        ResponseKind::Produce(r)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx {
            v, zone, listener, ..
        } = *cx;
        broker.produce(request, v, zone, listener).await
    }
}
