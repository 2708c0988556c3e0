//! Evidence: how a transcript's exchanges read in messages (`describe`, `clip`, a body's hint)
//! and the few plain facts every check family reads (the tool objects of `tools/list`, rounded
//! milliseconds, RFC 3339 dates). It owns no rule and builds no report: `report` and `security`
//! both read it, and neither reads the other's internals through it.

use crate::replies::Replies;
use mcpulse_wire::jsonrpc::{self, Message};
use mcpulse_wire::transcript::{Exchange, Outcome, Step};
use serde_json::Value;

/// A short account of how an exchange ended, for messages.
pub fn describe(ex: Option<&Exchange>) -> String {
    let Some(ex) = ex else {
        return "not sent".to_owned();
    };
    let status = ex.status().map(|s| format!("HTTP {s}")).unwrap_or_default();
    let tail = match &ex.outcome {
        // The envelope is all this needs: a hostile payload is neither built nor read here.
        Outcome::Reply { frame } => match ex
            .frames
            .get(*frame)
            .and_then(|f| jsonrpc::peek(&f.raw).ok())
            .map(|d| d.message)
        {
            Some(Message::Error { error, .. }) => {
                format!("error {} {}", error.code, clip(&error.message, 100))
            }
            _ => "a result".to_owned(),
        },
        Outcome::NoReply => match ex
            .frames
            .last()
            .and_then(|f| jsonrpc::peek(&f.raw).ok())
            .map(|d| d.message)
        {
            Some(Message::Error { error, .. }) => {
                format!("error {} {}", error.code, clip(&error.message, 100))
            }
            _ => String::new(),
        },
        Outcome::Accepted | Outcome::Fetched => String::new(),
        Outcome::Endpoint { url } => format!("endpoint {url}"),
        Outcome::Closed => "closed before a reply".to_owned(),
        Outcome::Timeout => "timed out".to_owned(),
        Outcome::TooLarge { limit } => format!("over the {limit}-byte cap"),
        Outcome::TransportError { message, .. } => message.clone(),
    };
    match (status.is_empty(), tail.is_empty()) {
        (true, true) => "no answer".to_owned(),
        (false, true) => status,
        (true, false) => tail,
        (false, false) => format!("{status}, {tail}"),
    }
}

pub(crate) fn body_hint(ex: &Exchange) -> String {
    match ex.body.as_deref() {
        Some(b) if !b.trim().is_empty() && !looks_like_html(b) => {
            format!(" ({})", clip(b.trim(), 120))
        }
        Some(b) if looks_like_html(b) => " (an HTML page)".to_owned(),
        _ => String::new(),
    }
}

pub(crate) fn content_type(ex: &Exchange) -> String {
    ex.header("content-type")
        .unwrap_or("no content type")
        .to_owned()
}

pub(crate) fn looks_like_html(b: &str) -> bool {
    let t = b.trim_start().to_ascii_lowercase();
    t.starts_with("<!doctype html")
        || t.starts_with("<html")
        || t.starts_with("<head")
        || t.starts_with("<body")
}

pub(crate) fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}

pub(crate) fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Every tool object kept from every page of `tools/list`.
pub(crate) fn all_tools<'a>(replies: &'a Replies<'_>) -> Vec<&'a Value> {
    replies
        .transcript()
        .exchanges
        .iter()
        .filter(|e| e.step == Step::ToolsList)
        .filter_map(|e| match replies.cached(e).map(|d| &d.message) {
            Some(Message::Result { result, .. }) => result.get("tools").and_then(Value::as_array),
            _ => None,
        })
        .flatten()
        .collect()
}

pub(crate) fn round(ms: f64) -> f64 {
    (ms * 1000.0).round() / 1000.0
}

/// Milliseconds since the epoch as RFC 3339 UTC with milliseconds (see `mcpulse_wire::units`,
/// which owns how times are printed; this takes the transcript's unsigned clock).
pub fn rfc3339(unix_ms: u64) -> String {
    mcpulse_wire::units::format_rfc3339(i64::try_from(unix_ms).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_000_000_123), "2026-11-18T11:06:40.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
