//! The supervised child process: spawning it, reading its stdout and stderr, and stopping it
//! with everything it started. It owns process hygiene; it does not know what a message is
//! (the session, [`super::session`], does).
//!
//! - The child leads a process group of its own (so `npx` → `node`, `uv run` → `python` and
//!   `sh -c` chains go with it) and gets `PR_SET_PDEATHSIG(SIGKILL)`: if the supervisor is
//!   killed, the child dies too. The parent-death signal fires when the *thread* that forked
//!   the child exits, not the process; the supervisor therefore runs on a `current_thread`
//!   runtime on the main thread (see `mcpulse supervise`), which lives as long as the process.
//! - The supervisor is a child subreaper (`PR_SET_CHILD_SUBREAPER`, [`become_subreaper`]): a
//!   grandchild that calls `setsid` to leave the group is reparented to us, not to init, when
//!   its parent exits. On stop, [`Child::stop`] kills every process whose parent chain leads to
//!   the child (or to us, for those reparented, recognised by the environment variable
//!   [`LINEAGE_VAR`] every descendant inherits) and reaps those zombies by pid only, so tokio's
//!   own `wait` on the child still gets the child's status.
//! - Stderr is passed through to our stderr as the child wrote it (the client logs a server's
//!   stderr the same way without the supervisor), or, in the gateway ([`Stderr::Log`]), logged
//!   line by line, inert and with secrets hidden, since there the process's stderr is the
//!   gateway's own log; its tail is kept in a bounded ring ([`StderrRing`]) to explain a
//!   crash.

use super::lines::{Clipped, LineRead, LineReader};
use mcpulse_transport::stdio::kill_group;
use std::collections::{HashMap, HashSet, VecDeque};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::process::Command;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout_at};

/// Set in the child's environment (and so in every descendant's that does not clear it) to
/// `<supervisor pid>-<random>-<instance>-<generation>`: how a grandchild that left the process
/// group and was reparented to us is recognised as ours at stop time, and by the
/// [`super::watchdog`] after a SIGKILLed supervisor (the random part keeps a later process that
/// reuses our pid from being taken for us).
pub const LINEAGE_VAR: &str = "MCPULSE_SUPERVISE_LINEAGE";

/// The start of every lineage this process gives: `<pid>-<random>-`.
pub fn lineage_prefix() -> &'static str {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PREFIX.get_or_init(|| {
        use std::hash::BuildHasher;
        let random = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
        format!("{}-{:x}-", std::process::id(), random & 0xffff_ffff)
    })
}

/// How long after the child's exit its stdout may still be read before the exit is reported.
const STDOUT_DRAIN: Duration = Duration::from_millis(200);

/// How a child ended: its exit code or the signal that killed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExitStatus {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exited with code {c}"),
            (None, Some(s)) => write!(f, "was killed by signal {s}"),
            (None, None) => write!(f, "exited"),
        }
    }
}

/// What a child's stdout and exit tell the session, tagged with the child's generation so
/// that news from a child already replaced is ignored.
#[derive(Debug)]
pub enum ChildEvent {
    /// One line (without its newline).
    Line(u64, Vec<u8>),
    /// A line longer than the limit, dropped; its top-level id, to answer the request it was for.
    TooLong(u64, Clipped),
    /// The child exited.
    Exited(u64, ExitStatus),
}

/// The last bytes of the child's stderr (of every generation), at most `cap` bytes.
#[derive(Debug)]
pub struct StderrRing {
    cap: usize,
    bytes: Mutex<VecDeque<u8>>,
}

impl StderrRing {
    pub fn new(cap: usize) -> StderrRing {
        StderrRing {
            cap,
            bytes: Mutex::new(VecDeque::with_capacity(cap.min(64 * 1024))),
        }
    }

    fn push(&self, chunk: &[u8]) {
        if self.cap == 0 {
            return;
        }
        let mut ring = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        let chunk = &chunk[chunk.len().saturating_sub(self.cap)..];
        let overflow = (ring.len() + chunk.len()).saturating_sub(self.cap);
        let drop = overflow.min(ring.len());
        ring.drain(..drop);
        ring.extend(chunk);
    }

    /// The last `max` bytes kept, as text (lossy UTF-8; not yet made inert).
    pub fn tail(&self, max: usize) -> String {
        let ring = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        let skip = ring.len().saturating_sub(max);
        let bytes: Vec<u8> = ring.iter().skip(skip).copied().collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// How to start the child.
#[derive(Debug, Clone)]
pub struct Program {
    pub program: String,
    pub args: Vec<String>,
}

/// A running child.
pub struct Child {
    pub pid: u32,
    pub generation: u64,
    lineage: String,
    /// Messages for the writer task (each a line, newline included, or what is left of one):
    /// only those that could not go straight through ([`Child::send`]).
    stdin: Option<mpsc::UnboundedSender<Vec<u8>>>,
    /// The child's stdin, shared with the writer task: [`Child::send`] writes a line itself
    /// when the writer has nothing waiting (one request at a time, the common case), which
    /// saves a task hand-off per message. Dropped with `stdin` (the writer holds the other
    /// reference until it has written what it was given), so the child sees EOF after both.
    pipe: Option<Arc<pipe::Sender>>,
    /// Bytes queued for its stdin and not yet written: the session stops reading the client
    /// while this is over its bound (backpressure instead of unbounded memory).
    pub stdin_backlog: Arc<AtomicUsize>,
    writer: JoinHandle<()>,
    exited: watch::Receiver<Option<ExitStatus>>,
    /// When [`Child::close_stdin`] closed its stdin: the grace for that step runs from then,
    /// so a stop after the client's EOF does not wait it a second time.
    stdin_closed: Option<Instant>,
    /// [`Child::stop`] ran to its end: nothing is left for `Drop` to kill.
    stopped: bool,
}

/// Why a child could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// `ENOENT` from `execve`: the program is not there, or it is a script whose `#!` line
    /// names an interpreter that is not (`#!/usr/bin/python3` in a slim image); the kernel
    /// does not say which.
    #[error("{0}: not found (the program, or the interpreter its first line names)")]
    NotFound(String),
    #[error("{0}: permission denied")]
    PermissionDenied(String),
    #[error("{program}: {source}")]
    Other {
        program: String,
        source: std::io::Error,
    },
}

impl SpawnError {
    /// For a start that would fail again alike (not found, not executable): the program, and
    /// what went wrong with what to fix (to follow `"<program>: "`); `None` for the others.
    pub fn with_hint(&self) -> Option<(&str, &'static str)> {
        match self {
            SpawnError::NotFound(program) => Some((
                program,
                "not found (the program, or the interpreter its first line names; check the command and PATH)",
            )),
            SpawnError::PermissionDenied(program) => Some((
                program,
                "permission denied (check that it is a file you may execute)",
            )),
            SpawnError::Other { .. } => None,
        }
    }
}

/// Makes this process a child subreaper, so that orphaned descendants of the child (a
/// grandchild that called `setsid` and whose parent exited) are reparented to us and can be
/// found and killed at stop. Returns whether it worked (Linux only).
pub fn become_subreaper() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) sets a flag on this process; no memory is
        // passed.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        rc == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// The pipe buffer the relay asks for ([`widen_pipe`]): one large message (a 1 MiB tool result)
/// goes through in one write and one read instead of sixteen 64 KiB rounds, each a wake-up of
/// the other side. Linux caps it at `/proc/sys/fs/pipe-max-size` (1 MiB by default) for
/// unprivileged processes; the memory is the kernel's and is used only while bytes wait.
pub const PIPE_SIZE: i32 = 1 << 20;

/// Asks for a [`PIPE_SIZE`] buffer on a pipe (Linux: `F_SETPIPE_SZ`). A best effort: on
/// failure (not a pipe, over the limit, another system) the pipe keeps its size. The buffer
/// belongs to the pipe, so the process at its other end sees the same, larger, buffer.
pub fn widen_pipe(fd: std::os::fd::BorrowedFd<'_>) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: fcntl(F_SETPIPE_SZ) on a descriptor borrowed for the call; it passes an
        // integer, no memory, and fails harmlessly on anything that is not a pipe.
        #[allow(unsafe_code)]
        let _ = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = fd;
}

static INSTANCE: AtomicUsize = AtomicUsize::new(0);

/// The children tokio waits for (every supervisor's in this process, a test binary running
/// several): [`reap_orphans`] leaves these alone, or tokio would lose their exit status.
static LEADERS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn leaders() -> std::sync::MutexGuard<'static, Vec<u32>> {
    LEADERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A child that other code in this process spawned and waits for (the gateway's `command`
/// dependency checks): registered like a supervised child, under the same lock, so that
/// [`reap_orphans`] never collects the exit status its owner waits for (tokio would then get
/// ECHILD, "No child processes"). Unregistered when dropped: keep it until the wait is done.
pub struct Owned(u32);

impl Drop for Owned {
    fn drop(&mut self) {
        let pid = self.0;
        leaders().retain(|p| *p != pid);
    }
}

/// Spawns `command` as an [`Owned`] child: see there.
pub fn spawn_owned(
    command: &mut tokio::process::Command,
) -> std::io::Result<(tokio::process::Child, Owned)> {
    let mut registry = leaders();
    let child = command.spawn()?;
    let pid = child.id().unwrap_or(0);
    registry.push(pid);
    drop(registry);
    Ok((child, Owned(pid)))
}

/// Reaps, for as long as the runtime runs, the orphans reparented to us (we are a subreaper)
/// as they die: without it, a grandchild that exits mid-session (`(sleep 1 &)` in a shell
/// wrapper) stays a zombie for the supervisor's whole life, and at stop its empty
/// `/proc/<pid>/environ` hides it from [`descendants`]. Woken by SIGCHLD; looks at our own
/// zombie children only, never a child tokio waits for ([`LEADERS`]). Spawn it once, after
/// [`become_subreaper`] succeeded.
///
/// On one runtime thread (the gateway's default) the woken reapers run one after another, so
/// [`reap_once`]'s lock never sees two at once: there the first one woken marks a scan
/// wanted ([`SCAN_WANTED`]) and yields, the others find it marked and go back to sleep, and
/// the one scan that follows covers every exit signalled before it began. So a SIGCHLD costs
/// one `/proc` scan, not one per session.
pub async fn reap_orphans() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut sigchld) = signal(SignalKind::child()) else {
        return;
    };
    let me = std::process::id();
    loop {
        if !SCAN_WANTED.swap(true, Ordering::SeqCst) {
            let marked = Marked(me);
            // Let the other reapers woken by the same signal run first (and find the mark).
            tokio::task::yield_now().await;
            drop(marked);
        }
        if sigchld.recv().await.is_none() {
            return;
        }
    }
}

/// A reaper has marked a scan that has not begun yet: a reaper woken meanwhile leaves it
/// to that scan (see [`reap_orphans`]).
static SCAN_WANTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The mark of [`SCAN_WANTED`], held by the reaper that set it: dropping it clears the mark
/// and scans. Also when that reaper's task is dropped at its yield (its session ended): the
/// reapers that left the scan to it lose nothing, and the mark is never left set.
struct Marked(u32);

impl Drop for Marked {
    fn drop(&mut self) {
        SCAN_WANTED.store(false, Ordering::SeqCst);
        let me = self.0;
        in_background(move || reap_once(me));
    }
}

/// Runs `f`, a walk of `/proc`, on tokio's blocking pool when there is a runtime (inline when
/// there is none): a walk reads every process's `stat`, about 9 µs a process here (13 ms on a
/// host with 1,500 processes), and on the gateway's one runtime thread every client would wait
/// for it. Fire and forget: for work whose result nobody awaits.
fn in_background(f: impl FnOnce() + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn_blocking(f)),
        Err(_) => f(),
    }
}

/// Runs `f`, a walk of `/proc` (see [`in_background`]), on tokio's blocking pool and waits
/// for it; inline when the pool does not run it (the runtime shutting down), so the work is
/// never skipped.
async fn off_runtime<T: Send + 'static>(f: impl FnOnce() -> T + Clone + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f.clone()).await {
        Ok(t) => t,
        Err(_) => f(),
    }
}

/// A scan is wanted (some reaper was woken since the last scan began).
static REAP_PENDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Held by the reaper scanning now.
static REAP_SCAN: Mutex<()> = Mutex::new(());

/// One scan for every reaper woken by the same SIGCHLD: a process running many supervised
/// sessions (the gateway: one per client session, each with its reaper) scans `/proc` once per
/// child exit, not once per session. A reaper that finds another scanning leaves the pending
/// scan to it; the scanner looks again after letting go, so no wake-up is lost.
fn reap_once(me: u32) {
    REAP_PENDING.store(true, Ordering::SeqCst);
    // The store above and the lock's state below must not be reordered (a lost scan).
    std::sync::atomic::fence(Ordering::SeqCst);
    loop {
        let guard = match REAP_SCAN.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        while REAP_PENDING.swap(false, Ordering::SeqCst) {
            reap_zombies(me);
        }
        drop(guard);
        std::sync::atomic::fence(Ordering::SeqCst);
        if !REAP_PENDING.load(Ordering::SeqCst) {
            return;
        }
    }
}

/// One pass of [`reap_orphans`].
fn reap_zombies(me: u32) {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return;
    };
    for pid in dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
        let Some((state, parent)) = state_and_parent(pid) else {
            continue;
        };
        // The registry stays locked through the waitpid: a child is registered under this
        // lock before it is forked, so no child tokio waits for can take a reaped orphan's pid
        // between the check and the wait.
        let registry = leaders();
        if parent != me || state != "Z" || registry.contains(&pid) {
            continue;
        }
        if let Ok(raw) = i32::try_from(pid) {
            // SAFETY: waitpid on one pid (a zombie child of ours no one else waits for), with
            // WNOHANG; the status pointer is a valid local.
            #[allow(unsafe_code)]
            unsafe {
                let mut status = 0;
                libc::waitpid(raw, &mut status, libc::WNOHANG);
            }
        }
    }
}

/// A process's state letter and parent, from `/proc/<pid>/stat` (Linux).
fn state_and_parent(pid: u32) -> Option<(String, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.to_owned();
    Some((state, fields.next()?.parse().ok()?))
}

/// Where a child's stderr goes besides the ring.
#[derive(Debug, Clone)]
pub enum Stderr {
    /// To our stderr, byte for byte (`mcpulse supervise`: the client logs it as its own).
    PassThrough,
    /// To our log, a line an event at `info` (`child_stderr`), each line inert, cut to
    /// [`STDERR_LOG_LINE`] bytes, these values hidden: the gateway, whose stderr is its log,
    /// which a child must not forge nor fill with its credentials.
    Log(mcpulse_wire::redact::Secrets),
}

/// The longest stderr line logged whole in [`Stderr::Log`] (longer ones are cut there).
pub const STDERR_LOG_LINE: usize = 4096;

impl Child {
    /// Spawns generation `generation` of the child. Its stdout lines (at most `max_line`
    /// bytes each) and its exit go to `events`; its stderr to `ring` and as `stderr` says.
    pub fn spawn(
        cmd: &Program,
        generation: u64,
        max_line: usize,
        events: mpsc::Sender<ChildEvent>,
        ring: Arc<StderrRing>,
        stderr: Stderr,
    ) -> Result<Child, SpawnError> {
        let instance = INSTANCE.fetch_add(1, Ordering::Relaxed);
        let lineage = format!("{}{instance}-{generation}", lineage_prefix());
        // The child gets our whole environment: the client chose it for the server.
        let mut command = Command::new(&cmd.program);
        command
            .args(&cmd.args)
            .env(LINEAGE_VAR, &lineage)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        #[cfg(target_os = "linux")]
        {
            let parent = std::process::id();
            // SAFETY: the closure runs in the forked child before exec and calls only
            // async-signal-safe functions (prctl, getppid), allocating nothing.
            #[allow(unsafe_code)]
            unsafe {
                command.pre_exec(move || {
                    // The signal fires when the thread that forked us exits: see the module docs.
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    // The supervisor died between fork and prctl: the signal was never sent.
                    if u32::try_from(libc::getppid()).ok() != Some(parent) {
                        return Err(std::io::Error::other("the supervisor exited"));
                    }
                    Ok(())
                });
            }
        }
        // Spawned and registered under the lock the reaper takes, so that no reaper (another
        // supervisor's on another thread, in a test binary where several share the process)
        // can collect a child that exits at once before it is known as ours: that would steal
        // the exit status tokio waits for.
        let mut registry = leaders();
        let mut child = command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SpawnError::NotFound(cmd.program.clone()),
            std::io::ErrorKind::PermissionDenied => {
                SpawnError::PermissionDenied(cmd.program.clone())
            }
            _ => SpawnError::Other {
                program: cmd.program.clone(),
                source: e,
            },
        })?;
        let pid = child.id().unwrap_or(0);
        registry.push(pid);
        drop(registry);
        super::watchdog::group_started(pid);
        let stdin = child
            .stdin
            .take()
            .and_then(|s| s.into_owned_fd().ok())
            .and_then(|fd| pipe::Sender::from_owned_fd(fd).ok())
            .map(Arc::new);
        {
            use std::os::fd::AsFd;
            if let Some(stdin) = &stdin {
                widen_pipe(stdin.as_fd());
            }
            if let Some(stdout) = &child.stdout {
                widen_pipe(stdout.as_fd());
            }
        }
        // The exit is reported after the last stdout line (or a moment after the exit, if a
        // grandchild holds stdout open): a reply written just before exiting is relayed, not
        // lost to the restart.
        let (stdout_done, stdout_closed) = tokio::sync::oneshot::channel::<()>();
        if let Some(stdout) = child.stdout.take() {
            let events = events.clone();
            tokio::spawn(async move {
                read_stdout(stdout, generation, max_line, events).await;
                drop(stdout_done);
            });
        }
        if let Some(pipe) = child.stderr.take() {
            match stderr {
                Stderr::PassThrough => drop(tokio::spawn(pass_stderr(pipe, ring))),
                Stderr::Log(secrets) => drop(tokio::spawn(log_stderr(pipe, ring, pid, secrets))),
            }
        }
        let (exit_tx, exited) = watch::channel(None);
        tokio::spawn(async move {
            use std::os::unix::process::ExitStatusExt;
            let status = match child.wait().await {
                Ok(s) => ExitStatus {
                    code: s.code(),
                    signal: s.signal(),
                },
                Err(_) => ExitStatus::default(),
            };
            leaders().retain(|p| *p != pid);
            let _ = exit_tx.send(Some(status));
            let _ = tokio::time::timeout(STDOUT_DRAIN, stdout_closed).await;
            let _ = events.send(ChildEvent::Exited(generation, status)).await;
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let stdin_backlog = Arc::new(AtomicUsize::new(0));
        let writer = tokio::spawn(write_stdin(stdin.clone(), rx, stdin_backlog.clone()));
        Ok(Child {
            pid,
            generation,
            lineage,
            stdin: Some(tx),
            pipe: stdin,
            stdin_backlog,
            writer,
            exited,
            stdin_closed: None,
            stopped: false,
        })
    }

    /// Writes one line (newline included) to the child's stdin: straight through when nothing
    /// is waiting before it and the pipe has room, else (what is left of it) through the writer
    /// task, in order. A child whose stdin is closed loses it silently: its exit is what the
    /// session acts on.
    pub fn send(&self, mut line: Vec<u8>) {
        let Some(tx) = &self.stdin else { return };
        // Nothing queued means the writer is idle (it subtracts after writing): a direct write
        // cannot overtake a line of its.
        if self.stdin_backlog.load(Ordering::Relaxed) == 0
            && let Some(pipe) = &self.pipe
        {
            match pipe.try_write(&line) {
                Ok(n) if n == line.len() => return,
                Ok(n) => {
                    line.drain(..n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                // A closed pipe (the child exited): dropped, as the writer would.
                Err(_) => return,
            }
        }
        self.stdin_backlog.fetch_add(line.len(), Ordering::Relaxed);
        let _ = tx.send(line);
    }

    /// Closes the child's stdin once what is queued is written: the polite way to end a stdio
    /// server.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
        self.pipe = None;
        self.stdin_closed.get_or_insert_with(Instant::now);
    }

    /// Whether the child is stopped (SIGSTOP, a debugger): frozen, so never "busy" with the
    /// request it holds. Any member of its process group, or a descendant that left it, in
    /// state `T`/`t` counts: under `npx`, `uv run` or `sh -c` the leader is a wrapper that
    /// just waits, and the server that froze is below it. Read from `/proc` (Linux; elsewhere,
    /// never); called only when a heartbeat went unanswered.
    pub fn is_stopped(&self) -> bool {
        let frozen = |pid: u32| {
            state_and_group(pid).map(|(state, group)| (matches!(state.as_str(), "T" | "t"), group))
        };
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return false;
        };
        let in_group = dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(&frozen)
            .any(|(stopped, group)| stopped && group == self.pid);
        in_group
            || descendants(self.pid, &self.lineage, !self.has_exited())
                .into_iter()
                .any(|pid| frozen(pid).is_some_and(|(stopped, _)| stopped))
    }

    /// Whether the child has exited.
    pub fn has_exited(&self) -> bool {
        self.exited.borrow().is_some()
    }

    async fn wait_exit(&mut self, until: Instant) -> bool {
        timeout_at(until, self.exited.wait_for(|e| e.is_some()))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Stops the child and everything it started: close its stdin (after what was queued is
    /// written, within `grace`), wait `grace` (counted from when the stdin was closed, if
    /// [`Child::close_stdin`] did it earlier), SIGTERM the group, wait `grace`, then SIGKILL
    /// the group and every descendant, and reap the descendants reparented to us. Bounded:
    /// at most about `2 × grace + 2 s`.
    pub async fn stop(mut self, grace: Duration) {
        let pgid = i32::try_from(self.pid).unwrap_or(0);
        // Closing the channel lets the writer finish what is queued, then drop the pipe (EOF).
        self.stdin = None;
        self.pipe = None;
        let until = self.stdin_closed.unwrap_or_else(Instant::now) + grace;
        if timeout_at(until, &mut self.writer).await.is_err() {
            self.writer.abort(); // a child not reading its stdin: drop the pipe now
        }
        if !self.wait_exit(until).await {
            kill_group(pgid, libc::SIGTERM);
            if !self.wait_exit(Instant::now() + grace).await {
                kill_group(pgid, libc::SIGKILL);
            }
        }
        // Whatever is left: the group (grandchildren outliving the leader) and descendants that
        // left it. SIGKILL, then reap our own zombies among them. Once the leader is reaped its
        // pid may be reused: the group is signalled only while a member remains (which keeps
        // the id from being reused), and the walk no longer goes through the leader's pid.
        // The walks of /proc run off the runtime's threads (see `in_background`).
        let leader_alive = !self.has_exited();
        let (leader, lineage) = (self.pid, self.lineage.clone());
        let leftovers = off_runtime(move || {
            if leader_alive || group_has_members(leader) {
                kill_group(pgid, libc::SIGKILL);
            }
            let leftovers = descendants(leader, &lineage, leader_alive);
            for pid in &leftovers {
                kill_pid(*pid);
            }
            leftovers
        })
        .await;
        let _ = self
            .wait_exit(Instant::now() + Duration::from_secs(1))
            .await;
        reap(&leftovers, self.pid).await;
        // Descendants that died with the group and were reparented to us as zombies (their
        // empty environ hid them from the walk): reaped now, the supervisor may exit next.
        off_runtime(|| reap_zombies(std::process::id())).await;
        self.stopped = true;
        super::watchdog::group_stopped(self.pid);
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // A child dropped without a finished `stop` (a stop cut short by a signal, a panic, a
        // test giving up) still ends: its group and every descendant, SIGKILLed now.
        if self.stopped {
            return;
        }
        let alive = !self.has_exited();
        if alive || group_has_members(self.pid) {
            kill_group(i32::try_from(self.pid).unwrap_or(0), libc::SIGKILL);
        }
        for pid in descendants(self.pid, &self.lineage, alive) {
            kill_pid(pid);
        }
        super::watchdog::group_stopped(self.pid);
    }
}

pub(super) fn kill_pid(pid: u32) {
    if let Ok(pid) = i32::try_from(pid)
        && pid > 0
    {
        // SAFETY: kill(2) on one process id; it has no memory effects.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// Reaps (waitpid by pid, never -1) those of `pids` that are our own children, so that a
/// descendant reparented to us does not stay a zombie. The child itself (`leader`) is left to
/// tokio, which waits for it.
async fn reap(pids: &[u32], leader: u32) {
    let me = std::process::id();
    let mut ours: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|p| *p != leader && parent_of(*p) == Some(me))
        .collect();
    let until = Instant::now() + Duration::from_secs(1);
    while !ours.is_empty() && Instant::now() < until {
        ours.retain(|pid| {
            let Ok(raw) = i32::try_from(*pid) else {
                return false;
            };
            // Locked through the waitpid, as in reap_zombies: once another reaper took this
            // one, its pid may be a new child that tokio waits for.
            let registry = leaders();
            if registry.contains(pid) {
                return false;
            }
            // SAFETY: waitpid on one pid with WNOHANG; the status pointer is a valid local.
            #[allow(unsafe_code)]
            let rc = unsafe {
                let mut status = 0;
                libc::waitpid(raw, &mut status, libc::WNOHANG)
            };
            rc == 0 // 0: still running; the pid or -1 (not ours / gone): done with it
        });
        if !ours.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Whether any process is in process group `pgid` (`/proc`, Linux). While one is, no new
/// process can be given `pgid` as its pid, so signalling the group reaches only ours.
fn group_has_members(pgid: u32) -> bool {
    group_has(pgid, |_| true)
}

/// Whether a process other than a zombie is in process group `pgid`: one that a kill can
/// still end (the [`super::watchdog`] sweeps until there is none).
pub(super) fn group_has_live_members(pgid: u32) -> bool {
    group_has(pgid, |state| state != "Z")
}

fn group_has(pgid: u32, state_ok: impl Fn(&str) -> bool) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .any(|pid| {
            state_and_group(pid).is_some_and(|(state, group)| group == pgid && state_ok(&state))
        })
}

/// A process's state letter and process group, from `/proc/<pid>/stat` (Linux).
fn state_and_group(pid: u32) -> Option<(String, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.to_owned();
    Some((state, fields.nth(1)?.parse().ok()?))
}

/// A process's parent, from `/proc/<pid>/stat` (Linux).
fn parent_of(pid: u32) -> Option<u32> {
    state_and_parent(pid).map(|(_, parent)| parent)
}

/// Whether `/proc/<pid>/environ` holds `LINEAGE_VAR=lineage`.
fn has_lineage(pid: u32, lineage: &str) -> bool {
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let want = format!("{LINEAGE_VAR}={lineage}");
    env.split(|b| *b == 0).any(|kv| kv == want.as_bytes())
}

/// The child's descendants, walking `/proc`: processes whose parent chain passes through
/// `leader`, and those reparented to us (their chain leads to us) that carry the child's
/// lineage. Not the supervisor's other children (in a test binary, other tests' processes).
fn descendants(leader: u32, lineage: &str, leader_alive: bool) -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: HashMap<u32, u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect();
    let mut found = HashSet::new();
    for &pid in parents.keys() {
        if pid == me || pid == leader {
            continue;
        }
        // Walk up (bounded: a cycle cannot happen, but a racing /proc could mislead).
        let mut at = pid;
        for _ in 0..4096 {
            let Some(&up) = parents.get(&at) else { break };
            if up == leader {
                // A reaped leader's children were reparented to us (found below); a process
                // under that pid now is someone else's.
                if leader_alive {
                    found.insert(pid);
                }
                break;
            }
            if up == me {
                if has_lineage(pid, lineage) {
                    found.insert(pid);
                }
                break;
            }
            if up <= 1 {
                break;
            }
            at = up;
        }
    }
    found.into_iter().collect()
}

async fn write_stdin(
    stdin: Option<Arc<pipe::Sender>>,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    backlog: Arc<AtomicUsize>,
) {
    let Some(stdin) = stdin else { return };
    while let Some(line) = rx.recv().await {
        let n = line.len();
        let ok = write_all(&stdin, &line).await.is_ok();
        backlog.fetch_sub(n, Ordering::Relaxed);
        if !ok {
            // A closed pipe (the child exited): drain without writing, never spin on EPIPE.
            while let Some(line) = rx.recv().await {
                backlog.fetch_sub(line.len(), Ordering::Relaxed);
            }
            return;
        }
    }
}

/// `write_all` on a shared pipe (`AsyncWrite` needs it owned).
async fn write_all(pipe: &pipe::Sender, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        pipe.writable().await?;
        match pipe.try_write(buf) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn read_stdout(
    stdout: tokio::process::ChildStdout,
    generation: u64,
    max_line: usize,
    events: mpsc::Sender<ChildEvent>,
) {
    let mut reader = LineReader::new(stdout, max_line);
    loop {
        let event = match reader.next_line().await {
            LineRead::Line(line) => ChildEvent::Line(generation, line),
            LineRead::TooLong(clipped) => ChildEvent::TooLong(generation, clipped),
            LineRead::Eof => return,
        };
        if events.send(event).await.is_err() {
            return;
        }
    }
}

/// Copies the child's stderr to ours, chunk by chunk, and into the ring. Our stderr being
/// closed or slow never blocks the child for long: a write error stops the pass-through, not
/// the ring.
async fn pass_stderr(stderr: tokio::process::ChildStderr, ring: Arc<StderrRing>) {
    let mut stderr = stderr;
    let mut out = tokio::io::stderr();
    let mut passing = true;
    let mut buf = vec![0u8; 8192];
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        ring.push(chunk);
        if passing && out.write_all(chunk).await.is_err() {
            passing = false;
        }
    }
}

/// Logs the child's stderr a line an event ([`Stderr::Log`]) and keeps it in the ring. A line
/// longer than [`STDERR_LOG_LINE`] is logged in pieces of at most that size; memory stays at one
/// piece whatever the child writes.
async fn log_stderr(
    stderr: tokio::process::ChildStderr,
    ring: Arc<StderrRing>,
    pid: u32,
    secrets: mcpulse_wire::redact::Secrets,
) {
    let mut stderr = stderr;
    let mut buf = vec![0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    let log = |piece: &[u8]| {
        let text = String::from_utf8_lossy(piece);
        let text = secrets.hide(text.trim_end_matches(['\r', '\n']));
        if !text.trim().is_empty() {
            tracing::info!(pid, line = %mcpulse_wire::text::inert(&text, STDERR_LOG_LINE), "child_stderr");
        }
    };
    let emit = |line: &mut Vec<u8>| {
        log(line);
        line.clear();
    };
    // A line over the cap is cut where no secret is split, and before its last bytes when
    // they begin one that the next bytes may complete: that part starts the next piece, so
    // each piece hides its secrets whole (cutting at the cap showed a secret across it in two
    // parts, neither hidden). Only a secret longer than a piece is still cut.
    let emit_full = |line: &mut Vec<u8>| {
        let cut = match secrets.piece_end(line) {
            0 => line.len(),
            cut => cut,
        };
        log(&line[..cut]);
        line.drain(..cut);
    };
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        ring.push(chunk);
        for piece in chunk.split_inclusive(|b| *b == b'\n') {
            let mut rest = piece;
            while !rest.is_empty() {
                let take = rest
                    .len()
                    .min(STDERR_LOG_LINE.saturating_sub(line.len()).max(1));
                line.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                if line.len() >= STDERR_LOG_LINE {
                    emit_full(&mut line);
                }
            }
            if piece.ends_with(b"\n") {
                emit(&mut line);
            }
        }
    }
    emit(&mut line);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live process standing where a reaped leader's pid was (pid reuse): neither its
    /// children nor its group are taken for the child's once the leader is known to be gone.
    #[test]
    fn a_reused_leader_pid_is_not_walked_and_an_empty_group_not_signalled() {
        use std::os::unix::process::CommandExt;
        let mut other = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = other.id();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while descendants(pid, "none", true).is_empty() {
            assert!(std::time::Instant::now() < until, "the sleep never started");
            std::thread::sleep(Duration::from_millis(10));
        }
        // What the walk did before: the unrelated sleep counted as the child's.
        assert_eq!(descendants(pid, "none", true).len(), 1);
        assert!(descendants(pid, "none", false).is_empty());
        assert!(group_has_members(pid));
        kill_group(i32::try_from(pid).unwrap(), libc::SIGKILL);
        other.wait().unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while group_has_members(pid) {
            assert!(std::time::Instant::now() < until, "the group never emptied");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn the_ring_keeps_the_last_bytes_only() {
        let ring = StderrRing::new(8);
        ring.push(b"hello ");
        ring.push(b"world\n");
        assert_eq!(ring.tail(100), "o world\n");
        ring.push(b"0123456789abcdef");
        assert_eq!(ring.tail(100), "89abcdef");
        assert_eq!(ring.tail(3), "def");
        let none = StderrRing::new(0);
        none.push(b"x");
        assert_eq!(none.tail(10), "");
    }

    /// A line over the cap with a secret across the cap: logged in pieces that each hide it
    /// whole, never a part of it in each (the cut at the cap split it, neither part hidden).
    #[tokio::test]
    async fn a_secret_across_the_cut_of_a_long_stderr_line_is_hidden_whole() {
        let logs = mcpulse_testkit::logs::Capture::new();
        let _guard = tracing::subscriber::set_default(logs.clone());
        let secret = "s3cr3tT0k3nValue";
        let mut secrets = mcpulse_wire::redact::Secrets::default();
        secrets.add(secret);
        // The secret starts 5 bytes before the cap; a second line ends with its start only.
        let script = format!(
            "exec >&2; head -c {} /dev/zero | tr '\\0' x; printf '{secret}tail\\nend s3cr3\\n'",
            STDERR_LOG_LINE - 5
        );
        let (tx, mut rx) = mpsc::channel(16);
        let child = Child::spawn(
            &Program {
                program: "sh".into(),
                args: vec!["-c".into(), script],
            },
            1,
            1 << 20,
            tx,
            Arc::new(StderrRing::new(1 << 16)),
            Stderr::Log(secrets),
        )
        .unwrap();
        while let Some(event) = rx.recv().await {
            if matches!(event, ChildEvent::Exited { .. }) {
                break;
            }
        }
        let lines = || -> Vec<String> {
            logs.events()
                .iter()
                .filter_map(|e| e.field("line").map(str::to_owned))
                .collect()
        };
        let until = Instant::now() + Duration::from_secs(5);
        while lines().len() < 3 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        child.stop(Duration::from_millis(100)).await;
        let lines = lines();
        assert_eq!(lines.len(), 3, "{lines:?}");
        // The first piece ends before the secret; the second has it hidden whole.
        assert_eq!(lines[0], "x".repeat(STDERR_LOG_LINE - 5));
        assert_eq!(lines[1], "<redacted>tail");
        // A secret's start that nothing completes is no secret.
        assert_eq!(lines[2], "end s3cr3");
        for line in &lines {
            assert!(!line.contains("s3cr3tT0k"), "{line}");
        }
    }

    #[tokio::test]
    async fn stderr_as_log_lines_is_inert_cut_and_hides_secrets() {
        let logs = mcpulse_testkit::logs::Capture::new();
        let _guard = tracing::subscriber::set_default(logs.clone());
        let lines = || -> Vec<String> {
            logs.events()
                .iter()
                .filter_map(|e| e.field("line").map(str::to_owned))
                .collect()
        };
        let mut secrets = mcpulse_wire::redact::Secrets::default();
        secrets.add("hunter2hunter2");
        let script = format!(
            "exec >&2; printf 'one\\n\\033[2Jforged\\r\\nthe password is hunter2hunter2\\n'; head -c {} /dev/zero | tr '\\0' x; printf 'tail'",
            STDERR_LOG_LINE + 10
        );
        let (tx, mut rx) = mpsc::channel(16);
        let ring = Arc::new(StderrRing::new(1 << 16));
        let child = Child::spawn(
            &Program {
                program: "sh".into(),
                args: vec!["-c".into(), script],
            },
            1,
            1 << 20,
            tx,
            ring.clone(),
            Stderr::Log(secrets),
        )
        .unwrap();
        // The exit comes after the last stdout line; the stderr task ends at its EOF.
        while let Some(event) = rx.recv().await {
            if matches!(event, ChildEvent::Exited { .. }) {
                break;
            }
        }
        let until = Instant::now() + Duration::from_secs(5);
        while lines().len() < 5 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        child.stop(Duration::from_millis(100)).await;
        let lines = lines();
        assert_eq!(lines.len(), 5, "{lines:?} ring: {:?}", ring.tail(200));
        assert_eq!(lines[0], "one");
        assert!(
            !lines[1].contains('\u{1b}') && lines[1].ends_with("forged"),
            "{lines:?}"
        );
        assert_eq!(lines[2], "the password is <redacted>");
        // A line past the cap is logged in pieces of the cap: the cap, then the rest.
        assert_eq!(lines[3].len(), STDERR_LOG_LINE);
        assert_eq!(lines[4], format!("{}tail", "x".repeat(10)));
        // The ring keeps the bytes as written (the crash message's tail hides them later).
        assert!(ring.tail(1 << 16).contains("hunter2hunter2"));
    }
}
