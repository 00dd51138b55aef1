//! StreamsGroupHeartbeat (KIP-1071): the versions Weir serves, its error response, what it must
//! be authorized for, and its handler, which also creates the internal topics (repartition
//! topics, changelogs) the group waits for. The group logic is `weir_group::streams`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::*;

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{refuse, serve, Check, Gate};
use crate::{Broker, Reply};
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;
use weir_group::streams::{status, TopicInfo};

/// StreamsGroupHeartbeat.
pub(crate) struct StreamsGroupHeartbeat;

/// How long a heartbeat waits for the internal topics it creates (a metadata store write).
const CREATE_TIMEOUT: Duration = Duration::from_secs(5);

impl Api for StreamsGroupHeartbeat {
    type Request = StreamsGroupHeartbeatRequest;

    /// v0 and v1 (Kafka 4.4: the acceptable recovery lag as a long, MISSING_CLIENT_TAGS).
    fn versions() -> (i16, i16) {
        super::valid(ApiKey::StreamsGroupHeartbeat)
    }

    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::StreamsGroupHeartbeat(
            StreamsGroupHeartbeatResponse::default()
                .with_error_code(code)
                .with_member_epoch(-1),
        )
    }

    /// READ on the group; DESCRIBE on every topic the topology names (as Kafka checks).
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        let denied_topic = r.topology.iter().flat_map(|t| &t.subtopologies).any(|s| {
            s.source_topics
                .iter()
                .chain(&s.repartition_sink_topics)
                .chain(s.repartition_source_topics.iter().map(|t| &t.name))
                .chain(s.state_changelog_topics.iter().map(|t| &t.name))
                .any(|t| !check.topic(Operation::Describe, t))
        });
        if !check.group(Operation::Read, &r.group_id) {
            refuse(
                &RequestKind::StreamsGroupHeartbeat(r),
                E::GroupAuthorizationFailed,
                v,
            )
        } else if denied_topic {
            refuse(
                &RequestKind::StreamsGroupHeartbeat(r),
                E::TopicAuthorizationFailed,
                v,
            )
        } else {
            serve(RequestKind::StreamsGroupHeartbeat(r))
        }
    }

    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        if let Some(problem) = request.topology.as_ref().and_then(topology_names_problem) {
            return now(ResponseKind::StreamsGroupHeartbeat(
                StreamsGroupHeartbeatResponse::default()
                    .with_error_code(weir_group::streams::STREAMS_INVALID_TOPOLOGY)
                    .with_error_message(Some(crate::str(&problem)))
                    .with_member_epoch(-1),
            ));
        }
        let topics = broker.group_catalog();
        let overrides = broker.shares.configs().streams(&request.group_id).await;
        let mut outcome = broker
            .groups
            .streams_group_heartbeat(
                request,
                cx.v,
                cx.client_id,
                cx.client_host,
                &topics,
                &overrides,
            )
            .await;
        if !outcome.to_create.is_empty() {
            let problems = create_internal_topics(broker, cx, &outcome.to_create).await;
            if !problems.is_empty() {
                for st in outcome.response.status.iter_mut().flatten() {
                    if st.status_code == status::MISSING_INTERNAL_TOPICS {
                        st.status_detail = crate::str(&format!("{}{}", st.status_detail, problems));
                    }
                }
            }
        }
        now(ResponseKind::StreamsGroupHeartbeat(outcome.response))
    }

    #[cfg(feature = "testing")]
    async fn samples(_e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, topic, TOPIC};
        use streams_group_heartbeat_request::{Subtopology, Topology};
        use RequestKind as R;
        let join = StreamsGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("stg-versions")))
            .with_member_id(s("member-1"))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_process_id(Some(s("process-1")))
            .with_active_tasks(Some(vec![]))
            .with_standby_tasks(Some(vec![]))
            .with_warmup_tasks(Some(vec![]))
            .with_topology(Some(Topology::default().with_subtopologies(vec![
                Subtopology::default()
                    .with_subtopology_id(s("0"))
                    .with_source_topics(vec![topic(TOPIC)]),
            ])));
        vec![
            ("join", R::StreamsGroupHeartbeat(join)),
            (
                "unknown member",
                R::StreamsGroupHeartbeat(
                    StreamsGroupHeartbeatRequest::default()
                        .with_group_id(GroupId(s("stg-versions")))
                        .with_member_id(s("nobody"))
                        .with_member_epoch(5),
                ),
            ),
            (
                "invalid",
                R::StreamsGroupHeartbeat(StreamsGroupHeartbeatRequest::default()),
            ),
        ]
    }
}

/// Kafka's check of the topic names a topology uses: none of Kafka's internal topics, and valid
/// names only (the broker would create them).
fn topology_names_problem(t: &streams_group_heartbeat_request::Topology) -> Option<String> {
    const INTERNAL: [&str; 3] = [
        "__consumer_offsets",
        "__transaction_state",
        "__share_group_state",
    ];
    let names = t.subtopologies.iter().flat_map(|s| {
        s.source_topics
            .iter()
            .chain(&s.repartition_sink_topics)
            .chain(s.repartition_source_topics.iter().map(|t| &t.name))
            .chain(s.state_changelog_topics.iter().map(|t| &t.name))
    });
    for name in names {
        if INTERNAL.contains(&name.as_str()) {
            return Some(format!(
                "Use of Kafka internal topics {} in a Kafka Streams topology is prohibited.",
                name.as_str()
            ));
        }
        if let Err((_, why)) = weir_partition::topics::validate_topic_name(name) {
            return Some(format!(
                "Topic names {} are not valid: {why}",
                name.as_str()
            ));
        }
    }
    None
}

/// Creates the internal topics a streams group waits for, as the member's principal (CREATE on
/// the cluster or on each topic), as Kafka does; the problems, as Kafka appends them to the
/// MISSING_INTERNAL_TOPICS status ("" if none). The group sees the topics at its next
/// heartbeat.
async fn create_internal_topics(broker: &Arc<Broker>, cx: &Cx<'_>, topics: &[TopicInfo]) -> String {
    let check = broker.check_for(cx.conn);
    let allowed = |name: &str| {
        check
            .as_ref()
            .is_none_or(|c| c.cluster(Operation::Create) || c.topic(Operation::Create, name))
    };
    let (ok, denied): (Vec<&TopicInfo>, Vec<&TopicInfo>) =
        topics.iter().partition(|t| allowed(&t.name));
    let mut problems = String::new();
    if !denied.is_empty() {
        let names: Vec<&str> = denied.iter().map(|t| t.name.as_str()).collect();
        problems.push_str(&format!(
            "; Unauthorized to CREATE on topics {}.",
            names.join(", ")
        ));
    }
    let mut failed = Vec::new();
    // All at once, under one bound: the heartbeat waits for the slowest.
    let creations = ok.iter().map(|t| {
        let configs: BTreeMap<String, String> = t.configs.iter().cloned().collect();
        tokio::time::timeout(
            CREATE_TIMEOUT,
            broker.topics.create(&t.name, t.partitions, configs, false),
        )
    });
    for (t, created) in ok.iter().zip(futures::future::join_all(creations).await) {
        match created {
            Ok(Ok(_)) => {
                tracing::info!(topic = %t.name, partitions = t.partitions, "streams group internal topic created");
            }
            Ok(Err((E::TopicAlreadyExists, _))) => {}
            Ok(Err((code, message))) => failed.push(format!("{} ({code:?}: {message})", t.name)),
            Err(_) => failed.push(format!("{} (timed out)", t.name)),
        }
    }
    if !failed.is_empty() {
        problems.push_str(&format!("; Creation failed: {}.", failed.join(", ")));
    }
    problems
}
