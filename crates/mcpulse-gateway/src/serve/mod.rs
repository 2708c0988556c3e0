//! The MCP endpoint (`/mcp`, Streamable HTTP, both protocol eras) and the upstreams behind it
//! (issue #19 part 1).
//!
//! - this module: the front door shared by both upstreams: Host validation (DNS rebinding),
//!   Origin validation, the body cap, `MCP-Protocol-Version`, the per-request log line and
//!   metrics ([`record`]), the opt-in `health_check` tool ([`inject_health_tool`]), the
//!   dispatch to the upstream, and the listeners ([`start`]);
//! - [`stdio`]: a stdio command behind the gateway: one supervised child per legacy session
//!   (never shared), a small pool for stateless 2026-07-28 requests; the gateway implements the
//!   Streamable HTTP server side itself;
//! - [`http`]: a Streamable HTTP server behind the gateway: requests and their SSE responses
//!   relayed streaming with bounded buffers; sessions are the upstream's own; reconnects with
//!   backoff and jitter, and a fast, clear error meanwhile.
//!
//! The door's refusals, in order: a `Host` that is not ours (403), an `Origin` not allowed
//! (403), a method other than POST/GET/DELETE (405), an unknown `MCP-Protocol-Version` (400),
//! a body over `max_body` (413); then, for a POST, a body that is not one JSON-RPC object
//! (400, -32700 / -32600). Error bodies are JSON-RPC errors without an id, as the TS SDK's.

pub mod http;
pub mod stdio;

/// The MCP header names the door and the relays read on every request, parsed once.
pub(crate) mod names {
    use axum::http::HeaderName;
    pub const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
    pub const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
    pub const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
    pub const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
    pub const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
    pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
    pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
    pub const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");
}

use crate::config::{self, Gateway};
use crate::metrics::Outcome;
use crate::state::Shared;
use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use mcpulse_wire::hosts::{host_name, is_loopback_name, origin_host};
use serde_json::{Value, json};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// The upstream behind the door.
#[derive(Clone)]
pub enum Upstream {
    Stdio(Arc<stdio::StdioUpstream>),
    Http(Arc<http::HttpUpstream>),
}

/// The front door: what it lets in, and where it sends it.
pub struct Door {
    settings: config::Door,
    /// The bound address (its IP is a valid `Host`).
    listen: SocketAddr,
    upstream: Upstream,
    health_tool: Option<String>,
}

/// The `/mcp` route.
pub fn router(door: Arc<Door>) -> Router {
    Router::new()
        .route("/mcp", axum::routing::any(on_mcp))
        .with_state(door)
}

/// One request answered: the metrics and one log line (method, tool, duration, outcome; never
/// arguments or results), both through [`crate::metrics`], which bounds the labels (a tool has
/// a label of its own only once the upstream listed it) and makes the names inert. The
/// gateway's own probes (`own_probe`, [`crate::checks::is_own_probe`]) are neither counted
/// nor logged.
pub fn record(
    shared: &Shared,
    method: &str,
    tool: Option<&str>,
    started: tokio::time::Instant,
    outcome: Outcome,
    own_probe: bool,
) {
    if own_probe {
        return;
    }
    let took = started.elapsed();
    shared.metrics.request(method, tool, took, outcome);
    // The method as the metrics label it (an MCP method or `_other`), over either upstream.
    crate::metrics::log_request(crate::metrics::method_label(method), tool, took, outcome);
    if method == "tools/call"
        && let Some(tool) = tool
    {
        let listed = shared.metrics.knows_tool(tool);
        // Keyed as the metrics know it (inert, cut): a client's long variants of a listed
        // name share one window, whatever their length.
        shared.thresholds.record(
            &mcpulse_wire::text::field(tool),
            listed,
            outcome != Outcome::Ok,
            took,
        );
    }
}

/// [`record`] for a call its client cancelled: counted and logged, but it judges nothing,
/// so it never feeds the error-rate and latency thresholds (a client giving up says nothing
/// about the tool).
pub(crate) fn record_cancelled(
    shared: &Shared,
    method: &str,
    tool: Option<&str>,
    started: tokio::time::Instant,
) {
    let took = started.elapsed();
    shared
        .metrics
        .request(method, tool, took, Outcome::RpcError);
    crate::metrics::log_request(
        crate::metrics::method_label(method),
        tool,
        took,
        Outcome::RpcError,
    );
}

/// The tools a `tools/list` reply lists.
pub(crate) fn listed(reply: &Value) -> Option<&Vec<Value>> {
    reply
        .get("result")
        .and_then(|r| r.get("tools"))
        .and_then(Value::as_array)
}

/// Gives the tools a `tools/list` reply lists their own metric labels.
pub fn learn_listed_tools(shared: &Shared, reply: &Value) {
    let Some(tools) = listed(reply) else {
        return;
    };
    let names: Vec<&str> = tools
        .iter()
        .filter_map(|t| t.get("name").and_then(Value::as_str))
        .collect();
    shared.metrics.learn_tools(&names);
}

/// Adds the `health_check` tool (`name`) to a `tools/list` result, on its last page only (a
/// paginated list lists it once), in place of an upstream tool of the same name (the gateway
/// answers that name, so the upstream's description would be wrong). A result that is not a
/// tools list is left alone. Whether it changed the result.
pub fn inject_health_tool(result: &mut Value, name: &str) -> bool {
    if result.get("nextCursor").is_some_and(|c| !c.is_null()) {
        return false;
    }
    let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
        return false;
    };
    tools.retain(|t| t.get("name").and_then(Value::as_str) != Some(name));
    tools.push(crate::health::tool_descriptor(name));
    true
}

/// [`inject_health_tool`] on a whole JSON-RPC reply.
pub(crate) fn inject_reply(reply: &mut Value, name: &str) -> bool {
    reply
        .get_mut("result")
        .is_some_and(|result| inject_health_tool(result, name))
}

/// A refusal: `status` with a JSON-RPC error without an id.
pub(crate) fn refuse(status: StatusCode, code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response()
}

/// A terminated, expired or never-issued session: 404, so the client initializes again.
pub(crate) fn unknown_session() -> Response {
    refuse(StatusCode::NOT_FOUND, -32001, "Session not found")
}

/// How long a client is told to wait when every session is taken.
pub const RETRY_AFTER_SECS: u64 = 5;

/// 503 with `Retry-After`: full.
pub(crate) fn busy(message: &str) -> Response {
    let mut r = refuse(StatusCode::SERVICE_UNAVAILABLE, -32000, message);
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    r
}

/// A fresh session id: 128 bits from the kernel's CSPRNG (`/dev/urandom`) as 32 hex digits
/// (visible ASCII, as the spec requires); where that cannot be read, SipHash under the
/// process's random keys over a counter and the time.
pub(crate) fn session_id() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if random.is_err() {
        use std::hash::{BuildHasher, Hasher};
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for (i, chunk) in bytes.chunks_mut(8).enumerate() {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(n);
            h.write_u128(nanos);
            h.write_usize(i);
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Sleeps until `at`, or for ever.
pub(crate) async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A response body fed by a channel of ready SSE frames, each a whole event; it ends when
/// every sender is gone, and a client that goes away drops it, which the senders see as a
/// closed channel. Both upstreams' streams (POST responses and GET streams) are one of these.
///
/// Keep-alives ([`mcpulse_policy::keepalive`]): when nothing has been handed to hyper for
/// `interval`, the body yields [`mcpulse_policy::keepalive::COMMENT`] itself, on tokio's clock.
/// Frames are whole events, so a comment always falls between two events. hyper polls the
/// body only when it can write: a client that does not read gets no pile of comments (at
/// most one is waiting in hyper's buffer), and a stream past its end gets none.
pub struct ChannelBody<R = mpsc::Receiver<Bytes>> {
    rx: R,
    keepalive: mcpulse_policy::keepalive::KeepAlive,
    /// Time 0 of the keep-alive clock: when the stream opened.
    origin: tokio::time::Instant,
    timer: Pin<Box<tokio::time::Sleep>>,
}

/// What a [`ChannelBody`] reads its frames from: a channel of frames, or of frames still
/// counted against a byte-bounded queue ([`Frame`], [`mcpulse_transport::queue`]), given back
/// as each is handed to hyper.
pub trait Frames: Send + Unpin + 'static {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>>;
}

impl Frames for mpsc::Receiver<Bytes> {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        self.poll_recv(cx)
    }
}

impl Frames for mpsc::Receiver<Frame> {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        self.poll_recv(cx).map(|f| f.map(Bytes::from))
    }
}

impl Frames for mcpulse_transport::queue::Receiver<Bytes> {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        self.poll_recv_charged(cx).map(|f| f.map(Bytes::from))
    }
}

/// An SSE frame on its way to a client: the gateway's own, or a server's still counted
/// against the byte bound of the queue it came through until hyper takes it.
pub(crate) enum Frame {
    Free(Bytes),
    Charged(mcpulse_transport::queue::Charged<Bytes>),
}

impl From<Frame> for Bytes {
    fn from(f: Frame) -> Bytes {
        match f {
            Frame::Free(b) => b,
            Frame::Charged(c) => c.into(),
        }
    }
}

impl Frame {
    fn bytes(&self) -> &[u8] {
        match self {
            Frame::Free(b) => b,
            Frame::Charged(c) => &c.item,
        }
    }

    /// Whether this is the gateway's keep-alive comment (nothing of the server's).
    pub(crate) fn is_keepalive(&self) -> bool {
        self.bytes() == mcpulse_policy::keepalive::COMMENT
    }
}

impl<R: Frames> ChannelBody<R> {
    /// A stream from `rx`, with a comment after each `keepalive` of silence (`None`: never).
    pub fn new(rx: R, keepalive: Option<Duration>) -> ChannelBody<R> {
        let origin = tokio::time::Instant::now();
        ChannelBody {
            rx,
            keepalive: mcpulse_policy::keepalive::KeepAlive::new(keepalive, 0),
            origin,
            timer: Box::pin(tokio::time::sleep_until(origin)),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

impl<R: Frames> hyper::body::Body for ChannelBody<R> {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        match this.rx.poll_next(cx) {
            Poll::Ready(Some(frame)) => {
                let now = this.now_ms();
                this.keepalive.wrote(now);
                return Poll::Ready(Some(Ok(hyper::body::Frame::data(frame))));
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        loop {
            let Some(due) = this.keepalive.due_at() else {
                return Poll::Pending;
            };
            let at = this.origin + Duration::from_millis(due);
            if this.timer.deadline() != at {
                this.timer.as_mut().reset(at);
            }
            if this.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = this.now_ms();
            if this.keepalive.poll(now) {
                let comment = Bytes::from_static(mcpulse_policy::keepalive::COMMENT);
                return Poll::Ready(Some(Ok(hyper::body::Frame::data(comment))));
            }
        }
    }
}

impl Door {
    /// DNS-rebinding protection: a browser tricked into calling us by a hostile name sends
    /// that name as `Host`. Allowed: loopback names (any port: a port forward changes it), the
    /// listen address's IP, and `allowed_hosts` (`*`: any). No `Host` at all is no browser.
    fn host_ok(&self, headers: &HeaderMap) -> bool {
        let allowed = &self.settings.allowed_hosts;
        if allowed.iter().any(|h| h == "*") {
            return true;
        }
        let Some(host) = headers.get(header::HOST) else {
            return true;
        };
        let Ok(host) = host.to_str() else {
            return false;
        };
        let host = host.to_ascii_lowercase();
        let name = host_name(&host);
        if is_loopback_name(name) || allowed.iter().any(|h| *h == host || h == name) {
            return true;
        }
        let ip = self.listen.ip();
        !ip.is_unspecified() && name.parse::<std::net::IpAddr>().is_ok_and(|n| n == ip)
    }

    /// Origin validation (the spec's MUST): no `Origin` is not a browser; loopback origins and
    /// `allowed_origins` (`*`: any) pass.
    fn origin_ok(&self, headers: &HeaderMap) -> bool {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return true;
        };
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        let allowed = &self.settings.allowed_origins;
        if allowed.iter().any(|o| o == "*" || *o == origin) {
            return true;
        }
        origin_host(&origin).is_some_and(is_loopback_name)
    }
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

async fn on_mcp(State(door): State<Arc<Door>>, mut req: Request) -> Response {
    // The peer's address as axum's plain `ConnectInfo<SocketAddr>`, which the HTTP relay reads.
    if let Some(ConnectInfo(Peer(addr))) = req.extensions().get::<ConnectInfo<Peer>>().cloned() {
        req.extensions_mut().insert(ConnectInfo(addr));
    }
    let headers = req.headers();
    if !door.host_ok(headers) {
        return refuse(
            StatusCode::FORBIDDEN,
            -32000,
            "Forbidden: Host not allowed (DNS-rebinding protection; see allowed_hosts)",
        );
    }
    if !door.origin_ok(headers) {
        return refuse(
            StatusCode::FORBIDDEN,
            -32000,
            "Forbidden: Origin not allowed (see allowed_origins)",
        );
    }
    let method = req.method().clone();
    if !matches!(method, Method::POST | Method::GET | Method::DELETE) {
        let mut r = refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            -32000,
            "Method not allowed: use POST, GET or DELETE",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
        return r;
    }
    // A value that is not visible ASCII is no known version either (it was taken for absent).
    let version = headers
        .get(names::MCP_PROTOCOL_VERSION)
        .map(|v| v.to_str().unwrap_or("\u{fffd}").to_owned());
    if let Some(v) = &version
        && !mcpulse_wire::version::is_known(v)
    {
        let body = json!({"jsonrpc": "2.0", "id": null, "error": {
            "code": mcpulse_wire::version::UNSUPPORTED_PROTOCOL_VERSION,
            "message": "Unsupported protocol version",
            "data": {"supported": mcpulse_wire::version::KNOWN, "requested": v},
        }});
        return (
            StatusCode::BAD_REQUEST,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body.to_string(),
        )
            .into_response();
    }
    let max = door.settings.max_body;
    let declared = header_str(headers, header::CONTENT_LENGTH).and_then(|l| l.parse::<u64>().ok());
    if declared.is_some_and(|n| n > u64::try_from(max).unwrap_or(u64::MAX)) {
        return too_large(max);
    }
    match &door.upstream {
        Upstream::Http(up) => {
            // The cap holds for a body without Content-Length too: the relay's read fails past
            // it, and answers the same 413 (it finds the limit's error among the causes, and
            // this cap in its settings: `HttpSettings::max_body`).
            let (parts, body) = req.into_parts();
            let body = axum::body::Body::new(http_body_util::Limited::new(body, max));
            up.handle(Request::from_parts(parts, body)).await
        }
        Upstream::Stdio(up) => stdio_request(&door, up, req, version).await,
    }
}

/// Whether `e` (a body's read error) is, or was caused by, a [`http_body_util::Limited`] cap.
pub(crate) fn over_limit(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = c.source();
    }
    false
}

pub(crate) fn too_large(max: usize) -> Response {
    refuse(
        StatusCode::PAYLOAD_TOO_LARGE,
        -32000,
        &format!("Payload too large: the body is over {max} bytes (max_body)"),
    )
}

/// A request's body, at most `max` bytes: past it `413` ([`too_large`]), with or without a
/// `Content-Length`; a body that breaks off (the client went away) `400`.
async fn read_body(body: axum::body::Body, max: usize) -> Result<bytes::Bytes, Response> {
    axum::body::to_bytes(body, max).await.map_err(|e| {
        if over_limit(&e) {
            return too_large(max);
        }
        refuse(
            StatusCode::BAD_REQUEST,
            -32600,
            "Invalid Request: the request body could not be read",
        )
    })
}

async fn stdio_request(
    door: &Door,
    up: &Arc<stdio::StdioUpstream>,
    req: Request,
    version: Option<String>,
) -> Response {
    let (parts, body) = req.into_parts();
    let session = header_str(&parts.headers, names::MCP_SESSION_ID).map(str::to_owned);
    match parts.method {
        Method::GET => return up.listen(session.as_deref()),
        Method::DELETE => return up.delete(session.as_deref()).await,
        _ => {}
    }
    if let Some(ct) = header_str(&parts.headers, header::CONTENT_TYPE)
        && !ct.to_ascii_lowercase().starts_with("application/json")
    {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            -32000,
            "Unsupported Media Type: Content-Type must be application/json",
        );
    }
    let bytes = match read_body(body, door.settings.max_body).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let message = match serde_json::from_slice::<Value>(&bytes) {
        // Read as the HTTP door reads it (the envelope and the params the policies look at,
        // each key once): a JSON object whose last key would win here is refused there too.
        Ok(Value::Object(m))
            if m.get("method").and_then(Value::as_str) == Some("tools/call")
                && mcpulse_relay::supervise::envelope::Envelope::strict(&bytes).is_none() =>
        {
            return refuse(
                StatusCode::BAD_REQUEST,
                -32600,
                "Invalid Request: not one JSON-RPC message (a JSON object, each key once)",
            );
        }
        Ok(Value::Object(m)) => m,
        Ok(Value::Array(_)) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                -32600,
                "Invalid Request: batches are not supported; send one message per POST",
            );
        }
        Ok(_) => return refuse(StatusCode::BAD_REQUEST, -32600, "Invalid Request"),
        Err(_) => return refuse(StatusCode::BAD_REQUEST, -32700, "Parse error"),
    };
    let meta_version = message
        .get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(Value::as_str);
    if let (Some(h), Some(m)) = (version.as_deref(), meta_version)
        && h != m
    {
        return refuse(
            StatusCode::BAD_REQUEST,
            mcpulse_wire::version::HEADER_MISMATCH,
            "Header mismatch: MCP-Protocol-Version differs from _meta's protocolVersion",
        );
    }
    let modern = session.is_none()
        && (version.as_deref() == Some(mcpulse_wire::version::MODERN)
            || meta_version == Some(mcpulse_wire::version::MODERN));
    if modern && let Some(refused) = standard_headers(&parts.headers, &message) {
        return refused;
    }
    let accept = header_str(&parts.headers, header::ACCEPT)
        .unwrap_or("")
        .to_ascii_lowercase();
    let sse = accept.contains("text/event-stream") || accept.contains("*/*");
    let peer = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let own_probe = crate::checks::is_own_probe(&parts.headers, peer);
    up.post(
        stdio::Post {
            message,
            session,
            sse,
            modern,
            own_probe,
        },
        door.health_tool.as_deref(),
    )
    .await
}

/// 2026-07-28's standard headers against the body: an `Mcp-Method` that is not the body's
/// method, or an `Mcp-Name` that is not its `params.name` / `params.uri`, is 400 `-32020` (a
/// stdio child never sees headers, so the door checks them). A missing header passes: the
/// body is what is relayed, and older 2026 drafts' clients do not send them.
fn standard_headers(
    headers: &HeaderMap,
    message: &serde_json::Map<String, Value>,
) -> Option<Response> {
    let mismatch = |what: &str| {
        Some(refuse(
            StatusCode::BAD_REQUEST,
            mcpulse_wire::version::HEADER_MISMATCH,
            &format!("Header mismatch: {what} differs from the body"),
        ))
    };
    let method = message.get("method").and_then(Value::as_str);
    if let Some(h) = header_str(headers, names::MCP_METHOD)
        && method.is_some_and(|m| m != h)
    {
        return mismatch("Mcp-Method");
    }
    if let Some(h) = header_str(headers, names::MCP_NAME) {
        let params = message.get("params");
        let name = params
            .and_then(|p| p.get("name").or_else(|| p.get("uri")))
            .and_then(Value::as_str);
        // Non-ASCII values travel as `=?base64?…?=`: compared only when plain.
        if !h.starts_with("=?base64?") && name.is_some_and(|n| n != h) {
            return mismatch("Mcp-Name");
        }
    }
    None
}

// ---- listeners -----------------------------------------------------------------------------

/// A listener that counts connections into the metrics and turns Nagle off (a reply is one
/// small write: waiting for an ACK before sending it would add up to 40 ms).
/// The client's address, as the door's listener accepted it (axum implements `Connected` for
/// `SocketAddr` only on a plain `TcpListener`; [`Counted`] wraps one).
#[derive(Debug, Clone, Copy)]
struct Peer(SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, Counted>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, Counted>) -> Peer {
        Peer(*stream.remote_addr())
    }
}

///
/// `max_connections`: past it, a new connection is accepted, answered `503` with `Retry-After`
/// and closed, as Envoy's connection limit closes the ones past it (with a 503 first, so that
/// a client or a load balancer reads why and retries elsewhere or later, rather than waiting
/// unanswered in the kernel's backlog until its own connect timeout). See [`refuse_connection`].
struct Counted {
    inner: tokio::net::TcpListener,
    shared: Arc<Shared>,
    max: usize,
    /// Connections open now (each [`CountedStream`] holds one).
    open: Arc<std::sync::atomic::AtomicUsize>,
    /// Refusals still writing their 503 (at most [`MAX_REFUSING`]).
    refusing: Arc<std::sync::atomic::AtomicUsize>,
}

/// A connection, counted closed when dropped.
struct CountedStream {
    inner: tokio::net::TcpStream,
    shared: Arc<Shared>,
    open: Arc<std::sync::atomic::AtomicUsize>,
}

impl Drop for CountedStream {
    fn drop(&mut self) {
        self.open.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        self.shared.metrics.connection_closed();
    }
}

/// Refusals answered at once; past them a connection over the cap is closed without a word
/// (a flood must not get a task and a socket held per refused connection).
const MAX_REFUSING: usize = 64;
/// How long a refusal may take: writing the 503, then draining what the client sent.
const REFUSAL_TIME: Duration = Duration::from_secs(1);

/// A connection past `max_connections`: `503` with `Retry-After` and `Connection: close`, then
/// what the client sent is read and dropped (at most 64 KiB, [`REFUSAL_TIME`]) before closing,
/// so that the close does not reset the connection under the 503 before the client read it.
fn refuse_connection(
    stream: tokio::net::TcpStream,
    max: usize,
    refusing: &Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if refusing.fetch_add(1, Ordering::AcqRel) >= MAX_REFUSING {
        refusing.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let refusing = refusing.clone();
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message":
        format!("mcpulse gateway: all {max} connections are in use (max_connections); retry later")}})
    .to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: {RETRY_AFTER_SECS}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tokio::spawn(async move {
        let mut stream = stream;
        let _ = tokio::time::timeout(REFUSAL_TIME, async {
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body.as_bytes()).await?;
            stream.shutdown().await?;
            let mut sink = [0u8; 4096];
            let mut left = 64usize << 10;
            while left > 0 {
                let n = stream.read(&mut sink).await?;
                if n == 0 {
                    break;
                }
                left = left.saturating_sub(n);
            }
            Ok::<(), std::io::Error>(())
        })
        .await;
        refusing.fetch_sub(1, Ordering::AcqRel);
    });
}

impl axum::serve::Listener for Counted {
    type Io = CountedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (CountedStream, SocketAddr) {
        use std::sync::atomic::Ordering;
        loop {
            let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
            if self.open.fetch_add(1, Ordering::AcqRel) >= self.max {
                self.open.fetch_sub(1, Ordering::AcqRel);
                self.shared.metrics.connection_refused();
                refuse_connection(stream, self.max, &self.refusing);
                continue;
            }
            let _ = stream.set_nodelay(true);
            self.shared.metrics.connection_opened();
            return (
                CountedStream {
                    inner: stream,
                    shared: self.shared.clone(),
                    open: self.open.clone(),
                },
                addr,
            );
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

impl tokio::io::AsyncRead for CountedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for CountedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// The gateway, serving: where it listens, and how to stop it.
pub struct Running {
    /// `/mcp`'s bound address (the health endpoints' too, unless `health_addr`).
    pub addr: SocketAddr,
    pub health_addr: Option<SocketAddr>,
    pub upstream: Upstream,
    stop: watch::Sender<bool>,
    servers: JoinSet<()>,
    /// The health side's tasks (event-loop ticker, readiness prober, dependency checks):
    /// stopped when this is dropped.
    _health: crate::health::Running,
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, StartError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Listen { addr, source })
}

/// Binds the listeners and starts serving `/mcp` (and the health endpoints, on the same
/// listener or `health_listen`). Call from a runtime whose threads live as long as it: the
/// main thread of a single-threaded one (block_on), or a multi-threaded one's workers; stdio
/// children are forked from them, and their parent-death signal is per thread (see
/// [`stdio`]). Never from a blocking-pool thread, which may exit while its child runs.
pub async fn start(gateway: &Gateway, shared: Arc<Shared>) -> Result<Running, StartError> {
    let listener = bind(gateway.listen).await?;
    let addr = listener.local_addr().map_err(|source| StartError::Listen {
        addr: gateway.listen,
        source,
    })?;
    let health_listener = match gateway.health_listen {
        Some(a) => Some(bind(a).await?),
        None => None,
    };
    shared.set_policies(gateway.policies.clone());
    let upstream = match &gateway.upstream {
        config::Upstream::Stdio(s) => Upstream::Stdio(stdio::StdioUpstream::new(
            (**s).clone(),
            stdio::Limits {
                max_sessions: gateway.max_sessions,
                idle_timeout: gateway.session_idle_timeout,
                pool: gateway.stateless_pool,
                keepalive: gateway.streams.keepalive,
            },
            shared.clone(),
        )),
        config::Upstream::Http(h) => {
            let up = Arc::new(http::HttpUpstream::new((**h).clone(), shared.clone()));
            // Dial once now: the process state is Up (or reconnecting) before any client.
            let warm = up.clone();
            tokio::spawn(async move { warm.warm_up().await });
            Upstream::Http(up)
        }
    };
    let door = Arc::new(Door {
        settings: gateway.door.clone(),
        listen: addr,
        upstream: upstream.clone(),
        health_tool: gateway.health_tool.clone(),
    });
    let (stop, stopped) = watch::channel(false);
    let until = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mut app = router(door);
    let health = crate::health::router(shared.clone());
    let mut servers = JoinSet::new();
    let mut health_addr = None;
    match health_listener {
        None => app = app.merge(health),
        Some(l) => {
            health_addr = l.local_addr().ok();
            // Probes' connections are not clients': not counted.
            let serve = axum::serve(l, health).with_graceful_shutdown(until(stopped.clone()));
            servers.spawn(async move {
                let _ = serve.await;
            });
        }
    }
    shared
        .thresholds
        .configure(gateway.streams.thresholds.clone());
    let shared_for_health = shared.clone();
    let counted = Counted {
        inner: listener,
        shared,
        max: gateway.streams.max_connections,
        open: Arc::default(),
        refusing: Arc::default(),
    };
    // With the peer's address: the gateway's own probes are told apart by it (loopback only).
    let serve = axum::serve(counted, app.into_make_service_with_connect_info::<Peer>())
        .with_graceful_shutdown(until(stopped));
    servers.spawn(async move {
        let _ = serve.await;
    });
    let settings = health_settings(gateway, addr);
    let mut settings = settings;
    if let Upstream::Stdio(up) = &upstream {
        // `tool` checks call over the readiness session: probing /mcp would spawn a child.
        settings.session = Some(crate::checks::Session(Arc::new(stdio::ReadinessTools(
            Arc::downgrade(up),
        ))));
        up.start_readiness(stdio::Readiness {
            interval: settings.readiness_interval,
            timeout: settings.readiness_timeout,
            own_tool: settings.own_tool.clone(),
        });
    }
    let health = crate::health::start(settings, shared_for_health);
    Ok(Running {
        addr,
        health_addr,
        upstream,
        stop,
        servers,
        _health: health,
    })
}

/// The health side's settings. HTTP upstream: the readiness probe goes through the gateway's
/// own `/mcp` on loopback (the whole path a client takes), so `/readyz` passes only when a
/// client could really be served. Stdio upstream: no prober (each probe would open a legacy
/// session, i.e. spawn a child, and take a `max_sessions` slot); the readiness session
/// ([`stdio::StdioUpstream::start_readiness`]) observes the protocol on a child of its own.
/// `tool` dependency checks go over that readiness child too ([`stdio::ReadinessTools`],
/// set in [`start`]); over an HTTP upstream they probe `mcp`.
fn health_settings(gateway: &Gateway, addr: SocketAddr) -> crate::health::Settings {
    let loopback = match addr.ip() {
        ip if ip.is_unspecified() && addr.is_ipv6() => {
            SocketAddr::new(std::net::Ipv6Addr::LOCALHOST.into(), addr.port())
        }
        ip if ip.is_unspecified() => {
            SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), addr.port())
        }
        _ => addr,
    };
    let mcp = mcpulse_probe::Target::http(&format!("http://{loopback}/mcp"));
    if let Err(e) = &mcp {
        tracing::error!(error = %e, "the readiness probe has no target: /readyz stays failing");
    }
    crate::health::Settings {
        upstream: match gateway.upstream {
            config::Upstream::Stdio(_) => crate::health::UpstreamKind::Stdio,
            config::Upstream::Http(_) => crate::health::UpstreamKind::Http,
        },
        min_tools: gateway.min_tools,
        readiness_interval: gateway.readiness_interval,
        readiness_timeout: gateway.readiness_timeout,
        mcp: mcp.ok(),
        probe_protocol: matches!(gateway.upstream, config::Upstream::Http(_)),
        own_tool: gateway.health_tool.clone(),
        checks: gateway.checks.clone(),
        ..crate::health::Settings::default()
    }
}

/// How long open connections get to finish after the children stopped.
const DRAIN: Duration = Duration::from_secs(3);

impl Running {
    /// Stops: every stdio child through the graceful sequence (its requests answered with an
    /// error, its streams closed), then the listeners, letting open responses finish (at most
    /// [`DRAIN`]).
    pub async fn shutdown(mut self) {
        if let Upstream::Stdio(up) = &self.upstream {
            up.shutdown().await;
        }
        let _ = self.stop.send(true);
        let drained = tokio::time::timeout(DRAIN, async {
            while self.servers.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            self.servers.abort_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_variants_of_a_listed_name_share_one_threshold_window() {
        let shared = Shared::default();
        let listed = "t".repeat(300);
        shared.metrics.learn_tools(&[&listed]);
        for suffix in ["a", "b", &"c".repeat(100_000)] {
            let name = format!("{listed}{suffix}");
            record(
                &shared,
                "tools/call",
                Some(&name),
                tokio::time::Instant::now(),
                Outcome::Ok,
                false,
            );
        }
        let placed = shared.thresholds.placed();
        assert_eq!(placed.len(), 1, "{placed:?}");
        assert!(placed[0].chars().count() <= 200, "{}", placed[0].len());
    }

    #[test]
    fn the_health_tool_is_added_once_on_the_last_page() {
        let mut page = json!({"tools": [{"name": "a"}], "nextCursor": "2"});
        inject_health_tool(&mut page, "health_check");
        assert_eq!(page["tools"].as_array().map(Vec::len), Some(1));
        let mut last = json!({"tools": [{"name": "a"}]});
        assert!(inject_health_tool(&mut last, "health_check"));
        assert!(inject_health_tool(&mut last, "health_check"));
        assert_eq!(last["tools"].as_array().map(Vec::len), Some(2));
        assert_eq!(last["tools"][1]["name"], "health_check");
        // An upstream tool of the same name is replaced: the gateway answers that name.
        let mut same = json!({"tools": [{"name": "health_check", "description": "the upstream's"}, {"name": "a"}]});
        assert!(inject_health_tool(&mut same, "health_check"));
        assert_eq!(same["tools"].as_array().map(Vec::len), Some(2));
        assert_eq!(same["tools"][0]["name"], "a");
        assert_ne!(same["tools"][1]["description"], "the upstream's");
        let mut not_a_list = json!({"content": []});
        assert!(!inject_health_tool(&mut not_a_list, "health_check"));
        assert_eq!(not_a_list, json!({"content": []}));
    }

    /// The next frame of `body` and when it came (paused time: the clock jumps to each timer).
    async fn frame_at(body: &mut ChannelBody, t0: tokio::time::Instant) -> Option<(u64, Bytes)> {
        use http_body_util::BodyExt;
        let frame = body.frame().await?.ok()?;
        let ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
        Some((ms, frame.into_data().ok()?))
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_stream_gets_a_comment_every_interval_and_events_push_it_back() {
        let comment = Bytes::from_static(mcpulse_policy::keepalive::COMMENT);
        let (tx, rx) = mpsc::channel(4);
        let t0 = tokio::time::Instant::now();
        let mut body = ChannelBody::new(rx, Some(Duration::from_secs(15)));
        assert_eq!(
            frame_at(&mut body, t0).await,
            Some((15_000, comment.clone()))
        );
        assert_eq!(
            frame_at(&mut body, t0).await,
            Some((30_000, comment.clone()))
        );
        // An event 10 s later: the next comment is due 15 s after it.
        tokio::time::advance(Duration::from_secs(10)).await;
        let event = Bytes::from_static(b"event: message\ndata: {}\n\n");
        tx.send(event.clone()).await.ok();
        assert_eq!(frame_at(&mut body, t0).await, Some((40_000, event)));
        assert_eq!(frame_at(&mut body, t0).await, Some((55_000, comment)));
        // Ended: no comment after the end.
        drop(tx);
        assert_eq!(frame_at(&mut body, t0).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn keepalive_off_sends_no_comment() {
        let (tx, rx) = mpsc::channel(4);
        let t0 = tokio::time::Instant::now();
        let mut body = ChannelBody::new(rx, None);
        let event = Bytes::from_static(b"event: message\ndata: {}\n\n");
        let send = event.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(120)).await;
            tx.send(send).await.ok();
        });
        assert_eq!(frame_at(&mut body, t0).await, Some((120_000, event)));
        assert_eq!(frame_at(&mut body, t0).await, None);
    }

    #[test]
    fn session_ids_are_32_hex_digits_and_differ() {
        let (a, b) = (session_id(), session_id());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
