//! The server's own HTTP health endpoint (`--health-url`): what its status code and document
//! say, as findings.
//!
//! Read: a 2xx with a health document (`application/health+json` as
//! draft-inadarei-api-health-check-06 has it, or the seeds' `{"status": ..., "checks": {...}}`
//! where a check is a status string, an object with `status`, or the draft's array of them),
//! or a 2xx whose whole body is `ok` (kube-apiserver's `/healthz`); the `[+]x ok`/`[-]x failed`
//! lines of a Kubernetes-style text body are its checks. The top-level status maps
//! `pass`/`ok`/`up`/`healthy` → pass, `warn`/`degraded` → warn, `fail`/`error`/`down`/
//! `unhealthy` → fail (case-insensitive). A 4xx/5xx is down whatever its body says; a 2xx
//! that is not a health document (an HTML page, no `status`) is not health.
//!
//! Each component whose status is `warn` or `fail` is one finding naming it, at most
//! [`MAX_COMPONENT_FINDINGS`] (the rest counted in the last). Every text taken from the
//! document is made inert and cut ([`mcpulse_wire::text`]).

use crate::rules::{Finding, Rule, Status};
use mcpulse_wire::text;
use mcpulse_wire::transcript::HealthFetch;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The most component findings from one document.
pub const MAX_COMPONENT_FINDINGS: usize = 20;

/// The most components listed from one document (healthy ones included): the monitor keeps a
/// state per listed component, so a document with thousands of keys must not make thousands.
pub const MAX_COMPONENTS: usize = 32;

/// One component of a health document (an endpoint's or a health tool's) as it reported
/// itself: what the monitor keeps a state for, so that "orders-db down behind X" is alerted
/// by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Component {
    /// Its key in `checks` (inert, cut).
    pub name: String,
    /// pass → healthy, warn → degraded, fail → down.
    pub status: Status,
    /// `health-endpoint`, or `health-tool` (the tool's name in `tool`).
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Level {
    Pass,
    Warn,
    Fail,
}

/// A health document's status word (an endpoint's or a health tool's).
pub(super) fn level(s: &str) -> Option<Level> {
    match s.trim().to_ascii_lowercase().as_str() {
        "pass" | "ok" | "up" | "healthy" => Some(Level::Pass),
        "warn" | "degraded" => Some(Level::Warn),
        "fail" | "error" | "down" | "unhealthy" => Some(Level::Fail),
        _ => None,
    }
}

/// The findings of every health endpoint read in the transcript, and the components their
/// documents list.
pub(super) fn findings(fetches: &[HealthFetch]) -> (Vec<Finding>, Vec<Component>) {
    let mut out = Vec::new();
    let mut found = Vec::new();
    for f in fetches.iter().filter(|f| !f.discovered) {
        one(f, &mut out, &mut found);
    }
    // Discovery: the reads that answered as a health endpoint (a 404, a catch-all page say
    // nothing) are the server's health; the worst of them is judged as if it had been given,
    // the first in the order of the paths among equals, so that a liveness path (`/healthz`
    // 200 `ok`) never hides a readiness one failing (`/readyz` 503). A 5xx that is no health
    // document (Kubernetes' `[-]db failed` text) counts once another path answered as a health
    // endpoint: the origin has one, and this path says it is failing. None is a note.
    let discovered: Vec<&HealthFetch> = fetches.iter().filter(|f| f.discovered).collect();
    if !discovered.is_empty() {
        let any = discovered.iter().any(|f| health_shape(f));
        let worst = discovered
            .iter()
            .enumerate()
            .filter(|(_, f)| any && (health_shape(f) || server_error(f)))
            .max_by_key(|(i, f)| (badness(f), std::cmp::Reverse(*i)))
            .map(|(_, f)| *f);
        match worst {
            Some(f) => one(f, &mut out, &mut found),
            None => {
                let tried: Vec<String> = discovered
                    .iter()
                    .map(|f| {
                        let answer = match (f.status, &f.error) {
                            (Some(s), _) => s.to_string(),
                            (None, Some(e)) => text::message(e).into_owned(),
                            (None, None) => "no response".to_owned(),
                        };
                        format!("{} ({answer})", text::field(&f.url))
                    })
                    .collect();
                out.push(Rule::HealthEndpointNotFound.finding(format!(
                    "no health endpoint found: {} answered no health document",
                    tried.join(", ")
                )));
            }
        }
    }
    (out, found)
}

/// Whether a discovered read is a health endpoint's answer: a 2xx whose body is `ok` or a
/// health document (a known `status`), or a 5xx with a health document (a 503 from a server
/// that is not ready). A 404, a redirect, an HTML page (with 200 or not) or a cut body is not.
fn health_shape(f: &HealthFetch) -> bool {
    let Some(status) = f.status.filter(|_| !f.truncated) else {
        return false;
    };
    let body = f.body.as_deref().unwrap_or("");
    let stated = serde_json::from_str::<Value>(body)
        .ok()
        .filter(Value::is_object)
        .and_then(|d| d.get("status").and_then(Value::as_str).and_then(level));
    match status {
        200..=299 => body.trim().eq_ignore_ascii_case("ok") || stated.is_some(),
        500..=599 => stated.is_some(),
        _ => false,
    }
}

/// A 5xx read whole: the server says it is failing, whatever its body.
fn server_error(f: &HealthFetch) -> bool {
    !f.truncated && f.status.is_some_and(|s| (500..=599).contains(&s))
}

/// How bad a discovered read is: a 5xx or a `fail` document 2, a `warn` document 1, else 0.
fn badness(f: &HealthFetch) -> u8 {
    if server_error(f) {
        return 2;
    }
    let stated = serde_json::from_str::<Value>(f.body.as_deref().unwrap_or(""))
        .ok()
        .and_then(|d| d.get("status").and_then(Value::as_str).and_then(level));
    match stated {
        Some(Level::Fail) => 2,
        Some(Level::Warn) => 1,
        _ => 0,
    }
}

/// The checks of a Kubernetes-style text body (`[+]ping ok`, `[-]etcd failed: reason
/// withheld`, as kube-apiserver's `/readyz?verbose` writes them) as a health document's
/// `checks`: pass or fail by name. Empty for any other text.
fn kube_checks(body: &str) -> serde_json::Map<String, Value> {
    body.lines()
        .filter_map(|l| {
            let (word, rest) = if let Some(r) = l.strip_prefix("[+]") {
                ("pass", r)
            } else {
                ("fail", l.strip_prefix("[-]")?)
            };
            let name = rest.split_whitespace().next()?;
            Some((name.to_owned(), Value::from(word)))
        })
        .collect()
}

/// What a `health-endpoint-invalid` finding (other than a body cut short) tells the user to
/// do: the usual cause of an answer that is not a health document is a wrong URL.
const CHECK_URL: &str =
    "check the health URL (`--health-url`, or `health_url` in the monitor's target)";

fn one(f: &HealthFetch, out: &mut Vec<Finding>, found: &mut Vec<Component>) {
    let url = text::field(&f.url);
    let Some(status) = f.status else {
        let why = f.error.as_deref().unwrap_or("no response");
        out.push(
            Rule::HealthEndpointUnreachable
                .finding(format!("{url} could not be read: {}", text::message(why))),
        );
        return;
    };
    if f.truncated {
        let why = match &f.error {
            Some(e) => text::message(e).into_owned(),
            None => format!(
                "the body passed {} KiB",
                mcpulse_wire::transcript::HEALTH_BODY_CAP / 1024
            ),
        };
        out.push(Rule::HealthEndpointInvalid.finding(format!(
            "{url} answered {status} but the body could not be read whole: {why}"
        )));
        return;
    }
    let body = f.body.as_deref().unwrap_or("");
    let doc: Option<Value> = serde_json::from_str::<Value>(body)
        .ok()
        .filter(Value::is_object);
    let stated = doc
        .as_ref()
        .and_then(|d| d.get("status"))
        .and_then(Value::as_str)
        .and_then(level);
    let ct = f
        .content_type
        .as_deref()
        .map(|c| format!(" ({})", text::field(c)))
        .unwrap_or_default();
    let overall = match status {
        200..=299 => {
            if body.trim().eq_ignore_ascii_case("ok") {
                Level::Pass
            } else if let Some(l) = stated {
                l
            } else {
                let what = if doc.is_some() {
                    "a JSON object without a known `status`"
                } else if body.trim().is_empty() {
                    "an empty body"
                } else {
                    "a body that is not a health document"
                };
                out.push(Rule::HealthEndpointInvalid.finding(format!(
                    "{url} answered {status} with {what}{ct}: a 2xx alone is not health; {CHECK_URL}"
                )));
                return;
            }
        }
        300..=399 => {
            out.push(Rule::HealthEndpointInvalid.finding(format!(
                "{url} answered {status}, a redirect that was not followed: {CHECK_URL}"
            )));
            return;
        }
        // A 404 (or another 4xx) that is not a health document is a wrong `health_url`, a
        // config mistake, not the server down: a 4xx health document (`fail`) still counts.
        400..=499 if stated.is_none() => {
            out.push(Rule::HealthEndpointInvalid.finding(format!(
                "{url} answered {status}{ct}, not a health document: {CHECK_URL}"
            )));
            return;
        }
        _ => Level::Fail,
    };
    let output = doc
        .as_ref()
        .and_then(|d| d.get("output"))
        .and_then(Value::as_str)
        .map(|o| format!(": {}", text::message(o)))
        .unwrap_or_default();
    match overall {
        Level::Pass => {}
        Level::Warn => {
            out.push(Rule::HealthEndpointDegraded.finding(format!("{url} reports warn{output}")))
        }
        Level::Fail => {
            let stated = match stated {
                Some(Level::Fail) => " with status fail".to_string(),
                Some(_) | None => String::new(),
            };
            out.push(
                Rule::HealthEndpointDown
                    .finding(format!("{url} answered {status}{stated}{output}")),
            );
        }
    }
    let kube;
    let checks = match &doc {
        Some(d) => d.get("checks").and_then(Value::as_object),
        None => {
            kube = kube_checks(body);
            Some(&kube).filter(|k| !k.is_empty())
        }
    };
    if let Some(checks) = checks {
        components(checks, "", out, &mut |name, status| {
            found.push(Component {
                name,
                status,
                source: "health-endpoint".into(),
                tool: None,
            })
        });
    }
}

/// One finding per component at warn or fail; `source` (` (health tool x)`, or nothing for an
/// endpoint) follows each component's detail.
/// `found` is told each component's name (inert) and status, at most [`MAX_COMPONENTS`].
pub(super) fn components(
    checks: &serde_json::Map<String, Value>,
    source: &str,
    out: &mut Vec<Finding>,
    found: &mut dyn FnMut(String, Status),
) {
    let mut bad: Vec<String> = Vec::new();
    let mut more = 0usize;
    let mut listed = 0usize;
    for (key, v) in checks {
        // A check is a status string, an object, or the draft's array of objects (one a node).
        let entries: Vec<&Value> = match v {
            Value::Array(a) => a.iter().collect(),
            other => vec![other],
        };
        for e in entries {
            let (lvl, detail) = match e {
                Value::String(s) => (level(s), String::new()),
                Value::Object(o) => (
                    o.get("status").and_then(Value::as_str).and_then(level),
                    describe(o),
                ),
                _ => (None, String::new()),
            };
            if let Some(l) = lvl
                && listed < MAX_COMPONENTS
            {
                listed += 1;
                let status = match l {
                    Level::Pass => Status::Healthy,
                    Level::Warn => Status::Degraded,
                    Level::Fail => Status::Down,
                };
                found(text::field(key).into_owned(), status);
            }
            let word = match lvl {
                Some(Level::Warn) => "warn",
                Some(Level::Fail) => "fail",
                _ => continue,
            };
            if bad.len() >= MAX_COMPONENT_FINDINGS {
                more += 1;
                continue;
            }
            bad.push(format!(
                "{} reports {word}{detail}{source}",
                text::field(key)
            ));
        }
    }
    let n = bad.len();
    for (i, mut m) in bad.into_iter().enumerate() {
        if i + 1 == n && more > 0 {
            m.push_str(&format!(" (and {more} more unhealthy components)"));
        }
        out.push(Rule::HealthComponentUnhealthy.finding(m));
    }
}

/// ` (componentId x, observed 12 ms): output`, from what the entry has.
fn describe(o: &serde_json::Map<String, Value>) -> String {
    let mut facts = Vec::new();
    if let Some(id) = o.get("componentId").and_then(Value::as_str) {
        facts.push(format!("id {}", text::field(id)));
    }
    if let Some(v) = o.get("observedValue").filter(|v| !v.is_null()) {
        let value = match v {
            Value::String(s) => text::field(s).into_owned(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => "…".to_string(),
        };
        let unit = o
            .get("observedUnit")
            .and_then(Value::as_str)
            .map(|u| format!(" {}", text::field(u)))
            .unwrap_or_default();
        facts.push(format!("observed {value}{unit}"));
    } else if let Some(ms) = o.get("latency_ms").and_then(Value::as_f64) {
        // The seeds' shape gives a component's latency this way.
        facts.push(format!("latency {ms} ms"));
    }
    let mut s = if facts.is_empty() {
        String::new()
    } else {
        format!(" ({})", facts.join(", "))
    };
    if let Some(out) = o.get("output").and_then(Value::as_str) {
        s.push_str(&format!(": {}", text::message(out)));
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn fetch(status: u16, body: &str) -> HealthFetch {
        HealthFetch {
            url: "http://127.0.0.1:1/readyz".into(),
            at_ms: 0.0,
            elapsed_ms: Some(1.0),
            status: Some(status),
            content_type: Some("application/json".into()),
            body: Some(body.into()),
            truncated: false,
            redirects: Vec::new(),
            error: None,
            discovered: false,
        }
    }

    /// The findings alone.
    fn findings(f: &[HealthFetch]) -> Vec<Finding> {
        super::findings(f).0
    }

    fn codes(f: &[Finding]) -> Vec<&'static str> {
        f.iter().map(|f| f.code.code()).collect()
    }

    /// A mistyped health URL (a 404, an HTML page with 200) is a config mistake: degraded, with
    /// a message that says to check the URL; an endpoint that says it is down stays down.
    #[test]
    fn a_wrong_health_url_is_degraded_and_says_so_and_a_503_stays_down() {
        use crate::rules::Severity;
        for wrong in [
            fetch(404, "<html>Not Found</html>"),
            fetch(200, "<!doctype html><title>Sign in</title>"),
            fetch(301, ""),
        ] {
            let f = findings(&[wrong]);
            assert_eq!(codes(&f), ["health-endpoint-invalid"]);
            assert_eq!(f[0].severity, Severity::Warning);
            assert_eq!(Status::from_findings(&f), Status::Degraded);
            assert!(
                f[0].message
                    .contains("check the health URL (`--health-url`"),
                "{}",
                f[0].message
            );
        }
        for down in [
            fetch(503, "<html>Service Unavailable</html>"),
            fetch(200, r#"{"status":"fail"}"#),
            fetch(404, r#"{"status":"fail"}"#),
        ] {
            let f = findings(&[down]);
            assert_eq!(codes(&f), ["health-endpoint-down"]);
            assert_eq!(Status::from_findings(&f), Status::Down);
        }
    }

    #[test]
    fn statuses_and_shapes() {
        assert!(findings(&[fetch(200, "ok")]).is_empty());
        // A wrong URL is a config mistake; a 503 stays down.
        assert_eq!(
            codes(&findings(&[fetch(404, "not found")])),
            ["health-endpoint-invalid"]
        );
        assert_eq!(
            codes(&findings(&[fetch(403, "")])),
            ["health-endpoint-invalid"]
        );
        assert_eq!(
            codes(&findings(&[fetch(429, r#"{"status":"fail"}"#)])),
            ["health-endpoint-down"]
        );
        assert!(findings(&[fetch(200, r#"{"status":"UP"}"#)]).is_empty());
        assert_eq!(
            codes(&findings(&[fetch(503, "")])),
            ["health-endpoint-down"]
        );
        // A 5xx is down whatever the body claims.
        assert_eq!(
            codes(&findings(&[fetch(500, r#"{"status":"pass"}"#)])),
            ["health-endpoint-down"]
        );
        assert_eq!(
            codes(&findings(&[fetch(200, r#"{"status":"maybe"}"#)])),
            ["health-endpoint-invalid"]
        );
        assert_eq!(
            codes(&findings(&[fetch(200, "")])),
            ["health-endpoint-invalid"]
        );
        assert_eq!(
            codes(&findings(&[fetch(302, "")])),
            ["health-endpoint-invalid"]
        );
        let mut big = fetch(200, "{");
        big.truncated = true;
        assert_eq!(codes(&findings(&[big])), ["health-endpoint-invalid"]);
        let f = findings(&[fetch(
            200,
            r#"{"status":"pass","checks":{"db":{"status":"down","latency_ms":12}}}"#,
        )]);
        assert_eq!(codes(&f), ["health-component-unhealthy"]);
        assert_eq!(f[0].message, "db reports fail (latency 12 ms)");
    }

    /// `--health-url auto`: the worst discovered read with a health document is judged as if
    /// given; 404s and HTML pages (even with 200 on every path) are not health, and none found
    /// is one info finding.
    #[test]
    fn discovery_takes_the_first_health_document_and_none_is_a_note() {
        let at = |path: &str, status: u16, body: &str| HealthFetch {
            url: format!("http://127.0.0.1:1{path}"),
            discovered: true,
            ..fetch(status, body)
        };
        let html = "<!doctype html><html><body>Welcome</body></html>";
        // /healthz 404, /readyz down with a component, /health fine: /readyz is the endpoint.
        let (f, listed) = super::findings(&[
            at("/healthz", 404, "not found"),
            at(
                "/readyz",
                503,
                r#"{"status":"fail","checks":{"db":"fail"}}"#,
            ),
            at("/health", 200, r#"{"status":"pass"}"#),
        ]);
        assert_eq!(
            codes(&f),
            ["health-endpoint-down", "health-component-unhealthy"]
        );
        assert!(f[0].message.contains("/readyz"), "{}", f[0].message);
        assert_eq!(listed.len(), 1);
        // A bare `ok` counts (kube-apiserver's /healthz).
        assert!(findings(&[at("/healthz", 200, "ok"), at("/readyz", 200, html)]).is_empty());
        // Liveness never hides readiness: the worst answer is judged, whatever the order, and
        // a 503 in Kubernetes' text counts once another path answered, its `[-]` lines the
        // components.
        let kube = "[+]ping ok\n[-]orders-db failed: reason withheld\nreadyz check failed";
        for readyz in [
            at("/readyz", 503, r#"{"status":"fail"}"#),
            at("/readyz", 503, kube),
        ] {
            for reads in [
                vec![readyz.clone(), at("/healthz", 200, "ok")],
                vec![at("/healthz", 200, "ok"), readyz.clone()],
            ] {
                let (f, listed) = super::findings(&reads);
                assert_eq!(codes(&f)[0], "health-endpoint-down", "{f:?}");
                assert!(f[0].message.contains("/readyz answered 503"), "{f:?}");
                if readyz.body.as_deref() == Some(kube) {
                    assert_eq!(
                        codes(&f),
                        ["health-endpoint-down", "health-component-unhealthy"]
                    );
                    assert!(f[1].message.starts_with("orders-db reports fail"), "{f:?}");
                    assert_eq!(listed.len(), 2, "ping and orders-db");
                }
            }
        }
        // A `warn` document beats a `pass` one.
        let f = findings(&[
            at("/readyz", 200, r#"{"status":"pass"}"#),
            at("/health", 200, r#"{"status":"warn"}"#),
        ]);
        assert_eq!(codes(&f), ["health-endpoint-degraded"]);
        // HTML with 200 on every path, a 404, a redirect, an unreachable one: none found.
        for reads in [
            vec![
                at("/healthz", 200, html),
                at("/readyz", 200, html),
                at("/health", 200, html),
            ],
            vec![
                at("/healthz", 404, ""),
                at("/readyz", 302, ""),
                at("/health", 503, html),
            ],
        ] {
            let f = findings(&reads);
            assert_eq!(codes(&f), ["health-endpoint-not-found"], "{f:?}");
            assert!(f[0].message.contains("/healthz (") && f[0].message.contains("/health ("));
        }
    }

    #[test]
    fn server_text_is_inert_and_components_are_bounded() {
        let mut checks = serde_json::Map::new();
        for i in 0..500 {
            checks.insert(format!("c{i:03}\x1b[2J\n"), "fail".into());
        }
        let body = serde_json::json!({"status": "fail", "output": "\u{202e}evil\x1b]0;t\x07", "checks": checks});
        let (f, listed) = super::findings(&[fetch(503, &body.to_string())]);
        assert_eq!(
            listed.len(),
            MAX_COMPONENTS,
            "the components listed are bounded"
        );
        assert!(listed.iter().all(|c| !c.name.contains('\u{1b}')));
        assert_eq!(f.len(), 1 + MAX_COMPONENT_FINDINGS);
        assert!(
            f.iter().all(|f| !f.message.chars().any(text::is_escaped)),
            "{f:?}"
        );
        assert!(
            f[MAX_COMPONENT_FINDINGS]
                .message
                .ends_with("(and 480 more unhealthy components)")
        );
    }
}
