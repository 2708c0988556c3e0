//! The security posture: rules over the transcript, each with a stable code, a severity, what
//! it checks, why it matters and the evidence; and an A–F grade by a published formula.
//!
//! The formula (the same text is in `docs/checks.md`, generated from this file):
//! score = 100 − Σ penalty(severity) over the rules that fired (each rule counts once, at its
//! worst), with penalties critical 60, high 30, medium 15, low 5, info 0; the grade is A for a
//! score ≥ 90, B ≥ 75, C ≥ 60, D ≥ 40, F below; and any critical finding makes the grade F.
//!
//! This module owns the finding and section types, the context the checks write into, and
//! [`assess`], which runs the check families in their own modules: `transport` (plain HTTP,
//! TLS, DNS rebinding, CORS), `auth` (the OAuth discovery chain), `session` (session ids),
//! `leak` (error bodies), `tools` (the tool surface); and `grade` (the formula). The rules
//! themselves (codes, levels, texts, patterns) are in [`crate::rules::security`].

mod auth;
mod grade;
mod leak;
mod session;
mod tools;
mod transport;

use crate::replies::Replies;
use mcpulse_wire::jsonrpc::Message;
use mcpulse_wire::transcript::{Exchange, Step, TargetKind, Transcript};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::rules::docs::checks_doc;
pub use crate::rules::security::{
    ALL, DESTRUCTIVE_WORDS, Exposure, GRADES, INJECTION_PATTERNS, LEAK_PATTERNS, Level, SecRule,
};
pub use grade::grade;
pub use leak::leak;
pub use session::weak_session_id;

/// One security finding with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecurityFinding {
    /// The rule, serialized as its code.
    pub code: SecRule,
    pub severity: Level,
    pub message: String,
    /// Which request and response showed it: `origin-check: POST http://…/mcp with Origin: http://evil.example → HTTP 200`.
    pub evidence: Vec<String>,
}

/// The security section of a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Security {
    pub grade: String,
    pub score: u32,
    /// Whether the extra requests were sent (false with `--no-security`; the grade then rests
    /// on what the health probe saw).
    pub active_checks: bool,
    pub findings: Vec<SecurityFinding>,
}

struct Ctx<'a> {
    tr: &'a Transcript,
    /// `tr`'s replies, each decoded once.
    replies: &'a Replies<'a>,
    out: Vec<SecurityFinding>,
}

impl Ctx<'_> {
    /// A finding at the rule's documented level.
    fn add(&mut self, rule: SecRule, message: String, evidence: Vec<String>) {
        self.add_in(rule, Exposure::default(), message, evidence);
    }

    /// A finding at the rule's level given what was seen.
    fn add_in(&mut self, rule: SecRule, seen: Exposure, message: String, evidence: Vec<String>) {
        self.out.push(SecurityFinding {
            code: rule,
            severity: rule.level_in(seen),
            message,
            evidence,
        });
    }
}

/// What an exchange was, for evidence: `origin-check: POST http://… → HTTP 200`.
pub fn evidence(ex: &Exchange) -> String {
    let url = ex.request.url.clone().unwrap_or_else(|| "stdio".into());
    let extra: Vec<String> = ex
        .request
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("origin") || k.eq_ignore_ascii_case("host"))
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    let with = if extra.is_empty() {
        String::new()
    } else {
        format!(" with {}", extra.join(", "))
    };
    let got = match ex.status() {
        Some(s) => format!("HTTP {s}"),
        None => crate::evidence::describe(Some(ex)),
    };
    format!(
        "{}: {} {url}{with} → {got}",
        ex.step.as_str(),
        ex.request.method
    )
}

/// Grades a transcript. `expect_auth` makes an unauthenticated remote server a high finding.
/// `tools` are the tool objects of its `tools/list` pages.
pub fn assess(tr: &Transcript, tools: &[Value], expect_auth: bool) -> Security {
    let tools: Vec<&Value> = tools.iter().collect();
    assess_replies(&Replies::new(tr), &tools, expect_auth)
}

/// [`assess`], reading the replies of a judgement's view.
pub(crate) fn assess_replies(
    replies: &Replies<'_>,
    tools: &[&Value],
    expect_auth: bool,
) -> Security {
    let tr = replies.transcript();
    let mut c = Ctx {
        tr,
        replies,
        out: Vec::new(),
    };
    let host = tr.target.host.clone().unwrap_or_default();
    let loopback = is_loopback(&host);
    let http = tr.target.kind == TargetKind::Http;
    let authenticated = tr.plan.credentials;
    let gated = tr.exchanges.iter().any(|e| matches!(e.status(), Some(401)));
    let handshake_ok = tr.exchanges.iter().any(|e| {
        matches!(e.step, Step::Discover | Step::Initialize)
            && matches!(
                replies.of(e).as_deref().map(|d| &d.message),
                Some(Message::Result { .. })
            )
    });
    if http {
        transport::transport_rules(&mut c, loopback);
        transport::rebinding_rules(&mut c, loopback, authenticated || gated);
        transport::cors_rules(&mut c, loopback, authenticated || gated);
        auth::auth_rules(
            &mut c,
            loopback,
            handshake_ok,
            authenticated,
            expect_auth,
            tools,
        );
        session::session_rules(&mut c);
        leak::leak_rules(&mut c);
    }
    tools::tool_rules(&mut c, tools);
    let mut findings = c.out;
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    let (score, grade) = grade(&findings);
    Security {
        grade,
        score,
        active_checks: tr.plan.security,
        findings,
    }
}

fn is_loopback(host: &str) -> bool {
    let h = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.');
    h.eq_ignore_ascii_case("localhost")
        || h.to_ascii_lowercase().ends_with(".localhost")
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_unique() {
        let mut codes: Vec<&str> = ALL.iter().map(|r| r.code()).collect();
        let n = codes.len();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(n, codes.len());
    }
}
