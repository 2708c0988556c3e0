//! Heartbeat verdicts: is a child that did not answer its heartbeat hung, or only busy?
//!
//! A single-threaded server that blocks on a slow tool call cannot answer a `ping` until the
//! call returns. Restarting it would kill the call the client is waiting for, so a heartbeat
//! missed while a client request has been in flight for no longer than `busy_grace` is
//! [`Beat::Busy`]: reported, but it **neither counts toward a restart nor resets the count**.
//! Neither, because a busy child has shown nothing either way: the failures before it still
//! stand, and a child that is hung *and* has a young request in flight is caught once the
//! request outlives the grace. Past the grace the child is treated as hung, request or not.

use std::time::Duration;

/// The thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatPolicy {
    /// Restart after this many failed heartbeats in a row (at least 1).
    pub failures: u32,
    /// A missed heartbeat is `Busy` while the oldest client request in flight has run for no
    /// longer than this.
    pub busy_grace: Duration,
}

impl Default for HeartbeatPolicy {
    /// Three failures, 60 s grace (the CLI's defaults).
    fn default() -> HeartbeatPolicy {
        HeartbeatPolicy {
            failures: 3,
            busy_grace: Duration::from_secs(60),
        }
    }
}

/// What happened to one heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// A reply (any reply, even a JSON-RPC error: the event loop is alive) within the timeout.
    Answered,
    /// No reply within the timeout. `oldest_request_age` is how long the oldest client request
    /// still in flight has been running (at the time of the verdict), if there is one.
    Missed {
        oldest_request_age: Option<Duration>,
    },
}

/// The verdict on one heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    Ok,
    Busy,
    /// The `consecutive`-th failure in a row.
    Failed {
        consecutive: u32,
    },
}

/// The count of failures in a row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Heartbeat {
    consecutive: u32,
}

impl Heartbeat {
    /// Judges one heartbeat; returns the verdict and whether to restart the child now. After a
    /// restart verdict the count starts again from zero (the next child is a new one).
    pub fn observe(&mut self, policy: &HeartbeatPolicy, heard: Heard) -> (Beat, bool) {
        match heard {
            Heard::Answered => {
                self.consecutive = 0;
                (Beat::Ok, false)
            }
            Heard::Missed {
                oldest_request_age: Some(age),
            } if age <= policy.busy_grace => (Beat::Busy, false),
            Heard::Missed { .. } => {
                self.consecutive = self.consecutive.saturating_add(1);
                let beat = Beat::Failed {
                    consecutive: self.consecutive,
                };
                let restart = self.consecutive >= policy.failures.max(1);
                if restart {
                    self.consecutive = 0;
                }
                (beat, restart)
            }
        }
    }

    /// Failures in a row so far.
    pub fn consecutive(&self) -> u32 {
        self.consecutive
    }

    /// Forgets the count (a new child was started).
    pub fn reset(&mut self) {
        self.consecutive = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MISSED: Heard = Heard::Missed {
        oldest_request_age: None,
    };

    fn missed_while(age_ms: u64) -> Heard {
        Heard::Missed {
            oldest_request_age: Some(Duration::from_millis(age_ms)),
        }
    }

    #[test]
    fn restarts_after_n_failures_in_a_row_and_not_before() {
        let p = HeartbeatPolicy::default();
        let mut h = Heartbeat::default();
        assert_eq!(
            h.observe(&p, MISSED),
            (Beat::Failed { consecutive: 1 }, false)
        );
        assert_eq!(
            h.observe(&p, MISSED),
            (Beat::Failed { consecutive: 2 }, false)
        );
        assert_eq!(
            h.observe(&p, MISSED),
            (Beat::Failed { consecutive: 3 }, true)
        );
        // A new child starts from zero.
        assert_eq!(h.consecutive(), 0);
        assert_eq!(
            h.observe(&p, MISSED),
            (Beat::Failed { consecutive: 1 }, false)
        );
    }

    #[test]
    fn an_answer_resets_the_count() {
        let p = HeartbeatPolicy::default();
        let mut h = Heartbeat::default();
        h.observe(&p, MISSED);
        h.observe(&p, MISSED);
        assert_eq!(h.observe(&p, Heard::Answered), (Beat::Ok, false));
        assert_eq!(
            h.observe(&p, MISSED),
            (Beat::Failed { consecutive: 1 }, false)
        );
    }

    #[test]
    fn busy_within_the_grace_neither_counts_nor_resets() {
        let p = HeartbeatPolicy {
            failures: 2,
            busy_grace: Duration::from_secs(10),
        };
        let mut h = Heartbeat::default();
        h.observe(&p, MISSED);
        for _ in 0..100 {
            assert_eq!(h.observe(&p, missed_while(10_000)), (Beat::Busy, false));
        }
        assert_eq!(h.consecutive(), 1, "busy did not reset the earlier failure");
        // Just past the grace, the same miss is a failure, and the second one restarts.
        assert_eq!(
            h.observe(&p, missed_while(10_001)),
            (Beat::Failed { consecutive: 2 }, true)
        );
    }

    #[test]
    fn at_least_one_failure_is_needed() {
        let p = HeartbeatPolicy {
            failures: 0,
            busy_grace: Duration::ZERO,
        };
        let mut h = Heartbeat::default();
        assert_eq!(h.observe(&p, Heard::Answered), (Beat::Ok, false));
        assert_eq!(
            h.observe(&p, missed_while(1)),
            (Beat::Failed { consecutive: 1 }, true)
        );
    }
}
