//! The schema registry's state: schemas by id, subjects and their versions, and the registry's
//! settings (compatibility configs and modes, global and per subject).
//!
//! The store decides what must be decided atomically, so that every broker of a cluster can
//! serve writes with no leader of its own: a registration's id and version are given in one
//! transaction (ids unique cluster-wide, never reused, even after a permanent delete), a
//! registration is refused if the subject moved since the caller checked compatibility (the
//! caller checks again), and a delete is refused while a live schema references the version.
//! What a schema means (parsing, canonical text, compatibility) is the registry crate's: the
//! store keeps the canonical text and a fingerprint of the whole content, its identity.
//!
//! Every write raises the registry's version ([`Schemas::registry_version`]) in its transaction,
//! so that a broker caching what it read can tell, with one read, that nothing changed since.

use crate::Result;

/// A schema reference: a name as the referring schema uses it (an Avro full name, a `.proto`
/// import path, a JSON Schema `$ref`), and the subject version it resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaReference {
    pub name: String,
    pub subject: String,
    pub version: u32,
}

/// A schema's content, as registered under an id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaContent {
    /// `AVRO`, `PROTOBUF` or `JSON`.
    pub schema_type: String,
    /// The canonical text.
    pub schema: String,
    pub references: Vec<SchemaReference>,
    /// Confluent's `metadata` and `ruleSet`, as JSON text, kept verbatim.
    pub metadata: Option<String>,
    pub rule_set: Option<String>,
    /// A digest of all of the above: two contents are the same schema when their fingerprints
    /// are equal.
    pub fingerprint: String,
}

/// A schema and its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSchema {
    pub id: u32,
    pub content: SchemaContent,
}

/// A version of a subject, and the schema it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectVersion {
    pub subject: String,
    pub version: u32,
    pub schema_id: u32,
    /// Soft-deleted: not served unless asked for, still in the subject's version numbering.
    pub deleted: bool,
}

/// A registration, as the registry asks for it.
#[derive(Debug, Clone)]
pub struct SchemaRegistration {
    pub subject: String,
    pub content: SchemaContent,
    /// The subject's highest version (soft-deleted ones included; 0: none) when the caller
    /// checked compatibility: the new version is the next one, and the registration is refused
    /// ([`Registered::Raced`]) if another came first. Not used by an import.
    pub after_version: u32,
    /// IMPORT mode: the id and the version to keep (from another registry).
    pub import: Option<(u32, u32)>,
}

/// What a registration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registered {
    /// A new version, with this id (the content's id if it was registered before, under any
    /// subject).
    New { id: u32, version: u32 },
    /// The subject already has the content in a live version: nothing written.
    Existing { id: u32, version: u32 },
    /// The subject has a version above `after_version`: nothing written; check again.
    Raced,
    /// An import's id names another content: nothing written.
    IdTaken,
    /// An import's version exists with another schema: nothing written.
    VersionTaken,
}

/// What a delete did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaDeleted {
    /// The versions deleted (soft, or permanently), ascending.
    Done(Vec<u32>),
    /// The subject has no versions at all.
    NoSubject,
    /// The subject has no such version.
    NoVersion,
    /// A soft delete of what is soft-deleted already.
    AlreadySoftDeleted,
    /// A permanent delete of what is not soft-deleted first.
    NotSoftDeleted,
    /// A soft delete of a version these live schemas (ids) reference.
    Referenced(Vec<u32>),
}

/// Which registry setting: the compatibility config or the mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegistrySetting {
    /// The compatibility config, as the registry encodes it (JSON).
    Config,
    /// The mode (`READWRITE`, `READONLY`, `IMPORT`).
    Mode,
}

impl RegistrySetting {
    /// The name the store keeps it under.
    pub fn key(self) -> &'static str {
        match self {
            RegistrySetting::Config => "config",
            RegistrySetting::Mode => "mode",
        }
    }
}

/// The schema registry's part of the store. A subject of `""` in a setting call is the global
/// setting.
#[async_trait::async_trait]
pub trait Schemas: Send + Sync + 'static {
    /// Registers `r` (see [`SchemaRegistration`] and [`Registered`]), in one transaction.
    async fn register_schema(&self, r: SchemaRegistration) -> Result<Registered>;

    /// The schema of `id`, if any version of any subject (soft-deleted included) still names it.
    async fn schema(&self, id: u32) -> Result<Option<StoredSchema>>;

    /// Every version of `subject`, soft-deleted ones included, ascending.
    async fn subject_versions(&self, subject: &str) -> Result<Vec<SubjectVersion>>;

    /// Every subject with a version, and whether it has a live (not soft-deleted) one, by name.
    async fn subjects(&self) -> Result<Vec<(String, bool)>>;

    /// The subject versions (soft-deleted included) that name schema `id`.
    async fn schema_usages(&self, id: u32) -> Result<Vec<SubjectVersion>>;

    /// The ids of schemas named by a live version that reference `subject` `version`.
    async fn referenced_by(&self, subject: &str, version: u32) -> Result<Vec<u32>>;

    /// Deletes `version` of `subject` (or every version with `None`): soft-deletes live
    /// versions, or with `permanent` removes soft-deleted ones, and with them the schemas no
    /// version names any more. Ids are never given again.
    async fn delete_schema_version(
        &self,
        subject: &str,
        version: Option<u32>,
        permanent: bool,
    ) -> Result<SchemaDeleted>;

    /// The setting `kind` of `subject`, as it was set.
    async fn registry_setting(
        &self,
        kind: RegistrySetting,
        subject: &str,
    ) -> Result<Option<String>>;

    /// Sets (or with `None` removes) setting `kind` of `subject`; the value it had.
    async fn set_registry_setting(
        &self,
        kind: RegistrySetting,
        subject: &str,
        value: Option<&str>,
    ) -> Result<Option<String>>;

    /// Raised by every write of this part, in its transaction.
    async fn registry_version(&self) -> Result<u64>;
}

/// A registration's version and id, and how an import's are checked, decided from what the
/// transaction read. Shared by the backends, so that they decide alike.
pub(crate) struct RegisterPlan {
    pub version: u32,
    /// The id to use: an existing content's, or the next one (`new_id`).
    pub id: u32,
    pub new_content: bool,
}

/// What a registration transaction read, for [`plan_registration`].
pub(crate) struct RegisterReads {
    /// The subject's highest version, soft-deleted included (0: none).
    pub max_version: u32,
    /// For an import: the content fingerprint of the version it names, if it exists.
    pub import_version_fingerprint: Option<String>,
    /// For an import: the fingerprint of the id it names, if it exists.
    pub import_id_fingerprint: Option<String>,
    /// The lowest id with the same content, if any.
    pub same_content_id: Option<u32>,
    /// The highest id ever given.
    pub max_id: u32,
}

/// Decides a registration that is not [`Registered::Existing`]; `Err` is the refusal.
pub(crate) fn plan_registration(
    r: &SchemaRegistration,
    reads: &RegisterReads,
) -> std::result::Result<RegisterPlan, Registered> {
    let fingerprint = &r.content.fingerprint;
    match r.import {
        Some((id, version)) => {
            if reads.import_version_fingerprint.is_some() {
                return Err(Registered::VersionTaken);
            }
            let new_content = match &reads.import_id_fingerprint {
                Some(f) if f != fingerprint => return Err(Registered::IdTaken),
                Some(_) => false,
                None => true,
            };
            Ok(RegisterPlan {
                version,
                id,
                new_content,
            })
        }
        None => {
            if reads.max_version != r.after_version {
                return Err(Registered::Raced);
            }
            let (id, new_content) = match reads.same_content_id {
                Some(id) => (id, false),
                None => (reads.max_id + 1, true),
            };
            Ok(RegisterPlan {
                version: reads.max_version + 1,
                id,
                new_content,
            })
        }
    }
}

/// Decides a delete from the versions it targets (`rows`: soft-deleted flags by version) and
/// whether the subject has any version; `Ok` is the versions to change.
pub(crate) fn plan_delete(
    subject_exists: bool,
    version: Option<u32>,
    rows: &[(u32, bool)],
    permanent: bool,
) -> std::result::Result<Vec<u32>, SchemaDeleted> {
    if !subject_exists {
        return Err(SchemaDeleted::NoSubject);
    }
    if version.is_some() && rows.is_empty() {
        return Err(SchemaDeleted::NoVersion);
    }
    let live: Vec<u32> = rows.iter().filter(|r| !r.1).map(|r| r.0).collect();
    if permanent {
        if !live.is_empty() {
            return Err(SchemaDeleted::NotSoftDeleted);
        }
        return Ok(rows.iter().map(|r| r.0).collect());
    }
    if live.is_empty() {
        return Err(SchemaDeleted::AlreadySoftDeleted);
    }
    Ok(live)
}
