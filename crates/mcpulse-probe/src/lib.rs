//! The probe engine: a [`Target`] and a [`Plan`] in, a [`Transcript`] out.
//!
//! This crate owns the *flow* of a probe: which era to try first, when a reply means "fall back
//! to legacy" and when it means "stop, the server is down or gated", pagination, the dual-era
//! check, the stdio sibling process, and the whole-probe deadline. It never decides health: the
//! transcript it returns is judged by `mcpulse-judge`.
//!
//! The flow follows the spec's backward-compatibility rules (see `docs/probe.md`):
//! - HTTP: `server/discover` first. A discover result or a 2026 error code (-32020/-32021/-32022)
//!   means modern. 401/403, 5xx, a timeout or a connection failure end the probe there: they are
//!   never evidence of an era. Anything else falls back to a legacy `initialize`; if that gets
//!   400/404/405 without a modern body, the legacy HTTP+SSE transport is tried with a `GET`.
//! - stdio: one process, as a client has one. `server/discover` first; a JSON-RPC error or
//!   silence means legacy, and `initialize` follows in the same process; an exit or a closed
//!   stdout means legacy in a fresh process (some servers exit on any request before
//!   `initialize`), as does a process that goes away on that `initialize`. In auto mode the
//!   discover reply is awaited half the budget once the server has written anything, three
//!   quarters while it is silent (still starting). The dual-era check takes a second process,
//!   after the first, only when `Plan::stdio_dual_era` asks for it. Near the deadline nothing is
//!   restarted. Over stdio the first page of each list is requested at once (pipelined).
//!
//! Layout: `target` (what to probe) and `plan` (how: [`PlanSpec`] builds every [`Plan`]);
//! `flow` runs a probe, one module per transport under `flow/`; `security` sends the security
//! checks' extra requests; `context` is what both write through (so neither imports the other);
//! `health` reads an HTTP health endpoint (`Plan::health_url`) beside the protocol steps.

mod context;
mod flow;
mod health;
mod plan;
mod security;
mod target;

pub use flow::{Live, probe, probe_live};
pub use health::{DISCOVERY_PATHS, HEALTH_TIMEOUT, discovery_urls, probe_health};
pub use mcpulse_wire::transcript::Transcript;
pub use plan::{
    Caller, HTTP_TIMEOUT, MAX_PAGES, MAX_RESPONSE_BYTES, Plan, PlanSpec, STDIO_TIMEOUT,
    TransportMode, default_timeout,
};
pub use target::{Target, TargetError};
