//! A token bucket for bytes per second: background work (compaction) and catch-up reads take
//! from one before they move data, so that they cannot take all of the machine from producers.

use std::time::Duration;

use tokio::time::Instant;

pub struct Budget {
    bytes_per_sec: f64,
    /// Tokens (may go negative: a large take runs at once and the debt is slept off) and the
    /// time of the last refill.
    state: tokio::sync::Mutex<(f64, Instant)>,
}

impl Budget {
    /// `bytes_per_sec` 0 means unlimited.
    pub fn new(bytes_per_sec: u64) -> Budget {
        Budget {
            bytes_per_sec: bytes_per_sec as f64,
            state: tokio::sync::Mutex::new((bytes_per_sec as f64, Instant::now())),
        }
    }

    /// Takes `n` bytes, waiting as long as the budget says.
    pub async fn take(&self, n: u64) {
        if self.bytes_per_sec <= 0.0 {
            return;
        }
        let wait = {
            let mut st = self.state.lock().await;
            let now = Instant::now();
            // At most one second of burst.
            st.0 = (st.0 + now.duration_since(st.1).as_secs_f64() * self.bytes_per_sec)
                .min(self.bytes_per_sec);
            st.1 = now;
            st.0 -= n as f64;
            if st.0 < 0.0 {
                Duration::from_secs_f64(-st.0 / self.bytes_per_sec)
            } else {
                Duration::ZERO
            }
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn limits_the_rate() {
        let b = Budget::new(1000);
        let t = tokio::time::Instant::now();
        for _ in 0..5 {
            b.take(1000).await;
        }
        // One second of burst, then 4000 bytes at 1000/s.
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(3900) && took <= Duration::from_millis(4200),
            "{took:?}"
        );
        let unlimited = Budget::new(0);
        let t = tokio::time::Instant::now();
        unlimited.take(u64::MAX).await;
        assert_eq!(t.elapsed(), Duration::ZERO);
    }
}
