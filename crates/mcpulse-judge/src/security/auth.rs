//! The auth checks: an open remote server, and the OAuth discovery chain of a gated one (the
//! challenge, the protected-resource metadata, the authorization server's metadata).

use super::{Ctx, Exposure, SecRule, evidence, is_loopback};
use mcpulse_wire::auth;
use mcpulse_wire::jsonrpc::Message;
use mcpulse_wire::transcript::{Exchange, Step};
use serde_json::Value;

/// The first metadata document answered 200 with a JSON object, and its exchange.
fn first_json_object<'a>(exchanges: &[&'a Exchange]) -> Option<(&'a Exchange, Value)> {
    exchanges
        .iter()
        .filter(|e| e.status() == Some(200))
        .find_map(|e| {
            e.body
                .as_deref()
                .and_then(|b| serde_json::from_str::<Value>(b).ok())
                .filter(Value::is_object)
                .map(|v| (*e, v))
        })
}

pub(super) fn auth_rules(
    c: &mut Ctx<'_>,
    loopback: bool,
    handshake_ok: bool,
    authenticated: bool,
    expect_auth: bool,
    tools: &[&Value],
) {
    let tr = c.tr;
    // An open remote server.
    if handshake_ok && !authenticated && !loopback {
        let list = tr.exchanges.iter().find(|e| {
            e.step == Step::ToolsList
                && matches!(
                    c.replies.of(e).as_deref().map(|d| &d.message),
                    Some(Message::Result { .. })
                )
        });
        if let Some(ex) = list {
            let destructive = tools.iter().any(|t| {
                t.pointer("/annotations/readOnlyHint") != Some(&Value::Bool(true))
                    && t.pointer("/annotations/destructiveHint") != Some(&Value::Bool(false))
            });
            let seen = Exposure {
                auth_expected: expect_auth,
                tools_may_write: destructive,
                ..Exposure::default()
            };
            c.add_in(
                SecRule::NoAuthRemote,
                seen,
                format!(
                    "tools/list answered without credentials on a non-loopback host{}",
                    if destructive {
                        "; some tools are not declared read-only or non-destructive"
                    } else {
                        ""
                    }
                ),
                vec![evidence(ex)],
            );
        }
    }
    let Some(challenge_ex) = tr.exchanges.iter().find(|e| e.status() == Some(401)) else {
        return;
    };
    let header = challenge_ex.header("www-authenticate");
    let prm_exchanges: Vec<&Exchange> = tr
        .exchanges
        .iter()
        .filter(|e| e.step == Step::ResourceMetadata)
        .collect();
    let prm = first_json_object(&prm_exchanges);
    let advertised = header.and_then(auth::resource_metadata);
    if header.is_none() && prm.is_none() {
        let mut ev = vec![evidence(challenge_ex)];
        ev.extend(prm_exchanges.iter().map(|e| evidence(e)));
        c.add(SecRule::ChallengeMissing, "401 without WWW-Authenticate, and no protected-resource metadata at the well-known URLs".into(), ev);
        return;
    }
    if let Some(e) = prm_exchanges.iter().find(|e| e.error_refused_private()) {
        c.add(
            SecRule::MetadataPrivateAddress,
            "the protected-resource metadata URL points at a non-public address".into(),
            vec![evidence(e)],
        );
        return;
    }
    let Some((prm_ex, doc)) = prm else {
        let mut ev = vec![evidence(challenge_ex)];
        ev.extend(prm_exchanges.iter().map(|e| evidence(e)));
        let msg = match advertised {
            Some(url) => {
                format!("resource_metadata {url} is advertised but could not be fetched as JSON")
            }
            None => "no protected-resource metadata found".into(),
        };
        c.add(SecRule::ResourceMetadataInvalid, msg, ev);
        return;
    };
    let servers: Vec<&str> = doc
        .get("authorization_servers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if servers.is_empty() {
        c.add(
            SecRule::ResourceMetadataInvalid,
            "the protected-resource metadata has no authorization_servers".into(),
            vec![evidence(prm_ex)],
        );
    }
    if let Some(resource) = doc.get("resource").and_then(Value::as_str) {
        let target = canonical_resource(&tr.target.display);
        if canonical_resource(resource) != target {
            c.add(
                SecRule::ResourceMetadataInvalid,
                format!(
                    "the metadata names the resource {resource:?}, not this server ({target:?})"
                ),
                vec![evidence(prm_ex)],
            );
        }
    } else {
        c.add(
            SecRule::ResourceMetadataInvalid,
            "the protected-resource metadata has no resource".into(),
            vec![evidence(prm_ex)],
        );
    }
    let Some(issuer) = servers.first() else {
        return;
    };
    let as_exchanges: Vec<&Exchange> = tr
        .exchanges
        .iter()
        .filter(|e| e.step == Step::AuthServerMetadata)
        .collect();
    if let Some(e) = as_exchanges.iter().find(|e| e.error_refused_private()) {
        c.add(
            SecRule::MetadataPrivateAddress,
            format!("the authorization server {issuer} is on a non-public address"),
            vec![evidence(e)],
        );
        return;
    }
    let meta = first_json_object(&as_exchanges);
    let Some((as_ex, meta)) = meta else {
        c.add(
            SecRule::AuthServerMetadataMissing,
            format!("no authorization-server metadata found for {issuer}"),
            as_exchanges.iter().map(|e| evidence(e)).collect(),
        );
        return;
    };
    if meta
        .get("issuer")
        .and_then(Value::as_str)
        .map(|s| s.trim_end_matches('/'))
        != Some(issuer.trim_end_matches('/'))
    {
        c.add(
            SecRule::IssuerMismatch,
            format!(
                "issuer {} does not match {issuer}",
                meta.get("issuer")
                    .map(ToString::to_string)
                    .unwrap_or_else(|| "(missing)".into())
            ),
            vec![evidence(as_ex)],
        );
    }
    let s256 = meta
        .get("code_challenge_methods_supported")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|m| m == "S256"));
    if !s256 {
        c.add(
            SecRule::PkceS256Missing,
            "code_challenge_methods_supported does not include S256".into(),
            vec![evidence(as_ex)],
        );
    }
    let plain: Vec<String> = [
        "authorization_endpoint",
        "token_endpoint",
        "registration_endpoint",
    ]
    .iter()
    .filter_map(|k| {
        meta.get(*k)
            .and_then(Value::as_str)
            .filter(|u| !u.starts_with("https://") && !is_loopback_url(u))
            .map(|u| format!("{k} {u}"))
    })
    .collect();
    if !plain.is_empty() {
        c.add(
            SecRule::AuthEndpointsNotHttps,
            format!("not HTTPS: {}", plain.join(", ")),
            vec![evidence(as_ex)],
        );
    }
}

/// A resource URI compared the way RFC 9728 means it: scheme and host lowercased, the default
/// port and a trailing slash dropped, no query or fragment.
fn canonical_resource(u: &str) -> String {
    let u = u.split(['?', '#']).next().unwrap_or("");
    let Some((scheme, rest)) = u.split_once("://") else {
        return u.trim_end_matches('/').to_owned();
    };
    let scheme = scheme.to_ascii_lowercase();
    let (authority, path) = rest
        .find('/')
        .map(|i| rest.split_at(i))
        .unwrap_or((rest, ""));
    let mut authority = authority.to_ascii_lowercase();
    for (s, port) in [("https", ":443"), ("http", ":80")] {
        if scheme == s && authority.ends_with(port) {
            authority.truncate(authority.len() - port.len());
        }
    }
    format!("{scheme}://{authority}{}", path.trim_end_matches('/'))
}

fn is_loopback_url(u: &str) -> bool {
    u.parse::<http_host::Uri>()
        .ok()
        .and_then(|u| u.host().map(is_loopback))
        .unwrap_or(false)
}

/// A tiny alias so this module does not need the `http` crate: URIs parse with `serde_json`'s
/// neighbours? No — hosts are read by hand.
mod http_host {
    pub struct Uri(String);
    impl std::str::FromStr for Uri {
        type Err = ();
        fn from_str(s: &str) -> Result<Self, ()> {
            let rest = s.split_once("://").ok_or(())?.1;
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            let host = authority
                .rsplit_once('@')
                .map(|(_, h)| h)
                .unwrap_or(authority);
            let host = if host.starts_with('[') {
                host.split(']')
                    .next()
                    .map(|h| format!("{h}]"))
                    .unwrap_or_default()
            } else {
                host.split(':').next().unwrap_or("").to_owned()
            };
            Ok(Uri(host))
        }
    }
    impl Uri {
        pub fn host(&self) -> Option<&str> {
            Some(self.0.as_str()).filter(|h| !h.is_empty())
        }
    }
}

trait RefusedPrivate {
    fn error_refused_private(&self) -> bool;
}

impl RefusedPrivate for Exchange {
    fn error_refused_private(&self) -> bool {
        matches!(
            &self.outcome,
            mcpulse_wire::transcript::Outcome::TransportError {
                cause: mcpulse_wire::transcript::ErrorKind::NonPublicAddress,
                ..
            }
        )
    }
}
