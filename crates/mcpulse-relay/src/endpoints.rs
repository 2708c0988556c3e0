//! The supervisor seen from outside: `/livez`, `/readyz` (`application/health+json`, or
//! kube-apiserver's text with `?verbose`) and `/metrics` (OpenMetrics text), served on
//! `--listen`.
//!
//! [`Endpoints`] is an [`Observer`]: the supervisor tells it what happens, it keeps the last
//! [`Status`] and the metrics, and [`serve`] answers scrapes from them. It owns no decision
//! (the supervisor's state is the supervisor's; readiness is a direct reading of it) and the
//! health documents are rendered by the shared model (`mcpulse_policy::health`), as the
//! monitor's are.
//!
//! Readiness: `/readyz` is 200 while the child is RUNNING (`pass`) or BUSY (`warn`: slow but
//! alive) and 503 while it is STARTING, in BACKOFF, FATAL or STOPPED. `/livez` is 200 whenever
//! the supervisor's runtime answers at all.
//!
//! Bounds: tool names are the server's (hostile) text. They become the `tool` label of the
//! per-tool metrics only after [`mcpulse_wire::text::field`] made them inert and cut them to
//! 200 characters, and only the first [`MAX_TOOL_LABELS`] distinct names get their own series;
//! later ones are counted as `tool="_other"`. So the exposition stays under a fixed number of
//! series whatever the server calls its tools. `/readyz` lists at most the 10 recent restarts
//! the supervisor keeps. Nothing here writes to stdout (the client's MCP stream).

use crate::status::{CallOutcome, ChildState, HeartbeatOutcome, Observer, RestartReason, Status};
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use mcpulse_policy::health::{self, Check, CheckStatus, Health};
use mcpulse_wire::text;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The most distinct tool names with their own `tool` label; the rest share `_other`.
pub const MAX_TOOL_LABELS: usize = 100;
/// The `tool` label of every tool past [`MAX_TOOL_LABELS`].
pub const OTHER_TOOL: &str = "_other";
/// The OpenMetrics content type `/metrics` answers with (Prometheus scrapes it by default).
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the endpoints could not start.
#[derive(Debug, thiserror::Error)]
pub enum EndpointsError {
    #[error("cannot listen on {addr} (--listen): {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: Outcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolOutcomeLabels {
    tool: String,
    outcome: Outcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

/// A closed set of outcome words (heartbeat and tool call), as one label value type.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
struct Outcome(&'static str);

impl EncodeLabelValue for Outcome {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelValueEncoder,
    ) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.0, encoder)
    }
}

/// The `tool` label of a server's tool names: inert and cut ([`text::field`]), and
/// [`OTHER_TOOL`] for every name past the first [`MAX_TOOL_LABELS`] distinct ones, so that a
/// server (or a client naming tools) cannot mint series. Shared with the gateway's metrics.
#[derive(Debug, Default)]
pub struct ToolLabels {
    /// The labels handed out so far (at most [`MAX_TOOL_LABELS`]).
    seen: Mutex<HashSet<String>>,
}

impl ToolLabels {
    pub fn label(&self, tool: &str) -> String {
        let name = text::field(tool);
        let mut seen = lock(&self.seen);
        if seen.contains(name.as_ref()) {
            return name.into_owned();
        }
        if seen.len() >= MAX_TOOL_LABELS || name == OTHER_TOOL {
            return OTHER_TOOL.to_string();
        }
        seen.insert(name.to_string());
        name.into_owned()
    }
}

const STATES: [ChildState; 6] = [
    ChildState::Starting,
    ChildState::Running,
    ChildState::Busy,
    ChildState::Backoff,
    ChildState::Fatal,
    ChildState::Stopped,
];

/// The `state` label (and the state's word in `/readyz`).
fn state_label(s: ChildState) -> &'static str {
    match s {
        ChildState::Starting => "starting",
        ChildState::Running => "running",
        ChildState::Busy => "busy",
        ChildState::Backoff => "backoff",
        ChildState::Fatal => "fatal",
        ChildState::Stopped => "stopped",
    }
}

fn heartbeat_label(o: HeartbeatOutcome) -> &'static str {
    match o {
        HeartbeatOutcome::Ok => "ok",
        HeartbeatOutcome::Busy => "busy",
        HeartbeatOutcome::Failed => "failed",
    }
}

fn call_label(o: CallOutcome) -> &'static str {
    match o {
        CallOutcome::Ok => "ok",
        CallOutcome::ToolError => "tool_error",
        CallOutcome::RpcError => "rpc_error",
        CallOutcome::Timeout => "timeout",
        CallOutcome::Lost => "lost",
    }
}

fn heartbeat_histogram() -> Histogram {
    // 1 ms to about 8 s: a heartbeat times out at 5 s by default.
    Histogram::new(exponential_buckets(0.001, 2.0, 14))
}

fn tool_histogram() -> Histogram {
    // 5 ms to about 80 s: tools range from lookups to long jobs.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

struct Metrics {
    registry: Registry,
    restarts: Family<ReasonLabel, Counter>,
    state: Family<StateLabel, Gauge>,
    heartbeats: Family<OutcomeLabel, Counter>,
    heartbeat_duration: Histogram,
    tool_calls: Family<ToolOutcomeLabels, Counter>,
    tool_duration: Family<ToolLabel, Histogram, fn() -> Histogram>,
    junk_lines: Counter,
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("mcpulse_supervise");
        let restarts = Family::<ReasonLabel, Counter>::default();
        let state = Family::<StateLabel, Gauge>::default();
        let heartbeats = Family::<OutcomeLabel, Counter>::default();
        let heartbeat_duration = heartbeat_histogram();
        let tool_calls = Family::<ToolOutcomeLabels, Counter>::default();
        let tool_duration: Family<ToolLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(tool_histogram);
        let junk_lines = Counter::default();
        registry.register(
            "restarts",
            "Restarts of the child, by reason (exited, unresponsive, spawn_failed)",
            restarts.clone(),
        );
        registry.register(
            "state",
            "The child's state: 1 for the current one, 0 for the others",
            state.clone(),
        );
        registry.register(
            "heartbeats",
            "Heartbeats sent to the child, by outcome (ok, busy, failed)",
            heartbeats.clone(),
        );
        registry.register_with_unit(
            "heartbeat_duration",
            "Round trip of the answered heartbeats",
            prometheus_client::registry::Unit::Seconds,
            heartbeat_duration.clone(),
        );
        registry.register(
            "tool_calls",
            "Relayed tools/call requests, by tool and outcome (ok, tool_error, rpc_error, timeout, lost)",
            tool_calls.clone(),
        );
        registry.register_with_unit(
            "tool_call_duration",
            "Time from a relayed tools/call to its answer, by tool",
            prometheus_client::registry::Unit::Seconds,
            tool_duration.clone(),
        );
        registry.register(
            "junk_lines",
            "Lines on the child's stdout that were not JSON-RPC, kept off the client's stream",
            junk_lines.clone(),
        );
        // Every closed-set series exists from the start, so a rate() or an alert on them does
        // not wait for the first event.
        for reason in ["exited", "unresponsive", "spawn_failed"] {
            let _ = restarts.get_or_create(&ReasonLabel { reason });
        }
        for o in [
            HeartbeatOutcome::Ok,
            HeartbeatOutcome::Busy,
            HeartbeatOutcome::Failed,
        ] {
            let _ = heartbeats.get_or_create(&OutcomeLabel {
                outcome: Outcome(heartbeat_label(o)),
            });
        }
        let m = Metrics {
            registry,
            restarts,
            state,
            heartbeats,
            heartbeat_duration,
            tool_calls,
            tool_duration,
            junk_lines,
        };
        m.set_state(ChildState::Starting);
        m
    }

    fn set_state(&self, current: ChildState) {
        for s in STATES {
            self.state
                .get_or_create(&StateLabel {
                    state: state_label(s),
                })
                .set(i64::from(s == current));
        }
    }
}

struct Inner {
    status: Mutex<Status>,
    metrics: Metrics,
    tools: ToolLabels,
    started: Instant,
    service_version: &'static str,
}

/// The state behind the endpoints; clone it freely (it is shared), hand one to the supervisor
/// as its [`Observer`] and one to [`serve`].
#[derive(Clone)]
pub struct Endpoints {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints").finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind; keep serving it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Endpoints {
    /// `version` is the program's, reported as the health document's `version`.
    pub fn new(version: &'static str) -> Endpoints {
        Endpoints {
            inner: Arc::new(Inner {
                status: Mutex::new(Status::new(ChildState::Starting, now_ms())),
                metrics: Metrics::new(),
                tools: ToolLabels::default(),
                started: Instant::now(),
                service_version: version,
            }),
        }
    }

    /// The last status the supervisor reported.
    pub fn current(&self) -> Status {
        lock(&self.inner.status).clone()
    }

    /// `/readyz`'s document for the current status.
    pub fn readiness(&self) -> Health {
        readiness(&self.current(), self.inner.service_version)
    }

    /// `/metrics`'s body (OpenMetrics text, ending in `# EOF`).
    pub fn metrics_text(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.inner.metrics.registry)?;
        Ok(out)
    }

    /// The `tool` label for a server's tool name ([`ToolLabels`]).
    fn tool_label(&self, tool: &str) -> String {
        self.inner.tools.label(tool)
    }
}

impl Observer for Endpoints {
    fn status(&self, status: &Status) {
        self.inner.metrics.set_state(status.state);
        *lock(&self.inner.status) = status.clone();
    }

    fn restart(&self, reason: &RestartReason) {
        self.inner
            .metrics
            .restarts
            .get_or_create(&ReasonLabel {
                reason: reason.label(),
            })
            .inc();
    }

    fn heartbeat(&self, outcome: HeartbeatOutcome, latency: Option<Duration>) {
        let m = &self.inner.metrics;
        m.heartbeats
            .get_or_create(&OutcomeLabel {
                outcome: Outcome(heartbeat_label(outcome)),
            })
            .inc();
        if let Some(l) = latency {
            m.heartbeat_duration.observe(l.as_secs_f64());
        }
    }

    fn tool_call(&self, tool: &str, outcome: CallOutcome, latency: Duration) {
        let tool = self.tool_label(tool);
        let m = &self.inner.metrics;
        m.tool_duration
            .get_or_create(&ToolLabel { tool: tool.clone() })
            .observe(latency.as_secs_f64());
        m.tool_calls
            .get_or_create(&ToolOutcomeLabels {
                tool,
                outcome: Outcome(call_label(outcome)),
            })
            .inc();
    }

    fn junk_line(&self, _line: &str) {
        self.inner.metrics.junk_lines.inc();
    }
}

/// Words for one restart's reason, inert.
fn reason_text(r: &RestartReason) -> String {
    match r {
        RestartReason::Exited { code: Some(c), .. } => format!("exited with code {c}"),
        RestartReason::Exited {
            signal: Some(s), ..
        } => format!("killed by signal {s}"),
        RestartReason::Exited { .. } => "exited".to_string(),
        RestartReason::Unresponsive { failures } => {
            format!("unresponsive: {failures} heartbeats missed in a row")
        }
        RestartReason::SpawnFailed { message } => {
            format!("could not be started: {}", text::message(message))
        }
    }
}

/// `/readyz`'s checks, read off a status (see the module docs for the status codes).
pub fn readiness(s: &Status, version: &'static str) -> Health {
    let (status, output) = match s.state {
        ChildState::Running => (CheckStatus::Pass, None),
        ChildState::Busy => (
            CheckStatus::Warn,
            Some("busy: a heartbeat went unanswered while a client request runs".to_string()),
        ),
        ChildState::Starting => (
            CheckStatus::Fail,
            Some("starting: the handshake has not completed yet".to_string()),
        ),
        ChildState::Backoff => (
            CheckStatus::Fail,
            Some(match s.recent_restarts.last() {
                Some(r) => format!(
                    "waiting out the backoff before a restart: {}",
                    reason_text(&r.reason)
                ),
                None => "waiting out the backoff before a restart".to_string(),
            }),
        ),
        ChildState::Fatal => (
            CheckStatus::Fail,
            Some(format!(
                "gave up: {}",
                s.fatal_reason
                    .as_deref()
                    .map_or("the restart budget is spent".into(), text::message)
            )),
        ),
        ChildState::Stopped => (
            CheckStatus::Fail,
            Some("stopped: the client closed its stdin".to_string()),
        ),
    };
    let mut child = Check::new("child:state", "child", "component")
        .status(status)
        .observed(state_label(s.state).to_ascii_uppercase(), "state")
        .at(s.since_ms);
    if let Some(pid) = s.pid {
        child = child.id(pid.to_string());
    }
    if let Some(o) = output {
        child = child.output(o);
    }
    let mut checks = vec![child];
    if let Some(v) = &s.protocol_version {
        checks.push(
            Check::new("protocol:version", "protocol", "component")
                .observed(text::field(v).into_owned(), "version"),
        );
    }
    let heartbeat = Check::new("heartbeat:responseTime", "heartbeat", "component");
    checks.push(match s.last_heartbeat {
        None => heartbeat.output("no heartbeat yet"),
        Some((at, outcome, latency)) => {
            let mut c = heartbeat.at(at).with("outcome", heartbeat_label(outcome));
            if let Some(l) = latency {
                c = c.observed(l.as_secs_f64() * 1000.0, "ms");
            }
            match outcome {
                HeartbeatOutcome::Ok => c,
                // One miss is a warning: the restart policy decides when misses are fatal.
                HeartbeatOutcome::Busy => c
                    .status(CheckStatus::Warn)
                    .output("unanswered while the child is busy with a client request"),
                HeartbeatOutcome::Failed => c.status(CheckStatus::Warn).output("unanswered"),
            }
        }
    });
    let mut restarts = Check::new("restarts:count", "restarts", "system")
        .observed(s.restarts_total, "restarts")
        .with(
            "recent",
            s.recent_restarts
                .iter()
                .map(|r| {
                    serde_json::json!({
                        "time": mcpulse_wire::units::format_rfc3339(r.at_ms),
                        "reason": r.reason.label(),
                        "output": reason_text(&r.reason),
                    })
                })
                .collect::<Vec<_>>(),
        );
    if s.state == ChildState::Fatal {
        // `warn`, not `fail`: the failure is `child:state`'s. A monitor pages each failing
        // component on its own, and one outage must not page twice as critical.
        restarts = restarts
            .status(CheckStatus::Warn)
            .output("the restart budget is spent");
    } else if let Some(r) = s.recent_restarts.last() {
        restarts = restarts.at(r.at_ms).output(reason_text(&r.reason));
    }
    checks.push(restarts);
    Health {
        service_id: "mcpulse".into(),
        version: version.into(),
        description: "mcpulse supervise readiness: the supervised MCP server answers".into(),
        checks,
    }
}

type Pairs = Result<Query<Vec<(String, String)>>, QueryRejection>;

fn query(q: Pairs) -> health::Query {
    health::Query::from_pairs(q.map(|Query(p)| p).unwrap_or_default())
}

async fn livez(State(e): State<Endpoints>, q: Pairs) -> Response {
    let query = health::Query {
        exclude: Vec::new(),
        ..query(q)
    };
    let health = Health {
        service_id: "mcpulse".into(),
        version: e.inner.service_version.into(),
        description: "mcpulse supervise liveness".into(),
        checks: vec![
            Check::new("process:uptime", "process", "system")
                .observed(e.inner.started.elapsed().as_secs(), "s")
                .at(now_ms()),
        ],
    };
    respond(health.render(&query, "livez"))
}

/// A rendered health document on the wire ([`health::Rendered::headers`]). Here, not in
/// `mcpulse-policy`, which stays free of HTTP.
fn respond(r: health::Rendered) -> Response {
    let code = StatusCode::from_u16(r.http_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, r.headers(), r.body).into_response()
}

async fn readyz(State(e): State<Endpoints>, q: Pairs) -> Response {
    respond(e.readiness().render(&query(q), "readyz"))
}

async fn metrics(State(e): State<Endpoints>) -> Response {
    match e.metrics_text() {
        Ok(body) => (StatusCode::OK, [(header::CONTENT_TYPE, OPENMETRICS)], body).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "encoding the metrics failed\n",
        )
            .into_response(),
    }
}

/// The endpoints' routes.
pub fn router(endpoints: Endpoints) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(endpoints)
}

/// The endpoints, listening; dropping it stops them.
#[derive(Debug)]
pub struct Listening {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Binds `addr` (a bind error, such as a port in use, is returned here, before the child is
/// started) and serves the endpoints on the current runtime until the [`Listening`] is
/// dropped.
pub async fn serve(addr: SocketAddr, endpoints: Endpoints) -> Result<Listening, EndpointsError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| EndpointsError::Bind { addr, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| EndpointsError::Bind { addr, source })?;
    let app = router(endpoints);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the health endpoints stopped");
        }
    });
    Ok(Listening { addr, task })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::status::Restart;

    /// The `/readyz` document of a supervisor in backoff after an unresponsive child, whole.
    #[test]
    fn readiness_snapshot() {
        let s = Status {
            state: ChildState::Backoff,
            since_ms: 1_700_000_003_000,
            pid: None,
            protocol_version: Some("2025-06-18".into()),
            last_heartbeat: Some((1_700_000_002_000, HeartbeatOutcome::Failed, None)),
            restarts_total: 4,
            recent_restarts: vec![Restart {
                at_ms: 1_700_000_003_000,
                reason: RestartReason::Unresponsive { failures: 3 },
            }],
            fatal_reason: None,
        };
        assert_eq!(
            readiness(&s, "0.1.0").to_json().to_string(),
            r#"{"checks":{"child:state":[{"componentType":"component","observedUnit":"state","observedValue":"BACKOFF","output":"waiting out the backoff before a restart: unresponsive: 3 heartbeats missed in a row","status":"fail","time":"2023-11-14T22:13:23.000Z"}],"heartbeat:responseTime":[{"componentType":"component","outcome":"failed","output":"unanswered","status":"warn","time":"2023-11-14T22:13:22.000Z"}],"protocol:version":[{"componentType":"component","observedUnit":"version","observedValue":"2025-06-18","status":"pass"}],"restarts:count":[{"componentType":"system","observedUnit":"restarts","observedValue":4,"output":"unresponsive: 3 heartbeats missed in a row","recent":[{"output":"unresponsive: 3 heartbeats missed in a row","reason":"unresponsive","time":"2023-11-14T22:13:23.000Z"}],"status":"pass","time":"2023-11-14T22:13:23.000Z"}]},"description":"mcpulse supervise readiness: the supervised MCP server answers","output":"waiting out the backoff before a restart: unresponsive: 3 heartbeats missed in a row","serviceId":"mcpulse","status":"fail","version":"0.1.0"}"#
        );
    }

    #[test]
    fn histograms_carry_their_unit() {
        let e = Endpoints::new("0");
        e.heartbeat(HeartbeatOutcome::Ok, Some(Duration::from_millis(2)));
        e.tool_call("a", CallOutcome::Ok, Duration::from_millis(2));
        let t = e.metrics_text().unwrap();
        assert!(t.contains("# UNIT mcpulse_supervise_heartbeat_duration_seconds seconds"));
        assert!(t.contains("# UNIT mcpulse_supervise_tool_call_duration_seconds seconds"));
    }
}
