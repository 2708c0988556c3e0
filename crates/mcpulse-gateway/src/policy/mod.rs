//! The call pipeline (issue #20): every `tools/call` through the gateway, over either
//! upstream, passes [`Policies::admit`] before it is sent and [`Permit::finish`] when its
//! outcome is known. One place holds the per-tool state: a breaker and a limiter per
//! `[[tools]]` entry, the gateway-wide limiter of `[concurrency]`; the decisions are
//! `mcpulse-policy`'s pure state machines, fed the time from tokio's clock (so tests under
//! paused time step it), as milliseconds since the policies were made.
//!
//! - **Timeouts** ([`config::Settings::timeout`]) are applied by the upstreams, which own the
//!   request in flight (stdio: `notifications/cancelled` to the child; HTTP: the upstream
//!   stream dropped, and a legacy upstream sent `notifications/cancelled` too); their answer
//!   is [`timeout_result`].
//! - **Breakers**: an open breaker refuses at once ([`Refusal::BreakerOpen`], answered as an
//!   `isError` tool result saying when it tries again); transitions are logged (the pattern is
//!   the config's, so inert) and counted; `/readyz` shows every breaker ([`Policies::breakers`]).
//! - **Limits**: the entry's limiter, then the gateway's; a request waits in a bounded queue at
//!   most its `queue_timeout`, then is refused ([`Refusal::Saturated`], HTTP 503 with
//!   `Retry-After`: the gateway admits before it opens any stream, so a refusal is always at
//!   the door).
//!
//! Cost on the hot path: one scan of the `[[tools]]` patterns (no allocation), one short lock
//! per limiter and breaker taken; a queued request adds one map entry and a oneshot channel.
//! Memory is bounded by the config: state exists per entry, never per name a client sends.

pub mod config;

use crate::metrics::Metrics;
use mcpulse_policy::breaker::{
    self, Admission, Breaker, BreakerState, FailureKind, Outcome, Transition,
};
use mcpulse_policy::limit::{Admit, LimitPolicy, Limiter, Ticket, Wake};
use mcpulse_policy::retry::{RetryBudget, RetryDecision, ToolHints};
use mcpulse_policy::timeout::Deadline;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Whole seconds, rounded up, at least 1 (what `Retry-After` carries).
pub fn whole_secs(d: Duration) -> u64 {
    d.as_secs()
        .saturating_add(u64::from(d.subsec_nanos() > 0))
        .max(1)
}

/// A wait as people read it, rounded up to whole seconds from 1 s (29.9 s left reads
/// "30s", never an early "29s").
pub fn human_ceil(d: Duration) -> String {
    let ms = d.as_millis();
    let ms = if ms >= 1000 {
        ms.div_ceil(1000) * 1000
    } else {
        ms
    };
    mcpulse_wire::units::human_duration(ms)
}

/// The gateway-wide limiter's name in metrics and messages.
pub const GATEWAY: &str = "gateway";

/// A limiter and the queued requests' wake-ups.
struct Limit {
    name: String,
    inner: Mutex<LimitInner>,
}

struct LimitInner {
    limiter: Limiter,
    waiters: HashMap<u64, oneshot::Sender<()>>,
}

impl Limit {
    fn new(name: String, policy: LimitPolicy) -> Limit {
        Limit {
            name,
            inner: Mutex::new(LimitInner {
                limiter: Limiter::new(policy),
                waiters: HashMap::new(),
            }),
        }
    }

    /// A slot, at once or after a wait of at most the queue timeout.
    async fn acquire(&self, p: &Policies, metrics: &Metrics) -> Result<(), Refusal> {
        let (rx, ticket, deadline_ms, timeout) = {
            let mut i = lock(&self.inner);
            let timeout = i.limiter.policy().queue_timeout;
            match i.limiter.acquire(p.now_ms()) {
                Admit::Now => return Ok(()),
                Admit::Rejected { retry_after } => {
                    drop(i);
                    metrics.limit_refused(&self.name, "full");
                    return Err(self.refusal(retry_after, None));
                }
                Admit::Queued {
                    ticket,
                    deadline_ms,
                } => {
                    let (tx, rx) = oneshot::channel();
                    i.waiters.insert(ticket.0, tx);
                    (rx, ticket, deadline_ms, timeout)
                }
            }
        };
        let at = p.at(deadline_ms);
        // Dropped before it ends (the client went away while queued), the guard gives back
        // a slot handed over but not yet taken, or leaves the queue.
        let mut wait = Queued {
            limit: self,
            policies: p,
            ticket,
            rx: Some(rx),
        };
        let woke = match tokio::time::timeout_at(at, wait.rx_mut()).await {
            Ok(Ok(())) => {
                wait.rx = None;
                true
            }
            // The limiter timed it out (its sender dropped).
            Ok(Err(_)) => {
                wait.rx = None;
                false
            }
            Err(_) => {
                let mut rx = wait.rx.take();
                let mut i = lock(&self.inner);
                if i.limiter.cancel(ticket) {
                    i.waiters.remove(&ticket.0);
                    false
                } else {
                    // Admitted or timed out by a release at the same instant.
                    i.waiters.remove(&ticket.0);
                    rx.as_mut().is_some_and(|rx| rx.try_recv().is_ok())
                }
            }
        };
        if woke {
            return Ok(());
        }
        metrics.limit_refused(&self.name, "queue_timeout");
        Err(self.refusal(Duration::from_secs(whole_secs(timeout)), Some(timeout)))
    }

    fn refusal(&self, retry_after: Duration, waited: Option<Duration>) -> Refusal {
        Refusal::Saturated {
            scope: self.name.clone(),
            retry_after,
            waited,
        }
    }

    /// A slot given back: the queue's head gets it, waiters past their deadline are told.
    fn release(&self, now_ms: u64) {
        let mut i = lock(&self.inner);
        i.limiter.release();
        while let Some(wake) = i.limiter.next_wake(now_ms) {
            match wake {
                Wake::Admitted(Ticket(t)) => {
                    let given = i.waiters.remove(&t).is_some_and(|tx| tx.send(()).is_ok());
                    if !given {
                        // Its request went away while queued: the slot is free again.
                        i.limiter.release();
                    }
                }
                Wake::TimedOut(Ticket(t)) => {
                    i.waiters.remove(&t);
                }
            }
        }
    }
}

/// A request waiting in a limiter's queue. Dropped while still waiting (its future was
/// dropped: the client disconnected), it leaves the queue; if a release had already handed
/// it the slot (the oneshot holds the wake-up nobody will read), it gives the slot back, so
/// that no slot is lost for good.
struct Queued<'a> {
    limit: &'a Limit,
    policies: &'a Policies,
    ticket: Ticket,
    /// `None` once the wait has ended (the outcome then belongs to `acquire`).
    rx: Option<oneshot::Receiver<()>>,
}

impl Queued<'_> {
    /// The wake-up to await (a closed one if the wait is over: never awaited then).
    fn rx_mut(&mut self) -> &mut oneshot::Receiver<()> {
        self.rx.get_or_insert_with(|| oneshot::channel().1)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        let handed = {
            let mut i = lock(&self.limit.inner);
            i.waiters.remove(&self.ticket.0);
            // Still queued: it just leaves. Otherwise a release admitted it (the slot is
            // in the oneshot) or timed it out.
            !i.limiter.cancel(self.ticket) && rx.try_recv().is_ok()
        };
        if handed {
            self.limit.release(self.policies.now_ms());
        }
    }
}

/// One `[[tools]]` entry's state.
struct Rule {
    limit: Option<Limit>,
    breaker: Option<Mutex<Breaker>>,
}

/// Every call policy's state (one per gateway, in [`crate::state::Shared`]).
pub struct Policies {
    settings: config::Settings,
    epoch: Instant,
    gateway: Option<Limit>,
    rules: Vec<Rule>,
    /// The dependencies' breakers, by `settings.dependencies`' index, with their names.
    deps: Vec<(String, Option<Mutex<Breaker>>)>,
    /// Retries (opt-in per entry): one budget for the gateway, and what the server said of
    /// its tools in `tools/list` (at most [`MAX_HINTS`] names).
    budget: Mutex<RetryBudget>,
    hints: Mutex<HashMap<String, ToolHints>>,
}

/// The most tools whose annotations are remembered (a server listing more: the rest are
/// taken as not repeatable, so never retried).
pub const MAX_HINTS: usize = 1024;

/// The longest tool name (bytes) whose annotations are remembered.
pub const MAX_HINT_NAME: usize = 256;

impl std::fmt::Debug for Policies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policies")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Why a call was not let through.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The tool's dependency (`[[checks]]` with `tools`) is confirmed failing its check.
    DependencyFailing { check: String },
    /// The entry's breaker is open (or half-open with every trial in flight).
    BreakerOpen {
        breaker: String,
        state: BreakerState,
        /// When it lets a trial through (`None`: as soon as the trials in flight end).
        retry_in: Option<Duration>,
    },
    /// A limiter is full, or the request waited its whole queue timeout.
    Saturated {
        /// [`GATEWAY`] or the entry's pattern.
        scope: String,
        retry_after: Duration,
        /// `Some(queue_timeout)` when it waited in the queue.
        waited: Option<Duration>,
    },
}

impl Refusal {
    /// The message for the client.
    pub fn message(&self, tool: &str) -> String {
        let tool = mcpulse_wire::text::field(tool);
        match self {
            Refusal::DependencyFailing { check } => format!(
                "mcpulse gateway: tool {tool:?} depends on {check:?}, whose health check is failing (see /readyz), so the call was not sent; calls go through again as soon as the check passes"
            ),
            Refusal::BreakerOpen {
                breaker,
                retry_in,
                state,
            } => {
                let when = match retry_in {
                    Some(d) => format!("it lets a trial call through in {}", human_ceil(*d)),
                    None => "its trial calls are in flight; try again shortly".to_owned(),
                };
                format!(
                    "mcpulse gateway: the circuit breaker {breaker:?} for tool {tool:?} is {}: recent calls failed, so this one was not sent; {when}",
                    state.as_str()
                )
            }
            Refusal::Saturated {
                scope,
                retry_after,
                waited,
            } => {
                let limit = if scope == GATEWAY {
                    "the gateway's concurrency limit ([concurrency])".to_owned()
                } else {
                    format!("the concurrency limit of [[tools]] {scope:?}")
                };
                let why = match waited {
                    Some(w) => format!(
                        "waited {} in the queue without a free slot",
                        mcpulse_wire::units::human_duration(w.as_millis())
                    ),
                    None => "its queue is full".to_owned(),
                };
                format!(
                    "mcpulse gateway: overloaded: tools/call {tool:?} refused by {limit}: {why}; retry after {} s",
                    whole_secs(*retry_after)
                )
            }
        }
    }
}

/// Leave to make one call. Dropped without [`Permit::finish`] (the client went away), its
/// slots are given back and its breaker trial freed, not counted.
pub struct Permit {
    policies: Arc<Policies>,
    rule: Option<usize>,
    dep: Option<usize>,
    dep_breaker: Option<breaker::Permit>,
    tool_slot: bool,
    gateway_slot: bool,
    breaker: Option<breaker::Permit>,
    started: Instant,
}

/// What a call's later attempts need of its [`Permit`] (its entry, its admission time), without
/// the permit itself: the retries of a streamed answer run in the stream's task while the
/// permit waits to be judged with the last reply.
#[derive(Debug, Clone, Copy)]
pub struct Attempts {
    rule: Option<usize>,
    started: Instant,
}

impl Permit {
    pub fn attempts(&self) -> Attempts {
        Attempts {
            rule: self.rule,
            started: self.started,
        }
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("rule", &self.rule)
            .field("tool_slot", &self.tool_slot)
            .field("gateway_slot", &self.gateway_slot)
            .finish_non_exhaustive()
    }
}

impl Permit {
    /// The call ended with `outcome`: its breaker learns it (a transition is logged and
    /// counted), then its slots are given back.
    pub fn finish(mut self, outcome: Outcome, metrics: &Metrics) {
        let p = self.policies.clone();
        let now = p.now_ms();
        let took = self.started.elapsed();
        if let (Some(i), Some(permit)) = (self.rule, self.breaker.take())
            && let (Some(b), Some(name)) = (
                p.rules.get(i).and_then(|r| r.breaker.as_ref()),
                p.pattern(i),
            )
            && let Some(t) = lock(b).record(now, permit, outcome, took)
        {
            transition(name, &t, metrics);
        }
        if let (Some(i), Some(permit)) = (self.dep, self.dep_breaker.take())
            && let Some((name, Some(b))) = p.deps.get(i)
            && let Some(t) = lock(b).record(now, permit, outcome, took)
        {
            transition(name, &t, metrics);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let p = &self.policies;
        let now = p.now_ms();
        if let (Some(i), Some(permit)) = (self.rule, self.breaker.take())
            && let Some(b) = p.rules.get(i).and_then(|r| r.breaker.as_ref())
        {
            lock(b).cancel(permit);
        }
        if let (Some(i), Some(permit)) = (self.dep, self.dep_breaker.take())
            && let Some((_, Some(b))) = p.deps.get(i)
        {
            lock(b).cancel(permit);
        }
        if self.tool_slot
            && let Some(l) = self.rule.and_then(|i| p.rules.get(i)?.limit.as_ref())
        {
            l.release(now);
        }
        if self.gateway_slot
            && let Some(l) = &p.gateway
        {
            l.release(now);
        }
    }
}

/// Logs and counts a breaker's change of state.
fn transition(breaker: &str, t: &Transition, metrics: &Metrics) {
    let reason = match t.reason {
        breaker::Reason::FailureRate {
            rate,
            threshold,
            calls,
        } => format!(
            "failure rate {:.0}% over {calls} calls reached {:.0}%",
            rate * 100.0,
            threshold * 100.0
        ),
        breaker::Reason::SlowCallRate {
            rate,
            threshold,
            calls,
        } => format!(
            "slow-call rate {:.0}% over {calls} calls reached {:.0}%",
            rate * 100.0,
            threshold * 100.0
        ),
        breaker::Reason::WaitOver => "the wait in open is over".to_owned(),
        breaker::Reason::TrialsSucceeded { trials } => format!("{trials} trial calls succeeded"),
        breaker::Reason::TrialFailed { failure } => match failure {
            Some(k) => format!("a trial call failed ({})", k.as_str()),
            None => "a trial call was slow".to_owned(),
        },
        breaker::Reason::TrialsHung { after_ms } => format!(
            "every trial call was still unanswered after {}",
            mcpulse_wire::units::human_duration(u128::from(after_ms))
        ),
    };
    let level_warn = t.to == BreakerState::Open;
    if level_warn {
        tracing::warn!(breaker, from = t.from.as_str(), to = t.to.as_str(), reason = %reason, "circuit breaker changed");
    } else {
        tracing::info!(breaker, from = t.from.as_str(), to = t.to.as_str(), reason = %reason, "circuit breaker changed");
    }
    metrics.breaker_transition(breaker, t.to);
}

/// A breaker as `/readyz` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerView {
    pub name: String,
    pub state: BreakerState,
    pub retry_in: Option<Duration>,
    pub calls: u64,
    pub failures: u64,
}

impl Policies {
    pub fn new(settings: config::Settings, metrics: &Metrics) -> Policies {
        let gateway = settings
            .concurrency
            .map(|l| Limit::new(GATEWAY.to_owned(), l));
        let rules = settings
            .tools
            .iter()
            .map(|r| Rule {
                limit: r.limit.map(|l| Limit::new(r.pattern.clone(), l)),
                breaker: r.breaker.map(|b| Mutex::new(Breaker::new(b))),
            })
            .collect();
        for r in &settings.tools {
            if r.breaker.is_some() {
                metrics.breaker_state(&r.pattern, BreakerState::Closed);
            }
        }
        let deps = settings
            .dependencies
            .iter()
            .map(|d| {
                let name = d.breaker_name();
                if d.breaker.is_some() {
                    metrics.breaker_state(&name, BreakerState::Closed);
                }
                (name, d.breaker.map(|b| Mutex::new(Breaker::new(b))))
            })
            .collect();
        let budget = settings.budget;
        Policies {
            settings,
            epoch: Instant::now(),
            gateway,
            rules,
            deps,
            budget: Mutex::new(RetryBudget::new(budget)),
            hints: Mutex::new(HashMap::new()),
        }
    }

    pub fn settings(&self) -> &config::Settings {
        &self.settings
    }

    fn now_ms(&self) -> u64 {
        millis(self.epoch.elapsed())
    }

    fn at(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    fn pattern(&self, i: usize) -> Option<&str> {
        self.settings.tools.get(i).map(|r| r.pattern.as_str())
    }

    /// Lets a `tools/call` of `tool` through, or says why not: its dependency's check and
    /// breaker, the entry's breaker (an open one refuses without taking a slot), then its
    /// limiter, then the gateway's.
    pub async fn admit(
        self: &Arc<Self>,
        tool: &str,
        shared: &crate::state::Shared,
    ) -> Result<Permit, Refusal> {
        let metrics = &shared.metrics;
        let rule = self.settings.rule(tool).map(|(i, _)| i);
        let dep = self.settings.dependency(tool);
        let mut permit = Permit {
            policies: self.clone(),
            rule,
            dep: dep.map(|(i, _)| i),
            dep_breaker: None,
            tool_slot: false,
            gateway_slot: false,
            breaker: None,
            started: Instant::now(),
        };
        if let Some((i, d)) = dep {
            if shared.health.confirmed(&d.check) == Some(mcpulse_policy::health::CheckStatus::Fail)
            {
                metrics.dependency_refused(&d.check);
                return Err(Refusal::DependencyFailing {
                    check: d.check.clone(),
                });
            }
            if let Some((name, Some(b))) = self.deps.get(i) {
                permit.dep_breaker = Some(self.try_breaker(b, name, metrics)?);
            }
        }
        if let Some(i) = rule
            && let Some(b) = self.rules.get(i).and_then(|r| r.breaker.as_ref())
        {
            let name = self.pattern(i).unwrap_or_default();
            permit.breaker = Some(self.try_breaker(b, name, metrics)?);
        }
        if let Some(l) = rule.and_then(|i| self.rules.get(i)?.limit.as_ref()) {
            l.acquire(self, metrics).await?;
            permit.tool_slot = true;
        }
        if let Some(l) = &self.gateway {
            l.acquire(self, metrics).await?;
            permit.gateway_slot = true;
        }
        if permit.tool_slot || permit.gateway_slot {
            // A breaker that changed state while the call waited for its slots (it opened on
            // the calls ahead in the queue): its permit is of the old state, which would send
            // the call to the failing upstream anyway. Asked again: an open breaker refuses it
            // now (its slots given back as the permit drops).
            if let Some(i) = rule
                && let Some(b) = self.rules.get(i).and_then(|r| r.breaker.as_ref())
                && permit
                    .breaker
                    .as_ref()
                    .is_some_and(|p| !lock(b).is_current(p))
            {
                permit.breaker = None;
                let name = self.pattern(i).unwrap_or_default();
                permit.breaker = Some(self.try_breaker(b, name, metrics)?);
            }
            if let Some((i, _)) = dep
                && let Some((name, Some(b))) = self.deps.get(i)
                && permit
                    .dep_breaker
                    .as_ref()
                    .is_some_and(|p| !lock(b).is_current(p))
            {
                permit.dep_breaker = None;
                permit.dep_breaker = Some(self.try_breaker(b, name, metrics)?);
            }
        }
        permit.started = Instant::now();
        if permit
            .rule
            .and_then(|i| self.settings.tools.get(i)?.retry)
            .is_some()
        {
            lock(&self.budget).deposit(self.now_ms());
        }
        Ok(permit)
    }

    /// Learns the tools' `readOnlyHint` / `idempotentHint` from a `tools/list` reply (only
    /// when some entry has a retry: otherwise nothing reads them).
    pub fn learn_hints(&self, reply: &Value) {
        if !self.settings.tools.iter().any(|r| r.retry.is_some()) {
            return;
        }
        let Some(tools) = crate::serve::listed(reply) else {
            return;
        };
        let mut hints = lock(&self.hints);
        for t in tools {
            // A name past MAX_HINT_NAME is not remembered (never retried): the spec's names
            // are at most 128 characters, and memory stays bounded whatever a server lists.
            let Some(name) = t
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| n.len() <= MAX_HINT_NAME)
            else {
                continue;
            };
            let a = t.get("annotations");
            let flag = |k: &str| a.and_then(|a| a.get(k)).and_then(Value::as_bool) == Some(true);
            let h = ToolHints {
                read_only: flag("readOnlyHint"),
                idempotent: flag("idempotentHint"),
            };
            if hints.len() < MAX_HINTS || hints.contains_key(name) {
                hints.insert(name.to_owned(), h);
            }
        }
    }

    /// [`Policies::learn_hints`] on a reply's bytes (parsed only when some entry retries).
    pub fn learn_hints_in(&self, reply: &[u8]) {
        if self.settings.tools.iter().any(|r| r.retry.is_some())
            && let Ok(v) = serde_json::from_slice::<Value>(reply)
        {
            self.learn_hints(&v);
        }
    }

    /// Whether a call admitted with `permit` may ever be retried (its entry has a retry):
    /// the caller then keeps a copy of the request.
    pub fn may_retry(&self, permit: &Permit) -> bool {
        permit
            .rule
            .and_then(|i| self.settings.tools.get(i)?.retry)
            .is_some()
    }

    /// The first attempt's timer of a call admitted with `permit`: the tool's timeout, and
    /// the call's deadline (its entry's `retry.deadline`, from the admission) when it has one.
    pub fn timer(&self, permit: Attempts, tool: &str) -> Timer {
        let cutoff = permit
            .rule
            .and_then(|i| self.settings.tools.get(i)?.retry?.deadline)
            .map(|d| (permit.started + d, d));
        Timer {
            cutoff,
            ..Timer::start(&self.settings, tool)
        }
    }

    /// After attempt `made` of a `tools/call` of `tool` failed with `failure`: the delay
    /// before the next attempt, or `None` (the reason logged). Retried only when the entry
    /// opts in, the server annotated the tool read-only or idempotent, the failure is one
    /// the entry retries, attempts are left, the backoff ends before the call's deadline
    /// (`retry.deadline`, when set), and the gateway's retry budget allows it.
    pub fn retry_after(
        &self,
        permit: Attempts,
        tool: &str,
        made: u32,
        failure: FailureKind,
        metrics: &Metrics,
    ) -> Option<Duration> {
        let policy = permit
            .rule
            .and_then(|i| self.settings.tools.get(i)?.retry)?;
        let hints = lock(&self.hints).get(tool).copied().unwrap_or_default();
        let draw = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(made);
            h.finish()
        };
        let now = self.now_ms();
        let started = millis(permit.started.saturating_duration_since(self.epoch));
        let decision = policy.decide(
            &mut lock(&self.budget),
            hints,
            made,
            failure,
            now,
            policy.call_deadline_ms(started),
            draw,
        );
        // The metrics take the raw name (their label is bounded and made inert there: an
        // escaped name would not match a listed tool); the log takes the inert one.
        let raw = tool;
        let tool = mcpulse_wire::text::field(tool);
        match decision {
            RetryDecision::Retry { delay, attempt } => {
                tracing::info!(tool = %tool, attempt, delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), failure = failure.as_str(), "retrying a tool call");
                metrics.retry(raw, "retried");
                Some(delay)
            }
            RetryDecision::Stop(stop) => {
                tracing::debug!(tool = %tool, why = stop.as_str(), "not retrying a tool call");
                if matches!(stop, mcpulse_policy::retry::Stop::Budget) {
                    metrics.retry(raw, "budget");
                }
                None
            }
        }
    }

    fn try_breaker(
        &self,
        b: &Mutex<Breaker>,
        name: &str,
        metrics: &Metrics,
    ) -> Result<breaker::Permit, Refusal> {
        let now = self.now_ms();
        let (admission, t) = lock(b).try_acquire(now);
        if let Some(t) = t {
            transition(name, &t, metrics);
        }
        match admission {
            Admission::Permitted(p) => Ok(p),
            Admission::Rejected { state, retry_at_ms } => {
                metrics.breaker_rejected(name);
                Err(Refusal::BreakerOpen {
                    breaker: name.to_owned(),
                    state,
                    retry_in: retry_at_ms.map(|at| Duration::from_millis(at.saturating_sub(now))),
                })
            }
        }
    }

    /// Every limiter's calls holding a slot now, by name ([`GATEWAY`] or the entry's
    /// pattern): what a drained gateway must show as 0.
    pub fn in_flight(&self) -> Vec<(String, u32)> {
        let rules = self.rules.iter().filter_map(|r| r.limit.as_ref());
        self.gateway
            .iter()
            .chain(rules)
            .map(|l| (l.name.clone(), lock(&l.inner).limiter.in_flight()))
            .collect()
    }

    /// Every breaker, its wait in open checked against the clock (so `/readyz` does not show
    /// a breaker open for ever when no call comes).
    pub fn breakers(&self, metrics: &Metrics) -> Vec<BreakerView> {
        let now = self.now_ms();
        let mut out = Vec::new();
        let rules = self
            .rules
            .iter()
            .enumerate()
            .filter_map(|(i, r)| Some((self.pattern(i)?, r.breaker.as_ref()?)));
        let deps = self
            .deps
            .iter()
            .filter_map(|(name, b)| Some((name.as_str(), b.as_ref()?)));
        for (name, b) in rules.chain(deps) {
            let mut b = lock(b);
            if let Some(t) = b.poll(now) {
                transition(name, &t, metrics);
            }
            let stats = b.stats(now);
            out.push(BreakerView {
                name: name.to_owned(),
                state: b.state(),
                retry_in: b
                    .open_until()
                    .map(|at| Duration::from_millis(at.saturating_sub(now))),
                calls: stats.calls,
                failures: stats.failures,
            });
        }
        out
    }
}

/// How a reply ended, for a breaker: the metrics' outcome, a gateway error being the
/// transport's (the child or the connection failed).
/// The failure a reply's outcome stands for (`None`: a success).
pub fn failure_of(o: crate::metrics::Outcome) -> Option<FailureKind> {
    match outcome_of(o) {
        Outcome::Success => None,
        Outcome::Failure(k) => Some(k),
    }
}

pub fn outcome_of(o: crate::metrics::Outcome) -> Outcome {
    match o {
        crate::metrics::Outcome::Ok => Outcome::Success,
        crate::metrics::Outcome::ToolError => Outcome::Failure(FailureKind::ToolError),
        crate::metrics::Outcome::RpcError => Outcome::Failure(FailureKind::JsonRpcError),
        crate::metrics::Outcome::GatewayError => Outcome::Failure(FailureKind::Transport),
    }
}

/// The answer to a `tools/call` past its timeout: a tool result with `isError`, which the
/// agent reads as text, naming the tool, the timeout (or the call's deadline, when that was
/// what ran out) and the likely causes.
pub fn timeout_result(timer: &Timer, cancelled_by: &str) -> Value {
    let tool = mcpulse_wire::text::field(&timer.tool);
    let within = mcpulse_wire::units::human_duration(timer.ran().as_millis());
    let text = match timer.cut_by() {
        Some(total) => format!(
            "mcpulse gateway: tool {tool:?} did not answer within {within}, what was left of the {} its attempts may take together (retry.deadline at the gateway), so the call was cancelled ({cancelled_by}). Likely causes: the server is busy with other calls, or a dependency of the tool is slow or down. Retrying at once is unlikely to help; try later or with a smaller request.",
            mcpulse_wire::units::human_duration(total.as_millis()),
        ),
        None => format!(
            "mcpulse gateway: tool {tool:?} did not answer within {within} (its timeout at the gateway), so the call was cancelled ({cancelled_by}). Likely causes: the server is busy with other calls, or a dependency of the tool is slow or down. Retrying at once is unlikely to help; try later or with a smaller request.",
        ),
    };
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// The answer to a call an open breaker refused: a tool result with `isError`.
pub fn refusal_result(message: &str) -> Value {
    json!({"content": [{"type": "text", "text": message}], "isError": true})
}

/// The JSON-RPC code of a request refused by a concurrency limit (the supervisor's "too many
/// requests in flight": the client treats both alike).
pub const OVERLOADED: i64 = mcpulse_relay::supervise::codes::TOO_MANY_REQUESTS;

/// The HTTP answer to a refused `tools/call` (request id `id`): an open breaker is a tool
/// result with `isError` (200: the agent reads it and moves on); a limit is 503 with
/// `Retry-After` and a JSON-RPC error for the id, before any stream is opened.
pub fn refusal_response(id: &Value, tool: &str, refusal: &Refusal) -> axum::response::Response {
    use axum::http::{HeaderValue, StatusCode, header};
    use axum::response::IntoResponse;
    let message = refusal.message(tool);
    let (status, body) = match refusal {
        Refusal::BreakerOpen { .. } | Refusal::DependencyFailing { .. } => (
            StatusCode::OK,
            json!({"jsonrpc": "2.0", "id": id, "result": refusal_result(&message)}),
        ),
        Refusal::Saturated { .. } => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": OVERLOADED, "message": message}}),
        ),
    };
    let mut r = (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response();
    if let Refusal::Saturated { retry_after, .. } = refusal {
        r.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(whole_secs(*retry_after)),
        );
    }
    r
}

/// A `tools/call`'s timer: [`mcpulse_policy::timeout::Deadline`] on tokio's clock (from the
/// attempt's start), pushed back by progress when the entry allows it, and never past the
/// call's own deadline (`retry.deadline`, for all its attempts), when the entry sets one.
#[derive(Debug, Clone)]
pub struct Timer {
    pub tool: String,
    pub after: Duration,
    started: Instant,
    deadline: Deadline,
    /// The call's deadline and the length it was given ([`Policies::timer`]).
    cutoff: Option<(Instant, Duration)>,
}

impl Timer {
    /// The timer of a `tools/call` of `tool` starting now, with no call deadline (see
    /// [`Policies::timer`] for a call the policies admitted).
    pub fn start(settings: &config::Settings, tool: &str) -> Timer {
        let (after, max) = settings.timeout(tool);
        Timer {
            tool: tool.to_owned(),
            after,
            started: Instant::now(),
            deadline: Deadline::new(0, after, max),
            cutoff: None,
        }
    }

    /// The next attempt's timer (a retry): its own timeout from now, the same call deadline.
    pub fn again(&self, settings: &config::Settings) -> Timer {
        Timer {
            cutoff: self.cutoff,
            ..Timer::start(settings, &self.tool)
        }
    }

    fn own(&self) -> Instant {
        self.started + Duration::from_millis(self.deadline.at_ms())
    }

    /// When the attempt times out: its own timeout, or the call's deadline if that is first.
    pub fn deadline(&self) -> Instant {
        match self.cutoff {
            Some((at, _)) => self.own().min(at),
            None => self.own(),
        }
    }

    /// Whether progress may extend it.
    pub fn extends(&self) -> bool {
        self.deadline.extends()
    }

    /// Progress came: the timeout starts again from now, up to the maximum.
    pub fn progressed(&mut self) {
        self.deadline.progressed(millis(self.started.elapsed()));
    }

    /// Whether it is due before `other` (so that its expiry, not `other`'s, answers).
    pub fn before(&self, other: Instant) -> bool {
        self.deadline() <= other
    }

    /// How long the attempt ran before it timed out.
    pub fn ran(&self) -> Duration {
        self.deadline().saturating_duration_since(self.started)
    }

    /// The call's deadline's length, when it (not the attempt's own timeout) is what expires.
    pub fn cut_by(&self) -> Option<Duration> {
        self.cutoff
            .filter(|(at, _)| *at < self.own())
            .map(|(_, total)| total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use config::{Settings, ToolRule};

    fn rule(pattern: &str) -> ToolRule {
        ToolRule {
            pattern: pattern.into(),
            timeout: None,
            progress_extends: false,
            max_timeout: None,
            limit: None,
            breaker: None,
            retry: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_queued_call_waits_at_most_its_queue_timeout_and_a_freed_slot_goes_to_it() {
        let shared = crate::state::Shared::default();
        let metrics = &shared.metrics;
        let settings = Settings {
            concurrency: Some(LimitPolicy {
                max_concurrent: 1,
                queue: 1,
                queue_timeout: Duration::from_secs(2),
            }),
            ..Settings::default()
        };
        let p = Arc::new(Policies::new(settings, metrics));
        let first = p.admit("a", &shared).await.unwrap();
        // The queue holds one; the next is refused at once.
        let q = {
            let p = p.clone();
            tokio::spawn(async move {
                let shared = crate::state::Shared::default();
                let started = Instant::now();
                let r = p.admit("a", &shared).await;
                (r.is_ok(), started.elapsed())
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        match p.admit("b", &shared).await {
            Err(Refusal::Saturated { waited: None, .. }) => {}
            other => panic!("{:?}", other.map(|_| ())),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        drop(first);
        let (ok, waited) = q.await.unwrap();
        assert!(ok);
        assert_eq!(waited, Duration::from_millis(510));
        // Now one holds the slot (q's permit was dropped: free again), so a queued one times out.
        let hold = p.admit("a", &shared).await.unwrap();
        let started = Instant::now();
        let r = p.admit("a", &shared).await;
        assert!(matches!(
            r,
            Err(Refusal::Saturated {
                waited: Some(_),
                ..
            })
        ));
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        drop(hold);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_handed_to_a_queued_call_whose_client_went_away_is_given_back() {
        let shared = crate::state::Shared::default();
        let metrics = &shared.metrics;
        let settings = Settings {
            concurrency: Some(LimitPolicy {
                max_concurrent: 1,
                queue: 4,
                queue_timeout: Duration::from_secs(2),
            }),
            ..Settings::default()
        };
        let p = Arc::new(Policies::new(settings, metrics));
        let first = p.admit("a", &shared).await.unwrap();
        let queued = {
            let p = p.clone();
            tokio::spawn(async move {
                let shared = crate::state::Shared::default();
                let _held = p.admit("a", &shared).await;
                std::future::pending::<()>().await;
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        // The slot goes to the queued call, whose client disconnects before it runs again.
        drop(first);
        queued.abort();
        assert!(queued.await.unwrap_err().is_cancelled());
        assert_eq!(p.in_flight(), vec![(GATEWAY.to_owned(), 0)]);
        let again = p.admit("a", &shared).await;
        assert!(again.is_ok(), "{:?}", again.map(|_| ()));
        drop(again);
        // A queued call dropped while still waiting leaves the queue.
        let hold = p.admit("a", &shared).await.unwrap();
        let waiting = {
            let p = p.clone();
            tokio::spawn(async move {
                let shared = crate::state::Shared::default();
                let _ = p.admit("a", &shared).await;
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        waiting.abort();
        let _ = waiting.await;
        drop(hold);
        assert_eq!(p.in_flight(), vec![(GATEWAY.to_owned(), 0)]);
        let started = Instant::now();
        assert!(p.admit("a", &shared).await.is_ok());
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_breaker_refuses_without_taking_a_slot_and_half_opens_after_its_wait() {
        let shared = crate::state::Shared::default();
        let metrics = &shared.metrics;
        let mut r = rule("dep_*");
        r.breaker = Some(mcpulse_policy::breaker::BreakerPolicy {
            window: mcpulse_policy::window::WindowSpec::Count { calls: 4 },
            minimum_calls: 2,
            wait_in_open: Duration::from_secs(5),
            half_open_trials: 1,
            ..Default::default()
        });
        r.limit = Some(LimitPolicy {
            max_concurrent: 1,
            queue: 0,
            queue_timeout: Duration::ZERO,
        });
        let settings = Settings {
            tools: vec![r],
            ..Settings::default()
        };
        let p = Arc::new(Policies::new(settings, metrics));
        for _ in 0..2 {
            let permit = p.admit("dep_x", &shared).await.unwrap();
            permit.finish(Outcome::Failure(FailureKind::Timeout), metrics);
        }
        match p.admit("dep_y", &shared).await {
            Err(Refusal::BreakerOpen { retry_in, .. }) => {
                assert_eq!(retry_in, Some(Duration::from_secs(5)));
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
        // Another tool is not affected.
        assert!(p.admit("other", &shared).await.is_ok());
        assert_eq!(p.breakers(metrics)[0].state, BreakerState::Open);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(p.breakers(metrics)[0].state, BreakerState::HalfOpen);
        let trial = p.admit("dep_x", &shared).await.unwrap();
        trial.finish(Outcome::Success, metrics);
        assert_eq!(p.breakers(metrics)[0].state, BreakerState::Closed);
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(
                "mcpulse_gateway_breaker_transitions_total{breaker=\"dep_*\",to=\"open\"} 1"
            ),
            "{text}"
        );
    }

    #[test]
    fn hints_are_bounded_in_count_and_name_length() {
        let shared = crate::state::Shared::default();
        let settings = Settings {
            tools: vec![ToolRule {
                retry: Some(mcpulse_policy::retry::RetryPolicy::default()),
                ..rule("*")
            }],
            ..Settings::default()
        };
        let p = Policies::new(settings, &shared.metrics);
        let long = "x".repeat(MAX_HINT_NAME + 1);
        let edge = "y".repeat(MAX_HINT_NAME);
        let tool = |n: &str| json!({"name": n, "annotations": {"readOnlyHint": true}});
        let mut tools: Vec<Value> = vec![tool(&long), tool(&edge)];
        tools.extend((0..MAX_HINTS + 10).map(|i| tool(&format!("t{i}"))));
        p.learn_hints(&json!({"result": {"tools": tools}}));
        let hints = lock(&p.hints);
        assert_eq!(hints.len(), MAX_HINTS);
        assert!(!hints.contains_key(&long));
        assert!(hints.get(&edge).is_some_and(|h| h.read_only));
    }
}
