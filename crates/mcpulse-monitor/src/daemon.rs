//! The daemon: wires config, store, target tasks, the store writer, the alert outbox and the
//! HTTP API together, and handles the process signals.
//!
//! - SIGINT / SIGTERM: stop every target, flush the writer, stop the API, exit.
//! - SIGHUP: reload the config. An invalid file is reported and the running config kept; a
//!   valid one restarts only the targets whose settings changed (their state carries over),
//!   starts new ones and stops removed ones. A removed target's open incidents are resolved
//!   through the outbox (same dedup keys, a summary saying it was removed) and the removal is
//!   recorded in its history. Sinks, modules and maintenance windows are swapped in place;
//!   pending alerts of a sink that is gone (by identity, see [`crate::sink::SinkId`]) are set
//!   aside, logged, never sent elsewhere. A new `server.listen` needs a restart (logged).
//!
//! The store is synchronous: every call to it runs under `spawn_blocking` (the API's history
//! and stats reads too, in `api`), except the few reads at start-up and reload.

use crate::alert::Alert;
use crate::check::{CheckRecord, Removal};
use crate::clock::Clock;
use crate::config::{self, AlertConfig, Config, TargetConfig};
use crate::fleet::Fleet;
use crate::runner::{self, Memory, Shared};
use crate::sink::{SinkId, sink_ids};
use crate::state::Event;
use crate::store::adapters::{StoreHistory, StoreOutbox};
use crate::store::{PruneFrom, Store, StoreError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

/// Why the monitor could not run (not a server failing: that is data).
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    #[error("{0}")]
    Config(#[from] config::ConfigError),
    #[error("{source}")]
    Store { path: String, source: StoreError },
    #[error("cannot listen on {addr}: {source} (is another monitor running? set [server] listen)")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

/// How many probes may run at once across the fleet.
pub const DEFAULT_CONCURRENCY: usize = 64;

struct Running {
    cfg: TargetConfig,
    stop: watch::Sender<bool>,
    task: JoinHandle<Memory>,
}

/// Options beyond the config file.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Extra MCP client config files to import (`--import`).
    pub imports: Vec<PathBuf>,
    /// Overrides `[server] listen` (tests bind port 0).
    pub listen: Option<std::net::SocketAddr>,
    pub concurrency: Option<usize>,
}

/// Loads the config (and imports) for the daemon.
pub fn load(path: &Path, opts: &Options) -> Result<Config, MonitorError> {
    let env = |k: &str| std::env::var(k).ok();
    let mut cfg = config::load_listening(path, &env, opts.listen)?;
    let mut names = cfg.targets.iter().map(|t| t.name.clone()).collect();
    let from_file = cfg.targets.len();
    for imp in &opts.imports {
        crate::config::import::Fleet {
            targets: &mut cfg.targets,
            names: &mut names,
            warnings: &mut cfg.warnings,
        }
        .import(imp, &cfg.defaults, &env)
        .map_err(|e| MonitorError::Other(e.to_string()))?;
    }
    for t in &cfg.targets {
        crate::probe::target_and_plan(t).map_err(|e| {
            MonitorError::Other(format!("{}: target {:?}: {e}", path.display(), t.name))
        })?;
    }
    // The servers `--import` added have the file's `[defaults]`: their flap windows too.
    let imported = config::flap_window_warnings(cfg.targets.get(from_file..).unwrap_or_default());
    cfg.warnings.extend(imported);
    for w in &cfg.warnings {
        tracing::warn!(reason = %w, "config warning");
    }
    Ok(cfg)
}

/// Runs the monitor until `shutdown` resolves (or a SIGINT/SIGTERM arrives).
pub async fn run(
    config_path: PathBuf,
    opts: Options,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), MonitorError> {
    // Signals first: a SIGHUP or SIGTERM during start-up must be handled, not fatal.
    let mut hup = signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut term = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = signal(tokio::signal::unix::SignalKind::interrupt())?;
    let cfg = load(&config_path, &opts)?;
    // The one wall clock: it stamps checks, store health, prunes, re-sends and the API.
    let clock = crate::clock::system();
    let store_error = |source| MonitorError::Store {
        path: cfg.storage.path.display().to_string(),
        source,
    };
    let mut store = Store::open(&cfg.storage.path).map_err(store_error)?;
    // Outbox rows of an older schema name their sink by index: they are for the sink at that
    // index of the config this monitor starts with. Pending rows of sinks that are not
    // configured (any more) are set aside, never sent to another sink.
    let ids = sink_ids(&cfg.alerts);
    let adopted = store.adopt_legacy_sinks(&ids).map_err(store_error)?;
    if adopted > 0 {
        tracing::info!(
            rows = adopted,
            "outbox rows of the old schema were given the identity of the sink at their index"
        );
    }
    let abandoned = store
        .abandon_missing_sinks(&ids, clock())
        .map_err(store_error)?;
    log_abandoned(&abandoned, &[]);
    let mut resumed = store.load_states().map_err(store_error)?;
    let store = Arc::new(Mutex::new(store));
    let listener = tokio::net::TcpListener::bind(cfg.server.listen)
        .await
        .map_err(|source| MonitorError::Listen {
            addr: cfg.server.listen.to_string(),
            source,
        })?;
    let listen_addr = listener
        .local_addr()
        .map_err(|e| MonitorError::Other(e.to_string()))?;
    tracing::info!(listen = %listen_addr, targets = cfg.targets.len(), db = %cfg.storage.path.display(), "mcpulse monitor starting");
    if cfg.server.token.is_none() && !listen_addr.ip().to_canonical().is_loopback() {
        // Allowed by `allow_unauthenticated = true` (config validation refuses it otherwise).
        tracing::warn!(listen = %listen_addr, "the API is open to anyone who can reach it: no token, beyond loopback (allow_unauthenticated = true)");
    }

    // The fleet view is complete (resumed states included) before the API serves it.
    let fleet = Fleet::new();
    fleet.set_config_at(&cfg.targets, clock());
    let mut memories: BTreeMap<String, Memory> = BTreeMap::new();
    for t in &cfg.targets {
        let memory = resume(&store, &fleet, &mut resumed, &t.name);
        fleet.resume(t, &memory.state, &memory.incidents);
        memories.insert(t.name.clone(), memory);
    }
    let sinks: Arc<RwLock<Vec<AlertConfig>>> = Arc::new(RwLock::new(cfg.alerts.clone()));
    let maintenance = Arc::new(RwLock::new(cfg.maintenance.clone()));
    let (records_tx, records_rx) = mpsc::channel::<CheckRecord>(4096);
    let (removals_tx, removals_rx) = mpsc::unbounded_channel::<RemovalJob>();
    let wake_outbox = Arc::new(Notify::new());
    let (stop_all_tx, stop_all) = watch::channel(false);
    let (closing_tx, closing) = watch::channel(false);

    let writer = tokio::spawn(write_loop(
        store.clone(),
        records_rx,
        removals_rx,
        sinks.clone(),
        fleet.clone(),
        wake_outbox.clone(),
        clock.clone(),
        closing,
    ));
    let outbox = tokio::spawn(crate::sink::run_outbox(
        StoreOutbox::new(store.clone()),
        sinks.clone(),
        wake_outbox.clone(),
        stop_all.clone(),
        fleet.clone(),
    ));
    let retention = tokio::spawn(retention_loop(
        store.clone(),
        cfg.storage.retention,
        stop_all.clone(),
        clock.clone(),
    ));
    let resend = tokio::spawn(resend_loop(
        sinks.clone(),
        fleet.clone(),
        stop_all.clone(),
        clock.clone(),
    ));
    // One memory budget for scheduled checks and `/probe` requests together.
    let memory = crate::memory::MemoryBudget::default();
    let api_state = crate::api::ApiState::new(
        fleet.clone(),
        Arc::new(StoreHistory::new(store.clone())),
        Arc::new(RwLock::new(cfg.clone())),
    )
    .with_memory_budget(memory.clone())
    .with_clock(clock.clone());
    let api_config = api_state.config_handle();
    let api = tokio::spawn(crate::api::serve(
        listener,
        crate::api::router(api_state),
        wait_true(stop_all.clone()),
    ));

    let shared = Shared {
        prober: Arc::new(runner::NetworkProber),
        semaphore: Arc::new(Semaphore::new(
            opts.concurrency.unwrap_or(DEFAULT_CONCURRENCY),
        )),
        memory,
        records: records_tx,
        fleet: fleet.clone(),
        maintenance: maintenance.clone(),
        clock: clock.clone(),
        baselines: Some({
            let store = store.clone();
            Arc::new(move |name: &str| {
                store
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .accepted_contract_at(name)
            })
        }),
    };
    let mut running: BTreeMap<String, Running> = BTreeMap::new();
    for t in &cfg.targets {
        let memory = memories.remove(&t.name).unwrap_or_default();
        start(&mut running, t.clone(), memory, &shared);
    }
    fleet.set_scheduler_running(true);

    let mut current = cfg;
    let mut pending_removals = PendingRemovals::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = term.recv() => { tracing::info!("SIGTERM: shutting down"); break }
            _ = int.recv() => { tracing::info!("SIGINT: shutting down"); break }
            _ = hup.recv() => {
                let (halt_tx, mut halt) = watch::channel(false);
                let reloading = async {
                    match load(&config_path, &opts) {
                        Err(e) => tracing::error!(error = %e, "SIGHUP: the new config is invalid; keeping the running one"),
                        Ok(new) => {
                            // The fleet first: departing targets leave it and changed labels
                            // apply, so from now on no Alertmanager re-send (which lists the
                            // fleet's open incidents) posts a departing target's incidents or a
                            // changed target's old label set.
                            fleet.set_config_at(&new.targets, clock());
                            // Then the sinks: the resolves of removed targets go to the new ones.
                            swap_sinks(&store, &sinks, &current.alerts, &new.alerts, (shared.clock)()).await;
                            reload(&mut running, &current, &new, &shared, &store, &removals_tx, &mut pending_removals, &mut halt).await;
                            *maintenance.write().unwrap_or_else(|p| p.into_inner()) = new.maintenance.clone();
                            if let Ok(mut c) = api_config.write() { *c = new.clone(); }
                            if new.server.listen != current.server.listen && opts.listen.is_none() {
                                tracing::warn!(listen = %new.server.listen, "server.listen changed: restart the monitor to apply it");
                            }
                            tracing::info!(targets = new.targets.len(), "SIGHUP: config reloaded");
                            current = new;
                        }
                    }
                };
                let stop = async {
                    tokio::select! {
                        _ = &mut shutdown => tracing::warn!("shutting down during a reload"),
                        _ = term.recv() => tracing::warn!("SIGTERM during a reload: shutting down"),
                        _ = int.recv() => tracing::warn!("SIGINT during a reload: shutting down"),
                    }
                };
                if finish_reload(reloading, &halt_tx, stop).await {
                    break;
                }
            }
        }
    }
    // Shutdown: targets first (no new records), then the writer drains, then the rest. A
    // write that is failing is not retried from now on (the writer would otherwise hold the
    // shutdown for as long as the store fails).
    let _ = closing_tx.send(true);
    fleet.set_scheduler_running(false);
    // Every target is told first, then all are awaited: one slow probe does not hold the
    // others' shutdown back.
    let stopping: Vec<Running> = std::mem::take(&mut running).into_values().collect();
    for r in &stopping {
        let _ = r.stop.send(true);
    }
    collect_stopped(stopping, &shared.records).await;
    drop(shared);
    drop(removals_tx);
    let _ = writer.await;
    let _ = stop_all_tx.send(true);
    let _ = outbox.await;
    let _ = retention.await;
    let _ = resend.await;
    let _ = api.await;
    tracing::info!("mcpulse monitor stopped");
    Ok(())
}

/// Awaits the stopped targets (the shutdown). A result stopped while it waited for room is
/// handed to the writer once more: the queue may only be draining (the store working through a
/// backlog). All of them within one bound (a failing store is tried once per batch by then);
/// what still finds no room is given up, and logged. Returns how many were given up.
async fn collect_stopped(stopping: Vec<Running>, records: &mpsc::Sender<CheckRecord>) -> usize {
    // Every task joined first (each may finish a probe in flight), then the bound starts:
    // a slow join does not eat the hand-over's time.
    let mut unsent = Vec::new();
    for r in stopping {
        if let Ok(memory) = r.task.await
            && let Some(record) = memory.unsent
        {
            unsent.push(record);
        }
    }
    let until = tokio::time::Instant::now() + SHUTDOWN_HAND_OVER;
    let mut given_up = 0;
    for record in unsent {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        if let Err(
            mpsc::error::SendTimeoutError::Timeout(record)
            | mpsc::error::SendTimeoutError::Closed(record),
        ) = records.send_timeout(*record, left).await
        {
            log_unwritten(&record);
            given_up += 1;
        }
    }
    given_up
}

/// How long the shutdown hands the results stopped while waiting for room to the writer.
const SHUTDOWN_HAND_OVER: Duration = Duration::from_secs(5);

/// A target's last check result that never reached the store writer (its queue was full: the
/// store was failing when the monitor stopped): logged, alert by alert, as not written.
fn log_unwritten(record: &CheckRecord) {
    tracing::error!(
        target = %record.target,
        alerts = record.alerts.len(),
        "shutting down with the store failing: the target's last check result is not written; the next start resumes from the store and pages again what is still down"
    );
    if record.contract.is_some() {
        tracing::error!(
            target = %record.target,
            "its new baseline is not written: accept it again after the restart (`mcpulse monitor accept TARGET`)"
        );
    }
    for a in &record.alerts {
        tracing::error!(target = %a.target, kind = a.kind.as_str(), action = ?a.action, dedup_key = %a.dedup_key, summary = %a.summary, "alert not written (not delivered)");
    }
}

fn signal(
    kind: tokio::signal::unix::SignalKind,
) -> Result<tokio::signal::unix::Signal, MonitorError> {
    tokio::signal::unix::signal(kind)
        .map_err(|e| MonitorError::Other(format!("installing a signal handler: {e}")))
}

async fn wait_true(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

fn resume(
    store: &Arc<Mutex<Store>>,
    fleet: &Fleet,
    resumed: &mut BTreeMap<String, (crate::state::TargetState, crate::alert::Incidents)>,
    name: &str,
) -> Memory {
    let (state, incidents) = resumed.remove(name).unwrap_or_default();
    // A baseline that cannot be read is an error, not "no baseline": taken for none, the
    // first check would overwrite it with whatever the server serves now, accepting a drift
    // nobody saw. Drift is not judged until it is read (a failed read is tried again at each
    // check) or, when its text does not parse, until a contract is accepted again.
    let read = store
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .accepted_contract_at(name);
    let mut memory = Memory::default();
    runner::BaselineRead::of(read).apply(name, &mut memory, fleet);
    let drift = state.last.as_ref().and_then(|o| o.drift.clone());
    let drift_changes = state
        .last
        .as_ref()
        .map(|o| (o.drift_changes.clone(), o.drift_changes_more))
        .unwrap_or_default();
    Memory {
        state,
        incidents,
        drift_checked_ms: 0,
        drift,
        drift_changes,
        // Recomputed at the first check (drift_checked_ms is 0): not kept across restarts.
        drift_diff: Default::default(),
        unsent: None,
        ..memory
    }
}

fn start(
    running: &mut BTreeMap<String, Running>,
    cfg: TargetConfig,
    memory: Memory,
    shared: &Shared,
) {
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(runner::run(cfg.clone(), memory, shared.clone(), stop_rx));
    running.insert(cfg.name.clone(), Running { cfg, stop, task });
}

/// Replaces the sinks and, in the same hold of the store, sets aside the pending alerts of
/// sinks that are gone: the writer reads the sinks under the store's lock too, so no row is
/// written for a sink between the two.
async fn swap_sinks(
    store: &Arc<Mutex<Store>>,
    sinks: &Arc<RwLock<Vec<AlertConfig>>>,
    old: &[AlertConfig],
    new: &[AlertConfig],
    at_ms: i64,
) {
    let (store, sinks, new) = (store.clone(), sinks.clone(), new.to_vec());
    let result = tokio::task::spawn_blocking(move || {
        let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
        let ids = sink_ids(&new);
        *sinks.write().unwrap_or_else(|p| p.into_inner()) = new;
        s.abandon_missing_sinks(&ids, at_ms)
    })
    .await;
    match result {
        Ok(Ok(abandoned)) => log_abandoned(&abandoned, old),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "setting aside the alerts of removed sinks failed; they will fail as undeliverable")
        }
        Err(e) => tracing::error!(error = %e, "setting aside the alerts of removed sinks panicked"),
    }
}

/// One log line per sink whose pending alerts were set aside; `old` is the config the sink
/// was in (empty at start-up: only its identity is known then).
fn log_abandoned(abandoned: &[(SinkId, usize)], old: &[AlertConfig]) {
    let old_ids = sink_ids(old);
    for (id, n) in abandoned {
        let at = old_ids.iter().position(|o| o == id);
        let sink = match at.and_then(|i| old.get(i).map(|c| (i, c))) {
            Some((i, c)) => format!("{} #{i} ({id})", crate::sink::sink_name(&c.kind)),
            None => id.to_string(),
        };
        tracing::warn!(
            %sink,
            alerts = n,
            "the sink is no longer in the config (removed, or its destination changed): its pending alerts are set aside undelivered"
        );
    }
}

/// A target's removal, for the writer, with the channel it confirms the write on.
struct RemovalJob {
    removal: Removal,
    /// The removed target's last check result, when it was stopped before the writer took it
    /// (the queue was full: the store is failing). It may hold alerts no later check makes
    /// again (a resolve of an incident its memory already closed, which the removal's own
    /// resolves do not repeat): the writer writes it just before the removal, retried alike.
    unsent: Option<Box<CheckRecord>>,
    written: oneshot::Sender<()>,
}

/// How long a reload waits for a removal to be written before it goes on (signals wait
/// meanwhile, so it is short; a store that slow is failing, and says so in its own logs).
const REMOVAL_WRITE_WAIT: Duration = Duration::from_secs(5);

/// Removals sent to the writer and not confirmed written within [`REMOVAL_WRITE_WAIT`], by
/// target: until the write lands, the store still holds the removed target's state and open
/// incidents, which a target added back must not resume (their resolves were already queued).
type PendingRemovals = BTreeMap<String, oneshot::Receiver<()>>;

/// A target left the config: resolve its open incidents through the outbox and record the
/// removal. Goes through the writer, after the target's last results (already queued), so
/// a trigger still waiting there cannot land after its resolve; waits for the write, so a
/// target added back later resumes without the incidents. A write that takes longer is left
/// in `pending`.
#[allow(clippy::too_many_arguments)]
async fn remove_target(
    cfg: &TargetConfig,
    mut memory: Memory,
    old: &Config,
    new: &Config,
    shared: &Shared,
    removals: &mpsc::UnboundedSender<RemovalJob>,
    pending: &mut PendingRemovals,
    halt: &mut watch::Receiver<bool>,
) {
    let at = (shared.clock)();
    // Out of the fleet before its resolves exist: an Alertmanager re-send (which lists the
    // fleet's open incidents) must not post an incident after its resolve.
    shared.fleet.remove(&cfg.name);
    let alerts = crate::alert::resolve_removed(&cfg.name, &cfg.labels, &mut memory.incidents, at);
    // The sinks (still configured) that took these incidents: those whose filters in the old
    // config let the normal resolve through.
    let old_ids = sink_ids(&old.alerts);
    // Every Alertmanager sink gets them too: a re-send may have posted the incidents to one
    // that was not in the old config (ending an alert it never saw is harmless there).
    let sinks: Vec<SinkId> = sink_ids(&new.alerts)
        .into_iter()
        .zip(&new.alerts)
        .filter(|(id, cfg)| {
            matches!(cfg.kind, crate::config::SinkKind::Alertmanager { .. })
                || old_ids
                    .iter()
                    .position(|o| o == id)
                    .and_then(|i| old.alerts.get(i))
                    .is_some_and(|c| {
                        alerts.iter().any(|a| {
                            let normal = Alert {
                                removed: false,
                                ..a.clone()
                            };
                            crate::sink::matches(c, &normal)
                        })
                    })
        })
        .map(|(id, _)| id)
        .collect();
    for a in &alerts {
        crate::sink::log(a);
    }
    let removal = Removal {
        target: cfg.name.clone(),
        at_ms: at,
        event: Event::Removed {
            at_ms: at,
            resolved: alerts.iter().map(|a| a.dedup_key.clone()).collect(),
        },
        alerts,
        sinks,
    };
    let (written, mut done) = oneshot::channel();
    let unsent = memory.unsent.take();
    if let Err(mpsc::error::SendError(job)) = removals.send(RemovalJob {
        removal,
        unsent,
        written,
    }) {
        tracing::error!(target = %cfg.name, "the store writer is gone; the removal was not recorded");
        if let Some(record) = job.unsent {
            log_unwritten(&record);
        }
        return;
    }
    // Shutting down, the write is not waited for: the writer writes every removal sent to it
    // before it ends.
    let written = tokio::select! {
        w = tokio::time::timeout(REMOVAL_WRITE_WAIT, &mut done) => w,
        _ = halt.wait_for(|h| *h) => return,
    };
    match written {
        Ok(Ok(())) => {}
        Ok(Err(_)) => {
            tracing::warn!(target = %cfg.name, "the removal could not be written; going on with the reload")
        }
        Err(_) => {
            tracing::warn!(target = %cfg.name, "the removal was not written yet; going on with the reload");
            pending.insert(cfg.name.clone(), done);
        }
    }
}

/// Runs a reload to its end. A stop asked for meanwhile (`stop` resolves: a signal, or the
/// shutdown) does not drop it half-way, which would detach the target task it awaits (its
/// memory, unsent results included, lost) and forget the removals it had not reached (their
/// incidents left open at the sinks for ever): it is halted instead (see [`reload`]), and
/// finishes promptly. Returns whether a stop was asked for.
async fn finish_reload(
    reloading: impl std::future::Future<Output = ()>,
    halt: &watch::Sender<bool>,
    stop: impl std::future::Future<Output = ()>,
) -> bool {
    tokio::pin!(reloading);
    tokio::select! {
        () = &mut reloading => false,
        () = stop => {
            let _ = halt.send(true);
            reloading.await;
            true
        }
    }
}

/// Tells every running target to stop (each then ends at once, or after its probe in flight).
fn stop_all(running: &BTreeMap<String, Running>) {
    for r in running.values() {
        let _ = r.stop.send(true);
    }
}

/// Applies a new config to the running targets. When `halt` turns true (the monitor is
/// shutting down), every target is told to stop at once; the reload then finishes what it must
/// not leave half-done (each target it is stopping is awaited, each removed target still gets
/// its removal, written by the writer before it ends) without waiting for the removals' writes,
/// and restarts and starts nothing (a changed target's memory stays in `running`, in a task
/// already stopped, for the shutdown to collect).
#[allow(clippy::too_many_arguments)]
async fn reload(
    running: &mut BTreeMap<String, Running>,
    old: &Config,
    new: &Config,
    shared: &Shared,
    store: &Arc<Mutex<Store>>,
    removals: &mpsc::UnboundedSender<RemovalJob>,
    pending: &mut PendingRemovals,
    halt: &mut watch::Receiver<bool>,
) {
    let mut halted = false;
    let names: Vec<String> = running.keys().cloned().collect();
    for name in names {
        if !halted && *halt.borrow() {
            halted = true;
            stop_all(running);
        }
        let keep = new.targets.iter().find(|t| t.name == name);
        let changed = keep.is_none_or(|t| running.get(&name).is_some_and(|r| &r.cfg != t));
        if !changed || (halted && keep.is_some()) {
            continue; // unchanged, or shutting down: the shutdown stops it as it is
        }
        let Some(r) = running.get_mut(&name) else {
            continue;
        };
        let _ = r.stop.send(true);
        // Awaited in place: the entry leaves `running` only once its task has ended.
        let joined = if halted {
            None
        } else {
            tokio::select! {
                j = &mut r.task => Some(j),
                _ = halt.wait_for(|h| *h) => None,
            }
        };
        let joined = match joined {
            Some(j) => j,
            None => {
                if !halted {
                    halted = true;
                    stop_all(running);
                }
                match running.get_mut(&name) {
                    Some(r) => (&mut r.task).await,
                    None => continue,
                }
            }
        };
        let Some(r) = running.remove(&name) else {
            continue;
        };
        let memory = joined.unwrap_or_default();
        match keep {
            Some(t) if halted => {
                // Not restarted: its memory goes back in a task already told to stop, which
                // hands over nothing but its unsent result, for the shutdown to collect.
                start(running, t.clone(), memory, shared);
                if let Some(r) = running.get(&name) {
                    let _ = r.stop.send(true);
                }
            }
            Some(t) => {
                tracing::info!(target = %name, "restarting with its new settings");
                if t.labels != r.cfg.labels && !memory.incidents.is_empty() {
                    end_old_labels(&r.cfg, &memory.incidents, new, shared);
                }
                start(running, t.clone(), memory, shared);
            }
            None => {
                tracing::info!(target = %name, incidents = memory.incidents.len(), "removed from the config; resolving its open incidents");
                shared.fleet.remove(&name);
                remove_target(&r.cfg, memory, old, new, shared, removals, pending, halt).await;
            }
        }
    }
    if halted || *halt.borrow() {
        stop_all(running);
        return; // shutting down: nothing is started
    }
    // A target added back resumes what the store remembers of it (its state, open incidents
    // and accepted contract), as after a restart; but not what a removal still on its way to
    // the store is about to clear (the incidents it resolved), which it starts without, as it
    // would once the removal is written.
    pending.retain(|_, done| matches!(done.try_recv(), Err(oneshot::error::TryRecvError::Empty)));
    let added: Vec<&TargetConfig> = new
        .targets
        .iter()
        .filter(|t| !running.contains_key(&t.name))
        .collect();
    if !added.is_empty() {
        let mut stored = store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .load_states()
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "reading stored target states failed; added targets start fresh");
                BTreeMap::new()
            });
        for t in added {
            tracing::info!(target = %t.name, "added to the config");
            if pending.remove(&t.name).is_some() {
                stored.remove(&t.name);
            }
            let memory = resume(store, &shared.fleet, &mut stored, &t.name);
            shared.fleet.resume(t, &memory.state, &memory.incidents);
            start(running, t.clone(), memory, shared);
        }
    }
}

/// How often a batch **without alerts or a new baseline** is tried before it is given up (about
/// ten minutes of retrying): it is history only, and the next batch written carries each
/// target's state on. A batch that holds alerts or an accepted contract is never given up while
/// the monitor runs (see [`write_with_retry`]).
const MAX_WRITE_ATTEMPTS: u32 = 64;

/// The longest wait between two attempts at a failing write.
const MAX_WRITE_BACKOFF: Duration = Duration::from_secs(10);

/// Batches check records into store transactions, and writes removals after the records
/// queued before them; wakes the outbox when alerts were stored. `closing` turns true when the
/// monitor shuts down: a write that is failing then stops being retried (see
/// [`write_with_retry`]).
#[allow(clippy::too_many_arguments)]
async fn write_loop(
    store: Arc<Mutex<Store>>,
    mut rx: mpsc::Receiver<CheckRecord>,
    mut removals: mpsc::UnboundedReceiver<RemovalJob>,
    sinks: Arc<RwLock<Vec<AlertConfig>>>,
    fleet: Fleet,
    wake: Arc<Notify>,
    clock: Clock,
    closing: watch::Receiver<bool>,
) {
    loop {
        let (batch, removal) = tokio::select! {
            // Removals first: one takes the records queued before it along, in order. And
            // none is left behind when the records' channel closes at shutdown.
            biased;
            Some(mut job) = removals.recv() => {
                // The removed target stopped before the removal was sent, so its last results
                // are already queued: they are written first, then the one it could not hand
                // over (made after all of them), then the removal.
                let mut batch = Vec::new();
                while let Ok(r) = rx.try_recv() {
                    batch.push(r);
                }
                batch.extend(job.unsent.take().map(|r| *r));
                (batch, Some(job))
            }
            first = rx.recv() => match first {
                Some(first) => {
                    let mut batch = vec![first];
                    while batch.len() < 1000 {
                        match rx.try_recv() {
                            Ok(r) => batch.push(r),
                            Err(_) => break,
                        }
                    }
                    (batch, None)
                }
                // No more records (shutting down): the removals left, then the end.
                None => match removals.try_recv() {
                    Ok(mut job) => (job.unsent.take().map(|r| *r).into_iter().collect(), Some(job)),
                    Err(_) => break,
                },
            },
        };
        if !batch.is_empty() {
            let what = Batch::of(&batch);
            let alerts = what.alerts.len();
            // The new baselines, for the fleet to show once they are written.
            let baselines: Vec<(String, String, i64)> = batch
                .iter()
                .filter(|r| r.contract.is_some())
                .filter_map(|r| {
                    let digest = r.observation.contract_digest.clone()?;
                    Some((r.target.clone(), digest, r.at_ms))
                })
                .collect();
            let (batch, sinks) = (Arc::new(batch), sinks.clone());
            let written = write_with_retry(&store, &fleet, &clock, &closing, what, move |s| {
                // The sinks are read under the store's lock, as a reload swaps them.
                let ids = sink_ids(&sinks.read().unwrap_or_else(|p| p.into_inner()));
                s.record(&batch, &ids)
            })
            .await;
            if written {
                for (target, digest, at_ms) in &baselines {
                    fleet.baseline_stored(target, digest, *at_ms);
                }
            }
            if alerts > 0 {
                wake.notify_one();
            }
        }
        if let Some(job) = removal {
            let alerts = !job.removal.alerts.is_empty();
            let what = Batch {
                records: 1,
                alerts: job.removal.alerts.iter().map(describe).collect(),
                contracts: 0,
            };
            let removal = Arc::new(job.removal);
            write_with_retry(&store, &fleet, &clock, &closing, what, move |s| {
                s.record_removal(&removal)
            })
            .await;
            let _ = job.written.send(());
            if alerts {
                wake.notify_one();
            }
        }
    }
}

/// What one store write holds: records (or a removal), the alerts among them (described for
/// the log, should they be lost), and how many new baselines (accepted contracts).
#[derive(Debug, Clone)]
struct Batch {
    records: usize,
    alerts: Vec<String>,
    contracts: usize,
}

impl Batch {
    fn of(records: &[CheckRecord]) -> Batch {
        Batch {
            records: records.len(),
            alerts: records
                .iter()
                .flat_map(|r| &r.alerts)
                .map(describe)
                .collect(),
            contracts: records.iter().filter(|r| r.contract.is_some()).count(),
        }
    }

    /// Whether the write is kept until it succeeds while the monitor runs: it holds the only
    /// copy of something no later check makes again: alerts, or a new baseline (an accepted
    /// contract is written only with the check that took it).
    fn must_land(&self) -> bool {
        !self.alerts.is_empty() || self.contracts > 0
    }
}

/// An alert as the logs name it when it was not written: its target, kind, action and key.
fn describe(a: &Alert) -> String {
    format!(
        "{} {} {:?} {}",
        a.target,
        a.kind.as_str(),
        a.action,
        a.dedup_key
    )
}

/// Runs a store write off the async threads, retrying a failure (backing off from 200 ms to
/// [`MAX_WRITE_BACKOFF`]) rather than dropping it. Meanwhile the bounded channel holds the
/// checks back and /readyz says why.
///
/// A write that holds alerts is retried for as long as the monitor runs: its outbox rows are
/// the only copy of those alerts, and the check that raised them has already opened the
/// incident in memory, so no later check would raise them again: dropping it would leave an
/// outage nobody is paged for. (Before, every batch was given up after about ten minutes of a
/// failing store, alerts and all.) So is a write that holds a new baseline: the accepted
/// contract is written only with the check that took it, and lost, the baseline the monitor
/// judges drift against would not be the one in the store after a restart. A write with
/// neither is history only and is given up after [`MAX_WRITE_ATTEMPTS`], as the next batch
/// carries each target's state on.
///
/// Once `closing` is true (the monitor is shutting down), a failing write is not tried again:
/// what it held is lost, logged as an error, and the next start resumes from the store, whose
/// state predates it, so a target still down is found down and paged again.
async fn write_with_retry<F>(
    store: &Arc<Mutex<Store>>,
    fleet: &Fleet,
    clock: &Clock,
    closing: &watch::Receiver<bool>,
    what: Batch,
    write: F,
) -> bool
where
    F: Fn(&mut Store) -> Result<(), StoreError> + Send + Sync + 'static,
{
    let write = Arc::new(write);
    let mut delay = Duration::from_millis(200);
    let mut closing = closing.clone();
    for attempt in 1u32.. {
        let (store, write) = (store.clone(), write.clone());
        let result = tokio::task::spawn_blocking(move || {
            let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
            write(&mut s)
        })
        .await;
        let error = match result {
            Ok(Ok(())) => {
                fleet.store_ok(clock());
                return true;
            }
            Ok(Err(e)) => e.to_string(),
            Err(e) => format!("the store writer panicked: {e}"),
        };
        tracing::error!(error = %error, attempt, records = what.records, alerts = what.alerts.len(), contracts = what.contracts, "writing check results failed; retrying");
        fleet.store_failed(clock(), &error);
        if *closing.borrow() {
            tracing::error!(
                records = what.records,
                alerts = what.alerts.len(),
                contracts = what.contracts,
                "shutting down with the store failing: these check results and alerts are not written; the next start resumes from the store and pages again what is still down"
            );
            for a in &what.alerts {
                tracing::error!(alert = %a, "alert not written (not delivered)");
            }
            if what.contracts > 0 {
                tracing::error!(
                    contracts = what.contracts,
                    "new baselines not written: accept them again after the restart (`mcpulse monitor accept TARGET`)"
                );
            }
            return false;
        }
        if !what.must_land() && attempt >= MAX_WRITE_ATTEMPTS {
            tracing::error!(
                records = what.records,
                "giving up on a batch of check results (history only: no alerts, no new baseline) after {MAX_WRITE_ATTEMPTS} attempts; the next batch carries the targets' state on"
            );
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = closing.wait_for(|c| *c) => {}
        }
        delay = (delay * 2).min(MAX_WRITE_BACKOFF);
    }
    false // past u32::MAX attempts: not reached
}

/// A target's labels changed while it has open incidents: Alertmanager knows an alert by its
/// label set, so the alerts under the old set are ended (the re-sends carry the incidents on
/// under the new one). Best effort, like the re-sends: a failure is logged.
fn end_old_labels(
    old_cfg: &TargetConfig,
    incidents: &crate::alert::Incidents,
    new: &Config,
    shared: &Shared,
) {
    let at = (shared.clock)();
    let summary = format!(
        "{}: its labels changed; the alert goes on under the new ones",
        old_cfg.name
    );
    let alerts: Vec<Alert> = incidents
        .values()
        .map(|inc| {
            let resolve = crate::alert::Action::Resolve;
            inc.alert(&old_cfg.name, &old_cfg.labels, resolve, summary.clone(), at)
        })
        .collect();
    for (i, cfg) in new.alerts.iter().enumerate() {
        let crate::config::SinkKind::Alertmanager { url, .. } = &cfg.kind else {
            continue;
        };
        let (url, alerts, target) = (url.clone(), alerts.clone(), old_cfg.name.clone());
        let cfg = cfg.clone();
        tokio::spawn(async move {
            if let Err(e) = crate::sink::alertmanager::post_now(&url, RESEND_TIMEOUT, &alerts).await
            {
                let e = crate::sink::hide(&cfg, e);
                tracing::warn!(sink = %format!("alertmanager #{i}"), %target, error = %e, "ending the alerts under the old labels failed; they clear within 24 h");
            }
        });
    }
}

/// How long one re-send to an Alertmanager may take.
const RESEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Posts the fleet's open incidents to each Alertmanager sink every `resend` (its setting):
/// see [`crate::sink::alertmanager::resend`]. A failure is logged and tried again at the next
/// turn; nothing is queued (the next re-send carries the same incidents).
async fn resend_loop(
    sinks: Arc<RwLock<Vec<AlertConfig>>>,
    fleet: Fleet,
    mut stop: watch::Receiver<bool>,
    clock: Clock,
) {
    let mut last: BTreeMap<SinkId, tokio::time::Instant> = BTreeMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|v| *v) => return,
        }
        let cfgs: Vec<AlertConfig> = sinks.read().unwrap_or_else(|p| p.into_inner()).clone();
        let ids = sink_ids(&cfgs);
        last.retain(|id, _| ids.contains(id));
        for (i, (id, cfg)) in ids.iter().zip(&cfgs).enumerate() {
            let crate::config::SinkKind::Alertmanager { url, resend } = &cfg.kind else {
                continue;
            };
            if last.get(id).is_some_and(|t| t.elapsed() < *resend) {
                continue;
            }
            last.insert(id.clone(), tokio::time::Instant::now());
            let open = || {
                fleet
                    .open_alerts(clock())
                    .into_iter()
                    .filter(|a| crate::sink::matches(cfg, a))
                    .collect()
            };
            match crate::sink::alertmanager::resend(url, RESEND_TIMEOUT, open).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::debug!(sink = %format!("alertmanager #{i} ({id})"), incidents = n, "re-sent the open incidents")
                }
                Err(e) => tracing::warn!(
                    sink = %format!("alertmanager #{i} ({id})"),
                    error = %crate::sink::hide(cfg, e),
                    "re-sending the open incidents failed; trying again at the next re-send"
                ),
            }
        }
    }
}

/// Rows deleted per step of the daemon's hourly prune (one short hold of the store's lock).
const PRUNE_STEP_ROWS: usize = 5_000;

async fn retention_loop(
    store: Arc<Mutex<Store>>,
    retention: Duration,
    mut stop: watch::Receiver<bool>,
    clock: Clock,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|v| *v) => return,
        }
        let horizon = clock() - retention.as_millis() as i64;
        let store = store.clone();
        // Step by step, the store's lock taken for one short transaction at a time: the
        // writer, the outbox and the API get their turns in between.
        let stopping = stop.clone();
        let pruned = tokio::task::spawn_blocking(move || {
            let (mut deleted, mut from) = (0, Some(PruneFrom::default()));
            while let Some(at) = from {
                if *stopping.borrow() {
                    break; // shutting down: the next start prunes the rest
                }
                let step = store.lock().unwrap_or_else(|p| p.into_inner()).prune_step(
                    horizon,
                    at,
                    PRUNE_STEP_ROWS,
                )?;
                deleted += step.deleted;
                from = step.next;
                std::thread::yield_now();
            }
            Ok::<usize, StoreError>(deleted)
        })
        .await;
        match pruned {
            Ok(Ok(n)) if n > 0 => {
                tracing::info!(rows = n, "pruned history past the retention horizon")
            }
            Ok(Err(e)) => tracing::error!(error = %e, "pruning history failed"),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::alert::{Incident, Incidents, Kind, dedup_key};
    use crate::state::{Health, Observation, TargetState};
    use mcpulse_testkit::TempDir;

    /// A prober whose probes never end (none starts here anyway: see the interval below).
    struct Never;

    impl runner::Prober for Never {
        fn probe<'a>(
            &'a self,
            _: &'a mcpulse_probe::Target,
            _: &'a mcpulse_probe::Plan,
        ) -> std::pin::Pin<Box<dyn Future<Output = mcpulse_probe::Transcript> + Send + 'a>>
        {
            Box::pin(std::future::pending())
        }
    }

    /// Issue #14 item 11: `--listen` beyond loopback is held to the same rule as the config's
    /// `listen`: it needs a token (or `allow_unauthenticated`).
    #[test]
    fn listen_override_beyond_loopback_needs_a_token() {
        let dir = TempDir::new("daemon-listen");
        let path = dir.join("monitor.toml");
        let opts = |listen: &str| Options {
            listen: Some(listen.parse().unwrap()),
            ..Options::default()
        };
        std::fs::write(&path, "").unwrap();
        let e = load(&path, &opts("0.0.0.0:0")).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: --listen 0.0.0.0:0: the API would listen on 0.0.0.0:0 (beyond loopback) without a token", path.display())),
            "{e}"
        );
        assert_eq!(
            load(&path, &opts("127.0.0.1:0")).unwrap().server.listen,
            opts("127.0.0.1:0").listen.unwrap()
        );
        std::fs::write(&path, "[server]\nallow_unauthenticated = true\n").unwrap();
        assert!(load(&path, &opts("0.0.0.0:0")).is_ok());
        // The address bound is what counts: the file's open address, overridden by loopback.
        std::fs::write(&path, "[server]\nlisten = \"0.0.0.0:9477\"\n").unwrap();
        assert!(load(&path, &Options::default()).is_err());
        assert!(load(&path, &opts("127.0.0.1:0")).is_ok());
    }

    fn config(dir: &TempDir, with_target: bool) -> Config {
        let mut text = String::from("[storage]\npath = \"mcpulse.db\"\n");
        if with_target {
            // The first check would come `phase` into an hour: never within this test.
            text.push_str("\n[[targets]]\nname = \"gone\"\nurl = \"http://127.0.0.1:9/mcp\"\ninterval = \"1h\"\n");
        }
        config::parse(&text, "monitor.toml", dir.path(), &|_| None).unwrap()
    }

    /// The store's `checks` table refuses every insert (a full disk) until the trigger is
    /// dropped through the returned connection (`DROP TRIGGER full_disk;`).
    fn fill_disk(path: &Path) -> rusqlite::Connection {
        let disk = rusqlite::Connection::open(path).unwrap();
        disk.execute_batch("CREATE TRIGGER full_disk BEFORE INSERT ON checks BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;").unwrap();
        disk
    }

    /// The store writer over `store`, its clock stopped at `now_ms`.
    fn writer(
        store: &Arc<Mutex<Store>>,
        records: mpsc::Receiver<CheckRecord>,
        removals: mpsc::UnboundedReceiver<RemovalJob>,
        alerts: Vec<AlertConfig>,
        fleet: Fleet,
        now_ms: i64,
        closing: watch::Receiver<bool>,
    ) -> JoinHandle<()> {
        tokio::spawn(write_loop(
            store.clone(),
            records,
            removals,
            Arc::new(RwLock::new(alerts)),
            fleet,
            Arc::new(Notify::new()),
            Arc::new(move || now_ms),
            closing,
        ))
    }

    /// A record of `gone` confirmed down, with its incident open.
    fn down(at_ms: i64) -> CheckRecord {
        let observation = Observation::bare(Health::Down, at_ms, "connection refused");
        let incidents: Incidents = BTreeMap::from([(
            "status".into(),
            Incident {
                dedup_key: dedup_key("gone", "status"),
                family: "status".into(),
                kind: Kind::Down,
                severity: "critical".into(),
                summary: "gone is down".into(),
                opened_ms: at_ms,
                notified_ms: at_ms,
            },
        )]);
        CheckRecord {
            target: "gone".into(),
            at_ms,
            status: Health::Down,
            duration_ms: 1.0,
            timings: serde_json::json!({}),
            findings: serde_json::json!([]),
            grade: None,
            observation: observation.clone(),
            state: TargetState {
                status: Health::Down,
                since_ms: at_ms,
                last: Some(observation),
                ..TargetState::default()
            },
            incidents,
            events: Vec::new(),
            alerts: Vec::new(),
            contract: None,
            calls: Vec::new(),
        }
    }

    /// A target removed (its incident resolved, the removal sent to a writer that has not
    /// written it within `REMOVAL_WRITE_WAIT`) and added back before the write lands starts
    /// without the resolved incident, though the store still holds it. Resuming it would keep
    /// an incident open whose resolve is on its way: the receiver would never be paged again.
    #[tokio::test(start_paused = true)]
    async fn a_target_added_back_before_its_removal_is_written_does_not_resume_its_incidents() {
        let dir = TempDir::new("pending-removal");
        assert!(runner::phase("gone", Duration::from_secs(3600)) > Duration::from_secs(60));
        let (with, without) = (config(&dir, true), config(&dir, false));
        let store = Arc::new(Mutex::new(Store::open(&dir.join("mcpulse.db")).unwrap()));
        store.lock().unwrap().record(&[down(1_000)], &[]).unwrap();
        let (records, _records_rx) = mpsc::channel(16);
        let shared = Shared {
            prober: Arc::new(Never),
            semaphore: Arc::new(Semaphore::new(4)),
            memory: crate::memory::MemoryBudget::default(),
            records,
            fleet: Fleet::new(),
            maintenance: Arc::new(RwLock::new(Vec::new())),
            clock: Arc::new(|| 2_000),
            baselines: None,
        };
        // Running, its incident resumed from the store.
        let mut stored = store.lock().unwrap().load_states().unwrap();
        let memory = resume(&store, &shared.fleet, &mut stored, "gone");
        assert_eq!(memory.incidents.len(), 1);
        shared.fleet.set_config(&with.targets);
        shared
            .fleet
            .resume(&with.targets[0], &memory.state, &memory.incidents);
        let mut running = BTreeMap::new();
        start(&mut running, with.targets[0].clone(), memory, &shared);

        // Removed; the writer takes the removal and does not write it.
        let (removals, mut writer) = mpsc::unbounded_channel::<RemovalJob>();
        let mut pending = PendingRemovals::new();
        shared.fleet.set_config(&without.targets);
        reload(
            &mut running,
            &with,
            &without,
            &shared,
            &store,
            &removals,
            &mut pending,
            &mut watch::channel(false).1,
        )
        .await;
        let job = writer.try_recv().unwrap();
        assert_eq!(job.removal.alerts.len(), 1, "the incident's resolve");
        assert!(pending.contains_key("gone"));

        // Added back while the removal is still unwritten.
        shared.fleet.set_config(&with.targets);
        reload(
            &mut running,
            &without,
            &with,
            &shared,
            &store,
            &removals,
            &mut pending,
            &mut watch::channel(false).1,
        )
        .await;
        let view = shared.fleet.get("gone").unwrap();
        assert!(view.incidents.is_empty(), "{:?}", view.incidents);
        assert_eq!(view.status, Health::Unknown);
        assert!(pending.is_empty());
        for r in running.values() {
            let _ = r.stop.send(true);
        }
        drop(job);
    }

    /// A down transcript from a real probe (a loopback port nobody listens on), recorded on a
    /// thread whose clock runs: in a paused runtime a probe's timeout would fire at once.
    fn refused_transcript() -> mcpulse_probe::Transcript {
        std::thread::spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async {
                    let port = std::net::TcpListener::bind("127.0.0.1:0")
                        .unwrap()
                        .local_addr()
                        .unwrap()
                        .port();
                    let url = format!("http://127.0.0.1:{port}/mcp");
                    let plan = mcpulse_probe::Plan {
                        timeout: Duration::from_secs(5),
                        security: false,
                        ..mcpulse_probe::Plan::default()
                    };
                    mcpulse_probe::probe(&mcpulse_probe::Target::http(&url).unwrap(), &plan).await
                })
        })
        .join()
        .unwrap()
    }

    /// Answers every probe at once with the same transcript.
    struct Replay(mcpulse_probe::Transcript);

    impl runner::Prober for Replay {
        fn probe<'a>(
            &'a self,
            _: &'a mcpulse_probe::Target,
            _: &'a mcpulse_probe::Plan,
        ) -> std::pin::Pin<Box<dyn Future<Output = mcpulse_probe::Transcript> + Send + 'a>>
        {
            Box::pin(std::future::ready(self.0.clone()))
        }
    }

    /// Review of d599b81: with the store failing, the writer holds its batch of alerts and the
    /// queue fills; a target then waits to hand its result over. A reload that restarts it,
    /// and a shutdown, must not wait for the store: the target stops at once, keeping the
    /// result it could not hand over (the restarted target hands it over first).
    #[tokio::test(start_paused = true)]
    async fn a_reload_and_a_shutdown_are_not_held_by_a_failing_store() {
        let dir = TempDir::new("store-failing-reload");
        let path = dir.join("mcpulse.db");
        let store = Arc::new(Mutex::new(Store::open(&path).unwrap()));
        let _disk = fill_disk(&path);
        let text = |interval: &str| {
            format!(
                "[storage]\npath = \"mcpulse.db\"\n[[alerts]]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:9/hook\"\n[[targets]]\nname = \"gone\"\nurl = \"http://127.0.0.1:9/mcp\"\ninterval = \"{interval}\"\ntimeout = \"500ms\"\nfailure_threshold = 1\n"
            )
        };
        let old = config::parse(&text("1s"), "monitor.toml", dir.path(), &|_| None).unwrap();
        let new = config::parse(&text("2s"), "monitor.toml", dir.path(), &|_| None).unwrap();
        // The writer's queue holds one result, as the daemon's holds 4096.
        let (records, records_rx) = mpsc::channel(1);
        let (removals, removals_rx) = mpsc::unbounded_channel::<RemovalJob>();
        let fleet = Fleet::new();
        fleet.set_config(&old.targets);
        let (closing_tx, closing) = watch::channel(false);
        let writer = writer(
            &store,
            records_rx,
            removals_rx,
            old.alerts.clone(),
            fleet.clone(),
            1_000,
            closing,
        );
        let shared = Shared {
            prober: Arc::new(Replay(refused_transcript())),
            semaphore: Arc::new(Semaphore::new(4)),
            memory: crate::memory::MemoryBudget::default(),
            records,
            fleet: fleet.clone(),
            maintenance: Arc::new(RwLock::new(Vec::new())),
            clock: Arc::new(|| 1_000),
            baselines: None,
        };
        let mut running = BTreeMap::new();
        start(
            &mut running,
            old.targets[0].clone(),
            Memory::default(),
            &shared,
        );
        // The first check's trigger is in the writer's failing batch, the second result in the
        // queue, the third waits to be handed over.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(fleet.snapshot().monitor.store_error.is_some());

        let mut pending = PendingRemovals::new();
        tokio::time::timeout(
            Duration::from_secs(30),
            reload(
                &mut running,
                &old,
                &new,
                &shared,
                &store,
                &removals,
                &mut pending,
                &mut watch::channel(false).1,
            ),
        )
        .await
        .expect("the reload is not held by the failing store");
        assert_eq!(running["gone"].cfg.interval, Duration::from_secs(2));

        // Shutting down, the store still failing: the target and the writer end promptly.
        closing_tx.send(true).unwrap();
        let r = running.remove("gone").unwrap();
        r.stop.send(true).unwrap();
        let memory = tokio::time::timeout(Duration::from_secs(30), r.task)
            .await
            .expect("the target stops")
            .unwrap();
        assert_eq!(memory.incidents.len(), 1, "the incident is carried on");
        drop((shared, removals));
        tokio::time::timeout(Duration::from_secs(30), writer)
            .await
            .expect("the writer stops")
            .unwrap();
    }

    /// At shutdown, a result that was stopped while it waited for room in a queue that is only
    /// draining (a healthy store behind a backlog) is still handed to the writer; only one that
    /// finds no room within the bound is given up.
    #[tokio::test(start_paused = true)]
    async fn at_shutdown_a_waiting_result_still_goes_to_a_draining_writer() {
        let dir = TempDir::new("shutdown-hand-over");
        let cfg = config(&dir, true).targets[0].clone();
        let stopped = |r: CheckRecord| {
            let (stop, _) = watch::channel(true);
            let memory = Memory {
                unsent: Some(Box::new(r)),
                ..Memory::default()
            };
            Running {
                cfg: cfg.clone(),
                stop,
                task: tokio::spawn(async move { memory }),
            }
        };
        let (records, mut rx) = mpsc::channel(1);
        records.send(down(1_000)).await.unwrap();
        let drain = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut got = Vec::new();
            while let Some(r) = rx.recv().await {
                got.push(r.at_ms);
            }
            got
        });
        let given_up = collect_stopped(vec![stopped(down(2_000))], &records).await;
        assert_eq!(given_up, 0, "written, not given up");
        drop(records);
        assert_eq!(drain.await.unwrap(), vec![1_000, 2_000]);
        // A target slow to stop (a probe in flight) joined first does not eat the bound.
        let (records, mut rx) = mpsc::channel(1);
        records.send(down(1_000)).await.unwrap();
        let (slow_stop, _) = watch::channel(true);
        let slow = Running {
            cfg: cfg.clone(),
            stop: slow_stop,
            task: tokio::spawn(async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                Memory::default()
            }),
        };
        let drain = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10_100)).await;
            let mut got = Vec::new();
            while let Some(r) = rx.recv().await {
                got.push(r.at_ms);
            }
            got
        });
        let given_up = collect_stopped(vec![slow, stopped(down(2_000))], &records).await;
        assert_eq!(given_up, 0, "the bound starts once every task is joined");
        drop(records);
        assert_eq!(drain.await.unwrap(), vec![1_000, 2_000]);
        // Nobody drains: given up after the bound, not held for ever.
        let (records, _rx) = mpsc::channel(1);
        records.send(down(1_000)).await.unwrap();
        let started = tokio::time::Instant::now();
        let given_up = collect_stopped(vec![stopped(down(2_000))], &records).await;
        assert_eq!(given_up, 1);
        assert_eq!(started.elapsed(), SHUTDOWN_HAND_OVER);
    }

    /// Review of 1bc4378: a target removed while its last result (which resolves an incident
    /// its memory already closed) waited for a full queue: that result is written before the
    /// removal, not dropped, so the resolve is queued for the sinks (the removal itself finds
    /// no open incident to resolve).
    #[tokio::test(start_paused = true)]
    async fn a_removed_targets_unsent_result_is_written_with_its_removal() {
        let dir = TempDir::new("removed-unsent");
        let (with, without) = (config(&dir, true), config(&dir, false));
        let path = dir.join("mcpulse.db");
        let store = Arc::new(Mutex::new(Store::open(&path).unwrap()));
        let hook = config::parse(
            "[[alerts]]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:9/hook\"\n",
            "monitor.toml",
            dir.path(),
            &|_| None,
        )
        .unwrap()
        .alerts;
        let ids = sink_ids(&hook);
        // Incident I of `gone` is open, its trigger written.
        let mut opened = down(1_000);
        let incident = opened.incidents["status"].clone();
        opened.alerts = vec![incident.alert(
            "gone",
            &BTreeMap::new(),
            crate::alert::Action::Trigger,
            "gone is down".into(),
            1_000,
        )];
        store.lock().unwrap().record(&[opened], &ids).unwrap();
        // The store fails; the writer holds one batch and the queue (one place) is full.
        let disk = fill_disk(&path);
        let (records, records_rx) = mpsc::channel(1);
        let (removals, removals_rx) = mpsc::unbounded_channel::<RemovalJob>();
        let fleet = Fleet::new();
        let (_closing_tx, closing) = watch::channel(false);
        let writer = writer(
            &store,
            records_rx,
            removals_rx,
            hook.clone(),
            fleet.clone(),
            2_000,
            closing,
        );
        let other = |at_ms| {
            let mut r = down(at_ms);
            r.target = "other".into();
            r.incidents.clear();
            r
        };
        records.send(other(1_100)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        records.send(other(1_200)).await.unwrap();
        // The recovery's record R1 resolves I; the target's memory has I closed already.
        let mut r1 = down(1_500);
        r1.status = Health::Healthy;
        r1.incidents.clear();
        r1.alerts = vec![incident.alert(
            "gone",
            &BTreeMap::new(),
            crate::alert::Action::Resolve,
            "gone is up".into(),
            1_500,
        )];
        let shared = Shared {
            prober: Arc::new(Never),
            semaphore: Arc::new(Semaphore::new(4)),
            memory: crate::memory::MemoryBudget::default(),
            records,
            fleet: fleet.clone(),
            maintenance: Arc::new(RwLock::new(Vec::new())),
            clock: Arc::new(|| 2_000),
            baselines: None,
        };
        fleet.set_config(&with.targets);
        let mut running = BTreeMap::new();
        let memory = Memory {
            unsent: Some(Box::new(r1)),
            ..Memory::default()
        };
        start(&mut running, with.targets[0].clone(), memory, &shared);
        tokio::time::sleep(Duration::from_secs(1)).await;

        // Removed while R1 waits for room.
        let mut pending = PendingRemovals::new();
        fleet.set_config(&without.targets);
        let with_hook = Config {
            alerts: hook.clone(),
            ..with.clone()
        };
        let without_hook = Config {
            alerts: hook,
            ..without.clone()
        };
        reload(
            &mut running,
            &with_hook,
            &without_hook,
            &shared,
            &store,
            &removals,
            &mut pending,
            &mut watch::channel(false).1,
        )
        .await;
        assert!(running.is_empty());

        // The store recovers: R1's resolve is queued after I's trigger.
        disk.execute_batch("DROP TRIGGER full_disk;").unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        let queued: Vec<String> = disk
            .prepare("SELECT alert FROM outbox WHERE dedup_key = ?1 ORDER BY id")
            .unwrap()
            .query_map([dedup_key("gone", "status")], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(queued.len(), 2, "{queued:?}");
        assert!(
            queued[1].to_lowercase().contains("resolve"),
            "{}",
            queued[1]
        );
        assert!(
            store
                .lock()
                .unwrap()
                .load_states()
                .unwrap()
                .get("gone")
                .is_none_or(|(_, i)| i.is_empty())
        );
        drop((shared, removals));
        tokio::time::timeout(Duration::from_secs(30), writer)
            .await
            .expect("the writer stops")
            .unwrap();
    }

    /// Answers every probe with the same transcript, after a while (a probe in flight).
    struct Slow(mcpulse_probe::Transcript, Duration);

    impl runner::Prober for Slow {
        fn probe<'a>(
            &'a self,
            _: &'a mcpulse_probe::Target,
            _: &'a mcpulse_probe::Plan,
        ) -> std::pin::Pin<Box<dyn Future<Output = mcpulse_probe::Transcript> + Send + 'a>>
        {
            Box::pin(async move {
                tokio::time::sleep(self.1).await;
                self.0.clone()
            })
        }
    }

    /// Review of 1bc4378: a stop (SIGTERM, SIGINT) during a reload that waits for a probe in
    /// flight does not drop the reload half-way: the target it was stopping is awaited, every
    /// removed target still gets its removal (the fleet has already forgotten them: none
    /// would ever resolve their incidents), and every other target is told to stop at once.
    #[tokio::test(start_paused = true)]
    async fn a_stop_during_a_reload_finishes_its_removals_and_stops_every_target() {
        let dir = TempDir::new("stop-during-reload");
        let target = |name: &str, interval: &str| {
            format!(
                "[[targets]]\nname = \"{name}\"\nurl = \"http://127.0.0.1:9/mcp\"\ninterval = \"{interval}\"\n"
            )
        };
        let old = config::parse(
            &format!(
                "[storage]\npath = \"mcpulse.db\"\n{}{}{}",
                target("a", "30s"),
                target("b", "1h"),
                target("c", "1h")
            ),
            "monitor.toml",
            dir.path(),
            &|_| None,
        )
        .unwrap();
        let new = config::parse(
            &format!("[storage]\npath = \"mcpulse.db\"\n{}", target("c", "1h")),
            "monitor.toml",
            dir.path(),
            &|_| None,
        )
        .unwrap();
        let store = Arc::new(Mutex::new(Store::open(&dir.join("mcpulse.db")).unwrap()));
        let (records, _records_rx) = mpsc::channel(16);
        let shared = Shared {
            prober: Arc::new(Slow(refused_transcript(), Duration::from_secs(60))),
            semaphore: Arc::new(Semaphore::new(4)),
            memory: crate::memory::MemoryBudget::default(),
            records,
            fleet: Fleet::new(),
            maintenance: Arc::new(RwLock::new(Vec::new())),
            clock: Arc::new(|| 1_000),
            baselines: None,
        };
        shared.fleet.set_config(&old.targets);
        let mut running = BTreeMap::new();
        for t in &old.targets {
            start(&mut running, t.clone(), Memory::default(), &shared);
        }
        // `a`'s probe is in flight: the reload waits for it. `c` checks much later.
        assert!(runner::phase("c", Duration::from_secs(3600)) > Duration::from_secs(600));
        tokio::time::sleep(Duration::from_secs(31)).await;
        let (removals, mut writer) = mpsc::unbounded_channel::<RemovalJob>();
        let mut pending = PendingRemovals::new();
        shared.fleet.set_config(&new.targets);
        let (halt_tx, mut halt) = watch::channel(false);
        let stopped = finish_reload(
            reload(
                &mut running,
                &old,
                &new,
                &shared,
                &store,
                &removals,
                &mut pending,
                &mut halt,
            ),
            &halt_tx,
            tokio::time::sleep(Duration::from_secs(1)),
        )
        .await;
        assert!(stopped);
        let mut removed = Vec::new();
        while let Ok(job) = writer.try_recv() {
            removed.push(job.removal.target.clone());
        }
        assert_eq!(removed, ["a", "b"], "every removed target's removal");
        assert_eq!(running.keys().collect::<Vec<_>>(), ["c"]);
        assert!(
            *running["c"].stop.borrow(),
            "the kept target is told to stop"
        );
        let c = running.remove("c").unwrap();
        tokio::time::timeout(Duration::from_secs(1), c.task)
            .await
            .expect("it stops at once")
            .unwrap();
    }

    /// Review of d599b81: a batch without alerts but with a new baseline (the contract a check
    /// accepted, written only with that check) is kept like one with alerts, not given up
    /// after 64 attempts: the baseline would be lost.
    #[tokio::test(start_paused = true)]
    async fn a_batch_with_a_new_baseline_outlives_a_failing_store() {
        let dir = TempDir::new("store-failing-baseline");
        let path = dir.join("mcpulse.db");
        let store = Arc::new(Mutex::new(Store::open(&path).unwrap()));
        let disk = fill_disk(&path);
        let (tx, rx) = mpsc::channel(16);
        let (_removals_tx, removals_rx) = mpsc::unbounded_channel::<RemovalJob>();
        let (_closing_tx, closing) = watch::channel(false);
        let writer = writer(
            &store,
            rx,
            removals_rx,
            Vec::new(),
            Fleet::new(),
            1_000,
            closing,
        );
        let mut r = down(1_000);
        r.incidents.clear();
        r.contract = Some("{\"accepted\":true}".into());
        assert!(r.alerts.is_empty());
        tx.send(r).await.unwrap();
        // Twenty minutes of a failing store: twice as long as history alone is kept.
        tokio::time::sleep(Duration::from_secs(20 * 60)).await;
        assert_eq!(
            store.lock().unwrap().accepted_contract("gone").unwrap(),
            None
        );
        disk.execute_batch("DROP TRIGGER full_disk;").unwrap();
        tokio::time::sleep(MAX_WRITE_BACKOFF + Duration::from_secs(1)).await;
        assert_eq!(
            store.lock().unwrap().accepted_contract("gone").unwrap(),
            Some("{\"accepted\":true}".to_owned()),
            "the baseline is written once the store works again"
        );
        drop(tx);
        writer.await.unwrap();
    }

    /// A store that keeps failing for longer than the ten minutes a batch used to be retried:
    /// the batch holding a trigger (the only copy of that alert: its check already opened the
    /// incident in memory, so no later check raises it again) is kept, and written with its
    /// outbox row once the store works again. The failure is a real one of the real file: a
    /// trigger refuses every insert of a check row, as a full disk would, until it is dropped.
    /// And once the monitor shuts down, a failing write no longer holds the shutdown.
    #[tokio::test(start_paused = true)]
    async fn a_batch_with_alerts_outlives_a_failing_store_and_is_written_when_it_recovers() {
        let dir = TempDir::new("store-failing");
        let path = dir.join("mcpulse.db");
        let store = Arc::new(Mutex::new(Store::open(&path).unwrap()));
        let disk = fill_disk(&path);
        let cfg = config::parse(
            "[[alerts]]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:9/hook\"\n",
            "monitor.toml",
            dir.path(),
            &|_| None,
        )
        .unwrap();
        let (tx, rx) = mpsc::channel(16);
        let (removals_tx, removals_rx) = mpsc::unbounded_channel::<RemovalJob>();
        let fleet = Fleet::new();
        let (closing_tx, closing) = watch::channel(false);
        let writer = writer(
            &store,
            rx,
            removals_rx,
            cfg.alerts,
            fleet.clone(),
            1_000,
            closing,
        );
        let with_trigger = |at_ms: i64| {
            let mut r = down(at_ms);
            let alert = r.incidents["status"].alert(
                "gone",
                &BTreeMap::new(),
                crate::alert::Action::Trigger,
                "gone is down".into(),
                at_ms,
            );
            r.alerts = vec![alert];
            r
        };
        tx.send(with_trigger(1_000)).await.unwrap();
        let pending = |store: &Arc<Mutex<Store>>| {
            store
                .lock()
                .unwrap()
                .due_alerts(i64::MAX / 2, 10)
                .unwrap()
                .len()
        };
        // Twenty minutes of a failing store: twice as long as the batch used to be kept.
        tokio::time::sleep(Duration::from_secs(20 * 60)).await;
        assert_eq!(pending(&store), 0);
        assert!(!writer.is_finished());
        // The disk is freed: the batch is written at the next attempt, its alert queued.
        disk.execute_batch("DROP TRIGGER full_disk;").unwrap();
        tokio::time::sleep(MAX_WRITE_BACKOFF + Duration::from_secs(1)).await;
        assert_eq!(pending(&store), 1, "the trigger's outbox row");
        assert_eq!(
            store.lock().unwrap().load_states().unwrap()["gone"].1.len(),
            1,
            "the incident"
        );

        // Failing again, and shutting down: the write is given up (logged) rather than
        // holding the shutdown for as long as the store fails.
        fill_disk(&path);
        tx.send(with_trigger(2_000)).await.unwrap();
        tokio::time::sleep(Duration::from_secs(60)).await;
        closing_tx.send(true).unwrap();
        drop((tx, removals_tx));
        tokio::time::timeout(Duration::from_secs(1), writer)
            .await
            .expect("the writer stops")
            .unwrap();
        assert_eq!(pending(&store), 1);
    }
}
