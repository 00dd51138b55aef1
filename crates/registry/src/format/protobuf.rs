//! Protobuf: a schema is one `.proto` file, given as text or as a base64 `FileDescriptorProto`
//! (what Confluent's Python serializer registers), compiled by `protox` with its imports
//! resolved from the schema's references (by import path), the well-known `google/protobuf`
//! files, and the few files clients import without registering (`confluent/meta.proto`,
//! `confluent/type/decimal.proto`, `google/type/*.proto`). Its canonical text is the compiled
//! descriptor printed back ([`print`]); `format=serialized` serves the descriptor in base64.
//!
//! Compatibility follows Confluent's rules (checked against protobuf.dev's "Updating a message
//! type"): fields are matched by number, messages by full name; removing a message, changing a
//! field's kind across wire-incompatible groups, a numeric field between singular and
//! repeated, the package, or oneof memberships in ways old readers mis-parse, is incompatible.
//! FORWARD is the same comparison with the schemas swapped.

pub mod print;

use std::collections::BTreeMap;

use base64::Engine;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto};
use protox::file::{File, FileResolver, GoogleFileResolver};

/// The file name a registered schema is compiled under.
const MAIN: &str = "weir/registered.proto";

/// Files clients import without registering them (Confluent's registry knows them too).
const BUILTIN: &[(&str, &str)] = &[
    (
        "confluent/meta.proto",
        r#"syntax = "proto3";
package confluent;
import "google/protobuf/descriptor.proto";
message Meta { string doc = 1; map<string, string> params = 2; repeated string tags = 3; }
extend google.protobuf.FileOptions { Meta file_meta = 1088; }
extend google.protobuf.MessageOptions { Meta message_meta = 1088; }
extend google.protobuf.FieldOptions { Meta field_meta = 1088; }
extend google.protobuf.EnumOptions { Meta enum_meta = 1088; }
extend google.protobuf.EnumValueOptions { Meta enum_value_meta = 1088; }
"#,
    ),
    (
        "confluent/type/decimal.proto",
        r#"syntax = "proto3";
package confluent.type;
message Decimal { bytes value = 1; uint32 precision = 2; int32 scale = 3; }
"#,
    ),
    (
        "google/type/date.proto",
        r#"syntax = "proto3";
package google.type;
message Date { int32 year = 1; int32 month = 2; int32 day = 3; }
"#,
    ),
    (
        "google/type/timeofday.proto",
        r#"syntax = "proto3";
package google.type;
message TimeOfDay { int32 hours = 1; int32 minutes = 2; int32 seconds = 3; int32 nanos = 4; }
"#,
    ),
    (
        "google/type/money.proto",
        r#"syntax = "proto3";
package google.type;
message Money { string currency_code = 1; int64 units = 2; int32 nanos = 3; }
"#,
    ),
    (
        "google/type/latlng.proto",
        r#"syntax = "proto3";
package google.type;
message LatLng { double latitude = 1; double longitude = 2; }
"#,
    ),
    (
        "google/type/dayofweek.proto",
        r#"syntax = "proto3";
package google.type;
enum DayOfWeek { DAY_OF_WEEK_UNSPECIFIED = 0; MONDAY = 1; TUESDAY = 2; WEDNESDAY = 3;
  THURSDAY = 4; FRIDAY = 5; SATURDAY = 6; SUNDAY = 7; }
"#,
    ),
];

/// A parsed Protobuf schema.
pub struct ProtobufSchema {
    file: FileDescriptorProto,
    pool: DescriptorPool,
    canonical: String,
}

/// A schema's source: `.proto` text, or a base64 descriptor (tried when the text does not
/// parse, as Confluent's registry does).
fn file_of(name: &str, source: &str) -> Result<File, String> {
    match File::from_source(name, source) {
        Ok(f) => Ok(f),
        Err(text_error) => {
            let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(source.trim()) else {
                return Err(format!("Could not parse Protobuf - {text_error}"));
            };
            let mut fdp = FileDescriptorProto::decode(bytes.as_slice()).map_err(|e| {
                format!("Could not parse Protobuf - {text_error}; nor a descriptor: {e}")
            })?;
            fdp.name = Some(name.to_string());
            Ok(File::from_file_descriptor_proto(fdp))
        }
    }
}

/// Opens the registered file, its references by import path, and the files every registry has.
struct Resolver {
    main: File,
    references: BTreeMap<String, String>,
    google: GoogleFileResolver,
}

impl FileResolver for Resolver {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        if name == MAIN {
            return Ok(self.main.clone());
        }
        if let Some(text) = self.references.get(name) {
            return file_of(name, text).map_err(|e| protox::Error::new(std::io::Error::other(e)));
        }
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name) {
            return File::from_source(name, text);
        }
        // Python's decimal is imported from this path (the package is the same).
        if name == "confluent/types/decimal.proto" {
            let text = BUILTIN[1].1;
            return File::from_source(name, text);
        }
        self.google.open_file(name)
    }
}

impl ProtobufSchema {
    /// Parses `text`; `references` are (import path, schema text or base64 descriptor).
    pub fn parse(text: &str, references: &[(String, String)]) -> Result<ProtobufSchema, String> {
        let main = file_of(MAIN, text)?;
        let resolver = Resolver {
            main,
            references: references.iter().cloned().collect(),
            google: GoogleFileResolver::new(),
        };
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.include_imports(true);
        compiler.open_file(MAIN).map_err(|e| e.to_string())?;
        let pool = compiler.descriptor_pool();
        let file = pool
            .get_file_by_name(MAIN)
            .ok_or("the compiled schema is missing")?
            .file_descriptor_proto()
            .clone();
        let mut printable = file.clone();
        printable.source_code_info = None;
        Ok(ProtobufSchema {
            canonical: print::print(&printable),
            file: printable,
            pool,
        })
    }

    pub fn canonical(&self) -> &str {
        &self.canonical
    }

    /// The descriptor in base64 (`format=serialized`), as Confluent's clients read it.
    pub fn serialized(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.file.encode_to_vec())
    }

    fn package(&self) -> String {
        self.file.package.clone().unwrap_or_default()
    }

    /// The message the wire format's message indexes name (`[0]`: the first top-level one).
    pub fn message(&self, indexes: &[usize]) -> Option<MessageDescriptor> {
        let file = self.pool.get_file_by_name(MAIN)?;
        let (first, rest) = indexes.split_first()?;
        let mut m = file.messages().nth(*first)?;
        for i in rest {
            let child = m.child_messages().nth(*i)?;
            m = child;
        }
        Some(m)
    }

    /// The first message's full name, for the record name strategies.
    pub fn first_message_name(&self) -> Option<String> {
        self.message(&[0]).map(|m| m.full_name().to_string())
    }

    /// The full name of the message a payload names by its message indexes.
    pub fn message_name_of(&self, payload: &[u8]) -> Option<String> {
        let (indexes, _) = message_indexes(payload).ok()?;
        self.message(&indexes).map(|m| m.full_name().to_string())
    }

    /// Decodes a payload after the schema id: its message indexes, then the message.
    pub fn decode(&self, payload: &[u8]) -> Result<(), String> {
        self.read(payload, true).map(|_| ())
    }

    /// Reads a payload: after the schema id (`framed`: message indexes first), or a bare
    /// message of the first type.
    pub fn read(&self, payload: &[u8], framed: bool) -> Result<DynamicMessage, String> {
        let (indexes, rest) = if framed {
            message_indexes(payload)?
        } else {
            (vec![0], payload)
        };
        let m = self
            .message(&indexes)
            .ok_or_else(|| format!("the schema has no message at indexes {indexes:?}"))?;
        DynamicMessage::decode(m, rest).map_err(|e| e.to_string())
    }

    /// Why `self` is not compatible with `old`: BACKWARD (`reader_is_new`) compares old to
    /// new, FORWARD new to old.
    pub fn read_errors(&self, old: &ProtobufSchema, reader_is_new: bool) -> Vec<String> {
        let (from, to) = if reader_is_new {
            (old, self)
        } else {
            (self, old)
        };
        diff(from, to)
    }
}

fn zigzag(b: &mut &[u8]) -> Result<i64, String> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = b.split_first().ok_or("the message indexes are cut short")?;
        *b = rest;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(((v >> 1) as i64) ^ -((v & 1) as i64));
        }
    }
    Err("a message index is not a varint".to_string())
}

/// The message indexes at the start of a Protobuf payload (a count, then each; a count of 0 is
/// `[0]`), and the message bytes after them.
pub fn message_indexes(mut payload: &[u8]) -> Result<(Vec<usize>, &[u8]), String> {
    let count = zigzag(&mut payload)?;
    if count == 0 {
        return Ok((vec![0], payload));
    }
    if !(1..=100).contains(&count) {
        return Err(format!("{count} message indexes"));
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let i = zigzag(&mut payload)?;
        out.push(usize::try_from(i).map_err(|_| format!("message index {i}"))?);
    }
    Ok((out, payload))
}

/// Every message of a file by full name (`.pkg.Outer.Inner`), nested ones included.
fn messages(file: &FileDescriptorProto) -> BTreeMap<String, &DescriptorProto> {
    fn walk<'a>(
        prefix: &str,
        ms: &'a [DescriptorProto],
        out: &mut BTreeMap<String, &'a DescriptorProto>,
    ) {
        for m in ms {
            if m.options.as_ref().and_then(|o| o.map_entry) == Some(true) {
                continue;
            }
            let name = format!("{prefix}.{}", m.name());
            walk(&name, &m.nested_type, out);
            out.insert(name, m);
        }
    }
    let mut out = BTreeMap::new();
    let prefix = match file.package.as_deref() {
        Some(p) if !p.is_empty() => format!(".{p}"),
        _ => String::new(),
    };
    walk(&prefix, &file.message_type, &mut out);
    out
}

/// What a field is on the wire, for compatibility: scalars in groups that read each other.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Scalar(&'static str),
    Message(String),
    Map,
}

fn kind(owner: &DescriptorProto, f: &FieldDescriptorProto) -> Kind {
    let is_map = f.label() == Label::Repeated
        && f.r#type() == Type::Message
        && owner.nested_type.iter().any(|n| {
            n.options.as_ref().and_then(|o| o.map_entry) == Some(true)
                && f.type_name().ends_with(&format!(".{}", n.name()))
        });
    if is_map {
        return Kind::Map;
    }
    Kind::Scalar(match f.r#type() {
        Type::Int32 | Type::Int64 | Type::Uint32 | Type::Uint64 | Type::Bool | Type::Enum => {
            "GENERAL_NUMBER"
        }
        Type::Sint32 | Type::Sint64 => "SIGNED_NUMBER",
        Type::String | Type::Bytes => "STRING_OR_BYTES",
        Type::Fixed32 | Type::Sfixed32 => "FIXED32",
        Type::Fixed64 | Type::Sfixed64 => "FIXED64",
        Type::Float => "FLOAT",
        Type::Double => "DOUBLE",
        Type::Message | Type::Group => return Kind::Message(f.type_name().to_string()),
    })
}

fn numeric(f: &FieldDescriptorProto) -> bool {
    !matches!(
        f.r#type(),
        Type::String | Type::Bytes | Type::Message | Type::Group
    )
}

fn error(errors: &mut Vec<String>, kind: &str, description: String) {
    errors.push(format!(
        "{{errorType:\"{kind}\", description:\"{description}\"}}"
    ));
}

/// Confluent's comparison of `from` (the schema data was written with, for BACKWARD) to `to`.
fn diff(from: &ProtobufSchema, to: &ProtobufSchema) -> Vec<String> {
    let mut errors = Vec::new();
    if from.package() != to.package() {
        error(
            &mut errors,
            "PACKAGE_CHANGED",
            "The package at '#/' in the new schema does not match the one in the old schema"
                .to_string(),
        );
    }
    let (old, new) = (messages(&from.file), messages(&to.file));
    for (name, om) in &old {
        let path = format!("#/{}", name.trim_start_matches('.'));
        let Some(nm) = new.get(name) else {
            error(
                &mut errors,
                "MESSAGE_REMOVED",
                format!(
                    "The message at path '{path}' in the old schema is missing in the new schema"
                ),
            );
            continue;
        };
        fields(&mut errors, &path, om, nm);
    }
    errors
}

fn fields(errors: &mut Vec<String>, path: &str, om: &DescriptorProto, nm: &DescriptorProto) {
    let oneof_of = |m: &DescriptorProto, f: &FieldDescriptorProto| {
        f.oneof_index
            .filter(|_| !f.proto3_optional())
            .and_then(|i| m.oneof_decl.get(i as usize))
            .map(|o| o.name().to_string())
    };
    let mut moved_into: BTreeMap<String, usize> = BTreeMap::new();
    for of in &om.field {
        let at = format!("{path}/{}", of.number());
        let Some(nf) = nm.field.iter().find(|g| g.number() == of.number()) else {
            if of.label() == Label::Required {
                error(
                    errors,
                    "REQUIRED_FIELD_REMOVED",
                    format!("The required field at path '{at}' was removed"),
                );
            }
            if let Some(o) = oneof_of(om, of) {
                // A member gone from a oneof that is still there: old data may set it.
                if nm.oneof_decl.iter().any(|d| d.name() == o) {
                    error(
                        errors,
                        "ONEOF_FIELD_REMOVED",
                        format!("A field of the oneof at path '{at}' was removed"),
                    );
                }
            }
            continue;
        };
        let (ok, nk) = (kind(om, of), kind(nm, nf));
        match (&ok, &nk) {
            (Kind::Scalar(a), Kind::Scalar(b)) if a != b => error(
                errors,
                "FIELD_SCALAR_KIND_CHANGED",
                format!("The kind of a SCALAR field at path '{at}' in the new schema does not match its kind in the old schema"),
            ),
            (Kind::Message(a), Kind::Message(b)) if a != b => error(
                errors,
                "FIELD_NAMED_TYPE_CHANGED",
                format!("The type of a MESSAGE field at path '{at}' in the new schema does not match its type in the old schema"),
            ),
            (a, b) if std::mem::discriminant(a) != std::mem::discriminant(b) => error(
                errors,
                "FIELD_KIND_CHANGED",
                format!("The kind of a field at path '{at}' in the new schema does not match its kind in the old schema"),
            ),
            _ => {}
        }
        let repeated = |f: &FieldDescriptorProto| f.label() == Label::Repeated;
        if repeated(of) != repeated(nf) && numeric(of) && numeric(nf) && ok == nk {
            error(
                errors,
                "FIELD_NUMERIC_LABEL_CHANGED",
                format!("The label of a numeric field at path '{at}' changed between singular and repeated"),
            );
        }
        if let (None, Some(o)) = (oneof_of(om, of), oneof_of(nm, nf)) {
            if om.oneof_decl.iter().any(|d| d.name() == o) {
                error(
                    errors,
                    "FIELD_MOVED_TO_EXISTING_ONEOF",
                    format!("The field at path '{at}' was moved into an existing oneof"),
                );
            } else {
                *moved_into.entry(o).or_default() += 1;
            }
        }
    }
    for (o, n) in moved_into {
        if n > 1 {
            error(
                errors,
                "MULTIPLE_FIELDS_MOVED_TO_ONEOF",
                format!("Several fields at path '{path}' were moved into the new oneof {o}"),
            );
        }
    }
    for nf in &nm.field {
        if nf.label() == Label::Required && !om.field.iter().any(|f| f.number() == nf.number()) {
            error(
                errors,
                "REQUIRED_FIELD_ADDED",
                format!(
                    "A required field was added at path '{path}/{}'",
                    nf.number()
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests;
