//! What the `policies_*` tests (and stdio_upstream.rs) share: a gateway from TOML, a plain HTTP client (one
//! connection per request), the health endpoints and `/metrics`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use mcpulse_gateway::config;
use mcpulse_gateway::serve::{self, Running};
use mcpulse_gateway::state::Shared;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The longest any step may take.
pub const BOUND: Duration = Duration::from_secs(15);

pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Reply {
    /// The JSON-RPC message: the body, or the last SSE `data:` line.
    pub fn json(&self) -> Value {
        let text = if self.body.trim_start().starts_with('{') {
            self.body.clone()
        } else {
            self.body
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .next_back()
                .unwrap_or_else(|| panic!("no message in {}", self.body))
                .to_owned()
        };
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The text of a tool result's first content item.
    pub fn text(&self) -> String {
        self.json()["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// One HTTP request on a connection of its own.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Reply {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json");
    // Both media types, unless the test names its own.
    if !headers.iter().any(|(k, _)| *k == "accept") {
        req = req.header("accept", "application/json, text/event-stream");
    }
    if !headers.iter().any(|(k, _)| *k == "host") {
        req = req.header("host", addr.to_string());
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let body = body.map(Value::to_string).unwrap_or_default();
    let req = req.body(Full::new(Bytes::from(body))).unwrap();
    let resp = tokio::time::timeout(BOUND, sender.send_request(req))
        .await
        .expect("no answer in time")
        .unwrap();
    let (parts, body) = resp.into_parts();
    let body = tokio::time::timeout(BOUND, body.collect())
        .await
        .expect("the body did not end in time")
        .unwrap()
        .to_bytes();
    Reply {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

pub async fn post(addr: SocketAddr, session: Option<&str>, message: &Value) -> Reply {
    let headers: Vec<(&str, &str)> = session.map(|s| ("mcp-session-id", s)).into_iter().collect();
    request(addr, "POST", "/mcp", &headers, Some(message)).await
}

pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path, &[], None).await
}

/// Opens a legacy session: initialize, then initialized.
pub async fn open_session(addr: SocketAddr) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    let r = post(addr, None, &init).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sid = r.header("mcp-session-id").expect("a session id").to_owned();
    let n = post(
        addr,
        Some(&sid),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(n.status, 202);
    sid
}

pub fn call(id: i64, tool: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": {}}})
}

/// A gateway from config text (`listen` on port 0 is added).
pub async fn start(toml: &str) -> (Running, Arc<Shared>) {
    let text = format!("listen = \"127.0.0.1:0\"\n{toml}");
    let g = config::parse(&text, "test.toml", &|_| None).unwrap();
    let shared = Arc::new(Shared::default());
    let running = serve::start(&g, shared.clone()).await.unwrap();
    (running, shared)
}

/// The value of the series `name{labels}` in `/metrics` (0 when absent).
pub fn metric(shared: &Shared, series: &str) -> f64 {
    let text = shared.metrics.encode().unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Polls `cond` until it holds (at most `bound`).
pub async fn eventually(bound: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let until = tokio::time::Instant::now() + bound;
    while !cond() {
        assert!(tokio::time::Instant::now() < until, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `message` as a POST (accepting SSE) on a connection with a small receive buffer,
/// and never reads the answer: a client that stopped reading. Dropping it disconnects.
pub async fn post_unread(
    addr: SocketAddr,
    session: Option<&str>,
    message: &Value,
) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut client = socket.connect(addr).await.unwrap();
    let body = message.to_string();
    let sid = session
        .map(|s| format!("mcp-session-id: {s}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\n{sid}content-length: {}\r\n\r\n{body}",
        body.len()
    );
    client.write_all(head.as_bytes()).await.unwrap();
    client
}

/// Waits until every slot of `[concurrency]` (the only limiter these tests configure) is
/// given back.
pub async fn slots_all_free(shared: &Shared) {
    eventually(BOUND, "every slot is given back", || {
        shared.policies().in_flight() == vec![("gateway".to_owned(), 0)]
    })
    .await;
}

/// A POST of `body` as it is (any bytes), on a connection of its own: the status and body.
pub async fn post_bytes(addr: std::net::SocketAddr, body: &[u8]) -> (u16, String) {
    post_raw(addr, b"", body).await
}

/// [`post_bytes`] with more header lines (`extra`: raw bytes, each line ending in CRLF).
pub async fn post_raw(addr: std::net::SocketAddr, extra: &[u8], body: &[u8]) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(extra).await.unwrap();
    s.write_all(b"\r\n").await.unwrap();
    s.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(BOUND, s.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}
