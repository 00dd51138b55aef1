//! Broker-to-broker authentication: a broker opening a connection to a peer's internal
//! listener proves, in its first frame, that it holds the cluster's shared secret
//! (`cluster.internal_secret`): an HMAC-SHA256 of its node id, its zone and the time, which the
//! listener checks (within [`MAX_SKEW_MS`] of its own clock) before it serves anything else.
//! The secret itself never crosses the network.

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

/// Checks a hello's proof against `secret` at `now_ms`.
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
