//! The security checks' extra requests (HTTP targets; `--no-security` skips them).
//!
//! Few and read-only, by rule: the successful handshake replayed with a foreign `Origin` (and,
//! for loopback targets, a foreign `Host`), one malformed request, and for a gated server the
//! OAuth metadata documents (RFC 9728, RFC 8414 / OpenID discovery). Never a tool call; never
//! the user's credentials to any host but the target; never a metadata URL on a non-public
//! address when the target itself is public (SSRF guard). Sessions opened by a check are
//! deleted. What the answers mean is the judge's business (`mcpulse-judge`'s security rules).

use crate::flow::Ctx;
use http::{Method, Uri};
use mcpulse_transport::http::{HttpClient, is_loopback_host, resolve};
use mcpulse_transport::streamable_http::{self, Post};
use mcpulse_wire::jsonrpc::Message;
use mcpulse_wire::transcript::{Exchange, Step, TransportKind};
use mcpulse_wire::version::{self, Era};
use serde_json::Value;

/// The foreign origin and host used by the DNS-rebinding checks.
pub const FOREIGN_ORIGIN: &str = "http://evil.example";
pub const FOREIGN_HOST: &str = "evil.example";

/// A deliberately truncated JSON-RPC body.
pub const MALFORMED_BODY: &str =
    r#"{"jsonrpc":"2.0","id":"mcpulse-malformed","method":"tools/list","params":{"#;

pub(crate) async fn checks(client: &mut HttpClient, uri: &Uri, ctx: &mut Ctx<'_>) {
    let handshake = ctx
        .tr
        .exchanges
        .iter()
        .find(|e| {
            matches!(e.step, Step::Discover | Step::Initialize)
                && matches!(e.reply().map(|d| d.message), Some(Message::Result { .. }))
        })
        .cloned();
    if let Some(hs) = handshake {
        rebinding_checks(client, uri, ctx, &hs).await;
        if hs.transport == TransportKind::StreamableHttp {
            malformed(client, uri, ctx, hs.era).await;
        }
    }
    auth_metadata(client, uri, ctx).await;
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

async fn rebinding_checks(client: &mut HttpClient, uri: &Uri, ctx: &mut Ctx<'_>, hs: &Exchange) {
    let loopback = uri.host().is_some_and(is_loopback_host);
    let mut checks = vec![(
        Step::OriginCheck,
        ("origin".to_owned(), FOREIGN_ORIGIN.to_owned()),
    )];
    if loopback {
        checks.push((
            Step::HostCheck,
            ("host".to_owned(), FOREIGN_HOST.to_owned()),
        ));
    }
    for (step, extra) in checks {
        if ctx.expired() {
            return;
        }
        let ex = match hs.transport {
            TransportKind::Sse => {
                let headers = vec![("accept".into(), "text/event-stream".into()), extra];
                streamable_http::head_only(
                    client,
                    Method::GET,
                    uri,
                    step,
                    headers,
                    &ctx.plan.headers,
                    ctx.deadline,
                )
                .await
            }
            _ => {
                let Some(body) = hs
                    .request
                    .body
                    .as_deref()
                    .and_then(|b| serde_json::from_str::<Value>(b).ok())
                else {
                    return;
                };
                let mut headers = handshake_headers(hs);
                headers.push(extra);
                let id = ctx.id();
                let mut body = body;
                body["id"] = Value::from(id);
                let post = Post {
                    uri,
                    step,
                    era: hs.era,
                    page: None,
                    id: Some(id),
                    message: &body,
                    headers,
                    user_headers: &ctx.plan.headers,
                };
                streamable_http::post(client, post, ctx.limits, ctx.deadline).await
            }
        };
        let sid = ex.header("mcp-session-id").map(str::to_owned);
        let ok = ex.status().is_some_and(|s| (200..300).contains(&s));
        ctx.push(ex);
        // A session the check opened is closed again.
        if let (true, Some(sid)) = (ok, sid) {
            let headers = vec![
                ("mcp-session-id".to_owned(), sid),
                (
                    "mcp-protocol-version".to_owned(),
                    version::LEGACY_LATEST.to_owned(),
                ),
            ];
            let ex = streamable_http::delete_session(
                client,
                uri,
                headers,
                &ctx.plan.headers,
                ctx.deadline,
            )
            .await;
            ctx.push(ex);
        }
    }
}

async fn malformed(client: &mut HttpClient, uri: &Uri, ctx: &mut Ctx<'_>, era: Option<Era>) {
    if ctx.expired() {
        return;
    }
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
    let out = mcpulse_transport::http::Outgoing {
        method: Method::POST,
        uri: uri.clone(),
        headers,
        user_headers: &ctx.plan.headers,
        body: Some(MALFORMED_BODY.to_owned()),
    };
    let ex = streamable_http::send_raw(
        client,
        &out,
        Step::MalformedRequest,
        ctx.limits,
        ctx.deadline,
    )
    .await;
    ctx.push(ex);
}

/// For a gated server: the protected-resource metadata (from the challenge, or the well-known
/// URLs) and the authorization-server metadata it names.
async fn auth_metadata(client: &mut HttpClient, uri: &Uri, ctx: &mut Ctx<'_>) {
    let gated = ctx.tr.exchanges.iter().any(|e| {
        matches!(e.status(), Some(401))
            && matches!(e.step, Step::Discover | Step::Initialize | Step::SseOpen)
    });
    if !gated {
        return;
    }
    // The SSRF guard: a public target may not send mcpulse to private addresses.
    client.deny_private = crate::flow::target_is_public(ctx, client);
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
