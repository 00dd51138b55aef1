//! OffsetFetch: the versions Weir serves, its error response and its handler.

use std::sync::Arc;

use kafka_protocol::messages::*;

use crate::apis::now;
use crate::apis::{Api, Cx};
use crate::{Broker, Reply};

/// OffsetFetch.
pub(crate) struct OffsetFetch;

impl Api for OffsetFetch {
    type Request = OffsetFetchRequest;

    /// The versions Weir serves: v10 names topics by id, which franz-go encodes in a way that does not
    /// decode here; Kafka 4.1 speaks up to 9.
    fn versions() -> (i16, i16) {
        super::capped(ApiKey::OffsetFetch, 9)
    }

    /// The response to `request` that carries `code` wherever it has an error code.
    fn error_response(request: &Self::Request, version: i16, code: i16) -> ResponseKind {
        use offset_fetch_response::{
            OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponseTopic,
        };
        if version >= 8 {
            ResponseKind::OffsetFetch(
                OffsetFetchResponse::default().with_groups(
                    request
                        .groups
                        .iter()
                        .map(|g| {
                            OffsetFetchResponseGroup::default()
                                .with_group_id(g.group_id.clone())
                                .with_error_code(code)
                        })
                        .collect(),
                ),
            )
        } else {
            let response = OffsetFetchResponse::default().with_topics(
                request
                    .topics
                    .iter()
                    .flatten()
                    .map(|t| {
                        OffsetFetchResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partition_indexes
                                    .iter()
                                    .map(|&p| {
                                        OffsetFetchResponsePartition::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(-1)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
            ResponseKind::OffsetFetch(if version >= 2 {
                response.with_error_code(code)
            } else {
                response
            })
        }
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::OffsetFetch(
            broker.offset_fetch(request, v).await,
        ))
    }
}
