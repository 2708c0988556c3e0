//! `mcpulse supervise` on each kind of client stream (issue #17, Performance): pipes and
//! sockets are read and written through epoll on a non-blocking descriptor of the
//! supervisor's own, a regular file through tokio's blocking stdio; every kind relays the
//! same. The descriptors' flags are read from `/proc/<pid>/fdinfo` (Linux).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcpulse_testkit::stdio::{kill, read_pids, still_running_after};
use mcpulse_testkit::{StdioScript, TempDir};
use serde_json::{Value, json};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

const BIN: &str = env!("CARGO_BIN_EXE_mcpulse");
const BOUND: Duration = Duration::from_secs(20);
const O_NONBLOCK: u32 = 0o4000;

fn server(dir: &TempDir) -> std::path::PathBuf {
    StdioScript::legacy()
        .at_start(mcpulse_testkit::Act::RecordPid(dir.join("pids")))
        .on("ping", vec![mcpulse_testkit::Act::Result(json!({}))])
        .write(dir, "s.sh")
}

fn messages() -> [Value; 3] {
    [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
    ]
}

/// The `flags:` of a descriptor, from `/proc/<pid>/fdinfo/<fd>` (octal).
fn flags(pid: u32, fd: i32) -> u32 {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap();
    let line = info.lines().find(|l| l.starts_with("flags:")).unwrap();
    u32::from_str_radix(line["flags:".len()..].trim(), 8).unwrap()
}

/// The supervisor's descriptors other than `fd` open on the same file as `fd`.
fn same_file(pid: u32, fd: i32) -> Vec<i32> {
    let target = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|n| *n != fd)
        .filter(|n| std::fs::read_link(format!("/proc/{pid}/fd/{n}")).ok() == Some(target.clone()))
        .collect()
}

/// Sends the handshake and a ping, checks both replies.
async fn session<W: AsyncWrite + Unpin, R: AsyncRead + Unpin>(input: &mut W, output: R) {
    let mut lines = BufReader::new(output).lines();
    for m in messages() {
        input.write_all(format!("{m}\n").as_bytes()).await.unwrap();
        if m.get("id").is_none() {
            continue;
        }
        let line = tokio::time::timeout(BOUND, lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let reply: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(reply["id"], m["id"], "{reply}");
        assert!(reply.get("result").is_some(), "{reply}");
    }
}

async fn exit_code(mut process: tokio::process::Child) -> Option<i32> {
    tokio::time::timeout(BOUND, process.wait())
        .await
        .unwrap()
        .unwrap()
        .code()
}

fn no_orphan(dir: &TempDir) {
    let left = still_running_after(&read_pids(&dir.join("pids")), Duration::from_secs(3));
    kill(&left);
    assert!(left.is_empty(), "left running: {left:?}");
}

#[tokio::test]
async fn over_pipes_it_relays_on_a_nonblocking_descriptor_of_its_own() {
    let dir = TempDir::new("sup-pipes");
    let script = server(&dir);
    let mut process = tokio::process::Command::new(BIN)
        .args(["supervise", "--", "sh", script.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = process.id().unwrap();
    let mut stdin = process.stdin.take().unwrap();
    let stdout = process.stdout.take().unwrap();
    session(&mut stdin, stdout).await;
    for fd in [0, 1] {
        // The inherited description stays blocking (others may share it)...
        assert_eq!(flags(pid, fd) & O_NONBLOCK, 0, "fd {fd}");
        // ...the supervisor reads and writes the same pipe through a non-blocking one.
        let ours = same_file(pid, fd);
        assert!(
            ours.iter().any(|n| flags(pid, *n) & O_NONBLOCK != 0),
            "fd {fd}: no non-blocking descriptor of the same pipe among {ours:?}"
        );
    }
    drop(stdin);
    assert_eq!(exit_code(process).await, Some(0));
    no_orphan(&dir);
}

#[tokio::test]
async fn over_sockets_it_relays_and_gives_them_back_blocking() {
    let dir = TempDir::new("sup-sockets");
    let script = server(&dir);
    // As libuv (Node) gives a child its stdio: one socketpair a stream.
    let (client_in, sup_in) = std::os::unix::net::UnixStream::pair().unwrap();
    let (client_out, sup_out) = std::os::unix::net::UnixStream::pair().unwrap();
    // Kept to read the flags of the supervisor's descriptions after it exits.
    let kept_in = sup_in.try_clone().unwrap();
    let kept_out = sup_out.try_clone().unwrap();
    let process = tokio::process::Command::new(BIN)
        .args(["supervise", "--", "sh", script.to_str().unwrap()])
        .stdin(Stdio::from(OwnedFd::from(sup_in)))
        .stdout(Stdio::from(OwnedFd::from(sup_out)))
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = process.id().unwrap();
    client_in.set_nonblocking(true).unwrap();
    client_out.set_nonblocking(true).unwrap();
    let mut input = tokio::net::UnixStream::from_std(client_in).unwrap();
    let output = tokio::net::UnixStream::from_std(client_out).unwrap();
    session(&mut input, output).await;
    // A socket cannot be reopened: the shared description is non-blocking while relaying...
    assert_ne!(flags(pid, 0) & O_NONBLOCK, 0);
    assert_ne!(flags(pid, 1) & O_NONBLOCK, 0);
    drop(input);
    assert_eq!(exit_code(process).await, Some(0));
    // ...and blocking again once the supervisor is done.
    let me = std::process::id();
    assert_eq!(flags(me, kept_in.as_raw_fd()) & O_NONBLOCK, 0);
    assert_eq!(flags(me, kept_out.as_raw_fd()) & O_NONBLOCK, 0);
    no_orphan(&dir);
}

#[tokio::test]
async fn from_a_regular_file_it_relays_and_exits_at_its_end() {
    let dir = TempDir::new("sup-file");
    let script = server(&dir);
    let input = dir.join("input.jsonl");
    let text: String = messages().iter().map(|m| format!("{m}\n")).collect();
    std::fs::write(&input, text).unwrap();
    let output = tokio::time::timeout(
        BOUND,
        tokio::process::Command::new(BIN)
            .args(["supervise", "--", "sh", script.to_str().unwrap()])
            .stdin(std::fs::File::open(&input).unwrap())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let replies: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert_eq!(replies[0]["id"], 1);
    assert!(replies[0].get("result").is_some(), "{replies:?}");
    // The ping was read just before the end of the file: answered, or (if the server was
    // stopped first) answered with the documented error; never left without a reply.
    assert_eq!(replies[1]["id"], 2);
    no_orphan(&dir);
}
