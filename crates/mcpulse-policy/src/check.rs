//! A dependency check's confirmed state, from its raw results over time (the gateway's
//! `[[checks]]`, and the kit's next).
//!
//! ```text
//!            failure_threshold results in a row worse than the confirmed level
//!   ┌──────┐ ───────────────────────────────────────────────────────────────► ┌──────┐
//!   │ pass │            (warn: answered, but slower than degraded_latency)     │ fail │
//!   └──────┘ ◄─────────────────────────────────────────────────────────────── └──────┘
//!            success_threshold results in a row better than the confirmed level
//! ```
//!
//! Rules (the monitor's `state.rs` has the same idea for a target's status; its thresholds
//! could be this module, but it is not refactored here):
//! - a raw result is `fail` (it failed), `warn` (it passed but took longer than
//!   `degraded_latency`) or `pass`;
//! - the first result is taken as it is: there is no confirmed state yet to protect from a
//!   blip, and readiness should not wait `failure_threshold` intervals to learn that a
//!   dependency was down from the start;
//! - after that, moving to a *worse* level takes `failure_threshold` results in a row that are
//!   all worse than the confirmed one; moving to a *better* level takes `success_threshold`
//!   results in a row that are all better. A result at the confirmed level resets the streak.
//!   So one blip flips nothing (with thresholds above 1);
//! - when a streak confirms, the new level is the mildest of the streak going down (all N
//!   were at least that bad) and the worst of it going up (all N were at least that good).
//!
//! What it does not own: running checks (the gateway's `checks` runner does, on tokio timers)
//! and what a confirmed level means for readiness beyond [`readiness`]. Time is an argument
//! (Unix ms, for the health+json `time`), as everywhere in this crate.

use crate::health::CheckStatus;
use std::time::Duration;

/// Failure threshold by default: three in a row, as Kubernetes' probes (`failureThreshold: 3`).
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 3;
/// Success threshold by default: one, as Kubernetes' (`successThreshold: 1`).
pub const DEFAULT_SUCCESS_THRESHOLD: u32 = 1;

/// How raw results become a confirmed level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Results in a row, all worse than the confirmed level, before it gets worse (at least 1).
    pub failure_threshold: u32,
    /// Results in a row, all better than the confirmed level, before it gets better (at least 1).
    pub success_threshold: u32,
    /// A passing result slower than this is `warn` (degraded); `None`: latency never degrades.
    pub degraded_latency: Option<Duration>,
}

impl Default for Thresholds {
    fn default() -> Thresholds {
        Thresholds {
            failure_threshold: DEFAULT_FAILURE_THRESHOLD,
            success_threshold: DEFAULT_SUCCESS_THRESHOLD,
            degraded_latency: None,
        }
    }
}

impl Thresholds {
    /// The level of one raw result: `fail` if it failed, `warn` if it passed slower than
    /// [`Thresholds::degraded_latency`] (or the check itself said degraded), else `pass`.
    pub fn level(&self, raw: &Raw) -> CheckStatus {
        match raw.status {
            CheckStatus::Fail => CheckStatus::Fail,
            s => match (self.degraded_latency, raw.latency) {
                (Some(limit), Some(took)) if took > limit => CheckStatus::Warn,
                _ => s,
            },
        }
    }
}

/// One run of a check, as the runner saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Raw {
    /// `fail` for a failure; `warn` when the check itself reported degraded (a health tool
    /// saying so); `pass` otherwise (latency may still make it `warn`).
    pub status: CheckStatus,
    /// How long it took (None when it never got an answer to time).
    pub latency: Option<Duration>,
    /// What it saw, inert (the runner's job): why it failed, or a word on success.
    pub output: Option<String>,
}

/// A check's state: its confirmed level, the streak that may change it, and its last result.
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    /// The confirmed level; None until the first result.
    pub confirmed: Option<CheckStatus>,
    /// Since when (Unix ms) the confirmed level holds.
    pub since_ms: i64,
    /// Results in a row that differ from the confirmed level in the same direction.
    pub streak: u32,
    /// The mildest (going down) or worst (going up) level of the streak.
    streak_level: Option<CheckStatus>,
    /// The last result, its level and when it came (Unix ms).
    pub last: Option<(Raw, CheckStatus, i64)>,
    /// Results seen, for the record.
    pub runs: u64,
}

/// A change of the confirmed level (for a log line at info and a metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub from: Option<CheckStatus>,
    pub to: CheckStatus,
}

impl Default for State {
    fn default() -> State {
        State::new()
    }
}

impl State {
    /// No result yet.
    pub fn new() -> State {
        State {
            confirmed: None,
            since_ms: 0,
            streak: 0,
            streak_level: None,
            last: None,
            runs: 0,
        }
    }

    /// Folds one result in, seen at `now_ms`; returns the transition when the confirmed level
    /// changed.
    pub fn observe(&mut self, raw: Raw, now_ms: i64, t: &Thresholds) -> Option<Transition> {
        let level = t.level(&raw);
        self.last = Some((raw, level, now_ms));
        self.runs = self.runs.saturating_add(1);
        let Some(confirmed) = self.confirmed else {
            self.confirm(level, now_ms);
            return Some(Transition {
                from: None,
                to: level,
            });
        };
        if level == confirmed {
            self.streak = 0;
            self.streak_level = None;
            return None;
        }
        let worse = level > confirmed;
        // A streak runs in one direction: a result on the other side of the confirmed level
        // starts a new one.
        let continues = self.streak_level.is_some_and(|s| (s > confirmed) == worse);
        let streak_level = match (continues, self.streak_level) {
            (true, Some(s)) if worse => s.min(level),
            (true, Some(s)) => s.max(level),
            _ => level,
        };
        self.streak = if continues { self.streak + 1 } else { 1 };
        self.streak_level = Some(streak_level);
        let needed = if worse {
            t.failure_threshold
        } else {
            t.success_threshold
        };
        if self.streak >= needed.max(1) {
            self.confirm(streak_level, now_ms);
            return Some(Transition {
                from: Some(confirmed),
                to: streak_level,
            });
        }
        None
    }

    fn confirm(&mut self, level: CheckStatus, now_ms: i64) {
        self.confirmed = Some(level);
        self.since_ms = now_ms;
        self.streak = 0;
        self.streak_level = None;
    }
}

/// What a check's confirmed level makes of readiness: a critical check that fails fails
/// readiness (503); a non-critical one that fails only warns (200), as does any degraded
/// check. A check that has not run yet is `fail` when critical (readiness waits for its first
/// result, which comes within a second of start) and `warn` otherwise.
pub fn readiness(confirmed: Option<CheckStatus>, critical: bool) -> CheckStatus {
    match (confirmed, critical) {
        (Some(CheckStatus::Pass), _) => CheckStatus::Pass,
        (Some(CheckStatus::Warn), _) | (Some(CheckStatus::Fail) | None, false) => CheckStatus::Warn,
        (Some(CheckStatus::Fail) | None, true) => CheckStatus::Fail,
    }
}

/// One dependency check as a readiness document shows it (the gateway's `[[checks]]`, the
/// kit's registry): what [`item`] needs to render it.
#[derive(Debug, Clone, Copy)]
pub struct Dependency<'a> {
    /// The check's name (`?exclude=` takes it; its key is `NAME:responseTime`).
    pub name: &'a str,
    /// What kind of check it is (`tcp`, `http`, `command`, `tool`, `fn`...), an extra member.
    pub kind: &'a str,
    /// The draft's `componentId`: what it checks (`host:port`, a URL, redacted).
    pub component_id: &'a str,
    /// `component`, `datastore` or `system`.
    pub component_type: &'static str,
    /// Whether its failure fails readiness (else it only warns).
    pub critical: bool,
    pub thresholds: &'a Thresholds,
    pub state: &'a State,
}

/// A dependency check's entry in `/readyz` (the same shape for the gateway and the kit): its
/// readiness status ([`readiness`]), `kind`, `critical`, the confirmed level and since when,
/// the last run's level when it disagrees, its latency in ms, and an output that says why
/// (a failing non-critical check says that it only warns; a slow one names `degraded_latency`).
pub fn item(d: &Dependency<'_>) -> crate::health::Check {
    use crate::health::Check as Item;
    use mcpulse_wire::units::{format_rfc3339, human_duration};
    let status = readiness(d.state.confirmed, d.critical);
    let mut c = Item::new(
        format!("{}:responseTime", d.name),
        d.name.to_owned(),
        d.component_type,
    )
    .id(d.component_id.to_owned())
    .status(status)
    .with("kind", d.kind)
    .with("critical", d.critical);
    match (&d.state.confirmed, &d.state.last) {
        (None, _) | (_, None) => {
            c = c.output(if d.critical {
                "not checked yet (critical: readiness waits for it)"
            } else {
                "not checked yet"
            });
        }
        (Some(confirmed), Some((raw, last, at))) => {
            c = c
                .at(*at)
                .with("confirmed", confirmed.as_str())
                .with("since", format_rfc3339(d.state.since_ms));
            if last != confirmed {
                // The last run disagrees, but not (yet) enough times in a row.
                c = c.with("last", last.as_str());
            }
            if let Some(l) = raw.latency {
                c = c.observed(crate::health::ms(l), "ms");
            }
            let out = match (confirmed, raw.output.as_deref()) {
                (CheckStatus::Fail, Some(o)) if !d.critical => {
                    Some(format!("{o} (not critical: readiness only warns)"))
                }
                (CheckStatus::Warn, Some(o))
                    if *last == CheckStatus::Pass || *last == CheckStatus::Warn =>
                {
                    Some(match (raw.latency, d.thresholds.degraded_latency) {
                        (Some(l), Some(limit)) if l > limit => format!(
                            "{o}; slower than {} (degraded_latency)",
                            human_duration(limit.as_millis())
                        ),
                        _ => o.to_owned(),
                    })
                }
                (_, o) => o.map(str::to_owned),
            };
            if let Some(o) = out {
                c = c.output(o);
            }
        }
    }
    c
}

/// One circuit breaker at a moment, as a readiness document shows it (the gateway's `[[tools]]`
/// and dependency breakers, the kit's per-tool ones): what [`breaker_item`] needs.
#[derive(Debug, Clone, Copy)]
pub struct BreakerReading<'a> {
    /// The breaker's name (a `[[tools]]` pattern, `dependency:NAME`, a kit tool's name): its
    /// key is `NAME:breaker`, `?exclude=` takes the name.
    pub name: &'a str,
    pub state: crate::breaker::BreakerState,
    /// While open: how long until it lets a trial through.
    pub retry_in: Option<Duration>,
    /// The calls and failures in its window now ([`crate::breaker::Breaker::stats`]).
    pub calls: u64,
    pub failures: u64,
    /// Wall-clock Unix ms of the reading, health+json's `time`.
    pub time_ms: i64,
}

impl<'a> BreakerReading<'a> {
    /// `breaker` read at `now_ms` (its clock), its wait in open included; `time_ms` the wall
    /// clock's Unix ms for the item's `time`. The caller polls the breaker first (a change of
    /// state is its to log and count).
    pub fn of(
        name: &'a str,
        breaker: &crate::breaker::Breaker,
        now_ms: u64,
        time_ms: i64,
    ) -> BreakerReading<'a> {
        let stats = breaker.stats(now_ms);
        BreakerReading {
            name,
            state: breaker.state(),
            retry_in: breaker
                .open_until()
                .map(|at| Duration::from_millis(at.saturating_sub(now_ms))),
            calls: stats.calls,
            failures: stats.failures,
            time_ms,
        }
    }
}

/// A breaker's entry in `/readyz`, the same for the gateway and the kit (one function, so the
/// two cannot drift): every breaker is listed, closed ones too (`pass`), with its state as
/// `observedValue` and its window's `calls` and `failures`; open or half-open is `warn`, never
/// `fail`: the server still answers every call (fast) and its other tools work, so it stays in
/// rotation. The name is shown quoted and escaped (`{:?}`), so that it cannot forge a line.
pub fn breaker_item(b: &BreakerReading<'_>) -> crate::health::Check {
    use crate::breaker::BreakerState;
    let c = crate::health::Check::new(
        format!("{}:breaker", b.name),
        b.name.to_owned(),
        "component",
    )
    .observed(b.state.as_str(), "state")
    .with("calls", b.calls)
    .with("failures", b.failures)
    .at(b.time_ms);
    match b.state {
        BreakerState::Closed => c,
        BreakerState::Open => {
            let when = b.retry_in.map_or_else(String::new, |d| {
                format!("; it tries again in {}", human_ceil(d))
            });
            c.status(CheckStatus::Warn).output(format!(
                "the circuit breaker {:?} is open: its tools fail fast{when}",
                b.name
            ))
        }
        BreakerState::HalfOpen => c.status(CheckStatus::Warn).output(format!(
            "the circuit breaker {:?} is half-open: trial calls decide whether it closes",
            b.name
        )),
    }
}

/// A wait as people read it, rounded up to whole seconds from 1 s (29.9 s left reads "30s",
/// never an early "29s").
pub fn human_ceil(d: Duration) -> String {
    let ms = d.as_millis();
    let ms = if ms >= 1000 {
        ms.div_ceil(1000) * 1000
    } else {
        ms
    };
    mcpulse_wire::units::human_duration(ms)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use CheckStatus::{Fail, Pass, Warn};

    fn breaker_json(
        state: crate::breaker::BreakerState,
        retry_in: Option<Duration>,
    ) -> serde_json::Value {
        let doc = crate::health::Health {
            service_id: "s".into(),
            version: "1".into(),
            description: "d".into(),
            checks: vec![breaker_item(&BreakerReading {
                name: "search\n[+]forged",
                state,
                retry_in,
                calls: 12,
                failures: 7,
                time_ms: 0,
            })],
        };
        doc.to_json()["checks"]["search\n[+]forged:breaker"][0].clone()
    }

    #[test]
    fn a_breaker_item_lists_every_state_and_warns_unless_closed() {
        use crate::breaker::BreakerState::{Closed, HalfOpen, Open};
        let closed = breaker_json(Closed, None);
        assert_eq!(
            closed,
            serde_json::json!({"componentType": "component", "observedValue": "closed",
                "observedUnit": "state", "calls": 12, "failures": 7, "status": "pass",
                "time": "1970-01-01T00:00:00.000Z"})
        );
        let open = breaker_json(Open, Some(Duration::from_millis(29_100)));
        assert_eq!(open["status"], "warn");
        assert_eq!(
            open["output"],
            "the circuit breaker \"search\\n[+]forged\" is open: its tools fail fast; it tries again in 30s"
        );
        let half = breaker_json(HalfOpen, None);
        assert_eq!(half["status"], "warn");
        assert_eq!(half["observedValue"], "half_open");
    }

    fn raw(status: CheckStatus, ms: u64) -> Raw {
        Raw {
            status,
            latency: Some(Duration::from_millis(ms)),
            output: None,
        }
    }

    fn thresholds(failure: u32, success: u32) -> Thresholds {
        Thresholds {
            failure_threshold: failure,
            success_threshold: success,
            degraded_latency: Some(Duration::from_millis(100)),
        }
    }

    /// Feeds results one interval (20 s) apart; returns the confirmed level after each.
    fn run(s: &mut State, t: &Thresholds, results: &[(CheckStatus, u64)]) -> Vec<CheckStatus> {
        results
            .iter()
            .map(|&(st, ms)| {
                let now = 1_000_000 + i64::try_from(s.runs).unwrap() * 20_000;
                s.observe(raw(st, ms), now, t);
                s.confirmed.unwrap()
            })
            .collect()
    }

    #[test]
    fn the_first_result_is_taken_as_it_is() {
        let t = thresholds(3, 2);
        let mut s = State::new();
        assert_eq!(s.confirmed, None);
        let tr = s.observe(raw(Fail, 5), 42, &t);
        assert_eq!(
            tr,
            Some(Transition {
                from: None,
                to: Fail
            })
        );
        assert_eq!((s.confirmed, s.since_ms), (Some(Fail), 42));
    }

    #[test]
    fn a_blip_flips_nothing_and_n_failures_flip() {
        let t = thresholds(3, 2);
        let mut s = State::new();
        let seen = run(
            &mut s,
            &t,
            &[
                (Pass, 5),
                (Fail, 5), // a blip
                (Pass, 5), // resets the streak
                (Fail, 5),
                (Fail, 5),
                (Fail, 5), // the third in a row confirms
            ],
        );
        assert_eq!(seen, [Pass, Pass, Pass, Pass, Pass, Fail]);
        assert_eq!(s.since_ms, 1_000_000 + 5 * 20_000);
    }

    #[test]
    fn recovery_takes_success_threshold_results_in_a_row() {
        let t = thresholds(1, 3);
        let mut s = State::new();
        let seen = run(
            &mut s,
            &t,
            &[
                (Fail, 5),
                (Pass, 5),
                (Pass, 5),
                (Fail, 5), // breaks the streak
                (Pass, 5),
                (Pass, 5),
                (Pass, 5),
            ],
        );
        assert_eq!(seen, [Fail, Fail, Fail, Fail, Fail, Fail, Pass]);
    }

    #[test]
    fn slow_passes_are_degraded_with_the_same_thresholds() {
        let t = thresholds(2, 2);
        let mut s = State::new();
        // 150 ms > degraded_latency 100 ms: warn.
        assert_eq!(t.level(&raw(Pass, 150)), Warn);
        assert_eq!(t.level(&raw(Pass, 100)), Pass);
        assert_eq!(t.level(&raw(Fail, 1)), Fail);
        let seen = run(
            &mut s,
            &t,
            &[(Pass, 5), (Pass, 150), (Pass, 150), (Pass, 5), (Pass, 5)],
        );
        assert_eq!(seen, [Pass, Pass, Warn, Warn, Pass]);
    }

    #[test]
    fn a_mixed_streak_confirms_its_mildest_level_going_down() {
        let t = thresholds(3, 1);
        let mut s = State::new();
        let seen = run(&mut s, &t, &[(Pass, 5), (Fail, 5), (Pass, 500), (Fail, 5)]);
        // fail, warn, fail: all worse than pass; the mildest of them is warn.
        assert_eq!(seen, [Pass, Pass, Pass, Warn]);
        // From warn, two more failures do not confirm fail (the streak restarts at warn's
        // level: fail is worse than warn, needing three in a row).
        let seen = run(&mut s, &t, &[(Fail, 5), (Fail, 5), (Fail, 5)]);
        assert_eq!(seen, [Warn, Warn, Fail]);
    }

    #[test]
    fn a_streak_in_the_other_direction_starts_over() {
        let t = thresholds(2, 2);
        let mut s = State::new();
        let seen = run(&mut s, &t, &[(Pass, 150), (Fail, 5), (Pass, 5), (Fail, 5)]);
        // Confirmed warn; fail (worse, 1), pass (better: a new streak, 1), fail (worse, 1).
        assert_eq!(seen, [Warn, Warn, Warn, Warn]);
        assert_eq!(s.streak, 1);
    }

    #[test]
    fn thresholds_of_zero_act_as_one() {
        let t = thresholds(0, 0);
        let mut s = State::new();
        let seen = run(&mut s, &t, &[(Pass, 5), (Fail, 5), (Pass, 5)]);
        assert_eq!(seen, [Pass, Fail, Pass]);
    }

    #[test]
    fn readiness_of_a_check() {
        assert_eq!(readiness(Some(Pass), true), Pass);
        assert_eq!(readiness(Some(Warn), true), Warn);
        assert_eq!(readiness(Some(Fail), true), Fail);
        assert_eq!(readiness(Some(Fail), false), Warn);
        assert_eq!(readiness(None, true), Fail);
        assert_eq!(readiness(None, false), Warn);
    }
}
