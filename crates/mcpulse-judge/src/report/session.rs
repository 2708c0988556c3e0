//! The session: the handshake's facts (protocol versions, era, whether the server speaks both,
//! who it says it is) and the findings about them, and how the session ended (`DELETE`). It does
//! not judge the lists that follow the handshake (`lists`) or a handshake that failed (`down`).

use super::{Handshake, Judgement, Report, ServerInfo};
use crate::evidence::{describe, strings};
use crate::rules::Rule;
use mcpulse_wire::jsonrpc::Message;
use mcpulse_wire::transcript::Step;
use mcpulse_wire::version::{self, EraMode};
use serde_json::Value;

impl Judgement<'_> {
    /// A `server/discover` answered: the versions it lists, its server facts, and the dual-era
    /// check's answer.
    pub(super) fn modern_handshake(&mut self, report: &mut Report, hs: &Handshake<'_>) {
        let tr = self.tr;
        report.supported_versions = strings(hs.result.get("supportedVersions"));
        if report
            .supported_versions
            .iter()
            .any(|v| v == version::MODERN)
        {
            report.protocol_version = Some(version::MODERN.to_owned());
        } else {
            self.add(Rule::ProtocolVersionUnknown.finding(format!(
                "server/discover lists supportedVersions {:?}, which does not include {}",
                report.supported_versions,
                version::MODERN
            )));
        }
        report.server = server_info(
            hs.result
                .pointer("/_meta/io.modelcontextprotocol~1serverInfo"),
        );
        self.modern_fields("server/discover", &hs.result);
        // Dual-era: a legacy initialize to the same server, in auto mode (over stdio,
        // in a sibling process; the last attempt counts if that one died first).
        if let Some(check) = tr.exchanges.iter().rfind(|e| e.step == Step::DualEraCheck) {
            let checked = self.replies.of(check);
            let dual = matches!(checked.as_deref().map(|d| &d.message),
                Some(Message::Result { result, .. }) if result.get("protocolVersion").is_some());
            report.dual_era = Some(dual);
            if dual {
                let v = checked.as_deref().and_then(|d| match &d.message {
                    Message::Result { result, .. } => result
                        .get("protocolVersion")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    _ => None,
                });
                if let Some(v) = v {
                    if !report.supported_versions.contains(&v) {
                        report.supported_versions.push(v.clone());
                    }
                    self.add(
                        Rule::DualEra
                            .finding(format!("also answers a legacy initialize (protocol {v})")),
                    );
                }
            }
        }
    }

    /// An `initialize` answered: the version it chose, its server facts, and (in auto mode)
    /// discovery's failure before it.
    pub(super) fn legacy_handshake(&mut self, report: &mut Report, hs: &Handshake<'_>) {
        let tr = self.tr;
        match hs.result.get("protocolVersion").and_then(Value::as_str) {
            None => self.add(
                Rule::ProtocolVersionMissing
                    .finding("the initialize result has no protocolVersion"),
            ),
            Some(v) => {
                report.protocol_version = Some(v.to_owned());
                report.supported_versions = vec![v.to_owned()];
                if !version::is_known(v) {
                    self.add(Rule::ProtocolVersionUnknown.finding(format!(
                        "the server chose protocol version {v:?}, which is not a known MCP revision (offered {})",
                        version::LEGACY_LATEST
                    )));
                }
            }
        }
        report.server = server_info(hs.result.get("serverInfo"));
        // Discovery was tried first (auto mode) and failed: not dual-era.
        if tr.plan.era == EraMode::Auto && tr.exchanges.iter().any(|e| e.step == Step::Discover) {
            report.dual_era = Some(false);
            self.add(Rule::LegacyOnly.finding(format!(
                "server/discover did not succeed ({}); the server speaks only the legacy handshake",
                describe(tr.exchanges.iter().find(|e| e.step == Step::Discover))
            )));
        }
    }

    /// The session's end: a `DELETE` may fail only with 405 (the server keeps no sessions).
    pub(super) fn session_cleanup(&mut self) {
        let tr = self.tr;
        for e in tr
            .exchanges
            .iter()
            .filter(|e| e.step == Step::SessionDelete)
        {
            match e.status() {
                Some(s) if (200..300).contains(&s) || s == 405 => {}
                _ => self.add(
                    Rule::SessionDeleteFailed
                        .finding(format!("DELETE of the session: {}", describe(Some(e)))),
                ),
            }
        }
    }
}

pub(super) fn server_info(v: Option<&Value>) -> Option<ServerInfo> {
    let v = v?.as_object()?;
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(ServerInfo {
        name: s("name"),
        version: s("version"),
        title: s("title"),
    })
}
