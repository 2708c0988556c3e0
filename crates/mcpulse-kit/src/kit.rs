//! Per-tool policies on an rmcp `ToolRouter`, and the opt-in `health_check` tool.
//!
//! rmcp has no middleware, but a tool router's routes are public: [`Kit::wrap`] replaces each
//! route's call with one that applies the tool's [`ToolPolicy`], in this order:
//! 1. the **concurrency limit**: past `max_concurrent` calls in flight, a call is refused at
//!    once with `isError` ("tool X is busy: N calls in flight, its limit") — no queue: an agent
//!    retries better than it waits in the dark;
//! 2. the **circuit breaker** (mcpulse-policy's, resilience4j's model): while open, a call
//!    fails fast with `isError` naming the breaker and when it will try again; its open and
//!    half-open states turn `/readyz` to `warn` (degraded, still 200);
//! 3. the **timeout**: past it the tool's future is dropped and the call answers `isError`
//!    "tool X timed out after 2s (timeout)"; the breaker counts it as a `timeout` failure;
//! 4. the client's **cancellation** (`notifications/cancelled`, rmcp's `RequestContext::ct`):
//!    the tool's future is dropped at once, the breaker's permit handed back unjudged.
//!
//! Outcomes the breaker counts: a JSON-RPC error, an `isError` result, a timeout. Every call
//! is counted in the metrics (`requests_total{method="tools/call",tool,outcome}` and its
//! duration), a tool's policy refusals too (`gateway_error`, as the gateway counts its own).
//!
//! State is per tool and fixed in size: a breaker's window, a limiter's counters.

use crate::Health;
use crate::metrics::Outcome as Counted;
use mcpulse_policy::breaker::{
    Admission, Breaker, BreakerPolicy, BreakerState, FailureKind, Outcome, Permit, Transition,
};
use mcpulse_policy::limit::{Admit, LimitPolicy, Limiter};
use rmcp::handler::server::router::tool::{ToolRoute, ToolRouter};
use rmcp::handler::server::tool::{DynCallToolHandler, ToolCallContext};
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, Tool, ToolAnnotations};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

/// The `health_check` tool's name by default.
pub const HEALTH_TOOL: &str = "health_check";

/// One tool's policies; all off by default.
///
/// ```
/// use mcpulse_kit::ToolPolicy;
/// use std::time::Duration;
/// let p = ToolPolicy::new()
///     .timeout(Duration::from_secs(30))
///     .max_concurrent(4)
///     .breaker(Default::default());
/// assert_eq!(p.timeout_limit(), Some(Duration::from_secs(30)));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ToolPolicy {
    timeout: Option<Duration>,
    breaker: Option<BreakerPolicy>,
    max_concurrent: Option<u32>,
}

impl ToolPolicy {
    pub fn new() -> ToolPolicy {
        ToolPolicy::default()
    }
    /// A call taking longer is cut and answered `isError`.
    pub fn timeout(mut self, limit: Duration) -> ToolPolicy {
        self.timeout = Some(limit);
        self
    }
    /// A circuit breaker with these settings (`BreakerPolicy::default()`: resilience4j's,
    /// with `minimum_calls` 10 and 30 s open).
    pub fn breaker(mut self, policy: BreakerPolicy) -> ToolPolicy {
        self.breaker = Some(policy);
        self
    }
    /// At most this many calls at once (at least 1).
    pub fn max_concurrent(mut self, n: u32) -> ToolPolicy {
        self.max_concurrent = Some(n);
        self
    }
    pub fn timeout_limit(&self) -> Option<Duration> {
        self.timeout
    }
}

/// The per-tool policies and the health tool, for one server.
///
/// ```
/// use mcpulse_kit::{Health, Kit, ToolPolicy};
/// use std::time::Duration;
/// let kit = Kit::new(Health::new("my-server", "1.0.0"))
///     .tool("search", ToolPolicy::new().timeout(Duration::from_secs(10)))
///     .default_policy(ToolPolicy::new().max_concurrent(16))
///     .health_tool(mcpulse_kit::kit::HEALTH_TOOL);
/// # let _ = kit;
/// ```
#[derive(Debug, Clone)]
pub struct Kit {
    health: Health,
    tools: HashMap<String, ToolPolicy>,
    default: ToolPolicy,
    health_tool: Option<String>,
}

impl Kit {
    pub fn new(health: Health) -> Kit {
        Kit {
            health,
            tools: HashMap::new(),
            default: ToolPolicy::default(),
            health_tool: None,
        }
    }

    /// The policy of the tool `name` (instead of the default one).
    pub fn tool(mut self, name: impl Into<String>, policy: ToolPolicy) -> Kit {
        self.tools.insert(name.into(), policy);
        self
    }

    /// The policy of every tool without one of its own (nothing by default).
    pub fn default_policy(mut self, policy: ToolPolicy) -> Kit {
        self.default = policy;
        self
    }

    /// Adds the `health_check` tool under `name` (opt-in): `/readyz`'s status as
    /// `structuredContent` (`status` ok/degraded/down, `checks` by name) with the same JSON as
    /// a text fallback. No policy applies to it: it only reads the cache.
    pub fn health_tool(mut self, name: impl Into<String>) -> Kit {
        self.health_tool = Some(name.into());
        self
    }

    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Wraps every route of `router` in its tool's policies, adds the health tool when it
    /// is enabled, and opens the readiness latch with the router's tool count (the health
    /// tool not counted: a server whose registry is empty is not ready because of it).
    /// Refuses a policy naming no routed tool (a typo would silently protect nothing) and
    /// invalid breaker or limit settings.
    pub fn wrap<S: Send + Sync + 'static>(
        &self,
        mut router: ToolRouter<S>,
    ) -> Result<ToolRouter<S>, crate::Error> {
        if let Some(name) = self
            .tools
            .keys()
            .find(|n| !router.map.contains_key(n.as_str()))
        {
            return Err(crate::Error::Policy {
                tool: name.clone(),
                why: "no such tool in the router".into(),
            });
        }
        let count = router.map.len();
        for (name, route) in router.map.iter_mut() {
            let policy = self.tools.get(name.as_ref()).unwrap_or(&self.default);
            let guard = Guard::new(name, policy, &self.health)?;
            *route = guard.wrap(route.clone());
        }
        if let Some(name) = &self.health_tool {
            router.add_route(health_route(name, self.health.clone()));
        }
        self.health.tools_loaded(count);
        Ok(router)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One tool's policy state.
struct Guard {
    tool: Arc<str>,
    timeout: Option<Duration>,
    breaker: Option<Arc<Mutex<Breaker>>>,
    limiter: Option<Mutex<Limiter>>,
    health: Health,
}

/// Hands a limiter slot back when the call ends, however it ends (a dropped future too).
struct Slot<'a>(&'a Mutex<Limiter>);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        lock(self.0).release();
    }
}

/// A breaker's permit while its call runs: handed back unjudged ([`Breaker::cancel`]) when the
/// call ends without an outcome, a dropped future included (the client went away, rmcp dropped
/// the handler): in half-open a trial that is never handed back would hold the breaker there,
/// refusing every call, for ever.
struct Trial<'a> {
    breaker: &'a Mutex<Breaker>,
    permit: Option<Permit>,
}

impl Trial<'_> {
    /// The call's outcome, recorded; the change of state it caused, if any.
    fn record(mut self, now_ms: u64, outcome: Outcome, took: Duration) -> Option<Transition> {
        let permit = self.permit.take()?;
        lock(self.breaker).record(now_ms, permit, outcome, took)
    }
}

impl Drop for Trial<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            lock(self.breaker).cancel(p);
        }
    }
}

/// A breaker's change of state, wherever it was seen (a call, a refusal, a `/readyz` read):
/// logged (the tool's name made inert) and counted, and its state gauge moved.
pub(crate) fn breaker_changed(health: &Health, tool: &str, t: &Transition) {
    tracing::warn!(
        tool = %mcpulse_wire::text::field(tool),
        from = t.from.as_str(),
        to = t.to.as_str(),
        "circuit breaker changed"
    );
    health.metrics().breaker_transition(tool, t.to);
}

fn refused(text: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(text)]).into()
}

impl Guard {
    fn new(tool: &str, p: &ToolPolicy, health: &Health) -> Result<Guard, crate::Error> {
        let invalid = |why: String| crate::Error::Policy {
            tool: tool.to_owned(),
            why,
        };
        let breaker = match p.breaker {
            Some(b) => {
                b.validate().map_err(|e| invalid(e.to_string()))?;
                let b = Arc::new(Mutex::new(Breaker::new(b)));
                health.add_breaker(tool, Arc::clone(&b));
                health.metrics().set_breaker(tool, BreakerState::Closed);
                Some(b)
            }
            None => None,
        };
        let limiter = match p.max_concurrent {
            Some(n) => {
                let l = LimitPolicy {
                    max_concurrent: n,
                    queue: 0,
                    queue_timeout: Duration::ZERO,
                };
                l.validate().map_err(|e| invalid(e.to_string()))?;
                Some(Mutex::new(Limiter::new(l)))
            }
            None => None,
        };
        Ok(Guard {
            tool: tool.into(),
            timeout: p.timeout,
            breaker,
            limiter,
            health: health.clone(),
        })
    }

    fn wrap<S: Send + Sync + 'static>(self, route: ToolRoute<S>) -> ToolRoute<S> {
        let guard = Arc::new(self);
        let inner = route.call;
        ToolRoute::new_dyn(route.attr, move |ctx: ToolCallContext<'_, S>| {
            let guard = Arc::clone(&guard);
            let inner = Arc::clone(&inner);
            Box::pin(async move { guard.call(ctx, &*inner).await })
        })
    }

    async fn call<'a, S>(
        &self,
        ctx: ToolCallContext<'a, S>,
        inner: &DynCallToolHandler<S>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        let started = Instant::now();
        let (answer, counted) = self.guarded(ctx, inner).await;
        self.health
            .metrics()
            .tool_call(&self.tool, started.elapsed(), counted);
        answer
    }

    async fn guarded<'a, S>(
        &self,
        ctx: ToolCallContext<'a, S>,
        inner: &DynCallToolHandler<S>,
    ) -> (Result<CallToolResponse, rmcp::ErrorData>, Counted) {
        let tool = &self.tool;
        let _slot = match &self.limiter {
            Some(l) => {
                let mut limiter = lock(l);
                match limiter.acquire(self.health.now_ms()) {
                    Admit::Now => {
                        drop(limiter);
                        Some(Slot(l))
                    }
                    // No queue is configured, so nothing is ever queued; refuse either way.
                    Admit::Queued { .. } | Admit::Rejected { .. } => {
                        let n = limiter.policy().max_concurrent;
                        drop(limiter);
                        self.health.metrics().limit_rejected(tool);
                        return (
                            Ok(refused(format!(
                                "tool {tool} is busy: {n} calls in flight, its concurrency limit (max_concurrent); try again shortly"
                            ))),
                            Counted::PolicyError,
                        );
                    }
                }
            }
            None => None,
        };
        let permit = match &self.breaker {
            Some(b) => {
                let now = self.health.now_ms();
                let (admission, changed) = lock(b).try_acquire(now);
                if let Some(t) = changed {
                    breaker_changed(&self.health, tool, &t);
                }
                match admission {
                    Admission::Permitted(p) => Some(Trial {
                        breaker: b,
                        permit: Some(p),
                    }),
                    Admission::Rejected { state, retry_at_ms } => {
                        self.health.metrics().breaker_rejected(tool);
                        let when = match retry_at_ms {
                            Some(at) => format!(
                                "; it lets a trial call through in {}",
                                // Rounded up, as /readyz says it: never an early "29s".
                                mcpulse_policy::check::human_ceil(Duration::from_millis(
                                    at.saturating_sub(now)
                                ))
                            ),
                            None => "; its trial calls are in flight".to_owned(),
                        };
                        return (
                            Ok(refused(format!(
                                "tool {tool} is unavailable: its circuit breaker is {} after too many failures{when}",
                                state.as_str()
                            ))),
                            Counted::PolicyError,
                        );
                    }
                }
            }
            None => None,
        };
        let ct = ctx.request_context.ct.clone();
        let started = Instant::now();
        let run = inner(ctx);
        let limit = self.timeout;
        let ended = tokio::select! {
            biased;
            () = ct.cancelled() => None,
            r = run => Some(Some(r)),
            () = async {
                match limit {
                    Some(l) => tokio::time::sleep(l).await,
                    None => std::future::pending().await,
                }
            } => Some(None),
        };
        let took = started.elapsed();
        let (answer, outcome, counted) = match ended {
            None => {
                // Cancelled by the client: no outcome to judge (the trial, dropped, hands its
                // permit back), and no answer is read.
                drop(permit);
                return (
                    Err(rmcp::ErrorData::internal_error(
                        format!("tool {tool}: the call was cancelled by the client"),
                        None,
                    )),
                    Counted::RpcError,
                );
            }
            Some(None) => {
                self.health.metrics().timed_out(tool);
                let l = limit.unwrap_or_default();
                (
                    Ok(refused(format!(
                        "tool {tool} timed out after {} (timeout): the call was abandoned",
                        mcpulse_wire::units::human_duration(l.as_millis())
                    ))),
                    Outcome::Failure(FailureKind::Timeout),
                    Counted::PolicyError,
                )
            }
            Some(Some(Err(e))) if e.code == rmcp::model::ErrorCode::INVALID_PARAMS => {
                // The client's arguments did not fit the tool: the client's mistake, not the
                // tool's failure, so its breaker trial is handed back unjudged (one client's
                // bad calls must not open the breaker for every session). rmcp's router answers
                // a deserialisation failure as an `isError` result: counted as what the client
                // gets.
                drop(permit);
                let counted = if e.message.starts_with("failed to deserialize parameters:") {
                    Counted::ToolError
                } else {
                    Counted::RpcError
                };
                return (Err(e), counted);
            }
            Some(Some(Err(e))) => (
                Err(e),
                Outcome::Failure(FailureKind::JsonRpcError),
                Counted::RpcError,
            ),
            Some(Some(Ok(r))) => {
                let is_error =
                    matches!(&r, CallToolResponse::Complete(c) if c.is_error == Some(true));
                if is_error {
                    (
                        Ok(r),
                        Outcome::Failure(FailureKind::ToolError),
                        Counted::ToolError,
                    )
                } else {
                    (Ok(r), Outcome::Success, Counted::Ok)
                }
            }
        };
        if let Some(t) = permit.and_then(|p| p.record(self.health.now_ms(), outcome, took)) {
            breaker_changed(&self.health, tool, &t);
        }
        (answer, counted)
    }
}

/// The `health_check` route.
fn health_route<S: Send + Sync + 'static>(name: &str, health: Health) -> ToolRoute<S> {
    let input = serde_json::json!({"type": "object", "properties": {}});
    let output = serde_json::json!({
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["ok", "degraded", "down"]},
            "checks": {"type": "object"},
        },
        "required": ["status", "checks"],
    });
    let as_object = |v: serde_json::Value| match v {
        serde_json::Value::Object(o) => Arc::new(o),
        _ => Arc::new(serde_json::Map::new()),
    };
    let attr = Tool::new(
        name.to_owned(),
        "The server's health: its tool registry and dependencies, as /readyz reports it.",
        as_object(input),
    )
    .with_raw_output_schema(as_object(output))
    .annotate(
        ToolAnnotations::new()
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
    );
    ToolRoute::new_dyn(attr, move |_ctx: ToolCallContext<'_, S>| {
        let health = health.clone();
        Box::pin(async move {
            // Never isError: the tool worked; the status is its answer.
            let content = mcpulse_policy::health::tool_content(&health.readiness());
            let mut r = CallToolResult::success(vec![ContentBlock::text(content.to_string())]);
            r.structured_content = Some(content);
            Ok(r.into())
        })
    })
}
