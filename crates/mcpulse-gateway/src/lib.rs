//! `mcpulse gateway` (issue #19): serve any MCP server over Streamable HTTP, with the three
//! layers of health the seeds ask every production server for, built in, without changing the
//! server's code. The same pattern as a service-mesh sidecar, with probes Kubernetes can use.
//!
//! ```text
//! client ─HTTP─► serve (/mcp: Origin/Host, MCP-Protocol-Version, sessions, DELETE)
//!                  └► upstream: stdio (one supervised child per legacy session, a small pool
//!                               for stateless 2026-07-28 requests) | HTTP (streaming relay,
//!                               reconnect with backoff)
//! checks (cached on their own schedule) ─┐
//! upstream observations (state.rs) ──────┴► readiness ─► /livez /readyz (health+json), health_check tool, /metrics
//! ```
//!
//! - [`config`]: the TOML file and the flags, resolved into one validated [`config::Gateway`];
//! - [`state`]: what the serving side observes about the upstream, which the health side reads
//!   (the one interface between the two halves);
//! - [`serve`]: the MCP endpoint and the upstreams;
//! - [`checks`]: dependency checks, run on their own schedule, their results cached;
//! - [`health`]: readiness from the cache, `/livez` `/readyz` `/metrics`, the `health_check` tool;
//! - [`metrics`]: what the serving side records.
//!
//! Decisions (heartbeats, restarts, backoff, check thresholds, the health model) are
//! `mcpulse-policy`'s; the stdio children are `mcpulse-relay`'s supervised sessions.

pub mod checks;
pub mod config;
pub mod health;
pub mod metrics;
pub mod policy;
pub mod serve;
pub mod state;
pub mod thresholds;
