//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), the server's side, as Kafka speaks
//! them (KIP-84): no channel binding, the authorization id (if any) must be the user name.
//!
//! The exchange is two round trips: the client's first message names the user and brings a
//! nonce; the server answers with the user's salt, iteration count and its own nonce; the
//! client proves it knows the password; the server checks the proof against the stored key and
//! proves in turn that it knows the server key. The store holds neither the password nor
//! anything that logs in by itself: the stored key is a hash of the client key.

use aws_lc_rs::{constant_time, digest, hmac, pbkdf2, rand};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;

use crate::AuthError;

/// Kafka's minimum iteration count for SCRAM credentials (`ScramMechanism.minIterations`).
pub const MIN_ITERATIONS: u32 = 4096;
/// Kafka's maximum (`ScramMechanism`'s 16384 for both mechanisms).
pub const MAX_ITERATIONS: u32 = 16384;

/// A SCRAM mechanism, with Kafka's names and wire ids (AlterUserScramCredentials).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Sha256,
    Sha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha256, Mechanism::Sha512];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The id of the mechanism in Kafka's SCRAM credential APIs.
    pub fn kafka_type(self) -> i8 {
        match self {
            Mechanism::Sha256 => 1,
            Mechanism::Sha512 => 2,
        }
    }

    pub fn from_kafka_type(t: i8) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.kafka_type() == t)
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            Mechanism::Sha256 => &digest::SHA256,
            Mechanism::Sha512 => &digest::SHA512,
        }
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            Mechanism::Sha256 => hmac::HMAC_SHA256,
            Mechanism::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            Mechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Mechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn len(self) -> usize {
        self.digest().output_len()
    }

    fn mac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac(), key), data)
            .as_ref()
            .to_vec()
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest(), data).as_ref().to_vec()
    }

    /// `Hi(password, salt, i)` of RFC 5802: what a client sends AlterUserScramCredentials.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.len()];
        // Iterations are checked (4096..=16384) before this is called; 1 is only a floor.
        let n = std::num::NonZeroU32::new(iterations.max(1)).unwrap_or(std::num::NonZeroU32::MIN);
        pbkdf2::derive(self.pbkdf2(), n, salt, password, &mut out);
        out
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the broker keeps of a user's password for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl Credential {
    /// The credential of a salted password (as AlterUserScramCredentials carries it).
    pub fn from_salted_password(
        mechanism: Mechanism,
        salted: &[u8],
        salt: Vec<u8>,
        iterations: u32,
    ) -> Credential {
        let client_key = mechanism.mac(salted, b"Client Key");
        Credential {
            salt,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.mac(salted, b"Server Key"),
            iterations,
        }
    }

    /// The credential of a password, with a fresh random salt.
    pub fn from_password(
        mechanism: Mechanism,
        password: &str,
        iterations: u32,
    ) -> Result<Credential, AuthError> {
        let salt = random_bytes(32)?;
        let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations);
        Ok(Credential::from_salted_password(
            mechanism, &salted, salt, iterations,
        ))
    }

    /// Whether `password` is the one this credential was made from (SASL/PLAIN checks
    /// passwords against SCRAM credentials: there is one store of users). Constant time.
    pub fn matches_password(&self, mechanism: Mechanism, password: &str) -> bool {
        let salted = mechanism.salted_password(password.as_bytes(), &self.salt, self.iterations);
        let stored = mechanism.hash(&mechanism.mac(&salted, b"Client Key"));
        constant_time::verify_slices_are_equal(&stored, &self.stored_key).is_ok()
    }
}

fn random_bytes(n: usize) -> Result<Vec<u8>, AuthError> {
    let mut b = vec![0u8; n];
    rand::fill(&mut b).map_err(|_| AuthError::Internal("the random number generator failed"))?;
    Ok(b)
}

/// The client's first message, parsed: who wants to log in.
#[derive(Debug)]
pub struct ClientFirst {
    mechanism: Mechanism,
    /// The user name, with `=2C` and `=3D` decoded.
    pub user: String,
    client_nonce: String,
    /// The message without its GS2 header, part of what both proofs sign.
    bare: String,
    /// The GS2 header, which the client echoes (base64) in its final message.
    gs2_header: String,
}

/// Parses the client's first message (`n,[a=authzid],n=user,r=nonce[,extensions]`).
pub fn client_first(mechanism: Mechanism, message: &[u8]) -> Result<ClientFirst, AuthError> {
    let message = std::str::from_utf8(message)
        .map_err(|_| AuthError::Malformed("the client's first message is not UTF-8".into()))?;
    let bad = |why: &str| AuthError::Malformed(format!("the client's first message {why}"));
    let (cbind, rest) = message
        .split_once(',')
        .ok_or_else(|| bad("has no GS2 header"))?;
    match cbind {
        "n" | "y" => {}
        _ => return Err(bad("asks for channel binding, which Kafka does not use")),
    }
    let (authzid, bare) = rest.split_once(',').ok_or_else(|| bad("is cut short"))?;
    let gs2_header = format!("{cbind},{authzid},");
    let mut fields = bare.split(',');
    let user = fields
        .next()
        .and_then(|f| f.strip_prefix("n="))
        .ok_or_else(|| bad("does not start with the user name"))?;
    let user = decode_name(user).ok_or_else(|| bad("has a badly escaped user name"))?;
    let client_nonce = fields
        .next()
        .and_then(|f| f.strip_prefix("r="))
        .filter(|n| !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b','))
        .ok_or_else(|| bad("has no nonce"))?
        .to_string();
    // Extensions (`tokenauth=true` for delegation tokens) are for tokens Weir does not issue.
    if fields.any(|f| f.starts_with("tokenauth=") && f != "tokenauth=false") {
        return Err(AuthError::Failed(
            "delegation tokens are not supported".into(),
        ));
    }
    if !authzid.is_empty() {
        let authzid = authzid
            .strip_prefix("a=")
            .and_then(decode_name)
            .ok_or_else(|| bad("has a malformed authorization id"))?;
        if authzid != user {
            return Err(AuthError::Failed(format!(
                "authorization id {authzid} is not the user name {user}"
            )));
        }
    }
    Ok(ClientFirst {
        mechanism,
        user,
        client_nonce,
        bare: bare.to_string(),
        gs2_header,
    })
}

/// `saslname` of RFC 5802: `,` and `=` are written `=2C` and `=3D`; any other `=` is an error.
fn decode_name(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 3)?;
        out.push(match code {
            "2C" => ',',
            "3D" => '=',
            _ => return None,
        });
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

impl ClientFirst {
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }
}

/// The server's first message was sent: waiting for the client's proof.
#[derive(Debug)]
pub struct AwaitingProof {
    first: ClientFirst,
    credential: Credential,
    server_first: String,
    nonce: String,
}

impl ClientFirst {
    /// Answers with `credential`'s salt and iteration count and a fresh nonce.
    pub fn server_first(
        self,
        credential: Credential,
    ) -> Result<(Vec<u8>, AwaitingProof), AuthError> {
        let mine = B64.encode(random_bytes(18)?);
        let nonce = format!("{}{mine}", self.client_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        Ok((
            server_first.clone().into_bytes(),
            AwaitingProof {
                first: self,
                credential,
                server_first,
                nonce,
            },
        ))
    }
}

impl AwaitingProof {
    pub fn user(&self) -> &str {
        &self.first.user
    }

    pub fn mechanism(&self) -> Mechanism {
        self.first.mechanism
    }

    /// Checks the client's final message (`c=...,r=...,p=proof`); the server's final message
    /// (`v=signature`) if the proof holds.
    pub fn client_final(self, message: &[u8]) -> Result<Vec<u8>, AuthError> {
        let message = std::str::from_utf8(message)
            .map_err(|_| AuthError::Malformed("the client's final message is not UTF-8".into()))?;
        let bad = |why: &str| AuthError::Malformed(format!("the client's final message {why}"));
        let (without_proof, proof) = message
            .rsplit_once(",p=")
            .ok_or_else(|| bad("has no proof"))?;
        let mut fields = without_proof.split(',');
        let binding = fields
            .next()
            .and_then(|f| f.strip_prefix("c="))
            .ok_or_else(|| bad("has no channel binding"))?;
        if B64.decode(binding).ok().as_deref() != Some(self.first.gs2_header.as_bytes()) {
            return Err(bad("does not repeat the GS2 header"));
        }
        let nonce = fields
            .next()
            .and_then(|f| f.strip_prefix("r="))
            .ok_or_else(|| bad("has no nonce"))?;
        if nonce != self.nonce {
            return Err(AuthError::Failed("the nonce does not match".into()));
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| bad("has a malformed proof"))?;
        let m = self.first.mechanism;
        let auth_message = format!("{},{},{without_proof}", self.first.bare, self.server_first);
        let signature = m.mac(&self.credential.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(invalid(m));
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        if constant_time::verify_slices_are_equal(&m.hash(&client_key), &self.credential.stored_key)
            .is_err()
        {
            return Err(invalid(m));
        }
        let server_signature = m.mac(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)).into_bytes())
    }
}

/// Kafka's words for a wrong password or an unknown user (the same for both, so that user
/// names cannot be probed).
pub fn invalid(mechanism: Mechanism) -> AuthError {
    AuthError::Failed(format!(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
    ))
}

/// A client's side of the exchange, for tests and for Weir's own clients.
pub mod client {
    use super::*;

    pub struct Client {
        mechanism: Mechanism,
        password: String,
        bare: String,
        nonce: String,
    }

    impl Client {
        pub fn new(mechanism: Mechanism, user: &str, password: &str, nonce: &str) -> Client {
            let user = user.replace('=', "=3D").replace(',', "=2C");
            Client {
                mechanism,
                password: password.to_string(),
                bare: format!("n={user},r={nonce}"),
                nonce: nonce.to_string(),
            }
        }

        pub fn first(&self) -> Vec<u8> {
            format!("n,,{}", self.bare).into_bytes()
        }

        /// The final message for the server's first, and the server signature to expect.
        pub fn last(&self, server_first: &[u8]) -> Result<(Vec<u8>, Vec<u8>), AuthError> {
            let sf = std::str::from_utf8(server_first)
                .map_err(|_| AuthError::Malformed("server first".into()))?;
            let mut nonce = None;
            let mut salt = None;
            let mut iterations = None;
            for f in sf.split(',') {
                if let Some(v) = f.strip_prefix("r=") {
                    nonce = Some(v.to_string());
                } else if let Some(v) = f.strip_prefix("s=") {
                    salt = B64.decode(v).ok();
                } else if let Some(v) = f.strip_prefix("i=") {
                    iterations = v.parse::<u32>().ok();
                }
            }
            let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
                return Err(AuthError::Malformed("server first".into()));
            };
            if !nonce.starts_with(&self.nonce) {
                return Err(AuthError::Failed("server nonce".into()));
            }
            let m = self.mechanism;
            let salted = m.salted_password(self.password.as_bytes(), &salt, iterations);
            let client_key = m.mac(&salted, b"Client Key");
            let stored_key = m.hash(&client_key);
            let without_proof = format!("c={},r={nonce}", B64.encode("n,,"));
            let auth = format!("{},{sf},{without_proof}", self.bare);
            let signature = m.mac(&stored_key, auth.as_bytes());
            let proof: Vec<u8> = client_key
                .iter()
                .zip(&signature)
                .map(|(a, b)| a ^ b)
                .collect();
            let server_key = m.mac(&salted, b"Server Key");
            let expected = format!("v={}", B64.encode(m.mac(&server_key, auth.as_bytes())));
            Ok((
                format!("{without_proof},p={}", B64.encode(proof)).into_bytes(),
                expected.into_bytes(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::client::Client;
    use super::*;

    /// RFC 7677's example: user "user", password "pencil", its salt and nonces. The server's
    /// nonce is random here, so the exchange is checked end to end and the derived keys against
    /// the RFC's proof.
    #[test]
    fn rfc_7677_example_credential_verifies_the_rfc_proof() {
        let m = Mechanism::Sha256;
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").expect("salt");
        let salted = m.salted_password(b"pencil", &salt, 4096);
        let cred = Credential::from_salted_password(m, &salted, salt, 4096);
        let first = client_first(m, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").expect("first");
        assert_eq!(first.user, "user");
        // Replay the RFC's server-first by hand: its nonce is fixed there.
        let server_first =
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let state = AwaitingProof {
            nonce: "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".into(),
            server_first: server_first.into(),
            credential: cred,
            first,
        };
        let last = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        let server_final = state.client_final(last).expect("the RFC's proof holds");
        assert_eq!(
            server_final,
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_vec()
        );
    }

    fn exchange(
        m: Mechanism,
        stored_for: &str,
        user: &str,
        password: &str,
    ) -> Result<(), AuthError> {
        let cred = Credential::from_password(m, stored_for, 4096)?;
        let c = Client::new(m, user, password, "fyko+d2lbbFgONRv9qkxdawL");
        let first = client_first(m, &c.first())?;
        let (sf, state) = first.server_first(cred)?;
        let (last, expected) = c.last(&sf)?;
        let server_final = state.client_final(&last)?;
        assert_eq!(server_final, expected, "the server proves it knows the key");
        Ok(())
    }

    #[test]
    fn the_right_password_passes_and_a_wrong_one_fails_for_both_mechanisms() {
        for m in Mechanism::ALL {
            exchange(m, "s3cret", "alice", "s3cret").expect("right password");
            let e = exchange(m, "s3cret", "alice", "s3cre7").expect_err("wrong password");
            assert!(
                matches!(e, AuthError::Failed(ref s) if s.contains("invalid credentials")),
                "{e}"
            );
        }
    }

    #[test]
    fn escaped_user_names_are_decoded() {
        let f = client_first(Mechanism::Sha256, b"n,,n=a=2Cb=3Dc,r=abc").expect("first");
        assert_eq!(f.user, "a,b=c");
        assert!(client_first(Mechanism::Sha256, b"n,,n=a=2Xb,r=abc").is_err());
        exchange(Mechanism::Sha512, "pw", "we,ir=x", "pw").expect("escaped name round trip");
    }

    #[test]
    fn malformed_first_messages_are_refused() {
        for bad in [
            &b""[..],
            b"n",
            b"p=tls-unique,,n=u,r=x",
            b"n,,r=x",
            b"n,,n=u",
            b"n,,n=u,r=",
            b"n,a=other,n=u,r=x",
            b"n,,n=u,r=x,tokenauth=true",
            b"\xff\xfe",
        ] {
            assert!(client_first(Mechanism::Sha256, bad).is_err(), "{bad:?}");
        }
        assert!(client_first(Mechanism::Sha256, b"n,a=u,n=u,r=x").is_ok());
    }

    #[test]
    fn a_final_message_with_another_nonce_or_header_fails() {
        let m = Mechanism::Sha256;
        let mutations: [fn(&str) -> String; 4] = [
            |last| last.to_string(),
            |last| last.replacen(",r=nonce", ",r=nonce2", 1),
            |last| last.replacen("c=biws", "c=eSws", 1),
            |_| "c=biws".to_string(),
        ];
        for (i, mutate) in mutations.into_iter().enumerate() {
            let cred = Credential::from_password(m, "pw", 4096).expect("cred");
            let c = Client::new(m, "u", "pw", "nonce");
            let (sf, state) = client_first(m, &c.first())
                .expect("first")
                .server_first(cred)
                .expect("server first");
            let (last, _) = c.last(&sf).expect("last");
            let msg = mutate(std::str::from_utf8(&last).expect("utf8"));
            // The first is the message as the client wrote it: it must pass, or the others
            // would fail for another reason.
            assert_eq!(state.client_final(msg.as_bytes()).is_ok(), i == 0, "{msg}");
        }
    }

    #[test]
    fn passwords_match_their_credentials_only() {
        for m in Mechanism::ALL {
            let cred = Credential::from_password(m, "hunter2", 4096).expect("cred");
            assert!(cred.matches_password(m, "hunter2"));
            assert!(!cred.matches_password(m, "hunter3"));
        }
    }

    #[test]
    fn mechanisms_have_kafkas_names_and_ids() {
        assert_eq!(
            Mechanism::from_name("SCRAM-SHA-256"),
            Some(Mechanism::Sha256)
        );
        assert_eq!(Mechanism::from_kafka_type(2), Some(Mechanism::Sha512));
        assert_eq!(Mechanism::from_kafka_type(0), None);
        assert_eq!(Mechanism::from_name("PLAIN"), None);
    }
}
