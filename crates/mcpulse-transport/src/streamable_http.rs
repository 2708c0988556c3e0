//! One JSON-RPC message POSTed over Streamable HTTP, and whatever comes back: a JSON body, an
//! SSE stream (priming events, comments, progress and log notifications before the reply), a
//! `202`, an HTML page, a status code alone, a body that never ends.

use crate::http::{self, BodyEnd, Chunk, HttpClient, Outgoing, SendError};
use crate::{Call, Limits};
use ::http::Method;
use mcpulse_wire::jsonrpc::{self, Message};
use mcpulse_wire::sse;
use mcpulse_wire::transcript::{
    ErrorKind, Exchange, Frame, HttpResponse, Outcome, Request, Step, TransportKind,
};
use mcpulse_wire::version::Era;
use tokio::time::Instant;

/// What to POST.
pub struct Post<'a> {
    pub uri: &'a ::http::Uri,
    pub call: Call<'a>,
    /// Protocol headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Session-Id`, ...).
    pub headers: Vec<(String, String)>,
    pub user_headers: &'a [(String, String)],
}

/// A new exchange record for a request about to be sent.
pub fn start(
    step: Step,
    transport: TransportKind,
    era: Option<Era>,
    page: Option<u32>,
    id: Option<i64>,
    request: Request,
    at_ms: f64,
) -> Exchange {
    Exchange {
        step,
        transport,
        era,
        page,
        at_ms,
        id,
        request,
        redirects: Vec::new(),
        response: None,
        frames: Vec::new(),
        body: None,
        body_bytes: 0,
        outcome: Outcome::Closed,
        elapsed_ms: 0.0,
    }
}

/// Sends one message and records the exchange. Never fails: failures are outcomes.
pub async fn post(
    client: &mut HttpClient,
    p: Post<'_>,
    limits: Limits,
    deadline: Instant,
) -> Exchange {
    let mut headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        (
            "accept".to_owned(),
            "application/json, text/event-stream".to_owned(),
        ),
    ];
    headers.extend(p.headers);
    let out = Outgoing {
        method: Method::POST,
        uri: p.uri.clone(),
        headers,
        user_headers: p.user_headers,
        body: Some(p.call.message.to_string()),
    };
    let tag = Tag {
        step: p.call.step,
        transport: TransportKind::StreamableHttp,
        era: p.call.era,
        page: p.call.page,
        id: p.call.id,
    };
    let mut sent = send_recorded(client, &out, tag, true, deadline).await;
    if let Some(mut body) = sent.body.take() {
        let clock = sent.clock;
        read_reply(
            &mut sent.ex,
            &mut body,
            sent.is_sse,
            p.call.id,
            limits,
            deadline,
            clock,
        )
        .await;
    }
    sent.finish()
}

/// What an exchange is, for its record.
#[derive(Debug, Clone, Copy)]
pub struct Tag {
    pub step: Step,
    pub transport: TransportKind,
    pub era: Option<Era>,
    pub page: Option<u32>,
    pub id: Option<i64>,
}

impl Tag {
    /// A request that is not JSON-RPC (a metadata GET, a DELETE).
    pub fn plain(step: Step, transport: TransportKind) -> Tag {
        Tag {
            step,
            transport,
            era: None,
            page: None,
            id: None,
        }
    }
}

/// A request sent and recorded: the exchange so far (request, redirects, response head, or
/// the outcome of a failure) and the body still to read.
pub struct Sent {
    pub ex: Exchange,
    pub body: Option<hyper::body::Incoming>,
    pub is_sse: bool,
    clock: crate::clock::Clock,
    started: Instant,
}

impl Sent {
    /// The exchange, with its elapsed time.
    pub fn finish(mut self) -> Exchange {
        self.ex.elapsed_ms = self.clock.since(self.started);
        self.ex
    }
}

/// Records a request, sends it (following redirects), and records the response head; every
/// request of this module goes through here, so every exchange is recorded the same way.
pub async fn send_recorded(
    client: &mut HttpClient,
    out: &Outgoing<'_>,
    tag: Tag,
    pooled: bool,
    deadline: Instant,
) -> Sent {
    let clock = client.clock();
    let started = Instant::now();
    let request = Request {
        method: out.method.as_str().to_owned(),
        url: Some(mcpulse_wire::redact::url(&out.uri.to_string())),
        headers: out.recorded_headers(),
        body: out.body.clone(),
    };
    let mut ex = start(
        tag.step,
        tag.transport,
        tag.era,
        tag.page,
        tag.id,
        request,
        clock.at(),
    );
    let mut redirects = Vec::new();
    let result = client.send(out, pooled, deadline, &mut redirects).await;
    ex.redirects = redirects;
    match result {
        Err(e) => {
            ex.outcome = send_error_outcome(&e);
            Sent {
                ex,
                body: None,
                is_sse: false,
                clock,
                started,
            }
        }
        Ok(resp) => {
            ex.response = Some(HttpResponse {
                status: resp.status().as_u16(),
                headers: http::recorded_headers(&resp),
                ttfb_ms: clock.since(started),
            });
            let is_sse = content_type(&resp).starts_with("text/event-stream");
            Sent {
                ex,
                body: Some(resp.into_body()),
                is_sse,
                clock,
                started,
            }
        }
    }
}

/// Reads a small document body (metadata, an error page) into the exchange, up to `cap`.
async fn read_document(sent: &mut Sent, cap: usize, deadline: Instant) {
    let Some(mut body) = sent.body.take() else {
        return;
    };
    let (bytes, end) = http::read_body(&mut body, cap, deadline).await;
    sent.ex.body_bytes = bytes.len();
    sent.ex.body = Some(String::from_utf8_lossy(&bytes).into_owned());
    sent.ex.outcome = match end {
        BodyEnd::Complete => Outcome::Fetched,
        BodyEnd::TooLarge => Outcome::TooLarge { limit: cap },
        BodyEnd::Timeout => Outcome::Timeout,
        BodyEnd::Error(message) => Outcome::TransportError {
            cause: ErrorKind::Body,
            message,
        },
    };
}

/// The outcome for a request that got no response head.
pub fn send_error_outcome(e: &SendError) -> Outcome {
    match e {
        SendError::Timeout => Outcome::Timeout,
        other => Outcome::TransportError {
            cause: other.kind(),
            message: other.to_string(),
        },
    }
}

/// The media type of a response, lowercased, without parameters.
pub fn content_type<B>(resp: &::http::Response<B>) -> String {
    resp.headers()
        .get(::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// Reads a response body into the exchange: frames, the reply, or the body text.
pub async fn read_reply(
    ex: &mut Exchange,
    body: &mut hyper::body::Incoming,
    is_sse: bool,
    id: Option<i64>,
    limits: Limits,
    deadline: Instant,
    clock: crate::clock::Clock,
) {
    let status = ex.status().unwrap_or(0);
    if id.is_none() && (200..300).contains(&status) && !is_sse {
        // A notification: 202 and (normally) no body. Read what there is, briefly.
        let (bytes, _) = http::read_body(body, limits.max_response_bytes, deadline).await;
        ex.body_bytes = bytes.len();
        if !bytes.is_empty() {
            ex.body = Some(crate::snippet(&bytes));
        }
        ex.outcome = Outcome::Accepted;
        return;
    }
    if is_sse {
        read_sse_reply(ex, body, id, limits, deadline, clock).await;
        return;
    }
    let (bytes, end) = http::read_body(body, limits.max_response_bytes, deadline).await;
    ex.body_bytes = bytes.len();
    match end {
        BodyEnd::Complete => {}
        BodyEnd::TooLarge => {
            ex.body = Some(crate::snippet(&bytes));
            ex.outcome = Outcome::TooLarge {
                limit: limits.max_response_bytes,
            };
            return;
        }
        BodyEnd::Timeout => {
            ex.body = Some(crate::snippet(&bytes));
            ex.outcome = Outcome::Timeout;
            return;
        }
        BodyEnd::Error(message) => {
            ex.body = Some(crate::snippet(&bytes));
            ex.outcome = Outcome::TransportError {
                cause: ErrorKind::Body,
                message,
            };
            return;
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    match jsonrpc::peek(&text) {
        Ok(d) => {
            ex.frames.push(Frame {
                at_ms: clock.at(),
                raw: text.into_owned(),
                sse_event: None,
            });
            ex.outcome = match (id, d.message.response_id()) {
                (Some(sent), Some(got)) if got.matches(sent) => Outcome::Reply { frame: 0 },
                _ => Outcome::NoReply,
            };
        }
        Err(_) => {
            if !bytes.is_empty() {
                ex.body = Some(crate::snippet(&bytes));
            }
            ex.outcome = if id.is_none() && (200..300).contains(&status) {
                Outcome::Accepted
            } else {
                Outcome::NoReply
            };
        }
    }
}

async fn read_sse_reply(
    ex: &mut Exchange,
    body: &mut hyper::body::Incoming,
    id: Option<i64>,
    limits: Limits,
    deadline: Instant,
    clock: crate::clock::Clock,
) {
    let mut decoder = sse::Decoder::new(limits.max_response_bytes);
    let mut total = 0usize;
    // The bytes read, and crate::FRAME_COST for each event kept.
    let mut charged = 0usize;
    loop {
        match http::next_chunk(body, deadline).await {
            Chunk::Data(d) => {
                total += d.len();
                charged = charged.saturating_add(d.len());
                ex.body_bytes = total;
                for item in decoder.push(&d) {
                    match item {
                        sse::Item::TooLarge { .. } => {
                            ex.outcome = Outcome::TooLarge {
                                limit: limits.max_response_bytes,
                            };
                            return;
                        }
                        sse::Item::Event(ev) => {
                            charged = charged.saturating_add(crate::FRAME_COST);
                            if let Some(done) = take_event(ex, ev, id, clock.at()) {
                                ex.outcome = done;
                                return;
                            }
                        }
                    }
                }
                if charged > limits.max_response_bytes {
                    ex.outcome = Outcome::TooLarge {
                        limit: limits.max_response_bytes,
                    };
                    return;
                }
            }
            Chunk::End => {
                ex.outcome = if id.is_none() {
                    Outcome::Accepted
                } else {
                    Outcome::Closed
                };
                return;
            }
            Chunk::Timeout => {
                ex.outcome = Outcome::Timeout;
                return;
            }
            Chunk::Error(message) => {
                ex.outcome = Outcome::TransportError {
                    cause: ErrorKind::Body,
                    message,
                };
                return;
            }
        }
    }
}

/// Records one SSE event (arrived at `at_ms` on the probe's clock); returns the outcome when it
/// is the reply we wait for.
pub fn take_event(
    ex: &mut Exchange,
    ev: sse::Event,
    id: Option<i64>,
    at_ms: f64,
) -> Option<Outcome> {
    if ev.data.is_empty() {
        return None; // priming event (2025-11-25) or an empty keep-alive
    }
    let kind = ev.event.clone();
    let decoded = jsonrpc::peek(&ev.data);
    ex.frames.push(Frame {
        at_ms,
        raw: ev.data,
        sse_event: kind,
    });
    let frame = ex.frames.len() - 1;
    match (decoded, id) {
        (Ok(d), Some(sent)) => match d.message {
            Message::Result { id: ref got, .. } | Message::Error { id: ref got, .. }
                if got.matches(sent) =>
            {
                Some(Outcome::Reply { frame })
            }
            _ => None,
        },
        _ => None,
    }
}

/// GETs a small JSON document (protected-resource metadata) without the user's credentials.
pub async fn get_document(
    client: &mut HttpClient,
    uri: &::http::Uri,
    step: Step,
    limits: Limits,
    deadline: Instant,
) -> Exchange {
    let out = Outgoing {
        method: Method::GET,
        uri: uri.clone(),
        headers: vec![("accept".into(), "application/json".into())],
        user_headers: &[],
        body: None,
    };
    let mut sent = send_recorded(
        client,
        &out,
        Tag::plain(step, TransportKind::StreamableHttp),
        false,
        deadline,
    )
    .await;
    read_document(
        &mut sent,
        limits.max_response_bytes.min(DOCUMENT_CAP),
        deadline,
    )
    .await;
    sent.finish()
}

/// The most bytes of a metadata document kept.
pub const DOCUMENT_CAP: usize = 64 * 1024;

/// Ends a legacy Streamable HTTP session with `DELETE` (a `405` is an acceptable answer).
pub async fn delete_session(
    client: &mut HttpClient,
    uri: &::http::Uri,
    headers: Vec<(String, String)>,
    user_headers: &[(String, String)],
    deadline: Instant,
) -> Exchange {
    let out = Outgoing {
        method: Method::DELETE,
        uri: uri.clone(),
        headers,
        user_headers,
        body: None,
    };
    let mut sent = send_recorded(
        client,
        &out,
        Tag::plain(Step::SessionDelete, TransportKind::StreamableHttp),
        true,
        deadline,
    )
    .await;
    if sent.body.is_some() {
        read_document(&mut sent, crate::BODY_SNIPPET, deadline).await;
        if sent.ex.body.as_deref() == Some("") {
            sent.ex.body = None;
        }
        sent.ex.outcome = Outcome::Fetched;
    }
    sent.finish()
}

/// Sends a prepared request (a malformed body, on purpose) and records the response and up to
/// [`DOCUMENT_CAP`] bytes of its body.
pub async fn send_raw(
    client: &mut HttpClient,
    out: &Outgoing<'_>,
    step: Step,
    limits: Limits,
    deadline: Instant,
) -> Exchange {
    let mut sent = send_recorded(
        client,
        out,
        Tag::plain(step, TransportKind::StreamableHttp),
        true,
        deadline,
    )
    .await;
    read_document(
        &mut sent,
        limits.max_response_bytes.min(DOCUMENT_CAP),
        deadline,
    )
    .await;
    sent.finish()
}
