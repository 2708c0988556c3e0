//! One health model for everything that reports its own health: the monitor's `/livez` and
//! `/readyz`, the supervisor's (and, next, the gateway's and the rmcp kit's).
//!
//! A [`Health`] is a list of [`Check`]s (what was observed, when, and whether it passes) and the
//! words around them; this module turns it into the two forms a health endpoint serves:
//! - `application/health+json`, as draft-inadarei-api-health-check-06 has it: `checks` keyed
//!   `component:measurement`, each an array of one object (`componentId`, `componentType`,
//!   `observedValue`, `observedUnit`, `status`, `time`, `output`), the top-level `status` the
//!   worst check's, and an `output` only when it is not `pass`;
//! - kube-apiserver's `?verbose` text (`[+]name ok`, `[-]name failed: why`, then `readyz check
//!   passed`), which people read in a terminal.
//!
//! The HTTP status is part of the contract: `pass` and `warn` are 200, `fail` is 503.
//!
//! What it does not own: deciding the checks (the monitor's fleet, the supervisor's status do)
//! and HTTP (the callers' axum handlers put [`Rendered`] on the wire, with `Cache-Control:
//! no-store`: a stale `/readyz` is worse than none); the crate depends on nothing that does I/O. Output text is the
//! caller's: a check that quotes a server or a file makes the quote inert before it lands here.

use mcpulse_wire::units::format_rfc3339;
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::borrow::Cow;

/// `application/health+json`.
pub const HEALTH_JSON: &str = "application/health+json";
/// The `?verbose` text form's content type.
pub const VERBOSE_TEXT: &str = "text/plain; charset=utf-8";

/// The health+json statuses, ordered from best to worst (the overall status is the maximum).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    Pass,
    Warn,
    Fail,
}

impl CheckStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Pass => "pass",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
        }
    }

    /// The HTTP status an endpoint answers with: 200 for pass and warn, 503 for fail (the
    /// draft: pass and warn MUST be 2xx-3xx, fail 4xx-5xx).
    pub fn http_status(self) -> u16 {
        match self {
            CheckStatus::Pass | CheckStatus::Warn => 200,
            CheckStatus::Fail => 503,
        }
    }
}

/// One check: a component, one measurement of it, and whether it passes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// `component:measurement`, as the draft keys its checks (a colon only as the separator).
    pub key: Cow<'static, str>,
    /// The short name `?exclude=` and `?verbose` use.
    pub name: Cow<'static, str>,
    /// The draft's `componentId`: which instance (a process id, a target's name).
    pub component_id: Option<String>,
    /// `component`, `datastore` or `system`.
    pub component_type: Cow<'static, str>,
    pub status: CheckStatus,
    pub observed_value: Option<Value>,
    pub observed_unit: Option<Cow<'static, str>>,
    /// When the observation was made (Unix ms).
    pub time_ms: Option<i64>,
    /// Why it is not `pass` (or, on pass, a word for people); already inert.
    pub output: Option<String>,
    /// More members of the check object (the draft allows extra keys), such as the supervisor's
    /// recent restarts.
    pub extra: Map<String, Value>,
}

impl Check {
    /// A passing check with nothing observed yet; the builder methods below add the rest.
    pub fn new(
        key: impl Into<Cow<'static, str>>,
        name: impl Into<Cow<'static, str>>,
        component_type: impl Into<Cow<'static, str>>,
    ) -> Check {
        Check {
            key: key.into(),
            name: name.into(),
            component_id: None,
            component_type: component_type.into(),
            status: CheckStatus::Pass,
            observed_value: None,
            observed_unit: None,
            time_ms: None,
            output: None,
            extra: Map::new(),
        }
    }

    pub fn status(mut self, status: CheckStatus) -> Check {
        self.status = status;
        self
    }

    pub fn id(mut self, id: impl Into<String>) -> Check {
        self.component_id = Some(id.into());
        self
    }

    pub fn observed(
        mut self,
        value: impl Into<Value>,
        unit: impl Into<Cow<'static, str>>,
    ) -> Check {
        self.observed_value = Some(value.into());
        self.observed_unit = Some(unit.into());
        self
    }

    pub fn at(mut self, time_ms: i64) -> Check {
        self.time_ms = Some(time_ms);
        self
    }

    pub fn output(mut self, output: impl Into<String>) -> Check {
        self.output = Some(output.into());
        self
    }

    /// One more member of the check object; the draft's own members win over it.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Check {
        self.extra.insert(key.into(), value.into());
        self
    }

    /// The check as one element of its `checks` array.
    fn to_json(&self) -> Value {
        let mut o = self.extra.clone();
        if let Some(id) = &self.component_id {
            o.insert("componentId".into(), id.as_str().into());
        }
        o.insert("componentType".into(), self.component_type.as_ref().into());
        if let Some(v) = &self.observed_value {
            o.insert("observedValue".into(), v.clone());
        }
        if let Some(u) = &self.observed_unit {
            o.insert("observedUnit".into(), u.as_ref().into());
        }
        o.insert("status".into(), self.status.as_str().into());
        if let Some(t) = self.time_ms {
            o.insert("time".into(), format_rfc3339(t).into());
        }
        if let Some(out) = &self.output {
            o.insert("output".into(), out.as_str().into());
        }
        Value::Object(o)
    }
}

/// A service's health: who answers, and its checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    /// The draft's `serviceId` (`mcpulse`).
    pub service_id: Cow<'static, str>,
    /// The draft's `version`: the answering program's.
    pub version: Cow<'static, str>,
    pub description: Cow<'static, str>,
    pub checks: Vec<Check>,
}

/// What an endpoint puts on the wire: the HTTP status, `Content-Type` and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub http_status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Rendered {
    /// The headers to send it with: its type, and never cached (a stale `/readyz` is worse
    /// than none).
    pub fn headers(&self) -> [(&'static str, &'static str); 2] {
        [
            ("content-type", self.content_type),
            ("cache-control", "no-store"),
        ]
    }
}

/// The query flags kube-apiserver takes on its health endpoints: `?verbose`,
/// `?exclude=a&exclude=b`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    pub verbose: bool,
    pub exclude: Vec<String>,
}

impl Query {
    /// From the decoded query pairs (`verbose` counts unless it is `false` or `0`).
    pub fn from_pairs(pairs: Vec<(String, String)>) -> Query {
        let verbose = pairs
            .iter()
            .any(|(k, v)| k == "verbose" && v != "false" && v != "0");
        let exclude = pairs
            .into_iter()
            .filter(|(k, _)| k == "exclude")
            .map(|(_, v)| v)
            .collect();
        Query { verbose, exclude }
    }
}

impl Health {
    /// The overall status: the worst check's, `pass` without checks.
    pub fn status(&self) -> CheckStatus {
        self.checks
            .iter()
            .map(|c| c.status)
            .max()
            .unwrap_or(CheckStatus::Pass)
    }

    /// Drops the checks `?exclude=` names (kube-apiserver's way to ignore one check): by
    /// name, or by the full key (`search:breaker`) where a dependency and a tool's breaker
    /// share a name and only one is meant.
    pub fn without(mut self, exclude: &[String]) -> Health {
        self.checks
            .retain(|c| !exclude.iter().any(|e| *e == c.name || *e == c.key));
        self
    }

    /// The `application/health+json` document.
    pub fn to_json(&self) -> Value {
        let status = self.status();
        let mut map = Map::new();
        for c in &self.checks {
            map.insert(c.key.to_string(), Value::Array(vec![c.to_json()]));
        }
        let mut body = json!({
            "status": status.as_str(),
            "version": self.version.as_ref(),
            "serviceId": self.service_id.as_ref(),
            "description": self.description.as_ref(),
            "checks": map,
        });
        // The draft: `output` is omitted on pass; otherwise it says why, taken from the first
        // check that is as bad as the whole.
        if status != CheckStatus::Pass
            && let Some(out) = self
                .checks
                .iter()
                .filter(|c| c.status == status)
                .find_map(|c| c.output.clone())
            && let Some(o) = body.as_object_mut()
        {
            o.insert("output".into(), out.into());
        }
        body
    }

    /// kube-apiserver's verbose text; `what` names the endpoint (`livez`, `readyz`).
    pub fn verbose_text(&self, what: &str) -> String {
        let mut text = String::new();
        for c in &self.checks {
            let line = match (c.status, &c.output) {
                (CheckStatus::Fail, Some(o)) => format!("[-]{} failed: {o}\n", c.name),
                (CheckStatus::Fail, None) => format!("[-]{} failed\n", c.name),
                (CheckStatus::Warn, Some(o)) => format!("[+]{} ok (warn: {o})\n", c.name),
                _ => format!("[+]{} ok\n", c.name),
            };
            text.push_str(&line);
        }
        let verdict = if self.status() == CheckStatus::Fail {
            "failed"
        } else {
            "passed"
        };
        text.push_str(&format!("{what} check {verdict}\n"));
        text
    }

    /// The response to a request with these query flags (the status code is the same in
    /// both forms).
    pub fn render(self, query: &Query, what: &str) -> Rendered {
        let health = self.without(&query.exclude);
        let http_status = health.status().http_status();
        if query.verbose {
            Rendered {
                http_status,
                content_type: VERBOSE_TEXT,
                body: health.verbose_text(what),
            }
        } else {
            Rendered {
                http_status,
                content_type: HEALTH_JSON,
                body: health.to_json().to_string(),
            }
        }
    }
}

/// A duration in milliseconds with microsecond precision (health+json's `observedValue` for
/// `ms`).
pub fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

/// The health tool's word for a health+json status (what mcpulse-judge and most health tools
/// read: ok / degraded / down).
pub fn tool_word(s: CheckStatus) -> &'static str {
    match s {
        CheckStatus::Pass => "ok",
        CheckStatus::Warn => "degraded",
        CheckStatus::Fail => "down",
    }
}

/// A `health_check` tool's answer (the gateway's and the kit's): `status` ok/degraded/down,
/// `checks` keyed by name (a name already taken, as a dependency and a tool's breaker may
/// share one, by the full key, `search:breaker`: neither hides the other), each its health+json
/// check object, and the document's `output` when it has one. The caller puts it in
/// `structuredContent` and, as JSON, in a text block.
pub fn tool_content(h: &Health) -> Value {
    let doc = h.to_json();
    let mut checks = Map::new();
    if let Some(all) = doc.get("checks").and_then(Value::as_object) {
        for c in &h.checks {
            let Some(obj) = all.get(c.key.as_ref()).and_then(|a| a.get(0)) else {
                continue;
            };
            let key = if checks.contains_key(c.name.as_ref()) {
                c.key.to_string()
            } else {
                c.name.to_string()
            };
            checks.insert(key, obj.clone());
        }
    }
    let mut content = json!({
        "status": tool_word(h.status()),
        "checks": checks,
    });
    if let (Some(out), Some(o)) = (doc.get("output"), content.as_object_mut()) {
        o.insert("output".into(), out.clone());
    }
    content
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn sample() -> Health {
        Health {
            service_id: "mcpulse".into(),
            version: "1.2.3".into(),
            description: "test".into(),
            checks: vec![
                Check::new("child:state", "child", "component")
                    .id("4242")
                    .observed("RUNNING", "state")
                    .at(1_700_000_000_000),
                Check::new("heartbeat:responseTime", "heartbeat", "component")
                    .status(CheckStatus::Warn)
                    .observed(12.5, "ms")
                    .output("slow"),
                Check::new("restarts:count", "restarts", "system")
                    .status(CheckStatus::Fail)
                    .output("gave up"),
            ],
        }
    }

    /// A dependency and a tool's breaker named alike: both in the health tool's content, and
    /// `?exclude=` can leave out either one by its key.
    #[test]
    fn a_dependency_and_a_breaker_named_alike_hide_neither() {
        let h = Health {
            service_id: "kit".into(),
            version: "1".into(),
            description: "test".into(),
            checks: vec![
                Check::new("search:responseTime", "search", "datastore")
                    .status(CheckStatus::Warn)
                    .output("slow"),
                Check::new("search:breaker", "search", "component").observed("closed", "state"),
            ],
        };
        let content = tool_content(&h);
        assert_eq!(content["status"], "degraded");
        assert_eq!(content["checks"]["search"]["componentType"], "datastore");
        assert_eq!(
            content["checks"]["search:breaker"]["observedValue"],
            "closed"
        );
        let only_dep = h.clone().without(&["search:breaker".into()]);
        assert_eq!(only_dep.checks.len(), 1);
        assert_eq!(only_dep.checks[0].key, "search:responseTime");
        assert!(h.without(&["search".into()]).checks.is_empty());
    }

    #[test]
    fn health_json_has_the_drafts_shape() {
        assert_eq!(
            sample().to_json().to_string(),
            r#"{"checks":{"child:state":[{"componentId":"4242","componentType":"component","observedUnit":"state","observedValue":"RUNNING","status":"pass","time":"2023-11-14T22:13:20.000Z"}],"heartbeat:responseTime":[{"componentType":"component","observedUnit":"ms","observedValue":12.5,"output":"slow","status":"warn"}],"restarts:count":[{"componentType":"system","output":"gave up","status":"fail"}]},"description":"test","output":"gave up","serviceId":"mcpulse","status":"fail","version":"1.2.3"}"#
        );
    }

    #[test]
    fn the_worst_check_decides_and_fail_is_503() {
        let h = sample();
        assert_eq!(h.status(), CheckStatus::Fail);
        let r = h.clone().render(&Query::default(), "readyz");
        assert_eq!((r.http_status, r.content_type), (503, HEALTH_JSON));
        let q = Query::from_pairs(vec![("exclude".into(), "restarts".into())]);
        let r = h.clone().render(&q, "readyz");
        assert_eq!(r.http_status, 200);
        let v: Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["status"], "warn");
        assert_eq!(v["output"], "slow");
        let empty = Health {
            checks: vec![],
            ..h
        };
        let v = empty.to_json();
        assert_eq!(v["status"], "pass");
        assert!(v.get("output").is_none());
    }

    #[test]
    fn verbose_text_is_kube_apiservers() {
        let q = Query::from_pairs(vec![("verbose".into(), String::new())]);
        let r = sample().render(&q, "readyz");
        assert_eq!(r.content_type, VERBOSE_TEXT);
        assert_eq!(
            r.body,
            "[+]child ok\n[+]heartbeat ok (warn: slow)\n[-]restarts failed: gave up\nreadyz check failed\n"
        );
        assert!(!Query::from_pairs(vec![("verbose".into(), "0".into())]).verbose);
        assert!(!Query::from_pairs(vec![("verbose".into(), "false".into())]).verbose);
    }
}
