//! The HTTP API: the monitor's own health, Prometheus metrics, a blackbox-style `/probe`, and a
//! read-only JSON API over the fleet and its history.
//!
//! | route | what | auth |
//! |---|---|---|
//! | `GET /livez` | the process answers: always 200, `application/health+json` | open |
//! | `GET /readyz` | config loaded, store writable, checks flowing, stored baselines readable (warn): 200 or 503, `application/health+json` (`?verbose` for text, `?exclude=<check>`) | open |
//! | `GET /metrics` | the fleet in Prometheus text or OpenMetrics | token |
//! | `GET /probe?target=&module=` | one probe now, answered as metrics (blackbox_exporter style) | token |
//! | `GET /api/v1/fleet` | counts, percentage healthy, one line per target | token |
//! | `GET /api/v1/targets` | every target's view | token |
//! | `GET /api/v1/targets/{name}` | one target: state, last check, findings, incidents, uptime stats | token |
//! | `GET /api/v1/targets/{name}/history?limit=&before=` | its checks, newest first, keyset-paged (410 for a cursor that is gone) | token |
//! | `POST /api/v1/targets/{name}/accept` | the next check's contract becomes the drift baseline; 202 (`accept_pending` in the view until then) | token, required (403 without one configured) |
//! | `GET /` , `GET /targets/{name}` | the status page (HTML, [`page`]) | token |
//! | `GET /badges/{name}/{badge}` | SVG badges and Shields endpoint JSON ([`badges`]) | token |
//! | `GET /assets/status.{css,js}` | the page's stylesheet and script (no data) | open |
//!
//! The token (`[server] token`) is a bearer token, compared in constant time; the health
//! endpoints stay open so a load balancer or kubelet needs no secret. Nothing here changes the
//! monitor but `…/accept`, which a person asks for after a planned change of a server's
//! contract, and which needs the token whatever else is open.
//!
//! `/probe` is stateless, like blackbox_exporter's: Prometheus decides what is probed and when
//! (and shards targets across any number of monitors with `hashmod`), and Alertmanager routes
//! and deduplicates. It never becomes an open proxy: `target` is a configured target's name
//! (probed exactly as configured, stdio commands included, since those come from the config
//! file) or an `http(s)://` URL, which is refused unless it is a configured target's URL or
//! `server.allow_url_probes = true`. A command can never come from a request.
//!
//! This module does not own the fleet's contents ([`crate::fleet`]) or the history (the store,
//! reached through [`HistorySource`]).

//!
//! One module per concern: `auth` (the token), `health` (`/livez`, `/readyz`), `metrics`
//! (`/metrics`), `probe` (`/probe`), `fleet` and `history` (the JSON API).
//! This one holds the router and what the handlers share.

mod auth;
mod badges;
mod fleet;
mod health;
mod history;
mod metrics;
mod page;
mod probe;

pub use page::{CSP, esc};

use crate::check::{HistoryRow, Stats};
use crate::config::Config;
use crate::fleet::Fleet;
use axum::Json;
use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The wall clock the API stamps with (kept here under its old path).
pub use crate::clock::Clock;

/// The store, as far as the API needs it. The daemon implements it over SQLite; tests over a
/// vector.
pub trait HistorySource: Send + Sync {
    /// A target's checks, newest first: at most `limit` rows that come after the row with id
    /// `before` in that order (from the newest when `None`). `before` is the id of the last
    /// row of the previous page, a keyset cursor, so pages stay stable while checks arrive.
    /// `None` when `before` is not one of the target's checks (pruned, or never its): the
    /// page cannot be placed, which is not the same as "no older checks".
    fn history(
        &self,
        target: &str,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Option<Vec<HistoryRow>>, crate::store::StoreError>;
    /// Uptime and latency over the standard windows, ending at `now_ms`.
    fn stats(&self, target: &str, now_ms: i64) -> Result<Vec<Stats>, crate::store::StoreError>;
    /// Each synthetic call's latency and errors over the same windows. None by default: a
    /// source without calls (a test's) has nothing to say.
    fn tool_stats(
        &self,
        _target: &str,
        _now_ms: i64,
    ) -> Result<Vec<crate::check::ToolStats>, crate::store::StoreError> {
        Ok(Vec::new())
    }
    /// The hourly check counts of `targets` from `from_hour` on, in one read (the status
    /// page's uptime). None by default.
    fn uptime_hours(
        &self,
        _targets: &[String],
        _from_hour: i64,
    ) -> Result<Vec<crate::store::HourCount>, crate::store::StoreError> {
        Ok(Vec::new())
    }
    /// A target's checks in `(from_ms, to_ms]`, oldest first, at most `limit` (the status
    /// page's latency chart). None by default.
    fn checks_between(
        &self,
        _target: &str,
        _from_ms: i64,
        _to_ms: i64,
        _limit: usize,
    ) -> Result<
        Vec<(i64, crate::state::Health, crate::check::PhaseTimings)>,
        crate::store::StoreError,
    > {
        Ok(Vec::new())
    }
    /// A target's recorded events, newest first. None by default.
    fn events(
        &self,
        _target: &str,
        _limit: usize,
    ) -> Result<Vec<serde_json::Value>, crate::store::StoreError> {
        Ok(Vec::new())
    }
    /// A target's alerts per sink, newest first. None by default.
    fn sent_alerts(
        &self,
        _target: &str,
        _limit: usize,
    ) -> Result<Vec<crate::store::SentAlert>, crate::store::StoreError> {
        Ok(Vec::new())
    }
    /// A target's accepted contract (the JSON of a baseline). None by default.
    fn accepted_contract(&self, _target: &str) -> Result<Option<String>, crate::store::StoreError> {
        Ok(None)
    }
}

/// How many `/probe` probes may run at once, by default. A probe is mostly waiting, but a
/// stdio one is a process: the bound keeps a scrape storm from forking without limit.
pub const DEFAULT_PROBE_CONCURRENCY: usize = 64;

/// What blackbox_exporter subtracts from Prometheus' scrape timeout, so the answer arrives
/// before Prometheus gives up (`--timeout-offset`).
pub const SCRAPE_TIMEOUT_OFFSET: Duration = Duration::from_millis(500);

/// History page sizes.
pub const DEFAULT_PAGE: usize = 50;
pub const MAX_PAGE: usize = 1000;

/// Everything the handlers share. Cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    fleet: Fleet,
    history: Arc<dyn HistorySource>,
    config: Arc<RwLock<Config>>,
    probes: Arc<Semaphore>,
    probe_limit: usize,
    /// What `/probe` probes may hold together (shared with the scheduled checks).
    memory: crate::memory::MemoryBudget,
    clock: Clock,
    started_ms: i64,
}

impl ApiState {
    /// `config` is shared with the daemon, which swaps it on reload: the token, the modules,
    /// the targets `/probe` may name and `allow_url_probes` are read from it per request.
    pub fn new(
        fleet: Fleet,
        history: Arc<dyn HistorySource>,
        config: Arc<RwLock<Config>>,
    ) -> ApiState {
        let clock = crate::clock::system();
        ApiState {
            fleet,
            history,
            config,
            probes: Arc::new(Semaphore::new(DEFAULT_PROBE_CONCURRENCY)),
            probe_limit: DEFAULT_PROBE_CONCURRENCY,
            memory: crate::memory::MemoryBudget::default(),
            started_ms: clock(),
            clock,
        }
    }

    /// The config the API reads; write a new one into it on reload.
    pub fn config_handle(&self) -> Arc<RwLock<Config>> {
        self.config.clone()
    }

    /// Bounds concurrent `/probe` probes (at least 1).
    pub fn with_probe_limit(mut self, limit: usize) -> ApiState {
        let limit = limit.max(1);
        self.probes = Arc::new(Semaphore::new(limit));
        self.probe_limit = limit;
        self
    }

    /// Bounds the memory of concurrent `/probe` probes: pass the daemon's budget, so scheduled
    /// checks and `/probe` requests share one bound (see [`crate::memory`]).
    pub fn with_memory_budget(mut self, memory: crate::memory::MemoryBudget) -> ApiState {
        self.memory = memory;
        self
    }

    /// Replaces the wall clock.
    pub fn with_clock(mut self, clock: Clock) -> ApiState {
        self.started_ms = clock();
        self.clock = clock;
        self
    }

    pub(super) fn now(&self) -> i64 {
        (self.clock)()
    }

    /// Runs `f` on the current config. Never hold the guard across an `.await`.
    pub(super) fn with_config<T>(&self, f: impl FnOnce(&Config) -> T) -> T {
        let g = self.config.read().unwrap_or_else(|p| p.into_inner());
        f(&g)
    }
}

/// The API's routes over `state`.
pub fn router(state: ApiState) -> Router {
    let protected = Router::new()
        .route("/metrics", get(metrics::metrics_handler))
        .route("/probe", get(probe::probe_handler))
        .route("/api/v1/fleet", get(fleet::fleet_handler))
        .route("/api/v1/targets", get(fleet::targets_handler))
        .route("/api/v1/targets/{name}", get(fleet::target_handler))
        .route("/api/v1/targets/{name}/accept", post(fleet::accept_handler))
        .route(
            "/api/v1/targets/{name}/history",
            get(history::history_handler),
        )
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ));
    // The status page is under the same token as the API; its assets are not (they are the
    // same for everyone and hold no data).
    let page = Router::new()
        .route("/", get(page::fleet_page))
        .route("/targets/{name}", get(page::target_page))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_token_page,
        ));
    let badges = Router::new()
        .route("/badges/{name}/{badge}", get(badges::badge_handler))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ));
    Router::new()
        .route("/livez", get(health::livez))
        .route("/assets/status.css", get(page::css))
        .route("/assets/status.js", get(page::js))
        .merge(page)
        .merge(badges)
        // The token typed once for a browser (see `auth`): sets the page's cookie.
        .route("/login", get(page::login).post(auth::login))
        .route("/readyz", get(health::readyz))
        .merge(protected)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets requests in flight
/// finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Runs `f` on the history source off the async threads (the store's lock may be held by a
/// batch being written); a failure as a sentence for the page or the badge to show.
pub(super) async fn read_history<T: Send + 'static>(
    s: &ApiState,
    f: impl FnOnce(&dyn HistorySource) -> Result<T, crate::store::StoreError> + Send + 'static,
) -> Result<T, String> {
    let history = s.history.clone();
    match tokio::task::spawn_blocking(move || f(history.as_ref())).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("the history store failed: {e}")),
        Err(e) => Err(format!("reading the history failed: {e}")),
    }
}

// ---- errors ---------------------------------------------------------------------------------

/// A JSON error: `{"status": 404, "error": "no target named \"x\""}`.
pub(super) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = json!({ "status": status.as_u16(), "error": message.into() });
    (status, Json(body)).into_response()
}

/// A plain-text error, as `/probe` answers bad parameters (blackbox_exporter does the same).
pub(super) fn text_error(status: StatusCode, message: impl Into<String>) -> Response {
    let mut m = message.into();
    m.push('\n');
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        m,
    )
        .into_response()
}

async fn not_found(req: Request) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!(
            "no such endpoint {:?}: try /livez, /readyz, /metrics, /probe, /api/v1/fleet, /api/v1/targets",
            req.uri().path()
        ),
    )
}

async fn method_not_allowed(req: Request) -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{} is not allowed here: the API is read-only (GET), but for POST /api/v1/targets/{{name}}/accept",
            req.method()
        ),
    )
}
