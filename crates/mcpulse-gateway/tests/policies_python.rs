//! The official Python SDK client (mcp 2.3.0, installed in target/interop by
//! scripts/interop-setup.sh) through the gateway during a dependency outage: an agent-like
//! sequence of calls gets fast, explicit errors (the upstream's own, then the breaker's, then
//! the timeout's), never a hang. The upstream is mcpulse-testkit's scripted stdio server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod policies_support;

use mcpulse_testkit::mcp;
use mcpulse_testkit::run::run_spawned;
use mcpulse_testkit::stdio::{Act, StdioScript, TempDir, kill, read_pids, still_running_after};
use policies_support::{BOUND, start};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

fn interop(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/interop")
        .join(rel);
    assert!(
        p.exists(),
        "{} is missing: run scripts/interop-setup.sh",
        p.display()
    );
    p.to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_client_gets_fast_explicit_errors_during_a_dependency_outage() {
    let py2 = interop("py2");
    let dir = TempDir::new("gw-policy-python");
    let mut init = mcp::initialize_result(mcp::LEGACY);
    init["capabilities"] = json!({"tools": {"listChanged": false}});
    let script = StdioScript::new()
        .at_start(Act::RecordPid(dir.join("pids")))
        .on("initialize", vec![Act::Result(init)])
        .on(
            "tools/list",
            vec![Act::Result(mcp::tools_list_result(
                mcp::tools(&["lookup", "search"]),
                None,
                false,
            ))],
        )
        // `lookup`'s database is down; `search`'s index is slow.
        .on_tool(
            "lookup",
            vec![Act::Result(json!({"content": [{"type": "text",
                "text": "database unavailable"}], "isError": true}))],
        )
        .on_tool(
            "search",
            vec![Act::Sleep(1500), Act::Result(json!({"content": []}))],
        )
        .write(&dir, "server.sh");
    let toml = format!(
        "[[tools]]\nname = \"lookup\"\nbreaker = {{ window_calls = 10, minimum_calls = 2, wait_in_open = \"30s\" }}\n\n[[tools]]\nname = \"search\"\ntimeout = \"500ms\"\n\n[upstream]\ncommand = [\"sh\", {:?}]\nstop_grace = \"300ms\"\n",
        script.to_str().unwrap()
    );
    let (running, _) = start(&toml).await;
    let url = format!("http://{}/mcp", running.addr);
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/outage_agent.py");
    // Registered with the in-process gateway's orphan reaper (spawn_owned), which would
    // otherwise collect the client's exit before tokio does (ECHILD).
    let r = run_spawned(
        "python3",
        &[agent.to_str().unwrap(), &url],
        &[("PYTHONPATH", &py2), ("PYTHONDONTWRITEBYTECODE", "1")],
        Duration::from_secs(60),
        mcpulse_relay::supervise::child::spawn_owned,
    )
    .await;
    let out = format!("exit {:?}\n{}\n{}", r.code, r.stdout, r.stderr);
    let calls: Vec<Vec<&str>> = r
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("CALL "))
        .map(|l| l.splitn(4, ' ').collect())
        .collect();
    assert_eq!(r.code, Some(0), "{out}");
    assert_eq!(calls.len(), 6, "{out}");
    assert!(r.stdout.lines().last() == Some("DONE"), "{out}");
    for (i, c) in calls.iter().enumerate() {
        let ms: u64 = c[1].parse().unwrap();
        assert_eq!(c[2], "error", "call {i} is an explicit error: {out}");
        match c[0] {
            // The server's own failure twice, then the open breaker, at once.
            "lookup" if i < 2 => assert_eq!(c[3], "database unavailable", "{out}"),
            "lookup" => {
                assert!(c[3].contains("circuit breaker \"lookup\""), "{out}");
                assert!(
                    ms < 300,
                    "the breaker answers at once, not after {ms} ms: {out}"
                );
            }
            // The gateway's timeout, at 500 ms: not a hang until the client gives up.
            "search" => {
                assert!(c[3].contains("did not answer within 500ms"), "{out}");
                assert!((450..1500).contains(&ms), "answered after {ms} ms: {out}");
            }
            other => panic!("{other}: {out}"),
        }
    }
    tokio::time::timeout(BOUND, running.shutdown())
        .await
        .unwrap();
    let left = still_running_after(&read_pids(&dir.join("pids")), Duration::from_secs(3));
    kill(&left);
    assert!(left.is_empty(), "left running: {left:?}");
}
