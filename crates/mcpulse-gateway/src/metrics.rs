//! The gateway's Prometheus metrics (issue #19 part 4; names and the table in docs/gateway.md).
//! The serving side records through these methods; the health side renders `/metrics`.
//! Bodies to be built; the signatures are the interface.

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

/// The registry and the handles the serving side records into.
#[derive(Debug, Default)]
pub struct Metrics {}

impl Metrics {
    /// One request relayed and answered: `method` is the JSON-RPC method, `tool` the tool of a
    /// `tools/call` (both already bounded and inert: the caller caps distinct tool labels).
    pub fn request(&self, _method: &str, _tool: Option<&str>, _took: Duration, _outcome: Outcome) {}
    /// A client session opened (legacy `Mcp-Session-Id`) or closed.
    pub fn session_opened(&self) {}
    pub fn session_closed(&self) {}
    /// A client HTTP connection accepted or closed.
    pub fn connection_opened(&self) {}
    pub fn connection_closed(&self) {}
    /// A stdio child restarted (`reason` as mcpulse_relay::status::RestartReason::label) or
    /// the HTTP upstream reconnected.
    pub fn upstream_restart(&self, _reason: &'static str) {}
    pub fn upstream_reconnect(&self) {}
}
