//! The kit's tool side over a real rmcp server: the opt-in `health_check` tool, and the
//! per-tool policies (timeout with a tool that sleeps, the client's cancellation, the
//! concurrency limit, the circuit breaker turning readiness degraded), and progress.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Session, frames, get, reply, serve};
use mcpulse_kit::check::Outcome;
use mcpulse_kit::{Check, Health, Kit, ToolPolicy};
use mcpulse_policy::breaker::BreakerPolicy;
use mcpulse_policy::window::WindowSpec;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn health() -> Health {
    Health::new("kit-test", "1").with_check(
        Check::from_fn("cache", || async {
            Outcome::degraded("cache is warming up")
        })
        .critical(false)
        .interval(Duration::from_millis(100)),
    )
}

#[tokio::test]
async fn the_health_tool_is_opt_in_and_answers_structured_content_with_a_text_fallback() {
    let plain = serve(Some(Kit::new(health()))).await;
    let mut s = Session::open(&plain.url()).await;
    let names: Vec<String> = s
        .list()
        .await
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(!names.contains(&"health_check".to_owned()), "{names:?}");

    let served = serve(Some(Kit::new(health()).health_tool("health_check"))).await;
    for _ in 0..100 {
        if served.health.runs("cache") > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut s = Session::open(&served.url()).await;
    let tools = s.list().await;
    let tool = tools.iter().find(|t| t["name"] == "health_check").unwrap();
    assert_eq!(tool["annotations"]["readOnlyHint"], true);
    assert_eq!(
        tool["outputSchema"]["required"],
        json!(["status", "checks"])
    );
    let r = s.call("health_check", json!({})).await;
    assert_eq!(r["isError"], false);
    let sc = &r["structuredContent"];
    assert_eq!(sc["status"], "degraded");
    assert_eq!(sc["checks"]["cache"]["status"], "warn");
    assert_eq!(
        sc["checks"]["tools"]["observedValue"], 4,
        "the health tool is not counted"
    );
    let text: serde_json::Value = serde_json::from_str(&Session::text(&r)).unwrap();
    assert_eq!(&text, sc);
    // The same status as /readyz.
    assert_eq!(get(served.addr, "/readyz").await.json()["status"], "warn");
}

#[tokio::test]
async fn a_tool_past_its_timeout_answers_is_error_naming_the_cause() {
    let kit = Kit::new(health()).tool(
        "sleep",
        ToolPolicy::new().timeout(Duration::from_millis(300)),
    );
    let served = serve(Some(kit)).await;
    let mut s = Session::open(&served.url()).await;
    let t = Instant::now();
    let r = s.call("sleep", json!({"ms": 60_000})).await;
    let took = t.elapsed();
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert_eq!(r["isError"], true);
    assert_eq!(
        Session::text(&r),
        "tool sleep timed out after 300ms (timeout): the call was abandoned"
    );
    // The tool's future was dropped, not left running.
    assert_eq!(served.counters.dropped.load(Ordering::SeqCst), 1);
    // Fast enough: untouched.
    let r = s.call("sleep", json!({"ms": 10})).await;
    assert_eq!(Session::text(&r), "slept 10 ms");
    // Without a policy a tool is not cut.
    let r = s.call("hello", json!({})).await;
    assert_eq!(Session::text(&r), "hello");
}

#[tokio::test]
async fn the_clients_cancellation_drops_the_call() {
    let kit = Kit::new(health()).tool("sleep", ToolPolicy::new().timeout(Duration::from_secs(60)));
    let served = serve(Some(kit)).await;
    let mut s = Session::open(&served.url()).await;
    let mut twin = s.twin();
    let id = s.id();
    let call = tokio::spawn(async move { s.call_ex("sleep", json!({"ms": 60_000}), None).await });
    for _ in 0..200 {
        if served.counters.started.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let t = Instant::now();
    twin.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "the user gave up"}),
    )
    .await;
    for _ in 0..200 {
        if served.counters.dropped.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        served.counters.dropped.load(Ordering::SeqCst),
        1,
        "the tool's future was dropped"
    );
    assert!(t.elapsed() < Duration::from_secs(2));
    assert_eq!(served.counters.finished.load(Ordering::SeqCst), 0);
    call.abort();
}

#[tokio::test]
async fn a_saturated_tool_refuses_with_a_clear_error() {
    let kit = Kit::new(health()).tool("sleep", ToolPolicy::new().max_concurrent(1));
    let served = serve(Some(kit)).await;
    let url = served.url();
    let first = tokio::spawn(async move {
        let mut s = Session::open(&url).await;
        s.call("sleep", json!({"ms": 1500})).await
    });
    for _ in 0..200 {
        if served.counters.started.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut s = Session::open(&served.url()).await;
    let r = s.call("sleep", json!({"ms": 1})).await;
    assert_eq!(r["isError"], true);
    assert_eq!(
        Session::text(&r),
        "tool sleep is busy: 1 calls in flight, its concurrency limit (max_concurrent); try again shortly"
    );
    // Other tools are not limited by it.
    assert_eq!(Session::text(&s.call("hello", json!({})).await), "hello");
    assert_eq!(Session::text(&first.await.unwrap()), "slept 1500 ms");
    // The slot came back.
    assert_eq!(
        Session::text(&s.call("sleep", json!({"ms": 1})).await),
        "slept 1 ms"
    );
    // Counted as the gateway counts a full limit.
    let m = get(served.addr, "/metrics").await.body;
    let line = r#"mcpulse_gateway_limit_rejected_total{limit="sleep",reason="full"} 1"#;
    assert!(m.contains(line), "{line} missing in:\n{m}");
}

#[tokio::test]
async fn an_open_breaker_fails_fast_and_turns_readiness_degraded() {
    let breaker = BreakerPolicy {
        window: WindowSpec::default(),
        minimum_calls: 3,
        failure_rate: 0.5,
        wait_in_open: Duration::from_secs(60),
        half_open_trials: 1,
        ..BreakerPolicy::default()
    };
    let kit =
        Kit::new(Health::new("kit-test", "1")).tool("fail", ToolPolicy::new().breaker(breaker));
    let served = serve(Some(kit)).await;
    let mut s = Session::open(&served.url()).await;
    let doc = get(served.addr, "/readyz").await.json();
    assert_eq!(doc["status"], "pass");
    // A closed breaker is listed too, as the gateway lists its own: the same function renders
    // both (mcpulse_policy::check::breaker_item), so the items match but for the time.
    let mut closed = doc["checks"]["fail:breaker"][0].clone();
    let expected = mcpulse_policy::health::Health {
        service_id: "s".into(),
        version: "1".into(),
        description: "d".into(),
        checks: vec![mcpulse_policy::check::breaker_item(
            &mcpulse_policy::check::BreakerReading {
                name: "fail",
                state: mcpulse_policy::breaker::BreakerState::Closed,
                retry_in: None,
                calls: 0,
                failures: 0,
                time_ms: 0,
            },
        )],
    }
    .to_json()["checks"]["fail:breaker"][0]
        .clone();
    assert!(closed["time"].is_string(), "{closed}");
    closed["time"] = expected["time"].clone();
    assert_eq!(closed, expected);
    for _ in 0..3 {
        let r = s.call("fail", json!({})).await;
        assert_eq!(Session::text(&r), "it broke");
    }
    let r = s.call("fail", json!({})).await;
    assert_eq!(r["isError"], true);
    let text = Session::text(&r);
    assert!(
        text.starts_with("tool fail is unavailable: its circuit breaker is open after too many failures; it lets a trial call through in "),
        "{text}"
    );
    let ready = get(served.addr, "/readyz").await;
    assert_eq!(ready.status, 200, "degraded, still serving its other tools");
    let doc = ready.json();
    assert_eq!(doc["status"], "warn");
    let item = &doc["checks"]["fail:breaker"][0];
    assert_eq!(item["observedValue"], "open");
    // The window starts again on opening, as the gateway's does.
    assert!(
        item["calls"].is_u64() && item["failures"].is_u64(),
        "{item}"
    );
    assert!(
        doc["output"].as_str().unwrap().starts_with(
            "the circuit breaker \"fail\" is open: its tools fail fast; it tries again in "
        ),
        "{doc}"
    );
    assert_eq!(Session::text(&s.call("hello", json!({})).await), "hello");
    // Counted as the gateway counts its breakers.
    let m = get(served.addr, "/metrics").await.body;
    for line in [
        r#"mcpulse_gateway_breaker_state{breaker="fail",state="open"} 1"#,
        r#"mcpulse_gateway_breaker_transitions_total{breaker="fail",to="open"} 1"#,
        r#"mcpulse_gateway_breaker_rejected_total{breaker="fail"} 1"#,
    ] {
        assert!(m.contains(line), "{line} missing in:\n{m}");
    }
}

#[tokio::test]
async fn progress_goes_out_only_for_a_progress_token_and_only_increasing() {
    let served = serve(Some(Kit::new(health()))).await;
    let mut s = Session::open(&served.url()).await;
    let ex = s.call_ex("steps", json!({}), Some("tok-1")).await;
    let notes: Vec<_> = frames(&ex)
        .into_iter()
        .filter(|f| f["method"] == "notifications/progress")
        .collect();
    assert_eq!(notes.len(), 3, "{notes:?}");
    assert_eq!(notes[0]["params"]["progressToken"], "tok-1");
    assert_eq!(notes[2]["params"]["progress"], 3.0);
    assert_eq!(notes[2]["params"]["total"], 3.0);
    assert_eq!(notes[1]["params"]["message"], "step 2");
    assert_eq!(reply(&ex)["result"]["content"][0]["text"], "sent 3");
    let ex = s.call_ex("steps", json!({}), None).await;
    assert_eq!(reply(&ex)["result"]["content"][0]["text"], "sent 0");
}

/// The keep-alive setting reaches the wire: a quiet tool call's SSE stream carries comments
/// (here every 200 ms instead of 15 s, to keep the test short), read raw off the socket.
#[tokio::test]
async fn a_quiet_tool_calls_stream_carries_keep_alive_comments() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let config = mcpulse_kit::server_config().with_sse_keep_alive(Some(Duration::from_millis(200)));
    let served = common::serve_with(Some(Kit::new(health())), config).await;
    let s = Session::open(&served.url()).await;
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 1000}}}).to_string();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in s.headers() {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let mut sock = tokio::net::TcpStream::connect(served.addr).await.unwrap();
    sock.write_all(format!("{head}\r\n{body}").as_bytes())
        .await
        .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let raw = String::from_utf8_lossy(&raw);
    let comments = raw.lines().filter(|l| l.starts_with(':')).count();
    assert!(comments >= 3, "{comments} keep-alive comments in:\n{raw}");
    assert!(raw.contains("slept 1000 ms"), "{raw}");
}

/// A call admitted in half-open whose future is dropped (the handler abandoned, not cancelled
/// by the client) hands its trial back: the breaker is not left waiting for it for ever. And the
/// breaker's gauge follows open -> half-open as a call sees it, without a `/readyz` read.
#[tokio::test(start_paused = true)]
async fn a_dropped_trial_does_not_wedge_a_half_open_breaker_and_the_gauge_follows() {
    use rmcp::handler::server::tool::ToolCallContext;
    use rmcp::model::{CallToolRequestParams, CallToolResponse, NumberOrString};
    use rmcp::service::RequestContext;
    let breaker = BreakerPolicy {
        window: WindowSpec::default(),
        minimum_calls: 1,
        failure_rate: 0.5,
        wait_in_open: Duration::from_secs(10),
        half_open_trials: 1,
        ..BreakerPolicy::default()
    };
    let health = Health::new("kit-test", "1");
    let kit = Kit::new(health.clone()).tool(
        "sleep",
        ToolPolicy::new()
            .timeout(Duration::from_secs(1))
            .breaker(breaker),
    );
    let router = kit.wrap(common::TestServer::router()).unwrap();
    let (server, running, _pipe) = common::in_process(router.clone()).await;
    let mut id = 0;
    let mut call = |ms: u64| {
        id += 1;
        let params: CallToolRequestParams =
            serde_json::from_value(json!({"name": "sleep", "arguments": {"ms": ms}})).unwrap();
        let ctx = RequestContext::new(NumberOrString::Number(id), running.peer().clone());
        ToolCallContext::new(&server, params, ctx)
    };
    let text = |r: Result<CallToolResponse, rmcp::ErrorData>| match r.unwrap() {
        CallToolResponse::Complete(c) => serde_json::to_value(&c).unwrap()["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned(),
        other => panic!("{other:?}"),
    };
    // One timeout opens it.
    let r = text(router.call(call(5000)).await);
    assert!(r.starts_with("tool sleep timed out after 1s"), "{r}");
    let r = text(router.call(call(1)).await);
    assert!(r.contains("circuit breaker is open"), "{r}");
    tokio::time::sleep(Duration::from_secs(11)).await;
    // The trial goes in, and is abandoned while it runs.
    let mut trial = Box::pin(router.call(call(60_000)));
    tokio::select! {
        _ = &mut trial => panic!("the trial should still be running"),
        () = tokio::time::sleep(Duration::from_millis(10)) => {}
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let endpoints = tokio::spawn(async move {
        let _ = axum::serve(listener, mcpulse_kit::endpoints::router(health)).await;
    });
    let m = common::get(addr, "/metrics").await.body;
    for line in [
        r#"mcpulse_gateway_breaker_state{breaker="sleep",state="half_open"} 1"#,
        r#"mcpulse_gateway_breaker_state{breaker="sleep",state="open"} 0"#,
        r#"mcpulse_gateway_breaker_transitions_total{breaker="sleep",to="half_open"} 1"#,
    ] {
        assert!(m.contains(line), "{line} missing in:\n{m}");
    }
    drop(trial);
    // Not wedged: the next call is the trial, it succeeds, the breaker closes.
    assert_eq!(text(router.call(call(1)).await), "slept 1 ms");
    let m = common::get(addr, "/metrics").await.body;
    assert!(
        m.contains(r#"mcpulse_gateway_breaker_state{breaker="sleep",state="closed"} 1"#),
        "{m}"
    );
    endpoints.abort();
    let _ = running.cancel().await;
}
