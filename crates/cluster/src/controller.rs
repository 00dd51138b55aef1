//! The controller: whichever broker holds the lease fences expired brokers and applies the
//! placement plan. Every broker runs this loop; all but one find the lease taken.

use std::sync::Arc;

use weir_meta::{ControllerLease, MetaError};

use crate::{placement, Cluster, ClusterView};

impl Cluster {
    pub(crate) async fn controller_loop(self: Arc<Self>) {
        let mut changes = self.meta.cluster_changes();
        let mut stop = self.stop.subscribe();
        let mut held: Option<ControllerLease> = None;
        loop {
            changes.borrow_and_update();
            match self.control_once().await {
                Ok(lease) => {
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
                Err(e) => tracing::warn!(error = %e, "controller round failed"),
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep(self.config.controller_interval) => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// One round: take or renew the lease; if held, fence and place.
    async fn control_once(&self) -> Result<Option<ControllerLease>, MetaError> {
        let Some(lease) = self
            .meta
            .acquire_controller(self.node_id, self.config.controller_lease)
            .await?
        else {
            return Ok(None);
        };
        let fenced = self.meta.fence_expired_brokers(lease).await?;
        if !fenced.is_empty() {
            tracing::warn!(brokers = ?fenced, "fenced brokers that missed their session; their partitions wait for them");
        }
        let view = ClusterView::new(
            self.meta.brokers().await?,
            Some(lease),
            self.meta.assignments().await?,
        );
        let changes = placement::plan(&view);
        if !changes.is_empty() {
            tracing::info!(changes = ?changes, "controller: assignment changes");
            self.meta.change_assignments(lease, &changes).await?;
        }
        Ok(Some(lease))
    }
}
