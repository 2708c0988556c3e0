//! The probe service: how the monitor turns a configured target (or a `/probe` URL with a
//! module's settings) into a probe target and plan, probes it, judges the transcript and hides
//! the target's secrets in the report. The scheduler ([`crate::runner`]) and `/probe`
//! ([`crate::api`]) both come here, so a target is probed the same way by both.
//!
//! This module does not schedule, fold results into state or alert (the runner does), nor
//! decide what a request may probe or how it is answered (the API does).

use crate::config::{Endpoint, ModuleConfig, TargetConfig};
use crate::fleet::Fleet;
use mcpulse_judge::{Policy, Report, judge};
use mcpulse_probe::{Caller, Plan, PlanSpec, Target, TargetError};
use std::time::{Duration, Instant};

/// The probe target and plan for a configured target. The error's message may quote the URL:
/// the target's secrets are hidden in it.
pub fn target_and_plan(t: &TargetConfig) -> Result<(Target, Plan), TargetError> {
    let target = match &t.endpoint {
        // The endpoint is read as an HTTP target: the runner calls `probe_health` on it.
        Endpoint::Url(u) | Endpoint::Health(u) => Target::http(u),
        Endpoint::Command { argv, .. } => Target::stdio(argv),
    }
    .map_err(|e| TargetError(t.secrets.hide(&e.0)))?;
    let env = match &t.endpoint {
        Endpoint::Command { env, .. } => env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        Endpoint::Url(_) | Endpoint::Health(_) => Vec::new(),
    };
    // Only the auto-mode checks of a stdio target make the dual-era check `Caller::Monitor`
    // asks for (its first, the hourly re-detection, and the retry of a pinned check that
    // failed: see the runner's `EraMemo`); the pinned checks in between start one process.
    let plan = PlanSpec {
        era: t.era,
        timeout: Some(t.timeout),
        headers: t.headers.clone(),
        security: t.security,
        env,
        secrets: t.secrets.clone(),
        health_url: t.health_url.clone(),
        health_discovery: t.health_discovery,
        calls: t.calls.clone(),
        health_tool: t.health_tool.clone(),
        allow_side_effects: t.allow_side_effects,
        ..PlanSpec::new(Caller::Monitor)
    }
    .plan(&target);
    Ok((target, plan))
}

/// The probe target and plan for a URL outside the config, probed with `module`'s settings.
pub fn url_target_and_plan(
    url: &str,
    module: &ModuleConfig,
) -> Result<(Target, Plan), TargetError> {
    let target = Target::http(url)?;
    let plan = PlanSpec {
        era: module.era,
        timeout: Some(module.timeout),
        headers: module.headers.clone(),
        security: module.security,
        ..PlanSpec::new(Caller::Monitor)
    }
    .plan(&target);
    Ok((target, plan))
}

/// The judge's policy for a target with this latency budget.
pub fn policy(latency_budget: Duration) -> Policy {
    Policy {
        latency_budget_ms: latency_budget.as_secs_f64() * 1000.0,
        expect_auth: false,
    }
}

/// What one on-demand probe found: the judged report, and how long the probe took.
pub struct Probed {
    pub report: Report,
    pub duration: Duration,
}

/// Decrements the fleet's in-flight count however the probe ends (a client that hangs up
/// drops the future, and with it the probe, whose stdio children are killed on drop).
struct InFlight(Fleet);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.probe_finished();
    }
}

/// One probe now (`/probe`'s): probes `target` with `plan`, counted in `fleet`'s in-flight
/// probes while it runs, then judges it against `latency_budget` and hides `plan`'s secrets in
/// the report. The transcript is dropped before this returns, so a caller holding a memory
/// permit across the call holds it through judging, where a reply's memory is spent.
pub async fn once(fleet: &Fleet, target: &Target, plan: &Plan, latency_budget: Duration) -> Probed {
    fleet.probe_started();
    let in_flight = InFlight(fleet.clone());
    let started = Instant::now();
    let transcript = mcpulse_probe::probe(target, plan).await;
    let duration = started.elapsed();
    drop(in_flight);
    let mut report = judge(&transcript, &policy(latency_budget));
    // A finding may quote what the server sent back (a token it echoed): the report goes to
    // the store, the API and alerts.
    report.hide(&plan.secrets);
    drop(transcript);
    Probed { report, duration }
}
