//! Alert sinks: turning an [`Alert`] into a webhook POST, a Slack message, a PagerDuty event,
//! an Alertmanager alert or a command run, and delivering it with retries.
//!
//! What this module owns:
//! - one pure payload builder per sink ([`webhook`], [`slack`], [`pagerduty`], [`alertmanager`],
//!   [`command`]), so every wire format is a value a test can compare;
//! - [`HttpPost`] and [`DeliveryError`]: the request a sink makes and why an attempt failed;
//! - [`SinkId`]: a sink's stable identity; [`matches`](fn@matches): a sink's `targets` / `on` filters;
//! - [`delivery`]: one attempt at one sink ([`deliver`]), classified as success, retryable or
//!   permanent ([`DeliveryError::is_permanent`]), and the per-sink workers;
//! - [`backoff`]: the pure retry policy ([`next_attempt`], [`retry_after`], expiry);
//! - [`outbox`]: the delivery loop over a persisted [`Outbox`], one worker per sink
//!   ([`run_outbox`]).
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
pub mod backoff;
pub mod command;
pub mod delivery;
pub mod outbox;
pub mod pagerduty;
pub mod slack;
pub mod webhook;

// The paths these had before the split into `backoff`, `delivery` and `outbox`.
pub use crate::clock::Timebase;
pub use backoff::{BACKOFF_BASE_MS, BACKOFF_CAP_MS, RETRY_AFTER_CAP_MS, next_attempt, retry_after};
pub(crate) use delivery::post;
pub use delivery::{Deliver, Sinks, deliver, deliver_to, hide};
pub use outbox::{Outbox, OutboxOptions, run_outbox, run_outbox_with};

use crate::alert::{Action, Alert, Kind};
use crate::config::{AlertConfig, SinkKind};
use http::Uri;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::time::Duration;

/// How long one delivery attempt may take, connect to last byte (or command start to exit).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// The error with `secrets` hidden in what it quotes (a transport error naming the URL, a
    /// sink's answer, a command's stderr echoing what it was passed): it is logged and stored
    /// (the status page's alerts table shows it).
    pub fn hidden(self, secrets: &mcpulse_wire::redact::Secrets) -> DeliveryError {
        if secrets.is_empty() {
            return self;
        }
        match self {
            DeliveryError::Status {
                status,
                body,
                retry_after_ms,
            } => DeliveryError::Status {
                status,
                body: secrets.hide(&body),
                retry_after_ms,
            },
            DeliveryError::Unreachable(m) => DeliveryError::Unreachable(secrets.hide(&m)),
            DeliveryError::Invalid(m) => DeliveryError::Invalid(secrets.hide(&m)),
            DeliveryError::Expired(m) => DeliveryError::Expired(secrets.hide(&m)),
            DeliveryError::Spawn {
                program,
                message,
                permanent,
            } => DeliveryError::Spawn {
                program,
                message: secrets.hide(&message),
                permanent,
            },
            DeliveryError::Exit {
                program,
                status,
                stderr,
            } => DeliveryError::Exit {
                program,
                status,
                stderr: secrets.hide(&stderr),
            },
            other => other,
        }
    }

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

// ---- text for chat renderers -------------------------------------------------------------

/// The mentions a chat renderer turns into a page of everyone in a channel: Slack's and
/// Mattermost's `@channel`, `@here`, `@all`, Discord's `@everyone` (and `@here`).
const MENTIONS: &[&str] = &["channel", "here", "all", "everyone"];

/// What an `@` before a [`MENTIONS`] word becomes: the full-width commercial at (U+FF20), which
/// reads the same and pings nobody. Not an invisible joiner after the `@`: the text rule
/// ([`mcpulse_wire::text`]) shows those as escapes (`\u{2060}`), by design.
pub const MENTION_AT: char = '\u{ff20}';

/// `s` with every `@channel`, `@here`, `@all` and `@everyone` (any case, and any word that
/// starts so: `@channels` too) given [`MENTION_AT`] in place of its `@`, so that text a server
/// chose cannot ping a channel through a sink whose receiver renders mentions (Slack, or
/// Mattermost and Discord through their Slack-compatible webhooks, or Alertmanager's chat
/// templates). Other `@`s (`ops@example.com`) are left as they are.
pub fn defuse_mentions(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, c) in s.char_indices() {
        let rest = s.get(i + c.len_utf8()..).unwrap_or_default();
        let mention = c == '@'
            && MENTIONS.iter().any(|m| {
                rest.get(..m.len())
                    .is_some_and(|w| w.eq_ignore_ascii_case(m))
            });
        out.push(if mention { MENTION_AT } else { c });
    }
    out
}

/// Server text for a receiver that renders it as chat markup without escaping it first, as
/// Alertmanager's usual Slack templates do with annotations and labels: inert and cut to `max`
/// characters ([`mcpulse_wire::text::inert`]), then `<`, `>` and `&` replaced by their
/// full-width look-alikes (`＜`, `＞`, `＆`, U+FF1C, U+FF1E, U+FF06) and mentions defused
/// ([`defuse_mentions`]). So `<!channel>` or `<https://evil|login>` can neither ping a channel
/// nor dress a link, in Slack's mrkdwn or anywhere else. Look-alikes rather than `&lt;`:
/// Alertmanager passes the same text to mail (HTML-escaped again), PagerDuty, OpsGenie and
/// more, where an entity would show as the literal `&lt;`.
pub fn chat_text(s: &str, max: usize) -> String {
    let inert = mcpulse_wire::text::inert(s, max);
    let replaced: String = inert
        .chars()
        .map(|c| match c {
            '<' => '\u{ff1c}',
            '>' => '\u{ff1e}',
            '&' => '\u{ff06}',
            c => c,
        })
        .collect();
    defuse_mentions(&replaced)
}

/// Serializes a payload. Our payload types cannot fail to encode, but an error is still an
/// error, not a panic.
pub(crate) fn to_json<T: Serialize>(v: &T) -> Result<String, DeliveryError> {
    serde_json::to_string(v)
        .map_err(|e| DeliveryError::Invalid(format!("could not encode the alert as JSON: {e}")))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(kind: SinkKind, targets: &[&str]) -> AlertConfig {
        AlertConfig {
            kind,
            targets: targets.iter().map(|t| (*t).to_owned()).collect(),
            on: Vec::new(),
            secrets: Default::default(),
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
    fn alertmanagers_summary_annotation_is_inert_and_bounded_whatever_the_summary() {
        let hostile = format!(
            "search is down: handshake-failed: rejected <!channel> \u{1b}[2J\u{202e}x\n{}",
            "y".repeat(100_000)
        );
        let a = Alert {
            dedup_key: "k".into(),
            action: Action::Trigger,
            kind: Kind::Down,
            target: "search".into(),
            severity: "critical".into(),
            summary: hostile,
            at_ms: 0,
            started_ms: 0,
            labels: Default::default(),
            removed: false,
        };
        // The summary is inert from the runner on (runner::summary_of); Alertmanager's templates
        // render the annotation into Slack and mail, so it is made inert here again. The
        // decoded string, not the JSON text (whose encoder escapes control characters itself).
        let am = serde_json::to_value(alertmanager::postables(&a)).unwrap();
        for summary in [&am[0]["annotations"]["summary"]] {
            let summary = summary.as_str().unwrap();
            for bad in ['\u{1b}', '\u{202e}', '\n'] {
                assert!(!summary.contains(bad), "{bad:?} in {summary:.300}");
            }
            assert!(summary.chars().count() <= 1_000, "{}", summary.len());
            assert!(summary.starts_with("search is down"), "{summary:.300}");
        }
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
