#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Interop: the real `mcpulse` binary against real third-party MCP servers.
//!
//! Nothing here was written for mcpulse: the servers are the official reference server
//! (npm `@modelcontextprotocol/server-everything`) in its three transports, the official
//! Python SDK 2.x (dual-era) and 1.x (legacy only) serving two tiny scripts from
//! `tests/fixtures/`, and a published dual-era stdio server (PyPI `mcp-server-time`).
//! `scripts/interop-setup.sh` installs them, pinned, into `target/interop/`; a missing install
//! fails these tests (it never skips them).
//!
//! HTTP servers listen on 127.0.0.1 (server-everything binds every interface; only loopback
//! traffic is sent to it) on a port found by binding port 0 just before the start, and are
//! killed with their whole process group when the test ends, pass or fail. stdio servers are
//! started by mcpulse itself, after `--`.

use serde_json::Value;
use std::fmt;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// mcpulse bounds itself with `--timeout 10s`; this is the test's own bound on the process.
const MCPULSE_WITHIN: Duration = Duration::from_secs(30);

const LEGACY: &str = "2025-11-25";
const MODERN: &str = "2026-07-28";

#[path = "support/installs.rs"]
mod installs;
use installs::*;
#[path = "support/servers.rs"]
mod servers;
use servers::*;

// ---------------------------------------------------------------------------------------------
// Servers (the Server type and server-everything's HTTP modes are in support/servers.rs)
// ---------------------------------------------------------------------------------------------

/// tests/fixtures/ts_sdk_server.cjs: the TypeScript SDK's own transports (`sse` or
/// `streamableHttp`) with its DNS-rebinding protection on.
fn ts_sdk_http(mode: &str) -> Server {
    let script = fixture("ts_sdk_server.cjs");
    let (mode, node_path) = (mode.to_owned(), node_modules());
    Server::start("ts-sdk", move |port| {
        let mut c = Command::new("node");
        c.arg(&script)
            .arg(&mode)
            .arg(port.to_string())
            .env("NODE_PATH", &node_path);
        c
    })
}

fn python_http(name: &'static str, pythonpath: String, script: &str) -> Server {
    let script = fixture(script);
    Server::start(name, move |port| {
        let mut c = Command::new("python3");
        c.arg(&script)
            .arg("http")
            .arg(port.to_string())
            .env("PYTHONPATH", &pythonpath)
            .env("PYTHONDONTWRITEBYTECODE", "1");
        c
    })
}

// ---------------------------------------------------------------------------------------------
// Running mcpulse
// ---------------------------------------------------------------------------------------------

/// One run of `mcpulse probe --json`: the exit code, the report and the transcript.
struct Run {
    args: Vec<String>,
    code: i32,
    report: Value,
    transcript: Value,
    stderr: String,
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut report = self.report.clone();
        if let Some(o) = report.as_object_mut() {
            o.remove("instructions"); // long, and says nothing about the failure
        }
        writeln!(f, "mcpulse {}", self.args.join(" "))?;
        writeln!(f, "exit code {}", self.code)?;
        writeln!(
            f,
            "report: {}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        )?;
        if !self.stderr.is_empty() {
            writeln!(f, "stderr: {}", self.stderr)?;
        }
        write!(f, "steps: {:?}", self.steps())
    }
}

impl Run {
    fn status(&self) -> &str {
        self.report["status"].as_str().unwrap_or("?")
    }

    fn codes(&self) -> Vec<&str> {
        self.report["findings"]
            .as_array()
            .map(|a| a.iter().filter_map(|f| f["code"].as_str()).collect())
            .unwrap_or_default()
    }

    fn finding(&self, code: &str) -> &str {
        self.report["findings"]
            .as_array()
            .and_then(|a| a.iter().find(|f| f["code"] == code))
            .and_then(|f| f["message"].as_str())
            .unwrap_or_else(|| panic!("no {code} finding\n{self}"))
    }

    /// Findings that count against the verdict (warning or critical).
    fn problems(&self) -> Vec<&str> {
        self.report["findings"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|f| f["severity"] != "info")
                    .filter_map(|f| f["code"].as_str())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn tools(&self) -> Vec<&str> {
        self.report["tools"]
            .as_array()
            .map(|a| a.iter().filter_map(|t| t["name"].as_str()).collect())
            .unwrap_or_default()
    }

    fn supported(&self) -> Vec<&str> {
        self.report["supported_versions"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    fn exchanges(&self) -> &[Value] {
        self.transcript["exchanges"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    fn steps(&self) -> Vec<&str> {
        self.exchanges()
            .iter()
            .filter_map(|e| e["step"].as_str())
            .collect()
    }

    fn exchange(&self, step: &str) -> &Value {
        self.exchanges()
            .iter()
            .find(|e| e["step"] == step)
            .unwrap_or_else(|| panic!("no {step} exchange\n{self}"))
    }

    fn processes(&self) -> &[Value] {
        self.transcript["processes"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The healthy verdict with nothing but informational findings, and exit code 0.
    fn assert_healthy(&self) {
        assert_eq!(self.status(), "healthy", "{self}");
        assert_eq!(self.code, 0, "{self}");
        assert!(self.problems().is_empty(), "{self}");
    }

    fn assert_down(&self) {
        assert_eq!(self.status(), "down", "{self}");
        assert_eq!(self.code, 2, "{self}");
    }
}

fn header<'a>(headers: &'a Value, name: &str) -> Option<&'a str> {
    headers
        .as_array()?
        .iter()
        .find(|h| h[0].as_str().is_some_and(|n| n.eq_ignore_ascii_case(name)))?[1]
        .as_str()
}

/// Runs `mcpulse probe --json --timeout 10s --latency-budget 10s --transcript FILE ARGS...`
/// with `env` added. The latency budget is the whole timeout because these tests are about
/// the protocol, not speed: on a loaded machine a stdio server's start-up alone (part of its
/// handshake time) can pass the 3 s default, and "degraded" would then say nothing about
/// interop.
fn mcpulse(args: &[&str], env: &[(&str, &str)]) -> Run {
    let transcript_path = scratch("transcript.json");
    let mut all: Vec<String> = [
        "probe",
        "--json",
        "--timeout",
        "10s",
        "--latency-budget",
        "10s",
        "--transcript",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    all.push(path_str(transcript_path.clone()));
    all.extend(args.iter().map(|s| (*s).to_owned()));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcpulse"));
    cmd.args(&all)
        .envs(env.iter().copied())
        .env("PYTHONDONTWRITEBYTECODE", "1");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + MCPULSE_WITHIN;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "mcpulse {} did not finish within {MCPULSE_WITHIN:?}",
                all.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().unwrap();
    let stderr = err.join().unwrap();
    let code = status.code().unwrap_or(-1);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "mcpulse {} (exit {code}) printed no JSON report ({e}):\n{stdout}\n{stderr}",
            all.join(" ")
        )
    });
    let transcript: Value = std::fs::read_to_string(&transcript_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    Run {
        args: all,
        code,
        report,
        transcript,
        stderr,
    }
}

// ---------------------------------------------------------------------------------------------
// server-everything (npm), legacy era, three transports
// ---------------------------------------------------------------------------------------------

const EVERYTHING_TOOLS: usize = 13;

fn assert_everything(run: &Run) {
    assert_eq!(
        run.report["server"]["name"], "mcp-servers/everything",
        "{run}"
    );
    assert_eq!(run.report["tool_count"], EVERYTHING_TOOLS, "{run}");
    assert_eq!(run.tools().len(), EVERYTHING_TOOLS, "{run}");
    for tool in ["echo", "get-sum", "get-tiny-image"] {
        assert!(run.tools().contains(&tool), "{tool} missing\n{run}");
    }
    assert_eq!(run.report["protocol_version"], LEGACY, "{run}");
    assert_eq!(run.supported(), [LEGACY], "{run}");
}

/// What each server process of the probe was for, in the transcript's order.
fn purposes(run: &Run) -> Vec<&str> {
    run.processes()
        .iter()
        .filter_map(|p| p["purpose"].as_str())
        .collect()
}

#[test]
fn everything_stdio_is_healthy_and_legacy_only() {
    let bin = everything();
    let run = mcpulse(&["--", "node", &bin, "stdio"], &[]);
    run.assert_healthy();
    assert_eq!(run.report["transport"], "stdio", "{run}");
    assert_eq!(run.report["era"], "legacy", "{run}");
    assert_eq!(run.report["dual_era"], false, "{run}");
    assert_everything(&run);
    // It answers server/discover with "method not found" and stays up: the legacy handshake
    // goes on in the same process, which the probe ended.
    assert!(run.finding("legacy-only").contains("-32601"), "{run}");
    assert_eq!(purposes(&run), ["probe"], "{run}");
    assert!(
        run.processes()
            .iter()
            .all(|p| p["exit"]["by_probe"] == true),
        "{run}"
    );
    assert!(
        run.steps().starts_with(&["server/discover", "initialize"]),
        "{run}"
    );
}

#[test]
fn everything_stdio_forced_eras() {
    let bin = everything();
    let legacy = mcpulse(&["--era", "legacy", "--", "node", &bin, "stdio"], &[]);
    legacy.assert_healthy();
    assert_eq!(legacy.report["era"], "legacy", "{legacy}");
    assert_eq!(legacy.report["dual_era"], Value::Null, "{legacy}");
    assert!(!legacy.codes().contains(&"legacy-only"), "{legacy}");
    assert!(!legacy.steps().contains(&"server/discover"), "{legacy}");
    assert_everything(&legacy);

    // A modern-only client cannot use it: down, with the server's own refusal as the reason.
    let modern = mcpulse(&["--era", "modern", "--", "node", &bin, "stdio"], &[]);
    modern.assert_down();
    assert_eq!(modern.report["era"], Value::Null, "{modern}");
    let why = modern.finding("handshake-failed");
    assert!(
        why.contains("server/discover") && why.contains("-32601"),
        "{modern}"
    );
    assert!(!modern.steps().contains(&"initialize"), "{modern}");
}

#[test]
fn everything_streamable_http_is_healthy_and_ends_its_session() {
    let server = everything_http("streamableHttp");
    let run = mcpulse(&[&server.url("/mcp")], &[]);
    run.assert_healthy();
    assert_eq!(run.report["transport"], "streamable-http", "{run}");
    assert_eq!(run.report["era"], "legacy", "{run}");
    assert_eq!(run.report["dual_era"], false, "{run}");
    assert_everything(&run);
    // Over HTTP, server/discover without a session is a 400 with -32000 "Server not initialized".
    let why = run.finding("legacy-only");
    assert!(why.contains("HTTP 400") && why.contains("-32000"), "{run}");
    // The initialize reply comes as an SSE stream (with an empty priming event first).
    let init = run.exchange("initialize");
    assert_eq!(
        header(&init["response"]["headers"], "content-type"),
        Some("text/event-stream"),
        "{run}"
    );
    // The session it issued was ended with DELETE, and the server accepted that.
    let sid = header(&init["response"]["headers"], "mcp-session-id")
        .unwrap_or_else(|| panic!("no session id\n{run}"));
    let delete = run.exchange("session-delete");
    // The session ends after the lists and the security checks that ride it: the foreign
    // Host's ping (accepted, so no replay at the door follows), then the malformed body (the
    // SDK's transport answered it with a parse error, where a body without a session makes
    // server-everything build a whole server); the Origin check's requests (a handshake of
    // its own) come after.
    let steps = run.steps();
    let health_end = steps.iter().position(|s| *s == "session-delete").unwrap();
    let last_list = steps.iter().rposition(|s| s.ends_with("/list")).unwrap();
    assert_eq!(
        steps[last_list + 1..health_end],
        ["host-check", "malformed-request"],
        "{run}"
    );
    let malformed = run.exchange("malformed-request");
    let host = run.exchange("host-check");
    for ex in [&malformed, &host] {
        assert_eq!(
            header(&ex["request"]["headers"], "mcp-session-id"),
            Some(sid),
            "{run}"
        );
    }
    assert!(
        host["request"]["body"]
            .as_str()
            .unwrap_or("")
            .contains(r#""method":"ping""#),
        "{run}"
    );
    assert_eq!(malformed["response"]["status"], 400, "{run}");
    assert!(
        malformed["body"].as_str().unwrap_or("").contains("-32700"),
        "{run}"
    );
    assert_eq!(delete["request"]["method"], "DELETE", "{run}");
    assert_eq!(
        header(&delete["request"]["headers"], "mcp-session-id"),
        Some(sid),
        "{run}"
    );
    assert_eq!(delete["response"]["status"], 200, "{run}");
    assert!(!run.codes().contains(&"session-delete-failed"), "{run}");
}

#[test]
fn everything_streamable_http_forced_eras() {
    let server = everything_http("streamableHttp");
    let legacy = mcpulse(&["--era", "legacy", &server.url("/mcp")], &[]);
    legacy.assert_healthy();
    assert_eq!(legacy.report["era"], "legacy", "{legacy}");
    assert_eq!(legacy.report["dual_era"], Value::Null, "{legacy}");
    assert_everything(&legacy);

    let modern = mcpulse(&["--era", "modern", &server.url("/mcp")], &[]);
    modern.assert_down();
    assert_eq!(modern.report["transport"], "streamable-http", "{modern}");
    assert_eq!(modern.report["era"], Value::Null, "{modern}");
    assert_eq!(modern.report["tool_count"], Value::Null, "{modern}");
    let why = modern.finding("handshake-failed");
    assert!(
        why.contains("HTTP 400") && why.contains("server/discover") && why.contains("-32000"),
        "{modern}"
    );
    assert_eq!(modern.steps(), ["server/discover"], "{modern}");
}

#[test]
fn everything_sse_is_found_and_flagged_deprecated() {
    let server = everything_http("sse");
    let url = server.url("/sse");

    // auto: Streamable HTTP is tried first (404 to both POSTs), then the legacy GET stream.
    let auto = mcpulse(&[&url], &[]);
    auto.assert_healthy();
    assert_eq!(auto.report["transport"], "sse", "{auto}");
    assert_eq!(auto.report["era"], "legacy", "{auto}");
    assert_eq!(auto.report["dual_era"], false, "{auto}");
    assert_everything(&auto);
    assert!(auto.codes().contains(&"deprecated-transport"), "{auto}");
    assert!(auto.codes().contains(&"legacy-only"), "{auto}");
    assert!(
        auto.steps()
            .starts_with(&["server/discover", "initialize", "sse-open"]),
        "{auto}"
    );
    assert_eq!(
        auto.exchange("sse-open")["outcome"]["kind"],
        "endpoint",
        "{auto}"
    );

    // --transport sse: straight to the GET stream.
    let sse = mcpulse(&["--transport", "sse", &url], &[]);
    sse.assert_healthy();
    assert_eq!(sse.report["transport"], "sse", "{sse}");
    assert_eq!(sse.report["era"], "legacy", "{sse}");
    assert_eq!(sse.report["dual_era"], Value::Null, "{sse}");
    assert_everything(&sse);
    assert!(sse.codes().contains(&"deprecated-transport"), "{sse}");
    assert!(
        sse.steps().starts_with(&["sse-open", "initialize"]),
        "{sse}"
    );

    // --transport streamable-http: there is no such endpoint there.
    let streamable = mcpulse(&["--transport", "streamable-http", &url], &[]);
    streamable.assert_down();
    assert!(
        streamable.finding("handshake-failed").contains("HTTP 404"),
        "{streamable}"
    );
    assert!(!streamable.steps().contains(&"sse-open"), "{streamable}");
}

// ---------------------------------------------------------------------------------------------
// The Python SDK 2.x (PyPI mcp 2.3.0): dual-era
// ---------------------------------------------------------------------------------------------

fn assert_py2_fixture(run: &Run) {
    assert_eq!(run.report["server"]["name"], "mcpulse-fixture-py2", "{run}");
    assert_eq!(run.report["tool_count"], 2, "{run}");
    assert_eq!(run.tools(), ["add", "echo"], "{run}");
}

#[test]
fn python_sdk2_streamable_http_is_modern_and_dual_era() {
    let server = python_http("python-sdk-2", py2(), "mcp2_server.py");
    let run = mcpulse(&[&server.url("/mcp")], &[]);
    run.assert_healthy();
    assert_eq!(run.report["transport"], "streamable-http", "{run}");
    assert_eq!(run.report["era"], "modern", "{run}");
    assert_eq!(run.report["protocol_version"], MODERN, "{run}");
    assert_eq!(run.report["dual_era"], true, "{run}");
    assert!(
        run.supported().contains(&MODERN) && run.supported().contains(&LEGACY),
        "{run}"
    );
    assert!(run.finding("dual-era").contains(LEGACY), "{run}");
    assert!(!run.codes().contains(&"modern-result-fields"), "{run}");
    assert_py2_fixture(&run);
    assert_eq!(
        run.exchange("server/discover")["response"]["status"],
        200,
        "{run}"
    );
    // The legacy initialize of the dual-era check opened a session; it was ended.
    assert_eq!(
        run.exchange("dual-era-check")["response"]["status"],
        200,
        "{run}"
    );
    assert_eq!(
        run.exchange("session-delete")["response"]["status"],
        200,
        "{run}"
    );
    assert!(!run.steps().contains(&"initialize"), "{run}");
}

#[test]
fn python_sdk2_streamable_http_forced_eras() {
    let server = python_http("python-sdk-2", py2(), "mcp2_server.py");
    let legacy = mcpulse(&["--era", "legacy", &server.url("/mcp")], &[]);
    legacy.assert_healthy();
    assert_eq!(legacy.report["era"], "legacy", "{legacy}");
    assert_eq!(legacy.report["protocol_version"], LEGACY, "{legacy}");
    assert_eq!(legacy.report["dual_era"], Value::Null, "{legacy}");
    assert_py2_fixture(&legacy);
    assert_eq!(
        legacy.exchange("session-delete")["response"]["status"],
        200,
        "{legacy}"
    );

    let modern = mcpulse(&["--era", "modern", &server.url("/mcp")], &[]);
    modern.assert_healthy();
    assert_eq!(modern.report["era"], "modern", "{modern}");
    assert_eq!(modern.report["protocol_version"], MODERN, "{modern}");
    assert_eq!(modern.supported(), [MODERN], "{modern}");
    assert_eq!(modern.report["dual_era"], Value::Null, "{modern}");
    assert_py2_fixture(&modern);
    assert!(
        !modern.steps().contains(&"initialize") && !modern.steps().contains(&"dual-era-check"),
        "{modern}"
    );
}

#[test]
fn python_sdk2_stdio_is_modern_and_dual_era() {
    let script = fixture("mcp2_server.py");
    let run = mcpulse(
        &["--dual-era", "--", "python3", &script, "stdio"],
        &[("PYTHONPATH", &py2())],
    );
    run.assert_healthy();
    assert_eq!(run.report["transport"], "stdio", "{run}");
    assert_eq!(run.report["era"], "modern", "{run}");
    assert_eq!(run.report["dual_era"], true, "{run}");
    assert!(
        run.supported().contains(&MODERN) && run.supported().contains(&LEGACY),
        "{run}"
    );
    assert_py2_fixture(&run);
}

// ---------------------------------------------------------------------------------------------
// mcp-server-time (PyPI, on the SDK 2.x): a published dual-era stdio server
// ---------------------------------------------------------------------------------------------

#[test]
fn mcp_server_time_stdio_is_modern_and_dual_era() {
    let time_server = |flags: &[&str]| {
        let mut args = flags.to_vec();
        args.extend([
            "--",
            "python3",
            "-m",
            "mcp_server_time",
            "--local-timezone",
            "UTC",
        ]);
        mcpulse(&args, &[("PYTHONPATH", &pytime())])
    };
    // By default over stdio: one process, the dual-era question not asked.
    let one = time_server(&[]);
    one.assert_healthy();
    assert_eq!(one.report["era"], "modern", "{one}");
    assert_eq!(one.report["dual_era"], Value::Null, "{one}");
    assert_eq!(purposes(&one), ["probe"], "{one}");

    let run = time_server(&["--dual-era"]);
    run.assert_healthy();
    assert_eq!(run.report["transport"], "stdio", "{run}");
    assert_eq!(run.report["era"], "modern", "{run}");
    assert_eq!(run.report["protocol_version"], MODERN, "{run}");
    assert_eq!(run.report["dual_era"], true, "{run}");
    assert!(
        run.supported().contains(&MODERN) && run.supported().contains(&LEGACY),
        "{run}"
    );
    assert_eq!(run.report["server"]["name"], "mcp-time", "{run}");
    assert_eq!(run.report["server"]["version"], "2026.10.19", "{run}");
    assert_eq!(run.tools(), ["get_current_time", "convert_time"], "{run}");
    // The server fixes the era of its process at the first request (a later initialize gets
    // -32022), so the dual-era check (--dual-era) runs in a second process, started beside the
    // first; both were ended by the probe.
    assert_eq!(purposes(&run), ["probe", "dual-era check"], "{run}");
    assert!(
        run.processes().iter().all(|p| !p["exit"].is_null()),
        "{run}"
    );
}

// ---------------------------------------------------------------------------------------------
// The Python SDK 1.x (PyPI mcp 1.30.0, FastMCP): legacy only
// ---------------------------------------------------------------------------------------------

#[test]
fn python_sdk1_streamable_http_is_legacy_only() {
    let server = python_http("python-sdk-1", py1(), "mcp1_server.py");
    let run = mcpulse(&[&server.url("/mcp")], &[]);
    run.assert_healthy();
    assert_eq!(run.report["transport"], "streamable-http", "{run}");
    assert_eq!(run.report["era"], "legacy", "{run}");
    assert_eq!(run.report["protocol_version"], LEGACY, "{run}");
    assert_eq!(run.report["dual_era"], false, "{run}");
    assert_eq!(run.report["server"]["name"], "mcpulse-fixture-py1", "{run}");
    assert_eq!(run.report["server"]["version"], "1.30.0", "{run}");
    assert_eq!(run.tools(), ["add"], "{run}");
    // A POST without a session gets 400 -32600 "Missing session ID" (with the non-conformant
    // id "server-error"): classified as "not modern", not a crash.
    let why = run.finding("legacy-only");
    assert!(why.contains("HTTP 400") && why.contains("-32600"), "{run}");
    assert_eq!(
        run.exchange("session-delete")["response"]["status"],
        200,
        "{run}"
    );

    let modern = mcpulse(&["--era", "modern", &server.url("/mcp")], &[]);
    modern.assert_down();
    assert!(
        modern.finding("handshake-failed").contains("-32600"),
        "{modern}"
    );
}

#[test]
fn python_sdk1_stdio_is_legacy_only() {
    let script = fixture("mcp1_server.py");
    let run = mcpulse(
        &["--", "python3", &script, "stdio"],
        &[("PYTHONPATH", &py1())],
    );
    run.assert_healthy();
    assert_eq!(run.report["transport"], "stdio", "{run}");
    assert_eq!(run.report["era"], "legacy", "{run}");
    assert_eq!(run.report["dual_era"], false, "{run}");
    assert_eq!(run.tools(), ["add"], "{run}");
    // server/discover gets -32602 (and a burst of validation errors on stderr), and the
    // process stays up: the legacy handshake is completed in it.
    assert!(run.finding("legacy-only").contains("-32602"), "{run}");
    assert!(run.codes().contains(&"stderr-output"), "{run}");
    assert_eq!(purposes(&run), ["probe"], "{run}");
}

/// The security checks against the reference servers, as the conformance suite sees them:
/// server-everything (Streamable HTTP) fails `dns-rebinding-protection`, so mcpulse must flag
/// it; the Python SDK 2.x passes it, so mcpulse must not.
fn security_codes(run: &Run) -> Vec<String> {
    run.report["security"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn everything_streamable_http_fails_dns_rebinding_protection() {
    let server = everything_http("streamableHttp");
    let run = mcpulse(&[&server.url("/mcp")], &[]);
    run.assert_healthy();
    let codes = security_codes(&run);
    assert!(codes.contains(&"origin-not-validated".to_owned()), "{run}");
    assert!(codes.contains(&"host-not-validated".to_owned()), "{run}");
    // The Host check rode the probe's session, whose id the answer repeats: not a second
    // session with a related id.
    assert!(!codes.contains(&"session-id-weak".to_owned()), "{run}");
    assert_eq!(run.report["grade"], "F", "{run}");
    // The evidence names the request that showed it.
    let f = run.report["security"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "origin-not-validated")
        .unwrap();
    assert!(
        f["evidence"][0].as_str().unwrap().contains("evil.example"),
        "{run}"
    );
    // A session opened by a check (the Origin check's handshake; the Host check rides the
    // probe's session) was deleted again.
    let init = run.exchange("initialize");
    let probes_own = header(&init["response"]["headers"], "mcp-session-id");
    let opened = run
        .exchanges()
        .iter()
        .filter(|e| {
            let sid = header(&e["response"]["headers"], "mcp-session-id");
            matches!(e["step"].as_str(), Some("origin-check" | "host-check"))
                && sid.is_some()
                && sid != probes_own
        })
        .count();
    assert_eq!(opened, 1, "{run}");
    let deleted = run
        .exchanges()
        .iter()
        .filter(|e| e["step"] == "session-delete")
        .count();
    assert_eq!(deleted, opened + 1, "{run}");
}

#[test]
fn python_sdk2_passes_dns_rebinding_protection() {
    let server = python_http("python-sdk-2", py2(), "mcp2_server.py");
    let run = mcpulse(&[&server.url("/mcp")], &[]);
    run.assert_healthy();
    let codes = security_codes(&run);
    assert!(!codes.contains(&"origin-not-validated".to_owned()), "{run}");
    assert!(!codes.contains(&"host-not-validated".to_owned()), "{run}");
    let origin = run.exchange("origin-check");
    assert_eq!(origin["response"]["status"], 403, "{run}");
    let host = run.exchange("host-check");
    assert!(host["response"]["status"].as_u64().unwrap() >= 400, "{run}");
    assert_eq!(run.report["grade"], "A", "{run}");
}

/// Over HTTP+SSE the same scenario is played where messages are received: the checks POST a
/// `ping` with the foreign header to the open session's endpoint. server-everything's `sse` mode
/// accepts both (202).
#[test]
fn everything_sse_fails_dns_rebinding_protection() {
    let server = everything_http("sse");
    let run = mcpulse(&["--transport", "sse", &server.url("/sse")], &[]);
    run.assert_healthy();
    let codes = security_codes(&run);
    assert!(codes.contains(&"origin-not-validated".to_owned()), "{run}");
    assert!(codes.contains(&"host-not-validated".to_owned()), "{run}");
    assert_eq!(run.report["grade"], "F", "{run}");
    for step in ["origin-check", "host-check"] {
        let ex = run.exchange(step);
        assert_eq!(ex["request"]["method"], "POST", "{run}");
        assert!(
            ex["request"]["url"]
                .as_str()
                .unwrap()
                .starts_with(&server.url("/message?sessionId=")),
            "{run}"
        );
        assert_eq!(ex["response"]["status"], 202, "{run}");
    }
}

/// The TypeScript SDK with its DNS-rebinding protection on passes, over both of its HTTP
/// transports. Its `SSEServerTransport` checks Host and Origin on POST only (a stream may be
/// opened from anywhere, but no message sent to it): a check that opened the stream with a
/// foreign header would flag a protected server.
#[test]
fn ts_sdk_with_rebinding_protection_passes() {
    for (mode, path) in [("sse", "/sse"), ("streamableHttp", "/mcp")] {
        let server = ts_sdk_http(mode);
        let run = mcpulse(&[&server.url(path)], &[]);
        run.assert_healthy();
        assert_eq!(
            run.report["server"]["name"], "mcpulse-fixture-ts-sdk",
            "{run}"
        );
        let codes = security_codes(&run);
        assert!(
            !codes.contains(&"origin-not-validated".to_owned()),
            "{mode}: {run}"
        );
        assert!(
            !codes.contains(&"host-not-validated".to_owned()),
            "{mode}: {run}"
        );
        assert_eq!(
            run.exchange("origin-check")["response"]["status"],
            403,
            "{run}"
        );
        assert_eq!(
            run.exchange("host-check")["response"]["status"],
            403,
            "{run}"
        );
        assert_eq!(run.report["grade"], "A", "{mode}: {run}");
    }
}

/// The README's probe of the reference server, exactly as written there, on a cold start: an
/// empty npm cache, so `npx` downloads the package first (about 15–20 s here). The verdict must
/// be the true one, `healthy` (exit 0): the download is start-up, not a slow or hung server, and
/// the default timeout for a command leaves room for it.
#[test]
fn readme_probe_command_is_healthy_with_a_cold_npm_cache() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let line = readme
        .lines()
        .find(|l| l.starts_with("cargo run --release -p mcpulse -- probe -- npx"))
        .expect("the README's probe command");
    let args: Vec<&str> = line
        .split_whitespace()
        .skip_while(|w| *w != "probe")
        .collect();
    let cache = scratch("npm-cache");
    std::fs::create_dir_all(&cache).unwrap();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_mcpulse"))
        .args(&args)
        .env("npm_config_cache", &cache)
        .env("npm_config_update_notifier", "false")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&cache);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{} (cold npm cache, {:?}):\n{stdout}{}",
        args.join(" "),
        started.elapsed(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("✔ healthy"), "{stdout}");
    assert!(stdout.contains("startup"), "{stdout}");
}

// ---------------------------------------------------------------------------------------------
// Synthetic calls and health tools (`--call`, `--health-tool`) against real servers
// ---------------------------------------------------------------------------------------------

/// The `calls` of a report, as (tool, status) pairs.
fn calls(run: &Run) -> Vec<(&str, &str)> {
    run.report["calls"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c["tool"].as_str().unwrap_or("?"),
                        c["status"].as_str().unwrap_or("?"),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// How many `tools/call` requests the probe sent.
fn tool_calls_sent(run: &Run) -> usize {
    run.steps().iter().filter(|s| **s == "tools/call").count()
}

#[test]
fn everything_tools_as_synthetic_calls_over_every_transport() {
    let bin = everything();
    let echo = [
        "--call",
        "echo",
        "--args",
        r#"{"message":"mcpulse"}"#,
        "--expect",
        r#"/content/0/text contains "mcpulse""#,
    ];
    let get_sum = [
        "--call",
        "get-sum",
        "--args",
        r#"{"a":2,"b":3}"#,
        "--expect",
        r#"/content/0/text contains "5""#,
        "--critical",
    ];
    let mut args = [echo.as_slice(), get_sum.as_slice()].concat();
    args.extend(["--", "node", &bin, "stdio"]);
    let run = mcpulse(&args, &[]);
    run.assert_healthy();
    assert_eq!(
        calls(&run),
        [("echo", "healthy"), ("get-sum", "healthy")],
        "{run}"
    );
    assert_eq!(run.report["layers"]["dependencies"], "healthy", "{run}");
    assert_eq!(tool_calls_sent(&run), 2, "{run}");

    // Over Streamable HTTP (its legacy session) the same echo and add, beside a tool it does
    // not annotate read-only: refused, never sent.
    let server = everything_http("streamableHttp");
    let url = server.url("/mcp");
    let mut args = [echo.as_slice(), get_sum.as_slice()].concat();
    args.extend(["--call", "toggle-simulated-logging", url.as_str()]);
    let run = mcpulse(&args, &[]);
    assert_eq!(run.status(), "degraded", "{run}");
    assert_eq!(
        calls(&run),
        [
            ("echo", "healthy"),
            ("get-sum", "healthy"),
            ("toggle-simulated-logging", "degraded")
        ],
        "{run}"
    );
    assert!(
        run.finding("tool-call-refused").contains("readOnlyHint"),
        "{run}"
    );
    assert_eq!(tool_calls_sent(&run), 2, "{run}");
    assert_eq!(run.report["layers"]["protocol"], "healthy", "{run}");

    // Over legacy HTTP+SSE: the call's reply comes on the event stream; a long operation is
    // given up at its budget and cancelled with a notification the server accepts.
    let server = everything_http("sse");
    let url = server.url("/sse");
    let mut args = echo.to_vec();
    args.extend([
        "--call",
        "trigger-long-running-operation",
        "--args",
        r#"{"duration":5,"steps":5}"#,
        "--budget",
        "500ms",
        "--allow-side-effects",
        url.as_str(),
    ]);
    let run = mcpulse(&args, &[]);
    assert_eq!(run.report["transport"], "sse", "{run}");
    assert_eq!(
        calls(&run),
        [
            ("echo", "healthy"),
            ("trigger-long-running-operation", "degraded")
        ],
        "{run}"
    );
    assert_eq!(run.report["calls"][1]["cancelled"], true, "{run}");
    assert!(
        run.finding("tool-call-slow").contains("500 ms budget"),
        "{run}"
    );
    assert_eq!(
        run.exchange("notifications/cancelled")["response"]["status"],
        202,
        "{run}"
    );
}

#[test]
fn python_sdk2_output_schema_and_health_tool_over_http_and_stdio() {
    let script = fixture("mcp2_structured.py");
    let call = [
        "--call",
        "stock",
        "--args",
        r#"{"item":"bolt"}"#,
        "--expect",
        "/structuredContent/in_stock >= 1",
    ];
    let server = python_http("mcp2-structured", py2(), "mcp2_structured.py");
    let url = server.url("/mcp");
    let mut http = call.to_vec();
    http.push(url.as_str());
    let mut stdio = call.to_vec();
    stdio.extend(["--", "python3", &script, "stdio"]);
    for run in [
        mcpulse(&http, &[]),
        mcpulse(&stdio, &[("PYTHONPATH", &py2())]),
    ] {
        assert_eq!(run.report["era"], "modern", "{run}");
        // The SDK declares the outputSchema the result was validated against.
        let listed = run.exchange("tools/list")["frames"][0]["raw"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(listed.contains("outputSchema"), "{run}");
        // The stock call passes; the health tool (found by auto) reports its database down.
        assert_eq!(
            calls(&run),
            [("stock", "healthy"), ("health_check", "degraded")],
            "{run}"
        );
        assert_eq!(run.status(), "degraded", "{run}");
        assert_eq!(
            run.finding("health-component-unhealthy"),
            "inventory-db reports fail (health tool health_check)",
            "{run}"
        );
        assert_eq!(run.report["layers"]["protocol"], "healthy", "{run}");
    }
}
