//! Failure classes and security rules that are about judging, not about the wire, as pure
//! fixture tests: each transcript under `transcripts/recorded-*.json` was recorded by the real
//! `mcpulse probe --json --transcript` against the scripted server of the end-to-end test it
//! came from (crates/mcpulse/tests/failures.rs and security.rs; the temporary directory and the
//! port were then renamed to `/tmp/fixture` and `8080`), and when recorded, judging it gave the
//! binary's `--json` report byte for byte. Its report is also snapshotted by `transcripts.rs`.
//!
//! What the wire does in those scenarios (which requests the probe sends and when it stops,
//! how a child's stderr and exit are captured, exit codes) stays end to end; the assertions on
//! the verdict (status, codes, severities, messages, report fields, grade) are here, unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_judge::{Policy, Transcript, judge};
use serde_json::{Value, json};
use std::path::Path;

/// The `--json` report of a recorded fixture, as `mcpulse probe --json` prints it (the CLI's
/// default latency budget is the judge's default policy).
fn report(fixture: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/transcripts")
        .join(format!("recorded-{fixture}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{fixture}: {e}"));
    let tr: Transcript = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{fixture}: {e}"));
    serde_json::to_value(judge(&tr, &Policy::default())).unwrap()
}

fn codes(findings: &Value) -> Vec<String> {
    findings
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap().to_owned())
        .collect()
}

/// Asserts the status and that each code was found (the end-to-end `expect`, less the exit
/// code, which the binary derives from the status and failures.rs still checks).
fn expect(r: &Value, status: &str, want: &[&str]) {
    let context = serde_json::to_string_pretty(r).unwrap();
    assert_eq!(r["schema"], "mcpulse.report/v1", "{context}");
    assert_eq!(r["status"], status, "{context}");
    let found = codes(&r["findings"]);
    for code in want {
        assert!(
            found.iter().any(|c| c == code),
            "finding {code} missing; {context}"
        );
    }
}

/// The finding with this code.
fn finding<'a>(r: &'a Value, code: &str) -> &'a Value {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == code)
        .unwrap_or_else(|| panic!("no {code} finding: {r}"))
}

// ---------------------------------------------------------------------------------------------
// Failure classes (from crates/mcpulse/tests/failures.rs)
// ---------------------------------------------------------------------------------------------

#[test]
fn html_page_with_status_200_is_not_json_rpc() {
    let r = report("html-200");
    expect(&r, "down", &["not-json-rpc"]);
    assert_eq!(codes(&r["findings"]), ["not-json-rpc"]);
    let message = r["findings"][0]["message"].as_str().unwrap();
    assert!(message.contains("HTML"), "{message}");
}

#[test]
fn status_503_is_a_server_error() {
    let r = report("http-503");
    expect(&r, "down", &["server-error"]);
    assert_eq!(r["era"], Value::Null, "a 5xx says nothing about the era");
}

#[test]
fn status_401_with_resource_metadata_is_up_but_gated() {
    let r = report("http-401-resource-metadata");
    expect(&r, "degraded", &["auth-required"]);
    assert_eq!(codes(&r["findings"]), ["auth-required"]);
    assert_eq!(r["auth"], "required");
    assert_eq!(r["transport"], "streamable-http");
    assert_eq!(r["era"], Value::Null);
    let detail = &r["auth_detail"];
    assert_eq!(detail["status"], 401);
    assert_eq!(detail["scheme"], "Bearer");
    assert_eq!(detail["scope"], "mcp:tools");
    // mcpulse_testkit::scenario::{RESOURCE_METADATA_PATH, AUTHORIZATION_SERVER}.
    assert_eq!(
        detail["resource_metadata_url"],
        "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp"
    );
    assert_eq!(
        detail["resource_metadata"]["authorization_servers"],
        json!(["https://127.0.0.1:1"])
    );
    assert_eq!(
        detail["resource_metadata"]["resource"],
        "http://127.0.0.1:8080/mcp"
    );
    let message = r["findings"][0]["message"].as_str().unwrap();
    assert!(message.contains("https://127.0.0.1:1"), "{message}");
}

#[test]
fn status_401_without_a_challenge_is_up_but_gated() {
    let r = report("http-401-no-challenge");
    expect(&r, "degraded", &["auth-required"]);
    assert_eq!(r["auth"], "required");
    assert_eq!(r["auth_detail"]["www_authenticate"], Value::Null);
    assert_eq!(r["auth_detail"]["resource_metadata"], Value::Null);
    let message = r["findings"][0]["message"].as_str().unwrap();
    assert!(message.contains("no WWW-Authenticate"), "{message}");
}

#[test]
fn status_403_is_up_but_forbidden() {
    let r = report("http-403");
    expect(&r, "degraded", &["forbidden"]);
    assert_eq!(codes(&r["findings"]), ["forbidden"]);
    assert_eq!(r["auth"], "forbidden");
}

#[test]
fn reply_with_the_wrong_id_is_reported() {
    let r = report("wrong-reply-id");
    expect(&r, "down", &["wrong-reply-id"]);
    let message = r["findings"][0]["message"].as_str().unwrap();
    assert!(message.contains("999"), "{message}");
}

#[test]
fn stdio_stdout_pollution_is_a_warning() {
    let r = report("stdio-stdout-pollution");
    expect(&r, "degraded", &["stdout-pollution", "legacy-only"]);
    assert_eq!(r["era"], "legacy");
    assert_eq!(r["tool_count"], 1);
    let pollution = finding(&r, "stdout-pollution");
    assert_eq!(pollution["severity"], "warning");
    assert!(
        pollution["message"]
            .as_str()
            .unwrap()
            .contains("Server listening on stdio"),
        "{pollution}"
    );
}

#[test]
fn stdio_server_that_exits_at_once_is_down_with_its_stderr() {
    let r = report("stdio-exits-at-once");
    expect(&r, "down", &["process-exited"]);
    assert_eq!(r["transport"], "stdio");
    // Its stderr in the report: captured by the wire, so checked end to end in failures.rs.
    assert_eq!(finding(&r, "process-exited")["severity"], "critical");
}

// ---------------------------------------------------------------------------------------------
// The tool surface (from crates/mcpulse/tests/security.rs; recorded over stdio, exit 0)
// ---------------------------------------------------------------------------------------------

/// A healthy report's security section (the end-to-end runs exited 0).
fn security(fixture: &str) -> (Value, Value) {
    let r = report(fixture);
    assert_eq!(r["status"], "healthy", "{r}");
    let sec = r["security"].clone();
    (r, sec)
}

/// Asserts security findings with this code, all of this severity, whose evidence is
/// non-empty and together contains each of `evidence` (in some line); returns the first.
fn sec_finding(sec: &Value, code: &str, severity: &str, evidence: &[&str]) -> Value {
    let found: Vec<&Value> = sec["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == code)
        .collect();
    assert!(!found.is_empty(), "no {code} finding; {sec}");
    let mut lines: Vec<&str> = Vec::new();
    for f in &found {
        assert_eq!(f["severity"], severity, "{code}; {sec}");
        assert!(
            !f["message"].as_str().unwrap().is_empty(),
            "{code}: empty message"
        );
        let ev = f["evidence"].as_array().unwrap();
        assert!(!ev.is_empty(), "{code}: no evidence; {sec}");
        lines.extend(ev.iter().map(|e| e.as_str().unwrap()));
    }
    for needle in evidence {
        assert!(
            lines.iter().any(|l| l.contains(needle)),
            "{code}: no evidence line contains {needle:?}: {lines:?}"
        );
    }
    found[0].clone()
}

fn no_sec_finding(fixture: &str, code: &str) {
    let (_, sec) = security(fixture);
    assert!(
        !codes(&sec["findings"]).iter().any(|c| c == code),
        "unexpected {code}; {sec}"
    );
}

/// The grade and score, the same in the report and its security section. The callers pin the
/// findings they rest on, so the pair also checks the published formula (itself tested in
/// src/security/grade.rs) on them: each rule counted once, at its worst.
fn grade(r: &Value) -> (String, u64) {
    let sec = &r["security"];
    assert_eq!(r["grade"], sec["grade"], "{sec}");
    (
        sec["grade"].as_str().unwrap().to_owned(),
        sec["score"].as_u64().unwrap(),
    )
}

#[test]
fn tool_hidden_unicode() {
    let (r, sec) = security("tool-hidden-unicode");
    sec_finding(
        &sec,
        "tool-hidden-unicode",
        "high",
        &[
            "tools/list: read_file.description",
            "tools/list: search.description",
        ],
    );
    let all: Vec<&Value> = sec["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "tool-hidden-unicode")
        .collect();
    assert_eq!(all.len(), 2, "one per tool: {all:?}");
    assert!(
        all[1]["message"].as_str().unwrap().contains("6 hidden"),
        "{all:?}"
    );
    assert_eq!(
        codes(&sec["findings"]),
        ["tool-hidden-unicode", "tool-hidden-unicode"]
    );
    assert_eq!(grade(&r), ("C".to_owned(), 70), "counted once");

    no_sec_finding("tool-hidden-unicode-clean", "tool-hidden-unicode");
}

#[test]
fn tool_homoglyph() {
    // "rеad_file" with a Cyrillic е (U+0435).
    let (_, sec) = security("tool-homoglyph");
    sec_finding(
        &sec,
        "tool-homoglyph",
        "medium",
        &["tools/list: r\u{0435}ad_file"],
    );
    assert_eq!(codes(&sec["findings"]), ["tool-homoglyph"]);
    no_sec_finding("tool-homoglyph-clean", "tool-homoglyph");
}

#[test]
fn tool_prompt_injection() {
    let (_, sec) = security("tool-prompt-injection");
    let f = sec_finding(
        &sec,
        "tool-prompt-injection",
        "medium",
        &["tools/list: add.description"],
    );
    assert!(
        f["message"].as_str().unwrap().contains("<important>"),
        "{f}"
    );
    assert_eq!(codes(&sec["findings"]), ["tool-prompt-injection"]);
    no_sec_finding("tool-prompt-injection-clean", "tool-prompt-injection");
}

#[test]
fn tool_count_excessive() {
    let (_, sec) = security("tool-count-101");
    let f = sec_finding(&sec, "tool-count-excessive", "low", &["tools/list"]);
    assert!(f["message"].as_str().unwrap().contains("101"), "{f}");
    assert_eq!(codes(&sec["findings"]), ["tool-count-excessive"]);
    no_sec_finding("tool-count-100", "tool-count-excessive");
}

#[test]
fn tool_destructive_unannotated() {
    let (r, sec) = security("tool-destructive-unannotated");
    sec_finding(
        &sec,
        "tool-destructive-unannotated",
        "low",
        &[
            "tools/list: delete_file.annotations",
            "tools/list: dropTable.annotations",
        ],
    );
    let messages: Vec<&str> = sec["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["message"].as_str().unwrap())
        .collect();
    assert!(
        messages.iter().any(|m| m.contains("readOnlyHint: true")),
        "{messages:?}"
    );
    assert_eq!(
        codes(&sec["findings"]),
        [
            "tool-destructive-unannotated",
            "tool-destructive-unannotated"
        ]
    );
    assert_eq!(grade(&r), ("A".to_owned(), 95), "counted once");

    no_sec_finding("tool-destructive-annotated", "tool-destructive-unannotated");
}

/// The fixtures are what the end-to-end scenarios produce: each one's tools are the ones the
/// scenario served (so a fixture cannot silently drift from the test it replaced).
#[test]
fn tool_fixtures_hold_the_scenarios_tools() {
    let names = |fixture: &str| -> Vec<String> {
        report(fixture)["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names("tool-hidden-unicode"), ["read_file", "search"]);
    assert_eq!(names("tool-homoglyph"), ["r\u{0435}ad_file"]);
    assert_eq!(names("tool-count-101").len(), 101);
    assert_eq!(names("tool-count-100").len(), 100);
    assert_eq!(
        names("tool-destructive-unannotated"),
        ["delete_file", "dropTable"]
    );
    assert_eq!(
        names("tool-destructive-annotated"),
        ["delete_file", "deleted_items_count"]
    );
}
