//! A stdio MCP server as a child process: NDJSON over its stdin and stdout, stderr captured.
//!
//! The child runs in a process group of its own, so that ending the probe ends the server *and*
//! whatever it started (`npx` → `node`, `uv run` → `python`). The group is killed when the
//! [`StdioChild`] is dropped, on every path: success, timeout, panic unwinding or the probe's
//! deadline dropping the future. Stdout lines that are not JSON-RPC are recorded as stdout
//! pollution; stderr lines are recorded with their time; the exit status is recorded when it
//! comes.

use crate::clock::Clock;
use crate::streamable_http::start;
use crate::{Call, Limits};
use mcpulse_wire::jsonrpc::{self, Id, Message};
use mcpulse_wire::message;
use mcpulse_wire::ndjson::{Line, LineDecoder};
use mcpulse_wire::transcript::{
    ErrorKind, Exchange, Exit, Frame, Outcome, Process, Request, TimedLine, TransportKind,
};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::watch;
use tokio::time::{Instant, timeout_at};

/// The most stderr lines kept per process; later ones are counted, not kept.
pub const MAX_STDERR_LINES: usize = 200;
/// What a server started with a clean environment still gets from ours (the variables the MCP
/// SDKs pass by default, and the locale).
pub const INHERITED_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "TMPDIR", "TZ",
];

/// The caller's variables that a clean environment keeps: [`INHERITED_ENV`] and the locale's
/// `LC_*`. One list for everything mcpulse starts with a clean environment (stdio servers,
/// the monitor's command sink).
pub fn inherited_env() -> impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)> {
    std::env::vars_os().filter(|(k, _)| {
        let key = k.to_string_lossy();
        INHERITED_ENV.contains(&key.as_ref()) || key.starts_with("LC_")
    })
}

/// How long replies may still arrive after the server process exited.
const EXIT_DRAIN: Duration = Duration::from_millis(100);
/// The longest stderr line kept.
const MAX_STDERR_LINE: usize = 2000;

enum Out {
    Frame(f64, String),
    /// A line over the cap, dropped, that was the reply to this id (and when it was read).
    TooLarge(f64, Id),
    Closed,
}

/// What came for a request in flight while another reply was awaited.
enum Stashed {
    Reply(Frame),
    /// Its reply, over the cap, was dropped when read (at this time).
    TooLarge(f64),
}

/// A running stdio server.
pub struct StdioChild {
    clock: Clock,
    pgid: Option<i32>,
    stdin: Option<ChildStdin>,
    rx: crate::queue::Receiver<Out>,
    exited: watch::Receiver<bool>,
    record: Arc<Mutex<Process>>,
    closed_stdin_at: Option<Instant>,
    stdout_closed: bool,
    /// Ids of requests written and not yet received.
    in_flight: Vec<i64>,
    /// Replies read while another one was awaited, by the id they answer.
    stash: Vec<(i64, Stashed)>,
    /// The leader exited and the drain after it ran out (see [`EXIT_DRAIN`]).
    drained: bool,
    /// What one exchange may take in (`--max-response-size`): its reply and the messages
    /// before it, and replies kept for others meanwhile.
    max_response_bytes: usize,
}

/// A message written by [`StdioChild::send`], whose reply [`StdioChild::receive`] collects.
pub struct Sent {
    ex: Exchange,
    started: Instant,
    /// The id of the reply to wait for (none for a notification or a failed write).
    awaiting: Option<i64>,
}

impl Drop for StdioChild {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            kill_group(pgid, libc::SIGKILL);
        }
    }
}

fn lock(m: &Mutex<Process>) -> std::sync::MutexGuard<'_, Process> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Sends a signal to a whole process group. ESRCH (already gone) is fine. Public for the
/// supervisor (`mcpulse-relay`), whose child lives in a group of its own as the probe's does.
pub fn kill_group(pgid: i32, sig: i32) {
    if pgid > 0 {
        // SAFETY: kill(2) with a negative pid signals a process group; it has no memory effects.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

impl StdioChild {
    /// Spawns `program args...`. A spawn failure is recorded in the returned `Process`.
    pub fn spawn(
        program: &str,
        args: &[String],
        env: &[(String, String)],
        clean_env: bool,
        purpose: &str,
        limits: Limits,
        clock: Clock,
    ) -> Result<StdioChild, Box<Process>> {
        let mut rec = Process {
            at_ms: clock.at(),
            program: program.to_owned(),
            args: args.to_vec(),
            purpose: Some(purpose.to_owned()),
            ..Process::default()
        };
        let mut cmd = Command::new(program);
        if clean_env {
            cmd.env_clear().envs(inherited_env());
        }
        cmd.args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                rec.spawn_error = Some(mcpulse_wire::text::spawn_failure(program, &e));
                return Err(Box::new(rec));
            }
        };
        let pid = child.id();
        rec.pid = pid;
        let record = Arc::new(Mutex::new(rec));
        let stdin = child.stdin.take();
        // Lines wait for the probe within one response cap of bytes (crate::queue).
        let (tx, rx) = crate::queue::channel(256, limits.max_response_bytes);
        if let Some(stdout) = child.stdout.take() {
            let record = record.clone();
            let max = limits.max_response_bytes;
            tokio::spawn(async move { read_stdout(stdout, tx, record, max, clock).await });
        }
        if let Some(stderr) = child.stderr.take() {
            let record = record.clone();
            tokio::spawn(async move { read_stderr(stderr, record, clock).await });
        }
        let (exit_tx, exited) = watch::channel(false);
        {
            let record = record.clone();
            tokio::spawn(async move {
                let status = child.wait().await;
                let exit = match status {
                    Ok(s) => {
                        use std::os::unix::process::ExitStatusExt;
                        Exit {
                            at_ms: clock.at(),
                            code: s.code(),
                            signal: s.signal(),
                            by_probe: false,
                        }
                    }
                    Err(_) => Exit {
                        at_ms: clock.at(),
                        code: None,
                        signal: None,
                        by_probe: false,
                    },
                };
                lock(&record).exit = Some(exit);
                let _ = exit_tx.send(true);
            });
        }
        Ok(StdioChild {
            clock,
            pgid: pid.and_then(|p| i32::try_from(p).ok()),
            stdin,
            rx,
            exited,
            record,
            closed_stdin_at: None,
            stdout_closed: false,
            in_flight: Vec::new(),
            stash: Vec::new(),
            drained: false,
            max_response_bytes: limits.max_response_bytes,
        })
    }

    /// Whether the child has exited.
    pub fn has_exited(&self) -> bool {
        *self.exited.borrow()
    }

    /// Writes one message and, for a request, waits for the reply with its id. Server-to-client
    /// requests that arrive meanwhile are declined with `-32601`, so the server does not hang.
    pub async fn exchange(&mut self, call: Call<'_>, deadline: Instant) -> Exchange {
        let sent = self.send(call, deadline).await;
        self.receive(sent, deadline).await
    }

    /// Writes one message without waiting for its reply: several requests can be in flight at
    /// once (JSON-RPC matches replies by id), and [`StdioChild::receive`] collects each one. A
    /// reply that arrives while another is awaited is kept for its own `receive`.
    pub async fn send(&mut self, call: Call<'_>, deadline: Instant) -> Sent {
        let started = Instant::now();
        let line = call.message.to_string();
        let request = Request {
            method: "stdio".into(),
            url: None,
            headers: Vec::new(),
            body: Some(line.clone()),
        };
        let mut ex = start(
            call.step,
            TransportKind::Stdio,
            call.era,
            call.page,
            call.id,
            request,
            self.clock.at(),
        );
        let mut awaiting = None;
        if let Err(e) = self.write_line(&line, deadline).await {
            ex.outcome = Outcome::TransportError {
                cause: ErrorKind::Pipe,
                message: e.to_string(),
            };
            self.settle_exit(deadline).await;
        } else if let Some(sent) = call.id {
            self.in_flight.push(sent);
            awaiting = Some(sent);
        } else {
            ex.outcome = Outcome::Accepted;
        }
        Sent {
            ex,
            started,
            awaiting,
        }
    }

    /// Waits for the reply to a message written by [`StdioChild::send`] (nothing, for a
    /// notification or a failed write) and returns the finished exchange.
    pub async fn receive(&mut self, sent: Sent, deadline: Instant) -> Exchange {
        self.receive_patient(sent, Patience::fixed(deadline)).await
    }

    /// When the reply to a first request is given up: see [`Patience`].
    fn give_up_at(&self, p: &Patience) -> Instant {
        if p.until >= p.while_silent {
            return p.until;
        }
        match lock(&self.record).first_output_ms {
            None => p.while_silent,
            Some(first) => {
                let ago = Duration::from_secs_f64(((self.clock.at() - first) / 1000.0).max(0.0));
                let spoke = Instant::now().checked_sub(ago).unwrap_or_else(Instant::now);
                p.until
                    .max(spoke + p.after_first_output)
                    .min(p.while_silent)
            }
        }
    }

    /// [`StdioChild::receive`], giving up as `patience` says: a server that has written nothing
    /// yet is still starting (a package manager's download, an interpreter's start), which is
    /// no evidence about the request.
    pub async fn receive_patient(&mut self, sent: Sent, patience: Patience) -> Exchange {
        let deadline = patience.while_silent.max(patience.until);
        let Sent {
            mut ex,
            started,
            awaiting,
        } = sent;
        let Some(sent) = awaiting else {
            ex.elapsed_ms = self.clock.since(started);
            return ex;
        };
        self.in_flight.retain(|&i| i != sent);
        if let Some(pos) = self.stash.iter().position(|(id, _)| *id == sent) {
            // From the write to the reply's arrival, not to this call: a reply may wait here
            // while another exchange is collected.
            match self.stash.remove(pos).1 {
                Stashed::Reply(frame) => {
                    ex.elapsed_ms = crate::clock::between(ex.at_ms, frame.at_ms);
                    ex.frames.push(frame);
                    ex.outcome = Outcome::Reply { frame: 0 };
                }
                Stashed::TooLarge(at_ms) => {
                    ex.elapsed_ms = crate::clock::between(ex.at_ms, at_ms);
                    ex.outcome = Outcome::TooLarge {
                        limit: self.max_response_bytes,
                    };
                }
            }
            return ex;
        }
        // A leader that exits while a grandchild keeps its stdout open would otherwise leave us
        // waiting for an end-of-file that never comes: after the exit, replies already written
        // get a moment to arrive, then the exchange ends as closed.
        let mut exited = self.exited.clone();
        // After one drain has run out, the replies still to come have had their moment: the
        // next exchanges (a pipeline's) take what is buffered and end at once.
        let mut drain_until: Option<Instant> = self.drained.then(Instant::now);
        // A server may write notifications without end: what this exchange takes in counts
        // against the response cap, as one HTTP response would.
        let mut taken = 0usize;
        // When a reply over the cap, dropped, was read.
        let mut too_large_at = None;
        loop {
            if self.stdout_closed {
                ex.outcome = Outcome::Closed;
                break;
            }
            let give_up = self.give_up_at(&patience);
            // While the server is silent and patience depends on it, look again now and then.
            let look_again = (give_up > patience.until).then(|| Instant::now() + PATIENCE_TICK);
            let wait_until = drain_until
                .map_or(give_up, |d| d.min(give_up))
                .min(look_again.unwrap_or(give_up));
            let received = tokio::select! {
                r = timeout_at(wait_until, self.rx.recv()) => r,
                _ = exited.wait_for(|e| *e), if drain_until.is_none() => {
                    drain_until = Some(Instant::now() + EXIT_DRAIN);
                    continue;
                }
            };
            match received {
                Err(_)
                    if drain_until.is_some_and(|d| Instant::now() >= d)
                        && Instant::now() < deadline =>
                {
                    self.drained = true;
                    ex.outcome = Outcome::Closed;
                    break;
                }
                Err(_) if Instant::now() < self.give_up_at(&patience) => continue,
                Err(_) => {
                    ex.outcome = Outcome::Timeout;
                    break;
                }
                Ok(None) | Ok(Some(Out::Closed)) => {
                    self.stdout_closed = true;
                    ex.outcome = Outcome::Closed;
                    break;
                }
                Ok(Some(Out::TooLarge(at_ms, got))) => {
                    if got.matches(sent) {
                        ex.outcome = Outcome::TooLarge {
                            limit: self.max_response_bytes,
                        };
                        too_large_at = Some(at_ms);
                        break;
                    }
                    match self.in_flight.iter().copied().find(|&i| got.matches(i)) {
                        Some(other) if !self.stash.iter().any(|(k, _)| *k == other) => {
                            self.stash.push((other, Stashed::TooLarge(at_ms)));
                        }
                        // A reply to nothing awaited (a repeat, a stranger's id): noise.
                        _ => noise(
                            &self.record,
                            TimedLine {
                                at_ms,
                                line: format!(
                                    "<a stdout line over the response size cap, a reply to id {got} that no request awaited, was dropped>"
                                ),
                            },
                        ),
                    }
                }
                Ok(Some(Out::Frame(at_ms, raw))) => {
                    let decoded = jsonrpc::peek(&raw);
                    // The first reply to another request in flight, to be kept for it.
                    let keep_for = match &decoded {
                        Ok(d) => match &d.message {
                            Message::Result { id: got, .. } | Message::Error { id: got, .. }
                                if !got.matches(sent) =>
                            {
                                self.in_flight
                                    .iter()
                                    .copied()
                                    .find(|&i| got.matches(i))
                                    .filter(|i| !self.stash.iter().any(|(k, _)| k == i))
                            }
                            _ => None,
                        },
                        Err(_) => None,
                    };
                    // Replies kept for the other requests in flight are not counted here: one
                    // each, each a line within the cap. Anything else (a repeat included) is.
                    if keep_for.is_none() {
                        taken = taken.saturating_add(raw.len() + crate::FRAME_COST);
                        if taken > self.max_response_bytes {
                            ex.outcome = Outcome::TooLarge {
                                limit: self.max_response_bytes,
                            };
                            break;
                        }
                    }
                    let frame = Frame {
                        at_ms,
                        raw,
                        sse_event: None,
                    };
                    match decoded.map(|d| d.message) {
                        Ok(
                            Message::Result { id: ref got, .. }
                            | Message::Error { id: ref got, .. },
                        ) if got.matches(sent) => {
                            ex.frames.push(frame);
                            ex.outcome = Outcome::Reply {
                                frame: ex.frames.len() - 1,
                            };
                            break;
                        }
                        // The first reply to another request in flight: kept for its
                        // `receive` (a repeat is recorded here, as any other message).
                        Ok(Message::Result { .. } | Message::Error { .. })
                            if let Some(other) = keep_for =>
                        {
                            self.stash.push((other, Stashed::Reply(frame)));
                        }
                        Ok(Message::Request { id: req_id, .. }) => {
                            ex.frames.push(frame);
                            let decline = message::method_not_found_reply(&req_id).to_string();
                            let _ = self.write_line(&decline, deadline).await;
                        }
                        _ => ex.frames.push(frame),
                    }
                }
            }
        }
        if matches!(ex.outcome, Outcome::Closed) {
            self.settle_exit(deadline).await;
        }
        ex.elapsed_ms = match ex.outcome {
            // When the reply arrived (it may have waited in the channel while an earlier
            // exchange of a pipeline, or another process, was collected).
            Outcome::Reply { frame } => {
                ex.frames.get(frame).map_or(self.clock.since(started), |f| {
                    crate::clock::between(ex.at_ms, f.at_ms)
                })
            }
            _ => too_large_at.map_or(self.clock.since(started), |at| {
                crate::clock::between(ex.at_ms, at)
            }),
        };
        ex
    }

    /// Renames what this process is for, once the flow knows (see `Process::purpose`).
    pub fn set_purpose(&self, purpose: &str) {
        lock(&self.record).purpose = Some(purpose.to_owned());
    }

    async fn write_line(&mut self, line: &str, deadline: Instant) -> Result<(), WriteError> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(WriteError::Closed);
        };
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        let write = async {
            stdin.write_all(&buf).await?;
            stdin.flush().await
        };
        match timeout_at(deadline, write).await {
            Err(_) => Err(WriteError::Timeout),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(WriteError::BrokenPipe),
            Ok(Err(e)) => Err(WriteError::Io(e)),
            Ok(Ok(())) => Ok(()),
        }
    }

    /// Gives a child whose stdout closed a moment to report its exit status.
    async fn settle_exit(&mut self, deadline: Instant) {
        let until = deadline.min(Instant::now() + Duration::from_millis(200));
        let mut exited = self.exited.clone();
        let _ = timeout_at(until, exited.wait_for(|e| *e)).await;
    }

    /// Ends the child the way the spec describes: close stdin, give it a moment, then SIGTERM,
    /// then SIGKILL, always to the whole group. Returns the process record.
    pub async fn shutdown(mut self, grace: Duration) -> Process {
        let already = self.has_exited();
        self.stdin = None; // EOF on the server's stdin
        self.closed_stdin_at = Some(Instant::now());
        let mut exited = self.exited.clone();
        if !already
            && timeout_at(Instant::now() + grace, exited.wait_for(|e| *e))
                .await
                .is_err()
        {
            if let Some(pgid) = self.pgid {
                kill_group(pgid, libc::SIGTERM);
            }
            if timeout_at(Instant::now() + grace, exited.wait_for(|e| *e))
                .await
                .is_err()
            {
                if let Some(pgid) = self.pgid {
                    kill_group(pgid, libc::SIGKILL);
                }
                let _ = timeout_at(Instant::now() + grace, exited.wait_for(|e| *e)).await;
            }
        }
        // Grandchildren that outlived the leader go too.
        if let Some(pgid) = self.pgid.take() {
            kill_group(pgid, libc::SIGKILL);
        }
        let mut rec = lock(&self.record).clone();
        if !already && let Some(exit) = rec.exit.as_mut() {
            exit.by_probe = true;
        }
        rec
    }

    /// The record so far (for a probe cut short).
    pub fn record(&self) -> Process {
        lock(&self.record).clone()
    }
}

/// Why a line could not be written to the child's stdin; recorded as the exchange's transport
/// error (kind `Pipe`), so the messages are what reports show.
#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("stdin already closed")]
    Closed,
    #[error("timed out writing to the server's stdin (it is not reading)")]
    Timeout,
    #[error("the server closed its stdin (broken pipe); it has probably exited")]
    BrokenPipe,
    #[error("writing to the server's stdin: {0}")]
    Io(std::io::Error),
}

async fn read_stdout(
    mut stdout: tokio::process::ChildStdout,
    tx: crate::queue::Sender<Out>,
    record: Arc<Mutex<Process>>,
    max: usize,
    clock: Clock,
) {
    let mut decoder = LineDecoder::new(max);
    let mut buf = vec![0u8; 64 * 1024];
    let mut spoke = false;
    loop {
        let n = match stdout.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // Stamped when read, not when the channel takes each line (a full channel holds the
        // reader back while a pipeline is being written).
        let at_ms = clock.at();
        if !spoke {
            spoke = true;
            first_output(&record, at_ms);
        }
        for line in decoder.push(&buf[..n]) {
            if !handle_line(line, &tx, &record, at_ms).await {
                return;
            }
        }
    }
    if let Some(line) = decoder.finish() {
        let _ = handle_line(line, &tx, &record, clock.at()).await;
    }
    let _ = tx.send(Out::Closed, 0).await;
}

/// Routes one stdout line; false when nobody listens any more.
async fn handle_line(
    line: Line,
    tx: &crate::queue::Sender<Out>,
    record: &Mutex<Process>,
    at_ms: f64,
) -> bool {
    match line {
        Line::Text(t) if t.trim().is_empty() => true,
        Line::Text(t) => {
            if jsonrpc::peek(&t).is_ok() {
                let size = t.len();
                tx.send(Out::Frame(at_ms, t), size).await.is_ok()
            } else {
                let mut shown = t;
                truncate(&mut shown, MAX_STDERR_LINE);
                noise(record, TimedLine { at_ms, line: shown });
                true
            }
        }
        // The reply to a request, too large to keep: the exchange awaiting it ends now, not
        // at the deadline.
        Line::TooLong {
            reply_to: Some(id), ..
        } => tx.send(Out::TooLarge(at_ms, id), 0).await.is_ok(),
        Line::TooLong {
            len_at_least,
            reply_to: None,
        } => {
            let line = format!(
                "<a stdout line of at least {len_at_least} bytes, over the response size cap, was dropped>"
            );
            noise(record, TimedLine { at_ms, line });
            true
        }
    }
}

/// Records a stdout line that is not JSON-RPC, up to [`MAX_STDERR_LINES`]; later ones are
/// counted, so a server printing in a loop cannot grow the record without end.
fn noise(record: &Mutex<Process>, line: TimedLine) {
    let mut rec = lock(record);
    if rec.stdout_noise.len() < MAX_STDERR_LINES {
        rec.stdout_noise.push(line);
    } else {
        rec.stdout_noise_dropped += 1;
    }
}

async fn read_stderr(
    stderr: tokio::process::ChildStderr,
    record: Arc<Mutex<Process>>,
    clock: Clock,
) {
    let mut lines = BufReader::new(stderr);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        // Bounded read of one line: a stderr without newlines cannot grow memory without end.
        let mut limited = (&mut lines).take(64 * 1024);
        match limited.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut line = String::from_utf8_lossy(&buf).trim_end().to_owned();
        truncate(&mut line, MAX_STDERR_LINE);
        let at_ms = clock.at();
        first_output(&record, at_ms);
        let mut rec = lock(&record);
        if rec.stderr.len() < MAX_STDERR_LINES {
            rec.stderr.push(TimedLine { at_ms, line });
        } else {
            rec.stderr_dropped += 1;
        }
    }
}

/// How often a patient wait looks again whether a silent server has spoken.
const PATIENCE_TICK: Duration = Duration::from_millis(50);

/// How long the reply to a request is awaited.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    /// Given up then, once the server has written anything (or if `while_silent` is earlier).
    pub until: Instant,
    /// While the server has written nothing at all, awaited until then instead.
    pub while_silent: Instant,
    /// After the server first wrote something, awaited at least this much longer (within
    /// `while_silent`): it has only just started.
    pub after_first_output: Duration,
}

impl Patience {
    /// Given up at `deadline`, whatever the server did.
    pub fn fixed(deadline: Instant) -> Patience {
        Patience {
            until: deadline,
            while_silent: deadline,
            after_first_output: Duration::ZERO,
        }
    }
}

/// Notes the server's first output (on either stream), if it is the first.
fn first_output(record: &Mutex<Process>, at_ms: f64) {
    let mut rec = lock(record);
    let first = rec.first_output_ms.get_or_insert(at_ms);
    *first = first.min(at_ms);
}

fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
}
