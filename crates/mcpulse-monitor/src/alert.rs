//! The alert policy: from state-machine events to alerts, with incidents, reminders, flapping
//! suppression and maintenance windows. Pure: time is an argument, and the open incidents are
//! a value the caller persists (so a restart resumes them, never duplicating or losing one).
//!
//! Every alert carries a deterministic deduplication key, `mcpulse-<sha256(target, kind)>`,
//! the same on every replica and across restarts: PagerDuty (`dedup_key`) and Alertmanager
//! (identical label sets) fold repeats into one incident, so replicas never double-page.

use crate::state::{ComponentState, Event, Health};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// What a sink is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Open (or update) the incident under `dedup_key`.
    Trigger,
    /// Close it.
    Resolve,
    /// Re-send an open incident (`reminder`).
    Remind,
    /// A one-off change notice (auth posture, protocol, grade): no incident to close.
    Notify,
}

/// The alert kinds; also the values of a sink's `on` filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Down,
    Degraded,
    Recovered,
    Drift,
    Auth,
    Protocol,
    Grade,
    Flapping,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Down => "down",
            Kind::Degraded => "degraded",
            Kind::Recovered => "recovered",
            Kind::Drift => "drift",
            Kind::Auth => "auth",
            Kind::Protocol => "protocol",
            Kind::Grade => "grade",
            Kind::Flapping => "flapping",
        }
    }
}

/// One alert, ready for the sinks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    pub dedup_key: String,
    pub action: Action,
    pub kind: Kind,
    pub target: String,
    /// `critical` | `warning` | `info`.
    pub severity: String,
    pub summary: String,
    pub at_ms: i64,
    /// When the incident opened (for a resolve or reminder: the original time).
    pub started_ms: i64,
    pub labels: BTreeMap<String, String>,
    /// A resolve sent because the target was removed from the config, not because it
    /// recovered. Such a resolve passes a sink's `targets` filter (the new config cannot name
    /// the target any more); the daemon queues it only for the sinks that took the incident.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
}

/// An open incident.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    pub dedup_key: String,
    /// `status`, `drift` or `flapping`.
    pub family: String,
    pub kind: Kind,
    pub severity: String,
    pub summary: String,
    pub opened_ms: i64,
    pub notified_ms: i64,
}

impl Incident {
    /// An alert about this incident of `target`, stamped `at_ms` (kind and severity its own).
    pub fn alert(
        &self,
        target: &str,
        labels: &BTreeMap<String, String>,
        action: Action,
        summary: String,
        at_ms: i64,
    ) -> Alert {
        Alert {
            dedup_key: self.dedup_key.clone(),
            action,
            kind: self.kind,
            target: target.to_owned(),
            severity: self.severity.clone(),
            summary,
            at_ms,
            started_ms: self.opened_ms,
            labels: labels_of(labels, &self.family),
            removed: false,
        }
    }
}

/// The family of a component's incident: one incident per dependency of a target.
pub fn component_family(component: &str) -> String {
    format!("{COMPONENT_FAMILY}{component}")
}

const COMPONENT_FAMILY: &str = "component:";

/// The target's labels, and for a component's incident `component` = its name: Alertmanager
/// knows an alert by its label set, so two dependencies down behind one target must not share
/// one.
fn labels_of(labels: &BTreeMap<String, String>, family: &str) -> BTreeMap<String, String> {
    let mut l = labels.clone();
    if let Some(c) = family.strip_prefix(COMPONENT_FAMILY) {
        l.insert("component".to_owned(), c.to_owned());
    }
    l
}

/// Brings a component's incident in line with its confirmed state: `orders-db down behind
/// search` opens it (kind `down` or `degraded`, as the target's own), its recovery resolves it
/// (kind `recovered`). Through the same incidents, sinks, filters, reminders and maintenance
/// windows as the target's status; held back while the target flaps, like its status alerts.
fn component_alert(
    out: &mut Vec<Alert>,
    emit: &mut Emit<'_>,
    incidents: &mut Incidents,
    cx: &Context<'_>,
    component: &str,
    (from, to): (Health, Health),
    reason: &str,
) {
    let family = component_family(component);
    match to {
        Health::Down | Health::Degraded => {
            if cx.silenced || cx.flapping {
                return;
            }
            let (kind, severity) = if to == Health::Down {
                (Kind::Down, "critical")
            } else {
                (Kind::Degraded, "warning")
            };
            let why = if reason.is_empty() {
                String::new()
            } else {
                format!(": {reason}")
            };
            let summary = format!("{component} {} behind {}{why}", to.as_str(), cx.target);
            let started = incidents
                .get(&family)
                .map(|i| i.opened_ms)
                .unwrap_or(cx.now_ms);
            open(incidents, &family, kind, severity, &summary, cx);
            if let Some(i) = incidents.get_mut(&family) {
                i.opened_ms = started;
            }
            emit(
                out,
                Action::Trigger,
                kind,
                &family,
                severity,
                summary,
                started,
            );
        }
        // Back, or forgotten (see `state::FORGET_COMPONENT_AFTER`): the server no longer
        // names it. Either closes its incident.
        Health::Healthy | Health::Unknown => {
            if let Some(inc) = incidents.remove(&family) {
                let how = if to == Health::Healthy {
                    "recovered"
                } else {
                    "is no longer reported"
                };
                emit(
                    out,
                    Action::Resolve,
                    Kind::Recovered,
                    &family,
                    "info",
                    format!(
                        "{component} {how} behind {} (was {})",
                        cx.target,
                        from.as_str()
                    ),
                    inc.opened_ms,
                );
            }
        }
    }
}

/// The open incidents of one target, by family.
pub type Incidents = BTreeMap<String, Incident>;

/// `mcpulse-` and 24 hex digits of SHA-256 over the target name and the incident family.
pub fn dedup_key(target: &str, family: &str) -> String {
    let mut h = Sha256::new();
    h.update(target.as_bytes());
    h.update([0]);
    h.update(family.as_bytes());
    let d = h.finalize();
    let mut s = String::from("mcpulse-");
    for b in &d[..12] {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

impl Alert {
    /// `mcpulse-d-` and 24 hex digits of SHA-256 over the dedup key, action, kind and the time
    /// the alert was raised. The dedup key names the incident; this names one alert of it (the
    /// trigger, each reminder, the resolve). It is the same for every attempt to deliver the
    /// alert, to any sink, before and after a restart (the outbox keeps the alert as raised),
    /// so a receiver, or a command, can do its work once per id: delivery is at least once.
    pub fn delivery_id(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.dedup_key.as_bytes());
        h.update([0]);
        // The action's name as the webhook body spells it.
        h.update(
            serde_json::to_string(&self.action)
                .unwrap_or_default()
                .as_bytes(),
        );
        h.update([0]);
        h.update(self.kind.as_str().as_bytes());
        h.update([0]);
        h.update(self.at_ms.to_be_bytes());
        let d = h.finalize();
        let mut s = String::from("mcpulse-d-");
        for b in &d[..12] {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }
}

/// What the policy needs to know about the target.
pub struct Context<'a> {
    pub target: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub now_ms: i64,
    /// Inside a maintenance window: nothing is sent, incidents are not opened.
    pub silenced: bool,
    pub flapping: bool,
    /// The confirmed status after the events.
    pub status: Health,
    /// The drift class (`breaking` or `risky`) the current contract has against the accepted
    /// one, if any: drift that began inside a maintenance window is raised after it.
    pub drift: Option<&'a str>,
    /// What changed, for the drift alert's summary: `item-removed tools[fetch]; … (+2 more)`
    /// (see [`crate::state::DriftChange::describe`]); empty when not known.
    pub drift_changes: &'a str,
    pub reminder_ms: Option<i64>,
    /// The target's confirmed components after the events: one down or degraded without an
    /// incident (its event came inside a maintenance window or while flapping) is raised at
    /// the first check its alerts are no longer held back. [`NO_COMPONENTS`] when none.
    pub components: &'a BTreeMap<String, ComponentState>,
    /// The target's outage is paged by its components' incidents alone
    /// ([`crate::state::TargetState::paged_by_components`]): its `status` incident is not
    /// opened (one that is already open is kept, updated and resolved as always). The status
    /// itself still moves: the API, the metrics and the history show it.
    pub by_components: bool,
    /// Why the target is as it is at this check (its observation's summary, inert): said by a
    /// status alert raised without a transition of its own (after a maintenance window or
    /// flapping, or when the server stops answering behind a component outage). Empty when
    /// not known.
    pub reason: &'a str,
}

/// No components, for a [`Context`] that has none to settle.
pub static NO_COMPONENTS: BTreeMap<String, ComponentState> = BTreeMap::new();

/// `search: breaking drift in its contract: item-removed tools[fetch]`.
fn drift_summary(cx: &Context<'_>, class: &str, note: &str) -> String {
    let mut s = format!("{}: {class} drift in its contract{note}", cx.target);
    if !cx.drift_changes.is_empty() {
        s.push_str(": ");
        s.push_str(cx.drift_changes);
    }
    s
}

/// Alerts for one target's events; updates its open incidents.
pub fn alerts(events: &[Event], incidents: &mut Incidents, cx: &Context<'_>) -> Vec<Alert> {
    let mut out = Vec::new();
    let mut emit = |out: &mut Vec<Alert>,
                    action,
                    kind: Kind,
                    family: &str,
                    severity: &str,
                    summary: String,
                    started_ms| {
        out.push(Alert {
            dedup_key: dedup_key(cx.target, family),
            action,
            kind,
            target: cx.target.to_owned(),
            severity: severity.to_owned(),
            summary,
            at_ms: cx.now_ms,
            started_ms,
            labels: labels_of(cx.labels, family),
            removed: false,
        });
    };
    for e in events {
        match e {
            Event::Transition {
                to,
                quiet: false,
                reason,
                from,
                ..
            } if !cx.flapping => {
                status_alert(
                    &mut out,
                    &mut emit,
                    incidents,
                    cx,
                    *to,
                    Some((*from, reason.as_str())),
                );
            }
            Event::Transition { .. } => {}
            Event::FlappingStarted { transitions, .. } => {
                if !cx.silenced {
                    let summary = format!(
                        "{} is flapping: {transitions} state changes in the flap window",
                        cx.target
                    );
                    raise(
                        &mut out,
                        &mut emit,
                        incidents,
                        cx,
                        Kind::Flapping,
                        "warning",
                        summary,
                    );
                }
            }
            Event::FlappingStopped { status, .. } => {
                if let Some(inc) = incidents.remove("flapping") {
                    emit(
                        &mut out,
                        Action::Resolve,
                        Kind::Flapping,
                        "flapping",
                        "warning",
                        format!("{} stopped flapping; it is {}", cx.target, status.as_str()),
                        inc.opened_ms,
                    );
                }
                // The status alerts held back while flapping: settle them now.
                status_alert(&mut out, &mut emit, incidents, cx, *status, None);
            }
            Event::Drift { class, .. } => {
                if !cx.silenced {
                    let summary = drift_summary(cx, class, "");
                    let severity = drift_severity(class);
                    raise(
                        &mut out,
                        &mut emit,
                        incidents,
                        cx,
                        Kind::Drift,
                        severity,
                        summary,
                    );
                }
            }
            Event::AuthChanged { from, to, .. } => notify(
                &mut out,
                &mut emit,
                cx,
                Kind::Auth,
                format!("{}: auth posture changed from {from} to {to}", cx.target),
            ),
            Event::ProtocolChanged { from, to, .. } => notify(
                &mut out,
                &mut emit,
                cx,
                Kind::Protocol,
                format!("{}: protocol changed from {from} to {to}", cx.target),
            ),
            Event::Component {
                component,
                from,
                to,
                reason,
                ..
            } => component_alert(
                &mut out,
                &mut emit,
                incidents,
                cx,
                component,
                (*from, *to),
                reason,
            ),
            // Recorded by the daemon, never fed to the policy.
            Event::Removed { .. } => {}
            Event::GradeChanged { from, to, .. } => notify(
                &mut out,
                &mut emit,
                cx,
                Kind::Grade,
                format!("{}: security grade changed from {from} to {to}", cx.target),
            ),
        }
    }
    // An outage that began (or went on) inside a maintenance window opened no incident, and
    // sends no transition when the window ends: settle it once the alerts are no longer
    // silenced, or it would never page however long it lasts.
    if !cx.silenced
        && !cx.flapping
        && matches!(cx.status, Health::Down | Health::Degraded)
        && !incidents.contains_key("status")
    {
        status_alert(&mut out, &mut emit, incidents, cx, cx.status, None);
    }
    // The same for the components: their events come once, at the threshold.
    if !cx.silenced && !cx.flapping {
        for (name, st) in cx.components {
            if matches!(st.status, Health::Down | Health::Degraded)
                && !incidents.contains_key(&component_family(name))
            {
                component_alert(
                    &mut out,
                    &mut emit,
                    incidents,
                    cx,
                    name,
                    (Health::Unknown, st.status),
                    "it began while its alerts were held back (maintenance or flapping)",
                );
            }
        }
    }
    // The same for flapping and drift: their events come once, when they begin, so ones that
    // began inside a maintenance window are raised at the first check after it if they still
    // hold (the target still flaps; the contract still differs from the accepted one).
    if !cx.silenced {
        if cx.flapping && !incidents.contains_key("flapping") {
            let summary = format!(
                "{} is flapping (it began inside a maintenance window)",
                cx.target
            );
            raise(
                &mut out,
                &mut emit,
                incidents,
                cx,
                Kind::Flapping,
                "warning",
                summary,
            );
        }
        if let Some(class) = cx.drift.filter(|c| matches!(*c, "breaking" | "risky"))
            && !incidents.contains_key("drift")
        {
            let summary = drift_summary(cx, class, " (it began inside a maintenance window)");
            let severity = drift_severity(class);
            raise(
                &mut out,
                &mut emit,
                incidents,
                cx,
                Kind::Drift,
                severity,
                summary,
            );
        }
    }
    // Reminders for incidents still open.
    if let (Some(every), false) = (cx.reminder_ms, cx.silenced) {
        for inc in incidents.values_mut() {
            if cx.now_ms - inc.notified_ms >= every
                && !out.iter().any(|a| a.dedup_key == inc.dedup_key)
            {
                inc.notified_ms = cx.now_ms;
                let family = inc.family.clone();
                emit(
                    &mut out,
                    Action::Remind,
                    inc.kind,
                    &family,
                    &inc.severity.clone(),
                    format!("still open: {}", inc.summary),
                    inc.opened_ms,
                );
            }
        }
    }
    out
}

type Emit<'e> = dyn FnMut(&mut Vec<Alert>, Action, Kind, &str, &str, String, i64) + 'e;

/// Brings the `status` incident in line with a confirmed status.
fn status_alert(
    out: &mut Vec<Alert>,
    emit: &mut Emit<'_>,
    incidents: &mut Incidents,
    cx: &Context<'_>,
    to: Health,
    cause: Option<(Health, &str)>,
) {
    match to {
        Health::Down | Health::Degraded => {
            if cx.silenced || (cx.by_components && !incidents.contains_key("status")) {
                return;
            }
            let (kind, severity) = if to == Health::Down {
                (Kind::Down, "critical")
            } else {
                (Kind::Degraded, "warning")
            };
            if incidents.get("status").is_some_and(|i| i.kind == kind) && cause.is_none() {
                return; // already open with this kind
            }
            let why = cause
                .map(|(_, r)| r)
                .or(Some(cx.reason))
                .filter(|r| !r.is_empty())
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            let summary = format!("{} is {}{why}", cx.target, to.as_str());
            let started = incidents
                .get("status")
                .map(|i| i.opened_ms)
                .unwrap_or(cx.now_ms);
            open(incidents, "status", kind, severity, &summary, cx);
            if let Some(i) = incidents.get_mut("status") {
                i.opened_ms = started;
            }
            emit(
                out,
                Action::Trigger,
                kind,
                "status",
                severity,
                summary,
                started,
            );
        }
        Health::Healthy => {
            if let Some(inc) = incidents.remove("status") {
                emit(
                    out,
                    Action::Resolve,
                    Kind::Recovered,
                    "status",
                    "info",
                    format!("{} recovered (was {})", cx.target, inc.kind.as_str()),
                    inc.opened_ms,
                );
            }
        }
        Health::Unknown => {}
    }
}

/// Opens the incident of `kind` (its family is the kind's name: `drift`, `flapping`) and
/// triggers it.
fn raise(
    out: &mut Vec<Alert>,
    emit: &mut Emit<'_>,
    incidents: &mut Incidents,
    cx: &Context<'_>,
    kind: Kind,
    severity: &str,
    summary: String,
) {
    let family = kind.as_str();
    open(incidents, family, kind, severity, &summary, cx);
    emit(
        out,
        Action::Trigger,
        kind,
        family,
        severity,
        summary,
        cx.now_ms,
    );
}

fn drift_severity(class: &str) -> &'static str {
    if class == "breaking" {
        "critical"
    } else {
        "warning"
    }
}

fn open(
    incidents: &mut Incidents,
    family: &str,
    kind: Kind,
    severity: &str,
    summary: &str,
    cx: &Context<'_>,
) {
    incidents.insert(
        family.to_owned(),
        Incident {
            dedup_key: dedup_key(cx.target, family),
            family: family.to_owned(),
            kind,
            severity: severity.to_owned(),
            summary: summary.to_owned(),
            opened_ms: cx.now_ms,
            notified_ms: cx.now_ms,
        },
    );
}

fn notify(
    out: &mut Vec<Alert>,
    emit: &mut Emit<'_>,
    cx: &Context<'_>,
    kind: Kind,
    summary: String,
) {
    if !cx.silenced {
        emit(
            out,
            Action::Notify,
            kind,
            kind.as_str(),
            "info",
            summary,
            cx.now_ms,
        );
    }
}

/// Resolves the drift incident (the contract was accepted, or came back to the baseline).
pub fn resolve_drift(incidents: &mut Incidents, cx: &Context<'_>) -> Option<Alert> {
    let inc = incidents.remove("drift")?;
    Some(Alert {
        dedup_key: inc.dedup_key,
        action: Action::Resolve,
        kind: Kind::Drift,
        target: cx.target.to_owned(),
        severity: inc.severity,
        summary: format!("{}: the contract matches its baseline again", cx.target),
        at_ms: cx.now_ms,
        started_ms: inc.opened_ms,
        labels: cx.labels.clone(),
        removed: false,
    })
}

/// The resolves for a target removed from the config: one per open incident, with the
/// incident's own dedup key (so PagerDuty and Alertmanager close what they opened), a summary
/// saying why, and `removed` set. Takes the incidents: none is left open.
pub fn resolve_removed(
    target: &str,
    labels: &BTreeMap<String, String>,
    incidents: &mut Incidents,
    now_ms: i64,
) -> Vec<Alert> {
    std::mem::take(incidents)
        .into_values()
        .map(|inc| {
            let summary = format!(
                "{target} was removed from the monitor's config; closing its open {} incident",
                inc.kind.as_str()
            );
            let mut a = inc.alert(target, labels, Action::Resolve, summary, now_ms);
            // The kind a resolve of the status family has when it closes normally, so that
            // the sinks' `on` filters and payloads treat it the same way.
            if inc.family == "status" || inc.family.starts_with(COMPONENT_FAMILY) {
                a.kind = Kind::Recovered;
                a.severity = "info".to_owned();
            }
            a.removed = true;
            a
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Observation, TargetState, Thresholds, observe};

    fn cx<'a>(
        labels: &'a BTreeMap<String, String>,
        now: i64,
        status: Health,
        flapping: bool,
    ) -> Context<'a> {
        Context {
            target: "search",
            labels,
            now_ms: now,
            silenced: false,
            flapping,
            status,
            drift: None,
            drift_changes: "",
            reminder_ms: Some(3_600_000),
            components: &NO_COMPONENTS,
            by_components: false,
            reason: "",
        }
    }

    fn o(status: Health, at: i64) -> Observation {
        Observation::bare(status, at, "connect-failed")
    }

    /// The thresholds of the component tests: down after two checks, back after two.
    const COMPONENT_THRESHOLDS: Thresholds = Thresholds {
        failure: 2,
        success: 2,
        flap_window_ms: 600_000,
        flap_threshold: 4,
    };

    /// A minute-by-minute run through state and policy; returns every alert.
    fn run(seq: &[Health], reminder: bool) -> (Vec<Alert>, Incidents) {
        let t = Thresholds {
            failure: 3,
            success: 2,
            flap_window_ms: 600_000,
            flap_threshold: 4,
        };
        let labels = BTreeMap::new();
        let mut s = TargetState::default();
        let mut inc = Incidents::new();
        let mut all = Vec::new();
        for (i, h) in seq.iter().enumerate() {
            let now = i as i64 * 60_000;
            let (n, ev) = observe(&s, &o(*h, now), t, now);
            let mut c = cx(&labels, now, n.status, n.flapping);
            if !reminder {
                c.reminder_ms = None;
            }
            all.extend(alerts(&ev, &mut inc, &c));
            s = n;
        }
        (all, inc)
    }

    use Health::*;

    /// A dependency down behind a server whose protocol layer is healthy: the health tool's
    /// `down` makes the target's own status down too (the API shows it), but the outage pages
    /// once, as the component's incident (its name and the target's in the summary, a
    /// `component` label), after the failure threshold, and its recovery resolves that one.
    #[test]
    fn a_component_outage_behind_a_healthy_server_pages_once_and_resolves_once() {
        let (all, inc, s) = component_run(
            &[
                Healthy, Healthy, Down, Down, Down, Healthy, Healthy, Healthy,
            ],
            &[],
        );
        assert_eq!(s.status, Healthy);
        let seen: Vec<(Action, Kind, &str, i64)> = all
            .iter()
            .map(|a| (a.action, a.kind, a.summary.as_str(), a.at_ms))
            .collect();
        assert_eq!(
            seen,
            [
                (
                    Action::Trigger,
                    Kind::Down,
                    "orders-db down behind search: reported by the health tool health",
                    180_000
                ),
                (
                    Action::Resolve,
                    Kind::Recovered,
                    "orders-db recovered behind search (was down)",
                    360_000
                ),
            ]
        );
        assert_eq!(all[0].dedup_key, all[1].dedup_key);
        assert_eq!(all[0].dedup_key, dedup_key("search", "component:orders-db"));
        assert_ne!(all[0].dedup_key, dedup_key("search", "status"));
        assert_eq!(all[0].labels["component"], "orders-db");
        assert_eq!(all[0].labels["team"], "orders");
        assert!(inc.is_empty());
        assert_eq!(s.components["orders-db"].since_ms, 360_000);
        assert_eq!(s.components["cache"].status, Healthy);
    }

    /// The same outage, but the server stops answering the protocol too for as long as the
    /// failure threshold (checks 3 and 4): the outage is then the target's own as well, and
    /// its `status` incident opens and resolves beside the component's. A single check the
    /// components do not explain (check 3 alone) does not page the target.
    #[test]
    fn a_component_outage_with_the_protocol_failing_too_pages_the_target() {
        let (all, inc, s) = component_run(
            &[
                Healthy, Healthy, Down, Down, Down, Down, Healthy, Healthy, Healthy,
            ],
            &[3, 4],
        );
        assert_eq!(s.status, Healthy);
        let seen = summaries(&all);
        assert_eq!(
            seen,
            [
                (
                    Action::Trigger,
                    "orders-db down behind search: reported by the health tool health",
                    180_000
                ),
                (
                    Action::Trigger,
                    "search is down: connect-failed: connection refused",
                    240_000
                ),
                (Action::Resolve, "search recovered (was down)", 420_000),
                (
                    Action::Resolve,
                    "orders-db recovered behind search (was down)",
                    420_000
                ),
            ]
        );
        assert!(inc.is_empty());
        // One unexplained check alone (check 3 with a threshold of 2) pages nothing more.
        let (all, _, _) = component_run(
            &[
                Healthy, Healthy, Down, Down, Down, Down, Healthy, Healthy, Healthy,
            ],
            &[3],
        );
        assert_eq!(all.len(), 2, "{all:?}");
    }

    /// A minute-by-minute run of a target whose health tool reports `orders-db` as `seq`
    /// says (and `cache` healthy), through state and policy with [`COMPONENT_THRESHOLDS`]. The
    /// target's observed status is the component's (the health tool's `down` makes it down);
    /// the checks at the indexes in `unexplained` also failed the protocol (the components
    /// do not explain them). Returns every alert, the incidents and the state.
    fn component_run(
        seq: &[Health],
        unexplained: &[usize],
    ) -> (Vec<Alert>, Incidents, TargetState) {
        let steps: Vec<Step> = seq
            .iter()
            .enumerate()
            .map(|(i, h)| {
                if unexplained.contains(&i) {
                    (*h, Some(*h), "connect-failed: connection refused")
                } else {
                    (*h, Some(*h), TOOL_DOWN)
                }
            })
            .collect();
        component_steps(&steps)
    }

    /// One check of [`component_steps`]: the target's observed status, what its health tool
    /// says of `orders-db` (`None`: no document), and the observation's summary (the checks
    /// summarised [`TOOL_DOWN`] or `healthy` are explained by the components).
    type Step = (Health, Option<Health>, &'static str);

    const TOOL_DOWN: &str = "health-tool-down: the health tool health reports down";

    /// [`component_run`] check by check: see [`Step`].
    fn component_steps(steps: &[Step]) -> (Vec<Alert>, Incidents, TargetState) {
        use crate::state::Component;
        let t = COMPONENT_THRESHOLDS;
        let labels = BTreeMap::from([("team".to_owned(), "orders".to_owned())]);
        let mut s = TargetState::default();
        let mut inc = Incidents::new();
        let mut all = Vec::new();
        for (i, (h, db, summary)) in steps.iter().enumerate() {
            let now = i as i64 * 60_000;
            let mut obs = Observation::bare(*h, now, summary);
            obs.by_components = *h != Healthy && *summary == TOOL_DOWN;
            obs.server_answered = true;
            if let Some(db) = db {
                let reason = if *db == Healthy {
                    ""
                } else {
                    "reported by the health tool health"
                };
                obs.components.insert(
                    "orders-db".into(),
                    Component {
                        status: *db,
                        reason: reason.into(),
                    },
                );
                obs.components.insert(
                    "cache".into(),
                    Component {
                        status: Healthy,
                        reason: String::new(),
                    },
                );
            }
            let (n, ev) = observe(&s, &obs, t, now);
            let mut c = cx(&labels, now, n.status, n.flapping);
            c.components = &n.components;
            c.by_components = n.paged_by_components(t);
            c.reason = &obs.summary;
            all.extend(alerts(&ev, &mut inc, &c));
            s = n;
        }
        (all, inc, s)
    }

    /// Each alert's action, summary and time.
    fn summaries(all: &[Alert]) -> Vec<(Action, &str, i64)> {
        all.iter()
            .map(|a| (a.action, a.summary.as_str(), a.at_ms))
            .collect()
    }

    /// The alerts are `orders-db`'s trigger at `triggered` and its resolve at `resolved`, and
    /// nothing else (no page of the target).
    fn assert_orders_db_paged_once(all: &[Alert], triggered: i64, resolved: i64) {
        let seen = summaries(all);
        assert_eq!(
            seen,
            [
                (
                    Action::Trigger,
                    "orders-db down behind search: reported by the health tool health",
                    triggered
                ),
                (
                    Action::Resolve,
                    "orders-db recovered behind search (was down)",
                    resolved
                ),
            ]
        );
    }

    /// The target's streak ahead of its component's: the health tool first fails without a
    /// document (check 2, the target's own), then names `orders-db` down. The target is
    /// confirmed down at check 3, the component only at check 4: its pending streak holds the
    /// target's page, so the outage pages once, as the component.
    #[test]
    fn a_component_streak_behind_the_targets_still_pages_once() {
        let no_doc = "health-tool-down: the health tool health returned an error";
        let (all, inc, s) = component_steps(&[
            (Healthy, Some(Healthy), "healthy"),
            (Healthy, Some(Healthy), "healthy"),
            (Down, None, no_doc),
            (Down, Some(Down), TOOL_DOWN),
            (Down, Some(Down), TOOL_DOWN),
            (Healthy, Some(Healthy), "healthy"),
            (Healthy, Some(Healthy), "healthy"),
        ]);
        assert_orders_db_paged_once(&all, 240_000, 360_000);
        assert!(inc.is_empty());
        assert_eq!(s.status, Healthy);
    }

    /// The recovery mirror: `orders-db` recovers before the target's recovery is confirmed,
    /// and one check the components do not explain (a slow handshake, only degraded) comes in
    /// between. It does not page the target (as down, after the outage is over); the same
    /// slow handshake for `failure_threshold` checks pages it, at the severity observed.
    #[test]
    fn a_blip_after_the_components_recover_does_not_page_the_target() {
        let slow = "slow-handshake: the handshake took 4000 ms";
        let outage = [
            (Healthy, Some(Healthy), "healthy"),
            (Healthy, Some(Healthy), "healthy"),
            (Down, Some(Down), TOOL_DOWN),
            (Down, Some(Down), TOOL_DOWN),
            (Healthy, Some(Healthy), "healthy"),
            (Degraded, Some(Healthy), slow),
        ];
        let mut blip = outage.to_vec();
        blip.extend([
            (Healthy, Some(Healthy), "healthy"),
            (Healthy, Some(Healthy), "healthy"),
        ]);
        let (all, inc, s) = component_steps(&blip);
        assert_orders_db_paged_once(&all, 180_000, 300_000);
        assert!(inc.is_empty());
        assert_eq!(s.status, Healthy);
        // The slow handshake for as long as the failure threshold: the target's own outage.
        let mut slow_run = outage.to_vec();
        slow_run.push((Degraded, Some(Healthy), slow));
        let (all, inc, _) = component_steps(&slow_run);
        let last = all.last().map(|a| (a.action, a.kind, a.summary.as_str()));
        assert_eq!(
            last,
            Some((
                Action::Trigger,
                Kind::Degraded,
                "search is degraded: slow-handshake: the handshake took 4000 ms"
            )),
            "{all:?}"
        );
        assert_eq!(all.len(), 3, "{all:?}");
        assert!(inc.contains_key("status"));
    }

    /// A component that went down inside a maintenance window (or while the target
    /// flapped) is raised at the first check after it, once; one the server stops naming is
    /// resolved as no longer reported when it is forgotten.
    #[test]
    fn a_component_outage_held_back_is_raised_after_and_a_forgotten_one_resolved() {
        use crate::state::{Component, FORGET_COMPONENT_AFTER};
        let t = COMPONENT_THRESHOLDS;
        let labels = BTreeMap::new();
        let mut s = TargetState::default();
        let mut inc = Incidents::new();
        let mut all = Vec::new();
        let total = 6 + FORGET_COMPONENT_AFTER as usize;
        for i in 0..total {
            let now = i as i64 * 60_000;
            let mut obs = Observation::bare(Healthy, now, "healthy");
            if i < 6 {
                obs.components.insert(
                    "orders-db".into(),
                    Component {
                        status: Down,
                        reason: "refused".into(),
                    },
                );
            }
            let (n, ev) = observe(&s, &obs, t, now);
            let mut c = cx(&labels, now, n.status, n.flapping);
            c.components = &n.components;
            // Checks 0 to 3 are inside a maintenance window.
            c.silenced = i < 4;
            all.extend(alerts(&ev, &mut inc, &c));
            s = n;
        }
        let seen = summaries(&all);
        let forgotten_at = (5 + i64::from(FORGET_COMPONENT_AFTER)) * 60_000;
        assert_eq!(
            seen,
            [
                (
                    Action::Trigger,
                    "orders-db down behind search: it began while its alerts were held back (maintenance or flapping)",
                    240_000
                ),
                (
                    Action::Resolve,
                    "orders-db is no longer reported behind search (was down)",
                    forgotten_at
                ),
            ]
        );
        assert!(inc.is_empty());
        assert!(s.components.is_empty());
    }

    #[test]
    fn one_firing_one_resolved() {
        let (a, inc) = run(
            &[Healthy, Down, Down, Down, Down, Healthy, Healthy, Healthy],
            true,
        );
        let actions: Vec<(Action, Kind)> = a.iter().map(|x| (x.action, x.kind)).collect();
        assert_eq!(
            actions,
            vec![
                (Action::Trigger, Kind::Down),
                (Action::Resolve, Kind::Recovered)
            ]
        );
        assert_eq!(a[0].dedup_key, a[1].dedup_key);
        assert_eq!(a[1].started_ms, a[0].at_ms);
        assert!(inc.is_empty());
    }

    #[test]
    fn dedup_keys_are_deterministic() {
        assert_eq!(dedup_key("search", "status"), dedup_key("search", "status"));
        assert_ne!(dedup_key("search", "status"), dedup_key("search", "drift"));
        assert_ne!(dedup_key("a", "bstatus"), dedup_key("ab", "status"));
        assert_eq!(dedup_key("search", "status").len(), 8 + 24);
    }

    #[test]
    fn reminders_while_open() {
        let mut seq = vec![Healthy, Down, Down, Down];
        seq.extend(std::iter::repeat_n(Down, 130));
        let (a, _) = run(&seq, true);
        let reminders = a.iter().filter(|x| x.action == Action::Remind).count();
        assert_eq!(reminders, 2, "one an hour for a bit over two hours");
        let (a, _) = run(&seq, false);
        assert_eq!(a.iter().filter(|x| x.action == Action::Remind).count(), 0);
    }

    #[test]
    fn maintenance_silences_and_settles_after() {
        let labels = BTreeMap::new();
        let mut inc = Incidents::new();
        let ev = vec![Event::Transition {
            from: Healthy,
            to: Down,
            at_ms: 0,
            quiet: false,
            reason: String::new(),
        }];
        let mut c = cx(&labels, 0, Down, false);
        c.silenced = true;
        assert!(alerts(&ev, &mut inc, &c).is_empty());
        assert!(inc.is_empty());
        // Still down when the window ends: paged once, at the first check after it.
        let c = cx(&labels, 60_000, Down, false);
        let a = alerts(&[], &mut inc, &c);
        assert_eq!(
            a.iter().map(|x| (x.action, x.kind)).collect::<Vec<_>>(),
            vec![(Action::Trigger, Kind::Down)]
        );
        assert!(inc.contains_key("status"));
        assert!(alerts(&[], &mut inc, &cx(&labels, 120_000, Down, false)).is_empty());
    }

    #[test]
    fn drift_and_flapping_that_began_in_maintenance_are_raised_after_it() {
        let labels = BTreeMap::new();
        let mut inc = Incidents::new();
        let ev = vec![
            Event::Drift {
                at_ms: 0,
                class: "breaking".into(),
                digest: None,
                changes: Vec::new(),
                more: 0,
            },
            Event::FlappingStarted {
                at_ms: 0,
                transitions: 5,
            },
        ];
        let mut c = cx(&labels, 0, Healthy, true);
        c.silenced = true;
        c.drift = Some("breaking");
        assert!(alerts(&ev, &mut inc, &c).is_empty());
        assert!(inc.is_empty());
        // Inside the window, later checks stay silent too.
        let mut c = cx(&labels, 30_000, Healthy, true);
        c.silenced = true;
        c.drift = Some("breaking");
        assert!(alerts(&[], &mut inc, &c).is_empty());
        // After it, both still hold: raised once, at the first check, no events needed.
        let mut c = cx(&labels, 60_000, Healthy, true);
        c.drift = Some("breaking");
        let a = alerts(&[], &mut inc, &c);
        assert_eq!(
            a.iter()
                .map(|x| (x.action, x.kind, x.severity.as_str()))
                .collect::<Vec<_>>(),
            vec![
                (Action::Trigger, Kind::Flapping, "warning"),
                (Action::Trigger, Kind::Drift, "critical")
            ]
        );
        assert_eq!(a[1].dedup_key, dedup_key("search", "drift"));
        assert!(inc.contains_key("drift") && inc.contains_key("flapping"));
        assert!(
            alerts(&[], &mut inc, &c).is_empty(),
            "once, not every check"
        );
        // Info drift, or drift gone by the end of the window, raises nothing.
        let mut inc = Incidents::new();
        let mut c = cx(&labels, 60_000, Healthy, false);
        c.drift = Some("info");
        assert!(alerts(&[], &mut inc, &c).is_empty());
        c.drift = None;
        assert!(alerts(&[], &mut inc, &c).is_empty());
    }

    #[test]
    fn flapping_pages_once() {
        let t = Thresholds {
            failure: 1,
            success: 1,
            flap_window_ms: 600_000,
            flap_threshold: 4,
        };
        let labels = BTreeMap::new();
        let mut s = TargetState::default();
        let mut inc = Incidents::new();
        let mut all = Vec::new();
        let seq = [
            Healthy, Down, Healthy, Down, Healthy, Down, Healthy, Down, Healthy, Down,
        ];
        for (i, h) in seq.iter().enumerate() {
            let now = i as i64 * 10_000;
            let (n, ev) = observe(&s, &o(*h, now), t, now);
            all.extend(alerts(
                &ev,
                &mut inc,
                &cx(&labels, now, n.status, n.flapping),
            ));
            s = n;
        }
        let flapping = all
            .iter()
            .filter(|a| a.kind == Kind::Flapping && a.action == Action::Trigger)
            .count();
        assert_eq!(flapping, 1);
        // Status alerts before flapping was detected, none after.
        let after: Vec<_> = all
            .iter()
            .skip_while(|a| a.kind != Kind::Flapping)
            .skip(1)
            .collect();
        assert!(after.is_empty(), "{after:?}");
        // It calms down while down: flapping resolves, and the down incident is (re)opened.
        let now = 30 * 60_000;
        let (n, ev) = observe(&s, &o(Down, now), t, now);
        let a = alerts(&ev, &mut inc, &cx(&labels, now, n.status, n.flapping));
        assert_eq!(
            a.iter().map(|x| (x.action, x.kind)).collect::<Vec<_>>(),
            vec![
                (Action::Resolve, Kind::Flapping),
                (Action::Trigger, Kind::Down)
            ]
        );
    }
}
