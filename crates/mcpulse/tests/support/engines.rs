//! Real Prometheus and Alertmanager processes, `mcpulse monitor` and scripted MCP servers on
//! loopback, shared by prometheus.rs and scaleout.rs: processes killed when dropped (and by
//! the kernel when the test thread that started them dies: PR_SET_PDEATHSIG), a small
//! HTTP client, bounded polling ([`until`]), and the yaml blocks of docs/prometheus.md.
#![allow(dead_code)] // each test file uses a part

use mcpulse_testkit::http::Script;
use mcpulse_testkit::{FakeHttp, Reply, Request, TempDir, scenario};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const MCPULSE: &str = env!("CARGO_BIN_EXE_mcpulse");
pub const PROMETHEUS: &str = "/usr/bin/prometheus";
pub const ALERTMANAGER: &str = "/usr/bin/prometheus-alertmanager";
/// The longest any one condition is waited for. Each normally takes 1–5 s.
pub const WAIT: Duration = Duration::from_secs(40);
/// The monitor's API token (the documented scrape configs send one).
pub const TOKEN: &str = "test-token-5b8e1f";

// ---- processes ------------------------------------------------------------------------------

/// A child process, killed (and reaped) when dropped; its stdout and stderr go to a log file.
pub struct Proc {
    pub name: &'static str,
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(name: &'static str, program: &str, args: &[String], dir: &TempDir) -> Proc {
        let log = dir.join(&format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(dir.path())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // Drop kills the child, but not when the test binary itself is SIGKILLed (a CI
        // timeout): then the kernel sends SIGKILL when the thread that spawned it (the test's,
        // which outlives its Procs) goes. The parent may already be gone by the time prctl
        // runs: checked with getppid against the pid taken before the fork.
        let parent = std::process::id();
        // SAFETY: prctl(2), getppid(2) and _exit(2) in the forked child before exec: no
        // allocation, no lock; only this child's own death signal is set.
        #[allow(unsafe_code)]
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() as u32 != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name} ({program}): {e}"));
        Proc { name, child, log }
    }

    /// The last lines of its log.
    pub fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(40);
        format!(
            "--- {} log (last {} lines) ---\n{}\n",
            self.name,
            lines.len() - from,
            lines[from..].join("\n")
        )
    }

    /// Fails the test if the process has exited (saying so when a port was taken after all:
    /// see [`free_port`]).
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            let tail = self.tail();
            let taken = if tail.contains("address already in use") {
                "; a port handed to it was taken by another process in between (free_port)"
            } else {
                ""
            };
            panic!("{} exited ({status}){taken}:\n{tail}", self.name);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Fails, naming the install script, when a packaged binary is missing.
pub fn require(binary: &str, package: &str) {
    if !Path::new(binary).exists() {
        panic!(
            "{binary} is missing: install the Debian package {package} with scripts/ci-packages.sh \
             (as root; .ci/run and scripts/test.sh run it). These tests run a real Prometheus and \
             Alertmanager and are not skipped."
        );
    }
}

/// A loopback port for a child process to bind, free for both TCP and UDP (Alertmanager's
/// gossip uses both) a moment ago.
///
/// It is taken below Linux's ephemeral range (32768–60999 by default): port 0 binds and
/// outgoing connections (Prometheus's scrapes, the tests' own requests) draw from that range,
/// so they can never take the port between this check and the child's bind, which they could
/// when it came from a port-0 bind. Within one test binary no port is handed out twice; a
/// port another program binds in between still makes the child fail, and
/// [`Proc::assert_running`] then says so.
pub fn free_port() -> u16 {
    use std::sync::Mutex;
    static HANDED: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    const FROM: u16 = 20_000;
    const SPAN: u16 = 12_000; // 20000..32000, below the ephemeral range
    let mut handed = HANDED.lock().unwrap();
    // A different start per process (the pid), so parallel test binaries rarely probe the
    // same ports.
    let start = std::process::id() % u32::from(SPAN);
    for i in 0..u32::from(SPAN) {
        let port = FROM + ((start + i * 7) % u32::from(SPAN)) as u16;
        if handed.contains(&port) {
            continue;
        }
        let tcp = std::net::TcpListener::bind(("127.0.0.1", port));
        let udp = std::net::UdpSocket::bind(("127.0.0.1", port));
        if tcp.is_ok() && udp.is_ok() {
            handed.push(port);
            return port;
        }
    }
    panic!("no free loopback port in {FROM}..{}", FROM + SPAN)
}

// ---- a small HTTP client --------------------------------------------------------------------

/// One HTTP/1.0 request on a fresh connection (so the answer is never chunked and ends at EOF).
/// `None` when the connection or the exchange fails (the server is not up yet).
pub async fn http(
    method: &str,
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Option<(u16, String)> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        let mut req = format!("{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n");
        for (k, v) in headers {
            let _ = write!(req, "{k}: {v}\r\n");
        }
        if let Some(b) = body {
            let _ = write!(req, "Content-Length: {}\r\n", b.len());
        }
        req.push_str("\r\n");
        req.push_str(body.unwrap_or(""));
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_owned()))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .ok()
        .flatten()
}

pub async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    http("GET", port, path, &[], None).await
}

/// Percent-encodes a query parameter value.
pub fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Polls `check` every 250 ms until it returns `Ok`, for at most [`WAIT`]. On timeout, fails
/// with `what`, the last `Err` it returned, and the logs of `procs`.
pub async fn until<T, F, Fut>(what: &str, procs: &mut [&mut Proc], mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        let last = match check().await {
            Ok(v) => return v,
            Err(e) => e,
        };
        for p in procs.iter_mut() {
            p.assert_running();
        }
        if Instant::now() >= deadline {
            let logs: String = procs.iter().map(|p| p.tail()).collect();
            panic!("timed out after {WAIT:?} waiting for {what}\nlast seen: {last}\n{logs}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits for `GET path` to answer 200.
pub async fn ready(port: u16, path: &str, proc_: &mut Proc) {
    let what = format!("{} to answer 200 on {path}", proc_.name);
    until(&what, &mut [proc_], || async {
        match get(port, path).await {
            Some((200, _)) => Ok(()),
            Some((s, b)) => Err(format!("HTTP {s}: {b}")),
            None => Err("no answer".into()),
        }
    })
    .await
}

// ---- fixtures -------------------------------------------------------------------------------

/// A 2026-07-28 MCP server with one tool, `tool_0`, that answers 503 while `up` is false.
/// (A fresh script per request keeps its contract the same at every check: the scenario's own
/// counter would list another tool each time, which is drift.)
pub async fn mcp_server(up: Arc<AtomicBool>) -> FakeHttp {
    let script: Script = Arc::new(move |req: &Request| {
        if up.load(Ordering::SeqCst) {
            (scenario::modern(false, vec![None]))(req)
        } else {
            Reply::bytes(503, "text/plain", "maintenance")
        }
    });
    FakeHttp::start_script(script).await
}

/// Starts `mcpulse monitor` with `config` (TOML, the `[server]` token is added) on a free port,
/// and waits for it to answer.
pub async fn monitor(name: &'static str, dir: &TempDir, config: &str) -> (Proc, u16) {
    let path = dir.join("mcpulse.toml");
    let text = format!(
        "[server]\ntoken = \"{TOKEN}\"\n\n[storage]\npath = \"{}\"\n\n{config}",
        dir.join("mcpulse.db").display()
    );
    std::fs::write(&path, text).unwrap();
    let port = free_port();
    let args = [
        "monitor".to_owned(),
        "--config".to_owned(),
        path.display().to_string(),
        "--listen".to_owned(),
        format!("127.0.0.1:{port}"),
        "--log-level".to_owned(),
        "debug".to_owned(),
    ];
    let mut p = Proc::spawn(name, MCPULSE, &args, dir);
    ready(port, "/livez", &mut p).await;
    (p, port)
}

/// `Ok` once the monitor on `port` reports the target `name` healthy (for [`until`]).
pub async fn healthy(port: u16, name: &str) -> Result<(), String> {
    let auth = format!("Bearer {TOKEN}");
    let path = format!("/api/v1/targets/{name}");
    let (status, body) = http("GET", port, &path, &[("Authorization", &auth)], None)
        .await
        .ok_or("no answer")?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if status == 200 && v["status"] == "healthy" {
        Ok(())
    } else {
        Err(format!("HTTP {status}: {body}"))
    }
}

// ---- docs/prometheus.md ---------------------------------------------------------------------

pub fn prometheus_doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/prometheus.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// The ```yaml blocks of the doc, in order.
pub fn yaml_blocks(doc: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```yaml") => current = Some(String::new()),
            (Some(b), "```") => {
                blocks.push(std::mem::take(b));
                current = None;
            }
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// The one yaml block of the doc that contains `marker`.
pub fn doc_block(doc: &str, marker: &str) -> String {
    let found: Vec<String> = yaml_blocks(doc)
        .into_iter()
        .filter(|b| b.contains(marker))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "docs/prometheus.md should have exactly one yaml block with {marker:?}"
    );
    found.into_iter().next().unwrap()
}

/// `text` with `from` replaced by `to`, failing if the documented text is not there (the doc
/// changed: update the test with it).
pub fn swap(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "docs/prometheus.md no longer has {from:?} in:\n{text}"
    );
    text.replacen(from, to, 1)
}

/// An instant query's result vector.
pub async fn query(port: u16, q: &str) -> Result<Vec<Value>, String> {
    let path = format!("/api/v1/query?query={}", encode(q));
    let (status, body) = get(port, &path)
        .await
        .ok_or("Prometheus did not answer the query")?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    if status != 200 || v["status"] != "success" {
        return Err(format!("query {q}: HTTP {status}: {body}"));
    }
    Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// `{label value: sample value}` of a query's result.
pub fn by_label(result: &[Value], label: &str) -> std::collections::BTreeMap<String, String> {
    result
        .iter()
        .map(|s| {
            (
                s["metric"][label].as_str().unwrap_or("").to_owned(),
                s["value"][1].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// The webhook notifications Alertmanager sent, as JSON.
pub fn notifications(hook: &FakeHttp) -> Vec<Value> {
    hook.requests().iter().filter_map(Request::json).collect()
}
