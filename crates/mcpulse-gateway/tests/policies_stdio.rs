//! The call policies over a stdio upstream, end to end: a real gateway on loopback port 0,
//! real children (mcpulse-testkit's scripted servers), a real HTTP client. Timeouts with
//! `notifications/cancelled`, a client's cancellation, a breaker over a failing dependency,
//! a flood at ten times the concurrency limit. Every test stops the gateway and checks that
//! no child is left.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod policies_support;

use mcpulse_gateway::serve::Running;
use mcpulse_testkit::stdio::{Act, StdioScript, TempDir, kill, read_pids, still_running_after};
use policies_support::{
    BOUND, call, eventually, get, metric, open_session, post, post_bytes, post_unread,
    slots_all_free, start,
};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

fn upstream(script: &Path) -> String {
    format!(
        "[upstream]\ncommand = [\"sh\", {:?}]\nstop_grace = \"300ms\"\n",
        script.to_str().unwrap()
    )
}

/// A server listing `tools` (with their annotations), whose pid goes to `pids`, each
/// `(tool, acts)` its answer; then a gateway retrying `*_doc` as `retry` says, the server's
/// restarts quick. Returns the gateway, its state, its address and a session whose
/// `tools/list` taught the gateway the annotations.
async fn retrying_gateway(
    dir: &TempDir,
    tools: serde_json::Value,
    acts: Vec<(&str, Vec<Act>)>,
    retry: &str,
) -> (
    Running,
    std::sync::Arc<mcpulse_gateway::state::Shared>,
    std::net::SocketAddr,
    String,
) {
    retrying_gateway_with(dir, "", tools, acts, retry).await
}

/// [`retrying_gateway`] with top-level settings (`top`) before the tables.
async fn retrying_gateway_with(
    dir: &TempDir,
    top: &str,
    tools: serde_json::Value,
    acts: Vec<(&str, Vec<Act>)>,
    retry: &str,
) -> (
    Running,
    std::sync::Arc<mcpulse_gateway::state::Shared>,
    std::net::SocketAddr,
    String,
) {
    let mut init = mcpulse_testkit::mcp::initialize_result(mcpulse_testkit::mcp::LEGACY);
    init["capabilities"] = json!({"tools": {}});
    let mut script = StdioScript::new()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on("initialize", vec![Act::Result(init)])
        .on("tools/list", vec![Act::Result(tools)]);
    for (tool, a) in acts {
        script = script.on_tool(tool, a);
    }
    let script = script.write(dir, "server.sh");
    let toml = format!(
        "{top}\n[[tools]]\nname = \"*_doc\"\nretry = {retry}\n\n{}backoff_initial = \"50ms\"\nbackoff_max = \"100ms\"\n",
        upstream(&script)
    );
    let (running, shared) = start(&toml).await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let listed = post(
        addr,
        Some(&sid),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .await;
    assert_eq!(listed.json()["result"]["tools"][0]["name"], "read_doc");
    (running, shared, addr, sid)
}

/// Stops the gateway and checks no child recorded in `pids` is left.
async fn stop_leaving_nothing(running: Running, pids: &Path) {
    tokio::time::timeout(BOUND, running.shutdown())
        .await
        .expect("shutdown in time");
    let left = still_running_after(&read_pids(pids), Duration::from_secs(3));
    kill(&left);
    assert!(left.is_empty(), "left running: {left:?}");
}

fn ok() -> Act {
    Act::Result(json!({"content": [{"type": "text", "text": "ok"}]}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_gets_is_error_at_the_timeout_and_the_server_a_cancellation() {
    let dir = TempDir::new("gw-policy-timeout");
    let cancels = dir.join("cancels");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool("slow", vec![Act::Sleep(1500), ok()])
        .on(
            "notifications/cancelled",
            vec![Act::RecordLine(cancels.clone())],
        )
        .on("tools/call", vec![ok()])
        .write(&dir, "server.sh");
    let toml = format!(
        "[[tools]]\nname = \"slow\"\ntimeout = \"300ms\"\n\n{}",
        upstream(&script)
    );
    let (running, shared) = start(&toml).await;
    let addr = running.addr;
    let sid = open_session(addr).await;

    let started = Instant::now();
    let r = post(addr, Some(&sid), &call(7, "slow")).await;
    let took = started.elapsed();
    assert_eq!(r.status, 200, "{}", r.body);
    let reply = r.json();
    assert_eq!(reply["id"], 7);
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    let text = r.text();
    assert!(
        text.contains("\"slow\"") && text.contains("300ms"),
        "{text}"
    );
    assert!(
        text.contains("busy") && text.contains("dependency"),
        "{text}"
    );
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_millis(1200),
        "answered after {took:?}, not at the 300ms timeout"
    );
    // The server got notifications/cancelled for the request it was sent (the gateway's id).
    eventually(BOUND, "the server records the cancellation", || {
        std::fs::read_to_string(&cancels).is_ok_and(|c| c.contains("\"requestId\":\"gw-"))
    })
    .await;
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_tool_timeouts_total{tool=\"_other\"}"
        ),
        1.0
    );
    // The session goes on: another tool, no timeout of its own, answers.
    let r = post(addr, Some(&sid), &call(8, "echo")).await;
    assert_eq!(r.json()["result"]["content"][0]["text"], "ok");
    stop_leaving_nothing(running, &dir.join("pids")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_cancellation_reaches_the_server_with_the_id_it_knows() {
    let dir = TempDir::new("gw-policy-cancel");
    let cancels = dir.join("cancels");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool("slow", vec![Act::Sleep(800), ok()])
        .on(
            "notifications/cancelled",
            vec![Act::RecordLine(cancels.clone())],
        )
        .write(&dir, "server.sh");
    let (running, _) = start(&upstream(&script)).await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let pending = {
        let sid = sid.clone();
        tokio::spawn(async move { post(addr, Some(&sid), &call(41, "slow")).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let n = post(
        addr,
        Some(&sid),
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 41, "reason": "the user gave up"}}),
    )
    .await;
    assert_eq!(n.status, 202);
    let r = pending.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "the POST ends at once"
    );
    assert_eq!(r.json()["id"], 41);
    assert_eq!(r.json()["error"]["code"], -32800, "{}", r.body);
    eventually(BOUND, "the server records the cancellation", || {
        std::fs::read_to_string(&cancels)
            .is_ok_and(|c| c.contains("\"requestId\":\"gw-") && c.contains("the user gave up"))
    })
    .await;
    stop_leaving_nothing(running, &dir.join("pids")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_dependency_opens_the_breaker_which_fails_fast_half_opens_and_recovers() {
    let dir = TempDir::new("gw-policy-breaker");
    let down = dir.join("down");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool(
            "query_db",
            vec![Act::IfExists(
                down.clone(),
                Box::new(Act::Result(json!({"content": [{"type": "text",
                    "text": "connection refused"}], "isError": true}))),
                Box::new(ok()),
            )],
        )
        .write(&dir, "server.sh");
    let toml = format!(
        "readiness_interval = \"1s\"\n\n[[tools]]\nname = \"query_*\"\nbreaker = {{ window_calls = 4, minimum_calls = 2, failure_rate = 0.5, wait_in_open = \"1s\", half_open_trials = 1 }}\n\n{}",
        upstream(&script)
    );
    let (running, shared) = start(&toml).await;
    let addr = running.addr;
    let readyz = |want: &'static str| async move {
        let until = Instant::now() + BOUND;
        loop {
            let r = get(addr, "/readyz").await;
            if r.body.contains(&format!("\"status\":\"{want}\"")) {
                return r;
            }
            assert!(Instant::now() < until, "/readyz never {want}: {}", r.body);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    readyz("pass").await;
    let sid = open_session(addr).await;

    std::fs::write(&down, "").unwrap();
    for id in 1..=2 {
        let r = post(addr, Some(&sid), &call(id, "query_db")).await;
        assert_eq!(r.text(), "connection refused", "the server's own failure");
    }
    // Open: the next call is not sent, and says so at once, with when it tries again.
    let started = Instant::now();
    let r = post(addr, Some(&sid), &call(3, "query_db")).await;
    assert!(started.elapsed() < Duration::from_millis(300));
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["result"]["isError"], true);
    let text = r.text();
    assert!(
        text.contains("circuit breaker \"query_*\"") && text.contains("is open"),
        "{text}"
    );
    assert!(text.contains("trial call through in"), "{text}");
    let warn = readyz("warn").await;
    assert_eq!(
        warn.status, 200,
        "an open breaker degrades, it does not fail"
    );
    assert!(warn.body.contains("query_*"), "{}", warn.body);
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_breaker_state{breaker=\"query_*\",state=\"open\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_breaker_rejected_total{breaker=\"query_*\"}"
        ),
        1.0
    );

    // The dependency is back; after the wait one trial goes through and closes it.
    std::fs::remove_file(&down).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = post(addr, Some(&sid), &call(4, "query_db")).await;
    assert_eq!(r.text(), "ok");
    readyz("pass").await;
    for to in ["open", "half_open", "closed"] {
        let series =
            format!("mcpulse_gateway_breaker_transitions_total{{breaker=\"query_*\",to=\"{to}\"}}");
        assert_eq!(metric(&shared, &series), 1.0, "{series}");
    }
    stop_leaving_nothing(running, &dir.join("pids")).await;
}

/// Calls queued for a slot when the breaker opens (on the calls ahead of them) are refused
/// by it when their turn comes, not sent to the failing upstream with the permit they got
/// while it was closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_queued_when_the_breaker_opens_are_refused_not_sent() {
    let dir = TempDir::new("gw-policy-queued-breaker");
    let sent = dir.join("sent");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool(
            "query_db",
            vec![
                Act::RecordLine(sent.clone()),
                Act::Sleep(200),
                Act::Result(json!({"content": [{"type": "text",
                    "text": "connection refused"}], "isError": true})),
            ],
        )
        .write(&dir, "server.sh");
    let toml = format!(
        "[[tools]]\nname = \"query_*\"\nmax_concurrent = 1\nqueue = 8\nbreaker = {{ window_calls = 2, minimum_calls = 2, failure_rate = 0.5, wait_in_open = \"30s\" }}\n\n{}",
        upstream(&script)
    );
    let (running, _) = start(&toml).await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let calls = (1..=5).map(|id| {
        let sid = sid.clone();
        async move {
            // In order: each queues behind the ones before.
            tokio::time::sleep(Duration::from_millis(20 * id as u64)).await;
            post(addr, Some(&sid), &call(id, "query_db")).await
        }
    });
    let replies = futures_join_all(calls).await;
    let texts: Vec<String> = replies.iter().map(|r| r.text()).collect();
    assert_eq!(texts[0], "connection refused");
    assert_eq!(texts[1], "connection refused");
    for t in &texts[2..] {
        assert!(
            t.contains("is open"),
            "refused by the open breaker: {texts:?}"
        );
    }
    let n = std::fs::read_to_string(&sent).unwrap().lines().count();
    assert_eq!(
        n, 2,
        "only the calls before it opened reached the server: {texts:?}"
    );
    stop_leaving_nothing(running, &dir.join("pids")).await;
}

/// Runs every future at once, their outputs in order.
async fn futures_join_all<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_at_ten_times_the_limit_is_answered_in_full_and_none_waits_past_its_queue_timeout()
{
    let dir = TempDir::new("gw-policy-flood");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool("work", vec![Act::Sleep(100), ok()])
        .write(&dir, "server.sh");
    let toml = format!(
        "[concurrency]\nmax_concurrent = 2\nqueue = 4\nqueue_timeout = \"400ms\"\n\n{}",
        upstream(&script)
    );
    let (running, shared) = start(&toml).await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let mut calls = tokio::task::JoinSet::new();
    for id in 0..20 {
        let sid = sid.clone();
        calls.spawn(async move {
            let started = Instant::now();
            let r = post(addr, Some(&sid), &call(id, "work")).await;
            (id, r, started.elapsed())
        });
    }
    // Some clients give up while queued: their connections close mid-wait.
    let mut quitters = Vec::new();
    for id in 100..106 {
        let sid = sid.clone();
        quitters.push(tokio::spawn(async move {
            post(addr, Some(&sid), &call(id, "work")).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    for q in &quitters {
        q.abort();
    }
    let (mut ok, mut shed) = (0, 0);
    while let Some(done) = calls.join_next().await {
        let (id, r, took) = done.unwrap();
        // At most the queue timeout, then two calls of 100 ms (the child runs one at a time).
        assert!(
            took < Duration::from_millis(1500),
            "call {id} took {took:?}"
        );
        assert_eq!(r.json()["id"], id, "every call is answered for its own id");
        match r.status {
            200 => {
                assert_eq!(r.text(), "ok");
                ok += 1;
            }
            503 => {
                assert_eq!(r.header("retry-after"), Some("1"), "{}", r.body);
                let e = &r.json()["error"];
                assert_eq!(e["code"], -32085);
                assert!(
                    e["message"].as_str().unwrap().contains("[concurrency]"),
                    "{e}"
                );
                shed += 1;
            }
            s => panic!("call {id}: {s} {}", r.body),
        }
    }
    assert_eq!(ok + shed, 20);
    assert!(ok >= 2 && shed >= 1, "{ok} answered, {shed} shed");
    let full = metric(
        &shared,
        "mcpulse_gateway_limit_rejected_total{limit=\"gateway\",reason=\"full\"}",
    );
    let timed = metric(
        &shared,
        "mcpulse_gateway_limit_rejected_total{limit=\"gateway\",reason=\"queue_timeout\"}",
    );
    assert!(full + timed >= f64::from(shed));
    // Every slot is free again, the quitters' included.
    slots_all_free(&shared).await;
    let r = post(addr, Some(&sid), &call(200, "work")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    stop_leaving_nothing(running, &dir.join("pids")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_failing_its_check_makes_its_tools_fail_fast_until_it_passes() {
    let dir = TempDir::new("gw-policy-dependency");
    let down = dir.join("down");
    let sent = dir.join("sent");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool("query_db", vec![Act::RecordLine(sent.clone()), ok()])
        .on("tools/call", vec![ok()])
        .write(&dir, "server.sh");
    let toml = format!(
        "readiness_interval = \"1s\"\n\n[[checks]]\nname = \"db\"\nkind = \"command\"\ncommand = [\"sh\", \"-c\", \"test ! -e {}\"]\ninterval = \"1s\"\ncritical = false\nfailure_threshold = 1\nsuccess_threshold = 1\ntools = [\"query_*\"]\n\n{}",
        down.display(),
        upstream(&script)
    );
    let (running, shared) = start(&toml).await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let db = |want: mcpulse_policy::health::CheckStatus| {
        let shared = shared.clone();
        move || shared.health.confirmed("db") == Some(want)
    };
    eventually(
        BOUND,
        "db passes",
        db(mcpulse_policy::health::CheckStatus::Pass),
    )
    .await;
    let r = post(addr, Some(&sid), &call(1, "query_db")).await;
    assert_eq!(r.text(), "ok");

    std::fs::write(&down, "").unwrap();
    eventually(
        BOUND,
        "db fails",
        db(mcpulse_policy::health::CheckStatus::Fail),
    )
    .await;
    let started = Instant::now();
    let r = post(addr, Some(&sid), &call(2, "query_db")).await;
    assert!(started.elapsed() < Duration::from_millis(300));
    assert_eq!(r.json()["result"]["isError"], true);
    assert!(r.text().contains("depends on \"db\""), "{}", r.text());
    // Other tools are not held back.
    let r = post(addr, Some(&sid), &call(3, "echo")).await;
    assert_eq!(r.json()["id"], 3);
    assert_eq!(
        std::fs::read_to_string(&sent).unwrap().lines().count(),
        1,
        "the refused call was never sent"
    );
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_dependency_refused_total{check=\"db\"}"
        ),
        1.0
    );

    std::fs::remove_file(&down).unwrap();
    eventually(
        BOUND,
        "db passes again",
        db(mcpulse_policy::health::CheckStatus::Pass),
    )
    .await;
    let r = post(addr, Some(&sid), &call(4, "query_db")).await;
    assert_eq!(r.text(), "ok");
    stop_leaving_nothing(running, &dir.join("pids")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_with_the_calls_token_extends_its_timeout_up_to_the_maximum() {
    let dir = TempDir::new("gw-policy-progress");
    // `report` reports progress with the token its call carries; `report_other` with a token
    // of its own (not its call's).
    let stranger = json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": "tok-1", "progress": 1}})
    .to_string();
    let (mut own, mut other) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        own.push(Act::Progress("working".into()));
        own.push(Act::Sleep(200));
        other.push(Act::Stdout(stranger.clone()));
        other.push(Act::Sleep(200));
    }
    own.push(ok());
    other.push(ok());
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool("report_other", other)
        .on_tool("report", own)
        .write(&dir, "server.sh");
    let toml = format!(
        "[[tools]]\nname = \"report*\"\ntimeout = \"400ms\"\nprogress_extends = true\nmax_timeout = \"3s\"\n\n{}",
        upstream(&script)
    );
    let (running, _) = start(&toml).await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let with_token = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "report", "arguments": {}, "_meta": {"progressToken": "tok-1"}}});
    let started = Instant::now();
    let r = post(addr, Some(&sid), &with_token).await;
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(
        r.body.contains("notifications/progress"),
        "progress passes through: {}",
        r.body
    );
    assert_eq!(
        r.text(),
        "ok",
        "reporting progress kept it alive: {}",
        r.body
    );
    // A call whose server reports progress under another token (the one the first call's
    // client chose: the child never saw it): not its own, so 400 ms is all it gets.
    let other = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "report_other", "arguments": {}, "_meta": {"progressToken": "tok-2"}}});
    let started = Instant::now();
    let r = post(addr, Some(&sid), &other).await;
    assert!(started.elapsed() < Duration::from_millis(900));
    assert_eq!(r.json()["result"]["isError"], true, "{}", r.body);
    assert!(r.text().contains("400ms"), "{}", r.text());
    stop_leaving_nothing(running, &dir.join("pids")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_tool_annotated_read_only_is_retried_after_a_crash_lost_its_call() {
    let dir = TempDir::new("gw-policy-retry");
    let tool = |name: &str, annotations: serde_json::Value| json!({"name": name, "inputSchema": {"type": "object"}, "annotations": annotations});
    let tools = json!({"tools": [
        tool("read_doc", json!({"readOnlyHint": true})),
        tool("write_doc", json!({"readOnlyHint": false})),
    ]});
    // Each tool's first call crashes the server (the call is lost); later ones answer.
    let crash_once = |marker: &str| {
        vec![Act::FirstTimeElse(
            dir.join(marker),
            Box::new(Act::Exit(1)),
            Box::new(ok()),
        )]
    };
    let (running, shared, addr, sid) = retrying_gateway(
        &dir,
        tools,
        vec![
            ("read_doc", crash_once("read-crashed")),
            ("write_doc", crash_once("write-crashed")),
        ],
        "{ max_attempts = 3, backoff_initial = \"50ms\", backoff_max = \"200ms\", on = [\"transport\", \"timeout\"] }",
    )
    .await;

    let r = post(addr, Some(&sid), &call(2, "read_doc")).await;
    assert_eq!(
        r.text(),
        "ok",
        "retried on the restarted server: {}",
        r.body
    );
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_retries_total{tool=\"read_doc\",result=\"retried\"}"
        ),
        1.0
    );
    // Not annotated: the lost call is reported, never sent again.
    let r = post(addr, Some(&sid), &call(3, "write_doc")).await;
    assert_eq!(r.json()["error"]["code"], -32080, "{}", r.body);
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_retries_total{tool=\"write_doc\",result=\"retried\"}"
        ),
        0.0
    );
    stop_leaving_nothing(running, &dir.join("pids")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_retries_stop_at_the_calls_deadline() {
    let dir = TempDir::new("gw-policy-retry-deadline");
    let tools = json!({"tools": [
        {"name": "read_doc", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
    ]});
    // Every call takes 1.5 s: each attempt times out at 300 ms. The retry (after at most
    // 1 ms) is cut at 500 ms from the call's start; no third attempt could end in time.
    let (running, shared, addr, sid) = retrying_gateway(
        &dir,
        tools,
        vec![("read_doc", vec![Act::Sleep(1500), ok()])],
        "{ max_attempts = 10, backoff_initial = \"1ms\", backoff_max = \"1ms\", deadline = \"500ms\" }\ntimeout = \"300ms\"",
    )
    .await;
    let began = std::time::Instant::now();
    let r = post(addr, Some(&sid), &call(2, "read_doc")).await;
    assert!(began.elapsed() >= Duration::from_millis(500));
    assert_eq!(r.json()["result"]["isError"], true, "{}", r.body);
    assert!(
        r.text()
            .contains("what was left of the 500ms its attempts may take together (retry.deadline at the gateway)"),
        "{}",
        r.text()
    );
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_retries_total{tool=\"read_doc\",result=\"retried\"}"
        ),
        1.0
    );
    stop_leaving_nothing(running, &dir.join("pids")).await;
}

/// Over stdio a call unanswered at `keepalive` has its answer turned into a stream (a keep-alive
/// comment first). While that stream has carried nothing but keep-alives, a failure is retried
/// within it, as before the stream began: a crash after `keepalive`, and a timeout past it (with
/// the defaults, 30 s against 15 s, a timeout was never retried over stdio).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_already_streaming_keep_alives_is_still_retried() {
    let dir = TempDir::new("gw-policy-retry-stream");
    let tools = json!({"tools": [
        {"name": "read_doc", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
        {"name": "slow_doc", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
    ]});
    let (running, shared, addr, sid) = retrying_gateway_with(
        &dir,
        "keepalive = \"100ms\"",
        tools,
        vec![
            // The first call crashes the server 400 ms in (past keepalive); later ones answer.
            (
                "read_doc",
                vec![
                    Act::Sleep(400),
                    Act::FirstTimeElse(dir.join("crashed"), Box::new(Act::Exit(1)), Box::new(ok())),
                ],
            ),
            // The first call takes 2.5 s (timed out at 2 s); later ones answer at once.
            (
                "slow_doc",
                vec![
                    Act::FirstTimeElse(dir.join("slept"), Box::new(Act::Sleep(2500)), Box::new(Act::Sleep(0))),
                    ok(),
                ],
            ),
        ],
        "{ max_attempts = 3, backoff_initial = \"10ms\", backoff_max = \"10ms\", on = [\"transport\", \"timeout\"] }\ntimeout = \"2s\"",
    )
    .await;
    let r = post(addr, Some(&sid), &call(2, "read_doc")).await;
    assert!(
        r.body.starts_with(':'),
        "a keep-alive came first: {}",
        r.body
    );
    assert_eq!(r.text(), "ok", "retried within the stream: {}", r.body);
    assert_eq!(r.json()["id"], 2);
    let r = post(addr, Some(&sid), &call(3, "slow_doc")).await;
    assert!(r.body.starts_with(':'), "{}", r.body);
    assert_eq!(r.text(), "ok", "retried after its timeout: {}", r.body);
    for tool in ["read_doc", "slow_doc"] {
        assert_eq!(
            metric(
                &shared,
                &format!("mcpulse_gateway_retries_total{{tool=\"{tool}\",result=\"retried\"}}")
            ),
            1.0,
            "{tool}"
        );
    }
    stop_leaving_nothing(running, &dir.join("pids")).await;
}

/// A retry waiting out its backoff inside a stream (the answer began as keep-alives) is
/// cancelled by the client as one waiting before any stream: answered -32800 at once, never
/// sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_call_cancelled_during_its_retry_backoff_is_not_sent_again() {
    // The first attempt crashes 300 ms in, past keepalive (100 ms): the answer is a stream.
    let r = cancelled_during_backoff(
        "gw-policy-retry-stream-cancel",
        "keepalive = \"100ms\"",
        300,
    )
    .await;
    assert!(
        r.body.starts_with(':'),
        "it had become a stream: {}",
        r.body
    );
}

/// A stream that has carried something of the server's (a log notification) is never sent
/// again: the client saw the attempt. Its failure is the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_call_the_client_saw_messages_of_is_not_retried() {
    let dir = TempDir::new("gw-policy-retry-seen");
    let tools = json!({"tools": [
        {"name": "read_doc", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
    ]});
    let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "reading"}})
    .to_string();
    let (running, shared, addr, sid) = retrying_gateway_with(
        &dir,
        "keepalive = \"100ms\"",
        tools,
        vec![(
            "read_doc",
            vec![
                Act::Stdout(note),
                Act::Sleep(400),
                Act::FirstTimeElse(dir.join("crashed"), Box::new(Act::Exit(1)), Box::new(ok())),
            ],
        )],
        "{ max_attempts = 3, backoff_initial = \"10ms\", backoff_max = \"10ms\" }",
    )
    .await;
    let r = post(addr, Some(&sid), &call(2, "read_doc")).await;
    assert!(r.body.contains("reading"), "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32080, "{}", r.body);
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_retries_total{tool=\"read_doc\",result=\"retried\"}"
        ),
        0.0
    );
    stop_leaving_nothing(running, &dir.join("pids")).await;
}

/// A key given twice in what the policies read is refused at the stdio door as at the HTTP
/// door (the docs' door table), not read last-wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_a_name_given_twice_is_refused() {
    let dir = TempDir::new("gw-policy-twice");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool("echo", vec![ok()])
        .write(&dir, "server.sh");
    let (running, _) = start(&upstream(&script)).await;
    let addr = running.addr;
    let body = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","name":"delete_all"}}"#;
    let (status, answer) = post_bytes(addr, body).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.contains("-32600") && answer.contains("each key once"),
        "{answer}"
    );
    stop_leaving_nothing(running, &dir.join("pids")).await;
}

/// Sends the client's `notifications/cancelled` for its request `id`.
async fn cancel(addr: std::net::SocketAddr, sid: &str, id: i64) {
    let n = post(
        addr,
        Some(sid),
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "the user gave up"}}),
    )
    .await;
    assert_eq!(n.status, 202);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_cancellations_do_not_open_the_tools_breaker() {
    let dir = TempDir::new("gw-policy-cancel-breaker");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool("slow", vec![Act::Sleep(400), ok()])
        .write(&dir, "server.sh");
    let toml = format!(
        "[[tools]]\nname = \"slow\"\nbreaker = {{ window_calls = 4, minimum_calls = 2, wait_in_open = \"30s\" }}\n\n{}",
        upstream(&script)
    );
    let (running, shared) = start(&toml).await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    for id in [1, 2] {
        let pending = {
            let sid = sid.clone();
            tokio::spawn(async move { post(addr, Some(&sid), &call(id, "slow")).await })
        };
        tokio::time::sleep(Duration::from_millis(150)).await;
        cancel(addr, &sid, id).await;
        let r = pending.await.unwrap();
        assert_eq!(r.json()["error"]["code"], -32800, "{}", r.body);
    }
    // Two cancelled calls of two: a breaker that counted them would be open now.
    let r = post(addr, Some(&sid), &call(3, "slow")).await;
    assert_eq!(r.text(), "ok", "{}", r.body);
    assert_eq!(
        metric(
            &shared,
            "mcpulse_gateway_breaker_transitions_total{breaker=\"slow\",to=\"open\"}"
        ),
        0.0
    );
    stop_leaving_nothing(running, &dir.join("pids")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_it_waits_to_be_retried_is_not_sent_again() {
    cancelled_during_backoff("gw-policy-cancel-retry", "", 0).await;
}

/// A call whose first attempt crashes the server `crash_after` ms in (retried after a 60 s
/// backoff), cancelled by its client while it waits: answered -32800 at once, and the child ran
/// it once. Returns the answer.
async fn cancelled_during_backoff(
    name: &str,
    top: &str,
    crash_after: u64,
) -> policies_support::Reply {
    let dir = TempDir::new(name);
    let runs = dir.join("runs");
    let crashed = dir.join("crashed");
    let tools = json!({"tools": [{"name": "read_doc", "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": true}}]});
    let (running, _, addr, sid) = retrying_gateway_with(
        &dir,
        top,
        tools,
        vec![(
            "read_doc",
            vec![
                Act::RecordLine(runs.clone()),
                Act::Sleep(crash_after),
                Act::FirstTimeElse(crashed.clone(), Box::new(Act::Exit(1)), Box::new(ok())),
            ],
        )],
        "{ max_attempts = 3, backoff_initial = \"60s\", backoff_max = \"60s\", on = [\"transport\"] }",
    )
    .await;
    let pending = {
        let sid = sid.clone();
        tokio::spawn(async move { post(addr, Some(&sid), &call(2, "read_doc")).await })
    };
    eventually(BOUND, "the first attempt crashes the server", || {
        crashed.exists()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    cancel(addr, &sid, 2).await;
    let r = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .expect("the cancelled call is answered at once")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(r.json()["id"], 2);
    assert_eq!(r.json()["error"]["code"], -32800, "{}", r.body);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ran = std::fs::read_to_string(&runs).unwrap_or_default();
    assert_eq!(ran.lines().count(), 1, "the child ran it once: {ran}");
    stop_leaving_nothing(running, &dir.join("pids")).await;
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_a_chatty_stream_does_not_stop_the_timeout() {
    let dir = TempDir::new("gw-policy-unread");
    let cancels = dir.join("cancels");
    // About 8 MB of log notifications, far past the socket buffers, then a long wait.
    let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "x".repeat(8000)}})
    .to_string();
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool(
            "chatty",
            vec![
                Act::Repeat(Box::new(Act::Stdout(note)), 1000),
                Act::Sleep(2500),
            ],
        )
        .on(
            "notifications/cancelled",
            vec![Act::RecordLine(cancels.clone())],
        )
        .write(&dir, "server.sh");
    let toml = format!(
        "[concurrency]\nmax_concurrent = 2\nqueue = 0\n\n[[tools]]\nname = \"chatty\"\ntimeout = \"1s\"\n\n{}",
        upstream(&script)
    );
    let (running, shared) = start(&toml).await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    // A client that sends the call and never reads.
    let client = post_unread(addr, Some(&sid), &call(9, "chatty")).await;
    // The timeout still fires: the server is told, the slot given back, the timeout counted.
    eventually(BOUND, "the server records the cancellation", || {
        std::fs::read_to_string(&cancels).is_ok_and(|c| c.contains("\"requestId\":\"gw-"))
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
    stop_leaving_nothing(running, &dir.join("pids")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_session_gets_404_at_once_and_a_nameless_call_is_still_limited() {
    let dir = TempDir::new("gw-policy-door");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool("slow", vec![Act::Sleep(1500), ok()])
        .write(&dir, "server.sh");
    let toml = format!(
        "[concurrency]\nmax_concurrent = 1\nqueue = 1\nqueue_timeout = \"500ms\"\n\n{}",
        upstream(&script)
    );
    let (running, _) = start(&toml).await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let hold = {
        let sid = sid.clone();
        tokio::spawn(async move { post(addr, Some(&sid), &call(1, "slow")).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The only slot is taken: a bogus session is told at once, without queueing for it.
    let started = Instant::now();
    let r = post(addr, Some("bogus-session"), &call(2, "slow")).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(started.elapsed() < Duration::from_millis(400));
    // A tools/call without a name still takes a slot of [concurrency] (one whose name is not
    // a string is refused at the door: the policies cannot read it).
    let nameless = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {}});
    let r = post(addr, Some(&sid), &nameless).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32085, "{}", r.body);
    assert_eq!(hold.await.unwrap().text(), "ok");
    stop_leaving_nothing(running, &dir.join("pids")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_a_streamed_call_gives_its_slot_back_at_once() {
    let dir = TempDir::new("gw-policy-leave");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on_tool("slow", vec![Act::Sleep(10_000), ok()])
        .write(&dir, "server.sh");
    // The answer turns into a stream after 200 ms (keepalive); one slot in all.
    let toml = format!(
        "keepalive = \"200ms\"\n\n[concurrency]\nmax_concurrent = 1\nqueue = 0\n\n[[tools]]\nname = \"slow\"\ntimeout = \"30s\"\n\n{}",
        upstream(&script)
    );
    let (running, shared) = start(&toml).await;
    let addr = running.addr;
    let sid = open_session(addr).await;
    let client = post_unread(addr, Some(&sid), &call(2, "slow")).await;
    eventually(BOUND, "the call holds the slot", || {
        shared.policies().in_flight() == vec![("gateway".to_owned(), 1)]
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(client);
    // Long before the reply (10 s) or the timeout (30 s), as over an HTTP upstream.
    eventually(Duration::from_secs(5), "the slot is given back", || {
        shared.policies().in_flight() == vec![("gateway".to_owned(), 0)]
    })
    .await;
    stop_leaving_nothing(running, &dir.join("pids")).await;
}
