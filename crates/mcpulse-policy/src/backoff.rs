//! Exponential backoff with full jitter (see monitoring-conventions.md §5.4: AWS's "full
//! jitter", `sleep = random_between(0, min(cap, base * 2^attempt))`).
//!
//! Full jitter rather than a fixed curve so that many supervisors whose children fail together
//! (a shared dependency went down) do not restart them in lockstep. The randomness is an
//! argument (a `u64` draw), so every delay is reproducible in a test.

use std::time::Duration;

/// The curve: `initial`, doubling per attempt, capped at `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    /// Start 1 s, cap 60 s (the defaults).
    fn default() -> Backoff {
        Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// The most the `attempt`-th delay (0-based) may be: `min(max, initial * 2^attempt)`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.initial
            .checked_mul(factor)
            .unwrap_or(self.max)
            .min(self.max)
    }

    /// The `attempt`-th delay with full jitter: uniform (up to a millisecond) in
    /// `[0, ceiling(attempt)]`, chosen by `draw` (any `u64`, e.g. from a random source).
    pub fn delay(&self, attempt: u32, draw: u64) -> Duration {
        let ceiling_ms = u64::try_from(self.ceiling(attempt).as_millis()).unwrap_or(u64::MAX);
        let ms = draw % ceiling_ms.saturating_add(1).max(1);
        Duration::from_millis(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_doubles_from_initial_up_to_the_cap() {
        let b = Backoff::default();
        let secs: Vec<u64> = (0..9).map(|a| b.ceiling(a).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn every_draw_falls_within_zero_and_the_ceiling() {
        let b = Backoff::default();
        let draws = [
            0,
            1,
            999,
            1000,
            1001,
            59_999,
            60_000,
            60_001,
            u64::MAX / 3,
            u64::MAX,
        ];
        for attempt in 0..40 {
            let ceiling = b.ceiling(attempt);
            for draw in draws {
                let d = b.delay(attempt, draw);
                assert!(
                    d <= ceiling,
                    "attempt {attempt} draw {draw}: {d:?} > {ceiling:?}"
                );
            }
        }
        // Both ends are reachable: zero, and the ceiling itself.
        assert_eq!(b.delay(0, 0), Duration::ZERO);
        assert_eq!(b.delay(0, 1000), Duration::from_secs(1));
        assert_eq!(b.delay(10, 60_000), Duration::from_secs(60));
    }

    #[test]
    fn a_zero_initial_never_divides_by_zero() {
        let b = Backoff {
            initial: Duration::ZERO,
            max: Duration::ZERO,
        };
        assert_eq!(b.delay(3, u64::MAX), Duration::ZERO);
    }
}
