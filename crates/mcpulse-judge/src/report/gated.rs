//! A server that is up but gated: the 401 or 403, its `WWW-Authenticate` challenge and the
//! protected-resource metadata (RFC 9728) the probe fetched, as report facts and a finding. The
//! security rules about that metadata are `security`'s.

use super::{AuthDetail, AuthPosture, Judgement, Report};
use crate::evidence::{describe, strings};
use crate::rules::Rule;
use mcpulse_wire::auth;
use mcpulse_wire::transcript::{Exchange, Step};
use serde_json::Value;

impl Judgement<'_> {
    pub(super) fn auth(&mut self, report: &mut Report, ex: &Exchange, status: u16) {
        report.auth = if status == 401 {
            AuthPosture::Required
        } else {
            AuthPosture::Forbidden
        };
        let header = ex.header("www-authenticate").map(str::to_owned);
        let challenge = header
            .as_deref()
            .map(auth::parse_challenges)
            .and_then(|c| c.into_iter().next());
        let mut detail = AuthDetail {
            status,
            www_authenticate: header.clone(),
            scheme: challenge.as_ref().map(|c| c.scheme.clone()),
            scope: challenge
                .as_ref()
                .and_then(|c| c.param("scope"))
                .map(str::to_owned),
            resource_metadata_url: challenge
                .as_ref()
                .and_then(|c| c.param("resource_metadata"))
                .map(str::to_owned),
            resource_metadata: None,
            resource_metadata_error: None,
        };
        if let Some(m) = self
            .tr
            .exchanges
            .iter()
            .find(|e| e.step == Step::ResourceMetadata)
        {
            let parsed = m
                .body
                .as_deref()
                .and_then(|b| serde_json::from_str::<Value>(b).ok())
                .filter(Value::is_object);
            match (m.status(), parsed) {
                (Some(200), Some(doc)) => detail.resource_metadata = Some(doc),
                _ => {
                    detail.resource_metadata_error =
                        Some(format!("fetching it gave {}", describe(Some(m))))
                }
            }
        }
        let mut msg = if status == 401 {
            format!(
                "the server is up but requires authentication (HTTP 401 to {})",
                ex.step.as_str()
            )
        } else {
            format!(
                "the server is up but refused this client (HTTP 403 to {})",
                ex.step.as_str()
            )
        };
        match (&detail.resource_metadata, &detail.resource_metadata_url) {
            (Some(doc), _) => {
                let servers = strings(doc.get("authorization_servers"));
                if !servers.is_empty() {
                    msg.push_str(&format!("; authorization server: {}", servers.join(", ")));
                }
            }
            (None, Some(url)) => msg.push_str(&format!("; resource metadata advertised at {url}")),
            (None, None) if header.is_none() && status == 401 => {
                msg.push_str("; no WWW-Authenticate header")
            }
            _ => {}
        }
        if let Some(scope) = &detail.scope {
            msg.push_str(&format!("; scope {scope:?}"));
        }
        msg.push_str(if status == 401 {
            ". Pass credentials with --header or --bearer-env"
        } else {
            ""
        });
        let rule = if status == 401 {
            Rule::AuthRequired
        } else {
            Rule::Forbidden
        };
        self.add(rule.finding(msg));
        report.auth_detail = Some(detail);
    }
}
