//! The relay: builds the supervisor's settings from the arguments, starts logging and the
//! endpoints through [`super::visibility`], and runs `mcpulse_relay::supervise` on the
//! client's stdin and stdout.
//!
//! The runtime is `current_thread`, driven by `block_on` on the main thread, on purpose: the
//! child gets `PR_SET_PDEATHSIG(SIGKILL)`, which fires when the *thread* that forked it exits.
//! Every spawn happens on this thread, which lives as long as the process; a multi-threaded
//! runtime's worker (or a blocking-pool thread) could exit and kill a healthy child with it.

use crate::cli::SuperviseArgs;
use crate::settings;
use anyhow::{Context, Result, bail};
use mcpulse_relay::supervise::{
    Backoff, HeartbeatPolicy, Program, RestartPolicy, Settings, Timeouts,
};

/// Exit code when the supervisor gave up (restart budget spent).
const EXIT_FATAL: u8 = 1;

pub fn run(args: SuperviseArgs) -> Result<u8> {
    let settings = resolve(&args)?;
    super::visibility::init_logging(&args)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let code = runtime.block_on(async move {
        let visibility = super::visibility::start(&args).await?;
        let stop = stop_signal()?;
        let outcome = mcpulse_relay::supervise::run_until(
            settings,
            tokio::io::stdin(),
            tokio::io::stdout(),
            visibility.observer.clone(),
            stop,
        )
        .await;
        Ok(if outcome.fatal.is_some() {
            EXIT_FATAL
        } else {
            0
        })
    });
    // Not a plain drop: that would wait for the blocking thread still reading our stdin, which
    // the client may keep open (stopped by a signal, not by EOF). Everything is stopped by now.
    runtime.shutdown_background();
    code
}

/// Completes on the first SIGTERM, SIGINT or SIGHUP. Without it the default action would kill
/// the supervisor outright: the parent-death signal then ends the child alone, and what the child
/// started (`npx` → `node`, `uv run` → `python`) is orphaned. The SDK clients close the server's
/// stdin, wait 2 s, then SIGTERM it; a terminal's hang-up and Ctrl-C arrive the same way. The
/// handlers are installed here, before any child starts, so no early signal is missed.
fn stop_signal() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    let mut hup = signal(SignalKind::hangup()).context("handling SIGHUP")?;
    Ok(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
            _ = hup.recv() => "SIGHUP",
        };
        tracing::info!(signal = name, "mcpulse supervise: signalled");
    })
}

/// The arguments, checked: every duration and size parsed, the command present.
pub fn resolve(args: &SuperviseArgs) -> Result<Settings> {
    let Some((program, rest)) = args.command.split_first() else {
        bail!(
            "no server command: write it after `--`, e.g. `mcpulse supervise -- npx -y @modelcontextprotocol/server-everything`"
        );
    };
    if program.is_empty() {
        bail!("the server command is empty");
    }
    let mut s = Settings::new(Program {
        program: program.clone(),
        args: rest.to_vec(),
    });
    s.heartbeat_interval = settings::duration(&args.heartbeat_interval, "--heartbeat-interval")?;
    s.heartbeat_timeout = settings::duration(&args.heartbeat_timeout, "--heartbeat-timeout")?;
    if args.failures == 0 {
        bail!("--failures must be at least 1");
    }
    s.heartbeat = HeartbeatPolicy {
        failures: args.failures,
        busy_grace: settings::duration(&args.busy_grace, "--busy-grace")?,
    };
    let backoff = Backoff {
        initial: settings::duration(&args.backoff_initial, "--backoff-initial")?,
        max: settings::duration(&args.backoff_max, "--backoff-max")?,
    };
    if backoff.max < backoff.initial {
        bail!(
            "--backoff-max {:?} is shorter than --backoff-initial {:?}",
            args.backoff_max,
            args.backoff_initial
        );
    }
    s.restart = RestartPolicy {
        backoff,
        reset_after: settings::duration(&args.backoff_reset, "--backoff-reset")?,
        max_restarts: args.max_restarts,
        window: settings::duration(&args.restart_window, "--restart-window")?,
    };
    let request = args
        .request_timeout
        .as_deref()
        .map(|t| settings::duration(t, "--request-timeout"))
        .transpose()?;
    let mut tools = Vec::new();
    for raw in &args.tool_timeout {
        // The last `=`: a tool name may hold one, a duration never does.
        let Some((tool, dur)) = raw.rsplit_once('=').filter(|(t, _)| !t.is_empty()) else {
            bail!(
                "--tool-timeout {raw:?}: write it as TOOL=DURATION, e.g. --tool-timeout search=2m"
            );
        };
        tools.push((
            tool.to_owned(),
            settings::duration(dur, &format!("--tool-timeout {tool}:"))?,
        ));
    }
    s.timeouts = Timeouts { request, tools };
    s.stop_grace = settings::duration(&args.stop_grace, "--stop-grace")?;
    if args.queue_max_messages == 0 {
        bail!("--queue-max-messages must be at least 1");
    }
    s.queue_max_messages = args.queue_max_messages;
    s.queue_max_bytes = settings::size(&args.queue_max_bytes, "--queue-max-bytes")?;
    s.max_message_size = settings::size(&args.max_message_size, "--max-message-size")?;
    s.stderr_ring = settings::size(&args.stderr_ring, "--stderr-ring")?;
    // A restarted child answers the replayed initialize within a few heartbeat timeouts, or
    // at least 10 s (npx and uv may download before they start).
    s.start_timeout = (s.heartbeat_timeout * 4).max(std::time::Duration::from_secs(10));
    Ok(s)
}
