//! The legacy HTTP+SSE transport (2024-11-05): `GET` an event stream, wait for the `endpoint`
//! event, `POST` messages to that URL, and read the replies off the stream.
//!
//! The stream is read by a task of its own that forwards events over a channel, so a POST and
//! the stream it answers on can proceed together. Dropping [`SseStream`] ends the task and
//! closes the stream.

use crate::Limits;
use crate::clock::Clock;
use crate::http::{self, Chunk, HttpClient, Outgoing};
use crate::streamable_http::{self, Tag, send_recorded, take_event};
use ::http::{Method, Uri};
use mcpulse_wire::sse;
use mcpulse_wire::transcript::{Exchange, Outcome, Step, TransportKind};
use mcpulse_wire::version::Era;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout_at};

enum Item {
    Event(sse::Event),
    TooLarge,
    End,
    Error(String),
}

/// An open legacy SSE stream and the endpoint to POST to.
pub struct SseStream {
    rx: mpsc::Receiver<Item>,
    task: JoinHandle<()>,
    pub endpoint: Uri,
    /// The origin of the URL the stream was opened at (the target's): credentials go to an
    /// endpoint only on that origin.
    target_origin: String,
    /// Events that arrived before anyone waited for them.
    backlog: Vec<sse::Event>,
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
    let (tx, rx) = mpsc::channel(64);
    let max = limits.max_response_bytes;
    let task = tokio::spawn(async move {
        let mut decoder = sse::Decoder::new(max);
        let far = Instant::now() + std::time::Duration::from_secs(24 * 3600);
        loop {
            let item = match http::next_chunk(&mut body, far).await {
                Chunk::Data(d) => {
                    for it in decoder.push(&d) {
                        let msg = match it {
                            sse::Item::Event(e) => Item::Event(e),
                            sse::Item::TooLarge { .. } => Item::TooLarge,
                        };
                        if tx.send(msg).await.is_err() {
                            return;
                        }
                    }
                    continue;
                }
                Chunk::End | Chunk::Timeout => Item::End,
                Chunk::Error(e) => Item::Error(e),
            };
            let _ = tx.send(item).await;
            return;
        }
    });
    let mut stream = SseStream {
        rx,
        task,
        endpoint: uri.clone(),
        target_origin: http::origin(uri),
        backlog: Vec::new(),
    };
    // Wait for `endpoint`; anything else before it is recorded.
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
                ex.outcome = Outcome::TransportError { message };
                break;
            }
            Ok(Some(Item::TooLarge)) => {
                ex.outcome = Outcome::TooLarge { limit: max };
                break;
            }
            Ok(Some(Item::Event(ev))) if ev.kind() == "endpoint" => {
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
                            message: format!("endpoint event names an invalid URL: {message}"),
                        };
                        break;
                    }
                }
            }
            Ok(Some(Item::Event(ev))) => {
                let _ = take_event(&mut ex, ev, None, clock);
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
    #[allow(clippy::too_many_arguments)]
    pub async fn exchange(
        &mut self,
        client: &mut HttpClient,
        step: Step,
        page: Option<u32>,
        id: Option<i64>,
        message: &Value,
        user_headers: &[(String, String)],
        limits: Limits,
        deadline: Instant,
    ) -> Exchange {
        let clock: Clock = client.clock();
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
            step,
            era: Some(Era::Legacy),
            page,
            id,
            message,
            headers: Vec::new(),
            user_headers,
        };
        let mut ex = streamable_http::post(client, post, limits, deadline).await;
        ex.transport = TransportKind::Sse;
        if matches!(ex.outcome, Outcome::Reply { .. }) || id.is_none() {
            // Some servers answer in the POST body; a notification needs nothing more.
            if id.is_none() && ex.status().is_some_and(|s| (200..300).contains(&s)) {
                ex.outcome = Outcome::Accepted;
            }
            return ex;
        }
        let accepted = ex.status().is_some_and(|s| (200..300).contains(&s));
        if !accepted {
            return ex; // the POST was refused: its status and body say why
        }
        // The reply comes on the stream.
        for ev in std::mem::take(&mut self.backlog) {
            if let Some(done) = take_event(&mut ex, ev, id, clock) {
                ex.outcome = done;
                ex.elapsed_ms = clock.since(started);
                return ex;
            }
        }
        loop {
            match timeout_at(deadline, self.rx.recv()).await {
                Err(_) => {
                    ex.outcome = Outcome::Timeout;
                    break;
                }
                Ok(None) | Ok(Some(Item::End)) => {
                    ex.outcome = Outcome::Closed;
                    break;
                }
                Ok(Some(Item::Error(message))) => {
                    ex.outcome = Outcome::TransportError { message };
                    break;
                }
                Ok(Some(Item::TooLarge)) => {
                    ex.outcome = Outcome::TooLarge {
                        limit: limits.max_response_bytes,
                    };
                    break;
                }
                Ok(Some(Item::Event(ev))) => {
                    if let Some(done) = take_event(&mut ex, ev, id, clock) {
                        ex.outcome = done;
                        break;
                    }
                }
            }
        }
        ex.elapsed_ms = clock.since(started);
        ex
    }
}
