//! The HTTP API: the monitor's own health, Prometheus metrics, a blackbox-style `/probe`, and a
//! read-only JSON API over the fleet and its history.
//!
//! | route | what | auth |
//! |---|---|---|
//! | `GET /livez` | the process answers: always 200, `application/health+json` | open |
//! | `GET /readyz` | config loaded, store writable, checks flowing: 200 or 503, `application/health+json` (`?verbose` for text, `?exclude=<check>`) | open |
//! | `GET /metrics` | the fleet in Prometheus text or OpenMetrics | token |
//! | `GET /probe?target=&module=` | one probe now, answered as metrics (blackbox_exporter style) | token |
//! | `GET /api/v1/fleet` | counts, percentage healthy, one line per target | token |
//! | `GET /api/v1/targets` | every target's view | token |
//! | `GET /api/v1/targets/{name}` | one target: state, last check, findings, incidents, uptime stats | token |
//! | `GET /api/v1/targets/{name}/history?limit=&before=` | its checks, newest first, keyset-paged (410 for a cursor that is gone) | token |
//!
//! The token (`[server] token`) is a read-only bearer token, compared in constant time; the
//! health endpoints stay open so a load balancer or kubelet needs no secret. Nothing here
//! changes the monitor.
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

use crate::check::{HistoryRow, Stats};
use crate::config::{Config, Endpoint, ModuleConfig, TargetConfig};
use crate::fleet::{CheckStatus, Fleet, SelfCheck, Summary, TargetView};
use crate::metrics::{self, Format, ProbeSample};
use crate::state::Health;
use axum::Json;
use axum::Router;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use mcpulse_judge::{Policy, judge};
use mcpulse_probe::{Caller, PlanSpec, Target};
use mcpulse_wire::redact;
use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

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
    ) -> Result<Option<Vec<HistoryRow>>, String>;
    /// Uptime and latency over the standard windows, ending at `now_ms`.
    fn stats(&self, target: &str, now_ms: i64) -> Result<Vec<Stats>, String>;
}

/// Wall-clock milliseconds since the Unix epoch; an input so tests can fix it.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

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

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl ApiState {
    /// `config` is shared with the daemon, which swaps it on reload: the token, the modules,
    /// the targets `/probe` may name and `allow_url_probes` are read from it per request.
    pub fn new(
        fleet: Fleet,
        history: Arc<dyn HistorySource>,
        config: Arc<RwLock<Config>>,
    ) -> ApiState {
        let clock: Clock = Arc::new(wall_ms);
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

    fn now(&self) -> i64 {
        (self.clock)()
    }

    /// Runs `f` on the current config. Never hold the guard across an `.await`.
    fn with_config<T>(&self, f: impl FnOnce(&Config) -> T) -> T {
        let g = self.config.read().unwrap_or_else(|p| p.into_inner());
        f(&g)
    }
}

/// The API's routes over `state`.
pub fn router(state: ApiState) -> Router {
    let protected = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/probe", get(probe_handler))
        .route("/api/v1/fleet", get(fleet_handler))
        .route("/api/v1/targets", get(targets_handler))
        .route("/api/v1/targets/{name}", get(target_handler))
        .route("/api/v1/targets/{name}/history", get(history_handler))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
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

// ---- errors ---------------------------------------------------------------------------------

/// A JSON error: `{"status": 404, "error": "no target named \"x\""}`.
fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = json!({ "status": status.as_u16(), "error": message.into() });
    (status, Json(body)).into_response()
}

/// A plain-text error, as `/probe` answers bad parameters (blackbox_exporter does the same).
fn text_error(status: StatusCode, message: impl Into<String>) -> Response {
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
            "{} is not allowed here: the API is read-only (GET)",
            req.method()
        ),
    )
}

// ---- the token ------------------------------------------------------------------------------

async fn require_token(State(s): State<ApiState>, req: Request, next: Next) -> Response {
    let Some(expected) = s.with_config(|c| c.server.token.clone()) else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    match given {
        Some(token) if same_secret(token, &expected) => next.run(req).await,
        Some(_) => unauthorized("the bearer token is not valid"),
        None => unauthorized(
            "this endpoint needs the API token: send Authorization: Bearer <token> (/livez and /readyz are open)",
        ),
    }
}

fn unauthorized(message: &str) -> Response {
    let mut r = error(StatusCode::UNAUTHORIZED, message);
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"mcpulse\""),
    );
    r
}

/// The token of an `Authorization: Bearer <token>` value (the scheme is case-insensitive).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Compares two secrets in constant time. Both are hashed first, so neither the position of
/// the first difference nor the length of the expected token shows in the timing.
fn same_secret(given: &str, expected: &str) -> bool {
    let a = Sha256::digest(given.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    let diff = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

// ---- health ---------------------------------------------------------------------------------

const HEALTH_JSON: &str = "application/health+json";

/// Renders checks as the health+json draft (draft-inadarei-api-health-check-06) has them.
fn health_json(status: CheckStatus, description: &str, checks: &[SelfCheck]) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    for c in checks {
        let mut o = serde_json::Map::new();
        o.insert("componentType".into(), c.component_type.into());
        if let Some(v) = &c.observed_value {
            o.insert("observedValue".into(), v.clone());
        }
        if let Some(u) = c.observed_unit {
            o.insert("observedUnit".into(), u.into());
        }
        o.insert("status".into(), c.status.as_str().into());
        if let Some(t) = c.time_ms {
            o.insert("time".into(), rfc3339(t).into());
        }
        if let Some(out) = &c.output {
            o.insert("output".into(), out.clone().into());
        }
        map.insert(c.key.into(), serde_json::Value::Array(vec![o.into()]));
    }
    let mut body = json!({
        "status": status.as_str(),
        "version": env!("CARGO_PKG_VERSION"),
        "serviceId": "mcpulse",
        "description": description,
        "checks": map,
    });
    if status != CheckStatus::Pass
        && let Some(out) = checks
            .iter()
            .filter(|c| c.status == status)
            .find_map(|c| c.output.clone())
        && let Some(o) = body.as_object_mut()
    {
        o.insert("output".into(), out.into());
    }
    body
}

use mcpulse_wire::units::format_rfc3339 as rfc3339;

fn health_response(
    status: CheckStatus,
    description: &str,
    checks: &[SelfCheck],
    verbose: bool,
    what: &str,
) -> Response {
    // pass and warn are 2xx, fail is 5xx: the status code is the contract.
    let code = if status == CheckStatus::Fail {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let (content_type, body) = if verbose {
        let mut text = String::new();
        for c in checks {
            match (c.status, &c.output) {
                (CheckStatus::Fail, Some(o)) => {
                    text.push_str(&format!("[-]{} failed: {o}\n", c.name))
                }
                (CheckStatus::Fail, None) => text.push_str(&format!("[-]{} failed\n", c.name)),
                (CheckStatus::Warn, Some(o)) => {
                    text.push_str(&format!("[+]{} ok (warn: {o})\n", c.name))
                }
                _ => text.push_str(&format!("[+]{} ok\n", c.name)),
            }
        }
        let verdict = if status == CheckStatus::Fail {
            "failed"
        } else {
            "passed"
        };
        text.push_str(&format!("{what} check {verdict}\n"));
        ("text/plain; charset=utf-8", text)
    } else {
        (
            HEALTH_JSON,
            health_json(status, description, checks).to_string(),
        )
    };
    (
        code,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// Query flags as kube-apiserver takes them: `?verbose`, `?exclude=a&exclude=b`.
fn health_params(q: Result<Query<Vec<(String, String)>>, QueryRejection>) -> (bool, Vec<String>) {
    let pairs = q.map(|Query(p)| p).unwrap_or_default();
    let verbose = pairs
        .iter()
        .any(|(k, v)| k == "verbose" && v != "false" && v != "0");
    let exclude = pairs
        .into_iter()
        .filter(|(k, _)| k == "exclude")
        .map(|(_, v)| v)
        .collect();
    (verbose, exclude)
}

async fn livez(
    State(s): State<ApiState>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let (verbose, _) = health_params(q);
    let now = s.now();
    // Answering at all is the liveness signal; the uptime is there for people.
    let checks = [SelfCheck {
        key: "process:uptime",
        name: "process",
        component_type: "system",
        status: CheckStatus::Pass,
        observed_value: Some(((now - s.started_ms).max(0) / 1000).into()),
        observed_unit: Some("s"),
        time_ms: Some(now),
        output: None,
    }];
    health_response(
        CheckStatus::Pass,
        "mcpulse monitor liveness",
        &checks,
        verbose,
        "livez",
    )
}

async fn readyz(
    State(s): State<ApiState>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let (verbose, exclude) = health_params(q);
    let checks: Vec<SelfCheck> = s
        .fleet
        .snapshot()
        .readiness(s.now())
        .into_iter()
        .filter(|c| !exclude.iter().any(|e| e == c.name))
        .collect();
    let status = checks
        .iter()
        .map(|c| c.status)
        .max()
        .unwrap_or(CheckStatus::Pass);
    health_response(
        status,
        "mcpulse monitor readiness: config loaded, store writable, checks flowing",
        &checks,
        verbose,
        "readyz",
    )
}

// ---- metrics --------------------------------------------------------------------------------

fn exposition(format: Format, text: Result<String, std::fmt::Error>) -> Response {
    match text {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, format.content_type())],
            body,
        )
            .into_response(),
        Err(_) => text_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "encoding the metrics failed",
        ),
    }
}

fn accepted_format(headers: &HeaderMap) -> Format {
    Format::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()))
}

async fn metrics_handler(State(s): State<ApiState>, headers: HeaderMap) -> Response {
    let format = accepted_format(&headers);
    exposition(format, metrics::fleet(s.fleet.snapshot(), format))
}

// ---- /probe ---------------------------------------------------------------------------------

/// What `/probe` resolved its `target` to.
enum ProbeTarget {
    /// A configured target, probed with its own settings.
    Configured(Box<TargetConfig>),
    /// A URL outside the config, probed with the module's settings.
    Url(String),
}

/// Why a `/probe` request is refused, with the status it gets.
struct Refusal(StatusCode, String);

fn bad(message: impl Into<String>) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, message.into())
}

/// `/probe`'s parameters, validated.
struct ProbeParams {
    target: String,
    module: Option<String>,
    debug: bool,
}

fn probe_params(pairs: Vec<(String, String)>) -> Result<ProbeParams, Refusal> {
    let mut target = None;
    let mut module = None;
    let mut debug = false;
    for (k, v) in pairs {
        match k.as_str() {
            "target" if target.is_some() => return Err(bad("give the target parameter once")),
            "target" => target = Some(v),
            "module" if module.is_some() => return Err(bad("give the module parameter once")),
            "module" => module = Some(v),
            "debug" => debug = v == "true" || v == "1",
            // Other parameters (blackbox's `hostname`, a relabeled `__param_*`) are ignored.
            _ => {}
        }
    }
    let target = target.filter(|t| !t.trim().is_empty()).ok_or_else(|| {
        bad("target parameter is missing: /probe?target=<configured name or URL>&module=<module>")
    })?;
    Ok(ProbeParams {
        target,
        module,
        debug,
    })
}

/// Resolves `target` against the config: a name, a configured URL, or (only if allowed) any
/// http(s) URL. Never a command.
fn resolve(cfg: &Config, target: &str) -> Result<ProbeTarget, Refusal> {
    if let Some(t) = cfg.targets.iter().find(|t| t.name == target) {
        return Ok(ProbeTarget::Configured(Box::new(t.clone())));
    }
    if !target.contains("://") {
        return Err(bad(format!(
            "no target named {target:?} in the config: give a configured target's name or an http(s):// URL"
        )));
    }
    if let Some(t) = cfg
        .targets
        .iter()
        .find(|t| matches!(&t.endpoint, Endpoint::Url(u) if u == target))
    {
        return Ok(ProbeTarget::Configured(Box::new(t.clone())));
    }
    let lower = target.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err(bad(format!(
            "{:?} is not an http:// or https:// URL; only configured targets (by name) can be other kinds",
            redact::url(target)
        )));
    }
    if !cfg.server.allow_url_probes {
        return Err(Refusal(
            StatusCode::FORBIDDEN,
            format!(
                "probing URLs outside the config is disabled: {:?} is not a configured target. Add it as a target, or set allow_url_probes = true in [server]",
                redact::url(target)
            ),
        ));
    }
    Ok(ProbeTarget::Url(target.to_owned()))
}

/// The probe target for a configured target, as the scheduler builds it. The server's
/// environment goes through `env` (no shell); it is never shown, the display comes from the
/// fleet view.
/// The probe's timeout: the configured one, bounded by Prometheus' scrape timeout less the
/// offset (blackbox_exporter's rule). Half the scrape timeout at least, so a short scrape
/// timeout still leaves the probe something.
fn probe_timeout(configured: Duration, headers: &HeaderMap) -> Result<Duration, Refusal> {
    let Some(v) = headers.get("x-prometheus-scrape-timeout-seconds") else {
        return Ok(configured);
    };
    let secs = v
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .ok_or_else(|| {
            bad(format!(
                "X-Prometheus-Scrape-Timeout-Seconds {:?} is not a positive number of seconds",
                String::from_utf8_lossy(v.as_bytes())
            ))
        })?;
    let scrape = Duration::from_secs_f64(secs.min(86_400.0));
    let budget = scrape.saturating_sub(SCRAPE_TIMEOUT_OFFSET).max(scrape / 2);
    Ok(configured.min(budget))
}

/// Decrements the in-flight count however the request ends (a client that hangs up drops
/// the handler's future, and with it the probe, whose stdio children are killed on drop).
struct InFlight(Fleet);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.probe_finished();
    }
}

async fn probe_handler(
    State(s): State<ApiState>,
    headers: HeaderMap,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    match run_probe(&s, &headers, q).await {
        Ok(r) => r,
        Err(Refusal(status, message)) => text_error(status, message),
    }
}

async fn run_probe(
    s: &ApiState,
    headers: &HeaderMap,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, Refusal> {
    let Query(pairs) = q.map_err(|e| bad(format!("the query string is malformed: {e}")))?;
    let params = probe_params(pairs)?;
    let module_name = params.module.clone().unwrap_or_else(|| "default".into());
    let (resolved, module) =
        s.with_config(|cfg| -> Result<(ProbeTarget, ModuleConfig), Refusal> {
            let module = cfg.modules.get(&module_name).cloned().ok_or_else(|| {
                let known: Vec<&str> = cfg.modules.keys().map(String::as_str).collect();
                bad(format!(
                    "unknown module {module_name:?}: the config defines {}",
                    known.join(", ")
                ))
            })?;
            Ok((resolve(cfg, &params.target)?, module))
        })?;

    // A configured target is probed exactly as the scheduler probes it; a URL with the module.
    let (target, mut plan, latency_budget, graded, shown) = match &resolved {
        ProbeTarget::Configured(t) => {
            let (target, plan) = crate::runner::target_and_plan(t).map_err(|e| {
                Refusal(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("target {:?} cannot be probed: {e}", t.name),
                )
            })?;
            (target, plan, t.latency_budget, t.security, t.name.clone())
        }
        ProbeTarget::Url(u) => {
            let target = Target::http(u).map_err(|e| bad(e.to_string()))?;
            let plan = PlanSpec {
                era: module.era,
                timeout: Some(module.timeout),
                headers: module.headers.clone(),
                security: module.security,
                ..PlanSpec::new(Caller::Monitor)
            }
            .plan(&target);
            (
                target,
                plan,
                module.latency_budget,
                module.security,
                redact::url(u),
            )
        }
    };
    let timeout = probe_timeout(plan.timeout, headers)?;
    let started = Instant::now();

    // Wait for a slot, but not past the budget: Prometheus would give up anyway, and a 503
    // (the scrape fails, `up` is 0) says "the prober is saturated" rather than "the target is
    // down".
    // A slot, then the probe's memory (see `crate::memory`), both within the budget.
    let slot = async {
        let count = s.probes.clone().acquire_owned().await?;
        let memory = s.memory.acquire(plan.max_response_bytes).await?;
        Ok::<_, tokio::sync::AcquireError>((count, memory))
    };
    let permit = match tokio::time::timeout(timeout, slot).await {
        Ok(Ok(p)) => p,
        _ => {
            return Err(Refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "too many probes in flight (the limit is {} probes or {} MiB of their memory); add monitor instances or lower the scrape rate",
                    s.probe_limit,
                    s.memory.total() >> 20
                ),
            ));
        }
    };
    let remaining = timeout.saturating_sub(started.elapsed());
    if remaining < Duration::from_millis(10) {
        return Err(Refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "the scrape timeout ran out while waiting for a probe slot".into(),
        ));
    }
    plan.timeout = remaining;

    s.fleet.probe_started();
    let in_flight = InFlight(s.fleet.clone());
    let probe_started = Instant::now();
    let transcript = mcpulse_probe::probe(&target, &plan).await;
    let duration = probe_started.elapsed();
    drop(in_flight);
    // Judging is where a reply's memory is spent: the permit is held until it is done.
    let mut report = judge(
        &transcript,
        &Policy {
            latency_budget_ms: latency_budget.as_secs_f64() * 1000.0,
            expect_auth: false,
        },
    );
    crate::runner::hide_in_report(&mut report, &plan.secrets);
    drop(transcript);
    drop(permit);
    tracing::debug!(target = %shown, module = %module_name, status = report.status.as_str(), ms = duration.as_secs_f64() * 1000.0, "probe request");

    let format = if params.debug {
        Format::Prometheus
    } else {
        accepted_format(headers)
    };
    let sample = ProbeSample {
        report,
        duration_seconds: duration.as_secs_f64(),
        timeout_seconds: timeout.as_secs_f64(),
        graded,
    };
    if params.debug {
        let text = debug_text(&shown, &module_name, &sample);
        return Ok(match text {
            Ok(t) => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                t,
            )
                .into_response(),
            Err(_) => text_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding the metrics failed",
            ),
        });
    }
    Ok(exposition(format, metrics::probe(sample, format)))
}

/// `debug=true`: what the probe saw, then the metrics it would have returned (as
/// blackbox_exporter's debug output).
///
/// Read by people (curl in a terminal): the target, the protocol version and the findings are
/// made inert ([`mcpulse_wire::text`]), as in the CLI's summary.
fn debug_text(shown: &str, module: &str, sample: &ProbeSample) -> Result<String, std::fmt::Error> {
    use mcpulse_wire::text;
    let r = &sample.report;
    let mut t = format!(
        "Probe of {} with module {module:?}, timeout {:.3}s, took {:.3}s\n",
        text::message(shown),
        sample.timeout_seconds,
        sample.duration_seconds
    );
    t.push_str(&format!("Status: {}\n", r.status.as_str()));
    if let Some(era) = r.era {
        t.push_str(&format!(
            "Protocol: {} {}\n",
            era.as_str(),
            text::field(r.protocol_version.as_deref().unwrap_or("?"))
        ));
    }
    let tm = &r.timings_ms;
    t.push_str("Timings (ms):");
    for (name, v) in [
        ("dns", tm.dns),
        ("connect", tm.connect),
        ("tls", tm.tls),
        ("handshake", tm.handshake),
        ("tools_list", tm.tools_list),
        ("total", Some(tm.total)),
    ] {
        if let Some(v) = v {
            t.push_str(&format!(" {name}={v:.1}"));
        }
    }
    t.push('\n');
    t.push_str("Findings:\n");
    if r.findings.is_empty() {
        t.push_str("  (none)\n");
    }
    for f in &r.findings {
        t.push_str(&format!(
            "  {} {}: {}\n",
            f.severity.as_str(),
            f.code,
            text::message(&f.message)
        ));
    }
    t.push_str("\nMetrics that would have been returned:\n");
    t.push_str(&metrics::probe(sample.clone(), Format::Prometheus)?);
    Ok(t)
}

// ---- the JSON API ---------------------------------------------------------------------------

/// One line of the fleet summary.
#[derive(Debug, Serialize)]
struct FleetLine<'a> {
    name: &'a str,
    kind: &'a str,
    status: Health,
    since_ms: Option<i64>,
    flapping: bool,
    last_check_ms: Option<i64>,
    last_status: Option<Health>,
    open_incidents: usize,
}

#[derive(Debug, Serialize)]
struct FleetBody<'a> {
    #[serde(flatten)]
    summary: Summary,
    generated_at_ms: i64,
    targets: Vec<FleetLine<'a>>,
}

async fn fleet_handler(State(s): State<ApiState>) -> Response {
    let snap = s.fleet.snapshot();
    let body = FleetBody {
        summary: snap.summary(),
        generated_at_ms: s.now(),
        targets: snap
            .targets
            .iter()
            .map(|v| FleetLine {
                name: &v.name,
                kind: v.kind,
                status: v.status,
                since_ms: v.since_ms,
                flapping: v.flapping,
                last_check_ms: v.last.as_ref().map(|l| l.at_ms),
                last_status: v.last.as_ref().map(|l| l.status),
                open_incidents: v.incidents.len(),
            })
            .collect(),
    };
    Json(body).into_response()
}

async fn targets_handler(State(s): State<ApiState>) -> Response {
    Json(json!({ "targets": s.fleet.snapshot().targets })).into_response()
}

#[derive(Debug, Serialize)]
struct TargetBody {
    #[serde(flatten)]
    view: TargetView,
    /// Uptime and latency windows; `null` with `stats_error` when the store failed.
    stats: Option<Vec<Stats>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stats_error: Option<String>,
}

fn target_name(p: Result<Path<String>, PathRejection>) -> Result<String, String> {
    p.map(|Path(n)| n)
        .map_err(|e| format!("the target name in the path is malformed: {e}"))
}

fn unknown_target(name: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("no target named {name:?}: /api/v1/targets lists them"),
    )
}

async fn target_handler(
    State(s): State<ApiState>,
    p: Result<Path<String>, PathRejection>,
) -> Response {
    let name = match target_name(p) {
        Ok(n) => n,
        Err(m) => return error(StatusCode::BAD_REQUEST, m),
    };
    let Some(view) = s.fleet.get(&name) else {
        return unknown_target(&name);
    };
    let now = s.now();
    let history = s.history.clone();
    let stats = tokio::task::spawn_blocking(move || history.stats(&name, now)).await;
    let (stats, stats_error) = match stats {
        Ok(Ok(st)) => (Some(st), None),
        Ok(Err(e)) => (None, Some(format!("the history store failed: {e}"))),
        Err(e) => (None, Some(format!("reading the stats failed: {e}"))),
    };
    Json(TargetBody {
        view,
        stats,
        stats_error,
    })
    .into_response()
}

#[derive(Debug, Serialize)]
struct HistoryBody {
    target: String,
    limit: usize,
    before: Option<i64>,
    items: Vec<HistoryRow>,
    /// The `before` of the next (older) page; `null` on the last page.
    next_before: Option<i64>,
    /// The next page's path and query; `null` on the last page.
    next: Option<String>,
}

async fn history_handler(
    State(s): State<ApiState>,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let name = match target_name(p) {
        Ok(n) => n,
        Err(m) => return error(StatusCode::BAD_REQUEST, m),
    };
    let pairs = match q {
        Ok(Query(p)) => p,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the query string is malformed: {e}"),
            );
        }
    };
    let mut limit = DEFAULT_PAGE;
    let mut before = None;
    for (k, v) in pairs {
        match k.as_str() {
            "limit" => match v.parse::<usize>() {
                Ok(n) if (1..=MAX_PAGE).contains(&n) => limit = n,
                _ => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("limit {v:?} must be a whole number from 1 to {MAX_PAGE}"),
                    );
                }
            },
            "before" => match v.parse::<i64>() {
                Ok(n) => before = Some(n),
                Err(_) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "before {v:?} must be a check id (the next_before of the previous page)"
                        ),
                    );
                }
            },
            other => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("unknown parameter {other:?}: use limit and before"),
                );
            }
        }
    }
    if !s.fleet.contains(&name) {
        return unknown_target(&name);
    }
    let history = s.history.clone();
    let target = name.clone();
    // One row more than asked tells whether another page exists.
    let rows =
        tokio::task::spawn_blocking(move || history.history(&target, before, limit + 1)).await;
    let mut items = match rows {
        Ok(Ok(Some(rows))) => rows,
        // An empty page here would end the client's paging as if it had reached the oldest
        // check; 410 says the cursor is gone and what to do.
        Ok(Ok(None)) => {
            return error(
                StatusCode::GONE,
                format!(
                    "before={} is not a check in the history of {name:?}: it was pruned (checks older than the retention are deleted, and the ones before it with it) or is not one of this target's checks; page again from the newest, without before",
                    before.unwrap_or_default()
                ),
            );
        }
        Ok(Err(e)) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the history store failed: {e}"),
            );
        }
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the history failed: {e}"),
            );
        }
    };
    let more = items.len() > limit;
    items.truncate(limit);
    let next_before = if more {
        items.last().map(|r| r.id)
    } else {
        None
    };
    let next = next_before.map(|b| {
        format!(
            "/api/v1/targets/{}/history?limit={limit}&before={b}",
            encode_segment(&name)
        )
    });
    Json(HistoryBody {
        target: name,
        limit,
        before,
        items,
        next_before,
        next,
    })
    .into_response()
}

/// Percent-encodes a path segment (everything but RFC 3986 unreserved characters).
fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("ab", "abc"));
    }

    #[test]
    fn scrape_timeouts() {
        let ten = Duration::from_secs(10);
        let mut h = HeaderMap::new();
        assert_eq!(probe_timeout(ten, &h).ok(), Some(ten));
        h.insert(
            "x-prometheus-scrape-timeout-seconds",
            HeaderValue::from_static("5"),
        );
        assert_eq!(
            probe_timeout(ten, &h).ok(),
            Some(Duration::from_millis(4500))
        );
        h.insert(
            "x-prometheus-scrape-timeout-seconds",
            HeaderValue::from_static("0.6"),
        );
        assert_eq!(
            probe_timeout(ten, &h).ok(),
            Some(Duration::from_millis(300))
        );
        h.insert(
            "x-prometheus-scrape-timeout-seconds",
            HeaderValue::from_static("60"),
        );
        assert_eq!(probe_timeout(ten, &h).ok(), Some(ten));
        h.insert(
            "x-prometheus-scrape-timeout-seconds",
            HeaderValue::from_static("soon"),
        );
        assert!(probe_timeout(ten, &h).is_err());
    }

    #[test]
    fn segments() {
        assert_eq!(encode_segment("a b/c"), "a%20b%2Fc");
        assert_eq!(encode_segment("files-1.x"), "files-1.x");
    }
}
