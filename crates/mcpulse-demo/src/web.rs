//! HTTP plumbing shared by the demo's HTTP servers: replies, the DNS-rebinding guard (`Origin`
//! and `Host`), session ids, SSE framing, and serving a router on loopback until shutdown.
//!
//! It knows nothing of MCP methods; `streamable`, `legacy_sse` and `auth` do.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A JSON reply.
pub fn json(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A reply with a status and no body.
pub fn empty(status: StatusCode) -> Response {
    status.into_response()
}

/// Adds a header to a reply (a value that is not a valid header value is left out).
pub fn with_header(mut resp: Response, name: &'static str, value: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
    resp
}

/// A finite `text/event-stream` reply: a priming event (an id, empty data: 2025-11-25), then one
/// `message` event carrying the JSON-RPC reply, then the end of the stream.
pub fn sse_reply(status: StatusCode, event_id: u64, message: &Value) -> Response {
    let body =
        format!("id: {event_id}-0\ndata:\n\nevent: message\nid: {event_id}-1\ndata: {message}\n\n");
    sse_response(status, Body::from(body))
}

/// A `text/event-stream` response around a body.
pub fn sse_response(status: StatusCode, body: Body) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        body,
    )
        .into_response()
}

/// One SSE `message` event (the legacy HTTP+SSE transport).
pub fn sse_message(message: &Value) -> String {
    format!("event: message\ndata: {message}\n\n")
}

/// The DNS-rebinding guard every demo HTTP server applies first: an `Origin` that is present
/// and not loopback gets 403 (MUST since 2025-11-25), and so does a `Host` that is not loopback
/// (conformance `dns-rebinding-protection`). A missing header passes: non-browser clients send
/// no `Origin`.
pub fn foreign(headers: &HeaderMap) -> Option<Response> {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let ok = origin
            .to_str()
            .ok()
            .and_then(origin_host)
            .is_some_and(is_loopback_name);
        if !ok {
            return Some(forbidden(&format!(
                "Forbidden: Origin {:?} is not allowed",
                origin.to_str().unwrap_or("?")
            )));
        }
    }
    if let Some(host) = headers.get(header::HOST) {
        let ok = host
            .to_str()
            .ok()
            .map(host_name)
            .is_some_and(is_loopback_name);
        if !ok {
            return Some(forbidden(&format!(
                "Forbidden: Host {:?} is not allowed",
                host.to_str().unwrap_or("?")
            )));
        }
    }
    None
}

fn forbidden(message: &str) -> Response {
    json(
        StatusCode::FORBIDDEN,
        &crate::mcp::error(&Value::Null, crate::mcp::SERVER_ERROR, message, None),
    )
}

/// The `Host`/`Origin` readers, shared with the gateway's front door.
pub use mcpulse_wire::hosts::{host_name, is_loopback_name, origin_host};

/// A fresh session id: 128 bits from SipHash under the process's random keys, as 32 hex digits
/// (visible ASCII, as the spec requires). Unpredictable enough for a loopback demo; a real
/// server would use a CSPRNG.
pub fn session_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut out = String::with_capacity(32);
    for _ in 0..2 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_u128(nanos);
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

/// Binds 127.0.0.1:0.
pub async fn bind() -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

/// Serves `router` on `listener` until `shutdown` turns true; in-flight responses (but not new
/// requests) finish first.
pub fn serve(
    listener: TcpListener,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let stop = async move {
            let _ = shutdown.wait_for(|v| *v).await;
        };
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(stop)
            .await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:9"));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://localhost:3000"),
        );
        assert!(foreign(&h).is_none());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert_eq!(foreign(&h).map(|r| r.status()), Some(StatusCode::FORBIDDEN));
        h.remove(header::ORIGIN);
        h.insert(header::HOST, HeaderValue::from_static("evil.example"));
        assert_eq!(foreign(&h).map(|r| r.status()), Some(StatusCode::FORBIDDEN));
    }

    #[test]
    fn session_ids_differ_and_are_visible_ascii() {
        let (a, b) = (session_id(), session_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        let common = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
        assert!(common < 8, "{a} {b}");
    }
}
