//! Broker-to-broker authentication: a broker opening a connection to a peer's internal
//! listener proves that it holds the cluster's shared secret (`cluster.internal_secret`)
//! before the listener serves anything else. The secret itself never crosses the network.
//!
//! The listener challenges: the caller first asks for a nonce (32 random bytes, fresh for
//! each connection), then sends its hello with an HMAC-SHA256 of its node id, its zone and
//! that nonce ([`challenged_proof`]). A hello seen on the wire is worth nothing on another
//! connection. The hello of earlier versions (an HMAC of node id, zone and the time, valid for
//! [`MAX_SKEW_MS`] either way) could be replayed for ten minutes; it is accepted only with
//! `cluster.legacy_peer_hello`, while a cluster is upgraded from them.

use aws_lc_rs::hmac;

/// How far the calling broker's clock may be from the listener's.
pub const MAX_SKEW_MS: i64 = 5 * 60 * 1000;

fn message(node_id: i32, zone: &str, timestamp_ms: i64) -> Vec<u8> {
    format!("weir-peer-hello\n{node_id}\n{zone}\n{timestamp_ms}").into_bytes()
}

/// The proof a broker sends with its hello.
pub fn proof(secret: &[u8], node_id: i32, zone: &str, timestamp_ms: i64) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    hmac::sign(&key, &message(node_id, zone, timestamp_ms))
        .as_ref()
        .to_vec()
}

/// The nonce a listener challenges a caller with.
pub fn nonce() -> Result<[u8; 32], crate::AuthError> {
    let mut n = [0u8; 32];
    aws_lc_rs::rand::fill(&mut n)
        .map_err(|_| crate::AuthError::Internal("the random number generator failed"))?;
    Ok(n)
}

fn challenged_message(node_id: i32, zone: &str, nonce: &[u8]) -> Vec<u8> {
    let mut m = format!("weir-peer-hello-2\n{node_id}\n{zone}\n").into_bytes();
    m.extend_from_slice(nonce);
    m
}

/// The proof a broker sends with its hello, answering the listener's `nonce`.
pub fn challenged_proof(secret: &[u8], node_id: i32, zone: &str, nonce: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    hmac::sign(&key, &challenged_message(node_id, zone, nonce))
        .as_ref()
        .to_vec()
}

/// Checks a hello's proof against `secret` and the `nonce` this connection was challenged with.
pub fn verify_challenged(
    secret: &[u8],
    node_id: i32,
    zone: &str,
    nonce: &[u8],
    proof: &[u8],
) -> Result<(), String> {
    if proof.is_empty() {
        return Err("the peer sent no proof of the cluster's internal secret".into());
    }
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    hmac::verify(&key, &challenged_message(node_id, zone, nonce), proof)
        .map_err(|_| "the peer's proof does not match the cluster's internal secret and this connection's challenge".into())
}

/// Checks an earlier version's hello (no challenge) against `secret` at `now_ms`.
pub fn verify(
    secret: &[u8],
    node_id: i32,
    zone: &str,
    timestamp_ms: i64,
    proof: &[u8],
    now_ms: i64,
) -> Result<(), String> {
    if proof.is_empty() {
        return Err("the peer sent no proof of the cluster's internal secret".into());
    }
    if (now_ms - timestamp_ms).abs() > MAX_SKEW_MS {
        return Err(format!(
            "the peer's hello is {} ms away from this broker's clock",
            now_ms - timestamp_ms
        ));
    }
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    hmac::verify(&key, &message(node_id, zone, timestamp_ms), proof)
        .map_err(|_| "the peer's proof does not match the cluster's internal secret".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_challenged_proof_holds_for_its_secret_fields_and_nonce_only() {
        let (n1, n2) = (nonce().expect("nonce"), nonce().expect("nonce"));
        assert_ne!(n1, n2);
        let p = challenged_proof(b"secret", 1001, "az1", &n1);
        assert!(verify_challenged(b"secret", 1001, "az1", &n1, &p).is_ok());
        // Replayed on another connection (another challenge): refused.
        assert!(verify_challenged(b"secret", 1001, "az1", &n2, &p).is_err());
        assert!(verify_challenged(b"other", 1001, "az1", &n1, &p).is_err());
        assert!(verify_challenged(b"secret", 1002, "az1", &n1, &p).is_err());
        assert!(verify_challenged(b"secret", 1001, "az2", &n1, &p).is_err());
        assert!(verify_challenged(b"secret", 1001, "az1", &n1, &[]).is_err());
    }

    #[test]
    fn a_proof_holds_for_its_secret_fields_and_time_only() {
        let p = proof(b"secret", 1001, "az1", 1_000_000);
        assert!(verify(b"secret", 1001, "az1", 1_000_000, &p, 1_000_500).is_ok());
        assert!(verify(b"other", 1001, "az1", 1_000_000, &p, 1_000_500).is_err());
        assert!(verify(b"secret", 1002, "az1", 1_000_000, &p, 1_000_500).is_err());
        assert!(verify(b"secret", 1001, "az2", 1_000_000, &p, 1_000_500).is_err());
        assert!(verify(b"secret", 1001, "az1", 1_000_001, &p, 1_000_500).is_err());
        assert!(verify(
            b"secret",
            1001,
            "az1",
            1_000_000,
            &p,
            1_000_000 + MAX_SKEW_MS + 1
        )
        .is_err());
        assert!(verify(b"secret", 1001, "az1", 1_000_000, &[], 1_000_000).is_err());
    }
}
