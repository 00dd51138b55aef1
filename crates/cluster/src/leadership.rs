//! Opening and closing the partitions this broker leads, as the view changes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::task::JoinSet;
use weir_meta::Assignment;

use crate::{Cluster, ClusterView};

/// The partitions a broker serves: implemented by the partition layer's topic catalog.
#[async_trait::async_trait]
pub trait PartitionHost: Send + Sync + 'static {
    /// Streams whose partitions are open here.
    fn local_streams(&self) -> Vec<u64>;

    /// Whether the stream's partition is open here.
    fn is_local(&self, stream_id: u64) -> bool {
        self.local_streams().contains(&stream_id)
    }

    /// Re-reads topics from the metadata store (another broker may have created, changed or
    /// deleted one).
    async fn refresh_catalog(&self);

    /// Opens the partition as its leader (at the stream's epoch + 1).
    async fn open(&self, a: &Assignment) -> Result<(), String>;

    /// Uploads and commits what the WAL holds of the partition while it still takes writes, so
    /// that a [`PartitionHost::close`] right after has only what arrived meanwhile to write.
    async fn flush(&self, stream_id: u64) -> Result<(), String>;

    /// Stops writes to the partition, uploads and commits what the WAL holds of it, and forgets
    /// it. Only after this succeeds may another broker lead it.
    async fn close(&self, stream_id: u64) -> Result<(), String>;
}

/// How often the leadership loop checks every stream even when the view has not changed.
const FULL_PASS_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

enum Action {
    Open(Assignment),
    /// Close, then hand over to the move's target.
    HandOver(Assignment),
    /// Close: the partition is no longer ours (or no longer exists).
    Close(u64),
}

impl Action {
    fn stream_id(&self) -> u64 {
        match self {
            Action::Open(a) | Action::HandOver(a) => a.stream_id,
            Action::Close(s) => *s,
        }
    }
}

fn actions(view: &ClusterView, me: i32, local: &HashSet<u64>) -> Vec<Action> {
    let mut out = Vec::new();
    let mut known = HashSet::new();
    for a in &view.assignments {
        known.insert(a.stream_id);
        out.extend(action(
            Some(a),
            me,
            local.contains(&a.stream_id),
            a.stream_id,
        ));
    }
    out.extend(
        local
            .iter()
            .filter(|s| !known.contains(s))
            .map(|&s| Action::Close(s)),
    );
    out
}

/// What this broker must do about one stream: its assignment in the view (none: the topic is
/// gone), and whether it is open here.
fn action(a: Option<&Assignment>, me: i32, is_local: bool, stream_id: u64) -> Option<Action> {
    match a {
        Some(a) if a.leader == Some(me) => {
            if a.target.is_some_and(|t| t != me) {
                Some(Action::HandOver(a.clone()))
            } else if !is_local {
                Some(Action::Open(a.clone()))
            } else {
                None
            }
        }
        _ if is_local => Some(Action::Close(stream_id)),
        _ => None,
    }
}

impl Cluster {
    /// Starts opening and closing this broker's partitions as the view changes.
    pub fn start_leadership(self: &Arc<Self>, host: Arc<dyn PartitionHost>) {
        let task = tokio::spawn(Arc::clone(self).leadership_loop(host));
        self.tasks().push(("leadership", task));
    }

    /// Waits until this broker has opened every partition the latest view assigns to it (or
    /// `timeout` passes): a broker is ready once it serves what clients will be sent to it.
    pub async fn wait_until_serving(
        &self,
        host: &dyn PartitionHost,
        timeout: std::time::Duration,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let view = self.view();
            let local: HashSet<u64> = host.local_streams().into_iter().collect();
            let missing = view
                .assignments
                .iter()
                .filter(|a| a.leader == Some(self.node_id) && a.target.is_none())
                .any(|a| !local.contains(&a.stream_id));
            if !missing {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    async fn leadership_loop(self: Arc<Self>, host: Arc<dyn PartitionHost>) {
        let mut views = self.watch();
        let mut stop = self.stop.subscribe();
        let mut busy: HashSet<u64> = HashSet::new();
        let mut running: JoinSet<u64> = JoinSet::new();
        let mut seen_version = None;
        // Where each stream's assignment is in the view last seen.
        let mut by_stream: HashMap<u64, usize> = HashMap::new();
        // Streams whose action ended since the last pass.
        let mut ended: Vec<u64> = Vec::new();
        // Now and then every stream is checked again, view or not: cheap (a pass over the
        // assignments), and nothing the view does not announce is missed for long.
        let mut full_pass = false;
        let mut every = tokio::time::interval(FULL_PASS_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let view = views.borrow_and_update().clone();
            let version = Arc::as_ptr(&view) as usize;
            let new_view = seen_version != Some(version);
            let todo = if new_view || std::mem::take(&mut full_pass) {
                if new_view {
                    // Topics created elsewhere must be known before their partitions open here.
                    host.refresh_catalog().await;
                    seen_version = Some(version);
                    by_stream = view
                        .assignments
                        .iter()
                        .enumerate()
                        .map(|(i, a)| (a.stream_id, i))
                        .collect();
                }
                ended.clear();
                let local: HashSet<u64> = host.local_streams().into_iter().collect();
                actions(&view, self.node_id, &local)
            } else {
                // The same view: only the streams whose action just ended may need another (an
                // open that failed is retried). Going over every assignment after each one made
                // opening N partitions cost N passes over N (seconds of CPU at 10,000).
                ended
                    .drain(..)
                    .filter_map(|s| {
                        let a = by_stream.get(&s).map(|&i| &view.assignments[i]);
                        action(a, self.node_id, host.is_local(s), s)
                    })
                    .collect()
            };
            for action in todo {
                let stream = action.stream_id();
                if !busy.insert(stream) {
                    continue;
                }
                let host = Arc::clone(&host);
                let cluster = Arc::clone(&self);
                running.spawn(async move {
                    cluster.act(&*host, action).await;
                    stream
                });
            }
            tokio::select! {
                r = views.changed() => {
                    if r.is_err() {
                        return;
                    }
                }
                Some(done) = running.join_next(), if !running.is_empty() => {
                    if let Ok(stream) = done {
                        busy.remove(&stream);
                        ended.push(stream);
                    }
                }
                _ = every.tick() => full_pass = true,
                _ = stop.changed() => {
                    while running.join_next().await.is_some() {}
                    return;
                }
            }
        }
    }

    async fn act(&self, host: &dyn PartitionHost, action: Action) {
        match action {
            Action::Open(a) => {
                let t = tokio::time::Instant::now();
                match host.open(&a).await {
                    Ok(()) => {
                        tracing::info!(topic = %a.topic, partition = a.partition, ms = t.elapsed().as_millis() as u64, "leading the partition");
                        // The leader epoch moved: every broker's view (Metadata) should say so.
                        if let Err(e) = self.meta.notify_cluster().await {
                            tracing::debug!(error = %e, "announcing a new leader epoch failed");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(topic = %a.topic, partition = a.partition, error = %e, "opening the partition failed; retrying");
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    }
                }
            }
            Action::HandOver(a) => {
                // Writes go on during the flush: the partition is unavailable only while the
                // close writes the tail that arrived since, however much the WAL held of it.
                let flushing = tokio::time::Instant::now();
                if let Err(e) = host.flush(a.stream_id).await {
                    tracing::warn!(topic = %a.topic, partition = a.partition, error = %e, "uploading the partition before its move failed; the close uploads it");
                }
                let flush_ms = flushing.elapsed().as_millis() as u64;
                let t = tokio::time::Instant::now();
                if let Err(e) = host.close(a.stream_id).await {
                    tracing::warn!(topic = %a.topic, partition = a.partition, error = %e, "closing the partition for a move failed; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    return;
                }
                match self
                    .meta
                    .hand_over(a.stream_id, self.node_id, self.incarnation())
                    .await
                {
                    Ok(to) => {
                        tracing::info!(topic = %a.topic, partition = a.partition, to = ?to, flush_ms, ms = t.elapsed().as_millis() as u64, "handed the partition over")
                    }
                    Err(e) => {
                        tracing::warn!(topic = %a.topic, partition = a.partition, error = %e, "handing the partition over failed; retrying");
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    }
                }
                // Hear of our own change at once rather than at the next notification.
                let _ = self.refresh().await;
            }
            Action::Close(stream) => {
                if let Err(e) = host.close(stream).await {
                    tracing::warn!(stream, error = %e, "closing a partition led elsewhere failed");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(stream_id: u64, leader: Option<i32>, target: Option<i32>) -> Assignment {
        Assignment {
            topic: "t".into(),
            partition: stream_id as u32,
            stream_id,
            leader,
            target,
            epoch: 1,
        }
    }

    #[test]
    fn a_broker_opens_its_own_hands_over_moving_ones_and_closes_the_rest() {
        let view = ClusterView::new(
            Vec::new(),
            None,
            vec![
                a(1, Some(1), None),    // ours, not open: open
                a(2, Some(1), None),    // ours, open: nothing
                a(3, Some(1), Some(2)), // ours, moving: hand over
                a(4, Some(2), None),    // someone else's, open here: close
                a(5, None, None),       // unplaced: nothing
                a(6, Some(2), Some(1)), // coming to us, not yet handed over: nothing
            ],
        );
        let local: HashSet<u64> = [2, 3, 4, 9].into();
        let got: Vec<String> = actions(&view, 1, &local)
            .iter()
            .map(|x| match x {
                Action::Open(a) => format!("open {}", a.stream_id),
                Action::HandOver(a) => format!("hand over {}", a.stream_id),
                Action::Close(s) => format!("close {s}"),
            })
            .collect();
        assert_eq!(got, ["open 1", "hand over 3", "close 4", "close 9"]);
    }
}
