//! Avro: parsed by `apache-avro` (named references resolved from the referenced schemas' texts),
//! and checked for compatibility by the Avro specification's schema resolution, as Confluent's
//! registry reports it (Java's `SchemaCompatibility`): the same error types, paths and words.
//!
//! `apache-avro` has a compatibility check of its own, but it answers "partly compatible" where
//! Java says incompatible (a writer union with one branch the reader cannot read, an enum missing
//! symbols without a default) and reports one reason without a path, so the rules are here.

use std::collections::{HashMap, HashSet};

use apache_avro::schema::{InnerDecimalSchema, Name, UuidSchema};
use apache_avro::Schema;

/// A parsed Avro schema and the named types it can refer to (its own and its references').
pub struct AvroSchema {
    pub schema: Schema,
    /// The referenced schemas, parsed, in the order given.
    pub schemata: Vec<Schema>,
    names: HashMap<String, Schema>,
    canonical: String,
}

impl AvroSchema {
    /// Parses `text`, whose named references are defined by `references` (schema texts, each
    /// after those it refers to).
    pub fn parse(text: &str, references: &[String]) -> Result<AvroSchema, String> {
        let json: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("Invalid JSON: {e}"))?;
        let (schema, schemata) = if references.is_empty() {
            (Schema::parse(&json).map_err(|e| e.to_string())?, Vec::new())
        } else {
            Schema::parse_str_with_list(text, references).map_err(|e| e.to_string())?
        };
        let mut names = HashMap::new();
        for s in schemata.iter().chain(std::iter::once(&schema)) {
            collect_names(s, &mut names);
        }
        Ok(AvroSchema {
            schema,
            schemata,
            names,
            // Whitespace and key order are not part of a schema: the canonical text is the JSON
            // written compactly with its keys sorted (arrays, such as fields, keep their order).
            canonical: json.to_string(),
        })
    }

    pub fn canonical(&self) -> &str {
        &self.canonical
    }

    /// The full name of the schema's type, for the record name subject strategies.
    pub fn full_name(&self) -> Option<String> {
        match &self.schema {
            Schema::Record(r) => Some(r.name.fullname(None)),
            Schema::Enum(e) => Some(e.name.fullname(None)),
            Schema::Fixed(f) => Some(f.name.fullname(None)),
            _ => None,
        }
    }

    /// Why data written with `writer` cannot be read with `self` (empty: it can), each reason in
    /// Confluent's words; `reader_is_new` says which of the two is the schema being registered.
    pub fn read_errors(&self, writer: &AvroSchema, reader_is_new: bool) -> Vec<String> {
        let mut check = Check {
            reader_names: &self.names,
            writer_names: &writer.names,
            seen: HashSet::new(),
            errors: Vec::new(),
            reader_side: if reader_is_new { "new" } else { "old" },
            writer_side: if reader_is_new { "old" } else { "new" },
        };
        check.schemas(&writer.schema, &self.schema, &mut Vec::new());
        check.errors
    }

    /// Decodes one datum written with this schema: `Err` says why it is not one.
    pub fn decode(&self, bytes: &[u8]) -> Result<(), String> {
        self.read(bytes).map(|_| ())
    }

    /// A named type of the schema or its references, by full name.
    pub fn named(&self, full_name: &str) -> Option<&Schema> {
        self.names.get(full_name)
    }

    /// Reads one datum written with this schema (all of `bytes`).
    pub fn read(&self, mut bytes: &[u8]) -> Result<apache_avro::types::Value, String> {
        // The writer's own named types too, for a recursive one.
        let schemata: Vec<&Schema> = self.schemata.iter().chain([&self.schema]).collect();
        let value = apache_avro::reader::datum::GenericDatumReader::builder(&self.schema)
            .writer_schemata(schemata)
            .map_err(|e| e.to_string())?
            .build()
            .map_err(|e| e.to_string())?
            .read_value(&mut bytes)
            .map_err(|e| e.to_string())?;
        if !bytes.is_empty() {
            return Err(format!("{} bytes after the datum", bytes.len()));
        }
        Ok(value)
    }
}

fn collect_names(schema: &Schema, names: &mut HashMap<String, Schema>) {
    match schema {
        // A record seen before is not walked again (a recursive type).
        Schema::Record(r)
            if names
                .insert(r.name.fullname(None), schema.clone())
                .is_none() =>
        {
            for f in &r.fields {
                collect_names(&f.schema, names);
            }
        }
        Schema::Enum(e) => {
            names.insert(e.name.fullname(None), schema.clone());
        }
        Schema::Fixed(f) | Schema::Duration(f) => {
            names.insert(f.name.fullname(None), schema.clone());
        }
        Schema::Decimal(d) => {
            if let InnerDecimalSchema::Fixed(f) = &d.inner {
                names.insert(f.name.fullname(None), Schema::Fixed(f.clone()));
            }
        }
        Schema::Uuid(UuidSchema::Fixed(f)) => {
            names.insert(f.name.fullname(None), Schema::Fixed(f.clone()));
        }
        Schema::Array(a) => collect_names(&a.items, names),
        Schema::Map(m) => collect_names(&m.types, names),
        Schema::Union(u) => {
            for v in u.variants() {
                collect_names(v, names);
            }
        }
        _ => {}
    }
}

/// What is written on the wire for a schema: logical types are their underlying types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Array,
    Map,
    Union,
    Record,
    Enum,
    Fixed,
}

impl Kind {
    fn of(schema: &Schema) -> Kind {
        match schema {
            Schema::Null => Kind::Null,
            Schema::Boolean => Kind::Boolean,
            Schema::Int | Schema::Date | Schema::TimeMillis => Kind::Int,
            Schema::Long
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => Kind::Long,
            Schema::Float => Kind::Float,
            Schema::Double => Kind::Double,
            Schema::Bytes | Schema::BigDecimal => Kind::Bytes,
            Schema::Decimal(d) => match d.inner {
                InnerDecimalSchema::Bytes => Kind::Bytes,
                InnerDecimalSchema::Fixed(_) => Kind::Fixed,
            },
            Schema::Uuid(u) => match u {
                UuidSchema::Bytes => Kind::Bytes,
                UuidSchema::String => Kind::String,
                UuidSchema::Fixed(_) => Kind::Fixed,
            },
            Schema::String => Kind::String,
            Schema::Array(_) => Kind::Array,
            Schema::Map(_) => Kind::Map,
            Schema::Union(_) => Kind::Union,
            Schema::Record(_) | Schema::Ref { .. } => Kind::Record,
            Schema::Enum(_) => Kind::Enum,
            Schema::Fixed(_) | Schema::Duration(_) => Kind::Fixed,
        }
    }

    /// Avro Java's name of the type, as its messages print it.
    fn java(self) -> &'static str {
        match self {
            Kind::Null => "NULL",
            Kind::Boolean => "BOOLEAN",
            Kind::Int => "INT",
            Kind::Long => "LONG",
            Kind::Float => "FLOAT",
            Kind::Double => "DOUBLE",
            Kind::Bytes => "BYTES",
            Kind::String => "STRING",
            Kind::Array => "ARRAY",
            Kind::Map => "MAP",
            Kind::Union => "UNION",
            Kind::Record => "RECORD",
            Kind::Enum => "ENUM",
            Kind::Fixed => "FIXED",
        }
    }

    /// Whether a reader of `self` reads what a writer of `writer` wrote, at this level (the
    /// spec's promotions).
    fn reads(self, writer: Kind) -> bool {
        use Kind::*;
        self == writer
            || matches!(
                (writer, self),
                (Int, Long | Float | Double)
                    | (Long, Float | Double)
                    | (Float, Double)
                    | (String, Bytes)
                    | (Bytes, String)
            )
    }
}

/// A named type's name, fixed's size, and the like, through references.
struct Named<'a> {
    name: &'a Name,
    aliases: Vec<String>,
}

fn named(schema: &Schema) -> Option<Named<'_>> {
    let (name, aliases) = match schema {
        Schema::Record(r) => (&r.name, &r.aliases),
        Schema::Enum(e) => (&e.name, &e.aliases),
        Schema::Fixed(f) | Schema::Duration(f) => (&f.name, &f.aliases),
        Schema::Decimal(d) => match &d.inner {
            InnerDecimalSchema::Fixed(f) => (&f.name, &f.aliases),
            InnerDecimalSchema::Bytes => return None,
        },
        Schema::Uuid(UuidSchema::Fixed(f)) => (&f.name, &f.aliases),
        _ => return None,
    };
    Some(Named {
        name,
        aliases: aliases
            .iter()
            .flatten()
            .map(|a| a.name().to_string())
            .collect(),
    })
}

fn fixed_size(schema: &Schema) -> Option<usize> {
    match schema {
        Schema::Fixed(f) | Schema::Duration(f) => Some(f.size),
        Schema::Decimal(d) => match &d.inner {
            InnerDecimalSchema::Fixed(f) => Some(f.size),
            InnerDecimalSchema::Bytes => None,
        },
        Schema::Uuid(UuidSchema::Fixed(f)) => Some(f.size),
        _ => None,
    }
}

struct Check<'a> {
    reader_names: &'a HashMap<String, Schema>,
    writer_names: &'a HashMap<String, Schema>,
    /// Record pairs (writer, reader) being checked: a recursive type is checked once.
    seen: HashSet<(String, String)>,
    errors: Vec<String>,
    reader_side: &'static str,
    writer_side: &'static str,
}

fn path_of(path: &[String]) -> String {
    if path.is_empty() {
        "/".to_string()
    } else {
        path.iter().map(|p| format!("/{p}")).collect()
    }
}

impl<'a> Check<'a> {
    fn resolve(names: &'a HashMap<String, Schema>, schema: &'a Schema) -> &'a Schema {
        match schema {
            Schema::Ref { name } => names.get(&name.fullname(None)).unwrap_or(schema),
            _ => schema,
        }
    }

    fn error(&mut self, kind: &str, description: String, info: String) {
        self.errors.push(format!(
            "{{errorType:'{kind}', description:'{description}', additionalInfo:'{info}'}}"
        ));
    }

    /// Whether `reader` reads `writer` with no error (for picking a union branch).
    fn compatible(&self, writer: &'a Schema, reader: &'a Schema) -> bool {
        let mut probe = Check {
            reader_names: self.reader_names,
            writer_names: self.writer_names,
            seen: self.seen.clone(),
            errors: Vec::new(),
            reader_side: self.reader_side,
            writer_side: self.writer_side,
        };
        probe.schemas(writer, reader, &mut Vec::new());
        probe.errors.is_empty()
    }

    fn schemas(&mut self, writer: &'a Schema, reader: &'a Schema, path: &mut Vec<String>) {
        let writer = Self::resolve(self.writer_names, writer);
        let reader = Self::resolve(self.reader_names, reader);
        let (wk, rk) = (Kind::of(writer), Kind::of(reader));
        if let Schema::Union(w) = writer {
            // Every branch the writer may have used must be readable (Java reports each branch
            // that is not as a missing union branch, whatever the reader is).
            for (i, branch) in w.variants().iter().enumerate() {
                if !self.compatible(branch, reader) {
                    path.push(i.to_string());
                    self.missing_branch(Kind::of(Self::resolve(self.writer_names, branch)), path);
                    path.pop();
                }
            }
            return;
        }
        if let Schema::Union(r) = reader {
            if !r.variants().iter().any(|b| self.compatible(writer, b)) {
                self.missing_branch(wk, path);
            }
            return;
        }
        if !rk.reads(wk) {
            self.type_mismatch(wk, rk, path);
            return;
        }
        if let (Some(w), Some(r)) = (named(writer), named(reader)) {
            if w.name.name() != r.name.name() && !r.aliases.iter().any(|a| a == w.name.name()) {
                let description = format!(
                    "The name of the schema has changed (path '{}')",
                    path_of(&[path.clone(), vec!["name".to_string()]].concat())
                );
                let info = format!("expected: {}", w.name.fullname(None));
                self.error("NAME_MISMATCH", description, info);
                return;
            }
        }
        match (writer, reader) {
            (Schema::Record(w), Schema::Record(r)) => {
                let key = (w.name.fullname(None), r.name.fullname(None));
                if !self.seen.insert(key) {
                    return;
                }
                for (pos, rf) in r.fields.iter().enumerate() {
                    let found = w
                        .fields
                        .iter()
                        .find(|wf| wf.name == rf.name)
                        .or_else(|| w.fields.iter().find(|wf| rf.aliases.contains(&wf.name)));
                    match found {
                        Some(wf) => {
                            path.extend([
                                "fields".to_string(),
                                pos.to_string(),
                                "type".to_string(),
                            ]);
                            self.schemas(&wf.schema, &rf.schema, path);
                            path.truncate(path.len() - 3);
                        }
                        None if rf.default.is_none() => {
                            let at = path_of(
                                &[path.clone(), vec!["fields".into(), pos.to_string()]].concat(),
                            );
                            let description = format!(
                                "The field '{}' at path '{}' in the {} schema has no default value and is missing in the {} schema",
                                rf.name, at, self.reader_side, self.writer_side
                            );
                            self.error(
                                "READER_FIELD_MISSING_DEFAULT_VALUE",
                                description,
                                rf.name.clone(),
                            );
                        }
                        None => {}
                    }
                }
            }
            (Schema::Enum(w), Schema::Enum(r)) => {
                let missing: Vec<&str> = w
                    .symbols
                    .iter()
                    .filter(|s| !r.symbols.contains(s))
                    .map(String::as_str)
                    .collect();
                if !missing.is_empty() && r.default.is_none() {
                    let at = path_of(&[path.clone(), vec!["symbols".to_string()]].concat());
                    let description = format!(
                        "The {} schema is missing enum symbols '[{}]' at path '{}' in the {} schema",
                        self.reader_side,
                        missing.join(", "),
                        at,
                        self.writer_side
                    );
                    self.error(
                        "MISSING_ENUM_SYMBOLS",
                        description,
                        format!("[{}]", missing.join(", ")),
                    );
                }
            }
            (Schema::Array(w), Schema::Array(r)) => {
                path.push("items".to_string());
                self.schemas(&w.items, &r.items, path);
                path.pop();
            }
            (Schema::Map(w), Schema::Map(r)) => {
                path.push("values".to_string());
                self.schemas(&w.types, &r.types, path);
                path.pop();
            }
            _ => {
                if let (Some(ws), Some(rs)) = (fixed_size(writer), fixed_size(reader)) {
                    if ws != rs {
                        let at = path_of(&[path.clone(), vec!["size".to_string()]].concat());
                        let description = format!(
                            "The size of FIXED type field at path '{}' in the {} schema does not match with the {} schema",
                            at, self.reader_side, self.writer_side
                        );
                        self.error(
                            "FIXED_SIZE_MISMATCH",
                            description,
                            format!("expected: {ws}, found: {rs}"),
                        );
                    }
                }
            }
        }
    }

    fn missing_branch(&mut self, writer: Kind, path: &[String]) {
        let description = format!(
            "The {} schema is missing a type inside a union field at path '{}' in the {} schema",
            self.reader_side,
            path_of(path),
            self.writer_side
        );
        let info = format!("reader union lacking writer type: {}", writer.java());
        self.error("MISSING_UNION_BRANCH", description, info);
    }

    fn type_mismatch(&mut self, writer: Kind, reader: Kind, path: &[String]) {
        let description = format!(
            "The type (path '{}') of a field in the {} schema does not match with the {} schema",
            path_of(path),
            self.reader_side,
            self.writer_side
        );
        let info = format!(
            "reader type: {} not compatible with writer type: {}",
            reader.java(),
            writer.java()
        );
        self.error("TYPE_MISMATCH", description, info);
    }
}

#[cfg(test)]
mod tests;
