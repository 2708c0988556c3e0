//! `mcpulse-kit`: mcpulse's server-side health, in-process, for Rust MCP servers built on
//! [`rmcp`]: what `mcpulse gateway` gives any server from outside, without a sidecar.
//!
//! - [`Health`]: named, cached dependency checks ([`Check`]: TCP, HTTP GET, a closure, a
//!   self-check over MCP, or your own [`check::Probe`]) and a readiness latch on the tool
//!   registry;
//! - [`endpoints::router`]: `/livez`, `/readyz` (`application/health+json`, the gateway's
//!   shape) and `/metrics` (the gateway's metric names), an axum `Router` to merge beside
//!   rmcp's `StreamableHttpService`;
//! - [`Kit::wrap`]: per-tool policies on an rmcp `ToolRouter` (timeout, circuit breaker,
//!   concurrency limit), and the opt-in `health_check` tool;
//! - [`progress`]: progress notifications for long tools.
//!
//! The state machines and the health+json rendering are mcpulse-policy's, shared with the
//! gateway and the supervisor. docs/kit.md has the walk-through and a Kubernetes probe snippet.

pub mod check;
pub mod endpoints;
pub mod health;
pub mod kit;
mod metrics;
pub mod progress;

pub use check::Check;
pub use health::{Health, Running};
pub use kit::{Kit, ToolPolicy};
pub use metrics::{OPENMETRICS, PREFIX as METRICS_PREFIX};

/// rmcp's Streamable HTTP settings with the SSE keep-alive set explicitly to mcpulse's
/// ([`mcpulse_policy::keepalive::DEFAULT_INTERVAL`], 15 s, the gateway's): a comment on every
/// response stream that has been quiet that long, so that a proxy (nginx's
/// `proxy_read_timeout` is 60 s) does not cut a long tool call. rmcp 3.11 defaults to the same
/// 15 s; setting it here keeps it so if that default moves.
///
/// It also turns on `Origin` validation, which rmcp leaves off by default: a request carrying
/// an `Origin` other than a loopback one (`http://localhost`, `127.0.0.1`, `[::1]`, any port:
/// the same machine, as rmcp's default `allowed_hosts`) gets 403, the spec's DNS-rebinding
/// defence (`mcpulse probe` grades a server without it F). A browser client elsewhere needs
/// its origin listed (`.with_allowed_origins([...])` replaces the list); agents send no
/// `Origin`.
/// Everything else is rmcp's default (sessions on, loopback `Host`s only: set
/// `allowed_hosts` for a public name).
///
/// ```
/// let config = mcpulse_kit::server_config();
/// assert_eq!(config.sse_keep_alive, Some(std::time::Duration::from_secs(15)));
/// ```
pub fn server_config() -> rmcp::transport::streamable_http_server::StreamableHttpServerConfig {
    rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default()
        .with_sse_keep_alive(Some(mcpulse_policy::keepalive::DEFAULT_INTERVAL))
        .with_allowed_origins(LOOPBACK_ORIGINS)
        .enforce_origin_validation()
}

/// The origins [`server_config`] allows: this machine's, any port.
pub const LOOPBACK_ORIGINS: [&str; 6] = [
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];

/// What the kit's constructors refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A check's URL is not an http(s) URL with a host.
    #[error("invalid URL: {0}")]
    Url(String),
    /// A policy setting is out of range.
    #[error("tool {tool}: {why}")]
    Policy { tool: String, why: String },
}
