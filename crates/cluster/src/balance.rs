//! The balancer's decisions, as a pure function of the cluster's state and its measured load:
//! which partitions to move so that no broker is over its capacity and every broker's network
//! in and out stay within a tolerance of the mean.
//!
//! Moving a partition costs a few hundred milliseconds of one partition's writes ("2 of 9": no
//! data is copied), so balancing is a decision problem only. The goals, in order:
//!
//! 1. **Capacity**: no broker's bytes in plus out over `capacity_bytes_per_sec`.
//! 2. **Network**: every broker's bytes in, and its bytes out, within `tolerance` of the mean
//!    of the brokers that take partitions.
//! 3. **Counts**: while the bytes are balanced (or too few to matter), partition counts differ
//!    by at most one, so that a broker that joins an idle cluster gets its share too.
//! 4. **Zones**: then each topic's partitions spread over the zones (their leaders' zones
//!    differ by at most one partition), so that losing a zone loses no topic's majority of
//!    leaders, by moves that keep the goals above met.
//!
//! Of two equally good targets the balancer also takes the one whose zone holds fewer of the
//! topic's partitions.
//!
//! Hysteresis, so that it does not oscillate: a goal acts only outside its tolerance band, a move
//! must lower the busier side's load below where it was (never swap a hot partition back and
//! forth), a partition moved recently (`cooldown`) stays where it is, and a round makes at most
//! `max_moves` moves, each computed on the state the previous ones leave.
//!
//! Brokers that take no part: those not live (session expired, shutting down, fenced) and those
//! whose load report is missing or stale (a broker too slow to report is not given more work).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use weir_meta::{BrokerLoad, PartitionLoad};

use crate::ClusterView;

/// The balancer's settings (`[balancer]` in the configuration).
#[derive(Debug, Clone)]
pub struct BalancerConfig {
    /// Whether the controller balances at all.
    pub enabled: bool,
    /// How often the controller runs a round, and how often brokers report their load.
    pub interval: Duration,
    /// How far from the mean a broker's bytes in or out may be (0.1: 10 %).
    pub tolerance: f64,
    /// Moves per round at most.
    pub max_moves: usize,
    /// A partition moved this recently is not moved again.
    pub cooldown: Duration,
    /// A broker's bytes in plus out per second that it must not exceed; 0: no limit.
    pub capacity_bytes_per_sec: f64,
    /// Imbalances smaller than this (bytes per second) are noise: counts decide instead.
    pub min_bytes_per_sec: f64,
    /// A load report older than this excludes its broker.
    pub stale_after: Duration,
}

impl Default for BalancerConfig {
    fn default() -> Self {
        BalancerConfig {
            enabled: true,
            interval: Duration::from_secs(2),
            tolerance: 0.1,
            max_moves: 16,
            cooldown: Duration::from_secs(30),
            capacity_bytes_per_sec: 0.0,
            min_bytes_per_sec: 256.0 * 1024.0,
            stale_after: Duration::from_secs(20),
        }
    }
}

/// Which goal a move serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Goal {
    Capacity,
    BytesIn,
    BytesOut,
    Count,
    Zones,
}

impl Goal {
    pub fn as_str(self) -> &'static str {
        match self {
            Goal::Capacity => "capacity",
            Goal::BytesIn => "bytes_in",
            Goal::BytesOut => "bytes_out",
            Goal::Count => "count",
            Goal::Zones => "zones",
        }
    }
}

/// One move and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub stream_id: u64,
    pub topic: String,
    pub partition: u32,
    pub from: i32,
    pub to: i32,
    pub goal: Goal,
    /// The loads that made it: the source's and target's before the move, and the mean.
    pub reason: String,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-{} from {} to {} ({}: {})",
            self.topic,
            self.partition,
            self.from,
            self.to,
            self.goal.as_str(),
            self.reason
        )
    }
}

/// How far the cluster is from balanced: for each of bytes in and out, the largest deviation of
/// a broker from the mean, relative to the mean (0 when there is no load).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Imbalance {
    pub bytes_in: f64,
    pub bytes_out: f64,
    /// Bytes in plus out of all the brokers that take partitions, per second.
    pub total_bytes_per_sec: f64,
    /// The brokers that take partitions.
    pub brokers: usize,
}

#[derive(Debug, Clone, Copy, Default)]
struct Bytes {
    inb: f64,
    out: f64,
}

impl Bytes {
    fn get(self, goal: Goal) -> f64 {
        match goal {
            Goal::BytesIn => self.inb,
            Goal::BytesOut => self.out,
            _ => self.inb + self.out,
        }
    }
}

struct Part<'a> {
    stream_id: u64,
    topic: &'a str,
    partition: u32,
    on: i32,
    bytes: Bytes,
}

/// The cluster as a round sees it, with each broker's load and partition count and each
/// topic's partitions per zone kept up to date as moves are planned (a round over thousands of
/// partitions must not rescan them for every candidate).
struct State<'a> {
    /// Brokers that take part, with their zone.
    brokers: Vec<(i32, &'a str)>,
    parts: Vec<Part<'a>>,
    zone_of: HashMap<i32, &'a str>,
    /// Index in `parts` by stream id.
    index: HashMap<u64, usize>,
    loads: HashMap<i32, Bytes>,
    counts: HashMap<i32, usize>,
    /// Partitions of (topic, zone).
    topic_zone: HashMap<(&'a str, &'a str), usize>,
}

impl<'a> State<'a> {
    fn new(
        brokers: Vec<(i32, &'a str)>,
        parts: Vec<Part<'a>>,
        zone_of: HashMap<i32, &'a str>,
    ) -> Self {
        let mut s = State {
            brokers,
            index: parts
                .iter()
                .enumerate()
                .map(|(i, p)| (p.stream_id, i))
                .collect(),
            parts,
            zone_of,
            loads: HashMap::new(),
            counts: HashMap::new(),
            topic_zone: HashMap::new(),
        };
        for i in 0..s.parts.len() {
            s.add(i, 1);
        }
        s
    }

    fn zone(&self, node: i32) -> &'a str {
        self.zone_of.get(&node).copied().unwrap_or("")
    }

    /// Counts partition `i` on its broker (`sign` 1) or takes it off (-1).
    fn add(&mut self, i: usize, sign: i32) {
        let (on, topic, bytes) = (self.parts[i].on, self.parts[i].topic, self.parts[i].bytes);
        let zone = self.zone(on);
        let f = f64::from(sign);
        let l = self.loads.entry(on).or_default();
        l.inb += f * bytes.inb;
        l.out += f * bytes.out;
        let c = self.counts.entry(on).or_default();
        let z = self.topic_zone.entry((topic, zone)).or_default();
        if sign > 0 {
            *c += 1;
            *z += 1;
        } else {
            *c = c.saturating_sub(1);
            *z = z.saturating_sub(1);
        }
    }

    /// Plans a move: the partition is on `to` from now on.
    fn move_part(&mut self, stream_id: u64, from: i32, to: i32) {
        let Some(&i) = self.index.get(&stream_id) else {
            return;
        };
        debug_assert_eq!(
            self.parts[i].on, from,
            "a move starts where the partition is"
        );
        self.add(i, -1);
        self.parts[i].on = to;
        self.add(i, 1);
    }

    fn load(&self, node: i32) -> Bytes {
        self.loads.get(&node).copied().unwrap_or_default()
    }

    fn count(&self, node: i32) -> usize {
        self.counts.get(&node).copied().unwrap_or(0)
    }

    /// How many of `topic`'s partitions zone `zone` holds.
    fn in_zone(&self, topic: &str, zone: &str) -> usize {
        self.topic_zone.get(&(topic, zone)).copied().unwrap_or(0)
    }

    fn mean(&self) -> Bytes {
        let n = self.brokers.len().max(1) as f64;
        let mut b = Bytes::default();
        for &(id, _) in &self.brokers {
            let l = self.load(id);
            b.inb += l.inb / n;
            b.out += l.out / n;
        }
        b
    }

    /// How many of `topic`'s partitions the zone of `node` holds.
    fn topic_in_zone(&self, topic: &str, node: i32) -> usize {
        self.in_zone(topic, self.zone(node))
    }
}

/// The node id of a pseudo-report carrying partition loads remembered from earlier rounds, for
/// partitions that no broker reports now: a partition that just moved has no rate at its new
/// leader until its second sample, and counting it as idle would pile more onto that broker.
/// Real reports take precedence over it.
pub const REMEMBERED: i32 = i32::MIN;

/// The brokers' measured loads, by partition stream id (from the report of the partition's
/// current leader, else remembered) and the brokers with a fresh report.
fn measured(
    loads: &[BrokerLoad],
    stale_after: Duration,
) -> (HashMap<u64, PartitionLoad>, Vec<i32>) {
    let stale = i64::try_from(stale_after.as_millis()).unwrap_or(i64::MAX);
    let mut parts = HashMap::new();
    let mut fresh = Vec::new();
    for l in loads.iter().filter(|l| l.node_id == REMEMBERED) {
        for p in &l.partitions {
            parts.insert(p.stream_id, *p);
        }
    }
    for l in loads.iter().filter(|l| l.node_id != REMEMBERED) {
        if l.age_ms > stale {
            continue;
        }
        fresh.push(l.node_id);
        for p in &l.partitions {
            parts.insert(p.stream_id, *p);
        }
    }
    (parts, fresh)
}

fn state<'a>(view: &'a ClusterView, loads: &[BrokerLoad], config: &BalancerConfig) -> State<'a> {
    let (by_stream, fresh) = measured(loads, config.stale_after);
    let brokers: Vec<(i32, &str)> = view
        .live_brokers()
        .filter(|b| fresh.contains(&b.node_id))
        .map(|b| (b.node_id, b.zone.as_str()))
        .collect();
    let zone_of = view
        .brokers
        .iter()
        .map(|b| (b.node_id, b.zone.as_str()))
        .collect();
    // Partitions on their way somewhere are left to finish; so are those of brokers that take
    // no part (their load still counts nowhere: it cannot be moved from here).
    let parts = view
        .assignments
        .iter()
        .filter(|a| a.target.is_none())
        .filter_map(|a| {
            let on = a.leader?;
            brokers.iter().any(|&(id, _)| id == on).then(|| {
                let l = by_stream.get(&a.stream_id);
                Part {
                    stream_id: a.stream_id,
                    topic: a.topic.as_str(),
                    partition: a.partition,
                    on,
                    bytes: Bytes {
                        inb: l.map_or(0.0, |l| l.bytes_in),
                        out: l.map_or(0.0, |l| l.bytes_out),
                    },
                }
            })
        })
        .collect();
    State::new(brokers, parts, zone_of)
}

/// How far the cluster is from balanced now (for metrics and the autoscaling gauge).
pub fn imbalance(view: &ClusterView, loads: &[BrokerLoad], config: &BalancerConfig) -> Imbalance {
    let s = state(view, loads, config);
    let mean = s.mean();
    let dev = |goal: Goal| {
        let m = mean.get(goal);
        if m <= 0.0 {
            return 0.0;
        }
        s.brokers
            .iter()
            .map(|&(id, _)| (s.load(id).get(goal) - m).abs() / m)
            .fold(0.0, f64::max)
    };
    Imbalance {
        bytes_in: dev(Goal::BytesIn),
        bytes_out: dev(Goal::BytesOut),
        total_bytes_per_sec: s
            .brokers
            .iter()
            .map(|&(id, _)| s.load(id).get(Goal::Capacity))
            .sum(),
        brokers: s.brokers.len(),
    }
}

/// The moves of one round. `cooling` holds the partitions (by stream id) moved within the
/// cooldown: they stay where they are.
pub fn plan(
    view: &ClusterView,
    loads: &[BrokerLoad],
    cooling: &HashSet<u64>,
    config: &BalancerConfig,
) -> Vec<Decision> {
    let mut s = state(view, loads, config);
    if s.brokers.len() < 2 {
        return Vec::new();
    }
    let movable = |p: &Part| !cooling.contains(&p.stream_id);
    let mut out = Vec::new();
    while out.len() < config.max_moves {
        let ds = match capacity_move(&s, config, &movable)
            .or_else(|| bytes_move(&s, config, &movable))
            .or_else(|| count_move(&s, config, &movable))
        {
            Some(d) => vec![d],
            None => zone_move(&s, config, &movable),
        };
        // A swap is two moves: both or neither.
        if ds.is_empty() || out.len() + ds.len() > config.max_moves {
            break;
        }
        for d in ds {
            s.move_part(d.stream_id, d.from, d.to);
            out.push(d);
        }
    }
    out
}

fn decision(p: &Part, to: i32, goal: Goal, reason: String) -> Decision {
    Decision {
        stream_id: p.stream_id,
        topic: p.topic.to_string(),
        partition: p.partition,
        from: p.on,
        to,
        goal,
        reason,
    }
}

/// Brokers by increasing `goal` load, the zone tie-break for `topic` after.
fn targets(s: &State, goal: Goal, topic: &str, except: i32) -> Vec<i32> {
    let mut t: Vec<(f64, usize, i32)> = s
        .brokers
        .iter()
        .filter(|&&(id, _)| id != except)
        .map(|&(id, _)| (s.load(id).get(goal), s.topic_in_zone(topic, id), id))
        .collect();
    t.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    t.into_iter().map(|(_, _, id)| id).collect()
}

fn capacity_move(
    s: &State,
    config: &BalancerConfig,
    movable: &dyn Fn(&Part) -> bool,
) -> Option<Decision> {
    let cap = config.capacity_bytes_per_sec;
    if cap <= 0.0 {
        return None;
    }
    let goal = Goal::Capacity;
    let (&(over, _), load) = s
        .brokers
        .iter()
        .map(|b| (b, s.load(b.0).get(goal)))
        .filter(|&(_, l)| l > cap)
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    // The busiest partition that fits somewhere without taking that broker over capacity.
    let mut mine: Vec<&Part> = s
        .parts
        .iter()
        .filter(|p| p.on == over && movable(p))
        .collect();
    mine.sort_by(|a, b| b.bytes.get(goal).total_cmp(&a.bytes.get(goal)));
    for p in mine {
        let size = p.bytes.get(goal);
        if size <= 0.0 {
            break;
        }
        for to in targets(s, goal, p.topic, over) {
            let there = s.load(to).get(goal);
            if there + size <= cap {
                return Some(decision(
                    p,
                    to,
                    goal,
                    format!("{over} carries {load:.0} B/s over its capacity {cap:.0}; {to} carries {there:.0}"),
                ));
            }
        }
    }
    None
}

fn bytes_move(
    s: &State,
    config: &BalancerConfig,
    movable: &dyn Fn(&Part) -> bool,
) -> Option<Decision> {
    let mean = s.mean();
    // The dimension furthest out of its band first.
    let mut goals: Vec<(f64, Goal)> = [Goal::BytesIn, Goal::BytesOut]
        .into_iter()
        .filter_map(|goal| {
            let m = mean.get(goal);
            let (_, hi) = s
                .brokers
                .iter()
                .map(|&(id, _)| (id, s.load(id).get(goal)))
                .max_by(|a, b| a.1.total_cmp(&b.1))?;
            let excess = hi - m;
            (m > 0.0 && hi > m * (1.0 + config.tolerance) && excess >= config.min_bytes_per_sec)
                .then_some((excess / m, goal))
        })
        .collect();
    goals.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, goal) in goals {
        let m = mean.get(goal);
        let other = if goal == Goal::BytesIn {
            Goal::BytesOut
        } else {
            Goal::BytesIn
        };
        let other_cap = mean.get(other) * (1.0 + config.tolerance);
        let mut from: Vec<(f64, i32)> = s
            .brokers
            .iter()
            .map(|&(id, _)| (s.load(id).get(goal), id))
            .filter(|&(l, _)| l > m * (1.0 + config.tolerance))
            .collect();
        from.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (src_load, src) in from {
            let mut best: Option<(f64, &Part, i32)> = None;
            for to in targets(s, goal, "", src) {
                let dst_load = s.load(to).get(goal);
                let dst_other = s.load(to).get(other);
                if dst_load >= src_load {
                    break;
                }
                for p in s.parts.iter().filter(|p| p.on == src && movable(p)) {
                    let size = p.bytes.get(goal);
                    // Only moves that lower the peak: the target ends below where the source
                    // was. Anything else could swap a hot partition back and forth.
                    if size <= 0.0 || dst_load + size >= src_load {
                        continue;
                    }
                    // Nor may it take the target out of the other dimension's band.
                    let other_after = dst_other + p.bytes.get(other);
                    if other_after > other_cap && other_after > dst_other && mean.get(other) > 0.0 {
                        continue;
                    }
                    let peak = (src_load - size).max(dst_load + size);
                    let tie = s.topic_in_zone(p.topic, to) as f64 * 1e-9;
                    if best.is_none_or(|(b, _, _)| peak + tie < b) {
                        best = Some((peak + tie, p, to));
                    }
                }
            }
            if let Some((_, p, to)) = best {
                let dst_load = s.load(to).get(goal);
                return Some(decision(
                    p,
                    to,
                    goal,
                    format!(
                        "{src} {src_load:.0} B/s, {to} {dst_load:.0} B/s, mean {m:.0} B/s, partition {:.0} B/s",
                        p.bytes.get(goal)
                    ),
                ));
            }
        }
    }
    None
}

fn count_move(
    s: &State,
    config: &BalancerConfig,
    movable: &dyn Fn(&Part) -> bool,
) -> Option<Decision> {
    // Counts decide only while the bytes are balanced or negligible: moving an idle partition
    // onto a busy broker is harmless, the other way round is the bytes goals' business.
    let mean = s.mean();
    for goal in [Goal::BytesIn, Goal::BytesOut] {
        let m = mean.get(goal);
        let hi = s
            .brokers
            .iter()
            .map(|&(id, _)| s.load(id).get(goal))
            .fold(0.0, f64::max);
        if hi - m >= config.min_bytes_per_sec && hi > m * (1.0 + config.tolerance) {
            return None;
        }
    }
    let (src, n_src) = s
        .brokers
        .iter()
        .map(|&(id, _)| (id, s.count(id)))
        .max_by_key(|&(id, n)| (n, std::cmp::Reverse(id)))?;
    let (dst, n_dst) = s
        .brokers
        .iter()
        .map(|&(id, _)| (id, s.count(id)))
        .min_by_key(|&(id, n)| (n, id))?;
    if n_src <= n_dst + 1 {
        return None;
    }
    // The lightest partition, so the bytes stay as balanced as they are; never one that takes
    // the target out of a bytes band (the bytes goals would move it back: the two would take
    // turns for ever).
    let acceptable = |goal: Goal, load: f64| {
        let m = mean.get(goal);
        load <= m * (1.0 + config.tolerance) || load - m < config.min_bytes_per_sec
    };
    let dst_load = s.load(dst);
    let p = s
        .parts
        .iter()
        .filter(|p| p.on == src && movable(p))
        .filter(|p| {
            [Goal::BytesIn, Goal::BytesOut]
                .into_iter()
                .all(|g| acceptable(g, dst_load.get(g) + p.bytes.get(g)))
        })
        .min_by(|a, b| {
            a.bytes
                .get(Goal::Capacity)
                .total_cmp(&b.bytes.get(Goal::Capacity))
                .then(
                    s.topic_in_zone(a.topic, dst)
                        .cmp(&s.topic_in_zone(b.topic, dst)),
                )
        })?;
    Some(decision(
        p,
        dst,
        Goal::Count,
        format!("{src} leads {n_src} partitions, {dst} leads {n_dst}"),
    ))
}

fn zone_move(s: &State, config: &BalancerConfig, movable: &dyn Fn(&Part) -> bool) -> Vec<Decision> {
    let mut zones: Vec<&str> = s.brokers.iter().map(|&(_, z)| z).collect();
    zones.sort_unstable();
    zones.dedup();
    if zones.len() < 2 {
        return Vec::new();
    }
    let mean = s.mean();
    let acceptable = |goal: Goal, load: f64| {
        let m = mean.get(goal);
        load <= m * (1.0 + config.tolerance) || load - m < config.min_bytes_per_sec
    };
    let zone = |p: &Part| s.zone(p.on);
    let in_zone = |topic: &str, z: &str| s.in_zone(topic, z);
    let fits = |p: &Part, to: i32, gives: Option<&Part>| {
        let load = s.load(to);
        [Goal::BytesIn, Goal::BytesOut].into_iter().all(|g| {
            let back = gives.map_or(0.0, |q| q.bytes.get(g));
            acceptable(g, load.get(g) + p.bytes.get(g) - back)
        })
    };
    let mut topics: Vec<&str> = s.parts.iter().map(|p| p.topic).collect();
    topics.sort_unstable();
    topics.dedup();
    for topic in topics {
        let Some((most, n_most)) = zones
            .iter()
            .map(|&z| (z, in_zone(topic, z)))
            .max_by_key(|&(z, n)| (n, std::cmp::Reverse(z)))
        else {
            continue;
        };
        let Some((least, n_least)) = zones
            .iter()
            .map(|&z| (z, in_zone(topic, z)))
            .min_by_key(|&(z, n)| (n, z))
        else {
            continue;
        };
        if n_most <= n_least + 1 {
            continue;
        }
        let reason =
            format!("{topic} has {n_most} partitions in zone {most}, {n_least} in {least}");
        let mut from: Vec<&Part> = s
            .parts
            .iter()
            .filter(|p| p.topic == topic && zone(p) == most && movable(p))
            .collect();
        from.sort_by(|a, b| {
            a.bytes
                .get(Goal::Capacity)
                .total_cmp(&b.bytes.get(Goal::Capacity))
        });
        let mut to: Vec<i32> = s
            .brokers
            .iter()
            .filter(|&&(_, z)| z == least)
            .map(|&(id, _)| id)
            .collect();
        to.sort_by_key(|&id| (s.count(id), id));
        // Partition counts after moving one from `a` to `b`: still within one of each other?
        let counts_even_after = |a: i32, b: i32| {
            let after: Vec<usize> = s
                .brokers
                .iter()
                .map(|&(id, _)| {
                    let n = s.count(id);
                    if id == a {
                        n.saturating_sub(1)
                    } else if id == b {
                        n + 1
                    } else {
                        n
                    }
                })
                .collect();
            after.iter().max().unwrap_or(&0) - after.iter().min().unwrap_or(&0) <= 1
        };
        for p in &from {
            for &t in &to {
                // A plain move, if partition counts stay within one of each other.
                if counts_even_after(p.on, t) && fits(p, t, None) {
                    return vec![decision(p, t, Goal::Zones, reason)];
                }
                // Else a swap: a partition of another topic comes back from `t` to `p`'s
                // broker, if that does not leave its own topic's zones further apart than one.
                for q in s
                    .parts
                    .iter()
                    .filter(|q| q.on == t && q.topic != topic && movable(q))
                {
                    let (q_most, q_least) =
                        (in_zone(q.topic, least) - 1, in_zone(q.topic, most) + 1);
                    if q_least > q_most + 1 || !fits(p, t, Some(q)) || !fits(q, p.on, Some(p)) {
                        continue;
                    }
                    return vec![
                        decision(p, t, Goal::Zones, reason.clone()),
                        decision(
                            q,
                            p.on,
                            Goal::Zones,
                            format!("swapped with {}-{}", p.topic, p.partition),
                        ),
                    ];
                }
            }
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tests::broker;
    use weir_meta::{Assignment, BrokerState};

    const MIB: f64 = 1024.0 * 1024.0;

    fn assignment(i: u32, leader: i32) -> Assignment {
        Assignment {
            topic: "t".into(),
            partition: i,
            stream_id: u64::from(i) + 1,
            leader: Some(leader),
            target: None,
            epoch: 1,
        }
    }

    /// `brokers` live brokers; partition i on `on[i]` carrying `bytes[i]` in and out.
    fn cluster(brokers: i32, on: &[i32], bytes: &[f64]) -> (ClusterView, Vec<BrokerLoad>) {
        let view = ClusterView::new(
            (1..=brokers)
                .map(|i| broker(i, "z", BrokerState::Running, true))
                .collect(),
            None,
            on.iter()
                .enumerate()
                .map(|(i, &b)| assignment(i as u32, b))
                .collect(),
        );
        (view, loads_of(brokers, on, bytes))
    }

    fn loads_of(brokers: i32, on: &[i32], bytes: &[f64]) -> Vec<BrokerLoad> {
        (1..=brokers)
            .map(|b| BrokerLoad {
                node_id: b,
                age_ms: 0,
                cpu: 0.0,
                partitions: on
                    .iter()
                    .enumerate()
                    .filter(|&(_, &o)| o == b)
                    .map(|(i, _)| PartitionLoad {
                        stream_id: i as u64 + 1,
                        bytes_in: bytes[i],
                        bytes_out: bytes[i],
                        requests: 0.0,
                    })
                    .collect(),
            })
            .collect()
    }

    /// Runs rounds (applying each round's moves) until one makes none; returns the placement
    /// and the number of moves.
    fn settle(
        brokers: i32,
        on: &[i32],
        bytes: &[f64],
        config: &BalancerConfig,
    ) -> (Vec<i32>, usize, usize) {
        let mut on = on.to_vec();
        let mut moves = 0;
        for round in 1..=50 {
            let (view, loads) = cluster(brokers, &on, bytes);
            let d = plan(&view, &loads, &HashSet::new(), config);
            assert!(d.len() <= config.max_moves);
            if d.is_empty() {
                return (on, moves, round);
            }
            for m in d {
                assert_eq!(on[m.partition as usize], m.from);
                on[m.partition as usize] = m.to;
                moves += 1;
            }
        }
        panic!("no settled placement after 50 rounds: {on:?}");
    }

    fn spread(brokers: i32, on: &[i32], bytes: &[f64]) -> f64 {
        let loads: Vec<f64> = (1..=brokers)
            .map(|b| {
                on.iter()
                    .zip(bytes)
                    .filter(|(&o, _)| o == b)
                    .map(|(_, &x)| x)
                    .sum()
            })
            .collect();
        let mean = loads.iter().sum::<f64>() / loads.len() as f64;
        loads
            .iter()
            .map(|l| (l - mean).abs() / mean)
            .fold(0.0, f64::max)
    }

    #[test]
    fn skewed_load_is_spread_within_the_tolerance() {
        // 12 equal partitions, all on broker 1 of 3.
        let on = vec![1; 12];
        let bytes = vec![MIB; 12];
        let config = BalancerConfig::default();
        let (after, moves, _) = settle(3, &on, &bytes, &config);
        assert!(spread(3, &after, &bytes) <= 0.1, "{after:?}");
        assert_eq!(moves, 8, "the fewest moves: 4 to each of the two others");
    }

    #[test]
    fn uneven_partitions_settle_and_never_oscillate() {
        let bytes: Vec<f64> = (0..24).map(|i| MIB * (1.0 + (i * 7 % 11) as f64)).collect();
        let on: Vec<i32> = (0..24).map(|i| if i < 20 { 1 } else { 2 }).collect();
        let config = BalancerConfig::default();
        let (after, _, rounds) = settle(4, &on, &bytes, &config);
        assert!(
            spread(4, &after, &bytes) <= 0.1,
            "{:.3} {after:?}",
            spread(4, &after, &bytes)
        );
        assert!(rounds <= 6, "{rounds} rounds");
        // Settled means settled: a balanced cluster gets no move.
        let (view, loads) = cluster(4, &after, &bytes);
        assert!(plan(&view, &loads, &HashSet::new(), &config).is_empty());
    }

    #[test]
    fn a_joining_broker_gets_its_share_of_bytes_and_of_idle_partitions() {
        // Busy: broker 3 joins two brokers carrying 6 partitions each.
        let on: Vec<i32> = (0..12).map(|i| 1 + i % 2).collect();
        let bytes = vec![2.0 * MIB; 12];
        let (after, _, _) = settle(3, &on, &bytes, &BalancerConfig::default());
        assert_eq!(after.iter().filter(|&&b| b == 3).count(), 4, "{after:?}");
        // Idle: counts decide.
        let idle = vec![0.0; 12];
        let (after, _, _) = settle(3, &on, &idle, &BalancerConfig::default());
        assert_eq!(after.iter().filter(|&&b| b == 3).count(), 4, "{after:?}");
    }

    #[test]
    fn a_balanced_cluster_and_small_imbalances_are_left_alone() {
        let on: Vec<i32> = (0..9).map(|i| 1 + i % 3).collect();
        // Broker 1 carries 5 % more than the mean: inside the band.
        let mut bytes = vec![MIB; 9];
        bytes[0] = 1.15 * MIB;
        let (view, loads) = cluster(3, &on, &bytes);
        assert!(plan(&view, &loads, &HashSet::new(), &BalancerConfig::default()).is_empty());
        // A large relative imbalance of a few bytes is noise.
        let tiny: Vec<f64> = (0..9)
            .map(|i| if i % 3 == 0 { 1000.0 } else { 10.0 })
            .collect();
        let (view, loads) = cluster(3, &on, &tiny);
        assert!(plan(&view, &loads, &HashSet::new(), &BalancerConfig::default()).is_empty());
    }

    #[test]
    fn a_single_hot_partition_is_not_swapped_back_and_forth() {
        // One partition carries most of the load: moving it anywhere makes that broker the
        // peak, so it stays; the others spread around it.
        let on = vec![1, 1, 2, 2, 3, 3];
        let bytes = vec![20.0 * MIB, MIB, MIB, MIB, MIB, MIB];
        let (after, _, rounds) = settle(3, &on, &bytes, &BalancerConfig::default());
        assert_eq!(after[0], 1);
        assert!(rounds <= 3, "{rounds}");
    }

    #[test]
    fn capacity_comes_first_and_is_never_exceeded_by_a_move() {
        let on = vec![1, 1, 1, 2];
        let bytes = vec![3.0 * MIB, 3.0 * MIB, 3.0 * MIB, MIB];
        let config = BalancerConfig {
            capacity_bytes_per_sec: 14.0 * MIB, // in + out: broker 1 carries 18 MiB/s
            ..BalancerConfig::default()
        };
        let (view, loads) = cluster(2, &on, &bytes);
        let d = plan(&view, &loads, &HashSet::new(), &config);
        assert_eq!(d[0].goal, Goal::Capacity, "{d:?}");
        assert_eq!((d[0].from, d[0].to), (1, 2));
        let (after, _, _) = settle(2, &on, &bytes, &config);
        for b in 1..=2 {
            let load: f64 = after
                .iter()
                .zip(&bytes)
                .filter(|(&o, _)| o == b)
                .map(|(_, &x)| 2.0 * x)
                .sum();
            assert!(load <= 14.0 * MIB, "broker {b} at {load}");
        }
    }

    #[test]
    fn unhealthy_brokers_and_recent_moves_are_left_out() {
        let on = vec![1; 6];
        let bytes = vec![MIB; 6];
        let (view, mut loads) = cluster(3, &on, &bytes);
        // Broker 3's report is stale: only broker 2 receives.
        loads[2].age_ms = 60_000;
        let d = plan(&view, &loads, &HashSet::new(), &BalancerConfig::default());
        assert!(!d.is_empty() && d.iter().all(|m| m.to == 2), "{d:?}");
        // A shutting-down broker takes nothing either.
        let mut view2 = view.clone();
        view2.brokers[1].state = BrokerState::ShuttingDown;
        let d = plan(&view2, &loads, &HashSet::new(), &BalancerConfig::default());
        assert!(d.is_empty(), "{d:?}");
        // Partitions moved within the cooldown stay.
        let (view, loads) = cluster(3, &on, &bytes);
        let recent: HashSet<u64> = (1..=6).collect();
        assert!(plan(&view, &loads, &recent, &BalancerConfig::default()).is_empty());
        let some: HashSet<u64> = (1..=3).collect();
        let d = plan(&view, &loads, &some, &BalancerConfig::default());
        assert!(!d.is_empty() && d.iter().all(|m| m.stream_id > 3), "{d:?}");
    }

    #[test]
    fn a_topic_spreads_over_zones_once_the_other_goals_are_met() {
        // Four brokers in two zones; topic t's six partitions all lead in zone a (brokers 1
        // and 2), idle; counts are even with topic u's partitions in zone b.
        let mut brokers: Vec<_> = (1..=4)
            .map(|i| {
                broker(
                    i,
                    if i <= 2 { "a" } else { "b" },
                    BrokerState::Running,
                    true,
                )
            })
            .collect();
        brokers.sort_by_key(|b| b.node_id);
        let mut assignments: Vec<Assignment> =
            (0..6).map(|i| assignment(i, 1 + (i as i32 % 2))).collect();
        for i in 0..6u32 {
            assignments.push(Assignment {
                topic: "u".into(),
                partition: i,
                stream_id: 100 + u64::from(i),
                leader: Some(3 + (i as i32 % 2)),
                target: None,
                epoch: 1,
            });
        }
        let mut on: HashMap<u64, i32> = assignments
            .iter()
            .map(|a| (a.stream_id, a.leader.unwrap()))
            .collect();
        for round in 0..20 {
            let view = ClusterView::new(
                brokers.clone(),
                None,
                assignments
                    .iter()
                    .map(|a| Assignment {
                        leader: Some(on[&a.stream_id]),
                        ..a.clone()
                    })
                    .collect(),
            );
            let loads: Vec<BrokerLoad> = (1..=4)
                .map(|b| BrokerLoad {
                    node_id: b,
                    age_ms: 0,
                    cpu: 0.0,
                    partitions: Vec::new(),
                })
                .collect();
            let d = plan(&view, &loads, &HashSet::new(), &BalancerConfig::default());
            if d.is_empty() {
                let zone = |id: i32| if id <= 2 { "a" } else { "b" };
                for t in ["t", "u"] {
                    let in_a = assignments
                        .iter()
                        .filter(|a| a.topic == t && zone(on[&a.stream_id]) == "a")
                        .count();
                    assert_eq!(in_a, 3, "topic {t} after {round} rounds: {on:?}");
                }
                let mut counts = HashMap::new();
                for b in on.values() {
                    *counts.entry(*b).or_insert(0) += 1;
                }
                assert!(counts.values().all(|&n| n == 3), "{counts:?}");
                return;
            }
            assert!(d.iter().all(|m| m.goal == Goal::Zones), "{d:?}");
            for m in d {
                on.insert(m.stream_id, m.to);
            }
        }
        panic!("zones never settled: {on:?}");
    }

    #[test]
    fn a_partition_its_new_leader_has_not_measured_yet_keeps_its_remembered_load() {
        // Broker 2 just took partitions 0-3 and reports no rate for them yet: without memory
        // they look idle and broker 2 would be given more.
        let on = vec![2, 2, 2, 2, 1, 1, 1, 1];
        let bytes = vec![MIB; 8];
        let (view, mut loads) = cluster(2, &on, &bytes);
        loads[1].partitions.clear();
        let config = BalancerConfig::default();
        assert!(
            !plan(&view, &loads, &HashSet::new(), &config).is_empty(),
            "looks idle"
        );
        loads.insert(
            0,
            BrokerLoad {
                node_id: REMEMBERED,
                age_ms: 0,
                cpu: 0.0,
                partitions: (1..=8)
                    .map(|s| PartitionLoad {
                        stream_id: s,
                        bytes_in: MIB,
                        bytes_out: MIB,
                        requests: 0.0,
                    })
                    .collect(),
            },
        );
        assert!(plan(&view, &loads, &HashSet::new(), &config).is_empty());
    }

    #[test]
    fn moves_per_round_are_bounded_and_reasons_name_the_loads() {
        let on = vec![1; 40];
        let bytes = vec![MIB; 40];
        let config = BalancerConfig {
            max_moves: 3,
            ..BalancerConfig::default()
        };
        let (view, loads) = cluster(4, &on, &bytes);
        let d = plan(&view, &loads, &HashSet::new(), &config);
        assert_eq!(d.len(), 3);
        assert!(d[0].to_string().contains("mean"), "{}", d[0]);
        let i = imbalance(&view, &loads, &config);
        assert!((i.bytes_in - 3.0).abs() < 1e-9, "{i:?}");
        assert_eq!(i.brokers, 4);
    }
}
