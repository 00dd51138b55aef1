//! [`Catalog`] on PostgreSQL: topics, partitions, configs, counters, keys.

use std::collections::BTreeMap;

use tokio_postgres::GenericClient;

use super::{backend, drop_ranges_below_start, i, in_tx, lock_stream, PostgresMetaStore};
use crate::sqlite::catalog::{decode_configs, encode_configs};
use crate::{Catalog, MetaError, Result, TopicMeta};

/// A topic and its streams in partition order, read in one statement (one snapshot).
const TOPIC_QUERY: &str = "
SELECT t.name, t.topic_id, t.configs,
       COALESCE(array_agg(p.stream_id ORDER BY p.partition)
                FILTER (WHERE p.stream_id IS NOT NULL), '{}')
FROM topics t LEFT JOIN partitions p ON p.topic = t.name";

#[async_trait::async_trait]
impl Catalog for PostgresMetaStore {
    async fn create_topic(
        &self,
        name: &str,
        topic_id: [u8; 16],
        partitions: u32,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta> {
        let encoded = encode_configs(&configs);
        in_tx!(self, |tx| {
            // A concurrent creation of the same name waits for ours, then inserts nothing.
            let n = tx
                .execute(
                    "INSERT INTO topics (name, topic_id, configs) VALUES ($1, $2, $3)
                     ON CONFLICT (name) DO NOTHING",
                    &[&name, &&topic_id[..], &encoded],
                )
                .await
                .map_err(backend("creating a topic"))?;
            if n == 0 {
                return Err(MetaError::TopicExists(name.to_string()));
            }
            add_partitions_tx(&tx, name, 0, partitions).await?;
            read_topic(&tx, name)
                .await?
                .ok_or_else(|| MetaError::UnknownTopic(name.to_string()))
        })
    }

    async fn list_topics(&self) -> Result<Vec<TopicMeta>> {
        let c = self.client().await?;
        let rows = c
            .query(
                &format!("{TOPIC_QUERY} GROUP BY t.name ORDER BY t.name"),
                &[],
            )
            .await
            .map_err(backend("listing topics"))?;
        Ok(rows.iter().map(topic_row).collect())
    }

    async fn delete_topic(&self, name: &str) -> Result<TopicMeta> {
        in_tx!(self, |tx| {
            let t = lock_topic(&tx, name).await?;
            let mut streams = t.streams.clone();
            streams.sort_unstable();
            for &stream_id in &streams {
                lock_stream(&tx, stream_id).await?;
                // Moving the start past everything drops every range and frees the objects.
                tx.execute(
                    "UPDATE streams SET start_offset = 9223372036854775807 WHERE stream_id = $1",
                    &[&i(stream_id)],
                )
                .await
                .map_err(backend("dropping a stream"))?;
                drop_ranges_below_start(&tx, stream_id).await?;
                tx.execute("DELETE FROM streams WHERE stream_id = $1", &[&i(stream_id)])
                    .await
                    .map_err(backend("dropping a stream"))?;
                tx.execute(
                    "INSERT INTO deleted_streams (stream_id) VALUES ($1)
                     ON CONFLICT (stream_id) DO NOTHING",
                    &[&i(stream_id)],
                )
                .await
                .map_err(backend("remembering a deleted stream"))?;
                tx.execute(
                    "DELETE FROM producer_snapshots WHERE stream_id = $1",
                    &[&i(stream_id)],
                )
                .await
                .map_err(backend("dropping a snapshot"))?;
            }
            tx.execute("DELETE FROM partitions WHERE topic = $1", &[&name])
                .await
                .map_err(backend("deleting partitions"))?;
            tx.execute("DELETE FROM topics WHERE name = $1", &[&name])
                .await
                .map_err(backend("deleting a topic"))?;
            tx.execute("DELETE FROM group_offsets WHERE topic = $1", &[&name])
                .await
                .map_err(backend("deleting offsets"))?;
            tx.execute("DELETE FROM share_states WHERE topic = $1", &[&name])
                .await
                .map_err(backend("deleting share states"))?;
            Ok(t)
        })
    }

    async fn add_partitions(&self, name: &str, total: u32) -> Result<TopicMeta> {
        in_tx!(self, |tx| {
            let t = lock_topic(&tx, name).await?;
            let current = t.streams.len() as u32;
            if total <= current {
                return Err(MetaError::InvalidPartitions {
                    topic: name.to_string(),
                    current,
                    requested: total,
                });
            }
            add_partitions_tx(&tx, name, current, total).await?;
            read_topic(&tx, name)
                .await?
                .ok_or_else(|| MetaError::UnknownTopic(name.to_string()))
        })
    }

    async fn set_topic_configs(&self, name: &str, configs: BTreeMap<String, String>) -> Result<()> {
        let c = self.client().await?;
        let n = c
            .execute(
                "UPDATE topics SET configs = $2 WHERE name = $1",
                &[&name, &encode_configs(&configs)],
            )
            .await
            .map_err(backend("updating topic configs"))?;
        if n == 0 {
            return Err(MetaError::UnknownTopic(name.to_string()));
        }
        Ok(())
    }

    async fn replace_topic_configs(
        &self,
        name: &str,
        expected: &BTreeMap<String, String>,
        configs: BTreeMap<String, String>,
    ) -> Result<bool> {
        let c = self.client().await?;
        let n = c
            .execute(
                "UPDATE topics SET configs = $3 WHERE name = $1 AND configs = $2",
                &[&name, &encode_configs(expected), &encode_configs(&configs)],
            )
            .await
            .map_err(backend("updating topic configs"))?;
        if n > 0 {
            return Ok(true);
        }
        let exists = c
            .query_opt("SELECT 1 FROM topics WHERE name = $1", &[&name])
            .await
            .map_err(backend("reading a topic"))?
            .is_some();
        if exists {
            Ok(false)
        } else {
            Err(MetaError::UnknownTopic(name.to_string()))
        }
    }

    async fn allocate_ids(&self, counter: &str, count: u64) -> Result<u64> {
        let c = self.client().await?;
        next_id(&*c, counter, count).await
    }

    async fn get_or_init(&self, key: &str, default: &str) -> Result<String> {
        let c = self.client().await?;
        // Two statements, not one: a statement's snapshot does not see a row that a concurrent
        // first call committed while this one's insert waited on it, but the next statement's
        // (READ COMMITTED) does. The value never changes once written.
        c.execute(
            "INSERT INTO kv (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
            &[&key, &default],
        )
        .await
        .map_err(backend("initialising a key"))?;
        let row = c
            .query_one("SELECT value FROM kv WHERE key = $1", &[&key])
            .await
            .map_err(backend("reading a key"))?;
        Ok(row.get(0))
    }

    async fn get_value(&self, key: &str) -> Result<Option<String>> {
        let c = self.client().await?;
        let row = c
            .query_opt("SELECT value FROM kv WHERE key = $1", &[&key])
            .await
            .map_err(backend("reading a key"))?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn set_value(&self, key: &str, value: &str) -> Result<()> {
        let c = self.client().await?;
        c.execute(
            "INSERT INTO kv (key, value) VALUES ($1, $2)
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            &[&key, &value],
        )
        .await
        .map_err(backend("writing a key"))?;
        Ok(())
    }
}

/// Takes `count` ids from the named counter, atomically (the upsert locks the counter's row).
async fn next_id(c: &impl GenericClient, counter: &str, count: u64) -> Result<u64> {
    let count = i(count);
    let first: i64 = c
        .query_one(
            "INSERT INTO counters (name, next_id) VALUES ($1, 1 + $2::BIGINT)
             ON CONFLICT (name) DO UPDATE SET next_id = counters.next_id + $2::BIGINT
             RETURNING next_id - $2::BIGINT",
            &[&counter, &count],
        )
        .await
        .map_err(backend("advancing a counter"))?
        .get(0);
    Ok(first as u64)
}

async fn add_partitions_tx(c: &impl GenericClient, topic: &str, from: u32, to: u32) -> Result<()> {
    for p in from..to {
        let stream_id = next_id(c, "stream", 1).await?;
        c.execute(
            "INSERT INTO streams (stream_id, epoch, start_offset, end_offset) VALUES ($1, 0, 0, 0)",
            &[&i(stream_id)],
        )
        .await
        .map_err(backend("creating a stream"))?;
        c.execute(
            "INSERT INTO partitions (topic, partition, stream_id) VALUES ($1, $2, $3)",
            &[&topic, &(p as i32), &i(stream_id)],
        )
        .await
        .map_err(backend("creating a partition"))?;
    }
    Ok(())
}

fn topic_row(row: &tokio_postgres::Row) -> TopicMeta {
    let id: &[u8] = row.get(1);
    let mut topic_id = [0u8; 16];
    if id.len() == 16 {
        topic_id.copy_from_slice(id);
    }
    let streams: Vec<i64> = row.get(3);
    TopicMeta {
        name: row.get(0),
        topic_id,
        streams: streams.into_iter().map(|s| s as u64).collect(),
        configs: decode_configs(row.get(2)),
    }
}

async fn read_topic(c: &impl GenericClient, name: &str) -> Result<Option<TopicMeta>> {
    let row = c
        .query_opt(
            &format!("{TOPIC_QUERY} WHERE t.name = $1 GROUP BY t.name"),
            &[&name],
        )
        .await
        .map_err(backend("reading a topic"))?;
    Ok(row.as_ref().map(topic_row))
}

/// Locks a topic's row until the transaction ends, then reads it.
async fn lock_topic(c: &impl GenericClient, name: &str) -> Result<TopicMeta> {
    c.query_opt("SELECT 1 FROM topics WHERE name = $1 FOR UPDATE", &[&name])
        .await
        .map_err(backend("locking a topic"))?
        .ok_or_else(|| MetaError::UnknownTopic(name.to_string()))?;
    read_topic(c, name)
        .await?
        .ok_or_else(|| MetaError::UnknownTopic(name.to_string()))
}
