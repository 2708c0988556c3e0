//! `/livez`, `/readyz` and `/metrics` through a real axum server on a loopback port, with the
//! shared state filled by hand (the serving side is not needed), then the readiness prober
//! against a real Streamable HTTP MCP server; and the `health_check` tool's content.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_gateway::checks::{CheckSpec, Context};
use mcpulse_gateway::health::{self, Settings, UpstreamKind};
use mcpulse_gateway::metrics::Outcome;
use mcpulse_gateway::state::{ProcessState, Protocol, Shared};
use mcpulse_policy::check::Raw;
use mcpulse_policy::health::CheckStatus;
use mcpulse_testkit::http::get;
use mcpulse_testkit::{FakeHttp, Reply, scenario, tools};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

struct Server {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(shared: Arc<Shared>) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = health::router(shared);
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Server { addr, task }
}

fn protocol(ok: bool, tools: Option<usize>, at_ms: i64) -> Protocol {
    Protocol {
        at_ms,
        handshake_ok: ok,
        tools,
        latency: Duration::from_micros(12_500),
        error: (!ok).then(|| "connection refused".to_owned()),
    }
}

fn check_of<'a>(doc: &'a Value, key: &str) -> &'a Value {
    &doc["checks"][key][0]
}

#[tokio::test]
async fn readyz_waits_for_the_handshake_and_min_tools_with_thresholds() {
    let shared = Arc::new(Shared::default());
    shared.health.configure(&Settings {
        min_tools: 2,
        ..Settings::default()
    });
    let s = serve(Arc::clone(&shared)).await;

    let r = get(s.addr, "/readyz").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("content-type"), Some("application/health+json"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let doc = r.json();
    assert_eq!(doc["status"], "fail");
    assert_eq!(check_of(&doc, "process:state")["observedValue"], "STARTING");
    // Every check carries its time (the process state is read when the document is made).
    assert!(check_of(&doc, "process:state")["time"].is_string(), "{doc}");
    let live = get(s.addr, "/livez").await.json();
    assert!(
        check_of(&live, "process:state")["time"].is_string(),
        "{live}"
    );
    assert_eq!(
        check_of(&doc, "protocol:responseTime")["output"],
        "no handshake with the upstream observed yet"
    );
    assert_eq!(check_of(&doc, "tools:count")["status"], "fail");
    // Starting is alive.
    assert_eq!(get(s.addr, "/livez").await.status, 200);

    shared.update_upstream(|u| u.process = ProcessState::Up);
    health::observe_protocol(&shared, protocol(true, Some(3), 1_700_000_000_000));
    let r = get(s.addr, "/readyz").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let doc = r.json();
    assert_eq!(doc["status"], "pass");
    let p = check_of(&doc, "protocol:responseTime");
    assert_eq!(
        (p["observedValue"].as_f64(), p["observedUnit"].as_str()),
        (Some(12.5), Some("ms"))
    );
    assert_eq!(p["time"], "2023-11-14T22:13:20.000Z");
    let t = check_of(&doc, "tools:count");
    assert_eq!(
        (t["observedValue"].as_u64(), t["minimum"].as_u64()),
        (Some(3), Some(2))
    );

    // One failed probe flips nothing (failure_threshold 3 by default); the third does.
    for (n, want) in [(1, 200), (2, 200), (3, 503)] {
        health::observe_protocol(
            &shared,
            protocol(false, None, 1_700_000_000_000 + n * 10_000),
        );
        let r = get(s.addr, "/readyz").await;
        assert_eq!(r.status, want, "after {n} failed probes: {}", r.body);
        if want == 200 {
            assert_eq!(check_of(&r.json(), "protocol:responseTime")["last"], "fail");
        } else {
            assert_eq!(
                check_of(&r.json(), "protocol:responseTime")["output"],
                "connection refused"
            );
        }
    }
    // One good probe recovers (success_threshold 1).
    health::observe_protocol(&shared, protocol(true, Some(3), 1_700_000_040_000));
    assert_eq!(get(s.addr, "/readyz").await.status, 200);
    // Fewer tools than min_tools, three times: not ready, and it says why.
    for _ in 0..3 {
        health::observe_protocol(&shared, protocol(true, Some(1), 1_700_000_050_000));
    }
    let r = get(s.addr, "/readyz").await;
    assert_eq!(r.status, 503);
    assert_eq!(
        check_of(&r.json(), "tools:count")["output"],
        "tools/list returned 1 tools; at least 2 are required (min_tools)"
    );
    // The process between restarts is not ready, whatever the last probe said.
    health::observe_protocol(&shared, protocol(true, Some(3), 1_700_000_060_000));
    assert_eq!(get(s.addr, "/readyz").await.status, 200);
    shared.update_upstream(|u| u.process = ProcessState::Backoff);
    let r = get(s.addr, "/readyz").await;
    assert_eq!(r.status, 503);
    assert!(r.json()["output"].as_str().unwrap().contains("backoff"));
}

fn dep(toml: &str) -> mcpulse_gateway::checks::Check {
    toml::from_str::<CheckSpec>(toml)
        .unwrap()
        .resolve()
        .unwrap()
}

fn raw(status: CheckStatus, ms: u64, output: &str) -> Raw {
    Raw {
        status,
        latency: Some(Duration::from_millis(ms)),
        output: Some(output.to_owned()),
    }
}

/// Shared state with a ready upstream.
fn ready() -> Arc<Shared> {
    let shared = Arc::new(Shared::default());
    shared.update_upstream(|u| u.process = ProcessState::Up);
    health::observe_protocol(&shared, protocol(true, Some(3), 1_700_000_000_000));
    shared
}

/// [`ready`], with these dependency checks registered (each a `[[checks]]` entry).
fn ready_with(deps: &[&str]) -> Arc<Shared> {
    let shared = ready();
    for d in deps {
        shared.health.register(&dep(d));
    }
    shared
}

#[tokio::test]
async fn a_critical_dependency_fails_readiness_a_degraded_or_optional_one_warns() {
    let shared = ready_with(&[
        "name = \"orders-db\"\nkind = \"tcp\"\ntarget = \"db:5432\"\ndegraded_latency = \"200ms\"",
        "name = \"cache\"\nkind = \"tcp\"\ntarget = \"cache:6379\"\ncritical = false",
    ]);
    let s = serve(Arc::clone(&shared)).await;
    // A critical check not run yet holds readiness back.
    let r = get(s.addr, "/readyz").await;
    assert_eq!(r.status, 503);
    assert_eq!(
        check_of(&r.json(), "orders-db:responseTime")["output"],
        "not checked yet (critical: readiness waits for it)"
    );

    let t0 = 1_700_000_000_000;
    health::record(
        &shared,
        "orders-db",
        raw(CheckStatus::Pass, 20, "connected"),
        t0,
    );
    health::record(
        &shared,
        "cache",
        raw(CheckStatus::Fail, 3, "connection refused"),
        t0,
    );
    let r = get(s.addr, "/readyz").await;
    assert_eq!(r.status, 200);
    let doc = r.json();
    assert_eq!(doc["status"], "warn");
    let cache = check_of(&doc, "cache:responseTime");
    assert_eq!(cache["status"], "warn");
    assert_eq!(cache["confirmed"], "fail");
    assert_eq!(cache["critical"], false);
    assert_eq!(
        cache["output"],
        "connection refused (not critical: readiness only warns)"
    );
    let db = check_of(&doc, "orders-db:responseTime");
    assert_eq!(
        (db["status"].as_str(), db["componentId"].as_str()),
        (Some("pass"), Some("db:5432"))
    );
    assert_eq!(db["observedValue"].as_f64(), Some(20.0));
    assert_eq!(db["kind"], "tcp");

    // The critical one: a blip flips nothing; failure_threshold (3) in a row makes it 503.
    for (n, want) in [(1, 200), (2, 200), (3, 503)] {
        health::record(
            &shared,
            "orders-db",
            raw(CheckStatus::Fail, 1000, "timed out"),
            t0 + n * 20_000,
        );
        let r = get(s.addr, "/readyz").await;
        assert_eq!(r.status, want, "after {n} failures: {}", r.body);
    }
    let doc = get(s.addr, "/readyz").await.json();
    assert_eq!(doc["output"], "timed out");
    assert_eq!(
        check_of(&doc, "orders-db:responseTime")["since"],
        "2023-11-14T22:14:20.000Z"
    );
    // Back, but slow: degraded, 200 with warn.
    health::record(
        &shared,
        "orders-db",
        raw(CheckStatus::Pass, 450, "connected"),
        t0 + 80_000,
    );
    let r = get(s.addr, "/readyz").await;
    assert_eq!(r.status, 200);
    let db = check_of(&r.json(), "orders-db:responseTime").clone();
    assert_eq!(db["status"], "warn");
    assert_eq!(
        db["output"],
        "connected; slower than 200ms (degraded_latency)"
    );
    // ?exclude and ?verbose, kube-apiserver's.
    let r = get(s.addr, "/readyz?verbose").await;
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert!(r.body.contains("[+]process ok\n[+]protocol ok\n[+]tools ok\n[+]orders-db ok (warn: connected; slower than 200ms (degraded_latency))\n"), "{}", r.body);
    assert!(r.body.ends_with("readyz check passed\n"));
    health::record(
        &shared,
        "cache",
        raw(CheckStatus::Pass, 1, "connected"),
        t0 + 80_000,
    );
    let r = get(s.addr, "/readyz?exclude=orders-db").await;
    assert_eq!(r.json()["status"], "pass");
}

#[tokio::test(start_paused = true)]
async fn livez_is_the_event_loop_and_a_stdio_upstream_never_a_dependency() {
    let shared = ready();
    shared
        .health
        .register(&dep("name = \"db\"\nkind = \"tcp\"\ntarget = \"db:1\""));
    for _ in 0..3 {
        health::record(&shared, "db", raw(CheckStatus::Fail, 1, "refused"), 1);
    }
    let s = serve(Arc::clone(&shared)).await;
    // A failing dependency never touches liveness.
    let r = get(s.addr, "/livez").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json()["checks"].get("db:responseTime").is_none());
    // The ticker's last tick, aged past TICK_STALE (paused time): the loop is stalled.
    shared.health.tick();
    let doc = get(s.addr, "/livez").await.json();
    assert_eq!(check_of(&doc, "eventloop:tickAge")["status"], "pass");
    tokio::time::advance(health::TICK_STALE + Duration::from_secs(1)).await;
    let r = get(s.addr, "/livez").await;
    assert_eq!(r.status, 503);
    assert!(
        r.json()["output"]
            .as_str()
            .unwrap()
            .contains("timers are not firing")
    );
    shared.health.tick();
    assert_eq!(get(s.addr, "/livez").await.status, 200);
    // A stdio upstream whose restart budget is spent: a pod restart is the remedy.
    shared.update_upstream(|u| u.process = ProcessState::Fatal);
    let r = get(s.addr, "/livez?verbose").await;
    assert_eq!(r.status, 503);
    assert!(
        r.body
            .contains("[-]process failed: the upstream's restart budget is spent, or its command could not be started"),
        "{}",
        r.body
    );
    // An HTTP upstream is another service: never part of liveness.
    shared.health.configure(&Settings {
        upstream: UpstreamKind::Http,
        ..Settings::default()
    });
    let r = get(s.addr, "/livez").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        check_of(&r.json(), "process:state")["output"],
        "an HTTP upstream is not part of liveness"
    );
    assert_eq!(get(s.addr, "/readyz").await.status, 503);
}

#[tokio::test]
async fn the_health_tool_says_what_readyz_says() {
    let shared =
        ready_with(&["name = \"orders-db\"\nkind = \"tcp\"\ntarget = \"db:1\"\ncritical = false"]);
    health::record(
        &shared,
        "orders-db",
        raw(CheckStatus::Pass, 5, "connected"),
        1,
    );
    let result = health::tool_result(&shared);
    assert_eq!(result["isError"], false);
    let sc = &result["structuredContent"];
    assert_eq!(sc["status"], "ok");
    assert_eq!(sc["checks"]["orders-db"]["status"], "pass");
    assert_eq!(sc["checks"]["tools"]["observedValue"], 3);
    // The text fallback is the same document.
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(&text, sc);
    for _ in 0..3 {
        health::record(
            &shared,
            "orders-db",
            raw(CheckStatus::Fail, 5, "refused"),
            2,
        );
    }
    let sc = health::tool_result(&shared)["structuredContent"].clone();
    assert_eq!(sc["status"], "degraded");
    assert_eq!(sc["output"], "refused (not critical: readiness only warns)");
    shared.update_upstream(|u| u.process = ProcessState::Backoff);
    assert_eq!(
        health::tool_result(&shared)["structuredContent"]["status"],
        "down"
    );
    // The descriptor's outputSchema admits what the tool returns.
    let d = health::tool_descriptor("gateway_health");
    assert_eq!(d["name"], "gateway_health");
    assert_eq!(d["outputSchema"]["properties"]["status"]["enum"][2], "down");
}

/// The exposition's sample lines, as `name{labels}` → value.
fn samples(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_owned(), v.parse().unwrap()))
        .collect()
}

/// Each `name{labels}` has its value in the exposition.
fn expect_samples(text: &str, want: &[(&str, f64)]) {
    let all = samples(text);
    for (key, value) in want {
        let got = all
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no {key} in {all:?}"));
        assert_eq!(got, *value, "{key}");
    }
}

#[tokio::test]
async fn metrics_are_prometheus_text_with_the_documented_names() {
    let shared = Arc::new(Shared::default());
    shared
        .health
        .register(&dep("name = \"db\"\nkind = \"tcp\"\ntarget = \"db:1\""));
    let s = serve(Arc::clone(&shared)).await;
    let r = get(s.addr, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    assert!(r.body.ends_with("# EOF\n"));
    expect_samples(
        &r.body,
        &[
            (r#"mcpulse_gateway_readiness_status{status="fail"}"#, 1.0),
            (r#"mcpulse_gateway_liveness_status{status="pass"}"#, 1.0),
            (
                r#"mcpulse_gateway_upstream_restarts_total{reason="exited"}"#,
                0.0,
            ),
        ],
    );

    shared.update_upstream(|u| u.process = ProcessState::Up);
    health::observe_protocol(&shared, protocol(true, Some(3), 1));
    health::record(&shared, "db", raw(CheckStatus::Pass, 250, "connected"), 1);
    let m = &shared.metrics;
    // A tool the upstream listed (only those get a label of their own).
    m.learn_tools(&["search"]);
    m.request(
        "tools/call",
        Some("search"),
        Duration::from_millis(30),
        Outcome::Ok,
    );
    m.request(
        "tools/call",
        Some("search"),
        Duration::from_millis(40),
        Outcome::ToolError,
    );
    m.request("tools/list", None, Duration::from_millis(2), Outcome::Ok);
    m.session_opened();
    m.session_opened();
    m.session_closed();
    m.connection_opened();
    m.upstream_restart("exited");
    m.upstream_reconnect();
    let body = get(s.addr, "/metrics").await.body;
    expect_samples(
        &body,
        &[
            (r#"mcpulse_gateway_readiness_status{status="pass"}"#, 1.0),
            (r#"mcpulse_gateway_readiness_status{status="fail"}"#, 0.0),
            (
                r#"mcpulse_gateway_check_status{check="db",status="pass"}"#,
                1.0,
            ),
            (
                r#"mcpulse_gateway_check_status{check="db",status="fail"}"#,
                0.0,
            ),
            (
                r#"mcpulse_gateway_check_duration_seconds{check="db"}"#,
                0.25,
            ),
            (
                r#"mcpulse_gateway_requests_total{method="tools/call",tool="search",outcome="tool_error"}"#,
                1.0,
            ),
            (
                r#"mcpulse_gateway_request_duration_seconds_count{method="tools/call",tool="search"}"#,
                2.0,
            ),
            (
                r#"mcpulse_gateway_request_duration_seconds_count{method="tools/list",tool=""}"#,
                1.0,
            ),
            ("mcpulse_gateway_active_sessions", 1.0),
            ("mcpulse_gateway_active_connections", 1.0),
            (
                r#"mcpulse_gateway_upstream_restarts_total{reason="exited"}"#,
                1.0,
            ),
            ("mcpulse_gateway_upstream_reconnects_total", 1.0),
        ],
    );
    for family in [
        "mcpulse_gateway_requests",
        "mcpulse_gateway_request_duration_seconds",
        "mcpulse_gateway_check_duration_seconds",
    ] {
        assert!(body.contains(&format!("# TYPE {family} ")), "{family}");
    }
}

/// The prober: a real probe of a real Streamable HTTP server, every interval; readiness comes
/// with the first good probe and goes after failure_threshold bad ones.
#[tokio::test]
async fn the_readiness_prober_probes_the_mcp_endpoint() {
    let current = Arc::new(AtomicUsize::new(0));
    let server = FakeHttp::start_script(scenario::shifting(
        vec![
            tools::http_server(tools::catalogue("ok")),
            Arc::new(|_: &mcpulse_testkit::Request| Reply::status(503)),
        ],
        Arc::clone(&current),
    ))
    .await;
    let shared = Arc::new(Shared::default());
    shared.update_upstream(|u| u.process = ProcessState::Up);
    let target = mcpulse_probe::Target::http(&server.url("/mcp")).unwrap();
    let running = health::start(
        Settings {
            mcp: Some(target),
            readiness_interval: Duration::from_secs(1),
            readiness_timeout: Duration::from_millis(800),
            protocol_thresholds: mcpulse_policy::check::Thresholds {
                failure_threshold: 2,
                ..Default::default()
            },
            // As when the gateway's own /mcp is probed with its health tool on: not counted.
            own_tool: Some("health_check".into()),
            ..Settings::default()
        },
        Arc::clone(&shared),
    );
    let s = serve(Arc::clone(&shared)).await;
    let until = |want: u16, within: Duration| {
        let addr = s.addr;
        async move {
            let t0 = std::time::Instant::now();
            loop {
                let r = get(addr, "/readyz").await;
                if r.status == want {
                    return (r, t0.elapsed());
                }
                assert!(
                    t0.elapsed() < within,
                    "not {want} within {within:?}: {}",
                    r.body
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let (r, _) = until(200, Duration::from_secs(3)).await;
    let doc = r.json();
    // The catalogue's nine tools, but for the one named as the gateway's own.
    assert_eq!(check_of(&doc, "tools:count")["observedValue"], 8);
    assert!(
        check_of(&doc, "protocol:responseTime")["observedValue"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    // Every request of the prober says it is one.
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.header("mcpulse-health-probe")
                == Some(mcpulse_gateway::checks::probe_token()))
    );
    current.store(1, Ordering::SeqCst);
    // The failed probes, each seen as it is observed (one a second, polled every 50 ms), until
    // /readyz turns 503: that takes failure_threshold (2) of them, not one.
    let mut failed_probes = std::collections::BTreeSet::new();
    let t0 = std::time::Instant::now();
    let r = loop {
        let r = get(s.addr, "/readyz").await;
        if let Some(p) = shared.upstream().protocol.filter(|p| !p.handshake_ok) {
            failed_probes.insert(p.at_ms);
        }
        if r.status == 503 {
            break r;
        }
        assert!(t0.elapsed() < Duration::from_secs(4), "not 503: {}", r.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        failed_probes.len(),
        2,
        "flipped after {} failed probes, not failure_threshold",
        failed_probes.len()
    );
    assert!(
        check_of(&r.json(), "protocol:responseTime")["output"]
            .as_str()
            .unwrap()
            .contains("503"),
        "{}",
        r.body
    );
    assert!(shared.upstream().protocol.is_some_and(|p| !p.handshake_ok));
    drop(running);
}

/// The tool's answer, served by an MCP server and read back by a `tool` check (mcpulse's own
/// reading of health tools, the judge's): its status and the failing dependency come through,
/// and its structuredContent fits its own outputSchema (the judge checks it).
#[tokio::test]
async fn mcpulse_reads_the_health_tool_as_it_reads_any() {
    let shared =
        ready_with(&["name = \"orders-db\"\nkind = \"tcp\"\ntarget = \"db:1\"\ncritical = false"]);
    for _ in 0..3 {
        health::record(
            &shared,
            "orders-db",
            raw(CheckStatus::Fail, 5, "refused"),
            2,
        );
    }
    let served = tools::ScriptedTool {
        tool: health::tool_descriptor("health_check"),
        answer: tools::Answer::Result(health::tool_result(&shared)),
    };
    let server = FakeHttp::start_script(tools::http_server(vec![served])).await;
    let ctx = Context {
        mcp: Some(mcpulse_probe::Target::http(&server.url("/mcp")).unwrap()),
        ..Context::default()
    };
    let check = dep("name = \"gw\"\nkind = \"tool\"\ntool = \"health_check\"");
    let raw = mcpulse_gateway::checks::run_once(&check, &ctx).await;
    let out = raw.output.unwrap_or_default();
    assert_eq!(raw.status, CheckStatus::Warn, "{out}");
    assert!(out.contains("reports degraded"), "{out}");
    assert!(out.contains("orders-db"), "{out}");
    assert!(!out.contains("outputSchema"), "{out}");
}

/// `mcpulse monitor` (or `mcpulse probe --health-url`) watching a gateway's `/readyz`: a
/// dependency that breaks makes the verdict degraded (not critical) or down (critical), with a
/// finding and a component that name it.
#[tokio::test]
async fn the_monitor_reads_readyz_and_names_the_broken_dependency() {
    let shared = ready_with(&[
        "name = \"search-api\"\nkind = \"tcp\"\ntarget = \"search:443\"\ncritical = false",
        "name = \"orders-db\"\nkind = \"tcp\"\ntarget = \"db:5432\"",
    ]);
    health::record(
        &shared,
        "search-api",
        raw(CheckStatus::Pass, 5, "connected"),
        1,
    );
    health::record(
        &shared,
        "orders-db",
        raw(CheckStatus::Pass, 5, "connected"),
        1,
    );
    let s = serve(Arc::clone(&shared)).await;
    let url = format!("http://{}/readyz", s.addr);
    let judge = |url: String| async move {
        let target = mcpulse_probe::Target::http(&url).unwrap();
        let plan = mcpulse_probe::PlanSpec::new(mcpulse_probe::Caller::Monitor).plan(&target);
        let transcript = mcpulse_probe::probe_health(&url, &plan).await;
        mcpulse_judge::judge(&transcript, &mcpulse_judge::Policy::default())
    };
    assert_eq!(
        judge(url.clone()).await.status,
        mcpulse_judge::Status::Healthy
    );

    for _ in 0..3 {
        health::record(
            &shared,
            "search-api",
            raw(CheckStatus::Fail, 5, "connection refused"),
            2,
        );
    }
    let report = judge(url.clone()).await;
    assert_eq!(report.status, mcpulse_judge::Status::Degraded);
    assert!(
        report.components.iter().any(
            |c| c.name.starts_with("search-api") && c.status == mcpulse_judge::Status::Degraded
        ),
        "{:?}",
        report.components
    );
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.message.contains("search-api")),
        "{:?}",
        report.findings
    );

    for _ in 0..3 {
        health::record(
            &shared,
            "orders-db",
            raw(CheckStatus::Fail, 5, "connection refused"),
            3,
        );
    }
    let report = judge(url).await;
    assert_eq!(report.status, mcpulse_judge::Status::Down);
    assert!(
        report
            .components
            .iter()
            .any(|c| c.name.starts_with("orders-db") && c.status == mcpulse_judge::Status::Down),
        "{:?}",
        report.components
    );
}
