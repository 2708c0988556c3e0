//! The leak check: what an error response to a malformed request gives away (a stack trace,
//! an internal path), by the patterns the rule documents.

use super::{Ctx, SecRule, evidence};
use crate::rules::security::LEAK_PATTERNS;
use mcpulse_wire::transcript::Step;

pub(super) fn leak_rules(c: &mut Ctx<'_>) {
    let tr = c.tr;
    let bodies = tr
        .exchanges
        .iter()
        .filter(|e| matches!(e.step, Step::MalformedRequest))
        .filter_map(|e| e.body.as_deref().map(|b| (e, b)));
    for (ex, body) in bodies {
        if let Some(what) = leak(body) {
            c.add(
                SecRule::ErrorLeak,
                format!("the error response to a malformed request contains {what}"),
                vec![evidence(ex)],
            );
            return;
        }
    }
}

/// What a body leaks, if anything: a stack trace or an internal path.
pub fn leak(body: &str) -> Option<&'static str> {
    LEAK_PATTERNS
        .iter()
        .find(|(needle, _)| body.contains(needle))
        .map(|(_, what)| *what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaks() {
        assert!(leak("Traceback (most recent call last):\n  File \"/app/x.py\"").is_some());
        assert!(
            leak("SyntaxError: Unexpected end of JSON input\n    at JSON.parse (<anonymous>)")
                .is_some()
        );
        assert!(
            leak(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#)
                .is_none()
        );
    }
}
