//! From a transcript to a report: the facts (era, versions, server, tools, timings, auth) and
//! the verdict (status and findings).

use crate::replies::Replies;
use crate::rules::{Finding, Rule, Severity, Status};
use mcpulse_wire::auth;
use mcpulse_wire::jsonrpc::{self, Message};
use mcpulse_wire::transcript::{
    ConnectStage, Exchange, Outcome, Process, Step, TargetKind, TimedLine, Transcript,
    TransportKind,
};
use mcpulse_wire::version::{self, Era, EraMode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    pub total: f64,
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
    let mut findings = j.findings;
    // Most severe first, then in the order found.
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    report.status = Status::from_findings(&findings);
    report.grade = report.security.grade.clone();
    report.findings = findings;
    report
}

/// A list as judged: the items kept, and how many the server sent.
struct Listed<'a> {
    items: Vec<&'a Value>,
    count: usize,
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
            Era::Modern => {
                report.supported_versions = strings(hs.result.get("supportedVersions"));
                if report
                    .supported_versions
                    .iter()
                    .any(|v| v == version::MODERN)
                {
                    report.protocol_version = Some(version::MODERN.to_owned());
                } else {
                    self.add(Rule::ProtocolVersionUnknown.finding(format!(
                        "server/discover lists supportedVersions {:?}, which does not include {}",
                        report.supported_versions,
                        version::MODERN
                    )));
                }
                report.server = server_info(
                    hs.result
                        .pointer("/_meta/io.modelcontextprotocol~1serverInfo"),
                );
                self.modern_fields("server/discover", &hs.result);
                // Dual-era: a legacy initialize to the same server, in auto mode (over stdio,
                // in a sibling process; the last attempt counts if that one died first).
                if let Some(check) = tr.exchanges.iter().rfind(|e| e.step == Step::DualEraCheck) {
                    let checked = self.replies.of(check);
                    let dual = matches!(checked.as_deref().map(|d| &d.message),
                        Some(Message::Result { result, .. }) if result.get("protocolVersion").is_some());
                    report.dual_era = Some(dual);
                    if dual {
                        let v = checked.as_deref().and_then(|d| match &d.message {
                            Message::Result { result, .. } => result
                                .get("protocolVersion")
                                .and_then(Value::as_str)
                                .map(str::to_owned),
                            _ => None,
                        });
                        if let Some(v) = v {
                            if !report.supported_versions.contains(&v) {
                                report.supported_versions.push(v.clone());
                            }
                            self.add(Rule::DualEra.finding(format!(
                                "also answers a legacy initialize (protocol {v})"
                            )));
                        }
                    }
                }
            }
            Era::Legacy => {
                match hs.result.get("protocolVersion").and_then(Value::as_str) {
                    None => self.add(
                        Rule::ProtocolVersionMissing
                            .finding("the initialize result has no protocolVersion"),
                    ),
                    Some(v) => {
                        report.protocol_version = Some(v.to_owned());
                        report.supported_versions = vec![v.to_owned()];
                        if !version::is_known(v) {
                            self.add(Rule::ProtocolVersionUnknown.finding(format!(
                                "the server chose protocol version {v:?}, which is not a known MCP revision (offered {})",
                                version::LEGACY_LATEST
                            )));
                        }
                    }
                }
                report.server = server_info(hs.result.get("serverInfo"));
                // Discovery was tried first (auto mode) and failed: not dual-era.
                if tr.plan.era == EraMode::Auto
                    && tr.exchanges.iter().any(|e| e.step == Step::Discover)
                {
                    report.dual_era = Some(false);
                    self.add(Rule::LegacyOnly.finding(format!(
                        "server/discover did not succeed ({}); the server speaks only the legacy handshake",
                        describe(tr.exchanges.iter().find(|e| e.step == Step::Discover))
                    )));
                }
            }
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
        // Inventory.
        let tools = self.list(Step::ToolsList, "tools", caps.as_ref(), hs.era);
        if let Some(listed) = &tools {
            report.tool_count = Some(listed.count);
            report.tools = listed
                .items
                .iter()
                .copied()
                .filter_map(tool_summary)
                .collect();
            let ms: f64 = tr
                .exchanges
                .iter()
                .filter(|e| e.step == Step::ToolsList)
                .map(|e| e.elapsed_ms)
                .sum();
            report.timings_ms.tools_list = Some(round(ms));
        } else if !tr.exchanges.iter().any(|e| e.step == Step::ToolsList) {
            // The handshake worked but tools/list was never sent: the probe ran out of time
            // after it (a server stuck after `initialize`).
            let advertised = caps
                .as_ref()
                .is_some_and(|c| c.get("tools").is_some_and(|v| !v.is_null()));
            let (rule, severity) = if advertised {
                (Rule::ToolsListFailed, Severity::Warning)
            } else {
                (Rule::ToolsListUnsupported, Severity::Info)
            };
            self.add(rule.finding_with(
                severity,
                format!(
                    "tools/list was never answered: the probe ran out of time after the {}",
                    hs.ex.step.as_str()
                ),
            ));
        } else if tr.exchanges.iter().any(|e| e.step == Step::ToolsList) {
            let ms: f64 = tr
                .exchanges
                .iter()
                .filter(|e| e.step == Step::ToolsList)
                .map(|e| e.elapsed_ms)
                .sum();
            report.timings_ms.tools_list = Some(round(ms));
        }
        report.prompt_count = self
            .list(Step::PromptsList, "prompts", caps.as_ref(), hs.era)
            .map(|l| l.count);
        report.resource_count = self
            .list(Step::ResourcesList, "resources", caps.as_ref(), hs.era)
            .map(|l| l.count);
        report.resource_template_count = self
            .list(
                Step::ResourceTemplatesList,
                "resourceTemplates",
                caps.as_ref(),
                hs.era,
            )
            .map(|l| l.count);
        report.capabilities = caps;
        // Session clean-up.
        for e in tr
            .exchanges
            .iter()
            .filter(|e| e.step == Step::SessionDelete)
        {
            match e.status() {
                Some(s) if (200..300).contains(&s) || s == 405 => {}
                _ => self.add(
                    Rule::SessionDeleteFailed
                        .finding(format!("DELETE of the session: {}", describe(Some(e)))),
                ),
            }
        }
    }

    /// All pages of one list; `None` when the list was not taken or failed. Adds the findings.
    fn list(
        &mut self,
        step: Step,
        key: &str,
        caps: Option<&Value>,
        era: Era,
    ) -> Option<Listed<'a>> {
        let replies: &'a Replies<'a> = self.replies;
        let pages: Vec<&Exchange> = self
            .tr
            .exchanges
            .iter()
            .filter(|e| e.step == step)
            .collect();
        if pages.is_empty() {
            return None;
        }
        let cap_key = if step == Step::ResourceTemplatesList {
            "resources"
        } else {
            key
        };
        let advertised = caps.is_some_and(|c| c.get(cap_key).is_some_and(|v| !v.is_null()));
        let mut items = Vec::new();
        let mut cursors: Vec<String> = Vec::new();
        for ex in &pages {
            let result = match replies.cached(ex).map(|d| &d.message) {
                Some(Message::Result { result, .. }) => result,
                _ => {
                    let why = match self.replies.defect(ex) {
                        Some(e) => format!("{} that is not usable JSON: {e}", describe(Some(ex))),
                        None => describe(Some(ex)),
                    };
                    let page = ex
                        .page
                        .map(|p| {
                            if p > 1 {
                                format!(" (page {p})")
                            } else {
                                String::new()
                            }
                        })
                        .unwrap_or_default();
                    let (rule, sev) = match (step, advertised) {
                        (Step::ToolsList, false) => (Rule::ToolsListUnsupported, Severity::Info),
                        _ => (list_failed(step), Severity::Warning),
                    };
                    self.add(
                        rule.finding_with(sev, format!("{}{page} failed: {why}", step.as_str())),
                    );
                    return None;
                }
            };
            match result.get(key) {
                Some(Value::Array(a)) => items.extend(a.iter()),
                _ => {
                    let rule = list_failed(step);
                    self.add(
                        rule.finding(format!("{} result has no `{key}` array", step.as_str())),
                    );
                    return None;
                }
            }
            if era == Era::Modern {
                self.modern_fields(step.as_str(), result);
            }
            if let Some(c) = result.get("nextCursor").and_then(Value::as_str) {
                if cursors.iter().any(|s| s == c) {
                    self.add(Rule::CursorRepeated.finding(format!(
                        "{} returned the cursor {c:?} twice; a client following it would loop forever",
                        step.as_str()
                    )));
                    return Some(self.listed(step, items));
                }
                cursors.push(c.to_owned());
            }
        }
        let last_has_next = pages
            .last()
            .and_then(|e| self.replies.of(e))
            .is_some_and(|d| matches!(d.message, Message::Result { ref result, .. } if result.get("nextCursor").is_some_and(Value::is_string)));
        let taken: usize = pages.iter().map(|e| e.bytes_taken()).sum();
        let cap = self.tr.plan.max_response_bytes;
        if last_has_next && cap > 0 && taken > cap {
            let rule = list_failed(step);
            self.add(rule.finding(format!(
                "{} passed the {cap}-byte cap (--max-response-size) over its first {} pages ({taken} bytes); the rest were not fetched",
                step.as_str(),
                pages.len()
            )));
        } else if last_has_next && self.tr.deadline_hit_ms.is_none() {
            self.add(Rule::PageLimit.finding(format!(
                "{} still had more pages after {} (raise --max-pages to follow more)",
                step.as_str(),
                pages.len()
            )));
        } else if last_has_next {
            let rule = list_failed(step);
            self.add(rule.finding(format!(
                "{} was cut short by the deadline after {} pages",
                step.as_str(),
                pages.len()
            )));
        }
        Some(self.listed(step, items))
    }

    /// A list's items as kept, and the finding when some were not.
    fn listed(&mut self, step: Step, items: Vec<&'a Value>) -> Listed<'a> {
        let (_, dropped) = self.replies.list_items(step);
        let count = items.len().saturating_add(dropped);
        if dropped > 0 {
            self.add(Rule::ListTruncated.finding(format!(
                "{} sent {count} items; only the first {} were kept and checked (at most {} per list)",
                step.as_str(),
                items.len(),
                crate::replies::MAX_LIST_ITEMS
            )));
        }
        Listed { items, count }
    }

    fn modern_fields(&mut self, what: &str, result: &Value) {
        let mut problems = Vec::new();
        match result.get("resultType") {
            None => problems.push("no resultType".to_owned()),
            Some(Value::String(s)) if s == "complete" => {}
            Some(other) => problems.push(format!("resultType {other}")),
        }
        match result.get("ttlMs") {
            None => problems.push("no ttlMs".to_owned()),
            Some(v) if v.as_i64().is_some_and(|n| n >= 0) || v.as_u64().is_some() => {}
            Some(other) => problems.push(format!("ttlMs {other}")),
        }
        match result.get("cacheScope").and_then(Value::as_str) {
            Some("public" | "private") => {}
            None => problems.push("no cacheScope".to_owned()),
            Some(other) => problems.push(format!("cacheScope {other:?}")),
        }
        if !problems.is_empty() {
            let f = Rule::ModernResultFields.finding(format!("{what}: {}", problems.join(", ")));
            if !self
                .findings
                .iter()
                .any(|x| x.code == f.code && x.message == f.message)
            {
                self.add(f);
            }
        }
    }

    /// No handshake completed: say which layer failed, from the last attempt.
    fn not_up(&mut self, report: &mut Report) {
        let tr = self.tr;
        if tr.target.kind == TargetKind::Stdio {
            report.transport = Some(TransportKind::Stdio.as_str());
            if let Some(p) = tr.processes.iter().rev().find(|p| p.spawn_error.is_some()) {
                let e = p.spawn_error.clone().unwrap_or_default();
                self.add(Rule::SpawnFailed.finding(format!("could not start the server: {e}")));
                return;
            }
        }
        let attempts: Vec<&Exchange> = tr
            .exchanges
            .iter()
            .filter(|e| matches!(e.step, Step::Discover | Step::Initialize | Step::SseOpen))
            .collect();
        let Some(last) = attempts.last().copied() else {
            // Nothing was even sent: a connection failure, or the deadline.
            if let Some(f) = self.connect_failure() {
                self.add(f);
            } else {
                self.add(
                    Rule::Timeout.finding("the probe ran out of time before any request completed"),
                );
            }
            return;
        };
        report.transport = Some(last.transport.as_str());
        if last.era == Some(Era::Modern) && last.step == Step::Discover {
            report.era = None;
        }
        // Auth first: "up but gated" is a fact about the server, whatever else failed.
        if let Some(status @ (401 | 403)) = last.status() {
            self.auth(report, last, status);
            return;
        }
        let step = last.step.as_str();
        let finding = match &last.outcome {
            Outcome::Timeout => Rule::Timeout.finding(format!(
                "no reply to {step} within {} ms{}",
                tr.plan.timeout_ms,
                if last.transport == TransportKind::Stdio {
                    match process_of(tr, last) {
                        Some(p) if p.first_output_ms.is_none() => {
                            "; the server is running but has written nothing yet: still starting (a package manager's cold download can take a minute) or stuck; raise --timeout to tell which"
                        }
                        _ => "; the server is running and wrote to stderr, but did not answer: it may be stuck, or slow (raise --timeout)",
                    }
                } else {
                    ""
                }
            )),
            Outcome::TooLarge { limit } => Rule::ResponseTooLarge.finding(format!(
                "the reply to {step} passed the {limit}-byte cap (--max-response-size)"
            )),
            Outcome::TransportError { cause, message } => match self.connect_failure() {
                Some(f) => f,
                None if cause.is_redirect() => {
                    Rule::HttpFailed.finding(format!("{step}: {message}"))
                }
                None if last.transport == TransportKind::Stdio => self.exited(step, message),
                None => Rule::HttpFailed.finding(format!("{step}: {message}")),
            },
            Outcome::Closed if last.transport == TransportKind::Stdio => {
                self.exited(step, "stdout closed")
            }
            Outcome::Closed if last.step == Step::SseOpen => {
                Rule::SseNoEndpoint.finding("the SSE stream closed before the endpoint event")
            }
            Outcome::Closed => {
                Rule::HttpFailed.finding(format!("the response to {step} ended before the reply"))
            }
            Outcome::Endpoint { .. } => Rule::HandshakeFailed.finding(
                "the legacy SSE endpoint was announced, but initialize was never answered",
            ),
            Outcome::Reply { .. } => match last.reply().map(|d| d.message) {
                // A modern server that does not support the revision we speak: up, but no
                // common version. Degraded, not down.
                Some(Message::Error { error, .. })
                    if last.step == Step::Discover
                        && error.code == version::UNSUPPORTED_PROTOCOL_VERSION =>
                {
                    report.era = Some(Era::Modern);
                    report.supported_versions =
                        strings(error.data.as_ref().and_then(|d| d.get("supported")));
                    Rule::ProtocolVersionUnknown.finding(format!(
                        "server/discover: the server does not support {} (it supports {:?})",
                        version::MODERN,
                        report.supported_versions
                    ))
                }
                Some(Message::Error { error, .. }) => Rule::HandshakeFailed.finding(format!(
                    "{step} was rejected: {} {}{}",
                    error.code,
                    error.message,
                    self.earlier_attempts(&attempts)
                )),
                _ => Rule::HandshakeFailed.finding(format!(
                    "{step} got an unusable result{}{}",
                    self.replies
                        .defect(last)
                        .map(|e| format!(" (not usable JSON: {e})"))
                        .unwrap_or_default(),
                    self.earlier_attempts(&attempts)
                )),
            },
            Outcome::NoReply | Outcome::Accepted | Outcome::Fetched => {
                self.no_reply(last, &attempts)
            }
        };
        self.add(finding);
    }

    fn no_reply(&self, last: &Exchange, attempts: &[&Exchange]) -> Finding {
        let step = last.step.as_str();
        let status = last.status().unwrap_or(0);
        if status >= 500 {
            return Rule::ServerError
                .finding(format!("HTTP {status} to {step}{}", body_hint(last)));
        }
        if last.step == Step::SseOpen {
            // With --transport sse the GET is the only attempt: no "earlier" part then.
            let earlier = self.earlier_attempts(attempts);
            let earlier = if earlier.is_empty() {
                String::new()
            } else {
                format!("{}; ", earlier.trim_start_matches("; "))
            };
            return Rule::SseNoEndpoint.finding(format!(
                "no MCP endpoint found: {earlier}GET for a legacy SSE stream got HTTP {status}{}",
                body_hint(last)
            ));
        }
        if !last.frames.is_empty() {
            let ids: Vec<String> = last
                .frames
                .iter()
                .filter_map(|f| jsonrpc::peek(&f.raw).ok())
                .filter_map(|d| d.message.response_id().map(|i| i.to_string()))
                .collect();
            if !ids.is_empty() {
                if let Some(Message::Error { error, .. }) = last
                    .frames
                    .last()
                    .and_then(|f| jsonrpc::peek(&f.raw).ok())
                    .map(|d| d.message)
                {
                    return Rule::HandshakeFailed.finding(format!(
                        "HTTP {status} to {step}: {} {}{}",
                        error.code,
                        error.message,
                        self.earlier_attempts(attempts)
                    ));
                }
                return Rule::WrongReplyId.finding(format!(
                    "{step} was sent with id {} but the reply carried id {}",
                    last.id.map(|i| i.to_string()).unwrap_or_default(),
                    ids.join(", ")
                ));
            }
        }
        if (200..300).contains(&status) {
            let what = match last.body.as_deref() {
                None | Some("") => "an empty body".to_owned(),
                Some(b) if looks_like_html(b) => "an HTML page".to_owned(),
                Some(_) => format!("a body that is not JSON-RPC ({})", content_type(last)),
            };
            return Rule::NotJsonRpc.finding(format!(
                "HTTP {status} to {step} with {what}: is this the MCP endpoint?"
            ));
        }
        Rule::HandshakeFailed.finding(format!(
            "HTTP {status} to {step}{}{}",
            body_hint(last),
            self.earlier_attempts(attempts)
        ))
    }

    /// "; server/discover: HTTP 400" for the attempts before the last, for context.
    fn earlier_attempts(&self, attempts: &[&Exchange]) -> String {
        let n = attempts.len();
        if n < 2 {
            return String::new();
        }
        let parts: Vec<String> = attempts[..n - 1]
            .iter()
            .map(|e| format!("{}: {}", e.step.as_str(), describe(Some(e))))
            .collect();
        format!("; earlier, {}", parts.join("; "))
    }

    fn exited(&self, step: &str, what: &str) -> Finding {
        let p = self.tr.processes.last();
        let how = match p.and_then(|p| p.exit.as_ref()) {
            Some(e) => match (e.code, e.signal) {
                (Some(c), _) => format!("exited with code {c}"),
                (None, Some(s)) => format!("was killed by signal {s}"),
                _ => "exited".to_owned(),
            },
            None => format!("stopped answering ({what})"),
        };
        let hint = p
            .and_then(|p| p.stderr.last())
            .map(|l| format!("; last stderr line: {}", l.line))
            .unwrap_or_default();
        Rule::ProcessExited.finding(format!("the server {how} before answering {step}{hint}"))
    }

    /// A stdio server whose session process exited on its own before the probe was done. The
    /// session's process is the last one that is not a dual-era check (the flow records the
    /// process that carried the session after the others); a dual-era check's process may exit
    /// on a legacy `initialize` without that meaning anything about the session.
    fn exited_after_handshake(&mut self) {
        let tr = self.tr;
        if tr.target.kind != TargetKind::Stdio {
            return;
        }
        let Some(p) =
            tr.processes.iter().rev().find(|p| {
                p.purpose.as_deref() != Some(mcpulse_wire::checks::purpose::DUAL_ERA_CHECK)
            })
        else {
            return;
        };
        let Some(e) = p.exit.as_ref().filter(|e| !e.by_probe) else {
            return;
        };
        if e.at_ms > tr.total_ms + 1.0 {
            return; // after the protocol steps were done: not while the probe used it
        }
        let how = match (e.code, e.signal) {
            (Some(c), _) => format!("exited with code {c}"),
            (None, Some(s)) => format!("was killed by signal {s}"),
            _ => "exited".to_owned(),
        };
        let during = tr
            .exchanges
            .iter()
            .rev()
            .find(|x| x.at_ms <= e.at_ms && !matches!(x.outcome, Outcome::Reply { .. }))
            .map(|x| format!(", during {}", x.step.as_str()))
            .unwrap_or_default();
        let hint = p
            .stderr
            .last()
            .map(|l| format!("; last stderr line: {}", l.line))
            .unwrap_or_default();
        self.add(Rule::ProcessExitedAfterHandshake.finding(format!(
            "the server {how} after the handshake{during}{hint}"
        )));
    }

    fn connect_failure(&self) -> Option<Finding> {
        // Only a failure with no successful connection at all is an outage.
        if self.tr.connections.iter().any(|c| c.error.is_none()) {
            return None;
        }
        let c = self.tr.connections.iter().find(|c| c.error.is_some())?;
        let e = c.error.as_ref()?;
        Some(match e.stage {
            ConnectStage::Dns => {
                Rule::DnsFailed.finding(format!("could not resolve {}: {}", c.authority, e.message))
            }
            ConnectStage::Connect => Rule::ConnectFailed.finding(format!(
                "could not connect to {}: {}",
                c.authority, e.message
            )),
            ConnectStage::Tls => Rule::TlsFailed.finding(format!(
                "TLS handshake with {} failed: {}",
                c.authority, e.message
            )),
            ConnectStage::Http => {
                Rule::HttpFailed.finding(format!("HTTP with {} failed: {}", c.authority, e.message))
            }
        })
    }

    fn auth(&mut self, report: &mut Report, ex: &Exchange, status: u16) {
        report.auth = if status == 401 {
            AuthPosture::Required
        } else {
            AuthPosture::Forbidden
        };
        let header = ex.header("www-authenticate").map(str::to_owned);
        let challenge = header
            .as_deref()
            .map(auth::parse_challenges)
            .and_then(|c| c.into_iter().next());
        let mut detail = AuthDetail {
            status,
            www_authenticate: header.clone(),
            scheme: challenge.as_ref().map(|c| c.scheme.clone()),
            scope: challenge
                .as_ref()
                .and_then(|c| c.param("scope"))
                .map(str::to_owned),
            resource_metadata_url: challenge
                .as_ref()
                .and_then(|c| c.param("resource_metadata"))
                .map(str::to_owned),
            resource_metadata: None,
            resource_metadata_error: None,
        };
        if let Some(m) = self
            .tr
            .exchanges
            .iter()
            .find(|e| e.step == Step::ResourceMetadata)
        {
            let parsed = m
                .body
                .as_deref()
                .and_then(|b| serde_json::from_str::<Value>(b).ok())
                .filter(Value::is_object);
            match (m.status(), parsed) {
                (Some(200), Some(doc)) => detail.resource_metadata = Some(doc),
                _ => {
                    detail.resource_metadata_error =
                        Some(format!("fetching it gave {}", describe(Some(m))))
                }
            }
        }
        let mut msg = if status == 401 {
            format!(
                "the server is up but requires authentication (HTTP 401 to {})",
                ex.step.as_str()
            )
        } else {
            format!(
                "the server is up but refused this client (HTTP 403 to {})",
                ex.step.as_str()
            )
        };
        match (&detail.resource_metadata, &detail.resource_metadata_url) {
            (Some(doc), _) => {
                let servers = strings(doc.get("authorization_servers"));
                if !servers.is_empty() {
                    msg.push_str(&format!("; authorization server: {}", servers.join(", ")));
                }
            }
            (None, Some(url)) => msg.push_str(&format!("; resource metadata advertised at {url}")),
            (None, None) if header.is_none() && status == 401 => {
                msg.push_str("; no WWW-Authenticate header")
            }
            _ => {}
        }
        if let Some(scope) = &detail.scope {
            msg.push_str(&format!("; scope {scope:?}"));
        }
        msg.push_str(if status == 401 {
            ". Pass credentials with --header or --bearer-env"
        } else {
            ""
        });
        let rule = if status == 401 {
            Rule::AuthRequired
        } else {
            Rule::Forbidden
        };
        self.add(rule.finding(msg));
        report.auth_detail = Some(detail);
    }

    fn process_findings(&mut self) {
        let noise = unique_lines(&self.tr.processes, |p| &p.stdout_noise);
        let dropped: usize = self
            .tr
            .processes
            .iter()
            .map(|p| p.stdout_noise_dropped)
            .sum();
        if let Some(first) = noise.first() {
            self.add(Rule::StdoutPollution.finding(format!(
                "{} non-JSON-RPC line(s) on stdout, first: {:?}",
                noise.len() + dropped,
                clip(first, 120)
            )));
        }
        let stderr: usize = stderr_lines(&self.tr.processes).len()
            + self
                .tr
                .processes
                .iter()
                .map(|p| p.stderr_dropped)
                .sum::<usize>();
        if stderr > 0 {
            self.add(Rule::Stderr.finding(format!("{stderr} line(s) on stderr")));
        }
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

/// A short account of how an exchange ended, for messages.
/// A stdio start-up slower than this is reported (`slow-startup`, info).
pub const SLOW_STARTUP_MS: f64 = 5000.0;

/// The stdio process an exchange went to: the last one started before it (not a dual-era
/// check's, which carries nothing else).
fn process_of<'t>(
    tr: &'t Transcript,
    ex: &Exchange,
) -> Option<&'t mcpulse_wire::transcript::Process> {
    tr.processes
        .iter()
        .filter(|p| {
            p.spawn_error.is_none()
                && p.at_ms <= ex.at_ms
                && p.purpose.as_deref() != Some(mcpulse_wire::checks::purpose::DUAL_ERA_CHECK)
        })
        .max_by(|a, b| a.at_ms.total_cmp(&b.at_ms))
}

/// The handshake's start-up and its own latency (ms). Over stdio the start-up runs from the
/// spawn to the server's first output, and the handshake from then (or from the request, if
/// later) to the reply; over HTTP there is no start-up.
fn phases(tr: &Transcript, hs: &Exchange) -> (Option<f64>, f64) {
    if hs.transport != TransportKind::Stdio {
        return (None, hs.elapsed_ms);
    }
    let Some(p) = process_of(tr, hs) else {
        return (None, hs.elapsed_ms);
    };
    let replied = hs.at_ms + hs.elapsed_ms;
    let Some(first) = p.first_output_ms else {
        return (None, hs.elapsed_ms);
    };
    let first = first.min(replied);
    let startup = (first - p.at_ms).max(0.0);
    (Some(startup), (replied - first.max(hs.at_ms)).max(0.0))
}

pub fn describe(ex: Option<&Exchange>) -> String {
    let Some(ex) = ex else {
        return "not sent".to_owned();
    };
    let status = ex.status().map(|s| format!("HTTP {s}")).unwrap_or_default();
    let tail = match &ex.outcome {
        // The envelope is all this needs: a hostile payload is neither built nor read here.
        Outcome::Reply { frame } => match ex
            .frames
            .get(*frame)
            .and_then(|f| jsonrpc::peek(&f.raw).ok())
            .map(|d| d.message)
        {
            Some(Message::Error { error, .. }) => {
                format!("error {} {}", error.code, clip(&error.message, 100))
            }
            _ => "a result".to_owned(),
        },
        Outcome::NoReply => match ex
            .frames
            .last()
            .and_then(|f| jsonrpc::peek(&f.raw).ok())
            .map(|d| d.message)
        {
            Some(Message::Error { error, .. }) => {
                format!("error {} {}", error.code, clip(&error.message, 100))
            }
            _ => String::new(),
        },
        Outcome::Accepted | Outcome::Fetched => String::new(),
        Outcome::Endpoint { url } => format!("endpoint {url}"),
        Outcome::Closed => "closed before a reply".to_owned(),
        Outcome::Timeout => "timed out".to_owned(),
        Outcome::TooLarge { limit } => format!("over the {limit}-byte cap"),
        Outcome::TransportError { message, .. } => message.clone(),
    };
    match (status.is_empty(), tail.is_empty()) {
        (true, true) => "no answer".to_owned(),
        (false, true) => status,
        (true, false) => tail,
        (false, false) => format!("{status}, {tail}"),
    }
}

fn body_hint(ex: &Exchange) -> String {
    match ex.body.as_deref() {
        Some(b) if !b.trim().is_empty() && !looks_like_html(b) => {
            format!(" ({})", clip(b.trim(), 120))
        }
        Some(b) if looks_like_html(b) => " (an HTML page)".to_owned(),
        _ => String::new(),
    }
}

fn content_type(ex: &Exchange) -> String {
    ex.header("content-type")
        .unwrap_or("no content type")
        .to_owned()
}

fn looks_like_html(b: &str) -> bool {
    let t = b.trim_start().to_ascii_lowercase();
    t.starts_with("<!doctype html")
        || t.starts_with("<html")
        || t.starts_with("<head")
        || t.starts_with("<body")
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn server_info(v: Option<&Value>) -> Option<ServerInfo> {
    let v = v?.as_object()?;
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(ServerInfo {
        name: s("name"),
        version: s("version"),
        title: s("title"),
    })
}

fn tool_summary(v: &Value) -> Option<ToolSummary> {
    let name = v.get("name")?.as_str()?.to_owned();
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(ToolSummary {
        name,
        title: s("title"),
        description: s("description"),
    })
}

/// Every tool object kept from every page of `tools/list`.
fn all_tools<'a>(replies: &'a Replies<'_>) -> Vec<&'a Value> {
    replies
        .transcript()
        .exchanges
        .iter()
        .filter(|e| e.step == Step::ToolsList)
        .filter_map(|e| match replies.cached(e).map(|d| &d.message) {
            Some(Message::Result { result, .. }) => result.get("tools").and_then(Value::as_array),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The stderr lines of every server process, in order, without the lines a later process
/// repeated from an earlier one (two processes of one server print the same start-up banner;
/// within one process a repeated line is kept: it happened twice).
fn stderr_lines(processes: &[Process]) -> Vec<&str> {
    unique_lines(processes, |p| &p.stderr)
}

/// Lines of every process (as `lines` picks them), in order, without those a later process
/// repeated from an earlier one.
fn unique_lines(processes: &[Process], lines: impl Fn(&Process) -> &[TimedLine]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for (i, p) in processes.iter().enumerate() {
        for l in lines(p) {
            let repeated = processes[..i]
                .iter()
                .any(|q| lines(q).iter().any(|m| m.line == l.line));
            if !repeated {
                out.push(l.line.as_str());
            }
        }
    }
    out
}

fn stderr_tail(processes: &[Process]) -> Vec<String> {
    let all = stderr_lines(processes);
    all[all.len().saturating_sub(20)..]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
}

fn round(ms: f64) -> f64 {
    (ms * 1000.0).round() / 1000.0
}

/// Milliseconds since the epoch as RFC 3339 UTC with milliseconds (see `mcpulse_wire::units`,
/// which owns how times are printed; this takes the transcript's unsigned clock).
pub fn rfc3339(unix_ms: u64) -> String {
    mcpulse_wire::units::format_rfc3339(i64::try_from(unix_ms).unwrap_or(i64::MAX))
}

/// The finding for a list (`step`) that failed or was cut short.
fn list_failed(step: Step) -> Rule {
    match step {
        Step::ToolsList => Rule::ToolsListFailed,
        Step::PromptsList => Rule::PromptsListFailed,
        _ => Rule::ResourcesListFailed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_lines_repeated_by_a_later_process_are_listed_once() {
        let p = |lines: &[&str]| Process {
            stderr: lines
                .iter()
                .map(|l| TimedLine {
                    at_ms: 0.0,
                    line: (*l).to_owned(),
                })
                .collect(),
            ..Process::default()
        };
        let procs = [
            p(&[
                "Starting server...",
                "error: expected initialize",
                "retrying",
                "retrying",
            ]),
            p(&["Starting server...", "ready", "retrying"]),
        ];
        assert_eq!(
            stderr_lines(&procs),
            [
                "Starting server...",
                "error: expected initialize",
                "retrying",
                "retrying",
                "ready"
            ]
        );
        assert_eq!(stderr_tail(&procs).len(), 5);
    }
}
