//! Protobuf messages as Iceberg types, and their values as [`Datum`]s.
//!
//! A message is a struct of its fields by name; repeated fields are lists, maps maps; enums
//! are their values' names; 32-bit integers are ints except `uint32` (a long, as it may exceed
//! an int), 64-bit ones longs (a `uint64` above 2^63 does not fit and is a bad record);
//! `google.protobuf.Timestamp` is a timestamp and the wrapper types their value. A recursive
//! message has no Iceberg type.

use std::collections::HashSet;

use iceberg::spec::{PrimitiveType, StructType, Type};
use weir_registry::format::prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage, Value,
};
use weir_registry::format::ProtobufSchema;

use super::{field, list_of, map_of, prim, Datum, Ids};

const TIMESTAMP: &str = "google.protobuf.Timestamp";

/// The wrapper types: a message of one field named `value`.
fn is_wrapper(m: &MessageDescriptor) -> bool {
    m.full_name().starts_with("google.protobuf.")
        && m.full_name().ends_with("Value")
        && m.fields().len() == 1
        && m.get_field_by_name("value").is_some()
}

pub fn value_type(schema: &ProtobufSchema, ids: &mut Ids) -> Result<Type, String> {
    let m = schema.message(&[0]).ok_or("the schema has no message")?;
    message_type(&m, ids, &mut HashSet::new())
}

fn message_type(
    m: &MessageDescriptor,
    ids: &mut Ids,
    walking: &mut HashSet<String>,
) -> Result<Type, String> {
    if m.full_name() == TIMESTAMP {
        return Ok(prim(PrimitiveType::Timestamptz));
    }
    if is_wrapper(m) {
        if let Some(v) = m.get_field_by_name("value") {
            return scalar_type(&v.kind(), ids, walking);
        }
    }
    if !walking.insert(m.full_name().to_string()) {
        return Err(format!("message {} is recursive", m.full_name()));
    }
    let mut fields = Vec::new();
    for f in m.fields() {
        let ty = field_type(&f, ids, walking).map_err(|e| format!("{}: {e}", f.name()))?;
        fields.push(field(ids, f.name(), ty));
    }
    walking.remove(m.full_name());
    Ok(Type::Struct(StructType::new(fields)))
}

fn field_type(
    f: &FieldDescriptor,
    ids: &mut Ids,
    walking: &mut HashSet<String>,
) -> Result<Type, String> {
    if f.is_map() {
        let Kind::Message(entry) = f.kind() else {
            return Err("a map without an entry message".to_string());
        };
        let key = scalar_type(&entry.map_entry_key_field().kind(), ids, walking)?;
        let value = scalar_type(&entry.map_entry_value_field().kind(), ids, walking)?;
        return Ok(map_of(ids, key, value));
    }
    let ty = scalar_type(&f.kind(), ids, walking)?;
    Ok(if f.is_list() { list_of(ids, ty) } else { ty })
}

fn scalar_type(k: &Kind, ids: &mut Ids, walking: &mut HashSet<String>) -> Result<Type, String> {
    use PrimitiveType as P;
    Ok(match k {
        Kind::Double => prim(P::Double),
        Kind::Float => prim(P::Float),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => prim(P::Int),
        Kind::Uint32 | Kind::Fixed32 => prim(P::Long),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 | Kind::Uint64 | Kind::Fixed64 => prim(P::Long),
        Kind::Bool => prim(P::Boolean),
        Kind::String | Kind::Enum(_) => prim(P::String),
        Kind::Bytes => prim(P::Binary),
        Kind::Message(m) => message_type(m, ids, walking)?,
    })
}

pub fn decode(schema: &ProtobufSchema, data: &[u8], framed: bool) -> Result<Datum, String> {
    schema.read(data, framed).map(|m| message(&m))
}

fn message(m: &DynamicMessage) -> Datum {
    let d = m.descriptor();
    if d.full_name() == TIMESTAMP {
        let get = |name: &str| {
            d.get_field_by_name(name)
                .map(|f| m.get_field(&f).into_owned())
        };
        let seconds = match get("seconds") {
            Some(Value::I64(s)) => s,
            _ => 0,
        };
        let nanos = match get("nanos") {
            Some(Value::I32(n)) => i64::from(n),
            _ => 0,
        };
        return Datum::Timestamp(seconds.saturating_mul(1_000_000) + nanos / 1000);
    }
    if is_wrapper(&d) {
        if let Some(f) = d.get_field_by_name("value") {
            return value(&m.get_field(&f), &f.kind());
        }
    }
    Datum::Record(
        d.fields()
            .map(|f| {
                // An unset message field is null; an unset scalar its default, as protobuf
                // reads it.
                let v = if matches!(f.kind(), Kind::Message(_))
                    && !f.is_list()
                    && !f.is_map()
                    && !m.has_field(&f)
                {
                    Datum::Null
                } else {
                    value(&m.get_field(&f), &f.kind())
                };
                (f.name().to_string(), v)
            })
            .collect(),
    )
}

fn value(v: &Value, kind: &Kind) -> Datum {
    match v {
        Value::Bool(b) => Datum::Bool(*b),
        Value::I32(i) => Datum::Long(i64::from(*i)),
        Value::I64(i) => Datum::Long(*i),
        Value::U32(u) => Datum::Long(i64::from(*u)),
        // Above i64::MAX it cannot be a long: the record does not fit (a string says why).
        Value::U64(u) => i64::try_from(*u).map_or_else(|_| Datum::Str(u.to_string()), Datum::Long),
        Value::F32(f) => Datum::Double(f64::from(*f)),
        Value::F64(f) => Datum::Double(*f),
        Value::String(s) => Datum::Str(s.clone()),
        Value::Bytes(b) => Datum::Bytes(b.to_vec()),
        Value::EnumNumber(n) => match kind {
            Kind::Enum(e) => e.get_value(*n).map_or_else(
                || Datum::Str(n.to_string()),
                |v| Datum::Str(v.name().to_string()),
            ),
            _ => Datum::Long(i64::from(*n)),
        },
        Value::Message(m) => message(m),
        Value::List(items) => Datum::List(items.iter().map(|i| value(i, kind)).collect()),
        Value::Map(entries) => {
            let value_kind = match kind {
                Kind::Message(entry) => entry.map_entry_value_field().kind(),
                other => other.clone(),
            };
            let mut out: Vec<(Datum, Datum)> = entries
                .iter()
                .map(|(k, v)| (map_key(k), value(v, &value_kind)))
                .collect();
            // A map's entries in a stable order (protobuf's have none).
            out.sort_by_cached_key(|(k, _)| format!("{k:?}"));
            Datum::Map(out)
        }
    }
}

fn map_key(k: &MapKey) -> Datum {
    match k {
        MapKey::Bool(b) => Datum::Bool(*b),
        MapKey::I32(i) => Datum::Long(i64::from(*i)),
        MapKey::I64(i) => Datum::Long(*i),
        MapKey::U32(u) => Datum::Long(i64::from(*u)),
        MapKey::U64(u) => i64::try_from(*u).map_or_else(|_| Datum::Str(u.to_string()), Datum::Long),
        MapKey::String(s) => Datum::Str(s.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_enums_maps_and_timestamps() {
        let s = ProtobufSchema::parse(
            r#"syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  string note = 2;
  enum Status { NEW = 0; PAID = 1; }
  Status status = 3;
  repeated string tags = 4;
  map<string, int32> counts = 5;
  google.protobuf.Timestamp at = 6;
  Line line = 7;
}
message Line { string sku = 1; }
"#,
            &[],
        )
        .expect("schema");
        let ty = value_type(&s, &mut Ids::from(10)).expect("a type");
        let st = super::super::struct_fields(&ty);
        assert_eq!(
            super::super::field_names(&ty),
            ["id", "note", "status", "tags", "counts", "at", "line"]
        );
        assert_eq!(*st.fields()[5].field_type, prim(PrimitiveType::Timestamptz));
        // An empty message: defaults for scalars, null for the unset message.
        let d = decode(&s, &[0], true).expect("decodes");
        let Datum::Record(fields) = d else {
            panic!("{d:?}")
        };
        assert_eq!(fields[0], ("id".to_string(), Datum::Long(0)));
        assert_eq!(fields[2], ("status".to_string(), Datum::Str("NEW".into())));
        assert_eq!(fields[6], ("line".to_string(), Datum::Null));
    }

    #[test]
    fn a_recursive_message_has_no_column() {
        let s = ProtobufSchema::parse(
            "syntax = \"proto3\";\nmessage Node { Node next = 1; }\n",
            &[],
        )
        .expect("schema");
        let e = value_type(&s, &mut Ids::from(10)).expect_err("recursive");
        assert!(e.contains("recursive"), "{e}");
    }
}
