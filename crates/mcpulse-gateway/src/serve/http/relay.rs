//! The upstream's answer, relayed to the client; and the answers the gateway gives itself.
//!
//! - A JSON (or empty) body is one message: it is read whole, up to `max_message_size`, then
//!   sent on (with the health tool added to a `tools/list` result).
//! - An SSE stream is relayed event by event as it arrives: a task reads the upstream body,
//!   decodes it (`mcpulse_wire::sse`, capped at `max_message_size` per event) and hands each
//!   event to the client's body through a channel of [`STREAM_BUFFER`] events. When the client
//!   reads slowly the channel fills, the task stops reading, and TCP pushes back on the
//!   upstream: a stream holds at most the decoder's event in progress plus the buffered events,
//!   each at most `max_message_size`, never the whole stream.
//! - When the stream breaks (the upstream died, an event over the cap) before the reply to the
//!   POSTed request, or the reply is not there by `reply_timeout`, the client gets a JSON-RPC
//!   error for that request's id as a last event.
//! - When the client goes away, the upstream stream is closed at once, even a quiet one.
//! - A 5xx from the upstream becomes a 502 with a JSON-RPC error naming the upstream and what
//!   it said. It does not mark the upstream down: it answered, so it is reachable, and other
//!   clients' requests still go through.
//!
//! Events are re-framed (`id`, `event`, `retry`, `data`); SSE comments (keep-alives) are not
//! relayed: the client's body ([`crate::serve::ChannelBody`]) writes the gateway's own, on its
//! own cadence, so an upstream's comments can neither double it nor stand in for it.

use super::link::Link;
use super::{Call, FORWARDED_RESPONSE_HEADERS, HttpUpstream, Record, Target};
use crate::metrics::Outcome;
use crate::state::Shared;
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use mcpulse_relay::supervise::envelope::{Envelope, Kind, canonical_id};
use mcpulse_transport::http::{BodyEnd, read_body};
use mcpulse_wire::sse::{Decoder, Event, Item};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Events buffered between the upstream stream and a client that reads slowly.
pub const STREAM_BUFFER: usize = 4;
/// The JSON-RPC error codes of the gateway's own answers (docs/gateway.md `## HTTP upstream`).
/// The supervisor's codes where the meaning is the same, so that a client handles the gateway
/// and `mcpulse supervise` alike.
pub mod codes {
    pub use mcpulse_relay::supervise::codes::{
        MESSAGE_TOO_LARGE, REQUEST_TIMEOUT, SERVER_RESTARTED,
    };
    /// The upstream could not be reached, is down (reconnecting), answered 5xx or redirected
    /// (JSON-RPC's generic server error; the TypeScript SDK's `ConnectionClosed`).
    pub const UPSTREAM_UNAVAILABLE: i64 = -32000;
    /// The request could not be read or relayed as sent (JSON-RPC's Invalid Request).
    pub const INVALID_REQUEST: i64 = -32600;
    /// JSON-RPC's own: the body is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
}
/// How much of a 5xx body is quoted in the error.
const SNIPPET_BYTES: usize = 512;
/// How long a 5xx body is read for its quote.
const SNIPPET_WAIT: Duration = Duration::from_secs(1);
/// A wait without a deadline (a GET's answer; the client's disconnect cancels it).
const NO_DEADLINE: Duration = Duration::from_secs(365 * 24 * 3600);

/// One request in flight: what the answer is checked against.
pub struct Exchange<'a> {
    pub upstream: &'a HttpUpstream,
    pub target: &'a Target,
    /// The client's request headers (a cancellation carries its session and credentials).
    pub request: &'a http::HeaderMap,
    pub call: Call,
    pub started: Instant,
    /// When the reply is due: the tool's timeout or the reply timeout, whichever is first;
    /// `None` for a GET.
    pub deadline: Option<Instant>,
    /// When the reply timeout (`reply_timeout` after this attempt was sent) runs out.
    pub reply_due: Instant,
}

impl Exchange<'_> {
    /// The gateway's own `502` for this request, naming the upstream.
    fn refuse(&self, code: i64, message: &str) -> Response {
        self.call.refuse(
            self.upstream,
            self.started,
            StatusCode::BAD_GATEWAY,
            code,
            message,
            Some(&self.target.label),
        )
    }
}

/// Relays the upstream's response.
pub async fn respond(
    mut x: Exchange<'_>,
    resp: hyper::Response<Incoming>,
    sender: SendRequest<Full<Bytes>>,
) -> Response {
    let (parts, mut body) = resp.into_parts();
    let status = parts.status;
    // Any HTTP answer, a 5xx too, proves the upstream reachable: one 502/503/504 (a busy
    // worker, a proxy's hiccup) must not take the upstream out for every other client. Only
    // a failed connect marks it down (see super::link).
    x.target.link.answered();
    if status.is_server_error() {
        let (bytes, _) = read_body(&mut body, SNIPPET_BYTES, Instant::now() + SNIPPET_WAIT).await;
        let said = String::from_utf8_lossy(&bytes);
        let said = mcpulse_wire::text::inert(said.trim(), 200);
        let cause = if said.is_empty() {
            format!("answered HTTP {}", status.as_u16())
        } else {
            format!("answered HTTP {}: {said}", status.as_u16())
        };
        let message = format!("upstream {} {cause}", x.target.label);
        return x.refuse(codes::UPSTREAM_UNAVAILABLE, &message);
    }
    if status.is_redirection() {
        // Not followed (the client would be sent to the upstream's own address, past the
        // gateway), not relayed: the configured URL is wrong, and the answer says where to.
        let to = parts.headers.get(http::header::LOCATION).map(|l| {
            mcpulse_wire::redact::target_url(
                &String::from_utf8_lossy(l.as_bytes()),
                &x.upstream.settings.secrets,
            )
        });
        let to = to.as_deref().map_or("", |l| l);
        let message = format!(
            "upstream {} redirects (HTTP {}) to {}; the gateway does not follow redirects: configure the URL it points to",
            x.target.label,
            status.as_u16(),
            mcpulse_wire::text::field(to)
        );
        return x.refuse(codes::UPSTREAM_UNAVAILABLE, &message);
    }
    let sse = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        // Media types are case-insensitive (RFC 9110 §8.3.1): `Text/Event-Stream` is SSE too.
        .is_some_and(|v| {
            v.trim_start()
                .get(..17)
                .is_some_and(|t| t.eq_ignore_ascii_case("text/event-stream"))
        });
    // The answer's status and forwarded headers, one pass over the upstream's headers; the
    // body is set once known (`answer`).
    let mut head = http::HeaderMap::new();
    for (name, value) in &parts.headers {
        if FORWARDED_RESPONSE_HEADERS.contains(name) {
            head.append(name.clone(), value.clone());
        }
    }
    if sse {
        // As over stdio: a reverse proxy in front (nginx) must not buffer the stream.
        head.insert(
            super::names::X_ACCEL_BUFFERING,
            http::HeaderValue::from_static("no"),
        );
    }
    let answer = move |body: Body| {
        let mut out = Response::new(body);
        *out.status_mut() = status;
        *out.headers_mut() = head;
        out
    };
    if sse {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let stream = Stream {
            link: x.target.link.clone(),
            label: x.target.label.clone(),
            max: x.upstream.settings.max_message_size,
            health_tool: x.upstream.settings.health_tool.clone(),
            tx,
            shared: x.upstream.shared.clone(),
            deadline: x.deadline,
            reply_due: x.reply_due,
            timed_out: x.upstream.timed_out(),
            stalled: x.upstream.settings.stalled_client,
        };
        let tool_timer = x
            .call
            .timer
            .clone()
            .filter(|_| x.call.tool_timed_out(x.reply_due));
        let pending = Pending {
            inflight: x.call.inflight.take(),
            key: x.call.key.clone(),
            id: x.call.id.clone(),
            tools_list: x.call.method == Some("tools/list"),
            record: Record::new(x.upstream, &x.call, x.started),
            progress: x.call.progress.clone().filter(|_| tool_timer.is_some()),
            tool_timer,
            cancel: x.upstream.cancel_for(x.target, x.request, &x.call),
        };
        tokio::spawn(stream.run(body, sender, pending));
        let body = crate::serve::ChannelBody::new(rx, x.upstream.settings.keepalive);
        return answer(Body::new(body));
    }
    let max = x.upstream.settings.max_message_size;
    let deadline = x.deadline.unwrap_or_else(|| Instant::now() + NO_DEADLINE);
    let cancel = x.call.inflight.as_ref().map(|i| &*i.cancelled);
    let Some((bytes, end)) =
        super::unless_cancelled(cancel, read_body(&mut body, max, deadline)).await
    else {
        // The client's cancellation was relayed to the upstream; this answer is not waited for.
        return x.call.cancelled(x.upstream, x.started);
    };
    let failure = match end {
        BodyEnd::Complete => None,
        BodyEnd::TooLarge => Some((
            codes::MESSAGE_TOO_LARGE,
            format!("its reply is larger than the gateway's max_message_size ({max} bytes)"),
        )),
        BodyEnd::Timeout if x.call.tool_timed_out(x.reply_due) => {
            // Returning drops the body and the connection: the upstream sees its stream closed
            // (a 2026-07-28 upstream's cancellation; a legacy one is told, super::Cancel).
            x.upstream
                .cancel(x.target, x.request, &x.call, super::TOOL_TIMEOUT_REASON);
            return x.call.time_out(x.upstream, x.started);
        }
        BodyEnd::Timeout => {
            x.upstream
                .cancel(x.target, x.request, &x.call, super::REPLY_TIMEOUT_REASON);
            Some((codes::REQUEST_TIMEOUT, x.upstream.timed_out()))
        }
        BodyEnd::Error(e) => Some((
            codes::SERVER_RESTARTED,
            format!("the connection broke during its reply: {e}"),
        )),
    };
    if let Some((code, cause)) = failure {
        let message = format!("upstream {} failed: {cause}", x.target.label);
        if code == codes::REQUEST_TIMEOUT {
            return x.call.refuse(
                x.upstream,
                x.started,
                StatusCode::GATEWAY_TIMEOUT,
                code,
                &message,
                Some(&x.target.label),
            );
        }
        return x.refuse(code, &message);
    }
    x.target.link.release(sender);
    let mut bytes = Bytes::from(bytes);
    if status == StatusCode::NOT_FOUND && x.request.contains_key(super::names::MCP_SESSION_ID) {
        // The upstream does not know the session (expired, or the upstream restarted): the
        // client must initialize again. Nothing the tool did: relayed, its permit handed back
        // unjudged, and not counted, as the stdio upstream's own 404.
        x.call.forget();
        return answer(Body::from(bytes));
    }
    if x.call.key.is_some() {
        let reply = Envelope::parse(&bytes);
        let outcome = reply.as_ref().map_or(Outcome::RpcError, outcome_of);
        if x.call.method == Some("tools/list") {
            x.upstream.shared.metrics.learn_tools_in(&bytes);
            x.upstream.shared.policies().learn_hints_in(&bytes);
        }
        if x.call.method == Some("tools/list")
            && let Some(name) = &x.upstream.settings.health_tool
            && let Some(with) = with_health_tool(&bytes, name)
        {
            bytes = Bytes::from(with);
        }
        x.call.record(x.upstream, x.started, outcome);
    }
    answer(Body::from(bytes))
}

fn outcome_of(reply: &Envelope<'_>) -> Outcome {
    if reply.error.is_some() {
        Outcome::RpcError
    } else if reply.is_tool_error() {
        Outcome::ToolError
    } else {
        Outcome::Ok
    }
}

/// A `tools/list` reply's bytes with the health tool added ([`crate::serve::inject_health_tool`]:
/// to the last page, in place of an upstream tool of the same name). `None` when the reply is
/// not a `tools/list` result, or not the last page.
fn with_health_tool(reply: &[u8], name: &str) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(reply).ok()?;
    if !crate::serve::inject_reply(&mut v, name) {
        return None;
    }
    serde_json::to_vec(&v).ok()
}

/// The request a stream should answer.
struct Pending {
    /// Its id, keyed by value; `None` for a GET stream or a POSTed notification.
    key: Option<String>,
    /// Its id's raw JSON.
    id: Option<String>,
    tools_list: bool,
    record: Record,
    /// A `tools/call`'s timer, when it is due before the reply timeout: its expiry is
    /// answered with the tool timeout result.
    tool_timer: Option<crate::policy::Timer>,
    /// The call's `progressToken` when its entry has `progress_extends`: a progress
    /// notification on the stream with it pushes `tool_timer` back (up to `max_timeout`, and
    /// never past the reply timeout).
    progress: Option<Value>,
    /// What a legacy upstream is sent when the reply's deadline passes (super::Cancel).
    cancel: Option<super::Cancel>,
    /// Registered for the client's `notifications/cancelled` (super::Inflight).
    inflight: Option<super::Inflight>,
}

/// How much of an upstream frame is decoded at a time (see `Stream::run`).
const DECODE_SLICE: usize = 4096;

/// How long a timed-out call's last event waits for a client that does not read.
const LAST_SEND_GRACE: Duration = Duration::from_secs(1);

/// How long an event waits for a client that reads nothing when no request deadline bounds
/// the wait (the reply and what follows it, a GET stream): then the stream ends, and with it
/// the upstream's, rather than being held for as long as the client stays connected.
pub(crate) const STALLED_CLIENT: Duration = Duration::from_secs(30);

struct Stream {
    link: Arc<Link>,
    label: String,
    max: usize,
    health_tool: Option<String>,
    tx: mpsc::Sender<Bytes>,
    /// Where the tools a relayed `tools/list` lists are learnt (its metrics).
    shared: Arc<Shared>,
    /// When the pending request's reply is due (`None`: a GET stream, never), unless its
    /// tool timer was pushed back by progress.
    deadline: Option<Instant>,
    /// When the reply timeout runs out (what progress cannot push back).
    reply_due: Instant,
    /// The error's cause when it is not.
    timed_out: String,
    /// How long an event with no deadline waits for a client that reads nothing.
    stalled: Duration,
}

impl Stream {
    /// Reads the upstream stream to its end, or until the client goes away (the channel
    /// closes: dropping the upstream body closes the upstream stream).
    async fn run(self, mut body: Incoming, sender: SendRequest<Full<Bytes>>, mut pending: Pending) {
        let mut decoder = Decoder::new(self.max);
        loop {
            // The client's departure is watched beside the upstream: a quiet stream (nothing
            // but keep-alive comments, which are not relayed, or silence) would otherwise never
            // try a send and so never notice, and keep the upstream stream open for good.
            let due = match &pending.tool_timer {
                Some(t) => Some(t.deadline().min(self.reply_due)),
                None => self.deadline,
            }
            .filter(|_| pending.key.is_some());
            let cancel = pending
                .inflight
                .as_ref()
                .filter(|_| pending.key.is_some())
                .map(|i| i.cancelled.clone());
            let next = tokio::select! {
                biased;
                () = self.tx.closed() => {
                    tracing::debug!(upstream = %self.label, "client left the stream; closing the upstream's");
                    return;
                }
                () = notified_opt(cancel.as_deref()) => {
                    // The client cancelled the request (its notification was relayed to the
                    // upstream): answered now, the upstream stream closed as this returns.
                    self.cancelled(&mut pending).await;
                    return;
                }
                () = crate::serve::sleep_until_opt(due) => {
                    self.expire(&mut pending).await;
                    // Returning drops the upstream body: its stream is closed (a 2026-07-28
                    // upstream's cancellation; `expire` told a legacy one).
                    return;
                }
                next = body.frame() => next,
            };
            let frame = match next {
                None => {
                    if pending.key.is_some() {
                        self.fail(
                            &mut pending,
                            codes::SERVER_RESTARTED,
                            "ended the stream before replying",
                        )
                        .await;
                    } else {
                        self.link.release(sender);
                    }
                    return;
                }
                Some(Err(e)) => {
                    let cause = format!(
                        "broke the stream: {}",
                        mcpulse_transport::http::error_chain(&e)
                    );
                    self.fail(&mut pending, codes::SERVER_RESTARTED, &cause)
                        .await;
                    return;
                }
                Some(Ok(frame)) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            // Decoded a slice at a time: a frame of hyper's (up to ~400 KiB) of the smallest
            // events (`id\n\n`) would be 100,000 of them held at once.
            for item in data
                .chunks(DECODE_SLICE)
                .flat_map(|piece| decoder.push(piece))
            {
                match item {
                    Item::Event(event) => {
                        if !self.relay(event, &mut pending).await {
                            return;
                        }
                    }
                    Item::TooLarge { len_at_least, .. } => {
                        let cause = format!(
                            "sent a message of at least {len_at_least} bytes, over the gateway's max_message_size ({} bytes); the stream was cut",
                            self.max
                        );
                        self.fail(&mut pending, codes::MESSAGE_TOO_LARGE, &cause)
                            .await;
                        return;
                    }
                }
            }
        }
    }

    /// Sends one event on; false when the client is gone.
    async fn relay(&self, mut event: Event, pending: &mut Pending) -> bool {
        if let (Some(token), Some(timer)) = (&pending.progress, &mut pending.tool_timer)
            && is_progress_for(event.data.as_bytes(), token)
        {
            timer.progressed();
        }
        if let Some(key) = &pending.key
            && let Some(reply) = Envelope::parse(event.data.as_bytes())
            && reply.kind() == Kind::Response
            && reply
                .id_text()
                .is_some_and(|id| canonical_id(id) == key.as_str())
        {
            let outcome = outcome_of(&reply);
            if pending.tools_list {
                self.shared.metrics.learn_tools_in(event.data.as_bytes());
                self.shared.policies().learn_hints_in(event.data.as_bytes());
            }
            if pending.tools_list
                && let Some(name) = &self.health_tool
                && let Some(with) = with_health_tool(event.data.as_bytes(), name)
                && let Ok(with) = String::from_utf8(with)
            {
                event.data = with;
            }
            pending.record.done(outcome);
            pending.key = None;
        }
        // A client that stops reading blocks this send: it races the reply's deadline, so the
        // call still times out (its slots and breaker trial given back, the upstream stream
        // closed as the caller returns) while the client stays connected. With no deadline left
        // (the reply sent, a GET stream), it races STALLED_CLIENT, so that the upstream's
        // stream is not held for as long as the client stays.
        let due = match &pending.key {
            Some(_) => self.deadline,
            None => Some(tokio::time::Instant::now() + self.stalled),
        };
        tokio::select! {
            biased;
            sent = self.tx.send(encode(&event)) => sent.is_ok(),
            () = crate::serve::sleep_until_opt(due) => {
                if pending.key.is_some() {
                    self.expire(pending).await;
                } else {
                    tracing::info!(
                        after_ms = u64::try_from(self.stalled.as_millis()).unwrap_or(u64::MAX),
                        "a client read nothing of its stream; the stream was ended"
                    );
                }
                false
            }
        }
    }

    /// The pending request's deadline passed: the tool timeout result, or the reply timeout's
    /// error, as a last event.
    async fn expire(&self, pending: &mut Pending) {
        let tool = pending
            .tool_timer
            .as_ref()
            .is_some_and(|t| t.before(self.reply_due));
        if let Some(cancel) = pending.cancel.take().filter(|_| pending.key.is_some()) {
            cancel.send(if tool {
                super::TOOL_TIMEOUT_REASON
            } else {
                super::REPLY_TIMEOUT_REASON
            });
        }
        match pending.tool_timer.take() {
            Some(t) if t.before(self.reply_due) => self.time_out(pending, &t).await,
            _ => {
                self.fail(pending, codes::REQUEST_TIMEOUT, &self.timed_out)
                    .await;
            }
        }
    }

    /// The pending `tools/call` outlived its timeout: the tool timeout result as a last event.
    async fn time_out(&self, pending: &mut Pending, timer: &crate::policy::Timer) {
        if pending.key.take().is_none() {
            return;
        }
        pending.record.timed_out(&timer.tool);
        let result = crate::policy::timeout_result(timer, "its upstream stream was closed");
        let id: Value = pending
            .id
            .as_deref()
            .and_then(|i| serde_json::from_str(i).ok())
            .unwrap_or(Value::Null);
        let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
        self.last_event(body.to_string()).await;
    }

    /// The client cancelled the pending request: the `-32800` error as a last event.
    async fn cancelled(&self, pending: &mut Pending) {
        if pending.key.take().is_none() {
            return;
        }
        pending.record.cancelled();
        let body = error_body(
            pending.id.as_deref(),
            super::CANCELLED,
            super::CANCELLED_MESSAGE,
            None,
        );
        self.last_event(String::from_utf8_lossy(&body).into_owned())
            .await;
    }

    /// The stream's last event, the gateway's own answer: a client that does not read gets
    /// [`LAST_SEND_GRACE`], then the stream ends without it (so the upstream stream is closed,
    /// not held for as long as the client stays).
    async fn last_event(&self, data: String) {
        let event = Event {
            event: Some("message".to_owned()),
            data,
            id: None,
            retry_ms: None,
        };
        let _ = tokio::time::timeout(LAST_SEND_GRACE, self.tx.send(encode(&event))).await;
    }

    /// The stream broke: the pending request, if any, gets a JSON-RPC error as a last event.
    async fn fail(&self, pending: &mut Pending, code: i64, cause: &str) {
        tracing::debug!(upstream = %self.label, cause = %mcpulse_wire::text::message(cause), "upstream stream ended early");
        if pending.key.take().is_none() {
            return;
        }
        pending.record.done(Outcome::GatewayError);
        let message = format!("upstream {} {cause}", self.label);
        let body = error_body(pending.id.as_deref(), code, &message, Some(&self.label));
        self.last_event(String::from_utf8_lossy(&body).into_owned())
            .await;
    }
}

/// Waits for `n`'s notification; never, without one.
async fn notified_opt(n: Option<&tokio::sync::Notify>) {
    match n {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

/// Whether an event's data is a `notifications/progress` with this `progressToken`. Parsed
/// only for a call whose timeout progress may extend; an event that does not name the method
/// is not parsed.
fn is_progress_for(data: &[u8], token: &Value) -> bool {
    const METHOD: &[u8] = b"notifications/progress";
    if !data.windows(METHOD.len()).any(|w| w == METHOD) {
        return false;
    }
    serde_json::from_slice::<Value>(data).is_ok_and(|v| {
        v.get("method").and_then(Value::as_str) == Some("notifications/progress")
            && v.get("params").and_then(|p| p.get("progressToken")) == Some(token)
    })
}

/// An event framed for the wire. The decoder split fields at line ends, so no value holds one.
fn encode(e: &Event) -> Bytes {
    let mut s = String::with_capacity(e.data.len() + 32);
    if let Some(id) = &e.id {
        s.push_str("id: ");
        s.push_str(id);
        s.push('\n');
    }
    if let Some(kind) = &e.event {
        s.push_str("event: ");
        s.push_str(kind);
        s.push('\n');
    }
    if let Some(ms) = e.retry_ms {
        s.push_str(&format!("retry: {ms}\n"));
    }
    for line in e.data.split('\n') {
        s.push_str("data:");
        if !line.is_empty() {
            s.push(' ');
            s.push_str(line);
        }
        s.push('\n');
    }
    s.push('\n');
    Bytes::from(s)
}

/// A JSON-RPC error as a body: `id` is the request's raw id (`null` when unknown), `upstream`
/// the redacted URL, added as `data.upstream`.
fn error_body(id: Option<&str>, code: i64, message: &str, upstream: Option<&str>) -> Vec<u8> {
    let id: Value = id
        .and_then(|i| serde_json::from_str(i).ok())
        .unwrap_or(Value::Null);
    let message = format!("mcpulse gateway: {message}");
    let mut error = json!({"code": code, "message": message});
    if let Some(u) = upstream {
        error["data"] = json!({ "upstream": u });
    }
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "error": error})).unwrap_or_default()
}

/// The gateway's own error answer.
pub fn rpc_error(
    status: StatusCode,
    id: Option<&str>,
    code: i64,
    message: &str,
    upstream: Option<&str>,
) -> Response {
    let body = error_body(id, code, message, upstream);
    json_response(status, body)
}

/// The gateway's own result (the health tool's).
pub fn rpc_result(id: &str, result: &Value) -> Response {
    let id: Value = serde_json::from_str(id).unwrap_or(Value::Null);
    let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
        .unwrap_or_default();
    json_response(StatusCode::OK, body)
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A status with a text body.
pub fn plain(status: StatusCode, text: &'static str) -> Response {
    let mut resp = Response::new(Body::from(text));
    *resp.status_mut() = status;
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_health_tool_goes_on_the_last_page_once() {
        let last =
            br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo"},{"name":"health"}]}}"#;
        let with: Value =
            serde_json::from_slice(&with_health_tool(last, "health").unwrap()).unwrap();
        let names: Vec<&str> = with["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["echo", "health"]);
        assert_eq!(
            with["result"]["tools"][1],
            crate::health::tool_descriptor("health")
        );
        let page = br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"nextCursor":"2"}}"#;
        assert_eq!(with_health_tool(page, "health"), None);
        let null_cursor = br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"nextCursor":null}}"#;
        assert!(with_health_tool(null_cursor, "health").is_some());
        let error = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#;
        assert_eq!(with_health_tool(error, "health"), None);
    }

    #[test]
    fn events_are_reframed_as_they_were() {
        let events = [
            Event {
                event: Some("message".into()),
                data: "{\"a\":\n1}".into(),
                id: Some("7".into()),
                retry_ms: Some(1500),
            },
            Event::default(),
            Event {
                data: "x".into(),
                ..Event::default()
            },
        ];
        let mut decoder = Decoder::new(1024);
        for e in events {
            let items = decoder.push(&encode(&e));
            assert_eq!(items, [Item::Event(e)]);
        }
    }
}
