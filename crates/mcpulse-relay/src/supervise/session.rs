//! The relay loop: one task owning every piece of session state, woken by the client's lines,
//! the child's lines and exits, and its own timers (heartbeat, request deadlines, backoff,
//! replay). The per-message path is kept short (docs/benchmarks-supervise.md): the client's
//! lines are read by the loop itself, and a message is written straight to its destination
//! when the pipe has room and nothing waits before it, so a request crosses from the client's
//! pipe to the child's in one turn of one task. Only what cannot be written at once goes to a
//! writer task per destination, and the child's stdout is read by a task per child (tagged with
//! its generation), so that neither side's slowness blocks the other (a child that does not
//! read its stdin while it writes its stdout cannot deadlock the relay).
//!
//! Routing, by what the envelope says ([`super::envelope`]):
//! - a client request is forwarded (or queued while the child restarts) and tracked by its id
//!   until its reply comes back, its deadline passes or the child dies: the client always gets
//!   exactly one answer;
//! - a child reply is forwarded if its id is in flight, else dropped (a late reply after a
//!   timeout, or a reply to our own heartbeat or replay, which start with our prefix);
//! - server→client requests (sampling, elicitation, roots) are forwarded and remembered with the
//!   child's generation: the client's reply is dropped if that child has since been replaced;
//! - notifications pass both ways (the client's `notifications/cancelled` included);
//! - a child stdout line that is not a JSON object is junk: reported, never forwarded;
//! - a client batch (a JSON array): its notifications and replies go on one by one, as if
//!   each came on a line of its own; each request in it, and each item that is no message,
//!   is answered with [`codes::INVALID_REQUEST`] and not forwarded.
//!
//! Bounds: a message is at most `max_message_size` bytes; the restart queue at most
//! `queue_max_messages` / `queue_max_bytes`; the stderr ring `stderr_ring` bytes; bytes waiting
//! for the child's stdin or the client's stdout past `queue_max_bytes` (or one message) stop
//! the relay from reading more from the other side until they drain (backpressure, as a
//! plain pipe would apply).

use super::Settings;
use super::child::{Child, ChildEvent, ExitStatus, StderrRing};
use super::codes;
use super::envelope::{Envelope, Kind, canonical_id, raw_result};
use super::lines::{Clipped, LineRead, LineReader};
use crate::status::{
    CallOutcome, ChildState, HeartbeatOutcome, Observer, Restart, RestartReason, Status,
};
use mcpulse_policy::heartbeat::{Beat, Heard, Heartbeat};
use mcpulse_policy::restart::{Decision, Restarts};
use mcpulse_wire::text;
use mcpulse_wire::version::MODERN;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout_at};

/// How the supervisor ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Why it gave up, if the restart budget was spent (the process then exits non-zero).
    pub fatal: Option<String>,
}

/// Each step of the stop sequence after a signal (at most; `--stop-grace` if shorter).
pub const SIGNAL_GRACE: Duration = Duration::from_millis(500);
/// How often a stalled relay looks whether the backlog drained.
const STALL_POLL: Duration = Duration::from_millis(10);
/// How much of the child's stderr goes into an error message.
const STDERR_TAIL: usize = 600;
/// The most server→client requests remembered (to drop replies meant for a replaced child),
/// and the most timed-out requests tracked for `--busy-grace`.
const MAX_SERVER_REQUESTS: usize = 4096;
/// The most client requests tracked at once, and the longest id tracked (bytes, canonical):
/// past either, a request is answered with [`codes::TOO_MANY_REQUESTS`] instead of being
/// forwarded, so that tracking costs at most about 10,000 × 1 KiB.
const MAX_IN_FLIGHT: usize = 10_000;
const MAX_ID_LEN: usize = 1024;
/// The most recent restarts kept in the status.
const RECENT_RESTARTS: usize = 10;

/// A client request the child has not answered yet.
struct InFlight {
    /// `tools/call`'s tool, for the per-tool observer call.
    tool: Option<String>,
    /// When the client sent it.
    received: Instant,
    /// The child generation it was written to (none while queued) and when.
    sent: Option<(u64, Instant)>,
    deadline: Option<Instant>,
}

/// The legacy handshake, as the client made it, for replay.
#[derive(Default)]
struct Handshake {
    /// The client's `initialize` request line.
    initialize: Option<Vec<u8>>,
    /// Its id while the first reply is awaited.
    initialize_id: Option<String>,
    /// The client's `notifications/initialized` line.
    initialized: Option<Vec<u8>>,
    /// What the first child negotiated: protocol version and capabilities.
    negotiated: Option<(String, serde_json::Value)>,
    /// The client finished its handshake (legacy: `initialized` sent; modern: a first reply).
    done: bool,
    /// The client speaks 2026-07-28 (per-request `_meta`, no `initialize`).
    modern: bool,
}

/// A heartbeat (or replayed `initialize`) of ours awaiting its reply.
struct Pending {
    id: String,
    sent: Instant,
    deadline: Instant,
}

/// The session: everything the loop knows.
struct Session {
    s: Settings,
    observer: Arc<dyn Observer>,
    origin: Instant,
    /// Lines to the client (newline included), and the bytes waiting to be written.
    out: ClientOut,
    out_backlog: Arc<AtomicUsize>,
    child: Option<Child>,
    generation: u64,
    events: mpsc::Sender<ChildEvent>,
    ring: Arc<StderrRing>,
    /// Stops of replaced children, still running (waited for before the next start).
    stopping: Vec<JoinHandle<()>>,
    /// The child may be written client messages (started, and any replay answered).
    ready: bool,
    queue: VecDeque<(Vec<u8>, Option<String>)>,
    queue_bytes: usize,
    dropped_notifications: u64,
    in_flight: HashMap<String, InFlight>,
    /// Requests answered with a timeout but still running in the child (until their late reply
    /// or a restart), by id, with when they were sent: the child is busy with them, so they
    /// count for `--busy-grace` as if still in flight.
    expired: HashMap<String, Instant>,
    /// Server→client requests forwarded, by the id the client saw, with the generation that
    /// sent them and, when the supervisor gave one a new id, the id its server gave it
    /// ([`ServerRequest`]).
    server_requests: HashMap<String, ServerRequest>,
    handshake: Handshake,
    /// Set when a restarted child negotiated differently; every request but `initialize` is
    /// answered with [`codes::SESSION_CHANGED`] until the client initializes again.
    mismatch: Option<String>,
    replay: Option<Pending>,
    beat: Option<Pending>,
    next_beat: Option<Instant>,
    heartbeat: Heartbeat,
    restarts: Restarts,
    backoff_until: Option<Instant>,
    /// The client closed its stdin; the child's stdin was closed; wait for its exit until then.
    closing_until: Option<Instant>,
    /// Why the supervisor gave up.
    fatal: Option<String>,
    /// Our ids: `"mcpulse-<pid>-<random>-<n>"`, strings, so no client numbering reaches them.
    id_prefix: String,
    counter: u64,
    random: std::collections::hash_map::RandomState,
    status: Status,
    /// Stopping on a signal: the stops of replaced children get a bounded wait too.
    signalled: bool,
    /// A child was started once: a program that cannot be run is fatal only before that.
    started_once: bool,
}

/// Runs the supervisor until the client closes `input`: relays it to the child and the
/// child's messages to `output`. Generic over the client's streams so tests drive it through
/// `tokio::io::duplex`; `mcpulse supervise` passes stdin and stdout. Call it on a
/// `current_thread` runtime on the thread that lives as long as the process (see
/// [`super::child`] on the parent-death signal).
pub async fn run<R, W>(
    settings: Settings,
    input: R,
    output: W,
    observer: Arc<dyn Observer>,
) -> Outcome
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    run_until(settings, input, output, observer, std::future::pending()).await
}

/// [`run`], also ending when `stop` completes (`mcpulse supervise` passes SIGTERM, SIGINT or
/// SIGHUP): the child is then stopped at once with each step of the graceful sequence cut to
/// [`SIGNAL_GRACE`], because whoever sent the signal (an SDK client: ~2 s after closing our
/// stdin) SIGKILLs us soon after, and a SIGKILLed supervisor leaves the child's grandchildren
/// behind.
pub async fn run_until<R, W, S>(
    settings: Settings,
    input: R,
    output: W,
    observer: Arc<dyn Observer>,
    stop: S,
) -> Outcome
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
    S: std::future::Future<Output = ()>,
{
    let mut stop = std::pin::pin!(stop);
    let reaper = if super::child::become_subreaper() {
        Some(tokio::spawn(super::child::reap_orphans()))
    } else {
        tracing::debug!("not a child subreaper: grandchildren that call setsid may outlive a stop");
        None
    };
    // Read here, in the loop, not by a task of its own: a request goes from the client's pipe to
    // the child's in one task's turn (the reader is cancel-safe, see `LineReader::next_line`).
    let mut client = LineReader::new(input, settings.max_message_size);
    let out_backlog = Arc::new(AtomicUsize::new(0));
    let out = ClientOut {
        outbox: Arc::new(std::sync::Mutex::new(Outbox {
            w: Box::pin(output),
            queue: VecDeque::new(),
            dirty: false,
            broken: false,
            finishing: false,
        })),
        wake: Arc::new(tokio::sync::Notify::new()),
        backlog: out_backlog.clone(),
    };
    let writer = tokio::spawn(write_client(
        out.outbox.clone(),
        out.wake.clone(),
        out_backlog.clone(),
    ));
    let (events, mut child_rx) = mpsc::channel(EVENTS);
    let random = std::collections::hash_map::RandomState::new();
    let id_prefix = format!(
        "mcpulse-{}-{:x}-",
        std::process::id(),
        random.hash_one(0u8) & 0xffff_ffff
    );
    let mut session = Session {
        ring: Arc::new(StderrRing::new(settings.stderr_ring)),
        s: settings,
        observer,
        origin: Instant::now(),
        out,
        out_backlog,
        child: None,
        generation: 0,
        events,
        stopping: Vec::new(),
        ready: false,
        queue: VecDeque::new(),
        queue_bytes: 0,
        dropped_notifications: 0,
        in_flight: HashMap::new(),
        expired: HashMap::new(),
        server_requests: HashMap::new(),
        handshake: Handshake::default(),
        mismatch: None,
        replay: None,
        beat: None,
        next_beat: None,
        heartbeat: Heartbeat::default(),
        restarts: Restarts::default(),
        backoff_until: None,
        closing_until: None,
        fatal: None,
        id_prefix,
        counter: 0,
        random,
        status: Status::new(ChildState::Starting, epoch_ms()),
        signalled: false,
        started_once: false,
    };
    session.start().await;
    let mut client_open = true;
    // One timer for the session, moved when the next wake changes: not a new one registered
    // and dropped in the timer wheel for every message.
    let mut timer = std::pin::pin!(sleep_until(Instant::now()));
    // Which side is looked at first when both have something (see `Turn`).
    let mut client_first = false;
    loop {
        let wake = session.next_wake();
        if let Some(w) = wake
            && timer.deadline() != w
        {
            timer.as_mut().reset(w);
        }
        let to_child_ok = session
            .child
            .as_ref()
            .is_none_or(|c| c.stdin_backlog.load(Ordering::Relaxed) <= session.backlog_bound());
        let to_client_ok = session.client_ok();
        // The client is read only while both sides drain: a client message may be answered by
        // the supervisor itself (FATAL, a full queue, a too-long request), and a client that
        // writes without reading would otherwise grow those answers without bound.
        let read_client = client_open && to_child_ok && to_client_ok;
        // A stalled side (see the module docs) is looked at again every few milliseconds;
        // without this, a client and a child both not reading would leave no branch.
        let stalled = !to_client_ok || !to_child_ok;
        // The stop and the timer first, then the two sides, whichever did not go last time
        // first. A side that always has a message (a server flooding its stdout) would
        // otherwise win every turn; and once a task's turn has spent tokio's budget (128 units
        // of work), every later branch looks not ready, turn after turn: the client, the
        // timers and the stop would never run while the flood lasts.
        let turn = if client_first {
            tokio::select! {
                biased;
                () = &mut stop => Turn::Stop,
                () = timer.as_mut(), if wake.is_some() => Turn::Timer,
                line = client.next_line(), if read_client => Turn::Client(line),
                event = child_rx.recv(), if to_client_ok => Turn::Child(event),
                () = tokio::time::sleep(STALL_POLL), if stalled => Turn::Stalled,
            }
        } else {
            tokio::select! {
                biased;
                () = &mut stop => Turn::Stop,
                () = timer.as_mut(), if wake.is_some() => Turn::Timer,
                event = child_rx.recv(), if to_client_ok => Turn::Child(event),
                line = client.next_line(), if read_client => Turn::Client(line),
                () = tokio::time::sleep(STALL_POLL), if stalled => Turn::Stalled,
            }
        };
        match turn {
            Turn::Stop => {
                tracing::info!("supervise: signalled; stopping the server");
                session.s.stop_grace = session.s.stop_grace.min(SIGNAL_GRACE);
                session.signalled = true;
                break;
            }
            Turn::Timer => {
                // What the server sent before the deadline, already read, is heard first (as
                // when the server's side went first in every turn): a heartbeat's or a
                // request's reply waiting in the channel is not taken for a miss. Bounded by
                // the channel's capacity, so the timers still run during a flood, and by the
                // client's backlog, looked at before each event as the loop does.
                if take_in_received(
                    &mut session,
                    &mut child_rx,
                    Session::client_ok,
                    Session::child_event,
                ) {
                    break;
                }
                if session.closing_until.is_some_and(|t| t <= Instant::now()) {
                    break;
                }
                session.timers().await;
            }
            Turn::Child(event) => {
                client_first = true;
                if let Some(event) = event
                    && session.child_event(event)
                {
                    break;
                }
            }
            Turn::Client(line) => {
                client_first = false;
                match line {
                    LineRead::Line(line) if line.is_empty() => {}
                    LineRead::Line(line) => session.client_line(line),
                    LineRead::TooLong(clipped) => session.client_too_long(clipped),
                    LineRead::Eof => {
                        client_open = false;
                        if !session.client_closed() {
                            break;
                        }
                    }
                }
            }
            Turn::Stalled => {}
        }
    }
    drop(client);
    // A signal may come while the stop after the client's EOF still runs its full grace (the
    // SDK clients send SIGTERM 2 s after closing our stdin, as that grace ends): it cuts that
    // stop short (dropping the child SIGKILLs what is left) and finishes with the short one.
    let hurried = !session.signalled
        && tokio::select! {
            () = session.shutdown() => false,
            () = &mut stop => true,
        };
    if session.signalled || hurried {
        if hurried {
            tracing::info!("supervise: signalled while stopping; stopping at once");
            session.s.stop_grace = session.s.stop_grace.min(SIGNAL_GRACE);
            session.signalled = true;
        }
        session.shutdown().await;
    }
    if let Some(reaper) = reaper {
        reaper.abort();
    }
    let grace = session.s.stop_grace;
    session.out.finish();
    if timeout_at(Instant::now() + grace, writer).await.is_err() {
        tracing::warn!("the client stopped reading; unsent output dropped");
    }
    Outcome {
        fatal: session.fatal,
    }
}

/// What woke the relay loop.
enum Turn {
    Stop,
    Timer,
    Child(Option<ChildEvent>),
    Client(LineRead),
    Stalled,
}

/// The capacity of the channel of the child's events (lines and exit).
const EVENTS: usize = 256;

/// Takes in the child's events already received (at most [`EVENTS`]) before the timers judge
/// a deadline, each only while `client_ok` (the client's backlog within its bound), looked at
/// before each one as the loop does before each turn: an event passed on to the client grows
/// that backlog, and a client that stops reading partway must stop the taking in, or the
/// server's side would hold 256 more messages than the documented bound. Generic so that a
/// unit test drives it without a session. Returns whether an event ends the loop.
fn take_in_received<S, E>(
    session: &mut S,
    events: &mut mpsc::Receiver<E>,
    client_ok: impl Fn(&S) -> bool,
    mut handle: impl FnMut(&mut S, E) -> bool,
) -> bool {
    for _ in 0..EVENTS {
        if !client_ok(session) {
            return false;
        }
        let Ok(event) = events.try_recv() else {
            return false;
        };
        if handle(session, event) {
            return true;
        }
    }
    false
}

/// The client's output stream and the lines waiting for it, shared by the session (which writes
/// a line straight through when nothing waits before it: no task hand-off on the reply's path)
/// and [`write_client`] (which writes what could not go at once, when the stream has room).
struct Outbox {
    w: std::pin::Pin<Box<dyn AsyncWrite + Send>>,
    /// Lines (or the rest of one) not yet written, in order.
    queue: VecDeque<Vec<u8>>,
    /// Written since the last flush (a no-op on pipes and sockets; tokio's blocking stdout, the
    /// fallback, finishes its write in the flush).
    dirty: bool,
    /// A write failed (the client closed its stdout): everything is dropped from now on.
    broken: bool,
    /// The session is over: write what is left, shut the stream down, end.
    finishing: bool,
}

/// The session's end of the [`Outbox`].
struct ClientOut {
    outbox: Arc<std::sync::Mutex<Outbox>>,
    /// Wakes [`write_client`] when something waits in the queue (or must be flushed).
    wake: Arc<tokio::sync::Notify>,
    /// Bytes waiting in the queue: the relay stops reading the child past its bound.
    backlog: Arc<AtomicUsize>,
}

impl ClientOut {
    fn lock(&self) -> std::sync::MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `line` now if nothing waits before it and the stream takes it, else queues it (or
    /// what is left of it) for [`write_client`].
    fn send(&self, line: Vec<u8>) {
        use std::task::{Context, Poll, Waker};
        let mut ob = self.lock();
        if ob.broken {
            return;
        }
        let mut written = 0;
        // Only when the writer task waits on nothing (no line, no flush): a poll here replaces
        // the stream's waker, and the writer's must not be lost.
        if ob.queue.is_empty() && !ob.dirty {
            // Polled with a waker that does nothing: a Pending here only means "not now", and
            // the writer task polls again with its own.
            let mut cx = Context::from_waker(Waker::noop());
            match ob.w.as_mut().poll_write(&mut cx, &line) {
                Poll::Ready(Ok(n)) => {
                    written = n;
                    ob.dirty = true;
                }
                Poll::Ready(Err(_)) => {
                    ob.broken = true;
                    return;
                }
                Poll::Pending => {}
            }
            if written == line.len() {
                let flushed = matches!(ob.w.as_mut().poll_flush(&mut cx), Poll::Ready(Ok(())));
                if flushed {
                    ob.dirty = false;
                    return;
                }
                drop(ob);
                self.wake.notify_one();
                return;
            }
        }
        let rest = if written == 0 {
            line
        } else {
            line[written..].to_vec()
        };
        self.backlog.fetch_add(rest.len(), Ordering::Relaxed);
        ob.queue.push_back(rest);
        drop(ob);
        self.wake.notify_one();
    }

    /// Ends the output: [`write_client`] writes what waits, then shuts the stream down.
    fn finish(&self) {
        self.lock().finishing = true;
        self.wake.notify_one();
    }
}

/// Writes what [`ClientOut::send`] could not, as the client's stream makes room, and flushes;
/// ends after [`ClientOut::finish`] once everything is written (or the stream broke).
async fn write_client(
    out: Arc<std::sync::Mutex<Outbox>>,
    wake: Arc<tokio::sync::Notify>,
    backlog: Arc<AtomicUsize>,
) {
    use std::task::Poll;
    loop {
        wake.notified().await;
        let done = std::future::poll_fn(|cx| {
            let mut ob = out.lock().unwrap_or_else(|p| p.into_inner());
            let ob = &mut *ob;
            while !ob.broken
                && let Some(front) = ob.queue.front_mut()
            {
                match ob.w.as_mut().poll_write(cx, front) {
                    Poll::Ready(Ok(n)) if n > 0 => {
                        ob.dirty = true;
                        backlog.fetch_sub(n, Ordering::Relaxed);
                        if n == front.len() {
                            ob.queue.pop_front();
                        } else {
                            front.drain(..n);
                        }
                    }
                    Poll::Ready(_) => ob.broken = true,
                    Poll::Pending => return Poll::Pending,
                }
            }
            if ob.broken {
                // The client closed its stdout: drop what waits, so that the backlog does not
                // stall the relay (it would never read the client's EOF).
                ob.queue.clear();
                backlog.store(0, Ordering::Relaxed);
            } else if ob.dirty {
                match ob.w.as_mut().poll_flush(cx) {
                    Poll::Ready(Ok(())) => ob.dirty = false,
                    Poll::Ready(Err(_)) => ob.broken = true,
                    Poll::Pending => return Poll::Pending,
                }
            }
            if ob.finishing && !ob.broken {
                let _ = std::task::ready!(ob.w.as_mut().poll_shutdown(cx));
            }
            Poll::Ready(ob.finishing)
        })
        .await;
        if done {
            return;
        }
    }
}

fn epoch_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A JSON-RPC error reply line (newline included). `id` is raw JSON; `message` is ours but may
/// quote the server (its stderr, its exit): the caller has made it inert.
/// How often a restart waiting for the previous child's stop looks again.
const STOP_POLL: Duration = Duration::from_millis(20);

/// A server→client request the client has not answered yet.
#[derive(Debug, Clone)]
struct ServerRequest {
    /// The child that asked.
    generation: u64,
    /// The id its server gave it (raw JSON), when the client was shown another: a restarted
    /// server numbers its requests afresh, so its id may be one an earlier server's request,
    /// still unanswered, holds; the client would then take both for one request, and its late
    /// answer to the old one would reach the new server as the answer to its own.
    original: Option<String>,
}

/// `line` (a JSON object) with its `id` set to `id` (raw JSON); `None` if it is not one.
fn with_id(line: &[u8], id: &str) -> Option<Vec<u8>> {
    let mut v: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(line).ok()?;
    v.insert("id".into(), serde_json::from_str(id).ok()?);
    serde_json::to_vec(&v).ok()
}

fn error_line(id: &str, code: i64, message: &str) -> Vec<u8> {
    let mut line = error_object(id, code, message).into_bytes();
    line.push(b'\n');
    line
}

/// [`error_line`] without its newline.
fn error_object(id: &str, code: i64, message: &str) -> String {
    let message = serde_json::Value::String(message.to_owned());
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{message}}}}}"#)
}

/// What the client is told of each request in a batch.
const NO_BATCHES: &str =
    "mcpulse supervise: batches are not supported; send each message on its own line";
/// The most messages of a client batch taken apart: a larger batch is refused whole (one
/// [`codes::INVALID_REQUEST`], id null, none of it forwarded), so that the answer to it (an
/// error of ~150 bytes an item, for items as short as `1`) stays within a few MiB, and its
/// items are not all held at once.
const MAX_BATCH: usize = 10_000;

/// A client batch's items, the first [`MAX_BATCH`] kept; `more` when there were others (read
/// through, not kept).
struct Batch<'a> {
    items: Vec<&'a serde_json::value::RawValue>,
    more: bool,
}

impl<'de> serde::Deserialize<'de> for Batch<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Batch<'de>, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Batch<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON-RPC batch (an array)")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Batch<'de>, A::Error> {
                let mut batch = Batch {
                    items: Vec::new(),
                    more: false,
                };
                while let Some(item) = seq.next_element::<&'de serde_json::value::RawValue>()? {
                    if batch.items.len() < MAX_BATCH {
                        batch.items.push(item);
                    } else {
                        batch.more = true;
                    }
                }
                Ok(batch)
            }
        }
        d.deserialize_seq(Visit)
    }
}

/// What the client is told of each item of a batch that is no message (`[1,2,3]`).
const NOT_A_MESSAGE: &str =
    "mcpulse supervise: an item of the batch is not a JSON-RPC request, notification or reply";

impl Session {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn backlog_bound(&self) -> usize {
        self.s.queue_max_bytes.max(self.s.max_message_size)
    }

    /// Whether the bytes waiting for the client are within their bound: the child is read only
    /// then.
    fn client_ok(&self) -> bool {
        self.out_backlog.load(Ordering::Relaxed) <= self.backlog_bound()
    }

    fn next_id(&mut self, what: &str) -> String {
        loop {
            self.counter += 1;
            let id = format!("\"{}{what}-{}\"", self.id_prefix, self.counter);
            if !self.in_flight.contains_key(&id) {
                return id;
            }
        }
    }

    fn is_ours(&self, id: &str) -> bool {
        id.strip_prefix('"')
            .is_some_and(|s| s.starts_with(self.id_prefix.as_str()))
    }

    fn send_client(&self, line: Vec<u8>) {
        self.out.send(line);
    }

    fn answer_error(&self, id: &str, code: i64, message: &str) {
        self.send_client(error_line(id, code, message));
    }

    /// Records a state (the observer logs and exports transitions: not logged here too).
    fn set_state(&mut self, state: ChildState) {
        if self.status.state != state {
            self.status.state = state;
            self.status.since_ms = epoch_ms();
        }
        self.status.pid = self.child.as_ref().map(|c| c.pid);
        self.observer.status(&self.status);
    }

    /// The child's stderr tail, its secrets hidden, inert, for a log line ("" when empty).
    fn stderr_tail(&self) -> String {
        // Secrets are hidden before the cut, with enough before it to see a secret that the
        // cut would split: hiding after cutting showed the part of one after the cut.
        let text = self.ring.tail(STDERR_TAIL + self.s.secrets.longest());
        let from = text.len().saturating_sub(STDERR_TAIL);
        let tail = self.s.secrets.hide_from(&text, from);
        let tail = tail.trim();
        if tail.is_empty() {
            String::new()
        } else {
            format!(
                "; its stderr ended with: {}",
                text::inert(tail, STDERR_TAIL)
            )
        }
    }

    /// [`Session::stderr_tail`] for an error a client gets: "" unless
    /// [`super::Settings::stderr_in_errors`].
    fn stderr_tail_for_clients(&self) -> String {
        if self.s.stderr_in_errors {
            self.stderr_tail()
        } else {
            String::new()
        }
    }

    /// The earliest timer.
    fn next_wake(&self) -> Option<Instant> {
        let mut wake: Option<Instant> = None;
        let mut at = |t: Option<Instant>| {
            if let Some(t) = t {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        };
        at(self.backoff_until);
        at(self.closing_until);
        at(self.replay.as_ref().map(|p| p.deadline));
        at(self.beat.as_ref().map(|p| p.deadline));
        if self.beat.is_none() && self.heartbeat_allowed() {
            at(self.next_beat);
        }
        if self.s.timeouts.any() {
            for f in self.in_flight.values() {
                at(f.deadline);
            }
        }
        wake
    }

    fn heartbeat_allowed(&self) -> bool {
        self.ready
            && self.handshake.done
            && self.child.is_some()
            && self.closing_until.is_none()
            && self.fatal.is_none()
    }

    // ---- lifecycle -------------------------------------------------------------------------

    /// Starts the next child (waiting first for the previous one's stop).
    async fn start(&mut self) {
        for stop in self.stopping.drain(..) {
            let _ = stop.await;
        }
        self.backoff_until = None;
        self.generation += 1;
        let spawned = Child::spawn(
            &self.s.program,
            self.generation,
            self.s.max_message_size,
            self.events.clone(),
            self.ring.clone(),
            if self.s.stderr_as_log_lines {
                super::child::Stderr::Log(self.s.secrets.clone())
            } else {
                super::child::Stderr::PassThrough
            },
        );
        match spawned {
            Ok(child) => {
                tracing::info!(
                    pid = child.pid,
                    generation = self.generation,
                    "supervise: child started"
                );
                self.child = Some(child);
                self.started_once = true;
                self.restarts.started(self.now_ms());
                self.heartbeat.reset();
                self.set_state(ChildState::Starting);
                self.begin_session();
            }
            Err(e) => {
                let message = e.to_string();
                tracing::warn!(error = %text::field(&message), "supervise: the server could not be started");
                // A program that is not there, or not executable, will not be at the next try
                // either: the first start says so at once, rather than after the whole restart
                // budget (half a minute by default) while the client's initialize waits. Not
                // found may be the interpreter a script's `#!` line names: the message says
                // both. Once a child has run, a failed start is a restart like any other (the
                // program may be being reinstalled). A program that appears later (a volume
                // mounted late) is not started by this supervisor: FATAL is for good.
                if let Some((program, what)) = e.with_hint()
                    && !self.started_once
                {
                    let why = format!(
                        "the server could not be started: {}: {what}",
                        text::field(&self.s.secrets.hide(program))
                    );
                    self.give_up(why.clone(), why.clone(), why);
                    return;
                }
                self.went_down(RestartReason::SpawnFailed { message });
            }
        }
    }

    /// Whether a new child is given the client's handshake again (its `initialize`, then, once
    /// answered alike, its `notifications/initialized`) before any other message.
    fn will_replay(&self) -> bool {
        !self.handshake.modern
            && self.handshake.negotiated.is_some()
            && self.handshake.initialize.is_some()
    }

    /// A new child: replay the legacy handshake, or open the gate at once.
    fn begin_session(&mut self) {
        let replay = if self.will_replay() {
            self.handshake.initialize.clone()
        } else {
            None
        };
        match replay.and_then(|line| {
            let mut v: serde_json::Value = serde_json::from_slice(&line).ok()?;
            let id = self.next_id("init");
            let raw: serde_json::Value = serde_json::from_str(&id).ok()?;
            v.as_object_mut()?.insert("id".into(), raw);
            let mut bytes = serde_json::to_vec(&v).ok()?;
            bytes.push(b'\n');
            Some((id, bytes))
        }) {
            Some((id, bytes)) => {
                if let Some(child) = &self.child {
                    child.send(bytes);
                }
                let now = Instant::now();
                self.replay = Some(Pending {
                    id,
                    sent: now,
                    deadline: now + self.s.start_timeout,
                });
            }
            None => self.open_gate(),
        }
    }

    /// The child may now take client messages: write what was queued, in order.
    fn open_gate(&mut self) {
        self.ready = true;
        if let Some(why) = self.mismatch.clone() {
            // Queued requests were meant for the session the client negotiated, which is gone.
            let queued: Vec<_> = self.queue.drain(..).collect();
            self.queue_bytes = 0;
            for (_, id) in queued.into_iter() {
                if let Some(id) = id {
                    self.in_flight.remove(&id);
                    self.answer_error(&id, codes::SESSION_CHANGED, &session_changed(&why));
                }
            }
        }
        if self.handshake.done {
            self.set_state(ChildState::Running);
            self.next_beat = Some(Instant::now() + self.s.heartbeat_interval);
        }
        let queued: Vec<_> = self.queue.drain(..).collect();
        self.queue_bytes = 0;
        for (line, id) in queued {
            self.write_child(line, id.as_deref());
        }
    }

    fn write_child(&mut self, line: Vec<u8>, id: Option<&str>) {
        let Some(child) = &self.child else { return };
        if let Some(id) = id
            && let Some(f) = self.in_flight.get_mut(id)
        {
            f.sent = Some((child.generation, Instant::now()));
        }
        child.send(line);
    }

    /// The child is gone (exited, unresponsive, or never started): answer what it had, then
    /// restart after a backoff, or give up.
    fn went_down(&mut self, reason: RestartReason) {
        if self.closing_until.is_some() {
            // The client is gone: stop, never restart (the loop ends at the child's exit or
            // when the grace runs out, and `shutdown` finishes the stop).
            self.beat = None;
            self.replay = None;
            return;
        }
        let why = describe(&reason);
        let tail = self.stderr_tail_for_clients();
        let logged_tail = self.stderr_tail();
        if let Some(child) = self.child.take() {
            let grace = self.s.stop_grace;
            self.stopping.push(tokio::spawn(child.stop(grace)));
        }
        self.ready = false;
        self.beat = None;
        self.replay = None;
        self.next_beat = None;
        self.expired.clear();
        let generation = self.generation;
        let lost: Vec<String> = self
            .in_flight
            .iter()
            .filter(|(_, f)| f.sent.is_some_and(|(g, _)| g == generation))
            .map(|(id, _)| id.clone())
            .collect();
        // Decided first, so that the requests lost say what comes next.
        let draw = self.random.hash_one(self.counter ^ self.now_ms());
        self.counter += 1;
        let decision = self
            .restarts
            .went_down(&self.s.restart, self.now_ms(), draw);
        let next = match &decision {
            Decision::Restart { .. } => "it is being restarted",
            Decision::GiveUp { .. } => "it will not be restarted: its restart budget is spent",
        };
        for id in lost {
            if let Some(f) = self.in_flight.remove(&id) {
                self.report_call(&f, CallOutcome::Lost);
                let message = format!(
                    "mcpulse supervise: the server {why} while this request was in flight; {next}{tail}"
                );
                self.answer_error(&id, codes::SERVER_RESTARTED, &message);
            }
        }
        match decision {
            Decision::Restart { delay, attempt } => {
                tracing::warn!(reason = %text::field(&why), delay_ms = delay.as_millis() as u64, attempt, "supervise: restarting the server");
                self.observer.restart(&reason);
                self.status.restarts_total += 1;
                self.status.recent_restarts.push(Restart {
                    at_ms: epoch_ms(),
                    reason,
                });
                if self.status.recent_restarts.len() > RECENT_RESTARTS {
                    self.status.recent_restarts.remove(0);
                }
                self.backoff_until = Some(Instant::now() + delay);
                self.set_state(ChildState::Backoff);
            }
            Decision::GiveUp { reason: budget } => {
                let fatal = format!("{budget} (last: the server {why}){tail}");
                let logged = format!("{budget} (last: the server {why}){logged_tail}");
                // Without the stderr tail: /readyz answers any local user, and a server's
                // stderr may hold what it was given (a connection string, a token).
                let shown = format!("{budget} (last: the server {why})");
                self.give_up(fatal, logged, shown);
            }
        }
    }

    /// FATAL: never starts the server again; every request waiting or in flight, and every
    /// later one, is answered with `fatal` ([`codes::SUPERVISOR_GAVE_UP`]). `logged` goes to
    /// the log, `shown` to the status (`/readyz`).
    fn give_up(&mut self, fatal: String, logged: String, shown: String) {
        tracing::error!(reason = %text::message(&logged), "supervise: giving up");
        self.status.fatal_reason = Some(shown);
        self.fatal = Some(fatal);
        self.backoff_until = None;
        self.set_state(ChildState::Fatal);
        let queued: Vec<_> = self.queue.drain(..).collect();
        self.queue_bytes = 0;
        for (_, id) in queued {
            if let Some(id) = id {
                self.fail_fatal(&id);
            }
        }
        let ids: Vec<String> = self.in_flight.keys().cloned().collect();
        for id in ids {
            self.fail_fatal(&id);
        }
    }

    fn fail_fatal(&mut self, id: &str) {
        if let Some(f) = self.in_flight.remove(id) {
            self.report_call(&f, CallOutcome::Lost);
        }
        let message = format!(
            "mcpulse supervise gave up on the server: {}",
            self.fatal.as_deref().unwrap_or("restart budget spent")
        );
        self.answer_error(id, codes::SUPERVISOR_GAVE_UP, &message);
    }

    /// One event of a child's. Returns whether the loop ends: the current child exited after
    /// the client closed its input.
    fn child_event(&mut self, event: ChildEvent) -> bool {
        match event {
            ChildEvent::Line(g, line) => self.child_line(g, line),
            ChildEvent::TooLong(g, clipped) => self.child_too_long(g, clipped),
            ChildEvent::Exited(g, status) => {
                if g == self.generation && self.closing_until.is_some() {
                    return true;
                }
                self.child_exited(g, status);
            }
        }
        false
    }

    fn child_exited(&mut self, generation: u64, status: ExitStatus) {
        if generation != self.generation || self.child.is_none() {
            return; // a replaced child's exit, already dealt with
        }
        tracing::warn!(status = %status, "supervise: the server exited");
        self.went_down(RestartReason::Exited {
            code: status.code,
            signal: status.signal,
        });
    }

    /// The client closed its stdin. Returns whether to keep running (until the child exits
    /// after its stdin is closed, or the grace runs out).
    fn client_closed(&mut self) -> bool {
        tracing::info!("supervise: the client closed its input; stopping the server");
        match self.child.as_mut() {
            Some(child) if self.fatal.is_none() => {
                child.close_stdin();
                self.backoff_until = None;
                self.closing_until = Some(Instant::now() + self.s.stop_grace);
                true
            }
            _ => false,
        }
    }

    async fn shutdown(&mut self) {
        let generation = self.generation;
        let ids: Vec<String> = self.in_flight.keys().cloned().collect();
        for id in ids {
            if let Some(f) = self.in_flight.remove(&id) {
                self.report_call(&f, CallOutcome::Lost);
            }
            if self.fatal.is_some() {
                self.fail_fatal(&id);
            } else {
                self.answer_error(
                    &id,
                    codes::SERVER_RESTARTED,
                    "mcpulse supervise: the client closed its input; the server was stopped",
                );
            }
        }
        let _ = generation;
        if let Some(child) = self.child.take() {
            child.stop(self.s.stop_grace).await;
        }
        for mut stop in self.stopping.drain(..) {
            if !self.signalled {
                let _ = stop.await;
            } else if tokio::time::timeout(SIGNAL_GRACE * 2, &mut stop)
                .await
                .is_err()
            {
                // Dropping the half-stopped child SIGKILLs its group.
                stop.abort();
            }
        }
        if self.fatal.is_none() {
            self.set_state(ChildState::Stopped);
        }
        if self.dropped_notifications > 0 {
            tracing::warn!(
                dropped = self.dropped_notifications,
                "supervise: client notifications dropped while the restart queue was full"
            );
        }
    }

    // ---- timers ----------------------------------------------------------------------------

    async fn timers(&mut self) {
        let now = Instant::now();
        if self.backoff_until.is_some_and(|t| t <= now) && self.fatal.is_none() {
            // The previous child's stop (up to 2 × stop_grace and the kill) may outlast the
            // backoff: the loop must not wait for it here, or signals, request deadlines and
            // the client's input all stall meanwhile. Looked at again shortly.
            if self.stopping.iter().any(|stop| !stop.is_finished()) {
                self.backoff_until = Some(now + STOP_POLL);
                return;
            }
            self.start().await;
            return;
        }
        if let Some(p) = &self.replay
            && p.deadline <= now
        {
            tracing::warn!(
                "supervise: the restarted server did not answer the replayed initialize"
            );
            self.went_down(RestartReason::Unresponsive { failures: 1 });
            return;
        }
        if self.s.timeouts.any() {
            self.expire_requests(now);
        }
        let client_stalled = !self.client_ok();
        if let Some(p) = self.beat.as_mut()
            && p.deadline <= now
            && client_stalled
        {
            // The client is not reading, so the relay is not reading the child (whose reply
            // may be waiting): not the child's fault. Judge later.
            p.deadline = now + self.s.heartbeat_timeout;
            return;
        }
        if let Some(p) = &self.beat
            && p.deadline <= now
        {
            // A timed-out request the child never answered (TypeScript SDK servers do not
            // answer a cancelled one) keeps it busy only within the grace: past it, it is
            // forgotten, or it would make every later miss a failure, a healthy slow call's too.
            let grace = self.s.heartbeat.busy_grace;
            self.expired
                .retain(|_, at| now.saturating_duration_since(*at) <= grace);
            // A frozen child (SIGSTOP) is not busy, whatever it holds.
            let stopped = self.child.as_ref().is_some_and(Child::is_stopped);
            let oldest = if stopped {
                None
            } else {
                self.oldest_request_age(now)
            };
            self.beat = None;
            self.next_beat = Some(
                now + self
                    .s
                    .heartbeat_interval
                    .saturating_sub(self.s.heartbeat_timeout),
            );
            self.judge_heartbeat(
                Heard::Missed {
                    oldest_request_age: oldest,
                },
                None,
            );
            return;
        }
        if self.beat.is_none()
            && self.heartbeat_allowed()
            && self.next_beat.is_some_and(|t| t <= now)
        {
            self.send_heartbeat(now);
        }
    }

    fn oldest_request_age(&self, now: Instant) -> Option<Duration> {
        let generation = self.generation;
        self.in_flight
            .values()
            .filter_map(|f| f.sent.filter(|(g, _)| *g == generation))
            .map(|(_, at)| at)
            .chain(self.expired.values().copied())
            .map(|at| now.saturating_duration_since(at))
            .max()
    }

    fn send_heartbeat(&mut self, now: Instant) {
        let id = self.next_id("hb");
        let line = if self.handshake.modern {
            let meta = mcpulse_wire::message::modern_meta(
                MODERN,
                &mcpulse_wire::message::ClientInfo {
                    name: "mcpulse-supervise".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                },
            );
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"server/discover","params":{{"_meta":{meta}}}}}"#
            )
        } else {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)
        };
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        if let Some(child) = &self.child {
            child.send(bytes);
        }
        self.beat = Some(Pending {
            id,
            sent: now,
            deadline: now + self.s.heartbeat_timeout,
        });
    }

    fn judge_heartbeat(&mut self, heard: Heard, latency: Option<Duration>) {
        let (beat, restart) = self.heartbeat.observe(&self.s.heartbeat, heard);
        let outcome = match beat {
            Beat::Ok => HeartbeatOutcome::Ok,
            Beat::Busy => HeartbeatOutcome::Busy,
            Beat::Failed { .. } => HeartbeatOutcome::Failed,
        };
        match beat {
            Beat::Ok => tracing::debug!(
                latency_ms = latency.map(|l| l.as_secs_f64() * 1000.0),
                "supervise: heartbeat"
            ),
            Beat::Busy => {
                tracing::info!("supervise: heartbeat unanswered while a request runs: busy")
            }
            Beat::Failed { consecutive } => {
                tracing::warn!(consecutive, "supervise: heartbeat failed")
            }
        }
        self.observer.heartbeat(outcome, latency);
        self.status.last_heartbeat = Some((epoch_ms(), outcome, latency));
        if restart {
            let failures = match beat {
                Beat::Failed { consecutive } => consecutive,
                _ => self.s.heartbeat.failures,
            };
            self.went_down(RestartReason::Unresponsive { failures });
            return;
        }
        let state = match outcome {
            HeartbeatOutcome::Busy => ChildState::Busy,
            _ => ChildState::Running,
        };
        self.set_state(state);
    }

    fn expire_requests(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .in_flight
            .iter()
            .filter(|(_, f)| f.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            let Some(f) = self.in_flight.remove(&id) else {
                continue;
            };
            let took = now.saturating_duration_since(f.received);
            self.report_call(&f, CallOutcome::Timeout);
            tracing::info!(id = %text::field(&id), "supervise: request timed out");
            // "The client MUST NOT attempt to cancel its initialize request": the server keeps
            // it, and its late reply still records what was negotiated (for a later replay).
            let initialize = self.handshake.initialize_id.as_deref() == Some(id.as_str());
            self.answer_error(
                &id,
                codes::REQUEST_TIMEOUT,
                &format!(
                    "mcpulse supervise: request timed out after {} ms; {}",
                    took.as_millis(),
                    if initialize {
                        "an initialize is not cancelled: the server may still complete it"
                    } else if f.sent.is_some_and(|(g, _)| g == self.generation) {
                        "it was cancelled in the server"
                    } else {
                        "it was still queued behind a restart and never reached the server"
                    }
                ),
            );
            // Queued requests never reached the child: drop them from the queue instead.
            if let Some((g, sent)) = f.sent
                && g == self.generation
            {
                if self.expired.len() < MAX_SERVER_REQUESTS {
                    self.expired.insert(id.clone(), sent);
                }
                if initialize {
                    continue;
                }
                let cancel = format!(
                    r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id},"reason":"timed out (mcpulse supervise)"}}}}"#
                );
                let mut bytes = cancel.into_bytes();
                bytes.push(b'\n');
                if let Some(child) = &self.child {
                    child.send(bytes);
                }
            } else if f.sent.is_none() {
                let before = self.queue.len();
                self.queue
                    .retain(|(_, q)| q.as_deref() != Some(id.as_str()));
                if self.queue.len() != before {
                    self.queue_bytes = self.queue.iter().map(|(l, _)| l.len()).sum();
                }
            }
        }
    }

    fn report_call(&self, f: &InFlight, outcome: CallOutcome) {
        if let Some(tool) = &f.tool {
            self.observer.tool_call(tool, outcome, f.received.elapsed());
        }
    }

    // ---- the client's messages -------------------------------------------------------------

    fn client_line(&mut self, line: Vec<u8>) {
        if line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') && self.client_batch(&line)
        {
            return;
        }
        self.client_message(line);
    }

    /// One message of the client's (a line, or a notification or reply out of a batch).
    fn client_message(&mut self, mut line: Vec<u8>) {
        let Some(env) = Envelope::parse(&line) else {
            // Not JSON: the server answers it (a parse error), as it would without us.
            line.push(b'\n');
            self.deliver(line, None);
            return;
        };
        match env.kind() {
            Kind::Request => {
                let id = canonical_id(env.id_text().unwrap_or("null")).into_owned();
                let method = env.method.as_deref().unwrap_or("");
                if self.fatal.is_some() {
                    self.fail_fatal(&id);
                    return;
                }
                if id.len() > MAX_ID_LEN || self.in_flight.len() >= MAX_IN_FLIGHT {
                    self.answer_error(
                        &id,
                        codes::TOO_MANY_REQUESTS,
                        &format!(
                            "mcpulse supervise: not forwarded: over {MAX_IN_FLIGHT} requests in flight, or an id over {MAX_ID_LEN} bytes"
                        ),
                    );
                    return;
                }
                if let Some(why) = &self.mismatch
                    && method != "initialize"
                {
                    self.answer_error(&id, codes::SESSION_CHANGED, &session_changed(why));
                    return;
                }
                if method == "initialize" {
                    self.handshake = Handshake {
                        initialize: Some(line.clone()),
                        initialize_id: Some(id.clone()),
                        ..Handshake::default()
                    };
                    self.mismatch = None;
                } else if !self.handshake.modern && env.modern_version() == Some(MODERN) {
                    self.handshake.modern = true;
                }
                let tool = (method == "tools/call")
                    .then(|| env.tool().map(str::to_owned))
                    .flatten();
                let received = Instant::now();
                let deadline = self
                    .s
                    .timeouts
                    .limit(method, env.tool())
                    .map(|d| received + d);
                self.in_flight.insert(
                    id.clone(),
                    InFlight {
                        tool,
                        received,
                        sent: None,
                        deadline,
                    },
                );
                line.push(b'\n');
                self.deliver(line, Some(id));
            }
            Kind::Notification => {
                let method = env.method.as_deref().unwrap_or("");
                if self.fatal.is_some() {
                    return;
                }
                if method == "notifications/initialized" {
                    let mut replayed = line.clone();
                    replayed.push(b'\n');
                    self.handshake.initialized = Some(replayed);
                    if !self.handshake.done {
                        self.handshake.done = true;
                        if self.ready {
                            self.set_state(ChildState::Running);
                        }
                        self.next_beat = Some(Instant::now() + self.s.heartbeat_interval);
                    }
                    // During a restart that replays the handshake (the replay under way, or
                    // to come at the next start) the replay sends it, just recorded, right
                    // after the replayed initialize's reply: queued as well, the queue's flush
                    // would send it a second time.
                    let restarting = !(self.ready && self.child.is_some());
                    if restarting && self.will_replay() {
                        return;
                    }
                } else if method == "notifications/cancelled"
                    && let Some(id) = env.cancelled_id()
                {
                    // The server need not answer a cancelled request: stop waiting for it.
                    let key = canonical_id(id).into_owned();
                    if let Some(f) = self.in_flight.remove(&key) {
                        match f.sent {
                            // The child may go on working on it for a while (a server need
                            // not stop at once): it still counts for --busy-grace, as a
                            // timed-out request does, so a slow child is not taken for a hung
                            // one and restarted.
                            Some((g, sent)) if g == self.generation => {
                                if self.expired.len() < MAX_SERVER_REQUESTS {
                                    self.expired.insert(key, sent);
                                }
                            }
                            // Still queued (a restart under way): it never reached a server.
                            // It leaves the queue, nobody answers it (the client cancelled
                            // it), and the cancellation is not sent on.
                            None => {
                                let before = self.queue.len();
                                self.queue
                                    .retain(|(_, q)| q.as_deref() != Some(key.as_str()));
                                if self.queue.len() != before {
                                    self.queue_bytes =
                                        self.queue.iter().map(|(l, _)| l.len()).sum();
                                    return;
                                }
                            }
                            Some(_) => {}
                        }
                    }
                }
                line.push(b'\n');
                self.deliver(line, None);
            }
            Kind::Response => {
                let asked = env
                    .id_text()
                    .and_then(|id| self.server_requests.remove(canonical_id(id).as_ref()));
                if let Some(r) = &asked
                    && self.child.as_ref().map(|c| c.generation) != Some(r.generation)
                {
                    // The child that asked is gone (restarting, or replaced already).
                    tracing::info!(
                        "supervise: a reply for a server that was since restarted, dropped"
                    );
                    return;
                }
                if self.fatal.is_some() {
                    return;
                }
                // A request the supervisor gave a new id: the server gets its own id back.
                if let Some(original) = asked.and_then(|r| r.original)
                    && let Some(restored) = with_id(&line, &original)
                {
                    line = restored;
                }
                line.push(b'\n');
                self.deliver(line, None);
            }
            Kind::Other => {
                line.push(b'\n');
                self.deliver(line, None);
            }
        }
    }

    /// A JSON-RPC batch from the client (an array of messages; 2025-03-26 allowed them,
    /// 2025-06-18 removed them). Its notifications and replies go on one by one, as if each
    /// came on a line of its own ([`Session::client_message`]): a reply to a request of the
    /// server's reaches it, a `notifications/initialized` completes the handshake, a
    /// `notifications/cancelled` stops the wait. Its requests are not forwarded, since they
    /// would go untracked and the server's array answer could not be routed: each is answered
    /// at once with [`codes::INVALID_REQUEST`] under its id, and so is each item that is no
    /// message (`[1,2,3]`), under a null id, all together in one array as JSON-RPC answers a
    /// batch (nothing when every item went on). An empty array gets one such error, id null,
    /// and so does a batch of more than [`MAX_BATCH`] messages, none of which goes on.
    /// Returns false when `line` is not a JSON array (then it goes on as any line).
    fn client_batch(&mut self, line: &[u8]) -> bool {
        let Ok(Batch { items, more }) = serde_json::from_slice::<Batch<'_>>(line) else {
            return false;
        };
        if more {
            tracing::warn!(
                max = MAX_BATCH,
                "supervise: a client batch of too many messages, refused whole"
            );
            self.send_client(error_line(
                "null",
                codes::INVALID_REQUEST,
                &format!(
                    "mcpulse supervise: a batch of more than {MAX_BATCH} messages; none of it was forwarded"
                ),
            ));
            return true;
        }
        if items.is_empty() {
            self.send_client(error_line(
                "null",
                codes::INVALID_REQUEST,
                "mcpulse supervise: an empty batch",
            ));
            return true;
        }
        let mut answers: Vec<String> = Vec::new();
        let (mut requests, mut invalid, mut passed) = (0usize, 0usize, 0usize);
        for item in &items {
            let bytes = item.get().as_bytes();
            match Envelope::parse(bytes).map(|env| (env.kind(), env.id_text())) {
                Some((Kind::Request, id)) => {
                    requests += 1;
                    answers.push(error_object(
                        id.unwrap_or("null"),
                        codes::INVALID_REQUEST,
                        NO_BATCHES,
                    ));
                }
                Some((Kind::Notification | Kind::Response, _)) => {
                    passed += 1;
                    self.client_message(bytes.to_vec());
                }
                Some((Kind::Other, _)) | None => {
                    invalid += 1;
                    answers.push(error_object("null", codes::INVALID_REQUEST, NOT_A_MESSAGE));
                }
            }
        }
        if answers.is_empty() {
            tracing::debug!(
                passed,
                "supervise: a client batch of notifications and replies, passed on one by one"
            );
            return true;
        }
        tracing::warn!(
            requests,
            invalid,
            passed,
            "supervise: a client batch (batches of requests are not supported): its requests and invalid items answered with an error, its notifications and replies passed on one by one"
        );
        let mut out = Vec::with_capacity(answers.iter().map(|a| a.len() + 1).sum::<usize>() + 2);
        out.push(b'[');
        for (i, a) in answers.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(a.as_bytes());
        }
        out.extend_from_slice(b"]\n");
        self.send_client(out);
        true
    }

    /// Writes a client message to the child, or queues it while the child restarts.
    fn deliver(&mut self, line: Vec<u8>, id: Option<String>) {
        if self.ready && self.child.is_some() {
            self.write_child(line, id.as_deref());
            return;
        }
        if self.queue.len() >= self.s.queue_max_messages
            || self.queue_bytes.saturating_add(line.len()) > self.s.queue_max_bytes
        {
            match id {
                Some(id) => {
                    if let Some(f) = self.in_flight.remove(&id) {
                        self.report_call(&f, CallOutcome::Lost);
                    }
                    self.answer_error(
                        &id,
                        codes::QUEUE_FULL,
                        "mcpulse supervise: the server is restarting and the queue of waiting messages is full",
                    );
                }
                None => self.dropped_notifications += 1,
            }
            return;
        }
        self.queue_bytes += line.len();
        self.queue.push_back((line, id));
    }

    fn client_too_long(&mut self, clipped: Clipped) {
        tracing::warn!(
            max = self.s.max_message_size,
            "supervise: a client message over --max-message-size, dropped"
        );
        let Clipped { id, reply, .. } = clipped;
        let Some(id) = id else { return };
        if !reply {
            // A request is answered.
            self.answer_error(
                &id,
                codes::MESSAGE_TOO_LARGE,
                &format!(
                    "mcpulse supervise: the request is longer than --max-message-size ({} bytes) and was dropped",
                    self.s.max_message_size
                ),
            );
            return;
        }
        // A reply to a request of the server's: the server is told, under the id it gave the
        // request, rather than waiting out its own timeout (as for its too-long requests, the
        // other way). Not a server since replaced, which never asked.
        let Some(asked) = self.server_requests.remove(&id) else {
            return;
        };
        if self.fatal.is_some() {
            return;
        }
        if let Some(child) = &self.child
            && child.generation == asked.generation
        {
            let original = asked.original.as_deref().unwrap_or(&id);
            child.send(error_line(
                original,
                codes::MESSAGE_TOO_LARGE,
                &format!(
                    "mcpulse supervise: the client's reply is longer than --max-message-size ({} bytes) and was dropped",
                    self.s.max_message_size
                ),
            ));
        }
    }

    // ---- the child's messages --------------------------------------------------------------

    fn child_line(&mut self, generation: u64, mut line: Vec<u8>) {
        if generation != self.generation || self.child.is_none() {
            return; // a replaced child's output
        }
        let env = match Envelope::parse(&line) {
            Some(env) if env.kind() != Kind::Other => env,
            _ => {
                self.junk(&line);
                return;
            }
        };
        match env.kind() {
            Kind::Response => {
                let Some(raw_id) = env.id_text() else {
                    // An error with a null id (a parse error): the client's business.
                    line.push(b'\n');
                    self.send_client(line);
                    return;
                };
                let key = canonical_id(raw_id);
                let id: &str = &key;
                if self.is_ours(id) {
                    let is_error = env.error.is_some();
                    let result = env
                        .result
                        .and_then(|_| raw_result(&line))
                        .map(str::to_owned);
                    let id = id.to_owned();
                    self.our_reply(&id, is_error, result.as_deref());
                    return;
                }
                let Some(f) = self.in_flight.remove(id) else {
                    self.expired.remove(id);
                    if self.handshake.initialize_id.as_deref() == Some(id) {
                        // A timed-out initialize's late reply: dropped (the client was told),
                        // but what it negotiated is what a restart must replay.
                        self.handshake.initialize_id = None;
                        self.handshake.negotiated = raw_result(&line).and_then(negotiated);
                        self.status.protocol_version =
                            self.handshake.negotiated.as_ref().map(|(v, _)| v.clone());
                    }
                    tracing::debug!(id = %text::field(id), "supervise: a reply to no request in flight (late or unknown), dropped");
                    self.observer.late_reply();
                    return;
                };
                if f.tool.is_some() {
                    let outcome = if env.error.is_some() {
                        CallOutcome::RpcError
                    } else if env.is_tool_error() {
                        CallOutcome::ToolError
                    } else {
                        CallOutcome::Ok
                    };
                    self.report_call(&f, outcome);
                }
                if self.handshake.initialize_id.as_deref() == Some(id) {
                    self.handshake.initialize_id = None;
                    self.handshake.negotiated = raw_result(&line).and_then(negotiated);
                    self.status.protocol_version =
                        self.handshake.negotiated.as_ref().map(|(v, _)| v.clone());
                }
                if self.handshake.modern && !self.handshake.done {
                    self.handshake.done = true;
                    self.status.protocol_version = Some(MODERN.to_owned());
                    self.set_state(ChildState::Running);
                    self.next_beat = Some(Instant::now() + self.s.heartbeat_interval);
                }
                line.push(b'\n');
                self.send_client(line);
            }
            Kind::Request => {
                let id = env
                    .id_text()
                    .filter(|id| id.len() <= MAX_ID_LEN)
                    .map(str::to_owned);
                if let Some(id) = id {
                    if self.server_requests.len() >= MAX_SERVER_REQUESTS {
                        // Unanswered ones pile up only if the client never replies: forget
                        // those of earlier children first, then all.
                        self.server_requests
                            .retain(|_, r| r.generation == generation);
                        if self.server_requests.len() >= MAX_SERVER_REQUESTS {
                            self.server_requests.clear();
                        }
                    }
                    let key = canonical_id(&id).into_owned();
                    let taken = self
                        .server_requests
                        .get(&key)
                        .is_some_and(|r| r.generation != generation);
                    if taken {
                        // An earlier server's request, unanswered, has this id: the client is
                        // shown another (restored in its answer, ServerRequest::original).
                        self.counter += 1;
                        let fresh = format!("\"mcpulse-supervise-{generation}-{}\"", self.counter);
                        if let Some(rewritten) = with_id(&line, &fresh) {
                            line = rewritten;
                            self.server_requests.insert(
                                canonical_id(&fresh).into_owned(),
                                ServerRequest {
                                    generation,
                                    original: Some(id),
                                },
                            );
                        }
                    } else {
                        self.server_requests.insert(
                            key,
                            ServerRequest {
                                generation,
                                original: None,
                            },
                        );
                    }
                }
                line.push(b'\n');
                self.send_client(line);
            }
            Kind::Notification | Kind::Other => {
                line.push(b'\n');
                self.send_client(line);
            }
        }
    }

    /// A reply to our heartbeat or our replayed `initialize`; never forwarded.
    fn our_reply(&mut self, id: &str, is_error: bool, result: Option<&str>) {
        if self.replay.as_ref().is_some_and(|p| p.id == id) {
            self.replay = None;
            let now_has = result.and_then(negotiated);
            let had = self.handshake.negotiated.clone();
            let changed = match (&had, &now_has) {
                _ if is_error => Some("refused the replayed initialize".to_owned()),
                (Some((v0, _)), Some((v1, _))) if v0 != v1 => Some(format!(
                    "now speaks protocol version {} instead of {}",
                    text::field(v1),
                    text::field(v0)
                )),
                (Some((_, c0)), Some((_, c1))) if c0 != c1 => {
                    Some("now announces different capabilities".to_owned())
                }
                (Some(_), None) => {
                    Some("answered the replayed initialize without a protocol version".to_owned())
                }
                _ => None,
            };
            if let Some(why) = changed {
                tracing::warn!(why = %why, "supervise: the restarted server's session differs");
                self.mismatch = Some(why);
            } else if let Some(line) = self.handshake.initialized.clone()
                && let Some(child) = &self.child
            {
                child.send(line);
            }
            self.open_gate();
            return;
        }
        if let Some(p) = self.beat.take_if(|p| p.id == id) {
            let latency = p.sent.elapsed();
            self.next_beat = Some(p.sent + self.s.heartbeat_interval);
            self.judge_heartbeat(Heard::Answered, Some(latency));
        }
        // Else: a late reply to an earlier heartbeat, already judged.
    }

    fn child_too_long(&mut self, generation: u64, clipped: Clipped) {
        if generation != self.generation {
            return;
        }
        tracing::warn!(
            max = self.s.max_message_size,
            "supervise: a server message over --max-message-size, dropped"
        );
        let Clipped { id, reply, request } = clipped;
        if let Some(id) = id.as_ref().filter(|_| reply)
            && let Some(f) = self.in_flight.remove(id)
        {
            self.report_call(&f, CallOutcome::RpcError);
            self.answer_error(
                id,
                codes::MESSAGE_TOO_LARGE,
                &format!(
                    "mcpulse supervise: the server's reply is longer than --max-message-size ({} bytes) and was dropped",
                    self.s.max_message_size
                ),
            );
        } else if let Some(id) = id.filter(|_| request)
            && let Some(child) = &self.child
        {
            // A request of the server's (sampling, elicitation, roots) the client will never
            // see: the server is told at once, rather than waiting out its own timeout.
            child.send(error_line(
                &id,
                codes::MESSAGE_TOO_LARGE,
                &format!(
                    "mcpulse supervise: the request is longer than --max-message-size ({} bytes) and was not passed to the client",
                    self.s.max_message_size
                ),
            ));
        }
    }

    /// A junk line, reported to the observer (which logs it, inert, and counts it).
    fn junk(&mut self, line: &[u8]) {
        let prefix = &line[..line.len().min(1024)];
        self.observer.junk_line(&String::from_utf8_lossy(prefix));
    }
}

fn session_changed(why: &str) -> String {
    format!("mcpulse supervise: the server was restarted and {why}; initialize the session again")
}

/// Protocol version and capabilities from an `initialize` result.
fn negotiated(result: &str) -> Option<(String, serde_json::Value)> {
    #[derive(serde::Deserialize)]
    struct Init {
        #[serde(rename = "protocolVersion")]
        protocol_version: String,
        #[serde(default)]
        capabilities: serde_json::Value,
    }
    let init: Init = serde_json::from_str(result).ok()?;
    Some((init.protocol_version, init.capabilities))
}

/// "exited with code 1", "stopped answering (3 heartbeats missed)"...
fn describe(reason: &RestartReason) -> String {
    match reason {
        RestartReason::Exited { code, signal } => ExitStatus {
            code: *code,
            signal: *signal,
        }
        .to_string(),
        RestartReason::Unresponsive { failures } => {
            format!("stopped answering ({failures} heartbeats missed)")
        }
        RestartReason::SpawnFailed { message } => {
            format!("could not be started ({})", text::field(message))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for the session: each event taken in is a message of `size` bytes passed on
    /// to a client that does not read, so it grows the backlog.
    struct Stalled {
        backlog: usize,
        bound: usize,
        taken: usize,
    }

    fn full_channel(size: usize) -> mpsc::Receiver<usize> {
        let (tx, rx) = mpsc::channel(EVENTS);
        for _ in 0..EVENTS {
            tx.try_send(size).unwrap();
        }
        rx
    }

    fn take_in(s: &mut Stalled, rx: &mut mpsc::Receiver<usize>, ends: bool) -> bool {
        take_in_received(
            s,
            rx,
            |s| s.backlog <= s.bound,
            |s, size| {
                s.backlog += size;
                s.taken += 1;
                ends
            },
        )
    }

    /// The events taken in before the timers stop once the client's backlog is past its bound
    /// (a client that stopped reading partway): at most one message past it, as in any turn of
    /// the loop, not the whole channel (256 messages) past it, as when the bound was looked at
    /// once before the taking in.
    #[test]
    fn the_events_taken_in_before_the_timers_stop_at_the_clients_bound() {
        let mut rx = full_channel(100);
        let mut s = Stalled {
            backlog: 750,
            bound: 1000,
            taken: 0,
        };
        assert!(!take_in(&mut s, &mut rx, false));
        // 750 → 850 → 950 → 1050: past the bound after the third.
        assert_eq!(s.taken, 3);
        assert_eq!(s.backlog, 1050);
        assert_eq!(rx.len(), EVENTS - 3, "the rest wait in the channel");
        // Still stalled: nothing more.
        assert!(!take_in(&mut s, &mut rx, false));
        assert_eq!(s.taken, 3);
        // The client read: the rest are taken in, at most the channel's capacity.
        s.backlog = 0;
        s.bound = usize::MAX;
        assert!(!take_in(&mut s, &mut rx, false));
        assert_eq!(s.taken, EVENTS);
        assert!(rx.is_empty());
    }

    /// An event that ends the loop (the child's exit after the client's EOF) ends the taking in.
    #[test]
    fn an_event_that_ends_the_loop_ends_the_taking_in() {
        let mut rx = full_channel(1);
        let mut s = Stalled {
            backlog: 0,
            bound: 1000,
            taken: 0,
        };
        assert!(take_in(&mut s, &mut rx, true));
        assert_eq!(s.taken, 1);
        assert_eq!(rx.len(), EVENTS - 1);
    }
}
