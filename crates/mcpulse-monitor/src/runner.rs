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
use mcpulse_probe::{Plan, Target, TransportMode};
use mcpulse_wire::transcript::TransportKind;
use mcpulse_wire::version::{Era, EraMode};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
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

    /// One read of a health-only target's endpoint (`mcpulse_probe::probe_health`), with the
    /// plan's deadline and secrets.
    fn probe_health<'a>(
        &'a self,
        url: &'a str,
        plan: &'a Plan,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = mcpulse_probe::Transcript> + Send + 'a>>
    {
        Box::pin(mcpulse_probe::probe_health(url, plan))
    }
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
    /// Reads a target's stored baseline (its accepted contract and when it was accepted): how
    /// a target whose baseline could not be read at start or reload tries again at each check.
    /// `None` where no store is (tests): such a read is not retried.
    pub baselines: Option<BaselineReader>,
}

/// Reads a target's stored baseline: the contract's text and when it was accepted.
pub type BaselineReader = Arc<
    dyn Fn(&str) -> Result<Option<(String, Option<i64>)>, crate::store::StoreError> + Send + Sync,
>;

/// What reading a target's stored baseline gave.
#[derive(Debug)]
pub enum BaselineRead {
    /// None stored: the first check's contract becomes it.
    None,
    /// The baseline, and when it was accepted.
    Found(Accepted, Option<i64>),
    /// Stored, but its text does not parse: an error until a contract is accepted.
    Unparsable(String),
    /// The read failed (I/O, the database locked): tried again at the next check.
    Failed(String),
}

impl BaselineRead {
    pub fn of(read: Result<Option<(String, Option<i64>)>, crate::store::StoreError>) -> Self {
        match read {
            Ok(None) => BaselineRead::None,
            Ok(Some((text, at))) => match Accepted::from_lock(&text) {
                Ok(a) => BaselineRead::Found(a, at),
                Err(e) => {
                    BaselineRead::Unparsable(format!("the stored baseline cannot be parsed: {e}"))
                }
            },
            Err(e) => BaselineRead::Failed(format!(
                "reading the stored baseline failed (tried again before a later check, backing off up to 10 min): {e}"
            )),
        }
    }

    /// Applies the read to `memory` and the fleet's view of `name`. An error is logged when it
    /// first appears and when it changes, not at every read that finds it again.
    pub fn apply(self, name: &str, memory: &mut Memory, fleet: &crate::fleet::Fleet) {
        memory.baseline_unread = matches!(self, BaselineRead::Failed(_));
        let known = memory.baseline_error.clone();
        let new = |e: &String| known.as_ref() != Some(e);
        let error = match self {
            BaselineRead::None => None,
            BaselineRead::Found(a, at) => {
                fleet.baseline_stored(name, a.digest(), at.unwrap_or_default());
                memory.accepted = Some(a);
                None
            }
            BaselineRead::Unparsable(e) => {
                if new(&e) {
                    tracing::error!(target = %name, error = %e, "drift is not judged until a contract is accepted again: `mcpulse monitor accept {name}` makes the current one the baseline");
                }
                Some(e)
            }
            BaselineRead::Failed(e) => {
                if new(&e) {
                    tracing::error!(target = %name, error = %e, "drift is not judged until the stored baseline can be read");
                }
                Some(e)
            }
        };
        memory.baseline_error = error.clone();
        fleet.set_baseline_error(name, error);
    }
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
    /// The whole classified diff of that drift (bounded), for its drift event.
    pub drift_diff: (Vec<crate::state::DriftDiffLine>, usize),
    /// Why the stored baseline could not be read, when it could not: drift is then not judged
    /// (and the baseline not replaced by whatever the server serves now, which would accept a
    /// drift nobody saw) until a contract is accepted (`POST /api/v1/targets/{name}/accept`).
    pub baseline_error: Option<String>,
    /// The stored baseline could not be read (an I/O error, the database locked), as opposed
    /// to read and found unparsable: it is read again before a later check, backing off.
    pub baseline_unread: bool,
    /// When a failed baseline read is tried again (`None`: before the next check), and the
    /// wait after the last failure (doubling from [`BASELINE_RETRY_FIRST`] up to
    /// [`BASELINE_RETRY_MAX`]).
    pub baseline_retry: Option<(Instant, Duration)>,
    /// The record of the last check, when the target was stopped before the store writer took
    /// it (the writer's queue was full: the store is failing). A reload's restarted task hands
    /// it over first; a removed target's goes to the writer with its removal, written before
    /// it; at shutdown the daemon hands it to the writer.
    pub unsent: Option<Box<CheckRecord>>,
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

/// The wait before a failed baseline read is tried again, after its first failure at a check.
pub const BASELINE_RETRY_FIRST: Duration = Duration::from_secs(15);

/// The longest wait between two tries of a failed baseline read.
pub const BASELINE_RETRY_MAX: Duration = Duration::from_secs(600);

/// Reads `cfg`'s stored baseline again if its last read failed and its back-off is over.
async fn reread_baseline(cfg: &TargetConfig, memory: &mut Memory, shared: &Shared) {
    if !memory.baseline_unread {
        memory.baseline_retry = None;
        return;
    }
    let Some(read) = &shared.baselines else {
        return;
    };
    if memory
        .baseline_retry
        .is_some_and(|(at, _)| Instant::now() < at)
    {
        return;
    }
    let (read, name) = (read.clone(), cfg.name.clone());
    let got = tokio::task::spawn_blocking(move || read(&name)).await;
    let got = match got {
        Ok(r) => BaselineRead::of(r),
        Err(e) => BaselineRead::Failed(format!("reading the stored baseline panicked: {e}")),
    };
    if matches!(got, BaselineRead::Failed(_)) {
        let wait = memory
            .baseline_retry
            .map_or(BASELINE_RETRY_FIRST, |(_, w)| {
                (w * 2).min(BASELINE_RETRY_MAX)
            });
        memory.baseline_retry = Some((Instant::now() + wait, wait));
    } else {
        tracing::info!(target = %cfg.name, "the stored baseline was read again");
        memory.baseline_retry = None;
    }
    got.apply(&cfg.name, memory, &shared.fleet);
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
    // A record the target's previous run could not hand over before it was stopped.
    if let Some(record) = memory.unsent.take() {
        match hand_over(&shared.records, *record, &mut stop).await {
            HandOver::Sent => {}
            HandOver::Stopped(record) => {
                memory.unsent = Some(record);
                return memory;
            }
            HandOver::WriterGone => return memory,
        }
    }
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
        // A baseline that could not be read is read again (backing off), so that a passing
        // store failure does not turn drift detection off until an accept. Before the probe
        // slot and the memory budget are taken: the read may wait on the store's lock, held by
        // a writer retrying a failing write, and must not hold them meanwhile.
        Box::pin(reread_baseline(&cfg, &mut memory, &shared)).await;
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
        let record = Box::pin(check(
            &cfg,
            &mut memory,
            &shared,
            (&target, &plan, &mut era),
            permit,
        ))
        .await;
        match Box::pin(hand_over(&shared.records, record, &mut stop)).await {
            HandOver::Sent => {}
            HandOver::Stopped(record) => {
                memory.unsent = Some(record);
                return memory;
            }
            HandOver::WriterGone => return memory, // shutting down
        }
    }
}

/// How handing a record to the store writer ended.
enum HandOver {
    Sent,
    /// The target was stopped while the writer's queue was full: the record comes back.
    Stopped(Box<CheckRecord>),
    /// The writer is gone (shutting down).
    WriterGone,
}

/// Hands `record` to the store writer, waiting for room in its queue, but not past a stop: a
/// failing store fills the queue, and a target waiting there must still stop at once for a
/// reload or a shutdown (which would otherwise wait for the store to recover). A queue with
/// room takes the record even when a stop is pending.
async fn hand_over(
    records: &mpsc::Sender<CheckRecord>,
    record: CheckRecord,
    stop: &mut watch::Receiver<bool>,
) -> HandOver {
    tokio::select! {
        biased;
        permit = records.reserve() => match permit {
            Ok(permit) => {
                permit.send(record);
                HandOver::Sent
            }
            Err(_) => HandOver::WriterGone,
        },
        _ = stop.wait_for(|s| *s) => HandOver::Stopped(Box::new(record)),
    }
}

/// How long a target's era, once found, is used before it is detected afresh.
pub const ERA_RECHECK: Duration = Duration::from_secs(3600);

/// An HTTP target's era is also detected afresh on every this-many-th check (the detecting
/// check counted), whichever of this and [`ERA_RECHECK`] comes first: there detection costs one
/// request, so it can come back often, and a legacy server that gained the modern revision
/// shows it within this many checks.
pub const HTTP_ERA_RECHECK_CHECKS: u32 = 10;

/// The era of a target with `era = "auto"`, remembered between checks.
///
/// An auto probe asks `server/discover` before a legacy server's handshake. Over stdio the
/// monitor's auto checks also make the dual-era check, in a second process (see
/// `mcpulse-probe`): for an `npx` server checked every minute that would double the cost of
/// watching it; over HTTP a legacy server is sent one request more per check than it needs.
/// The spec allows caching the era per server ("re-probe when the cached assumption fails"),
/// so after a check that found the server up in an era, the next checks pin that era, until
/// a pinned check finds it down before its handshake completed (and sent no call) — that
/// check is made again at once in auto mode, and only that
/// result counts (an era change is never taken for an outage), and the era is detected afresh
/// — or the pin runs out: after [`ERA_RECHECK`] (stdio and HTTP), or
/// [`HTTP_ERA_RECHECK_CHECKS`] checks (HTTP), so that a server that gained an era shows it.
///
/// Over HTTP only the legacy era is pinned, with the HTTP+SSE transport when the server was
/// found on it (its pinned checks open the stream at once): a modern server's auto check
/// starts with its own handshake (`server/discover`) and sends nothing a pinned one would
/// not, except the dual-era check, which is worth its one request. `/probe` does not come
/// here: it is stateless, one auto probe per request (`crate::probe::once`).
///
/// A pinned check does not send what only detection sends, so the facts detection found
/// (`dual_era`, and the `legacy-only` or `dual-era` finding) are carried into the pinned
/// checks' reports, marked as remembered: the findings and their counts in the API and
/// `/metrics` do not flicker between detecting and pinned checks.
pub struct EraMemo {
    applies: bool,
    /// Over HTTP: pin the legacy era only, and count the pinned checks.
    http: bool,
    pinned: Option<Pin>,
}

/// An era pinned, until when, for how many more checks, and what its detection found.
struct Pin {
    plan: Plan,
    until: Instant,
    /// Pinned checks left (HTTP; `u32::MAX` over stdio).
    checks_left: u32,
    dual_era: Option<bool>,
    remembered: Vec<mcpulse_judge::Finding>,
}

/// The findings only an auto check makes.
const DETECTION_FINDINGS: [mcpulse_judge::Rule; 2] = [
    mcpulse_judge::Rule::LegacyOnly,
    mcpulse_judge::Rule::DualEra,
];

impl EraMemo {
    /// The memo for a target probed with `plan` (it remembers only in auto mode).
    pub fn new(target: &Target, plan: &Plan) -> EraMemo {
        EraMemo {
            applies: plan.era == EraMode::Auto,
            http: matches!(target, Target::Http { .. }),
            pinned: None,
        }
    }

    /// The pinned plan for the next check, if one is in force.
    fn pin(&self) -> Option<&Pin> {
        self.pinned
            .as_ref()
            .filter(|p| Instant::now() < p.until && p.checks_left > 0)
    }

    /// Learns from the check just made (`auto` is the target's own plan; `pinned` whether the
    /// check counted was made with the pinned plan).
    fn learn(&mut self, auto: &Plan, report: &mut Report, pinned: bool) {
        if !self.applies {
            return;
        }
        if pinned {
            if let Some(p) = &mut self.pinned {
                p.checks_left = p.checks_left.saturating_sub(1);
                if report.dual_era.is_none() {
                    report.dual_era = p.dual_era;
                }
                for f in &p.remembered {
                    if report.findings.iter().any(|g| g.code == f.code) {
                        continue;
                    }
                    let mut f = f.clone();
                    f.message
                        .push_str(" (remembered from the last era detection)");
                    report.findings.push(f);
                }
            }
            return;
        }
        // Over HTTP the legacy transport is remembered with the era: a legacy HTTP+SSE server's
        // pinned check opens its stream at once, without the POST that finds it has none.
        let sse = self.http && report.transport == Some(TransportKind::Sse.as_str());
        let found = (!era_failed(report))
            .then_some(report.era)
            .flatten()
            .map(|e| match e {
                Era::Modern => EraMode::Modern,
                Era::Legacy => EraMode::Legacy,
            })
            .filter(|e| !self.http || *e == EraMode::Legacy)
            .map(|era| {
                let transport = if sse {
                    TransportMode::Sse
                } else {
                    auto.transport
                };
                (era, transport)
            });
        let remembered = || {
            report
                .findings
                .iter()
                .filter(|f| DETECTION_FINDINGS.contains(&f.code))
                .cloned()
                .collect()
        };
        match (found, self.pin().map(|p| (p.plan.era, p.plan.transport))) {
            (None, _) => self.pinned = None,
            // Still valid and the same era (the retry of a pinned check that failed): keep its
            // limits, so detection comes back on time.
            (Some(found), Some(pinned)) if pinned == found => {
                if let Some(p) = &mut self.pinned {
                    p.dual_era = report.dual_era;
                    p.remembered = remembered();
                }
            }
            (Some((era, transport)), _) => {
                self.pinned = Some(Pin {
                    plan: Plan {
                        era,
                        transport,
                        ..auto.clone()
                    },
                    until: Instant::now() + ERA_RECHECK,
                    checks_left: if self.http {
                        HTTP_ERA_RECHECK_CHECKS - 1
                    } else {
                        u32::MAX
                    },
                    dual_era: report.dual_era,
                    remembered: remembered(),
                });
            }
        }
    }
}

/// Whether the check failed where the era matters: reaching the server or speaking MCP. A
/// server down only because of what is behind it (a critical call, its health tool or health
/// endpoint) keeps its era: probing it again in auto mode would send its calls twice.
fn era_failed(report: &Report) -> bool {
    use mcpulse_judge::Status::Down;
    report.layers.liveness == Some(Down) || report.layers.protocol == Some(Down)
}

/// Whether a check went too far to be made again: its handshake completed (the era was the
/// right one, whatever failed after it, as a server exiting after the handshake), or a
/// `tools/call` was sent (a second one in the same check could repeat what the first did, or
/// double the load it was sent to measure).
fn committed(transcript: &mcpulse_probe::Transcript, report: &Report) -> bool {
    report.protocol_version.is_some() || transcript.calls.iter().any(|c| c.exchange.is_some())
}

/// Probes `target` as one check of the monitor does, with the era `memo` remembers: the pinned
/// plan when one is in force (and `auto`, the target's own plan, again at once if that finds
/// the server down before it completed the handshake or was sent a call: see [`committed`]),
/// then learns from the check. Returns the transcript and the report that
/// count (the report with the facts of the last detection carried in: see [`EraMemo`]).
pub async fn probe_remembering(
    prober: &dyn Prober,
    target: &Target,
    auto: &Plan,
    memo: &mut EraMemo,
    policy: &mcpulse_judge::Policy,
) -> (mcpulse_probe::Transcript, Report) {
    let mut pinned = false;
    let mut outcome = None;
    if let Some(pin) = memo.pin() {
        let (transcript, report) =
            judge_blocking(prober.probe(target, &pin.plan).await, policy).await;
        if !era_failed(&report) || committed(&transcript, &report) {
            pinned = true;
            outcome = Some((transcript, report));
        }
    }
    let (transcript, mut report) = match outcome {
        Some(o) => o,
        None => judge_blocking(prober.probe(target, auto).await, policy).await,
    };
    memo.learn(auto, &mut report, pinned);
    (transcript, report)
}

/// Judges `transcript` on the blocking pool: judging is CPU work over what a server sent (its
/// `outputSchema` validated against its `structuredContent`, ...), and on a runtime worker one
/// slow judgement would stall every other check, the API and `/metrics`.
async fn judge_blocking(
    transcript: mcpulse_probe::Transcript,
    policy: &mcpulse_judge::Policy,
) -> (mcpulse_probe::Transcript, Report) {
    let transcript = Arc::new(transcript);
    let (shared, owned) = (Arc::clone(&transcript), policy.clone());
    let report = match tokio::task::spawn_blocking(move || judge(&shared, &owned)).await {
        Ok(report) => report,
        // Only a panic in the judge (a bug) or a runtime shutting down: judge here instead.
        Err(_) => judge(&transcript, policy),
    };
    let transcript = Arc::try_unwrap(transcript).unwrap_or_else(|t| (*t).clone());
    (transcript, report)
}

/// One check: probe, judge, fold into the target's memory, publish to the fleet.
async fn check(
    cfg: &TargetConfig,
    memory: &mut Memory,
    shared: &Shared,
    (target, plan, era): (&Target, &Plan, &mut EraMemo),
    permit: (
        tokio::sync::OwnedSemaphorePermit,
        tokio::sync::OwnedSemaphorePermit,
    ),
) -> CheckRecord {
    let policy = crate::probe::policy(cfg.latency_budget);
    // Taken before the probe: an accept requested while it runs is for the next check (this
    // one may have fetched the contract before the request).
    let accept_mark = shared.fleet.accept_mark();
    let (transcript, mut report) = match &cfg.endpoint {
        // One read, no era to remember; its report has no contract, so no drift either.
        crate::config::Endpoint::Health(url) => {
            let transcript = shared.prober.probe_health(url, plan).await;
            let report = judge(&transcript, &policy);
            (transcript, report)
        }
        _ => probe_remembering(&*shared.prober, target, plan, era, &policy).await,
    };
    report.hide(&plan.secrets);
    let at = (shared.clock)();
    let record = check_once(cfg, memory, &transcript, &report, (at, accept_mark), shared);
    // Held until the contract is taken in: that copies it (see `crate::memory`).
    drop(permit);
    shared.fleet.update_from(
        cfg,
        &memory.state,
        &memory.incidents,
        &report,
        at,
        &record.calls,
    );
    record
}

/// The summary of a check with nothing wrong (its findings, if any, are informational).
pub const HEALTHY_SUMMARY: &str = "healthy: the handshake and the lists succeeded";

/// A check's summary: its first finding above info, `code: message`. A finding may quote the
/// server (an error message, a stderr line), and the summary reaches every alert, incident
/// and API answer: so it is made inert and bounded here, once ([`mcpulse_wire::text::message`]),
/// and the alert sinks (the webhook's exact JSON included) carry it as it is.
pub fn summary_of(report: &Report) -> String {
    report
        .findings
        .iter()
        .find(|f| f.severity != mcpulse_judge::Severity::Info)
        .map(|f| mcpulse_wire::text::message(&format!("{}: {}", f.code, f.message)).into_owned())
        // A recovery says why too (its transition and alert would read `reason=""`).
        .unwrap_or_else(|| HEALTHY_SUMMARY.to_owned())
}

/// The pure part of a check: observation, state, alerts, the record to store. `at` is the
/// check's time, `accept_mark` the fleet's [accept mark](crate::fleet::Fleet::accept_mark)
/// when its probe started.
pub fn check_once(
    cfg: &TargetConfig,
    memory: &mut Memory,
    transcript: &mcpulse_probe::Transcript,
    report: &Report,
    (at, accept_mark): (i64, u64),
    shared: &Shared,
) -> CheckRecord {
    // Drift against the accepted contract, no faster than the server's cache TTL. A contract
    // accepted through the API becomes the baseline at the first check that has one and whose
    // probe started after the request.
    let mut new_contract = None;
    let accept = report.contract.is_some() && shared.fleet.take_accept(&cfg.name, accept_mark, at);
    if let Some(current) = &report.contract {
        match &memory.accepted {
            _ if accept => {
                let accepted = Accepted::new(current);
                tracing::info!(target = %cfg.name, digest = %accepted.digest(), "the current contract is accepted as the baseline");
                new_contract = Some(accepted.text().to_owned());
                memory.accepted = Some(accepted);
                memory.drift = None;
                memory.drift_changes = Default::default();
                memory.drift_diff = Default::default();
                memory.drift_checked_ms = at;
                memory.baseline_unread = false;
                if memory.baseline_error.take().is_some() {
                    shared.fleet.set_baseline_error(&cfg.name, None);
                }
            }
            // The stored baseline could not be read: nothing to judge against, and nothing
            // replaces it but an accept.
            _ if memory.baseline_error.is_some() => {}
            None => {
                let accepted = Accepted::new(current);
                new_contract = Some(accepted.text().to_owned());
                memory.accepted = Some(accepted);
                memory.drift = None;
                memory.drift_changes = Default::default();
                memory.drift_diff = Default::default();
            }
            Some(base) if at - memory.drift_checked_ms >= ttl_ms(transcript) => {
                if base.digest() == current.digest {
                    memory.drift = None; // the same contract: nothing to compare
                    memory.drift_changes = Default::default();
                    memory.drift_diff = Default::default();
                } else if let Some(base) = base.contract() {
                    // Against an outline (a contract too large to keep whole) only the class
                    // is known, not the changes.
                    let (class, changes, diff) = if base.is_outline() {
                        (
                            outline_drift(&base, current),
                            Default::default(),
                            Default::default(),
                        )
                    } else {
                        let d = drift::diff(&base, current);
                        (
                            d.class,
                            crate::state::DriftChange::first_of(&d),
                            crate::state::DriftDiffLine::all_of(&d),
                        )
                    };
                    memory.drift = class.map(|c| c.as_str().to_owned()).filter(|c| c != "info");
                    memory.drift_changes = changes;
                    memory.drift_diff = diff;
                }
                memory.drift_checked_ms = at;
            }
            Some(_) => {}
        }
    }
    let seen = components(report);
    let obs = Observation {
        at_ms: at,
        status: Health::from_status(report.status),
        auth: report.auth.as_str().to_owned(),
        era: report.era.map(|e| e.as_str().to_owned()),
        // What the server said, kept for every later check, alert and API answer: inert and
        // bounded here, once (a 4 MB version string must not ride along).
        protocol_version: report
            .protocol_version
            .as_deref()
            .map(|v| mcpulse_wire::text::field(v).into_owned()),
        grade: crate::fleet::recorded_grade(report, cfg.security),
        contract_digest: report.digests.as_ref().map(|d| d.contract.clone()),
        drift: memory.drift.clone(),
        drift_changes: memory.drift_changes.0.clone(),
        drift_changes_more: memory.drift_changes.1,
        summary: summary_of(report),
        by_components: explained_by_components(report, &seen),
        server_answered: crate::fleet::server_answered(report),
        // The evidence of the grade recorded: none where no grade is.
        security: crate::fleet::recorded_grade(report, cfg.security)
            .map(|_| crate::state::SecurityEvidence::of(&report.security))
            .unwrap_or_default(),
        components: seen,
    };
    let thresholds = Thresholds {
        failure: cfg.failure_threshold,
        success: cfg.success_threshold,
        flap_window_ms: i64::try_from(cfg.flap_window.as_millis()).unwrap_or(i64::MAX),
        flap_threshold: cfg.flap_threshold,
    };
    let had_drift = memory
        .state
        .last
        .as_ref()
        .and_then(|o| o.drift.clone())
        .is_some();
    let (next, mut events) = state::observe(&memory.state, &obs, thresholds, at);
    // The state machine knows the drift's class; the diff behind it was computed here.
    for e in &mut events {
        if let state::Event::Drift { changes, more, .. } = e {
            (*changes, *more) = memory.drift_diff.clone();
        }
    }
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
        components: &next.components,
        by_components: next.paged_by_components(thresholds),
        reason: &obs.summary,
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
        if let state::Event::Component {
            component,
            from,
            to,
            reason,
            ..
        } = e
        {
            tracing::info!(target = %cfg.name, component = %component, from = from.as_str(), to = to.as_str(), reason = %reason, "component transition");
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
        calls: report
            .calls
            .iter()
            .filter(|c| c.purpose == mcpulse_wire::call::CallPurpose::Synthetic && c.ms.is_some())
            .map(|c| crate::check::CallSample {
                tool: c.tool.clone(),
                ok: c.status == mcpulse_judge::Status::Healthy,
                ms: c.ms,
            })
            .collect(),
    }
}

/// The dependencies a check saw behind the server: each component of its health documents
/// (the worst, when a name is listed twice) and `tool NAME` for each synthetic call made. None
/// when the server did not answer the protocol (liveness or protocol layer down): a call that
/// could not be made then says nothing about what is behind the server, and its outage is the
/// target's own alert, not one per dependency.
fn components(report: &Report) -> BTreeMap<String, crate::state::Component> {
    use crate::state::Component;
    use mcpulse_judge::Status;
    let mut out: BTreeMap<String, Component> = BTreeMap::new();
    if report.layers.liveness == Some(Status::Down) || report.layers.protocol == Some(Status::Down)
    {
        return out;
    }
    let mut add = |name: String, status: Status, reason: String| {
        let status = Health::from_status(status);
        let reason = if status == Health::Healthy {
            String::new()
        } else {
            reason
        };
        match out.get(&name) {
            Some(c) if c.status >= status => {}
            _ => {
                out.insert(name, Component { status, reason });
            }
        }
    };
    for c in &report.components {
        let from = match &c.tool {
            Some(t) => format!("reported by the health tool {t}"),
            None => "reported by the health endpoint".to_owned(),
        };
        add(c.name.clone(), c.status, from);
    }
    for call in &report.calls {
        // A call refused for want of time or listing is not an observation of the tool.
        if call.purpose != mcpulse_wire::call::CallPurpose::Synthetic || call.ms.is_none() {
            continue;
        }
        let why = call
            .findings
            .iter()
            .map(|r| r.code())
            .collect::<Vec<_>>()
            .join(", ");
        add(format!("tool {}", call.tool), call.status, why);
    }
    out
}

/// Whether this check's warnings and critical findings are all about dependencies that it
/// tracks as components (the rule of docs/monitor.md, "One alert per outage"): the server
/// answered (liveness and protocol layers checked and healthy), at least one component is
/// unhealthy, and every finding above info is
///
/// - a component of a health document at `warn`/`fail` (`health-component-unhealthy`);
/// - the health endpoint's or health tool's own `health-*-down`/`-degraded`, when a component
///   of that document is at least as bad (a `fail` with every component passing, or without
///   components, says nothing about which dependency: the target pages);
/// - a finding of a synthetic call that was made (`tool NAME` is its component).
///
/// Anything else (an unreachable or invalid health endpoint, an unreadable health tool, a
/// call refused, a slow handshake, a list failing) is the target's own.
fn explained_by_components(
    report: &Report,
    seen: &BTreeMap<String, crate::state::Component>,
) -> bool {
    use mcpulse_judge::Rule;
    use mcpulse_judge::Status;
    use mcpulse_wire::call::CallPurpose;
    if report.layers.liveness != Some(Status::Healthy)
        || report.layers.protocol != Some(Status::Healthy)
    {
        return false;
    }
    let worst = |from_tool: bool| {
        report
            .components
            .iter()
            .filter(|c| c.tool.is_some() == from_tool)
            .map(|c| c.status)
            .max()
    };
    let at_least = |w: Option<Status>, s: Status| w.is_some_and(|w| w >= s);
    let made = |c: &mcpulse_judge::report::CallResult| {
        c.purpose == CallPurpose::Synthetic && c.ms.is_some()
    };
    if !seen.values().any(|c| c.status > Health::Healthy) {
        return false;
    }
    report
        .findings
        .iter()
        .filter(|f| f.severity > mcpulse_judge::Severity::Info)
        .all(|f| match f.code {
            Rule::HealthComponentUnhealthy => true,
            Rule::HealthEndpointDown => at_least(worst(false), Status::Down),
            Rule::HealthEndpointDegraded => at_least(worst(false), Status::Degraded),
            Rule::HealthToolDown => at_least(worst(true), Status::Down),
            Rule::HealthToolDegraded => at_least(worst(true), Status::Degraded),
            Rule::ToolCallFailed
            | Rule::CriticalCallFailed
            | Rule::ToolCallSlow
            | Rule::ToolOutputInvalid
            | Rule::ToolOutputSchemaInvalid
            | Rule::ToolExpectationFailed => report
                .calls
                .iter()
                .filter(|c| c.findings.contains(&f.code))
                .all(made),
            _ => false,
        })
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

/// The report of the judge's transcript fixture `name` (`mcpulse-judge/tests/transcripts`),
/// for tests of what the monitor makes of a kind of check.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn judged_fixture(name: &str) -> Report {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../mcpulse-judge/tests/transcripts")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(path).unwrap();
    let tr: mcpulse_probe::Transcript = serde_json::from_str(&text).unwrap();
    mcpulse_judge::judge(&tr, &mcpulse_judge::Policy::default())
}

/// However long a server says its tool list may be cached, drift is checked at least hourly:
/// a server must not be able to switch drift detection off with a huge `ttlMs`.
const MAX_DRIFT_TTL_MS: i64 = 3_600_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_quoting_the_server_is_inert_and_bounded() {
        let mut report = judged_fixture("server-error");
        let f = report
            .findings
            .iter_mut()
            .find(|f| f.severity != mcpulse_judge::Severity::Info)
            .expect("a finding above info");
        f.message = format!(
            "initialize was rejected: -32600 <!channel> \u{1b}[2J\u{202e}x\n2026-12-01 forged{}",
            "y".repeat(5_000_000)
        );
        let summary = summary_of(&report);
        assert!(
            !summary.chars().any(mcpulse_wire::text::is_escaped),
            "{summary:.300}"
        );
        assert!(summary.chars().count() <= mcpulse_wire::text::MESSAGE_CHARS);
        assert!(
            summary.contains("initialize was rejected: -32600"),
            "{summary:.300}"
        );
    }

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

    /// The rule of "one alert per outage" over the judge's fixtures: a check is explained by
    /// its components when every finding above info is one a component names, and the
    /// server answered. Any failure that names no dependency is the target's own.
    #[test]
    fn which_checks_their_components_explain() {
        let explained = |name: &str| {
            let report = judged_fixture(name);
            (
                report.status,
                explained_by_components(&report, &components(&report)),
            )
        };
        use mcpulse_judge::Status::*;
        let table = [
            // A component at warn/fail, the document's own status following it.
            ("health-component-unhealthy", Degraded, true),
            ("health-endpoint-degraded", Degraded, true),
            ("health-endpoint-down", Down, true),
            ("health-tool-down", Down, true),
            ("health-tool-degraded", Degraded, true),
            // A synthetic call that was made and failed: `tool NAME` is its component.
            ("tool-call-failed", Degraded, true),
            ("critical-call-failed", Down, true),
            ("tool-call-slow", Degraded, true),
            ("tool-expectation-failed", Degraded, true),
            // Nothing names a dependency: the target's own.
            ("health-endpoint-unreachable", Down, false),
            ("health-endpoint-invalid", Degraded, false),
            ("health-tool-invalid", Degraded, false),
            ("tool-call-refused", Degraded, false),
            ("connect-refused", Down, false),
            ("slow-handshake", Degraded, false),
        ];
        let got: Vec<_> = table
            .iter()
            .map(|(name, _, _)| {
                let (status, e) = explained(name);
                (*name, status, e)
            })
            .collect();
        assert_eq!(got, table);
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
        // A tool that says what it was given, in its description: the contract the monitor
        // keeps, shows and diffs.
        let echoed = contract(&[
            ("query", "Connected to postgres://app:s3cr3t-path@db/prod"),
            ("other", "nothing to hide"),
        ]);
        let original_digest = echoed.digest.clone();
        r.digests = Some(mcpulse_judge::report::Digests::of(&echoed));
        r.contract = Some(echoed);
        let mut secrets = mcpulse_wire::redact::Secrets::default();
        secrets.add("s3cr3t-path");
        r.hide(&secrets);
        let text = serde_json::to_string(&r).unwrap();
        assert!(!text.contains("s3cr3t-path"), "{text}");
        assert!(text.contains("ok/<redacted>"), "{text}");
        let hidden = r.contract.as_ref().unwrap();
        let kept = Accepted::new(hidden);
        assert!(!kept.text().contains("s3cr3t-path"), "{}", kept.text());
        assert!(kept.text().contains("app:<redacted>@db"), "{}", kept.text());
        // Its digests are of what it now says (so a baseline of it verifies), and the report's
        // digests follow.
        assert_ne!(hidden.digest, original_digest);
        assert!(hidden.resealed().1.is_empty());
        assert_eq!(r.digests.as_ref().unwrap().contract, hidden.digest);
        // The same contract hidden the same way has the same digest: no drift.
        let mut again = contract(&[
            ("query", "Connected to postgres://app:s3cr3t-path@db/prod"),
            ("other", "nothing to hide"),
        ]);
        again.hide(&secrets);
        assert_eq!(again.digest, hidden.digest);
    }
}
