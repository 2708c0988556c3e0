//! The transcript: everything a probe saw, and nothing it concluded.
//!
//! A probe appends to a [`Transcript`]: the connections it opened (with DNS, connect and TLS
//! timings), the processes it spawned (with stderr, stray stdout lines and exits), and one
//! [`Exchange`] per request it sent (with the HTTP status, headers, every JSON-RPC frame that came
//! back, and how the exchange ended). The judge turns a transcript into a report and a verdict.
//! Transcripts serialise to JSON (`mcpulse.transcript/v1`), so a failure class is a fixture file
//! and stored evidence can be judged again when a rule changes.
//!
//! Secrets never enter a transcript: request headers the user supplied are stored redacted,
//! URLs are stored through [`crate::redact::url`], and a probe ends with [`Transcript::hide`],
//! which hides the plan's secret values (and applies the argv rule to commands) in everything
//! it recorded about the target: the display, URLs, commands, error messages, stderr.

use crate::json;
use crate::jsonrpc::{self, Decoded};
use crate::redact::Secrets;
use crate::version::{Era, EraMode};
use serde::{Deserialize, Serialize};

pub const SCHEMA: &str = "mcpulse.transcript/v1";

/// [`Exchange::reply`] refuses a reply whose decoded value would take more than this many times
/// its text (ordinary JSON takes 5–20×; a page of tiny objects ~100×).
pub const REPLY_BUDGET_MULTIPLE: usize = 8;

/// The record of one probe.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Transcript {
    pub schema: String,
    pub target: TargetRecord,
    pub plan: PlanRecord,
    /// Wall-clock start, milliseconds since the Unix epoch. Every `at_ms` below is relative to it.
    pub started_unix_ms: u64,
    /// The same instant in microseconds, for lining the transcript's times up with another
    /// clock's (a benchmark's) more finely than a millisecond.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix_us: Option<u64>,
    #[serde(default)]
    pub connections: Vec<Connection>,
    #[serde(default)]
    pub processes: Vec<Process>,
    #[serde(default)]
    pub exchanges: Vec<Exchange>,
    /// Reads of the server's HTTP health endpoint (`--health-url`, a monitor target's
    /// `health_url`); absent in transcripts without one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health: Vec<HealthFetch>,
    /// Synthetic tool calls and the health tool (`--call`, `--health-tool`), made or refused;
    /// absent in transcripts without any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<crate::call::CallRecord>,
    /// Set when the whole-probe deadline cut the probe short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_hit_ms: Option<f64>,
    pub total_ms: f64,
}

impl Transcript {
    pub fn new(target: TargetRecord, plan: PlanRecord, started_unix_ms: u64) -> Self {
        Transcript {
            schema: SCHEMA.to_owned(),
            target,
            plan,
            started_unix_ms,
            started_unix_us: None,
            connections: Vec::new(),
            processes: Vec::new(),
            exchanges: Vec::new(),
            health: Vec::new(),
            calls: Vec::new(),
            deadline_hit_ms: None,
            total_ms: 0.0,
        }
    }
}

impl Transcript {
    /// Hides `secrets` in every string the probe recorded about the target (not in what the
    /// server sent: frames and bodies are evidence, kept as they came), and shows commands by
    /// [`crate::redact::args`]' rule. Idempotent.
    pub fn hide(&mut self, secrets: &Secrets) {
        secrets.hide_in(&mut self.target.display);
        for p in &mut self.processes {
            p.hide(secrets);
        }
        for c in &mut self.connections {
            secrets.hide_in(&mut c.authority);
            if let Some(e) = &mut c.error {
                secrets.hide_in(&mut e.message);
            }
        }
        for x in &mut self.exchanges {
            if let Some(u) = &mut x.request.url {
                secrets.hide_in(u);
            }
            for r in &mut x.redirects {
                secrets.hide_in(&mut r.location);
            }
            match &mut x.outcome {
                Outcome::Endpoint { url } => secrets.hide_in(url),
                Outcome::TransportError { message, .. } => secrets.hide_in(message),
                _ => {}
            }
        }
        for h in &mut self.health {
            secrets.hide_in(&mut h.url);
            for r in &mut h.redirects {
                secrets.hide_in(&mut r.location);
            }
            if let Some(e) = &mut h.error {
                secrets.hide_in(e);
            }
        }
    }
}

impl Transcript {
    /// Hides `secrets` in what the server sent as well (frames, bodies, response headers, SSE
    /// event names, health documents, stdout noise): for a transcript written out, once it has
    /// been judged (the judge reads the frames as they came; the report hides what it quotes).
    /// A secret is a property of the value: the user's token echoed by a server stays hidden in
    /// the file too.
    pub fn hide_received(&mut self, secrets: &Secrets) {
        if secrets.is_empty() {
            return;
        }
        self.hide(secrets);
        for x in &mut self.exchanges {
            if let Some(r) = &mut x.response {
                for (_, v) in &mut r.headers {
                    secrets.hide_str(v);
                }
            }
            for f in &mut x.frames {
                secrets.hide_str(&mut f.raw);
                secrets.hide_opt(&mut f.sse_event);
            }
            secrets.hide_opt(&mut x.body);
        }
        for h in &mut self.health {
            secrets.hide_opt(&mut h.body);
        }
        for p in &mut self.processes {
            for l in &mut p.stdout_noise {
                secrets.hide_str(&mut l.line);
            }
        }
    }
}

/// The most bytes of a health endpoint's body kept (and read: a longer body is cut here and
/// marked `truncated`). Health documents are small; a body this large is itself a finding.
pub const HEALTH_BODY_CAP: usize = 64 * 1024;

/// One `GET` of an HTTP health endpoint (`/readyz`, `/healthz`, `/health`): what came back, not
/// what it means (the judge reads the status code and the document).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HealthFetch {
    /// The URL asked for, through [`crate::redact::url`].
    pub url: String,
    /// When the request was sent, relative to the transcript's start.
    pub at_ms: f64,
    /// Until the body was read (or the fetch failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<f64>,
    /// The HTTP status, once a response head came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// The body as text (lossy UTF-8), at most [`HEALTH_BODY_CAP`] bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The body was longer than [`HEALTH_BODY_CAP`] (or did not end before the deadline).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Redirects followed (same origin only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redirects: Vec<Redirect>,
    /// Why no response was read: connect failure, timeout, a redirect off the origin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Read by discovery (`--health-url auto`) rather than asked for: the judge takes the
    /// first discovered read with a health document and ignores the others (a 404, an HTML
    /// page), instead of finding each one wrong.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub discovered: bool,
}

impl Process {
    /// The command shown by [`crate::redact::args`]' rule, and `secrets` hidden in it, in the
    /// spawn error and in stderr (a server may log its own command line or token).
    pub fn hide(&mut self, secrets: &Secrets) {
        self.args = crate::redact::args(&self.args, secrets);
        secrets.hide_in(&mut self.program);
        if let Some(e) = &mut self.spawn_error {
            secrets.hide_in(e);
        }
        for l in &mut self.stderr {
            secrets.hide_in(&mut l.line);
        }
    }
}

/// What was probed, as it may be shown.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TargetRecord {
    /// The URL or the command line, redacted (`mcpulse_wire::redact::target_url`, `command_line`).
    pub display: String,
    pub kind: TargetKind,
    /// For HTTP targets: the host, for rules that treat loopback differently.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    Http,
    Stdio,
    /// Only an HTTP health endpoint (`mcpulse probe --health-url URL` without an MCP target):
    /// no protocol steps, the verdict from `health` alone.
    Health,
}

/// The settings that shaped the probe and that the judge needs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PlanRecord {
    pub era: EraMode,
    /// Whether the security checks' extra requests were sent (`--no-security` turns them off).
    #[serde(default)]
    pub security: bool,
    /// The user supplied credentials (their values are never recorded).
    #[serde(default)]
    pub credentials: bool,
    pub timeout_ms: u64,
    pub max_response_bytes: usize,
}

/// The wire transports.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum TransportKind {
    StreamableHttp,
    Sse,
    Stdio,
}

impl TransportKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::StreamableHttp => "streamable-http",
            TransportKind::Sse => "sse",
            TransportKind::Stdio => "stdio",
        }
    }
}

/// One network connection attempt.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Connection {
    pub at_ms: f64,
    /// `host:port` as asked for.
    pub authority: String,
    /// The address connected to, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    pub tls: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ms: Option<f64>,
    /// The peer certificate's validity period (Unix seconds), for TLS connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_not_before: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_not_after: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ConnectError>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ConnectError {
    pub stage: ConnectStage,
    /// What went wrong, finer than the stage where a check acts on it (a refused non-public
    /// address fails at the connect stage). Absent in transcripts recorded before kinds were.
    #[serde(default, skip_serializing_if = "ErrorKind::is_unknown")]
    pub cause: ErrorKind,
    pub message: String,
}

impl ConnectError {
    /// The error's kind: `cause` where recorded, else the stage's.
    pub fn kind(&self) -> ErrorKind {
        match self.cause {
            ErrorKind::Unknown => match self.stage {
                ConnectStage::Dns => ErrorKind::Dns,
                ConnectStage::Connect => ErrorKind::Connect,
                ConnectStage::Tls => ErrorKind::Tls,
                ConnectStage::Http => ErrorKind::Http,
            },
            known => known,
        }
    }
}

/// What kind of failure below the protocol ended an exchange or a connection: the typed
/// evidence a check matches (never the message text, which is for people and may change).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// The host name did not resolve.
    Dns,
    /// The TCP connection failed.
    Connect,
    /// The SSRF guard refused a loopback, private or other non-public address.
    NonPublicAddress,
    /// The TLS handshake failed.
    Tls,
    /// The HTTP exchange failed below the status line (a bad response head, a reset).
    Http,
    /// The request could not be built: a bad URL (from a server's `endpoint` event, say).
    InvalidRequest,
    /// More redirects than are followed.
    TooManyRedirects,
    /// A redirect pointed back at a URL already visited.
    RedirectLoop,
    /// A redirect to a scheme other than http or https was refused.
    RedirectRefused,
    /// Reading a response body or stream failed part way (reset, bad chunking).
    Body,
    /// Writing to a child's stdin failed (closed, not read).
    Pipe,
    /// A reply may have come, but could not be told apart from others in flight.
    LostReply,
    /// Not recorded: a transcript from before kinds were (or a kind this build does not know).
    #[default]
    #[serde(other)]
    Unknown,
}

impl ErrorKind {
    pub fn is_unknown(&self) -> bool {
        *self == ErrorKind::Unknown
    }

    /// A refused redirect: too many, a loop, or to another scheme.
    pub fn is_redirect(&self) -> bool {
        matches!(
            self,
            ErrorKind::TooManyRedirects | ErrorKind::RedirectLoop | ErrorKind::RedirectRefused
        )
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ConnectStage {
    Dns,
    Connect,
    Tls,
    Http,
}

/// One spawned stdio server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Process {
    pub at_ms: f64,
    pub program: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawn_error: Option<String>,
    /// Lines the server wrote to stderr (capped; see `stderr_dropped`).
    #[serde(default)]
    pub stderr: Vec<TimedLine>,
    #[serde(default)]
    pub stderr_dropped: usize,
    /// Lines on stdout that were not JSON-RPC messages: stdout pollution (capped; see
    /// `stdout_noise_dropped`).
    #[serde(default)]
    pub stdout_noise: Vec<TimedLine>,
    #[serde(default)]
    pub stdout_noise_dropped: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<Exit>,
    /// Why this process was started (the first attempt, or a respawn for the legacy fallback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// When the server first wrote anything, on stdout or stderr: the end of its start-up (a
    /// package manager's download, an interpreter's start), which is not its handshake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_output_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TimedLine {
    pub at_ms: f64,
    pub line: String,
}

/// How a process ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Exit {
    pub at_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// We ended it (probe finished, or a fallback); not a crash.
    pub by_probe: bool,
}

/// What an exchange was for.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum Step {
    #[serde(rename = "server/discover")]
    Discover,
    #[serde(rename = "initialize")]
    Initialize,
    #[serde(rename = "notifications/initialized")]
    Initialized,
    #[serde(rename = "tools/list")]
    ToolsList,
    #[serde(rename = "prompts/list")]
    PromptsList,
    #[serde(rename = "resources/list")]
    ResourcesList,
    #[serde(rename = "resources/templates/list")]
    ResourceTemplatesList,
    /// `GET` of a legacy HTTP+SSE stream, waiting for the `endpoint` event.
    #[serde(rename = "sse-open")]
    SseOpen,
    /// `DELETE` of a legacy Streamable HTTP session.
    #[serde(rename = "session-delete")]
    SessionDelete,
    /// A legacy `initialize` sent to a server already found modern, to learn if it is dual-era.
    #[serde(rename = "dual-era-check")]
    DualEraCheck,
    /// `GET` of the protected-resource metadata (RFC 9728).
    #[serde(rename = "resource-metadata")]
    ResourceMetadata,
    /// `GET` of the authorization-server metadata (RFC 8414 / OpenID discovery).
    #[serde(rename = "auth-server-metadata")]
    AuthServerMetadata,
    /// The handshake again, with a foreign `Origin` (DNS-rebinding protection).
    #[serde(rename = "origin-check")]
    OriginCheck,
    /// The handshake again, with a foreign `Host` (loopback targets).
    #[serde(rename = "host-check")]
    HostCheck,
    /// A malformed JSON-RPC body, to see what an error response reveals.
    #[serde(rename = "malformed-request")]
    MalformedRequest,
    /// A synthetic `tools/call` (`--call`) or the health tool's.
    #[serde(rename = "tools/call")]
    ToolsCall,
    /// `notifications/cancelled` for a `tools/call` given up at its budget.
    #[serde(rename = "notifications/cancelled")]
    Cancelled,
}

impl Step {
    /// The member of a list step's result that holds its items.
    pub fn list_key(self) -> Option<&'static str> {
        match self {
            Step::ToolsList => Some("tools"),
            Step::PromptsList => Some("prompts"),
            Step::ResourcesList => Some("resources"),
            Step::ResourceTemplatesList => Some("resourceTemplates"),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Step::Discover => "server/discover",
            Step::Initialize => "initialize",
            Step::Initialized => "notifications/initialized",
            Step::ToolsList => "tools/list",
            Step::PromptsList => "prompts/list",
            Step::ResourcesList => "resources/list",
            Step::ResourceTemplatesList => "resources/templates/list",
            Step::SseOpen => "sse-open",
            Step::SessionDelete => "session-delete",
            Step::DualEraCheck => "dual-era-check",
            Step::ResourceMetadata => "resource-metadata",
            Step::AuthServerMetadata => "auth-server-metadata",
            Step::OriginCheck => "origin-check",
            Step::HostCheck => "host-check",
            Step::MalformedRequest => "malformed-request",
            Step::ToolsCall => "tools/call",
            Step::Cancelled => "notifications/cancelled",
        }
    }
}

/// One request and everything that came back for it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Exchange {
    pub step: Step,
    pub transport: TransportKind,
    /// The era this request speaks, for JSON-RPC requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub era: Option<Era>,
    /// Page number (from 1) for list steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    pub at_ms: f64,
    /// The JSON-RPC id we sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    pub request: Request,
    /// Redirects followed before the final response.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redirects: Vec<Redirect>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<HttpResponse>,
    /// Every JSON-RPC message received while this exchange was open, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<Frame>,
    /// The body, when it was not (only) JSON-RPC frames: an HTML page, an error text, a
    /// metadata document. Capped; see `body_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default)]
    pub body_bytes: usize,
    pub outcome: Outcome,
    pub elapsed_ms: f64,
}

impl Exchange {
    /// The decoded reply with our id, when the exchange got one and it is usable JSON.
    ///
    /// Bounded, because a reply's DOM costs up to ~100× its text: a list step's items
    /// (`result.tools`, `.prompts`, `.resources`, `.resourceTemplates`) are skipped, not built
    /// (the array is empty; the judge reads items within its own budget), and any other reply
    /// that would take more than [`REPLY_BUDGET_MULTIPLE`] times its text (plus 1 MiB) is
    /// refused, as is one nested too deep or with a number out of range.
    pub fn reply(&self) -> Option<Decoded> {
        match self.outcome {
            Outcome::Reply { frame } => self.frames.get(frame).and_then(|f| {
                let limits = json::Limits {
                    budget: f
                        .raw
                        .len()
                        .saturating_mul(REPLY_BUDGET_MULTIPLE)
                        .saturating_add(1 << 20),
                    list: self.step.list_key().map(|k| (k, 0)),
                };
                jsonrpc::decode_within(&f.raw, &limits).ok().map(|(d, _)| d)
            }),
            _ => None,
        }
    }

    pub fn status(&self) -> Option<u16> {
        self.response.as_ref().map(|r| r.status)
    }

    /// The bytes the exchange took in: its HTTP body as read, or the messages it recorded (a
    /// reply and what came before it on an SSE stream or a stdio server's stdout).
    pub fn bytes_taken(&self) -> usize {
        let frames: usize = self.frames.iter().map(|f| f.raw.len()).sum();
        self.body_bytes.max(frames)
    }

    /// A response header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.response.as_ref().and_then(|r| {
            r.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Request {
    /// `POST`, `GET`, `DELETE`, or `stdio` for a line written to a child.
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Redirect {
    pub status: u16,
    pub location: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HttpResponse {
    pub status: u16,
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// Time to the response head, from the start of the exchange.
    pub ttfb_ms: f64,
}

/// A message received: the raw text, when it arrived, and the SSE event type it came in.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Frame {
    pub at_ms: f64,
    pub raw: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sse_event: Option<String>,
}

/// How an exchange ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Outcome {
    /// The reply with our id is `frames[frame]`.
    Reply { frame: usize },
    /// Accepted without a reply: `202` for a notification, or for a POST whose reply comes on
    /// a legacy SSE stream; a line written to a child for a notification.
    Accepted,
    /// An HTTP response without a JSON-RPC reply to our id (see `response`, `frames`, `body`).
    NoReply,
    /// A legacy SSE stream announced its POST endpoint.
    Endpoint { url: String },
    /// The stream, body or stdout ended before a reply.
    Closed,
    /// The step ran out of time.
    Timeout,
    /// The response passed the size cap.
    TooLarge { limit: usize },
    /// Reading or writing failed below the protocol (reset, broken pipe, bad HTTP). `cause` is
    /// what a check matches (the tag already takes the name `kind`); `message` is for people.
    TransportError {
        #[serde(default, skip_serializing_if = "ErrorKind::is_unknown")]
        cause: ErrorKind,
        message: String,
    },
    /// The metadata document was fetched (for non-JSON-RPC GETs).
    Fetched,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_kind_is_additive_in_the_transcript() {
        // Recorded before kinds were: loads, with the kind unknown.
        let old: Outcome =
            serde_json::from_str(r#"{"kind":"transport-error","message":"reset"}"#).unwrap();
        assert_eq!(
            old,
            Outcome::TransportError {
                cause: ErrorKind::Unknown,
                message: "reset".into()
            }
        );
        // Written back unchanged: an unknown kind is not spelled out.
        assert_eq!(
            serde_json::to_string(&old).unwrap(),
            r#"{"kind":"transport-error","message":"reset"}"#
        );
        let new = Outcome::TransportError {
            cause: ErrorKind::NonPublicAddress,
            message: "refused".into(),
        };
        let text = serde_json::to_string(&new).unwrap();
        assert_eq!(
            text,
            r#"{"kind":"transport-error","cause":"non-public-address","message":"refused"}"#
        );
        assert_eq!(serde_json::from_str::<Outcome>(&text).unwrap(), new);
        // A kind from a newer build reads as unknown, not as an error.
        let newer: Outcome = serde_json::from_str(
            r#"{"kind":"transport-error","cause":"quantum-flux","message":"x"}"#,
        )
        .unwrap();
        assert!(matches!(
            newer,
            Outcome::TransportError {
                cause: ErrorKind::Unknown,
                ..
            }
        ));
    }

    #[test]
    fn a_connect_error_kind_falls_back_to_its_stage() {
        let e: ConnectError =
            serde_json::from_str(r#"{"stage":"tls","message":"bad cert"}"#).unwrap();
        assert_eq!(e.kind(), ErrorKind::Tls);
        let e = ConnectError {
            stage: ConnectStage::Connect,
            cause: ErrorKind::NonPublicAddress,
            message: String::new(),
        };
        assert_eq!(e.kind(), ErrorKind::NonPublicAddress);
    }
}
