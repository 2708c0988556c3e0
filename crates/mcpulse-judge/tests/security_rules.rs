//! Security rules on hand-written transcripts (`mcpulse.transcript/v1`), for what a test
//! confined to loopback cannot produce end to end: a target that is not loopback
//! (`plain-http-remote`, `no-auth-remote`, `metadata-private-address`, and `origin-not-validated`
//! at its remote severity), and certificate dates at the rule's thresholds (`tls-expiring`,
//! `tls-invalid` for an expired certificate). The other rules, and these TLS ones with real
//! certificates, run end to end in crates/mcpulse/tests/security.rs, but for the tool-surface
//! rules, judged on recorded transcripts in tests/recorded.rs.
//!
//! The public addresses below are data in a transcript: nothing connects to them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_judge::security::{Level, SecurityFinding};
use mcpulse_judge::{Policy, Transcript, judge};
use serde_json::{Value, json};

const STARTED_MS: u64 = 1_796_030_850_391;
const PUBLIC_ADDR: &str = "93.184.215.14:443";

/// A transcript of `display` (host `host`), with these connections and exchanges.
fn transcript(
    display: &str,
    host: &str,
    credentials: bool,
    connections: Value,
    exchanges: Vec<Value>,
) -> Transcript {
    serde_json::from_value(json!({
        "schema": "mcpulse.transcript/v1",
        "target": { "display": display, "kind": "http", "host": host },
        "plan": { "era": "auto", "security": true, "credentials": credentials,
                  "timeout_ms": 10000, "max_response_bytes": 8388608 },
        "started_unix_ms": STARTED_MS,
        "connections": connections,
        "exchanges": exchanges,
        "total_ms": 20.0
    }))
    .unwrap()
}

fn connection(authority: &str, addr: &str) -> Value {
    json!({ "at_ms": 0.1, "authority": authority, "addr": addr, "tls": true,
            "dns_ms": 0.5, "connect_ms": 1.0, "tls_ms": 2.0 })
}

/// A JSON-RPC POST answered 200 with `reply` (a frame with our id).
fn rpc(step: &str, url: &str, id: i64, reply: Value, headers: Value) -> Value {
    let mut reply = reply;
    reply["jsonrpc"] = json!("2.0");
    reply["id"] = json!(id);
    json!({
        "step": step, "transport": "streamable-http", "era": "modern", "at_ms": 1.0, "id": id,
        "request": { "method": "POST", "url": url,
                     "headers": [["content-type", "application/json"]],
                     "body": format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{step}"}}"#) },
        "response": { "status": 200, "headers": headers, "ttfb_ms": 1.0 },
        "frames": [{ "at_ms": 1.5, "raw": reply.to_string() }],
        "body_bytes": 100,
        "outcome": { "kind": "reply", "frame": 0 },
        "elapsed_ms": 1.5
    })
}

fn discover(url: &str) -> Value {
    rpc(
        "server/discover",
        url,
        1,
        json!({ "result": { "supportedVersions": ["2026-07-28"],
                            "capabilities": { "tools": {} },
                            "resultType": "complete", "ttlMs": 0, "cacheScope": "private",
                            "_meta": { "io.modelcontextprotocol/serverInfo": { "name": "s", "version": "1" } } } }),
        json!([["content-type", "application/json"]]),
    )
}

fn tools_list(url: &str, tools: Value) -> Value {
    rpc(
        "tools/list",
        url,
        2,
        json!({ "result": { "tools": tools, "resultType": "complete", "ttlMs": 0, "cacheScope": "private" } }),
        json!([["content-type", "application/json"]]),
    )
}

/// A GET of a metadata document.
fn get(step: &str, url: &str, status: u16, body: &str) -> Value {
    json!({
        "step": step, "transport": "streamable-http", "at_ms": 2.0,
        "request": { "method": "GET", "url": url, "headers": [["accept", "application/json"]] },
        "response": { "status": status, "headers": [["content-type", "application/json"]], "ttfb_ms": 1.0 },
        "body": body, "body_bytes": body.len(),
        "outcome": { "kind": "fetched" },
        "elapsed_ms": 1.0
    })
}

/// A metadata GET the SSRF guard refused, with the transport's own wording.
fn refused(step: &str, url: &str, host: &str, ip: &str) -> Value {
    json!({
        "step": step, "transport": "streamable-http", "at_ms": 2.0,
        "request": { "method": "GET", "url": url, "headers": [["accept", "application/json"]] },
        "body_bytes": 0,
        "outcome": { "kind": "transport-error", "cause": "non-public-address",
                     "message": format!("connection failed: refused: {host} resolves to the non-public address {ip}, and a public server may not point mcpulse there") },
        "elapsed_ms": 0.2
    })
}

/// A discover answered 401 with this challenge.
fn gated(url: &str, challenge: &str) -> Value {
    json!({
        "step": "server/discover", "transport": "streamable-http", "era": "modern", "at_ms": 0.5, "id": 1,
        "request": { "method": "POST", "url": url, "headers": [["content-type", "application/json"]] },
        "response": { "status": 401, "headers": [["www-authenticate", challenge]], "ttfb_ms": 1.0 },
        "body": "", "body_bytes": 0,
        "outcome": { "kind": "no-reply" },
        "elapsed_ms": 1.0
    })
}

fn findings(tr: &Transcript, policy: &Policy) -> Vec<SecurityFinding> {
    judge(tr, policy).security.findings
}

fn one(tr: &Transcript, policy: &Policy, code: &str) -> SecurityFinding {
    let all = findings(tr, policy);
    let mine: Vec<&SecurityFinding> = all.iter().filter(|f| f.code == code).collect();
    assert_eq!(mine.len(), 1, "{code}: {all:#?}");
    assert!(!mine[0].evidence.is_empty(), "{code}: no evidence");
    mine[0].clone()
}

fn none(tr: &Transcript, policy: &Policy, code: &str) {
    let all = findings(tr, policy);
    assert!(
        all.iter().all(|f| f.code != code),
        "unexpected {code}: {all:#?}"
    );
}

const REMOTE: &str = "https://mcp.example.com/mcp";

fn read_only_tool() -> Value {
    json!([{ "name": "lookup", "inputSchema": { "type": "object" },
             "annotations": { "readOnlyHint": true } }])
}

// -------------------------------------------------------------------------------------------

#[test]
fn plain_http_remote() {
    let url = "http://mcp.example.com/mcp";
    let tr = transcript(
        url,
        "mcp.example.com",
        false,
        json!([connection("mcp.example.com:80", "93.184.215.14:80")]),
        vec![discover(url)],
    );
    let f = one(&tr, &Policy::default(), "plain-http-remote");
    assert_eq!(f.severity, Level::Critical);
    assert_eq!(f.evidence, [format!("target: {url}")]);
    assert_eq!(judge(&tr, &Policy::default()).security.grade, "F");

    // Absence: TLS, or plain HTTP on loopback (however it is spelled).
    for (url, host) in [
        (REMOTE, "mcp.example.com"),
        ("http://127.0.0.1:3000/mcp", "127.0.0.1"),
        ("http://localhost:3000/mcp", "localhost"),
        ("http://[::1]:3000/mcp", "::1"),
        ("http://127.1.2.3:3000/mcp", "127.1.2.3"),
        ("http://app.localhost:3000/mcp", "app.localhost"),
    ] {
        let tr = transcript(url, host, false, json!([]), vec![discover(url)]);
        none(&tr, &Policy::default(), "plain-http-remote");
    }
}

#[test]
fn no_auth_remote() {
    let conns = json!([connection("mcp.example.com:443", PUBLIC_ADDR)]);
    // Read-only tools only: informational.
    let tr = transcript(
        REMOTE,
        "mcp.example.com",
        false,
        conns.clone(),
        vec![discover(REMOTE), tools_list(REMOTE, read_only_tool())],
    );
    let f = one(&tr, &Policy::default(), "no-auth-remote");
    assert_eq!(f.severity, Level::Info);
    assert_eq!(
        f.evidence,
        [format!("tools/list: POST {REMOTE} → HTTP 200")]
    );
    assert_eq!(judge(&tr, &Policy::default()).security.score, 100);

    // A tool that may be destructive (no annotations: the spec's defaults say it may): low.
    let tools = json!([{ "name": "send_mail", "inputSchema": { "type": "object" } }]);
    let tr_low = transcript(
        REMOTE,
        "mcp.example.com",
        false,
        conns.clone(),
        vec![discover(REMOTE), tools_list(REMOTE, tools)],
    );
    assert_eq!(
        one(&tr_low, &Policy::default(), "no-auth-remote").severity,
        Level::Low
    );

    // --expect-auth: high.
    let strict = Policy {
        expect_auth: true,
        ..Policy::default()
    };
    assert_eq!(one(&tr, &strict, "no-auth-remote").severity, Level::High);

    // Absence: the probe sent credentials; or the server is on loopback; or it is gated.
    let authed = transcript(
        REMOTE,
        "mcp.example.com",
        true,
        conns.clone(),
        vec![discover(REMOTE), tools_list(REMOTE, read_only_tool())],
    );
    none(&authed, &strict, "no-auth-remote");
    let local = "http://127.0.0.1:3000/mcp";
    let loopback = transcript(
        local,
        "127.0.0.1",
        false,
        json!([]),
        vec![discover(local), tools_list(local, read_only_tool())],
    );
    none(&loopback, &strict, "no-auth-remote");
    let gated_tr = transcript(
        REMOTE,
        "mcp.example.com",
        false,
        conns,
        vec![gated(REMOTE, "Bearer")],
    );
    none(&gated_tr, &strict, "no-auth-remote");
}

#[test]
fn origin_not_validated_on_a_remote_server_is_high() {
    let mut check = discover(REMOTE);
    check["step"] = json!("origin-check");
    check["request"]["headers"] = json!([["origin", "http://evil.example"]]);
    let tr = transcript(
        REMOTE,
        "mcp.example.com",
        false,
        json!([connection("mcp.example.com:443", PUBLIC_ADDR)]),
        vec![discover(REMOTE), check.clone()],
    );
    let f = one(&tr, &Policy::default(), "origin-not-validated");
    assert_eq!(
        f.severity,
        Level::High,
        "critical is for unauthenticated loopback servers"
    );
    assert_eq!(
        f.evidence,
        [format!(
            "origin-check: POST {REMOTE} with origin: http://evil.example → HTTP 200"
        )]
    );
    // Absence: a 403.
    check["response"]["status"] = json!(403);
    let tr = transcript(REMOTE, "mcp.example.com", false, json!([]), vec![check]);
    none(&tr, &Policy::default(), "origin-not-validated");
}

#[test]
fn metadata_private_address() {
    let conns = json!([connection("mcp.example.com:443", PUBLIC_ADDR)]);
    // The challenge names protected-resource metadata on the cloud metadata address.
    let prm_url = "http://169.254.169.254/latest/meta-data";
    let tr = transcript(
        REMOTE,
        "mcp.example.com",
        false,
        conns.clone(),
        vec![
            gated(REMOTE, &format!(r#"Bearer resource_metadata="{prm_url}""#)),
            refused(
                "resource-metadata",
                prm_url,
                "169.254.169.254",
                "169.254.169.254",
            ),
        ],
    );
    let f = one(&tr, &Policy::default(), "metadata-private-address");
    assert_eq!(f.severity, Level::High);
    assert!(
        f.evidence[0].starts_with(&format!("resource-metadata: GET {prm_url} → ")),
        "{:?}",
        f.evidence
    );
    none(&tr, &Policy::default(), "resource-metadata-invalid");

    // Good protected-resource metadata naming an authorization server on a private address.
    let prm_url = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp";
    let prm = json!({ "resource": REMOTE, "authorization_servers": ["https://auth.internal"] });
    let as_url = "https://auth.internal/.well-known/oauth-authorization-server";
    let tr = transcript(
        REMOTE,
        "mcp.example.com",
        false,
        conns.clone(),
        vec![
            gated(REMOTE, &format!(r#"Bearer resource_metadata="{prm_url}""#)),
            get("resource-metadata", prm_url, 200, &prm.to_string()),
            refused("auth-server-metadata", as_url, "auth.internal", "10.1.2.3"),
        ],
    );
    let f = one(&tr, &Policy::default(), "metadata-private-address");
    assert!(f.message.contains("https://auth.internal"), "{}", f.message);
    assert!(
        f.evidence[0].starts_with(&format!("auth-server-metadata: GET {as_url} → ")),
        "{:?}",
        f.evidence
    );
    none(&tr, &Policy::default(), "auth-server-metadata-missing");

    // Absence: the same documents, followed (a public authorization server).
    let as_doc = json!({ "issuer": "https://auth.internal",
                         "authorization_endpoint": "https://auth.internal/authorize",
                         "token_endpoint": "https://auth.internal/token",
                         "code_challenge_methods_supported": ["S256"] });
    let tr = transcript(
        REMOTE,
        "mcp.example.com",
        false,
        conns,
        vec![
            gated(REMOTE, &format!(r#"Bearer resource_metadata="{prm_url}""#)),
            get("resource-metadata", prm_url, 200, &prm.to_string()),
            get("auth-server-metadata", as_url, 200, &as_doc.to_string()),
        ],
    );
    assert_eq!(findings(&tr, &Policy::default()), Vec::new());
}

#[test]
fn tls_certificate_dates() {
    let day = 86_400i64;
    let now = (STARTED_MS / 1000) as i64;
    let tr_with = |not_after: i64| {
        let mut c = connection("mcp.example.com:443", PUBLIC_ADDR);
        c["cert_not_before"] = json!(now - 60 * day);
        c["cert_not_after"] = json!(not_after);
        transcript(
            REMOTE,
            "mcp.example.com",
            true,
            json!([c]),
            vec![discover(REMOTE)],
        )
    };
    for days_left in [0.5, 5.0, 13.9] {
        let tr = tr_with(now + (days_left * day as f64) as i64);
        let f = one(&tr, &Policy::default(), "tls-expiring");
        assert_eq!(f.severity, Level::Medium);
        assert!(
            f.evidence[0].starts_with("certificate notAfter 20"),
            "{:?}",
            f.evidence
        );
        none(&tr, &Policy::default(), "tls-invalid");
    }
    // Absence: 14 days or more.
    for days_left in [14.1, 90.0] {
        let tr = tr_with(now + (days_left * day as f64) as i64);
        none(&tr, &Policy::default(), "tls-expiring");
        none(&tr, &Policy::default(), "tls-invalid");
    }
    // Expired: tls-invalid, critical.
    let tr = tr_with(now - day);
    let f = one(&tr, &Policy::default(), "tls-invalid");
    assert_eq!(f.severity, Level::Critical);
    assert!(f.message.contains("expired"), "{}", f.message);
    none(&tr, &Policy::default(), "tls-expiring");
}

#[test]
fn tls_handshake_failure() {
    let mut c = connection("mcp.example.com:443", PUBLIC_ADDR);
    c["error"] = json!({ "stage": "tls", "message": "invalid peer certificate: UnknownIssuer" });
    let tr = transcript(REMOTE, "mcp.example.com", false, json!([c]), vec![]);
    let report = judge(&tr, &Policy::default());
    let f = one(&tr, &Policy::default(), "tls-invalid");
    assert_eq!(f.severity, Level::Critical);
    assert_eq!(
        f.evidence,
        ["connect mcp.example.com:443 → invalid peer certificate: UnknownIssuer"]
    );
    assert_eq!(report.security.grade, "F");
    assert!(report.findings.iter().any(|f| f.code == "tls-failed"));
    // Absence: a failure at another stage is not a certificate problem.
    let mut c = connection("mcp.example.com:443", PUBLIC_ADDR);
    c["error"] = json!({ "stage": "connect", "message": "Connection refused" });
    let tr = transcript(REMOTE, "mcp.example.com", false, json!([c]), vec![]);
    none(&tr, &Policy::default(), "tls-invalid");
}
