//! The supervisor's `/livez`, `/readyz` and `/metrics` on a real loopback port, driven by the
//! sequence of events the supervisor reports through its `Observer`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_relay::endpoints::{self, Endpoints, MAX_TOOL_LABELS, OTHER_TOOL};
use mcpulse_relay::status::{
    CallOutcome, ChildState, HeartbeatOutcome, Logs, Observer, Restart, RestartReason, Status,
};
use mcpulse_testkit::http::get;

use std::collections::{BTreeMap, BTreeSet};

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn status(state: ChildState) -> Status {
    Status {
        pid: Some(4242),
        protocol_version: Some("2025-06-18".into()),
        ..Status::new(state, 1_700_000_000_000)
    }
}

async fn start() -> (Endpoints, endpoints::Listening) {
    let e = Endpoints::new("9.9.9");
    let l = endpoints::serve("127.0.0.1:0".parse().unwrap(), e.clone())
        .await
        .unwrap();
    (e, l)
}

#[tokio::test]
async fn readyz_follows_the_child_state() {
    let (e, l) = start().await;
    let obs: &dyn Observer = &e;

    // Before the first report: starting, not ready; live all along.
    let r = get(l.addr, "/readyz").await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.headers["content-type"], "application/health+json");
    assert_eq!(r.headers["cache-control"], "no-store");
    assert_eq!(
        r.json()["checks"]["child:state"][0]["observedValue"],
        "STARTING"
    );
    let live = get(l.addr, "/livez").await;
    assert_eq!(live.status, 200);
    assert_eq!(live.json()["status"], "pass");

    let mut s = status(ChildState::Running);
    s.last_heartbeat = Some((
        1_700_000_001_000,
        HeartbeatOutcome::Ok,
        Some(Duration::from_micros(1500)),
    ));
    obs.status(&s);
    let r = get(l.addr, "/readyz").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["status"], "pass");
    assert!(v.get("output").is_none());
    let child = &v["checks"]["child:state"][0];
    assert_eq!(child["componentId"], "4242");
    assert_eq!(child["observedValue"], "RUNNING");
    assert_eq!(child["time"], "2023-11-14T22:13:20.000Z");
    assert_eq!(
        v["checks"]["protocol:version"][0]["observedValue"],
        "2025-06-18"
    );
    let hb = &v["checks"]["heartbeat:responseTime"][0];
    assert_eq!(
        (hb["observedValue"].as_f64(), hb["observedUnit"].as_str()),
        (Some(1.5), Some("ms"))
    );
    assert_eq!(v["checks"]["restarts:count"][0]["observedValue"], 0);

    // Busy: slow but alive, still ready.
    s.state = ChildState::Busy;
    s.last_heartbeat = Some((1_700_000_002_000, HeartbeatOutcome::Busy, None));
    obs.status(&s);
    let r = get(l.addr, "/readyz").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["status"], "warn");

    // A crash: backoff, not ready, and the restart with its reason.
    let reason = RestartReason::Exited {
        code: Some(3),
        signal: None,
    };
    obs.restart(&reason);
    s.state = ChildState::Backoff;
    s.pid = None;
    s.restarts_total = 1;
    s.recent_restarts.push(Restart {
        at_ms: 1_700_000_003_000,
        reason,
    });
    obs.status(&s);
    let r = get(l.addr, "/readyz").await;
    assert_eq!(r.status, 503, "{}", r.body);
    let v = r.json();
    assert_eq!(v["status"], "fail");
    assert_eq!(
        v["output"],
        "waiting out the backoff before a restart: exited with code 3"
    );
    let restarts = &v["checks"]["restarts:count"][0];
    assert_eq!(restarts["observedValue"], 1);
    assert_eq!(restarts["recent"][0]["reason"], "exited");
    assert_eq!(restarts["recent"][0]["output"], "exited with code 3");

    // The budget is spent: fatal, with the reason (inert: it may quote the server).
    s.state = ChildState::Fatal;
    s.fatal_reason = Some("5 restarts in 60s\x1b[2J".into());
    obs.status(&s);
    let r = get(l.addr, "/readyz").await;
    assert_eq!(r.status, 503);
    assert!(!r.body.contains('\x1b'), "{}", r.body);
    assert_eq!(r.json()["output"], "gave up: 5 restarts in 60s\\x1b[2J");
    // The state check fails; the spent budget is only a warning (one critical page an outage).
    let v = r.json();
    assert_eq!(v["checks"]["child:state"][0]["status"], "fail");
    assert_eq!(v["checks"]["restarts:count"][0]["status"], "warn");
    assert_eq!(
        v["checks"]["restarts:count"][0]["output"],
        "the restart budget is spent"
    );
    let r = get(l.addr, "/readyz?verbose").await;
    assert_eq!(r.status, 503);
    assert!(r.headers["content-type"].starts_with("text/plain"));
    assert!(
        r.body.contains("[-]child failed: gave up: 5 restarts"),
        "{}",
        r.body
    );
    assert!(r.body.ends_with("readyz check failed\n"), "{}", r.body);

    s.state = ChildState::Stopped;
    obs.status(&s);
    assert_eq!(get(l.addr, "/readyz").await.status, 503);
    assert_eq!(get(l.addr, "/livez").await.status, 200);
}

/// `# TYPE` lines (name → type) and samples (name{labels} → value) of an OpenMetrics text.
struct Exposition {
    types: BTreeMap<String, String>,
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

fn parse(text: &str) -> Exposition {
    assert!(text.ends_with("# EOF\n"), "no # EOF: {text}");
    let mut types = BTreeMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap();
            types.insert(name.to_string(), ty.to_string());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => {
                let l = l.strip_suffix('}').unwrap();
                let mut map = BTreeMap::new();
                // Label values here never hold `",` (tool names are made inert and quoted).
                for pair in l.split("\",") {
                    let (k, v) = pair.split_once("=\"").unwrap();
                    map.insert(k.to_string(), v.trim_end_matches('"').to_string());
                }
                (n.to_string(), map)
            }
            None => (series.to_string(), BTreeMap::new()),
        };
        samples.push((name, labels, value.parse().unwrap()));
    }
    Exposition { types, samples }
}

impl Exposition {
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<f64> = self
            .samples
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| *v)
            .collect();
        assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
        found[0]
    }
}

#[tokio::test]
async fn metrics_have_conventional_names_and_types() {
    let (e, l) = start().await;
    // Through the logging observer, as the binary wires it: every event reaches the metrics.
    let logs = Logs::new(e.clone());
    let obs: &dyn Observer = &logs;
    obs.status(&status(ChildState::Running));
    obs.restart(&RestartReason::Unresponsive { failures: 3 });
    obs.restart(&RestartReason::Exited {
        code: None,
        signal: Some(9),
    });
    obs.restart(&RestartReason::Exited {
        code: Some(1),
        signal: None,
    });
    obs.heartbeat(HeartbeatOutcome::Ok, Some(Duration::from_millis(3)));
    obs.heartbeat(HeartbeatOutcome::Busy, None);
    obs.tool_call("search", CallOutcome::Ok, Duration::from_millis(20));
    obs.tool_call("search", CallOutcome::ToolError, Duration::from_millis(40));
    obs.tool_call("fetch", CallOutcome::Timeout, Duration::from_secs(30));
    obs.junk_line("npm WARN deprecated");

    let r = get(l.addr, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(r.headers["content-type"].starts_with("application/openmetrics-text"));
    let ex = parse(&r.body);
    let want = [
        ("mcpulse_supervise_restarts", "counter"),
        ("mcpulse_supervise_state", "gauge"),
        ("mcpulse_supervise_heartbeats", "counter"),
        ("mcpulse_supervise_heartbeat_duration_seconds", "histogram"),
        ("mcpulse_supervise_tool_calls", "counter"),
        ("mcpulse_supervise_tool_call_duration_seconds", "histogram"),
        ("mcpulse_supervise_junk_lines", "counter"),
    ];
    assert_eq!(
        ex.types
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<BTreeSet<_>>(),
        want.into_iter().collect::<BTreeSet<_>>()
    );
    assert_eq!(
        ex.value("mcpulse_supervise_restarts_total", &[("reason", "exited")]),
        2.0
    );
    assert_eq!(
        ex.value(
            "mcpulse_supervise_restarts_total",
            &[("reason", "unresponsive")]
        ),
        1.0
    );
    assert_eq!(
        ex.value(
            "mcpulse_supervise_restarts_total",
            &[("reason", "spawn_failed")]
        ),
        0.0
    );
    assert_eq!(
        ex.value("mcpulse_supervise_state", &[("state", "running")]),
        1.0
    );
    assert_eq!(
        ex.value("mcpulse_supervise_state", &[("state", "backoff")]),
        0.0
    );
    assert_eq!(
        ex.value("mcpulse_supervise_heartbeats_total", &[("outcome", "busy")]),
        1.0
    );
    assert_eq!(
        ex.value("mcpulse_supervise_heartbeat_duration_seconds_count", &[]),
        1.0
    );
    assert_eq!(
        ex.value("mcpulse_supervise_heartbeat_duration_seconds_sum", &[]),
        0.003
    );
    assert_eq!(
        ex.value(
            "mcpulse_supervise_tool_calls_total",
            &[("tool", "search"), ("outcome", "tool_error")]
        ),
        1.0
    );
    assert_eq!(
        ex.value(
            "mcpulse_supervise_tool_calls_total",
            &[("tool", "fetch"), ("outcome", "timeout")]
        ),
        1.0
    );
    assert_eq!(
        ex.value(
            "mcpulse_supervise_tool_call_duration_seconds_count",
            &[("tool", "search")]
        ),
        2.0
    );
    assert_eq!(ex.value("mcpulse_supervise_junk_lines_total", &[]), 1.0);

    // The state gauge moves: exactly one state is 1.
    obs.status(&status(ChildState::Fatal));
    let ex = parse(&get(l.addr, "/metrics").await.body);
    assert_eq!(
        ex.value("mcpulse_supervise_state", &[("state", "fatal")]),
        1.0
    );
    let ones: f64 = ex
        .samples
        .iter()
        .filter(|(n, _, _)| n == "mcpulse_supervise_state")
        .map(|(_, _, v)| v)
        .sum();
    assert_eq!(ones, 1.0);
}

#[tokio::test]
async fn tool_labels_are_inert_and_bounded() {
    let (e, l) = start().await;
    let obs: &dyn Observer = &e;
    let hostile =
        "evil\"} 1\nmcpulse_supervise_restarts_total{reason=\"exited\"} 999\x1b[2J\u{202e}";
    obs.tool_call(hostile, CallOutcome::Ok, Duration::from_millis(1));
    obs.tool_call(
        &"x".repeat(10_000),
        CallOutcome::Ok,
        Duration::from_millis(1),
    );
    for i in 0..(MAX_TOOL_LABELS * 3) {
        obs.tool_call(
            &format!("tool-{i}"),
            CallOutcome::RpcError,
            Duration::from_millis(1),
        );
    }
    let body = get(l.addr, "/metrics").await.body;
    assert!(
        !body.contains('\x1b') && !body.contains('\u{202e}'),
        "raw control characters"
    );
    let ex = parse(&body);
    // The forged line did not become a sample.
    assert_eq!(
        ex.value("mcpulse_supervise_restarts_total", &[("reason", "exited")]),
        0.0
    );
    let tools: BTreeSet<&str> = ex
        .samples
        .iter()
        .filter(|(n, _, _)| n == "mcpulse_supervise_tool_calls_total")
        .map(|(_, l, _)| l["tool"].as_str())
        .collect();
    assert_eq!(tools.len(), MAX_TOOL_LABELS + 1, "{tools:?}");
    assert!(tools.contains(OTHER_TOOL));
    assert!(
        tools.iter().all(|t| t.chars().count() <= 250),
        "a label was not cut"
    );
    // Everything past the bound is counted under _other: 3 × 100 + 2 calls, 100 with labels.
    assert_eq!(
        ex.value(
            "mcpulse_supervise_tool_calls_total",
            &[("tool", OTHER_TOOL), ("outcome", "rpc_error")]
        ),
        (MAX_TOOL_LABELS * 3 + 2 - MAX_TOOL_LABELS) as f64
    );
}

#[tokio::test]
async fn a_port_in_use_is_a_clear_error_at_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = endpoints::serve(addr, Endpoints::new("0"))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains(&addr.to_string()) && msg.contains("--listen"),
        "{msg}"
    );
}

#[tokio::test]
async fn dropping_the_listener_stops_serving() {
    let (_e, l) = start().await;
    let addr = l.addr;
    assert_eq!(get(addr, "/livez").await.status, 200);
    drop(l);
    // The accept loop is gone: a connection is refused or closed without an answer.
    for _ in 0..50 {
        match tokio::net::TcpStream::connect(addr).await {
            Err(_) => return,
            Ok(mut s) => {
                let _ = s.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n").await;
                let mut buf = Vec::new();
                let n =
                    tokio::time::timeout(Duration::from_millis(200), s.read_to_end(&mut buf)).await;
                if matches!(n, Ok(Ok(0)) | Ok(Err(_)) | Err(_)) && buf.is_empty() {
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("still serving after the Listening was dropped");
}
