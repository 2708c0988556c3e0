//! `mcpulse probe --health-url`: the probe reads a server's HTTP health endpoint beside the
//! protocol, and a failing one is a finding that names the failing component. The endpoint is
//! a real `mcpulse supervise` endpoint (mcpulse-relay's, on a loopback port) or a scripted
//! fake in each hostile shape: HTML 200, a body past the cap, a hang, a redirect off-origin,
//! escapes in component names.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_relay::endpoints::{self, Endpoints};
use mcpulse_relay::status::{ChildState, Observer, Restart, RestartReason, Status};
use mcpulse_testkit::http::{Body, Reply};
use mcpulse_testkit::run::{self, Run};
use mcpulse_testkit::{FakeHttp, scenario};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
const BOUND: Duration = Duration::from_secs(20);

async fn probe(mcp: &FakeHttp, health_url: &str, extra: &[&str]) -> Run {
    let url = mcp.url("/mcp");
    let mut args = vec![
        "probe",
        url.as_str(),
        "--no-security",
        "--timeout",
        "3s",
        "--health-url",
        health_url,
    ];
    args.extend_from_slice(extra);
    run::run(BIN, &args, &[], BOUND).await
}

fn findings(r: &Run) -> Vec<(String, String)> {
    r.json()["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["code"].as_str().unwrap().to_owned(),
                f["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn has(r: &Run, code: &str, needle: &str) -> bool {
    findings(r)
        .iter()
        .any(|(c, m)| c == code && m.contains(needle))
}

fn running() -> Status {
    Status {
        pid: Some(4242),
        protocol_version: Some("2025-06-18".into()),
        ..Status::new(ChildState::Running, 1_700_000_000_000)
    }
}

#[tokio::test]
async fn a_supervised_servers_readyz_decides_with_the_protocol() {
    let mcp = FakeHttp::start_script(scenario::modern(false, vec![None])).await;
    let e = Endpoints::new("test");
    let l = endpoints::serve("127.0.0.1:0".parse().unwrap(), e.clone())
        .await
        .unwrap();
    let readyz = format!("http://{}/readyz", l.addr);

    e.status(&running());
    let r = probe(&mcp, &readyz, &["--json"]).await;
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(
        !findings(&r).iter().any(|(c, _)| c.starts_with("health-")),
        "{}",
        r.stdout
    );

    // The child crashed: the supervisor backs off and answers 503.
    let mut s = running();
    s.state = ChildState::Backoff;
    s.restarts_total = 1;
    s.recent_restarts.push(Restart {
        at_ms: 1_700_000_001_000,
        reason: RestartReason::Exited {
            code: Some(1),
            signal: None,
        },
    });
    e.status(&s);
    let r = probe(&mcp, &readyz, &["--json"]).await;
    assert_eq!(r.code, Some(2), "{}\n{}", r.stdout, r.stderr);
    assert!(
        has(&r, "health-endpoint-down", "answered 503"),
        "{}",
        r.stdout
    );
    assert!(
        has(&r, "health-component-unhealthy", "child:state reports fail"),
        "{}",
        r.stdout
    );
    assert!(has(&r, "health-component-unhealthy", "exited with code 1"));
    // The read is in the transcript.
    let dir = mcpulse_testkit::TempDir::new("health-url");
    let path = dir.join("t.json");
    let r = probe(
        &mcp,
        &readyz,
        &["--json", "--transcript", path.to_str().unwrap()],
    )
    .await;
    assert_eq!(r.code, Some(2));
    let tr: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(tr["health"][0]["status"], 503);
    assert_eq!(tr["health"][0]["content_type"], "application/health+json");

    // Busy: degraded, not down.
    s.state = ChildState::Busy;
    e.status(&s);
    let r = probe(&mcp, &readyz, &["--json"]).await;
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert!(has(&r, "health-endpoint-degraded", "reports warn"));
}

#[tokio::test]
async fn the_seeds_shape_names_each_failing_component() {
    let mcp = FakeHttp::start_script(scenario::modern(false, vec![None])).await;
    let health = FakeHttp::start(|_| {
        Reply::json(
            503,
            &json!({"status": "down", "checks": {
                "orders-db": {"status": "down", "latency_ms": 5003, "output": "connection refused"},
                "cache": "ok",
            }}),
        )
    })
    .await;
    let r = probe(&mcp, &health.url("/health"), &["--json"]).await;
    assert_eq!(r.code, Some(2), "{}", r.stdout);
    assert!(has(
        &r,
        "health-endpoint-down",
        "answered 503 with status fail"
    ));
    assert!(has(
        &r,
        "health-component-unhealthy",
        "orders-db reports fail (latency 5003 ms): connection refused"
    ));
    assert!(!has(&r, "health-component-unhealthy", "cache"));
}

#[tokio::test]
async fn hostile_endpoints_are_not_health() {
    let mcp = FakeHttp::start_script(scenario::modern(false, vec![None])).await;
    let other = FakeHttp::start(|_| Reply::json(200, &json!({"status": "pass"}))).await;
    let elsewhere = other.url("/readyz");
    let health = FakeHttp::start(move |req| match req.path() {
        "/html" => Reply::html(200, "<html><body>Sign in</body></html>"),
        "/huge" => Reply::bytes(
            200,
            "application/json",
            format!(
                "{{\"status\":\"pass\",\"pad\":\"{}\"}}",
                "x".repeat(1 << 20)
            ),
        ),
        "/hang" => Reply::silence(),
        "/drip" => Reply::status(200).with_body(Body::Drip {
            bytes: br#"{"status":"pass"}"#.to_vec(),
            every: Duration::from_secs(1),
        }),
        "/away" => Reply::status(302).header("location", &elsewhere),
        "/here" => Reply::status(302).header("location", "/ok"),
        "/ok" => Reply::json(200, &json!({"status": "pass"})),
        _ => Reply::status(404),
    })
    .await;

    // Not a health document: degraded (exit 1), a config mistake rather than an outage.
    let r = probe(&mcp, &health.url("/html"), &["--json"]).await;
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert!(
        has(&r, "health-endpoint-invalid", "text/html"),
        "{}",
        r.stdout
    );
    assert!(has(&r, "health-endpoint-invalid", "check the health URL"));
    let r = probe(&mcp, &health.url("/missing"), &["--json"]).await;
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert!(
        has(&r, "health-endpoint-invalid", "answered 404"),
        "{}",
        r.stdout
    );

    let r = probe(&mcp, &health.url("/huge"), &["--json"]).await;
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert!(
        has(&r, "health-endpoint-invalid", "passed 64 KiB"),
        "{}",
        r.stdout
    );

    for path in ["/hang", "/drip"] {
        let started = Instant::now();
        let r = probe(&mcp, &health.url(path), &["--json"]).await;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{path}: not bounded"
        );
        // Unreachable is down; a body begun but not ended in time is invalid, degraded.
        assert!(
            (r.code == Some(2) && has(&r, "health-endpoint-unreachable", "could not be read"))
                || (r.code == Some(1) && has(&r, "health-endpoint-invalid", "timed out")),
            "{path}: {:?} {}",
            r.code,
            r.stdout
        );
    }

    // A redirect off the origin is not followed; one within it is.
    let r = probe(&mcp, &health.url("/away"), &["--json"]).await;
    assert_eq!(r.code, Some(2), "{}", r.stdout);
    assert!(
        has(&r, "health-endpoint-unreachable", "leaves the origin"),
        "{}",
        r.stdout
    );
    assert!(
        other.requests().is_empty(),
        "the off-origin URL was fetched"
    );
    let r = probe(&mcp, &health.url("/here"), &["--json"]).await;
    assert_eq!(r.code, Some(0), "{}", r.stdout);

    let r = probe(&mcp, "ftp://example.com/x", &["--json"]).await;
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    assert!(r.stderr.contains("--health-url"), "{}", r.stderr);
}

#[tokio::test]
async fn component_text_reaches_the_terminal_inert() {
    let mcp = FakeHttp::start_script(scenario::modern(false, vec![None])).await;
    let health = FakeHttp::start(|_| {
        Reply::json(
            200,
            &json!({"status": "warn", "checks": {
                "db\u{1b}]0;owned\u{7}\n✔ healthy": [{"status": "fail", "output": "x\u{1b}[2J\u{202e}"}],
            }}),
        )
    })
    .await;
    let r = probe(&mcp, &health.url("/readyz"), &["--color", "never"]).await;
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
    assert!(
        !r.stdout.contains('\u{1b}') && !r.stdout.contains('\u{202e}'),
        "{:?}",
        r.stdout
    );
    assert!(
        !r.stdout.lines().any(|l| l.starts_with("✔ healthy")),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("health-component-unhealthy"),
        "{}",
        r.stdout
    );
}

#[tokio::test]
async fn without_an_mcp_target_the_endpoint_alone_decides() {
    let e = Endpoints::new("test");
    let l = endpoints::serve("127.0.0.1:0".parse().unwrap(), e.clone())
        .await
        .unwrap();
    let readyz = format!("http://{}/readyz", l.addr);
    let alone = |extra: &'static [&'static str]| {
        let readyz = readyz.clone();
        async move {
            let mut args = vec!["probe", "--health-url", readyz.as_str()];
            args.extend_from_slice(extra);
            run::run(BIN, &args, &[], BOUND).await
        }
    };

    e.status(&running());
    let r = alone(&["--json"]).await;
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    let v = r.json();
    assert_eq!(v["status"], "healthy");
    assert_eq!(v["target"], readyz.as_str());
    // No protocol was spoken, so no protocol finding either.
    assert_eq!(v["findings"], json!([]), "{}", r.stdout);
    let human = alone(&["--color", "never"]).await;
    assert_eq!(human.code, Some(0), "{}", human.stderr);
    assert!(human.stdout.contains("healthy"), "{}", human.stdout);

    let mut s = running();
    s.state = ChildState::Fatal;
    s.fatal_reason = Some("5 restarts within 60s".into());
    e.status(&s);
    let r = alone(&["--json"]).await;
    assert_eq!(r.code, Some(2), "{}", r.stdout);
    assert!(
        has(&r, "health-endpoint-down", "gave up: 5 restarts within 60s"),
        "{}",
        r.stdout
    );
    assert!(has(
        &r,
        "health-component-unhealthy",
        "restarts:count reports warn"
    ));

    // Nothing listening: unreachable, and quickly.
    drop(l);
    let started = Instant::now();
    let r = alone(&["--json"]).await;
    assert_eq!(r.code, Some(2), "{}", r.stdout);
    assert!(
        has(&r, "health-endpoint-unreachable", "could not be read"),
        "{}",
        r.stdout
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // The endpoint alone says nothing of the server's connect or handshake: those layers were
    // not checked, and neither the report nor the terminal may call them healthy.
    assert_eq!(
        r.json()["layers"],
        json!({"liveness": null, "protocol": null, "dependencies": "down"}),
        "{}",
        r.stdout
    );
    let human = alone(&["--color", "never"]).await;
    assert_eq!(human.code, Some(2), "{}", human.stderr);
    assert!(
        human
            .stdout
            .contains("liveness not checked · protocol not checked · dependencies ✘ down"),
        "{}",
        human.stdout
    );

    let r = alone(&["--baseline", "x.lock"]).await;
    assert_eq!(r.code, Some(3), "{}", r.stderr);
}

// ---- --health-url auto -------------------------------------------------------------------------

/// One server on one origin: the MCP endpoint at `/mcp`, and `health(path)` for every other
/// path (404 where it gives nothing).
async fn on_one_origin(health: impl Fn(&str) -> Option<Reply> + Send + Sync + 'static) -> FakeHttp {
    let mcp = scenario::modern(false, vec![None]);
    FakeHttp::start(move |req| {
        if req.target == "/mcp" {
            return mcp(req);
        }
        health(&req.target).unwrap_or_else(|| Reply::status(404))
    })
    .await
}

/// `mcpulse probe URL --health-url auto --json` of `server`'s `/mcp`.
async fn probe_auto(server: &FakeHttp) -> Run {
    let url = server.url("/mcp");
    let args = [
        "probe",
        &url,
        "--no-security",
        "--timeout",
        "3s",
        "--health-url",
        "auto",
        "--json",
    ];
    run::run(BIN, &args, &[], BOUND).await
}

/// How many requests each discovery path got.
fn reads(server: &FakeHttp) -> Vec<(String, usize)> {
    ["/healthz", "/readyz", "/health"]
        .iter()
        .map(|p| {
            let n = server.requests().iter().filter(|r| r.target == *p).count();
            ((*p).to_owned(), n)
        })
        .collect()
}

/// `--health-url auto` reads /healthz, /readyz and /health on the MCP URL's origin, once each,
/// and the first that answers a health document is the endpoint: a server with each one of
/// them is judged by it (a failing component named), whichever it is.
#[tokio::test]
async fn auto_finds_the_health_endpoint_on_each_path() {
    for path in ["/healthz", "/readyz", "/health"] {
        let server = on_one_origin(move |p| {
            (p == path).then(|| {
                Reply::json(
                    503,
                    &json!({"status": "fail", "checks": {"orders-db": {"status": "fail"}}}),
                )
            })
        })
        .await;
        let r = probe_auto(&server).await;
        assert_eq!(r.code, Some(2), "{path}: {}\n{}", r.stdout, r.stderr);
        assert!(
            has(&r, "health-endpoint-down", path),
            "{path}: {}",
            r.stdout
        );
        assert!(
            has(&r, "health-component-unhealthy", "orders-db"),
            "{}",
            r.stdout
        );
        assert!(!has(&r, "health-endpoint-not-found", ""), "{}", r.stdout);
        assert_eq!(r.json()["components"][0]["name"], "orders-db");
        assert!(
            reads(&server).iter().all(|(_, n)| *n == 1),
            "{path}: one request per path: {:?}",
            reads(&server)
        );
    }
    // Liveness never hides readiness: /healthz 200 `ok` beside /readyz 503 (a health document,
    // or Kubernetes' text) is down, /readyz named.
    for kube in [false, true] {
        let server = on_one_origin(move |p| match p {
            "/healthz" => Some(Reply::bytes(200, "text/plain", "ok")),
            "/readyz" if kube => Some(Reply::bytes(
                503,
                "text/plain",
                "[+]ping ok\n[-]orders-db failed: reason withheld\nreadyz check failed",
            )),
            "/readyz" => Some(Reply::json(503, &json!({"status": "fail"}))),
            _ => None,
        })
        .await;
        let r = probe_auto(&server).await;
        assert_eq!(r.code, Some(2), "{}\n{}", r.stdout, r.stderr);
        assert_eq!(r.json()["layers"]["dependencies"], "down", "{}", r.stdout);
        assert!(has(&r, "health-endpoint-down", "/readyz"), "{}", r.stdout);
    }
}

/// No health endpoint, or a hostile origin that answers an HTML page with 200 on every path:
/// nothing is taken as health, the server stays healthy (its protocol is), and one info
/// finding says none was found. Without `auto` (the default) nothing is read.
#[tokio::test]
async fn auto_with_no_endpoint_or_html_everywhere_is_a_note_not_health() {
    let none = on_one_origin(|_| None).await;
    let html = on_one_origin(|_| {
        Some(Reply::html(
            200,
            "<!doctype html><html><body>Sign in</body></html>",
        ))
    })
    .await;
    for server in [&none, &html] {
        let r = probe_auto(server).await;
        assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
        let f = findings(&r);
        let notes: Vec<&(String, String)> =
            f.iter().filter(|(c, _)| c.starts_with("health-")).collect();
        assert_eq!(notes.len(), 1, "{f:?}");
        assert_eq!(notes[0].0, "health-endpoint-not-found");
        assert!(
            notes[0].1.contains("/healthz") && notes[0].1.contains("/health ("),
            "{f:?}"
        );
        assert!(
            reads(server).iter().all(|(_, n)| *n == 1),
            "{:?}",
            reads(server)
        );
    }
    // The default reads none of them.
    let url = none.url("/mcp");
    let before = none.requests().len();
    let r = run::run(BIN, &["probe", &url, "--no-security", "--json"], &[], BOUND).await;
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        none.requests()[before..].iter().all(|q| q.target == "/mcp"),
        "{:?}",
        none.requests()
            .iter()
            .map(|q| &q.target)
            .collect::<Vec<_>>()
    );
    // A stdio target has no origin: a usage error.
    let r = run::run(
        BIN,
        &["probe", "--health-url", "auto", "--", "true"],
        &[],
        BOUND,
    )
    .await;
    assert_eq!(r.code, Some(3), "{}", r.stderr);
    assert!(r.stderr.contains("--health-url auto"), "{}", r.stderr);
}
