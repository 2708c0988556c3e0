//! A circuit breaker, with resilience4j's semantics: closed → open → half-open.
//!
//! - **Closed**: every call goes through and its outcome goes into a sliding window
//!   ([`crate::window`]). Once the window holds at least `minimum_calls`, the breaker opens when
//!   the failure rate reaches `failure_rate` or the slow-call rate reaches `slow_call_rate` (both
//!   "at or above", as resilience4j judges).
//! - **Open**: calls are rejected at once, with the time the breaker will let a trial through
//!   (`wait_in_open` after it opened). The move to half-open happens on the first
//!   [`Breaker::try_acquire`] (or [`Breaker::poll`]) at or after that time: no timer is needed.
//! - **Half-open**: at most `half_open_trials` calls go through; the rest are rejected. **Every**
//!   trial must succeed for the breaker to close; the first that fails (or is slow, when slow
//!   calls are judged) opens it again for another `wait_in_open`. All-must-succeed rather than
//!   resilience4j's rate over the trials: a dependency that fails one trial in three is not
//!   recovered, and a rule with no threshold is one less setting to get wrong.
//!
//! What counts as a failure is a set of [`FailureKind`]s (by default all four: JSON-RPC error,
//! `isError` result, timeout, transport error). An outcome whose kind is not in the set counts
//! as a **success**, as in resilience4j: the dependency answered, and, say, an `isError` result
//! for a bad argument is the caller's fault, not the dependency's.
//!
//! Every call holds a [`Permit`] from the state it was admitted in. A permit from an earlier
//! state is ignored when its outcome arrives: a slow call admitted while closed that fails after
//! the breaker half-opened is not a failed trial, and a success from before the breaker opened
//! cannot close it.
//!
//! Every permit must come back, through `record` or `cancel`: a trial permit dropped on the floor
//! keeps its half-open slot until the next transition. The gateway guarantees an outcome for
//! every call it lets through (its timeout turns a hang into [`FailureKind::Timeout`]). A caller
//! with no timeout (the kit's tools may have none) is bounded too, when slow calls are judged
//! (`slow_call_rate`, on by default): once every trial slot has been taken for
//! `slow_call_duration` with a trial still unjudged, the breaker opens again
//! ([`Reason::TrialsHung`]), as such a trial will count as slow. With slow calls off, a trial is
//! never judged by its time: give the calls a timeout.
//!
//! With a count window, `minimum_calls` is cut to the window's size ([`BreakerPolicy::minimum`]):
//! a window of 5 calls with the default minimum of 10 would otherwise never judge a rate.
//!
//! The window is cleared on every transition, so each state judges only its own calls.
//! Transitions are returned as [`Transition`] values with their reason and figures, for the
//! caller to log and count. Nothing here allocates after [`Breaker::new`].

use crate::window::{Call, Invalid, Stats, Window, WindowSpec, millis, require, require_rate};
use std::time::Duration;

/// Why a call failed, as the gateway sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The upstream answered with a JSON-RPC error.
    JsonRpcError,
    /// A `tools/call` result with `isError: true`.
    ToolError,
    /// No answer within the timeout.
    Timeout,
    /// The transport failed: the connection or the child went away, an HTTP error status.
    Transport,
}

impl FailureKind {
    pub const ALL: [FailureKind; 4] = [
        FailureKind::JsonRpcError,
        FailureKind::ToolError,
        FailureKind::Timeout,
        FailureKind::Transport,
    ];

    /// The name in configs, logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::JsonRpcError => "jsonrpc_error",
            FailureKind::ToolError => "tool_error",
            FailureKind::Timeout => "timeout",
            FailureKind::Transport => "transport",
        }
    }

    /// The kind named `name` (as [`FailureKind::as_str`] spells it).
    pub fn parse(name: &str) -> Option<FailureKind> {
        FailureKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    fn bit(self) -> u8 {
        match self {
            FailureKind::JsonRpcError => 1,
            FailureKind::ToolError => 2,
            FailureKind::Timeout => 4,
            FailureKind::Transport => 8,
        }
    }
}

/// A set of failure kinds (which ones count for a breaker, which ones a retry may follow).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FailureSet(u8);

impl FailureSet {
    pub const NONE: FailureSet = FailureSet(0);
    pub const ALL: FailureSet = FailureSet(15);

    pub fn of(kinds: &[FailureKind]) -> FailureSet {
        FailureSet(kinds.iter().fold(0, |bits, k| bits | k.bit()))
    }

    pub fn contains(self, kind: FailureKind) -> bool {
        self.0 & kind.bit() != 0
    }

    pub fn with(self, kind: FailureKind) -> FailureSet {
        FailureSet(self.0 | kind.bit())
    }
}

impl Default for FailureSet {
    /// Every kind.
    fn default() -> FailureSet {
        FailureSet::ALL
    }
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure(FailureKind),
}

/// The settings of one breaker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerPolicy {
    pub window: WindowSpec,
    /// Neither rate is judged before the window holds this many calls (at least 1).
    pub minimum_calls: u32,
    /// Open when failures / calls reaches this (0 to 1).
    pub failure_rate: f64,
    /// Open when slow calls / calls reaches this (0 to 1); `None`: slow calls are not judged.
    pub slow_call_rate: Option<f64>,
    /// A call that took at least this long is slow.
    pub slow_call_duration: Duration,
    /// How long to stay open before trying again.
    pub wait_in_open: Duration,
    /// How many trial calls half-open lets through (at least 1); all must succeed.
    pub half_open_trials: u32,
    /// Which failures count.
    pub counted: FailureSet,
}

impl Default for BreakerPolicy {
    /// resilience4j's defaults, except two that suit MCP tools, which see far fewer calls than
    /// an HTTP service: `minimum_calls` 10 (resilience4j: 100, which an agent session may never
    /// reach) and `wait_in_open` 30 s (tower-resilience's; resilience4j: 60 s). So: the last
    /// 100 calls, failure rate 50 %, slow-call rate 100 % at 60 s, 10 trials, every failure
    /// kind counted.
    fn default() -> BreakerPolicy {
        BreakerPolicy {
            window: WindowSpec::default(),
            minimum_calls: 10,
            failure_rate: 0.5,
            slow_call_rate: Some(1.0),
            slow_call_duration: Duration::from_secs(60),
            wait_in_open: Duration::from_secs(30),
            half_open_trials: 10,
            counted: FailureSet::ALL,
        }
    }
}

impl BreakerPolicy {
    /// The calls the window must hold before a rate is judged: `minimum_calls`, but no more
    /// than a count window holds (as resilience4j does), or the breaker could never open.
    pub fn minimum(&self) -> u32 {
        let minimum = self.minimum_calls.max(1);
        match self.window {
            WindowSpec::Count { calls } => minimum.min(calls.clamp(1, crate::window::MAX_COUNT)),
            WindowSpec::Time { .. } => minimum,
        }
    }

    /// Whether every setting is in range (see [`Invalid`]).
    pub fn validate(&self) -> Result<(), Invalid> {
        self.window.validate()?;
        require(
            self.minimum_calls >= 1,
            "minimum_calls",
            "must be at least 1",
        )?;
        require_rate(self.failure_rate, "failure_rate")?;
        if let Some(rate) = self.slow_call_rate {
            require_rate(rate, "slow_call_rate")?;
        }
        require(
            self.half_open_trials >= 1,
            "half_open_trials",
            "must be at least 1",
        )
    }
}

/// The three states, for logs, metrics (`state` label) and `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// Why the breaker changed state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reason {
    /// The failure rate over the window reached the threshold.
    FailureRate {
        rate: f64,
        threshold: f64,
        calls: u64,
    },
    /// The slow-call rate over the window reached the threshold.
    SlowCallRate {
        rate: f64,
        threshold: f64,
        calls: u64,
    },
    /// The wait in open is over: trials may go through.
    WaitOver,
    /// Every trial succeeded.
    TrialsSucceeded { trials: u32 },
    /// A trial failed (`None`: it was slow).
    TrialFailed { failure: Option<FailureKind> },
    /// Every trial slot has been taken for `slow_call_duration` with a trial still unjudged:
    /// a trial that hangs (a caller with no timeout of its own) would otherwise hold the
    /// breaker half-open, refusing everything, for ever.
    TrialsHung { after_ms: u64 },
}

/// One change of state, to log and count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transition {
    pub from: BreakerState,
    pub to: BreakerState,
    pub at_ms: u64,
    pub reason: Reason,
}

/// Leave to make one call; hand it back with its outcome ([`Breaker::record`]) or without one
/// ([`Breaker::cancel`]).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a permit must go back to the breaker, through record or cancel"]
pub struct Permit {
    /// The state (by its number) the call was admitted in.
    generation: u64,
}

/// The answer to [`Breaker::try_acquire`].
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    Permitted(Permit),
    /// Fail fast. `retry_at_ms`: when the breaker will let a trial through (open), or `None`
    /// when it is half-open and every trial is in flight (it will know soon).
    Rejected {
        state: BreakerState,
        retry_at_ms: Option<u64>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed,
    Open {
        until_ms: u64,
    },
    HalfOpen {
        admitted: u32,
        succeeded: u32,
        /// Since when every trial slot is taken (`None`: one is free).
        full_since_ms: Option<u64>,
    },
}

/// One breaker's state.
#[derive(Debug, Clone)]
pub struct Breaker {
    policy: BreakerPolicy,
    state: State,
    /// Counts transitions: permits from another generation are stale.
    generation: u64,
    window: Window,
    /// Calls rejected so far (for metrics: `not_permitted_calls`).
    rejected: u64,
}

impl Breaker {
    pub fn new(policy: BreakerPolicy) -> Breaker {
        Breaker {
            window: Window::new(policy.window),
            policy,
            state: State::Closed,
            generation: 0,
            rejected: 0,
        }
    }

    pub fn policy(&self) -> &BreakerPolicy {
        &self.policy
    }

    /// The state as of the last call into the breaker (an open breaker whose wait is over is
    /// still open until [`Breaker::poll`] or [`Breaker::try_acquire`] sees the time).
    pub fn state(&self) -> BreakerState {
        match self.state {
            State::Closed => BreakerState::Closed,
            State::Open { .. } => BreakerState::Open,
            State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// When an open breaker will let a trial through.
    pub fn open_until(&self) -> Option<u64> {
        match self.state {
            State::Open { until_ms } => Some(until_ms),
            _ => None,
        }
    }

    /// The counts over the current state's window (for metrics and `/readyz`).
    pub fn stats(&self, now_ms: u64) -> Stats {
        self.window.stats(now_ms)
    }

    /// Calls rejected since the breaker was made.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// Moves an open breaker whose wait is over to half-open. `try_acquire` does this itself;
    /// call it from a health check so `/readyz` does not show a breaker open for ever when no
    /// call comes.
    ///
    /// Also opens a half-open breaker again whose trial slots have all been taken for
    /// `slow_call_duration` with a trial still unjudged ([`Reason::TrialsHung`]), when slow
    /// calls are judged: such a trial will count as slow, or it hangs.
    pub fn poll(&mut self, now_ms: u64) -> Option<Transition> {
        match self.state {
            State::Open { until_ms } if now_ms >= until_ms => Some(self.go(
                now_ms,
                State::HalfOpen {
                    admitted: 0,
                    succeeded: 0,
                    full_since_ms: None,
                },
                Reason::WaitOver,
            )),
            State::HalfOpen {
                full_since_ms: Some(since),
                ..
            } if self.policy.slow_call_rate.is_some()
                && now_ms.saturating_sub(since) >= millis(self.policy.slow_call_duration) =>
            {
                let after_ms = now_ms.saturating_sub(since);
                Some(self.open(now_ms, Reason::TrialsHung { after_ms }))
            }
            _ => None,
        }
    }

    /// May a call go through at `now_ms`? Also returns the transition to half-open when this
    /// call is the first after the wait.
    pub fn try_acquire(&mut self, now_ms: u64) -> (Admission, Option<Transition>) {
        let transition = self.poll(now_ms);
        let admission = match &mut self.state {
            State::Closed => Admission::Permitted(Permit {
                generation: self.generation,
            }),
            State::Open { until_ms } => Admission::Rejected {
                state: BreakerState::Open,
                retry_at_ms: Some(*until_ms),
            },
            State::HalfOpen {
                admitted,
                full_since_ms,
                ..
            } => {
                let trials = self.policy.half_open_trials.max(1);
                if *admitted < trials {
                    *admitted += 1;
                    if *admitted >= trials {
                        *full_since_ms = Some(now_ms);
                    }
                    Admission::Permitted(Permit {
                        generation: self.generation,
                    })
                } else {
                    Admission::Rejected {
                        state: BreakerState::HalfOpen,
                        retry_at_ms: None,
                    }
                }
            }
        };
        if matches!(admission, Admission::Rejected { .. }) {
            self.rejected = self.rejected.saturating_add(1);
        }
        (admission, transition)
    }

    /// The call admitted with `permit` ended at `now_ms` with `outcome` after `latency`.
    pub fn record(
        &mut self,
        now_ms: u64,
        permit: Permit,
        outcome: Outcome,
        latency: Duration,
    ) -> Option<Transition> {
        if permit.generation != self.generation {
            return None;
        }
        let failure = match outcome {
            Outcome::Failure(kind) if self.policy.counted.contains(kind) => Some(kind),
            _ => None,
        };
        let slow =
            self.policy.slow_call_rate.is_some() && latency >= self.policy.slow_call_duration;
        match &mut self.state {
            State::Closed => {
                self.window.record(
                    now_ms,
                    Call {
                        failed: failure.is_some(),
                        slow,
                        latency,
                    },
                );
                let stats = self.window.stats(now_ms);
                if stats.calls < u64::from(self.policy.minimum()) {
                    return None;
                }
                let reason = if stats.failure_rate() >= self.policy.failure_rate {
                    Reason::FailureRate {
                        rate: stats.failure_rate(),
                        threshold: self.policy.failure_rate,
                        calls: stats.calls,
                    }
                } else if let Some(threshold) = self.policy.slow_call_rate
                    && stats.slow_rate() >= threshold
                {
                    Reason::SlowCallRate {
                        rate: stats.slow_rate(),
                        threshold,
                        calls: stats.calls,
                    }
                } else {
                    return None;
                };
                Some(self.open(now_ms, reason))
            }
            State::HalfOpen { succeeded, .. } => {
                if failure.is_some() || slow {
                    return Some(self.open(now_ms, Reason::TrialFailed { failure }));
                }
                *succeeded += 1;
                let trials = self.policy.half_open_trials.max(1);
                (*succeeded >= trials)
                    .then(|| self.go(now_ms, State::Closed, Reason::TrialsSucceeded { trials }))
            }
            // No permit is issued while open, and opening starts a new generation.
            State::Open { .. } => None,
        }
    }

    /// Whether `permit` is of the breaker's current state (no transition since it was given):
    /// a call that waited for other slots after its admission checks it before it is sent.
    pub fn is_current(&self, permit: &Permit) -> bool {
        permit.generation == self.generation
    }

    /// The call admitted with `permit` was not made, or its outcome will never be known (the
    /// client cancelled it): in half-open its trial slot is free again.
    pub fn cancel(&mut self, permit: Permit) {
        if permit.generation == self.generation
            && let State::HalfOpen {
                admitted,
                full_since_ms,
                ..
            } = &mut self.state
        {
            *admitted = admitted.saturating_sub(1);
            *full_since_ms = None;
        }
    }

    fn open(&mut self, now_ms: u64, reason: Reason) -> Transition {
        let wait = millis(self.policy.wait_in_open);
        let until_ms = now_ms.saturating_add(wait);
        self.go(now_ms, State::Open { until_ms }, reason)
    }

    fn go(&mut self, now_ms: u64, to: State, reason: Reason) -> Transition {
        let from = self.state();
        self.state = to;
        self.generation = self.generation.wrapping_add(1);
        self.window.clear();
        Transition {
            from,
            to: self.state(),
            at_ms: now_ms,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn policy() -> BreakerPolicy {
        BreakerPolicy {
            window: WindowSpec::Count { calls: 10 },
            minimum_calls: 4,
            failure_rate: 0.5,
            slow_call_rate: Some(0.75),
            slow_call_duration: Duration::from_secs(2),
            wait_in_open: Duration::from_secs(30),
            half_open_trials: 2,
            counted: FailureSet::ALL,
        }
    }

    fn permit(b: &mut Breaker, now: u64) -> Permit {
        match b.try_acquire(now).0 {
            Admission::Permitted(p) => p,
            other => panic!("rejected: {other:?}"),
        }
    }

    fn call(b: &mut Breaker, now: u64, outcome: Outcome) -> Option<Transition> {
        let p = permit(b, now);
        b.record(now, p, outcome, MS)
    }

    const FAIL: Outcome = Outcome::Failure(FailureKind::Transport);

    fn open_it(b: &mut Breaker, now: u64) -> Transition {
        for _ in 0..3 {
            if let Some(t) = call(b, now, FAIL) {
                return t;
            }
        }
        call(b, now, FAIL).unwrap_or_else(|| panic!("did not open"))
    }

    /// A count window smaller than `minimum_calls` (5 calls, the default minimum of 10) still
    /// opens: the minimum is cut to what the window holds.
    #[test]
    fn a_count_window_smaller_than_the_minimum_still_opens() {
        let mut b = Breaker::new(BreakerPolicy {
            window: WindowSpec::Count { calls: 5 },
            ..BreakerPolicy::default()
        });
        assert_eq!(b.policy().minimum(), 5);
        for _ in 0..4 {
            assert_eq!(call(&mut b, 0, FAIL), None);
        }
        let t = call(&mut b, 0, FAIL).unwrap_or_else(|| panic!("never opened"));
        assert_eq!(t.to, BreakerState::Open);
        // A time window keeps its minimum.
        let timed = BreakerPolicy {
            window: WindowSpec::Time {
                span: Duration::from_secs(60),
                buckets: 6,
            },
            ..BreakerPolicy::default()
        };
        assert_eq!(timed.minimum(), 10);
    }

    /// Trials that hang (a caller with no timeout) do not hold the breaker half-open for ever:
    /// once every slot has been taken for `slow_call_duration`, it opens again; their late
    /// outcomes are stale, and the next wait ends in a new half-open with free slots.
    #[test]
    fn hung_trials_open_the_breaker_again_after_the_slow_call_duration() {
        let mut b = Breaker::new(policy());
        let opened = open_it(&mut b, 0).at_ms;
        let wait = millis(policy().wait_in_open);
        let half = opened + wait;
        let hung = [permit(&mut b, half), permit(&mut b, half + 10)];
        // Every slot taken: refused, but not for ever.
        assert!(matches!(
            b.try_acquire(half + 1_000).0,
            Admission::Rejected {
                state: BreakerState::HalfOpen,
                ..
            }
        ));
        let (admission, t) = b.try_acquire(half + 10 + 2_000);
        let t = t.unwrap_or_else(|| panic!("still half-open"));
        assert_eq!(t.reason, Reason::TrialsHung { after_ms: 2_000 });
        assert_eq!(t.to, BreakerState::Open);
        assert!(matches!(
            admission,
            Admission::Rejected {
                state: BreakerState::Open,
                ..
            }
        ));
        for p in hung {
            assert_eq!(
                b.record(half + 5_000, p, Outcome::Success, MS),
                None,
                "stale"
            );
        }
        let again = half + 10 + 2_000 + wait;
        let _ = permit(&mut b, again);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        // A slot given back (cancelled) restarts the count: not hung.
        let mut b = Breaker::new(policy());
        let opened = open_it(&mut b, 0).at_ms;
        let half = opened + wait;
        let first = permit(&mut b, half);
        let _second = permit(&mut b, half);
        b.cancel(first);
        assert_eq!(b.poll(half + 5_000), None);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        // With slow calls off, a long trial is not judged by its time.
        let mut b = Breaker::new(BreakerPolicy {
            slow_call_rate: None,
            ..policy()
        });
        let opened = open_it(&mut b, 0).at_ms;
        let half = opened + wait;
        let _a = permit(&mut b, half);
        let _b = permit(&mut b, half);
        assert_eq!(b.poll(half + 3_600_000), None);
        assert_eq!(b.state(), BreakerState::HalfOpen);
    }

    #[test]
    fn opens_at_the_failure_rate_only_after_the_minimum_calls() {
        let mut b = Breaker::new(policy());
        // Three failures in a row: 100 %, but below the minimum of 4.
        for _ in 0..3 {
            assert_eq!(call(&mut b, 0, FAIL), None);
        }
        assert_eq!(b.state(), BreakerState::Closed);
        let t = call(&mut b, 100, Outcome::Success).unwrap_or_else(|| panic!("did not open"));
        // 3 of 4 failed: 75 % ≥ 50 %.
        assert_eq!(
            t,
            Transition {
                from: BreakerState::Closed,
                to: BreakerState::Open,
                at_ms: 100,
                reason: Reason::FailureRate {
                    rate: 0.75,
                    threshold: 0.5,
                    calls: 4
                },
            }
        );
        // Open: fail fast, saying when it will try again.
        assert_eq!(
            b.try_acquire(29_999),
            (
                Admission::Rejected {
                    state: BreakerState::Open,
                    retry_at_ms: Some(30_100)
                },
                None
            )
        );
        assert_eq!(b.rejected(), 1);
    }

    #[test]
    fn below_the_failure_rate_it_stays_closed() {
        let mut b = Breaker::new(policy());
        for i in 0..100 {
            let outcome = if i % 3 == 1 { FAIL } else { Outcome::Success };
            assert_eq!(call(&mut b, i, outcome), None, "call {i}");
        }
    }

    #[test]
    fn opens_at_the_slow_call_rate() {
        let mut b = Breaker::new(policy());
        let slow = Duration::from_secs(2);
        for i in 0..3 {
            let p = permit(&mut b, i);
            assert_eq!(b.record(i, p, Outcome::Success, slow), None);
        }
        let p = permit(&mut b, 3);
        let t = b.record(3, p, Outcome::Success, slow);
        assert!(
            matches!(
                t,
                Some(Transition {
                    reason: Reason::SlowCallRate { calls: 4, .. },
                    ..
                })
            ),
            "{t:?}"
        );
    }

    #[test]
    fn uncounted_failures_are_successes() {
        let mut b = Breaker::new(BreakerPolicy {
            counted: FailureSet::of(&[FailureKind::Timeout, FailureKind::Transport]),
            ..policy()
        });
        for i in 0..20 {
            assert_eq!(
                call(&mut b, i, Outcome::Failure(FailureKind::ToolError)),
                None
            );
            assert_eq!(
                call(&mut b, i, Outcome::Failure(FailureKind::JsonRpcError)),
                None
            );
        }
        assert_eq!(b.stats(20).failures, 0);
        assert!(call(&mut b, 30, Outcome::Failure(FailureKind::Timeout)).is_none());
    }

    #[test]
    fn half_open_lets_a_bounded_number_of_trials_through_and_closes_when_all_succeed() {
        let mut b = Breaker::new(policy());
        open_it(&mut b, 0);
        // The wait is over at 30 s: the first call moves it to half-open.
        let (first, t) = b.try_acquire(30_000);
        assert_eq!(
            t.map(|t| (t.from, t.to, t.reason)),
            Some((BreakerState::Open, BreakerState::HalfOpen, Reason::WaitOver))
        );
        let Admission::Permitted(first) = first else {
            panic!("{first:?}")
        };
        let second = permit(&mut b, 30_001);
        // Two trials in flight: a third is rejected, with no time to give.
        assert_eq!(
            b.try_acquire(30_002).0,
            Admission::Rejected {
                state: BreakerState::HalfOpen,
                retry_at_ms: None
            }
        );
        assert_eq!(b.record(30_010, first, Outcome::Success, MS), None);
        let t = b.record(30_020, second, Outcome::Success, MS);
        assert_eq!(
            t.map(|t| (t.to, t.reason)),
            Some((BreakerState::Closed, Reason::TrialsSucceeded { trials: 2 }))
        );
        // Closed with a fresh window: one failure does not reopen it.
        assert_eq!(call(&mut b, 30_030, FAIL), None);
    }

    #[test]
    fn a_failed_or_slow_trial_opens_it_again_for_another_wait() {
        let mut b = Breaker::new(policy());
        open_it(&mut b, 0);
        let ok = permit(&mut b, 30_000);
        let bad = permit(&mut b, 30_000);
        assert_eq!(b.record(30_001, ok, Outcome::Success, MS), None);
        let t = b.record(30_500, bad, FAIL, MS);
        assert_eq!(
            t.map(|t| (t.from, t.to, t.reason)),
            Some((
                BreakerState::HalfOpen,
                BreakerState::Open,
                Reason::TrialFailed {
                    failure: Some(FailureKind::Transport)
                }
            ))
        );
        assert_eq!(b.open_until(), Some(60_500));
        // A slow trial is a failed one too.
        let p = permit(&mut b, 60_500);
        let t = b.record(63_000, p, Outcome::Success, Duration::from_secs(2));
        assert_eq!(
            t.map(|t| t.reason),
            Some(Reason::TrialFailed { failure: None })
        );
    }

    #[test]
    fn a_permit_from_an_earlier_state_is_ignored() {
        let mut b = Breaker::new(policy());
        // A call admitted while closed, still running when the breaker opens...
        let old = permit(&mut b, 0);
        open_it(&mut b, 1);
        let trial = permit(&mut b, 30_001);
        // ...fails after it half-opened: not a failed trial.
        assert_eq!(b.record(30_002, old, FAIL, MS), None);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert_eq!(b.record(30_003, trial, Outcome::Success, MS), None);
        assert_eq!(b.state(), BreakerState::HalfOpen);
    }

    #[test]
    fn a_cancelled_trial_frees_its_slot() {
        let mut b = Breaker::new(BreakerPolicy {
            half_open_trials: 1,
            ..policy()
        });
        open_it(&mut b, 0);
        let p = permit(&mut b, 30_000);
        assert!(matches!(
            b.try_acquire(30_000).0,
            Admission::Rejected { .. }
        ));
        b.cancel(p);
        let p = permit(&mut b, 30_001);
        let t = b.record(30_002, p, Outcome::Success, MS);
        assert_eq!(t.map(|t| t.to), Some(BreakerState::Closed));
    }

    #[test]
    fn poll_half_opens_without_a_call() {
        let mut b = Breaker::new(policy());
        open_it(&mut b, 0);
        assert_eq!(b.poll(29_999), None);
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.poll(30_000).map(|t| t.to), Some(BreakerState::HalfOpen));
        assert_eq!(b.poll(30_001), None);
    }

    #[test]
    fn failure_kinds_round_trip_by_name() {
        for k in FailureKind::ALL {
            assert_eq!(FailureKind::parse(k.as_str()), Some(k));
            assert!(FailureSet::NONE.with(k).contains(k));
        }
        assert_eq!(FailureKind::parse("oops"), None);
        assert_eq!(FailureSet::of(&FailureKind::ALL), FailureSet::ALL);
    }

    #[test]
    fn the_defaults_are_valid_and_rates_out_of_range_are_not() {
        assert_eq!(BreakerPolicy::default().validate(), Ok(()));
        assert_eq!(policy().validate(), Ok(()));
        for rate in [0.0, -1.0, 1.5, f64::NAN] {
            let e = BreakerPolicy {
                failure_rate: rate,
                ..policy()
            }
            .validate();
            assert_eq!(e.map_err(|e| e.setting), Err("failure_rate"), "{rate}");
            let e = BreakerPolicy {
                slow_call_rate: Some(rate),
                ..policy()
            }
            .validate();
            assert_eq!(e.map_err(|e| e.setting), Err("slow_call_rate"), "{rate}");
        }
        let e = BreakerPolicy {
            half_open_trials: 0,
            ..policy()
        }
        .validate();
        assert_eq!(e.map_err(|e| e.setting), Err("half_open_trials"));
    }

    proptest::proptest! {
        /// For any interleaving of acquires, outcomes and cancels: half-open never has more
        /// than `half_open_trials` calls in flight, and an open breaker admits nothing before
        /// its time.
        #[test]
        fn trials_stay_bounded_and_open_admits_nothing_early(
            steps in proptest::collection::vec((0u64..20_000, 0u8..5), 0..400),
        ) {
            let p = policy();
            let mut b = Breaker::new(p);
            let mut now = 0u64;
            let mut in_flight: Vec<(Permit, u64)> = Vec::new();
            for (step, action) in steps {
                now += step;
                match action {
                    0 | 1 => {
                        let was_open = b.open_until();
                        let (admission, _) = b.try_acquire(now);
                        if let Admission::Permitted(permit) = admission {
                            if let Some(until) = was_open {
                                proptest::prop_assert!(now >= until);
                            }
                            in_flight.push((permit, b.generation));
                        }
                    }
                    2 | 3 if !in_flight.is_empty() => {
                        let (permit, _) = in_flight.remove(0);
                        let outcome = if action == 2 { Outcome::Success } else { FAIL };
                        b.record(now, permit, outcome, MS);
                    }
                    4 if !in_flight.is_empty() => {
                        let (permit, _) = in_flight.remove(0);
                        b.cancel(permit);
                    }
                    _ => {}
                }
                if let State::HalfOpen {
                    admitted,
                    succeeded,
                    ..
                } = b.state
                {
                    let current = in_flight.iter().filter(|(_, g)| *g == b.generation).count();
                    proptest::prop_assert!(admitted <= p.half_open_trials);
                    proptest::prop_assert_eq!(admitted as usize, current + succeeded as usize);
                }
            }
        }
    }
}
