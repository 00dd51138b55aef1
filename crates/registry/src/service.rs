//! The registry's rules, over the metadata store: modes, compatibility levels, registration,
//! lookups, deletes, as Confluent's Schema Registry applies them. The HTTP layer only maps
//! requests to these calls.
//!
//! Normalization (`normalize=true`, or `normalize` in a config) changes nothing: every schema is
//! stored in its canonical text already, which for Avro is what Confluent's normalization gives
//! (key order and whitespace do not make a new schema).
//!
//! Freshness: every call reads what it serves from the store, which every broker shares, so an
//! answer never misses a write another broker acknowledged. What is cached is what cannot go
//! stale: a schema parsed from its content is kept by the content's fingerprint.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use md5::{Digest, Md5};
use serde_json::{json, Map, Value};
use weir_meta::{
    Registered, RegistrySetting, SchemaContent, SchemaDeleted, SchemaReference, SchemaRegistration,
    Schemas, StoredSchema, SubjectVersion,
};

use crate::error::{RegistryError, Result};
use crate::format::{Direction, Parsed, SchemaType};
use crate::meters::RegistryMeters;

/// Compatibility levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    None,
    Backward,
    BackwardTransitive,
    Forward,
    ForwardTransitive,
    Full,
    FullTransitive,
}

impl Level {
    pub fn from_name(name: &str) -> Option<Level> {
        Some(match name.to_ascii_uppercase().as_str() {
            "NONE" => Level::None,
            "BACKWARD" => Level::Backward,
            "BACKWARD_TRANSITIVE" => Level::BackwardTransitive,
            "FORWARD" => Level::Forward,
            "FORWARD_TRANSITIVE" => Level::ForwardTransitive,
            "FULL" => Level::Full,
            "FULL_TRANSITIVE" => Level::FullTransitive,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Level::None => "NONE",
            Level::Backward => "BACKWARD",
            Level::BackwardTransitive => "BACKWARD_TRANSITIVE",
            Level::Forward => "FORWARD",
            Level::ForwardTransitive => "FORWARD_TRANSITIVE",
            Level::Full => "FULL",
            Level::FullTransitive => "FULL_TRANSITIVE",
        }
    }

    fn direction(self) -> Option<Direction> {
        match self {
            Level::None => None,
            Level::Backward | Level::BackwardTransitive => Some(Direction::Backward),
            Level::Forward | Level::ForwardTransitive => Some(Direction::Forward),
            Level::Full | Level::FullTransitive => Some(Direction::Full),
        }
    }

    fn transitive(self) -> bool {
        matches!(
            self,
            Level::BackwardTransitive | Level::ForwardTransitive | Level::FullTransitive
        )
    }
}

/// Modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    ReadWrite,
    ReadOnly,
    Import,
}

impl Mode {
    pub fn from_name(name: &str) -> Option<Mode> {
        Some(match name.to_ascii_uppercase().as_str() {
            "READWRITE" => Mode::ReadWrite,
            "READONLY" | "READONLY_OVERRIDE" => Mode::ReadOnly,
            "IMPORT" => Mode::Import,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::ReadWrite => "READWRITE",
            Mode::ReadOnly => "READONLY",
            Mode::Import => "IMPORT",
        }
    }
}

/// A version in a path: a number, or the latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionSpec {
    Latest,
    Number(u32),
}

impl VersionSpec {
    /// `latest` (any case), `-1`, or a positive number; otherwise 42202.
    pub fn parse(text: &str) -> Result<VersionSpec> {
        if text.eq_ignore_ascii_case("latest") || text == "-1" {
            return Ok(VersionSpec::Latest);
        }
        match text.parse::<i64>() {
            Ok(n) if (1..=i64::from(i32::MAX)).contains(&n) => Ok(VersionSpec::Number(n as u32)),
            _ => Err(RegistryError::invalid_version(text)),
        }
    }
}

/// A schema as a client sends it (register, look up, check).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaRequest {
    #[serde(default)]
    pub schema: Option<String>,
    #[serde(default)]
    pub schema_type: Option<String>,
    #[serde(default)]
    pub references: Vec<ReferenceRequest>,
    #[serde(default)]
    pub metadata: Option<Value>,
    #[serde(default)]
    pub rule_set: Option<Value>,
    /// IMPORT mode only.
    #[serde(default)]
    pub id: Option<i64>,
    #[serde(default)]
    pub version: Option<i64>,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct ReferenceRequest {
    pub name: String,
    pub subject: String,
    pub version: i64,
}

/// A subject's version and its schema, as the API prints it.
#[derive(Debug, Clone)]
pub struct VersionView {
    pub subject: String,
    pub version: u32,
    pub deleted: bool,
    pub schema: StoredSchema,
}

/// The schema registry: Confluent's rules over a [`Schemas`] store.
pub struct Registry {
    store: Arc<dyn Schemas>,
    /// Parsed schemas by content fingerprint (a content never changes meaning).
    parsed: Mutex<HashMap<String, Arc<Parsed>>>,
    pub meters: RegistryMeters,
}

/// Parsed schemas kept, at most; past it the cache starts again (parsing is cheap, this only
/// bounds memory).
const PARSED_KEPT: usize = 10_000;

/// Registrations tried again after another broker registered a version first.
const RACE_RETRIES: usize = 16;

impl Registry {
    pub fn new(store: Arc<dyn Schemas>, meters: RegistryMeters) -> Registry {
        Registry {
            store,
            parsed: Mutex::new(HashMap::new()),
            meters,
        }
    }

    pub fn store(&self) -> &Arc<dyn Schemas> {
        &self.store
    }

    // ------------------------------------------------------------------ settings

    /// The subject's own compatibility config (`""`: the global one), as stored.
    async fn config_value(&self, subject: &str) -> Result<Option<Map<String, Value>>> {
        let raw = self
            .store
            .registry_setting(RegistrySetting::Config, subject)
            .await?;
        Ok(raw.and_then(|r| match serde_json::from_str(&r) {
            Ok(Value::Object(m)) => Some(m),
            _ => None,
        }))
    }

    /// `GET /config[/{s}]`: with a subject and no config of its own, 40408 unless
    /// `default_to_global`.
    pub async fn get_config(
        &self,
        subject: Option<&str>,
        default_to_global: bool,
    ) -> Result<Value> {
        if let Some(s) = subject {
            if let Some(c) = self.config_value(s).await? {
                return Ok(Value::Object(c));
            }
            if !default_to_global {
                return Err(RegistryError::new(
                    40408,
                    format!("Subject '{s}' does not have subject-level compatibility configured"),
                ));
            }
        }
        Ok(match self.config_value("").await? {
            Some(c) => Value::Object(c),
            None => json!({"compatibilityLevel": Level::Backward.name()}),
        })
    }

    /// `PUT /config[/{s}]` with `{"compatibility": ...}` (and Confluent's other config keys,
    /// kept as given); answers the request as Confluent does.
    pub async fn set_config(&self, subject: Option<&str>, body: &Value) -> Result<Value> {
        if let Some(s) = subject {
            check_subject(s)?;
        }
        self.check_writable(subject.unwrap_or(""), true).await?;
        let Value::Object(body) = body else {
            return Err(RegistryError::new(42203, "Invalid config: not an object"));
        };
        let level = body
            .get("compatibility")
            .or_else(|| body.get("compatibilityLevel"));
        let mut stored = self
            .config_value(subject.unwrap_or(""))
            .await?
            .unwrap_or_default();
        let mut answer = Map::new();
        if let Some(level) = level {
            let level = level
                .as_str()
                .and_then(Level::from_name)
                .ok_or_else(RegistryError::invalid_compatibility)?;
            stored.insert("compatibilityLevel".into(), level.name().into());
            answer.insert("compatibility".into(), level.name().into());
        }
        for (k, v) in body {
            if k != "compatibility" && k != "compatibilityLevel" && !v.is_null() {
                stored.insert(k.clone(), v.clone());
                answer.insert(k.clone(), v.clone());
            }
        }
        self.store
            .set_registry_setting(
                RegistrySetting::Config,
                subject.unwrap_or(""),
                Some(&Value::Object(stored).to_string()),
            )
            .await?;
        Ok(Value::Object(answer))
    }

    /// `DELETE /config[/{s}]`: the config it had (40401 for a subject without one).
    pub async fn delete_config(&self, subject: Option<&str>) -> Result<Value> {
        let key = subject.unwrap_or("");
        self.check_writable(key, true).await?;
        let old = self
            .store
            .set_registry_setting(RegistrySetting::Config, key, None)
            .await?;
        match (old, subject) {
            (Some(old), _) => Ok(serde_json::from_str(&old).unwrap_or(Value::Null)),
            (None, Some(s)) => Err(RegistryError::subject_not_found(s)),
            (None, None) => Ok(json!({"compatibilityLevel": Level::Backward.name()})),
        }
    }

    /// The level in force for `subject`: its own, else the global one, else BACKWARD.
    pub async fn level(&self, subject: &str) -> Result<Level> {
        for scope in [subject, ""] {
            if let Some(c) = self.config_value(scope).await? {
                if let Some(l) = c
                    .get("compatibilityLevel")
                    .and_then(Value::as_str)
                    .and_then(Level::from_name)
                {
                    return Ok(l);
                }
            }
        }
        Ok(Level::Backward)
    }

    async fn mode_of(&self, subject: &str) -> Result<Option<Mode>> {
        Ok(self
            .store
            .registry_setting(RegistrySetting::Mode, subject)
            .await?
            .and_then(|m| Mode::from_name(&m)))
    }

    /// The mode in force for `subject`: its own, else the global one, else READWRITE.
    pub async fn mode(&self, subject: &str) -> Result<Mode> {
        if !subject.is_empty() {
            if let Some(m) = self.mode_of(subject).await? {
                return Ok(m);
            }
        }
        Ok(self.mode_of("").await?.unwrap_or(Mode::ReadWrite))
    }

    /// `GET /mode[/{s}]`: with a subject and no mode of its own, 40409 unless
    /// `default_to_global`.
    pub async fn get_mode(&self, subject: Option<&str>, default_to_global: bool) -> Result<Value> {
        if let Some(s) = subject {
            if let Some(m) = self.mode_of(s).await? {
                return Ok(json!({"mode": m.name()}));
            }
            if !default_to_global {
                return Err(RegistryError::new(
                    40409,
                    format!("Subject '{s}' does not have subject-level mode configured"),
                ));
            }
        }
        Ok(json!({"mode": self.mode("").await?.name()}))
    }

    /// `PUT /mode[/{s}]`: IMPORT only where no live subject is in scope, unless `force`.
    pub async fn set_mode(
        &self,
        subject: Option<&str>,
        body: &Value,
        force: bool,
    ) -> Result<Value> {
        if let Some(s) = subject {
            check_subject(s)?;
        }
        let mode = body
            .get("mode")
            .and_then(Value::as_str)
            .and_then(Mode::from_name)
            .ok_or_else(RegistryError::invalid_mode)?;
        let key = subject.unwrap_or("");
        if mode == Mode::Import && !force && self.mode(key).await? != Mode::Import {
            let live = match subject {
                Some(s) => self
                    .store
                    .subject_versions(s)
                    .await?
                    .iter()
                    .any(|v| !v.deleted),
                None => self.store.subjects().await?.iter().any(|(_, live)| *live),
            };
            if live {
                return Err(RegistryError::not_permitted(
                    "Cannot import since found existing subjects",
                ));
            }
        }
        self.store
            .set_registry_setting(RegistrySetting::Mode, key, Some(mode.name()))
            .await?;
        Ok(json!({"mode": mode.name()}))
    }

    /// `DELETE /mode[/{s}]`: the mode it had (40401 for a subject without one).
    pub async fn delete_mode(&self, subject: Option<&str>) -> Result<Value> {
        let key = subject.unwrap_or("");
        let old = self
            .store
            .set_registry_setting(RegistrySetting::Mode, key, None)
            .await?;
        match (old, subject) {
            (Some(old), _) => Ok(json!({"mode": old})),
            (None, Some(s)) => Err(RegistryError::subject_not_found(s)),
            (None, None) => Ok(json!({"mode": Mode::ReadWrite.name()})),
        }
    }

    /// Refuses a change in READONLY mode (and, unless `import_ok`, in IMPORT mode).
    async fn check_writable(&self, subject: &str, import_ok: bool) -> Result<()> {
        match self.mode(subject).await? {
            Mode::ReadOnly => Err(RegistryError::not_permitted(format!(
                "Subject {subject} is in read-only mode"
            ))),
            Mode::Import if !import_ok => Err(RegistryError::not_permitted(format!(
                "Subject {subject} is not in read-write mode"
            ))),
            _ => Ok(()),
        }
    }

    // ------------------------------------------------------------------ parsing

    /// The schemas `references` name (the name they are referred to by, their text), each
    /// after those it refers to.
    async fn reference_texts(
        &self,
        references: &[SchemaReference],
    ) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut stack: Vec<(SchemaReference, bool)> = references
            .iter()
            .rev()
            .map(|r| (r.clone(), false))
            .collect();
        // Depth-first, dependencies first; `true` marks a reference whose own references are
        // already pushed.
        let mut texts: HashMap<(String, u32), StoredSchema> = HashMap::new();
        while let Some((r, expanded)) = stack.pop() {
            let key = (r.subject.clone(), r.version);
            if expanded {
                if seen.insert(key.clone()) {
                    if let Some(s) = texts.get(&key) {
                        out.push((r.name.clone(), s.content.schema.clone()));
                    }
                }
                continue;
            }
            if seen.contains(&key) || texts.contains_key(&key) {
                continue;
            }
            let schema = self
                .version_schema(&r.subject, r.version)
                .await
                .map_err(|_| {
                    RegistryError::invalid_schema(format!(
                        "Invalid schema: reference {} to subject {} version {} does not exist",
                        r.name, r.subject, r.version
                    ))
                })?;
            stack.push((r.clone(), true));
            for inner in schema.content.references.iter().rev() {
                stack.push((inner.clone(), false));
            }
            texts.insert(key, schema);
        }
        Ok(out)
    }

    /// The schema of `subject` `version` (soft-deleted included), for references.
    async fn version_schema(&self, subject: &str, version: u32) -> Result<StoredSchema> {
        let v = self
            .store
            .subject_versions(subject)
            .await?
            .into_iter()
            .find(|v| v.version == version)
            .ok_or_else(|| RegistryError::version_not_found(&version.to_string()))?;
        self.store
            .schema(v.schema_id)
            .await?
            .ok_or_else(RegistryError::schema_not_found)
    }

    /// The stored schema, parsed (from the cache when its content was parsed before).
    pub async fn parsed(&self, schema: &StoredSchema) -> Result<Arc<Parsed>> {
        if let Some(p) = self.cached(&schema.content.fingerprint) {
            return Ok(p);
        }
        let ty = SchemaType::from_name(Some(&schema.content.schema_type)).ok_or_else(|| {
            RegistryError::invalid_schema(format!(
                "Invalid schema type {}",
                schema.content.schema_type
            ))
        })?;
        let refs = self.reference_texts(&schema.content.references).await?;
        let parsed = Arc::new(
            Parsed::parse(ty, &schema.content.schema, &refs)
                .map_err(RegistryError::invalid_schema)?,
        );
        self.keep(&schema.content.fingerprint, &parsed);
        Ok(parsed)
    }

    fn cached(&self, fingerprint: &str) -> Option<Arc<Parsed>> {
        let hit = self
            .parsed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(fingerprint)
            .cloned();
        self.meters.cache(hit.is_some());
        hit
    }

    fn keep(&self, fingerprint: &str, parsed: &Arc<Parsed>) {
        let mut cache = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= PARSED_KEPT {
            cache.clear();
        }
        cache.insert(fingerprint.to_string(), Arc::clone(parsed));
    }

    /// The text of `schema` in the `format` a client asked for (see [`Parsed::formatted`]).
    pub async fn formatted(&self, schema: &StoredSchema, format: Option<&str>) -> Result<String> {
        match format {
            Some("serialized") if schema.content.schema_type == SchemaType::Protobuf.name() => {
                Ok(self.parsed(schema).await?.formatted(format))
            }
            _ => Ok(schema.content.schema.clone()),
        }
    }

    /// Parses a request's schema into the content to store, and the parsed schema.
    async fn content_of(
        &self,
        req: &SchemaRequest,
        text: &str,
    ) -> Result<(SchemaContent, Arc<Parsed>)> {
        let ty = SchemaType::from_name(req.schema_type.as_deref()).ok_or_else(|| {
            RegistryError::invalid_schema(format!(
                "Invalid schema type {}",
                req.schema_type.as_deref().unwrap_or_default()
            ))
        })?;
        let mut references = Vec::with_capacity(req.references.len());
        for r in &req.references {
            let version = match r.version {
                v if v > 0 && v <= i64::from(i32::MAX) => v as u32,
                -1 => {
                    self.latest_version(&r.subject, false)
                        .await
                        .map_err(|_| {
                            RegistryError::invalid_schema(format!(
                                "Invalid schema: reference {} to subject {} has no version",
                                r.name, r.subject
                            ))
                        })?
                        .version
                }
                v => {
                    return Err(RegistryError::invalid_schema(format!(
                        "Invalid schema: reference {} has version {v}",
                        r.name
                    )))
                }
            };
            references.push(SchemaReference {
                name: r.name.clone(),
                subject: r.subject.clone(),
                version,
            });
        }
        let texts = self.reference_texts(&references).await?;
        let parsed =
            Arc::new(Parsed::parse(ty, text, &texts).map_err(RegistryError::invalid_schema)?);
        let metadata = req
            .metadata
            .as_ref()
            .filter(|m| !m.is_null())
            .map(Value::to_string);
        let rule_set = req
            .rule_set
            .as_ref()
            .filter(|m| !m.is_null())
            .map(Value::to_string);
        let mut content = SchemaContent {
            schema_type: ty.name().to_string(),
            schema: parsed.canonical(),
            references,
            metadata,
            rule_set,
            fingerprint: String::new(),
        };
        content.fingerprint = fingerprint(&content);
        self.keep(&content.fingerprint, &parsed);
        Ok((content, parsed))
    }

    // ------------------------------------------------------------------ reads

    /// Every version of `subject`; 40401 when it has none (none live unless `deleted`).
    async fn versions_of(&self, subject: &str, deleted: bool) -> Result<Vec<SubjectVersion>> {
        let versions: Vec<SubjectVersion> = self
            .store
            .subject_versions(subject)
            .await?
            .into_iter()
            .filter(|v| deleted || !v.deleted)
            .collect();
        if versions.is_empty() {
            return Err(RegistryError::subject_not_found(subject));
        }
        Ok(versions)
    }

    async fn latest_version(&self, subject: &str, deleted: bool) -> Result<SubjectVersion> {
        self.versions_of(subject, deleted)
            .await?
            .pop()
            .ok_or_else(|| RegistryError::subject_not_found(subject))
    }

    async fn view(&self, v: SubjectVersion) -> Result<VersionView> {
        let schema = self
            .store
            .schema(v.schema_id)
            .await?
            .ok_or_else(RegistryError::schema_not_found)?;
        Ok(VersionView {
            subject: v.subject,
            version: v.version,
            deleted: v.deleted,
            schema,
        })
    }

    /// `GET /subjects/{s}/versions/{v}`.
    pub async fn version(
        &self,
        subject: &str,
        spec: VersionSpec,
        deleted: bool,
    ) -> Result<VersionView> {
        let versions = self.versions_of(subject, true).await?;
        let found = match spec {
            VersionSpec::Latest => versions.into_iter().rev().find(|v| deleted || !v.deleted),
            VersionSpec::Number(n) => versions
                .into_iter()
                .find(|v| v.version == n && (deleted || !v.deleted)),
        };
        let v = found.ok_or_else(|| match spec {
            VersionSpec::Latest => RegistryError::subject_not_found(subject),
            VersionSpec::Number(n) => RegistryError::version_not_found(&n.to_string()),
        })?;
        self.view(v).await
    }

    /// `GET /subjects/{s}/versions`.
    pub async fn versions(
        &self,
        subject: &str,
        deleted: bool,
        deleted_only: bool,
    ) -> Result<Vec<u32>> {
        let versions = self.versions_of(subject, deleted || deleted_only).await?;
        Ok(versions
            .into_iter()
            .filter(|v| !deleted_only || v.deleted)
            .map(|v| v.version)
            .collect())
    }

    /// `GET /subjects`.
    pub async fn subjects(
        &self,
        prefix: &str,
        deleted: bool,
        deleted_only: bool,
    ) -> Result<Vec<String>> {
        Ok(self
            .store
            .subjects()
            .await?
            .into_iter()
            .filter(|(s, live)| {
                s.starts_with(prefix)
                    && if deleted_only {
                        !live
                    } else {
                        deleted || *live
                    }
            })
            .map(|(s, _)| s)
            .collect())
    }

    /// `GET /schemas/ids/{id}`.
    pub async fn schema_by_id(&self, id: u32) -> Result<StoredSchema> {
        self.store
            .schema(id)
            .await?
            .ok_or_else(|| RegistryError::schema_id_not_found(id))
    }

    /// `GET /schemas/ids/{id}/versions` (and `/subjects`).
    pub async fn usages(&self, id: u32, deleted: bool) -> Result<Vec<SubjectVersion>> {
        let usages = self.store.schema_usages(id).await?;
        if usages.is_empty() {
            return Err(RegistryError::schema_not_found());
        }
        Ok(usages
            .into_iter()
            .filter(|u| deleted || !u.deleted)
            .collect())
    }

    /// `GET /subjects/{s}/versions/{v}/referencedby`.
    pub async fn referenced_by(&self, subject: &str, spec: VersionSpec) -> Result<Vec<u32>> {
        let v = self.version(subject, spec, true).await?;
        Ok(self.store.referenced_by(subject, v.version).await?)
    }

    /// `GET /subjects/{s}/metadata`: the latest version whose metadata properties hold every
    /// pair.
    pub async fn latest_with_metadata(
        &self,
        subject: &str,
        pairs: &[(String, String)],
        deleted: bool,
    ) -> Result<VersionView> {
        for v in self.versions_of(subject, deleted).await?.into_iter().rev() {
            let view = self.view(v).await?;
            let props = view
                .schema
                .content
                .metadata
                .as_deref()
                .and_then(|m| serde_json::from_str::<Value>(m).ok())
                .and_then(|m| m.get("properties").cloned())
                .unwrap_or(Value::Null);
            if pairs
                .iter()
                .all(|(k, val)| props.get(k).and_then(Value::as_str) == Some(val.as_str()))
            {
                return Ok(view);
            }
        }
        Err(RegistryError::schema_not_found())
    }

    /// Every subject for the admin API: live and soft-deleted versions, and the latest live
    /// version's id and type.
    pub async fn summary(&self) -> Result<Value> {
        let mut out = Vec::new();
        for (subject, live) in self.store.subjects().await? {
            let versions = self.store.subject_versions(&subject).await?;
            let (alive, deleted): (Vec<&SubjectVersion>, Vec<&SubjectVersion>) =
                versions.iter().partition(|v| !v.deleted);
            let latest = match alive.last() {
                Some(v) => {
                    let ty = self
                        .store
                        .schema(v.schema_id)
                        .await?
                        .map(|s| s.content.schema_type)
                        .unwrap_or_default();
                    json!({"version": v.version, "id": v.schema_id, "schemaType": ty})
                }
                None => Value::Null,
            };
            out.push(json!({
                "subject": subject,
                "deleted": !live,
                "versions": alive.iter().map(|v| v.version).collect::<Vec<_>>(),
                "deleted_versions": deleted.iter().map(|v| v.version).collect::<Vec<_>>(),
                "latest": latest,
            }));
        }
        Ok(json!({"subjects": out}))
    }

    /// `POST /subjects/{s}`: the version of `subject` with this schema.
    pub async fn lookup(
        &self,
        subject: &str,
        req: &SchemaRequest,
        deleted: bool,
    ) -> Result<VersionView> {
        let versions = self.versions_of(subject, deleted).await?;
        let text = req.schema.as_deref().unwrap_or_default();
        let (content, _) = self.content_of(req, text).await?;
        for v in versions {
            let view = self.view(v).await?;
            if view.schema.content.fingerprint == content.fingerprint {
                return Ok(view);
            }
        }
        Err(RegistryError::schema_not_found())
    }

    // ------------------------------------------------------------------ writes

    /// Why `new` is not compatible with the live versions of `subject` at `level` (against the
    /// latest, or each newest first, stopping at the first that fails): the reasons, in
    /// Confluent's format; empty when compatible.
    async fn incompatibilities(
        &self,
        subject: &str,
        new: &Parsed,
        against: &[SubjectVersion],
        level: Level,
    ) -> Result<Vec<String>> {
        let Some(direction) = level.direction() else {
            return Ok(Vec::new());
        };
        let live: Vec<&SubjectVersion> = against.iter().filter(|v| !v.deleted).rev().collect();
        let checked = if level.transitive() {
            &live[..]
        } else {
            &live[..live.len().min(1)]
        };
        for v in checked {
            let old = self.view((*v).clone()).await?;
            let old_parsed = self.parsed(&old.schema).await?;
            let mut errors = if old_parsed.schema_type() != new.schema_type() {
                vec!["Incompatible because of different schema type".to_string()]
            } else {
                new.incompatibilities(&old_parsed, direction)
            };
            if !errors.is_empty() {
                let mut old_text = old.schema.content.schema.clone();
                old_text.truncate(10 * 1024);
                errors.push(format!("{{oldSchemaVersion: {}}}", v.version));
                errors.push(format!("{{oldSchema: '{old_text}'}}"));
                errors.push(format!(
                    "{{validateFields: 'false', compatibility: '{}'}}",
                    level.name()
                ));
                tracing::debug!(subject, version = v.version, "schema incompatible");
                return Ok(errors);
            }
        }
        Ok(Vec::new())
    }

    /// `POST /subjects/{s}/versions`: the id and version of the schema (existing ones if the
    /// subject has it live already).
    pub async fn register(
        &self,
        subject: &str,
        req: &SchemaRequest,
        force: bool,
    ) -> Result<(u32, u32, SchemaContent)> {
        check_subject(subject)?;
        let mode = self.mode(subject).await?;
        let import = match (req.id, mode) {
            (_, Mode::ReadOnly) => {
                return Err(RegistryError::not_permitted(format!(
                    "Subject {subject} is in read-only mode"
                )))
            }
            (Some(id), Mode::Import) if id >= 0 => Some(id),
            (Some(id), _) if id >= 0 => {
                return Err(RegistryError::not_permitted(format!(
                    "Subject {subject} is not in import mode"
                )))
            }
            (_, Mode::Import) => {
                return Err(RegistryError::not_permitted(format!(
                    "Subject {subject} is not in read-write mode"
                )))
            }
            _ => None,
        };
        for _ in 0..RACE_RETRIES {
            let versions = self.store.subject_versions(subject).await?;
            let text = match req.schema.as_deref() {
                Some(t) if !t.is_empty() => t.to_string(),
                _ => match versions.iter().rev().find(|v| !v.deleted) {
                    Some(v) => self.view(v.clone()).await?.schema.content.schema,
                    None => return Err(RegistryError::invalid_schema("Empty schema")),
                },
            };
            let (content, parsed) = self.content_of(req, &text).await?;
            for v in versions.iter().filter(|v| !v.deleted) {
                let view = self.view(v.clone()).await?;
                if view.schema.content.fingerprint == content.fingerprint {
                    return Ok((view.schema.id, v.version, view.schema.content));
                }
            }
            let max_version = versions.iter().map(|v| v.version).max().unwrap_or(0);
            let import_ids = match import {
                Some(id) => {
                    let id = u32::try_from(id)
                        .map_err(|_| RegistryError::invalid_schema(format!("Invalid id {id}")))?;
                    let version = match req.version {
                        Some(v) if v > 0 && v <= i64::from(i32::MAX) => v as u32,
                        _ => max_version + 1,
                    };
                    Some((id, version))
                }
                None => {
                    if let Some(v) = req.version.filter(|v| *v > 0) {
                        if v != i64::from(max_version) + 1 {
                            return Err(RegistryError::invalid_schema(
                                "Version is not one more than previous version",
                            ));
                        }
                    }
                    if !force {
                        let level = self.level(subject).await?;
                        let errors = self
                            .incompatibilities(subject, &parsed, &versions, level)
                            .await?;
                        if !errors.is_empty() {
                            return Err(RegistryError::incompatible(subject, &errors));
                        }
                    }
                    None
                }
            };
            let outcome = self
                .store
                .register_schema(SchemaRegistration {
                    subject: subject.to_string(),
                    content: content.clone(),
                    after_version: max_version,
                    import: import_ids,
                })
                .await?;
            match outcome {
                Registered::New { id, version } | Registered::Existing { id, version } => {
                    tracing::info!(subject, id, version, "schema registered");
                    return Ok((id, version, content));
                }
                Registered::Raced => continue,
                Registered::IdTaken => {
                    let id = import_ids.map_or(0, |i| i.0);
                    return Err(RegistryError::not_permitted(format!(
                        "Overwrite new schema with id {id} in context . is not permitted."
                    )));
                }
                Registered::VersionTaken => {
                    let v = import_ids.map_or(0, |i| i.1);
                    return Err(RegistryError::not_permitted(format!(
                        "Overwrite new schema with version {v} of subject {subject} is not permitted."
                    )));
                }
            }
        }
        Err(RegistryError::new(
            50001,
            format!("Error while registering schema: subject {subject} kept changing"),
        ))
    }

    /// `POST /compatibility/subjects/{s}/versions[/{v}]`: whether `req` is compatible with that
    /// version (`None`: with the versions the subject's level names), and why not.
    pub async fn check(
        &self,
        subject: &str,
        spec: Option<VersionSpec>,
        req: &SchemaRequest,
    ) -> Result<(bool, Vec<String>)> {
        let versions = self.store.subject_versions(subject).await?;
        let against: Vec<SubjectVersion> = match spec {
            None => versions,
            Some(VersionSpec::Latest) => versions
                .into_iter()
                .rev()
                .filter(|v| !v.deleted)
                .take(1)
                .collect(),
            Some(VersionSpec::Number(n)) => {
                let v = versions
                    .into_iter()
                    .find(|v| v.version == n && !v.deleted)
                    .ok_or_else(|| RegistryError::version_not_found(&n.to_string()))?;
                vec![v]
            }
        };
        let text = req.schema.clone().unwrap_or_default();
        let (_, parsed) = self.content_of(req, &text).await?;
        let level = self.level(subject).await?;
        let errors = self
            .incompatibilities(subject, &parsed, &against, level)
            .await?;
        Ok((errors.is_empty(), errors))
    }

    /// `DELETE /subjects/{s}[/versions/{v}]`: the versions deleted.
    pub async fn delete(
        &self,
        subject: &str,
        spec: Option<VersionSpec>,
        permanent: bool,
    ) -> Result<Vec<u32>> {
        self.check_writable(subject, true).await?;
        let version = match spec {
            None => None,
            Some(VersionSpec::Number(n)) => Some(n),
            Some(VersionSpec::Latest) => {
                let versions = self.versions_of(subject, permanent).await?;
                versions.last().map(|v| v.version)
            }
        };
        let shown = version.map(|v| v.to_string()).unwrap_or_default();
        match self
            .store
            .delete_schema_version(subject, version, permanent)
            .await?
        {
            SchemaDeleted::Done(versions) => {
                if permanent && self.store.subject_versions(subject).await?.is_empty() {
                    // A subject gone for good takes its own settings with it.
                    for kind in [RegistrySetting::Config, RegistrySetting::Mode] {
                        self.store.set_registry_setting(kind, subject, None).await?;
                    }
                }
                tracing::info!(subject, ?versions, permanent, "schema versions deleted");
                Ok(versions)
            }
            SchemaDeleted::NoSubject => Err(RegistryError::subject_not_found(subject)),
            SchemaDeleted::NoVersion => Err(RegistryError::version_not_found(&shown)),
            SchemaDeleted::AlreadySoftDeleted if version.is_some() => Err(RegistryError::new(
                40406,
                format!(
                    "Subject '{subject}' Version {shown} was soft deleted.Set permanent=true to delete permanently"
                ),
            )),
            SchemaDeleted::AlreadySoftDeleted => Err(RegistryError::new(
                40404,
                format!(
                    "Subject '{subject}' was soft deleted.Set permanent=true to delete permanently"
                ),
            )),
            SchemaDeleted::NotSoftDeleted if version.is_some() => Err(RegistryError::new(
                40407,
                format!(
                    "Subject '{subject}' Version {shown} was not deleted first before being permanently deleted"
                ),
            )),
            SchemaDeleted::NotSoftDeleted => Err(RegistryError::new(
                40405,
                format!(
                    "Subject '{subject}' was not deleted first before being permanently deleted"
                ),
            )),
            SchemaDeleted::Referenced(_) => Err(RegistryError::reference_exists(
                subject,
                version.unwrap_or(0),
            )),
        }
    }
}

/// A subject name Confluent accepts: no control characters, not its reserved names.
fn check_subject(subject: &str) -> Result<()> {
    if subject.chars().any(char::is_control) || subject == "__GLOBAL" || subject == "__EMPTY" {
        return Err(RegistryError::invalid_subject(subject));
    }
    Ok(())
}

/// The identity of a content: MD5 over its type, text, references, metadata and rule set.
fn fingerprint(c: &SchemaContent) -> String {
    let mut h = Md5::new();
    for part in [c.schema_type.as_str(), c.schema.as_str()] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    for r in &c.references {
        for part in [r.name.as_str(), r.subject.as_str()] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        h.update(r.version.to_be_bytes());
    }
    for part in [&c.metadata, &c.rule_set] {
        match part {
            Some(p) => {
                h.update([1]);
                h.update((p.len() as u64).to_be_bytes());
                h.update(p.as_bytes());
            }
            None => h.update([0]),
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
