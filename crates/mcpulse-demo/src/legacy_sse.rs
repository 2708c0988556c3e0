//! The `legacy-sse` server: the 2024-11-05 HTTP+SSE transport, as the reference servers and the
//! TS SDK's `SSEServerTransport` serve it.
//!
//! - `GET /sse` opens an event stream whose first event is `endpoint`, naming
//!   `/message?sessionId=<id>`; a `: keep-alive` comment follows every 15 s.
//! - `POST /message?sessionId=<id>` takes one JSON-RPC message and answers `202 Accepted`; the
//!   reply to a request arrives on that session's stream as an `event: message`.
//! - `POST /sse` is 405 (axum's answer for a GET-only route), which is how a client that tried
//!   Streamable HTTP first learns to fall back to this transport.
//!
//! A stream ends when the client goes away (the next write fails) or the fleet shuts down;
//! its session goes with it.

use crate::mcp::{self, Catalogue, Incoming};
use crate::web;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::channel::Channel;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How often an idle stream gets a comment (also how soon a vanished client is noticed).
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The most streams open at once.
const MAX_STREAMS: usize = 256;

pub const NAME: &str = "mcpulse-demo-legacy-sse";

struct Server {
    /// Session id → the stream's outbox.
    sessions: Mutex<HashMap<String, mpsc::Sender<String>>>,
    shutdown: watch::Receiver<bool>,
}

/// The routes; streams end when `shutdown` turns true.
pub fn router(shutdown: watch::Receiver<bool>) -> Router {
    let server = Arc::new(Server {
        sessions: Mutex::new(HashMap::new()),
        shutdown,
    });
    Router::new()
        .route("/sse", get(open))
        .route("/message", post(message))
        .with_state(server)
}

async fn open(State(s): State<Arc<Server>>, headers: HeaderMap) -> Response {
    if let Some(r) = web::foreign(&headers) {
        return r;
    }
    let sid = web::session_id();
    let (tx, mut rx) = mpsc::channel::<String>(64);
    {
        let mut sessions = s.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.len() >= MAX_STREAMS {
            return web::json(
                StatusCode::SERVICE_UNAVAILABLE,
                &mcp::error(
                    &Value::Null,
                    mcp::SERVER_ERROR,
                    "too many open streams",
                    None,
                ),
            );
        }
        sessions.insert(sid.clone(), tx);
    }
    let (mut body_tx, body) = Channel::<Bytes>::new(16);
    let mut shutdown = s.shutdown.clone();
    let server = s.clone();
    let endpoint = format!("event: endpoint\ndata: /message?sessionId={sid}\n\n");
    tokio::spawn(async move {
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
        if body_tx.send_data(Bytes::from(endpoint)).await.is_ok() {
            loop {
                let chunk = tokio::select! {
                    msg = rx.recv() => match msg {
                        Some(m) => m,
                        None => break,
                    },
                    _ = tick.tick() => ": keep-alive\n\n".to_owned(),
                    _ = shutdown.wait_for(|v| *v) => break,
                };
                if body_tx.send_data(Bytes::from(chunk)).await.is_err() {
                    break; // the client went away
                }
            }
        }
        server
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&sid);
    });
    web::sse_response(StatusCode::OK, Body::new(body))
}

async fn message(
    State(s): State<Arc<Server>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    if let Some(r) = web::foreign(&headers) {
        return r;
    }
    let Some(sid) = query.get("sessionId") else {
        return text(StatusCode::BAD_REQUEST, "Missing sessionId parameter");
    };
    let outbox = s
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(sid)
        .cloned();
    let Some(outbox) = outbox else {
        return text(StatusCode::NOT_FOUND, "Session not found");
    };
    if let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        && !ct.to_ascii_lowercase().starts_with("application/json")
    {
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported content-type: expected application/json",
        );
    }
    let reply = match mcp::parse(&body) {
        Incoming::Invalid(e) => return web::json(StatusCode::BAD_REQUEST, &e),
        Incoming::Response | Incoming::Notification { .. } => None,
        Incoming::Request { id, method, params } => Some(answer(&id, &method, &params)),
    };
    if let Some(reply) = reply
        && outbox.send(web::sse_message(&reply)).await.is_err()
    {
        return text(StatusCode::NOT_FOUND, "Session not found");
    }
    text(StatusCode::ACCEPTED, "Accepted")
}

/// 2024-11-05 answers: this server knows only its own revision.
fn answer(id: &Value, method: &str, params: &Value) -> Value {
    match method {
        "initialize" => {
            let info = mcp::server_info(NAME, "mcpulse demo: legacy HTTP+SSE", false);
            let result = mcp::initialize_result(
                mcp::SSE_REVISION,
                info,
                "A 2024-11-05 server on the deprecated HTTP+SSE transport.",
            );
            mcp::result(id, result)
        }
        _ => mcp::legacy_answer(id, method, params, Catalogue::Basic, false),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response {
    (status, body).into_response()
}
