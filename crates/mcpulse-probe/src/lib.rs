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
//! - stdio: in auto mode two processes start side by side, one sent `server/discover` (waiting at
//!   most half the budget), the other a legacy `initialize` at once: on stdio the era belongs to
//!   the process, and some servers exit on a request sent before `initialize`. A modern answer
//!   makes the sibling's reply the dual-era check; anything else continues the legacy session in
//!   the sibling. If the sibling died unanswered, the flow falls back to one process at a time
//!   (the first process if alive, else a fresh one); a merely slow sibling beside a live first
//!   process is given up after as long again as the first took; near the deadline nothing is
//!   restarted. Over stdio the first page of each list is requested at once (pipelined).

mod flow;
mod security;
mod target;

pub use flow::{Live, probe, probe_live};
pub use mcpulse_wire::transcript::Transcript;
pub use target::{Plan, Target, TargetError, TransportMode};
