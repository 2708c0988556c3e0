//! Slack incoming webhooks: one line a person woken at 3 AM can act on.
//!
//! The body is `{"text": "<line>"}` and nothing else: it renders the same in the app, in
//! notifications, on a lock screen and in every Slack-compatible receiver (Mattermost, Rocket.Chat
//! and Discord's `/slack` endpoint take the same shape), where Block Kit does not.
//!
//! The line says what happened, to what, why, and since when:
//!
//! ```text
//! :red_circle: DOWN · search is down: connect-failed · since 2026-11-18 11:06 UTC
//! :red_circle: STILL DOWN · still open: search is down: connect-failed · open for 2h 5m
//! :large_green_circle: RESOLVED · search recovered (was down) · after 12m
//! :large_blue_circle: GRADE · search: security grade changed from A to C
//! ```
//!
//! The summary can carry text a server sent (a reason) or an imported target name, so it is
//! made inert first ([`mcpulse_wire::text`]: control, bidi and invisible characters become
//! visible escapes such as `\n` or `\x1b`, and it is cut at 1000 characters), then Slack's
//! mrkdwn control characters (`&`, `<`, `>`) are escaped, so a summary can neither break the
//! line nor ping `<!channel>` or make a link; and `@channel`, `@here`, `@all`, `@everyone`
//! get a full-width `＠` ([`super::defuse_mentions`]), which Slack-compatible receivers that
//! read bare mentions (Mattermost, Discord) do not take for one.
//! Slack answers `200 ok`; a revoked or mistyped webhook is a 403/404/410, which is permanent.

use super::{DeliveryError, HttpPost, human_duration, rfc3339, to_json};
use crate::alert::{Action, Alert};
use mcpulse_wire::text;
use serde::Serialize;

#[derive(Serialize)]
struct Message {
    text: String,
}

/// The message line.
pub fn line(alert: &Alert) -> String {
    let emoji = match (alert.action, alert.severity.as_str()) {
        (Action::Resolve, _) => ":large_green_circle:",
        (_, "critical") => ":red_circle:",
        (_, "warning") => ":large_orange_circle:",
        _ => ":large_blue_circle:",
    };
    let kind = alert.kind.as_str().to_ascii_uppercase();
    let label = match alert.action {
        Action::Trigger | Action::Notify => kind,
        Action::Remind => format!("STILL {kind}"),
        Action::Resolve => "RESOLVED".to_owned(),
    };
    let summary = super::defuse_mentions(&escape(&text::inert(&alert.summary, 1000)));
    let open_for = u128::try_from(alert.at_ms.saturating_sub(alert.started_ms)).unwrap_or(0);
    let when = match alert.action {
        Action::Trigger => format!(" · since {}", clock(alert.started_ms)),
        Action::Remind => format!(" · open for {}", human_duration(open_for)),
        Action::Resolve => format!(" · after {}", human_duration(open_for)),
        Action::Notify => String::new(),
    };
    format!("{emoji} {label} · {summary}{when}")
}

/// `2026-11-18 11:06 UTC`.
fn clock(ms: i64) -> String {
    let t = rfc3339(ms);
    match (t.get(..10), t.get(11..16)) {
        (Some(d), Some(hm)) => format!("{d} {hm} UTC"),
        _ => t,
    }
}

/// Slack's mrkdwn control characters (the text is already inert: no line breaks).
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// The POST for an alert.
pub fn request(url: &str, alert: &Alert) -> Result<HttpPost, DeliveryError> {
    Ok(HttpPost {
        url: url.to_owned(),
        headers: vec![("Content-Type".to_owned(), "application/json".to_owned())],
        secret_headers: Vec::new(),
        body: to_json(&Message { text: line(alert) })?,
    })
}
