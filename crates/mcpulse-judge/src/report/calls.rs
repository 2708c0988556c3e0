//! The dependency layer's calls (`Transcript::calls`): synthetic `tools/call`s (`--call`) and
//! the server's health tool (`--health-tool`), as findings and as one [`CallResult`] each.
//!
//! A synthetic call fails when it was refused (`tool-call-refused`), got a JSON-RPC error or
//! `isError: true` or no reply (`tool-call-failed`), passed its budget (`tool-call-slow`), broke
//! its tool's `outputSchema` (`tool-output-invalid`; a schema that does not compile is
//! `tool-output-schema-invalid`), or failed an `--expect` condition
//! (`tool-expectation-failed`). Those are warnings: a failing call makes the server degraded.
//! A failing call marked critical adds `critical-call-failed`, which makes it down.
//!
//! A health tool's result is a health document: `structuredContent`, or else a JSON object in
//! its first text content. Its `status` maps ok/healthy/pass/up → healthy, degraded/warn →
//! `health-tool-degraded`, down/unhealthy/fail/error → `health-tool-down`; each component of
//! its `checks` (or `components`) at warn or fail is a `health-component-unhealthy` naming it,
//! as for a health endpoint. Everything quoted from a result is made inert and cut.

use super::endpoint::{self, Component, Level};
use crate::evidence::round;
use crate::replies::Replies;
use crate::rules::{Finding, Rule, Status};
use mcpulse_wire::call::CallPurpose;
use mcpulse_wire::jsonrpc::Message;
use mcpulse_wire::transcript::{HEALTH_BODY_CAP, Outcome, Step};
use mcpulse_wire::{json, text};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The most schema violations quoted in one `tool-output-invalid` finding.
const MAX_VIOLATIONS: usize = 3;
/// Violations counted past the shown ones ("and 10+ more"): the count is bounded work.
const MAX_COUNTED_VIOLATIONS: usize = 10;
/// Compiled-size bound of one schema `pattern` (and of its lazy DFA cache), in bytes.
const MAX_PATTERN_BYTES: usize = 1 << 20;

/// One call as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallResult {
    /// The tool's name (inert).
    pub tool: String,
    /// `synthetic` (`--call`) or `health-tool`.
    pub purpose: CallPurpose,
    /// `healthy`, `degraded` or `down`: what this call's findings make of it.
    pub status: Status,
    /// From the request to its reply (or to giving up); null when not sent.
    pub ms: Option<f64>,
    pub budget_ms: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub critical: bool,
    /// Why it was not sent (`not-listed`, `destructive`, `not-read-only`,
    /// `required-arguments`, `no-time`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<mcpulse_wire::call::Refusal>,
    /// Given up at its budget, and cancelled.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
    /// A health tool's reported status, as healthy/degraded/down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<Status>,
    /// The codes of this call's findings.
    pub findings: Vec<Rule>,
}

/// The findings and results of every call in the transcript.
/// Also the components the health tool's document lists.
pub(super) fn judge(
    replies: &Replies<'_>,
    tools: &[&Value],
) -> (Vec<Finding>, Vec<CallResult>, Vec<Component>) {
    let tr = replies.transcript();
    let mut findings = Vec::new();
    let mut results = Vec::new();
    let mut found = Vec::new();
    for rec in &tr.calls {
        let mut own = Vec::new();
        let mut reported = None;
        let ex = rec.exchange.and_then(|i| tr.exchanges.get(i));
        let name = text::field(&rec.spec.tool).into_owned();
        let what = match rec.purpose {
            CallPurpose::Synthetic => format!("the call of {name}"),
            CallPurpose::HealthTool => format!("the health tool {name}"),
        };
        if let Some(why) = rec.refused {
            own.push(
                Rule::ToolCallRefused.finding(format!("{name} was not called: {}", why.as_str())),
            );
        } else if let Some(ex) = ex.filter(|e| e.step == Step::ToolsCall) {
            let budget = rec.spec.budget_ms as f64;
            let decoded = replies.of(ex);
            match decoded.as_ref().map(|d| &d.message) {
                None if matches!(ex.outcome, Outcome::Timeout) => {
                    let cancelled = if rec.cancelled { "; cancelled" } else { "" };
                    let within = match rec.deadline_ms {
                        // The probe's `--timeout` came first: the budget never ran out.
                        Some(left) => format!(
                            "within the {left} ms left before the probe's deadline (its budget is {budget:.0} ms)"
                        ),
                        None => format!("within its {budget:.0} ms budget"),
                    };
                    own.push(
                        Rule::ToolCallSlow
                            .finding(format!("{what} did not answer {within}{cancelled}")),
                    );
                }
                None => own.push(Rule::ToolCallFailed.finding(format!(
                    "{what} got no reply: {}",
                    crate::evidence::describe(Some(ex))
                ))),
                Some(Message::Error { error, .. }) => {
                    own.push(Rule::ToolCallFailed.finding(format!(
                        "{what} answered with JSON-RPC error {}: {}",
                        error.code,
                        text::message(&error.message)
                    )))
                }
                Some(Message::Result { result, .. }) => {
                    if ex.elapsed_ms > budget {
                        own.push(Rule::ToolCallSlow.finding(format!(
                            "{what} took {:.0} ms, over its {budget:.0} ms budget",
                            ex.elapsed_ms
                        )));
                    }
                    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
                    if rec.purpose == CallPurpose::HealthTool {
                        reported = health_document(result, &name, is_error, &mut own, &mut found);
                    } else if is_error {
                        own.push(Rule::ToolCallFailed.finding(format!(
                            "{what} returned isError: true{}",
                            first_text(result)
                        )));
                    }
                    let tool = tools
                        .iter()
                        .find(|t| t.get("name").and_then(Value::as_str) == Some(&rec.spec.tool));
                    if !is_error && let Some(schema) = tool.and_then(|t| t.get("outputSchema")) {
                        output_schema(schema, result, &what, &mut own);
                    }
                    for e in &rec.spec.expect {
                        if let Err(found) = e.check(result) {
                            own.push(Rule::ToolExpectationFailed.finding(format!(
                                "{what}: {} does not hold: {}",
                                text::field(&e.to_string()),
                                text::field(&found)
                            )));
                        }
                    }
                }
                Some(_) => own.push(Rule::ToolCallFailed.finding(format!(
                    "{what} got a reply that is neither a result nor an error"
                ))),
            }
        } else {
            own.push(Rule::ToolCallFailed.finding(format!("{what} was not recorded")));
        }
        let failed = own
            .iter()
            .any(|f| f.severity > crate::rules::Severity::Info);
        if rec.spec.critical && failed {
            own.push(
                Rule::CriticalCallFailed.finding(format!("{what} is marked critical and failed")),
            );
        }
        results.push(CallResult {
            tool: name,
            purpose: rec.purpose,
            status: Status::from_findings(&own),
            ms: ex
                .filter(|_| rec.refused.is_none())
                .map(|e| round(e.elapsed_ms)),
            budget_ms: rec.spec.budget_ms,
            critical: rec.spec.critical,
            refused: rec.refused,
            cancelled: rec.cancelled,
            reported,
            findings: own.iter().map(|f| f.code).collect(),
        });
        findings.extend(own);
    }
    (findings, results, found)
}

/// ` : <first text content>`, inert and cut, or nothing.
fn first_text(result: &Value) -> String {
    result
        .pointer("/content/0/text")
        .and_then(Value::as_str)
        .map(|t| format!(": {}", text::message(t)))
        .unwrap_or_default()
}

/// `structuredContent` against the tool's `outputSchema`.
fn output_schema(schema: &Value, result: &Value, what: &str, out: &mut Vec<Finding>) {
    // The server writes the schema: the default engine (fancy-regex) backtracks, so a
    // `pattern` like `^(a|aa)*(?!b)$` over a long string runs for minutes. The `regex`
    // engine is linear in the input; a pattern it cannot compile (look-around,
    // back-references) makes the schema "not compile", which is reported, not run.
    let patterns = jsonschema::PatternOptions::regex()
        .size_limit(MAX_PATTERN_BYTES)
        .dfa_size_limit(MAX_PATTERN_BYTES);
    let validator = match jsonschema::options()
        .with_pattern_options(patterns)
        .build(schema)
    {
        Ok(v) => v,
        Err(e) => {
            out.push(Rule::ToolOutputSchemaInvalid.finding(format!(
                "{what}: the tool's outputSchema does not compile: {}",
                text::message(&e.to_string())
            )));
            return;
        }
    };
    let Some(content) = result.get("structuredContent") else {
        out.push(Rule::ToolOutputInvalid.finding(format!(
            "{what}: the tool declares an outputSchema but the result has no structuredContent"
        )));
        return;
    };
    let mut errors = validator.iter_errors(content);
    let shown: Vec<String> = errors
        .by_ref()
        .take(MAX_VIOLATIONS)
        .map(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_owned() } else { at };
            format!("at {}: {}", text::field(&at), text::field(&e.to_string()))
        })
        .collect();
    if shown.is_empty() {
        return;
    }
    // Counting every violation would walk the whole (hostile, large) document again.
    let more = errors.take(MAX_COUNTED_VIOLATIONS).count();
    let more = if more == MAX_COUNTED_VIOLATIONS {
        format!("{more}+")
    } else {
        more.to_string()
    };
    let more = if more != "0" {
        format!(" (and {more} more)")
    } else {
        String::new()
    };
    out.push(Rule::ToolOutputInvalid.finding(format!(
        "{what}: structuredContent does not match the outputSchema: {}{more}",
        shown.join("; ")
    )));
}

/// The most estimated heap bytes a health document read from a tool's text may take (see
/// [`mcpulse_wire::json::Cost`]): the text is at most [`HEALTH_BODY_CAP`] (64 KiB) bytes, as a
/// health endpoint's body, and even 64 KiB of tiny objects stays under this.
const TEXT_DOCUMENT_BUDGET: usize = 8 << 20;

/// A health document in a tool's text content (the first text that is a JSON object), read
/// only from a text of at most [`HEALTH_BODY_CAP`] bytes and within [`TEXT_DOCUMENT_BUDGET`]:
/// the reply as a whole was read within the judge's budget, but a string inside it was not,
/// and 8 MiB of `{"a":1}` in one text took ~500 MB as a DOM. A longer text is no health
/// document.
fn text_document(result: &Value) -> Option<Value> {
    let limits = json::Limits {
        budget: TEXT_DOCUMENT_BUDGET,
        list: None,
    };
    result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("text").and_then(Value::as_str))
        .filter(|t| t.len() <= HEALTH_BODY_CAP)
        .find_map(|t| {
            json::parse(t, &limits)
                .ok()
                .map(|p| p.value)
                .filter(Value::is_object)
        })
}

/// What a health tool's reply (`result`) says, read as the probe reads it: the status it
/// reports (None: no health document), the findings, and the components it lists. For a
/// caller that called the tool itself (the gateway's `tool` checks over a session it holds).
pub fn health_tool_reply(
    result: &Value,
    tool: &str,
) -> (Option<Status>, Vec<Finding>, Vec<Component>) {
    let name = text::field(tool).into_owned();
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    let (mut out, mut found) = (Vec::new(), Vec::new());
    let reported = health_document(result, &name, is_error, &mut out, &mut found);
    (reported, out, found)
}

/// A health tool's result as a health document: its status and failing components as
/// findings, and the status it reports.
fn health_document(
    result: &Value,
    name: &str,
    is_error: bool,
    out: &mut Vec<Finding>,
    found: &mut Vec<Component>,
) -> Option<Status> {
    // Borrowed: `structuredContent` was read within the judge's budget with the reply.
    let from_text;
    let doc: Option<&Value> = match result.get("structuredContent").filter(|v| v.is_object()) {
        Some(d) => Some(d),
        None => {
            from_text = text_document(result);
            from_text.as_ref()
        }
    };
    let level = doc
        .and_then(|d| d.get("status"))
        .and_then(Value::as_str)
        .and_then(endpoint::level);
    let Some(level) = level else {
        let rule = if is_error {
            Rule::ToolCallFailed
        } else {
            Rule::HealthToolInvalid
        };
        out.push(rule.finding(format!(
            "the health tool {name} returned{} no health document (a `status` of ok, degraded or down){}",
            if is_error { " isError: true and" } else { "" },
            first_text(result)
        )));
        return None;
    };
    let detail = doc
        .and_then(|d| d.get("output").or_else(|| d.get("message")))
        .and_then(Value::as_str)
        .map(|o| format!(": {}", text::message(o)))
        .unwrap_or_default();
    let reported = match level {
        Level::Pass => Status::Healthy,
        Level::Warn => {
            out.push(
                Rule::HealthToolDegraded
                    .finding(format!("the health tool {name} reports degraded{detail}")),
            );
            Status::Degraded
        }
        Level::Fail => {
            out.push(
                Rule::HealthToolDown
                    .finding(format!("the health tool {name} reports down{detail}")),
            );
            Status::Down
        }
    };
    if is_error && level == Level::Pass {
        out.push(Rule::ToolCallFailed.finding(format!(
            "the health tool {name} reports ok but returned isError: true"
        )));
    }
    if let Some(checks) = doc
        .and_then(|d| d.get("checks").or_else(|| d.get("components")))
        .and_then(Value::as_object)
    {
        endpoint::components(
            checks,
            &format!(" (health tool {name})"),
            out,
            &mut |c, status| {
                found.push(Component {
                    name: c,
                    status,
                    source: "health-tool".into(),
                    tool: Some(name.to_owned()),
                })
            },
        );
    }
    Some(reported)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::{Policy, Transcript, judge};

    /// A recorded fixture with `from` replaced by `to` in its text (raw JSON: `to` is written
    /// as JSON escapes, as a server would send them).
    fn edited(fixture: &str, from: &str, to: &str) -> Transcript {
        let text = fixture.replace(from, to);
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn what_a_tool_says_reaches_findings_inert() {
        let failed = edited(
            include_str!("../../tests/transcripts/tool-call-failed.json"),
            "orders-db unreachable",
            r"\\u001b]0;pwned\\u0007\\u001b[2J\\u202eunreachable",
        );
        let down = edited(
            include_str!("../../tests/transcripts/health-tool-down.json"),
            "orders-db",
            r"db\\u001b[31m\\nFAKE",
        );
        for tr in [failed, down] {
            let report = judge(&tr, &Policy::default());
            assert!(
                report.findings.iter().any(|f| f.message.contains("\\x1b")),
                "the hostile text reached a finding, escaped: {:?}",
                report.findings
            );
            for f in &report.findings {
                assert!(
                    !f.message.chars().any(mcpulse_wire::text::is_escaped),
                    "{:?}",
                    f.message
                );
            }
        }
    }

    /// The recorded health-tool fixture with its `tools/call` reply replaced by `result`.
    fn health_tool_answering(result: serde_json::Value) -> Transcript {
        let mut tr: Transcript = serde_json::from_str(include_str!(
            "../../tests/transcripts/health-tool-degraded.json"
        ))
        .unwrap();
        let ex = tr
            .exchanges
            .iter_mut()
            .find(|e| e.step == mcpulse_wire::transcript::Step::ToolsCall)
            .unwrap();
        let id = ex.id.unwrap();
        ex.frames[0].raw =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
        tr
    }

    #[test]
    fn a_health_document_in_the_text_content_is_read() {
        let text = r#"{"status":"down","checks":{"cache":{"status":"warn"}}}"#;
        let tr = health_tool_answering(serde_json::json!({
            "content": [{"type": "text", "text": "checking..."}, {"type": "text", "text": text}]
        }));
        let report = judge(&tr, &Policy::default());
        let codes: Vec<&str> = report.findings.iter().map(|f| f.code.code()).collect();
        assert!(codes.contains(&"health-tool-down"), "{codes:?}");
        assert!(
            report
                .findings
                .iter()
                .any(|f| f.message == "cache reports warn (health tool health_check)"),
            "{:?}",
            report.findings
        );
        assert_eq!(report.calls[0].reported, Some(crate::Status::Down));
        // Neither structured nor JSON text: not a health document.
        let tr = health_tool_answering(serde_json::json!({
            "content": [{"type": "text", "text": "all good!"}]
        }));
        let report = judge(&tr, &Policy::default());
        assert!(
            report
                .findings
                .iter()
                .any(|f| f.code == crate::Rule::HealthToolInvalid),
            "{:?}",
            report.findings
        );
    }

    /// `output_schema` on a thread, failing the test if it takes longer than `limit`.
    fn output_schema_within(
        schema: serde_json::Value,
        result: serde_json::Value,
        limit: std::time::Duration,
    ) -> Vec<crate::Finding> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut out = Vec::new();
            super::output_schema(&schema, &result, "tool t", &mut out);
            let _ = tx.send(out);
        });
        rx.recv_timeout(limit)
            .expect("the outputSchema check must finish in bounded time")
    }

    #[test]
    fn a_hostile_output_schema_cannot_hang_the_judge() {
        // The review's reproduction: a backtracking pattern over 20,000 long strings ran
        // for minutes with the default (fancy-regex) engine.
        let hostile = format!("{}b", "a".repeat(25));
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"v": {"type": "array", "items": {"type": "string", "pattern": "^(a|aa)*(?!b)$"}}}
        });
        let result = serde_json::json!({"structuredContent": {"v": vec![hostile.clone(); 20_000]}});
        let out = output_schema_within(schema, result, std::time::Duration::from_secs(5));
        assert!(
            out.iter()
                .any(|f| f.code == crate::Rule::ToolOutputSchemaInvalid),
            "a pattern the linear engine refuses is reported, not run: {out:?}"
        );
        // A pattern the linear engine accepts still validates, and 20,000 violations are
        // counted only up to a bound.
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"v": {"type": "array", "items": {"type": "string", "pattern": "^(a|aa)*$"}}}
        });
        let result = serde_json::json!({"structuredContent": {"v": vec![hostile; 20_000]}});
        let out = output_schema_within(schema, result, std::time::Duration::from_secs(5));
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].code, crate::Rule::ToolOutputInvalid);
        assert!(
            out[0].message.ends_with("(and 10+ more)"),
            "{}",
            out[0].message
        );
    }

    #[test]
    fn a_call_cut_by_the_probe_deadline_says_so() {
        let slow = include_str!("../../tests/transcripts/tool-call-slow.json");
        let report = judge(&serde_json::from_str(slow).unwrap(), &Policy::default());
        let m = |r: &crate::Report| {
            r.findings
                .iter()
                .find(|f| f.code == crate::Rule::ToolCallSlow)
                .map(|f| f.message.clone())
                .unwrap()
        };
        assert_eq!(
            m(&report),
            "the call of slow_report did not answer within its 200 ms budget; cancelled"
        );
        let cut = edited(
            slow,
            r#""cancelled": true"#,
            r#""cancelled": true, "deadline_ms": 150"#,
        );
        assert_eq!(
            m(&judge(&cut, &Policy::default())),
            "the call of slow_report did not answer within the 150 ms left before the probe's deadline (its budget is 200 ms); cancelled"
        );
    }
}
