//! What to probe: a server and how to reach it. How to probe it is `crate::plan`'s.

use mcpulse_wire::redact::{self, Secrets};
use mcpulse_wire::transcript::{TargetKind, TargetRecord};

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
