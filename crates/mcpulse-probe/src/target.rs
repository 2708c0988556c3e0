//! What to probe and how.

use mcpulse_wire::message::ClientInfo;
use mcpulse_wire::redact::{self, Secrets};
use mcpulse_wire::transcript::{PlanRecord, TargetKind, TargetRecord};
use mcpulse_wire::version::EraMode;
use std::time::Duration;

/// A server and how to reach it.
#[derive(Debug, Clone)]
pub enum Target {
    /// A Streamable HTTP or legacy HTTP+SSE endpoint.
    Http { url: http::Uri },
    /// A command that speaks MCP over its stdin and stdout.
    Stdio { program: String, args: Vec<String> },
}

/// Why a target cannot be probed at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetError(pub String);

impl std::fmt::Display for TargetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TargetError {}

impl Target {
    /// Parses an HTTP(S) URL target.
    pub fn http(url: &str) -> Result<Target, TargetError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| TargetError(format!("{:?} is not a valid URL: {e}", redact::url(url))))?;
        match uri.scheme_str() {
            Some("http") | Some("https") => {}
            Some(other) => {
                return Err(TargetError(format!(
                    "unsupported URL scheme {other:?}: use http:// or https://, or `-- <command>` for a stdio server"
                )));
            }
            None => {
                return Err(TargetError(format!(
                    "{:?} has no scheme: write http://{} (or https://)",
                    redact::url(url),
                    redact::url(url)
                )));
            }
        }
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(TargetError(format!(
                "{:?} has credentials in the URL, which mcpulse does not send; pass them as a header instead, e.g. -H 'Authorization: Basic ${{CREDS}}'",
                redact::url(url)
            )));
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(TargetError(format!("{:?} has no host", redact::url(url))));
        }
        Ok(Target::Http { url: uri })
    }

    /// A stdio target from a command line.
    pub fn stdio(command: &[String]) -> Result<Target, TargetError> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| TargetError("no command given after `--`".into()))?;
        if program.is_empty() {
            return Err(TargetError("the command after `--` is empty".into()));
        }
        Ok(Target::Stdio {
            program: program.clone(),
            args: args.to_vec(),
        })
    }

    /// How the target appears in transcripts and reports: `secrets` hidden, and the URL or
    /// the command line redacted by the rules of [`redact::target_url`] and [`redact::args`].
    pub fn record(&self, secrets: &Secrets) -> TargetRecord {
        match self {
            Target::Http { url } => TargetRecord {
                display: redact::target_url(&url.to_string(), secrets),
                kind: TargetKind::Http,
                host: url
                    .host()
                    .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_owned()),
            },
            Target::Stdio { program, args } => {
                let mut display = secrets.hide(program);
                for a in redact::args(args, secrets) {
                    display.push(' ');
                    display.push_str(&a);
                }
                TargetRecord {
                    display,
                    kind: TargetKind::Stdio,
                    host: None,
                }
            }
        }
    }
}

/// Which HTTP transport to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransportMode {
    /// Streamable HTTP, falling back to legacy HTTP+SSE.
    #[default]
    Auto,
    StreamableHttp,
    Sse,
}

/// The steps and deadlines of a probe.
#[derive(Debug, Clone)]
pub struct Plan {
    pub era: EraMode,
    pub transport: TransportMode,
    /// Bounds the whole probe, whatever the server does.
    pub timeout: Duration,
    /// The most bytes one response may take.
    pub max_response_bytes: usize,
    /// The most pages followed per list.
    pub max_pages: u32,
    /// Headers the user supplied (credentials): never recorded in clear.
    pub headers: Vec<(String, String)>,
    pub client: ClientInfo,
    /// How long a stdio child gets to exit after its stdin closes, and again after SIGTERM.
    pub shutdown_grace: Duration,
    /// Send the security checks' extra, read-only requests (HTTP targets).
    pub security: bool,
    /// Extra trusted root certificates (DER), from `--ca-file`.
    pub extra_roots: Vec<Vec<u8>>,
    /// Environment variables for a stdio server (credentials: never recorded).
    pub env: Vec<(String, String)>,
    /// Start a stdio server with only a small set of the caller's variables (PATH, HOME, the
    /// locale, …) plus `env`, rather than all of them: the monitor's own secrets (sink URLs,
    /// API tokens, other targets' credentials) are not a server's business.
    pub clean_env: bool,
    /// In auto mode over stdio, also check whether a modern server serves legacy clients, in a
    /// second process of its own (a second start-up, hence opt-in; over HTTP it is one request
    /// and always made).
    pub stdio_dual_era: bool,
    /// Values that must not appear in the transcript (what config expansion read from the
    /// environment, a stdio server's environment values): hidden wherever the probe records
    /// something about the target ([`mcpulse_wire::transcript::Transcript::hide`]).
    pub secrets: Secrets,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            era: EraMode::Auto,
            transport: TransportMode::Auto,
            timeout: Duration::from_secs(10),
            max_response_bytes: 8 * 1024 * 1024,
            max_pages: 50,
            headers: Vec::new(),
            client: ClientInfo {
                name: "mcpulse".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            shutdown_grace: Duration::from_millis(100),
            security: true,
            extra_roots: Vec::new(),
            env: Vec::new(),
            clean_env: false,
            stdio_dual_era: false,
            secrets: Secrets::default(),
        }
    }
}

impl Plan {
    pub fn record(&self) -> PlanRecord {
        PlanRecord {
            era: self.era,
            security: self.security,
            credentials: !self.headers.is_empty(),
            timeout_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            max_response_bytes: self.max_response_bytes,
        }
    }
}
