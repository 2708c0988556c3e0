//! The health endpoints as an axum [`Router`] to merge beside rmcp's `StreamableHttpService`:
//! `/livez` (the runtime), `/readyz` (the tool registry and the dependencies, 200 or 503) and
//! `/metrics` (Prometheus text). `/livez` and `/readyz` answer `application/health+json` in
//! the gateway's shape, or kube-apiserver's text with `?verbose`; `/readyz?exclude=NAME`
//! leaves a check out. Never cached (`Cache-Control: no-store`). A request only reads the
//! registry's cache: it runs no check.
//!
//! ```no_run
//! # async fn serve(health: mcpulse_kit::Health, mcp: axum::Router) -> std::io::Result<()> {
//! let app = mcp.merge(mcpulse_kit::endpoints::router(health));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await
//! # }
//! ```

use crate::Health;
use crate::metrics::OPENMETRICS;
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use mcpulse_policy::health::{self as model, Rendered};

type Pairs = Result<Query<Vec<(String, String)>>, QueryRejection>;

fn query(q: Pairs) -> model::Query {
    model::Query::from_pairs(q.map(|Query(p)| p).unwrap_or_default())
}

fn respond(r: Rendered) -> Response {
    let code = StatusCode::from_u16(r.http_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, r.headers(), r.body).into_response()
}

async fn livez(State(h): State<Health>, q: Pairs) -> Response {
    // `?exclude` is for readiness: liveness has one check and it is not optional.
    let q = model::Query {
        exclude: Vec::new(),
        ..query(q)
    };
    respond(h.liveness().render(&q, "livez"))
}

async fn readyz(State(h): State<Health>, q: Pairs) -> Response {
    respond(h.readiness().render(&query(q), "readyz"))
}

async fn metrics(State(h): State<Health>) -> Response {
    // The readiness, liveness and breaker series are as of this scrape.
    let _ = h.readiness();
    let _ = h.liveness();
    match h.metrics().encode() {
        Ok(body) => (StatusCode::OK, [(header::CONTENT_TYPE, OPENMETRICS)], body).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "encoding the metrics failed\n",
        )
            .into_response(),
    }
}

/// `/livez`, `/readyz` and `/metrics` over `health`.
pub fn router(health: Health) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health)
}
