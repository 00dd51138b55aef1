//! The admin API's cluster routes (`/v1/...`), answered by the cluster layer.

use std::sync::Arc;

use serde_json::{json, Value};
use weir_cluster::{Cluster, ClusterError};

use crate::admin::ClusterAdmin;

pub struct Admin(pub Arc<Cluster>);

fn status(e: &ClusterError) -> u16 {
    match e {
        ClusterError::UnknownPartition(..) => 404,
        ClusterError::UnknownBroker(_) | ClusterError::NotPlaced(..) => 409,
        ClusterError::Meta(_) => 503,
    }
}

#[async_trait::async_trait]
impl ClusterAdmin for Admin {
    async fn cluster(&self) -> Value {
        let view = self.0.view();
        json!({
            "node_id": self.0.node_id(),
            "controller": view.controller.map(|c| json!({"node_id": c.node_id, "epoch": c.epoch})),
            "brokers": view.brokers.iter().map(|b| json!({
                "node_id": b.node_id,
                "incarnation": b.incarnation,
                "zone": b.zone,
                "host": b.host,
                "port": b.port,
                "internal": b.internal_addr,
                "listeners": b.listeners.iter().map(|l| json!({
                    "name": l.name, "host": l.host, "port": l.port,
                })).collect::<Vec<_>>(),
                "state": b.state.as_str(),
                "alive": b.alive,
            })).collect::<Vec<_>>(),
        })
    }

    async fn partitions(&self) -> Value {
        let view = self.0.view();
        Value::Array(
            view.assignments
                .iter()
                .map(|a| {
                    json!({
                        "topic": a.topic,
                        "partition": a.partition,
                        "leader": a.leader,
                        "leader_epoch": a.epoch,
                        "target": a.target,
                    })
                })
                .collect(),
        )
    }

    async fn reassign(
        &self,
        topic: &str,
        partition: i32,
        broker: i32,
    ) -> Result<(), (u16, String)> {
        self.0
            .reassign(topic, partition, Some(broker))
            .await
            .map_err(|e| (status(&e), e.to_string()))
    }

    async fn reassignments(&self) -> Value {
        let view = self.0.view();
        Value::Array(
            view.assignments
                .iter()
                .filter(|a| a.target.is_some())
                .map(|a| {
                    json!({
                        "topic": a.topic,
                        "partition": a.partition,
                        "from": a.leader,
                        "to": a.target,
                    })
                })
                .collect(),
        )
    }

    async fn drain(&self, broker: i32) -> Result<Value, (u16, String)> {
        match self.0.drain(broker).await {
            Ok(n) => Ok(json!({"broker": broker, "moves": n})),
            Err(e) => Err((status(&e), e.to_string())),
        }
    }
}
