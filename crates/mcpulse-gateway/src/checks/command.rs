//! `kind = "command"`: runs `command` (argv; never through a shell, so nothing is parsed as
//! shell syntax) and passes on exit status 0. As the monitor's command sink runs its programs
//! (`mcpulse-monitor` `sink/command.rs`, whose rules this follows):
//! - a clean environment ([`mcpulse_transport::stdio::inherited_env`]: `PATH`, `HOME`, locale…)
//!   plus the variables named in `env`: the gateway's own may hold credentials;
//! - stdin is empty; stdout and stderr are read at once, each up to [`OUTPUT_CAP`] bytes (a
//!   chatty command never blocks on a full pipe, and never fills memory); the output of the
//!   check is stdout's first line (or stderr's, when stdout is empty), inert and cut;
//! - the command runs in a process group of its own; at the deadline, and if the task is
//!   dropped, the whole group is killed (SIGKILL), so a script's children go with it; and
//!   after it exits, whatever it left running in its group (`sleep 30 & echo ok`) is killed
//!   too: a check runs every few seconds, and would otherwise pile up orphans.

use super::{failed, passed};
use mcpulse_policy::check::Raw;
use mcpulse_transport::command::{Group, capture, clean};
use std::process::Stdio;
use std::time::Duration;
use tokio::time::Instant;

/// The most bytes of stdout, and of stderr, kept.
pub const OUTPUT_CAP: usize = 4096;
/// After the command exits, how long its pipes may take to reach end of file (a child it left
/// behind can hold them open).
const PIPE_GRACE: Duration = Duration::from_millis(200);

/// The first non-empty line of what a pipe gave.
fn first_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_owned()
}

/// The values a command's output must not show: those [`mcpulse_wire::redact::argv_secrets`]
/// finds in its command line, and the values of the variables passed to it (`env`) of at
/// least [`mcpulse_wire::redact::ARGV_SECRET_MIN_LEN`] characters (a port or a flag is not a
/// secret, and hiding it would hide half the output).
fn secrets(argv: &[String], pass: &[String]) -> mcpulse_wire::redact::Secrets {
    let mut secrets = mcpulse_wire::redact::argv_secrets(argv);
    for value in pass.iter().filter_map(|k| std::env::var(k).ok()) {
        if value.chars().count() >= mcpulse_wire::redact::ARGV_SECRET_MIN_LEN {
            secrets.add(&value);
        }
    }
    secrets
}

pub(super) async fn run(argv: &[String], pass: &[String], deadline: Instant) -> Raw {
    let start = Instant::now();
    let Some((program, args)) = argv.split_first() else {
        return failed(None, "no command");
    };
    let mut cmd = clean(program, args, pass);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Registered with the orphan reaper of the stdio upstream's sessions (same process): it
    // would otherwise collect this child's exit before `wait` does.
    let (mut child, _owned) = match mcpulse_relay::supervise::child::spawn_owned(&mut cmd) {
        Ok(c) => c,
        Err(e) => {
            return failed(
                Some(start.elapsed()),
                &mcpulse_wire::text::spawn_failure(program, &e),
            );
        }
    };
    let pid = child.id();
    let mut group = Group::of(pid);
    let out = capture(child.stdout.take(), OUTPUT_CAP);
    let err = capture(child.stderr.take(), OUTPUT_CAP);
    let status = tokio::time::timeout_at(deadline, child.wait()).await;
    let took = start.elapsed();
    let status = match status {
        Err(_) => {
            group.kill();
            let _ = tokio::time::timeout(Duration::from_secs(1), child.wait()).await;
            return failed(
                Some(took),
                &format!(
                    "{program}: still running after {}; killed",
                    mcpulse_wire::units::human_duration(took.as_millis())
                ),
            );
        }
        Ok(Err(e)) => return failed(Some(took), &format!("{program}: waiting failed: {e}")),
        Ok(Ok(status)) => status,
    };
    group.disarm();
    // What the command left behind in its group dies with it. The leader was just reaped, so
    // its id is signalled again only here, at once: while any member of the group is left the
    // id cannot be reused (Linux keeps a process group's id allocated while it has members),
    // and when none is left the signal finds nothing (reuse would take the whole pid space
    // wrapping around in between). Killed before the pipes are read: a descendant holding
    // them open would otherwise make each run wait out the grace.
    Group::of(pid).kill();
    let (out, err) = tokio::join!(out.finish(PIPE_GRACE), err.finish(PIPE_GRACE));
    let line = Some(first_line(&out))
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| first_line(&err));
    // What the command echoes of its credentials stays out of /readyz: the values of the
    // variables passed to it, and what its command line holds as secret.
    let line = secrets(argv, pass).hide(&line);
    if status.success() {
        return passed(took, if line.is_empty() { "exit 0" } else { &line });
    }
    use std::os::unix::process::ExitStatusExt;
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "failed".to_owned(),
    };
    let why = if line.is_empty() {
        format!("{program} {how}")
    } else {
        format!("{program} {how}: {line}")
    };
    failed(Some(took), &why)
}
