//! The legacy HTTP+SSE flow: open the event stream, then `initialize`, the rest of the legacy
//! session and the security checks over the endpoint it names, with the stream kept open
//! until they are done.
//!
//! Reached with `--transport sse`, or from [`super::streamable_http`] when a legacy
//! `initialize` is refused there.

use super::session::{
    Initialized, challenge_metadata, classify_initialize, initialize, legacy_session,
};
use crate::context::{Ctx, Wire};
use crate::security::{self, Rides};
use http::Uri;
use mcpulse_transport::http::HttpClient;
use mcpulse_transport::legacy_sse;
use mcpulse_wire::transcript::Step;

pub(super) async fn probe(client: &mut HttpClient, uri: &Uri, ctx: &mut Ctx<'_>) {
    let (ex, stream) =
        legacy_sse::open(client, uri, &ctx.plan.headers, ctx.limits, ctx.deadline).await;
    let i = ctx.push(ex);
    let Some(stream) = stream else {
        challenge_metadata(client, uri, ctx, i).await;
        return ctx.mark_done();
    };
    // The session's requests go to the endpoint the server named: under the guard a redirect
    // is under (a public server may not send the probe to a private address, by naming one,
    // by a redirect from its endpoint, or by a name that resolves elsewhere the next time).
    client.deny_private = crate::context::target_is_public(ctx, client);
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
    if let Wire::Sse { client, .. } = &mut wire {
        client.deny_private = false;
    }
    if let Wire::Sse { client, stream } = wire
        && stream.is_open()
        && mcpulse_transport::http::origin(&stream.endpoint) == mcpulse_transport::http::origin(uri)
        && let Some(checks) =
            security::side_checks(client, uri, Rides::Sse(stream.endpoint.clone()), ctx)
    {
        checks.await.record(client, ctx);
        drop(stream);
    }
}
