//! The SASL handshake paths under random and mutated input: every message a client can send
//! (PLAIN, SCRAM's first and final messages, a client certificate's DER) is answered with a
//! result or an error, never a panic. A bounded run of the property the `fuzz/` target
//! `handshake` explores without bound.

use weir_auth::scram::{self, client::Client, Credential, Mechanism};
use weir_auth::{plain, x509};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Valid messages to mutate: what real clients send.
fn seeds(server_first: &[u8]) -> Vec<Vec<u8>> {
    let c = Client::new(Mechanism::Sha256, "alice", "pw", "nonce123");
    let (last, _) = c.last(server_first).unwrap_or_default();
    vec![
        c.first(),
        last,
        b"\0alice\0secret".to_vec(),
        b"n,a=alice,n=alice,r=abc,ext=1".to_vec(),
        b"c=biws,r=abcdef,p=AAAA".to_vec(),
        vec![
            0x30, 0x82, 0x01, 0x00, 0x30, 0x81, 0xf0, 0xa0, 0x03, 0x02, 0x01, 0x02,
        ],
    ]
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut m = seed.to_vec();
    for _ in 0..=rng.below(4) {
        match rng.below(5) {
            0 if !m.is_empty() => {
                let i = rng.below(m.len());
                m[i] = rng.next() as u8;
            }
            1 if !m.is_empty() => {
                let i = rng.below(m.len());
                m.truncate(i);
            }
            2 => {
                let i = rng.below(m.len() + 1);
                m.insert(i, [b',', b'=', 0, b'r', 0xff][rng.below(5)]);
            }
            3 => m.extend((0..rng.below(16)).map(|_| rng.next() as u8)),
            _ => {
                let i = rng.below(m.len() + 1);
                let j = rng.below(m.len() + 1);
                let (a, b) = (i.min(j), i.max(j));
                m[a..b].reverse();
            }
        }
    }
    m
}

/// One message through every parser, and through a SCRAM exchange at both of its steps.
fn exercise(message: &[u8]) {
    let _ = plain::parse(message);
    let _ = x509::subject_name(message);
    for m in Mechanism::ALL {
        if let Ok(first) = scram::client_first(m, message) {
            let cred = Credential::from_salted_password(m, &[7; 32], b"salt".to_vec(), 4096);
            let _ = first.server_first(cred);
        }
        let cred = Credential::from_salted_password(m, &[7; 32], b"salt".to_vec(), 4096);
        if let Ok((_, awaiting)) = scram::client_first(m, b"n,,n=alice,r=nonce123")
            .expect("a valid first message")
            .server_first(cred)
        {
            let _ = awaiting.client_final(message);
        }
    }
}

#[test]
fn random_and_mutated_handshake_messages_never_panic() {
    let m = Mechanism::Sha256;
    let cred = Credential::from_salted_password(m, &[7; 32], b"salt".to_vec(), 4096);
    let (server_first, _) = scram::client_first(m, b"n,,n=alice,r=nonce123")
        .expect("first")
        .server_first(cred)
        .expect("server first");
    let seeds = seeds(&server_first);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..20_000 {
        let message = if round % 4 == 0 {
            (0..rng.below(300)).map(|_| rng.next() as u8).collect()
        } else {
            let seed = &seeds[rng.below(seeds.len())];
            mutate(&mut rng, seed)
        };
        exercise(&message);
    }
}
