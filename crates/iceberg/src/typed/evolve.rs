//! What a schema adds to a table's `value` type: the fields the table lacks, at any depth, as
//! optional columns; or why the table cannot take the schema's values (a field whose type
//! changed), which pauses the topic's translation until someone decides.
//!
//! Fields the schema does not have stay in the table (null in its rows): every field under
//! `value` is optional, so dropping a field evolves nothing. Type promotions (int to long,
//! float to double) are refused too: iceberg-rust's schema update adds and deletes columns
//! only.

use iceberg::spec::Type;

/// A column to add: under `parent` (a dotted path of the table's names), `name` of `ty`.
#[derive(Debug, Clone, PartialEq)]
pub struct Addition {
    pub parent: String,
    pub name: String,
    pub ty: Type,
}

/// The columns the table's type `table` (at `path`) lacks for values of `schema`.
pub fn additions(table: &Type, schema: &Type, path: &str) -> Result<Vec<Addition>, String> {
    let mut out = Vec::new();
    walk(table, schema, path, &mut out)?;
    Ok(out)
}

fn walk(table: &Type, schema: &Type, path: &str, out: &mut Vec<Addition>) -> Result<(), String> {
    match (table, schema) {
        (Type::Struct(t), Type::Struct(s)) => {
            for f in s.fields() {
                match t.field_by_name(&f.name) {
                    Some(have) => walk(
                        &have.field_type,
                        &f.field_type,
                        &format!("{path}.{}", f.name),
                        out,
                    )?,
                    None => {
                        if f.name.contains('.') {
                            return Err(format!(
                                "{path}: the new field `{}` has a dot in its name, which a table's column cannot have",
                                f.name
                            ));
                        }
                        out.push(Addition {
                            parent: path.to_string(),
                            name: f.name.clone(),
                            ty: (*f.field_type).clone(),
                        });
                    }
                }
            }
            Ok(())
        }
        (Type::List(t), Type::List(s)) => walk(
            &t.element_field.field_type,
            &s.element_field.field_type,
            &format!("{path}.element"),
            out,
        ),
        (Type::Map(t), Type::Map(s)) => {
            if t.key_field.field_type != s.key_field.field_type {
                return Err(format!(
                    "{path}: the map's keys are {} in the table and {} in the schema",
                    t.key_field.field_type, s.key_field.field_type
                ));
            }
            walk(
                &t.value_field.field_type,
                &s.value_field.field_type,
                &format!("{path}.value"),
                out,
            )
        }
        (Type::Primitive(t), Type::Primitive(s)) if t == s => Ok(()),
        (t, s) => Err(format!(
            "{path} is {} in the table and {} in the schema: a column's type cannot change",
            short(t),
            short(s)
        )),
    }
}

fn short(t: &Type) -> String {
    match t {
        Type::Primitive(p) => p.to_string(),
        Type::Struct(_) => "a struct".to_string(),
        Type::List(_) => "a list".to_string(),
        Type::Map(_) => "a map".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{field, list_of, prim, Ids};
    use super::*;
    use iceberg::spec::{PrimitiveType, StructType};

    fn st(fields: &[(&str, Type)], ids: &mut Ids) -> Type {
        Type::Struct(StructType::new(
            fields
                .iter()
                .map(|(n, t)| field(ids, n, t.clone()))
                .collect(),
        ))
    }

    #[test]
    fn new_fields_at_any_depth_are_added_and_dropped_ones_stay() {
        let ids = &mut Ids::from(1);
        let line_v1 = st(&[("sku", prim(PrimitiveType::String))], ids);
        let lines = list_of(ids, line_v1);
        let table = st(
            &[
                ("id", prim(PrimitiveType::Long)),
                ("gone", prim(PrimitiveType::Int)),
                ("lines", lines),
            ],
            ids,
        );
        let line_v2 = st(
            &[
                ("sku", prim(PrimitiveType::String)),
                ("qty", prim(PrimitiveType::Int)),
            ],
            ids,
        );
        let lines = list_of(ids, line_v2);
        let schema = st(
            &[
                ("id", prim(PrimitiveType::Long)),
                ("lines", lines),
                ("note", prim(PrimitiveType::String)),
            ],
            ids,
        );
        let adds = additions(&table, &schema, "value").expect("evolves");
        let at: Vec<(&str, &str)> = adds
            .iter()
            .map(|a| (a.parent.as_str(), a.name.as_str()))
            .collect();
        assert_eq!(at, [("value.lines.element", "qty"), ("value", "note")]);
    }

    #[test]
    fn a_changed_type_is_refused_with_where() {
        let ids = &mut Ids::from(1);
        let table = st(&[("id", prim(PrimitiveType::Int))], ids);
        let schema = st(&[("id", prim(PrimitiveType::String))], ids);
        let e = additions(&table, &schema, "value").expect_err("refused");
        assert!(
            e.starts_with("value.id is int in the table and string"),
            "{e}"
        );
    }
}
