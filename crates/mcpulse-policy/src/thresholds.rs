//! Health thresholds: error rate and p95 latency over a sliding window, per tool and overall,
//! judged `pass`, `warn` (degraded) or `fail` (unhealthy) for `/readyz`.
//!
//! The rule, for each scope (the whole gateway, and each tool):
//! - fewer than `minimum_calls` calls in the window: **pass** (too little to judge; an idle tool
//!   is not a sick one);
//! - else, the error rate or the p95 at or past an `unhealthy` limit: **fail**, but only when
//!   `unhealthy` limits are configured;
//! - else, at or past a `degraded` limit: **warn**;
//! - else **pass**.
//!
//! `fail` is opt-in (no `unhealthy` limits by default) because `/readyz` failing takes a replica
//! out of its load balancer. A traffic burst or a shared dependency going slow crosses the same
//! threshold on every replica at once; were that `fail`, every replica would leave together and
//! nothing would be left to serve. `warn` shows the problem (status 200, the figures in
//! `output`) and leaves routing alone; an operator who runs one replica, or who wants the
//! drain, turns `fail` on.
//!
//! Memory: one [`Window`] overall and one per tool, at most [`MAX_TOOLS`] tools (tool names come
//! from clients and servers: an unbounded map would be theirs to grow). Calls to a tool past
//! the cap count overall only, and are counted in [`Thresholds::untracked`]. Recording
//! allocates only the first time a tool is seen. Judging allocates its output text.

use crate::health::{Check, CheckStatus};
use crate::window::{Call, Invalid, Window, WindowSpec, millis, require, require_rate};
use mcpulse_wire::text;
use std::collections::BTreeMap;
use std::time::Duration;

/// The most tools tracked one by one.
pub const MAX_TOOLS: usize = 256;

/// One level's limits; `None` leaves that figure unjudged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Failed calls over calls, 0 to 1.
    pub error_rate: Option<f64>,
    pub p95: Option<Duration>,
}

/// The settings of one scope.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThresholdPolicy {
    pub window: WindowSpec,
    /// Below this many calls in the window, the scope passes.
    pub minimum_calls: u32,
    pub degraded: Limits,
    /// `None` (the default): the scope never fails, only warns.
    pub unhealthy: Option<Limits>,
}

impl Default for ThresholdPolicy {
    /// The last 60 s (12 slots of 5 s), at least 10 calls; degraded at a 20 % error rate or a
    /// p95 of 30 s; never unhealthy.
    fn default() -> ThresholdPolicy {
        ThresholdPolicy {
            window: WindowSpec::Time {
                span: Duration::from_secs(60),
                buckets: 12,
            },
            minimum_calls: 10,
            degraded: Limits {
                error_rate: Some(0.2),
                p95: Some(Duration::from_secs(30)),
            },
            unhealthy: None,
        }
    }
}

impl Limits {
    fn validate(&self, error_rate: &'static str, p95: &'static str) -> Result<(), Invalid> {
        if let Some(rate) = self.error_rate {
            require_rate(rate, error_rate)?;
        }
        require(
            self.p95.is_none_or(|d| !d.is_zero()),
            p95,
            "must be above 0",
        )
    }
}

impl ThresholdPolicy {
    /// Whether every setting is in range, and `unhealthy` no stricter than `degraded` (else a
    /// scope would fail before it warned).
    pub fn validate(&self) -> Result<(), Invalid> {
        self.window.validate()?;
        self.degraded
            .validate("degraded.error_rate", "degraded.p95")?;
        let Some(unhealthy) = self.unhealthy else {
            return Ok(());
        };
        unhealthy.validate("unhealthy.error_rate", "unhealthy.p95")?;
        require(
            match (self.degraded.error_rate, unhealthy.error_rate) {
                (Some(d), Some(u)) => u >= d,
                _ => true,
            },
            "unhealthy.error_rate",
            "must be at least degraded.error_rate",
        )?;
        require(
            match (self.degraded.p95, unhealthy.p95) {
                (Some(d), Some(u)) => u >= d,
                _ => true,
            },
            "unhealthy.p95",
            "must be at least degraded.p95",
        )
    }
}

/// Which limit a scope crossed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Breach {
    ErrorRate { rate: f64, limit: f64 },
    P95 { p95: Duration, limit: Duration },
}

/// The verdict on one scope, with its figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement<'a> {
    /// `None`: the whole gateway.
    pub tool: Option<&'a str>,
    pub status: CheckStatus,
    pub calls: u64,
    pub failures: u64,
    pub p95: Option<Duration>,
    /// The limits crossed at the level of `status` (empty on pass).
    pub breaches: Vec<Breach>,
}

impl Judgement<'_> {
    /// The failure rate, 0 to 1.
    pub fn error_rate(&self) -> f64 {
        crate::window::Stats {
            calls: self.calls,
            failures: self.failures,
            slow: 0,
        }
        .failure_rate()
    }

    /// Why it is not `pass`, in words with the figures (`None` on pass); a tool's name is made
    /// inert.
    pub fn output(&self) -> Option<String> {
        let level = match self.status {
            CheckStatus::Pass => return None,
            CheckStatus::Warn => "degraded",
            CheckStatus::Fail => "unhealthy",
        };
        let scope = match self.tool {
            Some(tool) => format!("tool {}", text::quoted(tool, text::FIELD_CHARS)),
            None => "all tools".to_string(),
        };
        let figures: Vec<String> = self
            .breaches
            .iter()
            .map(|b| match b {
                Breach::ErrorRate { rate, limit } => format!(
                    "error rate {:.1}% ({} of {} calls) at or past the {level} limit of {:.1}%",
                    rate * 100.0,
                    self.failures,
                    self.calls,
                    limit * 100.0
                ),
                Breach::P95 { p95, limit } => format!(
                    "p95 latency {} ms at or past the {level} limit of {} ms",
                    p95.as_millis(),
                    limit.as_millis()
                ),
            })
            .collect();
        Some(format!("{scope}: {}", figures.join("; ")))
    }

    /// The health+json check: `calls:errorRate` overall, `tool.NAME:errorRate` for a tool (the
    /// name made inert, its colons replaced, so the key keeps one colon), the error rate in
    /// percent as its observed value, and `calls` and `p95Ms` as extra members.
    pub fn check(&self, time_ms: i64) -> Check {
        let (key, name) = match self.tool {
            Some(tool) => {
                let tool = text::field(tool).replace(':', "_");
                (format!("tool.{tool}:errorRate"), format!("tool.{tool}"))
            }
            None => ("calls:errorRate".to_string(), "calls".to_string()),
        };
        let percent = (self.error_rate() * 1000.0).round() / 10.0;
        let mut check = Check::new(key, name, "component")
            .status(self.status)
            .observed(percent, "percent")
            .at(time_ms)
            .with("calls", self.calls);
        if let Some(p95) = self.p95 {
            check = check.with("p95Ms", millis(p95));
        }
        if let Some(out) = self.output() {
            check = check.output(out);
        }
        check
    }
}

#[derive(Debug, Clone)]
struct Scope {
    policy: ThresholdPolicy,
    window: Window,
}

impl Scope {
    fn new(policy: ThresholdPolicy) -> Scope {
        Scope {
            window: Window::new(policy.window),
            policy,
        }
    }

    fn record(&mut self, now_ms: u64, failed: bool, latency: Duration) {
        self.window.record(
            now_ms,
            Call {
                failed,
                slow: false,
                latency,
            },
        );
    }

    fn judge<'a>(&self, tool: Option<&'a str>, now_ms: u64) -> Judgement<'a> {
        let stats = self.window.stats(now_ms);
        let p95 = self.window.quantile(now_ms, 0.95);
        let mut judgement = Judgement {
            tool,
            status: CheckStatus::Pass,
            calls: stats.calls,
            failures: stats.failures,
            p95,
            breaches: Vec::new(),
        };
        if stats.calls < u64::from(self.policy.minimum_calls) {
            return judgement;
        }
        let crossed = |limits: &Limits| -> Vec<Breach> {
            let mut out = Vec::new();
            if let Some(limit) = limits.error_rate
                && stats.failure_rate() >= limit
            {
                out.push(Breach::ErrorRate {
                    rate: stats.failure_rate(),
                    limit,
                });
            }
            if let (Some(limit), Some(p95)) = (limits.p95, p95)
                && p95 >= limit
            {
                out.push(Breach::P95 { p95, limit });
            }
            out
        };
        for (status, limits) in [
            (CheckStatus::Fail, self.policy.unhealthy),
            (CheckStatus::Warn, Some(self.policy.degraded)),
        ] {
            if let Some(limits) = limits {
                let breaches = crossed(&limits);
                if !breaches.is_empty() {
                    judgement.status = status;
                    judgement.breaches = breaches;
                    return judgement;
                }
            }
        }
        judgement
    }
}

/// The windows of the whole gateway and of each tool.
#[derive(Debug, Clone)]
pub struct Thresholds {
    overall: Scope,
    per_tool: ThresholdPolicy,
    tools: BTreeMap<String, Scope>,
    untracked: u64,
}

impl Thresholds {
    /// `overall` judges every call together; `per_tool` each tool's calls, unless
    /// [`Thresholds::set_tool`] gave the tool its own policy.
    pub fn new(overall: ThresholdPolicy, per_tool: ThresholdPolicy) -> Thresholds {
        Thresholds {
            overall: Scope::new(overall),
            per_tool,
            tools: BTreeMap::new(),
            untracked: 0,
        }
    }

    /// Gives `tool` its own policy (from a per-tool config entry), forgetting its calls so far.
    /// Past [`MAX_TOOLS`] tools it does nothing and returns false.
    pub fn set_tool(&mut self, tool: &str, policy: ThresholdPolicy) -> bool {
        if let Some(scope) = self.tools.get_mut(tool) {
            *scope = Scope::new(policy);
            return true;
        }
        if self.tools.len() >= MAX_TOOLS {
            return false;
        }
        self.tools.insert(tool.to_string(), Scope::new(policy));
        true
    }

    /// A call ended at `now_ms` (`tool`: `None` for a request that is not a `tools/call`).
    pub fn record(&mut self, now_ms: u64, tool: Option<&str>, failed: bool, latency: Duration) {
        self.overall.record(now_ms, failed, latency);
        let Some(tool) = tool else { return };
        if let Some(scope) = self.tools.get_mut(tool) {
            scope.record(now_ms, failed, latency);
        } else if self.tools.len() < MAX_TOOLS {
            let mut scope = Scope::new(self.per_tool);
            scope.record(now_ms, failed, latency);
            self.tools.insert(tool.to_string(), scope);
        } else {
            self.untracked = self.untracked.saturating_add(1);
        }
    }

    /// Calls to tools past [`MAX_TOOLS`], counted overall only.
    pub fn untracked(&self) -> u64 {
        self.untracked
    }

    /// The whole gateway's verdict at `now_ms`.
    pub fn overall(&self, now_ms: u64) -> Judgement<'static> {
        self.overall.judge(None, now_ms)
    }

    /// Each tool's verdict at `now_ms`, by name.
    pub fn tools(&self, now_ms: u64) -> impl Iterator<Item = Judgement<'_>> {
        self.tools
            .iter()
            .map(move |(name, scope)| scope.judge(Some(name.as_str()), now_ms))
    }

    /// The checks for `/readyz`: the overall one always, a tool's only when it is not `pass`
    /// (a server with 200 healthy tools does not need 200 lines to say so). `time_ms` is the
    /// wall-clock time (Unix ms) stamped on them.
    pub fn checks(&self, now_ms: u64, time_ms: i64) -> Vec<Check> {
        std::iter::once(self.overall(now_ms).check(time_ms))
            .chain(
                self.tools(now_ms)
                    .filter(|j| j.status != CheckStatus::Pass)
                    .map(|j| j.check(time_ms)),
            )
            .collect()
    }
}

impl Default for Thresholds {
    fn default() -> Thresholds {
        Thresholds::new(ThresholdPolicy::default(), ThresholdPolicy::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Health;

    const FAST: Duration = Duration::from_millis(20);

    fn policy() -> ThresholdPolicy {
        ThresholdPolicy {
            window: WindowSpec::Time {
                span: Duration::from_secs(10),
                buckets: 10,
            },
            minimum_calls: 5,
            degraded: Limits {
                error_rate: Some(0.2),
                p95: Some(Duration::from_secs(1)),
            },
            unhealthy: None,
        }
    }

    #[test]
    fn an_error_rate_past_the_degraded_limit_warns_and_recovers_as_the_window_slides() {
        let mut t = Thresholds::new(policy(), policy());
        for i in 0..8 {
            t.record(i * 100, Some("search"), false, FAST);
        }
        assert_eq!(t.overall(800).status, CheckStatus::Pass);
        // 2 failures in 10 calls: 20 %, at the limit.
        t.record(900, Some("search"), true, FAST);
        t.record(950, Some("search"), true, FAST);
        let j = t.overall(1_000);
        assert_eq!(j.status, CheckStatus::Warn);
        assert_eq!(
            j.breaches,
            [Breach::ErrorRate {
                rate: 0.2,
                limit: 0.2
            }]
        );
        assert_eq!(
            j.output().as_deref(),
            Some(
                "all tools: error rate 20.0% (2 of 10 calls) at or past the degraded limit of 20.0%"
            )
        );
        let tool = t.tools(1_000).next().unwrap_or_else(|| panic!("no tool"));
        assert_eq!(
            (tool.tool, tool.status),
            (Some("search"), CheckStatus::Warn)
        );
        // Never fail: no unhealthy limits are configured, however bad it gets.
        for i in 0..100 {
            t.record(1_000 + i, Some("search"), true, FAST);
        }
        assert_eq!(t.overall(1_100).status, CheckStatus::Warn);
        // Ten seconds later the failures have left the window: pass again, with no call needed.
        assert_eq!(t.overall(11_000).status, CheckStatus::Pass);
        assert_eq!(t.overall(11_000).calls, 0);
    }

    #[test]
    fn too_few_calls_pass_whatever_they_are() {
        let mut t = Thresholds::new(policy(), policy());
        for i in 0..4 {
            t.record(i, Some("x"), true, Duration::from_secs(100));
        }
        assert_eq!(t.overall(4).status, CheckStatus::Pass);
        t.record(5, Some("x"), true, FAST);
        assert_eq!(t.overall(5).status, CheckStatus::Warn);
    }

    #[test]
    fn fail_only_when_unhealthy_limits_are_configured() {
        let p = ThresholdPolicy {
            unhealthy: Some(Limits {
                error_rate: Some(0.5),
                p95: None,
            }),
            ..policy()
        };
        let mut t = Thresholds::new(p, p);
        for i in 0..10 {
            t.record(i, Some("a"), i < 3, FAST); // 30 %: degraded, not unhealthy
        }
        assert_eq!(t.overall(10).status, CheckStatus::Warn);
        for i in 0..10 {
            t.record(20 + i, Some("a"), true, FAST); // 13 of 20: 65 %
        }
        let j = t.overall(30);
        assert_eq!(j.status, CheckStatus::Fail);
        assert!(
            j.output()
                .is_some_and(|o| o.contains("unhealthy limit of 50.0%")),
            "{:?}",
            j.output()
        );
        let health = Health {
            service_id: "mcpulse".into(),
            version: "0".into(),
            description: "gateway".into(),
            checks: t.checks(30, 0),
        };
        assert_eq!(health.status().http_status(), 503);
    }

    #[test]
    fn p95_latency_past_the_limit_warns_per_tool_and_names_the_tool() {
        let mut t = Thresholds::new(policy(), policy());
        for i in 0..20 {
            for _ in 0..3 {
                t.record(i, Some("fast"), false, FAST);
            }
            // One call in ten is slow for "slow\x1b[2J": its p95 is over 1 s.
            let latency = if i % 10 < 8 {
                FAST
            } else {
                Duration::from_millis(1500)
            };
            t.record(i, Some("slow\x1b[2J"), false, latency);
        }
        let checks = t.checks(20, 1_700_000_000_000);
        // Overall (80 calls, 4 slow: p95 20 ms) passes; only the slow tool is listed.
        assert_eq!(checks.len(), 2, "{checks:?}");
        assert_eq!(checks[0].status, CheckStatus::Pass);
        assert_eq!(checks[1].status, CheckStatus::Warn);
        assert_eq!(checks[1].key, "tool.slow\\x1b[2J:errorRate");
        let out = checks[1].output.clone().unwrap_or_default();
        assert!(
            out.starts_with("tool \"slow\\x1b[2J\": p95 latency 15"),
            "{out}"
        );
        assert!(!out.contains('\x1b'));
    }

    #[test]
    fn unhealthy_limits_stricter_than_degraded_ones_are_invalid() {
        assert_eq!(ThresholdPolicy::default().validate(), Ok(()));
        let with = |unhealthy| ThresholdPolicy {
            unhealthy: Some(unhealthy),
            ..policy()
        };
        assert_eq!(
            with(Limits {
                error_rate: Some(0.5),
                p95: Some(Duration::from_secs(5)),
            })
            .validate(),
            Ok(())
        );
        let e = with(Limits {
            error_rate: Some(0.1),
            p95: None,
        })
        .validate();
        assert_eq!(e.map_err(|e| e.setting), Err("unhealthy.error_rate"));
        let e = with(Limits {
            error_rate: None,
            p95: Some(Duration::from_millis(500)),
        })
        .validate();
        assert_eq!(e.map_err(|e| e.setting), Err("unhealthy.p95"));
        let e = ThresholdPolicy {
            degraded: Limits {
                error_rate: Some(0.0),
                p95: None,
            },
            ..policy()
        }
        .validate();
        assert_eq!(e.map_err(|e| e.setting), Err("degraded.error_rate"));
    }

    #[test]
    fn tools_past_the_cap_count_overall_only() {
        let mut t = Thresholds::default();
        for i in 0..(MAX_TOOLS + 10) {
            t.record(0, Some(&format!("t{i}")), false, FAST);
        }
        assert_eq!(t.tools(0).count(), MAX_TOOLS);
        assert_eq!(t.untracked(), 10);
        assert_eq!(t.overall(0).calls, (MAX_TOOLS + 10) as u64);
        assert!(!t.set_tool("another", policy()));
        assert!(t.set_tool("t0", policy()));
    }
}
