//! The dependency layer's calls, made after the inventory in every flow: the synthetic
//! `tools/call`s of `Plan::calls` in order, then the health tool (`Plan::health_tool`).
//!
//! It decides whether a call may be sent (the tool is listed, and is read-only and not
//! destructive unless side effects are allowed: `mcpulse_wire::call::admit`), sends it with
//! its budget as its deadline, and gives up a call past it: `notifications/cancelled` over
//! stdio and legacy HTTP+SSE, the response stream closed over Streamable HTTP (the request's
//! future is dropped at its deadline). Every call, made or refused, is recorded in
//! `Transcript::calls`; what its result means is the judge's.

use crate::context::{Ctx, Wire, request, send};
use mcpulse_transport::Call;
use mcpulse_wire::call::{
    self, CallPurpose, CallRecord, CallSpec, HEALTH_TOOL_NAMES, HealthToolMode, Refusal,
};
use mcpulse_wire::json;
use mcpulse_wire::jsonrpc::{self, Message};
use mcpulse_wire::message;
use mcpulse_wire::transcript::{Outcome, Step};
use mcpulse_wire::version::Era;
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// Kept before the probe's deadline when a call starts, so that a call given up at the
/// deadline can still be cancelled within it.
const CANCEL_ROOM: Duration = Duration::from_millis(100);

/// Makes the plan's calls over `wire`, once the inventory is taken.
pub(super) async fn calls(wire: &mut Wire<'_>, ctx: &mut Ctx<'_>, era: Era) {
    let plan = ctx.plan;
    if plan.calls.is_empty() && plan.health_tool == HealthToolMode::Off {
        return;
    }
    let mut wanted: Vec<&str> = plan.calls.iter().map(|c| c.tool.as_str()).collect();
    match &plan.health_tool {
        HealthToolMode::Auto => wanted.extend(HEALTH_TOOL_NAMES),
        HealthToolMode::Named(n) => wanted.push(n),
        HealthToolMode::Off => {}
    }
    let tools = listed_tools(ctx, &wanted);
    for spec in &plan.calls {
        let tool = find(&tools, &spec.tool);
        let admitted = call::admit(tool, plan.allow_side_effects);
        one(
            wire,
            ctx,
            era,
            CallPurpose::Synthetic,
            spec.clone(),
            admitted,
        )
        .await;
    }
    if let Some((spec, admitted)) = health_tool(&plan.health_tool, &tools, plan.allow_side_effects)
    {
        one(wire, ctx, era, CallPurpose::HealthTool, spec, admitted).await;
    }
}

/// The health tool to call, if any, and whether it may be: `auto` takes a listed tool named
/// exactly one of [`HEALTH_TOOL_NAMES`], with no required arguments and not annotated
/// destructive (else there is none, silently: such a tool is not a health tool by this rule);
/// a named one must be listed, take no required arguments and not be destructive unless side
/// effects are allowed (else the refusal is recorded: it was asked for). A name that is one of
/// [`HEALTH_TOOL_NAMES`] says it is a health check, so `readOnlyHint` is not required of it;
/// any other name (`purge_cache`) must be annotated read-only, as a `--call` must.
fn health_tool(
    mode: &HealthToolMode,
    tools: &[Value],
    allow_side_effects: bool,
) -> Option<(CallSpec, Result<(), Refusal>)> {
    match mode {
        HealthToolMode::Off => None,
        HealthToolMode::Auto => HEALTH_TOOL_NAMES.iter().find_map(|name| {
            let t = find(tools, name)?;
            let fit = !call::has_required_arguments(t) && !call::is_destructive(t);
            fit.then(|| (CallSpec::new(*name), Ok(())))
        }),
        HealthToolMode::Named(name) => {
            let admitted = call::admit_health_tool(name, find(tools, name), allow_side_effects);
            Some((CallSpec::new(name.clone()), admitted))
        }
    }
}

/// One call: refused (recorded), or sent with its budget as its deadline and given up past it.
async fn one(
    wire: &mut Wire<'_>,
    ctx: &mut Ctx<'_>,
    era: Era,
    purpose: CallPurpose,
    spec: CallSpec,
    admitted: Result<(), Refusal>,
) {
    let mut record = CallRecord {
        purpose,
        spec,
        exchange: None,
        refused: admitted.err(),
        cancelled: false,
        deadline_ms: None,
    };
    let now = Instant::now();
    let room = ctx.deadline.checked_sub(CANCEL_ROOM).filter(|d| *d > now);
    match (record.refused, room) {
        (Some(_), _) => {}
        (None, None) => record.refused = Some(Refusal::NoTime),
        (None, Some(latest)) => {
            let budget = now + Duration::from_millis(record.spec.budget_ms);
            if latest < budget {
                record.deadline_ms = Some(latest.duration_since(now).as_millis() as u64);
            }
            let deadline = latest.min(budget);
            let id = ctx.id();
            let msg = message::tools_call(
                id,
                &record.spec.tool,
                &record.spec.arguments,
                era,
                &ctx.plan.client,
            );
            let i = send(wire, ctx, request(Step::ToolsCall, era, id, &msg), deadline).await;
            record.exchange = Some(i);
            if matches!(ctx.ex(i).outcome, Outcome::Timeout) {
                record.cancelled = cancel(wire, ctx, era, id).await;
            }
        }
    }
    ctx.tr.calls.push(record);
}

/// Gives up request `id`: `notifications/cancelled` where replies share one channel (stdio,
/// the legacy stream); over Streamable HTTP the response was already dropped at the deadline,
/// which closes its stream. Whether anything was done.
async fn cancel(wire: &mut Wire<'_>, ctx: &mut Ctx<'_>, era: Era, id: i64) -> bool {
    if matches!(wire, Wire::Http { .. }) {
        return true;
    }
    let msg = message::cancelled(id, "mcpulse: the call passed its budget");
    let call = Call {
        step: Step::Cancelled,
        era: Some(era),
        page: None,
        id: None,
        message: &msg,
    };
    let deadline = ctx.deadline.max(Instant::now() + CANCEL_ROOM);
    let i = send(wire, ctx, call, deadline).await;
    matches!(ctx.ex(i).outcome, Outcome::Accepted)
}

/// The `tools/list` entries named in `wanted`, from every page the probe read. Each page is
/// decoded within the judge's bounds (a memory budget of a few times its text, at most
/// [`MAX_LIST_ITEMS`] items) and only the wanted entries are kept.
fn listed_tools(ctx: &Ctx<'_>, wanted: &[&str]) -> Vec<Value> {
    let mut out = Vec::new();
    for ex in ctx
        .tr
        .exchanges
        .iter()
        .filter(|e| e.step == Step::ToolsList)
    {
        let Outcome::Reply { frame } = ex.outcome else {
            continue;
        };
        let Some(f) = ex.frames.get(frame) else {
            continue;
        };
        let limits = json::Limits {
            budget: f.raw.len().saturating_mul(8).saturating_add(1 << 20),
            list: Some(("tools", MAX_LIST_ITEMS)),
        };
        if let Ok((d, _)) = jsonrpc::decode_within(&f.raw, &limits)
            && let Message::Result { result, .. } = d.message
            && let Some(Value::Array(tools)) = result.get("tools")
        {
            out.extend(
                tools
                    .iter()
                    .filter(|t| {
                        t.get("name")
                            .and_then(Value::as_str)
                            .is_some_and(|n| wanted.contains(&n))
                    })
                    .cloned(),
            );
        }
    }
    out
}

/// The most items of one `tools/list` page looked through for a called tool (the judge keeps
/// as many per list).
const MAX_LIST_ITEMS: usize = 10_000;

fn find<'t>(tools: &'t [Value], name: &str) -> Option<&'t Value> {
    tools
        .iter()
        .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn auto_takes_an_exactly_named_tool_without_required_arguments() {
        let tools = vec![
            json!({"name": "healthz"}),
            json!({"name": "health", "inputSchema": {"required": ["deep"]}}),
            json!({"name": "healthcheck", "annotations": {"destructiveHint": true}}),
            // Not read-only: destructive by MCP's default.
            json!({"name": "health_check", "annotations": {"readOnlyHint": false}}),
        ];
        assert!(health_tool(&HealthToolMode::Auto, &tools, false).is_none());
        let mut with = tools.clone();
        with.remove(3);
        with.push(json!({"name": "health_check", "inputSchema": {"type": "object"}}));
        let (spec, ok) = health_tool(&HealthToolMode::Auto, &with, false).unwrap();
        assert_eq!((spec.tool.as_str(), ok), ("health_check", Ok(())));
        assert!(health_tool(&HealthToolMode::Off, &with, false).is_none());
    }

    #[test]
    fn a_named_health_tool_is_refused_with_its_reason() {
        let tools = vec![
            json!({"name": "deep", "inputSchema": {"required": ["x"]}}),
            json!({"name": "wipe", "annotations": {"destructiveHint": true}}),
            json!({"name": "status"}),
            json!({"name": "purge_cache"}),
            json!({"name": "health"}),
            json!({"name": "ro", "annotations": {"readOnlyHint": true}}),
        ];
        let named = |n: &str, allow| {
            health_tool(&HealthToolMode::Named(n.into()), &tools, allow).map(|(_, r)| r)
        };
        assert_eq!(named("gone", false), Some(Err(Refusal::NotListed)));
        assert_eq!(named("deep", true), Some(Err(Refusal::RequiredArguments)));
        assert_eq!(named("wipe", false), Some(Err(Refusal::Destructive)));
        assert_eq!(named("wipe", true), Some(Ok(())));
        // Only the exact health names are trusted without `readOnlyHint: true`.
        assert_eq!(named("status", false), Some(Err(Refusal::NotReadOnly)));
        assert_eq!(named("purge_cache", false), Some(Err(Refusal::NotReadOnly)));
        assert_eq!(named("purge_cache", true), Some(Ok(())));
        assert_eq!(named("health", false), Some(Ok(())));
        assert_eq!(named("ro", false), Some(Ok(())));
    }
}
