//! Restart decisions: how long to wait before the next start (exponential backoff with full
//! jitter, [`crate::backoff`]), when the backoff starts over, and when to give up.
//!
//! - The backoff resets only after a child has stayed up `reset_after` (supervisord's
//!   `startsecs`, K8s's 10-minute reset): a child that crashes a minute into every session
//!   still backs off.
//! - The restart budget (systemd's StartLimit, OTP's intensity/period): at most `max_restarts`
//!   restarts within a sliding `window`. The one past it is refused: [`Decision::GiveUp`]
//!   (FATAL), with a reason to tell the client. The supervisor then never restarts again, so
//!   a crash loop cannot spin.
//!
//! Time is milliseconds on a monotonic clock the caller owns; randomness is a `u64` draw.

use crate::backoff::Backoff;
use std::collections::VecDeque;
use std::time::Duration;

/// The settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    pub backoff: Backoff,
    /// A child up this long resets the backoff to its first step.
    pub reset_after: Duration,
    /// At most this many restarts within `window`.
    pub max_restarts: u32,
    pub window: Duration,
}

impl Default for RestartPolicy {
    /// 1 s → 60 s backoff, reset after 60 s up, 5 restarts in 60 s (the CLI's defaults).
    fn default() -> RestartPolicy {
        RestartPolicy {
            backoff: Backoff::default(),
            reset_after: Duration::from_secs(60),
            max_restarts: 5,
            window: Duration::from_secs(60),
        }
    }
}

/// What to do about a child that went down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Start a new child after this delay.
    Restart { delay: Duration, attempt: u32 },
    /// The budget is spent: stop restarting, for this reason.
    GiveUp { reason: String },
}

/// The restart history.
#[derive(Debug, Clone, Default)]
pub struct Restarts {
    /// The next backoff step (0-based).
    attempt: u32,
    /// When the restarts within the window happened (ms), oldest first; at most
    /// `max_restarts` are kept.
    recent: VecDeque<u64>,
    /// When the current child started (ms).
    started_at: Option<u64>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Restarts {
    /// A child started at `now_ms`.
    pub fn started(&mut self, now_ms: u64) {
        self.started_at = Some(now_ms);
    }

    /// The child went down at `now_ms`: restart it (after a delay chosen with `draw`), or give
    /// up.
    pub fn went_down(&mut self, policy: &RestartPolicy, now_ms: u64, draw: u64) -> Decision {
        if let Some(started) = self.started_at.take()
            && now_ms.saturating_sub(started) >= ms(policy.reset_after)
        {
            self.attempt = 0;
        }
        let window = ms(policy.window);
        while self
            .recent
            .front()
            .is_some_and(|at| now_ms.saturating_sub(*at) >= window)
        {
            self.recent.pop_front();
        }
        let budget = usize::try_from(policy.max_restarts).unwrap_or(usize::MAX);
        if self.recent.len() >= budget {
            return Decision::GiveUp {
                reason: format!(
                    "the server went down {} times within {}s; not restarting it again",
                    self.recent.len().saturating_add(1),
                    policy.window.as_secs_f64()
                ),
            };
        }
        self.recent.push_back(now_ms);
        let attempt = self.attempt;
        self.attempt = self.attempt.saturating_add(1);
        Decision::Restart {
            delay: policy.backoff.delay(attempt, draw),
            attempt,
        }
    }

    /// Restarts counted within the window (as of the last decision).
    pub fn in_window(&self) -> usize {
        self.recent.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restart_delay(d: Decision) -> Duration {
        match d {
            Decision::Restart { delay, .. } => delay,
            Decision::GiveUp { reason } => panic!("gave up: {reason}"),
        }
    }

    #[test]
    fn the_budget_allows_five_restarts_in_the_window_then_gives_up() {
        let p = RestartPolicy::default();
        let mut r = Restarts::default();
        for i in 0..5u64 {
            r.started(i * 1000);
            restart_delay(r.went_down(&p, i * 1000 + 10, 0));
        }
        r.started(5000);
        match r.went_down(&p, 5010, 0) {
            Decision::GiveUp { reason } => {
                assert!(reason.contains("6 times within 60s"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_window_slides() {
        let p = RestartPolicy::default();
        let mut r = Restarts::default();
        for i in 0..5u64 {
            restart_delay(r.went_down(&p, i * 10_000, 0)); // 0, 10, 20, 30, 40 s
        }
        // At 60 s the first (at 0 s) has left the window: one more is allowed...
        restart_delay(r.went_down(&p, 60_000, 0));
        // ...but not a second one at 65 s (10..60 s are still in it).
        assert!(matches!(
            r.went_down(&p, 65_000, 0),
            Decision::GiveUp { .. }
        ));
    }

    #[test]
    fn backoff_grows_and_every_delay_is_within_its_ceiling() {
        let p = RestartPolicy {
            max_restarts: 100,
            ..RestartPolicy::default()
        };
        let mut r = Restarts::default();
        let mut now = 0;
        for attempt in 0..10 {
            r.started(now);
            now += 100; // crashes at once: no reset
            let at_max = restart_delay(r.went_down(&p, now, u64::MAX));
            assert!(at_max <= p.backoff.ceiling(attempt));
            now += 100_000; // far apart, so the budget is not the limit
        }
        // Full jitter: with the ceiling's own draw the delay is the ceiling, 60 s by now.
        r.started(now);
        assert_eq!(
            restart_delay(r.went_down(&p, now + 1, 60_000)),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn the_backoff_resets_only_after_the_child_stayed_up() {
        let p = RestartPolicy {
            max_restarts: 100,
            ..RestartPolicy::default()
        };
        let mut r = Restarts::default();
        // Three quick crashes: attempts 0, 1, 2.
        for i in 0..3u64 {
            r.started(i * 100_000);
            assert_eq!(
                r.went_down(&p, i * 100_000 + 59_999, 7),
                Decision::Restart {
                    delay: p.backoff.delay(u32::try_from(i).unwrap_or(0), 7),
                    attempt: u32::try_from(i).unwrap_or(0),
                }
            );
        }
        // Up 59.999 s is not enough: attempt 3.
        r.started(1_000_000);
        assert!(matches!(
            r.went_down(&p, 1_059_999, 0),
            Decision::Restart { attempt: 3, .. }
        ));
        // Up 60 s: back to the first step.
        r.started(2_000_000);
        assert!(matches!(
            r.went_down(&p, 2_060_000, 0),
            Decision::Restart { attempt: 0, .. }
        ));
    }
}
