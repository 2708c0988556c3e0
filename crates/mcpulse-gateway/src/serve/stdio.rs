//! A stdio upstream: the gateway serves Streamable HTTP itself and runs one supervised child
//! per legacy session, never shared (a stdio server's state belongs to one client), and a small
//! pool of children for stateless 2026-07-28 requests (which carry all their context).
//!
//! Each child is `mcpulse supervise`'s: [`mcpulse_relay::supervise::run_until`] over an
//! in-memory pipe ([`tokio::io::duplex`]), so heartbeats, restarts with backoff, process
//! groups, the parent-death signal, the -32080 answer to a request lost in a crash and the
//! graceful stop are the supervisor's, unchanged. This module is the HTTP side of that pipe
//! (a [`Worker`]): it writes each POSTed message as one line, reads the relay's lines back and
//! routes them:
//! - a reply goes to the one POST waiting for its id. Ids are rewritten to the gateway's own
//!   (`"gw-<n>"`) on the way in and restored on the way out, so two clients of one pooled child,
//!   or one client reusing an id, can never get each other's replies, and a reply is delivered
//!   at most once (its waiter is removed as it is delivered); a late reply finds no waiter and
//!   is dropped;
//! - a server notification or request goes on the SSE stream of a POST still waiting (the
//!   request it names by `progressToken` or subscription id, which are rewritten as ids are,
//!   else the latest one that takes a stream), else on the session's GET stream; on a pooled
//!   child (any client's requests) a message naming no request goes only to a request waiting
//!   alone; a server request nobody can carry is answered with an error at once, so the server
//!   does not wait for ever.
//!
//! Bounds: a request body is the door's `max_body`; a line from the relay is at most the
//! child's `max_message_size`; each waiting POST buffers at most [`EVENTS`] server messages
//! and each GET stream [`EVENTS`] SSE frames, and either at most [`budget`] bytes of them
//! until hyper takes them (past either, notifications are dropped and counted in the log,
//! never the reply: a client that does not read holds no more than that, and never holds the
//! child back, which may serve other streams); sessions are `max_sessions`, the pool
//! `stateless_pool`.

use super::record;
use crate::metrics::Outcome;
use crate::state::{ProcessState, Shared};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use mcpulse_relay::status::{ChildState, Logs, Observer, RestartReason, Status};
use mcpulse_relay::supervise::Settings;
use mcpulse_relay::supervise::lines::{LineRead, LineReader};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Server messages buffered per waiting POST, and SSE frames per GET stream.
pub const EVENTS: usize = 256;
/// Frames between a POST's stream task and hyper (the queue before it is [`EVENTS`]; the
/// server's frames here still count against the stream's [`budget`]).
pub const HANDOVER: usize = 4;
/// The least [`budget`] of a stream, whatever `max_message_size`: room for a burst of
/// ordinary notifications.
pub const MIN_BUDGET: usize = 4 << 20;

/// The bytes of server messages a waiting POST or a GET stream holds at most, from the
/// child's reader until hyper takes them: `max_message_size`, at least [`MIN_BUDGET`]. A
/// message larger than what is left waits for none: it is dropped as when the count is full
/// (a message alone always passes, being at most `max_message_size`).
pub fn budget(max_message_size: usize) -> usize {
    max_message_size.max(MIN_BUDGET)
}

type Events = mcpulse_transport::queue::Sender<Bytes>;
type EventsRx = mcpulse_transport::queue::Receiver<Bytes>;
use super::Frame;
/// The in-memory pipe between a worker and its relay (each direction).
const PIPE: usize = 256 << 10;
/// The JSON-RPC code when the session's relay ended with the request unanswered (the
/// supervisor's "server restarted" code: the client treats both the same way).
const SESSION_ENDED: i64 = mcpulse_relay::supervise::codes::SERVER_RESTARTED;
/// The relay's answer once a restarted server negotiated differently from the client.
const SESSION_CHANGED: i64 = mcpulse_relay::supervise::codes::SESSION_CHANGED;
/// The answer to a request the client cancelled, on the POST still open for it (LSP's
/// `RequestCancelled`; MCP leaves it to the implementation).
const CANCELLED: i64 = -32800;
/// Its message.
const CANCELLED_BY_CLIENT: &str = "mcpulse gateway: the request was cancelled by the client";

/// What bounds the stdio side.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_sessions: usize,
    pub idle_timeout: Duration,
    pub pool: usize,
    /// An SSE comment on every response stream silent this long (`None`: none); a POST whose
    /// client accepts SSE turns into a stream when its reply is this late, so that the wait
    /// gets comments too.
    pub keepalive: Option<Duration>,
}

/// Locks a mutex, a poisoned one included (the data is plain maps, always consistent).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every child's last state, to tell `/livez` one process state for the upstream.
#[derive(Debug, Default)]
struct Tally {
    states: Mutex<HashMap<u64, ChildState>>,
    ever_up: AtomicBool,
}

impl Tally {
    /// The upstream's state: up while any child runs; else starting, backoff or fatal, in
    /// that order, as the children are; with no child at all, up once one has run (children
    /// start on demand: none running is not a failure), starting before.
    #[cfg(test)]
    fn process(&self) -> ProcessState {
        self.process_of(&lock(&self.states))
    }

    /// Records child `key`'s state (`None`: the child is gone) and publishes the upstream's,
    /// both under the states' lock: two children changing at once publish in the order they
    /// changed, so a stale state never overwrites a newer one (with more than one thread).
    fn set(&self, key: u64, state: Option<ChildState>, shared: &Shared) {
        let mut states = lock(&self.states);
        match state {
            Some(s) => states.insert(key, s),
            None => states.remove(&key),
        };
        let process = self.process_of(&states);
        shared.update_upstream(|u| u.process = process);
    }

    fn process_of(&self, states: &HashMap<u64, ChildState>) -> ProcessState {
        let any = |f: &dyn Fn(ChildState) -> bool| states.values().any(|s| f(*s));
        if any(&|s| matches!(s, ChildState::Running | ChildState::Busy)) {
            self.ever_up.store(true, Ordering::Relaxed);
            ProcessState::Up
        } else if any(&|s| s == ChildState::Starting) {
            ProcessState::Starting
        } else if any(&|s| s == ChildState::Backoff) {
            ProcessState::Backoff
        } else if any(&|s| s == ChildState::Fatal) {
            ProcessState::Fatal
        } else if self.ever_up.load(Ordering::Relaxed) {
            ProcessState::Up
        } else {
            ProcessState::Starting
        }
    }
}

/// One worker's observer: its child's state into the tally and [`Shared`], its restarts into
/// the metrics.
struct WorkerObserver {
    key: u64,
    shared: Arc<Shared>,
    tally: Arc<Tally>,
    fatal: Arc<Fate>,
    /// Where the child's pid goes (0 while none runs): the readiness session's only.
    pid: Option<Arc<AtomicU32>>,
}

impl Observer for WorkerObserver {
    fn status(&self, status: &Status) {
        if let Some(pid) = &self.pid {
            pid.store(status.pid.unwrap_or(0), Ordering::Relaxed);
        }
        if status.state == ChildState::Fatal {
            self.fatal.give_up(status.fatal_reason.clone());
        }
        self.tally.set(self.key, Some(status.state), &self.shared);
    }

    fn restart(&self, reason: &RestartReason) {
        self.shared.update_upstream(|u| u.restarts += 1);
        self.shared.metrics.upstream_restart(reason.label());
    }

    fn late_reply(&self) {
        self.shared.metrics.late_reply();
    }
}

/// A POST waiting for its reply.
struct Waiter {
    /// The client's id, restored on the reply.
    id: Value,
    /// The `progressToken` the child was given for this request (the gateway's key for it,
    /// unique in this child, so that two clients of a pooled child choosing the same token
    /// never get each other's progress), to route its progress notifications.
    progress: Option<Value>,
    /// The token the client chose, restored on the way out.
    client_token: Option<Value>,
    /// Whether the client takes an SSE stream (else server messages have no way to it).
    sse: bool,
    /// Order of arrival: a server message naming no request goes to the latest waiter that
    /// takes a stream (on a session's child).
    seq: u64,
    reply: oneshot::Sender<Value>,
    events: Events,
    /// Told of each progress notification for this request, when its timeout may extend.
    progressed: Option<Arc<Notify>>,
}

#[derive(Default)]
struct Routes {
    waiting: HashMap<String, Waiter>,
    next: u64,
    /// The session's GET stream (SSE frames).
    listen: Option<Events>,
    dropped: u64,
    /// Cancellations of requests given up on (timed out, a stateless client gone, the
    /// gateway's own past their deadline) the child's full input could not take.
    cancels_dropped: u64,
    /// Calls waiting out a retry's backoff (no request in flight, so not in `waiting`): the
    /// client's id and what tells the retry loop that the client cancelled it. One entry per
    /// `tools/call` being retried, gone when its wait ends ([`Backoff`]).
    backing_off: Vec<(Value, Arc<Notify>)>,
    /// The ids of the client's latest cancellations that found nothing to cancel, newest
    /// last: a retried call's failed attempt may have been answered (no longer in `waiting`)
    /// and its backoff not yet begun (not yet in `backing_off`) when the notification came.
    /// Its backoff, beginning, finds the id here and ends at once. An id is taken out when a
    /// request with that id is sent (ids are unique within a session, but a cancellation of
    /// a request already answered must not cancel a later one that reuses its id).
    missed: std::collections::VecDeque<Value>,
}

/// The most cancellations of nothing remembered per session ([`Routes::missed`]): a retried
/// call's window is microseconds, so a few are plenty, and a client sending many costs little.
const MISSED_CANCELS: usize = 16;

impl Routes {
    /// A client's cancellation of `id` found no request waiting: the backoff of a call
    /// between attempts is told; with none, `id` is remembered for one about to begin.
    ///
    /// Remembered in both cases: a backoff whose sleep ended as the notification came (its
    /// wake-up then seen by nobody) has its next attempt stopped by [`Routes::take_missed`].
    fn cancel_between(&mut self, id: Value) {
        if let Some(i) = self.backing_off.iter().position(|(b, _)| *b == id) {
            self.backing_off.swap_remove(i).1.notify_one();
        }
        if self.missed.len() >= MISSED_CANCELS {
            self.missed.pop_front();
        }
        self.missed.push_back(id);
    }

    /// A retry's backoff for `id` begins: what wakes it when the client cancels the call,
    /// already woken when the cancellation came just before.
    fn back_off(&mut self, id: &Value) -> Arc<Notify> {
        let cancelled = Arc::new(Notify::new());
        if let Some(i) = self.missed.iter().position(|m| m == id) {
            self.missed.remove(i);
            // A stored permit: the backoff's first wait ends at once.
            cancelled.notify_one();
        }
        self.backing_off.push((id.clone(), cancelled.clone()));
        cancelled
    }

    /// A retry's next attempt of `id` is about to be sent: whether the client cancelled it
    /// since the last attempt ended (then it is not sent; the cancellation is used up).
    fn take_missed(&mut self, id: &Value) -> bool {
        match self.missed.iter().position(|m| m == id) {
            Some(i) => {
                self.missed.remove(i);
                true
            }
            None => false,
        }
    }

    /// A request with the client's `id` is sent: an earlier cancellation of that id was of
    /// something else.
    fn sending(&mut self, id: &Value) {
        if !self.missed.is_empty() {
            self.missed.retain(|m| m != id);
        }
    }
}

/// A retry's backoff registered in [`Routes::backing_off`], taken out when dropped (the wait
/// ended, or the client went away).
struct Backoff<'a> {
    worker: &'a Worker,
    cancelled: Arc<Notify>,
}

impl<'a> Backoff<'a> {
    fn new(worker: &'a Worker, id: &Value) -> Backoff<'a> {
        let cancelled = lock(&worker.routes).back_off(id);
        Backoff { worker, cancelled }
    }
}

impl Drop for Backoff<'_> {
    fn drop(&mut self) {
        lock(&self.worker.routes)
            .backing_off
            .retain(|(_, n)| !Arc::ptr_eq(n, &self.cancelled));
    }
}

/// Whether a child's supervisor gave up on it, and why (the supervisor's words, without the
/// server's stderr: they reach `/readyz`).
#[derive(Debug, Default)]
pub(crate) struct Fate {
    gave_up: AtomicBool,
    why: Mutex<Option<String>>,
}

impl Fate {
    fn give_up(&self, why: Option<String>) {
        if let Some(w) = why {
            *lock(&self.why) = Some(w);
        }
        self.gave_up.store(true, Ordering::Relaxed);
    }

    fn is_fatal(&self) -> bool {
        self.gave_up.load(Ordering::Relaxed)
    }

    fn why(&self) -> Option<String> {
        lock(&self.why).clone()
    }
}

/// One supervised child and the HTTP side of its relay.
pub(crate) struct Worker {
    key: u64,
    input: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
    routes: Mutex<Routes>,
    last_used: Mutex<Instant>,
    fatal: Arc<Fate>,
    /// Each stream's [`budget`] of server messages held.
    budget: usize,
    /// The restarted server negotiated another protocol version or other capabilities than
    /// the session's client did (the relay answers everything `-32082`): the session cannot
    /// go on, its client must initialize a new one.
    changed: AtomicBool,
    /// A child of the stateless pool, serving requests of any client: a server message that
    /// does not name its request (by progress token or subscription id) goes to a client only
    /// when one request is waiting.
    pooled: AtomicBool,
    /// The relay, the reader and the writer; `None` once taken to be awaited.
    tasks: Mutex<Option<JoinHandle<()>>>,
}

impl Worker {
    fn start(
        key: u64,
        settings: Settings,
        observer: Arc<dyn Observer>,
        fatal: Arc<Fate>,
        mut stop: watch::Receiver<bool>,
    ) -> Arc<Worker> {
        let (ours, theirs) = tokio::io::duplex(PIPE);
        let (their_read, their_write) = tokio::io::split(theirs);
        let (our_read, mut our_write) = tokio::io::split(ours);
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
        let max = settings.max_message_size;
        let worker = Arc::new(Worker {
            key,
            input: Mutex::new(Some(tx)),
            routes: Mutex::new(Routes::default()),
            last_used: Mutex::new(Instant::now()),
            fatal,
            budget: budget(max),
            changed: AtomicBool::new(false),
            pooled: AtomicBool::new(false),
            tasks: Mutex::new(None),
        });
        // Spawned (not awaited here) so that the child is forked from a runtime thread (the
        // main thread of the default single-threaded runtime, or a worker), which lives as
        // long as the runtime: the parent-death signal is per thread.
        let relay = tokio::spawn(async move {
            let stop = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            mcpulse_relay::supervise::run_until(settings, their_read, their_write, observer, stop)
                .await
        });
        let writer = tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                if our_write.write_all(&line).await.is_err() {
                    return;
                }
            }
            // Every sender gone: EOF to the relay, which stops the child gracefully.
            let _ = our_write.shutdown().await;
        });
        let reader = {
            let worker = worker.clone();
            tokio::spawn(async move {
                // The relay bounds each line to max_message_size already; the margin is for
                // the error lines it writes itself.
                let mut lines = LineReader::new(our_read, max.saturating_add(4096));
                loop {
                    match lines.next_line().await {
                        LineRead::Line(line) if line.is_empty() => {}
                        LineRead::Line(line) => worker.route(&line),
                        LineRead::TooLong(_) => {}
                        LineRead::Eof => break,
                    }
                }
                worker.ended();
            })
        };
        let all = tokio::spawn(async move {
            let _ = relay.await;
            let _ = reader.await;
            writer.abort();
        });
        *lock(&worker.tasks) = Some(all);
        worker
    }

    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    /// Whether this child's session cannot go on: its supervisor gave up on the server (the
    /// restart budget spent), or the restarted server negotiated differently.
    fn spent(&self) -> bool {
        self.fatal.is_fatal() || self.changed.load(Ordering::Relaxed)
    }

    /// Idle: nothing waiting, no GET stream, and no request for `idle`.
    fn idle_for(&self, idle: Duration, now: Instant) -> bool {
        let routes = lock(&self.routes);
        let streaming = routes.listen.as_ref().is_some_and(|l| !l.is_closed());
        routes.waiting.is_empty()
            && !streaming
            && now.saturating_duration_since(*lock(&self.last_used)) >= idle
    }

    fn busy(&self) -> usize {
        lock(&self.routes).waiting.len()
    }

    fn sender(&self) -> Option<mpsc::Sender<Vec<u8>>> {
        lock(&self.input).clone()
    }

    /// Sends one message to the child (a line, newline added).
    async fn send(&self, message: &Value) -> bool {
        match line_of(message) {
            Some(line) => self.send_line(line).await,
            None => false,
        }
    }

    /// Sends a line made by [`line_of`].
    async fn send_line(&self, line: Vec<u8>) -> bool {
        let Some(tx) = self.sender() else {
            return false;
        };
        tx.send(line).await.is_ok()
    }

    /// Stops the child: its relay sees EOF and runs the graceful stop (close stdin, SIGTERM,
    /// SIGKILL to the group). Waits for it, at most `bound`.
    async fn close(&self, bound: Duration) {
        drop(lock(&self.input).take());
        let task = lock(&self.tasks).take();
        if let Some(task) = task
            && tokio::time::timeout(bound, task).await.is_err()
        {
            tracing::warn!(worker = self.key, "a session's child did not stop in time");
        }
    }

    /// A line from the relay: a reply to its waiter, anything else to a stream.
    fn route(&self, line: &[u8]) {
        let Ok(Value::Object(mut msg)) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        if !msg.contains_key("method") {
            let Some(key) = msg.get("id").and_then(Value::as_str).map(str::to_owned) else {
                return;
            };
            // A late reply (its request timed out or was cancelled) never gets here: the
            // relay stopped tracking the id when it passed the cancellation on; it drops the
            // reply and tells the observer (counted in `late_replies`).
            if msg.get("error").is_some_and(|e| {
                is_ours(e) && e.get("code").and_then(Value::as_i64) == Some(SESSION_CHANGED)
            }) {
                self.changed.store(true, Ordering::Relaxed);
            }
            let waiter = lock(&self.routes).waiting.remove(&key);
            if let Some(w) = waiter {
                // A subscription's end names it by the id the child saw.
                if let Some(meta) = msg
                    .get_mut("result")
                    .and_then(|r| r.get_mut("_meta"))
                    .and_then(Value::as_object_mut)
                    && meta.get(SUBSCRIPTION_ID).and_then(Value::as_str) == Some(key.as_str())
                {
                    meta.insert(SUBSCRIPTION_ID.into(), w.id.clone());
                }
                msg.insert("id".into(), w.id);
                let _ = w.reply.send(Value::Object(msg));
            }
            return;
        }
        let progress = msg.get("method").and_then(Value::as_str) == Some("notifications/progress");
        let is_request = msg.contains_key("id");
        let routes = lock(&self.routes);
        // The request a message names, by the progress token or the subscription id the
        // gateway gave the child (its key for the request), with what to restore.
        let named = named_request(&msg);
        let owner = named.as_ref().and_then(|(key, field)| {
            let w = routes.waiting.get(key.as_str())?;
            match field {
                Named::Progress => w.progress.is_some().then(|| (w, w.client_token.clone())),
                Named::Subscription => Some((w, Some(w.id.clone()))),
            }
        });
        if progress && let Some(n) = owner.as_ref().and_then(|(w, _)| w.progressed.as_ref()) {
            n.notify_one();
        }
        let pooled = self.pooled.load(Ordering::Relaxed);
        // What to put back where the child's message names its request (the client's own
        // token or id), done after the lock is let go: re-writing a large message must not
        // hold every other request of this child.
        let mut restore = None;
        let target = match (&named, owner) {
            (_, Some((w, value))) => {
                if let (Some((_, field)), Some(value)) = (&named, value) {
                    restore = Some((*field, value));
                }
                w.sse.then(|| w.events.clone())
            }
            // Names a request no longer waiting (late progress): nobody's.
            (Some(_), None) => None,
            // Names none: the latest request that takes a stream, else the GET stream; on a
            // pooled child (requests of any client) only the one request waiting, if one is.
            (None, None) if pooled => match routes.waiting.len() {
                1 => routes
                    .waiting
                    .values()
                    .find(|w| w.sse)
                    .map(|w| w.events.clone()),
                _ => None,
            },
            (None, None) => routes
                .waiting
                .values()
                .filter(|w| w.sse)
                .max_by_key(|w| w.seq)
                .map(|w| w.events.clone())
                .or_else(|| routes.listen.clone()),
        };
        drop(routes);
        let sent = match target {
            Some(t) => {
                let frame = match restore {
                    Some((field, value)) => {
                        field.restore(&mut msg, value);
                        sse_frame(&serde_json::to_vec(&msg).unwrap_or_default())
                    }
                    None => sse_frame(line),
                };
                let size = frame.len();
                t.try_send(frame, size)
            }
            None => Err(mcpulse_transport::queue::Full::Closed),
        };
        let Err(why) = sent else {
            return;
        };
        let dropped = {
            let mut routes = lock(&self.routes);
            routes.dropped += 1;
            routes.dropped
        };
        if is_request {
            // Nobody can carry it to the client: answer for the client, so the server does
            // not wait for ever.
            let message = match why {
                mcpulse_transport::queue::Full::Closed => {
                    "mcpulse gateway: no client stream is open to carry this request (open a GET stream, or send it during a POST)"
                }
                mcpulse_transport::queue::Full::Full => {
                    "mcpulse gateway: the client's stream is full (the client is not reading it fast enough); this request was not delivered"
                }
            };
            let answer = json!({"jsonrpc": "2.0", "id": msg.get("id"), "error": {
                "code": -32603,
                "message": message,
            }});
            if let Some(tx) = self.sender()
                && let Ok(mut line) = serde_json::to_vec(&answer)
            {
                line.push(b'\n');
                let _ = tx.try_send(line);
            }
        }
        tracing::debug!(
            worker = self.key,
            dropped,
            "a server message with no open stream to carry it, dropped"
        );
    }

    /// Gives up on the request sent as `key` (it timed out, its stateless client closed its
    /// stream, or the gateway's own request passed its deadline): its waiter goes, and the server
    /// is told with `notifications/cancelled` (the relay passes it to the child, which should
    /// stop the work, and drops the reply if it still comes).
    ///
    /// Never waits: a wedged child (it stopped reading, its input queue is full) must not
    /// hold the timeout's answer; the cancellation is then dropped, and counted in the log.
    fn abandon(&self, key: &str, reason: &str) {
        lock(&self.routes).waiting.remove(key);
        let cancel = mcpulse_wire::message::cancelled(key, reason);
        let sent = self.sender().is_some_and(|tx| {
            serde_json::to_vec(&cancel).is_ok_and(|mut line| {
                line.push(b'\n');
                tx.try_send(line).is_ok()
            })
        });
        if !sent {
            let dropped = {
                let mut routes = lock(&self.routes);
                routes.cancels_dropped += 1;
                routes.cancels_dropped
            };
            tracing::warn!(
                worker = self.key,
                dropped,
                "the server's input is full (it stopped reading?): the notifications/cancelled for a request given up on (timed out, or its client gone) was dropped"
            );
        }
    }

    /// A client's `notifications/cancelled`: its `requestId` is the client's id, which the
    /// child never saw; it becomes the gateway's key for that request, whose POST is answered
    /// with a "cancelled" error (the client no longer waits for it) and whose reply will be
    /// dropped. `false`: no such request is waiting (already answered: nothing to cancel).
    fn client_cancel(&self, message: &mut serde_json::Map<String, Value>) -> bool {
        let Some(params) = message.get_mut("params").and_then(Value::as_object_mut) else {
            return false;
        };
        let Some(id) = params.get("requestId").cloned() else {
            return false;
        };
        let mut routes = lock(&self.routes);
        let Some(key) = routes
            .waiting
            .iter()
            .find(|(_, w)| w.id == id)
            .map(|(k, _)| k.clone())
        else {
            // Between two attempts of a retried call: the retry is not sent.
            routes.cancel_between(id);
            return false;
        };
        if let Some(w) = routes.waiting.remove(&key) {
            let _ = w.reply.send(error(&w.id, CANCELLED, CANCELLED_BY_CLIENT));
        }
        params.insert("requestId".into(), Value::String(key));
        true
    }

    /// The relay ended: every waiter gets an error (dropping its sender does that), streams
    /// close.
    fn ended(&self) {
        let mut routes = lock(&self.routes);
        for (_, w) in routes.waiting.drain() {
            let _ = w.reply.send(error(
                &w.id,
                SESSION_ENDED,
                "mcpulse gateway: the server's session ended before it answered",
            ));
        }
        routes.listen = None;
        drop(lock(&self.input).take());
    }
}

/// The `_meta` key by which a 2026-07-28 server names the `subscriptions/listen` request a
/// notification belongs to (its JSON-RPC id: the gateway's key, as the child saw it).
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// How a child's message names the request it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    /// `params.progressToken`.
    Progress,
    /// `params._meta["io.modelcontextprotocol/subscriptionId"]`.
    Subscription,
}

impl Named {
    /// Puts back the client's own value where the child's names its request.
    fn restore(self, msg: &mut serde_json::Map<String, Value>, value: Value) {
        let Some(params) = msg.get_mut("params").and_then(Value::as_object_mut) else {
            return;
        };
        match self {
            Named::Progress => {
                params.insert("progressToken".into(), value);
            }
            Named::Subscription => {
                if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
                    meta.insert(SUBSCRIPTION_ID.into(), value);
                }
            }
        }
    }
}

/// The gateway's key of the request a child's message names, if it names one (a value that
/// is not a string names none of the gateway's: the key `""`, which no request has).
fn named_request(msg: &serde_json::Map<String, Value>) -> Option<(String, Named)> {
    let params = msg.get("params")?;
    let key = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    if let Some(t) = params.get("progressToken") {
        return Some((key(t), Named::Progress));
    }
    let s = params.get("_meta")?.get(SUBSCRIPTION_ID)?;
    Some((key(s), Named::Subscription))
}

/// 400: a legacy request without a session id.
fn session_required() -> Response {
    super::refuse(
        StatusCode::BAD_REQUEST,
        -32000,
        "Bad Request: Mcp-Session-Id header is required (initialize first, or send a 2026-07-28 request with MCP-Protocol-Version)",
    )
}

/// One SSE `message` event carrying one JSON-RPC line.
pub(crate) fn sse_frame(json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + 24);
    out.extend_from_slice(b"event: message\ndata: ");
    // A child's line may hold a bare CR, which JSON takes as white space between tokens (never
    // inside a string) but SSE as the end of the line: as a space, the data stays one line
    // and the same JSON.
    let at = out.len();
    out.extend_from_slice(json);
    for b in &mut out[at..] {
        if *b == b'\r' {
            *b = b' ';
        }
    }
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// A JSON-RPC error reply.
pub(crate) fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// Removes a waiter when its POST goes away unanswered (the client disconnected): a reply
/// arriving later then finds no waiter and is dropped. With `abandon`, the child is told too
/// (`notifications/cancelled`, [`Worker::abandon`]): a 2026-07-28 client's closed stream *is*
/// its cancellation (a legacy client's disconnect is not, as the spec has it), and a request
/// of the gateway's own that outlived its deadline is given up on.
struct WaitGuard {
    worker: Arc<Worker>,
    key: String,
    abandon: Option<&'static str>,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        let waiting = lock(&self.worker.routes)
            .waiting
            .remove(&self.key)
            .is_some();
        if waiting && let Some(reason) = self.abandon {
            self.worker.abandon(&self.key, reason);
        }
    }
}

/// Why a stateless client's request was cancelled on the child.
const CLOSED_STREAM: &str = "mcpulse gateway: the client closed its stream (its cancellation)";
/// Why a request of the gateway's own (readiness, a `tool` check) was cancelled on the child.
const OWN_DEADLINE: &str = "mcpulse gateway: the health check's deadline passed";

/// A stdio command behind the gateway.
pub struct StdioUpstream {
    settings: Settings,
    limits: Limits,
    shared: Arc<Shared>,
    sessions: Mutex<HashMap<String, Arc<Worker>>>,
    pool: Mutex<Vec<Arc<Worker>>>,
    tally: Arc<Tally>,
    next: AtomicU64,
    stop: watch::Sender<bool>,
    /// The readiness session's worker, once started ([`StdioUpstream::start_readiness`]).
    readiness: Mutex<Option<Arc<Worker>>>,
    /// The readiness session's child's pid (0 while none runs).
    readiness_pid: Arc<AtomicU32>,
    /// The era the readiness session's handshake found (None: not done, or due again).
    readiness_era: Mutex<Option<mcpulse_wire::version::Era>>,
}

/// How a POST reached this upstream, as the door read it.
pub struct Post {
    pub message: serde_json::Map<String, Value>,
    pub session: Option<String>,
    /// The client's Accept allows an SSE response.
    pub sse: bool,
    /// The request is a stateless 2026-07-28 one.
    pub modern: bool,
    /// The gateway's own probe (a `tool` dependency check): kept out of the metrics and logs.
    pub own_probe: bool,
}

impl StdioUpstream {
    pub fn new(settings: Settings, limits: Limits, shared: Arc<Shared>) -> Arc<StdioUpstream> {
        let (stop, _) = watch::channel(false);
        let up = Arc::new(StdioUpstream {
            settings,
            limits,
            shared,
            sessions: Mutex::new(HashMap::new()),
            pool: Mutex::new(Vec::new()),
            tally: Arc::new(Tally::default()),
            next: AtomicU64::new(1),
            stop,
            readiness: Mutex::new(None),
            readiness_pid: Arc::new(AtomicU32::new(0)),
            readiness_era: Mutex::new(None),
        });
        tokio::spawn(expire_idle(Arc::downgrade(&up)));
        up
    }

    /// The number of open legacy sessions.
    pub fn sessions(&self) -> usize {
        lock(&self.sessions).len()
    }

    /// The readiness session's child's pid, while it runs: the one child no client has (for
    /// tests and operators telling it from the sessions' children).
    pub fn readiness_pid(&self) -> Option<u32> {
        Some(self.readiness_pid.load(Ordering::Relaxed)).filter(|p| *p != 0)
    }

    fn spawn_worker(&self) -> Arc<Worker> {
        self.spawn_observed(None)
    }

    fn spawn_observed(&self, pid: Option<Arc<AtomicU32>>) -> Arc<Worker> {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let fatal = Arc::new(Fate::default());
        let observer = Arc::new(Logs::new(WorkerObserver {
            key,
            shared: self.shared.clone(),
            tally: self.tally.clone(),
            fatal: fatal.clone(),
            pid,
        }));
        Worker::start(
            key,
            self.settings.clone(),
            observer,
            fatal,
            self.stop.subscribe(),
        )
    }

    /// How long a stop may take: the graceful sequence's two steps, and a margin.
    fn stop_bound(&self) -> Duration {
        self.settings.stop_grace * 2 + Duration::from_secs(2)
    }

    fn forget(&self, worker: &Worker) {
        self.tally.set(worker.key, None, &self.shared);
    }

    /// The worker of session `sid`, unless there is none, or it cannot go on ([`Worker::spent`]):
    /// then the session is ended (its child stopped, its GET stream closed) and its client,
    /// answered 404, initializes a new one, as the spec has a client do.
    fn session(self: &Arc<Self>, sid: &str) -> Option<Arc<Worker>> {
        let mut sessions = lock(&self.sessions);
        let worker = sessions.get(sid)?;
        if !worker.spent() {
            return Some(worker.clone());
        }
        let w = sessions.remove(sid)?;
        drop(sessions);
        tracing::warn!(
            "a session's server cannot go on (its restart budget is spent, or it came back with another protocol version or capabilities): ending the session; its client gets 404 and initializes a new one"
        );
        let up = self.clone();
        tokio::spawn(async move {
            up.shared.metrics.session_closed();
            w.close(up.stop_bound()).await;
            up.forget(&w);
        });
        None
    }

    async fn end_session(&self, id: &str) -> bool {
        let worker = lock(&self.sessions).remove(id);
        match worker {
            Some(w) => {
                self.shared.metrics.session_closed();
                w.close(self.stop_bound()).await;
                self.forget(&w);
                true
            }
            None => false,
        }
    }

    /// A pool child for a stateless request: a new one while the pool is not full, else the
    /// least busy; a child whose supervisor gave up is replaced.
    fn pooled(&self) -> Arc<Worker> {
        let mut pool = lock(&self.pool);
        let gone: Vec<Arc<Worker>> = pool
            .iter()
            .filter(|w| w.fatal.is_fatal() || w.sender().is_none())
            .cloned()
            .collect();
        pool.retain(|w| !w.fatal.is_fatal() && w.sender().is_some());
        for w in gone {
            self.forget(&w);
            let bound = self.stop_bound();
            tokio::spawn(async move { w.close(bound).await });
        }
        let least = pool.iter().min_by_key(|w| w.busy()).cloned();
        match least {
            Some(w) if w.busy() == 0 || pool.len() >= self.limits.pool => w,
            _ => {
                let w = self.spawn_worker();
                w.pooled.store(true, Ordering::Relaxed);
                pool.push(w.clone());
                w
            }
        }
    }

    /// A POST that passed the door.
    pub async fn post(self: &Arc<Self>, post: Post, health_tool: Option<&str>) -> Response {
        let Post {
            message,
            session,
            sse,
            modern,
            own_probe,
        } = post;
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let id = message.get("id").cloned();
        // A notification, or the client's reply to a server request: 202, passed on.
        let (Some(method), Some(id)) = (method.clone(), id) else {
            if method.is_none() && !message.contains_key("result") && !message.contains_key("error")
            {
                return super::refuse(StatusCode::BAD_REQUEST, -32600, "not a JSON-RPC message");
            }
            let worker = match &session {
                Some(s) => match self.session(s) {
                    Some(w) => Some(w),
                    None => return super::unknown_session(),
                },
                None => None,
            };
            if let Some(w) = worker {
                w.touch();
                let mut message = message;
                let cancel = method.as_deref() == Some("notifications/cancelled");
                // A cancellation of nothing the child is working on is not passed on.
                if !cancel || w.client_cancel(&mut message) {
                    w.send(&Value::Object(message)).await;
                }
            }
            return StatusCode::ACCEPTED.into_response();
        };
        let started = Instant::now();
        let tool = (method == "tools/call")
            .then(|| {
                message
                    .get("params")
                    .and_then(|p| p.get("name"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .flatten();
        // A stale session is told so before anything else (the health tool's answer
        // included), and before it can queue for (and hold) a slot.
        let worker = match &session {
            Some(s) => match self.session(s) {
                Some(w) => Some(w),
                None => return super::unknown_session(),
            },
            None if !modern && method != "initialize" => return session_required(),
            None => None,
        };
        if let (Some(name), Some(health)) = (tool.as_deref(), health_tool)
            && name == health
        {
            let reply = json!({"jsonrpc": "2.0", "id": id, "result": crate::health::tool_result(&self.shared)});
            record(
                &self.shared,
                &method,
                tool.as_deref(),
                started,
                Outcome::Ok,
                own_probe,
            );
            return json_reply(&reply, None, modern);
        }
        // The call policies: admitted (or refused at the door, before any stream), and timed.
        // A `tools/call` without a name gets the gateway-wide limit and the default
        // timeout (as the name "", which no listed tool has).
        let policed = tool.as_deref().or((method == "tools/call").then_some(""));
        let (permit, timer) = match policed {
            Some(name) if !own_probe => {
                let policies = self.shared.policies();
                match policies.admit(name, &self.shared).await {
                    Ok(p) => {
                        let timer = policies.timer(p.attempts(), name);
                        (Some(p), Some(timer))
                    }
                    Err(refusal) => {
                        record(
                            &self.shared,
                            &method,
                            tool.as_deref(),
                            started,
                            Outcome::GatewayError,
                            own_probe,
                        );
                        return crate::policy::refusal_response(&id, name, &refusal);
                    }
                }
            }
            _ => (None, None),
        };
        let (worker, minted) = match (worker, method.as_str()) {
            // Checked above, and still there unless it ended meanwhile (while queued).
            (Some(_), _) => match session.as_deref().and_then(|s| self.session(s)) {
                Some(w) => (w, None),
                None => return super::unknown_session(),
            },
            (None, "initialize") => {
                let mut sessions = lock(&self.sessions);
                if sessions.len() >= self.limits.max_sessions {
                    drop(sessions);
                    record(
                        &self.shared,
                        &method,
                        None,
                        started,
                        Outcome::GatewayError,
                        own_probe,
                    );
                    return super::busy(&format!(
                        "mcpulse gateway: all {} sessions are in use; retry later",
                        self.limits.max_sessions
                    ));
                }
                let sid = super::session_id();
                let w = self.spawn_worker();
                sessions.insert(sid.clone(), w.clone());
                drop(sessions);
                self.shared.metrics.session_opened();
                (w, Some(sid))
            }
            (None, _) if modern => (self.pooled(), None),
            (None, _) => return session_required(),
        };
        worker.touch();
        let up = self.clone();
        // A copy of the request only when its entry opts in to retries.
        let mut again = match (&permit, tool.as_deref()) {
            (Some(p), Some(name)) if up.shared.policies().may_retry(p) => Some(Again {
                up: up.clone(),
                worker: worker.clone(),
                attempts: p.attempts(),
                tool: name.to_owned(),
                message: message.clone(),
                id: id.clone(),
                sse,
                modern,
                health_tool: health_tool.map(str::to_owned),
                made: 1,
            }),
            _ => None,
        };
        let mut reply = Call {
            worker: worker.clone(),
            message,
            id,
            sse,
            keepalive: self.limits.keepalive,
            timer,
            abandon: modern.then_some(CLOSED_STREAM),
            retry: false,
        }
        .run(health_tool.map(str::to_owned))
        .await;
        if let Some(a) = &mut again {
            while let Some(next) = a.after(&reply).await {
                reply = next;
            }
        }
        let sid_header = minted.clone();
        let finish = move |reply: &Value, timed_out: bool| {
            let outcome = if timed_out {
                Outcome::GatewayError
            } else {
                outcome(reply)
            };
            let cancelled = !timed_out && is_cancelled(reply);
            if cancelled {
                // Not the tool's failure: its breaker trial is handed back unjudged (dropping
                // the permit does that) and its slots freed.
                drop(permit);
            } else if let Some(p) = permit {
                let o = if timed_out {
                    mcpulse_policy::breaker::Outcome::Failure(
                        mcpulse_policy::breaker::FailureKind::Timeout,
                    )
                } else {
                    crate::policy::outcome_of(outcome)
                };
                p.finish(o, &up.shared.metrics);
            }
            if timed_out && let Some(t) = tool.as_deref() {
                up.shared.metrics.tool_timeout(t);
            }
            if method == "tools/list" {
                super::learn_listed_tools(&up.shared, reply);
                up.shared.policies().learn_hints(reply);
            }
            if cancelled && !own_probe {
                super::record_cancelled(&up.shared, &method, tool.as_deref(), started);
            } else {
                record(
                    &up.shared,
                    &method,
                    tool.as_deref(),
                    started,
                    outcome,
                    own_probe,
                );
            }
            if let Some(sid) = &minted
                && reply.get("result").is_none()
            {
                // The handshake failed: no session.
                let up = up.clone();
                let sid = sid.clone();
                tokio::spawn(async move { up.end_session(&sid).await });
            }
        };
        match reply {
            Reply::Json(v, timed_out) => {
                finish(&v, timed_out);
                // A failed handshake opens no session: no id to hand out.
                let sid = sid_header.filter(|_| v.get("result").is_some());
                json_reply(&v, sid.as_deref(), modern)
            }
            Reply::Stream(stream) => stream.into_response(sid_header.as_deref(), finish, again),
        }
    }

    /// `GET`: the session's stream of server messages sent outside any request.
    pub fn listen(self: &Arc<Self>, session: Option<&str>) -> Response {
        let Some(sid) = session else {
            return super::refuse(
                StatusCode::METHOD_NOT_ALLOWED,
                -32000,
                "Method not allowed: a GET stream needs an Mcp-Session-Id (stateless requests have none)",
            );
        };
        let Some(worker) = self.session(sid) else {
            return super::unknown_session();
        };
        let (tx, rx) = mcpulse_transport::queue::channel(EVENTS, worker.budget);
        {
            let mut routes = lock(&worker.routes);
            if routes.listen.as_ref().is_some_and(|l| !l.is_closed()) {
                return super::refuse(
                    StatusCode::CONFLICT,
                    -32000,
                    "Conflict: this session already has a GET stream open",
                );
            }
            routes.listen = Some(tx);
        }
        worker.touch();
        sse_response(rx, None, self.limits.keepalive)
    }

    /// `DELETE`: ends the session and stops its child (answered once it stopped).
    pub async fn delete(&self, session: Option<&str>) -> Response {
        let Some(sid) = session else {
            return super::refuse(
                StatusCode::BAD_REQUEST,
                -32000,
                "Bad Request: Mcp-Session-Id header is required",
            );
        };
        if self.end_session(sid).await {
            StatusCode::OK.into_response()
        } else {
            super::unknown_session()
        }
    }

    /// Stops every child at once (a signal): each with the short signal grace, all together.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        let sessions: Vec<Arc<Worker>> = lock(&self.sessions).drain().map(|(_, w)| w).collect();
        for _ in &sessions {
            self.shared.metrics.session_closed();
        }
        let pool: Vec<Arc<Worker>> = lock(&self.pool).drain(..).collect();
        let readiness = lock(&self.readiness).take();
        let workers: Vec<Arc<Worker>> = sessions.into_iter().chain(pool).chain(readiness).collect();
        let bound = mcpulse_relay::supervise::SIGNAL_GRACE * 2 + Duration::from_secs(2);
        let mut stops = tokio::task::JoinSet::new();
        for w in workers {
            stops.spawn(async move { w.close(bound).await });
        }
        while stops.join_next().await.is_some() {}
    }

    /// Ends the idle sessions, their children stopped side by side (each stop may wait out
    /// its grace: one after the other, a hundred would take minutes).
    async fn expire(self: Arc<Self>) {
        let now = Instant::now();
        let idle: Vec<String> = lock(&self.sessions)
            .iter()
            .filter(|(_, w)| w.idle_for(self.limits.idle_timeout, now))
            .map(|(k, _)| k.clone())
            .collect();
        // Sessions whose server cannot go on end too, also with a GET stream open.
        let spent: Vec<String> = lock(&self.sessions)
            .iter()
            .filter(|(_, w)| w.spent())
            .map(|(k, _)| k.clone())
            .collect();
        for sid in spent {
            self.session(&sid);
        }
        let mut stops = tokio::task::JoinSet::new();
        for sid in idle {
            tracing::info!(
                idle = ?self.limits.idle_timeout,
                "a session was idle too long: ending it and stopping its child"
            );
            let up = self.clone();
            stops.spawn(async move { up.end_session(&sid).await });
        }
        while stops.join_next().await.is_some() {}
    }
}

// ---- readiness ------------------------------------------------------------------------------

/// How the readiness session probes (the health side's interval and timeout).
#[derive(Debug, Clone)]
pub struct Readiness {
    /// Between two `tools/list` (at least [`crate::checks::MIN_INTERVAL`]).
    pub interval: Duration,
    /// One round: the handshake when one is due, then `tools/list` with its pages.
    pub timeout: Duration,
    /// The gateway's own health tool: not counted among the upstream's tools.
    pub own_tool: Option<String>,
}

/// The most `tools/list` pages one round follows (a server whose cursors never end cannot
/// keep the round going; the timeout bounds it too).
const MAX_PAGES: usize = 100;

impl StdioUpstream {
    /// Starts the readiness session: ONE supervised child of the gateway's own (heartbeat,
    /// restarts, process group, as a session's), which no client can reach and which counts
    /// in no session figure. The gateway makes the handshake on it (then the supervisor replays
    /// it on each restarted child) and asks `tools/list` every `interval`, reporting each round
    /// through [`crate::health::observe_protocol`]. Probing the gateway's own `/mcp` instead
    /// would open a legacy session, i.e. spawn a child, every interval (an `npx` server every
    /// 10 s) and take a `max_sessions` slot. The child's state counts in the upstream's process
    /// state (it is the upstream), so `/livez` and `/readyz` see a process from the start.
    /// A child whose supervisor spent its restart budget is replaced after a backoff
    /// ([`replacement_delay`]), `/readyz` failing meanwhile: readiness recovers on its own.
    pub fn start_readiness(self: &Arc<Self>, r: Readiness) {
        let worker = self.spawn_observed(Some(self.readiness_pid.clone()));
        *lock(&self.readiness) = Some(worker.clone());
        let shared = self.shared.clone();
        let mut stop = self.stop.subscribe();
        let up = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut session = ReadinessSession {
                worker,
                era: None,
                next: 0,
                client: mcpulse_wire::message::ClientInfo {
                    name: "mcpulse-gateway-readiness".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                },
            };
            let every = r.interval.max(crate::checks::MIN_INTERVAL);
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // Replacements of a readiness child whose supervisor gave up, since the last good
            // round.
            let mut attempt = 0u32;
            let random = std::collections::hash_map::RandomState::new();
            loop {
                tokio::select! {
                    // Stopped, or the upstream is gone (the sender dropped).
                    _ = stop.wait_for(|s| *s) => return,
                    _ = ticks.tick() => {}
                }
                let gone = session.worker.fatal.is_fatal() || session.worker.sender().is_none();
                if gone {
                    let Some(upstream) = up.upgrade() else { return };
                    use std::hash::BuildHasher;
                    let wait = replacement_delay(
                        &upstream.settings.restart.backoff,
                        attempt,
                        random.hash_one(attempt),
                    );
                    attempt = attempt.saturating_add(1);
                    crate::health::observe_protocol(
                        &shared,
                        crate::state::Protocol {
                            at_ms: crate::checks::now_ms(),
                            handshake_ok: false,
                            tools: None,
                            latency: Duration::ZERO,
                            error: Some(format!(
                                "the readiness child was given up on ({}); a new one starts in {} ms",
                                session.worker.fatal.why().map_or_else(
                                    || "its restart budget is spent".to_owned(),
                                    |w| mcpulse_wire::text::message(&w).into_owned()
                                ),
                                wait.as_millis()
                            )),
                        },
                    );
                    tracing::warn!(
                        wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                        attempt,
                        "the readiness child's restart budget is spent: starting a new one after a backoff"
                    );
                    let old = session.worker.clone();
                    old.close(upstream.stop_bound()).await;
                    upstream.forget(&old);
                    drop(upstream);
                    tokio::select! {
                        _ = stop.wait_for(|s| *s) => return,
                        () = tokio::time::sleep(wait) => {}
                    }
                    let Some(upstream) = up.upgrade() else { return };
                    if *upstream.stop.borrow() {
                        return;
                    }
                    let worker = upstream.spawn_observed(Some(upstream.readiness_pid.clone()));
                    *lock(&upstream.readiness) = Some(worker.clone());
                    *lock(&upstream.readiness_era) = None;
                    session.worker = worker;
                    session.era = None;
                    continue;
                }
                let p = session.round(&r, &shared).await;
                if p.tools.is_some() {
                    attempt = 0;
                }
                if let Some(up) = up.upgrade() {
                    *lock(&up.readiness_era) = session.era;
                }
                crate::health::observe_protocol(&shared, p);
            }
        });
    }
}

/// How long the readiness session waits before replacing a child whose supervisor spent its
/// restart budget: the upstream's own restart backoff (`backoff_initial` doubling up to
/// `backoff_max`), with "equal jitter" (between half the step and the step), so that it never
/// comes back at once, as full jitter could, after a budget of quick restarts was just spent.
fn replacement_delay(
    backoff: &mcpulse_policy::backoff::Backoff,
    attempt: u32,
    draw: u64,
) -> Duration {
    let ceiling = backoff.ceiling(attempt);
    ceiling / 2 + backoff.delay(attempt, draw) / 2
}

/// The readiness session's side of its child: which era the handshake found (None: a
/// handshake is due).
struct ReadinessSession {
    worker: Arc<Worker>,
    era: Option<mcpulse_wire::version::Era>,
    next: i64,
    client: mcpulse_wire::message::ClientInfo,
}

/// A round that did not end with a tool count: whether the server still spoke the protocol
/// (answered something of its own), and why.
struct Failed {
    handshake_ok: bool,
    why: String,
}

/// The supervisor's and the gateway's own codes: the relay answered, not the server.
fn relay_code(code: i64) -> bool {
    (-32089..=-32080).contains(&code)
}

fn error_of(reply: &Value) -> Option<(i64, String)> {
    let e = reply.get("error")?;
    let code = e.get("code").and_then(Value::as_i64).unwrap_or(0);
    let message = e.get("message").and_then(Value::as_str).unwrap_or("");
    Some((code, format!("{code} {message}")))
}

impl ReadinessSession {
    async fn round(&mut self, r: &Readiness, shared: &Shared) -> crate::state::Protocol {
        let started = Instant::now();
        let at_ms = crate::checks::now_ms();
        let outcome = self.list(r, shared, started + r.timeout).await;
        let latency = started.elapsed();
        let inert = |why: &str| {
            mcpulse_wire::text::inert(why, crate::checks::MAX_OUTPUT_CHARS).into_owned()
        };
        match outcome {
            Ok(n) => crate::state::Protocol {
                at_ms,
                handshake_ok: true,
                tools: Some(n),
                latency,
                error: None,
            },
            Err(f) => crate::state::Protocol {
                at_ms,
                handshake_ok: f.handshake_ok,
                tools: None,
                latency,
                error: Some(inert(&f.why)),
            },
        }
    }

    /// One request to the child, answered before `deadline`.
    async fn ask(&mut self, message: Value, deadline: Instant) -> Result<Value, String> {
        ask(self.worker.clone(), message, deadline).await
    }

    fn id(&mut self) -> i64 {
        self.next += 1;
        self.next
    }

    /// The handshake in the era the server speaks: `initialize` (+ `initialized`) first, as
    /// every server of today answers it at once; a server that refuses it is asked
    /// `server/discover` (2026-07-28). Asking `server/discover` first would cost a legacy
    /// server that ignores unknown methods the whole timeout.
    async fn handshake(&mut self, deadline: Instant) -> Result<mcpulse_wire::version::Era, Failed> {
        use mcpulse_wire::{message, version};
        let fail = |why: String| Failed {
            handshake_ok: false,
            why,
        };
        let id = self.id();
        let init = self
            .ask(message::initialize(id, &self.client), deadline)
            .await
            .map_err(fail)?;
        if init
            .get("result")
            .and_then(|r| r.get("protocolVersion"))
            .is_some()
        {
            if !self.worker.send(&message::initialized()).await {
                return Err(fail("the upstream's readiness session has ended".into()));
            }
            return Ok(version::Era::Legacy);
        }
        let init_error = error_of(&init).unwrap_or((0, "no result".into()));
        if relay_code(init_error.0) {
            return Err(fail(format!("initialize: {}", init_error.1)));
        }
        let id = self.id();
        let discover = self
            .ask(
                message::discover(id, version::MODERN, &self.client),
                deadline,
            )
            .await
            .map_err(fail)?;
        if discover
            .get("result")
            .and_then(|r| r.get("supportedVersions"))
            .is_some_and(Value::is_array)
        {
            return Ok(version::Era::Modern);
        }
        let why = error_of(&discover).map_or_else(|| "no DiscoverResult".into(), |e| e.1);
        Err(fail(format!(
            "the handshake failed: initialize answered {}; server/discover {why}",
            init_error.1
        )))
    }

    /// The handshake when one is due, then every page of `tools/list`: the tool count, the
    /// gateway's own health tool left out. The tools' metric labels and retry hints are
    /// learnt from it, as from a relayed `tools/list` (and as over an HTTP upstream, whose
    /// readiness probe's list passes the relay): before any client lists them.
    async fn list(
        &mut self,
        r: &Readiness,
        shared: &Shared,
        deadline: Instant,
    ) -> Result<usize, Failed> {
        use mcpulse_wire::message::{ListKind, list};
        let era = match self.era {
            Some(e) => e,
            None => {
                let e = self.handshake(deadline).await?;
                self.era = Some(e);
                e
            }
        };
        let mut count = 0;
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let id = self.id();
            let msg = list(id, ListKind::Tools, cursor.as_deref(), era, &self.client);
            let reply = self.ask(msg, deadline).await.map_err(|why| Failed {
                handshake_ok: false,
                why,
            })?;
            if let Some((code, why)) = error_of(&reply) {
                if code == mcpulse_relay::supervise::codes::SESSION_CHANGED {
                    // The restarted child negotiated differently: a new handshake next round.
                    self.era = None;
                }
                return Err(Failed {
                    handshake_ok: !relay_code(code),
                    why: format!("tools/list: {why}"),
                });
            }
            super::learn_listed_tools(shared, &reply);
            shared.policies().learn_hints(&reply);
            let result = reply.get("result");
            let Some(tools) = result
                .and_then(|r| r.get("tools"))
                .and_then(Value::as_array)
            else {
                return Err(Failed {
                    handshake_ok: true,
                    why: "tools/list: the result has no tools array".into(),
                });
            };
            count += tools
                .iter()
                .filter(|t| {
                    r.own_tool.is_none()
                        || t.get("name").and_then(Value::as_str) != r.own_tool.as_deref()
                })
                .count();
            cursor = next_cursor(result);
            if cursor.is_none() {
                break;
            }
        }
        Ok(count)
    }
}

/// One request to a worker's child (the gateway's own: no client's), answered before
/// `deadline`.
async fn ask(worker: Arc<Worker>, message: Value, deadline: Instant) -> Result<Value, String> {
    let Value::Object(message) = message else {
        return Err("not a request".into());
    };
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let call = Call {
        worker,
        message,
        id,
        sse: false,
        keepalive: None,
        timer: None,
        abandon: Some(OWN_DEADLINE),
        retry: false,
    };
    match tokio::time::timeout_at(deadline, call.run(None)).await {
        Ok(Reply::Json(v, _)) => Ok(v),
        // Not asked for (sse: false); a reply always comes as JSON then.
        Ok(Reply::Stream(_)) => Err(format!("{method}: an unexpected stream")),
        Err(_) => Err(format!("the upstream did not answer {method} in time")),
    }
}

/// `tool` dependency checks over the readiness session's child
/// ([`crate::checks::ToolSession`]): no session, no child of their own per run. They share the
/// child with readiness, each request on its own id. Weak: the checks do not keep the
/// upstream alive.
pub struct ReadinessTools(pub std::sync::Weak<StdioUpstream>);

impl ReadinessTools {
    /// The readiness child's worker and its era, once its handshake is done.
    fn session(&self) -> Result<(Arc<Worker>, mcpulse_wire::version::Era), String> {
        let up = self.0.upgrade().ok_or("the gateway is stopping")?;
        let worker = lock(&up.readiness)
            .clone()
            .ok_or("the readiness session is not running")?;
        let era = (*lock(&up.readiness_era))
            .ok_or("the readiness session has not completed its handshake yet")?;
        Ok((worker, era))
    }
}

/// A list result's `nextCursor` (`None`: the last page).
fn next_cursor(result: Option<&Value>) -> Option<String> {
    result
        .and_then(|r| r.get("nextCursor"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn check_client() -> mcpulse_wire::message::ClientInfo {
    mcpulse_wire::message::ClientInfo {
        name: "mcpulse-gateway-check".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    }
}

impl crate::checks::ToolSession for ReadinessTools {
    fn find_tool<'a>(
        &'a self,
        tool: &'a str,
        deadline: Instant,
    ) -> crate::checks::tool::BoxFuture<'a, Result<Option<Value>, String>> {
        Box::pin(async move {
            use mcpulse_wire::message::{ListKind, list};
            let (worker, era) = self.session()?;
            let client = check_client();
            let mut cursor: Option<String> = None;
            for page in 0..MAX_PAGES {
                let msg = list(
                    page as i64,
                    ListKind::Tools,
                    cursor.as_deref(),
                    era,
                    &client,
                );
                let reply = ask(worker.clone(), msg, deadline).await?;
                if let Some((_, why)) = error_of(&reply) {
                    return Err(format!("tools/list: {why}"));
                }
                let result = reply.get("result");
                let found = result
                    .and_then(|r| r.get("tools"))
                    .and_then(Value::as_array)
                    .and_then(|tools| {
                        tools
                            .iter()
                            .find(|t| t.get("name").and_then(Value::as_str) == Some(tool))
                    });
                if let Some(t) = found {
                    return Ok(Some(t.clone()));
                }
                cursor = next_cursor(result);
                if cursor.is_none() {
                    break;
                }
            }
            Ok(None)
        })
    }

    fn call_tool<'a>(
        &'a self,
        tool: &'a str,
        deadline: Instant,
    ) -> crate::checks::tool::BoxFuture<'a, Result<Value, String>> {
        Box::pin(async move {
            let (worker, era) = self.session()?;
            let msg = mcpulse_wire::message::tools_call(
                1,
                tool,
                &serde_json::Map::new(),
                era,
                &check_client(),
            );
            ask(worker, msg, deadline).await
        })
    }
}

/// Looks for idle sessions a few times per idle timeout, for as long as the upstream exists.
async fn expire_idle(up: std::sync::Weak<StdioUpstream>) {
    let every = match up.upgrade() {
        Some(up) => {
            (up.limits.idle_timeout / 4).clamp(Duration::from_millis(25), Duration::from_secs(5))
        }
        None => return,
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(up) = up.upgrade() else {
            return;
        };
        up.expire().await;
    }
}

/// How a reply ended, for the metrics and the log line.
/// Whether a reply says the request was cancelled (`-32800`: the gateway's answer to a
/// client's `notifications/cancelled`, or the server's own word that it was cancelled):
/// neither a success nor a failure of the tool.
fn is_cancelled(reply: &Value) -> bool {
    reply
        .get("error")
        .and_then(|e| e.get("code"))
        .and_then(Value::as_i64)
        == Some(CANCELLED)
}

fn outcome(reply: &Value) -> Outcome {
    if let Some(e) = reply.get("error") {
        return if is_ours(e) {
            Outcome::GatewayError
        } else {
            Outcome::RpcError
        };
    }
    let is_error = reply
        .get("result")
        .and_then(|r| r.get("isError"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if is_error {
        Outcome::ToolError
    } else {
        Outcome::Ok
    }
}

/// The HTTP status of a stateless (2026-07-28) reply: the spec's map for the errors that
/// have one (a bad `_meta` or version, a header mismatch, a missing capability: 400; an
/// unknown method: 404), 200 for the rest, which travel in-band.
fn modern_status(reply: &Value) -> StatusCode {
    let code = reply
        .get("error")
        .and_then(|e| e.get("code"))
        .and_then(Value::as_i64);
    match code {
        Some(-32602 | -32020 | -32021 | -32022) => StatusCode::BAD_REQUEST,
        Some(-32601) => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

fn json_reply(reply: &Value, session: Option<&str>, modern: bool) -> Response {
    let status = if modern {
        modern_status(reply)
    } else {
        StatusCode::OK
    };
    let body = serde_json::to_vec(reply).unwrap_or_default();
    let mut headers = HeaderMap::new();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(sid) = session.and_then(|s| HeaderValue::from_str(s).ok()) {
        headers.insert("mcp-session-id", sid);
    }
    (status, headers, body).into_response()
}

/// A request on its way through a worker.
struct Call {
    worker: Arc<Worker>,
    message: serde_json::Map<String, Value>,
    id: Value,
    sse: bool,
    /// With `sse`: the reply not there after this long turns the response into a stream, so
    /// that the wait carries keep-alives.
    keepalive: Option<Duration>,
    /// A `tools/call`'s timeout ([`crate::policy::Timer`]).
    timer: Option<crate::policy::Timer>,
    /// Why the child is told to cancel the request if it is given up on unanswered (the
    /// future dropped): `None` to let it run ([`WaitGuard`]). Never for `initialize` (the
    /// spec forbids cancelling it).
    abandon: Option<&'static str>,
    /// A retry's attempt: a cancellation of its id that came since the last attempt ended
    /// ([`Routes::missed`]) stops it before it is sent.
    retry: bool,
}

/// How a request is answered: one JSON reply (`true`: the gateway's timeout result), or an
/// SSE stream (the server sent messages before its reply).
enum Reply {
    Json(Value, bool),
    /// Boxed: the stream's state is large beside a reply.
    Stream(Box<Stream>),
}

/// What it takes to send a failed `tools/call` again while its retry policy says so
/// (crate::policy: opt-in, annotated tools only, backoff with jitter, the budget, the deadline):
/// used on the reply before anything was sent to the client, and by a streamed answer whose
/// stream has carried nothing but keep-alive comments (the gateway's own, at `keepalive`).
struct Again {
    up: Arc<StdioUpstream>,
    worker: Arc<Worker>,
    attempts: crate::policy::Attempts,
    tool: String,
    message: serde_json::Map<String, Value>,
    id: Value,
    sse: bool,
    /// A 2026-07-28 request: its client's closed stream cancels it.
    modern: bool,
    health_tool: Option<String>,
    /// Attempts made so far, the first included.
    made: u32,
}

impl Again {
    /// After an attempt answered `reply`: the next attempt's reply when the failure is one to
    /// retry and the policy allows another (after its backoff), a cancellation's answer when the
    /// client cancels during the backoff, `None` when `reply` stands.
    async fn after(&mut self, reply: &Reply) -> Option<Reply> {
        let failure = match reply {
            Reply::Json(_, true) => mcpulse_policy::breaker::FailureKind::Timeout,
            // The client cancelled it: never sent again.
            Reply::Json(v, false) if is_cancelled(v) => return None,
            Reply::Json(v, false) => crate::policy::failure_of(outcome(v))?,
            // A stream already answering: its own task decides.
            Reply::Stream(_) => return None,
        };
        let policies = self.up.shared.policies();
        let delay = policies.retry_after(
            self.attempts,
            &self.tool,
            self.made,
            failure,
            &self.up.shared.metrics,
        )?;
        {
            // The client may cancel the call while it waits: then it is not sent again.
            let backoff = Backoff::new(&self.worker, &self.id);
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = backoff.cancelled.notified() => {
                    return Some(Reply::Json(
                        error(&self.id, CANCELLED, CANCELLED_BY_CLIENT),
                        false,
                    ));
                }
            }
        }
        self.made += 1;
        Some(
            Call {
                worker: self.worker.clone(),
                message: self.message.clone(),
                id: self.id.clone(),
                sse: self.sse,
                keepalive: self.up.limits.keepalive,
                timer: Some(policies.timer(self.attempts, &self.tool)),
                abandon: self.modern.then_some(CLOSED_STREAM),
                retry: true,
            }
            .run(self.health_tool.clone())
            .await,
        )
    }
}

/// A request turned SSE: what was received so far, and the rest to come.
pub(crate) struct Stream {
    first: Frame,
    guard: WaitGuard,
    events: EventsRx,
    reply: oneshot::Receiver<Value>,
    id: Value,
    health_tool: Option<String>,
    keepalive: Option<Duration>,
    timer: Option<crate::policy::Timer>,
    progressed: Option<Arc<Notify>>,
}

/// Sleeps until the timer's deadline, or for ever without one.
async fn expiry(timer: Option<&crate::policy::Timer>) {
    match timer {
        Some(t) => tokio::time::sleep_until(t.deadline()).await,
        None => std::future::pending().await,
    }
}

/// Waits for a progress notification, or for ever without a way to be told.
async fn progress(n: Option<&Arc<Notify>>) {
    match n {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

/// Whether an error is the supervisor's or the gateway's own (lost in a crash, gave up,
/// queue full, timed out...): one of their codes, and a message they wrote (each begins
/// `mcpulse supervise` or `mcpulse gateway`). A server answering -32001 (the TypeScript SDK's
/// timeout code) or -3208x itself gave an answer: a JSON-RPC error, never retried.
fn is_ours(error: &Value) -> bool {
    let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    ((-32089..=-32080).contains(&code) || code == -32001)
        && (message.starts_with("mcpulse supervise") || message.starts_with("mcpulse gateway"))
}

/// The request behind `guard` timed out: the child is told to cancel it, the client gets
/// the timeout result for `id`.
async fn time_out(guard: &WaitGuard, id: &Value, timer: &crate::policy::Timer) -> Value {
    let after = mcpulse_wire::units::human_duration(timer.ran().as_millis());
    let reason = format!("mcpulse gateway: the tool call timed out after {after}");
    guard.worker.abandon(&guard.key, &reason);
    let result =
        crate::policy::timeout_result(timer, "the server was sent notifications/cancelled");
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

impl Call {
    async fn run(self, health_tool: Option<String>) -> Reply {
        let Call {
            worker,
            mut message,
            id,
            sse,
            keepalive,
            mut timer,
            abandon,
            retry,
        } = self;
        let abandon =
            abandon.filter(|_| message.get("method").and_then(Value::as_str) != Some("initialize"));
        let (reply_tx, mut reply_rx) = oneshot::channel();
        let (events_tx, mut events_rx) = mcpulse_transport::queue::channel(EVENTS, worker.budget);
        let client_token = message
            .get("params")
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .cloned();
        let progressed = (client_token.is_some() && timer.as_ref().is_some_and(|t| t.extends()))
            .then(|| Arc::new(Notify::new()));
        let list_tools = message.get("method").and_then(Value::as_str) == Some("tools/list");
        let key = {
            let mut routes = lock(&worker.routes);
            if retry && routes.take_missed(&id) {
                // Cancelled between the attempts: not sent again.
                return Reply::Json(error(&id, CANCELLED, CANCELLED_BY_CLIENT), false);
            }
            routes.next += 1;
            let seq = routes.next;
            let key = format!("gw-{seq}");
            routes.sending(&id);
            routes.waiting.insert(
                key.clone(),
                Waiter {
                    id: id.clone(),
                    progress: client_token.is_some().then(|| Value::String(key.clone())),
                    client_token: client_token.clone(),
                    sse,
                    seq,
                    reply: reply_tx,
                    events: events_tx,
                    progressed: progressed.clone(),
                },
            );
            key
        };
        // Not armed before the line is sent: a request the child never got is not cancelled.
        let mut guard = WaitGuard {
            worker: worker.clone(),
            key: key.clone(),
            abandon: None,
        };
        // The child sees the gateway's key as the request's id and as its progress token.
        if client_token.is_some()
            && let Some(meta) = message
                .get_mut("params")
                .and_then(|p| p.get_mut("_meta"))
                .and_then(Value::as_object_mut)
        {
            meta.insert("progressToken".into(), Value::String(key.clone()));
        }
        message.insert("id".into(), Value::String(key));
        // A wedged child (its input full) blocks the send: it races the timer.
        // Written out and dropped before the wait: a waiting request holds its line only until
        // the child's writer takes it, not its decoded body (16 to 32 times its size) for as
        // long as the call runs.
        let line = line_of(&Value::Object(message));
        let sent = tokio::select! {
            biased;
            sent = async {
                match line {
                    Some(line) => worker.send_line(line).await,
                    None => false,
                }
            } => sent,
            () = expiry(timer.as_ref()) => {
                if let Some(t) = &timer {
                    return Reply::Json(time_out(&guard, &id, t).await, true);
                }
                false
            }
        };
        if !sent {
            drop(guard);
            return Reply::Json(
                error(
                    &id,
                    SESSION_ENDED,
                    "mcpulse gateway: the server's session has ended",
                ),
                false,
            );
        }
        guard.abandon = abandon;
        let health = health_tool.filter(|_| list_tools);
        // The events' sender goes with the waiter, as the reply is delivered: from then on
        // only the reply branch is live.
        let mut events_open = true;
        let late = keepalive.filter(|_| sse);
        let late_at = late.map(|k| Instant::now() + k);
        let turn = super::sleep_until_opt(late_at);
        tokio::pin!(turn);
        loop {
            let first = tokio::select! {
                biased;
                event = events_rx.recv_charged(), if events_open => match event {
                    Some(first) if sse => Frame::Charged(first),
                    // The client takes JSON only: what comes before the reply has no way to it.
                    Some(_) => continue,
                    None => {
                        events_open = false;
                        continue;
                    }
                },
                reply = &mut reply_rx => {
                    drop(guard);
                    let mut reply = reply.unwrap_or_else(|_| error(&id, SESSION_ENDED, "mcpulse gateway: the server's session ended before it answered"));
                    if let Some(name) = &health {
                        super::inject_reply(&mut reply, name);
                    }
                    return Reply::Json(reply, false);
                }
                () = progress(progressed.as_ref()) => {
                    if let Some(t) = &mut timer {
                        t.progressed();
                    }
                    continue;
                }
                () = expiry(timer.as_ref()) => {
                    if let Some(t) = &timer {
                        return Reply::Json(time_out(&guard, &id, t).await, true);
                    }
                    continue;
                }
                // The reply is late: the response turns into a stream now, its first bytes
                // a keep-alive comment, so that a proxy does not cut the wait.
                () = &mut turn => Frame::Free(Bytes::from_static(mcpulse_policy::keepalive::COMMENT)),
            };
            return Reply::Stream(Box::new(Stream {
                first,
                guard,
                events: events_rx,
                reply: reply_rx,
                id,
                health_tool: health,
                keepalive,
                timer,
                progressed,
            }));
        }
    }
}

impl Stream {
    /// The SSE response: the messages so far, the rest as they come, the reply last (then the
    /// stream ends). `finish` sees the reply (or the error standing for it) and whether it
    /// is the gateway's timeout result. While the stream has carried nothing but the gateway's
    /// keep-alive comments, a failed attempt is retried within it as `again` allows (the
    /// client saw nothing of the attempt), its keep-alives going on meanwhile.
    fn into_response(
        self,
        session: Option<&str>,
        finish: impl FnOnce(&Value, bool) + Send + 'static,
        mut again: Option<Again>,
    ) -> Response {
        // The waiter's queue (EVENTS) is the buffer; this hand-over to hyper holds a few.
        let (tx, rx) = mpsc::channel(HANDOVER);
        let Stream {
            first,
            mut guard,
            mut events,
            mut reply,
            id,
            mut health_tool,
            keepalive,
            mut timer,
            mut progressed,
        } = self;
        tokio::spawn(async move {
            // Whether the client has been sent anything of the server's (then no retry).
            let mut relayed = !first.is_keepalive();
            if tx.send(first).await.is_err() {
                return;
            }
            'attempts: loop {
                let mut events_open = true;
                // `None`: the timer expired.
                let got = loop {
                    tokio::select! {
                        biased;
                        // The client left (a quiet call would otherwise only notice at its
                        // reply): its slots and breaker trial are given back unjudged (dropping
                        // the permit in `finish`), as over an HTTP upstream. For a legacy client
                        // not a cancellation (the spec's rule for a disconnect): the child is not
                        // told, its late reply dropped; a 2026-07-28 client's closed stream is its
                        // cancellation: the guard, dropped, tells the child.
                        () = tx.closed() => return,
                        event = events.recv_charged(), if events_open => match event {
                            Some(frame) => {
                                let frame = Frame::Charged(frame);
                                relayed = true;
                                // A client that stops reading blocks this send: it races the
                                // timer, so the call still times out (the server told, the
                                // slots and the breaker trial given back) while the client stays.
                                let sent = tokio::select! {
                                    biased;
                                    sent = tx.send(frame) => Some(sent.is_ok()),
                                    () = expiry(timer.as_ref()) => None,
                                };
                                match sent {
                                    Some(true) => {}
                                    Some(false) => return,
                                    None => break None,
                                }
                            }
                            None => events_open = false,
                        },
                        r = &mut reply => break Some(r),
                        () = progress(progressed.as_ref()) => {
                            if let Some(t) = &mut timer {
                                t.progressed();
                            }
                        }
                        () = expiry(timer.as_ref()) => break None,
                    }
                };
                // This attempt's answer, and whether it is the gateway's timeout result.
                let (mut answer, mut timed_out) = match got {
                    None => match &timer {
                        Some(t) => (time_out(&guard, &id, t).await, true),
                        None => return,
                    },
                    Some(r) => {
                        drop(guard);
                        let mut r = r.unwrap_or_else(|_| {
                            error(
                                &id,
                                SESSION_ENDED,
                                "mcpulse gateway: the server's session ended before it answered",
                            )
                        });
                        if let Some(name) = &health_tool {
                            super::inject_reply(&mut r, name);
                        }
                        (r, false)
                    }
                };
                if !relayed && let Some(a) = again.as_mut() {
                    let mut attempt = Reply::Json(answer, timed_out);
                    loop {
                        let next = tokio::select! {
                            biased;
                            () = tx.closed() => return,
                            next = a.after(&attempt) => next,
                        };
                        match next {
                            None => break,
                            Some(Reply::Stream(s)) => {
                                // The next attempt streams too: this stream carries it.
                                let s = *s;
                                relayed = !s.first.is_keepalive();
                                if tx.send(s.first).await.is_err() {
                                    return;
                                }
                                guard = s.guard;
                                events = s.events;
                                reply = s.reply;
                                health_tool = s.health_tool;
                                timer = s.timer;
                                progressed = s.progressed;
                                continue 'attempts;
                            }
                            Some(json) => {
                                // Nothing of the earlier attempt is left to send.
                                events = mcpulse_transport::queue::channel(1, 1).1;
                                attempt = json;
                            }
                        }
                    }
                    let Reply::Json(v, t) = attempt else {
                        return;
                    };
                    (answer, timed_out) = (v, t);
                }
                // Judged and its slots freed before the last frames go out (a client that
                // does not read them holds nothing).
                finish(&answer, timed_out);
                // Everything the server sent before its reply is in `events` by now.
                while let Some(frame) = events.try_recv_charged() {
                    if tx.send(Frame::Charged(frame)).await.is_err() {
                        return;
                    }
                }
                let _ = tx
                    .send(Frame::Free(sse_frame(
                        &serde_json::to_vec(&answer).unwrap_or_default(),
                    )))
                    .await;
                return;
            }
        });
        sse_response(rx, session, keepalive)
    }
}

/// A message as the line a child reads (newline included); `None` if it cannot be written.
fn line_of(message: &Value) -> Option<Vec<u8>> {
    let mut line = serde_json::to_vec(message).ok()?;
    line.push(b'\n');
    Some(line)
}

/// A `text/event-stream` response fed by `rx`; it ends when every sender is gone.
pub(crate) fn sse_response<R: super::Frames>(
    rx: R,
    session: Option<&str>,
    keepalive: Option<Duration>,
) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        axum::http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    headers.insert(
        super::names::X_ACCEL_BUFFERING,
        HeaderValue::from_static("no"),
    );
    if let Some(sid) = session.and_then(|s| HeaderValue::from_str(s).ok()) {
        headers.insert("mcp-session-id", sid);
    }
    (
        StatusCode::OK,
        headers,
        axum::body::Body::new(super::ChannelBody::new(rx, keepalive)),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `n` has been notified (a stored permit), without waiting.
    fn woken(n: &Notify) -> bool {
        let notified = n.notified();
        let mut notified = std::pin::pin!(notified);
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        notified.as_mut().poll(&mut cx).is_ready()
    }

    /// A cancellation that comes after a failed attempt was answered and before its retry's
    /// backoff began (found in neither list) still stops the retry.
    #[test]
    fn a_cancellation_just_before_a_retrys_backoff_stops_it() {
        let mut routes = Routes::default();
        routes.cancel_between(json!(7));
        let cancelled = routes.back_off(&json!(7));
        assert!(woken(&cancelled), "the backoff begins cancelled");
        assert!(routes.missed.is_empty(), "used once");
        // Another call's backoff is not touched by it.
        let other = routes.back_off(&json!(8));
        assert!(!woken(&other));
        // During a backoff: that backoff is woken, and the cancellation remembered, for a
        // backoff whose sleep ended as it came (its wake-up seen by nobody): the next attempt
        // is stopped before it is sent, once.
        routes.cancel_between(json!(8));
        assert!(woken(&other));
        assert!(routes.take_missed(&json!(8)));
        assert!(!routes.take_missed(&json!(8)));
    }

    /// A cancellation of a request already answered does not cancel a later request that
    /// reuses its id, and the remembered ids are bounded.
    #[test]
    fn a_remembered_cancellation_is_forgotten_when_its_id_is_sent_again() {
        let mut routes = Routes::default();
        routes.cancel_between(json!("a"));
        routes.sending(&json!("a"));
        assert!(!woken(&routes.back_off(&json!("a"))));
        for i in 0..1000 {
            routes.cancel_between(json!(i));
        }
        assert_eq!(routes.missed.len(), MISSED_CANCELS);
        assert_eq!(routes.missed.back(), Some(&json!(999)));
    }

    /// A child's bare CR (JSON white space) would end the SSE line: sent as a space.
    #[test]
    fn a_bare_cr_in_a_childs_line_stays_inside_its_data() {
        let frame = sse_frame(b"{\"jsonrpc\":\"2.0\"\r\r,\"method\":\"x\"}");
        assert!(!frame.contains(&b'\r'));
        let mut d = mcpulse_wire::sse::Decoder::new(1024);
        let items = d.push(&frame);
        let [mcpulse_wire::sse::Item::Event(e)] = &items[..] else {
            panic!("{items:?}");
        };
        let v: Value = serde_json::from_str(&e.data).unwrap();
        assert_eq!(v["method"], "x");
    }

    #[test]
    fn only_the_supervisors_and_gateways_own_errors_are_gateway_errors() {
        let reply = |code: i64, message: &str| json!({"jsonrpc": "2.0", "id": 1, "error": {"code": code, "message": message}});
        let lost = "mcpulse supervise: the server exited with code 1 while this request was in flight; it is being restarted";
        assert_eq!(outcome(&reply(-32080, lost)), Outcome::GatewayError);
        assert_eq!(
            outcome(&reply(
                -32080,
                "mcpulse gateway: the server's session has ended"
            )),
            Outcome::GatewayError
        );
        // The server's own -32001 (the TypeScript SDK's timeout code) or -3208x: its answer.
        assert_eq!(
            outcome(&reply(-32001, "Request timed out")),
            Outcome::RpcError
        );
        assert_eq!(outcome(&reply(-32080, "upstream quota")), Outcome::RpcError);
        assert_eq!(outcome(&reply(-32602, lost)), Outcome::RpcError);
        assert_eq!(
            crate::policy::failure_of(outcome(&reply(-32001, "Request timed out"))),
            Some(mcpulse_policy::breaker::FailureKind::JsonRpcError)
        );
    }

    fn tally(states: &[ChildState]) -> ProcessState {
        let t = Tally::default();
        for (i, s) in states.iter().enumerate() {
            lock(&t.states).insert(i as u64, *s);
        }
        t.process()
    }

    #[test]
    fn the_upstream_is_up_while_any_child_runs() {
        use ChildState::*;
        assert_eq!(tally(&[]), ProcessState::Starting);
        assert_eq!(tally(&[Starting]), ProcessState::Starting);
        assert_eq!(tally(&[Fatal, Backoff, Running]), ProcessState::Up);
        assert_eq!(tally(&[Fatal, Busy]), ProcessState::Up);
        assert_eq!(tally(&[Fatal, Backoff]), ProcessState::Backoff);
        assert_eq!(tally(&[Fatal, Stopped]), ProcessState::Fatal);
        // Children start on demand: none left after one ran is not a failure.
        let t = Tally::default();
        lock(&t.states).insert(1, Running);
        assert_eq!(t.process(), ProcessState::Up);
        lock(&t.states).clear();
        assert_eq!(t.process(), ProcessState::Up);
    }
}
