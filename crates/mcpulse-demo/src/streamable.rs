//! The Streamable HTTP demo servers: one implementation, shaped per server by a [`Profile`]
//! (which eras it speaks, whether replies come as SSE, how slow its handshake is, which gate
//! stands in front of it, which tools it lists).
//!
//! The endpoint is `/mcp`:
//! - `POST`, modern (2026-07-28, stateless): `_meta` and the `MCP-Protocol-Version` /
//!   `Mcp-Method` (/ `Mcp-Name`) headers are checked on every request (400 -32602 for a bad
//!   `_meta`, 400 -32020 for a header mismatch, 400 -32022 for an unsupported version, 404 -32601
//!   for an unknown method), results carry `resultType`, `ttlMs`, `cacheScope` and `serverInfo`.
//! - `POST`, legacy (2025-03-26 … 2025-11-25): `initialize` negotiates a version and mints an
//!   `Mcp-Session-Id`; every later request must carry it (400 without, 404 for an unknown one,
//!   like the TS SDK v1, whose error shapes are followed); `notifications/*` get 202.
//! - `DELETE` ends a legacy session (200; 404 unknown); `GET` is 405 (no standalone stream).
//!
//! Before any of that: the gate (`flaky`'s 503), the DNS-rebinding guard (403), and the bearer
//! gate (`auth-gated`'s 401), in that order.

use crate::auth;
use crate::mcp::{self, Catalogue, Incoming};
use crate::schedule::{DriftSwitch, FlakySwitch, ShiftStage, ShiftSwitch};
use crate::web;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How one Streamable HTTP demo server behaves.
#[derive(Debug, Clone)]
pub struct Profile {
    /// `serverInfo.name`.
    pub name: &'static str,
    pub title: &'static str,
    pub instructions: &'static str,
    /// Speaks 2026-07-28 (`server/discover`, stateless requests).
    pub modern: bool,
    /// Speaks the legacy `initialize` handshake with sessions.
    pub legacy: bool,
    /// Legacy replies come as an SSE stream (priming event first) rather than JSON.
    pub sse_replies: bool,
    /// How long `initialize` takes.
    pub initialize_delay: Duration,
    pub tools: Tools,
    pub gate: Gate,
    /// `ttlMs` of modern results.
    pub ttl_ms: u64,
}

/// Where the tools come from.
#[derive(Debug, Clone)]
pub enum Tools {
    Basic,
    Drifting(Arc<DriftSwitch>),
}

impl Tools {
    fn catalogue(&self) -> Catalogue {
        match self {
            Tools::Basic => Catalogue::Basic,
            Tools::Drifting(s) => Catalogue::Drifting(s.stage()),
        }
    }
}

/// What stands in front of the MCP endpoint.
#[derive(Debug, Clone)]
pub enum Gate {
    Open,
    /// 503 to everything while the switch is down.
    Flaky(Arc<FlakySwitch>),
    /// 401 without `Authorization: Bearer` [`crate::DEMO_TOKEN`]; `base` is the server's own
    /// `http://127.0.0.1:<port>`, where its OAuth metadata lives.
    Bearer {
        base: String,
    },
    /// `shifting`: by stage, steady, an older protocol revision, no DNS-rebinding guard, or the
    /// bearer gate (with its metadata at `base`, as for `Bearer`).
    Shifting {
        switch: Arc<ShiftSwitch>,
        base: String,
    },
}

impl Gate {
    /// The shifting server's stage now; `Steady` for every other server.
    fn shift(&self) -> ShiftStage {
        match self {
            Gate::Shifting { switch, .. } => switch.stage(),
            _ => ShiftStage::Steady,
        }
    }
}

/// Legacy session ids. Bounded: the oldest is forgotten first (clients that never `DELETE`
/// cannot grow it without limit). The negotiated version is not kept: like the TS SDK v1, a
/// request's `MCP-Protocol-Version` is only checked to be a supported revision.
#[derive(Debug, Default)]
struct Sessions {
    inner: Mutex<VecDeque<String>>,
}

const MAX_SESSIONS: usize = 1024;

impl Sessions {
    fn insert(&self, id: String) {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if s.len() >= MAX_SESSIONS {
            s.pop_front();
        }
        s.push_back(id);
    }
    fn contains(&self, id: &str) -> bool {
        let s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        s.iter().any(|k| k == id)
    }
    fn remove(&self, id: &str) -> bool {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let before = s.len();
        s.retain(|k| k != id);
        s.len() != before
    }
}

struct Server {
    profile: Profile,
    sessions: Sessions,
    events: AtomicU64,
}

/// The server's routes: `/mcp`, plus the OAuth metadata documents behind a bearer gate.
pub fn router(profile: Profile) -> Router {
    let base = match &profile.gate {
        Gate::Bearer { base } | Gate::Shifting { base, .. } => Some(base.clone()),
        _ => None,
    };
    let server = Arc::new(Server {
        profile,
        sessions: Sessions::default(),
        events: AtomicU64::new(0),
    });
    let mcp = Router::new()
        .route("/mcp", post(on_post).delete(on_delete).get(on_get))
        .with_state(server);
    match base {
        Some(base) => mcp.merge(auth::router(&base)),
        None => mcp,
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// An error reply with id `null`, as the TS SDK v1 sends for transport-level refusals.
fn refuse(status: StatusCode, code: i64, message: &str) -> Response {
    web::json(status, &mcp::error(&Value::Null, code, message, None))
}

impl Server {
    /// The gates every method passes: flaky, the rebinding guard, bearer auth.
    fn gates(&self, headers: &HeaderMap) -> Option<Response> {
        if let Gate::Flaky(switch) = &self.profile.gate
            && !switch.is_up()
        {
            return Some(web::with_header(
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "mcpulse demo: `flaky` is in the down phase of its cycle\n",
                )
                    .into_response(),
                "retry-after",
                "30",
            ));
        }
        let stage = self.profile.gate.shift();
        if stage != ShiftStage::OriginOpen
            && let Some(r) = web::foreign(headers)
        {
            return Some(r);
        }
        match &self.profile.gate {
            Gate::Bearer { base } => auth::check(headers, base),
            Gate::Shifting { base, .. } if stage == ShiftStage::Gated => auth::check(headers, base),
            _ => None,
        }
    }

    fn next_event(&self) -> u64 {
        self.events.fetch_add(1, Ordering::Relaxed)
    }

    /// A legacy reply: JSON, or an SSE stream with a priming event.
    fn legacy_reply(&self, message: &Value) -> Response {
        if self.profile.sse_replies {
            web::sse_reply(StatusCode::OK, self.next_event(), message)
        } else {
            web::json(StatusCode::OK, message)
        }
    }

    fn looks_modern(&self, headers: &HeaderMap, method: &str, params: &Value) -> bool {
        method == "server/discover"
            || params
                .get("_meta")
                .is_some_and(|m| m.get(mcp::META_VERSION).is_some())
            || header(headers, "mcp-protocol-version") == Some(mcp::MODERN)
    }

    async fn request(
        &self,
        headers: &HeaderMap,
        id: Value,
        method: &str,
        params: Value,
    ) -> Response {
        if self.profile.modern && self.looks_modern(headers, method, &params) {
            return self.modern(headers, &id, method, &params);
        }
        if !self.profile.legacy {
            // A 2026-only server: a legacy request lacks the required `_meta` (2026-07-28
            // §Versioning says to name the supported versions, as legacy clients cannot
            // fall forward).
            return web::json(
                StatusCode::BAD_REQUEST,
                &mcp::error(
                    &id,
                    mcp::INVALID_PARAMS,
                    "Invalid params: missing _meta io.modelcontextprotocol/protocolVersion; this server speaks only 2026-07-28",
                    Some(json!({ "supported": [mcp::MODERN] })),
                ),
            );
        }
        if method == "initialize" {
            if header(headers, "mcp-session-id").is_some_and(|s| self.sessions.contains(s)) {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    mcp::INVALID_REQUEST,
                    "Invalid Request: Server already initialized",
                );
            }
            return self.initialize(&id, &params).await;
        }
        let Some(sid) = header(headers, "mcp-session-id") else {
            return refuse(
                StatusCode::BAD_REQUEST,
                mcp::SERVER_ERROR,
                "Bad Request: Server not initialized",
            );
        };
        if !self.sessions.contains(sid) {
            return refuse(
                StatusCode::NOT_FOUND,
                mcp::SESSION_NOT_FOUND,
                "Session not found",
            );
        }
        if let Some(v) = header(headers, "mcp-protocol-version")
            && !mcp::LEGACY.contains(&v)
        {
            return refuse(
                StatusCode::BAD_REQUEST,
                mcp::SERVER_ERROR,
                &format!(
                    "Bad Request: Unsupported protocol version (supported versions: {})",
                    mcp::LEGACY.join(", ")
                ),
            );
        }
        let reply = mcp::legacy_answer(&id, method, &params, self.profile.tools.catalogue(), true);
        self.legacy_reply(&reply)
    }

    async fn initialize(&self, id: &Value, params: &Value) -> Response {
        if !self.profile.initialize_delay.is_zero() {
            tokio::time::sleep(self.profile.initialize_delay).await;
        }
        let requested = params.get("protocolVersion").and_then(Value::as_str);
        let supported = match self.profile.gate.shift() {
            ShiftStage::OlderProtocol => &mcp::LEGACY[1..],
            _ => mcp::LEGACY,
        };
        let version = mcp::negotiate(requested, supported);
        let sid = web::session_id();
        self.sessions.insert(sid.clone());
        let info = mcp::server_info(self.profile.name, self.profile.title, true);
        let result = mcp::initialize_result(version, info, self.profile.instructions);
        let reply = self.legacy_reply(&mcp::result(id, result));
        web::with_header(reply, "mcp-session-id", &sid)
    }

    /// A 2026-07-28 request: `_meta` and headers checked, then answered statelessly.
    fn modern(&self, headers: &HeaderMap, id: &Value, method: &str, params: &Value) -> Response {
        let bad = |status: StatusCode, code: i64, message: &str, data: Option<Value>| {
            web::json(status, &mcp::error(id, code, message, data))
        };
        let meta = params.get("_meta");
        let version = meta
            .and_then(|m| m.get(mcp::META_VERSION))
            .and_then(Value::as_str);
        let caps = meta
            .and_then(|m| m.get(mcp::META_CAPABILITIES))
            .filter(|c| c.is_object());
        let (Some(version), Some(_)) = (version, caps) else {
            return bad(
                StatusCode::BAD_REQUEST,
                mcp::INVALID_PARAMS,
                "Invalid params: _meta must carry io.modelcontextprotocol/protocolVersion and io.modelcontextprotocol/clientCapabilities",
                None,
            );
        };
        let header_version = header(headers, "mcp-protocol-version");
        if header_version != Some(version) {
            return bad(
                StatusCode::BAD_REQUEST,
                mcp::HEADER_MISMATCH,
                &format!(
                    "Header mismatch: MCP-Protocol-Version {:?} does not match _meta protocolVersion {version:?}",
                    header_version.unwrap_or("(missing)")
                ),
                None,
            );
        }
        let header_method = header(headers, "mcp-method");
        if header_method != Some(method) {
            return bad(
                StatusCode::BAD_REQUEST,
                mcp::HEADER_MISMATCH,
                &format!(
                    "Header mismatch: Mcp-Method {:?} does not match the method {method:?}",
                    header_method.unwrap_or("(missing)")
                ),
                None,
            );
        }
        if version != mcp::MODERN {
            return bad(
                StatusCode::BAD_REQUEST,
                mcp::UNSUPPORTED_PROTOCOL_VERSION,
                "Unsupported protocol version",
                Some(json!({ "supported": [mcp::MODERN], "requested": version })),
            );
        }
        let meta = json!({
            mcp::META_SERVER_INFO: mcp::server_info(self.profile.name, self.profile.title, true)
        });
        let cacheable = |mut r: Value| {
            r["resultType"] = json!("complete");
            r["ttlMs"] = json!(self.profile.ttl_ms);
            r["cacheScope"] = json!("public");
            r["_meta"] = meta.clone();
            r
        };
        let catalogue = self.profile.tools.catalogue();
        let result = match method {
            "server/discover" => {
                let mut supported = vec![mcp::MODERN];
                if self.profile.legacy {
                    supported.push(mcp::LEGACY[0]);
                }
                cacheable(json!({
                    "supportedVersions": supported,
                    "capabilities": { "tools": {} },
                    "instructions": self.profile.instructions,
                }))
            }
            "tools/list" => match params.get("cursor") {
                Some(Value::String(c)) if !c.is_empty() => {
                    return bad(StatusCode::OK, mcp::INVALID_PARAMS, "Invalid cursor", None);
                }
                _ => cacheable(json!({ "tools": mcp::tools(catalogue, true) })),
            },
            "tools/call" => {
                let name = params.get("name").and_then(Value::as_str);
                if header(headers, "mcp-name") != name {
                    return bad(
                        StatusCode::BAD_REQUEST,
                        mcp::HEADER_MISMATCH,
                        "Header mismatch: Mcp-Name does not match params.name",
                        None,
                    );
                }
                match mcp::call_tool(catalogue, params) {
                    Ok(mut r) => {
                        r["resultType"] = json!("complete");
                        r["_meta"] = meta;
                        r
                    }
                    Err((code, message)) => return bad(StatusCode::OK, code, &message, None),
                }
            }
            _ => {
                return bad(
                    StatusCode::NOT_FOUND,
                    mcp::METHOD_NOT_FOUND,
                    &format!("Method not found: {method}"),
                    None,
                );
            }
        };
        web::json(StatusCode::OK, &mcp::result(id, result))
    }
}

/// `Accept` must allow both JSON and SSE, and the body must be JSON (TS SDK v1: 406 / 415).
/// Missing headers are let through, so that `curl -d` works.
fn negotiation(headers: &HeaderMap) -> Option<Response> {
    if let Some(accept) = header(headers, "accept") {
        let a = accept.to_ascii_lowercase();
        let any = a.contains("*/*");
        if !(any || (a.contains("application/json") && a.contains("text/event-stream"))) {
            return Some(refuse(
                StatusCode::NOT_ACCEPTABLE,
                mcp::SERVER_ERROR,
                "Not Acceptable: Client must accept both application/json and text/event-stream",
            ));
        }
    }
    if let Some(ct) = header(headers, "content-type")
        && !ct.to_ascii_lowercase().starts_with("application/json")
    {
        return Some(refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            mcp::SERVER_ERROR,
            "Unsupported Media Type: Content-Type must be application/json",
        ));
    }
    None
}

async fn on_post(State(s): State<Arc<Server>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(r) = s.gates(&headers).or_else(|| negotiation(&headers)) {
        return r;
    }
    match mcp::parse(&body) {
        Incoming::Invalid(e) => web::json(StatusCode::BAD_REQUEST, &e),
        Incoming::Response => web::empty(StatusCode::ACCEPTED),
        Incoming::Notification { .. } => {
            // Legacy notifications belong to a session; modern ones need none.
            match header(&headers, "mcp-session-id") {
                Some(sid) if s.profile.legacy && !s.sessions.contains(sid) => refuse(
                    StatusCode::NOT_FOUND,
                    mcp::SESSION_NOT_FOUND,
                    "Session not found",
                ),
                _ => web::empty(StatusCode::ACCEPTED),
            }
        }
        Incoming::Request { id, method, params } => s.request(&headers, id, &method, params).await,
    }
}

async fn on_delete(State(s): State<Arc<Server>>, headers: HeaderMap) -> Response {
    if let Some(r) = s.gates(&headers) {
        return r;
    }
    if !s.profile.legacy {
        return web::with_header(web::empty(StatusCode::METHOD_NOT_ALLOWED), "allow", "POST");
    }
    match header(&headers, "mcp-session-id") {
        None => refuse(
            StatusCode::BAD_REQUEST,
            mcp::SERVER_ERROR,
            "Bad Request: Mcp-Session-Id header is required",
        ),
        Some(sid) if s.sessions.remove(sid) => web::empty(StatusCode::OK),
        Some(_) => refuse(
            StatusCode::NOT_FOUND,
            mcp::SESSION_NOT_FOUND,
            "Session not found",
        ),
    }
}

/// No standalone GET stream: 405, which both eras allow.
async fn on_get(State(s): State<Arc<Server>>, headers: HeaderMap) -> Response {
    if let Some(r) = s.gates(&headers) {
        return r;
    }
    let allow = if s.profile.legacy {
        "POST, DELETE"
    } else {
        "POST"
    };
    web::with_header(web::empty(StatusCode::METHOD_NOT_ALLOWED), "allow", allow)
}
