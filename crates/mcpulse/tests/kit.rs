#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! mcpulse-kit's proof (#23, "Tests and proof"), against its example server
//! (crates/mcpulse-kit/examples/kit_server.rs, included here as a module and served in-process
//! on a loopback port):
//!
//! - `mcpulse probe` grades it A, reads its `health_check` tool and its `/readyz`, and its
//!   findings carry the dependency's detail;
//! - `mcpulse monitor` watching it (health_url = its `/readyz`): breaking the critical TCP
//!   dependency turns `/readyz` to 503 and the monitor's verdict to down, breaking the
//!   non-critical flag dependency turns it degraded, each naming the dependency; mending them
//!   brings it back to healthy;
//! - the official conformance suite's server scenarios pass on the example as well as on the
//!   same tools on a plain rmcp server (`--plain`), run side by side.

#[path = "../../mcpulse-kit/examples/kit_server.rs"]
mod example;
#[path = "support/installs.rs"]
mod installs;

use installs::{installed, path_str, scratch};
use mcpulse_testkit::run::{Run, run};
use mcpulse_testkit::stdio::TempDir;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
const BOUND: Duration = Duration::from_secs(30);

/// The TCP dependency: a listener the test holds on a port of its own, accepting and dropping
/// connections; stopping it refuses them, restoring it binds the same port again.
struct Dependency {
    /// Held while the dependency is down too: no other test is handed the port meanwhile.
    port: mcpulse_testkit::port::KeptPort,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Dependency {
    async fn start() -> Dependency {
        let port = mcpulse_testkit::port::KeptPort::new();
        let l = port.listen();
        Dependency {
            port,
            task: Some(Self::accept(l)),
        }
    }
    fn accept(l: tokio::net::TcpListener) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                drop(s);
            }
        })
    }
    async fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
    }
    async fn restore(&mut self) {
        let l = self.port.listen();
        self.task = Some(Self::accept(l));
    }
}

impl Drop for Dependency {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

async fn start_example(dep: &Dependency, flag: &std::path::Path, plain: bool) -> example::Running {
    example::serve(example::Options {
        listen: "127.0.0.1:0".parse().unwrap(),
        db: format!("127.0.0.1:{}", dep.port.port()).parse().unwrap(),
        broken_flag: flag.to_owned(),
        plain,
        check_every: Duration::from_millis(200),
    })
    .await
    .unwrap()
}

async fn get(addr: std::net::SocketAddr, path: &str) -> mcpulse_testkit::http::Response {
    mcpulse_testkit::http::get(addr, path).await
}

async fn wait_readyz(addr: std::net::SocketAddr, status: u16) -> Value {
    let until = std::time::Instant::now() + BOUND;
    loop {
        let r = get(addr, "/readyz").await;
        if r.status == status {
            return r.json();
        }
        assert!(
            std::time::Instant::now() < until,
            "/readyz not {status}: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn probe(url: &str, readyz: &str) -> Value {
    let out = tokio::time::timeout(
        BOUND,
        tokio::process::Command::new(BIN)
            .args([
                "probe",
                "--json",
                "--health-tool",
                "health_check",
                "--health-url",
                readyz,
                url,
            ])
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("the probe ended in time")
    .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_grades_the_example_a_and_reads_its_health_tool_and_dependencies() {
    let dir = TempDir::new("kit-probe");
    let flag = dir.join("flags-broken");
    let dep = Dependency::start().await;
    let ex = start_example(&dep, &flag, false).await;
    wait_readyz(ex.addr, 200).await;
    let readyz = format!("http://{}/readyz", ex.addr);
    let report = probe(&ex.url(), &readyz).await;
    assert_eq!(report["status"], "healthy", "{report}");
    assert_eq!(
        report["grade"], "A",
        "Origin validated by server_config(): {report}"
    );
    assert_eq!(report["tool_count"], 4, "{report}");
    let call = &report["calls"][0];
    assert_eq!(
        (&call["purpose"], &call["tool"], &call["reported"]),
        (
            &"health-tool".into(),
            &"health_check".into(),
            &"healthy".into()
        ),
        "{report}"
    );
    let components: BTreeSet<(String, String)> = report["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["source"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for (name, source) in [
        ("inventory-db", "health-tool"),
        ("feature-flags", "health-tool"),
        ("inventory-db:responseTime", "health-endpoint"),
        ("tools:count", "health-endpoint"),
    ] {
        assert!(
            components.contains(&(name.to_owned(), source.to_owned())),
            "{name} from {source}: {report}"
        );
    }

    // The flag dependency broken (non-critical): still A, the health tool says degraded and
    // the findings name the dependency.
    std::fs::write(&flag, "").unwrap();
    wait_readyz(ex.addr, 200).await;
    let until = std::time::Instant::now() + BOUND;
    while get(ex.addr, "/readyz").await.json()["status"] != "warn" {
        assert!(std::time::Instant::now() < until);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = probe(&ex.url(), &readyz).await;
    assert_eq!(report["status"], "degraded", "{report}");
    assert_eq!(report["grade"], "A", "{report}");
    assert_eq!(report["calls"][0]["reported"], "degraded", "{report}");
    let findings = report["findings"].as_array().unwrap();
    let named = |code: &str, start: &str| {
        findings
            .iter()
            .any(|f| f["code"] == code && f["message"].as_str().unwrap().starts_with(start))
    };
    assert!(
        named(
            "health-component-unhealthy",
            "feature-flags reports warn (id closure, observed "
        ),
        "{report}"
    );
    assert!(
        named(
            "health-tool-degraded",
            "the health tool health_check reports degraded: the flag file says broken"
        ),
        "{report}"
    );
}

/// `mcpulse monitor` as a child, its API on a loopback port, its log in a file (printed when
/// the test fails); killed and reaped on drop.
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

    /// Polls the target's view until `pred` holds; returns it.
    async fn wait(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let until = std::time::Instant::now() + BOUND;
        loop {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.api));
            let r = get(addr, "/api/v1/targets/kit").await;
            let view: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
            if r.status == 200 && pred(&view) {
                return view;
            }
            assert!(
                std::time::Instant::now() < until,
                "not {what} within {BOUND:?}: {view}\n{}",
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

fn component(v: &Value, name: &str, status: &str) -> bool {
    v["components"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["name"] == name && c["status"] == status)
    })
}

fn finding_names(v: &Value, start: &str) -> bool {
    v["last"]["findings"].as_array().is_some_and(|fs| {
        fs.iter().any(|f| {
            f["code"] == "health-component-unhealthy"
                && f["message"].as_str().unwrap_or("").starts_with(start)
        })
    })
}

/// The monitor watching the example (its `/readyz` as the target's `health_url`): the flag
/// dependency (non-critical) broken is degraded; the TCP dependency (critical) gone is a 503
/// and down; each verdict names its dependency; mended, healthy again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_sees_the_examples_dependencies_break_and_mend() {
    let dir = TempDir::new("kit-monitor");
    let flag = dir.join("flags-broken");
    let mut dep = Dependency::start().await;
    let ex = start_example(&dep, &flag, false).await;
    wait_readyz(ex.addr, 200).await;
    let config = dir.join("monitor.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\npath = \"mcpulse.db\"\n\n\
             [defaults]\ninterval = \"1500ms\"\ntimeout = \"1s\"\nfailure_threshold = 1\n\
             success_threshold = 1\nsecurity = false\n\n\
             [[targets]]\nname = \"kit\"\nurl = \"{}\"\nhealth_url = \"http://{}/readyz\"\n",
            ex.url(),
            ex.addr,
        ),
    )
    .unwrap();
    let m = Monitor::start(&dir, &config).await;
    m.wait("healthy", |v| {
        v["status"] == "healthy" && component(v, "inventory-db:responseTime", "healthy")
    })
    .await;

    std::fs::write(&flag, "").unwrap();
    let v = m
        .wait("degraded", |v| {
            v["status"] == "degraded" && component(v, "feature-flags:responseTime", "degraded")
        })
        .await;
    assert!(
        finding_names(&v, "feature-flags:responseTime reports warn"),
        "{v}"
    );
    std::fs::remove_file(&flag).unwrap();
    m.wait("healthy again", |v| v["status"] == "healthy").await;

    dep.stop().await;
    let doc = wait_readyz(ex.addr, 503).await;
    assert_eq!(
        doc["checks"]["inventory-db:responseTime"][0]["status"],
        "fail"
    );
    let v = m
        .wait("down", |v| {
            v["status"] == "down" && component(v, "inventory-db:responseTime", "down")
        })
        .await;
    assert!(
        finding_names(&v, "inventory-db:responseTime reports fail"),
        "{v}"
    );
    dep.restore().await;
    wait_readyz(ex.addr, 200).await;
    m.wait("healthy after the dependency came back", |v| {
        v["status"] == "healthy"
    })
    .await;
}

/// The conformance checks (`scenario/check`) of one run of the suite's server scenarios.
async fn conformance(url: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let node = path_str(installed("conformance/node_modules/node/bin/node"));
    let suite = path_str(installed(
        "conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js",
    ));
    let out = scratch("kit-conformance");
    let out_str = path_str(out.clone());
    let ran: Run = run(
        &node,
        &[&suite, "server", "--url", url, "-o", &out_str],
        &[],
        Duration::from_secs(240),
    )
    .await;
    let (mut passed, mut failed) = (BTreeSet::new(), BTreeSet::new());
    for entry in std::fs::read_dir(&out).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // `server-<scenario>-<YYYY-MM-DDTHH-MM-SS-mmmZ>`
        let scenario = name
            .strip_prefix("server-")
            .and_then(|r| r.rsplitn(7, '-').nth(6))
            .unwrap_or(&name)
            .to_owned();
        let text = std::fs::read_to_string(entry.path().join("checks.json")).unwrap_or_default();
        let checks: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        for check in checks.as_array().into_iter().flatten() {
            let key = format!("{scenario}/{}", check["id"].as_str().unwrap_or("?"));
            if check["status"] == "SUCCESS" {
                passed.insert(key);
            } else {
                failed.insert(key);
            }
        }
    }
    assert!(
        !passed.is_empty() || !failed.is_empty(),
        "the conformance suite reported nothing against {url}: {}\n{}",
        ran.stdout,
        ran.stderr
    );
    (passed, failed)
}

/// The official conformance suite's server scenarios against the example and against the
/// same tools on a plain rmcp server, side by side: the kit passes all that plain rmcp passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_passes_on_the_kit_as_on_plain_rmcp() {
    let dir = TempDir::new("kit-conformance");
    let flag = dir.join("flags-broken");
    let dep = Dependency::start().await;
    let plain = start_example(&dep, &flag, true).await;
    let kit = start_example(&dep, &flag, false).await;
    let (plain_passed, _) = conformance(&plain.url()).await;
    let (kit_passed, kit_failed) = conformance(&kit.url()).await;
    let lost: Vec<_> = plain_passed.difference(&kit_passed).collect();
    eprintln!(
        "plain rmcp passes {}, the kit {} (fails {}): {kit_passed:?}",
        plain_passed.len(),
        kit_passed.len(),
        kit_failed.len()
    );
    assert!(
        lost.is_empty(),
        "passed on plain rmcp, not with the kit: {lost:?}"
    );
    assert!(
        kit_passed.contains("server-initialize/server-initialize"),
        "{kit_passed:?}"
    );
    assert!(
        kit_passed.contains("tools-list/tools-list"),
        "{kit_passed:?}"
    );
}
