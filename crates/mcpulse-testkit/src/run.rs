//! Running a binary under test: its exit code, its output, and a bound on how long it may
//! take. The child is killed if the test gives up on it (`kill_on_drop`).

use serde_json::Value;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// One finished run.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    /// stdout as one JSON document (a `--json` report); the test fails, showing both streams,
    /// when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON document ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

/// The `code` of each object in a JSON array (a report's `findings`).
pub fn codes(findings: &Value) -> Vec<String> {
    findings
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {findings}"))
        .iter()
        .map(|f| f["code"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The message of the first finding with this code in a report; the test fails when there is
/// none.
pub fn finding_message(report: &Value, code: &str) -> String {
    report["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("no findings in {report}"))
        .iter()
        .find(|f| f["code"] == code)
        .and_then(|f| f["message"].as_str())
        .unwrap_or_else(|| panic!("no {code} finding in {report}"))
        .to_owned()
}

/// Runs `bin` with `args`, the extra environment `env` and `NO_COLOR=1`, stdin closed; the
/// test fails if it has not finished within `bound`.
pub async fn run(bin: &str, args: &[&str], env: &[(&str, &str)], bound: Duration) -> Run {
    run_spawned(bin, args, env, bound, |cmd| {
        cmd.spawn().map(|child| (child, ()))
    })
    .await
}

/// [`run`], the child spawned by `spawn`, which may return a guard kept until the child has
/// been waited for: a test running a gateway in process spawns through
/// `mcpulse_relay::supervise::child::spawn_owned`, so that the gateway's orphan reaper never
/// collects the child's exit status first.
pub async fn run_spawned<G>(
    bin: &str,
    args: &[&str],
    env: &[(&str, &str)],
    bound: Duration,
    spawn: impl FnOnce(&mut tokio::process::Command) -> std::io::Result<(tokio::process::Child, G)>,
) -> Run {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args(args)
        .envs(env.iter().copied())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let started = Instant::now();
    let (child, guard) = spawn(&mut cmd).unwrap_or_else(|e| panic!("spawning {bin}: {e}"));
    let out = match tokio::time::timeout(bound, child.wait_with_output()).await {
        Ok(out) => out.unwrap_or_else(|e| panic!("waiting for {bin}: {e}")),
        Err(_) => panic!("{bin} {args:?} did not finish within {bound:?}"),
    };
    drop(guard);
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: started.elapsed(),
    }
}
