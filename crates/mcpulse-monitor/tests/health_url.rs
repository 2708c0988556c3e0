//! A monitor target's `health_url`: the server's HTTP health endpoint (here `mcpulse
//! supervise`'s `/readyz` shape) is read at each check, and a failing component becomes a
//! finding that names it, with the protocol layer healthy.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_monitor::config;
use mcpulse_monitor::fleet::Fleet;
use mcpulse_monitor::probe::{once, target_and_plan};
use mcpulse_testkit::FakeHttp;
use mcpulse_testkit::http::Reply;
use mcpulse_testkit::scenario;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[tokio::test]
async fn a_target_with_a_health_url_sees_its_components() {
    let mcp = FakeHttp::start_script(scenario::modern(false, vec![None])).await;
    let down = Arc::new(AtomicBool::new(false));
    let flag = down.clone();
    let health = FakeHttp::start(move |_| {
        if flag.load(Ordering::SeqCst) {
            Reply::json(
                503,
                &json!({"status": "fail", "checks": {"child:state": [{
                    "status": "fail", "observedValue": "BACKOFF", "observedUnit": "state",
                    "output": "waiting out the backoff before a restart: exited with code 1"}]}}),
            )
        } else {
            Reply::json(200, &json!({"status": "pass", "checks": {}}))
        }
    })
    .await;
    let text = format!(
        "[[targets]]\nname = \"supervised\"\nurl = \"{}\"\nhealth_url = \"{}\"\ntimeout = \"3s\"\nsecurity = false\n",
        mcp.url("/mcp"),
        health.url("/readyz")
    );
    let cfg = config::parse(&text, "m.toml", Path::new("/nonexistent"), &|_| None).unwrap();
    let (target, plan) = target_and_plan(&cfg.targets[0]).unwrap();
    let fleet = Fleet::new();

    let p = once(&fleet, &target, &plan, Duration::from_secs(3)).await;
    assert_eq!(
        p.report.status,
        mcpulse_judge::Status::Healthy,
        "{:?}",
        p.report.findings
    );

    down.store(true, Ordering::SeqCst);
    let p = once(&fleet, &target, &plan, Duration::from_secs(3)).await;
    assert_eq!(p.report.status, mcpulse_judge::Status::Down);
    let codes: Vec<(&str, &str)> = p
        .report
        .findings
        .iter()
        .map(|f| (f.code.code(), f.message.as_str()))
        .collect();
    assert!(
        codes.iter().any(|(c, m)| *c == "health-component-unhealthy"
            && m.starts_with("child:state reports fail (observed BACKOFF state)")),
        "{codes:?}"
    );
    assert!(
        codes.iter().any(|(c, _)| *c == "health-endpoint-down"),
        "{codes:?}"
    );
    assert_eq!(health.requests().len(), 2);
}

/// `health_url = "auto"`: the check reads /healthz, /readyz and /health on the target's
/// origin, once each, and judges the one with a health document (here /readyz).
#[tokio::test]
async fn health_url_auto_discovers_the_endpoint_on_the_targets_origin() {
    let mcp = scenario::modern(false, vec![None]);
    let server = FakeHttp::start(move |req| match req.target.as_str() {
        "/mcp" => mcp(req),
        "/readyz" => Reply::json(
            503,
            &json!({"status": "fail", "checks": {"orders-db": {"status": "fail"}}}),
        ),
        _ => Reply::html(200, "<html>catch-all</html>"),
    })
    .await;
    let text = format!(
        "[[targets]]\nname = \"auto\"\nurl = \"{}\"\nhealth_url = \"auto\"\ntimeout = \"3s\"\nsecurity = false\n",
        server.url("/mcp")
    );
    let cfg = config::parse(&text, "m.toml", Path::new("/nonexistent"), &|_| None).unwrap();
    let (target, plan) = target_and_plan(&cfg.targets[0]).unwrap();
    let p = once(&Fleet::new(), &target, &plan, Duration::from_secs(3)).await;
    assert_eq!(p.report.status, mcpulse_judge::Status::Down);
    assert!(
        p.report
            .findings
            .iter()
            .any(|f| f.code.code() == "health-endpoint-down" && f.message.contains("/readyz")),
        "{:?}",
        p.report.findings
    );
    assert_eq!(p.report.components[0].name, "orders-db");
    for path in ["/healthz", "/readyz", "/health"] {
        let n = server
            .requests()
            .iter()
            .filter(|r| r.target == path)
            .count();
        assert_eq!(n, 1, "{path}");
    }
}
