//! [`Credentials`]: users' SCRAM credentials.

use crate::{Credentials, ScramCredential};

/// Runs every check of the part, each against a fresh, empty store from `open`.
pub async fn run(open: impl Fn() -> Box<dyn Credentials>) {
    credentials_replace_each_other_and_delete(&*open()).await;
    listings_are_ordered_and_filtered(&*open()).await;
}

const SHA256: &str = "SCRAM-SHA-256";
const SHA512: &str = "SCRAM-SHA-512";

/// A credential whose every field differs with `seed`, so that a mixed-up column shows.
fn credential(mechanism: &str, seed: u8) -> ScramCredential {
    ScramCredential {
        mechanism: mechanism.to_string(),
        salt: vec![seed, 0, 255],
        stored_key: vec![seed.wrapping_add(1); 32],
        server_key: vec![seed.wrapping_add(2); 32],
        iterations: 4096 + i32::from(seed),
    }
}

fn users(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

pub async fn credentials_replace_each_other_and_delete(m: &dyn Credentials) {
    assert_eq!(
        m.scram_credential("alice", SHA256).await.expect("read"),
        None
    );
    assert!(m.scram_credentials(None).await.expect("list").is_empty());
    assert!(m
        .scram_credentials(Some(&users(&["alice"])))
        .await
        .expect("list")
        .is_empty());
    assert!(!m
        .delete_scram_credential("alice", SHA256)
        .await
        .expect("delete nothing"));

    // Any bytes, zeros and high bytes included.
    let binary = ScramCredential {
        salt: (0..=255u8).collect(),
        ..credential(SHA256, 0)
    };
    m.upsert_scram_credential("alice", binary.clone())
        .await
        .expect("upsert");
    assert_eq!(
        m.scram_credential("alice", SHA256).await.expect("read"),
        Some(binary)
    );
    // Another user's, or another mechanism's, is not this one.
    assert_eq!(m.scram_credential("bob", SHA256).await.expect("read"), None);
    assert_eq!(
        m.scram_credential("alice", SHA512).await.expect("read"),
        None
    );

    // The same user and mechanism again: a new password replaces the old credential.
    m.upsert_scram_credential("alice", credential(SHA256, 7))
        .await
        .expect("replace");
    assert_eq!(
        m.scram_credential("alice", SHA256).await.expect("read"),
        Some(credential(SHA256, 7))
    );
    // A second mechanism stands beside the first.
    m.upsert_scram_credential("alice", credential(SHA512, 9))
        .await
        .expect("upsert");
    assert_eq!(
        m.scram_credential("alice", SHA256).await.expect("read"),
        Some(credential(SHA256, 7))
    );
    assert_eq!(
        m.scram_credential("alice", SHA512).await.expect("read"),
        Some(credential(SHA512, 9))
    );

    // Deleting one mechanism leaves the other.
    assert!(m
        .delete_scram_credential("alice", SHA256)
        .await
        .expect("delete"));
    assert!(!m
        .delete_scram_credential("alice", SHA256)
        .await
        .expect("delete again"));
    assert_eq!(
        m.scram_credential("alice", SHA256).await.expect("read"),
        None
    );
    assert_eq!(
        m.scram_credentials(None).await.expect("list"),
        vec![("alice".to_string(), credential(SHA512, 9))]
    );
    // A deleted credential can be set again.
    m.upsert_scram_credential("alice", credential(SHA256, 3))
        .await
        .expect("upsert again");
    assert_eq!(
        m.scram_credential("alice", SHA256).await.expect("read"),
        Some(credential(SHA256, 3))
    );
}

pub async fn listings_are_ordered_and_filtered(m: &dyn Credentials) {
    // Stored out of order, with names that sort differently by bytes and by a locale.
    for (user, mechanism, seed) in [
        ("bob", SHA512, 1),
        ("Zed", SHA256, 2),
        ("alice", SHA512, 3),
        ("bob", SHA256, 4),
        ("alice", SHA256, 5),
    ] {
        m.upsert_scram_credential(user, credential(mechanism, seed))
            .await
            .expect("upsert");
    }
    let entry = |user: &str, mechanism: &str, seed| (user.to_string(), credential(mechanism, seed));
    assert_eq!(
        m.scram_credentials(None).await.expect("list"),
        vec![
            entry("Zed", SHA256, 2),
            entry("alice", SHA256, 5),
            entry("alice", SHA512, 3),
            entry("bob", SHA256, 4),
            entry("bob", SHA512, 1),
        ]
    );
    // Named users only, in the same order whatever the order they are named in; a user without
    // credentials, or named twice, adds nothing.
    assert_eq!(
        m.scram_credentials(Some(&users(&["bob", "carol", "Zed", "bob"])))
            .await
            .expect("list"),
        vec![
            entry("Zed", SHA256, 2),
            entry("bob", SHA256, 4),
            entry("bob", SHA512, 1),
        ]
    );
    assert!(m
        .scram_credentials(Some(&users(&["carol"])))
        .await
        .expect("list")
        .is_empty());
    assert!(m
        .scram_credentials(Some(&[]))
        .await
        .expect("list")
        .is_empty());
    // Names match exactly: no case folding.
    assert!(m
        .scram_credentials(Some(&users(&["ALICE", "zed"])))
        .await
        .expect("list")
        .is_empty());
}
