//! The rule for each list method, one case each, from the fixture
//! `transcripts/optional-method-missing.json` (a legacy server advertising tools and resources,
//! whose `resources/templates/list` answers `-32601`) edited in place:
//!
//! | list | `-32601` | any other failure |
//! |---|---|---|
//! | `tools/list`, tools advertised | `tools-list-failed` (degraded) | `tools-list-failed` |
//! | `tools/list`, not advertised | `tools-list-unsupported` (info) | `tools-list-unsupported` |
//! | `prompts/list`, `resources/list`, `resources/templates/list` (sent only when advertised) | `optional-method-missing` (info) on the first page; a later page is `*-list-failed` | `prompts-list-failed` / `resources-list-failed` |
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_judge::{Policy, Report, Status, Transcript, judge};
use serde_json::{Value, json};
use std::path::Path;

const NOT_FOUND: &str = r#"{"code": -32601, "message": "Method not found"}"#;
const NO_TEMPLATES: &str = r#"{"resourceTemplates": []}"#;

fn fixture() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/transcripts/optional-method-missing.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn exchange<'a>(tr: &'a mut Value, step: &str) -> &'a mut Value {
    tr["exchanges"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e["step"] == step)
        .unwrap_or_else(|| panic!("no {step} in the fixture"))
}

/// Makes `step` answer with this JSON-RPC `error` (or `result`), keeping its id.
fn answer(tr: &mut Value, step: &str, key: &str, payload: &str) {
    let ex = exchange(tr, step);
    let id = ex["id"].clone();
    ex["frames"][0]["raw"] = json!(format!(
        r#"{{"jsonrpc": "2.0", "id": {id}, "{key}": {payload}}}"#
    ));
}

/// The `initialize` result's capabilities, set.
fn capabilities(tr: &mut Value, caps: Value) {
    let ex = exchange(tr, "initialize");
    let raw = ex["frames"][0]["raw"].as_str().unwrap().to_owned();
    let mut msg: Value = serde_json::from_str(&raw).unwrap();
    msg["result"]["capabilities"] = caps;
    ex["frames"][0]["raw"] = json!(msg.to_string());
}

/// The fixture with the prompts capability in place of resources: its `resources/list`
/// exchange becomes `prompts/list`, and the templates are not asked.
fn with_prompts_not_resources() -> Value {
    let mut tr = fixture();
    capabilities(&mut tr, json!({"tools": {}, "prompts": {}}));
    let ex = exchange(&mut tr, "resources/list");
    ex["step"] = json!("prompts/list");
    ex["request"]["body"] = json!(r#"{"jsonrpc": "2.0", "id": 4, "method": "prompts/list"}"#);
    tr["exchanges"]
        .as_array_mut()
        .unwrap()
        .retain(|e| e["step"] != "resources/templates/list");
    tr
}

fn judged(tr: Value) -> Report {
    let tr: Transcript = serde_json::from_value(tr).unwrap();
    judge(&tr, &Policy::default())
}

/// Judges `tr` and asserts its status and its one finding (besides `legacy-only`).
fn expect(tr: Value, status: Status, code: &str) -> Report {
    let report = judged(tr);
    assert_eq!(outcome(&report), (status, vec![code]), "{report:?}");
    report
}

/// The report's status and its findings' codes (the fixture's `legacy-only` left out).
fn outcome(report: &Report) -> (Status, Vec<&str>) {
    let codes = report
        .findings
        .iter()
        .map(|f| f.code.code())
        .filter(|c| *c != "legacy-only")
        .collect();
    (report.status, codes)
}

fn message<'a>(report: &'a Report, code: &str) -> &'a str {
    report
        .findings
        .iter()
        .find(|f| f.code.code() == code)
        .map(|f| f.message.as_str())
        .unwrap_or_else(|| panic!("no {code}: {report:?}"))
}

#[test]
fn resources_templates_list_method_not_found_is_info_and_healthy() {
    let report = expect(fixture(), Status::Healthy, "optional-method-missing");
    assert_eq!(
        message(&report, "optional-method-missing"),
        "resources/templates/list is not implemented although the resources capability is advertised: HTTP 200, error -32601 Method not found"
    );
    assert_eq!(report.resource_count, Some(1));
    assert_eq!(report.resource_template_count, None);
}

#[test]
fn a_modern_404_with_method_not_found_is_the_same() {
    let mut tr = fixture();
    exchange(&mut tr, "resources/templates/list")["response"]["status"] = json!(404);
    expect(tr, Status::Healthy, "optional-method-missing");
}

#[test]
fn resources_templates_list_failing_otherwise_still_degrades() {
    let mut tr = fixture();
    answer(
        &mut tr,
        "resources/templates/list",
        "error",
        r#"{"code": -32603, "message": "Internal error"}"#,
    );
    expect(tr, Status::Degraded, "resources-list-failed");
}

#[test]
fn resources_list_method_not_found_is_info_and_healthy() {
    let mut tr = fixture();
    answer(&mut tr, "resources/list", "error", NOT_FOUND);
    answer(
        &mut tr,
        "resources/templates/list",
        "result",
        r#"{"resourceTemplates": [{"uriTemplate": "file:///{path}", "name": "file"}]}"#,
    );
    let report = expect(tr, Status::Healthy, "optional-method-missing");
    assert!(
        message(&report, "optional-method-missing")
            .starts_with("resources/list is not implemented although the resources capability")
    );
    assert_eq!(report.resource_template_count, Some(1));
}

#[test]
fn prompts_list_method_not_found_is_info_and_healthy() {
    let mut tr = with_prompts_not_resources();
    answer(&mut tr, "prompts/list", "error", NOT_FOUND);
    let report = expect(tr, Status::Healthy, "optional-method-missing");
    assert!(
        message(&report, "optional-method-missing")
            .starts_with("prompts/list is not implemented although the prompts capability")
    );
}

#[test]
fn prompts_list_failing_otherwise_still_degrades() {
    let mut tr = with_prompts_not_resources();
    answer(&mut tr, "prompts/list", "result", r#"{"items": []}"#);
    expect(tr, Status::Degraded, "prompts-list-failed");
}

#[test]
fn tools_list_method_not_found_stays_a_warning_when_advertised() {
    let mut tr = fixture();
    answer(&mut tr, "tools/list", "error", NOT_FOUND);
    answer(&mut tr, "resources/templates/list", "result", NO_TEMPLATES);
    expect(tr, Status::Degraded, "tools-list-failed");
}

#[test]
fn tools_list_method_not_found_without_the_capability_is_unsupported() {
    let mut tr = fixture();
    capabilities(&mut tr, json!({"resources": {}}));
    answer(&mut tr, "tools/list", "error", NOT_FOUND);
    answer(&mut tr, "resources/templates/list", "result", NO_TEMPLATES);
    expect(tr, Status::Healthy, "tools-list-unsupported");
}

/// A method that answered the first page exists: `-32601` on a later page is a broken list.
#[test]
fn method_not_found_on_a_later_page_is_a_failed_list() {
    let mut tr = fixture();
    answer(
        &mut tr,
        "resources/list",
        "result",
        r#"{"resources": [{"uri": "file:///a", "name": "a"}], "nextCursor": "c1"}"#,
    );
    exchange(&mut tr, "resources/list")["page"] = json!(1);
    let templates = exchange(&mut tr, "resources/templates/list");
    templates["step"] = json!("resources/list");
    templates["page"] = json!(2);
    let report = expect(tr, Status::Degraded, "resources-list-failed");
    assert!(message(&report, "resources-list-failed").contains("(page 2)"));
}
