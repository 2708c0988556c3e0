//! Ready-made scripts for [`FakeHttp`](crate::http::FakeHttp): servers that speak MCP well in
//! each era and transport, and a few that are up but gated.
//!
//! The healthy fakes are strict where the spec is strict, so a test passing against them says
//! something about what mcpulse sent: the modern fake rejects a request whose
//! `MCP-Protocol-Version`/`Mcp-Method` headers disagree with its body (400, `-32020`), and the
//! legacy fake rejects a request without the session id or the negotiated protocol version.
//! One-off misbehaviour (hang, drip, HTML, 5xx...) is easier to read inline in a test as a
//! closure over [`Reply`].

use crate::http::{Piece, Reply, Request, Script};
use crate::mcp::{self, LEGACY, MODERN};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// The session id the legacy Streamable HTTP fake hands out.
pub const LEGACY_SESSION: &str = "fake-session-5f1e2d";
/// The session id the dual-era fake hands out to a legacy `initialize`.
pub const DUAL_ERA_SESSION: &str = "fake-dual-era-session-77";
/// The POST endpoint the legacy HTTP+SSE fake announces (relative, as most servers send it).
pub const SSE_ENDPOINT: &str = "/message?sessionId=fake-sse-9";
/// The path of the protected-resource metadata the 401 fake advertises.
pub const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";
/// The authorization server its metadata names: a loopback port where nothing listens, so that
/// a probe with its security checks on (which follows the metadata to the authorization
/// server's own metadata) is refused at once and never looks up or contacts a host off this
/// machine. (See [`crate::posture::OAuth`] for a server whose metadata can be followed.)
pub const AUTHORIZATION_SERVER: &str = "https://127.0.0.1:1";

fn bad_request(id: &Value, code: i64, message: &str) -> Reply {
    Reply::json(400, &mcp::error(id, code, message))
}

/// A request's id, or `null`.
fn id_of(req: &Request) -> Value {
    req.rpc_id().unwrap_or(Value::Null)
}

/// A 2026-07-28 server, stateless. `tools/list` call `k` (from 0) answers with one tool
/// `tool_k` and `next_cursors[k]` as its `nextCursor` (the last entry repeats). A legacy
/// `initialize` gets `400` with `-32022` unless `dual_era`, in which case it gets a legacy
/// session (and `DELETE` ends it).
pub fn modern(dual_era: bool, next_cursors: Vec<Option<&'static str>>) -> Script {
    let calls = Mutex::new(0usize);
    Arc::new(move |req: &Request| {
        match req.method.as_str() {
            "POST" => {}
            "DELETE" if dual_era && req.header("mcp-session-id") == Some(DUAL_ERA_SESSION) => {
                return Reply::status(200);
            }
            "DELETE" => return Reply::status(405).header("allow", "POST"),
            _ => return Reply::status(405).header("allow", "POST"),
        }
        let id = id_of(req);
        let Some(method) = req.rpc_method() else {
            return bad_request(&Value::Null, -32700, "Parse error");
        };
        if req.header("mcp-protocol-version") != Some(MODERN) {
            return match method.as_str() {
                "initialize" if dual_era => {
                    Reply::json(200, &mcp::result(&id, mcp::initialize_result(LEGACY)))
                        .header("mcp-session-id", DUAL_ERA_SESSION)
                }
                "notifications/initialized" if dual_era => Reply::accepted(),
                _ => Reply::json(
                    400,
                    &json!({
                        "jsonrpc": "2.0", "id": id,
                        "error": { "code": -32022, "message": "Unsupported protocol version",
                                   "data": { "supported": [MODERN], "requested": LEGACY } }
                    }),
                ),
            };
        }
        if req.header("mcp-method") != Some(method.as_str()) {
            return bad_request(
                &id,
                -32020,
                "Mcp-Method header does not match the request body",
            );
        }
        let meta_version = req.json().and_then(|b| {
            b.pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
                .cloned()
        });
        if meta_version != Some(json!(MODERN)) {
            return bad_request(&id, -32602, "missing or mismatched _meta protocolVersion");
        }
        match method.as_str() {
            "server/discover" => Reply::json(200, &mcp::result(&id, mcp::discover_result())),
            "tools/list" => {
                let k = {
                    let mut c = calls.lock().unwrap_or_else(|p| p.into_inner());
                    *c += 1;
                    *c - 1
                };
                let next = next_cursors
                    .get(k)
                    .or(next_cursors.last())
                    .copied()
                    .flatten();
                let tools = mcp::tools(&[&format!("tool_{k}")]);
                Reply::json(
                    200,
                    &mcp::result(&id, mcp::tools_list_result(tools, next, true)),
                )
            }
            _ => Reply::json(404, &mcp::error(&id, -32601, "Method not found")),
        }
    })
}

/// A 2026-07-28 server (modern only) whose `tools/list` call `k` (from 0) answers with the
/// items `pages[k]`, given as the JSON text inside the `tools` array (the last page repeats),
/// and a `nextCursor` on every page but the last. The text is sent as given, so it can be any
/// shape, valid or not: many tiny tools, schemas nested to the limit, a number out of range.
pub fn tools_pages(pages: Vec<String>) -> Script {
    let calls = std::sync::atomic::AtomicUsize::new(0);
    Arc::new(move |req: &Request| {
        let id = id_of(req);
        match req.rpc_method().as_deref() {
            Some("server/discover") => Reply::json(200, &mcp::result(&id, mcp::discover_result())),
            Some("tools/list") => {
                let k = calls
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                    .min(pages.len().saturating_sub(1));
                let next = if k + 1 < pages.len() {
                    format!(r#","nextCursor":"c{k}""#)
                } else {
                    String::new()
                };
                let items = pages.get(k).map(String::as_str).unwrap_or_default();
                let body = format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete","ttlMs":0,"cacheScope":"public"{next},"tools":[{items}]}}}}"#
                );
                Reply::bytes(200, "application/json", body)
            }
            _ => Reply::json(
                400,
                &mcp::error(&id, -32022, "Unsupported protocol version"),
            ),
        }
    })
}

/// As many items made by `item(i)` (i = 0, 1, ...) as fit, comma-separated, in `bytes` of
/// text: a page of [`tools_pages`] filled to a size.
pub fn fill(bytes: usize, item: impl Fn(usize) -> String) -> String {
    let mut out = String::with_capacity(bytes);
    for i in 0.. {
        let next = item(i);
        let comma = usize::from(i > 0);
        if out.len() + comma + next.len() > bytes {
            break;
        }
        if comma == 1 {
            out.push(',');
        }
        out.push_str(&next);
    }
    out
}

/// How a server frames its replies to POSTs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `application/json`, one object.
    Json,
    /// `text/event-stream`: an empty priming event, a `notifications/progress`, then the reply.
    Sse,
}

fn framed(framing: Framing, msg: &Value) -> Reply {
    match framing {
        Framing::Json => Reply::json(200, msg),
        Framing::Sse => Reply::sse(vec![
            mcp::sse_event(None, Some("0"), ""),
            mcp::sse_event(
                Some("message"),
                Some("1"),
                &mcp::progress(1, 50).to_string(),
            ),
            mcp::sse_event(Some("message"), Some("2"), &msg.to_string()),
        ]),
    }
}

/// A legacy (2025-11-25) Streamable HTTP server with sessions, behaving like the TS SDK v1:
/// a request before `initialize` gets `400 -32000 "Server not initialized"` (id null); later
/// requests must carry the session id (else 400, or 404 for an unknown one) and the negotiated
/// `MCP-Protocol-Version` (else 400); `DELETE` ends the session; `GET` gets 405.
pub fn legacy_streamable(framing: Framing) -> Script {
    Arc::new(move |req: &Request| {
        let session = req.header("mcp-session-id");
        match (req.method.as_str(), session) {
            ("POST", _) => {}
            ("DELETE", Some(LEGACY_SESSION)) => return Reply::status(200),
            ("DELETE", _) => {
                return Reply::json(404, &mcp::error(&Value::Null, -32001, "Session not found"));
            }
            _ => return Reply::status(405).header("allow", "POST, DELETE"),
        }
        let id = id_of(req);
        let Some(method) = req.rpc_method() else {
            return bad_request(&Value::Null, -32700, "Parse error");
        };
        if method == "initialize" {
            return framed(framing, &mcp::result(&id, mcp::initialize_result(LEGACY)))
                .header("mcp-session-id", LEGACY_SESSION);
        }
        match session {
            None => {
                return bad_request(&Value::Null, -32000, "Bad Request: Server not initialized");
            }
            Some(LEGACY_SESSION) => {}
            Some(_) => {
                return Reply::json(404, &mcp::error(&Value::Null, -32001, "Session not found"));
            }
        }
        if req.header("mcp-protocol-version") != Some(LEGACY) {
            return bad_request(
                &Value::Null,
                -32000,
                "Bad Request: Unsupported protocol version",
            );
        }
        match method.as_str() {
            "notifications/initialized" => Reply::accepted(),
            "tools/list" => framed(
                framing,
                &mcp::result(
                    &id,
                    mcp::tools_list_result(mcp::tools(&["echo", "add"]), None, false),
                ),
            ),
            _ => framed(framing, &mcp::error(&id, -32601, "Method not found")),
        }
    })
}

/// Text a hostile server (or config) chooses: an OSC that sets the terminal's title, a CSI that
/// clears the screen, SGR colours, a newline that forges a `✔ healthy` line and a log line, the
/// one-byte C1 CSI (U+009B), a carriage return, a bidi override and a zero-width space.
pub const HOSTILE: &str = "evil\x1b]0;pwned\x07\x1b[2J\x1b[H\x1b[32m\n\
    ✔ healthy  forged\n2026-12-01T00:00:00Z  INFO alert target=prod kind=recovered\r\u{9b}31mred\u{202e}txt.exe\u{200b}";

/// A legacy (2025-11-25) Streamable HTTP server without sessions whose every string is
/// `text`: `serverInfo.name` and `.version`, its tool names (`text`, and `text` + `2`) and the
/// error message it answers other methods with (`server/discover` among them: 400, `-32601`).
/// It answers `initialize` with `protocol` as its `protocolVersion`, or, with `reject`, with a
/// JSON-RPC error whose message is `text`.
pub fn hostile(text: &'static str, protocol: &'static str, reject: bool) -> Script {
    Arc::new(move |req: &Request| {
        if req.method != "POST" {
            return Reply::status(405).header("allow", "POST");
        }
        let id = id_of(req);
        match req.rpc_method().as_deref() {
            Some("initialize") if reject => Reply::json(200, &mcp::error(&id, -32000, text)),
            Some("initialize") => Reply::json(
                200,
                &mcp::result(
                    &id,
                    json!({
                        "protocolVersion": protocol,
                        "capabilities": { "tools": { "listChanged": false } },
                        "serverInfo": { "name": text, "version": text },
                    }),
                ),
            ),
            Some("notifications/initialized") => Reply::accepted(),
            Some("tools/list") => {
                let second = format!("{text}2");
                Reply::json(
                    200,
                    &mcp::result(
                        &id,
                        mcp::tools_list_result(mcp::tools(&[text, &second]), None, false),
                    ),
                )
            }
            _ => bad_request(&id, -32601, text),
        }
    })
}

/// A legacy HTTP+SSE (2024-11-05) server at `/sse`: `POST /sse` gets 405; `GET /sse` opens a
/// stream that announces [`SSE_ENDPOINT`]; POSTs there get 202 and their replies arrive on the
/// stream as `event: message`.
pub fn legacy_sse() -> Script {
    let stream: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>> = Mutex::new(None);
    Arc::new(
        move |req: &Request| match (req.method.as_str(), req.path()) {
            ("GET", "/sse") => {
                let (tx, rx) = mpsc::unbounded_channel();
                *stream.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
                let endpoint = mcp::sse_event(Some("endpoint"), None, SSE_ENDPOINT);
                Reply::chunked(
                    200,
                    "text/event-stream",
                    vec![
                        Piece::Data(b": connected\n\n".to_vec()),
                        Piece::Data(endpoint.into_bytes()),
                        Piece::Channel(rx),
                    ],
                )
            }
            ("POST", "/message") if req.target == SSE_ENDPOINT => {
                let guard = stream.lock().unwrap_or_else(|p| p.into_inner());
                let Some(tx) = guard.as_ref() else {
                    return Reply::bytes(400, "text/plain", "no stream open for this session");
                };
                let id = id_of(req);
                let reply = match req.rpc_method().as_deref() {
                    Some("initialize") => {
                        Some(mcp::result(&id, mcp::initialize_result("2024-11-05")))
                    }
                    Some("tools/list") => Some(mcp::result(
                        &id,
                        mcp::tools_list_result(mcp::tools(&["legacy_echo"]), None, false),
                    )),
                    Some(m) if m.starts_with("notifications/") => None,
                    _ => Some(mcp::error(&id, -32601, "Method not found")),
                };
                if let Some(r) = reply {
                    let _ =
                        tx.send(mcp::sse_event(Some("message"), None, &r.to_string()).into_bytes());
                }
                Reply::accepted()
            }
            ("POST", "/sse") => {
                Reply::bytes(405, "text/plain", "Method Not Allowed").header("allow", "GET")
            }
            _ => Reply::bytes(404, "text/plain", "Not Found"),
        },
    )
}

/// A server behind OAuth: every MCP request gets `401`. With `advertise_metadata`, the
/// challenge is `Bearer resource_metadata="<absolute URL>", scope="mcp:tools"` and the metadata
/// document (RFC 9728) is served at [`RESOURCE_METADATA_PATH`]; without it, a bare 401.
pub fn unauthorized(advertise_metadata: bool) -> Script {
    Arc::new(move |req: &Request| {
        if advertise_metadata && req.method == "GET" && req.path() == RESOURCE_METADATA_PATH {
            return Reply::json(
                200,
                &json!({
                    "resource": req.url_for("/mcp"),
                    "authorization_servers": [AUTHORIZATION_SERVER],
                    "scopes_supported": ["mcp:tools"],
                    "bearer_methods_supported": ["header"],
                }),
            );
        }
        let reply = Reply::json(
            401,
            &json!({ "error": "invalid_token", "error_description": "no valid bearer token" }),
        );
        if advertise_metadata {
            let challenge = format!(
                r#"Bearer resource_metadata="{}", scope="mcp:tools""#,
                req.url_for(RESOURCE_METADATA_PATH)
            );
            reply.header("www-authenticate", &challenge)
        } else {
            reply
        }
    })
}

/// A server that changes: it answers with `scripts[k]`, `k` being what `current` holds when a
/// request arrives (the last script past the end). A test moves `current` between probes: a
/// legacy server upgraded to the modern revision, and rolled back.
pub fn shifting(scripts: Vec<Script>, current: Arc<std::sync::atomic::AtomicUsize>) -> Script {
    Arc::new(move |req: &Request| {
        let k = current.load(std::sync::atomic::Ordering::SeqCst);
        match scripts.get(k).or(scripts.last()) {
            Some(script) => script(req),
            None => Reply::status(503),
        }
    })
}
