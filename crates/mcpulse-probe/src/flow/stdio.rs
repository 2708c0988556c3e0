//! The stdio flow: one process, as a client has one. `server/discover` first; a legacy server
//! answers it with an error and stays up, and the legacy handshake goes on in the same process.
//! Only a process that went away is replaced ([`legacy_fallback`]). The opt-in dual-era check
//! runs in a sibling process of its own ([`start_sibling`], [`dual_era_answer`]).
//!
//! It owns when a process is started, replaced and handed to `Live`; how a process is run,
//! read and ended is `mcpulse-transport`'s.

use super::inventory::inventory;
use super::session::{
    Discovered, Initialized, classify_discover, classify_initialize, dual_era_check, initialize,
    legacy_session,
};
use crate::context::{Ctx, Wire, request};
use mcpulse_transport::stdio::{Patience, Sent, StdioChild};
use mcpulse_wire::checks::purpose;
use mcpulse_wire::message;
use mcpulse_wire::transcript::{Exchange, Outcome, Step};
use mcpulse_wire::version::{self, Era, EraMode};
use std::time::Duration;
use tokio::time::Instant;

/// The stdio server's command line: every process of one probe runs the same one.
#[derive(Clone, Copy)]
struct Command<'a> {
    program: &'a str,
    args: &'a [String],
}

impl Command<'_> {
    /// Starts one more process for `purpose`; a process that cannot start is recorded, and
    /// `None` returned.
    fn spawn(self, purpose: &str, ctx: &mut Ctx<'_>) -> Option<StdioChild> {
        let started = StdioChild::spawn(
            self.program,
            self.args,
            &ctx.plan.env,
            ctx.plan.clean_env,
            purpose,
            ctx.limits,
            ctx.clock,
        );
        match started {
            Ok(c) => Some(c),
            Err(rec) => {
                ctx.tr.processes.push(*rec);
                None
            }
        }
    }
}

/// The stdio flow. Every process still running at its end is left in `children`, for
/// [`crate::Live`].
pub(super) async fn probe(
    program: &str,
    args: &[String],
    ctx: &mut Ctx<'_>,
    children: &mut Vec<StdioChild>,
) {
    let cmd = Command { program, args };
    let Some(mut child) = cmd.spawn(purpose::PROBE, ctx) else {
        return ctx.mark_done();
    };
    if ctx.plan.era == EraMode::Legacy {
        return legacy_stdio(child, None, ctx, children).await;
    }
    let sibling = start_sibling(cmd, ctx).await;
    let i = discover(&mut child, ctx).await;
    match classify_discover(ctx.ex(i)) {
        Discovered::Modern(caps) => {
            inventory(&mut Wire::Stdio(&mut child), ctx, Era::Modern, &caps).await;
            ctx.mark_done();
            match sibling {
                Some(sibling) => dual_era_answer(cmd, child, sibling, ctx, children).await,
                None => children.push(child),
            }
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
            legacy_fallback(cmd, child, i, ctx, children).await;
        }
    }
}

/// In auto mode with `Plan::stdio_dual_era`, the dual-era check's process, started beside the
/// first and sent its legacy `initialize` at once.
///
/// The check needs a process of its own: the era belongs to the process, and a dual-era
/// server that has served one era refuses the other on the same connection. Started now, its
/// start-up overlaps the first's instead of following it; its answer is read only if the first
/// turns out modern ([`dual_era_answer`]).
async fn start_sibling(cmd: Command<'_>, ctx: &mut Ctx<'_>) -> Option<(StdioChild, Sent)> {
    if ctx.plan.era != EraMode::Auto || !ctx.plan.stdio_dual_era {
        return None;
    }
    let mut s = cmd.spawn(purpose::DUAL_ERA_CHECK, ctx)?;
    let id = ctx.id();
    let msg = message::initialize(id, &ctx.plan.client);
    let sent = s
        .send(
            request(Step::DualEraCheck, Era::Legacy, id, &msg),
            ctx.deadline,
        )
        .await;
    Some((s, sent))
}

/// `server/discover` to the first process, awaited with [`discover_patience`]; the index of
/// its exchange.
async fn discover(child: &mut StdioChild, ctx: &mut Ctx<'_>) -> usize {
    let id = ctx.id();
    let msg = message::discover(id, version::MODERN, &ctx.plan.client);
    let sent = child
        .send(request(Step::Discover, Era::Modern, id, &msg), ctx.deadline)
        .await;
    let ex = child.receive_patient(sent, discover_patience(ctx)).await;
    ctx.push(ex)
}

/// A modern server's inventory is done: the sibling's answer to its legacy `initialize` is the
/// dual-era check. A sibling that died before answering (a server that cannot run twice at
/// once, say) is replaced by a process of its own after the first has ended, time allowing.
async fn dual_era_answer(
    cmd: Command<'_>,
    child: StdioChild,
    (mut s, sent): (StdioChild, Sent),
    ctx: &mut Ctx<'_>,
    children: &mut Vec<StdioChild>,
) {
    let ex = s.receive(sent, ctx.deadline).await;
    let died = went_away(&ex);
    ctx.push(ex);
    if !died || ctx.expired() || !room_to_restart(ctx) {
        children.push(child);
        children.push(s);
        return;
    }
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
    let Some(mut fresh) = cmd.spawn(purpose::DUAL_ERA_CHECK, ctx) else {
        return;
    };
    dual_era_check(&mut Wire::Stdio(&mut fresh), ctx).await;
    children.push(fresh);
}

/// Discover (exchange `i`) showed no modern server: the legacy handshake, in the same process
/// while it is up, else in a fresh one, time allowing.
async fn legacy_fallback(
    cmd: Command<'_>,
    mut child: StdioChild,
    i: usize,
    ctx: &mut Ctx<'_>,
    children: &mut Vec<StdioChild>,
) {
    if !child.has_exited() && !went_away(ctx.ex(i)) {
        let j = initialize(&mut Wire::Stdio(&mut child), ctx, Step::Initialize).await;
        if !went_away(ctx.ex(j)) || !room_to_restart(ctx) {
            return legacy_stdio(child, Some(j), ctx, children).await;
        }
        // It went away on our `initialize` after answering `server/discover` (a server that
        // ends its session on any request before the handshake): the handshake gets a fresh
        // process.
    }
    if !room_to_restart(ctx) {
        children.push(child);
        return ctx.mark_done();
    }
    ctx.tr
        .processes
        .push(child.shutdown(ctx.plan.shutdown_grace).await);
    let Some(fresh) = cmd.spawn(purpose::LEGACY_FALLBACK, ctx) else {
        return ctx.mark_done();
    };
    legacy_stdio(fresh, None, ctx, children).await;
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
/// [`crate::Live::finish`], which records them: the probe's safety net must never drop a shutdown
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
