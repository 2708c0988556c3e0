//! The `auth-gated` server's OAuth side: the bearer check with its RFC 6750 challenge, the
//! protected-resource metadata (RFC 9728) and the authorization-server metadata (RFC 8414) it
//! points to. The server is its own (demo) authorization server: the metadata is complete and
//! consistent, so the security grade stays A, but it issues no tokens; the one token it accepts
//! is [`crate::DEMO_TOKEN`], so `mcpulse probe -H 'Authorization: Bearer mcpulse-demo-token'`
//! shows the authenticated view.
//!
//! Plain-HTTP endpoints are acceptable here only because they are on loopback.

use crate::web;
use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Value, json};

/// The scope the challenge names.
pub const SCOPE: &str = "demo";

/// `None` when the request carries the demo token; otherwise the 401 with its challenge.
pub fn check(headers: &HeaderMap, base: &str) -> Option<Response> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let expected = format!("Bearer {}", crate::DEMO_TOKEN);
    let error = match presented {
        Some(p) if p == expected => return None,
        Some(_) => ", error=\"invalid_token\"",
        None => "",
    };
    let challenge = format!(
        "Bearer resource_metadata=\"{}\", scope=\"{SCOPE}\"{error}",
        prm_url(base)
    );
    let body = json!({
        "error": "invalid_token",
        "error_description": "mcpulse demo: send Authorization: Bearer <token>; the demo accepts the token `mcpulse-demo-token`",
    });
    Some(web::with_header(
        web::json(StatusCode::UNAUTHORIZED, &body),
        "www-authenticate",
        &challenge,
    ))
}

/// Where the protected-resource metadata lives (the root well-known URL).
pub fn prm_url(base: &str) -> String {
    format!("{base}/.well-known/oauth-protected-resource")
}

/// RFC 9728 protected-resource metadata for `<base>/mcp`.
pub fn resource_metadata(base: &str) -> Value {
    json!({
        "resource": format!("{base}/mcp"),
        "authorization_servers": [base],
        "scopes_supported": [SCOPE],
        "bearer_methods_supported": ["header"],
        "resource_name": "mcpulse demo (auth-gated)",
    })
}

/// RFC 8414 authorization-server metadata; the issuer is `base` itself.
pub fn server_metadata(base: &str) -> Value {
    json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "scopes_supported": [SCOPE],
        "client_id_metadata_document_supported": true,
        "authorization_response_iss_parameter_supported": true,
    })
}

/// The metadata documents (at the root and at the path-inserted well-known URL) and stub
/// authorization and token endpoints that explain themselves.
pub fn router(base: &str) -> Router {
    let prm = resource_metadata(base);
    let asm = server_metadata(base);
    let prm_doc = move || {
        let prm = prm.clone();
        async move { web::json(StatusCode::OK, &prm) }
    };
    let as_doc = move || {
        let asm = asm.clone();
        async move { web::json(StatusCode::OK, &asm) }
    };
    Router::new()
        .route(
            "/.well-known/oauth-protected-resource",
            get(prm_doc.clone()),
        )
        .route("/.well-known/oauth-protected-resource/mcp", get(prm_doc))
        .route("/.well-known/oauth-authorization-server", get(as_doc))
        .route("/authorize", get(no_tokens))
        .route("/token", post(no_tokens))
}

async fn no_tokens(headers: HeaderMap) -> Response {
    if let Some(r) = web::foreign(&headers) {
        return r;
    }
    web::json(
        StatusCode::BAD_REQUEST,
        &json!({
            "error": "access_denied",
            "error_description": "mcpulse demo: this authorization server issues no tokens; use Authorization: Bearer mcpulse-demo-token",
        }),
    )
}
