//! The gateway's Prometheus metrics (issue #19 part 4; names and the table in docs/gateway.md
//! `## Metrics`). The serving side records through these methods; the health side sets the
//! check and readiness series and renders `/metrics` (OpenMetrics text, prometheus-client, as
//! the supervisor's and the monitor's).
//!
//! Bounds: labels are closed sets or capped. `method` is one of [`METHODS`] (anything else a
//! client sends is `_other`: a client must not be able to mint series); `tool` gets a label
//! of its own only when the upstream listed it (a name seen in a relayed `tools/list` result,
//! [`Metrics::learn_tools`]): a client calling junk names cannot use up the labels; it is made
//! inert and cut ([`mcpulse_wire::text::field`]) and only the first
//! [`mcpulse_relay::endpoints::MAX_TOOL_LABELS`] distinct names get their own series, later
//! ones share `_other` (the supervisor's rule); `check` is a configured name. So the
//! exposition has a fixed ceiling whatever clients and servers send.

use mcpulse_policy::health::CheckStatus;
use mcpulse_relay::endpoints::{OTHER_TOOL, ToolLabels};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// How one relayed request ended (the `outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A result (for `tools/call`: without `isError`).
    Ok,
    /// A `tools/call` result with `isError: true`.
    ToolError,
    /// A JSON-RPC error from the upstream.
    RpcError,
    /// The gateway answered with an error itself (upstream down, restarted mid-request,
    /// refused at the door, timed out).
    GatewayError,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::RpcError => "rpc_error",
            Outcome::GatewayError => "gateway_error",
        }
    }
}

/// The MCP methods with a `method` label of their own (both protocol eras, both directions);
/// any other is `_other`.
pub const METHODS: [&str; 22] = [
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "subscriptions/listen",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/list",
    "tasks/result",
    "tasks/cancel",
    "sampling/createMessage",
    "elicitation/create",
    "roots/list",
];

/// The `method` label of every method not in [`METHODS`].
pub const OTHER_METHOD: &str = "_other";

/// The restart reasons with a series from the start (mcpulse_relay::status::RestartReason).
const RESTART_REASONS: [&str; 3] = ["exited", "unresponsive", "spawn_failed"];

const STATUSES: [CheckStatus; 3] = [CheckStatus::Pass, CheckStatus::Warn, CheckStatus::Fail];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    tool: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodToolLabels {
    method: &'static str,
    tool: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckStatusLabels {
    check: String,
    status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BreakerStateLabels {
    breaker: String,
    state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BreakerToLabels {
    breaker: String,
    to: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BreakerLabel {
    breaker: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    limit: String,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

/// The call policies' series (crate::policy). `breaker` and `limit` are `[[tools]]` patterns
/// from the config (or `gateway`): a closed set; `tool` is bounded as the requests' is.
#[derive(Default)]
struct PolicyMetrics {
    breaker_state: Family<BreakerStateLabels, Gauge>,
    breaker_transitions: Family<BreakerToLabels, Counter>,
    breaker_rejected: Family<BreakerLabel, Counter>,
    limit_rejected: Family<LimitLabels, Counter>,
    tool_timeouts: Family<ToolLabel, Counter>,
    late_replies: Counter,
    dependency_refused: Family<CheckLabel, Counter>,
    retries: Family<RetryLabels, Counter>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RetryLabels {
    tool: String,
    result: &'static str,
}

const BREAKER_STATES: [mcpulse_policy::breaker::BreakerState; 3] = [
    mcpulse_policy::breaker::BreakerState::Closed,
    mcpulse_policy::breaker::BreakerState::Open,
    mcpulse_policy::breaker::BreakerState::HalfOpen,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckLabel {
    check: String,
}

fn request_histogram() -> Histogram {
    // 1 ms to about 65 s: from a cached list to a long tool call.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// The registry and the handles the serving side records into.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_duration: Family<MethodToolLabels, Histogram, fn() -> Histogram>,
    sessions: Gauge,
    connections: Gauge,
    restarts: Family<ReasonLabel, Counter>,
    reconnects: Counter,
    check_status: Family<CheckStatusLabels, Gauge>,
    check_duration: Family<CheckLabel, Gauge<f64, AtomicU64>>,
    readiness: Family<StatusLabel, Gauge>,
    liveness: Family<StatusLabel, Gauge>,
    tools: ToolLabels,
    policy: PolicyMetrics,
    /// The tool names the upstream listed (inert, cut), at most [`MAX_KNOWN_TOOLS`].
    known: Mutex<HashSet<String>>,
    /// Connections refused past `max_connections`.
    connections_refused: Counter,
}

/// The most tool names remembered as listed by the upstream (a server listing more still
/// gets at most `MAX_TOOL_LABELS` series; this only bounds the memory).
pub const MAX_KNOWN_TOOLS: usize = 1024;

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

/// The `method` label of a method.
pub fn method_label(method: &str) -> &'static str {
    METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or(OTHER_METHOD)
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("mcpulse_gateway");
        let requests = Family::<RequestLabels, Counter>::default();
        let request_duration: Family<MethodToolLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(request_histogram);
        let sessions = Gauge::default();
        let connections = Gauge::default();
        let restarts = Family::<ReasonLabel, Counter>::default();
        let reconnects = Counter::default();
        let check_status = Family::<CheckStatusLabels, Gauge>::default();
        let check_duration = Family::<CheckLabel, Gauge<f64, AtomicU64>>::default();
        let readiness = Family::<StatusLabel, Gauge>::default();
        let liveness = Family::<StatusLabel, Gauge>::default();
        registry.register(
            "requests",
            "MCP requests relayed and answered, by method, tool (tools/call) and outcome (ok, tool_error, rpc_error, gateway_error)",
            requests.clone(),
        );
        registry.register_with_unit(
            "request_duration",
            "Time from a request to its answer, by method and tool",
            Unit::Seconds,
            request_duration.clone(),
        );
        registry.register(
            "active_sessions",
            "Client sessions open (legacy Mcp-Session-Id)",
            sessions.clone(),
        );
        registry.register(
            "active_connections",
            "Client HTTP connections open",
            connections.clone(),
        );
        registry.register(
            "upstream_restarts",
            "Restarts of stdio upstream children, by reason (exited, unresponsive, spawn_failed)",
            restarts.clone(),
        );
        registry.register(
            "upstream_reconnects",
            "Reconnections to the HTTP upstream",
            reconnects.clone(),
        );
        registry.register(
            "check_status",
            "Each dependency check's confirmed status: 1 for the current one (pass, warn, fail), 0 for the others",
            check_status.clone(),
        );
        registry.register_with_unit(
            "check_duration",
            "How long each dependency check's last run took",
            Unit::Seconds,
            check_duration.clone(),
        );
        registry.register(
            "readiness_status",
            "/readyz's status: 1 for the current one (pass, warn, fail), 0 for the others",
            readiness.clone(),
        );
        registry.register(
            "liveness_status",
            "/livez's status: 1 for the current one (pass, fail), 0 for the others",
            liveness.clone(),
        );
        let policy = PolicyMetrics::default();
        registry.register(
            "breaker_state",
            "Circuit breakers' state (a [[tools]] entry's breaker, by its pattern): 1 for the current one (closed, open, half_open), 0 for the others",
            policy.breaker_state.clone(),
        );
        registry.register(
            "breaker_transitions",
            "Circuit breaker changes of state, by breaker and the state entered",
            policy.breaker_transitions.clone(),
        );
        registry.register(
            "breaker_rejected",
            "tools/call refused at once by an open (or busy half-open) circuit breaker",
            policy.breaker_rejected.clone(),
        );
        registry.register(
            "limit_rejected",
            "tools/call refused by a concurrency limit (gateway or a [[tools]] pattern), by reason (full: the queue was full; queue_timeout: it waited its whole queue_timeout)",
            policy.limit_rejected.clone(),
        );
        registry.register(
            "tool_timeouts",
            "tools/call answered with the gateway's timeout result (the upstream was sent a cancellation), by tool",
            policy.tool_timeouts.clone(),
        );
        registry.register(
            "dependency_refused",
            "tools/call refused at once because the dependency check listing the tool is failing",
            policy.dependency_refused.clone(),
        );
        registry.register(
            "retries",
            "tools/call retries by tool, and result: retried (sent again), budget (not sent again: the retry budget was spent)",
            policy.retries.clone(),
        );
        registry.register(
            "late_replies",
            "Replies that came from the upstream after their request had timed out at the gateway: dropped",
            policy.late_replies.clone(),
        );
        // Closed-set series exist from the start, so a rate() or an alert on them does not
        // wait for the first event.
        for reason in RESTART_REASONS {
            let _ = restarts.get_or_create(&ReasonLabel { reason });
        }
        let connections_refused = Counter::default();
        registry.register(
            "connections_refused",
            "Client connections refused (503, closed) because max_connections were open",
            connections_refused.clone(),
        );
        let m = Metrics {
            connections_refused,
            registry,
            requests,
            request_duration,
            sessions,
            connections,
            restarts,
            reconnects,
            check_status,
            check_duration,
            readiness,
            liveness,
            tools: ToolLabels::default(),
            policy,
            known: Mutex::new(HashSet::new()),
        };
        m.set_readiness(CheckStatus::Fail);
        m.set_liveness(CheckStatus::Pass);
        m
    }

    /// One request relayed and answered: `method` is the JSON-RPC method, `tool` the tool of a
    /// `tools/call`, as the client sent them: both are bounded here (see the module docs), so
    /// callers need no label caps of their own.
    pub fn request(&self, method: &str, tool: Option<&str>, took: Duration, outcome: Outcome) {
        let method = method_label(method);
        let tool = tool.map(|t| self.tool_label(t)).unwrap_or_default();
        self.request_duration
            .get_or_create(&MethodToolLabels {
                method,
                tool: tool.clone(),
            })
            .observe(took.as_secs_f64());
        self.requests
            .get_or_create(&RequestLabels {
                method,
                tool,
                outcome: outcome.as_str(),
            })
            .inc();
    }
    /// Tools the upstream listed (its `tools/list` result, as relayed; the gateway's own
    /// health tool): from now on their calls get a `tool` label of their own. Names past
    /// [`MAX_KNOWN_TOOLS`] are not remembered.
    pub fn learn_tools(&self, names: &[&str]) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        for name in names {
            if known.len() >= MAX_KNOWN_TOOLS {
                return;
            }
            let name = mcpulse_wire::text::field(name);
            if !known.contains(name.as_ref()) {
                known.insert(name.into_owned());
            }
        }
    }

    /// [`Metrics::learn_tools`] from a JSON-RPC message: the names in `result.tools` when it
    /// is a `tools/list` result, nothing otherwise.
    pub fn learn_tools_in(&self, reply: &[u8]) {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(reply) else {
            return;
        };
        let Some(tools) = v
            .get("result")
            .and_then(|r| r.get("tools"))
            .and_then(|t| t.as_array())
        else {
            return;
        };
        let names: Vec<&str> = tools
            .iter()
            .filter_map(|t| t.get("name").and_then(|n| n.as_str()))
            .collect();
        self.learn_tools(&names);
    }

    /// Whether the upstream listed `tool` ([`Metrics::learn_tools`]).
    pub fn knows_tool(&self, tool: &str) -> bool {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known.contains(mcpulse_wire::text::field(tool).as_ref())
    }

    /// A tool's label: its own (bounded) when the upstream listed it, else `_other`.
    fn tool_label(&self, tool: &str) -> String {
        if self.knows_tool(tool) {
            self.tools.label(tool)
        } else {
            OTHER_TOOL.to_owned()
        }
    }

    /// A client session opened (legacy `Mcp-Session-Id`) or closed.
    pub fn session_opened(&self) {
        self.sessions.inc();
    }
    pub fn session_closed(&self) {
        self.sessions.dec();
    }
    /// A client HTTP connection accepted or closed.
    pub fn connection_opened(&self) {
        self.connections.inc();
    }
    pub fn connection_refused(&self) {
        self.connections_refused.inc();
    }
    pub fn connection_closed(&self) {
        self.connections.dec();
    }
    /// A stdio child restarted (`reason` as mcpulse_relay::status::RestartReason::label) or
    /// the HTTP upstream reconnected.
    pub fn upstream_restart(&self, reason: &'static str) {
        self.restarts.get_or_create(&ReasonLabel { reason }).inc();
    }
    pub fn upstream_reconnect(&self) {
        self.reconnects.inc();
    }

    /// A dependency check's confirmed status and last run's duration (the health side's).
    pub fn set_check(&self, check: &str, status: Option<CheckStatus>, took: Option<Duration>) {
        for s in STATUSES {
            self.check_status
                .get_or_create(&CheckStatusLabels {
                    check: check.to_owned(),
                    status: s.as_str(),
                })
                .set(i64::from(Some(s) == status));
        }
        if let Some(t) = took {
            self.check_duration
                .get_or_create(&CheckLabel {
                    check: check.to_owned(),
                })
                .set(t.as_secs_f64());
        }
    }

    /// `/readyz`'s status (set by the health side before each scrape).
    pub fn set_readiness(&self, status: CheckStatus) {
        set_state(&self.readiness, &STATUSES, status);
    }

    /// `/livez`'s status (pass or fail).
    pub fn set_liveness(&self, status: CheckStatus) {
        set_state(
            &self.liveness,
            &[CheckStatus::Pass, CheckStatus::Fail],
            status,
        );
    }

    /// A breaker's state now (one series per state, 1 for the current one).
    pub fn breaker_state(&self, breaker: &str, current: mcpulse_policy::breaker::BreakerState) {
        for s in BREAKER_STATES {
            self.policy
                .breaker_state
                .get_or_create(&BreakerStateLabels {
                    breaker: breaker.to_owned(),
                    state: s.as_str(),
                })
                .set(i64::from(s == current));
        }
    }

    /// A breaker changed state.
    pub fn breaker_transition(&self, breaker: &str, to: mcpulse_policy::breaker::BreakerState) {
        self.policy
            .breaker_transitions
            .get_or_create(&BreakerToLabels {
                breaker: breaker.to_owned(),
                to: to.as_str(),
            })
            .inc();
        self.breaker_state(breaker, to);
    }

    /// A call refused by an open breaker.
    pub fn breaker_rejected(&self, breaker: &str) {
        self.policy
            .breaker_rejected
            .get_or_create(&BreakerLabel {
                breaker: breaker.to_owned(),
            })
            .inc();
    }

    /// A call refused because its dependency's check is failing.
    pub fn dependency_refused(&self, check: &str) {
        self.policy
            .dependency_refused
            .get_or_create(&CheckLabel {
                check: check.to_owned(),
            })
            .inc();
    }

    /// A retry decision (`result`: `retried` or `budget`).
    pub fn retry(&self, tool: &str, result: &'static str) {
        let tool = self.tool_label(tool);
        self.policy
            .retries
            .get_or_create(&RetryLabels { tool, result })
            .inc();
    }

    /// A call refused by a limiter (`reason`: `full` or `queue_timeout`).
    pub fn limit_refused(&self, limit: &str, reason: &'static str) {
        self.policy
            .limit_rejected
            .get_or_create(&LimitLabels {
                limit: limit.to_owned(),
                reason,
            })
            .inc();
    }

    /// A `tools/call` of `tool` timed out at the gateway.
    pub fn tool_timeout(&self, tool: &str) {
        let tool = self.tool_label(tool);
        self.policy
            .tool_timeouts
            .get_or_create(&ToolLabel { tool })
            .inc();
    }

    /// A reply came after its request timed out, and was dropped.
    pub fn late_reply(&self) {
        self.policy.late_replies.inc();
    }

    /// The exposition (OpenMetrics text, ending in `# EOF`).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// The per-request log line (issue #19 part 5), one per JSON-RPC request answered, for the
/// HTTP upstream and the front door alike: at info, `method`, `tool` (a `tools/call`'s, else
/// empty), `duration_ms` and `outcome`. Never the arguments or the results. Method and tool
/// are what a client sent: made inert and cut ([`mcpulse_wire::text::field`]), so that a
/// name cannot forge a log line or flood it.
pub fn log_request(method: &str, tool: Option<&str>, took: Duration, outcome: Outcome) {
    tracing::info!(
        // `&str`, not `%`: a string field is recorded as it is, where a `Display` one is
        // formatted into a new string first (the log's formatter makes every value inert).
        method = &*mcpulse_wire::text::field(method),
        tool = &*mcpulse_wire::text::field(tool.unwrap_or("")),
        // Whole microseconds: `0.998`, not `0.9981770000000001`.
        duration_ms = took.as_micros() as f64 / 1000.0,
        outcome = outcome.as_str(),
        "request"
    );
}

fn set_state(family: &Family<StatusLabel, Gauge>, all: &[CheckStatus], current: CheckStatus) {
    for s in all {
        family
            .get_or_create(&StatusLabel { status: s.as_str() })
            .set(i64::from(*s == current));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use mcpulse_relay::endpoints::MAX_TOOL_LABELS;

    #[test]
    fn labels_are_bounded() {
        let m = Metrics::new();
        let names: Vec<String> = (0..(MAX_TOOL_LABELS + 20))
            .map(|i| format!("t{i}"))
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        m.learn_tools(&names);
        m.learn_tools(&["evil\n\u{1b}[31m"]);
        for i in 0..(MAX_TOOL_LABELS + 20) {
            m.request(
                "tools/call",
                Some(&format!("t{i}")),
                Duration::from_millis(1),
                Outcome::Ok,
            );
        }
        m.request(
            "x/made-up",
            None,
            Duration::from_millis(1),
            Outcome::RpcError,
        );
        m.request(
            "tools/call",
            Some("evil\n\u{1b}[31m"),
            Duration::ZERO,
            Outcome::Ok,
        );
        let t = m.encode().unwrap();
        assert!(t.contains(r#"mcpulse_gateway_requests_total{method="tools/call",tool="_other",outcome="ok"} 21"#), "{t}");
        assert!(t.contains(r#"method="_other",tool="",outcome="rpc_error""#));
        assert!(!t.contains('\u{1b}'));
        assert!(t.contains("# UNIT mcpulse_gateway_request_duration_seconds seconds"));
    }

    #[test]
    fn the_request_log_line_is_inert_and_holds_no_arguments() {
        // String fields as recorded (not through Debug, which would escape a line break
        // itself and hide whether the gateway made the value inert).
        let logs = mcpulse_testkit::logs::Capture::new();
        tracing::subscriber::with_default(logs.clone(), || {
            log_request(
                "tools/call",
                Some("evil\n2026-01-01 INFO forged\u{1b}[2J"),
                Duration::from_micros(1500),
                Outcome::ToolError,
            );
        });
        let events = logs.events();
        assert_eq!(events.len(), 1);
        let e = &events[0];
        assert_eq!(e.level, "INFO");
        assert_eq!(e.field("method"), Some("tools/call"));
        assert_eq!(e.field("duration_ms"), Some("1.5"));
        assert_eq!(e.field("outcome"), Some("tool_error"));
        // The tool name reaches the formatter already inert: its escapes visible, one line.
        let tool = e.field("tool").unwrap_or_default();
        assert!(
            tool.starts_with("evil") && tool.contains("INFO forged"),
            "{tool}"
        );
        let line = e.line();
        assert!(!line.contains('\n') && !line.contains('\u{1b}'), "{line:?}");
    }

    #[test]
    fn only_listed_tools_get_a_label() {
        let m = Metrics::new();
        for i in 0..(MAX_TOOL_LABELS + 5) {
            m.request(
                "tools/call",
                Some(&format!("junk{i}")),
                Duration::ZERO,
                Outcome::RpcError,
            );
        }
        m.learn_tools_in(br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo"}]}}"#);
        m.learn_tools_in(br#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"name":"x"}]}}"#);
        m.request("tools/call", Some("echo"), Duration::ZERO, Outcome::Ok);
        m.request("tools/call", Some("x"), Duration::ZERO, Outcome::Ok);
        let t = m.encode().unwrap();
        assert!(
            t.contains(r#"requests_total{method="tools/call",tool="echo",outcome="ok"} 1"#),
            "{t}"
        );
        assert!(
            t.contains(
                r#"requests_total{method="tools/call",tool="_other",outcome="rpc_error"} 105"#
            ),
            "{t}"
        );
        assert!(
            t.contains(r#"requests_total{method="tools/call",tool="_other",outcome="ok"} 1"#),
            "{t}"
        );
        assert!(!t.contains("junk"), "{t}");
    }
}
