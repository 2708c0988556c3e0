//! The Streamable HTTP flow: `server/discover`, or a legacy `initialize` when discover shows no
//! modern server, the inventory, then the dual-era check or the session's end beside the
//! security checks; a legacy `initialize` refused with 400/404/405 hands over to
//! [`super::legacy_sse`].
//!
//! It sends through `crate::context` and leaves what the security checks send to
//! `crate::security`.

use super::inventory::inventory;
use super::legacy_sse;
use super::session::{
    Discovered, Initialized, challenge_metadata, classify_discover, classify_initialize, discover,
    dual_era_check, initialize, legacy_session,
};
use crate::context::{Ctx, Wire};
use crate::plan::TransportMode;
use crate::security::{self, Rides, Side};
use http::Uri;
use mcpulse_transport::http::HttpClient;
use mcpulse_transport::streamable_http;
use mcpulse_wire::transcript::Step;
use mcpulse_wire::version::{self, Era, EraMode};

pub(super) async fn probe(client: &mut HttpClient, uri: &Uri, ctx: &mut Ctx<'_>) {
    if ctx.plan.transport == TransportMode::Sse {
        legacy_sse::probe(client, uri, ctx).await;
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
                let checks = security::side_checks(client, uri, Rides::Nothing, ctx);
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
                challenge_metadata(client, uri, ctx, i).await;
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
            let checks = security::side_checks(client, uri, rides, ctx);
            let ((), checks) = tokio::join!(
                async {
                    if let Some(sid) = sid {
                        let session = (sid.as_str(), negotiated.as_str());
                        security::in_session(client, uri, ctx, session).await;
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
            challenge_metadata(client, uri, ctx, i).await;
            ctx.mark_done();
        }
        Initialized::TrySse if ctx.plan.transport == TransportMode::StreamableHttp => {
            ctx.mark_done()
        }
        Initialized::TrySse => {
            let Wire::Http { client, .. } = wire else {
                return;
            };
            legacy_sse::probe(client, uri, ctx).await;
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
