//! What the supervisor tells the outside world: the child's state and the events behind it.
//!
//! The supervisor ([`crate::supervise`]) reports through one [`Observer`]; the health endpoints
//! and metrics ([`crate::endpoints`]) and the logs implement it. The relay's hot path calls it
//! with borrowed data only, so an observer that does nothing costs nothing.

use serde::Serialize;
use std::time::Duration;

/// The child's state, as `/readyz` and the `mcpulse_supervise_state` metric show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ChildState {
    /// Spawned; the client's handshake (or a replay of it) has not completed yet.
    Starting,
    /// Answering its heartbeats.
    Running,
    /// A heartbeat went unanswered while a client request was running, within `--busy-grace`:
    /// slow but alive, not counted as a failure.
    Busy,
    /// Waiting out the backoff before the next start.
    Backoff,
    /// The restart budget is spent: no more restarts; every request is answered with an error.
    Fatal,
    /// The client closed its stdin; the child was shut down.
    Stopped,
}

/// Why the child was restarted (the `reason` label of `mcpulse_supervise_restarts_total`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum RestartReason {
    /// The child exited on its own (or was killed by someone else).
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// It missed this many heartbeats in a row.
    Unresponsive { failures: u32 },
    /// It could not be started (program or interpreter not found, permission denied...).
    SpawnFailed { message: String },
}

impl RestartReason {
    /// The metric label: `exited`, `unresponsive` or `spawn_failed`.
    pub fn label(&self) -> &'static str {
        match self {
            RestartReason::Exited { .. } => "exited",
            RestartReason::Unresponsive { .. } => "unresponsive",
            RestartReason::SpawnFailed { .. } => "spawn_failed",
        }
    }
}

/// How one heartbeat ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeartbeatOutcome {
    /// Answered in time.
    Ok,
    /// Unanswered while a client request was running within `--busy-grace`.
    Busy,
    /// Unanswered (or answered with an error) with no excuse: counts toward a restart.
    Failed,
}

/// How one relayed `tools/call` ended (the `outcome` of the per-tool metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// A result without `isError`.
    Ok,
    /// A result with `isError: true`.
    ToolError,
    /// A JSON-RPC error from the server.
    RpcError,
    /// Outlived `--request-timeout`: answered by the supervisor, the late reply dropped.
    Timeout,
    /// The child died or was restarted with the call in flight.
    Lost,
}

/// One restart, as `/readyz` lists the recent ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Restart {
    /// Wall-clock time, milliseconds since the Unix epoch.
    pub at_ms: i64,
    #[serde(flatten)]
    pub reason: RestartReason,
}

/// The supervisor's state as a whole: what `/readyz` renders.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    pub state: ChildState,
    /// Wall-clock time the state was entered, milliseconds since the Unix epoch.
    pub since_ms: i64,
    /// The running child's process id.
    pub pid: Option<u32>,
    /// The protocol version the client negotiated (legacy era), or `2026-07-28`.
    pub protocol_version: Option<String>,
    /// The last heartbeat: when (epoch ms), how it ended, and its round trip.
    pub last_heartbeat: Option<(i64, HeartbeatOutcome, Option<Duration>)>,
    /// Restarts since the supervisor started.
    pub restarts_total: u64,
    /// The most recent restarts, oldest first (at most 10).
    pub recent_restarts: Vec<Restart>,
    /// Why the supervisor gave up, in `Fatal`.
    pub fatal_reason: Option<String>,
}

impl Status {
    /// `state` since `since_ms`, with nothing else known yet (no child, no heartbeat, no
    /// restart).
    pub fn new(state: ChildState, since_ms: i64) -> Status {
        Status {
            state,
            since_ms,
            pid: None,
            protocol_version: None,
            last_heartbeat: None,
            restarts_total: 0,
            recent_restarts: Vec::new(),
            fatal_reason: None,
        }
    }
}

/// Receives the supervisor's events. Every method has a no-op default.
pub trait Observer: Send + Sync + 'static {
    /// The status changed (state, pid, heartbeat, restarts).
    fn status(&self, _status: &Status) {}
    /// The child is being restarted, for this reason.
    fn restart(&self, _reason: &RestartReason) {}
    /// A heartbeat ended; its round trip when it was answered.
    fn heartbeat(&self, _outcome: HeartbeatOutcome, _latency: Option<Duration>) {}
    /// A relayed `tools/call` ended. `tool` is the server's (hostile) name, unsanitised: an
    /// observer that prints it or uses it as a label makes it inert and bounds it first.
    fn tool_call(&self, _tool: &str, _outcome: CallOutcome, _latency: Duration) {}
    /// A line on the child's stdout that was not a JSON-RPC message was kept off the client's
    /// stream (`line` is a bounded prefix, unsanitised).
    fn junk_line(&self, _line: &str) {}
    /// A reply from the child for a request no longer in flight (it timed out, or was
    /// cancelled) was dropped.
    fn late_reply(&self) {}
}

/// An observer that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ignore;

impl Observer for Ignore {}

/// How many junk lines [`Logs`] reports at `warn`; the rest go to `debug` (the metric counts
/// them all), so a server that prints its logs to stdout cannot flood the supervisor's.
pub const JUNK_LINES_WARNED: u64 = 10;

/// An observer that logs (state changes at info, restarts and the first junk lines at warn,
/// heartbeats and tool calls at debug) and passes every event on to `inner`. Server text goes
/// out as `tracing` fields, which the binary's formatters make inert.
#[derive(Debug)]
pub struct Logs<O> {
    inner: O,
    last_state: std::sync::Mutex<Option<ChildState>>,
    junk: std::sync::atomic::AtomicU64,
}

impl<O: Observer> Logs<O> {
    pub fn new(inner: O) -> Logs<O> {
        Logs {
            inner,
            last_state: std::sync::Mutex::new(None),
            junk: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl<O: Observer> Observer for Logs<O> {
    fn status(&self, status: &Status) {
        let changed = {
            let mut last = self.last_state.lock().unwrap_or_else(|e| e.into_inner());
            let changed = *last != Some(status.state);
            *last = Some(status.state);
            changed
        };
        if changed {
            tracing::info!(
                state = ?status.state,
                pid = ?status.pid,
                restarts = status.restarts_total,
                fatal = ?status.fatal_reason,
                "child state"
            );
        }
        self.inner.status(status);
    }

    fn restart(&self, reason: &RestartReason) {
        tracing::warn!(reason = reason.label(), detail = ?reason, "restarting the child");
        self.inner.restart(reason);
    }

    fn heartbeat(&self, outcome: HeartbeatOutcome, latency: Option<Duration>) {
        tracing::debug!(outcome = ?outcome, latency = ?latency, "heartbeat");
        self.inner.heartbeat(outcome, latency);
    }

    fn tool_call(&self, tool: &str, outcome: CallOutcome, latency: Duration) {
        tracing::debug!(tool, outcome = ?outcome, latency = ?latency, "tools/call");
        self.inner.tool_call(tool, outcome, latency);
    }

    fn late_reply(&self) {
        self.inner.late_reply();
    }

    fn junk_line(&self, line: &str) {
        let n = self.junk.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if n <= JUNK_LINES_WARNED {
            tracing::warn!(
                line,
                n,
                "a line on the child's stdout that is not JSON-RPC, kept off the client's stream"
            );
        } else {
            tracing::debug!(line, n, "a line on the child's stdout that is not JSON-RPC");
        }
        self.inner.junk_line(line);
    }
}
