//! `mcpulse probe --call` and `--health-tool` (issue #18): synthetic tool calls and the
//! server's health tool, judged as the dependency layer, against the scripted servers of
//! `mcpulse_testkit::tools` over stdio (a real child process) and Streamable HTTP (a real
//! loopback socket): a health tool in each status, a tool whose dependency is down, an
//! `outputSchema` violation, a silent tool given up at its budget and cancelled, a
//! destructive tool refused, expectations, and the usage errors.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_testkit::run::{self, Run, codes, finding_message};
use mcpulse_testkit::stdio::{read_pids, still_running_after};
use mcpulse_testkit::tools::{self, CANCEL_SEEN};
use mcpulse_testkit::{Act, FakeHttp, TempDir};
use serde_json::Value;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
const BOUND: Duration = Duration::from_secs(20);

/// A stdio server with the catalogue (its health tool at `health`), its pid recorded.
struct Stdio {
    dir: TempDir,
    script: std::path::PathBuf,
}

impl Stdio {
    fn new(health: &str) -> Stdio {
        let dir = TempDir::new("calls");
        let script = tools::stdio_server(&tools::catalogue(health))
            .at_start(Act::RecordPid(dir.join("pids")))
            .write(&dir, "server.sh");
        Stdio { dir, script }
    }

    /// [`Stdio::new`] with a server that appends each `tools/call` and
    /// `notifications/cancelled` it reads to `received` in its directory.
    fn recording(health: &str) -> Stdio {
        let dir = TempDir::new("calls");
        let script =
            tools::stdio_server_recording(&tools::catalogue(health), &dir.join("received"))
                .at_start(Act::RecordPid(dir.join("pids")))
                .write(&dir, "server.sh");
        Stdio { dir, script }
    }

    async fn probe(&self, extra: &[&str]) -> Run {
        let script = self.script.to_string_lossy().into_owned();
        let mut args = vec!["probe", "--json", "--timeout", "10s"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sh", script.as_str()]);
        let r = run::run(BIN, &args, &[], BOUND).await;
        // Every server the probe started is gone when it returns.
        let pids = read_pids(&self.dir.join("pids"));
        assert!(!pids.is_empty());
        assert_eq!(
            still_running_after(&pids, Duration::from_secs(2)),
            Vec::<u32>::new()
        );
        r
    }
}

async fn http(health: &str) -> FakeHttp {
    FakeHttp::start_script(tools::http_server(tools::catalogue(health))).await
}

async fn probe_http(server: &FakeHttp, extra: &[&str]) -> Run {
    let url = server.url("/mcp");
    let mut args = vec![
        "probe",
        url.as_str(),
        "--json",
        "--no-security",
        "--timeout",
        "5s",
    ];
    args.extend_from_slice(extra);
    run::run(BIN, &args, &[], BOUND).await
}

/// The same probe of the catalogue (its health tool at `health`) over stdio, then HTTP.
async fn on_both(health: &str, args: &[&str]) -> [Run; 2] {
    let stdio = Stdio::new(health);
    let server = http(health).await;
    [stdio.probe(args).await, probe_http(&server, args).await]
}

fn call_count(server: &FakeHttp, tool: &str) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.rpc_method().as_deref() == Some("tools/call"))
        .filter(|r| r.json().and_then(|b| b.pointer("/params/name").cloned()) == Some(tool.into()))
        .count()
}

fn layer(r: &Run, name: &str) -> Value {
    r.json()["layers"][name].clone()
}

#[tokio::test]
async fn a_health_tool_in_each_status_on_stdio_and_http() {
    for (status, exit, code) in [
        ("ok", 0, None),
        ("healthy", 0, None),
        ("degraded", 1, Some("health-tool-degraded")),
        ("warn", 1, Some("health-tool-degraded")),
        ("down", 2, Some("health-tool-down")),
        ("unhealthy", 2, Some("health-tool-down")),
    ] {
        let stdio = Stdio::new(status);
        let server = http(status).await;
        for r in [stdio.probe(&[]).await, probe_http(&server, &[]).await] {
            assert_eq!(r.code, Some(exit), "{status}: {}\n{}", r.stdout, r.stderr);
            let report = r.json();
            let found = codes(&report["findings"]);
            let calls = report["calls"].as_array().unwrap();
            assert_eq!(calls.len(), 1, "{status}: the health tool, found by auto");
            assert_eq!(calls[0]["tool"], "health_check");
            assert_eq!(calls[0]["purpose"], "health-tool");
            match code {
                None => {
                    assert!(!found.iter().any(|c| c.starts_with("health")), "{found:?}");
                    assert_eq!(calls[0]["reported"], "healthy");
                }
                Some(code) => {
                    assert!(found.contains(&code.to_owned()), "{status}: {found:?}");
                    // The component is named, with where it was read.
                    let m = finding_message(&report, "health-component-unhealthy");
                    assert!(m.starts_with("orders-db reports"), "{m}");
                    assert!(m.contains("(health tool health_check)"), "{m}");
                }
            }
            assert_eq!(layer(&r, "protocol"), "healthy");
            assert_eq!(layer(&r, "dependencies"), report["status"]);
        }
        assert_eq!(call_count(&server, "health_check"), 1);
    }
    // Off: not called, and the dependency layer is not checked.
    let server = http("down").await;
    let r = probe_http(&server, &["--health-tool", "off"]).await;
    assert_eq!(r.code, Some(0), "{}", r.stdout);
    assert_eq!(call_count(&server, "health_check"), 0);
    assert_eq!(layer(&r, "dependencies"), Value::Null);
}

#[tokio::test]
async fn a_tool_whose_dependency_is_down_degrades_or_downs_when_critical() {
    let stdio = Stdio::new("ok");
    let server = http("ok").await;
    for critical in [false, true] {
        let mut args = vec!["--call", "orders_lookup"];
        if critical {
            args.push("--critical");
        }
        for r in [stdio.probe(&args).await, probe_http(&server, &args).await] {
            assert_eq!(r.code, Some(if critical { 2 } else { 1 }), "{}", r.stdout);
            let report = r.json();
            let m = finding_message(&report, "tool-call-failed");
            assert!(
                m.contains("orders_lookup returned isError: true: orders-db unreachable"),
                "{m}"
            );
            assert_eq!(
                codes(&report["findings"]).contains(&"critical-call-failed".to_owned()),
                critical
            );
            assert_eq!(layer(&r, "protocol"), "healthy");
        }
    }
}

#[tokio::test]
async fn an_output_schema_violation_is_a_finding() {
    for r in on_both("ok", &["--call", "weather"]).await {
        assert_eq!(r.code, Some(1), "{}", r.stdout);
        let m = finding_message(&r.json(), "tool-output-invalid");
        assert!(m.contains("at /temperature"), "{m}");
        assert!(m.contains("\"warm\" is not of type \"number\""), "{m}");
    }
}

#[tokio::test]
async fn a_silent_tool_is_given_up_at_its_budget_and_cancelled() {
    let stdio = Stdio::recording("ok");
    let transcript = stdio.dir.join("t.json");
    let t = transcript.to_string_lossy().into_owned();
    let r = stdio
        .probe(&[
            "--call",
            "slow_report",
            "--budget",
            "300ms",
            "--transcript",
            &t,
        ])
        .await;
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    let report = r.json();
    let m = finding_message(&report, "tool-call-slow");
    assert_eq!(
        m,
        "the call of slow_report did not answer within its 300 ms budget; cancelled"
    );
    assert_eq!(report["calls"][0]["cancelled"], true);
    let tr: Value = serde_json::from_str(&std::fs::read_to_string(&transcript).unwrap()).unwrap();
    let exchanges = tr["exchanges"].as_array().unwrap();
    let call = exchanges
        .iter()
        .find(|e| e["step"] == "tools/call")
        .unwrap();
    let cancel = exchanges
        .iter()
        .find(|e| e["step"] == "notifications/cancelled")
        .expect("notifications/cancelled sent");
    let sent: Value = serde_json::from_str(cancel["request"]["body"].as_str().unwrap()).unwrap();
    assert_eq!(sent["params"]["requestId"], call["id"]);
    // The server read it.
    let stderr: Vec<&str> = tr["processes"][0]["stderr"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["line"].as_str())
        .collect();
    assert!(stderr.contains(&CANCEL_SEEN), "{stderr:?}");
    // What the server itself read: the cancellation names the call it received.
    let received: Vec<Value> = std::fs::read_to_string(stdio.dir.join("received"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let methods: Vec<&str> = received
        .iter()
        .map(|m| m["method"].as_str().unwrap())
        .collect();
    // (The health tool, `auto` by default, is called after it.)
    assert_eq!(
        methods[..2],
        ["tools/call", "notifications/cancelled"],
        "{received:?}"
    );
    assert_eq!(received[0]["params"]["name"], "slow_report");
    assert!(received[0]["id"].is_i64(), "{}", received[0]);
    assert_eq!(received[1]["params"]["requestId"], received[0]["id"]);
}

/// Over Streamable HTTP a call given up at its budget is cancelled by closing its response
/// stream (the spec's cancellation for HTTP), and the server sees that close: for a response
/// stream the server holds open with a comment every 50 ms, and for a request it never
/// answers at all. Timed by the server, from the request to finding the client gone. The
/// probe makes a second call after it, with a budget of 1.5 s, so a stream left open until
/// the probe exits would be seen closed 1.5 s too late.
#[tokio::test]
async fn over_streamable_http_a_call_past_its_budget_closes_its_stream_and_the_server_sees_it() {
    const BUDGET: Duration = Duration::from_millis(300);
    const SECOND: Duration = Duration::from_millis(1500);
    // Room for the server to notice (two comment periods) and a busy machine.
    const MARGIN: Duration = Duration::from_millis(700);
    for answer in [tools::Answer::HeldOpen, tools::Answer::Silent] {
        let mut catalogue = tools::catalogue("ok");
        for t in &mut catalogue {
            if t.tool["name"] == "slow_report" {
                t.answer = answer.clone();
            }
        }
        let server = FakeHttp::start_script(tools::http_server(catalogue)).await;
        let args = [
            "--health-tool",
            "off",
            "--call",
            "slow_report",
            "--budget",
            "300ms",
            "--call",
            "slow_report",
            "--budget",
            "1500ms",
        ];
        let r = probe_http(&server, &args).await;
        assert_eq!(r.code, Some(1), "{answer:?}: {}", r.stdout);
        let report = r.json();
        assert!(codes(&report["findings"]).contains(&"tool-call-slow".to_owned()));
        assert_eq!(report["calls"][0]["cancelled"], true, "{answer:?}");
        assert_eq!(report["calls"][1]["cancelled"], true, "{answer:?}");
        // The server finds a closed stream at its next writes: wait for both (bounded), and
        // then judge by when it found out.
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while server.abandoned().len() < 2 && std::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut gone = server.abandoned();
        // In the order the probe made the calls.
        gone.sort_by_key(|a| a.request.rpc_id().and_then(|id| id.as_i64()));
        let seen: Vec<(Option<String>, Duration)> = gone
            .iter()
            .map(|a| (a.request.rpc_method(), a.after))
            .collect();
        assert_eq!(seen.len(), 2, "{answer:?}: {seen:?}");
        assert!(
            seen.iter().all(|(m, _)| m.as_deref() == Some("tools/call")),
            "{answer:?}: {seen:?}"
        );
        for (a, budget) in gone.iter().zip([BUDGET, SECOND]) {
            assert!(
                a.after >= budget - Duration::from_millis(50) && a.after <= budget + MARGIN,
                "{answer:?}: the server saw the close {:?} after a call with a budget of {budget:?}",
                a.after
            );
        }
    }
}

/// A call whose budget outlasts the probe's `--timeout` is given up at the probe's deadline,
/// and the finding says that bound fired, not the budget.
#[tokio::test]
async fn a_call_cut_by_the_probe_timeout_names_that_bound() {
    let server = http("ok").await;
    let url = server.url("/mcp");
    let args = [
        "probe",
        url.as_str(),
        "--json",
        "--no-security",
        "--timeout",
        "1s",
        "--call",
        "slow_report",
        "--budget",
        "5s",
    ];
    let r = run::run(BIN, &args, &[], BOUND).await;
    assert!(r.elapsed < Duration::from_secs(4), "{:?}", r.elapsed);
    let report = r.json();
    let m = finding_message(&report, "tool-call-slow");
    assert!(
        m.contains("ms left before the probe's deadline (its budget is 5000 ms)"),
        "{m}"
    );
}

#[tokio::test]
async fn progress_notifications_before_the_result_are_tolerated() {
    for r in on_both("ok", &["--call", "long_report"]).await {
        assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
        assert_eq!(r.json()["calls"][0]["status"], "healthy", "{}", r.stdout);
    }
}

#[tokio::test]
async fn a_destructive_or_unannotated_tool_is_refused_before_anything_is_sent() {
    let server = http("ok").await;
    for tool in ["drop_table", "annotated_nothing"] {
        let r = probe_http(&server, &["--call", tool]).await;
        assert_eq!(r.code, Some(1), "{}", r.stdout);
        let m = finding_message(&r.json(), "tool-call-refused");
        assert!(m.contains("pass --allow-side-effects"), "{m}");
        assert_eq!(call_count(&server, tool), 0, "{tool} was called");
    }
    let r = probe_http(&server, &["--call", "drop_table", "--allow-side-effects"]).await;
    assert_eq!(r.code, Some(0), "{}", r.stdout);
    assert_eq!(call_count(&server, "drop_table"), 1);
    // stdio: nothing written to the server either.
    let stdio = Stdio::new("ok");
    let transcript = stdio.dir.join("t.json");
    let t = transcript.to_string_lossy().into_owned();
    let r = stdio
        .probe(&["--call", "drop_table", "--transcript", &t])
        .await;
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    let tr: Value = serde_json::from_str(&std::fs::read_to_string(&transcript).unwrap()).unwrap();
    assert_eq!(tr["calls"][0]["refused"], "destructive");
    let sent: Vec<&str> = tr["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["step"] == "tools/call")
        .filter_map(|e| e["request"]["body"].as_str())
        .collect();
    // Only the health tool was called.
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].contains("\"name\":\"health_check\""), "{sent:?}");
}

#[tokio::test]
async fn expectations_hold_or_say_what_was_found() {
    let server = http("ok").await;
    let r = probe_http(
        &server,
        &[
            "--call",
            "ping_db",
            "--expect",
            r#"/structuredContent/status == "ok""#,
            "--expect",
            "/structuredContent/latency_ms < 100",
        ],
    )
    .await;
    assert_eq!(r.code, Some(0), "{}", r.stdout);
    assert_eq!(r.json()["calls"][0]["status"], "healthy");
    let r = probe_http(
        &server,
        &[
            "--call",
            "ping_db",
            "--expect",
            "/structuredContent/latency_ms < 1",
        ],
    )
    .await;
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert_eq!(
        finding_message(&r.json(), "tool-expectation-failed"),
        "the call of ping_db: /structuredContent/latency_ms < 1 does not hold: found 3"
    );
}

#[tokio::test]
async fn call_options_out_of_place_are_usage_errors() {
    for (args, needle) in [
        (
            vec!["--args", "{}", "--call", "x"],
            "--args applies to the --call before it, and there is none",
        ),
        (
            vec!["--call", "x", "--expect", "/status = 1"],
            "unknown operator \"=\"",
        ),
        (
            vec!["--call", "x", "--args", "[1]"],
            "must be a JSON object",
        ),
        (
            vec!["--call", "x", "--budget", "1s", "--budget", "2s"],
            "--budget given twice for --call x",
        ),
    ] {
        let mut all = vec!["probe", "http://127.0.0.1:9/mcp"];
        all.extend(args);
        let r = run::run(BIN, &all, &[], BOUND).await;
        assert_eq!(r.code, Some(3), "{all:?}: {}", r.stderr);
        assert!(r.stderr.contains(needle), "{all:?}: {}", r.stderr);
    }
}
