//! OffsetFetch: the versions Weir serves, its error response, what it must be authorized for, and its
//! handler.

use std::sync::Arc;

use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{partly, refuse, split, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

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

    /// What the request must be authorized for, and the parts of it refused.
    fn authorize(_broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        if v < 8 {
            if !check.group(Operation::Describe, &r.group_id) {
                return refuse(&RequestKind::OffsetFetch(r), E::GroupAuthorizationFailed, v);
            }
            let Some(topics) = r.topics.take() else {
                return Gate::Serve {
                    request: RequestKind::OffsetFetch(r),
                    denied: None,
                    filter: Some(check.clone()),
                };
            };
            let (ok, no) = split(topics, |t| check.topic(Operation::Describe, &t.name));
            let any = !no.is_empty();
            r.topics = Some(ok);
            return partly(
                RequestKind::OffsetFetch(r),
                RequestKind::OffsetFetch(OffsetFetchRequest::default().with_topics(Some(no))),
                any,
                E::TopicAuthorizationFailed,
                v,
            );
        }
        // v8+: several groups; a group the principal may not describe gets the group
        // error, and topics are checked by the filter on the way out.
        let (ok, no) = split(std::mem::take(&mut r.groups), |g| {
            check.group(Operation::Describe, &g.group_id)
        });
        let any = !no.is_empty();
        r.groups = ok;
        let mut gate = partly(
            RequestKind::OffsetFetch(r),
            RequestKind::OffsetFetch(OffsetFetchRequest::default().with_groups(no)),
            any,
            E::GroupAuthorizationFailed,
            v,
        );
        if let Gate::Serve { filter, .. } = &mut gate {
            *filter = Some(check.clone());
        }
        gate
    }

    /// Puts back what `authorize` took out (`denied`: the error response of those parts), and
    /// leaves out what the principal may not see (`filter`).
    fn put_back(
        _broker: &Broker,
        response: ResponseKind,
        denied: Option<ResponseKind>,
        filter: Option<&Check>,
    ) -> ResponseKind {
        let ResponseKind::OffsetFetch(mut r) = response else {
            return response;
        };
        if let Some(ResponseKind::OffsetFetch(d)) = denied {
            r.topics.extend(d.topics);
            r.groups.extend(d.groups);
        }
        if let Some(check) = filter {
            let r = &mut r;
            r.topics
                .retain(|t| check.topic(Operation::Describe, &t.name));
            for g in &mut r.groups {
                g.topics
                    .retain(|t| check.topic(Operation::Describe, &t.name));
            }
        }
        ResponseKind::OffsetFetch(r)
    }

    /// Serves an authorized request.
    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        let Cx { v, .. } = *cx;
        now(ResponseKind::OffsetFetch(
            offset_fetch(broker, request, v).await,
        ))
    }

    /// Representative requests at version `v`, for the every-version test.
    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, topic, GROUP, MISSING, TOPIC};
        use kafka_protocol::messages::*;
        use RequestKind as R;
        if v >= 8 {
            let g = |id: &str, topics| {
                offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(s(id)))
                    .with_topics(topics)
            };
            vec![(
                "groups",
                R::OffsetFetch(OffsetFetchRequest::default().with_groups(vec![
                    g(
                        GROUP,
                        Some(vec![
                            offset_fetch_request::OffsetFetchRequestTopics::default()
                                .with_name(topic(TOPIC))
                                .with_partition_indexes(vec![0, 1, 9]),
                            offset_fetch_request::OffsetFetchRequestTopics::default()
                                .with_name(topic(MISSING))
                                .with_partition_indexes(vec![0]),
                        ]),
                    ),
                    g("nope", None),
                ])),
            )]
        } else {
            let mut out = vec![(
                "topics",
                R::OffsetFetch(
                    OffsetFetchRequest::default()
                        .with_group_id(GroupId(s(GROUP)))
                        .with_topics(Some(vec![
                            offset_fetch_request::OffsetFetchRequestTopic::default()
                                .with_name(topic(TOPIC))
                                .with_partition_indexes(vec![0, 1, 9]),
                            offset_fetch_request::OffsetFetchRequestTopic::default()
                                .with_name(topic(MISSING))
                                .with_partition_indexes(vec![0]),
                        ])),
                ),
            )];
            if v >= 2 {
                out.push((
                    "all topics",
                    R::OffsetFetch(
                        OffsetFetchRequest::default()
                            .with_group_id(GroupId(s(GROUP)))
                            .with_topics(None),
                    ),
                ));
            }
            out
        }
    }
}

/// OffsetFetch, and with `require_stable` (v7+, read_committed consumers), partitions with
/// offsets staged by an open transaction answer UNSTABLE_OFFSET_COMMIT: the consumer asks
/// again once the transaction ended, rather than start from an offset about to change.
async fn offset_fetch(broker: &Broker, r: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
    let stable = version >= 7 && r.require_stable;
    if !stable {
        return broker.groups.offset_fetch(r, version).await;
    }
    // The staged offsets are read before the committed ones: a transaction that completes in
    // between (its markers are written after EndTxn answered) then shows as unstable, never as
    // the committed offset from before it.
    let names: Vec<String> = if version >= 8 {
        r.groups.iter().map(|g| g.group_id.to_string()).collect()
    } else {
        vec![r.group_id.to_string()]
    };
    let mut groups: Vec<(String, Vec<(String, u32)>)> = Vec::new();
    for g in names {
        let staged = match broker.meta.staged_offsets(&g).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(group = %g, error = %e, "reading staged offsets failed");
                Vec::new()
            }
        };
        groups.push((g, staged));
    }
    let mut resp = broker.groups.offset_fetch(r, version).await;
    let unstable = ResponseError::UnstableOffsetCommit.code();
    if version >= 8 {
        for (g, (_, staged)) in resp.groups.iter_mut().zip(&groups) {
            for t in g.topics.iter_mut() {
                for p in t.partitions.iter_mut() {
                    if staged.contains(&(t.name.to_string(), p.partition_index as u32)) {
                        p.error_code = unstable;
                        p.committed_offset = -1;
                    }
                }
            }
        }
    } else if let Some((_, staged)) = groups.first() {
        for t in resp.topics.iter_mut() {
            for p in t.partitions.iter_mut() {
                if staged.contains(&(t.name.to_string(), p.partition_index as u32)) {
                    p.error_code = unstable;
                    p.committed_offset = -1;
                }
            }
        }
    }
    resp
}
