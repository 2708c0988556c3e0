//! Health thresholds (issue #20 item 5): every relayed `tools/call`'s outcome and latency, over
//! a sliding window, overall and per tool, judged into `/readyz` checks
//! ([`mcpulse_policy::thresholds`] decides; this module feeds it, on tokio's clock, and reads
//! the `[thresholds]` config).
//!
//! The rule (docs/gateway.md `### Health thresholds`): past a `degraded` limit a scope is
//! `warn`, with the figures; past an `unhealthy` limit it is `fail` only with
//! `on_unhealthy = "fail"`, else `warn` too. Warn by default because `/readyz` failing takes a
//! replica out of its load balancer: a burst, or a shared dependency going slow, crosses the
//! same limit on every replica at once, and were that `fail` every replica would leave together.
//!
//! A failure is anything but a plain result: a tool result with `isError`, a JSON-RPC error,
//! or the gateway's own error (upstream down, timeout, session lost). The gateway's own probes
//! are not counted ([`crate::serve::record`] leaves them out).
//!
//! Bounds: one window overall and one per tool, for tools the upstream listed only (a client
//! can name any tool: its made-up names count overall, never get a window of their own), at
//! most [`mcpulse_policy::thresholds::MAX_TOOLS`]; a window is at most about 120 KiB
//! ([`mcpulse_policy::window::MAX_BUCKETS`] slots of about 1 KiB).

use mcpulse_policy::health::{Check, CheckStatus};
use mcpulse_policy::thresholds::{Limits, ThresholdPolicy, Thresholds};
use mcpulse_policy::window::WindowSpec;
use serde::Deserialize;
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

/// The slots of a time window: 12 (5 s each for the default 60 s).
pub const BUCKETS: u32 = 12;
/// The most `[[thresholds.tools]]` rules.
pub const MAX_RULES: usize = 64;

/// `[thresholds]` as written.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct RawThresholds {
    pub window: Option<String>,
    pub minimum_calls: Option<u32>,
    pub on_unhealthy: Option<String>,
    pub degraded: Option<RawLimits>,
    pub unhealthy: Option<RawLimits>,
    #[serde(default)]
    pub tools: Vec<RawToolThresholds>,
}

/// A level's limits as written: `p95 = "off"` leaves p95 unjudged.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub error_rate: Option<f64>,
    pub p95: Option<String>,
}

/// `[[thresholds.tools]]`: the tools whose name matches `match` (`*` any run of characters,
/// `?` one), with what differs from `[thresholds]`.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct RawToolThresholds {
    #[serde(rename = "match")]
    pub pattern: String,
    pub window: Option<String>,
    pub minimum_calls: Option<u32>,
    pub degraded: Option<RawLimits>,
    pub unhealthy: Option<RawLimits>,
}

/// The thresholds, resolved (by default: [`ThresholdPolicy::default`] for all, no rules, warn).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Settings {
    /// All tools together, and any tool no rule matches.
    pub overall: ThresholdPolicy,
    /// First match wins.
    pub rules: Vec<(String, ThresholdPolicy)>,
    /// `on_unhealthy = "fail"`.
    pub fail: bool,
}

/// A setting that cannot be used: its key (`thresholds.degraded.p95`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub key: String,
    pub message: String,
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid {
        key: key.into(),
        message: message.into(),
    }
}

fn window(text: &str, key: &str) -> Result<WindowSpec, Invalid> {
    let span = mcpulse_wire::units::duration(text).map_err(|e| invalid(key, e.to_string()))?;
    if span < Duration::from_secs(1) || span > Duration::from_secs(3600) {
        return Err(invalid(key, format!("{text:?}: give 1s to 1h")));
    }
    Ok(WindowSpec::Time {
        span,
        buckets: BUCKETS,
    })
}

fn limits(raw: &RawLimits, base: Limits, key: &str) -> Result<Limits, Invalid> {
    let mut l = base;
    if let Some(rate) = raw.error_rate {
        l.error_rate = Some(rate);
    }
    if let Some(p95) = &raw.p95 {
        l.p95 = if p95.trim() == "off" {
            None
        } else {
            Some(
                mcpulse_wire::units::duration(p95)
                    .map_err(|e| invalid(format!("{key}.p95"), e.to_string()))?,
            )
        };
    }
    Ok(l)
}

/// One scope's policy: `base` with what `window`, `minimum_calls`, `degraded` and `unhealthy`
/// change.
fn policy(
    base: ThresholdPolicy,
    w: Option<&String>,
    minimum_calls: Option<u32>,
    degraded: Option<&RawLimits>,
    unhealthy: Option<&RawLimits>,
    prefix: &str,
) -> Result<ThresholdPolicy, Invalid> {
    let mut p = base;
    if let Some(w) = w {
        p.window = window(w, &format!("{prefix}.window"))?;
    }
    if let Some(n) = minimum_calls {
        p.minimum_calls = n;
    }
    if let Some(d) = degraded {
        p.degraded = limits(d, p.degraded, &format!("{prefix}.degraded"))?;
    }
    if let Some(u) = unhealthy {
        let from = p.unhealthy.unwrap_or(Limits {
            error_rate: None,
            p95: None,
        });
        p.unhealthy = Some(limits(u, from, &format!("{prefix}.unhealthy"))?);
    }
    p.validate()
        .map_err(|e| invalid(format!("{prefix}.{}", e.setting), e.rule))?;
    Ok(p)
}

impl RawThresholds {
    /// Validates and resolves: unset values are the defaults
    /// ([`ThresholdPolicy::default`]), a tool rule's unset values its `[thresholds]`'.
    pub fn resolve(&self) -> Result<Settings, Invalid> {
        let overall = policy(
            ThresholdPolicy::default(),
            self.window.as_ref(),
            self.minimum_calls,
            self.degraded.as_ref(),
            self.unhealthy.as_ref(),
            "thresholds",
        )?;
        let fail = match self.on_unhealthy.as_deref() {
            None | Some("warn") => false,
            Some("fail") => true,
            Some(other) => {
                return Err(invalid(
                    "thresholds.on_unhealthy",
                    format!("{other:?}: give \"warn\" (the default) or \"fail\""),
                ));
            }
        };
        if self.tools.len() > MAX_RULES {
            return Err(invalid(
                "thresholds.tools",
                format!("more than {MAX_RULES}"),
            ));
        }
        let mut rules = Vec::new();
        for (i, t) in self.tools.iter().enumerate() {
            let prefix = format!("thresholds.tools[{i}]");
            if t.pattern.is_empty() || t.pattern.len() > 128 {
                return Err(invalid(
                    format!("{prefix}.match"),
                    "give a tool name or a glob of 1 to 128 characters",
                ));
            }
            let p = policy(
                overall,
                t.window.as_ref(),
                t.minimum_calls,
                t.degraded.as_ref(),
                t.unhealthy.as_ref(),
                &prefix,
            )?;
            rules.push((t.pattern.clone(), p));
        }
        let any_unhealthy =
            overall.unhealthy.is_some() || rules.iter().any(|(_, p)| p.unhealthy.is_some());
        if fail && !any_unhealthy {
            return Err(invalid(
                "thresholds.on_unhealthy",
                "\"fail\" needs unhealthy limits: add [thresholds.unhealthy]",
            ));
        }
        Ok(Settings {
            overall,
            rules,
            fail,
        })
    }
}

/// Whether `name` matches `pattern`: `*` any run of characters (none included), `?` exactly
/// one, anything else itself. Linear in the lengths' product at worst (no backtracking blow-up).
pub fn glob(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was, and the name position it matched up to.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(c) if *c == '?' || *c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[derive(Debug)]
struct Inner {
    settings: Settings,
    judge: Thresholds,
    /// The tools given a window of their own (a rule's policy applied once, at the first call).
    placed: HashSet<String>,
}

/// The live thresholds: fed on each call, read by `/readyz`.
#[derive(Debug)]
pub struct Live {
    inner: Mutex<Inner>,
    /// Time 0 of the windows' clock.
    origin: Instant,
}

impl Default for Live {
    fn default() -> Live {
        Live::new(Settings::default())
    }
}

impl Live {
    pub fn new(settings: Settings) -> Live {
        Live {
            inner: Mutex::new(Inner {
                judge: Thresholds::new(settings.overall, settings.overall),
                settings,
                placed: HashSet::new(),
            }),
            origin: Instant::now(),
        }
    }

    /// Replaces the settings (and forgets every call): the gateway's start.
    pub fn configure(&self, settings: Settings) {
        *self.lock() = Inner {
            judge: Thresholds::new(settings.overall, settings.overall),
            settings,
            placed: HashSet::new(),
        };
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// One `tools/call` answered: `listed` says whether the upstream listed the tool (only
    /// then does it get a window of its own).
    pub fn record(&self, tool: &str, listed: bool, failed: bool, latency: Duration) {
        let now = self.now_ms();
        let mut i = self.lock();
        if !listed {
            i.judge.record(now, None, failed, latency);
            return;
        }
        if !i.placed.contains(tool) && i.placed.len() < mcpulse_policy::thresholds::MAX_TOOLS {
            let rule = i
                .settings
                .rules
                .iter()
                .find(|(pattern, _)| glob(pattern, tool))
                .map(|(_, p)| *p);
            if let Some(p) = rule {
                i.judge.set_tool(tool, p);
            }
            i.placed.insert(tool.to_owned());
        }
        i.judge.record(now, Some(tool), failed, latency);
    }

    /// The tools given a window of their own so far, longest first (for tests).
    #[cfg(test)]
    pub(crate) fn placed(&self) -> Vec<String> {
        let mut v: Vec<String> = self.lock().placed.iter().cloned().collect();
        v.sort_by_key(|t| std::cmp::Reverse(t.len()));
        v
    }

    /// The `/readyz` checks: `calls:errorRate` always, a tool's only when it is not `pass`.
    /// Without `on_unhealthy = "fail"`, an unhealthy scope is shown as `warn`.
    pub fn checks(&self, time_ms: i64) -> Vec<Check> {
        let now = self.now_ms();
        let i = self.lock();
        let fail = i.settings.fail;
        let overall = std::iter::once(i.judge.overall(now));
        let tools = i.judge.tools(now).filter(|j| j.status != CheckStatus::Pass);
        overall
            .chain(tools)
            .map(|j| {
                let check = j.check(time_ms);
                if j.status == CheckStatus::Fail && !fail {
                    let out = j.output().unwrap_or_default();
                    check.status(CheckStatus::Warn).output(format!(
                        "{out} (on_unhealthy = \"warn\": readiness only warns)"
                    ))
                } else {
                    check
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawThresholds {
        toml::from_str(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn globs_match_runs_and_single_characters() {
        assert!(glob("search_*", "search_docs"));
        assert!(glob("search_*", "search_"));
        assert!(!glob("search_*", "research_docs"));
        assert!(glob("*", ""));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "ac"));
        assert!(glob("*db*", "orders_db_query"));
        assert!(glob("exact", "exact"));
        assert!(!glob("exact", "exactly"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
    }

    #[test]
    fn unset_values_are_inherited_and_bad_ones_are_named() {
        let s = raw("window = \"10s\"\nminimum_calls = 4\n[degraded]\nerror_rate = 0.5\n[[tools]]\nmatch = \"slow_*\"\ndegraded = { p95 = \"2s\" }\n")
            .resolve()
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(s.overall.minimum_calls, 4);
        assert_eq!(s.overall.degraded.error_rate, Some(0.5));
        assert_eq!(s.overall.degraded.p95, Some(Duration::from_secs(30)));
        let (_, tool) = &s.rules[0];
        assert_eq!(tool.minimum_calls, 4);
        assert_eq!(tool.degraded.error_rate, Some(0.5));
        assert_eq!(tool.degraded.p95, Some(Duration::from_secs(2)));
        assert!(!s.fail);
        let e = raw("on_unhealthy = \"fail\"").resolve().unwrap_err();
        assert_eq!(e.key, "thresholds.on_unhealthy");
        let e = raw("[degraded]\nerror_rate = 0").resolve().unwrap_err();
        assert_eq!(e.key, "thresholds.degraded.error_rate");
        let e = raw("[degraded]\nerror_rate = 0.5\n[unhealthy]\nerror_rate = 0.2")
            .resolve()
            .unwrap_err();
        assert_eq!(e.key, "thresholds.unhealthy.error_rate");
        let e = raw("window = \"1ms\"").resolve().unwrap_err();
        assert_eq!(e.key, "thresholds.window");
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_rate_warns_then_the_window_slides_it_back_to_pass() {
        let s = raw("window = \"10s\"\nminimum_calls = 4\n[degraded]\nerror_rate = 0.5\n[unhealthy]\nerror_rate = 0.9\n")
            .resolve()
            .unwrap_or_else(|e| panic!("{e:?}"));
        let live = Live::new(s);
        let fast = Duration::from_millis(5);
        for _ in 0..4 {
            live.record("search", true, false, fast);
        }
        let status = |l: &Live| l.checks(0).iter().map(|c| c.status).max();
        assert_eq!(status(&live), Some(CheckStatus::Pass));
        for _ in 0..4 {
            live.record("search", true, true, fast);
        }
        assert_eq!(status(&live), Some(CheckStatus::Warn));
        // All failing: unhealthy, but shown as warn (on_unhealthy defaults to warn).
        for _ in 0..40 {
            live.record("search", true, true, fast);
        }
        let checks = live.checks(0);
        assert!(checks.iter().all(|c| c.status == CheckStatus::Warn));
        let out = checks[0].output.clone().unwrap_or_default();
        assert!(
            out.contains("unhealthy limit") && out.contains("readiness only warns"),
            "{out}"
        );
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(status(&live), Some(CheckStatus::Pass));
        assert_eq!(live.checks(0).len(), 1, "a passing tool is not listed");
    }

    #[test]
    fn unlisted_tools_count_overall_only() {
        let live = Live::default();
        for i in 0..1000 {
            live.record(&format!("made-up-{i}"), false, true, Duration::ZERO);
        }
        assert!(live.lock().placed.is_empty());
        let checks = live.checks(0);
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].status, CheckStatus::Warn);
    }
}
