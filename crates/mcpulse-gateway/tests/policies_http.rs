//! The call policies over an HTTP upstream, end to end: a real gateway on loopback port 0
//! in front of mcpulse-testkit's scripted HTTP server, which records the requests whose
//! client (the gateway) walked away. A tool past its timeout gets the client an `isError`
//! result at the timeout and the upstream its request closed (JSON and SSE answers alike) and
//! `notifications/cancelled` (a legacy upstream); a failing upstream tool opens its breaker.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod policies_support;

use mcpulse_testkit::http::{FakeHttp, Piece, Reply as Answer, Request};
use mcpulse_testkit::mcp;
use policies_support::{
    BOUND, call, eventually, metric, post, post_bytes, post_raw, post_unread, slots_all_free, start,
};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
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
        // The upstream saw its request closed, soon after the timeout, and, a legacy server
        // (for which a closed stream is no cancellation), got `notifications/cancelled`.
        eventually(BOUND, "the upstream sees the request abandoned", || {
            up.abandoned().iter().any(|a| {
                a.request.rpc_id() == Some(json!(id)) && a.after < Duration::from_millis(1500)
            })
        })
        .await;
        eventually(
            BOUND,
            "the upstream is sent notifications/cancelled",
            || {
                up.requests().iter().any(|r| {
                    r.json().is_some_and(|m| {
                        m["method"] == "notifications/cancelled"
                            && m["params"]["requestId"] == id
                            && m["params"]["reason"]
                                == "the gateway's timeout for this tool ran out"
                    })
                })
            },
        )
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

/// An upstream whose `read_doc` (annotated read-only) and `write_doc` (not annotated) fail
/// their first call each, `read_doc` with a 503 and `write_doc` with the connection closed
/// before any response; later calls answer. `stuck_doc` (read-only) never answers.
async fn failing_once() -> FakeHttp {
    let calls: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    FakeHttp::start(move |req: &Request| {
        let tool = req
            .json()
            .and_then(|v| v["params"]["name"].as_str().map(str::to_owned));
        match (req.rpc_method().as_deref(), tool) {
            (Some("initialize"), _) => rpc(req, mcp::initialize_result(mcp::LEGACY)),
            (Some("tools/list"), _) => {
                let tool = |name: &str, annotations: Value| json!({"name": name, "inputSchema": {"type": "object"}, "annotations": annotations});
                rpc(
                    req,
                    json!({"tools": [
                        tool("read_doc", json!({"readOnlyHint": true})),
                        tool("write_doc", json!({"readOnlyHint": false})),
                        tool("stuck_doc", json!({"readOnlyHint": true})),
                    ]}),
                )
            }
            (Some("tools/call"), Some(tool)) if tool == "stuck_doc" => Answer::silence(),
            (Some("tools/call"), Some(tool)) => {
                let n = {
                    let mut calls = calls.lock().unwrap();
                    let n = calls.entry(tool.clone()).or_default();
                    *n += 1;
                    *n
                };
                match (n, tool.as_str()) {
                    (1, "write_doc") => Answer::silence().hanging_up(),
                    (1, _) => Answer::json(503, &json!({"busy": true})),
                    _ => rpc(req, json!({"content": [{"type": "text", "text": "ok"}]})),
                }
            }
            _ => Answer::accepted(),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_only_a_tool_annotated_read_only_is_sent_again_after_its_first_attempt_failed() {
    let up = failing_once().await;
    let toml = format!(
        "[[tools]]\nname = \"*_doc\"\nretry = {{ max_attempts = 3, backoff_initial = \"50ms\", backoff_max = \"200ms\", on = [\"transport\", \"timeout\"] }}\n\n[upstream]\nurl = \"{}\"\n",
        up.url("/mcp")
    );
    let (running, shared) = start(&toml).await;
    let addr = running.addr;
    let listed = post(
        addr,
        None,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .await;
    assert_eq!(listed.json()["result"]["tools"][0]["name"], "read_doc");
    let sent = |tool: &str| {
        up.requests()
            .iter()
            .filter(|r| {
                r.json()
                    .is_some_and(|v| v["method"] == "tools/call" && v["params"]["name"] == tool)
            })
            .count()
    };

    let r = post(addr, None, &call(2, "read_doc")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.text(), "ok", "retried after the 503: {}", r.body);
    assert_eq!(sent("read_doc"), 2);
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_retries_total{tool=\"read_doc\",result=\"retried\"}"
        ),
        1.0
    );

    // Not annotated: the lost call is not sent again (it may have run), the client is told.
    let r = post(addr, None, &call(3, "write_doc")).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(sent("write_doc"), 1);
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_retries_total{tool=\"write_doc\",result=\"retried\"}"
        ),
        0.0
    );
    tokio::time::timeout(BOUND, running.shutdown())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_stop_at_the_calls_deadline_which_cuts_the_last_attempts_timeout() {
    let up = failing_once().await;
    // Without the deadline: up to 10 attempts of 300 ms. With it: the first attempt times out
    // at 300 ms, the retry (after at most 1 ms) is cut at 500 ms from the call's start, and
    // no third attempt is made: none could end before the deadline.
    let toml = format!(
        "[[tools]]\nname = \"stuck_doc\"\ntimeout = \"300ms\"\nretry = {{ max_attempts = 10, backoff_initial = \"1ms\", backoff_max = \"1ms\", deadline = \"500ms\" }}\n\n[upstream]\nurl = \"{}\"\n",
        up.url("/mcp")
    );
    let (running, shared) = start(&toml).await;
    let addr = running.addr;
    post(
        addr,
        None,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .await;
    let began = Instant::now();
    let r = post(addr, None, &call(2, "stuck_doc")).await;
    let took = began.elapsed();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["result"]["isError"], true, "{}", r.body);
    let text = r.text();
    assert!(
        text.contains("tool \"stuck_doc\" did not answer within")
            && text.contains("what was left of the 500ms its attempts may take together (retry.deadline at the gateway)"),
        "{text}"
    );
    assert!(took >= Duration::from_millis(500), "{took:?}");
    let sent = up
        .requests()
        .iter()
        .filter(|r| {
            r.json()
                .is_some_and(|v| v["method"] == "tools/call" && v["params"]["name"] == "stuck_doc")
        })
        .count();
    assert_eq!(sent, 2);
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_retries_total{tool=\"stuck_doc\",result=\"retried\"}"
        ),
        1.0
    );
    // Both attempts were told to stop (legacy upstream: notifications/cancelled each).
    eventually(BOUND, "a notifications/cancelled for each attempt", || {
        up.requests()
            .iter()
            .filter(|r| {
                r.json()
                    .is_some_and(|v| v["method"] == "notifications/cancelled")
            })
            .count()
            == 2
    })
    .await;
    tokio::time::timeout(BOUND, running.shutdown())
        .await
        .unwrap();
}

/// `report` answers an event stream: a progress notification for the call's token every
/// 100 ms, five times, then the reply (at about 500 ms); `report_forever` reports progress and
/// never replies.
async fn reporting() -> FakeHttp {
    FakeHttp::start(|req: &Request| {
        let body = req.json().unwrap_or_default();
        let token = body["params"]["_meta"]["progressToken"].clone();
        let progress = |n: u64| {
            mcp::sse_event(
                Some("message"),
                None,
                &json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": n}}).to_string(),
            )
            .into_bytes()
        };
        match (req.rpc_method().as_deref(), body["params"]["name"].as_str()) {
            (Some("tools/call"), Some("report")) => {
                let mut pieces = Vec::new();
                for n in 1..=5 {
                    pieces.push(Piece::Pause(Duration::from_millis(100)));
                    pieces.push(Piece::Data(progress(n)));
                }
                let reply = json!({"jsonrpc": "2.0", "id": req.rpc_id(), "result": {"content": [{"type": "text", "text": "done"}]}});
                pieces.push(Piece::Data(
                    mcp::sse_event(Some("message"), None, &reply.to_string()).into_bytes(),
                ));
                Answer::chunked(200, "text/event-stream", pieces)
            }
            (Some("tools/call"), Some("report_forever")) => Answer::chunked(
                200,
                "text/event-stream",
                vec![Piece::Repeat {
                    data: progress(1),
                    every: Duration::from_millis(100),
                }],
            ),
            (Some("initialize"), _) => rpc(req, mcp::initialize_result(mcp::LEGACY)),
            _ => Answer::accepted(),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_progress_on_the_upstream_stream_extends_a_timeout_up_to_its_maximum() {
    let up = reporting().await;
    let toml = format!(
        "[[tools]]\nname = \"report*\"\ntimeout = \"300ms\"\nprogress_extends = true\nmax_timeout = \"1s\"\n\n[upstream]\nurl = \"{}\"\n",
        up.url("/mcp")
    );
    let (running, _shared) = start(&toml).await;
    let addr = running.addr;
    let with_token = |id: i64, tool: &str| {
        let mut c = call(id, tool);
        c["params"]["_meta"] = json!({"progressToken": format!("t{id}")});
        c
    };
    // Progress every 100 ms keeps a 300 ms timeout from running out: the reply at 500 ms passes.
    let r = post(addr, None, &with_token(1, "report")).await;
    assert_eq!(r.json()["result"]["isError"], Value::Null, "{}", r.body);
    assert_eq!(r.text(), "done", "{}", r.body);
    assert_eq!(
        r.body.matches("notifications/progress").count(),
        5,
        "{}",
        r.body
    );

    // Without a token, the same call's progress is nobody's: it times out at 300 ms, before
    // the reply.
    let r = post(addr, None, &call(2, "report")).await;
    assert_eq!(r.json()["result"]["isError"], true, "{}", r.body);

    // Progress for ever: cut at max_timeout (1 s from the start), not later.
    let started = Instant::now();
    let r = post(addr, None, &with_token(3, "report_forever")).await;
    let took = started.elapsed();
    assert_eq!(r.json()["result"]["isError"], true, "{}", r.body);
    assert!(r.text().contains("1s"), "{}", r.text());
    assert!(
        took >= Duration::from_millis(1000) && took < Duration::from_millis(1800),
        "answered after {took:?}"
    );
    eventually(BOUND, "the upstream sees its stream closed", || {
        up.abandoned()
            .iter()
            .any(|a| a.request.rpc_id() == Some(json!(3)))
    })
    .await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_max_body_without_content_length_gets_413_over_http_too() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = upstream().await;
    let toml = format!(
        "max_body = \"2KiB\"\n\n[upstream]\nurl = \"{}\"\n",
        up.url("/mcp")
    );
    let (running, _shared) = start(&toml).await;
    let addr = running.addr;
    // Chunked, no Content-Length: the cap can only be seen while reading.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let chunk = "x".repeat(1024);
    for _ in 0..4 {
        let _ = s
            .write_all(format!("{:x}\r\n{chunk}\r\n", chunk.len()).as_bytes())
            .await;
    }
    let _ = s.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    tokio::time::timeout(BOUND, s.read_to_end(&mut answer))
        .await
        .unwrap()
        .ok();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("max_body"), "{answer}");
    // Nothing reached the upstream.
    assert!(
        up.requests().iter().all(|r| r.body.len() < 2048),
        "the big body was relayed"
    );
    tokio::time::timeout(BOUND, running.shutdown())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_tools_call_without_a_name_is_timed_and_one_of_another_type_refused() {
    let up = FakeHttp::start(|req: &Request| match req.rpc_method().as_deref() {
        Some("initialize") => rpc(req, mcp::initialize_result(mcp::LEGACY)),
        Some("tools/list") => rpc(req, mcp::tools_list_result(mcp::tools(&["x"]), None, false)),
        Some("tools/call") => Answer::silence(),
        _ => Answer::accepted(),
    })
    .await;
    let toml = format!(
        "tool_timeout = \"300ms\"\n\n[upstream]\nurl = \"{}\"\n",
        up.url("/mcp")
    );
    let (running, _shared) = start(&toml).await;
    // A name of another type is refused at the door (the policies cannot read it)...
    let odd = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
        "params": {"name": 5, "arguments": {}}});
    let r = post(running.addr, None, &odd).await;
    assert_eq!(r.status, 400, "{}", r.body);
    // ...and one without a name is timed as every call is.
    let odd = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"arguments": {}}});
    let r = tokio::time::timeout(BOUND, post(running.addr, None, &odd))
        .await
        .unwrap();
    // The default tool timeout (300 ms here), not the 60 s reply timeout.
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["result"]["isError"], true, "{}", r.body);
    assert!(
        r.text().contains("did not answer within 300ms"),
        "{}",
        r.text()
    );
    tokio::time::timeout(BOUND, running.shutdown())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_in_the_upstream_urls_path_is_never_shown_to_clients() {
    // A port nothing listens on: the upstream is down, and every answer names it.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let text = format!(
        "listen = \"127.0.0.1:0\"\n[upstream]\nurl = \"http://127.0.0.1:{port}/s/${{ZAP_KEY}}/mcp\"\nconnect_timeout = \"1s\"\n"
    );
    let secret = "sk_live_9f8e7d6c5b";
    let env = |k: &str| (k == "ZAP_KEY").then(|| secret.to_owned());
    let g = mcpulse_gateway::config::parse(&text, "test.toml", &env).unwrap();
    let shared = Arc::new(mcpulse_gateway::state::Shared::default());
    let running = mcpulse_gateway::serve::start(&g, shared.clone())
        .await
        .unwrap();
    for id in 1..=2 {
        let r = post(
            running.addr,
            None,
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}),
        )
        .await;
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(!r.body.contains(secret), "{}", r.body);
        assert!(r.body.contains("/s/<redacted>/mcp"), "{}", r.body);
    }
    let m = shared.metrics.encode().unwrap();
    assert!(!m.contains(secret));
    tokio::time::timeout(BOUND, running.shutdown())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_body_the_gateway_cannot_read_is_refused_not_relayed_unpoliced() {
    let up = upstream().await;
    let toml = format!("[upstream]\nurl = \"{}\"\n", up.url("/mcp"));
    let (running, shared) = start(&toml).await;
    let addr = running.addr;
    let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}]"#;
    let (status, body) = post_bytes(addr, batch).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("-32600") && body.contains("batches are not supported"),
        "{body}"
    );
    let (status, body) = post_bytes(addr, b"{not json").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("-32700"), "{body}");
    let twice = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","method":"tools/call","params":{"name":"slow"}}"#;
    let (status, body) = post_bytes(addr, twice).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("-32600"), "{body}");
    // Twice inside what the policies read: a tool's name, the params, a _meta of another type
    // (read leniently, the call was policed as a nameless one while the upstream ran the last
    // name).
    for body in [
        &br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","name":"slow"}}"#[..],
        br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo"},"params":{"name":"slow"}}"#,
        br#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"slow","_meta":{"io.modelcontextprotocol/protocolVersion":5}}}"#,
    ] {
        let (status, answer) = post_bytes(addr, body).await;
        assert_eq!(status, 400, "{answer}");
        assert!(answer.contains("-32600"), "{answer}");
    }
    // A protocol version that is not visible ASCII is no known version (it was taken for
    // absent, and the request relayed).
    let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow"}}"#;
    let (status, answer) = post_raw(addr, b"MCP-Protocol-Version: 2025-06-18\xa0\r\n", body).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("Unsupported protocol version"), "{answer}");
    // None reached the upstream, and a readable call still goes through.
    assert!(
        up.requests()
            .iter()
            .all(|r| r.rpc_method().as_deref() != Some("tools/call")),
        "relayed"
    );
    let ok = post(addr, None, &call(3, "echo")).await;
    assert_eq!(ok.text(), "ok", "{}", ok.body);
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_requests_total{method=\"tools/call\",tool=\"_other\",outcome=\"ok\"}"
        ),
        1.0
    );
    tokio::time::timeout(BOUND, running.shutdown())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_clients_cancellation_answers_its_call_at_once_and_judges_nothing() {
    // `slow_doc` never answers (no response head); `stream_doc` answers an event stream of
    // keep-alives that never brings the reply. Both read-only, both retried on a timeout.
    let up = FakeHttp::start(|req: &Request| {
        let tool = req
            .json()
            .and_then(|v| v["params"]["name"].as_str().map(str::to_owned));
        match (req.rpc_method().as_deref(), tool.as_deref()) {
            (Some("tools/list"), _) => {
                let tool = |name: &str| json!({"name": name, "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}});
                rpc(req, json!({"tools": [tool("slow_doc"), tool("stream_doc")]}))
            }
            (Some("tools/call"), Some("slow_doc")) => Answer::silence(),
            (Some("tools/call"), Some("stream_doc")) => Answer::chunked(
                200,
                "text/event-stream",
                vec![Piece::Repeat {
                    data: b": still working\n\n".to_vec(),
                    every: Duration::from_millis(50),
                }],
            ),
            (Some("initialize"), _) => rpc(req, mcp::initialize_result(mcp::LEGACY)),
            _ => Answer::accepted(),
        }
    })
    .await;
    let toml = format!(
        "[[tools]]\nname = \"*_doc\"\ntimeout = \"5s\"\nretry = {{ max_attempts = 3, backoff_initial = \"10ms\", backoff_max = \"10ms\" }}\nbreaker = {{ window_calls = 2, minimum_calls = 2, wait_in_open = \"30s\" }}\n\n[upstream]\nurl = \"{}\"\n",
        up.url("/mcp")
    );
    let (running, shared) = start(&toml).await;
    let addr = running.addr;
    let sid = "a-session-of-the-upstreams";
    post(
        addr,
        Some(sid),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .await;
    for (id, tool) in [(2, "slow_doc"), (3, "stream_doc")] {
        let began = Instant::now();
        let pending = tokio::spawn(async move { post(addr, Some(sid), &call(id, tool)).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let n = post(
            addr,
            Some(sid),
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": id, "reason": "the user gave up"}}),
        )
        .await;
        assert_eq!(n.status, 202, "{}", n.body);
        let r = tokio::time::timeout(BOUND, pending).await.unwrap().unwrap();
        assert_eq!(r.json()["id"], id, "{}", r.body);
        assert_eq!(r.json()["error"]["code"], -32800, "{tool}: {}", r.body);
        // At the cancellation, not at the 5 s timeout.
        assert!(
            began.elapsed() < Duration::from_secs(4),
            "{tool}: {:?}",
            began.elapsed()
        );
    }
    let sent = |tool: &str| {
        up.requests()
            .iter()
            .filter(|r| {
                r.json()
                    .is_some_and(|v| v["method"] == "tools/call" && v["params"]["name"] == tool)
            })
            .count()
    };
    // Never sent again, the client's cancellations relayed, and no breaker opened by two
    // calls that ended without a verdict.
    assert_eq!((sent("slow_doc"), sent("stream_doc")), (1, 1));
    assert_eq!(
        up.requests()
            .iter()
            .filter(|r| r.rpc_method().as_deref() == Some("notifications/cancelled"))
            .count(),
        2
    );
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_breaker_transitions_total{breaker=\"*_doc\",to=\"open\"}"
        ),
        0.0
    );
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_tool_timeouts_total{tool=\"slow_doc\"}"
        ),
        0.0
    );
    slots_all_free(&shared).await;
    tokio::time::timeout(BOUND, running.shutdown())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_an_unknown_session_is_the_clients_to_fix_not_the_tools_failure() {
    // The upstream forgot session `gone` (it restarted): 404 with a JSON-RPC error.
    let up = FakeHttp::start(|req: &Request| {
        if req.header("mcp-session-id") == Some("gone") {
            return Answer::json(
                404,
                &json!({"jsonrpc": "2.0", "id": req.rpc_id(), "error": {"code": -32001, "message": "Session not found"}}),
            );
        }
        match req.rpc_method().as_deref() {
            Some("tools/call") => rpc(req, json!({"content": [{"type": "text", "text": "ok"}]})),
            _ => Answer::accepted(),
        }
    })
    .await;
    let toml = format!(
        "[[tools]]\nname = \"echo\"\nbreaker = {{ window_calls = 2, minimum_calls = 2, wait_in_open = \"30s\", count = [\"jsonrpc_error\"] }}\n\n[upstream]\nurl = \"{}\"\n",
        up.url("/mcp")
    );
    let (running, shared) = start(&toml).await;
    for id in 1..=3 {
        let r = post(running.addr, Some("gone"), &call(id, "echo")).await;
        assert_eq!(r.status, 404, "{}", r.body);
        assert_eq!(r.json()["error"]["message"], "Session not found");
    }
    // Three 404s: no breaker opened, nothing counted as the tool's; a live session's call
    // goes through.
    let r = post(running.addr, Some("live"), &call(9, "echo")).await;
    assert_eq!(r.text(), "ok", "{}", r.body);
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_breaker_transitions_total{breaker=\"echo\",to=\"open\"}"
        ),
        0.0
    );
    let rpc_errors: f64 = shared
        .metrics
        .encode()
        .unwrap()
        .lines()
        .filter(|l| {
            l.starts_with("mcpulse_gateway_requests_total{") && l.contains("outcome=\"rpc_error\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(rpc_errors, 0.0);
    slots_all_free(&shared).await;
    tokio::time::timeout(BOUND, running.shutdown())
        .await
        .unwrap();
}
