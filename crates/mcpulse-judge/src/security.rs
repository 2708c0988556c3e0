//! The security posture: rules over the transcript, each with a stable code, a severity, what
//! it checks, why it matters and the evidence; and an A–F grade by a published formula.
//!
//! The formula (the same text is in `docs/checks.md`, generated from this file):
//! score = 100 − Σ penalty(severity) over the rules that fired (each rule counts once, at its
//! worst), with penalties critical 60, high 30, medium 15, low 5, info 0; the grade is A for a
//! score ≥ 90, B ≥ 75, C ≥ 60, D ≥ 40, F below; and any critical finding makes the grade F.

use crate::drift::is_hidden_char;
use crate::replies::Replies;
use mcpulse_wire::auth;
use mcpulse_wire::jsonrpc::Message;
use mcpulse_wire::transcript::{
    ConnectStage, Exchange, Step, TargetKind, Transcript, TransportKind,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::rules::docs::checks_doc;
pub use crate::rules::security::{
    ALL, DESTRUCTIVE_WORDS, Exposure, GRADES, INJECTION_PATTERNS, LEAK_PATTERNS, Level, SecRule,
};

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
        transport_rules(&mut c, loopback);
        rebinding_rules(&mut c, loopback, authenticated || gated);
        cors_rules(&mut c, loopback, authenticated || gated);
        auth_rules(
            &mut c,
            loopback,
            handshake_ok,
            authenticated,
            expect_auth,
            tools,
        );
        session_rules(&mut c);
        leak_rules(&mut c);
    }
    tool_rules(&mut c, tools);
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

/// The published formula: each rule once at its worst, penalties summed off 100, any critical
/// is an F.
pub fn grade(findings: &[SecurityFinding]) -> (u32, String) {
    let mut worst: Vec<(SecRule, Level)> = Vec::new();
    for f in findings {
        match worst.iter_mut().find(|(c, _)| *c == f.code) {
            Some(w) => w.1 = w.1.max(f.severity),
            None => worst.push((f.code, f.severity)),
        }
    }
    let penalty: u32 = worst.iter().map(|(_, l)| l.penalty()).sum();
    let score = 100u32.saturating_sub(penalty);
    let grade = if worst.iter().any(|(_, l)| *l == Level::Critical) {
        "F"
    } else {
        GRADES
            .iter()
            .find(|(_, min)| score >= *min)
            .map(|(g, _)| *g)
            .unwrap_or("F")
    };
    (score, grade.to_owned())
}

/// Letters that pass for Latin ones: Cyrillic, Greek and full-width forms.
fn is_confusable(ch: char) -> bool {
    matches!(ch, '\u{0370}'..='\u{03FF}' | '\u{0400}'..='\u{04FF}' | '\u{FF01}'..='\u{FF5E}')
}

/// A resource URI compared the way RFC 9728 means it: scheme and host lowercased, the default
/// port and a trailing slash dropped, no query or fragment.
fn canonical_resource(u: &str) -> String {
    let u = u.split(['?', '#']).next().unwrap_or("");
    let Some((scheme, rest)) = u.split_once("://") else {
        return u.trim_end_matches('/').to_owned();
    };
    let scheme = scheme.to_ascii_lowercase();
    let (authority, path) = rest
        .find('/')
        .map(|i| rest.split_at(i))
        .unwrap_or((rest, ""));
    let mut authority = authority.to_ascii_lowercase();
    for (s, port) in [("https", ":443"), ("http", ":80")] {
        if scheme == s && authority.ends_with(port) {
            authority.truncate(authority.len() - port.len());
        }
    }
    format!("{scheme}://{authority}{}", path.trim_end_matches('/'))
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

fn transport_rules(c: &mut Ctx<'_>, loopback: bool) {
    let tr = c.tr;
    if tr.target.display.starts_with("http://") && !loopback {
        c.add(
            SecRule::PlainHttpRemote,
            format!("{} is plain HTTP to a non-loopback host", tr.target.display),
            vec![format!("target: {}", tr.target.display)],
        );
    }
    // Only the target's own connections: a metadata host's certificate is not the server's.
    let own = |authority: &str| {
        let host = tr.target.host.as_deref().unwrap_or("");
        authority
            .rsplit_once(':')
            .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
            == Some(host)
    };
    // One finding per host and problem, however many connections showed it.
    let mut seen: Vec<(SecRule, &str)> = Vec::new();
    for conn in tr.connections.iter().filter(|c| own(&c.authority)) {
        if let Some(e) = &conn.error
            && e.stage == ConnectStage::Tls
            && !seen.contains(&(SecRule::TlsInvalid, conn.authority.as_str()))
        {
            seen.push((SecRule::TlsInvalid, conn.authority.as_str()));
            c.add(
                SecRule::TlsInvalid,
                format!("TLS with {} failed: {}", conn.authority, e.message),
                vec![format!("connect {} → {}", conn.authority, e.message)],
            );
        }
        if let Some(not_after) = conn.cert_not_after {
            let now = (tr.started_unix_ms / 1000) as i64;
            let days = (not_after - now) as f64 / 86_400.0;
            if days < 14.0 {
                let when = crate::evidence::rfc3339((not_after.max(0) as u64) * 1000);
                let msg = if days < 0.0 {
                    format!("the certificate of {} expired on {when}", conn.authority)
                } else {
                    format!(
                        "the certificate of {} expires in {days:.1} days ({when})",
                        conn.authority
                    )
                };
                let rule = if days < 0.0 {
                    SecRule::TlsInvalid
                } else {
                    SecRule::TlsExpiring
                };
                if seen.contains(&(rule, conn.authority.as_str())) {
                    continue;
                }
                seen.push((rule, conn.authority.as_str()));
                c.add(rule, msg, vec![format!("certificate notAfter {when}")]);
            }
        }
    }
}

fn accepted(ex: &Exchange) -> bool {
    ex.status().is_some_and(|s| (200..300).contains(&s))
}

fn rebinding_rules(c: &mut Ctx<'_>, loopback: bool, has_auth: bool) {
    let tr = c.tr;
    let seen = Exposure {
        loopback_without_auth: loopback && !has_auth,
        ..Exposure::default()
    };
    // The last check of each kind decides: an in-session Host check that got an answer that
    // may be about the session is followed by a replay of the handshake (mcpulse-probe).
    if let Some(ex) = tr.exchanges.iter().rfind(|e| e.step == Step::OriginCheck)
        && accepted(ex)
    {
        c.add_in(
            SecRule::OriginNotValidated,
            seen,
            format!("a request with the foreign Origin {} was accepted (HTTP {}); it must be rejected with 403", mcpulse_wire::checks::FOREIGN_ORIGIN, ex.status().unwrap_or(0)),
            vec![evidence(ex)],
        );
    }
    if let Some(ex) = tr.exchanges.iter().rfind(|e| e.step == Step::HostCheck)
        && accepted(ex)
    {
        c.add_in(
            SecRule::HostNotValidated,
            seen,
            format!("a request with the foreign Host {} was accepted (HTTP {}); a loopback server must reject it", mcpulse_wire::checks::FOREIGN_HOST, ex.status().unwrap_or(0)),
            vec![evidence(ex)],
        );
    }
}

fn cors_rules(c: &mut Ctx<'_>, loopback: bool, has_auth: bool) {
    let tr = c.tr;
    let mut seen_wild = false;
    for ex in &tr.exchanges {
        let Some(acao) = ex.header("access-control-allow-origin") else {
            continue;
        };
        let creds = ex
            .header("access-control-allow-credentials")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let acao = acao.trim();
        if acao == "*" && creds {
            c.add(
                SecRule::CorsWildcardCredentials,
                "Access-Control-Allow-Origin: * with Access-Control-Allow-Credentials: true".into(),
                vec![evidence(ex)],
            );
            return;
        }
        if ex.step == Step::OriginCheck
            && acao.eq_ignore_ascii_case(mcpulse_wire::checks::FOREIGN_ORIGIN)
        {
            let seen = Exposure {
                credentials_allowed: creds,
                ..Exposure::default()
            };
            c.add_in(
                SecRule::CorsReflectsOrigin,
                seen,
                format!(
                    "the foreign Origin was reflected in Access-Control-Allow-Origin{}",
                    if creds {
                        ", with credentials allowed"
                    } else {
                        ""
                    }
                ),
                vec![evidence(ex)],
            );
            return;
        }
        if acao == "*" {
            seen_wild = true;
        }
    }
    if seen_wild && loopback && !has_auth {
        let ex = tr.exchanges.iter().find(|e| {
            e.header("access-control-allow-origin")
                .is_some_and(|v| v.trim() == "*")
        });
        c.add(
            SecRule::CorsWildcard,
            "Access-Control-Allow-Origin: * on a loopback server without authentication".into(),
            ex.map(evidence).into_iter().collect(),
        );
    }
}

fn auth_rules(
    c: &mut Ctx<'_>,
    loopback: bool,
    handshake_ok: bool,
    authenticated: bool,
    expect_auth: bool,
    tools: &[&Value],
) {
    let tr = c.tr;
    // An open remote server.
    if handshake_ok && !authenticated && !loopback {
        let list = tr.exchanges.iter().find(|e| {
            e.step == Step::ToolsList
                && matches!(
                    c.replies.of(e).as_deref().map(|d| &d.message),
                    Some(Message::Result { .. })
                )
        });
        if let Some(ex) = list {
            let destructive = tools.iter().any(|t| {
                t.pointer("/annotations/readOnlyHint") != Some(&Value::Bool(true))
                    && t.pointer("/annotations/destructiveHint") != Some(&Value::Bool(false))
            });
            let seen = Exposure {
                auth_expected: expect_auth,
                tools_may_write: destructive,
                ..Exposure::default()
            };
            c.add_in(
                SecRule::NoAuthRemote,
                seen,
                format!(
                    "tools/list answered without credentials on a non-loopback host{}",
                    if destructive {
                        "; some tools are not declared read-only or non-destructive"
                    } else {
                        ""
                    }
                ),
                vec![evidence(ex)],
            );
        }
    }
    let Some(challenge_ex) = tr.exchanges.iter().find(|e| e.status() == Some(401)) else {
        return;
    };
    let header = challenge_ex.header("www-authenticate");
    let prm_exchanges: Vec<&Exchange> = tr
        .exchanges
        .iter()
        .filter(|e| e.step == Step::ResourceMetadata)
        .collect();
    let prm: Option<(&Exchange, Value)> = prm_exchanges
        .iter()
        .filter(|e| e.status() == Some(200))
        .find_map(|e| {
            e.body
                .as_deref()
                .and_then(|b| serde_json::from_str::<Value>(b).ok())
                .filter(Value::is_object)
                .map(|v| (*e, v))
        });
    let advertised = header.and_then(auth::resource_metadata);
    if header.is_none() && prm.is_none() {
        let mut ev = vec![evidence(challenge_ex)];
        ev.extend(prm_exchanges.iter().map(|e| evidence(e)));
        c.add(SecRule::ChallengeMissing, "401 without WWW-Authenticate, and no protected-resource metadata at the well-known URLs".into(), ev);
        return;
    }
    if let Some(e) = prm_exchanges.iter().find(|e| e.error_refused_private()) {
        c.add(
            SecRule::MetadataPrivateAddress,
            "the protected-resource metadata URL points at a non-public address".into(),
            vec![evidence(e)],
        );
        return;
    }
    let Some((prm_ex, doc)) = prm else {
        let mut ev = vec![evidence(challenge_ex)];
        ev.extend(prm_exchanges.iter().map(|e| evidence(e)));
        let msg = match advertised {
            Some(url) => {
                format!("resource_metadata {url} is advertised but could not be fetched as JSON")
            }
            None => "no protected-resource metadata found".into(),
        };
        c.add(SecRule::ResourceMetadataInvalid, msg, ev);
        return;
    };
    let servers: Vec<&str> = doc
        .get("authorization_servers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if servers.is_empty() {
        c.add(
            SecRule::ResourceMetadataInvalid,
            "the protected-resource metadata has no authorization_servers".into(),
            vec![evidence(prm_ex)],
        );
    }
    if let Some(resource) = doc.get("resource").and_then(Value::as_str) {
        let target = canonical_resource(&tr.target.display);
        if canonical_resource(resource) != target {
            c.add(
                SecRule::ResourceMetadataInvalid,
                format!(
                    "the metadata names the resource {resource:?}, not this server ({target:?})"
                ),
                vec![evidence(prm_ex)],
            );
        }
    } else {
        c.add(
            SecRule::ResourceMetadataInvalid,
            "the protected-resource metadata has no resource".into(),
            vec![evidence(prm_ex)],
        );
    }
    let Some(issuer) = servers.first() else {
        return;
    };
    let as_exchanges: Vec<&Exchange> = tr
        .exchanges
        .iter()
        .filter(|e| e.step == Step::AuthServerMetadata)
        .collect();
    if let Some(e) = as_exchanges.iter().find(|e| e.error_refused_private()) {
        c.add(
            SecRule::MetadataPrivateAddress,
            format!("the authorization server {issuer} is on a non-public address"),
            vec![evidence(e)],
        );
        return;
    }
    let meta = as_exchanges
        .iter()
        .filter(|e| e.status() == Some(200))
        .find_map(|e| {
            e.body
                .as_deref()
                .and_then(|b| serde_json::from_str::<Value>(b).ok())
                .filter(Value::is_object)
                .map(|v| (*e, v))
        });
    let Some((as_ex, meta)) = meta else {
        c.add(
            SecRule::AuthServerMetadataMissing,
            format!("no authorization-server metadata found for {issuer}"),
            as_exchanges.iter().map(|e| evidence(e)).collect(),
        );
        return;
    };
    if meta
        .get("issuer")
        .and_then(Value::as_str)
        .map(|s| s.trim_end_matches('/'))
        != Some(issuer.trim_end_matches('/'))
    {
        c.add(
            SecRule::IssuerMismatch,
            format!(
                "issuer {} does not match {issuer}",
                meta.get("issuer")
                    .map(ToString::to_string)
                    .unwrap_or_else(|| "(missing)".into())
            ),
            vec![evidence(as_ex)],
        );
    }
    let s256 = meta
        .get("code_challenge_methods_supported")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|m| m == "S256"));
    if !s256 {
        c.add(
            SecRule::PkceS256Missing,
            "code_challenge_methods_supported does not include S256".into(),
            vec![evidence(as_ex)],
        );
    }
    let plain: Vec<String> = [
        "authorization_endpoint",
        "token_endpoint",
        "registration_endpoint",
    ]
    .iter()
    .filter_map(|k| {
        meta.get(*k)
            .and_then(Value::as_str)
            .filter(|u| !u.starts_with("https://") && !is_loopback_url(u))
            .map(|u| format!("{k} {u}"))
    })
    .collect();
    if !plain.is_empty() {
        c.add(
            SecRule::AuthEndpointsNotHttps,
            format!("not HTTPS: {}", plain.join(", ")),
            vec![evidence(as_ex)],
        );
    }
}

fn is_loopback_url(u: &str) -> bool {
    u.parse::<http_host::Uri>()
        .ok()
        .and_then(|u| u.host().map(is_loopback))
        .unwrap_or(false)
}

/// A tiny alias so this module does not need the `http` crate: URIs parse with `serde_json`'s
/// neighbours? No — hosts are read by hand.
mod http_host {
    pub struct Uri(String);
    impl std::str::FromStr for Uri {
        type Err = ();
        fn from_str(s: &str) -> Result<Self, ()> {
            let rest = s.split_once("://").ok_or(())?.1;
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            let host = authority
                .rsplit_once('@')
                .map(|(_, h)| h)
                .unwrap_or(authority);
            let host = if host.starts_with('[') {
                host.split(']')
                    .next()
                    .map(|h| format!("{h}]"))
                    .unwrap_or_default()
            } else {
                host.split(':').next().unwrap_or("").to_owned()
            };
            Ok(Uri(host))
        }
    }
    impl Uri {
        pub fn host(&self) -> Option<&str> {
            Some(self.0.as_str()).filter(|h| !h.is_empty())
        }
    }
}

trait RefusedPrivate {
    fn error_refused_private(&self) -> bool;
}

impl RefusedPrivate for Exchange {
    fn error_refused_private(&self) -> bool {
        matches!(
            &self.outcome,
            mcpulse_wire::transcript::Outcome::TransportError {
                cause: mcpulse_wire::transcript::ErrorKind::NonPublicAddress,
                ..
            }
        )
    }
}

fn session_rules(c: &mut Ctx<'_>) {
    let tr = c.tr;
    // The ids the server issued: an answer to a request that carried one (a check that rode
    // the probe's session) only repeats it.
    let ids: Vec<(&Exchange, &str)> = tr
        .exchanges
        .iter()
        .filter(|e| {
            e.transport == TransportKind::StreamableHttp
                && matches!(
                    e.step,
                    Step::Initialize | Step::DualEraCheck | Step::OriginCheck | Step::HostCheck
                )
                && !e
                    .request
                    .headers
                    .iter()
                    .any(|(k, _)| k.eq_ignore_ascii_case("mcp-session-id"))
        })
        .filter_map(|e| e.header("mcp-session-id").map(|s| (e, s)))
        .collect();
    for (ex, id) in &ids {
        if let Some(problem) = weak_session_id(id) {
            c.add(
                SecRule::SessionIdWeak,
                format!("Mcp-Session-Id {:?} {problem}", clip(id)),
                vec![evidence(ex)],
            );
            return;
        }
    }
    if let [(e1, a), (e2, b), ..] = ids.as_slice()
        && (a == b || common_prefix(a, b) * 4 >= a.len() * 3)
    {
        c.add(
            SecRule::SessionIdWeak,
            format!(
                "two sessions got related ids ({:?} and {:?})",
                clip(a),
                clip(b)
            ),
            vec![evidence(e1), evidence(e2)],
        );
    }
}

fn clip(s: &str) -> String {
    s.chars().take(40).collect()
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// Why a session id is weak, if it is: not visible ASCII, or under 64 bits of estimated
/// entropy (length × log2 of the alphabet it draws from).
pub fn weak_session_id(id: &str) -> Option<String> {
    if id.is_empty() || !id.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Some("is not visible ASCII (0x21–0x7E), as the spec requires".into());
    }
    let core: String = id.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    let alphabet = if core.chars().all(|c| c.is_ascii_digit()) {
        10.0
    } else if core.chars().all(|c| c.is_ascii_hexdigit()) {
        16.0
    } else if core
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        || core
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    {
        36.0
    } else {
        62.0
    };
    let distinct = {
        let mut v: Vec<char> = core.chars().collect();
        v.sort_unstable();
        v.dedup();
        v.len()
    };
    let bits = core.len() as f64 * f64::log2(alphabet);
    if bits < 64.0 {
        return Some(format!(
            "carries about {bits:.0} bits of entropy; at least 64 (128 recommended) are needed"
        ));
    }
    if distinct < 6 {
        return Some(format!("uses only {distinct} distinct characters"));
    }
    None
}

fn leak_rules(c: &mut Ctx<'_>) {
    let tr = c.tr;
    let bodies = tr
        .exchanges
        .iter()
        .filter(|e| matches!(e.step, Step::MalformedRequest))
        .filter_map(|e| e.body.as_deref().map(|b| (e, b)));
    for (ex, body) in bodies {
        if let Some(what) = leak(body) {
            c.add(
                SecRule::ErrorLeak,
                format!("the error response to a malformed request contains {what}"),
                vec![evidence(ex)],
            );
            return;
        }
    }
}

/// What a body leaks, if anything: a stack trace or an internal path.
pub fn leak(body: &str) -> Option<&'static str> {
    LEAK_PATTERNS
        .iter()
        .find(|(needle, _)| body.contains(needle))
        .map(|(_, what)| *what)
}

fn tool_rules(c: &mut Ctx<'_>, tools: &[&Value]) {
    let text = |t: &Value, k: &str| t.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    for t in tools {
        let name = text(t, "name");
        let fields = [
            ("name", name.clone()),
            ("title", text(t, "title")),
            ("description", text(t, "description")),
        ];
        for (field, v) in &fields {
            // Joiners (U+200C, U+200D) are part of emoji and of Persian and Indic scripts: only
            // suspicious in a name.
            let n = v
                .chars()
                .filter(|ch| {
                    is_hidden_char(*ch)
                        && (*field == "name" || !matches!(ch, '\u{200C}' | '\u{200D}'))
                })
                .count();
            if n > 0 {
                c.add(
                    SecRule::HiddenUnicode,
                    format!("tool {name:?}: {n} hidden Unicode character(s) in its {field}"),
                    vec![format!("tools/list: {name}.{field}")],
                );
            }
        }
        if name.chars().any(|ch| ch.is_ascii_alphabetic()) && name.chars().any(is_confusable) {
            c.add(SecRule::Homoglyph, format!("tool name {name:?} contains non-ASCII letters (possible look-alike of another name)"), vec![format!("tools/list: {name}")]);
        }
        let desc = text(t, "description").to_lowercase();
        if let Some(p) = INJECTION_PATTERNS.iter().find(|p| desc.contains(*p)) {
            c.add(
                SecRule::PromptInjection,
                format!("tool {name:?}: its description contains {p:?}"),
                vec![format!("tools/list: {name}.description")],
            );
        }
        let words: Vec<String> = name
            .split(|ch: char| !ch.is_ascii_alphanumeric())
            .flat_map(split_camel)
            .map(|w| w.to_lowercase())
            .collect();
        if words
            .iter()
            .any(|w| DESTRUCTIVE_WORDS.contains(&w.as_str()))
        {
            let ann = t.get("annotations");
            let declared = ann.and_then(|a| a.get("destructiveHint")).is_some();
            let read_only = ann.and_then(|a| a.get("readOnlyHint")) == Some(&Value::Bool(true));
            if !declared || read_only {
                let why = if read_only {
                    "declares readOnlyHint: true"
                } else {
                    "does not declare destructiveHint"
                };
                c.add(
                    SecRule::DestructiveUnannotated,
                    format!("tool {name:?} looks destructive but {why}"),
                    vec![format!("tools/list: {name}.annotations")],
                );
            }
        }
    }
    if tools.len() > 100 {
        c.add(
            SecRule::ExcessiveTools,
            format!("{} tools", tools.len()),
            vec!["tools/list".into()],
        );
    }
}

fn split_camel(word: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for ch in word.chars() {
        if ch.is_ascii_uppercase() && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(ch);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
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

    #[test]
    fn formula() {
        let f = |code: &str, severity| SecurityFinding {
            code: match code {
                "a" => SecRule::TlsExpiring,
                "b" => SecRule::SessionIdWeak,
                _ => SecRule::ErrorLeak,
            },
            severity,
            message: String::new(),
            evidence: Vec::new(),
        };
        assert_eq!(grade(&[]), (100, "A".into()));
        assert_eq!(
            grade(&[f("a", Level::Low), f("a", Level::Low)]),
            (95, "A".into())
        );
        assert_eq!(grade(&[f("a", Level::Medium)]), (85, "B".into()));
        assert_eq!(grade(&[f("a", Level::High)]), (70, "C".into()));
        assert_eq!(
            grade(&[f("a", Level::High), f("b", Level::Medium)]),
            (55, "D".into())
        );
        assert_eq!(
            grade(&[
                f("a", Level::High),
                f("b", Level::High),
                f("c", Level::High)
            ]),
            (10, "F".into())
        );
        assert_eq!(grade(&[f("a", Level::Critical)]).1, "F");
    }

    #[test]
    fn session_ids() {
        assert!(weak_session_id("1").is_some());
        assert!(weak_session_id("12345678").is_some());
        assert!(weak_session_id("sess-aaaa-aaaa-aaaa-aaaa").is_some());
        assert!(weak_session_id("has space").is_some());
        assert!(weak_session_id("550e8400-e29b-41d4-a716-446655440000").is_none());
        assert!(weak_session_id("9f8c2b1e4d7a6f3b0c5e8d2a1b4c7f9e").is_none());
    }

    #[test]
    fn leaks() {
        assert!(leak("Traceback (most recent call last):\n  File \"/app/x.py\"").is_some());
        assert!(
            leak("SyntaxError: Unexpected end of JSON input\n    at JSON.parse (<anonymous>)")
                .is_some()
        );
        assert!(
            leak(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#)
                .is_none()
        );
    }
}
