//! The guard against a SIGKILLed supervisor: a tiny process that outlives it just long enough to
//! kill what its child left behind.
//!
//! `PR_SET_PDEATHSIG` ends the direct child when the supervisor dies, but nothing else: a
//! grandchild that stayed in the child's process group and ignores its stdin closing, or one
//! that called `setsid`, would outlive a SIGKILLed supervisor (the subreaper that finds them at
//! a normal stop died with it). So `mcpulse supervise` starts [`start`] a watchdog, the same
//! binary (`mcpulse supervise-watchdog`, hidden), before any child:
//!
//! - its stdin is a pipe whose only writer is the supervisor (close-on-exec, so no child
//!   inherits it). The kernel closes it when the supervisor dies, however it dies: the
//!   watchdog's read then ends (EOF). Unlike the parent-death signal, this follows the
//!   *process*, not the thread that forked the watchdog, so the runtime's threads do not matter;
//! - through that pipe the supervisor tells it each child's process group as it starts
//!   (`+PGID`) and when it is stopped (`-PGID`);
//! - at EOF it SIGKILLs the groups still registered that still have a live member (while one
//!   does, the id cannot be reused) and every process whose environment carries this
//!   supervisor's [`LINEAGE_VAR`] prefix (`/proc/<pid>/environ`), again and again until none is
//!   left (a process may fork between the scan and the kill), for at most [`SWEEP_BOUND`];
//! - it is in a process group of its own (a Ctrl-C or a `kill -- -PGID` aimed at the
//!   supervisor's group does not take it too), carries no lineage (neither ours nor that of a
//!   supervisor above us, whose watchdog must not end it before its sweep), has no stdout (the
//!   client's stream is never touched) and keeps the supervisor's stderr for one line of report.
//!
//! After a normal stop there is nothing left to find, and the sweep is one `/proc` scan. A
//! process that both leaves the group and clears its environment cannot be recognised; a
//! cgroup would catch it, but creating one needs root or a cgroup v2 subtree delegated to the
//! user, which a server started by a desktop client cannot count on.
//!
//! Memory: at most [`MAX_GROUPS`] groups are remembered (the restart budget keeps the real
//! number far below), and a pipe line is read into a buffer of at most [`MAX_LINE`] bytes.

use super::child::{LINEAGE_VAR, group_has_live_members, kill_pid, lineage_prefix};
use mcpulse_transport::stdio::kill_group;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The hidden subcommand that runs [`run`].
pub const SUBCOMMAND: &str = "supervise-watchdog";
/// How long the sweep may go on killing what it finds.
pub const SWEEP_BOUND: Duration = Duration::from_secs(3);
/// The most process groups remembered.
const MAX_GROUPS: usize = 256;
/// The longest pipe line read (`+` or `-` and a pid).
const MAX_LINE: u64 = 64;

/// The write end of the watchdog's stdin, once [`start`] ran.
static PIPE: Mutex<Option<std::process::ChildStdin>> = Mutex::new(None);

/// Starts the watchdog: `exe supervise-watchdog <lineage prefix>`. Call it once, before the
/// first child is spawned, with the path of the `mcpulse` binary (`std::env::current_exe`).
/// Returns its pid.
pub fn start(exe: &Path) -> std::io::Result<u32> {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(exe);
    command
        .arg(SUBCOMMAND)
        .arg(lineage_prefix())
        // No lineage of its own (ours is an argument): under a supervisor of its own, that
        // one's watchdog must not kill this one before it has swept; it ends by itself.
        .env_remove(LINEAGE_VAR)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .process_group(0);
    let mut child = command.spawn()?;
    let pid = child.id();
    let mut pipe = PIPE.lock().unwrap_or_else(|p| p.into_inner());
    *pipe = child.stdin.take();
    // Not waited for: it outlives us by design. If it dies first, our subreaper reaps it.
    drop(child);
    Ok(pid)
}

/// Tells the watchdog (if one runs) that a child leads process group `pgid` now.
pub fn group_started(pgid: u32) {
    tell(b'+', pgid);
}

/// Tells the watchdog (if one runs) that process group `pgid` was stopped.
pub fn group_stopped(pgid: u32) {
    tell(b'-', pgid);
}

fn tell(sign: u8, pgid: u32) {
    let mut pipe = PIPE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(w) = pipe.as_mut() {
        // A few bytes into a pipe the watchdog drains: never blocks for long. A failure (the
        // watchdog is gone) drops the pipe: the guard is lost, which is logged once.
        let line = format!("{}{pgid}\n", char::from(sign));
        if w.write_all(line.as_bytes()).is_err() {
            tracing::warn!(
                "supervise: the watchdog is gone; a SIGKILLed supervisor may now leave grandchildren behind"
            );
            *pipe = None;
        }
    }
}

/// The watchdog itself: reads the supervisor's pipe until it closes, then sweeps. Returns the
/// number of processes and groups it killed.
pub fn run(prefix: &str) -> usize {
    let mut groups: Vec<u32> = Vec::new();
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        match std::io::Read::take(&mut input, MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        let Some(pgid) = text.get(1..).and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if text.starts_with('+') {
            if groups.len() >= MAX_GROUPS {
                groups.remove(0);
            }
            groups.push(pgid);
        } else {
            groups.retain(|g| *g != pgid);
        }
    }
    sweep(prefix, &groups, SWEEP_BOUND)
}

/// Kills, until none is left or `bound` passes, the live members of `groups` and every process
/// whose environment carries a lineage starting with `prefix`. Returns how many kills it sent.
pub fn sweep(prefix: &str, groups: &[u32], bound: Duration) -> usize {
    let me = std::process::id();
    let until = Instant::now() + bound;
    let mut killed = 0;
    loop {
        let mut found = 0;
        for pgid in groups {
            if group_has_live_members(*pgid) {
                kill_group(i32::try_from(*pgid).unwrap_or(0), libc::SIGKILL);
                found += 1;
            }
        }
        for pid in with_lineage(prefix) {
            if pid != me {
                kill_pid(pid);
                found += 1;
            }
        }
        killed += found;
        if found == 0 || Instant::now() >= until {
            return killed;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Processes (not zombies) whose `LINEAGE_VAR` starts with `prefix`.
pub fn with_lineage(prefix: &str) -> Vec<u32> {
    let want = format!("{LINEAGE_VAR}={prefix}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // A zombie's environ reads empty: it is dead already.
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|b| *b == 0)
                    .any(|kv| kv.starts_with(want.as_bytes()))
            })
        })
        .collect()
}
