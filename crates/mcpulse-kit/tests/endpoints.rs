//! `/livez` and `/readyz` beside rmcp's service on one listener: health+json, 200/503, the
//! readiness latch opened by `Kit::wrap`, a dependency breaking and mending.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Session, get, serve};
use mcpulse_kit::check::Outcome;
use mcpulse_kit::{Check, Health, Kit};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

async fn until(mut f: impl AsyncFnMut() -> bool) {
    for _ in 0..200 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("condition not met within 5 s");
}

#[tokio::test]
async fn readyz_and_livez_beside_the_mcp_service() {
    let broken = Arc::new(AtomicBool::new(false));
    let b = broken.clone();
    let health = Health::new("kit-test", "9.9.9").with_check(
        Check::from_fn("db", move || {
            let down = b.load(Ordering::SeqCst);
            async move {
                if down {
                    Outcome::down("db refused")
                } else {
                    Outcome::ok("db answered")
                }
            }
        })
        .interval(Duration::from_millis(100))
        .failure_threshold(1),
    );
    // Before the registry loads: not ready, and it says why.
    let unwrapped = health.readiness();
    assert_eq!(unwrapped.status().http_status(), 503);
    let served = serve(Some(Kit::new(health))).await;
    until(async || served.health.runs("db") > 0).await;
    let r = get(served.addr, "/readyz").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/health+json"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let doc = r.json();
    assert_eq!(doc["status"], "pass");
    assert_eq!(doc["serviceId"], "kit-test");
    assert_eq!(doc["version"], "9.9.9");
    assert_eq!(doc["checks"]["tools:count"][0]["observedValue"], 4);
    assert_eq!(doc["checks"]["db:responseTime"][0]["output"], "db answered");
    // The MCP service on the same listener.
    let mut s = Session::open(&served.url()).await;
    assert_eq!(s.list().await.len(), 4);

    broken.store(true, Ordering::SeqCst);
    until(async || get(served.addr, "/readyz").await.status == 503).await;
    let doc = get(served.addr, "/readyz").await.json();
    assert_eq!(doc["status"], "fail");
    assert_eq!(doc["output"], "db refused");
    let v = get(served.addr, "/readyz?verbose").await;
    assert!(
        v.body
            .contains("[-]db failed: db refused\nreadyz check failed"),
        "{}",
        v.body
    );
    assert_eq!(get(served.addr, "/readyz?exclude=db").await.status, 200);
    // Liveness never looks at dependencies.
    let l = get(served.addr, "/livez").await;
    assert_eq!(l.status, 200);
    assert_eq!(l.json()["status"], "pass");

    broken.store(false, Ordering::SeqCst);
    until(async || get(served.addr, "/readyz").await.status == 200).await;
}

#[tokio::test]
async fn a_plain_router_never_opens_the_latch() {
    // Without Kit::wrap nobody reports the tool registry: not ready.
    let served = serve(None).await;
    let r = get(served.addr, "/readyz").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["output"], "the tool registry has not loaded yet");
}

#[tokio::test]
async fn metrics_have_the_gateways_names() {
    use mcpulse_kit::ToolPolicy;
    let health = Health::new("kit-test", "1").with_check(
        Check::from_fn("db", || async { Outcome::ok("fine") }).interval(Duration::from_millis(100)),
    );
    let kit = Kit::new(health).tool(
        "sleep",
        ToolPolicy::new()
            .timeout(Duration::from_millis(100))
            .breaker(Default::default())
            .max_concurrent(2),
    );
    let served = serve(Some(kit)).await;
    until(async || served.health.runs("db") > 0).await;
    let mut s = Session::open(&served.url()).await;
    s.call("hello", serde_json::json!({})).await;
    s.call("fail", serde_json::json!({})).await;
    s.call("sleep", serde_json::json!({"ms": 5000})).await;
    let m = get(served.addr, "/metrics").await;
    assert_eq!(m.status, 200);
    assert!(
        m.header("content-type")
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let body = m.body;
    for line in [
        r#"mcpulse_gateway_requests_total{method="tools/call",tool="hello",outcome="ok"} 1"#,
        r#"mcpulse_gateway_requests_total{method="tools/call",tool="fail",outcome="tool_error"} 1"#,
        r#"mcpulse_gateway_requests_total{method="tools/call",tool="sleep",outcome="gateway_error"} 1"#,
        r#"mcpulse_gateway_request_duration_seconds_count{method="tools/call",tool="hello"} 1"#,
        r#"mcpulse_gateway_check_status{check="db",status="pass"} 1"#,
        r#"mcpulse_gateway_readiness_status{status="pass"} 1"#,
        r#"mcpulse_gateway_liveness_status{status="pass"} 1"#,
        r#"mcpulse_gateway_breaker_state{breaker="sleep",state="closed"} 1"#,
        r#"mcpulse_gateway_tool_timeouts_total{tool="sleep"} 1"#,
    ] {
        assert!(body.contains(line), "{line} missing in:\n{body}");
    }
    assert!(body.contains("mcpulse_gateway_check_duration_seconds{check=\"db\"}"));
    assert!(body.ends_with("# EOF\n"));
    same_as_the_gateways_table(&body);
}

/// One client's calls with arguments that do not fit the tool: answered as `isError` results
/// by rmcp, counted as such, and not the tool's failure: its breaker stays closed for every
/// other session.
#[tokio::test]
async fn a_clients_bad_arguments_do_not_open_the_tools_breaker() {
    use mcpulse_kit::ToolPolicy;
    use mcpulse_policy::breaker::BreakerPolicy;
    let breaker = BreakerPolicy {
        minimum_calls: 2,
        failure_rate: 0.5,
        wait_in_open: Duration::from_secs(60),
        ..BreakerPolicy::default()
    };
    let kit =
        Kit::new(Health::new("kit-test", "1")).tool("sleep", ToolPolicy::new().breaker(breaker));
    let served = serve(Some(kit)).await;
    let mut s = Session::open(&served.url()).await;
    for _ in 0..5 {
        let r = s.call("sleep", serde_json::json!({"ms": "x"})).await;
        assert_eq!(r["isError"], true, "{r}");
    }
    let r = s.call("sleep", serde_json::json!({"ms": 1})).await;
    assert_eq!(r["content"][0]["text"], "slept 1 ms", "{r}");
    let body = get(served.addr, "/metrics").await.body;
    for line in [
        r#"mcpulse_gateway_requests_total{method="tools/call",tool="sleep",outcome="tool_error"} 5"#,
        r#"mcpulse_gateway_breaker_state{breaker="sleep",state="closed"} 1"#,
    ] {
        assert!(body.contains(line), "{line} missing in:\n{body}");
    }
}

/// The gateway's documented metrics (docs/gateway.md `## Metrics`): name -> the label keys
/// its row names in backquotes (a superset: values are backquoted too).
fn gateway_table() -> std::collections::HashMap<String, String> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/gateway.md"
    ))
    .unwrap();
    let section = doc.split("\n## Metrics\n").nth(1).unwrap();
    section
        .lines()
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let name = cells.first()?.strip_prefix("| `")?.strip_suffix('`')?;
            Some((name.to_owned(), cells.get(2)?.to_string()))
        })
        .collect()
}

/// Every series the kit exports is one of the gateway's, with label keys the gateway's row
/// names: one dashboard, one alert, serve both.
fn same_as_the_gateways_table(body: &str) {
    let table = gateway_table();
    assert!(table.len() > 10, "{table:?}");
    let mut seen = 0;
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, _) = line.rsplit_once(' ').unwrap();
        let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
        let base = ["_bucket", "_count", "_sum", "_created"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|b| table.contains_key(*b)))
            .unwrap_or(name);
        let row = table
            .get(base)
            .unwrap_or_else(|| panic!("{base} is not one of the gateway's metrics"));
        for pair in labels
            .trim_end_matches('}')
            .split(',')
            .filter(|p| !p.is_empty())
        {
            let key = pair.split_once('=').unwrap().0;
            if key == "le" {
                continue;
            }
            assert!(
                row.contains(&format!("`{key}`")),
                "{base}'s label {key} is not the gateway's: {row}"
            );
        }
        seen += 1;
    }
    assert!(seen > 10, "{body}");
}

#[tokio::test]
async fn the_self_check_runs_tools_list_against_the_server_itself() {
    use mcpulse_kit::check::{Probe, SelfCheck, Status};
    let served = serve(Some(Kit::new(Health::new("kit-test", "1")))).await;
    let probe = SelfCheck::new(&served.url()).unwrap();
    assert_eq!(probe.kind(), "self");
    let o = probe.run().await;
    assert_eq!(o.status, Status::Ok, "{o:?}");
    assert_eq!(o.detail.as_deref(), Some("tools/list returned 4 tools"));
    // Its /readyz is no MCP endpoint: down, saying why.
    let wrong = SelfCheck::new(&format!("http://{}/readyz", served.addr)).unwrap();
    let o = wrong.run().await;
    assert_eq!(o.status, Status::Down, "{o:?}");
    assert!(o.detail.unwrap().starts_with("initialize got no reply"));
}
