//! The link to the upstream: a pool of kept-alive HTTP/1.1 connections, and whether the
//! upstream is known to be down.
//!
//! Connections are dialled by mcpulse-transport's [`HttpClient`] (the probe's DNS, connect and
//! TLS, with its rustls configuration), then kept here: a request takes an idle connection
//! that is ready, or dials a new one; it gives the connection back once the response body has
//! been read to its end (an HTTP/1.1 connection carries one exchange at a time). At most
//! [`MAX_IDLE`] idle connections are kept; concurrency beyond that dials more, which close
//! after their exchange.
//!
//! Down and back: a failed connect (refused, timed out, TLS) marks the upstream down; an HTTP
//! answer, a 5xx too, proves it reachable and never does (one 503 must not refuse every other
//! client). From then on requests fail fast (the caller answers 503 with `Retry-After`) and a
//! single background task dials again after a delay from `mcpulse_policy::backoff` (exponential,
//! full jitter), until a connection is made: then the upstream is up again, a reconnect is
//! counted, and requests flow. The attempt count goes back to zero when a request is answered,
//! so an upstream that accepts connections and then refuses them again backs off further each
//! time. The task holds only a weak reference: it ends with the gateway.

use crate::state::{ProcessState, Shared};
use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use mcpulse_policy::backoff::Backoff;
use mcpulse_transport::clock::Clock;
use mcpulse_transport::http::{CertificateDer, HttpClient, SendError};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::time::{Instant, sleep_until, timeout_at};

/// The most idle connections kept for reuse.
pub const MAX_IDLE: usize = 32;

type Sender = SendRequest<Full<Bytes>>;

/// Why an exchange with the upstream failed before a response head arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The connect (or TLS) did not finish within the connect timeout.
    Timeout,
    /// Refused, unreachable, DNS, TLS, or the HTTP handshake: the upstream is down.
    Broken(String),
    /// The connection broke after the request may have been sent, before the response head.
    /// Not a sign that the upstream is down (a kept-alive connection the upstream closed as
    /// the request went out looks the same); the request is not sent again, as it may have
    /// been acted on.
    Lost(String),
}

impl Failure {
    pub fn cause(&self, connect_timeout: Duration) -> String {
        match self {
            Failure::Timeout => format!(
                "connecting timed out after {}",
                mcpulse_wire::units::human_duration(connect_timeout.as_millis())
            ),
            Failure::Broken(m) | Failure::Lost(m) => m.clone(),
        }
    }
}

/// The upstream is known down: why, and when the next attempt is due.
#[derive(Debug, Clone)]
pub struct Down {
    pub cause: String,
    pub retry_at: Instant,
}

#[derive(Debug, Default)]
struct State {
    down: Option<Down>,
    /// Failed attempts since the last answer (the backoff's exponent).
    attempt: u32,
    /// A reconnect task is running.
    reconnecting: bool,
    /// The upstream answered at least once (a later comeback is a reconnect).
    ever_up: bool,
}

pub struct Link {
    uri: Uri,
    /// The URL as shown ([`super::HttpSettings::label`]).
    label: String,
    connect_timeout: Duration,
    backoff: Backoff,
    shared: Arc<Shared>,
    idle: Mutex<Vec<Sender>>,
    /// Dials; its TLS configuration is built by the first HTTPS connect and shared by forks
    /// after that (`warm`), so that connects run concurrently without loading the roots again.
    dialer: tokio::sync::Mutex<HttpClient>,
    warm: AtomicBool,
    state: Mutex<State>,
    random: std::collections::hash_map::RandomState,
    draws: AtomicU64,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("uri", &self.label)
            .field("state", &*lock(&self.state))
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Link {
    pub fn new(uri: Uri, settings: &super::HttpSettings, shared: Arc<Shared>) -> Link {
        let warm = uri.scheme_str() != Some("https");
        let roots = settings
            .extra_roots
            .iter()
            .map(|der| CertificateDer::from(der.clone()))
            .collect();
        Link {
            uri,
            label: settings.label(),
            connect_timeout: settings.connect_timeout,
            backoff: settings.reconnect,
            shared,
            idle: Mutex::new(Vec::new()),
            dialer: tokio::sync::Mutex::new(HttpClient::new(Clock::start()).with_roots(roots)),
            warm: AtomicBool::new(warm),
            state: Mutex::new(State::default()),
            random: std::collections::hash_map::RandomState::new(),
            draws: AtomicU64::new(0),
        }
    }

    /// When the upstream is known down: why, and when it is tried again.
    pub fn down(&self) -> Option<Down> {
        lock(&self.state).down.clone()
    }

    /// Sends one request: on an idle connection when one is ready, else on a new one. A
    /// request that a stale kept-alive connection could not even send is sent again once on a
    /// new connection (it never reached the upstream, so this is no duplicate).
    pub async fn send(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<(Response<Incoming>, Sender), Failure> {
        let mut req = req;
        if let Some(mut sender) = self.take_idle() {
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok((resp, sender)),
                Err(mut e) => match e.take_message() {
                    Some(back) => req = back,
                    None => return Err(Failure::Lost(broken(e.error()))),
                },
            }
        }
        let deadline = Instant::now() + self.connect_timeout;
        let mut sender = self.dial(deadline).await?;
        match sender.send_request(req).await {
            Ok(resp) => Ok((resp, sender)),
            Err(e) => Err(Failure::Lost(broken(&e))),
        }
    }

    /// An idle connection that is ready for a request, if any.
    fn take_idle(&self) -> Option<Sender> {
        let mut idle = lock(&self.idle);
        while let Some(sender) = idle.pop() {
            if sender.is_ready() {
                return Some(sender);
            }
        }
        None
    }

    /// Gives a connection back after its exchange ended cleanly.
    pub fn release(&self, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = lock(&self.idle);
        if idle.len() < MAX_IDLE {
            idle.push(sender);
        }
    }

    async fn dial(&self, deadline: Instant) -> Result<Sender, Failure> {
        let result = if self.warm.load(Ordering::Acquire) {
            let mut client = self.dialer.lock().await.fork();
            client.connect(&self.uri, deadline).await
        } else {
            let mut dialer = self.dialer.lock().await;
            let r = dialer.connect(&self.uri, deadline).await;
            dialer.connections.clear();
            if r.is_ok() {
                self.warm.store(true, Ordering::Release);
            }
            r
        };
        result.map_err(|e| match e {
            SendError::Timeout => Failure::Timeout,
            other => Failure::Broken(other.to_string()),
        })
    }

    /// The upstream answered (any status): it is up, and the backoff starts over.
    pub fn answered(&self) {
        lock(&self.state).attempt = 0;
        self.reached();
    }

    /// The upstream was reached: the first time, it is Up (a later comeback is a reconnect).
    /// The process state is written under the link's state lock, as everywhere here, so that
    /// it always follows the last change of `down` (the lock order: link, then shared).
    fn reached(&self) {
        let mut s = lock(&self.state);
        let first = !std::mem::replace(&mut s.ever_up, true);
        if first && s.down.is_none() {
            self.shared.update_upstream(|u| {
                if u.process == ProcessState::Starting {
                    u.process = ProcessState::Up;
                }
            });
        }
    }

    /// Dials once, before any request: the connection waits in the pool, and the upstream is
    /// Up, or down with reconnects under way.
    pub async fn warm_up(self: &Arc<Self>) {
        match self.dial(Instant::now() + self.connect_timeout).await {
            Ok(sender) => {
                self.release(sender);
                self.reached();
            }
            Err(failure) => self.went_down(failure.cause(self.connect_timeout)),
        }
    }

    /// A connect failed: the upstream is down until a reconnect succeeds. Starts the
    /// reconnect task unless one runs.
    pub fn went_down(self: &Arc<Self>, cause: String) {
        let start = {
            let mut s = lock(&self.state);
            if s.down.is_none() {
                let delay = self.backoff.delay(s.attempt, self.draw());
                s.attempt = s.attempt.saturating_add(1);
                s.down = Some(Down {
                    cause: mcpulse_wire::text::message(&cause).into_owned(),
                    retry_at: Instant::now() + delay,
                });
            }
            self.shared
                .update_upstream(|u| u.process = ProcessState::Backoff);
            !std::mem::replace(&mut s.reconnecting, true)
        };
        // Kept-alive connections to a server that went away are of no use.
        lock(&self.idle).clear();
        if start {
            tokio::spawn(reconnect(Arc::downgrade(self)));
        }
    }

    fn draw(&self) -> u64 {
        self.random
            .hash_one(self.draws.fetch_add(1, Ordering::Relaxed))
    }

    /// The reconnect attempt failed: the next is due after a longer delay.
    fn retry_later(&self, failure: &Failure) -> Instant {
        let mut s = lock(&self.state);
        let delay = self.backoff.delay(s.attempt, self.draw());
        s.attempt = s.attempt.saturating_add(1);
        let retry_at = Instant::now() + delay;
        s.down = Some(Down {
            cause: mcpulse_wire::text::message(&failure.cause(self.connect_timeout)).into_owned(),
            retry_at,
        });
        retry_at
    }

    /// A reconnect succeeded: the upstream is up again.
    fn came_back(&self) {
        let was_up = {
            let mut s = lock(&self.state);
            s.down = None;
            s.reconnecting = false;
            // Under the lock: a went_down right after this must not be overwritten by Up.
            self.shared.update_upstream(|u| {
                u.process = ProcessState::Up;
                if s.ever_up {
                    u.reconnects += 1;
                }
            });
            s.ever_up
        };
        if was_up {
            self.shared.metrics.upstream_reconnect();
        }
        tracing::info!(upstream = %self.label, "upstream reachable again");
    }
}

/// Dials the upstream after each backoff delay until a connection is made; the connection
/// goes into the pool. Ends early when the gateway is gone.
async fn reconnect(link: Weak<Link>) {
    let mut due = match link.upgrade().and_then(|l| l.down()) {
        Some(down) => down.retry_at,
        None => return,
    };
    loop {
        sleep_until(due).await;
        let Some(l) = link.upgrade() else { return };
        let deadline = Instant::now() + l.connect_timeout;
        match timeout_at(deadline, l.dial(deadline)).await {
            Ok(Ok(sender)) => {
                l.release(sender);
                l.came_back();
                return;
            }
            Ok(Err(failure)) => due = l.retry_later(&failure),
            Err(_) => due = l.retry_later(&Failure::Timeout),
        }
    }
}

fn broken(e: &hyper::Error) -> String {
    format!(
        "broke the connection before answering: {}",
        mcpulse_transport::http::error_chain(e)
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::sync::Barrier;

    /// went_down and came_back racing on two threads: the process state always ends as the
    /// last change of `down` left it (Backoff while down, Up once back), never Up while down.
    #[test]
    fn the_process_state_follows_down_under_races() {
        // Reconnect tasks are spawned on it and never run (never driven): only the state counts.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut settings = super::super::HttpSettings::new("http://127.0.0.1:9/mcp");
        settings.reconnect = Backoff {
            initial: Duration::from_secs(3600),
            max: Duration::from_secs(3600),
        };
        let shared = Arc::new(Shared::default());
        let link = Arc::new(Link::new(
            "http://127.0.0.1:9/mcp".parse().unwrap(),
            &settings,
            shared.clone(),
        ));
        // Two threads meet at a barrier each round, one going down, one coming back; between
        // rounds this thread checks the state and brings the link back up.
        const ROUNDS: usize = 20_000;
        let go = Arc::new(Barrier::new(3));
        let done = Arc::new(Barrier::new(3));
        let (l, g, d, h) = (link.clone(), go.clone(), done.clone(), rt.handle().clone());
        let down = std::thread::spawn(move || {
            let _rt = h.enter();
            for _ in 0..ROUNDS {
                g.wait();
                l.went_down("refused".to_owned());
                d.wait();
            }
        });
        let (l, g, d) = (link.clone(), go.clone(), done.clone());
        let up = std::thread::spawn(move || {
            for _ in 0..ROUNDS {
                g.wait();
                l.came_back();
                d.wait();
            }
        });
        let mut mismatches = 0;
        for _ in 0..ROUNDS {
            go.wait();
            done.wait();
            let is_down = link.down().is_some();
            if is_down != (shared.upstream().process == ProcessState::Backoff) {
                mismatches += 1;
            }
            link.came_back();
        }
        down.join().unwrap();
        up.join().unwrap();
        assert_eq!(mismatches, 0, "the process state lost a went_down");
    }
}
