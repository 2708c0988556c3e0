//! The daemon: wires config, store, target tasks, the store writer, the alert outbox and the
//! HTTP API together, and handles the process signals.
//!
//! - SIGINT / SIGTERM: stop every target, flush the writer, stop the API, exit.
//! - SIGHUP: reload the config. An invalid file is reported and the running config kept; a
//!   valid one restarts only the targets whose settings changed (their state carries over),
//!   starts new ones and stops removed ones. Sinks, modules and maintenance windows are swapped
//!   in place; a new `server.listen` needs a restart (logged).

use crate::alert::Alert;
use crate::check::CheckRecord;
use crate::config::{self, AlertConfig, Config, TargetConfig};
use crate::fleet::Fleet;
use crate::runner::{self, Memory, Shared};
use crate::store::{Store, StoreError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore, mpsc, watch};
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
    let mut cfg = config::load(path, &env)?;
    for imp in &opts.imports {
        let targets = crate::import::read(imp, &cfg.defaults, &env).map_err(MonitorError::Other)?;
        for t in targets {
            if !cfg.targets.iter().any(|x| x.name == t.name) {
                cfg.targets.push(t);
            }
        }
    }
    for t in &cfg.targets {
        runner::target_and_plan(t).map_err(|e| {
            MonitorError::Other(format!("{}: target {:?}: {e}", path.display(), t.name))
        })?;
    }
    if let Some(l) = opts.listen {
        cfg.server.listen = l;
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
    let store = Store::open(&cfg.storage.path).map_err(|source| MonitorError::Store {
        path: cfg.storage.path.display().to_string(),
        source,
    })?;
    let mut resumed = store.load_states().map_err(|source| MonitorError::Store {
        path: cfg.storage.path.display().to_string(),
        source,
    })?;
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

    // The fleet view is complete (resumed states included) before the API serves it.
    let fleet = Fleet::new();
    fleet.set_config(&cfg.targets);
    let mut memories: BTreeMap<String, Memory> = BTreeMap::new();
    for t in &cfg.targets {
        let memory = resume(&store, &mut resumed, &t.name);
        fleet.resume(t, &memory.state, &memory.incidents);
        memories.insert(t.name.clone(), memory);
    }
    let sinks: Arc<RwLock<Vec<AlertConfig>>> = Arc::new(RwLock::new(cfg.alerts.clone()));
    let maintenance = Arc::new(RwLock::new(cfg.maintenance.clone()));
    let (records_tx, records_rx) = mpsc::channel::<CheckRecord>(4096);
    let wake_outbox = Arc::new(Notify::new());
    let (stop_all_tx, stop_all) = watch::channel(false);

    let writer = tokio::spawn(write_loop(
        store.clone(),
        records_rx,
        sinks.clone(),
        fleet.clone(),
        wake_outbox.clone(),
    ));
    let outbox = tokio::spawn(crate::sink::run_outbox(
        StoreOutbox {
            store: store.clone(),
        },
        sinks.clone(),
        wake_outbox.clone(),
        stop_all.clone(),
    ));
    let retention = tokio::spawn(retention_loop(
        store.clone(),
        cfg.storage.retention,
        stop_all.clone(),
    ));
    let api_state = crate::api::ApiState::new(
        fleet.clone(),
        Arc::new(StoreHistory {
            store: store.clone(),
        }),
        Arc::new(RwLock::new(cfg.clone())),
    );
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
        records: records_tx,
        fleet: fleet.clone(),
        maintenance: maintenance.clone(),
        clock: Arc::new(runner::now_ms),
    };
    let mut running: BTreeMap<String, Running> = BTreeMap::new();
    for t in &cfg.targets {
        let memory = memories.remove(&t.name).unwrap_or_default();
        start(&mut running, t.clone(), memory, &shared);
    }
    fleet.set_scheduler_running(true);

    let mut current = cfg;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = term.recv() => { tracing::info!("SIGTERM: shutting down"); break }
            _ = int.recv() => { tracing::info!("SIGINT: shutting down"); break }
            _ = hup.recv() => {
                match load(&config_path, &opts) {
                    Err(e) => tracing::error!(error = %e, "SIGHUP: the new config is invalid; keeping the running one"),
                    Ok(new) => {
                        reload(&mut running, &current, &new, &shared, &store).await;
                        *sinks.write().unwrap_or_else(|p| p.into_inner()) = new.alerts.clone();
                        *maintenance.write().unwrap_or_else(|p| p.into_inner()) = new.maintenance.clone();
                        if let Ok(mut c) = api_config.write() { *c = new.clone(); }
                        fleet.set_config(&new.targets);
                        if new.server.listen != current.server.listen && opts.listen.is_none() {
                            tracing::warn!(listen = %new.server.listen, "server.listen changed: restart the monitor to apply it");
                        }
                        tracing::info!(targets = new.targets.len(), "SIGHUP: config reloaded");
                        current = new;
                    }
                }
            }
        }
    }
    // Shutdown: targets first (no new records), then the writer drains, then the rest.
    fleet.set_scheduler_running(false);
    // Every target is told first, then all are awaited: one slow probe does not hold the
    // others' shutdown back.
    let stopping: Vec<Running> = std::mem::take(&mut running).into_values().collect();
    for r in &stopping {
        let _ = r.stop.send(true);
    }
    for r in stopping {
        let _ = r.task.await;
    }
    drop(shared);
    let _ = writer.await;
    let _ = stop_all_tx.send(true);
    let _ = outbox.await;
    let _ = retention.await;
    let _ = api.await;
    tracing::info!("mcpulse monitor stopped");
    Ok(())
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
    resumed: &mut BTreeMap<String, (crate::state::TargetState, crate::alert::Incidents)>,
    name: &str,
) -> Memory {
    let (state, incidents) = resumed.remove(name).unwrap_or_default();
    let accepted = store
        .lock()
        .ok()
        .and_then(|s| s.accepted_contract(name).ok().flatten())
        .and_then(|text| runner::Accepted::from_lock(&text).ok());
    let drift = state.last.as_ref().and_then(|o| o.drift.clone());
    Memory {
        state,
        incidents,
        accepted,
        drift_checked_ms: 0,
        drift,
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

async fn reload(
    running: &mut BTreeMap<String, Running>,
    _old: &Config,
    new: &Config,
    shared: &Shared,
    store: &Arc<Mutex<Store>>,
) {
    let names: Vec<String> = running.keys().cloned().collect();
    for name in names {
        let keep = new.targets.iter().find(|t| t.name == name);
        let changed = keep.is_none_or(|t| running.get(&name).is_some_and(|r| &r.cfg != t));
        if changed && let Some(r) = running.remove(&name) {
            let _ = r.stop.send(true);
            let memory = r.task.await.unwrap_or_default();
            match keep {
                Some(t) => {
                    tracing::info!(target = %name, "restarting with its new settings");
                    start(running, t.clone(), memory, shared);
                }
                None => {
                    tracing::info!(target = %name, "removed from the config");
                    shared.fleet.remove(&name);
                }
            }
        }
    }
    // A target added back resumes what the store remembers of it (its state, open incidents
    // and accepted contract), as after a restart.
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
            let memory = resume(store, &mut stored, &t.name);
            shared.fleet.resume(t, &memory.state, &memory.incidents);
            start(running, t.clone(), memory, shared);
        }
    }
}

/// How often a batch is tried before it is given up (about ten minutes of retrying).
const MAX_WRITE_ATTEMPTS: u32 = 64;

/// Batches check records into store transactions; wakes the outbox when alerts were stored.
async fn write_loop(
    store: Arc<Mutex<Store>>,
    mut rx: mpsc::Receiver<CheckRecord>,
    sinks: Arc<RwLock<Vec<AlertConfig>>>,
    fleet: Fleet,
    wake: Arc<Notify>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < 1000 {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let n_sinks = sinks.read().unwrap_or_else(|p| p.into_inner()).len();
        let alerts = batch.iter().any(|r| !r.alerts.is_empty());
        // A failed write is retried, not dropped: the batch holds alerts that exist nowhere
        // else. Meanwhile the bounded channel holds the checks back and /readyz says why.
        let batch = Arc::new(batch);
        let mut delay = Duration::from_millis(200);
        for attempt in 1.. {
            let (store, shared_batch) = (store.clone(), batch.clone());
            let result = tokio::task::spawn_blocking(move || {
                let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
                s.record(&shared_batch, n_sinks)
            })
            .await;
            let error = match result {
                Ok(Ok(())) => {
                    fleet.store_ok(runner::now_ms());
                    break;
                }
                Ok(Err(e)) => e.to_string(),
                Err(e) => format!("the store writer panicked: {e}"),
            };
            tracing::error!(error = %error, attempt, "writing check results failed; retrying");
            fleet.store_failed(runner::now_ms(), &error);
            if attempt >= MAX_WRITE_ATTEMPTS {
                tracing::error!(
                    records = batch.len(),
                    "giving up on a batch of check results after {MAX_WRITE_ATTEMPTS} attempts"
                );
                break;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(10));
        }
        if alerts {
            wake.notify_one();
        }
    }
}

async fn retention_loop(
    store: Arc<Mutex<Store>>,
    retention: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|v| *v) => return,
        }
        let horizon = runner::now_ms() - retention.as_millis() as i64;
        let store = store.clone();
        let pruned = tokio::task::spawn_blocking(move || {
            store
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .prune(horizon)
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

/// The store as the outbox the sink loop drains.
struct StoreOutbox {
    store: Arc<Mutex<Store>>,
}

impl crate::sink::Outbox for StoreOutbox {
    fn due(&mut self, now_ms: i64, limit: usize) -> Vec<(i64, usize, Alert, u32)> {
        let s = self.store.lock().unwrap_or_else(|p| p.into_inner());
        match s.due_alerts(now_ms, limit) {
            Ok(items) => items
                .into_iter()
                .map(|i| (i.id, i.sink, i.alert, i.attempts))
                .collect(),
            Err(e) => {
                tracing::error!(error = %e, "reading the alert outbox failed");
                Vec::new()
            }
        }
    }
    fn delivered(&mut self, id: i64, at_ms: i64) {
        if let Err(e) = self
            .store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .mark_delivered(id, at_ms)
        {
            tracing::error!(error = %e, "recording an alert delivery failed");
        }
    }
    fn failed(&mut self, id: i64, error: &str, next_ms: i64, permanent: bool) {
        let next = if permanent { i64::MAX } else { next_ms };
        if let Err(e) = self
            .store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .mark_failed(id, error, next)
        {
            tracing::error!(error = %e, "recording an alert failure failed");
        }
    }
}

/// The store as the API's history source.
struct StoreHistory {
    store: Arc<Mutex<Store>>,
}

impl crate::api::HistorySource for StoreHistory {
    fn history(
        &self,
        target: &str,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<crate::check::HistoryRow>, String> {
        self.store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .history(target, before, limit)
            .map_err(|e| e.to_string())
    }
    fn stats(&self, target: &str, now_ms: i64) -> Result<Vec<crate::check::Stats>, String> {
        self.store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stats(target, now_ms)
            .map_err(|e| e.to_string())
    }
}
