//! Bounded memory against hostile replies, end to end: the real `mcpulse` binary against fake
//! servers whose `tools/list` replies, each within the response cap, are the worst shapes for a
//! JSON DOM (many tiny tools, deep schemas, long strings, many pages, many tiny objects in one
//! schema), with the child's peak RSS read from `wait4` (`ru_maxrss`) and held to the bound
//! documented in docs/probe.md ("Memory"). The figures are printed (`--nocapture`) for
//! docs/benchmarks.md.
//!
//! Unusable JSON (a number out of range, nesting past the limit) is named in the finding.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_testkit::{FakeHttp, Reply, Request, mcp, run, scenario};
use serde_json::Value;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
const MIB: usize = 1 << 20;
/// The default `--max-response-size`.
const CAP: usize = 8 * MIB;

/// The documented bound on a probe's peak RSS (docs/probe.md, "Memory"): 20 × the response
/// cap plus 72 MiB of floors (the judge's budget floor and the process itself, and 8 MiB of
/// `$ref` expansions in the contract).
fn bound(cap: usize) -> usize {
    20 * cap + 72 * MIB
}

/// One run of the binary, with its peak RSS.
struct Measured {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    peak: usize,
    elapsed: Duration,
}

impl Measured {
    fn report(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not a report ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
    fn codes(&self) -> Vec<String> {
        run::codes(&self.report()["findings"])
    }
    fn message(&self, code: &str) -> String {
        run::finding_message(&self.report(), code)
    }
}

/// One measured run at a time: the run is reaped with `wait4(-1)` (below).
static ONE_RUN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `mcpulse` with `args`, killing it after `bound`, and reads its peak RSS from `wait4`.
///
/// A child's `ru_maxrss` starts from the memory of the process that spawned it (the kernel
/// keeps the high-water mark across `exec`), and this test process holds the fake servers'
/// pages: measured directly, every run would read as this process's own peak. So `sh`, a small
/// process, starts mcpulse in the background and exits; this process, a child subreaper, adopts
/// mcpulse and reaps it, with its own usage only. `unsafe` for the libc calls (std offers
/// neither a subreaper nor a child's resource usage).
#[allow(unsafe_code)]
fn measured(args: &[String], bound: Duration) -> Measured {
    use std::os::unix::process::CommandExt;
    let _one = ONE_RUN.lock().unwrap_or_else(|p| p.into_inner());
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(rc, 0, "prctl(PR_SET_CHILD_SUBREAPER)");
    let started = Instant::now();
    let mut sh = std::process::Command::new("/bin/sh")
        .args(["-c", r#""$@" &"#, "sh", BIN])
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let group = libc::pid_t::try_from(sh.id()).unwrap();
    let mut out = sh.stdout.take().unwrap();
    let mut err = sh.stderr.take().unwrap();
    assert!(sh.wait().unwrap().success(), "sh");
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let exited = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let exited = exited.clone();
        std::thread::spawn(move || {
            while !exited.load(Ordering::SeqCst) {
                if started.elapsed() > bound {
                    // The group outlives sh while mcpulse, its member, is not reaped.
                    unsafe { libc::kill(-group, libc::SIGKILL) };
                    return true;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            false
        })
    };
    let mut stdout = String::new();
    let _ = out.read_to_string(&mut stdout);
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(-1, &mut status, 0, &mut usage) };
    exited.store(true, Ordering::SeqCst);
    assert!(pid > 0, "wait4");
    assert!(
        !watchdog.join().unwrap(),
        "mcpulse {args:?} did not finish within {bound:?}"
    );
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Measured {
        code,
        stdout,
        stderr: stderr.join().unwrap(),
        peak: usize::try_from(usage.ru_maxrss).unwrap() * 1024,
        elapsed: started.elapsed(),
    }
}

async fn serve(pages: Vec<String>) -> FakeHttp {
    FakeHttp::start_script(scenario::tools_pages(pages)).await
}

/// Probes `server` (modern, default cap unless `extra` says otherwise) and measures it.
async fn probe(server: &FakeHttp, extra: &[&str]) -> Measured {
    let mut args: Vec<String> = ["probe", "--json", "--era", "modern", "--timeout", "60s"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push(server.url("/mcp"));
    tokio::task::spawn_blocking(move || measured(&args, Duration::from_secs(120)))
        .await
        .unwrap()
}

fn show(shape: &str, m: &Measured) {
    println!(
        "peak RSS {:>6.1} MiB  {:>5.1} s  {shape}  {:?}",
        m.peak as f64 / MIB as f64,
        m.elapsed.as_secs_f64(),
        m.codes()
    );
}

/// Up, with `tools/list` refused for the memory it would take to hold (the judge's 64 MiB
/// floor at the default cap): degraded, and within the bound.
fn assert_over_budget(m: &Measured) {
    assert_eq!(m.code, Some(1), "{}", m.stderr);
    let message = m.message("tools-list-failed");
    assert!(
        message.contains(
            "a result that is not usable JSON: holding it would take more than 67108864 bytes of memory"
        ),
        "{message}"
    );
    assert!(m.peak < bound(CAP), "{} bytes", m.peak);
}

/// Room for the envelope around a page's items.
const PAGE: usize = CAP - 512;

/// 645,000 minimal tools in one page under the cap (the issue's shape: 2.0 GB before): the
/// first 10,000 are kept, the rest counted, and the finding says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tiny_tools_in_one_page() {
    let server = serve(vec![scenario::fill(PAGE, |_| r#"{"name":"t"}"#.to_owned())]).await;
    let m = probe(&server, &[]).await;
    show("many tiny tools, one page", &m);
    assert_eq!(m.code, Some(1), "{}", m.stderr);
    let report = m.report();
    assert!(
        report["tool_count"].as_u64().unwrap() > 600_000,
        "{report:?}"
    );
    assert_eq!(report["tools"].as_array().unwrap().len(), 10_000);
    assert!(
        m.message("list-truncated")
            .contains("only the first 10000 were kept"),
        "{}",
        m.message("list-truncated")
    );
    // No contract from a cut list.
    assert!(report["digests"].is_null());
    assert!(m.peak < bound(CAP), "{} bytes", m.peak);
}

/// Tools whose schemas nest objects to the deepest level that can be read: each level is an
/// object node (~700 bytes) for 5 bytes of text. The judge's budget stops the build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_schemas() {
    let depth = 120;
    let schema = format!("{}{{}}{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
    let server = serve(vec![scenario::fill(PAGE, |i| {
        format!(r#"{{"name":"t{i}","inputSchema":{{"type":"object","properties":{schema}}}}}"#)
    })])
    .await;
    let m = probe(&server, &[]).await;
    show("deep schemas", &m);
    assert_over_budget(&m);
}

/// One tool with a description as long as the cap allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_string() {
    let description = "x".repeat(PAGE - 100);
    let server = serve(vec![format!(
        r#"{{"name":"t","description":"{description}","inputSchema":{{"type":"object"}}}}"#
    )])
    .await;
    let m = probe(&server, &[]).await;
    show("one long string", &m);
    assert_eq!(m.report()["tool_count"], 1);
    assert!(m.peak < bound(CAP), "{} bytes", m.peak);
}

/// Page after page of tiny tools (256 KiB each, cursor after cursor) until the cap across the
/// pages stops the probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_pages() {
    let page = scenario::fill(256 * 1024, |_| r#"{"name":"t"}"#.to_owned());
    let server = serve(vec![page; 60]).await;
    let m = probe(&server, &["--max-pages", "60"]).await;
    show("many pages of tiny tools", &m);
    assert_eq!(m.code, Some(1), "{}", m.stderr);
    assert!(
        m.codes().contains(&"list-truncated".to_owned()),
        "{:?}",
        m.codes()
    );
    assert!(m.peak < bound(CAP), "{} bytes", m.peak);
}

/// One tool whose schema is 654,000 tiny objects (`"p0":{}`): ~100× its text as a DOM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tiny_objects_in_one_schema() {
    let properties = scenario::fill(PAGE - 200, |i| format!(r#""p{i}":{{}}"#));
    let server = serve(vec![format!(
        r#"{{"name":"t","inputSchema":{{"type":"object","properties":{{{properties}}}}}}}"#
    )])
    .await;
    let m = probe(&server, &[]).await;
    show("many tiny objects in one schema", &m);
    assert_over_budget(&m);
}

/// Valid JSON that no client can use says what is wrong with it, where: a number out of range
/// in a schema, and nesting past the limit (100,000 levels). Both were reported as
/// `tools/list failed: HTTP 200` with the transcript saying `no-reply`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_json_is_named() {
    let server = serve(vec![
        r#"{"name":"t","inputSchema":{"type":"object","maximum":1e999999}}"#.to_owned(),
    ])
    .await;
    let m = probe(&server, &[]).await;
    let message = m.message("tools-list-failed");
    assert!(
        message.starts_with(
            "tools/list failed: HTTP 200, a result that is not usable JSON: a number out of range at line 1 column"
        ),
        "{message}"
    );
    let depth = 100_000;
    let server = serve(vec![format!(
        r#"{{"name":"t","inputSchema":{}{}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    )])
    .await;
    let m = probe(&server, &[]).await;
    show("100,000-deep nesting", &m);
    let message = m.message("tools-list-failed");
    assert!(
        message.contains(
            "a result that is not usable JSON: nesting deeper than 127 levels at line 1 column"
        ),
        "{message}"
    );
    assert!(m.peak < bound(CAP), "{} bytes", m.peak);
}

/// A handshake whose result is 8 MiB of tiny objects (in `capabilities`): the probe's own look
/// at it (`Exchange::reply`, bounded at 8× its text) and the judge's both refuse it within the
/// bound, and the verdict says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_handshake() {
    let members = scenario::fill(PAGE - 300, |i| format!(r#""x{i}":{{}}"#));
    let server = FakeHttp::start(move |req: &Request| {
        let id = req.rpc_id().unwrap_or(Value::Null);
        match req.rpc_method().as_deref() {
            Some("server/discover") => Reply::bytes(
                200,
                "application/json",
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"supportedVersions":["{}"],"capabilities":{{"tools":{{}},"experimental":{{{members}}}}}}}}}"#,
                    mcp::MODERN
                ),
            ),
            _ => Reply::json(400, &mcp::error(&id, -32022, "modern only")),
        }
    })
    .await;
    let m = probe(&server, &[]).await;
    show("a handshake result of tiny objects", &m);
    let report = m.report();
    assert_eq!(report["status"], "down", "{report}");
    let message = m.message("handshake-failed");
    assert!(
        message.contains("not usable JSON: holding it would take more than"),
        "{message}"
    );
    assert!(m.peak < bound(CAP), "{} bytes", m.peak);
}

/// A health tool whose text content is a health document of 8 MiB of tiny objects (`{"a":1}`
/// after `{"status":"ok"`, and no `structuredContent`): the judge reads a health document from
/// a text of at most 64 KiB (as a health endpoint's body), so this one is not built (it took
/// 589 MB before) and the tool is said to return no health document.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_tool_text_of_tiny_objects() {
    use mcpulse_testkit::tools::{self, Answer, ScriptedTool};
    // Each item is `{\"a\":1},` (12 bytes once escaped in the reply's JSON string).
    let items = vec![r#"{"a":1}"#; (PAGE - 1024) / 12].join(",");
    let text = format!(r#"{{"status":"ok","x":[{items}]}}"#);
    let health = ScriptedTool {
        tool: serde_json::json!({
            "name": "health_check",
            "inputSchema": { "type": "object" },
            "annotations": { "readOnlyHint": true },
        }),
        answer: Answer::Result(tools::result(&text, None, false)),
    };
    drop(text);
    let server = FakeHttp::start_script(tools::http_server(vec![health])).await;
    let m = probe(&server, &["--health-tool", "health_check"]).await;
    show("a health tool's text of tiny objects", &m);
    assert!(
        m.message("health-tool-invalid")
            .contains("returned no health document"),
        "{:?}",
        m.codes()
    );
    assert!(m.peak < bound(CAP), "{} bytes", m.peak);
}

/// The three lists each answered on an SSE stream of 8 MiB of the smallest events (`data:1`,
/// a million of them) before the reply: each kept event costs its frame besides its byte, so
/// a stream is cut at the cap counting both (each held ~10 × the cap in frames before: 3 lists
/// went past the bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_replies_of_tiny_events() {
    let noise = "data:1\n\n".repeat(PAGE / 8);
    let server = FakeHttp::start(move |req: &Request| {
        let id = req.rpc_id().unwrap_or(Value::Null);
        let list = |key: &str| {
            Reply::bytes(
                200,
                "text/event-stream",
                format!(
                    "{noise}data:{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"resultType\":\"complete\",\"{key}\":[]}}}}\n\n"
                ),
            )
        };
        match req.rpc_method().as_deref() {
            Some("server/discover") => {
                let mut r = mcp::discover_result();
                r["capabilities"] = serde_json::json!({"tools": {}, "prompts": {}, "resources": {}});
                Reply::json(200, &mcp::result(&id, r))
            }
            Some("tools/list") => list("tools"),
            Some("prompts/list") => list("prompts"),
            Some("resources/list") => list("resources"),
            _ => Reply::json(400, &mcp::error(&id, -32022, "modern only")),
        }
    })
    .await;
    let m = probe(&server, &[]).await;
    show(
        "three lists, each on an SSE stream of a million tiny events",
        &m,
    );
    assert!(m.peak < bound(CAP), "{} bytes", m.peak);
}
