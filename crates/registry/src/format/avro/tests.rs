//! Avro schema resolution, case by case (the Avro specification's "Schema Resolution", and
//! Confluent's verdicts where the two differ).

use super::AvroSchema;

fn parse(text: &str) -> AvroSchema {
    AvroSchema::parse(text, &[]).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn record(fields: &str) -> AvroSchema {
    parse(&format!(
        r#"{{"type":"record","name":"User","namespace":"com.acme","fields":[{fields}]}}"#
    ))
}

/// The errors of reading data written with `old` using `new` (a BACKWARD check).
fn backward(new: &AvroSchema, old: &AvroSchema) -> Vec<String> {
    new.read_errors(old, true)
}

fn only_error(errors: Vec<String>, kind: &str) -> String {
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains(&format!("errorType:'{kind}'")),
        "{}",
        errors[0]
    );
    errors[0].clone()
}

#[test]
fn the_canonical_text_ignores_whitespace_and_key_order() {
    let a = parse(r#"{ "type": "record", "name": "R", "fields": [ {"name":"a","type":"int"} ] }"#);
    let b = parse(r#"{"fields":[{"type":"int","name":"a"}],"name":"R","type":"record"}"#);
    assert_eq!(a.canonical(), b.canonical());
    assert_eq!(
        a.canonical(),
        r#"{"fields":[{"name":"a","type":"int"}],"name":"R","type":"record"}"#
    );
    assert_eq!(a.full_name().as_deref(), Some("R"));
    assert_eq!(
        record(r#"{"name":"a","type":"int"}"#)
            .full_name()
            .as_deref(),
        Some("com.acme.User")
    );
}

#[test]
fn invalid_schemas_are_refused_with_the_reason() {
    for bad in [
        "not json",
        r#"{"type":"record","name":"R"}"#,
        r#"{"type":"nope"}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"Missing"}]}"#,
        r#"{"type":"enum","name":"E","symbols":["A","A"]}"#,
    ] {
        let err = AvroSchema::parse(bad, &[]).err();
        assert!(err.is_some_and(|e| !e.is_empty()), "{bad} was accepted");
    }
}

#[test]
fn adding_a_field_needs_a_default_to_read_old_data() {
    let old = record(r#"{"name":"name","type":"string"}"#);
    let with_default =
        record(r#"{"name":"name","type":"string"},{"name":"age","type":"int","default":0}"#);
    let without = record(r#"{"name":"name","type":"string"},{"name":"age","type":"int"}"#);
    assert!(backward(&with_default, &old).is_empty());
    let e = only_error(
        backward(&without, &old),
        "READER_FIELD_MISSING_DEFAULT_VALUE",
    );
    assert!(
        e.contains("The field 'age' at path '/fields/1' in the new schema has no default value and is missing in the old schema"),
        "{e}"
    );
    // FORWARD: the old schema reads the new one's data; the added field is ignored.
    assert!(old.read_errors(&without, false).is_empty());
    // Dropping a field without a default: FORWARD fails, from the old schema's side.
    let e = only_error(
        without.read_errors(&old, false),
        "READER_FIELD_MISSING_DEFAULT_VALUE",
    );
    assert!(
        e.contains("in the old schema has no default value and is missing in the new schema"),
        "{e}"
    );
}

#[test]
fn fields_are_matched_by_name_or_by_the_readers_aliases() {
    let old = record(r#"{"name":"a","type":"int"},{"name":"b","type":"string"}"#);
    let reordered = record(r#"{"name":"b","type":"string"},{"name":"a","type":"int"}"#);
    assert!(backward(&reordered, &old).is_empty());
    let renamed =
        record(r#"{"name":"a","type":"int"},{"name":"c","type":"string","aliases":["b"]}"#);
    assert!(backward(&renamed, &old).is_empty());
    let renamed_no_alias = record(r#"{"name":"a","type":"int"},{"name":"c","type":"string"}"#);
    only_error(
        backward(&renamed_no_alias, &old),
        "READER_FIELD_MISSING_DEFAULT_VALUE",
    );
}

#[test]
fn promotions_go_one_way() {
    let int = record(r#"{"name":"n","type":"int"}"#);
    let long = record(r#"{"name":"n","type":"long"}"#);
    let double = record(r#"{"name":"n","type":"double"}"#);
    let float = record(r#"{"name":"n","type":"float"}"#);
    assert!(backward(&long, &int).is_empty());
    assert!(backward(&double, &int).is_empty());
    assert!(backward(&double, &float).is_empty());
    let e = only_error(backward(&int, &long), "TYPE_MISMATCH");
    assert!(e.contains("path '/fields/0/type'"), "{e}");
    assert!(
        e.contains("reader type: INT not compatible with writer type: LONG"),
        "{e}"
    );
    only_error(backward(&float, &double), "TYPE_MISMATCH");
    let string = record(r#"{"name":"n","type":"string"}"#);
    let bytes = record(r#"{"name":"n","type":"bytes"}"#);
    assert!(backward(&string, &bytes).is_empty());
    assert!(backward(&bytes, &string).is_empty());
    only_error(backward(&string, &int), "TYPE_MISMATCH");
    // A logical type is its underlying type on the wire.
    let ts = record(r#"{"name":"n","type":{"type":"long","logicalType":"timestamp-millis"}}"#);
    assert!(backward(&ts, &long).is_empty());
    assert!(backward(&ts, &int).is_empty());
}

#[test]
fn making_a_field_optional_reads_old_data_but_not_the_other_way() {
    let old = record(r#"{"name":"n","type":"string"}"#);
    let optional = record(r#"{"name":"n","type":["null","string"],"default":null}"#);
    assert!(backward(&optional, &old).is_empty());
    let e = only_error(old.read_errors(&optional, false), "MISSING_UNION_BRANCH");
    assert!(e.contains("reader union lacking writer type: NULL"), "{e}");
    assert!(e.contains("path '/fields/0/type/0'"), "{e}");
    // A union reading a union: every writer branch needs a reader branch.
    let wider = record(r#"{"name":"n","type":["null","string","int"],"default":null}"#);
    assert!(backward(&wider, &optional).is_empty());
    let e = only_error(backward(&optional, &wider), "MISSING_UNION_BRANCH");
    assert!(e.contains("reader union lacking writer type: INT"), "{e}");
}

#[test]
fn enums_need_every_written_symbol_or_a_default() {
    let e3 = parse(r#"{"type":"enum","name":"E","symbols":["A","B","C"]}"#);
    let e2 = parse(r#"{"type":"enum","name":"E","symbols":["A","B"]}"#);
    let e2d = parse(r#"{"type":"enum","name":"E","symbols":["A","B"],"default":"A"}"#);
    assert!(backward(&e3, &e2).is_empty());
    let e = only_error(backward(&e2, &e3), "MISSING_ENUM_SYMBOLS");
    assert!(e.contains("'[C]'"), "{e}");
    assert!(backward(&e2d, &e3).is_empty());
}

#[test]
fn names_must_match_but_namespaces_may_change() {
    let a = parse(r#"{"type":"record","name":"a.R","fields":[]}"#);
    let b = parse(r#"{"type":"record","name":"b.R","fields":[]}"#);
    let other = parse(r#"{"type":"record","name":"a.S","fields":[]}"#);
    let aliased = parse(r#"{"type":"record","name":"a.S","aliases":["R"],"fields":[]}"#);
    assert!(backward(&b, &a).is_empty());
    only_error(backward(&other, &a), "NAME_MISMATCH");
    assert!(backward(&aliased, &a).is_empty());
    let f4 = parse(r#"{"type":"fixed","name":"F","size":4}"#);
    let f8 = parse(r#"{"type":"fixed","name":"F","size":8}"#);
    only_error(backward(&f8, &f4), "FIXED_SIZE_MISMATCH");
}

#[test]
fn arrays_maps_and_recursive_records_are_checked_inside() {
    let a_int = parse(r#"{"type":"array","items":"int"}"#);
    let a_str = parse(r#"{"type":"array","items":"string"}"#);
    let e = only_error(backward(&a_str, &a_int), "TYPE_MISMATCH");
    assert!(e.contains("path '/items'"), "{e}");
    let m_long = parse(r#"{"type":"map","values":"long"}"#);
    let m_int = parse(r#"{"type":"map","values":"int"}"#);
    assert!(backward(&m_long, &m_int).is_empty());
    only_error(backward(&m_int, &m_long), "TYPE_MISMATCH");
    let list = r#"{"type":"record","name":"Node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","Node"]}]}"#;
    let list2 = r#"{"type":"record","name":"Node","fields":[{"name":"v","type":"long"},{"name":"next","type":["null","Node"]}]}"#;
    assert!(backward(&parse(list2), &parse(list)).is_empty());
    assert!(!backward(&parse(list), &parse(list2)).is_empty());
}

#[test]
fn references_resolve_named_types_from_other_subjects() {
    let address = r#"{"type":"record","name":"Address","namespace":"com.acme","fields":[{"name":"city","type":"string"}]}"#;
    let user = r#"{"type":"record","name":"User","namespace":"com.acme","fields":[{"name":"home","type":"com.acme.Address"}]}"#;
    assert!(AvroSchema::parse(user, &[]).is_err());
    let parsed = AvroSchema::parse(user, &[address.to_string()]).expect("with the reference");
    let address2 = r#"{"type":"record","name":"Address","namespace":"com.acme","fields":[{"name":"city","type":"string"},{"name":"zip","type":"string"}]}"#;
    let newer = AvroSchema::parse(user, &[address2.to_string()]).expect("newer reference");
    only_error(
        newer.read_errors(&parsed, true),
        "READER_FIELD_MISSING_DEFAULT_VALUE",
    );
}

#[test]
fn a_datum_decodes_only_whole_and_by_its_schema() {
    let s = record(r#"{"name":"name","type":"string"},{"name":"age","type":"int"}"#);
    // "ab" (length 2 zigzag = 4), then age 21 (zigzag 42).
    assert_eq!(s.decode(&[4, b'a', b'b', 42]), Ok(()));
    assert!(s.decode(&[4, b'a']).is_err());
    assert!(s.decode(&[4, b'a', b'b', 42, 0]).is_err());
    let list = parse(
        r#"{"type":"record","name":"Node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","Node"]}]}"#,
    );
    // v 1, next: branch 1 (a Node: v 2, next: branch 0, null).
    assert_eq!(list.decode(&[2, 2, 4, 0]), Ok(()));
    let address =
        r#"{"type":"record","name":"Address","fields":[{"name":"city","type":"string"}]}"#;
    let user = r#"{"type":"record","name":"User","fields":[{"name":"home","type":"Address"}]}"#;
    let user = AvroSchema::parse(user, &[address.to_string()]).expect("user");
    assert_eq!(user.decode(&[2, b'x']), Ok(()));
}
