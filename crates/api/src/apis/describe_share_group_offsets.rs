//! DescribeShareGroupOffsets (KIP-932): the versions Weir serves, its error response, what it
//! must be authorized for, and its handler: each share-partition's start offset, from the
//! metadata store (-1 for a partition the group never read).

use std::sync::Arc;

use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup as Group,
    DescribeShareGroupOffsetsResponsePartition as Partition,
    DescribeShareGroupOffsetsResponseTopic as Topic,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::share_group_offsets::share_group;
use crate::apis::{Api, Cx};
use crate::authz::{partly, split, Check, Gate};
use crate::{str, Broker, Reply};

/// DescribeShareGroupOffsets.
pub(crate) struct DescribeShareGroupOffsets;

impl Api for DescribeShareGroupOffsets {
    type Request = DescribeShareGroupOffsetsRequest;

    /// Versions 0-1, as Kafka 4.4 serves (1: each share-partition's lag, KIP-1226).
    fn versions() -> (i16, i16) {
        (0, 1)
    }

    fn error_response(request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::DescribeShareGroupOffsets(
            DescribeShareGroupOffsetsResponse::default().with_groups(
                request
                    .groups
                    .iter()
                    .map(|g| {
                        Group::default()
                            .with_group_id(g.group_id.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        )
    }

    /// DESCRIBE on each group.
    fn authorize(_broker: &Broker, check: &Check, mut r: Self::Request, v: i16) -> Gate {
        let (ok, no) = split(std::mem::take(&mut r.groups), |g| {
            check.group(Operation::Describe, &g.group_id)
        });
        let any = !no.is_empty();
        r.groups = ok;
        partly(
            RequestKind::DescribeShareGroupOffsets(r),
            RequestKind::DescribeShareGroupOffsets(
                DescribeShareGroupOffsetsRequest::default().with_groups(no),
            ),
            any,
            E::GroupAuthorizationFailed,
            v,
        )
    }

    fn put_back(
        _broker: &Broker,
        response: ResponseKind,
        denied: Option<ResponseKind>,
        _filter: Option<&Check>,
    ) -> ResponseKind {
        let ResponseKind::DescribeShareGroupOffsets(mut r) = response else {
            return response;
        };
        if let Some(ResponseKind::DescribeShareGroupOffsets(d)) = denied {
            r.groups.extend(d.groups);
        }
        ResponseKind::DescribeShareGroupOffsets(r)
    }

    async fn handle(broker: &Arc<Broker>, _cx: &Cx<'_>, r: Self::Request) -> Reply {
        let mut groups = Vec::with_capacity(r.groups.len());
        for g in r.groups {
            groups.push(describe(broker, g).await);
        }
        now(ResponseKind::DescribeShareGroupOffsets(
            DescribeShareGroupOffsetsResponse::default().with_groups(groups),
        ))
    }

    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, topic, TOPIC};
        use describe_share_group_offsets_request::*;
        use RequestKind as R;
        vec![(
            "all and named",
            R::DescribeShareGroupOffsets(DescribeShareGroupOffsetsRequest::default().with_groups(
                vec![
                    DescribeShareGroupOffsetsRequestGroup::default()
                        .with_group_id(GroupId(s("sg-versions"))),
                    DescribeShareGroupOffsetsRequestGroup::default()
                        .with_group_id(GroupId(s("nope")))
                        .with_topics(Some(vec![DescribeShareGroupOffsetsRequestTopic::default()
                            .with_topic_name(topic(TOPIC))
                            .with_partitions(vec![0])])),
                ],
            )),
        )]
    }
}

async fn describe(
    broker: &Broker,
    g: describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup,
) -> Group {
    let out = Group::default().with_group_id(g.group_id.clone());
    if let Err((code, message)) = share_group(broker, &g.group_id, false).await {
        return out
            .with_error_code(code)
            .with_error_message((!message.is_empty()).then(|| str(&message)));
    }
    let states = match broker.meta.share_states(&g.group_id).await {
        Ok(states) => states,
        Err(e) => {
            tracing::warn!(group = %g.group_id.as_str(), error = %e, "reading share states failed");
            return out.with_error_code(E::CoordinatorNotAvailable.code());
        }
    };
    let start = |topic: &str, p: i32| {
        states
            .iter()
            .find(|(t, i, _)| t == topic && *i == p)
            .map_or(-1, |(_, _, s)| s.start_offset)
    };
    // Lag (v1), as Kafka computes it: the partition's end, less the start offset, less the
    // records above it already acknowledged or archived; -1 where the share-partition has no
    // state or the end is not known here.
    let lag = |topic: &str, p: i32| -> i64 {
        let Some((_, _, s)) = states.iter().find(|(t, i, _)| t == topic && *i == p) else {
            return -1;
        };
        let end = match broker.topics.lookup(topic, p) {
            weir_partition::Lookup::Local(part) => part.offsets().1,
            _ => return -1,
        };
        let done: i64 = s
            .batches
            .iter()
            .filter(|b| b.state != weir_meta::DeliveryState::Available)
            .map(|b| b.last_offset - b.first_offset + 1)
            .sum();
        (end - s.start_offset - done).max(0)
    };
    // Null topics: every share-partition the group has a state of.
    let wanted: Vec<(String, Vec<i32>)> = match g.topics {
        Some(ts) => ts
            .into_iter()
            .map(|t| (t.topic_name.to_string(), t.partitions))
            .collect(),
        None => {
            let mut by_topic: Vec<(String, Vec<i32>)> = Vec::new();
            for (t, p, _) in &states {
                match by_topic.last_mut() {
                    Some((name, ps)) if name == t => ps.push(*p),
                    _ => by_topic.push((t.clone(), vec![*p])),
                }
            }
            by_topic
        }
    };
    out.with_topics(
        wanted
            .into_iter()
            .map(|(name, partitions)| {
                let topic = broker.topics.get(&name);
                let id = topic
                    .as_ref()
                    .map_or(uuid::Uuid::nil(), |t| uuid::Uuid::from_bytes(t.id));
                Topic::default()
                    .with_topic_name(TopicName(str(&name)))
                    .with_topic_id(id)
                    .with_partitions(
                        partitions
                            .into_iter()
                            .map(|p| {
                                let pd = Partition::default()
                                    .with_partition_index(p)
                                    .with_leader_epoch(-1);
                                if topic.is_none() {
                                    pd.with_start_offset(-1)
                                        .with_lag(-1)
                                        .with_error_code(E::UnknownTopicOrPartition.code())
                                } else {
                                    pd.with_start_offset(start(&name, p))
                                        .with_lag(lag(&name, p))
                                }
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}
