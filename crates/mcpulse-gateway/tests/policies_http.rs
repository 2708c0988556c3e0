//! The call policies over an HTTP upstream, end to end: a real gateway on loopback port 0
//! in front of mcpulse-testkit's scripted HTTP server, which records the requests whose
//! client (the gateway) walked away. A tool past its timeout gets the client an `isError`
//! result at the timeout and the upstream its request closed (JSON and SSE answers alike); a
//! failing upstream tool opens its breaker.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod policies_support;

use mcpulse_testkit::http::{FakeHttp, Piece, Reply as Answer, Request};
use mcpulse_testkit::mcp;
use policies_support::{BOUND, call, eventually, metric, post, post_unread, slots_all_free, start};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn rpc(req: &Request, result: Value) -> Answer {
    Answer::json(
        200,
        &json!({"jsonrpc": "2.0", "id": req.rpc_id(), "result": result}),
    )
}

/// An upstream: `initialize` and `tools/list` answered; `slow` never answered (JSON),
/// `slow_stream` an event stream of keep-alives that never brings the reply, `flaky` a 500,
/// any other tool answered.
async fn upstream() -> FakeHttp {
    FakeHttp::start(|req: &Request| {
        let tool = req
            .json()
            .and_then(|v| v["params"]["name"].as_str().map(str::to_owned));
        match (req.rpc_method().as_deref(), tool.as_deref()) {
            (Some("initialize"), _) => rpc(req, mcp::initialize_result(mcp::LEGACY)),
            (Some("tools/list"), _) => rpc(
                req,
                mcp::tools_list_result(mcp::tools(&["slow", "flaky"]), None, false),
            ),
            (Some("tools/call"), Some("slow")) => Answer::silence(),
            (Some("tools/call"), Some("slow_stream")) => Answer::chunked(
                200,
                "text/event-stream",
                vec![Piece::Repeat {
                    data: b": still working\n\n".to_vec(),
                    every: Duration::from_millis(50),
                }],
            ),
            (Some("tools/call"), Some("flaky")) => Answer::json(500, &json!({"oops": true})),
            (Some("tools/call"), _) => {
                rpc(req, json!({"content": [{"type": "text", "text": "ok"}]}))
            }
            _ => Answer::accepted(),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_gets_is_error_and_the_upstream_its_request_closed() {
    let up = upstream().await;
    let toml = format!(
        "[[tools]]\nname = \"slow*\"\ntimeout = \"300ms\"\n\n[upstream]\nurl = \"{}\"\n",
        up.url("/mcp")
    );
    let (running, shared) = start(&toml).await;
    let addr = running.addr;
    for (id, tool) in [(5, "slow"), (6, "slow_stream")] {
        let started = Instant::now();
        let r = post(addr, None, &call(id, tool)).await;
        let took = started.elapsed();
        assert_eq!(r.status, 200, "{}", r.body);
        let reply = r.json();
        assert_eq!(reply["id"], id);
        assert_eq!(reply["result"]["isError"], true, "{reply}");
        let text = r.text();
        assert!(
            text.contains(&format!("{tool:?}")) && text.contains("300ms"),
            "{text}"
        );
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_millis(1200),
            "{tool}: answered after {took:?}"
        );
        // The upstream saw its request closed, soon after the timeout.
        eventually(BOUND, "the upstream sees the request abandoned", || {
            up.abandoned().iter().any(|a| {
                a.request.rpc_id() == Some(json!(id)) && a.after < Duration::from_millis(1500)
            })
        })
        .await;
    }
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_tool_timeouts_total{tool=\"_other\"}"
        ) + metric(
            &shared,
            "mcpulse_gateway_tool_timeouts_total{tool=\"slow\"}"
        ),
        2.0
    );
    // Another tool, with the 30 s default, answers at once.
    let r = post(addr, None, &call(7, "echo")).await;
    assert_eq!(r.text(), "ok");
    tokio::time::timeout(BOUND, running.shutdown())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_tool_failing_with_5xx_opens_its_breaker_and_then_fails_fast() {
    let up = upstream().await;
    let toml = format!(
        "[[tools]]\nname = \"flaky\"\nbreaker = {{ window_calls = 4, minimum_calls = 2, wait_in_open = \"30s\", count = [\"transport\"] }}\n\n[upstream]\nurl = \"{}\"\n",
        up.url("/mcp")
    );
    let (running, shared) = start(&toml).await;
    let addr = running.addr;
    for id in 1..=2 {
        let r = post(addr, None, &call(id, "flaky")).await;
        assert_eq!(r.status, 502, "{}", r.body);
    }
    let sent = up
        .requests()
        .iter()
        .filter(|r| r.rpc_method().as_deref() == Some("tools/call"))
        .count();
    let r = post(addr, None, &call(3, "flaky")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["result"]["isError"], true);
    assert!(r.text().contains("is open"), "{}", r.text());
    assert!(r.text().contains("in 30s"), "{}", r.text());
    let now = up
        .requests()
        .iter()
        .filter(|r| r.rpc_method().as_deref() == Some("tools/call"))
        .count();
    assert_eq!(now, sent, "an open breaker sends nothing upstream");
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_breaker_state{breaker=\"flaky\",state=\"open\"}"
        ),
        1.0
    );
    tokio::time::timeout(BOUND, running.shutdown())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_a_chatty_stream_does_not_stop_the_timeout() {
    // A tool whose stream brings 8 KB log notifications every millisecond, never the reply.
    let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "x".repeat(8000)}});
    let event = format!("event: message\ndata: {note}\n\n").into_bytes();
    let up = FakeHttp::start(move |req: &Request| match req.rpc_method().as_deref() {
        Some("tools/call") => Answer::chunked(
            200,
            "text/event-stream",
            vec![Piece::Repeat {
                data: event.clone(),
                every: Duration::from_millis(1),
            }],
        ),
        Some("initialize") => rpc(req, mcp::initialize_result(mcp::LEGACY)),
        _ => Answer::accepted(),
    })
    .await;
    let toml = format!(
        "[concurrency]\nmax_concurrent = 2\nqueue = 0\n\n[[tools]]\nname = \"chatty\"\ntimeout = \"1s\"\n\n[upstream]\nurl = \"{}\"\n",
        up.url("/mcp")
    );
    let (running, shared) = start(&toml).await;
    let addr = running.addr;
    // A client that sends the call and never reads.
    let client = post_unread(addr, None, &call(9, "chatty")).await;
    // The timeout still fires: the upstream stream closed, the slot given back, counted.
    eventually(BOUND, "the upstream sees the request abandoned", || {
        up.abandoned()
            .iter()
            .any(|a| a.request.rpc_id() == Some(json!(9)))
    })
    .await;
    slots_all_free(&shared).await;
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_tool_timeouts_total{tool=\"_other\"}"
        ),
        1.0
    );
    drop(client);
    tokio::time::timeout(BOUND, running.shutdown())
        .await
        .unwrap();
}
