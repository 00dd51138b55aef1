//! The schema formats the registry serves: each parses a schema with its references, gives its
//! canonical text, says why one version cannot read another's data, and decodes a payload.
//!
//! - [`avro`]: Avro (apache-avro).
//! - [`json`]: JSON Schema (jsonschema).
//! - [`protobuf`]: Protobuf (protox, prost-reflect).

pub mod avro;
pub mod json;
pub mod protobuf;

// The formats' own crates, for what reads their values (the Iceberg translator).
pub use apache_avro;
pub use prost_reflect;

pub use avro::AvroSchema;
pub use json::JsonSchema;
pub use protobuf::ProtobufSchema;

/// A schema format, by Confluent's `schemaType` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaType {
    Avro,
    Json,
    Protobuf,
}

impl SchemaType {
    /// Every format served, as `GET /schemas/types` lists them.
    pub const ALL: [SchemaType; 3] = [SchemaType::Json, SchemaType::Protobuf, SchemaType::Avro];

    /// The request's `schemaType` (absent: AVRO); `None` for a format not served.
    pub fn from_name(name: Option<&str>) -> Option<SchemaType> {
        match name.map(str::to_ascii_uppercase).as_deref() {
            None | Some("AVRO") | Some("") => Some(SchemaType::Avro),
            Some("JSON") => Some(SchemaType::Json),
            Some("PROTOBUF") => Some(SchemaType::Protobuf),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SchemaType::Avro => "AVRO",
            SchemaType::Json => "JSON",
            SchemaType::Protobuf => "PROTOBUF",
        }
    }
}

/// Which way data must be readable between two versions of a subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The new schema reads data written with the old one.
    Backward,
    /// The old schema reads data written with the new one.
    Forward,
    /// Both.
    Full,
}

/// A parsed schema of any format.
// The variants differ in size (a compiled JSON Schema is large), but a parsed schema is made
// once per content and kept behind an Arc: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Parsed {
    Avro(AvroSchema),
    Json(JsonSchema),
    Protobuf(ProtobufSchema),
}

impl Parsed {
    /// Parses `text` of format `ty`; `references` are the referenced schemas (the name the
    /// referring schema uses, the text), each after those it refers to. `Err` is the reason,
    /// for a 42201.
    pub fn parse(
        ty: SchemaType,
        text: &str,
        references: &[(String, String)],
    ) -> Result<Parsed, String> {
        let r = match ty {
            SchemaType::Avro => {
                let texts: Vec<String> = references.iter().map(|(_, t)| t.clone()).collect();
                AvroSchema::parse(text, &texts).map(Parsed::Avro)
            }
            SchemaType::Json => JsonSchema::parse(text, references).map(Parsed::Json),
            SchemaType::Protobuf => ProtobufSchema::parse(text, references).map(Parsed::Protobuf),
        };
        r.map_err(|e| format!("Invalid schema of type {}, details: {e}", ty.name()))
    }

    pub fn schema_type(&self) -> SchemaType {
        match self {
            Parsed::Avro(_) => SchemaType::Avro,
            Parsed::Json(_) => SchemaType::Json,
            Parsed::Protobuf(_) => SchemaType::Protobuf,
        }
    }

    /// The text the registry stores and serves.
    pub fn canonical(&self) -> String {
        match self {
            Parsed::Avro(a) => a.canonical().to_string(),
            Parsed::Json(j) => j.canonical().to_string(),
            Parsed::Protobuf(p) => p.canonical().to_string(),
        }
    }

    /// The schema in a `format` a client asked for: `serialized` is a Protobuf schema's
    /// descriptor in base64 (what Confluent's Protobuf deserializers read); otherwise the
    /// canonical text.
    pub fn formatted(&self, format: Option<&str>) -> String {
        match (self, format) {
            (Parsed::Protobuf(p), Some("serialized")) => p.serialized(),
            _ => self.canonical(),
        }
    }

    /// The record name a payload's schema gives it (a Protobuf payload names its message).
    pub fn record_name_of(&self, payload: &[u8]) -> Option<String> {
        match self {
            Parsed::Protobuf(p) => p.message_name_of(payload),
            _ => self.record_name(),
        }
    }

    /// The full name of the schema's record (message) type, for the record name strategies.
    pub fn record_name(&self) -> Option<String> {
        match self {
            Parsed::Avro(a) => a.full_name(),
            Parsed::Json(j) => j.title(),
            Parsed::Protobuf(p) => p.first_message_name(),
        }
    }

    /// Why `self`, the new schema, is not compatible with `old` in `direction` (empty: it is),
    /// in Confluent's words.
    pub fn incompatibilities(&self, old: &Parsed, direction: Direction) -> Vec<String> {
        // `check(true)`: why the new schema cannot read the old one's data (BACKWARD);
        // `check(false)`: why the old schema cannot read the new one's (FORWARD).
        let both = |check: &dyn Fn(bool) -> Vec<String>| {
            let mut errors = Vec::new();
            if matches!(direction, Direction::Backward | Direction::Full) {
                errors.extend(check(true));
            }
            if matches!(direction, Direction::Forward | Direction::Full) {
                errors.extend(check(false));
            }
            errors
        };
        match (self, old) {
            (Parsed::Avro(new), Parsed::Avro(old)) => both(&|backward| match backward {
                true => new.read_errors(old, true),
                false => old.read_errors(new, false),
            }),
            (Parsed::Json(new), Parsed::Json(old)) => both(&|b| new.read_errors(old, b)),
            (Parsed::Protobuf(new), Parsed::Protobuf(old)) => both(&|b| new.read_errors(old, b)),
            _ => vec!["Incompatible because of different schema type".to_string()],
        }
    }

    /// Checks that `payload` (after the wire format's prefix) is data of this schema.
    pub fn decode(&self, payload: &[u8]) -> Result<(), String> {
        match self {
            Parsed::Avro(a) => a.decode(payload),
            Parsed::Json(j) => j.decode(payload),
            Parsed::Protobuf(p) => p.decode(payload),
        }
    }
}
