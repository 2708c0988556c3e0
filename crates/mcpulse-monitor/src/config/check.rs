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

/// Whether `name` can name a target. Names appear in logs, alerts, metric labels and API
/// paths, so they must be visible: not blank, no control characters (C0, DEL, C1: an escape
/// sequence or a line break would rewrite a terminal or forge a log line), no invisible or
/// bidirectional-control characters (two names that look alike), no line or paragraph
/// separators, and at most [`MAX_NAME_CHARS`]. Config targets and imported servers both go
/// through here.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("a target needs a non-empty name".into());
    }
    if let Some(c) = name.chars().find(|&c| {
        c.is_control()
            || mcpulse_judge::drift::is_hidden_char(c)
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{061C}')
    }) {
        return Err(format!(
            "target name {name:?} contains the control or invisible character U+{:04X}; use visible characters",
            u32::from(c)
        ));
    }
    if name.trim() != name {
        return Err(format!(
            "target name {name:?} starts or ends with white space; write {:?}",
            name.trim()
        ));
    }
    let chars = name.chars().count();
    if chars > MAX_NAME_CHARS {
        return Err(format!(
            "target name is {chars} characters long; the most is {MAX_NAME_CHARS}"
        ));
    }
    Ok(())
}

/// Whether `name` can be sent as an HTTP header name (an RFC 9110 token).
pub fn check_header_name(name: &str) -> Result<(), String> {
    if mcpulse_wire::env::is_header_name(name) {
        Ok(())
    } else {
        Err(format!(
            "header name {name:?} is not a valid HTTP header name (letters, digits and !#$%&'*+-.^_`|~ only)"
        ))
    }
}

/// Whether `value` (after `${VAR}` expansion) can be sent as the value of header `name`:
/// a line break would end the header early or smuggle in another one, and the HTTP client
/// refuses any control character but a tab, which would fail every check at run time.
pub fn check_header_value(name: &str, value: &str) -> Result<(), String> {
    match value
        .bytes()
        .find(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
    {
        None => Ok(()),
        Some(b'\r' | b'\n') => Err(format!("header {name:?}: the value contains a line break")),
        Some(b) => Err(format!(
            "header {name:?}: the value contains the control character 0x{b:02x}"
        )),
    }
}

/// Whether `url` can be probed: the probe's own rules (http or https, a host, no credentials
/// in it), checked when the config is read rather than at the first check.
pub fn check_url(url: &str) -> Result<(), String> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!(
            "url {:?} must start with http:// or https://",
            mcpulse_wire::redact::url(url)
        ));
    }
    mcpulse_probe::Target::http(url)
        .map(drop)
        .map_err(|e| e.to_string())
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
        Endpoint::Url(_) => Vec::new(),
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
        flap_window: s.flap_window,
        flap_threshold: s.flap_threshold,
        reminder: s.reminder,
        era: s.era,
        security: s.security,
        labels,
        source,
        health_url: None,
    }
}
