//! PagerDuty Events API v2 (`POST https://events.pagerduty.com/v2/enqueue` by default).
//!
//! | alert action | event |
//! |---|---|
//! | `trigger` | `event_action: "trigger"` with a `payload` |
//! | `remind` | the same trigger again, same `dedup_key`: PagerDuty folds it into the open incident (a new entry in its log, no new page) |
//! | `resolve` | `event_action: "resolve"`, no `payload` (PagerDuty ignores one on resolve, as Alertmanager's notifier also leaves it out) |
//! | `notify` | **nothing is sent**: auth, protocol and grade changes are one-off notices with no incident to close, and a trigger would page someone and stay open forever. Route them to Slack, a webhook or Alertmanager instead. |
//!
//! The `dedup_key` is the alert's own (`mcpulse-` + 24 hex, well under PagerDuty's 255), the
//! same on every replica and across restarts, so trigger, reminders and resolve meet in one
//! incident and replicas never double-page.
//!
//! ```json
//! {"routing_key":"R0UT1NG","event_action":"trigger","dedup_key":"mcpulse-…","client":"mcpulse",
//!  "payload":{"summary":"search is down: connect-failed","source":"search","severity":"critical",
//!   "timestamp":"2026-11-18T11:06:40.000Z","component":"mcp-server","class":"down",
//!   "custom_details":{"kind":"down","action":"trigger","started_at":"…","labels":{}}}}
//! ```
//!
//! Severity passes through when PagerDuty knows it (`critical`, `error`, `warning`, `info`);
//! anything else becomes `error`. The summary and the source (the target's name) are made inert
//! ([`mcpulse_wire::text`]: control, bidi and invisible characters become visible escapes), the
//! summary cut at PagerDuty's 1024 characters and the source at 200: both are shown to the
//! person paged, in the app, in push notifications and in SMS. The summary, which can quote
//! what a server said, is also made chat-safe ([`super::chat_text`]: `<`, `>`, `&` as their
//! full-width look-alikes, `@channel`-style mentions with a full-width `＠`), as PagerDuty's
//! chat integrations post it on. The `dedup_key` and the labels in `custom_details` (which
//! PagerDuty's content-based grouping and event rules can match on) are sent exactly as in
//! earlier releases: the `component` label raw (inert already), as the server named it.

use super::{DeliveryError, HttpPost, rfc3339, to_json};
use crate::alert::{Action, Alert, Kind};
use mcpulse_wire::text;
use serde::Serialize;
use std::collections::BTreeMap;

pub const DEFAULT_URL: &str = "https://events.pagerduty.com/v2/enqueue";

#[derive(Serialize)]
struct Event<'a> {
    routing_key: &'a str,
    event_action: &'static str,
    dedup_key: &'a str,
    client: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<Payload<'a>>,
}

#[derive(Serialize)]
struct Payload<'a> {
    summary: String,
    source: std::borrow::Cow<'a, str>,
    severity: &'static str,
    timestamp: String,
    component: &'static str,
    class: Kind,
    custom_details: Details<'a>,
}

#[derive(Serialize)]
struct Details<'a> {
    kind: Kind,
    action: Action,
    started_at: String,
    labels: &'a BTreeMap<String, String>,
}

fn severity(s: &str) -> &'static str {
    match s {
        "critical" => "critical",
        "error" => "error",
        "warning" => "warning",
        "info" => "info",
        _ => "error",
    }
}

/// The event body, or `None` for an alert PagerDuty is not sent (a `notify`).
pub fn body(routing_key: &str, alert: &Alert) -> Result<Option<String>, DeliveryError> {
    let (event_action, with_payload) = match alert.action {
        Action::Trigger | Action::Remind => ("trigger", true),
        Action::Resolve => ("resolve", false),
        Action::Notify => return Ok(None),
    };
    let payload = with_payload.then(|| Payload {
        summary: super::chat_text(&alert.summary, 1024),
        source: text::field(&alert.target),
        severity: severity(&alert.severity),
        timestamp: rfc3339(alert.at_ms),
        component: "mcp-server",
        class: alert.kind,
        custom_details: Details {
            kind: alert.kind,
            action: alert.action,
            started_at: rfc3339(alert.started_ms),
            labels: &alert.labels,
        },
    });
    to_json(&Event {
        routing_key,
        event_action,
        dedup_key: &alert.dedup_key,
        client: "mcpulse",
        payload,
    })
    .map(Some)
}

/// The POST for an alert, or `None` when PagerDuty is not sent this one.
pub fn request(
    url: &str,
    routing_key: &str,
    alert: &Alert,
) -> Result<Option<HttpPost>, DeliveryError> {
    Ok(body(routing_key, alert)?.map(|body| HttpPost {
        url: url.to_owned(),
        headers: vec![("Content-Type".to_owned(), "application/json".to_owned())],
        secret_headers: Vec::new(),
        body,
    }))
}
