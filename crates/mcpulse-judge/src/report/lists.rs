//! The inventory: `tools/list`, `prompts/list`, `resources/list` and
//! `resources/templates/list`, page by page (cursors, the page and size caps, items kept and
//! dropped), and the modern result fields. It does not judge the handshake (`session`).
//!
//! The rule per list (docs/probe.md, "The lists"): `tools/list` failing in any way is
//! `tools-list-failed` (degraded) when the tools capability is advertised, else
//! `tools-list-unsupported` (info). `prompts/list`, `resources/list` and
//! `resources/templates/list` are sent only when their capability is advertised; a first page
//! answered `-32601 Method not found` is `optional-method-missing` (info: the server stays
//! healthy, as agents that do not use them are unaffected), any other failure is
//! `prompts-list-failed` or `resources-list-failed` (degraded).

use super::{Handshake, Judgement, Report, ToolSummary};
use crate::evidence::{describe, round};
use crate::replies::Replies;
use crate::rules::Rule;
use mcpulse_wire::jsonrpc::Message;
use mcpulse_wire::transcript::{Exchange, Step};
use mcpulse_wire::version::Era;
use serde_json::Value;

/// A list as judged: the items kept, and how many the server sent.
struct Listed<'a> {
    items: Vec<&'a Value>,
    count: usize,
}

impl<'a> Judgement<'a> {
    /// The lists after a handshake: counts, the tools' summaries, the time `tools/list` took,
    /// and what failed.
    pub(super) fn inventory(
        &mut self,
        report: &mut Report,
        hs: &Handshake<'_>,
        caps: Option<&Value>,
    ) {
        let tr = self.tr;
        let sent = tr.exchanges.iter().any(|e| e.step == Step::ToolsList);
        let tools = self.list(Step::ToolsList, "tools", caps, hs.era);
        if let Some(listed) = &tools {
            report.tool_count = Some(listed.count);
            report.tools = listed
                .items
                .iter()
                .copied()
                .filter_map(tool_summary)
                .collect();
        } else if !sent {
            // The handshake worked but tools/list was never sent: the probe ran out of time
            // after it (a server stuck after `initialize`).
            let advertised = caps
                .as_ref()
                .is_some_and(|c| c.get("tools").is_some_and(|v| !v.is_null()));
            let rule = if advertised {
                Rule::ToolsListFailed
            } else {
                Rule::ToolsListUnsupported
            };
            self.add(rule.finding(format!(
                "tools/list was never answered: the probe ran out of time after the {}",
                hs.ex.step.as_str()
            )));
        }
        if sent {
            // All pages, whether or not the list was usable.
            let ms: f64 = tr
                .exchanges
                .iter()
                .filter(|e| e.step == Step::ToolsList)
                .map(|e| e.elapsed_ms)
                .sum();
            report.timings_ms.tools_list = Some(round(ms));
        }
        report.prompt_count = self
            .list(Step::PromptsList, "prompts", caps, hs.era)
            .map(|l| l.count);
        report.resource_count = self
            .list(Step::ResourcesList, "resources", caps, hs.era)
            .map(|l| l.count);
        report.resource_template_count = self
            .list(
                Step::ResourceTemplatesList,
                "resourceTemplates",
                caps,
                hs.era,
            )
            .map(|l| l.count);
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
                    let rule = match (step, advertised) {
                        (Step::ToolsList, false) => Rule::ToolsListUnsupported,
                        (Step::ToolsList, true) => Rule::ToolsListFailed,
                        // Only the first page: a method that answered page 1 exists, and a
                        // later -32601 is a broken list, not a missing method.
                        _ if ex.page.is_none_or(|p| p <= 1) && method_not_found(replies, ex) => {
                            Rule::OptionalMethodMissing
                        }
                        _ => list_failed(step),
                    };
                    let message = if rule == Rule::OptionalMethodMissing {
                        format!(
                            "{} is not implemented although the {cap_key} capability is advertised: {why}",
                            step.as_str()
                        )
                    } else {
                        format!("{}{page} failed: {why}", step.as_str())
                    };
                    self.add(rule.finding(message));
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

    pub(super) fn modern_fields(&mut self, what: &str, result: &Value) {
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
}

/// Whether `ex` was answered `-32601 Method not found` (on HTTP with any status: modern servers
/// send it with 404, legacy ones with 200).
fn method_not_found(replies: &Replies<'_>, ex: &Exchange) -> bool {
    matches!(
        replies.cached(ex).map(|d| &d.message),
        Some(Message::Error { error, .. }) if error.code == METHOD_NOT_FOUND
    )
}

/// JSON-RPC's "Method not found".
const METHOD_NOT_FOUND: i64 = -32601;

/// The finding for a list (`step`) that failed or was cut short.
pub(super) fn list_failed(step: Step) -> Rule {
    match step {
        Step::ToolsList => Rule::ToolsListFailed,
        Step::PromptsList => Rule::PromptsListFailed,
        _ => Rule::ResourcesListFailed,
    }
}

pub(super) fn tool_summary(v: &Value) -> Option<ToolSummary> {
    let name = v.get("name")?.as_str()?.to_owned();
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(ToolSummary {
        name,
        title: s("title"),
        description: s("description"),
    })
}
