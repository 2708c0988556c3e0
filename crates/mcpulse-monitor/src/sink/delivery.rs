//! Delivery: one attempt at one sink ([`deliver`], and the HTTP `post` the HTTP sinks
//! share), the [`Deliver`] seam the loop delivers through ([`Sinks`], the configured ones), and
//! the per-sink workers that deliver a sink's queue in order.
//!
//! This module does not choose what is due or record outcomes (that is [`super::outbox`]), nor
//! decide retry times ([`super::backoff`]); it does not build payloads (the sink modules do).

use super::backoff::{expired, retry_after};
use super::{
    DeliveryError, HttpPost, SinkId, alertmanager, command, matches, pagerduty, sink_ids,
    sink_name, slack, webhook,
};
use crate::alert::Alert;
use crate::clock::{Timebase, wall_ms};
use crate::config::{AlertConfig, SinkKind};
use http::{Method, Uri};
use mcpulse_transport::clock::Clock;
use mcpulse_transport::http::{HttpClient, Outgoing, SendError, read_body};
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How much of an error response body is kept in the error message.
const ERROR_BODY: usize = 512;

/// One attempt to deliver `alert` to `sink`, within `timeout`.
///
/// A PagerDuty sink given a [`crate::alert::Action::Notify`] alert sends nothing and succeeds: one-off change
/// notices have no incident to open or close (see [`pagerduty`]).
pub async fn deliver(
    sink: &SinkKind,
    alert: &Alert,
    timeout: Duration,
) -> Result<(), DeliveryError> {
    attempt(sink, alert, timeout)
        .await
        .map_err(|e| e.hidden(&secrets_of(sink)))
}

/// [`deliver`] to a configured sink: its errors hide what its `${VAR}`s read too
/// ([`AlertConfig::secrets`]).
pub async fn deliver_to(
    sink: &AlertConfig,
    alert: &Alert,
    timeout: Duration,
) -> Result<(), DeliveryError> {
    attempt(&sink.kind, alert, timeout)
        .await
        .map_err(|e| hide(sink, e))
}

/// `e` with every secret of the sink hidden: its credentials by kind, and what its `${VAR}`s
/// read ([`AlertConfig::secrets`]). For every error of a sink that is logged or stored.
pub fn hide(sink: &AlertConfig, e: DeliveryError) -> DeliveryError {
    let mut secrets = secrets_of(&sink.kind);
    secrets.extend(&sink.secrets);
    e.hidden(&secrets)
}

/// The values a sink's errors must not show: its credentials (a Slack URL is one, its path the
/// token; a PagerDuty routing key; a webhook's secret and header values; the values of the
/// variables a command is passed), of at least
/// [`mcpulse_wire::redact::ARGV_SECRET_MIN_LEN`] characters.
fn secrets_of(sink: &SinkKind) -> mcpulse_wire::redact::Secrets {
    let mut secrets = mcpulse_wire::redact::Secrets::default();
    let mut add = |v: &str| {
        if v.chars().count() >= mcpulse_wire::redact::ARGV_SECRET_MIN_LEN {
            secrets.add(v);
        }
    };
    match sink {
        SinkKind::Webhook {
            secret, headers, ..
        } => {
            if let Some(s) = secret {
                add(s);
            }
            for (_, v) in headers {
                add(v);
                // `Bearer <token>`: the token alone too.
                if let Some((_, token)) = v.split_once(' ') {
                    add(token);
                }
            }
        }
        SinkKind::Slack { url } => {
            add(url);
            // The path's last segment is the token.
            if let Some(token) = url.trim_end_matches('/').rsplit('/').next() {
                add(token);
            }
        }
        SinkKind::PagerDuty { routing_key, .. } => add(routing_key),
        SinkKind::Alertmanager { .. } => {}
        SinkKind::Command { env, .. } => {
            for v in env.iter().filter_map(|k| std::env::var(k).ok()) {
                add(&v);
            }
        }
    }
    secrets
}

async fn attempt(sink: &SinkKind, alert: &Alert, timeout: Duration) -> Result<(), DeliveryError> {
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

/// What the loop delivers with: the configured sinks, or a test double.
pub trait Deliver: Send + Sync + 'static {
    /// One attempt at sink `sink`. The loop also bounds it by [`super::OutboxOptions::timeout`].
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
/// An alert a sink's filters do not take ([`matches`](fn@matches)) counts as delivered without a request:
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
            deliver_to(&cfg, alert, timeout).await
        }
    }

    fn describe(&self, sink: &SinkId) -> String {
        match self.get(sink) {
            Some((at, cfg)) => format!("{} #{at} ({sink})", sink_name(&cfg.kind)),
            None => format!("sink {sink} (not configured)"),
        }
    }
}

pub(super) struct Job {
    pub(super) id: i64,
    pub(super) alert: Alert,
    pub(super) attempts: u32,
}

pub(super) struct Done {
    pub(super) id: i64,
    pub(super) sink: SinkId,
    pub(super) alert: Alert,
    /// Attempts made, this one included.
    pub(super) attempts: u32,
    pub(super) result: Result<(), DeliveryError>,
}

/// What a sink's worker needs of the loop's settings.
#[derive(Clone, Copy)]
pub(super) struct WorkerOptions {
    pub(super) timeout: Duration,
    pub(super) expire: Duration,
    pub(super) clock: Timebase,
}

/// Delivers one sink's queue, in order. When the sink says when to come back (a 429 or 503
/// with `Retry-After`), the whole queue waits that long, not only the alert that got it: the
/// limit is the sink's. The waiting rows stay in flight, so they take nothing from the other
/// sinks' turn; on shutdown they stay pending. An alert that expired while it waited is not
/// sent (see [`OutboxOptions::expire`]).
pub(super) async fn worker<D: Deliver>(
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
