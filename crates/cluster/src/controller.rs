//! The controller: whichever broker holds the lease fences expired brokers and applies the
//! placement plan. Every broker runs this loop; all but one find the lease taken.
//!
//! A broker's session can only be judged by a controller that has been able to reach the
//! metadata store for a whole session timeout (failures shorter than a heartbeat interval do not
//! count): after the store was down (a PostgreSQL restart or fail-over), every session looks
//! expired although no broker failed, since none could renew. Fencing them all then would restart
//! every broker's membership at once; instead the controller waits a session timeout from the
//! moment the store answers again, which gives every live broker time to renew. A controller that
//! reached the store all along (also while another broker held the lease) fences at once, so a
//! controller change does not delay fencing.

use std::sync::Arc;
use std::time::Instant;

use weir_meta::{ControllerLease, MetaError};

use crate::{placement, Cluster, ClusterView};

impl Cluster {
    pub(crate) async fn controller_loop(self: Arc<Self>) {
        let mut changes = self.meta.cluster_changes();
        let mut stop = self.stop.subscribe();
        let mut held: Option<ControllerLease> = None;
        // Since when the store has answered without a long break, and when it last did.
        let mut reachable_since: Option<Instant> = None;
        let mut last_ok: Option<Instant> = None;
        loop {
            changes.borrow_and_update();
            let may_fence =
                reachable_since.is_some_and(|t| t.elapsed() >= self.config.session_timeout);
            match self.control_once(may_fence).await {
                Ok(lease) => {
                    last_ok = Some(Instant::now());
                    reachable_since.get_or_insert_with(Instant::now);
                    if lease != held {
                        match lease {
                            Some(l) => {
                                tracing::info!(epoch = l.epoch, "this broker is now the controller")
                            }
                            None if held.is_some() => {
                                tracing::info!("this broker is no longer the controller")
                            }
                            None => {}
                        }
                        held = lease;
                    }
                }
                Err(e) => {
                    // A failure now and then (one transaction refused) leaves brokers able to
                    // renew; failing for longer than a heartbeat may not have.
                    if last_ok.is_none_or(|t| t.elapsed() > self.config.heartbeat_interval) {
                        reachable_since = None;
                    }
                    tracing::warn!(error = %e, "controller round failed");
                }
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep(self.config.controller_interval) => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// One round: take or renew the lease; if held, fence (when `may_fence`) and place.
    async fn control_once(&self, may_fence: bool) -> Result<Option<ControllerLease>, MetaError> {
        let Some(lease) = self
            .meta
            .acquire_controller(self.node_id, self.config.controller_lease)
            .await?
        else {
            return Ok(None);
        };
        let fenced = if may_fence {
            self.meta
                .fence_expired_brokers(lease, self.config.clock_drift_margin)
                .await?
        } else {
            Vec::new()
        };
        if !fenced.is_empty() {
            tracing::warn!(brokers = ?fenced, "fenced brokers that missed their session; their WALs are to be recovered");
        }
        let view = ClusterView::new(
            self.meta.brokers().await?,
            Some(lease),
            self.meta.assignments().await?,
        )
        .with_wals(self.meta.wals().await?);
        // Recoveries first: they release partitions, which placement then gives to live brokers
        // (in the next round, which their release announces).
        if may_fence {
            self.control_recoveries(lease, &view).await?;
        }
        let changes = placement::plan(&view);
        if !changes.is_empty() {
            tracing::info!(changes = ?changes, "controller: assignment changes");
            self.meta.change_assignments(lease, &changes).await?;
        }
        Ok(Some(lease))
    }
}
