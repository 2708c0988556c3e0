//! The call policies' settings: `tool_timeout`, `[concurrency]` and `[[tools]]` in the
//! gateway's config file, read with the conventions of [`crate::config`] (unknown keys
//! rejected, errors at `file:line:column` naming the setting and the rule, each policy's own
//! `validate()`), resolved into [`Settings`]. Documented in docs/gateway.md
//! `## Resilience policies`.

use crate::config::{At, ConfigError, Source, duration, number};
use mcpulse_policy::breaker::{BreakerPolicy, FailureKind, FailureSet};
use mcpulse_policy::limit::{LimitPolicy, MAX_QUEUE};
use mcpulse_policy::retry::{BudgetPolicy, RetryPolicy};
use mcpulse_policy::window::{MAX_BUCKETS, MAX_COUNT, WindowSpec};
use serde::Deserialize;
use std::time::Duration;

/// The defaults, in one place.
pub struct Defaults;

impl Defaults {
    /// A `tools/call` answered by no one in 30 s gets the gateway's `isError` result: half of
    /// the 60 s that the TypeScript and Python SDKs wait by default, so the agent reads an
    /// explicit error naming the tool before its own client gives up with a bare timeout.
    pub const TOOL_TIMEOUT: Duration = Duration::from_secs(30);
    /// With `progress_extends` and no `max_timeout`: four times the tool's timeout.
    pub const MAX_TIMEOUT_FACTOR: u32 = 4;
    /// At most 64 tool calls run at once through the gateway (more than a handful of agents
    /// ever make; a stdio server past it is usually already swapping), 128 wait, each at
    /// most 10 s (shorter than the tool timeout: a queue is for bursts, not for outages).
    pub const CONCURRENCY: LimitPolicy = LimitPolicy {
        max_concurrent: 64,
        queue: 128,
        queue_timeout: Duration::from_secs(10),
    };
}

/// The most `[[tools]]` entries (each is matched per call, in order).
pub const MAX_RULES: usize = 256;

/// `[concurrency]`, and the limit keys of a `[[tools]]` entry.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawConcurrency {
    pub max_concurrent: Option<At<i64>>,
    pub queue: Option<At<i64>>,
    pub queue_timeout: Option<At<String>>,
}

/// A `breaker = { ... }` table: [`BreakerPolicy`]'s fields.
#[derive(Debug, Deserialize, Default, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawBreaker {
    /// A count-based window: the last N calls.
    pub window_calls: Option<At<i64>>,
    /// A time-based window: the calls of the last span (10 slots).
    pub window_time: Option<At<String>>,
    pub minimum_calls: Option<At<i64>>,
    pub failure_rate: Option<At<f64>>,
    pub slow_call_rate: Option<At<f64>>,
    pub slow_call_duration: Option<At<String>>,
    pub wait_in_open: Option<At<String>>,
    pub half_open_trials: Option<At<i64>>,
    /// Which failures count: `jsonrpc_error`, `tool_error`, `timeout`, `transport`.
    pub count: Option<At<Vec<String>>>,
}

/// One `[[tools]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTool {
    /// An exact tool name, or a glob (`*` any run of characters, `?` one).
    pub name: At<String>,
    pub timeout: Option<At<String>>,
    pub progress_extends: Option<At<bool>>,
    pub max_timeout: Option<At<String>>,
    pub max_concurrent: Option<At<i64>>,
    pub queue: Option<At<i64>>,
    pub queue_timeout: Option<At<String>>,
    pub breaker: Option<At<RawBreaker>>,
    pub retry: Option<At<RawRetry>>,
}

/// A `retry = { ... }` table: [`RetryPolicy`]'s fields (its presence is the opt-in).
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawRetry {
    pub max_attempts: Option<At<i64>>,
    pub backoff_initial: Option<At<String>>,
    pub backoff_max: Option<At<String>>,
    /// Which failures are retried (`timeout`, `transport`, ...).
    pub on: Option<At<Vec<String>>>,
    /// The whole call, all attempts and backoffs together.
    pub deadline: Option<At<String>>,
}

/// `[retry_budget]`: the gateway-wide budget every retry draws on ([`BudgetPolicy`]).
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawBudget {
    /// The window requests and retries are counted over (`ttl`).
    pub window: Option<At<String>>,
    /// Retries a second allowed whatever the traffic.
    pub min_per_second: Option<At<i64>>,
    /// Retries allowed per request, 0 to 1.
    pub ratio: Option<At<f64>>,
}

/// One resolved `[[tools]]` entry: the policy unit. The tools it matches share its limiter
/// and its breaker (a tool that needs its own gets an entry of its own, before the glob).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRule {
    /// The name or glob, as written (the breaker's and the limiter's name in logs, metrics
    /// and `/readyz`).
    pub pattern: String,
    pub timeout: Option<Duration>,
    /// Progress with the client's `progressToken` restarts the timeout, up to `max_timeout`
    /// from the call's start.
    pub progress_extends: bool,
    pub max_timeout: Option<Duration>,
    pub limit: Option<LimitPolicy>,
    pub breaker: Option<BreakerPolicy>,
    /// Opt-in; applied only to tools the server annotates `readOnlyHint` or `idempotentHint`.
    pub retry: Option<RetryPolicy>,
}

/// A dependency's tools (`[[checks]]` with `tools`): they fail fast while the check is
/// confirmed failing, and share a breaker when one is given.
#[derive(Debug, Clone, PartialEq)]
pub struct DependencyRule {
    /// The check's name.
    pub check: String,
    /// Tool names or globs.
    pub tools: Vec<String>,
    pub breaker: Option<BreakerPolicy>,
}

impl DependencyRule {
    /// The breaker's name in logs, metrics and `/readyz`.
    pub fn breaker_name(&self) -> String {
        format!("dependency:{}", self.check)
    }
}

/// Every call policy, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The timeout of a `tools/call` no entry gives one (`tool_timeout`).
    pub tool_timeout: Duration,
    /// Gateway-wide: every `tools/call` holds a slot of it (`[concurrency]`).
    pub concurrency: Option<LimitPolicy>,
    /// `[[tools]]`, in the file's order: the first whose pattern matches wins.
    pub tools: Vec<ToolRule>,
    /// `[[checks]]` that list tools, in the file's order: the first that matches wins.
    pub dependencies: Vec<DependencyRule>,
    /// `[retry_budget]`: what all the entries' retries share.
    pub budget: BudgetPolicy,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            tool_timeout: Defaults::TOOL_TIMEOUT,
            concurrency: Some(Defaults::CONCURRENCY),
            tools: Vec::new(),
            dependencies: Vec::new(),
            budget: BudgetPolicy::default(),
        }
    }
}

impl Settings {
    /// The entry for `tool`: the first whose pattern matches.
    pub fn rule(&self, tool: &str) -> Option<(usize, &ToolRule)> {
        self.tools
            .iter()
            .enumerate()
            .find(|(_, r)| glob(&r.pattern, tool))
    }

    /// The dependency whose tools include `tool`: the first that lists it.
    pub fn dependency(&self, tool: &str) -> Option<(usize, &DependencyRule)> {
        self.dependencies
            .iter()
            .enumerate()
            .find(|(_, d)| d.tools.iter().any(|p| glob(p, tool)))
    }

    /// A `tools/call` of `tool`: its timeout, and how far progress may extend it.
    pub fn timeout(&self, tool: &str) -> (Duration, Option<Duration>) {
        let Some((_, r)) = self.rule(tool) else {
            return (self.tool_timeout, None);
        };
        let t = r.timeout.unwrap_or(self.tool_timeout);
        let max = r.progress_extends.then(|| {
            r.max_timeout
                .unwrap_or(t.saturating_mul(Defaults::MAX_TIMEOUT_FACTOR))
        });
        (t, max)
    }
}

/// Whether `name` matches `pattern` (`*`: any run of characters, `?`: one; no other
/// metacharacter). Linear in both (one backtrack point), no allocation.
pub fn glob(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        match p.get(i) {
            Some(b'*') => {
                star = Some((i, j));
                i += 1;
            }
            Some(c) if *c == b'?' || *c == n[j] => {
                i += 1;
                j += 1;
            }
            _ => match star {
                Some((si, sj)) => {
                    i = si + 1;
                    j = sj + 1;
                    star = Some((si, sj + 1));
                }
                None => return false,
            },
        }
    }
    p.get(i..)
        .is_some_and(|rest| rest.iter().all(|c| *c == b'*'))
}

/// A tool name or glob: 1 to 128 of A-Z a-z 0-9 _ - . / and `*` `?`.
fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '*' | '?'))
}

fn limit(
    src: &Source<'_>,
    key: &str,
    max_concurrent: Option<&At<i64>>,
    queue: Option<&At<i64>>,
    queue_timeout: Option<&At<String>>,
    defaults: LimitPolicy,
) -> Result<LimitPolicy, ConfigError> {
    let mut l = defaults;
    if let Some(v) = max_concurrent {
        l.max_concurrent = number(src, v, &format!("{key}max_concurrent"), (1, 100_000))?
            .try_into()
            .unwrap_or(u32::MAX);
    }
    if let Some(v) = queue {
        let max = usize::try_from(MAX_QUEUE).unwrap_or(usize::MAX);
        l.queue = number(src, v, &format!("{key}queue"), (0, max))?
            .try_into()
            .unwrap_or(MAX_QUEUE);
    }
    if let Some(v) = queue_timeout {
        l.queue_timeout = duration(src, v, &format!("{key}queue_timeout"))?;
    }
    Ok(l)
}

fn failure_set(
    src: &Source<'_>,
    v: &At<Vec<String>>,
    key: &str,
) -> Result<FailureSet, ConfigError> {
    let mut set = FailureSet::NONE;
    for name in v.get_ref() {
        let Some(kind) = FailureKind::parse(name) else {
            return Err(src.at(
                v,
                key,
                format!(
                    "{name:?} is not a failure kind: give any of \"jsonrpc_error\", \"tool_error\", \"timeout\", \"transport\""
                ),
            ));
        };
        set = set.with(kind);
    }
    Ok(set)
}

fn retry(src: &Source<'_>, raw: &At<RawRetry>, key: &str) -> Result<RetryPolicy, ConfigError> {
    let r = raw.get_ref();
    let mut p = RetryPolicy::default();
    let k = |name: &str| format!("{key}.{name}");
    if let Some(v) = &r.max_attempts {
        p.max_attempts = number(src, v, &k("max_attempts"), (1, 10))?
            .try_into()
            .unwrap_or(1);
    }
    if let Some(v) = &r.backoff_initial {
        p.backoff.initial = duration(src, v, &k("backoff_initial"))?;
    }
    if let Some(v) = &r.backoff_max {
        p.backoff.max = duration(src, v, &k("backoff_max"))?;
    }
    if let Some(v) = &r.deadline {
        p.deadline = Some(duration(src, v, &k("deadline"))?);
    }
    if let Some(v) = &r.on {
        p.retry_on = failure_set(src, v, &k("on"))?;
        // A JSON-RPC error or an `isError` result is the server's answer (and a cancelled
        // call's -32800 is a JSON-RPC error): sending it again could do the work twice.
        if p.retry_on.contains(FailureKind::JsonRpcError)
            || p.retry_on.contains(FailureKind::ToolError)
        {
            return Err(src.at(
                v,
                &k("on"),
                "only \"timeout\" and \"transport\" can be retried: a JSON-RPC error or an isError result is the server's answer, and the call may have run",
            ));
        }
    }
    p.validate()
        .map_err(|e| src.at(raw, &k(e.setting), e.rule))?;
    Ok(p)
}

fn budget(src: &Source<'_>, raw: &At<RawBudget>) -> Result<BudgetPolicy, ConfigError> {
    let r = raw.get_ref();
    let mut p = BudgetPolicy::default();
    if let Some(v) = &r.window {
        p.ttl = duration(src, v, "retry_budget.window")?;
    }
    if let Some(v) = &r.min_per_second {
        p.min_per_sec = number(src, v, "retry_budget.min_per_second", (0, 10_000))?
            .try_into()
            .unwrap_or(0);
    }
    if let Some(v) = &r.ratio {
        p.ratio = *v.get_ref();
    }
    p.validate().map_err(|e| {
        let key = match e.setting {
            "budget.ttl" => "retry_budget.window",
            _ => "retry_budget.ratio",
        };
        src.at(raw, key, e.rule)
    })?;
    Ok(p)
}

fn rate(src: &Source<'_>, v: &At<f64>, key: &str) -> Result<f64, ConfigError> {
    let r = *v.get_ref();
    if r > 0.0 && r <= 1.0 {
        Ok(r)
    } else {
        Err(src.at(v, key, format!("{r} is out of range: give above 0 to 1")))
    }
}

fn breaker(
    src: &Source<'_>,
    raw: &At<RawBreaker>,
    key: &str,
) -> Result<BreakerPolicy, ConfigError> {
    let b = raw.get_ref();
    let mut p = BreakerPolicy::default();
    let k = |name: &str| format!("{key}.{name}");
    match (&b.window_calls, &b.window_time) {
        (Some(_), Some(v)) => {
            return Err(src.at(
                v,
                &k("window_time"),
                "give window_calls or window_time, not both",
            ));
        }
        (Some(v), None) => {
            let max = usize::try_from(MAX_COUNT).unwrap_or(usize::MAX);
            p.window = WindowSpec::Count {
                calls: number(src, v, &k("window_calls"), (1, max))?
                    .try_into()
                    .unwrap_or(MAX_COUNT),
            };
        }
        (None, Some(v)) => {
            let span = duration(src, v, &k("window_time"))?;
            if span < Duration::from_secs(1) {
                return Err(src.at(v, &k("window_time"), "must be at least 1s"));
            }
            p.window = WindowSpec::Time {
                span,
                buckets: 10.min(MAX_BUCKETS),
            };
        }
        (None, None) => {}
    }
    if let Some(v) = &b.minimum_calls {
        p.minimum_calls = number(src, v, &k("minimum_calls"), (1, 100_000))?
            .try_into()
            .unwrap_or(u32::MAX);
    }
    if let Some(v) = &b.failure_rate {
        p.failure_rate = rate(src, v, &k("failure_rate"))?;
    }
    if let Some(v) = &b.slow_call_rate {
        p.slow_call_rate = Some(rate(src, v, &k("slow_call_rate"))?);
    }
    if let Some(v) = &b.slow_call_duration {
        p.slow_call_duration = duration(src, v, &k("slow_call_duration"))?;
    }
    if let Some(v) = &b.wait_in_open {
        p.wait_in_open = duration(src, v, &k("wait_in_open"))?;
        if p.wait_in_open < Duration::from_millis(10) {
            return Err(src.at(v, &k("wait_in_open"), "must be at least 10ms"));
        }
    }
    if let Some(v) = &b.half_open_trials {
        p.half_open_trials = number(src, v, &k("half_open_trials"), (1, 1000))?
            .try_into()
            .unwrap_or(u32::MAX);
    }
    if let Some(v) = &b.count {
        p.counted = failure_set(src, v, &k("count"))?;
    }
    p.validate()
        .map_err(|e| src.at(raw, &k(e.setting), e.rule))?;
    Ok(p)
}

/// Resolves the call policies' keys of the file.
pub(crate) fn resolve(
    src: &Source<'_>,
    tool_timeout: Option<&At<String>>,
    concurrency: Option<&At<RawConcurrency>>,
    retry_budget: Option<&At<RawBudget>>,
    tools: &[At<RawTool>],
    checks: &[crate::checks::CheckSpec],
) -> Result<Settings, ConfigError> {
    let mut s = Settings::default();
    if let Some(b) = retry_budget {
        s.budget = budget(src, b)?;
    }
    for (i, c) in checks.iter().enumerate() {
        let key = format!("checks[{i}].");
        // A check's plain keys keep no span: errors point at its `[[checks]]` header.
        let header = || {
            src.text()
                .match_indices("[[checks]]")
                .nth(i)
                .map_or(0, |(o, _)| o)
        };
        if let Some(bad) = c.tools.iter().find(|t| !name_ok(t)) {
            return Err(src.offset(
                header(),
                &format!("{key}tools"),
                format!("{bad:?}: a tool name or glob is 1 to 128 of A-Z a-z 0-9 _ - . / and * ?"),
            ));
        }
        if c.tools.is_empty() {
            if let Some(b) = &c.breaker {
                return Err(src.at(
                    b,
                    &format!("{key}breaker"),
                    "needs tools = [...]: the tools that share it",
                ));
            }
            continue;
        }
        let breaker = c
            .breaker
            .as_ref()
            .map(|b| breaker(src, b, &format!("{key}breaker")))
            .transpose()?;
        s.dependencies.push(DependencyRule {
            check: c.name.clone(),
            tools: c.tools.clone(),
            breaker,
        });
    }
    if let Some(v) = tool_timeout {
        s.tool_timeout = duration(src, v, "tool_timeout")?;
        if s.tool_timeout < Duration::from_millis(10) {
            return Err(src.at(v, "tool_timeout", "must be at least 10ms"));
        }
    }
    if let Some(c) = concurrency {
        let r = c.get_ref();
        let l = limit(
            src,
            "concurrency.",
            r.max_concurrent.as_ref(),
            r.queue.as_ref(),
            r.queue_timeout.as_ref(),
            Defaults::CONCURRENCY,
        )?;
        l.validate()
            .map_err(|e| src.at(c, &format!("concurrency.{}", e.setting), e.rule))?;
        s.concurrency = Some(l);
    }
    if tools.len() > MAX_RULES {
        return Err(src.offset(
            0,
            "tools",
            format!("more than {MAX_RULES} [[tools]] entries"),
        ));
    }
    for (i, t) in tools.iter().enumerate() {
        let r = t.get_ref();
        let key = format!("tools[{i}].");
        let name = r.name.get_ref();
        let ok = !name.is_empty()
            && name.len() <= 128
            && name.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '*' | '?')
            });
        if !ok {
            return Err(src.at(
                &r.name,
                &format!("{key}name"),
                format!("{name:?}: a tool name or glob is 1 to 128 of A-Z a-z 0-9 _ - . / and * ?"),
            ));
        }
        if s.tools.iter().any(|o| o.pattern == *name) {
            return Err(src.at(
                &r.name,
                &format!("{key}name"),
                format!("{name:?} has an entry already"),
            ));
        }
        let timeout = r
            .timeout
            .as_ref()
            .map(|v| duration(src, v, &format!("{key}timeout")))
            .transpose()?;
        let max_timeout = r
            .max_timeout
            .as_ref()
            .map(|v| duration(src, v, &format!("{key}max_timeout")))
            .transpose()?;
        let progress_extends = r.progress_extends.as_ref().is_some_and(|v| *v.get_ref());
        if let Some(v) = &r.max_timeout {
            if !progress_extends {
                return Err(src.at(
                    v,
                    &format!("{key}max_timeout"),
                    "applies only with progress_extends = true",
                ));
            }
            let t = timeout.unwrap_or(s.tool_timeout);
            if max_timeout.is_some_and(|m| m < t) {
                return Err(src.at(
                    v,
                    &format!("{key}max_timeout"),
                    "is shorter than the tool's timeout",
                ));
            }
        }
        let limited = r.max_concurrent.is_some() || r.queue.is_some() || r.queue_timeout.is_some();
        let limit = if limited {
            let l = limit(
                src,
                &key,
                r.max_concurrent.as_ref(),
                r.queue.as_ref(),
                r.queue_timeout.as_ref(),
                LimitPolicy::default(),
            )?;
            l.validate()
                .map_err(|e| src.at(t, &format!("{key}{}", e.setting), e.rule))?;
            Some(l)
        } else {
            None
        };
        let breaker = r
            .breaker
            .as_ref()
            .map(|b| breaker(src, b, &format!("{key}breaker")))
            .transpose()?;
        let retry = r
            .retry
            .as_ref()
            .map(|v| retry(src, v, &format!("{key}retry")))
            .transpose()?;
        s.tools.push(ToolRule {
            pattern: name.clone(),
            timeout,
            progress_extends,
            max_timeout,
            limit,
            breaker,
            retry,
        });
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Settings, String> {
        let text = format!("{text}\n[upstream]\ncommand = [\"x\"]\n");
        crate::config::parse(&text, "gateway.toml", &|_| None)
            .map(|g| g.policies)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_retry_budget_is_configurable_and_checked() {
        let s =
            parse("[retry_budget]\nwindow = \"30s\"\nmin_per_second = 2\nratio = 0.1\n").unwrap();
        assert_eq!(
            s.budget,
            BudgetPolicy {
                ttl: Duration::from_secs(30),
                min_per_sec: 2,
                ratio: 0.1
            }
        );
        let e = parse("[retry_budget]\nratio = 1.5\n").unwrap_err();
        assert!(e.contains("retry_budget.ratio"), "{e}");
        let e = parse("[retry_budget]\nwindow = \"100ms\"\n").unwrap_err();
        assert!(e.contains("retry_budget.window"), "{e}");
    }

    #[test]
    fn a_retry_deadline_bounds_the_whole_call() {
        let s = parse("[[tools]]\nname = \"read_*\"\nretry = { deadline = \"8s\" }\n").unwrap();
        assert_eq!(
            s.tools[0].retry.map(|r| r.deadline),
            Some(Some(Duration::from_secs(8)))
        );
        let s = parse("[[tools]]\nname = \"read_*\"\nretry = {}\n").unwrap();
        assert_eq!(s.tools[0].retry.map(|r| r.deadline), Some(None));
        let e = parse("[[tools]]\nname = \"read_*\"\nretry = { deadline = \"0s\" }\n").unwrap_err();
        assert!(
            e.contains("retry.deadline") && e.contains("must be more than zero"),
            "{e}"
        );
        let e =
            parse("[[tools]]\nname = \"read_*\"\nretry = { deadline = \"soon\" }\n").unwrap_err();
        assert!(e.contains("retry.deadline"), "{e}");
    }

    #[test]
    fn only_timeouts_and_transport_failures_can_be_retried() {
        for kind in ["jsonrpc_error", "tool_error"] {
            let e = parse(&format!(
                "[[tools]]\nname = \"read_*\"\nretry = {{ on = [\"timeout\", \"{kind}\"] }}\n"
            ))
            .unwrap_err();
            assert!(
                e.contains("tools[0].retry.on") || e.contains("retry.on"),
                "{e}"
            );
            assert!(e.contains("only \"timeout\" and \"transport\""), "{e}");
        }
        let s =
            parse("[[tools]]\nname = \"read_*\"\nretry = { on = [\"timeout\", \"transport\"] }\n")
                .unwrap();
        assert!(s.tools[0].retry.is_some());
    }

    #[test]
    fn defaults_and_a_full_entry() {
        let s = parse("").unwrap();
        assert_eq!(s, Settings::default());
        assert_eq!(s.timeout("any"), (Duration::from_secs(30), None));
        let s = parse(
            r#"
tool_timeout = "20s"

[concurrency]
max_concurrent = 8
queue = 16
queue_timeout = "2s"

[[tools]]
name = "export_report"
timeout = "5m"

[[tools]]
name = "search_*"
timeout = "10s"
progress_extends = true
max_timeout = "1m"
max_concurrent = 4
queue = 8
queue_timeout = "1s"
breaker = { window_calls = 20, minimum_calls = 5, failure_rate = 0.5, wait_in_open = "15s", half_open_trials = 2, count = ["timeout", "transport"] }
"#,
        )
        .unwrap();
        assert_eq!(s.tool_timeout, Duration::from_secs(20));
        assert_eq!(
            s.concurrency,
            Some(LimitPolicy {
                max_concurrent: 8,
                queue: 16,
                queue_timeout: Duration::from_secs(2)
            })
        );
        assert_eq!(s.timeout("export_report"), (Duration::from_secs(300), None));
        assert_eq!(
            s.timeout("search_web"),
            (Duration::from_secs(10), Some(Duration::from_secs(60)))
        );
        assert_eq!(s.timeout("other"), (Duration::from_secs(20), None));
        let (i, r) = s.rule("search_web").unwrap();
        assert_eq!(i, 1);
        let b = r.breaker.unwrap();
        assert_eq!(b.window, WindowSpec::Count { calls: 20 });
        assert_eq!(b.minimum_calls, 5);
        assert_eq!(b.half_open_trials, 2);
        assert!(b.counted.contains(FailureKind::Timeout));
        assert!(!b.counted.contains(FailureKind::ToolError));
        assert_eq!(r.limit.map(|l| l.max_concurrent), Some(4));
    }

    #[test]
    fn a_check_lists_the_tools_that_depend_on_it() {
        let s = parse(
            "[[checks]]\nname = \"db\"\nkind = \"tcp\"\ntarget = \"127.0.0.1:5432\"\ntools = [\"query_*\", \"report\"]\nbreaker = { minimum_calls = 3 }\n",
        )
        .unwrap();
        let (_, d) = s.dependency("query_orders").unwrap();
        assert_eq!(d.check, "db");
        assert_eq!(d.breaker_name(), "dependency:db");
        assert_eq!(d.breaker.map(|b| b.minimum_calls), Some(3));
        assert!(s.dependency("report").is_some());
        assert!(s.dependency("echo").is_none());
        let e = parse(
            "[[checks]]\nname = \"db\"\nkind = \"tcp\"\ntarget = \"127.0.0.1:5432\"\nbreaker = { minimum_calls = 3 }\n",
        )
        .unwrap_err();
        assert!(e.contains("checks[0].breaker: needs tools"), "{e}");
    }

    #[test]
    fn errors_name_the_setting_and_the_rule() {
        let e = parse("[[tools]]\nname = \"a\"\nbreaker = { failure_rate = 1.5 }\n").unwrap_err();
        assert_eq!(
            e,
            "gateway.toml:3:28: tools[0].breaker.failure_rate: 1.5 is out of range: give above 0 to 1"
        );
        let e = parse("[[tools]]\nname = \"a\"\nbreaker = { count = [\"error\"] }\n").unwrap_err();
        assert!(
            e.contains("tools[0].breaker.count: \"error\" is not a failure kind"),
            "{e}"
        );
        let e = parse("[[tools]]\nname = \"a\"\nmax_timeout = \"1m\"\n").unwrap_err();
        assert!(
            e.contains("applies only with progress_extends = true"),
            "{e}"
        );
        let e = parse("[[tools]]\nname = \"a b\"\n").unwrap_err();
        assert!(e.starts_with("gateway.toml:2:8: tools[0].name: "), "{e}");
        let e = parse("[concurrency]\nmax_concurrent = 0\n").unwrap_err();
        assert!(
            e.contains("concurrency.max_concurrent: 0 is out of range"),
            "{e}"
        );
        let e = parse("[[tools]]\nname = \"a\"\ntimeot = \"1s\"\n").unwrap_err();
        assert!(e.contains("timeot"), "{e}");
        let e = parse("[[tools]]\nname = \"a\"\n[[tools]]\nname = \"a\"\n").unwrap_err();
        assert!(e.contains("has an entry already"), "{e}");
    }

    #[test]
    fn globs_match_whole_names() {
        assert!(glob("search", "search"));
        assert!(!glob("search", "search2"));
        assert!(glob("search_*", "search_web"));
        assert!(glob("search_*", "search_"));
        assert!(!glob("search_*", "research_web"));
        assert!(glob("*_web", "search_web"));
        assert!(glob("a*b*c", "aXXbYYbc"));
        assert!(!glob("a*b*c", "aXXbYYb"));
        assert!(glob("?", "x"));
        assert!(!glob("?", ""));
        assert!(glob("*", ""));
        assert!(glob("**", "anything"));
    }
}
