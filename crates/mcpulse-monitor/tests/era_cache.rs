//! The era an HTTP target was found in, remembered between the monitor's checks
//! (`runner::EraMemo`, through `runner::probe_remembering`, as each check calls it), against
//! real testkit servers on loopback: what a check costs the server before and after, and how
//! soon an era change is seen. The bound is a number of checks, so the tests count checks, not
//! time (the hourly bound is tested under paused time in `scheduler.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_judge::{Report, Status};
use mcpulse_monitor::runner::{self, EraMemo, HTTP_ERA_RECHECK_CHECKS, NetworkProber, Prober};
use mcpulse_probe::{Plan, Target};
use mcpulse_testkit::FakeHttp;
use mcpulse_testkit::http::{Request, Script};
use mcpulse_testkit::mcp::MODERN;
use mcpulse_testkit::scenario::{self, Framing};
use mcpulse_wire::version::Era;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The monitor's plan for an HTTP target with the defaults (`era = "auto"`, the security
/// checks on), a short timeout.
fn plan() -> Plan {
    Plan {
        timeout: Duration::from_secs(5),
        ..Plan::default()
    }
}

fn policy() -> mcpulse_judge::Policy {
    mcpulse_monitor::probe::policy(Duration::from_secs(3))
}

/// One check as the monitor makes it, and the requests the server received for it.
async fn check(server: &FakeHttp, target: &Target, memo: &mut EraMemo) -> (Report, Vec<Request>) {
    let before = server.requests().len();
    let (_, report) =
        runner::probe_remembering(&NetworkProber, target, &plan(), memo, &policy()).await;
    (report, server.requests()[before..].to_vec())
}

fn codes(report: &Report) -> Vec<String> {
    let mut c: Vec<String> = report.findings.iter().map(|f| f.code.to_string()).collect();
    c.sort();
    c
}

fn security_codes(report: &Report) -> Vec<String> {
    let mut c: Vec<String> = report
        .security
        .findings
        .iter()
        .map(|f| f.code.to_string())
        .collect();
    c.sort();
    c
}

/// A request as these tests compare them: HTTP method, path, JSON-RPC method.
fn shape(r: &Request) -> String {
    format!(
        "{} {} {}",
        r.method,
        r.path(),
        r.rpc_method().unwrap_or_default()
    )
}

fn sorted(requests: &[Request]) -> Vec<String> {
    let mut v: Vec<String> = requests.iter().map(shape).collect();
    v.sort();
    v
}

/// Checks a legacy server (`script`, at `path`) the way the monitor did before (auto, every
/// check) and does now (`runner::probe_remembering`), and asserts: each detecting check sends
/// what an auto check sends; each pinned one the same less `saved` (shapes as [`shape`]);
/// detection comes back every `HTTP_ERA_RECHECK_CHECKS` checks; the security checks' requests
/// and findings and the report's facts are the same in a pinned check as in an auto one.
/// Returns the requests per check, before and after.
async fn remembered_checks_cost(
    script: Script,
    path: &str,
    saved: &[&str],
) -> (Vec<usize>, Vec<usize>) {
    let server = FakeHttp::start_script(script).await;
    let target = Target::http(&server.url(path)).unwrap();
    let n = HTTP_ERA_RECHECK_CHECKS as usize;

    // Before: the target's own (auto) plan, every check.
    let mut before = Vec::new();
    for _ in 0..n {
        let from = server.requests().len();
        let tr = NetworkProber.probe(&target, &plan()).await;
        let report = mcpulse_judge::judge(&tr, &policy());
        assert_eq!(report.status, Status::Healthy, "{report:?}");
        before.push((report, server.requests()[from..].to_vec()));
    }
    let auto = &before[0].0;
    let auto_requests = sorted(&before[0].1);
    assert!(before.iter().all(|(_, r)| sorted(r) == auto_requests));
    let mut pinned_requests = auto_requests.clone();
    for s in saved {
        let at = pinned_requests.iter().position(|r| r == s);
        pinned_requests.remove(at.unwrap_or_else(|| panic!("{s} not in {auto_requests:?}")));
    }

    // After: the memo, for two rounds of detection.
    let mut memo = EraMemo::new(&target, &plan());
    let mut after = Vec::new();
    for _ in 0..2 * n + 1 {
        after.push(check(&server, &target, &mut memo).await);
    }
    for (k, (report, requests)) in after.iter().enumerate() {
        let detecting = k % n == 0;
        assert_eq!(report.status, Status::Healthy, "check {k}: {report:?}");
        assert_eq!(report.era, Some(Era::Legacy));
        let expected = if detecting {
            &auto_requests
        } else {
            &pinned_requests
        };
        assert_eq!(&sorted(requests), expected, "check {k}");
        // The same facts and findings: detection's are carried into the pinned checks.
        assert_eq!(codes(report), codes(auto), "check {k}");
        assert_eq!(security_codes(report), security_codes(auto), "check {k}");
        assert_eq!(report.security.grade, auto.security.grade);
        assert_eq!(report.transport, auto.transport);
        assert_eq!(report.dual_era, auto.dual_era);
        assert_eq!(report.digests, auto.digests);
        if !detecting {
            let legacy_only = report
                .findings
                .iter()
                .find(|f| f.code.code() == "legacy-only")
                .unwrap();
            assert!(
                legacy_only
                    .message
                    .ends_with("(remembered from the last era detection)"),
                "{}",
                legacy_only.message
            );
        }
    }
    (
        before.iter().map(|(_, r)| r.len()).collect(),
        after.iter().map(|(_, r)| r.len()).collect(),
    )
}

/// A legacy Streamable HTTP server: before, every check asks `server/discover`, one request
/// more than its handshake needs; after, only the detecting checks do.
#[tokio::test]
async fn a_legacy_http_server_costs_one_request_less_per_remembered_check() {
    let (before, after) = remembered_checks_cost(
        scenario::legacy_streamable(Framing::Json),
        "/mcp",
        &["POST /mcp server/discover"],
    )
    .await;
    eprintln!(
        "requests per check, legacy Streamable HTTP, security checks on: before {before:?}, after {after:?}"
    );
}

/// A legacy HTTP+SSE server: the pinned checks also skip the `initialize` POSTed to the stream's
/// URL, which only finds that it has no Streamable HTTP (405): two requests less.
#[tokio::test]
async fn a_legacy_sse_server_costs_two_requests_less_per_remembered_check() {
    let (before, after) = remembered_checks_cost(
        scenario::legacy_sse(),
        "/sse",
        &["POST /sse server/discover", "POST /sse initialize"],
    )
    .await;
    eprintln!(
        "requests per check, legacy HTTP+SSE, security checks on: before {before:?}, after {after:?}"
    );
}

/// A true dual-era server: the modern fake for requests that carry the modern
/// `MCP-Protocol-Version`, the legacy one (sessions) for the rest.
fn dual_era() -> Script {
    let modern = scenario::modern(false, vec![None]);
    let legacy = scenario::legacy_streamable(Framing::Json);
    Arc::new(move |req: &Request| {
        if req.header("mcp-protocol-version") == Some(MODERN) {
            modern(req)
        } else {
            legacy(req)
        }
    })
}

/// Era changes are seen: legacy → modern-only at once (the pinned check fails and is made
/// again in auto mode), modern → legacy at once (a modern era is not pinned over HTTP), and
/// legacy → dual-era (the pinned legacy check still succeeds) at the next detection, at most
/// `HTTP_ERA_RECHECK_CHECKS` checks after the last. No change shows as a failed check.
#[tokio::test]
async fn era_changes_are_seen_within_the_bound() {
    const LEGACY: usize = 0;
    const MODERN_ONLY: usize = 1;
    const DUAL: usize = 2;
    let current = Arc::new(AtomicUsize::new(LEGACY));
    let scripts = vec![
        scenario::legacy_streamable(Framing::Json),
        scenario::modern(false, vec![None]),
        dual_era(),
    ];
    let server = FakeHttp::start_script(scenario::shifting(scripts, current.clone())).await;
    let target = Target::http(&server.url("/mcp")).unwrap();
    let mut memo = EraMemo::new(&target, &plan());
    let mut seen = Vec::new();
    let mut step = |report: &Report| {
        assert_eq!(report.status, Status::Healthy, "{report:?}");
        seen.push((report.era, report.dual_era));
    };

    // Found legacy, then pinned.
    for _ in 0..3 {
        step(&check(&server, &target, &mut memo).await.0);
    }
    // Upgraded to modern only: seen by the next check, which counts as healthy.
    current.store(MODERN_ONLY, Ordering::SeqCst);
    let (report, _) = check(&server, &target, &mut memo).await;
    step(&report);
    assert_eq!(report.era, Some(Era::Modern));
    // Rolled back: seen by the next check.
    current.store(LEGACY, Ordering::SeqCst);
    let (report, _) = check(&server, &target, &mut memo).await;
    step(&report);
    assert_eq!(report.era, Some(Era::Legacy));
    // That check detected legacy again. The server now gains the modern revision beside the
    // legacy one: the pinned checks still see legacy, the next detection sees it.
    current.store(DUAL, Ordering::SeqCst);
    let bound = HTTP_ERA_RECHECK_CHECKS as usize;
    let mut after = Vec::new();
    for _ in 0..bound {
        let (report, _) = check(&server, &target, &mut memo).await;
        step(&report);
        after.push((report.era, report.dual_era));
    }
    let first_modern = after
        .iter()
        .position(|(e, _)| *e == Some(Era::Modern))
        .unwrap_or_else(|| {
            panic!("the dual-era server was not seen within {bound} checks: {after:?}")
        });
    assert_eq!(first_modern, bound - 1, "{after:?}");
    assert_eq!(after[first_modern].1, Some(true));
    assert!(
        after[..first_modern]
            .iter()
            .all(|(e, _)| *e == Some(Era::Legacy))
    );
    eprintln!("eras seen: {seen:?}");
}

/// Over HTTP+SSE the transport is remembered with the era; a legacy server that moves from
/// HTTP+SSE to Streamable HTTP is seen by the next check (its pinned check fails and is made
/// again in auto mode), healthy, and pinned anew in its new transport.
#[tokio::test]
async fn a_legacy_server_leaving_http_sse_is_seen_at_once() {
    let current = Arc::new(AtomicUsize::new(0));
    let scripts = vec![
        scenario::legacy_sse(),
        scenario::legacy_streamable(Framing::Json),
    ];
    let server = FakeHttp::start_script(scenario::shifting(scripts, current.clone())).await;
    let target = Target::http(&server.url("/sse")).unwrap();
    let mut memo = EraMemo::new(&target, &plan());
    for _ in 0..3 {
        let (report, _) = check(&server, &target, &mut memo).await;
        assert_eq!(report.transport, Some("sse"), "{report:?}");
    }
    current.store(1, Ordering::SeqCst);
    let (report, _) = check(&server, &target, &mut memo).await;
    assert_eq!(report.status, Status::Healthy, "{report:?}");
    assert_eq!(report.transport, Some("streamable-http"));
    // Pinned anew: the legacy era, without the stream.
    let (report, requests) = check(&server, &target, &mut memo).await;
    assert_eq!(report.status, Status::Healthy, "{report:?}");
    assert_eq!(report.transport, Some("streamable-http"));
    let shapes = sorted(&requests);
    assert!(
        shapes
            .iter()
            .all(|r| !r.ends_with("server/discover") && !r.starts_with("GET")),
        "{shapes:?}"
    );
}

/// A pinned check that is down only because of a dependency (here its health endpoint
/// answering 503) is not made again in auto mode, and the pin stays: each check fetches the
/// health endpoint once, and asks `server/discover` only when detecting.
#[tokio::test]
async fn a_dependency_outage_does_not_resend_the_check_nor_drop_the_pin() {
    let legacy = scenario::legacy_streamable(Framing::Json);
    let script: Script = Arc::new(move |req: &Request| {
        if req.path() == "/health" {
            mcpulse_testkit::http::Reply::json(503, &serde_json::json!({"status": "fail"}))
        } else {
            legacy(req)
        }
    });
    let server = FakeHttp::start_script(script).await;
    let target = Target::http(&server.url("/mcp")).unwrap();
    let plan = Plan {
        health_url: Some(server.url("/health")),
        ..plan()
    };
    let mut memo = EraMemo::new(&target, &plan);
    for k in 0..4 {
        let before = server.requests().len();
        let (_, report) =
            runner::probe_remembering(&NetworkProber, &target, &plan, &mut memo, &policy()).await;
        let requests = server.requests()[before..].to_vec();
        assert_eq!(report.status, Status::Down, "check {k}: {report:?}");
        assert_eq!(
            report.layers.liveness,
            Some(Status::Healthy),
            "{:?}",
            report.layers
        );
        let shapes = sorted(&requests);
        let health = shapes.iter().filter(|r| r.contains("/health")).count();
        assert_eq!(health, 1, "check {k}: {shapes:?}");
        let discover = shapes
            .iter()
            .filter(|r| r.ends_with("server/discover"))
            .count();
        assert_eq!(discover, usize::from(k == 0), "check {k}: {shapes:?}");
    }
}

/// A pinned stdio check whose server exits on its `[[targets.call]]` (after the handshake) is
/// not made again in auto mode: the call reached the server once, and a second one in the
/// same check could repeat whatever it did.
#[tokio::test]
async fn a_check_that_sent_a_call_is_not_resent() {
    use mcpulse_testkit::tools::result;
    use mcpulse_testkit::{Act, StdioScript, TempDir};
    let dir = TempDir::new("era-call-once");
    let log = dir.join("calls");
    // Its `echo` answers the first call (the check that pins the era), exits on every later one.
    let script = StdioScript::legacy()
        .on_tool(
            "echo",
            vec![
                Act::RecordLine(log.clone()),
                Act::FirstTimeElse(
                    dir.join("answered"),
                    Box::new(Act::Result(result("echoed", None, false))),
                    Box::new(Act::Exit(3)),
                ),
            ],
        )
        .write(&dir, "server.sh");
    let target = Target::stdio(&["sh".to_owned(), script.display().to_string()]).unwrap();
    let plan = Plan {
        calls: vec![mcpulse_wire::call::CallSpec::new("echo")],
        // `echo` is not annotated read-only.
        allow_side_effects: true,
        ..plan()
    };
    let calls = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let mut memo = EraMemo::new(&target, &plan);
    let (_, first) =
        runner::probe_remembering(&NetworkProber, &target, &plan, &mut memo, &policy()).await;
    assert_eq!(first.status, Status::Healthy, "{first:?}");
    assert_eq!(calls(), 1);
    let (_, second) =
        runner::probe_remembering(&NetworkProber, &target, &plan, &mut memo, &policy()).await;
    assert_eq!(second.status, Status::Down, "{second:?}");
    assert_eq!(calls(), 2, "one call per check");
}
