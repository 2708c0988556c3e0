//! The checks a target must pass wherever it comes from, the config file or an imported MCP
//! client config: its name, header names and values, and URL; and `target_from`, the last
//! step both take to a [`TargetConfig`].
//!
//! This module does not locate errors in a file (the parser does, with the value's span) nor
//! read client configs ([`super::import`]).

use super::types::{Defaults, Endpoint, SECRET_MIN_LEN, TargetConfig};
use mcpulse_wire::redact::Secrets;
use std::collections::BTreeMap;

/// The longest target name, in characters: enough for any label a person would type, short
/// enough for log lines, metric labels and URLs.
pub const MAX_NAME_CHARS: usize = 128;

/// Why a target's name, header or URL was refused. The messages are user-facing (config
/// errors, import warnings, documented examples), so their wording is fixed; the variants
/// carry the data for callers that decide on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    #[error("a target needs a non-empty name")]
    EmptyName,
    #[error(
        "target name {name:?} contains the control or invisible character U+{code:04X}; use visible characters",
        code = u32::from(*.ch)
    )]
    HiddenChar { name: String, ch: char },
    #[error("target name {name:?} starts or ends with white space; write {trimmed:?}", trimmed = .name.trim())]
    Padded { name: String },
    #[error("target name is {chars} characters long; the most is {MAX_NAME_CHARS}")]
    LongName { chars: usize },
    #[error(
        "header name {name:?} is not a valid HTTP header name (letters, digits and !#$%&'*+-.^_`|~ only)"
    )]
    HeaderName { name: String },
    #[error("header {name:?}: the value contains a line break")]
    HeaderLineBreak { name: String },
    #[error("header {name:?}: the value contains the control character 0x{byte:02x}")]
    HeaderControl { name: String, byte: u8 },
    /// `shown` is the URL with its credentials redacted: the error may be logged.
    #[error("url {shown:?} must start with http:// or https://")]
    UrlScheme { shown: String },
    #[error(transparent)]
    Url(#[from] mcpulse_probe::TargetError),
}

/// Whether `name` can name a target. Names appear in logs, alerts, metric labels and API
/// paths, so they must be visible: not blank, no control characters (C0, DEL, C1: an escape
/// sequence or a line break would rewrite a terminal or forge a log line), no invisible or
/// bidirectional-control characters (two names that look alike), no line or paragraph
/// separators, and at most [`MAX_NAME_CHARS`]. Config targets and imported servers both go
/// through here.
pub fn check_name(name: &str) -> Result<(), CheckError> {
    if name.trim().is_empty() {
        return Err(CheckError::EmptyName);
    }
    if let Some(ch) = name.chars().find(|&c| {
        c.is_control()
            || mcpulse_judge::drift::is_hidden_char(c)
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{061C}')
    }) {
        return Err(CheckError::HiddenChar {
            name: name.to_owned(),
            ch,
        });
    }
    if name.trim() != name {
        return Err(CheckError::Padded {
            name: name.to_owned(),
        });
    }
    let chars = name.chars().count();
    if chars > MAX_NAME_CHARS {
        return Err(CheckError::LongName { chars });
    }
    Ok(())
}

/// Whether `name` can be sent as an HTTP header name (an RFC 9110 token).
pub fn check_header_name(name: &str) -> Result<(), CheckError> {
    if mcpulse_wire::env::is_header_name(name) {
        Ok(())
    } else {
        Err(CheckError::HeaderName {
            name: name.to_owned(),
        })
    }
}

/// Whether `value` (after `${VAR}` expansion) can be sent as the value of header `name`:
/// a line break would end the header early or smuggle in another one, and the HTTP client
/// refuses any control character but a tab, which would fail every check at run time.
pub fn check_header_value(name: &str, value: &str) -> Result<(), CheckError> {
    let name = name.to_owned();
    match value
        .bytes()
        .find(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
    {
        None => Ok(()),
        Some(b'\r' | b'\n') => Err(CheckError::HeaderLineBreak { name }),
        Some(byte) => Err(CheckError::HeaderControl { name, byte }),
    }
}

/// Whether `url` can be probed: the probe's own rules (http or https, a host, no credentials
/// in it), checked when the config is read rather than at the first check.
pub fn check_url(url: &str) -> Result<(), CheckError> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(CheckError::UrlScheme {
            shown: mcpulse_wire::redact::url(url),
        });
    }
    mcpulse_probe::Target::http(url).map(drop)?;
    Ok(())
}

/// A target from its checked parts and settings: the last step of a config target and an
/// imported server alike. Values long enough to be credentials (env values, header values)
/// become the target's secrets, hidden wherever the target is shown.
pub(crate) fn target_from(
    name: String,
    endpoint: Endpoint,
    headers: Vec<(String, String)>,
    s: &Defaults,
    labels: BTreeMap<String, String>,
    source: String,
) -> TargetConfig {
    let mut secrets = Secrets::default();
    let env_values = match &endpoint {
        Endpoint::Command { env, .. } => env.values().collect(),
        Endpoint::Url(_) | Endpoint::Health(_) => Vec::new(),
    };
    for v in env_values.into_iter().chain(headers.iter().map(|(_, v)| v)) {
        if v.len() >= SECRET_MIN_LEN {
            secrets.add(v);
        }
    }
    TargetConfig {
        secrets,
        name,
        endpoint,
        headers,
        interval: s.interval,
        timeout: s.timeout,
        failure_threshold: s.failure_threshold,
        success_threshold: s.success_threshold,
        latency_budget: s.latency_budget,
        flap_window: s.flap_window_or_derived(),
        flap_threshold: s.flap_threshold,
        reminder: s.reminder,
        era: s.era,
        security: s.security,
        labels,
        source,
        health_url: None,
        health_discovery: false,
        calls: Vec::new(),
        health_tool: s.health_tool.clone(),
        allow_side_effects: s.allow_side_effects,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The typed errors print exactly what the `String` errors they replaced printed (config
    /// errors, import warnings and docs quote them).
    #[test]
    fn messages_are_unchanged() {
        let shown = |r: Result<(), CheckError>| r.err().map(|e| e.to_string());
        assert_eq!(
            shown(check_name(" ")).as_deref(),
            Some("a target needs a non-empty name")
        );
        assert_eq!(
            shown(check_name("a\u{1b}b")).as_deref(),
            Some(
                "target name \"a\\u{1b}b\" contains the control or invisible character U+001B; use visible characters"
            )
        );
        assert_eq!(
            shown(check_name(" a ")).as_deref(),
            Some("target name \" a \" starts or ends with white space; write \"a\"")
        );
        assert_eq!(
            shown(check_name(&"n".repeat(129))).as_deref(),
            Some("target name is 129 characters long; the most is 128")
        );
        assert_eq!(
            shown(check_header_name("Bad Name")).as_deref(),
            Some(
                "header name \"Bad Name\" is not a valid HTTP header name (letters, digits and !#$%&'*+-.^_`|~ only)"
            )
        );
        assert_eq!(
            shown(check_header_value("X-A", "a\r\nb")).as_deref(),
            Some("header \"X-A\": the value contains a line break")
        );
        assert_eq!(
            shown(check_header_value("X-A", "a\u{7f}")).as_deref(),
            Some("header \"X-A\": the value contains the control character 0x7f")
        );
        assert_eq!(check_header_value("X-A", "a\tb"), Ok(()));
        assert_eq!(
            shown(check_url("ftp://u:pw@h/x")).as_deref(),
            Some(
                format!(
                    "url {:?} must start with http:// or https://",
                    mcpulse_wire::redact::url("ftp://u:pw@h/x")
                )
                .as_str()
            )
        );
        let bad = check_url("http://").unwrap_err();
        assert!(matches!(bad, CheckError::Url(_)), "{bad:?}");
        assert_eq!(
            bad.to_string(),
            mcpulse_probe::Target::http("http://")
                .unwrap_err()
                .to_string()
        );
    }
}
