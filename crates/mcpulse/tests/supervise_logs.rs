//! `mcpulse supervise`'s logs go to stderr or `--log-file`, never to stdout (the client's MCP
//! stream), and what the user or a server chose is inert in them, as text and as JSON.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_testkit::TempDir;
use mcpulse_testkit::run;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
const BOUND: Duration = Duration::from_secs(15);
/// A command argument that would clear the screen and forge a log line if written raw.
const HOSTILE: &str = "evil\x1b[2J\nFAKE  INFO mcpulse supervise started\u{202e}";

#[tokio::test]
async fn logs_go_to_the_file_appended_and_never_to_stdout() {
    let dir = TempDir::new("supervise-logs");
    let file = dir.join("supervise.log");
    let file_arg = file.to_str().unwrap();
    for _ in 0..2 {
        let r = run::run(
            BIN,
            &["supervise", "--log-file", file_arg, "--", "true", HOSTILE],
            &[],
            BOUND,
        )
        .await;
        assert_eq!(
            r.stdout, "",
            "stdout is the client's stream; stderr: {}",
            r.stderr
        );
        assert!(
            !r.stderr.contains("mcpulse supervise started"),
            "{}",
            r.stderr
        );
    }
    let log = std::fs::read_to_string(&file).unwrap();
    let started: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("mcpulse supervise started"))
        .collect();
    assert_eq!(started.len(), 2, "appended, one line a run: {log}");
    assert!(
        !log.contains('\x1b') && !log.contains('\u{202e}'),
        "{log:?}"
    );
    assert!(!log.lines().any(|l| l.starts_with("FAKE")), "{log}");
    assert!(
        started[0].contains(r#"command="true evil\x1b[2J\nFAKE"#),
        "{log}"
    );
}

#[tokio::test]
async fn json_logs_are_one_inert_object_a_line() {
    let dir = TempDir::new("supervise-logs");
    let file = dir.join("supervise.jsonl");
    let r = run::run(
        BIN,
        &[
            "supervise",
            "--log-json",
            "--log-file",
            file.to_str().unwrap(),
            "--",
            "true",
            HOSTILE,
        ],
        &[],
        BOUND,
    )
    .await;
    assert_eq!(r.stdout, "", "{}", r.stderr);
    let log = std::fs::read_to_string(&file).unwrap();
    assert!(
        !log.contains('\x1b') && !log.contains('\u{202e}'),
        "{log:?}"
    );
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let started = lines
        .iter()
        .find(|v| v["message"] == "mcpulse supervise started")
        .unwrap_or_else(|| panic!("{log}"));
    assert_eq!(started["level"], "INFO");
    assert!(started["pid"].as_u64().is_some());
    assert_eq!(
        started["command"],
        "true evil\\x1b[2J\\nFAKE  INFO mcpulse supervise started\\u{202e}"
    );
}

#[tokio::test]
async fn without_a_file_logs_go_to_stderr_and_a_bad_level_is_refused() {
    let r = run::run(BIN, &["supervise", "--", "true"], &[], BOUND).await;
    assert_eq!(r.stdout, "", "{}", r.stderr);
    assert!(
        r.stderr.contains("mcpulse supervise started"),
        "{}",
        r.stderr
    );

    let r = run::run(
        BIN,
        &["supervise", "--log-level", "loud", "--", "true"],
        &[],
        BOUND,
    )
    .await;
    assert_eq!(r.stdout, "");
    assert_ne!(r.code, Some(0));
    assert!(r.stderr.contains("--log-level \"loud\""), "{}", r.stderr);
}

#[tokio::test]
async fn credentials_on_the_command_line_are_hidden_in_the_log() {
    let r = run::run(
        BIN,
        &[
            "supervise",
            "--",
            "true",
            "postgresql://user:hunter2pass@db.example/app",
            "--api-key",
            "sekrit-value-42",
        ],
        &[],
        BOUND,
    )
    .await;
    assert!(
        r.stderr.contains("mcpulse supervise started"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("hunter2pass"), "{}", r.stderr);
    assert!(!r.stderr.contains("sekrit-value-42"), "{}", r.stderr);
    assert!(r.stderr.contains("db.example"), "{}", r.stderr);
}
