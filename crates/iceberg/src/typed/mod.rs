//! The typed layouts (`weir.iceberg.mode` = `value_schema_id_prefix`, `value_schema_latest`):
//! the record's value decoded with its schema from the registry, as a `value` struct column
//! whose fields are the schema's, beside the `key_value` layout's other columns (partition,
//! offset, timestamp, key, headers).
//!
//! The value is a column of its own rather than its fields at the top level so that a field
//! named `key`, `offset` or `timestamp` (common in Avro records) never collides with the
//! record's own, and the partition spec's `timestamp` is always the record's.
//!
//! A schema becomes an Iceberg type ([`value_type`]), a payload a [`Datum`] ([`decode`]),
//! which is then made to fit the table's type ([`conform`]): a record that cannot is a bad
//! record (the dead-letter table), never a failed batch. Every field under `value` is
//! optional, so a field a later schema drops is null in its rows, and a field it adds is a new
//! optional column ([`evolve`]).
//!
//! - [`avro`], [`protobuf`], [`json`]: each format's types and values.
//! - [`evolve`]: what a schema adds to the table's type, or why it cannot.
//! - [`columns`]: conformed values into an Arrow column.

pub mod avro;
pub mod columns;
pub mod evolve;
pub mod json;
pub mod protobuf;

use iceberg::spec::{ListType, MapType, NestedField, PrimitiveType, StructType, Type};
use weir_registry::format::Parsed;

/// A decoded value, in the few kinds the formats' values come down to.
#[derive(Debug, Clone, PartialEq)]
pub enum Datum {
    Null,
    Bool(bool),
    /// Any integer (int, long, an enum's number).
    Long(i64),
    /// Any floating point number.
    Double(f64),
    Str(String),
    Bytes(Vec<u8>),
    /// An unscaled value, at the column's scale (the schema's).
    Decimal(i128),
    /// Days since 1970-01-01.
    Date(i32),
    /// Microseconds since midnight.
    Time(i64),
    /// Microseconds since 1970-01-01T00:00Z.
    Timestamp(i64),
    /// A record by field name, as the format gives it.
    Record(Vec<(String, Datum)>),
    List(Vec<Datum>),
    Map(Vec<(Datum, Datum)>),
    /// A record conformed to a table's struct: one datum per field, in the struct's order.
    Fields(Vec<Datum>),
}

/// Hands out field ids for a type being built (a table's ids are assigned when the table is
/// created or the columns added; these only need to be unique within the type).
#[derive(Debug)]
pub struct Ids(i32);

impl Ids {
    pub fn from(first: i32) -> Ids {
        Ids(first)
    }

    pub fn take(&mut self) -> i32 {
        self.0 += 1;
        self.0 - 1
    }
}

/// An optional struct field.
pub(crate) fn field(ids: &mut Ids, name: &str, ty: Type) -> iceberg::spec::NestedFieldRef {
    NestedField::optional(ids.take(), name, ty).into()
}

pub(crate) fn list_of(ids: &mut Ids, element: Type) -> Type {
    Type::List(ListType::new(
        NestedField::list_element(ids.take(), element, false).into(),
    ))
}

pub(crate) fn map_of(ids: &mut Ids, key: Type, value: Type) -> Type {
    let key_id = ids.take();
    Type::Map(MapType::new(
        NestedField::map_key_element(key_id, key).into(),
        NestedField::map_value_element(ids.take(), value, false).into(),
    ))
}

pub(crate) fn prim(p: PrimitiveType) -> Type {
    Type::Primitive(p)
}

/// How a topic's payloads name their schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Confluent's wire format: a zero byte, the schema id, (Protobuf: message indexes,) data.
    IdPrefix,
    /// The bare data of the subject's latest schema.
    Bare,
}

/// The Iceberg type of values of `schema`, with field ids from `ids`.
pub fn value_type(schema: &Parsed, ids: &mut Ids) -> Result<Type, String> {
    match schema {
        Parsed::Avro(a) => avro::value_type(a, ids),
        Parsed::Protobuf(p) => protobuf::value_type(p, ids),
        Parsed::Json(j) => json::value_type(j, ids),
    }
}

/// Decodes `data` (after the wire format's magic byte and id, if any) with `schema`.
pub fn decode(schema: &Parsed, data: &[u8], framing: Framing) -> Result<Datum, String> {
    match schema {
        Parsed::Avro(a) => avro::decode(a, data),
        Parsed::Protobuf(p) => protobuf::decode(p, data, framing == Framing::IdPrefix),
        Parsed::Json(_) => json::decode(data),
    }
}

/// The schema id of a payload in Confluent's wire format, and the data after it.
pub fn split_prefix(payload: &[u8]) -> Result<(u32, &[u8]), String> {
    match payload {
        [0, a, b, c, d, rest @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), rest)),
        [] => Err("an empty value has no schema id".to_string()),
        [m, ..] if *m != 0 => Err(format!(
            "the value does not start with the wire format's magic byte 0 (it starts with {m})"
        )),
        _ => Err("the value is shorter than the wire format's 5-byte prefix".to_string()),
    }
}

/// `datum` made to fit `ty`: integers into int or long (range checked), numbers into float or
/// double, records into the struct's fields by name (absent ones null). `Err` says what does
/// not fit, and where.
pub fn conform(datum: Datum, ty: &Type, path: &str) -> Result<Datum, String> {
    use PrimitiveType as P;
    let mismatch = |d: &Datum| {
        Err(format!(
            "{path}: a {} does not fit the column's type {ty}",
            kind(d)
        ))
    };
    match (datum, ty) {
        (Datum::Null, _) => Ok(Datum::Null),
        (Datum::Record(fields), Type::Struct(s)) => conform_record(fields, s, path),
        (Datum::List(items), Type::List(l)) => items
            .into_iter()
            .map(|d| conform(d, &l.element_field.field_type, path))
            .collect::<Result<Vec<_>, _>>()
            .map(Datum::List),
        (Datum::Map(entries), Type::Map(m)) => entries
            .into_iter()
            .map(|(k, v)| {
                if k == Datum::Null {
                    return Err(format!("{path}: a map key is null"));
                }
                Ok((
                    conform(k, &m.key_field.field_type, path)?,
                    conform(v, &m.value_field.field_type, path)?,
                ))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Datum::Map),
        (d, Type::Primitive(p)) => match (d, p) {
            (d @ Datum::Bool(_), P::Boolean) => Ok(d),
            (Datum::Long(v), P::Int) => i32::try_from(v)
                .map(|_| Datum::Long(v))
                .map_err(|_| format!("{path}: {v} does not fit an int")),
            (d @ Datum::Long(_), P::Long) => Ok(d),
            (Datum::Long(v), P::Float | P::Double) => Ok(Datum::Double(v as f64)),
            (d @ Datum::Double(_), P::Float | P::Double) => Ok(d),
            (d @ Datum::Str(_), P::String) => Ok(d),
            // A JSON Schema's part without one type is its text.
            (d, P::String) => json::as_text(&d)
                .map(Datum::Str)
                .map_or_else(|| mismatch(&d), Ok),
            (d @ Datum::Bytes(_), P::Binary) => Ok(d),
            (Datum::Bytes(b), P::Fixed(n)) if b.len() as u64 == *n => Ok(Datum::Bytes(b)),
            (Datum::Decimal(v), P::Decimal { scale, precision }) => {
                let digits = v.unsigned_abs().checked_ilog10().map_or(1, |d| d + 1);
                if digits > *precision {
                    return Err(format!(
                        "{path}: a decimal of {digits} digits in a decimal({precision}, {scale})"
                    ));
                }
                Ok(Datum::Decimal(v))
            }
            (d @ Datum::Date(_), P::Date) => Ok(d),
            (d @ Datum::Time(_), P::Time) => Ok(d),
            (d @ Datum::Timestamp(_), P::Timestamp | P::Timestamptz) => Ok(d),
            (d, _) => mismatch(&d),
        },
        (d, _) => mismatch(&d),
    }
}

fn conform_record(
    mut fields: Vec<(String, Datum)>,
    s: &StructType,
    path: &str,
) -> Result<Datum, String> {
    let mut out = Vec::with_capacity(s.fields().len());
    for f in s.fields() {
        let at = fields.iter().position(|(n, _)| *n == f.name);
        let d = at.map_or(Datum::Null, |i| fields.swap_remove(i).1);
        out.push(conform(d, &f.field_type, &format!("{path}.{}", f.name))?);
    }
    Ok(Datum::Fields(out))
}

fn kind(d: &Datum) -> &'static str {
    match d {
        Datum::Null => "null",
        Datum::Bool(_) => "boolean",
        Datum::Long(_) => "integer",
        Datum::Double(_) => "floating point number",
        Datum::Str(_) => "string",
        Datum::Bytes(_) => "byte string",
        Datum::Decimal(_) => "decimal",
        Datum::Date(_) => "date",
        Datum::Time(_) => "time",
        Datum::Timestamp(_) => "timestamp",
        Datum::Record(_) | Datum::Fields(_) => "record",
        Datum::List(_) => "list",
        Datum::Map(_) => "map",
    }
}

/// The struct of a type that must be one (tests of the formats' types).
#[cfg(test)]
pub(crate) fn struct_fields(ty: &Type) -> &StructType {
    match ty {
        Type::Struct(st) => st,
        other => panic!("not a struct: {other:?}"),
    }
}

/// The field names of a struct type, in order.
#[cfg(test)]
pub(crate) fn field_names(ty: &Type) -> Vec<&str> {
    struct_fields(ty)
        .fields()
        .iter()
        .map(|f| f.name.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_type() -> Type {
        let mut ids = Ids::from(1);
        Type::Struct(StructType::new(vec![
            field(&mut ids, "id", prim(PrimitiveType::Int)),
            field(&mut ids, "name", prim(PrimitiveType::String)),
            field(&mut ids, "price", prim(PrimitiveType::Double)),
        ]))
    }

    #[test]
    fn a_record_fits_by_name_with_absent_fields_null() {
        let d = Datum::Record(vec![
            ("name".into(), Datum::Str("a".into())),
            ("extra".into(), Datum::Bool(true)),
            ("id".into(), Datum::Long(7)),
        ]);
        let c = conform(d, &record_type(), "value").expect("fits");
        assert_eq!(
            c,
            Datum::Fields(vec![Datum::Long(7), Datum::Str("a".into()), Datum::Null])
        );
    }

    #[test]
    fn what_does_not_fit_says_where() {
        let d = Datum::Record(vec![("id".into(), Datum::Str("x".into()))]);
        let e = conform(d, &record_type(), "value").expect_err("a string is not an int");
        assert!(e.contains("value.id") && e.contains("string"), "{e}");
        let d = Datum::Record(vec![("id".into(), Datum::Long(1 << 40))]);
        let e = conform(d, &record_type(), "value").expect_err("out of range");
        assert!(e.contains("does not fit an int"), "{e}");
    }

    #[test]
    fn the_wire_format_prefix() {
        assert_eq!(split_prefix(&[0, 0, 0, 1, 2, 9]), Ok((258, &[9u8][..])));
        assert!(split_prefix(b"{\"a\":1}").is_err());
        assert!(split_prefix(&[0, 1]).is_err());
        assert!(split_prefix(&[]).is_err());
    }
}
