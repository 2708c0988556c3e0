//! `kind = "command"`: runs `command` (argv; never through a shell, so nothing is parsed as
//! shell syntax) and passes on exit status 0. As the monitor's command sink runs its programs
//! (`mcpulse-monitor` `sink/command.rs`, whose rules this follows):
//! - a clean environment ([`mcpulse_transport::stdio::inherited_env`]: `PATH`, `HOME`, locale…)
//!   plus the variables named in `env`: the gateway's own may hold credentials;
//! - stdin is empty; stdout and stderr are read at once, each up to [`OUTPUT_CAP`] bytes (a
//!   chatty command never blocks on a full pipe, and never fills memory); the output of the
//!   check is stdout's first line (or stderr's, when stdout is empty), inert and cut;
//! - the command runs in a process group of its own; at the deadline, and if the task is
//!   dropped, the whole group is killed (SIGKILL), so a script's children go with it.

use super::{failed, passed};
use mcpulse_policy::check::Raw;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::time::Instant;

/// The most bytes of stdout, and of stderr, kept.
pub const OUTPUT_CAP: usize = 4096;
/// After the command exits, how long its pipes may take to reach end of file (a child it left
/// behind can hold them open).
const PIPE_GRACE: Duration = Duration::from_millis(200);

/// Kills the process group on drop unless disarmed: covers the deadline and an aborted task.
struct Group(Option<i32>);

impl Group {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            // The leader is our unreaped child, so the id cannot have been reused.
            mcpulse_transport::stdio::kill_group(pgid, libc::SIGKILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

type Buf = Arc<Mutex<Vec<u8>>>;

/// Reads a pipe to its end, keeping its first [`OUTPUT_CAP`] bytes.
fn drain(
    pipe: Option<impl AsyncRead + Unpin + Send + 'static>,
) -> (Buf, Option<tokio::task::JoinHandle<()>>) {
    let buf: Buf = Arc::new(Mutex::new(Vec::new()));
    let task = pipe.map(|mut pipe| {
        let buf = Arc::clone(&buf);
        tokio::spawn(async move {
            let mut chunk = [0u8; 1024];
            loop {
                match pipe.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let mut b = buf.lock().unwrap_or_else(|p| p.into_inner());
                        let room = OUTPUT_CAP.saturating_sub(b.len());
                        b.extend_from_slice(&chunk[..n.min(room)]);
                    }
                }
            }
        })
    });
    (buf, task)
}

fn first_line(buf: &Buf) -> String {
    let b = buf.lock().unwrap_or_else(|p| p.into_inner());
    String::from_utf8_lossy(&b)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_owned()
}

pub(super) async fn run(argv: &[String], pass: &[String], deadline: Instant) -> Raw {
    let start = Instant::now();
    let Some((program, args)) = argv.split_first() else {
        return failed(None, "no command");
    };
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .envs(mcpulse_transport::stdio::inherited_env())
        .envs(
            pass.iter()
                .filter_map(|k| std::env::var_os(k).map(|v| (k, v))),
        )
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let why = match e.kind() {
                std::io::ErrorKind::NotFound => "command not found".to_owned(),
                std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
                _ => format!("could not start: {e}"),
            };
            return failed(Some(start.elapsed()), &format!("{program}: {why}"));
        }
    };
    let mut group = Group(child.id().and_then(|p| i32::try_from(p).ok()));
    let (out, out_task) = drain(child.stdout.take());
    let (err, err_task) = drain(child.stderr.take());
    let status = tokio::time::timeout_at(deadline, child.wait()).await;
    let took = start.elapsed();
    let status = match status {
        Err(_) => {
            group.kill();
            let _ = tokio::time::timeout(Duration::from_secs(1), child.wait()).await;
            for t in [out_task, err_task].into_iter().flatten() {
                t.abort();
            }
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
    // Reaped: the group id may be reused from here on, so never signal it.
    group.0 = None;
    for t in [out_task, err_task].into_iter().flatten() {
        let mut t = t;
        if tokio::time::timeout(PIPE_GRACE, &mut t).await.is_err() {
            t.abort();
        }
    }
    let line = Some(first_line(&out))
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| first_line(&err));
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
