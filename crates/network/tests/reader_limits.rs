//! The limits Kafka 4.4's protocol readers apply to what a request claims: an array of over
//! 1,000,000 elements, or a tagged-field section of over 10,000 fields, makes the request
//! malformed (the connection is closed, as for any request that does not decode), and so does
//! a length larger than the bytes left. At the limits themselves the request decodes.

use bytes::{BufMut, Bytes, BytesMut};
use weir_network::{decode_request, Decoded};

/// A flexible request header (v2) for `key` at `version`, client id "test", no tags.
fn header(key: i16, version: i16) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_i16(key);
    b.put_i16(version);
    b.put_i32(7);
    b.put_i16(4);
    b.put_slice(b"test");
    b.put_u8(0);
    b
}

fn put_uvarint(b: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        b.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

/// ListGroups v5 whose StatesFilter holds `states` empty strings (one byte each).
fn list_groups_with_states(states: u32) -> Bytes {
    let mut b = header(16, 5);
    put_uvarint(&mut b, states + 1);
    b.put_bytes(1, states as usize); // compact string of length 0
    b.put_u8(1); // TypesFilter: empty
    b.put_u8(0); // no tags
    b.freeze()
}

/// ApiVersions v3 whose body carries `fields` empty tagged fields (tags 0, 1, ...).
fn api_versions_with_tagged_fields(fields: u32) -> Bytes {
    let mut b = header(18, 3);
    b.put_slice(&[5, b'w', b'e', b'i', b'r', 4, b'1', b'.', b'0']);
    put_uvarint(&mut b, fields);
    for tag in 0..fields {
        put_uvarint(&mut b, tag);
        b.put_u8(0);
    }
    b.freeze()
}

fn decodes(frame: Bytes) -> Result<(), String> {
    match decode_request(frame)? {
        Decoded::Request(..) => Ok(()),
        other => Err(format!("not a request: {other:?}")),
    }
}

#[test]
fn an_array_of_a_million_elements_decodes_and_one_more_is_refused() {
    decodes(list_groups_with_states(1_000_000)).expect("1,000,000 elements is within the limit");
    let err = decodes(list_groups_with_states(1_000_001)).expect_err("over the limit");
    assert!(err.contains("over the limit of 1000000"), "{err}");
}

#[test]
fn an_array_longer_than_the_bytes_left_is_refused_before_reading() {
    let mut b = header(16, 5);
    put_uvarint(&mut b, 500_001); // claims 500,000 states, sends 10 bytes
    b.put_bytes(1, 10);
    let err = decodes(b.freeze()).expect_err("claims more than it carries");
    assert!(err.contains("tried to read 500000 elements"), "{err}");
}

#[test]
fn a_tagged_section_of_ten_thousand_fields_decodes_and_one_more_is_refused() {
    decodes(api_versions_with_tagged_fields(10_000)).expect("10,000 fields is within the limit");
    let err = decodes(api_versions_with_tagged_fields(10_001)).expect_err("over the limit");
    assert!(err.contains("over the limit of 10000"), "{err}");
}
