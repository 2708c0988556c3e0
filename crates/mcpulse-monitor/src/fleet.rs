//! The fleet snapshot: what the monitor knows right now about every target, and about itself.
//!
//! Target tasks write one view per check ([`Fleet::update_from`]); the store writer reports its
//! writes ([`Fleet::store_ok`], [`Fleet::store_failed`]); the daemon reports config loads. The
//! HTTP API, `/metrics` and the status page only read ([`Fleet::snapshot`]). Everything here is
//! in memory and cheap to clone: a reader copies what it needs and lets go of the lock before it
//! serialises anything.
//!
//! This module does not decide anything about targets (that is [`crate::state`] and
//! [`crate::alert`]) and keeps no history (that is the store). It does decide whether the
//! monitor itself is ready ([`Snapshot::readiness`]), because only it sees all three inputs:
//! the config, the store writes and the freshness of the checks.

use crate::alert::{Incident, Incidents};
use crate::config::{Endpoint, TargetConfig};
use crate::state::{Health, Observation, TargetState};
use mcpulse_judge::report::{Report, Timings};
use mcpulse_judge::{Finding, Severity};
use mcpulse_wire::redact;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The shared, cloneable handle on the fleet snapshot. Clones share the same data.
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    inner: Arc<RwLock<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    targets: BTreeMap<String, TargetView>,
    monitor: MonitorHealth,
    /// Targets whose next contract is to become the baseline (`POST …/accept`), each with the
    /// request's stamp ([`Fleet::accept_mark`]): taken by the first check with a contract whose
    /// probe started after the request ([`Fleet::take_accept`]).
    accepts: BTreeMap<String, u64>,
    /// The last stamp given to an accept request.
    accept_stamp: u64,
    /// Targets whose check took an accepted contract that the store has not written yet, with
    /// the time of the last such check: the accept stays pending until
    /// [`Fleet::baseline_stored`] confirms a baseline accepted at that time or later (an older
    /// accept's baseline, written meanwhile, does not answer a newer one).
    accepting: BTreeMap<String, i64>,
    /// Each target's stored baseline, as the store last confirmed it.
    baselines: BTreeMap<String, Baseline>,
    /// Targets whose stored baseline could not be read: drift is not judged for them.
    baseline_errors: BTreeMap<String, String>,
}

/// What the API shows about one target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetView {
    pub name: String,
    /// `http` or `stdio`.
    pub kind: &'static str,
    /// The URL or the command line, redacted by `mcpulse_wire::redact`'s rules: the target's
    /// secret values hidden wherever they are, URL userinfo and query values, and
    /// credential-looking arguments (the environment is never shown).
    pub endpoint: String,
    pub labels: BTreeMap<String, String>,
    pub interval_ms: i64,
    pub timeout_ms: i64,
    /// The confirmed status (thresholds applied), as alerts see it.
    pub status: Health,
    /// When the confirmed status began; `None` while it is unknown.
    pub since_ms: Option<i64>,
    pub flapping: bool,
    /// Results that disagree with the confirmed status, in a row (what may change it next).
    pub streak: Option<Streak>,
    /// The worst drift class against the accepted contract, when there is drift.
    pub drift: Option<String>,
    /// Its first changes (breaking first: code, path, class), and how many more there are.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drift_changes: Vec<crate::state::DriftChange>,
    #[serde(skip_serializing_if = "crate::state::is_zero")]
    pub drift_changes_more: usize,
    /// The latest check; `None` before the first one.
    pub last: Option<LastCheck>,
    /// Open incidents, oldest first.
    pub incidents: Vec<Incident>,
    /// The dependencies behind the server (health-document components, `tool NAME` for
    /// synthetic calls) with their confirmed state and since when; absent without any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<ComponentView>,
    /// The synthetic calls' counts and latency histogram since the monitor started, by tool,
    /// for `/metrics` (the API's percentiles come from the history).
    #[serde(skip)]
    pub tools: BTreeMap<String, ToolCalls>,
    /// A `POST …/accept` waits for the next check with a contract, which becomes the
    /// baseline; absent when none waits.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub accept_pending: bool,
    /// Why the stored baseline (the accepted contract) could not be read: drift is not
    /// judged until a contract is accepted again. Absent when it could.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_error: Option<String>,
    /// The stored baseline (the accepted contract): its digest and the time of the check that
    /// took it. Set only once the store has written it; absent before any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
}

/// A target's stored drift baseline, as its view shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Baseline {
    /// `sha256:…` of the contract.
    pub digest: String,
    /// When the check that took it ran (ms since the epoch).
    pub accepted_ms: i64,
}

/// The upper bounds (seconds) of the synthetic-call latency histogram's buckets: from a fast
/// in-memory tool to the 5 s default budget and past it.
pub const TOOL_CALL_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The most tools of one target with a series of their own; later ones share
/// [`OTHER_TOOL`]. The calls are the config's, but a bound keeps `/metrics` bounded whatever
/// the config holds.
pub const MAX_TOOL_SERIES: usize = 32;

/// The `tool` label of the tools past [`MAX_TOOL_SERIES`].
pub const OTHER_TOOL: &str = "_other";

/// One tool's synthetic calls since the monitor started: counters and a histogram.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCalls {
    pub calls: u64,
    pub errors: u64,
    /// Seconds, of the calls with a duration.
    pub sum: f64,
    pub count: u64,
    /// Per bucket of [`TOOL_CALL_BUCKETS`] (not cumulative), then the +Inf one.
    pub buckets: [u64; TOOL_CALL_BUCKETS.len() + 1],
}

impl ToolCalls {
    fn add(&mut self, ok: bool, ms: Option<f64>) {
        self.calls += 1;
        if !ok {
            self.errors += 1;
        }
        if let Some(ms) = ms.filter(|m| m.is_finite() && *m >= 0.0) {
            let s = ms / 1000.0;
            self.sum += s;
            self.count += 1;
            let i = TOOL_CALL_BUCKETS
                .iter()
                .position(|b| s <= *b)
                .unwrap_or(TOOL_CALL_BUCKETS.len());
            if let Some(b) = self.buckets.get_mut(i) {
                *b += 1;
            }
        }
    }
}

/// One dependency of a target, as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComponentView {
    pub name: String,
    pub status: Health,
    pub since_ms: i64,
}

/// A run of results that may change the confirmed status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Streak {
    pub status: Health,
    pub count: u32,
}

/// The latest check of a target: the raw verdict and the facts behind it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LastCheck {
    pub at_ms: i64,
    /// The raw status of this one check (not the confirmed one).
    pub status: Health,
    /// Whole probe, milliseconds. `None` when resumed from the store without a report.
    pub duration_ms: Option<f64>,
    pub timings_ms: Option<Timings>,
    pub findings: Vec<Finding>,
    /// A–F, when the target's security checks are on.
    pub grade: Option<String>,
    /// 0–100, alongside the grade.
    pub security_score: Option<u32>,
    /// `modern` or `legacy`.
    pub era: Option<String>,
    pub protocol_version: Option<String>,
    /// `none`, `required` or `forbidden`.
    pub auth: String,
    pub tool_count: Option<usize>,
    /// `sha256:…` of the server's contract.
    pub contract_digest: Option<String>,
    /// The security findings behind the grade, with their evidence.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub security: Vec<crate::state::SecurityEvidence>,
}

/// The grade the monitor records for a check: none without the security checks, and none for
/// a check in which the server did not answer, which graded nothing (rather than the A of no
/// findings). A check down only because of what is behind the server (a dependency, a critical
/// call) graded a server that answered: its grade counts.
pub(crate) fn recorded_grade(report: &Report, with_grade: bool) -> Option<String> {
    (with_grade && (report.status != mcpulse_judge::Status::Down || server_answered(report)))
        .then(|| report.grade.clone())
        .filter(|g| !g.is_empty())
}

/// Whether the server answered the protocol at this check: its liveness and protocol layers
/// were checked and neither is down (a check down only because of its dependencies answered).
/// False for a target that reads only a health endpoint, which speaks no protocol.
pub(crate) fn server_answered(report: &Report) -> bool {
    use mcpulse_judge::Status;
    matches!(
        (report.layers.liveness, report.layers.protocol),
        (Some(l), Some(p)) if l != Status::Down && p != Status::Down
    )
}

impl LastCheck {
    /// From a judged report. `with_grade` follows the target's `security` setting, as the
    /// state machine's observation does.
    pub fn from_report(report: &Report, at_ms: i64, with_grade: bool) -> LastCheck {
        let grade = recorded_grade(report, with_grade);
        LastCheck {
            at_ms,
            status: Health::from_status(report.status),
            duration_ms: Some(report.timings_ms.total),
            timings_ms: Some(report.timings_ms.clone()),
            findings: report.findings.clone(),
            security_score: grade.as_ref().map(|_| report.security.score),
            grade,
            era: report.era.map(|e| e.as_str().to_owned()),
            protocol_version: report.protocol_version.clone(),
            auth: report.auth.as_str().to_owned(),
            tool_count: report.tool_count,
            contract_digest: report.digests.as_ref().map(|d| d.contract.clone()),
            security: if with_grade {
                crate::state::SecurityEvidence::of(&report.security)
            } else {
                Vec::new()
            },
        }
    }

    /// From the state machine's last observation (after a restart, before the first new
    /// check): the facts it keeps, without timings, findings or counts.
    pub fn from_observation(o: &Observation) -> LastCheck {
        LastCheck {
            at_ms: o.at_ms,
            status: o.status,
            duration_ms: None,
            timings_ms: None,
            findings: Vec::new(),
            grade: o.grade.clone(),
            security_score: None,
            era: o.era.clone(),
            protocol_version: o.protocol_version.clone(),
            auth: o.auth.clone(),
            tool_count: None,
            contract_digest: o.contract_digest.clone(),
            security: o.security.clone(),
        }
    }
}

impl TargetView {
    /// A configured target that has not been checked yet.
    pub fn new(cfg: &TargetConfig) -> TargetView {
        let (kind, endpoint) = match &cfg.endpoint {
            Endpoint::Url(u) => ("http", redact::target_url(u, &cfg.secrets)),
            Endpoint::Command { argv, .. } => ("stdio", redact::command_line(argv, &cfg.secrets)),
            Endpoint::Health(u) => ("health", redact::target_url(u, &cfg.secrets)),
        };
        TargetView {
            name: cfg.name.clone(),
            kind,
            endpoint,
            labels: cfg.labels.clone(),
            interval_ms: millis(cfg.interval),
            timeout_ms: millis(cfg.timeout),
            status: Health::Unknown,
            since_ms: None,
            flapping: false,
            streak: None,
            drift: None,
            drift_changes: Vec::new(),
            drift_changes_more: 0,
            last: None,
            incidents: Vec::new(),
            components: Vec::new(),
            tools: BTreeMap::new(),
            accept_pending: false,
            baseline_error: None,
            baseline: None,
        }
    }

    /// Takes the confirmed state and open incidents (the last check is left as it is).
    pub fn set_state(&mut self, state: &TargetState, incidents: &Incidents) {
        self.status = state.status;
        self.since_ms = (state.status != Health::Unknown).then_some(state.since_ms);
        self.flapping = state.flapping;
        self.streak = state.streak.map(|(status, count)| Streak { status, count });
        self.drift = state.last.as_ref().and_then(|o| o.drift.clone());
        (self.drift_changes, self.drift_changes_more) = state
            .last
            .as_ref()
            .filter(|o| o.drift.is_some())
            .map(|o| (o.drift_changes.clone(), o.drift_changes_more))
            .unwrap_or_default();
        let mut open: Vec<Incident> = incidents.values().cloned().collect();
        open.sort_by_key(|i| i.opened_ms);
        self.incidents = open;
        self.components = state
            .components
            .iter()
            .map(|(name, c)| ComponentView {
                name: name.clone(),
                status: c.status,
                since_ms: c.since_ms,
            })
            .collect();
    }
}

fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The monitor's own health, for `/readyz` and the self metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MonitorHealth {
    /// When the running config was (re)loaded; `None` until the first load.
    pub config_loaded_ms: Option<i64>,
    /// `Some(false)` once the daemon says its scheduler stopped (shutting down). `None`:
    /// not reported, readiness then judges the scheduler by the freshness of the checks.
    pub scheduler_running: Option<bool>,
    /// The last successful store write.
    pub store_last_ok_ms: Option<i64>,
    /// The last failed store write, when it is more recent than the last success.
    pub store_error: Option<StoreError>,
    pub store_write_errors: u64,
    /// Checks published since start.
    pub checks: u64,
    /// `/probe` requests that ran a probe, since start.
    pub probes: u64,
    /// `/probe` probes running now.
    pub probes_in_flight: u64,
    /// Alert delivery attempts since start, by (sink identity, outcome) as
    /// [`Fleet::alert_delivery`] counts them: `mcpulse_alert_deliveries_total`. Bounded by the
    /// sinks the outbox holds rows for (the configured ones, and removed ones until their
    /// rows are done) times three outcomes.
    #[serde(skip)]
    pub deliveries: BTreeMap<(String, &'static str), u64>,
}

/// A failed store write.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoreError {
    pub at_ms: i64,
    pub message: String,
}

/// A consistent copy of the fleet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    /// By name.
    pub targets: Vec<TargetView>,
    pub monitor: MonitorHealth,
}

impl Inner {
    /// A copy of `view` with what the fleet keeps beside the views: a pending accept, a
    /// baseline that could not be read (the views are rebuilt at each check and reload).
    fn complete(&self, view: &TargetView) -> TargetView {
        let mut v = view.clone();
        v.accept_pending =
            self.accepts.contains_key(&v.name) || self.accepting.contains_key(&v.name);
        v.baseline_error = self.baseline_errors.get(&v.name).cloned();
        v.baseline = self.baselines.get(&v.name).cloned();
        v
    }
}

impl Fleet {
    pub fn new() -> Fleet {
        Fleet::default()
    }

    // A panic while holding the lock leaves plain data behind, still consistent enough to
    // show: a poisoned lock is used as is rather than taking the API down with it.
    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The configured targets, after a load or reload: new ones appear as unknown, removed
    /// ones disappear, changed ones keep their state with the new endpoint, labels and
    /// interval. Marks the config loaded now.
    pub fn set_config(&self, targets: &[TargetConfig]) {
        self.set_config_at(targets, crate::clock::wall_ms());
    }

    /// [`Fleet::set_config`] at a given time.
    pub fn set_config_at(&self, targets: &[TargetConfig], now_ms: i64) {
        let mut g = self.write();
        let mut next = BTreeMap::new();
        for t in targets {
            let mut view = TargetView::new(t);
            if let Some(old) = g.targets.remove(&t.name) {
                view.status = old.status;
                view.since_ms = old.since_ms;
                view.flapping = old.flapping;
                view.streak = old.streak;
                view.drift = old.drift;
                view.drift_changes = old.drift_changes;
                view.drift_changes_more = old.drift_changes_more;
                view.last = old.last;
                view.incidents = old.incidents;
            }
            next.insert(t.name.clone(), view);
        }
        g.targets = next;
        g.monitor.config_loaded_ms = Some(now_ms);
    }

    /// Publishes one finished check of a configured target, adding its synthetic calls to the
    /// target's per-tool counters (kept across updates; the tool names are the judge's inert
    /// ones).
    pub fn update_from(
        &self,
        cfg: &TargetConfig,
        state: &TargetState,
        incidents: &Incidents,
        report: &Report,
        at_ms: i64,
        calls: &[crate::check::CallSample],
    ) {
        let mut view = TargetView::new(cfg);
        view.set_state(state, incidents);
        view.last = Some(LastCheck::from_report(report, at_ms, cfg.security));
        let mut g = self.write();
        if let Some(old) = g.targets.get_mut(&cfg.name) {
            view.tools = std::mem::take(&mut old.tools);
        }
        for c in calls {
            let key = if view.tools.contains_key(&c.tool) || view.tools.len() < MAX_TOOL_SERIES {
                c.tool.clone()
            } else {
                OTHER_TOOL.to_owned()
            };
            view.tools.entry(key).or_default().add(c.ok, c.ms);
        }
        g.targets.insert(cfg.name.clone(), view);
        g.monitor.checks += 1;
    }

    /// Shows a target's resumed state (after a restart, before its first new check).
    pub fn resume(&self, cfg: &TargetConfig, state: &TargetState, incidents: &Incidents) {
        let mut view = TargetView::new(cfg);
        view.set_state(state, incidents);
        view.last = state.last.as_ref().map(LastCheck::from_observation);
        self.write().targets.insert(cfg.name.clone(), view);
    }

    /// Replaces a target's view as given.
    pub fn update(&self, name: &str, view: TargetView) {
        self.write().targets.insert(name.to_owned(), view);
    }

    pub fn remove(&self, name: &str) {
        let mut g = self.write();
        g.targets.remove(name);
        g.accepts.remove(name);
        g.accepting.remove(name);
        g.baseline_errors.remove(name);
        g.baselines.remove(name);
    }

    /// One target's view.
    pub fn get(&self, name: &str) -> Option<TargetView> {
        let g = self.read();
        g.targets.get(name).map(|v| g.complete(v))
    }

    /// Asks that the contract of `name`'s next check that has one become its baseline (drift
    /// baseline), resolving its drift incident. `false` when no such target is configured.
    ///
    /// The request is stamped: only a check whose probe started after it takes it (a probe
    /// already in flight may have fetched the contract before the request: see
    /// [`Fleet::accept_mark`]). Kept in memory only: a restart forgets it.
    pub fn request_accept(&self, name: &str) -> bool {
        let mut g = self.write();
        if !g.targets.contains_key(name) {
            return false;
        }
        g.accept_stamp += 1;
        let stamp = g.accept_stamp;
        g.accepts.insert(name.to_owned(), stamp);
        true
    }

    /// The mark a check takes just before its probe starts: the accepts requested until now
    /// (stamped at most this) are for it, the later ones for a later check.
    pub fn accept_mark(&self) -> u64 {
        self.read().accept_stamp
    }

    /// Whether a contract of `name` is to be accepted by a check whose probe started at `mark`
    /// ([`Fleet::accept_mark`]) and which is stamped `at_ms`: an accept requested before it is
    /// taken (and stays pending until the store has written the baseline of a check at
    /// `at_ms` or later: [`Fleet::baseline_stored`]); one requested after it waits for the next
    /// check.
    pub fn take_accept(&self, name: &str, mark: u64, at_ms: i64) -> bool {
        let mut g = self.write();
        match g.accepts.get(name) {
            Some(stamp) if *stamp <= mark => {
                g.accepts.remove(name);
                g.accepting.insert(name.to_owned(), at_ms);
                true
            }
            _ => false,
        }
    }

    /// The store has written `name`'s baseline (the contract with this digest, taken by the
    /// check at `accepted_ms`): its view shows it, and the pending accept is done if that
    /// check is the one that took it, or a later one.
    pub fn baseline_stored(&self, name: &str, digest: &str, accepted_ms: i64) {
        let mut g = self.write();
        if !g.targets.contains_key(name) {
            return;
        }
        if g.accepting.get(name).is_some_and(|at| accepted_ms >= *at) {
            g.accepting.remove(name);
        }
        g.baselines.insert(
            name.to_owned(),
            Baseline {
                digest: digest.to_owned(),
                accepted_ms,
            },
        );
    }

    /// Records why `name`'s stored baseline could not be read (`None`: it could, or a new
    /// one was accepted), for the API to show.
    pub fn set_baseline_error(&self, name: &str, error: Option<String>) {
        let mut g = self.write();
        match error {
            Some(e) => g.baseline_errors.insert(name.to_owned(), e),
            None => g.baseline_errors.remove(name),
        };
    }

    /// Whether a target of this name is in the fleet.
    pub fn contains(&self, name: &str) -> bool {
        self.read().targets.contains_key(name)
    }

    /// Every open incident of the fleet, as `Remind` alerts stamped `now_ms` (what an
    /// Alertmanager sink re-sends), without copying the rest of the views.
    pub fn open_alerts(&self, now_ms: i64) -> Vec<crate::alert::Alert> {
        let g = self.read();
        g.targets
            .values()
            .flat_map(|v| {
                v.incidents.iter().map(move |inc| {
                    let remind = crate::alert::Action::Remind;
                    inc.alert(&v.name, &v.labels, remind, inc.summary.clone(), now_ms)
                })
            })
            .collect()
    }

    pub fn snapshot(&self) -> Snapshot {
        let g = self.read();
        Snapshot {
            targets: g.targets.values().map(|v| g.complete(v)).collect(),
            monitor: g.monitor.clone(),
        }
    }

    /// The monitor's own health only (no target views copied).
    pub fn monitor(&self) -> MonitorHealth {
        self.read().monitor.clone()
    }

    /// A store write succeeded.
    pub fn store_ok(&self, at_ms: i64) {
        let mut g = self.write();
        g.monitor.store_last_ok_ms = Some(at_ms);
        g.monitor.store_error = None;
    }

    /// One alert delivery attempt to `sink` (its [`crate::sink::SinkId`]) ended: `delivered`,
    /// `failed` (to be retried) or `dropped` (given up: rejected for good, or expired).
    pub fn alert_delivery(&self, sink: &str, outcome: &'static str) {
        let mut g = self.write();
        let n = g
            .monitor
            .deliveries
            .entry((sink.to_owned(), outcome))
            .or_insert(0);
        *n = n.saturating_add(1);
    }

    /// A store write failed.
    pub fn store_failed(&self, at_ms: i64, message: &str) {
        let mut g = self.write();
        g.monitor.store_write_errors += 1;
        g.monitor.store_error = Some(StoreError {
            at_ms,
            message: message.to_owned(),
        });
    }

    /// The daemon's scheduler started (`true`) or stopped (`false`, shutting down).
    pub fn set_scheduler_running(&self, running: bool) {
        self.write().monitor.scheduler_running = Some(running);
    }

    /// A `/probe` request starts a probe.
    pub fn probe_started(&self) {
        let mut g = self.write();
        g.monitor.probes += 1;
        g.monitor.probes_in_flight += 1;
    }

    /// A `/probe` probe ended.
    pub fn probe_finished(&self) {
        let mut g = self.write();
        g.monitor.probes_in_flight = g.monitor.probes_in_flight.saturating_sub(1);
    }
}

/// The fleet in numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub total: usize,
    pub healthy: usize,
    pub degraded: usize,
    pub down: usize,
    /// Not checked enough yet to have a confirmed status.
    pub unknown: usize,
    pub flapping: usize,
    /// Healthy targets as a percentage of all targets, one decimal; `None` for an empty fleet.
    pub percentage: Option<f64>,
}

/// One check of the monitor itself, as `/readyz` reports it: the shared health model's check
/// (`mcpulse-policy` renders the monitor's, the supervisor's and the gateway's health alike).
pub use mcpulse_policy::health::{Check as SelfCheck, CheckStatus};

/// Slack on top of two intervals and a timeout before a target's checks count as stale: the
/// first check is spread across the interval and a busy semaphore delays a probe.
const STALE_SLACK_MS: i64 = 30_000;

impl Snapshot {
    pub fn summary(&self) -> Summary {
        let count = |h: Health| self.targets.iter().filter(|t| t.status == h).count();
        let total = self.targets.len();
        let healthy = count(Health::Healthy);
        Summary {
            total,
            healthy,
            degraded: count(Health::Degraded),
            down: count(Health::Down),
            unknown: count(Health::Unknown),
            flapping: self.targets.iter().filter(|t| t.flapping).count(),
            percentage: (total > 0)
                .then(|| (healthy as f64 * 1000.0 / total as f64).round() / 10.0),
        }
    }

    /// The monitor's readiness checks at `now_ms`: the config is loaded, the store takes
    /// writes, and the scheduler keeps checks coming.
    ///
    /// The scheduler check needs no signal from the scheduler: a target whose last check (or,
    /// before the first, the config load) is older than two intervals plus its timeout and
    /// some slack is stale. Some stale targets is `warn` (probes are queueing behind the
    /// concurrency limit, or one task is stuck); all of them is `fail`.
    pub fn readiness(&self, now_ms: i64) -> Vec<SelfCheck> {
        let m = &self.monitor;
        let config = match m.config_loaded_ms {
            Some(at) => SelfCheck::new("config:loaded", "config", "component")
                .observed(self.targets.len(), "targets")
                .at(at),
            None => SelfCheck::new("config:loaded", "config", "component")
                .status(CheckStatus::Fail)
                .output("no configuration loaded yet"),
        };
        let store = match (&m.store_error, m.store_last_ok_ms) {
            (Some(e), _) => SelfCheck::new("store:writable", "store", "datastore")
                .status(CheckStatus::Fail)
                .observed(m.store_write_errors, "write errors")
                .at(e.at_ms)
                .output(format!("the last write failed: {}", e.message)),
            (None, None) => SelfCheck::new("store:writable", "store", "datastore"),
            (None, Some(at)) => SelfCheck::new("store:writable", "store", "datastore")
                .observed(
                    (now_ms - at).max(0) as f64 / 1000.0,
                    "s since the last write",
                )
                .at(at),
        };
        let scheduler = self.scheduler_check(now_ms);
        vec![config, store, scheduler, self.baselines_check(now_ms)]
    }

    /// `warn` (still ready: checks and alerts go on) while a target's stored baseline cannot
    /// be read or parsed: drift is not judged for it meanwhile.
    fn baselines_check(&self, now_ms: i64) -> SelfCheck {
        let mut check = SelfCheck::new("baselines:readable", "baselines", "datastore").at(now_ms);
        check.observed_unit = Some("unreadable baselines".into());
        let bad: Vec<(&str, &str)> = self
            .targets
            .iter()
            .filter_map(|t| Some((t.name.as_str(), t.baseline_error.as_deref()?)))
            .collect();
        check.observed_value = Some(bad.len().into());
        if let Some((name, error)) = bad.first() {
            check.status = CheckStatus::Warn;
            let more = match bad.len() - 1 {
                0 => String::new(),
                n => format!(" (and {n} more targets)"),
            };
            let output = format!("drift is not judged for {name}: {error}{more}");
            check.output = Some(mcpulse_wire::text::message(&output).into_owned());
        }
        check
    }

    fn scheduler_check(&self, now_ms: i64) -> SelfCheck {
        let mut check = SelfCheck::new("scheduler:checks", "scheduler", "component").at(now_ms);
        check.observed_unit = Some("stale targets".into());
        if self.monitor.scheduler_running == Some(false) {
            check.status = CheckStatus::Fail;
            check.output = Some("the scheduler is stopped".into());
            return check;
        }
        let Some(loaded) = self.monitor.config_loaded_ms else {
            check.status = CheckStatus::Fail;
            check.output = Some("the scheduler waits for a configuration".into());
            return check;
        };
        let stale: Vec<&str> = self
            .targets
            .iter()
            .filter(|t| {
                let since = t.last.as_ref().map_or(loaded, |l| l.at_ms.max(loaded));
                let allowed = t.interval_ms.saturating_mul(2) + t.timeout_ms + STALE_SLACK_MS;
                now_ms - since > allowed
            })
            .map(|t| t.name.as_str())
            .collect();
        check.observed_value = Some(stale.len().into());
        if !stale.is_empty() {
            let shown: Vec<&str> = stale.iter().take(5).copied().collect();
            let more = stale.len().saturating_sub(shown.len());
            let mut out = format!("no recent check for {}", shown.join(", "));
            if more > 0 {
                out.push_str(&format!(" and {more} more"));
            }
            check.status = if stale.len() == self.targets.len() {
                CheckStatus::Fail
            } else {
                CheckStatus::Warn
            };
            check.output = Some(out);
        }
        check
    }
}

/// How many findings of each severity a check produced (for the metrics).
pub fn severity_counts(findings: &[Finding]) -> [(Severity, usize); 3] {
    let n = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
    [
        (Severity::Critical, n(Severity::Critical)),
        (Severity::Warning, n(Severity::Warning)),
        (Severity::Info, n(Severity::Info)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Defaults, target_from};

    /// A check down only for its dependencies graded a server that answered: its grade is
    /// recorded; one whose server did not answer records none (not the A of no findings).
    #[test]
    fn a_grade_is_recorded_when_the_server_answered() {
        let graded = |name: &str| {
            let report = crate::runner::judged_fixture(name);
            (
                report.status,
                server_answered(&report),
                recorded_grade(&report, true).is_some(),
            )
        };
        use mcpulse_judge::Status::*;
        assert_eq!(graded("health-tool-down"), (Down, true, true));
        assert_eq!(graded("critical-call-failed"), (Down, true, true));
        assert_eq!(graded("connect-refused"), (Down, false, false));
        assert_eq!(graded("process-exited"), (Down, false, false));
    }

    fn cfg(name: &str, endpoint: Endpoint) -> TargetConfig {
        target_from(
            name.into(),
            endpoint,
            Vec::new(),
            &Defaults::default(),
            BTreeMap::new(),
            "test".into(),
        )
    }

    /// Review of 921158b: two overlapping accepts of one target. The older one's baseline,
    /// stored while the newer one is taken and not written yet, does not end the newer one:
    /// `mcpulse monitor accept` would report success before its baseline is stored.
    #[test]
    fn an_older_accepts_baseline_does_not_answer_a_newer_accept() {
        let fleet = Fleet::new();
        fleet.set_config(&[cfg("a", Endpoint::Url("https://example.com/mcp".into()))]);
        let pending = || fleet.get("a").is_some_and(|v| v.accept_pending);
        assert!(fleet.request_accept("a"));
        assert!(fleet.take_accept("a", fleet.accept_mark(), 1_000));
        assert!(fleet.request_accept("a"));
        assert!(fleet.take_accept("a", fleet.accept_mark(), 2_000));
        fleet.baseline_stored("a", "sha256:first", 1_000);
        assert!(pending(), "the newer accept's baseline is not stored yet");
        fleet.baseline_stored("a", "sha256:second", 2_000);
        assert!(!pending());
    }

    #[test]
    fn the_view_says_what_drifted() {
        let mut v = TargetView::new(&cfg("a", Endpoint::Url("https://example.com/mcp".into())));
        let mut last = crate::state::Observation::bare(Health::Healthy, 1, "ok");
        last.drift = Some("breaking".into());
        last.drift_changes = vec![crate::state::DriftChange {
            code: "item-removed".into(),
            path: "tools[fetch]".into(),
            class: "breaking".into(),
        }];
        last.drift_changes_more = 2;
        let state = TargetState {
            last: Some(last),
            ..TargetState::default()
        };
        v.set_state(&state, &Incidents::new());
        let json = serde_json::to_value(&v).unwrap_or_default();
        assert_eq!(json["drift"], "breaking");
        assert_eq!(
            json["drift_changes"],
            serde_json::json!([{"code": "item-removed", "path": "tools[fetch]", "class": "breaking"}])
        );
        assert_eq!(json["drift_changes_more"], 2);
        // No drift, nothing said.
        v.set_state(&TargetState::default(), &Incidents::new());
        let json = serde_json::to_value(&v).unwrap_or_default();
        assert!(json.get("drift_changes").is_none(), "{json}");
    }

    #[test]
    fn endpoints_are_redacted() {
        let v = TargetView::new(&cfg(
            "a",
            Endpoint::Url("https://user:pw@example.com/mcp?key=s3cret".into()),
        ));
        assert_eq!(
            v.endpoint,
            "https://<redacted>@example.com/mcp?key=<redacted>"
        );
        let v = TargetView::new(&cfg(
            "b",
            Endpoint::Command {
                argv: vec![
                    "server".into(),
                    "--api-key".into(),
                    "s3cret".into(),
                    "--token=abc".into(),
                    "--root".into(),
                    "/srv".into(),
                ],
                env: BTreeMap::from([("SECRET".into(), "x".into())]),
            },
        ));
        assert_eq!(
            v.endpoint,
            "server --api-key <redacted> --token=<redacted> --root /srv"
        );
        assert_eq!(v.kind, "stdio");
        let v = TargetView::new(&cfg(
            "c",
            Endpoint::Health("http://user:pw@127.0.0.1:9478/readyz?token=s3cret".into()),
        ));
        assert_eq!(
            v.endpoint,
            "http://<redacted>@127.0.0.1:9478/readyz?token=<redacted>"
        );
        assert_eq!(v.kind, "health");
    }

    #[test]
    fn summary_counts_and_percentage() {
        let f = Fleet::new();
        let targets: Vec<TargetConfig> = ["a", "b", "c"]
            .iter()
            .map(|n| cfg(n, Endpoint::Url(format!("http://{n}.example/mcp"))))
            .collect();
        f.set_config_at(&targets, 0);
        let mut s = TargetState {
            status: Health::Healthy,
            since_ms: 5,
            ..TargetState::default()
        };
        f.resume(&targets[0], &s, &Incidents::new());
        s.status = Health::Down;
        f.resume(&targets[1], &s, &Incidents::new());
        let sum = f.snapshot().summary();
        assert_eq!(
            (sum.total, sum.healthy, sum.down, sum.unknown),
            (3, 1, 1, 1)
        );
        assert_eq!(sum.percentage, Some(33.3));
        assert_eq!(Fleet::new().snapshot().summary().percentage, None);
    }

    #[test]
    fn readiness() {
        let f = Fleet::new();
        let checks = f.snapshot().readiness(0);
        assert_eq!(checks[0].status, CheckStatus::Fail, "no config yet");
        let t = cfg("a", Endpoint::Url("http://a.example/mcp".into()));
        f.set_config_at(std::slice::from_ref(&t), 1_000);
        let at = |now| {
            f.snapshot()
                .readiness(now)
                .iter()
                .map(|c| c.status)
                .collect::<Vec<_>>()
        };
        assert_eq!(at(2_000), vec![CheckStatus::Pass; 4]);
        // Two 60 s intervals, the 10 s timeout and the slack later, still nothing: stale.
        assert_eq!(at(1_000 + 160_001)[2], CheckStatus::Fail);
        f.store_failed(3_000, "disk I/O error");
        assert_eq!(at(4_000)[1], CheckStatus::Fail);
        f.store_ok(5_000);
        assert_eq!(at(6_000)[1], CheckStatus::Pass);
        f.set_scheduler_running(false);
        assert_eq!(at(6_000)[2], CheckStatus::Fail);
    }

    #[test]
    fn reload_keeps_state() {
        let f = Fleet::new();
        let a = cfg("a", Endpoint::Url("http://a.example/mcp".into()));
        f.set_config_at(std::slice::from_ref(&a), 0);
        let s = TargetState {
            status: Health::Down,
            since_ms: 7,
            ..TargetState::default()
        };
        f.resume(&a, &s, &Incidents::new());
        let mut a2 = a.clone();
        a2.labels.insert("team".into(), "search".into());
        let b = cfg("b", Endpoint::Url("http://b.example/mcp".into()));
        f.set_config_at(&[a2, b], 10);
        let snap = f.snapshot();
        assert_eq!(snap.targets.len(), 2);
        assert_eq!(snap.targets[0].status, Health::Down);
        assert_eq!(snap.targets[0].since_ms, Some(7));
        assert_eq!(snap.targets[0].labels["team"], "search");
        assert_eq!(snap.targets[1].status, Health::Unknown);
        f.set_config_at(&[], 20);
        assert!(f.snapshot().targets.is_empty());
    }
}
