//! The health side (issue #19 parts 2–4): the three layers (process, protocol, dependencies)
//! computed from cached results, served as `/livez` and `/readyz` (application/health+json,
//! through mcpulse_policy::health), folded into the opt-in `health_check` MCP tool, and exported
//! on `/metrics`. Nothing here runs on a request's path but reading the cache.
//!
//! The interface the serving side uses:
//! - [`start`]: the health side's tasks (the event-loop ticker, the protocol prober, the
//!   dependency checks), from [`Settings`]; the command calls it once and keeps the
//!   [`Running`] handle (dropping it stops them);
//! - [`router`]: the health endpoints, mounted on `/mcp`'s listener or a listener of their own;
//! - [`Registry`]: lives in [`crate::state::Shared`]; holds the check cache and the readiness;
//! - [`observe_protocol`]: whoever observes the upstream's handshake and `tools/list` reports it
//!   here (the prober [`start`] runs does);
//! - [`tool_descriptor`] / [`tool_result`]: the `health_check` tool added to `tools/list` and
//!   answered by the gateway.
//!
//! The rules (docs/gateway.md `## Health endpoints`):
//! - `/livez` is the gateway's event loop (a ticker task's last tick is at most
//!   [`TICK_STALE`] old) and, for a stdio upstream, the upstream process: `fail` only when the
//!   restart budget is spent (`Fatal`), which a restart of the pod can mend. An HTTP upstream
//!   is never part of liveness: it is another service, restarting the gateway does not mend
//!   it, and a slow dependency must never get the pod killed. Dependencies are never in it.
//! - `/readyz` is `process` (the upstream is up: not starting, not between restarts or
//!   reconnects), `protocol` (the handshake or `server/discover` answered), `tools`
//!   (`tools/list` returned at least `min_tools`), and each dependency check. `protocol` and
//!   `tools` go through the same thresholds as a check (the first observation is taken as it
//!   is, so readiness comes with the first good probe; after that one failed probe flips
//!   nothing). A critical dependency that fails is `fail` (503); a non-critical one, or any
//!   degraded one, is `warn` (200).
//!
//! Bounds: the registry keeps, per configured check (a fixed set) and for `protocol` and
//! `tools`, one confirmed level and the last result, whose output is at most
//! [`checks::MAX_OUTPUT_CHARS`] characters, inert; nothing grows with time or traffic. A
//! `/readyz` body is therefore a few hundred bytes per check.

mod protocol;

/// `process:state` when every child of a stdio upstream was given up on.
const GIVEN_UP: &str = "the upstream's restart budget is spent, or its command could not be started: every child was given up on (the readiness child is replaced after a backoff)";
use crate::checks::{self, Check, Context, Kind, Task};
use crate::state::{ProcessState, Protocol, Shared};
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use mcpulse_policy::check::{self as policy, Raw, Thresholds, Transition};
use mcpulse_policy::health::{self as model, Check as Item, CheckStatus, Health};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
// tokio's clock, so that a test under paused time can age the ticker's last tick.
use tokio::time::Instant;

pub use protocol::protocol_from;

/// How often the event-loop ticker ticks.
pub const TICK: Duration = Duration::from_secs(1);
/// A last tick older than this fails `/livez`: the runtime's timers no longer fire.
pub const TICK_STALE: Duration = Duration::from_secs(10);
/// The readiness probe's interval by default (Kubernetes' `periodSeconds` default).
pub const DEFAULT_READINESS_INTERVAL: Duration = Duration::from_secs(10);
/// The readiness probe's timeout by default.
pub const DEFAULT_READINESS_TIMEOUT: Duration = Duration::from_secs(5);
/// `min_tools` by default: a server whose tool registry is empty is not ready (the seed's
/// tool-registry check). A server with no tools at all sets 0.
pub const DEFAULT_MIN_TOOLS: usize = 1;
/// The OpenMetrics content type `/metrics` answers with.
pub const OPENMETRICS: &str = mcpulse_relay::endpoints::OPENMETRICS;

/// What kind of upstream the gateway fronts (it decides what `/livez` includes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamKind {
    #[default]
    Stdio,
    Http,
}

/// The health side's settings (the command builds them from the resolved config).
#[derive(Debug, Clone)]
pub struct Settings {
    pub upstream: UpstreamKind,
    /// `/readyz` needs at least this many tools from `tools/list`.
    pub min_tools: usize,
    /// The MCP endpoint the readiness probe and `tool` checks probe: the gateway's own `/mcp`
    /// on loopback (`http://127.0.0.1:PORT/mcp`: the whole path, either upstream kind), or
    /// the upstream itself. `None`: no prober runs (the serving side reports the protocol
    /// through [`observe_protocol`] itself).
    pub mcp: Option<mcpulse_probe::Target>,
    /// Whether the prober probes `mcp` for readiness. `false`: the serving side observes the
    /// protocol itself (a stdio upstream's readiness session) and `mcp` only serves `tool`
    /// checks.
    pub probe_protocol: bool,
    pub readiness_interval: Duration,
    pub readiness_timeout: Duration,
    /// The thresholds of `protocol` and `tools` (`degraded_latency`: a handshake plus
    /// `tools/list` slower than it is `warn`).
    pub protocol_thresholds: Thresholds,
    /// The gateway's own `health_check` tool, when it is enabled (its configured name): not
    /// counted among the upstream's tools, and never called by a `tool` check (it would
    /// report on itself).
    pub own_tool: Option<String>,
    /// The dependency checks, validated (`CheckSpec::resolve`).
    pub checks: Vec<Check>,
    /// Where `tool` checks call their tool instead of probing `mcp` (a stdio upstream's
    /// readiness session: see [`checks::ToolSession`]).
    pub session: Option<checks::Session>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            upstream: UpstreamKind::Stdio,
            min_tools: DEFAULT_MIN_TOOLS,
            mcp: None,
            probe_protocol: true,
            readiness_interval: DEFAULT_READINESS_INTERVAL,
            readiness_timeout: DEFAULT_READINESS_TIMEOUT,
            protocol_thresholds: Thresholds::default(),
            own_tool: None,
            checks: Vec::new(),
            session: None,
        }
    }
}

/// One dependency check in the cache.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    kind: Kind,
    component_id: String,
    component_type: &'static str,
    critical: bool,
    thresholds: Thresholds,
    state: policy::State,
}

#[derive(Debug)]
struct Inner {
    upstream: UpstreamKind,
    min_tools: usize,
    protocol_thresholds: Thresholds,
    checks: Vec<Entry>,
    protocol: policy::State,
    tools: policy::State,
    /// The ticker's last tick; None while no ticker runs.
    last_tick: Option<Instant>,
}

impl Default for Inner {
    fn default() -> Inner {
        let s = Settings::default();
        Inner {
            upstream: s.upstream,
            min_tools: s.min_tools,
            protocol_thresholds: s.protocol_thresholds,
            checks: Vec::new(),
            protocol: policy::State::new(),
            tools: policy::State::new(),
            last_tick: None,
        }
    }
}

/// The cached check results and the readiness computed from them.
#[derive(Debug, Default)]
pub struct Registry {
    inner: Mutex<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep serving it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Registry {
    /// Takes the settings that readiness reads (what [`start`] does first; tests call it to
    /// fill a [`Shared`] by hand).
    pub fn configure(&self, settings: &Settings) {
        let mut i = lock(&self.inner);
        i.upstream = settings.upstream;
        i.min_tools = settings.min_tools;
        i.protocol_thresholds = settings.protocol_thresholds;
    }

    /// Adds a dependency check (not run yet: `fail` if critical, `warn` otherwise, until its
    /// first result). Registering a name again replaces it.
    pub fn register(&self, check: &Check) {
        let entry = Entry {
            name: check.name.clone(),
            kind: check.kind(),
            component_id: check.component_id(),
            component_type: check.component_type(),
            critical: check.critical,
            thresholds: check.thresholds,
            state: policy::State::new(),
        };
        let mut i = lock(&self.inner);
        match i.checks.iter_mut().find(|e| e.name == check.name) {
            Some(e) => *e = entry,
            None => i.checks.push(entry),
        }
    }

    /// How many results a check has had (0 for an unknown name).
    pub fn runs(&self, name: &str) -> u64 {
        lock(&self.inner)
            .checks
            .iter()
            .find(|e| e.name == name)
            .map_or(0, |e| e.state.runs)
    }

    /// Marks the event loop alive (the ticker's).
    pub fn tick(&self) {
        lock(&self.inner).last_tick = Some(Instant::now());
    }

    /// A check's confirmed status (None before its first result, or for an unknown name).
    pub fn confirmed(&self, name: &str) -> Option<CheckStatus> {
        lock(&self.inner)
            .checks
            .iter()
            .find(|e| e.name == name)
            .and_then(|e| e.state.confirmed)
    }
}

/// Folds a dependency check's result in (the check runner's), logs a change of its confirmed
/// level and updates its metrics.
pub fn record(shared: &Shared, name: &str, raw: Raw, now_ms: i64) -> Option<Transition> {
    let latency = raw.latency;
    let (transition, confirmed) = {
        let mut i = lock(&shared.health.inner);
        let entry = i.checks.iter_mut().find(|e| e.name == name)?;
        let output = raw.output.clone();
        let thresholds = entry.thresholds;
        let t = entry.state.observe(raw, now_ms, &thresholds);
        if let Some(t) = t {
            tracing::info!(
                check = name,
                from = t.from.map_or("none", CheckStatus::as_str),
                to = t.to.as_str(),
                output = output.as_deref().unwrap_or(""),
                "dependency check changed"
            );
        }
        (t, entry.state.confirmed)
    };
    shared.metrics.set_check(name, confirmed, latency);
    transition
}

/// Reports an observation of the upstream's protocol (the handshake or `server/discover`,
/// then `tools/list`): kept in [`Shared`] as the last one, and folded into the `protocol` and
/// `tools` levels with their thresholds.
pub fn observe_protocol(shared: &Shared, p: Protocol) {
    {
        let mut i = lock(&shared.health.inner);
        let t = i.protocol_thresholds;
        let latency = Some(p.latency);
        let handshake = if p.handshake_ok {
            Raw {
                status: CheckStatus::Pass,
                latency,
                output: None,
            }
        } else {
            Raw {
                status: CheckStatus::Fail,
                latency,
                output: p.error.clone(),
            }
        };
        let tools = match p.tools {
            Some(n) if n >= i.min_tools => Raw {
                status: CheckStatus::Pass,
                latency: None,
                output: None,
            },
            Some(n) => Raw {
                status: CheckStatus::Fail,
                latency: None,
                output: Some(format!(
                    "tools/list returned {n} tools; at least {} are required (min_tools)",
                    i.min_tools
                )),
            },
            None => Raw {
                status: CheckStatus::Fail,
                latency: None,
                output: Some(if p.handshake_ok {
                    p.error
                        .clone()
                        .unwrap_or_else(|| "tools/list failed".to_owned())
                } else {
                    "tools/list not reached: the handshake failed".to_owned()
                }),
            },
        };
        // Tools never degrade on latency: their time is the protocol's.
        let tools_t = Thresholds {
            degraded_latency: None,
            ..t
        };
        for (what, tr) in [
            ("protocol", i.protocol.observe(handshake, p.at_ms, &t)),
            ("tools", i.tools.observe(tools, p.at_ms, &tools_t)),
        ] {
            if let Some(tr) = tr {
                tracing::info!(
                    component = what,
                    from = tr.from.map_or("none", CheckStatus::as_str),
                    to = tr.to.as_str(),
                    "readiness changed"
                );
            }
        }
    }
    shared.update_upstream(|u| u.protocol = Some(p));
}

use model::ms;

fn process_word(p: ProcessState) -> &'static str {
    match p {
        ProcessState::Starting => "STARTING",
        ProcessState::Up => "UP",
        ProcessState::Backoff => "BACKOFF",
        ProcessState::Fatal => "FATAL",
    }
}

fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// `/livez`'s document (see the module docs for the rules).
pub fn liveness(shared: &Shared) -> Health {
    let (upstream_kind, last_tick) = {
        let i = lock(&shared.health.inner);
        (i.upstream, i.last_tick)
    };
    let up = shared.upstream();
    let mut checks = Vec::new();
    if let Some(t) = last_tick {
        let age = t.elapsed();
        let mut c = Item::new("eventloop:tickAge", "eventloop", "system")
            .observed(ms(age), "ms")
            .at(checks::now_ms());
        if age > TICK_STALE {
            c = c.status(CheckStatus::Fail).output(format!(
                "the event loop's ticker last ran {} ago: timers are not firing",
                mcpulse_wire::units::human_duration(age.as_millis())
            ));
        }
        checks.push(c);
    }
    // Its time is now: the state is read live from the serving side, not cached.
    let mut process = Item::new("process:state", "process", "component")
        .observed(process_word(up.process), "state")
        .at(checks::now_ms());
    match upstream_kind {
        UpstreamKind::Stdio if up.process == ProcessState::Fatal => {
            process = process.status(CheckStatus::Fail).output(GIVEN_UP);
        }
        UpstreamKind::Stdio => {}
        UpstreamKind::Http => {
            process = process.output("an HTTP upstream is not part of liveness");
        }
    }
    checks.push(process);
    let h = Health {
        service_id: "mcpulse".into(),
        version: version().into(),
        description: "mcpulse gateway liveness".into(),
        checks,
    };
    shared.metrics.set_liveness(h.status());
    h
}

fn level_item(key: &'static str, name: &'static str, state: &policy::State, not_yet: &str) -> Item {
    let mut c = Item::new(key, name, "component");
    match state.confirmed {
        None => c.status(CheckStatus::Fail).output(not_yet),
        Some(level) => {
            c = c
                .status(level)
                .with("since", mcpulse_wire::units::format_rfc3339(state.since_ms));
            if let Some((raw, last, at)) = &state.last {
                c = c.at(*at);
                if *last != level {
                    c = c.with("last", last.as_str());
                }
                if let Some(o) = &raw.output {
                    c = c.output(o.clone());
                }
            }
            c
        }
    }
}

/// `/readyz`'s document, from the cache (see the module docs for the rules).
pub fn readiness(shared: &Shared) -> Health {
    let up = shared.upstream();
    let i = lock(&shared.health.inner);
    let mut checks = Vec::new();
    let process = Item::new("process:state", "process", "component")
        .observed(process_word(up.process), "state")
        .at(checks::now_ms());
    checks.push(match up.process {
        ProcessState::Up => process,
        ProcessState::Starting => process
            .status(CheckStatus::Fail)
            .output("the upstream is starting"),
        ProcessState::Backoff => process.status(CheckStatus::Fail).output(match i.upstream {
            UpstreamKind::Stdio => "the upstream exited; waiting out the backoff before a restart",
            UpstreamKind::Http => {
                "the upstream is unreachable; waiting out the backoff before a reconnect"
            }
        }),
        ProcessState::Fatal => process.status(CheckStatus::Fail).output(GIVEN_UP),
    });
    let mut protocol = level_item(
        "protocol:responseTime",
        "protocol",
        &i.protocol,
        "no handshake with the upstream observed yet",
    );
    let mut tools = level_item(
        "tools:count",
        "tools",
        &i.tools,
        "no tools/list from the upstream observed yet",
    )
    .with("minimum", i.min_tools);
    if let Some(p) = &up.protocol {
        protocol = protocol.observed(ms(p.latency), "ms");
        if let Some(n) = p.tools {
            tools = tools.observed(n, "tools");
        }
    }
    checks.push(protocol);
    checks.push(tools);
    for e in &i.checks {
        let c = policy::item(&policy::Dependency {
            name: &e.name,
            kind: e.kind.as_str(),
            component_id: &e.component_id,
            component_type: e.component_type,
            critical: e.critical,
            thresholds: &e.thresholds,
            state: &e.state,
        });
        checks.push(c);
    }
    drop(i);
    // Relayed calls' error rate and p95 (crate::thresholds): warn past degraded, fail past
    // unhealthy only with on_unhealthy = "fail".
    checks.extend(shared.thresholds.checks(checks::now_ms()));
    breaker_items(shared, &mut checks);
    let h = Health {
        service_id: "mcpulse".into(),
        version: version().into(),
        description:
            "mcpulse gateway readiness: the upstream answers MCP and its dependencies are up".into(),
        checks,
    };
    shared.metrics.set_readiness(h.status());
    h
}

/// The circuit breakers (crate::policy): one item each, `warn` while open or half-open, with
/// the breaker named and when it tries again (mcpulse_policy::check::breaker_item, the kit's
/// too, so the two cannot drift). Never `fail`: the gateway still answers every call (fast),
/// and the other tools work, so the instance stays in rotation.
fn breaker_items(shared: &Shared, checks: &mut Vec<Item>) {
    for b in shared.policies().breakers(&shared.metrics) {
        checks.push(mcpulse_policy::check::breaker_item(
            &mcpulse_policy::check::BreakerReading {
                name: &b.name,
                state: b.state,
                retry_in: b.retry_in,
                calls: b.calls,
                failures: b.failures,
                time_ms: checks::now_ms(),
            },
        ));
    }
}

type Pairs = Result<Query<Vec<(String, String)>>, QueryRejection>;

fn query(q: Pairs) -> model::Query {
    model::Query::from_pairs(q.map(|Query(p)| p).unwrap_or_default())
}

/// A rendered health document on the wire, as the supervisor's endpoints put it.
fn respond(r: model::Rendered) -> Response {
    let code = StatusCode::from_u16(r.http_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, r.headers(), r.body).into_response()
}

async fn livez(State(s): State<Arc<Shared>>, q: Pairs) -> Response {
    // `?exclude` is for readiness: liveness checks are few and none is optional.
    let q = model::Query {
        exclude: Vec::new(),
        ..query(q)
    };
    respond(liveness(&s).render(&q, "livez"))
}

async fn readyz(State(s): State<Arc<Shared>>, q: Pairs) -> Response {
    respond(readiness(&s).render(&query(q), "readyz"))
}

async fn metrics(State(s): State<Arc<Shared>>) -> Response {
    // The readiness and liveness series are as of this scrape.
    let _ = readiness(&s);
    let _ = liveness(&s);
    match s.metrics.encode() {
        Ok(body) => (StatusCode::OK, [(header::CONTENT_TYPE, OPENMETRICS)], body).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "encoding the metrics failed\n",
        )
            .into_response(),
    }
}

/// `/livez`, `/readyz` (`?verbose`, `?exclude=`), `/metrics`.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(shared)
}

/// The health side's tasks; dropping it stops them.
#[derive(Debug)]
pub struct Running {
    _tasks: Vec<Task>,
}

/// Starts the health side on the current runtime: configures the registry, then runs the
/// event-loop ticker, the protocol prober (when `settings.mcp` is set: every
/// `readiness_interval`, a probe within `readiness_timeout`, reported through
/// [`observe_protocol`]) and one task per dependency check.
pub fn start(settings: Settings, shared: Arc<Shared>) -> Running {
    shared.health.configure(&settings);
    let mut tasks = Vec::new();
    shared.health.tick();
    let ticker = Arc::clone(&shared);
    tasks.push(Task(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            ticker.health.tick();
        }
    })));
    if let Some(target) = settings.mcp.clone().filter(|_| settings.probe_protocol) {
        let prober = Arc::clone(&shared);
        let (interval, timeout) = (settings.readiness_interval, settings.readiness_timeout);
        let own_tool = settings.own_tool.clone();
        tasks.push(Task(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval.max(checks::MIN_INTERVAL));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let p = protocol::probe(&target, timeout, own_tool.as_deref()).await;
                observe_protocol(&prober, p);
            }
        })));
    }
    let ctx = Context {
        mcp: settings.mcp,
        own_tool: settings.own_tool,
        session: settings.session,
    };
    tasks.extend(checks::spawn(settings.checks, ctx, shared));
    Running { _tasks: tasks }
}

/// The `health_check` tool as `tools/list` lists it, under the configured `name`.
pub fn tool_descriptor(name: &str) -> Value {
    json!({
        "name": name,
        "description": "The gateway's health: process, protocol and dependencies, as /readyz reports it.",
        "inputSchema": {"type": "object", "properties": {}},
        "outputSchema": {
            "type": "object",
            "properties": {
                "status": {"type": "string", "enum": ["ok", "degraded", "down"]},
                "checks": {"type": "object"},
            },
            "required": ["status", "checks"],
        },
        "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
    })
}

/// The `tools/call` result for the `health_check` tool: `/readyz`'s status as
/// `structuredContent` (`status` ok/degraded/down, `checks` keyed by name, each with its
/// health+json `status`, observed value, time and output), with the same JSON as a text
/// fallback for clients that do not read `structuredContent`. Never `isError`: the tool
/// worked; the status is its answer.
pub fn tool_result(shared: &Shared) -> Value {
    let content = model::tool_content(&readiness(shared));
    json!({
        "content": [{"type": "text", "text": content.to_string()}],
        "structuredContent": content,
        "isError": false,
    })
}
