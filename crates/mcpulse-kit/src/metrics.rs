//! `/metrics`: Prometheus text (OpenMetrics, prometheus-client) with the gateway's names,
//! prefix included (`mcpulse_gateway_*`, docs/gateway.md `## Metrics`), so that one dashboard
//! serves a server behind the gateway and a server with the kit; the scrape's `job` /
//! `instance` labels tell them apart. The kit has no upstream, sessions or connections of its
//! own, so it exports the series that mean the same thing in both:
//! `requests_total{method,tool,outcome}`, `request_duration_seconds{method,tool}` (tool calls),
//! `check_status{check,status}`, `check_duration_seconds{check}`, `readiness_status{status}`,
//! `liveness_status{status}`, and the per-tool policies' `breaker_state{breaker,state}`,
//! `breaker_transitions_total{breaker,to}`, `breaker_rejected_total{breaker}`,
//! `limit_rejected_total{limit,reason}` and `tool_timeouts_total{tool}`: the gateway's names
//! and label keys exactly (a kit breaker or limit is one tool's, so `breaker` and `limit` are
//! the tool's name where the gateway puts a `[[tools]]` pattern; `reason` is always `full`,
//! the kit having no queue).
//!
//! Bounds: `tool`, `breaker` and `limit` are names the server registered (the wrapper records
//! only routed tools, a fixed set); `check` a registered check; the other labels closed sets.

use mcpulse_policy::breaker::BreakerState;
use mcpulse_policy::health::CheckStatus;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// The OpenMetrics content type `/metrics` answers with.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The prefix: the gateway's (see the module docs).
pub const PREFIX: &str = "mcpulse_gateway";

/// How a tool call ended (the `outcome` label, the gateway's words).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    ToolError,
    RpcError,
    /// Refused or cut by a policy (timeout, open breaker, saturated limit): the gateway's
    /// `gateway_error`, the answer the policy layer gave itself.
    PolicyError,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::RpcError => "rpc_error",
            Outcome::PolicyError => "gateway_error",
        }
    }
}

const STATUSES: [CheckStatus; 3] = [CheckStatus::Pass, CheckStatus::Warn, CheckStatus::Fail];
const BREAKER_STATES: [BreakerState; 3] = [
    BreakerState::Closed,
    BreakerState::Open,
    BreakerState::HalfOpen,
];

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
struct StatusLabel {
    status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckStatusLabels {
    check: String,
    status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckLabel {
    check: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
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

fn request_histogram() -> Histogram {
    // The gateway's buckets: 1 ms to about 65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_duration: Family<MethodToolLabels, Histogram, fn() -> Histogram>,
    check_status: Family<CheckStatusLabels, Gauge>,
    check_duration: Family<CheckLabel, Gauge<f64, AtomicU64>>,
    readiness: Family<StatusLabel, Gauge>,
    liveness: Family<StatusLabel, Gauge>,
    breaker_state: Family<BreakerStateLabels, Gauge>,
    breaker_transitions: Family<BreakerToLabels, Counter>,
    breaker_rejected: Family<BreakerLabel, Counter>,
    limit_rejected: Family<LimitLabels, Counter>,
    timeouts: Family<ToolLabel, Counter>,
}

fn set_state(f: &Family<StatusLabel, Gauge>, all: &[CheckStatus], now: CheckStatus) {
    for s in all {
        f.get_or_create(&StatusLabel { status: s.as_str() })
            .set(i64::from(*s == now));
    }
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let mut r = Registry::with_prefix(PREFIX);
        let m = Metrics {
            requests: Family::default(),
            request_duration: Family::new_with_constructor(request_histogram),
            check_status: Family::default(),
            check_duration: Family::default(),
            readiness: Family::default(),
            liveness: Family::default(),
            breaker_state: Family::default(),
            breaker_transitions: Family::default(),
            breaker_rejected: Family::default(),
            limit_rejected: Family::default(),
            timeouts: Family::default(),
            registry: Registry::default(),
        };
        r.register(
            "requests",
            "MCP requests answered, by method, tool (tools/call) and outcome (ok, tool_error, rpc_error, gateway_error)",
            m.requests.clone(),
        );
        r.register_with_unit(
            "request_duration",
            "Time from a request to its answer, by method and tool",
            Unit::Seconds,
            m.request_duration.clone(),
        );
        r.register(
            "check_status",
            "Each dependency check's confirmed status: 1 for the current one (pass, warn, fail), 0 for the others",
            m.check_status.clone(),
        );
        r.register_with_unit(
            "check_duration",
            "How long each dependency check's last run took",
            Unit::Seconds,
            m.check_duration.clone(),
        );
        r.register(
            "readiness_status",
            "/readyz's status: 1 for the current one (pass, warn, fail), 0 for the others",
            m.readiness.clone(),
        );
        r.register(
            "liveness_status",
            "/livez's status: 1 for the current one (pass, fail), 0 for the others",
            m.liveness.clone(),
        );
        r.register(
            "breaker_state",
            "Each tool's circuit breaker: 1 for its current state (closed, open, half_open), 0 for the others",
            m.breaker_state.clone(),
        );
        r.register(
            "breaker_transitions",
            "Circuit breaker changes of state, by breaker (the tool) and the state entered",
            m.breaker_transitions.clone(),
        );
        r.register(
            "breaker_rejected",
            "tools/call refused at once by an open (or busy half-open) circuit breaker",
            m.breaker_rejected.clone(),
        );
        r.register(
            "limit_rejected",
            "tools/call refused by a tool's concurrency limit, by limit (the tool) and reason (full: no queue)",
            m.limit_rejected.clone(),
        );
        r.register(
            "tool_timeouts",
            "tools/call cut by the tool's timeout, by tool",
            m.timeouts.clone(),
        );
        let m = Metrics { registry: r, ..m };
        m.set_readiness(CheckStatus::Fail);
        m.set_liveness(CheckStatus::Pass);
        m
    }

    pub(crate) fn tool_call(&self, tool: &str, took: Duration, outcome: Outcome) {
        self.request_duration
            .get_or_create(&MethodToolLabels {
                method: "tools/call",
                tool: tool.to_owned(),
            })
            .observe(took.as_secs_f64());
        self.requests
            .get_or_create(&RequestLabels {
                method: "tools/call",
                tool: tool.to_owned(),
                outcome: outcome.as_str(),
            })
            .inc();
    }

    pub(crate) fn breaker_rejected(&self, tool: &str) {
        self.breaker_rejected
            .get_or_create(&BreakerLabel {
                breaker: tool.to_owned(),
            })
            .inc();
    }

    /// A breaker changed state: counted, and its state gauge moved (by whoever saw the
    /// change: a call, a refusal, a `/readyz` read).
    pub(crate) fn breaker_transition(&self, tool: &str, to: BreakerState) {
        self.breaker_transitions
            .get_or_create(&BreakerToLabels {
                breaker: tool.to_owned(),
                to: to.as_str(),
            })
            .inc();
        self.set_breaker(tool, to);
    }

    /// A call refused by the tool's limit; always `full`, the kit's limits having no queue.
    pub(crate) fn limit_rejected(&self, tool: &str) {
        self.limit_rejected
            .get_or_create(&LimitLabels {
                limit: tool.to_owned(),
                reason: "full",
            })
            .inc();
    }

    pub(crate) fn timed_out(&self, tool: &str) {
        self.timeouts
            .get_or_create(&ToolLabel {
                tool: tool.to_owned(),
            })
            .inc();
    }

    pub(crate) fn set_breaker(&self, tool: &str, now: BreakerState) {
        for s in BREAKER_STATES {
            self.breaker_state
                .get_or_create(&BreakerStateLabels {
                    breaker: tool.to_owned(),
                    state: s.as_str(),
                })
                .set(i64::from(s == now));
        }
    }

    pub(crate) fn set_check(
        &self,
        check: &str,
        status: Option<CheckStatus>,
        took: Option<Duration>,
    ) {
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

    pub(crate) fn set_readiness(&self, status: CheckStatus) {
        set_state(&self.readiness, &STATUSES, status);
    }

    pub(crate) fn set_liveness(&self, status: CheckStatus) {
        set_state(
            &self.liveness,
            &[CheckStatus::Pass, CheckStatus::Fail],
            status,
        );
    }

    pub(crate) fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}
