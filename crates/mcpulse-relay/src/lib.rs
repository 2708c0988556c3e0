//! `mcpulse-relay`: the inside-out half's I/O. The stdio supervisor ([`supervise`]) sits
//! between an MCP client and a local server process; [`endpoints`] serves its health and
//! metrics; [`wrap`] rewrites a client's config to run its stdio servers under it. Every
//! decision (heartbeat verdicts, restarts, backoff, timeouts) is made by `mcpulse-policy`.

pub mod endpoints;
pub mod status;
pub mod supervise;
pub mod wrap;
