//! Group configs: DescribeConfigs and IncrementalAlterConfigs on resource type GROUP (32), as
//! Kafka 4 has them (`kafka-configs --entity-type groups`, `Admin.incrementalAlterConfigs`).
//! Weir knows the share group ones (`share.*`), which its share groups obey, and the streams
//! group ones its streams groups obey (`streams.*`: session timeout, heartbeat interval, standby
//! replicas, initial rebalance delay); others are refused with INVALID_CONFIG, as Kafka refuses
//! unknown group configs.
//!
//! A group's configs are one entry of the metadata store's key-value part (`Catalog::set_value`
//! under `group.configs/<group>`, as `key=value` lines), so every broker reads the same. Each
//! broker keeps what it read for a second: a change made through another broker takes effect
//! here within that (a share-partition reads `share.auto.offset.reset` only when it is first
//! created, later than any client that set it first).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError as E;
use weir_meta::MetaStore;
use weir_share::partition::Limits;

use crate::share::{OffsetReset, ShareGroupConfig};

/// How long a group's configs read from the store are used before reading them again.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// A group config Weir knows: its name, default, and check of a value.
struct Known {
    name: &'static str,
    default: &'static str,
    valid: fn(&str) -> Result<(), String>,
}

fn int_in(v: &str, lo: i64, hi: i64) -> Result<(), String> {
    match v.trim().parse::<i64>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(()),
        _ => Err(format!("must be an integer in [{lo}, {hi}]")),
    }
}

/// Kafka 4.4's share and streams group configs, with its defaults and bounds.
const KNOWN: &[Known] = &[
    Known {
        name: "share.auto.offset.reset",
        default: "latest",
        valid: |v| match v {
            "latest" | "earliest" => Ok(()),
            _ => Err("must be latest or earliest".into()),
        },
    },
    Known {
        name: "share.isolation.level",
        default: "read_uncommitted",
        valid: |v| match v {
            "read_uncommitted" | "read_committed" => Ok(()),
            _ => Err("must be read_uncommitted or read_committed".into()),
        },
    },
    Known {
        name: "share.record.lock.duration.ms",
        default: "30000",
        valid: |v| int_in(v, 1_000, 3_600_000),
    },
    Known {
        name: "share.delivery.count.limit",
        default: "5",
        valid: |v| int_in(v, 2, 10),
    },
    Known {
        name: "share.partition.max.record.locks",
        default: "2000",
        valid: |v| int_in(v, 100, 10_000),
    },
    Known {
        name: "share.session.timeout.ms",
        default: "45000",
        valid: |v| int_in(v, 45_000, 60_000),
    },
    Known {
        name: "share.heartbeat.interval.ms",
        default: "5000",
        valid: |v| int_in(v, 5_000, 15_000),
    },
    Known {
        name: "streams.session.timeout.ms",
        default: "45000",
        valid: |v| int_in(v, 45_000, 60_000),
    },
    Known {
        name: "streams.heartbeat.interval.ms",
        default: "5000",
        valid: |v| int_in(v, 5_000, 15_000),
    },
    Known {
        name: "streams.num.standby.replicas",
        default: "0",
        valid: |v| int_in(v, 0, 2),
    },
    Known {
        name: "streams.initial.rebalance.delay.ms",
        default: "3000",
        valid: |v| int_in(v, 0, i32::MAX as i64),
    },
];

fn key(group: &str) -> String {
    format!("group.configs/{group}")
}

fn decode(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn encode(configs: &BTreeMap<String, String>) -> String {
    configs.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

/// A group's configs as set: name to value.
type Configs = BTreeMap<String, String>;

/// A config's value as DescribeConfigs shows it.
pub struct Entry {
    pub name: &'static str,
    pub value: String,
    pub is_default: bool,
}

/// See the module documentation.
pub struct GroupConfigs {
    meta: Arc<dyn MetaStore>,
    /// What was read of each group, and when.
    read: Mutex<HashMap<String, (Instant, Configs)>>,
}

impl GroupConfigs {
    pub fn new(meta: Arc<dyn MetaStore>) -> Self {
        GroupConfigs {
            meta,
            read: Mutex::new(HashMap::new()),
        }
    }

    /// The group's configs as set (no defaults).
    async fn set(&self, group: &str) -> Result<BTreeMap<String, String>, E> {
        {
            let read = self.read.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((at, c)) = read.get(group) {
                if at.elapsed() < FRESH_FOR {
                    return Ok(c.clone());
                }
            }
        }
        let text = self.meta.get_value(&key(group)).await.map_err(|e| {
            tracing::warn!(group, error = %e, "reading a group's configs failed");
            E::KafkaStorageError
        })?;
        let configs = text.as_deref().map(decode).unwrap_or_default();
        self.read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(group.to_string(), (Instant::now(), configs.clone()));
        Ok(configs)
    }

    /// The share settings of `group` (the defaults where nothing is set, or the store cannot be
    /// read).
    pub async fn get(&self, group: &str) -> ShareGroupConfig {
        let set = self.set(group).await.unwrap_or_default();
        let num = |name: &str, default: i64| {
            set.get(name)
                .and_then(|v| v.trim().parse::<i64>().ok())
                .unwrap_or(default)
        };
        let d = Limits::default();
        ShareGroupConfig {
            limits: Limits {
                lock_ms: num("share.record.lock.duration.ms", d.lock_ms as i64).max(0) as u64,
                delivery_limit: num("share.delivery.count.limit", d.delivery_limit as i64)
                    .clamp(1, i16::MAX as i64) as i16,
                max_record_locks: num(
                    "share.partition.max.record.locks",
                    d.max_record_locks as i64,
                )
                .max(1) as usize,
            },
            auto_offset_reset: match set.get("share.auto.offset.reset").map(String::as_str) {
                Some("earliest") => OffsetReset::Earliest,
                _ => OffsetReset::Latest,
            },
            read_committed: set.get("share.isolation.level").map(String::as_str)
                == Some("read_committed"),
        }
    }

    /// The streams settings set for `group` (none where nothing is set, or the store cannot be
    /// read: the broker's then).
    pub async fn streams(&self, group: &str) -> weir_group::streams::StreamsOverrides {
        let set = self.set(group).await.unwrap_or_default();
        let num = |name: &str| set.get(name).and_then(|v| v.trim().parse::<i64>().ok());
        weir_group::streams::StreamsOverrides {
            session_ms: num("streams.session.timeout.ms"),
            heartbeat_ms: num("streams.heartbeat.interval.ms"),
            num_standby: num("streams.num.standby.replicas").map(|n| n.max(0) as usize),
            initial_delay_ms: num("streams.initial.rebalance.delay.ms"),
        }
    }

    /// Every known config of `group`, its value or default (DescribeConfigs).
    pub async fn describe(&self, group: &str) -> Result<Vec<Entry>, E> {
        let set = self.set(group).await?;
        Ok(KNOWN
            .iter()
            .map(|k| match set.get(k.name) {
                Some(v) => Entry {
                    name: k.name,
                    value: v.clone(),
                    is_default: false,
                },
                None => Entry {
                    name: k.name,
                    value: k.default.to_string(),
                    is_default: true,
                },
            })
            .collect())
    }

    /// Changes `group`'s configs by `change` (IncrementalAlterConfigs' operations); every
    /// resulting config must be known and valid, or nothing changes.
    pub async fn alter(
        &self,
        group: &str,
        change: impl FnOnce(&BTreeMap<String, String>) -> Result<BTreeMap<String, String>, (E, String)>,
        validate_only: bool,
    ) -> Result<(), (E, String)> {
        self.read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(group);
        let old = self
            .set(group)
            .await
            .map_err(|e| (e, "the group's configs cannot be read".to_string()))?;
        let new = change(&old)?;
        for (name, value) in &new {
            let Some(k) = KNOWN.iter().find(|k| k.name == name) else {
                return Err((
                    E::InvalidConfig,
                    format!("Unknown group config name: {name}"),
                ));
            };
            (k.valid)(value).map_err(|why| {
                (
                    E::InvalidConfig,
                    format!("Invalid value {value} for configuration {name}: {why}"),
                )
            })?;
        }
        if validate_only || new == old {
            return Ok(());
        }
        self.meta
            .set_value(&key(group), &encode(&new))
            .await
            .map_err(|e| (E::KafkaStorageError, e.to_string()))?;
        self.read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(group);
        Ok(())
    }
}
