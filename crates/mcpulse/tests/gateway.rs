//! `mcpulse gateway`, the real binary: the address line on stderr (port 0), `mcpulse probe`
//! through the gateway bridging the demo stdio server, SIGTERM leaving nothing behind, faults
//! of the upstream child under a real client session (killed, frozen) with what `/livez` and
//! `/readyz` say meanwhile, the errors for bad flags and files, and `mcpulse monitor` watching
//! a gateway whose dependency check fails and recovers (one component alert, resolved).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_testkit::stdio::{Act, StdioScript, TempDir, kill, read_pids, still_running_after};
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
const BOUND: Duration = Duration::from_secs(20);

/// A running gateway and the port it printed.
struct Gateway {
    process: tokio::process::Child,
    port: u16,
}

impl Gateway {
    async fn spawn(args: &[&str]) -> Gateway {
        Gateway::spawn_at("127.0.0.1:0", args).await
    }

    /// [`Gateway::spawn`] listening on `listen`.
    async fn spawn_at(listen: &str, args: &[&str]) -> Gateway {
        let mut process = tokio::process::Command::new(BIN)
            .arg("gateway")
            .args(["--listen", listen, "--log-level", "warn"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stderr = process.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let port = tokio::time::timeout(BOUND, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(rest) = line.strip_prefix("mcpulse gateway: listening on http://") {
                    let addr = rest.strip_suffix("/mcp").unwrap();
                    return addr.rsplit_once(':').unwrap().1.parse::<u16>().unwrap();
                }
            }
            panic!("the gateway exited without its address line");
        })
        .await
        .expect("the address line in time");
        // Keep draining stderr so that the gateway never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Gateway { process, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// SIGTERM, then the exit code (bounded).
    async fn terminate(mut self) -> Option<i32> {
        signal(self.process.id().unwrap(), libc::SIGTERM);
        let status = tokio::time::timeout(BOUND, self.process.wait())
            .await
            .expect("exited in time")
            .unwrap();
        status.code()
    }
}

#[tokio::test]
async fn probe_through_the_gateway_sees_the_demo_servers_tools_and_grade_a() {
    probe_through_the_gateway(&[]).await;
}

/// The same on a pool of threads (`--threads 2`) instead of the default single thread.
#[tokio::test]
async fn the_same_on_two_threads() {
    probe_through_the_gateway(&["--threads", "2"]).await;
}

async fn probe_through_the_gateway(extra: &[&str]) {
    let mut args = extra.to_vec();
    args.extend(["--", BIN, "demo-server", "stdio"]);
    let gw = Gateway::spawn(&args).await;
    let out = tokio::time::timeout(
        BOUND,
        tokio::process::Command::new(BIN)
            .args(["probe", "--json", &gw.url()])
            .output(),
    )
    .await
    .expect("the probe ended in time")
    .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(report["status"], "healthy", "{report}");
    assert_eq!(
        report["grade"], "A",
        "Origin and Host validation on: {report}"
    );
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["echo", "add"]);
    assert_eq!(gw.terminate().await, Some(0));
}

#[tokio::test]
async fn sigterm_stops_every_child_and_grandchild_then_exits_zero() {
    let dir = TempDir::new("gw-bin-term");
    let pids = dir.join("pids");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(pids.clone()))
        .at_start(Act::SpawnGrandchild(pids.clone()))
        .on(
            "server/discover",
            vec![Act::Error(-32601, "Method not found".into())],
        )
        .write(&dir, "server.sh");
    let gw = Gateway::spawn(&["--", "sh", script.to_str().unwrap()]).await;
    // Two probes: each a stateless server/discover (the pool's child) and a legacy session
    // (a child of its own), each child with a grandchild.
    for _ in 0..2 {
        let out = tokio::process::Command::new(BIN)
            .args(["probe", "--json", &gw.url()])
            .output()
            .await
            .unwrap();
        assert!(!out.stdout.is_empty());
    }
    let until = std::time::Instant::now() + BOUND;
    while read_pids(&pids).len() < 4 && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all = read_pids(&pids);
    assert!(all.len() >= 4, "{all:?}");
    let at = std::time::Instant::now();
    assert_eq!(gw.terminate().await, Some(0));
    assert!(at.elapsed() < Duration::from_secs(5), "{:?}", at.elapsed());
    let left = still_running_after(&all, Duration::from_secs(2));
    kill(&left);
    assert!(left.is_empty(), "left running: {left:?}");
}

#[tokio::test]
async fn bad_flags_and_files_are_named() {
    let run = |args: Vec<String>| async move {
        let out = tokio::process::Command::new(BIN)
            .arg("gateway")
            .args(args)
            .output()
            .await
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(vec![
        "--session-idle-timeout".into(),
        "soon".into(),
        "--".into(),
        "x".into(),
    ])
    .await;
    assert_eq!(code, Some(3));
    assert!(err.contains("--session-idle-timeout: "), "{err}");
    let (code, err) = run(vec!["--listen".into(), "127.0.0.1:0".into()]).await;
    assert_eq!(code, Some(3));
    assert!(err.contains("no upstream"), "{err}");
    let dir = TempDir::new("gw-bin-config");
    let file = dir.join("gateway.toml");
    std::fs::write(&file, "max_sessions = 0\n[upstream]\ncommand = [\"x\"]\n").unwrap();
    let (code, err) = run(vec!["--config".into(), file.to_str().unwrap().into()]).await;
    assert_eq!(code, Some(3));
    assert!(err.contains("gateway.toml:1:16: max_sessions: "), "{err}");
}

/// An HTTP/1.1 exchange on a connection of its own (`Connection: close`): (status, the
/// `Mcp-Session-Id` header, body). The gateway's JSON replies carry a Content-Length.
async fn exchange(
    port: u16,
    method: &str,
    path: &str,
    session: Option<&str>,
    body: &str,
) -> (u16, Option<String>, String) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(sid) = session {
        req.push_str(&format!("Mcp-Session-Id: {sid}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(BOUND, s.read_to_end(&mut buf))
        .await
        .expect("an answer in time")
        .unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let sid = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("mcp-session-id")
            .then(|| v.trim().to_owned())
    });
    (status, sid, body.to_owned())
}

/// A JSON-RPC request through the session: the reply.
async fn call(port: u16, sid: &str, id: i64, method: &str, params: Value) -> Value {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let (status, _, text) = exchange(port, "POST", "/mcp", Some(sid), &body.to_string()).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Polls a health endpoint until it answers `want` (bounded); returns the body.
async fn health_is(port: u16, path: &str, want: u16) -> String {
    let until = std::time::Instant::now() + BOUND;
    loop {
        let (status, _, body) = exchange(port, "GET", path, None, "").await;
        if status == want {
            return body;
        }
        assert!(
            std::time::Instant::now() < until,
            "{path} is {status}, not {want}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `file` lists `n` pids; returns them in the order they started.
async fn started(file: &std::path::Path, n: usize) -> Vec<u32> {
    let until = std::time::Instant::now() + BOUND;
    loop {
        let p = read_pids(file);
        if p.len() >= n || std::time::Instant::now() > until {
            assert_eq!(p.len(), n, "{p:?}");
            return p;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn signal(pid: u32, sig: i32) {
    let pid = i32::try_from(pid).unwrap();
    // SAFETY: kill(2) takes no pointers; `pid` is a process this test started (a gateway,
    // not reaped yet) or a server child it saw start.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0);
}

#[tokio::test]
async fn a_killed_or_frozen_child_answers_the_request_in_flight_and_the_next_one_works() {
    // A client's session; a request the server never answers is in flight when its child is
    // killed (SIGKILL), then when the restarted child is frozen (SIGSTOP: the heartbeat finds
    // it). Each time the client gets an error for that request, and the next request works.
    let dir = TempDir::new("gw-bin-faults");
    let pids = dir.join("pids");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(pids.clone()))
        // The heartbeat (every 300 ms here) is answered: only a fault restarts a child.
        .on("ping", vec![Act::Result(serde_json::json!({}))])
        .on_tool(
            "echo",
            vec![Act::Result(
                serde_json::json!({"content": [{"type": "text", "text": "ok"}]}),
            )],
        )
        .write(&dir, "server.sh");
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "readiness_interval = \"1s\"\nreadiness_timeout = \"500ms\"\n[upstream]\ncommand = [\"sh\", {:?}]\nheartbeat_interval = \"300ms\"\nheartbeat_timeout = \"200ms\"\nfailures = 2\nbackoff_initial = \"100ms\"\nstop_grace = \"300ms\"\n",
            script.to_str().unwrap()
        ),
    )
    .unwrap();
    let gw = Gateway::spawn(&["--config", config.to_str().unwrap()]).await;
    let port = gw.port;
    // Ready once the readiness session's child (the first, and only, child so far) answered.
    health_is(port, "/readyz", 200).await;
    let readiness = started(&pids, 1).await[0];

    let sid = open_session(port).await;
    let session_child = started(&pids, 2).await[1];

    for (n, (sig, what)) in [(libc::SIGKILL, "killed"), (libc::SIGSTOP, "frozen")]
        .into_iter()
        .enumerate()
    {
        let id = 10 * (n as i64 + 1);
        let child = started(&pids, 2 + n).await[1 + n];
        let in_flight = {
            let sid = sid.clone();
            tokio::spawn(async move {
                call(
                    port,
                    &sid,
                    id,
                    "tools/call",
                    serde_json::json!({"name": "never", "arguments": {}}),
                )
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        signal(child, sig);
        let reply = tokio::time::timeout(BOUND, in_flight)
            .await
            .unwrap_or_else(|_| panic!("no answer for the request in flight ({what})"))
            .unwrap();
        assert_eq!(reply["id"], id, "{what}: {reply}");
        assert_eq!(reply["error"]["code"], -32080, "{what}: {reply}");
        let next = call(
            port,
            &sid,
            id + 1,
            "tools/call",
            serde_json::json!({"name": "echo", "arguments": {}}),
        )
        .await;
        assert_eq!(
            next["result"]["content"][0]["text"], "ok",
            "{what}: the restarted child answers: {next}"
        );
        // The readiness session's child runs on: the upstream is up, and ready.
        assert_eq!(exchange(port, "GET", "/livez", None, "").await.0, 200);
        health_is(port, "/readyz", 200).await;
    }
    let all = started(&pids, 4).await;
    assert_eq!(all[0], readiness);
    assert_eq!(all[1], session_child);
    assert_eq!(gw.terminate().await, Some(0));
    let left = still_running_after(&all, Duration::from_secs(2));
    kill(&left);
    assert!(left.is_empty(), "left running: {left:?}");
}

/// Opens a legacy session through the gateway on `port`: the session id.
async fn open_session(port: u16) -> String {
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "faults", "version": "1"}}});
    let (status, sid, body) = exchange(port, "POST", "/mcp", None, &init.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let sid = sid.expect("a session id");
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let (status, _, body) = exchange(port, "POST", "/mcp", Some(&sid), note).await;
    assert!(status == 202 || status == 200, "{status} {body}");
    sid
}

#[tokio::test]
async fn an_http_upstream_down_and_back_gets_fast_errors_then_readiness_again() {
    // The upstream: a real Streamable HTTP MCP server (another `mcpulse gateway`, bridging the
    // demo server), stopped and started again on the same port.
    let upstream = Gateway::spawn(&["--", BIN, "demo-server", "stdio"]).await;
    let up_port = upstream.port;
    let dir = TempDir::new("gw-bin-http-faults");
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "readiness_interval = \"1s\"\nreadiness_timeout = \"800ms\"\n[upstream]\nurl = \"http://127.0.0.1:{up_port}/mcp\"\n"
        ),
    )
    .unwrap();
    let gw = Gateway::spawn(&["--config", config.to_str().unwrap()]).await;
    let port = gw.port;
    health_is(port, "/readyz", 200).await;
    let sid = open_session(port).await;
    let listed = call(port, &sid, 2, "tools/list", serde_json::json!({})).await;
    assert_eq!(listed["result"]["tools"][0]["name"], "echo", "{listed}");

    // Down: the client gets a JSON-RPC error at once, never a hang; not ready; still alive
    // (an HTTP upstream is another service: restarting the gateway would not mend it).
    assert_eq!(upstream.terminate().await, Some(0));
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
    let at = std::time::Instant::now();
    let (status, _, text) = exchange(port, "POST", "/mcp", Some(&sid), &body.to_string()).await;
    assert!(
        at.elapsed() < Duration::from_secs(2),
        "answered in {:?}",
        at.elapsed()
    );
    assert!(status == 502 || status == 503, "{status} {text}");
    let err: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(err["id"], 3, "{err}");
    assert!(err["error"]["code"].is_i64(), "{err}");
    let unready = health_is(port, "/readyz", 503).await;
    assert!(unready.contains("\"status\":\"fail\""), "{unready}");
    assert_eq!(exchange(port, "GET", "/livez", None, "").await.0, 200);

    // Back on the same port: ready again within a few backoff delays, and a client works
    // (the upstream's sessions died with it: a new one is opened).
    let upstream = Gateway::spawn_at(
        &format!("127.0.0.1:{up_port}"),
        &["--", BIN, "demo-server", "stdio"],
    )
    .await;
    health_is(port, "/readyz", 200).await;
    let sid = open_session(port).await;
    let listed = call(port, &sid, 4, "tools/list", serde_json::json!({})).await;
    assert_eq!(listed["result"]["tools"][0]["name"], "echo", "{listed}");
    assert_eq!(gw.terminate().await, Some(0));
    assert_eq!(upstream.terminate().await, Some(0));
}

/// A SIGKILLed gateway (no chance to stop its children) leaves nothing behind: its watchdog
/// kills the readiness child and its grandchildren, the one in the child's group that ignores
/// SIGTERM and the one that called `setsid` (the parent-death signal reaches the child alone).
#[tokio::test]
async fn a_sigkilled_gateway_leaves_no_child_or_grandchild_behind() {
    let dir = TempDir::new("gw-bin-kill");
    let script = StdioScript::legacy()
        .at_start(Act::IgnoreSigterm)
        .at_start(Act::RecordPid(dir.join("pids")))
        .at_start(Act::SpawnGrandchild(dir.join("grand")))
        .at_start(Act::SpawnSessionLeader(dir.join("leader")))
        .write(&dir, "server.sh");
    let mut gw = Gateway::spawn(&["--", "sh", script.to_str().unwrap()]).await;
    // The readiness child starts at once; its grandchildren with it.
    let mut ours = started(&dir.join("pids"), 1).await;
    ours.extend(started(&dir.join("grand"), 1).await);
    ours.extend(started(&dir.join("leader"), 1).await);
    gw.process.start_kill().unwrap();
    gw.process.wait().await.unwrap();
    let left = still_running_after(&ours, Duration::from_secs(5));
    kill(&left);
    assert!(
        left.is_empty(),
        "left by the SIGKILLed gateway: {left:?} (child, grandchild, setsid one: {ours:?})"
    );
}

// ---- `mcpulse monitor` watching a gateway (issue #19) ----------------------------------------

/// A TCP dependency the test takes down and brings back on the same port: up, it accepts and
/// closes each connection (all a `tcp` check asks); down, the listener is dropped and the port
/// refuses connections.
struct Dependency {
    /// Held while the dependency is down too: no other test is handed the port meanwhile.
    port: mcpulse_testkit::port::KeptPort,
    accept: Option<tokio::task::JoinHandle<()>>,
}

impl Dependency {
    async fn start() -> Dependency {
        let port = mcpulse_testkit::port::KeptPort::new();
        let listener = port.listen();
        Dependency {
            port,
            accept: Some(tokio::spawn(Dependency::serve(listener))),
        }
    }

    async fn serve(listener: tokio::net::TcpListener) {
        while let Ok((conn, _)) = listener.accept().await {
            drop(conn);
        }
    }

    async fn stop(&mut self) {
        if let Some(task) = self.accept.take() {
            task.abort();
            let _ = task.await; // the listener is dropped with the task
        }
    }

    /// Listens on the same port again.
    async fn restore(&mut self) {
        let listener = self.port.listen();
        self.accept = Some(tokio::spawn(Dependency::serve(listener)));
    }
}

impl Drop for Dependency {
    fn drop(&mut self) {
        if let Some(task) = self.accept.take() {
            task.abort();
        }
    }
}

/// `mcpulse monitor` as a child, its API on a loopback port found at run time, its log in a
/// file (printed when the test fails); killed and reaped on drop.
struct Monitor {
    child: std::process::Child,
    api: u16,
    log: std::path::PathBuf,
}

impl Monitor {
    async fn start(dir: &TempDir, config: &std::path::Path) -> Monitor {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = dir.join("monitor.log");
        let child = std::process::Command::new(BIN)
            .arg("monitor")
            .arg("--config")
            .arg(config)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--log-level", "debug"])
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut m = Monitor {
            child,
            api: port,
            log,
        };
        let until = std::time::Instant::now() + BOUND;
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if let Ok(Some(status)) = m.child.try_wait() {
                panic!("the monitor exited ({status}) at start:\n{}", m.log());
            }
            assert!(std::time::Instant::now() < until, "no API:\n{}", m.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        m
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls the target's view (`/api/v1/targets/gw`) until `pred` holds; returns it.
    async fn wait(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let until = std::time::Instant::now() + BOUND;
        loop {
            let (status, _, body) = exchange(self.api, "GET", "/api/v1/targets/gw", None, "").await;
            let view: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            if status == 200 && pred(&view) {
                return view;
            }
            assert!(
                std::time::Instant::now() < until,
                "gw not {what} within {BOUND:?}: {view}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- monitor log ---\n{}", self.log());
        }
    }
}

/// Issue #19: `mcpulse monitor` watching a gateway that bridges the demo stdio server, with a
/// non-critical `tcp` dependency check on a port the test controls, the target's `health_url`
/// the gateway's `/readyz`. The dependency up: the target is healthy. Down: the gateway's
/// `/readyz` warns, the monitor's verdict is degraded with a finding that names the check, and
/// one component alert (`orders-db`) reaches the webhook, not the target's own (one alert per
/// outage). Back on the same port: healthy again, the component's alert resolved, and nothing
/// else was ever sent: exactly one trigger and one resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_watching_a_gateway_sees_a_dependency_down_as_degraded_and_pages_it_once() {
    watch_a_gateway_lose_a_dependency(false).await;
}

/// The same with `critical = true`: the gateway's `/readyz` is 503 while the dependency is
/// down, so the monitor's verdict is down, and the outage is still paged once, as the
/// component's `down`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_watching_a_gateway_sees_a_critical_dependency_down_as_down_and_pages_it_once() {
    watch_a_gateway_lose_a_dependency(true).await;
}

async fn watch_a_gateway_lose_a_dependency(critical: bool) {
    // The gateway's `/readyz` keys a check `NAME:responseTime` (draft-inadarei's
    // `component:measurement`); the monitor names a component by that key.
    const COMPONENT: &str = "orders-db:responseTime";
    let (verdict, level, readyz) = if critical {
        ("down", "fail", 503)
    } else {
        ("degraded", "warn", 200)
    };
    let dir = TempDir::new("gw-monitor");
    let mut dep = Dependency::start().await;
    let gw_config = dir.join("gateway.toml");
    let pids = dir.join("pids");
    std::fs::write(
        &gw_config,
        format!(
            // Each child records its pid (the shell execs the demo server in its place).
            "[upstream]\ncommand = [\"sh\", \"-c\", {script:?}, {BIN:?}]\n\n\
             [[checks]]\nname = \"orders-db\"\nkind = \"tcp\"\ntarget = \"127.0.0.1:{port}\"\n\
             critical = {critical}\ninterval = \"1s\"\ntimeout = \"500ms\"\n\
             failure_threshold = 1\nsuccess_threshold = 1\n",
            // `$$` is the config's escape for `$`.
            script = format!(
                "echo $$$$ >> '{}'; exec \"$0\" demo-server stdio",
                pids.display()
            ),
            port = dep.port.port()
        ),
    )
    .unwrap();
    let gw = Gateway::spawn(&["--config", gw_config.to_str().unwrap()]).await;

    let deliveries: std::sync::Arc<std::sync::Mutex<Vec<Value>>> = Default::default();
    let log = deliveries.clone();
    let hook = mcpulse_testkit::FakeHttp::start(move |req| {
        log.lock().unwrap().push(req.json().unwrap_or(Value::Null));
        mcpulse_testkit::Reply::status(200)
    })
    .await;
    let config = dir.join("monitor.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\npath = \"mcpulse.db\"\n\n\
             [defaults]\ninterval = \"1500ms\"\ntimeout = \"1s\"\nfailure_threshold = 2\n\
             success_threshold = 2\nsecurity = false\n\n\
             [[targets]]\nname = \"gw\"\nurl = \"{}\"\nhealth_url = \"http://127.0.0.1:{}/readyz\"\n\n\
             [[alerts]]\nkind = \"webhook\"\nurl = \"{}\"\n",
            gw.url(),
            gw.port,
            hook.url("/hook")
        ),
    )
    .unwrap();
    let m = Monitor::start(&dir, &config).await;
    let about = |d: &Value| d["labels"]["component"] == COMPONENT;
    let component = |v: &Value, status: &str| {
        v["components"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["name"] == COMPONENT && c["status"] == status)
        })
    };

    // Up: healthy, the dependency a healthy component.
    m.wait("healthy with the dependency", |v| {
        v["status"] == "healthy" && component(v, "healthy")
    })
    .await;

    // Down: the gateway's readiness says so, the monitor's verdict follows with a finding
    // naming the dependency, and one page comes: the component's.
    dep.stop().await;
    let view = m
        .wait(verdict, |v| v["status"] == verdict && component(v, verdict))
        .await;
    let findings = view["last"]["findings"].as_array().unwrap();
    assert!(
        findings
            .iter()
            .any(|f| f["code"] == "health-component-unhealthy"
                && f["message"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("{COMPONENT} reports {level}"))),
        "{view}"
    );
    let (status, _, body) = exchange(gw.port, "GET", "/readyz", None, "").await;
    assert_eq!(status, readyz, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["checks"][COMPONENT][0]["status"], level, "{doc}");
    let until = std::time::Instant::now() + BOUND;
    while !deliveries.lock().unwrap().iter().any(about) {
        assert!(std::time::Instant::now() < until, "no component page");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Back on the same port: healthy again, the page resolved.
    dep.restore().await;
    m.wait("healthy again", |v| {
        v["status"] == "healthy" && component(v, "healthy")
    })
    .await;
    let until = std::time::Instant::now() + BOUND;
    while deliveries.lock().unwrap().len() < 2 {
        assert!(std::time::Instant::now() < until, "no component resolve");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // One more check after the recovery: nothing else is sent.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let sent = deliveries.lock().unwrap().clone();
    assert_eq!(sent.len(), 2, "one trigger and one resolve: {sent:?}");
    let (trigger, resolve) = (&sent[0], &sent[1]);
    assert!(about(trigger) && about(resolve), "{sent:?}");
    assert_eq!(
        (&trigger["action"], &trigger["kind"], &trigger["target"]),
        (&"trigger".into(), &verdict.into(), &"gw".into()),
        "{trigger}"
    );
    assert!(
        trigger["summary"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{COMPONENT} {verdict} behind gw")),
        "{trigger}"
    );
    assert_eq!(
        (&resolve["action"], &resolve["kind"]),
        (&"resolve".into(), &"recovered".into()),
        "{resolve}"
    );
    assert_eq!(resolve["dedup_key"], trigger["dedup_key"]);
    drop(m);
    assert_eq!(gw.terminate().await, Some(0));
    // Every demo server the gateway started (a pool child, one per monitor check's session)
    // is gone with it.
    let all = read_pids(&pids);
    assert!(all.len() >= 2, "{all:?}");
    let left = still_running_after(&all, Duration::from_secs(2));
    kill(&left);
    assert!(left.is_empty(), "left running: {left:?}");
}
