//! `mcpulse monitor` end to end: the real binary as a child process, over fake MCP servers that
//! are killed and restored, alerting a fake webhook receiver, read back through its HTTP API
//! and its SQLite file.
//!
//! - a server dies and comes back: exactly one signed `trigger`/`down` and one
//!   `resolve`/`recovered` webhook, with the same `dedup_key`, each within
//!   `interval × threshold + timeout` (+ [`SLACK`]) of the change; the API agrees;
//! - SIGKILL with an incident open: the file is intact, the restarted monitor shows the target
//!   down before its first check and pages nobody again; SIGKILL again halfway through the
//!   recovery: the success streak resumes, and one resolve comes at the first check after the
//!   restart;
//! - SIGKILL with an alert not yet delivered (the receiver was down): delivered once after the
//!   restart;
//! - SIGHUP: only the changed target restarts, removed/added targets leave/join the fleet, an
//!   invalid file is logged and the running config kept; SIGTERM exits 0 promptly;
//! - SIGHUP with the sinks reordered: a pending alert still goes to its own receiver;
//! - SIGHUP removing a target with an open incident: a resolve with the same dedup key, the
//!   removal in its history; added back, it pages afresh;
//! - `check-config` exit codes and located errors; `monitor --import` of a Claude Desktop file.
//!
//! "Killed" is real: the server sits behind a forwarder on its own port, and killing it closes
//! that listener and every connection through it (connection refused), and restoring it binds
//! the same port again. Everything is on loopback, every port is chosen at run time, every wait
//! polls with a deadline, and every child is killed on drop.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_monitor::alert::dedup_key;
use mcpulse_monitor::runner::phase;
use mcpulse_monitor::sink::webhook;
use mcpulse_monitor::state::Health;
use mcpulse_monitor::store::Store;
use mcpulse_testkit::scenario::{self, Framing};
use mcpulse_testkit::{FakeHttp, Reply, StdioScript, TempDir};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");

/// The schedule every config here uses.
const INTERVAL: Duration = Duration::from_secs(1);
const TIMEOUT: Duration = Duration::from_millis(500);
const FAILURE_THRESHOLD: u32 = 2;
const SUCCESS_THRESHOLD: u32 = 2;

/// What the timing bound allows beyond `interval × threshold + timeout`: the store write and
/// the outbox hand-off after the deciding check, one HTTP POST on loopback, and process
/// scheduling on a loaded machine running a debug build. (Observed: the page and the resolve
/// arrive about 2.0 s after the change, against 2.5 s for `interval × threshold + timeout`.)
const SLACK: Duration = Duration::from_millis(1500);

/// The webhook's HMAC secret, given to the monitor through `${MCPULSE_TEST_WEBHOOK_SECRET}`.
const SECRET: &str = "whsec-mcpulse-test-4f2a9c";
const SECRET_ENV: &str = "MCPULSE_TEST_WEBHOOK_SECRET";

/// The longest any wait below takes before it fails the test.
const PATIENCE: Duration = Duration::from_secs(15);

// ---- HTTP ------------------------------------------------------------------------------------

/// `GET path` on `addr`, `Connection: close`: the status and the body, or `None` when nothing
/// answers.
async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    http_get_within(addr, path, Duration::from_secs(5)).await
}

/// [`http_get`], waiting up to `bound` for the answer.
async fn http_get_within(addr: SocketAddr, path: &str, bound: Duration) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(bound, s.read_to_end(&mut buf))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    Some((
        status,
        if chunked {
            dechunk(body)
        } else {
            body.to_owned()
        },
    ))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// A loopback port that was free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

// ---- a server that can be killed and restored on the same port -------------------------------

/// A TCP front on its own port for a backend server. Killing it closes the listener and every
/// connection through it (the port refuses connections, as a dead server's does); restoring
/// it binds the same port again.
struct Killable {
    /// Held while the server is down too: no other test is handed the port meanwhile.
    port: mcpulse_testkit::port::KeptPort,
    backend: SocketAddr,
    front: Option<JoinHandle<()>>,
}

impl Killable {
    async fn start(backend: SocketAddr) -> Killable {
        let port = mcpulse_testkit::port::KeptPort::new();
        let listener = port.listen();
        Killable {
            port,
            backend,
            front: Some(tokio::spawn(forward(listener, backend))),
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port.port())
    }

    async fn kill(&mut self) {
        if let Some(front) = self.front.take() {
            front.abort();
            let _ = front.await; // dropped: the listener and the connections are closed
        }
    }

    async fn restore(&mut self) {
        let listener = self.port.listen();
        self.front = Some(tokio::spawn(forward(listener, self.backend)));
    }
}

impl Drop for Killable {
    fn drop(&mut self) {
        if let Some(front) = self.front.take() {
            front.abort();
        }
    }
}

async fn forward(listener: TcpListener, backend: SocketAddr) {
    // Owned here: aborting this task drops the set, which aborts every connection.
    let mut connections = JoinSet::new();
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            continue;
        };
        while connections.try_join_next().is_some() {}
        connections.spawn(async move {
            if let Ok(mut outbound) = TcpStream::connect(backend).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

/// A healthy MCP server (legacy Streamable HTTP: a stable contract, so no drift alerts).
async fn healthy_backend() -> FakeHttp {
    FakeHttp::start_script(scenario::legacy_streamable(Framing::Json)).await
}

// ---- the webhook receiver --------------------------------------------------------------------

/// One request the receiver got, and what it answered.
#[derive(Debug, Clone)]
struct Delivery {
    at: Instant,
    status: u16,
    raw: Vec<u8>,
    body: Value,
    timestamp: Option<String>,
    signature: Option<String>,
}

impl Delivery {
    fn field(&self, k: &str) -> &str {
        self.body[k].as_str().unwrap_or("")
    }

    /// Checks the HMAC signature as the webhook docs tell a receiver to.
    fn assert_signed(&self) {
        let ts = self.timestamp.as_deref().expect("X-Mcpulse-Timestamp");
        let sig = self.signature.as_deref().expect("X-Mcpulse-Signature");
        assert!(
            webhook::verify(SECRET.as_bytes(), ts, &self.raw, sig),
            "bad signature {sig} for {}",
            String::from_utf8_lossy(&self.raw)
        );
        assert!(
            !webhook::verify(b"another secret", ts, &self.raw, sig),
            "the signature must depend on the secret"
        );
        let sent: i64 = ts.parse().unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!(
            (now - sent).abs() < 300,
            "timestamp {sent} is not now ({now})"
        );
    }
}

/// A webhook receiver: answers 200 while up, 503 while down, and records everything.
struct Receiver {
    http: FakeHttp,
    up: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<Delivery>>>,
}

impl Receiver {
    async fn start(up: bool) -> Receiver {
        let up = Arc::new(AtomicBool::new(up));
        let log: Arc<Mutex<Vec<Delivery>>> = Arc::default();
        let (u, l) = (up.clone(), log.clone());
        let http = FakeHttp::start(move |req| {
            let status = if u.load(Ordering::SeqCst) { 200 } else { 503 };
            l.lock().unwrap().push(Delivery {
                at: Instant::now(),
                status,
                raw: req.body.clone(),
                body: req.json().unwrap_or(Value::Null),
                timestamp: req.header(webhook::TIMESTAMP_HEADER).map(str::to_owned),
                signature: req.header(webhook::SIGNATURE_HEADER).map(str::to_owned),
            });
            Reply::status(status)
        })
        .await;
        Receiver { http, up, log }
    }

    fn url(&self) -> String {
        self.http.url("/hook")
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
    }

    /// Every request so far, whatever it was answered.
    fn all(&self) -> Vec<Delivery> {
        self.log.lock().unwrap().clone()
    }

    /// The deliveries it accepted (200).
    fn accepted(&self) -> Vec<Delivery> {
        self.all().into_iter().filter(|d| d.status == 200).collect()
    }

    /// Waits until it has accepted `n` deliveries; returns them.
    async fn wait_accepted(&self, n: usize, bound: Duration) -> Vec<Delivery> {
        let until = Instant::now() + bound;
        loop {
            let got = self.accepted();
            if got.len() >= n {
                return got;
            }
            if Instant::now() > until {
                panic!(
                    "the receiver accepted {} deliveries within {bound:?}, not {n}: {:?}",
                    got.len(),
                    self.all().iter().map(|d| &d.body).collect::<Vec<_>>()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until it has seen `n` requests, accepted or not.
    async fn wait_any(&self, n: usize, bound: Duration) -> Vec<Delivery> {
        let until = Instant::now() + bound;
        loop {
            let got = self.all();
            if got.len() >= n || Instant::now() > until {
                assert!(got.len() >= n, "{} requests within {bound:?}", got.len());
                return got;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

// ---- configs ---------------------------------------------------------------------------------

/// A config: the schedule above, history in `mcpulse.db` next to it, these `[[targets]]`, and
/// (when given) a signed webhook.
fn config_text(targets: &[(&str, &str)], webhook: Option<&str>) -> String {
    let mut t = format!(
        "[storage]\npath = \"mcpulse.db\"\n\n[defaults]\ninterval = \"{}ms\"\ntimeout = \"{}ms\"\n\
         failure_threshold = {FAILURE_THRESHOLD}\nsuccess_threshold = {SUCCESS_THRESHOLD}\nsecurity = false\n",
        INTERVAL.as_millis(),
        TIMEOUT.as_millis()
    );
    for (name, extra) in targets {
        t.push_str(&format!("\n[[targets]]\nname = \"{name}\"\n{extra}\n"));
    }
    if let Some(url) = webhook {
        t.push_str(&format!(
            "\n[[alerts]]\nkind = \"webhook\"\nurl = \"{url}\"\nsecret = \"${{{SECRET_ENV}}}\"\n"
        ));
    }
    t
}

/// Writes the file whole (a rename), so a reload never reads half of it.
fn write_config(path: &Path, text: &str) {
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn url_target(url: &str) -> String {
    format!("url = \"{url}\"")
}

/// A target name whose first check comes late in its interval (at least 600 ms after the
/// monitor starts it), so that a test can look at the API before that check.
fn late_name(prefix: &str) -> String {
    (0..1000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|n| {
            let p = phase(n, INTERVAL);
            p >= Duration::from_millis(600) && p <= Duration::from_millis(900)
        })
        .unwrap()
}

// ---- the monitor process ---------------------------------------------------------------------

static STARTS: AtomicUsize = AtomicUsize::new(0);

/// `mcpulse monitor` as a child: its log (stderr, at debug) in a file; SIGKILLed and reaped
/// on drop.
struct Monitor {
    child: Child,
    api: SocketAddr,
    log: PathBuf,
}

impl Monitor {
    /// Starts it and waits until `/readyz` says ready (config loaded, resumed state shown,
    /// scheduler running). A port taken between [`free_port`] and the monitor's bind is tried
    /// again with another.
    async fn start(dir: &TempDir, config: &Path, extra: &[&str]) -> Monitor {
        for _ in 0..3 {
            if let Some(m) = Monitor::try_start(dir, config, extra).await {
                return m;
            }
        }
        panic!("the monitor could not bind a port three times");
    }

    async fn try_start(dir: &TempDir, config: &Path, extra: &[&str]) -> Option<Monitor> {
        let api = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let log = dir.join(&format!(
            "monitor-{}.log",
            STARTS.fetch_add(1, Ordering::SeqCst)
        ));
        let child = std::process::Command::new(BIN)
            .arg("monitor")
            .arg("--config")
            .arg(config)
            .args(["--listen", &api.to_string(), "--log-level", "debug"])
            .args(extra)
            .env(SECRET_ENV, SECRET)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawning mcpulse monitor");
        let mut m = Monitor { child, api, log };
        let until = Instant::now() + PATIENCE;
        loop {
            if let Some((200, _)) = http_get(api, "/readyz").await {
                return Some(m);
            }
            if let Ok(Some(status)) = m.child.try_wait() {
                let log = m.log();
                if log.contains("cannot listen on") {
                    return None;
                }
                panic!("the monitor exited ({status}) at start:\n{log}");
            }
            assert!(Instant::now() < until, "not ready:\n{}", m.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET path` as JSON (status, body).
    async fn get(&self, path: &str) -> (u16, Value) {
        let (status, body) = http_get(self.api, path)
            .await
            .unwrap_or_else(|| panic!("no answer to {path}:\n{}", self.log()));
        let v = serde_json::from_str(&body).unwrap_or(Value::String(body));
        (status, v)
    }

    async fn fleet(&self) -> Value {
        let (status, v) = self.get("/api/v1/fleet").await;
        assert_eq!(status, 200, "{v}");
        v
    }

    async fn target(&self, name: &str) -> Value {
        let (status, v) = self.get(&format!("/api/v1/targets/{name}")).await;
        assert_eq!(status, 200, "{v}");
        v
    }

    /// A target's checks, newest first.
    async fn history(&self, name: &str) -> Vec<Value> {
        let (status, v) = self
            .get(&format!("/api/v1/targets/{name}/history?limit=1000"))
            .await;
        assert_eq!(status, 200, "{v}");
        v["items"].as_array().unwrap().clone()
    }

    /// Polls a target's view until `pred` holds.
    async fn wait_target(&self, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let until = Instant::now() + PATIENCE;
        loop {
            let (status, v) = self.get(&format!("/api/v1/targets/{name}")).await;
            if status == 200 && pred(&v) {
                return v;
            }
            assert!(
                Instant::now() < until,
                "{name}: not {what} within {PATIENCE:?}: {v}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until `n` more checks of `name` are in its history than `after` (a count).
    async fn wait_checks(&self, name: &str, after: usize, n: usize) -> Vec<Value> {
        let until = Instant::now() + PATIENCE;
        loop {
            let h = self.history(name).await;
            if h.len() >= after + n {
                return h;
            }
            assert!(
                Instant::now() < until,
                "{name}: {} checks, waiting for {}",
                h.len(),
                after + n
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the log has a line containing `text`.
    async fn wait_log(&self, text: &str) -> String {
        let until = Instant::now() + PATIENCE;
        loop {
            let log = self.log();
            if log.contains(text) {
                return log;
            }
            assert!(Instant::now() < until, "no {text:?} in the log:\n{log}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory is touched.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(rc, 0, "kill({}, {sig})", self.pid());
    }

    /// Waits (polling) for the process to exit; fails after `bound`.
    async fn wait_exit(&mut self, bound: Duration) -> ExitStatus {
        let until = Instant::now() + bound;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < until,
                "the monitor did not exit within {bound:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// SIGKILL, and reap it.
    async fn sigkill(&mut self) {
        use std::os::unix::process::ExitStatusExt;
        self.signal(libc::SIGKILL);
        let status = self.wait_exit(Duration::from_secs(5)).await;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
    }

    /// SIGTERM: a clean exit, status 0, within `bound`.
    async fn sigterm(&mut self, bound: Duration) -> Duration {
        let sent = Instant::now();
        self.signal(libc::SIGTERM);
        let status = self.wait_exit(bound).await;
        assert_eq!(status.code(), Some(0), "{status}:\n{}", self.log());
        assert!(
            self.log().contains("mcpulse monitor stopped"),
            "{}",
            self.log()
        );
        sent.elapsed()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- monitor log {} ---\n{}", self.log.display(), self.log());
        }
    }
}

/// What the database says after a crash: `PRAGMA integrity_check`, then the store's own view.
struct DbState {
    checks: Vec<i64>,
    status: Health,
    streak: Option<(Health, u32)>,
    incident_keys: Vec<String>,
    pending: Vec<(String, String)>,
    delivered: i64,
}

fn inspect_db(path: &Path, target: &str) -> DbState {
    {
        let conn = rusqlite::Connection::open(path).unwrap();
        // Exclusive: this look after the crash makes no shared-memory file of its own.
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
            .unwrap();
        let ok: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok", "integrity_check");
        let fk: i64 = conn
            .query_row(
                "SELECT count(*) FROM checks WHERE target_id NOT IN (SELECT id FROM targets)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(fk, 0, "checks of no target");
    }
    let store = Store::open(path).unwrap();
    let states = store.load_states().unwrap();
    let (state, incidents) = states.get(target).cloned().expect("a stored state");
    let checks = store
        .history(target, None, 100_000)
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    let pending = store
        .due_alerts(i64::MAX, 100)
        .unwrap()
        .into_iter()
        .map(|i| {
            let a = serde_json::to_value(&i.alert).unwrap();
            (
                a["action"].as_str().unwrap().to_owned(),
                a["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    drop(store);
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
        .unwrap();
    let delivered = conn
        .query_row("SELECT count(*) FROM outbox WHERE delivered = 1", [], |r| {
            r.get(0)
        })
        .unwrap();
    DbState {
        checks,
        status: state.status,
        streak: state.streak,
        incident_keys: incidents.values().map(|i| i.dedup_key.clone()).collect(),
        pending,
        delivered,
    }
}

/// The bound for an alert after a change: `interval × threshold + timeout`, plus [`SLACK`].
fn bound(threshold: u32) -> Duration {
    INTERVAL * threshold + TIMEOUT + SLACK
}

fn ids(history: &[Value]) -> Vec<i64> {
    history.iter().map(|c| c["id"].as_i64().unwrap()).collect()
}

// ---- the tests -------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_and_comes_back_pages_once_and_resolves_once() {
    let dir = TempDir::new("monitor-e2e");
    let backend = healthy_backend().await;
    let mut server = Killable::start(backend.addr()).await;
    let hook = Receiver::start(true).await;
    let config = dir.join("monitor.toml");
    write_config(
        &config,
        &config_text(&[("svc", &url_target(&server.url()))], Some(&hook.url())),
    );
    let m = Monitor::start(&dir, &config, &[]).await;
    m.wait_target("svc", "healthy", |v| v["status"] == "healthy")
        .await;

    // Killed: one page.
    server.kill().await;
    let killed = Instant::now();
    let fired = hook.wait_accepted(1, PATIENCE).await;
    let fired_after = fired[0].at - killed;
    let trigger = &fired[0];
    let key = dedup_key("svc", "status");
    assert_eq!(trigger.field("schema"), "mcpulse.alert/v1");
    assert_eq!(trigger.field("action"), "trigger");
    assert_eq!(trigger.field("kind"), "down");
    assert_eq!(trigger.field("target"), "svc");
    assert_eq!(trigger.field("severity"), "critical");
    assert_eq!(trigger.field("dedup_key"), key);
    assert!(
        trigger.field("summary").contains("connect-failed"),
        "{}",
        trigger.body
    );
    trigger.assert_signed();
    assert!(
        fired_after <= bound(FAILURE_THRESHOLD),
        "the page came {fired_after:?} after the kill (bound {:?})",
        bound(FAILURE_THRESHOLD)
    );

    // The API agrees: down, one open incident, the last checks down after healthy ones.
    let fleet = m.fleet().await;
    assert_eq!(
        (&fleet["total"], &fleet["healthy"], &fleet["down"]),
        (&json!(1), &json!(0), &json!(1)),
        "{fleet}"
    );
    assert_eq!(fleet["targets"][0]["name"], "svc");
    assert_eq!(fleet["targets"][0]["status"], "down");
    assert_eq!(fleet["targets"][0]["open_incidents"], 1);
    let view = m.target("svc").await;
    assert_eq!(view["incidents"][0]["dedup_key"], key.as_str());
    assert_eq!(view["last"]["status"], "down");
    let history = m.history("svc").await;
    let statuses: Vec<&str> = history
        .iter()
        .map(|c| c["status"].as_str().unwrap())
        .collect();
    let downs = statuses.iter().take_while(|s| **s == "down").count();
    assert!(downs >= FAILURE_THRESHOLD as usize, "{statuses:?}");
    assert_eq!(
        statuses.last(),
        Some(&"healthy"),
        "healthy first: {statuses:?}"
    );
    assert!(
        history[0]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["code"] == "connect-failed"),
        "{}",
        history[0]
    );
    // A history cursor that names no check of the target is told, not an empty last page.
    let oldest = history.last().unwrap()["id"].as_i64().unwrap();
    let (status, page) = m
        .get(&format!("/api/v1/targets/svc/history?before={oldest}"))
        .await;
    assert_eq!(
        (status, &page["items"], &page["next"]),
        (200, &json!([]), &Value::Null)
    );
    let (status, page) = m.get("/api/v1/targets/svc/history?before=999999999").await;
    assert_eq!(status, 410, "{page}");

    // Restored on the same port: one resolve, same incident.
    server.restore().await;
    let restored = Instant::now();
    let both = hook.wait_accepted(2, PATIENCE).await;
    let resolved_after = both[1].at - restored;
    let resolve = &both[1];
    assert_eq!(resolve.field("action"), "resolve");
    assert_eq!(resolve.field("kind"), "recovered");
    assert_eq!(resolve.field("dedup_key"), key);
    // The recovery's transition says why, as the outage's did (not `reason=""`).
    m.wait_log("to=healthy reason=\"healthy: the handshake and the lists succeeded\"")
        .await;
    assert_eq!(resolve.field("started_at"), trigger.field("started_at"));
    resolve.assert_signed();
    assert!(
        resolved_after <= bound(SUCCESS_THRESHOLD),
        "the resolve came {resolved_after:?} after the restore (bound {:?})",
        bound(SUCCESS_THRESHOLD)
    );

    // And nothing more: two more healthy checks, no third request.
    let n = m.history("svc").await.len();
    let history = m.wait_checks("svc", n, 2).await;
    assert_eq!(history[0]["status"], "healthy");
    assert_eq!(hook.all().len(), 2, "{:?}", hook.all());
    let fleet = m.fleet().await;
    assert_eq!((&fleet["healthy"], &fleet["down"]), (&json!(1), &json!(0)));
    assert_eq!(fleet["targets"][0]["open_incidents"], 0);
    eprintln!(
        "timings: page {fired_after:?} after the kill, resolve {resolved_after:?} after the restore \
         (bounds {:?}, {:?})",
        bound(FAILURE_THRESHOLD),
        bound(SUCCESS_THRESHOLD)
    );
}

/// Waits until the target `svc`'s view shows `component` in `status`; returns the view.
async fn component_is(m: &Monitor, component: &str, status: &str) -> Value {
    m.wait_target("svc", &format!("{component} {status}"), |v| {
        v["components"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["name"] == component && c["status"] == status)
        })
    })
    .await
}

/// A dependency outage behind a healthy protocol layer (issue #18 item 4): the server's
/// `health_check` tool reports `orders-db` down, then ok again. Exactly one alert reaches the
/// webhook, the component's, naming the component and the server, and then its resolve: the
/// target's status goes down too (the view shows it) but does not page a second time (one
/// alert per outage, docs/monitor.md). The target's view lists the component with its state;
/// each check's synthetic call of `ping_db` is in the history, with percentiles in the view
/// and a histogram on `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_down_behind_a_healthy_server_pages_once_for_the_component_and_resolves() {
    use mcpulse_testkit::tools;
    let dir = TempDir::new("monitor-component");
    let phase = Arc::new(AtomicUsize::new(0));
    let server = FakeHttp::start_script(scenario::shifting(
        vec![
            tools::http_server(tools::catalogue("ok")),
            tools::http_server(tools::catalogue("down")),
        ],
        phase.clone(),
    ))
    .await;
    let hook = Receiver::start(true).await;
    let config = dir.join("monitor.toml");
    let target = format!(
        "{}\nhealth_tool = \"auto\"\n\n[[targets.call]]\ntool = \"ping_db\"\nbudget = \"400ms\"\n",
        url_target(&server.url("/mcp"))
    );
    write_config(
        &config,
        &config_text(&[("svc", &target)], Some(&hook.url())),
    );
    let mut m = Monitor::start(&dir, &config, &[]).await;
    m.wait_target("svc", "healthy with its components", |v| {
        v["status"] == "healthy" && v["components"].as_array().is_some_and(|c| c.len() == 2)
    })
    .await;

    // orders-db goes down behind the server: one component page.
    phase.store(1, Ordering::SeqCst);
    let component = |d: &Delivery| d.body["labels"]["component"] == "orders-db";
    let until = Instant::now() + PATIENCE;
    while !hook.accepted().iter().any(component) {
        assert!(
            Instant::now() < until,
            "no component page: {:?}",
            hook.all()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let view = component_is(&m, "orders-db", "down").await;
    let view = if view["status"] == "down" {
        view
    } else {
        m.wait_target("svc", "down", |v| v["status"] == "down")
            .await
    };
    assert!(
        view["incidents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["family"] == "component:orders-db"),
        "{view}"
    );

    // It comes back: one resolve, then nothing more about it.
    phase.store(0, Ordering::SeqCst);
    let until = Instant::now() + PATIENCE;
    while hook.accepted().iter().filter(|d| component(d)).count() < 2 {
        assert!(
            Instant::now() < until,
            "no component resolve: {:?}",
            hook.all()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let n = m.history("svc").await.len();
    m.wait_checks("svc", n, 2).await;
    let about: Vec<Delivery> = hook.accepted().into_iter().filter(component).collect();
    assert_eq!(
        about.len(),
        2,
        "{:?}",
        about.iter().map(|d| &d.body).collect::<Vec<_>>()
    );
    let (trigger, resolve) = (&about[0], &about[1]);
    assert_eq!(
        (trigger.field("action"), trigger.field("kind")),
        ("trigger", "down")
    );
    assert_eq!(trigger.field("target"), "svc");
    assert!(
        trigger
            .field("summary")
            .starts_with("orders-db down behind svc"),
        "{}",
        trigger.body
    );
    assert_eq!(
        trigger.field("dedup_key"),
        dedup_key("svc", "component:orders-db")
    );
    trigger.assert_signed();
    assert_eq!(
        (resolve.field("action"), resolve.field("kind")),
        ("resolve", "recovered")
    );
    assert_eq!(resolve.field("dedup_key"), trigger.field("dedup_key"));
    assert_eq!(
        resolve.field("summary"),
        "orders-db recovered behind svc (was down)"
    );
    // Nothing else was sent: not the target's own `down` (its status went down with the
    // health tool's, but the component's incident pages the outage), nor `tool ping_db`,
    // which stayed healthy throughout.
    let all: Vec<(String, String)> = hook
        .all()
        .iter()
        .map(|d| (d.field("action").to_owned(), d.field("kind").to_owned()))
        .collect();
    assert_eq!(
        all,
        [
            ("trigger".to_owned(), "down".to_owned()),
            ("resolve".to_owned(), "recovered".to_owned())
        ],
        "{:?}",
        hook.all().iter().map(|d| &d.body).collect::<Vec<_>>()
    );

    // The history: every check with its call of ping_db and how long it took.
    let history = m.history("svc").await;
    assert!(history.len() >= 4, "{history:?}");
    for check in &history {
        let calls = check["calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{check}");
        assert_eq!(calls[0]["tool"], "ping_db");
        assert_eq!(calls[0]["ok"], true);
        let ms = calls[0]["ms"].as_f64().unwrap();
        assert!(ms > 0.0 && ms < 400.0, "{check}");
    }
    // The view: the component back to healthy, since the recovery; the tool's percentiles.
    let view = component_is(&m, "orders-db", "healthy").await;
    let tools = view["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{view}");
    assert_eq!(tools[0]["tool"], "ping_db");
    let hour = &tools[0]["windows"][0];
    assert_eq!(hour["window"], "1h");
    assert!(hour["calls"].as_u64().unwrap() >= 4, "{hour}");
    assert_eq!(hour["errors"], 0, "{hour}");
    for p in ["p50_ms", "p95_ms", "p99_ms"] {
        let v = hour[p].as_f64().unwrap();
        assert!(v > 0.0 && v < 400.0, "{p} {v}");
    }
    // /metrics: the tool's series, its label as configured.
    let (status, metrics) = http_get(m.api, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    for series in [
        "mcpulse_tool_calls_total{target=\"svc\",tool=\"ping_db\"}",
        "mcpulse_tool_call_errors_total{target=\"svc\",tool=\"ping_db\"} 0",
        "mcpulse_tool_call_duration_seconds_bucket{target=\"svc\",tool=\"ping_db\",le=\"0.5\"}",
        "mcpulse_tool_call_duration_seconds_count{target=\"svc\",tool=\"ping_db\"}",
    ] {
        assert!(metrics.contains(series), "no {series} in\n{metrics}");
    }
    // The history: the component's two transitions as events (read once the monitor has
    // stopped, so that every check it made is written).
    m.sigterm(Duration::from_secs(10)).await;
    let store = Store::open(&dir.join("mcpulse.db")).unwrap();
    let moves: Vec<(String, String)> = store
        .transitions("svc", 1000)
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "component" && e["component"] == "orders-db")
        .map(|e| (e["from"].to_string(), e["to"].to_string()))
        .collect();
    assert_eq!(
        moves,
        [
            ("\"down\"".to_owned(), "\"healthy\"".to_owned()),
            ("\"healthy\"".to_owned(), "\"down\"".to_owned()),
        ],
        "newest first"
    );
}

/// One alert per outage, through the health endpoint (docs/monitor.md): `orders-db` fails
/// behind a server whose MCP endpoint answers: one page, the component's, though the target's
/// status is down too. Then the MCP endpoint fails as well (a 503): the outage is the server's
/// own now, and the target pages beside the component. Everything recovers: each of the two
/// resolved once, and nothing else was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_outage_pages_once_and_the_server_failing_too_pages_the_target() {
    let dir = TempDir::new("monitor-one-alert");
    // 0: all well; 1: orders-db fails behind a healthy MCP endpoint; 2: the MCP endpoint too.
    let phase = Arc::new(AtomicUsize::new(0));
    // A stable tool list (no drift between checks), no health tool called.
    let mcp = mcpulse_testkit::tools::http_server(mcpulse_testkit::tools::catalogue("ok"));
    let now = phase.clone();
    let server = FakeHttp::start(move |req| {
        let p = now.load(Ordering::SeqCst);
        match req.path() {
            "/mcp" if p == 2 => Reply::status(503),
            "/mcp" => mcp(req),
            _ if p == 0 => Reply::json(
                200,
                &json!({"status": "pass", "checks": {"orders-db": {"status": "pass"}}}),
            ),
            _ => Reply::json(
                503,
                &json!({"status": "fail", "checks": {"orders-db": {
                    "status": "fail", "output": "connection refused"}}}),
            ),
        }
    })
    .await;
    let hook = Receiver::start(true).await;
    let config = dir.join("monitor.toml");
    let target = format!(
        "{}\nhealth_url = \"{}\"",
        url_target(&server.url("/mcp")),
        server.url("/readyz")
    );
    write_config(
        &config,
        &config_text(&[("svc", &target)], Some(&hook.url())),
    );
    let mut m = Monitor::start(&dir, &config, &[]).await;
    m.wait_target("svc", "healthy", |v| v["status"] == "healthy")
        .await;
    let status_key = dedup_key("svc", "status");
    let component_key = dedup_key("svc", "component:orders-db");
    let sent = |hook: &Receiver| -> Vec<(String, String)> {
        hook.accepted()
            .iter()
            .map(|d| {
                (
                    d.field("action").to_owned(),
                    d.field("dedup_key").to_owned(),
                )
            })
            .collect()
    };
    let wait_sent = |n: usize| {
        let hook = &hook;
        async move {
            let until = Instant::now() + PATIENCE;
            while hook.accepted().len() < n {
                assert!(Instant::now() < until, "waiting for {n}: {:?}", sent(hook));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };

    // The dependency fails: the target is down (the API says so), paged as the component.
    phase.store(1, Ordering::SeqCst);
    wait_sent(1).await;
    let view = m
        .wait_target("svc", "down", |v| v["status"] == "down")
        .await;
    // Two more checks with the outage going on: still the one page.
    let n = m.history("svc").await.len();
    m.wait_checks("svc", n, 2).await;
    assert_eq!(
        sent(&hook),
        [("trigger".to_owned(), component_key.clone())],
        "{view}"
    );

    // The server fails too: after the failure threshold, the target's own page.
    phase.store(2, Ordering::SeqCst);
    wait_sent(2).await;
    let target_page = hook.accepted()[1].clone();
    assert_eq!(target_page.field("dedup_key"), status_key);
    assert_eq!(target_page.field("kind"), "down");
    assert!(
        target_page
            .field("summary")
            .starts_with("svc is down: server-error"),
        "{}",
        target_page.body
    );

    // All well again: each incident resolved once, and nothing more.
    phase.store(0, Ordering::SeqCst);
    wait_sent(4).await;
    m.wait_target("svc", "healthy", |v| v["status"] == "healthy")
        .await;
    let n = m.history("svc").await.len();
    m.wait_checks("svc", n, 2).await;
    let mut got = sent(&hook);
    got[2..].sort();
    let mut resolves = vec![
        ("resolve".to_owned(), status_key.clone()),
        ("resolve".to_owned(), component_key.clone()),
    ];
    resolves.sort();
    let mut want = vec![
        ("trigger".to_owned(), component_key.clone()),
        ("trigger".to_owned(), status_key.clone()),
    ];
    want.extend(resolves);
    assert_eq!(got, want);
    m.sigterm(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_with_an_incident_open_resumes_it_without_paging_again() {
    let dir = TempDir::new("monitor-crash-open");
    let backend = healthy_backend().await;
    let mut server = Killable::start(backend.addr()).await;
    server.kill().await; // down from the start
    let hook = Receiver::start(true).await;
    let name = late_name("svc");
    let key = dedup_key(&name, "status");
    let config = dir.join("monitor.toml");
    write_config(
        &config,
        &config_text(&[(&name, &url_target(&server.url()))], Some(&hook.url())),
    );
    let mut m = Monitor::start(&dir, &config, &[]).await;
    let page = hook.wait_accepted(1, PATIENCE).await;
    assert_eq!(
        (page[0].field("action"), page[0].field("kind")),
        ("trigger", "down")
    );
    // The delivery is recorded in the outbox right after the receiver's 200 (the log line
    // comes first); one more check later it is certainly committed.
    m.wait_log("alert delivered").await;
    let n = m.history(&name).await.len();
    let before = m.wait_checks(&name, n, 1).await;
    let opened = m.target(&name).await["incidents"][0]["opened_ms"].clone();
    m.sigkill().await;

    // The file: intact, every check the API showed is there, the state and incident too, and
    // nothing waiting in the outbox.
    let db = inspect_db(&dir.join("mcpulse.db"), &name);
    for id in ids(&before) {
        assert!(db.checks.contains(&id), "check {id} lost");
    }
    assert_eq!(db.status, Health::Down);
    assert_eq!(db.incident_keys, vec![key.clone()]);
    assert_eq!(db.pending, Vec::<(String, String)>::new());
    assert_eq!(db.delivered, 1);

    // Restarted: down at once, from the stored state, before any new check.
    let mut m = Monitor::start(&dir, &config, &[]).await;
    let resumed = m
        .wait_target(&name, "resumed", |v| v["status"] != "unknown")
        .await;
    assert_eq!(resumed["status"], "down", "{resumed}");
    assert_eq!(resumed["incidents"][0]["dedup_key"], key.as_str());
    assert_eq!(resumed["incidents"][0]["opened_ms"], opened);
    assert!(
        resumed["last"]["duration_ms"].is_null(),
        "the view is the resumed one, not a new check: {resumed}"
    );
    assert_eq!(m.history(&name).await.len(), db.checks.len());
    // Two new checks (still down): no page again.
    m.wait_checks(&name, db.checks.len(), FAILURE_THRESHOLD as usize + 1)
        .await;
    assert_eq!(hook.all().len(), 1, "paged again: {:?}", hook.all());
    let still = m.target(&name).await;
    assert_eq!(still["status"], "down");
    assert_eq!(still["incidents"][0]["opened_ms"], opened);

    // Recovering: killed again after the first healthy check, one short of the threshold...
    server.restore().await;
    let halfway = m
        .wait_target(&name, "one healthy check into its recovery", |v| {
            v["streak"]["status"] == "healthy"
        })
        .await;
    m.sigkill().await;
    assert_eq!(halfway["status"], "down");
    assert_eq!(halfway["streak"]["count"], 1);
    let db = inspect_db(&dir.join("mcpulse.db"), &name);
    assert_eq!(db.status, Health::Down);
    assert_eq!(db.streak, Some((Health::Healthy, 1)));
    assert_eq!(db.incident_keys, vec![key.clone()]);
    // ...and restarted: the streak resumes, so the first healthy check after the restart
    // completes it and resolves the incident, once.
    let mut m = Monitor::start(&dir, &config, &[]).await;
    let resumed = m
        .wait_target(&name, "resumed", |v| v["status"] != "unknown")
        .await;
    assert_eq!(resumed["status"], "down", "{resumed}");
    assert_eq!(resumed["streak"], json!({"status": "healthy", "count": 1}));
    assert!(resumed["last"]["duration_ms"].is_null(), "{resumed}");
    let both = hook.wait_accepted(2, PATIENCE).await;
    let resolve = &both[1];
    assert_eq!(
        (resolve.field("action"), resolve.field("kind")),
        ("resolve", "recovered")
    );
    assert_eq!(resolve.field("dedup_key"), key);
    resolve.assert_signed();
    let history = m.history(&name).await;
    let first_new = history
        .iter()
        .filter(|c| c["id"].as_i64().unwrap() > *db.checks.iter().max().unwrap())
        .map(|c| c["at_ms"].as_i64().unwrap())
        .min()
        .unwrap();
    assert_eq!(
        mcpulse_monitor::config::rfc3339_ms(resolve.field("at")),
        Some(first_new),
        "resolved by the first check after the restart"
    );
    let n = history.len();
    m.wait_checks(&name, n, 2).await;
    assert_eq!(hook.all().len(), 2, "{:?}", hook.all());
    assert_eq!(m.target(&name).await["status"], "healthy");
    m.sigterm(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_with_an_alert_undelivered_delivers_it_once_after_the_restart() {
    let dir = TempDir::new("monitor-crash-pending");
    let backend = healthy_backend().await;
    let mut server = Killable::start(backend.addr()).await;
    server.kill().await; // down from the start
    let hook = Receiver::start(false).await; // and the receiver answers 503
    let name = "svc";
    let key = dedup_key(name, "status");
    let config = dir.join("monitor.toml");
    write_config(
        &config,
        &config_text(&[(name, &url_target(&server.url()))], Some(&hook.url())),
    );
    let mut m = Monitor::start(&dir, &config, &[]).await;
    let refused = hook.wait_any(1, PATIENCE).await;
    assert_eq!(refused[0].status, 503);
    assert_eq!(refused[0].field("action"), "trigger");
    m.sigkill().await;
    let attempts_before = hook.all().len();

    let db = inspect_db(&dir.join("mcpulse.db"), name);
    assert_eq!(db.status, Health::Down);
    assert_eq!(db.incident_keys, vec![key.clone()]);
    assert_eq!(
        db.pending,
        vec![("trigger".to_owned(), "down".to_owned())],
        "the page waits in the outbox"
    );
    assert_eq!(db.delivered, 0);

    // The receiver is back; so is the monitor: the page that waited goes out, once.
    hook.set_up(true);
    let restarted = Instant::now();
    let mut m2 = Monitor::start(&dir, &config, &[]).await;
    drop(m); // (reaped already: its drop kills nothing)
    let delivered = hook.wait_accepted(1, PATIENCE).await;
    let after = delivered[0].at - restarted;
    let d = &delivered[0];
    assert_eq!((d.field("action"), d.field("kind")), ("trigger", "down"));
    assert_eq!(d.field("dedup_key"), key);
    // The very alert that was refused (same raise time, same delivery id), not a new one.
    assert_eq!(d.field("at"), refused[0].field("at"));
    assert_eq!(d.field("delivery_id"), refused[0].field("delivery_id"));
    assert!(d.field("delivery_id").starts_with("mcpulse-d-"));
    d.assert_signed();
    let view = m2.target(name).await;
    assert_eq!(view["status"], "down");
    assert_eq!(view["incidents"][0]["dedup_key"], key.as_str());
    // More checks, still down: nothing more.
    let n = m2.history(name).await.len();
    m2.wait_checks(name, n, FAILURE_THRESHOLD as usize + 1)
        .await;
    assert_eq!(hook.accepted().len(), 1, "{:?}", hook.all());
    assert_eq!(hook.all().len(), attempts_before + 1, "{:?}", hook.all());
    eprintln!(
        "timings: {attempts_before} refused attempt(s) before the SIGKILL; delivered {after:?} \
         after the restart began"
    );
    m2.sigterm(Duration::from_secs(5)).await;
    let db = inspect_db(&dir.join("mcpulse.db"), name);
    assert!(db.pending.is_empty(), "{:?}", db.pending);
    assert_eq!(db.delivered, 1);
}

/// Kills a process by its id on drop: the command a SIGKILLed monitor leaves running.
struct KillPid(Option<i32>);

impl Drop for KillPid {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            // SAFETY: kill(2) touches no memory; the pid is the test's own command's.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_command_runs_it_again_with_the_same_delivery_id() {
    // The command appends its MCPULSE_DELIVERY_ID to `runs`; its first run then hangs (as if
    // the monitor died while it worked), later runs succeed at once.
    let dir = TempDir::new("monitor-crash-command");
    let backend = healthy_backend().await;
    let mut server = Killable::start(backend.addr()).await;
    server.kill().await; // down from the start: a trigger
    let (runs, hung, pid) = (dir.join("runs"), dir.join("hung"), dir.join("pid"));
    let script = r#"echo "$MCPULSE_DELIVERY_ID $MCPULSE_ACTION" >> "$1"; [ -e "$2" ] && exit 0; echo $$ > "$3"; touch "$2"; exec sleep 30"#;
    let argv = json!(["sh", "-c", script, "sh", runs, hung, pid]);
    let name = "svc";
    let config = dir.join("monitor.toml");
    write_config(
        &config,
        &format!(
            "{}\n[[alerts]]\nkind = \"command\"\ncommand = {argv}\n",
            config_text(&[(name, &url_target(&server.url()))], None)
        ),
    );
    let mut m = Monitor::start(&dir, &config, &[]).await;
    let until = Instant::now() + PATIENCE;
    while !(hung.exists() && std::fs::read_to_string(&pid).is_ok_and(|p| p.ends_with('\n'))) {
        assert!(
            Instant::now() < until,
            "the command never ran:\n{}",
            m.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    m.sigkill().await;
    let _hung = KillPid(std::fs::read_to_string(&pid).unwrap().trim().parse().ok());
    let db = inspect_db(&dir.join("mcpulse.db"), name);
    assert_eq!(db.pending, vec![("trigger".to_owned(), "down".to_owned())]);

    // Restarted, the monitor runs the command again for the alert it was running: the same id.
    let mut m2 = Monitor::start(&dir, &config, &[]).await;
    drop(m);
    let until = Instant::now() + PATIENCE;
    let read = || std::fs::read_to_string(&runs).unwrap_or_default();
    while read().lines().count() < 2 {
        assert!(Instant::now() < until, "no second run:\n{}", m2.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let n = m2.history(name).await.len();
    m2.wait_checks(name, n, FAILURE_THRESHOLD as usize + 1)
        .await;
    let lines: Vec<String> = read().lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 2, "one run per start, no more: {lines:?}");
    assert_eq!(lines[0], lines[1], "the same delivery, the same id");
    assert!(
        lines[0].starts_with("mcpulse-d-") && lines[0].ends_with(" trigger"),
        "{lines:?}"
    );
    m2.sigterm(Duration::from_secs(5)).await;
    let db = inspect_db(&dir.join("mcpulse.db"), name);
    assert!(db.pending.is_empty(), "{:?}", db.pending);
    assert_eq!(db.delivered, 1);
}

/// Two signed webhooks, in this order, after the config of [`config_text`].
fn with_webhooks(config: String, urls: &[&str]) -> String {
    let mut t = config;
    for url in urls {
        t.push_str(&format!(
            "\n[[alerts]]\nkind = \"webhook\"\nurl = \"{url}\"\nsecret = \"${{{SECRET_ENV}}}\"\n"
        ));
    }
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_with_the_sinks_reordered_delivers_a_pending_alert_to_its_own_receiver() {
    let dir = TempDir::new("monitor-reorder-sinks");
    let backend = healthy_backend().await;
    let mut server = Killable::start(backend.addr()).await;
    server.kill().await; // down from the start
    let refusing = Receiver::start(false).await; // 503: its page stays pending
    let taking = Receiver::start(true).await;
    let name = "svc";
    let key = dedup_key(name, "status");
    let config = dir.join("monitor.toml");
    let targets = config_text(&[(name, &url_target(&server.url()))], None);
    write_config(
        &config,
        &with_webhooks(targets.clone(), &[&refusing.url(), &taking.url()]),
    );
    let m = Monitor::start(&dir, &config, &[]).await;
    let took = taking.wait_accepted(1, PATIENCE).await;
    assert_eq!(took[0].field("action"), "trigger");
    let refused = refusing.wait_any(1, PATIENCE).await;
    assert_eq!(refused[0].status, 503);

    // The same two sinks, the other way round: the pending page is still the first
    // receiver's, whatever its place in the list.
    write_config(
        &config,
        &with_webhooks(targets, &[&taking.url(), &refusing.url()]),
    );
    m.signal(libc::SIGHUP);
    m.wait_log("SIGHUP: config reloaded").await;
    refusing.set_up(true);
    let delivered = refusing.wait_accepted(1, PATIENCE).await;
    let d = &delivered[0];
    assert_eq!((d.field("action"), d.field("kind")), ("trigger", "down"));
    assert_eq!(d.field("dedup_key"), key);
    assert_eq!(
        d.field("at"),
        refused[0].field("at"),
        "the very page that waited"
    );
    d.assert_signed();
    // And the other receiver was not sent it a second time. (Give a misrouted retry the time
    // to arrive: a few checks more.)
    let n = m.history(name).await.len();
    m.wait_checks(name, n, 3).await;
    assert_eq!(
        taking.all().len(),
        1,
        "{:?}",
        taking.all().iter().map(|d| &d.body).collect::<Vec<_>>()
    );
    assert_eq!(refusing.accepted().len(), 1);
    assert!(!m.log().contains("set aside undelivered"), "{}", m.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_removing_a_target_resolves_its_open_incident_and_adding_it_back_pages_afresh() {
    let dir = TempDir::new("monitor-remove-target");
    let backend = healthy_backend().await;
    let mut server = Killable::start(backend.addr()).await;
    server.kill().await; // down from the start
    let stays_up = Killable::start(backend.addr()).await;
    let hook = Receiver::start(true).await;
    let (gone, stays) = ("gone", "stays");
    let key = dedup_key(gone, "status");
    let config = dir.join("monitor.toml");
    let both = config_text(
        &[
            (gone, &url_target(&server.url())),
            (stays, &url_target(&stays_up.url())),
        ],
        Some(&hook.url()),
    );
    write_config(&config, &both);
    let mut m = Monitor::start(&dir, &config, &[]).await;
    let paged = hook.wait_accepted(1, PATIENCE).await;
    assert_eq!(
        (paged[0].field("action"), paged[0].field("target")),
        ("trigger", gone)
    );
    assert_eq!(paged[0].field("dedup_key"), key);

    // Removed while its incident is open: one resolve with the same dedup key.
    write_config(
        &config,
        &config_text(&[(stays, &url_target(&stays_up.url()))], Some(&hook.url())),
    );
    m.signal(libc::SIGHUP);
    m.wait_log("SIGHUP: config reloaded").await;
    let got = hook.wait_accepted(2, PATIENCE).await;
    let r = &got[1];
    assert_eq!(
        (r.field("action"), r.field("kind"), r.field("target")),
        ("resolve", "recovered", gone)
    );
    assert_eq!(r.field("dedup_key"), key);
    assert!(
        r.field("summary")
            .contains("removed from the monitor's config"),
        "{}",
        r.body
    );
    assert_eq!(r.field("started_at"), paged[0].field("started_at"));
    r.assert_signed();
    let (status, _) = m.get(&format!("/api/v1/targets/{gone}")).await;
    assert_eq!(status, 404);

    // Added back while still down: it resumes its state without the resolved incident, so it
    // pages again (a new incident under the same key), once, and sends no stray resolve.
    write_config(&config, &both);
    m.signal(libc::SIGHUP);
    m.wait_log("added to the config").await;
    let got = hook.wait_accepted(3, PATIENCE).await;
    assert_eq!(
        (got[2].field("action"), got[2].field("dedup_key")),
        ("trigger", key.as_str())
    );
    let n = m.history(gone).await.len();
    m.wait_checks(gone, n, FAILURE_THRESHOLD as usize + 1).await;
    assert_eq!(
        hook.all().len(),
        3,
        "{:?}",
        hook.all().iter().map(|d| &d.body).collect::<Vec<_>>()
    );
    m.sigterm(Duration::from_secs(5)).await;

    // The history has the removal, and the incident open again since the re-add.
    let store = Store::open(&dir.join("mcpulse.db")).unwrap();
    let events = store.transitions(gone, 100).unwrap();
    let removed: Vec<&Value> = events.iter().filter(|e| e["event"] == "removed").collect();
    assert_eq!(removed.len(), 1, "{events:?}");
    assert_eq!(removed[0]["resolved"], json!([key]));
    let states = store.load_states().unwrap();
    assert_eq!(
        states[gone]
            .1
            .values()
            .map(|i| i.dedup_key.clone())
            .collect::<Vec<_>>(),
        vec![key]
    );
    assert!(store.due_alerts(i64::MAX, 100).unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_restarts_only_what_changed_and_keeps_the_running_config_when_invalid() {
    let dir = TempDir::new("monitor-reload");
    let backend = healthy_backend().await;
    let url = url_target(&backend.url("/mcp"));
    let config = dir.join("monitor.toml");
    write_config(
        &config,
        &config_text(&[("keep", &url), ("change", &url), ("gone", &url)], None),
    );
    let mut m = Monitor::start(&dir, &config, &[]).await;
    for t in ["keep", "change", "gone"] {
        m.wait_target(t, "healthy", |v| v["status"] == "healthy")
            .await;
    }
    let keep_before = m.target("keep").await;
    let change_before = m.target("change").await;
    assert_eq!(change_before["interval_ms"], 1000);

    // One interval changed, one target removed, one added.
    write_config(
        &config,
        &config_text(
            &[
                ("keep", &url),
                ("change", &format!("{url}\ninterval = \"2s\"")),
                ("added", &url),
            ],
            None,
        ),
    );
    m.signal(libc::SIGHUP);
    let log = m.wait_log("SIGHUP: config reloaded").await;
    let until = Instant::now() + PATIENCE;
    let names = loop {
        let fleet = m.fleet().await;
        let names: Vec<String> = fleet["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        if names.contains(&"added".to_owned()) || Instant::now() > until {
            break names;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(names, vec!["added", "change", "keep"]);
    assert_eq!(m.get("/api/v1/targets/gone").await.0, 404);
    // Only "change" restarted; its state carried over with its new interval.
    let restarts: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("restarting with its new settings"))
        .collect();
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    assert!(restarts[0].contains("target=change"), "{restarts:?}");
    assert!(
        log.lines()
            .any(|l| l.contains("removed from the config") && l.contains("target=gone")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("added to the config") && l.contains("target=added")),
        "{log}"
    );
    let change = m.target("change").await;
    assert_eq!(change["interval_ms"], 2000);
    assert_eq!(change["status"], "healthy");
    assert_eq!(change["since_ms"], change_before["since_ms"]);
    let keep = m.target("keep").await;
    assert_eq!(keep["since_ms"], keep_before["since_ms"]);
    assert_eq!(keep["interval_ms"], 1000);
    m.wait_target("added", "healthy", |v| v["status"] == "healthy")
        .await;
    // "keep" was never interrupted: no gap of two intervals in its checks.
    let n = m.history("keep").await.len();
    let history = m.wait_checks("keep", n, 2).await;
    let at: Vec<i64> = history
        .iter()
        .map(|c| c["at_ms"].as_i64().unwrap())
        .collect();
    // (The log above is the proof that it was not restarted; this shows no tick was lost.)
    let most = i64::try_from((INTERVAL * 2).as_millis()).unwrap();
    for w in at.windows(2) {
        assert!(w[0] - w[1] < most, "a gap in keep's checks: {at:?}");
    }

    // An invalid file: logged with its location; the running config stays.
    write_config(&config, "[defaults]\nintervall = \"1s\"\n");
    m.signal(libc::SIGHUP);
    let log = m
        .wait_log("SIGHUP: the new config is invalid; keeping the running one")
        .await;
    let line = log
        .lines()
        .find(|l| l.contains("the new config is invalid"))
        .unwrap();
    assert!(
        line.contains("monitor.toml:2:1") && line.contains("unknown field"),
        "{line}"
    );
    let n = m.history("keep").await.len();
    m.wait_checks("keep", n, 2).await;
    let fleet = m.fleet().await;
    assert_eq!(fleet["total"], 3, "{fleet}");
    assert_eq!(fleet["healthy"], 3, "{fleet}");

    // SIGTERM: a clean exit.
    let took = m.sigterm(Duration::from_secs(5)).await;
    eprintln!("timings: SIGTERM to exit {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_import_adds_the_servers_of_a_claude_desktop_config() {
    let dir = TempDir::new("monitor-import");
    let backend = healthy_backend().await;
    let desktop = dir.join("claude_desktop_config.json");
    std::fs::write(
        &desktop,
        serde_json::to_string_pretty(&json!({
            "mcpServers": {
                "desk": { "url": backend.url("/mcp") },
                "local": { "command": "sh", "args": ["-c", "exit 3"] },
                "off": { "command": "sh", "disabled": true },
                // Defined in the config file too: the config file's definition wins.
                "own": { "url": "http://127.0.0.1:1/elsewhere" }
            }
        }))
        .unwrap(),
    )
    .unwrap();
    let config = dir.join("monitor.toml");
    write_config(
        &config,
        &config_text(&[("own", &url_target(&backend.url("/mcp")))], None),
    );
    let desktop_arg = desktop.to_str().unwrap();

    let out = std::process::Command::new(BIN)
        .arg("check-config")
        .arg(&config)
        .args(["--import", desktop_arg])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("ok: 3 targets (2 http, 1 stdio)"),
        "{stdout}"
    );

    let mut m = Monitor::start(&dir, &config, &["--import", desktop_arg]).await;
    let fleet = m.fleet().await;
    let names: Vec<&str> = fleet["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["desk", "local", "own"], "{fleet}");
    let desk = m
        .wait_target("desk", "healthy", |v| v["status"] == "healthy")
        .await;
    assert_eq!(desk["kind"], "http");
    assert_eq!(desk["labels"]["imported_from"], desktop_arg);
    let local = m.target("local").await;
    assert_eq!(local["kind"], "stdio");
    // The argv rule hides the value of a one-letter flag: `sh -c` scripts can hold secrets.
    assert_eq!(local["endpoint"], "sh -c <redacted>");
    let own = m
        .wait_target("own", "healthy", |v| v["status"] == "healthy")
        .await;
    assert_eq!(own["endpoint"], backend.url("/mcp"));
    assert!(own["labels"].get("imported_from").is_none(), "{own}");
    m.sigterm(Duration::from_secs(5)).await;
}

/// The bytes of the database and its journals (`-wal`, `-shm`, `-journal`), as one buffer.
fn db_bytes(db: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        if let Ok(b) = std::fs::read(&p) {
            bytes.extend_from_slice(&b);
        }
    }
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Issue #14 (4, 5, 6): secrets are a property of the value. An imported URL with
/// `${env:VAR}` in its path and query, and a command with `-p VALUE` and a positional
/// `ghp_…` token, show up redacted in the API, the database (WAL included) and the log; the
/// command sink sees neither the monitor's secret variable nor anything not allowlisted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_stay_out_of_the_api_the_database_the_log_and_the_command_sink() {
    let dir = TempDir::new("monitor-secrets");
    let backend = healthy_backend().await;
    let pass = format!("pass-{}-{}", std::process::id(), line!());
    let pat = format!("ghp_{}abcdefghijklmnopqrstuvwxyz", std::process::id());
    let script = StdioScript::legacy().write(&dir, "server.sh");
    let desktop = dir.join("mcp.json");
    std::fs::write(
        &desktop,
        serde_json::to_string_pretty(&json!({
            "servers": {
                "pathy": { "type": "http", "url": backend.url(&format!(
                    "/ok/${{env:{SECRET_ENV}}}/mcp?token=${{env:{SECRET_ENV}}}"
                )) },
                "argvy": { "command": "sh", "args": [script, "-p", pass, pat] }
            }
        }))
        .unwrap(),
    )
    .unwrap();
    let env_file = dir.join("sink-env.txt");
    let config = dir.join("monitor.toml");
    let mut text = config_text(&[("gone", &url_target("http://127.0.0.1:1/mcp"))], None);
    text.push_str(&format!(
        "\n[[alerts]]\nkind = \"command\"\ncommand = [\"sh\", \"-c\", \"env > \\\"$1\\\"\", \"sh\", {:?}]\nenv = [\"NO_COLOR\"]\n",
        env_file.to_str().unwrap()
    ));
    write_config(&config, &text);
    let desktop_arg = desktop.to_str().unwrap();
    let mut m = Monitor::start(&dir, &config, &["--import", desktop_arg]).await;

    let secrets = [SECRET, pass.as_str(), pat.as_str()];
    let pathy = m
        .wait_target("pathy", "healthy", |v| v["status"] == "healthy")
        .await;
    let argvy = m
        .wait_target("argvy", "healthy", |v| v["status"] == "healthy")
        .await;
    assert_eq!(
        pathy["endpoint"],
        backend.url("/ok/<redacted>/mcp?token=<redacted>")
    );
    assert!(
        argvy["endpoint"]
            .as_str()
            .unwrap()
            .ends_with("server.sh -p <redacted> <redacted>"),
        "{argvy}"
    );
    // The server got the real path.
    assert!(
        backend
            .requests()
            .iter()
            .any(|r| r.target.contains(&format!("/ok/{SECRET}/mcp"))),
        "{:?}",
        backend.requests()
    );
    let (status, list) = m.get("/api/v1/targets").await;
    assert_eq!(status, 200);
    let list = list.to_string();
    for s in secrets {
        assert!(!list.contains(s), "{s} in /api/v1/targets: {list}");
    }
    // Every check so far, while the monitor runs: the database and its WAL.
    let db = dir.join("mcpulse.db");
    let bytes = db_bytes(&db);
    assert!(!bytes.is_empty());
    for s in secrets {
        assert!(!contains(&bytes, s), "{s} in the database (running)");
    }

    // The command sink: the down target's alert.
    let until = Instant::now() + PATIENCE;
    let sink_env = loop {
        if let Ok(t) = std::fs::read_to_string(&env_file)
            && t.contains("MCPULSE_TARGET=gone")
        {
            break t;
        }
        assert!(
            Instant::now() < until,
            "no alert ran the command:\n{}",
            m.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!sink_env.contains(SECRET_ENV), "{sink_env}");
    assert!(!sink_env.contains(SECRET), "{sink_env}");
    assert!(sink_env.lines().any(|l| l == "NO_COLOR=1"), "{sink_env}");

    m.sigterm(Duration::from_secs(5)).await;
    let bytes = db_bytes(&db);
    for s in secrets {
        assert!(!contains(&bytes, s), "{s} in the database (stopped)");
    }
    let log = m.log();
    for s in secrets {
        assert!(!log.contains(s), "{s} in the log:\n{log}");
    }
    let store = Store::open(&db).unwrap();
    let contract: Value =
        serde_json::from_str(&store.accepted_contract("pathy").unwrap().unwrap()).unwrap();
    assert_eq!(
        contract["target"],
        backend.url("/ok/<redacted>/mcp?token=<redacted>")
    );
}

/// Issue #14, item 3: a server's error message and protocol version, and an imported target's
/// name, reach the log inert. Every line of the log is one the monitor wrote (a timestamp, then
/// a level), none is forged, and no raw control, bidi or invisible character is in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_server_text_and_imported_names_reach_the_log_inert() {
    use mcpulse_testkit::scenario::HOSTILE;
    let dir = TempDir::new("monitor-hostile");
    let rejecting = FakeHttp::start_script(scenario::hostile(
        HOSTILE,
        mcpulse_testkit::mcp::LEGACY,
        true,
    ))
    .await;
    let odd_version = FakeHttp::start_script(scenario::hostile(HOSTILE, HOSTILE, false)).await;
    let imported = "imp\x1b[2J\n2026-12-01T00:00:00Z  INFO alert target=prod\u{9b}31m\u{202e}";
    let desktop = dir.join("claude_desktop_config.json");
    std::fs::write(
        &desktop,
        serde_json::to_string(
            &json!({ "mcpServers": { imported: { "url": rejecting.url("/mcp") } } }),
        )
        .unwrap(),
    )
    .unwrap();
    let config = dir.join("monitor.toml");
    write_config(
        &config,
        &config_text(
            &[
                ("rejecting", &url_target(&rejecting.url("/mcp"))),
                ("odd-version", &url_target(&odd_version.url("/mcp"))),
            ],
            None,
        ),
    );
    let mut m = Monitor::start(&dir, &config, &["--import", desktop.to_str().unwrap()]).await;
    m.wait_log("transition target=rejecting").await;
    // The import refuses such a name (control characters): the server is left out, and the
    // warning that names it is logged inert too.
    let log = m.wait_log("left out").await;
    assert!(
        log.contains("contains the control or invisible character U+001B"),
        "{log}"
    );
    m.wait_log("transition target=odd-version").await;
    m.sigterm(Duration::from_secs(5)).await;
    let log = m.log();
    for line in log.lines() {
        assert!(
            !line.chars().any(mcpulse_wire::text::is_escaped),
            "a raw control character in {line:?}"
        );
        let stamp = line.get(..20).unwrap_or("");
        assert!(
            stamp.len() == 20 && stamp.as_bytes()[4] == b'-' && stamp.as_bytes()[10] == b'T',
            "a line the monitor did not start: {line:?}\n{log}"
        );
        assert!(
            !line.starts_with("2026-12-01T00:00:00Z"),
            "a forged line: {line:?}"
        );
    }
    // The protocol version the server chose is in the reason (the finding quotes it).
    assert!(
        log.contains(
            "reason=\"protocol-version-unknown: the server chose protocol version \\\"evil"
        ),
        "{log}"
    );
    // The server's error message is in the reason: made inert when the monitor wrote the
    // check's summary (its escapes visible), then quoted by the log's logfmt (which escapes
    // their backslashes once more: a logfmt reader gets `\x1b` back).
    assert!(
        log.contains(
            "reason=\"handshake-failed: initialize was rejected: -32000 evil\\\\x1b]0;pwned\\\\x07"
        ),
        "{log}"
    );
    assert!(log.contains("\\\\n\u{2714} healthy  forged\\\\n2026-12-01T00:00:00Z  INFO alert target=prod kind=recovered\\\\r\\\\u{9b}31mred\\\\u{202e}txt.exe\\\\u{200b}"), "{log}");
}

/// Issue #14 item 7: an imported server the config would refuse is left out with a warning
/// naming the file, the server and why; the rest of the import is checked and counted.
#[test]
fn check_config_warns_about_the_imported_servers_it_leaves_out() {
    let dir = TempDir::new("check-config-import");
    let desktop = dir.join("claude_desktop_config.json");
    std::fs::write(
        &desktop,
        r#"{"mcpServers": {
            "ok": {"url": "https://mcp.example.com/mcp"},
            "esc\u001b[2J": {"url": "https://mcp.example.com/mcp"},
            "crlf": {"url": "https://mcp.example.com/mcp", "headers": {"X": "a\r\nX-Injected: 1"}}
        }}"#,
    )
    .unwrap();
    let file = dir.join("mcpulse.toml");
    std::fs::write(&file, "import = [\"claude_desktop_config.json\"]\n").unwrap();
    let (code, out, err) = check_config(&file, &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("ok: 1 target (1 http, 0 stdio)"), "{out}");
    let shown = desktop.display().to_string();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines.iter().any(|l| l.starts_with(&format!(
            "warning: import {shown}: server \"crlf\" left out: header \"X\": the value contains a line break"
        ))),
        "{err}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(&format!(
            "warning: import {shown}: server \"esc\\u{{1b}}[2J\" left out: "
        ))),
        "{err}"
    );
    assert!(!err.contains('\u{1b}'), "{err:?}");
}

/// `mcpulse check-config FILE`: exit code, stdout, stderr.
fn check_config(path: &Path, env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(BIN)
        .arg("check-config")
        .arg(path)
        .env_remove(SECRET_ENV)
        .envs(env.iter().copied())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_exit_codes_and_located_errors() {
    let dir = TempDir::new("check-config");
    let file = dir.join("mcpulse.toml");
    let shown = file.display().to_string();

    // Valid: exit 0 and a summary.
    let valid = config_text(
        &[
            ("web", "url = \"https://mcp.example.com/mcp\""),
            ("files", "command = [\"npx\", \"-y\", \"server\"]"),
        ],
        Some("https://hooks.example.com/mcp"),
    );
    std::fs::write(&file, &valid).unwrap();
    let (code, out, err) = check_config(&file, &[(SECRET_ENV, "s")]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains(&format!(
            "{shown}: ok: 2 targets (1 http, 1 stdio), 1 alert sink,"
        )),
        "{out}"
    );

    // Each invalid file: exit 1, one error on stderr naming the file, line and column (the
    // environment has no secret).
    let alerts_line = valid.lines().position(|l| l == "[[alerts]]").unwrap() + 1;
    let secret_at = format!(":{alerts_line}:1: ");
    let cases: Vec<(String, &str, &str)> = vec![
        // The valid file, but its webhook secret's variable is not set.
        (valid.clone(), &secret_at, SECRET_ENV),
        (
            "[defaults]\ninterval = \"60s\"\nintervall = \"5s\"\n".into(),
            ":3:1: ",
            "unknown field `intervall`",
        ),
        (
            "[defaults]\ntimeout = \"ten\"\n".into(),
            ":2:11: ",
            "\"ten\" is not a duration",
        ),
        (
            "[server]\nlisten = \"127.0.0.1:9477\"\n\n[[targets]]\nname = \"a\"\nurl = \"https://x\"\ninterval = \"5s\"\n"
                .into(),
            ":7:12: ",
            "timeout 10s must be below the interval 5s",
        ),
        (
            "[[targets]]\nname = \"a\"\nurl = \"ftp://x\"\n".into(),
            ":3:7: ",
            "must start with http:// or https://",
        ),
        // Issue #14 item 8: each at the value, not at 1:1.
        (
            "[defaults]\ninterval = \"60s\"\ntimeout = \"10s\"\n\n\nfailure_threshold = 0\n".into(),
            ":6:21: ",
            "failure_threshold must be at least 1",
        ),
        (
            "[server]\nlisten = \"127.0.0.1:9477\"\ntoken = \"${MCPULSE_TEST_UNSET_TOKEN}\"\n".into(),
            ":3:9: ",
            "server.token: the environment variable MCPULSE_TEST_UNSET_TOKEN is not set",
        ),
        (
            "[[targets]]\nname = \"a\"\nurl = \"https://me:hunter2@mcp.example.com/mcp\"\n".into(),
            ":3:7: ",
            "has credentials in the URL",
        ),
        (
            "[defaults]\ninterval = \"10000000000000d\"\n".into(),
            ":2:12: ",
            "is too large",
        ),
        // Issue #14 items 7 and 11.
        (
            "[[targets]]\nname = \"a\\u001b[2J\"\nurl = \"https://x\"\n".into(),
            ":2:8: ",
            "contains the control or invisible character U+001B",
        ),
        ("[server]\ntoken = \"\"\n".into(), ":2:9: ", "server.token: is empty"),
        (
            "[server]\nlisten = \"0.0.0.0:9477\"\n".into(),
            ":2:10: ",
            "beyond loopback) without a token",
        ),
        // Issue #18 item 4: synthetic calls and the health tool.
        (
            "[[targets]]\nname = \"a\"\nurl = \"https://x\"\n[[targets.call]]\ntool = \"echo\"\nexpect = [\"status == ok\"]\n".into(),
            ":6:11: ",
            "call \"echo\": expect",
        ),
        (
            "[[targets]]\nname = \"a\"\nurl = \"https://x\"\n[[targets.call]]\ntool = \"echo\"\nbudget = \"1h\"\n".into(),
            ":6:10: ",
            "must be at most the timeout",
        ),
        (
            "[[targets]]\nname = \"a\"\nurl = \"https://x\"\n[[targets.call]]\ntool = \"echo\"\nretries = 3\n".into(),
            ":6:1: ",
            "unknown field `retries`",
        ),
        (
            "[[targets]]\nname = \"a\"\ncommand = [\"srv\"]\nhealth_url = \"auto\"\n".into(),
            ":4:14: ",
            "a command target has none",
        ),
        ("this is not toml\n".into(), ":1:", ""),
    ];
    for (text, at, message) in cases {
        std::fs::write(&file, &text).unwrap();
        let (code, out, err) = check_config(&file, &[]);
        assert_eq!(code, Some(1), "{text}\n{out}{err}");
        assert!(out.is_empty(), "{out}");
        assert!(
            err.starts_with(&format!("{shown}{at}")) && err.contains(message),
            "{text}\nexpected {shown}{at}…{message}, got {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(!err.contains("hunter2") && !err.contains('\u{1b}'), "{err}");
    }

    // Not UTF-8: located at the bad byte, not at 0:0.
    std::fs::write(&file, b"[server]\nlisten = \"caf\xe9\"\n").unwrap();
    let (code, _, err) = check_config(&file, &[]);
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with(&format!("{shown}:2:14: the config is not UTF-8")),
        "{err}"
    );

    // A file that is not there: exit 1, said so.
    let (code, _, err) = check_config(&dir.join("missing.toml"), &[]);
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with(&format!(
            "{}: cannot read the config",
            dir.join("missing.toml").display()
        )),
        "{err}"
    );
}

// ---- memory ----------------------------------------------------------------------------------

/// A memory figure of the monitor's from `/proc/PID/status`, in bytes: `VmHWM` (its peak, its
/// own since its `exec`) or `VmRSS` (now).
fn rss(pid: i32, field: &str) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

fn peak_rss(pid: i32) -> usize {
    rss(pid, "VmHWM")
}

/// 64 `/probe`s at once (the count limit) of a server whose `tools/list` is 88,000 tiny objects
/// in one schema (a DOM many times its 1 MiB, and the contract's copy of it): the monitor holds no
/// more than its probe memory budget (docs/monitor.md, "Memory"), each request is answered (a
/// verdict, or 503 when no slot came within the scrape budget), and the monitor stays up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_hostile_probes_at_once_stay_within_the_memory_budget() {
    let properties = scenario::fill(1 << 20, |i| format!(r#""p{i}":{{}}"#));
    let server = FakeHttp::start_script(scenario::tools_pages(vec![format!(
        r#"{{"name":"t","inputSchema":{{"type":"object","properties":{{{properties}}}}}}}"#
    )]))
    .await;
    let dir = TempDir::new("hostile-probes");
    let config = dir.join("mcpulse.toml");
    let target = format!(
        "{}\ninterval = \"1h\"\ntimeout = \"60s\"\nera = \"modern\"",
        url_target(&server.url("/mcp"))
    );
    write_config(&config, &config_text(&[("hostile", &target)], None));
    let m = Monitor::start(&dir, &config, &[]).await;
    let before = peak_rss(m.pid());
    let mut probes = JoinSet::new();
    for _ in 0..64 {
        let api = m.api;
        probes.spawn(async move {
            http_get_within(api, "/probe?target=hostile", Duration::from_secs(90)).await
        });
    }
    let mut answered = Vec::new();
    while let Some(r) = probes.join_next().await {
        let (status, body) = r
            .unwrap()
            .unwrap_or_else(|| panic!("a /probe got no answer:\n{}", m.log()));
        answered.push(status);
        if status == 200 {
            assert!(body.contains("\nprobe_success 1"), "{body}");
        }
    }
    let peak = peak_rss(m.pid());
    let after = rss(m.pid(), "VmRSS");
    println!(
        "monitor peak RSS {:.1} MiB (at start {:.1} MiB, {:.1} MiB after) for 64 concurrent hostile /probe: {} answered 200, {} 503",
        peak as f64 / (1 << 20) as f64,
        before as f64 / (1 << 20) as f64,
        after as f64 / (1 << 20) as f64,
        answered.iter().filter(|s| **s == 200).count(),
        answered.iter().filter(|s| **s == 503).count(),
    );
    assert!(
        answered.iter().all(|s| *s == 200 || *s == 503),
        "{answered:?}"
    );
    assert!(answered.contains(&200), "{answered:?}");
    let bound = mcpulse_monitor::memory::DEFAULT_PROBE_MEMORY + (64 << 20);
    assert!(peak < bound, "peak {peak} bytes, over {bound}");
    assert_eq!(m.get("/livez").await.0, 200);
}

/// A scheduled check of a server whose contract is large (9,000 tools with long descriptions,
/// 8 MiB): the store keeps its outline (keys and digests), not the definitions, so the
/// database and its WAL stay small (one such check once wrote ~110 MB into each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_contract_is_stored_as_its_outline() {
    let description = "d".repeat(880);
    let tools = scenario::fill(8 << 20, |i| {
        format!(
            r#"{{"name":"t{i}","description":"{description}","inputSchema":{{"type":"object"}}}}"#
        )
    });
    let server = FakeHttp::start_script(scenario::tools_pages(vec![tools])).await;
    let dir = TempDir::new("large-contract");
    let config = dir.join("mcpulse.toml");
    // Checked once within the test's patience (a name whose first check comes early), with
    // time to read 8 MiB in a debug build.
    let interval = Duration::from_secs(10);
    let name = (0..1000)
        .map(|i| format!("large-{i}"))
        .find(|n| phase(n, interval) < Duration::from_secs(1))
        .unwrap();
    let target = format!(
        "{}\ninterval = \"10s\"\ntimeout = \"9s\"\nera = \"modern\"",
        url_target(&server.url("/mcp"))
    );
    write_config(&config, &config_text(&[(&name, &target)], None));
    let m = Monitor::start(&dir, &config, &[]).await;
    let checks = m.wait_checks(&name, 0, 1).await;
    let v = m.target(&name).await;
    assert!(v.to_string().contains("sha256:"), "no contract digest: {v}");
    let size = |name: &str| std::fs::metadata(dir.join(name)).map_or(0, |m| m.len());
    let written = size("mcpulse.db") + size("mcpulse.db-wal");
    println!(
        "after {} check(s) of a server with an 8 MiB contract: {:.2} MiB in mcpulse.db and its WAL, peak RSS {:.1} MiB",
        checks.len(),
        written as f64 / (1 << 20) as f64,
        peak_rss(m.pid()) as f64 / (1 << 20) as f64
    );
    assert!(written < 4 << 20, "{written} bytes written");
}

/// `mcpulse demo` with its port taken: an error naming `--listen`, before any banner is printed
/// or any demo server started.
#[test]
fn demo_on_a_busy_port_names_the_flag_before_the_banner() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let out = std::process::Command::new(BIN)
        .args(["demo", "--listen", &addr])
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    assert!(
        stderr.contains(&addr) && stderr.contains("--listen"),
        "{stderr}"
    );
    assert!(!stderr.contains("[server]"), "{stderr}");
    assert!(stdout.is_empty(), "the banner was printed: {stdout}");

    // Beyond loopback (the demo's API has no token): refused the same way, before the banner.
    let out = std::process::Command::new(BIN)
        .args(["demo", "--listen", "0.0.0.0:0"])
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("--listen 127.0.0.1:PORT"), "{stderr}");
    assert!(out.stdout.is_empty(), "the banner was printed");
}

/// `mcpulse supervise --listen ADDR -- SERVER` with a client on its stdio that has initialized
/// the session (the supervisor is `STARTING` until the client's handshake), killed on drop.
async fn supervised(dir: &TempDir, port: u16, extra: &[&str]) -> tokio::process::Child {
    let script = StdioScript::legacy()
        .at_start(mcpulse_testkit::Act::RecordPid(dir.join("pids")))
        .write(dir, "s.sh");
    let listen = format!("127.0.0.1:{port}");
    let mut child = tokio::process::Command::new(BIN)
        .args(["supervise", "--listen", &listen])
        .args(extra)
        .args(["--", "sh", script.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let stdin = child.stdin.as_mut().unwrap();
    stdin
        .write_all(format!("{init}\n{note}\n").as_bytes())
        .await
        .unwrap();
    child
}

/// A health-only target (issue #17 item 6): the monitor watches a stdio server run by `mcpulse
/// supervise --listen` through its `/readyz` alone. The child killed with no restart left
/// (FATAL, 503): one page naming the state; a fresh supervisor on the same port: one resolve.
/// The view says kind `health`, and no MCP era or contract is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_only_target_follows_a_supervised_server_down_and_back() {
    let dir = TempDir::new("monitor-health-only");
    // The supervisor takes a fixed address: a port free a moment ago.
    let port = free_port();
    let readyz = format!("http://127.0.0.1:{port}/readyz");
    let mut sup = supervised(&dir, port, &["--max-restarts", "0"]).await;
    let hook = Receiver::start(true).await;
    let config = dir.join("monitor.toml");
    write_config(
        &config,
        &config_text(
            &[("sup", &format!("health_url = \"{readyz}\""))],
            Some(&hook.url()),
        ),
    );
    let m = Monitor::start(&dir, &config, &[]).await;
    let view = m
        .wait_target("sup", "healthy", |v| v["status"] == "healthy")
        .await;
    assert_eq!(view["kind"], "health", "{view}");
    assert_eq!(view["endpoint"], readyz.as_str(), "{view}");

    // The child dies and no restart is allowed: FATAL, /readyz answers 503. One page for the
    // target, one for the component that says why (`child:state`).
    let pids = read_pids_within(&dir.join("pids")).await;
    mcpulse_testkit::stdio::kill(&pids);
    let status_key = dedup_key("sup", "status");
    let component_key = dedup_key("sup", "component:child:state");
    let keyed = |key: &str, action: &str| {
        let (key, action) = (key.to_owned(), action.to_owned());
        move |d: &Delivery| d.field("dedup_key") == key && d.field("action") == action
    };
    let pages = hook.wait_accepted(2, PATIENCE).await;
    let trigger = pages.iter().find(|d| keyed(&status_key, "trigger")(d));
    let trigger = trigger.unwrap_or_else(|| panic!("no target page: {:?}", hook.all()));
    assert_eq!(trigger.field("kind"), "down");
    assert!(
        trigger.field("summary").contains("health-endpoint-down"),
        "{}",
        trigger.body
    );
    trigger.assert_signed();
    assert!(
        pages.iter().any(keyed(&component_key, "trigger")),
        "no component page: {:?}",
        hook.all()
    );
    let view = m
        .wait_target("sup", "down", |v| v["status"] == "down")
        .await;
    assert!(
        view["components"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["name"] == "child:state")),
        "{view}"
    );

    // A fresh supervisor on the same port: back up, each page resolved once.
    sup.kill().await.unwrap();
    sup.wait().await.unwrap();
    let _sup = supervised(&dir, port, &[]).await;
    hook.wait_accepted(4, PATIENCE).await;
    let view = m
        .wait_target("sup", "healthy again", |v| v["status"] == "healthy")
        .await;
    assert!(view["last"]["era"].is_null(), "no MCP era: {view}");
    assert!(view["last"]["contract_digest"].is_null(), "{view}");
    // /metrics: its status and probe series as any target's, no contract series.
    let (status, metrics) = http_get(m.api, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    let of = |name: &str| {
        metrics
            .lines()
            .any(|l| l.starts_with(name) && l.contains("target=\"sup\""))
    };
    assert!(
        of("mcpulse_probe_success") && of("mcpulse_target_status"),
        "{metrics}"
    );
    assert!(!of("mcpulse_contract"), "{metrics}");
    let n = m.history("sup").await.len();
    m.wait_checks("sup", n, 2).await;
    // Each page (the target's, and one per unhealthy component: `child:state`, and
    // `restarts:count`, a warning since it gave up) triggered once and resolved once.
    let bodies: Vec<Value> = hook.accepted().into_iter().map(|d| d.body).collect();
    let mut keys: Vec<&str> = bodies
        .iter()
        .filter_map(|b| b["dedup_key"].as_str())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    assert!(keys.contains(&status_key.as_str()) && keys.contains(&component_key.as_str()));
    for key in keys {
        let actions: Vec<&str> = bodies
            .iter()
            .filter(|b| b["dedup_key"] == key)
            .filter_map(|b| b["action"].as_str())
            .collect();
        assert_eq!(actions, ["trigger", "resolve"], "{key}: {bodies:?}");
    }
}

/// The pids a scripted server recorded (bounded wait for the first).
async fn read_pids_within(file: &Path) -> Vec<u32> {
    let until = Instant::now() + PATIENCE;
    loop {
        let pids = mcpulse_testkit::stdio::read_pids(file);
        if !pids.is_empty() {
            return pids;
        }
        assert!(Instant::now() < until, "no pid in {}", file.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// docs/status-page.md's first commands, as a newcomer runs them: `mcpulse demo` prints the
/// status page's address, `/` serves the fleet view (HTML, with its CSP) naming the demo's
/// targets, and a target's status badge is SVG.
#[tokio::test]
async fn the_status_page_docs_commands_work_against_the_demo() {
    use tokio::io::AsyncBufReadExt;
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut demo = tokio::process::Command::new(BIN)
        .args(["demo", "--listen", &addr.to_string()])
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(demo.stdout.take().unwrap()).lines();
    let status_line = tokio::time::timeout(PATIENCE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("status ") {
                return line;
            }
        }
        panic!("the demo exited without its status line");
    })
    .await
    .expect("the banner in time");
    assert!(
        status_line.contains(&format!("http://{addr}/")),
        "{status_line}"
    );
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    // The banner comes as the monitor starts; its listener follows.
    let until = Instant::now() + PATIENCE;
    while TcpStream::connect(addr).await.is_err() {
        assert!(
            Instant::now() < until,
            "the demo's monitor never listened on {addr}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let page = mcpulse_testkit::http::get(addr, "/").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.header("content-security-policy").is_some());
    assert!(page.body.contains("flaky"), "{}", page.body);
    let until = Instant::now() + PATIENCE;
    let badge = loop {
        let b = mcpulse_testkit::http::get(addr, "/badges/flaky/status.svg").await;
        if b.status == 200 || Instant::now() > until {
            break b;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(badge.status, 200, "{}", badge.body);
    assert!(
        badge
            .header("content-type")
            .is_some_and(|t| t.starts_with("image/svg+xml")),
        "{:?}",
        badge.headers
    );
    assert!(badge.body.starts_with("<svg"), "{}", badge.body);
    // SAFETY: kill(2) on our own child's pid; no memory is touched.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(i32::try_from(demo.id().unwrap()).unwrap(), libc::SIGTERM) };
    assert_eq!(rc, 0);
    let status = tokio::time::timeout(PATIENCE, demo.wait())
        .await
        .expect("the demo exits on SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
}

// ---- accepting a new baseline ----------------------------------------------------------------

/// The API token of the accept test's monitor.
const API_TOKEN: &str = "api-token-7c1e5b";

/// `method path` with an optional bearer: the status and the body as JSON (a string when it
/// is not JSON).
async fn api_call(addr: SocketAddr, method: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let chunked = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

/// The target's view, read with the token, once `pred` holds.
async fn view_when(m: &Monitor, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + PATIENCE;
    loop {
        let (status, v) = api_call(m.api, "GET", "/api/v1/targets/svc", Some(API_TOKEN)).await;
        if status == 200 && pred(&v) {
            return v;
        }
        assert!(Instant::now() < until, "svc never {what}: {v}\n{}", m.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `mcpulse monitor accept svc` against `m`: exit code, stdout, stderr.
fn accept_cli(config: &Path, m: &Monitor) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(BIN)
        .args(["monitor", "accept", "svc", "--config"])
        .arg(config)
        .args(["--url", &format!("http://{}", m.api), "--wait", "10s"])
        .env(SECRET_ENV, SECRET)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Review of c75cf77: `mcpulse monitor accept` accepts a server added with `--import` (the
/// command had no `--import` and looked the name up in the file alone, so it refused every
/// imported server): the target is looked up by the running monitor's API, and a name it does
/// not know is its 404 (exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_takes_a_server_added_with_import() {
    let dir = TempDir::new("monitor-accept-import");
    let backend = healthy_backend().await;
    let desktop = dir.join("claude_desktop_config.json");
    std::fs::write(
        &desktop,
        serde_json::to_string(&json!({ "mcpServers": { "desk": { "url": backend.url("/mcp") } } }))
            .unwrap(),
    )
    .unwrap();
    let config = dir.join("monitor.toml");
    write_config(
        &config,
        &format!(
            "[server]\ntoken = \"{API_TOKEN}\"\n\n{}",
            config_text(&[("own", &url_target(&backend.url("/mcp")))], None)
        ),
    );
    let m = Monitor::start(&dir, &config, &["--import", desktop.to_str().unwrap()]).await;
    let until = Instant::now() + PATIENCE;
    loop {
        let (_, v) = api_call(m.api, "GET", "/api/v1/targets/desk", Some(API_TOKEN)).await;
        if v["status"] == "healthy" {
            break;
        }
        assert!(
            Instant::now() < until,
            "desk never healthy: {v}\n{}",
            m.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let accept = |name: &str| {
        let out = std::process::Command::new(BIN)
            .args(["monitor", "accept", name, "--config"])
            .arg(&config)
            .args(["--url", &format!("http://{}", m.api), "--wait", "10s"])
            .env(SECRET_ENV, SECRET)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = accept("desk");
    assert_eq!(code, Some(0), "{out}{err}\n{}", m.log());
    assert_eq!(out.trim(), "desk: its current contract is the baseline now");
    let (code, out, err) = accept("nope");
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("the monitor refused (HTTP 404): no target named \"nope\""),
        "{err}"
    );
}

/// The stored baseline of `svc`, as the store keeps it.
fn stored_baseline(db: &Path) -> Option<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("SELECT contract FROM targets WHERE name = 'svc'", [], |r| {
        r.get(0)
    })
    .unwrap()
}

/// After a planned change of a server's tools, `mcpulse monitor accept` makes its current
/// contract the baseline through the running monitor's API: the breaking drift's incident
/// resolves (its resolve reaches the webhook), the stored baseline is the new contract, and
/// later checks raise nothing. The call needs the token (a wrong one is 401). Then a stored
/// baseline that cannot be read: after a restart the monitor says so in the target's view and
/// judges no drift, and does not overwrite it with whatever the server serves, until an accept
/// replaces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepting_the_current_contract_resolves_the_drift_and_replaces_an_unreadable_baseline() {
    use mcpulse_testkit::tools;
    let dir = TempDir::new("monitor-accept");
    let version = Arc::new(AtomicUsize::new(0));
    let without = |name: &str| {
        let mut c = tools::catalogue("ok");
        c.retain(|t| t.tool["name"] != name);
        assert_eq!(c.len() + 1, tools::catalogue("ok").len(), "{name}");
        tools::http_server(c)
    };
    let server = FakeHttp::start_script(scenario::shifting(
        vec![
            tools::http_server(tools::catalogue("ok")),
            without("weather"),
            without("ping_db"),
        ],
        version.clone(),
    ))
    .await;
    let hook = Receiver::start(true).await;
    let config = dir.join("monitor.toml");
    write_config(
        &config,
        &format!(
            "[server]\ntoken = \"{API_TOKEN}\"\n\n{}",
            config_text(
                &[("svc", &url_target(&server.url("/mcp")))],
                Some(&hook.url())
            )
        ),
    );
    let db = dir.join("mcpulse.db");
    let mut m = Monitor::start(&dir, &config, &[]).await;
    view_when(&m, "healthy", |v| v["status"] == "healthy").await;

    // A tool removed: breaking drift, one page.
    version.store(1, Ordering::SeqCst);
    let drift_key = dedup_key("svc", "drift");
    let about_drift = |action: &str| {
        hook.accepted()
            .into_iter()
            .filter(|d| d.field("dedup_key") == drift_key && d.field("action") == action)
            .count()
    };
    view_when(&m, "drifting", |v| v["drift"] == "breaking").await;
    let until = Instant::now() + PATIENCE;
    while about_drift("trigger") == 0 {
        assert!(Instant::now() < until, "no drift page: {:?}", hook.all());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Without the token, or with a wrong one: refused, nothing pending.
    let accept_path = "/api/v1/targets/svc/accept";
    let (status, v) = api_call(m.api, "POST", accept_path, None).await;
    assert_eq!(status, 401, "{v}");
    let (status, v) = api_call(m.api, "POST", accept_path, Some("wrong")).await;
    assert_eq!(status, 401, "{v}");
    let (status, v) = api_call(
        m.api,
        "POST",
        "/api/v1/targets/nope/accept",
        Some(API_TOKEN),
    )
    .await;
    assert_eq!(status, 404, "{v}");
    let (_, v) = api_call(m.api, "GET", "/api/v1/targets/svc", Some(API_TOKEN)).await;
    assert!(v.get("accept_pending").is_none(), "{v}");

    // Accepted through the CLI: the incident resolves, and the baseline is the new contract.
    let (code, out, err) = accept_cli(&config, &m);
    assert_eq!(code, Some(0), "{out}{err}\n{}", m.log());
    assert_eq!(
        out.trim(),
        "svc: its current contract is the baseline now; the breaking drift is accepted and its incident resolved"
    );
    let view = view_when(&m, "without its drift incident", |v| {
        v["drift"].is_null()
            && !v["incidents"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["family"] == "drift")
    })
    .await;
    assert!(view.get("accept_pending").is_none(), "{view}");
    let until = Instant::now() + PATIENCE;
    while about_drift("resolve") == 0 {
        assert!(Instant::now() < until, "no drift resolve: {:?}", hook.all());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let baseline = stored_baseline(&db).expect("a baseline");
    assert!(
        !baseline.contains("\"weather\"") && baseline.contains("\"ping_db\""),
        "{baseline}"
    );
    // Later checks judge against it: nothing new.
    let n = api_call(
        m.api,
        "GET",
        "/api/v1/targets/svc/history?limit=1000",
        Some(API_TOKEN),
    )
    .await
    .1["items"]
        .as_array()
        .unwrap()
        .len();
    let until = Instant::now() + PATIENCE;
    loop {
        let (_, h) = api_call(
            m.api,
            "GET",
            "/api/v1/targets/svc/history?limit=1000",
            Some(API_TOKEN),
        )
        .await;
        if h["items"].as_array().unwrap().len() >= n + 2 {
            break;
        }
        assert!(Instant::now() < until, "no more checks");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!((about_drift("trigger"), about_drift("resolve")), (1, 1));
    m.sigterm(Duration::from_secs(10)).await;

    // A stored baseline that cannot be read.
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute(
            "UPDATE targets SET contract = '{\"not\": \"a baseline\"}' WHERE name = 'svc'",
            [],
        )
        .unwrap();
    }
    // The server changes while the monitor is down: against the real baseline that would be
    // breaking drift (ping_db removed), against none it would be taken as the baseline.
    version.store(2, Ordering::SeqCst);
    let m = Monitor::start(&dir, &config, &[]).await;
    let view = view_when(&m, "showing the baseline error", |v| {
        v["baseline_error"]
            .as_str()
            .is_some_and(|e| e.starts_with("the stored baseline cannot be parsed"))
    })
    .await;
    assert!(view["drift"].is_null(), "{view}");
    assert!(
        m.log()
            .contains("drift is not judged until a contract is accepted again"),
        "{}",
        m.log()
    );
    let (_, h) = api_call(
        m.api,
        "GET",
        "/api/v1/targets/svc/history?limit=1000",
        Some(API_TOKEN),
    )
    .await;
    let n = h["items"].as_array().unwrap().len();
    let until = Instant::now() + PATIENCE;
    loop {
        let (_, h) = api_call(
            m.api,
            "GET",
            "/api/v1/targets/svc/history?limit=1000",
            Some(API_TOKEN),
        )
        .await;
        if h["items"].as_array().unwrap().len() >= n + 3 {
            break;
        }
        assert!(Instant::now() < until, "no more checks");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        stored_baseline(&db).as_deref(),
        Some("{\"not\": \"a baseline\"}"),
        "not overwritten"
    );
    assert_eq!(about_drift("trigger"), 1, "no drift judged");

    // An accept replaces it.
    let (code, out, err) = accept_cli(&config, &m);
    assert_eq!(code, Some(0), "{out}{err}\n{}", m.log());
    view_when(&m, "without the baseline error", |v| {
        v.get("baseline_error").is_none()
    })
    .await;
    let baseline = stored_baseline(&db).expect("a baseline");
    assert!(
        baseline.contains("\"weather\"") && !baseline.contains("\"ping_db\""),
        "{baseline}"
    );
}
