//! The probe engine: a [`Target`] and a [`Plan`] in, a [`Transcript`] out.
//!
//! This crate owns the *flow* of a probe: which era to try first, when a reply means "fall back
//! to legacy" and when it means "stop, the server is down or gated", pagination, the dual-era
//! check, the legacy stdio respawn, and the whole-probe deadline. It never decides health: the
//! transcript it returns is judged by `mcpulse-judge`.
//!
//! The flow follows the spec's backward-compatibility rules (see `docs/probe.md`):
//! - HTTP: `server/discover` first. A discover result or a 2026 error code (-32020/-32021/-32022)
//!   means modern. 401/403, 5xx, a timeout or a connection failure end the probe there: they are
//!   never evidence of an era. Anything else falls back to a legacy `initialize`; if that gets
//!   400/404/405 without a modern body, the legacy HTTP+SSE transport is tried with a `GET`.
//! - stdio: `server/discover` first, waiting at most half the budget. A non-modern error from a
//!   live process continues in the same process with `initialize`; a process that exited or stayed
//!   silent is respawned for the legacy attempt, because some servers exit on a request sent
//!   before `initialize`. The dual-era check (auto mode, after a modern discovery) runs in a fresh
//!   process too: on stdio the era belongs to the process, and a dual-era server that has served
//!   2026-07-28 may refuse a later `initialize` on the same connection.

mod flow;
mod security;
mod target;

pub use flow::{Live, probe, probe_live};
pub use mcpulse_wire::transcript::Transcript;
pub use target::{Plan, Target, TargetError, TransportMode};
