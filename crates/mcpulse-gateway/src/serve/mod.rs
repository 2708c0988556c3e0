//! The MCP endpoint (`/mcp`, Streamable HTTP, both protocol eras) and the upstreams behind it
//! (issue #19 part 1).
//!
//! - this module: the front door shared by both upstreams: Origin and Host validation, the
//!   body cap, `MCP-Protocol-Version`, the per-request log line and metrics, the opt-in
//!   `health_check` tool, and the dispatch to the upstream;
//! - [`stdio`]: a stdio command behind the gateway: one supervised child per legacy session
//!   (never shared), a small pool for stateless 2026-07-28 requests; the gateway implements the
//!   Streamable HTTP server side itself;
//! - [`http`]: a Streamable HTTP server behind the gateway: requests and their SSE responses
//!   relayed streaming with bounded buffers; sessions are the upstream's own; reconnects with
//!   backoff and jitter, and a fast, clear error meanwhile.

pub mod http;
pub mod stdio;
