//! Fuzz target for the SASL handshake paths: `cargo +nightly fuzz run handshake` from `fuzz/`.
//! Any message a client can send during authentication (PLAIN, SCRAM's first and final
//! messages, a client certificate's DER) must end in a result or an error: no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_auth::scram::{self, Credential, Mechanism};
use weir_auth::{plain, x509};

fuzz_target!(|data: &[u8]| {
    let _ = plain::parse(data);
    let _ = x509::subject_name(data);
    for m in Mechanism::ALL {
        let cred = || Credential::from_salted_password(m, &[7; 32], b"salt".to_vec(), 4096);
        if let Ok(first) = scram::client_first(m, data) {
            let _ = first.server_first(cred());
        }
        if let Ok(first) = scram::client_first(m, b"n,,n=alice,r=nonce") {
            if let Ok((_, awaiting)) = first.server_first(cred()) {
                let _ = awaiting.client_final(data);
            }
        }
    }
});
