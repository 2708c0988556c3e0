//! The JSON API over the fleet: `/api/v1/fleet`, `/api/v1/targets` and
//! `/api/v1/targets/{name}` (a target's view with its uptime and latency windows), and its one
//! change: `POST /api/v1/targets/{name}/accept` (a new drift baseline).
//!
//! This module does not own the fleet's contents ([`crate::fleet`]) or the history
//! ([`super::history`]).

use super::{ApiState, error};
use crate::check::Stats;
use crate::fleet::{Summary, TargetView};
use crate::state::Health;
use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::json;

/// One line of the fleet summary.
#[derive(Debug, Serialize)]
struct FleetLine<'a> {
    name: &'a str,
    kind: &'a str,
    status: Health,
    since_ms: Option<i64>,
    flapping: bool,
    last_check_ms: Option<i64>,
    last_status: Option<Health>,
    open_incidents: usize,
}

#[derive(Debug, Serialize)]
struct FleetBody<'a> {
    #[serde(flatten)]
    summary: Summary,
    generated_at_ms: i64,
    targets: Vec<FleetLine<'a>>,
}

pub(super) async fn fleet_handler(State(s): State<ApiState>) -> Response {
    let snap = s.fleet.snapshot();
    let body = FleetBody {
        summary: snap.summary(),
        generated_at_ms: s.now(),
        targets: snap
            .targets
            .iter()
            .map(|v| FleetLine {
                name: &v.name,
                kind: v.kind,
                status: v.status,
                since_ms: v.since_ms,
                flapping: v.flapping,
                last_check_ms: v.last.as_ref().map(|l| l.at_ms),
                last_status: v.last.as_ref().map(|l| l.status),
                open_incidents: v.incidents.len(),
            })
            .collect(),
    };
    Json(body).into_response()
}

pub(super) async fn targets_handler(State(s): State<ApiState>) -> Response {
    Json(json!({ "targets": s.fleet.snapshot().targets })).into_response()
}

#[derive(Debug, Serialize)]
struct TargetBody {
    #[serde(flatten)]
    view: TargetView,
    /// Uptime and latency windows; `null` with `stats_error` when the store failed.
    stats: Option<Vec<Stats>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stats_error: Option<String>,
    /// Each synthetic call's latency percentiles and errors over the same windows (absent
    /// without calls, or when the store failed: then `stats_error` says so).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<crate::check::ToolStats>,
}

/// A target name in an API path that could not be read (bad percent-encoding, not UTF-8).
#[derive(Debug, thiserror::Error)]
#[error("the target name in the path is malformed: {0}")]
pub(super) struct MalformedName(PathRejection);

pub(super) fn target_name(p: Result<Path<String>, PathRejection>) -> Result<String, MalformedName> {
    p.map(|Path(n)| n).map_err(MalformedName)
}

pub(super) fn unknown_target(name: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("no target named {name:?}: /api/v1/targets lists them"),
    )
}

pub(super) async fn target_handler(
    State(s): State<ApiState>,
    p: Result<Path<String>, PathRejection>,
) -> Response {
    let name = match target_name(p) {
        Ok(n) => n,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let Some(view) = s.fleet.get(&name) else {
        return unknown_target(&name);
    };
    let now = s.now();
    let history = s.history.clone();
    let stats = tokio::task::spawn_blocking(move || {
        let stats = history.stats(&name, now)?;
        Ok::<_, crate::store::StoreError>((stats, history.tool_stats(&name, now)?))
    })
    .await;
    let (stats, tools, stats_error) = match stats {
        Ok(Ok((st, tools))) => (Some(st), tools, None),
        Ok(Err(e)) => (
            None,
            Vec::new(),
            Some(format!("the history store failed: {e}")),
        ),
        Err(e) => (
            None,
            Vec::new(),
            Some(format!("reading the stats failed: {e}")),
        ),
    };
    Json(TargetBody {
        view,
        stats,
        stats_error,
        tools,
    })
    .into_response()
}

/// `POST /api/v1/targets/{name}/accept`: the contract of the target's next check that reaches
/// the server becomes its baseline, and its drift incident is resolved (after a planned change
/// of its tools). 202: asked; the target's view shows `accept_pending` until that check.
///
/// The one call that changes what the monitor alerts on, so it needs the token even where the
/// API is otherwise open (no `[server] token`, on loopback): 403 without one configured. A
/// bearer only: the status page's cookie is for reads (the middleware refuses it here). 404 for
/// an unknown target, 409 for a health-only one (it has no contract).
pub(super) async fn accept_handler(
    State(s): State<ApiState>,
    p: Result<Path<String>, PathRejection>,
) -> Response {
    let name = match target_name(p) {
        Ok(n) => n,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    if s.with_config(|c| c.server.token.is_none()) {
        return error(
            StatusCode::FORBIDDEN,
            "accepting a baseline changes what the monitor alerts on, so it needs the API token: set token = \"${MCPULSE_API_TOKEN}\" in [server], reload the monitor, and send the token as a bearer",
        );
    }
    let health_only = s.with_config(|c| {
        c.targets
            .iter()
            .any(|t| t.name == name && matches!(t.endpoint, crate::config::Endpoint::Health(_)))
    });
    if health_only {
        return error(
            StatusCode::CONFLICT,
            format!(
                "target {name:?} is health-only (health_url without url or command): its checks read an HTTP endpoint, not an MCP contract, so there is no baseline to accept"
            ),
        );
    }
    if !s.fleet.request_accept(&name) {
        return unknown_target(&name);
    }
    tracing::info!(target = %name, "accept requested through the API: the next check's contract becomes the baseline");
    (
        StatusCode::ACCEPTED,
        Json(json!({
            "target": name,
            "accept_pending": true,
            "message": "the contract of the target's next check that reaches the server becomes its baseline, and its drift incident is resolved; the target's view shows accept_pending until then",
        })),
    )
        .into_response()
}
