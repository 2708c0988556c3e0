//! One target's view (`/targets/{name}?range=`): the verdict and its findings with each rule's
//! explanation, latency per phase over a chosen range, the incident timeline (events, open
//! incidents, alerts and the sinks they went to), maintenance windows, drift, the accepted
//! contract, the security grade and the dependencies behind the server.
//!
//! The store is read once per section, all on one blocking task; a store failure leaves the
//! sections it feeds saying so, and the rest of the page stands.

use super::fleet::in_maintenance;
use super::{ago, block, chart, encode, esc, field, frame, html, message, millis, percent, time};
use crate::api::ApiState;
use crate::check::Stats;
use crate::fleet::TargetView;
use crate::state::Health;
use crate::store::SentAlert;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use mcpulse_judge::AnyRule;
use std::fmt::Write as _;

/// The chart's ranges: name, length.
const RANGES: [(&str, i64); 4] = [
    ("1h", 3_600_000),
    ("24h", 86_400_000),
    ("7d", 7 * 86_400_000),
    ("30d", 30 * 86_400_000),
];

/// The most checks a chart reads (30 days of one check a minute is 43,200).
const CHART_CHECKS: usize = 50_000;
/// The most events and alert rows shown.
const TIMELINE: usize = 100;
/// Lines of one schema shown.
const SCHEMA_LINES: usize = 200;
/// Tools of a contract shown.
const TOOLS_SHOWN: usize = 500;

/// Where a finding's rule is documented: the workspace's `repository`, one place to change.
const FINDINGS_DOC: &str = concat!(env!("CARGO_PKG_REPOSITORY"), "/blob/main/docs/findings.md");
/// Where the security rules and the grade's formula are explained.
const CHECKS_DOC: &str = concat!(env!("CARGO_PKG_REPOSITORY"), "/blob/main/docs/checks.md");
/// Where the drift codes are explained (one table of every code and its class).
const DRIFT_DOC: &str = concat!(env!("CARGO_PKG_REPOSITORY"), "/blob/main/docs/drift.md");

/// What the store said for one target.
struct Stored {
    stats: Vec<Stats>,
    checks: Vec<(i64, Health, crate::check::PhaseTimings)>,
    events: Vec<serde_json::Value>,
    alerts: Vec<SentAlert>,
    contract: Option<String>,
}

pub(in crate::api) async fn target_page(
    State(s): State<ApiState>,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let name = match p {
        Ok(Path(n)) => n,
        Err(e) => {
            return super::error_page(
                StatusCode::BAD_REQUEST,
                &format!("the target name is malformed: {e}"),
            );
        }
    };
    let mut range = RANGES[1];
    for (k, v) in q.map(|Query(p)| p).unwrap_or_default() {
        if k == "range" {
            match RANGES.iter().find(|(r, _)| *r == v) {
                Some(r) => range = *r,
                None => {
                    return super::error_page(
                        StatusCode::BAD_REQUEST,
                        "range must be 1h, 24h, 7d or 30d",
                    );
                }
            }
        }
    }
    let Some(view) = s.fleet.get(&name) else {
        return super::error_page(StatusCode::NOT_FOUND, &format!("no target named {name:?}"));
    };
    let now = s.now();
    let target = name.clone();
    let stored = crate::api::read_history(&s, move |h| {
        Ok(Stored {
            stats: h.stats(&target, now)?,
            checks: h.checks_between(&target, now - range.1, now, CHART_CHECKS)?,
            events: h.events(&target, TIMELINE)?,
            alerts: h.sent_alerts(&target, TIMELINE)?,
            contract: h.accepted_contract(&target)?,
        })
    })
    .await;
    let (stored, store_error) = match stored {
        Ok(st) => (Some(st), None),
        Err(e) => (None, Some(e)),
    };
    let windows = s.with_config(|c| c.maintenance.clone());
    let maint = in_maintenance(&windows, &view.name, now);

    let mut b = String::with_capacity(32 * 1024);
    head(&mut b, &view, maint, now);
    if let Some(e) = &store_error {
        let _ = writeln!(b, "<p class=\"error\" role=\"alert\">{}</p>", message(e));
    }
    verdict(&mut b, &view);
    if let Some(st) = &stored {
        uptime(&mut b, &st.stats);
        latency(&mut b, &view.name, st, range, now);
    }
    timeline(&mut b, &view, stored.as_ref());
    maintenance(&mut b, &windows, &view.name, now);
    drift(&mut b, &view, stored.as_ref());
    if let Some(st) = &stored {
        contract(&mut b, st.contract.as_deref());
    }
    security(&mut b, &view);
    components(&mut b, &view, now);
    html(StatusCode::OK, frame(&view.name, &b))
}

fn head(b: &mut String, v: &TargetView, maint: bool, now: i64) {
    let state = v.status.as_str();
    let _ = write!(
        b,
        "<p><a href=\"/\">← Fleet</a></p>\n<h1>{}</h1>\n<dl class=\"facts\">\
         <dt>State</dt><dd><span class=\"pill {state}\" data-live-target=\"{}\" data-live-every=\"{}\">{state}</span>",
        field(&v.name),
        field(&v.name),
        super::live_every(std::iter::once(v.interval_ms)),
    );
    if v.flapping {
        b.push_str(" <span class=\"pill flapping\">flapping</span>");
    }
    if maint {
        b.push_str(" <span class=\"pill maintenance\">in maintenance</span>");
    }
    if let Some(since) = v.since_ms {
        let _ = write!(b, " for {} (since {})", ago(since, now), time(since));
    }
    let _ = write!(
        b,
        " <span id=\"live\" aria-live=\"polite\"></span></dd><dt>Kind</dt><dd>{}</dd><dt>Endpoint</dt><dd><code>{}</code></dd>",
        v.kind,
        field(&v.endpoint)
    );
    if !v.labels.is_empty() {
        b.push_str("<dt>Labels</dt><dd>");
        for (k, val) in &v.labels {
            let _ = write!(
                b,
                "<span class=\"label\">{}={}</span> ",
                field(k),
                field(val)
            );
        }
        b.push_str("</dd>");
    }
    let _ = writeln!(
        b,
        "<dt>Interval</dt><dd>{} (timeout {})</dd></dl>",
        span(u128::try_from(v.interval_ms).unwrap_or(0)),
        span(u128::try_from(v.timeout_ms).unwrap_or(0))
    );
}

/// A configured interval or timeout as written, never rounded away: `600 ms`, `1.5 s`, `30 s`.
fn span(ms: u128) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        // Whole milliseconds over 1000: the shortest decimal is exact (`1.25 s`).
        format!("{} s", ms as f64 / 1000.0)
    }
}

/// The rule behind a finding's code, from the judge's registry.
fn rule(code: &str) -> Option<AnyRule> {
    AnyRule::all().find(|r| r.code() == code)
}

fn verdict(b: &mut String, v: &TargetView) {
    b.push_str("<h2>Last check</h2>\n");
    let Some(l) = &v.last else {
        b.push_str("<p>Not checked yet.</p>\n");
        return;
    };
    let _ = writeln!(
        b,
        "<dl class=\"facts\"><dt>At</dt><dd>{}</dd><dt>Result</dt><dd><span class=\"pill {s}\">{s}</span></dd>\
         <dt>Duration</dt><dd>{}</dd><dt>Era · protocol</dt><dd>{} · {}</dd><dt>Auth</dt><dd>{}</dd>\
         <dt>Tools</dt><dd>{}</dd></dl>",
        time(l.at_ms),
        millis(l.duration_ms),
        l.era.as_deref().map_or_else(|| "—".into(), field),
        l.protocol_version
            .as_deref()
            .map_or_else(|| "—".into(), field),
        field(&l.auth),
        l.tool_count.map_or_else(|| "—".into(), |n| n.to_string()),
        s = l.status.as_str(),
    );
    if l.findings.is_empty() {
        b.push_str("<p>No findings.</p>\n");
        return;
    }
    b.push_str(
        "<table><caption class=\"visually-hidden\">Findings</caption><thead><tr><th scope=\"col\">Severity</th>\
         <th scope=\"col\">Rule</th><th scope=\"col\">Message</th><th scope=\"col\">Why it matters</th></tr></thead><tbody>\n",
    );
    for f in &l.findings {
        let code = f.code.code();
        let (title, why) = rule(code).map_or(("", ""), |r| (r.title(), r.why()));
        let _ = writeln!(
            b,
            "<tr><td><span class=\"pill {sev}\">{sev}</span></td><td><a href=\"{FINDINGS_DOC}#{code}\"><code>{code}</code></a><br><small>{}</small></td>\
             <td>{}</td><td>{}</td></tr>",
            super::esc(title),
            message(&f.message),
            super::esc(why),
            sev = f.severity.as_str(),
        );
    }
    b.push_str("</tbody></table>\n");
}

fn uptime(b: &mut String, stats: &[Stats]) {
    b.push_str(
        "<h2>Uptime and latency</h2>\n<table><thead><tr><th scope=\"col\">Window</th><th scope=\"col\">Checks</th>\
         <th scope=\"col\">Uptime</th><th scope=\"col\">Healthy</th><th scope=\"col\">p50</th><th scope=\"col\">p95</th>\
         <th scope=\"col\">p99</th></tr></thead><tbody>\n",
    );
    for s in stats {
        let _ = writeln!(
            b,
            "<tr><th scope=\"row\">{}</th><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            field(&s.window),
            s.checks,
            percent(s.uptime),
            percent(s.healthy_ratio),
            millis(s.p50_ms),
            millis(s.p95_ms),
            millis(s.p99_ms)
        );
    }
    b.push_str("</tbody></table>\n");
}

fn latency(b: &mut String, name: &str, st: &Stored, range: (&str, i64), now: i64) {
    let _ = write!(
        b,
        "<h2 id=\"latency\">Latency per phase</h2>\n<nav class=\"ranges\" aria-label=\"range\">"
    );
    for (r, _) in RANGES {
        let current = if r == range.0 {
            " aria-current=\"true\""
        } else {
            ""
        };
        let _ = write!(
            b,
            "<a href=\"/targets/{}?range={r}#latency\"{current}>{r}</a>",
            encode(name)
        );
    }
    b.push_str("</nav>\n");
    let answered: Vec<(i64, &crate::check::PhaseTimings)> = st
        .checks
        .iter()
        .filter(|(_, h, _)| *h != Health::Down)
        .map(|(at, _, t)| (*at, t))
        .collect();
    let series = chart::series(&answered, now - range.1, now);
    b.push_str(&chart::render(&series, range.0));
}

/// An event's name and the rest of its fields, as stored (`event` tags it).
fn event_line(e: &serde_json::Value) -> (i64, String, String) {
    let at = e
        .get("at_ms")
        .and_then(serde_json::Value::as_i64)
        .unwrap_or(0);
    let kind = e
        .get("event")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("event")
        .to_owned();
    let mut rest = String::new();
    if let Some(o) = e.as_object() {
        for (k, v) in o {
            if k == "event" || k == "at_ms" {
                continue;
            }
            let v = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let _ = write!(rest, "{k}: {v}; ");
        }
    }
    (at, kind, rest.trim_end_matches("; ").to_owned())
}

fn timeline(b: &mut String, v: &TargetView, st: Option<&Stored>) {
    b.push_str("<h2>Incidents</h2>\n");
    if v.incidents.is_empty() {
        b.push_str("<p>No open incident.</p>\n");
    } else {
        b.push_str("<table><caption>Open</caption><thead><tr><th scope=\"col\">Opened</th><th scope=\"col\">Kind</th><th scope=\"col\">Severity</th><th scope=\"col\">Summary</th></tr></thead><tbody>\n");
        for i in &v.incidents {
            let _ = writeln!(
                b,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                time(i.opened_ms),
                field(&i.family),
                field(&i.severity),
                message(&i.summary)
            );
        }
        b.push_str("</tbody></table>\n");
    }
    let Some(st) = st else { return };
    b.push_str("<h3>Timeline</h3>\n");
    if st.events.is_empty() {
        b.push_str("<p>No transitions recorded.</p>\n");
    } else {
        b.push_str("<table><thead><tr><th scope=\"col\">At</th><th scope=\"col\">Event</th><th scope=\"col\">Details</th></tr></thead><tbody>\n");
        for e in &st.events {
            let (at, kind, rest) = event_line(e);
            let _ = writeln!(
                b,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                time(at),
                field(&kind),
                message(&rest)
            );
        }
        b.push_str("</tbody></table>\n");
    }
    b.push_str("<h3>Alerts</h3>\n");
    if st.alerts.is_empty() {
        b.push_str("<p>No alerts sent.</p>\n");
        return;
    }
    b.push_str("<table><thead><tr><th scope=\"col\">At</th><th scope=\"col\">Alert</th><th scope=\"col\">Sink</th><th scope=\"col\">Delivery</th></tr></thead><tbody>\n");
    for a in &st.alerts {
        let delivery = match (a.done_ms, a.delivered) {
            (Some(at), true) => format!("delivered {}", time(at)),
            (Some(at), false) => format!(
                "given up {} after {} attempts{}",
                time(at),
                a.attempts,
                a.last_error
                    .as_deref()
                    .map(|e| format!(": {}", message(e)))
                    .unwrap_or_default()
            ),
            (None, _) => format!("pending ({} attempts)", a.attempts),
        };
        let _ = writeln!(
            b,
            "<tr><td>{}</td><td>{} {}: {}</td><td><code>{}</code></td><td>{delivery}</td></tr>",
            time(a.created_ms),
            format!("{:?}", a.alert.action).to_lowercase(),
            a.alert.kind.as_str(),
            message(&a.alert.summary),
            field(&a.sink),
        );
    }
    b.push_str("</tbody></table>\n");
}

fn maintenance(b: &mut String, windows: &[crate::config::Maintenance], name: &str, now: i64) {
    b.push_str("<h2>Maintenance</h2>\n");
    let mine: Vec<_> = windows
        .iter()
        .filter(|w| w.targets.is_empty() || w.targets.iter().any(|t| t == name))
        .collect();
    if mine.is_empty() {
        b.push_str("<p>No maintenance window.</p>\n");
        return;
    }
    b.push_str("<ul>");
    for w in mine {
        let when = if w.end_ms <= now {
            "past"
        } else if w.start_ms <= now {
            "now"
        } else {
            "planned"
        };
        let _ = write!(
            b,
            "<li>{} – {} ({when})</li>",
            time(w.start_ms),
            time(w.end_ms)
        );
    }
    b.push_str("</ul>\n");
}

fn drift(b: &mut String, v: &TargetView, st: Option<&Stored>) {
    b.push_str("<h2>Drift</h2>\n");
    match &v.drift {
        None => b.push_str("<p>No drift against the accepted contract.</p>\n"),
        Some(class) => {
            let _ = writeln!(
                b,
                "<p>Current drift: <span class=\"pill drifted\">{}</span></p>",
                field(class)
            );
            if !v.drift_changes.is_empty() {
                b.push_str("<table><thead><tr><th scope=\"col\">Class</th><th scope=\"col\">Change</th><th scope=\"col\">Where</th></tr></thead><tbody>\n");
                for c in &v.drift_changes {
                    let _ = writeln!(
                        b,
                        "<tr><td>{}</td><td><a href=\"{DRIFT_DOC}\"><code>{}</code></a></td><td><code>{}</code></td></tr>",
                        field(&c.class),
                        field(&c.code),
                        field(&c.path)
                    );
                }
                b.push_str("</tbody></table>\n");
                if v.drift_changes_more > 0 {
                    let _ = writeln!(b, "<p>and {} more.</p>", v.drift_changes_more);
                }
            }
        }
    }
    let Some(st) = st else { return };
    let past: Vec<_> = st
        .events
        .iter()
        .filter(|e| e.get("event").and_then(serde_json::Value::as_str) == Some("drift"))
        .collect();
    if !past.is_empty() {
        b.push_str("<h3>Drift history</h3>\n");
        for e in past {
            drift_event(b, e);
        }
    }
}

/// One past drift: when, its class, and its classified diff as `mcpulse diff` shows it (one
/// row per change: class, code, where, what, old → new), newest event first.
fn drift_event(b: &mut String, e: &serde_json::Value) {
    use serde_json::Value;
    let at = e.get("at_ms").and_then(Value::as_i64).unwrap_or(0);
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let digest = s(e, "digest");
    let _ = writeln!(
        b,
        "<h4>{} <span class=\"pill drifted\">{}</span> <small>contract {}</small></h4>",
        time(at),
        field(&s(e, "class")),
        field(digest.get(..12).unwrap_or(&digest))
    );
    let changes = e
        .get("changes")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if changes.is_empty() {
        b.push_str(
            "<p>The changes were not recorded (an outline contract, or an older monitor).</p>\n",
        );
        return;
    }
    b.push_str(
        "<div class=\"scroll\"><table class=\"diff\"><thead><tr><th scope=\"col\">Class</th><th scope=\"col\">Change</th>\
         <th scope=\"col\">Where</th><th scope=\"col\">What</th><th scope=\"col\">Old → new</th></tr></thead><tbody>\n",
    );
    for c in changes {
        let code = s(c, "code");
        let value = |k: &str| c.get(k).and_then(Value::as_str).map(message);
        let old_new = match (value("old"), value("new")) {
            (Some(o), Some(n)) => format!("<code>{o}</code> → <code>{n}</code>"),
            (Some(o), None) => format!("<code>{o}</code> → (removed)"),
            (None, Some(n)) => format!("(added) → <code>{n}</code>"),
            (None, None) => String::new(),
        };
        let _ = writeln!(
            b,
            "<tr><td>{}</td><td><a href=\"{DRIFT_DOC}\"><code>{}</code></a></td><td><code>{}</code></td><td>{}</td><td>{old_new}</td></tr>",
            field(&s(c, "class")),
            field(&code),
            message(&s(c, "path")),
            message(&s(c, "message")),
        );
    }
    b.push_str("</tbody></table></div>\n");
    let more = e.get("more").and_then(Value::as_u64).unwrap_or(0);
    if more > 0 {
        let _ = writeln!(b, "<p>and {more} more changes.</p>");
    }
}

fn contract(b: &mut String, contract: Option<&str>) {
    b.push_str("<h2>Contract</h2>\n");
    let Some(c) = contract.and_then(|c| serde_json::from_str::<serde_json::Value>(c).ok()) else {
        b.push_str("<p>No contract accepted yet.</p>\n");
        return;
    };
    let info = &c["server"]["server_info"];
    let _ = writeln!(
        b,
        "<p>Server <strong>{}</strong> {}</p>",
        field(info["name"].as_str().unwrap_or("—")),
        field(info["version"].as_str().unwrap_or(""))
    );
    let tools = c["tools"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let _ = writeln!(b, "<p>{} tools.</p>", tools.len());
    for t in tools.iter().take(TOOLS_SHOWN) {
        let d = t.get("definition").unwrap_or(t);
        let name = t["key"].as_str().or(d["name"].as_str()).unwrap_or("?");
        let _ = write!(
            b,
            "<details><summary><code>{}</code> {}</summary>",
            field(name),
            message(d["description"].as_str().unwrap_or(""))
        );
        if let Some(a) = d.get("annotations").filter(|a| !a.is_null()) {
            let _ = write!(
                b,
                "<p>Annotations: <code>{}</code></p>",
                message(&a.to_string())
            );
        }
        if let Some(schema) = d.get("inputSchema")
            && let Ok(pretty) = serde_json::to_string_pretty(schema)
        {
            let _ = write!(b, "<pre>{}</pre>", block(&pretty, SCHEMA_LINES));
        }
        b.push_str("</details>\n");
    }
}

fn security(b: &mut String, v: &TargetView) {
    b.push_str("<h2>Security</h2>\n");
    let Some(l) = &v.last else {
        b.push_str("<p>Not checked yet.</p>\n");
        return;
    };
    match &l.grade {
        None => {
            b.push_str("<p>Not graded (security checks off, or the last check was down).</p>\n")
        }
        Some(g) => {
            let _ = writeln!(
                b,
                "<p>Grade <strong class=\"grade\">{}</strong>{}</p>",
                field(g),
                l.security_score
                    .map(|s| format!(" (score {s}/100)"))
                    .unwrap_or_default()
            );
            if l.security.is_empty() {
                b.push_str("<p>No security findings in the last check.</p>\n");
                return;
            }
            // Each finding with the requests and responses that showed it.
            b.push_str(
                "<table class=\"evidence\"><thead><tr><th scope=\"col\">Level</th><th scope=\"col\">Rule</th>\
                 <th scope=\"col\">Finding</th><th scope=\"col\">Evidence</th></tr></thead><tbody>\n",
            );
            for f in &l.security {
                let code = field(&f.code);
                let sev = field(&f.severity);
                let why = rule(&f.code)
                    .map(|r| format!("<br><small>{}</small>", esc(r.title())))
                    .unwrap_or_default();
                let _ = write!(
                    b,
                    "<tr><td><span class=\"pill {sev}\">{sev}</span></td><td><a href=\"{CHECKS_DOC}#{code}\"><code>{code}</code></a>{why}</td><td>{}</td><td>",
                    message(&f.message)
                );
                if f.evidence.is_empty() {
                    b.push('—');
                } else {
                    b.push_str("<ul>");
                    for e in &f.evidence {
                        let _ = write!(b, "<li><code>{}</code></li>", message(e));
                    }
                    b.push_str("</ul>");
                }
                b.push_str("</td></tr>\n");
            }
            b.push_str("</tbody></table>\n");
        }
    }
}

fn components(b: &mut String, v: &TargetView, now: i64) {
    b.push_str("<h2>Dependencies</h2>\n");
    if v.components.is_empty() {
        b.push_str("<p>None reported.</p>\n");
        return;
    }
    b.push_str("<table><thead><tr><th scope=\"col\">Component</th><th scope=\"col\">State</th><th scope=\"col\">Since</th></tr></thead><tbody>\n");
    for c in &v.components {
        let s = c.status.as_str();
        let _ = writeln!(
            b,
            "<tr><th scope=\"row\">{}</th><td><span class=\"pill {s}\">{s}</span></td><td>{} ({} ago)</td></tr>",
            field(&c.name),
            time(c.since_ms),
            ago(c.since_ms, now)
        );
    }
    b.push_str("</tbody></table>\n");
}

#[cfg(test)]
mod tests {
    #[test]
    fn spans_keep_what_was_configured() {
        assert_eq!(super::span(600), "600 ms");
        assert_eq!(super::span(1500), "1.5 s");
        assert_eq!(super::span(1250), "1.25 s");
        assert_eq!(super::span(30_000), "30 s");
        assert_eq!(super::span(0), "0 ms");
    }
}
