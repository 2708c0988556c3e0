//! A server that did not complete a handshake: which layer failed (DNS, connect, TLS, HTTP,
//! the process, the protocol), from the last attempt, with the earlier attempts for context.
//! Authentication walls are `auth`'s; what a live server did wrong is the other families'.

use super::stdio::process_of;
use super::{Judgement, Report};
use crate::evidence::{body_hint, content_type, describe, looks_like_html, strings};
use crate::rules::{Finding, Rule};
use mcpulse_wire::jsonrpc::{self, Message};
use mcpulse_wire::transcript::{ConnectStage, Exchange, Outcome, Step, TargetKind, TransportKind};
use mcpulse_wire::version::{self, Era};

impl Judgement<'_> {
    /// No handshake completed: say which layer failed, from the last attempt.
    pub(super) fn not_up(&mut self, report: &mut Report) {
        let tr = self.tr;
        if tr.target.kind == TargetKind::Stdio {
            report.transport = Some(TransportKind::Stdio.as_str());
            if let Some(p) = tr.processes.iter().rev().find(|p| p.spawn_error.is_some()) {
                let e = p.spawn_error.clone().unwrap_or_default();
                self.add(Rule::SpawnFailed.finding(format!("could not start the server: {e}")));
                return;
            }
        }
        let attempts: Vec<&Exchange> = tr
            .exchanges
            .iter()
            .filter(|e| matches!(e.step, Step::Discover | Step::Initialize | Step::SseOpen))
            .collect();
        let Some(last) = attempts.last().copied() else {
            // Nothing was even sent: a connection failure, or the deadline.
            if let Some(f) = self.connect_failure() {
                self.add(f);
            } else {
                self.add(
                    Rule::Timeout.finding("the probe ran out of time before any request completed"),
                );
            }
            return;
        };
        report.transport = Some(last.transport.as_str());
        if last.era == Some(Era::Modern) && last.step == Step::Discover {
            report.era = None;
        }
        // Auth first: "up but gated" is a fact about the server, whatever else failed.
        if let Some(status @ (401 | 403)) = last.status() {
            self.auth(report, last, status);
            return;
        }
        let step = last.step.as_str();
        let finding = match &last.outcome {
            Outcome::Timeout => Rule::Timeout.finding(format!(
                "no reply to {step} within {} ms{}",
                tr.plan.timeout_ms,
                if last.transport == TransportKind::Stdio {
                    match process_of(tr, last) {
                        Some(p) if p.first_output_ms.is_none() => {
                            "; the server is running but has written nothing yet: still starting (a package manager's cold download can take a minute) or stuck; raise the timeout to tell which (--timeout; a monitor target's timeout)"
                        }
                        _ => "; the server is running and wrote to stderr, but did not answer: it may be stuck, or slow (raise the timeout: --timeout; a monitor target's timeout)",
                    }
                } else {
                    ""
                }
            )),
            Outcome::TooLarge { limit } => Rule::ResponseTooLarge.finding(format!(
                "the reply to {step} passed the {limit}-byte cap (--max-response-size)"
            )),
            Outcome::TransportError { cause, message } => match self.connect_failure() {
                Some(f) => f,
                None if cause.is_redirect() => {
                    Rule::HttpFailed.finding(format!("{step}: {message}"))
                }
                None if last.transport == TransportKind::Stdio => self.exited(step, message),
                None => Rule::HttpFailed.finding(format!("{step}: {message}")),
            },
            Outcome::Closed if last.transport == TransportKind::Stdio => {
                self.exited(step, "stdout closed")
            }
            Outcome::Closed if last.step == Step::SseOpen => {
                Rule::SseNoEndpoint.finding("the SSE stream closed before the endpoint event")
            }
            Outcome::Closed => {
                Rule::HttpFailed.finding(format!("the response to {step} ended before the reply"))
            }
            Outcome::Endpoint { .. } => self.handshake_failed(
                "the legacy SSE endpoint was announced, but initialize was never answered".into(),
                &[],
            ),
            Outcome::Reply { .. } => match last.reply().map(|d| d.message) {
                // A modern server that does not support the revision we speak: up, but no
                // common version. Degraded, not down.
                Some(Message::Error { error, .. })
                    if last.step == Step::Discover
                        && error.code == version::UNSUPPORTED_PROTOCOL_VERSION =>
                {
                    report.era = Some(Era::Modern);
                    report.supported_versions =
                        strings(error.data.as_ref().and_then(|d| d.get("supported")));
                    Rule::ProtocolVersionUnknown.finding(format!(
                        "server/discover: the server does not support {} (it supports {:?})",
                        version::MODERN,
                        report.supported_versions
                    ))
                }
                Some(Message::Error { error, .. }) => self.handshake_failed(
                    format!("{step} was rejected: {} {}", error.code, error.message),
                    &attempts,
                ),
                _ => self.handshake_failed(
                    format!(
                        "{step} got an unusable result{}",
                        self.replies
                            .defect(last)
                            .map(|e| format!(" (not usable JSON: {e})"))
                            .unwrap_or_default()
                    ),
                    &attempts,
                ),
            },
            Outcome::NoReply | Outcome::Accepted | Outcome::Fetched => {
                self.no_reply(last, &attempts)
            }
        };
        self.add(finding);
    }

    pub(super) fn no_reply(&self, last: &Exchange, attempts: &[&Exchange]) -> Finding {
        let step = last.step.as_str();
        let status = last.status().unwrap_or(0);
        if status >= 500 {
            return Rule::ServerError
                .finding(format!("HTTP {status} to {step}{}", body_hint(last)));
        }
        if last.step == Step::SseOpen {
            // With --transport sse the GET is the only attempt: no "earlier" part then.
            let earlier = self.earlier_attempts(attempts);
            let earlier = if earlier.is_empty() {
                String::new()
            } else {
                format!("{}; ", earlier.trim_start_matches("; "))
            };
            return Rule::SseNoEndpoint.finding(format!(
                "no MCP endpoint found: {earlier}GET for a legacy SSE stream got HTTP {status}{}",
                body_hint(last)
            ));
        }
        if !last.frames.is_empty() {
            let ids: Vec<String> = last
                .frames
                .iter()
                .filter_map(|f| jsonrpc::peek(&f.raw).ok())
                .filter_map(|d| d.message.response_id().map(|i| i.to_string()))
                .collect();
            if !ids.is_empty() {
                if let Some(Message::Error { error, .. }) = last
                    .frames
                    .last()
                    .and_then(|f| jsonrpc::peek(&f.raw).ok())
                    .map(|d| d.message)
                {
                    return self.handshake_failed(
                        format!("HTTP {status} to {step}: {} {}", error.code, error.message),
                        attempts,
                    );
                }
                return Rule::WrongReplyId.finding(format!(
                    "{step} was sent with id {} but the reply carried id {}",
                    last.id.map(|i| i.to_string()).unwrap_or_default(),
                    ids.join(", ")
                ));
            }
        }
        if (200..300).contains(&status) {
            let what = match last.body.as_deref() {
                None | Some("") => "an empty body".to_owned(),
                Some(b) if looks_like_html(b) => "an HTML page".to_owned(),
                Some(_) => format!("a body that is not JSON-RPC ({})", content_type(last)),
            };
            return Rule::NotJsonRpc.finding(format!(
                "HTTP {status} to {step} with {what}: is this the MCP endpoint?"
            ));
        }
        self.handshake_failed(
            format!("HTTP {status} to {step}{}", body_hint(last)),
            attempts,
        )
    }

    /// `handshake-failed`, however the handshake was refused (an error reply, an unusable
    /// result, an error status, an endpoint never followed by a reply): one place, so the
    /// message always ends with the earlier attempts for context.
    fn handshake_failed(&self, what: String, attempts: &[&Exchange]) -> Finding {
        Rule::HandshakeFailed.finding(format!("{what}{}", self.earlier_attempts(attempts)))
    }

    /// "; server/discover: HTTP 400" for the attempts before the last, for context.
    pub(super) fn earlier_attempts(&self, attempts: &[&Exchange]) -> String {
        let n = attempts.len();
        if n < 2 {
            return String::new();
        }
        let parts: Vec<String> = attempts[..n - 1]
            .iter()
            .map(|e| format!("{}: {}", e.step.as_str(), describe(Some(e))))
            .collect();
        format!("; earlier, {}", parts.join("; "))
    }

    pub(super) fn exited(&self, step: &str, what: &str) -> Finding {
        let p = self.tr.processes.last();
        let how = match p.and_then(|p| p.exit.as_ref()) {
            Some(e) => match (e.code, e.signal) {
                (Some(c), _) => format!("exited with code {c}"),
                (None, Some(s)) => format!("was killed by signal {s}"),
                _ => "exited".to_owned(),
            },
            None => format!("stopped answering ({what})"),
        };
        let hint = p
            .and_then(|p| p.stderr.last())
            .map(|l| format!("; last stderr line: {}", l.line))
            .unwrap_or_default();
        Rule::ProcessExited.finding(format!("the server {how} before answering {step}{hint}"))
    }

    pub(super) fn connect_failure(&self) -> Option<Finding> {
        // Only a failure with no successful connection at all is an outage.
        if self.tr.connections.iter().any(|c| c.error.is_none()) {
            return None;
        }
        let c = self.tr.connections.iter().find(|c| c.error.is_some())?;
        let e = c.error.as_ref()?;
        Some(match e.stage {
            ConnectStage::Dns => {
                Rule::DnsFailed.finding(format!("could not resolve {}: {}", c.authority, e.message))
            }
            ConnectStage::Connect => Rule::ConnectFailed.finding(format!(
                "could not connect to {}: {}",
                c.authority, e.message
            )),
            ConnectStage::Tls => Rule::TlsFailed.finding(format!(
                "TLS handshake with {} failed: {}",
                c.authority, e.message
            )),
            ConnectStage::Http => {
                Rule::HttpFailed.finding(format!("HTTP with {} failed: {}", c.authority, e.message))
            }
        })
    }
}
