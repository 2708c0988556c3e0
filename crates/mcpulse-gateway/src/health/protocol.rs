//! The readiness probe: mcpulse-probe against the MCP endpoint the health side was given (see
//! `Settings::mcp`), read into a [`Protocol`] observation: did the handshake (or
//! `server/discover`) answer, how many tools did `tools/list` return, and how long both took.

use crate::checks::tool;
use crate::state::Protocol;
use mcpulse_judge::Report;
use std::time::Duration;

/// One probe, within `timeout`; `own_tool` is the gateway's health tool, not counted.
pub(super) async fn probe(
    target: &mcpulse_probe::Target,
    timeout: Duration,
    own_tool: Option<&str>,
) -> Protocol {
    let report = tool::probe(target, timeout, None).await;
    protocol_from(&report, crate::checks::now_ms(), own_tool)
}

/// A judged probe as a protocol observation at `at_ms`. `own_tool`, the gateway's own health
/// tool, is not counted among the upstream's tools: probing the gateway's own `/mcp`, the list
/// has it, and an upstream whose registry is empty must not look loaded because of it.
pub fn protocol_from(report: &Report, at_ms: i64, own_tool: Option<&str>) -> Protocol {
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
    let own = own_tool.map_or(0, |name| {
        report.tools.iter().filter(|t| t.name == name).count()
    });
    Protocol {
        at_ms,
        handshake_ok,
        tools: report.tool_count.map(|n| n.saturating_sub(own)),
        latency,
        error,
    }
}
