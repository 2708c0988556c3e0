//! The monitor's own health: `/livez` and `/readyz`, as `application/health+json` or, with
//! `?verbose`, as kube-apiserver's text.
//!
//! This module does not decide readiness (the fleet's [`crate::fleet::Snapshot::readiness`]
//! does); it renders it.

use super::ApiState;
use crate::fleet::{CheckStatus, SelfCheck};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

const HEALTH_JSON: &str = "application/health+json";

/// Renders checks as the health+json draft (draft-inadarei-api-health-check-06) has them.
fn health_json(status: CheckStatus, description: &str, checks: &[SelfCheck]) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    for c in checks {
        let mut o = serde_json::Map::new();
        o.insert("componentType".into(), c.component_type.into());
        if let Some(v) = &c.observed_value {
            o.insert("observedValue".into(), v.clone());
        }
        if let Some(u) = c.observed_unit {
            o.insert("observedUnit".into(), u.into());
        }
        o.insert("status".into(), c.status.as_str().into());
        if let Some(t) = c.time_ms {
            o.insert("time".into(), rfc3339(t).into());
        }
        if let Some(out) = &c.output {
            o.insert("output".into(), out.clone().into());
        }
        map.insert(c.key.into(), serde_json::Value::Array(vec![o.into()]));
    }
    let mut body = json!({
        "status": status.as_str(),
        "version": env!("CARGO_PKG_VERSION"),
        "serviceId": "mcpulse",
        "description": description,
        "checks": map,
    });
    if status != CheckStatus::Pass
        && let Some(out) = checks
            .iter()
            .filter(|c| c.status == status)
            .find_map(|c| c.output.clone())
        && let Some(o) = body.as_object_mut()
    {
        o.insert("output".into(), out.into());
    }
    body
}

use mcpulse_wire::units::format_rfc3339 as rfc3339;

fn health_response(
    status: CheckStatus,
    description: &str,
    checks: &[SelfCheck],
    verbose: bool,
    what: &str,
) -> Response {
    // pass and warn are 2xx, fail is 5xx: the status code is the contract.
    let code = if status == CheckStatus::Fail {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let (content_type, body) = if verbose {
        let mut text = String::new();
        for c in checks {
            match (c.status, &c.output) {
                (CheckStatus::Fail, Some(o)) => {
                    text.push_str(&format!("[-]{} failed: {o}\n", c.name))
                }
                (CheckStatus::Fail, None) => text.push_str(&format!("[-]{} failed\n", c.name)),
                (CheckStatus::Warn, Some(o)) => {
                    text.push_str(&format!("[+]{} ok (warn: {o})\n", c.name))
                }
                _ => text.push_str(&format!("[+]{} ok\n", c.name)),
            }
        }
        let verdict = if status == CheckStatus::Fail {
            "failed"
        } else {
            "passed"
        };
        text.push_str(&format!("{what} check {verdict}\n"));
        ("text/plain; charset=utf-8", text)
    } else {
        (
            HEALTH_JSON,
            health_json(status, description, checks).to_string(),
        )
    };
    (
        code,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// Query flags as kube-apiserver takes them: `?verbose`, `?exclude=a&exclude=b`.
fn health_params(q: Result<Query<Vec<(String, String)>>, QueryRejection>) -> (bool, Vec<String>) {
    let pairs = q.map(|Query(p)| p).unwrap_or_default();
    let verbose = pairs
        .iter()
        .any(|(k, v)| k == "verbose" && v != "false" && v != "0");
    let exclude = pairs
        .into_iter()
        .filter(|(k, _)| k == "exclude")
        .map(|(_, v)| v)
        .collect();
    (verbose, exclude)
}

pub(super) async fn livez(
    State(s): State<ApiState>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let (verbose, _) = health_params(q);
    let now = s.now();
    // Answering at all is the liveness signal; the uptime is there for people.
    let checks = [SelfCheck {
        key: "process:uptime",
        name: "process",
        component_type: "system",
        status: CheckStatus::Pass,
        observed_value: Some(((now - s.started_ms).max(0) / 1000).into()),
        observed_unit: Some("s"),
        time_ms: Some(now),
        output: None,
    }];
    health_response(
        CheckStatus::Pass,
        "mcpulse monitor liveness",
        &checks,
        verbose,
        "livez",
    )
}

pub(super) async fn readyz(
    State(s): State<ApiState>,
    q: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let (verbose, exclude) = health_params(q);
    let checks: Vec<SelfCheck> = s
        .fleet
        .snapshot()
        .readiness(s.now())
        .into_iter()
        .filter(|c| !exclude.iter().any(|e| e == c.name))
        .collect();
    let status = checks
        .iter()
        .map(|c| c.status)
        .max()
        .unwrap_or(CheckStatus::Pass);
    health_response(
        status,
        "mcpulse monitor readiness: config loaded, store writable, checks flowing",
        &checks,
        verbose,
        "readyz",
    )
}
