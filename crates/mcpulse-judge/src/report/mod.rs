//! From a transcript to a report: the facts (era, versions, server, tools, timings, auth) and
//! the verdict (status and findings).
//!
//! This module owns the report's shape and the order of judgement ([`judge`]); each family of
//! checks is a child module: `session` (the handshake's facts), `lists` (the inventory),
//! `down` (a handshake that failed), `gated` (401/403), `stdio` (processes), `endpoint` (the
//! server's HTTP health endpoint), `calls` (synthetic tool calls and the health tool). How
//! exchanges read
//! in messages is `crate::evidence`'s; the security grade is `crate::security`'s.

mod calls;
mod down;
mod endpoint;
mod gated;
mod lists;
mod session;
mod stdio;

use crate::evidence::{all_tools, round};
use crate::replies::Replies;
use crate::rules::{Finding, Rule, Status};
use mcpulse_wire::jsonrpc::Message;
use mcpulse_wire::transcript::{Exchange, Step, TargetKind, Transcript, TransportKind};
use mcpulse_wire::version::Era;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use stdio::{phases, stderr_tail};

pub use crate::evidence::{describe, rfc3339};
pub use calls::{CallResult, health_tool_reply};
pub use endpoint::{Component, MAX_COMPONENTS};
pub use stdio::SLOW_STARTUP_MS;

pub const SCHEMA: &str = "mcpulse.report/v1";

/// Thresholds the judge applies.
#[derive(Debug, Clone)]
pub struct Policy {
    /// A handshake slower than this is `slow-handshake` (degraded).
    pub latency_budget_ms: f64,
    /// An unauthenticated remote server is a high security finding, not an informational one.
    pub expect_auth: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            latency_budget_ms: 3000.0,
            expect_auth: false,
        }
    }
}

/// The probe report (`mcpulse.report/v1`), documented in `docs/report.md`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema: String,
    pub target: String,
    /// When the probe started, RFC 3339 UTC.
    pub checked_at: String,
    pub status: Status,
    pub transport: Option<&'static str>,
    pub era: Option<Era>,
    pub protocol_version: Option<String>,
    pub supported_versions: Vec<String>,
    /// `true`/`false` when it was checked (auto mode found a modern server, or a legacy one
    /// failed discovery); `null` when not checked.
    pub dual_era: Option<bool>,
    pub server: Option<ServerInfo>,
    pub capabilities: Option<Value>,
    pub instructions: Option<String>,
    pub auth: AuthPosture,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_detail: Option<AuthDetail>,
    pub tool_count: Option<usize>,
    pub tools: Vec<ToolSummary>,
    pub prompt_count: Option<usize>,
    pub resource_count: Option<usize>,
    pub resource_template_count: Option<usize>,
    pub timings_ms: Timings,
    /// The three layers at a glance, each the worst of its findings (defaulted when reading a
    /// report stored before it existed).
    #[serde(default)]
    pub layers: Layers,
    /// The synthetic tool calls and the health tool, made or refused (absent without any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<CallResult>,
    /// The components the health tool's and the health endpoint's documents list, each with
    /// its status (at most `MAX_COMPONENTS` a document; absent without any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<Component>,
    pub findings: Vec<Finding>,
    /// The security grade, A–F (see `security` and docs/checks.md).
    pub grade: String,
    pub security: crate::security::Security,
    /// Digests of the server's contract (see `contract`); null when no contract was taken.
    pub digests: Option<Digests>,
    /// With `--baseline`: the classified changes against it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<crate::drift::Drift>,
    /// The contract itself, taken once here for the digests and kept for whoever compares it
    /// (a baseline, the monitor's drift check); not part of the serialised report.
    #[serde(skip)]
    pub contract: Option<crate::contract::Contract>,
    /// The last stderr lines of a stdio server.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stderr: Vec<String>,
}

impl Report {
    /// Hides `secrets` (values that must not be shown: what `${VAR}` read, the user's header
    /// values, what the argv rule hides) in every string the report holds. The probe hid them
    /// in what it recorded about the target, but a server may echo them back anywhere: in an
    /// error message a finding quotes, in security evidence, in its stderr, as its name or
    /// version, in a tool's description, in a `WWW-Authenticate` challenge.
    pub fn hide(&mut self, secrets: &mcpulse_wire::redact::Secrets) {
        if secrets.is_empty() {
            return;
        }
        secrets.hide_in(&mut self.target);
        secrets.hide_opt(&mut self.protocol_version);
        for v in &mut self.supported_versions {
            secrets.hide_str(v);
        }
        secrets.hide_opt(&mut self.instructions);
        if let Some(s) = &mut self.server {
            secrets.hide_opt(&mut s.name);
            secrets.hide_opt(&mut s.version);
            secrets.hide_opt(&mut s.title);
        }
        if let Some(c) = &mut self.capabilities {
            secrets.hide_value(c);
        }
        if let Some(a) = &mut self.auth_detail {
            secrets.hide_opt(&mut a.www_authenticate);
            secrets.hide_opt(&mut a.scheme);
            secrets.hide_opt(&mut a.scope);
            secrets.hide_opt(&mut a.resource_metadata_url);
            secrets.hide_opt(&mut a.resource_metadata_error);
            if let Some(m) = &mut a.resource_metadata {
                secrets.hide_value(m);
            }
        }
        for t in &mut self.tools {
            secrets.hide_str(&mut t.name);
            secrets.hide_opt(&mut t.title);
            secrets.hide_opt(&mut t.description);
        }
        for c in &mut self.calls {
            secrets.hide_str(&mut c.tool);
        }
        for c in &mut self.components {
            secrets.hide_str(&mut c.name);
            secrets.hide_opt(&mut c.tool);
        }
        if let Some(d) = &mut self.drift {
            for c in &mut d.changes {
                secrets.hide_str(&mut c.path);
                secrets.hide_str(&mut c.message);
                if let Some(v) = &mut c.old {
                    secrets.hide_value(v);
                }
                if let Some(v) = &mut c.new {
                    secrets.hide_value(v);
                }
            }
        }
        for f in &mut self.findings {
            secrets.hide_in(&mut f.message);
        }
        for f in &mut self.security.findings {
            secrets.hide_in(&mut f.message);
            for e in &mut f.evidence {
                secrets.hide_in(e);
            }
        }
        for line in &mut self.stderr {
            secrets.hide_in(line);
        }
        // The contract (kept, shown, diffed, written to a baseline) and so its digests.
        if let Some(c) = &mut self.contract
            && c.hide(secrets)
            && self.digests.is_some()
        {
            self.digests = Some(Digests::of(c));
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    pub name: Option<String>,
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthPosture {
    None,
    Required,
    Forbidden,
}

impl AuthPosture {
    /// As in the report: `none`, `required`, `forbidden`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthPosture::None => "none",
            AuthPosture::Required => "required",
            AuthPosture::Forbidden => "forbidden",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuthDetail {
    pub status: u16,
    pub www_authenticate: Option<String>,
    pub scheme: Option<String>,
    pub scope: Option<String>,
    pub resource_metadata_url: Option<String>,
    /// The protected-resource metadata document (RFC 9728), when fetched and JSON.
    pub resource_metadata: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_metadata_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSummary {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Contract digests: the whole, the server facts, and each item by key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Digests {
    pub contract: String,
    pub server: String,
    pub tools: std::collections::BTreeMap<String, String>,
    pub prompts: std::collections::BTreeMap<String, String>,
    pub resources: std::collections::BTreeMap<String, String>,
    pub resource_templates: std::collections::BTreeMap<String, String>,
}

impl Digests {
    pub fn of(c: &crate::contract::Contract) -> Digests {
        let map = |items: &[crate::contract::Item]| {
            items
                .iter()
                .map(|i| (i.key.clone(), i.digest.clone()))
                .collect()
        };
        Digests {
            contract: c.digest.clone(),
            server: c.server.digest.clone(),
            tools: map(&c.tools),
            prompts: map(&c.prompts),
            resources: map(&c.resources),
            resource_templates: map(&c.resource_templates),
        }
    }
}

/// Per-phase timings in milliseconds. Phases that did not happen are `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Timings {
    pub dns: Option<f64>,
    pub connect: Option<f64>,
    pub tls: Option<f64>,
    /// stdio: from spawning the server to its first output on stdout or stderr (a package
    /// manager's download, an interpreter's start). `null` over HTTP, or when it never spoke.
    #[serde(default)]
    pub startup: Option<f64>,
    /// `server/discover` (modern) or `initialize` (legacy). Over stdio it is timed from the
    /// server's first output (or the request, if later): when the reply is the first thing the
    /// server writes, its start-up and handshake cannot be told apart and all of it is start-up.
    pub handshake: Option<f64>,
    /// All pages of `tools/list`.
    pub tools_list: Option<f64>,
    /// The synthetic tool calls and the health tool together, each from its request to its
    /// reply (absent without any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<f64>,
    pub total: f64,
}

/// Each layer's status: the worst severity among its findings (`rules::Layer`); `null` for a
/// layer that was not checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Layers {
    /// Reaching or starting the server: DNS, connect, TLS, spawn, exits; `null` for a probe of
    /// a health endpoint alone (`mcpulse probe --health-url URL` without an MCP target, a
    /// monitor target with `health_url` only), which neither connects to nor starts the server.
    pub liveness: Option<Status>,
    /// Speaking MCP: the handshake and the lists; `null` for a probe of a health endpoint alone.
    pub protocol: Option<Status>,
    /// What is behind it: synthetic calls, the health tool, the health endpoint; `null` when
    /// none of them was checked.
    pub dependencies: Option<Status>,
}

impl Default for Layers {
    fn default() -> Self {
        Layers {
            liveness: Some(Status::Healthy),
            protocol: Some(Status::Healthy),
            dependencies: None,
        }
    }
}

impl Layers {
    fn of(
        findings: &[Finding],
        dependencies_checked: bool,
        health_only: bool,
        handshake_answered: bool,
    ) -> Layers {
        if health_only {
            // Only the endpoint was read: whatever it found (unreachable included) is about
            // what the server reports of itself, and nothing was asked of the server's MCP.
            return Layers {
                liveness: None,
                protocol: None,
                dependencies: Some(Status::from_findings(findings)),
            };
        }
        let worst = |layer: crate::rules::Layer| {
            let f: Vec<Finding> = findings
                .iter()
                .filter(|f| f.code.layer() == layer)
                .cloned()
                .collect();
            Status::from_findings(&f)
        };
        let liveness = worst(crate::rules::Layer::Liveness);
        // A server never reached (refused, not resolved, not started) was asked nothing of its
        // MCP: its protocol is not checked, not healthy, unless something was found there or
        // its handshake was answered (a server that crashed later was reached).
        let asked = liveness != Status::Down
            || handshake_answered
            || findings
                .iter()
                .any(|f| f.code.layer() == crate::rules::Layer::Protocol);
        Layers {
            liveness: Some(liveness),
            protocol: asked.then(|| worst(crate::rules::Layer::Protocol)),
            dependencies: dependencies_checked.then(|| worst(crate::rules::Layer::Dependencies)),
        }
    }
}

/// Judges a transcript.
pub fn judge(tr: &Transcript, policy: &Policy) -> Report {
    // Every reply below is parsed once, however many rules read it.
    let replies = Replies::new(tr);
    let mut j = Judgement {
        tr,
        replies: &replies,
        findings: Vec::new(),
    };
    let mut report = Report {
        schema: SCHEMA.to_owned(),
        target: tr.target.display.clone(),
        checked_at: rfc3339(tr.started_unix_ms),
        status: Status::Healthy,
        transport: None,
        era: None,
        protocol_version: None,
        supported_versions: Vec::new(),
        dual_era: None,
        server: None,
        capabilities: None,
        instructions: None,
        auth: AuthPosture::None,
        auth_detail: None,
        tool_count: None,
        tools: Vec::new(),
        prompt_count: None,
        resource_count: None,
        resource_template_count: None,
        timings_ms: Timings {
            total: round(tr.total_ms),
            ..Timings::default()
        },
        layers: Layers::default(),
        calls: Vec::new(),
        components: Vec::new(),
        findings: Vec::new(),
        grade: String::new(),
        security: crate::security::assess_replies(
            &replies,
            &all_tools(&replies),
            policy.expect_auth,
        ),
        digests: None,
        drift: None,
        contract: crate::contract::from_replies(&replies),
        stderr: stderr_tail(&tr.processes),
    };
    report.digests = report.contract.as_ref().map(Digests::of);
    // A probe of a health endpoint alone has no protocol to judge: its verdict is the
    // endpoint's.
    if tr.target.kind != TargetKind::Health {
        j.connection_timings(&mut report);
        match handshake(&replies) {
            Some(hs) => {
                j.up(&mut report, &hs, policy);
                j.exited_after_handshake();
            }
            None => j.not_up(&mut report),
        }
        j.process_findings();
        j.envelope_findings();
    }
    let mut findings = j.findings;
    let (call_findings, call_results, mut components) =
        calls::judge(&replies, &all_tools(&replies));
    findings.extend(call_findings);
    let call_ms: f64 = call_results.iter().filter_map(|c| c.ms).sum();
    if call_results.iter().any(|c| c.ms.is_some()) {
        report.timings_ms.calls = Some(round(call_ms));
    }
    report.calls = call_results;
    let (endpoint_findings, endpoint_components) = endpoint::findings(&tr.health);
    findings.extend(endpoint_findings);
    components.extend(endpoint_components);
    report.components = components;
    // Most severe first, then in the order found.
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    report.status = Status::from_findings(&findings);
    report.layers = Layers::of(
        &findings,
        !tr.calls.is_empty() || !tr.health.is_empty(),
        tr.target.kind == mcpulse_wire::transcript::TargetKind::Health,
        report.protocol_version.is_some() || report.server.is_some(),
    );
    report.grade = report.security.grade.clone();
    report.findings = findings;
    report
}

struct Judgement<'a> {
    tr: &'a Transcript,
    /// `tr`'s replies, each decoded once.
    replies: &'a Replies<'a>,
    findings: Vec<Finding>,
}

/// The exchange that established the session (or the stateless discovery), and its result.
struct Handshake<'a> {
    ex: &'a Exchange,
    era: Era,
    result: Value,
}

fn handshake<'t>(replies: &Replies<'t>) -> Option<Handshake<'t>> {
    replies.transcript().exchanges.iter().find_map(|ex| {
        if !matches!(ex.step, Step::Discover | Step::Initialize) {
            return None;
        }
        let d = replies.of(ex)?;
        let Message::Result { result, .. } = &d.message else {
            return None;
        };
        match ex.step {
            Step::Discover if result.get("supportedVersions").is_some_and(Value::is_array) => {
                Some(Handshake {
                    ex,
                    era: Era::Modern,
                    result: result.clone(),
                })
            }
            Step::Initialize => Some(Handshake {
                ex,
                era: Era::Legacy,
                result: result.clone(),
            }),
            _ => None,
        }
    })
}

impl<'a> Judgement<'a> {
    fn add(&mut self, f: Finding) {
        self.findings.push(f);
    }

    fn connection_timings(&self, report: &mut Report) {
        if let Some(c) = self.tr.connections.iter().find(|c| c.error.is_none()) {
            report.timings_ms.dns = c.dns_ms.map(round);
            report.timings_ms.connect = c.connect_ms.map(round);
            report.timings_ms.tls = c.tls_ms.map(round);
        }
    }

    /// The server completed a handshake: facts, then what is wrong beyond it.
    fn up(&mut self, report: &mut Report, hs: &Handshake<'_>, policy: &Policy) {
        let tr = self.tr;
        report.transport = Some(hs.ex.transport.as_str());
        report.era = Some(hs.era);
        let (startup_ms, handshake_ms) = phases(tr, hs.ex);
        report.timings_ms.startup = startup_ms.map(round);
        report.timings_ms.handshake = Some(round(handshake_ms));
        let caps = hs
            .result
            .get("capabilities")
            .cloned()
            .filter(Value::is_object);
        report.instructions = hs
            .result
            .get("instructions")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match hs.era {
            Era::Modern => self.modern_handshake(report, hs),
            Era::Legacy => self.legacy_handshake(report, hs),
        }
        if hs.ex.transport == TransportKind::Sse {
            self.add(Rule::DeprecatedSse.finding(
                "served over the legacy HTTP+SSE transport (GET stream + endpoint event)",
            ));
        }
        if report.server.as_ref().is_none_or(|s| s.name.is_none()) {
            self.add(Rule::ServerInfoMissing.finding("the server did not send serverInfo"));
        }
        if handshake_ms > policy.latency_budget_ms {
            self.add(Rule::SlowHandshake.finding(format!(
                "the {} took {:.0} ms, over the {:.0} ms budget",
                hs.ex.step.as_str(),
                handshake_ms,
                policy.latency_budget_ms
            )));
        }
        if let Some(ms) = startup_ms.filter(|ms| *ms > SLOW_STARTUP_MS) {
            self.add(Rule::SlowStartup.finding(format!(
                "slow start-up: {:.1} s from spawn to the server's first output",
                ms / 1000.0
            )));
        }
        self.inventory(report, hs, caps.as_ref());
        report.capabilities = caps;
        self.session_cleanup();
    }

    fn envelope_findings(&mut self) {
        let bad = self
            .tr
            .exchanges
            .iter()
            .filter_map(|e| self.replies.of(e))
            .any(|d| d.bad_version);
        if bad {
            self.add(Rule::JsonRpcEnvelope.finding("a reply lacked \"jsonrpc\": \"2.0\""));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Rule;

    /// The protocol layer of a server never reached is not checked; of one whose handshake
    /// was answered before it died, it is judged (healthy here).
    #[test]
    fn the_protocol_layer_is_judged_once_the_server_was_reached() {
        let refused = [Rule::ConnectFailed.finding("refused")];
        assert_eq!(Layers::of(&refused, false, false, false).protocol, None);
        let crashed = [Rule::ProcessExitedAfterHandshake.finding("exited")];
        let l = Layers::of(&crashed, false, false, true);
        assert_eq!(l.liveness, Some(Status::Down));
        assert_eq!(l.protocol, Some(Status::Healthy));
    }
}
