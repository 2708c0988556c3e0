//! A real rmcp server with the kit on a loopback port, and a small MCP client over
//! mcpulse-transport (the probe's own Streamable HTTP code), for the kit's tests.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_kit::progress::Progress;
use mcpulse_kit::{Health, Kit};
use mcpulse_transport::clock::Clock;
use mcpulse_transport::http::HttpClient;
use mcpulse_transport::streamable_http::{Post, post};
use mcpulse_transport::{Call, Limits};
use mcpulse_wire::transcript::{Exchange, Step};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// Every test's bound on one exchange.
pub const BOUND: Duration = Duration::from_secs(20);

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct SleepArgs {
    /// How long to sleep, in milliseconds.
    pub ms: u64,
}

/// Counts the sleeps that ended (finished or dropped) and those that finished.
#[derive(Debug, Default)]
pub struct Counters {
    pub started: AtomicU32,
    pub finished: AtomicU32,
    pub dropped: AtomicU32,
}

struct DropCount(Arc<Counters>, bool);

impl Drop for DropCount {
    fn drop(&mut self) {
        if !self.1 {
            self.0.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[derive(Clone)]
pub struct TestServer {
    tool_router: ToolRouter<TestServer>,
    counters: Arc<Counters>,
}

#[tool_router]
impl TestServer {
    #[tool(description = "Sleeps for ms milliseconds, then says so")]
    async fn sleep(&self, Parameters(SleepArgs { ms }): Parameters<SleepArgs>) -> String {
        self.counters.started.fetch_add(1, Ordering::SeqCst);
        let mut guard = DropCount(Arc::clone(&self.counters), false);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        guard.1 = true;
        self.counters.finished.fetch_add(1, Ordering::SeqCst);
        format!("slept {ms} ms")
    }

    #[tool(description = "Always fails (isError)")]
    async fn fail(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::error(vec![ContentBlock::text("it broke")]))
    }

    #[tool(description = "Echoes hello")]
    async fn hello(&self) -> String {
        "hello".to_owned()
    }

    #[tool(description = "Three steps, reporting progress when asked")]
    async fn steps(&self, ctx: RequestContext<RoleServer>) -> String {
        let mut p = Progress::new(&ctx);
        let mut sent = 0;
        for i in 1..=3u32 {
            if p.report(f64::from(i), Some(3.0), Some(format!("step {i}")))
                .await
            {
                sent += 1;
            }
            // Not increasing: never sent.
            if p.report(f64::from(i), Some(3.0), None).await {
                sent += 100;
            }
        }
        format!("sent {sent}")
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

impl TestServer {
    pub fn router() -> ToolRouter<TestServer> {
        TestServer::tool_router()
    }
}

/// A served test server: the MCP endpoint at `/mcp`, the kit's endpoints beside it.
pub struct Served {
    pub addr: SocketAddr,
    pub counters: Arc<Counters>,
    pub health: Health,
    _running: mcpulse_kit::Running,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Served {
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

/// Serves [`TestServer`] with `kit` wrapping its router (or a plain one with `None`).
pub async fn serve(kit: Option<Kit>) -> Served {
    serve_with(kit, mcpulse_kit::server_config()).await
}

pub async fn serve_with(kit: Option<Kit>, config: StreamableHttpServerConfig) -> Served {
    let counters = Arc::new(Counters::default());
    let health = kit
        .as_ref()
        .map_or_else(|| Health::new("plain", "1"), |k| k.health().clone());
    let router = match &kit {
        Some(k) => k.wrap(TestServer::router()).unwrap(),
        None => TestServer::router(),
    };
    let c = Arc::clone(&counters);
    let mcp = StreamableHttpService::new(
        move || {
            Ok(TestServer {
                tool_router: router.clone(),
                counters: Arc::clone(&c),
            })
        },
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let app = axum::Router::new()
        .nest_service("/mcp", mcp)
        .merge(mcpulse_kit::endpoints::router(health.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let running = health.start();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Served {
        addr,
        counters,
        health,
        _running: running,
        task,
    }
}

/// One MCP session (legacy, with `Mcp-Session-Id`).
pub struct Session {
    client: HttpClient,
    uri: http::Uri,
    headers: Vec<(String, String)>,
    next: i64,
}

fn limits() -> Limits {
    Limits {
        max_response_bytes: 1 << 22,
    }
}

/// The JSON of an exchange's reply (the whole message), or panics with the exchange.
pub fn reply(ex: &Exchange) -> Value {
    let mcpulse_wire::transcript::Outcome::Reply { frame } = ex.outcome else {
        panic!("no reply: {ex:?}");
    };
    serde_json::from_str(&ex.frames[frame].raw).unwrap()
}

/// The messages an exchange recorded (notifications before the reply, and the reply).
pub fn frames(ex: &Exchange) -> Vec<Value> {
    ex.frames
        .iter()
        .filter_map(|f| serde_json::from_str(&f.raw).ok())
        .collect()
}

impl Session {
    pub async fn open(url: &str) -> Session {
        let mut s = Session {
            client: HttpClient::new(Clock::start()),
            uri: url.parse().unwrap(),
            headers: Vec::new(),
            next: 1,
        };
        let init = s
            .send(
                Step::Initialize,
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
            )
            .await;
        assert!(reply(&init)["result"]["serverInfo"].is_object(), "{init:?}");
        s.headers
            .push(("mcp-protocol-version".into(), "2025-06-18".into()));
        if let Some(sid) = init.header("mcp-session-id") {
            s.headers.push(("mcp-session-id".into(), sid.to_owned()));
        }
        s.notify("notifications/initialized", json!({})).await;
        s
    }

    /// The same session on a connection of its own, its ids far from this one's (to send a
    /// notification while a call is in flight).
    pub fn twin(&self) -> Session {
        Session {
            client: HttpClient::new(Clock::start()),
            uri: self.uri.clone(),
            headers: self.headers.clone(),
            next: self.next + 1000,
        }
    }

    /// The session's headers (`mcp-protocol-version`, `mcp-session-id`).
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    pub fn id(&self) -> i64 {
        self.next
    }

    pub async fn send(&mut self, step: Step, method: &str, params: Value) -> Exchange {
        let id = self.next;
        self.next += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        post(
            &mut self.client,
            Post {
                uri: &self.uri,
                call: Call {
                    step,
                    era: None,
                    page: None,
                    id: Some(id),
                    message: &msg,
                },
                headers: self.headers.clone(),
                user_headers: &[],
            },
            limits(),
            Instant::now() + BOUND,
        )
        .await
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        let _ = post(
            &mut self.client,
            Post {
                uri: &self.uri,
                call: Call {
                    step: Step::Initialized,
                    era: None,
                    page: None,
                    id: None,
                    message: &msg,
                },
                headers: self.headers.clone(),
                user_headers: &[],
            },
            limits(),
            Instant::now() + BOUND,
        )
        .await;
    }

    /// `tools/call` and its reply's `result` (or the whole reply when it is an error).
    pub async fn call(&mut self, name: &str, args: Value) -> Value {
        let ex = self.call_ex(name, args, None).await;
        let r = reply(&ex);
        if r.get("result").is_some() {
            r["result"].clone()
        } else {
            r
        }
    }

    pub async fn call_ex(&mut self, name: &str, args: Value, progress: Option<&str>) -> Exchange {
        let mut params = json!({"name": name, "arguments": args});
        if let Some(t) = progress {
            params["_meta"] = json!({"progressToken": t});
        }
        self.send(Step::ToolsList, "tools/call", params).await
    }

    pub async fn list(&mut self) -> Vec<Value> {
        let ex = self.send(Step::ToolsList, "tools/list", json!({})).await;
        reply(&ex)["result"]["tools"].as_array().unwrap().clone()
    }

    /// The text of a result's first content block.
    pub fn text(result: &Value) -> String {
        result["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    }
}

/// GET on the server's side endpoints.
pub async fn get(addr: SocketAddr, path: &str) -> mcpulse_testkit::http::Response {
    mcpulse_testkit::http::get(addr, path).await
}

/// [`TestServer`] with `router`, served in process over a pipe (no socket, so paused time
/// runs it), the handshake done by hand: its running service hands out the `Peer` a
/// [`ToolCallContext`](rmcp::handler::server::tool::ToolCallContext) needs, so a test can
/// hold (and drop) a tool call's future itself.
pub async fn in_process(
    router: ToolRouter<TestServer>,
) -> (
    TestServer,
    rmcp::service::RunningService<RoleServer, TestServer>,
    tokio::io::DuplexStream,
) {
    use tokio::io::AsyncWriteExt;
    let server = TestServer {
        tool_router: router,
        counters: Arc::default(),
    };
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (mut client, pipe) = (ours, theirs);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "kit-test", "version": "1"}}});
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    client
        .write_all(format!("{init}\n{done}\n").as_bytes())
        .await
        .unwrap();
    let (r, w) = tokio::io::split(pipe);
    let running = rmcp::serve_server(server.clone(), (r, w)).await.unwrap();
    (server, running, client)
}
