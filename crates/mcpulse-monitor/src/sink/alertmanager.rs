//! Pushing into Alertmanager: `POST {url}/api/v2/alerts` with a JSON array of postable alerts,
//! so that its grouping, silences, inhibition and HA apply (conventions §7.1).
//!
//! ## Identity
//!
//! Alertmanager identifies an alert by its **whole label set**: a resolve only closes the firing
//! alert whose labels are identical. Ours are
//! `alertname` (`MCPServerDown`, `MCPServerDegraded`, `MCPServerDrift`, `MCPServerFlapping`,
//! `MCPServerAuth`, `MCPServerProtocol`, `MCPServerGrade`), `target`, `severity`, `dedup_key`,
//! and the target's labels from the config (names made valid Prometheus label names; ours win a
//! clash; empty values, which Alertmanager treats as absent, left out).
//!
//! One incident can change labels while it is open (degraded, then down; a drift that becomes
//! breaking), and its resolve arrives as kind `recovered` with severity `info`. So every post
//! speaks for the whole incident: the current variant fires, and every other variant the
//! incident can have is sent **ended** (`endsAt` = the alert's time). A resolve ends them all.
//! Ending an alert Alertmanager never saw is harmless: a group with nothing firing that was never
//! notified sends nothing.
//!
//! | family | variants (alertname, severity) |
//! |---|---|
//! | status (down, degraded, recovered) | (MCPServerDown, critical), (MCPServerDegraded, warning) |
//! | drift | (MCPServerDrift, critical), (MCPServerDrift, warning) |
//! | flapping | (MCPServerFlapping, warning) |
//! | auth, protocol, grade | just the alert's own |
//!
//! ## `endsAt` and re-sends
//!
//! Alertmanager resolves an alert without `endsAt` after its `resolve_timeout` (5 minutes by
//! default), expecting the sender to re-post more often than that, as Prometheus does; and it
//! keeps alerts in memory only, so a restart of it loses them all. mcpulse posts on transitions
//! and reminders, and besides re-sends every open incident each `resend` (default 1 minute;
//! [`resend`]), so a restarted Alertmanager has them back within that. A firing alert carries an
//! explicit `endsAt = at + 24 h` ([`FIRING_HOLD_MS`]), which every re-send moves on: it stays
//! firing until we resolve it, and if mcpulse disappears for good it still clears within a day
//! instead of never (rather than within minutes, which would read as a recovery nobody saw).
//!
//! Every post to one Alertmanager takes a turn ([`turn`]), and a re-send lists the open
//! incidents within its turn: a resolve posted before it is not revived by it, and a resolve
//! made while it runs is posted after it.
//!
//! - `trigger`, `remind`: `endsAt = at + 24 h`;
//! - `resolve`: `endsAt = at` (the time of the recovery, not of the delivery, which may be a
//!   retry later);
//! - `notify`: `endsAt = startsAt + 1 h`: a notice shows for an hour, then clears itself.
//!
//! `startsAt` is the incident's opening time; annotations carry the `summary`. No
//! `generatorURL` is sent (the monitor has no public URL of its own yet).
//!
//! ## Server text
//!
//! Alertmanager's usual Slack templates put annotations and labels into a message as mrkdwn,
//! unescaped. So what a server chose is also given in the annotations as
//! [`super::chat_text`]: inert, and `<`, `>`, `&` replaced by the full-width `＜`, `＞`, `＆`,
//! `@channel`, `@here`, `@all`, `@everyone` given a full-width `＠`: the `summary` (which can
//! quote its error messages) and, for a dependency's incident, the `component` annotation (its
//! name from the health document). `<!channel>` arrives there as `＜!channel＞`: read as
//! written, pinging nobody, in Slack and in every other receiver (an entity such as `&lt;`
//! would show literally in mail).
//!
//! The labels are not changed: Alertmanager knows an alert by its label set, so they are sent
//! exactly as the monitor keeps them, the `component` label raw (inert already: no control,
//! bidi or invisible characters, but `<`, `&` and `@channel` as the server wrote them), as in
//! every earlier release: an incident open across an upgrade stays one alert. Templates that
//! show server text should render the annotations (`.Annotations.summary`,
//! `.Annotations.component`), not the labels. The target's name and its labels from the config
//! are the operator's (routes match on them).

use super::{DeliveryError, HttpPost, chat_text, rfc3339, to_json};
use crate::alert::{Action, Alert, Kind};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// How long a firing alert lasts without a resolve or a reminder.
pub const FIRING_HOLD_MS: i64 = 24 * 3_600_000;
/// How long a one-off notice shows.
pub const NOTICE_MS: i64 = 3_600_000;
/// The API path appended to the configured URL.
pub const ALERTS_PATH: &str = "/api/v2/alerts";

#[derive(Debug, Serialize)]
pub(crate) struct Postable {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    #[serde(rename = "startsAt")]
    starts_at: String,
    #[serde(rename = "endsAt")]
    ends_at: String,
}

/// `MCPServer` + the kind, capitalised.
pub fn alertname(kind: Kind) -> &'static str {
    match kind {
        Kind::Down => "MCPServerDown",
        Kind::Degraded => "MCPServerDegraded",
        Kind::Recovered => "MCPServerRecovered",
        Kind::Drift => "MCPServerDrift",
        Kind::Auth => "MCPServerAuth",
        Kind::Protocol => "MCPServerProtocol",
        Kind::Grade => "MCPServerGrade",
        Kind::Flapping => "MCPServerFlapping",
    }
}

/// Every (alertname, severity) an incident of this kind's family can fire as.
fn family(kind: Kind, severity: &str) -> Vec<(&'static str, String)> {
    let v = |name: &'static str, sev: &str| (name, sev.to_owned());
    match kind {
        Kind::Down | Kind::Degraded | Kind::Recovered => vec![
            v("MCPServerDown", "critical"),
            v("MCPServerDegraded", "warning"),
        ],
        Kind::Drift => vec![
            v("MCPServerDrift", "critical"),
            v("MCPServerDrift", "warning"),
        ],
        Kind::Flapping => vec![v("MCPServerFlapping", "warning")],
        Kind::Auth | Kind::Protocol | Kind::Grade => vec![v(alertname(kind), severity)],
    }
}

/// A Prometheus label name: `[a-zA-Z_][a-zA-Z0-9_]*`; `None` when nothing is left.
fn label_name(k: &str) -> Option<String> {
    let mut s: String = k
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with("__") {
        return None; // `__` names are reserved for Prometheus internals
    }
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    Some(s)
}

/// The JSON array for an alert.
pub fn body(alert: &Alert) -> Result<String, DeliveryError> {
    to_json(&postables(alert))
}

/// The postable alerts that speak for one alert (its variant, and the family's others ended).
pub(crate) fn postables(alert: &Alert) -> Vec<Postable> {
    let mut base = BTreeMap::new();
    // Labels are the alert's identity in Alertmanager: sent exactly as the monitor keeps them
    // (a dependency's name raw, already inert), byte for byte as before chat-safe text existed,
    // so an incident open across an upgrade stays one alert. Chat-safe text goes in the
    // annotations only.
    for (k, v) in &alert.labels {
        if let Some(k) = label_name(k)
            && !v.is_empty()
        {
            base.insert(k, v.clone());
        }
    }
    base.insert("target".to_owned(), alert.target.clone());
    base.insert("dedup_key".to_owned(), alert.dedup_key.clone());
    // Inert, bounded and chat-safe at the sink too: Alertmanager's templates pass it on to
    // Slack (as mrkdwn, unescaped), mail and more.
    let mut annotations = BTreeMap::from([(
        "summary".to_owned(),
        chat_text(&alert.summary, mcpulse_wire::text::MESSAGE_CHARS),
    )]);
    if let Some(c) = alert.labels.get("component") {
        // The dependency's name for templates to show: chat-safe, unlike its label.
        annotations.insert(
            "component".to_owned(),
            chat_text(c, mcpulse_wire::text::FIELD_CHARS),
        );
    }
    let starts_at = rfc3339(alert.started_ms);
    let ended = rfc3339(alert.at_ms.max(alert.started_ms));
    let post = |name: &str, severity: &str, ends_at: String| {
        let mut labels = base.clone();
        labels.insert("alertname".to_owned(), name.to_owned());
        labels.insert("severity".to_owned(), severity.to_owned());
        Postable {
            labels,
            annotations: annotations.clone(),
            starts_at: starts_at.clone(),
            ends_at,
        }
    };
    let mut out = Vec::new();
    match alert.action {
        Action::Trigger | Action::Remind => {
            let name = alertname(alert.kind);
            let hold = rfc3339(alert.at_ms.saturating_add(FIRING_HOLD_MS));
            out.push(post(name, &alert.severity, hold));
            for (n, s) in family(alert.kind, &alert.severity) {
                if !(n == name && s == alert.severity) {
                    out.push(post(n, &s, ended.clone()));
                }
            }
        }
        Action::Resolve => {
            for (n, s) in family(alert.kind, &alert.severity) {
                out.push(post(n, &s, ended.clone()));
            }
        }
        Action::Notify => {
            let until = rfc3339(alert.started_ms.saturating_add(NOTICE_MS));
            out.push(post(alertname(alert.kind), &alert.severity, until));
        }
    }
    out
}

/// The turn to post to one Alertmanager (by URL): every post to it, the outbox's deliveries
/// and the re-sends alike, takes it, so they reach Alertmanager in the order they were made.
pub async fn turn(url: &str) -> tokio::sync::OwnedMutexGuard<()> {
    static TURNS: LazyLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
        LazyLock::new(Mutex::default);
    let lock = {
        let mut turns = TURNS.lock().unwrap_or_else(|p| p.into_inner());
        turns.entry(endpoint(url)).or_default().clone()
    };
    lock.lock_owned().await
}

/// Posts the open incidents again, as Prometheus re-sends firing alerts: Alertmanager keeps
/// alerts in memory only, so one that restarted has lost them, and they come back within
/// `resend` instead of at the next reminder (or never, without reminders).
///
/// `open` lists the incidents as `Remind` alerts; it is called **within the turn**, so an
/// incident resolved before the turn is not listed, and one resolved after it has its resolve
/// posted after this: a re-send can never revive an alert its resolve has closed. Returns how
/// many incidents were posted.
pub async fn resend(
    url: &str,
    timeout: Duration,
    open: impl FnOnce() -> Vec<Alert>,
) -> Result<usize, DeliveryError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let _turn = turn(url).await;
    post_all(url, timeout, deadline, &open()).await
}

/// Posts `alerts` in one request, in this Alertmanager's turn (see [`turn`]): how a reload ends
/// the alerts of a target whose labels changed (their identity in Alertmanager is the label
/// set, so the old set must be ended; the re-sends carry on under the new one).
pub async fn post_now(
    url: &str,
    timeout: Duration,
    alerts: &[Alert],
) -> Result<usize, DeliveryError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let _turn = turn(url).await;
    post_all(url, timeout, deadline, alerts).await
}

async fn post_all(
    url: &str,
    timeout: Duration,
    deadline: tokio::time::Instant,
    alerts: &[Alert],
) -> Result<usize, DeliveryError> {
    if alerts.is_empty() {
        return Ok(0);
    }
    let all: Vec<Postable> = alerts.iter().flat_map(postables).collect();
    let req = HttpPost {
        url: endpoint(url),
        headers: vec![("Content-Type".to_owned(), "application/json".to_owned())],
        secret_headers: Vec::new(),
        body: to_json(&all)?,
    };
    super::post(&req, timeout, deadline).await?;
    Ok(alerts.len())
}

/// `{url}/api/v2/alerts` (a URL that already ends in the path is taken as is).
pub fn endpoint(url: &str) -> String {
    let base = url.trim_end_matches('/');
    if base.ends_with(ALERTS_PATH) {
        base.to_owned()
    } else {
        format!("{base}{ALERTS_PATH}")
    }
}

/// The POST for an alert.
pub fn request(url: &str, alert: &Alert) -> Result<HttpPost, DeliveryError> {
    Ok(HttpPost {
        url: endpoint(url),
        headers: vec![("Content-Type".to_owned(), "application/json".to_owned())],
        secret_headers: Vec::new(),
        body: body(alert)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_names_are_made_valid() {
        assert_eq!(label_name("team").as_deref(), Some("team"));
        assert_eq!(
            label_name("app.kubernetes.io/name").as_deref(),
            Some("app_kubernetes_io_name")
        );
        assert_eq!(label_name("1st").as_deref(), Some("_1st"));
        assert_eq!(label_name("__name__"), None);
        assert_eq!(label_name(""), None);
    }

    #[test]
    fn endpoints() {
        assert_eq!(endpoint("http://am:9093"), "http://am:9093/api/v2/alerts");
        assert_eq!(endpoint("http://am:9093/"), "http://am:9093/api/v2/alerts");
        assert_eq!(
            endpoint("http://am:9093/am/api/v2/alerts"),
            "http://am:9093/am/api/v2/alerts"
        );
    }
}
