//! The gateway over a stdio upstream, end to end: a real gateway on loopback port 0, real
//! children (mcpulse-testkit's scripted stdio servers), a real HTTP client. Every test stops
//! the gateway and checks that no child (or grandchild) is left.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod policies_support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use mcpulse_gateway::config;
use mcpulse_gateway::serve::{self, Running};
use mcpulse_gateway::state::{ProcessState, Shared};
use mcpulse_testkit::stdio::{
    Act, StdioScript, TempDir, is_running, kill, read_pids, still_running_after,
};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The longest any step may take.
const BOUND: Duration = Duration::from_secs(10);

struct Reply {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    fn session(&self) -> String {
        self.headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("no session id: {} {}", self.status, self.body))
            .to_owned()
    }
}

/// One HTTP request on a connection of its own (policies_support's, to `/mcp`).
async fn request(
    addr: SocketAddr,
    method: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> Reply {
    let r = policies_support::request(addr, method, "/mcp", headers, body.as_ref()).await;
    Reply {
        status: r.status,
        headers: r.headers,
        body: r.body,
    }
}

async fn post(addr: SocketAddr, session: Option<&str>, message: Value) -> Reply {
    let headers: Vec<(&str, &str)> = session.map(|s| ("mcp-session-id", s)).into_iter().collect();
    request(addr, "POST", &headers, Some(message)).await
}

fn initialize(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}})
}

/// Opens a legacy session: initialize, then initialized.
async fn open_session(addr: SocketAddr) -> String {
    let r = post(addr, None, initialize(1)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sid = r.session();
    let n = post(
        addr,
        Some(&sid),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(n.status, 202);
    sid
}

fn tools_list(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
}

/// The file's text once it has at least `n` lines (a scripted server's record), within BOUND.
async fn lines_eventually(file: &Path, n: usize, what: &str) -> String {
    let until = tokio::time::Instant::now() + BOUND;
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.lines().count() >= n {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "{what} never reached the child"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A gateway over `script`, with `extra` TOML before `[upstream]` and `upstream` TOML after.
async fn gateway(script: &Path, extra: &str, upstream: &str) -> (Running, Arc<Shared>) {
    let text = format!(
        "listen = \"127.0.0.1:0\"\n{extra}\n[upstream]\ncommand = [\"sh\", {:?}]\nstop_grace = \"300ms\"\n{upstream}\n",
        script.to_str().unwrap()
    );
    let g = config::parse(&text, "test.toml", &|_| None).unwrap();
    let shared = Arc::new(Shared::default());
    let running = serve::start(&g, shared.clone()).await.unwrap();
    (running, shared)
}

/// A `GET` of a health endpoint: (status, body).
async fn health(addr: SocketAddr, path: &str) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::builder()
        .uri(path)
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = tokio::time::timeout(BOUND, sender.send_request(req))
        .await
        .expect("a health answer in time")
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Polls `path` until it answers `status` (at most `bound`); returns the body.
async fn health_becomes(addr: SocketAddr, path: &str, status: u16, bound: Duration) -> String {
    let until = tokio::time::Instant::now() + bound;
    loop {
        let (s, body) = health(addr, path).await;
        if s == status {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "{path} still {s}, not {status}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The readiness session's child (the one child no client has), once it runs.
fn readiness_pid(running: &Running) -> Option<u32> {
    match &running.upstream {
        serve::Upstream::Stdio(up) => up.readiness_pid(),
        serve::Upstream::Http(_) => None,
    }
}

/// Waits until the readiness child runs and `file` lists it and `n` other pids: the clients'
/// children (and whatever they recorded), told apart from the readiness child by its pid.
/// Returns (the clients' pids, every pid recorded).
async fn clients(running: &Running, file: &Path, n: usize) -> (Vec<u32>, Vec<u32>) {
    let until = tokio::time::Instant::now() + BOUND;
    loop {
        let all = read_pids(file);
        let ready = readiness_pid(running);
        let theirs: Vec<u32> = all.iter().copied().filter(|p| Some(*p) != ready).collect();
        let done = ready.is_some_and(|r| all.contains(&r)) && theirs.len() >= n;
        if done || tokio::time::Instant::now() > until {
            assert!(done, "the readiness child {ready:?} and {n} more: {all:?}");
            return (theirs, all);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Stops the gateway and checks nothing is left of `pids`.
async fn stop_leaving_nothing(running: Running, pids: &[u32]) {
    tokio::time::timeout(BOUND, running.shutdown())
        .await
        .expect("shutdown in time");
    let left = still_running_after(pids, Duration::from_secs(3));
    kill(&left);
    assert!(left.is_empty(), "left running: {left:?}");
}

fn script(dir: &TempDir) -> std::path::PathBuf {
    StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool(
            "crash",
            vec![Act::FirstTimeElse(
                dir.join("crashed"),
                Box::new(Act::Exit(1)),
                Box::new(Act::Result(json!({"content": []}))),
            )],
        )
        .on_tool(
            "chatty",
            vec![
                Act::Stdout(
                    json!({"jsonrpc": "2.0", "method": "notifications/message",
                        "params": {"level": "info", "data": "working"}})
                    .to_string(),
                ),
                Act::Result(json!({"content": [{"type": "text", "text": "done"}]})),
            ],
        )
        .on("tools/call", vec![Act::Result(json!({"content": []}))])
        .write(dir, "server.sh")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_session_gets_its_own_child_and_delete_stops_it() {
    let dir = TempDir::new("gw-sessions");
    let (running, shared) = gateway(&script(&dir), "", "").await;
    let addr = running.addr;
    let a = open_session(addr).await;
    let b = open_session(addr).await;
    assert_ne!(a, b);
    let (both, all) = clients(&running, &dir.join("pids"), 2).await;
    assert_eq!(both.len(), 2, "two sessions, two children: {both:?}");
    assert_ne!(both[0], both[1]);
    for sid in [&a, &b] {
        let r = post(addr, Some(sid), tools_list(2)).await;
        assert_eq!(r.json()["id"], 2);
        assert_eq!(r.json()["result"]["tools"][0]["name"], "echo");
    }
    assert_eq!(shared.upstream().process, ProcessState::Up);

    let d = request(addr, "DELETE", &[("mcp-session-id", &a)], None).await;
    assert_eq!(d.status, 200);
    let running_now: Vec<u32> = both.iter().copied().filter(|p| is_running(*p)).collect();
    assert_eq!(running_now.len(), 1, "DELETE stopped exactly one child");
    let gone = post(addr, Some(&a), tools_list(3)).await;
    assert_eq!(gone.status, 404, "a deleted session is unknown");
    let still = post(addr, Some(&b), tools_list(4)).await;
    assert_eq!(still.json()["result"]["tools"][0]["name"], "echo");
    stop_leaving_nothing(running, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_expires_and_its_child_stops() {
    let dir = TempDir::new("gw-idle");
    let (running, _) = gateway(&script(&dir), "session_idle_timeout = \"300ms\"", "").await;
    let sid = open_session(running.addr).await;
    let (child, all) = clients(&running, &dir.join("pids"), 1).await;
    let left = still_running_after(&child, Duration::from_secs(5));
    assert!(left.is_empty(), "the idle session's child still runs");
    let r = post(running.addr, Some(&sid), tools_list(2)).await;
    assert_eq!(r.status, 404, "an expired session is unknown: {}", r.body);
    stop_leaving_nothing(running, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_sessions_it_answers_503_with_retry_after() {
    let dir = TempDir::new("gw-full");
    let (running, _) = gateway(&script(&dir), "max_sessions = 1", "").await;
    let addr = running.addr;
    let a = open_session(addr).await;
    let full = post(addr, None, initialize(1)).await;
    assert_eq!(full.status, 503, "{}", full.body);
    assert!(full.headers.contains_key("retry-after"));
    assert!(full.body.contains("sessions are in use"), "{}", full.body);
    let d = request(addr, "DELETE", &[("mcp-session-id", &a)], None).await;
    assert_eq!(d.status, 200);
    let again = post(addr, None, initialize(1)).await;
    assert_eq!(again.status, 200, "a freed slot is usable: {}", again.body);
    // The readiness session took no slot: max_sessions = 1 served a client twice.
    let (_, all) = clients(&running, &dir.join("pids"), 2).await;
    stop_leaving_nothing(running, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_door_refuses_foreign_hosts_origins_versions_and_big_bodies() {
    let dir = TempDir::new("gw-door");
    let (running, _) = gateway(&script(&dir), "max_body = \"2KiB\"", "").await;
    let addr = running.addr;
    let origin = request(
        addr,
        "POST",
        &[("origin", "http://evil.example")],
        Some(initialize(1)),
    )
    .await;
    assert_eq!(origin.status, 403);
    let host = request(
        addr,
        "POST",
        &[("host", "evil.example")],
        Some(initialize(1)),
    )
    .await;
    assert_eq!(host.status, 403);
    let version = request(
        addr,
        "POST",
        &[("mcp-protocol-version", "1900-01-01")],
        Some(initialize(1)),
    )
    .await;
    assert_eq!(version.status, 400);
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"x": "y".repeat(4096)}}});
    assert_eq!(post(addr, None, big).await.status, 413);
    let put = request(addr, "PUT", &[], None).await;
    assert_eq!(put.status, 405);
    let no_session = post(addr, None, tools_list(1)).await;
    assert_eq!(no_session.status, 400);
    let parse = request(addr, "POST", &[], None).await;
    assert_eq!(parse.status, 400);
    // Nothing refused reached a child: the only one is the readiness session's.
    let (theirs, _) = clients(&running, &dir.join("pids"), 0).await;
    assert!(theirs.is_empty(), "{theirs:?}");
    // A loopback origin is a local client's, and passes.
    let local = request(
        addr,
        "POST",
        &[("origin", "http://localhost:6274")],
        Some(initialize(1)),
    )
    .await;
    assert_eq!(local.status, 200, "{}", local.body);
    let (_, all) = clients(&running, &dir.join("pids"), 1).await;
    stop_leaving_nothing(running, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_killed_mid_request_answers_an_error_and_the_next_request_works() {
    let dir = TempDir::new("gw-crash");
    let (running, shared) = gateway(&script(&dir), "", "backoff_initial = \"50ms\"").await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let crash = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "crash", "arguments": {}}});
    let r = post(addr, Some(&sid), crash).await;
    let reply = r.json();
    assert_eq!(reply["id"], 7, "the client's id comes back: {reply}");
    assert_eq!(reply["error"]["code"], -32080, "{reply}");
    let next = post(addr, Some(&sid), tools_list(8)).await;
    assert_eq!(
        next.json()["result"]["tools"][0]["name"],
        "echo",
        "the restarted child answers"
    );
    assert!(shared.upstream().restarts >= 1);
    let (theirs, all) = clients(&running, &dir.join("pids"), 2).await;
    assert_eq!(theirs.len(), 2, "restarted once: {theirs:?}");
    stop_leaving_nothing(running, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_childs_stderr_is_not_in_the_error_a_remote_client_gets() {
    let dir = TempDir::new("gw-crash-stderr");
    // The server says something it was given on stderr, then dies with the call in flight.
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool(
            "leak",
            vec![
                Act::Stderr(
                    "login failed: connection string postgres://app:hunter2hunter2@db".into(),
                ),
                Act::Exit(1),
            ],
        )
        .write(&dir, "server.sh");
    let (running, _) = gateway(&script, "", "backoff_initial = \"50ms\"").await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let leak = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "leak", "arguments": {}}});
    let reply = post(addr, Some(&sid), leak).await.json();
    assert_eq!(reply["error"]["code"], -32080, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("being restarted"), "{message}");
    assert!(
        !message.contains("stderr") && !message.contains("hunter2"),
        "{message}"
    );
    let (_, all) = clients(&running, &dir.join("pids"), 1).await;
    stop_leaving_nothing(running, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_before_the_reply_turn_the_response_into_an_sse_stream() {
    let dir = TempDir::new("gw-sse");
    let (running, _) = gateway(&script(&dir), "", "").await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let call = json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call",
        "params": {"name": "chatty", "arguments": {}}});
    let r = post(addr, Some(&sid), call).await;
    assert_eq!(
        r.headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    let data: Vec<Value> = r
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(data.len(), 2, "{}", r.body);
    assert_eq!(data[0]["method"], "notifications/message");
    assert_eq!(data[1]["id"], "c1", "the reply last, with the client's id");
    assert_eq!(data[1]["result"]["content"][0]["text"], "done");
    // A plain call stays JSON.
    let plain = post(addr, Some(&sid), tools_list(2)).await;
    assert_eq!(
        plain
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
    let (_, all) = clients(&running, &dir.join("pids"), 1).await;
    stop_leaving_nothing(running, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_tool_named_as_the_health_tool_is_listed_as_the_gateways() {
    let dir = TempDir::new("gw-health-name");
    // The server lists `echo`; the gateway's health tool takes that name: the gateway answers
    // it, so the listing must describe the gateway's tool, once.
    let (running, _) = gateway(&script(&dir), "health_tool = \"echo\"", "").await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let list =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}});
    let r = request(
        running.addr,
        "POST",
        &[("mcp-protocol-version", "2026-07-28")],
        Some(list),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let tools = r.json()["result"]["tools"].clone();
    assert_eq!(tools.as_array().map(Vec::len), Some(1), "{tools}");
    assert_eq!(tools[0]["name"], "echo");
    assert!(
        tools[0]["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("The gateway's health")),
        "{tools}"
    );
    let (_, all) = clients(&running, &dir.join("pids"), 1).await;
    stop_leaving_nothing(running, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_requests_use_the_pool_and_the_health_tool_is_the_gateways() {
    let dir = TempDir::new("gw-pool");
    let (running, _) = gateway(&script(&dir), "health_tool = \"health_check\"", "").await;
    let addr = running.addr;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let list =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}});
    let r = request(
        addr,
        "POST",
        &[("mcp-protocol-version", "2026-07-28")],
        Some(list),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!r.headers.contains_key("mcp-session-id"), "stateless");
    let lying =
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": meta}});
    let mismatch = request(
        addr,
        "POST",
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
        ],
        Some(lying),
    )
    .await;
    assert_eq!(mismatch.status, 400, "{}", mismatch.body);
    assert_eq!(mismatch.json()["error"]["code"], -32020);
    let names: Vec<String> = r.json()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["echo", "health_check"]);
    // Answered by the gateway: no child sees it (the script would answer `content: []`).
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "health_check", "arguments": {}, "_meta": meta}});
    let h = request(
        addr,
        "POST",
        &[("mcp-protocol-version", "2026-07-28")],
        Some(call),
    )
    .await;
    assert_eq!(h.json()["id"], 2);
    assert!(
        h.json()["result"]["content"][0]["text"].is_string(),
        "{}",
        h.body
    );
    let (theirs, all) = clients(&running, &dir.join("pids"), 1).await;
    assert_eq!(theirs.len(), 1, "one pool child: {theirs:?}");
    stop_leaving_nothing(running, &all).await;
}

/// Two stateless clients on one pooled child, each with progress token 0 (the TypeScript
/// SDK's first): the child sees a token of the gateway's for each request, and each client
/// gets its own request's progress, with its own token back. A log line the child writes
/// while both wait names no request: it reaches neither client (on a pooled child, only a
/// request waiting alone gets such a message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_childs_progress_reaches_only_the_client_whose_request_it_reports() {
    let dir = TempDir::new("gw-pool-progress");
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "whose?"}});
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool(
            "first",
            vec![
                Act::RecordLine(dir.join("calls")),
                Act::Progress("first's progress".into()),
                // The second request is waiting too by now.
                Act::Sleep(600),
                Act::Stdout(log.to_string()),
                Act::Result(json!({"content": [{"type": "text", "text": "first"}]})),
            ],
        )
        .on_tool(
            "second",
            vec![
                Act::RecordLine(dir.join("calls")),
                Act::Progress("second's progress".into()),
                Act::Result(json!({"content": [{"type": "text", "text": "second"}]})),
            ],
        )
        .write(&dir, "server.sh");
    let (running, _) = gateway(&script, "stateless_pool = 1", "").await;
    let addr = running.addr;
    let call = |id: i64, tool: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": tool, "arguments": {}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "progressToken": 0}}})
    };
    let headers = [("mcp-protocol-version", "2026-07-28")];
    let first = request(addr, "POST", &headers, Some(call(1, "first")));
    let second = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        request(addr, "POST", &headers, Some(call(1, "second"))).await
    };
    let (a, b) = tokio::join!(first, second);
    let events = |r: &Reply| -> Vec<Value> {
        r.body
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    };
    for (r, tool) in [(&a, "first"), (&b, "second")] {
        assert_eq!(r.status, 200, "{}", r.body);
        let events = events(r);
        let progress: Vec<&Value> = events
            .iter()
            .filter(|e| e["method"] == "notifications/progress")
            .collect();
        assert_eq!(progress.len(), 1, "{tool}: {events:?}");
        assert_eq!(
            progress[0]["params"]["message"],
            format!("{tool}'s progress")
        );
        assert_eq!(
            progress[0]["params"]["progressToken"], 0,
            "the client's token back"
        );
        assert!(
            !events
                .iter()
                .any(|e| e["method"] == "notifications/message"),
            "{tool} got a message naming no request: {events:?}"
        );
        let reply = events.last().unwrap();
        assert_eq!(reply["result"]["content"][0]["text"], tool);
    }
    let calls = std::fs::read_to_string(dir.join("calls")).unwrap();
    let tokens: Vec<Value> = calls
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["params"]["_meta"]["progressToken"].clone()
        })
        .collect();
    assert_eq!(tokens.len(), 2, "{calls}");
    assert_ne!(
        tokens[0], tokens[1],
        "one child, two requests, two tokens: {calls}"
    );
    let (theirs, all) = clients(&running, &dir.join("pids"), 1).await;
    assert_eq!(theirs.len(), 1, "one pool child: {theirs:?}");
    stop_leaving_nothing(running, &all).await;
}

/// A server's request during a call whose client takes JSON only (no stream to carry it)
/// is answered for the client at once, so that the server does not wait for ever, and the
/// call is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_request_during_a_json_only_call_is_answered_for_the_client() {
    let dir = TempDir::new("gw-json-only");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool(
            "asks",
            vec![Act::Stdout(
                r#"{"jsonrpc":"2.0","id":"srv-1","method":"roots/list"}"#.into(),
            )],
        )
        .on_line(
            r#""id":"srv-1""#,
            vec![
                Act::RecordLine(dir.join("answer")),
                Act::ResultToPrevious(json!({"content": [{"type": "text", "text": "asked"}]})),
            ],
        )
        .write(&dir, "server.sh");
    let (running, _) = gateway(&script, "", "").await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "asks", "arguments": {}}});
    let r = request(
        addr,
        "POST",
        &[("mcp-session-id", &sid), ("accept", "application/json")],
        Some(call),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["result"]["content"][0]["text"],
        "asked",
        "{}",
        r.body
    );
    let answer = std::fs::read_to_string(dir.join("answer")).unwrap();
    assert!(
        answer.contains("no client stream is open"),
        "the server's request was answered: {answer}"
    );
    let (_, all) = clients(&running, &dir.join("pids"), 1).await;
    stop_leaving_nothing(running, &all).await;
}

/// A session whose server crashed until its supervisor gave up is ended: its client gets
/// 404 (and so initializes a new session, as the spec has it), not a -32081 for every request
/// for ever, and its slot is free; the health tool is not answered for a session that is
/// gone either. A new session gets a new child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_server_was_given_up_on_ends_and_its_client_gets_404() {
    let dir = TempDir::new("gw-spent");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool("die", vec![Act::Exit(1)])
        .write(&dir, "server.sh");
    let (running, shared) = gateway(
        &script,
        "health_tool = \"health_check\"\nmax_sessions = 1",
        "max_restarts = 1\nbackoff_initial = \"10ms\"\nbackoff_max = \"20ms\"",
    )
    .await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let die = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "die", "arguments": {}}});
    let r = post(addr, Some(&sid), die.clone()).await;
    assert_eq!(r.json()["error"]["code"], -32080, "{}", r.body);
    let until = tokio::time::Instant::now() + BOUND;
    let mut answers = 0;
    loop {
        let r = post(addr, Some(&sid), die.clone()).await;
        if r.status == 404 {
            break;
        }
        answers += 1;
        assert!(
            tokio::time::Instant::now() < until,
            "the session was never ended: {answers} answers, the last {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let health = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "health_check", "arguments": {}}});
    assert_eq!(post(addr, Some(&sid), health).await.status, 404);
    // The slot is free (max_sessions = 1): a new session, a new child, working.
    let until = tokio::time::Instant::now() + BOUND;
    while policies_support::metric(&shared, "mcpulse_gateway_active_sessions") != 0.0 {
        assert!(
            tokio::time::Instant::now() < until,
            "the slot was not freed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fresh = open_session(addr).await;
    let r = post(addr, Some(&fresh), tools_list(4)).await;
    assert_eq!(r.json()["result"]["tools"][0]["name"], "echo", "{}", r.body);
    let (_, all) = clients(&running, &dir.join("pids"), 1).await;
    stop_leaving_nothing(running, &all).await;
}

/// A 2026-07-28 client that closes its stream cancels its request (the spec: on HTTP the
/// closed stream is the cancellation; on stdio the client must send `notifications/cancelled`,
/// which the gateway does for it). A legacy client's disconnect is not a cancellation: its
/// request runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_clients_closed_stream_cancels_its_request_on_the_child() {
    let dir = TempDir::new("gw-closed-stream");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        // Works for ever (never answers).
        .on_tool("slow", vec![Act::RecordLine(dir.join("calls"))])
        .on(
            "notifications/cancelled",
            vec![Act::RecordLine(dir.join("cancels"))],
        )
        .write(&dir, "server.sh");
    let (running, _) = gateway(&script, "", "").await;
    let addr = running.addr;
    let slow = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "slow", "arguments": {}}})
    };
    // Legacy: the client goes away once its call reached the child.
    let sid = open_session(addr).await;
    let legacy = tokio::spawn(async move { post(addr, Some(&sid), slow(1)).await });
    lines_eventually(&dir.join("calls"), 1, "the legacy call").await;
    legacy.abort();
    // Stateless.
    let mut modern = slow(2);
    modern["params"]["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let stateless = tokio::spawn(async move {
        request(
            addr,
            "POST",
            &[("mcp-protocol-version", "2026-07-28")],
            Some(modern),
        )
        .await
    });
    let text = lines_eventually(&dir.join("calls"), 2, "the stateless call").await;
    stateless.abort();
    let modern_key =
        serde_json::from_str::<Value>(text.lines().nth(1).unwrap()).unwrap()["id"].clone();
    let cancels = lines_eventually(&dir.join("cancels"), 1, "a cancellation").await;
    // Only the stateless request's (the legacy one's would have come first, at once).
    let lines: Vec<Value> = cancels
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{cancels}");
    assert_eq!(lines[0]["params"]["requestId"], modern_key, "{cancels}");
    let (_, all) = clients(&running, &dir.join("pids"), 2).await;
    stop_leaving_nothing(running, &all).await;
}

/// The gateway's own readiness request that outlives its deadline is cancelled on the child
/// (else a server hung on it would keep one more request per round, and the relay one more
/// entry in its table, until it refuses everything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readiness_request_past_its_deadline_is_cancelled_on_the_child() {
    let dir = TempDir::new("gw-ready-cancel");
    let script = StdioScript::new()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on(
            "initialize",
            vec![Act::Result(json!({"protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}}))],
        )
        // Hangs on its list (never answers).
        .on("tools/list", vec![Act::RecordLine(dir.join("lists"))])
        .on(
            "notifications/cancelled",
            vec![Act::RecordLine(dir.join("cancels"))],
        )
        .write(&dir, "server.sh");
    let (running, _) = gateway(
        &script,
        "readiness_interval = \"1s\"\nreadiness_timeout = \"300ms\"",
        "",
    )
    .await;
    let cancels = lines_eventually(
        &dir.join("cancels"),
        1,
        "the readiness request's cancellation",
    )
    .await;
    let lists = std::fs::read_to_string(dir.join("lists")).unwrap();
    let first: Value = serde_json::from_str(lists.lines().next().unwrap()).unwrap();
    let cancel: Value = serde_json::from_str(cancels.lines().next().unwrap()).unwrap();
    assert_eq!(cancel["params"]["requestId"], first["id"], "{cancels}");
    let (_, all) = clients(&running, &dir.join("pids"), 0).await;
    stop_leaving_nothing(running, &all).await;
}

/// A readiness `initialize` that outlives its round (a server slow to start) is not
/// cancelled: the spec forbids cancelling `initialize`, and a server that honoured it would
/// never answer the handshake. Readiness then passes on the answer that comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_initialize_is_never_cancelled() {
    let dir = TempDir::new("gw-slow-init");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .at_start(Act::Sleep(800))
        .on(
            "notifications/cancelled",
            vec![Act::RecordLine(dir.join("cancels"))],
        )
        .write(&dir, "server.sh");
    let (running, _) = gateway(
        &script,
        "readiness_interval = \"1s\"\nreadiness_timeout = \"300ms\"",
        "",
    )
    .await;
    health_becomes(running.addr, "/readyz", 200, BOUND).await;
    let cancels = std::fs::read_to_string(dir.join("cancels")).unwrap_or_default();
    assert!(cancels.is_empty(), "initialize was cancelled: {cancels}");
    let (_, all) = clients(&running, &dir.join("pids"), 0).await;
    stop_leaving_nothing(running, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_every_child_and_grandchild() {
    let dir = TempDir::new("gw-shutdown");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .at_start(Act::SpawnGrandchild(dir.join("pids")))
        .write(&dir, "server.sh");
    let (running, _) = gateway(&script, "", "").await;
    for _ in 0..3 {
        open_session(running.addr).await;
    }
    let (theirs, all) = clients(&running, &dir.join("pids"), 7).await;
    assert_eq!(
        theirs.len(),
        7,
        "three children, the readiness child, and a grandchild each: {all:?}"
    );
    stop_leaving_nothing(running, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_messages_outside_a_request_go_to_the_sessions_get_stream() {
    let dir = TempDir::new("gw-get");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on(
            "notifications/roots/list_changed",
            vec![Act::Stdout(
                json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}).to_string(),
            )],
        )
        .write(&dir, "server.sh");
    let (running, _) = gateway(&script, "", "").await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    // GET needs a session: without one it is 405 (stateless requests have no stream).
    assert_eq!(request(addr, "GET", &[], None).await.status, 405);

    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let get = http::Request::builder()
        .method("GET")
        .uri("/mcp")
        .header("host", addr.to_string())
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = sender.send_request(get).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    // A second stream for the same session is refused while this one is open.
    let second = request(addr, "GET", &[("mcp-session-id", &sid)], None).await;
    assert_eq!(second.status, 409);

    let n = post(
        addr,
        Some(&sid),
        json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}),
    )
    .await;
    assert_eq!(n.status, 202);
    let frame = tokio::time::timeout(BOUND, body.frame())
        .await
        .expect("an event in time")
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(frame.data_ref().unwrap()).into_owned();
    assert!(
        text.starts_with("event: message\ndata: ")
            && text.contains("notifications/tools/list_changed"),
        "{text}"
    );
    // DELETE ends the session, and its stream with it.
    let d = request(addr, "DELETE", &[("mcp-session-id", &sid)], None).await;
    assert_eq!(d.status, 200);
    let end = tokio::time::timeout(BOUND, body.frame())
        .await
        .expect("the stream ended in time");
    assert!(end.is_none(), "the stream ends with its session");
    let (_, all) = clients(&running, &dir.join("pids"), 1).await;
    stop_leaving_nothing(running, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_dies_during_initialize_or_cannot_start_gets_the_client_an_error() {
    // Bridges in use hang the client here, or die: the client must get an answer, and the
    // gateway must go on serving.
    let dir = TempDir::new("gw-init-crash");
    let script = StdioScript::new()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on("initialize", vec![Act::Exit(1)])
        .write(&dir, "server.sh");
    let (running, _) = gateway(&script, "", "backoff_initial = \"50ms\"\nmax_restarts = 1").await;
    let r = post(running.addr, None, initialize(1)).await;
    assert_eq!(r.json()["id"], 1);
    assert!(r.json()["error"]["code"].is_i64(), "{}", r.body);
    assert!(
        !r.headers.contains_key("mcp-session-id"),
        "a failed handshake opens no session"
    );
    let all = read_pids(&dir.join("pids"));
    stop_leaving_nothing(running, &all).await;

    let missing = dir.join("no-such-server");
    let text = format!(
        "listen = \"127.0.0.1:0\"\n[upstream]\ncommand = [{:?}]\nbackoff_initial = \"50ms\"\nmax_restarts = 1\n",
        missing.to_str().unwrap()
    );
    let g = config::parse(&text, "test.toml", &|_| None).unwrap();
    let running = serve::start(&g, Arc::new(Shared::default())).await.unwrap();
    let r = post(running.addr, None, initialize(1)).await;
    assert_eq!(r.json()["id"], 1);
    assert!(r.json()["error"]["code"].is_i64(), "{}", r.body);
    assert!(
        r.body.contains("could not be started") && r.body.contains("check the command and PATH"),
        "{}",
        r.body
    );
    // Still serving.
    let again = post(running.addr, None, initialize(2)).await;
    assert_eq!(again.json()["id"], 2);
    // /readyz says why, not only that a budget was spent.
    let until = tokio::time::Instant::now() + BOUND;
    loop {
        let (status, body) = health(running.addr, "/readyz").await;
        if status == 503 && body.contains("given up on (the server could not be started") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "/readyz: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::timeout(BOUND, running.shutdown())
        .await
        .unwrap();
}

/// A command that is not there yet (a volume mounted late): each child that tries it is given
/// up on at once, the `initialize` that started it answered -32081 saying what to fix (no
/// session), a stateless request likewise; once the program is there, the gateway starts it
/// without a restart: the readiness child is replaced after a backoff and `/readyz` passes, the
/// pool replaces its given-up child, and the next `initialize` opens a session (as
/// docs/gateway.md says; `mcpulse supervise` stays FATAL until its client reconnects).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_appears_late_is_started_by_the_next_child() {
    let dir = TempDir::new("gw-late-program");
    let program = dir.join("server");
    let text = format!(
        "listen = \"127.0.0.1:0\"\nreadiness_interval = \"1s\"\nreadiness_timeout = \"1s\"\n[upstream]\ncommand = [{:?}]\nstop_grace = \"300ms\"\nbackoff_initial = \"50ms\"\nbackoff_max = \"200ms\"\n",
        program.to_str().unwrap()
    );
    let g = config::parse(&text, "test.toml", &|_| None).unwrap();
    let running = serve::start(&g, Arc::new(Shared::default())).await.unwrap();
    let addr = running.addr;
    let r = post(addr, None, initialize(1)).await;
    assert_eq!(r.json()["id"], 1, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32081, "{}", r.body);
    assert!(
        r.json()["error"]["message"].as_str().unwrap().contains(
            "not found (the program, or the interpreter its first line names; check the command and PATH)"
        ),
        "{}",
        r.body
    );
    assert!(!r.headers.contains_key("mcp-session-id"), "no session");
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let stateless = |id: i64| json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {"_meta": meta}});
    let modern = [("mcp-protocol-version", "2026-07-28")];
    let r = request(addr, "POST", &modern, Some(stateless(2))).await;
    assert_eq!(r.json()["error"]["code"], -32081, "{}", r.body);
    // The volume is mounted: the program is there.
    let staged = dir.join("server.tmp");
    StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .write(&dir, "server.tmp");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::rename(&staged, &program).unwrap();
    health_becomes(addr, "/readyz", 200, BOUND).await;
    let r = request(addr, "POST", &modern, Some(stateless(3))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["result"]["tools"][0]["name"], "echo", "{}", r.body);
    let sid = open_session(addr).await;
    let l = post(addr, Some(&sid), tools_list(4)).await;
    assert_eq!(l.json()["result"]["tools"][0]["name"], "echo", "{}", l.body);
    let (theirs, all) = clients(&running, &dir.join("pids"), 2).await;
    assert_eq!(theirs.len(), 2, "a pool child and a session's: {all:?}");
    stop_leaving_nothing(running, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_with_the_same_id_each_get_their_own_reply_once() {
    // The scripted server answers in order, the slow call first: each reply must still reach
    // the POST that asked, with the client's id, even though both used id 1.
    let dir = TempDir::new("gw-ids");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool(
            "slow",
            vec![
                Act::Sleep(300),
                Act::Result(json!({"content": [{"type": "text", "text": "slow"}]})),
            ],
        )
        .write(&dir, "server.sh");
    let (running, _) = gateway(&script, "", "").await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let slow = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "slow", "arguments": {}}});
    let (a, b) = tokio::join!(post(addr, Some(&sid), slow), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        post(addr, Some(&sid), tools_list(1)).await
    });
    assert_eq!(a.json()["id"], 1);
    assert_eq!(
        a.json()["result"]["content"][0]["text"],
        "slow",
        "{}",
        a.body
    );
    assert_eq!(b.json()["id"], 1);
    assert_eq!(b.json()["result"]["tools"][0]["name"], "echo", "{}", b.body);
    let (_, all) = clients(&running, &dir.join("pids"), 1).await;
    stop_leaving_nothing(running, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_asks_one_child_of_its_own_and_readyz_follows_it() {
    // A child slow to start (its first round times out), with two tools: min_tools = 2, and
    // the gateway's own health tool must not make up for a missing one.
    let dir = TempDir::new("gw-ready");
    let tools = json!({"tools": [
        {"name": "echo", "inputSchema": {"type": "object"}},
        {"name": "add", "inputSchema": {"type": "object"}},
    ]});
    let script = StdioScript::new()
        .at_start(Act::RecordPid(dir.join("pids")))
        .at_start(Act::Sleep(800))
        .on(
            "initialize",
            vec![Act::Result(json!({"protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}}))],
        )
        .on("tools/list", vec![Act::Result(tools)])
        .write(&dir, "server.sh");
    let extra = "min_tools = 2\nhealth_tool = \"health_check\"\nreadiness_interval = \"1s\"\nreadiness_timeout = \"400ms\"";
    let (running, shared) = gateway(&script, extra, "").await;
    let addr = running.addr;
    let (status, body) = health(addr, "/readyz").await;
    assert_eq!(status, 503, "not ready before the child answered: {body}");
    let ready = health_becomes(addr, "/readyz", 200, BOUND).await;
    let doc: Value = serde_json::from_str(&ready).unwrap();
    assert_eq!(
        doc["checks"]["tools:count"][0]["observedValue"], 2,
        "{ready}"
    );
    assert_eq!(doc["checks"]["protocol:responseTime"][0]["status"], "pass");
    // Its list taught the metrics the tools before any client listed them (as over HTTP).
    assert!(shared.metrics.knows_tool("echo") && shared.metrics.knows_tool("add"));
    let child = readiness_pid(&running).expect("the readiness child runs");
    let serve::Upstream::Stdio(up) = &running.upstream else {
        panic!("a stdio upstream")
    };
    assert_eq!(
        up.sessions(),
        0,
        "the readiness session is no client's session"
    );

    // Frozen: tools/list goes unanswered; three rounds in a row (the failure threshold) make
    // the gateway unready. A frozen process still runs: liveness is not readiness.
    // `kill` spawned as a child the gateway's orphan reaper (in this process) leaves alone:
    // a plain std spawn lost its exit status to the reaper under load (ECHILD).
    let mut cmd = tokio::process::Command::new("kill");
    cmd.args(["-STOP", &child.to_string()]);
    let (mut stop, _owned) = mcpulse_relay::supervise::child::spawn_owned(&mut cmd).unwrap();
    assert!(stop.wait().await.unwrap().success());
    let unready = health_becomes(addr, "/readyz", 503, BOUND).await;
    assert!(
        unready.contains("did not answer tools/list in time"),
        "{unready}"
    );
    assert_eq!(health(addr, "/livez").await.0, 200);
    // Several intervals went by (and more do): one child all along, none per interval.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let all = read_pids(&dir.join("pids"));
    assert_eq!(all, [child], "the readiness rounds spawned no child");
    assert!(shared.upstream().protocol.is_some_and(|p| !p.handshake_ok));
    // A frozen child is still stopped (SIGKILL to its group: a stopped process takes that).
    stop_leaving_nothing(running, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_speaks_2026_to_a_server_that_only_discovers() {
    // A 2026-07-28-only server refuses `initialize`: readiness asks `server/discover`, then
    // `tools/list` with the per-request `_meta`.
    let dir = TempDir::new("gw-ready-modern");
    let script = StdioScript::new()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on(
            "initialize",
            vec![Act::Error(-32601, "Method not found".into())],
        )
        .on(
            "server/discover",
            vec![Act::Result(json!({"supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}}, "serverInfo": {"name": "m", "version": "1"}}))],
        )
        .on(
            "tools/list",
            vec![
                Act::RecordLine(dir.join("lists")),
                Act::Result(
                    json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}),
                ),
            ],
        )
        .write(&dir, "server.sh");
    let (running, _) = gateway(&script, "readiness_interval = \"1s\"", "").await;
    let ready = health_becomes(running.addr, "/readyz", 200, BOUND).await;
    assert!(ready.contains("\"observedValue\":1"), "{ready}");
    let lists = std::fs::read_to_string(dir.join("lists")).unwrap();
    assert!(
        lists.contains("io.modelcontextprotocol/protocolVersion"),
        "tools/list carried 2026's _meta: {lists}"
    );
    let (_, all) = clients(&running, &dir.join("pids"), 0).await;
    stop_leaving_nothing(running, &all).await;
}

/// Over a stdio upstream, a tool the server listed gets a metrics label of its own, a name it
/// never listed is `_other` (a client cannot mint series), and the gateway's own probe (its
/// token, from loopback) is neither counted nor logged, while a client copying the header with
/// a wrong token is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_tools_get_labels_and_the_gateways_own_probes_are_not_counted() {
    let dir = TempDir::new("gw-labels");
    let (running, shared) = gateway(&script(&dir), "", "").await;
    let addr = running.addr;
    // Ready: the readiness child's list has taught the labels, before any client listed.
    health_becomes(addr, "/readyz", 200, BOUND).await;
    let sid = open_session(addr).await;
    let call = |id: i64, name: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": {}}})
    };
    let before = post(addr, Some(&sid), call(2, "echo")).await;
    assert_eq!(before.status, 200, "{}", before.body);
    let listed = post(addr, Some(&sid), tools_list(3)).await;
    assert_eq!(listed.json()["result"]["tools"][0]["name"], "echo");
    post(addr, Some(&sid), call(4, "echo")).await;
    post(addr, Some(&sid), call(5, "junk-never-listed")).await;
    let token = mcpulse_gateway::checks::probe_token();
    let own = [
        ("mcp-session-id", sid.as_str()),
        (mcpulse_gateway::checks::PROBE_HEADER, token),
    ];
    for id in 6..9 {
        let r = request(addr, "POST", &own, Some(call(id, "echo"))).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let forged = [
        ("mcp-session-id", sid.as_str()),
        (mcpulse_gateway::checks::PROBE_HEADER, "not-the-token"),
    ];
    request(addr, "POST", &forged, Some(call(9, "echo"))).await;
    let text = shared.metrics.encode().unwrap();
    let count = |labels: &str| {
        let line = format!("mcpulse_gateway_requests_total{{{labels}}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(line.as_str()))
            .map(|v| v.trim().to_owned())
    };
    // Echo's own series: 2, 4 and the forged one, never the three own probes; the name never
    // listed (5) is `_other`.
    assert_eq!(
        count(r#"method="tools/call",tool="echo",outcome="ok""#).as_deref(),
        Some("3"),
        "{text}"
    );
    assert_eq!(
        count(r#"method="tools/call",tool="_other",outcome="ok""#).as_deref(),
        Some("1"),
        "{text}"
    );
    let (_, all) = clients(&running, &dir.join("pids"), 1).await;
    stop_leaving_nothing(running, &all).await;
}

/// Every frame of a streamed body and when it came (from `t0`), to its end (at most `BOUND`).
async fn timed_frames(
    mut body: hyper::body::Incoming,
    t0: tokio::time::Instant,
) -> Vec<(Duration, Bytes)> {
    let mut out = Vec::new();
    while let Some(frame) = tokio::time::timeout(BOUND, body.frame())
        .await
        .expect("a frame or the end in time")
    {
        if let Ok(data) = frame.unwrap().into_data() {
            out.push((t0.elapsed(), data));
        }
    }
    out
}

/// Opens a streamed request on a connection of its own (with this receive buffer, if any):
/// the response, its body unread.
async fn open_stream(
    addr: SocketAddr,
    method: &str,
    sid: &str,
    body: Option<Value>,
    rcvbuf: Option<u32>,
) -> http::Response<hyper::body::Incoming> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    if let Some(n) = rcvbuf {
        socket.set_recv_buffer_size(n).unwrap();
    }
    let stream = socket.connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::builder()
        .method(method)
        .uri("/mcp")
        .header("host", addr.to_string())
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", sid)
        .body(Full::new(Bytes::from(
            body.map(|b| b.to_string()).unwrap_or_default(),
        )))
        .unwrap();
    tokio::time::timeout(BOUND, sender.send_request(req))
        .await
        .expect("an answer in time")
        .unwrap()
}

/// The keep-alive comments' arrival times are each at least `interval` after the last frame.
fn assert_cadence(frames: &[(Duration, Bytes)], interval: Duration) {
    let mut last = Duration::ZERO;
    for (at, data) in frames {
        if data.as_ref() == b": keep-alive\n" {
            // Never early (2 ms for the clocks' rounding); late by load at most.
            assert!(
                *at + Duration::from_millis(2) >= last + interval,
                "a comment at {at:?}, {:?} after the last frame",
                *at - last
            );
        }
        last = *at;
    }
}

/// A slow tool call whose client accepts SSE turns into a stream once its reply is one
/// keep-alive interval late, and gets a comment every interval until the reply (which a
/// client's SSE decoder reads as the one message); a silent GET stream gets them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_streams_get_keepalive_comments_on_time() {
    let dir = TempDir::new("gw-keepalive");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool(
            "slow",
            vec![
                Act::Sleep(1300),
                Act::Result(json!({"content": [{"type": "text", "text": "late"}]})),
            ],
        )
        .write(&dir, "server.sh");
    let interval = Duration::from_millis(300);
    let (running, _) = gateway(&script, "keepalive = \"300ms\"", "").await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "slow", "arguments": {}}});
    let t0 = tokio::time::Instant::now();
    let resp = open_stream(addr, "POST", &sid, Some(call), None).await;
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    let frames = timed_frames(resp.into_body(), t0).await;
    let comments = frames
        .iter()
        .filter(|(_, d)| d.as_ref() == b": keep-alive\n")
        .count();
    // 1.3 s of silence at 300 ms: 4 comments (3 on a loaded machine whose sleep ran short).
    assert!(
        (3..=4).contains(&comments),
        "{comments} comments: {frames:?}"
    );
    assert_cadence(&frames, interval);
    let first = frames.first().map(|f| f.0).unwrap_or_default();
    assert!(
        first >= interval && first < interval * 3,
        "first at {first:?}"
    );
    let mut decoder = mcpulse_wire::sse::Decoder::new(1 << 20);
    let events: Vec<_> = frames.iter().flat_map(|(_, d)| decoder.push(d)).collect();
    assert_eq!(events.len(), 1, "the comments are no events: {events:?}");
    let mcpulse_wire::sse::Item::Event(e) = &events[0] else {
        panic!("{events:?}")
    };
    let reply: Value = serde_json::from_str(&e.data).unwrap();
    assert_eq!(reply["id"], 7);
    assert_eq!(reply["result"]["content"][0]["text"], "late");

    // The session's GET stream: nothing to say, a comment every interval.
    let t0 = tokio::time::Instant::now();
    let mut get = open_stream(addr, "GET", &sid, None, None).await.into_body();
    let mut frames = Vec::new();
    for _ in 0..3 {
        let f = tokio::time::timeout(BOUND, get.frame())
            .await
            .expect("a comment in time")
            .unwrap()
            .unwrap();
        frames.push((t0.elapsed(), f.into_data().unwrap()));
    }
    assert!(
        frames.iter().all(|(_, d)| d.as_ref() == b": keep-alive\n"),
        "{frames:?}"
    );
    assert_cadence(&frames, interval);
    drop(get);
    let (_, all) = clients(&running, &dir.join("pids"), 1).await;
    stop_leaving_nothing(running, &all).await;
}

/// A legacy server recording its pid in `dir/pids`, listing `tools` (each answered by the
/// rules the caller adds, else ignored).
fn listing(dir: &TempDir, tools: &[&str]) -> StdioScript {
    use mcpulse_testkit::mcp;
    StdioScript::new()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on(
            "initialize",
            vec![Act::Result(mcp::initialize_result(mcp::LEGACY))],
        )
        .on(
            "tools/list",
            vec![Act::Result(mcp::tools_list_result(
                mcp::tools(tools),
                None,
                false,
            ))],
        )
}

/// `[thresholds]` end to end: calls through the gateway whose tool fails on demand turn
/// `/readyz` to warn (200, with the figures) past the degraded error rate, to fail (503) past
/// the unhealthy one with `on_unhealthy = "fail"`, and back to pass as the window slides on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_rate_threshold_flips_readiness_to_warn_fail_and_back() {
    let dir = TempDir::new("gw-thresholds");
    let script = listing(&dir, &["ok", "bad"])
        .on_tool(
            "bad",
            vec![Act::Result(
                json!({"content": [{"type": "text", "text": "no"}], "isError": true}),
            )],
        )
        .on("tools/call", vec![Act::Result(json!({"content": []}))])
        .write(&dir, "server.sh");
    let config = "[thresholds]\nwindow = \"4s\"\nminimum_calls = 4\non_unhealthy = \"fail\"\n[thresholds.degraded]\nerror_rate = 0.5\n[thresholds.unhealthy]\nerror_rate = 0.9\n";
    let (running, _) = gateway(&script, config, "").await;
    let addr = running.addr;
    health_becomes(addr, "/readyz", 200, BOUND).await;
    let sid = open_session(addr).await;
    assert_eq!(post(addr, Some(&sid), tools_list(1)).await.status, 200);
    let call = |id: i64, name: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": {}}})
    };
    let readyz = || async {
        let (status, body) = health(addr, "/readyz").await;
        (status, serde_json::from_str::<Value>(&body).unwrap())
    };
    for (i, name) in ["ok", "bad", "ok", "bad"].iter().enumerate() {
        post(addr, Some(&sid), call(10 + i as i64, name)).await;
    }
    let (status, doc) = readyz().await;
    assert_eq!(
        (status, doc["status"].as_str()),
        (200, Some("warn")),
        "{doc}"
    );
    let overall = &doc["checks"]["calls:errorRate"][0];
    assert_eq!(overall["status"], "warn");
    assert_eq!(overall["observedValue"], 50.0);
    assert_eq!(overall["calls"], 4);
    assert!(
        overall["output"]
            .as_str()
            .unwrap()
            .contains("error rate 50.0% (2 of 4 calls) at or past the degraded limit of 50.0%"),
        "{overall}"
    );
    assert!(
        doc["checks"].get("tool.bad:errorRate").is_none(),
        "2 calls of the tool: under minimum_calls, not judged: {doc}"
    );
    // Four more failures: 6 of 8 overall is still only degraded; the tool's 6 of 6 is
    // unhealthy, and with on_unhealthy = "fail" that fails readiness.
    for i in 0..4 {
        post(addr, Some(&sid), call(20 + i, "bad")).await;
    }
    let (status, doc) = readyz().await;
    assert_eq!(
        (status, doc["status"].as_str()),
        (503, Some("fail")),
        "{doc}"
    );
    assert_eq!(
        doc["checks"]["calls:errorRate"][0]["status"], "warn",
        "{doc}"
    );
    let tool = &doc["checks"]["tool.bad:errorRate"][0];
    assert_eq!(tool["status"], "fail", "{doc}");
    assert!(
        tool["output"].as_str().unwrap().starts_with(
            "tool \"bad\": error rate 100.0% (6 of 6 calls) at or past the unhealthy limit of 90.0%"
        ),
        "{tool}"
    );
    // The window slides past the failures: pass again, with no call needed.
    let until = tokio::time::Instant::now() + BOUND;
    loop {
        let (status, doc) = readyz().await;
        if doc["status"] == "pass" {
            assert_eq!(status, 200);
            // Passing as the window slides: fewer calls left in it than minimum_calls.
            let left = doc["checks"]["calls:errorRate"][0]["calls"]
                .as_u64()
                .unwrap();
            assert!(left < 4, "{doc}");
            break;
        }
        assert!(tokio::time::Instant::now() < until, "still {doc}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, all) = clients(&running, &dir.join("pids"), 1).await;
    stop_leaving_nothing(running, &all).await;
}

/// A kept-open client connection that has made one request (so the gateway has accepted it).
async fn held_connection(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::builder()
        .uri("/livez")
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = tokio::time::timeout(BOUND, sender.send_request(req))
        .await
        .expect("an answer in time")
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.into_body().collect().await.unwrap();
    sender
}

/// A raw HTTP/1.1 GET on a connection of its own: everything the gateway wrote before closing.
async fn raw_get(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(BOUND, s.read_to_end(&mut out))
        .await
        .expect("answered and closed in time")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// `max_connections`: with that many open, a new connection is answered 503 with
/// `Retry-After` and closed, and counted; once one closes, new connections are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_connections_a_new_connection_gets_503_and_is_closed() {
    let dir = TempDir::new("gw-max-conns");
    let (running, shared) = gateway(&script(&dir), "max_connections = 2", "").await;
    let addr = running.addr;
    let first = held_connection(addr).await;
    let second = held_connection(addr).await;
    let refused = raw_get(addr, "/livez").await;
    assert!(refused.starts_with("HTTP/1.1 503 "), "{refused}");
    let lower = refused.to_ascii_lowercase();
    assert!(lower.contains("retry-after: 5\r\n"), "{refused}");
    assert!(
        refused.contains("all 2 connections are in use (max_connections)"),
        "{refused}"
    );
    let metrics = shared.metrics.encode().unwrap();
    assert!(
        metrics.contains("mcpulse_gateway_connections_refused_total 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mcpulse_gateway_active_connections 2\n"),
        "{metrics}"
    );
    drop(first);
    let until = tokio::time::Instant::now() + BOUND;
    loop {
        let r = raw_get(addr, "/livez").await;
        if r.starts_with("HTTP/1.1 200 ") {
            break;
        }
        assert!(tokio::time::Instant::now() < until, "still refused: {r}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(second);
    let (_, all) = clients(&running, &dir.join("pids"), 0).await;
    stop_leaving_nothing(running, &all).await;
}

/// A client that does not read a big streamed response holds a bounded buffer, not the
/// stream: the child writes 3000 notifications of 16 KiB (48 MiB) before its reply, the
/// client reads nothing for a while, then everything: it gets what the gateway's queues held
/// (`EVENTS` + `HANDOVER` frames) and what the two sockets' buffers held (kernel memory, a
/// few MiB on loopback), the rest dropped, and the reply last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_a_big_stream_holds_a_bounded_buffer() {
    let queued = mcpulse_gateway::serve::stdio::EVENTS + mcpulse_gateway::serve::stdio::HANDOVER;
    unread_flood("gw-slow-reader", 16 << 10, 3000, "", queued).await;
}

/// The same with messages of 256 KiB under a 1 MiB `max_message_size`: the queues' count
/// (256) would hold 64 MiB of them; their bytes are bounded too, by the stream's budget
/// (`max_message_size`, at least 4 MiB), so the client gets about 16 and the sockets' share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_big_messages_holds_a_bounded_number_of_bytes() {
    let size = 256 << 10;
    let queued = mcpulse_gateway::serve::stdio::budget(1 << 20) / size;
    unread_flood(
        "gw-slow-reader-bytes",
        size,
        120,
        "max_message_size = \"1MiB\"",
        queued,
    )
    .await;
}

/// A child floods `count` notifications of `size` bytes before its reply to a client that
/// reads nothing until the child is done; the client then gets at most `queued` of them
/// beside what the sockets and hyper held, and the reply last. The child knows it is done
/// when the gateway answers the request it sends after them (a `ping` as large as a note,
/// which the full stream cannot carry: answered with an error at once, after everything
/// before it was routed).
async fn unread_flood(name: &str, size: usize, count: usize, upstream: &str, queued: usize) {
    let dir = TempDir::new(name);
    let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "x".repeat(size)}});
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool(
            "flood",
            vec![
                Act::Repeat(Box::new(Act::Stdout(note.to_string())), count),
                // As large as a note, so that it does not fit where a note does not.
                Act::Stdout(
                    json!({"jsonrpc": "2.0", "id": "flood-done", "method": "ping",
                        "params": {"_meta": {"pad": "x".repeat(size)}}})
                    .to_string(),
                ),
            ],
        )
        .on_line(
            r#""id":"flood-done""#,
            vec![
                Act::RecordLine(dir.join("answer")),
                Act::RecordPid(dir.join("flooded")),
                Act::ResultToPrevious(json!({"content": [{"type": "text", "text": "flooded"}]})),
            ],
        )
        .write(&dir, "server.sh");
    let (running, _) = gateway(&script, "", upstream).await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "flood", "arguments": {}}});
    // A small receive buffer, so that the kernel's share is known.
    let resp = open_stream(addr, "POST", &sid, Some(call), Some(64 << 10)).await;
    // Not reading: the child writes all of it (it is never blocked: a stdio child serves
    // more than one stream), and the gateway keeps only what its queues hold.
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    while read_pids(&dir.join("flooded")).is_empty() {
        assert!(
            tokio::time::Instant::now() < until,
            "the child did not write it all"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answer = std::fs::read_to_string(dir.join("answer")).unwrap();
    assert!(
        answer.contains("the client's stream is full"),
        "the server's request was answered: {answer}"
    );
    let frames = timed_frames(resp.into_body(), tokio::time::Instant::now()).await;
    let mut decoder = mcpulse_wire::sse::Decoder::new(2 << 20);
    let events: Vec<Value> = frames
        .iter()
        .flat_map(|(_, d)| decoder.push(d))
        .filter_map(|i| match i {
            mcpulse_wire::sse::Item::Event(e) => serde_json::from_str(&e.data).ok(),
            _ => None,
        })
        .collect();
    let notes = events.len() - 1;
    // The sockets: the kernel's most for the gateway's sending buffer, and the client's
    // receiving one (the kernel doubles what was set); and hyper's buffers on both sides
    // (about 400 KiB each, and a frame being written: 1 MiB each allowed).
    let wmem = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem").unwrap_or_default();
    let wmem: usize = wmem
        .split_whitespace()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or(4 << 20);
    let limit = queued + (wmem + (128 << 10) + (2 << 20)) / size + 2;
    eprintln!("{notes} of {count} notifications reached the client (bound {limit})");
    assert!(
        notes <= limit,
        "{notes} of {count} notifications buffered for a client that read none (bound {limit})"
    );
    let reply = events.last().unwrap();
    assert_eq!(reply["id"], 3);
    assert_eq!(reply["result"]["content"][0]["text"], "flooded");
    let (_, all) = clients(&running, &dir.join("pids"), 1).await;
    stop_leaving_nothing(running, &all).await;
}

/// A `tool` dependency check over a stdio upstream calls the tool on the readiness session's
/// child: three runs later, the readiness child is still the only child (probing `/mcp` would
/// have opened a session, i.e. spawned a child, per run), and the check reads the tool's
/// health document as the probe does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_checks_run_over_the_readiness_child_without_spawning() {
    let dir = TempDir::new("gw-tool-check");
    let script = listing(&dir, &["echo", "health"])
        .on_tool(
            "health",
            vec![Act::Result(json!({
                "content": [{"type": "text", "text": "{\"status\":\"degraded\"}"}],
                "structuredContent": {"status": "degraded", "output": "the cache is cold"},
            }))],
        )
        .write(&dir, "server.sh");
    let config = "readiness_interval = \"1s\"\nreadiness_timeout = \"1s\"\n[[checks]]\nname = \"server-health\"\nkind = \"tool\"\ntool = \"health\"\ninterval = \"1s\"\ntimeout = \"1s\"\n";
    let (running, shared) = gateway(&script, config, "").await;
    let addr = running.addr;
    let until = tokio::time::Instant::now() + BOUND;
    while shared.health.runs("server-health") < 3 {
        assert!(
            tokio::time::Instant::now() < until,
            "the check did not run 3 times"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, body) = health(addr, "/readyz").await;
    let doc: Value = serde_json::from_str(&body).unwrap();
    let check = &doc["checks"]["server-health:responseTime"][0];
    assert_eq!(check["status"], "warn", "{doc}");
    let out = check["output"].as_str().unwrap_or_default();
    assert!(
        out.contains("reports degraded") && out.contains("the cache is cold"),
        "{out}"
    );
    let (theirs, all) = clients(&running, &dir.join("pids"), 0).await;
    assert!(theirs.is_empty(), "a child per check run: {all:?}");
    stop_leaving_nothing(running, &all).await;
}

/// The readiness child whose supervisor spends its restart budget is replaced after a backoff:
/// `/readyz` fails meanwhile, saying so, and passes again once the new child answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_recovers_after_its_childs_restart_budget_is_spent() {
    use mcpulse_testkit::mcp;
    let dir = TempDir::new("gw-readiness-fatal");
    // The first two children die at initialize (the budget: one restart); the third works.
    let script = StdioScript::new()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on(
            "initialize",
            vec![Act::FirstTimeElse(
                dir.join("crashed-once"),
                Box::new(Act::Exit(1)),
                Box::new(Act::FirstTimeElse(
                    dir.join("crashed-twice"),
                    Box::new(Act::Exit(1)),
                    Box::new(Act::Result(mcp::initialize_result(mcp::LEGACY))),
                )),
            )],
        )
        .on(
            "tools/list",
            vec![Act::Result(mcp::tools_list_result(
                mcp::tools(&["echo"]),
                None,
                false,
            ))],
        )
        .write(&dir, "server.sh");
    let (running, _) = gateway(
        &script,
        "readiness_interval = \"1s\"\nreadiness_timeout = \"1s\"",
        "backoff_initial = \"50ms\"\nbackoff_max = \"200ms\"\nmax_restarts = 1",
    )
    .await;
    let addr = running.addr;
    let until = tokio::time::Instant::now() + BOUND;
    let mut said_so = false;
    loop {
        let (status, body) = health(addr, "/readyz").await;
        said_so |= status == 503
            && body.contains("the readiness child was given up on (")
            && body.contains("; a new one starts in");
        if status == 200 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "never ready again: {body}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        said_so,
        "/readyz never said the readiness child was being replaced"
    );
    assert_eq!(health(addr, "/livez").await.0, 200);
    let all = read_pids(&dir.join("pids"));
    assert_eq!(
        all.len(),
        3,
        "two children spent the budget, the third serves: {all:?}"
    );
    assert_eq!(readiness_pid(&running), all.last().copied());
    stop_leaving_nothing(running, &all).await;
}
