//! Alert sinks: turning an [`Alert`] into a webhook POST, a Slack message, a PagerDuty event,
//! an Alertmanager alert or a command run, and delivering it with retries.
//!
//! What this module owns:
//! - one pure payload builder per sink ([`webhook`], [`slack`], [`pagerduty`], [`alertmanager`],
//!   [`command`]), so every wire format is a value a test can compare;
//! - [`deliver`]: one attempt at one sink, classified as success, retryable or permanent
//!   ([`DeliveryError::is_permanent`]);
//! - [`matches`]: a sink's `targets` / `on` filters;
//! - [`next_attempt`]: the pure backoff policy;
//! - [`run_outbox`]: the delivery loop over a persisted [`Outbox`], one worker per sink.
//!
//! What it does not own: deciding *when* to alert (that is [`crate::alert`]), and storing the
//! outbox (the SQLite store implements [`Outbox`]).
//!
//! ## Delivery semantics
//!
//! Delivery is **at least once**. An alert is marked delivered only after the sink accepted it
//! (HTTP 2xx, or the command exited 0); a crash in between sends it again on restart. Receivers
//! fold repeats with the alert's `dedup_key`, which is the same on every replica and across
//! restarts: PagerDuty and Alertmanager do so natively, webhook receivers should.
//!
//! An attempt fails in one of two ways:
//! - **retryable**: a connection error, a timeout, HTTP 5xx, 408 or 429, a command that exited
//!   non-zero or was killed. Retried with [`next_attempt`]'s backoff — or later, when a 429 or
//!   503 says when in `Retry-After` (Slack's and PagerDuty's rate limits; at most an hour, see
//!   [`retry_after`]; the sink's other alerts wait as long) — for as long as it takes
//!   for a resolve, and up to [`OutboxOptions::expire`] for anything else (a page about an outage
//!   a day ago helps nobody; a resolve left undelivered would leave a page open forever);
//! - **permanent**: any other HTTP 4xx (the request itself is wrong: a revoked Slack webhook, a
//!   bad routing key), a redirect loop, a URL that is not one, a program that does not exist.
//!   Retrying cannot help, so the alert is set aside with its error.
//!
//! ## Sink identity
//!
//! An outbox row names its sink by a [`SinkId`] ([`sink_ids`]): the kind and a digest of the
//! destination (the URL; for PagerDuty the URL and routing key; for a command its argv), e.g.
//! `slack-3f1c0a9e5d2b7c41`. It does not depend on the sink's place in `[[alerts]]`, so
//! reordering, adding or removing sinks and reloading leaves every pending row addressed to
//! the same receiver; changing a sink's destination makes it a new sink. Secrets, headers and
//! filters are not part of it (rotating a webhook secret keeps the queue). Two sinks with the
//! same destination are told apart by their order among themselves (`…-2`, `…-3`).
//!
//! Secrets stay out of logs by construction: a sink is logged as its kind, index and identity
//! (`slack #2 (slack-3f1c…)`), never its URL (a Slack webhook URL *is* the credential; the
//! identity is a truncated SHA-256, which does not reveal it); config headers travel as
//! [`HttpPost::secret_headers`], which are redacted in `Debug` and dropped on a cross-origin
//! redirect.

pub mod alertmanager;
pub mod command;
pub mod pagerduty;
pub mod slack;
pub mod webhook;

use crate::alert::{Action, Alert, Kind};
use crate::config::{AlertConfig, SinkKind};
use http::{Method, Uri};
use mcpulse_transport::clock::Clock;
use mcpulse_transport::http::{HttpClient, Outgoing, SendError, read_body};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// How long one delivery attempt may take, connect to last byte (or command start to exit).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How much of an error response body is kept in the error message.
const ERROR_BODY: usize = 512;

// ---- requests ----------------------------------------------------------------------------

/// One HTTP POST a sink makes, built purely from an alert.
#[derive(Clone, PartialEq)]
pub struct HttpPost {
    pub url: String,
    /// Protocol headers (content type, signature): safe to log.
    pub headers: Vec<(String, String)>,
    /// Headers from the config: may carry credentials. Redacted in `Debug`, and not sent on if
    /// a redirect leaves the URL's origin.
    pub secret_headers: Vec<(String, String)>,
    pub body: String,
}

impl std::fmt::Debug for HttpPost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL path can be the credential (Slack): show the origin only.
        let origin = self
            .url
            .parse::<Uri>()
            .map(|u| mcpulse_transport::http::origin(&u))
            .unwrap_or_else(|_| "<not a URL>".to_owned());
        let secret: Vec<(&str, &str)> = self
            .secret_headers
            .iter()
            .map(|(k, _)| (k.as_str(), mcpulse_wire::redact::REDACTED))
            .collect();
        f.debug_struct("HttpPost")
            .field("origin", &origin)
            .field("headers", &self.headers)
            .field("secret_headers", &secret)
            .field("body", &self.body)
            .finish()
    }
}

/// Why one delivery attempt failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// The sink answered, but not with 2xx.
    #[error("the sink answered HTTP {status}{}", quoted(.body))]
    Status {
        status: u16,
        body: String,
        /// How long the sink asked us to wait (`Retry-After` of a 429 or 503), capped at
        /// [`RETRY_AFTER_CAP_MS`].
        retry_after_ms: Option<i64>,
    },
    /// DNS, connect, TLS or the HTTP exchange failed.
    #[error("{0}")]
    Unreachable(String),
    /// No answer (or no exit) in time.
    #[error("no answer within {}", human_duration(.0.as_millis()))]
    Timeout(Duration),
    /// The request cannot be made: a URL that is not one, too many redirects, a payload that
    /// cannot be encoded.
    #[error("{0}")]
    Invalid(String),
    /// The command could not be started.
    #[error("{program}: {message}")]
    Spawn {
        program: String,
        message: String,
        permanent: bool,
    },
    /// The command ran and failed.
    #[error("{program} {status}{}", quoted(.stderr))]
    Exit {
        program: String,
        /// `exited with status 3` or `was killed by signal 9`.
        status: String,
        stderr: String,
    },
    /// The outbox names a sink the configuration no longer has.
    #[error("no sink {0} in the configuration")]
    NoSink(SinkId),
    /// Past [`OutboxOptions::expire`] when its turn came (it waited out a sink's
    /// `Retry-After`): not sent.
    #[error("{0}")]
    Expired(String),
}

impl DeliveryError {
    /// Whether retrying cannot help (see the module docs).
    pub fn is_permanent(&self) -> bool {
        match self {
            DeliveryError::Status { status, .. } => {
                !(*status >= 500 || *status == 408 || *status == 429)
            }
            DeliveryError::Unreachable(_)
            | DeliveryError::Timeout(_)
            | DeliveryError::Exit { .. } => false,
            DeliveryError::Invalid(_) | DeliveryError::NoSink(_) | DeliveryError::Expired(_) => {
                true
            }
            DeliveryError::Spawn { permanent, .. } => *permanent,
        }
    }
}

fn quoted(body: &str) -> String {
    let b = body.trim();
    if b.is_empty() {
        String::new()
    } else {
        format!(": {b:?}")
    }
}

pub(crate) use mcpulse_wire::units::{format_rfc3339 as rfc3339, human_duration};

/// Serializes a payload. Our payload types cannot fail to encode, but an error is still an
/// error, not a panic.
pub(crate) fn to_json<T: Serialize>(v: &T) -> Result<String, DeliveryError> {
    serde_json::to_string(v)
        .map_err(|e| DeliveryError::Invalid(format!("could not encode the alert as JSON: {e}")))
}

/// The wall clock, Unix milliseconds.
pub(crate) fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A sink's stable identity: its kind and a digest of its destination (see the module docs).
/// Outbox rows are addressed by it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SinkId(String);

impl SinkId {
    /// An identity as stored (tests and the store build them from text).
    pub fn new(id: impl Into<String>) -> SinkId {
        SinkId(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SinkId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The identity of every configured sink, in config order. Sinks with the same destination
/// get `-2`, `-3`, … after the first, in their order among themselves, so the identities of
/// one config are distinct.
pub fn sink_ids(sinks: &[AlertConfig]) -> Vec<SinkId> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    sinks
        .iter()
        .map(|cfg| {
            let base = destination_id(&cfg.kind);
            let n = seen.entry(base.clone()).or_insert(0);
            *n += 1;
            if *n == 1 {
                SinkId(base)
            } else {
                SinkId(format!("{base}-{n}"))
            }
        })
        .collect()
}

/// `<kind>-<16 hex digits of SHA-256 over the kind and the destination>`; every part is
/// length-prefixed, so no two destinations share an encoding.
fn destination_id(kind: &SinkKind) -> String {
    let mut h = Sha256::new();
    let mut part = |p: &str| {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    };
    part(sink_name(kind));
    match kind {
        SinkKind::Webhook { url, .. }
        | SinkKind::Slack { url }
        | SinkKind::Alertmanager { url, .. } => part(url),
        SinkKind::PagerDuty { routing_key, url } => {
            part(url);
            part(routing_key);
        }
        // The env allowlist is left out: widening it is the same sink, with its pending alerts.
        SinkKind::Command { argv, .. } => {
            for a in argv {
                part(a);
            }
        }
    }
    let d = h.finalize();
    let mut id = String::from(sink_name(kind));
    id.push('-');
    for b in &d[..8] {
        id.push_str(&format!("{b:02x}"));
    }
    id
}

/// A sink's kind, for logs (never its URL).
pub fn sink_name(sink: &SinkKind) -> &'static str {
    match sink {
        SinkKind::Webhook { .. } => "webhook",
        SinkKind::Slack { .. } => "slack",
        SinkKind::PagerDuty { .. } => "pagerduty",
        SinkKind::Alertmanager { .. } => "alertmanager",
        SinkKind::Command { .. } => "command",
    }
}

// ---- one attempt -------------------------------------------------------------------------

/// One attempt to deliver `alert` to `sink`, within `timeout`.
///
/// A PagerDuty sink given a [`Action::Notify`] alert sends nothing and succeeds: one-off change
/// notices have no incident to open or close (see [`pagerduty`]).
pub async fn deliver(
    sink: &SinkKind,
    alert: &Alert,
    timeout: Duration,
) -> Result<(), DeliveryError> {
    let deadline = Instant::now() + timeout;
    match sink {
        SinkKind::Webhook {
            url,
            secret,
            headers,
        } => {
            let req = webhook::request(url, secret.as_deref(), headers, alert, wall_ms())?;
            post(&req, timeout, deadline).await
        }
        SinkKind::Slack { url } => post(&slack::request(url, alert)?, timeout, deadline).await,
        SinkKind::PagerDuty { routing_key, url } => {
            match pagerduty::request(url, routing_key, alert)? {
                Some(req) => post(&req, timeout, deadline).await,
                None => Ok(()),
            }
        }
        SinkKind::Alertmanager { url, .. } => {
            // One post at a time per Alertmanager, in order with the re-sends of open
            // incidents ([`alertmanager::resend`]).
            let _turn = alertmanager::turn(url).await;
            post(&alertmanager::request(url, alert)?, timeout, deadline).await
        }
        SinkKind::Command { argv, env } => command::run(argv, env, alert, timeout).await,
    }
}

/// POSTs with the project's own HTTP client (https through rustls), and classifies the answer.
pub(crate) async fn post(
    req: &HttpPost,
    timeout: Duration,
    deadline: Instant,
) -> Result<(), DeliveryError> {
    // The URL is never echoed in an error: its path may be the credential.
    let uri: Uri = req
        .url
        .parse()
        .map_err(|_| DeliveryError::Invalid("the sink URL is not a valid URL".into()))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(DeliveryError::Invalid(
            "the sink URL must be http:// or https:// with a host".into(),
        ));
    }
    let out = Outgoing {
        method: Method::POST,
        uri,
        headers: req.headers.clone(),
        user_headers: &req.secret_headers,
        body: Some(req.body.clone()),
    };
    let mut client = HttpClient::new(Clock::start());
    let mut redirects = Vec::new();
    let mut resp = match client.send(&out, false, deadline, &mut redirects).await {
        Ok(r) => r,
        Err(SendError::Timeout) => return Err(DeliveryError::Timeout(timeout)),
        Err(e @ SendError::Connect(_)) => return Err(DeliveryError::Unreachable(e.to_string())),
        Err(e @ (SendError::Invalid(_) | SendError::Redirects(_))) => {
            return Err(DeliveryError::Invalid(e.to_string()));
        }
    };
    let status = resp.status().as_u16();
    if (200..300).contains(&status) {
        // Accepted. The body is not read: a receiver that stalls after its 2xx must not turn
        // a delivered alert into a retry (and a duplicate).
        return Ok(());
    }
    let retry_after_ms = if matches!(status, 429 | 503) {
        resp.headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after(v, std::time::SystemTime::now()))
    } else {
        None
    };
    let (body, _) = read_body(resp.body_mut(), ERROR_BODY, deadline).await;
    // Line breaks of an error page read better as spaces; what is left (bidi, invisible
    // characters) the text rule escapes, and cuts.
    let body = String::from_utf8_lossy(&body)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>();
    Err(DeliveryError::Status {
        status,
        body: mcpulse_wire::text::inert(body.trim(), 200).into_owned(),
        retry_after_ms,
    })
}

/// The longest `Retry-After` honoured: a sink asking for more is asked again after an hour.
pub const RETRY_AFTER_CAP_MS: i64 = 3_600_000;

/// A `Retry-After` value (RFC 9110 §10.2.3: delay-seconds or an HTTP-date) as milliseconds from
/// `now`, capped at [`RETRY_AFTER_CAP_MS`]; `None` when it is neither.
pub fn retry_after(value: &str, now: std::time::SystemTime) -> Option<i64> {
    let v = value.trim();
    let ms = if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        // Seconds; a number too long for u64 is "very long".
        v.parse::<u64>().map_or(i64::MAX, |s| {
            i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)
        })
    } else {
        let at = httpdate::parse_http_date(v).ok()?;
        at.duration_since(now)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    };
    Some(ms.min(RETRY_AFTER_CAP_MS))
}

// ---- filters -------------------------------------------------------------------------------

/// Whether a sink wants this alert: its `targets` (empty: all) and `on` kinds (empty: all).
///
/// Two rules on top of the literal filters:
/// - PagerDuty never takes [`Action::Notify`] alerts (no incident to open or close);
/// - a resolve sent because its target was removed from the config ([`Alert::removed`])
///   passes the `targets` filter: the new config cannot name the target, and the daemon
///   queued it only for the sinks that took the incident;
/// - an incident sink (PagerDuty, Alertmanager) subscribed to `down` or `degraded` also gets the
///   resolve of that incident (kind `recovered`) even if `on` does not list it: otherwise the
///   page it opened would never close. Chat-like sinks take `on` literally.
pub fn matches(cfg: &AlertConfig, alert: &Alert) -> bool {
    let incident_sink = matches!(
        cfg.kind,
        SinkKind::PagerDuty { .. } | SinkKind::Alertmanager { .. }
    );
    if matches!(cfg.kind, SinkKind::PagerDuty { .. }) && alert.action == Action::Notify {
        return false;
    }
    let target = cfg.targets.is_empty()
        || cfg.targets.contains(&alert.target)
        || (alert.removed && alert.action == Action::Resolve);
    let on = |k: &str| cfg.on.iter().any(|o| o == k);
    let kind = cfg.on.is_empty()
        || on(alert.kind.as_str())
        || (incident_sink
            && alert.kind == Kind::Recovered
            && alert.action == Action::Resolve
            && (on("down") || on("degraded")));
    target && kind
}

// ---- backoff -------------------------------------------------------------------------------

/// The first retry comes after about this long…
pub const BACKOFF_BASE_MS: i64 = 1_000;
/// …doubling up to this cap.
pub const BACKOFF_CAP_MS: i64 = 300_000;

/// When to try again after `attempts` failed attempts (1 after the first failure).
///
/// Exponential backoff with *equal jitter* (conventions §5.4): the ceiling is
/// `min(5 min, 1 s · 2^(attempts-1))` and the delay is uniform in `[ceiling/2, ceiling]`:
/// 0.5–1 s, 1–2 s, 2–4 s, … and 150–300 s from the 10th failure on. Half the ceiling is a floor
/// so that a sink that is down is never hammered (full jitter can retry after ~0 ms); the other
/// half spreads the alerts of one outage so they do not retry in lockstep against a sink that
/// just came back.
///
/// The jitter is derived from SHA-256 of `(dedup_key, attempts)` rather than a random number:
/// the same inputs always give the same time, so the schedule is testable and a restart does
/// not reshuffle it, while different incidents still spread out.
pub fn next_attempt(attempts: u32, now_ms: i64, dedup_key: &str) -> i64 {
    let n = attempts.max(1);
    let ceiling = BACKOFF_BASE_MS
        .saturating_mul(1i64 << (n - 1).min(20))
        .min(BACKOFF_CAP_MS);
    let mut h = Sha256::new();
    h.update(dedup_key.as_bytes());
    h.update([0]);
    h.update(n.to_be_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    let half = ceiling / 2;
    // A uniform draw in [0, half].
    let jitter = ((u128::from(u64::from_be_bytes(b)) * (half as u128 + 1)) >> 64) as i64;
    now_ms.saturating_add(ceiling - half + jitter)
}

// ---- logging -------------------------------------------------------------------------------

/// The log line for one alert: written once when the policy emits it, whatever the sinks.
pub fn log(alert: &Alert) {
    let action = match alert.action {
        Action::Trigger => "trigger",
        Action::Resolve => "resolve",
        Action::Remind => "remind",
        Action::Notify => "notify",
    };
    tracing::info!(
        target: "mcpulse::alert",
        dedup_key = %alert.dedup_key,
        action,
        kind = alert.kind.as_str(),
        mcp_target = %alert.target,
        severity = %alert.severity,
        started_at = %rfc3339(alert.started_ms),
        "{}",
        alert.summary
    );
}

// ---- the outbox loop -----------------------------------------------------------------------

/// The persisted queue of (alert, sink) deliveries, as the delivery loop sees it.
///
/// The contract the loop relies on:
/// - `due` returns rows whose next attempt time is `<= now_ms`, oldest (lowest id) first, at
///   most `limit`; `attempts` is the number of attempts already made (0 for a new row);
/// - **order within an incident**: for one `(sink, dedup_key)`, `due` returns only the
///   oldest row that is neither delivered nor permanently failed, and only when that row is due.
///   So a resolve never overtakes its trigger while the trigger waits for a retry. (SQL:
///   `AND NOT EXISTS (SELECT 1 FROM outbox o2 WHERE o2.sink = o.sink AND o2.dedup_key =
///   o.dedup_key AND o2.id < o.id AND <o2 pending>)`);
/// - `delivered` and `failed` record the outcome; `failed` with `permanent` sets the row aside
///   for good (not returned by `due` again); otherwise it increments the attempts and sets the
///   next attempt time to `next_ms`.
///
/// Rows in flight are still "pending" to the store; the loop skips those itself.
///
/// The methods are futures so that an implementation over a blocking store can run its
/// queries off the async threads (the daemon's uses `spawn_blocking`).
pub trait Outbox: Send {
    fn due(
        &mut self,
        now_ms: i64,
        limit: usize,
    ) -> impl Future<Output = Vec<(i64, SinkId, Alert, u32)>> + Send;
    fn delivered(&mut self, id: i64, at_ms: i64) -> impl Future<Output = ()> + Send;
    fn failed(
        &mut self,
        id: i64,
        error: &str,
        next_ms: i64,
        permanent: bool,
    ) -> impl Future<Output = ()> + Send;
}

/// What the loop delivers with: the configured sinks, or a test double.
pub trait Deliver: Send + Sync + 'static {
    /// One attempt at sink `sink`. The loop also bounds it by [`OutboxOptions::timeout`].
    fn deliver(
        &self,
        sink: &SinkId,
        alert: &Alert,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), DeliveryError>> + Send;

    /// How a sink appears in logs: its kind, index and identity, never its URL.
    fn describe(&self, sink: &SinkId) -> String {
        format!("sink {sink}")
    }
}

/// The configured sinks, shared with the config reload (SIGHUP swaps the list in place).
///
/// An alert a sink's filters do not take ([`matches`]) counts as delivered without a request:
/// the filters are applied at delivery time, so they are the current config's.
pub struct Sinks(pub Arc<RwLock<Vec<AlertConfig>>>);

impl Sinks {
    /// The sink with this identity in the current config, and its index there.
    fn get(&self, sink: &SinkId) -> Option<(usize, AlertConfig)> {
        let sinks = self.0.read().unwrap_or_else(|p| p.into_inner());
        let at = sink_ids(&sinks).iter().position(|id| id == sink)?;
        sinks.get(at).cloned().map(|cfg| (at, cfg))
    }
}

impl Deliver for Sinks {
    fn deliver(
        &self,
        sink: &SinkId,
        alert: &Alert,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), DeliveryError>> + Send {
        let cfg = self.get(sink);
        let id = sink.clone();
        async move {
            let Some((_, cfg)) = cfg else {
                return Err(DeliveryError::NoSink(id));
            };
            if !matches(&cfg, alert) {
                tracing::debug!(sink = %id, dedup_key = %alert.dedup_key, "not for this sink's filters");
                return Ok(());
            }
            deliver(&cfg.kind, alert, timeout).await
        }
    }

    fn describe(&self, sink: &SinkId) -> String {
        match self.get(sink) {
            Some((at, cfg)) => format!("{} #{at} ({sink})", sink_name(&cfg.kind)),
            None => format!("sink {sink} (not configured)"),
        }
    }
}

/// A wall clock that advances with `tokio::time` (so paused-time tests control it).
#[derive(Debug, Clone, Copy)]
pub struct Timebase {
    wall_ms: i64,
    at: Instant,
}

impl Timebase {
    /// Now, from the system clock.
    pub fn system() -> Timebase {
        Timebase::starting_at(wall_ms())
    }

    /// `wall_ms` now, then advancing with `tokio::time::Instant`.
    pub fn starting_at(wall_ms: i64) -> Timebase {
        Timebase {
            wall_ms,
            at: Instant::now(),
        }
    }

    pub fn now_ms(&self) -> i64 {
        let elapsed = i64::try_from(self.at.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.wall_ms.saturating_add(elapsed)
    }
}

/// The loop's settings.
#[derive(Debug, Clone)]
pub struct OutboxOptions {
    /// How often to look for due retries (new alerts also wake the loop at once).
    pub poll: Duration,
    /// The most new rows taken per look.
    pub batch: usize,
    /// One attempt's time limit.
    pub timeout: Duration,
    /// Stop retrying a trigger, reminder or notice this long after it was raised. Resolves are
    /// retried for as long as it takes.
    pub expire: Duration,
    pub clock: Timebase,
}

impl Default for OutboxOptions {
    fn default() -> Self {
        OutboxOptions {
            poll: Duration::from_secs(1),
            batch: 64,
            timeout: DEFAULT_TIMEOUT,
            expire: Duration::from_secs(24 * 3600),
            clock: Timebase::system(),
        }
    }
}

/// Delivers the outbox to the configured sinks until `shutdown` turns true (or its sender
/// goes). `wake` is notified when new alerts are stored. Returns the outbox.
pub async fn run_outbox<O: Outbox>(
    outbox: O,
    sinks: Arc<RwLock<Vec<AlertConfig>>>,
    wake: Arc<Notify>,
    shutdown: watch::Receiver<bool>,
) -> O {
    run_outbox_with(
        outbox,
        Sinks(sinks),
        wake,
        shutdown,
        OutboxOptions::default(),
    )
    .await
}

struct Job {
    id: i64,
    alert: Alert,
    attempts: u32,
}

struct Done {
    id: i64,
    sink: SinkId,
    alert: Alert,
    /// Attempts made, this one included.
    attempts: u32,
    result: Result<(), DeliveryError>,
}

/// [`run_outbox`] with any [`Deliver`] and explicit options.
///
/// Shape: this task owns the outbox (all store calls happen here, one at a time) and one
/// worker task per sink, each delivering its own queue in order. A slow or hanging sink holds
/// up only its own queue, and only for [`OutboxOptions::timeout`] per attempt; the checks never
/// wait on any of it. On shutdown the workers are aborted mid-attempt (a command's process group
/// is killed); those rows stay pending and are sent again on the next start.
pub async fn run_outbox_with<O: Outbox, D: Deliver>(
    mut outbox: O,
    deliverer: D,
    wake: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
    opts: OutboxOptions,
) -> O {
    let deliverer = Arc::new(deliverer);
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
    let mut workers = JoinSet::new();
    let mut queues: HashMap<SinkId, mpsc::UnboundedSender<Job>> = HashMap::new();
    // id -> (sink, dedup_key) of every row handed to a worker and not yet recorded.
    let mut in_flight: HashMap<i64, (SinkId, String)> = HashMap::new();
    let mut tick = tokio::time::interval(opts.poll.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if *shutdown.borrow_and_update() {
            break;
        }
        tokio::select! {
            biased;
            changed = shutdown.changed() => {
                if changed.is_err() {
                    break;
                }
                continue;
            }
            Some(done) = done_rx.recv() => {
                record(&mut outbox, &*deliverer, &mut in_flight, done, &opts).await;
                while let Ok(done) = done_rx.try_recv() {
                    record(&mut outbox, &*deliverer, &mut in_flight, done, &opts).await;
                }
            }
            _ = wake.notified() => {}
            _ = tick.tick() => {}
        }
        // After any of these, look: a finished delivery may have unblocked the next alert of
        // its incident, a wake means new rows, a tick means retries may be due.
        let now = opts.clock.now_ms();
        let rows = outbox
            .due(now, opts.batch.saturating_add(in_flight.len()))
            .await;
        let mut busy: HashSet<(SinkId, String)> = in_flight.values().cloned().collect();
        for (id, sink, alert, attempts) in rows {
            if in_flight.contains_key(&id) {
                continue;
            }
            let key = (sink.clone(), alert.dedup_key.clone());
            if busy.contains(&key) {
                continue; // an earlier alert of this incident is still on its way to this sink
            }
            if let Some(error) = expired(&alert, attempts, now, opts.expire) {
                tracing::error!(sink = %deliverer.describe(&sink), dedup_key = %alert.dedup_key, %error, "alert not delivered");
                outbox.failed(id, &error, now, true).await;
                continue;
            }
            let queue = queues.entry(sink.clone()).or_insert_with(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                workers.spawn(worker(
                    sink,
                    deliverer.clone(),
                    WorkerOptions {
                        timeout: opts.timeout,
                        expire: opts.expire,
                        clock: opts.clock,
                    },
                    rx,
                    done_tx.clone(),
                ));
                tx
            });
            if queue
                .send(Job {
                    id,
                    alert,
                    attempts,
                })
                .is_ok()
            {
                busy.insert(key.clone());
                in_flight.insert(id, key);
            }
        }
    }
    // Record what already finished; abort the rest (they stay pending in the store).
    while let Ok(done) = done_rx.try_recv() {
        record(&mut outbox, &*deliverer, &mut in_flight, done, &opts).await;
    }
    workers.shutdown().await;
    outbox
}

/// Why an alert is no longer worth sending, if it is not: a trigger, reminder or notice raised
/// longer than `expire` ago (resolves are always sent).
fn expired(alert: &Alert, attempts: u32, now_ms: i64, expire: Duration) -> Option<String> {
    let age = now_ms.saturating_sub(alert.at_ms);
    (alert.action != Action::Resolve && age > i64::try_from(expire.as_millis()).unwrap_or(i64::MAX))
        .then(|| {
            format!(
                "gave up after {attempts} attempts: the alert is {} old",
                human_duration(u128::try_from(age).unwrap_or(0))
            )
        })
}

/// What a sink's worker needs of the loop's settings.
#[derive(Clone, Copy)]
struct WorkerOptions {
    timeout: Duration,
    expire: Duration,
    clock: Timebase,
}

/// Delivers one sink's queue, in order. When the sink says when to come back (a 429 or 503
/// with `Retry-After`), the whole queue waits that long, not only the alert that got it: the
/// limit is the sink's. The waiting rows stay in flight, so they take nothing from the other
/// sinks' turn; on shutdown they stay pending. An alert that expired while it waited is not
/// sent (see [`OutboxOptions::expire`]).
async fn worker<D: Deliver>(
    sink: SinkId,
    deliverer: Arc<D>,
    opts: WorkerOptions,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    done: mpsc::UnboundedSender<Done>,
) {
    let timeout = opts.timeout;
    while let Some(job) = jobs.recv().await {
        let now = opts.clock.now_ms();
        let result = if let Some(why) = expired(&job.alert, job.attempts, now, opts.expire) {
            Err(DeliveryError::Expired(why))
        } else {
            match tokio::time::timeout(timeout, deliverer.deliver(&sink, &job.alert, timeout)).await
            {
                Ok(r) => r,
                Err(_) => Err(DeliveryError::Timeout(timeout)),
            }
        };
        let attempts = if matches!(result, Err(DeliveryError::Expired(_))) {
            job.attempts
        } else {
            job.attempts.saturating_add(1)
        };
        let pause = match &result {
            Err(DeliveryError::Status {
                retry_after_ms: Some(wait),
                ..
            }) => Some(Duration::from_millis(u64::try_from(*wait).unwrap_or(0))),
            _ => None,
        };
        let finished = Done {
            id: job.id,
            sink: sink.clone(),
            alert: job.alert,
            attempts,
            result,
        };
        if done.send(finished).is_err() {
            return;
        }
        if let Some(pause) = pause {
            tokio::time::sleep(pause).await;
        }
    }
}

async fn record<O: Outbox, D: Deliver>(
    outbox: &mut O,
    deliverer: &D,
    in_flight: &mut HashMap<i64, (SinkId, String)>,
    done: Done,
    opts: &OutboxOptions,
) {
    in_flight.remove(&done.id);
    let now = opts.clock.now_ms();
    let sink = deliverer.describe(&done.sink);
    match done.result {
        Ok(()) => {
            tracing::debug!(%sink, dedup_key = %done.alert.dedup_key, attempts = done.attempts, "alert delivered");
            outbox.delivered(done.id, now).await;
        }
        Err(e) if e.is_permanent() => {
            tracing::error!(%sink, dedup_key = %done.alert.dedup_key, attempts = done.attempts, error = %e, "alert not delivered; not retrying");
            outbox.failed(done.id, &e.to_string(), now, true).await;
        }
        Err(e) => {
            // The backoff, or later if the sink said when (a rate limit's Retry-After).
            let mut next = next_attempt(done.attempts, now, &done.alert.dedup_key);
            if let DeliveryError::Status {
                retry_after_ms: Some(wait),
                ..
            } = &e
            {
                next = next.max(now.saturating_add(*wait));
            }
            tracing::warn!(%sink, dedup_key = %done.alert.dedup_key, attempts = done.attempts, error = %e, retry_in_ms = next - now, "alert delivery failed; will retry");
            outbox.failed(done.id, &e.to_string(), next, false).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_seconds_or_a_date_capped_at_an_hour() {
        use std::time::{Duration, UNIX_EPOCH};
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480); // Wed, 21 Oct 2015 07:28:00 GMT
        assert_eq!(retry_after("120", now), Some(120_000));
        assert_eq!(retry_after(" 0 ", now), Some(0));
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:29:30 GMT", now),
            Some(90_000)
        );
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now), Some(0));
        assert_eq!(retry_after("86400", now), Some(RETRY_AFTER_CAP_MS));
        assert_eq!(
            retry_after("99999999999999999999999", now),
            Some(RETRY_AFTER_CAP_MS)
        );
        assert_eq!(retry_after("-5", now), None);
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("", now), None);
    }

    fn sink(kind: SinkKind, targets: &[&str]) -> AlertConfig {
        AlertConfig {
            kind,
            targets: targets.iter().map(|t| (*t).to_owned()).collect(),
            on: Vec::new(),
        }
    }

    fn hook(url: &str) -> SinkKind {
        SinkKind::Webhook {
            url: url.into(),
            secret: None,
            headers: Vec::new(),
        }
    }

    #[test]
    fn sink_identities_follow_the_destination_not_the_position() {
        let slack = sink(
            SinkKind::Slack {
                url: "https://hooks.slack.example/T/B/x".into(),
            },
            &[],
        );
        let a = sink(hook("https://a.example/hook"), &[]);
        let ids = sink_ids(&[a.clone(), slack.clone()]);
        assert!(ids[0].as_str().starts_with("webhook-"), "{}", ids[0]);
        assert!(ids[1].as_str().starts_with("slack-"), "{}", ids[1]);
        assert!(!ids[1].as_str().contains("hooks.slack"), "no URL in it");
        // Reordered, or with another sink in front: the same identities.
        assert_eq!(
            sink_ids(&[slack.clone(), a.clone()]),
            vec![ids[1].clone(), ids[0].clone()]
        );
        let other = sink(hook("https://b.example/hook"), &[]);
        assert_eq!(sink_ids(&[other, a.clone()])[1], ids[0]);
        // Filters and secrets are not the destination; the URL is.
        let mut filtered = sink(
            SinkKind::Webhook {
                url: "https://a.example/hook".into(),
                secret: Some("s".into()),
                headers: vec![("X-A".into(), "b".into())],
            },
            &["search"],
        );
        filtered.on = vec!["down".into()];
        assert_eq!(sink_ids(std::slice::from_ref(&filtered))[0], ids[0]);
        assert_ne!(
            sink_ids(&[sink(hook("https://a.example/hook2"), &[])])[0],
            ids[0]
        );
        let pd = |key: &str| {
            sink(
                SinkKind::PagerDuty {
                    routing_key: key.into(),
                    url: "https://events.example/v2/enqueue".into(),
                },
                &[],
            )
        };
        assert_ne!(sink_ids(&[pd("k1")])[0], sink_ids(&[pd("k2")])[0]);
        // The same destination twice: distinct identities, by their order among themselves.
        let twice = sink_ids(&[a.clone(), slack, a]);
        assert_eq!(twice[0], ids[0]);
        assert_eq!(twice[2].as_str(), format!("{}-2", ids[0]));
    }

    #[test]
    fn a_resolve_for_a_removed_target_passes_the_targets_filter() {
        let cfg = sink(hook("https://a.example/hook"), &["other"]);
        let mut a = Alert {
            dedup_key: "k".into(),
            action: Action::Resolve,
            kind: Kind::Recovered,
            target: "gone".into(),
            severity: "info".into(),
            summary: String::new(),
            at_ms: 0,
            started_ms: 0,
            labels: Default::default(),
            removed: false,
        };
        assert!(!matches(&cfg, &a));
        a.removed = true;
        assert!(matches(&cfg, &a));
        a.action = Action::Trigger;
        assert!(!matches(&cfg, &a), "only resolves");
    }

    #[test]
    fn classification() {
        let s = |status| DeliveryError::Status {
            retry_after_ms: None,
            status,
            body: String::new(),
        };
        for p in [400, 401, 403, 404, 410, 422, 301] {
            assert!(s(p).is_permanent(), "{p}");
        }
        for r in [408, 429, 500, 502, 503] {
            assert!(!s(r).is_permanent(), "{r}");
        }
    }
}
