//! The monitor's own health: `/livez` and `/readyz`, as `application/health+json` or, with
//! `?verbose`, as kube-apiserver's text.
//!
//! This module does not decide readiness (the fleet's [`crate::fleet::Snapshot::readiness`]
//! does); it renders it.

use super::ApiState;
use crate::fleet::SelfCheck;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use mcpulse_policy::health::{self, Health};

fn monitor_health(description: &'static str, checks: Vec<SelfCheck>) -> Health {
    Health {
        service_id: "mcpulse".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        description: description.into(),
        checks,
    }
}

/// Query flags as kube-apiserver takes them: `?verbose`, `?exclude=a&exclude=b`.
fn health_params(q: Result<Query<Vec<(String, String)>>, QueryRejection>) -> health::Query {
    health::Query::from_pairs(q.map(|Query(p)| p).unwrap_or_default())
}

pub(super) async fn livez(
    State(s): State<ApiState>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let query = health_params(q);
    let now = s.now();
    // Answering at all is the liveness signal; the uptime is there for people.
    let checks = vec![
        SelfCheck::new("process:uptime", "process", "system")
            .observed((now - s.started_ms).max(0) / 1000, "s")
            .at(now),
    ];
    // Liveness has nothing to exclude.
    let query = health::Query {
        exclude: Vec::new(),
        ..query
    };
    respond(monitor_health("mcpulse monitor liveness", checks).render(&query, "livez"))
}

/// A rendered health document on the wire ([`health::Rendered::headers`]). Here, not in
/// `mcpulse-policy`, which stays free of HTTP.
fn respond(r: health::Rendered) -> Response {
    use axum::http::StatusCode;
    let code = StatusCode::from_u16(r.http_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, r.headers(), r.body).into_response()
}

pub(super) async fn readyz(
    State(s): State<ApiState>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let query = health_params(q);
    let checks = s.fleet.snapshot().readiness(s.now());
    respond(
        monitor_health(
            "mcpulse monitor readiness: config loaded, store writable, checks flowing",
            checks,
        )
        .render(&query, "readyz"),
    )
}
