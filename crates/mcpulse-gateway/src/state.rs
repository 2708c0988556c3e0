//! What the serving side ([`crate::serve`]) observes about the upstream, and the health side
//! (readiness, `/livez`, `/readyz`, the `health_check` tool, metrics) reads. Written on events,
//! read on requests: the health endpoints never touch the upstream themselves.

use std::sync::Mutex;
use std::time::Duration;

/// The upstream process (stdio) or endpoint (HTTP), as `/livez` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProcessState {
    /// Not started or not reached yet.
    #[default]
    Starting,
    /// Running (stdio) or reachable (HTTP).
    Up,
    /// Between restarts (stdio) or reconnects (HTTP).
    Backoff,
    /// The restart budget is spent: nothing more will be tried.
    Fatal,
}

/// The last protocol readiness observation: the handshake (or `server/discover`) and
/// `tools/list` against the upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct Protocol {
    /// When it was observed (Unix ms).
    pub at_ms: i64,
    /// Whether the handshake or discovery succeeded.
    pub handshake_ok: bool,
    /// How many tools `tools/list` returned (None when it failed or was not reached).
    pub tools: Option<usize>,
    /// The handshake plus `tools/list`.
    pub latency: Duration,
    /// Why it failed, inert (mcpulse_wire::text), for `output`.
    pub error: Option<String>,
}

/// The upstream as the serving side last saw it.
#[derive(Debug, Clone, Default)]
pub struct Upstream {
    pub process: ProcessState,
    pub protocol: Option<Protocol>,
    /// Restarts of stdio children, and reconnects to an HTTP upstream, since start.
    pub restarts: u64,
    pub reconnects: u64,
}

/// Shared between the halves (cheap: a mutex taken for a copy).
#[derive(Debug, Default)]
pub struct Shared {
    upstream: Mutex<Upstream>,
    /// Check cache and readiness (the health side's).
    pub health: crate::health::Registry,
    /// What the serving side records (the health side renders it).
    pub metrics: crate::metrics::Metrics,
    /// Relayed calls' error rate and latency, judged for `/readyz`.
    pub thresholds: crate::thresholds::Live,
    /// The call policies (timeouts, breakers, limits), set once when serving starts
    /// ([`Shared::policies`]); `/readyz` reads the breakers.
    policies: std::sync::OnceLock<std::sync::Arc<crate::policy::Policies>>,
}

impl Shared {
    /// The call policies: the ones set by [`Shared::set_policies`], else the defaults.
    pub fn policies(&self) -> &std::sync::Arc<crate::policy::Policies> {
        self.policies.get_or_init(|| {
            std::sync::Arc::new(crate::policy::Policies::new(
                crate::policy::config::Settings::default(),
                &self.metrics,
            ))
        })
    }

    /// Sets the call policies (once: a second call, or one after [`Shared::policies`] was
    /// read, is ignored and logged).
    pub fn set_policies(&self, settings: crate::policy::config::Settings) {
        let p = std::sync::Arc::new(crate::policy::Policies::new(settings, &self.metrics));
        if self.policies.set(p).is_err() {
            tracing::warn!("the call policies were set already; keeping the first");
        }
    }

    pub fn upstream(&self) -> Upstream {
        match self.upstream.lock() {
            Ok(u) => u.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn update_upstream(&self, f: impl FnOnce(&mut Upstream)) {
        match self.upstream.lock() {
            Ok(mut u) => f(&mut u),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }
}
