//! An HTTP upstream: `/mcp` requests relayed to a Streamable HTTP server, their answers (JSON
//! bodies and SSE streams) relayed back as they arrive, with bounded buffers.
//!
//! The interface the front door ([`super`]) uses: [`HttpUpstream::new`] once, then
//! [`HttpUpstream::handle`] for each request that passed the door's validation (Origin, Host,
//! the body cap, `MCP-Protocol-Version`). What this module owns:
//! - which headers pass each way ([`FORWARDED_REQUEST_HEADERS`], [`FORWARDED_RESPONSE_HEADERS`]);
//! - the pool of kept-alive connections and the upstream's up/down state with reconnects under
//!   backoff ([`link`]);
//! - the answers the gateway gives itself when the upstream cannot (statuses and JSON-RPC
//!   errors, documented in docs/gateway.md `## HTTP upstream`), and the streaming relay of
//!   replies ([`relay`]);
//! - the opt-in `health_check` tool: added to `tools/list`, answered here without forwarding;
//! - one `metrics.request` and one log line per JSON-RPC request, but for the gateway's own
//!   probes ([`crate::checks::is_own_probe`]: the token from a loopback peer, read from axum's
//!   `ConnectInfo<SocketAddr>`, so the door must serve with connect info), and the session
//!   count ([`sessions`]);
//! - the reply timeout ([`HttpSettings::reply_timeout`]): a frozen upstream hangs no client.
//!
//! Sessions are the upstream's own: `Mcp-Session-Id` passes both ways untouched, `DELETE`
//! is relayed. Nothing is retried once it may have reached the upstream (tools are not
//! idempotent), so replies are never duplicated; one request is one upstream exchange, so they
//! are never reordered. The one exception is opt-in: a `tools/call` whose `[[tools]]` entry
//! has a `retry` and whose tool the server annotated read-only or idempotent is sent again
//! after a failure before any reply began (no head in time, a broken connection, a 5xx),
//! under the same rules as over stdio ([`crate::policy`]).

mod link;
mod relay;
pub mod sessions;

pub use relay::codes;

use super::names;
use crate::metrics::Outcome;
use crate::state::Shared;
use axum::extract::Request;
use axum::response::Response;
use http::header::{self, HeaderName};
use http::{HeaderValue, Method, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use link::Link;
use mcpulse_policy::backoff::Backoff;
use mcpulse_relay::supervise::envelope::{Envelope, Kind, canonical_id};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// JSON-RPC's `RequestCancelled` (MCP: a request its client cancelled).
pub(super) const CANCELLED: i64 = -32800;

/// What the HTTP upstream is told (the config fills it in; [`HttpSettings::new`] gives the
/// defaults). Its `Debug` shows the URL redacted (userinfo and query values: tokens live
/// there), as everything the gateway logs does.
#[derive(Clone)]
pub struct HttpSettings {
    /// The upstream's MCP endpoint.
    pub url: String,
    /// Connecting to the upstream (a refused or timed-out connect answers fast).
    pub connect_timeout: Duration,
    /// The longest request or response message relayed.
    pub max_message_size: usize,
    /// The opt-in `health_check` tool's name: listed in `tools/list`, answered by the gateway.
    pub health_tool: Option<String>,
    /// The delays between reconnect attempts while the upstream is down.
    pub reconnect: Backoff,
    /// Certificates (DER) trusted besides the system's roots for an `https://` upstream: a
    /// private CA (read from PEM with `mcpulse_transport::http::read_pem_certs`).
    pub extra_roots: Vec<Vec<u8>>,
    /// The longest wait for the reply to a POSTed request, from its arrival: the response
    /// head, a JSON body, or an SSE stream until the reply to that request has passed. Past
    /// it the client gets a JSON-RPC error for its id (`REQUEST_TIMEOUT`), so that a frozen
    /// upstream never hangs a client. A client's GET stream has no reply pending and no
    /// timeout. (Per-tool timeouts are #20's.)
    pub reply_timeout: Duration,
    /// An SSE comment on each relayed stream silent this long (`None`: none). The upstream's
    /// own comments are not relayed, so the cadence is the gateway's alone.
    pub keepalive: Option<Duration>,
    /// The values the config's `${VAR}`s put in `url`: hidden wherever the URL is shown (a
    /// token in a path has no name to go by), [`HttpSettings::label`].
    pub secrets: mcpulse_wire::redact::Secrets,
    /// The door's `max_body`, when a door caps request bodies before the relay reads them:
    /// met while reading (no `Content-Length`), the relay answers the door's 413.
    pub max_body: Option<usize>,
    /// How long a relayed event waits for a client that reads nothing when no request
    /// deadline bounds the wait (its reply, and what follows it; a GET stream): then the
    /// stream ends, and the upstream's with it. 30 s by default.
    pub stalled_client: Duration,
}

impl HttpSettings {
    /// The defaults: connect timeout 5 s, messages up to 16 MiB, no health tool, reconnects
    /// from 1 s doubling up to 60 s with full jitter, replies within 60 s (the TypeScript
    /// SDK's default request timeout, so a client's own timeout and the gateway's agree).
    pub fn new(url: impl Into<String>) -> HttpSettings {
        HttpSettings {
            url: url.into(),
            connect_timeout: Duration::from_secs(5),
            max_message_size: 16 << 20,
            health_tool: None,
            reconnect: Backoff::default(),
            extra_roots: Vec::new(),
            reply_timeout: DEFAULT_REPLY_TIMEOUT,
            keepalive: Some(mcpulse_policy::keepalive::DEFAULT_INTERVAL),
            secrets: mcpulse_wire::redact::Secrets::default(),
            max_body: None,
            stalled_client: relay::STALLED_CLIENT,
        }
    }

    /// The upstream's URL as every message, log line and error shows it: userinfo and query
    /// values redacted, and the config's secrets hidden wherever they stand.
    pub fn label(&self) -> String {
        mcpulse_wire::redact::target_url(&self.url, &self.secrets)
    }
}

impl std::fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSettings")
            .field("url", &self.label())
            .field("connect_timeout", &self.connect_timeout)
            .field("max_message_size", &self.max_message_size)
            .field("health_tool", &self.health_tool)
            .field("reconnect", &self.reconnect)
            .field("extra_roots", &self.extra_roots.len())
            .field("reply_timeout", &self.reply_timeout)
            .field("keepalive", &self.keepalive)
            .finish()
    }
}

/// [`HttpSettings::reply_timeout`]'s default.
pub const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// The request headers passed to the upstream (all others are dropped: hop-by-hop headers,
/// `Origin` (the door validated it), cookies, `Accept-Encoding` (replies are read, so they
/// must come uncompressed), proxy headers). `Host` is set to the upstream's.
/// Header names, not strings: a `&str` name is parsed again on every lookup, and these are
/// looked up on every relayed request.
pub const FORWARDED_REQUEST_HEADERS: [HeaderName; 10] = [
    header::ACCEPT,
    header::CONTENT_TYPE,
    header::AUTHORIZATION,
    names::MCP_SESSION_ID,
    names::MCP_PROTOCOL_VERSION,
    names::MCP_METHOD,
    names::MCP_NAME,
    names::LAST_EVENT_ID,
    names::TRACEPARENT,
    names::TRACESTATE,
];

/// The response headers passed back to the client (`Content-Length` is the gateway's own,
/// as the body may change).
pub const FORWARDED_RESPONSE_HEADERS: [HeaderName; 7] = [
    header::CONTENT_TYPE,
    header::CACHE_CONTROL,
    names::MCP_SESSION_ID,
    names::MCP_PROTOCOL_VERSION,
    header::WWW_AUTHENTICATE,
    header::RETRY_AFTER,
    header::ALLOW,
];

/// The relay to one upstream, shared by every request.
#[derive(Debug)]
pub struct HttpUpstream {
    settings: HttpSettings,
    shared: Arc<Shared>,
    /// The upstream as a URI (an invalid URL answers every request with 502 and the reason).
    target: Result<Target, String>,
    /// Client sessions open through the upstream (`mcpulse_gateway_active_sessions`).
    sessions: Mutex<sessions::Sessions>,
    /// The requests in flight in a session, by session and id: what a client's
    /// `notifications/cancelled` finds ([`Inflight`]).
    inflight: Arc<Registry>,
}

/// The requests in flight, by a keyed hash of (session id, canonical request id)
/// ([`Inflight`]): one hash a request, no key to allocate. The hash's keys are random per
/// process (std's SipHash), so no client can make its request collide with another's.
struct Registry {
    map: Mutex<HashMap<u64, Arc<Notify>, std::hash::BuildHasherDefault<Prehashed>>>,
    keys: std::collections::hash_map::RandomState,
}

impl Registry {
    fn key(&self, session: &str, id: &str) -> u64 {
        use std::hash::{BuildHasher, Hash, Hasher};
        let mut h = self.keys.build_hasher();
        session.hash(&mut h);
        id.hash(&mut h);
        h.finish()
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<
        '_,
        HashMap<u64, Arc<Notify>, std::hash::BuildHasherDefault<Prehashed>>,
    > {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("in_flight", &self.lock().len())
            .finish()
    }
}

impl Default for Registry {
    fn default() -> Registry {
        Registry {
            // Room for the usual requests in flight, so that inserting and removing one a
            // request does not keep rehashing a tiny table in place.
            map: Mutex::new(HashMap::with_capacity_and_hasher(
                64,
                std::hash::BuildHasherDefault::default(),
            )),
            keys: std::collections::hash_map::RandomState::new(),
        }
    }
}

/// The hasher of a map whose keys are hashes already: passes the `u64` through.
#[derive(Default)]
struct Prehashed(u64);

impl std::hash::Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (a `u64` key); any other input still hashes, plainly.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A request in flight in a legacy session, registered so that the client's
/// `notifications/cancelled` for it (same session, same id) wakes it: the POST is then
/// answered `-32800` at once, as over stdio, nothing is retried, and the call feeds neither
/// its breaker nor the thresholds. Removed when dropped (the request answered, timed out, or
/// its client gone). Requests without a session are not registered: a stateless client's
/// cancellation is its closed stream, and an id alone does not say whose request it is.
pub(super) struct Inflight {
    registry: Arc<Registry>,
    key: u64,
    pub(super) cancelled: Arc<Notify>,
}

impl Drop for Inflight {
    fn drop(&mut self) {
        let mut map = self.registry.lock();
        if map
            .get(&self.key)
            .is_some_and(|n| Arc::ptr_eq(n, &self.cancelled))
        {
            map.remove(&self.key);
        }
    }
}

impl std::fmt::Debug for Inflight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflight").finish_non_exhaustive()
    }
}

/// The most requests registered for cancellation at once (beyond it a request is relayed
/// as ever, only not cancellable by a notification): bounds the map whatever clients send.
const MAX_INFLIGHT: usize = 10_000;

/// `fut`, unless `cancel` is notified first (`None`).
pub(super) async fn unless_cancelled<T>(
    cancel: Option<&Notify>,
    fut: impl std::future::Future<Output = T>,
) -> Option<T> {
    let Some(n) = cancel else {
        return Some(fut.await);
    };
    // By hand, not `select!`: the request first, the notification only while it waits (this
    // wraps every relayed request of a session).
    let notified = n.notified();
    let mut notified = std::pin::pin!(notified);
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(t) = fut.as_mut().poll(cx) {
            return std::task::Poll::Ready(Some(t));
        }
        notified.as_mut().poll(cx).map(|()| None)
    })
    .await
}

/// The message a request cancelled by its client is answered with (as over stdio).
pub(super) const CANCELLED_MESSAGE: &str =
    "mcpulse gateway: the request was cancelled by the client";

struct Target {
    link: Arc<Link>,
    /// `Host` for the upstream: host[:port], never userinfo.
    host: HeaderValue,
    /// The upstream's path and query, the request target of every request.
    path: Uri,
    /// The URL as messages and logs show it (userinfo and query values redacted).
    label: String,
}

/// A `notifications/cancelled` for a request the gateway stopped waiting for (its tool timeout
/// or the reply timeout), to POST to a legacy upstream ([`HttpUpstream::cancel_for`]).
///
/// Up to 2025-11-25 a closed stream is not a cancellation: "the server SHOULD NOT interpret
/// disconnection as cancellation", and a client that gives up "SHOULD send
/// `notifications/cancelled`". Dropping the upstream request alone would leave the server at
/// work on a call nobody waits for. In 2026-07-28 the closed stream is the cancellation, and
/// nothing more is sent.
pub(super) struct Cancel {
    link: Arc<Link>,
    label: String,
    /// How long the POST may take, its answer read (the connect timeout).
    wait: Duration,
    path: Uri,
    /// `Host`, the content headers, and the request's session, version and credentials.
    headers: http::HeaderMap,
    /// The request's id as it was sent.
    id: serde_json::Value,
}

/// The `reason` of a cancellation when the tool's timeout ran out.
pub(super) const TOOL_TIMEOUT_REASON: &str = "the gateway's timeout for this tool ran out";
/// The `reason` of a cancellation when the reply timeout ran out.
pub(super) const REPLY_TIMEOUT_REASON: &str = "no reply within the gateway's reply_timeout";

/// The request headers a cancellation carries over from the request it cancels.
const CANCEL_HEADERS: [HeaderName; 5] = [
    header::AUTHORIZATION,
    names::MCP_SESSION_ID,
    names::MCP_PROTOCOL_VERSION,
    names::TRACEPARENT,
    names::TRACESTATE,
];

impl Cancel {
    /// POSTs it in the background; its outcome is logged (`debug` delivered, `warn` not).
    pub(super) fn send(self, reason: &str) {
        tokio::spawn(self.deliver(reason));
    }

    /// POSTs it and waits for the answer, at most the connect timeout; the outcome is logged
    /// (`debug` delivered, `warn` not). A retry awaits it, so that the cancellation of an
    /// attempt reaches the upstream before the next attempt, which has the same id.
    pub(super) fn deliver(self, reason: &str) -> impl Future<Output = ()> + Send + 'static {
        let body = mcpulse_wire::message::cancelled(self.id, reason);
        let mut req = http::Request::new(Full::new(bytes::Bytes::from(body.to_string())));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = self.path;
        *req.headers_mut() = self.headers;
        let Cancel {
            link, label, wait, ..
        } = self;
        async move {
            let sent = tokio::time::timeout(wait, async {
                let (resp, sender) = link.send(req).await.map_err(|f| f.cause(wait))?;
                let status = resp.status();
                let mut body = resp.into_body();
                let (_, end) =
                    mcpulse_transport::http::read_body(&mut body, 4096, Instant::now() + wait)
                        .await;
                if matches!(end, mcpulse_transport::http::BodyEnd::Complete) {
                    link.release(sender);
                }
                Ok::<_, String>(status)
            })
            .await;
            match sent {
                Ok(Ok(status)) if status.is_success() => {
                    tracing::debug!(upstream = %label, "notifications/cancelled sent for a request the gateway stopped waiting for");
                }
                Ok(Ok(status)) => {
                    tracing::warn!(upstream = %label, status = status.as_u16(), "the upstream refused the notifications/cancelled for a timed-out request; it may still be working on it");
                }
                Ok(Err(cause)) => {
                    tracing::warn!(upstream = %label, cause = %mcpulse_wire::text::message(&cause), "the notifications/cancelled for a timed-out request was not delivered; the upstream may still be working on it");
                }
                Err(_) => {
                    tracing::warn!(upstream = %label, "the notifications/cancelled for a timed-out request had no answer in time; the upstream may still be working on it");
                }
            }
        }
    }
}

impl HttpUpstream {
    pub fn new(settings: HttpSettings, shared: Arc<Shared>) -> HttpUpstream {
        let target = target(&settings, &shared);
        if let Some(name) = &settings.health_tool {
            shared.metrics.learn_tools(&[name]);
        }
        HttpUpstream {
            settings,
            shared,
            target,
            sessions: Mutex::new(sessions::Sessions::default()),
            inflight: Arc::default(),
        }
    }

    /// Registers `call` for cancellation in `session` (see [`Inflight`]).
    fn register(&self, session: Option<&str>, call: &Call) -> Option<Inflight> {
        let session = session?;
        let key = call.key.as_ref()?;
        if call.method == Some("initialize") || call.own_probe {
            return None;
        }
        let key = self.inflight.key(session, key);
        let mut map = self.inflight.lock();
        if map.len() >= MAX_INFLIGHT {
            return None;
        }
        // An id already in flight in the session (a client's mistake) stays the first's.
        let std::collections::hash_map::Entry::Vacant(slot) = map.entry(key) else {
            return None;
        };
        let cancelled = slot.insert(Arc::new(Notify::new())).clone();
        drop(map);
        Some(Inflight {
            registry: self.inflight.clone(),
            key,
            cancelled,
        })
    }

    /// A client's `notifications/cancelled` for `id` in `session`: wakes that request, if it
    /// is in flight here (the notification is relayed to the upstream as ever).
    fn client_cancelled(&self, session: Option<&str>, id: &str) {
        let Some(session) = session else { return };
        let key = self.inflight.key(session, &canonical_id(id));
        if let Some(n) = self.inflight.lock().get(&key) {
            n.notify_one();
        }
    }

    /// Connects to the upstream once, before any request (for the front door to call at
    /// start): `/livez` then sees the upstream Up, or down with reconnects under way, without
    /// waiting for a client's first request. Optional: the first request connects anyway.
    pub async fn warm_up(&self) {
        if let Ok(target) = &self.target {
            target.link.warm_up().await;
        }
    }

    /// Relays one client request (already through the door) and streams the answer back.
    pub async fn handle(&self, req: Request) -> Response {
        let started = Instant::now();
        let (parts, body) = req.into_parts();
        if !matches!(parts.method, Method::POST | Method::GET | Method::DELETE) {
            let mut resp = relay::plain(StatusCode::METHOD_NOT_ALLOWED, "");
            resp.headers_mut().insert(
                http::header::ALLOW,
                HeaderValue::from_static("GET, POST, DELETE"),
            );
            return resp;
        }
        let body = match Limited::new(body, self.settings.max_message_size)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                // The door's cap (max_body), met while reading: its own 413.
                if !e.is::<http_body_util::LengthLimitError>()
                    && crate::serve::over_limit(&*e)
                    && let Some(max) = self.settings.max_body
                {
                    return super::too_large(max);
                }
                let too_large = e.is::<http_body_util::LengthLimitError>();
                let (status, code, message) = if too_large {
                    (
                        StatusCode::PAYLOAD_TOO_LARGE,
                        codes::MESSAGE_TOO_LARGE,
                        format!(
                            "the request is larger than the gateway's max_message_size ({} bytes)",
                            self.settings.max_message_size
                        ),
                    )
                } else {
                    (
                        StatusCode::BAD_REQUEST,
                        codes::INVALID_REQUEST,
                        "the request body could not be read".to_owned(),
                    )
                };
                return relay::rpc_error(status, None, code, &message, None);
            }
        };
        let mut call = match Call::of(&body) {
            Some(call) => call,
            // A POST whose envelope the gateway cannot read would pass every policy, metric
            // and log line unseen: refused, as over stdio (a batch, a bare value, invalid JSON,
            // an object with a duplicate key).
            None if parts.method == Method::POST => return unreadable(&body),
            None => Call::default(),
        };
        // The peer as the door's listener saw it (axum's ConnectInfo; none: not trusted).
        let peer = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0.ip());
        call.own_probe = crate::checks::is_own_probe(&parts.headers, peer);
        let session = parts
            .headers
            .get(names::MCP_SESSION_ID)
            .and_then(|v| v.to_str().ok());
        if let Some(id) = &call.cancels {
            self.client_cancelled(session, id);
        }
        call.inflight = self.register(session, &call);
        let target = match &self.target {
            Ok(t) => t,
            Err(why) => {
                return call.refuse(
                    self,
                    started,
                    StatusCode::BAD_GATEWAY,
                    codes::UPSTREAM_UNAVAILABLE,
                    why,
                    None,
                );
            }
        };
        if let Some(resp) = self.health_tool_call(&call) {
            call.record(self, started, Outcome::Ok);
            return resp;
        }
        if let Some(down) = target.link.down() {
            let wait = down.retry_at.saturating_duration_since(Instant::now());
            let message = format!(
                "upstream {} is unavailable ({}); the next reconnect attempt is in {}",
                target.label,
                down.cause,
                mcpulse_wire::units::human_duration(wait.as_millis())
            );
            let mut resp = call.refuse(
                self,
                started,
                StatusCode::SERVICE_UNAVAILABLE,
                codes::UPSTREAM_UNAVAILABLE,
                &message,
                Some(&target.label),
            );
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            resp.headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
            return resp;
        }
        // The call policies: admitted (or refused here, before anything is sent), and timed.
        // A `tools/call` without a name gets the gateway-wide limit and the default
        // timeout (as the name "", which no listed tool has), as over stdio.
        let policed = match (call.method, &call.tool_name) {
            (Some("tools/call"), Some(tool)) => Some(tool.clone()),
            (Some("tools/call"), None) => Some(String::new()),
            _ => None,
        };
        if let (Some(tool), false) = (policed, call.own_probe) {
            let policies = self.shared.policies().clone();
            match policies.admit(&tool, &self.shared).await {
                Ok(p) => {
                    let timer = policies.timer(p.attempts(), &tool);
                    // Its progress may push the timeout back: the token it reports it under.
                    if timer.extends() {
                        call.progress = progress_token(&body);
                    }
                    call.timer = Some(timer);
                    call.permit = std::sync::Mutex::new(Some(p));
                }
                Err(refusal) => {
                    call.record(self, started, Outcome::GatewayError);
                    let id = call
                        .id()
                        .and_then(|i| serde_json::from_str(i).ok())
                        .unwrap_or(serde_json::Value::Null);
                    return crate::policy::refusal_response(&id, &tool, &refusal);
                }
            }
        }
        // A copy of the request is kept only when its entry opts in to retries (crate::policy:
        // annotated tools only, backoff with jitter, the budget); `Bytes` is shared, not copied.
        let mut made = 1;
        let (sent, deadline, reply_due) = loop {
            let out = self.upstream_request(target, &parts, body.clone());
            // Each attempt has its own reply timeout and tool timeout.
            let reply_due =
                if made == 1 { started } else { Instant::now() } + self.settings.reply_timeout;
            // A GET stream has no reply pending: no deadline (its events each wait at most
            // `stalled_client` for a client that reads nothing).
            let deadline = (parts.method != Method::GET).then(|| match &call.timer {
                Some(t) => t.deadline().min(reply_due),
                None => reply_due,
            });
            let cancel = call.inflight.as_ref().map(|i| &*i.cancelled);
            let sent = match deadline {
                Some(at) => {
                    match tokio::time::timeout_at(
                        at,
                        unless_cancelled(cancel, target.link.send(out)),
                    )
                    .await
                    {
                        Ok(Some(sent)) => Ok(sent),
                        Ok(None) => return call.cancelled(self, started),
                        Err(_) if call.tool_timed_out(reply_due) => Err(true),
                        Err(_) => Err(false),
                    }
                }
                None => Ok(target.link.send(out).await),
            };
            // Only a failure before any reply began is retried: no head (a timeout, a broken
            // connection) or a 5xx head, whose body is dropped unread.
            let failure = match &sent {
                Err(true) => Some(mcpulse_policy::breaker::FailureKind::Timeout),
                Ok(Err(_)) => Some(mcpulse_policy::breaker::FailureKind::Transport),
                Ok(Ok((resp, _))) if resp.status().is_server_error() => {
                    Some(mcpulse_policy::breaker::FailureKind::Transport)
                }
                _ => None,
            };
            if let (Some(failure), Some(tool)) = (failure, call.tool_name.as_deref())
                && let Some(delay) = self.retry_delay(&call, tool, made, failure)
            {
                let until = Instant::now() + delay;
                let timed_out = sent.is_err();
                drop(sent);
                // A timed-out attempt is cancelled before the next is sent (same id), within
                // the backoff when the upstream answers in time.
                // The client may cancel the call meanwhile: then it is not sent again.
                let cancel = call.inflight.as_ref().map(|i| &*i.cancelled);
                let backoff = async {
                    if timed_out && let Some(c) = self.cancel_for(target, &parts.headers, &call) {
                        c.deliver(TOOL_TIMEOUT_REASON).await;
                    }
                    tokio::time::sleep_until(until).await;
                };
                if unless_cancelled(cancel, backoff).await.is_none() {
                    return call.cancelled(self, started);
                }
                made += 1;
                let settings = self.shared.policies().settings();
                call.timer = Some(match &call.timer {
                    Some(t) => t.again(settings),
                    None => crate::policy::Timer::start(settings, tool),
                });
                continue;
            }
            match sent {
                Ok(sent) => break (sent, deadline, reply_due),
                Err(true) => {
                    self.cancel(target, &parts.headers, &call, TOOL_TIMEOUT_REASON);
                    return call.time_out(self, started);
                }
                Err(false) => {
                    self.cancel(target, &parts.headers, &call, REPLY_TIMEOUT_REASON);
                    let message = format!("upstream {} {}", target.label, self.timed_out());
                    return call.refuse(
                        self,
                        started,
                        StatusCode::GATEWAY_TIMEOUT,
                        codes::REQUEST_TIMEOUT,
                        &message,
                        Some(&target.label),
                    );
                }
            }
        };
        match sent {
            Ok((resp, sender)) => {
                let initialize = call.method == Some("initialize");
                let own_probe = call.own_probe;
                let resp = relay::respond(
                    relay::Exchange {
                        upstream: self,
                        target,
                        request: &parts.headers,
                        call,
                        started,
                        deadline,
                        reply_due,
                    },
                    resp,
                    sender,
                )
                .await;
                // The gateway's own probes open sessions every few seconds: not the clients'.
                if !own_probe {
                    self.count_sessions(&parts, initialize, &resp);
                }
                resp
            }
            Err(failure) => {
                let cause = failure.cause(self.settings.connect_timeout);
                let (status, code, message) = match failure {
                    link::Failure::Lost(_) => (
                        StatusCode::BAD_GATEWAY,
                        codes::SERVER_RESTARTED,
                        format!("upstream {} {cause}", target.label),
                    ),
                    link::Failure::Timeout | link::Failure::Broken(_) => {
                        target.link.went_down(cause.clone());
                        let status = if failure == link::Failure::Timeout {
                            StatusCode::GATEWAY_TIMEOUT
                        } else {
                            StatusCode::BAD_GATEWAY
                        };
                        let message = format!("upstream {} is unreachable: {cause}", target.label);
                        (status, codes::UPSTREAM_UNAVAILABLE, message)
                    }
                };
                call.refuse(self, started, status, code, &message, Some(&target.label))
            }
        }
    }

    /// Tells a legacy upstream that the gateway stopped waiting for `call`, for `reason`
    /// ([`HttpUpstream::cancel_for`], sent now).
    fn cancel(&self, target: &Target, request: &http::HeaderMap, call: &Call, reason: &str) {
        if let Some(cancel) = self.cancel_for(target, request, call) {
            cancel.send(reason);
        }
    }

    /// The cancellation to send if the gateway stops waiting for `call` (see [`Cancel`]):
    /// `None` for a notification, `initialize` (which must not be cancelled), a GET, or a
    /// 2026-07-28 request (its closed stream is the cancellation).
    fn cancel_for(
        &self,
        target: &Target,
        request: &http::HeaderMap,
        call: &Call,
    ) -> Option<Cancel> {
        let id = serde_json::from_str(call.id()?).ok()?;
        if call.method == Some("initialize") {
            return None;
        }
        let version = request
            .get(names::MCP_PROTOCOL_VERSION)
            .and_then(|v| v.to_str().ok());
        if version.and_then(mcpulse_wire::version::era_of)
            == Some(mcpulse_wire::version::Era::Modern)
        {
            return None;
        }
        let mut headers = http::HeaderMap::new();
        headers.insert(header::HOST, target.host.clone());
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        for name in CANCEL_HEADERS {
            if let Some(v) = request.get(&name) {
                headers.insert(name, v.clone());
            }
        }
        Some(Cancel {
            link: target.link.clone(),
            label: target.label.clone(),
            wait: self.settings.connect_timeout,
            path: target.path.clone(),
            headers,
            id,
        })
    }

    /// The request to the upstream: the client's method and body, the upstream's path and
    /// host, the forwarded headers.
    fn upstream_request(
        &self,
        target: &Target,
        parts: &http::request::Parts,
        body: bytes::Bytes,
    ) -> http::Request<Full<bytes::Bytes>> {
        let mut out = http::Request::new(Full::new(body));
        *out.method_mut() = parts.method.clone();
        *out.uri_mut() = target.path.clone();
        let headers = out.headers_mut();
        headers.insert(http::header::HOST, target.host.clone());
        // One pass over the client's few headers, not a hashed lookup per forwarded name.
        for (name, value) in &parts.headers {
            if FORWARDED_REQUEST_HEADERS.contains(name) {
                headers.append(name.clone(), value.clone());
            }
        }
        out
    }

    /// The delay before attempt `made + 1` of a `tools/call` whose attempt `made` failed
    /// before any reply began, or `None`: the same rules as over stdio
    /// ([`crate::policy::Policies::retry_after`]).
    fn retry_delay(
        &self,
        call: &Call,
        tool: &str,
        made: u32,
        failure: mcpulse_policy::breaker::FailureKind,
    ) -> Option<Duration> {
        let permit = call.permit.lock().unwrap_or_else(|p| p.into_inner());
        let permit = permit.as_ref()?;
        let policies = self.shared.policies();
        if !policies.may_retry(permit) {
            return None;
        }
        policies.retry_after(permit.attempts(), tool, made, failure, &self.shared.metrics)
    }

    /// Folds an exchange into the session count (see [`sessions`]).
    fn count_sessions(&self, req: &http::request::Parts, initialize: bool, resp: &Response) {
        const SESSION: HeaderName = names::MCP_SESSION_ID;
        let change = self
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .observe(
                sessions::Exchange {
                    initialize,
                    delete: req.method == Method::DELETE,
                    sent: req.headers.get(SESSION).map(HeaderValue::as_bytes),
                    status: resp.status().as_u16(),
                    answered: resp.headers().get(SESSION).map(HeaderValue::as_bytes),
                },
                Instant::now(),
            );
        for _ in 0..change.opened {
            self.shared.metrics.session_opened();
        }
        for _ in 0..change.closed {
            self.shared.metrics.session_closed();
        }
    }

    /// Why a reply did not come: the reply timeout passed.
    fn timed_out(&self) -> String {
        format!(
            "did not reply within {} (the gateway's reply_timeout)",
            mcpulse_wire::units::human_duration(self.settings.reply_timeout.as_millis())
        )
    }

    /// A `tools/call` of the configured health tool, answered here.
    fn health_tool_call(&self, call: &Call) -> Option<Response> {
        let name = self.settings.health_tool.as_deref()?;
        if call.method != Some("tools/call") || call.tool_name.as_deref() != Some(name) {
            return None;
        }
        let result = crate::health::tool_result(&self.shared);
        Some(relay::rpc_result(call.id()?, &result))
    }
}

/// Only the redacted URL: `path` keeps the query string, which may hold a token.
impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("upstream", &self.label)
            .field("link", &self.link)
            .finish_non_exhaustive()
    }
}

fn target(settings: &HttpSettings, shared: &Arc<Shared>) -> Result<Target, String> {
    let label = settings.label();
    let uri: Uri = settings
        .url
        .parse()
        .map_err(|e| format!("the upstream URL {label} is invalid: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(format!(
            "the upstream URL {label} is not http:// or https://"
        ));
    }
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = HeaderValue::from_str(host)
        .map_err(|e| format!("the upstream URL {label} has an invalid host: {e}"))?;
    // Parsed once: a `Uri` is cloned (shared bytes) for each request, not parsed again.
    let path = uri
        .path_and_query()
        .map_or_else(|| Uri::from_static("/"), |p| Uri::from(p.clone()));
    let link = Arc::new(Link::new(uri, settings, shared.clone()));
    Ok(Target {
        link,
        host,
        path,
        label,
    })
}

/// What the relay reads of a POSTed message: the request it is, if it is one.
#[derive(Debug, Default)]
struct Call {
    /// The id's raw JSON, for a request.
    id: Option<String>,
    /// The id keyed by value ([`canonical_id`]), to find the reply.
    key: Option<String>,
    /// The method as the metrics label ([`crate::metrics::method_label`]: a known MCP method
    /// or `_other`).
    method: Option<&'static str>,
    /// The tool of a `tools/call`, as sent.
    tool_name: Option<String>,
    /// The gateway's own probe ([`crate::checks::is_own_probe`]): kept out of the metrics.
    own_probe: bool,
    /// A `tools/call`'s admission (crate::policy), taken by the [`Record`] of its outcome.
    permit: std::sync::Mutex<Option<crate::policy::Permit>>,
    /// A `tools/call`'s timeout.
    timer: Option<crate::policy::Timer>,
    /// Its `progressToken`, when its timeout may be extended by progress.
    progress: Option<serde_json::Value>,
    /// A client's `notifications/cancelled`: the id of the request it cancels, raw.
    cancels: Option<String>,
    /// Registered for the client's cancellation ([`Inflight`]).
    inflight: Option<Inflight>,
}

/// A request's `params._meta.progressToken` (the body is parsed again: only for a
/// `tools/call` whose entry has `progress_extends`).
fn progress_token(body: &[u8]) -> Option<serde_json::Value> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let t = v
        .get_mut("params")?
        .get_mut("_meta")?
        .get_mut("progressToken")?
        .take();
    (t.is_string() || t.is_number()).then_some(t)
}

/// The answer to a POST body that is not one JSON-RPC message the gateway can read: the same
/// as the stdio door's (`serve::stdio_request`).
fn unreadable(body: &[u8]) -> Response {
    let (code, message) = match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
        Err(_) => (codes::PARSE_ERROR, "Parse error"),
        Ok(_) if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') => (
            codes::INVALID_REQUEST,
            "Invalid Request: batches are not supported; send one message per POST",
        ),
        Ok(_) => (
            codes::INVALID_REQUEST,
            "Invalid Request: not one JSON-RPC message (a JSON object, each key once)",
        ),
    };
    relay::rpc_error(StatusCode::BAD_REQUEST, None, code, message, None)
}

impl Call {
    /// What the relay reads of a POSTed body; `None` when it is not a JSON object the
    /// envelope reader can read strictly: the body goes upstream as it came, so a key given
    /// twice in what the policies read (the tool's name, `params`) or a field of another type
    /// must not leave them reading less than the upstream will.
    fn of(body: &[u8]) -> Option<Call> {
        // Strictly for a `tools/call` (what the policies read); leniently for the rest, which
        // the upstream answers as it will.
        let env = match Envelope::strict(body) {
            Some(env) => env,
            None => Envelope::parse(body).filter(|e| e.method.as_deref() != Some("tools/call"))?,
        };
        if env.kind() != Kind::Request {
            let cancels = (env.kind() == Kind::Notification
                && env.method.as_deref() == Some("notifications/cancelled"))
            .then(|| env.cancelled_id().map(str::to_owned))
            .flatten();
            return Some(Call {
                cancels,
                ..Call::default()
            });
        }
        let id = env.id_text().map(str::to_owned);
        let key = env.id_text().map(|i| canonical_id(i).into_owned());
        let method = env.method.as_deref().map(crate::metrics::method_label);
        Some(Call {
            id,
            key,
            method,
            tool_name: env.tool().map(str::to_owned),
            own_probe: false,
            permit: std::sync::Mutex::new(None),
            timer: None,
            progress: None,
            cancels: None,
            inflight: None,
        })
    }

    fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// Whether the tool's timeout, not the reply timeout due at `reply_due`, is what expired.
    fn tool_timed_out(&self, reply_due: Instant) -> bool {
        self.timer.as_ref().is_some_and(|t| t.before(reply_due))
    }

    /// Neither recorded nor judged: its permit, if any, handed back unjudged.
    fn forget(&self) {
        drop(self.permit.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    /// The answer to a request its client cancelled ([`Inflight`]): `-32800`, counted and
    /// logged but judging nothing (its breaker trial handed back, no threshold fed).
    fn cancelled(&self, upstream: &HttpUpstream, started: Instant) -> Response {
        Record::new(upstream, self, started).cancelled();
        relay::rpc_error(
            StatusCode::OK,
            self.id(),
            CANCELLED,
            CANCELLED_MESSAGE,
            None,
        )
    }

    /// The tool's timeout result for this request (the upstream exchange is dropped by the
    /// caller, which closes its connection; a legacy upstream is also sent a [`Cancel`]).
    fn time_out(&self, upstream: &HttpUpstream, started: Instant) -> Response {
        let (Some(timer), Some(id)) = (&self.timer, self.id()) else {
            return relay::plain(StatusCode::GATEWAY_TIMEOUT, "");
        };
        Record::new(upstream, self, started).timed_out(&timer.tool);
        let result = crate::policy::timeout_result(timer, "its upstream request was closed");
        relay::rpc_result(id, &result)
    }

    /// The gateway's own error answer to this request, recorded as a gateway error.
    fn refuse(
        &self,
        upstream: &HttpUpstream,
        started: Instant,
        status: StatusCode,
        code: i64,
        message: &str,
        label: Option<&str>,
    ) -> Response {
        self.record(upstream, started, Outcome::GatewayError);
        relay::rpc_error(status, self.id(), code, message, label)
    }

    /// Records the request in metrics (requests only: notifications and replies are not
    /// requests answered).
    fn record(&self, upstream: &HttpUpstream, started: Instant, outcome: Outcome) {
        Record::new(upstream, self, started).done(outcome);
    }
}

/// What records a request once its outcome is known (in a relayed stream, when its reply
/// passes).
struct Record {
    shared: Arc<Shared>,
    method: Option<&'static str>,
    tool: Option<String>,
    started: Instant,
    own_probe: bool,
    /// The call's admission: its outcome goes to the breaker.
    permit: std::sync::Mutex<Option<crate::policy::Permit>>,
}

impl Record {
    fn new(upstream: &HttpUpstream, call: &Call, started: Instant) -> Record {
        // As sent: Metrics::request bounds it (and labels only tools the upstream listed).
        let tool = match (call.method, &call.tool_name) {
            (Some("tools/call"), Some(t)) => Some(t.clone()),
            _ => None,
        };
        let permit = call.permit.lock().unwrap_or_else(|p| p.into_inner()).take();
        Record {
            shared: upstream.shared.clone(),
            method: call.method,
            tool,
            started,
            own_probe: call.own_probe,
            permit: std::sync::Mutex::new(permit),
        }
    }

    /// The call timed out at the gateway: counted, and a timeout for its breaker.
    fn timed_out(&self, tool: &str) {
        self.shared.metrics.tool_timeout(tool);
        self.end(
            Outcome::GatewayError,
            mcpulse_policy::breaker::Outcome::Failure(
                mcpulse_policy::breaker::FailureKind::Timeout,
            ),
        );
    }

    fn done(&self, outcome: Outcome) {
        self.end(outcome, crate::policy::outcome_of(outcome));
    }

    /// The client cancelled the call: its permit given back unjudged, counted and logged as
    /// a cancellation (no threshold fed).
    fn cancelled(&self) {
        drop(self.permit.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let (Some(method), false) = (self.method, self.own_probe) {
            crate::serve::record_cancelled(
                &self.shared,
                method,
                self.tool.as_deref(),
                self.started,
            );
        }
    }

    fn end(&self, outcome: Outcome, breaker: mcpulse_policy::breaker::Outcome) {
        let permit = self.permit.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(p) = permit {
            p.finish(breaker, &self.shared.metrics);
        }
        let Some(method) = self.method else { return };
        // The gateway's own probes, every few seconds, are neither counted nor logged.
        crate::serve::record(
            &self.shared,
            method,
            self.tool.as_deref(),
            self.started,
            outcome,
            self.own_probe,
        );
    }
}
