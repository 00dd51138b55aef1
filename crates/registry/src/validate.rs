//! Schemas enforced on produce, per topic, with Confluent's config names: a record's key or
//! value must carry the wire format's prefix (magic byte 0, then a 4-byte big-endian schema id)
//! and an id registered under the subject the topic's naming strategy gives; with
//! `weir.schema.validation=full` the payload must also decode with that schema. Null keys and
//! values (tombstones) pass, as in Confluent Server.
//!
//! A positive verdict (this subject has this id) is kept for [`VERDICT_TTL`]: an id never
//! changes meaning, and a soft-deleted version still validates (records already written with it
//! stay readable), so only a permanent delete can end a verdict, and other brokers see it at
//! most that long after. A miss is never kept: it reads the store, so a schema registered
//! through any broker validates at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_metrics::{Counter, Registry as Meters};

use crate::format::Parsed;
use crate::Registry;

// The topic configs (checked where every topic config is: weir_partition::topics).

/// `true`: every record's key must carry a schema id registered under the key subject.
pub const KEY_VALIDATION: &str = "confluent.key.schema.validation";
/// The same for values.
pub const VALUE_VALIDATION: &str = "confluent.value.schema.validation";
/// The key subject's naming strategy (Confluent's class names, or their short names).
pub const KEY_STRATEGY: &str = "confluent.key.subject.name.strategy";
pub const VALUE_STRATEGY: &str = "confluent.value.subject.name.strategy";
/// `id` (the default: the id is registered under the subject) or `full` (the payload decodes
/// with the schema too).
pub const DEPTH: &str = "weir.schema.validation";

/// How long a positive verdict is kept.
pub const VERDICT_TTL: Duration = Duration::from_secs(10);

/// Subjects whose verdicts are kept, at most; past it the cache starts again.
const VERDICTS_KEPT: usize = 100_000;

/// How a subject is named from the topic and the record's schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// `<topic>-key` / `<topic>-value`.
    Topic,
    /// The schema's record name.
    Record,
    /// `<topic>-<record name>`.
    TopicRecord,
}

impl Strategy {
    /// Confluent's class name (`io.confluent.kafka.serializers.subject.TopicNameStrategy`) or
    /// its last part.
    pub fn from_name(name: &str) -> Option<Strategy> {
        match name.rsplit('.').next().unwrap_or(name) {
            "TopicNameStrategy" => Some(Strategy::Topic),
            "RecordNameStrategy" => Some(Strategy::Record),
            "TopicRecordNameStrategy" => Some(Strategy::TopicRecord),
            _ => None,
        }
    }
}

/// A topic's schema checks, from its configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaPolicy {
    pub key: Option<Strategy>,
    pub value: Option<Strategy>,
    pub full: bool,
}

impl SchemaPolicy {
    /// The checks `configs` ask for; `None` when they ask for none (nothing to do per record).
    pub fn of(configs: &BTreeMap<String, String>) -> Option<SchemaPolicy> {
        let on = |k: &str| {
            configs
                .get(k)
                .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        };
        let strategy = |k: &str| {
            configs
                .get(k)
                .and_then(|v| Strategy::from_name(v))
                .unwrap_or(Strategy::Topic)
        };
        let policy = SchemaPolicy {
            key: on(KEY_VALIDATION).then(|| strategy(KEY_STRATEGY)),
            value: on(VALUE_VALIDATION).then(|| strategy(VALUE_STRATEGY)),
            full: configs
                .get(DEPTH)
                .is_some_and(|v| v.eq_ignore_ascii_case("full")),
        };
        (policy.key.is_some() || policy.value.is_some()).then_some(policy)
    }
}

/// Why a batch is refused: the record (its index in the batch) and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub index: usize,
    pub message: String,
}

#[derive(Clone, Default)]
pub struct ValidationMeters {
    pub records: Counter,
    pub refused_batches: Counter,
    pub verdict_hits: Counter,
    pub verdict_misses: Counter,
}

impl ValidationMeters {
    pub fn register(&self, r: &mut Meters) {
        r.counter(
            "schema_validation_records",
            "Records whose key or value was checked against the schema registry on produce.",
            &self.records,
        );
        r.counter(
            "schema_validation_refused_batches",
            "Produced batches refused with INVALID_RECORD by a topic's schema validation.",
            &self.refused_batches,
        );
        r.counter(
            "schema_validation_verdict_hits",
            "Schema ids found valid for a subject from the kept verdicts.",
            &self.verdict_hits,
        );
        r.counter(
            "schema_validation_verdict_misses",
            "Schema ids looked up in the metadata store for a subject (not kept, or expired).",
            &self.verdict_misses,
        );
    }
}

/// The produce path's schema checks, over the broker's registry.
pub struct SchemaChecks {
    registry: Arc<Registry>,
    /// (subject, id) found valid, and when.
    /// Ids found valid by subject (looked up without allocating a key per record).
    verdicts: Mutex<HashMap<String, HashMap<u32, Instant>>>,
    /// Schemas by id, parsed, and when read.
    by_id: Mutex<HashMap<u32, (Arc<Parsed>, Instant)>>,
    pub meters: ValidationMeters,
}

/// Which part of a record is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Key,
    Value,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::Key => "key",
            Field::Value => "value",
        }
    }
}

impl SchemaChecks {
    pub fn new(registry: Arc<Registry>) -> SchemaChecks {
        SchemaChecks {
            registry,
            verdicts: Mutex::new(HashMap::new()),
            by_id: Mutex::new(HashMap::new()),
            meters: ValidationMeters::default(),
        }
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Checks every record of a batch (key and value, as `policy` asks) of `topic`: the first
    /// that fails, and why.
    pub async fn check(
        &self,
        topic: &str,
        policy: &SchemaPolicy,
        records: &[(Option<Bytes>, Option<Bytes>)],
    ) -> Result<(), Invalid> {
        let result = self.check_all(topic, policy, records).await;
        if result.is_err() {
            self.meters.refused_batches.inc();
        }
        result
    }

    async fn check_all(
        &self,
        topic: &str,
        policy: &SchemaPolicy,
        records: &[(Option<Bytes>, Option<Bytes>)],
    ) -> Result<(), Invalid> {
        // The topic name strategy's subjects, once per batch rather than once per record.
        let subjects = [
            format!("{topic}-{}", Field::Key.name()),
            format!("{topic}-{}", Field::Value.name()),
        ];
        for (index, (key, value)) in records.iter().enumerate() {
            self.meters.records.inc();
            for (field, strategy, bytes, topic_subject) in [
                (Field::Key, policy.key, key, &subjects[0]),
                (Field::Value, policy.value, value, &subjects[1]),
            ] {
                let (Some(strategy), Some(bytes)) = (strategy, bytes) else {
                    continue;
                };
                self.check_one(topic, topic_subject, strategy, policy.full, bytes)
                    .await
                    .map_err(|why| Invalid {
                        index,
                        message: format!(
                            "record {index} of the batch is refused by the topic's schema \
                             validation: its {} {why}",
                            field.name()
                        ),
                    })?;
            }
        }
        Ok(())
    }

    async fn check_one(
        &self,
        topic: &str,
        topic_subject: &str,
        strategy: Strategy,
        full: bool,
        bytes: &Bytes,
    ) -> Result<(), String> {
        let id = match bytes.as_ref() {
            [0, a, b, c, d, ..] => u32::from_be_bytes([*a, *b, *c, *d]),
            _ => {
                return Err(
                    "does not start with a schema id (magic byte 0, then a 4-byte id)".to_string(),
                )
            }
        };
        let subject: std::borrow::Cow<str> = match strategy {
            Strategy::Topic => topic_subject.into(),
            Strategy::Record | Strategy::TopicRecord => {
                let name = self
                    .schema_of(id)
                    .await?
                    .record_name_of(&bytes[5..])
                    .ok_or_else(|| {
                        format!("has schema id {id}, whose schema has no record name")
                    })?;
                match strategy {
                    Strategy::Record => name.into(),
                    _ => format!("{topic}-{name}").into(),
                }
            }
        };
        if !self.kept(&subject, id) {
            self.meters.verdict_misses.inc();
            let usages = self
                .registry
                .store()
                .schema_usages(id)
                .await
                .map_err(|e| format!("could not be checked (schema id {id}): {e}"))?;
            if usages.is_empty() {
                return Err(format!("names schema id {id}, which is not registered"));
            }
            if !usages.iter().any(|u| u.subject == subject) {
                return Err(format!(
                    "has schema id {id}, which is not registered under subject {subject}"
                ));
            }
            self.keep(&subject, id);
        }
        if full {
            self.schema_of(id)
                .await?
                .decode(&bytes[5..])
                .map_err(|e| format!("does not decode with schema id {id}: {e}"))?;
        }
        Ok(())
    }

    /// The schema of `id`, parsed (kept as long as a verdict).
    async fn schema_of(&self, id: u32) -> Result<Arc<Parsed>, String> {
        if let Some((parsed, at)) = self
            .by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
        {
            if at.elapsed() < VERDICT_TTL {
                return Ok(Arc::clone(parsed));
            }
        }
        let schema = match self.registry.schema_by_id(id).await {
            Ok(s) => s,
            Err(e) if e.code == 40403 => {
                return Err(format!("names schema id {id}, which is not registered"))
            }
            Err(e) => {
                return Err(format!(
                    "could not be checked (schema id {id}): {}",
                    e.message
                ))
            }
        };
        let parsed = self
            .registry
            .parsed(&schema)
            .await
            .map_err(|e| format!("could not be checked (schema id {id}): {}", e.message))?;
        let mut by_id = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        if by_id.len() >= VERDICTS_KEPT {
            by_id.clear();
        }
        by_id.insert(id, (Arc::clone(&parsed), Instant::now()));
        Ok(parsed)
    }

    fn kept(&self, subject: &str, id: u32) -> bool {
        let verdicts = self.verdicts.lock().unwrap_or_else(|e| e.into_inner());
        let hit = verdicts
            .get(subject)
            .and_then(|ids| ids.get(&id))
            .is_some_and(|at| at.elapsed() < VERDICT_TTL);
        if hit {
            self.meters.verdict_hits.inc();
        }
        hit
    }

    fn keep(&self, subject: &str, id: u32) {
        let mut verdicts = self.verdicts.lock().unwrap_or_else(|e| e.into_inner());
        if verdicts.len() >= VERDICTS_KEPT {
            verdicts.clear();
        }
        verdicts
            .entry(subject.to_string())
            .or_default()
            .insert(id, Instant::now());
    }
}

#[cfg(test)]
mod tests;
