//! One target's loop: wait for its tick, probe, judge, fold into its state, decide alerts,
//! publish to the fleet, and hand the record to the store writer.
//!
//! Each target runs on its own cadence. The first check is spread across the interval by a
//! hash of the name (no thundering herd at start-up or reload); a global semaphore bounds how
//! many probes run at once; a tick missed because the previous check or the semaphore ran long
//! is skipped, not piled up (`MissedTickBehavior::Skip`).

use crate::alert::{self, Incidents};
use crate::check::CheckRecord;
use crate::config::{Maintenance, TargetConfig};
use crate::probe::target_and_plan;
use crate::state::{self, Health, Observation, TargetState, Thresholds};
use mcpulse_judge::contract::Contract;
use mcpulse_judge::{Report, drift, judge};
use mcpulse_probe::{Plan, Target};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};

/// Where in its interval a target's checks fall: a stable hash of its name.
pub fn phase(name: &str, interval: Duration) -> Duration {
    let h = Sha256::digest(name.as_bytes());
    let n = u64::from_be_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]);
    let ms = interval.as_millis().max(1) as u64;
    Duration::from_millis(n % ms)
}

/// Runs one probe. The daemon uses [`NetworkProber`]; scheduler tests use a scripted one so
/// they can run under paused time.
pub trait Prober: Send + Sync {
    fn probe<'a>(
        &'a self,
        target: &'a Target,
        plan: &'a Plan,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = mcpulse_probe::Transcript> + Send + 'a>>;
}

/// The real thing: `mcpulse_probe::probe`.
pub struct NetworkProber;

impl Prober for NetworkProber {
    fn probe<'a>(
        &'a self,
        target: &'a Target,
        plan: &'a Plan,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = mcpulse_probe::Transcript> + Send + 'a>>
    {
        Box::pin(mcpulse_probe::probe(target, plan))
    }
}

/// What a target task needs from the daemon.
#[derive(Clone)]
pub struct Shared {
    pub prober: Arc<dyn Prober>,
    pub semaphore: Arc<Semaphore>,
    /// What the probes in flight may hold together (shared with `/probe`; see
    /// [`crate::memory`]).
    pub memory: crate::memory::MemoryBudget,
    pub records: mpsc::Sender<CheckRecord>,
    pub fleet: crate::fleet::Fleet,
    pub maintenance: Arc<std::sync::RwLock<Vec<Maintenance>>>,
    /// The wall clock that stamps checks (and so drives reminders, maintenance windows and
    /// flap windows): [`crate::clock::system`] in the daemon; in paused-time tests, one that advances with
    /// `tokio::time` (see [`crate::clock::Timebase`]).
    pub clock: crate::clock::Clock,
}

/// The mutable part of a target that survives a reload and a restart.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    pub state: TargetState,
    pub incidents: Incidents,
    /// The accepted contract (the drift baseline).
    pub accepted: Option<Accepted>,
    /// When drift was last computed, and what it found (drift is checked no faster than the
    /// server's `ttlMs` allows).
    pub drift_checked_ms: i64,
    pub drift: Option<String>,
    /// The first changes of that drift, and how many more there are.
    pub drift_changes: (Vec<crate::state::DriftChange>, usize),
}

/// The accepted contract (the drift baseline), kept as its compact JSON text and digest.
///
/// Parsed, a contract is a tree of JSON values: about 10 KB for a server with two small tools,
/// held for every target of the fleet. The text is a fraction of that, and it is parsed only
/// when a check's contract has another digest (equal digests are equal contracts: no drift).
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    digest: String,
    text: Box<str>,
}

/// The largest contract the monitor keeps whole (its compact JSON text), in memory and in the
/// store. A larger one (thousands of tools with large schemas: a server can send up to
/// 10,000 items per list) is kept as its [outline](Contract::outline), keys and digests, so
/// that one hostile check cannot write a hundred megabytes into the database; drift against an
/// outline is judged from the digests ([`outline_drift`]).
pub const MAX_KEPT_CONTRACT: usize = 4 << 20;

impl Accepted {
    /// The contract, or its outline when its text passes [`MAX_KEPT_CONTRACT`].
    pub fn new(contract: &Contract) -> Accepted {
        let text = serde_json::to_string(contract).unwrap_or_default();
        let text = if text.len() > MAX_KEPT_CONTRACT {
            serde_json::to_string(&contract.outline()).unwrap_or_default()
        } else {
            text
        };
        Accepted {
            digest: contract.digest.clone(),
            text: text.into_boxed_str(),
        }
    }

    /// The text the store keeps (`Contract::from_lock` reads it back).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// From a baseline file's text (`Contract::to_lock`), as the store keeps it.
    pub fn from_lock(text: &str) -> Result<Accepted, mcpulse_judge::contract::LockError> {
        Contract::from_lock(text).map(|c| Accepted::new(&c))
    }

    /// `sha256:…` of the contract.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The contract itself, parsed again.
    pub fn contract(&self) -> Option<Contract> {
        Contract::from_lock(&self.text).ok()
    }
}

/// Drift against an outline (a contract kept without its definitions): an item removed is
/// breaking, an item changed (another digest) or server facts changed is risky (how it changed
/// is not known), an item added is information.
pub fn outline_drift(base: &Contract, current: &Contract) -> Option<drift::Class> {
    use mcpulse_judge::contract::Kind;
    let mut class = (base.server.digest != current.server.digest).then_some(drift::Class::Risky);
    for kind in Kind::ALL {
        let now: std::collections::BTreeMap<&str, &str> = current
            .items(kind)
            .iter()
            .map(|i| (i.key.as_str(), i.digest.as_str()))
            .collect();
        let was: std::collections::BTreeSet<&str> =
            base.items(kind).iter().map(|i| i.key.as_str()).collect();
        for item in base.items(kind) {
            let found = match now.get(item.key.as_str()) {
                None => drift::Class::Breaking,
                Some(d) if *d != item.digest => drift::Class::Risky,
                Some(_) => continue,
            };
            class = class.max(Some(found));
        }
        if now.keys().any(|k| !was.contains(k)) {
            class = class.max(Some(drift::Class::Info));
        }
    }
    class
}

/// Runs a target until `stop` turns true. Returns its memory, for a reload to carry over.
pub async fn run(
    cfg: TargetConfig,
    mut memory: Memory,
    shared: Shared,
    mut stop: watch::Receiver<bool>,
) -> Memory {
    let (target, plan) = match target_and_plan(&cfg) {
        Ok(tp) => tp,
        Err(e) => {
            tracing::error!(target = %cfg.name, error = %e, "target cannot be probed");
            return memory;
        }
    };
    let start = Instant::now() + phase(&cfg.name, cfg.interval);
    let mut ticker = tokio::time::interval_at(start, cfg.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut era = EraMemo::new(&target, &plan);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => return memory,
        }
        if *stop.borrow() {
            return memory;
        }
        let slot = async {
            let count = shared.semaphore.clone().acquire_owned().await?;
            let bytes = shared.memory.acquire(plan.max_response_bytes).await?;
            Ok::<_, tokio::sync::AcquireError>((count, bytes))
        };
        let permit = tokio::select! {
            p = slot => match p { Ok(p) => p, Err(_) => return memory },
            _ = stop.changed() => return memory,
        };
        // The check (probe, transcript, report, record) lives in futures of its own, on the
        // heap while it runs: the task at rest stays small, and a fleet has one per target.
        let plan_now = era.plan(&plan);
        // A check with a remembered era that finds the server down is made again in auto mode
        // before it counts: an era change must not look like an outage.
        let fallback = (!std::ptr::eq(plan_now, &plan)).then_some(&plan);
        let record = Box::pin(check(
            &cfg,
            &mut memory,
            &shared,
            &target,
            (plan_now, fallback),
            permit,
        ))
        .await;
        era.learn(&plan, memory.state.last.as_ref());
        if Box::pin(shared.records.send(record)).await.is_err() {
            return memory; // the writer is gone: shutting down
        }
    }
}

/// How long a stdio target's era, once found, is used before it is detected afresh.
pub const ERA_RECHECK: Duration = Duration::from_secs(3600);

/// The era of a stdio target with `era = "auto"`, remembered between checks.
///
/// An auto probe over stdio asks `server/discover` before a legacy server's handshake, and the
/// monitor's auto checks also make the dual-era check, in a second process (see
/// `mcpulse-probe`): for an `npx` server checked every minute that would double the cost of
/// watching it. The spec allows
/// caching the era per server ("re-probe when the cached assumption fails"), so after a check
/// that found the server up in an era, the next checks pin that era (one process), until a
/// pinned check finds it down — that check is made again at once in auto mode, and only that
/// result counts (an era change is never taken for an outage), and the era is detected afresh
/// — or [`ERA_RECHECK`] has passed (so a server that gained an era shows it within the hour).
/// HTTP targets always detect: there it costs a request, not a process.
struct EraMemo {
    applies: bool,
    pinned: Option<(Plan, Instant)>,
}

impl EraMemo {
    fn new(target: &Target, plan: &Plan) -> EraMemo {
        EraMemo {
            applies: matches!(target, Target::Stdio { .. })
                && plan.era == mcpulse_wire::version::EraMode::Auto,
            pinned: None,
        }
    }

    /// The plan for the next check.
    fn plan<'a>(&'a self, auto: &'a Plan) -> &'a Plan {
        match &self.pinned {
            Some((plan, until)) if Instant::now() < *until => plan,
            _ => auto,
        }
    }

    /// Learns from the check just made (`auto` is the target's own plan).
    fn learn(&mut self, auto: &Plan, last: Option<&Observation>) {
        if !self.applies {
            return;
        }
        let found = last
            .filter(|o| o.status != Health::Down)
            .and_then(|o| o.era.as_deref())
            .and_then(|e| match e {
                "modern" => Some(mcpulse_wire::version::EraMode::Modern),
                "legacy" => Some(mcpulse_wire::version::EraMode::Legacy),
                _ => None,
            });
        match (found, &self.pinned) {
            (None, _) => self.pinned = None,
            // Still valid and the same era: keep its deadline, so detection comes back hourly.
            (Some(era), Some((plan, until))) if plan.era == era && Instant::now() < *until => {}
            (Some(era), _) => {
                let plan = Plan {
                    era,
                    ..auto.clone()
                };
                self.pinned = Some((plan, Instant::now() + ERA_RECHECK));
            }
        }
    }
}

/// One check: probe, judge, fold into the target's memory, publish to the fleet.
async fn check(
    cfg: &TargetConfig,
    memory: &mut Memory,
    shared: &Shared,
    target: &Target,
    (plan, fallback): (&Plan, Option<&Plan>),
    permit: (
        tokio::sync::OwnedSemaphorePermit,
        tokio::sync::OwnedSemaphorePermit,
    ),
) -> CheckRecord {
    let policy = crate::probe::policy(cfg.latency_budget);
    let mut transcript = shared.prober.probe(target, plan).await;
    let mut report = judge(&transcript, &policy);
    if report.status == mcpulse_judge::Status::Down
        && let Some(auto) = fallback
    {
        transcript = shared.prober.probe(target, auto).await;
        report = judge(&transcript, &policy);
    }
    report.hide(&plan.secrets);
    let at = (shared.clock)();
    let record = check_once(cfg, memory, &transcript, &report, at, shared);
    // Held until the contract is taken in: that copies it (see `crate::memory`).
    drop(permit);
    shared
        .fleet
        .update_from(cfg, &memory.state, &memory.incidents, &report, at);
    record
}

/// The summary of a check with nothing wrong (its findings, if any, are informational).
pub const HEALTHY_SUMMARY: &str = "healthy: the handshake and the lists succeeded";

/// The pure part of a check: observation, state, alerts, the record to store.
pub fn check_once(
    cfg: &TargetConfig,
    memory: &mut Memory,
    transcript: &mcpulse_probe::Transcript,
    report: &Report,
    at: i64,
    shared: &Shared,
) -> CheckRecord {
    // Drift against the accepted contract, no faster than the server's cache TTL.
    let mut new_contract = None;
    if let Some(current) = &report.contract {
        match &memory.accepted {
            None => {
                let accepted = Accepted::new(current);
                new_contract = Some(accepted.text().to_owned());
                memory.accepted = Some(accepted);
                memory.drift = None;
                memory.drift_changes = Default::default();
            }
            Some(base) if at - memory.drift_checked_ms >= ttl_ms(transcript) => {
                if base.digest() == current.digest {
                    memory.drift = None; // the same contract: nothing to compare
                    memory.drift_changes = Default::default();
                } else if let Some(base) = base.contract() {
                    // Against an outline (a contract too large to keep whole) only the class
                    // is known, not the changes.
                    let (class, changes) = if base.is_outline() {
                        (outline_drift(&base, current), Default::default())
                    } else {
                        let d = drift::diff(&base, current);
                        (d.class, crate::state::DriftChange::first_of(&d))
                    };
                    memory.drift = class.map(|c| c.as_str().to_owned()).filter(|c| c != "info");
                    memory.drift_changes = changes;
                }
                memory.drift_checked_ms = at;
            }
            Some(_) => {}
        }
    }
    let obs = Observation {
        at_ms: at,
        status: Health::from_status(report.status),
        auth: report.auth.as_str().to_owned(),
        era: report.era.map(|e| e.as_str().to_owned()),
        protocol_version: report.protocol_version.clone(),
        grade: crate::fleet::recorded_grade(report, cfg.security),
        contract_digest: report.digests.as_ref().map(|d| d.contract.clone()),
        drift: memory.drift.clone(),
        drift_changes: memory.drift_changes.0.clone(),
        drift_changes_more: memory.drift_changes.1,
        summary: report
            .findings
            .iter()
            .find(|f| f.severity != mcpulse_judge::Severity::Info)
            .map(|f| format!("{}: {}", f.code, f.message))
            // A recovery says why too (its transition and alert would read `reason=""`).
            .unwrap_or_else(|| HEALTHY_SUMMARY.to_owned()),
    };
    let thresholds = Thresholds {
        failure: cfg.failure_threshold,
        success: cfg.success_threshold,
        flap_window_ms: cfg.flap_window.as_millis() as i64,
        flap_threshold: cfg.flap_threshold,
    };
    let had_drift = memory
        .state
        .last
        .as_ref()
        .and_then(|o| o.drift.clone())
        .is_some();
    let (next, events) = state::observe(&memory.state, &obs, thresholds, at);
    let silenced = shared
        .maintenance
        .read()
        .map(|m| {
            m.iter().any(|w| {
                w.start_ms <= at
                    && at < w.end_ms
                    && (w.targets.is_empty() || w.targets.contains(&cfg.name))
            })
        })
        .unwrap_or(false);
    let drift_changes =
        crate::state::DriftChange::describe(&memory.drift_changes.0, memory.drift_changes.1);
    let cx = alert::Context {
        target: &cfg.name,
        labels: &cfg.labels,
        now_ms: at,
        silenced,
        flapping: next.flapping,
        status: next.status,
        drift: memory.drift.as_deref(),
        drift_changes: &drift_changes,
        reminder_ms: cfg.reminder.map(|r| r.as_millis() as i64),
    };
    let mut alerts = alert::alerts(&events, &mut memory.incidents, &cx);
    if had_drift
        && memory.drift.is_none()
        && let Some(a) = alert::resolve_drift(&mut memory.incidents, &cx)
    {
        alerts.push(a);
    }
    for e in &events {
        if let state::Event::Transition {
            from,
            to,
            quiet: false,
            reason,
            ..
        } = e
        {
            tracing::info!(target = %cfg.name, from = from.as_str(), to = to.as_str(), reason = %reason, "transition");
        }
    }
    for a in &alerts {
        tracing::info!(target = %a.target, kind = a.kind.as_str(), action = ?a.action, dedup_key = %a.dedup_key, summary = %a.summary, silenced, "alert");
    }
    tracing::debug!(target = %cfg.name, status = obs.status.as_str(), ms = report.timings_ms.total, "checked");
    memory.state = next;
    CheckRecord {
        target: cfg.name.clone(),
        at_ms: at,
        status: obs.status,
        duration_ms: report.timings_ms.total,
        timings: serde_json::to_value(&report.timings_ms).unwrap_or_default(),
        findings: serde_json::to_value(&report.findings).unwrap_or_default(),
        grade: obs.grade.clone(),
        observation: obs,
        state: memory.state.clone(),
        incidents: memory.incidents.clone(),
        events,
        alerts,
        contract: new_contract,
    }
}

/// The cache TTL the server gave for its tool list (ms; 0 when none).
fn ttl_ms(tr: &mcpulse_probe::Transcript) -> i64 {
    use mcpulse_wire::jsonrpc::Message;
    use mcpulse_wire::transcript::Step;
    tr.exchanges
        .iter()
        .filter(|e| e.step == Step::ToolsList)
        .filter_map(|e| match e.reply().map(|d| d.message) {
            Some(Message::Result { result, .. }) => {
                result.get("ttlMs").and_then(serde_json::Value::as_i64)
            }
            _ => None,
        })
        .max()
        .unwrap_or(0)
        .clamp(0, MAX_DRIFT_TTL_MS)
}

/// However long a server says its tool list may be cached, drift is checked at least hourly:
/// a server must not be able to switch drift detection off with a huge `ttlMs`.
const MAX_DRIFT_TTL_MS: i64 = 3_600_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_spread_and_are_stable() {
        let i = Duration::from_secs(60);
        assert_eq!(phase("search", i), phase("search", i));
        assert!(phase("search", i) < i);
        let distinct: std::collections::BTreeSet<_> = (0..100)
            .map(|n| phase(&format!("t{n}"), i).as_secs())
            .collect();
        assert!(distinct.len() > 40, "{}", distinct.len());
    }

    fn contract(tools: &[(&str, &str)]) -> Contract {
        mcpulse_judge::contract::build(mcpulse_judge::contract::Parts {
            tools: tools
                .iter()
                .map(|(name, description)| {
                    serde_json::json!({"name": name, "description": description})
                })
                .collect(),
            ..Default::default()
        })
    }

    /// A contract past the size kept whole is kept (in memory and in the store) as its outline,
    /// and drift against it is judged from digests.
    #[test]
    fn a_contract_too_large_to_keep_is_kept_as_its_outline() {
        let long = "d".repeat(MAX_KEPT_CONTRACT / 2);
        let big = contract(&[("a", &long), ("b", &long), ("c", "x")]);
        let kept = Accepted::new(&big);
        assert!(kept.text().len() < 4096, "{}", kept.text().len());
        assert_eq!(kept.digest(), big.digest);
        let base = kept.contract().unwrap();
        assert!(base.is_outline());
        assert_eq!(base.digest, big.digest);
        // Same items: no drift; one changed: risky; one removed: breaking; one added: info.
        assert_eq!(outline_drift(&base, &big), None);
        let changed = contract(&[("a", &long), ("b", &long), ("c", "y")]);
        assert_eq!(outline_drift(&base, &changed), Some(drift::Class::Risky));
        let removed = contract(&[("a", &long), ("b", &long)]);
        assert_eq!(outline_drift(&base, &removed), Some(drift::Class::Breaking));
        let added = contract(&[("a", &long), ("b", &long), ("c", "x"), ("d", "")]);
        assert_eq!(outline_drift(&base, &added), Some(drift::Class::Info));
        // A small contract is kept whole.
        let small = contract(&[("c", "x")]);
        assert!(!Accepted::new(&small).contract().unwrap().is_outline());
        assert_eq!(Accepted::new(&small).contract().unwrap(), small);
    }

    #[test]
    fn a_report_quoting_the_server_hides_the_targets_secrets() {
        use mcpulse_judge::security::{Level, SecurityFinding};
        use mcpulse_wire::transcript::{PlanRecord, TargetKind, TargetRecord};
        let tr = mcpulse_judge::Transcript::new(
            TargetRecord {
                display: "http://h/ok/<redacted>".into(),
                kind: TargetKind::Http,
                host: Some("h".into()),
            },
            PlanRecord {
                era: mcpulse_wire::version::EraMode::Auto,
                security: true,
                credentials: false,
                timeout_ms: 1000,
                max_response_bytes: 1024,
            },
            0,
        );
        let mut r = judge(&tr, &mcpulse_judge::Policy::default());
        let quoted = "the metadata names the resource \"http://h/ok/s3cr3t-path\"";
        r.findings.push(mcpulse_judge::Finding {
            code: mcpulse_judge::Rule::Timeout,
            severity: mcpulse_judge::Severity::Warning,
            message: quoted.into(),
        });
        r.security.findings.push(SecurityFinding {
            code: mcpulse_judge::security::SecRule::ResourceMetadataInvalid,
            severity: Level::Medium,
            message: quoted.into(),
            evidence: vec![quoted.into()],
        });
        let mut secrets = mcpulse_wire::redact::Secrets::default();
        secrets.add("s3cr3t-path");
        r.hide(&secrets);
        let text = serde_json::to_string(&r).unwrap();
        assert!(!text.contains("s3cr3t-path"), "{text}");
        assert!(text.contains("ok/<redacted>"), "{text}");
    }
}
