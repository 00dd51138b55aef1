//! Protobuf compatibility, case by case, from the wire format's rules (protobuf.dev, "Updating a
//! message type") and Confluent's verdicts where it is stricter; the printer and payloads.

use base64::Engine;
use prost::Message;

use super::{message_indexes, ProtobufSchema};

fn parse(text: &str) -> ProtobufSchema {
    ProtobufSchema::parse(text, &[]).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn proto(body: &str) -> String {
    format!("syntax = \"proto3\";\npackage acme;\n{body}")
}

/// The error types of reading `old`'s data with `new` (BACKWARD).
fn backward(new: &str, old: &str) -> Vec<String> {
    parse(&proto(new))
        .read_errors(&parse(&proto(old)), true)
        .iter()
        .map(|e| e.split('"').nth(1).unwrap_or_default().to_string())
        .collect()
}

#[test]
fn the_canonical_text_is_the_same_from_text_and_from_a_descriptor() {
    let text = proto(
        "import \"google/protobuf/timestamp.proto\";\n\
         message Order {\n  string id = 1;\n  repeated int64 items = 2;\n\
           map<string, int32> counts = 3;\n  google.protobuf.Timestamp at = 4;\n\
           optional string note = 5;\n  oneof pay { string card = 6; string cash = 7; }\n\
           enum State { NEW = 0; DONE = 1; }\n  State state = 8;\n  reserved 9 to 11;\n}\n",
    );
    let a = parse(&text);
    // What the Python serializer sends: the descriptor, base64.
    let b = parse(&a.serialized());
    assert_eq!(a.canonical(), b.canonical());
    // The printed text compiles to the same thing again.
    let c = parse(a.canonical());
    assert_eq!(c.canonical(), a.canonical());
    for part in [
        "map<string, int32> counts = 3;",
        "repeated int64 items = 2;",
        "optional string note = 5;",
        "oneof pay {",
        "reserved 9 to 11;",
        ".google.protobuf.Timestamp at = 4;",
    ] {
        assert!(a.canonical().contains(part), "{part} in\n{}", a.canonical());
    }
    assert_eq!(a.first_message_name().as_deref(), Some("acme.Order"));
}

#[test]
fn invalid_schemas_are_refused() {
    for bad in [
        "syntax = \"proto3\"; message A { string a = 1",
        "syntax = \"proto3\"; message A { Missing a = 1; }",
        "syntax = \"proto3\"; import \"nowhere.proto\"; message A {}",
        "bm90IGEgZGVzY3JpcHRvcg==",
    ] {
        assert!(ProtobufSchema::parse(bad, &[]).is_err(), "{bad}");
    }
}

#[test]
fn imports_come_from_references_and_builtins() {
    let common = "syntax = \"proto3\";\npackage common;\nmessage Money { int64 cents = 1; }\n";
    let order = "syntax = \"proto3\";\npackage acme;\nimport \"common.proto\";\n\
                 import \"confluent/meta.proto\";\nimport \"google/type/date.proto\";\n\
                 message Order { common.Money total = 1; google.type.Date day = 2; }\n";
    assert!(ProtobufSchema::parse(order, &[]).is_err());
    let refs = [("common.proto".to_string(), common.to_string())];
    let parsed = ProtobufSchema::parse(order, &refs).expect("with its reference");
    // A reference given as a descriptor (as the Python serializer registers it) works too.
    let as_descriptor =
        base64::engine::general_purpose::STANDARD.encode(parse(common).file.encode_to_vec());
    let refs = [("common.proto".to_string(), as_descriptor)];
    let again = ProtobufSchema::parse(order, &refs).expect("descriptor reference");
    assert_eq!(parsed.canonical(), again.canonical());
}

#[test]
fn fields_may_come_and_go_but_not_change_wire_kind() {
    let base = "message M { int32 a = 1; string b = 2; }";
    assert!(backward("message M { int32 a = 1; }", base).is_empty());
    assert!(backward(
        "message M { int32 a = 1; string b = 2; bytes c = 3; }",
        base
    )
    .is_empty());
    // Renaming keeps the number: fine on the wire.
    assert!(backward("message M { int32 x = 1; string y = 2; }", base).is_empty());
    // One group of varints; string and bytes; sint32 and sint64.
    assert!(backward("message M { int64 a = 1; bytes b = 2; }", base).is_empty());
    assert!(backward("message M { bool a = 1; string b = 2; }", base).is_empty());
    assert_eq!(
        backward("message M { sint32 a = 1; string b = 2; }", base),
        ["FIELD_SCALAR_KIND_CHANGED"]
    );
    assert_eq!(
        backward("message M { double a = 1; string b = 2; }", base),
        ["FIELD_SCALAR_KIND_CHANGED"]
    );
    assert_eq!(
        backward("message M { int32 a = 1; N b = 2; } message N {}", base),
        ["FIELD_KIND_CHANGED"]
    );
    assert_eq!(
        backward("message M { repeated int32 a = 1; string b = 2; }", base),
        ["FIELD_NUMERIC_LABEL_CHANGED"]
    );
    assert!(backward("message M { int32 a = 1; repeated string b = 2; }", base).is_empty());
}

#[test]
fn messages_may_be_added_but_not_removed() {
    let two = "message A { int32 a = 1; } message B { int32 b = 1; }";
    let one = "message A { int32 a = 1; }";
    assert!(backward(two, one).is_empty());
    assert_eq!(backward(one, two), ["MESSAGE_REMOVED"]);
    // FORWARD swaps the two: adding a message is what fails.
    let f = parse(&proto(two)).read_errors(&parse(&proto(one)), false);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        backward(
            "message A { B b = 1; } message B {} message C {}",
            "message A { C b = 1; } message B {} message C {}"
        ),
        ["FIELD_NAMED_TYPE_CHANGED"]
    );
}

#[test]
fn package_and_oneof_changes() {
    let old = proto("message M { int32 a = 1; }");
    let other = "syntax = \"proto3\";\npackage other;\nmessage M { int32 a = 1; }";
    let e = parse(other).read_errors(&parse(&old), true);
    assert!(e.iter().any(|m| m.contains("PACKAGE_CHANGED")), "{e:?}");
    let base = "message M { int32 a = 1; int32 b = 2; oneof o { int32 c = 3; int32 d = 4; } }";
    assert!(backward(
        "message M { oneof n { int32 a = 1; } int32 b = 2; oneof o { int32 c = 3; int32 d = 4; } }",
        base
    )
    .is_empty());
    assert_eq!(
        backward("message M { oneof n { int32 a = 1; int32 b = 2; } oneof o { int32 c = 3; int32 d = 4; } }", base),
        ["MULTIPLE_FIELDS_MOVED_TO_ONEOF"]
    );
    assert_eq!(
        backward(
            "message M { int32 b = 2; oneof o { int32 a = 1; int32 c = 3; int32 d = 4; } }",
            base
        ),
        ["FIELD_MOVED_TO_EXISTING_ONEOF"]
    );
    assert_eq!(
        backward(
            "message M { int32 a = 1; int32 b = 2; oneof o { int32 c = 3; } }",
            base
        ),
        ["ONEOF_FIELD_REMOVED"]
    );
    assert!(backward("message M { int32 a = 1; int32 b = 2; }", base).is_empty());
}

#[test]
fn proto2_required_fields_cannot_come_or_go() {
    let p2 = |body: &str| format!("syntax = \"proto2\";\npackage acme;\n{body}");
    let with = parse(&p2(
        "message M { required int32 a = 1; optional int32 b = 2; }",
    ));
    let without = parse(&p2("message M { optional int32 b = 2; }"));
    let e = with.read_errors(&without, true);
    assert!(
        e.iter().any(|m| m.contains("REQUIRED_FIELD_ADDED")),
        "{e:?}"
    );
    let e = without.read_errors(&with, true);
    assert!(
        e.iter().any(|m| m.contains("REQUIRED_FIELD_REMOVED")),
        "{e:?}"
    );
}

#[test]
fn payloads_carry_message_indexes_then_the_message() {
    let s = parse(&proto(
        "message A { int32 a = 1; message Inner { string s = 1; } } message B { string b = 1; }",
    ));
    // [0] written as one 0 byte, then A{a: 150}.
    assert_eq!(s.decode(&[0, 0x08, 0x96, 0x01]), Ok(()));
    assert_eq!(s.message_name_of(&[0]).as_deref(), Some("acme.A"));
    // [1] (count 1 zigzag = 2, index 1 zigzag = 2): B.
    assert_eq!(s.message_name_of(&[2, 2]).as_deref(), Some("acme.B"));
    // [0, 0]: A.Inner.
    assert_eq!(
        s.message_name_of(&[4, 0, 0]).as_deref(),
        Some("acme.A.Inner")
    );
    assert_eq!(message_indexes(&[4, 0, 0, 9]).expect("ok").1, &[9]);
    assert!(s.decode(&[2, 8]).is_err(), "no message 4");
    // At most 100 message indexes (as the Python client): a count of 101 (zigzag 202, a
    // two-byte varint) is refused before any is read.
    assert!(message_indexes(&[0xca, 0x01]).is_err());
    assert!(message_indexes(&[0xc8, 0x01]).is_err_and(|e| e.contains("cut short")));
    // A field of the wrong wire type for its number.
    assert!(s.decode(&[0, 0x0a, 0x05, 1]).is_err());
}
