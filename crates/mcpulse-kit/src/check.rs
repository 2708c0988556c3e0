//! Dependency checks: what one run of a check reports ([`Outcome`]), the trait a custom check
//! implements ([`Probe`]), the ready-made ones (TCP connect, HTTP GET, a closure, a self-check
//! that runs `tools/list` against the server itself) and a check's settings ([`Check`]).
//!
//! A check never runs on a request's path: [`crate::Health::start`] runs each on its own
//! interval and `/readyz` reads the cache. What a check quotes from a dependency (an error, a
//! status line) is made inert and cut to [`MAX_OUTPUT_CHARS`] characters before it is kept.

use mcpulse_policy::check::Thresholds;
use mcpulse_policy::health::CheckStatus;
use mcpulse_transport::clock::Clock;
use mcpulse_transport::http::{BodyEnd, HttpClient, Outgoing, read_body};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex as AsyncMutex;
use tokio::time::Instant;

/// A boxed future, as [`Probe::run`] returns it (no `async-trait` needed).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The most characters of a check's detail kept (inert, cut with a marker).
pub const MAX_OUTPUT_CHARS: usize = 300;
/// A check's interval by default (Kubernetes' `periodSeconds` default).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// A check's timeout by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// The shortest interval: a check every few milliseconds would be a load test.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// The most of an HTTP body read (and dropped) by [`HttpGet`]; the rest is not waited for.
pub const BODY_CAP: usize = 64 * 1024;
/// The most bytes of one reply [`SelfCheck`] reads (a `tools/list` of a large server fits).
pub const SELF_CHECK_REPLY_CAP: usize = 4 << 20;

/// One run's verdict: ok, degraded or down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    Ok,
    Degraded,
    Down,
}

impl Status {
    /// health+json's word: pass, warn, fail.
    pub fn check_status(self) -> CheckStatus {
        match self {
            Status::Ok => CheckStatus::Pass,
            Status::Degraded => CheckStatus::Warn,
            Status::Down => CheckStatus::Fail,
        }
    }
}

/// What one run of a check saw.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Outcome {
    pub status: Status,
    /// How long it took; `None`: the runner times the run itself.
    pub latency: Option<Duration>,
    /// Why it is not ok, or a word on success (made inert by the runner).
    pub detail: Option<String>,
}

impl Outcome {
    pub fn ok(detail: impl Into<String>) -> Outcome {
        Outcome::new(Status::Ok, detail)
    }
    pub fn degraded(detail: impl Into<String>) -> Outcome {
        Outcome::new(Status::Degraded, detail)
    }
    pub fn down(detail: impl Into<String>) -> Outcome {
        Outcome::new(Status::Down, detail)
    }
    fn new(status: Status, detail: impl Into<String>) -> Outcome {
        Outcome {
            status,
            latency: None,
            detail: Some(detail.into()),
        }
    }
    /// The latency the check measured itself (a part of the run, say).
    pub fn latency(mut self, took: Duration) -> Outcome {
        self.latency = Some(took);
        self
    }
}

/// A custom check: one run, bounded by the runner's timeout (the future is dropped when it
/// passes, so a run must be cancel-safe).
///
/// ```
/// use mcpulse_kit::check::{BoxFuture, Outcome, Probe};
///
/// struct Disk;
/// impl Probe for Disk {
///     fn kind(&self) -> &'static str { "disk" }
///     fn target(&self) -> String { "/var/lib/app".into() }
///     fn run(&self) -> BoxFuture<'_, Outcome> {
///         Box::pin(async { Outcome::ok("writable") })
///     }
/// }
/// let check = mcpulse_kit::Check::new("disk", Disk);
/// assert_eq!(check.name(), "disk");
/// ```
pub trait Probe: Send + Sync + 'static {
    /// A word for the kind (`tcp`, `http`, `fn`, `self`), shown as the check's `kind`.
    fn kind(&self) -> &'static str;
    /// What it checks (health+json's `componentId`): `host:port`, a URL. No credentials.
    fn target(&self) -> String;
    fn run(&self) -> BoxFuture<'_, Outcome>;
}

/// One named check and how it runs.
#[derive(Clone)]
pub struct Check {
    pub(crate) name: String,
    pub(crate) probe: Arc<dyn Probe>,
    pub(crate) interval: Duration,
    pub(crate) timeout: Duration,
    pub(crate) critical: bool,
    pub(crate) thresholds: Thresholds,
    pub(crate) component_type: &'static str,
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check")
            .field("name", &self.name)
            .field("kind", &self.probe.kind())
            .field("interval", &self.interval)
            .field("timeout", &self.timeout)
            .field("critical", &self.critical)
            .finish_non_exhaustive()
    }
}

impl Check {
    /// A critical check every 10 s within 5 s, three failures in a row to fail (one blip flips
    /// nothing), one success to recover: the gateway's `[[checks]]` defaults.
    pub fn new(name: impl Into<String>, probe: impl Probe) -> Check {
        Check {
            name: name.into(),
            probe: Arc::new(probe),
            interval: DEFAULT_INTERVAL,
            timeout: DEFAULT_TIMEOUT,
            critical: true,
            thresholds: Thresholds::default(),
            component_type: "component",
        }
    }

    /// Connects to `host:port` (see [`Tcp`]).
    pub fn tcp(name: impl Into<String>, host: impl Into<String>, port: u16) -> Check {
        Check::new(name, Tcp::new(host, port)).component_type("datastore")
    }

    /// `GET url`, passing on a 2xx (see [`HttpGet`]).
    pub fn http(name: impl Into<String>, url: &str) -> Result<Check, crate::Error> {
        Ok(Check::new(name, HttpGet::new(url)?))
    }

    /// A closure's verdict (see [`FnProbe`]).
    ///
    /// ```
    /// use mcpulse_kit::{Check, check::Outcome};
    /// let flag = std::path::PathBuf::from("/nonexistent/broken");
    /// let check = Check::from_fn("flag", move || {
    ///     let broken = flag.exists();
    ///     async move { if broken { Outcome::down("broken on purpose") } else { Outcome::ok("fine") } }
    /// });
    /// assert_eq!(check.name(), "flag");
    /// ```
    pub fn from_fn<F, Fut>(name: impl Into<String>, f: F) -> Check
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        Check::new(name, FnProbe::new(f))
    }

    /// Runs the MCP handshake and `tools/list` against `url` (the server's own `/mcp`),
    /// see [`SelfCheck`].
    pub fn self_check(name: impl Into<String>, url: &str) -> Result<Check, crate::Error> {
        Ok(Check::new(name, SelfCheck::new(url)?).component_type("system"))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// How often it runs (at least [`MIN_INTERVAL`]).
    pub fn interval(mut self, every: Duration) -> Check {
        self.interval = every.max(MIN_INTERVAL);
        self
    }

    /// How long one run may take; past it the run is dropped and counts as down.
    pub fn timeout(mut self, limit: Duration) -> Check {
        self.timeout = limit;
        self
    }

    /// Whether its failure fails readiness (503); a non-critical one only warns (200).
    pub fn critical(mut self, critical: bool) -> Check {
        self.critical = critical;
        self
    }

    /// Results in a row, all worse than the confirmed level, before it gets worse.
    pub fn failure_threshold(mut self, n: u32) -> Check {
        self.thresholds.failure_threshold = n.max(1);
        self
    }

    /// Results in a row, all better than the confirmed level, before it gets better.
    pub fn success_threshold(mut self, n: u32) -> Check {
        self.thresholds.success_threshold = n.max(1);
        self
    }

    /// A passing run slower than this is degraded (the HTTP check's latency threshold).
    pub fn degraded_after(mut self, latency: Duration) -> Check {
        self.thresholds.degraded_latency = Some(latency);
        self
    }

    /// health+json's `componentType`: `component` (default), `datastore` or `system`.
    pub fn component_type(mut self, t: &'static str) -> Check {
        self.component_type = t;
        self
    }
}

/// Connects to `host:port` (resolving the name each run, so a moved dependency is followed),
/// then closes. The latency is the resolve and the connect together.
#[derive(Debug, Clone)]
pub struct Tcp {
    host: String,
    port: u16,
}

impl Tcp {
    pub fn new(host: impl Into<String>, port: u16) -> Tcp {
        Tcp {
            host: host.into(),
            port,
        }
    }
}

impl Probe for Tcp {
    fn kind(&self) -> &'static str {
        "tcp"
    }
    fn target(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
    fn run(&self) -> BoxFuture<'_, Outcome> {
        Box::pin(async move {
            match tokio::net::TcpStream::connect((self.host.as_str(), self.port)).await {
                Ok(_) => Outcome::ok("connected"),
                Err(e) => Outcome::down(format!("connect to {}:{}: {e}", self.host, self.port)),
            }
        })
    }
}

/// `GET url` with mcpulse-transport's client (TLS with the system's roots; redirects only
/// within the URL's origin: what another host says is not this dependency). The body is read
/// up to [`BODY_CAP`] bytes and dropped, so the latency is the whole answer's. Passes on one
/// of the expected statuses (any 2xx by default); [`Check::degraded_after`] sets the latency
/// threshold.
pub struct HttpGet {
    url: http::Uri,
    expect: Vec<u16>,
    client: AsyncMutex<HttpClient>,
}

impl std::fmt::Debug for HttpGet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpGet")
            .field("url", &self.target())
            .field("expect", &self.expect)
            .finish_non_exhaustive()
    }
}

fn client() -> HttpClient {
    let mut client = HttpClient::new(Clock::start());
    client.same_origin_only = true;
    client
}

fn parse_url(url: &str) -> Result<http::Uri, crate::Error> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| crate::Error::Url(e.to_string()))?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.host().is_some() => Ok(uri),
        _ => Err(crate::Error::Url(format!(
            "{}: not an http(s) URL with a host",
            mcpulse_wire::redact::url(url)
        ))),
    }
}

impl HttpGet {
    pub fn new(url: &str) -> Result<HttpGet, crate::Error> {
        Ok(HttpGet {
            url: parse_url(url)?,
            expect: Vec::new(),
            client: AsyncMutex::new(client()),
        })
    }

    /// The statuses that pass (instead of any 2xx).
    pub fn expect_status(mut self, statuses: impl IntoIterator<Item = u16>) -> HttpGet {
        self.expect = statuses.into_iter().collect();
        self
    }
}

impl Probe for HttpGet {
    fn kind(&self) -> &'static str {
        "http"
    }
    fn target(&self) -> String {
        mcpulse_wire::redact::url(&self.url.to_string())
    }
    fn run(&self) -> BoxFuture<'_, Outcome> {
        Box::pin(async move {
            // The runner's timeout drops this future; the deadline bounds the body read too.
            let deadline = Instant::now() + Duration::from_secs(3600);
            // A fork per run: a fresh connection (each run measures the dependency afresh)
            // with the TLS configuration the first run built.
            let mut client = self.client.lock().await.fork();
            let out = Outgoing {
                method: http::Method::GET,
                uri: self.url.clone(),
                headers: vec![(
                    "accept".into(),
                    "application/health+json, application/json;q=0.9, */*;q=0.5".into(),
                )],
                user_headers: &[],
                body: None,
            };
            let sent = client.send(&out, false, deadline, &mut Vec::new()).await;
            *self.client.lock().await = client.fork();
            let mut resp = match sent {
                Ok(r) => r,
                Err(e) => return Outcome::down(format!("GET failed: {e}")),
            };
            let status = resp.status().as_u16();
            let (_, end) = read_body(resp.body_mut(), BODY_CAP, deadline).await;
            if let BodyEnd::Timeout = end {
                return Outcome::down(format!("status {status}, then timed out reading the body"));
            }
            let ok = if self.expect.is_empty() {
                (200..300).contains(&status)
            } else {
                self.expect.contains(&status)
            };
            let what = format!(
                "status {status} {}",
                resp.status().canonical_reason().unwrap_or("")
            );
            let what = what.trim_end();
            if ok {
                Outcome::ok(what)
            } else {
                Outcome::down(format!("{what} from {}", self.target()))
            }
        })
    }
}

/// A closure's verdict, for anything else (a pool's health, a flag, a queue's depth).
pub struct FnProbe<F> {
    f: F,
}

impl<F> FnProbe<F> {
    pub fn new(f: F) -> FnProbe<F> {
        FnProbe { f }
    }
}

impl<F, Fut> Probe for FnProbe<F>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    fn kind(&self) -> &'static str {
        "fn"
    }
    fn target(&self) -> String {
        "closure".into()
    }
    fn run(&self) -> BoxFuture<'_, Outcome> {
        Box::pin((self.f)())
    }
}

/// Runs `initialize`, `notifications/initialized` and `tools/list` against the server's own
/// Streamable HTTP endpoint (the whole path a client takes: the listener, rmcp's service, the
/// tool router), with mcpulse-transport's client; ends the session with a DELETE. Passes when
/// `tools/list` answers; its detail is the tool count. Replies are read up to
/// [`SELF_CHECK_REPLY_CAP`] bytes.
pub struct SelfCheck {
    url: http::Uri,
    client: AsyncMutex<HttpClient>,
}

impl std::fmt::Debug for SelfCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelfCheck")
            .field("url", &self.target())
            .finish_non_exhaustive()
    }
}

impl SelfCheck {
    pub fn new(url: &str) -> Result<SelfCheck, crate::Error> {
        Ok(SelfCheck {
            url: parse_url(url)?,
            client: AsyncMutex::new(client()),
        })
    }

    async fn session(&self, client: &mut HttpClient) -> Result<usize, String> {
        use mcpulse_transport::streamable_http::{Post, post};
        use mcpulse_transport::{Call, Limits};
        use mcpulse_wire::transcript::{Outcome as Ended, Step};
        let deadline = Instant::now() + Duration::from_secs(3600);
        let limits = Limits {
            max_response_bytes: SELF_CHECK_REPLY_CAP,
        };
        let version = "2025-06-18";
        let init = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "mcpulse-kit-self-check", "version": env!("CARGO_PKG_VERSION")},
            },
        });
        let call = |step, id, message| Call {
            step,
            era: None,
            page: None,
            id,
            message,
        };
        let ex = post(
            client,
            Post {
                uri: &self.url,
                call: call(Step::Initialize, Some(1), &init),
                headers: vec![],
                user_headers: &[],
            },
            limits,
            deadline,
        )
        .await;
        if ex.reply().is_none() {
            return Err(format!(
                "initialize got no reply (HTTP {})",
                ex.status().map_or("-".into(), |s| s.to_string())
            ));
        }
        let mut headers = vec![("mcp-protocol-version".to_owned(), version.to_owned())];
        if let Some(sid) = ex.header("mcp-session-id") {
            headers.push(("mcp-session-id".to_owned(), sid.to_owned()));
        }
        let initialized =
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let _ = post(
            client,
            Post {
                uri: &self.url,
                call: call(Step::Initialized, None, &initialized),
                headers: headers.clone(),
                user_headers: &[],
            },
            limits,
            deadline,
        )
        .await;
        let list = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        let ex = post(
            client,
            Post {
                uri: &self.url,
                call: call(Step::ToolsList, Some(2), &list),
                headers: headers.clone(),
                user_headers: &[],
            },
            limits,
            deadline,
        )
        .await;
        if headers.iter().any(|(k, _)| k == "mcp-session-id") {
            let _ = mcpulse_transport::streamable_http::delete_session(
                client,
                &self.url,
                headers,
                &[],
                deadline,
            )
            .await;
        }
        let Ended::Reply { frame } = ex.outcome else {
            return Err(format!(
                "tools/list got no reply (HTTP {})",
                ex.status().map_or("-".into(), |s| s.to_string())
            ));
        };
        let reply: serde_json::Value = ex
            .frames
            .get(frame)
            .and_then(|f| serde_json::from_str(&f.raw).ok())
            .unwrap_or_default();
        match reply["result"]["tools"].as_array() {
            Some(tools) => Ok(tools.len()),
            None => Err(match reply["error"]["message"].as_str() {
                Some(m) => format!("tools/list failed: {m}"),
                None => "tools/list answered without a tool list".to_owned(),
            }),
        }
    }
}

impl Probe for SelfCheck {
    fn kind(&self) -> &'static str {
        "self"
    }
    fn target(&self) -> String {
        mcpulse_wire::redact::url(&self.url.to_string())
    }
    fn run(&self) -> BoxFuture<'_, Outcome> {
        Box::pin(async move {
            let mut client = self.client.lock().await.fork();
            let result = self.session(&mut client).await;
            *self.client.lock().await = client.fork();
            match result {
                Ok(n) => Outcome::ok(format!("tools/list returned {n} tools")),
                Err(why) => Outcome::down(why),
            }
        })
    }
}

/// A detail as kept: inert, at most [`MAX_OUTPUT_CHARS`] characters.
pub(crate) fn inert(s: &str) -> String {
    mcpulse_wire::text::inert(s, MAX_OUTPUT_CHARS).into_owned()
}
