//! The gateway's HTTP upstream (serve/http), end to end on loopback: a real client, an axum
//! front door running just the relay on `/mcp` (the real door is serve/mod.rs's), and real
//! upstreams (the demo's Streamable HTTP servers, mcpulse-testkit's scripted fakes, and small
//! axum servers where a test must stop and restart one on the same port).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use axum::Router;
use axum::extract::Request;
use axum::routing::any;
use bytes::Bytes;
use http::Method;
use hyper::body::Frame;
use mcpulse_gateway::serve::http::{HttpSettings, HttpUpstream, codes};
use mcpulse_gateway::state::{ProcessState, Shared};
use mcpulse_policy::backoff::Backoff;
use mcpulse_testkit::http::{FakeHttp, Piece, RawListener, Reply};
use mcpulse_testkit::mcp;
use mcpulse_testkit::scenario::{self, Framing, LEGACY_SESSION};
use mcpulse_testkit::tls::TestCa;
use mcpulse_transport::clock::Clock;
use mcpulse_transport::http::{BodyEnd, Chunk, HttpClient, Outgoing, next_chunk, read_body};
use mcpulse_wire::sse::{Decoder, Item};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Every exchange in these tests is bounded by this.
const BOUND: Duration = Duration::from_secs(10);

/// The relay behind a bare axum door on 127.0.0.1:0.
struct Gateway {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn gateway(settings: HttpSettings) -> Gateway {
    let shared = Arc::new(Shared::default());
    let relay = Arc::new(HttpUpstream::new(settings, shared.clone()));
    let app = Router::new().route(
        "/mcp",
        any(move |req: Request| {
            let relay = relay.clone();
            async move { relay.handle(req).await }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        let _ = axum::serve(listener, app).await;
    });
    Gateway { addr, shared, task }
}

/// Quick reconnects, so that "down and back" takes milliseconds.
fn settings(url: impl Into<String>) -> HttpSettings {
    let mut s = HttpSettings::new(url);
    s.connect_timeout = Duration::from_secs(2);
    s.reconnect = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(200),
    };
    s
}

/// One answer, read whole.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn is_sse(&self) -> bool {
        self.header("content-type")
            .is_some_and(|c| c.to_ascii_lowercase().starts_with("text/event-stream"))
    }

    /// The JSON-RPC messages of the body: the JSON body, or each SSE event's data.
    fn messages(&self) -> Vec<Value> {
        if self.is_sse() {
            sse_messages(&mut Decoder::new(1 << 24), &self.body)
        } else {
            vec![serde_json::from_slice(&self.body).unwrap()]
        }
    }

    /// The message that answers `id`.
    fn reply(&self, id: i64) -> Value {
        self.messages()
            .into_iter()
            .find(|m| {
                m["id"] == json!(id) && (m.get("result").is_some() || m.get("error").is_some())
            })
            .unwrap_or_else(|| {
                panic!(
                    "no reply to {id} in {}",
                    String::from_utf8_lossy(&self.body)
                )
            })
    }
}

fn sse_messages(decoder: &mut Decoder, bytes: &[u8]) -> Vec<Value> {
    decoder
        .push(bytes)
        .into_iter()
        .filter_map(|item| match item {
            Item::Event(e) if !e.data.is_empty() => serde_json::from_str(&e.data).ok(),
            _ => None,
        })
        .collect()
}

fn request(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn initialize(id: i64) -> Value {
    request(
        id,
        "initialize",
        json!({"protocolVersion": mcp::LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    )
}

/// Sends one request to the gateway and returns the response head with its body unread.
async fn open(
    gw: &Gateway,
    method: Method,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> hyper::Response<hyper::body::Incoming> {
    let mut client = HttpClient::new(Clock::start());
    let mut h: Vec<(String, String)> = vec![
        ("content-type".into(), "application/json".into()),
        (
            "accept".into(),
            "application/json, text/event-stream".into(),
        ),
    ];
    h.extend(
        headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let out = Outgoing {
        method,
        uri: format!("http://{}/mcp", gw.addr).parse().unwrap(),
        headers: h,
        user_headers: &[],
        body: body.map(Value::to_string),
    };
    client
        .send(&out, false, Instant::now() + BOUND, &mut Vec::new())
        .await
        .unwrap()
}

async fn send(
    gw: &Gateway,
    method: Method,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Answer {
    let resp = open(gw, method, headers, body).await;
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let mut body = resp.into_body();
    let (bytes, end) = read_body(&mut body, 1 << 26, Instant::now() + BOUND).await;
    assert_eq!(end, BodyEnd::Complete);
    Answer {
        status,
        headers,
        body: bytes,
    }
}

async fn post(gw: &Gateway, headers: &[(&str, &str)], body: &Value) -> Answer {
    send(gw, Method::POST, headers, Some(body)).await
}

fn tool_names(list_reply: &Value) -> Vec<String> {
    list_reply["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// A legacy session through the relay against the demo's servers: one answering with SSE
/// streams (healthy-legacy), one with JSON bodies (healthy-modern, dual-era): handshake,
/// session id both ways, `tools/list`, `tools/call`, `DELETE`, and the session gone after it.
#[tokio::test]
async fn a_session_runs_through_the_relay_with_json_and_sse_replies() {
    let fleet = mcpulse_demo::start_fleet(Vec::new()).await.unwrap();
    for (kind, sse) in [
        (mcpulse_demo::Kind::HealthyLegacy, true),
        (mcpulse_demo::Kind::HealthyModern, false),
    ] {
        let gw = gateway(settings(fleet.url(kind).unwrap())).await;
        let init = post(&gw, &[], &initialize(1)).await;
        assert_eq!(init.status, 200, "{kind:?}: {init:?}");
        assert_eq!(init.is_sse(), sse, "{kind:?}");
        // A stream is marked unbufferable for a reverse proxy in front, as over stdio.
        assert_eq!(
            init.header("x-accel-buffering"),
            sse.then_some("no"),
            "{kind:?}"
        );
        assert!(init.reply(1)["result"]["serverInfo"]["name"].is_string());
        let session = init.header("mcp-session-id").unwrap().to_owned();
        let with = [
            ("mcp-session-id", session.as_str()),
            ("mcp-protocol-version", mcp::LEGACY),
        ];
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(post(&gw, &with, &note).await.status, 202);
        let list = post(&gw, &with, &request(2, "tools/list", json!({}))).await;
        assert_eq!(list.is_sse(), sse);
        assert_eq!(tool_names(&list.reply(2)), ["echo", "add"]);
        let call = post(
            &gw,
            &with,
            &request(
                3,
                "tools/call",
                json!({"name": "echo", "arguments": {"message": "hi there"}}),
            ),
        )
        .await;
        let text = call.reply(3)["result"]["content"][0]["text"].clone();
        assert!(text.as_str().unwrap().contains("hi there"), "{call:?}");
        let bye = send(&gw, Method::DELETE, &with, None).await;
        assert_eq!(bye.status, 200, "{kind:?}");
        let after = post(&gw, &with, &request(4, "tools/list", json!({}))).await;
        assert_eq!(
            after.status, 404,
            "{kind:?}: the upstream's own answer, relayed"
        );
        assert_eq!(gw.shared.upstream().process, ProcessState::Up);
    }
    // 2026-07-28, stateless: `Mcp-Method` and `Mcp-Name` reach the server, which checks them
    // against the body.
    let gw = gateway(settings(
        fleet.url(mcpulse_demo::Kind::HealthyModern).unwrap(),
    ))
    .await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": mcp::MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let call = request(
        5,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 2, "b": 3}, "_meta": meta}),
    );
    let modern = [
        ("mcp-protocol-version", mcp::MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", "add"),
    ];
    let a = post(&gw, &modern, &call).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert!(
        a.reply(5)["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains('5')
    );
    fleet.shutdown().await;
}

/// Which headers reach the upstream: the MCP ones and `Authorization` do; `Origin`, cookies,
/// `Accept-Encoding` and hop-by-hop headers do not; `Host` is the upstream's.
#[tokio::test]
async fn only_the_documented_headers_pass_and_host_is_the_upstreams() {
    let fake = FakeHttp::start_script(scenario::legacy_streamable(Framing::Json)).await;
    let gw = gateway(settings(fake.url("/mcp"))).await;
    let init = post(
        &gw,
        &[
            ("authorization", "Bearer sekret"),
            ("origin", "http://evil.example"),
            ("cookie", "a=b"),
            ("accept-encoding", "gzip"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            ("x-forwarded-for", "10.0.0.1"),
        ],
        &initialize(1),
    )
    .await;
    assert_eq!(init.header("mcp-session-id"), Some(LEGACY_SESSION));
    let with = [
        ("mcp-session-id", LEGACY_SESSION),
        ("mcp-protocol-version", mcp::LEGACY),
        ("last-event-id", "7"),
        ("connection", "keep-alive, x-custom"),
        ("x-custom", "1"),
    ];
    let list = post(&gw, &with, &request(2, "tools/list", json!({}))).await;
    assert_eq!(tool_names(&list.reply(2)), ["echo", "add"]);
    let seen = fake.requests();
    let host = fake.addr().to_string();
    assert_eq!(seen[0].header("host"), Some(host.as_str()));
    assert_eq!(seen[0].header("authorization"), Some("Bearer sekret"));
    assert!(seen[0].header("traceparent").is_some());
    for dropped in ["origin", "cookie", "accept-encoding", "x-forwarded-for"] {
        assert_eq!(seen[0].header(dropped), None, "{dropped} must not pass");
    }
    assert_eq!(seen[1].header("mcp-session-id"), Some(LEGACY_SESSION));
    assert_eq!(seen[1].header("mcp-protocol-version"), Some(mcp::LEGACY));
    assert_eq!(seen[1].header("last-event-id"), Some("7"));
    assert_eq!(seen[1].header("x-custom"), None);
    // Both requests used one kept-alive connection.
    assert_eq!(seen[1].connection, seen[0].connection);
}

/// A small upstream on a given address that answers every POST with an empty `tools/list`
/// result, until `stop` turns true (then it closes its connections, kept-alive ones too).
fn little_upstream(listener: tokio::net::TcpListener) -> (watch::Sender<bool>, JoinHandle<()>) {
    let (stop, mut stopped) = watch::channel(false);
    let app = Router::new().route(
        "/mcp",
        axum::routing::post(|body: Bytes| async move {
            let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            axum::Json(json!({"jsonrpc": "2.0", "id": msg["id"], "result": {"tools": []}}))
        }),
    );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|v| *v).await;
            })
            .await;
    });
    (stop, task)
}

/// Down and back: while the upstream is gone the client gets a fast, clear answer (502 for the
/// request that found it gone, then 503 with Retry-After without trying it again); once it is
/// back, a reconnect (after the backoff delay) makes requests flow again and is counted.
#[tokio::test]
async fn an_upstream_that_goes_down_answers_fast_and_works_again_when_back() {
    // Held while the upstream is down too: no other test is handed the port meanwhile.
    let port = mcpulse_testkit::port::KeptPort::new();
    let listener = port.listen();
    let addr = port.addr();
    let (stop, task) = little_upstream(listener);
    let gw = gateway(settings(format!("http://{addr}/mcp"))).await;
    let ok = post(&gw, &[], &request(1, "tools/list", json!({}))).await;
    assert_eq!(ok.status, 200);
    assert_eq!(gw.shared.upstream().process, ProcessState::Up);

    stop.send(true).unwrap();
    tokio::time::timeout(BOUND, task).await.unwrap().unwrap();
    let t = Instant::now();
    let gone = post(&gw, &[], &request(7, "tools/call", json!({"name": "echo"}))).await;
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(gone.status, 502, "{gone:?}");
    let err = gone.reply(7);
    assert_eq!(err["error"]["code"], codes::UPSTREAM_UNAVAILABLE);
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("mcpulse gateway: upstream http://"),
        "{message}"
    );
    assert!(
        message.contains(&addr.to_string()) && message.contains("unreachable"),
        "{message}"
    );
    assert_eq!(gw.shared.upstream().process, ProcessState::Backoff);

    let t = Instant::now();
    let fast = post(&gw, &[], &request(8, "tools/list", json!({}))).await;
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(fast.status, 503, "{fast:?}");
    assert!(fast.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    let message = fast.reply(8)["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("unavailable") && message.contains("reconnect"),
        "{message}"
    );
    assert_eq!(gw.shared.upstream().reconnects, 0);

    // Back on the same port: within a few backoff delays requests flow again.
    let (_stop, _task) = little_upstream(port.listen());
    let deadline = Instant::now() + BOUND;
    loop {
        let a = post(&gw, &[], &request(9, "tools/list", json!({}))).await;
        if a.status == 200 {
            assert!(a.reply(9)["result"]["tools"].is_array());
            break;
        }
        assert_eq!(a.status, 503, "{a:?}");
        assert!(Instant::now() < deadline, "the upstream never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let up = gw.shared.upstream();
    assert_eq!(up.process, ProcessState::Up);
    assert_eq!(up.reconnects, 1);
}

/// An upstream that was never reachable: the first request fails fast (502), the state is
/// Backoff, and no reconnect is counted when it first comes up.
#[tokio::test]
async fn a_refused_connect_answers_fast_with_a_json_rpc_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let gw = gateway(settings(format!("http://{addr}/mcp"))).await;
    let t = Instant::now();
    let a = post(&gw, &[], &request(3, "initialize", json!({}))).await;
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(a.status, 502);
    assert_eq!(a.header("content-type"), Some("application/json"));
    let err = a.reply(3);
    assert_eq!(
        err["error"]["data"]["upstream"],
        format!("http://{addr}/mcp")
    );
    assert_eq!(gw.shared.upstream().process, ProcessState::Backoff);
}

/// A 5xx from the upstream becomes a 502 whose error names the upstream and quotes what it
/// said, inert.
#[tokio::test]
async fn a_5xx_answers_with_an_inert_error() {
    let body = format!("<h1>maintenance</h1>{}", scenario::HOSTILE);
    let fake = FakeHttp::start(move |_| Reply::html(503, &body)).await;
    let gw = gateway(settings(fake.url("/mcp"))).await;
    let a = post(&gw, &[], &request(5, "tools/list", json!({}))).await;
    assert_eq!(a.status, 502);
    let message = a.reply(5)["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains("HTTP 503") && message.contains("maintenance"),
        "{message}"
    );
    assert!(
        !message.contains('\x1b') && !message.contains('\n'),
        "{message:?}"
    );
}

/// One 503 (a busy worker, a proxy's hiccup) does not take the upstream out: an HTTP answer
/// proves it reachable, so the next client's request still reaches it, and the upstream stays
/// Up (readiness is not failed by it). Only a failed connect marks it down.
#[tokio::test]
async fn one_5xx_does_not_take_the_upstream_out_for_other_clients() {
    let n = Arc::new(AtomicUsize::new(0));
    let seen = n.clone();
    let fake = FakeHttp::start(move |req| {
        if seen.fetch_add(1, Ordering::SeqCst) == 1 {
            return Reply::html(503, "busy");
        }
        Reply::json(
            200,
            &json!({"jsonrpc": "2.0", "id": req.rpc_id(), "result": {"tools": []}}),
        )
    })
    .await;
    let mut s = settings(fake.url("/mcp"));
    s.reconnect = Backoff {
        initial: Duration::from_secs(10),
        max: Duration::from_secs(10),
    };
    let gw = gateway(s).await;
    assert_eq!(
        post(&gw, &[], &request(1, "tools/list", json!({})))
            .await
            .status,
        200
    );
    assert_eq!(
        post(&gw, &[], &request(2, "tools/list", json!({})))
            .await
            .status,
        502
    );
    assert_eq!(gw.shared.upstream().process, ProcessState::Up);
    let other = post(&gw, &[], &request(3, "tools/list", json!({}))).await;
    assert_eq!(other.status, 200, "{other:?}");
    assert!(other.reply(3)["result"]["tools"].is_array());
    assert_eq!(
        fake.requests().len(),
        3,
        "every request reached the upstream"
    );
    assert_eq!(gw.shared.upstream().process, ProcessState::Up);
}

/// A stream that the upstream ends, or that breaks, before the reply: the client gets a
/// JSON-RPC error for its request id as the stream's last event, after what came before.
#[tokio::test]
async fn an_upstream_that_dies_mid_stream_gets_the_client_an_error_for_its_request() {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let rx = Mutex::new(Some(rx));
    let fake = FakeHttp::start(move |_| {
        let pieces = match rx.lock().unwrap().take() {
            Some(rx) => vec![Piece::Channel(rx), Piece::Pending],
            None => vec![],
        };
        Reply::chunked(200, "text/event-stream", pieces)
    })
    .await;
    let gw = gateway(settings(fake.url("/mcp"))).await;
    let call = request(42, "tools/call", json!({"name": "slow"}));
    let resp = open(&gw, Method::POST, &[], Some(&call)).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let progress = mcp::sse_event(
        Some("message"),
        Some("1"),
        &mcp::progress(1, 50).to_string(),
    );
    tx.send(progress.into_bytes()).unwrap();
    let mut decoder = Decoder::new(1 << 20);
    let first = match next_chunk(&mut body, Instant::now() + BOUND).await {
        Chunk::Data(d) => sse_messages(&mut decoder, &d),
        _ => panic!("no progress event relayed"),
    };
    assert_eq!(first[0]["method"], "notifications/progress");
    // The upstream dies: its connection closes mid-body.
    let t = Instant::now();
    drop(fake);
    let (rest, end) = read_body(&mut body, 1 << 20, Instant::now() + BOUND).await;
    assert_eq!(end, BodyEnd::Complete);
    assert!(t.elapsed() < Duration::from_secs(2));
    let last = sse_messages(&mut decoder, &rest);
    assert_eq!(last.len(), 1, "{last:?}");
    assert_eq!(last[0]["id"], 42);
    assert_eq!(last[0]["error"]["code"], codes::SERVER_RESTARTED);
    let message = last[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains("broke the stream"), "{message}");

    // A stream that ends cleanly without the reply is answered the same way.
    let fake = FakeHttp::start(|_| {
        Reply::sse(vec![mcp::sse_event(
            Some("message"),
            Some("1"),
            &mcp::progress(1, 10).to_string(),
        )])
    })
    .await;
    let gw = gateway(settings(fake.url("/mcp"))).await;
    let a = post(&gw, &[], &request(43, "tools/call", json!({"name": "x"}))).await;
    let msgs = a.messages();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(
        msgs[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ended the stream before replying")
    );
}

/// An event over max_message_size is not relayed: the stream is cut, with an error for the
/// request naming the limit.
#[tokio::test]
async fn a_message_over_the_cap_cuts_the_stream_with_a_clear_error() {
    let big = mcp::result(
        &json!(9),
        json!({"content": [{"type": "text", "text": "x".repeat(200_000)}]}),
    );
    let fake = FakeHttp::start(move |_| {
        Reply::sse(vec![mcp::sse_event(
            Some("message"),
            Some("1"),
            &big.to_string(),
        )])
    })
    .await;
    let mut s = settings(fake.url("/mcp"));
    s.max_message_size = 64 * 1024;
    let gw = gateway(s).await;
    let a = post(&gw, &[], &request(9, "tools/call", json!({"name": "big"}))).await;
    assert!(
        a.body.len() < 4096,
        "the big message was relayed: {} bytes",
        a.body.len()
    );
    let msgs = a.messages();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0]["id"], 9);
    assert_eq!(msgs[0]["error"]["code"], codes::MESSAGE_TOO_LARGE);
    let message = msgs[0]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("max_message_size (65536 bytes)"),
        "{message}"
    );
}

/// A small upstream answering every request with an event stream whose body `body` makes.
async fn event_stream_upstream<B>(
    body: impl Fn() -> B + Clone + Send + Sync + 'static,
) -> (SocketAddr, JoinHandle<()>)
where
    B: hyper::body::Body<Data = Bytes, Error = std::convert::Infallible> + Send + 'static,
{
    let app = Router::new().route(
        "/mcp",
        any(move || {
            let body = body();
            async move {
                http::Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(axum::body::Body::new(body))
                    .unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, server)
}

/// An endless event stream, 64 KiB per event, counting what it has produced.
struct Endless {
    produced: Arc<AtomicUsize>,
    event: Bytes,
}

impl hyper::body::Body for Endless {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.produced.fetch_add(self.event.len(), Ordering::SeqCst);
        Poll::Ready(Some(Ok(Frame::data(self.event.clone()))))
    }
}

/// A client that stops reading holds the stream still: the relay stops reading the upstream
/// (backpressure through a bounded buffer), rather than buffering an endless stream.
#[tokio::test]
async fn a_slow_reader_holds_the_upstream_back_instead_of_filling_memory() {
    let produced = Arc::new(AtomicUsize::new(0));
    let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "y".repeat(64 * 1024)}});
    let event = Bytes::from(mcp::sse_event(Some("message"), None, &note.to_string()));
    let p = produced.clone();
    let (addr, server) = event_stream_upstream(move || Endless {
        produced: p.clone(),
        event: event.clone(),
    })
    .await;
    let mut s = settings(format!("http://{addr}/mcp"));
    s.max_message_size = 1 << 20;
    let gw = gateway(s).await;
    let resp = open(&gw, Method::GET, &[("accept", "text/event-stream")], None).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut decoder = Decoder::new(1 << 20);
    let mut seen = 0;
    while seen < 3 {
        match next_chunk(&mut body, Instant::now() + BOUND).await {
            Chunk::Data(d) => seen += sse_messages(&mut decoder, &d).len(),
            _ => panic!("the stream ended"),
        }
    }
    // Stop reading: the upstream soon stalls (socket buffers on both hops fill, the relay's
    // buffer is full), far below what an unbounded relay would have taken in.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stalled = produced.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = produced.load(Ordering::SeqCst);
    assert!(
        later < 64 << 20,
        "{later} bytes produced for a client that read 3 events"
    );
    assert!(
        later - stalled <= 256 * 1024,
        "the upstream was not held back: {stalled} then {later}"
    );
    // Reading again lets it go on (once what the buffers hold has been read).
    let deadline = Instant::now() + BOUND;
    while produced.load(Ordering::SeqCst) == later {
        match next_chunk(&mut body, deadline).await {
            Chunk::Data(_) => {}
            _ => panic!("the stream ended or stalled for good"),
        }
    }
    // The client goes away: the relay closes the upstream stream (how an HTTP client cancels),
    // and the upstream drops its body.
    drop(body);
    let deadline = Instant::now() + BOUND;
    while Arc::strong_count(&produced) > 2 {
        assert!(
            Instant::now() < deadline,
            "the upstream stream was left open"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.abort();
}

/// A stream of nothing but keep-alive comments (`: ka`) every 50 ms, counted in `open` while
/// the upstream's side of it is open.
struct KeepAlives {
    open: Arc<AtomicUsize>,
    tick: tokio::time::Interval,
}

impl Drop for KeepAlives {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl hyper::body::Body for KeepAlives {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.tick
            .poll_tick(cx)
            .map(|_| Some(Ok(Frame::data(Bytes::from_static(b": ka\n\n")))))
    }
}

/// A small upstream whose every answer is a stream of keep-alives only; with how many of its
/// streams are open.
async fn keep_alive_upstream() -> (SocketAddr, Arc<AtomicUsize>, JoinHandle<()>) {
    let open = Arc::new(AtomicUsize::new(0));
    let o = open.clone();
    let (addr, server) = event_stream_upstream(move || {
        o.fetch_add(1, Ordering::SeqCst);
        KeepAlives {
            open: o.clone(),
            tick: tokio::time::interval(Duration::from_millis(50)),
        }
    })
    .await;
    (addr, open, server)
}

/// A client that leaves a quiet stream (keep-alive comments only, which are not relayed, so
/// the relay never tries a send): the relay still notices, and closes the upstream stream.
#[tokio::test]
async fn a_client_leaving_a_quiet_stream_closes_the_upstream_stream() {
    let (addr, streams, server) = keep_alive_upstream().await;
    let gw = gateway(settings(format!("http://{addr}/mcp"))).await;
    let resp = open(&gw, Method::GET, &[("accept", "text/event-stream")], None).await;
    assert_eq!(resp.status(), 200);
    let body = resp.into_body();
    // The upstream stream is open and has sent a few keep-alives.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        streams.load(Ordering::SeqCst),
        1,
        "the upstream stream is not open"
    );
    drop(body);
    let deadline = Instant::now() + Duration::from_secs(3);
    while streams.load(Ordering::SeqCst) > 0 {
        assert!(
            Instant::now() < deadline,
            "the upstream stream was left open after the client left"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.abort();
}

/// A frozen upstream (accepts, never answers; sends a JSON head and no body; streams
/// keep-alives and never the reply) hangs no client: past `reply_timeout` each request gets a
/// JSON-RPC error for its id naming the upstream and the timeout. A GET stream, with no reply
/// pending, is not cut.
#[tokio::test]
async fn a_frozen_upstream_answers_each_request_with_a_timeout_error() {
    let keep_alive = || Piece::Repeat {
        data: b": ka\n\n".to_vec(),
        every: Duration::from_millis(50),
    };
    let fake = FakeHttp::start(move |req| {
        if req.rpc_method().as_deref() == Some("notifications/cancelled") {
            return Reply::accepted();
        }
        match req.rpc_id().and_then(|i| i.as_i64()) {
            Some(1) => Reply::silence(),
            Some(2) => Reply::chunked(200, "application/json", vec![Piece::Pending]),
            _ => Reply::chunked(200, "text/event-stream", vec![keep_alive()]),
        }
    })
    .await;
    let mut s = settings(fake.url("/mcp"));
    s.reply_timeout = Duration::from_millis(300);
    let gw = gateway(s).await;
    // A legacy session's requests (2025-11-25): a closed stream is no cancellation there.
    let session = [
        ("mcp-session-id", "s-77"),
        ("mcp-protocol-version", "2025-11-25"),
        ("authorization", "Bearer tok"),
    ];
    for (id, what) in [(1, "no head"), (2, "a JSON head"), (3, "an SSE stream")] {
        let t = Instant::now();
        let a = post(
            &gw,
            &session,
            &request(id, "tools/call", json!({"name": "slow"})),
        )
        .await;
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(3),
            "{what}: took {took:?}"
        );
        let err = a.reply(id);
        assert_eq!(
            err["error"]["code"],
            codes::REQUEST_TIMEOUT,
            "{what}: {a:?}"
        );
        let message = err["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&fake.addr().to_string())
                && message.contains("300ms")
                && message.contains("reply_timeout"),
            "{what}: {message}"
        );
    }
    // Each counted once, as the gateway's error (head, JSON body and SSE paths alike).
    assert_eq!(
        request_lines(&gw),
        [
            r#"mcpulse_gateway_requests_total{method="tools/call",tool="_other",outcome="gateway_error"} 3"#
        ]
    );
    // The upstream was told, for each, in the request's session and with its credentials.
    let cancels = cancellations(&fake, 3).await;
    let mut ids: Vec<i64> = cancels
        .iter()
        .map(|c| c.json().unwrap()["params"]["requestId"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3]);
    for c in &cancels {
        assert_eq!(
            c.json().unwrap()["params"]["reason"],
            "no reply within the gateway's reply_timeout"
        );
        assert_eq!(c.header("mcp-session-id"), Some("s-77"));
        assert_eq!(c.header("mcp-protocol-version"), Some("2025-11-25"));
        assert_eq!(c.header("authorization"), Some("Bearer tok"));
        assert_eq!(c.header("content-type"), Some("application/json"));
    }
    // A frozen reply is no sign the upstream is down.
    assert_eq!(gw.shared.upstream().process, ProcessState::Up);
    let resp = open(&gw, Method::GET, &[("accept", "text/event-stream")], None).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let next = next_chunk(&mut body, Instant::now() + Duration::from_millis(800)).await;
    assert!(
        matches!(next, Chunk::Timeout),
        "the GET stream was cut or relayed something"
    );
}

/// The `notifications/cancelled` the fake received, once there are `n` (bounded wait: the
/// gateway sends them in the background).
async fn cancellations(fake: &FakeHttp, n: usize) -> Vec<mcpulse_testkit::http::Request> {
    let until = Instant::now() + BOUND;
    loop {
        let got: Vec<_> = fake
            .requests()
            .into_iter()
            .filter(|r| r.rpc_method().as_deref() == Some("notifications/cancelled"))
            .collect();
        if got.len() >= n || Instant::now() > until {
            assert_eq!(got.len(), n, "notifications/cancelled received");
            return got;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_timed_out_modern_request_or_initialize_is_not_cancelled_by_notification() {
    let fake = FakeHttp::start(move |req| {
        if req.rpc_method().as_deref() == Some("notifications/cancelled") {
            return Reply::accepted();
        }
        Reply::silence()
    })
    .await;
    let mut s = settings(fake.url("/mcp"));
    s.reply_timeout = Duration::from_millis(200);
    let gw = gateway(s).await;
    // 2026-07-28: the closed stream is the cancellation. `initialize` must not be cancelled.
    let modern = [("mcp-protocol-version", "2026-07-28")];
    let a = post(
        &gw,
        &modern,
        &request(1, "tools/call", json!({"name": "x"})),
    )
    .await;
    assert_eq!(a.reply(1)["error"]["code"], codes::REQUEST_TIMEOUT);
    let a = post(&gw, &[], &initialize(2)).await;
    assert_eq!(a.reply(2)["error"]["code"], codes::REQUEST_TIMEOUT);
    // A legacy request after them is: its cancellation is the only one.
    let a = post(&gw, &[], &request(3, "tools/call", json!({"name": "x"}))).await;
    assert_eq!(a.reply(3)["error"]["code"], codes::REQUEST_TIMEOUT);
    let cancels = cancellations(&fake, 1).await;
    assert_eq!(cancels[0].json().unwrap()["params"]["requestId"], 3);
    tokio::time::sleep(Duration::from_millis(200)).await;
    cancellations(&fake, 1).await;
}

/// The `mcpulse_gateway_requests_total` lines of the exposition.
fn request_lines(gw: &Gateway) -> Vec<String> {
    gw.shared
        .metrics
        .encode()
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("mcpulse_gateway_requests_total{"))
        .map(str::to_owned)
        .collect()
}

/// The gateway's own probe traffic (the header with this process's token, from loopback) is
/// kept out of the request metrics; the header with any other value (a client hiding its
/// traffic) is counted.
#[tokio::test]
async fn own_probe_traffic_is_kept_out_of_the_metrics_and_cannot_be_faked() {
    let fake = FakeHttp::start_script(scenario::legacy_streamable(Framing::Json)).await;
    let gw = gateway(settings(fake.url("/mcp"))).await;
    let token = mcpulse_gateway::checks::probe_token();
    let own = [(mcpulse_gateway::checks::PROBE_HEADER, token)];
    assert_eq!(post(&gw, &own, &initialize(1)).await.status, 200);
    assert_eq!(request_lines(&gw), Vec::<String>::new());
    let faked = [(mcpulse_gateway::checks::PROBE_HEADER, "1")];
    assert_eq!(post(&gw, &faked, &initialize(2)).await.status, 200);
    assert_eq!(
        request_lines(&gw),
        [r#"mcpulse_gateway_requests_total{method="initialize",tool="",outcome="ok"} 1"#]
    );
}

/// A tool gets a label of its own only once the upstream listed it (in a relayed `tools/list`
/// result, JSON or SSE): junk names a client calls share `_other`, so they cannot use up the
/// labels. The outcome label follows the reply on both paths.
#[tokio::test]
async fn only_tools_the_upstream_listed_get_a_metrics_label() {
    for framing in [Framing::Json, Framing::Sse] {
        let fake = FakeHttp::start_script(scenario::legacy_streamable(framing)).await;
        let gw = gateway(settings(fake.url("/mcp"))).await;
        let init = post(&gw, &[], &initialize(1)).await;
        let session = init.header("mcp-session-id").unwrap().to_owned();
        let with = [
            ("mcp-session-id", session.as_str()),
            ("mcp-protocol-version", mcp::LEGACY),
        ];
        let call = |id, name: &str| request(id, "tools/call", json!({"name": name}));
        post(&gw, &with, &call(2, "junk-before")).await;
        post(&gw, &with, &request(3, "tools/list", json!({}))).await;
        post(&gw, &with, &call(4, "echo")).await;
        post(&gw, &with, &call(5, "junk-after")).await;
        // An unknown method is Metrics' `_other`, as on every path.
        post(&gw, &with, &request(6, "x/made-up", json!({}))).await;
        let mut lines = request_lines(&gw);
        lines.sort();
        assert_eq!(
            lines,
            [
                r#"mcpulse_gateway_requests_total{method="_other",tool="",outcome="rpc_error"} 1"#,
                r#"mcpulse_gateway_requests_total{method="initialize",tool="",outcome="ok"} 1"#,
                r#"mcpulse_gateway_requests_total{method="tools/call",tool="_other",outcome="rpc_error"} 2"#,
                r#"mcpulse_gateway_requests_total{method="tools/call",tool="echo",outcome="rpc_error"} 1"#,
                r#"mcpulse_gateway_requests_total{method="tools/list",tool="",outcome="ok"} 1"#,
            ],
            "{framing:?}"
        );
    }
}

/// Debug output (what a `{:?}` in a log line shows) never carries the URL's secrets: userinfo
/// and query values are redacted in the settings and in the relay.
#[tokio::test]
async fn debug_output_redacts_the_upstreams_secrets() {
    let url = "http://alice:s3cr3t-pw@127.0.0.1:9/mcp?token=hunter2&x=1";
    let settings = HttpSettings::new(url);
    let relay = HttpUpstream::new(settings.clone(), Arc::new(Shared::default()));
    for shown in [format!("{settings:?}"), format!("{relay:?}")] {
        assert!(
            !shown.contains("s3cr3t-pw") && !shown.contains("hunter2"),
            "{shown}"
        );
        assert!(shown.contains("127.0.0.1:9/mcp"), "{shown}");
    }
}

/// `mcpulse_gateway_active_sessions` for an HTTP upstream: a session id first seen on an
/// `initialize` reply opens one, a `DELETE` answered 2xx closes it; the gateway's own probes
/// are not clients' sessions.
#[tokio::test]
async fn sessions_through_the_upstream_are_counted() {
    let fake = FakeHttp::start_script(scenario::legacy_streamable(Framing::Sse)).await;
    let gw = gateway(settings(fake.url("/mcp"))).await;
    let gauge = |gw: &Gateway| {
        gw.shared
            .metrics
            .encode()
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("mcpulse_gateway_active_sessions ")
                    .map(str::to_owned)
            })
            .unwrap()
    };
    assert_eq!(gauge(&gw), "0");
    let own = [(
        mcpulse_gateway::checks::PROBE_HEADER,
        mcpulse_gateway::checks::probe_token(),
    )];
    post(&gw, &own, &initialize(1)).await;
    assert_eq!(gauge(&gw), "0", "the gateway's own probe");
    let init = post(&gw, &[], &initialize(2)).await;
    assert_eq!(init.header("mcp-session-id"), Some(LEGACY_SESSION));
    assert_eq!(gauge(&gw), "1");
    let with = [
        ("mcp-session-id", LEGACY_SESSION),
        ("mcp-protocol-version", mcp::LEGACY),
    ];
    post(&gw, &with, &request(3, "tools/list", json!({}))).await;
    assert_eq!(gauge(&gw), "1");
    assert_eq!(send(&gw, Method::DELETE, &with, None).await.status, 200);
    assert_eq!(gauge(&gw), "0");
}

/// The opt-in health tool: listed after the upstream's tools (JSON and SSE replies), answered by
/// the gateway (the upstream never sees the call); without the setting, nothing is added.
#[tokio::test]
async fn the_health_tool_is_listed_and_answered_by_the_gateway() {
    for framing in [Framing::Json, Framing::Sse] {
        let fake = FakeHttp::start_script(scenario::legacy_streamable(framing)).await;
        let mut s = settings(fake.url("/mcp"));
        s.health_tool = Some("gateway_health".to_owned());
        let gw = gateway(s).await;
        let init = post(&gw, &[], &initialize(1)).await;
        assert_eq!(init.status, 200);
        let with = [
            ("mcp-session-id", LEGACY_SESSION),
            ("mcp-protocol-version", mcp::LEGACY),
        ];
        let list = post(&gw, &with, &request(2, "tools/list", json!({}))).await;
        assert_eq!(list.is_sse(), framing == Framing::Sse);
        assert_eq!(
            tool_names(&list.reply(2)),
            ["echo", "add", "gateway_health"]
        );
        let call = post(
            &gw,
            &with,
            &request(
                3,
                "tools/call",
                json!({"name": "gateway_health", "arguments": {}}),
            ),
        )
        .await;
        assert_eq!(call.status, 200);
        let reply = call.reply(3);
        // The health side's result (its content is theirs to test), as the gateway's own reply.
        assert!(reply["result"]["content"].is_array(), "{reply}");
        assert!(
            !fake.methods().contains(&"tools/call".to_owned()),
            "{:?}",
            fake.methods()
        );
    }
    let fake = FakeHttp::start_script(scenario::legacy_streamable(Framing::Json)).await;
    let gw = gateway(settings(fake.url("/mcp"))).await;
    post(&gw, &[], &initialize(1)).await;
    let with = [
        ("mcp-session-id", LEGACY_SESSION),
        ("mcp-protocol-version", mcp::LEGACY),
    ];
    let list = post(&gw, &with, &request(2, "tools/list", json!({}))).await;
    assert_eq!(tool_names(&list.reply(2)), ["echo", "add"]);
}

/// `warm_up` connects before any request: Up for a reachable upstream, Backoff (with
/// reconnects under way) for one that refuses.
#[tokio::test]
async fn warm_up_connects_before_the_first_request() {
    let fake = FakeHttp::start_script(scenario::legacy_streamable(Framing::Json)).await;
    let shared = Arc::new(Shared::default());
    let relay = HttpUpstream::new(settings(fake.url("/mcp")), shared.clone());
    assert_eq!(shared.upstream().process, ProcessState::Starting);
    relay.warm_up().await;
    assert_eq!(shared.upstream().process, ProcessState::Up);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let shared = Arc::new(Shared::default());
    let relay = HttpUpstream::new(settings(format!("http://{addr}/mcp")), shared.clone());
    relay.warm_up().await;
    assert_eq!(shared.upstream().process, ProcessState::Backoff);
}

/// A redirect is not followed nor relayed: the client learns the configured URL is wrong.
#[tokio::test]
async fn a_redirect_is_answered_with_an_error_that_says_where_it_points() {
    let fake = FakeHttp::start(|_| {
        Reply::status(308).header("location", "http://elsewhere.internal/mcp?token=abc")
    })
    .await;
    let gw = gateway(settings(fake.url("/mcp"))).await;
    let a = post(&gw, &[], &request(1, "tools/list", json!({}))).await;
    assert_eq!(a.status, 502);
    let message = a.reply(1)["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains("http://elsewhere.internal/mcp"),
        "{message}"
    );
    assert!(
        !message.contains("abc"),
        "query values are redacted: {message}"
    );
}

/// A connection that breaks after the request went out is answered `-32080` (the request may
/// have been acted on: it is not sent again), and it does not mark the upstream down: the next
/// request is relayed again, not failed fast.
#[tokio::test]
async fn a_connection_lost_after_sending_is_an_error_for_that_request_only() {
    let hangs_up = RawListener::start("127.0.0.1", "").await;
    let gw = gateway(settings(format!("http://{}/mcp", hangs_up.addr()))).await;
    for id in [1, 2] {
        let a = post(&gw, &[], &request(id, "tools/call", json!({"name": "x"}))).await;
        assert_eq!(a.status, 502, "{a:?}");
        let err = a.reply(id);
        assert_eq!(err["error"]["code"], codes::SERVER_RESTARTED, "{err}");
        let message = err["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("broke the connection before answering"),
            "{message}"
        );
    }
    assert_eq!(hangs_up.connections(), 2);
    assert_ne!(gw.shared.upstream().process, ProcessState::Backoff);
}

/// An `https://` upstream: dialled with the probe's TLS, trusting a private CA given in the
/// settings; without it, the client gets the probe's sentence about the certificate.
#[tokio::test]
async fn an_https_upstream_with_a_private_ca() {
    let ca = TestCa::new();
    let config = TestCa::server_config(&ca.server_cert(30));
    let fake = FakeHttp::start_tls(scenario::legacy_streamable(Framing::Json), config).await;
    let untrusted = gateway(settings(fake.url("/mcp"))).await;
    let a = post(&untrusted, &[], &initialize(1)).await;
    assert_eq!(a.status, 502);
    let message = a.reply(1)["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains("not signed by a trusted certificate authority"),
        "{message}"
    );

    let mut s = settings(fake.url("/mcp"));
    s.extra_roots = mcpulse_transport::http::read_pem_certs(ca.pem().as_bytes()).unwrap();
    let gw = gateway(s).await;
    let with = [
        ("mcp-session-id", LEGACY_SESSION),
        ("mcp-protocol-version", mcp::LEGACY),
    ];
    assert_eq!(post(&gw, &[], &initialize(1)).await.status, 200);
    for id in 2..5 {
        let list = post(&gw, &with, &request(id, "tools/list", json!({}))).await;
        assert_eq!(tool_names(&list.reply(id)), ["echo", "add"]);
    }
    // One TLS connection, kept alive for every request.
    let seen = fake.requests();
    assert_eq!(seen.len(), 4);
    assert!(
        seen.iter()
            .all(|r| r.connection == seen[0].connection && r.scheme == "https")
    );
}

/// A relayed stream gets the gateway's keep-alives at the gateway's cadence: the upstream's
/// own comments (every 50 ms here) are not relayed, so they neither double it nor replace it.
#[tokio::test]
async fn a_relayed_stream_gets_the_gateways_keepalives_not_the_upstreams() {
    let (addr, _, server) = keep_alive_upstream().await;
    let mut s = settings(format!("http://{addr}/mcp"));
    s.keepalive = Some(Duration::from_millis(300));
    let gw = gateway(s).await;
    let t0 = Instant::now();
    let resp = open(&gw, Method::GET, &[("accept", "text/event-stream")], None).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut seen = Vec::new();
    while t0.elapsed() < Duration::from_millis(1100) {
        match next_chunk(&mut body, t0 + Duration::from_millis(1100)).await {
            Chunk::Data(d) => seen.push((t0.elapsed(), d)),
            Chunk::Timeout => break,
            _ => panic!("the stream ended or broke"),
        }
    }
    assert!(
        seen.iter().all(|(_, d)| d.as_ref() == b": keep-alive\n"),
        "only the gateway's comments: {seen:?}"
    );
    // 1.1 s at 300 ms: 3 (2 on a loaded machine); the upstream's 50 ms would be 20.
    assert!((2..=3).contains(&seen.len()), "{seen:?}");
    for pair in seen.windows(2) {
        assert!(
            pair[1].0 >= pair[0].0 + Duration::from_millis(298),
            "{seen:?}"
        );
    }
    server.abort();
}

/// A client that stops reading its stream after the reply has been relayed: no request
/// deadline bounds the sends any more, so `stalled_client` does. The stream ends and the
/// upstream's stream is closed, instead of both being held for as long as the client stays
/// connected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_after_its_reply_does_not_hold_the_upstream() {
    use tokio::io::AsyncWriteExt;
    let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "x".repeat(64 * 1024)}});
    let up = FakeHttp::start(move |req: &mcpulse_testkit::http::Request| {
        let id = req.rpc_id().unwrap_or(Value::Null);
        let reply = json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}});
        Reply::chunked(
            200,
            "text/event-stream",
            vec![
                Piece::Data(format!("event: message\ndata: {reply}\n\n").into_bytes()),
                // After its reply the upstream goes on talking, for ever.
                Piece::Repeat {
                    data: format!("event: message\ndata: {note}\n\n").into_bytes(),
                    every: Duration::from_millis(1),
                },
            ],
        )
    })
    .await;
    let mut s = settings(up.url("/mcp"));
    s.stalled_client = Duration::from_millis(300);
    let gw = gateway(s).await;
    // A client that sends the call and never reads a byte.
    let body = request(7, "tools/call", json!({"name": "echo"})).to_string();
    let mut client = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n",
        gw.addr,
        body.len()
    );
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(body.as_bytes()).await.unwrap();
    let t0 = Instant::now();
    loop {
        if up
            .abandoned()
            .iter()
            .any(|a| a.request.rpc_id() == Some(json!(7)))
        {
            break;
        }
        assert!(t0.elapsed() < BOUND, "the upstream stream is still held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(client);
}

/// Media types are case-insensitive: an upstream answering `Text/Event-Stream` is relayed as
/// the SSE stream it is (it was read as one JSON body, which it is not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_answer_is_recognised_whatever_the_case_of_its_media_type() {
    let up = FakeHttp::start(move |req: &mcpulse_testkit::http::Request| {
        let id = req.rpc_id().unwrap_or(Value::Null);
        let reply = json!({"jsonrpc": "2.0", "id": id, "result": {"tools": []}});
        Reply::chunked(
            200,
            "Text/Event-Stream",
            vec![Piece::Data(
                format!("event: message\ndata: {reply}\n\n").into_bytes(),
            )],
        )
    })
    .await;
    let gw = gateway(settings(up.url("/mcp"))).await;
    let a = post(&gw, &[], &request(3, "tools/list", json!({}))).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.reply(3)["result"]["tools"], json!([]), "{a:?}");
    // Judged as the reply it is (read as a JSON body, it was no reply at all).
    let lines = request_lines(&gw);
    assert!(
        lines.iter().any(|l| l.contains("method=\"tools/list\"")
            && l.contains("outcome=\"ok\"")
            && l.ends_with(" 1")),
        "{lines:?}"
    );
}
