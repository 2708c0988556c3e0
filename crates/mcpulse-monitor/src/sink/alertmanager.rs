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
//! ## `endsAt`
//!
//! Alertmanager resolves an alert without `endsAt` after its `resolve_timeout` (5 minutes by
//! default), expecting the sender to re-post more often than that, as Prometheus does. mcpulse
//! posts on transitions and reminders only, so a firing alert carries an explicit
//! `endsAt = at + 24 h` ([`FIRING_HOLD_MS`]): it stays firing until we resolve it, and if mcpulse
//! disappears for good it still clears within a day instead of never. Each reminder pushes it
//! out again, so for incidents that may stay open longer than a day, set a `reminder` shorter
//! than a day.
//!
//! - `trigger`, `remind`: `endsAt = at + 24 h`;
//! - `resolve`: `endsAt = at` (the time of the recovery, not of the delivery, which may be a
//!   retry later);
//! - `notify`: `endsAt = startsAt + 1 h`: a notice shows for an hour, then clears itself.
//!
//! `startsAt` is the incident's opening time; annotations carry the `summary`. No
//! `generatorURL` is sent (the monitor has no public URL of its own yet).

use super::{DeliveryError, HttpPost, rfc3339, to_json};
use crate::alert::{Action, Alert, Kind};
use serde::Serialize;
use std::collections::BTreeMap;

/// How long a firing alert lasts without a resolve or a reminder.
pub const FIRING_HOLD_MS: i64 = 24 * 3_600_000;
/// How long a one-off notice shows.
pub const NOTICE_MS: i64 = 3_600_000;
/// The API path appended to the configured URL.
pub const ALERTS_PATH: &str = "/api/v2/alerts";

#[derive(Debug, Serialize)]
struct Postable {
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
    let mut base = BTreeMap::new();
    for (k, v) in &alert.labels {
        if let Some(k) = label_name(k)
            && !v.is_empty()
        {
            base.insert(k, v.clone());
        }
    }
    base.insert("target".to_owned(), alert.target.clone());
    base.insert("dedup_key".to_owned(), alert.dedup_key.clone());
    let annotations = BTreeMap::from([("summary".to_owned(), alert.summary.clone())]);
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
    to_json(&out)
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
