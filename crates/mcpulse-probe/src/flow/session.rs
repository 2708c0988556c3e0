//! The handshake steps every flow shares, and what their replies mean for the flow:
//! `server/discover` ([`discover`], [`classify_discover`]), a legacy `initialize`
//! ([`initialize`], [`classify_initialize`]), the rest of a legacy session
//! ([`legacy_session`]), the dual-era check, and, for a gated HTTP server, the metadata its
//! challenge names ([`challenge_metadata`]).
//!
//! It does not choose between them (each transport's flow does) and never judges: a
//! classification here only says which request comes next.

use super::inventory::inventory;
use crate::context::{Ctx, Wire, notification_deadline, request, send, target_is_public};
use http::Uri;
use mcpulse_transport::Call;
use mcpulse_transport::http::{HttpClient, resolve};
use mcpulse_transport::streamable_http;
use mcpulse_wire::auth;
use mcpulse_wire::jsonrpc::Message;
use mcpulse_wire::message;
use mcpulse_wire::transcript::{Exchange, Outcome, Step};
use mcpulse_wire::version::{self, Era};
use serde_json::Value;
use tokio::time::Instant;

/// What a `server/discover` exchange means for the flow.
#[derive(Debug, PartialEq)]
pub(super) enum Discovered {
    /// A discover result: the capabilities.
    Modern(Value),
    /// A 2026 error code: a modern server that refused our request; nothing more to do.
    ModernRefused,
    /// Not evidence of either era (auth, 5xx, timeout, no connection): stop here.
    Stop,
    /// Anything else: try the legacy handshake.
    Legacy,
}

pub(super) fn classify_discover(ex: &Exchange) -> Discovered {
    if let Some(reply) = ex.reply() {
        return match reply.message {
            Message::Result { result, .. }
                if result.get("supportedVersions").is_some_and(Value::is_array) =>
            {
                Discovered::Modern(result.get("capabilities").cloned().unwrap_or(Value::Null))
            }
            // -32022 listing only legacy versions: a legacy server that knows the new code.
            Message::Error { error, .. }
                if error.code == version::UNSUPPORTED_PROTOCOL_VERSION
                    && only_legacy(error.data.as_ref()) =>
            {
                Discovered::Legacy
            }
            Message::Error { error, .. } if version::is_modern_error(error.code) => {
                Discovered::ModernRefused
            }
            _ if matches!(ex.status(), Some(401 | 403)) => Discovered::Stop,
            _ if ex.status().is_some_and(|s| s >= 500) => Discovered::Stop,
            _ => Discovered::Legacy,
        };
    }
    if ex.transport == mcpulse_wire::transcript::TransportKind::Stdio {
        // stdio: an exit, a closed stdout or silence means legacy (the spec's fallback rule).
        return Discovered::Legacy;
    }
    match ex.outcome {
        Outcome::Timeout | Outcome::TransportError { .. } | Outcome::TooLarge { .. } => {
            return Discovered::Stop;
        }
        _ => {}
    }
    if has_modern_error(ex) {
        return Discovered::ModernRefused;
    }
    match ex.status() {
        Some(401 | 403) => Discovered::Stop,
        Some(s) if s >= 500 => Discovered::Stop,
        Some(_) => Discovered::Legacy,
        // stdio: closed or silent → legacy (respawned)
        None => Discovered::Legacy,
    }
}

/// Whether `data.supported` of a -32022 error lists versions, all of them legacy.
fn only_legacy(data: Option<&Value>) -> bool {
    let supported: Vec<&str> = data
        .and_then(|d| d.get("supported"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    !supported.is_empty()
        && supported
            .iter()
            .all(|v| version::era_of(v) == Some(Era::Legacy))
}

/// Whether any frame of the exchange is an error with a 2026 code (an id-less error counts).
fn has_modern_error(ex: &Exchange) -> bool {
    ex.frames.iter().any(|f| {
        matches!(mcpulse_wire::jsonrpc::peek(&f.raw).map(|d| d.message),
            Ok(Message::Error { error, .. }) if version::is_modern_error(error.code))
    })
}

/// What an `initialize` exchange means for the flow.
#[derive(Debug, PartialEq)]
pub(super) enum Initialized {
    Ok {
        version: String,
        capabilities: Value,
    },
    Stop,
    /// 400/404/405 without a modern body: perhaps the legacy HTTP+SSE transport.
    TrySse,
}

pub(super) fn classify_initialize(ex: &Exchange) -> Initialized {
    if let Some(reply) = ex.reply()
        && let Message::Result { result, .. } = reply.message
    {
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let capabilities = result.get("capabilities").cloned().unwrap_or(Value::Null);
        return Initialized::Ok {
            version,
            capabilities,
        };
    }
    match ex.status() {
        Some(400 | 404 | 405) if !has_modern_error(ex) => Initialized::TrySse,
        _ => Initialized::Stop,
    }
}

/// After finding a modern server, a legacy `initialize` tells whether it also serves legacy
/// clients. Nothing else is sent in that session.
pub(super) async fn dual_era_check(wire: &mut Wire<'_>, ctx: &mut Ctx<'_>) -> Option<String> {
    let i = initialize(wire, ctx, Step::DualEraCheck).await;
    ctx.ex(i).header("mcp-session-id").map(str::to_owned)
}

/// A legacy `initialize` over `wire`, as `step` (the handshake, or the dual-era check).
pub(super) async fn initialize(wire: &mut Wire<'_>, ctx: &mut Ctx<'_>, step: Step) -> usize {
    let id = ctx.id();
    let msg = message::initialize(id, &ctx.plan.client);
    let deadline = ctx.deadline;
    send(wire, ctx, request(step, Era::Legacy, id, &msg), deadline).await
}

/// The rest of a legacy session once `initialize` succeeded: `notifications/initialized`, then
/// the inventory.
pub(super) async fn legacy_session(wire: &mut Wire<'_>, ctx: &mut Ctx<'_>, capabilities: &Value) {
    let deadline = notification_deadline(ctx);
    let msg = message::initialized();
    let call = Call {
        step: Step::Initialized,
        era: Some(Era::Legacy),
        page: None,
        id: None,
        message: &msg,
    };
    send(wire, ctx, call, deadline).await;
    inventory(wire, ctx, Era::Legacy, capabilities).await;
}

/// `server/discover` (request `id`) over `wire`, waiting until `deadline`.
pub(super) async fn discover(
    wire: &mut Wire<'_>,
    ctx: &mut Ctx<'_>,
    id: i64,
    deadline: Instant,
) -> usize {
    let msg = message::discover(id, version::MODERN, &ctx.plan.client);
    let call = request(Step::Discover, Era::Modern, id, &msg);
    send(wire, ctx, call, deadline).await
}

/// For a 401/403 whose challenge names protected-resource metadata, fetch it (without the
/// user's credentials) so the report can say how to authenticate.
pub(super) async fn challenge_metadata(
    client: &mut HttpClient,
    uri: &Uri,
    ctx: &mut Ctx<'_>,
    i: usize,
) {
    let ex = ctx.ex(i);
    if !matches!(ex.status(), Some(401 | 403)) {
        return;
    }
    let Some(url) = ex
        .header("www-authenticate")
        .and_then(auth::resource_metadata)
    else {
        return;
    };
    let Ok(prm) = resolve(uri, &url) else { return };
    if !matches!(prm.scheme_str(), Some("http" | "https")) {
        return;
    }
    // The SSRF guard holds for this fetch too: a public target may not send mcpulse to a
    // private address, with or without the security checks.
    client.deny_private = target_is_public(ctx, client);
    let ex = streamable_http::get_document(
        client,
        &prm,
        Step::ResourceMetadata,
        ctx.limits,
        ctx.deadline,
    )
    .await;
    client.deny_private = false;
    ctx.push(ex);
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcpulse_wire::transcript::{ErrorKind, Frame, HttpResponse, Request, TransportKind};

    fn ex(status: Option<u16>, body: Option<&str>, outcome: Outcome) -> Exchange {
        Exchange {
            step: Step::Discover,
            transport: if status.is_some() {
                TransportKind::StreamableHttp
            } else {
                TransportKind::Stdio
            },
            era: Some(Era::Modern),
            page: None,
            at_ms: 0.0,
            id: Some(1),
            request: Request::default(),
            redirects: Vec::new(),
            response: status.map(|status| HttpResponse {
                status,
                headers: Vec::new(),
                ttfb_ms: 1.0,
            }),
            frames: body
                .map(|b| {
                    vec![Frame {
                        at_ms: 1.0,
                        raw: b.into(),
                        sse_event: None,
                    }]
                })
                .unwrap_or_default(),
            body: None,
            body_bytes: 0,
            outcome,
            elapsed_ms: 1.0,
        }
    }
    const REPLY: Outcome = Outcome::Reply { frame: 0 };

    #[test]
    fn discover_results() {
        let ok = ex(
            Some(200),
            Some(
                r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}}"#,
            ),
            REPLY,
        );
        assert_eq!(
            classify_discover(&ok),
            Discovered::Modern(serde_json::json!({"tools":{}}))
        );
        let v = ex(
            Some(400),
            Some(
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"u","data":{"supported":["2027-01-01"],"requested":"2026-07-28"}}}"#,
            ),
            REPLY,
        );
        assert_eq!(classify_discover(&v), Discovered::ModernRefused);
        let legacy_knows_code = ex(
            Some(400),
            Some(
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"u","data":{"supported":["2025-11-25"]}}}"#,
            ),
            REPLY,
        );
        assert_eq!(classify_discover(&legacy_knows_code), Discovered::Legacy);
        // id-less modern error body still proves the era
        let idless = ex(
            Some(400),
            Some(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32020,"message":"h"}}"#),
            Outcome::NoReply,
        );
        assert_eq!(classify_discover(&idless), Discovered::ModernRefused);
    }

    #[test]
    fn discover_failures_that_are_not_evidence_of_an_era() {
        for status in [401, 403, 500, 502, 503] {
            assert_eq!(
                classify_discover(&ex(Some(status), None, Outcome::NoReply)),
                Discovered::Stop,
                "{status}"
            );
        }
        assert_eq!(
            classify_discover(&ex(Some(200), None, Outcome::Timeout)),
            Discovered::Stop
        );
        let refused = ex(
            Some(200),
            None,
            Outcome::TransportError {
                cause: ErrorKind::Connect,
                message: "x".into(),
            },
        );
        assert_eq!(
            classify_discover(&Exchange {
                response: None,
                ..refused
            }),
            Discovered::Stop
        );
    }

    #[test]
    fn discover_legacy_candidates() {
        for status in [400, 404, 405, 406, 415, 200] {
            assert_eq!(
                classify_discover(&ex(Some(status), None, Outcome::NoReply)),
                Discovered::Legacy,
                "{status}"
            );
        }
        let not_found = ex(
            Some(200),
            Some(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"nf"}}"#),
            REPLY,
        );
        assert_eq!(classify_discover(&not_found), Discovered::Legacy);
        // stdio: silence, an exit or a closed stdout all mean legacy
        for o in [
            Outcome::Timeout,
            Outcome::Closed,
            Outcome::TransportError {
                cause: ErrorKind::Pipe,
                message: "pipe".into(),
            },
        ] {
            assert_eq!(classify_discover(&ex(None, None, o)), Discovered::Legacy);
        }
    }

    #[test]
    fn initialize_results() {
        let ok = ex(
            Some(200),
            Some(
                r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{}}}"#,
            ),
            REPLY,
        );
        assert!(
            matches!(classify_initialize(&ok), Initialized::Ok { ref version, .. } if version == "2025-06-18")
        );
        for status in [400, 404, 405] {
            assert_eq!(
                classify_initialize(&ex(Some(status), None, Outcome::NoReply)),
                Initialized::TrySse
            );
        }
        assert_eq!(
            classify_initialize(&ex(Some(401), None, Outcome::NoReply)),
            Initialized::Stop
        );
        assert_eq!(
            classify_initialize(&ex(Some(500), None, Outcome::NoReply)),
            Initialized::Stop
        );
        let modern = ex(
            Some(400),
            Some(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32022,"message":"u"}}"#),
            Outcome::NoReply,
        );
        assert_eq!(classify_initialize(&modern), Initialized::Stop);
    }
}
