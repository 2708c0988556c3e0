//! The flow of a probe over each transport. See the crate docs for the rules it follows.

use crate::security::{Rides, Side};
use crate::target::{Plan, Target, TransportMode};
use http::Uri;
use mcpulse_transport::clock::Clock;
use mcpulse_transport::http::{HttpClient, resolve};
use mcpulse_transport::legacy_sse::{self, SseStream};
use mcpulse_transport::stdio::{Patience, StdioChild};
use mcpulse_transport::streamable_http::{self, Post};
use mcpulse_transport::{Call, Limits};
use mcpulse_wire::auth;
use mcpulse_wire::jsonrpc::Message;
use mcpulse_wire::message::{self, ListKind};
use mcpulse_wire::redact::Secrets;
use mcpulse_wire::transcript::{Exchange, Outcome, Step, Transcript};
use mcpulse_wire::version::{self, Era, EraMode};
use serde_json::Value;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::{Instant, timeout_at};

/// Runs one probe. Never fails and never outlives `plan.timeout` by more than the stdio
/// shutdown grace: every failure of the server is recorded in the transcript.
pub async fn probe(target: &Target, plan: &Plan) -> Transcript {
    let (mut tr, live) = probe_live(target, plan).await;
    live.finish(&mut tr).await;
    tr
}

/// The stdio servers still running when a probe's protocol steps are done. Ending them (stdin
/// closed, then SIGTERM, then SIGKILL, each after `Plan::shutdown_grace`) can take longer than
/// the whole protocol, yet tells nothing the verdict needs: a caller can judge and print first,
/// then [`Live::finish`]. Dropped unfinished, the servers' process groups are killed.
pub struct Live {
    children: Vec<StdioChild>,
    grace: Duration,
    /// The plan's secrets, hidden in the records of the servers still running.
    secrets: Secrets,
}

impl Live {
    /// The transcript as it stands, with the live servers' records so far (no exit yet).
    pub fn snapshot(&self, tr: &Transcript) -> Transcript {
        let mut t = tr.clone();
        t.processes.extend(self.children.iter().map(|c| {
            let mut p = c.record();
            p.hide(&self.secrets);
            p
        }));
        t
    }

    /// Ends the live servers, gracefully and all at once (each may take up to three shutdown
    /// graces), and records their processes in `tr`, in order.
    pub async fn finish(self, tr: &mut Transcript) {
        let grace = self.grace;
        let mut set = tokio::task::JoinSet::new();
        for (i, child) in self.children.into_iter().enumerate() {
            set.spawn(async move { (i, child.shutdown(grace).await) });
        }
        let mut ended = Vec::new();
        while let Some(r) = set.join_next().await {
            if let Ok(done) = r {
                ended.push(done);
            }
        }
        ended.sort_by_key(|(i, _)| *i);
        let secrets = self.secrets;
        tr.processes.extend(ended.into_iter().map(|(_, mut p)| {
            p.hide(&secrets);
            p
        }));
    }
}

/// Runs one probe's protocol steps and leaves the last stdio server running: see [`Live`].
pub async fn probe_live(target: &Target, plan: &Plan) -> (Transcript, Live) {
    let mut live = Live {
        children: Vec::new(),
        grace: plan.shutdown_grace,
        secrets: plan.secrets.clone(),
    };
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let clock = Clock::start();
    let deadline = Instant::now() + plan.timeout;
    let started_unix_ms = u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX);
    let mut tr = Transcript::new(target.record(&plan.secrets), plan.record(), started_unix_ms);
    tr.started_unix_us = u64::try_from(since_epoch.as_micros()).ok();
    let mut ctx = Ctx {
        plan,
        limits: Limits {
            max_response_bytes: plan.max_response_bytes,
        },
        deadline,
        next_id: 0,
        clock,
        done_ms: None,
        tr: &mut tr,
    };
    // Every transport operation honours the deadline itself; this outer bound is a safety net
    // (a little later, so that a step can record its own timeout first).
    let net = deadline + Duration::from_millis(50);
    match target {
        Target::Http { url } => {
            let roots = plan.extra_roots.iter().map(|d| rustls_pki_der(d)).collect();
            let mut client = HttpClient::new(clock).with_roots(roots);
            let _ = timeout_at(net, async {
                probe_http(&mut client, url, &mut ctx).await;
                if plan.security {
                    crate::security::auth_metadata(&mut client, url, &mut ctx).await;
                }
            })
            .await;
            let done = ctx.done_ms.unwrap_or_else(|| clock.at());
            tr.connections = client.connections;
            tr.total_ms = done;
        }
        Target::Stdio { program, args } => {
            let _ = timeout_at(
                net,
                probe_stdio(program, args, &mut ctx, &mut live.children),
            )
            .await;
            let done = ctx.done_ms.unwrap_or_else(|| clock.at());
            // The children left (the last server, or those the flow did not finish because
            // the safety net fired) are ended by `Live::finish`, their records kept.
            tr.total_ms = done;
        }
    }
    if Instant::now() + Duration::from_millis(1) >= deadline {
        tr.deadline_hit_ms = Some(tr.total_ms);
    }
    tr.hide(&plan.secrets);
    (tr, live)
}

fn rustls_pki_der(d: &[u8]) -> mcpulse_transport::http::CertificateDer<'static> {
    mcpulse_transport::http::CertificateDer::from(d.to_vec())
}

pub(crate) struct Ctx<'a> {
    pub(crate) plan: &'a Plan,
    pub(crate) limits: Limits,
    pub(crate) deadline: Instant,
    next_id: i64,
    clock: Clock,
    /// When the last protocol step finished (before cleanup).
    done_ms: Option<f64>,
    pub(crate) tr: &'a mut Transcript,
}

impl Ctx<'_> {
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
enum Wire<'a> {
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
async fn send(wire: &mut Wire<'_>, ctx: &mut Ctx<'_>, call: Call<'_>, deadline: Instant) -> usize {
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
fn notification_deadline(ctx: &Ctx<'_>) -> Instant {
    ctx.deadline.min(Instant::now() + Duration::from_secs(1))
}

/// What a `server/discover` exchange means for the flow.
#[derive(Debug, PartialEq)]
enum Discovered {
    /// A discover result: the capabilities.
    Modern(Value),
    /// A 2026 error code: a modern server that refused our request; nothing more to do.
    ModernRefused,
    /// Not evidence of either era (auth, 5xx, timeout, no connection): stop here.
    Stop,
    /// Anything else: try the legacy handshake.
    Legacy,
}

fn classify_discover(ex: &Exchange) -> Discovered {
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
enum Initialized {
    Ok {
        version: String,
        capabilities: Value,
    },
    Stop,
    /// 400/404/405 without a modern body: perhaps the legacy HTTP+SSE transport.
    TrySse,
}

fn classify_initialize(ex: &Exchange) -> Initialized {
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

fn next_cursor(ex: &Exchange) -> Option<String> {
    // Most replies have no cursor: do not parse a whole page to learn that. Without a `\u`
    // escape anywhere, a `nextCursor` key can only be spelled literally.
    if let Outcome::Reply { frame } = ex.outcome
        && let Some(f) = ex.frames.get(frame)
        && !f.raw.contains("nextCursor")
        && !f.raw.contains("\\u")
    {
        return None;
    }
    match ex.reply()?.message {
        Message::Result { result, .. } => result
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

/// Takes inventory: every page of tools, and of prompts and resources when advertised. Where
/// replies come back on one ordered channel matched by id (stdio's stdout, the HTTP+SSE
/// stream) the first pages are requested all at once (pipelined), which spares the server's
/// and our wake-ups between one request and the next; later pages follow their cursors in
/// turn. Over Streamable HTTP each request waits for its response (one kept-alive connection).
async fn inventory(wire: &mut Wire<'_>, ctx: &mut Ctx<'_>, era: Era, capabilities: &Value) {
    let mut kinds = vec![ListKind::Tools];
    kinds.extend(
        [
            ListKind::Prompts,
            ListKind::Resources,
            ListKind::ResourceTemplates,
        ]
        .into_iter()
        .filter(|kind| {
            capabilities
                .get(kind.capability())
                .is_some_and(|c| !c.is_null())
        }),
    );
    if matches!(wire, Wire::Http { .. }) {
        for kind in kinds {
            list(wire, ctx, kind, era).await;
        }
        return;
    }
    if ctx.expired() {
        return;
    }
    let requests: Vec<(Step, i64, Value)> = kinds
        .iter()
        .map(|&kind| {
            let id = ctx.id();
            let msg = message::list(id, kind, None, era, &ctx.plan.client);
            (list_step(kind), id, msg)
        })
        .collect();
    let exchanges = wire.pipeline(ctx, era, &requests).await;
    let firsts: Vec<(ListKind, usize)> = kinds
        .into_iter()
        .zip(exchanges)
        .map(|(kind, ex)| (kind, ctx.push(ex)))
        .collect();
    for (kind, first) in firsts {
        more_pages(wire, ctx, kind, era, first).await;
    }
}

impl Wire<'_> {
    /// Sends the first pages `(step, id, message)` all before collecting any reply, over a
    /// wire whose replies come back on one channel matched by id (stdio, HTTP+SSE), and
    /// returns their exchanges in the order sent. Each is timed from its send to its reply's
    /// arrival. Nothing over Streamable HTTP, where a request waits for its own response.
    async fn pipeline(
        &mut self,
        ctx: &Ctx<'_>,
        era: Era,
        requests: &[(Step, i64, Value)],
    ) -> Vec<Exchange> {
        let mut out = Vec::with_capacity(requests.len());
        match self {
            Wire::Stdio(child) => {
                let mut sent = Vec::with_capacity(requests.len());
                for (step, id, msg) in requests {
                    let s = child
                        .send(first_page(*step, era, *id, msg), ctx.deadline)
                        .await;
                    sent.push(s);
                }
                for s in sent {
                    out.push(child.receive(s, ctx.deadline).await);
                }
            }
            Wire::Sse { client, stream } => {
                let mut sent = Vec::with_capacity(requests.len());
                for (step, id, msg) in requests {
                    let call = first_page(*step, era, *id, msg);
                    let s = stream
                        .send(client, call, &ctx.plan.headers, ctx.limits, ctx.deadline)
                        .await;
                    sent.push(s);
                }
                for s in sent {
                    let clock = client.clock();
                    out.push(stream.receive(s, clock, ctx.limits, ctx.deadline).await);
                }
            }
            Wire::Http { .. } => {}
        }
        out
    }
}

/// The first page of a list, request `id`.
fn first_page(step: Step, era: Era, id: i64, message: &Value) -> Call<'_> {
    Call {
        page: Some(1),
        ..request(step, era, id, message)
    }
}

fn list_step(kind: ListKind) -> Step {
    match kind {
        ListKind::Tools => Step::ToolsList,
        ListKind::Prompts => Step::PromptsList,
        ListKind::Resources => Step::ResourcesList,
        ListKind::ResourceTemplates => Step::ResourceTemplatesList,
    }
}

/// Every page of one list.
async fn list(wire: &mut Wire<'_>, ctx: &mut Ctx<'_>, kind: ListKind, era: Era) {
    if ctx.expired() {
        return;
    }
    let id = ctx.id();
    let msg = message::list(id, kind, None, era, &ctx.plan.client);
    let deadline = ctx.deadline;
    let call = first_page(list_step(kind), era, id, &msg);
    let first = send(wire, ctx, call, deadline).await;
    more_pages(wire, ctx, kind, era, first).await;
}

/// The pages after `first` (an exchange index), following `nextCursor` up to the page cap,
/// and while the list's pages together stay within the response cap (else a server could fill
/// memory one page at a time: the judge reports a list cut there).
async fn more_pages(
    wire: &mut Wire<'_>,
    ctx: &mut Ctx<'_>,
    kind: ListKind,
    era: Era,
    first: usize,
) {
    let mut last = first;
    let mut seen: Vec<String> = Vec::new();
    let mut taken = ctx.ex(first).bytes_taken();
    for page in 2..=ctx.plan.max_pages {
        let cursor = match next_cursor(ctx.ex(last)) {
            None => return,
            Some(c) if seen.contains(&c) => return, // a repeated cursor: the judge reports it
            Some(c) => c,
        };
        if ctx.expired() || taken > ctx.limits.max_response_bytes {
            return;
        }
        seen.push(cursor.clone());
        let id = ctx.id();
        let msg = message::list(id, kind, Some(&cursor), era, &ctx.plan.client);
        let deadline = ctx.deadline;
        let call = Call {
            page: Some(page),
            ..first_page(list_step(kind), era, id, &msg)
        };
        last = send(wire, ctx, call, deadline).await;
        taken = taken.saturating_add(ctx.ex(last).bytes_taken());
    }
}

/// After finding a modern server, a legacy `initialize` tells whether it also serves legacy
/// clients. Nothing else is sent in that session.
async fn dual_era_check(wire: &mut Wire<'_>, ctx: &mut Ctx<'_>) -> Option<String> {
    let i = initialize(wire, ctx, Step::DualEraCheck).await;
    ctx.ex(i).header("mcp-session-id").map(str::to_owned)
}

/// A legacy `initialize` over `wire`, as `step` (the handshake, or the dual-era check).
async fn initialize(wire: &mut Wire<'_>, ctx: &mut Ctx<'_>, step: Step) -> usize {
    let id = ctx.id();
    let msg = message::initialize(id, &ctx.plan.client);
    let deadline = ctx.deadline;
    send(wire, ctx, request(step, Era::Legacy, id, &msg), deadline).await
}

/// The rest of a legacy session once `initialize` succeeded: `notifications/initialized`, then
/// the inventory.
async fn legacy_session(wire: &mut Wire<'_>, ctx: &mut Ctx<'_>, capabilities: &Value) {
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
async fn discover(wire: &mut Wire<'_>, ctx: &mut Ctx<'_>, id: i64, deadline: Instant) -> usize {
    let msg = message::discover(id, version::MODERN, &ctx.plan.client);
    let call = request(Step::Discover, Era::Modern, id, &msg);
    send(wire, ctx, call, deadline).await
}

/// Request `id` (not a list page).
fn request(step: Step, era: Era, id: i64, message: &Value) -> Call<'_> {
    Call {
        step,
        era: Some(era),
        page: None,
        id: Some(id),
        message,
    }
}

async fn probe_http(client: &mut HttpClient, uri: &Uri, ctx: &mut Ctx<'_>) {
    if ctx.plan.transport == TransportMode::Sse {
        probe_sse(client, uri, ctx).await;
        return;
    }
    if ctx.plan.era != EraMode::Legacy {
        let id = ctx.id();
        let deadline = ctx.deadline;
        let mut wire = Wire::Http {
            client,
            uri,
            session: None,
        };
        let i = discover(&mut wire, ctx, id, deadline).await;
        match classify_discover(ctx.ex(i)) {
            Discovered::Modern(caps) => {
                inventory(&mut wire, ctx, Era::Modern, &caps).await;
                ctx.mark_done();
                let Wire::Http { client, .. } = wire else {
                    return;
                };
                // The health steps are done and timed: the dual-era check (on the kept-alive
                // connection) and the security checks (each on a connection of its own) run
                // now, side by side.
                let auto = ctx.plan.era == EraMode::Auto && !ctx.expired();
                let checks = crate::security::side_checks(client, uri, Rides::Nothing, ctx);
                let ((), checks) = tokio::join!(
                    async {
                        if !auto {
                            return;
                        }
                        let mut wire = Wire::Http {
                            client: &mut *client,
                            uri,
                            session: None,
                        };
                        if let Some(sid) = dual_era_check(&mut wire, ctx).await
                            && let Wire::Http { client, .. } = wire
                        {
                            let v = version::LEGACY_LATEST.to_owned();
                            delete(client, uri, ctx, sid, v).await;
                        }
                    },
                    Side::maybe(checks)
                );
                checks.record(client, ctx);
                return;
            }
            Discovered::ModernRefused => return ctx.mark_done(),
            Discovered::Stop => {
                let Wire::Http { client, .. } = wire else {
                    return;
                };
                auth_metadata(client, uri, ctx, i).await;
                return ctx.mark_done();
            }
            Discovered::Legacy if ctx.plan.era == EraMode::Modern => return ctx.mark_done(),
            Discovered::Legacy => {}
        }
    }
    let mut wire = Wire::Http {
        client,
        uri,
        session: None,
    };
    let i = initialize(&mut wire, ctx, Step::Initialize).await;
    match classify_initialize(ctx.ex(i)) {
        Initialized::Ok {
            version,
            capabilities,
        } => {
            let sid = ctx.ex(i).header("mcp-session-id").map(str::to_owned);
            let negotiated = if version.is_empty() {
                version::LEGACY_LATEST.to_owned()
            } else {
                version
            };
            let Wire::Http { client, .. } = wire else {
                return;
            };
            let mut wire = Wire::Http {
                client,
                uri,
                session: Some((sid.clone(), negotiated.clone())),
            };
            legacy_session(&mut wire, ctx, &capabilities).await;
            ctx.mark_done();
            let Wire::Http { client, .. } = wire else {
                return;
            };
            // The health steps are done and timed: the session's end and the security checks
            // run now, side by side (the Origin check at the door, on a connection of its own;
            // the Host check and the malformed body within the session, before it ends).
            let rides = match &sid {
                Some(id) => Rides::Session(id.clone()),
                None => Rides::Nothing,
            };
            let checks = crate::security::side_checks(client, uri, rides, ctx);
            let ((), checks) = tokio::join!(
                async {
                    if let Some(sid) = sid {
                        let session = (sid.as_str(), negotiated.as_str());
                        crate::security::in_session(client, uri, ctx, session).await;
                        delete(client, uri, ctx, sid, negotiated).await;
                    }
                },
                Side::maybe(checks)
            );
            checks.record(client, ctx);
        }
        Initialized::Stop => {
            let Wire::Http { client, .. } = wire else {
                return;
            };
            auth_metadata(client, uri, ctx, i).await;
            ctx.mark_done();
        }
        Initialized::TrySse if ctx.plan.transport == TransportMode::StreamableHttp => {
            ctx.mark_done()
        }
        Initialized::TrySse => {
            let Wire::Http { client, .. } = wire else {
                return;
            };
            probe_sse(client, uri, ctx).await;
        }
    }
}

async fn delete(
    client: &mut HttpClient,
    uri: &Uri,
    ctx: &mut Ctx<'_>,
    sid: String,
    version: String,
) {
    if ctx.expired() {
        return;
    }
    let headers = vec![
        ("mcp-session-id".to_owned(), sid),
        ("mcp-protocol-version".to_owned(), version),
    ];
    let ex = streamable_http::delete_session(client, uri, headers, &ctx.plan.headers, ctx.deadline)
        .await;
    ctx.push(ex);
}

/// For a 401/403 whose challenge names protected-resource metadata, fetch it (without the
/// user's credentials) so the report can say how to authenticate.
async fn auth_metadata(client: &mut HttpClient, uri: &Uri, ctx: &mut Ctx<'_>, i: usize) {
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

async fn probe_sse(client: &mut HttpClient, uri: &Uri, ctx: &mut Ctx<'_>) {
    let (ex, stream) =
        legacy_sse::open(client, uri, &ctx.plan.headers, ctx.limits, ctx.deadline).await;
    let i = ctx.push(ex);
    let Some(stream) = stream else {
        auth_metadata(client, uri, ctx, i).await;
        return ctx.mark_done();
    };
    let mut wire = Wire::Sse { client, stream };
    let i = initialize(&mut wire, ctx, Step::Initialize).await;
    if let Initialized::Ok { capabilities, .. } = classify_initialize(ctx.ex(i)) {
        legacy_session(&mut wire, ctx, &capabilities).await;
    }
    ctx.mark_done();
    // The checks POST to the session's endpoint, so they need the session alive (an answer
    // from a session that is gone, a 404, would read as a refusal) and the endpoint on the
    // target's own origin (else they would grade another server). The stream stays open until
    // they are done.
    if let Wire::Sse { client, stream } = wire
        && stream.is_open()
        && mcpulse_transport::http::origin(&stream.endpoint) == mcpulse_transport::http::origin(uri)
        && let Some(checks) =
            crate::security::side_checks(client, uri, Rides::Sse(stream.endpoint.clone()), ctx)
    {
        checks.await.record(client, ctx);
        drop(stream);
    }
}

async fn probe_stdio(
    program: &str,
    args: &[String],
    ctx: &mut Ctx<'_>,
    children: &mut Vec<StdioChild>,
) {
    let spawn = |purpose: &str, ctx: &Ctx<'_>| {
        StdioChild::spawn(
            program,
            args,
            &ctx.plan.env,
            ctx.plan.clean_env,
            purpose,
            ctx.limits,
            ctx.clock,
        )
    };
    let mut child = match spawn("probe", ctx) {
        Ok(c) => c,
        Err(rec) => {
            ctx.tr.processes.push(*rec);
            return ctx.mark_done();
        }
    };
    if ctx.plan.era == EraMode::Legacy {
        return legacy_stdio(child, None, ctx, children).await;
    }
    // One process, as a client has one: `server/discover` first; a legacy server answers it
    // with an error and stays up, and the legacy handshake goes on in the same process. Only a
    // process that went away is replaced.
    //
    // The dual-era check (opt-in over stdio) needs a process of its own: the era belongs to
    // the process, and a dual-era server that has served one era refuses the other on the same
    // connection. It starts beside the first and is sent `initialize` at once, so that its
    // start-up overlaps the first's instead of following it; its answer is read only if the
    // first turns out modern.
    let mut sibling = None;
    if ctx.plan.era == EraMode::Auto && ctx.plan.stdio_dual_era {
        match spawn("dual-era check", ctx) {
            Ok(mut s) => {
                let id = ctx.id();
                let msg = message::initialize(id, &ctx.plan.client);
                let sent = s
                    .send(
                        request(Step::DualEraCheck, Era::Legacy, id, &msg),
                        ctx.deadline,
                    )
                    .await;
                sibling = Some((s, sent));
            }
            Err(rec) => ctx.tr.processes.push(*rec),
        }
    }
    let id = ctx.id();
    let msg = message::discover(id, version::MODERN, &ctx.plan.client);
    let sent = child
        .send(request(Step::Discover, Era::Modern, id, &msg), ctx.deadline)
        .await;
    let ex = child.receive_patient(sent, discover_patience(ctx)).await;
    let i = ctx.push(ex);
    let mut wire = Wire::Stdio(&mut child);
    match classify_discover(ctx.ex(i)) {
        Discovered::Modern(caps) => {
            inventory(&mut wire, ctx, Era::Modern, &caps).await;
            ctx.mark_done();
            let Some((mut s, sent)) = sibling else {
                children.push(child);
                return;
            };
            let ex = s.receive(sent, ctx.deadline).await;
            let died = went_away(&ex);
            ctx.push(ex);
            if !died || ctx.expired() || !room_to_restart(ctx) {
                children.push(child);
                children.push(s);
                return;
            }
            // The sibling died before answering (a server that cannot run twice at once, say):
            // the check gets a process of its own after the first has ended.
            ctx.tr
                .processes
                .push(s.shutdown(ctx.plan.shutdown_grace).await);
            if !room_to_restart(ctx) {
                children.push(child);
                return;
            }
            ctx.tr
                .processes
                .push(child.shutdown(ctx.plan.shutdown_grace).await);
            let mut fresh = match spawn("dual-era check", ctx) {
                Ok(c) => c,
                Err(rec) => {
                    ctx.tr.processes.push(*rec);
                    return;
                }
            };
            dual_era_check(&mut Wire::Stdio(&mut fresh), ctx).await;
            children.push(fresh);
        }
        Discovered::ModernRefused | Discovered::Stop => {
            children.push(child);
            children.extend(sibling.map(|(s, _)| s));
            ctx.mark_done();
        }
        Discovered::Legacy if ctx.plan.era == EraMode::Modern => {
            children.push(child);
            ctx.mark_done();
        }
        Discovered::Legacy => {
            // Not modern: the sibling's question is moot; it is ended after the verdict.
            children.extend(sibling.map(|(s, _)| s));
            if !child.has_exited() && !went_away(ctx.ex(i)) {
                let j = initialize(&mut Wire::Stdio(&mut child), ctx, Step::Initialize).await;
                if !went_away(ctx.ex(j)) || !room_to_restart(ctx) {
                    return legacy_stdio(child, Some(j), ctx, children).await;
                }
                // It went away on our `initialize` after answering `server/discover` (a
                // server that ends its session on any request before the handshake): the
                // handshake gets a fresh process.
            }
            if !room_to_restart(ctx) {
                children.push(child);
                return ctx.mark_done();
            }
            ctx.tr
                .processes
                .push(child.shutdown(ctx.plan.shutdown_grace).await);
            let fresh = match spawn("legacy fallback", ctx) {
                Ok(c) => c,
                Err(rec) => {
                    ctx.tr.processes.push(*rec);
                    return ctx.mark_done();
                }
            };
            legacy_stdio(fresh, None, ctx, children).await;
        }
    }
}

/// How long a stdio server's reply to `server/discover` is awaited. Pinned to the modern era,
/// until the deadline. In auto mode a server that ignores the request (a legacy one that
/// answers nothing before `initialize`) must leave time for the legacy handshake: half the
/// budget once the server has written anything (and at least [`JUST_STARTED`] after that), but
/// three quarters while it has written nothing at all, because then it is still starting — a
/// cold `npx` or `uvx` download, an interpreter's start — and giving up on a modern server
/// that is only slow to start would send it a legacy `initialize` it refuses.
fn discover_patience(ctx: &Ctx<'_>) -> Patience {
    if ctx.plan.era != EraMode::Auto {
        return Patience::fixed(ctx.deadline);
    }
    let now = Instant::now();
    let left = ctx.deadline.saturating_duration_since(now);
    Patience {
        until: now + left / 2,
        while_silent: now + left * 3 / 4,
        after_first_output: JUST_STARTED,
    }
}

/// See [`discover_patience`].
const JUST_STARTED: Duration = Duration::from_secs(2);

/// Whether an exchange ended because the process went away (not a timeout: a slow or blocked
/// process is left to the end of the probe, not replaced).
fn went_away(ex: &Exchange) -> bool {
    ex.reply().is_none() && matches!(ex.outcome, Outcome::Closed | Outcome::TransportError { .. })
}

/// Whether there is time to end a process (up to three shutdown graces: stdin closed, SIGTERM,
/// SIGKILL) and start another before the deadline. Without it, the processes are left to
/// [`Live::finish`], which records them: the probe's safety net must never drop a shutdown
/// half-way.
fn room_to_restart(ctx: &Ctx<'_>) -> bool {
    let left = ctx.deadline.saturating_duration_since(Instant::now());
    left > ctx.plan.shutdown_grace * 3 + Duration::from_millis(100)
}

/// The legacy session over stdio: `initialize` (unless `initialized` is the index of its
/// exchange, already done), `notifications/initialized`, the inventory.
async fn legacy_stdio(
    mut child: StdioChild,
    initialized: Option<usize>,
    ctx: &mut Ctx<'_>,
    children: &mut Vec<StdioChild>,
) {
    let mut wire = Wire::Stdio(&mut child);
    let i = match initialized {
        Some(i) => i,
        None => initialize(&mut wire, ctx, Step::Initialize).await,
    };
    if let Initialized::Ok { capabilities, .. } = classify_initialize(ctx.ex(i)) {
        legacy_session(&mut wire, ctx, &capabilities).await;
    }
    ctx.mark_done();
    children.push(child);
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
