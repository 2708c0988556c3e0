//! The demo fleet, probed and judged by the real mcpulse probe and judge: every server must
//! read the way the demo promises. No sleeping: `slow` gets a short delay and a small budget,
//! and `flaky` and `drifting` are driven through their switches.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_demo::{
    DEMO_TOKEN, DriftStage, Fleet, FleetOptions, Kind, ShiftStage, start_fleet_with,
};
use mcpulse_judge::contract::{self, Contract};
use mcpulse_judge::drift::{self, Class};
use mcpulse_judge::report::AuthPosture;
use mcpulse_judge::security::Level;
use mcpulse_judge::{Policy, Report, Severity, Status, judge};
use mcpulse_probe::{Plan, Target, Transcript, probe};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SLOW: Duration = Duration::from_millis(300);

async fn fleet() -> Fleet {
    let stdio = vec!["mcpulse".into(), "demo-server".into(), "stdio".into()];
    start_fleet_with(FleetOptions {
        slow_delay: SLOW,
        ..FleetOptions::new(stdio)
    })
    .await
    .expect("the fleet starts")
}

async fn transcript(fleet: &Fleet, kind: Kind, plan: &Plan) -> Transcript {
    let url = fleet.url(kind).expect("an HTTP server");
    probe(&Target::http(url).expect("a valid URL"), plan).await
}

async fn check(fleet: &Fleet, kind: Kind) -> (Transcript, Report) {
    let tr = transcript(fleet, kind, &Plan::default()).await;
    let report = judge(&tr, &Policy::default());
    (tr, report)
}

fn codes(r: &Report) -> Vec<&str> {
    r.findings.iter().map(|f| f.code.as_str()).collect()
}

fn no_warnings(r: &Report) {
    let bad: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.severity >= Severity::Warning)
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

fn good_grade(r: &Report) {
    assert_eq!(r.grade, "A", "{:#?}", r.security);
    assert!(
        r.security
            .findings
            .iter()
            .all(|f| f.severity == Level::Info),
        "{:#?}",
        r.security
    );
}

/// The status of the first exchange of a step (`origin-check`, `session-delete`, ...).
fn status_of(tr: &Transcript, step: &str) -> Option<u16> {
    tr.exchanges
        .iter()
        .find(|e| e.step.as_str() == step)
        .and_then(|e| e.status())
}

#[tokio::test]
async fn healthy_modern_is_healthy_modern_dual_era_grade_a() {
    let fleet = fleet().await;
    let (tr, r) = check(&fleet, Kind::HealthyModern).await;
    assert_eq!(r.status, Status::Healthy, "{:#?}", r.findings);
    no_warnings(&r);
    assert_eq!(r.era.map(|e| e.as_str()), Some("modern"));
    assert_eq!(r.transport, Some("streamable-http"));
    assert_eq!(r.protocol_version.as_deref(), Some("2026-07-28"));
    assert_eq!(r.dual_era, Some(true));
    assert!(codes(&r).contains(&"dual-era"));
    assert_eq!(
        r.server.as_ref().and_then(|s| s.name.as_deref()),
        Some("mcpulse-demo-healthy-modern")
    );
    assert_eq!(r.tool_count, Some(2));
    assert!(!codes(&r).contains(&"modern-result-fields"));
    good_grade(&r);
    assert_eq!(status_of(&tr, "origin-check"), Some(403));
    assert_eq!(status_of(&tr, "host-check"), Some(403));
    assert_eq!(status_of(&tr, "session-delete"), Some(200));
    assert_eq!(status_of(&tr, "malformed-request"), Some(400));
    assert!(r.digests.is_some());
}

#[tokio::test]
async fn healthy_legacy_is_healthy_legacy_with_sse_replies() {
    let fleet = fleet().await;
    let (tr, r) = check(&fleet, Kind::HealthyLegacy).await;
    assert_eq!(r.status, Status::Healthy, "{:#?}", r.findings);
    no_warnings(&r);
    assert_eq!(r.era.map(|e| e.as_str()), Some("legacy"));
    assert_eq!(r.transport, Some("streamable-http"));
    assert_eq!(r.protocol_version.as_deref(), Some("2025-11-25"));
    assert_eq!(r.dual_era, Some(false));
    assert!(codes(&r).contains(&"legacy-only"));
    assert_eq!(r.tool_count, Some(2));
    good_grade(&r);
    // Discovery was refused the TS SDK v1 way, and the list came as an event stream.
    let discover = tr
        .exchanges
        .iter()
        .find(|e| e.step.as_str() == "server/discover")
        .expect("discovery was tried");
    assert_eq!(discover.status(), Some(400));
    assert!(
        discover.frames.iter().any(|f| f.raw.contains("-32000"))
            || discover
                .body
                .as_deref()
                .is_some_and(|b| b.contains("-32000")),
        "{discover:#?}"
    );
    let list = tr
        .exchanges
        .iter()
        .find(|e| e.step.as_str() == "tools/list")
        .expect("tools were listed");
    assert_eq!(list.header("content-type"), Some("text/event-stream"));
    assert_eq!(status_of(&tr, "session-delete"), Some(200));
}

#[tokio::test]
async fn legacy_sse_is_the_deprecated_transport() {
    let fleet = fleet().await;
    let (tr, r) = check(&fleet, Kind::LegacySse).await;
    assert_eq!(r.status, Status::Healthy, "{:#?}", r.findings);
    no_warnings(&r);
    assert_eq!(r.transport, Some("sse"));
    assert_eq!(r.era.map(|e| e.as_str()), Some("legacy"));
    assert_eq!(r.protocol_version.as_deref(), Some("2024-11-05"));
    assert!(codes(&r).contains(&"deprecated-transport"));
    assert_eq!(r.tool_count, Some(2));
    good_grade(&r);
    assert_eq!(status_of(&tr, "origin-check"), Some(403));
    assert_eq!(status_of(&tr, "host-check"), Some(403));
}

#[tokio::test]
async fn slow_is_degraded_by_its_handshake() {
    let fleet = fleet().await;
    let tr = transcript(&fleet, Kind::Slow, &Plan::default()).await;
    let policy = Policy {
        latency_budget_ms: 100.0,
        ..Policy::default()
    };
    let r = judge(&tr, &policy);
    assert_eq!(r.status, Status::Degraded, "{:#?}", r.findings);
    assert!(codes(&r).contains(&"slow-handshake"));
    assert!(r.timings_ms.handshake.is_some_and(|ms| ms >= 300.0));
    assert_eq!(r.era.map(|e| e.as_str()), Some("legacy"));
    // Within the default 3 s budget the same server is healthy.
    assert_eq!(judge(&tr, &Policy::default()).status, Status::Healthy);
}

#[tokio::test]
async fn flaky_is_down_in_its_down_phase_and_recovers() {
    let fleet = fleet().await;
    fleet.flaky().force(Some(false));
    let (_, down) = check(&fleet, Kind::Flaky).await;
    assert_eq!(down.status, Status::Down, "{:#?}", down.findings);
    assert!(codes(&down).contains(&"server-error"));

    fleet.flaky().force(Some(true));
    let (_, up) = check(&fleet, Kind::Flaky).await;
    assert_eq!(up.status, Status::Healthy, "{:#?}", up.findings);
    assert_eq!(up.era.map(|e| e.as_str()), Some("modern"));
    // 2026-only: a legacy initialize is refused.
    assert_eq!(up.dual_era, Some(false));
    good_grade(&up);
}

async fn contract_at(fleet: &Fleet, stage: DriftStage) -> Contract {
    fleet.drift().force(Some(stage));
    let (tr, r) = check(fleet, Kind::Drifting).await;
    assert_eq!(r.status, Status::Healthy, "{:#?}", r.findings);
    contract::from_transcript(&tr).expect("a contract")
}

#[tokio::test]
async fn drifting_changes_its_contract_risky_then_breaking() {
    let fleet = fleet().await;
    let original = contract_at(&fleet, DriftStage::Original).await;
    let again = contract_at(&fleet, DriftStage::Original).await;
    assert_eq!(original.digest, again.digest, "stable between probes");

    let reworded = contract_at(&fleet, DriftStage::Reworded).await;
    assert_ne!(original.digest, reworded.digest);
    let d = drift::diff(&original, &reworded);
    assert_eq!(d.class, Some(Class::Risky), "{:#?}", d.changes);

    let added = contract_at(&fleet, DriftStage::ParameterAdded).await;
    let d = drift::diff(&reworded, &added);
    assert_eq!(d.class, Some(Class::Breaking), "{:#?}", d.changes);
    assert!(
        d.changes
            .iter()
            .any(|c| c.code == "required-parameter-added")
    );

    let back = contract_at(&fleet, DriftStage::Original).await;
    assert_eq!(back.digest, original.digest);
}

#[tokio::test]
async fn auth_gated_is_degraded_with_its_metadata_read() {
    let fleet = fleet().await;
    let url = fleet.url(Kind::AuthGated).expect("url").to_owned();
    let base = url.trim_end_matches("/mcp").to_owned();
    let (tr, r) = check(&fleet, Kind::AuthGated).await;
    assert_eq!(r.status, Status::Degraded, "{:#?}", r.findings);
    assert_eq!(r.auth, AuthPosture::Required);
    assert!(codes(&r).contains(&"auth-required"));
    let detail = r.auth_detail.as_ref().expect("auth detail");
    assert_eq!(detail.status, 401);
    assert_eq!(detail.scope.as_deref(), Some("demo"));
    assert_eq!(
        detail.resource_metadata_url.as_deref(),
        Some(format!("{base}/.well-known/oauth-protected-resource").as_str())
    );
    let prm = detail.resource_metadata.as_ref().expect("metadata fetched");
    assert_eq!(prm["resource"], url.as_str());
    assert_eq!(prm["authorization_servers"][0], base.as_str());
    assert_eq!(status_of(&tr, "auth-server-metadata"), Some(200));
    good_grade(&r);

    // With the demo token it is a healthy, dual-era server.
    let plan = Plan {
        headers: vec![("authorization".into(), format!("Bearer {DEMO_TOKEN}"))],
        ..Plan::default()
    };
    let tr = transcript(&fleet, Kind::AuthGated, &plan).await;
    let r = judge(&tr, &Policy::default());
    assert_eq!(r.status, Status::Healthy, "{:#?}", r.findings);
    assert_eq!(r.dual_era, Some(true));

    // A wrong token is refused with invalid_token.
    let plan = Plan {
        headers: vec![("authorization".into(), "Bearer wrong".into())],
        ..Plan::default()
    };
    let tr = transcript(&fleet, Kind::AuthGated, &plan).await;
    let r = judge(&tr, &Policy::default());
    assert_eq!(r.auth, AuthPosture::Required);
    let challenge = r.auth_detail.and_then(|d| d.www_authenticate);
    assert!(challenge.is_some_and(|c| c.contains("invalid_token")));
}

#[tokio::test]
async fn shifting_changes_its_protocol_grade_and_auth_by_stage() {
    let fleet = fleet().await;
    let at = |stage| {
        fleet.shift().force(Some(stage));
        check(&fleet, Kind::Shifting)
    };
    let (_, steady) = at(ShiftStage::Steady).await;
    assert_eq!(steady.status, Status::Healthy, "{:#?}", steady.findings);
    assert_eq!(steady.protocol_version.as_deref(), Some("2025-11-25"));
    assert_eq!(steady.auth, AuthPosture::None);
    good_grade(&steady);

    let (_, older) = at(ShiftStage::OlderProtocol).await;
    assert_eq!(older.status, Status::Healthy, "{:#?}", older.findings);
    assert_eq!(older.protocol_version.as_deref(), Some("2025-06-18"));

    let (tr, open) = at(ShiftStage::OriginOpen).await;
    assert_eq!(open.status, Status::Healthy, "{:#?}", open.findings);
    assert_eq!(status_of(&tr, "origin-check"), Some(200));
    assert_ne!(open.grade, steady.grade, "{:#?}", open.security);

    let (_, gated) = at(ShiftStage::Gated).await;
    assert_eq!(gated.status, Status::Degraded, "{:#?}", gated.findings);
    assert_eq!(gated.auth, AuthPosture::Required);
}

#[tokio::test]
async fn the_fleet_lists_every_server() {
    let fleet = fleet().await;
    let names: Vec<&str> = fleet.servers().iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "healthy-modern",
            "healthy-legacy",
            "legacy-sse",
            "slow",
            "flaky",
            "drifting",
            "auth-gated",
            "shifting",
            "stdio"
        ]
    );
    for s in fleet.servers() {
        match s.kind {
            Kind::Stdio => {
                assert_eq!(s.url, None);
                assert_eq!(s.command, ["mcpulse", "demo-server", "stdio"]);
            }
            _ => assert!(
                s.url
                    .as_deref()
                    .is_some_and(|u| u.starts_with("http://127.0.0.1:"))
            ),
        }
    }
    assert!(fleet.listing().contains("dual-era"));
    // Without a stdio command there is no stdio server.
    let bare = start_fleet_with(FleetOptions::new(Vec::new()))
        .await
        .expect("starts");
    assert!(bare.server(Kind::Stdio).is_none());
    assert_eq!(bare.servers().len(), 8);
}

/// One raw HTTP/1.1 exchange (`Connection: close`): status, head, body.
async fn raw(url: &str, request: &str) -> (u16, String, String) {
    let authority = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("authority");
    let mut s = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connects");
    let request = request.replace("{host}", authority);
    s.write_all(request.as_bytes()).await.expect("writes");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("reads");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_owned())
}

fn post(path: &str, headers: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {{host}}\r\nConnection: close\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

#[tokio::test]
async fn modern_requests_are_validated_per_the_2026_rules() {
    let fleet = fleet().await;
    let url = fleet.url(Kind::HealthyModern).expect("url");
    let discover =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{{{META}}}}}"#);
    let modern = "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: server/discover\r\n";

    let (status, _, body) = raw(url, &post("/mcp", modern, &discover)).await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["result"]["resultType"], "complete");
    assert_eq!(v["result"]["cacheScope"], "public");
    assert_eq!(
        v["result"]["supportedVersions"],
        serde_json::json!(["2026-07-28", "2025-11-25"])
    );
    assert_eq!(
        v["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcpulse-demo-healthy-modern"
    );

    // Header mismatch: MCP-Protocol-Version differs from _meta, or Mcp-Method from the method.
    let wrong_version = "MCP-Protocol-Version: 2025-11-25\r\nMcp-Method: server/discover\r\n";
    let (status, _, body) = raw(url, &post("/mcp", wrong_version, &discover)).await;
    assert_eq!((status, body.contains("-32020")), (400, true), "{body}");
    let wrong_method = "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\n";
    let (status, _, body) = raw(url, &post("/mcp", wrong_method, &discover)).await;
    assert_eq!((status, body.contains("-32020")), (400, true), "{body}");

    // An unsupported version names the supported ones and echoes the requested one.
    let old = r#"{"jsonrpc":"2.0","id":2,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"1900-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let old_headers = "MCP-Protocol-Version: 1900-01-01\r\nMcp-Method: server/discover\r\n";
    let (status, _, body) = raw(url, &post("/mcp", old_headers, old)).await;
    assert_eq!(status, 400, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["error"]["code"], -32022);
    assert_eq!(v["error"]["data"]["requested"], "1900-01-01");

    // A missing _meta is -32602.
    let bare = r#"{"jsonrpc":"2.0","id":3,"method":"server/discover","params":{}}"#;
    let (status, _, body) = raw(url, &post("/mcp", modern, bare)).await;
    assert_eq!((status, body.contains("-32602")), (400, true), "{body}");

    // A modern-enveloped initialize, or any unknown method, is 404 -32601.
    let init = format!(r#"{{"jsonrpc":"2.0","id":4,"method":"initialize","params":{{{META}}}}}"#);
    let init_headers = "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: initialize\r\n";
    let (status, _, body) = raw(url, &post("/mcp", init_headers, &init)).await;
    assert_eq!((status, body.contains("-32601")), (404, true), "{body}");

    // tools/call needs Mcp-Name.
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"add","arguments":{{"a":1,"b":2}},{META}}}}}"#
    );
    let call_headers = "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\n";
    let (status, _, body) = raw(url, &post("/mcp", call_headers, &call)).await;
    assert_eq!((status, body.contains("-32020")), (400, true), "{body}");
    let named = format!("{call_headers}Mcp-Name: add\r\n");
    let (status, _, body) = raw(url, &post("/mcp", &named, &call)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""text":"3""#), "{body}");

    // No standalone stream; legacy requests need their session.
    let (status, head, _) = raw(
        url,
        "GET /mcp HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAccept: text/event-stream\r\n\r\n",
    )
    .await;
    assert_eq!(status, 405);
    assert!(head.contains("allow: post, delete"));
    let list = r#"{"jsonrpc":"2.0","id":6,"method":"tools/list"}"#;
    let (status, _, _) = raw(url, &post("/mcp", "", list)).await;
    assert_eq!(status, 400);
    let (status, _, body) = raw(url, &post("/mcp", "Mcp-Session-Id: nope\r\n", list)).await;
    assert_eq!((status, body.contains("-32001")), (404, true), "{body}");

    // A batch is refused; a foreign Origin is refused before anything else.
    let (status, _, _) = raw(url, &post("/mcp", "", "[]")).await;
    assert_eq!(status, 400);
    let (status, _, _) = raw(
        url,
        &post("/mcp", "Origin: http://evil.example\r\n", &discover),
    )
    .await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn shutdown_ends_open_sse_streams_and_stops_listening() {
    let fleet = fleet().await;
    let url = fleet.url(Kind::LegacySse).expect("url").to_owned();
    let authority = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("authority")
        .to_owned();
    let mut s = tokio::net::TcpStream::connect(&authority)
        .await
        .expect("connects");
    s.write_all(
        format!("GET /sse HTTP/1.1\r\nHost: {authority}\r\nAccept: text/event-stream\r\n\r\n")
            .as_bytes(),
    )
    .await
    .expect("writes");
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&seen).contains("event: endpoint") {
        let n = s.read(&mut buf).await.expect("reads");
        assert!(n > 0, "stream closed before the endpoint event");
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&seen).contains("data: /message?sessionId="));

    tokio::time::timeout(Duration::from_secs(5), fleet.shutdown())
        .await
        .expect("shutdown finishes with a stream open");
    // The stream ends (end of the chunked body, then the connection closes).
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(end.is_ok(), "the SSE stream stayed open after shutdown");
    assert!(tokio::net::TcpStream::connect(&authority).await.is_err());
}
