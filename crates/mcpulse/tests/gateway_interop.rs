#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The gateway's interop proof (#19, "Tests and proof"), against third-party pieces only:
//!
//! - the official MCP conformance suite (npm `@modelcontextprotocol/conformance` 0.1.16, run
//!   with the Node 22 that `scripts/interop-setup.sh` installs from npm) plays its server
//!   scenarios against server-everything's own Streamable HTTP, then through `mcpulse gateway`
//!   fronting that server (`--upstream URL`) and bridging its stdio (`-- node … stdio`). The
//!   pass lists are compared side by side: whatever passes direct must pass through the gateway;
//! - real clients through the gateway: the Python SDK client (mcp 2.3.0) and the TypeScript SDK
//!   client (1.32.2), each `initialize`, `tools/list`, `tools/call echo`
//!   (tests/fixtures/gateway_client.{py,cjs}), the MCP Inspector CLI's `--method tools/list`,
//!   and `mcpulse probe --json`, which must see server-everything's 13 tools and grade A
//!   (the gateway validates Origin and Host; server-everything alone does not, and gets F).
//!
//! Every harness piece also runs now against the server directly and through supergateway
//! (the npm bridge people use today) standing in for the gateway, so that when a `gateway_*`
//! test fails, it is the gateway that failed, not the harness.
//!
//! Processes: servers and bridges run in their own process groups on loopback ports chosen at
//! run time and are killed when the test ends, pass or fail. Every stdio server a bridge starts
//! carries a tag in its environment (`MCPULSE_INTEROP_TAG`), so that the processes it spawned
//! are found through /proc even once orphaned: after the bridge is stopped (SIGTERM), none may
//! be left, and a failing test kills what is.

#[path = "support/installs.rs"]
mod installs;
#[path = "support/servers.rs"]
mod servers;

use installs::{everything, fixture, installed, node_modules, path_str, py2, scratch};
use mcpulse_testkit::run::{Run, run};
use mcpulse_testkit::stdio::{is_running, kill, still_running_after};
use serde_json::Value;
use servers::{START_WITHIN, Server, everything_http};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
/// The suite's whole server run: about 4 s direct, 30 s through supergateway (a child per
/// session); the bound leaves room for a loaded machine.
const SUITE_WITHIN: Duration = Duration::from_secs(240);
/// A client's whole session (each of its steps is bounded at 20 s by the client itself).
const CLIENT_WITHIN: Duration = Duration::from_secs(60);
/// How long a stopped bridge and the processes it spawned may take to go.
const STOP_WITHIN: Duration = Duration::from_secs(10);
/// What server-everything's `tools/list` holds, and the tool the clients call.
const EVERYTHING_TOOLS: usize = 13;

/// The conformance checks (`scenario/check`) that server-everything 2026.8.31 passes over its
/// own Streamable HTTP with suite 0.1.16: 13 of the 32 checks of the 30 active server
/// scenarios. The others need the suite's own fixture tools, prompts and resources
/// (`test_simple_text`, …), or, for `localhost-host-rebinding-rejected`, a server that
/// validates Host and Origin, which server-everything does not.
const EVERYTHING_PASSES: [&str; 13] = [
    "dns-rebinding-protection/localhost-host-valid-accepted",
    "logging-set-level/logging-set-level",
    "ping/ping",
    "prompts-list/prompts-list",
    "resources-list/resources-list",
    "resources-subscribe/resources-subscribe",
    "resources-unsubscribe/resources-unsubscribe",
    "server-initialize/server-initialize",
    "server-sse-multiple-streams/server-accepts-multiple-post-streams",
    "server-sse-multiple-streams/server-sse-streams-functional",
    "tools-call-error/tools-call-error",
    "tools-call-simple-text/tools-call-simple-text",
    "tools-list/tools-list",
];

/// The check a server passes only when it refuses a foreign Host and Origin.
const REBINDING_REJECTED: &str = "dns-rebinding-protection/localhost-host-rebinding-rejected";

// ---------------------------------------------------------------------------------------------
// The conformance suite
// ---------------------------------------------------------------------------------------------

/// One run of the suite's server scenarios against a URL: every check as `scenario/check`,
/// split by outcome.
struct Conformance {
    label: String,
    passed: BTreeSet<String>,
    /// Every other check, with its status and the suite's reason.
    failed: Vec<(String, String)>,
}

impl Conformance {
    fn all(&self) -> BTreeSet<&str> {
        self.passed
            .iter()
            .map(String::as_str)
            .chain(self.failed.iter().map(|(c, _)| c.as_str()))
            .collect()
    }

    fn passes(&self, check: &str) -> bool {
        self.passed.contains(check)
    }
}

/// Runs `conformance server --url URL -o DIR` (every active server scenario) and reads the
/// results from DIR: the suite writes one folder per scenario, `server-<scenario>-<time>`,
/// holding `checks.json`, an array of `{id, status, errorMessage}` (status `SUCCESS` for a pass).
/// Its exit code is 1 whenever a check fails, so it is not a verdict here; no result at all is.
async fn conformance(label: &str, url: &str) -> Conformance {
    let node = path_str(installed("conformance/node_modules/node/bin/node"));
    let suite = path_str(installed(
        "conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js",
    ));
    let out = scratch("conformance");
    let out_str = path_str(out.clone());
    let ran = run(
        &node,
        &[&suite, "server", "--url", url, "-o", &out_str],
        &[],
        SUITE_WITHIN,
    )
    .await;
    let mut c = Conformance {
        label: label.to_owned(),
        passed: BTreeSet::new(),
        failed: Vec::new(),
    };
    for entry in std::fs::read_dir(&out).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let scenario = scenario_of(&name)
            .unwrap_or_else(|| panic!("unexpected result folder {name} in {out_str}"));
        let text = std::fs::read_to_string(entry.path().join("checks.json"))
            .unwrap_or_else(|e| panic!("{name}/checks.json: {e}"));
        let checks: Value = serde_json::from_str(&text).unwrap();
        for check in checks.as_array().unwrap() {
            let key = format!("{scenario}/{}", check["id"].as_str().unwrap());
            if check["status"] == "SUCCESS" {
                c.passed.insert(key);
            } else {
                let why = format!(
                    "{}: {}",
                    check["status"].as_str().unwrap_or("?"),
                    check["errorMessage"].as_str().unwrap_or("")
                );
                c.failed.push((key, why));
            }
        }
    }
    assert!(
        !c.all().is_empty(),
        "the conformance suite reported nothing against {url}\n{}",
        output(&ran)
    );
    c
}

/// The scenario a result folder is for: `server-<scenario>-<YYYY-MM-DDTHH-MM-SS-mmmZ>`.
fn scenario_of(folder: &str) -> Option<&str> {
    let rest = folder.strip_prefix("server-")?;
    // The timestamp has six dash-separated parts; the scenario may hold dashes too.
    let mut parts = rest.rsplitn(7, '-');
    let millis = parts.next()?;
    let _ = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let year = parts.next()?;
    let scenario = parts.next()?;
    (millis.ends_with('Z') && year.len() == 4).then_some(scenario)
}

/// Both pass lists, side by side, one check a line: the assertion message.
fn side_by_side(direct: &Conformance, through: &Conformance) -> String {
    let mut all = direct.all();
    all.extend(through.all());
    let width = all.iter().map(|c| c.len()).max().unwrap_or(0);
    let mut s = format!("{:width$}  {:>8}  {}\n", "check", "direct", through.label);
    let mark = |c: &Conformance, check: &str| {
        if c.passes(check) {
            "pass"
        } else if c.all().contains(check) {
            "fail"
        } else {
            "-"
        }
    };
    for check in &all {
        let _ = writeln!(
            s,
            "{check:width$}  {:>8}  {}",
            mark(direct, check),
            mark(through, check)
        );
    }
    let _ = writeln!(
        s,
        "passed: direct {}, {} {}",
        direct.passed.len(),
        through.label,
        through.passed.len()
    );
    for (check, why) in &through.failed {
        if direct.passes(check) {
            let _ = writeln!(s, "{} lost {check}: {why}", through.label);
        }
    }
    s
}

/// Whatever passes direct passes through the bridge (more may: the gateway adds Host and
/// Origin validation).
fn assert_passes_what_direct_passes(direct: &Conformance, through: &Conformance) {
    let lost: Vec<&String> = direct
        .passed
        .difference(&through.passed)
        .filter(|check| !optional_info(through, check))
        .collect();
    assert!(
        lost.is_empty(),
        "{} lost {lost:?}\n{}",
        through.label,
        side_by_side(direct, through)
    );
}

/// The one check the suite itself calls optional: `server-sse-streams-functional` passes when
/// one of three concurrent `tools/list` POSTs is answered as an SSE stream, and reports `INFO`
/// ("SSE streams optional") when all three are plain JSON, which the spec allows. server-
/// everything answers with SSE always; through a bridge, a POST becomes a stream only when a
/// server message arrives while it waits (server-everything's `list_changed` after `initialize`
/// lands on whichever POST is waiting, else on the GET stream), so the result depends on timing.
/// `INFO` is accepted for it; a `FAILURE` is not.
fn optional_info(through: &Conformance, check: &str) -> bool {
    check == "server-sse-multiple-streams/server-sse-streams-functional"
        && through
            .failed
            .iter()
            .any(|(c, why)| c == check && why.starts_with("INFO:"))
}

/// The gateway's bar: what passes direct, and the DNS-rebinding check that server-everything
/// fails on its own (the gateway validates Host and Origin in front of any server).
fn assert_gateway_passes(direct: &Conformance, through: &Conformance) {
    assert_passes_what_direct_passes(direct, through);
    assert!(
        through.passes(REBINDING_REJECTED),
        "the gateway must refuse a foreign Host and Origin\n{}",
        side_by_side(direct, through)
    );
}

// ---------------------------------------------------------------------------------------------
// Bridges: the gateway, and supergateway standing in for it
// ---------------------------------------------------------------------------------------------

/// The environment variable that tags the stdio servers a bridge starts.
const TAG_VAR: &str = "MCPULSE_INTEROP_TAG";

/// A fresh tag for one test's stdio servers.
fn new_tag() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "gateway-interop-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// server-everything's stdio, tagged: `env TAG=… node …/mcp-server-everything stdio`.
fn everything_stdio(tag: &str) -> Vec<String> {
    vec![
        "env".into(),
        format!("{TAG_VAR}={tag}"),
        "node".into(),
        everything(),
        "stdio".into(),
    ]
}

/// Every running process whose environment carries this tag, whoever its parent now is.
fn tagged(tag: &str) -> Vec<u32> {
    let needle = format!("{TAG_VAR}={tag}");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) && is_running(pid) {
            out.push(pid);
        }
    }
    out
}

/// kill(2): `pid` is a process this test started, or (negative) the group it leads.
fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) takes no pointers; no memory is touched.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid, sig);
    }
}

/// `mcpulse gateway --listen 127.0.0.1:0 ARGS…` in its own process group, once it has said
/// where it listens: `mcpulse gateway: listening on http://127.0.0.1:PORT/mcp` on stderr.
struct Gateway {
    child: Child,
    url: String,
    /// Its stdout and stderr so far, for failure messages.
    log: Arc<Mutex<String>>,
    /// The tag of the stdio servers it starts (none for an HTTP upstream).
    tag: String,
}

impl Gateway {
    fn start(args: &[String], tag: &str) -> Gateway {
        let mut all: Vec<String> = ["gateway", "--listen", "127.0.0.1:0"]
            .map(String::from)
            .to_vec();
        all.extend_from_slice(args);
        Gateway::start_program(BIN, &all, tag)
    }

    /// `program ARGS…` run as the gateway is (the harness's own test runs stand-ins).
    fn start_program(program: &str, args: &[String], tag: &str) -> Gateway {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, lines) = channel();
        collect(child.stdout.take().unwrap(), &log, None);
        collect(child.stderr.take().unwrap(), &log, Some(tx));
        let mut gateway = Gateway {
            child,
            url: String::new(),
            log,
            tag: tag.to_owned(),
        };
        gateway.url = gateway.wait_for_url(&lines);
        gateway
    }

    fn wait_for_url(&mut self, lines: &Receiver<String>) -> String {
        const SAID: &str = "mcpulse gateway: listening on ";
        let until = Instant::now() + START_WITHIN;
        loop {
            match lines.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    if let Some((_, url)) = line.split_once(SAID) {
                        return url.trim().to_owned();
                    }
                }
                Err(_) => {
                    if let Some(status) = self.child.try_wait().unwrap() {
                        panic!(
                            "mcpulse gateway exited ({status}) before listening:\n{}",
                            self.log()
                        );
                    }
                    assert!(
                        Instant::now() < until,
                        "mcpulse gateway did not say where it listens within {START_WITHIN:?}:\n{}",
                        self.log()
                    );
                }
            }
        }
    }

    fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Stops the gateway as a service manager does (SIGTERM) and returns the processes it
    /// started that are still running after [`STOP_WITHIN`] (killed, so that nothing leaks).
    fn stop(mut self) -> Vec<u32> {
        let before = tagged(&self.tag);
        if let Ok(pid) = i32::try_from(self.child.id()) {
            signal(pid, libc::SIGTERM);
        }
        let until = Instant::now() + STOP_WITHIN;
        while self.child.try_wait().unwrap().is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut left = still_running_after(&before, STOP_WITHIN);
        for p in tagged(&self.tag) {
            if !left.contains(&p) {
                left.push(p);
            }
        }
        kill(&left);
        left
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // The gateway leads its own process group: kill the group.
        if let Ok(pgid) = i32::try_from(self.child.id()) {
            signal(-pgid, libc::SIGKILL);
        }
        let _ = self.child.wait();
        kill(&tagged(&self.tag));
        if std::thread::panicking() {
            eprintln!(
                "--- mcpulse gateway ({}) output ---\n{}",
                self.url,
                self.log()
            );
        }
    }
}

/// Reads a child's stream line by line into `log`, forwarding each line to `tx` if given.
fn collect(
    stream: impl Read + Send + 'static,
    log: &Arc<Mutex<String>>,
    tx: Option<std::sync::mpsc::Sender<String>>,
) {
    let log = Arc::clone(log);
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if let Ok(mut l) = log.lock() {
                l.push_str(&line);
                l.push('\n');
            }
            if let Some(tx) = &tx {
                let _ = tx.send(line);
            }
        }
    });
}

/// supergateway 4.0.0 (stateful: one child per session, as the gateway's stdio upstream)
/// bridging `command` to Streamable HTTP on /mcp: the stand-in that proves the harness.
fn supergateway(command: &[String]) -> Server {
    let bin = path_str(installed("supergateway/node_modules/.bin/supergateway"));
    let stdio = command.join(" ");
    Server::start("supergateway", move |port| {
        let mut c = Command::new("node");
        c.arg(&bin)
            .args(["--stdio", &stdio, "--outputTransport", "streamableHttp"])
            .args(["--stateful", "--port", &port.to_string()]);
        c
    })
}

// ---------------------------------------------------------------------------------------------
// Real clients
// ---------------------------------------------------------------------------------------------

fn output(r: &Run) -> String {
    format!(
        "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        r.code, r.stdout, r.stderr
    )
}

/// tests/fixtures/gateway_client.{py,cjs}: the SDK client's session saw server-everything, its
/// tools, and the echo.
fn assert_client_session(what: &str, r: &Run) {
    let lines: Vec<&str> = r.stdout.lines().collect();
    let ok = r.code == Some(0)
        && lines.first() == Some(&"INIT 2025-11-25 mcp-servers/everything")
        && lines.get(1).is_some_and(|l| {
            l.starts_with(&format!("TOOLS {EVERYTHING_TOOLS} ")) && l.contains(" echo ")
        })
        && lines.get(2) == Some(&"ECHO ok Echo: gateway interop")
        && lines.get(3) == Some(&"DONE");
    assert!(ok, "{what}\n{}", output(r));
}

/// The real clients against `url`: the Python and TypeScript SDK clients, the Inspector CLI,
/// and `mcpulse probe --json`, whose security grade must be `grade`.
async fn assert_real_clients(url: &str, grade: &str) {
    let py = run(
        "python3",
        &[&fixture("gateway_client.py"), url],
        &[("PYTHONPATH", &py2()), ("PYTHONDONTWRITEBYTECODE", "1")],
        CLIENT_WITHIN,
    )
    .await;
    assert_client_session(&format!("Python SDK client (mcp 2.3.0) at {url}"), &py);

    let ts = run(
        "node",
        &[&fixture("gateway_client.cjs"), url],
        &[("NODE_PATH", &node_modules())],
        CLIENT_WITHIN,
    )
    .await;
    assert_client_session(&format!("TypeScript SDK client (1.32.2) at {url}"), &ts);

    // The Inspector writes under HOME unless told otherwise.
    let home = scratch("inspector-home");
    std::fs::create_dir_all(&home).unwrap();
    let home_str = path_str(home.clone());
    let catalog = path_str(home.join("catalog.json"));
    let clients = path_str(home.join("clients.json"));
    let inspector = run(
        &path_str(installed("npm/node_modules/.bin/mcp-inspector")),
        &[
            "--cli",
            url,
            "--protocol-era",
            "auto",
            "--method",
            "tools/list",
            "--format",
            "json",
            "-q",
        ],
        &[
            ("HOME", &home_str),
            ("MCP_CATALOG_PATH", &catalog),
            ("MCP_CLIENT_CONFIG_PATH", &clients),
        ],
        CLIENT_WITHIN,
    )
    .await;
    let listed: Vec<String> = serde_json::from_str::<Value>(&inspector.stdout)
        .ok()
        .and_then(|v| {
            v["result"]["tools"].as_array().map(|a| {
                a.iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
        })
        .unwrap_or_default();
    // server-everything adds `get-roots-list` for a client that declares `roots`, as the
    // Inspector does: 14 tools.
    assert!(
        inspector.code == Some(0)
            && listed.len() == EVERYTHING_TOOLS + 1
            && listed.iter().any(|t| t == "get-roots-list")
            && listed.iter().any(|t| t == "echo"),
        "MCP Inspector CLI (2.12.0) --method tools/list at {url}: {listed:?}\n{}",
        output(&inspector)
    );

    let probe = run(
        BIN,
        &[
            "probe",
            "--json",
            "--timeout",
            "10s",
            "--latency-budget",
            "10s",
            url,
        ],
        &[],
        CLIENT_WITHIN,
    )
    .await;
    let report = probe.json();
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        report["server"]["name"] == "mcp-servers/everything"
            && tools.len() == EVERYTHING_TOOLS
            && tools.contains(&"echo")
            && report["grade"] == grade,
        "mcpulse probe --json {url}: status {}, grade {} (want {grade}), tools {tools:?}, findings {}\n{}",
        report["status"],
        report["grade"],
        report["findings"],
        output(&probe)
    );
}

// ---------------------------------------------------------------------------------------------
// Direct, and supergateway standing in: the harness, proven now
// ---------------------------------------------------------------------------------------------

/// The baseline every bridge is held to: what server-everything passes over its own
/// Streamable HTTP. Pinned, so that a change of the suite or the server shows here first.
#[tokio::test]
async fn conformance_direct_everything_http_pass_list() {
    let server = everything_http("streamableHttp");
    let direct = conformance("direct", &server.url("/mcp")).await;
    let want: BTreeSet<String> = EVERYTHING_PASSES.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(
        direct.passed,
        want,
        "server-everything's pass list moved\n{}",
        side_by_side(&direct, &direct)
    );
    assert_eq!(direct.all().len(), 32, "{}", side_by_side(&direct, &direct));
    assert!(!direct.passes(REBINDING_REJECTED));
}

/// The real clients against server-everything directly: the same assertions as through the
/// gateway, but grade F (it validates neither Origin nor Host).
#[tokio::test]
async fn real_clients_direct_everything_http() {
    let server = everything_http("streamableHttp");
    assert_real_clients(&server.url("/mcp"), "F").await;
}

/// The whole harness through a bridge that exists today: supergateway 4.0.0 bridging
/// server-everything's stdio passes what the server passes direct, and the real clients work
/// through it (grade F: it validates neither Origin nor Host either).
#[tokio::test]
async fn stand_in_supergateway_bridging_everything_stdio() {
    let server = everything_http("streamableHttp");
    let direct = conformance("direct", &server.url("/mcp")).await;
    drop(server);
    let tag = new_tag();
    let bridge = supergateway(&everything_stdio(&tag));
    let through = conformance("supergateway", &bridge.url("/mcp")).await;
    assert_passes_what_direct_passes(&direct, &through);
    assert_real_clients(&bridge.url("/mcp"), "F").await;
    // A session's child is tagged: the bridge did start the server we meant.
    assert!(
        !tagged(&tag).is_empty(),
        "no tagged server-everything under supergateway"
    );
    drop(bridge);
    let left = still_running_after(&tagged(&tag), STOP_WITHIN);
    kill(&left);
}

// ---------------------------------------------------------------------------------------------
// Through mcpulse gateway
// ---------------------------------------------------------------------------------------------

/// (a) The gateway fronting server-everything's Streamable HTTP passes every check the server
/// passes direct, in the same run, and the DNS-rebinding check the server fails on its own.
#[tokio::test]
async fn gateway_fronting_everything_http_passes_what_it_passes_direct() {
    let server = everything_http("streamableHttp");
    let direct = conformance("direct", &server.url("/mcp")).await;
    let gateway = Gateway::start(&["--upstream".into(), server.url("/mcp")], &new_tag());
    let through = conformance("gateway", &gateway.url).await;
    assert_gateway_passes(&direct, &through);
    assert_eq!(gateway.stop(), Vec::<u32>::new());
}

/// (b) The gateway bridging server-everything's stdio passes every check the server passes
/// over its own Streamable HTTP, in the same run; and stopped, it leaves none of the children
/// it started (one a session) behind.
#[tokio::test]
async fn gateway_bridging_everything_stdio_passes_what_it_passes_direct() {
    let server = everything_http("streamableHttp");
    let direct = conformance("direct", &server.url("/mcp")).await;
    drop(server);
    let tag = new_tag();
    let mut args = vec!["--".to_owned()];
    args.extend(everything_stdio(&tag));
    let gateway = Gateway::start(&args, &tag);
    let through = conformance("gateway", &gateway.url).await;
    assert_gateway_passes(&direct, &through);
    let left = gateway.stop();
    assert!(
        left.is_empty(),
        "left running after the gateway stopped: {left:?}"
    );
}

/// Real clients through the gateway fronting server-everything's Streamable HTTP; the probe
/// grades the gateway A.
#[tokio::test]
async fn gateway_real_clients_http_upstream() {
    let server = everything_http("streamableHttp");
    let gateway = Gateway::start(&["--upstream".into(), server.url("/mcp")], &new_tag());
    assert_real_clients(&gateway.url, "A").await;
    assert_eq!(gateway.stop(), Vec::<u32>::new());
}

/// Real clients through the gateway bridging server-everything's stdio; the probe grades the
/// gateway A; nothing is left once it stops.
#[tokio::test]
async fn gateway_real_clients_stdio_upstream() {
    let tag = new_tag();
    let mut args = vec!["--".to_owned()];
    args.extend(everything_stdio(&tag));
    let gateway = Gateway::start(&args, &tag);
    assert_real_clients(&gateway.url, "A").await;
    let left = gateway.stop();
    assert!(
        left.is_empty(),
        "left running after the gateway stopped: {left:?}"
    );
}

/// The harness's own check of `Gateway::stop`: a bridge that leaves the server it started
/// running when it is stopped is caught (and the server killed), one that stops its server is
/// not. The stand-ins are shell scripts that say what the gateway says and start a tagged
/// `sleep` as their "server".
#[test]
fn harness_stop_finds_what_a_bridge_leaves_behind() {
    let said = "echo 'mcpulse gateway: listening on http://127.0.0.1:9/mcp' >&2";
    for (careful, script) in [
        (
            true,
            format!(
                "env {TAG_VAR}=\"$1\" sleep 300 & c=$!; trap 'kill $c; exit 0' TERM; {said}; wait"
            ),
        ),
        (
            false,
            format!("env {TAG_VAR}=\"$1\" sleep 300 & {said}; wait"),
        ),
    ] {
        let tag = new_tag();
        let args = ["-c".to_owned(), script, "stand-in".to_owned(), tag.clone()];
        let bridge = Gateway::start_program("sh", &args, &tag);
        assert_eq!(bridge.url, "http://127.0.0.1:9/mcp");
        let until = Instant::now() + START_WITHIN;
        while tagged(&tag).is_empty() {
            assert!(Instant::now() < until, "the stand-in's server never ran");
            std::thread::sleep(Duration::from_millis(10));
        }
        let left = bridge.stop();
        assert_eq!(left.is_empty(), careful, "careful {careful}: left {left:?}");
        assert!(still_running_after(&left, STOP_WITHIN).is_empty());
        assert!(tagged(&tag).is_empty());
    }
}

#[test]
fn scenario_of_reads_the_suites_folder_names() {
    assert_eq!(
        scenario_of("server-dns-rebinding-protection-2026-12-01T22-13-52-677Z"),
        Some("dns-rebinding-protection")
    );
    assert_eq!(
        scenario_of("server-ping-2026-12-01T22-13-50-479Z"),
        Some("ping")
    );
    assert_eq!(scenario_of("client-ping-2026-12-01T22-13-50-479Z"), None);
    assert_eq!(scenario_of("server-ping"), None);
}
