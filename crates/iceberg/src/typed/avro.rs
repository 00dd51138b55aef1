//! Avro schemas as Iceberg types, and Avro values as [`Datum`]s.
//!
//! As Iceberg's own Avro conversion: a union of `null` and one type is that type (optional),
//! records are structs, arrays lists, maps maps with string keys, enums strings; the logical
//! types keep their meaning (date, time, timestamps, decimal, uuid as a string). A union of
//! several non-null types and a recursive record have no Iceberg type: their records go to the
//! dead-letter table.

use std::collections::HashSet;

use iceberg::spec::{PrimitiveType, StructType, Type};
use weir_registry::format::apache_avro::schema::{Schema, UuidSchema};
use weir_registry::format::apache_avro::types::Value;
use weir_registry::format::AvroSchema;

use super::{field, list_of, map_of, prim, Datum, Ids};

pub fn value_type(schema: &AvroSchema, ids: &mut Ids) -> Result<Type, String> {
    Types {
        schema,
        walking: HashSet::new(),
    }
    .of(&schema.schema, ids)
}

struct Types<'a> {
    schema: &'a AvroSchema,
    /// Records being converted (one met again is recursive).
    walking: HashSet<String>,
}

impl Types<'_> {
    fn of(&mut self, s: &Schema, ids: &mut Ids) -> Result<Type, String> {
        use PrimitiveType as P;
        Ok(match s {
            Schema::Null => return Err("a null type has no column".to_string()),
            Schema::Boolean => prim(P::Boolean),
            Schema::Int => prim(P::Int),
            Schema::Long => prim(P::Long),
            Schema::Float => prim(P::Float),
            Schema::Double => prim(P::Double),
            Schema::Bytes => prim(P::Binary),
            Schema::String | Schema::Enum(_) | Schema::BigDecimal => prim(P::String),
            Schema::Uuid(UuidSchema::String) => prim(P::String),
            Schema::Uuid(_) => prim(P::Fixed(16)),
            Schema::Fixed(f) => prim(P::Fixed(f.size as u64)),
            Schema::Duration(_) => prim(P::Fixed(12)),
            Schema::Decimal(d) => {
                if d.precision > 38 {
                    return Err(format!(
                        "a decimal of precision {} (Iceberg's is at most 38)",
                        d.precision
                    ));
                }
                prim(P::Decimal {
                    precision: d.precision as u32,
                    scale: d.scale as u32,
                })
            }
            Schema::Date => prim(P::Date),
            Schema::TimeMillis | Schema::TimeMicros => prim(P::Time),
            Schema::TimestampMillis | Schema::TimestampMicros | Schema::TimestampNanos => {
                prim(P::Timestamptz)
            }
            Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => prim(P::Timestamp),
            Schema::Array(a) => {
                let element = self.of(&a.items, ids)?;
                list_of(ids, element)
            }
            Schema::Map(m) => {
                let value = self.of(&m.types, ids)?;
                map_of(ids, prim(P::String), value)
            }
            Schema::Union(u) => {
                let branches: Vec<&Schema> = u
                    .variants()
                    .iter()
                    .filter(|v| !matches!(v, Schema::Null))
                    .collect();
                match branches.as_slice() {
                    [one] => self.of(one, ids)?,
                    _ => {
                        return Err(format!(
                            "a union of {} types besides null has no Iceberg type",
                            branches.len()
                        ))
                    }
                }
            }
            Schema::Record(r) => {
                let name = r.name.fullname(None);
                if !self.walking.insert(name.clone()) {
                    return Err(format!("record {name} is recursive"));
                }
                let mut fields = Vec::with_capacity(r.fields.len());
                for f in &r.fields {
                    let ty = self
                        .of(&f.schema, ids)
                        .map_err(|e| format!("{}: {e}", f.name))?;
                    fields.push(field(ids, &f.name, ty));
                }
                self.walking.remove(&name);
                Type::Struct(StructType::new(fields))
            }
            Schema::Ref { name } => {
                let full = name.fullname(None);
                let named = self
                    .schema
                    .named(&full)
                    .ok_or_else(|| format!("type {full} is not defined"))?;
                if self.walking.contains(&full) {
                    return Err(format!("record {full} is recursive"));
                }
                self.of(named, ids)?
            }
        })
    }
}

pub fn decode(schema: &AvroSchema, data: &[u8]) -> Result<Datum, String> {
    schema.read(data).map(datum)
}

fn datum(v: Value) -> Datum {
    match v {
        Value::Null => Datum::Null,
        Value::Boolean(b) => Datum::Bool(b),
        Value::Int(i) => Datum::Long(i64::from(i)),
        Value::Long(l) => Datum::Long(l),
        Value::Float(f) => Datum::Double(f64::from(f)),
        Value::Double(d) => Datum::Double(d),
        Value::Bytes(b) => Datum::Bytes(b),
        Value::Fixed(_, b) => Datum::Bytes(b),
        Value::String(s) => Datum::Str(s),
        Value::Enum(_, symbol) => Datum::Str(symbol),
        Value::Union(_, v) => datum(*v),
        Value::Array(items) => Datum::List(items.into_iter().map(datum).collect()),
        Value::Map(m) => Datum::Map(
            m.into_iter()
                .map(|(k, v)| (Datum::Str(k), datum(v)))
                .collect(),
        ),
        Value::Record(fields) => {
            Datum::Record(fields.into_iter().map(|(n, v)| (n, datum(v))).collect())
        }
        Value::Date(d) => Datum::Date(d),
        Value::Decimal(d) => {
            // Big-endian two's complement, as Avro writes it.
            let bytes = Vec::<u8>::try_from(d).unwrap_or_default();
            Datum::Decimal(unscaled(&bytes))
        }
        Value::BigDecimal(d) => Datum::Str(d.to_string()),
        Value::TimeMillis(ms) => Datum::Time(i64::from(ms) * 1000),
        Value::TimeMicros(us) => Datum::Time(us),
        Value::TimestampMillis(ms) | Value::LocalTimestampMillis(ms) => {
            Datum::Timestamp(ms.saturating_mul(1000))
        }
        Value::TimestampMicros(us) | Value::LocalTimestampMicros(us) => Datum::Timestamp(us),
        Value::TimestampNanos(ns) | Value::LocalTimestampNanos(ns) => {
            Datum::Timestamp(ns.div_euclid(1000))
        }
        Value::Duration(d) => Datum::Bytes(<[u8; 12]>::from(d).to_vec()),
        Value::Uuid(u) => Datum::Str(u.to_string()),
    }
}

/// A big-endian two's complement integer of up to 16 bytes.
fn unscaled(bytes: &[u8]) -> i128 {
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    let mut out = [if negative { 0xff } else { 0 }; 16];
    let n = bytes.len().min(16);
    out[16 - n..].copy_from_slice(&bytes[bytes.len() - n..]);
    i128::from_be_bytes(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_unions_and_logical_types() {
        let s = AvroSchema::parse(
            r#"{"type":"record","name":"Order","namespace":"shop","fields":[
                {"name":"id","type":"long"},
                {"name":"note","type":["null","string"],"default":null},
                {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
                {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
                {"name":"tags","type":{"type":"array","items":"string"}},
                {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
                {"name":"next","type":["null","Status"],"default":null}
            ]}"#,
            &[],
        )
        .expect("schema");
        let ty = value_type(&s, &mut Ids::from(10)).expect("a type");
        let st = super::super::struct_fields(&ty);
        assert_eq!(
            super::super::field_names(&ty),
            ["id", "note", "price", "at", "tags", "status", "next"]
        );
        assert!(st.fields().iter().all(|f| !f.required));
        assert_eq!(
            *st.fields()[2].field_type,
            prim(PrimitiveType::Decimal {
                precision: 9,
                scale: 2
            })
        );
        assert_eq!(*st.fields()[6].field_type, prim(PrimitiveType::String));
    }

    #[test]
    fn a_union_of_two_types_or_a_recursive_record_has_no_column() {
        let no_type = |text: &str| {
            let s = AvroSchema::parse(text, &[]).expect("schema");
            value_type(&s, &mut Ids::from(10)).expect_err("no type")
        };
        let e = no_type(
            r#"{"type":"record","name":"A","fields":[{"name":"x","type":["int","string"]}]}"#,
        );
        assert!(e.contains("x: a union of 2 types"), "{e}");
        let e = no_type(
            r#"{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}"#,
        );
        assert!(e.contains("recursive"), "{e}");
    }

    #[test]
    fn negative_decimals_keep_their_sign() {
        assert_eq!(unscaled(&[0xff, 0x38]), -200);
        assert_eq!(unscaled(&[0x00, 0xc8]), 200);
        assert_eq!(unscaled(&[]), 0);
    }
}
