//! The transport checks: plain HTTP to a remote host, TLS (a failed handshake, a certificate
//! near or past its end), DNS rebinding (a foreign Origin or Host accepted) and CORS.

use super::{Ctx, Exposure, SecRule, evidence};
use mcpulse_wire::transcript::{ConnectStage, Exchange, Step};

pub(super) fn transport_rules(c: &mut Ctx<'_>, loopback: bool) {
    let tr = c.tr;
    if tr.target.display.starts_with("http://") && !loopback {
        c.add(
            SecRule::PlainHttpRemote,
            format!("{} is plain HTTP to a non-loopback host", tr.target.display),
            vec![format!("target: {}", tr.target.display)],
        );
    }
    // Only the target's own connections: a metadata host's certificate is not the server's.
    let own = |authority: &str| {
        let host = tr.target.host.as_deref().unwrap_or("");
        authority
            .rsplit_once(':')
            .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
            == Some(host)
    };
    // One finding per host and problem, however many connections showed it.
    let mut seen: Vec<(SecRule, &str)> = Vec::new();
    for conn in tr.connections.iter().filter(|c| own(&c.authority)) {
        if let Some(e) = &conn.error
            && e.stage == ConnectStage::Tls
            && !seen.contains(&(SecRule::TlsInvalid, conn.authority.as_str()))
        {
            seen.push((SecRule::TlsInvalid, conn.authority.as_str()));
            c.add(
                SecRule::TlsInvalid,
                format!("TLS with {} failed: {}", conn.authority, e.message),
                vec![format!("connect {} → {}", conn.authority, e.message)],
            );
        }
        if let Some(not_after) = conn.cert_not_after {
            let now = (tr.started_unix_ms / 1000) as i64;
            let days = (not_after - now) as f64 / 86_400.0;
            if days < 14.0 {
                let when = crate::evidence::rfc3339((not_after.max(0) as u64) * 1000);
                let msg = if days < 0.0 {
                    format!("the certificate of {} expired on {when}", conn.authority)
                } else {
                    format!(
                        "the certificate of {} expires in {days:.1} days ({when})",
                        conn.authority
                    )
                };
                let rule = if days < 0.0 {
                    SecRule::TlsInvalid
                } else {
                    SecRule::TlsExpiring
                };
                if seen.contains(&(rule, conn.authority.as_str())) {
                    continue;
                }
                seen.push((rule, conn.authority.as_str()));
                c.add(rule, msg, vec![format!("certificate notAfter {when}")]);
            }
        }
    }
}

fn accepted(ex: &Exchange) -> bool {
    ex.status().is_some_and(|s| (200..300).contains(&s))
}

pub(super) fn rebinding_rules(c: &mut Ctx<'_>, loopback: bool, has_auth: bool) {
    let tr = c.tr;
    let seen = Exposure {
        loopback_without_auth: loopback && !has_auth,
        ..Exposure::default()
    };
    // The last check of each kind decides: an in-session Host check that got an answer that
    // may be about the session is followed by a replay of the handshake (mcpulse-probe).
    if let Some(ex) = tr.exchanges.iter().rfind(|e| e.step == Step::OriginCheck)
        && accepted(ex)
    {
        c.add_in(
            SecRule::OriginNotValidated,
            seen,
            format!("a request with the foreign Origin {} was accepted (HTTP {}); it must be rejected with 403", mcpulse_wire::checks::FOREIGN_ORIGIN, ex.status().unwrap_or(0)),
            vec![evidence(ex)],
        );
    }
    if let Some(ex) = tr.exchanges.iter().rfind(|e| e.step == Step::HostCheck)
        && accepted(ex)
    {
        c.add_in(
            SecRule::HostNotValidated,
            seen,
            format!("a request with the foreign Host {} was accepted (HTTP {}); a loopback server must reject it", mcpulse_wire::checks::FOREIGN_HOST, ex.status().unwrap_or(0)),
            vec![evidence(ex)],
        );
    }
}

pub(super) fn cors_rules(c: &mut Ctx<'_>, loopback: bool, has_auth: bool) {
    let tr = c.tr;
    let mut seen_wild = false;
    for ex in &tr.exchanges {
        let Some(acao) = ex.header("access-control-allow-origin") else {
            continue;
        };
        let creds = ex
            .header("access-control-allow-credentials")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let acao = acao.trim();
        if acao == "*" && creds {
            c.add(
                SecRule::CorsWildcardCredentials,
                "Access-Control-Allow-Origin: * with Access-Control-Allow-Credentials: true".into(),
                vec![evidence(ex)],
            );
            return;
        }
        if ex.step == Step::OriginCheck
            && acao.eq_ignore_ascii_case(mcpulse_wire::checks::FOREIGN_ORIGIN)
        {
            let seen = Exposure {
                credentials_allowed: creds,
                ..Exposure::default()
            };
            c.add_in(
                SecRule::CorsReflectsOrigin,
                seen,
                format!(
                    "the foreign Origin was reflected in Access-Control-Allow-Origin{}",
                    if creds {
                        ", with credentials allowed"
                    } else {
                        ""
                    }
                ),
                vec![evidence(ex)],
            );
            return;
        }
        if acao == "*" {
            seen_wild = true;
        }
    }
    if seen_wild && loopback && !has_auth {
        let ex = tr.exchanges.iter().find(|e| {
            e.header("access-control-allow-origin")
                .is_some_and(|v| v.trim() == "*")
        });
        c.add(
            SecRule::CorsWildcard,
            "Access-Control-Allow-Origin: * on a loopback server without authentication".into(),
            ex.map(evidence).into_iter().collect(),
        );
    }
}
