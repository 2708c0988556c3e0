//! The relay: builds the supervisor's settings from the arguments, starts logging and the
//! endpoints through [`super::visibility`], and runs `mcpulse_relay::supervise` on the
//! client's stdin and stdout.
//!
//! The runtime is `current_thread`, driven by `block_on` on the main thread, on purpose: the
//! child gets `PR_SET_PDEATHSIG(SIGKILL)`, which fires when the *thread* that forked it exits.
//! Every spawn happens on this thread, which lives as long as the process; a multi-threaded
//! runtime's worker (or a blocking-pool thread) could exit and kill a healthy child with it.
//!
//! The client's stdin and stdout are read and written through epoll when they are pipes or
//! sockets (see [`client_io`]): tokio's own `stdin()`/`stdout()` hand every read and write to
//! its blocking thread pool, two thread hand-offs per message each way, which was most of the
//! relay's added latency (docs/benchmarks-supervise.md).

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
    start_watchdog();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let code = runtime.block_on(async move {
        let visibility = super::visibility::start(&args).await?;
        let io = client_io::ClientIo::open();
        let stop = stop_signal()?;
        // Spawned, not awaited in `block_on` itself: a task woken by another (the child's
        // stdout reader) runs next, where the `block_on` future is first made to wait for a
        // poll of the I/O driver, one more `epoll_wait` per reply. A `current_thread` runtime
        // still runs it on this thread (the parent-death signal's, see above).
        let outcome = tokio::spawn(mcpulse_relay::supervise::run_until(
            settings,
            io.input,
            io.output,
            visibility.observer.clone(),
            stop,
        ))
        .await
        .context("the relay stopped unexpectedly")?;
        drop(io.restore);
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

/// Starts the watchdog that kills what the child leaves if we are SIGKILLed (grandchildren in
/// its group, or that called `setsid`: the parent-death signal reaches the child alone). Before
/// any child, from the main thread. Without it (no `/proc/self/exe`, a spawn failure) the
/// supervisor still runs, as before, and says so.
pub(crate) fn start_watchdog() {
    use mcpulse_relay::supervise::watchdog;
    match std::env::current_exe().and_then(|exe| watchdog::start(&exe)) {
        Ok(pid) => tracing::debug!(pid, "supervise: watchdog started"),
        Err(e) => tracing::warn!(
            error = %e,
            "supervise: no watchdog; if this supervisor is SIGKILLed, grandchildren of the server may outlive it"
        ),
    }
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

/// The client's end of the relay: fd 0 and fd 1 as non-blocking streams driven by epoll when
/// they are pipes or sockets, else (a terminal, a regular file, /dev/null) tokio's blocking
/// stdio, which works on anything.
///
/// `O_NONBLOCK` belongs to the open file description, which other processes may share (a shell
/// that started us with the same pipe, another program writing to the same stdout), and a
/// process that does not expect it would see `EAGAIN`. So:
/// - a pipe is *reopened* through `/proc/self/fd/N`, which on Linux gives a new description of
///   the same pipe: the flag is set on ours only, nobody else's changes (read end opened with
///   `O_NONBLOCK`, so an already-closed writer cannot block the open);
/// - a socket cannot be reopened (Node-based clients, libuv, give their children socketpairs):
///   the flag is set on the shared description and cleared again when the relay ends
///   ([`Restore`]; a stdio stream is handed to a program blocking). Another process using the same socket at the same time is not a case a
///   stdio server's stdin/stdout meets.
mod client_io {
    use std::fs::File;
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    use tokio::io::{AsyncRead, AsyncWrite};

    pub type Input = Box<dyn AsyncRead + Unpin + Send>;
    pub type Output = Box<dyn AsyncWrite + Unpin + Send>;

    pub struct ClientIo {
        pub input: Input,
        pub output: Output,
        /// Dropped once the relay is done with the streams: puts sockets back to blocking.
        pub restore: Restore,
    }

    /// Sockets made non-blocking, to put back to blocking when dropped.
    #[derive(Default)]
    pub struct Restore(Vec<std::os::unix::net::UnixStream>);

    impl Drop for Restore {
        fn drop(&mut self) {
            for s in &self.0 {
                let _ = s.set_nonblocking(false);
            }
        }
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Kind {
        Pipe,
        Socket,
        /// A terminal, a regular file, a character device: tokio's blocking stdio.
        Other,
    }

    /// What an fd is (a failed fstat, e.g. a closed fd, counts as Other).
    pub fn kind(fd: BorrowedFd<'_>) -> Kind {
        let Ok(owned) = fd.try_clone_to_owned() else {
            return Kind::Other;
        };
        match File::from(owned).metadata().map(|m| m.file_type()) {
            Ok(t) if t.is_fifo() => Kind::Pipe,
            Ok(t) if t.is_socket() => Kind::Socket,
            _ => Kind::Other,
        }
    }

    impl ClientIo {
        pub fn open() -> ClientIo {
            let mut restore = Restore::default();
            let input: Input = match open_side(std::io::stdin().as_fd(), 0, &mut restore) {
                Some(Side::Pipe(f)) => match tokio::net::unix::pipe::Receiver::from_file(f) {
                    Ok(r) => Box::new(r),
                    Err(_) => Box::new(tokio::io::stdin()),
                },
                Some(Side::Socket(s)) => Box::new(s),
                None => Box::new(tokio::io::stdin()),
            };
            let output: Output = match open_side(std::io::stdout().as_fd(), 1, &mut restore) {
                Some(Side::Pipe(f)) => match tokio::net::unix::pipe::Sender::from_file(f) {
                    Ok(w) => Box::new(w),
                    Err(_) => Box::new(tokio::io::stdout()),
                },
                Some(Side::Socket(s)) => Box::new(s),
                None => Box::new(tokio::io::stdout()),
            };
            tracing::debug!(
                stdin = ?kind(std::io::stdin().as_fd()),
                stdout = ?kind(std::io::stdout().as_fd()),
                "supervise: client streams"
            );
            ClientIo {
                input,
                output,
                restore,
            }
        }
    }

    enum Side {
        Pipe(File),
        Socket(tokio::net::UnixStream),
    }

    /// fd `n` (0 or 1) as an epoll-able stream, or None for tokio's stdio.
    fn open_side(fd: BorrowedFd<'_>, n: u8, restore: &mut Restore) -> Option<Side> {
        match kind(fd) {
            Kind::Pipe => {
                let mut options = std::fs::OpenOptions::new();
                if n == 0 {
                    options.read(true);
                } else {
                    options.write(true);
                }
                let file = options
                    .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
                    .open(format!("/proc/self/fd/{n}"))
                    .ok()?;
                // A large message crosses in one write (see the relay's `widen_pipe`).
                mcpulse_relay::supervise::child::widen_pipe(file.as_fd());
                Some(Side::Pipe(file))
            }
            Kind::Socket => {
                let owned: OwnedFd = fd.try_clone_to_owned().ok()?;
                let std = std::os::unix::net::UnixStream::from(owned);
                let keep = std.try_clone().ok()?;
                std.set_nonblocking(true).ok()?;
                restore.0.push(keep);
                match tokio::net::UnixStream::from_std(std) {
                    Ok(s) => Some(Side::Socket(s)),
                    Err(_) => {
                        // Put it back now: the fallback reads it blocking.
                        if let Some(k) = restore.0.pop() {
                            let _ = k.set_nonblocking(false);
                        }
                        None
                    }
                }
            }
            Kind::Other => None,
        }
    }
}
