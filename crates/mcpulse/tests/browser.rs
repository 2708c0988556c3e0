//! The status page in a real browser: headless Chromium (Debian's `chromium`, installed by
//! scripts/ci-packages.sh) driven over the DevTools protocol by playwright-core (npm, installed
//! by scripts/interop-setup.sh into target/interop/browser), from the node script
//! tests/browser/status_page.cjs. One browser launch for every scenario.
//!
//! The monitor runs over the demo fleet (the demo's own config, its timers and check interval
//! scaled down to one check a second, its switches forced so that every state shows quickly),
//! plus a hostile stdio server whose server name and tool description carry markup and script,
//! and a maintenance window; a second monitor has a `[server] token`, for the sign-in form and
//! its cookie. Screenshots are written under target/tmp/browser/ (the path is
//! printed). A missing Chromium or playwright-core fails the test with the setup hint.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/installs.rs"]
mod installs;

use mcpulse_demo::{DriftStage, FleetOptions, Kind, demo_config, start_fleet_with};
use mcpulse_monitor::daemon::{self, Options};
use mcpulse_testkit::stdio::{Act, StdioScript, TempDir, read_pids, still_running_after};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

const CHROMIUM: &str = "/usr/bin/chromium";
/// The second monitor's `[server] token`.
const TOKEN: &str = "browser-s3cret";
const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
/// The states the fleet page must show (each as a count and as a pill in a row).
const STATES: [&str; 6] = [
    "healthy",
    "degraded",
    "down",
    "drifted",
    "flapping",
    "maintenance",
];
/// What the hostile server says its name is, and how it describes its tool.
const HOSTILE_NAME: &str = "<script>window.__pwned=1;alert('name')</script>";
const HOSTILE_DESCRIPTION: &str =
    "<img src=x onerror=\"window.__pwned=1;alert('description')\"><b>bold</b>";

/// playwright-core in target/interop/browser.
fn playwright() -> PathBuf {
    installs::installed("browser/node_modules/playwright-core/package.json");
    installs::interop_dir().join("browser/node_modules/playwright-core")
}

/// Where the screenshots go: under target/, printed by the test.
fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// A stdio server whose name and tool description are markup and script.
fn hostile_server(dir: &TempDir, pids: &Path) -> PathBuf {
    let mut init = mcpulse_testkit::mcp::initialize_result(mcpulse_testkit::mcp::LEGACY);
    init["serverInfo"] = json!({ "name": HOSTILE_NAME, "version": "1.0<i>x</i>" });
    let tools = json!([{
        "name": "lookup",
        "description": HOSTILE_DESCRIPTION,
        "inputSchema": { "type": "object", "properties": { "q": { "type": "string", "description": "</pre><script>alert('schema')</script>" } } },
    }]);
    StdioScript::new()
        .at_start(Act::RecordPid(pids.to_path_buf()))
        .on("initialize", vec![Act::Result(init)])
        .on("tools/list", vec![Act::Result(json!({ "tools": tools }))])
        .write(dir, "hostile.sh")
}

/// The monitor's view of every target, by name.
async fn targets(addr: SocketAddr) -> Vec<Value> {
    let r = mcpulse_testkit::http::get(addr, "/api/v1/targets").await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["targets"].as_array().cloned().unwrap_or_default()
}

fn find<'a>(ts: &'a [Value], name: &str) -> &'a Value {
    ts.iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no target {name} in {ts:?}"))
}

/// Waits for `want` to hold of the monitor's targets, checking every 100 ms, at most `bound`.
async fn until(addr: SocketAddr, bound: Duration, what: &str, want: impl Fn(&[Value]) -> bool) {
    let start = Instant::now();
    loop {
        let ts = targets(addr).await;
        if want(&ts) {
            return;
        }
        assert!(
            start.elapsed() < bound,
            "{what} not within {bound:?}: {:#}",
            Value::Array(ts)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The monitor daemon in this process on `addr`, until the sender is used (or dropped).
fn spawn_monitor(
    config: PathBuf,
    addr: SocketAddr,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), daemon::MonitorError>>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = Options {
        listen: Some(addr),
        ..Options::default()
    };
    let task = tokio::spawn(daemon::run(config, options, async move {
        let _ = stopped.await;
    }));
    (stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_in_headless_chromium() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: run scripts/ci-packages.sh (as root) first"
    );
    let playwright = playwright();
    let started = Instant::now();

    // The demo's fleet, five times faster: the monitor checks every second.
    let defaults = FleetOptions::new(Vec::new());
    let options = FleetOptions {
        stdio_command: vec![BIN.to_owned(), "demo-server".into(), "stdio".into()],
        slow_delay: defaults.slow_delay / 5,
        flaky_up: defaults.flaky_up / 5,
        flaky_down: defaults.flaky_down / 5,
        drift_every: defaults.drift_every / 5,
        shift_every: defaults.shift_every / 5,
        check_every: Duration::from_secs(1),
    };
    let fleet = start_fleet_with(options).await.unwrap();
    // Pinned, then moved by the test: healthy until told otherwise, the original contract first.
    fleet.flaky().force(Some(true));
    fleet.drift().force(Some(DriftStage::Original));

    let dir = TempDir::new("browser");
    let pids = dir.join("hostile.pids");
    let hostile = hostile_server(&dir, &pids);
    let addr = free_addr();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut config = demo_config(&fleet, dir.path(), addr, None);
    config.push_str(&format!(
        "\n# A server whose name and tool description are markup and script.\n\
         [[targets]]\nname = \"hostile\"\ncommand = [\"sh\", {:?}]\n\
         \n[[maintenance]]\ntargets = [\"healthy-legacy\"]\nstart = {:?}\nend = {:?}\n",
        hostile.to_str().unwrap(),
        mcpulse_wire::units::format_rfc3339(now - 3_600_000),
        mcpulse_wire::units::format_rfc3339(now + 3_600_000),
    ));
    let config_path = dir.join("mcpulse.toml");
    std::fs::write(&config_path, config).unwrap();
    let (stop, monitor) = spawn_monitor(config_path, addr);

    // A second monitor, with a token, over one of the demo's servers: the sign-in flow.
    let token_addr = free_addr();
    let token_config = dir.join("token.toml");
    std::fs::write(
        &token_config,
        format!(
            "[server]\nlisten = \"{token_addr}\"\ntoken = \"{TOKEN}\"\n\n[storage]\npath = {:?}\n\n\
             [[targets]]\nname = \"healthy-modern\"\nurl = {:?}\ninterval = \"1s\"\ntimeout = \"600ms\"\n",
            dir.join("token.db").to_str().unwrap(),
            fleet.url(Kind::HealthyModern).unwrap(),
        ),
    )
    .unwrap();
    let (stop_token, token_monitor) = spawn_monitor(token_config, token_addr);
    for (a, m) in [(addr, &monitor), (token_addr, &token_monitor)] {
        let listening = Instant::now();
        while tokio::net::TcpStream::connect(a).await.is_err() {
            assert!(!m.is_finished(), "the monitor on {a} stopped at start");
            assert!(
                listening.elapsed() < Duration::from_secs(10),
                "a monitor never listened on {a}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // Every state: the contract accepted, then drifting changes it (breaking); flaky goes down
    // and up until the monitor calls it flapping, and is left down.
    until(
        addr,
        Duration::from_secs(20),
        "a first check of every target",
        |ts| ts.iter().all(|t| !t["last"].is_null()),
    )
    .await;
    fleet.drift().force(Some(DriftStage::ParameterAdded));
    let flap_start = Instant::now();
    let mut up = true;
    loop {
        let ts = targets(addr).await;
        let flaky = find(&ts, "flaky");
        if flaky["flapping"] == true && !up && flaky["status"] == "down" {
            break;
        }
        let want = if up { "healthy" } else { "down" };
        if flaky["status"] == want {
            up = !up;
            fleet.flaky().force(Some(up));
        }
        assert!(
            flap_start.elapsed() < Duration::from_secs(40),
            "flaky never flapping: {flaky:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    until(addr, Duration::from_secs(10), "drifting drifted", |ts| {
        !find(ts, "drifting")["drift"].is_null()
    })
    .await;
    let ready_after = started.elapsed();

    // The browser.
    let cfg = json!({
        "base": format!("http://{addr}"),
        "playwright": playwright,
        "chromium": CHROMIUM,
        "artifacts": artifacts(),
        "hostile": { "target": "hostile", "shown": [HOSTILE_NAME, HOSTILE_DESCRIPTION] },
        "live": "flaky",
        "drifting": "drifting",
        "interval_ms": 1000,
        "states": STATES,
        "token": { "base": format!("http://{token_addr}"), "token": TOKEN },
    });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/status_page.cjs");
    let mut node = tokio::process::Command::new("node")
        .arg(&script)
        .arg(cfg.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("node is on PATH");
    let mut stdin = node.stdin.take().unwrap();
    let mut lines = tokio::io::BufReader::new(node.stdout.take().unwrap()).lines();
    let mut report = Vec::new();
    let browsing = Instant::now();
    let run = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            eprintln!("browser: {line}");
            let answer: &[u8] = match line.as_str() {
                // Bring flaky up (it is down after flapping) before the page opens ...
                "want live up" => {
                    fleet.flaky().force(Some(true));
                    until(addr, Duration::from_secs(10), "flaky healthy again", |ts| {
                        find(ts, "flaky")["status"] == "healthy"
                    })
                    .await;
                    b"up\n"
                }
                // ... and take it down while the page is open.
                "ready live" => {
                    fleet.flaky().force(Some(false));
                    b"go\n"
                }
                _ => b"",
            };
            if !answer.is_empty() {
                stdin.write_all(answer).await.unwrap();
                stdin.flush().await.unwrap();
            }
            report.push(line);
        }
    };
    let finished = tokio::time::timeout(Duration::from_secs(90), run).await;
    let status = node.wait().await.unwrap();
    let browse_time = browsing.elapsed();

    let _ = stop.send(());
    let _ = stop_token.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), monitor).await;
    let _ = tokio::time::timeout(Duration::from_secs(10), token_monitor).await;
    fleet.shutdown().await;
    let left = still_running_after(&read_pids(&pids), Duration::from_secs(5));
    mcpulse_testkit::stdio::kill(&left);

    eprintln!(
        "browser: states ready after {ready_after:?}, browser scenarios took {browse_time:?}; screenshots in {}",
        artifacts().display()
    );
    assert!(finished.is_ok(), "the browser script hung: {report:#?}");
    assert!(status.success(), "the browser script failed: {report:#?}");
    for scenario in [
        "launch",
        "every-state",
        "drift-and-chart",
        "hostile-inert",
        "keyboard",
        "live",
        "token",
    ] {
        assert!(
            report
                .iter()
                .any(|l| l.starts_with(&format!("ok {scenario} "))),
            "no result for {scenario}: {report:#?}"
        );
    }
    assert!(
        left.is_empty(),
        "the hostile server outlived the monitor: {left:?}"
    );
    assert!(!read_pids(&pids).is_empty(), "the hostile server never ran");
}
