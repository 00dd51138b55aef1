//! Incremental fetch sessions (KIP-227).
//!
//! A consumer of thousands of partitions sends all of them in every Fetch and gets all of them
//! back, most with nothing new. With a session, the broker remembers the partitions a client
//! fetches (and what it last told it about each): the client's next requests name only the
//! partitions whose fetch position changed, and the answers carry only the partitions with
//! records, an error, or offsets that moved. The Java client and franz-go open a session
//! whenever the broker gives one; librdkafka has none and fetches without (session id 0,
//! epoch -1), which is answered in full as before.
//!
//! The request/answer cycle, as Kafka's `FetchSession.scala` has it:
//! - epoch 0 (and any id): a full fetch that asks for a new session. Any session named is
//!   closed; a new one is made of the request's partitions if a slot is free (or can be
//!   freed, see [`FetchSessions`]), and the full answer carries its id. The session then
//!   expects epoch 1.
//! - epoch -1: a full fetch without a session (the named one, if any, is closed).
//! - epoch > 0 with the session's id: the request's partitions are added or updated, its
//!   forgotten topics removed, and the session's partitions are fetched; the answer leaves out
//!   every partition with nothing to tell. An unknown id answers FETCH_SESSION_ID_NOT_FOUND,
//!   an epoch other than the expected one INVALID_FETCH_SESSION_EPOCH: the client then starts
//!   over with a full fetch.
//!
//! [`FetchSessions::begin`] turns a request into the partitions to read (rewriting an
//! incremental request's topics into the session's whole list) and a [`Context`];
//! [`Context::finish`] then records what the answer tells and drops from an incremental answer
//! what it need not tell.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::ResponseError;
use uuid::Uuid;
use weir_metrics::Counter;

/// The epoch of a full fetch that asks for a session.
const INITIAL_EPOCH: i32 = 0;
/// The epoch of a full fetch without a session.
const FINAL_EPOCH: i32 = -1;

/// A session idle for this long can give its slot to a new one (Kafka's
/// `min.incremental.fetch.session.eviction.ms`).
const STALE_AFTER: Duration = Duration::from_secs(120);

/// The epoch after `epoch` (Kafka's `nextEpoch`: it wraps to 1, never to the two reserved
/// values).
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A topic as a session knows it: by id from Fetch v13 on, by name before.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum TopicKey {
    Id(Uuid),
    Name(TopicName),
}

type Key = (TopicKey, i32);

/// What the session last told the client about a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Told {
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
}

/// One partition of a session: the client's last fetch parameters for it, and what it was
/// last told.
#[derive(Debug, Clone)]
struct Cached {
    name: TopicName,
    topic_id: Uuid,
    partition: i32,
    fetch_offset: i64,
    log_start_offset: i64,
    max_bytes: i32,
    current_leader_epoch: i32,
    last_fetched_epoch: i32,
    /// `None` until the partition has been answered, and after an error (so that it is
    /// answered again once the error is gone).
    told: Option<Told>,
}

impl Cached {
    fn request(&self) -> FetchPartition {
        FetchPartition::default()
            .with_partition(self.partition)
            .with_fetch_offset(self.fetch_offset)
            .with_log_start_offset(self.log_start_offset)
            .with_partition_max_bytes(self.max_bytes)
            .with_current_leader_epoch(self.current_leader_epoch)
            .with_last_fetched_epoch(self.last_fetched_epoch)
    }

    /// Whether an incremental answer must carry `pd` (Kafka's `maybeUpdateResponseData`),
    /// remembering what it tells.
    fn must_answer(
        &mut self,
        pd: &kafka_protocol::messages::fetch_response::PartitionData,
    ) -> bool {
        let records = pd.records.as_ref().is_some_and(|r| !r.is_empty());
        if pd.error_code != 0 {
            self.told = None;
            return true;
        }
        let now = Told {
            high_watermark: pd.high_watermark,
            last_stable_offset: pd.last_stable_offset,
            log_start_offset: pd.log_start_offset,
        };
        let moved = self.told != Some(now);
        self.told = Some(now);
        records || moved || pd.preferred_read_replica.0 >= 0 || pd.diverging_epoch.epoch >= 0
    }
}

/// One client's session.
#[derive(Debug)]
pub(crate) struct Session {
    /// The epoch the next request must carry.
    epoch: i32,
    /// Whether the session knows topics by id (Fetch v13+); a request of the other kind is
    /// FETCH_SESSION_TOPIC_ID_ERROR.
    topic_ids: bool,
    parts: Vec<Cached>,
    index: HashMap<Key, usize>,
    /// Where the next fetch starts reading: after the last partition that returned records,
    /// so that partitions left out by the response's byte limit are read first next time (as
    /// Kafka's move of answered partitions to the end of the session does).
    cursor: usize,
    /// Bumped by every request of the session: an answer that completes after a newer request
    /// began (the client gave up on it) leaves the session alone.
    generation: u64,
}

impl Session {
    fn new(topic_ids: bool) -> Session {
        Session {
            epoch: next_epoch(INITIAL_EPOCH),
            topic_ids,
            parts: Vec::new(),
            index: HashMap::new(),
            cursor: 0,
            generation: 0,
        }
    }

    fn key(&self, name: &TopicName, id: Uuid) -> TopicKey {
        if self.topic_ids {
            TopicKey::Id(id)
        } else {
            TopicKey::Name(name.clone())
        }
    }

    /// Adds the request's partitions or updates their fetch parameters; returns their places
    /// in the session, in request order.
    fn update(&mut self, topics: &[FetchTopic]) -> Vec<usize> {
        let mut places = Vec::with_capacity(topics.iter().map(|t| t.partitions.len()).sum());
        for t in topics {
            let topic = self.key(&t.topic, t.topic_id);
            for p in &t.partitions {
                let at = match self.index.get(&(topic.clone(), p.partition)) {
                    Some(&at) => at,
                    None => {
                        let at = self.parts.len();
                        self.parts.push(Cached {
                            name: t.topic.clone(),
                            topic_id: t.topic_id,
                            partition: p.partition,
                            fetch_offset: 0,
                            log_start_offset: -1,
                            max_bytes: 0,
                            current_leader_epoch: -1,
                            last_fetched_epoch: -1,
                            told: None,
                        });
                        self.index.insert((topic.clone(), p.partition), at);
                        at
                    }
                };
                let c = &mut self.parts[at];
                c.fetch_offset = p.fetch_offset;
                c.log_start_offset = p.log_start_offset;
                c.max_bytes = p.partition_max_bytes;
                c.current_leader_epoch = p.current_leader_epoch;
                c.last_fetched_epoch = p.last_fetched_epoch;
                places.push(at);
            }
        }
        places
    }

    /// Removes the forgotten topics' partitions. The last partition takes each one's place
    /// (no rebuilding: a client forgets the partitions it still holds data of on every fetch).
    fn forget(&mut self, forgotten: &[ForgottenTopic]) {
        for f in forgotten {
            let topic = self.key(&f.topic, f.topic_id);
            for &p in &f.partitions {
                let Some(at) = self.index.remove(&(topic.clone(), p)) else {
                    continue;
                };
                self.parts.swap_remove(at);
                if let Some(moved) = self.parts.get(at) {
                    let key = (self.key(&moved.name, moved.topic_id), moved.partition);
                    self.index.insert(key, at);
                }
            }
        }
        debug_assert_eq!(self.index.len(), self.parts.len());
        if self.cursor >= self.parts.len() {
            self.cursor = 0;
        }
    }

    /// The whole session as a request's topics, from the cursor on (a topic's partitions that
    /// follow each other in that order are one topic of the request); and the places in the
    /// session, in that order.
    fn fetch_list(&self) -> (Vec<FetchTopic>, Vec<usize>) {
        let n = self.parts.len();
        let order: Vec<usize> = (0..n).map(|k| (self.cursor + k) % n).collect();
        let mut topics: Vec<FetchTopic> = Vec::new();
        for &at in &order {
            let c = &self.parts[at];
            let same = topics.last().is_some_and(|t| {
                if self.topic_ids {
                    t.topic_id == c.topic_id
                } else {
                    t.topic == c.name
                }
            });
            if !same {
                topics.push(
                    FetchTopic::default()
                        .with_topic(c.name.clone())
                        .with_topic_id(c.topic_id),
                );
            }
            if let Some(t) = topics.last_mut() {
                t.partitions.push(c.request());
            }
        }
        (topics, order)
    }
}

/// Fetch-session meters.
#[derive(Debug, Default)]
pub struct SessionMeters {
    /// Sessions made.
    pub created: Counter,
    /// Sessions whose slot went to a new one.
    pub evicted: Counter,
    /// Fetches within a session (epoch > 0) that were served; refused ones count in `refused`.
    pub incremental: Counter,
    /// Incremental fetches refused (unknown session, wrong epoch): the client starts over.
    pub refused: Counter,
}

impl SessionMeters {
    /// Declares the fetch sessions' meters (the open sessions, read from `sessions`).
    pub fn register(
        sessions: impl Fn() -> usize + Send + Sync + 'static,
        m: &Self,
        r: &mut weir_metrics::Registry,
    ) {
        r.gauge_read(
            "fetch_sessions",
            "Incremental fetch sessions (KIP-227) open.",
            move || sessions() as u64,
        );
        r.counter("fetch_sessions_created", "Fetch sessions made.", &m.created);
        r.counter(
            "fetch_sessions_evicted",
            "Fetch sessions whose slot went to a new one (broker.fetch_session_cache_slots).",
            &m.evicted,
        );
        r.counter(
            "fetch_incremental",
            "Fetches within a session: naming and answering only the partitions that changed.",
            &m.incremental,
        );
        r.counter(
            "fetch_session_refused",
            "Fetches of an unknown session or a wrong epoch (the client starts a new session).",
            &m.refused,
        );
    }
}

struct Slot {
    session: Arc<Mutex<Session>>,
    last_used: Instant,
    partitions: usize,
}

/// The broker's fetch sessions: at most `slots` (Kafka's
/// `max.incremental.fetch.session.cache.slots`, 1,000 by default; 0 turns sessions off).
///
/// When all slots are taken, a new session takes the slot of the least recently used one if
/// it has been idle for [`STALE_AFTER`], else that of the smallest session if the new one has
/// more partitions (a session saves its client and the broker work in proportion to its
/// partitions, so the slots go to the largest consumers), else none is made: the client goes on
/// with full fetches, asking again each time.
pub struct FetchSessions {
    slots: usize,
    cache: Mutex<HashMap<i32, Slot>>,
    pub meters: SessionMeters,
}

/// What a fetch is within its session, from [`FetchSessions::begin`].
pub(crate) enum Context {
    /// No session: every partition is answered, session id 0.
    Sessionless,
    /// A refused incremental fetch: answered with this error alone.
    Refused(ResponseError),
    /// A full fetch that made a session (every partition answered), or an incremental one
    /// (only what changed).
    InSession {
        id: i32,
        session: Arc<Mutex<Session>>,
        generation: u64,
        /// The session's place of each partition of the request (and so of the answer), in
        /// order.
        order: Vec<usize>,
        incremental: bool,
    },
}

impl FetchSessions {
    pub fn new(slots: usize) -> FetchSessions {
        FetchSessions {
            slots,
            cache: Mutex::new(HashMap::new()),
            meters: SessionMeters::default(),
        }
    }

    /// Sessions open now.
    pub fn len(&self) -> usize {
        lock(&self.cache).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The fetch's context; an incremental request's topics become the session's whole list.
    pub(crate) fn begin(&self, r: &mut FetchRequest, version: i16) -> Context {
        if version < 7 {
            return Context::Sessionless;
        }
        let (id, epoch) = (r.session_id, r.session_epoch);
        let topic_ids = version >= 13;
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            if id != 0 {
                lock(&self.cache).remove(&id);
            }
            if epoch == FINAL_EPOCH || self.slots == 0 || r.topics.is_empty() {
                return Context::Sessionless;
            }
            let mut session = Session::new(topic_ids);
            let order = session.update(&r.topics);
            let partitions = session.parts.len();
            let session = Arc::new(Mutex::new(session));
            let Some(id) = self.insert(Arc::clone(&session), partitions) else {
                return Context::Sessionless;
            };
            self.meters.created.inc();
            return Context::InSession {
                id,
                session,
                generation: 0,
                order,
                incremental: false,
            };
        }
        let slot = {
            let mut cache = lock(&self.cache);
            cache.get_mut(&id).map(|slot| {
                slot.last_used = Instant::now();
                Arc::clone(&slot.session)
            })
        };
        let Some(session) = slot else {
            self.meters.refused.inc();
            return Context::Refused(ResponseError::FetchSessionIdNotFound);
        };
        let mut s = lock(&session);
        if s.epoch != epoch {
            self.meters.refused.inc();
            return Context::Refused(ResponseError::InvalidFetchSessionEpoch);
        }
        if s.topic_ids != topic_ids {
            self.meters.refused.inc();
            return Context::Refused(ResponseError::FetchSessionTopicIdError);
        }
        s.update(&r.topics);
        s.forget(&r.forgotten_topics_data);
        if s.parts.is_empty() {
            drop(s);
            lock(&self.cache).remove(&id);
            return Context::Sessionless;
        }
        self.meters.incremental.inc();
        s.epoch = next_epoch(s.epoch);
        s.generation += 1;
        let generation = s.generation;
        let (topics, order) = s.fetch_list();
        let partitions = s.parts.len();
        drop(s);
        if let Some(slot) = lock(&self.cache).get_mut(&id) {
            slot.partitions = partitions;
        }
        r.topics = topics;
        r.forgotten_topics_data.clear();
        Context::InSession {
            id,
            session,
            generation,
            order,
            incremental: true,
        }
    }

    /// Puts a new session in a slot, freeing one if it may; its id, or `None` if there is no
    /// slot for it.
    fn insert(&self, session: Arc<Mutex<Session>>, partitions: usize) -> Option<i32> {
        let mut cache = lock(&self.cache);
        let now = Instant::now();
        if cache.len() >= self.slots {
            let stale = cache
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .filter(|(_, s)| now.duration_since(s.last_used) >= STALE_AFTER)
                .map(|(&id, _)| id);
            let smaller = || {
                cache
                    .iter()
                    .min_by_key(|(_, s)| (s.partitions, s.last_used))
                    .filter(|(_, s)| s.partitions < partitions)
                    .map(|(&id, _)| id)
            };
            let victim = stale.or_else(smaller)?;
            cache.remove(&victim);
            self.meters.evicted.inc();
        }
        // Random ids, so that a client's id from before a restart (or another client's) does
        // not name a new session by chance.
        let id = loop {
            let id = (Uuid::new_v4().as_u128() as u32 & 0x7fff_ffff) as i32;
            if id != 0 && !cache.contains_key(&id) {
                break id;
            }
        };
        cache.insert(
            id,
            Slot {
                session,
                last_used: now,
                partitions,
            },
        );
        Some(id)
    }
}

impl Context {
    /// The answer as the session has it: its id, and for an incremental fetch only the
    /// partitions with something to tell. Remembers what the answer tells each partition.
    pub(crate) fn finish(&self, response: &mut FetchResponse) {
        let Context::InSession {
            id,
            session,
            generation,
            order,
            incremental,
        } = self
        else {
            return;
        };
        response.session_id = *id;
        let mut s = lock(session);
        if s.generation != *generation {
            // A newer request of the session began: the client no longer waits for this one.
            return;
        }
        let counted: usize = response.responses.iter().map(|t| t.partitions.len()).sum();
        debug_assert_eq!(counted, order.len(), "one answer per partition fetched");
        if counted != order.len() {
            return;
        }
        let mut k = 0;
        let mut last_with_records = None;
        for t in &mut response.responses {
            t.partitions.retain(|pd| {
                let at = order[k];
                k += 1;
                let Some(c) = s.parts.get_mut(at) else {
                    return true;
                };
                debug_assert_eq!(c.partition, pd.partition_index);
                if pd.records.as_ref().is_some_and(|r| !r.is_empty()) {
                    last_with_records = Some(at);
                }
                c.must_answer(pd) || !incremental
            });
        }
        if *incremental {
            response.responses.retain(|t| !t.partitions.is_empty());
        }
        if let Some(at) = last_with_records {
            s.cursor = (at + 1) % s.parts.len().max(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::protocol::StrBytes;

    fn name(s: &str) -> TopicName {
        TopicName(StrBytes::from_string(s.to_string()))
    }

    fn request(id: i32, epoch: i32, parts: &[(&str, i32, i64)]) -> FetchRequest {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for &(t, p, offset) in parts {
            if topics.last().map(|x| x.topic != name(t)).unwrap_or(true) {
                topics.push(FetchTopic::default().with_topic(name(t)));
            }
            if let Some(x) = topics.last_mut() {
                x.partitions.push(
                    FetchPartition::default()
                        .with_partition(p)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20),
                );
            }
        }
        FetchRequest::default()
            .with_session_id(id)
            .with_session_epoch(epoch)
            .with_topics(topics)
    }

    /// An answer to `r`: each partition with `hw` as its high watermark and records where
    /// `with_records` says.
    fn answer(
        r: &FetchRequest,
        hw: &dyn Fn(&str, i32) -> i64,
        records: &[(&str, i32)],
    ) -> FetchResponse {
        let responses = r
            .topics
            .iter()
            .map(|t| {
                let tn = t.topic.0.as_str();
                FetchableTopicResponse::default()
                    .with_topic(t.topic.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                let has = records.contains(&(tn, p.partition));
                                PartitionData::default()
                                    .with_partition_index(p.partition)
                                    .with_high_watermark(hw(tn, p.partition))
                                    .with_last_stable_offset(hw(tn, p.partition))
                                    .with_preferred_read_replica(
                                        kafka_protocol::messages::BrokerId(-1),
                                    )
                                    .with_records(Some(if has {
                                        Bytes::from_static(b"batch")
                                    } else {
                                        Bytes::new()
                                    }))
                            })
                            .collect(),
                    )
            })
            .collect();
        FetchResponse::default().with_responses(responses)
    }

    fn answered(f: &FetchResponse) -> Vec<(String, i32)> {
        f.responses
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.topic.0.to_string(), p.partition_index))
            })
            .collect()
    }

    fn session_of(c: &Context) -> i32 {
        match c {
            Context::InSession { id, .. } => *id,
            _ => panic!("no session"),
        }
    }

    #[test]
    fn a_session_answers_only_what_changed() {
        let sessions = FetchSessions::new(10);
        let mut r = request(0, 0, &[("a", 0, 0), ("a", 1, 0), ("b", 0, 0)]);
        let c = sessions.begin(&mut r, 12);
        let id = session_of(&c);
        let mut f = answer(&r, &|_, _| 5, &[]);
        c.finish(&mut f);
        assert_eq!(f.session_id, id);
        assert_eq!(answered(&f).len(), 3, "a new session's answer is full");

        // Nothing changed: an empty answer, though all three were read.
        let mut r = request(id, 1, &[]);
        let c = sessions.begin(&mut r, 12);
        assert_eq!(
            r.topics.iter().map(|t| t.partitions.len()).sum::<usize>(),
            3
        );
        let mut f = answer(&r, &|_, _| 5, &[]);
        c.finish(&mut f);
        assert!(answered(&f).is_empty(), "{:?}", answered(&f));

        // a-1's high watermark moved, b-0 has records.
        let mut r = request(id, 2, &[]);
        let c = sessions.begin(&mut r, 12);
        let mut f = answer(
            &r,
            &|t, p| if (t, p) == ("a", 1) { 9 } else { 5 },
            &[("b", 0)],
        );
        c.finish(&mut f);
        let mut got = answered(&f);
        got.sort();
        assert_eq!(got, vec![("a".into(), 1), ("b".into(), 0)]);
        assert_eq!(sessions.meters.incremental.get(), 2);
    }

    #[test]
    fn an_incremental_request_updates_offsets_and_forgets_partitions() {
        let sessions = FetchSessions::new(10);
        let mut r = request(0, 0, &[("a", 0, 0), ("a", 1, 0)]);
        let c = sessions.begin(&mut r, 12);
        let id = session_of(&c);
        c.finish(&mut answer(&r, &|_, _| 5, &[]));

        let mut r = request(id, 1, &[("a", 1, 3), ("b", 7, 2)]);
        r.forgotten_topics_data = vec![ForgottenTopic::default()
            .with_topic(name("a"))
            .with_partitions(vec![0])];
        let c = sessions.begin(&mut r, 12);
        let fetched: Vec<(String, i32, i64)> = r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.topic.0.to_string(), p.partition, p.fetch_offset))
            })
            .collect();
        assert_eq!(fetched.len(), 2);
        assert!(fetched.contains(&("a".into(), 1, 3)), "{fetched:?}");
        assert!(fetched.contains(&("b".into(), 7, 2)), "{fetched:?}");
        let mut f = answer(&r, &|_, _| 5, &[]);
        c.finish(&mut f);
        // b-7 is new to the session: answered once even with nothing to read.
        assert_eq!(answered(&f), vec![("b".into(), 7)]);
    }

    #[test]
    fn forgetting_keeps_the_rest_of_the_session_whole() {
        let sessions = FetchSessions::new(10);
        let parts: Vec<(&str, i32, i64)> = (0..10).map(|p| ("a", p, p as i64)).collect();
        let mut r = request(0, 0, &parts);
        let c = sessions.begin(&mut r, 12);
        let id = session_of(&c);
        c.finish(&mut answer(&r, &|_, _| 100, &[]));
        let mut r = request(id, 1, &[("a", 5, 50), ("a", 9, 90)]);
        r.forgotten_topics_data = vec![ForgottenTopic::default()
            .with_topic(name("a"))
            .with_partitions(vec![0, 3, 9, 11])];
        sessions.begin(&mut r, 12);
        let mut fetched: Vec<(i32, i64)> = r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.fetch_offset)))
            .collect();
        fetched.sort();
        // 9 was updated, then forgotten (updates come first, as in Kafka).
        assert_eq!(
            fetched,
            vec![(1, 1), (2, 2), (4, 4), (5, 50), (6, 6), (7, 7), (8, 8)]
        );
        // Each one left is still found by its key.
        let mut r = request(id, 2, &[("a", 8, 80), ("a", 1, 10)]);
        sessions.begin(&mut r, 12);
        let n: usize = r.topics.iter().map(|t| t.partitions.len()).sum();
        assert_eq!(n, 7);
        let offsets: Vec<(i32, i64)> = r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.fetch_offset)))
            .filter(|&(p, _)| p == 8 || p == 1)
            .collect();
        assert_eq!(offsets.len(), 2);
        assert!(
            offsets.contains(&(8, 80)) && offsets.contains(&(1, 10)),
            "{offsets:?}"
        );
    }

    #[test]
    fn wrong_epochs_and_unknown_sessions_are_refused() {
        let sessions = FetchSessions::new(10);
        let mut r = request(0, 0, &[("a", 0, 0)]);
        let c = sessions.begin(&mut r, 12);
        let id = session_of(&c);
        c.finish(&mut answer(&r, &|_, _| 5, &[]));
        let refused = |c: Context| match c {
            Context::Refused(e) => e,
            _ => panic!("not refused"),
        };
        assert_eq!(
            refused(sessions.begin(&mut request(id, 5, &[]), 12)),
            ResponseError::InvalidFetchSessionEpoch
        );
        assert_eq!(
            refused(sessions.begin(&mut request(id + 1, 1, &[]), 12)),
            ResponseError::FetchSessionIdNotFound
        );
        assert_eq!(
            refused(sessions.begin(&mut request(id, 1, &[]), 13)),
            ResponseError::FetchSessionTopicIdError
        );
        // Epoch -1 closes it.
        assert!(matches!(
            sessions.begin(&mut request(id, -1, &[("a", 0, 0)]), 12),
            Context::Sessionless
        ));
        assert!(sessions.is_empty());
        assert_eq!(
            refused(sessions.begin(&mut request(id, 1, &[]), 12)),
            ResponseError::FetchSessionIdNotFound
        );
    }

    #[test]
    fn errors_are_answered_until_they_are_gone() {
        let sessions = FetchSessions::new(10);
        let mut r = request(0, 0, &[("a", 0, 0)]);
        let c = sessions.begin(&mut r, 12);
        let id = session_of(&c);
        c.finish(&mut answer(&r, &|_, _| 5, &[]));
        for epoch in 1..=2 {
            let mut r = request(id, epoch, &[]);
            let c = sessions.begin(&mut r, 12);
            let mut f = answer(&r, &|_, _| -1, &[]);
            f.responses[0].partitions[0].error_code = ResponseError::NotLeaderOrFollower.code();
            c.finish(&mut f);
            assert_eq!(answered(&f).len(), 1, "epoch {epoch}");
        }
        // The error is gone, the offsets are as before it: still answered, once.
        for (epoch, n) in [(3, 1), (4, 0)] {
            let mut r = request(id, epoch, &[]);
            let c = sessions.begin(&mut r, 12);
            let mut f = answer(&r, &|_, _| 5, &[]);
            c.finish(&mut f);
            assert_eq!(answered(&f).len(), n, "epoch {epoch}");
        }
    }

    #[test]
    fn partitions_left_out_by_the_byte_limit_are_read_first_next_time() {
        let sessions = FetchSessions::new(10);
        let parts: Vec<(&str, i32, i64)> = (0..4).map(|p| ("a", p, 0)).collect();
        let mut r = request(0, 0, &parts);
        let c = sessions.begin(&mut r, 12);
        let id = session_of(&c);
        // 0 and 1 returned records, the limit left 2 and 3 out.
        c.finish(&mut answer(&r, &|_, _| 5, &[("a", 0), ("a", 1)]));
        let mut r = request(id, 1, &[]);
        sessions.begin(&mut r, 12);
        let order: Vec<i32> = r.topics[0].partitions.iter().map(|p| p.partition).collect();
        assert_eq!(order, vec![2, 3, 0, 1]);
        assert_eq!(r.topics.len(), 1, "one topic's partitions stay one topic");
    }

    #[test]
    fn a_full_cache_gives_a_slot_to_a_larger_session_only() {
        let sessions = FetchSessions::new(2);
        let small =
            |n: i32| -> Vec<(&'static str, i32, i64)> { (0..n).map(|p| ("a", p, 0)).collect() };
        let a = session_of(&sessions.begin(&mut request(0, 0, &small(2)), 12));
        let b = session_of(&sessions.begin(&mut request(0, 0, &small(3)), 12));
        // No larger than the smallest, none stale: no session.
        assert!(matches!(
            sessions.begin(&mut request(0, 0, &small(2)), 12),
            Context::Sessionless
        ));
        // Larger: takes the smallest one's slot.
        let c = session_of(&sessions.begin(&mut request(0, 0, &small(5)), 12));
        assert_eq!(sessions.len(), 2);
        assert_eq!(sessions.meters.evicted.get(), 1);
        assert!(matches!(
            sessions.begin(&mut request(a, 1, &[]), 12),
            Context::Refused(ResponseError::FetchSessionIdNotFound)
        ));
        assert!(matches!(
            sessions.begin(&mut request(b, 1, &[]), 12),
            Context::InSession { .. }
        ));
        assert!(matches!(
            sessions.begin(&mut request(c, 1, &[]), 12),
            Context::InSession { .. }
        ));
        // Off: no sessions at all.
        let off = FetchSessions::new(0);
        assert!(matches!(
            off.begin(&mut request(0, 0, &small(5)), 12),
            Context::Sessionless
        ));
    }

    #[test]
    fn an_answer_to_an_abandoned_request_leaves_the_session_alone() {
        let sessions = FetchSessions::new(10);
        let mut r = request(0, 0, &[("a", 0, 0)]);
        let c = sessions.begin(&mut r, 12);
        let id = session_of(&c);
        c.finish(&mut answer(&r, &|_, _| 5, &[]));
        let mut r1 = request(id, 1, &[]);
        let old = sessions.begin(&mut r1, 12);
        let mut r2 = request(id, 2, &[]);
        let new = sessions.begin(&mut r2, 12);
        // The abandoned one would have told hw 9; the session must still answer it.
        old.finish(&mut answer(&r1, &|_, _| 9, &[]));
        let mut f = answer(&r2, &|_, _| 9, &[]);
        new.finish(&mut f);
        assert_eq!(answered(&f).len(), 1);
    }
}
