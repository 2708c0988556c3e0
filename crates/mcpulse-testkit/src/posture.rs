//! Servers with a security posture to grade: one knob per security rule of `mcpulse-judge`,
//! turned from a server that earns no finding at all.
//!
//! [`Posture::secure`] is an MCP server (2026-07-28, stateless; or with [`Posture::legacy`] a
//! 2025-11-25 server with sessions) that does what the spec asks: it answers `403` to a request
//! with a foreign `Origin` or `Host`, sends no CORS headers, hands out session ids with 128 bits
//! of entropy, and answers an unparseable body with a bare `-32700 Parse error`. Each builder
//! method turns one of those into a finding: accepting a foreign `Origin`, reflecting it in
//! `Access-Control-Allow-Origin`, short or related session ids, a stack trace in an error...
//!
//! [`OAuth`] is a server behind a `401`, with every variant of the challenge, the
//! protected-resource metadata (RFC 9728) and the authorization-server metadata (RFC 8414 /
//! OpenID discovery) that the auth rules look at. Its authorization server is the fake itself
//! (`http://127.0.0.1:<port>`), so following the metadata never leaves loopback; the endpoints the
//! metadata names are never contacted.

use crate::http::{Reply, Request, Script};
use crate::mcp::{self, LEGACY, MODERN};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// Session ids a careful server would hand out: random UUIDs (122 bits), unrelated to each
/// other. Fixed, so that the tests are deterministic; the k-th `initialize` gets the k-th.
pub const STRONG_SESSION_IDS: &[&str] = &[
    "3f0c9a52-8d1e-4b7a-9c26-e5f1a8b7d403",
    "b81e6d2f-07c4-4e9b-a5d3-1c9f72e8a6b0",
    "6a2d4f91-c3b8-4e05-8f7a-d2e1b9c4a735",
    "e4b7c1a9-5f2d-4806-b3e9-7a0c6d1f8e52",
];

/// The body of the `403` a careful server answers a foreign `Origin` or `Host` with.
pub const FORBIDDEN_BODY: &str =
    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Forbidden"}}"#;

/// A clean answer to an unparseable body.
pub const PARSE_ERROR_BODY: &str =
    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#;

/// What a server says in `Access-Control-*` headers (on every response).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cors {
    /// No CORS headers at all.
    None,
    /// `Access-Control-Allow-Origin: *`.
    Wildcard,
    /// `Access-Control-Allow-Origin: *` and `Access-Control-Allow-Credentials: true`.
    WildcardWithCredentials,
    /// The request's `Origin` echoed in `Access-Control-Allow-Origin` (and
    /// `Access-Control-Allow-Credentials: true` with `credentials`).
    Reflect { credentials: bool },
    /// One fixed, allow-listed origin, whatever the request's.
    AllowOnly(String),
}

/// The protocol era a [`Posture`] server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostureEra {
    /// 2026-07-28, stateless: `server/discover`, no sessions; a legacy `initialize` gets -32022.
    Modern,
    /// 2025-11-25 with sessions: `initialize` opens one (`Mcp-Session-Id`), `DELETE` ends it.
    Legacy,
}

/// A server's security posture; [`Posture::script`] makes it a [`FakeHttp`](crate::FakeHttp)
/// script.
#[derive(Debug, Clone)]
pub struct Posture {
    era: PostureEra,
    check_origin: bool,
    check_host: bool,
    cors: Cors,
    session_ids: Vec<String>,
    malformed_reply: Option<(u16, String, String)>,
    tools: Vec<Value>,
}

impl Posture {
    /// A modern server that earns no security finding.
    pub fn secure() -> Posture {
        Posture {
            era: PostureEra::Modern,
            check_origin: true,
            check_host: true,
            cors: Cors::None,
            session_ids: STRONG_SESSION_IDS.iter().map(|s| (*s).to_owned()).collect(),
            malformed_reply: None,
            tools: mcp::tools(&["echo", "add"]),
        }
    }

    /// Speaks 2025-11-25 with sessions instead: the k-th `initialize` gets `session_ids[k]`
    /// (the last one repeats). A request of the session must carry its id and the protocol
    /// version; `DELETE` with a live id ends it (`200`), any other `DELETE` gets `404`.
    pub fn legacy(mut self, session_ids: &[&str]) -> Posture {
        self.era = PostureEra::Legacy;
        if !session_ids.is_empty() {
            self.session_ids = session_ids.iter().map(|s| (*s).to_owned()).collect();
        }
        self
    }

    /// Accepts a request whatever its `Origin` (the spec requires a `403` for a foreign one).
    pub fn accept_any_origin(mut self) -> Posture {
        self.check_origin = false;
        self
    }

    /// Accepts a request whatever its `Host` (DNS-rebinding protection off).
    pub fn accept_any_host(mut self) -> Posture {
        self.check_host = false;
        self
    }

    pub fn cors(mut self, cors: Cors) -> Posture {
        self.cors = cors;
        self
    }

    /// Answers a body that is not JSON with this status, content type and body (a stack trace,
    /// say) instead of a clean `-32700`.
    pub fn malformed_reply(mut self, status: u16, content_type: &str, body: &str) -> Posture {
        self.malformed_reply = Some((status, content_type.to_owned(), body.to_owned()));
        self
    }

    /// The tools `tools/list` returns (default: `echo` and `add`, without annotations).
    pub fn tools(mut self, tools: Vec<Value>) -> Posture {
        self.tools = tools;
        self
    }

    pub fn script(self) -> Script {
        let initializes = Mutex::new(0usize);
        let live: Mutex<Vec<String>> = Mutex::new(Vec::new());
        Arc::new(move |req: &Request| {
            let reply = self.answer(req, &initializes, &live);
            self.with_cors(req, reply)
        })
    }

    fn answer(
        &self,
        req: &Request,
        initializes: &Mutex<usize>,
        live: &Mutex<Vec<String>>,
    ) -> Reply {
        if self.check_origin
            && let Some(origin) = req.header("origin")
            && origin != req.url_for("")
        {
            return Reply::bytes(403, "application/json", FORBIDDEN_BODY);
        }
        if self.check_host {
            let port = req.local_addr.port();
            let host = req.header("host").unwrap_or("");
            if host != req.local_addr.to_string() && host != format!("localhost:{port}") {
                return Reply::bytes(403, "application/json", FORBIDDEN_BODY);
            }
        }
        let session = req.header("mcp-session-id").map(str::to_owned);
        match req.method.as_str() {
            "POST" => {}
            "DELETE" if self.era == PostureEra::Legacy => {
                let mut live = live.lock().unwrap_or_else(|p| p.into_inner());
                return match live.iter().position(|s| Some(s) == session.as_ref()) {
                    Some(i) => {
                        live.remove(i);
                        Reply::status(200)
                    }
                    None => {
                        Reply::json(404, &mcp::error(&Value::Null, -32001, "Session not found"))
                    }
                };
            }
            _ => return Reply::status(405).header("allow", "POST"),
        }
        let Some(body) = req.json() else {
            return match &self.malformed_reply {
                Some((status, ct, body)) => Reply::bytes(*status, ct, body.clone()),
                None => Reply::bytes(400, "application/json", PARSE_ERROR_BODY),
            };
        };
        let id = body.get("id").cloned().unwrap_or(Value::Null);
        let method = body.get("method").and_then(Value::as_str).unwrap_or("");
        match self.era {
            PostureEra::Modern => self.modern(req, &id, method),
            PostureEra::Legacy => {
                self.legacy_answer(req, &id, method, session.as_deref(), initializes, live)
            }
        }
    }

    fn modern(&self, req: &Request, id: &Value, method: &str) -> Reply {
        if req.header("mcp-protocol-version") != Some(MODERN) {
            return Reply::json(
                400,
                &json!({
                    "jsonrpc": "2.0", "id": id,
                    "error": { "code": -32022, "message": "Unsupported protocol version",
                               "data": { "supported": [MODERN] } }
                }),
            );
        }
        if req.header("mcp-method") != Some(method) {
            return Reply::json(400, &mcp::error(id, -32020, "Mcp-Method header mismatch"));
        }
        match method {
            "server/discover" => Reply::json(200, &mcp::result(id, mcp::discover_result())),
            "tools/list" => Reply::json(
                200,
                &mcp::result(id, mcp::tools_list_result(self.tools.clone(), None, true)),
            ),
            _ => Reply::json(404, &mcp::error(id, -32601, "Method not found")),
        }
    }

    fn legacy_answer(
        &self,
        req: &Request,
        id: &Value,
        method: &str,
        session: Option<&str>,
        initializes: &Mutex<usize>,
        live: &Mutex<Vec<String>>,
    ) -> Reply {
        if method == "initialize" {
            let k = {
                let mut n = initializes.lock().unwrap_or_else(|p| p.into_inner());
                *n += 1;
                *n - 1
            };
            let sid = self
                .session_ids
                .get(k)
                .or(self.session_ids.last())
                .cloned()
                .unwrap_or_default();
            live.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(sid.clone());
            return Reply::json(200, &mcp::result(id, mcp::initialize_result(LEGACY)))
                .header("mcp-session-id", &sid);
        }
        let known = session.is_some_and(|s| {
            live.lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .any(|l| l == s)
        });
        if !known {
            return Reply::json(
                400,
                &mcp::error(&Value::Null, -32000, "Bad Request: no valid session"),
            );
        }
        if req.header("mcp-protocol-version") != Some(LEGACY) {
            return Reply::json(
                400,
                &mcp::error(&Value::Null, -32000, "Bad Request: protocol version"),
            );
        }
        let reply = match method {
            "notifications/initialized" => Reply::accepted(),
            "ping" => Reply::json(200, &mcp::result(id, json!({}))),
            "tools/list" => Reply::json(
                200,
                &mcp::result(id, mcp::tools_list_result(self.tools.clone(), None, false)),
            ),
            _ => Reply::json(200, &mcp::error(id, -32601, "Method not found")),
        };
        // As the SDKs do: every answer within a session names it again.
        reply.header("mcp-session-id", session.unwrap_or_default())
    }

    fn with_cors(&self, req: &Request, reply: Reply) -> Reply {
        match &self.cors {
            Cors::None => reply,
            Cors::Wildcard => reply.header("access-control-allow-origin", "*"),
            Cors::WildcardWithCredentials => reply
                .header("access-control-allow-origin", "*")
                .header("access-control-allow-credentials", "true"),
            Cors::Reflect { credentials } => match req.header("origin") {
                None => reply,
                Some(origin) => {
                    let r = reply
                        .header("access-control-allow-origin", origin)
                        .header("vary", "Origin");
                    if *credentials {
                        r.header("access-control-allow-credentials", "true")
                    } else {
                        r
                    }
                }
            },
            Cors::AllowOnly(origin) => reply
                .header("access-control-allow-origin", origin)
                .header("vary", "Origin"),
        }
    }
}

/// The path of the protected-resource metadata of `/mcp` (RFC 9728's path-inserted well-known
/// URL, which a challenge also advertises).
pub const PRM_PATH: &str = "/.well-known/oauth-protected-resource/mcp";
/// RFC 8414's well-known path for an issuer without a path.
pub const AS_PATH: &str = "/.well-known/oauth-authorization-server";
/// OpenID Connect discovery's well-known path.
pub const OIDC_PATH: &str = "/.well-known/openid-configuration";

/// What a `401` carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Challenge {
    /// No `WWW-Authenticate` header at all.
    None,
    /// `WWW-Authenticate: Bearer realm="mcp"`, naming no metadata.
    Bare,
    /// `WWW-Authenticate: Bearer resource_metadata="<absolute URL of PRM_PATH>"`.
    WithMetadata,
}

/// The protected-resource metadata served at [`PRM_PATH`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prm {
    /// `404`.
    Missing,
    /// `200` with an HTML page.
    NotJson,
    /// A document without `authorization_servers`.
    NoAuthorizationServers,
    /// A document naming another resource.
    OtherResource,
    /// A complete document naming this server and the fake itself as authorization server.
    Good,
}

/// The authorization-server metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsMeta {
    /// `404` at every well-known URL.
    Missing,
    /// Served only at OpenID discovery's URL (complete and correct there).
    OpenIdOnly,
    /// Complete and correct at RFC 8414's URL.
    Good,
    /// `issuer` names another issuer.
    IssuerMismatch,
    /// `code_challenge_methods_supported` is `["plain"]`.
    PlainPkceOnly,
    /// No `code_challenge_methods_supported`.
    NoPkceMethods,
    /// The authorization and token endpoints are `http://` on a non-loopback host.
    HttpEndpoints,
}

/// A server behind OAuth: every MCP request gets `401`; the metadata documents are served as
/// configured (without asking for credentials, as the spec requires).
#[derive(Debug, Clone, Copy)]
pub struct OAuth {
    pub challenge: Challenge,
    pub prm: Prm,
    pub as_meta: AsMeta,
}

impl OAuth {
    /// A complete, correct setup: a challenge naming the metadata, and both documents right.
    pub fn good() -> OAuth {
        OAuth {
            challenge: Challenge::WithMetadata,
            prm: Prm::Good,
            as_meta: AsMeta::Good,
        }
    }

    pub fn challenge(mut self, c: Challenge) -> OAuth {
        self.challenge = c;
        self
    }

    pub fn prm(mut self, p: Prm) -> OAuth {
        self.prm = p;
        self
    }

    pub fn as_meta(mut self, a: AsMeta) -> OAuth {
        self.as_meta = a;
        self
    }

    pub fn script(self) -> Script {
        Arc::new(
            move |req: &Request| match (req.method.as_str(), req.path()) {
                ("GET", PRM_PATH) => self.prm_reply(req),
                ("GET", AS_PATH)
                    if !matches!(self.as_meta, AsMeta::Missing | AsMeta::OpenIdOnly) =>
                {
                    Reply::json(200, &self.as_document(req))
                }
                ("GET", OIDC_PATH) if self.as_meta == AsMeta::OpenIdOnly => {
                    Reply::json(200, &self.as_document(req))
                }
                ("GET", p) if p.starts_with("/.well-known/") => {
                    Reply::bytes(404, "text/plain", "Not Found")
                }
                _ => {
                    let reply = Reply::json(
                        401,
                        &json!({ "error": "invalid_token", "error_description": "no valid bearer token" }),
                    );
                    match self.challenge {
                        Challenge::None => reply,
                        Challenge::Bare => {
                            reply.header("www-authenticate", r#"Bearer realm="mcp""#)
                        }
                        Challenge::WithMetadata => reply.header(
                            "www-authenticate",
                            &format!(
                                r#"Bearer resource_metadata="{}", scope="mcp:tools""#,
                                req.url_for(PRM_PATH)
                            ),
                        ),
                    }
                }
            },
        )
    }

    fn prm_reply(&self, req: &Request) -> Reply {
        let issuer = req.url_for("");
        match self.prm {
            Prm::Missing => Reply::bytes(404, "text/plain", "Not Found"),
            Prm::NotJson => Reply::html(200, "<html><body>Sign in</body></html>"),
            Prm::NoAuthorizationServers => Reply::json(
                200,
                &json!({ "resource": req.url_for("/mcp"), "scopes_supported": ["mcp:tools"] }),
            ),
            Prm::OtherResource => Reply::json(
                200,
                &json!({
                    "resource": "https://other.example/mcp",
                    "authorization_servers": [issuer],
                }),
            ),
            Prm::Good => Reply::json(
                200,
                &json!({
                    "resource": req.url_for("/mcp"),
                    "authorization_servers": [issuer],
                    "scopes_supported": ["mcp:tools"],
                    "bearer_methods_supported": ["header"],
                }),
            ),
        }
    }

    fn as_document(&self, req: &Request) -> Value {
        let issuer = req.url_for("");
        let mut doc = json!({
            "issuer": issuer,
            "authorization_endpoint": "https://auth.example/authorize",
            "token_endpoint": "https://auth.example/token",
            "registration_endpoint": "https://auth.example/register",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
        });
        match self.as_meta {
            AsMeta::IssuerMismatch => doc["issuer"] = json!("https://evil-issuer.example"),
            AsMeta::PlainPkceOnly => doc["code_challenge_methods_supported"] = json!(["plain"]),
            AsMeta::NoPkceMethods => {
                if let Some(o) = doc.as_object_mut() {
                    o.remove("code_challenge_methods_supported");
                }
            }
            AsMeta::HttpEndpoints => {
                doc["authorization_endpoint"] = json!("http://auth.example/authorize");
                doc["token_endpoint"] = json!("http://auth.example/token");
            }
            AsMeta::Missing | AsMeta::OpenIdOnly | AsMeta::Good => {}
        }
        doc
    }
}
