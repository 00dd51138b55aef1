//! The offsets of partitions served in this zone and led in another, fed by their leaders.
//!
//! A broker that serves fetches for a partition it does not lead needs the partition's epoch,
//! start, high watermark and the end of what is in object storage (what it can read). It
//! subscribes to them here: one long poll per leader ([`WatchOffsets`]) for all the partitions
//! this broker serves from it, answered by the leader as soon as any of them changes. Fetches
//! wait on the partition's [`watch`] receiver, as fetches of a local partition wait on its high
//! watermark. A subscription nobody used for [`IDLE`] is dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use crate::handoff::{Leader, NOT_LEADER_OR_FOLLOWER};
use crate::peer::{Channel, Peer, Peers};
use crate::wire::{self, Offsets, WatchOffsets};
use weir_meta::RangeInfo;

/// Fed ranges a subscription keeps.
const RANGES_KEPT: usize = 256;

/// A subscription unused this long is dropped.
const IDLE: Duration = Duration::from_secs(30);

/// How long a leader holds a poll when nothing changes.
const POLL_WAIT_MS: u32 = 500;

/// The pause after a failed poll.
const RETRY: Duration = Duration::from_millis(100);

type Key = (String, i32);

struct Sub {
    tx: watch::Sender<Option<Offsets>>,
    /// The partition's ranges the leader fed, oldest first, contiguous (at most
    /// [`RANGES_KEPT`]).
    ranges: VecDeque<RangeInfo>,
    leader: Leader,
    used: Instant,
    /// A reader needs the leader's current offsets now (it asked beyond the high watermark
    /// known here): the next poll claims to know nothing, so the leader answers at once.
    stale: bool,
}

struct Poller {
    /// Woken when a subscription is added, so the poll is sent again at once.
    poke: Arc<Notify>,
}

pub struct Feed {
    peers: Arc<Peers>,
    subs: Mutex<HashMap<Key, Sub>>,
    pollers: Mutex<HashMap<i32, Poller>>,
}

impl Feed {
    pub fn new(peers: Arc<Peers>) -> Arc<Feed> {
        Arc::new(Feed {
            peers,
            subs: Mutex::new(HashMap::new()),
            pollers: Mutex::new(HashMap::new()),
        })
    }

    fn subs(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Sub>> {
        self.subs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The offsets of `topic`-`partition` as `leader` reports them (`None` until its first
    /// answer). Subscribes, or moves the subscription to a new leader.
    pub fn offsets(
        self: &Arc<Self>,
        topic: &str,
        partition: i32,
        leader: &Leader,
    ) -> watch::Receiver<Option<Offsets>> {
        let key = (topic.to_string(), partition);
        let (rx, new) = {
            let mut subs = self.subs();
            match subs.get_mut(&key) {
                Some(s) if s.leader == *leader => {
                    s.used = Instant::now();
                    (s.tx.subscribe(), false)
                }
                _ => {
                    let (tx, rx) = watch::channel(None);
                    subs.insert(
                        key,
                        Sub {
                            tx,
                            ranges: VecDeque::new(),
                            leader: leader.clone(),
                            used: Instant::now(),
                            stale: false,
                        },
                    );
                    (rx, true)
                }
            }
        };
        if new {
            self.poller_for(leader);
        }
        rx
    }

    /// The ranges of `topic`-`partition` its leader fed that end after `from`, oldest first and
    /// contiguous: a read of them needs no look-up in the metadata store.
    pub fn ranges(&self, topic: &str, partition: i32, from: i64) -> Vec<RangeInfo> {
        let subs = self.subs();
        let Some(s) = subs.get(&(topic.to_string(), partition)) else {
            return Vec::new();
        };
        s.ranges
            .iter()
            .filter(|r| i64::try_from(r.end_offset).is_ok_and(|e| e > from))
            .cloned()
            .collect()
    }

    /// Asks `topic`-`partition`'s leader for its offsets now, rather than when they next
    /// change; the subscription's receivers see the answer.
    pub fn refresh(self: &Arc<Self>, topic: &str, partition: i32) {
        let leader = {
            let mut subs = self.subs();
            let Some(s) = subs.get_mut(&(topic.to_string(), partition)) else {
                return;
            };
            s.stale = true;
            s.leader.clone()
        };
        self.poller_for(&leader);
    }

    /// Starts the poller of `leader`, or pokes it so that it polls the new subscription now.
    fn poller_for(self: &Arc<Self>, leader: &Leader) {
        let mut pollers = self.pollers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pollers.get(&leader.node_id) {
            p.poke.notify_one();
            return;
        }
        let poke = Arc::new(Notify::new());
        pollers.insert(
            leader.node_id,
            Poller {
                poke: Arc::clone(&poke),
            },
        );
        let this = Arc::clone(self);
        let node = leader.node_id;
        tokio::spawn(async move { this.poll(node, poke).await });
    }

    /// Polls one leader for every partition subscribed from it, until there are none.
    async fn poll(self: Arc<Self>, node: i32, poke: Arc<Notify>) {
        loop {
            let (leader, partitions) = {
                let mut subs = self.subs();
                subs.retain(|_, s| s.used.elapsed() < IDLE);
                let mine: Vec<_> = subs
                    .iter()
                    .filter(|(_, s)| s.leader.node_id == node)
                    .collect();
                let Some((_, first)) = mine.first() else {
                    // Under the subscriptions' lock: a subscription added after this starts a
                    // new poller.
                    self.pollers
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&node);
                    return;
                };
                let leader = first.leader.clone();
                let partitions: Vec<_> = mine
                    .iter()
                    .map(|((t, p), s)| {
                        // Nothing known yet: a value the leader never reports, so that it
                        // answers at once.
                        let unknown = Offsets {
                            error: -1,
                            ..Offsets::default()
                        };
                        let known = if s.stale {
                            unknown
                        } else {
                            (*s.tx.borrow()).unwrap_or(unknown)
                        };
                        (t.clone(), *p, known)
                    })
                    .collect();
                (leader, partitions)
            };
            let request = WatchOffsets {
                max_wait_ms: POLL_WAIT_MS,
                partitions,
            };
            let answer = self.peers.send(
                Peer {
                    node_id: leader.node_id,
                    internal_addr: &leader.internal_addr,
                    zone: &leader.zone,
                },
                Channel::Feed,
                wire::WATCH_OFFSETS,
                request.encode(),
            );
            let answer = tokio::select! {
                a = answer => a,
                _ = poke.notified() => continue,
                _ = tokio::time::sleep(Duration::from_millis(u64::from(POLL_WAIT_MS) * 4)) => continue,
            };
            let decoded = answer
                .map_err(|e| e.to_string())
                .and_then(|b| wire::decode_fed(b).map_err(|e| e.to_string()));
            match decoded {
                Ok(answers) => {
                    let mut subs = self.subs();
                    for fed in answers {
                        let o = fed.offsets;
                        if let Some(s) = subs.get_mut(&(fed.topic, fed.partition)) {
                            if s.leader.node_id != node {
                                continue;
                            }
                            keep_ranges(&mut s.ranges, fed.ranges, o.start);
                            if std::mem::take(&mut s.stale) {
                                // A reader waiting on a refresh learns that the answer came,
                                // changed or not.
                                s.tx.send_replace(Some(o));
                            } else {
                                s.tx.send_if_modified(|v| {
                                    let changed = *v != Some(o);
                                    *v = Some(o);
                                    changed
                                });
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(node, error = %e, "polling a leader's offsets failed");
                    {
                        let subs = self.subs();
                        for s in subs.values().filter(|s| s.leader.node_id == node) {
                            s.tx.send_replace(Some(Offsets {
                                error: NOT_LEADER_OR_FOLLOWER,
                                ..Offsets::default()
                            }));
                        }
                    }
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }
}

/// Adds fed ranges to what a subscription keeps: contiguous, oldest first, none wholly below
/// the partition's start, at most [`RANGES_KEPT`]. Ranges that do not continue the kept ones
/// (the feed started over, compaction replaced objects) replace them.
fn keep_ranges(kept: &mut VecDeque<RangeInfo>, fed: Vec<RangeInfo>, start: i64) {
    for r in fed {
        match kept.back() {
            Some(last) if r.end_offset <= last.end_offset => continue,
            Some(last) if r.start_offset != last.end_offset => kept.clear(),
            _ => {}
        }
        kept.push_back(r);
    }
    while kept
        .front()
        .is_some_and(|r| i64::try_from(r.end_offset).is_ok_and(|e| e <= start))
        || kept.len() > RANGES_KEPT
    {
        kept.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: u64, end: u64) -> RangeInfo {
        RangeInfo {
            stream_id: 1,
            start_offset: start,
            end_offset: end,
            object_id: start,
            object_key: format!("k/{start}"),
            object_size: 10,
            position: 0,
            size: 10,
            max_timestamp: 0,
        }
    }

    #[test]
    fn kept_ranges_stay_contiguous() {
        let mut kept = VecDeque::new();
        keep_ranges(&mut kept, vec![range(0, 5), range(5, 9)], 0);
        // Repeated and continued.
        keep_ranges(&mut kept, vec![range(5, 9), range(9, 12)], 0);
        let ends: Vec<u64> = kept.iter().map(|r| r.end_offset).collect();
        assert_eq!(ends, vec![5, 9, 12]);
        // A gap starts over.
        keep_ranges(&mut kept, vec![range(20, 25)], 0);
        assert_eq!(kept.len(), 1);
        // Below the start: dropped.
        keep_ranges(&mut kept, vec![range(25, 30)], 26);
        let starts: Vec<u64> = kept.iter().map(|r| r.start_offset).collect();
        assert_eq!(starts, vec![25]);
    }

    #[test]
    fn at_most_the_newest_ranges_are_kept() {
        let mut kept = VecDeque::new();
        let fed: Vec<_> = (0..RANGES_KEPT as u64 + 44)
            .map(|i| range(i, i + 1))
            .collect();
        keep_ranges(&mut kept, fed, 0);
        assert_eq!(kept.len(), RANGES_KEPT);
        assert_eq!(kept.front().map(|r| r.start_offset), Some(44));
    }
}
