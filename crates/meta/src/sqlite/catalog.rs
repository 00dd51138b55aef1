//! [`Catalog`] on SQLite: topics, partitions, configs, counters, keys.

use std::collections::BTreeMap;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::{backend, drop_ranges_below_start, i, now_ms, SqliteMetaStore};
use crate::{Catalog, MetaError, Result, TopicMeta};

#[async_trait::async_trait]
impl Catalog for SqliteMetaStore {
    async fn create_topic(
        &self,
        name: &str,
        topic_id: [u8; 16],
        partitions: u32,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta> {
        let name = name.to_string();
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            if read_topic(&tx, &name)?.is_some() {
                return Err(MetaError::TopicExists(name));
            }
            tx.execute(
                "INSERT INTO topics (name, topic_id, configs) VALUES (?1, ?2, ?3)",
                params![name, topic_id.to_vec(), encode_configs(&configs)],
            )
            .map_err(backend("creating a topic"))?;
            add_partitions_tx(&tx, &name, 0, partitions)?;
            let t = read_topic(&tx, &name)?.ok_or_else(|| MetaError::UnknownTopic(name.clone()))?;
            tx.commit().map_err(backend("commit"))?;
            Ok(t)
        })
        .await
    }

    async fn list_topics(&self) -> Result<Vec<TopicMeta>> {
        self.with(move |c| {
            let names: Vec<String> = {
                let mut stmt = c
                    .prepare_cached("SELECT name FROM topics ORDER BY name")
                    .map_err(backend("listing topics"))?;
                let rows = stmt
                    .query_map([], |r| r.get(0))
                    .map_err(backend("listing topics"))?;
                rows.collect::<rusqlite::Result<_>>()
                    .map_err(backend("listing topics"))?
            };
            let mut out = Vec::with_capacity(names.len());
            for n in names {
                if let Some(t) = read_topic(c, &n)? {
                    out.push(t);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn delete_topic(&self, name: &str) -> Result<TopicMeta> {
        let name = name.to_string();
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            let t = read_topic(&tx, &name)?.ok_or_else(|| MetaError::UnknownTopic(name.clone()))?;
            let now = now_ms();
            for &stream_id in &t.streams {
                // Moving the start past everything drops every range and frees the objects.
                tx.execute(
                    "UPDATE streams SET start_offset = 9223372036854775807 WHERE stream_id = ?1",
                    params![i(stream_id)],
                )
                .map_err(backend("dropping a stream"))?;
                drop_ranges_below_start(&tx, std::iter::once(stream_id), now)?;
                tx.execute(
                    "DELETE FROM streams WHERE stream_id = ?1",
                    params![i(stream_id)],
                )
                .map_err(backend("dropping a stream"))?;
                tx.execute(
                    "INSERT OR IGNORE INTO deleted_streams (stream_id) VALUES (?1)",
                    params![i(stream_id)],
                )
                .map_err(backend("remembering a deleted stream"))?;
                tx.execute(
                    "DELETE FROM producer_snapshots WHERE stream_id = ?1",
                    params![i(stream_id)],
                )
                .map_err(backend("dropping a snapshot"))?;
            }
            tx.execute("DELETE FROM partitions WHERE topic = ?1", params![name])
                .map_err(backend("deleting partitions"))?;
            tx.execute("DELETE FROM topics WHERE name = ?1", params![name])
                .map_err(backend("deleting a topic"))?;
            tx.execute("DELETE FROM group_offsets WHERE topic = ?1", params![name])
                .map_err(backend("deleting offsets"))?;
            tx.execute("DELETE FROM share_states WHERE topic = ?1", params![name])
                .map_err(backend("deleting share states"))?;
            tx.commit().map_err(backend("commit"))?;
            Ok(t)
        })
        .await
    }

    async fn add_partitions(&self, name: &str, total: u32) -> Result<TopicMeta> {
        let name = name.to_string();
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            let t = read_topic(&tx, &name)?.ok_or_else(|| MetaError::UnknownTopic(name.clone()))?;
            let current = t.streams.len() as u32;
            if total <= current {
                return Err(MetaError::InvalidPartitions {
                    topic: name,
                    current,
                    requested: total,
                });
            }
            add_partitions_tx(&tx, &name, current, total)?;
            let t = read_topic(&tx, &name)?.ok_or_else(|| MetaError::UnknownTopic(name.clone()))?;
            tx.commit().map_err(backend("commit"))?;
            Ok(t)
        })
        .await
    }

    async fn set_topic_configs(&self, name: &str, configs: BTreeMap<String, String>) -> Result<()> {
        let name = name.to_string();
        self.with(move |c| {
            let n = c
                .execute(
                    "UPDATE topics SET configs = ?2 WHERE name = ?1",
                    params![name, encode_configs(&configs)],
                )
                .map_err(backend("updating topic configs"))?;
            if n == 0 {
                return Err(MetaError::UnknownTopic(name));
            }
            Ok(())
        })
        .await
    }

    async fn replace_topic_configs(
        &self,
        name: &str,
        expected: &BTreeMap<String, String>,
        configs: BTreeMap<String, String>,
    ) -> Result<bool> {
        let (name, expected) = (name.to_string(), encode_configs(expected));
        self.with(move |c| {
            let n = c
                .execute(
                    "UPDATE topics SET configs = ?3 WHERE name = ?1 AND configs = ?2",
                    params![name, expected, encode_configs(&configs)],
                )
                .map_err(backend("updating topic configs"))?;
            if n > 0 {
                return Ok(true);
            }
            let exists = c
                .query_row(
                    "SELECT 1 FROM topics WHERE name = ?1",
                    params![name],
                    |_| Ok(()),
                )
                .optional()
                .map_err(backend("reading a topic"))?
                .is_some();
            if exists {
                Ok(false)
            } else {
                Err(MetaError::UnknownTopic(name))
            }
        })
        .await
    }

    async fn allocate_ids(&self, counter: &str, count: u64) -> Result<u64> {
        let key = format!("counter.{counter}");
        self.with(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(backend("begin"))?;
            let first = next_id(&tx, &key, count)?;
            tx.commit().map_err(backend("commit"))?;
            Ok(first)
        })
        .await
    }

    async fn get_or_init(&self, key: &str, default: &str) -> Result<String> {
        let (key, default) = (key.to_string(), default.to_string());
        self.with(move |c| {
            c.execute(
                "INSERT INTO kv (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING",
                params![key, default],
            )
            .map_err(backend("initialising a key"))?;
            c.query_row("SELECT value FROM kv WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
            .map_err(backend("reading a key"))
        })
        .await
    }

    async fn get_value(&self, key: &str) -> Result<Option<String>> {
        let key = key.to_string();
        self.with(move |c| {
            c.query_row("SELECT value FROM kv WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
            .optional()
            .map_err(backend("reading a key"))
        })
        .await
    }

    async fn set_value(&self, key: &str, value: &str) -> Result<()> {
        let (key, value) = (key.to_string(), value.to_string());
        self.with(move |c| {
            c.execute(
                "INSERT INTO kv (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![key, value],
            )
            .map(|_| ())
            .map_err(backend("writing a key"))
        })
        .await
    }
}

/// Takes `count` ids from the counter stored under `key`.
fn next_id(tx: &rusqlite::Transaction<'_>, key: &str, count: u64) -> Result<u64> {
    let current: Option<String> = tx
        .query_row("SELECT value FROM kv WHERE key = ?1", params![key], |r| {
            r.get(0)
        })
        .optional()
        .map_err(backend("reading a counter"))?;
    let first = current.and_then(|v| v.parse::<u64>().ok()).unwrap_or(1);
    tx.execute(
        "INSERT INTO kv (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![key, (first + count).to_string()],
    )
    .map_err(backend("advancing a counter"))?;
    Ok(first)
}

fn add_partitions_tx(
    tx: &rusqlite::Transaction<'_>,
    topic: &str,
    from: u32,
    to: u32,
) -> Result<()> {
    for p in from..to {
        let stream_id = next_id(tx, "counter.stream", 1)?;
        tx.execute(
            "INSERT INTO streams (stream_id, epoch, start_offset, end_offset) VALUES (?1, 0, 0, 0)",
            params![i(stream_id)],
        )
        .map_err(backend("creating a stream"))?;
        tx.execute(
            "INSERT INTO partitions (topic, partition, stream_id) VALUES (?1, ?2, ?3)",
            params![topic, p, i(stream_id)],
        )
        .map_err(backend("creating a partition"))?;
    }
    Ok(())
}

fn read_topic(c: &Connection, name: &str) -> Result<Option<TopicMeta>> {
    let row: Option<(Vec<u8>, String)> = c
        .query_row(
            "SELECT topic_id, configs FROM topics WHERE name = ?1",
            params![name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(backend("reading a topic"))?;
    let Some((id, configs)) = row else {
        return Ok(None);
    };
    let mut stmt = c
        .prepare_cached("SELECT stream_id FROM partitions WHERE topic = ?1 ORDER BY partition")
        .map_err(backend("reading partitions"))?;
    let streams = stmt
        .query_map(params![name], |r| Ok(r.get::<_, i64>(0)? as u64))
        .map_err(backend("reading partitions"))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(backend("reading partitions"))?;
    let mut topic_id = [0u8; 16];
    if id.len() == 16 {
        topic_id.copy_from_slice(&id);
    }
    Ok(Some(TopicMeta {
        name: name.to_string(),
        topic_id,
        streams,
        configs: decode_configs(&configs),
    }))
}

/// Configs as `key=value` lines: keys are Kafka config names, which hold no `=` or newline.
pub(crate) fn encode_configs(configs: &BTreeMap<String, String>) -> String {
    configs
        .iter()
        .map(|(k, v)| format!("{k}={}\n", v.replace('\\', "\\\\").replace('\n', "\\n")))
        .collect()
}

pub(crate) fn decode_configs(s: &str) -> BTreeMap<String, String> {
    s.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.replace("\\n", "\n").replace("\\\\", "\\")))
        .collect()
}
