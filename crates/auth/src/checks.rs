//! What checking passwords may cost the broker. SASL/PLAIN sends the password itself, and
//! checking it against a SCRAM credential is a PBKDF2 derivation (milliseconds of CPU); SCRAM
//! clients do that work themselves and the broker's check is two HMACs. So PLAIN checks are
//! bounded, and never by refusing a right password:
//!
//! - A verdict is remembered, keyed by a keyed hash of (mechanism, user, credential, password)
//!   under a key made at start: a client that retries a stale password after a rotation (or a
//!   right one reconnecting) is answered from memory and costs nothing. The credential is part
//!   of the key, so a changed credential is checked afresh.
//! - Each check not answered from memory takes a token from its address's budget and from the
//!   broker's; when there is none it waits its turn (at most [`MAX_WAIT`]). A guesser from one
//!   address gets [`PER_ADDRESS_RATE`] guesses a second; everyone else's checks go on.
//!
//! There is no lockout: a lockout by (address, user) refused the new password of a user whose
//! stale client kept failing from the same host (a password rotation became an outage).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_lc_rs::{hmac, rand};

use crate::scram::{Credential, Mechanism};

/// Checks a second from one address, and how many at once.
pub const PER_ADDRESS_RATE: f64 = 10.0;
pub const PER_ADDRESS_BURST: f64 = 20.0;
/// Checks a second for the whole broker (about a quarter of a core at SCRAM-SHA-512's 4096
/// iterations), and how many at once.
pub const BROKER_RATE: f64 = 100.0;
pub const BROKER_BURST: f64 = 100.0;
/// The longest a check waits for its turn; past it the attempt fails ("try again later").
pub const MAX_WAIT: Duration = Duration::from_secs(5);
/// Verdicts remembered at most (the memory starts over past it).
const VERDICTS_MAX: usize = 65_536;
/// Addresses with a budget in use at most (idle ones are dropped past it).
const ADDRESSES_MAX: usize = 65_536;

/// A remembered verdict's key.
pub type Fingerprint = [u8; 32];

/// A token bucket that lends: a take when empty reserves the next token and says how long to
/// wait for it.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Bucket {
        Bucket {
            tokens: burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant, rate: f64, burst: f64) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.at = now;
    }

    /// How long a take now would wait.
    fn wait(&self, rate: f64) -> Duration {
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / rate)
        }
    }
}

/// The verdicts and the budgets; one per broker.
pub struct PasswordChecks {
    key: hmac::Key,
    verdicts: Mutex<HashMap<Fingerprint, bool>>,
    budgets: Mutex<Budgets>,
}

struct Budgets {
    broker: Bucket,
    by_address: HashMap<IpAddr, Bucket>,
}

impl std::fmt::Debug for PasswordChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PasswordChecks").finish_non_exhaustive()
    }
}

impl Default for PasswordChecks {
    fn default() -> Self {
        let mut k = [0u8; 32];
        // Without randomness the key is fixed: fingerprints stay keyed, only guessable offline
        // by someone who can read the process's memory anyway.
        let _ = rand::fill(&mut k);
        PasswordChecks {
            key: hmac::Key::new(hmac::HMAC_SHA256, &k),
            verdicts: Mutex::default(),
            budgets: Mutex::new(Budgets {
                broker: Bucket::full(BROKER_BURST, Instant::now()),
                by_address: HashMap::new(),
            }),
        }
    }
}

impl PasswordChecks {
    /// The fingerprint of one attempt: who, with what, against which credential.
    pub fn fingerprint(
        &self,
        mechanism: Mechanism,
        user: &str,
        credential: &Credential,
        password: &str,
    ) -> Fingerprint {
        let mut ctx = hmac::Context::with_key(&self.key);
        for part in [
            mechanism.name().as_bytes(),
            user.as_bytes(),
            &credential.salt,
            &credential.stored_key,
            password.as_bytes(),
        ] {
            // Length-prefixed, so that no two different attempts make the same input.
            ctx.update(&(part.len() as u64).to_be_bytes());
            ctx.update(part);
        }
        let mut out = [0u8; 32];
        out.copy_from_slice(&ctx.sign().as_ref()[..32]);
        out
    }

    /// The verdict of an attempt checked before, if remembered.
    pub fn remembered(&self, f: &Fingerprint) -> Option<bool> {
        self.verdicts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(f)
            .copied()
    }

    pub fn remember(&self, f: Fingerprint, verdict: bool) {
        let mut v = self.verdicts.lock().unwrap_or_else(|e| e.into_inner());
        if v.len() >= VERDICTS_MAX {
            v.clear();
        }
        v.insert(f, verdict);
    }

    /// Takes a check's turn for `ip`: how long to wait before checking, or `None` if that
    /// would be over [`MAX_WAIT`] (nothing is taken then).
    pub fn admit(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let mut b = self.budgets.lock().unwrap_or_else(|e| e.into_inner());
        if b.by_address.len() >= ADDRESSES_MAX {
            b.by_address.retain(|_, a| {
                a.refill(now, PER_ADDRESS_RATE, PER_ADDRESS_BURST);
                a.tokens < PER_ADDRESS_BURST
            });
        }
        b.broker.refill(now, BROKER_RATE, BROKER_BURST);
        let mut mine = b
            .by_address
            .get(&ip)
            .copied()
            .unwrap_or_else(|| Bucket::full(PER_ADDRESS_BURST, now));
        mine.refill(now, PER_ADDRESS_RATE, PER_ADDRESS_BURST);
        let wait = mine.wait(PER_ADDRESS_RATE).max(b.broker.wait(BROKER_RATE));
        if wait > MAX_WAIT {
            return None;
        }
        mine.tokens -= 1.0;
        b.broker.tokens -= 1.0;
        b.by_address.insert(ip, mine);
        Some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(stored: u8) -> Credential {
        Credential {
            salt: vec![1; 16],
            stored_key: vec![stored; 32],
            server_key: vec![3; 32],
            iterations: 4096,
        }
    }

    #[test]
    fn a_verdict_is_remembered_for_its_credential_only() {
        let c = PasswordChecks::default();
        let m = Mechanism::Sha512;
        let old = c.fingerprint(m, "alice", &credential(1), "old-secret");
        c.remember(old, false);
        assert_eq!(c.remembered(&old), Some(false));
        // Another password, user, mechanism or credential: not remembered.
        assert_eq!(
            c.remembered(&c.fingerprint(m, "alice", &credential(1), "new-secret")),
            None
        );
        assert_eq!(
            c.remembered(&c.fingerprint(m, "bob", &credential(1), "old-secret")),
            None
        );
        assert_eq!(
            c.remembered(&c.fingerprint(Mechanism::Sha256, "alice", &credential(1), "old-secret")),
            None
        );
        assert_eq!(
            c.remembered(&c.fingerprint(m, "alice", &credential(2), "old-secret")),
            None
        );
        // Parts do not run into each other.
        assert_ne!(
            c.fingerprint(m, "ab", &credential(1), "c"),
            c.fingerprint(m, "a", &credential(1), "bc")
        );
    }

    #[test]
    fn an_address_gets_its_burst_then_its_rate_and_others_are_not_held() {
        let c = PasswordChecks::default();
        let now = Instant::now();
        let guesser: IpAddr = "10.0.0.1".parse().expect("ip");
        let other: IpAddr = "10.0.0.2".parse().expect("ip");
        for _ in 0..PER_ADDRESS_BURST as usize {
            assert_eq!(c.admit(guesser, now), Some(Duration::ZERO));
        }
        // Then one every 100 ms, queued.
        let waits: Vec<Duration> = (0..5)
            .map(|_| c.admit(guesser, now).expect("turn"))
            .collect();
        assert_eq!(waits[0], Duration::from_millis(100));
        assert!(waits.windows(2).all(|w| w[1] > w[0]));
        // Queued beyond MAX_WAIT: refused, nothing taken.
        let mut n = 5;
        while c.admit(guesser, now).is_some() {
            n += 1;
        }
        assert_eq!(n, (MAX_WAIT.as_secs_f64() * PER_ADDRESS_RATE) as usize);
        assert_eq!(
            c.admit(other, now),
            Some(Duration::ZERO),
            "another address goes on"
        );
        // A second later, ten more turns' worth.
        assert!(c.admit(guesser, now + Duration::from_secs(1)).is_some());
    }
}
