//! The request decoder under random and mutated input: it must answer every frame with a
//! request or an error, never a panic or an allocation beyond the frame. A bounded run of the
//! same property the `fuzz/` target (cargo-fuzz, libFuzzer) explores without bound.

use bytes::{BufMut, Bytes, BytesMut};
use weir_network::{decode_request, Decoded};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Valid requests of several APIs and versions to mutate, as real clients send them.
fn seeds() -> Vec<Bytes> {
    let mut out = Vec::new();
    let header = |key: i16, version: i16, flexible: bool| {
        let mut b = BytesMut::new();
        b.put_i16(key);
        b.put_i16(version);
        b.put_i32(7);
        b.put_i16(4);
        b.put_slice(b"test");
        if flexible {
            b.put_u8(0);
        }
        b
    };
    // ApiVersions v3: client software name and version, tags.
    let mut b = header(18, 3, true);
    b.put_slice(&[5, b'w', b'e', b'i', b'r', 4, b'1', b'.', b'0', 0]);
    out.push(b.freeze());
    // Metadata v1: topics array of one name.
    let mut b = header(3, 1, false);
    b.put_i32(1);
    b.put_i16(3);
    b.put_slice(b"abc");
    out.push(b.freeze());
    // Produce v7: transactional id null, acks, timeout, one topic, one partition, records.
    let mut b = header(0, 7, false);
    b.put_i16(-1);
    b.put_i16(-1);
    b.put_i32(1000);
    b.put_i32(1);
    b.put_i16(1);
    b.put_slice(b"t");
    b.put_i32(1);
    b.put_i32(0);
    b.put_i32(8);
    b.put_slice(&[0, 1, 2, 3, 4, 5, 6, 7]);
    out.push(b.freeze());
    // Fetch v4 with one partition.
    let mut b = header(1, 4, false);
    b.put_i32(-1);
    b.put_i32(500);
    b.put_i32(1);
    b.put_i32(1 << 20);
    b.put_i8(0);
    b.put_i32(1);
    b.put_i16(1);
    b.put_slice(b"t");
    b.put_i32(1);
    b.put_i32(0);
    b.put_i64(0);
    b.put_i32(1 << 20);
    out.push(b.freeze());
    out
}

#[test]
fn seeds_decode() {
    for s in seeds() {
        match decode_request(s.clone()) {
            Ok(Decoded::Request(..)) => {}
            other => panic!("seed did not decode: {other:?}"),
        }
    }
}

#[test]
fn random_and_mutated_frames_never_panic() {
    let iterations: usize = std::env::var("WEIR_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let mut rng = Rng(0x853c_49e6_748f_ea9b);
    let seeds = seeds();
    let mut decoded = 0;
    for i in 0..iterations {
        let frame: Vec<u8> = if i % 4 == 0 {
            // Pure noise with a plausible header.
            let n = (rng.next() % 200) as usize;
            let mut v: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            if v.len() >= 4 {
                v[0] = 0;
                v[1] = (rng.next() % 70) as u8;
                v[2] = 0;
                v[3] = (rng.next() % 14) as u8;
            }
            v
        } else {
            let mut v = seeds[i % seeds.len()].to_vec();
            for _ in 0..1 + rng.next() % 4 {
                let at = (rng.next() as usize) % v.len();
                match rng.next() % 4 {
                    0 => v[at] = rng.next() as u8,
                    1 => v[at] = 0xff,
                    2 => v.truncate(at.max(8)),
                    _ => v.insert(at, 0x7f),
                }
            }
            v
        };
        if decode_request(Bytes::from(frame)).is_ok() {
            decoded += 1;
        }
    }
    // Most mutations break the frame; some must survive, or the seeds are not exercising decoding.
    assert!(decoded > 0);
}
