//! `mcpulse gateway`, the real binary: the address line on stderr (port 0), `mcpulse probe`
//! through the gateway bridging the demo stdio server, SIGTERM leaving nothing behind, and the
//! errors for bad flags and files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_testkit::stdio::{Act, StdioScript, TempDir, kill, read_pids, still_running_after};
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
const BOUND: Duration = Duration::from_secs(20);

/// A running gateway and the port it printed.
struct Gateway {
    process: tokio::process::Child,
    port: u16,
}

impl Gateway {
    async fn spawn(args: &[&str]) -> Gateway {
        let mut process = tokio::process::Command::new(BIN)
            .arg("gateway")
            .args(["--listen", "127.0.0.1:0", "--log-level", "warn"])
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
        let pid = i32::try_from(self.process.id().unwrap()).unwrap();
        // SAFETY: kill(2) on the id of a child we spawned and have not reaped yet.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let status = tokio::time::timeout(BOUND, self.process.wait())
            .await
            .expect("exited in time")
            .unwrap();
        status.code()
    }
}

#[tokio::test]
async fn probe_through_the_gateway_sees_the_demo_servers_tools_and_grade_a() {
    let gw = Gateway::spawn(&["--", BIN, "demo-server", "stdio"]).await;
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
