//! What every flow step shares: the probe's context ([`Ctx`]: plan, deadline, request ids,
//! the transcript being written), the connection a request goes over ([`Wire`]) and [`send`],
//! how a request is framed ([`request`]), the notification deadline, and whether the target is
//! public (the SSRF guard of every metadata fetch).
//!
//! It owns no flow: which request comes next is `flow`'s business, what the security checks
//! send is `security`'s. Both depend on this module and not on each other's files, so there is
//! no import cycle between them.

use crate::plan::Plan;
use http::Uri;
use mcpulse_transport::clock::Clock;
use mcpulse_transport::http::HttpClient;
use mcpulse_transport::legacy_sse::SseStream;
use mcpulse_transport::stdio::StdioChild;
use mcpulse_transport::streamable_http::{self, Post};
use mcpulse_transport::{Call, Limits};
use mcpulse_wire::transcript::{Exchange, Step, Transcript};
use mcpulse_wire::version::{self, Era};
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// One probe as it runs: the plan, the deadline, the request ids handed out so far, and the
/// transcript being written.
pub(crate) struct Ctx<'a> {
    pub(crate) plan: &'a Plan,
    pub(crate) limits: Limits,
    pub(crate) deadline: Instant,
    next_id: i64,
    pub(crate) clock: Clock,
    /// When the last protocol step finished (before cleanup).
    done_ms: Option<f64>,
    pub(crate) tr: &'a mut Transcript,
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(
        plan: &'a Plan,
        deadline: Instant,
        clock: Clock,
        tr: &'a mut Transcript,
    ) -> Self {
        Ctx {
            plan,
            limits: Limits {
                max_response_bytes: plan.max_response_bytes,
            },
            deadline,
            next_id: 0,
            clock,
            done_ms: None,
            tr,
        }
    }
    /// When the last protocol step finished, or now if none has said so.
    pub(crate) fn done_ms(&self) -> f64 {
        self.done_ms.unwrap_or_else(|| self.clock.at())
    }
    pub(crate) fn id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }
    pub(crate) fn push(&mut self, ex: Exchange) -> usize {
        self.tr.exchanges.push(ex);
        self.tr.exchanges.len() - 1
    }
    pub(crate) fn ex(&self, i: usize) -> &Exchange {
        &self.tr.exchanges[i]
    }
    pub(crate) fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }
    pub(crate) fn mark_done(&mut self) {
        self.done_ms = Some(self.clock.at());
    }
}

/// A connection to a server over which JSON-RPC requests can be sent.
pub(crate) enum Wire<'a> {
    Http {
        client: &'a mut HttpClient,
        uri: &'a Uri,
        /// For a legacy session: the session id, if any, and the negotiated version.
        session: Option<(Option<String>, String)>,
    },
    Sse {
        client: &'a mut HttpClient,
        stream: SseStream,
    },
    Stdio(&'a mut StdioChild),
}

/// Sends one message over `wire` (`call.era` is set: it chooses the headers), records the
/// exchange, and returns its index.
pub(crate) async fn send(
    wire: &mut Wire<'_>,
    ctx: &mut Ctx<'_>,
    call: Call<'_>,
    deadline: Instant,
) -> usize {
    let user_headers = ctx.plan.headers.as_slice();
    let method = call
        .message
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let ex = match wire {
        Wire::Http {
            client,
            uri,
            session,
        } => {
            let mut headers = Vec::new();
            match (call.era.unwrap_or(Era::Legacy), &session) {
                (Era::Modern, _) => {
                    headers.push((
                        "mcp-protocol-version".to_owned(),
                        version::MODERN.to_owned(),
                    ));
                    // The spec requires `Mcp-Name` (params.name) on a modern `tools/call`.
                    if method == "tools/call"
                        && let Some(name) =
                            call.message.pointer("/params/name").and_then(Value::as_str)
                    {
                        headers.push(("mcp-name".to_owned(), name.to_owned()));
                    }
                    headers.push(("mcp-method".to_owned(), method));
                }
                (Era::Legacy, Some((sid, ver))) => {
                    if let Some(sid) = sid {
                        headers.push(("mcp-session-id".to_owned(), sid.clone()));
                    }
                    headers.push(("mcp-protocol-version".to_owned(), ver.clone()));
                }
                (Era::Legacy, None) => {}
            }
            let post = Post {
                uri,
                call,
                headers,
                user_headers,
            };
            streamable_http::post(client, post, ctx.limits, deadline).await
        }
        Wire::Sse { client, stream } => {
            stream
                .exchange(client, call, user_headers, ctx.limits, deadline)
                .await
        }
        Wire::Stdio(child) => child.exchange(call, deadline).await,
    };
    ctx.push(ex)
}

/// How long a notification may take: a server answers it with a bare `202`, so a server that
/// takes longer is stuck, and the requests after it (which the judge needs to see fail) must
/// still be sent within the probe's deadline.
pub(crate) fn notification_deadline(ctx: &Ctx<'_>) -> Instant {
    ctx.deadline.min(Instant::now() + Duration::from_secs(1))
}

/// Request `id` (not a list page).
pub(crate) fn request(step: Step, era: Era, id: i64, message: &Value) -> Call<'_> {
    Call {
        step,
        era: Some(era),
        page: None,
        id: Some(id),
        message,
    }
}

/// Whether the target was reached on a public address: then the metadata it names may not
/// point mcpulse at loopback, private, link-local or other non-public addresses (SSRF guard).
pub(crate) fn target_is_public(ctx: &Ctx<'_>, client: &HttpClient) -> bool {
    ctx.tr
        .connections
        .iter()
        .chain(client.connections.iter())
        .find_map(|c| c.addr.as_deref())
        .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
        .is_some_and(|a| mcpulse_transport::http::is_public(a.ip()))
}
