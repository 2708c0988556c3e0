//! The security checks' extra requests (HTTP targets; `--no-security` skips them).
//!
//! Few and read-only, by rule: the successful handshake replayed with a foreign `Origin` (and,
//! for loopback targets, a foreign `Host`) — a `ping` with that header within the session
//! instead over HTTP+SSE, and for the `Host` of a legacy Streamable HTTP session —, one
//! malformed request (within the session, for a legacy Streamable HTTP server with sessions),
//! and for a gated server the
//! OAuth metadata documents (RFC 9728, RFC 8414 / OpenID discovery). Never a tool call; never
//! the user's credentials to any host but the target; never a metadata URL on a non-public
//! address when the target itself is public (SSRF guard). Sessions opened by a check are
//! deleted. What the answers mean is the judge's business (`mcpulse-judge`'s security rules).

use crate::context::{Ctx, target_is_public};
use http::{Method, Uri};
use mcpulse_transport::Call;
use mcpulse_transport::http::{HttpClient, is_loopback_host, origin as http_origin, resolve};
use mcpulse_transport::streamable_http::{self, Post};
use mcpulse_wire::checks::{FOREIGN_HOST, FOREIGN_ORIGIN, MALFORMED_BODY};
use mcpulse_wire::jsonrpc::Message;
use mcpulse_wire::transcript::{Exchange, Step, TransportKind};
use mcpulse_wire::version::{self, Era};
use serde_json::Value;

/// Exchanges made beside the main flow, each on a connection of its own, and the clients that
/// made them (for their connection records).
#[derive(Default)]
pub(crate) struct Side {
    pub(crate) exchanges: Vec<Exchange>,
    pub(crate) clients: Vec<HttpClient>,
}

impl Side {
    /// Appends the exchanges to the transcript and the connections to the probe's client.
    pub(crate) fn record(self, client: &mut HttpClient, ctx: &mut Ctx<'_>) {
        for ex in self.exchanges {
            ctx.push(ex);
        }
        for forked in self.clients {
            client.connections.extend(forked.connections);
        }
    }

    /// Runs an optional side future; nothing if there is none.
    pub(crate) async fn maybe(f: Option<impl Future<Output = Side>>) -> Side {
        match f {
            Some(f) => f.await,
            None => Side::default(),
        }
    }
}

/// What the side checks may ride, besides a replay of the handshake.
pub(crate) enum Rides {
    /// Nothing: both rebinding checks replay the handshake, and the malformed body goes on a
    /// connection of its own (a modern server; a legacy one that issued no session id).
    Nothing,
    /// A legacy Streamable HTTP session with an id: the Origin check replays the handshake (a
    /// foreign page must be turned away at the door; a session it gets is compared with the
    /// probe's), while the Host check and the malformed body ride the probe's own session
    /// ([`in_session`]), sent by the flow before it ends the session. The probe's session id.
    Session(String),
    /// An open HTTP+SSE session: both rebinding checks are `ping`s POSTed to its endpoint.
    Sse(Uri),
}

/// The checks that replay the successful handshake (a foreign `Origin`, and for loopback
/// targets a foreign `Host`) and send one malformed request, ready to run: `None` with
/// `--no-security`, without a successful handshake, or past the deadline. The future borrows
/// nothing from `ctx`, so the flow can run it beside its own last steps (after the health
/// timings are taken: the checks' load must not colour them). `rides` says which of them
/// ride a session instead (see [`Rides`]).
///
/// Over HTTP+SSE the foreign header goes on a `ping` to the session's endpoint (so the
/// session must stay open until the future is done), not on a new `GET` of the stream:
/// servers check these headers where messages are received (the TypeScript SDK's
/// `SSEServerTransport` validates them on POST only), and a stream alone lets a rebinding page
/// call nothing.
pub(crate) fn side_checks<'u>(
    client: &HttpClient,
    uri: &'u Uri,
    rides: Rides,
    ctx: &mut Ctx<'_>,
) -> Option<impl Future<Output = Side> + use<'u>> {
    if !ctx.plan.security || ctx.expired() {
        return None;
    }
    let hs = handshake(ctx)?;
    let loopback = uri.host().is_some_and(is_loopback_host);
    let (id_origin, id_host) = (ctx.id(), ctx.id());
    let user_headers = ctx.plan.headers.clone();
    let (limits, deadline) = (ctx.limits, ctx.deadline);
    // A replayed handshake that opens a session and then never finishes its answer must leave
    // time to delete that session: such replays get three quarters of the time left, the
    // DELETEs the rest. (A ping to an SSE endpoint opens no session: it keeps all of it.)
    let now = tokio::time::Instant::now();
    let replay_until = now + deadline.saturating_duration_since(now) / 4 * 3;
    let (mut c1, mut c2, mut c3) = (client.fork(), client.fork(), client.fork());
    Some(async move {
        let (sse_endpoint, own_session) = match &rides {
            Rides::Sse(endpoint) => (Some(endpoint), None),
            Rides::Session(id) => (None, Some(id.as_str())),
            Rides::Nothing => (None, None),
        };
        let env = Env {
            uri,
            sse_endpoint,
            user_headers: &user_headers,
            limits,
            deadline,
            cleanup_until: deadline,
            own_session,
        };
        let replays = match hs.transport {
            TransportKind::Sse => env,
            _ => Env {
                deadline: replay_until,
                ..env
            },
        };
        let origin = ("origin".to_owned(), FOREIGN_ORIGIN.to_owned());
        let host = ("host".to_owned(), FOREIGN_HOST.to_owned());
        let host_here = loopback && !matches!(rides, Rides::Session(_));
        let malformed_here =
            matches!(rides, Rides::Nothing) && hs.transport == TransportKind::StreamableHttp;
        // Independent of each other: all at once, their records in a fixed order.
        let (a, b, c) = tokio::join!(
            rebinding_check(
                &mut c1,
                &replays,
                Replay::of(&hs, Step::OriginCheck, origin, id_origin)
            ),
            async {
                if host_here {
                    let check = Replay::of(&hs, Step::HostCheck, host, id_host);
                    rebinding_check(&mut c2, &replays, check).await
                } else {
                    Vec::new()
                }
            },
            async {
                if malformed_here {
                    vec![malformed(&mut c3, &env, hs.era, None).await]
                } else {
                    Vec::new()
                }
            },
        );
        Side {
            exchanges: a.into_iter().chain(b).chain(c).collect(),
            clients: vec![c1, c2, c3],
        }
    })
}

/// The exchange that established the session (a `server/discover` or `initialize` result).
fn handshake(ctx: &Ctx<'_>) -> Option<Exchange> {
    ctx.tr
        .exchanges
        .iter()
        .find(|e| {
            matches!(e.step, Step::Discover | Step::Initialize)
                && matches!(e.reply().map(|d| d.message), Some(Message::Result { .. }))
        })
        .cloned()
}

/// What every check needs to send.
#[derive(Clone, Copy)]
struct Env<'a> {
    uri: &'a Uri,
    sse_endpoint: Option<&'a Uri>,
    user_headers: &'a [(String, String)],
    limits: mcpulse_transport::Limits,
    /// When the check itself gives up.
    deadline: tokio::time::Instant,
    /// When the DELETE of a session the check opened gives up: later than `deadline`, so that
    /// a check whose answer never ends still leaves that DELETE time to go.
    cleanup_until: tokio::time::Instant,
    /// The probe's own legacy session id, if any: a check that is handed the same id (a server
    /// that issues one id to everyone) must not end the probe's session with its DELETE.
    own_session: Option<&'a str>,
}

fn handshake_headers(hs: &Exchange) -> Vec<(String, String)> {
    if hs.era == Some(Era::Modern) {
        vec![
            ("mcp-protocol-version".into(), version::MODERN.into()),
            ("mcp-method".into(), "server/discover".into()),
        ]
    } else {
        Vec::new()
    }
}

/// A rebinding check: the handshake `hs` sent again as `step` (request `id`) with one foreign
/// header.
struct Replay<'h> {
    hs: &'h Exchange,
    step: Step,
    header: (String, String),
    id: i64,
}

impl<'h> Replay<'h> {
    fn of(hs: &'h Exchange, step: Step, header: (String, String), id: i64) -> Replay<'h> {
        Replay {
            hs,
            step,
            header,
            id,
        }
    }
}

/// The handshake replayed with one foreign header (over HTTP+SSE: a `ping` to the session's
/// endpoint with it); a session it opened is deleted again.
async fn rebinding_check(
    client: &mut HttpClient,
    env: &Env<'_>,
    check: Replay<'_>,
) -> Vec<Exchange> {
    let hs = check.hs;
    let Some(ex) = replay(client, env, check).await else {
        return Vec::new();
    };
    let opened = opened_session(env, hs, &ex);
    let mut out = vec![ex];
    if let Some(sid) = opened {
        out.push(end_session(client, env, sid).await);
    }
    out
}

/// [`rebinding_check`] without the DELETE: the replay alone, until `env.deadline`. `None`
/// when there is nothing to replay it with (no SSE endpoint; a handshake body that is gone).
async fn replay(client: &mut HttpClient, env: &Env<'_>, check: Replay<'_>) -> Option<Exchange> {
    let Replay {
        hs,
        step,
        header: extra,
        id,
    } = check;
    match hs.transport {
        TransportKind::Sse => {
            let endpoint = env.sse_endpoint?;
            // Credentials go to the endpoint only on the target's own origin, as in the session.
            let user_headers = if http_origin(endpoint) == http_origin(env.uri) {
                env.user_headers
            } else {
                &[]
            };
            // A server that accepts the POST (202) answers on the stream; the status is the
            // finding, so the reply is not waited for.
            let mut ex = ping(client, env, endpoint, step, id, vec![extra], user_headers).await;
            ex.transport = TransportKind::Sse;
            Some(ex)
        }
        _ => {
            let mut body = hs
                .request
                .body
                .as_deref()
                .and_then(|b| serde_json::from_str::<Value>(b).ok())?;
            let mut headers = handshake_headers(hs);
            headers.push(extra);
            body["id"] = Value::from(id);
            let post = Post {
                uri: env.uri,
                call: Call {
                    step,
                    era: hs.era,
                    page: None,
                    id: Some(id),
                    message: &body,
                },
                headers,
                user_headers: env.user_headers,
            };
            Some(streamable_http::post(client, post, env.limits, env.deadline).await)
        }
    }
}

/// The session a replayed handshake opened, to be deleted: none for an SSE ping, and not the
/// probe's own session, handed out again by a server that gives everyone one id (that one is
/// the flow's to end).
fn opened_session(env: &Env<'_>, hs: &Exchange, ex: &Exchange) -> Option<String> {
    let ok = ex.status().is_some_and(|s| (200..300).contains(&s));
    ex.header("mcp-session-id")
        .filter(|id| ok && hs.transport != TransportKind::Sse && Some(*id) != env.own_session)
        .map(str::to_owned)
}

/// The DELETE of a session a check opened, until `env.cleanup_until`.
async fn end_session(client: &mut HttpClient, env: &Env<'_>, sid: String) -> Exchange {
    let headers = vec![
        ("mcp-session-id".to_owned(), sid),
        (
            "mcp-protocol-version".to_owned(),
            version::LEGACY_LATEST.to_owned(),
        ),
    ];
    streamable_http::delete_session(
        client,
        env.uri,
        headers,
        env.user_headers,
        env.cleanup_until,
    )
    .await
}

/// The checks that ride a legacy Streamable HTTP session `(id, protocol version)`, sent by the
/// flow before it ends the session, one after the other:
/// - for a loopback target, a `ping` in the session with a foreign `Host`, on a connection of
///   its own: a page that got in by DNS rebinding must not be able to use a session either
///   (the spec has servers validate every request), and riding the session spares the server
///   a session of the check's own. A 2xx is "accepted", a 403 or 421 "refused"; any other
///   answer may be about the session rather than the Host (a server that binds sessions to
///   their Host, one that serialises a session's requests), so the handshake is replayed with
///   the foreign `Host` instead, at the door, and that answer decides;
/// - then the malformed body, on the flow's own connection: a stateful server parses it as
///   one of the session's messages, where a body without a session may only be turned away at
///   the door (or, on servers that build a whole server for every request without a session,
///   cost one more of those). It goes after the ping: a server may end a session over it.
///
/// Together they get at most half the time left, a third each, so that a server that never
/// finishes an answer (an endless stream, a body that never ends) leaves the next check its
/// share and the session's DELETE time to go. A session the replay at the door opened is
/// deleted in the last share, beside the malformed body (on the check's own connection), so a
/// replay that hangs after opening one still leaves its DELETE time. Nothing with
/// `--no-security` or past the deadline.
pub(crate) async fn in_session(
    client: &mut HttpClient,
    uri: &Uri,
    ctx: &mut Ctx<'_>,
    session: (&str, &str),
) {
    if !ctx.plan.security || ctx.expired() {
        return;
    }
    // Half the time left, in thirds: the ping, the replay at the door, the malformed body.
    // Each gets its own share, so one that hangs leaves the next its time; a share that is
    // gone by its turn is skipped, not recorded as a timeout.
    let now = tokio::time::Instant::now();
    let third = ctx.deadline.saturating_duration_since(now) / 6;
    let shares = [now + third, now + third * 2, now + third * 3];
    let loopback = uri.host().is_some_and(is_loopback_host);
    // The handshake that opened this session, to replay at the door.
    let hs = ctx
        .tr
        .exchanges
        .iter()
        .rfind(|e| {
            e.step == Step::Initialize
                && matches!(e.reply().map(|d| d.message), Some(Message::Result { .. }))
        })
        .cloned();
    let (id_ping, id_replay) = (ctx.id(), ctx.id());
    let mut fork = client.fork();
    let user_headers = ctx.plan.headers.clone();
    // Each check until the end of its share; the DELETE of a session the replay at the door
    // opened, until the end of the last share, beside the malformed body.
    let env_until = |deadline| Env {
        uri,
        sse_endpoint: None,
        user_headers: &user_headers,
        limits: ctx.limits,
        deadline,
        cleanup_until: shares[2],
        own_session: Some(session.0),
    };
    let mut records = Vec::new();
    let mut opened = None;
    if loopback {
        let ping = host_in_session(&mut fork, &env_until(shares[0]), session, id_ping).await;
        let decided = ping
            .status()
            .is_some_and(|s| (200..300).contains(&s) || s == 403 || s == 421);
        records.push(ping);
        if !decided
            && tokio::time::Instant::now() < shares[1]
            && let Some(hs) = &hs
        {
            let host = ("host".to_owned(), FOREIGN_HOST.to_owned());
            let env = env_until(shares[1]);
            let check = Replay::of(hs, Step::HostCheck, host, id_replay);
            if let Some(ex) = replay(&mut fork, &env, check).await {
                opened = opened_session(&env, hs, &ex);
                records.push(ex);
            }
        }
    }
    let env = env_until(shares[2]);
    let (ended, body) = tokio::join!(
        async {
            match opened {
                // A DELETE that could not be sent in time is not recorded as one that failed.
                Some(sid) if tokio::time::Instant::now() < shares[2] => {
                    Some(end_session(&mut fork, &env, sid).await)
                }
                _ => None,
            }
        },
        async {
            if tokio::time::Instant::now() < shares[2] {
                Some(malformed(client, &env, Some(Era::Legacy), Some(session)).await)
            } else {
                None
            }
        }
    );
    records.extend(ended);
    records.extend(body);
    for ex in records {
        ctx.push(ex);
    }
    client.connections.extend(fork.connections);
}

/// A `ping` in the session `(id, protocol version)` with the foreign `Host`.
async fn host_in_session(
    client: &mut HttpClient,
    env: &Env<'_>,
    session: (&str, &str),
    id: i64,
) -> Exchange {
    let headers = vec![
        ("mcp-session-id".to_owned(), session.0.to_owned()),
        ("mcp-protocol-version".to_owned(), session.1.to_owned()),
        ("host".to_owned(), FOREIGN_HOST.to_owned()),
    ];
    ping(
        client,
        env,
        env.uri,
        Step::HostCheck,
        id,
        headers,
        env.user_headers,
    )
    .await
}

/// A legacy `ping` (request `id`) POSTed to `uri` with these headers, as `step`: the
/// rebinding checks that ride a session.
async fn ping(
    client: &mut HttpClient,
    env: &Env<'_>,
    uri: &Uri,
    step: Step,
    id: i64,
    headers: Vec<(String, String)>,
    user_headers: &[(String, String)],
) -> Exchange {
    let ping = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
    let post = Post {
        uri,
        call: Call {
            step,
            era: Some(Era::Legacy),
            page: None,
            id: Some(id),
            message: &ping,
        },
        headers,
        user_headers,
    };
    streamable_http::post(client, post, env.limits, env.deadline).await
}

async fn malformed(
    client: &mut HttpClient,
    env: &Env<'_>,
    era: Option<Era>,
    session: Option<(&str, &str)>,
) -> Exchange {
    let mut headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        (
            "accept".to_owned(),
            "application/json, text/event-stream".to_owned(),
        ),
    ];
    if era == Some(Era::Modern) {
        headers.push(("mcp-protocol-version".into(), version::MODERN.into()));
        headers.push(("mcp-method".into(), "tools/list".into()));
    }
    if let Some((id, version)) = session {
        headers.push(("mcp-session-id".into(), id.to_owned()));
        headers.push(("mcp-protocol-version".into(), version.to_owned()));
    }
    let out = mcpulse_transport::http::Outgoing {
        method: Method::POST,
        uri: env.uri.clone(),
        headers,
        user_headers: env.user_headers,
        body: Some(MALFORMED_BODY.to_owned()),
    };
    streamable_http::send_raw(
        client,
        &out,
        Step::MalformedRequest,
        env.limits,
        env.deadline,
    )
    .await
}

/// For a gated server: the protected-resource metadata (from the challenge, or the well-known
/// URLs) and the authorization-server metadata it names. Run after the flow (security checks on).
pub(crate) async fn auth_metadata(client: &mut HttpClient, uri: &Uri, ctx: &mut Ctx<'_>) {
    let gated = ctx.tr.exchanges.iter().any(|e| {
        matches!(e.status(), Some(401))
            && matches!(e.step, Step::Discover | Step::Initialize | Step::SseOpen)
    });
    if !gated {
        return;
    }
    // The SSRF guard: a public target may not send mcpulse to private addresses.
    client.deny_private = target_is_public(ctx, client);
    let mut prm = fetched_json(ctx, Step::ResourceMetadata);
    if prm.is_none()
        && !ctx
            .tr
            .exchanges
            .iter()
            .any(|e| e.step == Step::ResourceMetadata)
    {
        // No resource_metadata in the challenge: the well-known URLs (2025-11-25 allows this).
        for candidate in prm_well_known(uri) {
            if ctx.expired() {
                break;
            }
            let ex = streamable_http::get_document(
                client,
                &candidate,
                Step::ResourceMetadata,
                ctx.limits,
                ctx.deadline,
            )
            .await;
            let ok = ex.status() == Some(200);
            ctx.push(ex);
            if ok {
                break;
            }
        }
        prm = fetched_json(ctx, Step::ResourceMetadata);
    }
    let issuer = prm
        .as_ref()
        .and_then(|d| d.get("authorization_servers"))
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<Uri>().ok());
    if let Some(issuer) = issuer {
        for candidate in as_well_known(&issuer) {
            if ctx.expired() {
                break;
            }
            let ex = streamable_http::get_document(
                client,
                &candidate,
                Step::AuthServerMetadata,
                ctx.limits,
                ctx.deadline,
            )
            .await;
            let ok = ex.status() == Some(200)
                && ex
                    .body
                    .as_deref()
                    .is_some_and(|b| serde_json::from_str::<Value>(b).is_ok_and(|v| v.is_object()));
            ctx.push(ex);
            if ok {
                break;
            }
        }
    }
    client.deny_private = false;
}

fn fetched_json(ctx: &Ctx<'_>, step: Step) -> Option<Value> {
    ctx.tr
        .exchanges
        .iter()
        .filter(|e| e.step == step && e.status() == Some(200))
        .find_map(|e| {
            e.body
                .as_deref()
                .and_then(|b| serde_json::from_str::<Value>(b).ok())
                .filter(Value::is_object)
        })
}

/// RFC 9728 §3.1: the path-inserted URL, then the root one.
pub fn prm_well_known(uri: &Uri) -> Vec<Uri> {
    let path = uri.path().trim_end_matches('/');
    let mut out = Vec::new();
    if !path.is_empty() {
        out.extend(resolve(uri, &format!("/.well-known/oauth-protected-resource{path}")).ok());
    }
    out.extend(resolve(uri, "/.well-known/oauth-protected-resource").ok());
    out
}

/// RFC 8414 and OpenID discovery, in the order the MCP spec gives.
pub fn as_well_known(issuer: &Uri) -> Vec<Uri> {
    let path = issuer.path().trim_end_matches('/');
    let refs: Vec<String> = if path.is_empty() {
        vec![
            "/.well-known/oauth-authorization-server".into(),
            "/.well-known/openid-configuration".into(),
        ]
    } else {
        vec![
            format!("/.well-known/oauth-authorization-server{path}"),
            format!("/.well-known/openid-configuration{path}"),
            format!("{path}/.well-known/openid-configuration"),
        ]
    };
    refs.iter()
        .filter_map(|r| resolve(issuer, r).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_urls() {
        let u: Uri = "https://mcp.example.com/mcp".parse().unwrap_or_default();
        let v: Vec<String> = prm_well_known(&u).iter().map(ToString::to_string).collect();
        assert_eq!(
            v,
            [
                "https://mcp.example.com/.well-known/oauth-protected-resource/mcp",
                "https://mcp.example.com/.well-known/oauth-protected-resource"
            ]
        );
        let i: Uri = "https://auth.example.com/tenant1"
            .parse()
            .unwrap_or_default();
        let v: Vec<String> = as_well_known(&i).iter().map(ToString::to_string).collect();
        assert_eq!(
            v,
            [
                "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example.com/.well-known/openid-configuration/tenant1",
                "https://auth.example.com/tenant1/.well-known/openid-configuration",
            ]
        );
        let i: Uri = "https://auth.example.com".parse().unwrap_or_default();
        assert_eq!(as_well_known(&i).len(), 2);
    }
}
