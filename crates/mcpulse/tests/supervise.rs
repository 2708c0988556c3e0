//! `mcpulse supervise` as a process: argument errors, a clean exit on the client's EOF, a
//! non-zero exit after giving up, and the child dying with a SIGKILLed supervisor
//! (PR_SET_PDEATHSIG), its grandchildren too (the watchdog). The relay's behaviour in detail is
//! tested in-process (crates/mcpulse-relay/tests/supervise.rs).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_testkit::run::run;
use mcpulse_testkit::stdio::{is_running, kill, read_pids, still_running_after};
use mcpulse_testkit::{Act, StdioScript, TempDir};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
const BOUND: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_missing_command_and_bad_values_are_named() {
    let cases: &[(&[&str], &str)] = &[
        (&[], "no server command"),
        (
            &["--heartbeat-interval", "often", "--", "true"],
            "--heartbeat-interval",
        ),
        (&["--tool-timeout", "search", "--", "true"], "TOOL=DURATION"),
        (
            &[
                "--backoff-initial",
                "10s",
                "--backoff-max",
                "1s",
                "--",
                "true",
            ],
            "--backoff-max",
        ),
        (&["--failures", "0", "--", "true"], "--failures"),
    ];
    for (args, said) in cases {
        let args: Vec<&str> = std::iter::once("supervise")
            .chain(args.iter().copied())
            .collect();
        let r = run(BIN, &args, &[], BOUND).await;
        assert_eq!(r.code, Some(3), "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(said), "{args:?}: {}", r.stderr);
    }
}

/// A healthy legacy server recording its pid and a grandchild's.
fn server(dir: &TempDir) -> std::path::PathBuf {
    StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .at_start(Act::SpawnGrandchild(dir.join("grand")))
        .on("ping", vec![Act::Result(json!({}))])
        .write(dir, "s.sh")
}

/// `mcpulse supervise ARGS` with piped stdin and stdout (stderr dropped), killed on drop.
struct Supervised {
    process: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Supervised {
    fn spawn(args: &[&str]) -> Supervised {
        let mut process = tokio::process::Command::new(BIN)
            .arg("supervise")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = process.stdin.take();
        let stdout = BufReader::new(process.stdout.take().unwrap()).lines();
        Supervised {
            process,
            stdin,
            stdout,
        }
    }

    /// Writes one message and reads the next line (bounded).
    async fn exchange(&mut self, message: Value) -> Value {
        let stdin = self.stdin.as_mut().unwrap();
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
        let line = tokio::time::timeout(BOUND, self.stdout.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        serde_json::from_str(&line).unwrap()
    }

    /// Closes its stdin; its exit code (bounded).
    async fn close(mut self) -> Option<i32> {
        drop(self.stdin.take());
        let status = tokio::time::timeout(BOUND, self.process.wait())
            .await
            .unwrap()
            .unwrap();
        status.code()
    }
}

async fn wait_for_pids(file: &std::path::Path, n: usize) -> Vec<u32> {
    let until = std::time::Instant::now() + BOUND;
    loop {
        let pids = read_pids(file);
        if pids.len() >= n {
            return pids;
        }
        assert!(
            std::time::Instant::now() < until,
            "no pid in {}",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Initializes the session with [`server`]'s server; its pid and its grandchild's.
async fn initialized(sup: &mut Supervised, dir: &TempDir) -> Vec<u32> {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let reply = sup.exchange(init).await;
    assert_eq!(reply["id"], 1, "{reply}");
    wait_for_pids(&dir.join("pids"), 1)
        .await
        .into_iter()
        .chain(wait_for_pids(&dir.join("grand"), 1).await)
        .collect()
}

#[tokio::test]
async fn the_clients_eof_stops_everything_and_exits_zero() {
    let dir = TempDir::new("sup-eof");
    let script = server(&dir);
    let mut sup = Supervised::spawn(&[
        "--heartbeat-interval",
        "100ms",
        "--",
        "sh",
        script.to_str().unwrap(),
    ]);
    let pids = initialized(&mut sup, &dir).await;
    assert_eq!(sup.close().await, Some(0));
    let left = still_running_after(&pids, Duration::from_secs(3));
    kill(&left);
    assert!(left.is_empty(), "left running: {left:?}");
}

#[tokio::test]
async fn after_giving_up_it_exits_non_zero_when_the_client_closes() {
    let dir = TempDir::new("sup-fatal");
    let script = StdioScript::new()
        .at_start(Act::RecordPid(dir.join("pids")))
        .at_start(Act::Exit(1))
        .write(&dir, "s.sh");
    let mut sup = Supervised::spawn(&[
        "--backoff-initial",
        "10ms",
        "--backoff-max",
        "20ms",
        "--max-restarts",
        "2",
        "--",
        "sh",
        script.to_str().unwrap(),
    ]);
    wait_for_pids(&dir.join("pids"), 3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reply = sup
        .exchange(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    assert_eq!(reply["error"]["code"], -32081, "{reply}");
    assert_eq!(sup.close().await, Some(1));
    assert_eq!(
        read_pids(&dir.join("pids")).len(),
        3,
        "one start and two restarts"
    );
}

/// The child itself, by the parent-death signal; the grandchildren are the watchdog's
/// (`a_sigkilled_supervisor_leaves_no_grandchild_behind`); a SIGTERM, which the supervisor
/// handles, stops them all itself (`a_signal_stops_the_whole_group_within_the_short_bound_then_exits`).
#[tokio::test]
async fn a_sigkilled_supervisor_takes_its_child_with_it() {
    let dir = TempDir::new("sup-pdeathsig");
    // A child that ignores its stdin's EOF (and SIGTERM): only the parent-death signal ends it.
    let script = StdioScript::new()
        .at_start(Act::RecordPid(dir.join("pids")))
        .at_start(Act::Hang)
        .write(&dir, "s.sh");
    let mut sup = Supervised::spawn(&["--", "sh", script.to_str().unwrap()]);
    let child = wait_for_pids(&dir.join("pids"), 1).await;
    assert!(is_running(child[0]));
    sup.process.start_kill().unwrap();
    sup.process.wait().await.unwrap();
    let left = still_running_after(&child, Duration::from_secs(3));
    kill(&left);
    assert!(
        left.is_empty(),
        "the child outlived its SIGKILLed supervisor"
    );
}

/// The parent-death signal ends the child alone. The watchdog the supervisor starts (a process
/// of its own, woken by the supervisor's death closing its pipe) takes the rest: a grandchild
/// in the child's group and one that called `setsid`, both ignoring SIGTERM and their stdin.
#[tokio::test]
async fn a_sigkilled_supervisor_leaves_no_grandchild_behind() {
    let dir = TempDir::new("sup-watchdog");
    let script = StdioScript::new()
        .at_start(Act::IgnoreSigterm)
        .at_start(Act::RecordPid(dir.join("pids")))
        .at_start(Act::SpawnGrandchild(dir.join("grand")))
        .at_start(Act::SpawnSessionLeader(dir.join("leader")))
        .at_start(Act::Hang)
        .write(&dir, "s.sh");
    let mut sup = Supervised::spawn(&["--", "sh", script.to_str().unwrap()]);
    let supervisor = sup.process.id().unwrap();
    let mut ours = wait_for_pids(&dir.join("pids"), 1).await;
    ours.extend(wait_for_pids(&dir.join("grand"), 1).await);
    ours.extend(wait_for_pids(&dir.join("leader"), 1).await);
    // Every one carries the supervisor's lineage: `<supervisor pid>-<random>-<instance>-<gen>`.
    let lineage = lineage(ours[0]).expect("the child's lineage");
    let prefix = format!("{}-", lineage.rsplitn(3, '-').nth(2).unwrap());
    assert!(prefix.starts_with(&format!("{supervisor}-")), "{lineage}");
    assert_eq!(with_lineage(&prefix).len(), 3, "{ours:?}");
    let watchdog = watchdog_of(supervisor);
    sup.process.start_kill().unwrap();
    sup.process.wait().await.unwrap();
    let mut left = still_running_after(&ours, Duration::from_secs(5));
    left.extend(with_lineage(&prefix));
    let watchdog_left = still_running_after(watchdog.as_slice(), Duration::from_secs(5));
    kill(&left);
    kill(&watchdog_left);
    assert!(
        left.is_empty(),
        "left by the SIGKILLed supervisor: {left:?} (child, grandchild, setsid one: {ours:?})"
    );
    assert!(watchdog.is_some(), "no watchdog was started");
    assert!(watchdog_left.is_empty(), "the watchdog did not exit");
}

/// A process's `MCPULSE_SUPERVISE_LINEAGE`.
fn lineage(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0).find_map(|kv| {
        let kv = std::str::from_utf8(kv).ok()?;
        Some(kv.strip_prefix("MCPULSE_SUPERVISE_LINEAGE=")?.to_owned())
    })
}

/// Live processes whose lineage starts with `prefix`.
fn with_lineage(prefix: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| is_running(*pid) && lineage(*pid).is_some_and(|l| l.starts_with(prefix)))
        .collect()
}

/// The `mcpulse supervise-watchdog` started by `supervisor`.
fn watchdog_of(supervisor: u32) -> Option<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            parent == Some(supervisor)
                && cmdline
                    .split(|b| *b == 0)
                    .any(|arg| arg == b"supervise-watchdog")
        })
}

/// Sends `sig` to a process.
fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on one process id; no memory effects.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(i32::try_from(pid).unwrap(), sig);
    }
}

impl Supervised {
    /// Waits for its exit (bounded) once `pids` should all be gone: its exit code and how long
    /// after the call it came. Fails if one of `pids` is left running (killing it first).
    async fn exit_leaving_nothing(&mut self, pids: &[u32]) -> (Option<i32>, Duration) {
        let at = std::time::Instant::now();
        let status = tokio::time::timeout(BOUND, self.process.wait())
            .await
            .unwrap()
            .unwrap();
        let took = at.elapsed();
        let left = still_running_after(pids, Duration::from_secs(2));
        kill(&left);
        assert!(left.is_empty(), "left running: {left:?}");
        (status.code(), took)
    }
}

#[tokio::test]
async fn a_signal_stops_the_whole_group_within_the_short_bound_then_exits() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let dir = TempDir::new("sup-signal");
        // A grandchild (as `npx` → `node` makes) with its stdio detached: only a stop of the
        // group ends it; the parent-death signal reaches the child alone.
        let script = server(&dir);
        let mut sup = Supervised::spawn(&["--", "sh", script.to_str().unwrap()]);
        let pids = initialized(&mut sup, &dir).await;
        signal(sup.process.id().unwrap(), sig);
        let (code, took) = sup.exit_leaving_nothing(&pids).await;
        assert_eq!(code, Some(0), "signal {sig}: handled, not killed");
        // The SDK clients SIGKILL 2 s after their SIGTERM.
        assert!(
            took < Duration::from_millis(1500),
            "signal {sig}: took {took:?}"
        );
    }
}

#[tokio::test]
async fn at_the_clients_eof_the_stop_grace_is_waited_once() {
    let dir = TempDir::new("sup-eof-grace");
    // A server that ignores its stdin closing (it never reads it) but dies on SIGTERM.
    let script = StdioScript::new()
        .at_start(Act::RecordPid(dir.join("pids")))
        .at_start(Act::Sleep(100_000))
        .write(&dir, "s.sh");
    let mut sup = Supervised::spawn(&[
        "--stop-grace",
        "700ms",
        "--",
        "sh",
        script.to_str().unwrap(),
    ]);
    let pids = wait_for_pids(&dir.join("pids"), 1).await;
    drop(sup.stdin.take());
    let (code, took) = sup.exit_leaving_nothing(&pids).await;
    assert_eq!(code, Some(0));
    // Closing stdin, one grace (700 ms), SIGTERM: not a second grace before the SIGTERM.
    assert!(took >= Duration::from_millis(650), "took {took:?}");
    assert!(took < Duration::from_millis(1300), "took {took:?}");
}

#[tokio::test]
async fn the_servers_stderr_is_passed_through_to_ours() {
    let dir = TempDir::new("sup-stderr");
    let script = StdioScript::legacy()
        .at_start(Act::RecordPid(dir.join("pids")))
        .at_start(Act::Stderr("note from the server on stderr".into()))
        .write(&dir, "s.sh");
    let r = run(
        BIN,
        &["supervise", "--", "sh", script.to_str().unwrap()],
        &[],
        BOUND,
    )
    .await;
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, "");
    assert!(
        r.stderr.contains("note from the server on stderr"),
        "{}",
        r.stderr
    );
    let left = still_running_after(&read_pids(&dir.join("pids")), Duration::from_secs(3));
    kill(&left);
    assert!(left.is_empty());
}

#[tokio::test]
async fn a_signal_during_the_stop_after_eof_cuts_it_short() {
    let dir = TempDir::new("sup-eof-then-term");
    // Ignores its stdin closing and SIGTERM: the stop after the EOF would wait its grace twice
    // (1 s, then 1 s after SIGTERM) before the SIGKILL.
    let script = StdioScript::new()
        .at_start(Act::RecordPid(dir.join("pids")))
        .at_start(Act::SpawnGrandchild(dir.join("grand")))
        .at_start(Act::Hang)
        .write(&dir, "s.sh");
    let mut sup = Supervised::spawn(&["--stop-grace", "1s", "--", "sh", script.to_str().unwrap()]);
    let pids: Vec<u32> = wait_for_pids(&dir.join("pids"), 1)
        .await
        .into_iter()
        .chain(wait_for_pids(&dir.join("grand"), 1).await)
        .collect();
    drop(sup.stdin.take());
    // As an SDK client does: SIGTERM once its own wait after closing stdin is over, here while
    // the supervisor's stop already waits out the grace after its SIGTERM to the server.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    signal(sup.process.id().unwrap(), libc::SIGTERM);
    let (code, took) = sup.exit_leaving_nothing(&pids).await;
    assert_eq!(code, Some(0));
    assert!(
        took < Duration::from_millis(450),
        "took {took:?} after the SIGTERM"
    );
}
