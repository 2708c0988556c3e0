//! The readiness probe: mcpulse-probe against the MCP endpoint the health side was given (see
//! `Settings::mcp`), read into a [`Protocol`] observation: did the handshake (or
//! `server/discover`) answer, how many tools did `tools/list` return, and how long both took.

use crate::checks::tool;
use crate::state::Protocol;
use mcpulse_judge::Report;
use std::time::Duration;

/// One probe, within `timeout`.
pub(super) async fn probe(target: &mcpulse_probe::Target, timeout: Duration) -> Protocol {
    let report = tool::probe(target, timeout, None).await;
    protocol_from(&report, crate::checks::now_ms())
}

/// A judged probe as a protocol observation at `at_ms`.
pub fn protocol_from(report: &Report, at_ms: i64) -> Protocol {
    let handshake_ok = report.protocol_version.is_some();
    let t = &report.timings_ms;
    let total = t.handshake.unwrap_or(0.0) + t.tools_list.unwrap_or(0.0);
    let latency = Duration::from_micros((total * 1000.0).max(0.0) as u64);
    let error = if handshake_ok && report.tool_count.is_some() {
        None
    } else {
        let why = tool::why(report);
        Some(mcpulse_wire::text::inert(&why, crate::checks::MAX_OUTPUT_CHARS).into_owned())
    };
    Protocol {
        at_ms,
        handshake_ok,
        tools: report.tool_count,
        latency,
        error,
    }
}
