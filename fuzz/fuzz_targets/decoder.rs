//! Fuzz target for the Kafka request decoder: `cargo +nightly fuzz run decoder` from `fuzz/`.
//! Any input must decode to a request or an error: no panic, no runaway allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = weir_network::decode_request(bytes::Bytes::copy_from_slice(data));
});
