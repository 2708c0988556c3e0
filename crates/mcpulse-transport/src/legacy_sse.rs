//! The legacy HTTP+SSE transport (2024-11-05): `GET` an event stream, wait for the `endpoint`
//! event, `POST` messages to that URL, and read the replies off the stream.
//!
//! The stream is read by a task of its own that forwards events over a channel, so a POST and
//! the stream it answers on can proceed together. Dropping [`SseStream`] ends the task and
//! closes the stream.

use crate::clock::Clock;
use crate::http::{self, Chunk, HttpClient, Outgoing};
use crate::streamable_http::{self, Tag, send_recorded, take_event};
use crate::{Call, Limits};
use ::http::{Method, Uri};
use mcpulse_wire::jsonrpc::{Id, Message};
use mcpulse_wire::sse;
use mcpulse_wire::transcript::{ErrorKind, Exchange, Outcome, Step, TransportKind};
use mcpulse_wire::version::Era;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout_at};

enum Item {
    /// An event and when it arrived (the probe's clock), so that a reply collected after
    /// another one of a pipeline is still timed to its arrival.
    Event(sse::Event, f64),
    /// An event over the cap, dropped: the request it answered (when its data said so), and
    /// when it arrived.
    TooLarge(Option<Id>, f64),
    End,
    Error(String),
}

/// How long a reply still awaited gets once an event over the cap went to another request of a
/// pipeline (it may have been this one's).
const LOST_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// An open legacy SSE stream and the endpoint to POST to.
pub struct SseStream {
    rx: crate::queue::Receiver<Item>,
    task: JoinHandle<()>,
    pub endpoint: Uri,
    /// The origin of the URL the stream was opened at (the target's): credentials go to an
    /// endpoint only on that origin.
    target_origin: String,
    /// The ids of the requests POSTed whose replies are still to come on the stream.
    in_flight: Vec<i64>,
    /// Replies to requests in flight that arrived while another reply was awaited, with their
    /// arrival times: each is kept for its own [`SseStream::receive`].
    stash: Vec<(i64, Stashed, f64)>,
    /// An event over the size cap arrived while several requests were in flight: whose reply it
    /// was cannot be told (see [`Lost`]).
    lost: Option<Lost>,
}

/// The requests an event over the cap may have answered (those awaited when it came): each
/// still gets its reply if one turns up within [`LOST_GRACE`]; one that does not ends with
/// `why`, not at the probe's deadline.
struct Lost {
    ids: Vec<i64>,
    why: String,
}

/// What came for a request in flight while another reply was awaited.
enum Stashed {
    Reply(sse::Event),
    /// Its reply, over the cap, was dropped.
    TooLarge,
}

/// A message POSTed by [`SseStream::send`], whose reply [`SseStream::receive`] collects.
pub struct Sent {
    ex: Exchange,
    started: Instant,
    /// The id of the reply to wait for on the stream (none when the POST already settled it:
    /// a notification, a refusal, a reply in the POST's own body).
    awaiting: Option<i64>,
}

impl Drop for SseStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Opens the stream and waits for the `endpoint` event.
pub async fn open(
    client: &mut HttpClient,
    uri: &Uri,
    user_headers: &[(String, String)],
    limits: Limits,
    deadline: Instant,
) -> (Exchange, Option<SseStream>) {
    let clock = client.clock();
    let started = Instant::now();
    let out = Outgoing {
        method: Method::GET,
        uri: uri.clone(),
        headers: vec![
            ("accept".into(), "text/event-stream".into()),
            ("cache-control".into(), "no-cache".into()),
        ],
        user_headers,
        body: None,
    };
    let tag = Tag {
        step: Step::SseOpen,
        transport: TransportKind::Sse,
        era: Some(Era::Legacy),
        page: None,
        id: None,
    };
    let mut sent = send_recorded(client, &out, tag, false, deadline).await;
    let Some(mut body) = sent.body.take() else {
        return (sent.finish(), None);
    };
    let ok = sent.ex.status().is_some_and(|s| (200..300).contains(&s)) && sent.is_sse;
    if !ok {
        // Not an event stream: keep what it said, for the judge and the person.
        let cap = limits.max_response_bytes.min(64 * 1024);
        let (bytes, _) = http::read_body(&mut body, cap, deadline).await;
        sent.ex.body_bytes = bytes.len();
        if !bytes.is_empty() {
            sent.ex.body = Some(crate::snippet(&bytes));
        }
        sent.ex.outcome = Outcome::NoReply;
        return (sent.finish(), None);
    }
    let mut ex = sent.ex;
    // Events wait for the probe within one response cap of bytes (crate::queue).
    let (tx, rx) = crate::queue::channel(64, limits.max_response_bytes);
    let max = limits.max_response_bytes;
    let task = tokio::spawn(async move {
        let mut decoder = sse::Decoder::new(max);
        let far = Instant::now() + std::time::Duration::from_secs(24 * 3600);
        loop {
            let item = match http::next_chunk(&mut body, far).await {
                Chunk::Data(d) => {
                    // Stamped when read off the connection, not when the channel takes it (a
                    // full channel holds the reader back while a pipeline is being sent).
                    let at = clock.at();
                    for it in decoder.push(&d) {
                        let msg = match it {
                            sse::Item::Event(e) => Item::Event(e, at),
                            sse::Item::TooLarge { reply_to, .. } => Item::TooLarge(reply_to, at),
                        };
                        let size = match &msg {
                            Item::Event(e, _) => event_size(e),
                            _ => 0,
                        };
                        if tx.send(msg, size).await.is_err() {
                            return;
                        }
                    }
                    continue;
                }
                Chunk::End | Chunk::Timeout => Item::End,
                Chunk::Error(e) => Item::Error(e),
            };
            let _ = tx.send(item, 0).await;
            return;
        }
    });
    let mut stream = SseStream {
        rx,
        task,
        endpoint: uri.clone(),
        target_origin: http::origin(uri),
        in_flight: Vec::new(),
        stash: Vec::new(),
        lost: None,
    };
    // Wait for `endpoint`; anything else before it is recorded, up to the response cap.
    let mut taken = 0usize;
    loop {
        match timeout_at(deadline, stream.rx.recv()).await {
            Err(_) => {
                ex.outcome = Outcome::Timeout;
                break;
            }
            Ok(None) | Ok(Some(Item::End)) => {
                ex.outcome = Outcome::Closed;
                break;
            }
            Ok(Some(Item::Error(message))) => {
                ex.outcome = Outcome::TransportError {
                    cause: ErrorKind::Body,
                    message,
                };
                break;
            }
            Ok(Some(Item::TooLarge(..))) => {
                ex.outcome = Outcome::TooLarge { limit: max };
                break;
            }
            Ok(Some(Item::Event(ev, _))) if ev.kind() == "endpoint" => {
                match http::resolve(uri, &ev.data) {
                    Ok(endpoint) => {
                        ex.outcome = Outcome::Endpoint {
                            url: mcpulse_wire::redact::url(&endpoint.to_string()),
                        };
                        stream.endpoint = endpoint;
                        ex.elapsed_ms = clock.since(started);
                        return (ex, Some(stream));
                    }
                    Err(message) => {
                        ex.outcome = Outcome::TransportError {
                            cause: ErrorKind::InvalidRequest,
                            message: format!("endpoint event names an invalid URL: {message}"),
                        };
                        break;
                    }
                }
            }
            Ok(Some(Item::Event(ev, at_ms))) => {
                taken = taken.saturating_add(event_size(&ev) + crate::FRAME_COST);
                if taken > max {
                    ex.outcome = Outcome::TooLarge { limit: max };
                    break;
                }
                let _ = take_event(&mut ex, ev, None, at_ms);
            }
        }
    }
    ex.elapsed_ms = clock.since(started);
    (ex, None)
}

impl SseStream {
    /// Whether the stream is still open (its reader has not seen it end): the session lives
    /// only as long as it does.
    pub fn is_open(&self) -> bool {
        !self.task.is_finished()
    }

    /// POSTs one message to the endpoint and, for a request, waits for its reply on the stream.
    pub async fn exchange(
        &mut self,
        client: &mut HttpClient,
        call: Call<'_>,
        user_headers: &[(String, String)],
        limits: Limits,
        deadline: Instant,
    ) -> Exchange {
        let sent = self
            .send(client, call, user_headers, limits, deadline)
            .await;
        self.receive(sent, client.clock(), limits, deadline).await
    }

    /// POSTs one message without waiting for its reply on the stream: several requests can be
    /// in flight at once (JSON-RPC matches replies by id), and [`SseStream::receive`] collects
    /// each one. The POSTs themselves go one after another on the kept-alive connection, so the
    /// server receives the messages in the order sent. Every message is of the legacy era.
    pub async fn send(
        &mut self,
        client: &mut HttpClient,
        call: Call<'_>,
        user_headers: &[(String, String)],
        limits: Limits,
        deadline: Instant,
    ) -> Sent {
        let started = Instant::now();
        let endpoint = self.endpoint.clone();
        // An `endpoint` event may name any URL; the user's credentials are for the target
        // only, as they are dropped when a redirect leaves its origin.
        let user_headers = if http::origin(&endpoint) == self.target_origin {
            user_headers
        } else {
            &[]
        };
        let post = streamable_http::Post {
            uri: &endpoint,
            call: Call {
                era: Some(Era::Legacy),
                ..call
            },
            headers: Vec::new(),
            user_headers,
        };
        let mut ex = streamable_http::post(client, post, limits, deadline).await;
        ex.transport = TransportKind::Sse;
        let accepted = ex.status().is_some_and(|s| (200..300).contains(&s));
        let awaiting = match call.id {
            // Some servers answer in the POST body; a refused POST's status and body say why.
            Some(id) if accepted && !matches!(ex.outcome, Outcome::Reply { .. }) => {
                self.in_flight.push(id);
                Some(id)
            }
            Some(_) => None,
            None => {
                // A notification needs nothing more.
                if accepted {
                    ex.outcome = Outcome::Accepted;
                }
                None
            }
        };
        Sent {
            ex,
            started,
            awaiting,
        }
    }

    /// Waits on the stream for the reply to a message POSTed by [`SseStream::send`] (nothing,
    /// when the POST settled it) and returns the finished exchange. Other events that arrive
    /// meanwhile (notifications, server requests) are recorded in it; a reply to another
    /// request in flight is kept for that request's `receive`.
    pub async fn receive(
        &mut self,
        sent: Sent,
        clock: Clock,
        limits: Limits,
        deadline: Instant,
    ) -> Exchange {
        let Sent {
            ex,
            started,
            awaiting,
        } = sent;
        // Settled by the POST (a reply in its body, a refusal, a notification): its time is
        // the POST's own.
        let Some(id) = awaiting else {
            return ex;
        };
        self.in_flight.retain(|&i| i != id);
        let ex = self
            .wait_for(ex, id, started, clock, limits, deadline)
            .await;
        if let Some(lost) = &mut self.lost {
            lost.ids.retain(|&i| i != id);
            if lost.ids.is_empty() {
                self.lost = None;
            }
        }
        ex
    }

    /// The body of [`SseStream::receive`] for request `id` (no longer in `in_flight`).
    async fn wait_for(
        &mut self,
        mut ex: Exchange,
        id: i64,
        started: Instant,
        clock: Clock,
        limits: Limits,
        deadline: Instant,
    ) -> Exchange {
        if let Some(pos) = self.stash.iter().position(|(i, _, _)| *i == id) {
            let (_, stashed, at_ms) = self.stash.remove(pos);
            let done = match stashed {
                Stashed::Reply(ev) => take_event(&mut ex, ev, Some(id), at_ms),
                Stashed::TooLarge => Some(Outcome::TooLarge {
                    limit: limits.max_response_bytes,
                }),
            };
            if let Some(done) = done {
                ex.outcome = done;
                ex.elapsed_ms = crate::clock::between(ex.at_ms, at_ms);
                return ex;
            }
        }
        // A request an event over the cap may have answered gets a moment for its reply to
        // turn up, not the rest of the probe's time.
        let grace = |deadline: Instant| deadline.min(Instant::now() + LOST_GRACE);
        let suspect = |lost: &Option<Lost>| lost.as_ref().is_some_and(|l| l.ids.contains(&id));
        let mut wait_until = if suspect(&self.lost) {
            grace(deadline)
        } else {
            deadline
        };
        // What this exchange takes in while it waits (the events recorded in it) counts against
        // the response cap: a stream is endless, one reply is not. The first reply kept for
        // each other request in flight is not counted here (each is within the cap).
        let mut taken = 0usize;
        loop {
            match timeout_at(wait_until, self.rx.recv()).await {
                Err(_) => {
                    ex.outcome = match &self.lost {
                        Some(lost) if lost.ids.contains(&id) && Instant::now() < deadline => {
                            Outcome::TransportError {
                                cause: ErrorKind::LostReply,
                                message: lost.why.clone(),
                            }
                        }
                        _ => Outcome::Timeout,
                    };
                    break;
                }
                Ok(None) | Ok(Some(Item::End)) => {
                    ex.outcome = Outcome::Closed;
                    break;
                }
                Ok(Some(Item::Error(message))) => {
                    ex.outcome = Outcome::TransportError {
                        cause: ErrorKind::Body,
                        message,
                    };
                    break;
                }
                // Its data said whose reply it was.
                Ok(Some(Item::TooLarge(Some(got), at_ms))) => {
                    if got.matches(id) {
                        ex.outcome = Outcome::TooLarge {
                            limit: limits.max_response_bytes,
                        };
                        ex.elapsed_ms = crate::clock::between(ex.at_ms, at_ms);
                        return ex;
                    }
                    if let Some(other) = self.in_flight.iter().copied().find(|&i| got.matches(i))
                        && !self.stash.iter().any(|(i, _, _)| *i == other)
                    {
                        self.stash.push((other, Stashed::TooLarge, at_ms));
                    }
                    // Otherwise a reply to nothing awaited (a repeat, a stranger's id): not this
                    // exchange's, and already dropped.
                }
                Ok(Some(Item::TooLarge(None, _)))
                    if self.in_flight.is_empty() && !suspect(&self.lost) =>
                {
                    // Only this request was awaited: the event was its reply.
                    ex.outcome = Outcome::TooLarge {
                        limit: limits.max_response_bytes,
                    };
                    break;
                }
                Ok(Some(Item::TooLarge(None, _))) => {
                    // It may have answered any of the requests awaited now, this one included.
                    let mut ids = self.in_flight.clone();
                    ids.push(id);
                    let why = format!(
                        "no reply; an event over the {}-byte cap arrived while several requests were in flight on the stream, and which one it answered cannot be told",
                        limits.max_response_bytes
                    );
                    match &mut self.lost {
                        Some(lost) => {
                            ids.retain(|i| !lost.ids.contains(i));
                            lost.ids.extend(ids);
                        }
                        None => self.lost = Some(Lost { ids, why }),
                    }
                    wait_until = grace(deadline);
                }
                Ok(Some(Item::Event(ev, at_ms))) => {
                    if let Some(other) = reply_to(&ev, &self.in_flight)
                        && !self.stash.iter().any(|(i, _, _)| *i == other)
                    {
                        self.stash.push((other, Stashed::Reply(ev), at_ms));
                        continue;
                    }
                    // Anything else, a repeated reply to another request included, is this
                    // exchange's to take in.
                    taken = taken.saturating_add(event_size(&ev) + crate::FRAME_COST);
                    if taken > limits.max_response_bytes {
                        ex.outcome = Outcome::TooLarge {
                            limit: limits.max_response_bytes,
                        };
                        break;
                    }
                    if let Some(done) = take_event(&mut ex, ev, Some(id), at_ms) {
                        ex.outcome = done;
                        // From the POST to the reply's arrival, not to this call: a reply may
                        // wait in the channel while an earlier one of a pipeline is collected.
                        ex.elapsed_ms = crate::clock::between(ex.at_ms, at_ms);
                        return ex;
                    }
                }
            }
        }
        ex.elapsed_ms = clock.since(started);
        ex
    }
}

/// The bytes an event holds: its data, and its name and id (each may be as long as the cap, and
/// the transcript keeps the name).
fn event_size(e: &sse::Event) -> usize {
    e.data.len() + e.event.as_ref().map_or(0, String::len) + e.id.as_ref().map_or(0, String::len)
}

/// The request in flight (of `in_flight`) that an event is the reply to, if any.
fn reply_to(ev: &sse::Event, in_flight: &[i64]) -> Option<i64> {
    if in_flight.is_empty() || ev.data.is_empty() {
        return None;
    }
    match mcpulse_wire::jsonrpc::peek(&ev.data).ok()?.message {
        Message::Result { id, .. } | Message::Error { id, .. } => {
            in_flight.iter().copied().find(|&i| id.matches(i))
        }
        _ => None,
    }
}
