//! The command sink: runs `argv` for each alert.
//!
//! - `argv[0]` is executed directly, **never through a shell**: nothing in an alert (a summary can
//!   hold text a server sent) is ever parsed as shell syntax. Write `["sh", "-c", "…"]` yourself
//!   if you want one, and read the alert from the environment there, not by interpolation;
//! - stdin: the alert as the webhook's JSON body ([`super::webhook`], `mcpulse.alert/v1`), then
//!   end of file;
//! - environment: a clean one, as stdio servers get (the monitor's holds API tokens, webhook
//!   secrets, the Slack URL, other targets' credentials): only the base a program needs to run
//!   (`PATH`, `HOME`, `USER`, `LOGNAME`, `SHELL`, `TERM`, `LANG`, `LC_*`, `TMPDIR`, `TZ`:
//!   [`mcpulse_transport::stdio::inherited_env`]), the variables the sink's `env` names, and
//!   `MCPULSE_ALERT_KIND`, `MCPULSE_TARGET`, `MCPULSE_ACTION`, `MCPULSE_DEDUP_KEY`,
//!   `MCPULSE_DELIVERY_ID`, `MCPULSE_SEVERITY`, `MCPULSE_SUMMARY`, made inert
//!   ([`mcpulse_wire::text::message`]: control characters, NUL included, and bidi and invisible
//!   characters become visible escapes such as `\n`, `\x1b`; cut at 1000 characters), since a
//!   script is likely to echo them to a terminal or a log. The exact alert is on stdin. The
//!   dedup key names the incident; the delivery id ([`Alert::delivery_id`]) names this alert of
//!   it, and is the same on every run for it: a command killed mid-run with the monitor runs
//!   again after the restart with the same id, so a command that must act once can remember
//!   the ids it has done;
//! - stdout is discarded; the first 2 KiB of stderr go into the error message of a failure;
//! - exit status 0 is delivered; anything else (a non-zero exit, a signal, the time limit) is a
//!   retryable failure. A program that is not there or not executable is permanent;
//! - the time limit (10 s by default) kills the command's whole process group, so a script's
//!   children go with it; so does shutting the monitor down mid-run. Children a command leaves
//!   running after it *exits* are its own business.

use super::{DeliveryError, webhook};
use crate::alert::{Action, Alert};
use mcpulse_transport::command::{Group, capture, clean};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// How much stderr is kept for the error message.
const STDERR_CAP: usize = 2048;
/// After the command exits, how long its stderr may take to reach end of file (a child it left
/// behind can hold the pipe open).
const STDERR_GRACE: Duration = Duration::from_millis(200);

/// The environment variables a command gets, in order.
pub fn env(alert: &Alert) -> Vec<(&'static str, String)> {
    let action = match alert.action {
        Action::Trigger => "trigger",
        Action::Resolve => "resolve",
        Action::Remind => "remind",
        Action::Notify => "notify",
    };
    let clean = |s: &str| mcpulse_wire::text::message(s).into_owned();
    vec![
        ("MCPULSE_ALERT_KIND", alert.kind.as_str().to_owned()),
        ("MCPULSE_TARGET", clean(&alert.target)),
        ("MCPULSE_ACTION", action.to_owned()),
        ("MCPULSE_DEDUP_KEY", clean(&alert.dedup_key)),
        // Stable across retries and restarts: a command that must act once keys on it.
        ("MCPULSE_DELIVERY_ID", alert.delivery_id()),
        ("MCPULSE_SEVERITY", clean(&alert.severity)),
        ("MCPULSE_SUMMARY", clean(&alert.summary)),
    ]
}

/// Runs the command once for an alert, with a clean environment plus the monitor's variables
/// named in `pass` (those that are set).
pub async fn run(
    argv: &[String],
    pass: &[String],
    alert: &Alert,
    timeout: Duration,
) -> Result<(), DeliveryError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let Some(program) = argv.first().filter(|p| !p.is_empty()) else {
        return Err(DeliveryError::Invalid(
            "the command sink has no program".into(),
        ));
    };
    let input = webhook::body(alert)?;
    let mut cmd = clean(program, &argv[1..], pass);
    cmd.envs(env(alert))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| {
        let (message, permanent) = match e.kind() {
            std::io::ErrorKind::NotFound => (
                "not found (the program, or the interpreter its first line names)".to_owned(),
                true,
            ),
            std::io::ErrorKind::PermissionDenied => (
                "permission denied (is it a file you may execute?)".to_owned(),
                true,
            ),
            _ => (format!("could not start: {e}"), false),
        };
        DeliveryError::Spawn {
            program: program.clone(),
            message,
            permanent,
        }
    })?;
    let mut group = Group::of(child.id());
    // stderr is read by its own task, so that a chatty command never blocks on a full pipe
    // and a grandchild holding the pipe open cannot hold us past the exit.
    let stderr = capture(child.stderr.take(), STDERR_CAP);
    let stdin = child.stdin.take();
    let feed = async move {
        if let Some(mut stdin) = stdin {
            // A command that does not read its stdin (or exits first) is fine: ignore EPIPE.
            let _ = stdin.write_all(input.as_bytes()).await;
            let _ = stdin.shutdown().await;
        }
    };
    let status = tokio::time::timeout_at(deadline, async {
        let (_, status) = tokio::join!(feed, child.wait());
        status
    })
    .await;
    let status = match status {
        Err(_) => {
            group.kill();
            let _ = tokio::time::timeout(Duration::from_secs(1), child.wait()).await;
            return Err(DeliveryError::Timeout(timeout));
        }
        Ok(Err(e)) => {
            group.kill();
            return Err(DeliveryError::Spawn {
                program: program.clone(),
                message: format!("waiting for it failed: {e}"),
                permanent: false,
            });
        }
        Ok(Ok(status)) => status,
    };
    group.disarm();
    let stderr = stderr.finish(STDERR_GRACE).await;
    if status.success() {
        return Ok(());
    }
    let text = {
        String::from_utf8_lossy(&stderr)
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect::<String>()
            .trim()
            .to_owned()
    };
    use std::os::unix::process::ExitStatusExt;
    let status = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        (None, None) => "failed".to_owned(),
    };
    Err(DeliveryError::Exit {
        program: program.clone(),
        status,
        stderr: text,
    })
}
