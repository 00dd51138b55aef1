//! JSON Schema compatibility, case by case, from what each keyword admits (a schema is
//! backward compatible when every document valid under the old one is valid under the new
//! one), and Confluent's verdicts where its model decides (open content models).

use serde_json::json;

use super::JsonSchema;

fn parse(v: serde_json::Value) -> JsonSchema {
    JsonSchema::parse(&v.to_string(), &[]).unwrap_or_else(|e| panic!("{v}: {e}"))
}

/// The error types of reading `old`'s documents with `new` (BACKWARD).
fn backward(new: serde_json::Value, old: serde_json::Value) -> Vec<String> {
    parse(new)
        .read_errors(&parse(old), true)
        .iter()
        .map(|e| e.split('"').nth(1).unwrap_or_default().to_string())
        .collect()
}

fn object(props: serde_json::Value, extra: Option<bool>) -> serde_json::Value {
    let mut o = json!({"type": "object", "properties": props});
    if let Some(e) = extra {
        o["additionalProperties"] = json!(e);
    }
    o
}

#[test]
fn schemas_are_checked_against_their_draft() {
    assert!(JsonSchema::parse("not json", &[]).is_err());
    assert!(JsonSchema::parse(r#"{"type": "nope"}"#, &[]).is_err());
    assert!(JsonSchema::parse(r#"{"type": "string", "minLength": -1}"#, &[]).is_err());
    for draft in [
        "http://json-schema.org/draft-04/schema#",
        "http://json-schema.org/draft-06/schema#",
        "http://json-schema.org/draft-07/schema#",
        "https://json-schema.org/draft/2019-09/schema",
        "https://json-schema.org/draft/2020-12/schema",
    ] {
        let s =
            json!({"$schema": draft, "type": "object", "properties": {"a": {"type": "integer"}}});
        let parsed = parse(s);
        assert_eq!(parsed.decode(br#"{"a": 1}"#), Ok(()), "{draft}");
        assert!(parsed.decode(br#"{"a": "x"}"#).is_err(), "{draft}");
    }
}

#[test]
fn payloads_are_validated_and_references_resolve_by_name() {
    let address = json!({"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]});
    let person = json!({"type": "object", "title": "Person",
                        "properties": {"home": {"$ref": "address.json"}}});
    let refs = [("address.json".to_string(), address.to_string())];
    let p = JsonSchema::parse(&person.to_string(), &refs).expect("with its reference");
    assert_eq!(p.title().as_deref(), Some("Person"));
    assert_eq!(p.decode(br#"{"home": {"city": "Oslo"}}"#), Ok(()));
    assert!(p.decode(br#"{"home": {}}"#).is_err());
    assert!(p.decode(b"not json").is_err());
    // Nothing is fetched: a reference the registry does not hold fails.
    let remote = json!({"properties": {"x": {"$ref": "https://example.com/s.json"}}});
    let r = JsonSchema::parse(&remote.to_string(), &[]);
    assert!(r.is_err() || r.is_ok_and(|s| s.decode(br#"{"x": 1}"#).is_err()));
}

#[test]
fn types_may_widen_but_not_change() {
    assert!(backward(json!({"type": "number"}), json!({"type": "integer"})).is_empty());
    assert!(backward(
        json!({"type": ["string", "null"]}),
        json!({"type": "string"})
    )
    .is_empty());
    assert_eq!(
        backward(json!({"type": "integer"}), json!({"type": "number"})),
        ["TYPE_CHANGED"]
    );
    assert_eq!(
        backward(json!({"type": "string"}), json!({"type": "boolean"})),
        ["TYPE_CHANGED"]
    );
    assert!(backward(json!({}), json!({"type": "string"})).is_empty());
    assert_eq!(
        backward(json!({"type": "string"}), json!({})),
        ["TYPE_NARROWED"]
    );
}

#[test]
fn bounds_may_loosen_but_not_tighten() {
    let s = |v| json!({"type": "string", "maxLength": v});
    assert!(backward(s(10), s(5)).is_empty());
    assert_eq!(backward(s(5), s(10)), ["MAX_LENGTH_ADDED_OR_DECREASED"]);
    assert_eq!(
        backward(
            json!({"type": "string", "maxLength": 5}),
            json!({"type": "string"})
        ),
        ["MAX_LENGTH_ADDED_OR_DECREASED"]
    );
    assert!(backward(
        json!({"type": "string"}),
        json!({"type": "string", "maxLength": 5})
    )
    .is_empty());
    let n = |v| json!({"type": "number", "minimum": v});
    assert!(backward(n(0), n(1)).is_empty());
    assert_eq!(backward(n(2), n(1)), ["MINIMUM_ADDED_OR_INCREASED"]);
    assert_eq!(
        backward(
            json!({"type": "string", "pattern": "^a"}),
            json!({"type": "string"})
        ),
        ["PATTERN_ADDED_OR_CHANGED"]
    );
    let m = |v| json!({"type": "number", "multipleOf": v});
    assert!(backward(m(2), m(4)).is_empty());
    assert_eq!(backward(m(4), m(2)), ["MULTIPLE_OF_ADDED_OR_CHANGED"]);
}

#[test]
fn enums_may_gain_values_but_not_lose_them() {
    let e = |v: serde_json::Value| json!({"enum": v});
    assert!(backward(e(json!(["a", "b", "c"])), e(json!(["a", "b"]))).is_empty());
    assert_eq!(
        backward(e(json!(["a"])), e(json!(["a", "b"]))),
        ["ENUM_ARRAY_NARROWED"]
    );
}

#[test]
fn properties_in_open_and_closed_content_models() {
    let a = json!({"a": {"type": "string"}});
    let ab = json!({"a": {"type": "string"}, "b": {"type": "integer"}});
    // Open: an old document may carry "b" with any value, so adding it is incompatible;
    // removing one is fine (the new schema still allows it as an extra).
    assert_eq!(
        backward(object(ab.clone(), None), object(a.clone(), None)),
        ["OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"]
    );
    assert!(backward(object(a.clone(), None), object(ab.clone(), None)).is_empty());
    // Closed: old documents have no "b", so adding it is fine; removing one is not.
    assert!(backward(
        object(ab.clone(), Some(false)),
        object(a.clone(), Some(false))
    )
    .is_empty());
    assert_eq!(
        backward(
            object(a.clone(), Some(false)),
            object(ab.clone(), Some(false))
        ),
        ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"]
    );
    // Closing an open model is incompatible; opening a closed one is not.
    assert_eq!(
        backward(object(a.clone(), Some(false)), object(a.clone(), None)),
        ["ADDITIONAL_PROPERTIES_REMOVED"]
    );
    assert!(backward(object(a.clone(), None), object(a.clone(), Some(false))).is_empty());
    // A property's own schema is compared inside.
    let a_int = json!({"a": {"type": "integer"}});
    let errors = backward(object(a_int, None), object(a.clone(), None));
    assert_eq!(errors, ["TYPE_CHANGED"]);
}

#[test]
fn required_properties_need_a_default_to_be_added() {
    let props = json!({"a": {"type": "string"}});
    let mut old = object(props.clone(), Some(false));
    let mut new = old.clone();
    new["required"] = json!(["a"]);
    assert_eq!(
        backward(new.clone(), old.clone()),
        ["REQUIRED_ATTRIBUTE_ADDED"]
    );
    assert!(backward(old.clone(), new.clone()).is_empty());
    new["properties"]["a"]["default"] = json!("x");
    assert!(backward(new, old.clone()).is_empty());
    old["required"] = json!(["a"]);
    assert!(backward(object(props, Some(false)), old).is_empty());
}

#[test]
fn arrays_and_combinations() {
    let items = |t: &str| json!({"type": "array", "items": {"type": t}});
    assert!(backward(items("number"), items("integer")).is_empty());
    assert_eq!(
        backward(items("integer"), items("number")),
        ["TYPE_CHANGED"]
    );
    assert_eq!(
        backward(
            json!({"type": "array", "uniqueItems": true}),
            json!({"type": "array"})
        ),
        ["UNIQUE_ITEMS_ADDED"]
    );
    let one = |bs: serde_json::Value| json!({"oneOf": bs});
    let s = json!({"type": "string"});
    let n = json!({"type": "number"});
    assert!(backward(one(json!([s, n])), one(json!([s]))).is_empty());
    assert_eq!(
        backward(one(json!([s])), one(json!([s, n]))),
        ["SUM_TYPE_NARROWED"]
    );
    assert!(backward(one(json!([s, n])), s.clone()).is_empty());
    assert_eq!(
        backward(json!({"allOf": [s]}), json!({})),
        ["PRODUCT_TYPE_EXTENDED"]
    );
}

#[test]
fn forward_is_the_same_walk_the_other_way() {
    let a = object(json!({"a": {"type": "string"}}), Some(false));
    let ab = object(
        json!({"a": {"type": "string"}, "b": {"type": "integer"}}),
        Some(false),
    );
    // Adding a property to a closed model: backward, not forward.
    assert!(parse(ab.clone())
        .read_errors(&parse(a.clone()), true)
        .is_empty());
    assert!(!parse(ab).read_errors(&parse(a), false).is_empty());
}

#[test]
fn local_references_are_followed() {
    let with_def = |t: &str| {
        json!({"definitions": {"x": {"type": t}}, "type": "object",
               "properties": {"v": {"$ref": "#/definitions/x"}}})
    };
    assert!(backward(with_def("number"), with_def("integer")).is_empty());
    assert_eq!(
        backward(with_def("integer"), with_def("number")),
        ["TYPE_CHANGED"]
    );
}
