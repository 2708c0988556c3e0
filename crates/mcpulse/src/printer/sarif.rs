//! `--format sarif`: the report as a SARIF 2.1.0 log, for code-scanning dashboards.
//!
//! One run; the driver's rules are every health and security rule mcpulse has (so rule
//! indexes are stable), and the results are the report's findings. Security findings carry
//! their evidence and GitHub's `security-severity`; the grade and status are run properties.

use mcpulse_judge::Report;
use mcpulse_judge::rules::{self, Severity};
use mcpulse_judge::security::{self, Level};
use serde_json::{Value, json};

const INFO_URI: &str = "https://github.com/mcpulse/mcpulse/blob/main/docs/checks.md";

fn security_level(l: Level) -> (&'static str, &'static str) {
    match l {
        Level::Critical => ("error", "9.5"),
        Level::High => ("error", "8.0"),
        Level::Medium => ("warning", "5.5"),
        Level::Low => ("note", "3.0"),
        Level::Info => ("note", "0.0"),
    }
}

fn health_level(s: Severity) -> &'static str {
    match s {
        Severity::Critical => "error",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

/// The rule id's display name: `origin-not-validated` → `OriginNotValidated`.
fn pascal(code: &str) -> String {
    code.split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// Builds the SARIF log.
pub fn log(r: &Report) -> Value {
    let mut rule_ids: Vec<String> = Vec::new();
    let mut driver_rules = Vec::new();
    for rule in security::ALL {
        let (level, sev) = security_level(rule.level());
        rule_ids.push(rule.code().to_owned());
        driver_rules.push(json!({
            "id": rule.code(),
            "name": pascal(rule.code()),
            "shortDescription": {"text": rule.title()},
            "fullDescription": {"text": format!("{} {}", rule.title(), rule.why())},
            "help": {"text": rule.why()},
            "helpUri": format!("{INFO_URI}#{}", rule.code()),
            "defaultConfiguration": {"level": level},
            "properties": {"tags": ["security", "mcp"], "security-severity": sev},
        }));
    }
    for rule in rules::ALL {
        rule_ids.push(rule.code().to_owned());
        driver_rules.push(json!({
            "id": rule.code(),
            "name": pascal(rule.code()),
            "shortDescription": {"text": rule.title()},
            "fullDescription": {"text": format!("{} {}", rule.title(), rule.why())},
            "help": {"text": rule.why()},
            "defaultConfiguration": {"level": health_level(rule.severity())},
            "properties": {"tags": ["health", "mcp"]},
        }));
    }
    let location = location(&r.target);
    let mut results = Vec::new();
    for f in &r.security.findings {
        let (level, sev) = security_level(f.severity);
        results.push(json!({
            "ruleId": f.code,
            "ruleIndex": rule_ids.iter().position(|c| *c == f.code.code()).unwrap_or(0),
            "level": level,
            "message": {"text": shown(&f.message)},
            "locations": [location.clone()],
            "properties": {"severity": f.severity.as_str(), "security-severity": sev, "evidence": f.evidence.iter().map(|e| shown(e)).collect::<Vec<_>>()},
        }));
    }
    for f in &r.findings {
        results.push(json!({
            "ruleId": f.code,
            "ruleIndex": rule_ids.iter().position(|c| *c == f.code.code()).unwrap_or(0),
            "level": health_level(f.severity),
            "message": {"text": shown(&f.message)},
            "locations": [location.clone()],
            "properties": {"severity": f.severity.as_str()},
        }));
    }
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "mcpulse",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": INFO_URI,
                "rules": driver_rules,
            }},
            "invocations": [{"executionSuccessful": true, "startTimeUtc": r.checked_at}],
            "results": results,
            "properties": {"target": r.target, "status": r.status.as_str(), "grade": r.grade, "score": r.security.score},
        }],
    })
}

/// Where a finding is: the server's URL, or for a stdio server its command line as a logical
/// location (a command line is not a URI).
/// A message as a code-scanning page shows it to people: inert and cut as every text from a
/// server is ([`mcpulse_wire::text::message`]), and SARIF's embedded-link brackets escaped
/// (`\[`, `\]`, §3.11.6), so that a server's error text cannot become a link in the alert.
fn shown(s: &str) -> String {
    let inert = mcpulse_wire::text::message(s);
    let mut out = String::with_capacity(inert.len());
    for c in inert.chars() {
        if matches!(c, '[' | ']') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn location(target: &str) -> Value {
    if target.starts_with("http://") || target.starts_with("https://") {
        json!({"physicalLocation": {"artifactLocation": {"uri": uri_reference(target)}}})
    } else {
        json!({"logicalLocations": [{"name": target, "kind": "module"}]})
    }
}

/// The target as a valid URI reference (SARIF's `artifactLocation.uri` is one): the redacted
/// URL holds `<redacted>`, and `<`, `>` (like spaces or non-ASCII) are not URI characters, so
/// every byte outside RFC 3986's unreserved, reserved and `%` is percent-encoded.
fn uri_reference(s: &str) -> String {
    use mcpulse_transport::reference::{URI_CHARS, percent_encode};
    percent_encode(s, URI_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_inert_and_link_free() {
        assert_eq!(
            shown("x\u{202e}y\n[Fix here](https://evil.example)"),
            "x\\u{202e}y\\n\\[Fix here\\](https://evil.example)"
        );
        assert_eq!(
            shown("tools/list failed: HTTP 500"),
            "tools/list failed: HTTP 500"
        );
    }

    #[test]
    fn uris() {
        assert_eq!(
            uri_reference("http://h:1/mcp?api_key=<redacted>&x=a b"),
            "http://h:1/mcp?api_key=%3Credacted%3E&x=a%20b"
        );
        assert_eq!(
            uri_reference("https://<redacted>@h/p%20q"),
            "https://%3Credacted%3E@h/p%20q"
        );
        assert_eq!(uri_reference("https://hé/"), "https://h%C3%A9/");
    }

    #[test]
    fn names() {
        assert_eq!(pascal("origin-not-validated"), "OriginNotValidated");
        assert_eq!(pascal("dual-era"), "DualEra");
    }
}
