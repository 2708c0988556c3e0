//! The health registry: checks cached on their own intervals (paused time), thresholds, the
//! readiness latch, timeouts, and the ready-made TCP and HTTP checks against real loopback
//! listeners.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_kit::check::Outcome;
use mcpulse_kit::{Check, Health};
use mcpulse_policy::health::CheckStatus;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

fn json(h: &mcpulse_policy::health::Health) -> Value {
    h.to_json()
}

/// Lets the spawned tasks run (paused time advances only as far as this sleep).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

fn flag_check(name: &str, broken: Arc<AtomicBool>, runs: Arc<AtomicU32>) -> Check {
    Check::from_fn(name, move || {
        runs.fetch_add(1, Ordering::SeqCst);
        let down = broken.load(Ordering::SeqCst);
        async move {
            if down {
                Outcome::down("the flag says broken")
            } else {
                Outcome::ok("fine")
            }
        }
    })
}

#[tokio::test(start_paused = true)]
async fn checks_run_on_their_own_interval_never_on_the_request_path() {
    let broken = Arc::new(AtomicBool::new(false));
    let (fast, slow) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let health = Health::new("t", "1")
        .with_check(
            flag_check("fast", broken.clone(), fast.clone()).interval(Duration::from_secs(2)),
        )
        .with_check(flag_check("slow", broken, slow.clone()).interval(Duration::from_secs(10)));
    health.tools_loaded(1);
    // Nothing runs before start, whatever readiness is asked.
    for _ in 0..5 {
        let _ = health.readiness();
    }
    assert_eq!(
        (fast.load(Ordering::SeqCst), slow.load(Ordering::SeqCst)),
        (0, 0)
    );
    let _running = health.start();
    settle().await;
    assert_eq!(
        (fast.load(Ordering::SeqCst), slow.load(Ordering::SeqCst)),
        (1, 1)
    );
    for _ in 0..100 {
        let _ = health.readiness();
    }
    assert_eq!(health.runs("fast"), 1, "readiness only reads the cache");
    tokio::time::sleep(Duration::from_secs(10)).await;
    // 0, 2, 4, 6, 8, 10 s for the fast one; 0 and 10 s for the slow one.
    assert_eq!(
        (fast.load(Ordering::SeqCst), slow.load(Ordering::SeqCst)),
        (6, 2)
    );
    assert_eq!(health.readiness().status(), CheckStatus::Pass);
}

#[tokio::test(start_paused = true)]
async fn one_blip_flips_nothing_three_failures_fail_readiness_and_one_success_mends_it() {
    let broken = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicU32::new(0));
    let health = Health::new("t", "1")
        .with_check(flag_check("db", broken.clone(), runs).interval(Duration::from_secs(1)));
    health.tools_loaded(3);
    let _running = health.start();
    settle().await;
    assert_eq!(health.readiness().status().http_status(), 200);
    broken.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1500)).await; // one failure
    assert_eq!(health.confirmed("db"), Some(CheckStatus::Pass));
    let doc = json(&health.readiness());
    assert_eq!(doc["checks"]["db:responseTime"][0]["last"], "fail");
    tokio::time::sleep(Duration::from_secs(2)).await; // three in a row
    assert_eq!(health.confirmed("db"), Some(CheckStatus::Fail));
    let r = health.readiness();
    assert_eq!(r.status().http_status(), 503);
    let doc = json(&r);
    assert_eq!(doc["status"], "fail");
    assert_eq!(doc["output"], "the flag says broken");
    assert_eq!(doc["checks"]["db:responseTime"][0]["kind"], "fn");
    assert_eq!(doc["checks"]["tools:count"][0]["observedValue"], 3);
    broken.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(health.readiness().status(), CheckStatus::Pass);
}

#[tokio::test(start_paused = true)]
async fn readiness_waits_for_the_tool_registry_and_reports_its_count() {
    let health = Health::new("t", "1");
    let _running = health.start();
    settle().await;
    let doc = json(&health.readiness());
    assert_eq!(doc["status"], "fail");
    assert_eq!(doc["output"], "the tool registry has not loaded yet");
    health.tools_loaded(0);
    assert_eq!(
        health.readiness().status().http_status(),
        503,
        "min_tools is 1"
    );
    health.tools_loaded(4);
    let doc = json(&health.readiness());
    assert_eq!(doc["status"], "pass");
    assert_eq!(doc["checks"]["tools:count"][0]["observedValue"], 4);
    let none = Health::new("t", "1").min_tools(0);
    none.tools_loaded(0);
    assert_eq!(none.readiness().status(), CheckStatus::Pass);
}

#[tokio::test(start_paused = true)]
async fn a_hung_check_is_cut_by_its_timeout_and_a_non_critical_one_only_warns() {
    let health = Health::new("t", "1")
        .with_check(
            Check::from_fn("hangs", || async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Outcome::ok("never")
            })
            .timeout(Duration::from_secs(2))
            .critical(false),
        )
        .min_tools(0);
    health.tools_loaded(0);
    let _running = health.start();
    settle().await;
    let doc = json(&health.readiness());
    assert_eq!(
        doc["checks"]["hangs:responseTime"][0]["output"],
        "not checked yet"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let r = health.readiness();
    assert_eq!(r.status(), CheckStatus::Warn);
    let doc = json(&r);
    assert_eq!(
        doc["checks"]["hangs:responseTime"][0]["output"],
        "no answer within 2s (timeout) (not critical: readiness only warns)"
    );
}

/// A check that panics is a failed run, every time it runs, not a check stuck at its last
/// status (or at "not checked yet") for ever; and it recovers when it stops panicking.
#[tokio::test(start_paused = true)]
async fn a_check_that_panics_fails_and_keeps_being_run() {
    let runs = Arc::new(AtomicU32::new(0));
    let counted = runs.clone();
    let health = Health::new("t", "1")
        .with_check(
            Check::from_fn("db", move || {
                let n = counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n < 3 {
                        panic!("called `Result::unwrap()` on an `Err` value: connection refused");
                    }
                    Outcome::ok("fine")
                }
            })
            .interval(Duration::from_secs(1)),
        )
        .min_tools(0);
    health.tools_loaded(0);
    let _running = health.start();
    settle().await;
    let r = health.readiness();
    let doc = json(&r);
    assert_eq!(r.status(), CheckStatus::Fail, "{doc}");
    let output = doc["checks"]["db:responseTime"][0]["output"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(output.contains("panicked"), "{doc}");
    assert!(
        !output.contains("connection refused"),
        "the panic's text stays in the log: {doc}"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(runs.load(Ordering::SeqCst) >= 4, "it kept being run");
    assert_eq!(health.readiness().status(), CheckStatus::Pass);
}

#[tokio::test(start_paused = true)]
async fn a_dependency_detail_is_made_inert() {
    let health = Health::new("t", "1")
        .with_check(Check::from_fn("evil", || async {
            Outcome::down("\u{1b}[2Jgone\r\nforged: line")
        }))
        .min_tools(0);
    let _running = health.start();
    settle().await;
    let doc = json(&health.readiness());
    let out = doc["checks"]["evil:responseTime"][0]["output"]
        .as_str()
        .unwrap();
    assert!(!out.contains('\u{1b}') && !out.contains('\n'), "{out:?}");
}

#[tokio::test(start_paused = true)]
async fn liveness_is_the_runtime_only() {
    let health = Health::new("t", "1")
        .with_check(Check::from_fn("down", || async { Outcome::down("down") }));
    let _running = health.start();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let doc = json(&health.liveness());
    assert_eq!(doc["status"], "pass");
    assert!(doc["checks"]["eventloop:tickAge"].is_array());
    assert!(doc["checks"].get("down:responseTime").is_none());
}

async fn wait_for(health: &Health, name: &str, runs: u64) {
    for _ in 0..500 {
        if health.runs(name) >= runs {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{name} did not run {runs} times");
}

#[tokio::test]
async fn tcp_check_against_a_real_listener() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let health = Health::new("t", "1")
        .with_check(
            Check::tcp("db", "127.0.0.1", port)
                .interval(Duration::from_millis(100))
                .failure_threshold(1),
        )
        .min_tools(0);
    health.tools_loaded(0);
    let _running = health.start();
    wait_for(&health, "db", 1).await;
    assert_eq!(health.confirmed("db"), Some(CheckStatus::Pass));
    let doc = json(&health.readiness());
    assert_eq!(
        doc["checks"]["db:responseTime"][0]["componentId"],
        format!("127.0.0.1:{port}")
    );
    assert_eq!(
        doc["checks"]["db:responseTime"][0]["componentType"],
        "datastore"
    );
    drop(listener);
    let seen = health.runs("db");
    wait_for(&health, "db", seen + 1).await;
    assert_eq!(health.confirmed("db"), Some(CheckStatus::Fail));
    let doc = json(&health.readiness());
    let out = doc["output"].as_str().unwrap();
    assert!(
        out.starts_with(&format!("connect to 127.0.0.1:{port}")),
        "{out}"
    );
}

/// A loopback HTTP server answering `/ok` 200, `/bad` 500 and `/slow` 200 after 300 ms.
async fn http_server() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    use axum::routing::get;
    let app = axum::Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route(
            "/bad",
            get(|| async { (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "no") }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                "late"
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, task)
}

#[tokio::test]
async fn http_check_judges_the_status_and_the_latency() {
    let (addr, server) = http_server().await;
    let every = Duration::from_millis(100);
    let health = Health::new("t", "1")
        .with_check(
            Check::http("ok", &format!("http://{addr}/ok"))
                .unwrap()
                .interval(every),
        )
        .with_check(
            Check::http("bad", &format!("http://{addr}/bad"))
                .unwrap()
                .interval(every),
        )
        .with_check(
            Check::http("slow", &format!("http://{addr}/slow"))
                .unwrap()
                .interval(every)
                .degraded_after(Duration::from_millis(100)),
        )
        .min_tools(0);
    let _running = health.start();
    for name in ["ok", "bad", "slow"] {
        wait_for(&health, name, 1).await;
    }
    assert_eq!(health.confirmed("ok"), Some(CheckStatus::Pass));
    assert_eq!(health.confirmed("bad"), Some(CheckStatus::Fail));
    assert_eq!(health.confirmed("slow"), Some(CheckStatus::Warn));
    let doc = json(&health.readiness());
    let bad = doc["checks"]["bad:responseTime"][0]["output"]
        .as_str()
        .unwrap();
    assert!(
        bad.starts_with("status 500 Internal Server Error from http://"),
        "{bad}"
    );
    let slow = doc["checks"]["slow:responseTime"][0]["output"]
        .as_str()
        .unwrap();
    assert!(
        slow.ends_with("slower than 100ms (degraded_latency)"),
        "{slow}"
    );
    assert!(Check::http("x", "ftp://example.invalid/").is_err());
    server.abort();
}
