//! ShareFetch (KIP-932): the versions Weir serves, its error response, what it must be
//! authorized for, and its handler: the share session step, the acknowledgements it carries,
//! then records acquired for the member from every partition of its session, waiting up to
//! `MaxWaitMs` while there are none. The share-partitions are [`crate::share`]'s.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, NodeEndpoint, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError as E;
use weir_auth::acl::Operation;
use weir_partition::Lookup;
use weir_share::partition::AckBatch;
use weir_share::session::{Part, Step};

use crate::apis::now;
#[cfg(feature = "testing")]
use crate::apis::samples::Samples;
use crate::apis::{Api, Cx};
use crate::authz::{refuse, serve, Check, Gate};
use crate::{str, Broker, Reply};

/// ShareFetch.
pub(crate) struct ShareFetch;

impl Api for ShareFetch {
    type Request = ShareFetchRequest;

    /// Versions 1-2, as Kafka 4.4 serves (2: RENEW acknowledgements, KIP-1222, and the
    /// record-limit acquire mode, KIP-1206).
    fn versions() -> (i16, i16) {
        (1, 2)
    }

    fn error_response(_request: &Self::Request, _version: i16, code: i16) -> ResponseKind {
        ResponseKind::ShareFetch(ShareFetchResponse::default().with_error_code(code))
    }

    /// READ on the group (topics are checked per partition by the handler: a session fetches
    /// partitions the request does not name).
    fn authorize(_broker: &Broker, check: &Check, r: Self::Request, v: i16) -> Gate {
        match &r.group_id {
            Some(g) if !check.group(Operation::Read, g) => {
                refuse(&RequestKind::ShareFetch(r), E::GroupAuthorizationFailed, v)
            }
            _ => serve(RequestKind::ShareFetch(r)),
        }
    }

    async fn handle(broker: &Arc<Broker>, cx: &Cx<'_>, request: Self::Request) -> Reply {
        match share_fetch(broker, cx, request).await {
            Ok(r) => r,
            Err((e, message)) => now(ResponseKind::ShareFetch(
                ShareFetchResponse::default()
                    .with_error_code(e.code())
                    .with_error_message(Some(str(&message))),
            )),
        }
    }

    #[cfg(feature = "testing")]
    async fn samples(e: &Samples<'_>, _v: i16) -> Vec<(&'static str, RequestKind)> {
        use crate::apis::samples::{s, TOPIC};
        use share_fetch_request::{FetchPartition, FetchTopic};
        use RequestKind as R;
        let _ = TOPIC;
        let id = e.topic_id;
        let open = ShareFetchRequest::default()
            .with_group_id(Some(GroupId(s("sg-versions"))))
            .with_member_id(Some(s("member-1")))
            .with_share_session_epoch(0)
            .with_max_records(10)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic_id(id)
                .with_partitions(vec![
                    FetchPartition::default().with_partition_index(0)
                ])]);
        vec![
            ("open a session", R::ShareFetch(open)),
            (
                "no session",
                R::ShareFetch(
                    ShareFetchRequest::default()
                        .with_group_id(Some(GroupId(s("sg-versions"))))
                        .with_member_id(Some(s("member-2")))
                        .with_share_session_epoch(3),
                ),
            ),
            ("no group", R::ShareFetch(ShareFetchRequest::default())),
        ]
    }
}

/// A request refused whole: its top-level error and message.
type Refusal = (E, String);

/// The group and member of a ShareFetch or ShareAcknowledge, checked as Kafka checks them.
pub(crate) fn group_and_member(
    group: Option<&GroupId>,
    member: Option<&kafka_protocol::protocol::StrBytes>,
) -> Result<(String, Arc<str>), Refusal> {
    let group = group
        .filter(|g| !g.is_empty())
        .ok_or((E::InvalidRequest, "Invalid group id in the request.".into()))?;
    let member = member.filter(|m| !m.is_empty() && m.len() <= 36).ok_or((
        E::InvalidRequest,
        "Invalid member id in the request.".into(),
    ))?;
    Ok((group.to_string(), Arc::from(member.as_str())))
}

/// What one partition's answer holds so far.
#[derive(Default)]
struct Answer {
    error: Option<E>,
    ack_error: Option<(E, String)>,
    acquired: Vec<weir_share::partition::Acquired>,
    records: bytes::Bytes,
    /// Named by the request (a full answer names every partition of the session).
    changed: bool,
}

async fn share_fetch(
    broker: &Arc<Broker>,
    cx: &Cx<'_>,
    r: ShareFetchRequest,
) -> Result<Reply, Refusal> {
    let began = Instant::now();
    let (group, member) = group_and_member(r.group_id.as_ref(), r.member_id.as_ref())?;
    let acks: Vec<(Part, Vec<AckBatch>)> = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| !p.acknowledgement_batches.is_empty())
                .map(|p| {
                    (
                        (*t.topic_id.as_bytes(), p.partition_index),
                        ack_batches(&p.acknowledgement_batches),
                    )
                })
        })
        .collect();
    // v2: a renewal (IsRenewAck) only acknowledges, and must not ask for records (KIP-1222).
    let renew = cx.v >= 2 && r.is_renew_ack;
    if renew && (r.max_bytes != 0 || r.min_bytes != 0 || r.max_records != 0 || r.max_wait_ms != 0) {
        return Err((
            E::InvalidRequest,
            "A renew acknowledgement fetch must not ask for records.".into(),
        ));
    }
    if r.share_session_epoch == 0 && !acks.is_empty() {
        return Err((
            E::InvalidRequest,
            "Acknowledge data present in initial fetch request.".into(),
        ));
    }
    let add: Vec<Part> = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (*t.topic_id.as_bytes(), p.partition_index))
        })
        .collect();
    let forget: Vec<Part> = r
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (*t.topic_id.as_bytes(), *p)))
        .collect();
    let step = broker
        .shares
        .step(
            &group,
            &member,
            r.share_session_epoch,
            cx.conn.id,
            &add,
            &forget,
        )
        .map_err(|e| (session_error(e), String::new()))?;
    if let Step::Fetch { opened: true, .. } = step {
        let shares = Arc::clone(&broker.shares);
        let conn = cx.conn.id;
        cx.conn.on_close(move || shares.disconnected(conn));
    }
    if let (Step::Fetch { parts, .. }, 0) = (&step, r.share_session_epoch) {
        broker.shares.revalidate(&group, parts).await;
    }
    let check = broker.check_for(cx.conn);
    let mut answers: BTreeMap<Part, Answer> = BTreeMap::new();
    for (part, batches) in &acks {
        let a = answers.entry(*part).or_default();
        a.changed = true;
        a.ack_error = acknowledge(
            broker,
            check.as_ref(),
            &group,
            &member,
            *part,
            batches,
            renew,
        )
        .await
        .err();
    }
    let parts = match step {
        Step::Closed { parts } => {
            broker.shares.release(&group, &member, &parts).await;
            return Ok(now(respond(
                broker,
                cx,
                &group,
                answers,
                r.share_session_epoch,
            )
            .await));
        }
        Step::Fetch { parts, .. } => parts,
    };
    for p in &add {
        answers.entry(*p).or_default().changed = true;
    }
    let fetching = r.max_records > 0 && r.max_bytes > 0;
    let round = Round {
        group: group.clone(),
        member: Arc::clone(&member),
        parts,
        max_records: r.max_records.max(0) as usize,
        max_bytes: r.max_bytes.max(0) as usize,
        strict: cx.v >= 2 && r.share_acquire_mode == 1,
    };
    if fetching {
        round.run(broker, check.as_ref(), &mut answers).await;
    }
    let got = |answers: &BTreeMap<Part, Answer>| {
        answers
            .values()
            .any(|a| !a.acquired.is_empty() || a.error.is_some())
    };
    if !fetching || got(&answers) || r.max_wait_ms <= 0 {
        broker.meters.fetch_latency.record(began.elapsed());
        return Ok(now(respond(
            broker,
            cx,
            &group,
            answers,
            r.share_session_epoch,
        )
        .await));
    }
    // Nothing yet: wait for records (or for a lock to expire, a release) until MaxWaitMs.
    let deadline = began + Duration::from_millis(r.max_wait_ms as u64);
    let broker = Arc::clone(broker);
    let epoch = r.share_session_epoch;
    let cx_zone = cx.zone.map(str::to_string);
    let listener = cx.listener.to_string();
    Ok(Reply::Later(Box::pin(async move {
        let mut answers = answers;
        loop {
            let now_at = Instant::now();
            if now_at >= deadline {
                break;
            }
            round.wait(&broker, deadline).await;
            round.run(&broker, check.as_ref(), &mut answers).await;
            if got(&answers) {
                break;
            }
        }
        broker.meters.fetch_latency.record(began.elapsed());
        respond_with(
            &broker,
            cx_zone.as_deref(),
            &listener,
            &group,
            answers,
            epoch,
        )
        .await
    })))
}

/// A session step's refusal as Kafka's error.
pub(crate) fn session_error(e: weir_share::session::SessionError) -> E {
    use weir_share::session::SessionError as S;
    match e {
        S::NotFound => E::ShareSessionNotFound,
        S::InvalidEpoch => E::InvalidShareSessionEpoch,
        S::LimitReached => E::ShareSessionLimitReached,
    }
}

fn ack_batches(batches: &[share_fetch_request::AcknowledgementBatch]) -> Vec<AckBatch> {
    batches
        .iter()
        .map(|b| AckBatch {
            first_offset: b.first_offset,
            last_offset: b.last_offset,
            types: b.acknowledge_types.clone(),
        })
        .collect()
}

/// One partition's acknowledgements: its error, if refused.
pub(crate) async fn acknowledge(
    broker: &Broker,
    check: Option<&Check>,
    group: &str,
    member: &str,
    (topic_id, index): Part,
    batches: &[AckBatch],
    renew: bool,
) -> Result<(), (E, String)> {
    let (name, partition) =
        locate(broker, check, topic_id, index).map_err(|e| (e, String::new()))?;
    broker
        .shares
        .acknowledge(
            group,
            member,
            (&name, topic_id),
            &partition,
            index,
            batches,
            renew,
        )
        .await
}

/// The topic's name and the partition, led here and readable by the principal.
pub(crate) fn locate(
    broker: &Broker,
    check: Option<&Check>,
    topic_id: [u8; 16],
    index: i32,
) -> Result<(String, Arc<weir_partition::Partition>), E> {
    let topic = broker
        .topics
        .get_by_id(&topic_id)
        .ok_or(E::UnknownTopicId)?;
    if check.is_some_and(|c| !c.topic(Operation::Read, &topic.name)) {
        return Err(E::TopicAuthorizationFailed);
    }
    match broker.topics.lookup_in(&topic, [index]).pop() {
        Some(Lookup::Local(p)) => Ok((topic.name.clone(), p)),
        Some(Lookup::NotHere) => Err(E::NotLeaderOrFollower),
        _ => Err(E::UnknownTopicOrPartition),
    }
}

/// One pass over the session's partitions.
struct Round {
    group: String,
    member: Arc<str>,
    parts: Vec<Part>,
    max_records: usize,
    max_bytes: usize,
    /// ShareFetch v2's record-limit acquire mode: at most `max_records`, batches split.
    strict: bool,
}

impl Round {
    /// Acquires what it can of each partition, in order, the records and bytes shared out.
    async fn run(
        &self,
        broker: &Broker,
        check: Option<&Check>,
        answers: &mut BTreeMap<Part, Answer>,
    ) {
        let (mut records, mut bytes) = (self.max_records, self.max_bytes);
        for &(topic_id, index) in &self.parts {
            let a = answers.entry((topic_id, index)).or_default();
            if records == 0 || bytes == 0 || a.error.is_some() || !a.acquired.is_empty() {
                continue;
            }
            let fetched = match locate(broker, check, topic_id, index) {
                Ok((name, partition)) => {
                    broker
                        .shares
                        .fetch(
                            &self.group,
                            &self.member,
                            (&name, topic_id),
                            &partition,
                            index,
                            records,
                            bytes,
                            self.strict,
                        )
                        .await
                }
                Err(e) => Err(e),
            };
            match fetched {
                Ok(f) => {
                    let n: i64 = f
                        .acquired
                        .iter()
                        .map(|r| r.last_offset - r.first_offset + 1)
                        .sum();
                    records = records.saturating_sub(n as usize);
                    bytes = bytes.saturating_sub(f.records.len());
                    a.acquired = f.acquired;
                    a.records = f.records;
                }
                Err(e) => a.error = Some(e),
            }
        }
    }

    /// Waits for new records on any of the partitions led here, or a while (for a lock that
    /// expires or records released elsewhere), or `deadline`.
    async fn wait(&self, broker: &Broker, deadline: Instant) {
        let mut watches = Vec::new();
        for &(topic_id, index) in &self.parts {
            if let Some(t) = broker.topics.get_by_id(&topic_id) {
                if let Some(Lookup::Local(p)) = broker.topics.lookup_in(&t, [index]).pop() {
                    if let Some(w) = p.watch_high_watermark() {
                        watches.push(w);
                    }
                }
            }
        }
        let tick = deadline.min(Instant::now() + Duration::from_millis(250));
        if watches.is_empty() {
            tokio::time::sleep_until(tick.into()).await;
            return;
        }
        let changed = futures::future::select_all(
            watches
                .iter_mut()
                .map(|w| Box::pin(async move { w.changed().await.is_ok() })),
        );
        tokio::select! {
            _ = changed => {}
            _ = tokio::time::sleep_until(tick.into()) => {}
        }
    }
}

async fn respond(
    broker: &Broker,
    cx: &Cx<'_>,
    group: &str,
    answers: BTreeMap<Part, Answer>,
    epoch: i32,
) -> ResponseKind {
    respond_with(broker, cx.zone, cx.listener, group, answers, epoch).await
}

/// The response: every partition named by the request, and every other one with records or an
/// error (a session's later answers leave out the partitions with nothing to tell).
async fn respond_with(
    broker: &Broker,
    zone: Option<&str>,
    listener: &str,
    group: &str,
    answers: BTreeMap<Part, Answer>,
    epoch: i32,
) -> ResponseKind {
    let lock_ms = broker.shares.configs().get(group).await.limits.lock_ms;
    let mut topics: BTreeMap<[u8; 16], Vec<PartitionData>> = BTreeMap::new();
    let mut endpoints: Vec<NodeEndpoint> = Vec::new();
    for ((topic_id, index), a) in answers {
        let tell = a.changed
            || epoch == 0
            || a.error.is_some()
            || !a.acquired.is_empty()
            || a.ack_error.is_some();
        if !tell {
            continue;
        }
        let mut pd = PartitionData::default()
            .with_partition_index(index)
            .with_error_code(a.error.map_or(0, |e| e.code()))
            .with_records(Some(a.records))
            .with_acquired_records(
                a.acquired
                    .iter()
                    .map(|r| {
                        AcquiredRecords::default()
                            .with_first_offset(r.first_offset)
                            .with_last_offset(r.last_offset)
                            .with_delivery_count(r.delivery_count)
                    })
                    .collect(),
            );
        if let Some((e, m)) = &a.ack_error {
            pd = pd
                .with_acknowledge_error_code(e.code())
                .with_acknowledge_error_message((!m.is_empty()).then(|| str(m)));
        }
        if a.error == Some(E::NotLeaderOrFollower) {
            let name = broker.topics.get_by_id(&topic_id).map(|t| t.name.clone());
            if let Some(h) = name.and_then(|n| broker.leader_hint(zone, listener, &n, index)) {
                pd.current_leader = LeaderIdAndEpoch::default()
                    .with_leader_id(h.node_id)
                    .with_leader_epoch(h.epoch);
                if !endpoints.iter().any(|e| e.node_id.0 == h.node_id) {
                    endpoints.push(
                        NodeEndpoint::default()
                            .with_node_id(BrokerId(h.node_id))
                            .with_host(str(&h.host))
                            .with_port(h.port)
                            .with_rack((!h.rack.is_empty()).then(|| str(&h.rack))),
                    );
                }
            }
        }
        topics.entry(topic_id).or_default().push(pd);
    }
    ResponseKind::ShareFetch(
        ShareFetchResponse::default()
            .with_acquisition_lock_timeout_ms(lock_ms.min(i32::MAX as u64) as i32)
            .with_responses(
                topics
                    .into_iter()
                    .map(|(id, partitions)| {
                        ShareFetchableTopicResponse::default()
                            .with_topic_id(uuid::Uuid::from_bytes(id))
                            .with_partitions(partitions)
                    })
                    .collect(),
            )
            .with_node_endpoints(endpoints),
    )
}
