//! Weir's one retry policy: exponential back-off with jitter (on `backon`).
//!
//! Every loop that retries a failing call (a metadata-store commit, an object PUT, a
//! transaction marker, a reconnection) takes its delays from a [`Backoff`]: each delay is
//! twice the one before, up to a maximum, plus a random part of itself (up to as much again),
//! so that the streams, connections and brokers that fail together do not retry in step. What
//! bounds a loop as a whole (a patience, a number of attempts, a deadline) stays with its
//! caller, because that bound is what the caller promises its own caller; the longest time
//! each path can spend retrying is listed in `docs/architecture.md` ("Retries").

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// A retry policy: the first delay and the largest (before jitter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
}

impl Backoff {
    /// Delays from `first`, doubling up to `max`; each then lengthened by a random part of
    /// itself (so in `[d, 2d)`).
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        assert!(
            first.as_nanos() <= max.as_nanos(),
            "first delay above the maximum"
        );
        Backoff { first, max }
    }

    /// A fresh sequence of delays (start one per call being retried, or again after a
    /// success).
    pub fn delays(&self) -> Delays {
        Delays {
            inner: ExponentialBuilder::default()
                .with_min_delay(self.first)
                .with_max_delay(self.max)
                .with_factor(2.0)
                .with_jitter()
                .without_max_times()
                .build(),
            max: self.max,
        }
    }
}

/// The delays of one retried call, without end.
pub struct Delays {
    inner: backon::ExponentialBackoff,
    max: Duration,
}

impl Delays {
    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        // Without a limit on attempts or total time the sequence never ends; the maximum is
        // only a fallback.
        self.inner.next().unwrap_or(self.max)
    }

    /// Sleeps for the next delay.
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn delays_double_up_to_the_maximum_within_their_jitter() {
        let policy = Backoff::new(50 * MS, MS * 1000);
        let mut d = policy.delays();
        let mut base = 50 * MS;
        for _ in 0..12 {
            let delay = d.next_delay();
            assert!(
                delay >= base && delay < base * 2,
                "{delay:?} outside [{base:?}, 2x)"
            );
            base = (base * 2).min(1000 * MS);
        }
    }

    #[test]
    fn sequences_do_not_retry_in_step() {
        let policy = Backoff::new(100 * MS, 1000 * MS);
        let firsts: std::collections::HashSet<Duration> =
            (0..20).map(|_| policy.delays().next_delay()).collect();
        // Twenty equal first delays would mean no jitter (the chance otherwise is nil).
        assert!(firsts.len() > 1, "{firsts:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn wait_sleeps_for_the_delay() {
        let mut d = Backoff::new(100 * MS, 100 * MS).delays();
        let t = tokio::time::Instant::now();
        d.wait().await;
        let slept = t.elapsed();
        // The delay is in [100 ms, 200 ms); tokio's timer rounds up to its 1 ms tick, so a
        // delay of 199.6 ms sleeps 200 ms.
        assert!(slept >= 100 * MS && slept <= 200 * MS, "{slept:?}");
    }
}
