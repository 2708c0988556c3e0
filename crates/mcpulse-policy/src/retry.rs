//! Opt-in retries of failed tool calls: whether to retry, and after how long.
//!
//! **No retries by default**: a tool call may book a flight, and doing it twice is worse than
//! failing once. A retry needs all of:
//! - a [`RetryPolicy`] configured for the tool (the gateway has none unless asked);
//! - the tool annotated `readOnlyHint: true` or `idempotentHint: true` ([`ToolHints`]): the
//!   server says a second call has no further effect. The hint is the server's word, so the
//!   opt-in is the operator's: both are needed;
//! - a failure kind the policy retries (by default a timeout or a transport error: the call may
//!   not have run at all; a JSON-RPC error or an `isError` result is an answer, and the same
//!   arguments will most likely get it again);
//! - attempts left (`max_attempts` counts the first call) and, when the call has a deadline
//!   (the policy's own `deadline` for the whole call, or the request's), time for the backoff
//!   delay before it;
//! - the **retry budget** (Envoy's and linkerd's, tower's `TpsBudget`): over the last `ttl`,
//!   retries may be at most `min_per_sec × ttl` plus `ratio` of the requests. When a dependency
//!   is down every call fails; without a budget every call would be tried `max_attempts` times,
//!   and the retries would multiply the load on what is already failing. With it, retries add
//!   at most `ratio` (20 %) to the load, plus a small floor so a quiet tool can still retry.
//!
//! The delay is [`crate::backoff`]'s full jitter, with the randomness as an argument. The budget
//! counts in `BUDGET_SLOTS` slots of `ttl / BUDGET_SLOTS` (fixed memory, nothing allocated;
//! a slot leaves the window whole, so the window covers between 90 % and 100 % of `ttl`).
//! Time is milliseconds on the caller's monotonic clock.

use crate::backoff::Backoff;
use crate::breaker::{FailureKind, FailureSet};
use crate::window::{Invalid, millis, require};
use std::time::Duration;

/// The slots of the budget's sliding window.
pub const BUDGET_SLOTS: usize = 10;

/// The retry budget's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetPolicy {
    /// The window requests and retries are counted over.
    pub ttl: Duration,
    /// Retries allowed per second of `ttl` whatever the traffic.
    pub min_per_sec: u32,
    /// Retries allowed per request, 0 to 1 (0.2: at most one retry per five requests).
    pub ratio: f64,
}

impl Default for BudgetPolicy {
    /// tower's `TpsBudget::default()` and linkerd's: 10 s, 10 per second, 20 %.
    fn default() -> BudgetPolicy {
        BudgetPolicy {
            ttl: Duration::from_secs(10),
            min_per_sec: 10,
            ratio: 0.2,
        }
    }
}

/// A tool's retry settings (its presence is the opt-in).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first call included (at least 1: 1 means no retry).
    pub max_attempts: u32,
    pub backoff: Backoff,
    /// Which failures are retried.
    pub retry_on: FailureSet,
    /// The whole call, from its first attempt to its last answer, backoffs included: no retry
    /// is started whose backoff ends at or after it ([`RetryPolicy::call_deadline_ms`] gives it
    /// to [`RetryPolicy::decide`]), and the caller cuts each attempt's own timeout to it.
    /// `None`: at most `max_attempts` times the attempt's timeout, plus the backoffs.
    pub deadline: Option<Duration>,
}

impl Default for RetryPolicy {
    /// 3 attempts (resilience4j's `maxAttempts`), backoff 100 ms doubling up to 2 s with full
    /// jitter, on a timeout or a transport error.
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            backoff: Backoff {
                initial: Duration::from_millis(100),
                max: Duration::from_secs(2),
            },
            retry_on: FailureSet::of(&[FailureKind::Timeout, FailureKind::Transport]),
            deadline: None,
        }
    }
}

impl RetryPolicy {
    /// Whether every setting is in range (see [`Invalid`]).
    pub fn validate(&self) -> Result<(), Invalid> {
        require(self.max_attempts >= 1, "max_attempts", "must be at least 1")?;
        require(
            self.backoff.initial <= self.backoff.max,
            "backoff.initial",
            "must be at most backoff.max",
        )?;
        require(
            self.deadline.is_none_or(|d| !d.is_zero()),
            "deadline",
            "must be above 0",
        )
    }

    /// The deadline (ms on the caller's clock) of a call whose first attempt started at
    /// `started_ms`, when the policy sets one.
    pub fn call_deadline_ms(&self, started_ms: u64) -> Option<u64> {
        self.deadline.map(|d| started_ms.saturating_add(millis(d)))
    }
}

impl BudgetPolicy {
    /// Whether every setting is in range (see [`Invalid`]).
    pub fn validate(&self) -> Result<(), Invalid> {
        require(
            self.ttl >= Duration::from_secs(1),
            "budget.ttl",
            "must be at least 1s",
        )?;
        require(
            (0.0..=1.0).contains(&self.ratio),
            "budget.ratio",
            "must be 0 to 1",
        )
    }
}

/// What the server says of a tool, from its `annotations` in `tools/list`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolHints {
    pub read_only: bool,
    pub idempotent: bool,
}

impl ToolHints {
    /// May this tool be called twice with the same arguments?
    pub fn repeatable(self) -> bool {
        self.read_only || self.idempotent
    }
}

/// Why not retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The tool is neither read-only nor idempotent.
    NotRepeatable,
    /// The policy does not retry this kind of failure.
    NotRetried(FailureKind),
    /// `max_attempts` were made.
    Attempts { made: u32 },
    /// The backoff would end at or past the request's deadline.
    Deadline,
    /// The retry budget is spent.
    Budget,
}

impl Stop {
    /// The name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Stop::NotRepeatable => "not_repeatable",
            Stop::NotRetried(_) => "not_retried",
            Stop::Attempts { .. } => "attempts",
            Stop::Deadline => "deadline",
            Stop::Budget => "budget",
        }
    }
}

/// The decision after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Call again after `delay`; this will be attempt number `attempt` (2 for the first retry).
    Retry {
        delay: Duration,
        attempt: u32,
    },
    Stop(Stop),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct BudgetSlot {
    period: u64,
    requests: u64,
    retries: u64,
}

/// The retry budget: requests and retries over a sliding `ttl` (one per gateway, or per tool).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryBudget {
    policy: BudgetPolicy,
    width_ms: u64,
    slots: [BudgetSlot; BUDGET_SLOTS],
    latest_ms: u64,
}

impl RetryBudget {
    pub fn new(policy: BudgetPolicy) -> RetryBudget {
        let ttl_ms = millis(policy.ttl);
        RetryBudget {
            policy,
            width_ms: (ttl_ms / BUDGET_SLOTS as u64).max(1),
            slots: [BudgetSlot::default(); BUDGET_SLOTS],
            latest_ms: 0,
        }
    }

    /// An original request (not a retry) was made at `now_ms`: it earns `ratio` of a retry.
    pub fn deposit(&mut self, now_ms: u64) {
        let slot = self.slot(now_ms);
        slot.requests = slot.requests.saturating_add(1);
    }

    /// Takes one retry from the budget at `now_ms`, if there is one left.
    pub fn withdraw(&mut self, now_ms: u64) -> bool {
        if self.remaining(now_ms) < 1 {
            return false;
        }
        let slot = self.slot(now_ms);
        slot.retries = slot.retries.saturating_add(1);
        true
    }

    /// Whole retries left at `now_ms`.
    pub fn remaining(&self, now_ms: u64) -> u64 {
        let (requests, retries) = self.totals(now_ms);
        let floor = u64::from(self.policy.min_per_sec).saturating_mul(self.policy.ttl.as_secs());
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let earned = (requests as f64 * self.policy.ratio.clamp(0.0, 1.0)).floor() as u64;
        floor.saturating_add(earned).saturating_sub(retries)
    }

    fn current(&self, now_ms: u64) -> u64 {
        now_ms.max(self.latest_ms) / self.width_ms
    }

    fn totals(&self, now_ms: u64) -> (u64, u64) {
        let current = self.current(now_ms);
        self.slots
            .iter()
            .filter(|s| s.period <= current && current - s.period < BUDGET_SLOTS as u64)
            .fold((0u64, 0u64), |(req, ret), s| {
                (
                    req.saturating_add(s.requests),
                    ret.saturating_add(s.retries),
                )
            })
    }

    fn slot(&mut self, now_ms: u64) -> &mut BudgetSlot {
        self.latest_ms = self.latest_ms.max(now_ms);
        let period = self.latest_ms / self.width_ms;
        // Below BUDGET_SLOTS: a remainder of it.
        let i = usize::try_from(period % BUDGET_SLOTS as u64).unwrap_or(0);
        let s = &mut self.slots[i];
        if s.period != period {
            *s = BudgetSlot {
                period,
                requests: 0,
                retries: 0,
            };
        }
        s
    }
}

impl Default for RetryBudget {
    fn default() -> RetryBudget {
        RetryBudget::new(BudgetPolicy::default())
    }
}

impl RetryPolicy {
    /// After attempt number `made` (1 for the first call) failed with `failure` at `now_ms`:
    /// retry or stop. `deadline_ms` is the call's deadline, if it has one (the policy's own,
    /// [`RetryPolicy::call_deadline_ms`], or the request's, whichever is first); `draw` is a
    /// random `u64` for the jitter. Takes a retry from `budget` only when the answer is
    /// [`RetryDecision::Retry`].
    #[allow(clippy::too_many_arguments)]
    pub fn decide(
        &self,
        budget: &mut RetryBudget,
        hints: ToolHints,
        made: u32,
        failure: FailureKind,
        now_ms: u64,
        deadline_ms: Option<u64>,
        draw: u64,
    ) -> RetryDecision {
        if !hints.repeatable() {
            return RetryDecision::Stop(Stop::NotRepeatable);
        }
        if !self.retry_on.contains(failure) {
            return RetryDecision::Stop(Stop::NotRetried(failure));
        }
        if made >= self.max_attempts.max(1) {
            return RetryDecision::Stop(Stop::Attempts { made });
        }
        let delay = self.backoff.delay(made.saturating_sub(1), draw);
        let delay_ms = millis(delay);
        if deadline_ms.is_some_and(|d| now_ms.saturating_add(delay_ms) >= d) {
            return RetryDecision::Stop(Stop::Deadline);
        }
        if !budget.withdraw(now_ms) {
            return RetryDecision::Stop(Stop::Budget);
        }
        RetryDecision::Retry {
            delay,
            attempt: made.saturating_add(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READ_ONLY: ToolHints = ToolHints {
        read_only: true,
        idempotent: false,
    };

    /// A draw that gives the ceiling of the first two delays: 20 300 % 101 = 100 and
    /// 20 300 % 201 = 200.
    const TOP: u64 = 20_300;

    fn decide(p: &RetryPolicy, b: &mut RetryBudget, made: u32, now: u64) -> RetryDecision {
        p.decide(b, READ_ONLY, made, FailureKind::Timeout, now, None, TOP)
    }

    #[test]
    fn only_repeatable_tools_and_retried_failures_are_retried() {
        let p = RetryPolicy::default();
        let mut b = RetryBudget::default();
        let t = FailureKind::Timeout;
        assert_eq!(
            p.decide(&mut b, ToolHints::default(), 1, t, 0, None, 0),
            RetryDecision::Stop(Stop::NotRepeatable)
        );
        let idempotent = ToolHints {
            read_only: false,
            idempotent: true,
        };
        assert!(matches!(
            p.decide(&mut b, idempotent, 1, t, 0, None, 0),
            RetryDecision::Retry { attempt: 2, .. }
        ));
        for kind in [FailureKind::ToolError, FailureKind::JsonRpcError] {
            assert_eq!(
                p.decide(&mut b, READ_ONLY, 1, kind, 0, None, 0),
                RetryDecision::Stop(Stop::NotRetried(kind))
            );
        }
    }

    #[test]
    fn attempts_are_counted_with_the_first_call_and_delays_back_off() {
        let p = RetryPolicy::default();
        let mut b = RetryBudget::default();
        // With the draw TOP each delay is its ceiling: 100 ms, then 200 ms.
        assert_eq!(
            decide(&p, &mut b, 1, 0),
            RetryDecision::Retry {
                delay: Duration::from_millis(100),
                attempt: 2
            }
        );
        assert_eq!(
            decide(&p, &mut b, 2, 0),
            RetryDecision::Retry {
                delay: Duration::from_millis(200),
                attempt: 3
            }
        );
        assert_eq!(
            decide(&p, &mut b, 3, 0),
            RetryDecision::Stop(Stop::Attempts { made: 3 })
        );
        // Jitter: any delay within the ceiling.
        for draw in [0, 1, 57, 99, 100, 101, u64::MAX / 7] {
            match p.decide(&mut b, READ_ONLY, 2, FailureKind::Transport, 0, None, draw) {
                RetryDecision::Retry { delay, .. } => {
                    assert!(delay <= Duration::from_millis(200))
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn no_retry_whose_backoff_would_outlive_the_deadline() {
        let p = RetryPolicy::default();
        let mut b = RetryBudget::default();
        let retry = |b: &mut RetryBudget, deadline| {
            p.decide(
                b,
                READ_ONLY,
                1,
                FailureKind::Timeout,
                1_000,
                Some(deadline),
                TOP,
            )
        };
        assert_eq!(retry(&mut b, 1_100), RetryDecision::Stop(Stop::Deadline));
        assert!(matches!(retry(&mut b, 1_101), RetryDecision::Retry { .. }));
        // A refusal took nothing from the budget; the retry took one.
        assert_eq!(b.remaining(1_000), 99);
    }

    #[test]
    fn the_policys_own_deadline_counts_from_the_calls_start() {
        let p = RetryPolicy {
            deadline: Some(Duration::from_millis(1_500)),
            ..RetryPolicy::default()
        };
        assert_eq!(RetryPolicy::default().call_deadline_ms(400), None);
        assert_eq!(p.call_deadline_ms(400), Some(1_900));
        assert_eq!(p.call_deadline_ms(u64::MAX), Some(u64::MAX));
        let mut b = RetryBudget::default();
        // Started at 400, failed at 1 700: a backoff of up to 200 ms would end at 1 900.
        let at = |b: &mut RetryBudget, now, draw| {
            p.decide(
                b,
                READ_ONLY,
                2,
                FailureKind::Timeout,
                now,
                p.call_deadline_ms(400),
                draw,
            )
        };
        assert_eq!(at(&mut b, 1_700, TOP), RetryDecision::Stop(Stop::Deadline));
        assert_eq!(
            at(&mut b, 1_700, 0),
            RetryDecision::Retry {
                delay: Duration::ZERO,
                attempt: 3
            }
        );
        assert_eq!(at(&mut b, 1_900, 0), RetryDecision::Stop(Stop::Deadline));
        let zero = RetryPolicy {
            deadline: Some(Duration::ZERO),
            ..RetryPolicy::default()
        };
        assert_eq!(zero.validate().map_err(|e| e.setting), Err("deadline"));
    }

    #[test]
    fn the_budget_runs_out_and_refills_as_its_window_slides() {
        let p = RetryPolicy::default();
        // A floor of 1 a second over 10 s: 10 retries with no traffic; 20 % of requests more.
        let mut b = RetryBudget::new(BudgetPolicy {
            ttl: Duration::from_secs(10),
            min_per_sec: 1,
            ratio: 0.2,
        });
        for _ in 0..10 {
            assert!(matches!(
                decide(&p, &mut b, 1, 0),
                RetryDecision::Retry { .. }
            ));
        }
        assert_eq!(decide(&p, &mut b, 1, 0), RetryDecision::Stop(Stop::Budget));
        // 50 requests earn 10 more retries, not 11.
        for _ in 0..50 {
            b.deposit(500);
        }
        assert_eq!(b.remaining(500), 10);
        for _ in 0..10 {
            assert!(b.withdraw(900));
        }
        assert!(!b.withdraw(900));
        // At 10 s the slot of 0–1 s has left the window: its 20 retries and 50 requests with
        // it, so the floor is back.
        assert_eq!(b.remaining(9_999), 0);
        assert_eq!(b.remaining(10_000), 10);
        assert!(b.withdraw(10_000));
    }

    #[test]
    fn the_defaults_are_valid_and_odd_settings_are_not() {
        assert_eq!(RetryPolicy::default().validate(), Ok(()));
        assert_eq!(BudgetPolicy::default().validate(), Ok(()));
        let e = RetryPolicy {
            max_attempts: 0,
            ..RetryPolicy::default()
        }
        .validate();
        assert_eq!(e.map_err(|e| e.setting), Err("max_attempts"));
        let e = BudgetPolicy {
            ratio: 1.5,
            ..BudgetPolicy::default()
        }
        .validate();
        assert_eq!(e.map_err(|e| e.setting), Err("budget.ratio"));
        let e = BudgetPolicy {
            ttl: Duration::from_millis(999),
            ..BudgetPolicy::default()
        }
        .validate();
        assert_eq!(e.map_err(|e| e.setting), Err("budget.ttl"));
    }

    #[test]
    fn a_zero_budget_never_retries_and_odd_settings_do_not_panic() {
        let mut b = RetryBudget::new(BudgetPolicy {
            ttl: Duration::ZERO,
            min_per_sec: 0,
            ratio: f64::NAN,
        });
        b.deposit(0);
        assert!(!b.withdraw(0));
        let p = RetryPolicy {
            max_attempts: 0,
            ..RetryPolicy::default()
        };
        assert_eq!(
            decide(&p, &mut RetryBudget::default(), 1, 0),
            RetryDecision::Stop(Stop::Attempts { made: 1 })
        );
    }
}
