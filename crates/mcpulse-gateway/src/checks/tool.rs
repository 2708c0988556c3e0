//! `kind = "tool"`, and the probe both it and protocol readiness run: a readiness check *is* a
//! probe. [`probe`] runs mcpulse-probe against the MCP endpoint the health side was given
//! ([`super::Context::mcp`]: the gateway's own `/mcp` on loopback, which exercises the whole
//! path, or the upstream) and judges the transcript with mcpulse-judge, so the handshake, the
//! tool count and a health tool's result are read exactly as `mcpulse probe --health-tool`
//! reads them.
//!
//! A tool check calls the named tool with no arguments under the probe's rules (it must be
//! listed and take no required arguments; a name that is not one of the usual health tool
//! names must be annotated read-only) and folds its result: `structuredContent.status` (or a
//! JSON document in its text) ok/healthy/pass → pass, degraded/warn → warn, down/unhealthy/
//! fail/error → fail; a refused call, a JSON-RPC error, `isError` or no health document fail.
//! The output quotes the judge's findings for the call (inert already) and the components the
//! document lists as not healthy.

use super::{Context, MAX_OUTPUT_CHARS, failed};
use mcpulse_judge::{Report, Status, judge};
use mcpulse_policy::check::Raw;
use mcpulse_policy::health::CheckStatus;
use mcpulse_probe::{Caller, PlanSpec, Target};
use mcpulse_wire::call::{CallPurpose, HealthToolMode, admit_health_tool};
use serde_json::Value;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The header the health side's probes carry over HTTP, with [`probe_token`] as its value, so
/// that the serving side can keep them out of the request metrics (they are the gateway's own
/// traffic, every few seconds, and would drown a quiet server's figures).
pub const PROBE_HEADER: &str = "mcpulse-health-probe";

/// This process's value of [`PROBE_HEADER`]: random, drawn once at first use (std's
/// `RandomState`, seeded from the OS, plus the time and the pid), never logged. A client that
/// sends the header without it cannot hide its own traffic from the metrics.
pub fn probe_token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let a = RandomState::new().hash_one((nanos, std::process::id()));
        let b = RandomState::new().hash_one((std::process::id(), nanos, a));
        format!("{a:016x}{b:016x}")
    })
}

/// Whether a request is the gateway's own probe (for the front door and the HTTP upstream,
/// to keep it out of the request metrics): it carries [`PROBE_HEADER`] with this process's
/// [`probe_token`], AND it comes from a loopback `peer` (the prober runs in this process; a
/// token that leaked elsewhere still hides nothing). An unknown peer is not trusted.
pub fn is_own_probe(headers: &http::HeaderMap, peer: Option<IpAddr>) -> bool {
    if !peer.is_some_and(|p| p.to_canonical().is_loopback()) {
        return false;
    }
    let Some(sent) = headers.get(PROBE_HEADER) else {
        return false;
    };
    let (sent, want) = (sent.as_bytes(), probe_token().as_bytes());
    // Compared in constant time: the answer never tells how much of a guess was right.
    sent.len() == want.len() && sent.iter().zip(want).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

/// Probes `target` within `timeout` (no security checks: they send extra requests, and this
/// runs every few seconds), calling `health_tool` if given, and judges it.
pub(crate) async fn probe(target: &Target, timeout: Duration, health_tool: Option<&str>) -> Report {
    let mut spec = PlanSpec::new(Caller::Cli {
        stdio_dual_era: false,
    });
    spec.timeout = Some(timeout);
    spec.security = false;
    if matches!(target, Target::Http { .. }) {
        spec.headers = vec![(PROBE_HEADER.to_owned(), probe_token().to_owned())];
    }
    if let Some(tool) = health_tool {
        spec.health_tool = HealthToolMode::Named(tool.to_owned());
    }
    let plan = spec.plan(target);
    let transcript = Arc::new(mcpulse_probe::probe(target, &plan).await);
    // Judging is CPU work over what a server sent: on the blocking pool, as the monitor does,
    // so that a slow judgement never stalls the endpoints.
    let shared = Arc::clone(&transcript);
    let policy = mcpulse_judge::Policy::default();
    let mut report = match tokio::task::spawn_blocking(move || judge(&shared, &policy)).await {
        Ok(r) => r,
        Err(_) => judge(&transcript, &mcpulse_judge::Policy::default()),
    };
    report.hide(&plan.secrets);
    report
}

/// The first findings' messages (the judge made them inert), for a check's output.
pub(crate) fn why(report: &Report) -> String {
    let msgs: Vec<&str> = report
        .findings
        .iter()
        .filter(|f| f.severity != mcpulse_judge::Severity::Info)
        .map(|f| f.message.as_str())
        .take(2)
        .collect();
    if msgs.is_empty() {
        report
            .findings
            .first()
            .map_or_else(|| "no answer".to_owned(), |f| f.message.clone())
    } else {
        msgs.join("; ")
    }
}

/// A boxed future (the [`ToolSession`] trait's methods are called through `dyn`).
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// A session with the upstream the gateway already holds, to call a health tool on without
/// opening one: a stdio upstream's readiness session (probing `/mcp` instead would open a
/// legacy session, i.e. spawn a child, on every run, and take a `max_sessions` slot).
pub trait ToolSession: Send + Sync {
    /// The tool's `tools/list` entry (every page read); `None` when it is not listed.
    fn find_tool<'a>(
        &'a self,
        tool: &'a str,
        deadline: tokio::time::Instant,
    ) -> BoxFuture<'a, Result<Option<Value>, String>>;
    /// `tools/call` of `tool` with no arguments: the reply (a JSON-RPC response).
    fn call_tool<'a>(
        &'a self,
        tool: &'a str,
        deadline: tokio::time::Instant,
    ) -> BoxFuture<'a, Result<Value, String>>;
}

/// A [`ToolSession`] in the checks' [`Context`].
#[derive(Clone)]
pub struct Session(pub Arc<dyn ToolSession>);

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Session")
    }
}

pub(super) async fn run(tool: &str, ctx: &Context, timeout: Duration) -> Raw {
    if ctx.own_tool.as_deref() == Some(tool) {
        return failed(
            None,
            "this is the gateway's own health tool: it would report on itself; name the upstream's",
        );
    }
    if let Some(session) = &ctx.session {
        return over_session(session.0.as_ref(), tool, timeout).await;
    }
    let Some(target) = &ctx.mcp else {
        return failed(None, "no MCP endpoint to call the health tool on");
    };
    let report = probe(target, timeout, Some(tool)).await;
    fold(&report, tool)
}

/// A tool check over a session the gateway holds: the probe's admission rules, and its
/// reading of the reply (mcpulse_judge), without the probe's own session.
async fn over_session(session: &dyn ToolSession, tool: &str, timeout: Duration) -> Raw {
    let deadline = tokio::time::Instant::now() + timeout;
    let name = mcpulse_wire::text::field(tool);
    let listed = match session.find_tool(tool, deadline).await {
        Ok(l) => l,
        Err(why) => return failed(None, &format!("the upstream was not reached: {why}")),
    };
    if let Err(refused) = admit_health_tool(tool, listed.as_ref(), false) {
        return failed(
            None,
            &format!(
                "the health tool {name} was not called: {}",
                refused.as_str()
            ),
        );
    }
    let started = tokio::time::Instant::now();
    let reply = session.call_tool(tool, deadline).await;
    let latency = started.elapsed();
    let reply = match reply {
        Ok(r) => r,
        Err(why) => {
            return failed(
                Some(latency),
                &format!("the health tool {name} got no reply: {why}"),
            );
        }
    };
    let Some(result) = reply.get("result") else {
        let code = reply
            .pointer("/error/code")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let message = reply
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("");
        return failed(
            Some(latency),
            &format!(
                "the health tool {name} answered with JSON-RPC error {code}: {}",
                mcpulse_wire::text::message(message)
            ),
        );
    };
    let (reported, findings, components) = mcpulse_judge::report::health_tool_reply(result, tool);
    let said: Vec<&str> = findings.iter().map(|f| f.message.as_str()).collect();
    let unwell: Vec<String> = components
        .iter()
        .filter(|c| c.status != Status::Healthy)
        .map(|c| format!("{} {}", c.name, c.status.as_str()))
        .collect();
    verdict(
        Some(latency),
        reported,
        findings.is_empty(),
        &said,
        &unwell,
        Status::from_findings(&findings),
    )
}

/// A tool check's result from a judged probe.
pub(crate) fn fold(report: &Report, tool: &str) -> Raw {
    let Some(call) = report
        .calls
        .iter()
        .find(|c| c.purpose == CallPurpose::HealthTool)
    else {
        return failed(
            None,
            &format!("the upstream was not reached: {}", why(report)),
        );
    };
    let latency = call
        .ms
        .map(|ms| Duration::from_micros((ms * 1000.0).max(0.0) as u64));
    let said: Vec<&str> = report
        .findings
        .iter()
        .filter(|f| call.findings.contains(&f.code))
        .map(|f| f.message.as_str())
        .collect();
    let unwell: Vec<String> = report
        .components
        .iter()
        .filter(|c| c.status != Status::Healthy && c.tool.as_deref() == Some(tool))
        .map(|c| format!("{} {}", c.name, c.status.as_str()))
        .collect();
    if let Some(refused) = call.refused {
        return failed(
            None,
            &format!(
                "the health tool {} was not called: {}",
                mcpulse_wire::text::field(tool),
                refused.as_str()
            ),
        );
    }
    verdict(
        latency,
        call.reported,
        call.findings.is_empty(),
        &said,
        &unwell,
        call.status,
    )
}

/// A called health tool's check result: what it reported (`clean`: no finding about the
/// call), the findings' messages, the components not healthy, and the call's own status.
fn verdict(
    latency: Option<Duration>,
    reported: Option<Status>,
    clean: bool,
    said: &[&str],
    unwell: &[String],
    status_of_call: Status,
) -> Raw {
    let mut output = said.join("; ");
    if !unwell.is_empty() {
        if !output.is_empty() {
            output.push_str("; ");
        }
        output.push_str("components: ");
        output.push_str(&unwell.join(", "));
    }
    let status = match reported {
        Some(Status::Healthy) if clean => CheckStatus::Pass,
        Some(Status::Healthy | Status::Degraded) => CheckStatus::Warn,
        Some(Status::Down) | None => CheckStatus::Fail,
    };
    if output.is_empty() {
        output = format!("the health tool reports {}", status_of_call.as_str());
    }
    Raw {
        status,
        latency,
        output: Some(mcpulse_wire::text::inert(&output, MAX_OUTPUT_CHARS).into_owned()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_the_token_from_loopback_is_an_own_probe() {
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        let remote: IpAddr = "10.1.2.3".parse().unwrap();
        let mut with_token = http::HeaderMap::new();
        with_token.insert(PROBE_HEADER, probe_token().parse().unwrap());
        assert_eq!(probe_token().len(), 32);
        assert_eq!(probe_token(), probe_token());
        assert!(is_own_probe(&with_token, Some(loopback)));
        assert!(is_own_probe(&with_token, Some(mapped)));
        assert!(!is_own_probe(&with_token, Some(remote)));
        assert!(!is_own_probe(&with_token, None));
        let mut guessed = http::HeaderMap::new();
        guessed.insert(PROBE_HEADER, "1".parse().unwrap());
        assert!(!is_own_probe(&guessed, Some(loopback)));
        assert!(!is_own_probe(&http::HeaderMap::new(), Some(loopback)));
    }
}
