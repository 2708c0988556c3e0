//! Dependency checks (`[[checks]]`): TCP connect, HTTP GET, a command, the upstream's own
//! health tool. Each runs on its own schedule (a tokio task per check, first run after a
//! jittered delay of at most a second, then every `interval`); its result is folded into its
//! confirmed level ([`mcpulse_policy::check`]: failure and success thresholds, degraded
//! latency) and cached in [`crate::health::Registry`]. Readiness reads the cache: no check
//! ever runs on a request's path.
//!
//! What it owns: the `[[checks]]` entry ([`CheckSpec`], as written), its validation into a
//! [`Check`], running one ([`run_once`]) and the schedule ([`spawn`]). What it does not: the
//! thresholds' logic (`mcpulse-policy`), where the file's errors are (the config's parser adds
//! the line and column to a [`SpecError`]), rendering (`health`).
//!
//! Everything a check quotes (an HTTP status line, a command's output, a tool's message) is
//! hostile text: it is made inert and cut ([`mcpulse_wire::text`]) before it is cached.

mod command;
mod http;
mod tcp;
pub(crate) mod tool;

pub use tool::{PROBE_HEADER, Session, ToolSession, is_own_probe, probe_token};

use crate::state::Shared;
use mcpulse_policy::check::{
    DEFAULT_FAILURE_THRESHOLD, DEFAULT_SUCCESS_THRESHOLD, Raw, Thresholds,
};
use mcpulse_policy::health::CheckStatus;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// `interval` by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(20);
/// `timeout` by default: Kubernetes' probe default is 1 s, but a dependency check goes over
/// the network to something that may be busy; 5 s is the probe's call budget too.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// The shortest `interval`: a dependency checked more often than this is being load-tested.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// The longest check name (a metric label, a health+json key, a log field).
pub const MAX_NAME_CHARS: usize = 64;
/// The most characters of a check's `output` kept (a status line, a command's first line).
pub const MAX_OUTPUT_CHARS: usize = 300;
/// Names a dependency cannot take: the gateway's own components in `/livez` and `/readyz`.
pub const RESERVED_NAMES: [&str; 4] = ["process", "protocol", "tools", "eventloop"];

/// The kinds of check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Connect to `target` (`host:port`), then close.
    Tcp,
    /// `GET url`: the status must be one of `expect_status` (any 2xx by default).
    Http,
    /// Run `command` (argv, no shell): exit 0 passes.
    Command,
    /// Call the upstream's own health tool `tool` over MCP and fold its reported status in.
    Tool,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Tcp => "tcp",
            Kind::Http => "http",
            Kind::Command => "command",
            Kind::Tool => "tool",
        }
    }
}

/// One `[[checks]]` entry, as written in the config. Durations are strings in the forms of
/// [`mcpulse_wire::units::duration`] (`500ms`, `20s`, `2m`). [`CheckSpec::resolve`] validates
/// it into a [`Check`]; the config calls it and places its error in the file.
///
/// ```toml
/// [[checks]]
/// name = "orders-db"
/// kind = "tcp"
/// target = "db.internal:5432"
/// interval = "10s"
/// degraded_latency = "200ms"
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CheckSpec {
    pub name: String,
    pub kind: Kind,
    /// `tcp`: `host:port`.
    #[serde(default)]
    pub target: Option<String>,
    /// `http`: the URL to `GET` (http or https).
    #[serde(default)]
    pub url: Option<String>,
    /// `http`: the statuses that pass (any 2xx when empty).
    #[serde(default)]
    pub expect_status: Vec<u16>,
    /// `command`: the argv, run without a shell.
    #[serde(default)]
    pub command: Vec<String>,
    /// `command`: the gateway's environment variables passed to it (it gets a clean
    /// environment otherwise: the gateway's may hold credentials).
    #[serde(default)]
    pub env: Vec<String>,
    /// `tool`: the upstream's health tool.
    #[serde(default)]
    pub tool: Option<String>,
    #[serde(default)]
    pub interval: Option<String>,
    #[serde(default)]
    pub timeout: Option<String>,
    /// A passing run slower than this is degraded (`warn`).
    #[serde(default)]
    pub degraded_latency: Option<String>,
    /// A critical check that fails makes `/readyz` 503; a non-critical one only warns.
    #[serde(default)]
    pub critical: Option<bool>,
    #[serde(default)]
    pub failure_threshold: Option<u32>,
    #[serde(default)]
    pub success_threshold: Option<u32>,
    /// The upstream's tools that depend on this (names or globs): while this check is
    /// confirmed failing they fail fast (crate::policy; docs/gateway.md `### Dependencies`).
    #[serde(default)]
    pub tools: Vec<String>,
    /// A circuit breaker those tools share, fed by their own outcomes.
    #[serde(default)]
    pub breaker: Option<crate::config::At<crate::policy::config::RawBreaker>>,
}

/// Why a `[[checks]]` entry was refused (the config adds where it is).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("check name {0:?} must be 1 to {MAX_NAME_CHARS} letters, digits, '-', '_' or '.'")]
    Name(String),
    #[error("check name {0:?} is the gateway's own component; choose another")]
    Reserved(String),
    #[error("check name {0:?} is used twice; each check needs its own")]
    Duplicate(String),
    #[error("check {name:?}: a {kind} check needs `{field}`")]
    Missing {
        name: String,
        kind: &'static str,
        field: &'static str,
    },
    #[error("check {name:?}: `{field}` does not apply to a {kind} check")]
    Extra {
        name: String,
        kind: &'static str,
        field: &'static str,
    },
    #[error("check {name:?}: `{field}`: {message}")]
    Invalid {
        name: String,
        field: &'static str,
        message: String,
    },
}

/// What a check does, validated.
#[derive(Debug, Clone, PartialEq)]
pub enum Probe {
    Tcp { host: String, port: u16 },
    Http { url: ::http::Uri, expect: Vec<u16> },
    Command { argv: Vec<String>, env: Vec<String> },
    Tool { tool: String },
}

/// One check, validated: what it does, when, and how its results are judged.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub name: String,
    pub probe: Probe,
    pub interval: Duration,
    pub timeout: Duration,
    pub critical: bool,
    pub thresholds: Thresholds,
}

impl Check {
    pub fn kind(&self) -> Kind {
        match self.probe {
            Probe::Tcp { .. } => Kind::Tcp,
            Probe::Http { .. } => Kind::Http,
            Probe::Command { .. } => Kind::Command,
            Probe::Tool { .. } => Kind::Tool,
        }
    }

    /// What is checked, for the health+json `componentId` (an URL without its credentials,
    /// `host:port`, the program, the tool).
    pub fn component_id(&self) -> String {
        match &self.probe {
            Probe::Tcp { host, port } => format!("{host}:{port}"),
            Probe::Http { url, .. } => mcpulse_wire::redact::url(&url.to_string()),
            Probe::Command { argv, .. } => {
                mcpulse_wire::text::field(argv.first().map_or("", String::as_str)).into_owned()
            }
            Probe::Tool { tool } => mcpulse_wire::text::field(tool).into_owned(),
        }
    }

    /// The health+json `componentType`: a TCP or HTTP dependency is most often a datastore or
    /// a service; the draft's `component` fits both, `system` fits a command.
    pub fn component_type(&self) -> &'static str {
        match self.probe {
            Probe::Command { .. } => "system",
            _ => "component",
        }
    }
}

fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl CheckSpec {
    /// Validates the entry: the name (a metric label and a health+json key: plain ASCII, and
    /// not one of [`RESERVED_NAMES`]), the fields its kind needs and only those, durations,
    /// thresholds. Defaults: `interval` 20 s, `timeout` 5 s (at most the interval),
    /// `critical` true, `failure_threshold` 3, `success_threshold` 1.
    pub fn resolve(&self) -> Result<Check, SpecError> {
        let name = self.name.clone();
        if !name_ok(&name) {
            return Err(SpecError::Name(name));
        }
        if RESERVED_NAMES.contains(&name.as_str()) {
            return Err(SpecError::Reserved(name));
        }
        let kind = self.kind.as_str();
        let missing = |field| SpecError::Missing {
            name: self.name.clone(),
            kind,
            field,
        };
        let invalid = |field, message: String| SpecError::Invalid {
            name: self.name.clone(),
            field,
            message,
        };
        // The fields of the other kinds must be absent: a `url` on a tcp check is a mistake
        // the user should hear about, not a silently ignored line.
        let present: [(&'static str, bool, Kind); 6] = [
            ("target", self.target.is_some(), Kind::Tcp),
            ("url", self.url.is_some(), Kind::Http),
            ("expect_status", !self.expect_status.is_empty(), Kind::Http),
            ("command", !self.command.is_empty(), Kind::Command),
            ("env", !self.env.is_empty(), Kind::Command),
            ("tool", self.tool.is_some(), Kind::Tool),
        ];
        if let Some((field, _, _)) = present.iter().find(|(_, set, k)| *set && *k != self.kind) {
            return Err(SpecError::Extra {
                name: self.name.clone(),
                kind,
                field,
            });
        }
        let probe = match self.kind {
            Kind::Tcp => {
                let t = self.target.as_deref().ok_or_else(|| missing("target"))?;
                let (host, port) = t
                    .rsplit_once(':')
                    .ok_or_else(|| invalid("target", format!("{t:?} is not host:port")))?;
                let port: u16 =
                    port.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
                        invalid("target", format!("{t:?}: the port is not 1-65535"))
                    })?;
                let host = host.trim_start_matches('[').trim_end_matches(']');
                if host.is_empty() {
                    return Err(invalid("target", format!("{t:?} has no host")));
                }
                Probe::Tcp {
                    host: host.to_owned(),
                    port,
                }
            }
            Kind::Http => {
                let u = self.url.as_deref().ok_or_else(|| missing("url"))?;
                let shown = mcpulse_wire::redact::url(u);
                let url: ::http::Uri = u
                    .parse()
                    .map_err(|_| invalid("url", format!("{shown:?} is not a URL")))?;
                if !matches!(url.scheme_str(), Some("http" | "https")) || url.host().is_none() {
                    return Err(invalid(
                        "url",
                        format!("{shown:?} must be http:// or https:// with a host"),
                    ));
                }
                if let Some(bad) = self
                    .expect_status
                    .iter()
                    .find(|s| !(100..=599).contains(*s))
                {
                    return Err(invalid(
                        "expect_status",
                        format!("{bad} is not an HTTP status"),
                    ));
                }
                Probe::Http {
                    url,
                    expect: self.expect_status.clone(),
                }
            }
            Kind::Command => {
                if self.command.first().is_none_or(String::is_empty) {
                    return Err(missing("command"));
                }
                Probe::Command {
                    argv: self.command.clone(),
                    env: self.env.clone(),
                }
            }
            Kind::Tool => {
                let tool = self.tool.clone().ok_or_else(|| missing("tool"))?;
                if tool.trim().is_empty() {
                    return Err(missing("tool"));
                }
                Probe::Tool { tool }
            }
        };
        let duration =
            |field: &'static str, v: &Option<String>| -> Result<Option<Duration>, SpecError> {
                v.as_deref()
                    .map(|s| {
                        mcpulse_wire::units::duration(s).map_err(|e| invalid(field, e.to_string()))
                    })
                    .transpose()
            };
        let interval = duration("interval", &self.interval)?.unwrap_or(DEFAULT_INTERVAL);
        if interval < MIN_INTERVAL {
            return Err(invalid("interval", "the shortest interval is 1s".into()));
        }
        let timeout = match duration("timeout", &self.timeout)? {
            Some(t) if t.is_zero() => return Err(invalid("timeout", "must be above 0".into())),
            Some(t) if t > interval => {
                return Err(invalid(
                    "timeout",
                    "must not be longer than the interval (runs would pile up)".into(),
                ));
            }
            Some(t) => t,
            None => DEFAULT_TIMEOUT.min(interval),
        };
        let degraded_latency = duration("degraded_latency", &self.degraded_latency)?;
        if degraded_latency.is_some_and(|d| d >= timeout) {
            return Err(invalid(
                "degraded_latency",
                "must be shorter than the timeout (a run past the timeout fails)".into(),
            ));
        }
        let threshold = |field, v: Option<u32>, default| match v {
            Some(0) => Err(invalid(field, "must be at least 1".into())),
            Some(n) => Ok(n),
            None => Ok(default),
        };
        Ok(Check {
            name,
            probe,
            interval,
            timeout,
            critical: self.critical.unwrap_or(true),
            thresholds: Thresholds {
                failure_threshold: threshold(
                    "failure_threshold",
                    self.failure_threshold,
                    DEFAULT_FAILURE_THRESHOLD,
                )?,
                success_threshold: threshold(
                    "success_threshold",
                    self.success_threshold,
                    DEFAULT_SUCCESS_THRESHOLD,
                )?,
                degraded_latency,
            },
        })
    }
}

/// Validates every entry ([`CheckSpec::resolve`]) and that no name is used twice; the error
/// says which entry (its index in `[[checks]]`, for the config to locate).
pub fn resolve_all(specs: &[CheckSpec]) -> Result<Vec<Check>, (usize, SpecError)> {
    let mut out: Vec<Check> = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let check = spec.resolve().map_err(|e| (i, e))?;
        if out.iter().any(|c| c.name == check.name) {
            return Err((i, SpecError::Duplicate(check.name)));
        }
        out.push(check);
    }
    Ok(out)
}

/// What a run needs besides the check: where the upstream's MCP endpoint is, for `tool`
/// checks (the gateway's own `/mcp` on loopback, or the upstream itself).
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub mcp: Option<mcpulse_probe::Target>,
    /// The gateway's own health tool (a `tool` check naming it fails: it would report on
    /// itself, and readiness would depend on readiness).
    pub own_tool: Option<String>,
    /// A session the gateway holds to call `tool` checks on (a stdio upstream's readiness
    /// session); when set, `mcp` is not probed for them.
    pub session: Option<tool::Session>,
}

/// A failed run, with its (inert, cut) reason.
pub(crate) fn failed(latency: Option<Duration>, why: &str) -> Raw {
    Raw {
        status: CheckStatus::Fail,
        latency,
        output: Some(mcpulse_wire::text::inert(why, MAX_OUTPUT_CHARS).into_owned()),
    }
}

/// A passing run (latency may still make it degraded: that is the thresholds' to say).
pub(crate) fn passed(latency: Duration, what: &str) -> Raw {
    Raw {
        status: CheckStatus::Pass,
        latency: Some(latency),
        output: Some(mcpulse_wire::text::inert(what, MAX_OUTPUT_CHARS).into_owned()),
    }
}

/// What a check keeps from one run to the next (see [`http::Client`]).
#[derive(Default)]
pub(crate) struct Kept {
    http: http::Client,
}

/// Runs a check once, within its timeout (each kind bounds itself by it; this is the backstop).
pub async fn run_once(check: &Check, ctx: &Context) -> Raw {
    run_kept(check, ctx, &mut Kept::default()).await
}

/// [`run_once`], with what the check's earlier runs left.
pub(crate) async fn run_kept(check: &Check, ctx: &Context, kept: &mut Kept) -> Raw {
    let deadline = tokio::time::Instant::now() + check.timeout;
    let run = async {
        match &check.probe {
            Probe::Tcp { host, port } => tcp::run(host, *port).await,
            Probe::Http { url, expect } => http::run(url, expect, deadline, &mut kept.http).await,
            Probe::Command { argv, env } => command::run(argv, env, deadline).await,
            Probe::Tool { tool } => tool::run(tool, ctx, check.timeout).await,
        }
    };
    // The backstop's grace: each kind gives up at the deadline itself (the command is killed,
    // the connection dropped); a little more lets it say why.
    match tokio::time::timeout_at(deadline + Duration::from_millis(250), run).await {
        Ok(raw) => raw,
        Err(_) => failed(
            Some(check.timeout),
            &format!(
                "timed out after {}",
                mcpulse_wire::units::human_duration(check.timeout.as_millis())
            ),
        ),
    }
}

/// Unix ms now, for the health+json `time`.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A draw for jitter: std's per-process random hash keys, so no dependency is needed for a
/// number nobody relies on being uniform.
pub(crate) fn draw(salt: &str) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(salt.as_bytes());
    h.finish()
}

/// The first run's delay: up to a tenth of the interval, at most a second, so that checks
/// configured together do not fire together, and readiness learns of every check soon after
/// start.
pub fn first_delay(interval: Duration, draw: u64) -> Duration {
    let cap = (interval / 10).min(Duration::from_secs(1));
    let cap_ms = u64::try_from(cap.as_millis()).unwrap_or(1000);
    Duration::from_millis(draw % cap_ms.saturating_add(1))
}

/// Starts one task per check on the current runtime: run, fold into the registry, sleep until
/// the next `interval` (counted from each run's start; a run never overlaps the next, since the
/// timeout is at most the interval). The tasks stop when the handles are dropped or aborted.
pub fn spawn(checks: Vec<Check>, ctx: Context, shared: Arc<Shared>) -> Vec<Task> {
    checks
        .into_iter()
        .map(|check| {
            shared.health.register(&check);
            let ctx = ctx.clone();
            let shared = Arc::clone(&shared);
            Task(tokio::spawn(async move {
                tokio::time::sleep(first_delay(check.interval, draw(&check.name))).await;
                let mut ticks = tokio::time::interval(check.interval);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut kept = Kept::default();
                loop {
                    ticks.tick().await;
                    let raw = run_kept(&check, &ctx, &mut kept).await;
                    tracing::debug!(
                        check = check.name.as_str(),
                        status = raw.status.as_str(),
                        ms = raw
                            .latency
                            .map_or(0, |l| u64::try_from(l.as_millis()).unwrap_or(u64::MAX)),
                        output = raw.output.as_deref().unwrap_or(""),
                        "dependency check ran"
                    );
                    crate::health::record(&shared, &check.name, raw, now_ms());
                }
            }))
        })
        .collect()
}

/// A running task of the health side; aborted when dropped.
#[derive(Debug)]
pub struct Task(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn spec(toml: &str) -> Result<Check, SpecError> {
        toml::from_str::<CheckSpec>(toml).unwrap().resolve()
    }

    #[test]
    fn defaults_and_durations() {
        let c = spec("name = \"db\"\nkind = \"tcp\"\ntarget = \"localhost:5432\"").unwrap();
        assert_eq!(
            c.probe,
            Probe::Tcp {
                host: "localhost".into(),
                port: 5432
            }
        );
        assert_eq!(
            (c.interval, c.timeout, c.critical),
            (DEFAULT_INTERVAL, DEFAULT_TIMEOUT, true)
        );
        assert_eq!(c.thresholds, Thresholds::default());
        let c = spec(
            "name = \"api\"\nkind = \"http\"\nurl = \"http://u:p@h/x\"\ninterval = \"10s\"\ntimeout = \"2s\"\ndegraded_latency = \"300ms\"\ncritical = false\nfailure_threshold = 2\nsuccess_threshold = 4",
        )
        .unwrap();
        assert_eq!(c.interval, Duration::from_secs(10));
        assert_eq!(c.timeout, Duration::from_secs(2));
        assert_eq!(
            c.thresholds.degraded_latency,
            Some(Duration::from_millis(300))
        );
        assert_eq!(
            (
                c.thresholds.failure_threshold,
                c.thresholds.success_threshold
            ),
            (2, 4)
        );
        assert!(!c.critical);
        assert!(!c.component_id().contains(":p@"), "{}", c.component_id());
        assert_eq!(
            spec("name = \"ipv6\"\nkind = \"tcp\"\ntarget = \"[::1]:80\"")
                .unwrap()
                .probe,
            Probe::Tcp {
                host: "::1".into(),
                port: 80
            }
        );
    }

    #[test]
    fn refusals_say_what_is_wrong() {
        let cases = [
            (
                "name = \"a b\"\nkind = \"tcp\"\ntarget = \"h:1\"",
                "must be 1 to 64",
            ),
            (
                "name = \"tools\"\nkind = \"tcp\"\ntarget = \"h:1\"",
                "gateway's own component",
            ),
            ("name = \"a\"\nkind = \"tcp\"", "needs `target`"),
            (
                "name = \"a\"\nkind = \"tcp\"\ntarget = \"h\"",
                "not host:port",
            ),
            ("name = \"a\"\nkind = \"tcp\"\ntarget = \"h:0\"", "port"),
            (
                "name = \"a\"\nkind = \"tcp\"\ntarget = \"h:1\"\nurl = \"http://x\"",
                "`url` does not apply",
            ),
            (
                "name = \"a\"\nkind = \"http\"\nurl = \"ftp://x/\"",
                "http:// or https://",
            ),
            (
                "name = \"a\"\nkind = \"http\"\nurl = \"http://x/\"\nexpect_status = [99]",
                "not an HTTP status",
            ),
            ("name = \"a\"\nkind = \"command\"", "needs `command`"),
            (
                "name = \"a\"\nkind = \"tool\"\ntool = \" \"",
                "needs `tool`",
            ),
            (
                "name = \"a\"\nkind = \"tcp\"\ntarget = \"h:1\"\ninterval = \"ten\"",
                "`interval`",
            ),
            (
                "name = \"a\"\nkind = \"tcp\"\ntarget = \"h:1\"\ninterval = \"500ms\"",
                "shortest",
            ),
            (
                "name = \"a\"\nkind = \"tcp\"\ntarget = \"h:1\"\ninterval = \"5s\"\ntimeout = \"6s\"",
                "longer than the interval",
            ),
            (
                "name = \"a\"\nkind = \"tcp\"\ntarget = \"h:1\"\ndegraded_latency = \"5s\"",
                "shorter than the timeout",
            ),
            (
                "name = \"a\"\nkind = \"tcp\"\ntarget = \"h:1\"\nfailure_threshold = 0",
                "at least 1",
            ),
        ];
        for (toml, want) in cases {
            let e = spec(toml).expect_err(toml).to_string();
            assert!(e.contains(want), "{toml}: {e}");
        }
        assert!(toml::from_str::<CheckSpec>("name = \"a\"\nkind = \"tcp\"\nport = 1").is_err());
        assert!(toml::from_str::<CheckSpec>("name = \"a\"\nkind = \"dns\"").is_err());
    }

    #[test]
    fn names_are_unique() {
        let specs: Vec<CheckSpec> = ["a", "b", "a"]
            .iter()
            .map(|n| {
                toml::from_str(&format!("name = \"{n}\"\nkind = \"tcp\"\ntarget = \"h:1\""))
                    .unwrap()
            })
            .collect();
        assert_eq!(resolve_all(&specs[..2]).unwrap().len(), 2);
        let (i, e) = resolve_all(&specs).unwrap_err();
        assert_eq!((i, e), (2, SpecError::Duplicate("a".into())));
    }

    #[test]
    fn the_first_delay_is_jittered_within_a_second() {
        for d in [0, 1, 999, 1000, 1001, u64::MAX] {
            assert!(first_delay(Duration::from_secs(20), d) <= Duration::from_secs(1));
            assert!(first_delay(Duration::from_secs(2), d) <= Duration::from_millis(200));
        }
        assert_ne!(draw("a"), draw("a"), "a fresh key each time");
    }
}
