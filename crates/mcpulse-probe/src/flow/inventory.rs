//! Taking inventory: every page of tools, and of prompts, resources and resource templates
//! when advertised, pipelined where the wire allows it, following cursors up to the page and
//! response caps.
//!
//! It only requests and records pages; a repeated cursor or a list cut at a cap is reported
//! by the judge, from the transcript.

use crate::context::{Ctx, Wire, request, send};
use mcpulse_transport::Call;
use mcpulse_wire::jsonrpc::Message;
use mcpulse_wire::message::{self, ListKind};
use mcpulse_wire::transcript::{Exchange, Outcome, Step};
use mcpulse_wire::version::Era;
use serde_json::Value;

/// Takes inventory ([`lists`]), then makes the plan's tool calls (`super::calls`): every flow
/// comes here once its handshake is done, so the calls follow `tools/list` on every transport.
pub(super) async fn inventory(
    wire: &mut Wire<'_>,
    ctx: &mut Ctx<'_>,
    era: Era,
    capabilities: &Value,
) {
    lists(wire, ctx, era, capabilities).await;
    super::calls::calls(wire, ctx, era).await;
}

/// Every page of tools, and of prompts and resources when advertised. Where
/// replies come back on one ordered channel matched by id (stdio's stdout, the HTTP+SSE
/// stream) the first pages are requested all at once (pipelined), which spares the server's
/// and our wake-ups between one request and the next; later pages follow their cursors in
/// turn. Over Streamable HTTP each request waits for its response (one kept-alive connection).
async fn lists(wire: &mut Wire<'_>, ctx: &mut Ctx<'_>, era: Era, capabilities: &Value) {
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
