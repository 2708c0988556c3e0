//! The health registry: named checks with their cached results, the readiness latch, and the
//! `/livez` and `/readyz` documents built from them (mcpulse-policy's health model, the same
//! shape as the gateway's: `tools:count`, then one `NAME:responseTime` per check).
//!
//! The rules (docs/kit.md):
//! - checks run on their own intervals in tasks [`Health::start`] spawns; a request only
//!   reads the cache. Each result goes through the check's thresholds
//!   (mcpulse_policy::check): the first is taken as it is, later changes need
//!   `failure_threshold` / `success_threshold` results in a row;
//! - readiness is latched off until the tool registry has loaded ([`Health::tools_loaded`],
//!   which [`crate::Kit::wrap`] calls with the router's tool count), and at least
//!   `min_tools` (1 by default) tools are there;
//! - a critical check that fails is `fail` (503); a non-critical one, or a degraded one,
//!   `warn` (200); an open circuit breaker is `warn` (the tool fails fast; the server still
//!   serves its others);
//! - `/livez` is the runtime only: a ticker task's last tick is at most [`TICK_STALE`] old.
//!   Dependencies are never in it: a slow database must not get the pod killed.
//!
//! Bounds: one entry per registered check (a fixed set), each keeping one confirmed level and
//! its last result, whose detail is at most [`crate::check::MAX_OUTPUT_CHARS`] characters.

use crate::check::{Check, Outcome, Status, inert};
use crate::metrics::Metrics;
use mcpulse_policy::breaker::Breaker;
use mcpulse_policy::check::{self as policy, Raw};
use mcpulse_policy::health::{Check as Item, CheckStatus, Health as Doc};
use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::task::JoinHandle;
// tokio's clock: paused time in tests ages the ticker and runs the checks.
use tokio::time::Instant;

/// How often the liveness ticker ticks.
pub const TICK: Duration = Duration::from_secs(1);
/// A last tick older than this fails `/livez`: the runtime's timers no longer fire.
pub const TICK_STALE: Duration = Duration::from_secs(10);

struct Entry {
    check: Check,
    state: policy::State,
}

struct State {
    checks: Vec<Entry>,
    /// The tool count once the registry has loaded (the readiness latch).
    tools: Option<usize>,
    min_tools: usize,
    last_tick: Option<Instant>,
    /// Each tool's breaker, shared with its policy wrapper.
    breakers: Vec<(String, Arc<Mutex<Breaker>>)>,
}

struct Inner {
    service_id: Cow<'static, str>,
    version: Cow<'static, str>,
    state: Mutex<State>,
    /// The monotonic origin of the policies' milliseconds.
    origin: Instant,
    metrics: Metrics,
}

/// The health registry. Cheap to clone (an `Arc`); every clone is the same registry.
///
/// ```
/// use mcpulse_kit::{Check, Health};
/// use std::time::Duration;
///
/// let health = Health::new("my-server", "1.0.0")
///     .with_check(Check::tcp("db", "127.0.0.1", 5432).interval(Duration::from_secs(5)));
/// // Not ready until the tool registry has loaded.
/// assert_eq!(health.readiness().status().http_status(), 503);
/// ```
#[derive(Clone)]
pub struct Health {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("service_id", &self.inner.service_id)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep serving it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Wall-clock Unix ms, for health+json's `time`.
fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Health {
    /// A registry for the server `service_id` (health+json's `serviceId`) at `version`.
    pub fn new(
        service_id: impl Into<Cow<'static, str>>,
        version: impl Into<Cow<'static, str>>,
    ) -> Health {
        Health {
            inner: Arc::new(Inner {
                service_id: service_id.into(),
                version: version.into(),
                state: Mutex::new(State {
                    checks: Vec::new(),
                    tools: None,
                    min_tools: 1,
                    last_tick: None,
                    breakers: Vec::new(),
                }),
                origin: Instant::now(),
                metrics: Metrics::new(),
            }),
        }
    }

    /// Adds a check (registering a name again replaces it). Not run until [`Health::start`].
    pub fn with_check(self, check: Check) -> Health {
        {
            let mut s = lock(&self.inner.state);
            let entry = Entry {
                check,
                state: policy::State::new(),
            };
            match s
                .checks
                .iter_mut()
                .find(|e| e.check.name == entry.check.name)
            {
                Some(e) => *e = entry,
                None => s.checks.push(entry),
            }
        }
        self
    }

    /// Readiness needs at least this many tools (1 by default; 0 for a server without tools).
    pub fn min_tools(self, n: usize) -> Health {
        lock(&self.inner.state).min_tools = n;
        self
    }

    /// Opens the readiness latch: the tool registry has loaded with `count` tools.
    pub fn tools_loaded(&self, count: usize) {
        lock(&self.inner.state).tools = Some(count);
    }

    /// Milliseconds since this registry was made, on tokio's clock (the policies' time).
    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.inner.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    pub(crate) fn add_breaker(&self, tool: &str, breaker: Arc<Mutex<Breaker>>) {
        lock(&self.inner.state)
            .breakers
            .push((tool.to_owned(), breaker));
    }

    /// How many results a check has had (0 for an unknown name).
    pub fn runs(&self, name: &str) -> u64 {
        lock(&self.inner.state)
            .checks
            .iter()
            .find(|e| e.check.name == name)
            .map_or(0, |e| e.state.runs)
    }

    /// A check's confirmed status (None before its first result, or for an unknown name).
    pub fn confirmed(&self, name: &str) -> Option<CheckStatus> {
        lock(&self.inner.state)
            .checks
            .iter()
            .find(|e| e.check.name == name)
            .and_then(|e| e.state.confirmed)
    }

    /// Folds one run's outcome in.
    fn record(&self, name: &str, outcome: Outcome, took: Duration) {
        let latency = outcome.latency.unwrap_or(took);
        let raw = Raw {
            status: outcome.status.check_status(),
            latency: Some(latency),
            output: outcome.detail.as_deref().map(inert),
        };
        let confirmed = {
            let mut s = lock(&self.inner.state);
            let Some(e) = s.checks.iter_mut().find(|e| e.check.name == name) else {
                return;
            };
            let thresholds = e.check.thresholds;
            if let Some(t) = e.state.observe(raw, wall_ms(), &thresholds) {
                tracing::info!(
                    check = name,
                    from = t.from.map_or("none", CheckStatus::as_str),
                    to = t.to.as_str(),
                    "dependency check changed"
                );
            }
            e.state.confirmed
        };
        self.inner.metrics.set_check(name, confirmed, Some(latency));
    }

    /// Starts the liveness ticker and one task per check on the current runtime; dropping
    /// the returned handle stops them. Each check runs at once, then every interval (a late
    /// timer runs it once, not in a burst), each run bounded by its timeout.
    pub fn start(&self) -> Running {
        let mut tasks = Vec::new();
        lock(&self.inner.state).last_tick = Some(Instant::now());
        let me = self.clone();
        tasks.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(TICK);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                lock(&me.inner.state).last_tick = Some(Instant::now());
            }
        }));
        let checks: Vec<Check> = lock(&self.inner.state)
            .checks
            .iter()
            .map(|e| e.check.clone())
            .collect();
        for check in checks {
            let me = self.clone();
            tasks.push(tokio::spawn(async move {
                let mut ticks = tokio::time::interval(check.interval);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    let start = Instant::now();
                    // Each run in a task of its own: a check that panics (an `unwrap` on the
                    // database's error, most likely while the database is down) is a failed
                    // run, not a check whose last status stands for ever.
                    let probe = check.probe.clone();
                    let mut run = Aborting(tokio::spawn(async move { probe.run().await }));
                    let outcome = match tokio::time::timeout(check.timeout, &mut run.0).await {
                        Ok(Ok(o)) => o,
                        Ok(Err(_)) => Outcome {
                            status: Status::Down,
                            latency: None,
                            detail: Some(
                                "the check panicked (the process's log has its message)".into(),
                            ),
                        },
                        Err(_) => Outcome {
                            status: Status::Down,
                            latency: None,
                            detail: Some(format!(
                                "no answer within {} (timeout)",
                                mcpulse_wire::units::human_duration(check.timeout.as_millis())
                            )),
                        },
                    };
                    me.record(&check.name, outcome, start.elapsed());
                }
            }));
        }
        Running { tasks }
    }

    /// `/livez`'s document: the runtime's ticker, nothing else.
    pub fn liveness(&self) -> Doc {
        let last_tick = lock(&self.inner.state).last_tick;
        let mut checks = Vec::new();
        if let Some(t) = last_tick {
            let age = t.elapsed();
            let mut c = Item::new("eventloop:tickAge", "eventloop", "system")
                .observed(mcpulse_policy::health::ms(age), "ms")
                .at(wall_ms());
            if age > TICK_STALE {
                c = c.status(CheckStatus::Fail).output(format!(
                    "the runtime's ticker last ran {} ago: timers are not firing",
                    mcpulse_wire::units::human_duration(age.as_millis())
                ));
            }
            checks.push(c);
        }
        let h = Doc {
            service_id: self.inner.service_id.clone(),
            version: self.inner.version.clone(),
            description: "liveness (mcpulse-kit): the runtime is responsive".into(),
            checks,
        };
        self.inner.metrics.set_liveness(h.status());
        h
    }

    /// `/readyz`'s document, from the cache.
    pub fn readiness(&self) -> Doc {
        let now = self.now_ms();
        let mut s = lock(&self.inner.state);
        let mut checks = Vec::new();
        let tools = Item::new("tools:count", "tools", "component").with("minimum", s.min_tools);
        checks.push(match s.tools {
            None => tools
                .status(CheckStatus::Fail)
                .output("the tool registry has not loaded yet"),
            Some(n) if n < s.min_tools => tools
                .observed(n, "tools")
                .status(CheckStatus::Fail)
                .output(format!(
                    "{n} tools registered; at least {} are required (min_tools)",
                    s.min_tools
                )),
            Some(n) => tools.observed(n, "tools"),
        });
        for e in &s.checks {
            checks.push(policy::item(&policy::Dependency {
                name: &e.check.name,
                kind: e.check.probe.kind(),
                component_id: &e.check.probe.target(),
                component_type: e.check.component_type,
                critical: e.check.critical,
                thresholds: &e.check.thresholds,
                state: &e.state,
            }));
        }
        for (tool, breaker) in &mut s.breakers {
            let mut b = lock(breaker);
            if let Some(t) = b.poll(now) {
                crate::kit::breaker_changed(self, tool, &t);
            }
            // The gateway's item (one function for both: a dashboard or a `?exclude=` written
            // for one works for the other).
            checks.push(policy::breaker_item(&policy::BreakerReading::of(
                tool,
                &b,
                now,
                wall_ms(),
            )));
        }
        drop(s);
        let h = Doc {
            service_id: self.inner.service_id.clone(),
            version: self.inner.version.clone(),
            description:
                "readiness (mcpulse-kit): the tool registry is loaded and the dependencies are up"
                    .into(),
            checks,
        };
        self.inner.metrics.set_readiness(h.status());
        h
    }
}

/// The registry's tasks; dropping it stops them.
#[derive(Debug)]
pub struct Running {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
/// A task aborted when dropped: a check's run cut by its timeout, or left when the checks
/// stop, does not run on.
struct Aborting<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Aborting<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
