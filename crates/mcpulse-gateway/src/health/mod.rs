//! The health side (issue #19 parts 2–4): the three layers (process, protocol, dependencies)
//! computed from cached results, served as `/livez` and `/readyz` (application/health+json,
//! through mcpulse_policy::health), folded into the opt-in `health_check` MCP tool, and exported
//! on `/metrics`. Nothing here runs on a request's path but reading the cache.
//!
//! The interface the serving side uses (kept stable; the bodies are to be built):
//! - [`router`]: the health endpoints, mounted on `/mcp`'s listener or a listener of their own;
//! - [`Registry`]: lives in [`crate::state::Shared`]; holds the check cache and the readiness;
//! - [`tool_descriptor`] / [`tool_result`]: the `health_check` tool added to `tools/list` and
//!   answered by the gateway.

use crate::state::Shared;
use axum::Router;
use serde_json::{Value, json};
use std::sync::Arc;

/// The cached check results and the readiness computed from them (to be built).
#[derive(Debug, Default)]
pub struct Registry {}

/// `/livez`, `/readyz` (`?verbose`), `/metrics` (to be built).
pub fn router(_shared: Arc<Shared>) -> Router {
    Router::new()
}

/// The `health_check` tool as `tools/list` lists it, under the configured `name`.
pub fn tool_descriptor(name: &str) -> Value {
    json!({
        "name": name,
        "description": "The gateway's health: process, protocol and dependencies, as /readyz reports it.",
        "inputSchema": {"type": "object", "properties": {}},
        "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
    })
}

/// The `tools/call` result for the `health_check` tool: `/readyz`'s status as
/// `structuredContent`, with a text fallback (to be built).
pub fn tool_result(_shared: &Shared) -> Value {
    json!({"content": [{"type": "text", "text": "not built yet"}], "isError": true})
}
