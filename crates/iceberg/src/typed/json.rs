//! JSON Schemas as Iceberg types, and JSON documents as [`Datum`]s.
//!
//! An object with `properties` is a struct of them; an array with one `items` schema a list;
//! an object with only `additionalProperties` a map with string keys; `integer` a long,
//! `number` a double, `string` a string (whatever its `format`), `boolean` a boolean; a type
//! listed with `null` is that type. `$ref`s to the schema's own `definitions`/`$defs` or to a
//! registered reference are followed. What has no single Iceberg type (no `type`, several
//! types, `oneOf`/`anyOf`) is a string column holding that part of the document as JSON text.

use std::collections::HashSet;

use iceberg::spec::{PrimitiveType, StructType, Type};
use serde_json::Value;
use weir_registry::format::JsonSchema;

use super::{field, list_of, map_of, prim, Datum, Ids};

pub fn value_type(schema: &JsonSchema, ids: &mut Ids) -> Result<Type, String> {
    Types {
        schema,
        walking: HashSet::new(),
    }
    .of(schema.root(), schema.root(), ids)
}

struct Types<'a> {
    schema: &'a JsonSchema,
    /// `$ref`s being followed (one met again is recursive).
    walking: HashSet<String>,
}

impl<'a> Types<'a> {
    /// The schema a `$ref` names, and the document its own `$ref`s are relative to.
    fn resolve(&self, doc: &'a Value, r: &str) -> Result<(&'a Value, &'a Value), String> {
        let (file, pointer) = r.split_once('#').unwrap_or((r, ""));
        let doc = if file.is_empty() {
            doc
        } else {
            self.schema
                .reference(file)
                .ok_or_else(|| format!("$ref {r} is not a reference of the schema"))?
        };
        let target = if pointer.is_empty() {
            Some(doc)
        } else {
            doc.pointer(pointer)
        };
        target
            .map(|t| (t, doc))
            .ok_or_else(|| format!("$ref {r} names nothing"))
    }

    fn of(&mut self, s: &'a Value, doc: &'a Value, ids: &mut Ids) -> Result<Type, String> {
        use PrimitiveType as P;
        if let Some(r) = s.get("$ref").and_then(Value::as_str) {
            if !self.walking.insert(r.to_string()) {
                return Err(format!("$ref {r} is recursive"));
            }
            let (target, target_doc) = self.resolve(doc, r)?;
            let ty = self.of(target, target_doc, ids);
            self.walking.remove(r);
            return ty;
        }
        let types: Vec<&str> = match s.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .collect(),
            _ => vec![],
        };
        Ok(match types.as_slice() {
            ["integer"] => prim(P::Long),
            ["number"] => prim(P::Double),
            ["string"] => prim(P::String),
            ["boolean"] => prim(P::Boolean),
            ["array"] => match s.get("items") {
                Some(items @ Value::Object(_)) => {
                    let element = self.of(items, doc, ids)?;
                    list_of(ids, element)
                }
                _ => prim(P::String),
            },
            ["object"] => match (s.get("properties"), s.get("additionalProperties")) {
                (Some(Value::Object(props)), _) => {
                    let mut fields = Vec::with_capacity(props.len());
                    for (name, p) in props {
                        let ty = self.of(p, doc, ids).map_err(|e| format!("{name}: {e}"))?;
                        fields.push(field(ids, name, ty));
                    }
                    Type::Struct(StructType::new(fields))
                }
                (None, Some(values @ Value::Object(_))) => {
                    let value = self.of(values, doc, ids)?;
                    map_of(ids, prim(P::String), value)
                }
                _ => prim(P::String),
            },
            // No single type: the document's text.
            _ => prim(P::String),
        })
    }
}

pub fn decode(data: &[u8]) -> Result<Datum, String> {
    let doc: Value = serde_json::from_slice(data).map_err(|e| format!("not JSON: {e}"))?;
    Ok(datum(doc))
}

fn datum(v: Value) -> Datum {
    match v {
        Value::Null => Datum::Null,
        Value::Bool(b) => Datum::Bool(b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Datum::Long(i),
            None => Datum::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Datum::Str(s),
        Value::Array(items) => Datum::List(items.into_iter().map(datum).collect()),
        Value::Object(fields) => {
            Datum::Record(fields.into_iter().map(|(k, v)| (k, datum(v))).collect())
        }
    }
}

/// A JSON value where the column is a string: its text (a string as itself).
pub fn as_text(d: &Datum) -> Option<String> {
    fn json(d: &Datum) -> Value {
        match d {
            Datum::Null => Value::Null,
            Datum::Bool(b) => Value::Bool(*b),
            Datum::Long(i) => Value::from(*i),
            Datum::Double(f) => Value::from(*f),
            Datum::Str(s) => Value::String(s.clone()),
            Datum::List(items) => Value::Array(items.iter().map(json).collect()),
            Datum::Record(fields) => {
                Value::Object(fields.iter().map(|(k, v)| (k.clone(), json(v))).collect())
            }
            _ => Value::Null,
        }
    }
    match d {
        Datum::Str(_) | Datum::Null => None,
        Datum::Bool(_) | Datum::Long(_) | Datum::Double(_) | Datum::List(_) | Datum::Record(_) => {
            Some(json(d).to_string())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_arrays_maps_refs_and_what_has_no_type() {
        let s = JsonSchema::parse(
            r##"{"type":"object","properties":{
                "id":{"type":"integer"},
                "price":{"type":["number","null"]},
                "tags":{"type":"array","items":{"type":"string"}},
                "attrs":{"type":"object","additionalProperties":{"type":"string"}},
                "ship":{"$ref":"#/definitions/Address"},
                "any":{}
            },"definitions":{"Address":{"type":"object","properties":{"city":{"type":"string"}}}}}"##,
            &[],
        )
        .expect("schema");
        let ty = value_type(&s, &mut Ids::from(10)).expect("a type");
        let st = super::super::struct_fields(&ty);
        let by = |n: &str| st.field_by_name(n).expect(n).field_type.clone();
        assert_eq!(*by("id"), prim(PrimitiveType::Long));
        assert_eq!(*by("price"), prim(PrimitiveType::Double));
        assert!(matches!(*by("tags"), Type::List(_)));
        assert!(matches!(*by("attrs"), Type::Map(_)));
        assert!(matches!(*by("ship"), Type::Struct(_)));
        assert_eq!(*by("any"), prim(PrimitiveType::String));
    }
}
